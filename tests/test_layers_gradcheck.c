/* test_layers_gradcheck.c — finite-difference checks of every layer's backward
 * in model/layers.h, and proof that the checker rejects a wrong gradient.
 *
 * Where it sits: ctest, label none (CPU).  Uses the shared checker
 * tests/gradcheck.c.  The objective is sum(out * R) with R fixed random
 * weights; the analytic gradient is backward with dout = R.
 * Kinks are avoided by construction: relu inputs are kept at least a few
 * steps away from 0 (inputs re-drawn until every pre-activation clears the
 * margin), max-pool inputs are distinct values 10 steps apart, so no step
 * changes a winner.
 */
#include "gradcheck.h"
#include "model/layers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EPS 1e-3

static int g_failures = 0;

static float *uniform(size_t n, float lo, float hi, uint64_t seed) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    gradcheck_fill_uniform(x, n, lo, hi, seed);
    return x;
}

static float min_abs(const float *x, size_t n) {
    float m = INFINITY;
    for (size_t i = 0; i < n; i++) m = fabsf(x[i]) < m ? fabsf(x[i]) : m;
    return m;
}

static GradcheckResult check(const char *what, float *x, size_t n, const float *analytic,
                             GradcheckObjective f, void *ctx) {
    GradcheckOpts o = {what, EPS, 1e-2, 1e-3, 400, 7, 0, 0};
    GradcheckResult r = gradcheck(x, n, analytic, f, ctx, &o);
    if (r.n_failed > 0 || r.n_checked == 0) {
        printf("FAIL: %s\n", what);
        g_failures++;
    }
    return r;
}

/* ---- conv2d ----------------------------------------------------------------- */

typedef struct {
    Conv2d c;
    int B, n_threads;
    float *inp, *w, *bias, *out, *R, *scratch;
} ConvCtx;

static double conv_obj(void *p) {
    ConvCtx *k = p;
    conv2d_forward(k->out, k->scratch, k->inp, k->w, k->bias, &k->c, k->B, k->n_threads);
    return gradcheck_dot(k->out, k->R, (size_t)k->B * k->c.OH * k->c.OW * k->c.C_out);
}

/* Returns the ConvCtx filled with inputs whose pre-activations all clear the
 * relu margin (when act is relu). */
static void conv_setup(ConvCtx *k, int B, int H, int W, int Ci, int KH, int KW, int Co,
                       int sh, int sw, Padding pad, Activation act, uint64_t seed) {
    memset(k, 0, sizeof *k);
    if (conv2d_init(&k->c, H, W, Ci, KH, KW, Co, sh, sw, pad, act) != 0) {
        printf("FAIL: conv2d_init rejected a valid shape\n");
        exit(1);
    }
    k->B = B;
    k->n_threads = 2;
    const size_t in_n = (size_t)B * H * W * Ci, w_n = (size_t)KH * KW * Ci * Co;
    const size_t out_n = (size_t)B * k->c.OH * k->c.OW * Co;
    k->scratch = malloc(sizeof(float) * conv2d_scratch_n_floats(&k->c, k->n_threads));
    k->out = malloc(sizeof(float) * out_n);
    for (int attempt = 0;; attempt++, seed += 1000) {
        free(k->inp); free(k->w); free(k->bias);
        k->inp = uniform(in_n, -1, 1, seed);
        k->w = uniform(w_n, -1, 1, seed + 1);
        k->bias = uniform(Co, -0.5f, 0.5f, seed + 2);
        if (act == ACT_NONE) break;
        Conv2d lin = k->c;
        lin.act = ACT_NONE;
        conv2d_forward(k->out, k->scratch, k->inp, k->w, k->bias, &lin, B, k->n_threads);
        /* One step moves a pre-activation by at most EPS * max(1, |x|, |w|) = EPS. */
        if (min_abs(k->out, out_n) > 3 * EPS) break;
        if (attempt > 200) {
            printf("FAIL: could not draw conv inputs clear of the relu kink\n");
            exit(1);
        }
    }
    k->R = uniform(out_n, -1, 1, seed + 3);
}

static void conv_free(ConvCtx *k) {
    free(k->inp); free(k->w); free(k->bias); free(k->out); free(k->R); free(k->scratch);
}

static void test_conv(const char *name, int B, int H, int W, int Ci, int KH, int KW, int Co,
                      int sh, int sw, Padding pad, Activation act, uint64_t seed) {
    ConvCtx k;
    conv_setup(&k, B, H, W, Ci, KH, KW, Co, sh, sw, pad, act, seed);
    const size_t in_n = (size_t)B * H * W * Ci, w_n = (size_t)KH * KW * Ci * Co;
    float *dinp = malloc(sizeof(float) * in_n), *dw = malloc(sizeof(float) * w_n), *db = malloc(sizeof(float) * Co);
    /* Garbage first: backward must overwrite, not add. */
    for (size_t i = 0; i < in_n; i++) dinp[i] = 1e3f;
    for (size_t i = 0; i < w_n; i++) dw[i] = -1e3f;
    for (int i = 0; i < Co; i++) db[i] = 7.0f;
    conv_obj(&k);
    conv2d_backward(dinp, dw, db, k.scratch, k.out, k.R, k.inp, k.w, &k.c, B, k.n_threads);
    char what[96];
    snprintf(what, sizeof what, "%s dinp", name);
    check(what, k.inp, in_n, dinp, conv_obj, &k);
    snprintf(what, sizeof what, "%s dweight", name);
    check(what, k.w, w_n, dw, conv_obj, &k);
    snprintf(what, sizeof what, "%s dbias", name);
    check(what, k.bias, Co, db, conv_obj, &k);
    free(dinp); free(dw); free(db);
    conv_free(&k);
}

/* ---- max pool ------------------------------------------------------------------ */

typedef struct {
    MaxPool p;
    int B;
    float *inp, *out, *R;
    int32_t *argmax;
} PoolCtx;

static double pool_obj(void *q) {
    PoolCtx *k = q;
    maxpool_forward(k->out, k->argmax, k->inp, &k->p, k->B);
    return gradcheck_dot(k->out, k->R, (size_t)k->B * k->p.OH * k->p.OW * k->p.C);
}

static void test_pool(const char *name, int B, int H, int W, int C, int K, int s, Padding pad, uint64_t seed) {
    PoolCtx k;
    memset(&k, 0, sizeof k);
    if (maxpool_init(&k.p, H, W, C, K, K, s, s, pad) != 0) {
        printf("FAIL: maxpool_init rejected a valid shape\n");
        exit(1);
    }
    k.B = B;
    const size_t in_n = (size_t)B * H * W * C, out_n = (size_t)B * k.p.OH * k.p.OW * C;
    /* Distinct values 0.01 apart (10 steps) in a random order, some negative. */
    k.inp = malloc(sizeof(float) * in_n);
    float *u = uniform(in_n, 0, 1, seed);
    size_t *perm = malloc(sizeof(size_t) * in_n);
    for (size_t i = 0; i < in_n; i++) perm[i] = i;
    for (size_t i = in_n; i > 1; i--) {
        size_t j = (size_t)(u[i - 1] * i);
        size_t t = perm[i - 1]; perm[i - 1] = perm[j]; perm[j] = t;
    }
    for (size_t i = 0; i < in_n; i++) k.inp[perm[i]] = 0.01f * (float)i - 0.003f * (float)in_n;
    free(u); free(perm);
    k.out = malloc(sizeof(float) * out_n);
    k.argmax = malloc(sizeof(int32_t) * out_n);
    k.R = uniform(out_n, -1, 1, seed + 1);
    float *dinp = malloc(sizeof(float) * in_n);
    for (size_t i = 0; i < in_n; i++) dinp[i] = 1e3f;
    pool_obj(&k);
    maxpool_backward(dinp, k.argmax, k.R, &k.p, B);
    char what[96];
    snprintf(what, sizeof what, "%s dinp", name);
    check(what, k.inp, in_n, dinp, pool_obj, &k);
    free(dinp); free(k.inp); free(k.out); free(k.argmax); free(k.R);
}

/* ---- LRN ----------------------------------------------------------------------- */

typedef struct {
    Lrn p;
    size_t n_px;
    int C;
    float *inp, *out, *scale, *R;
} LrnCtx;

static double lrn_obj(void *q) {
    LrnCtx *k = q;
    lrn_forward(k->out, k->scale, k->inp, &k->p, k->n_px, k->C);
    return gradcheck_dot(k->out, k->R, k->n_px * k->C);
}

static void test_lrn(const char *name, size_t n_px, int C, int r, float bias, float alpha, float beta,
                     float amp, uint64_t seed) {
    LrnCtx k = {{r, bias, alpha, beta}, n_px, C, NULL, NULL, NULL, NULL};
    const size_t n = n_px * C;
    k.inp = uniform(n, -amp, amp, seed);
    k.out = malloc(sizeof(float) * n);
    k.scale = malloc(sizeof(float) * n);
    k.R = uniform(n, -1, 1, seed + 1);
    float *dinp = malloc(sizeof(float) * n);
    lrn_obj(&k);
    lrn_backward(dinp, k.scale, k.out, k.R, k.inp, &k.p, n_px, C);
    char what[96];
    snprintf(what, sizeof what, "%s dinp", name);
    check(what, k.inp, n, dinp, lrn_obj, &k);
    free(dinp); free(k.inp); free(k.out); free(k.scale); free(k.R);
}

/* ---- dense ----------------------------------------------------------------------- */

typedef struct {
    Dense d;
    int B;
    float *inp, *w, *bias, *out, *R;
} DenseCtx;

static double dense_obj(void *q) {
    DenseCtx *k = q;
    dense_forward(k->out, k->inp, k->w, k->bias, &k->d, k->B);
    return gradcheck_dot(k->out, k->R, (size_t)k->B * k->d.n_out);
}

static void test_dense(const char *name, int B, int n_in, int n_out, Activation act, uint64_t seed) {
    DenseCtx k = {{n_in, n_out, act}, B, NULL, NULL, NULL, NULL, NULL};
    const size_t in_n = (size_t)B * n_in, w_n = (size_t)n_in * n_out, out_n = (size_t)B * n_out;
    k.out = malloc(sizeof(float) * out_n);
    for (int attempt = 0;; attempt++, seed += 1000) {
        free(k.inp); free(k.w); free(k.bias);
        k.inp = uniform(in_n, -1, 1, seed);
        k.w = uniform(w_n, -1, 1, seed + 1);
        k.bias = uniform(n_out, -0.5f, 0.5f, seed + 2);
        if (act == ACT_NONE) break;
        Dense lin = k.d;
        lin.act = ACT_NONE;
        dense_forward(k.out, k.inp, k.w, k.bias, &lin, B);
        if (min_abs(k.out, out_n) > 3 * EPS) break;
        if (attempt > 200) {
            printf("FAIL: could not draw dense inputs clear of the relu kink\n");
            exit(1);
        }
    }
    k.R = uniform(out_n, -1, 1, seed + 3);
    float *dinp = malloc(sizeof(float) * in_n), *dw = malloc(sizeof(float) * w_n);
    float *db = malloc(sizeof(float) * n_out), *dpre = malloc(sizeof(float) * out_n);
    for (size_t i = 0; i < w_n; i++) dw[i] = 1e3f;
    for (int i = 0; i < n_out; i++) db[i] = 1e3f;
    dense_obj(&k);
    dense_backward(dinp, dw, db, dpre, k.out, k.R, k.inp, k.w, &k.d, B, 0);
    char what[96];
    snprintf(what, sizeof what, "%s dinp", name);
    check(what, k.inp, in_n, dinp, dense_obj, &k);
    snprintf(what, sizeof what, "%s dweight", name);
    check(what, k.w, w_n, dw, dense_obj, &k);
    snprintf(what, sizeof what, "%s dbias", name);
    check(what, k.bias, n_out, db, dense_obj, &k);
    free(dinp); free(dw); free(db); free(dpre);
    free(k.inp); free(k.w); free(k.bias); free(k.out); free(k.R);
}

/* ---- bias add, relu ---------------------------------------------------------------- */

typedef struct {
    size_t rows;
    int C;
    float *inp, *bias, *out, *R;
} EltCtx;

static double bias_obj(void *q) {
    EltCtx *k = q;
    bias_add_forward(k->out, k->inp, k->bias, k->rows, k->C);
    return gradcheck_dot(k->out, k->R, k->rows * k->C);
}

static double relu_obj(void *q) {
    EltCtx *k = q;
    relu_forward(k->out, k->inp, k->rows * k->C);
    return gradcheck_dot(k->out, k->R, k->rows * k->C);
}

static void test_bias_relu(void) {
    EltCtx k = {13, 5, NULL, NULL, NULL, NULL};
    const size_t n = k.rows * k.C;
    k.inp = uniform(n, -1, 1, 101);
    /* relu kinks by construction: |x| >= 0.05, fifty steps from 0. */
    for (size_t i = 0; i < n; i++) k.inp[i] += k.inp[i] < 0 ? -0.05f : 0.05f;
    k.bias = uniform(k.C, -1, 1, 102);
    k.out = malloc(sizeof(float) * n);
    k.R = uniform(n, -1, 1, 103);
    float *dbias = malloc(sizeof(float) * k.C), *dinp = malloc(sizeof(float) * n);
    /* bias_add_backward ADDS: start from 0.25 and subtract it back. */
    for (int c = 0; c < k.C; c++) dbias[c] = 0.25f;
    bias_add_backward(dbias, k.R, k.rows, k.C);
    for (int c = 0; c < k.C; c++) dbias[c] -= 0.25f;
    check("bias_add dbias", k.bias, k.C, dbias, bias_obj, &k);
    relu_forward(k.out, k.inp, n);
    relu_backward(dinp, k.out, k.R, n);
    check("relu dinp", k.inp, n, dinp, relu_obj, &k);
    free(dbias); free(dinp); free(k.inp); free(k.bias); free(k.out); free(k.R);
}

/* ---- softmax cross-entropy, L2 --------------------------------------------------------- */

typedef struct {
    int B, K;
    float *logits, *probs;
    int32_t *labels;
    float dloss;
} XentCtx;

static double xent_obj(void *q) {
    XentCtx *k = q;
    return (double)k->dloss * softmax_xent_forward(k->probs, k->logits, k->labels, k->B, k->K);
}

static void test_xent(void) {
    XentCtx k = {6, 5, NULL, NULL, NULL, 1.7f};
    const size_t n = (size_t)k.B * k.K;
    k.logits = uniform(n, -3, 3, 201);
    k.probs = malloc(sizeof(float) * n);
    k.labels = malloc(sizeof(int32_t) * k.B);
    for (int b = 0; b < k.B; b++) k.labels[b] = (b * 3) % k.K;
    float *dlogits = malloc(sizeof(float) * n);
    xent_obj(&k);
    softmax_xent_backward(dlogits, k.probs, k.labels, k.dloss, k.B, k.K);
    check("softmax_xent dlogits", k.logits, n, dlogits, xent_obj, &k);
    free(dlogits); free(k.logits); free(k.probs); free(k.labels);
}

typedef struct {
    float *w;
    size_t n;
    float wd;
} L2Ctx;

static double l2_obj(void *q) {
    L2Ctx *k = q;
    return l2_loss_forward(k->w, k->n, k->wd);
}

static void test_l2(void) {
    L2Ctx k = {uniform(50, -2, 2, 301), 50, 0.3f};
    float *dw = calloc(k.n, sizeof(float));
    l2_loss_backward(dw, k.w, k.n, k.wd);
    check("l2_loss dw", k.w, k.n, dw, l2_obj, &k);
    free(dw); free(k.w);
}

/* ---- the checker can fail ------------------------------------------------------------ */

static void test_checker_rejects_wrong_gradient(void) {
    ConvCtx k;
    conv_setup(&k, 2, 6, 5, 3, 3, 3, 4, 1, 1, PAD_SAME, ACT_NONE, 401);
    const size_t in_n = (size_t)2 * 6 * 5 * 3, w_n = (size_t)3 * 3 * 3 * 4;
    float *dinp = malloc(sizeof(float) * in_n), *dw = malloc(sizeof(float) * w_n), *db = malloc(sizeof(float) * 4);
    conv_obj(&k);
    conv2d_backward(dinp, dw, db, k.scratch, k.out, k.R, k.inp, k.w, &k.c, 2, k.n_threads);
    GradcheckOpts o = {"conv2d dweight (correct)", EPS, 1e-2, 1e-3, 400, 7, 0, 0};
    GradcheckResult good = gradcheck(k.w, w_n, dw, conv_obj, &k, &o);
    /* A 5% error in the largest coordinate, a sign error in another one
     * well above the tolerance floor. */
    size_t i1 = 0, i2 = w_n;
    for (size_t i = 1; i < w_n; i++) if (fabsf(dw[i]) > fabsf(dw[i1])) i1 = i;
    for (size_t i = 0; i < w_n && i2 == w_n; i++) if (i != i1 && fabsf(dw[i]) > 0.05f) i2 = i;
    if (i2 == w_n) {
        printf("FAIL: no second large gradient coordinate to perturb\n");
        exit(1);
    }
    dw[i1] *= 1.05f;
    dw[i2] = -dw[i2];
    o.what = "conv2d dweight (perturbed)";
    GradcheckResult bad = gradcheck(k.w, w_n, dw, conv_obj, &k, &o);
    if (good.n_failed != 0 || bad.n_failed != 2) {
        printf("FAIL: checker accepted a wrong gradient or rejected a right one (failed %d then %d, want 0 then 2)\n",
               good.n_failed, bad.n_failed);
        g_failures++;
    } else {
        printf("ok: checker rejects the perturbed gradient (2 of 2 wrong coordinates caught)\n");
    }
    /* The same for a layer whose error is in the input gradient. */
    dinp[5] += 0.05f * (fabsf(dinp[5]) + 0.1f);
    o.what = "conv2d dinp (perturbed)";
    GradcheckResult bad2 = gradcheck(k.inp, in_n, dinp, conv_obj, &k, &o);
    if (bad2.n_failed != 1) {
        printf("FAIL: checker missed a perturbed input gradient (failed %d, want 1)\n", bad2.n_failed);
        g_failures++;
    }
    free(dinp); free(dw); free(db);
    conv_free(&k);
}

int main(void) {
    /* conv2d: SAME/VALID, strides, odd sizes, relu or not, rectangular kernels. */
    test_conv("conv2d 3x3 s1 SAME relu", 2, 7, 6, 3, 3, 3, 4, 1, 1, PAD_SAME, ACT_RELU, 1);
    test_conv("conv2d 5x5 s2 SAME", 2, 8, 7, 2, 5, 5, 3, 2, 2, PAD_SAME, ACT_NONE, 2);
    test_conv("conv2d 3x2 s(2,1) VALID", 3, 7, 7, 2, 3, 2, 3, 2, 1, PAD_VALID, ACT_NONE, 3);
    test_conv("conv2d 5x5 s1 SAME relu C1", 2, 6, 5, 1, 5, 5, 4, 1, 1, PAD_SAME, ACT_RELU, 4);
    test_conv("conv2d 4x4 s3 SAME odd", 1, 7, 5, 2, 4, 4, 2, 3, 3, PAD_SAME, ACT_NONE, 5);
    /* max pool: the models' 3x3/2 and 2x2/2 SAME, odd sizes, VALID. */
    test_pool("maxpool 3x3/2 SAME even", 2, 6, 6, 3, 3, 2, PAD_SAME, 11);
    test_pool("maxpool 3x3/2 SAME odd", 2, 7, 5, 3, 3, 2, PAD_SAME, 12);
    test_pool("maxpool 2x2/2 SAME odd", 2, 5, 5, 2, 2, 2, PAD_SAME, 13);
    test_pool("maxpool 3x3/2 VALID", 1, 7, 7, 2, 3, 2, PAD_VALID, 14);
    /* LRN: each pow path (0.75, 0.5, 1, general) and the cifar10 constants. */
    test_lrn("lrn r2 b0.75", 6, 7, 2, 1.0f, 0.3f, 0.75f, 1.5f, 21);
    test_lrn("lrn r1 b0.5", 5, 6, 1, 0.5f, 0.7f, 0.5f, 1.0f, 22);
    test_lrn("lrn r3 b1", 4, 9, 3, 2.0f, 0.2f, 1.0f, 1.5f, 23);
    test_lrn("lrn r4 b0.6 C<r", 5, 3, 4, 1.0f, 0.4f, 0.6f, 1.5f, 24);
    test_lrn("lrn cifar10 constants", 4, 16, 4, 1.0f, (float)(0.001 / 9.0), 0.75f, 8.0f, 25);
    /* dense. */
    test_dense("dense relu", 5, 7, 6, ACT_RELU, 31);
    test_dense("dense linear", 3, 9, 4, ACT_NONE, 32);
    test_bias_relu();
    test_xent();
    test_l2();
    test_checker_rejects_wrong_gradient();
    if (g_failures) {
        printf("%d gradient checks FAILED\n", g_failures);
        return 1;
    }
    printf("all layer gradient checks passed\n");
    return 0;
}
