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
 * one sum over K x B examples divided once.  It is: the whole model's
 * normwise relative difference and the logged losses' within 1e-6, and
 * every variable's within 2e-5 (the worst is conv1/biases: its gradient is
 * a sum over every position that mostly cancels, so its own norm is small;
 * about 3e-6 for cifar10 with the loops, 8e-6 to 1.1e-5 with the conv2s
 * on model/winograd.c's F(4x4, 5x5), whose rounding is coarser).  An uneven
 * split can cross a kink (a ReLU or max-pool choice within rounding of a
 * tie) and differ by 1e-3 in conv1/biases from there: 5,1 did for mnist's
 * step 2 with the loops, 4,2 (and its mirror 2,4) with F(4x4, 5x5); the
 * uneven case uses 1,5.
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

/* Open, run `steps` steps keeping the losses (losses[steps]), collect, close. */
static RunResult run_with_losses(const TrainerOptions *o, int steps, float *losses) {
    Trainer *tr = modes_open_or_die(o);
    char err[1024];
    for (int s = 0; s < steps; s++) {
        if (trainer_step(tr, &losses[s], err, sizeof err) != 1) {
            fprintf(stderr, "trainer_step %d (%s, %d towers, accum %d, %s): %s\n", s + 1, trainer_mode_name(tr->mode),
                    tr->n_towers, o->accum_steps, o->loss_scaling, err);
            exit(1);
        }
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

static int failures = 0;

/* b against a: equal (must_differ 0) when the whole model's relative difference and the losses' are
 * within MODEL_TOL and every variable's within VAR_TOL; different (must_differ 1) when some variable is more
 * than 1e-3 apart.  Prints one line. */
static void compare(const char *what, const ModelSpec *spec, const RunResult *a, const float *loss_a,
                    const RunResult *b, const float *loss_b, int must_differ) {
    const char *worst = "";
    const double var_rel = modes_var_rel_diff(spec, a->params, b->params, 0, &worst);
    const double model_rel = model_rel_diff(spec->n_params, a->params, b->params);
    const double loss_rel = loss_rel_diff(loss_a, loss_b, STEPS);
    const int ok = must_differ ? var_rel > 1e-3 : model_rel <= MODEL_TOL && loss_rel <= MODEL_TOL && var_rel <= VAR_TOL;
    printf("%-66s model %.2g, worst variable %.2g (%s), losses %.2g%s  %s\n", what, model_rel, var_rel, worst,
           loss_rel, must_differ ? " (must differ)" : "", ok ? "ok" : "FAIL");
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
            RunResult init = run_with_losses(&o, 0, NULL);
            ModelSpec spec = modes_last_spec();
            char what[160];
            float loss_a[STEPS], loss_b[STEPS];

            /* 1. K micro-batches of B == one of K x B, 2 towers. */
            o.num_towers = 2;
            o.batch_size = B;
            o.accum_steps = K;
            RunResult accum = run_with_losses(&o, STEPS, loss_a);
            o.batch_size = K * B;
            o.accum_steps = 1;
            RunResult whole = run_with_losses(&o, STEPS, loss_b);
            snprintf(what, sizeof what, "%s %s: 2 towers x %d micro-batches of %d vs 2 x %d", models[m], modes[md], K,
                     B, K * B);
            compare(what, &spec, &whole, loss_b, &accum, loss_a, 0);
            const char *least = "";
            const double moved = modes_var_rel_diff(&spec, whole.params, init.params, 1, &least);
            printf("%s %s: the steps moved every variable by at least %.2g (%s)  %s\n", models[m], modes[md], moved,
                   least, moved > 1e-4 ? "ok" : "FAIL");
            failures += !(moved > 1e-4);
            modes_free_result(&accum);
            modes_free_result(&whole);

            /* 2. Equal shards: global_batch is bitwise tower_mean. */
            o.batch_size = B;
            o.loss_scaling = "global_batch";
            RunResult gb = run_with_losses(&o, STEPS, loss_a);
            o.loss_scaling = "tower_mean";
            RunResult tm = run_with_losses(&o, STEPS, loss_b);
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
            RunResult uneven = run_with_losses(&o, STEPS, loss_a);
            o.num_towers = 1;
            o.shard_sizes = "";
            o.batch_size = 6;
            RunResult one = run_with_losses(&o, STEPS, loss_b);
            snprintf(what, sizeof what, "%s %s: shards 1,5 global_batch vs 1 tower of 6", models[m], modes[md]);
            compare(what, &spec, &one, loss_b, &uneven, loss_a, 0);
            o.num_towers = 2;
            o.shard_sizes = "1,5";
            o.loss_scaling = "tower_mean";
            RunResult uneven_tm = run_with_losses(&o, STEPS, loss_a);
            snprintf(what, sizeof what, "%s %s: shards 1,5 tower_mean vs 1 tower of 6", models[m], modes[md]);
            compare(what, &spec, &one, loss_b, &uneven_tm, loss_a, 1);
            modes_free_result(&uneven);
            modes_free_result(&one);
            modes_free_result(&uneven_tm);

            /* 3b. Both: 2 micro-batches of shards 1,5 under global_batch == one tower of 12. */
            o.loss_scaling = "global_batch";
            o.accum_steps = 2;
            RunResult both = run_with_losses(&o, STEPS, loss_a);
            o.num_towers = 1;
            o.shard_sizes = "";
            o.batch_size = 12;
            o.accum_steps = 1;
            RunResult one12 = run_with_losses(&o, STEPS, loss_b);
            snprintf(what, sizeof what, "%s %s: 2 micro-batches of shards 1,5 global_batch vs 1 x 12", models[m],
                     modes[md]);
            compare(what, &spec, &one12, loss_b, &both, loss_a, 0);
            modes_free_result(&both);
            modes_free_result(&one12);
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
