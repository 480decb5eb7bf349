/* resnet.c — residual networks (He et al.) as layer graphs, with the layer
 * names of tf.keras.applications.ResNet50 (keras/src/applications/resnet.py,
 * residual_block_v1 and stack_residual_blocks_v1):
 *   resnet50: conv1_pad (ZeroPadding2D 3), conv1_conv (7x7 stride 2 VALID,
 *     64, with bias), conv1_bn, conv1_relu, pool1_pad (ZeroPadding2D 1),
 *     pool1_pool (MaxPooling2D 3x3 stride 2 VALID); stages conv2 .. conv5 of
 *     3, 4, 6, 3 bottleneck blocks (64, 128, 256, 512 filters, 4x as many
 *     out; the stride, 1 in conv2 and 2 after, on the block's first 1x1
 *     conv as Keras's v1 does), each block <stage>_block<i>_: in block 1 the
 *     projection shortcut _0_conv (1x1, stride) + _0_bn, then _1_conv (1x1)
 *     _1_bn _1_relu, _2_conv (3x3 SAME) _2_bn _2_relu, _3_conv (1x1) _3_bn,
 *     _add (shortcut + main), _out (ReLU); avg_pool (GlobalAveragePooling2D)
 *     and predictions (Dense num_classes; the softmax is the loss's).
 *   resnet20: the CIFAR ResNet of He et al. (section 4.2: 6n + 2 layers,
 *     n = 3) in the same naming: conv1_conv (3x3 SAME, 16, with bias),
 *     conv1_bn, conv1_relu; stages conv2, conv3, conv4 of 3 basic blocks
 *     (16, 32, 64 filters; stride 2 on the first 3x3 conv of conv3 and
 *     conv4's block 1): _1_conv (3x3, stride) _1_bn _1_relu, _2_conv (3x3)
 *     _2_bn, _add, _out; where the shape changes, the shortcut is option B
 *     of the paper, a projection _0_conv (1x1, stride 2) + _0_bn (as the
 *     bottleneck's block 1; the paper's CIFAR runs used option A, zero
 *     padding, which has no variables); avg_pool, predictions.
 * The nodes, and so the variable table, follow the order of Keras's
 * model.layers (see bottleneck_block): Tower's table is Keras's
 * model.weights, name for name and in order.
 * Every conv is Keras's Conv2D with its default bias (glorot_uniform
 * kernel, zero bias); every batch norm Keras's BatchNormalization with
 * momentum 0.99 and ResNet's epsilon 1.001e-5.
 * Input: resnet50 at least 32x32 (Keras's minimum), resnet20 any size;
 * any channel count.
 *
 * Where it sits: model/nets/; graph_build calls it for --model
 * resnet20|resnet50.
 * What it does not do: run anything, or preprocess (Keras's "caffe"
 * input scaling is the data pipeline's business).
 */
#include "model/graph.h"

#include <stdio.h>

#define RESNET_BN_EPSILON 1.001e-5f
#define RESNET_BN_MOMENTUM 0.99

static int conv(Graph *g, const char *name, int in, int k, int C_out, int stride, Padding padding) {
    Node *n = graph_add(g, NODE_CONV2D, name, in, GRAPH_NONE);
    n->conv = (Conv2d){.KH = k, .KW = k, .C_out = C_out, .stride_h = stride, .stride_w = stride,
                       .padding = padding, .act = ACT_NONE};
    n->keras = 1;
    return graph_node_done(g);
}

static int bn(Graph *g, const char *name, int in) {
    Node *n = graph_add(g, NODE_BATCHNORM, name, in, GRAPH_NONE);
    n->bn.momentum = RESNET_BN_MOMENTUM;
    n->bn.epsilon = RESNET_BN_EPSILON;
    return graph_node_done(g);
}

static int relu(Graph *g, const char *name, int in) {
    graph_add(g, NODE_RELU, name, in, GRAPH_NONE);
    return graph_node_done(g);
}

static int zeropad(Graph *g, const char *name, int in, int p) {
    Node *n = graph_add(g, NODE_ZEROPAD, name, in, GRAPH_NONE);
    n->zp.top = n->zp.bottom = n->zp.left = n->zp.right = p;
    return graph_node_done(g);
}

/* "<prefix><suffix>" into name (48 bytes). */
#define NAME(suffix) (snprintf(name, sizeof name, "%s" suffix, prefix), name)

/* The shortcut, the addition and the closing ReLU of a block. */
static int block_close(Graph *g, const char *prefix, int shortcut, int x) {
    char name[48];
    NodeShape a = graph_shape(g, shortcut), b = graph_shape(g, x);
    if (a.H != b.H || a.W != b.W || a.C != b.C) g->ok = 0;
    graph_add(g, NODE_ADD, NAME("_add"), shortcut, x);
    x = graph_node_done(g);
    return relu(g, NAME("_out"), x);
}

/* Nodes are added in the order of Keras's model.layers (a functional
 * model lists its layers by depth from the output, ties in creation order),
 * so that Tower's variable table is model.weights in order: in a block with
 * a projection shortcut, _0_conv and _0_bn sit beside the main path's
 * layers at the same depth. */

/* Keras's residual_block_v1: the bottleneck (1x1, 3x3, 1x1 x4). */
static int bottleneck_block(Graph *g, const char *prefix, int in, int filters, int stride, int conv_shortcut) {
    char name[48];
    int x = conv(g, NAME("_1_conv"), in, 1, filters, stride, PAD_VALID);
    x = bn(g, NAME("_1_bn"), x);
    x = relu(g, NAME("_1_relu"), x);
    x = conv(g, NAME("_2_conv"), x, 3, filters, 1, PAD_SAME);
    x = bn(g, NAME("_2_bn"), x);
    x = relu(g, NAME("_2_relu"), x);
    int shortcut = in;
    if (conv_shortcut) shortcut = conv(g, NAME("_0_conv"), in, 1, 4 * filters, stride, PAD_VALID);
    x = conv(g, NAME("_3_conv"), x, 1, 4 * filters, 1, PAD_VALID);
    if (conv_shortcut) shortcut = bn(g, NAME("_0_bn"), shortcut);
    x = bn(g, NAME("_3_bn"), x);
    return block_close(g, prefix, shortcut, x);
}

/* The basic block of the CIFAR ResNet (3x3, 3x3), option B shortcut where the shape changes. */
static int basic_block(Graph *g, const char *prefix, int in, int filters, int stride) {
    char name[48];
    const int project = stride != 1 || graph_shape(g, in).C != filters;
    int x = conv(g, NAME("_1_conv"), in, 3, filters, stride, PAD_SAME);
    x = bn(g, NAME("_1_bn"), x);
    x = relu(g, NAME("_1_relu"), x);
    int shortcut = in;
    if (project) shortcut = conv(g, NAME("_0_conv"), in, 1, filters, stride, PAD_VALID);
    x = conv(g, NAME("_2_conv"), x, 3, filters, 1, PAD_SAME);
    if (project) shortcut = bn(g, NAME("_0_bn"), shortcut);
    x = bn(g, NAME("_2_bn"), x);
    return block_close(g, prefix, shortcut, x);
}

/* Keras's head: avg_pool + predictions. */
static int head(Graph *g, const ModelSpec *spec, int x) {
    graph_add(g, NODE_GAP, "avg_pool", x, GRAPH_NONE);
    x = graph_node_done(g);
    Node *n = graph_add(g, NODE_DENSE, "predictions", x, GRAPH_NONE);
    n->dense = (Dense){.n_out = spec->num_classes, .act = ACT_NONE};
    n->keras = 1;
    x = graph_node_done(g);
    g->output = x;
    return g->ok ? 0 : -1;
}

int net_resnet50(Graph *g, const ModelSpec *spec) {
    if (spec->H < 32 || spec->W < 32 || spec->C < 1) {
        g->ok = 0;
        return -1;
    }
    int x = zeropad(g, "conv1_pad", GRAPH_INPUT, 3);
    x = conv(g, "conv1_conv", x, 7, 64, 2, PAD_VALID);
    x = bn(g, "conv1_bn", x);
    x = relu(g, "conv1_relu", x);
    x = zeropad(g, "pool1_pad", x, 1);
    Node *p = graph_add(g, NODE_MAXPOOL, "pool1_pool", x, GRAPH_NONE);
    p->pool = (MaxPool){.KH = 3, .KW = 3, .stride_h = 2, .stride_w = 2, .padding = PAD_VALID};
    x = graph_node_done(g);
    /* (filters, blocks, first stride) of conv2 .. conv5, Keras's stack_fn. */
    static const int stages[4][3] = {{64, 3, 1}, {128, 4, 2}, {256, 6, 2}, {512, 3, 2}};
    char prefix[32];
    for (int s = 0; s < 4; s++)
        for (int i = 0; i < stages[s][1]; i++) {
            snprintf(prefix, sizeof prefix, "conv%d_block%d", s + 2, i + 1);
            x = bottleneck_block(g, prefix, x, stages[s][0], i == 0 ? stages[s][2] : 1, i == 0);
        }
    return head(g, spec, x);
}

int net_resnet20(Graph *g, const ModelSpec *spec) {
    if (spec->C < 1) {
        g->ok = 0;
        return -1;
    }
    int x = conv(g, "conv1_conv", GRAPH_INPUT, 3, 16, 1, PAD_SAME);
    x = bn(g, "conv1_bn", x);
    x = relu(g, "conv1_relu", x);
    static const int stages[3][2] = {{16, 1}, {32, 2}, {64, 2}}; /* (filters, first stride) */
    char prefix[32];
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < 3; i++) {
            snprintf(prefix, sizeof prefix, "conv%d_block%d", s + 2, i + 1);
            x = basic_block(g, prefix, x, stages[s][0], i == 0 ? stages[s][1] : 1);
        }
    return head(g, spec, x);
}
