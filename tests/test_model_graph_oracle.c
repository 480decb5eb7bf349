/* test_model_graph_oracle.c — the layer graph (model.c's executor, the
 * builders of model/nets/) against the hand-written plans it replaced
 * (tests/model_reference.c, the old model.c kept as an oracle): BITWISE the
 * same results.
 *
 * Where it sits: ctest (CPU).  For mnist and cifar10, several input shapes,
 * batch sizes and OpenMP thread counts, on random inputs and a random
 * seed's variables:
 *   - the variable table: names, shapes, offsets, initializers, weight
 *     decay, n_params (so the same seed gives the same variables: the
 *     initializer reads only the table); every variable trainable;
 *   - the forward cost (model_forward_flops_per_example);
 *   - loss, cross-entropy and logits: the same bits;
 *   - gradients: the same bits, except that a gradient the old code wrote
 *     as -0.0 may now be +0.0 (backward now ADDS into a zeroed block, and
 *     +0 + -0 = +0); both compare equal as floats, and the count of such
 *     entries is printed;
 *   - backward ADDS: a second backward into the same block doubles it
 *     (exactly where no weight decay is added), and a forward/backward on a second batch through
 *     the same workspace still matches.
 * The executor's convolutions run conv2d's loops here
 * (conv2d_run_set_loops_only), as the reference's do: bits can only match
 * within one summation order.  oneDNN's convolution path is checked
 * against the loops by test_conv_dnnl, and whole networks through it by
 * test_model_nets and test_model_gradcheck.
 */
#include "gradcheck.h"
#include "model/model.h"
#include "model/layers.h"
#include "tests/model_reference.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"

static int same_bits(float a, float b) {
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    return x == y;
}

static void compare_tables(const ModelSpec *s, const ModelSpec *r) {
    CHECK(s->kind == r->kind && strcmp(s->name, r->name) == 0, "%s: kind/name differ from the reference", s->name);
    CHECK(s->n_vars == r->n_vars, "%s: %d variables, reference %d", s->name, s->n_vars, r->n_vars);
    CHECK(s->n_params == r->n_params, "%s: %zu parameters, reference %zu", s->name, s->n_params, r->n_params);
    CHECK(s->n_trainable == s->n_params, "%s: every variable is trainable (%zu of %zu)", s->name, s->n_trainable,
          s->n_params);
    for (int v = 0; v < s->n_vars && v < r->n_vars; v++) {
        const ModelVar *a = &s->vars[v], *b = &r->vars[v];
        int same = strcmp(a->name, b->name) == 0 && a->ndim == b->ndim && a->offset == b->offset &&
                   a->n_floats == b->n_floats && a->init == b->init && same_bits(a->init_value, b->init_value) &&
                   same_bits(a->wd, b->wd) && !memcmp(a->shape, b->shape, sizeof a->shape);
        CHECK(same, "%s var %d: %s differs from the reference's %s", s->name, v, a->name, b->name);
        CHECK(a->trainable == 1, "%s: %s must be trainable", s->name, a->name);
    }
}

/* Gradients: bits equal, or both zeros of either sign. */
static void compare_grads(const char *what, const float *g, const float *r, size_t n) {
    size_t n_diff = 0, n_signed_zero = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        if (same_bits(g[i], r[i])) continue;
        if (g[i] == 0.0f && r[i] == 0.0f) {
            n_signed_zero++;
            continue;
        }
        if (!n_diff) first = i;
        n_diff++;
    }
    CHECK(n_diff == 0, "%s: %zu gradient entries differ in bits (first at %zu: %.9g vs reference %.9g)", what, n_diff,
          first, n_diff ? g[first] : 0.0f, n_diff ? r[first] : 0.0f);
    if (n_signed_zero) printf("    %s: %zu gradient entries -0 in the reference, +0 here\n", what, n_signed_zero);
}

static void check_case(const char *model, int H, int W, int C, int K, int max_batch, const int *batches, int n_batches,
                       int n_threads) {
    char err[256];
    ModelSpec spec, ref_spec;
    CHECK(model_spec_init(&spec, model, H, W, C, K, err, sizeof err) == 0, "%s: %s", model, err);
    CHECK(ref_spec_init(&ref_spec, model, H, W, C, K, err, sizeof err) == 0, "reference %s: %s", model, err);
    compare_tables(&spec, &ref_spec);
    CHECK(model_forward_flops_per_example(&spec) == ref_forward_macs_per_example(&ref_spec),
          "%s: forward cost %.17g, reference %.17g", model, model_forward_flops_per_example(&spec),
          ref_forward_macs_per_example(&ref_spec));
    omp_set_num_threads(n_threads);
    ModelActs *acts = model_acts_create(&spec, max_batch);
    RefActs *ref = ref_acts_create(&ref_spec, max_batch);
    CHECK(acts && ref, "%s: workspaces", model);
    if (!acts || !ref) return;
    const size_t n = spec.n_params, ex_n = (size_t)H * W * C;
    float *params = malloc(sizeof(float) * n), *ref_params = malloc(sizeof(float) * n);
    float *g = malloc(sizeof(float) * n), *rg = malloc(sizeof(float) * n);
    float *x = malloc(sizeof(float) * ex_n * max_batch);
    float *logits = malloc(sizeof(float) * K * max_batch), *ref_logits = malloc(sizeof(float) * K * max_batch);
    int32_t *labels = malloc(sizeof(int32_t) * max_batch);
    uint64_t seed = 1000 + (uint64_t)H * 7 + (uint64_t)n_threads;
    model_init_params(params, &spec, seed);
    model_init_params(ref_params, &ref_spec, seed);
    CHECK(memcmp(params, ref_params, sizeof(float) * n) == 0, "%s: the same seed must give the same variables",
          model);
    for (int t = 0; t < n_batches; t++) {
        const int B = batches[t];
        char what[128];
        snprintf(what, sizeof what, "%s %dx%dx%d K=%d B=%d threads=%d", model, H, W, C, K, B, n_threads);
        gradcheck_fill_uniform(x, ex_n * B, -1.0f, 1.0f, seed + 17 * (uint64_t)t);
        for (int b = 0; b < B; b++) labels[b] = (int32_t)((b * 7 + t) % K);
        float ce = 0, ref_ce = 0;
        float loss = model_forward(logits, &ce, acts, x, labels, params, B);
        float ref_loss = ref_forward(ref_logits, &ref_ce, ref, x, labels, params, B);
        CHECK(same_bits(loss, ref_loss) && same_bits(ce, ref_ce), "%s: loss %.9g ce %.9g, reference %.9g %.9g", what,
              loss, ce, ref_loss, ref_ce);
        CHECK(memcmp(logits, ref_logits, sizeof(float) * K * B) == 0, "%s: logits differ in bits", what);
        memset(g, 0, sizeof(float) * n);
        model_backward(g, acts, params);
        for (size_t i = 0; i < n; i++) rg[i] = NAN;
        ref_backward(rg, ref, params);
        compare_grads(what, g, rg, n);
        /* ADDS: a second backward doubles the block, within rounding (gradcheck_count_not_doubled). */
        model_backward(g, acts, params);
        const size_t n_bad = gradcheck_count_not_doubled(&spec, rg, g, params);
        CHECK(n_bad == 0, "%s: a second model_backward must add (%zu entries not doubled)", what, n_bad);
        printf("  %s: loss %.7g, %zu gradient entries: bitwise equal\n", what, loss, n);
    }
    model_acts_free(acts);
    ref_acts_free(ref);
    free(params);
    free(ref_params);
    free(g);
    free(rg);
    free(x);
    free(logits);
    free(ref_logits);
    free(labels);
}

int main(void) {
    conv2d_run_set_loops_only(1);
    const int batches[] = {5, 1, 8, 3};
    const int threads[] = {1, 2, 3};
    for (int t = 0; t < 3; t++) {
        check_case("mnist", 28, 28, 1, 10, 8, batches, 4, threads[t]);
        check_case("cifar10", 24, 24, 3, 10, 8, batches, 4, threads[t]);
    }
    /* Other shapes and class counts. */
    check_case("mnist", 9, 11, 3, 4, 3, batches + 3, 1, 2);
    check_case("cifar10", 32, 32, 3, 7, 5, batches, 1, 2);
    check_case("cifar10", 28, 28, 1, 10, 2, batches + 1, 1, 1);
    if (check_failures) {
        printf("FAIL: %d checks failed\n", check_failures);
        return 1;
    }
    printf("the graph executor matches the hand-written reference bit for bit\n");
    return 0;
}
