/* mode_ps_mpi.c — --variable_update parameter_server across the ranks of
 * `mpirun -np R tower train` (TensorFlow's between-graph replication with
 * tf.compat.v1.train.replica_device_setter: variables spread over `ps`
 * tasks, workers pushing gradients and pulling variables, synchronously).
 * Chosen by --local_parameter_device mpi, or by the default
 * parameter_server (--local_parameter_device cpu) when mpirun started
 * several ranks (ps_cpu's settle).
 *
 * The shards.  Every variable lives whole on one parameter-server rank: the
 * first --ps_ranks N ranks (default every rank), placed at open by
 * --ps_placement greedy (TensorFlow's GreedyLoadBalancingStrategy with
 * byte_size_load_fn) or round_robin (ps/placement.h).  By default the
 * servers are co-located with the workers (every rank computes); with
 * --ps_dedicated the N ranks only serve (TensorFlow's `ps` tasks: no towers,
 * no input, Trainer.worker -1) and ranks N .. R-1 are the W = R - N workers
 * (without it W = R).  A rank's shard is its variables in table order; a
 * rank holds optimizer slots and moving averages only for its shard
 * (mode_server_keeps: ps_create's PsConfig.keep, the rest never touched),
 * and keeps them current.  Every rank keeps a full copy of the variables
 * (what a worker pulls), global_step, the learning rate schedule and the
 * optimizer's scalars (Adam's beta powers), which every rank advances alike.
 *
 * One synchronous step (R ranks, W of them workers of T towers):
 *   1. each worker's T towers on the variables (copy-in, forward, backward,
 *      copy-out); a server-only rank has none;
 *   2. every rank agrees on the step's outcome (train_ranks_agree: a failed
 *      tower or a non-finite loss anywhere stops every rank alike);
 *   3. the worker sums its towers' gradients in tower order (g0 + g1 + ...);
 *   4. push: each shard's slice of that sum to its owner (MPI_Alltoallv; a
 *      server-only rank sends nothing);
 *   5. the owner adds the W workers' slices in worker order and divides by
 *      W x T: ((s0 + s1) + s2) + ... / (W T), a fixed order, so a run is
 *      bitwise reproducible and does not depend on --ps_ranks, the
 *      placement or whether the servers are dedicated; with T = 1 (or
 *      W = 1) it is ps_average_grads' sum, so the job is bitwise one
 *      process of W x T towers in ps_cpu;
 *   6. every rank learns whether any mean is non-finite (MPI_Allreduce; the
 *      step is then not applied, anywhere);
 *   7. the owner applies the optimizer (any of ps/optimizer.h's table) to
 *      its variables and slots, global_step + 1 everywhere, the owner moves
 *      its moving averages (ps_apply_gradients' order, elementwise, so the
 *      same bits as the whole block);
 *   8. pull: every owner's updated variables to every rank (MPI_Allgatherv).
 * With one process (no mpirun) rank 0 owns everything and the step is
 * ps_cpu's arithmetic.
 *
 * Checkpoints (trainer_save, which every rank calls): with
 * --checkpoint_writers owners (the default) each parameter-server rank
 * writes its shard's file and rank 0, once every rank says its shard is
 * written, the manifest and then the index (ps/checkpoint.h's
 * ckpt_save_shard, ckpt_commit_shards), so they all need rank 0's
 * train_dir (mode_train_dir_writers: trainer_open proves it before the
 * first step); with rank0 the owners' slots and
 * moving averages are gathered to rank 0 (MPI_Gatherv) into its
 * full-layout arrays, which it writes as the usual atomic checkpoint alone:
 * the file one process of W x T towers writes.  At a --resume rank 0 alone
 * loads (every slot: its arrays become resident in full); its variables
 * and scalars are broadcast and each owner takes its shard's slots and
 * moving averages from it, so the shards are re-cut from the loaded
 * checkpoint whatever the layout was when it was written.
 *
 * Where it sits: one entry of train/modes.c's table (train/mode.h); the
 * transport is base/ranks.c, the placement ps/placement.c.
 * Batch norm's moving statistics (--batch_norm tower): after the update,
 * every rank's towers in the job's order (train/batch_norm.c); server-only
 * ranks send rows the mean skips and write the same mean.
 * What it does not do: GPU buffers; --batch_norm sync with server-only ranks
 * (trainer_open refuses it: its sums run inside the workers' forward);
 * asynchronous updates are mode_ps_async.c (its settle picks it under
 * --sync_replicas false).
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/ranks.h"
#include "ps/placement.h"
#include "train/mode.h"

typedef struct {
    int n_ps;              /* parameter-server ranks: 0 .. n_ps - 1 */
    PsPlacement rule;
    PsShards sh;           /* the shards: owner, packed order, counts, displs (ps/placement.h) */
    int *no_counts;        /* (R) zeros: what a server-only rank pushes */
    int *recv_counts;      /* (R) the push: own shard size from every worker rank, 0 from a server-only one */
    int *recv_displs;      /* (R) w x own shard size for worker w (rank n_servers + w) */
    float *packed;         /* (M) a block in owner order: the push's send, the pull's receive */
    float *recv;           /* (W, own) the W workers' slices of this rank's shard */
    float *mean;           /* (own) the shard's mean gradient */
    float *gather;         /* (M) rank 0 with --checkpoint_writers rank0 across ranks: a gathered slot or moving
                              average, packed; NULL elsewhere */
    float *stats;          /* (R, 1 + 3T) train_ranks_agree's buffer, T a worker's towers */
} PsMpiState;

/* The floats of each buffer of PsMpiState, from the trainer and this rank's
 * shard size: what mode_open allocates and mode_host_n_bytes counts. */
typedef struct {
    size_t packed, recv, mean, stats, gather;
} PsMpiBufs;

static PsMpiBufs ps_mpi_bufs(const Trainer *tr, size_t own) {
    const int R = tr->n_ranks;
    const char *writers = tr->opt.checkpoint_writers ? tr->opt.checkpoint_writers : "owners";
    const int gathers = tr->rank == 0 && R > 1 && !strcmp(writers, "rank0");
    const size_t M = tr->spec.n_params;
    return (PsMpiBufs){.packed = M,
                       .recv = (size_t)tr->n_workers * own + 1,
                       .mean = own + 1,
                       .stats = (size_t)R * (1 + 3 * (size_t)tr->worker_towers),
                       .gather = gathers ? M : 0};
}

static void mode_describe(const Trainer *tr, const char *ts) {
    const PsMpiState *st = tr->mode_state;
    const int T = tr->worker_towers;
    char where[160];
    if (tr->n_servers > 0)
        snprintf(where, sizeof where, "ranks 0 .. %d, dedicated: no towers, no input (--ps_dedicated); workers: ranks %d .. %d",
                 st->n_ps - 1, st->n_ps, tr->n_ranks - 1);
    else
        snprintf(where, sizeof where, "%s", st->n_ps == tr->n_ranks ? "every rank, co-located with its worker"
                                                                  : "the first ranks, co-located with their workers");
    printf("%s: global batch %d = %d worker rank(s) x %d tower(s); mode %s: variables in shards on %d parameter-server "
           "rank(s) (%s), placed by %s%s; each worker sums its towers' gradients and pushes each shard's slice to its "
           "owner (MPI_Alltoallv), the owner adds the %d workers' slices in worker order, divides by %d, applies %s to "
           "its variables, slots and moving averages (kept for its shard only), and every rank pulls the updated "
           "shards (MPI_Allgatherv); rank %d of %d%s\n",
           ts, tr->global_batch, tr->n_workers, T, trainer_mode_name(tr->mode), st->n_ps, where,
           ps_placement_name(st->rule), st->rule == PS_PLACE_GREEDY ? " (GreedyLoadBalancingStrategy, byte_size_load_fn)" : "",
           tr->n_workers, tr->n_workers * T, optimizer_name(&tr->ps->cfg.opt), tr->rank, tr->n_ranks,
           tr->rank == 0 ? " (logs, summaries, checkpoints)" : "");
    for (int r = 0; r < st->n_ps; r++) {
        char names[1024] = "";
        size_t used = 0;
        int n = 0;
        for (int i = 0; i < tr->spec.n_vars; i++) {
            if (st->sh.owner[i] != r) continue;
            n++;
            if (used < sizeof names)
                used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", tr->spec.vars[i].name);
        }
        printf("%s: ps rank %d: %d variable(s), %zu bytes (%.2f MiB): %s\n", ts, r, n, st->sh.shard_n_bytes[r],
               st->sh.shard_n_bytes[r] / (1024.0 * 1024.0), n ? names : "(none)");
    }
}

static void mode_close(Trainer *tr) {
    PsMpiState *st = tr->mode_state;
    if (st) {
        ps_shards_free(&st->sh);
        free(st->no_counts);
        free(st->recv_counts);
        free(st->recv_displs);
        free(st->packed);
        free(st->recv);
        free(st->mean);
        free(st->gather);
        free(st->stats);
        free(st);
    }
    tr->mode_state = NULL;
}

/* The flags and the model size, before any collective (TrainModeI.check). */
int train_ps_ranks_placement(const Trainer *tr, PsPlacement *rule, char *err, size_t err_n_bytes) {
    if (tr->opt.ps_ranks < 0 || tr->opt.ps_ranks > tr->n_ranks) {
        snprintf(err, err_n_bytes, "--ps_ranks %d: expected 1 to %d (the ranks of this job), or 0 for every rank",
                 tr->opt.ps_ranks, tr->n_ranks);
        return -1;
    }
    return ps_placement_from_name(tr->opt.ps_placement ? tr->opt.ps_placement : "greedy", rule, err, err_n_bytes);
}

static int mode_check(const Trainer *tr, char *err, size_t err_n_bytes) {
    PsPlacement rule;
    if (train_ps_ranks_placement(tr, &rule, err, err_n_bytes) != 0) return -1;
    const char *writers = tr->opt.checkpoint_writers ? tr->opt.checkpoint_writers : "owners";
    if (strcmp(writers, "owners") != 0 && strcmp(writers, "rank0") != 0) {
        snprintf(err, err_n_bytes, "--checkpoint_writers '%s': expected owners or rank0", writers);
        return -1;
    }
    if (tr->spec.n_params > (size_t)0x7fffffff) {
        snprintf(err, err_n_bytes, "%zu variables: more than MPI's int counts", tr->spec.n_params);
        return -1;
    }
    return 0;
}

/* Rank 0's server to every rank, the placement, the buffers (the flags checked: mode_check). */
static int mode_open(Trainer *tr, char *err, size_t err_n_bytes) {
    ParamServer *ps = tr->ps;
    const int R = tr->n_ranks;
    const size_t M = tr->spec.n_params;
    PsPlacement rule;
    if (train_ps_ranks_placement(tr, &rule, err, err_n_bytes) != 0) return -1;
    ranks_bcast(ps->params, M * sizeof(float));
    train_ranks_bcast_state(tr);

    PsMpiState *st = calloc(1, sizeof *st);
    tr->mode_state = st;
    if (!st) goto oom;
    st->n_ps = tr->opt.ps_ranks > 0 ? tr->opt.ps_ranks : R;
    st->rule = rule;
    st->no_counts = calloc((size_t)R, sizeof *st->no_counts);
    st->recv_counts = calloc((size_t)R, sizeof *st->recv_counts);
    st->recv_displs = calloc((size_t)R, sizeof *st->recv_displs);
    if (ps_shards_init(&st->sh, &tr->spec, R, st->n_ps, rule) != 0 || !st->no_counts || !st->recv_counts ||
        !st->recv_displs)
        goto oom;
    const int own = st->sh.counts[tr->rank], W = tr->n_workers;
    for (int r = tr->n_servers; r < R; r++) {
        st->recv_counts[r] = own;
        st->recv_displs[r] = (r - tr->n_servers) * own;
    }
    if ((size_t)W * own > (size_t)0x7fffffff) {
        snprintf(err, err_n_bytes, "%d workers x a shard of %d floats: more than MPI's int displacements", W, own);
        return -1;
    }
    const PsMpiBufs b = ps_mpi_bufs(tr, (size_t)own);
    st->packed = malloc(b.packed * sizeof(float));
    st->recv = malloc(b.recv * sizeof(float));
    st->mean = malloc(b.mean * sizeof(float));
    st->stats = malloc(b.stats * sizeof(float));
    if (b.gather) st->gather = malloc(b.gather * sizeof(float));
    if (!st->packed || !st->recv || !st->mean || !st->stats || (b.gather && !st->gather)) goto oom;
    /* After a --resume, each owner's slots and moving averages from rank 0's (which alone loaded, all of them),
     * through the packed block: a rank keeps only its shard's (ps_create's keep, mode_server_keeps).  Fresh, every
     * rank made its own alike (the same seed's variables, the optimizer's initial slots). */
    int resumed = tr->resumed;
    ranks_bcast(&resumed, sizeof resumed);
    for (int k = 0; resumed && k <= ps->n_slots; k++) {
        float *x = k < ps->n_slots ? ps->slots[k] : ps->ema;
        if (!x) continue;
        if (tr->rank == 0) ps_shards_pack(&st->sh, &tr->spec, 0, R, x, st->packed);
        ranks_bcast(st->packed, M * sizeof(float));
        if (tr->rank != 0) ps_shards_unpack(&st->sh, &tr->spec, tr->rank, tr->rank + 1, st->packed, x);
    }
    /* A worker's CPU towers read its full copy of the variables in place (as ps_cpu's): it changes only between
     * steps (the owners' update, then the all-gather into it). */
    float *params[TOWER_MAX_TOWERS];
    for (int t = 0; t < tr->n_towers; t++) params[t] = ps->params;
    tr->params_bound = tr->n_towers > 0 && tr->towers ? tower_group_bind_params(tr->towers, params, err, err_n_bytes) : 0;
    return tr->params_bound < 0 ? -1 : 0;
oom:
    snprintf(err, err_n_bytes, "cannot allocate the parameter-server shards' buffers for %d rank(s) of %zu variables "
             "(out of memory?)", R, M);
    return -1;
}

/* st->mean = (recv[0] + recv[1] + ... + recv[W-1]) / n per element, in
 * worker order.  1 when a mean is not finite. */
static int mean_of_workers(PsMpiState *st, int W, size_t own, int n) {
    const float *g[W];
    for (int r = 0; r < W; r++) g[r] = st->recv + (size_t)r * own;
    return ps_sum_in_order(st->mean, g, W, own, n);
}

/* The owner's update of its shard: the optimizer on each of its variables
 * with the shard's mean (then global_step + 1 on every rank), then its
 * moving averages.  1 when a new variable is not finite. */
static int apply_shard(Trainer *tr, PsMpiState *st, float lr) {
    ParamServer *ps = tr->ps;
    OptStep step;
    ps_step_prepare(ps, lr, &step);
    const OptimizerI *opt = optimizer_i(ps->cfg.opt.kind);
    const int first = ps_shards_first(&st->sh, &tr->spec, tr->rank), last = ps_shards_first(&st->sh, &tr->spec, tr->rank + 1);
    int bad = 0;
    size_t at = 0;
    for (int k = first; k < last; k++) {
        const ModelVar *v = &tr->spec.vars[st->sh.order[k]];
        if (!v->trainable) { /* batch norm's moving statistics: train_update_moving's, not the optimizer's */
            at += v->n_floats;
            continue;
        }
        float *slots[OPT_MAX_SLOTS] = {NULL};
        for (int s = 0; s < ps->n_slots; s++) slots[s] = ps->slots[s] + v->offset;
        bad |= opt->apply(ps->params + v->offset, slots, st->mean + at, v->n_floats, &step) != 0;
        at += v->n_floats;
    }
    ps_finish_step(ps, lr);
    if (ps->ema) {
        const float decay = ema_decay_at(ps->cfg.ema_decay, ps->global_step);
        for (int k = first; k < last; k++) {
            const ModelVar *v = &tr->spec.vars[st->sh.order[k]];
            ema_apply(ps->ema + v->offset, ps->params + v->offset, v->n_floats, decay);
        }
    }
    return bad;
}

static int mode_step(Trainer *tr, PipelineBatch *batch, float *loss, char *err, size_t err_n_bytes) {
    ParamServer *ps = tr->ps;
    PsMpiState *st = tr->mode_state;
    const int R = tr->n_ranks, T = tr->n_towers, W = tr->n_workers; /* T: 0 on a server-only rank */
    int shard_n[TOWER_MAX_TOWERS] = {0};
    for (int t = 0; t < T; t++) shard_n[t] = batch->shard_n[t];
    const float lr = ps_step_lr(ps);
    TowerStep ts = {.hooks = NULL};
    for (int t = 0; t < T; t++) ts.params[t] = tr->params_bound ? NULL : ps->params;
    int rc = 1;
    *loss = 0.0f;
    if (T > 0) rc = train_run_towers(tr, &ts, batch, loss, err, err_n_bytes);
    tr->times.average.start_sec = tower_now_sec();
    rc = train_ranks_agree(tr, st->stats, rc, shard_n, loss, err, err_n_bytes);
    if (rc != 1) return rc;
    const int threads_before = omp_get_max_threads();
    omp_set_num_threads(tr->server_threads);
    if (T > 0) {
        ps_sum_in_order(ps->grads, (const float *const *)ps->tower_grads, T, ps->spec.n_params, 1); /* no divide */
        ps_shards_pack(&st->sh, &tr->spec, 0, R, ps->grads, st->packed);
    }
    ranks_alltoallv(st->packed, T > 0 ? st->sh.counts : st->no_counts, st->sh.displs, st->recv, st->recv_counts,
                    st->recv_displs);
    const size_t own = (size_t)st->sh.counts[tr->rank];
    const int grads_bad = ranks_any(mean_of_workers(st, W, own, W * tr->worker_towers));
    tr->times.average.end_sec = tr->times.apply.start_sec = tower_now_sec();
    if (grads_bad) {
        omp_set_num_threads(threads_before);
        return train_diverged(ps->global_step + 1, "non-finite gradients (not applied)", *loss, err, err_n_bytes);
    }
    int vars_bad = apply_shard(tr, st, lr);
    ps_shards_pack(&st->sh, &tr->spec, tr->rank, tr->rank + 1, ps->params, st->packed);
    ranks_allgatherv(st->packed + st->sh.displs[tr->rank], st->packed, st->sh.counts, st->sh.displs);
    ps_shards_unpack(&st->sh, &tr->spec, 0, R, st->packed, ps->params);
    vars_bad = ranks_any(vars_bad);
    omp_set_num_threads(threads_before);
    tr->times.apply.end_sec = tower_now_sec();
    if (vars_bad) return train_diverged(ps->global_step, "non-finite variables", *loss, err, err_n_bytes);
    /* Batch norm's moving statistics: every rank's towers in the job's order, the same mean on every rank
     * (train/batch_norm.c; a collective), as ps_cpu after its update. */
    const int moving_rc = train_update_moving(tr, &ps->params, 1, *loss, err, err_n_bytes);
    return moving_rc == 0 ? 1 : moving_rc;
}

/* Every rank, at the same point: each owner's slots and moving averages to
 * rank 0's host block (the variables are on every rank already).  One
 * process: rank 0 owns them all already. */
static void mode_save(const Trainer *tr) {
    const ParamServer *ps = tr->ps;
    PsMpiState *st = tr->mode_state;
    const int R = tr->n_ranks;
    if (R == 1) return;
    for (int s = 0; s <= ps->n_slots; s++) {
        float *x = s < ps->n_slots ? ps->slots[s] : ps->ema;
        if (!x) continue;
        ps_shards_pack(&st->sh, &tr->spec, tr->rank, tr->rank + 1, x, st->packed);
        ranks_gatherv(st->packed + st->sh.displs[tr->rank], st->gather, st->sh.counts, st->sh.displs);
        if (tr->rank == 0) ps_shards_unpack(&st->sh, &tr->spec, 0, R, st->gather, x);
    }
}

/* --checkpoint_writers owners (the default): each parameter-server rank
 * writes its shard's file (its variables, slots and moving averages,
 * ckpt_save_shard), every rank learns whether all succeeded
 * (MPI_Allreduce), and only then rank 0 writes the manifest and the index
 * (ckpt_commit_shards).  A kill at any moment leaves the index naming the
 * last checkpoint whose shards were all written.  rank0: mode_save's
 * gather and rank 0's single file. */
static int mode_write_checkpoint(Trainer *tr, const CkptRunState *run, char *err, size_t err_n_bytes) {
    PsMpiState *st = tr->mode_state;
    int rc = 0;
    if (strcmp(tr->opt.checkpoint_writers ? tr->opt.checkpoint_writers : "owners", "rank0") == 0) {
        mode_save(tr);
        if (tr->rank == 0) {
            rc = trainer_variables_finite(tr, err, err_n_bytes) ? ckpt_save(tr->opt.train_dir, tr->ps, run,
                                                                          tr->opt.keep_checkpoints, err, err_n_bytes) : -1;
        }
    } else if (!trainer_variables_finite(tr, err, err_n_bytes)) { /* the same variables on every rank: the same answer */
        rc = -1;
    } else if (tr->rank < st->n_ps) {
        unsigned char keep[MODEL_MAX_VARS];
        for (int i = 0; i < tr->spec.n_vars; i++) keep[i] = st->sh.owner[i] == tr->rank;
        rc = ckpt_save_shard(tr->opt.train_dir, tr->ps, keep, tr->rank, st->n_ps, run, err, err_n_bytes);
    }
    if (ranks_any(rc != 0)) {
        if (rc == 0)
            snprintf(err, err_n_bytes, "step %ld: another rank could not write its part of the checkpoint (its line "
                     "says why); the previous checkpoint stays the latest", tr->ps->global_step);
        return -1;
    }
    if (strcmp(tr->opt.checkpoint_writers ? tr->opt.checkpoint_writers : "owners", "rank0") == 0) return 0;
    if (tr->rank == 0)
        rc = ckpt_commit_shards(tr->opt.train_dir, tr->ps->global_step, st->n_ps, tr->opt.keep_checkpoints, err,
                                err_n_bytes);
    if (ranks_any(rc != 0)) {
        if (rc == 0) snprintf(err, err_n_bytes, "step %ld: rank 0 could not write the checkpoint's index", tr->ps->global_step);
        return -1;
    }
    return 0;
}

/* --checkpoint_writers owners: every parameter-server rank writes its shard's file into train_dir (rank 0 the
 * manifest and the index), so they must all see one directory; rank0: rank 0 alone. */
static int mode_train_dir_writers(const Trainer *tr, const char **advice) {
    *advice = "each parameter-server rank writes its shard of every checkpoint there (--checkpoint_writers owners), "
              "so every host must see the one directory (docs/hosts.md); where the hosts share none, pass "
              "--checkpoint_writers rank0";
    if (strcmp(tr->opt.checkpoint_writers ? tr->opt.checkpoint_writers : "owners", "owners") != 0) return 1;
    return tr->opt.ps_ranks > 0 && tr->opt.ps_ranks <= tr->n_ranks ? tr->opt.ps_ranks : tr->n_ranks;
}

size_t train_ps_own_n_floats(const Trainer *tr) {
    const int R = tr->n_ranks, n_vars = tr->spec.n_vars;
    const size_t M = tr->spec.n_params;
    const int n_ps = tr->opt.ps_ranks > 0 && tr->opt.ps_ranks <= R ? tr->opt.ps_ranks : R;
    PsPlacement rule = PS_PLACE_GREEDY;
    char e[128];
    if (ps_placement_from_name(tr->opt.ps_placement ? tr->opt.ps_placement : "greedy", &rule, e, sizeof e) != 0)
        rule = PS_PLACE_GREEDY;
    int *owner = malloc((size_t)n_vars * sizeof *owner);
    size_t *var_n_bytes = malloc((size_t)n_vars * sizeof *var_n_bytes), *shard = calloc((size_t)R, sizeof *shard);
    size_t own = M; /* without the tables: the most a shard can be */
    if (owner && var_n_bytes && shard) {
        for (int i = 0; i < n_vars; i++) var_n_bytes[i] = tr->spec.vars[i].n_floats * sizeof(float);
        ps_place_variables(var_n_bytes, n_vars, n_ps, rule, owner, shard);
        own = tr->rank < R ? shard[tr->rank] / sizeof(float) : M;
    }
    free(owner);
    free(var_n_bytes);
    free(shard);
    return own;
}

/* mode_open's buffers, from the placement (a pure function of the table): the packed block (M), the workers'
 * slices of this rank's shard (W x own), its mean (own), rank 0's save gather (M, --checkpoint_writers rank0
 * across ranks), the step codes, the tables. */
static size_t mode_host_n_bytes(const Trainer *tr) {
    const int R = tr->n_ranks;
    const PsMpiBufs b = ps_mpi_bufs(tr, train_ps_own_n_floats(tr));
    const size_t counts = 3 * (size_t)R * sizeof(int); /* no_counts, recv_counts, recv_displs */
    return (b.packed + b.recv + b.mean + b.stats + b.gather) * sizeof(float) + counts +
           ps_shards_n_bytes(tr->spec.n_vars, R) + sizeof(PsMpiState);
}

/* Before the server exists: this rank keeps the slots and moving averages of
 * the variables it owns (the placement mode_open makes, from the same
 * table), none on a rank that is no parameter server. */
static void mode_server_keeps(const Trainer *tr, unsigned char *keep) {
    const int R = tr->n_ranks, n_vars = tr->spec.n_vars;
    const int n_ps = tr->opt.ps_ranks > 0 && tr->opt.ps_ranks <= R ? tr->opt.ps_ranks : R;
    PsPlacement rule = PS_PLACE_GREEDY;
    char e[128];
    if (ps_placement_from_name(tr->opt.ps_placement ? tr->opt.ps_placement : "greedy", &rule, e, sizeof e) != 0)
        rule = PS_PLACE_GREEDY; /* mode_open refuses it */
    int owner[MODEL_MAX_VARS];
    size_t var_n_bytes[MODEL_MAX_VARS], *shard = calloc((size_t)n_ps, sizeof *shard);
    for (int i = 0; i < n_vars; i++) var_n_bytes[i] = tr->spec.vars[i].n_floats * sizeof(float);
    if (shard) ps_place_variables(var_n_bytes, n_vars, n_ps, rule, owner, shard);
    for (int i = 0; i < n_vars; i++) keep[i] = !shard || owner[i] == tr->rank; /* out of memory: keep all, as before */
    free(shard);
}

/* The variables every rank pulled in the last step (no gather). */
static const float *mode_variables(const Trainer *tr) { return tr->ps->params; }

/* --sync_replicas false: the asynchronous parameter servers (mode_ps_async.c). */
static const TrainModeI *mode_settle(const Trainer *tr) {
    extern const TrainModeI train_mode_ps_mpi_async;
    return tr->opt.sync_replicas ? NULL : &train_mode_ps_mpi_async;
}

static const char *const aliases[] = {"parameter_server/mpi", NULL};

const TrainModeI train_mode_ps_mpi = {
    .name = "ps_mpi",
    .variable_update = "parameter_server",
    .placement = "mpi",
    .flags = "--variable_update parameter_server --local_parameter_device mpi",
    .aliases = aliases,
    .across_ranks = 1,
    .save_on_every_rank = 1,
    .dedicated_servers = 1,
    .server_row = "server: input, push to the shards' owners, apply, pull",
    .server_apply = "apply",
    .available = train_mode_always_available,
    .settle = mode_settle,
    .describe = mode_describe,
    .server_keeps = mode_server_keeps,
    .check = mode_check,
    .open = mode_open,
    .step = mode_step,
    .save = mode_save,
    .write_checkpoint = mode_write_checkpoint,
    .train_dir_writers = mode_train_dir_writers,
    .host_n_bytes = mode_host_n_bytes,
    .variables = mode_variables,
    .close = mode_close,
};
