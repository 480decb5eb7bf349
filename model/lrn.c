/* lrn.c — TensorFlow's local response normalisation (tf.nn.lrn) across
 * channels, NHWC.
 *
 * Where it sits: norm1/norm2 of the cifar10 model (model.c).
 * Definition (as TensorFlow, no division by the window size):
 *   sqr_sum[d] = sum_{j = max(0, d-r)}^{min(C-1, d+r)} x[j]^2
 *   scale[d]   = bias + alpha * sqr_sum[d]
 *   out[d]     = x[d] * scale[d]^(-beta)
 * Window sums are done as 2r+1 shifted, contiguous (vectorisable) passes per
 * pixel; beta = 0.75 (cifar10) avoids pow: s^-0.75 = 1 / (sqrt(s) * sqrt(sqrt(s))).
 * What it does not do: allocate (backward keeps C floats per thread on the
 * stack), or normalise across space.
 */
#include "model/layers.h"

#include <math.h>
#include <string.h>

/* y[d] = s[d]^(-beta) for d < C, with fast paths for the usual betas. */
static void pow_neg_beta(float *y, const float *s, int C, float beta) {
    if (beta == 0.75f) {
        for (int d = 0; d < C; d++) { float q = sqrtf(s[d]); y[d] = 1.0f / (q * sqrtf(q)); }
    } else if (beta == 0.5f) {
        for (int d = 0; d < C; d++) y[d] = 1.0f / sqrtf(s[d]);
    } else if (beta == 1.0f) {
        for (int d = 0; d < C; d++) y[d] = 1.0f / s[d];
    } else {
        for (int d = 0; d < C; d++) y[d] = powf(s[d], -beta);
    }
}

/* w[d] = sum over j in [d - r, d + r] clipped to [0, C) of v[j]; w must not alias v. */
static void window_sum(float *w, const float *v, int C, int r) {
    memcpy(w, v, sizeof(float) * C);
    for (int j = 1; j <= r && j < C; j++) {
        for (int d = 0; d < C - j; d++) w[d] += v[d + j];
        for (int d = j; d < C; d++) w[d] += v[d - j];
    }
}

void lrn_forward(float *out, float *scale, const float *inp, const Lrn *p, size_t n_pixels, int C) {
    const int r = p->depth_radius;
    const float bias = p->bias, alpha = p->alpha, beta = p->beta;
#pragma omp parallel for schedule(static)
    for (size_t px = 0; px < n_pixels; px++) {
        const float *x = inp + px * C;
        float *s = scale + px * C, *y = out + px * C;
        for (int d = 0; d < C; d++) y[d] = x[d] * x[d]; /* squares, parked in out */
        window_sum(s, y, C, r);
        for (int d = 0; d < C; d++) s[d] = bias + alpha * s[d];
        pow_neg_beta(y, s, C, beta);
        for (int d = 0; d < C; d++) y[d] *= x[d];
    }
}

void lrn_backward(float *dinp, const float *scale, const float *out, const float *dout,
                  const float *inp, const Lrn *p, size_t n_pixels, int C) {
    const int r = p->depth_radius;
    const float k2ab = 2.0f * p->alpha * p->beta, beta = p->beta;
#pragma omp parallel for schedule(static)
    for (size_t px = 0; px < n_pixels; px++) {
        const float *x = inp + px * C, *s = scale + px * C, *y = out + px * C, *g = dout + px * C;
        float *dx = dinp + px * C;
        float t[C];
        for (int d = 0; d < C; d++) t[d] = g[d] * y[d] / s[d];
        window_sum(dx, t, C, r);                 /* dx = sum over the window of t */
        for (int d = 0; d < C; d++) t[d] = dx[d];
        pow_neg_beta(dx, s, C, beta);            /* dx = scale^-beta */
        for (int d = 0; d < C; d++) dx[d] = g[d] * dx[d] - k2ab * x[d] * t[d];
    }
}
