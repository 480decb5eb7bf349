/* lrn_cuda.cu — TensorFlow's local response normalisation across channels
 * on the GPU: the CUDA mirror of lrn.c.
 *
 * Where it sits: norm1/norm2 of the cifar10 model on a GPU tower
 * (model_cuda.cu).  Two implementations behind one LrnCuda:
 *   - cuDNN's cross-channel LRN (the default).  cuDNN's formula is
 *     y = x / (k + (alpha_c / n) * sum over a window of n channels of x^2)^beta,
 *     TensorFlow's y = x / (bias + alpha * sum over [d - r, d + r] of x^2)^beta,
 *     so n = 2r + 1, alpha_c = alpha * n, k = bias, beta = beta.  The
 *     (n_pixels, C) activations (NHWC: pixel p, channel c at p*C + c) are
 *     described as packed NCHW (n_pixels, C, 1, 1): strides (C, 1, 1, 1)
 *     put (n = p, c) at p*C + c, the same bytes, in the fully packed
 *     layout legacy LRN expects (an NHWC-strided (C, 1, C, C) descriptor is
 *     the same addresses but not "packed" to cuDNN, which may refuse it or
 *     take a slow path).
 *   - our kernels, one thread per (pixel, channel), when the parameters are
 *     outside cuDNN's range (n <= 16, k >= 1e-5, beta >= 0.01) or when asked
 *     for: lrn.c's operations in lrn.c's order (window sums d, d+1, d-1,
 *     d+2, ..., rounding made explicit so nvcc fuses nothing), saving the
 *     scale as the CPU does.
 * What it does not do: normalise across space, allocate, or synchronise.
 */
#include "model/layers_cuda.h"
#include "base/cuda_check.h"

#include <limits.h>
#include <string.h>

static unsigned blocks_for(size_t n, int threads) {
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    return (unsigned)(b < 65535u * 32u ? (b ? b : 1) : 65535u * 32u);
}

/* s^(-beta) with lrn.c's fast paths. */
__device__ static float pow_neg_beta(float s, float beta) {
    if (beta == 0.75f) {
        float q = sqrtf(s);
        return __fdiv_rn(1.0f, __fmul_rn(q, sqrtf(q)));
    }
    if (beta == 0.5f) return __fdiv_rn(1.0f, sqrtf(s));
    if (beta == 1.0f) return __fdiv_rn(1.0f, s);
    return powf(s, -beta);
}

/* sum over j in [d - r, d + r] clipped to [0, C) of v(j), in lrn.c's order:
 * v(d), then for j = 1..r: v(d + j), v(d - j). */
template <typename F>
__device__ static float window_sum(int d, int C, int r, F v) {
    float w = v(d);
    for (int j = 1; j <= r && j < C; j++) {
        if (d < C - j) w = __fadd_rn(w, v(d + j));
        if (d >= j) w = __fadd_rn(w, v(d - j));
    }
    return w;
}

__global__ static void lrn_forward_kernel(float *out, float *scale, const float *inp, Lrn p, size_t n_pixels, int C) {
    const size_t total = n_pixels * (size_t)C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t px = i / C;
        const int d = (int)(i - px * C);
        const float *x = inp + px * C;
        float s = window_sum(d, C, p.depth_radius, [&](int j) { return __fmul_rn(x[j], x[j]); });
        s = __fadd_rn(p.bias, __fmul_rn(p.alpha, s));
        scale[i] = s;
        out[i] = __fmul_rn(pow_neg_beta(s, p.beta), x[d]);
    }
}

__global__ static void lrn_backward_kernel(float *dinp, const float *scale, const float *out, const float *dout,
                                           const float *inp, Lrn p, size_t n_pixels, int C) {
    const size_t total = n_pixels * (size_t)C;
    const float k2ab = __fmul_rn(__fmul_rn(2.0f, p.alpha), p.beta);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t px = i / C;
        const int d = (int)(i - px * C);
        const float *s = scale + px * C, *y = out + px * C, *g = dout + px * C;
        /* t[j] = g[j] * y[j] / s[j], summed over d's window */
        float t = window_sum(d, C, p.depth_radius, [&](int j) { return __fdiv_rn(__fmul_rn(g[j], y[j]), s[j]); });
        float a = __fmul_rn(g[d], pow_neg_beta(s[d], p.beta));
        float b = __fmul_rn(__fmul_rn(k2ab, inp[i]), t);
        dinp[i] = __fsub_rn(a, b);
    }
}

extern "C" int lrn_cuda_init(LrnCuda *l, const Lrn *p, int C, LrnCudaImpl impl, char *err, size_t err_n_bytes) {
    memset(l, 0, sizeof *l);
    l->p = *p;
    l->C = C;
    if (C < 1 || p->depth_radius < 0) {
        snprintf(err, err_n_bytes, "lrn_cuda_init: %d channels, depth_radius %d", C, p->depth_radius);
        return -1;
    }
    const unsigned n = 2u * (unsigned)p->depth_radius + 1u;
    const int fits = n >= CUDNN_LRN_MIN_N && n <= CUDNN_LRN_MAX_N && p->bias >= CUDNN_LRN_MIN_K &&
                     p->beta >= CUDNN_LRN_MIN_BETA && p->alpha >= 0.0f;
    if (impl == LRN_CUDA_CUDNN && !fits) {
        snprintf(err, err_n_bytes,
                 "LRN depth_radius %d, bias %g, alpha %g, beta %g: outside cuDNN's range (window 2r+1 in [%d, %d], "
                 "bias >= %g, beta >= %g)",
                 p->depth_radius, p->bias, p->alpha, p->beta, CUDNN_LRN_MIN_N, CUDNN_LRN_MAX_N, CUDNN_LRN_MIN_K,
                 CUDNN_LRN_MIN_BETA);
        return -1;
    }
    l->use_cudnn = impl != LRN_CUDA_KERNEL && fits;
    if (!l->use_cudnn) return 0;
    if (CUDNN_SOFT(cudnnCreateLRNDescriptor(&l->lrn_desc), err, err_n_bytes) ||
        CUDNN_SOFT(cudnnCreateTensorDescriptor(&l->x_desc), err, err_n_bytes) ||
        CUDNN_SOFT(cudnnSetLRNDescriptor(l->lrn_desc, n, (double)p->alpha * n, (double)p->beta, (double)p->bias), err,
                   err_n_bytes)) {
        lrn_cuda_free(l);
        return -1;
    }
    return 0;
}

extern "C" int lrn_cuda_set_n_pixels(LrnCuda *l, size_t n_pixels, char *err, size_t err_n_bytes) {
    if (!l->use_cudnn || n_pixels == l->n_pixels) return 0;
    if (n_pixels < 1 || n_pixels > INT_MAX) {
        snprintf(err, err_n_bytes, "lrn_cuda_set_n_pixels: %zu pixels, cuDNN takes 1 to %d", n_pixels, INT_MAX);
        return -1;
    }
    const int C = l->C;
    /* Packed NCHW (n_pixels, C, 1, 1): strides (C, 1, 1, 1), element (p, c) at p*C + c, as the NHWC data. */
    if (CUDNN_SOFT(cudnnSetTensor4dDescriptor(l->x_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)n_pixels, C, 1, 1), err,
                   err_n_bytes)) {
        l->n_pixels = 0;
        return -1;
    }
    l->n_pixels = n_pixels;
    return 0;
}

extern "C" void lrn_cuda_free(LrnCuda *l) {
    if (l->lrn_desc) cudnnDestroyLRNDescriptor(l->lrn_desc);
    if (l->x_desc) cudnnDestroyTensorDescriptor(l->x_desc);
    l->lrn_desc = NULL;
    l->x_desc = NULL;
    l->n_pixels = 0;
}

static void check_shape(const LrnCuda *l, size_t n_pixels, int C, const char *fn) {
    if (C != l->C || (l->use_cudnn && n_pixels != l->n_pixels)) {
        fprintf(stderr, "%s: (%zu, %d) given, the layer describes (%zu, %d) (call lrn_cuda_set_n_pixels first)\n", fn,
                n_pixels, C, l->n_pixels, l->C);
        exit(2);
    }
}

extern "C" void lrn_forward_cuda(float *out, float *scale, const float *inp, const LrnCuda *l, size_t n_pixels, int C,
                                 cudnnHandle_t cudnn, cudaStream_t stream) {
    check_shape(l, n_pixels, C, "lrn_forward_cuda");
    if (l->use_cudnn) {
        const float one = 1.0f, zero = 0.0f;
        CUDNN_CHECK(cudnnLRNCrossChannelForward(cudnn, l->lrn_desc, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, l->x_desc, inp,
                                                &zero, l->x_desc, out));
        return;
    }
    const size_t n = n_pixels * (size_t)C;
    lrn_forward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, scale, inp, l->p, n_pixels, C);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void lrn_backward_cuda(float *dinp, const float *scale, const float *out, const float *dout,
                                  const float *inp, const LrnCuda *l, size_t n_pixels, int C, cudnnHandle_t cudnn,
                                  cudaStream_t stream) {
    check_shape(l, n_pixels, C, "lrn_backward_cuda");
    if (l->use_cudnn) {
        const float one = 1.0f, zero = 0.0f;
        CUDNN_CHECK(cudnnLRNCrossChannelBackward(cudnn, l->lrn_desc, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, l->x_desc, out,
                                                 l->x_desc, dout, l->x_desc, inp, &zero, l->x_desc, dinp));
        return;
    }
    const size_t n = n_pixels * (size_t)C;
    lrn_backward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(dinp, scale, out, dout, inp, l->p, n_pixels, C);
    CUDA_CHECK(cudaGetLastError());
}
