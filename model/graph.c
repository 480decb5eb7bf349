/* graph.c — building a layer graph: append nodes, derive their shapes
 * through the layer table, and pick a network's builder by kind.
 *
 * Where it sits: model/.  The builders (model/nets/) call graph_add /
 * graph_node_done; model_spec_init and the two executors call graph_build.
 * What it does not do: allocate (a Graph is a fixed-size value), or run
 * anything.
 */
#include "model/graph.h"

#include <stdio.h>
#include <string.h>

void graph_begin(Graph *g, int H, int W, int C) {
    memset(g, 0, sizeof *g);
    g->input = (NodeShape){H, W, C};
    g->output = GRAPH_INPUT;
    g->ok = H > 0 && W > 0 && C > 0;
}

NodeShape graph_shape(const Graph *g, int i) {
    return i == GRAPH_INPUT ? g->input : g->nodes[i].out;
}

Node *graph_add(Graph *g, NodeKind kind, const char *name, int in0, int in1) {
    if (g->n_nodes >= GRAPH_MAX_NODES || in0 < GRAPH_INPUT || in0 >= g->n_nodes ||
        (in1 != GRAPH_NONE && (in1 < GRAPH_INPUT || in1 >= g->n_nodes))) {
        g->ok = 0;
        memset(&g->spare, 0, sizeof g->spare);
        return &g->spare;
    }
    Node *n = &g->nodes[g->n_nodes++];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    snprintf(n->name, sizeof n->name, "%s", name);
    n->n_inputs = in1 == GRAPH_NONE ? 1 : 2;
    n->inputs[0] = in0;
    n->inputs[1] = in1 == GRAPH_NONE ? GRAPH_INPUT : in1;
    n->in = graph_shape(g, in0);
    return n;
}

int graph_node_done(Graph *g) {
    int i = graph_last(g);
    if (i == GRAPH_INPUT) {
        g->ok = 0;
        return i;
    }
    Node *n = &g->nodes[i];
    if (!g->ok || model_layer_table[n->kind].init(n) != 0) g->ok = 0;
    return i;
}

int graph_build(Graph *g, const ModelSpec *spec) {
    const int kind = (int)spec->kind;
    graph_begin(g, spec->H, spec->W, spec->C);
    if (kind < 0 || kind >= MODEL_N_KINDS || !model_nets[kind].build) {
        g->ok = 0;
        return -1;
    }
    model_nets[kind].build(g, spec);
    if (!g->ok || g->output == GRAPH_INPUT) return -1;
    /* Each node's variables, contiguous, in node order; tensors with several consumers. */
    int v = 0;
    unsigned char n_consumers[GRAPH_MAX_NODES] = {0};
    for (int i = 0; i < g->n_nodes; i++) {
        for (int j = 0; j < g->nodes[i].n_inputs; j++) {
            int in = g->nodes[i].inputs[j];
            if (in != GRAPH_INPUT && ++n_consumers[in] > 1) g->shared = 1;
        }
        NodeVar nv[NODE_MAX_VARS];
        g->nodes[i].var0 = v;
        g->nodes[i].n_vars = model_layer_table[g->nodes[i].kind].vars(&g->nodes[i], nv);
        v += g->nodes[i].n_vars;
    }
    if (v > MODEL_MAX_VARS) {
        g->ok = 0;
        return -1;
    }
    return 0;
}
