/* mobilenet_v2.c — tf.keras.applications.MobileNetV2 as a layer graph, with
 * Keras's layer names (so exported weights load into Keras by name):
 * Conv1 (3x3 stride 2 SAME, no bias) + bn_Conv1 + Conv1_relu; 17 inverted
 * residual blocks (expanded_conv_, block_1_ ... block_16_: 1x1 expand +
 * BN + ReLU6 except block 0, ZeroPadding2D(correct_pad) before a stride-2
 * depthwise 3x3 VALID, or depthwise 3x3 SAME at stride 1, + BN + ReLU6,
 * 1x1 project + BN, Add where stride 1 and in == out channels); Conv_1
 * (1x1, 1280, or _make_divisible(1280 * alpha, 8) when alpha > 1) +
 * Conv_1_bn + out_relu; then the head: Keras's (GlobalAveragePooling2D,
 * `predictions` Dense num_classes; softmax is the loss's) or the seed's
 * (GlobalAveragePooling2D, `dense` 512 relu, `dense_1` num_classes).
 * Batch norm: momentum 0.999, epsilon 1e-3.  Width: spec->opts.width_multiplier
 * (Keras's alpha).  Input: at least 32x32, 1 or 3 channels.
 *
 * Where it sits: model/nets/; graph_build calls it for --model mobilenet_v2.
 * What it does not do: run anything (the executors do), or include Keras's
 * input rescaling (the data pipeline's business).
 */
#include "model/graph.h"

#include <stdio.h>

/* Keras's _make_divisible(v, divisor=8): round to the nearest multiple of
 * 8, at least 8, and never more than 10% below v. */
static int make_divisible(double v, int divisor) {
    int new_v = (int)(v + divisor / 2.0) / divisor * divisor;
    if (new_v < divisor) new_v = divisor;
    if (new_v < 0.9 * v) new_v += divisor;
    return new_v;
}

static int bn(Graph *g, const char *name, int in) {
    Node *n = graph_add(g, NODE_BATCHNORM, name, in, GRAPH_NONE);
    n->bn.momentum = 0.999;
    n->bn.epsilon = 1e-3f;
    return graph_node_done(g);
}

static int relu6(Graph *g, const char *name, int in) {
    graph_add(g, NODE_RELU6, name, in, GRAPH_NONE);
    return graph_node_done(g);
}

static int pointwise(Graph *g, const char *name, int in, int C_out) {
    Node *n = graph_add(g, NODE_POINTWISE, name, in, GRAPH_NONE);
    n->pw_C_out = C_out;
    return graph_node_done(g);
}

static int dense(Graph *g, const char *name, int in, int n_out, Activation act) {
    Node *n = graph_add(g, NODE_DENSE, name, in, GRAPH_NONE);
    n->dense = (Dense){.n_out = n_out, .act = act};
    n->keras = 1;
    return graph_node_done(g);
}

/* Keras's _inverted_res_block. */
static int inverted_res_block(Graph *g, int in, int expansion, int stride, double alpha, int filters, int block_id) {
    char prefix[24], name[48];
    const int in_channels = graph_shape(g, in).C;
    const int pointwise_filters = make_divisible((int)(filters * alpha), 8);
    int x = in;
    if (block_id) {
        snprintf(prefix, sizeof prefix, "block_%d_", block_id);
        snprintf(name, sizeof name, "%sexpand", prefix);
        x = pointwise(g, name, x, expansion * in_channels);
        snprintf(name, sizeof name, "%sexpand_BN", prefix);
        x = bn(g, name, x);
        snprintf(name, sizeof name, "%sexpand_relu", prefix);
        x = relu6(g, name, x);
    } else {
        snprintf(prefix, sizeof prefix, "expanded_conv_");
    }
    if (stride == 2) {
        snprintf(name, sizeof name, "%spad", prefix);
        NodeShape s = graph_shape(g, x);
        Node *n = graph_add(g, NODE_ZEROPAD, name, x, GRAPH_NONE);
        keras_correct_pad(&n->zp.top, &n->zp.bottom, &n->zp.left, &n->zp.right, s.H, s.W, 3);
        x = graph_node_done(g);
    }
    snprintf(name, sizeof name, "%sdepthwise", prefix);
    Node *d = graph_add(g, NODE_DEPTHWISE, name, x, GRAPH_NONE);
    d->dw = (Depthwise){.KH = 3, .KW = 3, .stride = stride, .padding = stride == 1 ? PAD_SAME : PAD_VALID};
    x = graph_node_done(g);
    snprintf(name, sizeof name, "%sdepthwise_BN", prefix);
    x = bn(g, name, x);
    snprintf(name, sizeof name, "%sdepthwise_relu", prefix);
    x = relu6(g, name, x);
    snprintf(name, sizeof name, "%sproject", prefix);
    x = pointwise(g, name, x, pointwise_filters);
    snprintf(name, sizeof name, "%sproject_BN", prefix);
    x = bn(g, name, x);
    if (in_channels == pointwise_filters && stride == 1) {
        snprintf(name, sizeof name, "%sadd", prefix);
        graph_add(g, NODE_ADD, name, in, x);
        x = graph_node_done(g);
    }
    return x;
}

int net_mobilenet_v2(Graph *g, const ModelSpec *spec) {
    const double alpha = spec->opts.width_multiplier > 0.0f ? spec->opts.width_multiplier : 1.0;
    if (spec->H < 32 || spec->W < 32 || (spec->C != 1 && spec->C != 3)) {
        g->ok = 0;
        return -1;
    }
    Node *n = graph_add(g, NODE_CONV2D, "Conv1", GRAPH_INPUT, GRAPH_NONE);
    n->conv = (Conv2d){.KH = 3, .KW = 3, .C_out = make_divisible(32 * alpha, 8), .stride_h = 2, .stride_w = 2,
                       .padding = PAD_SAME, .act = ACT_NONE};
    n->keras = 1;
    n->no_bias = 1;
    int x = graph_node_done(g);
    x = bn(g, "bn_Conv1", x);
    x = relu6(g, "Conv1_relu", x);
    /* (expansion, filters, repeats, first stride), Keras's table. */
    static const int blocks[7][4] = {{1, 16, 1, 1},  {6, 24, 2, 2},  {6, 32, 3, 2},  {6, 64, 4, 2},
                                     {6, 96, 3, 1},  {6, 160, 3, 2}, {6, 320, 1, 1}};
    int block_id = 0;
    for (int b = 0; b < 7; b++)
        for (int r = 0; r < blocks[b][2]; r++, block_id++)
            x = inverted_res_block(g, x, blocks[b][0], r == 0 ? blocks[b][3] : 1, alpha, blocks[b][1], block_id);
    const int last = alpha > 1.0 ? make_divisible(1280 * alpha, 8) : 1280;
    x = pointwise(g, "Conv_1", x, last);
    x = bn(g, "Conv_1_bn", x);
    x = relu6(g, "out_relu", x);
    graph_add(g, NODE_GAP, "global_average_pooling2d", x, GRAPH_NONE);
    x = graph_node_done(g);
    if (spec->opts.head == MODEL_HEAD_SEED) {
        x = dense(g, "dense", x, 512, ACT_RELU);
        x = dense(g, "dense_1", x, spec->num_classes, ACT_NONE);
    } else {
        x = dense(g, "predictions", x, spec->num_classes, ACT_NONE);
    }
    g->output = x;
    return g->ok ? 0 : -1;
}
