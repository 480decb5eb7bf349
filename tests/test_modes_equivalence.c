/* test_modes_equivalence.c — every variable placement mode this build can
 * run trains the same trajectory as parameter_server/cpu.
 *
 * It drives the trainer itself (trainer_open / trainer_step on synthetic
 * data: one seeded global batch every step), so the mode switch, the tower
 * hooks, the ring all-reduce and the per-tower updates are the real ones.
 * For both models, momentum 0.9 Nesterov, N = 1, 2, 3, 4 towers of batch 2,
 * 3 steps:
 *   - replicated/host with N towers vs parameter_server/cpu with N towers:
 *     largest normwise relative difference over the variables <= 1e-5, the
 *     same for the moving averages; and every variable moved well beyond
 *     that tolerance;
 *   - parameter_server/cpu with N towers vs 1 tower of batch 2N (the tower
 *     pattern's own invariant, through the trainer this time);
 *   - replicated: every tower's copy of the variables is bitwise the same;
 *   - replicated/mpi in one process (no mpirun: the gather is the local
 *     towers) is bitwise parameter_server/cpu, variables and moving
 *     averages (the same sum in tower order; tests/test_mpi_train.sh runs
 *     it across ranks);
 *   - the comparison can fail: replicated with a learning rate 0.1% higher
 *     must differ by more than the tolerance (checked at N = 3);
 *   - every other optimizer of the table (sgd, adam, adamw, rmsprop plain
 *     and centered with momentum), mnist with 3 towers: replicated/host
 *     against parameter_server/cpu within the tolerance, every variable
 *     moved, replicas bitwise equal;
 *   - replicated, with every optimizer: 2 steps, a checkpoint, --resume and
 *     1 more step give bitwise the 3-step variables; the same checkpoint
 *     resumed by parameter_server/cpu stays within the tolerance;
 *   - the GPU modes, without GPU towers, fail to open with one line saying so.
 * The GPU modes' own trajectories: tests/test_gpu_modes.c (label gpu).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/trainer.h"
#include "tests/modes_common.h"

#define TOLERANCE 1e-5
#define STEPS 3

/* CPU towers, whatever the machine has: this test is about the host modes. */
static void base_options(TrainerOptions *o, const char *model, int n_towers, int batch) {
    modes_base_options(o, model, "cpu", n_towers, batch);
}

static int check_models(const char *model, int H, int W, int C) {
    ModelSpec spec;
    char err[1024];
    if (model_spec_init(&spec, model, H, W, C, 10, err, sizeof err) != 0) {
        fprintf(stderr, "model_spec_init: %s\n", err);
        exit(1);
    }
    const int B = 2;
    int failures = 0;
    for (int n = 1; n <= 4; n++) {
        TrainerOptions o;
        base_options(&o, model, n, B);
        RunResult ps = modes_run(&o, STEPS);
        o.variable_update = "replicated";
        RunResult rep = modes_run(&o, STEPS);
        o.all_reduce = "mpi";
        RunResult mpi = modes_run(&o, STEPS);
        o.all_reduce = "auto";
        const size_t n_bytes = spec.n_params * sizeof(float);
        int mpi_bitwise = !memcmp(mpi.params, ps.params, n_bytes) && !memcmp(mpi.ema, ps.ema, n_bytes) && mpi.replicas_equal;
        o.learning_rate *= 1.001f;
        RunResult rep_off = n == 3 ? modes_run(&o, STEPS) : (RunResult){NULL, NULL, 1};
        base_options(&o, model, 1, n * B);
        RunResult single = modes_run(&o, STEPS);
        float *init = malloc(spec.n_params * sizeof(float));
        model_init_params(init, &spec, (uint64_t)o.seed); /* what trainer_open starts from */

        const char *w_rep = "", *w_ema = "", *w_single = "", *w_off = "(checked at N = 3 only)", *w_moved = "";
        double d_rep = modes_var_rel_diff(&spec, ps.params, rep.params, 0, &w_rep);
        double d_ema = modes_var_rel_diff(&spec, ps.ema, rep.ema, 0, &w_ema);
        double d_single = modes_var_rel_diff(&spec, single.params, ps.params, 0, &w_single);
        double d_off = rep_off.params ? modes_var_rel_diff(&spec, ps.params, rep_off.params, 0, &w_off) : INFINITY;
        double moved = modes_var_rel_diff(&spec, ps.params, init, 1, &w_moved);
        int ok = d_rep <= TOLERANCE && d_ema <= TOLERANCE && d_single <= TOLERANCE && d_off > TOLERANCE &&
                 moved > 100 * TOLERANCE && rep.replicas_equal && mpi_bitwise;
        printf("%-7s %d tower(s) x %d, %d steps: replicated/host vs parameter_server/cpu %.3g (%s), moving averages %.3g (%s); "
               "parameter_server/cpu vs 1 x %d %.3g (%s); replicas bitwise equal: %s; replicated/mpi bitwise parameter_server/cpu: %s; lr +0.1%% differs by %.3g %s; "
               "every variable moved >= %.3g (%s)  %s\n",
               model, n, B, STEPS, d_rep, w_rep, d_ema, w_ema, n * B, d_single, w_single,
               rep.replicas_equal ? "yes" : "NO", mpi_bitwise ? "yes" : "NO", d_off, w_off, moved, w_moved, ok ? "ok" : "FAIL");
        failures += !ok;
        free(init);
        modes_free_result(&ps);
        modes_free_result(&rep);
        modes_free_result(&mpi);
        modes_free_result(&rep_off);
        modes_free_result(&single);
    }
    return failures;
}

/* An optimizer of the table and its options for the checks below. */
typedef struct {
    const char *label, *optimizer;
    float lr;
    int centered;
    float rms_momentum;
} OptChoice;

static void apply_choice(TrainerOptions *o, const OptChoice *c) {
    o->optimizer = c->optimizer;
    o->learning_rate = c->lr;
    o->rmsprop_centered = c->centered;
    o->rmsprop_momentum = c->rms_momentum;
    o->weight_decay = 0.1f; /* adamw: large enough to matter in 3 steps */
}

/* Every optimizer, mnist, 3 towers x 2: replicated/host against
 * parameter_server/cpu (variables and moving averages), every variable
 * moved by 10x the tolerance (RMSProp's first steps are small: its mean
 * squares start at 1), the replicas bitwise equal. */
static int check_optimizer(const OptChoice *c) {
    ModelSpec spec;
    char err[1024];
    if (model_spec_init(&spec, "mnist", 28, 28, 1, 10, err, sizeof err) != 0) {
        fprintf(stderr, "model_spec_init: %s\n", err);
        exit(1);
    }
    TrainerOptions o;
    base_options(&o, "mnist", 3, 2);
    apply_choice(&o, c);
    RunResult ps = modes_run(&o, STEPS);
    o.variable_update = "replicated";
    RunResult rep = modes_run(&o, STEPS);
    float *init = malloc(spec.n_params * sizeof(float));
    model_init_params(init, &spec, (uint64_t)o.seed);
    const char *w_rep = "", *w_ema = "", *w_moved = "";
    double d_rep = modes_var_rel_diff(&spec, ps.params, rep.params, 0, &w_rep);
    double d_ema = modes_var_rel_diff(&spec, ps.ema, rep.ema, 0, &w_ema);
    double moved = modes_var_rel_diff(&spec, ps.params, init, 1, &w_moved);
    int ok = d_rep <= TOLERANCE && d_ema <= TOLERANCE && moved > 10 * TOLERANCE && rep.replicas_equal;
    printf("%-17s mnist 3 towers x 2, %d steps: replicated/host vs parameter_server/cpu %.3g (%s), moving averages %.3g "
           "(%s); replicas bitwise equal: %s; every variable moved >= %.3g (%s)  %s\n", c->label, STEPS, d_rep, w_rep,
           d_ema, w_ema, rep.replicas_equal ? "yes" : "NO", moved, w_moved, ok ? "ok" : "FAIL");
    free(init);
    modes_free_result(&ps);
    modes_free_result(&rep);
    return !ok;
}

/* replicated: 2 steps + checkpoint + resume + 1 step == 3 steps, bitwise. */
static int check_resume(const OptChoice *c) {
    char dir[] = "/tmp/test_modes_resume_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    TrainerOptions o;
    base_options(&o, "mnist", 3, 2);
    apply_choice(&o, c);
    o.variable_update = "replicated";
    o.train_dir = dir;
    RunResult straight = modes_run(&o, STEPS);
    Trainer *tr = modes_open_or_die(&o);
    modes_steps_or_die(tr, STEPS - 1);
    char err[1024];
    if (trainer_save(tr, err, sizeof err) != 0) {
        fprintf(stderr, "trainer_save: %s\n", err);
        exit(1);
    }
    trainer_close(tr, NULL, 0);
    o.resume = 1;
    tr = modes_open_or_die(&o);
    long resumed_at = tr->ps->global_step;
    modes_steps_or_die(tr, 1);
    RunResult resumed = modes_collect(tr);
    const size_t n_bytes = tr->spec.n_params * sizeof(float);
    ModelSpec spec = tr->spec;
    trainer_close(tr, NULL, 0);
    int ok = resumed_at == STEPS - 1 && memcmp(straight.params, resumed.params, n_bytes) == 0 &&
             memcmp(straight.ema, resumed.ema, n_bytes) == 0 && resumed.replicas_equal;
    printf("%s: replicated/host, 3 towers: %d steps + checkpoint + resume (at step %ld) + 1 step %s %d steps straight  %s\n",
           c->label, STEPS - 1, resumed_at, ok ? "is bitwise" : "DIFFERS FROM", STEPS, ok ? "ok" : "FAIL");
    /* The same checkpoint resumed by the parameter server: the formats are one. */
    o.variable_update = "parameter_server";
    tr = modes_open_or_die(&o);
    modes_steps_or_die(tr, 1);
    RunResult as_ps = modes_collect(tr);
    trainer_close(tr, NULL, 0);
    const char *where = "";
    double d = modes_var_rel_diff(&spec, straight.params, as_ps.params, 0, &where);
    int ok_ps = d <= TOLERANCE;
    printf("the replicated checkpoint resumed as parameter_server/cpu for 1 step: %.3g (%s) from the straight "
           "replicated run  %s\n", d, where, ok_ps ? "ok" : "FAIL");
    ok = ok && ok_ps;
    modes_free_result(&straight);
    modes_free_result(&resumed);
    modes_free_result(&as_ps);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return !ok;
}

/* The GPU modes fail to open on CPU towers, with one line that says what they need
 * (GPU towers; or, in a build without CUDA or NCCL, that build). */
static int check_unavailable(void) {
    int failures = 0;
    const struct { const char *vu, *lpd, *ar; } gpu_modes[] = {{"parameter_server", "gpu", "auto"}, {"replicated", "cpu", "nccl"}};
    for (int i = 0; i < 2; i++) {
        TrainerOptions o;
        base_options(&o, "mnist", 2, 2);
        o.variable_update = gpu_modes[i].vu;
        o.local_parameter_device = gpu_modes[i].lpd;
        o.all_reduce = gpu_modes[i].ar;
        Trainer tr;
        char err[1024] = "";
        int rc = trainer_open(&tr, &o, err, sizeof err);
        int ok = rc != 0 && (strstr(err, "needs GPU towers") || strstr(err, "needs NCCL")) && !strchr(err, '\n');
        printf("%s/%s/%s without GPU towers: %s  %s\n", o.variable_update, o.local_parameter_device, o.all_reduce,
               err, ok ? "ok" : "FAIL");
        failures += !ok;
        if (rc == 0) trainer_close(&tr, NULL, 0);
    }
    TrainerOptions o;
    base_options(&o, "mnist", 2, 2);
    o.variable_update = "mirrored";
    Trainer tr;
    char err[1024] = "";
    int rc = trainer_open(&tr, &o, err, sizeof err);
    int ok = rc != 0 && strstr(err, "--variable_update 'mirrored'");
    printf("--variable_update mirrored: %s  %s\n", err, ok ? "ok" : "FAIL");
    if (rc == 0) trainer_close(&tr, NULL, 0);
    return failures + !ok;
}

int main(void) {
    int failures = 0;
    failures += check_models("mnist", 28, 28, 1);
    failures += check_models("cifar10", 24, 24, 3);
    static const OptChoice choices[] = {
        {"momentum", "momentum", 0.1f, 0, 0.0f},          {"sgd", "sgd", 0.1f, 0, 0.0f},
        {"adam", "adam", 0.001f, 0, 0.0f},                {"adamw", "adamw", 0.001f, 0, 0.0f},
        {"rmsprop", "rmsprop", 0.1f, 0, 0.0f},            {"rmsprop centered", "rmsprop", 0.1f, 1, 0.5f},
    };
    for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++) {
        if (i > 0) failures += check_optimizer(&choices[i]); /* momentum: check_models above */
        failures += check_resume(&choices[i]);
    }
    failures += check_unavailable();
    printf("%s\n", failures ? "modes equivalence FAILED" : "every available mode trains the parameter server's trajectory");
    return failures ? 1 : 0;
}
