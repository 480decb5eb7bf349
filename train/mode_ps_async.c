/* mode_ps_async.c — asynchronous parameter servers across the ranks of
 * `mpirun -np R tower train --sync_replicas false` (TensorFlow's default
 * between-graph training: tf.compat.v1.train.replica_device_setter without
 * SyncReplicasOptimizer; each worker's apply_gradients runs on the ps tasks
 * as soon as it arrives).  Chosen by --sync_replicas false with
 * --variable_update parameter_server under mpirun with several ranks
 * (ps_cpu's and ps_mpi's settle).
 *
 * The shards are ps_mpi's (mode_ps_mpi.c): every variable whole on one of
 * the first --ps_ranks ranks, placed by --ps_placement; the owner alone
 * keeps its shard's current values, optimizer slots and moving averages.
 *
 * One worker step, on each rank on its own (no rank waits for the others
 * except as --max_staleness says):
 *   1. its T towers on the variables it last pulled;
 *   2. it averages its towers' gradients in tower order ((g0 + g1 + ...) / T);
 *   3. push: to every parameter-server rank p, its shard's slice of that
 *      mean, with the step t and the shard version the worker last pulled;
 *   4. owner p, on arrival, in arrival order, one worker's gradient at a
 *      time: the optimizer on its variables and slots (learning rate from
 *      its own update count), update count + 1, its moving averages, then
 *      batch norm's moving statistics (below);
 *   5. pull: owner p answers with its shard's current values and version,
 *      at once, or (bounded staleness) once every worker has pushed step
 *      t - S, so that no worker starts step t + 1 before every worker has
 *      pushed step t - S (--max_staleness S, default 16; S = 0: the workers
 *      go in lockstep, each worker's gradient still applied on its own).
 * Staleness of an applied gradient: the updates applied to the shard
 * between the worker's pull and its push.  Under the bound S a worker u
 * pushes steps t - S .. t + S while another pushes step t, so it is at most
 * (W - 1)(2S + 1) updates (W workers); the owners check every gradient
 * against that and end the job, one line, if it is ever exceeded.  Rank 0
 * prints the mean and max seen over all shards (the pull answers carry each
 * owner's figures) every --log_every steps; a server-only rank 0 (below)
 * pulls nothing and prints its own shard's.
 *
 * global_step, TensorFlow's convention: the count of applied worker
 * updates.  Each owner applies every worker's every push, so each owner's
 * count is the job's.  A worker's global_step after its step k is the
 * count at open + the worker steps of rounds 1 .. k as owner 0 knows them
 * when it answers the pull (round_steps: W a round while every worker
 * runs), a passive rank's the same, exact (below), and every rank takes the
 * owners' count at each save.  The schedule, the same on every
 * rank without a message (tr->schedule_step, trainer_schedule_step): W a
 * round from the count at open, round k being every worker's k-th step;
 * --max_steps N ends the job after round ceil(N / W), --save_every E saves
 * after each round whose schedule count is a multiple of E.  With every
 * worker to the end both are the applied updates, N and every E; --save_every
 * and the end are the only points the ranks share (a stop by signal is
 * agreed through the pushes, below).
 *
 * Batch norm's moving statistics (--batch_norm tower): TensorFlow runs
 * each worker's UPDATE_OPS on the ps variables, in arrival order.  Here a
 * worker's push also carries each tower's share of the update, batch *
 * (1 - momentum) (train_moving_shares: the backend's update on statistics
 * of zero), and the owner sets moving = (sum over towers, in tower order,
 * of moving * momentum + share) / T (batchnorm_apply_moving_share: the
 * float operations of train/batch_norm.c after a synchronous step); the
 * pulls bring the statistics back with the variables.  --batch_norm sync
 * is refused: a global batch's statistics need a synchronous step.
 *
 * A stop by signal: the ranks meet nowhere between save points, so a
 * worker asked to stop (tr->stop_requested) marks its pushes; owner 0, on
 * the first, fixes the worker step count every worker stops after (one
 * more than the furthest has pushed: each worker has at most one push in
 * flight, so none has passed it when owner 0's next pull tells it), and
 * each worker sets tr->stop_agreed there (trainer_ranks_stop); all then
 * save that step, as at the end.
 *
 * Dedicated server ranks (--ps_dedicated --ps_ranks N, TensorFlow's `ps`
 * tasks apart from the workers): ranks 0 .. N-1 only serve (no towers, no
 * input, tr->worker < 0), ranks N .. R-1 are the W = R - N workers
 * (tr->n_workers); a push carries the workers' T (tr->worker_towers); a
 * server-only rank pushes nothing.  Its server thread runs as on a co-located rank; its main
 * thread still runs the trainer's loop as a passive rank, so that it meets
 * the workers at the save points and the end.
 *
 * The end of the input, with --ps_dedicated (any --input_split) or with
 * --input_split files or records on co-located ranks (TensorFlow's
 * asynchronous between-graph replication: each worker trains until its own
 * part ends, the job until the last one's).  With a split each worker reads
 * its own part, and the parts end at different steps.  The rule, in rounds
 * (round k: every worker's k-th step):
 *   - a worker whose input ended after e steps tells every owner
 *     (MSG_ENDED, e: the bound stops waiting for it) and stays in the job as
 *     a passive rank, as a server-only rank is one from the start (a
 *     co-located one's server thread serves its shard on);
 *   - a passive rank's step k (passive_step) waits until round k is known:
 *     every worker whose input has not ended has pushed step k.  Owner 0
 *     (rank 0) knows it under its lock and sleeps on a condition variable
 *     (no polling); the others ask owner 0 (MSG_WAIT k), whose server thread
 *     answers once it is known.  The answer: the worker steps of rounds
 *     1 .. k (k for each worker that took step k, e for one whose input ended
 *     after e < k), the stop fixed so far, the mean loss and accuracy of the
 *     round's workers' latest pushes; or the end, when every worker's input
 *     ended before step k;
 *   - so every rank, running or passive, runs the same rounds, and the save
 *     points and the end (the schedule's, or a stop's) fall after the same
 *     round on every rank: a worker whose part ended early still meets the
 *     others at every save that remains, then at the end, when the last
 *     part ends (every passive rank hears it at the round after; the last
 *     worker is passive then too);
 *   - a passive rank's global_step is the job's count through its round,
 *     exact: base + those worker steps (a round adds the workers still
 *     running); a running worker's is the same count as owner 0 knew it at
 *     its pull, exact unless a part's end reached owner 0 after the worker
 *     passed that round (possible only with S > 0, and then ahead by at most
 *     S + 1 a part), until the next save, where every rank takes owner 0's
 *     count (a barrier: every push of the round applied, none of a later
 *     one), which is the checkpoint's.  Rank 0 logs its own count (a server,
 *     or a co-located worker once passive: the exact one) and saves owner
 *     0's; after a part ended the saves of --save_every are still the
 *     schedule's rounds (the count in their names less than a multiple of
 *     E), and --max_steps N still ends after round ceil(N / W), fewer than N
 *     updates then.
 * Why rounds and not the updates for the schedule: a running worker that
 * finishes step k cannot know whether a worker up to S + 1 steps behind
 * will take step k (its part may end first), so no running rank can count
 * the job's updates between the points where the ranks meet without
 * waiting for the slowest; the rounds every rank knows without a message,
 * and the exact count is taken where they meet.
 * With --input_split none every worker's input ends after the same step:
 * with --ps_dedicated the same rule, all passive at the round after;
 * co-located ranks (none serves without a worker) end then, together,
 * without that round (mode_input_ended).  A signal to a passive
 * rank goes to owner 0 with its question (MSG_WAIT, stop 1), which fixes
 * the stop as for a worker's (it is fixed before any worker pushes that
 * count, so the answer of that round carries it).  Rank 0, owner 0, logs
 * each worker's end of input ("rank r (worker w): its input ended after e
 * step(s)").  A server-only rank 0, and a co-located rank 0 once passive,
 * logs for a step the mean of the round's workers' loss and accuracy in
 * their latest pushes (the pushes carry them); a server-only one its own
 * shard's staleness, and as its --histogram_every variables its own shard's
 * current values and the other shards' as of the last save.
 *
 * The examples consumed: a worker step is one worker's batch (global batch
 * / W).  A rank's count is the job's as its global_step (the count at open
 * + round_steps x that batch; the trainer adds nothing: set_counts); at a
 * save rank 0 takes owner 0's, from each worker's pushed steps, with each
 * worker part's own (tr->part_start, where its input started, + its steps x
 * its batch): the checkpoint records both (RunState.part_examples_consumed,
 * with the split).  --resume with as many workers and the same split skips
 * exactly each part's own; otherwise examples / W each (trainer.c,
 * settle_parts).
 *
 * The design: a server thread per parameter-server rank, beside the
 * worker, so an owner serves while its co-located worker computes.  It
 * receives any worker's push (MPI_Recv, MPI_ANY_SOURCE, on a communicator
 * of its own), applies, and answers with a blocking send; a worker posts its
 * receives for the answers before it pushes (ranks_exchange_each), so an
 * answer never waits for a worker still pushing elsewhere, and the
 * deferred answers of the bound cannot close a cycle.  This needs
 * MPI_THREAD_MULTIPLE (ranks_init asks it); without it the mode refuses
 * with one line.  The server's state (its copy of the variables, the
 * slots, moving averages, update count and Adam's powers) is its own; a
 * mutex guards it against the saves.
 *
 * Checkpoints: at trainer_save (every rank, at the same worker step) the
 * ranks meet (a barrier: every push is then applied), each owner's
 * variables, slots and moving averages are gathered to rank 0, which
 * writes the usual atomic checkpoint: a consistent snapshot, the one a
 * synchronous job would write.  --resume: rank 0's state broadcast at open,
 * the shards re-cut whatever R was.
 * With one rank (the library's test; `tower train` refuses --sync_replicas
 * false without several ranks) the worker applies its own gradient
 * inline: ps_cpu's and ps_mpi's arithmetic, bitwise.
 *
 * Where it sits: one entry of train/modes.c's table; the messages are
 * base/ranks.c's, the placement ps/placement.c.
 * What it does not do: --batch_norm sync, GPU buffers; a rank that fails
 * outside its step (not killed) waits for the other workers' last push
 * before the job ends.
 */
#include <limits.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/ranks.h"
#include "model/layers.h"
#include "ps/placement.h"
#include "train/mode.h"

enum { TAG_PUSH = 17, TAG_PULL = 18 };

/* What a message to a server thread is, by its header's step (>= 0: a push of that worker step). */
enum {
    MSG_DONE = -1,  /* a rank's last message: it is done (every rank sends it to every server at close) */
    MSG_WAIT = -2,  /* a passive rank -> owner 0: answer (TAG_PULL) once round `version` is known; `stop` 1: this
                       rank was asked to stop (a signal) */
    MSG_ENDED = -4, /* a worker -> every owner: its input ended after `version` steps (it pushes no more) */
};

/* What precedes the floats of a push (worker -> owner) and of a pull (owner -> worker). */
typedef struct {
    long step;      /* push: the worker's step t (< 0: a MSG_ kind above); pull: the step answered */
    long version;   /* push: the shard's version at the worker's last pull; pull: the shard's version now */
    long stale_sum; /* pull: the owner's staleness so far: sum, count and max over applied gradients */
    long stale_n;
    long stale_max;
    long stop;      /* push, MSG_WAIT: 1 when the rank was asked to stop; pull, round (owner 0): the worker step
                       count after which every worker stops, -1 none yet */
    double loss;    /* push: the worker's loss and accuracy in that step (a server-only rank 0 logs them) */
    double accuracy;
    long rounds;    /* pull from owner 0: the worker steps of rounds 1 .. step + 1 as it knows them (round_steps) */
} MsgHeader;

typedef struct {
    int n_ps;               /* parameter-server ranks: 0 .. n_ps - 1 */
    PsPlacement rule;
    PsShards sh;            /* the shards: owner, packed order, counts, displs (ps/placement.h) */
    float *packed;          /* (M) the worker's mean gradient, then the pulled variables, in owner order */
    float *gather;          /* (M) rank 0: a gathered array at a save; NULL elsewhere */
    unsigned char *out;     /* (n_ps, header + shard + T x shard's moving) the worker's pushes (push_n_bytes) */
    unsigned char *in;      /* (n_ps, as out) the pulls it receives (pull_n_bytes, at the pushes' offsets) */
    /* Batch norm's moving statistics (--batch_norm tower; none: n_moving 0). */
    size_t n_moving;        /* floats in the non-trainable variables */
    size_t *mcounts;        /* (R) floats of them in shard p */
    size_t *mdispls;        /* (R) the sum of mcounts before p */
    size_t *moving_at;      /* (n_vars) a non-trainable variable's offset in the spec-order packed statistics */
    double *momentum;       /* (n_vars) its layer's momentum (model_moving_momentum) */
    float *shares;          /* (T, n_moving) spec order: the worker's towers' shares, batch * (1 - momentum) */
    float *bn_tmp;          /* (T, own moving) the owner: each tower's moving * momentum + share */
    long stop_after;        /* the worker: the agreed worker step count to stop after, -1 none yet */
    long *pulled_version;   /* (n_ps) the version of shard p at the worker's last pull */
    MsgHeader *seen;        /* (n_ps) the last pull's header from each owner (rank 0's log) */
    long worker_step;       /* this worker's steps so far */
    long logged_at;         /* the global_step of rank 0's last staleness line */
    int failed;             /* a step failed: close does not wait for the others */
    long bound;             /* (W - 1)(2S + 1): the staleness no applied gradient may exceed */
    /* The owner's server (its thread with several ranks, else inline). */
    ParamServer srv;        /* a copy of *tr->ps whose params are srv_params: the update count, lr, scalars */
    float *srv_params;      /* (M) the current variables; only this rank's shard is kept current */
    float *mean;            /* (own + T x own moving + 1) the applied gradient (the pushed slice), then the shares */
    long stop_at;           /* owner 0: the worker step count every worker stops after, -1 none asked yet */
    unsigned char *srv_in;  /* (header + own + T x own moving) a push */
    unsigned char *srv_out; /* (header + own) a pull */
    long *pushed;           /* (R) steps each worker has pushed */
    long *pending;          /* (R) the step whose pull waits for the bound, -1 none */
    long *ended;            /* (R) the worker's input ended after that many steps (MSG_ENDED), -1 not yet */
    long *waiting;          /* (R) owner 0: the round a passive rank waits to hear of (MSG_WAIT), -1 none */
    int *done;              /* (R) the worker said it is done */
    long stale_sum, stale_n, stale_max;
    /* A passive rank (a server-only rank, or a worker whose input ended and stays): its step waits for
     * the round (owner 0 under the lock, the others by MSG_WAIT). */
    long base_step;         /* global_step at open: the rounds' counts start there */
    long base_examples;     /* examples_consumed at open, likewise */
    long saved_examples;    /* the job's examples at the last save (owner 0's count, broadcast) */
    long *saved_parts;      /* (R) rank 0: each worker part's examples at the last save (tr->part_start + its steps) */
    double *last_loss;      /* (R) owner 0: each worker's loss in its latest push */
    double *last_accuracy;  /* (R) and its accuracy */
    int stop_sent;          /* this passive rank has told owner 0 of its signal */
    pthread_cond_t moved;   /* owner 0: pushed, ended or stop_at changed (signalled under lock) */
    pthread_mutex_t lock;   /* srv, srv_params, slots, moving averages, staleness, pushed, ended, stop_at */
    pthread_t thread;
    int thread_started, p2p_open, lock_made, cond_made;
    const Trainer *tr;
} PsAsyncState;

/* A push to owner r: the header, the gradient's slice, then each tower's shares of r's moving statistics. */
static size_t push_n_bytes(const PsAsyncState *st, int r) {
    const size_t T = (size_t)st->tr->worker_towers;
    return sizeof(MsgHeader) + ((size_t)st->sh.counts[r] + T * st->mcounts[r]) * sizeof(float);
}

/* A pull from owner r: the header, the shard's values (its moving statistics among them). */
static size_t pull_n_bytes(const PsAsyncState *st, int r) {
    return sizeof(MsgHeader) + (size_t)st->sh.counts[r] * sizeof(float);
}

/* Byte offset of rank p's message in out / in. */
static size_t msg_at(const PsAsyncState *st, int p) {
    return (size_t)p * sizeof(MsgHeader) +
           ((size_t)st->sh.displs[p] + (size_t)st->tr->worker_towers * st->mdispls[p]) * sizeof(float);
}

/* The server's end of the job on a fault: one line, every rank ends. */
static void server_fatal(const Trainer *tr, const char *what) {
    fprintf(stderr, "tower: rank %d of %d: asynchronous parameter server: %s; ending the job\n", tr->rank, tr->n_ranks,
            what);
    fflush(stderr);
    ranks_abort(2);
    _Exit(2);
}

/* Owner: worker w's push (st->mean: the gradient of this rank's shard in
 * packed order, then its towers' shares of the moving statistics) computed
 * on the shard's version `pulled`: staleness, optimizer, update count + 1,
 * moving averages, then batch norm's moving statistics as
 * train_update_moving (ps_mpi's order): each tower's moving * momentum +
 * share, summed in tower order, / T.  Holds the lock. */
static void server_apply(PsAsyncState *st, int w, long pulled) {
    const Trainer *tr = st->tr;
    ParamServer *srv = &st->srv;
    const long stale = srv->global_step - pulled;
    st->stale_sum += stale;
    st->stale_n++;
    if (stale > st->stale_max) st->stale_max = stale;
    if (stale < 0 || (st->bound >= 0 && stale > st->bound)) {
        char what[200];
        snprintf(what, sizeof what, "worker %d's gradient is %ld update(s) stale, beyond the bound %ld "
                 "((W - 1)(2S + 1) for --max_staleness %d)", w, stale, st->bound, tr->opt.max_staleness);
        server_fatal(tr, what);
    }
    const size_t own = (size_t)st->sh.counts[tr->rank], own_moving = st->mcounts[tr->rank];
    const int T = tr->worker_towers;
    for (size_t i = 0; i < own + (size_t)T * own_moving; i++)
        if (float_nonfinite(st->mean[i])) {
            char what[160];
            snprintf(what, sizeof what, "non-finite gradient from worker %d at update %ld (Model diverged)", w,
                     srv->global_step + 1);
            server_fatal(tr, what);
        }
    const float lr = ps_step_lr(srv);
    OptStep step;
    ps_step_prepare(srv, lr, &step);
    const OptimizerI *opt = optimizer_i(srv->cfg.opt.kind);
    const int first = ps_shards_first(&st->sh, &tr->spec, tr->rank), last = ps_shards_first(&st->sh, &tr->spec, tr->rank + 1);
    int bad = 0;
    size_t at = 0;
    for (int k = first; k < last; k++) {
        const ModelVar *v = &tr->spec.vars[st->sh.order[k]];
        if (!v->trainable) { /* batch norm's moving statistics: below, not the optimizer's */
            at += v->n_floats;
            continue;
        }
        float *slots[OPT_MAX_SLOTS] = {NULL};
        for (int s = 0; s < srv->n_slots; s++) slots[s] = srv->slots[s] + v->offset;
        bad |= opt->apply(srv->params + v->offset, slots, st->mean + at, v->n_floats, &step) != 0;
        at += v->n_floats;
    }
    ps_finish_step(srv, lr);
    if (srv->ema) {
        const float decay = ema_decay_at(srv->cfg.ema_decay, srv->global_step);
        for (int k = first; k < last; k++) {
            const ModelVar *v = &tr->spec.vars[st->sh.order[k]];
            ema_apply(srv->ema + v->offset, srv->params + v->offset, v->n_floats, decay);
        }
    }
    const float *shares = st->mean + own; /* (T, own_moving) */
    const float n_f = (float)T;
    at = 0;
    for (int k = first; k < last; k++) {
        const ModelVar *v = &tr->spec.vars[st->sh.order[k]];
        if (v->trainable) continue;
        float *moving = srv->params + v->offset;
        for (int t = 0; t < T; t++)
            batchnorm_apply_moving_share(st->bn_tmp + (size_t)t * own_moving + at, moving,
                                         shares + (size_t)t * own_moving + at, st->momentum[st->sh.order[k]],
                                         v->n_floats);
        for (size_t i = 0; i < v->n_floats; i++) {
            float s = st->bn_tmp[at + i];
            for (int t = 1; t < T; t++) s += st->bn_tmp[(size_t)t * own_moving + at + i];
            moving[i] = s / n_f;
            bad |= float_nonfinite(moving[i]); /* batch norm's moving statistics diverge too */
        }
        at += v->n_floats;
    }
    if (bad) server_fatal(tr, "non-finite variables after an update (Model diverged)");
}

/* Owner 0: the worker steps of rounds 1 .. k as far as it knows: e_u for a worker whose input it heard ended after
 * e_u < k steps, k for every other.  Exact once round k is known (round_answer), and for a running worker's step k
 * unless a part that ends before step k has not told owner 0 yet (with --max_staleness S a worker may be up to S
 * steps past another's last push; S = 0: always exact).  Holds the lock. */
static long round_steps(const PsAsyncState *st, long k) {
    long count = 0;
    for (int u = st->tr->n_servers; u < st->tr->n_ranks; u++) count += st->ended[u] >= 0 && st->ended[u] < k ? st->ended[u] : k;
    return count;
}

/* Owner: the pull answering step t (its shard now) into msg. Holds the lock. */
static void server_pull(PsAsyncState *st, long t, unsigned char *msg) {
    const Trainer *tr = st->tr;
    MsgHeader h = {t, st->srv.global_step, st->stale_sum, st->stale_n, st->stale_max, st->stop_at, 0.0, 0.0,
                   tr->rank == 0 ? round_steps(st, t + 1) : 0};
    memcpy(msg, &h, sizeof h);
    size_t at = 0;
    float *dst = (float *)(msg + sizeof h);
    for (int k = ps_shards_first(&st->sh, &tr->spec, tr->rank); k < ps_shards_first(&st->sh, &tr->spec, tr->rank + 1); k++) {
        const ModelVar *v = &tr->spec.vars[st->sh.order[k]];
        memcpy(dst + at, st->srv_params + v->offset, v->n_floats * sizeof(float));
        at += v->n_floats;
    }
}

/* 1 when a worker may start step t + 1: every worker not done and whose input has not ended has pushed step
 * t - S (a server-only rank pushes nothing: not counted). */
static int may_pull(const PsAsyncState *st, long t) {
    for (int u = st->tr->n_servers; u < st->tr->n_ranks; u++)
        if (!st->done[u] && st->ended[u] < 0 && st->pushed[u] < t - st->tr->opt.max_staleness + 1) return 0;
    return 1;
}

/* Owner 0, a stop asked (a worker's push or a server-only rank's signal): every worker stops after one step
 * more than the furthest has pushed, a count none has passed when it hears (each has at most one push in flight
 * here).  Holds the lock. */
static void fix_stop(PsAsyncState *st) {
    if (st->stop_at >= 0) return;
    long furthest = 0;
    for (int u = st->tr->n_servers; u < st->tr->n_ranks; u++)
        if (st->pushed[u] > furthest) furthest = st->pushed[u];
    st->stop_at = furthest + 1;
    pthread_cond_broadcast(&st->moved);
}

/* Owner 0: round k (every worker's k-th step), once known: 1 with *h its answer to a passive rank: step k, or -1
 * when every worker's input ended before step k (the end); version the count of worker steps of rounds 1 .. k
 * (the job's updates since open: k for each worker that took step k, e_u for one whose input ended after e_u <
 * k steps); stop the stop fixed so far; loss and accuracy the mean of the round's workers' latest pushes.  0
 * while a worker whose input has not ended has not pushed step k.  Holds the lock. */
static int round_answer(const PsAsyncState *st, long k, MsgHeader *h) {
    int ran = 0;
    double loss = 0.0, accuracy = 0.0;
    for (int u = st->tr->n_servers; u < st->tr->n_ranks; u++) {
        if (st->ended[u] >= 0 && st->ended[u] < k) continue;
        if (st->pushed[u] < k) return 0;
        ran++;
        loss += st->last_loss[u];
        accuracy += st->last_accuracy[u];
    }
    *h = (MsgHeader){ran > 0 ? k : -1, round_steps(st, k), 0, 0, 0, st->stop_at, ran > 0 ? loss / ran : 0.0,
                     ran > 0 ? accuracy / ran : 0.0, 0};
    return 1;
}

/* The server thread: pushes in arrival order until every rank is done. */
static void *server_main(void *arg) {
    PsAsyncState *st = arg;
    const Trainer *tr = st->tr;
    const int R = tr->n_ranks;
    const size_t n_bytes = push_n_bytes(st, tr->rank), out_n_bytes = pull_n_bytes(st, tr->rank);
    int n_done = 0;
    omp_set_num_threads(tr->server_threads);
    while (n_done < R) {
        int w = -1;
        const size_t got = ranks_recv(st->srv_in, n_bytes, -1, TAG_PUSH, &w);
        MsgHeader h;
        if (got < sizeof h) server_fatal(tr, "a message shorter than its header");
        memcpy(&h, st->srv_in, sizeof h);
        if (h.step == MSG_DONE) {
            st->done[w] = 1;
            n_done++;
        } else if (h.step == MSG_ENDED || (h.step == MSG_WAIT && tr->rank == 0)) {
            pthread_mutex_lock(&st->lock);
            if (h.step == MSG_ENDED) st->ended[w] = h.version;
            else st->waiting[w] = h.version;
            if (h.step == MSG_WAIT && h.stop > 0) fix_stop(st);
            int running = 0;
            for (int u = tr->n_servers; u < R; u++) running += st->ended[u] < 0;
            pthread_cond_broadcast(&st->moved);
            pthread_mutex_unlock(&st->lock);
            if (h.step == MSG_ENDED && tr->rank == 0) { /* rank 0 logs (the others' stdout is /dev/null) */
                char ts[64];
                trainer_timestamp(ts, sizeof ts);
                printf("%s: rank %d (worker %d): its input ended after %ld step(s); %d worker(s) still running\n", ts,
                       w, w - tr->n_servers, h.version, running);
                fflush(stdout);
            }
        } else if (h.step < 0) {
            server_fatal(tr, "a message of an unknown kind");
        } else {
            if (got != n_bytes) server_fatal(tr, "a push of the wrong size");
            memcpy(st->mean, st->srv_in + sizeof h, n_bytes - sizeof h);
            pthread_mutex_lock(&st->lock);
            server_apply(st, w, h.version);
            st->pushed[w] = h.step + 1;
            st->last_loss[w] = h.loss;
            st->last_accuracy[w] = h.accuracy;
            if (tr->rank == 0 && h.stop > 0) fix_stop(st);
            pthread_cond_broadcast(&st->moved);
            pthread_mutex_unlock(&st->lock);
            st->pending[w] = h.step;
        }
        for (int u = 0; u < R; u++) {
            if (st->pending[u] < 0 || !may_pull(st, st->pending[u])) continue;
            pthread_mutex_lock(&st->lock);
            server_pull(st, st->pending[u], st->srv_out);
            pthread_mutex_unlock(&st->lock);
            ranks_send(st->srv_out, out_n_bytes, u, TAG_PULL);
            st->pending[u] = -1;
        }
        /* Owner 0: the passive ranks waiting for a round that is now known. */
        for (int u = 0; u < R && tr->rank == 0; u++) {
            MsgHeader a;
            pthread_mutex_lock(&st->lock);
            const int known = st->waiting[u] >= 0 && round_answer(st, st->waiting[u], &a);
            if (known) st->waiting[u] = -1;
            pthread_mutex_unlock(&st->lock);
            if (known) ranks_send(&a, sizeof a, u, TAG_PULL);
        }
    }
    return NULL;
}

static void mode_describe(const Trainer *tr, const char *ts) {
    const PsAsyncState *st = tr->mode_state;
    char where[200] = "";
    if (tr->n_servers > 0)
        snprintf(where, sizeof where, " (ranks 0 .. %d, dedicated: no towers, no input, a server thread each "
                 "(--ps_dedicated); workers: ranks %d .. %d)", tr->n_servers - 1, tr->n_servers, tr->n_ranks - 1);
    printf("%s: global batch %d = %d worker rank(s) x %d tower(s); mode %s: variables in shards on %d parameter-server "
           "rank(s)%s, placed by %s; asynchronous: each worker averages its %d tower(s), pushes each shard's slice to "
           "its owner, whose server thread applies %s to it on arrival, one worker at a time, and answers with the "
           "shard's current values; --max_staleness %d (staleness at most %ld updates); rank %d of %d%s%s\n",
           ts, tr->global_batch, tr->n_workers, tr->worker_towers, trainer_mode_name(tr->mode), st->n_ps, where,
           ps_placement_name(st->rule), tr->worker_towers, optimizer_name(&tr->ps->cfg.opt), tr->opt.max_staleness,
           st->bound, tr->rank, tr->n_ranks, tr->rank == 0 ? " (logs, summaries, checkpoints)" : "",
           tr->rank == 0 && tr->worker < 0 ? "; rank 0 is a server: a step's loss and accuracy are the mean of "
           "those of the workers still running in their latest pushes, the staleness figures its own shard's" : "");
    for (int r = 0; r < st->n_ps; r++) {
        int n = 0;
        for (int i = 0; i < tr->spec.n_vars; i++) n += st->sh.owner[i] == r;
        printf("%s: ps rank %d: %d variable(s), %zu bytes (%.2f MiB)\n", ts, r, n, st->sh.shard_n_bytes[r],
               st->sh.shard_n_bytes[r] / (1024.0 * 1024.0));
    }
}

static void mode_close(Trainer *tr) {
    PsAsyncState *st = tr->mode_state;
    if (!st) return;
    /* Every rank, a worker or not, tells each server it is done; a server then ends.  A passive rank's last
     * MSG_WAIT was answered before its loop ended, so none is left unanswered. */
    if (st->p2p_open && !st->failed) {
        MsgHeader done = {MSG_DONE, 0, 0, 0, 0, 0, 0.0, 0.0, 0};
        for (int p = 0; p < st->n_ps; p++) ranks_send(&done, sizeof done, p, TAG_PUSH);
        if (st->thread_started) pthread_join(st->thread, NULL);
        st->thread_started = 0;
    }
    if (st->thread_started) return; /* a failed step: the job ends (ranks_abort); the thread is left to it */
    if (st->p2p_open) ranks_p2p_close();
    if (st->lock_made) pthread_mutex_destroy(&st->lock);
    if (st->cond_made) pthread_cond_destroy(&st->moved);
    ps_shards_free(&st->sh);
    free(st->packed);
    free(st->gather);
    free(st->out);
    free(st->in);
    free(st->pulled_version);
    free(st->seen);
    free(st->srv_params);
    free(st->mean);
    free(st->srv_in);
    free(st->srv_out);
    free(st->pushed);
    free(st->pending);
    free(st->ended);
    free(st->waiting);
    free(st->done);
    free(st->last_loss);
    free(st->last_accuracy);
    free(st->saved_parts);
    free(st->mcounts);
    free(st->mdispls);
    free(st->moving_at);
    free(st->momentum);
    free(st->shares);
    free(st->bn_tmp);
    free(st);
    tr->mode_state = NULL;
}

/* The bytes of PsAsyncState's buffers, from the trainer, this rank's shard
 * (own floats, own_moving of them moving statistics) and all the moving
 * statistics: what mode_open allocates and mode_host_n_bytes counts. */
typedef struct {
    size_t packed_n_bytes, msgs_n_bytes /* each of out and in */, srv_params_n_bytes, mean_n_bytes, srv_in_n_bytes,
        srv_out_n_bytes, shares_n_bytes, bn_tmp_n_bytes, gather_n_bytes;
} PsAsyncBufs;

static PsAsyncBufs ps_async_bufs(const Trainer *tr, size_t own, size_t own_moving, size_t n_moving) {
    const size_t M = tr->spec.n_params, T = (size_t)tr->worker_towers; /* a push carries the workers' towers */
    const size_t R = (size_t)tr->n_ranks, f = sizeof(float), hdr = sizeof(MsgHeader);
    return (PsAsyncBufs){.packed_n_bytes = M * f,
                         .msgs_n_bytes = R * hdr + (M + T * n_moving) * f,
                         .srv_params_n_bytes = M * f,
                         .mean_n_bytes = (own + T * own_moving + 1) * f,
                         .srv_in_n_bytes = hdr + (own + T * own_moving) * f,
                         .srv_out_n_bytes = hdr + own * f,
                         .shares_n_bytes = (T * n_moving + 1) * f,
                         .bn_tmp_n_bytes = (T * own_moving + 1) * f,
                         .gather_n_bytes = tr->rank == 0 ? M * f : 0};
}

static size_t ps_async_bufs_n_bytes(const PsAsyncBufs *b) {
    return b->packed_n_bytes + 2 * b->msgs_n_bytes + b->srv_params_n_bytes + b->mean_n_bytes + b->srv_in_n_bytes +
           b->srv_out_n_bytes + b->shares_n_bytes + b->bn_tmp_n_bytes + b->gather_n_bytes;
}

/* The flags, the library and the model, before any collective (TrainModeI.check). */
static int mode_check(const Trainer *tr, char *err, size_t err_n_bytes) {
    const int R = tr->n_ranks;
    const size_t M = tr->spec.n_params;
    if (R > 1 && !ranks_thread_multiple()) {
        snprintf(err, err_n_bytes, "--sync_replicas false needs MPI_THREAD_MULTIPLE (a server thread beside each "
                 "worker), and %s does not provide it", ranks_library());
        return -1;
    }
    if (tr->bn_sync && train_moving_n_floats(&tr->spec) > 0) {
        snprintf(err, err_n_bytes, "--batch_norm sync with --sync_replicas false: a global batch's statistics need "
                 "a synchronous step (every worker's towers in the same layer at once); use --batch_norm tower");
        return -1;
    }
    if (tr->opt.max_staleness < 0) {
        snprintf(err, err_n_bytes, "--max_staleness %d: expected 0 or more (steps a worker may run ahead)",
                 tr->opt.max_staleness);
        return -1;
    }
    PsPlacement rule;
    if (train_ps_ranks_placement(tr, &rule, err, err_n_bytes) != 0) return -1;
    if (M * sizeof(float) + sizeof(MsgHeader) > (size_t)0x7fffffff) {
        snprintf(err, err_n_bytes, "%zu variables: more than one MPI message holds", M);
        return -1;
    }
    return 0;
}

/* The flags checked (mode_check): rank 0's server to every rank, the placement, the buffers, the server thread. */
static int mode_open(Trainer *tr, char *err, size_t err_n_bytes) {
    ParamServer *ps = tr->ps;
    const int R = tr->n_ranks;
    const size_t M = tr->spec.n_params;
    PsPlacement rule;
    if (train_ps_ranks_placement(tr, &rule, err, err_n_bytes) != 0) return -1;
    ranks_bcast(ps->block, ps->block_n_bytes);
    train_ranks_bcast_state(tr);

    PsAsyncState *st = calloc(1, sizeof *st);
    tr->mode_state = st;
    if (!st) goto oom;
    st->tr = tr;
    st->n_ps = tr->opt.ps_ranks > 0 ? tr->opt.ps_ranks : R;
    st->rule = rule;
    st->bound = (long)(tr->n_workers - 1) * (2L * tr->opt.max_staleness + 1);
    st->pulled_version = calloc((size_t)R, sizeof *st->pulled_version);
    st->seen = calloc((size_t)R, sizeof *st->seen);
    st->pushed = calloc((size_t)R, sizeof *st->pushed);
    st->pending = malloc((size_t)R * sizeof *st->pending);
    st->ended = malloc((size_t)R * sizeof *st->ended);
    st->waiting = malloc((size_t)R * sizeof *st->waiting);
    st->done = calloc((size_t)R, sizeof *st->done);
    st->last_loss = calloc((size_t)R, sizeof *st->last_loss);
    st->last_accuracy = calloc((size_t)R, sizeof *st->last_accuracy);
    st->saved_parts = calloc((size_t)R, sizeof *st->saved_parts);
    st->mcounts = calloc((size_t)R, sizeof *st->mcounts);
    st->mdispls = calloc((size_t)R, sizeof *st->mdispls);
    st->moving_at = calloc((size_t)tr->spec.n_vars, sizeof *st->moving_at);
    st->momentum = calloc((size_t)tr->spec.n_vars, sizeof *st->momentum);
    if (ps_shards_init(&st->sh, &tr->spec, R, st->n_ps, rule) != 0 || !st->pulled_version || !st->seen ||
        !st->pushed || !st->pending || !st->ended || !st->waiting || !st->done || !st->last_loss ||
        !st->last_accuracy || !st->saved_parts || !st->mcounts || !st->mdispls || !st->moving_at || !st->momentum)
        goto oom;
    for (int r = 0; r < R; r++) st->pending[r] = st->ended[r] = st->waiting[r] = -1;
    st->stop_at = st->stop_after = -1;
    /* Batch norm's moving statistics: where each is in the worker's packed shares, its momentum, each shard's count. */
    st->n_moving = train_moving_n_floats(&tr->spec);
    if (st->n_moving > 0 && model_moving_momentum(&tr->spec, st->momentum) != 0) {
        snprintf(err, err_n_bytes, "cannot build %s's graph for its batch norm momenta", tr->opt.model);
        return -1;
    }
    size_t moving_at = 0;
    for (int v = 0; v < tr->spec.n_vars; v++)
        if (!tr->spec.vars[v].trainable) {
            st->moving_at[v] = moving_at;
            moving_at += tr->spec.vars[v].n_floats;
        }
    for (int r = 0; r < st->n_ps; r++) {
        for (int k = ps_shards_first(&st->sh, &tr->spec, r); k < ps_shards_first(&st->sh, &tr->spec, r + 1); k++)
            if (!tr->spec.vars[st->sh.order[k]].trainable) st->mcounts[r] += tr->spec.vars[st->sh.order[k]].n_floats;
        if (r + 1 < R) st->mdispls[r + 1] = st->mdispls[r] + st->mcounts[r];
    }
    const PsAsyncBufs b = ps_async_bufs(tr, (size_t)st->sh.counts[tr->rank], st->mcounts[tr->rank], st->n_moving);
    st->packed = malloc(b.packed_n_bytes);
    st->out = malloc(b.msgs_n_bytes);
    st->in = malloc(b.msgs_n_bytes);
    st->srv_params = malloc(b.srv_params_n_bytes);
    st->mean = malloc(b.mean_n_bytes);
    st->srv_in = malloc(b.srv_in_n_bytes);
    st->srv_out = malloc(b.srv_out_n_bytes);
    st->shares = malloc(b.shares_n_bytes);
    st->bn_tmp = malloc(b.bn_tmp_n_bytes);
    if (b.gather_n_bytes) st->gather = malloc(b.gather_n_bytes);
    if (!st->packed || !st->out || !st->in || !st->srv_params || !st->mean || !st->srv_in || !st->srv_out ||
        !st->shares || !st->bn_tmp || (tr->rank == 0 && !st->gather))
        goto oom;
    memcpy(st->srv_params, ps->params, M * sizeof(float));
    st->srv = *ps;
    st->srv.params = st->srv_params;
    for (int p = 0; p < st->n_ps; p++) st->pulled_version[p] = ps->global_step;
    st->logged_at = st->base_step = tr->schedule_step = ps->global_step;
    st->base_examples = st->saved_examples = tr->examples_consumed;
    if (pthread_mutex_init(&st->lock, NULL) != 0) goto oom;
    st->lock_made = 1;
    if (pthread_cond_init(&st->moved, NULL) != 0) goto oom;
    st->cond_made = 1;
    if (R > 1) {
        ranks_p2p_open();
        st->p2p_open = 1;
        if (tr->rank < st->n_ps) {
            if (pthread_create(&st->thread, NULL, server_main, st) != 0) {
                snprintf(err, err_n_bytes, "cannot start the parameter server's thread on rank %d", tr->rank);
                return -1;
            }
            st->thread_started = 1;
        }
    }
    return 0;
oom:
    snprintf(err, err_n_bytes, "cannot allocate the asynchronous parameter servers' buffers for %d rank(s) of %zu "
             "variables (out of memory?)", R, M);
    return -1;
}

/* mode_open's buffers, from the configuration alone (the memory bound may ask before open): the packed block,
 * the server's copy of the variables and rank 0's save gather (M each), the pushes out and the pulls in (every
 * owner's header, slice and T towers' moving-statistics shares), this rank's server buffers (its shard, own,
 * and its shares of the statistics; the whole statistics' count bounds a shard's), the towers' shares, the
 * per-rank and per-variable tables and the shards' layout. */
static size_t mode_host_n_bytes(const Trainer *tr) {
    const size_t R = (size_t)tr->n_ranks, n_vars = (size_t)tr->spec.n_vars, nm = train_moving_n_floats(&tr->spec);
    /* this rank's shard of the moving statistics is at most all of them */
    const PsAsyncBufs b = ps_async_bufs(tr, train_ps_own_n_floats(tr), nm, nm);
    const PsAsyncState *z = NULL; /* sizeof only */
    const size_t per_rank = R * (sizeof *z->pulled_version + sizeof *z->seen + sizeof *z->pushed + sizeof *z->pending +
                                 sizeof *z->ended + sizeof *z->waiting + sizeof *z->done + sizeof *z->last_loss +
                                 sizeof *z->last_accuracy + sizeof *z->saved_parts + sizeof *z->mcounts + sizeof *z->mdispls);
    const size_t per_var = n_vars * (sizeof *z->moving_at + sizeof *z->momentum);
    return sizeof(PsAsyncState) + ps_async_bufs_n_bytes(&b) + per_rank + per_var + ps_shards_n_bytes(tr->spec.n_vars, (int)R);
}

/* Worker: its towers' shares of shard p's moving statistics into msg ((T, mcounts[p]), the shard's packed order). */
static void pack_shares(const PsAsyncState *st, int p, float *msg) {
    const Trainer *tr = st->tr;
    for (int t = 0; t < tr->n_towers; t++)
        for (int k = ps_shards_first(&st->sh, &tr->spec, p); k < ps_shards_first(&st->sh, &tr->spec, p + 1); k++) {
            const ModelVar *v = &tr->spec.vars[st->sh.order[k]];
            if (v->trainable) continue;
            memcpy(msg, st->shares + (size_t)t * st->n_moving + st->moving_at[st->sh.order[k]], v->n_floats * sizeof(float));
            msg += v->n_floats;
        }
}

/* Rank 0, every --log_every steps: the staleness of the gradients applied so far, over every shard. */
static void log_staleness(Trainer *tr, PsAsyncState *st) {
    const long every = tr->opt.log_every;
    if (tr->rank != 0 || every <= 0 || tr->ps->global_step / every == st->logged_at / every) return;
    st->logged_at = tr->ps->global_step;
    long n = 0;
    for (int p = 0; p < st->n_ps; p++) n += st->seen[p].stale_n;
    char ts[64];
    trainer_timestamp(ts, sizeof ts);
    if (tr->worker < 0) /* a server-only rank 0 sees its own shard's figures (it pulls nothing) */
        printf("%s: step %ld: staleness mean %.2f, max %ld over %ld update(s) of rank 0's shard (bound %ld)\n", ts,
               tr->ps->global_step, tr->staleness_mean, tr->staleness_max, n, st->bound);
    else
        printf("%s: step %ld: staleness mean %.2f, max %ld over %ld shard update(s) (bound %ld)\n", ts,
               tr->ps->global_step, tr->staleness_mean, tr->staleness_max, n, st->bound);
    fflush(stdout);
}

/* The job's counts through this rank's round: global_step = the count at open + the worker steps of the rounds
 * since (owner 0's round_steps), and, across ranks, the examples likewise (each worker step one worker's batch;
 * one process: the trainer counts them). */
static void set_counts(Trainer *tr, const PsAsyncState *st, long rounds) {
    tr->ps->global_step = st->base_step + rounds;
    if (trainer_ranks_step_apart(tr)) tr->examples_consumed = st->base_examples + rounds * trainer_step_examples(tr);
}

/* A passive rank's step (a server-only rank, or a worker whose input ended): no towers; round
 * k = its step count + 1 once every worker whose input has not ended has pushed step k (owner 0, rank 0, waits
 * asleep on st->moved; the others ask it, MSG_WAIT, and sleep in the receive of its answer), or 0 when every
 * worker's input ended before step k (the end).  Its global_step and examples are then the job's counts through
 * round k, exact: base + the worker steps of rounds 1 .. k.  A signal to it goes to owner 0 with the question, which
 * fixes the stop; the answer of a round carries the stop fixed so far (fixed before any worker pushes that
 * count, so the answer of that round carries it).  Its loss and accuracy (rank 0 logs them) are the mean of
 * the round's workers' latest. */
static int passive_step(Trainer *tr, PsAsyncState *st, float *loss) {
    ParamServer *ps = tr->ps;
    const long k = st->worker_step + 1;
    const int ask_stop = tr->stop_requested && !st->stop_sent;
    if (ask_stop) st->stop_sent = 1;
    tr->times.average.start_sec = tower_now_sec();
    MsgHeader a;
    if (tr->rank == 0) {
        pthread_mutex_lock(&st->lock);
        if (ask_stop) fix_stop(st);
        while (!round_answer(st, k, &a)) pthread_cond_wait(&st->moved, &st->lock);
        pthread_mutex_unlock(&st->lock);
    } else {
        MsgHeader q = {MSG_WAIT, k, 0, 0, 0, ask_stop, 0.0, 0.0, 0};
        ranks_send(&q, sizeof q, 0, TAG_PUSH);
        if (ranks_recv(&a, sizeof a, 0, TAG_PULL, NULL) != sizeof a || (a.step != k && a.step != -1))
            server_fatal(tr, "owner 0's answer of a round is not the round asked");
    }
    if (tr->worker < 0) { /* a server-only rank's staleness figures are its own shard's (it pulls nothing) */
        pthread_mutex_lock(&st->lock);
        tr->staleness_mean = st->stale_n ? (double)st->stale_sum / (double)st->stale_n : 0.0;
        tr->staleness_max = st->stale_max;
        st->seen[tr->rank].stale_n = st->stale_n;
        pthread_mutex_unlock(&st->lock);
    }
    tr->times.average.end_sec = tr->times.apply.start_sec = tr->times.apply.end_sec = tower_now_sec();
    if (a.step < 0) return 0;
    *loss = (float)a.loss;
    tr->accuracy = (float)a.accuracy;
    st->worker_step = k;
    if (a.stop >= 0 && st->stop_after < 0) st->stop_after = a.stop;
    tr->stop_agreed = st->stop_after >= 0 && st->worker_step >= st->stop_after;
    set_counts(tr, st, a.version);
    tr->schedule_step += tr->n_workers;
    ps->last_lr = ps_step_lr(ps);
    log_staleness(tr, st);
    return 1;
}

/* A worker whose input ended (--ps_dedicated, or a split: its own part ended): every owner hears after how many
 * steps (its bound no longer waits for it), and the worker stays in the job as a passive rank (its next steps
 * are passive_step's; its server thread, if it owns a shard, serves on) so that it meets the others at the save
 * points and the end.  Co-located ranks reading the same stream (--input_split none: every rank a worker, every
 * input ending after the same step) end together: the end, now. */
static int mode_input_ended(Trainer *tr) {
    PsAsyncState *st = tr->mode_state;
    if (!st || tr->worker < 0 || (tr->n_servers == 0 && tr->input_split == PIPELINE_SPLIT_NONE)) return 0;
    MsgHeader h = {MSG_ENDED, st->worker_step, 0, 0, 0, 0, 0.0, 0.0, 0};
    for (int p = 0; p < st->n_ps; p++) ranks_send(&h, sizeof h, p, TAG_PUSH);
    return 1;
}

static int mode_step(Trainer *tr, PipelineBatch *batch, float *loss, char *err, size_t err_n_bytes) {
    ParamServer *ps = tr->ps;
    PsAsyncState *st = tr->mode_state;
    if (tr->worker < 0 || tr->input_done) return passive_step(tr, st, loss); /* the empty batch: nothing to hand back */
    const int R = tr->n_ranks, T = tr->n_towers;
    TowerStep ts = {.hooks = NULL};
    for (int t = 0; t < T; t++) ts.params[t] = ps->params;
    int rc = train_run_towers(tr, &ts, batch, loss, err, err_n_bytes);
    if (rc != 1) {
        st->failed = 1;
        return rc;
    }
    tr->times.average.start_sec = tower_now_sec();
    const int threads_before = omp_get_max_threads();
    omp_set_num_threads(tr->server_threads);
    ps_sum_in_order(ps->grads, (const float *const *)ps->tower_grads, T, ps->spec.n_params, T);
    /* The towers' shares of batch norm's moving statistics (their gradient buffers are free now). */
    if (st->n_moving > 0 && train_moving_shares(tr, st->shares, err, err_n_bytes) != 0) {
        omp_set_num_threads(threads_before);
        st->failed = 1;
        return -1;
    }
    tr->times.average.end_sec = tr->times.apply.start_sec = tower_now_sec();
    if (R == 1) {
        ps_shards_pack(&st->sh, &tr->spec, 0, 1, ps->grads, st->mean);
        pack_shares(st, 0, st->mean + st->sh.counts[0]);
        pthread_mutex_lock(&st->lock);
        server_apply(st, 0, st->pulled_version[0]);
        st->pulled_version[0] = st->srv.global_step;
        st->pushed[0] = st->worker_step + 1;
        st->seen[0] = (MsgHeader){st->worker_step, st->srv.global_step, st->stale_sum, st->stale_n, st->stale_max,
                                  tr->stop_requested ? st->worker_step + 1 : -1, *loss, tr->accuracy,
                                  st->worker_step + 1};
        memcpy(ps->params, st->srv_params, ps->spec.n_params * sizeof(float));
        pthread_mutex_unlock(&st->lock);
    } else {
        ps_shards_pack(&st->sh, &tr->spec, 0, st->n_ps, ps->grads, st->packed);
        void *out[64], *in[64];
        size_t out_n[64], in_n[64];
        if (st->n_ps > 64) {
            omp_set_num_threads(threads_before);
            snprintf(err, err_n_bytes, "%d parameter-server ranks: at most 64 in asynchronous mode", st->n_ps);
            st->failed = 1;
            return -1;
        }
        for (int p = 0; p < st->n_ps; p++) {
            MsgHeader h = {st->worker_step, st->pulled_version[p], 0, 0, 0, tr->stop_requested != 0, *loss,
                           tr->accuracy, 0};
            out[p] = st->out + msg_at(st, p);
            in[p] = st->in + msg_at(st, p);
            out_n[p] = push_n_bytes(st, p);
            in_n[p] = pull_n_bytes(st, p);
            memcpy(out[p], &h, sizeof h);
            float *body = (float *)((unsigned char *)out[p] + sizeof h);
            memcpy(body, st->packed + st->sh.displs[p], (size_t)st->sh.counts[p] * sizeof(float));
            pack_shares(st, p, body + st->sh.counts[p]);
        }
        ranks_exchange_each(out, out_n, in, in_n, st->n_ps, TAG_PUSH, TAG_PULL);
        for (int p = 0; p < st->n_ps; p++) {
            memcpy(&st->seen[p], in[p], sizeof(MsgHeader));
            st->pulled_version[p] = st->seen[p].version;
            memcpy(st->packed + st->sh.displs[p], (unsigned char *)in[p] + sizeof(MsgHeader),
                   (size_t)st->sh.counts[p] * sizeof(float));
        }
        ps_shards_unpack(&st->sh, &tr->spec, 0, st->n_ps, st->packed, ps->params);
    }
    omp_set_num_threads(threads_before);
    st->worker_step++;
    /* A stop: owner 0's answer names the worker step every worker stops after. */
    if (st->seen[0].stop >= 0 && st->stop_after < 0) st->stop_after = st->seen[0].stop;
    tr->stop_agreed = st->stop_after >= 0 && st->worker_step >= st->stop_after;
    long sum = 0, n = 0, max = 0;
    for (int p = 0; p < st->n_ps; p++) {
        sum += st->seen[p].stale_sum;
        n += st->seen[p].stale_n;
        if (st->seen[p].stale_max > max) max = st->seen[p].stale_max;
    }
    tr->staleness_mean = n ? (double)sum / (double)n : 0.0;
    tr->staleness_max = max;
    set_counts(tr, st, st->seen[0].rounds); /* the job's through this round as owner 0 knew at the pull */
    tr->schedule_step += tr->n_workers;
    ps->last_lr = ps_step_lr(ps);
    tr->times.apply.end_sec = tower_now_sec();
    log_staleness(tr, st);
    return 1;
}

/* Every rank, at the same worker step: the ranks meet (every push applied),
 * then each owner's variables, slots and moving averages to rank 0's host
 * block, with its update count and the optimizer's scalars, and owner 0's
 * counts of each worker's steps (none of a later round can have arrived: no
 * rank passes the broadcast below before rank 0 sends it): the job's
 * examples and each worker part's (mode_run_state). */
static void mode_save(const Trainer *tr) {
    ParamServer *ps = tr->ps;
    PsAsyncState *st = tr->mode_state;
    const int R = tr->n_ranks;
    (void)ranks_any(0);
    pthread_mutex_lock(&st->lock);
    for (int s = -1; s <= ps->n_slots; s++) {
        float *src = s < 0 ? st->srv_params : s < ps->n_slots ? ps->slots[s] : ps->ema;
        float *dst = s < 0 ? ps->params : src;
        if (!src) continue;
        ps_shards_pack(&st->sh, &tr->spec, tr->rank, tr->rank + 1, src, st->packed);
        ranks_gatherv(st->packed + st->sh.displs[tr->rank], st->gather, st->sh.counts, st->sh.displs);
        if (tr->rank == 0) ps_shards_unpack(&st->sh, &tr->spec, 0, R, st->gather, dst);
    }
    if (tr->rank == 0) {
        ps->global_step = st->srv.global_step;
        ps->last_lr = st->srv.last_lr;
        memcpy(ps->scalars, st->srv.scalars, sizeof ps->scalars);
        const long per_worker = tr->global_batch / tr->n_workers;
        long steps = 0;
        for (int w = 0; w < tr->n_workers; w++) {
            const long own = st->pushed[tr->n_servers + w];
            steps += own;
            st->saved_parts[w] = tr->part_start[w] + own * per_worker;
        }
        st->saved_examples = st->base_examples + steps * per_worker;
    }
    pthread_mutex_unlock(&st->lock);
    /* Every rank takes the job's counts (a running worker's own may be ahead: a part's end told late). */
    long counts[2] = {ps->global_step, st->saved_examples};
    if (R > 1) ranks_bcast(counts, sizeof counts);
    ps->global_step = counts[0];
    st->saved_examples = counts[1];
}

/* After mode_save: the job's examples on every rank, and rank 0's counts of each worker part into the run state
 * it writes. */
static void mode_run_state(Trainer *tr, CkptRunState *run) {
    PsAsyncState *st = tr->mode_state;
    tr->examples_consumed = run->examples_consumed = st->saved_examples;
    for (int w = 0; w < run->n_parts && tr->rank == 0; w++) run->part_examples_consumed[w] = st->saved_parts[w];
}

/* The variables this worker pulled last.  A server-only rank pulls nothing: its own shard's current values
 * into the host block, the other shards there as of the last save. */
static const float *mode_variables(const Trainer *tr) {
    PsAsyncState *st = tr->mode_state;
    if (tr->worker < 0 && st) {
        pthread_mutex_lock(&st->lock);
        ps_shards_pack(&st->sh, &tr->spec, tr->rank, tr->rank + 1, st->srv_params, st->packed);
        ps_shards_unpack(&st->sh, &tr->spec, tr->rank, tr->rank + 1, st->packed, tr->ps->params);
        pthread_mutex_unlock(&st->lock);
    }
    return tr->ps->params;
}

static const char *const aliases[] = {"parameter_server/mpi_async", NULL};

const TrainModeI train_mode_ps_mpi_async = {
    .name = "ps_mpi_async",
    .variable_update = "parameter_server",
    .placement = "mpi",
    .flags = "--variable_update parameter_server --local_parameter_device mpi --sync_replicas false",
    .aliases = aliases,
    .across_ranks = 1,
    .save_on_every_rank = 1,
    .dedicated_servers = 1,
    .asynchronous = 1,
    .server_row = "worker: input, push to the shards' owners, pull",
    .server_apply = "push and pull",
    .available = train_mode_always_available,
    .describe = mode_describe,
    .check = mode_check,
    .open = mode_open,
    .step = mode_step,
    .input_ended = mode_input_ended,
    .host_n_bytes = mode_host_n_bytes,
    .save = mode_save,
    .run_state = mode_run_state,
    .variables = mode_variables,
    .close = mode_close,
};
