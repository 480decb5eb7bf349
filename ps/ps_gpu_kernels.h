/* ps_gpu_kernels.h — the parameter server's arithmetic on a GPU: the mean of
 * the towers' gradients, the optimizer and the moving average, each one
 * kernel, enqueued on a stream.
 *
 * Where it sits: ps/, CUDA builds only; used by ps/ps_gpu.cu (the modes
 * ps_gpu and replicated_nccl) and ps/allreduce_nccl.cu, and tested against
 * the CPU functions by tests/test_gpu_ps_kernels.c.  The formulas are the
 * ones stated in ps/optimizer.h (and the mean of ps/ps.h, step 1), evaluated
 * operation for operation in float32 with round-to-nearest intrinsics
 * (__fadd_rn, __fmul_rn, ...), which the compiler never contracts into a
 * fused multiply-add (square roots: __fsqrt_rn; divisions: __fdiv_rn): each
 * element comes out bitwise equal to the CPU loop's
 * (the CPU build uses no FMA either: plain x86-64, no -march).  Weight decay
 * is not here, as on the CPU: it is part of the loss, so its gradient is
 * already in the gradient the towers deliver (model/).
 *
 * Conventions: every pointer is DEVICE memory on the current device, which
 * the caller sets (cudaSetDevice) and to which `stream` belongs; nothing
 * waits (the caller synchronises); a launch failure exits with one line
 * (base/cuda_check.h).  n_floats == 0 launches nothing.
 */
#ifndef TOWER_PS_PS_GPU_KERNELS_H
#define TOWER_PS_PS_GPU_KERNELS_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" { /* the C headers included here have no guards of their own */
#endif

#include "base/limits.h"
#include "ps/optimizer.h"

/* The most source buffers ps_gpu_sum_div takes (the tower bound). */
#define PS_GPU_MAX_SRCS TOWER_MAX_TOWERS /* one gradient per tower */

/* Non-finite findings of a step live in device ints (ps_gpu.cu's steps
 * keep PS_GPU_N_FLAGS of them): a kernel that produces an infinite or NaN
 * value writes 1 to its `bad` flag (float_nonfinite's test, in the same
 * loop), never 0, so the caller zeroes the flags before the step.  A kernel
 * given a `skip` flag that reads non-zero does nothing: the optimizer and
 * the moving average skip a step whose mean gradient was not finite, as the
 * CPU server does, with no wait between the kernels.  NULL: no flag. */
#define PS_GPU_FLAG_MEAN 0  /* the mean gradient */
#define PS_GPU_FLAG_VARS 1  /* the updated variables */
#define PS_GPU_N_FLAGS 2

/* out[i] = (((srcs[0][i] + srcs[1][i]) + srcs[2][i]) + ... + srcs[n_srcs-1][i]) / divisor,
 * summed in source order, as ps_average_grads.  With divisor 1 it is the
 * plain sum (x / 1 is x exactly).  out may be srcs[0] (in place).
 *   out  : (n_floats)
 *   srcs : [n_srcs] host array of device pointers, (n_floats) each; 1 <= n_srcs <= PS_GPU_MAX_SRCS
 *   bad  : (1) device int set to 1 when some out[i] is not finite, or NULL */
void ps_gpu_sum_div(float *out, const float *const *srcs, int n_srcs, size_t n_floats, float divisor, int *bad,
                    cudaStream_t stream);

/* The optimizer table's apply on the device: the kernel of `kind` (one per
 * table entry, ps_gpu.cu's opt_kernels) with the step's constants that the
 * table's prepare computed on the host (ps_step_prepare), params and slots
 * updated in place.  The scalars (Adam's beta powers) stay on the host; the
 * caller advances them after the step (ps_finish_step).
 *   params : (n_floats)   slots : [OPT_MAX_SLOTS] -> (n_floats), the kind's slots (NULL for sgd)
 *   grads  : (n_floats) */
/*   skip   : (1) device int: non-zero -> nothing changes; or NULL
 *   bad    : (1) device int set to 1 when a new variable is not finite, or NULL */
void ps_gpu_optimizer_apply(float *params, float *const *slots, const float *grads, size_t n_floats,
                            const OptStep *step, OptimizerKind kind, const int *skip, int *bad, cudaStream_t stream);

/* ema_apply on the device: shadow -= (shadow - params) * (1 - decay).
 *   shadow : (n_floats) updated in place   params : (n_floats)
 *   skip   : (1) device int: non-zero -> nothing changes; or NULL */
void ps_gpu_ema_apply(float *shadow, const float *params, size_t n_floats, float decay, const int *skip,
                      cudaStream_t stream);

/* Launch each kernel above once (on one float of scratch) on the current
 * device and wait: CUDA loads kernels lazily (CUDA_MODULE_LOADING=LAZY, the
 * default since CUDA 12.2), and a first launch that loads a module right
 * after an ncclAllReduce still waiting for a peer can hang (NVIDIA/nccl#613).
 * ps_gpu_create, ps_gpu_replicas_create and allreduce_nccl_create call this
 * once per GPU they use, so no PS kernel is ever loaded beside NCCL.
 * Returns 0, or -1 with one line in err. */
int ps_gpu_warm_kernels(char *err, size_t err_n_bytes);

#ifdef __cplusplus
}
#endif

#endif
