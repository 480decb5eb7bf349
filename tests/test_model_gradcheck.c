/* test_model_gradcheck.c — finite-difference check of both whole models'
 * model_backward, plus the model API's contract: backward ADDS into
 * dparams (the caller zeroes), the loss is cross-entropy plus every weight-decay term, bad
 * batch sizes give NAN.
 *
 * Where it sits: ctest (CPU), on small inputs (8x8) so the whole check
 * takes a few seconds.  Uses the shared checker tests/gradcheck.c.
 * How, and why so: a float32 forward pass is noisy at the 1e-7 level, and
 * a network full of relus and max pools has kinks everywhere; a finite
 * difference of the float model itself needs a step so large that it
 * crosses kinks, or so small that rounding swamps it.  So:
 *   1. a double-precision reference of each network, written below
 *      directly from TensorFlow's definitions (no code shared with
 *      model/), must give the same loss as model_forward (rel. 1e-5);
 *   2. the shared checker differentiates that reference with a step of
 *      1e-5 (noise ~1e-11, kinks rarely within reach; the kink guard skips
 *      the few that are) and compares with model_backward's gradient,
 *      coordinate by coordinate, for every variable;
 *   3. on the float model itself, the directional derivative along the
 *      gradient, (f(p + h g) - f(p - h g)) / 2h, must equal |g|^2: one
 *      large, noise-proof number that ties model_backward to model_forward;
 *   4. a 5% error planted in one coordinate must be rejected by step 2.
 */
#include "gradcheck.h"
#include "model/layers.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REF_EPS 1e-5
#define REF_RTOL 1e-3
#define REF_ATOL 1e-7

#include "tests/check.h"

/* ---- the double-precision reference networks ------------------------------- */

/* TensorFlow's SAME: out = ceil(in / s), pad_before = max((out-1)*s + k - in, 0) / 2. */
static int same_out(int in, int s) { return (in + s - 1) / s; }
static int same_pad(int in, int k, int s) {
    int t = (same_out(in, s) - 1) * s + k - in;
    return (t > 0 ? t : 0) / 2;
}

/* 5x5 stride 1 SAME conv + bias + relu.  in: (B, H, W, Ci); w: (5, 5, Ci, Co). */
static double *ref_conv_relu(const double *in, int B, int H, int W, int Ci, const float *w, const float *bias,
                             int Co) {
    double *out = calloc((size_t)B * H * W * Co, sizeof(double));
    int p = same_pad(H, 5, 1), q = same_pad(W, 5, 1);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int x = 0; x < W; x++)
                for (int co = 0; co < Co; co++) {
                    double s = bias[co];
                    for (int kh = 0; kh < 5; kh++)
                        for (int kw = 0; kw < 5; kw++) {
                            int ih = h - p + kh, iw = x - q + kw;
                            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                            for (int ci = 0; ci < Ci; ci++)
                                s += in[((size_t)(b * H + ih) * W + iw) * Ci + ci] *
                                     (double)w[((kh * 5 + kw) * Ci + ci) * Co + co];
                        }
                    out[((size_t)(b * H + h) * W + x) * Co + co] = s > 0 ? s : 0;
                }
    return out;
}

/* k x k stride s SAME max pool; padding never wins. */
static double *ref_pool(const double *in, int B, int H, int W, int C, int k, int s, int *OH, int *OW) {
    *OH = same_out(H, s);
    *OW = same_out(W, s);
    int p = same_pad(H, k, s), q = same_pad(W, k, s);
    double *out = malloc(sizeof(double) * B * *OH * *OW * C);
    for (int b = 0; b < B; b++)
        for (int oh = 0; oh < *OH; oh++)
            for (int ow = 0; ow < *OW; ow++)
                for (int c = 0; c < C; c++) {
                    double m = -INFINITY;
                    for (int i = 0; i < k; i++)
                        for (int j = 0; j < k; j++) {
                            int h = oh * s - p + i, x = ow * s - q + j;
                            if (h < 0 || h >= H || x < 0 || x >= W) continue;
                            m = fmax(m, in[((size_t)(b * H + h) * W + x) * C + c]);
                        }
                    out[((size_t)(b * *OH + oh) * *OW + ow) * C + c] = m;
                }
    return out;
}

/* tf.nn.lrn(x, 4, bias=1.0, alpha=0.001/9, beta=0.75) over the channels. */
static double *ref_lrn(const double *in, size_t n_px, int C) {
    const double alpha = (double)(float)(0.001 / 9.0);
    double *out = malloc(sizeof(double) * n_px * C);
    for (size_t px = 0; px < n_px; px++)
        for (int d = 0; d < C; d++) {
            double s = 0;
            for (int j = d - 4; j <= d + 4; j++)
                if (j >= 0 && j < C) s += in[px * C + j] * in[px * C + j];
            out[px * C + d] = in[px * C + d] * pow(1.0 + alpha * s, -0.75);
        }
    return out;
}

static double *ref_dense(const double *in, int B, int n_in, const float *w, const float *bias, int n_out, int relu) {
    double *out = malloc(sizeof(double) * B * n_out);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < n_out; j++) {
            double s = bias[j];
            for (int i = 0; i < n_in; i++) s += in[(size_t)b * n_in + i] * (double)w[(size_t)i * n_out + j];
            out[b * n_out + j] = relu && s < 0 ? 0 : s;
        }
    return out;
}

/* The loss of the model `spec` (mnist or cifar10) at params on (x, labels):
 * mean cross-entropy plus sum of wd * sum(w^2) / 2, all in double. */
static double ref_loss(const ModelSpec *spec, const float *params, const float *x, const int32_t *labels, int B) {
#define VAR(name) (params + spec->vars[model_spec_find(spec, name)].offset)
    int H = spec->H, W = spec->W, C = spec->C, OH, OW;
    size_t n = (size_t)B * H * W * C;
    double *a = malloc(sizeof(double) * n), *t;
    for (size_t i = 0; i < n; i++) a[i] = x[i];
    int mnist = spec->kind == MODEL_MNIST, c1 = mnist ? 32 : 64, k = mnist ? 2 : 3;
    t = ref_conv_relu(a, B, H, W, C, VAR("conv1/weights"), VAR("conv1/biases"), c1); free(a); a = t;
    t = ref_pool(a, B, H, W, c1, k, 2, &OH, &OW); free(a); a = t; H = OH; W = OW;
    if (!mnist) { t = ref_lrn(a, (size_t)B * H * W, c1); free(a); a = t; }
    t = ref_conv_relu(a, B, H, W, c1, VAR("conv2/weights"), VAR("conv2/biases"), 64); free(a); a = t;
    if (!mnist) { t = ref_lrn(a, (size_t)B * H * W, 64); free(a); a = t; }
    t = ref_pool(a, B, H, W, 64, k, 2, &OH, &OW); free(a); a = t; H = OH; W = OW;
    int flat = H * W * 64, n3 = mnist ? 1024 : 384, n4 = mnist ? 10 : 192, K = spec->num_classes;
    t = ref_dense(a, B, flat, VAR("local3/weights"), VAR("local3/biases"), n3, 1); free(a); a = t;
    t = ref_dense(a, B, n3, VAR("local4/weights"), VAR("local4/biases"), n4, 1); free(a); a = t;
    t = ref_dense(a, B, n4, VAR("softmax_linear/weights"), VAR("softmax_linear/biases"), K, 0); free(a); a = t;
#undef VAR
    double loss = 0;
    for (int b = 0; b < B; b++) {
        double m = a[b * K], s = 0;
        for (int j = 1; j < K; j++) m = fmax(m, a[b * K + j]);
        for (int j = 0; j < K; j++) s += exp(a[b * K + j] - m);
        loss += (log(s) + m - a[b * K + labels[b]]) / B;
    }
    free(a);
    for (int v = 0; v < spec->n_vars; v++)
        for (size_t i = 0; i < spec->vars[v].n_floats; i++) {
            double w = params[spec->vars[v].offset + i];
            loss += 0.5 * spec->vars[v].wd * w * w;
        }
    return loss;
}

/* ---- fixture ------------------------------------------------------------------- */

typedef struct {
    ModelSpec spec;
    ModelActs *acts;
    float *x, *params, *dparams;
    int32_t *labels;
    int B;
} Fixture;

static double ref_obj(void *p) {
    Fixture *f = p;
    return ref_loss(&f->spec, f->params, f->x, f->labels, f->B);
}

static void fixture_init(Fixture *f, const char *model, int H, int W, int C, int num_classes, int B, uint64_t seed) {
    char err[256];
    memset(f, 0, sizeof *f);
    if (model_spec_init(&f->spec, model, H, W, C, num_classes, err, sizeof err) != 0) {
        printf("FAIL: model_spec_init: %s\n", err);
        exit(1);
    }
    f->B = B;
    f->acts = model_acts_create(&f->spec, B);
    f->x = malloc(sizeof(float) * B * H * W * C);
    f->labels = malloc(sizeof(int32_t) * B);
    f->params = malloc(sizeof(float) * f->spec.n_params);
    f->dparams = malloc(sizeof(float) * f->spec.n_params);
    if (!f->acts) {
        printf("FAIL: model_acts_create returned NULL\n");
        exit(1);
    }
    gradcheck_fill_uniform(f->x, (size_t)B * H * W * C, -1, 1, seed);
    for (int b = 0; b < B; b++) f->labels[b] = (int32_t)((b * 7 + seed) % num_classes);
    model_init_params(f->params, &f->spec, seed); /* TensorFlow's initializers */
}

static void fixture_free(Fixture *f) {
    model_acts_free(f->acts);
    free(f->x); free(f->labels); free(f->params); free(f->dparams);
}

static void check_model(const char *model, int H, int W, int C, int num_classes, int B, uint64_t seed) {
    Fixture f;
    fixture_init(&f, model, H, W, C, num_classes, B, seed);
    const size_t n = f.spec.n_params;
    float loss = model_forward(NULL, NULL, f.acts, f.x, f.labels, f.params, B);
    memset(f.dparams, 0, sizeof(float) * n); /* backward ADDS */
    model_backward(f.dparams, f.acts, f.params);

    /* 1. The same function: model_forward's loss against the reference's. */
    double ref = ref_obj(&f);
    CHECK(fabs(loss - ref) <= 1e-5 * fabs(ref), "%s: model_forward loss %.9g, double reference %.9g", model, loss, ref);

    /* 2. Every variable, coordinate by coordinate, against the reference. */
    int total_checked = 0, total_skipped = 0;
    for (int v = 0; v < f.spec.n_vars; v++) {
        const ModelVar *var = &f.spec.vars[v];
        double gmax = 0;
        for (size_t i = 0; i < var->n_floats; i++) gmax = fmax(gmax, fabs(f.dparams[var->offset + i]));
        char what[96];
        snprintf(what, sizeof what, "%s %s", model, var->name);
        /* atol scaled to the variable's largest gradient: float32 backward
         * carries ~1e-6 relative error. */
        GradcheckOpts o = {what, REF_EPS, REF_RTOL, REF_ATOL + 1e-4 * gmax, 16, seed + v, 1, 0};
        GradcheckResult r = gradcheck(f.params + var->offset, var->n_floats, f.dparams + var->offset, ref_obj, &f, &o);
        total_checked += r.n_checked;
        total_skipped += r.n_skipped;
        CHECK(r.n_failed == 0, "%s: %d of %d coordinates disagree with finite differences", what, r.n_failed,
               r.n_checked);
        CHECK(r.n_checked >= (int)(var->n_floats < 16 ? var->n_floats : 16) * 3 / 4,
               "%s: only %d coordinates judged (%d skipped as kinks)", what, r.n_checked, r.n_skipped);
        CHECK(gmax > 0, "%s: gradient is all zero", what);
    }
    CHECK(total_skipped * 10 <= total_checked, "%s: %d kinks skipped for %d judged: too many", model, total_skipped,
           total_checked);

    /* 3. The float model itself: directional derivative along g equals |g|^2. */
    double g2 = 0;
    for (size_t i = 0; i < n; i++) g2 += (double)f.dparams[i] * f.dparams[i];
    const double h = 1e-3 / sqrt(g2); /* moves the loss by about 1e-3 * |g| */
    float *p = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) p[i] = f.params[i] + (float)(h * f.dparams[i]);
    double fp = model_forward(NULL, NULL, f.acts, f.x, f.labels, p, B);
    for (size_t i = 0; i < n; i++) p[i] = f.params[i] - (float)(h * f.dparams[i]);
    double fm = model_forward(NULL, NULL, f.acts, f.x, f.labels, p, B);
    double dir = (fp - fm) / (2 * h);
    printf("%s: directional derivative along the gradient %.6g, |g|^2 %.6g\n", model, dir, g2);
    CHECK(fabs(dir - g2) <= 0.02 * g2, "%s: directional derivative %.6g but |g|^2 = %.6g", model, dir, g2);
    free(p);

    /* 4. A 5% error in the largest gradient of conv2/weights and of
     *    local3/weights must be rejected. */
    const char *victims[2] = {"conv2/weights", "local3/weights"};
    for (int k = 0; k < 2; k++) {
        const ModelVar *var = &f.spec.vars[model_spec_find(&f.spec, victims[k])];
        float *g = f.dparams + var->offset;
        size_t top = 0;
        double gmax = 0;
        for (size_t i = 0; i < var->n_floats; i++)
            if (fabsf(g[i]) > fabsf(g[top])) top = i;
        gmax = fabsf(g[top]);
        float saved = g[top];
        g[top] *= 1.05f;
        char what[96];
        snprintf(what, sizeof what, "%s %s (perturbed)", model, var->name);
        GradcheckOpts o = {what, REF_EPS, REF_RTOL, REF_ATOL + 1e-4 * gmax, 16, seed, 1, 0};
        GradcheckResult r = gradcheck(f.params + var->offset, var->n_floats, g, ref_obj, &f, &o);
        CHECK(r.n_failed == 1, "%s: the checker must reject the perturbed coordinate (failed %d)", what, r.n_failed);
        g[top] = saved;
    }
    fixture_free(&f);
}

static void check_contract(const char *model, int H, int W, int C, int num_classes, int B) {
    Fixture f;
    fixture_init(&f, model, H, W, C, num_classes, B, 11);
    const size_t n = f.spec.n_params;
    float *d2 = malloc(sizeof(float) * n), *logits = malloc(sizeof(float) * B * num_classes);
    float ce = -1;
    float loss = model_forward(logits, &ce, f.acts, f.x, f.labels, f.params, B);
    /* Backward ADDS (llm.c's convention): onto a block of 1.0 it gives
     * 1 + gradient (an overwrite would give the gradient), and a second call
     * onto its own result twice the gradient, within rounding
     * (gradcheck_count_not_doubled). */
    memset(f.dparams, 0, sizeof(float) * n);
    model_backward(f.dparams, f.acts, f.params);
    for (size_t i = 0; i < n; i++) d2[i] = 1.0f;
    model_backward(d2, f.acts, f.params);
    size_t n_bad = 0;
    for (size_t i = 0; i < n; i++)
        n_bad += !(fabs((double)d2[i] - (1.0 + f.dparams[i])) <= 1e-6 * (1.0 + fabs(f.dparams[i])));
    CHECK(n_bad == 0, "%s: model_backward must add into dparams (%zu entries are not 1 + gradient)", model, n_bad);
    memcpy(d2, f.dparams, sizeof(float) * n);
    model_backward(d2, f.acts, f.params);
    n_bad = gradcheck_count_not_doubled(&f.spec, f.dparams, d2, f.params);
    CHECK(n_bad == 0, "%s: two model_backward calls must give twice the gradient (%zu entries differ)", model, n_bad);
    /* loss = mean cross-entropy of the logits + sum over variables of wd * sum(w^2) / 2. */
    double want_ce = 0, wd = 0;
    for (int b = 0; b < B; b++) {
        const float *z = logits + b * num_classes;
        double m = z[0], s = 0;
        for (int k = 1; k < num_classes; k++) m = fmax(m, z[k]);
        for (int k = 0; k < num_classes; k++) s += exp(z[k] - m);
        want_ce += (log(s) + m - z[f.labels[b]]) / B;
    }
    for (int v = 0; v < f.spec.n_vars; v++)
        for (size_t i = 0; i < f.spec.vars[v].n_floats; i++) {
            double w = f.params[f.spec.vars[v].offset + i];
            wd += 0.5 * f.spec.vars[v].wd * w * w;
        }
    CHECK(fabs(ce - want_ce) < 1e-5 * fmax(1, want_ce), "%s: ce_loss %.8g, want %.8g", model, ce, want_ce);
    CHECK(fabs(loss - (want_ce + wd)) < 1e-5 * fmax(1, want_ce + wd), "%s: loss %.8g, want ce + wd = %.8g",
           model, loss, want_ce + wd);
    if (strcmp(model, "cifar10") == 0) CHECK(wd > 0, "cifar10 must carry weight decay");
    else CHECK(wd == 0, "mnist has no weight decay");
    /* A forward on a smaller batch, then back: still the gradient of that batch. */
    float l1 = model_forward(NULL, NULL, f.acts, f.x, f.labels, f.params, 1);
    CHECK(isfinite(l1), "%s: batch 1 forward", model);
    /* Bad batch sizes. */
    CHECK(isnan(model_forward(NULL, NULL, f.acts, f.x, f.labels, f.params, B + 1)), "%s: B > max_batch must give NAN",
           model);
    CHECK(isnan(model_forward(NULL, NULL, f.acts, f.x, f.labels, f.params, 0)), "%s: B = 0 must give NAN", model);
    int32_t bad = num_classes;
    CHECK(isnan(model_forward(NULL, NULL, f.acts, f.x, &bad, f.params, 1)), "%s: a bad label must give NAN", model);
    free(d2); free(logits);
    fixture_free(&f);
}

int main(void) {
    /* 8x8 inputs: mnist 8 -> 4 -> 2 (local3 256 -> 1024); cifar10 8 -> 4 -> 2 (local3 256 -> 384). */
    check_model("mnist", 8, 8, 1, 10, 3, 1);
    check_model("cifar10", 8, 8, 3, 5, 3, 2);
    check_model("cifar10", 7, 9, 2, 4, 2, 3);   /* odd sizes through the SAME pools */
    check_contract("mnist", 12, 12, 1, 10, 4);
    check_contract("cifar10", 12, 12, 3, 10, 4);
    if (check_failures) {
        printf("%d model checks FAILED\n", check_failures);
        return 1;
    }
    printf("all model gradient checks passed\n");
    return 0;
}
