/* test_model_mobilenet_v2.c — the mobilenet_v2 network (model/nets/
 * mobilenet_v2.c) on the CPU executor: its variable table against Keras's,
 * a whole-model finite-difference gradient check, evaluation mode and the
 * moving-statistics update.
 *
 * Where it sits: ctest (CPU).
 *   1. Table: tf.keras.applications.MobileNetV2(alpha=1.0, 224x224x3,
 *      classes=1000) has 3,538,984 parameters of which 3,504,872 trainable
 *      (Keras's model.summary(), keras.io's applications table: 3.5M);
 *      262 variables with Keras's names; 10 residual additions (blocks 2,
 *      4, 5, 7, 8, 9, 11, 12, 14, 15); the seed's head (dense 512, dense_1);
 *      _make_divisible at alpha 0.35 (first filters 16, block 0 project 8);
 *      inputs below 32x32 or with 2 channels refused with a message.
 *   2. Gradients: 128x128x3, alpha 0.35, batch 2, 10 classes: model_backward
 *      against central differences (step 3e-4, float loss) of model_forward's
 *      loss on 6 coordinates each of variables of every kind in the last
 *      three blocks and the head (pointwise expand/project, batch norm gamma
 *      and beta, depthwise, Conv_1, dense), whose gradients all pass through
 *      the residual additions' gradient sums (block_14_add feeds block_15's
 *      expand and block_15_add), through the shared checker (kink guard on:
 *      ReLU6 has two kinks).  A planted 15% error must be rejected.
 *      Why not 32x32 and earlier layers: at 32x32 the last maps are 1x1, so
 *      the last batch norms normalise over 2 rows; at initialisation such a
 *      network's loss is so rough in its early weights (gradient norms of
 *      1e4-1e5 for Conv1, growing about 2x per block backwards: batch
 *      norm's gradient explosion at initialisation) that float central
 *      differences of any step either cross curvature or drown in
 *      rounding (measured: the kink guard skips 11-12 of 12 coordinates of
 *      every early variable at steps 1e-2 to 1e-6).  At 224x224 the early
 *      blocks check too, but take 2 minutes; the layers themselves are
 *      checked one by one in test_layers_new_gradcheck and against Keras.
 *   3. Evaluation mode: forward with the moving statistics; backward after it
 *      adds nothing.  model_update_moving changes exactly the non-trainable
 *      variables, by moving * 0.999 + batch * 0.001.
 */
#include "gradcheck.h"
#include "model/graph.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"

static void test_table(void) {
    char err[256];
    ModelSpec s;
    CHECK(model_spec_init(&s, "mobilenet_v2", 224, 224, 3, 1000, err, sizeof err) == 0, "224x224x3: %s", err);
    CHECK(s.n_params == 3538984 && s.n_trainable == 3504872, "parameters %zu (trainable %zu), Keras 3538984 (3504872)",
          s.n_params, s.n_trainable);
    CHECK(s.n_vars == 262, "%d variables, want 262", s.n_vars);
    const char *names[] = {"Conv1/kernel", "bn_Conv1/gamma", "bn_Conv1/moving_variance",
                           "expanded_conv_depthwise/kernel", "expanded_conv_project/kernel",
                           "block_1_expand/kernel", "block_1_expand_BN/beta", "block_1_depthwise/kernel",
                           "block_16_project_BN/moving_mean", "Conv_1/kernel", "Conv_1_bn/gamma",
                           "predictions/kernel", "predictions/bias"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        CHECK(model_spec_find(&s, names[i]) >= 0, "no variable %s", names[i]);
    int mm = model_spec_find(&s, "bn_Conv1/moving_mean"), k = model_spec_find(&s, "Conv1/kernel");
    CHECK(mm >= 0 && !s.vars[mm].trainable && s.vars[k].trainable, "moving statistics non-trainable, kernels trainable");
    CHECK(s.vars[k].init == INIT_GLOROT_UNIFORM, "Conv1/kernel: glorot_uniform");
    Graph *g = malloc(sizeof *g);
    graph_build(g, &s);
    int n_add = 0;
    for (int i = 0; i < g->n_nodes; i++) n_add += g->nodes[i].kind == NODE_ADD;
    CHECK(n_add == 10 && g->shared, "%d residual additions, want 10", n_add);
    ModelOptions o = {0.35f, MODEL_HEAD_SEED, 0};
    CHECK(model_spec_init_opts(&s, "mobilenet_v2", 32, 32, 1, 10, &o, err, sizeof err) == 0, "32x32x1 0.35: %s", err);
    CHECK(s.vars[model_spec_find(&s, "Conv1/kernel")].shape[3] == 16, "alpha 0.35: Conv1 has 16 filters");
    CHECK(s.vars[model_spec_find(&s, "expanded_conv_project/kernel")].shape[3] == 8, "alpha 0.35: block 0 projects to 8");
    CHECK(model_spec_find(&s, "dense/kernel") >= 0 && s.vars[model_spec_find(&s, "dense_1/kernel")].shape[0] == 512 &&
              model_spec_find(&s, "predictions/kernel") < 0,
          "the seed's head: dense 512, dense_1");
    CHECK(model_spec_init(&s, "mobilenet_v2", 31, 32, 3, 10, err, sizeof err) == -1 && strstr(err, "32x32"),
          "31x32 must be refused with a message: %s", err);
    CHECK(model_spec_init(&s, "mobilenet_v2", 32, 32, 2, 10, err, sizeof err) == -1, "2 channels must be refused");
    free(g);
}

typedef struct {
    ModelSpec spec;
    ModelActs *acts;
    float *x, *params, *dparams;
    int32_t labels[16];
    int B;
} Fixture;

static double loss_obj(void *ctx) {
    Fixture *f = ctx;
    return model_forward(NULL, NULL, f->acts, f->x, f->labels, f->params, f->B);
}

/* 128x128: the last maps are 4x4, so the last batch norms see 32 rows (see the header). */
static const int g_H = 128, g_B = 2;
static const double g_eps = 3e-4;
static void test_gradients(void) {
    char err[256];
    Fixture f = {.B = g_B};
    ModelOptions o = {0.35f, MODEL_HEAD_KERAS, 0};
    CHECK(model_spec_init_opts(&f.spec, "mobilenet_v2", g_H, g_H, 3, 10, &o, err, sizeof err) == 0, "%s", err);
    f.acts = model_acts_create(&f.spec, f.B);
    const size_t n = f.spec.n_params, x_n = (size_t)f.B * g_H * g_H * 3;
    f.x = malloc(sizeof(float) * x_n);
    f.params = malloc(sizeof(float) * n);
    f.dparams = calloc(n, sizeof(float));
    gradcheck_fill_uniform(f.x, x_n, -1.0f, 1.0f, 77);
    model_init_params(f.params, &f.spec, 2026);
    /* gamma and beta off their initial 1 and 0, so their gradients are generic. */
    for (int v = 0; v < f.spec.n_vars; v++) {
        const char *nm = f.spec.vars[v].name;
        size_t L = strlen(nm);
        if ((L > 6 && !strcmp(nm + L - 6, "/gamma")) || (L > 5 && !strcmp(nm + L - 5, "/beta")))
            gradcheck_fill_uniform(f.params + f.spec.vars[v].offset, f.spec.vars[v].n_floats,
                                   nm[L - 1] == 'a' && nm[L - 2] == 'm' ? 0.5f : -0.3f,
                                   nm[L - 1] == 'a' && nm[L - 2] == 'm' ? 1.5f : 0.3f, 100 + (uint64_t)v);
    }
    for (int b = 0; b < f.B; b++) f.labels[b] = (3 + 4 * b) % 10;
    float loss = model_forward(NULL, NULL, f.acts, f.x, f.labels, f.params, f.B);
    model_backward(f.dparams, f.acts, f.params);
    CHECK(isfinite(loss), "loss %g", loss);
    const char *victims[] = {"block_14_expand/kernel", "block_14_expand_BN/gamma", "block_14_depthwise_BN/beta",
                             "block_15_expand/kernel", "block_15_depthwise/kernel", "block_15_project/kernel",
                             "block_16_expand/kernel", "Conv_1/kernel", "predictions/kernel", "predictions/bias"};
    for (size_t k = 0; k < sizeof victims / sizeof victims[0]; k++) {
        int v = model_spec_find(&f.spec, victims[k]);
        CHECK(v >= 0, "no %s", victims[k]);
        if (v < 0) continue;
        const ModelVar *var = &f.spec.vars[v];
        GradcheckOpts go = {victims[k], g_eps, 5e-2, 2e-3, 6, 5 + (uint64_t)k, 1, 0};
        GradcheckResult r = gradcheck(f.params + var->offset, var->n_floats, f.dparams + var->offset, loss_obj, &f, &go);
        CHECK(r.n_failed == 0 && r.n_checked >= 2, "%s: %d of %d coordinates failed (%d skipped at kinks)", victims[k],
              r.n_failed, r.n_checked, r.n_skipped);
    }
    /* A planted 15% error (three times the relative tolerance) in the predictions kernel's largest entry is rejected. */
    {
        const ModelVar *var = &f.spec.vars[model_spec_find(&f.spec, "predictions/kernel")];
        float *gv = f.dparams + var->offset;
        size_t top = 0;
        for (size_t i = 1; i < var->n_floats; i++)
            if (fabsf(gv[i]) > fabsf(gv[top])) top = i;
        float keep = gv[top];
        gv[top] *= 1.15f;
        GradcheckOpts go = {"predictions/kernel (perturbed)", g_eps, 5e-2, 2e-3, 4, 9, 1, 0};
        model_forward(NULL, NULL, f.acts, f.x, f.labels, f.params, f.B);
        GradcheckResult r = gradcheck(f.params + var->offset, var->n_floats, gv, loss_obj, &f, &go);
        CHECK(r.n_failed >= 1, "the checker must reject a 15%% error (failed %d)", r.n_failed);
        gv[top] = keep;
    }
    /* Evaluation mode; the moving statistics. */
    float *before = malloc(sizeof(float) * n), *dz = calloc(n, sizeof(float));
    memcpy(before, f.params, sizeof(float) * n);
    model_acts_set_training(f.acts, 0);
    float eval_loss = model_forward(NULL, NULL, f.acts, f.x, f.labels, f.params, f.B);
    CHECK(isfinite(eval_loss) && eval_loss != loss, "evaluation loss %g (training %g)", eval_loss, loss);
    model_backward(dz, f.acts, f.params);
    size_t nz = 0;
    for (size_t i = 0; i < n; i++) nz += dz[i] != 0.0f;
    CHECK(nz == 0, "backward after an evaluation forward must add nothing (%zu entries)", nz);
    model_update_moving(f.params, f.acts);
    CHECK(memcmp(before, f.params, sizeof(float) * n) == 0, "no moving update after an evaluation forward");
    model_acts_set_training(f.acts, 1);
    model_forward(NULL, NULL, f.acts, f.x, f.labels, f.params, f.B);
    model_update_moving(f.params, f.acts);
    size_t n_changed_trainable = 0, n_moved = 0, n_bad = 0;
    for (int v = 0; v < f.spec.n_vars; v++) {
        const ModelVar *var = &f.spec.vars[v];
        for (size_t i = var->offset; i < var->offset + var->n_floats; i++) {
            if (var->trainable) {
                n_changed_trainable += before[i] != f.params[i];
                continue;
            }
            n_moved += before[i] != f.params[i];
            /* moving_variance starts at 1: 1 * 0.999 + var * 0.001 lies in [0.999, 0.999 + 0.001 * var]; the
             * batch variance is at least 0, so the new value is at least 0.999 (and 0.999 < 1). */
            if (strstr(var->name, "moving_variance")) n_bad += !(f.params[i] >= 0.998999f);
        }
    }
    CHECK(n_changed_trainable == 0, "model_update_moving changed %zu trainable entries", n_changed_trainable);
    CHECK(n_moved > (f.spec.n_params - f.spec.n_trainable) / 2, "only %zu of %zu moving statistics moved", n_moved,
          f.spec.n_params - f.spec.n_trainable);
    CHECK(n_bad == 0, "%zu moving variances below 0.999", n_bad);
    free(before);
    free(dz);
    free(f.x);
    free(f.params);
    free(f.dparams);
    model_acts_free(f.acts);
}

int main(void) {
    test_table();
    test_gradients();
    if (check_failures) {
        printf("FAIL: %d checks failed\n", check_failures);
        return 1;
    }
    printf("mobilenet_v2: table, gradients, evaluation mode and moving statistics ok\n");
    return 0;
}
