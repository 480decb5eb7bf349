/* modes_common.h — the one "train N steps in mode M and return the
 * variables" harness: open a trainer on synthetic data, run steps, keep the
 * trained variables and moving averages, and compare two sets of variables
 * variable by variable (the one relative-difference helper of tests/).
 *
 * Where it sits: included by every equivalence test (test_tower_equivalence,
 * test_modes_equivalence, test_gpu_tower_equivalence, test_gpu_modes), so
 * that all drive the trainer's own step (train/trainer.h) the same way and
 * measure differences with the same norm.  Every failure to open or step
 * exits 1 with one line saying what and where.
 */
#ifndef TOWER_TESTS_MODES_COMMON_H
#define TOWER_TESTS_MODES_COMMON_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/trainer.h"

typedef struct {
    float *params;   /* (n_params) the trained variables */
    float *ema;      /* (n_params) their moving averages */
    int replicas_equal; /* replicated_host: every tower's host replica is bitwise tower 0's (1 otherwise) */
} RunResult;

/* Synthetic data, n_towers towers of `batch`, learning rate 0.1, seed 5;
 * every other option at trainer_options_defaults' value. */
static inline void modes_base_options(TrainerOptions *o, const char *model, const char *device, int n_towers, int batch) {
    trainer_options_defaults(o);
    o->model = model;
    o->device = device;
    o->synthetic = 1;
    o->num_towers = n_towers;
    o->batch_size = batch;
    o->learning_rate = 0.1f;
    o->seed = 5;
}

/* The tower-equivalence runs: `optimizer` at learning rate lr, seed 42,
 * one tower of batch B on `device` (the caller varies towers and batch). */
static inline void modes_equivalence_options(TrainerOptions *o, const char *model, const char *device,
                                             const char *optimizer, float lr, int B) {
    modes_base_options(o, model, device, 1, B);
    o->optimizer = optimizer;
    o->learning_rate = lr;
    o->seed = 42;
}

/* The trainer modes_open_or_die opens (static: one open at a time), and the
 * model it last trained (valid after its close, for modes_var_rel_diff). */
static Trainer modes_trainer;
static ModelSpec modes_spec;
static inline ModelSpec modes_last_spec(void) { return modes_spec; }

/* trainer_open, or exit 1 with its message. */
static inline Trainer *modes_open_or_die(const TrainerOptions *o) {
    Trainer *tr = &modes_trainer;
    char err[1024];
    if (trainer_open(tr, o, err, sizeof err) != 0) {
        fprintf(stderr, "trainer_open (%s, %s/%s/%s, %d towers): %s\n", o->model, o->variable_update,
                o->local_parameter_device, o->all_reduce, o->num_towers, err);
        exit(1);
    }
    modes_spec = tr->spec;
    return tr;
}

static inline void modes_steps_or_die(Trainer *tr, int steps) {
    char err[1024];
    for (int s = 0; s < steps; s++) {
        float loss = 0.0f;
        if (trainer_step(tr, &loss, err, sizeof err) != 1) {
            fprintf(stderr, "trainer_step %d (%s, %d towers): %s (loss %g)\n", s + 1, trainer_mode_name(tr->mode),
                    tr->n_towers, err, loss);
            exit(1);
        }
    }
}

/* The trained variables and moving averages (copied: they outlive the trainer). */
static inline RunResult modes_collect(Trainer *tr) {
    const size_t n = tr->spec.n_params;
    RunResult r = {malloc(n * sizeof(float)), malloc(n * sizeof(float)), 1};
    if (!r.params || !r.ema) {
        fprintf(stderr, "out of memory for %zu variables\n", n);
        exit(1);
    }
    memcpy(r.params, trainer_variables(tr), n * sizeof(float)); /* first: the GPU modes copy their state to the host */
    memcpy(r.ema, tr->ps->ema, n * sizeof(float));
    for (int t = 1; t < tr->ps->n_replicas; t++)
        if (memcmp(tr->ps->replica_params[t], tr->ps->replica_params[0], n * sizeof(float)) != 0) r.replicas_equal = 0;
    return r;
}

/* Open, run `steps` steps, collect, close. */
static inline RunResult modes_run(const TrainerOptions *o, int steps) {
    Trainer *tr = modes_open_or_die(o);
    modes_steps_or_die(tr, steps);
    RunResult r = modes_collect(tr);
    trainer_close(tr, NULL, 0);
    return r;
}

static inline void modes_free_result(RunResult *r) {
    free(r->params);
    free(r->ema);
    r->params = r->ema = NULL;
}

/* Largest (or, with smallest, smallest) normwise relative difference over
 * the variables, ||a - b|| / ||a||, and the variable where it is. */
static inline double modes_var_rel_diff(const ModelSpec *spec, const float *a, const float *b, int smallest,
                                 const char **where) {
    double worst = smallest ? INFINITY : 0.0;
    for (int v = 0; v < spec->n_vars; v++) {
        const ModelVar *var = &spec->vars[v];
        double d2 = 0.0, a2 = 0.0;
        for (size_t i = 0; i < var->n_floats; i++) {
            double d = (double)a[var->offset + i] - (double)b[var->offset + i];
            d2 += d * d;
            a2 += (double)a[var->offset + i] * a[var->offset + i];
        }
        double rel = isnan(d2) ? INFINITY : sqrt(d2) / (sqrt(a2) + 1e-30);
        if (smallest ? rel < worst : rel > worst) {
            worst = rel;
            *where = var->name;
        }
    }
    return worst;
}

#endif
