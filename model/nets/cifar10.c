/* cifar10.c — TensorFlow's cifar10.py inference() as a layer graph, layer
 * for layer: conv1, pool1, norm1, conv2, norm2, pool2, local3 384, local4
 * 192 (both with weight decay 0.004), softmax_linear.  TensorFlow's scope
 * names, which the variable names, checkpoints and exports carry.
 *
 * Where it sits: model/nets/; graph_build calls it for --model cifar10.
 * What it does not do: run anything (the executors do).
 */
#include "model/graph.h"

static int conv(Graph *g, const char *name, int C_out, float w_stddev, float b_value) {
    Node *n = graph_add(g, NODE_CONV2D, name, graph_last(g), GRAPH_NONE);
    n->conv = (Conv2d){.KH = 5, .KW = 5, .C_out = C_out, .stride_h = 1, .stride_w = 1, .padding = PAD_SAME,
                       .act = ACT_RELU};
    n->w_stddev = w_stddev;
    n->b_value = b_value;
    return graph_node_done(g);
}

/* 3x3 windows, stride 2, SAME. */
static int pool(Graph *g, const char *name) {
    Node *n = graph_add(g, NODE_MAXPOOL, name, graph_last(g), GRAPH_NONE);
    n->pool = (MaxPool){.KH = 3, .KW = 3, .stride_h = 2, .stride_w = 2, .padding = PAD_SAME};
    return graph_node_done(g);
}

/* tf.nn.lrn(x, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75). */
static int lrn(Graph *g, const char *name) {
    Node *n = graph_add(g, NODE_LRN, name, graph_last(g), GRAPH_NONE);
    n->lrn = (Lrn){.depth_radius = 4, .bias = 1.0f, .alpha = (float)(0.001 / 9.0), .beta = 0.75f};
    return graph_node_done(g);
}

static int dense(Graph *g, const char *name, int n_out, Activation act, float w_stddev, float b_value, float wd) {
    Node *n = graph_add(g, NODE_DENSE, name, graph_last(g), GRAPH_NONE);
    n->dense = (Dense){.n_out = n_out, .act = act};
    n->w_stddev = w_stddev;
    n->b_value = b_value;
    n->wd = wd;
    return graph_node_done(g);
}

int net_cifar10(Graph *g, const ModelSpec *spec) {
    const int num_classes = spec->num_classes;
    conv(g, "conv1", 64, 5e-2f, 0.0f);
    pool(g, "pool1");
    lrn(g, "norm1");
    conv(g, "conv2", 64, 5e-2f, 0.1f);
    lrn(g, "norm2");
    pool(g, "pool2");
    dense(g, "local3", 384, ACT_RELU, 0.04f, 0.1f, 0.004f);
    dense(g, "local4", 192, ACT_RELU, 0.04f, 0.1f, 0.004f);
    g->output = dense(g, "softmax_linear", num_classes, ACT_NONE, 1.0f / 192.0f, 0.0f, 0.0f);
    return g->ok ? 0 : -1;
}
