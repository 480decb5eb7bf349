/* mode_replicated_mpi.c — --variable_update replicated --all_reduce mpi
 * (Horovod's and DistributedDataParallel's answer across hosts): under
 * `mpirun -np R tower train`, every rank is one host's trainer with T local
 * towers, each tower with its own variables and momentum slots (the
 * replicas of mode_replicated_host.c).  After the towers' backward pass the
 * server thread gathers every tower gradient of every rank (MPI_Allgather
 * on host buffers, base/ranks.h), sums the R x T of them in the job's tower
 * order (rank-major: rank 0's towers, then rank 1's, ...), divides by R x T
 * and applies that same mean to each local replica.  The sum is ps_cpu's
 * (ps_average_grads: g0 + g1 + ... in tower order, then / N), so R ranks of
 * T towers step bitwise as one process of R x T towers in ps_cpu; the loss
 * and accuracy are the job's, from every tower's, in the same order.
 * Every rank sees a non-finite loss or a failed tower of any rank in the
 * same gather and returns the same code, so no rank waits alone.
 * At open, rank 0's server (variables, slots, moving averages, global_step,
 * the examples consumed: a --resume) is broadcast, so every rank starts
 * from rank 0's checkpoint whether or not its host can read train_dir.
 * With one process (no mpirun) the gather is the local towers and the mode
 * is ps_cpu's arithmetic with replicated_host's per-tower variables.
 *
 * Where it sits: one entry of train/modes.c's table (train/mode.h); the
 * transport is base/ranks.c; the data split across ranks is the trainer's
 * (rank_shards in train/trainer.c; docs/hosts.md).
 * The second entry of this file, replicated_mpi_allreduce (--all_reduce
 * mpi_allreduce), sums each rank's towers in tower order and adds the ranks'
 * sums with MPI_Allreduce (MPI_SUM, the library's order: equal to the
 * ordered sum to float rounding, not bit for bit), then divides by R x T:
 * Horovod's traffic (about 2(R-1)/R x M a rank) instead of R x T x M.
 * What it does not do: GPU buffers across ranks (NCCL), parameter servers
 * across ranks, asynchronous updates.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/ranks.h"
#include "train/mode.h"

typedef struct {
    float *send;   /* (T, n_params) this rank's tower gradients, packed; NULL with one rank */
    float *recv;   /* (R, T, n_params) every rank's; NULL with one rank (in the memory bound: mode_host_n_bytes) */
    float *stats;  /* (R, 1 + 3T): each rank's step code, then per tower loss, accuracy, examples */
} MpiState;


static void mode_describe(const Trainer *tr, const char *ts) {
    printf("%s: global batch %d = %d rank(s) x %d tower(s); mode %s: every tower keeps its own variables and "
           "momentum slots (%s); every tower gradient of every rank gathered (%s, MPI_Allgather on host buffers), "
           "summed in the job's tower order and divided by %d, every tower applies the update; "
           "each tower also updates its share of the moving averages; rank %d of %d%s\n",
           ts, tr->global_batch, tr->n_ranks, tr->n_towers, trainer_mode_name(tr->mode),
           tr->replicas_bound ? "computed on in place" : "copied in each step", ranks_library(),
           tr->n_ranks * tr->n_towers, tr->rank, tr->n_ranks, tr->rank == 0 ? " (logs, summaries, checkpoints)" : "");
}

/* Rank 0's server state to every rank, the replicas, the buffers. */
static int open_common(Trainer *tr, int gather, char *err, size_t err_n_bytes) {
    ParamServer *ps = tr->ps;
    const size_t M = tr->spec.n_params;
    const int R = tr->n_ranks, T = tr->n_towers;
    ranks_bcast(ps->block, ps->block_n_bytes);
    train_ranks_bcast_state(tr);
    if (ps_create_replicas(ps, T) != 0) {
        snprintf(err, err_n_bytes, "cannot allocate %d replicas of %zu variables (out of memory?)", T, M);
        return -1;
    }
    MpiState *st = calloc(1, sizeof *st);
    if (st && R > 1 && gather) { /* one rank sums its towers' own buffers; the all-reduce sums in ps->grads */
        st->send = malloc((size_t)T * M * sizeof(float));
        st->recv = malloc((size_t)R * T * M * sizeof(float));
    }
    if (st) st->stats = malloc((size_t)R * (1 + 3 * T) * sizeof(float));
    tr->mode_state = st;
    if (!st || (R > 1 && gather && (!st->send || !st->recv)) || !st->stats) {
        snprintf(err, err_n_bytes, "cannot allocate the gather buffers of %d x %d gradients of %zu floats (out of memory?)",
                 R, T, M);
        return -1;
    }
    tr->replicas_bound = tower_group_bind_params(tr->towers, tr->ps->replica_params, err, err_n_bytes);
    return tr->replicas_bound < 0 ? -1 : 0;
}

static int mode_open(Trainer *tr, char *err, size_t err_n_bytes) { return open_common(tr, 1, err, err_n_bytes); }

static int allreduce_open(Trainer *tr, char *err, size_t err_n_bytes) { return open_common(tr, 0, err, err_n_bytes); }

void train_ranks_bcast_state(Trainer *tr) {
    ParamServer *ps = tr->ps;
    long state[2] = {ps->global_step, tr->examples_consumed};
    ranks_bcast(state, sizeof state);
    ps->global_step = state[0];
    tr->examples_consumed = state[1];
    ranks_bcast(&tr->resume_run, sizeof tr->resume_run); /* the parts' own counts (trainer_open's part_start) */
    ranks_bcast(&ps->last_lr, sizeof ps->last_lr);
    ranks_bcast(ps->scalars, sizeof ps->scalars); /* Adam's beta powers: a rank that read no checkpoint has the initial ones */
}

int train_ranks_agree(Trainer *tr, float *stats, int rc, const int *shard_n, float *loss, char *err,
                      size_t err_n_bytes) {
    /* T: a worker's towers; a server-only rank (--ps_dedicated, ranks below n_servers) sends its code and T unused
     * entries, so that every rank's row has the same width. */
    const int R = tr->n_ranks, T = tr->worker_towers, W = 1 + 3 * T;
    float mine[1 + 3 * TOWER_MAX_TOWERS] = {0};
    mine[0] = (float)rc;
    for (int t = 0; t < tr->n_towers; t++) {
        mine[1 + 3 * t] = tr->tower_losses[t];
        mine[2 + 3 * t] = tr->tower_accuracy[t];
        mine[3 + 3 * t] = (float)shard_n[t];
    }
    ranks_allgather(mine, stats, (size_t)W * sizeof(float));
    int failed = -1, diverged = 0;
    double loss_sum = 0.0, correct = 0.0, n_examples = 0.0;
    for (int r = 0; r < R; r++) {
        const float *s = stats + (size_t)r * W;
        if (s[0] == -1.0f && failed < 0) failed = r;
        if (s[0] == -2.0f) diverged = 1;
        for (int t = 0; t < T && r >= tr->n_servers; t++) {
            loss_sum += train_tower_weight(tr, (int)s[3 + 3 * t]) * s[1 + 3 * t]; /* --loss_scaling */
            correct += (double)s[2 + 3 * t] * s[3 + 3 * t];
            n_examples += s[3 + 3 * t];
        }
    }
    if (failed >= 0) {
        if (rc != -1) snprintf(err, err_n_bytes, "rank %d of %d: a tower failed (its own line says why)", failed, R);
        return -1;
    }
    *loss = (float)(loss_sum / (tr->n_workers * T));
    tr->accuracy = n_examples > 0 ? (float)(correct / n_examples) : 0.0f;
    if (diverged && isfinite(*loss)) *loss = NAN;
    return diverged ? -2 : 1;
}

/* The towers on their replicas, the agreement on the step's outcome, the
 * gather, the ordered mean, each replica's update, global_step + 1. */
static int step_common(Trainer *tr, PipelineBatch *batch, float *loss, int gather, char *err, size_t err_n_bytes) {
    ParamServer *ps = tr->ps;
    MpiState *st = tr->mode_state;
    const int R = tr->n_ranks, T = tr->n_towers;
    const size_t M = tr->spec.n_params;
    int shard_n[TOWER_MAX_TOWERS] = {0};
    for (int t = 0; t < T; t++) shard_n[t] = batch->shard_n[t];
    tr->step_lr = ps_step_lr(ps);
    TowerStep ts = {.hooks = NULL};
    for (int t = 0; t < T; t++) ts.params[t] = tr->replicas_bound ? NULL : ps->replica_params[t];
    int rc = train_run_towers(tr, &ts, batch, loss, err, err_n_bytes);
    tr->times.average.start_sec = tower_now_sec();
    rc = train_ranks_agree(tr, st->stats, rc, shard_n, loss, err, err_n_bytes);
    if (rc != 1) return rc;
    const float *g[PIPELINE_MAX_SHARDS];
    if (!gather) { /* --all_reduce mpi_allreduce: this rank's towers in tower order, then MPI_SUM across ranks */
        for (int t = 0; t < T; t++) g[t] = ps->tower_grads[t];
        ps_sum_in_order(ps->grads, g, T, M, 1);
        ranks_allreduce_sum(ps->grads, M);
        count_divide(ps->grads, M, R * T);
    } else if (R == 1) {
        for (int t = 0; t < T; t++) g[t] = ps->tower_grads[t];
    } else {
        for (int t = 0; t < T; t++) memcpy(st->send + (size_t)t * M, ps->tower_grads[t], M * sizeof(float));
        ranks_allgather(st->send, st->recv, (size_t)T * M * sizeof(float));
        for (int k = 0; k < R * T; k++) g[k] = st->recv + (size_t)k * M;
    }
    if (gather) ps_sum_in_order(ps->grads, g, R * T, M, R * T);
    tr->times.average.end_sec = tr->times.apply.start_sec = tower_now_sec();
    for (int t = 0; t < T; t++) ps_replica_apply(ps, t, ps->grads, tr->step_lr);
    ps_finish_replicated_step(ps, tr->step_lr);
    /* Batch norm's moving statistics: every rank's towers in the job's order, into every replica (train/batch_norm.c). */
    const int moving_rc = train_update_moving(tr, ps->replica_params, T, *loss, err, err_n_bytes);
    tr->times.apply.end_sec = tower_now_sec();
    return moving_rc == 0 ? 1 : moving_rc;
}

static int mode_step(Trainer *tr, PipelineBatch *batch, float *loss, char *err, size_t err_n_bytes) {
    return step_common(tr, batch, loss, 1, err, err_n_bytes);
}

static int allreduce_step(Trainer *tr, PipelineBatch *batch, float *loss, char *err, size_t err_n_bytes) {
    return step_common(tr, batch, loss, 0, err, err_n_bytes);
}

static void allreduce_describe(const Trainer *tr, const char *ts) {
    printf("%s: global batch %d = %d rank(s) x %d tower(s); mode %s: every tower keeps its own variables and "
           "momentum slots; each rank sums its towers' gradients in tower order, the ranks add those sums with "
           "MPI_Allreduce (MPI_SUM on a host buffer, %s: the library's order, so equal to the ordered sum to float "
           "rounding), divided by %d; every tower applies the update; rank %d of %d%s\n",
           ts, tr->global_batch, tr->n_ranks, tr->n_towers, trainer_mode_name(tr->mode), ranks_library(),
           tr->n_ranks * tr->n_towers, tr->rank, tr->n_ranks, tr->rank == 0 ? " (logs, summaries, checkpoints)" : "");
}

static size_t allreduce_host_n_bytes(const Trainer *tr) {
    return (size_t)tr->n_ranks * (1 + 3 * (size_t)tr->n_towers) * sizeof(float) + sizeof(MpiState);
}

/* mode_open's buffers: with several ranks the send (T x M) and gather (R x T x M) floats; the step codes. */
static size_t mode_host_n_bytes(const Trainer *tr) {
    const size_t M = tr->spec.n_params, R = (size_t)tr->n_ranks, T = (size_t)tr->n_towers;
    return (R > 1 ? (T + R * T) * M * sizeof(float) : 0) + R * (1 + 3 * T) * sizeof(float) + sizeof(MpiState);
}

/* Every tower holds the same variables: save tower 0's. */
static void mode_save(const Trainer *tr) { ps_gather_replica(tr->ps, 0); }

/* Tower 0's replica (ps->params is only refreshed at a save). */
static const float *mode_variables(const Trainer *tr) { return tr->ps->replica_params[0]; }

static void mode_close(Trainer *tr) {
    MpiState *st = tr->mode_state;
    if (st) {
        free(st->send);
        free(st->recv);
        free(st->stats);
        free(st);
    }
    tr->mode_state = NULL;
}

static const char *const aliases[] = {"replicated/mpi", NULL};

const TrainModeI train_mode_replicated_mpi = {
    .name = "replicated_mpi",
    .variable_update = "replicated",
    .placement = "mpi",
    .flags = "--variable_update replicated --all_reduce mpi",
    .aliases = aliases,
    .across_ranks = 1,
    .server_row = "server: input, gather across ranks, apply",
    .server_apply = "apply",
    .available = train_mode_always_available,
    .describe = mode_describe,
    .open = mode_open,
    .step = mode_step,
    .save = mode_save,
    .host_n_bytes = mode_host_n_bytes,
    .variables = mode_variables,
    .close = mode_close,
};

static const char *const allreduce_aliases[] = {"replicated/mpi_allreduce", NULL};

/* The bandwidth-optimal form (Horovod's): MPI_Allreduce, whose order is the library's. */
const TrainModeI train_mode_replicated_mpi_allreduce = {
    .name = "replicated_mpi_allreduce",
    .variable_update = "replicated",
    .placement = "mpi_allreduce",
    .flags = "--variable_update replicated --all_reduce mpi_allreduce",
    .aliases = allreduce_aliases,
    .across_ranks = 1,
    .server_row = "server: input, all-reduce across ranks, apply",
    .server_apply = "apply",
    .available = train_mode_always_available,
    .describe = allreduce_describe,
    .open = allreduce_open,
    .step = allreduce_step,
    .save = mode_save,
    .host_n_bytes = allreduce_host_n_bytes,
    .variables = mode_variables,
    .close = mode_close,
};
