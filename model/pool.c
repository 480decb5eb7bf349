/* pool.c — TensorFlow's max_pool, NHWC, with the winner's index saved.
 *
 * Where it sits: pool1/pool2 of both models (model.c).  Forward records, per
 * output cell, which input cell won (its index inside the image), so
 * backward is a scatter with no comparison.  SAME padding cells never win:
 * each window starts from its first real cell.
 * What it does not do: average pooling, or allocate.
 */
#include "model/layers.h"

#include <string.h>

int maxpool_init(MaxPool *p, int H, int W, int C, int KH, int KW,
                 int stride_h, int stride_w, Padding padding) {
    memset(p, 0, sizeof *p);
    if (C <= 0) return -1;
    p->H = H; p->W = W; p->C = C;
    p->KH = KH; p->KW = KW; p->stride_h = stride_h; p->stride_w = stride_w;
    p->padding = padding;
    if (tf_padding(&p->OH, &p->pad_top, H, KH, stride_h, padding) != 0) return -1;
    if (tf_padding(&p->OW, &p->pad_left, W, KW, stride_w, padding) != 0) return -1;
    /* With TensorFlow's rules every window holds at least one real cell:
     * pad_before <= (k - 1) / 2 < k, and the last window starts before the end. */
    return 0;
}

/* One window cell against the running maximum of C channels, branch-free
 * (an all-ones mask where the cell wins) so that the loop vectorises. */
static void take_max(float *restrict best, int32_t *restrict arg, const float *restrict v, int32_t base, int C) {
    for (int c = 0; c < C; c++) {
        float x = v[c], b = best[c];
        int32_t win = -(int32_t)(x > b);
        best[c] = x > b ? x : b;
        arg[c] = (arg[c] & ~win) | ((base + c) & win);
    }
}

void maxpool_forward(float *out, int32_t *argmax, const float *inp, const MaxPool *p, int B) {
    const int C = p->C;
    const size_t in_n = (size_t)p->H * p->W * C, out_n = (size_t)p->OH * p->OW * C;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++) {
        const float *in_b = inp + (size_t)b * in_n;
        for (int oh = 0; oh < p->OH; oh++) {
            int h0 = oh * p->stride_h - p->pad_top;
            int h_lo = h0 < 0 ? 0 : h0, h_hi = h0 + p->KH < p->H ? h0 + p->KH : p->H;
            for (int ow = 0; ow < p->OW; ow++) {
                int w0 = ow * p->stride_w - p->pad_left;
                int w_lo = w0 < 0 ? 0 : w0, w_hi = w0 + p->KW < p->W ? w0 + p->KW : p->W;
                size_t o = (size_t)b * out_n + ((size_t)oh * p->OW + ow) * C;
                float *best = out + o;
                int32_t *arg = argmax + o;
                int32_t first = (int32_t)(((size_t)h_lo * p->W + w_lo) * C);
                for (int c = 0; c < C; c++) {
                    best[c] = in_b[first + c];
                    arg[c] = first + c;
                }
                for (int h = h_lo; h < h_hi; h++) {
                    for (int w = (h == h_lo ? w_lo + 1 : w_lo); w < w_hi; w++) {
                        int32_t base = (int32_t)(((size_t)h * p->W + w) * C);
                        take_max(best, arg, in_b + base, base, C);
                    }
                }
            }
        }
    }
}

void maxpool_backward(float *dinp, const int32_t *argmax, const float *dout, const MaxPool *p, int B) {
    const size_t in_n = (size_t)p->H * p->W * p->C, out_n = (size_t)p->OH * p->OW * p->C;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++) {
        float *d_b = dinp + (size_t)b * in_n;
        const int32_t *a_b = argmax + (size_t)b * out_n;
        const float *g_b = dout + (size_t)b * out_n;
        memset(d_b, 0, sizeof(float) * in_n);
        for (size_t i = 0; i < out_n; i++) d_b[a_b[i]] += g_b[i];
    }
}
