/* tower.c — tower threads and the step hand-off (see tower.h).
 *
 * The parameter server thread publishes a step (a new go_generation), every
 * tower thread runs its step on its own device and increments n_done, and
 * the parameter server thread waits until n_done == n_towers.  Nothing here
 * averages or updates variables: that is ps/.
 */
#include "tower/tower.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double tower_now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const TowerBackend *tower_backend_find(const char *name) {
    if (!strcmp(name, "cpu")) return &tower_backend_cpu;
#ifdef TOWER_HAVE_CUDA
    if (!strcmp(name, "cuda") || !strcmp(name, "gpu")) return &tower_backend_cuda;
    if (!strcmp(name, "cuda-tf32")) return &tower_backend_cuda_tf32;
#endif
    return NULL;
}

/* The master variables -> the tower's own weights. */
static int ps_copy_params_to_tower(Tower *t) { return t->backend->copy_params_in(t->dev, t->params, t->err, sizeof t->err); }

/* The tower's shard of the staged batch -> the tower's device. */
static int tower_copy_shard_to_tower(Tower *t) { return t->backend->copy_shard_in(t->dev, t->x, t->labels, t->n, t->err, sizeof t->err); }

/* Forward and backward on the shard. */
static int tower_compute(Tower *t) { return t->backend->compute(t->dev, &t->loss, &t->accuracy, t->err, sizeof t->err); }

/* The tower's gradients -> its host gradient buffer, which the parameter server averages. */
static int tower_copy_grads_to_ps(Tower *t) { return t->backend->copy_grads_out(t->dev, t->err, sizeof t->err); }

static void tower_run_step(Tower *t, double go_time) {
    double t0 = tower_now_sec();
    t->times.wait_sec = t0 - go_time;
    t->status = -1;
    if (ps_copy_params_to_tower(t) || tower_copy_shard_to_tower(t)) return;
    double t1 = tower_now_sec();
    if (tower_compute(t)) return;
    double t2 = tower_now_sec();
    if (tower_copy_grads_to_ps(t)) return;
    double t3 = tower_now_sec();
    t->times.copy_in_sec = t1 - t0;
    t->times.compute_sec = t2 - t1;
    t->times.copy_out_sec = t3 - t2;
    t->status = 0;
}

static void *tower_thread_main(void *arg) {
    Tower *t = arg;
    TowerGroup *g = t->group;
    long seen = 0;
    for (;;) {
        pthread_mutex_lock(&g->mu);
        while (g->go_generation == seen) pthread_cond_wait(&g->go_cv, &g->mu);
        seen = g->go_generation;
        int quit = g->quit;
        double go_time = g->go_time;
        pthread_mutex_unlock(&g->mu);
        if (quit) return NULL;
        tower_run_step(t, go_time);
        pthread_mutex_lock(&g->mu);
        if (++g->n_done == g->n_towers) pthread_cond_signal(&g->done_cv);
        pthread_mutex_unlock(&g->mu);
    }
}

TowerGroup *tower_group_create(const TowerGroupConfig *cfg, const ModelSpec *spec,
                               float *const *tower_grads, char *err, size_t err_n_bytes) {
    if (cfg->n_towers < 1 || cfg->n_towers > TOWER_MAX_TOWERS) {
        snprintf(err, err_n_bytes, "number of towers must be in [1, %d], got %d", TOWER_MAX_TOWERS, cfg->n_towers);
        return NULL;
    }
    TowerGroup *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, err_n_bytes, "out of memory creating %d towers", cfg->n_towers);
        return NULL;
    }
    g->spec = spec;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->go_cv, NULL);
    pthread_cond_init(&g->done_cv, NULL);
    for (int i = 0; i < cfg->n_towers; i++) {
        Tower *t = &g->towers[i];
        t->group = g;
        t->index = i;
        t->device = cfg->devices[i];
        t->n_threads = cfg->n_threads[i] > 0 ? cfg->n_threads[i] : 1;
        t->backend = cfg->backend;
        char e[256];
        t->dev = cfg->backend->tower_create(spec, t->device, cfg->max_batch, t->n_threads, tower_grads[i], e, sizeof e);
        if (!t->dev) {
            snprintf(err, err_n_bytes, "tower %d on %s:%d: %s", i, cfg->backend->name, t->device, e);
            tower_group_free(g);
            return NULL;
        }
        if (pthread_create(&t->thread, NULL, tower_thread_main, t) != 0) {
            snprintf(err, err_n_bytes, "tower %d: cannot start its thread", i);
            cfg->backend->tower_free(t->dev);
            t->dev = NULL;
            tower_group_free(g);
            return NULL;
        }
        g->n_towers = i + 1;
    }
    return g;
}

int tower_group_step(TowerGroup *g, const float *params, const float *x, const int32_t *labels,
                     const int *shard_offset, const int *shard_n, char *err, size_t err_n_bytes) {
    const size_t example_n_floats = (size_t)g->spec->H * g->spec->W * g->spec->C;
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < g->n_towers; i++) {
        Tower *t = &g->towers[i];
        t->params = params;
        t->x = x + (size_t)shard_offset[i] * example_n_floats;
        t->labels = labels + shard_offset[i];
        t->n = shard_n[i];
    }
    g->n_done = 0;
    g->go_time = tower_now_sec();
    g->go_generation++;
    pthread_cond_broadcast(&g->go_cv);
    while (g->n_done < g->n_towers) pthread_cond_wait(&g->done_cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    for (int i = 0; i < g->n_towers; i++) {
        Tower *t = &g->towers[i];
        if (t->status != 0) {
            snprintf(err, err_n_bytes, "tower %d: %s", i, t->err);
            return -1;
        }
    }
    return 0;
}

void tower_group_free(TowerGroup *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->quit = 1;
    g->go_generation++;
    pthread_cond_broadcast(&g->go_cv);
    pthread_mutex_unlock(&g->mu);
    for (int i = 0; i < g->n_towers; i++) {
        pthread_join(g->towers[i].thread, NULL);
        g->towers[i].backend->tower_free(g->towers[i].dev);
    }
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->go_cv);
    pthread_cond_destroy(&g->done_cv);
    free(g);
}
