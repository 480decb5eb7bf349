/* test_model_threads.c — several tower-like pthreads running the models at
 * once, each on its own ModelActs, must get exactly what one thread gets
 * alone; and the OpenMP team size must not change the result beyond
 * rounding.
 *
 * Where it sits: ctest (CPU).  This is the use tower/ makes of model/:
 * one ModelActs per tower thread, omp_set_num_threads per thread to split
 * the cores, model_forward/model_backward called concurrently.  A global
 * mutable variable anywhere in model/ would show up here as a mismatch.
 */
#include "gradcheck.h"
#include "model/model.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_TOWERS 3
#define STEPS 3

typedef struct {
    const ModelSpec *spec;
    const float *params;
    const float *x;           /* (B, H, W, C) this tower's shard */
    const int32_t *labels;    /* (B) */
    int B, omp_threads;
    float loss[STEPS];
    float *dparams;           /* (n_params) result of the last step */
    int ok;
} Tower;

static void *run_tower(void *arg) {
    Tower *t = arg;
    omp_set_num_threads(t->omp_threads);
    ModelActs *acts = model_acts_create(t->spec, t->B);
    t->ok = acts != NULL;
    if (!acts) return NULL;
    for (int s = 0; s < STEPS; s++) {
        t->loss[s] = model_forward(NULL, NULL, acts, t->x, t->labels, t->params, t->B);
        memset(t->dparams, 0, sizeof(float) * t->spec->n_params); /* backward ADDS */
        model_backward(t->dparams, acts, t->params);
    }
    model_acts_free(acts);
    return NULL;
}

static int check(const char *name, int H, int W, int C) {
    char err[256];
    ModelSpec spec;
    if (model_spec_init(&spec, name, H, W, C, 10, err, sizeof err) != 0) {
        printf("FAIL: %s\n", err);
        return 1;
    }
    const int B = 6;
    const size_t x_n = (size_t)B * H * W * C;
    float *params = malloc(sizeof(float) * spec.n_params);
    model_init_params(params, &spec, 5);
    Tower alone[N_TOWERS], together[N_TOWERS];
    float *xs[N_TOWERS];
    int32_t labels[N_TOWERS][6];
    for (int i = 0; i < N_TOWERS; i++) {
        xs[i] = malloc(sizeof(float) * x_n);
        gradcheck_fill_uniform(xs[i], x_n, -1, 1, 100 + i);
        for (int b = 0; b < B; b++) labels[i][b] = (b + 3 * i) % 10;
        Tower t = {&spec, params, xs[i], labels[i], B, 1, {0}, NULL, 0};
        alone[i] = together[i] = t;
        alone[i].dparams = malloc(sizeof(float) * spec.n_params);
        together[i].dparams = malloc(sizeof(float) * spec.n_params);
    }
    /* One at a time, then all at once. */
    for (int i = 0; i < N_TOWERS; i++) {
        pthread_t th;
        pthread_create(&th, NULL, run_tower, &alone[i]);
        pthread_join(th, NULL);
    }
    pthread_t th[N_TOWERS];
    for (int i = 0; i < N_TOWERS; i++) pthread_create(&th[i], NULL, run_tower, &together[i]);
    for (int i = 0; i < N_TOWERS; i++) pthread_join(th[i], NULL);
    int fails = 0;
    for (int i = 0; i < N_TOWERS; i++) {
        int same = alone[i].ok && together[i].ok &&
                   memcmp(alone[i].loss, together[i].loss, sizeof alone[i].loss) == 0 &&
                   memcmp(alone[i].dparams, together[i].dparams, sizeof(float) * spec.n_params) == 0;
        /* Repeated steps on one ModelActs give the same loss each time. */
        same &= alone[i].loss[0] == alone[i].loss[STEPS - 1];
        if (!same) {
            printf("FAIL: %s tower %d: concurrent run differs from the run alone\n", name, i);
            fails++;
        }
    }
    /* Two OpenMP threads on one tower: the same up to summation order. */
    Tower two = alone[0];
    two.omp_threads = 2;
    two.dparams = malloc(sizeof(float) * spec.n_params);
    pthread_t t2;
    pthread_create(&t2, NULL, run_tower, &two);
    pthread_join(t2, NULL);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < spec.n_params; i++) {
        worst = fmax(worst, fabs(two.dparams[i] - alone[0].dparams[i]));
        scale = fmax(scale, fabs(alone[0].dparams[i]));
    }
    if (!two.ok || fabs(two.loss[0] - alone[0].loss[0]) > 1e-6 * fabs(alone[0].loss[0]) || worst > 1e-5 * scale) {
        printf("FAIL: %s: 2 OpenMP threads vs 1: loss %.8g vs %.8g, max gradient difference %g (scale %g)\n", name,
               two.loss[0], alone[0].loss[0], worst, scale);
        fails++;
    }
    printf("%s: %d towers concurrent == alone; 2 threads vs 1: max |dgrad| %.3g of %.3g\n", name, N_TOWERS, worst,
           scale);
    free(two.dparams);
    for (int i = 0; i < N_TOWERS; i++) {
        free(xs[i]);
        free(alone[i].dparams);
        free(together[i].dparams);
    }
    free(params);
    return fails;
}

int main(void) {
    int fails = check("cifar10", 24, 24, 3) + check("mnist", 28, 28, 1);
    if (fails) {
        printf("%d thread checks FAILED\n", fails);
        return 1;
    }
    printf("all thread checks passed\n");
    return 0;
}
