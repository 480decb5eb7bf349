/* ps.h — the parameter server: master variables, gradient averaging and the
 * update, on the host.
 *
 * Where it sits: the centre of the tower pattern (TensorFlow's
 * cifar10_multi_gpu_train with every variable on /cpu:0).  Each step, tower
 * i reads `params`, computes its shard's gradient and delivers it into
 * `tower_grads[i]`; then the trainer calls ps_average_grads and
 * ps_apply_gradients on one thread, which run OpenMP loops over elements.
 * The server knows the model only as ModelSpec's flat block and table of
 * named variables; it knows nothing of a tower's insides, devices or data.
 * It does not synchronise towers: the caller must not run both calls while a
 * tower is still writing its gradient or reading params.
 *
 * Memory: params, every optimizer slot, ema, grads and every tower_grads[i] are slices of
 * ONE contiguous block from the backend's HostAlloc (pinned with the CUDA
 * backend, page-aligned otherwise); each slice starts on a 4096-byte
 * boundary.  With PsConfig.keep (a server that updates only some of the
 * variables: ps_mpi's shard owner) the slots and ema are instead slices of
 * a second block, from calloc (which maps a large block fresh, its pages
 * zero and not resident until written), at the same offsets, and only the
 * kept variables' ranges are initialised and written: the others stay
 * zero, cost no resident memory, and are never read (ckpt_load does write
 * all of them, on the rank that loads).
 *
 * One step, in this order (formulas: ps/optimizer.h):
 *   1. grads = (tower_grads[0] + tower_grads[1] + ... + tower_grads[n-1]) / n,
 *      summed left to right in tower order for every element, so a run is
 *      bitwise deterministic for a given tower count;
 *   2. lr = lr_schedule_at(global_step)  (step before the increment);
 *   3. the optimizer updates params, its slots and its scalars (the table
 *      of ps/optimizer.h: prepare, apply, finish);
 *   4. global_step += 1;
 *   5. ema (if enabled) moves toward the NEW params with
 *      decay = ema_decay_at(ema_decay, global_step), global_step being the
 *      value after the increment.
 * Step 5's choice: TensorFlow's cifar10_multi_gpu_train groups
 * apply_gradients and the moving-average op without ordering them (a race);
 * the older cifar10.py ran the average under
 * control_dependencies([apply_gradient_op]), i.e. after the update, reading
 * global_step after its increment.  Tower always uses that ordered form.
 */
#ifndef TOWER_PS_PS_H
#define TOWER_PS_PS_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "ps/optimizer.h"
#include "base/host_alloc.h"

typedef struct {
    OptimizerConfig opt;
    LrSchedule lr;
    float ema_decay; /* MOVING_AVERAGE_DECAY, 0.9999; <= 0 disables the moving average */
    const unsigned char *keep; /* (spec n_vars) or NULL (every variable): across ranks, the variables whose slots and
                                  moving averages this server updates (ps_mpi: the shard it owns); ps_create reads it
                                  and clears it (the server keeps no pointer) */
} PsConfig;

/* Fill c with momentum 0.9 Nesterov, a constant learning rate of 0.01
 * (decay_factor 1, decay_steps 0, staircase 1) and ema_decay 0.9999. */
void ps_config_defaults(PsConfig *c);

typedef struct {
    ModelSpec spec;          /* copy of the caller's spec */
    PsConfig cfg;
    HostAlloc alloc;
    int n_towers;
    float *params;           /* (n_params) the master variables, from alloc */
    int n_slots;             /* the optimizer's slots (optimizer_slots): 0 for sgd, 1 momentum, 2 adam, ... */
    const OptSlot *slot_info;/* [n_slots] their names and initial values (the optimizer table's) */
    float *slots[OPT_MAX_SLOTS]; /* [n_slots] -> (n_params) each, from alloc; NULL beyond n_slots */
    float scalars[OPT_MAX_SCALARS]; /* the optimizer's non-slot state (Adam's beta1_power, beta2_power) */
    float *ema;              /* (n_params) moving averages (NULL when disabled), from alloc */
    float *grads;            /* (n_params) the averaged gradient, from alloc (NULL with n_towers 0) */
    const float *mean;       /* (n_params) what ps_apply_gradients applies, set by ps_average_grads: grads, or with
                                one tower tower_grads[0] itself (no copy); NULL: grads */
    float **tower_grads;     /* [n_towers] -> (n_params) each tower's delivered gradient, from alloc (none: n_towers 0) */
    long global_step;        /* synchronous steps applied */
    float last_lr;           /* the learning rate of the last ps_apply_gradients; 0 before */
    void *block;             /* the one allocation all slices above live in (with keep: all but slots and ema) */
    size_t block_n_bytes;
    void *state_block;       /* with PsConfig.keep: the slots' and ema's block (calloc), else NULL */
    size_t kept_n_floats;    /* with PsConfig.keep: the kept variables' floats (n_params without); for ps_host_n_bytes */
    /* Replicated modes only (ps_create_replicas); 0 / NULL otherwise. */
    int n_replicas;
    float **replica_params;  /* [n_replicas] -> (n_params) tower r's own variables, from alloc */
    float **replica_slots;   /* [n_replicas * OPT_MAX_SLOTS] -> (n_params): tower r's own slot k at
                                [r * OPT_MAX_SLOTS + k] (NULL beyond n_slots) */
    void *replica_block;     /* the one allocation the replica slices live in */
} ParamServer;

/* Create a server for `spec` with n_towers >= 0 gradient slots (0: a
 * server-only rank across MPI ranks, which no tower delivers to; then
 * ps_average_grads must not be called).  params are
 * initialised with model_init_params(seed), ema = params, every optimizer
 * slot to its table value (0; RMSProp's mean squares 1), the scalars by the
 * table's init_scalars (with cfg->keep: the kept variables' ema and slots
 * only), grads and tower_grads = 0 (with n_towers 0 neither exists: grads
 * is NULL), global_step = 0.  The server keeps
 * `alloc` and frees its block with it.  Returns NULL (and prints nothing) for
 * n_towers < 0, an empty spec, an unknown optimizer kind, or when the
 * allocation fails. */
ParamServer *ps_create(const ModelSpec *spec, int n_towers, const PsConfig *cfg,
                       HostAlloc alloc, uint64_t seed);

/* Free the block and the server.  NULL is a no-op. */
void ps_free(ParamServer *ps);

/* Host bytes the server holds: its block (params, grads, slots, ema, every
 * tower_grads slice; with keep the kept variables' part of the slots and
 * ema) and, in the replicated modes, the replicas' block,
 * with the pointer tables.  For memory bounds; never fails. */
size_t ps_host_n_bytes(const ParamServer *ps);

/* What ps_create(spec, n_towers, cfg) would hold, before it does, as
 * ps_host_n_bytes counts it: its block (params, the mean gradient, every
 * tower's slice, the optimizer's slots and the moving averages; with keep,
 * only the kept variables' part of those two).  For a memory check before
 * a server too large for the machine is asked for. */
size_t ps_plan_n_bytes(const ModelSpec *spec, int n_towers, const PsConfig *cfg);

/* out = (g[0] + g[1] + ... + g[n-1]) / divisor per element, left to right,
 * in blocks on the OpenMP threads, bitwise the serial loop for any thread
 * count; divisor 1 divides nothing, any other count_divide's way (ps/optimizer.h).
 * out: (n_floats); g: [n >= 1] -> (n_floats).  ps_average_grads' sum, and the
 * MPI modes' (train/).  Returns 1 when a quotient is infinite or NaN (tested
 * where it divides), else 0. */
int ps_sum_in_order(float *out, const float *const *g, int n, size_t n_floats, int divisor);

/* grads = (sum over towers in order 0..n-1 of tower_grads[t]) / n_towers:
 * per element, s = g0; s += g1; ...; grads = s / (float)n_towers.
 * OpenMP over elements; bitwise equal to that serial loop.  With one tower
 * the mean is tower_grads[0] itself (g0 / 1 is g0): it is only checked, and
 * ps->mean points at it instead of grads, which is left as it was.  Returns
 * 0, or -1 when a mean is infinite or NaN (tested in the same loop; the
 * caller then applies nothing and stops: the model diverged). */
int ps_average_grads(ParamServer *ps);

/* Steps 2-5 above on ps->mean (ps->grads where no ps_average_grads set it;
 * NULL again after): lr from the schedule at global_step, the
 * optimizer (on the trainable variables only: non-trainable ones, batch
 * norm's moving statistics, keep their values under every optimizer, AdamW's
 * decay included; the trainer updates them), global_step++, the moving average; sets last_lr.  Returns 0,
 * or -1 when a new variable is infinite or NaN (optimizer_apply's test, in
 * its loop); the step is applied either way, and the caller stops. */
int ps_apply_gradients(ParamServer *ps);

/* ---- replicated modes (docs/modes.md) ----
 * With `--variable_update replicated` every tower keeps its own copy of the
 * variables and of the momentum slots and applies the update itself, on its
 * own thread, after the towers have all-reduced their gradients; the towers
 * also update the moving averages, each its 1/N share of them (the replicas
 * are bitwise equal, so each reads its own).  The server stays the holder
 * of global_step, the learning-rate schedule, the moving averages and of
 * what a checkpoint saves, and its own thread only increments global_step:
 *   ps->params / ps->slots are a snapshot of replica 0, refreshed by
 *   ps_gather_replica before a save; after a load, ps_broadcast_replicas
 *   hands them to every replica.  One replicated step, in this order:
 *     lr = ps_step_lr(ps)                          (the server thread)
 *     every tower r: its gradient all-reduced to the mean (ps/allreduce_host.h),
 *                    ps_replica_apply(ps, r, mean, lr)   (tower r's thread)
 *     ps_finish_replicated_step(ps, lr)            (the server thread)
 * which is steps 2-5 of the parameter-server step with replica 0 in place
 * of params (step 5 reads global_step + 1 before the server increments it,
 * the same value).  Every replica prepares the step's constants from the
 * server's scalars, which only ps_finish_replicated_step advances. */

/* Allocate n_replicas (>= 1) replicas from ps->alloc and broadcast params
 * and the slots into each.  Returns 0, or -1 when the allocation fails or
 * replicas exist already (ps unchanged). */
int ps_create_replicas(ParamServer *ps, int n_replicas);

/* params and slots -> every replica (after ckpt_load).  Never fails. */
void ps_broadcast_replicas(ParamServer *ps);

/* Replica r's variables and slots -> params and slots (before
 * ckpt_save, or to read the trained variables).  Never fails. */
void ps_gather_replica(ParamServer *ps, int r);

/* The learning rate of the step about to run: lr_schedule_at(global_step). */
float ps_step_lr(const ParamServer *ps);

/* Replica r's slots: [ps->n_slots] -> (n_params) each. */
float *const *ps_replica_slots(const ParamServer *ps, int r);

/* The constants of the step about to run (the table's prepare, from the
 * scalars, global_step and lr): what ps_replica_apply and the GPU kernels
 * read.  Never fails. */
void ps_step_prepare(const ParamServer *ps, float lr, OptStep *step);

/* Replica r's part of the step: the optimizer on replica_params[r] and
 * its slots with grads (n_params) and lr, then the moving averages
 * of elements [r * n_params / n_replicas, (r + 1) * n_params / n_replicas)
 * from replica r's new variables, with the decay of global_step + 1.  Safe
 * to call concurrently for different r (each call writes only its replica
 * and its share of ema); global_step must not change meanwhile.  Returns 0,
 * or -1 when a new variable of the replica is infinite or NaN (as
 * ps_apply_gradients). */
int ps_replica_apply(ParamServer *ps, int r, const float *grads, float lr);

/* The end of every step (ps_apply_gradients, ps_gpu_step, the replicated
 * step): the optimizer's scalars advance (the table's finish), global_step
 * += 1, last_lr = lr.  Never fails. */
void ps_finish_step(ParamServer *ps, float lr);

/* After every replica's ps_replica_apply: ps_finish_step. */
void ps_finish_replicated_step(ParamServer *ps, float lr);

#endif
