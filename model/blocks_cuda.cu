/* blocks_cuda.cu — zero padding, ReLU6, add, global average pooling,
 * dropout and grad_accumulate on the GPU: the CUDA twin of blocks.c.
 *
 * Where it sits: the small nodes of the layer graph on a GPU tower.
 * Elementwise kernels use grid-stride loops; global average pooling sums
 * each (example, channel) over the pixels in order with __fadd_rn (the
 * CPU's additions); dropout's mask is the CPU's (the same integer hash of
 * the key and the index, the same integer threshold).
 * What it does not do: allocate, or synchronise.
 */
#include "model/layers_cuda.h"

static unsigned blocks_for(size_t n, int threads) {
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    return (unsigned)(b < 65535u * 32u ? (b ? b : 1) : 65535u * 32u);
}

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

__global__ static void accumulate_kernel(float *dst, const float *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = __fadd_rn(dst[i], src[i]);
}

extern "C" void grad_accumulate_cuda(float *dst, const float *src, size_t n, cudaStream_t stream) {
    accumulate_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(dst, src, n);
    CUDA_CHECK(cudaGetLastError());
}

/* ---- zero padding: one thread per output cell (forward), per input cell (backward) ---- */

__global__ static void zeropad_forward_kernel(float *out, const float *inp, ZeroPad z, int B) {
    const size_t total = (size_t)B * z.OH * z.OW * z.C;
    GRID_STRIDE(o, total) {
        const int c = (int)(o % z.C);
        size_t t = o / z.C;
        const int w = (int)(t % z.OW) - z.left;
        t /= z.OW;
        const int h = (int)(t % z.OH) - z.top;
        const size_t b = t / z.OH;
        out[o] = (h >= 0 && h < z.H && w >= 0 && w < z.W) ? inp[((b * z.H + h) * z.W + w) * z.C + c] : 0.0f;
    }
}

__global__ static void zeropad_backward_kernel(float *dinp, const float *dout, ZeroPad z, int B) {
    const size_t total = (size_t)B * z.H * z.W * z.C;
    GRID_STRIDE(i, total) {
        const int c = (int)(i % z.C);
        size_t t = i / z.C;
        const int w = (int)(t % z.W);
        t /= z.W;
        const int h = (int)(t % z.H);
        const size_t b = t / z.H;
        dinp[i] = dout[((b * z.OH + h + z.top) * z.OW + w + z.left) * z.C + c];
    }
}

extern "C" void zeropad_forward_cuda(float *out, const float *inp, const ZeroPad *z, int B, cudaStream_t stream) {
    const size_t n = (size_t)B * z->OH * z->OW * z->C;
    zeropad_forward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, inp, *z, B);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void zeropad_backward_cuda(float *dinp, const float *dout, const ZeroPad *z, int B, cudaStream_t stream) {
    const size_t n = (size_t)B * z->H * z->W * z->C;
    zeropad_backward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(dinp, dout, *z, B);
    CUDA_CHECK(cudaGetLastError());
}

/* ---- ReLU6 ---- */

__global__ static void relu6_forward_kernel(float *out, const float *inp, size_t n) {
    GRID_STRIDE(i, n) {
        const float x = inp[i] > 0.0f ? inp[i] : 0.0f;
        out[i] = x < 6.0f ? x : 6.0f;
    }
}

__global__ static void relu6_backward_kernel(float *dinp, const float *out, const float *dout, size_t n) {
    GRID_STRIDE(i, n) dinp[i] = (out[i] > 0.0f && out[i] < 6.0f) ? dout[i] : 0.0f;
}

extern "C" void relu6_forward_cuda(float *out, const float *inp, size_t n, cudaStream_t stream) {
    relu6_forward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, inp, n);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void relu6_backward_cuda(float *dinp, const float *out, const float *dout, size_t n, cudaStream_t stream) {
    relu6_backward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(dinp, out, dout, n);
    CUDA_CHECK(cudaGetLastError());
}

/* ---- residual addition ---- */

__global__ static void add_kernel(float *out, const float *a, const float *b, size_t n) {
    GRID_STRIDE(i, n) out[i] = __fadd_rn(a[i], b[i]);
}

extern "C" void add_forward_cuda(float *out, const float *a, const float *b, size_t n, cudaStream_t stream) {
    add_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, a, b, n);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void add_backward_cuda(float *da, float *db, const float *dout, size_t n, cudaStream_t stream) {
    if (da && da != dout) CUDA_CHECK(cudaMemcpyAsync(da, dout, sizeof(float) * n, cudaMemcpyDeviceToDevice, stream));
    if (db && db != dout) CUDA_CHECK(cudaMemcpyAsync(db, dout, sizeof(float) * n, cudaMemcpyDeviceToDevice, stream));
}

/* out = act(a + b), as add_kernel then relu_forward_kernel / relu6_forward_kernel. */
__global__ static void add_act_kernel(float *out, const float *a, const float *b, int act, size_t n) {
    GRID_STRIDE(i, n) out[i] = act_apply_cuda(__fadd_rn(a[i], b[i]), act);
}

/* da = db = dout masked by act at out, as relu_backward_kernel / relu6_backward_kernel; either may be NULL. */
__global__ static void add_act_backward_kernel(float *da, float *db, const float *out, const float *dout, int act,
                                               size_t n) {
    GRID_STRIDE(i, n) {
        const float g = act_grad_cuda(dout, out, i, act);
        if (da) da[i] = g;
        if (db) db[i] = g;
    }
}

extern "C" void add_act_forward_cuda(float *out, const float *a, const float *b, Activation act, size_t n,
                                     cudaStream_t stream) {
    if (act == ACT_NONE) {
        add_forward_cuda(out, a, b, n, stream);
        return;
    }
    add_act_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, a, b, (int)act, n);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void add_act_backward_cuda(float *da, float *db, const float *out, const float *dout, Activation act,
                                      size_t n, cudaStream_t stream) {
    if (act == ACT_NONE) {
        add_backward_cuda(da, db, dout, n, stream);
        return;
    }
    if (!da && !db) return;
    add_act_backward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(da, db, out, dout, (int)act, n);
    CUDA_CHECK(cudaGetLastError());
}

/* ---- global average pooling ---- */

__global__ static void gap_forward_kernel(float *out, const float *inp, int B, int n_pixels, int C) {
    const size_t total = (size_t)B * C;
    GRID_STRIDE(o, total) {
        const size_t b = o / C;
        const int c = (int)(o % C);
        float s = 0.0f;
        for (int p = 0; p < n_pixels; p++) s = __fadd_rn(s, inp[(b * n_pixels + p) * C + c]);
        out[o] = __fdiv_rn(s, (float)n_pixels);
    }
}

__global__ static void gap_backward_kernel(float *dinp, const float *dout, int n_pixels, int C, size_t n) {
    GRID_STRIDE(i, n) {
        const size_t b = i / ((size_t)n_pixels * C);
        const int c = (int)(i % C);
        dinp[i] = __fdiv_rn(dout[b * C + c], (float)n_pixels);
    }
}

extern "C" void global_avgpool_forward_cuda(float *out, const float *inp, int B, int n_pixels, int C,
                                            cudaStream_t stream) {
    gap_forward_kernel<<<blocks_for((size_t)B * C, 128), 128, 0, stream>>>(out, inp, B, n_pixels, C);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void global_avgpool_backward_cuda(float *dinp, const float *dout, int B, int n_pixels, int C,
                                             cudaStream_t stream) {
    const size_t n = (size_t)B * n_pixels * C;
    gap_backward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(dinp, dout, n_pixels, C, n);
    CUDA_CHECK(cudaGetLastError());
}

/* ---- dropout: the CPU's hash (blocks.c) ---- */

__device__ static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

__global__ static void dropout_kernel(float *out, const float *inp, uint64_t key, uint32_t threshold, float scale,
                                      size_t n) {
    GRID_STRIDE(i, n) {
        const int keep = (uint32_t)(mix64(key + ((uint64_t)i + 1) * 0x9E3779B97F4A7C15ULL) >> 40) >= threshold;
        out[i] = keep ? __fmul_rn(inp[i], scale) : 0.0f;
    }
}

extern "C" void dropout_forward_cuda(float *out, const float *inp, const Dropout *d, uint64_t key, int training,
                                     size_t n, cudaStream_t stream) {
    if (!training) {
        if (out != inp) CUDA_CHECK(cudaMemcpyAsync(out, inp, sizeof(float) * n, cudaMemcpyDeviceToDevice, stream));
        return;
    }
    dropout_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, inp, key, d->threshold, d->scale, n);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void dropout_backward_cuda(float *dinp, const float *dout, const Dropout *d, uint64_t key, int training,
                                      size_t n, cudaStream_t stream) {
    dropout_forward_cuda(dinp, dout, d, key, training, n, stream);
}
