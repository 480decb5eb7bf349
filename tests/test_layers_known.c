/* test_layers_known.c — known answers for model/layers.h: TensorFlow's
 * padding arithmetic, SAME offsets, padded max-pool cells, LRN on a
 * hand-computed case, conv2d and dense against direct double-precision
 * loops, a numerically stable cross-entropy, and the bias gradient's sums
 * (whole and by column ranges) bit for bit the row-order float sums.
 *
 * Where it sits: ctest (CPU).  Expected values come from the definitions
 * written out here with explicit numbers (in double), never from the code
 * under test.
 */
#include "gradcheck.h"
#include "model/layers.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"

static void expect_close(const char *what, double got, double want, double rtol) {
    CHECK(fabs(got - want) <= rtol * fmax(fabs(want), 1e-30) || (got == want),
           "%s: got %.9g, want %.9g", what, got, want);
}

/* ---- padding ------------------------------------------------------------------ */

static void expect_pad(int in, int k, int s, Padding pad, int want_out, int want_before) {
    int out = -7, before = -7;
    int rc = tf_padding(&out, &before, in, k, s, pad);
    CHECK(rc == 0 && out == want_out && before == want_before,
           "tf_padding(in %d, k %d, stride %d, %s) = rc %d out %d pad_before %d; want out %d pad_before %d",
           in, k, s, pad == PAD_SAME ? "SAME" : "VALID", rc, out, before, want_out, want_before);
}

static void test_padding(void) {
    /* cifar10 pools, 3x3 stride 2 SAME: 24 -> 12 -> 6 (pad_total 1, all after). */
    expect_pad(24, 3, 2, PAD_SAME, 12, 0);
    expect_pad(12, 3, 2, PAD_SAME, 6, 0);
    /* mnist pools, 2x2 stride 2 SAME: 28 -> 14 -> 7 (no padding). */
    expect_pad(28, 2, 2, PAD_SAME, 14, 0);
    expect_pad(14, 2, 2, PAD_SAME, 7, 0);
    /* 5x5 stride 1 SAME convs: pad 2 before and 2 after. */
    expect_pad(24, 5, 1, PAD_SAME, 24, 2);
    expect_pad(28, 5, 1, PAD_SAME, 28, 2);
    /* Odd cases: in 7, k 3, s 2 -> out 4, pad_total (4-1)*2+3-7 = 2: 1 before, 1 after. */
    expect_pad(7, 3, 2, PAD_SAME, 4, 1);
    /* in 7, k 4, s 1 -> out 7, pad_total 3: 1 before, 2 after (the extra goes after). */
    expect_pad(7, 4, 1, PAD_SAME, 7, 1);
    /* in 5, k 2, s 2 -> out 3, pad_total 1: 0 before, 1 after. */
    expect_pad(5, 2, 2, PAD_SAME, 3, 0);
    /* in 7, k 5, s 3 -> out 3, pad_total (3-1)*3+5-7 = 4: 2 before. */
    expect_pad(7, 5, 3, PAD_SAME, 3, 2);
    /* k < stride: in 6, k 1, s 2 -> out 3, pad_total max(4+1-6, 0) = 0. */
    expect_pad(6, 1, 2, PAD_SAME, 3, 0);
    /* VALID: out = ceil((in - k + 1) / s). */
    expect_pad(7, 3, 2, PAD_VALID, 3, 0);
    expect_pad(8, 3, 2, PAD_VALID, 3, 0);
    expect_pad(5, 5, 1, PAD_VALID, 1, 0);
    int out, before;
    CHECK(tf_padding(&out, &before, 4, 5, 1, PAD_VALID) == -1, "VALID with k > in must be rejected");
    CHECK(tf_padding(&out, &before, 0, 3, 1, PAD_SAME) == -1, "in 0 must be rejected");
    CHECK(tf_padding(&out, &before, 5, 3, 0, PAD_SAME) == -1, "stride 0 must be rejected");

    Conv2d c;
    CHECK(conv2d_init(&c, 7, 5, 3, 3, 4, 8, 2, 1, PAD_SAME, ACT_NONE) == 0 &&
           c.OH == 4 && c.pad_top == 1 && c.OW == 5 && c.pad_left == 1,
           "conv2d_init 7x5 k3x4 s(2,1) SAME: OH %d pad_top %d OW %d pad_left %d; want 4 1 5 1",
           c.OH, c.pad_top, c.OW, c.pad_left);
}

/* ---- max pool: padded cells never win -------------------------------------------- */

static void test_pool_padding(void) {
    /* 4x4x1, every value negative: x[h][w] = -(1 + 4h + w).  3x3/2 SAME gives
     * 2x2 with pad_total 1 after each dimension.  Windows: rows {0,1,2} and
     * {2,3}, columns the same.  The max of a window is its top-left real cell. */
    float x[16];
    for (int h = 0; h < 4; h++)
        for (int w = 0; w < 4; w++) x[h * 4 + w] = -(float)(1 + 4 * h + w);
    MaxPool p;
    CHECK(maxpool_init(&p, 4, 4, 1, 3, 3, 2, 2, PAD_SAME) == 0 && p.OH == 2 && p.OW == 2 && p.pad_top == 0,
           "maxpool_init 4x4 3x3/2 SAME");
    float out[4];
    int32_t arg[4];
    maxpool_forward(out, arg, x, &p, 1);
    const float want[4] = {-1.0f, -3.0f, -9.0f, -11.0f};
    const int32_t want_arg[4] = {0, 2, 8, 10};
    for (int i = 0; i < 4; i++)
        CHECK(out[i] == want[i] && arg[i] == want_arg[i], "pool out[%d] = %g (arg %d), want %g (arg %d)",
               i, out[i], arg[i], want[i], want_arg[i]);
    /* Backward routes each gradient to its winner; overlapping windows add. */
    float dout[4] = {1, 2, 3, 4}, dinp[16];
    memset(dinp, 0x7f, sizeof dinp);
    maxpool_backward(dinp, arg, dout, &p, 1);
    for (int i = 0; i < 16; i++) {
        float want_d = i == 0 ? 1 : i == 2 ? 2 : i == 8 ? 3 : i == 10 ? 4 : 0;
        CHECK(dinp[i] == want_d, "pool dinp[%d] = %g, want %g", i, dinp[i], want_d);
    }
    /* Two channels, a cell that wins two overlapping windows. 3x3 input, 3x3/2 SAME
     * gives 2x2 with 1 pad before and after?  pad_total = (2-1)*2+3-3 = 2 -> 1 before. */
    float y[18];
    for (int i = 0; i < 9; i++) { y[2 * i] = (i == 4) ? 5.0f : (float)i * 0.1f; y[2 * i + 1] = -(float)i; }
    CHECK(maxpool_init(&p, 3, 3, 2, 3, 3, 2, 2, PAD_SAME) == 0 && p.OH == 2 && p.pad_top == 1, "maxpool 3x3 SAME");
    float o2[8];
    int32_t a2[8];
    maxpool_forward(o2, a2, y, &p, 1);
    /* Channel 0: the centre (5.0) lies in all four windows. Channel 1: the
     * largest real cell of each window (-0 at (0,0); -1 at (0,1); -3; -4). */
    const float want0[4] = {5, 5, 5, 5}, want1[4] = {-0.0f, -1, -3, -4};
    for (int i = 0; i < 4; i++) {
        CHECK(o2[2 * i] == want0[i], "pool ch0 out[%d] = %g, want %g", i, o2[2 * i], want0[i]);
        CHECK(o2[2 * i + 1] == want1[i], "pool ch1 out[%d] = %g, want %g", i, o2[2 * i + 1], want1[i]);
    }
    float g2[8] = {1, 0, 1, 0, 1, 0, 1, 0}, d2[18];
    maxpool_backward(d2, a2, g2, &p, 1);
    CHECK(d2[8] == 4.0f, "the centre wins 4 windows: its gradient is 4, got %g", d2[8]);
}

/* ---- LRN ------------------------------------------------------------------------- */

static void test_lrn_hand(void) {
    /* One pixel, C = 5, depth_radius 1, bias 2, alpha 0.5, beta 0.75, x = 1..5:
     *   sqr_sum = {1+4, 1+4+9, 4+9+16, 9+16+25, 16+25} = {5, 14, 29, 50, 41}
     *   out[d] = x[d] / (2 + 0.5 * sqr_sum[d])^0.75 */
    const float x[5] = {1, 2, 3, 4, 5};
    const double want[5] = {
        1.0 / pow(2.0 + 0.5 * 5.0, 0.75), 2.0 / pow(2.0 + 0.5 * 14.0, 0.75),
        3.0 / pow(2.0 + 0.5 * 29.0, 0.75), 4.0 / pow(2.0 + 0.5 * 50.0, 0.75),
        5.0 / pow(2.0 + 0.5 * 41.0, 0.75)};
    const double want_scale[5] = {4.5, 9.0, 16.5, 27.0, 22.5};
    Lrn p = {1, 2.0f, 0.5f, 0.75f};
    float out[5], scale[5];
    lrn_forward(out, scale, x, &p, 1, 5);
    for (int d = 0; d < 5; d++) {
        expect_close("lrn hand out", out[d], want[d], 2e-6);
        expect_close("lrn hand scale", scale[d], want_scale[d], 1e-7);
    }
    /* Same input, beta 0.6 (the general pow path), radius 2:
     *   sqr_sum = {1+4+9, 1+4+9+16, 55, 4+9+16+25, 9+16+25} = {14, 30, 55, 54, 50} */
    Lrn q = {2, 1.0f, 0.1f, 0.6f};
    const double sq2[5] = {14, 30, 55, 54, 50};
    lrn_forward(out, scale, x, &q, 1, 5);
    for (int d = 0; d < 5; d++) expect_close("lrn hand r2 b0.6", out[d], x[d] / pow(1.0 + 0.1 * sq2[d], 0.6), 2e-6);
}

/* Direct transcription of TensorFlow's definition, in double. */
static void lrn_reference(double *out, const float *x, int C, int r, double bias, double alpha, double beta) {
    for (int d = 0; d < C; d++) {
        double s = 0.0;
        for (int j = d - r; j <= d + r; j++)
            if (j >= 0 && j < C) s += (double)x[j] * x[j];
        out[d] = x[d] * pow(bias + alpha * s, -beta);
    }
}

static void test_lrn_reference(void) {
    const int C = 64, n_px = 10;
    float *x = malloc(sizeof(float) * C * n_px), *out = malloc(sizeof(float) * C * n_px),
          *scale = malloc(sizeof(float) * C * n_px);
    gradcheck_fill_uniform(x, (size_t)C * n_px, -20, 20, 5);
    Lrn p = {4, 1.0f, (float)(0.001 / 9.0), 0.75f};
    lrn_forward(out, scale, x, &p, n_px, C);
    double want[64], worst = 0;
    for (int px = 0; px < n_px; px++) {
        lrn_reference(want, x + px * C, C, 4, 1.0, (double)p.alpha, 0.75);
        for (int d = 0; d < C; d++) worst = fmax(worst, fabs(out[px * C + d] - want[d]) / fmax(fabs(want[d]), 1e-3));
    }
    CHECK(worst < 1e-5, "lrn (cifar10 constants, C 64) vs double reference: worst relative error %g", worst);
    free(x); free(out); free(scale);
}

/* ---- conv2d and dense against direct loops ------------------------------------------ */

static void conv_reference(double *out, const float *in, const float *w, const float *bias, const Conv2d *c, int B) {
    for (int b = 0; b < B; b++)
        for (int oh = 0; oh < c->OH; oh++)
            for (int ow = 0; ow < c->OW; ow++)
                for (int co = 0; co < c->C_out; co++) {
                    double s = bias ? bias[co] : 0.0;
                    for (int kh = 0; kh < c->KH; kh++)
                        for (int kw = 0; kw < c->KW; kw++) {
                            int ih = oh * c->stride_h - c->pad_top + kh, iw = ow * c->stride_w - c->pad_left + kw;
                            if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                            for (int ci = 0; ci < c->C_in; ci++)
                                s += (double)in[((b * c->H + ih) * c->W + iw) * c->C_in + ci] *
                                     w[((kh * c->KW + kw) * c->C_in + ci) * c->C_out + co];
                        }
                    if (c->act == ACT_RELU && s < 0) s = 0;
                    out[((b * c->OH + oh) * c->OW + ow) * c->C_out + co] = s;
                }
}

/* The gradients of conv_reference's convolution, in double: g is the
 * output gradient after the ReLU's mask (taken from the float forward). */
static void conv_reference_backward(double *dinp, double *dw, double *db, const float *in, const float *w,
                                    const float *g, const Conv2d *c, int B) {
    memset(dinp, 0, sizeof(double) * B * c->H * c->W * c->C_in);
    memset(dw, 0, sizeof(double) * c->KH * c->KW * c->C_in * c->C_out);
    memset(db, 0, sizeof(double) * c->C_out);
    for (int b = 0; b < B; b++)
        for (int oh = 0; oh < c->OH; oh++)
            for (int ow = 0; ow < c->OW; ow++) {
                const float *gp = g + ((size_t)(b * c->OH + oh) * c->OW + ow) * c->C_out;
                for (int co = 0; co < c->C_out; co++) db[co] += gp[co];
                for (int kh = 0; kh < c->KH; kh++)
                    for (int kw = 0; kw < c->KW; kw++) {
                        int ih = oh * c->stride_h - c->pad_top + kh, iw = ow * c->stride_w - c->pad_left + kw;
                        if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                        const size_t px = ((size_t)(b * c->H + ih) * c->W + iw) * c->C_in;
                        for (int ci = 0; ci < c->C_in; ci++) {
                            const float *wp = w + ((size_t)(kh * c->KW + kw) * c->C_in + ci) * c->C_out;
                            double *dwp = dw + ((size_t)(kh * c->KW + kw) * c->C_in + ci) * c->C_out;
                            double s = 0;
                            for (int co = 0; co < c->C_out; co++) {
                                s += (double)gp[co] * wp[co];
                                dwp[co] += (double)in[px + ci] * gp[co];
                            }
                            dinp[px + ci] += s;
                        }
                    }
            }
}

/* The largest |got - want| relative to the largest |want|; infinite where
 * got holds a NaN (a float left unwritten on the NaN the test put there:
 * fmax alone would skip it).  gradcheck_rel_max_diff's rule for a double
 * reference. */
static double worst_scaled(const float *got, const double *want, size_t n) {
    double worst = 0, scale = 1e-30;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) worst = isnan(got[i]) ? INFINITY : fmax(worst, fabs(got[i] - want[i]));
    return worst / scale;
}

/* conv2d_forward and conv2d_backward (the loops) against direct loops in
 * double, the gradients written onto NaN.  Shapes whose im2col matrix
 * passes 4 MiB an image run in bands of output rows (conv2d.c's
 * band_rows). */
static void test_conv_reference(int B, int H, int W, int Ci, int KH, int KW, int Co, int sh, int sw,
                                Padding pad, Activation act, int threads, uint64_t seed) {
    Conv2d c;
    if (conv2d_init(&c, H, W, Ci, KH, KW, Co, sh, sw, pad, act) != 0) {
        CHECK(0, "conv2d_init rejected a valid shape");
        return;
    }
    size_t in_n = (size_t)B * H * W * Ci, w_n = (size_t)KH * KW * Ci * Co, out_n = (size_t)B * c.OH * c.OW * Co;
    float *in = malloc(sizeof(float) * in_n), *w = malloc(sizeof(float) * w_n), *bias = malloc(sizeof(float) * Co);
    float *out = malloc(sizeof(float) * out_n), *scratch = malloc(sizeof(float) * conv2d_scratch_n_floats(&c, threads));
    float *g = malloc(sizeof(float) * out_n), *gm = malloc(sizeof(float) * out_n);
    float *dinp = malloc(sizeof(float) * in_n), *dw = malloc(sizeof(float) * w_n), *db = malloc(sizeof(float) * Co);
    double *want = malloc(sizeof(double) * out_n), *want_dinp = malloc(sizeof(double) * in_n);
    double *want_dw = malloc(sizeof(double) * w_n), *want_db = malloc(sizeof(double) * Co);
    gradcheck_fill_uniform(in, in_n, -1, 1, seed);
    gradcheck_fill_uniform(w, w_n, -1, 1, seed + 1);
    gradcheck_fill_uniform(bias, Co, -1, 1, seed + 2);
    gradcheck_fill_uniform(g, out_n, -1, 1, seed + 3);
    for (size_t i = 0; i < in_n; i++) dinp[i] = NAN;
    for (size_t i = 0; i < w_n; i++) dw[i] = NAN;
    for (int i = 0; i < Co; i++) db[i] = NAN;
    int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    conv2d_forward(out, scratch, in, w, bias, &c, B, threads);
    conv2d_backward(dinp, dw, db, scratch, out, g, in, w, &c, B, threads);
    omp_set_num_threads(saved);
    conv_reference(want, in, w, bias, &c, B);
    for (size_t i = 0; i < out_n; i++) gm[i] = act == ACT_RELU && !(out[i] > 0) ? 0.0f : g[i];
    conv_reference_backward(want_dinp, want_dw, want_db, in, w, gm, &c, B);
    double worst = 0;
    for (size_t i = 0; i < out_n; i++) worst = fmax(worst, fabs(out[i] - want[i]));
    const double e_in = worst_scaled(dinp, want_dinp, in_n), e_w = worst_scaled(dw, want_dw, w_n);
    const double e_b = worst_scaled(db, want_db, Co);
    CHECK(worst < 1e-4 && e_in < 1e-5 && e_w < 1e-5 && e_b < 1e-5,
           "conv2d %dx%dx%d k%dx%d s(%d,%d) %s %s, %d threads: max |out - reference| = %g; scaled max error dinp %g "
           "dweight %g dbias %g", H, W, Ci, KH, KW, sh, sw, pad == PAD_SAME ? "SAME" : "VALID",
           act == ACT_RELU ? "relu" : "linear", threads, worst, e_in, e_w, e_b);
    free(in); free(w); free(bias); free(out); free(scratch); free(g); free(gm); free(dinp); free(dw); free(db);
    free(want); free(want_dinp); free(want_dw); free(want_db);
}

static void test_conv_fused_relu(void) {
    /* conv(ACT_RELU) must equal relu(conv(ACT_NONE)) bit for bit, forward
     * and backward (backward as relu_backward followed by the linear conv's). */
    Conv2d lin, fused;
    conv2d_init(&lin, 6, 7, 3, 5, 5, 8, 1, 1, PAD_SAME, ACT_NONE);
    conv2d_init(&fused, 6, 7, 3, 5, 5, 8, 1, 1, PAD_SAME, ACT_RELU);
    const int B = 3;
    size_t in_n = (size_t)B * 6 * 7 * 3, w_n = 5 * 5 * 3 * 8, out_n = (size_t)B * 6 * 7 * 8;
    float *in = malloc(sizeof(float) * in_n), *w = malloc(sizeof(float) * w_n), *bias = malloc(sizeof(float) * 8);
    float *o1 = malloc(sizeof(float) * out_n), *o2 = malloc(sizeof(float) * out_n), *g = malloc(sizeof(float) * out_n);
    float *gm = malloc(sizeof(float) * out_n), *scratch = malloc(sizeof(float) * conv2d_scratch_n_floats(&lin, 2));
    float *di1 = malloc(sizeof(float) * in_n), *di2 = malloc(sizeof(float) * in_n);
    float *dw1 = malloc(sizeof(float) * w_n), *dw2 = malloc(sizeof(float) * w_n), db1[8], db2[8];
    gradcheck_fill_uniform(in, in_n, -1, 1, 61);
    gradcheck_fill_uniform(w, w_n, -1, 1, 62);
    gradcheck_fill_uniform(bias, 8, -1, 1, 63);
    gradcheck_fill_uniform(g, out_n, -1, 1, 64);
    conv2d_forward(o1, scratch, in, w, bias, &lin, B, 2);
    relu_forward(o1, o1, out_n);
    conv2d_forward(o2, scratch, in, w, bias, &fused, B, 2);
    CHECK(memcmp(o1, o2, sizeof(float) * out_n) == 0, "fused conv+relu forward differs from relu(conv)");
    relu_backward(gm, o1, g, out_n);
    conv2d_backward(di1, dw1, db1, scratch, NULL, gm, in, w, &lin, B, 2);
    conv2d_backward(di2, dw2, db2, scratch, o2, g, in, w, &fused, B, 2);
    CHECK(memcmp(di1, di2, sizeof(float) * in_n) == 0 && memcmp(dw1, dw2, sizeof(float) * w_n) == 0 &&
           memcmp(db1, db2, sizeof db1) == 0, "fused conv+relu backward differs from relu_backward + conv backward");
    free(in); free(w); free(bias); free(o1); free(o2); free(g); free(gm); free(scratch);
    free(di1); free(di2); free(dw1); free(dw2);
}

static void test_dense_reference(void) {
    const int B = 5, n_in = 37, n_out = 11;
    Dense d = {n_in, n_out, ACT_RELU};
    float *in = malloc(sizeof(float) * B * n_in), *w = malloc(sizeof(float) * n_in * n_out);
    float bias[11], out[5 * 11];
    gradcheck_fill_uniform(in, (size_t)B * n_in, -1, 1, 71);
    gradcheck_fill_uniform(w, (size_t)n_in * n_out, -1, 1, 72);
    gradcheck_fill_uniform(bias, n_out, -1, 1, 73);
    dense_forward(out, in, w, bias, &d, B);
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < n_out; j++) {
            double s = bias[j];
            for (int i = 0; i < n_in; i++) s += (double)in[b * n_in + i] * w[i * n_out + j];
            s = s > 0 ? s : 0;
            worst = fmax(worst, fabs(out[b * n_out + j] - s));
        }
    CHECK(worst < 1e-5, "dense vs direct loop: max error %g", worst);
    free(in); free(w);
}

/* dense_backward on a product big enough to be split across threads
 * (dense.c's input_grad), against direct loops: writing onto NaN (every
 * float written), then adding onto random values (dw_add: the sgemm's beta
 * 1, the bias's sum added). */
static void test_dense_backward_reference(void) {
    const int B = 16, n_in = 515, n_out = 301; /* 2.5M multiply-adds, odd sizes */
    Dense d = {n_in, n_out, ACT_RELU};
    size_t in_n = (size_t)B * n_in, w_n = (size_t)n_in * n_out, out_n = (size_t)B * n_out;
    float *in = malloc(sizeof(float) * in_n), *w = malloc(sizeof(float) * w_n), *bias = malloc(sizeof(float) * n_out);
    float *out = malloc(sizeof(float) * out_n), *g = malloc(sizeof(float) * out_n), *dpre = malloc(sizeof(float) * out_n);
    float *dinp = malloc(sizeof(float) * in_n), *dw = malloc(sizeof(float) * w_n), *db = malloc(sizeof(float) * n_out);
    float *dw_add = malloc(sizeof(float) * w_n), *dw0 = malloc(sizeof(float) * w_n);
    float *db_add = malloc(sizeof(float) * n_out), *db0 = malloc(sizeof(float) * n_out);
    gradcheck_fill_uniform(in, in_n, -1, 1, 91);
    gradcheck_fill_uniform(w, w_n, -1, 1, 92);
    gradcheck_fill_uniform(bias, n_out, -1, 1, 93);
    gradcheck_fill_uniform(g, out_n, -1, 1, 94);
    gradcheck_fill_uniform(dw0, w_n, -1, 1, 95);
    gradcheck_fill_uniform(db0, n_out, -1, 1, 96);
    for (size_t i = 0; i < w_n; i++) dw[i] = NAN;
    for (int j = 0; j < n_out; j++) db[j] = NAN;
    memcpy(dw_add, dw0, sizeof(float) * w_n);
    memcpy(db_add, db0, sizeof(float) * n_out);
    int saved = omp_get_max_threads();
    omp_set_num_threads(2);
    dense_forward(out, in, w, bias, &d, B);
    /* dpre holds the pre-activation gradient; g stays the incoming one for both calls */
    dense_backward(dinp, dw, db, dpre, out, g, in, w, &d, B, 0);
    dense_backward(NULL, dw_add, db_add, dpre, out, g, in, w, &d, B, 1);
    omp_set_num_threads(saved);
    double e_in = 0, e_w = 0, e_b = 0, e_wa = 0, e_ba = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n_in; i++) {
            double s = 0;
            for (int j = 0; j < n_out; j++)
                if (out[b * n_out + j] > 0) s += (double)g[b * n_out + j] * w[(size_t)i * n_out + j];
            e_in = fmax(e_in, fabs(dinp[(size_t)b * n_in + i] - s));
        }
    for (int i = 0; i < n_in; i++)
        for (int j = 0; j < n_out; j++) {
            double s = 0;
            for (int b = 0; b < B; b++)
                if (out[b * n_out + j] > 0) s += (double)in[(size_t)b * n_in + i] * g[b * n_out + j];
            const size_t k = (size_t)i * n_out + j;
            e_w = fmax(e_w, isnan(dw[k]) ? INFINITY : fabs(dw[k] - s));
            e_wa = fmax(e_wa, fabs(dw_add[k] - dw0[k] - s));
        }
    for (int j = 0; j < n_out; j++) {
        double s = 0;
        for (int b = 0; b < B; b++)
            if (out[b * n_out + j] > 0) s += g[b * n_out + j];
        e_b = fmax(e_b, isnan(db[j]) ? INFINITY : fabs(db[j] - s));
        e_ba = fmax(e_ba, fabs(db_add[j] - db0[j] - s));
    }
    CHECK(e_in < 1e-4 && e_w < 1e-4 && e_b < 1e-4,
           "dense_backward (16x515x301, 2 threads) vs direct loops: max error dinp %g dweight %g dbias %g", e_in, e_w, e_b);
    CHECK(e_wa < 1e-4 && e_ba < 1e-4,
           "dense_backward adding (dw_add) onto random values vs direct loops: max error dweight %g dbias %g", e_wa,
           e_ba);
    free(in); free(w); free(bias); free(out); free(g); free(dpre); free(dinp); free(dw); free(db);
    free(dw_add); free(dw0); free(db_add); free(db0);
}

/* ---- cross-entropy ------------------------------------------------------------------ */

static void test_xent_stable(void) {
    /* logits (1000, 1001, 999), label 1: loss = log(e^-1 + 1 + e^-2);
     * logits (-1000, 0), label 0: loss = 1000 + log(1 + e^-1000) = 1000. */
    const float logits[5] = {1000, 1001, 999, -1000, 0};
    float probs3[3];
    const int32_t l1[1] = {1};
    float loss = softmax_xent_forward(probs3, logits, l1, 1, 3);
    expect_close("xent large logits", loss, log(exp(-1.0) + 1.0 + exp(-2.0)), 1e-6);
    double z = exp(-1.0) + 1.0 + exp(-2.0);
    expect_close("softmax p0", probs3[0], exp(-1.0) / z, 1e-6);
    expect_close("softmax p1", probs3[1], 1.0 / z, 1e-6);
    float probs2[2];
    const int32_t l0[1] = {0};
    loss = softmax_xent_forward(probs2, logits + 3, l0, 1, 2);
    expect_close("xent -1000", loss, 1000.0, 1e-7);
    CHECK(isfinite(loss), "xent must stay finite for large logits");
    /* Mean over the batch: the two examples together. */
    const float two[6] = {1000, 1001, 999, 3, 1, 2};
    const int32_t l2[2] = {1, 2};
    float p6[6];
    loss = softmax_xent_forward(p6, two, l2, 2, 3);
    double want = 0.5 * (log(z) + (log(exp(3.0) + exp(1.0) + exp(2.0)) - 2.0));
    expect_close("xent mean of two", loss, want, 1e-6);
    const int32_t bad[1] = {3};
    CHECK(isnan(softmax_xent_forward(probs3, logits, bad, 1, 3)), "label outside [0, K) must give NAN");
}

/* in_top_k as TensorFlow's in_top_k: ties with the k-th count, a non-finite logit fails the row. */
static void test_in_top_k(void) {
    const float row[5] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
    CHECK(in_top_k(row, 5, 1, 1) && in_top_k(row, 5, 3, 1), "both tied maxima are in the top 1");
    CHECK(!in_top_k(row, 5, 4, 1) && !in_top_k(row, 5, 4, 2) && in_top_k(row, 5, 4, 3), "the third largest");
    CHECK(!in_top_k(row, 5, 2, 4) && in_top_k(row, 5, 2, 5), "the smallest only in the top 5");
    const float tie[4] = {1.0f, 1.0f, 1.0f, 0.0f};
    CHECK(in_top_k(tie, 4, 2, 1) && !in_top_k(tie, 4, 3, 3) && in_top_k(tie, 4, 3, 4), "a three-way tie");
    float bad[3] = {0.0f, 1.0f, NAN};
    CHECK(!in_top_k(bad, 3, 1, 1) && !in_top_k(bad, 3, 0, 3), "a NaN in the row");
    bad[2] = INFINITY;
    CHECK(!in_top_k(bad, 3, 1, 3), "an infinite logit in the row");
}

/* bias_add_backward and bias_add_backward_columns against sums written out in double, then rounded the same way
 * (row by row in float, as the definition: dbias[c] += dout[r][c] in row order): every C from 1 to 75 (the
 * 32- and 8-wide blocks and the single-column tail), every column range of a 45-wide map, with a start value
 * in dbias; columns outside the range untouched; the bits of a range those of the whole. */
static void test_bias_backward(void) {
    const size_t n_rows = 37;
    float dout[37 * 75], db[75], want[75], whole[75];
    gradcheck_fill_uniform(dout, sizeof dout / sizeof dout[0], -1.0f, 1.0f, 91);
    int bad = 0;
    for (int C = 1; C <= 75; C++) {
        for (int c = 0; c < C; c++) {
            float acc = 0.25f * (float)c; /* the start value: it ADDS */
            for (size_t r = 0; r < n_rows; r++) acc += dout[r * C + c];
            want[c] = acc;
            db[c] = 0.25f * (float)c;
        }
        bias_add_backward(db, dout, n_rows, C);
        for (int c = 0; c < C; c++) bad += db[c] != want[c];
    }
    CHECK(bad == 0, "bias_add_backward: %d columns not the row-order float sum", bad);
    const int C = 45;
    for (int c = 0; c < C; c++) whole[c] = 0.25f * (float)c;
    bias_add_backward(whole, dout, n_rows, C);
    bad = 0;
    int outside = 0;
    for (int c0 = 0; c0 <= C; c0++)
        for (int c1 = c0; c1 <= C; c1++) {
            for (int c = 0; c < C; c++) db[c] = 0.25f * (float)c;
            bias_add_backward_columns(db, dout, n_rows, C, c0, c1);
            for (int c = 0; c < C; c++) {
                if (c >= c0 && c < c1) bad += db[c] != whole[c];
                else outside += db[c] != 0.25f * (float)c;
            }
        }
    CHECK(bad == 0 && outside == 0, "bias_add_backward_columns: %d columns differ from the whole's, %d outside touched",
          bad, outside);
}

int main(void) {
    test_in_top_k();
    test_padding();
    test_pool_padding();
    test_lrn_hand();
    test_lrn_reference();
    test_conv_reference(2, 24, 24, 3, 5, 5, 8, 1, 1, PAD_SAME, ACT_NONE, 2, 81);
    test_conv_reference(3, 7, 5, 2, 3, 4, 5, 2, 1, PAD_SAME, ACT_RELU, 1, 82);
    test_conv_reference(3, 9, 8, 4, 3, 3, 6, 2, 2, PAD_VALID, ACT_NONE, 2, 83);
    test_conv_reference(1, 5, 5, 1, 5, 5, 3, 1, 1, PAD_SAME, ACT_NONE, 1, 84);
    test_conv_reference(4, 6, 6, 64, 5, 5, 64, 1, 1, PAD_SAME, ACT_RELU, 2, 85);
    /* In bands (an image's windows over 4 MiB): 18 + 6 rows; 19 + 5 rows at stride 2 with a row of padding on
     * top; one row a band. */
    test_conv_reference(2, 24, 24, 256, 3, 3, 8, 1, 1, PAD_SAME, ACT_RELU, 2, 86);
    test_conv_reference(2, 47, 45, 256, 3, 3, 5, 2, 2, PAD_SAME, ACT_NONE, 2, 87);
    test_conv_reference(1, 3, 128, 1024, 3, 3, 4, 1, 1, PAD_SAME, ACT_RELU, 1, 88);
    test_conv_fused_relu();
    test_dense_reference();
    test_dense_backward_reference();
    test_xent_stable();
    test_bias_backward();
    if (check_failures) {
        printf("%d known-answer checks FAILED\n", check_failures);
        return 1;
    }
    printf("all known-answer checks passed\n");
    return 0;
}
