/* test_winograd.c — conv2d's Winograd passes, F(2x2, 3x3), F(4x4, 3x3) and
 * F(4x4, 5x5) (model/winograd.c, which picks the 3x3 one by the map's size),
 * against the readable loops (conv2d_forward / conv2d_backward), the
 * oracle.
 *
 * Where it sits: ctest (CPU).  Every stride-1 geometry of maps 1 to r + 6
 * on each side (3x3: 1-9, 5x5: 1-11; sizes off the tile leave partial
 * tiles at the edges: 1, 2 or 3 rows of F(4x4, 5x5)'s 4), SAME and VALID,
 * channels 1-40 in and out (uneven, and past a SIMD width), with and
 * without bias and ReLU, batches 1-3, on 1 and 2 threads, and vgg11's,
 * resnet20's, mnist's and cifar10's shapes at batch 8 (many chunks and
 * segments): fresh random inputs, weights and output gradients; forward
 * output, input gradient, weight and bias gradients within 2e-5 (F(2x2,
 * 3x3)) and 5e-5 (the 4x4 tiles) of the largest magnitude (another order
 * of additions; the loops' own is not exact either).  Also: two runs bit for bit equal, and
 * one thread's the same bits as two; the scratch size is enough for a
 * smaller batch; dout is not modified; winograd_applies refuses stride 2,
 * 1x1, 7x7 and 3x5 kernels; a batch of 0 writes nothing and gives zero
 * weight and bias gradients; every kind ran some geometry; the transforms at
 * 16 channels a vector (AVX-512) the same bits as at 8.
 * test_winograd_omp4 runs it all again under OMP_NUM_THREADS=4 (teams of 1
 * and 2 among more threads).
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

static uint64_t g_seed = 0x3a1f;

/* n fresh uniform values in [-1, 1), a new stream each call. */
static float *rnd(size_t n) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    gradcheck_fill_uniform(x, n, -1.0f, 1.0f, g_seed++);
    return x;
}

#define rel_err gradcheck_rel_max_diff

/* The kinds and their bounds: F(2x2, 3x3)'s transforms hold only +-1 and 1/2 (largest seen 1.1e-6); the 4x4
 * tiles' larger coefficients (up to 5 in F(4x4, 3x3)'s B^T, 21/4 in F(4x4, 5x5)'s, 16 in G, 8 in A^T) lose
 * more bits (largest seen 1.4e-5 and 2.1e-5, in the weight gradient). */
static const char *const KINDS[3] = {"Winograd F(2x2,3x3)", "Winograd F(4x4,3x3)", "Winograd F(4x4,5x5)"};
static const double TOL[3] = {2e-5, 5e-5, 5e-5};
static double g_worst[3];
static int g_cases[3];

/* The index in KINDS of the kind model/winograd.c runs for c (its rule: the fewest transform-domain floats). */
static int kind_index(const Conv2d *c) {
    const char *name = winograd_name(c);
    for (int i = 0; i < 3; i++)
        if (name && !strcmp(name, KINDS[i])) return i;
    return 0;
}

/* One geometry: every pass against the loops; returns the number of failed checks. */
static int compare(int r, int H, int W, int C_in, int C_out, Padding pad, Activation act, int has_bias, int B,
                   int nt) {
    Conv2d c;
    if (conv2d_init(&c, H, W, C_in, r, r, C_out, 1, 1, pad, act) != 0) return 0; /* VALID on a map under r */
    const int before = check_failures;
    CHECK(winograd_applies(&c), "%dx%d %s: %dx%d stride 1 applies", H, W, pad == PAD_SAME ? "SAME" : "VALID", r, r);
    const size_t in_n = (size_t)B * H * W * C_in, out_n = (size_t)B * c.OH * c.OW * C_out;
    const size_t w_n = (size_t)r * r * C_in * C_out;
    float *x = rnd(in_n), *w = rnd(w_n), *bias = has_bias ? rnd(C_out) : NULL, *dy = rnd(out_n);
    float *y_ref = malloc(sizeof(float) * out_n), *y = malloc(sizeof(float) * out_n);
    float *dx_ref = malloc(sizeof(float) * in_n), *dx = malloc(sizeof(float) * in_n);
    float *dw_ref = malloc(sizeof(float) * w_n), *dw = malloc(sizeof(float) * w_n);
    float *db_ref = malloc(sizeof(float) * C_out), *db = malloc(sizeof(float) * C_out);
    float *g = malloc(sizeof(float) * out_n), *dy_copy = malloc(sizeof(float) * out_n);
    float *loops = malloc(sizeof(float) * conv2d_scratch_n_floats(&c, nt));
    float *scratch = malloc(sizeof(float) * winograd_scratch_n_floats(&c, B, nt));

    conv2d_forward(y_ref, loops, x, w, bias, &c, B, nt);
    conv2d_backward(dx_ref, dw_ref, db_ref, loops, y_ref, dy, x, w, &c, B, nt);
    /* NaN where every pass must write (each OVERWRITES its output): a value added to, or left, shows */
    for (size_t i = 0; i < out_n; i++) y[i] = NAN;
    for (size_t i = 0; i < in_n; i++) dx[i] = NAN;
    for (size_t i = 0; i < w_n; i++) dw[i] = NAN;
    for (int i = 0; i < C_out; i++) db[i] = NAN;
    winograd_forward(y, scratch, x, w, bias, &c, B, nt);
    /* The passes after the activation's mask, as conv2d_run_backward gives them dout (the reference output's
     * mask, the one the loops apply). */
    for (size_t i = 0; i < out_n; i++) g[i] = act == ACT_RELU && !(y_ref[i] > 0.0f) ? 0.0f : dy[i];
    memcpy(dy_copy, g, sizeof(float) * out_n);
    winograd_backward_data(dx, scratch, g, w, &c, B, nt);
    winograd_backward_weights(dw, has_bias ? db : NULL, scratch, g, x, &c, B, nt);
    CHECK(!memcmp(g, dy_copy, sizeof(float) * out_n), "dout modified");
    const double e_y = rel_err(y_ref, y, out_n);
    const double e_dx = rel_err(dx_ref, dx, in_n), e_dw = rel_err(dw_ref, dw, w_n);
    const double e_db = has_bias ? rel_err(db_ref, db, C_out) : 0.0;
    const double e = fmax(fmax(e_y, e_dx), fmax(e_dw, e_db));
    const int kind = kind_index(&c);
    g_cases[kind]++;
    if (e > g_worst[kind]) g_worst[kind] = e;
    CHECK(e <= TOL[kind], "%s %dx%d %d->%d %dx%d %s%s%s B=%d threads %d: forward %.2g, dinp %.2g, dweight %.2g, dbias %.2g",
          KINDS[kind], H, W, C_in, C_out, r, r, pad == PAD_SAME ? "SAME" : "VALID", act == ACT_RELU ? " relu" : "", has_bias ? " bias" : "", B,
          nt, e_y, e_dx, e_dw, e_db);
    free(x); free(w); free(bias); free(dy); free(y_ref); free(y); free(dx_ref); free(dx); free(dw_ref); free(dw);
    free(db_ref); free(db); free(g); free(dy_copy); free(loops); free(scratch);
    return check_failures - before;
}

/* Two runs of every pass bit for bit equal, one thread's the same as two, and a smaller batch within the
 * scratch sized for a larger.  15x15 maps of batch 9: 576 tiles, several chunks and backward-weights segments,
 * odd edges. */
static void repeat_and_smaller(int r) {
    Conv2d c;
    conv2d_init(&c, 15, 15, 64, r, r, 96, 1, 1, PAD_SAME, ACT_NONE);
    const int B = 9, P = 15 * 15;
    const size_t in_n = (size_t)B * P * 64, out_n = (size_t)B * P * 96, w_n = (size_t)r * r * 64 * 96;
    float *x = rnd(in_n), *w = rnd(w_n), *dy = rnd(out_n);
    float *s = malloc(sizeof(float) * winograd_scratch_n_floats(&c, B, 2));
    float *res[2][3];
    for (int run = 0; run < 2; run++) {
        res[run][0] = malloc(sizeof(float) * out_n);
        res[run][1] = malloc(sizeof(float) * in_n);
        res[run][2] = malloc(sizeof(float) * w_n);
        winograd_forward(res[run][0], s, x, w, NULL, &c, B, 2);
        winograd_backward_data(res[run][1], s, dy, w, &c, B, 2);
        winograd_backward_weights(res[run][2], NULL, s, dy, x, &c, B, 2);
    }
    CHECK(!memcmp(res[0][0], res[1][0], sizeof(float) * out_n), "forward: two runs differ");
    CHECK(!memcmp(res[0][1], res[1][1], sizeof(float) * in_n), "backward data: two runs differ");
    CHECK(!memcmp(res[0][2], res[1][2], sizeof(float) * w_n), "backward weights: two runs differ");
    /* One thread: the same bits (the chunks and segments do not depend on the team). */
    winograd_forward(res[1][0], s, x, w, NULL, &c, B, 1);
    winograd_backward_data(res[1][1], s, dy, w, &c, B, 1);
    winograd_backward_weights(res[1][2], NULL, s, dy, x, &c, B, 1);
    CHECK(!memcmp(res[0][0], res[1][0], sizeof(float) * out_n), "forward: 1 and 2 threads differ");
    CHECK(!memcmp(res[0][1], res[1][1], sizeof(float) * in_n), "backward data: 1 and 2 threads differ");
    CHECK(!memcmp(res[0][2], res[1][2], sizeof(float) * w_n), "backward weights: 1 and 2 threads differ");
    /* Batch 2 in the batch-5 scratch: against the loops. */
    float *loops = malloc(sizeof(float) * conv2d_scratch_n_floats(&c, 2));
    float *y_ref = malloc(sizeof(float) * out_n), *dx_ref = malloc(sizeof(float) * in_n);
    float *dw_ref = malloc(sizeof(float) * w_n);
    conv2d_forward(y_ref, loops, x, w, NULL, &c, 2, 2);
    conv2d_backward(dx_ref, dw_ref, NULL, loops, y_ref, dy, x, w, &c, 2, 2);
    winograd_forward(res[0][0], s, x, w, NULL, &c, 2, 2);
    winograd_backward_data(res[0][1], s, dy, w, &c, 2, 2);
    winograd_backward_weights(res[0][2], NULL, s, dy, x, &c, 2, 2);
    CHECK(rel_err(y_ref, res[0][0], (size_t)2 * P * 96) <= TOL[kind_index(&c)], "batch 2 in batch 9's scratch: forward");
    CHECK(rel_err(dx_ref, res[0][1], (size_t)2 * P * 64) <= TOL[kind_index(&c)], "batch 2 in batch 9's scratch: backward data");
    CHECK(rel_err(dw_ref, res[0][2], w_n) <= TOL[kind_index(&c)], "batch 2 in batch 9's scratch: backward weights");
    for (int run = 0; run < 2; run++)
        for (int i = 0; i < 3; i++) free(res[run][i]);
    free(x); free(w); free(dy); free(s); free(loops); free(y_ref); free(dx_ref); free(dw_ref);
}

/* The transforms at 16 channels a vector (AVX-512) give the same bits as at 8 (conv_cpu_set_lanes(8)): every
 * pass, with bias and ReLU, on channel counts with and without a tail at either width.  Said, not failed, where
 * the CPU has no AVX-512 (then both runs take 8 lanes, and still must agree). */
static void lanes_same_bits(void) {
    const int prev = conv_cpu_set_lanes(0);
    const int wide = conv_cpu_lanes() == 16;
    printf("transforms at %d lanes against 8%s\n", conv_cpu_lanes(), wide ? "" : " (no AVX-512 here: 8 against 8)");
    const int shapes[][5] = {{3, 11, 40, 24, 3}, {3, 8, 16, 48, 2}, {3, 6, 7, 33, 2}, {5, 14, 32, 64, 4},
                             {5, 9, 20, 17, 2}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int r = shapes[i][0], H = shapes[i][1], C_in = shapes[i][2], C_out = shapes[i][3], B = shapes[i][4];
        Conv2d c;
        conv2d_init(&c, H, H + 1, C_in, r, r, C_out, 1, 1, PAD_SAME, ACT_RELU);
        const size_t in_n = (size_t)B * H * (H + 1) * C_in, out_n = (size_t)B * c.OH * c.OW * C_out;
        const size_t w_n = (size_t)r * r * C_in * C_out;
        float *x = rnd(in_n), *w = rnd(w_n), *bias = rnd(C_out), *dy = rnd(out_n);
        float *s = malloc(sizeof(float) * winograd_scratch_n_floats(&c, B, 2));
        float *y[2], *dx[2], *dw[2], *db[2];
        for (int run = 0; run < 2; run++) {
            conv_cpu_set_lanes(run == 0 ? 8 : 0);
            y[run] = malloc(sizeof(float) * out_n);
            dx[run] = malloc(sizeof(float) * in_n);
            dw[run] = malloc(sizeof(float) * w_n);
            db[run] = malloc(sizeof(float) * C_out);
            winograd_forward(y[run], s, x, w, bias, &c, B, 2);
            winograd_backward_data(dx[run], s, dy, w, &c, B, 2);
            winograd_backward_weights(dw[run], db[run], s, dy, x, &c, B, 2);
        }
        CHECK(!memcmp(y[0], y[1], sizeof(float) * out_n), "%dx%d %d->%d: forward at 8 and %d lanes differs", r, r,
              C_in, C_out, wide ? 16 : 8);
        CHECK(!memcmp(dx[0], dx[1], sizeof(float) * in_n), "%dx%d %d->%d: backward data at 8 and %d lanes differs",
              r, r, C_in, C_out, wide ? 16 : 8);
        CHECK(!memcmp(dw[0], dw[1], sizeof(float) * w_n) && !memcmp(db[0], db[1], sizeof(float) * C_out),
              "%dx%d %d->%d: backward weights at 8 and %d lanes differs", r, r, C_in, C_out, wide ? 16 : 8);
        for (int run = 0; run < 2; run++) {
            free(y[run]); free(dx[run]); free(dw[run]); free(db[run]);
        }
        free(x); free(w); free(bias); free(dy); free(s);
    }
    conv_cpu_set_lanes(prev);
}

int main(void) {
    int n_cases = 0;
    lanes_same_bits();
    for (int r = 3; r <= 5; r += 2) {
        /* Small geometries, exhaustively over map sizes (to 2 past the kernel's tile). */
        for (int H = 1; H <= r + 6; H++)
            for (int W = 1; W <= r + 6; W += (H % 2 ? 1 : 3))
                for (int p = 0; p < 2; p++) {
                    const Padding pad = p ? PAD_VALID : PAD_SAME;
                    const int C_in = 1 + (H * 7 + W * 3) % 12, C_out = 1 + (H * 5 + W) % 11;
                    const Activation act = (H + W) % 2 ? ACT_RELU : ACT_NONE;
                    compare(r, H, W, C_in, C_out, pad, act, (H + W + p) % 3 != 0, 1 + (H + W) % 3, 1 + (W % 2));
                    n_cases++;
                }
        /* Channel counts past a SIMD width, both thread counts. */
        const int chans[][2] = {{3, 16}, {16, 3}, {17, 33}, {40, 8}, {32, 32}};
        for (size_t i = 0; i < sizeof chans / sizeof chans[0]; i++)
            for (int nt = 1; nt <= 2; nt++) {
                compare(r, 7, 6, chans[i][0], chans[i][1], PAD_SAME, ACT_RELU, 1, 3, nt);
                compare(r, 6, 7, chans[i][0], chans[i][1], PAD_VALID, ACT_NONE, 0, 2, nt);
                n_cases += 2;
            }
        /* At least 64 channels (the sizes the dispatch sends here) on odd maps, VALID and SAME. */
        compare(r, 7 + r, 5 + r, 64, 72, PAD_VALID, ACT_RELU, 1, 3, 2);
        compare(r, 9, 9, 65, 64, PAD_SAME, ACT_NONE, 1, 2, 1);
        n_cases += 2;
        repeat_and_smaller(r);
    }
    /* The networks' shapes: vgg11 at 32x32 (16x16 .. 2x2 maps), resnet20's 32x32x16 .. 8x8x64 (3x3); mnist's
     * and cifar10's two convolutions (5x5). */
    const int nets[][5] = {{3, 16, 64, 128, 0}, {3, 8, 128, 256, 0}, {3, 8, 256, 256, 0}, {3, 4, 256, 512, 0},
                           {3, 2, 512, 512, 0}, {3, 32, 16, 16, 1}, {3, 16, 32, 32, 1}, {3, 8, 64, 64, 1},
                           {5, 28, 1, 32, 0},   {5, 14, 32, 64, 0},  {5, 24, 3, 64, 0},  {5, 12, 64, 64, 0}};
    for (size_t i = 0; i < sizeof nets / sizeof nets[0]; i++) {
        compare(nets[i][0], nets[i][1], nets[i][1], nets[i][2], nets[i][3], PAD_SAME,
                nets[i][4] ? ACT_NONE : ACT_RELU, !nets[i][4], 8, 2);
        n_cases++;
    }
    Conv2d c;
    conv2d_init(&c, 8, 8, 4, 3, 3, 4, 2, 2, PAD_SAME, ACT_NONE);
    CHECK(!winograd_applies(&c), "stride 2 refused");
    conv2d_init(&c, 8, 8, 4, 5, 5, 4, 2, 2, PAD_SAME, ACT_NONE);
    CHECK(!winograd_applies(&c), "5x5 stride 2 refused");
    conv2d_init(&c, 8, 8, 4, 1, 1, 4, 1, 1, PAD_SAME, ACT_NONE);
    CHECK(!winograd_applies(&c), "1x1 refused");
    conv2d_init(&c, 8, 8, 4, 7, 7, 4, 1, 1, PAD_SAME, ACT_NONE);
    CHECK(!winograd_applies(&c), "7x7 refused");
    conv2d_init(&c, 8, 8, 4, 3, 5, 4, 1, 1, PAD_SAME, ACT_NONE);
    CHECK(!winograd_applies(&c), "3x5 refused");
    /* An empty batch: no output written, the weight and bias gradients 0. */
    for (int r = 3; r <= 5; r += 2) {
        conv2d_init(&c, 4, 4, 3, r, r, 5, 1, 1, PAD_SAME, ACT_NONE);
        float *scratch = malloc(sizeof(float) * winograd_scratch_n_floats(&c, 1, 2));
        float guard[8], dw[5 * 5 * 3 * 5], db[5], w[5 * 5 * 3 * 5];
        const int w_n = r * r * 3 * 5;
        for (int i = 0; i < 8; i++) guard[i] = 7.0f;
        for (int i = 0; i < w_n; i++) dw[i] = w[i] = 1.0f;
        for (int i = 0; i < 5; i++) db[i] = 1.0f;
        winograd_forward(guard, scratch, guard, w, NULL, &c, 0, 2);
        winograd_backward_data(guard, scratch, guard, w, &c, 0, 2);
        winograd_backward_weights(dw, db, scratch, guard, guard, &c, 0, 2);
        int bad = 0;
        for (int i = 0; i < 8; i++) bad += guard[i] != 7.0f;
        for (int i = 0; i < w_n; i++) bad += dw[i] != 0.0f;
        for (int i = 0; i < 5; i++) bad += db[i] != 0.0f;
        CHECK(bad == 0, "%dx%d, batch 0: %d values wrong (outputs untouched, gradients 0)", r, r, bad);
        free(scratch);
    }
    for (int i = 0; i < 3; i++) {
        CHECK(g_cases[i] > 0, "no geometry ran %s", KINDS[i]);
        printf("%s: %d geometries, largest relative difference from the loops %.2g (bound %.0e)\n", KINDS[i],
               g_cases[i], g_worst[i], TOL[i]);
    }
    printf("%d geometries against the loops; %d checks, %d failures\n", n_cases, check_count, check_failures);
    return check_failures ? 1 : 0;
}
