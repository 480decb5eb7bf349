/* test_tower_sync_bn.c — sync batch norm (`--batch_norm sync`) at the
 * towers: N CPU towers of B, whose batch norms reduce their statistics
 * through the tower group's collective sum (tower/tower.c, model.h's
 * ModelSync), give the loss and the averaged gradient of ONE tower of
 * N x B (the loss within 1e-5; the gradient relative to each variable's
 * largest, floored at 1e-2 of the whole gradient's largest, at most 1e-4:
 * float32 through 52 normalisations whose sums are grouped by tower, not
 * by row chunk),
 * for N = 2 and 3 on mobilenet_v2 (width 0.35, 32x32x3: 52 batch norms),
 * random inputs and variables of a fixed seed (TOWER_TEST_SEED for
 * another), the seed printed.
 * That the check can fail: the same N towers without sync (each its own
 * statistics) must differ from the one tower by more than 1e-3.
 * Every tower's times are in order: the go, its thread running, its
 * copy-in (tower_thread_wake_sec, tower_wake_sec).
 * That a failing tower cannot hang the others: a step where tower 1's shard
 * is over its maximum (its copy-in fails, so it never reaches the first
 * collective sum) returns -1 with that tower's message (the ctest timeout
 * would catch a hang), and the next good step still equals the one tower.
 * Usage: test_tower_sync_bn [BACKEND]: "cpu" (the default) or "cuda" (the
 * GPU executor's host round trip per batch norm, every tower on GPU 0,
 * against one CUDA tower; label gpu, 77 without a GPU).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/model.h"
#include "tests/check.h"
#include "tests/grad_diff.h"
#include "tower/tower.h"

static uint64_t rng_state;
static float uniform(float lo, float hi) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * (float)((rng_state >> 40) / 16777216.0);
}

typedef struct {
    double loss;      /* mean of the towers' losses */
    float *grad;      /* (n_params) mean of the towers' gradients; malloc'ed */
    int rc;           /* tower_group_run's */
    char err[256];
} Step;

/* One step of n_towers towers of shard (the first n_towers * shard examples
 * of x), sync or not; bad_shard > 0 gives tower 1 that many examples. */
static const TowerBackend *backend;

static Step run(const ModelSpec *spec, const float *params, const float *x, const int32_t *labels, int n_towers,
                int shard, int sync, int bad_shard) {
    Step r = {0};
    float *grads[TOWER_MAX_TOWERS];
    for (int t = 0; t < n_towers; t++) grads[t] = calloc(spec->n_params, sizeof(float));
    TowerGroupConfig cfg = {.backend = backend, .n_towers = n_towers, .max_batch = shard,
                            .sync_batch_norm = sync};
    for (int t = 0; t < n_towers; t++) cfg.n_threads[t] = 1;
    char err[256];
    TowerGroup *g = tower_group_create(&cfg, spec, grads, err, sizeof err);
    if (!g) {
        fprintf(stderr, "tower_group_create: %s\n", err);
        exit(1);
    }
    int offset[TOWER_MAX_TOWERS], n[TOWER_MAX_TOWERS];
    TowerStep st = {.x = x, .labels = labels, .shard_offset = offset, .shard_n = n};
    for (int t = 0; t < n_towers; t++) {
        st.params[t] = params;
        offset[t] = t * shard;
        n[t] = shard;
    }
    if (bad_shard > 0) {
        n[1] = bad_shard;
        r.rc = tower_group_run(g, &st, r.err, sizeof r.err);
        n[1] = shard;
        CHECK(r.rc == -1 && strstr(r.err, "tower 1:"), "a bad shard: rc %d, '%s'", r.rc, r.err);
        printf("  a step with tower 1's shard of %d (over %d) failed without a hang: %s\n", bad_shard, shard, r.err);
    }
    r.rc = tower_group_run(g, &st, r.err, sizeof r.err);
    CHECK(r.rc == 0, "tower_group_run: %s", r.err);
    /* Each tower's times: the go, then its thread running, then its copy-in (on a GPU the device's clock,
     * anchored after the thread began). */
    for (int t = 0; t < n_towers; t++) {
        const TowerTimes *tt = &g->towers[t].times;
        CHECK(tt->go_sec > 0.0 && tower_thread_wake_sec(tt) >= 0.0 && tower_wake_sec(tt) >= tower_thread_wake_sec(tt),
              "tower %d: go %.6f, thread %.6f, copy-in %.6f s", t, tt->go_sec, tt->run_sec,
              tt->span[TOWER_PHASE_COPY_IN].start_sec);
    }
    r.grad = calloc(spec->n_params, sizeof(float));
    for (int t = 0; t < n_towers; t++) {
        r.loss += g->towers[t].loss / n_towers;
        for (size_t i = 0; i < spec->n_params; i++) r.grad[i] += grads[t][i] / (float)n_towers;
    }
    tower_group_free(g);
    for (int t = 0; t < n_towers; t++) free(grads[t]);
    return r;
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "cpu";
    backend = tower_backend_find(name);
    char err[256];
    if (!backend || backend->device_count(err, sizeof err) < 1) {
        const char *req = getenv("TOWER_TEST_REQUIRE_GPU");
        const int required = strcmp(name, "cpu") != 0 && req && strcmp(req, "1") == 0;
        printf("%s: no %s towers in this build or machine\n", required ? "FAIL (TOWER_TEST_REQUIRE_GPU=1)" : "skipped",
               name);
        return required ? 1 : 77;
    }
    printf("backend %s\n", backend->name);
    /* A fixed seed unless TOWER_TEST_SEED names one.  An earlier note here reported about 1 seed in 40
     * (e.g. 1795473275) 5.8e-3 away in block_13_expand/kernel.  Measured again on the CPU towers (2026-11-26,
     * the 2-core AVX2 machine, at this file's commit of that note and at the fused graph's, which give the
     * same numbers): 1795473275 gives 1.07e-6 (2 towers) and 6.41e-6 (3 towers), and 381 seeds (81 of them
     * the seconds around it, as the time-seeded runs of then drew; 100 of them also at the note's commit)
     * all give at most 2.4e-5 against the 1e-4 bound.  The forward is bitwise the one tower's: for 5 seeds
     * (1795473275 among them) every pre-activation of the 35 batch norms with a ReLU6/ReLU (428288 values)
     * is equal bit for bit (a throwaway dump from batchnorm_normalize_act), so no clip can flip, and what
     * remains is the backward's grouping of rows (4 + 4 against 8).  Where the forward
     * is not bitwise (another sgemm kernel set, cuDNN's algorithms per batch size on GPU towers) a
     * pre-activation within rounding of 0 or 6 can land on the other side of the clip in one of the two
     * runs and change one element's gradient by O(1): the likely source of the note's figure, and a reason
     * to rerun a failing seed before reading it as a sync batch norm bug. */
    uint64_t seed = 20261123;
    const char *env = getenv("TOWER_TEST_SEED");
    if (env) seed = strtoull(env, NULL, 10);
    rng_state = seed;
    printf("seed %llu (TOWER_TEST_SEED to repeat)\n", (unsigned long long)seed);
    ModelSpec spec;
    ModelOptions opts = {.width_multiplier = 0.35f, .head = MODEL_HEAD_KERAS};
    if (model_spec_init_opts(&spec, "mobilenet_v2", 32, 32, 3, 10, &opts, err, sizeof err) != 0) {
        fprintf(stderr, "model_spec_init_opts: %s\n", err);
        return 1;
    }
    const int shard = 4, max_n = 3 * shard;
    const size_t ex = (size_t)32 * 32 * 3;
    float *params = malloc(spec.n_params * sizeof(float)), *x = malloc(max_n * ex * sizeof(float));
    int32_t labels[3 * 4];
    model_init_params(params, &spec, seed);
    for (size_t i = 0; i < max_n * ex; i++) x[i] = uniform(-1.0f, 1.0f);
    for (int i = 0; i < max_n; i++) labels[i] = (int32_t)(uniform(0.0f, 10.0f)) % 10;

    for (int n_towers = 2; n_towers <= 3; n_towers++) {
        Step one = run(&spec, params, x, labels, 1, n_towers * shard, 0, 0);
        Step synced = run(&spec, params, x, labels, n_towers, shard, 1, n_towers == 2 ? shard + 1 : 0);
        Step apart = run(&spec, params, x, labels, n_towers, shard, 0, 0);
        const char *w1 = "", *w2 = "";
        double rel = grad_rel_diff(&spec, synced.grad, one.grad, &w1);
        double rel_apart = grad_rel_diff(&spec, apart.grad, one.grad, &w2);
        double loss_rel = fabs(synced.loss - one.loss) / fabs(one.loss);
        printf("%d towers x %d, sync: loss %.7f vs one tower x %d %.7f (relative %.2g); gradients: largest relative "
               "difference %.3g (%s)\n",
               n_towers, shard, synced.loss, n_towers * shard, one.loss, loss_rel, rel, w1);
        printf("%d towers x %d, each its own statistics: gradients differ by %.3g (%s), as they must\n", n_towers,
               shard, rel_apart, w2);
        CHECK(loss_rel <= 1e-5, "sync loss %.9g vs %.9g", synced.loss, one.loss);
        CHECK(rel <= 1e-4, "sync gradients differ by %.3g in %s", rel, w1);
        CHECK(rel_apart > 1e-3, "without sync the gradients differ by only %.3g: the check cannot fail", rel_apart);
        free(one.grad);
        free(synced.grad);
        free(apart.grad);
    }
    free(params);
    free(x);
    printf("%s (%d checks)\n", check_failures ? "FAILED" : "sync batch norm: N towers equal one tower of N x B",
           check_count);
    return check_failures ? 1 : 0;
}
