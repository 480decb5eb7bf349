/* tower.c — tower threads and the step hand-off (see tower.h).
 *
 * The parameter server thread publishes a step (a new go_generation), every
 * tower thread runs its step on its own device and increments n_done, and
 * the parameter server thread waits until n_done == n_towers.  With hooks
 * (the replicated modes) the tower threads first meet at tower_sync and then
 * run the caller's reduce and apply.  Nothing here averages or updates
 * variables: that is ps/ (through the hooks the trainer wires).  With
 * TowerStep.accum_steps K a tower runs its shard as K micro-batches (copy
 * in, forward, backward, the gradient adding up) and then scales the sum by
 * its grad_scale, all before its copy-out: the averaging that follows, in
 * whatever mode, sees one gradient per tower as before.  In the GPU
 * modes a step's TowerDeviceCopy routes the copy-in and copy-out through the
 * backend's device operations, or skips them.
 */
#include "tower/tower.h"

#include "base/ranks.h"

#include <math.h>
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
    if (!strcmp(name, "cuda-deterministic")) return &tower_backend_cuda_deterministic;
    if (!strcmp(name, "cuda-tf32-deterministic")) return &tower_backend_cuda_tf32_deterministic;
#endif
    return NULL;
}

const char *tower_phase_name(TowerPhase p) {
    static const char *const names[TOWER_N_PHASES] = {"copy_in", "forward", "backward", "copy_out",
                                                       "sync", "reduce", "apply"};
    return p >= 0 && p < TOWER_N_PHASES ? names[p] : "?";
}

/* The variables -> the tower's own weights (skipped when they are bound, or
 * resident on the device in the GPU modes). */
static int ps_copy_params_to_tower(Tower *t) {
    if (t->has_device_copy) {
        const TowerDeviceCopy *dc = &t->device_copy;
        if (!dc->params_src) return 0; /* the tower's device variables are current */
        return t->backend->copy_params_in_device(t->dev, dc->params_src, dc->params_device, t->err, sizeof t->err);
    }
    if (!t->params) {
        if (t->bound) return 0;
        snprintf(t->err, sizeof t->err, "no variables to copy in and none bound");
        return -1;
    }
    return t->backend->copy_params_in(t->dev, t->params, t->err, sizeof t->err);
}

/* Micro-batch k of the tower's shard of the staged batch -> the tower's device. */
static int tower_copy_shard_to_tower(Tower *t, int k) {
    const size_t example_n_floats = (size_t)t->group->spec->H * t->group->spec->W * t->group->spec->C;
    const int n = t->n / t->accum_steps;
    return t->backend->copy_shard_in(t->dev, t->x + (size_t)k * n * example_n_floats, t->labels + (size_t)k * n, n,
                                     t->err, sizeof t->err);
}

/* Forward and backward on every micro-batch of the shard (the first copied
 * in already), each backward on loss_weight x its cross-entropy, the
 * gradient adding up; then the gradient *= grad_scale.
 * loss and accuracy: the micro-batches' means, averaged (each micro-batch
 * has the same size, so they are the shard's). */
static int tower_compute(Tower *t) {
    const int K = t->accum_steps;
    if (K == 1) {
        if (t->backend->compute(t->dev, 0, t->loss_weight, &t->loss, &t->accuracy, t->err, sizeof t->err) != 0)
            return -1;
    } else {
        double loss_sum = 0.0, accuracy_sum = 0.0;
        for (int k = 0; k < K; k++) {
            float loss, accuracy;
            if ((k > 0 && tower_copy_shard_to_tower(t, k) != 0) ||
                t->backend->compute(t->dev, k > 0, t->loss_weight, &loss, &accuracy, t->err, sizeof t->err) != 0)
                return -1;
            loss_sum += loss;
            accuracy_sum += accuracy;
        }
        t->loss = (float)(loss_sum / K);
        t->accuracy = (float)(accuracy_sum / K);
    }
    if (t->grad_scale != 1.0f) return t->backend->scale_grads(t->dev, t->grad_scale, t->err, sizeof t->err);
    return 0;
}

/* The tower's gradients -> its host gradient buffer, which the parameter
 * server averages (or, in the GPU modes, device memory the server reads). */
static int tower_copy_grads_to_ps(Tower *t) {
    if (t->has_device_copy)
        return t->backend->copy_grads_out_device(t->dev, t->device_copy.grads_dst, t->device_copy.grads_device, t->err,
                                                 sizeof t->err);
    return t->backend->copy_grads_out(t->dev, t->err, sizeof t->err);
}

/* Wait until every tower of the step has arrived; ok = this tower may go on.
 * Returns 1 when every tower arrived ok, 0 otherwise. */
static int tower_sync(TowerGroup *g, int ok) {
    pthread_mutex_lock(&g->mu);
    if (!ok) g->sync_failed = 1;
    long gen = g->sync_generation;
    if (++g->n_synced == g->n_towers) {
        g->n_synced = 0;
        g->sync_generation++;
        pthread_cond_broadcast(&g->sync_cv);
    } else {
        while (g->sync_generation == gen) pthread_cond_wait(&g->sync_cv, &g->mu);
    }
    int all_ok = !g->sync_failed;
    pthread_mutex_unlock(&g->mu);
    return all_ok;
}

/* ---- sync batch norm: the towers' collective sum (model.h's ModelSync) ---- */

/* Meet the other towers of the step (a generation barrier, as tower_sync).
 * Returns 1 when all arrived, 0 when the step was aborted (a tower failed
 * before reaching this point: nobody waits for it). */
static int tower_bn_meet(TowerGroup *g) {
    pthread_mutex_lock(&g->mu);
    long gen = g->bn_generation;
    if (++g->bn_arrived == g->n_towers) {
        g->bn_arrived = 0;
        g->bn_generation++;
        pthread_cond_broadcast(&g->bn_cv);
    } else {
        while (g->bn_generation == gen && !g->bn_aborted) pthread_cond_wait(&g->bn_cv, &g->mu);
    }
    int ok = !g->bn_aborted;
    pthread_mutex_unlock(&g->mu);
    return ok;
}

/* A tower that will not reach the collective sums of this step releases the others. */
static void tower_bn_abort(TowerGroup *g) {
    if (!g->sync_batch_norm) return;
    pthread_mutex_lock(&g->mu);
    g->bn_aborted = 1;
    pthread_cond_broadcast(&g->bn_cv);
    pthread_mutex_unlock(&g->mu);
}

/* buf = every tower's slot, added in tower order. */
static void add_slots(const TowerGroup *g, double *buf, size_t n_doubles) {
    for (size_t i = 0; i < n_doubles; i++) {
        double s = g->towers[0].bn_slot[i];
        for (int k = 1; k < g->n_towers; k++) s += g->towers[k].bn_slot[i];
        buf[i] = s;
    }
}

/* Tower 0, across processes: bn_total = the towers' sum, then the job's (through tower_group_run's thread).
 * 1 on success; 0 with the tower failed and the step aborted (out of memory, or another process failed). */
static int tower_bn_across(Tower *t, size_t n_doubles) {
    TowerGroup *g = t->group;
    if (n_doubles > g->bn_total_n) {
        double *p = realloc(g->bn_total, n_doubles * sizeof *p);
        if (!p) {
            snprintf(t->err, sizeof t->err, "out of memory for sync batch norm's sums");
            t->bn_failed = 1;
            tower_bn_abort(g);
            return 0;
        }
        g->bn_total = p;
        g->bn_total_n = n_doubles;
    }
    add_slots(g, g->bn_total, n_doubles);
    pthread_mutex_lock(&g->mu);
    g->across_n = n_doubles;
    g->across_pending = 1;
    pthread_cond_broadcast(&g->done_cv);
    while (g->across_pending) pthread_cond_wait(&g->across_cv, &g->mu);
    const int rc = g->across_rc, other = g->across_other;
    pthread_mutex_unlock(&g->mu);
    if (rc == 0) return 1;
    snprintf(t->err, sizeof t->err, "rank %d failed in this step (its own line says why): sync batch norm's sums "
             "across ranks stopped", other);
    t->bn_failed = 1;
    tower_bn_abort(g);
    return 0;
}

/* ModelSync.sum for tower ctx: publish buf in the tower's slot, meet, add
 * every tower's slot in tower order into buf (the same bits on every
 * tower), meet again so that no slot is rewritten before all have read it.
 * On an aborted step buf is left as it is (the step fails anyway). */
static void tower_bn_sum(void *ctx, double *buf, size_t n_doubles) {
    Tower *t = ctx;
    TowerGroup *g = t->group;
    if (n_doubles > t->bn_slot_n) {
        double *p = realloc(t->bn_slot, n_doubles * sizeof *p);
        if (!p) {
            snprintf(t->err, sizeof t->err, "out of memory for sync batch norm's sums");
            t->bn_failed = 1;
            tower_bn_abort(g);
            return;
        }
        t->bn_slot = p;
        t->bn_slot_n = n_doubles;
    }
    memcpy(t->bn_slot, buf, n_doubles * sizeof *buf);
    if (!tower_bn_meet(g)) return;
    if (!g->sum_across) {
        add_slots(g, buf, n_doubles);
        tower_bn_meet(g);
        return;
    }
    /* Across processes: tower 0 adds the slots, tower_group_run's thread sums that across the job; every tower
     * reads the job's sum after the second meet, and the third keeps bn_total until all have read it. */
    if (t->index == 0 && !tower_bn_across(t, n_doubles)) return;
    if (!tower_bn_meet(g)) return;
    memcpy(buf, g->bn_total, n_doubles * sizeof *buf);
    tower_bn_meet(g);
}

/* Split the compute span (recorded as FORWARD) at the backend's forward end, when it reports one. */
static void split_compute(Tower *t) {
    TowerSpan *f = &t->times.span[TOWER_PHASE_FORWARD], *b = &t->times.span[TOWER_PHASE_BACKWARD];
    double compute_end = f->end_sec;
    double mid = t->backend->forward_end_sec ? t->backend->forward_end_sec(t->dev) : 0.0;
    if (mid > f->start_sec && mid < compute_end) f->end_sec = mid;
    else mid = compute_end; /* not split: all of it shows as forward */
    b->start_sec = mid;
    b->end_sec = compute_end;
}

/* One tower's step; every phase's span is recorded as it runs.  A phase
 * runs only if the ones before it succeeded; with hooks, the sync runs in
 * any case (a tower that failed must still arrive, or the others would wait
 * forever), and the hooks run only when every tower arrived ok. */
static void tower_run_step(Tower *t, double go_time, const TowerHooks *hooks) {
    TowerTimes *tt = &t->times;
    TowerSpan *sp = tt->span;
    memset(tt, 0, sizeof *tt);
    tt->go_sec = go_time;
    tt->run_sec = tower_now_sec();
    t->status = -1;
    t->bn_failed = 0;

    sp[TOWER_PHASE_COPY_IN].start_sec = tower_now_sec();
    int ok = ps_copy_params_to_tower(t) == 0 && tower_copy_shard_to_tower(t, 0) == 0;
    sp[TOWER_PHASE_COPY_IN].end_sec = tower_now_sec();
    if (ok) {
        sp[TOWER_PHASE_FORWARD].start_sec = sp[TOWER_PHASE_COPY_IN].end_sec;
        ok = tower_compute(t) == 0 && !t->bn_failed;
        sp[TOWER_PHASE_FORWARD].end_sec = tower_now_sec();
        if (t->accum_steps == 1) split_compute(t);
    }
    if (!ok) tower_bn_abort(t->group); /* sync batch norm: no tower waits for this one */
    /* In the GPU modes a gradient the server reads where it is needs no copy-out. */
    const int copies_out = !t->has_device_copy || t->device_copy.grads_dst;
    if (ok && copies_out) {
        sp[TOWER_PHASE_COPY_OUT].start_sec = sp[TOWER_PHASE_BACKWARD].end_sec;
        ok = tower_copy_grads_to_ps(t) == 0;
        sp[TOWER_PHASE_COPY_OUT].end_sec = tower_now_sec();
    }
    /* The device's own times: they cover one micro-batch, so only without accumulation. */
    if (ok && t->backend->device_spans && t->accum_steps == 1) t->backend->device_spans(t->dev, sp);
    if (!hooks) {
        if (ok) t->status = 0;
        return;
    }

    sp[TOWER_PHASE_SYNC].start_sec = tower_now_sec();
    int all_ok = tower_sync(t->group, ok && isfinite(t->loss));
    sp[TOWER_PHASE_SYNC].end_sec = tower_now_sec();
    if (!all_ok) {
        if (ok) t->status = 0; /* this tower was fine: another one failed, or a loss is not finite */
        return;
    }
    if (hooks->reduce) {
        sp[TOWER_PHASE_REDUCE].start_sec = sp[TOWER_PHASE_SYNC].end_sec;
        ok = hooks->reduce(hooks->ctx, t->index, t->err, sizeof t->err) == 0;
        sp[TOWER_PHASE_REDUCE].end_sec = tower_now_sec();
    }
    if (ok && hooks->apply) {
        sp[TOWER_PHASE_APPLY].start_sec = tower_now_sec();
        ok = hooks->apply(hooks->ctx, t->index, t->err, sizeof t->err) == 0;
        sp[TOWER_PHASE_APPLY].end_sec = tower_now_sec();
    }
    if (ok) t->status = 0;
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
        const TowerHooks *hooks = g->hooks;
        pthread_mutex_unlock(&g->mu);
        if (quit) return NULL;
        tower_run_step(t, go_time, hooks);
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
    pthread_cond_init(&g->sync_cv, NULL);
    pthread_cond_init(&g->bn_cv, NULL);
    g->sync_batch_norm = cfg->sync_batch_norm;
    g->sum_across = cfg->sync_batch_norm ? cfg->sum_across : NULL;
    pthread_cond_init(&g->across_cv, NULL);
    if (cfg->sync_batch_norm && !cfg->backend->set_sync) {
        snprintf(err, err_n_bytes, "--batch_norm sync: %s towers cannot synchronise batch norm yet", cfg->backend->name);
        tower_group_free(g);
        return NULL;
    }
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
        if (cfg->sync_batch_norm) {
            const ModelSync sync = {.sum = tower_bn_sum, .ctx = t};
            if (cfg->backend->set_sync(t->dev, &sync, e, sizeof e) != 0) {
                snprintf(err, err_n_bytes, "tower %d: %s", i, e);
                cfg->backend->tower_free(t->dev);
                t->dev = NULL;
                tower_group_free(g);
                return NULL;
            }
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

/* Across processes: this group's towers will sum nothing more this step; wait (answering) until no process
 * still sums, so that none waits for this one. */
static void across_end(TowerGroup *g, int failed) {
    if (!g->sum_across) return;
    int other;
    while (g->sum_across(NULL, 0, failed ? RANKS_SUM_FAILED : RANKS_SUM_END, &other) == 1) {
    }
}

int tower_group_run(TowerGroup *g, const TowerStep *step, char *err, size_t err_n_bytes) {
    const size_t example_n_floats = (size_t)g->spec->H * g->spec->W * g->spec->C;
    const int K = step->accum_steps > 0 ? step->accum_steps : 1;
    for (int i = 0; i < g->n_towers; i++) {
        if (step->shard_n[i] % K != 0) {
            snprintf(err, err_n_bytes, "tower %d: a shard of %d examples is not %d micro-batches of one size", i,
                     step->shard_n[i], K);
            across_end(g, 1);
            return -1;
        }
        if (step->grad_scale && step->grad_scale[i] != 1.0f && !g->towers[i].backend->scale_grads) {
            snprintf(err, err_n_bytes, "tower %d: the %s backend cannot scale its gradient", i,
                     g->towers[i].backend->name);
            across_end(g, 1);
            return -1;
        }
    }
    if (step->device_copy) {
        for (int i = 0; i < g->n_towers; i++) {
            const TowerBackend *b = g->towers[i].backend;
            if ((step->device_copy[i].params_src && !b->copy_params_in_device) ||
                (step->device_copy[i].grads_dst && !b->copy_grads_out_device)) {
                snprintf(err, err_n_bytes, "tower %d: the %s backend cannot copy to or from device memory", i, b->name);
                across_end(g, 1);
            return -1;
            }
        }
    }
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < g->n_towers; i++) {
        Tower *t = &g->towers[i];
        t->params = step->params[i];
        t->has_device_copy = step->device_copy != NULL;
        if (step->device_copy) t->device_copy = step->device_copy[i];
        t->x = step->x + (size_t)step->shard_offset[i] * example_n_floats;
        t->labels = step->labels + step->shard_offset[i];
        t->n = step->shard_n[i];
        t->accum_steps = K;
        t->grad_scale = step->grad_scale ? step->grad_scale[i] : 1.0f;
        t->loss_weight = step->loss_weight ? step->loss_weight[i] : 1.0f;
    }
    g->hooks = step->hooks;
    g->sync_failed = 0;
    g->bn_aborted = 0;
    g->bn_arrived = 0;
    g->n_done = 0;
    g->go_time = tower_now_sec();
    g->go_generation++;
    pthread_cond_broadcast(&g->go_cv);
    while (g->n_done < g->n_towers) {
        if (g->across_pending) { /* tower 0's sum across processes, on this thread */
            const size_t n = g->across_n;
            pthread_mutex_unlock(&g->mu);
            int other = -1;
            const int rc = g->sum_across(g->bn_total, n, RANKS_SUM_DATA, &other);
            pthread_mutex_lock(&g->mu);
            g->across_rc = rc;
            g->across_other = other;
            g->across_pending = 0;
            pthread_cond_broadcast(&g->across_cv);
            continue;
        }
        pthread_cond_wait(&g->done_cv, &g->mu);
    }
    pthread_mutex_unlock(&g->mu);
    int failed = -1;
    for (int i = 0; i < g->n_towers && failed < 0; i++)
        if (g->towers[i].status != 0) failed = i;
    across_end(g, failed >= 0);
    if (failed >= 0) {
        snprintf(err, err_n_bytes, "tower %d: %s", failed, g->towers[failed].err);
        return -1;
    }
    return 0;
}

int tower_group_update_moving(TowerGroup *g, int t, float *params_host, char *err, size_t err_n_bytes) {
    Tower *tw = &g->towers[t];
    if (!tw->backend->update_moving) {
        snprintf(err, err_n_bytes, "%s towers cannot update batch norm's moving statistics", tw->backend->name);
        return -1;
    }
    char e[256];
    if (tw->backend->update_moving(tw->dev, params_host, e, sizeof e) != 0) {
        snprintf(err, err_n_bytes, "tower %d: %s", t, e);
        return -1;
    }
    return 0;
}

int tower_group_write_moving_device(TowerGroup *g, int t, const float *params_host, float *params_dev,
                                    int params_device, char *err, size_t err_n_bytes) {
    Tower *tw = &g->towers[t];
    if (!tw->backend->write_moving_device) {
        snprintf(err, err_n_bytes, "%s towers keep nothing on a GPU", tw->backend->name);
        return -1;
    }
    char e[256];
    if (tw->backend->write_moving_device(tw->dev, params_host, params_dev, params_device, e, sizeof e) != 0) {
        snprintf(err, err_n_bytes, "tower %d: %s", t, e);
        return -1;
    }
    return 0;
}

void tower_group_describe_algorithms(const TowerGroup *g, int t, char *out, size_t out_n_bytes) {
    out[0] = '\0';
    if (t >= 0 && t < g->n_towers && g->towers[t].backend->describe_algorithms)
        g->towers[t].backend->describe_algorithms(g->towers[t].dev, out, out_n_bytes);
}

int tower_group_device_view(const TowerGroup *g, int t, TowerDeviceView *view, char *err, size_t err_n_bytes) {
    if (t < 0 || t >= g->n_towers) {
        snprintf(err, err_n_bytes, "tower %d does not exist (%d towers)", t, g->n_towers);
        return -1;
    }
    const Tower *tw = &g->towers[t];
    if (!tw->backend->device_view) {
        snprintf(err, err_n_bytes, "tower %d: %s towers keep nothing on a GPU", t, tw->backend->name);
        return -1;
    }
    char e[256];
    if (tw->backend->device_view(tw->dev, view, e, sizeof e) != 0) {
        snprintf(err, err_n_bytes, "tower %d: %s", t, e);
        return -1;
    }
    return 0;
}

int tower_group_bind_params(TowerGroup *g, float *const *params, char *err, size_t err_n_bytes) {
    if (g->n_towers < 1 || !g->towers[0].backend->bind_params) return 0;
    for (int i = 0; i < g->n_towers; i++) {
        Tower *t = &g->towers[i];
        char e[256];
        if (t->backend->bind_params(t->dev, params[i], e, sizeof e) != 0) {
            snprintf(err, err_n_bytes, "tower %d: cannot bind its variables: %s", i, e);
            return -1;
        }
        t->bound = 1;
    }
    return 1;
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
        free(g->towers[i].bn_slot);
    }
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->go_cv);
    pthread_cond_destroy(&g->done_cv);
    pthread_cond_destroy(&g->sync_cv);
    pthread_cond_destroy(&g->bn_cv);
    pthread_cond_destroy(&g->across_cv);
    free(g->bn_total);
    free(g);
}
