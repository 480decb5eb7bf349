/* tower.h — the towers: one thread per tower, bound to a device, each with
 * its own copy of the weights and its own activation and gradient buffers.
 *
 * Where it sits: between the input pipeline (io/, which hands each tower its
 * shard of the global batch) and the parameter server (ps/, which owns the
 * master variables and averages the gradients the towers deliver).  One step
 * of a tower:
 *
 *     wait for the go
 *     ps_copy_params_to_tower      master variables -> the tower's weights
 *     tower_copy_shard_to_tower    its shard of the staged batch -> the device
 *     tower_compute                forward and backward on the shard
 *                                  (--accum_steps K: these two K times, one
 *                                  micro-batch each, the gradient adding up;
 *                                  then it is scaled by 1/K, TowerStep.grad_scale)
 *     tower_copy_grads_to_ps       gradients -> the tower's host gradient buffer
 *     signal done
 *
 * The parameter server thread (the caller of tower_group_run: the
 * trainer's placement mode, train/mode_ps_cpu.c) waits for every tower —
 * the synchronisation point — and then averages and applies (ps/).
 *
 * The replicated modes (docs/modes.md) run the same step through
 * tower_group_run with two differences: a tower whose variables are bound
 * to a host buffer (tower_group_bind_params) skips the copy-in, and after
 * the copy-out every tower thread waits for the others (tower_sync) and then
 * runs the step's hooks, `reduce` (the all-reduce of the gradients) and
 * `apply` (the update of its own variables), which the caller supplies:
 * this file still knows nothing of how gradients are combined or variables
 * updated.  The GPU modes (ps_gpu, replicated_nccl) keep variables and
 * gradients on the devices: a step's TowerDeviceCopy makes a tower copy its
 * variables in from, and its gradient out to, device memory (or neither),
 * and TowerDeviceView hands the caller the device buffers of a tower, so
 * that ps/ can average and update there without knowing a tower's insides.
 * Every phase's start and end are recorded (TowerTimes; a GPU tower's from
 * CUDA events on its stream) so that a trace and the benchmark can show them.
 *
 * What a device is lives behind TowerBackend: "cpu" (here) and "cuda"
 * (tower_cuda.c, when built with CUDA).  This file knows nothing of how a
 * variable is updated or how a batch is read.
 */
#ifndef TOWER_TOWER_TOWER_H
#define TOWER_TOWER_TOWER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "base/host_alloc.h"
#include "base/limits.h"
#include "model/model.h"


/* An interval on the tower_now_sec() clock; both 0 when it did not happen. */
typedef struct {
    double start_sec, end_sec;
} TowerSpan;

/* A tower's device buffers (TowerBackend.device_view), for the modes whose
 * variables or gradients stay on the GPUs.  Owned by the tower, valid until
 * its tower_free. */
typedef struct {
    int device;     /* the tower's GPU (CUDA device number) */
    float *params;  /* (n_params) device memory on `device`: the variables compute reads */
    float *grads;   /* (n_params) device memory on `device`: the gradient compute writes, complete when compute returns */
} TowerDeviceView;

/* A backend: what a tower's device is and how data moves to and from it.
 * Every function that can fail returns 0 or -1 with one line in err. */
typedef struct TowerBackend {
    const char *name;  /* "cpu", "cuda" */
    /* Host memory for the master variables and the staging buffers.
     * device: the first tower's device (CUDA: made current before each
     * pinned allocation, so that no context appears on another GPU). */
    HostAlloc (*host_alloc)(int device);
    /* Number of devices of this kind (CPU: 1), or -1 + err when unusable. */
    int (*device_count)(char *err, size_t err_n_bytes);
    /* One line naming the device, for --log_device_placement. */
    void (*describe_device)(int device, char *out, size_t out_n_bytes);
    /* Create one tower's device state: weights, activations for up to
     * max_batch examples, and gradients.  grads_host: (n_params) the host
     * buffer this tower delivers its gradients to, owned by the caller. */
    void *(*tower_create)(const ModelSpec *spec, int device, int max_batch, int n_threads,
                          float *grads_host, char *err, size_t err_n_bytes);
    void (*tower_free)(void *dev);
    /* params_host: (n_params) -> the tower's own weights. */
    int (*copy_params_in)(void *dev, const float *params_host, char *err, size_t err_n_bytes);
    /* x_host: (n, H, W, C), labels_host: (n) -> the device. */
    int (*copy_shard_in)(void *dev, const float *x_host, const int32_t *labels_host, int n,
                         char *err, size_t err_n_bytes);
    /* Forward and backward on the shard; *loss = the shard's mean loss,
     * *accuracy = the fraction of the shard whose largest logit is its label.
     * The shard's gradient is ADDED to the tower's (the model's backward
     * adds, llm.c's convention); accumulate 0 writes it instead, the same as
     * zeroing first (a step's first micro-batch), 1 adds to what is there (the
     * later micro-batches of --accum_steps) and first keeps the previous
     * micro-batch's batch statistics aside for update_moving.  loss_weight:
     * the weight of the shard's cross-entropy in the loss the backward
     * differentiates (model_acts_set_loss_weight; 1: the shard's own mean). */
    int (*compute)(void *dev, int accumulate, float loss_weight, float *loss, float *accuracy, char *err,
                   size_t err_n_bytes);
    /* The tower's gradient (where compute left it: the host buffer for the
     * CPU, the device's for a GPU) *= scale, before its copy-out.  Called
     * only when scale != 1 (the mean over micro-batches:
     * TowerStep.grad_scale). */
    int (*scale_grads)(void *dev, float scale, char *err, size_t err_n_bytes);
    /* The tower's gradients -> grads_host given at create; waits until they are there. */
    int (*copy_grads_out)(void *dev, char *err, size_t err_n_bytes);
    /* Optional (NULL: not supported).  From now on the tower's variables ARE
     * params_host (n_params floats owned by the caller), read in place by
     * compute and updated in place by the caller between steps; copy_params_in
     * is then not needed.  The CPU backend supports it; a GPU cannot. */
    int (*bind_params)(void *dev, float *params_host, char *err, size_t err_n_bytes);
    /* Optional (NULL: compute is not split).  tower_now_sec() at which the
     * forward pass of the last compute ended, so that the phase times can
     * show forward and backward apart. */
    double (*forward_end_sec)(const void *dev);
    /* Optional (NULL: nothing to say).  One line: how the tower runs its
     * conv layers (cuDNN's algorithms and whether each is deterministic; on
     * the CPU each pass's path), "" if the network has none. */
    void (*describe_algorithms)(const void *dev, char *out, size_t out_n_bytes);
    /* Optional, the three together (NULL: the backend keeps nothing on a
     * device of its own; the GPU modes need one that does).
     * device_view: the tower's device buffers (TowerDeviceView). */
    int (*device_view)(void *dev, TowerDeviceView *view, char *err, size_t err_n_bytes);
    /* params_dev: (n_params) device memory on GPU params_device -> the
     * tower's variables (a peer copy when the GPUs differ). */
    int (*copy_params_in_device)(void *dev, const float *params_dev, int params_device, char *err,
                                 size_t err_n_bytes);
    /* The tower's gradient -> grads_dev, (n_params) device memory on GPU
     * grads_device; waits until it is there. */
    int (*copy_grads_out_device)(void *dev, float *grads_dev, int grads_device, char *err, size_t err_n_bytes);
    /* Optional (NULL: the host's timestamps stand).  Called after a step's
     * copy-in, compute and copy-out succeeded: overwrites span[] entries
     * TOWER_PHASE_COPY_IN, _FORWARD, _BACKWARD and _COPY_OUT (the last only
     * when a copy-out ran) with the device's own start and end of those
     * phases in that step, on the tower_now_sec() clock. */
    void (*device_spans)(void *dev, TowerSpan *span);
    /* Optional (NULL: the backend cannot synchronise batch norm; a group
     * with sync_batch_norm then fails to start with one line).  From now on
     * the tower's training forwards reduce batch norm's statistics through
     * sync (model_acts_set_sync; copied). */
    int (*set_sync)(void *dev, const ModelSync *sync, char *err, size_t err_n_bytes);
    /* Optional (NULL: not known).  Host bytes one tower created by
     * tower_create(spec, ..., max_batch, ...) on this thread holds at most:
     * for memory bounds, running accum_steps micro-batches a step.  The CPU
     * backend's are its weights, logits, ModelActs and the kept batch
     * statistics of a step's earlier micro-batches; a GPU tower's state
     * lives in device memory. */
    size_t (*host_n_bytes)(const ModelSpec *spec, int max_batch, int accum_steps);
    /* Optional (NULL: the backend cannot; a network with non-trainable
     * variables then cannot train on it).  Batch norm's moving statistics:
     * the non-trainable variables of params_host (n_params, host memory
     * owned by the caller; the trainable entries are neither read nor
     * written) are updated in place from the statistics the tower's
     * training forwards of the last step saved, one update per micro-batch
     * in order (model_update_moving: moving = moving * momentum + batch_k *
     * (1 - momentum), k = 1..K; compute keeps each earlier micro-batch's
     * aside, model_moving_stats_save).  CPU: on the host; CUDA: the ranges
     * go to the device, model_update_moving_saved_cuda and
     * model_update_moving_cuda, and back. */
    int (*update_moving)(void *dev, float *params_host, char *err, size_t err_n_bytes);
    /* Optional (the GPU backends).  The non-trainable variables of
     * params_host (n_params, host) -> the same entries of params_dev
     * (n_params, device memory on GPU params_device); waits until copied. */
    int (*write_moving_device)(void *dev, const float *params_host, float *params_dev, int params_device, char *err,
                               size_t err_n_bytes);
} TowerBackend;

extern const TowerBackend tower_backend_cpu;

#ifdef TOWER_HAVE_CUDA
/* tower/cuda_device.cu: the number of usable GPUs, or -1 + err (no driver,
 * no device); and one line naming a GPU.  Never crashes without a GPU. */
int tower_cuda_device_count(char *err, size_t err_n_bytes);
void tower_cuda_describe_device(int device, char *out, size_t out_n_bytes);

/* tower/tower_cuda.c: GPU towers (pinned host memory, one stream and
 * cuDNN/cuBLAS handles per tower).  _tf32 lets cuDNN and cuBLAS use TF32
 * tensor cores (faster, about 1e-3 relative error); the plain one keeps
 * float32 math, comparable with the CPU.  _deterministic (--deterministic)
 * takes only cuDNN algorithms cuDNN calls deterministic and fails tower
 * creation with one line when a layer has none; the others prefer them. */
extern const TowerBackend tower_backend_cuda;
extern const TowerBackend tower_backend_cuda_tf32;
extern const TowerBackend tower_backend_cuda_deterministic;
extern const TowerBackend tower_backend_cuda_tf32_deterministic;
#endif

/* Find a backend by name ("cpu"; "cuda" or "gpu", "cuda-tf32", "cuda-deterministic",
 * "cuda-tf32-deterministic"); NULL when not built in. */
const TowerBackend *tower_backend_find(const char *name);

/* The phases of a tower's step, in the order they run. */
typedef enum {
    TOWER_PHASE_COPY_IN = 0, /* variables (unless bound) + shard -> the device */
    TOWER_PHASE_FORWARD,     /* forward (the whole compute when the backend does not split it) */
    TOWER_PHASE_BACKWARD,    /* backward */
    TOWER_PHASE_COPY_OUT,    /* gradients -> the host gradient buffer */
    TOWER_PHASE_SYNC,        /* hooks only: waiting for the other towers (stragglers show here) */
    TOWER_PHASE_REDUCE,      /* hooks only: the reduce hook (all-reduce of the gradients) */
    TOWER_PHASE_APPLY,       /* hooks only: the apply hook (update of the tower's variables) */
    TOWER_N_PHASES
} TowerPhase;

/* "copy_in", "forward", "backward", "copy_out", "sync", "reduce", "apply". */
const char *tower_phase_name(TowerPhase p);

/* What one tower did in its last step: absolute spans of every phase
 * (durations come from tower_phase_sec, never stored twice). */
typedef struct {
    double go_sec;         /* when the step was published (tower_now_sec clock) */
    double run_sec;        /* when the tower's thread began the step, before any backend call (host clock) */
    TowerSpan span[TOWER_N_PHASES];
} TowerTimes;

/* Seconds the phase took in the last step (0 when it did not run). */
static inline double tower_phase_sec(const TowerTimes *tt, TowerPhase p) {
    return tt->span[p].end_sec - tt->span[p].start_sec;
}

/* Seconds from the go to the start of copy-in (the thread's wake-up; a GPU tower's copy-in starts on the
 * device's clock, so this also holds the time its first CUDA call took to reach the device). */
static inline double tower_wake_sec(const TowerTimes *tt) { return tt->span[TOWER_PHASE_COPY_IN].start_sec - tt->go_sec; }

/* Seconds from the go to the tower's thread running the step (host clock only). */
static inline double tower_thread_wake_sec(const TowerTimes *tt) { return tt->run_sec - tt->go_sec; }

/* Per-step work run on every tower thread after its gradients are
 * delivered (the replicated modes).  Each returns 0, or -1 with one line in
 * err; `tower` is the tower's index.  Both run only when every tower got
 * through its copy-out and every tower's loss is finite, so a failure or a
 * diverged step changes no variable.  reduce is collective (every tower's
 * call waits for the others): it must return on every tower or on none.
 * Either may be NULL. */
typedef struct {
    int (*reduce)(void *ctx, int tower, char *err, size_t err_n_bytes);
    int (*apply)(void *ctx, int tower, char *err, size_t err_n_bytes);
    void *ctx;
} TowerHooks;

/* Where one tower's step copies its variables from and its gradient to
 * when they stay on the GPUs (TowerStep.device_copy; the backend needs the
 * *_device operations). */
typedef struct {
    const float *params_src; /* (n_params) device memory on GPU params_device to copy in; NULL: no copy-in
                              * (the tower's device variables are current: replicated_nccl) */
    int params_device;
    float *grads_dst;        /* (n_params) device memory on GPU grads_device to copy the gradient to; NULL: no
                              * copy-out (it stays in the tower's device buffer, TowerDeviceView.grads) */
    int grads_device;
} TowerDeviceCopy;

typedef struct TowerGroup TowerGroup;

typedef struct Tower {
    TowerGroup *group;             /* the group this tower belongs to */
    int index;
    int device;
    int n_threads;                 /* OpenMP threads this tower uses (CPU backend) */
    const TowerBackend *backend;
    void *dev;                     /* the backend's state */
    pthread_t thread;
    /* the step's inputs, set by the parameter server thread before the go */
    const float *params;           /* (n_params) variables to copy in, read only during the step; NULL: no copy-in */
    int bound;                     /* 1: the tower's variables are bound to a host buffer (tower_group_bind_params) */
    int has_device_copy;           /* 1: this step's copies are device_copy's (the GPU modes), not params / the host buffer */
    TowerDeviceCopy device_copy;
    const float *x;                /* (n, H, W, C) this tower's shard in the staging buffer */
    const int32_t *labels;         /* (n) */
    int n;                         /* examples of the whole shard: accum_steps micro-batches of n / accum_steps */
    int accum_steps;               /* micro-batches in this step, >= 1 */
    float loss_weight;             /* the cross-entropy's weight in every micro-batch's backward (1: the shard's mean) */
    float grad_scale;              /* the gradient is multiplied by it after the last micro-batch (1: untouched) */
    /* the step's outputs */
    float loss;                    /* mean loss over the shard: the micro-batches' mean losses, averaged */
    float accuracy;                /* fraction of the shard predicted right (before the update) */
    int status;                    /* 0 ok, -1 failed (err says why) */
    char err[256];
    TowerTimes times;
    double *bn_slot;               /* (bn_slot_n) sync batch norm: this tower's sums, read by every tower */
    size_t bn_slot_n;
    int bn_failed;                 /* this step's collective sum could not run here (err says why) */
} Tower;

struct TowerGroup {
    int n_towers;
    Tower towers[TOWER_MAX_TOWERS];
    const ModelSpec *spec;
    pthread_mutex_t mu;
    pthread_cond_t go_cv, done_cv;
    long go_generation;            /* incremented for each step (or to quit) */
    double go_time;                /* tower_now_sec() at the go */
    int n_done;
    int quit;
    const TowerHooks *hooks;       /* this step's hooks, or NULL */
    pthread_cond_t sync_cv;        /* tower_sync: the towers wait for each other before the hooks */
    int n_synced;
    long sync_generation;
    int sync_failed;               /* some tower failed or lost a finite loss this step */
    /* Sync batch norm (TowerGroupConfig.sync_batch_norm): the towers' collective sum (tower.c's
     * tower_bn_sum) meets twice per call, counted like tower_sync; a tower that fails before or
     * in its compute sets bn_aborted, which releases every waiting tower for the rest of the step. */
    int sync_batch_norm;
    pthread_cond_t bn_cv;
    int bn_arrived;
    long bn_generation;
    int bn_aborted;
    /* Across processes (TowerGroupConfig.sum_across): tower 0 puts the towers' sum in bn_total, raises
     * across_pending and waits on across_cv; tower_group_run's thread runs the sum and lowers it. */
    int (*sum_across)(double *buf, size_t n_doubles, int state, int *other);
    double *bn_total;              /* (bn_total_n) the towers' sum, then the job's */
    size_t bn_total_n, across_n;
    int across_pending;
    int across_other;              /* the process whose failure failed this sum, or -1 */
    int across_rc;
    pthread_cond_t across_cv;
};

typedef struct {
    const TowerBackend *backend;
    int n_towers;
    int devices[TOWER_MAX_TOWERS];   /* tower t runs on devices[t] */
    int n_threads[TOWER_MAX_TOWERS]; /* OpenMP threads of tower t (CPU) */
    int max_batch;                   /* largest micro-batch a tower will get (with accum_steps 1, its shard) */
    int sync_batch_norm;             /* 1: --batch_norm sync, batch norm over the global batch (the backend's set_sync) */
    /* Sync batch norm across processes (the ranks of an MPI job); NULL: this group's towers are the whole batch.
     * Called only on the thread of tower_group_run, never on a tower thread (MPI_THREAD_FUNNELED), with
     * base/ranks.h's ranks_sum_ordered contract: state RANKS_SUM_DATA, buf (n_doubles) = this group's sum in
     * tower order, replaced by the job's, returns 0, or -1 with *other = a process whose step failed (this
     * group's step then fails); RANKS_SUM_END / _FAILED once every tower has finished the step, repeated while
     * it returns 1, so a process that failed anywhere in its step never leaves another waiting in a sum. */
    int (*sum_across)(double *buf, size_t n_doubles, int state, int *other);
} TowerGroupConfig;

/* Start n_towers tower threads.  tower_grads[t]: (n_params) host buffer of
 * tower t, owned by the caller (the parameter server).  NULL + err on failure. */
TowerGroup *tower_group_create(const TowerGroupConfig *cfg, const ModelSpec *spec,
                               float *const *tower_grads, char *err, size_t err_n_bytes);

/* One synchronous step (the parameter-server modes give every tower the
 * same params and no hooks). */
typedef struct {
    const float *params[TOWER_MAX_TOWERS]; /* (n_params) what tower t copies in; NULL when tower t is bound */
    const float *x;                        /* (global batch, H, W, C) the staged batch */
    const int32_t *labels;                 /* (global batch) */
    const int *shard_offset, *shard_n;     /* [n_towers]: tower t takes examples [offset, offset + n) */
    const TowerHooks *hooks;               /* NULL: none (the parameter-server modes) */
    const TowerDeviceCopy *device_copy;    /* [n_towers], or NULL: copy-in from params[t], copy-out to the
                                            * host buffer (the host modes); else params[] is not used */
    int accum_steps;                       /* K micro-batches per tower (--accum_steps; 0 reads as 1): tower t runs
                                            * forward and backward on examples [offset + k n, offset + (k+1) n) of
                                            * its shard, n = shard_n[t] / K, for k = 0..K-1, its gradient summing */
    const float *grad_scale;               /* [n_towers] or NULL (all 1): tower t's summed gradient is multiplied by
                                            * grad_scale[t] before its copy-out (the trainer's 1/K) */
    const float *loss_weight;              /* [n_towers] or NULL (all 1): the weight of tower t's cross-entropy in
                                            * the loss its backward differentiates, applied to its output gradient
                                            * before the backward (--loss_scaling's weights: train_run_towers) */
} TowerStep;

/* Run one synchronous step: every tower copies its params in (unless
 * bound or device_copy says otherwise), computes on its shard (x +
 * shard_offset[t] examples, shard_n[t] of them, in accum_steps
 * micro-batches whose gradients add up), multiplies its gradient by
 * grad_scale[t] and delivers it; then, with hooks, every tower's sync,
 * reduce and apply.  Returns when all are done: 0, or -1 with the first
 * failing tower's message in err (with hooks, no tower ran them then).
 * Each tower's mean loss and batch accuracy are then in g->towers[t].loss
 * and .accuracy.  A tower with an unbound backend and a NULL params entry
 * is an error, as are a device_copy for a backend without device
 * operations and a shard_n[t] that accum_steps does not divide.
 * With accum_steps > 1 the FORWARD span is the whole micro-batch loop
 * (the later micro-batches' shard copies included) and BACKWARD is empty:
 * the phases are not split, and are the host's times on a GPU. */
int tower_group_run(TowerGroup *g, const TowerStep *step, char *err, size_t err_n_bytes);

/* Tower t's line of TowerBackend.describe_algorithms into out ("" for a tower t that does not exist). */
void tower_group_describe_algorithms(const TowerGroup *g, int t, char *out, size_t out_n_bytes);

/* Tower t's device buffers (TowerBackend.device_view).  Returns 0, or -1
 * with one line in err when the backend has none (CPU towers). */
int tower_group_device_view(const TowerGroup *g, int t, TowerDeviceView *view, char *err, size_t err_n_bytes);

/* Bind tower t's variables to params[t] (n_params floats each, owned by the
 * caller, which must keep them alive until tower_group_free): the replicated
 * modes' towers then compute on them in place and skip the copy-in.
 * Returns 1 when every tower is bound, 0 when the backend cannot bind
 * (nothing changed: copy in every step instead), -1 with err on a failure. */
int tower_group_bind_params(TowerGroup *g, float *const *params, char *err, size_t err_n_bytes);

/* Tower t's update_moving (TowerBackend) on params_host, called from the
 * thread that runs tower_group_run between steps.  0, or -1 with one line
 * in err (a backend without it, a failed copy). */
int tower_group_update_moving(TowerGroup *g, int t, float *params_host, char *err, size_t err_n_bytes);

/* Tower t's write_moving_device: the non-trainable entries of params_host
 * into params_dev on GPU params_device.  0, or -1 with err. */
int tower_group_write_moving_device(TowerGroup *g, int t, const float *params_host, float *params_dev,
                                    int params_device, char *err, size_t err_n_bytes);

/* Stop the threads and free every tower. */
void tower_group_free(TowerGroup *g);

double tower_now_sec(void);

#endif
