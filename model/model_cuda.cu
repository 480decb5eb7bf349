/* model_cuda.cu — the CUDA executor of the layer graph (graph.h), and the
 * CUDA twins of the layer table's entries (<stem>_node_*_cuda, which
 * layer_table.c points at).
 *
 * Where it sits: implements model_cuda.h for a GPU tower.  It builds the
 * network's graph with the same builder the CPU executor uses
 * (graph_build) and walks it the same way: forward in node order, backward
 * in reverse, parameter gradients ADDED (the caller zeroes), activation
 * gradients WRITTEN, a tensor's gradient summed over its consumers in the
 * same order as model.c.  There is no second copy of any network's plan;
 * tests/test_gpu_model.c compares losses and gradients with the CPU's.
 * Memory: one cudaMalloc holds every activation, gradient and scratch
 * buffer, laid out once by layout(); nothing is allocated per step.
 * Profiling (model_acts_cuda_profile, opt-in): event pairs around every
 * node's enqueue, recorded only while a->prof is set; read back by
 * model_acts_cuda_profile_read (bench/bench_gpu.c --per_layer).
 * Overlapped copies (model_acts_cuda_overlap, opt-in): the variables come
 * in chunk by chunk on a second stream while forward runs (a node waits for
 * its chunk's event), and backward sends each chunk's gradient out as soon
 * as it has passed the chunk's first node (graph_var_chunks).
 * What it does not do: set the device, synchronise (except
 * model_forward_cuda, model_acts_cuda_free and the profile's reads), or
 * know about towers.
 */
#include "model/layers_cuda.h"
#include "model/model_cuda.h"
#include "base/cuda_check.h"
#include "base/flags.h"

extern "C" {
#include "model/graph.h"
}

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- what the layer table's CUDA entries see ---------------------------------------- */

/* A node's GPU state: whatever its kind keeps between calls. */
struct NodeCuda {
    Conv2dCuda conv;          /* CONV2D, and DEPTHWISE with dw_cudnn: descriptors, algorithms */
    LrnCuda lrn;              /* LRN */
    int dw_cudnn;             /* DEPTHWISE: 1 = cuDNN's grouped convolution in conv (TOWER_DEPTHWISE_CUDNN=1) */
};

/* Handles and options at workspace creation. */
struct NodeCudaEnv {
    int max_batch;
    int allow_tf32, deterministic_only;
    int input_grad;           /* the node being initialised: its input 0's gradient is wanted (Node.grad_wanted) */
    cudnnHandle_t cudnn;
    cublasHandle_t cublas;
};

/* What the executor hands a node's CUDA forward/backward (device pointers). */
struct NodeRunCuda {
    int B;
    int training;                     /* 1: training forward (batch statistics) */
    const float *in[NODE_MAX_INPUTS]; /* (B, in shape) each */
    float *out;                       /* (B, out shape) */
    void *saved;                      /* saved_n_bytes(node, max_batch) of its own */
    void *scratch;                    /* shared: max over nodes of cuda_scratch_n_bytes, 256-byte aligned */
    const float *w[NODE_MAX_VARS];    /* the node's variables */
    float *dw[NODE_MAX_VARS];         /* their gradients: backward ADDS */
    float *dout;                      /* (B, out shape), may be clobbered by backward */
    float *din[NODE_MAX_INPUTS];      /* (B, in shape) WRITTEN; NULL = not wanted */
    const NodeCuda *c;                /* the node's GPU state */
    const ModelSync *sync;            /* batch norm's cross-tower sums (model_acts_cuda_set_sync), or NULL */
    double *sync_host;                /* pinned host (2 C_max + 1) doubles for them */
    cudnnHandle_t cudnn;
    cublasHandle_t cublas;
    cudaStream_t stream;
};

static size_t align256(size_t n_bytes) { return (n_bytes + 255) / 256 * 256; }

/* ---- conv2d ---------------------------------------------------------------------------- */

extern "C" int conv2d_node_init_cuda(NodeCuda *c, const Node *n, const NodeCudaEnv *env, char *err,
                                     size_t err_n_bytes) {
    return conv2d_cuda_init(&c->conv, &n->conv, env->max_batch, env->allow_tf32, env->deterministic_only,
                            env->input_grad, env->cudnn, err, err_n_bytes);
}

extern "C" int conv2d_node_set_batch_cuda(NodeCuda *c, const Node *n, int B, const NodeCudaEnv *env, char *err,
                                          size_t err_n_bytes) {
    (void)n;
    return conv2d_cuda_set_batch(&c->conv, B, env->cudnn, err, err_n_bytes);
}

extern "C" void conv2d_node_free_cuda(NodeCuda *c) { conv2d_cuda_free(&c->conv); }

/* cuDNN's scratch, then the parameter gradients conv2d_backward_cuda overwrites. */
extern "C" size_t conv2d_node_scratch_n_bytes_cuda(const NodeCuda *c, const Node *n, int max_batch) {
    (void)max_batch;
    return align256(conv2d_cuda_scratch_n_bytes(&c->conv)) +
           align256(sizeof(float) * conv2d_cuda_filter_n_floats(&c->conv)) + align256(sizeof(float) * n->conv.C_out);
}

extern "C" void conv2d_node_forward_cuda(const Node *n, const NodeRunCuda *r) {
    (void)n;
    conv2d_forward_cuda(r->out, r->scratch, r->in[0], r->w[0], r->w[1], &r->c->conv, r->B, r->cudnn, r->cublas,
                        r->stream);
}

extern "C" void conv2d_node_backward_cuda(const Node *n, const NodeRunCuda *r) {
    char *s = (char *)r->scratch;
    float *dw = (float *)(s + align256(conv2d_cuda_scratch_n_bytes(&r->c->conv)));
    /* No bias variable (Keras's use_bias=False: mobilenet_v2): no bias gradient. */
    const size_t dw_n_floats = conv2d_cuda_filter_n_floats(&r->c->conv);
    float *db = r->dw[1] ? (float *)((char *)dw + align256(sizeof(float) * dw_n_floats)) : NULL;
    conv2d_backward_cuda(r->din[0], dw, db, r->scratch, r->out, r->dout, r->in[0], r->w[0], &r->c->conv, r->B,
                         r->cudnn, r->cublas, r->stream);
    grad_accumulate_cuda(r->dw[0], dw, dw_n_floats, r->stream);
    if (db) grad_accumulate_cuda(r->dw[1], db, (size_t)n->conv.C_out, r->stream);
}

extern "C" void conv2d_node_describe_cuda(const NodeCuda *c, char *out, size_t out_n_bytes) {
    conv2d_cuda_describe_algos(&c->conv, out, out_n_bytes);
}

/* ---- kinds with no GPU state ----------------------------------------------------------- */

static int no_init(NodeCuda *c, const Node *n, const NodeCudaEnv *env, char *err, size_t err_n_bytes) {
    (void)c, (void)n, (void)env, (void)err, (void)err_n_bytes;
    return 0;
}
static int no_set_batch(NodeCuda *c, const Node *n, int B, const NodeCudaEnv *env, char *err, size_t err_n_bytes) {
    (void)c, (void)n, (void)B, (void)env, (void)err, (void)err_n_bytes;
    return 0;
}
static void no_free(NodeCuda *c) { (void)c; }
static size_t no_scratch(const NodeCuda *c, const Node *n, int max_batch) {
    (void)c, (void)n, (void)max_batch;
    return 0;
}
static void no_describe(const NodeCuda *c, char *out, size_t out_n_bytes) {
    (void)c;
    if (out_n_bytes) out[0] = '\0';
}

/* ---- max pooling ------------------------------------------------------------------------ */

extern "C" int maxpool_node_init_cuda(NodeCuda *c, const Node *n, const NodeCudaEnv *env, char *e, size_t k) {
    return no_init(c, n, env, e, k);
}
extern "C" int maxpool_node_set_batch_cuda(NodeCuda *c, const Node *n, int B, const NodeCudaEnv *env, char *e,
                                           size_t k) {
    return no_set_batch(c, n, B, env, e, k);
}
extern "C" void maxpool_node_free_cuda(NodeCuda *c) { no_free(c); }
extern "C" size_t maxpool_node_scratch_n_bytes_cuda(const NodeCuda *c, const Node *n, int max_batch) {
    return no_scratch(c, n, max_batch);
}
extern "C" void maxpool_node_forward_cuda(const Node *n, const NodeRunCuda *r) {
    maxpool_forward_cuda(r->out, (int32_t *)r->saved, r->in[0], &n->pool, r->B, r->stream);
}
extern "C" void maxpool_node_backward_cuda(const Node *n, const NodeRunCuda *r) {
    if (r->din[0]) maxpool_backward_cuda(r->din[0], (const int32_t *)r->saved, r->dout, &n->pool, r->B, r->stream);
}
extern "C" void maxpool_node_describe_cuda(const NodeCuda *c, char *out, size_t k) { no_describe(c, out, k); }

/* ---- local response normalisation ------------------------------------------------------- */

static size_t lrn_n_pixels(const Node *n, int B) { return (size_t)B * n->out.H * n->out.W; }

extern "C" int lrn_node_init_cuda(NodeCuda *c, const Node *n, const NodeCudaEnv *env, char *err,
                                  size_t err_n_bytes) {
    if (lrn_cuda_init(&c->lrn, &n->lrn, n->out.C, LRN_CUDA_AUTO, err, err_n_bytes)) return -1;
    return lrn_cuda_set_n_pixels(&c->lrn, lrn_n_pixels(n, env->max_batch), err, err_n_bytes);
}
extern "C" int lrn_node_set_batch_cuda(NodeCuda *c, const Node *n, int B, const NodeCudaEnv *env, char *err,
                                       size_t err_n_bytes) {
    (void)env;
    return lrn_cuda_set_n_pixels(&c->lrn, lrn_n_pixels(n, B), err, err_n_bytes);
}
extern "C" void lrn_node_free_cuda(NodeCuda *c) { lrn_cuda_free(&c->lrn); }
extern "C" size_t lrn_node_scratch_n_bytes_cuda(const NodeCuda *c, const Node *n, int max_batch) {
    return no_scratch(c, n, max_batch);
}
extern "C" void lrn_node_forward_cuda(const Node *n, const NodeRunCuda *r) {
    lrn_forward_cuda(r->out, (float *)r->saved, r->in[0], &r->c->lrn, lrn_n_pixels(n, r->B), n->out.C, r->cudnn,
                     r->stream);
}
extern "C" void lrn_node_backward_cuda(const Node *n, const NodeRunCuda *r) {
    if (r->din[0])
        lrn_backward_cuda(r->din[0], (const float *)r->saved, r->out, r->dout, r->in[0], &r->c->lrn,
                          lrn_n_pixels(n, r->B), n->out.C, r->cudnn, r->stream);
}
extern "C" void lrn_node_describe_cuda(const NodeCuda *c, char *out, size_t k) { no_describe(c, out, k); }

/* ---- fully connected --------------------------------------------------------------------- */

extern "C" int dense_node_init_cuda(NodeCuda *c, const Node *n, const NodeCudaEnv *env, char *e, size_t k) {
    return no_init(c, n, env, e, k);
}
extern "C" int dense_node_set_batch_cuda(NodeCuda *c, const Node *n, int B, const NodeCudaEnv *env, char *e,
                                         size_t k) {
    return no_set_batch(c, n, B, env, e, k);
}
extern "C" void dense_node_free_cuda(NodeCuda *c) { no_free(c); }
/* None: dense_backward_cuda adds into the variables' gradients (cuBLAS's beta is 1). */
extern "C" size_t dense_node_scratch_n_bytes_cuda(const NodeCuda *c, const Node *n, int max_batch) {
    return no_scratch(c, n, max_batch);
}
extern "C" void dense_node_forward_cuda(const Node *n, const NodeRunCuda *r) {
    dense_forward_cuda(r->out, r->in[0], r->w[0], r->w[1], &n->dense, r->B, r->cublas, r->stream);
}
extern "C" void dense_node_backward_cuda(const Node *n, const NodeRunCuda *r) {
    /* Added straight into the variables' gradients, which the executor zeroed.  The pre-activation gradient
     * overwrites dout in place (the executor's buffer). */
    dense_backward_cuda(r->din[0], r->dw[0], r->dw[1], r->dout, r->out, r->dout, r->in[0], r->w[0], &n->dense, r->B,
                        1, r->cublas, r->stream);
}
extern "C" void dense_node_describe_cuda(const NodeCuda *c, char *out, size_t k) { no_describe(c, out, k); }

/* ---- the MobileNetV2 kinds ---------------------------------------------------------------
 * Kinds without GPU state get the no-op init/set_batch/free/describe. */
#define NO_STATE_CUDA(stem)                                                                                       \
    extern "C" int stem##_node_init_cuda(NodeCuda *c, const Node *n, const NodeCudaEnv *env, char *e, size_t k) { \
        return no_init(c, n, env, e, k);                                                                          \
    }                                                                                                             \
    extern "C" int stem##_node_set_batch_cuda(NodeCuda *c, const Node *n, int B, const NodeCudaEnv *env, char *e, \
                                              size_t k) {                                                         \
        return no_set_batch(c, n, B, env, e, k);                                                                  \
    }                                                                                                             \
    extern "C" void stem##_node_free_cuda(NodeCuda *c) { no_free(c); }                                            \
    extern "C" void stem##_node_describe_cuda(const NodeCuda *c, char *out, size_t k) { no_describe(c, out, k); }
#define NO_SCRATCH_CUDA(stem)                                                                                     \
    extern "C" size_t stem##_node_scratch_n_bytes_cuda(const NodeCuda *c, const Node *n, int max_batch) {         \
        return no_scratch(c, n, max_batch);                                                                       \
    }

static size_t rows_of(const Node *n, int B) { return (size_t)B * n->in.H * n->in.W; }

/* batch norm: saved (3, C) floats: batch mean, variance, inv_std. */
NO_STATE_CUDA(batchnorm)
extern "C" size_t batchnorm_node_scratch_n_bytes_cuda(const NodeCuda *c, const Node *n, int max_batch) {
    (void)c, (void)max_batch;
    return sizeof(double) * batchnorm_cuda_scratch_n_doubles(n->bn.C);
}
/* Sync batch norm's step on the GPU: the (2, C) sums at sums_dev -> pinned
 * host, with this tower's row count, summed over the towers by the host
 * collective, and back into sums_dev.  Waits for the stream (the collective
 * is the host's).  Returns the global row count. */
static double bn_sum_over_towers_cuda(const Node *n, const NodeRunCuda *r, double *sums_dev) {
    const size_t n_bytes = sizeof(double) * 2 * (size_t)n->bn.C;
    CUDA_CHECK(cudaMemcpyAsync(r->sync_host, sums_dev, n_bytes, cudaMemcpyDeviceToHost, r->stream));
    CUDA_CHECK(cudaStreamSynchronize(r->stream));
    r->sync_host[2 * n->bn.C] = (double)rows_of(n, r->B);
    r->sync->sum(r->sync->ctx, r->sync_host, 2 * (size_t)n->bn.C + 1);
    const double count = r->sync_host[2 * n->bn.C];
    CUDA_CHECK(cudaMemcpyAsync(sums_dev, r->sync_host, n_bytes, cudaMemcpyHostToDevice, r->stream));
    CUDA_CHECK(cudaStreamSynchronize(r->stream)); /* the pinned buffer is the next layer's */
    return count;
}

/* A fused activation (graph_fuse: bn.act) runs as the existing kernels in
 * sequence: the activation in place on the batch norm's output, and its
 * backward in place on dout (which backward may clobber) from that output,
 * before the batch norm's backward. */
static void bn_act_forward_cuda(const Node *n, const NodeRunCuda *r) {
    const size_t count = (size_t)r->B * node_shape_n(n->out);
    if (n->bn.act == ACT_RELU6) relu6_forward_cuda(r->out, r->out, count, r->stream);
    else if (n->bn.act == ACT_RELU) relu_forward_cuda(r->out, r->out, count, r->stream);
}
static void bn_act_backward_cuda(const Node *n, const NodeRunCuda *r) {
    const size_t count = (size_t)r->B * node_shape_n(n->out);
    if (n->bn.act == ACT_RELU6) relu6_backward_cuda(r->dout, r->out, r->dout, count, r->stream);
    else if (n->bn.act == ACT_RELU) relu_backward_cuda(r->dout, r->out, r->dout, count, r->stream);
}

extern "C" void batchnorm_node_forward_cuda(const Node *n, const NodeRunCuda *r) {
    float *mean = (float *)r->saved, *var = mean + n->bn.C, *inv_std = var + n->bn.C;
    if (r->training && r->sync) {
        double *sums = (double *)r->scratch, *partials = sums + 2 * (size_t)n->bn.C;
        const size_t rows = rows_of(n, r->B);
        batchnorm_sums_cuda(sums, partials, r->in[0], rows, n->bn.C, r->stream);
        const double count = bn_sum_over_towers_cuda(n, r, sums);
        batchnorm_moments_cuda(mean, var, sums, count, n->bn.C, r->stream);
        batchnorm_normalize_cuda(r->out, inv_std, r->in[0], mean, var, r->w[0], r->w[1], n->bn.epsilon, rows, n->bn.C,
                                 r->stream);
    } else if (r->training && batchnorm_cuda_fused(rows_of(n, r->B))) {
        batchnorm_act_forward_train_fused_cuda(r->out, mean, var, inv_std, r->in[0], r->w[0], r->w[1], &n->bn,
                                               n->bn.act, rows_of(n, r->B), r->stream);
        return; /* the activation is in the kernel */
    } else if (r->training)
        batchnorm_forward_train_cuda(r->out, mean, var, inv_std, (double *)r->scratch, r->in[0], r->w[0], r->w[1],
                                     &n->bn, rows_of(n, r->B), r->stream);
    else
        batchnorm_forward_eval_cuda(r->out, inv_std, r->in[0], r->w[2], r->w[3], r->w[0], r->w[1], &n->bn,
                                    rows_of(n, r->B), r->stream);
    bn_act_forward_cuda(n, r);
}
extern "C" void batchnorm_node_backward_cuda(const Node *n, const NodeRunCuda *r) {
    const float *mean = (const float *)r->saved, *inv_std = mean + 2 * n->bn.C;
    if (!r->sync && batchnorm_cuda_fused(rows_of(n, r->B))) { /* the activation's backward in the kernel */
        batchnorm_act_backward_fused_cuda(r->din[0], r->dw[0], r->dw[1], r->dout, r->out, r->in[0], mean, inv_std,
                                          r->w[0], &n->bn, n->bn.act, rows_of(n, r->B), r->stream);
        return;
    }
    bn_act_backward_cuda(n, r);
    if (r->sync) { /* gamma's and beta's gradients from this tower's rows; the input's from the global sums */
        double *dsums = (double *)r->scratch, *partials = dsums + 2 * (size_t)n->bn.C;
        const size_t rows = rows_of(n, r->B);
        batchnorm_backward_sums_cuda(dsums, partials, r->dout, r->in[0], mean, inv_std, rows, n->bn.C, r->stream);
        batchnorm_param_grads_cuda(r->dw[0], r->dw[1], dsums, n->bn.C, r->stream);
        const double count = bn_sum_over_towers_cuda(n, r, dsums);
        if (r->din[0])
            batchnorm_backward_input_cuda(r->din[0], r->dout, r->in[0], mean, inv_std, r->w[0], dsums, count, rows,
                                          n->bn.C, r->stream);
        return;
    }
    batchnorm_backward_cuda(r->din[0], r->dw[0], r->dw[1], (double *)r->scratch, r->dout, r->in[0], mean, inv_std,
                            r->w[0], &n->bn, rows_of(n, r->B), r->stream);
}
extern "C" void batchnorm_node_update_cuda(const Node *n, float *const *w, const void *saved, const NodeRunCuda *r) {
    const float *mean = (const float *)saved, *var = mean + n->bn.C;
    batchnorm_update_moving_cuda(w[2], w[3], mean, var, n->bn.momentum, n->bn.C, r->stream);
}

/* depthwise: our kernels (depthwise_cuda.cu), or with TOWER_DEPTHWISE_CUDNN=1
 * in the environment (read at workspace creation) cuDNN's grouped
 * convolution (conv2d_cuda_init_depthwise), to measure one against the
 * other on a GPU (docs/gpu.md). */
extern "C" int depthwise_node_init_cuda(NodeCuda *c, const Node *n, const NodeCudaEnv *env, char *err,
                                        size_t err_n_bytes) {
    c->dw_cudnn = flags_env_on("TOWER_DEPTHWISE_CUDNN");
    if (!c->dw_cudnn) return 0;
    return conv2d_cuda_init_depthwise(&c->conv, &n->dw, env->max_batch, env->allow_tf32, env->deterministic_only,
                                      env->input_grad, env->cudnn, err, err_n_bytes);
}
extern "C" int depthwise_node_set_batch_cuda(NodeCuda *c, const Node *n, int B, const NodeCudaEnv *env, char *err,
                                             size_t err_n_bytes) {
    (void)n;
    return c->dw_cudnn ? conv2d_cuda_set_batch(&c->conv, B, env->cudnn, err, err_n_bytes) : 0;
}
extern "C" void depthwise_node_free_cuda(NodeCuda *c) {
    if (c->dw_cudnn) conv2d_cuda_free(&c->conv);
}
/* cuDNN: its scratch, then the weight gradient conv2d_backward_cuda overwrites. */
extern "C" size_t depthwise_node_scratch_n_bytes_cuda(const NodeCuda *c, const Node *n, int max_batch) {
    if (c->dw_cudnn)
        return align256(conv2d_cuda_scratch_n_bytes(&c->conv)) +
               align256(sizeof(float) * conv2d_cuda_filter_n_floats(&c->conv));
    return depthwise_cuda_scratch_n_bytes(&n->dw, max_batch);
}
extern "C" void depthwise_node_forward_cuda(const Node *n, const NodeRunCuda *r) {
    if (r->c->dw_cudnn)
        conv2d_forward_cuda(r->out, r->scratch, r->in[0], r->w[0], NULL, &r->c->conv, r->B, r->cudnn, r->cublas, r->stream);
    else
        depthwise_forward_cuda(r->out, r->in[0], r->w[0], &n->dw, r->B, r->stream);
}
extern "C" void depthwise_node_backward_cuda(const Node *n, const NodeRunCuda *r) {
    if (!r->c->dw_cudnn) {
        depthwise_backward_cuda(r->din[0], r->dw[0], r->scratch, r->dout, r->in[0], r->w[0], &n->dw, r->B, r->stream);
        return;
    }
    float *dw = (float *)((char *)r->scratch + align256(conv2d_cuda_scratch_n_bytes(&r->c->conv)));
    conv2d_backward_cuda(r->din[0], dw, NULL, r->scratch, r->out, r->dout, r->in[0], r->w[0], &r->c->conv, r->B,
                         r->cudnn, r->cublas, r->stream);
    grad_accumulate_cuda(r->dw[0], dw, conv2d_cuda_filter_n_floats(&r->c->conv), r->stream);
}
extern "C" void depthwise_node_describe_cuda(const NodeCuda *c, char *out, size_t out_n_bytes) {
    if (c->dw_cudnn) conv2d_cuda_describe_algos(&c->conv, out, out_n_bytes);
    else no_describe(c, out, out_n_bytes);
}

/* pointwise */
NO_STATE_CUDA(pointwise)
NO_SCRATCH_CUDA(pointwise)
extern "C" void pointwise_node_forward_cuda(const Node *n, const NodeRunCuda *r) {
    pointwise_forward_cuda(r->out, r->in[0], r->w[0], rows_of(n, r->B), n->in.C, n->pw_C_out, r->cublas, r->stream);
}
extern "C" void pointwise_node_backward_cuda(const Node *n, const NodeRunCuda *r) {
    pointwise_backward_cuda(r->din[0], r->dw[0], r->dout, r->in[0], r->w[0], rows_of(n, r->B), n->in.C, n->pw_C_out,
                            r->cublas, r->stream);
}

/* zero padding */
NO_STATE_CUDA(zeropad)
NO_SCRATCH_CUDA(zeropad)
extern "C" void zeropad_node_forward_cuda(const Node *n, const NodeRunCuda *r) {
    zeropad_forward_cuda(r->out, r->in[0], &n->zp, r->B, r->stream);
}
extern "C" void zeropad_node_backward_cuda(const Node *n, const NodeRunCuda *r) {
    if (r->din[0]) zeropad_backward_cuda(r->din[0], r->dout, &n->zp, r->B, r->stream);
}

/* ReLU6 */
NO_STATE_CUDA(relu6)
NO_SCRATCH_CUDA(relu6)
extern "C" void relu6_node_forward_cuda(const Node *n, const NodeRunCuda *r) {
    relu6_forward_cuda(r->out, r->in[0], (size_t)r->B * node_shape_n(n->out), r->stream);
}
extern "C" void relu6_node_backward_cuda(const Node *n, const NodeRunCuda *r) {
    if (r->din[0]) relu6_backward_cuda(r->din[0], r->out, r->dout, (size_t)r->B * node_shape_n(n->out), r->stream);
}

/* ReLU (Keras Activation("relu")) */
NO_STATE_CUDA(relu)
NO_SCRATCH_CUDA(relu)
extern "C" void relu_node_forward_cuda(const Node *n, const NodeRunCuda *r) {
    relu_forward_cuda(r->out, r->in[0], (size_t)r->B * node_shape_n(n->out), r->stream);
}
extern "C" void relu_node_backward_cuda(const Node *n, const NodeRunCuda *r) {
    if (r->din[0]) relu_backward_cuda(r->din[0], r->out, r->dout, (size_t)r->B * node_shape_n(n->out), r->stream);
}

/* residual addition */
NO_STATE_CUDA(add)
NO_SCRATCH_CUDA(add)
extern "C" void add_node_forward_cuda(const Node *n, const NodeRunCuda *r) {
    add_act_forward_cuda(r->out, r->in[0], r->in[1], n->add_act, (size_t)r->B * node_shape_n(n->out), r->stream);
}
extern "C" void add_node_backward_cuda(const Node *n, const NodeRunCuda *r) {
    add_act_backward_cuda(r->din[0], r->din[1], r->out, r->dout, n->add_act, (size_t)r->B * node_shape_n(n->out),
                          r->stream);
}

/* global average pooling */
NO_STATE_CUDA(gap)
NO_SCRATCH_CUDA(gap)
extern "C" void gap_node_forward_cuda(const Node *n, const NodeRunCuda *r) {
    global_avgpool_forward_cuda(r->out, r->in[0], r->B, n->in.H * n->in.W, n->in.C, r->stream);
}
extern "C" void gap_node_backward_cuda(const Node *n, const NodeRunCuda *r) {
    if (r->din[0]) global_avgpool_backward_cuda(r->din[0], r->dout, r->B, n->in.H * n->in.W, n->in.C, r->stream);
}

/* ---- the executor ------------------------------------------------------------------------- */

/* One node's device buffers. */
typedef struct {
    float *out;               /* (max_batch, out shape) */
    float *dout;              /* (max_batch, out shape) the gradient of out */
    void *saved;              /* the kind's saved_n_bytes, or NULL */
} NodeBufCuda;

/* Device scalars, in ModelActsCuda.scalars */
#define SCALAR_CE 0
#define SCALAR_LOSS 1
#define SCALAR_L2 2           /* + v: variable v's weight-decay term */

/* model_acts_cuda_profile's state: (start, end) event pairs on the stream
 * and host milliseconds, per node and pass, of the last profiled forward
 * and the backward after it. */
enum { PROF_FWD_PASS, PROF_BWD_PASS, PROF_INPUT, PROF_LOSS_FWD, PROF_XENT_BWD, PROF_L2_BWD, PROF_N_EXTRA };
typedef struct {
    cudaEvent_t fwd[GRAPH_MAX_NODES][2], bwd[GRAPH_MAX_NODES][2];
    cudaEvent_t extra[PROF_N_EXTRA][2];      /* indexed by PROF_* */
    double host_fwd_ms[GRAPH_MAX_NODES], host_bwd_ms[GRAPH_MAX_NODES];
    double host_fwd_pass_ms, host_bwd_pass_ms;
    unsigned char bwd_ran[GRAPH_MAX_NODES];  /* 1: node i's backward ran (its output reaches the loss) */
    int fwd_done;                            /* 1: the last forward ran profiled to its end */
    int bwd_done;                            /* 1: a backward ran profiled after it */
} ProfCuda;

/* The overlapped copies' chunks and events (model_acts_cuda_overlap). */
typedef struct {
    int n_chunks;
    int node_chunk[GRAPH_MAX_NODES];          /* graph_var_chunks' */
    int chunk_first[GRAPH_MAX_NODES];
    size_t chunk_start[GRAPH_MAX_NODES + 1];  /* in floats */
    cudaEvent_t in_ev[GRAPH_MAX_NODES];       /* chunk k's variables are on the device (copy stream) */
    cudaEvent_t out_ev[GRAPH_MAX_NODES];      /* chunk k's gradient is final (compute stream) */
    cudaEvent_t ready;                        /* the compute stream reached the copy-in (its last reader is done) */
    cudaStream_t copy;                        /* the caller's second stream on the same device */
    int params_pending;                       /* 1: the next forward waits chunk by chunk */
} OverlapCuda;

struct ModelActsCuda {
    ModelSpec spec;
    Graph graph;              /* built from spec by graph_build, as model.c */
    NodeCuda nodes[GRAPH_MAX_NODES];
    NodeBufCuda bufs[GRAPH_MAX_NODES];
    int inited[GRAPH_MAX_NODES]; /* 1 once node i's cuda_init succeeded (free only those) */
    NodeCudaEnv env;
    int max_batch;
    cudnnHandle_t cudnn;      /* the caller's, bound to stream */
    cublasHandle_t cublas;    /* the caller's, bound to stream */
    cudaStream_t stream;      /* the caller's */
    void *block;              /* the one device allocation everything below lives in */
    size_t block_n_bytes;
    float *x;                 /* (max_batch, H, W, C) copy of the last forward's input */
    int32_t *labels;          /* (max_batch) copy of the last forward's labels */
    float *probs;             /* (max_batch, num_classes) softmax, saved for backward */
    double *example_loss;     /* (max_batch) cross-entropy per example */
    float *grad_tmp;          /* (NODE_MAX_INPUTS, grad_tmp_n_floats) a later consumer's input gradients */
    size_t grad_tmp_n_floats;
    void *scratch;            /* max over nodes of cuda_scratch_n_bytes */
    size_t scratch_n_bytes;
    double *l2_partials;      /* (n_vars, L2_LOSS_CUDA_BLOCKS) */
    float *scalars;           /* (SCALAR_L2 + n_vars) device scalars */
    int *wd_vars;             /* (n_wd) device: the variables with weight decay, in table order */
    int n_wd;
    float *loss_pinned;       /* (1) pinned host, model_forward_cuda's loss */
    int described_batch;      /* the batch the nodes' descriptors describe */
    int sync_check;           /* TOWER_CUDA_SYNC_CHECK=1: wait and check after every layer (debugging) */
    int B;                    /* batch of the last forward; 0 before the first or after a failed one */
    int training;             /* mode of the next forwards (model_acts_cuda_set_training), 1 by default */
    int forward_training;     /* mode of the last forward */
    float loss_weight;        /* the cross-entropy's weight in the backward's loss (model_acts_cuda_set_loss_weight) */
    ModelSync sync;           /* batch norm's cross-tower sums (model_acts_cuda_set_sync) */
    int synced;               /* 1: sync is set */
    double *sync_pinned;      /* pinned host: (2 C_max + 1) doubles over the graph's batch norms */
    ProfCuda *prof;           /* per-node timing (model_acts_cuda_profile), or NULL: off */
    OverlapCuda *ov;          /* overlapped copies (model_acts_cuda_overlap), or NULL: off */
};

/* Carve n_bytes at *off from base (0 on the sizing pass). */
static void *take(uintptr_t base, size_t *off, size_t n_bytes) {
    void *p = (void *)(base + *off);
    *off += align256(n_bytes ? n_bytes : 1);
    return p;
}

/* Assign every buffer its place in the block at base; returns the block's
 * size.  Called once with base 0 to size the block, once to place. */
static size_t layout(ModelActsCuda *a, uintptr_t base) {
    const ModelSpec *s = &a->spec;
    const Graph *g = &a->graph;
    const size_t Bm = (size_t)a->max_batch;
    size_t off = 0, max_out = node_shape_n(g->input);
    for (int i = 0; i < g->n_nodes; i++) {
        const Node *n = &g->nodes[i];
        NodeBufCuda *b = &a->bufs[i];
        const size_t out_n = node_shape_n(n->out), saved = model_layer_table[n->kind].saved_n_bytes(n, a->max_batch);
        if (out_n > max_out) max_out = out_n;
        b->out = (float *)take(base, &off, sizeof(float) * Bm * out_n);
        b->dout = (float *)take(base, &off, sizeof(float) * Bm * out_n);
        b->saved = saved ? take(base, &off, saved) : NULL;
    }
    a->x = (float *)take(base, &off, sizeof(float) * Bm * s->H * s->W * s->C);
    a->labels = (int32_t *)take(base, &off, sizeof(int32_t) * Bm);
    a->probs = (float *)take(base, &off, sizeof(float) * Bm * s->num_classes);
    a->example_loss = (double *)take(base, &off, sizeof(double) * Bm);
    a->grad_tmp_n_floats = g->shared ? Bm * max_out : 0; /* a chain never sums gradients */
    a->grad_tmp = (float *)take(base, &off, sizeof(float) * NODE_MAX_INPUTS * a->grad_tmp_n_floats);
    a->scratch = take(base, &off, a->scratch_n_bytes);
    a->l2_partials = (double *)take(base, &off, sizeof(double) * L2_LOSS_CUDA_BLOCKS * (s->n_vars ? s->n_vars : 1));
    a->scalars = (float *)take(base, &off, sizeof(float) * (SCALAR_L2 + s->n_vars));
    a->wd_vars = (int *)take(base, &off, sizeof(int) * (s->n_vars ? s->n_vars : 1));
    return off;
}

/* ---- create / free ------------------------------------------------------------------------ */

/* Destroy every event p created (cudaEventDestroy defers the release of
 * one still pending on a stream), then p.  NULL is a no-op. */
static void prof_free(ProfCuda *p) {
    if (!p) return;
    cudaEvent_t *ev[] = {&p->fwd[0][0], &p->bwd[0][0], &p->extra[0][0]};
    const int n[] = {2 * GRAPH_MAX_NODES, 2 * GRAPH_MAX_NODES, 2 * PROF_N_EXTRA};
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < n[k]; j++)
            if (ev[k][j]) cudaEventDestroy(ev[k][j]);
    free(p);
}

/* Destroy every event ov created (its arrays start zeroed), then ov.  NULL is a no-op. */
static void overlap_free(OverlapCuda *ov) {
    if (!ov) return;
    for (int k = 0; k < ov->n_chunks; k++) {
        if (ov->in_ev[k]) cudaEventDestroy(ov->in_ev[k]);
        if (ov->out_ev[k]) cudaEventDestroy(ov->out_ev[k]);
    }
    if (ov->ready) cudaEventDestroy(ov->ready);
    free(ov);
}

extern "C" void model_acts_cuda_free(ModelActsCuda *a) {
    if (!a) return;
    if (a->block) cudaStreamSynchronize(a->stream);
    for (int i = 0; i < a->graph.n_nodes; i++)
        if (a->inited[i]) model_layer_table[a->graph.nodes[i].kind].cuda_free(&a->nodes[i]);
    if (a->block) cudaFree(a->block);
    if (a->loss_pinned) cudaFreeHost(a->loss_pinned);
    if (a->sync_pinned) cudaFreeHost(a->sync_pinned);
    prof_free(a->prof);
    overlap_free(a->ov);
    free(a);
}

extern "C" ModelActsCuda *model_acts_cuda_create(const ModelSpec *spec, int max_batch, cudnnHandle_t cudnn,
                                                 cublasHandle_t cublas, cudaStream_t stream, int allow_tf32,
                                                 int deterministic_only, char *err, size_t err_n_bytes) {
    if (max_batch < 1) {
        snprintf(err, err_n_bytes, "model_acts_cuda_create: max_batch must be at least 1, got %d", max_batch);
        return NULL;
    }
    ModelActsCuda *a = (ModelActsCuda *)calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, err_n_bytes, "model_acts_cuda_create: out of host memory");
        return NULL;
    }
    int wd_host[MODEL_MAX_VARS];
    a->spec = *spec;
    a->max_batch = max_batch;
    a->cudnn = cudnn;
    a->cublas = cublas;
    a->stream = stream;
    a->env.max_batch = max_batch;
    a->env.allow_tf32 = allow_tf32;
    a->env.deterministic_only = deterministic_only;
    a->env.cudnn = cudnn;
    a->env.cublas = cublas;
    a->sync_check = model_cuda_sync_check_enabled();
    a->training = 1;
    a->loss_weight = 1.0f;
    if (CUDNN_SOFT(cudnnSetStream(cudnn, stream), err, err_n_bytes) ||
        CUBLAS_SOFT(cublasSetStream(cublas, stream), err, err_n_bytes) ||
        CUBLAS_SOFT(cublasSetMathMode(cublas, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH), err,
                    err_n_bytes))
        goto fail;
    if (batchnorm_cuda_chunks_from_env(err, err_n_bytes) < 0) goto fail;
    if (graph_build(&a->graph, &a->spec) == 0) graph_fuse(&a->graph); /* as model.c's executor */
    if (!a->graph.ok || a->graph.n_nodes < 1 ||
        a->graph.nodes[a->graph.n_nodes - 1].var0 + a->graph.nodes[a->graph.n_nodes - 1].n_vars != spec->n_vars) {
        snprintf(err, err_n_bytes, "model %s cannot take input %dx%dx%d on the GPU (or its variable table is not "
                 "model_spec_init's)", spec->name ? spec->name : "?", spec->H, spec->W, spec->C);
        goto fail;
    }
    for (int i = 0; i < a->graph.n_nodes; i++) {
        const Node *n = &a->graph.nodes[i];
        const LayerKindInfo *k = &model_layer_table[n->kind];
        char e[384];
        if (!k->cuda_init || !k->cuda_set_batch || !k->cuda_free || !k->cuda_scratch_n_bytes || !k->cuda_forward ||
            !k->cuda_backward || !k->cuda_describe) {
            snprintf(err, err_n_bytes, "model %s, layer %s: layer kind %s has no CUDA implementation", spec->name,
                     n->name, k->name);
            goto fail;
        }
        a->env.input_grad = graph_grad_wanted(&a->graph, n->inputs[0]);
        if (k->cuda_init(&a->nodes[i], n, &a->env, e, sizeof e)) {
            snprintf(err, err_n_bytes, "model %s, layer %s: %s", spec->name, n->name, e);
            goto fail; /* the failed node freed itself */
        }
        a->inited[i] = 1;
        size_t sc = k->cuda_scratch_n_bytes(&a->nodes[i], n, max_batch);
        if (sc > a->scratch_n_bytes) a->scratch_n_bytes = sc;
    }
    a->described_batch = max_batch;
    for (int v = 0; v < spec->n_vars; v++)
        if (spec->vars[v].wd != 0.0f) wd_host[a->n_wd++] = v;
    a->block_n_bytes = layout(a, 0);
    if (CUDA_SOFT(cudaMalloc(&a->block, a->block_n_bytes), err, err_n_bytes) ||
        CUDA_SOFT(cudaMemsetAsync(a->block, 0, a->block_n_bytes, stream), err, err_n_bytes) ||
        CUDA_SOFT(cudaHostAlloc((void **)&a->loss_pinned, sizeof(float), cudaHostAllocPortable), err, err_n_bytes))
        goto fail;
    layout(a, (uintptr_t)a->block);
    if (a->n_wd && (CUDA_SOFT(cudaMemcpyAsync(a->wd_vars, wd_host, sizeof(int) * a->n_wd, cudaMemcpyHostToDevice,
                                              stream), err, err_n_bytes) ||
                    CUDA_SOFT(cudaStreamSynchronize(stream), err, err_n_bytes)))
        goto fail;
    return a;
fail:
    model_acts_cuda_free(a);
    return NULL;
}

extern "C" cudaStream_t model_acts_cuda_stream(const ModelActsCuda *a) { return a->stream; }

extern "C" int model_cuda_sync_check_enabled(void) { return flags_env_on("TOWER_CUDA_SYNC_CHECK"); }

static void describe_node_cuda(const void *ctx, int i, char *out, size_t out_n_bytes) {
    const ModelActsCuda *a = (const ModelActsCuda *)ctx;
    model_layer_table[a->graph.nodes[i].kind].cuda_describe(&a->nodes[i], out, out_n_bytes);
}

extern "C" void model_acts_cuda_describe_algos(const ModelActsCuda *a, char *out, size_t out_n_bytes) {
    graph_describe(&a->graph, describe_node_cuda, a, out, out_n_bytes);
}

/* TOWER_CUDA_SYNC_CHECK: wait for the stream after layer L's forward or
 * backward and exit naming the layer if anything on it failed, so that an
 * asynchronous kernel fault names its layer instead of surfacing at a
 * later, unrelated wait. */
static void sync_check(const ModelActsCuda *a, const char *layer, const char *pass) {
    if (!a->sync_check) return;
    cudaError_t e = cudaStreamSynchronize(a->stream);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) {
        fprintf(stderr, "CUDA error in model %s, layer %s, %s (TOWER_CUDA_SYNC_CHECK): %s\n", a->spec.name, layer, pass,
                cudaGetErrorString(e));
        fflush(stderr);
        _Exit(1);
    }
}

/* ---- forward / backward ------------------------------------------------------------------------ */

/* The host's CLOCK_MONOTONIC in milliseconds (profiling). */
static double host_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

/* Profiling: record ev on the stream (nothing waits). */
static void prof_record(cudaEvent_t ev, cudaStream_t st) { CUDA_CHECK(cudaEventRecord(ev, st)); }

/* Describe batch B in every node (host-only). */
static int set_batch(ModelActsCuda *a, int B, char *err, size_t err_n_bytes) {
    if (B == a->described_batch) return 0;
    a->described_batch = 0;
    for (int i = 0; i < a->graph.n_nodes; i++) {
        const Node *n = &a->graph.nodes[i];
        if (model_layer_table[n->kind].cuda_set_batch(&a->nodes[i], n, B, &a->env, err, err_n_bytes)) return -1;
    }
    a->described_batch = B;
    return 0;
}

/* One thread: loss = ce + the weight-decay terms in variable order (double,
 * as model.c), for the n_wd variables listed in wd_vars. */
__global__ static void total_loss_kernel(float *scalars, const int *wd_vars, int n_wd) {
    double loss = scalars[SCALAR_CE];
    for (int k = 0; k < n_wd; k++) loss += scalars[SCALAR_L2 + wd_vars[k]];
    scalars[SCALAR_LOSS] = (float)loss;
}

/* The run of node i: its buffers, variables and (if dparams) their gradients. */
static NodeRunCuda node_run(const ModelActsCuda *a, int i, int B, const float *params, float *dparams) {
    const Node *n = &a->graph.nodes[i];
    NodeRunCuda r;
    memset(&r, 0, sizeof r);
    r.B = B;
    r.training = a->training;
    r.out = a->bufs[i].out;
    r.saved = a->bufs[i].saved;
    r.scratch = a->scratch;
    r.c = &a->nodes[i];
    r.sync = a->synced ? &a->sync : NULL;
    r.sync_host = a->sync_pinned;
    r.cudnn = a->cudnn;
    r.cublas = a->cublas;
    r.stream = a->stream;
    for (int j = 0; j < n->n_inputs; j++) r.in[j] = n->inputs[j] == GRAPH_INPUT ? a->x : a->bufs[n->inputs[j]].out;
    for (int j = 0; j < n->n_vars; j++) {
        const ModelVar *v = &a->spec.vars[n->var0 + j];
        r.w[j] = params + v->offset;
        r.dw[j] = dparams ? dparams + v->offset : NULL;
    }
    return r;
}

extern "C" void model_forward_cuda_async(float *loss_host, float *logits_host, ModelActsCuda *a, const float *x_dev,
                                         const int32_t *labels_dev, const float *params_dev, int B) {
    const ModelSpec *s = &a->spec;
    const Graph *g = &a->graph;
    char e[384];
    ProfCuda *p = a->prof;
    double host_t0 = 0.0;
    a->B = 0;
    if (p) p->fwd_done = p->bwd_done = 0;
    if (B < 1 || B > a->max_batch) {
        fprintf(stderr, "model_forward_cuda: batch %d outside [1, %d] (the max_batch of model_acts_cuda_create)\n", B,
                a->max_batch);
        *loss_host = NAN;
        return;
    }
    if (set_batch(a, B, e, sizeof e)) {
        fprintf(stderr, "model_forward_cuda: %s\n", e);
        *loss_host = NAN;
        return;
    }
    a->B = B;
    a->forward_training = a->training;
    cudaStream_t st = a->stream;
    if (p) {
        host_t0 = host_now_ms();
        prof_record(p->extra[PROF_FWD_PASS][0], st);
        prof_record(p->extra[PROF_INPUT][0], st);
    }
    CUDA_CHECK(cudaMemcpyAsync(a->x, x_dev, sizeof(float) * B * s->H * s->W * s->C, cudaMemcpyDeviceToDevice, st));
    CUDA_CHECK(cudaMemcpyAsync(a->labels, labels_dev, sizeof(int32_t) * B, cudaMemcpyDeviceToDevice, st));
    if (p) prof_record(p->extra[PROF_INPUT][1], st);
    OverlapCuda *ov = a->ov && a->ov->params_pending ? a->ov : NULL;
    int waited = -1; /* chunks up to this one are waited for (they arrive in order) */
    for (int i = 0; i < g->n_nodes; i++) {
        const Node *n = &g->nodes[i];
        NodeRunCuda r = node_run(a, i, B, params_dev, NULL);
        if (ov && n->n_vars > 0 && ov->node_chunk[i] > waited) {
            waited = ov->node_chunk[i];
            CUDA_CHECK(cudaStreamWaitEvent(st, ov->in_ev[waited], 0));
        }
        if (p) {
            p->host_fwd_ms[i] = host_now_ms();
            prof_record(p->fwd[i][0], st);
        }
        model_layer_table[n->kind].cuda_forward(n, &r);
        if (p) {
            prof_record(p->fwd[i][1], st);
            p->host_fwd_ms[i] = host_now_ms() - p->host_fwd_ms[i];
        }
        sync_check(a, n->name, "forward");
    }
    if (ov) { /* the weight-decay terms read every variable */
        if (waited < ov->n_chunks - 1) CUDA_CHECK(cudaStreamWaitEvent(st, ov->in_ev[ov->n_chunks - 1], 0));
        ov->params_pending = 0;
    }
    const float *out = a->bufs[g->output].out;
    if (p) prof_record(p->extra[PROF_LOSS_FWD][0], st);
    softmax_xent_forward_cuda(&a->scalars[SCALAR_CE], a->probs, a->example_loss, out, a->labels, B, s->num_classes, st);
    for (int v = 0; v < s->n_vars; v++) {
        if (s->vars[v].wd == 0.0f) continue;
        l2_loss_forward_cuda(&a->scalars[SCALAR_L2 + v], a->l2_partials + (size_t)v * L2_LOSS_CUDA_BLOCKS,
                             params_dev + s->vars[v].offset, s->vars[v].n_floats, s->vars[v].wd, st);
    }
    total_loss_kernel<<<1, 1, 0, st>>>(a->scalars, a->wd_vars, a->n_wd);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpyAsync(loss_host, &a->scalars[SCALAR_LOSS], sizeof(float), cudaMemcpyDeviceToHost, st));
    if (logits_host)
        CUDA_CHECK(cudaMemcpyAsync(logits_host, out, sizeof(float) * B * s->num_classes, cudaMemcpyDeviceToHost, st));
    if (p) {
        prof_record(p->extra[PROF_LOSS_FWD][1], st);
        prof_record(p->extra[PROF_FWD_PASS][1], st);
        p->host_fwd_pass_ms = host_now_ms() - host_t0;
        p->fwd_done = 1;
    }
}

extern "C" float model_forward_cuda(float *logits_host, ModelActsCuda *a, const float *x_dev,
                                    const int32_t *labels_dev, const float *params_dev, int B) {
    model_forward_cuda_async(a->loss_pinned, logits_host, a, x_dev, labels_dev, params_dev, B);
    if (a->B == 0) return NAN;
    CUDA_CHECK(cudaStreamSynchronize(a->stream));
    return *a->loss_pinned;
}

/* Node i's backward: its parameter gradients added into dparams_dev, its
 * inputs' gradients written (or summed, for a tensor with several
 * consumers), in model.c's order; written[] as model.c's model_backward. */
static void backward_node(ModelActsCuda *a, int i, float *dparams_dev, const float *params_dev,
                          unsigned char *written) {
    const Graph *g = &a->graph;
    const Node *n = &g->nodes[i];
    const int B = a->B;
    cudaStream_t st = a->stream;
    ProfCuda *p = a->prof;
    if (p) {
        p->host_bwd_ms[i] = host_now_ms();
        p->bwd_ran[i] = 1;
        prof_record(p->bwd[i][0], st);
    }
    NodeRunCuda r = node_run(a, i, B, params_dev, dparams_dev);
    r.dout = a->bufs[i].dout;
    int later[NODE_MAX_INPUTS] = {0};
    for (int j = 0; j < n->n_inputs; j++) {
        const int in = n->inputs[j];
        if (!graph_grad_wanted(g, in)) continue; /* din[j] stays NULL: not wanted */
        later[j] = written[in] || (j == 1 && n->inputs[0] == in);
        r.din[j] = later[j] ? a->grad_tmp + (size_t)j * a->grad_tmp_n_floats : a->bufs[in].dout;
    }
    model_layer_table[n->kind].cuda_backward(n, &r);
    for (int j = 0; j < n->n_inputs; j++) {
        const int in = n->inputs[j];
        if (!graph_grad_wanted(g, in)) continue;
        if (later[j])
            grad_accumulate_cuda(a->bufs[in].dout, r.din[j], (size_t)B * node_shape_n(graph_shape(g, in)), st);
        written[in] = 1;
    }
    if (p) {
        prof_record(p->bwd[i][1], st);
        p->host_bwd_ms[i] = host_now_ms() - p->host_bwd_ms[i];
    }
    sync_check(a, n->name, "backward");
}

/* The weight-decay gradient of variable v added into dparams_dev. */
static void l2_backward_var(const ModelActsCuda *a, int v, float *dparams_dev, const float *params_dev) {
    const ModelVar *mv = &a->spec.vars[v];
    if (mv->wd != 0.0f)
        l2_loss_backward_cuda(dparams_dev + mv->offset, params_dev + mv->offset, mv->n_floats, mv->wd, a->stream);
}

/* model_backward_cuda, and with grads_host (a->ov set) each chunk's
 * gradient sent to grads_host on the copy stream once backward has passed
 * the chunk's first node; the weight-decay gradient is then added node by
 * node, right after the node's own (the same additions in the same order
 * for every element as after the whole pass). */
static void backward_pass(float *dparams_dev, ModelActsCuda *a, const float *params_dev, float *grads_host) {
    const ModelSpec *s = &a->spec;
    const Graph *g = &a->graph;
    const int B = a->B;
    cudaStream_t st = a->stream;
    if (B < 1) {
        fprintf(stderr, "model_backward_cuda: no successful model_forward_cuda on this workspace; no gradient added\n");
        return;
    }
    if (!a->forward_training) {
        fprintf(stderr, "model_backward_cuda: the last forward ran in evaluation mode; no gradient added\n");
        return;
    }
    const OverlapCuda *ov = grads_host ? a->ov : NULL;
    ProfCuda *p = a->prof;
    double host_t0 = 0.0;
    if (p) {
        host_t0 = host_now_ms();
        memset(p->bwd_ran, 0, sizeof p->bwd_ran);
        prof_record(p->extra[PROF_BWD_PASS][0], st);
        prof_record(p->extra[PROF_XENT_BWD][0], st);
    }
    unsigned char written[GRAPH_MAX_NODES] = {0}; /* as model.c's model_backward */
    softmax_xent_backward_cuda(a->bufs[g->output].dout, a->probs, a->labels, a->loss_weight, B, s->num_classes, st);
    if (p) prof_record(p->extra[PROF_XENT_BWD][1], st);
    written[g->output] = 1;
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        const Node *n = &g->nodes[i];
        if (written[i] && n->grad_wanted) backward_node(a, i, dparams_dev, params_dev, written);
        if (!ov) continue;
        for (int v = n->var0; v < n->var0 + n->n_vars; v++) l2_backward_var(a, v, dparams_dev, params_dev);
        const int k = ov->node_chunk[i];
        if (ov->chunk_first[k] != i) continue;
        /* every node of chunk k is behind: send its gradient */
        const size_t lo = ov->chunk_start[k], n_floats = ov->chunk_start[k + 1] - lo;
        CUDA_CHECK(cudaEventRecord(ov->out_ev[k], st));
        CUDA_CHECK(cudaStreamWaitEvent(ov->copy, ov->out_ev[k], 0));
        if (n_floats)
            CUDA_CHECK(cudaMemcpyAsync(grads_host + lo, dparams_dev + lo, n_floats * sizeof(float),
                                       cudaMemcpyDeviceToHost, ov->copy));
    }
    if (p) prof_record(p->extra[PROF_L2_BWD][0], st);
    if (!ov)
        for (int v = 0; v < s->n_vars; v++) l2_backward_var(a, v, dparams_dev, params_dev);
    if (p) {
        prof_record(p->extra[PROF_L2_BWD][1], st);
        prof_record(p->extra[PROF_BWD_PASS][1], st);
        p->host_bwd_pass_ms = host_now_ms() - host_t0;
        p->bwd_done = 1;
    }
}

extern "C" void model_backward_cuda(float *dparams_dev, ModelActsCuda *a, const float *params_dev) {
    backward_pass(dparams_dev, a, params_dev, NULL);
}

extern "C" void model_backward_cuda_copy_out(float *dparams_dev, ModelActsCuda *a, const float *params_dev,
                                             float *grads_host) {
    if (!a->ov) {
        fprintf(stderr, "model_backward_cuda_copy_out: no overlapped copies on this workspace "
                        "(model_acts_cuda_overlap first)\n");
        exit(2);
    }
    backward_pass(dparams_dev, a, params_dev, grads_host);
}

extern "C" int model_acts_cuda_overlap(ModelActsCuda *a, cudaStream_t copy_stream, size_t min_chunk_n_bytes,
                                       char *err, size_t err_n_bytes) {
    if (a->ov) return 0;
    OverlapCuda *ov = (OverlapCuda *)calloc(1, sizeof *ov);
    if (!ov) {
        snprintf(err, err_n_bytes, "model_acts_cuda_overlap: out of host memory");
        return -1;
    }
    ov->copy = copy_stream;
    ov->n_chunks = graph_var_chunks(&a->graph, &a->spec, min_chunk_n_bytes / sizeof(float), ov->node_chunk,
                                    ov->chunk_first, ov->chunk_start, GRAPH_MAX_NODES);
    if (ov->n_chunks < 1) {
        snprintf(err, err_n_bytes, "model_acts_cuda_overlap: model %s's variables are not in node order",
                 a->spec.name ? a->spec.name : "?");
        ov->n_chunks = 0;
        overlap_free(ov);
        return -1;
    }
    int rc = CUDA_SOFT(cudaEventCreateWithFlags(&ov->ready, cudaEventDisableTiming), err, err_n_bytes);
    for (int k = 0; k < ov->n_chunks && !rc; k++)
        rc = CUDA_SOFT(cudaEventCreateWithFlags(&ov->in_ev[k], cudaEventDisableTiming), err, err_n_bytes) ||
             CUDA_SOFT(cudaEventCreateWithFlags(&ov->out_ev[k], cudaEventDisableTiming), err, err_n_bytes);
    if (rc) {
        overlap_free(ov);
        return -1;
    }
    a->ov = ov;
    return 0;
}

extern "C" int model_acts_cuda_overlap_chunks(const ModelActsCuda *a) { return a->ov ? a->ov->n_chunks : 0; }

extern "C" void model_copy_params_in_cuda_async(ModelActsCuda *a, float *params_dev, const float *params_host) {
    OverlapCuda *ov = a->ov;
    if (!ov) {
        fprintf(stderr, "model_copy_params_in_cuda_async: no overlapped copies on this workspace "
                        "(model_acts_cuda_overlap first)\n");
        exit(2);
    }
    /* The compute stream's earlier work (the last step's readers of params_dev) comes first. */
    CUDA_CHECK(cudaEventRecord(ov->ready, a->stream));
    CUDA_CHECK(cudaStreamWaitEvent(ov->copy, ov->ready, 0));
    for (int k = 0; k < ov->n_chunks; k++) {
        const size_t lo = ov->chunk_start[k], n_floats = ov->chunk_start[k + 1] - lo;
        if (n_floats)
            CUDA_CHECK(cudaMemcpyAsync(params_dev + lo, params_host + lo, n_floats * sizeof(float),
                                       cudaMemcpyHostToDevice, ov->copy));
        CUDA_CHECK(cudaEventRecord(ov->in_ev[k], ov->copy));
    }
    ov->params_pending = 1;
}

extern "C" void model_acts_cuda_set_training(ModelActsCuda *a, int training) { a->training = training != 0; }

extern "C" void model_acts_cuda_set_loss_weight(ModelActsCuda *a, float loss_weight) { a->loss_weight = loss_weight; }

extern "C" int model_acts_cuda_set_sync(ModelActsCuda *a, const ModelSync *sync, char *err, size_t err_n_bytes) {
    a->synced = 0;
    if (!sync) return 0;
    if (!a->sync_pinned) {
        int C_max = 0;
        for (int i = 0; i < a->graph.n_nodes; i++)
            if (a->graph.nodes[i].kind == NODE_BATCHNORM && a->graph.nodes[i].bn.C > C_max) C_max = a->graph.nodes[i].bn.C;
        if (CUDA_SOFT(cudaMallocHost((void **)&a->sync_pinned, sizeof(double) * (2 * (size_t)C_max + 1)), err,
                      err_n_bytes))
            return -1;
    }
    a->sync = *sync;
    a->synced = 1;
    return 0;
}

/* As model.c's update_moving_from: node i's saved buffer, or its slice of stats_dev. */
static void update_moving_from_cuda(float *params_dev, ModelActsCuda *a, const unsigned char *stats_dev) {
    for (int i = 0; i < a->graph.n_nodes; i++) {
        const Node *n = &a->graph.nodes[i];
        const LayerKindInfo *k = &model_layer_table[n->kind];
        if (!k->cuda_update) continue;
        float *w[NODE_MAX_VARS];
        for (int j = 0; j < n->n_vars; j++) w[j] = params_dev + a->spec.vars[n->var0 + j].offset;
        NodeRunCuda r = node_run(a, i, a->B, params_dev, NULL);
        k->cuda_update(n, w, stats_dev ? stats_dev : a->bufs[i].saved, &r);
        if (stats_dev) stats_dev += k->saved_n_bytes(n, a->max_batch);
    }
}

extern "C" void model_update_moving_cuda(float *params_dev, ModelActsCuda *a) {
    if (a->B < 1 || !a->forward_training) return;
    update_moving_from_cuda(params_dev, a, NULL);
}

extern "C" size_t model_moving_stats_n_bytes_cuda(const ModelActsCuda *a) {
    size_t n_bytes = 0;
    for (int i = 0; i < a->graph.n_nodes; i++) {
        const Node *n = &a->graph.nodes[i];
        if (model_layer_table[n->kind].cuda_update) n_bytes += model_layer_table[n->kind].saved_n_bytes(n, a->max_batch);
    }
    return n_bytes;
}

extern "C" int model_moving_stats_save_cuda(void *stats_dev, ModelActsCuda *a) {
    if (a->B < 1 || !a->forward_training) return 0;
    unsigned char *p = (unsigned char *)stats_dev;
    for (int i = 0; i < a->graph.n_nodes; i++) {
        const Node *n = &a->graph.nodes[i];
        if (!model_layer_table[n->kind].cuda_update) continue;
        const size_t n_bytes = model_layer_table[n->kind].saved_n_bytes(n, a->max_batch);
        CUDA_CHECK(cudaMemcpyAsync(p, a->bufs[i].saved, n_bytes, cudaMemcpyDeviceToDevice, a->stream));
        p += n_bytes;
    }
    return 1;
}

extern "C" void model_update_moving_saved_cuda(float *params_dev, ModelActsCuda *a, const void *stats_dev) {
    update_moving_from_cuda(params_dev, a, (const unsigned char *)stats_dev);
}

/* ---- per-node timing ------------------------------------------------------------------------------ */

extern "C" int model_acts_cuda_profile(ModelActsCuda *a, int on, char *err, size_t err_n_bytes) {
    if (!on) {
        prof_free(a->prof);
        a->prof = NULL;
        return 0;
    }
    if (a->prof) return 0;
    ProfCuda *p = (ProfCuda *)calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, err_n_bytes, "model_acts_cuda_profile: out of host memory");
        return -1;
    }
    for (int i = 0; i < a->graph.n_nodes; i++)
        for (int k = 0; k < 2; k++)
            if (CUDA_SOFT(cudaEventCreate(&p->fwd[i][k]), err, err_n_bytes) ||
                CUDA_SOFT(cudaEventCreate(&p->bwd[i][k]), err, err_n_bytes))
                goto fail;
    for (int j = 0; j < PROF_N_EXTRA; j++)
        for (int k = 0; k < 2; k++)
            if (CUDA_SOFT(cudaEventCreate(&p->extra[j][k]), err, err_n_bytes)) goto fail;
    a->prof = p;
    return 0;
fail:
    prof_free(p);
    return -1;
}

extern "C" int model_acts_cuda_n_nodes(const ModelActsCuda *a) { return a->graph.n_nodes; }

static const char *act_name(Activation act) { return act == ACT_RELU ? "relu" : act == ACT_RELU6 ? "relu6" : ""; }

extern "C" int model_acts_cuda_node_info(const ModelActsCuda *a, int i, ModelNodeInfoCuda *info) {
    if (i < 0 || i >= a->graph.n_nodes) return -1;
    const Node *n = &a->graph.nodes[i];
    const LayerKindInfo *k = &model_layer_table[n->kind];
    info->name = n->name;
    info->kind = k->name;
    info->act = act_name(n->kind == NODE_CONV2D ? n->conv.act
                         : n->kind == NODE_DENSE ? n->dense.act
                         : n->kind == NODE_BATCHNORM ? n->bn.act
                         : n->kind == NODE_ADD       ? n->add_act
                                                     : ACT_NONE);
    info->H = n->out.H;
    info->W = n->out.W;
    info->C = n->out.C;
    k->cuda_describe(&a->nodes[i], info->describe, sizeof info->describe);
    return 0;
}

/* Milliseconds between a pair's two events (both recorded, the end waited for). */
static float prof_elapsed_ms(cudaEvent_t const pair[2]) {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, pair[0], pair[1]));
    return ms;
}

/* -1 unless profiling is on and each wanted pass ran profiled; waits for those passes' last events. */
static int prof_ready(const ModelActsCuda *a, int want_fwd, int want_bwd) {
    const ProfCuda *p = a->prof;
    if (!p || (want_fwd && !p->fwd_done) || (want_bwd && !p->bwd_done)) return -1;
    if (want_fwd) CUDA_CHECK(cudaEventSynchronize(p->extra[PROF_FWD_PASS][1]));
    if (want_bwd) CUDA_CHECK(cudaEventSynchronize(p->extra[PROF_BWD_PASS][1]));
    return 0;
}

extern "C" int model_acts_cuda_profile_read(ModelActsCuda *a, float *fwd_ms, float *bwd_ms) {
    if (prof_ready(a, fwd_ms != NULL, bwd_ms != NULL)) return -1;
    const ProfCuda *p = a->prof;
    for (int i = 0; i < a->graph.n_nodes; i++) {
        if (fwd_ms) fwd_ms[i] = prof_elapsed_ms(p->fwd[i]);
        if (bwd_ms) bwd_ms[i] = p->bwd_ran[i] ? prof_elapsed_ms(p->bwd[i]) : 0.0f;
    }
    return 0;
}

extern "C" int model_acts_cuda_profile_read_host(ModelActsCuda *a, float *fwd_ms, float *bwd_ms) {
    const ProfCuda *p = a->prof;
    if (!p || (fwd_ms && !p->fwd_done) || (bwd_ms && !p->bwd_done)) return -1;
    for (int i = 0; i < a->graph.n_nodes; i++) {
        if (fwd_ms) fwd_ms[i] = (float)p->host_fwd_ms[i];
        if (bwd_ms) bwd_ms[i] = p->bwd_ran[i] ? (float)p->host_bwd_ms[i] : 0.0f;
    }
    return 0;
}

extern "C" int model_acts_cuda_profile_totals(ModelActsCuda *a, ModelProfileTotalsCuda *t) {
    if (prof_ready(a, 1, 1)) return -1;
    const ProfCuda *p = a->prof;
    t->forward_ms = prof_elapsed_ms(p->extra[PROF_FWD_PASS]);
    t->backward_ms = prof_elapsed_ms(p->extra[PROF_BWD_PASS]);
    t->input_ms = prof_elapsed_ms(p->extra[PROF_INPUT]);
    t->loss_forward_ms = prof_elapsed_ms(p->extra[PROF_LOSS_FWD]);
    t->loss_backward_ms = prof_elapsed_ms(p->extra[PROF_XENT_BWD]) + prof_elapsed_ms(p->extra[PROF_L2_BWD]);
    t->host_forward_ms = (float)p->host_fwd_pass_ms;
    t->host_backward_ms = (float)p->host_bwd_pass_ms;
    return 0;
}
