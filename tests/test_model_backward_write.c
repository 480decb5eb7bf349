/* test_model_backward_write.c — model_backward_write, a step's first
 * micro-batch: dparams OVERWRITTEN, on every network of model/nets/.
 *
 * Where it sits: ctest (CPU).  For mnist and cifar10 (8x8), mobilenet_v2
 * (32x32, width 0.35), vgg11 and vgg16 (32x32, a 16-wide head), resnet20
 * (16x16) and resnet50 (64x64), batch 2 on 2 threads, with random inputs
 * (a fixed seed) and the networks' own initial variables:
 *   1. model_backward_write onto a block of NaN gives, float for float, what
 *      zeroing the block and model_backward give (compared with ==, so a
 *      zero written straight as -0 matches the +0 of 0 + -0; model.h), and
 *      leaves no NaN: every variable's entries are written, the
 *      non-trainable ones (batch norm's moving statistics) with 0;
 *   2. model_backward after it adds, so K = 2 micro-batches through the two
 *      calls equal the zeroed block's two model_backward calls float for
 *      float (the way tower_cpu.c accumulates);
 *   3. without a training forward (an evaluation forward last) nothing is
 *      written: the NaN block stays NaN.
 * A kind that wrote only part of its gradient, or one the executor forgot
 * to zero, leaves a NaN or a stale value and fails 1; a write that added
 * fails 1 through the NaN.  Not reached here: the executor's zeroing of
 * variables whose node no gradient reaches (no network has such a node).
 */
#include "gradcheck.h"
#include "model/model.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"

static void check_net(const char *net, int H, int C, ModelOptions o) {
    ModelSpec spec;
    char err[256];
    CHECK(model_spec_init_opts(&spec, net, H, H, C, 10, &o, err, sizeof err) == 0, "%s: %s", net, err);
    if (check_failures) return;
    const int B = 2;
    ModelActs *acts = model_acts_create(&spec, B);
    CHECK(acts != NULL, "%s: model_acts_create", net);
    if (!acts) return;
    const size_t n = spec.n_params, x_n = (size_t)B * H * H * C;
    float *x = malloc(sizeof(float) * x_n), *params = malloc(sizeof(float) * n);
    float *ref = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    int32_t labels[2] = {3, 7};
    gradcheck_fill_uniform(x, x_n, -1.0f, 1.0f, 1234);
    model_init_params(params, &spec, 99);
    CHECK(isfinite(model_forward(NULL, NULL, acts, x, labels, params, B)), "%s: loss", net);
    memset(ref, 0, sizeof(float) * n);
    model_backward(ref, acts, params);
    for (size_t i = 0; i < n; i++) got[i] = NAN;
    model_backward_write(got, acts, params);
    size_t n_diff = 0, n_nan = 0, first = n;
    for (size_t i = 0; i < n; i++) {
        n_nan += isnan(got[i]);
        if (!(got[i] == ref[i])) {
            if (first == n) first = i;
            n_diff++;
        }
    }
    int v_first = -1;
    for (int v = 0; first < n && v < spec.n_vars; v++)
        if (first >= spec.vars[v].offset && first < spec.vars[v].offset + spec.vars[v].n_floats) v_first = v;
    CHECK(n_diff == 0, "%s: model_backward_write differs from zero + model_backward at %zu of %zu floats (%zu NaN; "
          "the first in %s: %g, want %g)", net, n_diff, n, n_nan, v_first >= 0 ? spec.vars[v_first].name : "?",
          first < n ? got[first] : 0.0f, first < n ? ref[first] : 0.0f);
    size_t n_nontrainable = 0;
    for (int v = 0; v < spec.n_vars; v++)
        if (!spec.vars[v].trainable)
            for (size_t i = 0; i < spec.vars[v].n_floats; i++) {
                CHECK(got[spec.vars[v].offset + i] == 0.0f, "%s: %s[%zu] = %g, want 0", net, spec.vars[v].name, i,
                      got[spec.vars[v].offset + i]);
                n_nontrainable++;
            }
    /* 2. A second micro-batch adds onto what the write left. */
    labels[0] = 5;
    CHECK(isfinite(model_forward(NULL, NULL, acts, x, labels, params, B)), "%s: second loss", net);
    model_backward(ref, acts, params);
    model_backward(got, acts, params);
    size_t n_diff2 = 0;
    for (size_t i = 0; i < n; i++) n_diff2 += !(got[i] == ref[i]);
    CHECK(n_diff2 == 0, "%s: write then add differs from zero, add, add at %zu floats", net, n_diff2);
    /* 3. After an evaluation forward: nothing written. */
    model_acts_set_training(acts, 0);
    model_forward(NULL, NULL, acts, x, labels, params, B);
    for (size_t i = 0; i < n; i++) got[i] = NAN;
    model_backward_write(got, acts, params);
    size_t n_written = 0;
    for (size_t i = 0; i < n; i++) n_written += !isnan(got[i]);
    CHECK(n_written == 0, "%s: after an evaluation forward model_backward_write wrote %zu floats", net, n_written);
    printf("  %-13s %3dx%-3d %10zu floats (%zu non-trainable): written = zero + added, float for float; then "
           "added onto: ok\n", net, H, H, n, n_nontrainable);
    free(x); free(params); free(ref); free(got);
    model_acts_free(acts);
}

int main(void) {
    omp_set_num_threads(2);
    printf("model_backward_write against zeroing and model_backward, every network, batch 2:\n");
    const ModelOptions plain = {0.0f, MODEL_HEAD_KERAS, 0};
    const ModelOptions small_head = {0.0f, MODEL_HEAD_KERAS, 16};
    const ModelOptions narrow = {0.35f, MODEL_HEAD_KERAS, 0};
    check_net("mnist", 8, 1, plain);
    check_net("cifar10", 8, 3, plain);
    check_net("mobilenet_v2", 32, 3, narrow);
    check_net("vgg11", 32, 3, small_head);
    check_net("vgg16", 32, 3, small_head);
    check_net("resnet20", 16, 3, plain);
    check_net("resnet50", 64, 3, plain);
    if (check_failures) {
        printf("FAIL: %d of %d checks\n", check_failures, check_count);
        return 1;
    }
    printf("ok: %d checks\n", check_count);
    return 0;
}
