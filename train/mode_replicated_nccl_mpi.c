/* mode_replicated_nccl_mpi.c — --variable_update replicated --all_reduce
 * nccl across the ranks of `mpirun -np R tower train` (Horovod's and
 * DistributedDataParallel's NCCL across hosts): replicated_nccl with one
 * NCCL communicator over every GPU of every rank.  Chosen by
 * --all_reduce nccl (replicated_nccl's settle) when mpirun started several
 * ranks, or by --all_reduce nccl_mpi.
 *
 * At open rank 0's server (variables, slots, moving averages, global_step,
 * the examples consumed: a --resume) is broadcast as in replicated_mpi,
 * each tower's replica is made on its GPU from it, rank 0 makes the NCCL
 * id and broadcasts it (MPI_Bcast), every rank learns how many distinct GPUs
 * the others have (MPI_Allgather), and rank r's GPUs become NCCL ranks
 * after those of ranks 0 .. r-1 (ncclCommInitRank).
 *
 * One synchronous step, on every rank (R ranks of T GPU towers):
 *   1. its towers compute on their own device variables (no copy-in) and
 *      keep their gradients on their GPUs (no copy-out), without hooks;
 *   2. every rank agrees on the step's outcome (train_ranks_agree over
 *      MPI): a failed tower or a non-finite loss anywhere stops every rank
 *      alike, before any rank enters a collective the others would not;
 *   3. from this thread, each GPU sums its towers, the GPUs' leaders of
 *      every rank ncclAllReduce, the sum is divided by R x T
 *      (allreduce_nccl_mean_all), and the other towers of a GPU copy it;
 *   4. every tower applies the update on its GPU (ps_gpu_replica_apply),
 *      global_step + 1, and batch norm's moving statistics go through the
 *      host in the job's tower order (train_update_moving, a collective of
 *      the ranks) back to every tower's variables.
 * NCCL hands every rank the same sum, so every replica of every rank holds
 * the same bits; rank 0 saves tower 0's (train_nccl_save).  The sum's order is
 * NCCL's, not ps_cpu's: equal to one process of R x T towers to float
 * rounding.
 *
 * Where it sits: one entry of train/modes.c's table (train/mode.h); the
 * transport for the id and the agreement is base/ranks.c, the all-reduce
 * ps/allreduce_nccl.cu.  Built with CUDA and NCCL; otherwise the entry only
 * says what is missing (available).  Without MPI, or without mpirun, the
 * job is one rank.
 * What it does not do: overlap the all-reduce with the backward pass, or run
 * two ranks on one GPU (NCCL refuses a communicator with a GPU twice).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/ranks.h"
#include "train/mode.h"

#if defined(TOWER_HAVE_NCCL)
typedef struct {
    float *stats; /* (R, 1 + 3T) train_ranks_agree's buffer */
} NcclMpiState;

/* Without MPI in the build (or without mpirun) the job is one rank: replicated_nccl's arithmetic from one thread. */
#define mode_available train_mode_always_available

static void mode_describe(const Trainer *tr, const char *ts) {
    printf("%s: global batch %d = %d rank(s) x %d tower(s); mode %s: every tower keeps its own variables on its GPU, "
           "with its momentum slots and its share of the moving averages; after the ranks agree on the step (%s), "
           "gradients all-reduced by NCCL over %d GPU rank(s) of the job (this rank's %d GPU(s) summed on each first), "
           "divided by %d; every tower applies the update; rank %d of %d%s\n",
           ts, tr->global_batch, tr->n_ranks, tr->n_towers, trainer_mode_name(tr->mode), ranks_library(),
           allreduce_nccl_n_ranks_total(tr->nccl), allreduce_nccl_n_ranks(tr->nccl), tr->n_ranks * tr->n_towers,
           tr->rank, tr->n_ranks, tr->rank == 0 ? " (logs, summaries, checkpoints)" : "");
}

static int mode_open(Trainer *tr, char *err, size_t err_n_bytes) {
    ParamServer *ps = tr->ps;
    const int R = tr->n_ranks, T = tr->n_towers;
    ranks_bcast(ps->block, ps->block_n_bytes);
    train_ranks_bcast_state(tr);

    NcclMpiState *st = calloc(1, sizeof *st);
    tr->mode_state = st;
    if (st) st->stats = malloc((size_t)R * (1 + 3 * T) * sizeof(float));
    if (!st || !st->stats) {
        snprintf(err, err_n_bytes, "cannot allocate the step codes of %d rank(s) (out of memory?)", R);
        return -1;
    }
    int devices[TOWER_MAX_TOWERS];
    float *params[TOWER_MAX_TOWERS], *grads[TOWER_MAX_TOWERS];
    if (train_device_views(tr, devices, params, grads, err, err_n_bytes) != 0) return -1;
    char e[512];
    tr->gpu_replicas = ps_gpu_replicas_create(ps, T, devices, params, grads, e, sizeof e);
    if (!tr->gpu_replicas) {
        snprintf(err, err_n_bytes, "--all_reduce nccl across ranks: %s", e);
        return -1;
    }
    /* This rank's GPUs, every rank's count: the NCCL ranks of each, in rank order.  A rank that cannot count
     * still takes part in the gather (with -1), so that every rank fails here together. */
    int mine = allreduce_nccl_count_gpus(T, devices, e, sizeof e);
    int *counts = malloc((size_t)R * sizeof *counts);
    if (!counts) {
        snprintf(err, err_n_bytes, "cannot allocate %d ranks' GPU counts (out of memory?)", R);
        return -1;
    }
    ranks_allgather(&mine, counts, sizeof mine);
    int first = 0, total = 0, bad = -1;
    for (int r = 0; r < R; r++) {
        if (counts[r] < 1 && bad < 0) bad = r;
        if (r < tr->rank) first += counts[r];
        total += counts[r];
    }
    free(counts);
    if (bad >= 0) {
        snprintf(err, err_n_bytes, "--all_reduce nccl across ranks: rank %d could not place its towers' GPUs%s%s", bad,
                 bad == tr->rank ? ": " : "", bad == tr->rank ? e : "");
        return -1;
    }
    unsigned char id[ALLREDUCE_NCCL_ID_N_BYTES];
    int id_rc = 0;
    if (tr->rank == 0) id_rc = allreduce_nccl_unique_id(id, e, sizeof e);
    ranks_bcast(&id_rc, sizeof id_rc);
    if (id_rc != 0) {
        snprintf(err, err_n_bytes, "--all_reduce nccl across ranks: rank 0: %s", tr->rank == 0 ? e : "no NCCL id");
        return -1;
    }
    ranks_bcast(id, sizeof id);
    tr->nccl = allreduce_nccl_create_ranks(T, devices, grads, tr->spec.n_params, id, first, total, R * T, e, sizeof e);
    if (!tr->nccl) {
        snprintf(err, err_n_bytes, "--all_reduce nccl across ranks: %s", e);
        return -1;
    }
    return 0;
}

static int mode_step(Trainer *tr, PipelineBatch *batch, float *loss, char *err, size_t err_n_bytes) {
    NcclMpiState *st = tr->mode_state;
    const int T = tr->n_towers;
    int shard_n[TOWER_MAX_TOWERS] = {0};
    for (int t = 0; t < T; t++) shard_n[t] = batch->shard_n[t];
    TowerDeviceCopy dc[TOWER_MAX_TOWERS];
    memset(dc, 0, sizeof dc); /* no copy-in, no copy-out */
    TowerStep ts = {.hooks = NULL, .device_copy = dc};
    tr->step_lr = ps_step_lr(tr->ps);
    int rc = train_run_towers(tr, &ts, batch, loss, err, err_n_bytes);
    tr->times.average.start_sec = tower_now_sec();
    rc = train_ranks_agree(tr, st->stats, rc, shard_n, loss, err, err_n_bytes);
    if (rc != 1) return rc;
    PsGpuSpanMs spans[TOWER_MAX_TOWERS];
    const double t0 = tower_now_sec();
    allreduce_nccl_mean_all(tr->nccl, spans);
    for (int t = 0; t < T; t++) tr->nccl_spans[t] = train_device_span(t0, &spans[t]);
    tr->times.average.end_sec = tr->times.apply.start_sec = tower_now_sec();
    for (int t = 0; t < T; t++)
        tr->replica_nonfinite[t] = ps_gpu_replica_apply(tr->gpu_replicas, t, tr->ps, tr->step_lr, NULL) != 0;
    ps_finish_replicated_step(tr->ps, tr->step_lr);
    /* Every rank applied the same mean to the same variables: every rank sees the same verdict. */
    for (int t = 0; t < T; t++)
        if (tr->replica_nonfinite[t]) return train_diverged(tr->ps->global_step, "non-finite variables", *loss, err, err_n_bytes);
    const int moving_rc = train_nccl_update_moving(tr, *loss, err, err_n_bytes);
    if (moving_rc != 0) return moving_rc;
    tr->times.apply.end_sec = tower_now_sec();
    return 1;
}

static size_t mode_host_n_bytes(const Trainer *tr) {
    return (size_t)tr->n_ranks * (1 + 3 * (size_t)tr->n_towers) * sizeof(float) + sizeof(NcclMpiState);
}

static void mode_close(Trainer *tr) {
    NcclMpiState *st = tr->mode_state;
    if (st) {
        free(st->stats);
        free(st);
    }
    tr->mode_state = NULL;
    allreduce_nccl_free(tr->nccl);
    ps_gpu_replicas_free(tr->gpu_replicas);
    tr->nccl = NULL;
    tr->gpu_replicas = NULL;
}
#else
static int mode_available(char *err, size_t err_n_bytes) {
#ifdef TOWER_HAVE_CUDA
    snprintf(err, err_n_bytes, "--variable_update replicated --all_reduce nccl across ranks needs NCCL: this tower was "
             "built without it (cmake -DTOWER_NCCL=ON, with -DNCCL_ROOT=... when it is outside the CUDA toolkit)");
#else
    snprintf(err, err_n_bytes, "--variable_update replicated --all_reduce nccl across ranks needs GPU towers and NCCL: "
             "this tower was built without CUDA (cmake -DTOWER_CUDA=ON)");
#endif
    return 0;
}
#define mode_describe NULL
#define mode_open NULL
#define mode_step NULL
#define train_nccl_save NULL
#define train_nccl_reduce_span NULL
#define mode_host_n_bytes NULL
#define mode_close NULL
#endif

static const char *const aliases[] = {"replicated/nccl_mpi", NULL};

const TrainModeI train_mode_replicated_nccl_mpi = {
    .name = "replicated_nccl_mpi",
    .variable_update = "replicated",
    .placement = "nccl_mpi",
    .flags = "--variable_update replicated --all_reduce nccl (across ranks)",
    .aliases = aliases,
    .needs_gpu_towers = 1,
    .across_ranks = 1,
    .server_row = "server: input, agreement across ranks, global_step",
    .server_apply = "apply",
    .reduce_span = "ncclAllReduce",
    .reduce_row = "all-reduce (NCCL across ranks)",
    .available = mode_available,
    .describe = mode_describe,
    .open = mode_open,
    .step = mode_step,
    .save = train_nccl_save,
    .host_n_bytes = mode_host_n_bytes,
    .reduce_device_span = train_nccl_reduce_span,
    .close = mode_close,
};
