/* test_conv_dnnl.c — conv2d as the CPU executor runs it (model/conv2d_dnnl.c:
 * oneDNN's convolution primitive where conv_algo.c's CPU table says so)
 * against the readable loops (conv2d_forward / conv2d_backward), the oracle.
 *
 * Where it sits: ctest (CPU).  For shapes the networks use (vgg11's 3x3
 * SAME at 16x16 .. 2x2 with 64-512 channels, resnet20's 3x3 stride 2 SAME,
 * resnet50's 1x1 stride 1 and 2 VALID and 7x7 stride 2 VALID, a first
 * layer of 3 channels), with and without bias and ReLU, on 1 and 2
 * threads: fresh random inputs, weights and output gradients; forward
 * output, input gradient, weight and bias gradients compared with the
 * loops' within 1e-4 of the largest magnitude (another summation order, no
 * more).  Also: a batch smaller than the one the scratch was sized for, a
 * batch larger (the loops take it), a NULL input gradient, scratch too
 * small for oneDNN (the loops take it), dout clobbered only by the ReLU
 * mask, and that oneDNN is taken for the passes the table names when this
 * machine's oneDNN has direct kernels (said, not failed, when it has none).
 * Winograd (conv_cpu_winograd): vgg11's and resnet20's shapes at batches
 * with 64 tiles or more, through the same comparison, the NHWC <-> blocked
 * reorders of each pass included; two runs bit for bit equal; and
 * TOWER_CONV_DIRECT=1 keeps the direct kernels.  Where oneDNN has no
 * Winograd kernel: model/winograd.c's 3x3 kernels take every pass of the
 * layers conv_cpu_winograd_f2 names (64 channels and more), not the
 * others, and TOWER_CONV_WINOGRAD_F2=0 gives the table back; where it has
 * them, they take vgg11's 2x2 layer only (F(2x2, 3x3)).  On every machine: model/winograd.c's F(4x4, 5x5) takes every pass of mnist's and
 * cifar10's second convolutions, none of their first's (1 and 3 channels
 * in) or a stride-2 5x5 one's, compared with the loops the same way.
 * model/conv_first.c's direct kernels take the backward weights of
 * mnist's conv1 and of a 3x3 stride-2 layer on one channel, with AVX-512
 * also the forward of mnist's and cifar10's conv1, never backward data;
 * compared with the loops the same way, with and without the input
 * gradient; TOWER_CONV_FIRST=0 turns them off.
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

static uint64_t g_seed = 0x5eed;

static float *rnd(size_t n) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        uint64_t z = (g_seed += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        x[i] = (float)((double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    }
    return x;
}

#define rel_err gradcheck_rel_max_diff

static int n_onednn_passes; /* over every case: passes oneDNN actually ran */
static int n_f2_passes;     /* and passes model/winograd.c ran */
static int n_first_passes;  /* and passes model/conv_first.c ran */

static const char *path_name(int path) {
    return path == CONV_CPU_WINOGRAD      ? "Winograd"
           : path == CONV_CPU_WINOGRAD_F2 ? "model/winograd.c"
           : path == CONV_CPU_FIRST       ? "model/conv_first.c"
           : path == CONV_CPU_ONEDNN      ? "oneDNN"
                                          : "loops";
}

typedef struct {
    int H, C_in, K, C_out, stride;
    Padding pad;
    int bias;
    Activation act;
} Case;

/* One case: sized for max_batch, run at B; want_dinp 0 passes dinp NULL. */
static void run_case(const Case *k, int max_batch, int B, int n_threads, int want_dinp, int starve_scratch) {
    Conv2d c;
    CHECK(conv2d_init(&c, k->H, k->H, k->C_in, k->K, k->K, k->C_out, k->stride, k->stride, k->pad, k->act) == 0);
    const size_t in_n = (size_t)B * k->H * k->H * k->C_in, out_n = (size_t)B * c.OH * c.OW * k->C_out;
    const size_t w_n = (size_t)k->K * k->K * k->C_in * k->C_out;
    float *inp = rnd(in_n), *w = rnd(w_n), *bias = rnd(k->C_out), *g = rnd(out_n);
    float *g_run = malloc(sizeof(float) * out_n);
    memcpy(g_run, g, sizeof(float) * out_n);
    float *out_ref = malloc(sizeof(float) * out_n), *out_run = malloc(sizeof(float) * out_n);
    float *di_ref = malloc(sizeof(float) * in_n), *di_run = malloc(sizeof(float) * in_n);
    float *dw_ref = malloc(sizeof(float) * w_n), *dw_run = malloc(sizeof(float) * w_n);
    float *db_ref = malloc(sizeof(float) * k->C_out), *db_run = malloc(sizeof(float) * k->C_out);
    for (size_t i = 0; i < in_n; i++) di_run[i] = NAN; /* must be overwritten (or left, when not wanted) */
    for (size_t i = 0; i < w_n; i++) dw_run[i] = NAN;
    for (int i = 0; i < k->C_out; i++) db_run[i] = NAN;
    const float *b = k->bias ? bias : NULL;
    float *loop_scratch = malloc(sizeof(float) * conv2d_scratch_n_floats(&c, n_threads));
    conv2d_forward(out_ref, loop_scratch, inp, w, b, &c, B, n_threads);
    const size_t sized = conv2d_run_scratch_n_bytes(&c, k->bias, max_batch, n_threads);
    const size_t given = starve_scratch ? sizeof(float) * conv2d_scratch_n_floats(&c, n_threads) : sized;
    CHECK(sized >= sizeof(float) * conv2d_scratch_n_floats(&c, n_threads), "the run's scratch holds the loops'");
    void *scratch = malloc(given);
    conv2d_run_forward(out_run, scratch, given, inp, w, b, &c, B, n_threads);
    /* The oracle's backward masks the ReLU with the run's output: an output within rounding of 0 may fall on
     * either side in the two forwards, and one such cell moves a weight gradient summed over B x 16 cells by
     * 1e-2 of its size (measured at 4x4, batch 64).  The forwards are compared on their own below. */
    conv2d_backward(want_dinp ? di_ref : NULL, dw_ref, k->bias ? db_ref : NULL, loop_scratch, out_run, g, inp, w, &c,
                    B, n_threads);
    conv2d_run_backward(want_dinp ? di_run : NULL, dw_run, k->bias ? db_run : NULL, scratch, given, out_run, g_run, inp,
                        w, &c, B, n_threads);
    int paths[CONV_PASS_COUNT];
    for (int p = 0; p < CONV_PASS_COUNT; p++) {
        paths[p] = conv2d_run_path(&c, k->bias, B, n_threads, p);
        /* A pass runs oneDNN (or model/winograd.c) only when it fits the scratch given. */
        if (paths[p] != CONV_CPU_LOOPS && !starve_scratch && B <= max_batch &&
            (p != CONV_PASS_BACKWARD_DATA || want_dinp)) {
            if (paths[p] == CONV_CPU_WINOGRAD_F2) n_f2_passes++;
            else if (paths[p] == CONV_CPU_FIRST) n_first_passes++;
            else n_onednn_passes++;
        }
    }
    const double tol = 1e-4;
    char what[160];
    snprintf(what, sizeof what, "%dx%d C %d->%d k%d s%d %s%s%s, B %d (sized %d), %d thread(s)%s%s", k->H, k->H,
             k->C_in, k->C_out, k->K, k->stride, k->pad == PAD_SAME ? "SAME" : "VALID", k->bias ? " bias" : "",
             k->act == ACT_RELU ? " relu" : "", B, max_batch, n_threads, want_dinp ? "" : ", no dinp",
             starve_scratch ? ", scratch for the loops only" : "");
    const double e_out = rel_err(out_ref, out_run, out_n);
    const double e_dw = rel_err(dw_ref, dw_run, w_n);
    const double e_db = k->bias ? rel_err(db_ref, db_run, k->C_out) : 0.0;
    const double e_di = want_dinp ? rel_err(di_ref, di_run, in_n) : 0.0;
    CHECK(e_out <= tol, "%s: forward rel err %.2g (path %d)", what, e_out, paths[0]);
    CHECK(e_di <= tol, "%s: input gradient rel err %.2g (path %d)", what, e_di, paths[1]);
    CHECK(e_dw <= tol, "%s: weight gradient rel err %.2g (path %d)", what, e_dw, paths[2]);
    CHECK(e_db <= tol, "%s: bias gradient rel err %.2g (path %d)", what, e_db, paths[2]);
    if (!want_dinp) {
        int untouched = 1;
        for (size_t i = 0; i < in_n; i++) untouched &= isnan(di_run[i]);
        CHECK(untouched, "%s: dinp NULL, yet something was written", what);
    }
    /* dout: unchanged without a ReLU, the masked gradient with one. */
    int dout_ok = 1;
    for (size_t i = 0; i < out_n; i++) {
        const float want = k->act == ACT_RELU && !(out_run[i] > 0.0f) && g_run[i] != g[i] ? 0.0f : g[i];
        dout_ok &= g_run[i] == want;
    }
    CHECK(dout_ok, "%s: dout changed other than by the ReLU's mask", what);
    printf("  %-78s fwd %.1e (%s) dinp %.1e (%s) dw %.1e db %.1e (%s)\n", what, e_out, path_name(paths[0]), e_di,
           path_name(paths[1]), e_dw, e_db, path_name(paths[2]));
    free(inp); free(w); free(bias); free(g); free(g_run); free(out_ref); free(out_run); free(di_ref); free(di_run);
    free(dw_ref); free(dw_run); free(db_ref); free(db_run); free(loop_scratch); free(scratch);
}

/* Two runs of every pass on the same inputs: the same bits. */
static void repeat_bitwise(const Case *k, int B, int n_threads) {
    Conv2d c;
    CHECK(conv2d_init(&c, k->H, k->H, k->C_in, k->K, k->K, k->C_out, k->stride, k->stride, k->pad, k->act) == 0);
    const size_t in_n = (size_t)B * k->H * k->H * k->C_in, out_n = (size_t)B * c.OH * c.OW * k->C_out;
    const size_t w_n = (size_t)k->K * k->K * k->C_in * k->C_out, sc_n = conv2d_run_scratch_n_bytes(&c, 1, B, n_threads);
    float *inp = rnd(in_n), *w = rnd(w_n), *bias = rnd(k->C_out), *g = rnd(out_n);
    float *out[2], *di[2], *dw[2], *db[2], *dout[2];
    void *scratch = malloc(sc_n);
    for (int r = 0; r < 2; r++) {
        out[r] = malloc(sizeof(float) * out_n);
        di[r] = malloc(sizeof(float) * in_n);
        dw[r] = malloc(sizeof(float) * w_n);
        db[r] = malloc(sizeof(float) * k->C_out);
        dout[r] = malloc(sizeof(float) * out_n);
        memcpy(dout[r], g, sizeof(float) * out_n);
        conv2d_run_forward(out[r], scratch, sc_n, inp, w, bias, &c, B, n_threads);
        conv2d_run_backward(di[r], dw[r], db[r], scratch, sc_n, out[r], dout[r], inp, w, &c, B, n_threads);
    }
    CHECK(!memcmp(out[0], out[1], sizeof(float) * out_n) && !memcmp(di[0], di[1], sizeof(float) * in_n) &&
              !memcmp(dw[0], dw[1], sizeof(float) * w_n) && !memcmp(db[0], db[1], sizeof(float) * k->C_out),
          "%dx%d C %d->%d, B %d: two runs differ", k->H, k->H, k->C_in, k->C_out, B);
    printf("  %dx%d C %d->%d, B %d, %d thread(s): two runs bit for bit equal (%s)\n", k->H, k->H, k->C_in, k->C_out,
           B, n_threads, path_name(conv2d_run_path(&c, 1, B, n_threads, CONV_PASS_FORWARD)));
    for (int r = 0; r < 2; r++) {
        free(out[r]); free(di[r]); free(dw[r]); free(db[r]); free(dout[r]);
    }
    free(inp); free(w); free(bias); free(g); free(scratch);
}

int main(void) {
    const Case cases[] = {
        {16, 64, 3, 128, 1, PAD_SAME, 1, ACT_RELU},   /* vgg11 block2 */
        {4, 256, 3, 512, 1, PAD_SAME, 1, ACT_RELU},   /* vgg11 block4: oneDNN (backward weights with AVX-512) */
        {2, 512, 3, 512, 1, PAD_SAME, 1, ACT_RELU},   /* vgg11 block5 */
        {8, 3, 3, 64, 1, PAD_SAME, 1, ACT_RELU},      /* a first layer */
        {8, 16, 3, 32, 2, PAD_SAME, 1, ACT_NONE},     /* resnet20 conv3_block1_1 */
        {4, 32, 3, 32, 1, PAD_SAME, 0, ACT_NONE},     /* no bias */
        {4, 64, 1, 256, 1, PAD_VALID, 1, ACT_NONE},   /* resnet50 1x1 */
        {8, 64, 1, 32, 2, PAD_VALID, 1, ACT_NONE},    /* resnet50 1x1 stride 2 (VALID skips the last cells) */
        {15, 3, 7, 16, 2, PAD_VALID, 1, ACT_RELU},    /* resnet50 conv1 7x7 stride 2 */
        {5, 24, 3, 40, 2, PAD_SAME, 1, ACT_RELU},     /* odd map, SAME padding after only */
        {24, 3, 5, 64, 1, PAD_SAME, 1, ACT_RELU},     /* cifar10 conv1 */
        {12, 64, 5, 64, 1, PAD_SAME, 1, ACT_RELU},    /* cifar10 conv2 */
        {14, 32, 5, 64, 1, PAD_SAME, 1, ACT_RELU},    /* mnist conv2 */
        {32, 16, 3, 16, 1, PAD_SAME, 1, ACT_NONE},    /* resnet20 conv2_block1_1: 16 channels out (AVX-512: oneDNN's
                                                         backward weights at any map) */
        {32, 3, 3, 16, 1, PAD_SAME, 1, ACT_RELU},     /* a first layer to 16 channels */
    };
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    printf("conv2d_run (oneDNN where conv_algo's table says) against conv2d's loops, rel err per pass:\n");
    for (int t = 1; t <= 2; t++)
        for (int i = 0; i < n_cases; i++) run_case(&cases[i], 6, 6, t, 1, 0);
    /* Batches other than the one the scratch was sized for; no input gradient; starved scratch. */
    run_case(&cases[1], 6, 3, 2, 1, 0);
    run_case(&cases[1], 4, 6, 2, 1, 0);
    run_case(&cases[2], 6, 6, 2, 0, 0);
    run_case(&cases[1], 6, 6, 2, 1, 1);
    run_case(&cases[11], 9, 9, 2, 1, 0);
    run_case(&cases[11], 9, 3, 1, 1, 0);
    /* Winograd: shapes conv_cpu_winograd takes, at batches of 64 tiles and more (and one below: direct). */
    const Case wino[] = {
        {4, 256, 3, 512, 1, PAD_SAME, 1, ACT_RELU}, /* vgg11 block4 at batch 64 */
        {8, 32, 3, 64, 1, PAD_SAME, 1, ACT_RELU},   /* batch 16: 4 tiles each */
        {16, 32, 3, 32, 1, PAD_SAME, 0, ACT_NONE},  /* resnet20 conv3 (no bias): batch 4, 16 tiles each */
        {7, 64, 3, 64, 1, PAD_SAME, 1, ACT_NONE},   /* 7x7: a tile row and column half used */
    };
    const int wino_batch[] = {64, 16, 4, 16};
    int n_wino = 0;
    for (int t = 1; t <= 2; t++)
        for (int i = 0; i < (int)(sizeof wino / sizeof wino[0]); i++) {
            run_case(&wino[i], wino_batch[i], wino_batch[i], t, 1, 0);
            Conv2d w;
            conv2d_init(&w, wino[i].H, wino[i].H, wino[i].C_in, 3, 3, wino[i].C_out, 1, 1, PAD_SAME, wino[i].act);
            n_wino += conv2d_run_path(&w, wino[i].bias, wino_batch[i], t, CONV_PASS_FORWARD) == CONV_CPU_WINOGRAD;
        }
    run_case(&wino[1], 16, 8, 2, 1, 0);  /* 32 tiles: direct, in scratch sized for Winograd at 16 */
    run_case(&wino[0], 64, 64, 2, 0, 0); /* no input gradient */
    if (n_wino > 0) {
        repeat_bitwise(&wino[0], 64, 2);
        /* TOWER_CONV_DIRECT=1: the direct kernels (a batch not cached yet: the switch is read at creation). */
        setenv("TOWER_CONV_DIRECT", "1", 1);
        Conv2d w;
        conv2d_init(&w, 4, 4, 256, 3, 3, 512, 1, 1, PAD_SAME, ACT_RELU);
        CHECK(conv2d_run_path(&w, 1, 65, 2, CONV_PASS_FORWARD) == CONV_CPU_ONEDNN, "TOWER_CONV_DIRECT=1: direct");
        unsetenv("TOWER_CONV_DIRECT");
        CHECK(conv2d_run_path(&w, 1, 66, 2, CONV_PASS_FORWARD) == CONV_CPU_WINOGRAD, "switch off: Winograd again");
    } else {
        printf("  (this machine's oneDNN has no Winograd kernel (it needs AVX-512): those shapes ran direct)\n");
    }
    /* The table itself: vgg11's 4x4 layer takes oneDNN's direct kernels forward and backward-data when the
     * machine's oneDNN has them, and backward-weights only where they are AVX-512 ones (conv_algo.c: jit:avx2's
     * was slower than the loops everywhere measured).  oneDNN's AVX-512 kernels need avx512_core (F, BW, VL, DQ);
     * ONEDNN_MAX_CPU_ISA may hold them back, so with it set either path is accepted. */
    /* The table as it stands without model/winograd.c (batch 5: not cached yet, and the switch
     * is read at creation). */
    setenv("TOWER_CONV_WINOGRAD_F2", "0", 1);
    Conv2d c;
    conv2d_init(&c, 4, 4, 256, 3, 3, 512, 1, 1, PAD_SAME, ACT_RELU);
    if (conv2d_run_path(&c, 1, 5, 1, CONV_PASS_FORWARD) == CONV_CPU_ONEDNN) {
        CHECK(conv2d_run_path(&c, 1, 5, 1, CONV_PASS_BACKWARD_DATA) == CONV_CPU_ONEDNN);
        const int avx512_core = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
        const int wpath = conv2d_run_path(&c, 1, 5, 1, CONV_PASS_BACKWARD_WEIGHTS);
        if (!avx512_core)
            CHECK(wpath == CONV_CPU_LOOPS, "no AVX-512: backward weights on the loops, not %s", path_name(wpath));
        else if (!getenv("ONEDNN_MAX_CPU_ISA"))
            CHECK(wpath == CONV_CPU_ONEDNN, "AVX-512: backward weights on oneDNN, not %s", path_name(wpath));
        /* resnet20's 32x32 layer, 16 channels out: oneDNN's backward weights only with AVX-512; 32 out: loops. */
        Conv2d r16, r32;
        conv2d_init(&r16, 32, 32, 16, 3, 3, 16, 1, 1, PAD_SAME, ACT_NONE);
        conv2d_init(&r32, 32, 32, 16, 3, 3, 32, 1, 1, PAD_SAME, ACT_NONE);
        const int p16 = conv2d_run_path(&r16, 0, 5, 1, CONV_PASS_BACKWARD_WEIGHTS);
        const int p32 = conv2d_run_path(&r32, 0, 5, 1, CONV_PASS_BACKWARD_WEIGHTS);
        CHECK(p32 == CONV_CPU_LOOPS, "16 -> 32 on 32x32: backward weights on the loops, not %s", path_name(p32));
        if (!avx512_core)
            CHECK(p16 == CONV_CPU_LOOPS, "no AVX-512: 16 -> 16 backward weights on the loops, not %s", path_name(p16));
        else if (!getenv("ONEDNN_MAX_CPU_ISA"))
            CHECK(p16 == CONV_CPU_ONEDNN, "AVX-512: 16 -> 16 backward weights on oneDNN, not %s", path_name(p16));
        CHECK(n_onednn_passes > 0, "oneDNN ran no pass");
    } else {
        printf("  (this machine's oneDNN has no direct kernel for vgg11's 4x4 layer: every pass ran the loops)\n");
    }
    unsetenv("TOWER_CONV_WINOGRAD_F2");
    /* model/winograd.c's 3x3 kernels (conv_cpu_winograd_f2), where this oneDNN has no Winograd kernel (n_wino ==
     * 0): every pass of vgg11's 4x4 layer and of a 64-channel 8x8 layer (from 16 channels in and out); where
     * oneDNN has Winograd kernels (AVX-512), not those two at batch 8 (too few tiles for oneDNN's Winograd: its
     * direct kernels run).  On every machine every pass of resnet20's 32-channel 16x16 layer (with AVX-512, 128
     * tiles: where oneDNN's Winograd would run, ours takes the narrow passes) and of vgg11's 2x2 layer (whose
     * map oneDNN's 4x4 tiles waste), none of a stride-2 layer. */
    Conv2d f64, f32, f_s2, f2x2;
    conv2d_init(&f64, 8, 8, 64, 3, 3, 64, 1, 1, PAD_SAME, ACT_NONE);
    conv2d_init(&f32, 16, 16, 32, 3, 3, 32, 1, 1, PAD_SAME, ACT_NONE);
    conv2d_init(&f_s2, 16, 16, 64, 3, 3, 128, 2, 2, PAD_SAME, ACT_NONE);
    conv2d_init(&f2x2, 2, 2, 512, 3, 3, 512, 1, 1, PAD_SAME, ACT_RELU);
    int n_f2 = 0;
    for (int p = 0; p < CONV_PASS_COUNT; p++) {
        const int want = n_wino == 0 ? CONV_CPU_WINOGRAD_F2 : -1;
        const int p_vgg = conv2d_run_path(&c, 1, 8, 2, p), p64 = conv2d_run_path(&f64, 0, 8, 2, p);
        const int p2x2 = conv2d_run_path(&f2x2, 1, 8, 2, p);
        if (want == CONV_CPU_WINOGRAD_F2) {
            CHECK(p_vgg == want, "pass %d of vgg11's 4x4 layer: %s, not model/winograd.c", p, path_name(p_vgg));
            CHECK(p64 == want, "pass %d of the 64-channel 8x8 layer: %s, not model/winograd.c", p, path_name(p64));
        } else {
            CHECK(p_vgg != CONV_CPU_WINOGRAD_F2 && p64 != CONV_CPU_WINOGRAD_F2, "oneDNN's Winograd is here");
        }
        CHECK(p2x2 == CONV_CPU_WINOGRAD_F2, "pass %d of vgg11's 2x2 layer: %s, not model/winograd.c", p, path_name(p2x2));
        const int p32 = conv2d_run_path(&f32, 0, 8, 2, p);
        CHECK(p32 == CONV_CPU_WINOGRAD_F2, "pass %d of the 32-channel 16x16 layer: %s, not model/winograd.c", p,
              path_name(p32));
        CHECK(conv2d_run_path(&f_s2, 0, 8, 2, p) != CONV_CPU_WINOGRAD_F2, "stride 2 takes model/winograd.c");
        n_f2 += p_vgg == CONV_CPU_WINOGRAD_F2;
    }
    /* Its results through conv2d_run_* (the cases above ran it where it applies): vgg11's 4x4 and 2x2 layers at
     * batch 8, and the 64-channel 8x8 one, against the loops. */
    const Case f2_cases[] = {
        {4, 256, 3, 512, 1, PAD_SAME, 1, ACT_RELU},
        {2, 512, 3, 512, 1, PAD_SAME, 1, ACT_RELU},
        {8, 64, 3, 64, 1, PAD_SAME, 0, ACT_NONE},
    };
    for (int i = 0; i < 3; i++) run_case(&f2_cases[i], 8, 8, 2, 1, 0);
    CHECK(n_f2_passes > 0, "model/winograd.c ran no pass compared with the loops (vgg11's 2x2 layer takes it)");
    /* One layer, two Winograds: with oneDNN's (AVX-512), at 64 tiles, 128 -> 256 on 8x8 runs ours forward and
     * backward weights and oneDNN's backward data (256 channels into its products), 256 -> 256 oneDNN's
     * forward and backward data and ours backward weights; each pass against the loops. */
    const Case mixed[] = {
        {8, 128, 3, 256, 1, PAD_SAME, 1, ACT_RELU},
        {8, 256, 3, 256, 1, PAD_SAME, 1, ACT_RELU},
    };
    for (int i = 0; i < 2; i++) {
        const int f2_at = n_f2_passes;
        run_case(&mixed[i], 16, 16, 2, 1, 0);
        if (n_wino == 0) continue; /* no oneDNN Winograd here: the rule without it is checked above */
        Conv2d m;
        conv2d_init(&m, 8, 8, mixed[i].C_in, 3, 3, mixed[i].C_out, 1, 1, PAD_SAME, ACT_RELU);
        const int want[2][CONV_PASS_COUNT] = {{CONV_CPU_WINOGRAD_F2, CONV_CPU_WINOGRAD, CONV_CPU_WINOGRAD_F2},
                                              {CONV_CPU_WINOGRAD, CONV_CPU_WINOGRAD, CONV_CPU_WINOGRAD_F2}};
        for (int p = 0; p < CONV_PASS_COUNT; p++) {
            const int got = conv2d_run_path(&m, 1, 16, 2, p);
            CHECK(got == want[i][p], "%d -> %d on 8x8, pass %d: %s, not %s", mixed[i].C_in, mixed[i].C_out, p,
                  path_name(got), path_name(want[i][p]));
        }
        CHECK(n_f2_passes - f2_at == (i == 0 ? 2 : 1), "%d -> %d: model/winograd.c ran %d passes", mixed[i].C_in,
              mixed[i].C_out, n_f2_passes - f2_at);
    }
    /* F(4x4, 5x5), for which oneDNN has no Winograd kernel on any CPU: every pass of mnist's and cifar10's second
     * convolutions (32 -> 64 at 14x14, 64 -> 64 at 12x12) whatever the machine, none of their first ones' (1
     * and 3 channels in) or of a stride-2 5x5 one's; then the same comparison with the loops. */
    Conv2d m2, c2, m1, c1, s2_5;
    conv2d_init(&m2, 14, 14, 32, 5, 5, 64, 1, 1, PAD_SAME, ACT_RELU);
    conv2d_init(&c2, 12, 12, 64, 5, 5, 64, 1, 1, PAD_SAME, ACT_RELU);
    conv2d_init(&m1, 28, 28, 1, 5, 5, 32, 1, 1, PAD_SAME, ACT_RELU);
    conv2d_init(&c1, 24, 24, 3, 5, 5, 64, 1, 1, PAD_SAME, ACT_RELU);
    conv2d_init(&s2_5, 12, 12, 64, 5, 5, 64, 2, 2, PAD_SAME, ACT_RELU);
    int n_f5 = 0;
    for (int p = 0; p < CONV_PASS_COUNT; p++) {
        const int pm = conv2d_run_path(&m2, 1, 8, 2, p), pc = conv2d_run_path(&c2, 1, 8, 2, p);
        CHECK(pm == CONV_CPU_WINOGRAD_F2, "pass %d of mnist's conv2: %s, not F(4x4,5x5)", p, path_name(pm));
        CHECK(pc == CONV_CPU_WINOGRAD_F2, "pass %d of cifar10's conv2: %s, not F(4x4,5x5)", p, path_name(pc));
        CHECK(conv2d_run_path(&m1, 1, 8, 2, p) != CONV_CPU_WINOGRAD_F2, "mnist's conv1 (1 channel) takes F(4x4,5x5)");
        CHECK(conv2d_run_path(&c1, 1, 8, 2, p) != CONV_CPU_WINOGRAD_F2, "cifar10's conv1 (3) takes F(4x4,5x5)");
        CHECK(conv2d_run_path(&s2_5, 1, 8, 2, p) != CONV_CPU_WINOGRAD_F2, "5x5 stride 2 takes F(4x4,5x5)");
        n_f5 += (pm == CONV_CPU_WINOGRAD_F2) + (pc == CONV_CPU_WINOGRAD_F2);
    }
    const int f2_before = n_f2_passes;
    const Case f5_cases[] = {
        {14, 32, 5, 64, 1, PAD_SAME, 1, ACT_RELU},
        {12, 64, 5, 64, 1, PAD_SAME, 1, ACT_RELU},
        {9, 48, 5, 40, 1, PAD_VALID, 0, ACT_NONE},
    };
    for (int i = 0; i < 3; i++) run_case(&f5_cases[i], 8, 8, 2, 1, 0);
    CHECK(n_f2_passes - f2_before == 9,
          "model/winograd.c's F(4x4,5x5) ran %d passes compared with the loops", n_f2_passes - f2_before);
    /* model/conv_first.c's direct kernels: backward weights of mnist's conv1 (1 channel in, 5x5) and of a 3x3
     * stride-2 layer on one channel (mobilenet_v2's Conv1 on a grey image) on every machine, never backward
     * data; with 16 lanes (AVX-512) also the forward of mnist's conv1 and of cifar10's (3 -> 64), not of the
     * grey 3x3 (32 channels out, 9 taps); then the same comparison with the loops, with and without the input
     * gradient (which the loops take); TOWER_CONV_FIRST=0 gives the table back. */
    const int wide = conv_cpu_lanes() == 16;
    Conv2d mob1;
    conv2d_init(&mob1, 32, 32, 1, 3, 3, 32, 2, 2, PAD_SAME, ACT_NONE);
    for (int p = 0; p < CONV_PASS_COUNT; p++) {
        const int pm = conv2d_run_path(&m1, 1, 8, 2, p), pb = conv2d_run_path(&mob1, 0, 8, 2, p);
        const int pc = conv2d_run_path(&c1, 1, 8, 2, p);
        const int fwd = p == CONV_PASS_FORWARD, bww = p == CONV_PASS_BACKWARD_WEIGHTS;
        CHECK((pm == CONV_CPU_FIRST) == (bww || (fwd && wide)), "pass %d of mnist's conv1: %s", p, path_name(pm));
        CHECK((pb == CONV_CPU_FIRST) == bww, "pass %d of a grey 3x3 stride-2 layer: %s", p, path_name(pb));
        CHECK((pc == CONV_CPU_FIRST) == (fwd && wide), "pass %d of cifar10's conv1: %s", p, path_name(pc));
    }
    const int first_before = n_first_passes;
    const Case first_cases[] = {
        {28, 1, 5, 32, 1, PAD_SAME, 1, ACT_RELU},
        {32, 1, 3, 32, 2, PAD_SAME, 0, ACT_NONE},
        {24, 3, 5, 64, 1, PAD_SAME, 1, ACT_RELU},
    };
    for (int i = 0; i < 3; i++)
        for (int want_dinp = 0; want_dinp <= 1; want_dinp++) run_case(&first_cases[i], 9, 9, 2, want_dinp, 0);
    CHECK(n_first_passes - first_before == (wide ? 8 : 4), "model/conv_first.c ran %d passes compared with the loops",
          n_first_passes - first_before);
    setenv("TOWER_CONV_FIRST", "0", 1);
    CHECK(conv2d_run_path(&m1, 1, 10, 2, CONV_PASS_FORWARD) != CONV_CPU_FIRST, "TOWER_CONV_FIRST=0: %s",
          path_name(conv2d_run_path(&m1, 1, 10, 2, CONV_PASS_FORWARD)));
    unsetenv("TOWER_CONV_FIRST");
    setenv("TOWER_CONV_WINOGRAD_F2", "0", 1);
    CHECK(conv2d_run_path(&c, 1, 9, 2, CONV_PASS_FORWARD) != CONV_CPU_WINOGRAD_F2, "TOWER_CONV_WINOGRAD_F2=0");
    CHECK(conv2d_run_path(&c2, 1, 13, 2, CONV_PASS_FORWARD) != CONV_CPU_WINOGRAD_F2, "TOWER_CONV_WINOGRAD_F2=0, 5x5");
    unsetenv("TOWER_CONV_WINOGRAD_F2");
    printf("  model/winograd.c (F(4x4,3x3)) took %d of vgg11's 4x4 layer's passes%s; F(4x4,5x5) %d of the 6 of "
           "mnist's and cifar10's conv2\n",
           n_f2, n_wino ? " (none: oneDNN's Winograd kernels are here)" : "", n_f5);
    printf("%d oneDNN, %d model/winograd.c and %d model/conv_first.c passes compared; %d checks, %d failures\n",
           n_onednn_passes, n_f2_passes, n_first_passes, check_count, check_failures);
    return check_failures ? 1 : 0;
}
