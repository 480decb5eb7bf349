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
        Node *n = &g->nodes[i];
        n->var0 = v;
        n->n_vars = model_layer_table[n->kind].vars(n, nv);
        v += n->n_vars;
        /* Inputs come before their consumers, so their flags are final here. */
        n->grad_wanted = 0;
        for (int j = 0; j < n->n_vars; j++) n->grad_wanted |= nv[j].trainable != 0;
        for (int j = 0; j < n->n_inputs; j++) n->grad_wanted |= graph_grad_wanted(g, n->inputs[j]);
    }
    if (v > MODEL_MAX_VARS) {
        g->ok = 0;
        return -1;
    }
    return 0;
}

/* ---- fusion ---- */

/* Remove node `gone` (no variables), making its consumers read `by` instead. */
static void graph_remove_node(Graph *g, int gone, int by) {
    for (int i = gone + 1; i < g->n_nodes; i++) {
        Node *n = &g->nodes[i];
        for (int j = 0; j < n->n_inputs; j++) {
            if (n->inputs[j] == gone) n->inputs[j] = by;
            else if (n->inputs[j] > gone) n->inputs[j]--;
        }
    }
    memmove(&g->nodes[gone], &g->nodes[gone + 1], sizeof(Node) * (size_t)(g->n_nodes - gone - 1));
    g->n_nodes--;
    if (g->output == gone) g->output = by;
    else if (g->output > gone) g->output--;
}

/* The only consumer of node i's output, or -1 (none, several, or the model's output). */
static int sole_consumer(const Graph *g, int i) {
    if (g->output == i) return -1;
    int found = -1;
    for (int k = i + 1; k < g->n_nodes; k++)
        for (int j = 0; j < g->nodes[k].n_inputs; j++)
            if (g->nodes[k].inputs[j] == i) {
                if (found >= 0) return -1;
                found = k;
            }
    return found;
}

int graph_fuse(Graph *g) {
    int removed = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        Node *n = &g->nodes[i];
        const int k = sole_consumer(g, i);
        if (k < 0) continue;
        Node *c = &g->nodes[k];
        if (n->kind == NODE_BATCHNORM && n->bn.act == ACT_NONE && (c->kind == NODE_RELU6 || c->kind == NODE_RELU) &&
            c->n_vars == 0) {
            n->bn.act = c->kind == NODE_RELU6 ? ACT_RELU6 : ACT_RELU;
            graph_remove_node(g, k, i);
            removed++;
        } else if (n->kind == NODE_ADD && n->add_act == ACT_NONE && (c->kind == NODE_RELU6 || c->kind == NODE_RELU) &&
                   c->n_vars == 0) {
            /* ResNet's "*_add" + "*_out": the sum and its ReLU in one pass each way */
            n->add_act = c->kind == NODE_RELU6 ? ACT_RELU6 : ACT_RELU;
            graph_remove_node(g, k, i);
            removed++;
        } else if (n->kind == NODE_ZEROPAD && c->kind == NODE_DEPTHWISE && c->dw.padding == PAD_VALID &&
                   c->dw.pad_top == 0 && c->dw.pad_left == 0 && n->n_vars == 0) {
            /* The depthwise reads the unpadded input; its bounds checks supply the zeros. */
            c->inputs[0] = n->inputs[0];
            c->in = n->in;
            c->dw.H = n->zp.H;
            c->dw.W = n->zp.W;
            c->dw.pad_top = n->zp.top;
            c->dw.pad_left = n->zp.left;
            graph_remove_node(g, i, n->inputs[0]);
            removed++;
            i--;
        }
    }
    return removed;
}

int graph_var_chunks(const Graph *g, const ModelSpec *s, size_t min_n_floats, int *node_chunk, int *chunk_first,
                     size_t *chunk_start, int max_chunks) {
    if (max_chunks < 1) return -1;
    int k = -1;
    size_t end = 0; /* one past the last float of the variables placed so far */
    for (int i = 0; i < g->n_nodes; i++) {
        const Node *n = &g->nodes[i];
        if (n->n_vars > 0) {
            const ModelVar *first = &s->vars[n->var0], *last = &s->vars[n->var0 + n->n_vars - 1];
            if (first->offset < end) return -1;
            const size_t node_n_floats = last->offset + last->n_floats - first->offset;
            if (k < 0 || end - chunk_start[k] >= min_n_floats || node_n_floats >= min_n_floats) {
                if (k + 1 >= max_chunks) return -1;
                k++;
                chunk_start[k] = k ? first->offset : 0;
                chunk_first[k] = i;
            }
            end = last->offset + last->n_floats;
        }
        node_chunk[i] = k < 0 ? 0 : k;
    }
    if (k < 0) { /* no variables: one empty chunk */
        k = 0;
        chunk_start[0] = 0;
        chunk_first[0] = -1;
    }
    if (end > s->n_params) return -1;
    chunk_start[k + 1] = s->n_params;
    return k + 1;
}

void graph_describe(const Graph *g, void (*describe)(const void *ctx, int i, char *out, size_t out_n_bytes),
                    const void *ctx, char *out, size_t out_n_bytes) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < g->n_nodes && used < out_n_bytes; i++) {
        char d[512] = "";
        describe(ctx, i, d, sizeof d);
        if (!d[0]) continue;
        int k = snprintf(out + used, out_n_bytes - used, "%s%s: %s", used ? " | " : "", g->nodes[i].name, d);
        if (k < 0) break;
        used += (size_t)k;
    }
    /* Cut short: say so at the end rather than stop mid-word. */
    static const char cut[] = " | ... (cut: the buffer is full)";
    if (used >= out_n_bytes && out_n_bytes > sizeof cut) memcpy(out + out_n_bytes - sizeof cut, cut, sizeof cut);
}
