/* loss_cuda.cu — sparse softmax cross-entropy (mean over the batch) and
 * TensorFlow's L2 weight-decay term on the GPU: the CUDA mirror of loss.c.
 *
 * Where it sits: the end of both models' forward pass and the start of
 * backward on a GPU tower (model_cuda.cu).  As on the CPU, sums are in
 * double: per example in one thread, over the batch in order in one
 * thread (the batch is small), and sum(w^2) over a fixed grid of blocks
 * whose partial sums are then added in block order, so every result is
 * deterministic.  Results land in device scalars; reading them is the
 * caller's copy.
 * What it does not do: validate labels beyond yielding NAN, allocate, or
 * synchronise.
 */
#include "model/layers_cuda.h"
#include "base/cuda_check.h"

#include <math.h>

static unsigned blocks_for(size_t n, int threads) {
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    return (unsigned)(b < 65535u * 32u ? (b ? b : 1) : 65535u * 32u);
}

/* One thread per example: softmax into probs, its loss into example_loss. */
__global__ static void softmax_xent_example_kernel(float *probs, double *example_loss, const float *logits,
                                                   const int32_t *labels, int B, int K) {
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;
    const float *z = logits + (size_t)b * K;
    float *p = probs + (size_t)b * K;
    float zmax = z[0];
    for (int k = 1; k < K; k++) zmax = z[k] > zmax ? z[k] : zmax;
    double sum = 0.0;
    for (int k = 0; k < K; k++) {
        p[k] = expf(__fsub_rn(z[k], zmax));
        sum += p[k];
    }
    const float inv = (float)(1.0 / sum);
    for (int k = 0; k < K; k++) p[k] = __fmul_rn(p[k], inv);
    const int y = labels[b];
    example_loss[b] = (y < 0 || y >= K) ? (double)NAN : log(sum) - ((double)z[y] - zmax);
}

/* One thread: ce = the mean of the example losses, added in order. */
__global__ static void mean_kernel(float *ce, const double *example_loss, int B) {
    double total = 0.0;
    for (int b = 0; b < B; b++) total += example_loss[b];
    *ce = (float)(total / B);
}

__global__ static void softmax_xent_backward_kernel(float *dlogits, const float *probs, const int32_t *labels,
                                                    float dloss, int B, int K) {
    const size_t n = (size_t)B * K;
    const float scale = dloss / (float)B;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int b = (int)(i / K), k = (int)(i % K);
        float d = __fmul_rn(scale, probs[i]);
        if (labels[b] == k) d = __fsub_rn(d, scale);
        dlogits[i] = d;
    }
}

#define L2_THREADS 256

/* Block k: the sum of w[i]^2 (in double) over i = k*256 + t + j*grid*256,
 * reduced over the block's threads as a fixed tree. */
__global__ static void l2_partial_kernel(double *partials, const float *w, size_t n) {
    __shared__ double sh[L2_THREADS];
    double s = 0.0;
    for (size_t i = blockIdx.x * (size_t)L2_THREADS + threadIdx.x; i < n; i += (size_t)gridDim.x * L2_THREADS)
        s += (double)w[i] * w[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int half = L2_THREADS / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half) sh[threadIdx.x] += sh[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = sh[0];
}

__global__ static void l2_final_kernel(float *loss, const double *partials, int n_partials, float wd) {
    double s = 0.0;
    for (int k = 0; k < n_partials; k++) s += partials[k];
    *loss = (float)(wd * s * 0.5);
}

__global__ static void l2_backward_kernel(float *dw, const float *w, size_t n, float wd) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dw[i] = __fadd_rn(dw[i], __fmul_rn(wd, w[i]));
}

extern "C" void softmax_xent_forward_cuda(float *ce, float *probs, double *example_loss, const float *logits,
                                          const int32_t *labels, int B, int K, cudaStream_t stream) {
    softmax_xent_example_kernel<<<blocks_for((size_t)B, 128), 128, 0, stream>>>(probs, example_loss, logits, labels, B, K);
    CUDA_CHECK(cudaGetLastError());
    mean_kernel<<<1, 1, 0, stream>>>(ce, example_loss, B);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void softmax_xent_backward_cuda(float *dlogits, const float *probs, const int32_t *labels, float dloss,
                                           int B, int K, cudaStream_t stream) {
    const size_t n = (size_t)B * K;
    softmax_xent_backward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(dlogits, probs, labels, dloss, B, K);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void l2_loss_forward_cuda(float *loss, double *partials, const float *w, size_t n, float wd,
                                     cudaStream_t stream) {
    l2_partial_kernel<<<L2_LOSS_CUDA_BLOCKS, L2_THREADS, 0, stream>>>(partials, w, n);
    CUDA_CHECK(cudaGetLastError());
    l2_final_kernel<<<1, 1, 0, stream>>>(loss, partials, L2_LOSS_CUDA_BLOCKS, wd);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void l2_loss_backward_cuda(float *dw, const float *w, size_t n, float wd, cudaStream_t stream) {
    l2_backward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(dw, w, n, wd);
    CUDA_CHECK(cudaGetLastError());
}
