/* layer_table.c — THE layer table: for every kind of node (graph.h's
 * MODEL_LAYER_KINDS), its shape rule, its variables, its saved and scratch
 * sizes, its cost, its CPU forward/backward, and its CUDA twin.
 *
 * Where it sits: model/.  The CPU executor (model.c) and the CUDA executor
 * (model_cuda.cu) run every node through this table; the builders
 * (model/nets/) only set each node's settings.
 * How: each kind's functions are adaptors from the executor's NodeRun to
 * the layer functions of layers.h.  Those functions OVERWRITE their
 * parameter gradients (conv2d, dense); the adaptors write them into scratch
 * and add them (grad_accumulate), so that every node follows the executor's
 * convention: parameter gradients ADDED, input gradients WRITTEN.
 * The CUDA entries are weak references to <stem>_node_*_cuda, defined in
 * model_cuda.cu: they are linked in whenever the CUDA executor is, and NULL
 * in a CPU-only program, which never reads them.
 * What it does not do: allocate, keep state, or know about towers.
 */
#include "model/graph.h"

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
    v[0] = weight_var("weights", 4, ws, n->w_stddev, n->wd);
    v[1] = const_var("biases", c->C_out, n->b_value);
    return 2;
}

/* Scratch: conv2d's per-thread scratch, then the parameter gradients it overwrites. */
static size_t conv2d_dw_n_floats(const Conv2d *c) { return (size_t)c->KH * c->KW * c->C_in * c->C_out; }

static size_t conv2d_node_scratch_n_bytes(const Node *n, int max_batch, int n_threads) {
    (void)max_batch;
    return align64(sizeof(float) * conv2d_scratch_n_floats(&n->conv, n_threads)) +
           align64(sizeof(float) * conv2d_dw_n_floats(&n->conv)) + align64(sizeof(float) * n->conv.C_out);
}

static double conv2d_node_macs(const Node *n) {
    const Conv2d *c = &n->conv;
    return (double)c->OH * c->OW * c->C_out * c->KH * c->KW * c->C_in;
}

static void conv2d_node_forward(const Node *n, const NodeRun *r) {
    conv2d_forward(r->out, r->scratch, r->in[0], r->w[0], r->w[1], &n->conv, r->B, r->n_threads);
}

static void conv2d_node_backward(const Node *n, const NodeRun *r) {
    const Conv2d *c = &n->conv;
    char *s = r->scratch;
    float *dw = (float *)(s + align64(sizeof(float) * conv2d_scratch_n_floats(c, r->n_threads)));
    float *db = (float *)((char *)dw + align64(sizeof(float) * conv2d_dw_n_floats(c)));
    conv2d_backward(r->din[0], dw, db, r->scratch, r->out, r->dout, r->in[0], r->w[0], c, r->B, r->n_threads);
    grad_accumulate(r->dw[0], dw, conv2d_dw_n_floats(c));
    grad_accumulate(r->dw[1], db, (size_t)c->C_out);
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
    v[0] = weight_var("weights", 2, ws, n->w_stddev, n->wd);
    v[1] = const_var("biases", n->dense.n_out, n->b_value);
    return 2;
}

static size_t dense_node_scratch_n_bytes(const Node *n, int max_batch, int n_threads) {
    (void)max_batch;
    (void)n_threads;
    return align64(sizeof(float) * (size_t)n->dense.n_in * n->dense.n_out) +
           align64(sizeof(float) * (size_t)n->dense.n_out);
}

static double dense_node_macs(const Node *n) { return (double)n->dense.n_in * n->dense.n_out; }

static void dense_node_forward(const Node *n, const NodeRun *r) {
    dense_forward(r->out, r->in[0], r->w[0], r->w[1], &n->dense, r->B);
}

static void dense_node_backward(const Node *n, const NodeRun *r) {
    const Dense *d = &n->dense;
    const size_t n_w = (size_t)d->n_in * d->n_out;
    float *dw = r->scratch, *db = (float *)((char *)r->scratch + align64(sizeof(float) * n_w));
    /* The pre-activation gradient overwrites dout in place (the executor's buffer). */
    dense_backward(r->din[0], dw, db, r->dout, r->out, r->dout, r->in[0], r->w[0], d, r->B);
    grad_accumulate(r->dw[0], dw, n_w);
    grad_accumulate(r->dw[1], db, (size_t)d->n_out);
}

/* ---- the table ---------------------------------------------------------------------- */

#define conv2d_node_saved_n_bytes no_bytes
#define lrn_node_scratch_n_bytes no_scratch
#define lrn_node_macs no_macs
#define maxpool_node_scratch_n_bytes no_scratch
#define maxpool_node_macs no_macs
#define dense_node_saved_n_bytes no_bytes

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
    extern void stem##_node_describe_cuda(const struct NodeCuda *, char *, size_t) __attribute__((weak));
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
                  stem##_node_init_cuda,                                                                          \
                  stem##_node_set_batch_cuda,                                                                     \
                  stem##_node_free_cuda,                                                                          \
                  stem##_node_scratch_n_bytes_cuda,                                                               \
                  stem##_node_forward_cuda,                                                                       \
                  stem##_node_backward_cuda,                                                                      \
                  stem##_node_describe_cuda},
    MODEL_LAYER_KINDS(X)
#undef X
};
