/* test_layers_new_gradcheck.c — finite-difference checks of the MobileNetV2
 * layers of model/layers.h (batch norm, depthwise, pointwise, zero padding,
 * ReLU6, residual add, global average pooling, dropout), their backward
 * conventions (parameter gradients ADDED, activation gradients WRITTEN), the
 * sync batch norm split (two towers' sums give one tower's results), the
 * moving-statistics update, 2 threads against 1 on shapes large enough to
 * run in parallel, and proof that the checker rejects a wrong gradient of
 * these layers.
 *
 * Where it sits: ctest, label none (CPU), beside test_layers_gradcheck.c,
 * through the shared checker tests/gradcheck.c.  Objective sum(out * R)
 * with R fixed random weights; the analytic gradient is backward with
 * dout = R.  ReLU6 inputs are kept 0.05 (fifty steps) away from both kinks.
 */
#include "gradcheck.h"
#include "model/graph.h"
#include "model/layers.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EPS 1e-3

static int g_failures = 0;
static int g_max_checks = 400; /* lowered for the shapes large enough to run in parallel */

static float *uniform(size_t n, float lo, float hi, uint64_t seed) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    gradcheck_fill_uniform(x, n, lo, hi, seed);
    return x;
}

static float *filled(size_t n, float v) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = v;
    return x;
}

static void fail(const char *what) {
    printf("FAIL: %s\n", what);
    g_failures++;
}

static GradcheckResult check(const char *what, float *x, size_t n, const float *analytic,
                             GradcheckObjective f, void *ctx) {
    GradcheckOpts o = {what, EPS, 1e-2, 1e-3, g_max_checks, 7, 0, 0};
    GradcheckResult r = gradcheck(x, n, analytic, f, ctx, &o);
    if (r.n_failed > 0 || r.n_checked == 0) fail(what);
    return r;
}

/* a ADDED into a buffer that started at `start`: remove the start again. */
static void unstart(float *a, size_t n, float start) {
    for (size_t i = 0; i < n; i++) a[i] -= start;
}

/* Every element of an activation gradient that started as garbage must
 * have been written (no 1e30 left when the true gradient is finite). */
static void expect_written(const char *what, const float *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (fabsf(a[i]) > 1e20f) {
            printf("  %s[%zu] still holds the garbage it started with\n", what, i);
            fail(what);
            return;
        }
}

static int close_to(float a, float b, float tol) { return fabsf(a - b) <= tol * (1.0f + fabsf(b)); }

/* ---- batch norm ------------------------------------------------------------ */

typedef struct {
    BatchNorm bn;
    size_t rows;
    float *inp, *gamma, *beta, *out, *mean, *var, *inv_std, *R;
    double *sums;
} BnCtx;

static double bn_obj(void *p) {
    BnCtx *k = p;
    batchnorm_forward_train(k->out, k->mean, k->var, k->inv_std, k->sums, k->inp, k->gamma, k->beta, &k->bn, k->rows);
    return gradcheck_dot(k->out, k->R, k->rows * k->bn.C);
}

static void bn_setup(BnCtx *k, size_t rows, int C, float offset, uint64_t seed) {
    memset(k, 0, sizeof *k);
    k->bn = (BatchNorm){C, 0.99, 1e-3f, ACT_NONE};
    k->rows = rows;
    k->inp = uniform(rows * C, offset - 1.0f, offset + 1.0f, seed);
    k->gamma = uniform(C, 0.5f, 1.5f, seed + 1);
    k->beta = uniform(C, -0.5f, 0.5f, seed + 2);
    k->out = malloc(sizeof(float) * rows * C);
    k->mean = malloc(sizeof(float) * C);
    k->var = malloc(sizeof(float) * C);
    k->inv_std = malloc(sizeof(float) * C);
    k->sums = malloc(sizeof(double) * batchnorm_scratch_n_doubles(C));
    k->R = uniform(rows * C, -1, 1, seed + 3);
}

static void bn_free(BnCtx *k) {
    free(k->inp); free(k->gamma); free(k->beta); free(k->out); free(k->mean); free(k->var);
    free(k->inv_std); free(k->sums); free(k->R);
}

static void test_batchnorm(const char *name, size_t rows, int C, float offset, uint64_t seed) {
    BnCtx k;
    bn_setup(&k, rows, C, offset, seed);
    const size_t n = rows * C;
    float *dinp = filled(n, 1e30f), *dgamma = filled(C, 0.25f), *dbeta = filled(C, -0.5f);
    double *dsums = malloc(sizeof(double) * batchnorm_scratch_n_doubles(C));
    bn_obj(&k);
    batchnorm_backward(dinp, dgamma, dbeta, dsums, k.R, k.inp, k.mean, k.inv_std, k.gamma, &k.bn, rows);
    unstart(dgamma, C, 0.25f);
    unstart(dbeta, C, -0.5f);
    char what[96];
    snprintf(what, sizeof what, "%s dinp", name);
    expect_written(what, dinp, n);
    check(what, k.inp, n, dinp, bn_obj, &k);
    snprintf(what, sizeof what, "%s dgamma (added)", name);
    check(what, k.gamma, C, dgamma, bn_obj, &k);
    snprintf(what, sizeof what, "%s dbeta (added)", name);
    check(what, k.beta, C, dbeta, bn_obj, &k);
    free(dinp); free(dgamma); free(dbeta); free(dsums);
    bn_free(&k);
}

/* Evaluation forward with the moving statistics, and the moving update. */
typedef struct {
    BatchNorm bn;
    size_t rows;
    float *inp, *gamma, *beta, *mm, *mv, *out, *inv_std, *R;
} BnEvalCtx;

static double bn_eval_obj(void *p) {
    BnEvalCtx *k = p;
    batchnorm_forward_eval(k->out, k->inv_std, k->inp, k->mm, k->mv, k->gamma, k->beta, &k->bn, k->rows);
    return gradcheck_dot(k->out, k->R, k->rows * k->bn.C);
}

static void test_batchnorm_statistics(void) {
    /* Biased variance (Keras 3): x = 1, 2, 3, 4 in channel 0 -> mean 2.5, var 1.25 (not 5/3). */
    const float x[8] = {1, 10, 2, 20, 3, 30, 4, 40};
    double sums[4], partials[BATCHNORM_CPU_CHUNKS * 4];
    float mean[2], var[2];
    batchnorm_sums(sums, partials, x, 4, 2);
    batchnorm_moments(mean, var, sums, 4.0, 2);
    if (!(mean[0] == 2.5f && var[0] == 1.25f && mean[1] == 25.0f && var[1] == 125.0f))
        fail("batchnorm moments: want mean 2.5, 25 and the biased variance 1.25, 125");
    else
        printf("ok: batchnorm moments are the biased ones (var 1.25, 125)\n");
    /* moving = moving * momentum + batch * (1 - momentum), for both momenta Keras uses. */
    float mm[2] = {0.0f, 1.0f}, mv[2] = {1.0f, 2.0f};
    batchnorm_update_moving(mm, mv, mean, var, 0.99, 2);
    if (!(close_to(mm[0], 0.025f, 1e-6f) && close_to(mm[1], 0.99f + 0.25f, 1e-6f) &&
          close_to(mv[0], 0.99f + 0.0125f, 1e-6f) && close_to(mv[1], 1.98f + 1.25f, 1e-6f)))
        fail("batchnorm moving update (momentum 0.99)");
    float mm2[1] = {2.0f}, mv2[1] = {4.0f};
    batchnorm_update_moving(mm2, mv2, mean, var, 0.999, 1);
    if (!(close_to(mm2[0], 2.0f * 0.999f + 2.5f * 0.001f, 1e-6f) && close_to(mv2[0], 4.0f * 0.999f + 1.25f * 0.001f, 1e-6f)))
        fail("batchnorm moving update (momentum 0.999)");
    else
        printf("ok: moving statistics follow moving * momentum + batch * (1 - momentum)\n");
    /* Evaluation: a known value, then its gradient w.r.t. the input. */
    BnEvalCtx k = {{3, 0.99, 1e-3f, ACT_NONE}, 7, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    k.inp = uniform(21, -2, 2, 501);
    k.gamma = uniform(3, 0.5f, 1.5f, 502);
    k.beta = uniform(3, -0.5f, 0.5f, 503);
    k.mm = uniform(3, -0.3f, 0.3f, 504);
    k.mv = uniform(3, 0.5f, 2.0f, 505);
    k.out = malloc(sizeof(float) * 21);
    k.inv_std = malloc(sizeof(float) * 3);
    k.R = uniform(21, -1, 1, 506);
    bn_eval_obj(&k);
    const double want = ((double)k.inp[4] - k.mm[1]) / sqrt((double)k.mv[1] + 1e-3) * k.gamma[1] + k.beta[1];
    if (fabs(k.out[4] - want) > 1e-5) fail("batchnorm eval forward: known value");
    float *dinp = malloc(sizeof(float) * 21);
    for (int i = 0; i < 21; i++) dinp[i] = k.R[i] * k.gamma[i % 3] * k.inv_std[i % 3];
    check("batchnorm eval dinp", k.inp, 21, dinp, bn_eval_obj, &k);
    free(dinp); free(k.inp); free(k.gamma); free(k.beta); free(k.mm); free(k.mv); free(k.out); free(k.inv_std); free(k.R);
}

/* Sync batch norm: two towers' rows (unequal shards) with their sums added
 * equal one tower holding all of them. */
static void test_batchnorm_sync(size_t rows_a, size_t rows_b, int C, uint64_t seed) {
    BnCtx k;
    const size_t rows = rows_a + rows_b, n = rows * C, n_a = rows_a * C;
    bn_setup(&k, rows, C, 0.7f, seed);
    float *dinp = malloc(sizeof(float) * n), *dgamma = filled(C, 0.0f), *dbeta = filled(C, 0.0f);
    double *dsums = malloc(sizeof(double) * batchnorm_scratch_n_doubles(C));
    bn_obj(&k);
    batchnorm_backward(dinp, dgamma, dbeta, dsums, k.R, k.inp, k.mean, k.inv_std, k.gamma, &k.bn, rows);
    /* The towers. */
    double *s_a = malloc(sizeof(double) * 2 * C), *s_b = malloc(sizeof(double) * 2 * C), *s = malloc(sizeof(double) * 2 * C);
    float *mean = malloc(sizeof(float) * C), *var = malloc(sizeof(float) * C), *inv_std = malloc(sizeof(float) * C);
    float *out = malloc(sizeof(float) * n), *dx = malloc(sizeof(float) * n);
    float *dg = filled(C, 0.0f), *db = filled(C, 0.0f);
    double *part = malloc(sizeof(double) * batchnorm_scratch_n_doubles(C));
    batchnorm_sums(s_a, part, k.inp, rows_a, C);
    batchnorm_sums(s_b, part, k.inp + n_a, rows_b, C);
    for (int i = 0; i < 2 * C; i++) s[i] = s_a[i] + s_b[i];
    batchnorm_moments(mean, var, s, (double)rows, C);
    batchnorm_normalize(out, inv_std, k.inp, mean, var, k.gamma, k.beta, k.bn.epsilon, rows_a, C);
    batchnorm_normalize(out + n_a, inv_std, k.inp + n_a, mean, var, k.gamma, k.beta, k.bn.epsilon, rows_b, C);
    batchnorm_backward_sums(s_a, part, k.R, k.inp, mean, inv_std, rows_a, C);
    batchnorm_backward_sums(s_b, part, k.R + n_a, k.inp + n_a, mean, inv_std, rows_b, C);
    batchnorm_param_grads(dg, db, s_a, C);
    batchnorm_param_grads(dg, db, s_b, C);
    for (int i = 0; i < 2 * C; i++) s[i] = s_a[i] + s_b[i];
    batchnorm_backward_input(dx, k.R, k.inp, mean, inv_std, k.gamma, s, (double)rows, rows_a, C);
    batchnorm_backward_input(dx + n_a, k.R + n_a, k.inp + n_a, mean, inv_std, k.gamma, s, (double)rows, rows_b, C);
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(out[i] - k.out[i]) + fabs(dx[i] - dinp[i]));
    for (int c = 0; c < C; c++) worst = fmax(worst, fabs(mean[c] - k.mean[c]) + fabs(var[c] - k.var[c]) +
                                                        fabs(dg[c] - dgamma[c]) + fabs(db[c] - dbeta[c]));
    printf("batchnorm sync: towers of %zu + %zu rows vs one of %zu: largest |diff| %.3g\n", rows_a, rows_b, rows, worst);
    if (!(worst < 1e-5)) fail("batchnorm sync split differs from one tower");
    free(dinp); free(dgamma); free(dbeta); free(dsums); free(s_a); free(s_b); free(s); free(part);
    free(mean); free(var); free(inv_std); free(out); free(dx); free(dg); free(db);
    bn_free(&k);
}

/* ---- depthwise ----------------------------------------------------------------- */

typedef struct {
    Depthwise d;
    int B;
    float *inp, *w, *out, *R;
} DwCtx;

static double dw_obj(void *p) {
    DwCtx *k = p;
    depthwise_forward(k->out, k->inp, k->w, &k->d, k->B);
    return gradcheck_dot(k->out, k->R, (size_t)k->B * k->d.OH * k->d.OW * k->d.C);
}

static void dw_setup(DwCtx *k, int B, int H, int W, int C, int stride, Padding pad, uint64_t seed) {
    memset(k, 0, sizeof *k);
    if (depthwise_init(&k->d, H, W, C, 3, 3, stride, pad) != 0) {
        printf("FAIL: depthwise_init rejected a valid shape\n");
        exit(1);
    }
    k->B = B;
    const size_t in_n = (size_t)B * H * W * C, out_n = (size_t)B * k->d.OH * k->d.OW * C;
    k->inp = uniform(in_n, -1, 1, seed);
    k->w = uniform((size_t)9 * C, -1, 1, seed + 1);
    k->out = malloc(sizeof(float) * out_n);
    k->R = uniform(out_n, -1, 1, seed + 2);
}

static void test_depthwise(const char *name, int B, int H, int W, int C, int stride, Padding pad, uint64_t seed) {
    DwCtx k;
    dw_setup(&k, B, H, W, C, stride, pad, seed);
    const size_t in_n = (size_t)B * H * W * C, w_n = (size_t)9 * C;
    float *dinp = filled(in_n, 1e30f), *dw = filled(w_n, 0.125f);
    float *scratch = malloc(sizeof(float) * depthwise_scratch_n_floats(&k.d, 2));
    dw_obj(&k);
    depthwise_backward(dinp, dw, scratch, k.R, k.inp, k.w, &k.d, B, 2);
    unstart(dw, w_n, 0.125f);
    char what[96];
    snprintf(what, sizeof what, "%s dinp", name);
    expect_written(what, dinp, in_n);
    check(what, k.inp, in_n, dinp, dw_obj, &k);
    snprintf(what, sizeof what, "%s dweight (added)", name);
    check(what, k.w, w_n, dw, dw_obj, &k);
    free(dinp); free(dw); free(scratch);
    free(k.inp); free(k.w); free(k.out); free(k.R);
}

/* ---- pointwise ------------------------------------------------------------------ */

typedef struct {
    size_t rows;
    int Ci, Co;
    float *inp, *w, *out, *R;
} PwCtx;

static double pw_obj(void *p) {
    PwCtx *k = p;
    pointwise_forward(k->out, k->inp, k->w, k->rows, k->Ci, k->Co);
    return gradcheck_dot(k->out, k->R, k->rows * k->Co);
}

static void test_pointwise(size_t rows, int Ci, int Co, uint64_t seed) {
    PwCtx k = {rows, Ci, Co, uniform(rows * Ci, -1, 1, seed), uniform((size_t)Ci * Co, -1, 1, seed + 1),
               malloc(sizeof(float) * rows * Co), uniform(rows * Co, -1, 1, seed + 2)};
    float *dinp = filled(rows * Ci, 1e30f), *dw = filled((size_t)Ci * Co, -0.75f);
    pw_obj(&k);
    pointwise_backward(dinp, dw, k.R, k.inp, k.w, rows, Ci, Co);
    unstart(dw, (size_t)Ci * Co, -0.75f);
    expect_written("pointwise dinp", dinp, rows * Ci);
    check("pointwise dinp", k.inp, rows * Ci, dinp, pw_obj, &k);
    check("pointwise dweight (added)", k.w, (size_t)Ci * Co, dw, pw_obj, &k);
    free(dinp); free(dw); free(k.inp); free(k.w); free(k.out); free(k.R);
}

/* conv2d with a 1x1 kernel, stride 1, no bias computes the same forward
 * (the layer pointwise replaces, docs/models.md). */
static void test_pointwise_is_conv1x1(void) {
    const int B = 3, H = 4, W = 5, Ci = 6, Co = 7;
    Conv2d c;
    if (conv2d_init(&c, H, W, Ci, 1, 1, Co, 1, 1, PAD_VALID, ACT_NONE) != 0) {
        fail("conv2d_init 1x1");
        return;
    }
    const size_t rows = (size_t)B * H * W;
    float *inp = uniform(rows * Ci, -1, 1, 1001), *w = uniform((size_t)Ci * Co, -1, 1, 1002);
    float *a = malloc(sizeof(float) * rows * Co), *b = malloc(sizeof(float) * rows * Co);
    float *scratch = malloc(sizeof(float) * conv2d_scratch_n_floats(&c, 2));
    pointwise_forward(a, inp, w, rows, Ci, Co);
    conv2d_forward(b, scratch, inp, w, NULL, &c, B, 2);
    double worst = 0.0;
    for (size_t i = 0; i < rows * Co; i++) worst = fmax(worst, fabs(a[i] - b[i]));
    if (!(worst < 1e-5)) fail("pointwise differs from conv2d 1x1");
    else printf("ok: pointwise = conv2d 1x1 without bias (largest |diff| %.2g)\n", worst);
    free(inp); free(w); free(a); free(b); free(scratch);
}

/* ---- zero padding, relu6, add, global average pooling, dropout -------------------- */

typedef struct {
    int kind; /* 0 zeropad, 1 relu6, 2 add (w.r.t. a), 3 add (w.r.t. b), 4 gap, 5 dropout, 6 relu node */
    ZeroPad z;
    Dropout dr;
    uint64_t key;
    int B, n_px, C;
    size_t in_n, out_n;
    float *inp, *inp2, *out, *R;
} EltCtx;

static double elt_obj(void *p) {
    EltCtx *k = p;
    switch (k->kind) {
    case 0: zeropad_forward(k->out, k->inp, &k->z, k->B); break;
    case 1: relu6_forward(k->out, k->inp, k->in_n); break;
    case 2: case 3: add_forward(k->out, k->inp, k->inp2, k->in_n); break;
    case 4: global_avgpool_forward(k->out, k->inp, k->B, k->n_px, k->C); break;
    case 6: relu_layer_forward(k->out, k->inp, k->in_n); break;
    default: dropout_forward(k->out, k->inp, &k->dr, k->key, 1, k->in_n); break;
    }
    return gradcheck_dot(k->out, k->R, k->out_n);
}

static void test_zeropad(int B, int H, int W, int C, uint64_t seed) {
    EltCtx k;
    memset(&k, 0, sizeof k);
    int t, b, l, r;
    keras_correct_pad(&t, &b, &l, &r, H, W, 3);
    if (zeropad_init(&k.z, H, W, C, t, b, l, r) != 0) {
        fail("zeropad_init rejected a valid shape");
        return;
    }
    k.B = B;
    k.in_n = (size_t)B * H * W * C;
    k.out_n = (size_t)B * k.z.OH * k.z.OW * C;
    k.inp = uniform(k.in_n, -1, 1, seed);
    k.out = filled(k.out_n, 1e30f);
    k.R = uniform(k.out_n, -1, 1, seed + 1);
    float *dinp = filled(k.in_n, 1e30f);
    elt_obj(&k);
    /* The border is zero, the inside the input. */
    const float *o = k.out;
    if (!(o[0] == (t > 0 || l > 0 ? 0.0f : k.inp[0]) && o[(size_t)k.z.OH * k.z.OW * C - 1] == 0.0f))
        fail("zeropad forward: border");
    /* The first real cell sits at (top, left). */
    if (o[((size_t)t * k.z.OW + l) * C] != k.inp[0]) fail("zeropad forward: placement");
    zeropad_backward(dinp, k.R, &k.z, B);
    char what[96];
    snprintf(what, sizeof what, "zeropad %dx%d pad (%d,%d),(%d,%d) dinp", H, W, t, b, l, r);
    expect_written(what, dinp, k.in_n);
    check(what, k.inp, k.in_n, dinp, elt_obj, &k);
    free(dinp); free(k.inp); free(k.out); free(k.R);
}

static void test_correct_pad(void) {
    /* Keras correct_pad for a 3x3 kernel: even sizes pad (0, 1), odd (1, 1). */
    int t, b, l, r;
    keras_correct_pad(&t, &b, &l, &r, 32, 7, 3);
    if (!(t == 0 && b == 1 && l == 1 && r == 1)) fail("keras_correct_pad(32, 7, 3) != ((0, 1), (1, 1))");
    else printf("ok: keras_correct_pad(32x7, 3) = ((0, 1), (1, 1))\n");
}

static void test_relu6(void) {
    EltCtx k;
    memset(&k, 0, sizeof k);
    k.kind = 1;
    k.in_n = k.out_n = 300;
    k.inp = uniform(k.in_n, -3, 9, 601);
    /* Fifty steps clear of both kinks. */
    for (size_t i = 0; i < k.in_n; i++) {
        if (fabsf(k.inp[i]) < 0.05f) k.inp[i] = k.inp[i] < 0 ? -0.05f : 0.05f;
        if (fabsf(k.inp[i] - 6.0f) < 0.05f) k.inp[i] = k.inp[i] < 6 ? 5.95f : 6.05f;
    }
    k.out = malloc(sizeof(float) * k.out_n);
    k.R = uniform(k.out_n, -1, 1, 602);
    float *dinp = filled(k.in_n, 1e30f);
    elt_obj(&k);
    if (k.out[0] < 0.0f || k.out[0] > 6.0f) fail("relu6 forward range");
    relu6_backward(dinp, k.out, k.R, k.in_n);
    check("relu6 dinp", k.inp, k.in_n, dinp, elt_obj, &k);
    free(dinp); free(k.inp); free(k.out); free(k.R);
}

/* The RELU node (Keras Activation("relu"), VGG's and ResNet's): relu_layer_*
 * on 40,000 floats (above OMP_MIN_FLOATS, so the OpenMP path runs), inputs
 * kept clear of the kink, and the derivative 0 at exactly 0; then the same
 * through the layer table's entry (shape, no variables, forward/backward). */
static void test_relu_node(void) {
    EltCtx k;
    memset(&k, 0, sizeof k);
    k.kind = 6;
    k.in_n = k.out_n = 40000;
    k.inp = uniform(k.in_n, -3, 3, 611);
    for (size_t i = 0; i < k.in_n; i++)
        if (fabsf(k.inp[i]) < 0.05f) k.inp[i] = k.inp[i] < 0 ? -0.05f : 0.05f;
    k.out = malloc(sizeof(float) * k.out_n);
    k.R = uniform(k.out_n, -1, 1, 612);
    float *dinp = filled(k.in_n, 1e30f);
    elt_obj(&k);
    relu_layer_backward(dinp, k.out, k.R, k.in_n);
    expect_written("relu node dinp", dinp, k.in_n);
    const int keep = g_max_checks;
    g_max_checks = 200;
    check("relu node dinp", k.inp, k.in_n, dinp, elt_obj, &k);
    g_max_checks = keep;
    float z = 0.0f, zo, g = 1.0f, dz = 5.0f;
    relu_layer_forward(&zo, &z, 1);
    relu_layer_backward(&dz, &zo, &g, 1);
    if (zo != 0.0f || dz != 0.0f) fail("relu node at exactly 0: output and derivative must be 0");
    /* Through the table: a (2, 10, 10, 200) tensor. */
    const LayerKindInfo *t = &model_layer_table[NODE_RELU];
    Node n;
    memset(&n, 0, sizeof n);
    n.kind = NODE_RELU;
    n.in = (NodeShape){10, 10, 200};
    NodeVar v[NODE_MAX_VARS];
    if (strcmp(t->name, "relu") != 0 || t->init(&n) != 0 || n.out.H != 10 || n.out.C != 200 || t->vars(&n, v) != 0)
        fail("relu node: table entry (name, shape, no variables)");
    float *out = malloc(sizeof(float) * k.in_n), *din = filled(k.in_n, 1e30f), *dout = malloc(sizeof(float) * k.in_n);
    memcpy(dout, k.R, sizeof(float) * k.in_n);
    NodeRun r = {.B = 2, .n_threads = 1, .training = 1, .in = {k.inp}, .out = out, .dout = dout, .din = {din}};
    t->forward(&n, &r);
    t->backward(&n, &r);
    if (memcmp(out, k.out, sizeof(float) * k.in_n) != 0 || memcmp(din, dinp, sizeof(float) * k.in_n) != 0)
        fail("relu node: the table's forward/backward differ from relu_layer_*");
    else
        printf("ok: relu node through the layer table\n");
    free(out); free(din); free(dout);
    free(dinp); free(k.inp); free(k.out); free(k.R);
}

static void test_add(void) {
    EltCtx k;
    memset(&k, 0, sizeof k);
    k.in_n = k.out_n = 77;
    k.inp = uniform(k.in_n, -1, 1, 701);
    k.inp2 = uniform(k.in_n, -1, 1, 702);
    k.out = malloc(sizeof(float) * k.out_n);
    k.R = uniform(k.out_n, -1, 1, 703);
    float *da = filled(k.in_n, 1e30f), *db = filled(k.in_n, 1e30f);
    add_backward(da, db, k.R, k.in_n);
    k.kind = 2;
    check("add da", k.inp, k.in_n, da, elt_obj, &k);
    k.kind = 3;
    check("add db", k.inp2, k.in_n, db, elt_obj, &k);
    /* The DAG rule: a tensor read by add and by another layer gets the sum. */
    float *dsum = malloc(sizeof(float) * k.in_n);
    add_backward(dsum, NULL, k.R, k.in_n);
    grad_accumulate(dsum, db, k.in_n);
    for (size_t i = 0; i < k.in_n; i++)
        if (dsum[i] != 2.0f * k.R[i]) {
            fail("grad_accumulate of two consumers' gradients");
            break;
        }
    free(da); free(db); free(dsum); free(k.inp); free(k.inp2); free(k.out); free(k.R);
}

static void test_gap(int B, int H, int W, int C, uint64_t seed) {
    EltCtx k;
    memset(&k, 0, sizeof k);
    k.kind = 4;
    k.B = B; k.n_px = H * W; k.C = C;
    k.in_n = (size_t)B * H * W * C;
    k.out_n = (size_t)B * C;
    k.inp = uniform(k.in_n, -1, 1, seed);
    k.out = malloc(sizeof(float) * k.out_n);
    k.R = uniform(k.out_n, -1, 1, seed + 1);
    float *dinp = filled(k.in_n, 1e30f);
    elt_obj(&k);
    double m = 0.0;
    for (int p = 0; p < H * W; p++) m += k.inp[(size_t)p * C + 1];
    if (fabs(k.out[1] - m / (H * W)) > 1e-5) fail("global_avgpool forward: known value");
    global_avgpool_backward(dinp, k.R, B, H * W, C);
    check("global_avgpool dinp", k.inp, k.in_n, dinp, elt_obj, &k);
    free(dinp); free(k.inp); free(k.out); free(k.R);
}

static void test_dropout(float rate) {
    EltCtx k;
    memset(&k, 0, sizeof k);
    k.kind = 5;
    if (dropout_init(&k.dr, rate) != 0) {
        fail("dropout_init rejected a valid rate");
        return;
    }
    k.key = dropout_key(42, 7, 1, 0);
    k.in_n = k.out_n = 6000;
    k.inp = uniform(k.in_n, -1, 1, 801);
    k.out = malloc(sizeof(float) * k.out_n);
    k.R = uniform(k.out_n, -1, 1, 802);
    float *dinp = filled(k.in_n, 1e30f);
    elt_obj(&k);
    size_t kept = 0, same_as_other_tower = 0;
    const uint64_t other = dropout_key(42, 7, 0, 0);
    for (size_t i = 0; i < k.in_n; i++) {
        int keep = dropout_keep(&k.dr, k.key, i);
        kept += (size_t)keep;
        same_as_other_tower += (size_t)(keep == dropout_keep(&k.dr, other, i));
        if (k.out[i] != (keep ? k.inp[i] * k.dr.scale : 0.0f)) {
            fail("dropout forward: kept elements scaled by 1 / (1 - rate), the others 0");
            break;
        }
    }
    const double frac = (double)kept / k.in_n;
    printf("dropout rate %.2f: kept %.4f (want %.2f), same mask as another tower %.3f\n", rate, frac, 1.0 - rate,
           (double)same_as_other_tower / k.in_n);
    if (fabs(frac - (1.0 - rate)) > 0.02) fail("dropout keep fraction");
    if (rate > 0.0f && (double)same_as_other_tower / k.in_n > 0.9) fail("dropout: towers draw the same mask");
    dropout_backward(dinp, k.R, &k.dr, k.key, 1, k.in_n);
    char what[64];
    snprintf(what, sizeof what, "dropout %.2f dinp", rate);
    check(what, k.inp, k.in_n, dinp, elt_obj, &k);
    /* Evaluation: the identity, in place too. */
    dropout_forward(k.out, k.inp, &k.dr, k.key, 0, k.in_n);
    dropout_backward(dinp, k.R, &k.dr, k.key, 0, k.in_n);
    if (memcmp(k.out, k.inp, sizeof(float) * k.in_n) || memcmp(dinp, k.R, sizeof(float) * k.in_n))
        fail("dropout evaluation is not the identity");
    free(dinp); free(k.inp); free(k.out); free(k.R);
    Dropout bad;
    if (dropout_init(&bad, 1.0f) == 0 || dropout_init(&bad, -0.1f) == 0) fail("dropout_init accepted rate 1 or -0.1");
}

/* ---- the checker rejects wrong gradients of these layers ------------------------------ */

static void test_checker_rejects(void) {
    GradcheckOpts o = {"", EPS, 1e-2, 1e-3, 400, 7, 0, 0};
    /* Batch norm dinp without the mean(dy * xhat) term: a classic slip. */
    BnCtx k;
    bn_setup(&k, 12, 3, 0.3f, 901);
    const size_t n = 12 * 3;
    float *dinp = malloc(sizeof(float) * n), *dg = filled(3, 0.0f), *db = filled(3, 0.0f);
    double dsums[6], part[BATCHNORM_CPU_CHUNKS * 6];
    bn_obj(&k);
    batchnorm_backward_sums(dsums, part, k.R, k.inp, k.mean, k.inv_std, 12, 3);
    for (int c = 0; c < 3; c++) dsums[3 + c] = 0.0;
    batchnorm_backward_input(dinp, k.R, k.inp, k.mean, k.inv_std, k.gamma, dsums, 12.0, 12, 3);
    o.what = "batchnorm dinp (wrong: no xhat term)";
    GradcheckResult bad = gradcheck(k.inp, n, dinp, bn_obj, &k, &o);
    /* Depthwise dweight with one tap 3% off. */
    DwCtx d;
    dw_setup(&d, 2, 5, 6, 4, 2, PAD_VALID, 902);
    float *dw = filled(36, 0.0f), *scratch = malloc(sizeof(float) * depthwise_scratch_n_floats(&d.d, 2));
    dw_obj(&d);
    depthwise_backward(NULL, dw, scratch, d.R, d.inp, d.w, &d.d, 2, 2);
    size_t i1 = 0;
    for (size_t i = 1; i < 36; i++) if (fabsf(dw[i]) > fabsf(dw[i1])) i1 = i;
    dw[i1] *= 1.03f;
    o.what = "depthwise dweight (one tap 3% off)";
    GradcheckResult bad2 = gradcheck(d.w, 36, dw, dw_obj, &d, &o);
    if (bad.n_failed == 0 || bad2.n_failed != 1) {
        printf("FAIL: checker accepted a wrong gradient (failed %d and %d, want > 0 and 1)\n", bad.n_failed, bad2.n_failed);
        g_failures++;
    } else {
        printf("ok: checker rejects the wrong batchnorm and depthwise gradients (%d and %d coordinates)\n",
               bad.n_failed, bad2.n_failed);
    }
    free(dinp); free(dg); free(db); bn_free(&k);
    free(dw); free(scratch); free(d.inp); free(d.w); free(d.out); free(d.R);
}

/* The shapes large enough to run in parallel give the serial results: batch
 * norm and depthwise forward / dinp bit for bit (no sum crosses threads),
 * depthwise dweight to float rounding (per-thread partials). */
static void test_parallel_matches_serial(void) {
    const int saved = omp_get_max_threads();
    float *r[2][5];
    for (int pass = 0; pass < 2; pass++) {
        omp_set_num_threads(pass == 0 ? 1 : 2);
        BnCtx k;
        bn_setup(&k, 512, 64, 0.5f, 77);
        float *dinp = malloc(sizeof(float) * 512 * 64), *dg = filled(64, 0.0f), *db = filled(64, 0.0f);
        bn_obj(&k);
        batchnorm_backward(dinp, dg, db, k.sums, k.R, k.inp, k.mean, k.inv_std, k.gamma, &k.bn, 512);
        r[pass][0] = malloc(sizeof(float) * 512 * 64);
        memcpy(r[pass][0], k.out, sizeof(float) * 512 * 64);
        r[pass][1] = dinp;
        r[pass][2] = dg;
        free(db);
        bn_free(&k);
        DwCtx d;
        dw_setup(&d, 2, 16, 16, 64, 1, PAD_SAME, 78);
        float *dx = malloc(sizeof(float) * 2 * 16 * 16 * 64), *dw = filled(9 * 64, 0.0f);
        float *scratch = malloc(sizeof(float) * depthwise_scratch_n_floats(&d.d, 2));
        dw_obj(&d);
        depthwise_backward(dx, dw, scratch, d.R, d.inp, d.w, &d.d, 2, 2);
        r[pass][3] = dx;
        r[pass][4] = dw;
        free(d.inp); free(d.w); free(d.R); free(scratch);
        free(r[pass][0]);
        r[pass][0] = d.out;
    }
    omp_set_num_threads(saved);
    const size_t n_bn = 512 * 64, n_dw = 2 * 16 * 16 * 64;
    int same = !memcmp(r[0][1], r[1][1], sizeof(float) * n_bn) && !memcmp(r[0][2], r[1][2], sizeof(float) * 64) &&
               !memcmp(r[0][0], r[1][0], sizeof(float) * n_dw) && !memcmp(r[0][3], r[1][3], sizeof(float) * n_dw);
    double worst = 0.0;
    for (int i = 0; i < 9 * 64; i++) worst = fmax(worst, fabs(r[0][4][i] - r[1][4][i]) / (1.0 + fabs(r[0][4][i])));
    if (!same || !(worst < 1e-5)) fail("1 and 2 threads differ (batch norm, depthwise)");
    else printf("ok: 2 threads = 1 thread (batch norm and depthwise out/dinp bitwise, dweight within %.2g)\n", worst);
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < 5; i++) free(r[p][i]);
}

int main(void) {
    test_batchnorm("batchnorm 30x5", 30, 5, 0.0f, 1);
    test_batchnorm("batchnorm 4x37 offset 3", 4, 37, 3.0f, 2); /* C over a channel block, few rows */
    g_max_checks = 40; /* shapes over the serial threshold: every probe is a parallel region */
    test_batchnorm("batchnorm 512x64 (parallel)", 512, 64, 0.5f, 4);
    test_depthwise("depthwise s1 SAME 16x16x64 (parallel)", 2, 16, 16, 64, 1, PAD_SAME, 15);
    test_depthwise("depthwise s2 VALID 33x33x32 (parallel)", 4, 33, 33, 32, 2, PAD_VALID, 16);
    g_max_checks = 400;
    test_parallel_matches_serial();
    test_batchnorm_statistics();
    test_batchnorm_sync(20, 13, 19, 3);
    /* Depthwise 3x3: stride 1 SAME and stride 2 VALID (after zero padding), odd sizes. */
    test_depthwise("depthwise s1 SAME 6x5", 2, 6, 5, 7, 1, PAD_SAME, 11);
    test_depthwise("depthwise s2 VALID 7x7", 2, 7, 7, 3, 2, PAD_VALID, 12);
    test_depthwise("depthwise s2 VALID 8x9", 1, 8, 9, 18, 2, PAD_VALID, 13);
    test_depthwise("depthwise s1 SAME 1x1", 3, 1, 1, 4, 1, PAD_SAME, 14);
    test_pointwise(23, 6, 9, 21);
    test_pointwise(5, 17, 3, 22);
    test_pointwise_is_conv1x1();
    test_zeropad(2, 6, 7, 3, 31);
    test_zeropad(1, 5, 4, 2, 32);
    test_correct_pad();
    test_relu6();
    test_relu_node();
    test_add();
    test_gap(3, 4, 5, 6, 41);
    test_dropout(0.5f);
    test_dropout(0.2f);
    test_dropout(0.0f);
    test_checker_rejects();
    if (g_failures) {
        printf("%d checks FAILED\n", g_failures);
        return 1;
    }
    printf("all new layer gradient checks passed\n");
    return 0;
}
