/* model_cuda.h — the models on one GPU: the CUDA executor of the layer
 * graph (graph.h), mirror of model.h's ModelActs, model_forward and
 * model_backward; it builds the same graph as the CPU executor.
 *
 * Where it sits: a GPU tower (tower/tower_cuda.c) owns one ModelActsCuda on
 * its device, with its own stream and cuDNN/cuBLAS handles, and runs it on
 * device copies of the master variables and of its shard.  The parameter
 * and gradient blocks have the CPU's layout (ModelSpec), so the tower
 * copies them to and from the host as they are.  This file knows nothing of
 * towers, threads or the parameter server.
 * What it does not do: choose or set the device (the caller makes it
 * current, cudaSetDevice, before every call), own the stream or handles, or
 * copy variables or data between host and device (except the loss and
 * logits it returns).
 */
#ifndef TOWER_MODEL_MODEL_CUDA_H
#define TOWER_MODEL_MODEL_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#ifdef __cplusplus
extern "C" { /* the C headers included here have no guards of their own */
#endif

#include "model/model.h"

typedef struct ModelActsCuda ModelActsCuda;

/* Per-tower GPU workspace for batches of up to max_batch examples: the
 * layers' descriptors and chosen cuDNN algorithms, activations saved for
 * backward, activation gradients, the copy of the last input and labels,
 * and scratch (transposed weights, cuDNN workspace, loss partial sums), all
 * in one cudaMalloc on the current device, plus a pinned loss scalar.
 *   cudnn, cublas: handles on the current device, owned by the caller; this
 *     call binds both to `stream` and sets cuBLAS's math mode (TF32 only if
 *     allow_tf32, CUBLAS_DEFAULT_MATH otherwise); cuDNN convolutions use
 *     FMA-only math unless allow_tf32.
 *   deterministic_only: the conv layers take only cuDNN algorithms cuDNN
 *     calls deterministic (--deterministic); without it they prefer them.
 * With TOWER_CUDA_SYNC_CHECK=1 in the environment (read here), forward and
 * backward wait after every layer and exit naming the layer on a CUDA
 * error (debugging: an asynchronous fault otherwise surfaces at the next
 * wait, naming no kernel).
 * Returns NULL with one line in err (an unknown model, a spec whose
 * variable table is not the graph's, no cuDNN algorithm, none deterministic
 * when deterministic_only, no device memory). */
ModelActsCuda *model_acts_cuda_create(const ModelSpec *spec, int max_batch, cudnnHandle_t cudnn,
                                      cublasHandle_t cublas, cudaStream_t stream, int allow_tf32,
                                      int deterministic_only, char *err, size_t err_n_bytes);

/* One line into out: for each node whose kind describes itself (the conv
 * layers: the cuDNN algorithms chosen for the current batch and whether
 * each is deterministic, conv2d_cuda_describe_algos), "conv1: ... | conv2: ...";
 * a line longer than out_n_bytes ends "... (cut: the buffer is full)". */
void model_acts_cuda_describe_algos(const ModelActsCuda *a, char *out, size_t out_n_bytes);

/* Whether TOWER_CUDA_SYNC_CHECK asks for a wait and check after every layer. */
int model_cuda_sync_check_enabled(void);

/* Free everything model_acts_cuda_create allocated (synchronises the
 * stream first).  NULL is a no-op. */
void model_acts_cuda_free(ModelActsCuda *a);

/* Enqueue the forward pass on the stream; nothing waits.
 *   loss_host: (1) HOST float (pinned for a true asynchronous copy), written
 *              by a copy on the stream: valid once the stream has reached it
 *              (cudaStreamSynchronize).  The loss is model_forward's: mean
 *              sparse softmax cross-entropy + every weight-decay term.
 *   logits_host: (B, num_classes) HOST floats, or NULL: likewise written by
 *              a copy on the stream.
 *   x_dev     : (B, H, W, C) device inputs;  labels_dev: (B) device labels
 *   params_dev: (n_params) device variables, the parameter block's layout
 * x and labels are copied (on the stream), so the caller may reuse its
 * buffers once the stream has passed this call.  B outside [1, max_batch],
 * or a batch cuDNN offers no algorithm for, prints one line, writes NAN to
 * *loss_host at once and makes the next model_backward_cuda add nothing. */
void model_forward_cuda_async(float *loss_host, float *logits_host, ModelActsCuda *a, const float *x_dev,
                              const int32_t *labels_dev, const float *params_dev, int B);

/* model_forward_cuda_async, then waits for the stream and returns the loss.
 * If logits_host is not NULL, copies the (B, num_classes) logits there
 * (HOST memory). */
float model_forward_cuda(float *logits_host, ModelActsCuda *a, const float *x_dev,
                         const int32_t *labels_dev, const float *params_dev, int B);

/* Enqueue the backward pass for the batch of the last forward on `a`.
 *   dparams_dev: (n_params) device: d(loss)/d(params) is ADDED to it (the
 *                caller zeroes it once per step, llm.c's convention), the
 *                loss being exactly what the forward returned.
 *   params_dev : the same variables the forward used.
 * Nothing waits; the gradient is complete once the stream has passed. */
void model_backward_cuda(float *dparams_dev, ModelActsCuda *a, const float *params_dev);

/* ---- overlapped copies (TOWER_GPU_OVERLAP=1, tower/tower_cuda.c; docs/gpu.md) ----
 * The variable block in chunks of whole nodes (graph_var_chunks, at least
 * min_chunk_n_bytes each but the last) copied on a second stream while the
 * compute stream works: forward starts a node once its chunk has arrived,
 * and backward sends a chunk's gradient out once it has passed the chunk's
 * first node, so most of both copies hide behind compute. */

/* Turn them on for this workspace.  copy_stream: a second stream on the
 * workspace's device, the caller's (it outlives the workspace).  Returns 0
 * (also when already on), or -1 with one line in err (events, host
 * memory). */
int model_acts_cuda_overlap(ModelActsCuda *a, cudaStream_t copy_stream, size_t min_chunk_n_bytes, char *err,
                            size_t err_n_bytes);

/* The chunks of model_acts_cuda_overlap, 0 when it is off. */
int model_acts_cuda_overlap_chunks(const ModelActsCuda *a);

/* Enqueue params_host (n_params, PINNED host) -> params_dev on the copy
 * stream, chunk by chunk, after everything already on the compute stream;
 * the next model_forward_cuda_async waits for each chunk before its first
 * node.  Nothing waits here.  Without model_acts_cuda_overlap: one line and
 * exit(2) (a programming error). */
void model_copy_params_in_cuda_async(ModelActsCuda *a, float *params_dev, const float *params_host);

/* model_backward_cuda, and each chunk of dparams_dev copied to grads_host
 * (n_params, PINNED host) on the copy stream as soon as it is final; the
 * weight-decay gradient is added node by node (bit for bit the same
 * gradient).  grads_host is complete once the copy stream has passed
 * (cudaStreamSynchronize of it).  Without model_acts_cuda_overlap: one
 * line and exit(2). */
void model_backward_cuda_copy_out(float *dparams_dev, ModelActsCuda *a, const float *params_dev, float *grads_host);

/* As model_acts_set_training (model.h): training (1, the default) or
 * evaluation mode of the next forwards; backward needs a training forward. */
void model_acts_cuda_set_training(ModelActsCuda *a, int training);

/* As model_acts_set_loss_weight (model.h): the cross-entropy's weight in
 * the loss the next backward passes differentiate (1 by default). */
void model_acts_cuda_set_loss_weight(ModelActsCuda *a, float loss_weight);

/* As model_acts_set_sync (model.h): from the next training forward on,
 * batch norm reduces its statistics through sync (copied; NULL: the
 * tower's own).  Each synced batch norm then waits for its stream, copies
 * its (2, C) sums to pinned host memory, calls sync->sum there and copies
 * the total back: a host round trip per layer, forward and backward (NCCL
 * inside the executor would avoid it; not built).  0, or -1 with one line
 * in err (no pinned memory). */
int model_acts_cuda_set_sync(ModelActsCuda *a, const ModelSync *sync, char *err, size_t err_n_bytes);

/* As model_update_moving: enqueue the update of every non-trainable
 * variable in params_dev (device, n_params) from the last training
 * forward's saved statistics.  Nothing waits. */
void model_update_moving_cuda(float *params_dev, ModelActsCuda *a);

/* As model_moving_stats_n_bytes, model_moving_stats_save and
 * model_update_moving_saved (model.h), with stats_dev in device memory:
 * the save and the update are enqueued on the workspace's stream (a
 * device-to-device copy per node), nothing waits. */
size_t model_moving_stats_n_bytes_cuda(const ModelActsCuda *a);
int model_moving_stats_save_cuda(void *stats_dev, ModelActsCuda *a);
void model_update_moving_saved_cuda(float *params_dev, ModelActsCuda *a, const void *stats_dev);

/* The stream the workspace was created with. */
cudaStream_t model_acts_cuda_stream(const ModelActsCuda *a);

/* ---- per-node timing (bench_gpu --per_layer) ----
 * Opt-in: on (1) creates a pair of cudaEvents per node and pass (forward,
 * backward), plus pairs around the input copy, the loss (cross-entropy and
 * weight decay, forward and backward) and each whole pass; from the next
 * forward on, the executor records one before and one after each node's
 * enqueue on the stream (a node's backward includes summing its input
 * gradients into a shared tensor's), and reads the host clock around each
 * enqueue.  Nothing is added that waits: a node's GPU time is what the
 * stream spent between its two events, including any idle time while the
 * host was still enqueuing it (compare the host time).  Off (0) destroys
 * the events; without profiling the executor pays one branch per node.
 * Both are idempotent.  0, or -1 with one line in err (no host memory, an
 * event cudaEventCreate refused; profiling is then off). */
int model_acts_cuda_profile(ModelActsCuda *a, int on, char *err, size_t err_n_bytes);

/* Nodes in the workspace's (fused) graph: the length of every per-node
 * array below; node i runs i-th forward and (n_nodes - 1 - i)-th backward. */
int model_acts_cuda_n_nodes(const ModelActsCuda *a);

/* What names node i in a table. */
typedef struct {
    const char *name;        /* the node's name, e.g. "conv2_block1_1_conv" (the workspace's: valid while it lives) */
    const char *kind;        /* the layer table's name: "conv2d", "batchnorm", ... (static) */
    const char *act;         /* the activation it applies to its output (its own or one graph_fuse folded
                                in): "relu", "relu6", or "" (static) */
    int H, W, C;             /* one example's output (H, W, C) */
    char describe[512];      /* the kind's own line (conv2d: its cuDNN algorithms for the current batch, with
                                their math and workspace, conv2d_cuda_describe_algos), or "" */
} ModelNodeInfoCuda;

/* Fill *info for node i.  0, or -1 if i is not in [0, n_nodes). */
int model_acts_cuda_node_info(const ModelActsCuda *a, int i, ModelNodeInfoCuda *info);

/* Each node's GPU time, in milliseconds, in the last profiled forward and
 * the backward that followed it (cudaEventElapsedTime; waits for the last
 * event of the pass read).
 *   fwd_ms, bwd_ms: (n_nodes) HOST floats, or NULL for a pass not wanted.
 *     A node whose output reaches no loss (backward skips it) gets 0.
 * Returns 0, or -1 (the arrays untouched) when profiling is off, or a
 * wanted pass has not run profiled since it was turned on (a backward:
 * since the last profiled forward; a forward that failed counts as none). */
int model_acts_cuda_profile_read(ModelActsCuda *a, float *fwd_ms, float *bwd_ms);

/* Host milliseconds (CLOCK_MONOTONIC) each node's enqueue took in the same
 * passes as model_acts_cuda_profile_read, which it follows in arguments
 * and return.  A node whose host time is near its GPU time is bound by its
 * launches, or waits inside (a synchronous copy or allocation). */
int model_acts_cuda_profile_read_host(ModelActsCuda *a, float *fwd_ms, float *bwd_ms);

/* What a profiled forward and backward spent outside their nodes, and as a
 * whole (GPU milliseconds between events on the stream, host milliseconds
 * of enqueuing). */
typedef struct {
    float forward_ms;        /* the whole forward: the input copy to the loss's copy to the host */
    float backward_ms;       /* the whole backward: the cross-entropy's gradient to weight decay's */
    float input_ms;          /* the forward's copy of x and labels */
    float loss_forward_ms;   /* cross-entropy, weight-decay terms, their total, the copies to the host */
    float loss_backward_ms;  /* the cross-entropy's gradient plus weight decay's gradients */
    float host_forward_ms;   /* host: enqueuing the whole forward */
    float host_backward_ms;  /* host: enqueuing the whole backward */
} ModelProfileTotalsCuda;

/* Fill *t from the last profiled forward and the backward that followed
 * (waits for both).  0, or -1 (*t untouched) when profiling is off or
 * either pass has not run profiled (as model_acts_cuda_profile_read). */
int model_acts_cuda_profile_totals(ModelActsCuda *a, ModelProfileTotalsCuda *t);

#ifdef __cplusplus
}
#endif

#endif
