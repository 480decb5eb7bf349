/* depthwise.c — Keras's DepthwiseConv2D (depth multiplier 1, no bias), NHWC
 * with the (KH, KW, C, 1) kernel, as readable direct loops.
 *
 * Where it sits: MobileNetV2's *_depthwise layers (3x3, stride 1 SAME, or
 * stride 2 VALID after ZeroPadding2D).  Every output pixel is KH * KW
 * multiply-adds per channel; the channel loop is innermost and contiguous in
 * NHWC (and in the kernel), so it vectorises.  These loops are the test
 * oracle of depthwise_cuda.cu.
 * What it does not do: depth multipliers other than 1, a bias, dilation,
 * allocate (the per-thread weight-gradient partials live in the caller's
 * scratch).
 */
#include "model/layers.h"

#include <omp.h>
#include <string.h>

int depthwise_init(Depthwise *d, int H, int W, int C, int KH, int KW, int stride, Padding padding) {
    memset(d, 0, sizeof *d);
    if (C <= 0) return -1;
    d->H = H; d->W = W; d->C = C;
    d->KH = KH; d->KW = KW; d->stride = stride;
    d->padding = padding;
    if (tf_padding(&d->OH, &d->pad_top, H, KH, stride, padding) != 0) return -1;
    if (tf_padding(&d->OW, &d->pad_left, W, KW, stride, padding) != 0) return -1;
    return 0;
}

static size_t dw_partial_n_floats(const Depthwise *d) {
    return ((size_t)d->KH * d->KW * d->C + 15) & ~(size_t)15;
}

size_t depthwise_scratch_n_floats(const Depthwise *d, int n_threads) {
    return (size_t)(n_threads > 0 ? n_threads : 1) * dw_partial_n_floats(d);
}

void depthwise_forward(float *out, const float *inp, const float *weight, const Depthwise *d, int B) {
    const int C = d->C;
    const size_t in_n = (size_t)d->H * d->W * C, out_n = (size_t)d->OH * d->OW * C;
#pragma omp parallel for schedule(static) if ((size_t)B * out_n >= 32768)
    for (int b = 0; b < B; b++) {
        const float *x = inp + (size_t)b * in_n;
        for (int oh = 0; oh < d->OH; oh++) {
            for (int ow = 0; ow < d->OW; ow++) {
                float *y = out + (size_t)b * out_n + ((size_t)oh * d->OW + ow) * C;
                for (int c = 0; c < C; c++) y[c] = 0.0f;
                for (int kh = 0; kh < d->KH; kh++) {
                    const int ih = oh * d->stride - d->pad_top + kh;
                    if (ih < 0 || ih >= d->H) continue;
                    for (int kw = 0; kw < d->KW; kw++) {
                        const int iw = ow * d->stride - d->pad_left + kw;
                        if (iw < 0 || iw >= d->W) continue;
                        const float *xp = x + ((size_t)ih * d->W + iw) * C;
                        const float *wp = weight + ((size_t)kh * d->KW + kw) * C;
                        for (int c = 0; c < C; c++) y[c] += xp[c] * wp[c];
                    }
                }
            }
        }
    }
}

void depthwise_backward(float *dinp, float *dweight, float *scratch, const float *dout,
                        const float *inp, const float *weight, const Depthwise *d, int B,
                        int n_threads) {
    const int C = d->C;
    const size_t in_n = (size_t)d->H * d->W * C, out_n = (size_t)d->OH * d->OW * C;
    const size_t w_n = (size_t)d->KH * d->KW * C, part_n = dw_partial_n_floats(d);
    int team = omp_get_max_threads();
    if (n_threads < 1) n_threads = 1;
    if (team > n_threads) team = n_threads;
    if ((size_t)B * out_n < 32768) team = 1; /* a parallel region would cost more than the work */
#pragma omp parallel num_threads(team)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        float *dw_t = scratch + (size_t)t * part_n; /* (KH, KW, C) */
        memset(dw_t, 0, sizeof(float) * w_n);
#pragma omp for schedule(static)
        for (int b = 0; b < B; b++) {
            const float *x = inp + (size_t)b * in_n;
            float *dx = dinp ? dinp + (size_t)b * in_n : NULL;
            if (dx) memset(dx, 0, sizeof(float) * in_n);
            for (int oh = 0; oh < d->OH; oh++) {
                for (int ow = 0; ow < d->OW; ow++) {
                    const float *g = dout + (size_t)b * out_n + ((size_t)oh * d->OW + ow) * C;
                    for (int kh = 0; kh < d->KH; kh++) {
                        const int ih = oh * d->stride - d->pad_top + kh;
                        if (ih < 0 || ih >= d->H) continue;
                        for (int kw = 0; kw < d->KW; kw++) {
                            const int iw = ow * d->stride - d->pad_left + kw;
                            if (iw < 0 || iw >= d->W) continue;
                            const size_t px = ((size_t)ih * d->W + iw) * C;
                            const size_t tap = ((size_t)kh * d->KW + kw) * C;
                            for (int c = 0; c < C; c++) dw_t[tap + c] += g[c] * x[px + c];
                            if (dx)
                                for (int c = 0; c < C; c++) dx[px + c] += g[c] * weight[tap + c];
                        }
                    }
                }
            }
        }
        /* The implicit barrier above completes every partial; sum them in
         * thread order (deterministic for a given team size). */
#pragma omp for schedule(static)
        for (size_t i = 0; i < w_n; i++) {
            float s = 0.0f;
            for (int u = 0; u < nt; u++) s += scratch[(size_t)u * part_n + i];
            dweight[i] += s;
        }
    }
}
