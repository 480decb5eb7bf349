/* pool_cuda.cu — TensorFlow's max_pool on the GPU, NHWC, with the winner's
 * index saved: the CUDA mirror of pool.c.
 *
 * Where it sits: pool1/pool2 of both models on a GPU tower (model_cuda.cu).
 * Why our own kernels and not cuDNN's pooling: cuDNN pads symmetrically,
 * while TensorFlow's SAME padding of cifar10's 3x3/2 pools (24 -> 12 and
 * 12 -> 6: 1 cell of padding in total) puts it all after; these kernels use
 * the CPU's windows, so padding cells never win and the argmax is the CPU's.
 * Forward: one thread per output cell, scanning its window in the CPU's
 * order (the first maximum in row-major order wins).  Backward: one thread
 * per input cell, gathering, in output order, the gradients of the windows
 * whose winner it is — no atomics, deterministic, and the very additions
 * maxpool_backward makes, in the same order.
 * What it does not do: average pooling, allocate, or synchronise.
 */
#include "model/layers_cuda.h"
#include "base/cuda_check.h"

static unsigned blocks_for(size_t n, int threads) {
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    return (unsigned)(b < 65535u * 32u ? (b ? b : 1) : 65535u * 32u);
}

__global__ static void maxpool_forward_kernel(float *out, int32_t *argmax, const float *inp, MaxPool p, int B) {
    const int C = p.C;
    const size_t in_n = (size_t)p.H * p.W * C, out_n = (size_t)p.OH * p.OW * C;
    const size_t total = (size_t)B * out_n;
    for (size_t o = blockIdx.x * (size_t)blockDim.x + threadIdx.x; o < total; o += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)(o % C);
        size_t t = o / C;
        const int ow = (int)(t % p.OW);
        t /= p.OW;
        const int oh = (int)(t % p.OH);
        const size_t b = t / p.OH;
        const float *in_b = inp + b * in_n;
        const int h0 = oh * p.stride_h - p.pad_top, w0 = ow * p.stride_w - p.pad_left;
        const int h_lo = h0 < 0 ? 0 : h0, h_hi = h0 + p.KH < p.H ? h0 + p.KH : p.H;
        const int w_lo = w0 < 0 ? 0 : w0, w_hi = w0 + p.KW < p.W ? w0 + p.KW : p.W;
        int32_t arg = (int32_t)(((size_t)h_lo * p.W + w_lo) * C + c);
        float best = in_b[arg];
        for (int h = h_lo; h < h_hi; h++) {
            for (int w = (h == h_lo ? w_lo + 1 : w_lo); w < w_hi; w++) {
                const int32_t i = (int32_t)(((size_t)h * p.W + w) * C + c);
                const float v = in_b[i];
                if (v > best) {
                    best = v;
                    arg = i;
                }
            }
        }
        out[o] = best;
        argmax[o] = arg;
    }
}

/* Output rows (or columns) whose windows contain input row x: o with
 * o * stride - pad <= x <= o * stride - pad + k - 1, clipped to [0, n_out). */
__device__ static void windows_containing(int *lo, int *hi, int x, int pad, int k, int stride, int n_out) {
    const int a = x + pad - k + 1; /* o * stride >= a */
    *lo = a <= 0 ? 0 : (a + stride - 1) / stride;
    const int h = (x + pad) / stride; /* x + pad >= 0 always */
    *hi = h < n_out - 1 ? h : n_out - 1;
}

__global__ static void maxpool_backward_kernel(float *dinp, const int32_t *argmax, const float *dout, MaxPool p, int B) {
    const int C = p.C;
    const size_t in_n = (size_t)p.H * p.W * C, out_n = (size_t)p.OH * p.OW * C;
    const size_t total = (size_t)B * in_n;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t b = i / in_n;
        const int32_t cell = (int32_t)(i - b * in_n); /* (h * W + w) * C + c */
        const int c = cell % C;
        const int w = (cell / C) % p.W;
        const int h = cell / C / p.W;
        int oh_lo, oh_hi, ow_lo, ow_hi;
        windows_containing(&oh_lo, &oh_hi, h, p.pad_top, p.KH, p.stride_h, p.OH);
        windows_containing(&ow_lo, &ow_hi, w, p.pad_left, p.KW, p.stride_w, p.OW);
        const int32_t *a_b = argmax + b * out_n;
        const float *g_b = dout + b * out_n;
        float s = 0.0f;
        for (int oh = oh_lo; oh <= oh_hi; oh++) {
            for (int ow = ow_lo; ow <= ow_hi; ow++) {
                const size_t o = ((size_t)oh * p.OW + ow) * C + c;
                if (a_b[o] == cell) s += g_b[o];
            }
        }
        dinp[i] = s;
    }
}

extern "C" void maxpool_forward_cuda(float *out, int32_t *argmax, const float *inp, const MaxPool *p, int B,
                                     cudaStream_t stream) {
    const size_t n = (size_t)B * p->OH * p->OW * p->C;
    maxpool_forward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, argmax, inp, *p, B);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void maxpool_backward_cuda(float *dinp, const int32_t *argmax, const float *dout, const MaxPool *p, int B,
                                      cudaStream_t stream) {
    const size_t n = (size_t)B * p->H * p->W * p->C;
    maxpool_backward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(dinp, argmax, dout, *p, B);
    CUDA_CHECK(cudaGetLastError());
}
