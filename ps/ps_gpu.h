/* ps_gpu.h — the parameter server's state on GPUs: the modes ps_gpu
 * (--variable_update parameter_server --local_parameter_device gpu) and the
 * per-tower slots of replicated_nccl (--variable_update replicated
 * --all_reduce nccl).  docs/modes.md draws what moves where.
 *
 * Where it sits: ps/, beside the host ParamServer (ps/ps.h), which stays the
 * holder of global_step, the learning-rate schedule, the configuration and
 * of the host block a checkpoint reads and writes.  The GPU state is a copy
 * of that block's variables, momentum slots and moving averages on devices:
 * made from it when created (which is how a resumed run carries on), and
 * copied back into it by the *_download calls (before a checkpoint, or to
 * read the variables), so the checkpoint format is the host modes'.
 *
 * The towers' own device buffers come in as plain device pointers: the
 * trainer (cmd/) takes them from the tower backend's device view
 * (tower/tower.h); nothing here knows a tower's insides.
 *
 * PsGpu (ps_gpu, what PyTorch's DataParallel does): variables, momentum
 * slots and moving averages on tower 0's GPU.  Each step tower t copies the
 * variables in from there (peer copy) and its gradient out to there (a
 * peer copy into a gather buffer; a tower on that GPU leaves it where it
 * is), then ps_gpu_step averages them in tower order and applies the update
 * with the kernels of ps/ps_gpu_kernels.h: steps 1-5 of ps/ps.h on the GPU.
 * Peer access is enabled between that GPU and every other tower's GPU where
 * the hardware allows; where it does not, cudaMemcpyPeerAsync stages the
 * copy through host memory itself (CUDA programming guide, "Peer-to-Peer
 * Memory Copy").
 *
 * PsGpuReplicas (replicated_nccl): tower r's variables ARE its own device
 * buffer (the tower computes on them in place); this object adds, on tower
 * r's GPU, its momentum slots and its 1/N share of the moving averages
 * (elements [r n / N, (r + 1) n / N), as ps_replica_apply), and applies
 * tower r's update after the gradients have been all-reduced
 * (ps/allreduce_nccl.h).
 *
 * Synchronisation: every call here has finished on the device when it
 * returns (it waits for its own stream), and every tower phase that writes
 * a buffer read here has too (tower_cuda.c waits per phase): so the host's
 * order of calls is the device's order, across streams and GPUs.
 * Errors: creation reports one line in err; a CUDA failure in a step or a
 * copy is not recoverable and exits with one line (base/cuda_check.h).
 */
#ifndef TOWER_PS_PS_GPU_H
#define TOWER_PS_PS_GPU_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" { /* the C headers included here have no guards of their own */
#endif

#include "ps/ps.h"

/* Where an operation ran on its device: milliseconds after the call began
 * (the moment its first CUDA event was recorded on an idle stream, which a
 * caller may take as "now" on its own clock just before the call). */
typedef struct {
    float start_ms, end_ms;
    int ran; /* 0: the operation did not run in this call (the times are 0) */
} PsGpuSpanMs;

/* ---- ps_gpu ---- */

typedef struct PsGpu PsGpu;

/* The server on devices[0] for n_towers towers (1 to 64), tower t on
 * devices[t] delivering its gradient to tower_grads[t] ((n_params) device
 * memory on devices[t], owned by the tower).  Allocates there the
 * variables, slots (with momentum), moving averages (when ps has them), the
 * averaged gradient and a gather buffer for each tower on another GPU,
 * enables peer access where possible, and copies ps->params, ps->slots and
 * ps->ema up.  Returns NULL with one line in err.  Leaves the caller's
 * current device as it was. */
PsGpu *ps_gpu_create(const ParamServer *ps, int n_towers, const int *devices, float *const *tower_grads, char *err,
                     size_t err_n_bytes);

/* The server's GPU, and its variables there ((n_params) device memory):
 * what every tower copies in. */
int ps_gpu_device(const PsGpu *g);
const float *ps_gpu_params(const PsGpu *g);

/* Where tower t copies its gradient out to ((n_params) device memory on
 * ps_gpu_device), or NULL when tower t is on the server's GPU: then the
 * average reads the tower's own buffer and there is nothing to copy. */
float *ps_gpu_gather_dst(const PsGpu *g, int tower);

/* 1: the copies between tower t's GPU and the server's go peer to peer; 0:
 * staged through host memory; -1: tower t is on the server's GPU. */
int ps_gpu_peer_access(const PsGpu *g, int tower);

/* Steps 1-5 of ps/ps.h on the GPU, once every tower has delivered: the
 * mean of the gradients in tower order, lr = ps_step_lr(ps), the optimizer
 * on the variables and slots, ps->global_step + 1, the moving averages with
 * the decay of the new global_step; ps->last_lr = lr.  ps's host
 * variables are not touched (ps_gpu_download brings them).  *average and
 * *apply (either may be NULL) get the device's times of the two parts. */
/* Returns 0; PS_GPU_MEAN_NONFINITE when the mean gradient was not finite:
 * then nothing was applied and global_step is unchanged, as ps_average_grads
 * + ps_apply_gradients leave the host server; PS_GPU_VARS_NONFINITE when a
 * new variable is not finite (the step counts, as on the host).  The
 * findings come from the kernels themselves (ps_gpu_kernels.h). */
#define PS_GPU_MEAN_NONFINITE 1
#define PS_GPU_VARS_NONFINITE 2
int ps_gpu_step(PsGpu *g, ParamServer *ps, PsGpuSpanMs *average, PsGpuSpanMs *apply);

/* The GPU's variables, slots and moving averages -> ps->params, ps->slots,
 * ps->ema (host). */
void ps_gpu_download(const PsGpu *g, ParamServer *ps);

/* Free the device memory, stream and events (NULL: no-op).  Peer access
 * stays enabled (it is the process's, and costs nothing). */
void ps_gpu_free(PsGpu *g);

/* ---- replicated_nccl: each tower's slots and share of the moving averages ---- */

typedef struct PsGpuReplicas PsGpuReplicas;

/* n_towers (1 to 64) replicas, replica r being tower r's own device
 * buffers on devices[r]: tower_params[r] (its variables, which the tower
 * computes on in place) and tower_grads[r] (its gradient, holding the mean
 * gradient when ps_gpu_replica_apply runs), (n_params) each, owned by the
 * tower.  Allocates replica r's momentum slots and its share of the moving
 * averages on devices[r] and copies ps->params, ps->slots and ps->ema into
 * every replica (the initial broadcast, or the resumed state).  Returns
 * NULL with one line in err.  Leaves the caller's current device as it was. */
PsGpuReplicas *ps_gpu_replicas_create(const ParamServer *ps, int n_towers, const int *devices,
                                      float *const *tower_params, float *const *tower_grads, char *err,
                                      size_t err_n_bytes);

/* Replica r's part of the step, on tower r's thread: the optimizer on its
 * variables and slots with its (all-reduced) gradient and lr, then its
 * share of the moving averages with the decay of ps->global_step + 1 — the
 * device form of ps_replica_apply.  Safe to call concurrently for different
 * r; ps is only read (global_step must not change meanwhile).  *apply (may
 * be NULL) gets the device's time.  Returns 0, or PS_GPU_VARS_NONFINITE
 * when a new variable of replica r is not finite (ps_replica_apply's -1). */
int ps_gpu_replica_apply(PsGpuReplicas *rp, int r, const ParamServer *ps, float lr, PsGpuSpanMs *apply);

/* Replica 0's variables and slots -> ps->params, ps->slots; every
 * replica's share of the moving averages -> ps->ema. */
void ps_gpu_replicas_download(const PsGpuReplicas *rp, ParamServer *ps);

/* Free the slots, shares, streams and events (NULL: no-op). */
void ps_gpu_replicas_free(PsGpuReplicas *rp);

#ifdef __cplusplus
}
#endif

#endif
