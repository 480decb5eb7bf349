/* mode.h — a variable placement mode as one table entry, after ggml's
 * backend interface (ggml_backend_i: a struct of function pointers).
 *
 * Where it sits: train/, between the trainer (train/trainer.c, which calls
 * only these entries) and the floors a mode wires together: the towers
 * (tower/), the parameter server and its all-reduces (ps/).  Each mode is
 * one file, train/mode_<name>.c, holding its step, the hooks its tower
 * threads run and its entry; train/modes.c lists the entries in
 * TrainerMode order.  A new mode is a new file, one line in that table,
 * one TrainerMode value (train/trainer.h) and its source in
 * train/CMakeLists.txt; nothing else names a mode.
 * What it does not do: own the pipeline, the towers or the server (the
 * trainer opens and closes those around a mode's open and close).
 */
#ifndef TOWER_TRAIN_MODE_H
#define TOWER_TRAIN_MODE_H

#include <stddef.h>

#include "ps/placement.h"
#include "train/trainer.h"

typedef struct TrainModeI {
    const char *name;            /* trainer_mode_name: "ps_cpu", ... */
    const char *variable_update; /* tf_cnn_benchmarks' --variable_update: "parameter_server" | "replicated" */
    const char *placement;       /* parameter_server: --local_parameter_device; replicated: --all_reduce */
    const char *flags;           /* the whole flag set, for messages: "--variable_update replicated --all_reduce nccl" */
    const char *const *aliases;  /* NULL-terminated further names for trainer_mode_from_name, or NULL */
    int needs_gpu_towers;        /* 1: the variables live on the GPUs (the host block is a copy for checkpoints) */
    int across_ranks;            /* 1: runs across the MPI ranks of a job (base/ranks.h); 0: one process only */
    int save_on_every_rank;      /* 1: save gathers state held across ranks: every rank calls trainer_save at the same point */
    int dedicated_servers;       /* 1: runs with --ps_dedicated, ranks that only serve (Trainer.n_servers, no towers) */
    int asynchronous;            /* 1: --sync_replicas false, each worker's gradient applied on arrival: the ranks
                                  * step apart (trainer_ranks_step_apart) */
    const char *server_row;      /* --trace: the name of row 0 (input and the server's work) */
    const char *server_apply;    /* --trace: row 0's span after the towers ("apply", "global_step") */
    const char *reduce_row;      /* --trace: the all-reduce row after the towers' rows, or NULL for none */
    const char *reduce_span;     /* --trace: the name of that row's span ("ring all-reduce", "ncclAllReduce") */

    /* 1 when this build has the mode; 0 with one line in err saying what it needs. */
    int (*available)(char *err, size_t err_n_bytes);
    /* Optional.  After the towers are planned, before anything is built:
     * the mode to run instead (--all_reduce auto on GPU towers), or NULL. */
    const struct TrainModeI *(*settle)(const Trainer *tr);
    /* The --log_device_placement line(s) saying where variables and
     * gradients live and who applies the update (ts: the line's time). */
    void (*describe)(const Trainer *tr, const char *ts);
    /* Optional.  Before the server exists: keep[i] (spec.n_vars) = 1 when
     * this rank's server updates variable i, so that only those variables'
     * slots and moving averages are kept (PsConfig.keep; the rest never
     * touched).  NULL: every variable's, as one process. */
    void (*server_keeps)(const Trainer *tr, unsigned char *keep);
    /* Optional.  The mode's refusals of the options and the model that need
     * no other rank (no collective), once the model is known and before the
     * server exists: under mpirun the ranks agree on them (trainer_open), so
     * a refusal every rank makes ends the job with one line.  0, or -1 with
     * one line in err. */
    int (*check)(const Trainer *tr, char *err, size_t err_n_bytes);
    /* Optional.  The mode's own state, once the server (initial or
     * resumed) and the towers exist.  0, or -1 with err (the trainer then
     * calls close). */
    int (*open)(Trainer *tr, char *err, size_t err_n_bytes);
    /* One synchronous step on the batch (which it hands back through
     * train_run_towers): 1, -1 with err, or -2 with err when the model
     * diverged (train_diverged: a non-finite loss, no variable changed; or
     * non-finite gradients or variables where the mode tests them).
     * Records tr->times.average and .apply. */
    int (*step)(Trainer *tr, PipelineBatch *batch, float *loss, char *err, size_t err_n_bytes);
    /* Optional.  A worker rank's input ended (no next batch) in a mode whose
     * ranks step apart (trainer_ranks_step_apart): tell the ranks that need
     * to know (the servers, with a split or --ps_dedicated) after how many
     * steps.  1: the rank stays in the job without input (tr->input_done:
     * each step then gets the empty batch, and the mode's step says when the
     * job ends); 0: it ends now. */
    int (*input_ended)(Trainer *tr);
    /* Optional.  Before a save: bring the variables, slots and moving
     * averages every tower shares into the host block tr->ps->params. */
    void (*save)(const Trainer *tr);
    /* Optional.  At a save, after save, on every rank: the job's counts
     * where this rank's own are not exact (ranks that step apart: the ones
     * save took from owner 0): tr->examples_consumed, and into run (rank 0
     * writes it) the examples and each worker part's.  NULL: the trainer's
     * own, every part the same steps (trainer_save). */
    void (*run_state)(Trainer *tr, CkptRunState *run);
    /* Optional.  Across ranks, the checkpoint written by the ranks that hold
     * its parts (every rank calls it, at the same step, instead of save +
     * rank 0's ckpt_save; run: what ckpt_save records).  0 on every rank,
     * or -1 with err on every rank (nothing of the step is indexed). */
    int (*write_checkpoint)(Trainer *tr, const CkptRunState *run, char *err, size_t err_n_bytes);
    /* Optional.  Across ranks: how many ranks, the first ones, write files
     * into --train_dir at a checkpoint (the same on every rank), and in
     * *advice what a user whose hosts do not share one directory does
     * instead.  trainer_open proves that each of them sees rank 0's
     * train_dir before the first step.  NULL: 1 (rank 0 alone). */
    int (*train_dir_writers)(const Trainer *tr, const char **advice);
    /* Optional.  The host bytes the mode's open allocates for its own
     * buffers, for the memory bound (trainer_max_n_bytes); callable before
     * open (from the configuration alone).  NULL: none. */
    size_t (*host_n_bytes)(const Trainer *tr);
    /* Optional.  The current variables (trainer_variables); NULL: save,
     * then tr->ps->params. */
    const float *(*variables)(const Trainer *tr);
    /* Optional.  --trace: the all-reduce row's span in the last step; NULL:
     * the towers' reduce phases, first start to last end. */
    TowerSpan (*reduce_device_span)(const Trainer *tr);
    /* Optional.  Free what open made; safe after a failed or no open. */
    void (*close)(Trainer *tr);
    /* Optional.  The cost model: ms this mode adds to a step of n_towers
     * CPU towers beyond input and compute (trainer_mode_predict_ms); share
     * is n_towers / min(n_towers, cores), the slowdown of towers sharing
     * the cores.  NULL: no model (NAN). */
    double (*predict_ms)(const TrainCostFigures *f, int n_towers, double share);
} TrainModeI;

/* 1 when every variable of tr->ps->params is finite; 0 with "not saving
 * step N: ..." in err (a checkpoint never replaces a good one with them). */
int trainer_variables_finite(const Trainer *tr, char *err, size_t err_n_bytes);

/* The entry of mode m (m < TRAINER_N_MODES). */
const TrainModeI *train_mode(TrainerMode m);

/* What the modes share.  Run the towers on the batch with step's params,
 * hooks and device copies; keep their losses and accuracy in tr, give the
 * batch back.  Returns 1, -1 (err) or -2 (a loss is not finite: with
 * hooks, no tower has applied anything). */
int train_run_towers(Trainer *tr, TowerStep *step, PipelineBatch *batch, float *loss, char *err,
                     size_t err_n_bytes);

/* Tower t's weight w_t in the job's step, with shard_n its examples this
 * step: every mode averages the towers' gradients (and the loss) as
 * sum_t w_t g_t / (n_ranks x n_towers), where g_t is the mean over the
 * tower's micro-batches.  --loss_scaling tower_mean: 1; global_batch:
 * n_ranks x n_towers x shard_n / global_batch (so the mean is each
 * example's gradient summed over the global batch, divided by its size).
 * train_run_towers folds it into each tower's backward, as the weight of
 * its cross-entropy (TowerStep.loss_weight), so a mode's own averaging is
 * unchanged; a mode that reduces the losses
 * itself (replicated_mpi) weights them with it. */
double train_tower_weight(const Trainer *tr, int shard_n);

/* The replicated modes' step around their hooks: the learning rate of the
 * step in flight into tr->step_lr (the apply hooks read it), the towers
 * (train_run_towers), then global_step + 1 timed as the server's apply.
 * Returns as train_run_towers. */
int train_run_replicated(Trainer *tr, TowerStep *step, PipelineBatch *batch, float *loss, char *err,
                         size_t err_n_bytes);

/* replicated_nccl's parts that replicated_nccl_mpi shares (train/mode_replicated_nccl.c; CUDA builds with
 * NCCL only).  train_nccl_update_moving: after the update, batch norm's moving statistics from the towers'
 * (train_update_moving into the host block) written to every tower's device variables; 0, -1 with err, or -2
 * (diverged) as train_update_moving.
 * train_nccl_save: the host block <- tower 0's GPU variables and slots and every tower's share of the moving
 * averages.  train_nccl_reduce_span: the ncclAllReduce of the GPU leaders in the last step, first in to
 * last out. */
int train_nccl_update_moving(Trainer *tr, float loss, char *err, size_t err_n_bytes);
void train_nccl_save(const Trainer *tr);
TowerSpan train_nccl_reduce_span(const Trainer *tr);

/* The modes across ranks, at open: rank 0's global_step, examples consumed,
 * the checkpoint's parts (tr->resume_run: each worker part's examples, the
 * split), last learning rate and optimizer scalars (Adam's beta powers) to
 * every rank (MPI_Bcast; a rank that read no checkpoint has the initial ones).  The
 * variables themselves each mode broadcasts as it holds them.  Every rank
 * calls it once. */
void train_ranks_bcast_state(Trainer *tr);

/* The modes across ranks: every rank's step code rc, towers' losses,
 * accuracies and shard sizes (shard_n: T = tr->worker_towers; a server-only
 * rank's are unused), gathered into stats (R x (1 + 3T) floats, the
 * caller's; MPI_Allgather); returns the job's code (-1 when a tower of any
 * rank failed, err naming the rank; -2 when any loss is not finite; else
 * 1), with *loss and tr->accuracy the job's, in the job's tower order over
 * the worker ranks (as train_run_towers for one process of n_workers x T
 * towers).  Every rank calls it once a step, a server-only rank with rc 1. */
int train_ranks_agree(Trainer *tr, float *stats, int rc, const int *shard_n, float *loss, char *err,
                      size_t err_n_bytes);

/* A step found the model diverged: err = "Model diverged with WHAT at step
 * STEP (loss = LOSS)"; returns -2, the step's value for it. */
int train_diverged(long step, const char *what, float loss, char *err, size_t err_n_bytes);

/* An `available` for modes every build has: 1. */
int train_mode_always_available(char *err, size_t err_n_bytes);

/* A device span (ms after host_sec, the host time just before the call
 * that measured it) on the host clock; empty when it did not run. */
TowerSpan train_device_span(double host_sec, const PsGpuSpanMs *ms);

/* Each tower's device buffers (TowerDeviceView), for the GPU modes'
 * open: devices, params and grads get n_towers entries.  0, or -1 with err
 * (a backend without device buffers). */
int train_device_views(const Trainer *tr, int *devices, float **params, float **grads, char *err,
                       size_t err_n_bytes);

/* --batch_norm tower (train/batch_norm.c).  Floats in spec's non-trainable
 * variables (batch norm's moving statistics); 0 for networks without. */
size_t train_moving_n_floats(const ModelSpec *spec);

/* The parameter servers across ranks (ps_mpi, ps_mpi_async): the floats of this rank's shard under
 * --ps_placement over the --ps_ranks ranks (0 on a rank that holds none), from the configuration alone, for
 * the modes' host_n_bytes; the whole model's n_params when the placement cannot be computed (out of memory). */
size_t train_ps_own_n_floats(const Trainer *tr);

/* The parameter servers across ranks (ps_mpi, ps_mpi_async): --ps_placement's rule (greedy when not given) into
 * *rule, and --ps_ranks against the job's ranks.  0, or -1 with one line in err naming the flag. */
int train_ps_ranks_placement(const Trainer *tr, PsPlacement *rule, char *err, size_t err_n_bytes);

/* After a step's update (the towers' last forwards were training ones):
 * each tower's batch statistics applied to a copy of dst[0]'s moving
 * statistics, the copies of the job's towers averaged in tower order
 * (rank-major across MPI ranks: a collective, every rank calls it), the
 * mean written into the non-trainable variables of dst[0 .. n_dst) (n_params
 * each, host).  Uses the towers' host gradient buffers as scratch.  A no-op
 * for networks without such variables.  0, -1 with one line in err, or -2
 * (train_diverged, with the step's loss) when a mean is not finite: dst is
 * left as it was. */
int train_update_moving(Trainer *tr, float *const *dst, int n_dst, float loss, char *err, size_t err_n_bytes);

/* The asynchronous parameter servers' half of it, on the worker: after a
 * step, each tower's share of the update, batch * (1 - momentum) (its
 * backend's update on moving statistics of zero), into shares (T, n_moving:
 * the non-trainable variables in spec order).  The owner applies them
 * (model/layers.h's batchnorm_apply_moving_share).  Uses the towers' host
 * gradient buffers as scratch.  0, or -1 with one line in err. */
int train_moving_shares(Trainer *tr, float *shares, char *err, size_t err_n_bytes);

#endif
