/* layer_table.c — THE layer table: for every kind of node (graph.h's
 * MODEL_LAYER_KINDS), its shape rule, its variables, its saved and scratch
 * sizes, its cost, its CPU forward/backward, and its CUDA twin.
 *
 * Where it sits: model/.  The CPU executor (model.c) and the CUDA executor
 * (model_cuda.cu) run every node through this table; the builders
 * (model/nets/) only set each node's settings.
 * How: each kind's functions are adaptors from the executor's NodeRun to
 * the layer functions of layers.h.  conv2d's OVERWRITES its parameter
 * gradients; the adaptor writes them into scratch and adds them
 * (grad_accumulate), so that every node follows the executor's convention:
 * parameter gradients ADDED, input gradients WRITTEN (dense's adds itself,
 * the sgemm's beta being 1).  Where the executor asks for the gradients
 * written (NodeRun.dw_write, a step's first micro-batch:
 * model_backward_write) they go straight into them.
 * The CUDA entries are weak references to <stem>_node_*_cuda, defined in
 * model_cuda.cu: they are linked in whenever the CUDA executor is, and NULL
 * in a CPU-only program, which never reads them.
 * What it does not do: allocate, keep state, or know about towers.
 */
#include "model/conv_algo.h"
#include "model/graph.h"

#include <stdio.h>
#include <string.h>

/* ---- shared helpers ---------------------------------------------------------- */

static size_t align64(size_t n_bytes) { return (n_bytes + 63) / 64 * 64; }

static NodeVar weight_var(const char *name, int ndim, const int *shape, float stddev, float wd) {
    NodeVar v = {name, ndim, {0, 0, 0, 0}, INIT_TRUNCATED_NORMAL, stddev, wd, 1};
    for (int i = 0; i < ndim; i++) v.shape[i] = shape[i];
    return v;
}

static NodeVar const_var(const char *name, int n, float value) {
    NodeVar v = {name, 1, {n, 0, 0, 0}, INIT_CONSTANT, value, 0.0f, 1};
    return v;
}

/* Keras's kernel: glorot_uniform (the limit comes from the shape at init). */
static NodeVar kernel_var(int ndim, const int *shape) {
    NodeVar v = {"kernel", ndim, {0, 0, 0, 0}, INIT_GLOROT_UNIFORM, 0.0f, 0.0f, 1};
    for (int i = 0; i < ndim; i++) v.shape[i] = shape[i];
    return v;
}

static size_t no_bytes(const Node *n, int max_batch) {
    (void)n;
    (void)max_batch;
    return 0;
}

static size_t no_scratch(const Node *n, int max_batch, int n_threads) {
    (void)n;
    (void)max_batch;
    (void)n_threads;
    return 0;
}

static int no_vars(const Node *n, NodeVar *v) {
    (void)n;
    (void)v;
    return 0;
}

static double no_macs(const Node *n) {
    (void)n;
    return 0.0;
}

/* ---- conv2d: conv + bias + activation (TensorFlow's tutorial conv layers) ------ */

static int conv2d_node_init(Node *n) {
    Conv2d *c = &n->conv;
    if (conv2d_init(c, n->in.H, n->in.W, n->in.C, c->KH, c->KW, c->C_out, c->stride_h, c->stride_w, c->padding,
                    c->act) != 0)
        return -1;
    n->out = (NodeShape){c->OH, c->OW, c->C_out};
    return 0;
}

static int conv2d_node_vars(const Node *n, NodeVar *v) {
    const Conv2d *c = &n->conv;
    int ws[4] = {c->KH, c->KW, c->C_in, c->C_out};
    v[0] = n->keras ? kernel_var(4, ws) : weight_var("weights", 4, ws, n->w_stddev, n->wd);
    if (n->no_bias) return 1;
    v[1] = const_var(n->keras ? "bias" : "biases", c->C_out, n->keras ? 0.0f : n->b_value);
    return 2;
}

/* Scratch: the parameter gradients conv2d overwrites, then conv2d_run's
 * scratch (oneDNN's weights layouts and scratchpads, or the loops'
 * per-thread buffers). */
static size_t conv2d_dw_n_floats(const Conv2d *c) { return (size_t)c->KH * c->KW * c->C_in * c->C_out; }
static size_t conv2d_grads_n_bytes(const Conv2d *c) {
    return align64(sizeof(float) * conv2d_dw_n_floats(c)) + align64(sizeof(float) * c->C_out);
}

/* conv2d_run's part of the node's scratch as given (0 when a caller did not
 * say: then the loops run, as they always fit). */
static size_t conv2d_run_bytes_given(const Conv2d *c, const NodeRun *r) {
    const size_t grads = conv2d_grads_n_bytes(c);
    return r->scratch_n_bytes > grads ? r->scratch_n_bytes - grads : 0;
}

static size_t conv2d_node_scratch_n_bytes(const Node *n, int max_batch, int n_threads) {
    return conv2d_grads_n_bytes(&n->conv) + conv2d_run_scratch_n_bytes(&n->conv, !n->no_bias, max_batch, n_threads);
}

static double conv2d_node_macs(const Node *n) {
    const Conv2d *c = &n->conv;
    return (double)c->OH * c->OW * c->C_out * c->KH * c->KW * c->C_in;
}

static void conv2d_node_forward(const Node *n, const NodeRun *r) {
    const size_t grads = conv2d_grads_n_bytes(&n->conv);
    conv2d_run_forward(r->out, (char *)r->scratch + grads, conv2d_run_bytes_given(&n->conv, r), r->in[0], r->w[0],
                       n->no_bias ? NULL : r->w[1], &n->conv, r->B, r->n_threads);
}

static void conv2d_node_backward(const Node *n, const NodeRun *r) {
    const Conv2d *c = &n->conv;
    const size_t grads = conv2d_grads_n_bytes(c);
    /* dw_write: the gradients straight into the variables' (conv2d_run_backward overwrites); else into scratch,
     * then added. */
    float *dw = r->dw_write ? r->dw[0] : (float *)r->scratch;
    float *db = r->dw_write ? r->dw[1] : (float *)((char *)r->scratch + align64(sizeof(float) * conv2d_dw_n_floats(c)));
    conv2d_run_backward(r->din[0], dw, n->no_bias ? NULL : db, (char *)r->scratch + grads,
                        conv2d_run_bytes_given(c, r), r->out, r->dout, r->in[0], r->w[0], c, r->B, r->n_threads);
    if (r->dw_write) return;
    grad_accumulate(r->dw[0], dw, conv2d_dw_n_floats(c));
    if (!n->no_bias) grad_accumulate(r->dw[1], db, (size_t)c->C_out);
}

/* The path's name; model/winograd.c's the kind it runs for the layer ("Winograd F(4x4,3x3)", ...). */
static const char *conv2d_path_name(int path, const Conv2d *c) {
    return path == CONV_CPU_WINOGRAD      ? "oneDNN Winograd"
           : path == CONV_CPU_WINOGRAD_F2 ? winograd_name(c)
           : path == CONV_CPU_FIRST       ? "direct (first layer)"
           : path == CONV_CPU_ONEDNN      ? "oneDNN direct"
                                          : "loops";
}

static void conv2d_node_describe(const Node *n, int max_batch, int n_threads, char *out, size_t out_n_bytes) {
    int path[CONV_PASS_COUNT];
    for (int p = 0; p < CONV_PASS_COUNT; p++) path[p] = conv2d_run_path(&n->conv, !n->no_bias, max_batch, n_threads, p);
    if (path[0] == path[1] && path[1] == path[2])
        snprintf(out, out_n_bytes, "%s, every pass", conv2d_path_name(path[0], &n->conv));
    else
        snprintf(out, out_n_bytes, "forward %s, backward data %s, backward weights %s",
                 conv2d_path_name(path[0], &n->conv), conv2d_path_name(path[1], &n->conv),
                 conv2d_path_name(path[2], &n->conv));
}

/* ---- max pooling ------------------------------------------------------------------ */

static int maxpool_node_init(Node *n) {
    MaxPool *p = &n->pool;
    if (maxpool_init(p, n->in.H, n->in.W, n->in.C, p->KH, p->KW, p->stride_h, p->stride_w, p->padding) != 0)
        return -1;
    n->out = (NodeShape){p->OH, p->OW, n->in.C};
    return 0;
}

static int maxpool_node_vars(const Node *n, NodeVar *v) {
    (void)n;
    (void)v;
    return 0;
}

/* The argmax of every output cell. */
static size_t maxpool_node_saved_n_bytes(const Node *n, int max_batch) {
    return sizeof(int32_t) * (size_t)max_batch * node_shape_n(n->out);
}

static void maxpool_node_forward(const Node *n, const NodeRun *r) {
    maxpool_forward(r->out, r->saved, r->in[0], &n->pool, r->B);
}

static void maxpool_node_backward(const Node *n, const NodeRun *r) {
    if (r->din[0]) maxpool_backward(r->din[0], r->saved, r->dout, &n->pool, r->B);
}

/* ---- local response normalisation ------------------------------------------------- */

static int lrn_node_init(Node *n) {
    n->out = n->in;
    return n->in.C > 0 ? 0 : -1;
}

static int lrn_node_vars(const Node *n, NodeVar *v) {
    (void)n;
    (void)v;
    return 0;
}

/* The scale of every output cell. */
static size_t lrn_node_saved_n_bytes(const Node *n, int max_batch) {
    return sizeof(float) * (size_t)max_batch * node_shape_n(n->out);
}

static void lrn_node_forward(const Node *n, const NodeRun *r) {
    lrn_forward(r->out, r->saved, r->in[0], &n->lrn, (size_t)r->B * n->out.H * n->out.W, n->out.C);
}

static void lrn_node_backward(const Node *n, const NodeRun *r) {
    if (r->din[0])
        lrn_backward(r->din[0], r->saved, r->out, r->dout, r->in[0], &n->lrn, (size_t)r->B * n->out.H * n->out.W,
                     n->out.C);
}

/* ---- fully connected (its input flattened per example, as tf.reshape) -------------- */

static int dense_node_init(Node *n) {
    size_t n_in = node_shape_n(n->in);
    if (n_in < 1 || n_in > (size_t)INT32_MAX || n->dense.n_out < 1) return -1; /* n_in is an int */
    n->dense.n_in = (int)n_in;
    n->out = (NodeShape){1, 1, n->dense.n_out};
    return 0;
}

static int dense_node_vars(const Node *n, NodeVar *v) {
    int ws[2] = {n->dense.n_in, n->dense.n_out};
    v[0] = n->keras ? kernel_var(2, ws) : weight_var("weights", 2, ws, n->w_stddev, n->wd);
    v[1] = const_var(n->keras ? "bias" : "biases", n->dense.n_out, n->keras ? 0.0f : n->b_value);
    return 2;
}

static double dense_node_macs(const Node *n) { return (double)n->dense.n_in * n->dense.n_out; }

static void dense_node_forward(const Node *n, const NodeRun *r) {
    dense_forward(r->out, r->in[0], r->w[0], r->w[1], &n->dense, r->B);
}

static void dense_node_backward(const Node *n, const NodeRun *r) {
    /* The gradients straight into the variables': written (dw_write) or added to (the sgemm's beta is 1), no
     * scratch in between (VGG16's fc1 would need 411 MB).  The pre-activation gradient overwrites dout in place
     * (the executor's buffer). */
    dense_backward(r->din[0], r->dw[0], r->dw[1], r->dout, r->out, r->dout, r->in[0], r->w[0], &n->dense, r->B,
                   !r->dw_write);
}

/* ---- batch normalisation (Keras BatchNormalization, NHWC, per channel) -------------
 * Variables in Keras's order: gamma (ones), beta (zeros), moving_mean
 * (zeros), moving_variance (ones), the last two non-trainable.  Saved:
 * the batch mean, variance and inv_std, (3, C) floats. */

static size_t bn_rows(const Node *n, int B) { return (size_t)B * n->in.H * n->in.W; }

static int batchnorm_node_init(Node *n) {
    n->bn.C = n->in.C;
    n->out = n->in;
    return n->in.C > 0 && n->bn.epsilon > 0.0f ? 0 : -1;
}

static int batchnorm_node_vars(const Node *n, NodeVar *v) {
    v[0] = const_var("gamma", n->bn.C, 1.0f);
    v[1] = const_var("beta", n->bn.C, 0.0f);
    v[2] = const_var("moving_mean", n->bn.C, 0.0f);
    v[3] = const_var("moving_variance", n->bn.C, 1.0f);
    v[2].trainable = v[3].trainable = 0;
    return 4;
}

static size_t batchnorm_node_saved_n_bytes(const Node *n, int max_batch) {
    (void)max_batch;
    return sizeof(float) * 3 * (size_t)n->bn.C;
}

/* Scratch: the one-tower forms' sums and partials, then (sync) the
 * cross-tower buffer, (2, C) sums and the row count. */
static size_t batchnorm_node_scratch_n_bytes(const Node *n, int max_batch, int n_threads) {
    (void)max_batch;
    (void)n_threads;
    return sizeof(double) * (batchnorm_scratch_n_doubles(n->bn.C) + 2 * (size_t)n->bn.C + 1);
}

/* Sync batch norm's step: this tower's sums (2, C) and row count into the
 * cross-tower buffer, summed over the towers; returns the buffer, whose
 * [2C] is the global count. */
static double *bn_sum_over_towers(const Node *n, const NodeRun *r, const double *sums) {
    const int C = n->bn.C;
    double *g = (double *)r->scratch + batchnorm_scratch_n_doubles(C);
    memcpy(g, sums, sizeof(double) * 2 * (size_t)C);
    g[2 * C] = (double)bn_rows(n, r->B);
    r->sync->sum(r->sync->ctx, g, 2 * (size_t)C + 1);
    return g;
}

static void batchnorm_node_forward(const Node *n, const NodeRun *r) {
    float *mean = r->saved, *var = mean + n->bn.C, *inv_std = var + n->bn.C;
    const size_t rows = bn_rows(n, r->B);
    if (r->training && r->sync) {
        double *sums = r->scratch, *partials = sums + 2 * (size_t)n->bn.C;
        batchnorm_sums(sums, partials, r->in[0], rows, n->bn.C);
        const double *g = bn_sum_over_towers(n, r, sums);
        batchnorm_moments(mean, var, g, g[2 * n->bn.C], n->bn.C);
        batchnorm_normalize_act(r->out, inv_std, r->in[0], mean, var, r->w[0], r->w[1], n->bn.epsilon, n->bn.act,
                                rows, n->bn.C);
    } else if (r->training)
        batchnorm_forward_train(r->out, mean, var, inv_std, r->scratch, r->in[0], r->w[0], r->w[1], &n->bn,
                                bn_rows(n, r->B));
    else
        batchnorm_forward_eval(r->out, inv_std, r->in[0], r->w[2], r->w[3], r->w[0], r->w[1], &n->bn,
                               bn_rows(n, r->B));
}

static void batchnorm_node_backward(const Node *n, const NodeRun *r) {
    const float *mean = r->saved, *inv_std = mean + 2 * n->bn.C;
    if (r->sync) { /* gamma's and beta's gradients from this tower's rows; the input's from the global sums */
        const size_t rows = bn_rows(n, r->B);
        double *dsums = r->scratch, *partials = dsums + 2 * (size_t)n->bn.C;
        batchnorm_backward_sums_act(dsums, partials, r->dout, r->in[0], mean, inv_std, r->w[0], r->w[1], n->bn.act,
                                    rows, n->bn.C);
        batchnorm_param_grads(r->dw[0], r->dw[1], dsums, n->bn.C);
        const double *g = bn_sum_over_towers(n, r, dsums);
        if (r->din[0])
            batchnorm_backward_input_act(r->din[0], r->dout, r->in[0], mean, inv_std, r->w[0], r->w[1], n->bn.act, g,
                                         g[2 * n->bn.C], rows, n->bn.C);
        return;
    }
    batchnorm_backward_act(r->din[0], r->dw[0], r->dw[1], r->scratch, r->dout, r->in[0], mean, inv_std, r->w[0],
                           r->w[1], &n->bn, bn_rows(n, r->B));
}

static void batchnorm_node_update(const Node *n, float *const *w, const void *saved) {
    const float *mean = saved, *var = mean + n->bn.C;
    batchnorm_update_moving(w[2], w[3], mean, var, n->bn.momentum, n->bn.C);
}

static double batchnorm_node_macs(const Node *n) { return 2.0 * node_shape_n(n->out); }

/* ---- depthwise convolution (Keras DepthwiseConv2D, no bias) ------------------------- */

static int depthwise_node_init(Node *n) {
    Depthwise *d = &n->dw;
    if (depthwise_init(d, n->in.H, n->in.W, n->in.C, d->KH, d->KW, d->stride, d->padding) != 0) return -1;
    n->out = (NodeShape){d->OH, d->OW, n->in.C};
    return 0;
}

static int depthwise_node_vars(const Node *n, NodeVar *v) {
    int ws[4] = {n->dw.KH, n->dw.KW, n->dw.C, 1};
    v[0] = kernel_var(4, ws); /* Keras 3's name; tf.keras 2 called it depthwise_kernel */
    return 1;
}

static size_t depthwise_node_scratch_n_bytes(const Node *n, int max_batch, int n_threads) {
    (void)max_batch;
    return sizeof(float) * depthwise_scratch_n_floats(&n->dw, n_threads);
}

static double depthwise_node_macs(const Node *n) { return (double)node_shape_n(n->out) * n->dw.KH * n->dw.KW; }

static void depthwise_node_forward(const Node *n, const NodeRun *r) {
    depthwise_forward(r->out, r->in[0], r->w[0], &n->dw, r->B);
}

static void depthwise_node_backward(const Node *n, const NodeRun *r) {
    depthwise_backward(r->din[0], r->dw[0], r->scratch, r->dout, r->in[0], r->w[0], &n->dw, r->B, r->n_threads);
}

/* ---- pointwise (1x1) convolution without bias: Keras Conv2D(k, 1, use_bias=False) --- */

static size_t pw_rows(const Node *n, int B) { return (size_t)B * n->in.H * n->in.W; }

static int pointwise_node_init(Node *n) {
    n->out = (NodeShape){n->in.H, n->in.W, n->pw_C_out};
    return n->in.C > 0 && n->pw_C_out > 0 ? 0 : -1;
}

static int pointwise_node_vars(const Node *n, NodeVar *v) {
    int ws[4] = {1, 1, n->in.C, n->pw_C_out};
    v[0] = kernel_var(4, ws);
    return 1;
}

static double pointwise_node_macs(const Node *n) { return (double)n->in.H * n->in.W * n->in.C * n->pw_C_out; }

static void pointwise_node_forward(const Node *n, const NodeRun *r) {
    pointwise_forward(r->out, r->in[0], r->w[0], pw_rows(n, r->B), n->in.C, n->pw_C_out);
}

static void pointwise_node_backward(const Node *n, const NodeRun *r) {
    pointwise_backward(r->din[0], r->dw[0], r->dout, r->in[0], r->w[0], pw_rows(n, r->B), n->in.C, n->pw_C_out);
}

/* ---- zero padding (Keras ZeroPadding2D) ---------------------------------------------- */

static int zeropad_node_init(Node *n) {
    ZeroPad *z = &n->zp;
    if (zeropad_init(z, n->in.H, n->in.W, n->in.C, z->top, z->bottom, z->left, z->right) != 0) return -1;
    n->out = (NodeShape){z->OH, z->OW, n->in.C};
    return 0;
}

static void zeropad_node_forward(const Node *n, const NodeRun *r) { zeropad_forward(r->out, r->in[0], &n->zp, r->B); }

static void zeropad_node_backward(const Node *n, const NodeRun *r) {
    if (r->din[0]) zeropad_backward(r->din[0], r->dout, &n->zp, r->B);
}

/* ---- ReLU6 (Keras ReLU(6.)) ------------------------------------------------------------ */

static int same_shape_init(Node *n) {
    n->out = n->in;
    return n->in.C > 0 ? 0 : -1;
}
#define relu6_node_init same_shape_init

static void relu6_node_forward(const Node *n, const NodeRun *r) {
    relu6_forward(r->out, r->in[0], (size_t)r->B * node_shape_n(n->out));
}

static void relu6_node_backward(const Node *n, const NodeRun *r) {
    if (r->din[0]) relu6_backward(r->din[0], r->out, r->dout, (size_t)r->B * node_shape_n(n->out));
}

/* ---- ReLU (Keras Activation("relu")) --------------------------------------------------- */

#define relu_node_init same_shape_init

static void relu_node_forward(const Node *n, const NodeRun *r) {
    relu_layer_forward(r->out, r->in[0], (size_t)r->B * node_shape_n(n->out));
}

static void relu_node_backward(const Node *n, const NodeRun *r) {
    if (r->din[0]) relu_layer_backward(r->din[0], r->out, r->dout, (size_t)r->B * node_shape_n(n->out));
}

/* ---- residual addition (Keras Add): two inputs of one shape --------------------------- */

static int add_node_init(Node *n) {
    n->out = n->in;
    return n->in.C > 0 ? 0 : -1; /* the builder checks that both inputs have this shape */
}

static void add_node_forward(const Node *n, const NodeRun *r) {
    add_act_forward(r->out, r->in[0], r->in[1], n->add_act, (size_t)r->B * node_shape_n(n->out));
}

static void add_node_backward(const Node *n, const NodeRun *r) {
    add_act_backward(r->din[0], r->din[1], r->out, r->dout, n->add_act, (size_t)r->B * node_shape_n(n->out));
}

/* ---- global average pooling (Keras GlobalAveragePooling2D) ----------------------------- */

static int gap_node_init(Node *n) {
    n->out = (NodeShape){1, 1, n->in.C};
    return n->in.C > 0 ? 0 : -1;
}

static double gap_node_macs(const Node *n) { return (double)node_shape_n(n->in); }

static void gap_node_forward(const Node *n, const NodeRun *r) {
    global_avgpool_forward(r->out, r->in[0], r->B, n->in.H * n->in.W, n->in.C);
}

static void gap_node_backward(const Node *n, const NodeRun *r) {
    if (r->din[0]) global_avgpool_backward(r->din[0], r->dout, r->B, n->in.H * n->in.W, n->in.C);
}

/* ---- the table ---------------------------------------------------------------------- */

/* What a kind does not have. */
#define conv2d_node_saved_n_bytes no_bytes
#define dense_node_scratch_n_bytes no_scratch
#define lrn_node_scratch_n_bytes no_scratch
#define lrn_node_macs no_macs
#define maxpool_node_scratch_n_bytes no_scratch
#define maxpool_node_macs no_macs
#define dense_node_saved_n_bytes no_bytes
#define depthwise_node_saved_n_bytes no_bytes
#define pointwise_node_saved_n_bytes no_bytes
#define pointwise_node_scratch_n_bytes no_scratch
#define zeropad_node_vars no_vars
#define zeropad_node_saved_n_bytes no_bytes
#define zeropad_node_scratch_n_bytes no_scratch
#define zeropad_node_macs no_macs
#define relu6_node_vars no_vars
#define relu6_node_saved_n_bytes no_bytes
#define relu6_node_scratch_n_bytes no_scratch
#define relu6_node_macs no_macs
#define relu_node_vars no_vars
#define relu_node_saved_n_bytes no_bytes
#define relu_node_scratch_n_bytes no_scratch
#define relu_node_macs no_macs
#define add_node_vars no_vars
#define add_node_saved_n_bytes no_bytes
#define add_node_scratch_n_bytes no_scratch
#define add_node_macs no_macs
#define gap_node_vars no_vars
#define gap_node_saved_n_bytes no_bytes
#define gap_node_scratch_n_bytes no_scratch
#define maxpool_node_describe NULL
#define lrn_node_describe NULL
#define dense_node_describe NULL
#define batchnorm_node_describe NULL
#define depthwise_node_describe NULL
#define pointwise_node_describe NULL
#define zeropad_node_describe NULL
#define relu6_node_describe NULL
#define relu_node_describe NULL
#define add_node_describe NULL
#define gap_node_describe NULL
#define conv2d_node_update NULL
#define maxpool_node_update NULL
#define lrn_node_update NULL
#define dense_node_update NULL
#define depthwise_node_update NULL
#define pointwise_node_update NULL
#define zeropad_node_update NULL
#define relu6_node_update NULL
#define relu_node_update NULL
#define add_node_update NULL
#define gap_node_update NULL
/* backward honours dw_write (graph.h): the two kinds with the large weight gradients, written without a memset. */
#define conv2d_node_writes_dw 1
#define dense_node_writes_dw 1
#define maxpool_node_writes_dw 0
#define lrn_node_writes_dw 0
#define batchnorm_node_writes_dw 0
#define depthwise_node_writes_dw 0
#define pointwise_node_writes_dw 0
#define zeropad_node_writes_dw 0
#define relu6_node_writes_dw 0
#define relu_node_writes_dw 0
#define add_node_writes_dw 0
#define gap_node_writes_dw 0

/* The CUDA twins: weak, so that a CPU-only program links without them. */
#define X(K, stem)                                                                                               \
    extern int stem##_node_init_cuda(struct NodeCuda *, const Node *, const struct NodeCudaEnv *, char *,       \
                                     size_t) __attribute__((weak));                                              \
    extern int stem##_node_set_batch_cuda(struct NodeCuda *, const Node *, int, const struct NodeCudaEnv *,     \
                                          char *, size_t) __attribute__((weak));                                 \
    extern void stem##_node_free_cuda(struct NodeCuda *) __attribute__((weak));                                  \
    extern size_t stem##_node_scratch_n_bytes_cuda(const struct NodeCuda *, const Node *, int)                   \
        __attribute__((weak));                                                                                   \
    extern void stem##_node_forward_cuda(const Node *, const struct NodeRunCuda *) __attribute__((weak));        \
    extern void stem##_node_backward_cuda(const Node *, const struct NodeRunCuda *) __attribute__((weak));       \
    extern void stem##_node_describe_cuda(const struct NodeCuda *, char *, size_t) __attribute__((weak));         \
    extern void stem##_node_update_cuda(const Node *, float *const *, const void *, const struct NodeRunCuda *)  \
        __attribute__((weak));
MODEL_LAYER_KINDS(X)
#undef X

const LayerKindInfo model_layer_table[NODE_KIND_COUNT] = {
#define X(K, stem)                                                                                                \
    [NODE_##K] = {#stem,                                                                                          \
                  stem##_node_init,                                                                               \
                  stem##_node_vars,                                                                               \
                  stem##_node_saved_n_bytes,                                                                      \
                  stem##_node_scratch_n_bytes,                                                                    \
                  stem##_node_macs,                                                                               \
                  stem##_node_forward,                                                                            \
                  stem##_node_backward,                                                                           \
                  stem##_node_writes_dw,                                                                          \
                  stem##_node_update,                                                                             \
                  stem##_node_describe,                                                                           \
                  stem##_node_init_cuda,                                                                          \
                  stem##_node_set_batch_cuda,                                                                     \
                  stem##_node_free_cuda,                                                                          \
                  stem##_node_scratch_n_bytes_cuda,                                                               \
                  stem##_node_forward_cuda,                                                                       \
                  stem##_node_backward_cuda,                                                                      \
                  stem##_node_describe_cuda,                                                                      \
                  stem##_node_update_cuda},
    MODEL_LAYER_KINDS(X)
#undef X
};
