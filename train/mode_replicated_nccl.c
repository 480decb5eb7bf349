/* mode_replicated_nccl.c — --variable_update replicated --all_reduce nccl
 * (MirroredStrategy, DistributedDataParallel with NCCL): every tower
 * computes on its own device variables (no copy-in) and keeps its
 * gradient on its GPU (no copy-out); on the tower threads the gradients
 * are all-reduced with NCCL (ps/allreduce_nccl.h: summed per GPU, NCCL
 * across GPUs, divided by the tower count) and each tower applies the
 * update on its GPU with its momentum slots and its share of the moving
 * averages (ps_gpu_replica_apply); the server thread only advances
 * global_step.  The host block is a copy for checkpoints.
 *
 * Where it sits: one entry of train/modes.c's table (train/mode.h); its
 * two tower-thread hooks are here.  Built with CUDA and NCCL; otherwise
 * the entry only says what is missing (available).
 * Under mpirun with several ranks its settle picks replicated_nccl_mpi
 * (one communicator over every rank's GPUs).
 * What it does not do: copy variables or gradients to the host in a step.
 */
#include <stdio.h>
#include <string.h>

#include "train/mode.h"

#ifdef TOWER_HAVE_NCCL
#define mode_available train_mode_always_available

static void mode_describe(const Trainer *tr, const char *ts) {
    printf("%s: global batch %d = %d tower(s); mode %s: every tower keeps its own variables on its GPU, with its "
           "momentum slots and its share of the moving averages; gradients all-reduced by NCCL over %d rank(s), "
           "one per GPU (the towers of a GPU summed on it first); every tower applies the update; global_step "
           "on /cpu:0\n", ts, tr->global_batch, tr->n_towers, trainer_mode_name(tr->mode),
           allreduce_nccl_n_ranks(tr->nccl));
}

/* Each tower's slots and share of the moving averages on its GPU, and the
 * communicator over the towers' GPUs, from the (initial or resumed) host block. */
static int mode_open(Trainer *tr, char *err, size_t err_n_bytes) {
    int devices[TOWER_MAX_TOWERS];
    float *params[TOWER_MAX_TOWERS], *grads[TOWER_MAX_TOWERS];
    if (train_device_views(tr, devices, params, grads, err, err_n_bytes) != 0) return -1;
    char e[512];
    tr->gpu_replicas = ps_gpu_replicas_create(tr->ps, tr->n_towers, devices, params, grads, e, sizeof e);
    if (!tr->gpu_replicas) {
        snprintf(err, err_n_bytes, "--all_reduce nccl: %s", e);
        return -1;
    }
    tr->nccl = allreduce_nccl_create(tr->n_towers, devices, grads, tr->spec.n_params, e, sizeof e);
    if (!tr->nccl) {
        snprintf(err, err_n_bytes, "--all_reduce nccl: %s", e);
        return -1;
    }
    return 0;
}

/* The hooks, on each tower's thread. */
static int reduce_hook(void *ctx, int tower, char *err, size_t err_n_bytes) {
    (void)err;
    (void)err_n_bytes;
    Trainer *tr = ctx;
    PsGpuSpanMs nccl;
    const double t0 = tower_now_sec();
    allreduce_nccl_mean(tr->nccl, tower, &nccl);
    tr->nccl_spans[tower] = train_device_span(t0, &nccl);
    return 0;
}

static int apply_hook(void *ctx, int tower, char *err, size_t err_n_bytes) {
    (void)err;
    (void)err_n_bytes;
    Trainer *tr = ctx;
    tr->replica_nonfinite[tower] = ps_gpu_replica_apply(tr->gpu_replicas, tower, tr->ps, tr->step_lr, NULL) != 0;
    return 0;
}

static int mode_step(Trainer *tr, PipelineBatch *batch, float *loss, char *err, size_t err_n_bytes) {
    const TowerHooks hooks = {.reduce = reduce_hook, .apply = apply_hook, .ctx = tr};
    TowerDeviceCopy dc[TOWER_MAX_TOWERS];
    memset(dc, 0, sizeof dc); /* no copy-in, no copy-out */
    for (int t = 0; t < tr->n_towers; t++) tr->nccl_spans[t] = (TowerSpan){0.0, 0.0};
    TowerStep ts = {.hooks = &hooks, .device_copy = dc};
    int rc = train_run_replicated(tr, &ts, batch, loss, err, err_n_bytes);
    /* Each replica's update kernel tested its new variables (ps_gpu_replica_apply). */
    for (int t = 0; rc == 1 && t < tr->n_towers; t++)
        if (tr->replica_nonfinite[t]) rc = train_diverged(tr->ps->global_step, "non-finite variables", *loss, err, err_n_bytes);
    if (rc != 1) return rc;
    const int moving_rc = train_nccl_update_moving(tr, *loss, err, err_n_bytes);
    return moving_rc == 0 ? 1 : moving_rc;
}

int train_nccl_update_moving(Trainer *tr, float loss, char *err, size_t err_n_bytes) {
    if (tr->moving_n_floats == 0) return 0;
    /* Batch norm's moving statistics (train/batch_norm.c): the host block's are current (the devices' only ever
     * come from it), the towers' statistics through the host, the mean up to every tower's own variables. */
    const int moving_rc = train_update_moving(tr, &tr->ps->params, 1, loss, err, err_n_bytes);
    if (moving_rc != 0) return moving_rc;
    for (int t = 0; t < tr->n_towers; t++) {
        TowerDeviceView v;
        if (tower_group_device_view(tr->towers, t, &v, err, err_n_bytes) != 0 ||
            tower_group_write_moving_device(tr->towers, t, tr->ps->params, v.params, v.device, err, err_n_bytes) != 0)
            return -1;
    }
    return 0;
}

void train_nccl_save(const Trainer *tr) {
    if (tr->gpu_replicas) ps_gpu_replicas_download(tr->gpu_replicas, tr->ps);
}

TowerSpan train_nccl_reduce_span(const Trainer *tr) {
    TowerSpan s = {0.0, 0.0};
    for (int t = 0; t < tr->n_towers; t++) {
        const TowerSpan *n = &tr->nccl_spans[t];
        if (n->start_sec <= 0.0) continue;
        if (s.start_sec == 0.0 || n->start_sec < s.start_sec) s.start_sec = n->start_sec;
        if (n->end_sec > s.end_sec) s.end_sec = n->end_sec;
    }
    return s;
}

static void mode_close(Trainer *tr) {
    allreduce_nccl_free(tr->nccl);
    ps_gpu_replicas_free(tr->gpu_replicas);
    tr->nccl = NULL;
    tr->gpu_replicas = NULL;
}
#else
static int mode_available(char *err, size_t err_n_bytes) {
#ifdef TOWER_HAVE_CUDA
    snprintf(err, err_n_bytes, "--variable_update replicated --all_reduce nccl needs NCCL: this tower was built "
             "without it (cmake -DTOWER_NCCL=ON, with -DNCCL_ROOT=... when it is outside the CUDA toolkit)");
#else
    snprintf(err, err_n_bytes, "--variable_update replicated --all_reduce nccl needs GPU towers and NCCL: this "
             "tower was built without CUDA (cmake -DTOWER_CUDA=ON)");
#endif
    return 0;
}
#define mode_describe NULL
#define mode_open NULL
#define mode_step NULL
#define train_nccl_save NULL
#define train_nccl_reduce_span NULL
#define mode_close NULL
#endif

/* Under mpirun with several ranks: the same step with one communicator over every rank's GPUs. */
static const TrainModeI *mode_settle(const Trainer *tr) {
    extern const TrainModeI train_mode_replicated_nccl_mpi;
    return tr->n_ranks > 1 ? &train_mode_replicated_nccl_mpi : NULL;
}

static const char *const aliases[] = {"replicated/nccl", NULL};

const TrainModeI train_mode_replicated_nccl = {
    .name = "replicated_nccl",
    .variable_update = "replicated",
    .placement = "nccl",
    .flags = "--variable_update replicated --all_reduce nccl",
    .aliases = aliases,
    .needs_gpu_towers = 1,
    .server_row = "server: input, global_step",
    .server_apply = "global_step",
    .reduce_span = "ncclAllReduce",
    .reduce_row = "all-reduce (NCCL)",
    .available = mode_available,
    .settle = mode_settle,
    .describe = mode_describe,
    .open = mode_open,
    .step = mode_step,
    .save = train_nccl_save,
    .reduce_device_span = train_nccl_reduce_span,
    .close = mode_close,
};
