/* vgg.c — VGG (Simonyan and Zisserman) as a layer graph, with the layer
 * names and layout of tf.keras.applications.VGG16: blocks of 3x3 SAME
 * convolutions with bias and ReLU (block<b>_conv<i>, Keras's "kernel" and
 * "bias", glorot_uniform and zeros), each block closed by a 2x2 stride-2
 * VALID max pool (block<b>_pool); then Keras's `flatten` (no node: a dense
 * node flattens its NHWC input per example exactly as Flatten does), fc1
 * and fc2 (Dense, ReLU, spec->opts.fc_width units: Keras's 4096 by
 * default) and `predictions` (Dense num_classes; the softmax is the loss's).
 *   vgg16: configuration D, convolutions per block 2, 2, 3, 3, 3;
 *   vgg11: configuration A, 1, 1, 2, 2, 2, named in the same style
 *          (Keras has no VGG11; block3_conv1, block3_conv2, ...).
 * Filters per block: 64, 128, 256, 512, 512.  Input: at least 32x32 (five
 * pools), any channel count (Keras: 32x32 and up).
 *
 * Where it sits: model/nets/; graph_build calls it for --model vgg11|vgg16.
 * What it does not do: run anything, or dropout (Keras's VGG16 has none).
 */
#include "model/graph.h"

#include <stdio.h>

/* Convolutions per block, for each layout. */
typedef struct {
    int convs[5];
} VggLayout;

static const VggLayout vgg_a = {{1, 1, 2, 2, 2}};
static const VggLayout vgg_d = {{2, 2, 3, 3, 3}};

static int dense(Graph *g, const char *name, int in, int n_out, Activation act) {
    Node *n = graph_add(g, NODE_DENSE, name, in, GRAPH_NONE);
    n->dense = (Dense){.n_out = n_out, .act = act};
    n->keras = 1;
    return graph_node_done(g);
}

static int vgg(Graph *g, const ModelSpec *spec, const VggLayout *layout) {
    static const int filters[5] = {64, 128, 256, 512, 512};
    if (spec->H < 32 || spec->W < 32 || spec->C < 1) {
        g->ok = 0;
        return -1;
    }
    char name[48];
    int x = GRAPH_INPUT;
    for (int b = 0; b < 5; b++) {
        for (int i = 0; i < layout->convs[b]; i++) {
            snprintf(name, sizeof name, "block%d_conv%d", b + 1, i + 1);
            Node *n = graph_add(g, NODE_CONV2D, name, x, GRAPH_NONE);
            n->conv = (Conv2d){.KH = 3, .KW = 3, .C_out = filters[b], .stride_h = 1, .stride_w = 1,
                               .padding = PAD_SAME, .act = ACT_RELU};
            n->keras = 1;
            x = graph_node_done(g);
        }
        snprintf(name, sizeof name, "block%d_pool", b + 1);
        Node *p = graph_add(g, NODE_MAXPOOL, name, x, GRAPH_NONE);
        p->pool = (MaxPool){.KH = 2, .KW = 2, .stride_h = 2, .stride_w = 2, .padding = PAD_VALID};
        x = graph_node_done(g);
    }
    const int fc = spec->opts.fc_width > 0 ? spec->opts.fc_width : 4096;
    x = dense(g, "fc1", x, fc, ACT_RELU);
    x = dense(g, "fc2", x, fc, ACT_RELU);
    x = dense(g, "predictions", x, spec->num_classes, ACT_NONE);
    g->output = x;
    return g->ok ? 0 : -1;
}

int net_vgg11(Graph *g, const ModelSpec *spec) { return vgg(g, spec, &vgg_a); }

int net_vgg16(Graph *g, const ModelSpec *spec) { return vgg(g, spec, &vgg_d); }
