/* mnist.c — the classic multi-GPU MNIST network (TensorFlow's cifar10.py initializers) as
 * a layer graph: conv1 5x5x32, pool1, conv2 5x5x64, pool2, local3 1024,
 * local4 10, softmax_linear.  TensorFlow's scope names, which the variable
 * names (conv1/weights, ...), checkpoints and exports carry.
 *
 * Where it sits: model/nets/; graph_build calls it for --model mnist.
 * What it does not do: run anything (the executors do).
 */
#include "model/graph.h"

/* conv (5x5, stride 1, SAME, relu) with its initializers. */
static int conv(Graph *g, const char *name, int C_out, float w_stddev, float b_value) {
    Node *n = graph_add(g, NODE_CONV2D, name, graph_last(g), GRAPH_NONE);
    n->conv = (Conv2d){.KH = 5, .KW = 5, .C_out = C_out, .stride_h = 1, .stride_w = 1, .padding = PAD_SAME,
                       .act = ACT_RELU};
    n->w_stddev = w_stddev;
    n->b_value = b_value;
    return graph_node_done(g);
}

static int pool(Graph *g, const char *name, int k, int stride) {
    Node *n = graph_add(g, NODE_MAXPOOL, name, graph_last(g), GRAPH_NONE);
    n->pool = (MaxPool){.KH = k, .KW = k, .stride_h = stride, .stride_w = stride, .padding = PAD_SAME};
    return graph_node_done(g);
}

static int dense(Graph *g, const char *name, int n_out, Activation act, float w_stddev, float b_value) {
    Node *n = graph_add(g, NODE_DENSE, name, graph_last(g), GRAPH_NONE);
    n->dense = (Dense){.n_out = n_out, .act = act};
    n->w_stddev = w_stddev;
    n->b_value = b_value;
    return graph_node_done(g);
}

/* local4 is 10 wide as in the original, whatever num_classes is. */
int net_mnist(Graph *g, const ModelSpec *spec) {
    const int num_classes = spec->num_classes;
    conv(g, "conv1", 32, 5e-2f, 0.0f);
    pool(g, "pool1", 2, 2);
    conv(g, "conv2", 64, 5e-2f, 0.1f);
    pool(g, "pool2", 2, 2);
    dense(g, "local3", 1024, ACT_RELU, 0.04f, 0.1f);
    dense(g, "local4", 10, ACT_RELU, 0.04f, 0.1f);
    g->output = dense(g, "softmax_linear", num_classes, ACT_NONE, 1.0f / 192.0f, 0.0f);
    return g->ok ? 0 : -1;
}
