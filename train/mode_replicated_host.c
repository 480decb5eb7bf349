/* mode_replicated_host.c — --variable_update replicated --all_reduce host
 * (MirroredStrategy, DistributedDataParallel, Horovod on CPU towers):
 * every tower keeps its own variables and momentum slots in host memory
 * (ps_create_replicas), computes on them (in place when the backend can
 * bind them), and on its own thread ring-all-reduces the gradients
 * (ps/allreduce_host.h) and applies the same update to its variables and
 * its 1/N share of the moving averages (ps_replica_apply); the server
 * thread only advances global_step.
 *
 * Where it sits: one entry of train/modes.c's table (train/mode.h); its
 * two tower-thread hooks (reduce, apply) are here.
 * What it does not do: copy variables between steps when the towers are
 * bound (a CPU tower computes on its replica in place).
 */
#include <stdio.h>
#include <string.h>

#include "train/mode.h"

/* --all_reduce auto: NCCL on GPU towers when this build has it. */
static const TrainModeI *mode_settle(const Trainer *tr) {
    const TrainModeI *nccl = train_mode(TRAINER_REPLICATED_NCCL);
    char e[256];
    if (!strcmp(tr->opt.all_reduce, "auto") && tr->backend->device_view != NULL && nccl->available(e, sizeof e))
        return nccl;
    return NULL;
}

static void mode_describe(const Trainer *tr, const char *ts) {
    printf("%s: global batch %d = %d tower(s); mode %s: every tower keeps its own variables and momentum slots "
           "(%s), gradients all-reduced by a ring over the towers' host buffers, every tower applies the update; "
           "each tower also updates its share of the moving averages; global_step on /cpu:0\n",
           ts, tr->global_batch, tr->n_towers, trainer_mode_name(tr->mode),
           tr->replicas_bound ? "computed on in place" : "copied in each step");
}

/* Every tower's own variables and slots (the initial broadcast), the ring,
 * and the towers bound to their replicas where the backend can. */
static int mode_open(Trainer *tr, char *err, size_t err_n_bytes) {
    if (ps_create_replicas(tr->ps, tr->n_towers) != 0) {
        snprintf(err, err_n_bytes, "cannot allocate %d replicas of %zu variables (out of memory?)", tr->n_towers,
                 tr->spec.n_params);
        return -1;
    }
    tr->allreduce = allreduce_host_create(tr->n_towers, err, err_n_bytes);
    if (!tr->allreduce) return -1;
    tr->replicas_bound = tower_group_bind_params(tr->towers, tr->ps->replica_params, err, err_n_bytes);
    return tr->replicas_bound < 0 ? -1 : 0;
}

/* The hooks, on each tower's thread. */
static int reduce_hook(void *ctx, int tower, char *err, size_t err_n_bytes) {
    (void)err;
    (void)err_n_bytes;
    Trainer *tr = ctx;
    allreduce_host_ring_mean(tr->allreduce, tower, tr->ps->tower_grads, tr->spec.n_params);
    return 0;
}

static int apply_hook(void *ctx, int tower, char *err, size_t err_n_bytes) {
    (void)err;
    (void)err_n_bytes;
    Trainer *tr = ctx;
    tr->replica_nonfinite[tower] = ps_replica_apply(tr->ps, tower, tr->ps->tower_grads[tower], tr->step_lr) != 0;
    return 0;
}

static int mode_step(Trainer *tr, PipelineBatch *batch, float *loss, char *err, size_t err_n_bytes) {
    const TowerHooks hooks = {.reduce = reduce_hook, .apply = apply_hook, .ctx = tr};
    TowerStep ts = {.hooks = &hooks};
    for (int t = 0; t < tr->n_towers; t++) ts.params[t] = tr->replicas_bound ? NULL : tr->ps->replica_params[t];
    int rc = train_run_replicated(tr, &ts, batch, loss, err, err_n_bytes);
    /* Each tower's update tested its new variables in its loop (ps_replica_apply). */
    for (int t = 0; rc == 1 && t < tr->n_towers; t++)
        if (tr->replica_nonfinite[t]) rc = train_diverged(tr->ps->global_step, "non-finite variables", *loss, err, err_n_bytes);
    /* Batch norm's moving statistics, the same mean into every replica (train/batch_norm.c). */
    if (rc == 1) {
        const int moving_rc = train_update_moving(tr, tr->ps->replica_params, tr->n_towers, *loss, err, err_n_bytes);
        if (moving_rc != 0) rc = moving_rc;
    }
    return rc;
}

/* Every tower holds the same variables: save tower 0's. */
static void mode_save(const Trainer *tr) { ps_gather_replica(tr->ps, 0); }

/* Tower 0's replica (ps->params is only refreshed at a save). */
static const float *mode_variables(const Trainer *tr) { return tr->ps->replica_params[0]; }

static void mode_close(Trainer *tr) {
    if (tr->allreduce) allreduce_host_free(tr->allreduce);
    tr->allreduce = NULL;
}

/* The cost model: each rank of the ring moves 2(N-1)/N of the model
 * through 2N-3 barriers, then updates its own replica on its one core with
 * its 1/N share of the moving averages. */
static double mode_predict_ms(const TrainCostFigures *f, int n_towers, double share) {
    const double M = f->model_n_bytes, N = n_towers;
    double t = 0.0;
    if (n_towers > 1) {
        t += 2 * (N - 1) / N * M / (f->ring_gbps * 1e9) * 1e3 * share;
        t += (2 * N - 3) * f->barrier_ms;
    }
    return t + (f->opt_1thread_ms + f->ema_1thread_ms / N) * share;
}

static const char *const aliases[] = {"replicated", "replicated/host", NULL};

const TrainModeI train_mode_replicated_host = {
    .name = "replicated_host",
    .variable_update = "replicated",
    .placement = "host",
    .flags = "--variable_update replicated --all_reduce host",
    .aliases = aliases,
    .server_row = "server: input, global_step",
    .server_apply = "global_step",
    .reduce_span = "ring all-reduce",
    .reduce_row = "all-reduce (ring)",
    .available = train_mode_always_available,
    .settle = mode_settle,
    .describe = mode_describe,
    .open = mode_open,
    .step = mode_step,
    .save = mode_save,
    .variables = mode_variables,
    .close = mode_close,
    .predict_ms = mode_predict_ms,
};
