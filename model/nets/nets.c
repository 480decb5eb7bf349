/* nets.c — THE table of networks: each entry names a network, its builder
 * (model/nets/<name>.c) and what it expects of its data.  model_spec_init,
 * model_input_facts and graph_build read only this table, so a new network
 * is its builder file, one ModelKind value (model.h) and one entry here.
 *
 * Where it sits: model/nets/, beside the builders.
 * What it does not do: build or run anything itself.
 */
#include <stdio.h>
#include <string.h>

#include "model/graph.h"

const NetInfo model_nets[MODEL_N_KINDS] = {
    [MODEL_MNIST] = {"mnist", net_mnist, {28, 28, 1, 0},
                     "each dimension must be at least 1, and the input of a fully connected layer at most "
                     "2147483647 values"},
    [MODEL_CIFAR10] = {"cifar10", net_cifar10, {32, 32, 3, 1},
                       "each dimension must be at least 1, and the input of a fully connected layer at most "
                       "2147483647 values"},
    [MODEL_MOBILENET_V2] = {"mobilenet_v2", net_mobilenet_v2, {32, 32, 3, 0},
                            "it needs at least 32x32 with 1 or 3 channels", MODEL_OPT_WIDTH | MODEL_OPT_HEAD},
    [MODEL_VGG11] = {"vgg11", net_vgg11, {32, 32, 3, 0}, "it needs at least 32x32 (five 2x2 pools)",
                     MODEL_OPT_FC_WIDTH},
    [MODEL_VGG16] = {"vgg16", net_vgg16, {224, 224, 3, 0}, "it needs at least 32x32 (five 2x2 pools)",
                     MODEL_OPT_FC_WIDTH},
    [MODEL_RESNET20] = {"resnet20", net_resnet20, {32, 32, 3, 0}, "each dimension must be at least 1"},
    [MODEL_RESNET50] = {"resnet50", net_resnet50, {224, 224, 3, 0}, "it needs at least 32x32 (Keras's minimum)"},
};

const NetInfo *model_net_find(const char *name) {
    for (int k = 0; k < MODEL_N_KINDS; k++)
        if (name && model_nets[k].name && strcmp(name, model_nets[k].name) == 0) return &model_nets[k];
    return NULL;
}

void model_net_names(char *out, size_t out_n_bytes) {
    size_t used = 0;
    out[0] = '\0';
    for (int k = 0; k < MODEL_N_KINDS && used < out_n_bytes; k++) {
        const char *sep = k == 0 ? "" : k == MODEL_N_KINDS - 1 ? (k == 1 ? " or " : ", or ") : ", ";
        int w = snprintf(out + used, out_n_bytes - used, "%s%s", sep, model_nets[k].name);
        if (w < 0) break;
        used += (size_t)w;
    }
}
