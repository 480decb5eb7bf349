/* test_accum_steps.c — gradient accumulation and the loss scaling
 * (--accum_steps, --loss_scaling; docs/modes.md "What a step computes"):
 *
 *  1. K micro-batches of B per tower step as one micro-batch of K x B: for
 *     mnist and cifar10, in ps_cpu and replicated_host, 2 towers, K = 3,
 *     momentum at learning rate 0.1 over 3 steps.
 *  2. --loss_scaling global_batch with equal shards is bitwise tower_mean
 *     (every tower's weight is exactly 1, so no gradient is touched).
 *  3. With unequal --shard_sizes (1,5): global_batch equals one tower on the
 *     whole batch of 6 (weight decay counted once), and tower_mean does not
 *     (it weights the one-example tower as much as the five-example one),
 *     in ps_cpu and replicated_host; and with K = 2 micro-batches of (1,5)
 *     global_batch equals one tower of 12.
 *
 * "Equal" is not bitwise: a micro-batch of B sums its examples in other
 * GEMM blocks than one of K x B, and the mean is (g_1 + .. + g_K) / K, not
 * one sum over K x B examples divided once.  It is, after the first step
 * (both runs from the same variables): the whole model's normwise relative
 * difference and the first loss's within 1e-6, and every variable's within
 * 2e-5 (the worst is conv1/biases: its gradient is a sum over every
 * position that mostly cancels, so its own norm is small; 2.5e-6 to
 * 1.1e-5).  After the 3 steps, within 1e-4 (the model, the losses) and 2e-2
 * (each variable): from the second step on the runs' variables differ by
 * their rounding, and a ReLU or max-pool choice within that of a tie (a
 * kink) flips in one run and not the other and moves conv1/biases by up to
 * 7e-3 from there (the loops did it for mnist's 5,1 split, model/winograd.c's
 * F(4x4, 5x5) for 4,2, model/conv_first.c's kernels for the 3 x 2 and the
 * 2 x (1,5) splits in one build or another: which case trips follows the
 * rounding of each build), while a step that gets accumulation or scaling
 * wrong is off by 1e-2 (the model) and 1 (a variable), as tower_mean's line
 * below shows.
 *
 *  4. The memory bound: a tower's part (trainer_max_n_bytes) with K
 *     micro-batches of B is that of one micro-batch of B, less than K x B's.
 *
 * It drives the trainer's own step on its seeded synthetic batch through
 * tests/modes_common.h, as every equivalence test does.
 * Built twice: test_accum_steps (CPU towers, ps_cpu and replicated_host)
 * and, with CUDA, test_gpu_accum_steps (-DTOWER_ACCUM_GPU, label gpu, 77
 * without a GPU): GPU towers with --deterministic in ps_gpu and
 * replicated_nccl (where built), the GPU tower test's tolerance (1e-4 per
 * variable, 1e-5 for the model and the losses: cuDNN may pick other
 * algorithms for B than for K x B), and no memory-bound check (a GPU
 * tower's host memory is not counted).
 */
#include <stdio.h>

#include "tests/modes_common.h"
#ifdef TOWER_ACCUM_GPU
#include "tests/test_gpu_common.h"
#define DEVICE "gpu"
#define MODE_A "ps_gpu"
#define MODE_B "replicated_nccl"
#define MODEL_TOL 1e-5
#define VAR_TOL 1e-4
#else
#define DEVICE "cpu"
#define MODE_A "ps_cpu"
#define MODE_B "replicated_host"
#define MODEL_TOL 1e-6
#define VAR_TOL 2e-5
#endif

/* Open, run `steps` steps keeping the losses (losses[steps]) and, where first is not NULL, the variables after
 * the first step, collect, close. */
static RunResult run_with_losses(const TrainerOptions *o, int steps, float *losses, RunResult *first) {
    Trainer *tr = modes_open_or_die(o);
    char err[1024];
    for (int s = 0; s < steps; s++) {
        if (trainer_step(tr, &losses[s], err, sizeof err) != 1) {
            fprintf(stderr, "trainer_step %d (%s, %d towers, accum %d, %s): %s\n", s + 1, trainer_mode_name(tr->mode),
                    tr->n_towers, o->accum_steps, o->loss_scaling, err);
            exit(1);
        }
        if (s == 0 && first) *first = modes_collect(tr);
    }
    RunResult r = modes_collect(tr);
    trainer_close(tr, NULL, 0);
    return r;
}

/* ||a - b|| / ||a|| over the whole block of variables. */
static double model_rel_diff(size_t n, const float *a, const float *b) {
    double d2 = 0.0, a2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - b[i];
        d2 += d * d;
        a2 += (double)a[i] * a[i];
    }
    return isnan(d2) ? INFINITY : sqrt(d2) / (sqrt(a2) + 1e-30);
}

static double loss_rel_diff(const float *a, const float *b, int n) {
    double worst = 0.0;
    for (int s = 0; s < n; s++) {
        double d = fabs((double)a[s] - b[s]) / fabs((double)a[s]);
        if (!(d <= worst)) worst = d; /* NaN wins */
    }
    return worst;
}

#ifndef STEPS
#define STEPS 3
#endif

/* After the last step: the model's and the losses' bound, and each variable's, where a kink may have been
 * crossed (the header). */
#define MODEL_TOL_STEPS 1e-4
#define VAR_TOL_STEPS 2e-2

static int failures = 0;

/* b against a: equal (must_differ 0) when, after the first step (a1, b1), the whole model's relative
 * difference and the first loss's are within MODEL_TOL and every variable's within VAR_TOL, and after the last
 * within MODEL_TOL_STEPS and VAR_TOL_STEPS; different (must_differ 1) when some variable is more than 1e-3
 * apart after the last step.  Prints one line. */
static void compare(const char *what, const ModelSpec *spec, const RunResult *a1, const RunResult *a,
                    const float *loss_a, const RunResult *b1, const RunResult *b, const float *loss_b,
                    int must_differ) {
    const char *worst = "", *worst1 = "";
    const double var_rel = modes_var_rel_diff(spec, a->params, b->params, 0, &worst);
    const double model_rel = model_rel_diff(spec->n_params, a->params, b->params);
    const double loss_rel = loss_rel_diff(loss_a, loss_b, STEPS);
    if (must_differ) {
        const int ok = var_rel > 1e-3;
        printf("%-66s model %.2g, worst variable %.2g (%s), losses %.2g (must differ)  %s\n", what, model_rel, var_rel,
               worst, loss_rel, ok ? "ok" : "FAIL");
        failures += !ok;
        return;
    }
    const double var_rel1 = modes_var_rel_diff(spec, a1->params, b1->params, 0, &worst1);
    const double model_rel1 = model_rel_diff(spec->n_params, a1->params, b1->params);
    const double loss_rel1 = loss_rel_diff(loss_a, loss_b, 1);
    const int ok = model_rel1 <= MODEL_TOL && loss_rel1 <= MODEL_TOL && var_rel1 <= VAR_TOL &&
                   model_rel <= MODEL_TOL_STEPS && loss_rel <= MODEL_TOL_STEPS && var_rel <= VAR_TOL_STEPS;
    printf("%-66s step 1: model %.2g, worst variable %.2g (%s), loss %.2g; step %d: model %.2g, worst variable %.2g "
           "(%s), losses %.2g  %s\n",
           what, model_rel1, var_rel1, worst1, loss_rel1, STEPS, model_rel, var_rel, worst, loss_rel,
           ok ? "ok" : "FAIL");
    failures += !ok;
}

#ifndef TOWER_ACCUM_GPU
/* The towers' part of the memory bound for o. */
static size_t towers_n_bytes(const TrainerOptions *o) {
    Trainer *tr = modes_open_or_die(o);
    TrainerMemory mem;
    trainer_max_n_bytes(tr, &mem);
    trainer_close(tr, NULL, 0);
    return mem.towers_n_bytes;
}
#endif

int main(void) {
#ifdef TOWER_ACCUM_GPU
    gpu_test_require_gpu();
#endif
    const char *const models[] = {"mnist", "cifar10"};
    const char *const modes[] = {MODE_A, MODE_B};
    const int B = 2, K = 3;
    for (int m = 0; m < 2; m++) {
        for (int md = 0; md < 2; md++) {
            TrainerOptions o;
            modes_equivalence_options(&o, models[m], DEVICE, "momentum", 0.1f, B);
            o.deterministic = 1; /* GPU towers: the same algorithms every run */
            TrainerMode mode;
            char err[256];
            if (trainer_mode_from_name(modes[md], &mode, err, sizeof err) != 0) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            if (!trainer_mode_available(mode, err, sizeof err)) {
                printf("%s %s: not in this build (%s)\n", models[m], modes[md], err);
                continue;
            }
            trainer_mode_set_flags(mode, &o);
            RunResult init = run_with_losses(&o, 0, NULL, NULL);
            ModelSpec spec = modes_last_spec();
            char what[160];
            float loss_a[STEPS], loss_b[STEPS];

            /* 1. K micro-batches of B == one of K x B, 2 towers. */
            o.num_towers = 2;
            o.batch_size = B;
            o.accum_steps = K;
            RunResult accum1, whole1;
            RunResult accum = run_with_losses(&o, STEPS, loss_a, &accum1);
            o.batch_size = K * B;
            o.accum_steps = 1;
            RunResult whole = run_with_losses(&o, STEPS, loss_b, &whole1);
            snprintf(what, sizeof what, "%s %s: 2 towers x %d micro-batches of %d vs 2 x %d", models[m], modes[md], K,
                     B, K * B);
            compare(what, &spec, &whole1, &whole, loss_b, &accum1, &accum, loss_a, 0);
            const char *least = "";
            const double moved = modes_var_rel_diff(&spec, whole.params, init.params, 1, &least);
            printf("%s %s: the steps moved every variable by at least %.2g (%s)  %s\n", models[m], modes[md], moved,
                   least, moved > 1e-4 ? "ok" : "FAIL");
            failures += !(moved > 1e-4);
            modes_free_result(&accum);
            modes_free_result(&whole);
            modes_free_result(&accum1);
            modes_free_result(&whole1);

            /* 2. Equal shards: global_batch is bitwise tower_mean. */
            o.batch_size = B;
            o.loss_scaling = "global_batch";
            RunResult gb = run_with_losses(&o, STEPS, loss_a, NULL);
            o.loss_scaling = "tower_mean";
            RunResult tm = run_with_losses(&o, STEPS, loss_b, NULL);
            const int same = !memcmp(gb.params, tm.params, spec.n_params * sizeof(float)) &&
                             !memcmp(loss_a, loss_b, sizeof loss_a);
            printf("%s %s: equal shards, global_batch vs tower_mean: %s\n", models[m], modes[md],
                   same ? "bitwise equal  ok" : "NOT bitwise equal  FAIL");
            failures += !same;
            modes_free_result(&gb);
            modes_free_result(&tm);

            /* 3. Unequal shards 1,5: global_batch == one tower of 6; tower_mean is not. */
            o.shard_sizes = "1,5";
            o.loss_scaling = "global_batch";
            RunResult uneven1, one1;
            RunResult uneven = run_with_losses(&o, STEPS, loss_a, &uneven1);
            o.num_towers = 1;
            o.shard_sizes = "";
            o.batch_size = 6;
            RunResult one = run_with_losses(&o, STEPS, loss_b, &one1);
            snprintf(what, sizeof what, "%s %s: shards 1,5 global_batch vs 1 tower of 6", models[m], modes[md]);
            compare(what, &spec, &one1, &one, loss_b, &uneven1, &uneven, loss_a, 0);
            o.num_towers = 2;
            o.shard_sizes = "1,5";
            o.loss_scaling = "tower_mean";
            RunResult uneven_tm = run_with_losses(&o, STEPS, loss_a, NULL);
            snprintf(what, sizeof what, "%s %s: shards 1,5 tower_mean vs 1 tower of 6", models[m], modes[md]);
            compare(what, &spec, NULL, &one, loss_b, NULL, &uneven_tm, loss_a, 1);
            modes_free_result(&uneven);
            modes_free_result(&one);
            modes_free_result(&uneven1);
            modes_free_result(&one1);
            modes_free_result(&uneven_tm);

            /* 3b. Both: 2 micro-batches of shards 1,5 under global_batch == one tower of 12. */
            o.loss_scaling = "global_batch";
            o.accum_steps = 2;
            RunResult both1, one121;
            RunResult both = run_with_losses(&o, STEPS, loss_a, &both1);
            o.num_towers = 1;
            o.shard_sizes = "";
            o.batch_size = 12;
            o.accum_steps = 1;
            RunResult one12 = run_with_losses(&o, STEPS, loss_b, &one121);
            snprintf(what, sizeof what, "%s %s: 2 micro-batches of shards 1,5 global_batch vs 1 x 12", models[m],
                     modes[md]);
            compare(what, &spec, &one121, &one12, loss_b, &both1, &both, loss_a, 0);
            modes_free_result(&both);
            modes_free_result(&one12);
            modes_free_result(&both1);
            modes_free_result(&one121);
            modes_free_result(&init);
        }
#ifndef TOWER_ACCUM_GPU
        /* 4. Activations for one micro-batch, whatever K. */
        TrainerOptions o;
        modes_equivalence_options(&o, models[m], DEVICE, "momentum", 0.1f, B);
        o.num_towers = 2;
        o.accum_steps = K;
        const size_t accum = towers_n_bytes(&o);
        o.accum_steps = 1;
        const size_t micro = towers_n_bytes(&o);
        o.batch_size = K * B;
        const size_t whole = towers_n_bytes(&o);
        const int ok = accum == micro && accum < whole;
        printf("%s: towers' memory bound with %d micro-batches of %d: %zu bytes; one of %d: %zu; one of %d: %zu  %s\n",
               models[m], K, B, accum, B, micro, K * B, whole, ok ? "ok" : "FAIL");
        failures += !ok;
#endif
    }
    printf("%s\n", failures ? "accumulation / loss scaling FAILED" : "accumulation and loss scaling hold");
    return failures ? 1 : 0;
}
