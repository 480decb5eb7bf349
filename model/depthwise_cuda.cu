/* depthwise_cuda.cu — Keras's DepthwiseConv2D (depth multiplier 1, no bias)
 * on the GPU, NHWC with the (KH, KW, C) kernel: the CUDA twin of
 * depthwise.c, as direct kernels.
 *
 * Where it sits: MobileNetV2's *_depthwise layers on a GPU tower.
 * Forward: one thread per output cell, taps in the CPU's order.  Backward:
 * dinp by gathering (one thread per input cell, the taps that read it, no
 * atomics); dweight by fixed chunks of output pixels per (tap, channel)
 * column, the chunks then added in order into dweight (ADDED, as the CPU).
 * Why not cuDNN's grouped convolution: layers_cuda.h.
 * What it does not do: allocate, synchronise, depth multipliers other than 1.
 */
#include "model/layers_cuda.h"

static unsigned blocks_for(size_t n, int threads) {
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    return (unsigned)(b < 65535u * 32u ? (b ? b : 1) : 65535u * 32u);
}

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

__global__ static void dw_forward_kernel(float *out, const float *inp, const float *weight, Depthwise d, int B) {
    const int C = d.C;
    const size_t total = (size_t)B * d.OH * d.OW * C;
    GRID_STRIDE(o, total) {
        const int c = (int)(o % C);
        size_t t = o / C;
        const int ow = (int)(t % d.OW);
        t /= d.OW;
        const int oh = (int)(t % d.OH);
        const size_t b = t / d.OH;
        float s = 0.0f;
        for (int kh = 0; kh < d.KH; kh++) {
            const int ih = oh * d.stride - d.pad_top + kh;
            if (ih < 0 || ih >= d.H) continue;
            for (int kw = 0; kw < d.KW; kw++) {
                const int iw = ow * d.stride - d.pad_left + kw;
                if (iw < 0 || iw >= d.W) continue;
                s = __fmaf_rn(inp[((b * d.H + ih) * d.W + iw) * C + c], weight[((size_t)kh * d.KW + kw) * C + c], s);
            }
        }
        out[o] = s;
    }
}

/* One thread per input cell: the output cells (oh, ow) and taps (kh, kw)
 * with oh * stride - pad_top + kh == ih (and the same for columns). */
__global__ static void dw_backward_input_kernel(float *dinp, const float *dout, const float *weight, Depthwise d,
                                                int B) {
    const int C = d.C;
    const size_t total = (size_t)B * d.H * d.W * C;
    GRID_STRIDE(i, total) {
        const int c = (int)(i % C);
        size_t t = i / C;
        const int iw = (int)(t % d.W);
        t /= d.W;
        const int ih = (int)(t % d.H);
        const size_t b = t / d.H;
        float s = 0.0f;
        for (int kh = 0; kh < d.KH; kh++) {
            const int num_h = ih + d.pad_top - kh;
            if (num_h < 0 || num_h % d.stride) continue;
            const int oh = num_h / d.stride;
            if (oh >= d.OH) continue;
            for (int kw = 0; kw < d.KW; kw++) {
                const int num_w = iw + d.pad_left - kw;
                if (num_w < 0 || num_w % d.stride) continue;
                const int ow = num_w / d.stride;
                if (ow >= d.OW) continue;
                s = __fmaf_rn(dout[((b * d.OH + oh) * d.OW + ow) * C + c], weight[((size_t)kh * d.KW + kw) * C + c], s);
            }
        }
        dinp[i] = s;
    }
}

/* Stage 1 of dweight: block (32, 8) covers 32 columns j = tap * C + c of
 * chunk blockIdx.y of the B * OH * OW output pixels; thread (x, y) takes
 * every 8th pixel from y; row 0 adds the 8 partials in order. */
__global__ static void dw_weight_partial_kernel(float *partials, const float *dout, const float *inp, Depthwise d,
                                                int B, size_t px_per_chunk) {
    __shared__ float sh[8][32];
    const int C = d.C, n_cols = d.KH * d.KW * C;
    const int j = blockIdx.x * 32 + threadIdx.x;
    const size_t n_px = (size_t)B * d.OH * d.OW;
    const size_t p0 = blockIdx.y * px_per_chunk;
    const size_t p1 = p0 + px_per_chunk < n_px ? p0 + px_per_chunk : n_px;
    float s = 0.0f;
    if (j < n_cols) {
        const int c = j % C, tap = j / C, kh = tap / d.KW, kw = tap % d.KW;
        for (size_t p = p0 + threadIdx.y; p < p1; p += 8) {
            const int ow = (int)(p % d.OW);
            const int oh = (int)(p / d.OW % d.OH);
            const size_t b = p / ((size_t)d.OW * d.OH);
            const int ih = oh * d.stride - d.pad_top + kh, iw = ow * d.stride - d.pad_left + kw;
            if (ih < 0 || ih >= d.H || iw < 0 || iw >= d.W) continue;
            s = __fmaf_rn(dout[p * C + c], inp[((b * d.H + ih) * d.W + iw) * C + c], s);
        }
    }
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && j < n_cols) {
        float t = sh[0][threadIdx.x];
        for (int k = 1; k < 8; k++) t = __fadd_rn(t, sh[k][threadIdx.x]);
        partials[(size_t)blockIdx.y * n_cols + j] = t;
    }
}

/* Stage 2: dweight[j] += the chunks' partials of column j, in chunk order. */
__global__ static void dw_weight_final_kernel(float *dweight, const float *partials, int n_chunks, int n_cols) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_cols) return;
    float s = 0.0f;
    for (int k = 0; k < n_chunks; k++) s = __fadd_rn(s, partials[(size_t)k * n_cols + j]);
    dweight[j] = __fadd_rn(dweight[j], s);
}

static size_t dw_n_chunks(const Depthwise *d, int B) {
    const size_t n_px = (size_t)B * d->OH * d->OW;
    size_t n_chunks = (n_px + 63) / 64;
    if (n_chunks > DEPTHWISE_CUDA_MAX_CHUNKS) n_chunks = DEPTHWISE_CUDA_MAX_CHUNKS;
    return n_chunks < 1 ? 1 : n_chunks;
}

extern "C" size_t depthwise_cuda_scratch_n_bytes(const Depthwise *d, int B) {
    return dw_n_chunks(d, B) * (size_t)d->KH * d->KW * d->C * sizeof(float);
}

extern "C" void depthwise_forward_cuda(float *out, const float *inp, const float *weight, const Depthwise *d, int B,
                                       cudaStream_t stream) {
    const size_t n = (size_t)B * d->OH * d->OW * d->C;
    dw_forward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, inp, weight, *d, B);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void depthwise_backward_cuda(float *dinp, float *dweight, void *scratch, const float *dout,
                                        const float *inp, const float *weight, const Depthwise *d, int B,
                                        cudaStream_t stream) {
    if (dinp) {
        const size_t n = (size_t)B * d->H * d->W * d->C;
        dw_backward_input_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(dinp, dout, weight, *d, B);
        CUDA_CHECK(cudaGetLastError());
    }
    const int n_cols = d->KH * d->KW * d->C;
    const size_t n_chunks = dw_n_chunks(d, B), n_px = (size_t)B * d->OH * d->OW;
    const size_t px_per_chunk = (n_px + n_chunks - 1) / n_chunks;
    float *partials = (float *)scratch;
    dim3 grid((unsigned)((n_cols + 31) / 32), (unsigned)n_chunks), block(32, 8);
    dw_weight_partial_kernel<<<grid, block, 0, stream>>>(partials, dout, inp, *d, B, px_per_chunk);
    CUDA_CHECK(cudaGetLastError());
    dw_weight_final_kernel<<<blocks_for((size_t)n_cols, 128), 128, 0, stream>>>(dweight, partials, (int)n_chunks,
                                                                                n_cols);
    CUDA_CHECK(cudaGetLastError());
}
