/* test_gpu_overlap.c — the overlapped copies (the default since
 * 2026-11-27; TOWER_GPU_OVERLAP=0 turns them off; tower/tower_cuda.c,
 * model_cuda.h) change nothing but the time: the same training with and
 * without them gives the same variables, moving averages and losses bit
 * for bit.
 *
 * Where it sits: label `gpu`; skipped (77) without a GPU.  Each case runs
 * the trainer's own step (tests/modes_common.h) twice on GPU towers, with
 * TOWER_GPU_OVERLAP=0 and then unset before the trainer opens (the towers
 * read it at creation), --deterministic so both runs take the same
 * algorithms, 4 steps so that the gradient's chunked copy-out (from a
 * tower's second step on) is in three of them:
 *   - mnist, cifar10 (weight decay: the node-by-node L2 gradient), resnet20
 *     (batch norm: moving statistics through update_moving) and
 *     mobilenet_v2, in ps_cpu and replicated_host, 1 and 2 towers on GPU 0;
 *   - --accum_steps 2 (compute sends the gradient after each micro-batch:
 *     the last must land last; scale_grads' 1/2 after compute: the full copy
 *     again) and --loss_scaling global_batch with unequal --shard_sizes (each
 *     tower's weighted output gradient, TowerStep.loss_weight).
 * It also checks that the switch takes: a tower created by default
 * reports its chunks (describe_algorithms' line) and one created with
 * TOWER_GPU_OVERLAP=0 does not, and that the chunks cover the model
 * (model/graph.c's graph_var_chunks, tested on every network by
 * test_model_nets).
 * A lost or stale chunk (a gradient copied before backward finished with
 * it, a copy-in that forward did not wait for) changes the variables.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/modes_common.h"
#include "tests/test_gpu_common.h"

/* Open, run `steps` steps keeping the losses, collect, close. */
static RunResult run(const TrainerOptions *o, int steps, float *losses) {
    Trainer *tr = modes_open_or_die(o);
    char err[1024];
    for (int s = 0; s < steps; s++)
        if (trainer_step(tr, &losses[s], err, sizeof err) != 1) {
            fprintf(stderr, "trainer_step %d (%s, %d towers): %s\n", s + 1, trainer_mode_name(tr->mode), tr->n_towers,
                    err);
            exit(1);
        }
    RunResult r = modes_collect(tr);
    trainer_close(tr, NULL, 0);
    return r;
}

/* One case: with TOWER_GPU_OVERLAP=0, then with the default (overlapped);
 * 0 when bitwise equal. */
static int compare(const char *what, const TrainerOptions *o) {
    enum { STEPS = 4 };
    float loss_off[STEPS], loss_on[STEPS];
    setenv("TOWER_GPU_OVERLAP", "0", 1);
    RunResult off = run(o, STEPS, loss_off);
    unsetenv("TOWER_GPU_OVERLAP");
    RunResult on = run(o, STEPS, loss_on);
    const ModelSpec spec = modes_last_spec();
    const size_t n_bytes = spec.n_params * sizeof(float);
    const int same = memcmp(off.params, on.params, n_bytes) == 0 && memcmp(off.ema, on.ema, n_bytes) == 0 &&
                     memcmp(loss_off, loss_on, sizeof loss_off) == 0;
    const char *where = "";
    const double rel = same ? 0.0 : modes_var_rel_diff(&spec, off.params, on.params, 0, &where);
    printf("%-58s %s", what, same ? "bitwise equal: ok\n" : "DIFFER");
    if (!same) printf(" (largest relative difference %.3g in %s; last loss %.9g against %.9g): FAIL\n", rel, where,
                      (double)loss_off[STEPS - 1], (double)loss_on[STEPS - 1]);
    modes_free_result(&off);
    modes_free_result(&on);
    return same ? 0 : 1;
}

/* A tower made by default says so in its algorithms line, one made with TOWER_GPU_OVERLAP=0 does not. */
static int check_switch(void) {
    char err[512];
    ModelSpec spec;
    if (model_spec_init(&spec, "mnist", 28, 28, 1, 10, err, sizeof err) != 0) {
        printf("model_spec_init: %s: FAIL\n", err);
        return 1;
    }
    int fails = 0;
    for (int want = 0; want < 2; want++) {
        if (want) unsetenv("TOWER_GPU_OVERLAP");
        else setenv("TOWER_GPU_OVERLAP", "0", 1);
        void *t = tower_backend_cuda.tower_create(&spec, 0, 8, 1, NULL, err, sizeof err);
        unsetenv("TOWER_GPU_OVERLAP");
        if (!t) {
            printf("tower_create: %s: FAIL\n", err);
            return fails + 1;
        }
        char algorithms[32768];
        tower_backend_cuda.describe_algorithms(t, algorithms, sizeof algorithms);
        const int got = strstr(algorithms, "overlapped copies") != NULL;
        printf("tower %s: overlapped copies %s: %s\n", want ? "by default" : "with TOWER_GPU_OVERLAP=0",
               got ? "on" : "off", got == want ? "ok" : "FAIL");
        fails += got != want;
        tower_backend_cuda.tower_free(t);
    }
    return fails;
}

/* GPU towers on GPU 0 in mode `mode_name`, momentum at 0.05, --deterministic. */
static void case_options(TrainerOptions *o, const char *model, const char *mode_name, int towers, int batch) {
    char err[256];
    TrainerMode mode;
    modes_equivalence_options(o, model, "gpu", "momentum", 0.05f, batch);
    o->deterministic = 1;
    o->gpus = "0";
    o->num_towers = towers;
    if (trainer_mode_from_name(mode_name, &mode, err, sizeof err) != 0) {
        printf("%s: FAIL\n", err);
        exit(1);
    }
    trainer_mode_set_flags(mode, o);
}

int main(void) {
    gpu_test_require_gpu();
    char err[256];
    if (tower_backend_cuda.device_count(err, sizeof err) < 1) gpu_test_skip(err);
    int failures = check_switch();
    const char *const models[] = {"mnist", "cifar10", "resnet20", "mobilenet_v2"};
    const char *const modes[] = {"ps_cpu", "replicated_host"};
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++)
        for (int md = 0; md < 2; md++)
            for (int towers = 1; towers <= 2; towers++) {
                TrainerOptions o;
                case_options(&o, models[m], modes[md], towers, 4);
                char what[160];
                snprintf(what, sizeof what, "%s %s, %d tower(s) of 4, 4 steps:", models[m], modes[md], towers);
                failures += compare(what, &o);
            }
    for (int md = 0; md < 2; md++) {
        TrainerOptions o;
        case_options(&o, "cifar10", modes[md], 2, 3);
        char what[160];
        o.accum_steps = 2;
        snprintf(what, sizeof what, "cifar10 %s, 2 towers x 2 micro-batches of 3:", modes[md]);
        failures += compare(what, &o);
        o.accum_steps = 1;
        o.shard_sizes = "4,2";
        o.loss_scaling = "global_batch";
        snprintf(what, sizeof what, "cifar10 %s, shards 4 and 2, global_batch scaling:", modes[md]);
        failures += compare(what, &o);
    }
    if (failures) {
        printf("FAIL: %d case(s)\n", failures);
        return 1;
    }
    printf("overlapped copies: every case bitwise equal to the plain copies\n");
    return 0;
}
