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
 *   - the comparison can fail: replicated with a learning rate 0.1% higher
 *     must differ by more than the tolerance (checked at N = 3);
 *   - replicated: 2 steps, a checkpoint, --resume and 1 more step give
 *     bitwise the 3-step variables; the same checkpoint resumed by
 *     parameter_server/cpu stays within the tolerance;
 *   - the GPU modes, without GPU towers, fail to open with one line saying so.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/trainer.h"

#define TOLERANCE 1e-5
#define STEPS 3

typedef struct {
    float *params;   /* (n_params) the trained variables */
    float *ema;      /* (n_params) their moving averages */
    int replicas_equal;
} RunResult;

static void base_options(TrainerOptions *o, const char *model, int n_towers, int batch) {
    trainer_options_defaults(o);
    o->model = model;
    o->synthetic = 1;
    o->num_towers = n_towers;
    o->batch_size = batch;
    o->learning_rate = 0.1f;
    o->seed = 5;
}

static Trainer *open_or_die(const TrainerOptions *o) {
    static Trainer tr;
    char err[1024];
    if (trainer_open(&tr, o, err, sizeof err) != 0) {
        fprintf(stderr, "trainer_open (%s, %s, %d towers): %s\n", o->model, o->variable_update, o->num_towers, err);
        exit(1);
    }
    return &tr;
}

static void steps_or_die(Trainer *tr, int steps) {
    char err[1024];
    for (int s = 0; s < steps; s++) {
        float loss;
        if (trainer_step(tr, &loss, err, sizeof err) != 1) {
            fprintf(stderr, "trainer_step %d: %s (loss %g)\n", s + 1, err, loss);
            exit(1);
        }
    }
}

static RunResult collect(Trainer *tr) {
    const size_t n = tr->spec.n_params;
    RunResult r = {malloc(n * sizeof(float)), malloc(n * sizeof(float)), 1};
    memcpy(r.params, trainer_variables(tr), n * sizeof(float));
    memcpy(r.ema, tr->ps->ema, n * sizeof(float));
    for (int t = 1; t < tr->ps->n_replicas; t++)
        if (memcmp(tr->ps->replica_params[t], tr->ps->replica_params[0], n * sizeof(float)) != 0) r.replicas_equal = 0;
    return r;
}

static RunResult run(const TrainerOptions *o, int steps) {
    Trainer *tr = open_or_die(o);
    steps_or_die(tr, steps);
    RunResult r = collect(tr);
    trainer_close(tr);
    return r;
}

static void free_result(RunResult *r) {
    free(r->params);
    free(r->ema);
}

/* Largest (or, with smallest, smallest) normwise relative difference over
 * the variables, ||a - b|| / ||a||, and the variable where it is. */
static double var_rel_diff(const ModelSpec *spec, const float *a, const float *b, int smallest, const char **where) {
    double worst = smallest ? INFINITY : 0.0;
    for (int v = 0; v < spec->n_vars; v++) {
        const ModelVar *var = &spec->vars[v];
        double d2 = 0.0, a2 = 0.0;
        for (size_t i = 0; i < var->n_floats; i++) {
            double d = (double)a[var->offset + i] - (double)b[var->offset + i];
            d2 += d * d;
            a2 += (double)a[var->offset + i] * a[var->offset + i];
        }
        double rel = sqrt(d2) / (sqrt(a2) + 1e-30);
        if (smallest ? rel < worst : rel > worst) {
            worst = rel;
            *where = var->name;
        }
    }
    return worst;
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
        RunResult ps = run(&o, STEPS);
        o.variable_update = "replicated";
        RunResult rep = run(&o, STEPS);
        o.learning_rate *= 1.001f;
        RunResult rep_off = n == 3 ? run(&o, STEPS) : (RunResult){NULL, NULL, 1};
        base_options(&o, model, 1, n * B);
        RunResult single = run(&o, STEPS);
        float *init = malloc(spec.n_params * sizeof(float));
        model_init_params(init, &spec, (uint64_t)o.seed); /* what trainer_open starts from */

        const char *w_rep = "", *w_ema = "", *w_single = "", *w_off = "(checked at N = 3 only)", *w_moved = "";
        double d_rep = var_rel_diff(&spec, ps.params, rep.params, 0, &w_rep);
        double d_ema = var_rel_diff(&spec, ps.ema, rep.ema, 0, &w_ema);
        double d_single = var_rel_diff(&spec, single.params, ps.params, 0, &w_single);
        double d_off = rep_off.params ? var_rel_diff(&spec, ps.params, rep_off.params, 0, &w_off) : INFINITY;
        double moved = var_rel_diff(&spec, ps.params, init, 1, &w_moved);
        int ok = d_rep <= TOLERANCE && d_ema <= TOLERANCE && d_single <= TOLERANCE && d_off > TOLERANCE &&
                 moved > 100 * TOLERANCE && rep.replicas_equal;
        printf("%-7s %d tower(s) x %d, %d steps: replicated/host vs parameter_server/cpu %.3g (%s), moving averages %.3g (%s); "
               "parameter_server/cpu vs 1 x %d %.3g (%s); replicas bitwise equal: %s; lr +0.1%% differs by %.3g %s; "
               "every variable moved >= %.3g (%s)  %s\n",
               model, n, B, STEPS, d_rep, w_rep, d_ema, w_ema, n * B, d_single, w_single,
               rep.replicas_equal ? "yes" : "NO", d_off, w_off, moved, w_moved, ok ? "ok" : "FAIL");
        failures += !ok;
        free(init);
        free_result(&ps);
        free_result(&rep);
        free_result(&rep_off);
        free_result(&single);
    }
    return failures;
}

/* replicated: 2 steps + checkpoint + resume + 1 step == 3 steps, bitwise. */
static int check_resume(void) {
    char dir[] = "/tmp/test_modes_resume_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    TrainerOptions o;
    base_options(&o, "mnist", 3, 2);
    o.variable_update = "replicated";
    o.train_dir = dir;
    RunResult straight = run(&o, STEPS);
    Trainer *tr = open_or_die(&o);
    steps_or_die(tr, STEPS - 1);
    char err[1024];
    if (trainer_save(tr, err, sizeof err) != 0) {
        fprintf(stderr, "trainer_save: %s\n", err);
        exit(1);
    }
    trainer_close(tr);
    o.resume = 1;
    tr = open_or_die(&o);
    long resumed_at = tr->ps->global_step;
    steps_or_die(tr, 1);
    RunResult resumed = collect(tr);
    const size_t n_bytes = tr->spec.n_params * sizeof(float);
    ModelSpec spec = tr->spec;
    trainer_close(tr);
    int ok = resumed_at == STEPS - 1 && memcmp(straight.params, resumed.params, n_bytes) == 0 &&
             memcmp(straight.ema, resumed.ema, n_bytes) == 0 && resumed.replicas_equal;
    printf("replicated/host, 3 towers: %d steps + checkpoint + resume (at step %ld) + 1 step %s %d steps straight  %s\n",
           STEPS - 1, resumed_at, ok ? "is bitwise" : "DIFFERS FROM", STEPS, ok ? "ok" : "FAIL");
    /* The same checkpoint resumed by the parameter server: the formats are one. */
    o.variable_update = "parameter_server";
    tr = open_or_die(&o);
    steps_or_die(tr, 1);
    RunResult as_ps = collect(tr);
    trainer_close(tr);
    const char *where = "";
    double d = var_rel_diff(&spec, straight.params, as_ps.params, 0, &where);
    int ok_ps = d <= TOLERANCE;
    printf("the replicated checkpoint resumed as parameter_server/cpu for 1 step: %.3g (%s) from the straight "
           "replicated run  %s\n", d, where, ok_ps ? "ok" : "FAIL");
    ok = ok && ok_ps;
    free_result(&straight);
    free_result(&resumed);
    free_result(&as_ps);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return !ok;
}

/* The GPU modes fail to open, with a line that says what they need. */
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
        int ok = rc != 0 && strstr(err, "is not implemented yet") && !strchr(err, '\n');
        printf("%s/%s/%s without GPU towers: %s  %s\n", o.variable_update, o.local_parameter_device, o.all_reduce,
               err, ok ? "ok" : "FAIL");
        failures += !ok;
        if (rc == 0) trainer_close(&tr);
    }
    TrainerOptions o;
    base_options(&o, "mnist", 2, 2);
    o.variable_update = "mirrored";
    Trainer tr;
    char err[1024] = "";
    int rc = trainer_open(&tr, &o, err, sizeof err);
    int ok = rc != 0 && strstr(err, "--variable_update 'mirrored'");
    printf("--variable_update mirrored: %s  %s\n", err, ok ? "ok" : "FAIL");
    if (rc == 0) trainer_close(&tr);
    return failures + !ok;
}

int main(void) {
    int failures = 0;
    failures += check_models("mnist", 28, 28, 1);
    failures += check_models("cifar10", 24, 24, 3);
    failures += check_resume();
    failures += check_unavailable();
    printf("%s\n", failures ? "modes equivalence FAILED" : "every available mode trains the parameter server's trajectory");
    return failures ? 1 : 0;
}
