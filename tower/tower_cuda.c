/* tower_cuda.c — the CUDA backend: a tower whose device is one GPU (several
 * towers may share a GPU, each with its own stream, handles and buffers).
 *
 * Where it sits: behind TowerBackend (tower.h), like tower_cpu.c.  One step
 * of a GPU tower, on its own host thread, everything on its own stream:
 *
 *   copy_params_in   master variables (pinned host block) -> params_dev   async H2D
 *   copy_shard_in    the shard (pinned staging buffer) -> x_dev, labels  async H2D, then wait
 *   compute          forward + backward into grads_dev (model_cuda.h; zeroed first unless it
 *                    accumulates a later micro-batch), then wait and read the loss and the
 *                    logits (for the batch accuracy)
 *   scale_grads      grads_dev *= scale (cublasSscal; only when a step scales), then wait
 *   copy_grads_out   grads_dev -> grads_host (pinned, the parameter server's)  async D2H, then wait
 *
 * In the GPU modes (ps_gpu, replicated_nccl) the variables come in from, and
 * the gradient goes out to, device memory instead (copy_params_in_device,
 * copy_grads_out_device: a device-to-device copy on one GPU, a peer copy,
 * cudaMemcpyPeerAsync, across two), or not at all (replicated_nccl computes
 * on params_dev in place and leaves the gradient in grads_dev); device_view
 * hands params_dev and grads_dev to the trainer, which gives them to ps/.
 *
 * The hand-off to the parameter server happens when copy_grads_out
 * returns, and copy_shard_in, compute and the copy-outs each end by waiting
 * on the stream, so that whatever another stream or thread reads next is
 * complete.  The phase times are the device's: CUDA events recorded on the
 * stream around each phase, read after the step's last wait and put on the
 * host's clock through an anchor event recorded on the idle stream at the
 * start of the step, at a host time taken just before (device_spans; the
 * anchor runs within the launch latency, a few microseconds).
 * Overlapped copies (on unless TOWER_GPU_OVERLAP=0 is in the environment
 * at tower creation; docs/gpu.md): a second stream carries the variables in
 * chunk by chunk while forward runs (model_copy_params_in_cuda_async: each
 * node waits for its chunk; copy_params_in only notes the block, and
 * copy_shard_in sends it after the shard, which would otherwise wait
 * behind it on the one host-to-device copy engine) and, from the second
 * step on of a tower whose gradient goes to the host, the gradient out
 * chunk by chunk while backward runs (model_backward_cuda_copy_out);
 * copy_grads_out then only waits for that stream.  A scale_grads after
 * compute makes the full copy run as before.  The copy-in span then covers the shard only, and the
 * copy-out span the wait for the last chunk.
 * bind_params is not offered: a GPU cannot compute on host memory.  Every operation
 * makes the tower's GPU current first (cudaSetDevice is per host thread and
 * cheap): tower_create runs on the caller's thread, the rest on the tower's.
 * The host allocator hands out pinned memory (cudaHostAlloc), so that the
 * parameter server's block and the input pipeline's staging buffers copy
 * at full speed; without a usable GPU it falls back to page-aligned memory
 * rather than failing.
 * What it does not do: average or apply gradients (ps/), read data (io/),
 * or know the layers (model/model_cuda.h).
 */
#include "tower/tower.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "base/flags.h"
#include "model/layers_cuda.h"
#include "model/model_cuda.h"

/* The events of one step, in stream order. */
enum {
    TC_EV_ANCHOR = 0, /* the step's start, at anchor_sec on the host clock */
    TC_EV_IN_START,   /* before the first copy-in (variables, or the shard when the variables stay) */
    TC_EV_IN_END,     /* after the shard */
    TC_EV_FWD_START,
    TC_EV_FWD_END,
    TC_EV_BWD_END,
    TC_EV_OUT_START,
    TC_EV_OUT_END,
    TC_N_EVENTS
};
enum { TC_RAN_COPY_IN = 1, TC_RAN_COMPUTE = 2, TC_RAN_COPY_OUT = 4 };

typedef struct {
    const ModelSpec *spec;
    int device;
    int max_batch;
    cudaStream_t stream;
    cudnnHandle_t cudnn;
    cublasHandle_t cublas;
    ModelActsCuda *acts;
    float *params_dev;       /* (n_params) device: the tower's copy of the variables */
    float *grads_dev;        /* (n_params) device: the tower's gradient */
    float *moving_dev;       /* (n_params) device, made by the first update_moving: the moving statistics' scratch */
    float *x_dev;            /* (max_batch, H, W, C) device: the shard */
    int32_t *labels_dev;     /* (max_batch) device */
    float *grads_host;       /* (n_params) host: the parameter server's buffer for this tower */
    float *loss_host;        /* (1) pinned host */
    float *logits_host;      /* (max_batch, num_classes) pinned host, for the batch accuracy */
    const int32_t *labels;   /* (n) host: the shard's labels in the staging buffer */
    int n;                   /* examples in the current shard */
    cudaEvent_t ev[TC_N_EVENTS]; /* the phase events of the current step, on the stream */
    double anchor_sec;       /* tower_now_sec() just before ev[TC_EV_ANCHOR] was recorded on the idle stream */
    int copy_in_started;     /* this step's copy-in has begun (anchor and TC_EV_IN_START recorded) */
    char algorithms[32768];  /* the conv layers' cuDNN algorithms at max_batch (model_acts_cuda_describe_algos):
                              * resnet50's 53 convolutions take about 16 KB */
    int ran;                 /* TC_RAN_* bits: the phases this step ran, for device_spans */
    cudaStream_t copy_stream; /* the overlapped copies' stream; NULL: off (TOWER_GPU_OVERLAP=0) */
    cudaEvent_t copy_done;   /* on copy_stream: everything sent so far has arrived */
    int overlap_out;         /* 1 once a copy-out to the host was asked: compute then sends the gradient itself */
    int grads_sent;          /* this step's last compute sent its whole gradient to grads_host (copy_stream) */
    const float *params_pending; /* (n_params) host: overlapped copies only, copy_params_in's block, sent
                                  * by copy_shard_in after the shard; NULL: nothing waiting */
    size_t stats_n_bytes;    /* one training forward's batch statistics (model_moving_stats_n_bytes_cuda); 0: none */
    void *stats_dev;         /* (stats_cap, stats_n_bytes) device: this step's micro-batches before the last, in order */
    int n_stats, stats_cap;
} CudaTower;

/* ---- host memory ---------------------------------------------------------------- */

/* ctx: the GPU (intptr_t) made current before the allocation, so that a
 * thread with no current GPU yet does not create a context on GPU 0. */
static void *pinned_alloc(size_t n_bytes, void *ctx) {
    void *p = NULL;
    if (cudaSetDevice((int)(intptr_t)ctx) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    if (cudaHostAlloc(&p, n_bytes ? n_bytes : 1, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    memset(p, 0, n_bytes);
    return p;
}

static void pinned_free(void *p, void *ctx) {
    (void)ctx;
    if (p) cudaFreeHost(p);
}

/* Pinned (page-locked, portable across GPUs) when a GPU is usable; the
 * default page-aligned allocator otherwise, so that asking for memory never
 * crashes or fails on a machine without a GPU.  device: the first tower's
 * GPU, made current on the calling thread before each allocation (with
 * --gpus 1,2 no context is created on GPU 0). */
static HostAlloc cuda_host_alloc(int device) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1 || device < 0 || device >= n) {
        (void)cudaGetLastError();
        HostAlloc a = host_alloc_default();
        a.kind = "page-aligned host memory (no usable GPU, so not pinned)";
        return a;
    }
    HostAlloc a = {pinned_alloc, pinned_free, (void *)(intptr_t)device, "pinned host memory (cudaHostAlloc)"};
    return a;
}

/* ---- devices ----------------------------------------------------------------------- */

static int cuda_device_count(char *err, size_t err_n_bytes) {
    int n = tower_cuda_device_count(err, err_n_bytes);
    if (n == 0) {
        const char *v = getenv("CUDA_VISIBLE_DEVICES");
        snprintf(err, err_n_bytes, "no usable GPU: no CUDA device is visible (CUDA_VISIBLE_DEVICES=%s)",
                 v ? v : "unset");
        return -1;
    }
    return n;
}

static void cuda_describe_device(int device, char *out, size_t out_n_bytes) {
    tower_cuda_describe_device(device, out, out_n_bytes);
}

/* ---- create / free -------------------------------------------------------------------- */

/* Free t's resources; its device must be current. */
static void free_on_device(CudaTower *t) {
    if (t->stream) cudaStreamSynchronize(t->stream);
    if (t->copy_stream) cudaStreamSynchronize(t->copy_stream);
    model_acts_cuda_free(t->acts);
    if (t->params_dev) cudaFree(t->params_dev);
    if (t->grads_dev) cudaFree(t->grads_dev);
    if (t->moving_dev) cudaFree(t->moving_dev);
    if (t->stats_dev) cudaFree(t->stats_dev);
    if (t->x_dev) cudaFree(t->x_dev);
    if (t->labels_dev) cudaFree(t->labels_dev);
    if (t->loss_host) cudaFreeHost(t->loss_host);
    if (t->logits_host) cudaFreeHost(t->logits_host);
    for (int k = 0; k < TC_N_EVENTS; k++)
        if (t->ev[k]) cudaEventDestroy(t->ev[k]);
    if (t->cublas) cublasDestroy(t->cublas);
    if (t->cudnn) cudnnDestroy(t->cudnn);
    if (t->copy_done) cudaEventDestroy(t->copy_done);
    if (t->copy_stream) cudaStreamDestroy(t->copy_stream);
    if (t->stream) cudaStreamDestroy(t->stream);
    free(t);
}

/* The overlapped copies' chunks: at least this much of the variable block each (but the last). */
#define TC_OVERLAP_CHUNK_N_BYTES ((size_t)256 << 10)

static void *tower_create_on_gpu(const ModelSpec *spec, int device, int max_batch, float *grads_host,
                                 int allow_tf32, int deterministic_only, char *err, size_t err_n_bytes) {
    int count = cuda_device_count(err, err_n_bytes);
    if (count < 0) return NULL;
    if (device < 0 || device >= count) {
        snprintf(err, err_n_bytes, "GPU %d does not exist: %d GPU(s) visible, numbered from 0", device, count);
        return NULL;
    }
    if (max_batch < 1) {
        snprintf(err, err_n_bytes, "max_batch must be at least 1, got %d", max_batch);
        return NULL;
    }
    CudaTower *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, err_n_bytes, "out of host memory");
        return NULL;
    }
    t->spec = spec;
    t->device = device;
    t->max_batch = max_batch;
    t->grads_host = grads_host;
    const size_t param_bytes = spec->n_params * sizeof(float);
    const size_t x_bytes = (size_t)max_batch * spec->H * spec->W * spec->C * sizeof(float);
    int prev = 0;
    if (CUDA_SOFT(cudaGetDevice(&prev), err, err_n_bytes)) {
        free(t);
        return NULL;
    }
    if (CUDA_SOFT(cudaSetDevice(device), err, err_n_bytes) ||
        CUDA_SOFT(cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking), err, err_n_bytes) ||
        CUDNN_SOFT(cudnnCreate(&t->cudnn), err, err_n_bytes) || CUBLAS_SOFT(cublasCreate(&t->cublas), err, err_n_bytes) ||
        CUDA_SOFT(cudaMalloc((void **)&t->params_dev, param_bytes), err, err_n_bytes) ||
        CUDA_SOFT(cudaMalloc((void **)&t->grads_dev, param_bytes), err, err_n_bytes) ||
        CUDA_SOFT(cudaMalloc((void **)&t->x_dev, x_bytes), err, err_n_bytes) ||
        CUDA_SOFT(cudaMalloc((void **)&t->labels_dev, (size_t)max_batch * sizeof(int32_t)), err, err_n_bytes) ||
        CUDA_SOFT(cudaHostAlloc((void **)&t->loss_host, sizeof(float), cudaHostAllocPortable), err, err_n_bytes) ||
        CUDA_SOFT(cudaHostAlloc((void **)&t->logits_host, (size_t)max_batch * spec->num_classes * sizeof(float),
                                cudaHostAllocPortable),
                  err, err_n_bytes))
        goto fail;
    for (int k = 0; k < TC_N_EVENTS; k++)
        if (CUDA_SOFT(cudaEventCreate(&t->ev[k]), err, err_n_bytes)) goto fail;
    t->acts = model_acts_cuda_create(spec, max_batch, t->cudnn, t->cublas, t->stream, allow_tf32, deterministic_only,
                                     err, err_n_bytes);
    /* Idle from here on between steps: the first step's anchor event runs at once. */
    if (!t->acts || CUDA_SOFT(cudaStreamSynchronize(t->stream), err, err_n_bytes)) goto fail;
    if (flags_env_default_on("TOWER_GPU_OVERLAP") && /* overlapped copies: the file's header */
        (CUDA_SOFT(cudaStreamCreateWithFlags(&t->copy_stream, cudaStreamNonBlocking), err, err_n_bytes) ||
         CUDA_SOFT(cudaEventCreateWithFlags(&t->copy_done, cudaEventDisableTiming), err, err_n_bytes) ||
         model_acts_cuda_overlap(t->acts, t->copy_stream, TC_OVERLAP_CHUNK_N_BYTES, err, err_n_bytes)))
        goto fail;
    model_acts_cuda_describe_algos(t->acts, t->algorithms, sizeof t->algorithms);
    if (t->copy_stream) {
        const size_t used = strlen(t->algorithms);
        snprintf(t->algorithms + used, sizeof t->algorithms - used,
                 "%soverlapped copies: %d chunks (cut at %zu KiB, a larger layer alone)", used ? " | " : "",
                 model_acts_cuda_overlap_chunks(t->acts), TC_OVERLAP_CHUNK_N_BYTES >> 10);
    }
    t->stats_n_bytes = model_moving_stats_n_bytes_cuda(t->acts);
    cudaSetDevice(prev);
    return t;
fail:
    free_on_device(t);
    cudaSetDevice(prev);
    return NULL;
}

/* The four creators: TF32 or not, deterministic algorithms only or not. */
#define TOWER_CUDA_CREATE(fn, tf32, det)                                                                          \
    static void *fn(const ModelSpec *spec, int device, int max_batch, int n_threads, float *grads_host, char *err, \
                    size_t err_n_bytes) {                                                                         \
        (void)n_threads;                                                                                          \
        return tower_create_on_gpu(spec, device, max_batch, grads_host, tf32, det, err, err_n_bytes);             \
    }
TOWER_CUDA_CREATE(cuda_tower_create, 0, 0)
TOWER_CUDA_CREATE(cuda_tower_create_tf32, 1, 0)
TOWER_CUDA_CREATE(cuda_tower_create_det, 0, 1)
TOWER_CUDA_CREATE(cuda_tower_create_tf32_det, 1, 1)

static void cuda_tower_free(void *dev) {
    CudaTower *t = dev;
    if (!t) return;
    int prev = 0;
    int have_prev = cudaGetDevice(&prev) == cudaSuccess;
    cudaSetDevice(t->device);
    free_on_device(t);
    if (have_prev) cudaSetDevice(prev);
}

/* ---- one step ------------------------------------------------------------------------------ */

/* The step's first copy: the anchor (the stream is idle: the last step
 * ended with a wait) and the copy-in's start.  The tower's GPU is current. */
static int begin_copy_in(CudaTower *t, char *err, size_t err_n_bytes) {
    if (t->copy_in_started) return 0;
    t->ran = 0;
    t->anchor_sec = tower_now_sec();
    if (CUDA_SOFT(cudaEventRecord(t->ev[TC_EV_ANCHOR], t->stream), err, err_n_bytes) ||
        CUDA_SOFT(cudaEventRecord(t->ev[TC_EV_IN_START], t->stream), err, err_n_bytes))
        return -1;
    t->copy_in_started = 1;
    return 0;
}

static int cuda_copy_params_in(void *dev, const float *params_host, char *err, size_t err_n_bytes) {
    CudaTower *t = dev;
    t->copy_in_started = 0; /* the variables are always a step's first copy */
    if (CUDA_SOFT(cudaSetDevice(t->device), err, err_n_bytes) || begin_copy_in(t, err, err_n_bytes)) return -1;
    if (t->copy_stream) { /* chunk by chunk on the copy stream, after the shard (copy_shard_in) */
        t->params_pending = params_host;
        return 0;
    }
    if (CUDA_SOFT(cudaMemcpyAsync(t->params_dev, params_host, t->spec->n_params * sizeof(float), cudaMemcpyHostToDevice,
                                  t->stream),
                  err, err_n_bytes))
        return -1;
    return 0;
}

/* params_src: (n_params) device memory on GPU src_device -> params_dev, on the tower's stream. */
static int cuda_copy_params_in_device(void *dev, const float *params_src, int src_device, char *err,
                                      size_t err_n_bytes) {
    CudaTower *t = dev;
    const size_t n_bytes = t->spec->n_params * sizeof(float);
    t->copy_in_started = 0;
    if (CUDA_SOFT(cudaSetDevice(t->device), err, err_n_bytes) || begin_copy_in(t, err, err_n_bytes)) return -1;
    if (src_device == t->device)
        return CUDA_SOFT(cudaMemcpyAsync(t->params_dev, params_src, n_bytes, cudaMemcpyDeviceToDevice, t->stream), err,
                         err_n_bytes);
    return CUDA_SOFT(cudaMemcpyPeerAsync(t->params_dev, t->device, params_src, src_device, n_bytes, t->stream), err,
                     err_n_bytes);
}

/* Overlapped copies: copy_params_in's block, if one waits, chunk by chunk onto the copy stream. */
static void send_params_pending(CudaTower *t) {
    if (t->params_pending) model_copy_params_in_cuda_async(t->acts, t->params_dev, t->params_pending);
    t->params_pending = NULL;
}

static int cuda_copy_shard_in(void *dev, const float *x_host, const int32_t *labels_host, int n, char *err,
                              size_t err_n_bytes) {
    CudaTower *t = dev;
    if (n < 1 || n > t->max_batch) {
        snprintf(err, err_n_bytes, "shard of %d examples, this tower holds 1 to %d", n, t->max_batch);
        t->copy_in_started = 0;
        t->params_pending = NULL;
        return -1;
    }
    const size_t x_bytes = (size_t)n * t->spec->H * t->spec->W * t->spec->C * sizeof(float);
    int rc = CUDA_SOFT(cudaSetDevice(t->device), err, err_n_bytes) || begin_copy_in(t, err, err_n_bytes) ||
             CUDA_SOFT(cudaMemcpyAsync(t->x_dev, x_host, x_bytes, cudaMemcpyHostToDevice, t->stream), err,
                       err_n_bytes) ||
             CUDA_SOFT(cudaMemcpyAsync(t->labels_dev, labels_host, (size_t)n * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, t->stream),
                       err, err_n_bytes) ||
             CUDA_SOFT(cudaEventRecord(t->ev[TC_EV_IN_END], t->stream), err, err_n_bytes);
    /* Overlapped copies: the variables go after the shard.  Host-to-device copies share one copy engine, so a
     * shard sent behind them waited for all of them, and forward with it (mnist on the H100: the copy-in phase
     * 0.43 ms with the chunks, 0.45 ms without). */
    if (!rc) send_params_pending(t);
    t->params_pending = NULL;
    rc = rc || CUDA_SOFT(cudaStreamSynchronize(t->stream), err, err_n_bytes);
    t->copy_in_started = 0; /* the next step anchors afresh, whatever happened here */
    if (rc) return -1;
    t->ran |= TC_RAN_COPY_IN;
    t->labels = labels_host;
    t->n = n;
    return 0;
}

/* A later micro-batch is about to run: enqueue a copy of the previous one's batch statistics to the end of
 * stats_dev (growing it: a new block, the old one copied over, waited for and freed). */
static int keep_stats(CudaTower *t, char *err, size_t err_n_bytes) {
    if (t->stats_n_bytes == 0) return 0;
    if (t->n_stats == t->stats_cap) {
        const int cap = t->stats_cap ? 2 * t->stats_cap : 4;
        void *p = NULL;
        if (CUDA_SOFT(cudaMalloc(&p, (size_t)cap * t->stats_n_bytes), err, err_n_bytes)) return -1;
        if (t->n_stats > 0 &&
            (CUDA_SOFT(cudaMemcpyAsync(p, t->stats_dev, (size_t)t->n_stats * t->stats_n_bytes,
                                       cudaMemcpyDeviceToDevice, t->stream), err, err_n_bytes) ||
             CUDA_SOFT(cudaStreamSynchronize(t->stream), err, err_n_bytes))) {
            cudaFree(p);
            return -1;
        }
        if (t->stats_dev) cudaFree(t->stats_dev);
        t->stats_dev = p;
        t->stats_cap = cap;
    }
    t->n_stats += model_moving_stats_save_cuda((unsigned char *)t->stats_dev + (size_t)t->n_stats * t->stats_n_bytes,
                                               t->acts);
    return 0;
}

static int cuda_compute(void *dev, int accumulate, float loss_weight, float *loss, float *accuracy, char *err,
                        size_t err_n_bytes) {
    CudaTower *t = dev;
    if (CUDA_SOFT(cudaSetDevice(t->device), err, err_n_bytes)) return -1;
    send_params_pending(t); /* variables copied in with no shard after them: send them now */
    if (!accumulate) t->n_stats = 0;
    else if (keep_stats(t, err, err_n_bytes) != 0) return -1;
    if (CUDA_SOFT(cudaEventRecord(t->ev[TC_EV_FWD_START], t->stream), err, err_n_bytes)) return -1;
    model_forward_cuda_async(t->loss_host, t->logits_host, t->acts, t->x_dev, t->labels_dev, t->params_dev, t->n);
    /* model_backward_cuda ADDS (llm.c's convention): zeroed once per step, at its first micro-batch. */
    if (CUDA_SOFT(cudaEventRecord(t->ev[TC_EV_FWD_END], t->stream), err, err_n_bytes) ||
        (!accumulate &&
         CUDA_SOFT(cudaMemsetAsync(t->grads_dev, 0, t->spec->n_params * sizeof(float), t->stream), err, err_n_bytes)))
        return -1;
    model_acts_cuda_set_loss_weight(t->acts, loss_weight);
    t->grads_sent = t->copy_stream && t->overlap_out && t->grads_host;
    if (t->grads_sent) model_backward_cuda_copy_out(t->grads_dev, t->acts, t->params_dev, t->grads_host);
    else model_backward_cuda(t->grads_dev, t->acts, t->params_dev);
    if (CUDA_SOFT(cudaEventRecord(t->ev[TC_EV_BWD_END], t->stream), err, err_n_bytes) ||
        CUDA_SOFT(cudaStreamSynchronize(t->stream), err, err_n_bytes))
        return -1;
    t->ran |= TC_RAN_COMPUTE;
    *loss = *t->loss_host;
    *accuracy = (float)model_count_correct(t->logits_host, t->labels, t->n, t->spec->num_classes) / (float)t->n;
    return 0;
}

/* grads_dev *= scale (cublasSscal on the tower's stream; the handle's pointer mode is the default,
 * host, as the model leaves it), then wait. */
static int cuda_scale_grads(void *dev, float scale, char *err, size_t err_n_bytes) {
    CudaTower *t = dev;
    t->grads_sent = 0; /* what compute sent is unscaled: copy_grads_out copies again */
    if (CUDA_SOFT(cudaSetDevice(t->device), err, err_n_bytes) ||
        CUBLAS_SOFT(cublasSetStream(t->cublas, t->stream), err, err_n_bytes) ||
        CUBLAS_SOFT(cublasSscal(t->cublas, (int)t->spec->n_params, &scale, t->grads_dev, 1), err, err_n_bytes) ||
        CUDA_SOFT(cudaStreamSynchronize(t->stream), err, err_n_bytes))
        return -1;
    return 0;
}

/* Enqueue a copy of the gradient between its two events, then wait. */
static int copy_grads_timed(CudaTower *t, float *dst, int dst_device, int to_host, char *err, size_t err_n_bytes) {
    const size_t n_bytes = t->spec->n_params * sizeof(float);
    if (CUDA_SOFT(cudaSetDevice(t->device), err, err_n_bytes) ||
        CUDA_SOFT(cudaEventRecord(t->ev[TC_EV_OUT_START], t->stream), err, err_n_bytes))
        return -1;
    if (t->copy_stream) {
        /* compute sent the gradient already (to the host): the stream waits for the last chunk */
        const int sent = to_host && t->grads_sent && dst == t->grads_host;
        t->grads_sent = 0;
        if (CUDA_SOFT(cudaEventRecord(t->copy_done, t->copy_stream), err, err_n_bytes) ||
            CUDA_SOFT(cudaStreamWaitEvent(t->stream, t->copy_done, 0), err, err_n_bytes))
            return -1;
        if (sent) {
            if (CUDA_SOFT(cudaEventRecord(t->ev[TC_EV_OUT_END], t->stream), err, err_n_bytes) ||
                CUDA_SOFT(cudaStreamSynchronize(t->stream), err, err_n_bytes))
                return -1;
            t->ran |= TC_RAN_COPY_OUT;
            return 0;
        }
        /* else a full copy below, after any chunk still on its way (a stale one must not land last) */
    }
    cudaError_t e;
    if (to_host) e = cudaMemcpyAsync(dst, t->grads_dev, n_bytes, cudaMemcpyDeviceToHost, t->stream);
    else if (dst_device == t->device) e = cudaMemcpyAsync(dst, t->grads_dev, n_bytes, cudaMemcpyDeviceToDevice, t->stream);
    else e = cudaMemcpyPeerAsync(dst, dst_device, t->grads_dev, t->device, n_bytes, t->stream);
    if (CUDA_SOFT(e, err, err_n_bytes) || CUDA_SOFT(cudaEventRecord(t->ev[TC_EV_OUT_END], t->stream), err, err_n_bytes) ||
        CUDA_SOFT(cudaStreamSynchronize(t->stream), err, err_n_bytes))
        return -1;
    t->ran |= TC_RAN_COPY_OUT;
    return 0;
}

static int cuda_copy_grads_out(void *dev, char *err, size_t err_n_bytes) {
    CudaTower *t = dev;
    t->overlap_out = 1; /* from the next step on, compute sends the gradient itself (with a copy stream) */
    return copy_grads_timed(t, t->grads_host, -1, 1, err, err_n_bytes);
}

/* grads_dev -> grads_dst, (n_params) device memory on GPU dst_device (a peer copy when it is another GPU). */
static int cuda_copy_grads_out_device(void *dev, float *grads_dst, int dst_device, char *err, size_t err_n_bytes) {
    return copy_grads_timed(dev, grads_dst, dst_device, 0, err, err_n_bytes);
}

static int cuda_device_view(void *dev, TowerDeviceView *view, char *err, size_t err_n_bytes) {
    (void)err;
    (void)err_n_bytes;
    const CudaTower *t = dev;
    view->device = t->device;
    view->params = t->params_dev;
    view->grads = t->grads_dev;
    return 0;
}

static void cuda_describe_algorithms(const void *dev, char *out, size_t out_n_bytes) {
    snprintf(out, out_n_bytes, "%s", ((const CudaTower *)dev)->algorithms);
}

/* ev[k] on the host clock: the anchor's host time + the device time since the anchor.
 * 0 when the events cannot be read (the host's spans then stand). */
static double event_sec(const CudaTower *t, int k) {
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, t->ev[TC_EV_ANCHOR], t->ev[k]) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0.0;
    }
    return t->anchor_sec + 1e-3 * (double)ms;
}

/* The step's phases as the device ran them (every event was waited for:
 * each phase ended with a cudaStreamSynchronize). */
static void cuda_device_spans(void *dev, TowerSpan *span) {
    CudaTower *t = dev;
    if (!(t->ran & TC_RAN_COPY_IN) || cudaSetDevice(t->device) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    double sec[TC_N_EVENTS];
    for (int k = 0; k < TC_N_EVENTS; k++) sec[k] = 0.0;
    sec[TC_EV_IN_START] = event_sec(t, TC_EV_IN_START);
    sec[TC_EV_IN_END] = event_sec(t, TC_EV_IN_END);
    if (t->ran & TC_RAN_COMPUTE) {
        sec[TC_EV_FWD_START] = event_sec(t, TC_EV_FWD_START);
        sec[TC_EV_FWD_END] = event_sec(t, TC_EV_FWD_END);
        sec[TC_EV_BWD_END] = event_sec(t, TC_EV_BWD_END);
    }
    if (t->ran & TC_RAN_COPY_OUT) {
        sec[TC_EV_OUT_START] = event_sec(t, TC_EV_OUT_START);
        sec[TC_EV_OUT_END] = event_sec(t, TC_EV_OUT_END);
    }
    const struct { TowerPhase phase; int start, end, ran; } phases[] = {
        {TOWER_PHASE_COPY_IN, TC_EV_IN_START, TC_EV_IN_END, TC_RAN_COPY_IN},
        {TOWER_PHASE_FORWARD, TC_EV_FWD_START, TC_EV_FWD_END, TC_RAN_COMPUTE},
        {TOWER_PHASE_BACKWARD, TC_EV_FWD_END, TC_EV_BWD_END, TC_RAN_COMPUTE},
        {TOWER_PHASE_COPY_OUT, TC_EV_OUT_START, TC_EV_OUT_END, TC_RAN_COPY_OUT},
    };
    for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++) {
        const double a = sec[phases[i].start], b = sec[phases[i].end];
        if ((t->ran & phases[i].ran) && a > 0.0 && b >= a) {
            span[phases[i].phase].start_sec = a;
            span[phases[i].phase].end_sec = b;
        }
    }
    t->ran = 0;
}

static int cuda_set_sync(void *dev, const ModelSync *sync, char *err, size_t err_n_bytes) {
    CudaTower *t = dev;
    if (CUDA_SOFT(cudaSetDevice(t->device), err, err_n_bytes)) return -1; /* the pinned buffer's context */
    return model_acts_cuda_set_sync(t->acts, sync, err, err_n_bytes);
}

/* Copy the non-trainable variables between a host and a device block
 * (kind: cudaMemcpyHostToDevice or DeviceToHost), enqueued on the stream. */
static int copy_moving(CudaTower *t, float *dst, const float *src, enum cudaMemcpyKind kind, char *err,
                       size_t err_n_bytes) {
    const ModelSpec *spec = t->spec;
    for (int v = 0; v < spec->n_vars; v++) {
        const ModelVar *mv = &spec->vars[v];
        if (mv->trainable) continue;
        if (CUDA_SOFT(cudaMemcpyAsync(dst + mv->offset, src + mv->offset, mv->n_floats * sizeof(float), kind, t->stream),
                      err, err_n_bytes))
            return -1;
    }
    return 0;
}

/* The moving statistics of params_host through the device: up, the updates
 * from each micro-batch's saved statistics in order (the kept ones, then
 * the last forward's), down; then waits. */
static int cuda_update_moving(void *dev, float *params_host, char *err, size_t err_n_bytes) {
    CudaTower *t = dev;
    if (CUDA_SOFT(cudaSetDevice(t->device), err, err_n_bytes)) return -1;
    if (!t->moving_dev &&
        CUDA_SOFT(cudaMalloc((void **)&t->moving_dev, t->spec->n_params * sizeof(float)), err, err_n_bytes))
        return -1;
    if (copy_moving(t, t->moving_dev, params_host, cudaMemcpyHostToDevice, err, err_n_bytes)) return -1;
    for (int k = 0; k < t->n_stats; k++)
        model_update_moving_saved_cuda(t->moving_dev, t->acts,
                                       (const unsigned char *)t->stats_dev + (size_t)k * t->stats_n_bytes);
    model_update_moving_cuda(t->moving_dev, t->acts);
    if (copy_moving(t, params_host, t->moving_dev, cudaMemcpyDeviceToHost, err, err_n_bytes)) return -1;
    return CUDA_SOFT(cudaStreamSynchronize(t->stream), err, err_n_bytes);
}

/* params_host's moving statistics into params_dev on GPU params_device (host to device: any GPU). */
static int cuda_write_moving_device(void *dev, const float *params_host, float *params_dev, int params_device,
                                    char *err, size_t err_n_bytes) {
    CudaTower *t = dev;
    if (CUDA_SOFT(cudaSetDevice(params_device), err, err_n_bytes)) return -1;
    const ModelSpec *spec = t->spec;
    for (int v = 0; v < spec->n_vars; v++) {
        const ModelVar *mv = &spec->vars[v];
        if (mv->trainable) continue;
        if (CUDA_SOFT(cudaMemcpy(params_dev + mv->offset, params_host + mv->offset, mv->n_floats * sizeof(float),
                                 cudaMemcpyHostToDevice),
                      err, err_n_bytes))
            return -1;
    }
    return CUDA_SOFT(cudaSetDevice(t->device), err, err_n_bytes);
}

/* Everything but the name and the creator is shared. */
#define TOWER_CUDA_BACKEND(var, backend_name, create)                                                  \
    const TowerBackend var = {                                                                         \
        .name = backend_name,                                                                          \
        .host_alloc = cuda_host_alloc,                                                                 \
        .device_count = cuda_device_count,                                                             \
        .describe_device = cuda_describe_device,                                                       \
        .tower_create = create,                                                                        \
        .tower_free = cuda_tower_free,                                                                 \
        .copy_params_in = cuda_copy_params_in,                                                         \
        .copy_shard_in = cuda_copy_shard_in,                                                           \
        .compute = cuda_compute,                                                                       \
        .scale_grads = cuda_scale_grads,                                                               \
        .copy_grads_out = cuda_copy_grads_out,                                                         \
        .describe_algorithms = cuda_describe_algorithms,                                               \
        .device_view = cuda_device_view,                                                               \
        .copy_params_in_device = cuda_copy_params_in_device,                                           \
        .copy_grads_out_device = cuda_copy_grads_out_device,                                           \
        .set_sync = cuda_set_sync,                                                                     \
        .update_moving = cuda_update_moving,                                                           \
        .write_moving_device = cuda_write_moving_device,                                               \
        .device_spans = cuda_device_spans, /* bind_params stays NULL: a GPU cannot compute on host memory */ \
    }

TOWER_CUDA_BACKEND(tower_backend_cuda, "cuda", cuda_tower_create);
TOWER_CUDA_BACKEND(tower_backend_cuda_tf32, "cuda-tf32", cuda_tower_create_tf32);
TOWER_CUDA_BACKEND(tower_backend_cuda_deterministic, "cuda-deterministic", cuda_tower_create_det);
TOWER_CUDA_BACKEND(tower_backend_cuda_tf32_deterministic, "cuda-tf32-deterministic", cuda_tower_create_tf32_det);
