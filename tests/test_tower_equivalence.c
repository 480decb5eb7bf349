/* test_tower_equivalence.c — the core invariant of the tower pattern:
 * N towers of batch B, their gradients averaged by the parameter server,
 * update the variables exactly as 1 tower of batch N x B does (relative
 * difference at most 1e-5), for N = 1..4, both models, both optimizers.
 *
 * It drives the real parts: tower_group_step (tower threads, CPU backend),
 * ps_average_grads and ps_apply_gradients, two steps so that the momentum
 * slots take part.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/ps.h"
#include "tower/tower.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float uniform01(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) * (1.0 / 16777216.0));
}

/* Run `steps` steps of n_towers towers of batch B on the same global data;
 * return the final master variables (malloc'ed). */
static float *train(const ModelSpec *spec, const PsConfig *pc, int n_towers, int B, const float *x,
                    const int32_t *labels, int steps) {
    ParamServer *ps = ps_create(spec, n_towers, pc, host_alloc_default(), 42);
    if (!ps) {
        fprintf(stderr, "ps_create failed\n");
        exit(1);
    }
    TowerGroupConfig tc;
    memset(&tc, 0, sizeof tc);
    tc.backend = &tower_backend_cpu;
    tc.n_towers = n_towers;
    tc.max_batch = B;
    for (int t = 0; t < n_towers; t++) tc.n_threads[t] = 1;
    char err[512];
    TowerGroup *g = tower_group_create(&tc, spec, ps->tower_grads, err, sizeof err);
    if (!g) {
        fprintf(stderr, "tower_group_create: %s\n", err);
        exit(1);
    }
    int offset[TOWER_MAX_TOWERS], n[TOWER_MAX_TOWERS];
    for (int t = 0; t < n_towers; t++) {
        offset[t] = t * B;
        n[t] = B;
    }
    for (int s = 0; s < steps; s++) {
        if (tower_group_step(g, ps->params, x, labels, offset, n, err, sizeof err) != 0) {
            fprintf(stderr, "tower_group_step: %s\n", err);
            exit(1);
        }
        ps_average_grads(ps);
        ps_apply_gradients(ps);
    }
    float *out = malloc(spec->n_params * sizeof(float));
    memcpy(out, ps->params, spec->n_params * sizeof(float));
    tower_group_free(g);
    ps_free(ps);
    return out;
}

/* Largest (or, with smallest, smallest) normwise relative difference over
 * the variables, ||a - b|| / ||a||, and the variable where it is. */
static double var_rel_diff(const ModelSpec *spec, const float *a, const float *b, int smallest, const char **worst) {
    double worst_rel = smallest ? INFINITY : 0.0;
    for (int v = 0; v < spec->n_vars; v++) {
        const ModelVar *var = &spec->vars[v];
        double d2 = 0.0, a2 = 0.0;
        for (size_t i = 0; i < var->n_floats; i++) {
            double d = (double)a[var->offset + i] - (double)b[var->offset + i];
            d2 += d * d;
            a2 += (double)a[var->offset + i] * a[var->offset + i];
        }
        double rel = sqrt(d2) / (sqrt(a2) + 1e-30);
        if (smallest ? rel < worst_rel : rel > worst_rel) {
            worst_rel = rel;
            *worst = var->name;
        }
    }
    return worst_rel;
}

int main(void) {
    const struct { const char *name; int H, W, C; } models[] = {{"mnist", 28, 28, 1}, {"cifar10", 24, 24, 3}};
    const int B = 3, steps = 2, max_towers = 4;
    int failures = 0;
    for (int m = 0; m < 2; m++) {
        ModelSpec spec;
        char err[256];
        if (model_spec_init(&spec, models[m].name, models[m].H, models[m].W, models[m].C, 10, err, sizeof err)) {
            fprintf(stderr, "model_spec_init: %s\n", err);
            return 1;
        }
        size_t example_n = (size_t)spec.H * spec.W * spec.C;
        size_t total = (size_t)max_towers * B;
        float *x = malloc(total * example_n * sizeof(float));
        int32_t *labels = malloc(total * sizeof(int32_t));
        for (size_t i = 0; i < total * example_n; i++) x[i] = uniform01() - 0.5f;
        for (size_t i = 0; i < total; i++) labels[i] = (int32_t)(uniform01() * 10) % 10;
        for (int o = 0; o < 2; o++) {
            PsConfig pc;
            ps_config_defaults(&pc);
            pc.opt.kind = o == 0 ? OPT_SGD : OPT_MOMENTUM;
            pc.lr.initial_lr = 0.3f;
            ParamServer *init = ps_create(&spec, 1, &pc, host_alloc_default(), 42);
            for (int n = 1; n <= max_towers; n++) {
                float *towers = train(&spec, &pc, n, B, x, labels, steps);
                float *single = train(&spec, &pc, 1, n * B, x, labels, steps);
                const char *worst = "", *moved_worst = "";
                double rel = var_rel_diff(&spec, single, towers, 0, &worst);
                double moved = var_rel_diff(&spec, single, init->params, 1, &moved_worst);
                int ok = rel <= 1e-5 && moved > 1e-4; /* every variable moved well beyond the tolerance */
                printf("%-7s %-8s %d tower(s) x batch %d vs 1 x %d: max relative difference %.3g (%s); the update moved every variable by at least %.3g (%s)  %s\n",
                       models[m].name, o == 0 ? "sgd" : "momentum", n, B, n * B, rel, worst, moved, moved_worst,
                       ok ? "ok" : "FAIL");
                failures += !ok;
                free(towers);
                free(single);
            }
            ps_free(init);
        }
        free(x);
        free(labels);
    }
    printf("%s\n", failures ? "tower equivalence FAILED" : "tower equivalence holds");
    return failures ? 1 : 0;
}
