/* graph.h — a network as data: a list of layer nodes (a DAG where a residual
 * needs two inputs) and THE layer table that says how each kind of node is
 * shaped, which variables it owns, and how it runs forward and backward on
 * the CPU and on the GPU.
 *
 * Where it sits: model/ only.  One builder per network (model/nets/)
 * appends nodes to a Graph; model_spec_init derives the variable table
 * (ModelSpec) from it; the CPU executor (model.c) and the CUDA executor
 * (model_cuda.cu) both build the same Graph from the ModelSpec and walk it.
 * There is no other copy of a network's plan.
 * What it does not do: allocate activations (the executors do), know about
 * towers, devices or optimizers.
 *
 * Conventions of every node (docs/models.md, "The layer graph"):
 *   - a node reads the outputs of its inputs (node indices; GRAPH_INPUT is
 *     the model's input x) and writes its own output, (B, out.H, out.W,
 *     out.C) NHWC, in a buffer the executor owns;
 *   - backward ADDS into its variables' gradients (the caller of
 *     model_backward zeroes them once per step) and WRITES its inputs'
 *     gradients; the executor sums a tensor's gradient over its consumers;
 *   - a node's variables are contiguous in the variable table, in the order
 *     its kind's `vars` entry lists them, named "<node name>/<var name>".
 */
#ifndef TOWER_MODEL_GRAPH_H
#define TOWER_MODEL_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "model/layers.h"
#include "model/model.h"

#define GRAPH_MAX_NODES 256     /* MobileNetV2 has about 150, ResNet-50 176 */
#define NODE_MAX_INPUTS 2       /* a residual addition reads two tensors */
#define NODE_MAX_VARS 4         /* batch norm: gamma, beta, moving mean, moving variance */
#define GRAPH_INPUT (-1)        /* input index meaning the model's input x */

/* THE list of layer kinds: one line per kind, X(ENUM_SUFFIX, stem).  The
 * enum below and the layer table (layer_table.c) are generated from it, and
 * each kind's functions follow the stem: <stem>_node_init, ..._vars,
 * ..._forward, ..._backward (layer_table.c) and <stem>_node_*_cuda
 * (model_cuda.cu).  A new layer is one line here plus those functions. */
#define MODEL_LAYER_KINDS(X) \
    X(CONV2D, conv2d)        \
    X(MAXPOOL, maxpool)      \
    X(LRN, lrn)              \
    X(DENSE, dense)          \
    X(BATCHNORM, batchnorm)  \
    X(DEPTHWISE, depthwise)  \
    X(POINTWISE, pointwise)  \
    X(ZEROPAD, zeropad)      \
    X(RELU6, relu6)          \
    X(RELU, relu)            \
    X(ADD, add)              \
    X(GAP, gap)

typedef enum {
#define X(K, stem) NODE_##K,
    MODEL_LAYER_KINDS(X)
#undef X
    NODE_KIND_COUNT
} NodeKind;

typedef struct {
    int H, W, C;            /* one example's tensor (H, W, C); a flat vector is (1, 1, n) */
} NodeShape;

/* A variable as a node declares it (the spec adds the node's name and its offset). */
typedef struct {
    const char *name;       /* "weights", "gamma", ... (static string) */
    int ndim;
    int shape[4];           /* TensorFlow's layout */
    InitKind init;
    float init_value;       /* stddev or constant */
    float wd;               /* weight decay, 0 = none */
    int trainable;          /* 0: updated by the executor (moving statistics), no gradient */
} NodeVar;

typedef struct {
    NodeKind kind;
    char name[48];                  /* TensorFlow's scope or Keras's layer name (+ "/<var>" < MODEL_VAR_NAME_MAX) */
    int n_inputs;
    int inputs[NODE_MAX_INPUTS];    /* node indices (< this node's) or GRAPH_INPUT */
    NodeShape in, out;              /* in: inputs[0]'s shape; out: derived by the kind's init */
    /* Per-kind settings, written by the builder, completed by init: */
    Conv2d conv;                    /* CONV2D: C_out, KH, KW, strides, padding, act from the builder */
    MaxPool pool;                   /* MAXPOOL: KH, KW, strides, padding */
    Lrn lrn;                        /* LRN */
    Dense dense;                    /* DENSE: n_out, act */
    BatchNorm bn;                   /* BATCHNORM: momentum, epsilon (C from the input) */
    Depthwise dw;                   /* DEPTHWISE: KH, KW, stride, padding */
    ZeroPad zp;                     /* ZEROPAD: top, bottom, left, right */
    Activation add_act;             /* ADD: an activation fused after the sum (graph_fuse), ACT_NONE from the builder */
    int pw_C_out;                   /* POINTWISE: output channels */
    float w_stddev, b_value, wd;    /* CONV2D/DENSE: initializers of weights and biases, weights' decay */
    int keras;                      /* CONV2D/DENSE: Keras's variables ("kernel" glorot_uniform, "bias"
                                       zeros) instead of the tutorial's ("weights", "biases") */
    int no_bias;                    /* CONV2D: no bias variable (Keras's use_bias=False) */
    /* Filled by graph_build: */
    int var0, n_vars;               /* its variables: ModelSpec.vars[var0 .. var0 + n_vars) */
    int grad_wanted;                /* 1: this node or one upstream of it has a trainable variable, so the
                                       gradient of its output is needed; 0: the executors' backward skips
                                       the node and no consumer writes its gradient (resnet50's conv1_pad;
                                       the input gradient of a first convolution) */
} Node;

typedef struct {
    int n_nodes;
    Node nodes[GRAPH_MAX_NODES];
    Node spare;                     /* what graph_add returns once the graph has failed: written, never read */
    NodeShape input;                /* the model's input (H, W, C) */
    int output;                     /* the node whose output is the logits (B, num_classes) */
    int shared;                     /* graph_build: 1 if some tensor feeds several nodes (the
                                       executors then need scratch to sum its gradient) */
    int ok;                         /* 0 once a node could not take its input */
} Graph;

/* Floats in one example's tensor of shape s. */
static inline size_t node_shape_n(NodeShape s) { return (size_t)s.H * s.W * s.C; }

/* ---- building ------------------------------------------------------------- */

/* Start an empty graph on (H, W, C) inputs. */
void graph_begin(Graph *g, int H, int W, int C);

/* Append a node of `kind` named `name` reading `in0` (and `in1` if not
 * GRAPH_NONE for two-input kinds); returns it for the builder to fill its
 * settings, then calls graph_node_done.  On a full graph or a bad input
 * index, clears g->ok and returns g->spare. */
#define GRAPH_NONE (-2)
Node *graph_add(Graph *g, NodeKind kind, const char *name, int in0, int in1);

/* Run the kind's init on the last node added (derives its output shape);
 * returns its index, or clears g->ok and returns the index anyway. */
int graph_node_done(Graph *g);

/* Index of the last node added (the usual input of the next), or GRAPH_INPUT. */
static inline int graph_last(const Graph *g) { return g->n_nodes ? g->n_nodes - 1 : GRAPH_INPUT; }

/* Whether the gradient of input `in` (a node index or GRAPH_INPUT) is wanted:
 * a node whose grad_wanted is set; never the model's input. */
static inline int graph_grad_wanted(const Graph *g, int in) { return in != GRAPH_INPUT && g->nodes[in].grad_wanted; }

/* Shape of node i's output (i = GRAPH_INPUT: the model's input). */
NodeShape graph_shape(const Graph *g, int i);

/* ---- the networks ------------------------------------------------------------- */

/* A builder appends its network to g (begun on the input shape); it sets
 * g->output.  Returns 0, or -1 (with g->ok cleared) when the input cannot
 * be taken. */
typedef int (*NetBuilder)(Graph *g, const ModelSpec *spec);

int net_mnist(Graph *g, const ModelSpec *spec);        /* model/nets/mnist.c */
int net_cifar10(Graph *g, const ModelSpec *spec);      /* model/nets/cifar10.c */
int net_mobilenet_v2(Graph *g, const ModelSpec *spec); /* model/nets/mobilenet_v2.c */
int net_vgg11(Graph *g, const ModelSpec *spec);        /* model/nets/vgg.c */
int net_vgg16(Graph *g, const ModelSpec *spec);        /* model/nets/vgg.c */
int net_resnet20(Graph *g, const ModelSpec *spec);     /* model/nets/resnet.c */
int net_resnet50(Graph *g, const ModelSpec *spec);     /* model/nets/resnet.c */

/* A network's entry in THE table of networks (model/nets/nets.c). */
typedef struct {
    const char *name;          /* --model's value: "mnist", ... */
    NetBuilder build;
    ModelInputFacts facts;     /* what model_input_facts says of it */
    const char *input_rule;    /* the end of "model X cannot take input HxWxC: <rule>" */
    unsigned opts_used;        /* MODEL_OPT_* the builder reads; the others are reset to their defaults */
} NetInfo;

#define MODEL_OPT_WIDTH 1u     /* ModelOptions.width_multiplier */
#define MODEL_OPT_HEAD 2u      /* ModelOptions.head */
#define MODEL_OPT_FC_WIDTH 4u  /* ModelOptions.fc_width */

extern const NetInfo model_nets[MODEL_N_KINDS];

/* The entry called name, or NULL. */
const NetInfo *model_net_find(const char *name);

/* "mnist, cifar10, or mobilenet_v2": every name in the table, for messages. */
void model_net_names(char *out, size_t out_n_bytes);

/* Build the network spec->kind (spec: kind, H, W, C, num_classes, opts; the
 * variable table is not read) into g, and give each node
 * its variables' place in the table (var0, n_vars: node order, then each
 * kind's vars order).  Returns 0, or -1 (g->ok cleared) when the network
 * cannot take the input or has more than MODEL_MAX_VARS variables. */
int graph_build(Graph *g, const ModelSpec *spec);

/* ---- fusion ------------------------------------------------------------------- */

/* Rewrite a built graph (graph_build) for the executors, in place:
 *   - a BATCHNORM whose only consumer is a RELU6 or RELU absorbs it
 *     (bn.act = ACT_RELU6 / ACT_RELU): one pass over memory forward and
 *     one fewer backward instead of a separate activation node;
 *   - an ADD whose only consumer is a RELU or RELU6 absorbs it likewise
 *     (add_act: ResNet's "*_add" + "*_out"), and the activation's output
 *     buffer and its gradient's are never made;
 *   - a ZEROPAD whose only consumer is a VALID DEPTHWISE (Keras's
 *     ZeroPadding2D before a stride-2 depthwise) is folded into it as
 *     implicit padding (dw.H, dw.W the unpadded input, dw.pad_top and
 *     dw.pad_left the pad's top and left; OH, OW unchanged), so the padded
 *     copy is never made.
 * The absorbed nodes own no variables, so every node keeps its var0 and
 * n_vars and the variable table (names, order) is unchanged; consumers of
 * an absorbed node read the node that absorbed it.  Both executors
 * (model.c, model_cuda.cu) call it after graph_build; model_spec_init and
 * the tests of the network tables see the unfused graph.  Returns the
 * number of nodes removed. */
int graph_fuse(Graph *g);

/* The variable block cut at node boundaries into chunks copied to and from
 * a GPU one at a time, so a layer's forward can start once its chunk has
 * arrived and a chunk's gradients can leave once backward has passed its
 * first node (TOWER_GPU_OVERLAP, docs/gpu.md).  Walking the nodes in
 * order, a node with variables opens a new chunk when the current one
 * already spans min_n_floats, or when its own variables do (a large layer
 * starts its own chunk: mnist's local3, 12.8 MB after 0.2 MB of
 * convolutions, then arrives while the convolutions run and leaves while
 * their backward runs); chunk 0 opens at the first node with variables,
 * and nodes without variables belong to the current chunk (chunk 0 before
 * any).  So every chunk but the last spans min_n_floats or is followed by
 * a chunk whose first node alone does.  Writes, for n chunks:
 *   node_chunk  (g->n_nodes)  each node's chunk
 *   chunk_first (max_chunks)  the first node with variables of each chunk
 *                             (-1 for a network without variables)
 *   chunk_start (max_chunks + 1) each chunk's first float in the block;
 *                             chunk_start[0] = 0, chunk_start[n] = n_params,
 *                             so the chunks cover the block, gaps included.
 * Returns n (>= 1), or -1 when more than max_chunks are needed or the
 * variables are not in node order in the block. */
int graph_var_chunks(const Graph *g, const ModelSpec *s, size_t min_n_floats, int *node_chunk, int *chunk_first,
                     size_t *chunk_start, int max_chunks);

/* One line of the nodes an executor says something of: "name: what | name: what ...", what being
 * describe(ctx, i, ...)'s line for node i (nodes whose line is "" are left out); "" when none.  A line longer
 * than out ends in " | ... (cut: the buffer is full)". */
void graph_describe(const Graph *g, void (*describe)(const void *ctx, int i, char *out, size_t out_n_bytes),
                    const void *ctx, char *out, size_t out_n_bytes);

/* ---- the layer table ---------------------------------------------------------- */

/* What the CPU executor hands a node's forward/backward. */
typedef struct {
    int B;                              /* examples in the batch */
    int n_threads;                      /* the OpenMP threads scratch is sized for */
    int training;                       /* 1: training forward (batch statistics, dropout) */
    const ModelSync *sync;              /* training: batch norm's cross-tower sums (model_acts_set_sync); NULL: none */
    const float *in[NODE_MAX_INPUTS];   /* (B, in shape) each */
    float *out;                         /* (B, out shape): forward writes; backward reads */
    void *saved;                        /* saved_n_bytes(node, max_batch) of this node's own */
    void *scratch;                      /* shared: max over nodes of scratch_n_bytes */
    size_t scratch_n_bytes;             /* its size (at least this node's scratch_n_bytes at max_batch) */
    const float *w[NODE_MAX_VARS];      /* the node's variables, in its vars order */
    float *dw[NODE_MAX_VARS];           /* their gradients: backward ADDS (WRITES when dw_write) */
    int dw_write;                       /* 1: backward WRITES dw (only kinds whose writes_dw is 1 are given it) */
    float *dout;                        /* (B, out shape): the gradient of out; backward may clobber it */
    float *din[NODE_MAX_INPUTS];        /* (B, in shape): backward WRITES; NULL = not wanted */
} NodeRun;

struct NodeCuda;     /* model_cuda.cu: a node's GPU state (cuDNN descriptors, ...) */
struct NodeRunCuda;  /* model_cuda.cu: what the CUDA executor hands a node */
struct NodeCudaEnv;  /* model_cuda.cu: handles, stream, options at workspace creation */

typedef struct {
    const char *name;
    /* Derive n->out (and the kind's geometry) from n->in; 0, or -1 if it cannot take it. */
    int (*init)(Node *n);
    /* Fill v[0 .. count) with the node's variables; returns count <= NODE_MAX_VARS. */
    int (*vars)(const Node *n, NodeVar *v);
    /* Bytes this node saves for backward beyond its output, for max_batch examples. */
    size_t (*saved_n_bytes)(const Node *n, int max_batch);
    /* Bytes of scratch (shared between nodes) forward/backward need on the CPU. */
    size_t (*scratch_n_bytes)(const Node *n, int max_batch, int n_threads);
    /* Multiply-adds of one example's forward pass. */
    double (*macs)(const Node *n);
    void (*forward)(const Node *n, const NodeRun *r);
    void (*backward)(const Node *n, const NodeRun *r);
    /* 1: backward honours NodeRun.dw_write (writes its variables' gradients straight, no scratch and no add);
     * 0: the executor zeroes them first where it wants them written (model_backward_write). */
    int writes_dw;
    /* After a training forward: update the node's non-trainable variables
     * w (writable) from what it saved; NULL for kinds without any. */
    void (*update)(const Node *n, float *const *w, const void *saved);
    /* One line on how the CPU runs the node at max_batch on n_threads (conv2d: each pass's path: oneDNN's
     * Winograd or direct kernels, or the loops); NULL for kinds with nothing to choose. */
    void (*describe)(const Node *n, int max_batch, int n_threads, char *out, size_t out_n_bytes);
    /* The CUDA twin (model_cuda.cu defines these; NULL in a build without it).
     * init: descriptors for max_batch; set_batch: describe batch B (host-only);
     * scratch: device bytes shared between nodes; describe: one line or "". */
    int (*cuda_init)(struct NodeCuda *c, const Node *n, const struct NodeCudaEnv *env, char *err,
                     size_t err_n_bytes);
    int (*cuda_set_batch)(struct NodeCuda *c, const Node *n, int B, const struct NodeCudaEnv *env, char *err,
                          size_t err_n_bytes);
    void (*cuda_free)(struct NodeCuda *c);
    size_t (*cuda_scratch_n_bytes)(const struct NodeCuda *c, const Node *n, int max_batch);
    void (*cuda_forward)(const Node *n, const struct NodeRunCuda *r);
    void (*cuda_backward)(const Node *n, const struct NodeRunCuda *r);
    void (*cuda_describe)(const struct NodeCuda *c, char *out, size_t out_n_bytes);
    void (*cuda_update)(const Node *n, float *const *w, const void *saved, const struct NodeRunCuda *r);
} LayerKindInfo;

/* THE layer table, indexed by NodeKind (layer_table.c). */
extern const LayerKindInfo model_layer_table[NODE_KIND_COUNT];

#endif
