/* activations_cuda.cu — bias add, relu and the bias gradient on the GPU:
 * the CUDA mirror of activations.c, plus the fused and many-row forms the
 * GPU conv2d and dense layers use.
 *
 * Where it sits: building blocks of conv2d_cuda.cu and dense_cuda.cu (no
 * library call fits a bias add + relu on NHWC in one pass).  Elementwise
 * kernels use grid-stride loops.  Additions are written with __fadd_rn and
 * friends where the CPU's expression could otherwise be contracted into a
 * fused multiply-add by nvcc, so the results are the CPU's.
 * What it does not do: allocate, or synchronise; the column sums are
 * deterministic (fixed order), never atomics.
 */
#include "model/layers_cuda.h"
#include "base/cuda_check.h"

static unsigned blocks_for(size_t n, int threads) {
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    return (unsigned)(b < 65535u * 32u ? (b ? b : 1) : 65535u * 32u);
}

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

__global__ static void bias_add_kernel(float *out, const float *inp, const float *bias, size_t n, int C) {
    GRID_STRIDE(i, n) out[i] = __fadd_rn(inp[i], bias[i % C]);
}

__global__ static void bias_act_kernel(float *x, const float *bias, size_t n, int C, int relu) {
    GRID_STRIDE(i, n) {
        float v = bias ? __fadd_rn(x[i], bias[i % C]) : x[i];
        x[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
    }
}

__global__ static void relu_forward_kernel(float *out, const float *inp, size_t n) {
    GRID_STRIDE(i, n) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

__global__ static void relu_backward_kernel(float *dinp, const float *out, const float *dout, size_t n) {
    GRID_STRIDE(i, n) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

/* One thread per column, rows in order: the CPU's additions exactly. */
__global__ static void bias_add_backward_kernel(float *dbias, const float *dout, size_t n_rows, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = dbias[c];
    for (size_t r = 0; r < n_rows; r++) s = __fadd_rn(s, dout[r * C + c]);
    dbias[c] = s;
}

/* Stage 1 of bias_grad_cuda: block (32, 8) sums rows [chunk * rows_per_chunk,
 * +rows_per_chunk) of 32 columns; thread (x, y) takes every 8th row from y,
 * then row 0 of the block adds the 8 partial sums in order. */
__global__ static void bias_grad_partial_kernel(float *partials, const float *dout, size_t n_rows, int C,
                                                size_t rows_per_chunk) {
    __shared__ float sh[8][32];
    const int c = blockIdx.x * 32 + threadIdx.x;
    const size_t r0 = blockIdx.y * rows_per_chunk;
    const size_t r1 = r0 + rows_per_chunk < n_rows ? r0 + rows_per_chunk : n_rows;
    float s = 0.0f;
    if (c < C)
        for (size_t r = r0 + threadIdx.y; r < r1; r += 8) s += dout[r * C + c];
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t = sh[0][threadIdx.x];
        for (int k = 1; k < 8; k++) t += sh[k][threadIdx.x];
        partials[(size_t)blockIdx.y * C + c] = t;
    }
}

/* Stage 2: dbias[c] = the chunks' partial sums of column c, in chunk order. */
__global__ static void bias_grad_final_kernel(float *dbias, const float *partials, int n_chunks, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int k = 0; k < n_chunks; k++) s += partials[(size_t)k * C + c];
    dbias[c] = s;
}

extern "C" void bias_add_forward_cuda(float *out, const float *inp, const float *bias, size_t n_rows, int C,
                                      cudaStream_t stream) {
    const size_t n = n_rows * (size_t)C;
    bias_add_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, inp, bias, n, C);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void bias_add_backward_cuda(float *dbias, const float *dout, size_t n_rows, int C, cudaStream_t stream) {
    bias_add_backward_kernel<<<blocks_for((size_t)C, 128), 128, 0, stream>>>(dbias, dout, n_rows, C);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void relu_forward_cuda(float *out, const float *inp, size_t n, cudaStream_t stream) {
    relu_forward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, inp, n);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void relu_backward_cuda(float *dinp, const float *out, const float *dout, size_t n, cudaStream_t stream) {
    relu_backward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(dinp, out, dout, n);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void bias_act_forward_cuda(float *x, const float *bias, size_t n_rows, int C, Activation act,
                                      cudaStream_t stream) {
    const size_t n = n_rows * (size_t)C;
    bias_act_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, bias, n, C, act == ACT_RELU);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void bias_grad_cuda(float *dbias, float *partials, const float *dout, size_t n_rows, int C,
                               cudaStream_t stream) {
    /* Chunks of at least 64 rows, at most BIAS_GRAD_CUDA_MAX_CHUNKS of them:
     * a function of (n_rows) only, so the sum order is fixed. */
    size_t n_chunks = (n_rows + 63) / 64;
    if (n_chunks > BIAS_GRAD_CUDA_MAX_CHUNKS) n_chunks = BIAS_GRAD_CUDA_MAX_CHUNKS;
    if (n_chunks < 1) n_chunks = 1;
    const size_t rows_per_chunk = (n_rows + n_chunks - 1) / n_chunks;
    dim3 grid((unsigned)((C + 31) / 32), (unsigned)n_chunks), block(32, 8);
    bias_grad_partial_kernel<<<grid, block, 0, stream>>>(partials, dout, n_rows, C, rows_per_chunk);
    CUDA_CHECK(cudaGetLastError());
    bias_grad_final_kernel<<<blocks_for((size_t)C, 128), 128, 0, stream>>>(dbias, partials, (int)n_chunks, C);
    CUDA_CHECK(cudaGetLastError());
}
