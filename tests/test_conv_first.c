/* test_conv_first.c — a first layer's direct convolution (model/conv_first.c, conv_first.inc) against the
 * readable loops (conv2d_forward / conv2d_backward), the oracle.
 *
 * Where it sits: ctest (CPU).  Checks, on fresh random inputs, weights and output gradients:
 *   1. the networks' first layers (mnist's 28x28 1 -> 32 5x5, cifar10's 24x24 3 -> 64 5x5, vgg's 3 -> 64 3x3,
 *      resnet50's 7x7 stride 2 VALID after its zero padding) and odd ones (2 and 4 channels in, 1x1, 3x5
 *      kernels, stride 2 SAME and VALID, maps of 1 to 9 a side, 96 channels out), with and without bias and
 *      ReLU, batches 1-19 (partial groups of 8), on 1 and 2 threads: forward output, weight and bias gradients
 *      within 2e-5 of the largest magnitude (another order of additions);
 *   2. the same bits at 8 and 16 channels a vector (conv_cpu_set_lanes(8); said, not failed, on a CPU without
 *      AVX-512, where both runs take 8), on 1 and 2 threads (the images' sums are in fixed groups), and from
 *      run to run;
 *   3. outputs overwritten (NaN planted first), dout untouched, a batch smaller than the scratch was sized
 *      for, B = 0 giving zero gradients, and conv_first_applies refusing 5 channels in, 48 out, 8x8x4 taps.
 */
#include "model/conv_algo.h"
#include "model/layers.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "tests/gradcheck.h"

static uint64_t g_seed = 0xf125;

/* n fresh uniform values in [-1, 1), a new stream each call. */
static float *rnd(size_t n) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    gradcheck_fill_uniform(x, n, -1.0f, 1.0f, g_seed++);
    return x;
}

static const double TOL = 2e-5;
static double g_worst;
static int g_cases;

/* One run of both passes into y, dw, db (NaN planted first); the scratch sized for max_B. */
static void run(float *y, float *dw, float *db, const Conv2d *c, const float *x, const float *w, const float *bias,
                const float *y_mask, const float *dy, int B, int max_B, int nt) {
    const size_t out_n = (size_t)B * c->OH * c->OW * c->C_out, w_n = (size_t)c->KH * c->KW * c->C_in * c->C_out;
    float *s = malloc(sizeof(float) * conv_first_scratch_n_floats(c, max_B, nt));
    for (size_t i = 0; i < out_n; i++) y[i] = NAN;
    for (size_t i = 0; i < w_n; i++) dw[i] = NAN;
    for (int i = 0; i < c->C_out; i++) db[i] = NAN;
    conv_first_forward(y, s, x, w, bias, c, B, nt);
    conv_first_backward_weights(dw, db, s, y_mask, dy, x, c, B, nt);
    free(s);
}

/* Both passes against the loops, then the same bits at 8 lanes, on one thread, and again. */
static void compare(int H, int W, int C_in, int KH, int KW, int C_out, int stride, Padding pad, Activation act,
                    int has_bias, int B, int nt) {
    Conv2d c;
    if (conv2d_init(&c, H, W, C_in, KH, KW, C_out, stride, stride, pad, act) != 0) return; /* VALID under k */
    CHECK(conv_first_applies(&c), "%dx%d %d->%d %dx%d applies", H, W, C_in, C_out, KH, KW);
    const size_t in_n = (size_t)B * H * W * C_in, out_n = (size_t)B * c.OH * c.OW * C_out;
    const size_t w_n = (size_t)KH * KW * C_in * C_out;
    float *x = rnd(in_n), *w = rnd(w_n), *bias = has_bias ? rnd(C_out) : NULL, *dy = rnd(out_n);
    float *y_ref = malloc(sizeof(float) * out_n), *dw_ref = malloc(sizeof(float) * w_n);
    float *db_ref = malloc(sizeof(float) * C_out), *dy_copy = malloc(sizeof(float) * out_n);
    float *loops = malloc(sizeof(float) * conv2d_scratch_n_floats(&c, nt));
    conv2d_forward(y_ref, loops, x, w, bias, &c, B, nt);
    conv2d_backward(NULL, dw_ref, db_ref, loops, y_ref, dy, x, w, &c, B, nt);
    memcpy(dy_copy, dy, sizeof(float) * out_n);
    float *y[4], *dw[4], *db[4];
    for (int r = 0; r < 4; r++) {
        y[r] = malloc(sizeof(float) * out_n);
        dw[r] = malloc(sizeof(float) * w_n);
        db[r] = malloc(sizeof(float) * C_out);
    }
    /* run 0: as the CPU chooses, B + 3's scratch; 1: 8 lanes; 2: one thread; 3: run 0 again */
    run(y[0], dw[0], db[0], &c, x, w, bias, y_ref, dy, B, B + 3, nt);
    const int prev = conv_cpu_set_lanes(8);
    run(y[1], dw[1], db[1], &c, x, w, bias, y_ref, dy, B, B, nt);
    conv_cpu_set_lanes(prev);
    run(y[2], dw[2], db[2], &c, x, w, bias, y_ref, dy, B, B, 1);
    run(y[3], dw[3], db[3], &c, x, w, bias, y_ref, dy, B, B, nt);
    CHECK(!memcmp(dy, dy_copy, sizeof(float) * out_n), "dout modified");
    const double e_y = gradcheck_rel_max_diff(y_ref, y[0], out_n), e_dw = gradcheck_rel_max_diff(dw_ref, dw[0], w_n);
    const double e_db = has_bias ? gradcheck_rel_max_diff(db_ref, db[0], C_out) : 0.0;
    const double e = fmax(e_y, fmax(e_dw, e_db));
    if (!(e <= g_worst)) g_worst = e;
    g_cases++;
    CHECK(e <= TOL, "%dx%d %d->%d %dx%d stride %d %s%s%s B=%d threads %d: forward %.2g, dweight %.2g, dbias %.2g", H,
          W, C_in, C_out, KH, KW, stride, pad == PAD_SAME ? "SAME" : "VALID", act == ACT_RELU ? " relu" : "",
          has_bias ? " bias" : "", B, nt, e_y, e_dw, e_db);
    for (int r = 1; r < 4; r++) {
        const char *what = r == 1 ? "8 lanes" : r == 2 ? "one thread" : "a second run";
        CHECK(!memcmp(y[0], y[r], sizeof(float) * out_n), "%dx%d %d->%d: forward differs with %s", H, W, C_in, C_out,
              what);
        CHECK(!memcmp(dw[0], dw[r], sizeof(float) * w_n) && !memcmp(db[0], db[r], sizeof(float) * C_out),
              "%dx%d %d->%d: backward weights differ with %s", H, W, C_in, C_out, what);
    }
    for (int r = 0; r < 4; r++) {
        free(y[r]); free(dw[r]); free(db[r]);
    }
    free(x); free(w); free(bias); free(dy); free(y_ref); free(dw_ref); free(db_ref); free(dy_copy); free(loops);
}

int main(void) {
    printf("conv_first at %d lanes, compared with 8%s\n", conv_cpu_lanes(),
           conv_cpu_lanes() == 16 ? "" : " (no AVX-512 here: 8 against 8)");
    /* The networks' first layers. */
    compare(28, 28, 1, 5, 5, 32, 1, PAD_SAME, ACT_RELU, 1, 9, 2);   /* mnist conv1 */
    compare(24, 24, 3, 5, 5, 64, 1, PAD_SAME, ACT_RELU, 1, 10, 2);  /* cifar10 conv1 */
    compare(32, 32, 3, 3, 3, 64, 1, PAD_SAME, ACT_RELU, 1, 3, 2);   /* vgg block1_conv1 */
    compare(38, 38, 3, 7, 7, 64, 2, PAD_VALID, ACT_NONE, 1, 2, 2);  /* resnet50 conv1 after its 3-cell padding */
    /* Odd ones: channels, kernels, strides, padding, maps, batches, threads. */
    for (int nt = 1; nt <= 2; nt++) {
        compare(9, 7, 2, 3, 5, 32, 1, PAD_SAME, ACT_RELU, 0, 19, nt);
        compare(7, 9, 4, 3, 3, 96, 2, PAD_SAME, ACT_NONE, 1, 5, nt);
        compare(8, 8, 3, 1, 1, 32, 1, PAD_VALID, ACT_RELU, 1, 8, nt);
        compare(11, 10, 1, 5, 5, 64, 2, PAD_VALID, ACT_RELU, 1, 17, nt);
    }
    for (int H = 1; H <= 9; H++)
        for (int k = 1; k <= 5; k += 2)
            compare(H, 10 - H, 1 + H % 4, k, k, 32, 1 + H % 2, H % 3 ? PAD_SAME : PAD_VALID,
                    H % 2 ? ACT_RELU : ACT_NONE, H % 4 != 0, 1 + H, 2);
    /* B = 0: zero gradients. */
    Conv2d c;
    conv2d_init(&c, 6, 6, 3, 3, 3, 32, 1, 1, PAD_SAME, ACT_RELU);
    float *s = malloc(sizeof(float) * conv_first_scratch_n_floats(&c, 4, 2));
    float dw[3 * 3 * 3 * 32], db[32];
    for (int i = 0; i < 3 * 3 * 3 * 32; i++) dw[i] = NAN;
    for (int i = 0; i < 32; i++) db[i] = NAN;
    conv_first_backward_weights(dw, db, s, NULL, NULL, NULL, &c, 0, 2);
    int zero = 1;
    for (int i = 0; i < 3 * 3 * 3 * 32; i++) zero &= dw[i] == 0.0f;
    for (int i = 0; i < 32; i++) zero &= db[i] == 0.0f;
    CHECK(zero, "B = 0: the gradients are not 0");
    free(s);
    /* What it refuses. */
    conv2d_init(&c, 8, 8, 5, 3, 3, 32, 1, 1, PAD_SAME, ACT_NONE);
    CHECK(!conv_first_applies(&c), "5 channels in refused");
    conv2d_init(&c, 8, 8, 3, 3, 3, 48, 1, 1, PAD_SAME, ACT_NONE);
    CHECK(!conv_first_applies(&c), "48 channels out refused");
    conv2d_init(&c, 16, 16, 4, 8, 8, 32, 1, 1, PAD_SAME, ACT_NONE);
    CHECK(!conv_first_applies(&c), "8x8x4 taps refused");
    printf("%d geometries against the loops, largest relative difference %.2g (bound %.0e); %d checks, %d failures\n",
           g_cases, g_worst, TOL, check_count, check_failures);
    return check_failures ? 1 : 0;
}
