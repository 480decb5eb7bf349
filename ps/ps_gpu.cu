/* ps_gpu.cu — the parameter server's state and arithmetic on GPUs (API:
 * ps/ps_gpu.h, ps/ps_gpu_kernels.h).
 *
 * Where it sits: ps/, CUDA builds only.  The kernels evaluate the formulas
 * of ps/optimizer.h and the mean of ps/ps.h with round-to-nearest
 * intrinsics, so that no multiply-add is fused and each element equals the
 * CPU's bit for bit; the two objects (PsGpu for ps_gpu, PsGpuReplicas for
 * replicated_nccl) own device copies of the host block's variables, slots
 * and moving averages and move them between host and device.  It does not
 * all-reduce (ps/allreduce_nccl.cu) or copy anything to or from a tower (the
 * towers' threads do that, tower/tower_cuda.c).
 */
#include "ps/ps_gpu.h"
#include "ps/ps_gpu_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "base/cuda_check.h"

#define PS_GPU_THREADS 256
#define PS_GPU_MAX_BLOCKS 4096

/* ---- kernels (formulas: ps/optimizer.h; the mean: ps/ps.h step 1) ------------------------- */

/* 1 when x is infinite or NaN (its exponent bits all ones): float_nonfinite's test. */
__device__ static inline int nonfinite(float x) { return (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u; }

/* The source pointers, passed by value (64 pointers = 512 bytes of kernel parameters). */
struct SrcPtrs {
    const float *p[PS_GPU_MAX_SRCS];
};

static unsigned blocks_for(size_t n_floats) {
    size_t b = (n_floats + PS_GPU_THREADS - 1) / PS_GPU_THREADS;
    return (unsigned)(b < PS_GPU_MAX_BLOCKS ? b : PS_GPU_MAX_BLOCKS);
}

/* out[i] = (((s0[i] + s1[i]) + ...) + s_{n-1}[i]) / divisor; out may alias srcs.p[0]. */
__global__ void sum_div_kernel(float *out, SrcPtrs srcs, int n_srcs, size_t n_floats, float divisor, int *bad) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    int b = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_floats; i += stride) {
        float s = srcs.p[0][i];
        for (int k = 1; k < n_srcs; k++) s = __fadd_rn(s, srcs.p[k][i]);
        out[i] = __fdiv_rn(s, divisor);
        b |= nonfinite(out[i]);
    }
    if (b && bad) *bad = 1; /* every writer writes the same value */
}

/* An optimizer's slots, passed by value: [OPT_MAX_SLOTS] device pointers, NULL beyond its count. */
struct SlotPtrs {
    float *p[OPT_MAX_SLOTS];
};

/* One kernel per entry of the optimizer table (formulas: ps/optimizer.h; the
 * step's constants come from the table's prepare on the host, as the CPU's). */

/* sgd: var -= g * lr */
__global__ void sgd_kernel(float *params, SlotPtrs slots, const float *grads, size_t n_floats, OptStep st,
                          const int *skip, int *bad) {
    if (skip && *skip) return;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    int b = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_floats; i += stride) {
        params[i] = __fsub_rn(params[i], __fmul_rn(grads[i], st.lr));
        b |= nonfinite(params[i]);
    }
    if (b && bad) *bad = 1;
}

/* momentum: accum = accum * m + g; var -= accum * lr, or Nesterov's g * lr + (accum * m) * lr */
__global__ void momentum_kernel(float *params, SlotPtrs slots, const float *grads, size_t n_floats, OptStep st,
                          const int *skip, int *bad) {
    if (skip && *skip) return;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    int b = 0;
    float *accum = slots.p[0];
    const float m = st.momentum, lr = st.lr;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_floats; i += stride) {
        const float g = grads[i];
        const float a = __fadd_rn(__fmul_rn(accum[i], m), g);                       /* accum = accum * m + g */
        accum[i] = a;
        const float step = st.nesterov ? __fadd_rn(__fmul_rn(g, lr), __fmul_rn(__fmul_rn(a, m), lr)) /* g * lr + (accum * m) * lr */
                                       : __fmul_rn(a, lr);                           /* accum * lr */
        params[i] = __fsub_rn(params[i], step);
        b |= nonfinite(params[i]);
    }
    if (b && bad) *bad = 1;
}

/* adam's moments and step on one element: m += (g - m) * (1 - b1); v += (g * g - v) * (1 - b2);
 * returns (m * lr_t) / (sqrt(v) + eps). */
__device__ static float adam_element(float *mm, float *vv, size_t i, float g, const OptStep &st) {
    const float m = __fadd_rn(mm[i], __fmul_rn(__fsub_rn(g, mm[i]), st.one_minus_b1));
    const float v = __fadd_rn(vv[i], __fmul_rn(__fsub_rn(__fmul_rn(g, g), vv[i]), st.one_minus_b2));
    mm[i] = m;
    vv[i] = v;
    return __fdiv_rn(__fmul_rn(m, st.lr_t), __fadd_rn(__fsqrt_rn(v), st.epsilon));
}

/* adam: var -= (m * lr_t) / (sqrt(v) + eps) */
__global__ void adam_kernel(float *params, SlotPtrs slots, const float *grads, size_t n_floats, OptStep st,
                          const int *skip, int *bad) {
    if (skip && *skip) return;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    int b = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_floats; i += stride) {
        params[i] = __fsub_rn(params[i], adam_element(slots.p[0], slots.p[1], i, grads[i], st));
        b |= nonfinite(params[i]);
    }
    if (b && bad) *bad = 1;
}

/* adamw: var = var - (var * wd) * lr, then adam's step */
__global__ void adamw_kernel(float *params, SlotPtrs slots, const float *grads, size_t n_floats, OptStep st,
                          const int *skip, int *bad) {
    if (skip && *skip) return;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    int b = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_floats; i += stride) {
        const float p = __fsub_rn(params[i], __fmul_rn(__fmul_rn(params[i], st.wd), st.lr));
        params[i] = __fsub_rn(p, adam_element(slots.p[0], slots.p[1], i, grads[i], st));
        b |= nonfinite(params[i]);
    }
    if (b && bad) *bad = 1;
}

/* rmsprop: ms += (g * g - ms) * (1 - rho); [centered: mg += (g - mg) * (1 - rho)];
 * mom = mom * momentum + (g * lr) / sqrt(den); var -= mom */
__global__ void rmsprop_kernel(float *params, SlotPtrs slots, const float *grads, size_t n_floats, OptStep st,
                          const int *skip, int *bad) {
    if (skip && *skip) return;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    int b = 0;
    float *ms = slots.p[0], *mg = st.centered ? slots.p[1] : NULL, *mom = st.centered ? slots.p[2] : slots.p[1];
    const float c = st.one_minus_b2;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_floats; i += stride) {
        const float g = grads[i];
        const float s = __fadd_rn(ms[i], __fmul_rn(__fsub_rn(__fmul_rn(g, g), ms[i]), c));
        float den;
        if (st.centered) {
            const float a = __fadd_rn(mg[i], __fmul_rn(__fsub_rn(g, mg[i]), c));
            mg[i] = a;
            den = __fadd_rn(__fsub_rn(s, __fmul_rn(a, a)), st.epsilon);                /* (ms - mg * mg) + eps */
        } else {
            den = __fadd_rn(s, st.epsilon);                                           /* ms + eps */
        }
        const float u = __fadd_rn(__fmul_rn(mom[i], st.momentum), __fdiv_rn(__fmul_rn(g, st.lr), __fsqrt_rn(den)));
        ms[i] = s;
        mom[i] = u;
        params[i] = __fsub_rn(params[i], u);
        b |= nonfinite(params[i]);
    }
    if (b && bad) *bad = 1;
}

/* The GPU hook of the optimizer table: entry k launches the kernel of OptimizerKind k. */
typedef void (*OptKernel)(float *, SlotPtrs, const float *, size_t, OptStep, const int *, int *);
static const OptKernel opt_kernels[] = {sgd_kernel, momentum_kernel, adam_kernel, rmsprop_kernel, adamw_kernel};
static_assert(sizeof opt_kernels / sizeof opt_kernels[0] == OPT_N_KINDS,
              "ps_gpu.cu: one kernel per optimizer of the table (ps/optimizer.c), in OptimizerKind order");
static_assert(OPT_SGD == 0 && OPT_MOMENTUM == 1 && OPT_ADAM == 2 && OPT_RMSPROP == 3 && OPT_ADAMW == 4,
              "ps_gpu.cu: opt_kernels follows OptimizerKind's order");

/* ema_apply: shadow -= (shadow - var) * (1 - decay), with 1 - decay computed on the host as the CPU does. */
__global__ void ema_kernel(float *shadow, const float *params, size_t n_floats, float one_minus_decay,
                           const int *skip) {
    if (skip && *skip) return;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_floats; i += stride) {
        const float s = shadow[i];
        shadow[i] = __fsub_rn(s, __fmul_rn(__fsub_rn(s, params[i]), one_minus_decay));
    }
}

extern "C" void ps_gpu_sum_div(float *out, const float *const *srcs, int n_srcs, size_t n_floats, float divisor,
                               int *bad, cudaStream_t stream) {
    if (n_floats == 0) return;
    if (n_srcs < 1 || n_srcs > PS_GPU_MAX_SRCS) {
        fprintf(stderr, "ps_gpu_sum_div: %d source buffers, expected 1 to %d (%s:%d)\n", n_srcs, PS_GPU_MAX_SRCS,
                __FILE__, __LINE__);
        exit(2);
    }
    SrcPtrs p;
    memset(&p, 0, sizeof p);
    for (int k = 0; k < n_srcs; k++) p.p[k] = srcs[k];
    sum_div_kernel<<<blocks_for(n_floats), PS_GPU_THREADS, 0, stream>>>(out, p, n_srcs, n_floats, divisor, bad);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void ps_gpu_optimizer_apply(float *params, float *const *slots, const float *grads, size_t n_floats,
                                       const OptStep *step, OptimizerKind kind, const int *skip, int *bad,
                                       cudaStream_t stream) {
    if (n_floats == 0) return;
    SlotPtrs sp;
    memset(&sp, 0, sizeof sp);
    for (int k = 0; slots && k < OPT_MAX_SLOTS; k++) sp.p[k] = slots[k];
    opt_kernels[kind]<<<blocks_for(n_floats), PS_GPU_THREADS, 0, stream>>>(params, sp, grads, n_floats, *step, skip, bad);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void ps_gpu_ema_apply(float *shadow, const float *params, size_t n_floats, float decay, const int *skip,
                                 cudaStream_t stream) {
    if (n_floats == 0) return;
    const float one_minus_decay = 1.0f - decay; /* as ema_apply computes it */
    ema_kernel<<<blocks_for(n_floats), PS_GPU_THREADS, 0, stream>>>(shadow, params, n_floats, one_minus_decay, skip);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" int ps_gpu_warm_kernels(char *err, size_t err_n_bytes) {
    float *scratch = NULL;
    cudaStream_t s = NULL;
    int rc = -1;
    if (CUDA_SOFT(cudaMalloc((void **)&scratch, 8 * sizeof(float)), err, err_n_bytes) ||
        CUDA_SOFT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), err, err_n_bytes) ||
        CUDA_SOFT(cudaMemsetAsync(scratch, 0, 8 * sizeof(float), s), err, err_n_bytes))
        goto done;
    {
        SrcPtrs p;
        memset(&p, 0, sizeof p);
        p.p[0] = scratch;
        sum_div_kernel<<<1, PS_GPU_THREADS, 0, s>>>(scratch, p, 1, 1, 1.0f, NULL);
        SlotPtrs sp;
        OptStep st;
        memset(&st, 0, sizeof st);
        for (int k = 0; k < OPT_MAX_SLOTS; k++) sp.p[k] = scratch + 2 + k;
        for (int k = 0; k < OPT_N_KINDS; k++) opt_kernels[k]<<<1, PS_GPU_THREADS, 0, s>>>(scratch, sp, scratch + 1, 1, st, NULL, NULL);
        ema_kernel<<<1, PS_GPU_THREADS, 0, s>>>(scratch, scratch + 1, 1, 0.0f, NULL);
    }
    if (CUDA_SOFT(cudaGetLastError(), err, err_n_bytes) || CUDA_SOFT(cudaStreamSynchronize(s), err, err_n_bytes)) goto done;
    rc = 0;
done:
    if (s) cudaStreamDestroy(s);
    if (scratch) cudaFree(scratch);
    return rc;
}

/* Milliseconds from event a to event b; both recorded, and the stream synchronised. */
static float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

/* ---- PsGpu: the ps_gpu mode's server ---------------------------------------------------- */

enum { PG_EV_ANCHOR = 0, PG_EV_AVERAGE_END, PG_EV_APPLY_END, PG_N_EVENTS };

struct PsGpu {
    int device;                           /* the server's GPU (tower 0's) */
    int n_towers;
    size_t n_params;
    cudaStream_t stream;                  /* the server's stream on `device` */
    cudaEvent_t ev[PG_N_EVENTS];
    float *params;                        /* (n_params) device: the variables */
    int n_slots;                          /* the optimizer's slots (ps->n_slots) */
    float *slots[OPT_MAX_SLOTS];          /* [n_slots] -> (n_params) device: the optimizer's slots */
    float *ema;                           /* (n_params) device: moving averages, NULL when disabled */
    float *grads;                         /* (n_params) device: the averaged gradient */
    float *gather[PS_GPU_MAX_SRCS];       /* (n_params) device: tower t's gradient copied here; NULL on `device` */
    const float *src[PS_GPU_MAX_SRCS];    /* what the average reads for tower t: gather[t] or the tower's buffer */
    int peer[PS_GPU_MAX_SRCS];            /* ps_gpu_peer_access's answer for tower t */
    int *flags;                           /* [PS_GPU_N_FLAGS] device: the step's non-finite findings */
};

/* Enable access from `from` to `to`'s memory; 1 when enabled (or already), 0 when not possible. */
static int enable_peer_from(int from, int to) {
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, from, to) != cudaSuccess || !can) {
        (void)cudaGetLastError();
        return 0;
    }
    if (cudaSetDevice(from) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
    if (e == cudaSuccess) return 1;
    (void)cudaGetLastError(); /* clear the non-sticky error */
    /* Already enabled counts as enabled; anything else (too many peers...) leaves the copies staged. */
    return e == cudaErrorPeerAccessAlreadyEnabled;
}

/* Copy ps's host variables, slots and moving averages to the GPU; waits. */
static int ps_gpu_upload(PsGpu *g, const ParamServer *ps, char *err, size_t err_n_bytes) {
    const size_t n_bytes = g->n_params * sizeof(float);
    if (CUDA_SOFT(cudaSetDevice(g->device), err, err_n_bytes) ||
        CUDA_SOFT(cudaMemcpyAsync(g->params, ps->params, n_bytes, cudaMemcpyHostToDevice, g->stream), err, err_n_bytes))
        return -1;
    for (int k = 0; k < g->n_slots; k++)
        if (CUDA_SOFT(cudaMemcpyAsync(g->slots[k], ps->slots[k], n_bytes, cudaMemcpyHostToDevice, g->stream), err,
                      err_n_bytes))
            return -1;
    if (g->ema && CUDA_SOFT(cudaMemcpyAsync(g->ema, ps->ema, n_bytes, cudaMemcpyHostToDevice, g->stream), err, err_n_bytes))
        return -1;
    return CUDA_SOFT(cudaStreamSynchronize(g->stream), err, err_n_bytes);
}

/* Free g's resources; its device must be current. */
static void ps_gpu_free_on_device(PsGpu *g) {
    if (g->stream) cudaStreamSynchronize(g->stream);
    if (g->params) cudaFree(g->params);
    for (int k = 0; k < OPT_MAX_SLOTS; k++)
        if (g->slots[k]) cudaFree(g->slots[k]);
    if (g->ema) cudaFree(g->ema);
    if (g->grads) cudaFree(g->grads);
    if (g->flags) cudaFree(g->flags);
    for (int t = 0; t < g->n_towers; t++)
        if (g->gather[t]) cudaFree(g->gather[t]);
    for (int k = 0; k < PG_N_EVENTS; k++)
        if (g->ev[k]) cudaEventDestroy(g->ev[k]);
    if (g->stream) cudaStreamDestroy(g->stream);
    free(g);
}

extern "C" PsGpu *ps_gpu_create(const ParamServer *ps, int n_towers, const int *devices, float *const *tower_grads,
                                char *err, size_t err_n_bytes) {
    if (n_towers < 1 || n_towers > PS_GPU_MAX_SRCS) {
        snprintf(err, err_n_bytes, "ps_gpu: %d towers, expected 1 to %d", n_towers, PS_GPU_MAX_SRCS);
        return NULL;
    }
    int prev = 0;
    if (CUDA_SOFT(cudaGetDevice(&prev), err, err_n_bytes)) return NULL;
    PsGpu *g = (PsGpu *)calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, err_n_bytes, "ps_gpu: out of host memory");
        return NULL;
    }
    g->device = devices[0];
    g->n_towers = n_towers;
    g->n_params = ps->spec.n_params;
    const size_t n_bytes = g->n_params * sizeof(float);
    /* Peer access first: enabling it changes the current device. */
    for (int t = 0; t < n_towers; t++) {
        if (devices[t] == g->device) {
            g->peer[t] = -1;
            continue;
        }
        const int to = enable_peer_from(g->device, devices[t]); /* the server's kernels never read peers, */
        const int from = enable_peer_from(devices[t], g->device); /* but the copy engines go direct with both */
        g->peer[t] = to && from;
    }
    if (CUDA_SOFT(cudaSetDevice(g->device), err, err_n_bytes) || ps_gpu_warm_kernels(err, err_n_bytes) ||
        CUDA_SOFT(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking), err, err_n_bytes))
        goto fail;
    for (int k = 0; k < PG_N_EVENTS; k++)
        if (CUDA_SOFT(cudaEventCreate(&g->ev[k]), err, err_n_bytes)) goto fail;
    if (CUDA_SOFT(cudaMalloc((void **)&g->params, n_bytes), err, err_n_bytes) ||
        CUDA_SOFT(cudaMalloc((void **)&g->grads, n_bytes), err, err_n_bytes) ||
        CUDA_SOFT(cudaMalloc((void **)&g->flags, PS_GPU_N_FLAGS * sizeof(int)), err, err_n_bytes) ||
        (ps->ema && CUDA_SOFT(cudaMalloc((void **)&g->ema, n_bytes), err, err_n_bytes)))
        goto fail;
    g->n_slots = ps->n_slots;
    for (int k = 0; k < g->n_slots; k++)
        if (CUDA_SOFT(cudaMalloc((void **)&g->slots[k], n_bytes), err, err_n_bytes)) goto fail;
    for (int t = 0; t < n_towers; t++) {
        if (devices[t] == g->device) {
            g->src[t] = tower_grads[t];
        } else {
            if (CUDA_SOFT(cudaMalloc((void **)&g->gather[t], n_bytes), err, err_n_bytes)) goto fail;
            g->src[t] = g->gather[t];
        }
    }
    if (ps_gpu_upload(g, ps, err, err_n_bytes) != 0) goto fail;
    cudaSetDevice(prev);
    return g;
fail:
    cudaSetDevice(g->device);
    ps_gpu_free_on_device(g);
    cudaSetDevice(prev);
    return NULL;
}

extern "C" int ps_gpu_device(const PsGpu *g) { return g->device; }

extern "C" const float *ps_gpu_params(const PsGpu *g) { return g->params; }

extern "C" float *ps_gpu_gather_dst(const PsGpu *g, int tower) { return g->gather[tower]; }

extern "C" int ps_gpu_peer_access(const PsGpu *g, int tower) { return g->peer[tower]; }

extern "C" int ps_gpu_step(PsGpu *g, ParamServer *ps, PsGpuSpanMs *average, PsGpuSpanMs *apply) {
    const size_t n = g->n_params;
    const float lr = ps_step_lr(ps);                                       /* step 2: before the increment */
    int flags[PS_GPU_N_FLAGS];
    CUDA_CHECK(cudaSetDevice(g->device));
    CUDA_CHECK(cudaEventRecord(g->ev[PG_EV_ANCHOR], g->stream));
    CUDA_CHECK(cudaMemsetAsync(g->flags, 0, sizeof flags, g->stream));
    int *mean_bad = g->flags + PS_GPU_FLAG_MEAN, *vars_bad = g->flags + PS_GPU_FLAG_VARS;
    ps_gpu_sum_div(g->grads, g->src, g->n_towers, n, (float)g->n_towers, mean_bad, g->stream); /* step 1 */
    CUDA_CHECK(cudaEventRecord(g->ev[PG_EV_AVERAGE_END], g->stream));
    OptStep st;
    ps_step_prepare(ps, lr, &st);
    /* Steps 3 and 5 do nothing when the mean is not finite (read on the device: no wait in between). */
    ps_gpu_optimizer_apply(g->params, g->slots, g->grads, n, &st, ps->cfg.opt.kind, mean_bad, vars_bad,
                           g->stream);                                     /* step 3 */
    if (g->ema)                                                            /* step 5, with step 4's global_step */
        ps_gpu_ema_apply(g->ema, g->params, n, ema_decay_at(ps->cfg.ema_decay, ps->global_step + 1), mean_bad,
                         g->stream);
    CUDA_CHECK(cudaEventRecord(g->ev[PG_EV_APPLY_END], g->stream));
    CUDA_CHECK(cudaMemcpyAsync(flags, g->flags, sizeof flags, cudaMemcpyDeviceToHost, g->stream));
    CUDA_CHECK(cudaStreamSynchronize(g->stream));
    if (!flags[PS_GPU_FLAG_MEAN]) ps_finish_step(ps, lr);                  /* step 4, the optimizer's scalars */
    const float average_end = elapsed_ms(g->ev[PG_EV_ANCHOR], g->ev[PG_EV_AVERAGE_END]);
    if (average) {
        average->start_ms = 0.0f;
        average->end_ms = average_end;
        average->ran = 1;
    }
    if (apply) {
        apply->start_ms = average_end;
        apply->end_ms = elapsed_ms(g->ev[PG_EV_ANCHOR], g->ev[PG_EV_APPLY_END]);
        apply->ran = 1;
    }
    return flags[PS_GPU_FLAG_MEAN] ? PS_GPU_MEAN_NONFINITE : flags[PS_GPU_FLAG_VARS] ? PS_GPU_VARS_NONFINITE : 0;
}

extern "C" void ps_gpu_download(const PsGpu *g, ParamServer *ps) {
    const size_t n_bytes = g->n_params * sizeof(float);
    CUDA_CHECK(cudaSetDevice(g->device));
    CUDA_CHECK(cudaMemcpyAsync(ps->params, g->params, n_bytes, cudaMemcpyDeviceToHost, g->stream));
    for (int k = 0; k < g->n_slots; k++)
        CUDA_CHECK(cudaMemcpyAsync(ps->slots[k], g->slots[k], n_bytes, cudaMemcpyDeviceToHost, g->stream));
    if (g->ema) CUDA_CHECK(cudaMemcpyAsync(ps->ema, g->ema, n_bytes, cudaMemcpyDeviceToHost, g->stream));
    CUDA_CHECK(cudaStreamSynchronize(g->stream));
}

extern "C" void ps_gpu_free(PsGpu *g) {
    if (!g) return;
    int prev = 0;
    const int have_prev = cudaGetDevice(&prev) == cudaSuccess;
    cudaSetDevice(g->device);
    ps_gpu_free_on_device(g);
    if (have_prev) cudaSetDevice(prev);
}

/* ---- PsGpuReplicas: replicated_nccl's slots and shares ------------------------------------- */

struct PsGpuReplicas {
    int n;                                /* replicas = towers */
    size_t n_params;
    int device[PS_GPU_MAX_SRCS];          /* [n] tower r's GPU */
    float *params[PS_GPU_MAX_SRCS];       /* [n] (n_params) device: tower r's variables (the tower's) */
    float *grads[PS_GPU_MAX_SRCS];        /* [n] (n_params) device: tower r's gradient (the tower's) */
    int n_slots;                          /* the optimizer's slots (ps->n_slots) */
    float *slots[PS_GPU_MAX_SRCS][OPT_MAX_SLOTS]; /* [n][n_slots] (n_params) device: its optimizer slots (owned) */
    float *ema_share[PS_GPU_MAX_SRCS];    /* [n] (ema_hi - ema_lo) device: its share of the moving averages (owned) */
    size_t ema_lo[PS_GPU_MAX_SRCS], ema_hi[PS_GPU_MAX_SRCS];
    cudaStream_t stream[PS_GPU_MAX_SRCS]; /* [n] on device[r] (owned) */
    cudaEvent_t ev_start[PS_GPU_MAX_SRCS], ev_end[PS_GPU_MAX_SRCS];
    int *flags[PS_GPU_MAX_SRCS];          /* [n] -> [PS_GPU_N_FLAGS] device on device[r] (owned) */
};

extern "C" void ps_gpu_replicas_free(PsGpuReplicas *rp) {
    if (!rp) return;
    int prev = 0;
    const int have_prev = cudaGetDevice(&prev) == cudaSuccess;
    for (int r = 0; r < rp->n; r++) {
        cudaSetDevice(rp->device[r]);
        if (rp->stream[r]) cudaStreamSynchronize(rp->stream[r]);
        for (int k = 0; k < OPT_MAX_SLOTS; k++)
            if (rp->slots[r][k]) cudaFree(rp->slots[r][k]);
        if (rp->ema_share[r]) cudaFree(rp->ema_share[r]);
        if (rp->flags[r]) cudaFree(rp->flags[r]);
        if (rp->ev_start[r]) cudaEventDestroy(rp->ev_start[r]);
        if (rp->ev_end[r]) cudaEventDestroy(rp->ev_end[r]);
        if (rp->stream[r]) cudaStreamDestroy(rp->stream[r]);
    }
    free(rp);
    if (have_prev) cudaSetDevice(prev);
}

extern "C" PsGpuReplicas *ps_gpu_replicas_create(const ParamServer *ps, int n_towers, const int *devices,
                                                 float *const *tower_params, float *const *tower_grads, char *err,
                                                 size_t err_n_bytes) {
    if (n_towers < 1 || n_towers > PS_GPU_MAX_SRCS) {
        snprintf(err, err_n_bytes, "replicas: %d towers, expected 1 to %d", n_towers, PS_GPU_MAX_SRCS);
        return NULL;
    }
    int prev = 0;
    if (CUDA_SOFT(cudaGetDevice(&prev), err, err_n_bytes)) return NULL;
    PsGpuReplicas *rp = (PsGpuReplicas *)calloc(1, sizeof *rp);
    if (!rp) {
        snprintf(err, err_n_bytes, "replicas: out of host memory");
        return NULL;
    }
    rp->n_params = ps->spec.n_params;
    rp->n_slots = ps->n_slots;
    const size_t n = rp->n_params, n_bytes = n * sizeof(float);
    for (int r = 0; r < n_towers; r++) {
        rp->n = r + 1; /* what ps_gpu_replicas_free must look at, should this one fail half-made */
        rp->device[r] = devices[r];
        rp->params[r] = tower_params[r];
        rp->grads[r] = tower_grads[r];
        rp->ema_lo[r] = n * (size_t)r / (size_t)n_towers; /* ps_replica_apply's shares */
        rp->ema_hi[r] = n * (size_t)(r + 1) / (size_t)n_towers;
        const size_t share_bytes = (rp->ema_hi[r] - rp->ema_lo[r]) * sizeof(float);
        if (CUDA_SOFT(cudaSetDevice(devices[r]), err, err_n_bytes) || ps_gpu_warm_kernels(err, err_n_bytes) ||
            CUDA_SOFT(cudaStreamCreateWithFlags(&rp->stream[r], cudaStreamNonBlocking), err, err_n_bytes) ||
            CUDA_SOFT(cudaEventCreate(&rp->ev_start[r]), err, err_n_bytes) ||
            CUDA_SOFT(cudaEventCreate(&rp->ev_end[r]), err, err_n_bytes) ||
            CUDA_SOFT(cudaMalloc((void **)&rp->flags[r], PS_GPU_N_FLAGS * sizeof(int)), err, err_n_bytes) ||
            (ps->ema && share_bytes > 0 &&
             CUDA_SOFT(cudaMalloc((void **)&rp->ema_share[r], share_bytes), err, err_n_bytes)))
            goto fail;
        for (int k = 0; k < rp->n_slots; k++)
            if (CUDA_SOFT(cudaMalloc((void **)&rp->slots[r][k], n_bytes), err, err_n_bytes) ||
                CUDA_SOFT(cudaMemcpyAsync(rp->slots[r][k], ps->slots[k], n_bytes, cudaMemcpyHostToDevice, rp->stream[r]),
                          err, err_n_bytes))
                goto fail;
        /* The broadcast: ps's variables, slots (above) and this replica's share of the moving averages. */
        if (CUDA_SOFT(cudaMemcpyAsync(rp->params[r], ps->params, n_bytes, cudaMemcpyHostToDevice, rp->stream[r]), err,
                      err_n_bytes) ||
            (rp->ema_share[r] && CUDA_SOFT(cudaMemcpyAsync(rp->ema_share[r], ps->ema + rp->ema_lo[r], share_bytes,
                                                           cudaMemcpyHostToDevice, rp->stream[r]),
                                           err, err_n_bytes)) ||
            CUDA_SOFT(cudaStreamSynchronize(rp->stream[r]), err, err_n_bytes))
            goto fail;
    }
    cudaSetDevice(prev);
    return rp;
fail:
    ps_gpu_replicas_free(rp);
    cudaSetDevice(prev);
    return NULL;
}

extern "C" int ps_gpu_replica_apply(PsGpuReplicas *rp, int r, const ParamServer *ps, float lr, PsGpuSpanMs *apply) {
    cudaStream_t s = rp->stream[r];
    int flags[PS_GPU_N_FLAGS];
    CUDA_CHECK(cudaSetDevice(rp->device[r]));
    CUDA_CHECK(cudaEventRecord(rp->ev_start[r], s));
    CUDA_CHECK(cudaMemsetAsync(rp->flags[r], 0, sizeof flags, s));
    OptStep st;
    ps_step_prepare(ps, lr, &st);
    ps_gpu_optimizer_apply(rp->params[r], rp->slots[r], rp->grads[r], rp->n_params, &st, ps->cfg.opt.kind, NULL,
                           rp->flags[r] + PS_GPU_FLAG_VARS, s);
    if (rp->ema_share[r])
        ps_gpu_ema_apply(rp->ema_share[r], rp->params[r] + rp->ema_lo[r], rp->ema_hi[r] - rp->ema_lo[r],
                         ema_decay_at(ps->cfg.ema_decay, ps->global_step + 1), NULL, s);
    CUDA_CHECK(cudaEventRecord(rp->ev_end[r], s));
    CUDA_CHECK(cudaMemcpyAsync(flags, rp->flags[r], sizeof flags, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    if (apply) {
        apply->start_ms = 0.0f;
        apply->end_ms = elapsed_ms(rp->ev_start[r], rp->ev_end[r]);
        apply->ran = 1;
    }
    return flags[PS_GPU_FLAG_VARS] ? PS_GPU_VARS_NONFINITE : 0;
}

extern "C" void ps_gpu_replicas_download(const PsGpuReplicas *rp, ParamServer *ps) {
    const size_t n_bytes = rp->n_params * sizeof(float);
    for (int r = 0; r < rp->n; r++) {
        cudaStream_t s = rp->stream[r];
        CUDA_CHECK(cudaSetDevice(rp->device[r]));
        if (r == 0) {
            CUDA_CHECK(cudaMemcpyAsync(ps->params, rp->params[0], n_bytes, cudaMemcpyDeviceToHost, s));
            for (int k = 0; k < rp->n_slots; k++)
                CUDA_CHECK(cudaMemcpyAsync(ps->slots[k], rp->slots[0][k], n_bytes, cudaMemcpyDeviceToHost, s));
        }
        if (rp->ema_share[r])
            CUDA_CHECK(cudaMemcpyAsync(ps->ema + rp->ema_lo[r], rp->ema_share[r],
                                       (rp->ema_hi[r] - rp->ema_lo[r]) * sizeof(float), cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
    }
}
