/* test_accum_moving.c — batch norm's moving statistics with --accum_steps K
 * (docs/modes.md "What a step computes"): K micro-batches are K successive
 * updates, as Keras runs a batch norm's update on every training forward.
 *
 * For mobilenet_v2 (width 0.35, 32x32x3) and resnet20, 2 towers of K = 3
 * micro-batches of B = 2, synthetic data, one step, in ps_cpu and
 * replicated_host (and replicated_mpi on one rank, --batch_norm tower):
 *
 *   - --batch_norm tower: the moving statistics after the step are bitwise
 *     the oracle computed from the model alone: for each tower, its
 *     micro-batches through training forwards from the initial variables
 *     (model_forward), each followed by model_update_moving on the tower's
 *     copy of the initial moving statistics, in micro-batch order; the
 *     copies summed in tower order and divided by the tower count
 *     (train/batch_norm.c's mean).  The old rule (the last micro-batch's
 *     update alone) is shown to be far from it, so the check can fail;
 *   - --batch_norm sync: the oracle's micro-batch k is one forward on the
 *     towers' micro-batches k side by side (the global batch's statistics
 *     of that micro-batch), K updates in order on one copy.  Not bitwise
 *     (the towers' sums are added per tower, then across them): within
 *     1e-3 of the largest change the step made to a moving statistic,
 *     where the last-micro-batch rule is more than 0.1 of it away.
 *
 * And the memory bound (CPU build only): a CPU tower's host bytes with
 * --accum_steps k count the k - 1 kept micro-batches' statistics, and at
 * most the kept array's capacity (4, doubling: under 2 (k - 1) above 4).
 * The gradients with --accum_steps are test_accum_steps' subject.
 * Built twice: test_accum_moving (CPU towers, as above) and, with CUDA,
 * test_gpu_accum_moving (-DTOWER_ACCUM_GPU, label gpu, 77 without a GPU):
 * GPU towers with --deterministic in ps_gpu and replicated_nccl (where
 * built), the reference still the CPU model's, so --batch_norm tower is
 * held to 1e-3 of the change as sync is, not bitwise.  It has not run on a
 * GPU yet.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/modes_common.h"
#ifdef TOWER_ACCUM_GPU
#include "tests/test_gpu_common.h"
#define DEVICE "gpu"
static const char *const modes[] = {"ps_gpu", "replicated_nccl"};
#define BITWISE 0
#else
#define DEVICE "cpu"
static const char *const modes[] = {"ps_cpu", "replicated_host", "replicated_mpi"};
#define BITWISE 1
#endif

#define K 3
#define B 2
#define N_TOWERS 2
#define SYNC_TOLERANCE 1e-3

static int failures = 0;

static void check(int ok, const char *what) {
    printf("%s  %s\n", ok ? "ok  " : "FAIL", what);
    failures += !ok;
}

/* max |a - b| over the moving statistics, divided by max |b - init| there (the largest change of the oracle). */
static double moving_diff_over_change(const ModelSpec *spec, const float *a, const float *b, const float *init) {
    double d = 0.0, m = 1e-30;
    for (int v = 0; v < spec->n_vars; v++) {
        const ModelVar *mv = &spec->vars[v];
        if (mv->trainable) continue;
        for (size_t i = mv->offset; i < mv->offset + mv->n_floats; i++) {
            d = fmax(d, fabs((double)a[i] - b[i]));
            m = fmax(m, fabs((double)b[i] - init[i]));
        }
    }
    return d / m;
}

static int moving_equal(const ModelSpec *spec, const float *a, const float *b) {
    for (int v = 0; v < spec->n_vars; v++) {
        const ModelVar *mv = &spec->vars[v];
        if (!mv->trainable && memcmp(a + mv->offset, b + mv->offset, mv->n_floats * sizeof(float))) return 0;
    }
    return 1;
}

/* The moving statistics after one step, from the model alone (out: n_params, its moving entries set).
 * last_only: the old rule, the last micro-batch's update alone. */
static void oracle(const Trainer *tr, const float *init, int sync, int last_only, float *out) {
    const ModelSpec *spec = &tr->spec;
    const size_t n = spec->n_params, ex = (size_t)spec->H * spec->W * spec->C;
    const PipelineBatch *b = &tr->synthetic;
    ModelActs *acts = model_acts_create(spec, N_TOWERS * B);
    float *copy = malloc(n * sizeof(float)), *x = malloc((size_t)N_TOWERS * B * ex * sizeof(float));
    int32_t labels[N_TOWERS * B];
    if (!acts || !copy || !x) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    if (sync) { /* one copy; micro-batch k = the towers' k-th micro-batches side by side */
        memcpy(out, init, n * sizeof(float));
        for (int k = 0; k < K; k++) {
            for (int t = 0; t < N_TOWERS; t++) {
                const size_t first = (size_t)b->shard_offset[t] + (size_t)k * B;
                memcpy(x + (size_t)t * B * ex, b->x + first * ex, (size_t)B * ex * sizeof(float));
                memcpy(labels + t * B, b->labels + first, B * sizeof(int32_t));
            }
            model_forward(NULL, NULL, acts, x, labels, init, N_TOWERS * B);
            if (!last_only || k == K - 1) model_update_moving(out, acts);
        }
    } else {
        for (int t = 0; t < N_TOWERS; t++) {
            memcpy(copy, init, n * sizeof(float));
            for (int k = 0; k < K; k++) {
                const size_t first = (size_t)b->shard_offset[t] + (size_t)k * B;
                model_forward(NULL, NULL, acts, b->x + first * ex, b->labels + first, init, B);
                if (!last_only || k == K - 1) model_update_moving(copy, acts);
            }
            for (size_t i = 0; i < n; i++) out[i] = t == 0 ? copy[i] : out[i] + copy[i];
        }
        for (size_t i = 0; i < n; i++) out[i] /= (float)N_TOWERS;
    }
    model_acts_free(acts);
    free(copy);
    free(x);
}

/* One step of model in mode (a trainer mode's name) with batch_norm against the reference; the mode skipped
 * (one line) when this build lacks it. */
static void check_one(const char *model, const char *mode_name, const char *batch_norm) {
    TrainerOptions o;
    modes_base_options(&o, model, DEVICE, N_TOWERS, B);
    if (!strcmp(model, "mobilenet_v2")) o.model_opts.width_multiplier = 0.35f;
    o.deterministic = 1; /* GPU towers: the same algorithms every run */
    TrainerMode mode;
    char err[256];
    if (trainer_mode_from_name(mode_name, &mode, err, sizeof err) != 0 || !trainer_mode_available(mode, err, sizeof err)) {
        printf("%s %s: not in this build (%s)\n", model, mode_name, err);
        return;
    }
    trainer_mode_set_flags(mode, &o);
    o.accum_steps = K;
    o.batch_norm = batch_norm;
    const int sync = !strcmp(batch_norm, "sync");
    Trainer *tr = modes_open_or_die(&o);
    const ModelSpec spec = tr->spec;
    const size_t n = spec.n_params;
    float *init = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float)), *old = malloc(n * sizeof(float));
    memcpy(init, trainer_variables(tr), n * sizeof(float));
    if (tr->synthetic.shard_n[0] != K * B || tr->synthetic.shard_n[1] != K * B) {
        fprintf(stderr, "%s: shards of %d and %d examples, expected %d\n", model, tr->synthetic.shard_n[0],
                tr->synthetic.shard_n[1], K * B);
        exit(1);
    }
    oracle(tr, init, sync, 0, want);
    oracle(tr, init, sync, 1, old);
    modes_steps_or_die(tr, 1);
    const float *got = trainer_variables(tr);
    const double d = moving_diff_over_change(&spec, got, want, init);
    const double d_old = moving_diff_over_change(&spec, old, want, init);
    char what[512];
    if (sync || !BITWISE) {
        snprintf(what, sizeof what, "%s %s, --batch_norm %s, %d towers x %d micro-batches of %d: moving statistics "
                 "%.2g of the change from %d updates %s (<= %g; the last micro-batch alone: %.2g, > 0.1)", model,
                 mode_name, batch_norm, N_TOWERS, K, B, d, K,
                 sync ? "on the global micro-batches" : "per tower in order, averaged", SYNC_TOLERANCE, d_old);
        check(d <= SYNC_TOLERANCE && d_old > 0.1, what);
    } else {
        snprintf(what, sizeof what, "%s %s, --batch_norm tower, %d towers x %d micro-batches of %d: moving statistics "
                 "bitwise %d updates per tower in order, averaged (%.2g of the change; the last micro-batch alone: "
                 "%.2g)", model, mode_name, N_TOWERS, K, B, K, d, d_old);
        check(moving_equal(&spec, got, want) && d_old > 0.1, what);
    }
    free(init);
    free(want);
    free(old);
    trainer_close(tr, NULL, 0);
}

#ifndef TOWER_ACCUM_GPU
/* The memory bound counts what the step keeps: a CPU tower's host bytes with --accum_steps k hold the k - 1
 * earlier micro-batches' batch statistics beyond those of one micro-batch (the figure fails if the backend
 * ignores k), and the statistics' size without activations is the one real activations give. */
static void check_bound(const char *model) {
    TrainerOptions o;
    modes_base_options(&o, model, "cpu", N_TOWERS, B);
    if (!strcmp(model, "mobilenet_v2")) o.model_opts.width_multiplier = 0.35f;
    Trainer *tr = modes_open_or_die(&o);
    ModelActs *acts = model_acts_create(&tr->spec, B);
    const size_t one = acts ? model_moving_stats_n_bytes(acts) : 0;
    char what[256];
    snprintf(what, sizeof what, "%s: one forward's batch statistics, %zu bytes, from the spec alone: %zu", model, one,
             model_moving_stats_spec_n_bytes(&tr->spec, B));
    check(one > 0 && model_moving_stats_spec_n_bytes(&tr->spec, B) == one, what);
    const size_t base = tower_backend_cpu.host_n_bytes(&tr->spec, B, 1);
    for (int k = 2; k <= 40; k += 19) {
        const size_t more = tower_backend_cpu.host_n_bytes(&tr->spec, B, k) - base;
        snprintf(what, sizeof what, "%s: a CPU tower's bound with --accum_steps %d: %zu bytes more than with 1 (the "
                 "kept statistics: %zu)", model, k, more, (size_t)(k - 1) * one);
        /* the kept array's capacity starts at 4 and doubles, so it holds fewer than 2 (k - 1) above 4 */
        const size_t cap_max = (size_t)(2 * (k - 1) > 4 ? 2 * (k - 1) : 4);
        check(more >= (size_t)(k - 1) * one && more <= cap_max * one, what);
    }
    model_acts_free(acts);
    trainer_close(tr, NULL, 0);
}
#endif

int main(void) {
#ifdef TOWER_ACCUM_GPU
    gpu_test_require_gpu();
#else
    check_bound("mobilenet_v2");
    check_bound("resnet20");
#endif
    const char *const models[] = {"mobilenet_v2", "resnet20"};
    const int n_modes = (int)(sizeof modes / sizeof modes[0]);
    for (int m = 0; m < 2; m++)
        for (int md = 0; md < n_modes; md++) {
            check_one(models[m], modes[md], "tower");
            if (strcmp(modes[md], "replicated_mpi")) check_one(models[m], modes[md], "sync"); /* mpi: one rank */
        }
    printf("%s\n", failures ? "moving statistics with --accum_steps FAILED" : "moving statistics with --accum_steps hold");
    return failures ? 1 : 0;
}
