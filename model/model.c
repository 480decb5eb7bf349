/* model.c — the CPU executor of the layer graph (graph.h), and the model
 * API of model.h: the variable table, initialisation, forward, backward.
 *
 * Where it sits: implements model/model.h.  A tower owns one ModelActs and
 * calls model_forward / model_backward on its shard; the parameter server
 * sees only the flat parameter block laid out by ModelSpec.
 * How: model_spec_init builds the network's graph (graph_build: the
 * builder of model/nets/) and lists each node's variables from the layer
 * table; model_acts_create builds the same graph and gives every node an
 * output buffer, an output-gradient buffer and what its kind saves; forward
 * walks the nodes in order, backward in reverse, each through the layer
 * table (layer_table.c).  The CUDA executor (model_cuda.cu) walks the same
 * graph the same way.
 * Backward convention (llm.c's): parameter gradients are ADDED (the caller
 * zeroes; model_backward_write, a step's first micro-batch, writes them
 * instead, straight from conv2d's and dense's products), activation
 * gradients WRITTEN; a tensor read by several nodes
 * gets the first consumer's (in reverse order) gradient written into its
 * buffer and each later one's added (grad_accumulate), in node order.
 * What it does not do: know about towers, devices or optimizers; allocate
 * anything after model_acts_create; keep global mutable state (several
 * tower threads run different ModelActs at once).
 */
#include "model/graph.h"
#include "model/layers.h"
#include "model/model.h"

#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* One node's buffers, for max_batch examples. */
typedef struct {
    float *out;               /* (max_batch, out shape) */
    float *dout;              /* (max_batch, out shape) the gradient of out */
    void *saved;              /* the kind's saved_n_bytes, or NULL */
    double forward_s, backward_s;
    long n_forward, n_backward;
} NodeBuf;

struct ModelActs {
    ModelSpec spec;
    Graph graph;              /* built from spec by graph_build */
    int max_batch;
    int n_threads;            /* scratch is sized for this many OpenMP threads */
    NodeBuf bufs[GRAPH_MAX_NODES];
    float *x;                 /* (max_batch, H, W, C) copy of the last forward's input */
    int32_t *labels;          /* (max_batch) copy of the last forward's labels */
    float *probs;             /* (max_batch, num_classes) softmax, saved for backward */
    float *grad_tmp;          /* (NODE_MAX_INPUTS, max_batch, max out): a later consumer's input gradients,
                                 before they are added; empty when graph.shared is 0 */
    size_t grad_tmp_n_floats; /* floats of one of its NODE_MAX_INPUTS slabs */
    void *scratch;            /* max over nodes of the kind's scratch_n_bytes */
    size_t scratch_n_bytes;   /* its size */
    int B;                    /* batch of the last forward; 0 before the first */
    int training;             /* mode of the next forwards (model_acts_set_training), 1 by default */
    int forward_training;     /* mode of the last forward */
    float loss_weight;        /* the cross-entropy's weight in the loss the backward differentiates
                                 (model_acts_set_loss_weight), 1 by default */
    signed char add_share[GRAPH_MAX_NODES]; /* an Add whose two inputs' gradients share one buffer (plan_add_sharing):
                                 the input slot whose buffer serves both, else -1 */
    ModelSync sync;           /* batch norm's cross-tower sums (model_acts_set_sync) */
    int synced;               /* 1: sync is set */
    double loss_forward_s, loss_backward_s;
    long n_loss_forward, n_loss_backward;
};

/* ---- spec ------------------------------------------------------------------- */

/* The graph of spec on the heap (a Graph is large for a stack); NULL if it cannot be built. */
static Graph *spec_graph(const ModelSpec *spec) {
    Graph *g = malloc(sizeof *g);
    if (g && graph_build(g, spec) != 0) {
        free(g);
        g = NULL;
    }
    return g;
}

int model_input_facts(const char *name, ModelInputFacts *f) {
    const NetInfo *net = model_net_find(name);
    *f = (net ? net : &model_nets[MODEL_MNIST])->facts;
    return net ? 0 : -1;
}

int model_spec_init(ModelSpec *spec, const char *name, int H, int W, int C,
                    int num_classes, char *err, size_t err_n_bytes) {
    return model_spec_init_opts(spec, name, H, W, C, num_classes, NULL, err, err_n_bytes);
}

void model_opts_normalize(const char *name, ModelOptions *opts) {
    if (opts->width_multiplier == 0.0f) opts->width_multiplier = 1.0f;
    if (opts->fc_width == 0) opts->fc_width = 4096;
    const NetInfo *net = name ? model_net_find(name) : NULL;
    if (!net) return;
    /* Options the network does not read take their defaults, so that a checkpoint (which records them)
     * and a --resume with or without them agree for it. */
    if (!(net->opts_used & MODEL_OPT_WIDTH)) opts->width_multiplier = 1.0f;
    if (!(net->opts_used & MODEL_OPT_HEAD)) opts->head = MODEL_HEAD_KERAS;
    if (!(net->opts_used & MODEL_OPT_FC_WIDTH)) opts->fc_width = 4096;
}

/* The fewest significant digits (6 to 9) that read back as x: 0.333 for 0.333f, 0.33300003 for the float above it
 * (test_ps_checkpoint reads both). */
static void float_words(char *out, size_t n_bytes, float x) {
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(out, n_bytes, "%.*g", digits, (double)x);
        if (strtof(out, NULL) == x) return;
    }
}

void model_opts_describe(const char *name, const ModelOptions *opts, char *out, size_t out_n_bytes) {
    const NetInfo *net = model_net_find(name);
    const unsigned used = net ? net->opts_used : MODEL_OPT_WIDTH | MODEL_OPT_HEAD | MODEL_OPT_FC_WIDTH;
    size_t k = 0;
    out[0] = '\0';
    if (used & MODEL_OPT_WIDTH) {
        char w[32];
        float_words(w, sizeof w, opts->width_multiplier);
        k += (size_t)snprintf(out + k, out_n_bytes - k, "--width_multiplier %s", w);
    }
    if ((used & MODEL_OPT_HEAD) && k < out_n_bytes)
        k += (size_t)snprintf(out + k, out_n_bytes - k, "%s--head %s", k ? " " : "",
                              opts->head == MODEL_HEAD_SEED ? "seed" : "keras");
    if ((used & MODEL_OPT_FC_WIDTH) && k < out_n_bytes)
        k += (size_t)snprintf(out + k, out_n_bytes - k, "%s--fc_width %d", k ? " " : "", opts->fc_width);
    if (k == 0) snprintf(out, out_n_bytes, "no options");
}

const char *model_size_flag(const char *name) {
    const NetInfo *net = model_net_find(name);
    const unsigned used = net ? net->opts_used : 0;
    return used & MODEL_OPT_FC_WIDTH ? "--fc_width" : used & MODEL_OPT_WIDTH ? "--width_multiplier" : NULL;
}

int model_spec_init_opts(ModelSpec *spec, const char *name, int H, int W, int C, int num_classes,
                         const ModelOptions *opts, char *err, size_t err_n_bytes) {
    memset(spec, 0, sizeof *spec);
    if (opts) spec->opts = *opts;
    model_opts_normalize(NULL, &spec->opts); /* the zeros; the network's unread options once it is known */
    if (!(spec->opts.width_multiplier > 0.0f && spec->opts.width_multiplier <= 16.0f) ||
        (spec->opts.head != MODEL_HEAD_KERAS && spec->opts.head != MODEL_HEAD_SEED) || spec->opts.fc_width < 1 ||
        spec->opts.fc_width > 65536) {
        snprintf(err, err_n_bytes,
                 "model %s: width multiplier %g outside (0, 16], unknown head %d, or fc width %d outside [1, 65536]",
                 name ? name : "(null)", spec->opts.width_multiplier, (int)spec->opts.head, spec->opts.fc_width);
        return -1;
    }
    const NetInfo *net = model_net_find(name);
    if (!net) {
        char names[256];
        model_net_names(names, sizeof names);
        snprintf(err, err_n_bytes, "unknown model '%s' (expected %s)", name ? name : "(null)", names);
        return -1;
    }
    spec->kind = (ModelKind)(net - model_nets);
    spec->name = net->name;
    model_opts_normalize(name, &spec->opts);
    if (num_classes < 1) {
        snprintf(err, err_n_bytes, "model %s: num_classes must be at least 1, got %d", spec->name, num_classes);
        return -1;
    }
    spec->H = H; spec->W = W; spec->C = C;
    spec->num_classes = num_classes;
    Graph *g = spec_graph(spec);
    if (!g) {
        snprintf(err, err_n_bytes, "model %s cannot take input %dx%dx%d (HxWxC): %s", spec->name, H, W, C,
                 net->input_rule);
        return -1;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const Node *n = &g->nodes[i];
        NodeVar nv[NODE_MAX_VARS];
        int k = model_layer_table[n->kind].vars(n, nv);
        for (int j = 0; j < k; j++) {
            ModelVar *v = &spec->vars[spec->n_vars++];
            memset(v, 0, sizeof *v);
            snprintf(v->name, sizeof v->name, "%s/%s", n->name, nv[j].name);
            v->ndim = nv[j].ndim;
            v->n_floats = 1;
            for (int d = 0; d < nv[j].ndim; d++) {
                v->shape[d] = nv[j].shape[d];
                v->n_floats *= (size_t)nv[j].shape[d];
            }
            v->offset = spec->n_params;
            v->wd = nv[j].wd;
            v->init = nv[j].init;
            v->init_value = nv[j].init_value;
            v->trainable = nv[j].trainable;
            spec->n_params += v->n_floats;
            if (v->trainable) spec->n_trainable += v->n_floats;
        }
    }
    free(g);
    return 0;
}

int model_spec_find(const ModelSpec *spec, const char *name) {
    for (int i = 0; i < spec->n_vars; i++)
        if (strcmp(spec->vars[i].name, name) == 0) return i;
    return -1;
}

/* FNV-1a of the variable's name: its stream, so each variable's values
 * depend only on (seed, name), not on the table's order. */
static uint64_t name_hash(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

void model_init_params(float *params, const ModelSpec *spec, uint64_t seed) {
    for (int i = 0; i < spec->n_vars; i++) {
        const ModelVar *v = &spec->vars[i];
        if (v->init == INIT_TRUNCATED_NORMAL) {
            InitRng r;
            init_rng_seed(&r, seed, name_hash(v->name));
            init_truncated_normal(params + v->offset, v->n_floats, v->init_value, &r);
        } else if (v->init == INIT_GLOROT_UNIFORM) {
            /* Keras's fans: the receptive field is the product of all but the last two dims. */
            double rf = 1.0;
            for (int d = 0; d + 2 < v->ndim; d++) rf *= v->shape[d];
            const double fan_in = v->ndim >= 2 ? rf * v->shape[v->ndim - 2] : v->shape[0];
            const double fan_out = v->ndim >= 2 ? rf * v->shape[v->ndim - 1] : v->shape[0];
            InitRng r;
            init_rng_seed(&r, seed, name_hash(v->name));
            init_glorot_uniform(params + v->offset, v->n_floats, sqrt(6.0 / (fan_in + fan_out)), &r);
        } else {
            init_constant(params + v->offset, v->n_floats, v->init_value);
        }
    }
}

int model_check_labels(const ModelSpec *spec, const int32_t *labels, int B, char *err, size_t err_n_bytes) {
    for (int b = 0; b < B; b++) {
        if (labels[b] < 0 || labels[b] >= spec->num_classes) {
            snprintf(err, err_n_bytes, "label %d of example %d is outside [0, %d)",
                     (int)labels[b], b, spec->num_classes);
            return -1;
        }
    }
    return 0;
}

double model_forward_flops_per_example(const ModelSpec *spec) {
    Graph *g = spec_graph(spec);
    double macs = 0.0;
    for (int i = 0; g && i < g->n_nodes; i++) macs += model_layer_table[g->nodes[i].kind].macs(&g->nodes[i]);
    free(g);
    return macs;
}

/* ---- workspace --------------------------------------------------------------- */

/* The huge page of x86-64 (and of arm64 with 4 KiB pages). */
#define HUGE_PAGE_N_BYTES ((size_t)2 << 20)

/* n_bytes of 64-byte-aligned memory, zeroed so its pages are faulted in now
 * rather than during the first steps; NULL on failure.  An array of a huge
 * page or more is aligned to one and asks for transparent huge pages
 * (madvise, for a kernel whose policy is "madvise", Debian's default): the
 * Winograd transforms and the products walk many such arrays at once, and
 * with fewer TLB misses mnist's and cifar10's steps at batch 128 ran 2%
 * faster on the 2-core Zen 5 (bench/RESULTS.md, 2026-11-28). */
static void *alloc_zeroed(size_t n_bytes) {
    void *p = NULL;
    const size_t align = n_bytes >= HUGE_PAGE_N_BYTES ? HUGE_PAGE_N_BYTES : 64;
    if (posix_memalign(&p, align, n_bytes ? n_bytes : 64) != 0) return NULL;
    if (align == HUGE_PAGE_N_BYTES) (void)madvise(p, n_bytes, MADV_HUGEPAGE); /* a hint: refused, 4 KiB pages */
    memset(p, 0, n_bytes);
    return p;
}

/* One array of n_bytes as the allocator hands it out: whole pages, one more for its header and alignment. */
static size_t array_n_bytes(size_t n_bytes) { return (n_bytes + 4095) / 4096 * 4096 + 4096; }

/* The arrays of a workspace for a->graph: allocated (alloc = 1; returns 0 or
 * (size_t)-1 on failure) or only counted (alloc = 0; returns their bytes as
 * array_n_bytes rounds them).  Sizes come from one place for both. */
static size_t acts_arrays(ModelActs *a, int alloc) {
    const Graph *g = &a->graph;
    const ModelSpec *s = &a->spec;
    const size_t Bm = (size_t)a->max_batch, in_n = node_shape_n(g->input);
    size_t max_out = in_n, scratch = 0, n_bytes = 0;
    int ok = 1;
#define ARRAY(ptr, size)                           \
    do {                                           \
        size_t sz_ = (size);                       \
        if (alloc) {                               \
            (ptr) = alloc_zeroed(sz_);             \
            ok &= (ptr) != NULL;                   \
        } else {                                   \
            n_bytes += array_n_bytes(sz_);         \
        }                                          \
    } while (0)
    for (int i = 0; i < g->n_nodes; i++) {
        const Node *n = &g->nodes[i];
        const LayerKindInfo *k = &model_layer_table[n->kind];
        NodeBuf *b = &a->bufs[i];
        const size_t out_n = node_shape_n(n->out), saved = k->saved_n_bytes(n, a->max_batch);
        if (out_n > max_out) max_out = out_n;
        ARRAY(b->out, sizeof(float) * Bm * out_n);
        ARRAY(b->dout, sizeof(float) * Bm * out_n);
        if (saved) ARRAY(b->saved, saved);
        size_t sc = k->scratch_n_bytes(n, a->max_batch, a->n_threads);
        if (sc > scratch) scratch = sc;
    }
    ARRAY(a->x, sizeof(float) * Bm * in_n);
    ARRAY(a->labels, sizeof(int32_t) * Bm);
    ARRAY(a->probs, sizeof(float) * Bm * s->num_classes);
    a->grad_tmp_n_floats = g->shared ? Bm * max_out : 0; /* a chain never sums gradients */
    ARRAY(a->grad_tmp, sizeof(float) * NODE_MAX_INPUTS * a->grad_tmp_n_floats);
    ARRAY(a->scratch, scratch);
    if (alloc) a->scratch_n_bytes = scratch;
#undef ARRAY
    if (alloc) return ok ? 0 : (size_t)-1;
    return n_bytes;
}

/* Consumers of node `node` in g (GRAPH_INPUT: none counted), and the largest consumer index other than `skip`. */
static int consumers(const Graph *g, int node, int skip, int *max_other) {
    int n = 0;
    *max_other = -1;
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_inputs; j++)
            if (g->nodes[i].inputs[j] == node) {
                n++;
                if (i != skip && i > *max_other) *max_other = i;
            }
    return n;
}

/* An Add's backward writes the same gradient to both inputs: where one input p has the Add as its only
 * consumer, is a batch norm or a convolution without a fused activation (their backward leaves dout as it
 * is), and every other consumer of the other input q comes before p (so p has read its gradient before they
 * add theirs), q's gradient
 * buffer can be p's for the step: the Add writes it once and copies nothing (model_backward's dout_of).
 * resnet's identity and projection blocks qualify.  Off in the unfused plan (fuse 0), the tests' oracle. */
static void plan_add_sharing(ModelActs *a, int fuse) {
    const Graph *g = &a->graph;
    for (int i = 0; i < g->n_nodes; i++) {
        a->add_share[i] = -1;
        const Node *n = &g->nodes[i];
        if (!fuse || n->kind != NODE_ADD || n->n_inputs != 2 || n->inputs[0] == n->inputs[1]) continue;
        for (int s = 0; s < 2 && a->add_share[i] < 0; s++) {
            const int p = n->inputs[s], q = n->inputs[1 - s];
            if (p < 0 || q < 0) continue;
            /* a convolution with a fused ReLU masks its dout in place on oneDNN's path (conv2d_run_backward) */
            const Node *pn = &g->nodes[p];
            const int keeps_dout = pn->kind == NODE_BATCHNORM || (pn->kind == NODE_CONV2D && pn->conv.act == ACT_NONE);
            int max_p, max_q;
            if (!keeps_dout || consumers(g, p, i, &max_p) != 1) continue;
            consumers(g, q, i, &max_q);
            if (max_q < p) a->add_share[i] = (signed char)s;
        }
    }
}

/* The workspace's struct with its graph built and checked against spec's
 * variable table; no arrays yet.  NULL on failure. */
static ModelActs *acts_shell(const ModelSpec *spec, int max_batch, int fuse) {
    if (max_batch < 1) return NULL;
    ModelActs *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->spec = *spec;
    a->max_batch = max_batch;
    a->n_threads = omp_get_max_threads();
    a->training = 1;
    a->loss_weight = 1.0f;
    if (graph_build(&a->graph, spec) != 0) {
        free(a);
        return NULL;
    }
    if (fuse) graph_fuse(&a->graph);
    plan_add_sharing(a, fuse);
    const Node *last = &a->graph.nodes[a->graph.n_nodes - 1];
    if (last->var0 + last->n_vars != spec->n_vars) { /* a spec not made by model_spec_init for this shape */
        free(a);
        return NULL;
    }
    return a;
}

ModelActs *model_acts_create_fused(const ModelSpec *spec, int max_batch, int fuse) {
    ModelActs *a = acts_shell(spec, max_batch, fuse);
    if (!a) return NULL;
    if (acts_arrays(a, 1) != 0) {
        model_acts_free(a);
        return NULL;
    }
    return a;
}

ModelActs *model_acts_create(const ModelSpec *spec, int max_batch) { return model_acts_create_fused(spec, max_batch, 1); }

size_t model_acts_n_bytes(const ModelSpec *spec, int max_batch) {
    ModelActs *a = acts_shell(spec, max_batch, 1);
    if (!a) return 0;
    size_t n_bytes = sizeof(ModelActs) + acts_arrays(a, 0);
    free(a);
    return n_bytes;
}

void model_acts_free(ModelActs *a) {
    if (!a) return;
    for (int i = 0; i < a->graph.n_nodes; i++) {
        free(a->bufs[i].out);
        free(a->bufs[i].dout);
        free(a->bufs[i].saved);
    }
    free(a->x);
    free(a->labels);
    free(a->probs);
    free(a->grad_tmp);
    free(a->scratch);
    free(a);
}

/* ---- forward / backward ------------------------------------------------------ */

/* The node's variables and (if dparams) their gradients, into r. */
static void bind_vars(NodeRun *r, const ModelSpec *s, const Node *n, const float *params, float *dparams) {
    for (int j = 0; j < n->n_vars; j++) {
        const ModelVar *v = &s->vars[n->var0 + j];
        r->w[j] = params + v->offset;
        r->dw[j] = dparams ? dparams + v->offset : NULL;
    }
}

float model_forward(float *logits, float *ce_loss, ModelActs *a,
                    const float *x, const int32_t *labels, const float *params, int B) {
    if (B < 1 || B > a->max_batch) {
        fprintf(stderr, "model_forward: batch %d outside [1, %d] (the max_batch of model_acts_create)\n",
                B, a->max_batch);
        a->B = 0;
        return NAN;
    }
    const ModelSpec *s = &a->spec;
    const Graph *g = &a->graph;
    a->B = B;
    a->forward_training = a->training;
    memcpy(a->x, x, sizeof(float) * B * s->H * s->W * s->C);
    memcpy(a->labels, labels, sizeof(int32_t) * B);
    for (int i = 0; i < g->n_nodes; i++) {
        const Node *n = &g->nodes[i];
        NodeBuf *b = &a->bufs[i];
        NodeRun r = {.B = B, .n_threads = a->n_threads, .training = a->training, .out = b->out, .saved = b->saved,
                     .scratch = a->scratch, .scratch_n_bytes = a->scratch_n_bytes,
                     .sync = a->synced && a->training ? &a->sync : NULL};
        for (int j = 0; j < n->n_inputs; j++) r.in[j] = n->inputs[j] == GRAPH_INPUT ? a->x : a->bufs[n->inputs[j]].out;
        bind_vars(&r, s, n, params, NULL);
        double t0 = omp_get_wtime();
        model_layer_table[n->kind].forward(n, &r);
        b->forward_s += omp_get_wtime() - t0;
        b->n_forward++;
    }
    const float *out = a->bufs[g->output].out;
    double t0 = omp_get_wtime();
    float ce = softmax_xent_forward(a->probs, out, a->labels, B, s->num_classes);
    double loss = ce;
    for (int v = 0; v < s->n_vars; v++)
        if (s->vars[v].wd != 0.0f)
            loss += l2_loss_forward(params + s->vars[v].offset, s->vars[v].n_floats, s->vars[v].wd);
    a->loss_forward_s += omp_get_wtime() - t0;
    a->n_loss_forward++;
    if (logits) memcpy(logits, out, sizeof(float) * B * s->num_classes);
    if (ce_loss) *ce_loss = ce;
    return (float)loss;
}

/* model_backward (write 0: gradients added) and model_backward_write (write 1: every float of dparams written:
 * conv2d and dense write their weight gradients straight (writes_dw), the other kinds' variables are zeroed
 * first and added to, and the variables no node reached are zeroed at the end). */
static void backward_pass(float *dparams, ModelActs *a, const float *params, int write) {
    const ModelSpec *s = &a->spec;
    const Graph *g = &a->graph;
    const int B = a->B;
    if (B < 1) {
        fprintf(stderr, "model_backward: no successful model_forward on this ModelActs; no gradient added\n");
        return;
    }
    if (!a->forward_training) {
        fprintf(stderr, "model_backward: the last model_forward ran in evaluation mode; no gradient added\n");
        return;
    }
    /* written[i]: node i's dout holds (part of) its gradient already.  dout_of[i]: the buffer of node i's
     * gradient this step (its own, or an Add's other input's: plan_add_sharing). */
    unsigned char written[GRAPH_MAX_NODES] = {0};
    unsigned char var_written[MODEL_MAX_VARS] = {0}; /* write: the variable's gradient is written this pass */
    float *dout_of[GRAPH_MAX_NODES];
    for (int i = 0; i < g->n_nodes; i++) dout_of[i] = a->bufs[i].dout;
    double t0 = omp_get_wtime();
    softmax_xent_backward(dout_of[g->output], a->probs, a->labels, a->loss_weight, B, s->num_classes);
    written[g->output] = 1;
    a->loss_backward_s += omp_get_wtime() - t0;
    a->n_loss_backward++;
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        const Node *n = &g->nodes[i];
        NodeBuf *b = &a->bufs[i];
        if (!written[i] || !n->grad_wanted) continue; /* reaches no loss, or nothing trainable upstream */
        NodeRun r = {.B = B, .n_threads = a->n_threads, .training = 1, .out = b->out, .saved = b->saved,
                     .scratch = a->scratch, .scratch_n_bytes = a->scratch_n_bytes, .dout = dout_of[i],
                     .sync = a->synced ? &a->sync : NULL};
        if (a->add_share[i] >= 0) { /* both inputs' gradients in one buffer, when neither has one yet */
            const int p = n->inputs[a->add_share[i]], q = n->inputs[1 - a->add_share[i]];
            if (!written[p] && !written[q] && graph_grad_wanted(g, p) && graph_grad_wanted(g, q))
                dout_of[q] = dout_of[p];
        }
        int later[NODE_MAX_INPUTS] = {0}; /* input j's gradient goes to grad_tmp's slab j, then is added */
        for (int j = 0; j < n->n_inputs; j++) {
            const int in = n->inputs[j];
            r.in[j] = in == GRAPH_INPUT ? a->x : a->bufs[in].out;
            if (!graph_grad_wanted(g, in)) continue; /* din[j] stays NULL: not wanted */
            later[j] = written[in] || (j == 1 && n->inputs[0] == in);
            r.din[j] = later[j] ? a->grad_tmp + (size_t)j * a->grad_tmp_n_floats : dout_of[in];
        }
        bind_vars(&r, s, n, params, dparams);
        if (write) {
            r.dw_write = model_layer_table[n->kind].writes_dw;
            for (int j = 0; j < n->n_vars; j++) {
                if (!r.dw_write) memset(r.dw[j], 0, sizeof(float) * s->vars[n->var0 + j].n_floats);
                var_written[n->var0 + j] = 1;
            }
        }
        t0 = omp_get_wtime();
        model_layer_table[n->kind].backward(n, &r);
        for (int j = 0; j < n->n_inputs; j++) {
            const int in = n->inputs[j];
            if (!graph_grad_wanted(g, in)) continue;
            if (later[j])
                grad_accumulate(dout_of[in], r.din[j], (size_t)B * node_shape_n(graph_shape(g, in)));
            written[in] = 1;
        }
        b->backward_s += omp_get_wtime() - t0;
        b->n_backward++;
    }
    for (int v = 0; write && v < s->n_vars; v++)
        if (!var_written[v]) memset(dparams + s->vars[v].offset, 0, sizeof(float) * s->vars[v].n_floats);
    t0 = omp_get_wtime();
    for (int v = 0; v < s->n_vars; v++)
        if (s->vars[v].wd != 0.0f)
            l2_loss_backward(dparams + s->vars[v].offset, params + s->vars[v].offset,
                             s->vars[v].n_floats, s->vars[v].wd);
    a->loss_backward_s += omp_get_wtime() - t0;
}

void model_backward(float *dparams, ModelActs *a, const float *params) { backward_pass(dparams, a, params, 0); }

void model_backward_write(float *dparams, ModelActs *a, const float *params) { backward_pass(dparams, a, params, 1); }

void model_acts_set_training(ModelActs *a, int training) { a->training = training != 0; }

void model_acts_set_loss_weight(ModelActs *a, float loss_weight) { a->loss_weight = loss_weight; }

void model_acts_set_sync(ModelActs *a, const ModelSync *sync) {
    a->synced = sync != NULL;
    if (sync) a->sync = *sync;
}

/* Node i's part of the saved statistics: its own saved buffer, or its slice of stats (model_moving_stats_save's
 * layout: the saved buffers of the nodes with an update, in node order). */
static void update_moving_from(float *params, const ModelActs *a, const unsigned char *stats) {
    for (int i = 0; i < a->graph.n_nodes; i++) {
        const Node *n = &a->graph.nodes[i];
        const LayerKindInfo *k = &model_layer_table[n->kind];
        if (!k->update) continue;
        float *w[NODE_MAX_VARS];
        for (int j = 0; j < n->n_vars; j++) w[j] = params + a->spec.vars[n->var0 + j].offset;
        k->update(n, w, stats ? stats : a->bufs[i].saved);
        if (stats) stats += k->saved_n_bytes(n, a->max_batch);
    }
}

void model_update_moving(float *params, const ModelActs *a) {
    if (a->B < 1 || !a->forward_training) return;
    update_moving_from(params, a, NULL);
}

size_t model_moving_stats_n_bytes(const ModelActs *a) {
    size_t n_bytes = 0;
    for (int i = 0; i < a->graph.n_nodes; i++) {
        const Node *n = &a->graph.nodes[i];
        if (model_layer_table[n->kind].update) n_bytes += model_layer_table[n->kind].saved_n_bytes(n, a->max_batch);
    }
    return n_bytes;
}

size_t model_moving_stats_spec_n_bytes(const ModelSpec *spec, int max_batch) {
    ModelActs *a = acts_shell(spec, max_batch, 1);
    if (!a) return 0;
    const size_t n_bytes = model_moving_stats_n_bytes(a);
    free(a);
    return n_bytes;
}

int model_moving_stats_save(void *stats, const ModelActs *a) {
    if (a->B < 1 || !a->forward_training) return 0;
    unsigned char *p = stats;
    for (int i = 0; i < a->graph.n_nodes; i++) {
        const Node *n = &a->graph.nodes[i];
        if (!model_layer_table[n->kind].update) continue;
        const size_t n_bytes = model_layer_table[n->kind].saved_n_bytes(n, a->max_batch);
        memcpy(p, a->bufs[i].saved, n_bytes);
        p += n_bytes;
    }
    return 1;
}

void model_update_moving_saved(float *params, const ModelActs *a, const void *stats) {
    update_moving_from(params, a, stats);
}

int model_moving_momentum(const ModelSpec *spec, double *momentum) {
    Graph *g = spec_graph(spec);
    if (!g) return -1;
    for (int v = 0; v < spec->n_vars; v++) momentum[v] = 0.0;
    for (int i = 0; i < g->n_nodes; i++) {
        const Node *n = &g->nodes[i];
        if (n->kind != NODE_BATCHNORM) continue;
        for (int j = 0; j < n->n_vars; j++)
            if (!spec->vars[n->var0 + j].trainable) momentum[n->var0 + j] = n->bn.momentum;
    }
    free(g);
    return 0;
}

/* ---- timings ----------------------------------------------------------------- */

int model_layer_times(ModelLayerTime *times, int max_n, const ModelActs *a) {
    int n = 0;
    for (int i = 0; i < a->graph.n_nodes && n < max_n; i++, n++) {
        times[n].name = a->graph.nodes[i].name;
        times[n].forward_s = a->bufs[i].forward_s;
        times[n].backward_s = a->bufs[i].backward_s;
        times[n].n_forward = a->bufs[i].n_forward;
        times[n].n_backward = a->bufs[i].n_backward;
    }
    if (n < max_n) {
        times[n].name = "loss";
        times[n].forward_s = a->loss_forward_s;
        times[n].backward_s = a->loss_backward_s;
        times[n].n_forward = a->n_loss_forward;
        times[n].n_backward = a->n_loss_backward;
        n++;
    }
    return n;
}

void model_layer_times_reset(ModelActs *a) {
    for (int i = 0; i < a->graph.n_nodes; i++) {
        a->bufs[i].forward_s = a->bufs[i].backward_s = 0.0;
        a->bufs[i].n_forward = a->bufs[i].n_backward = 0;
    }
    a->loss_forward_s = a->loss_backward_s = 0.0;
    a->n_loss_forward = a->n_loss_backward = 0;
}

static void describe_node(const void *ctx, int i, char *out, size_t out_n_bytes) {
    const ModelActs *a = ctx;
    const Node *n = &a->graph.nodes[i];
    if (model_layer_table[n->kind].describe) model_layer_table[n->kind].describe(n, a->max_batch, a->n_threads, out, out_n_bytes);
}

void model_acts_describe(const ModelActs *a, char *out, size_t out_n_bytes) {
    graph_describe(&a->graph, describe_node, a, out, out_n_bytes);
}

int model_count_correct(const float *logits, const int32_t *labels, int n, int num_classes) {
    int correct = 0;
    for (int i = 0; i < n; i++) {
        const float *l = logits + (size_t)i * num_classes;
        int best = 0;
        for (int k = 1; k < num_classes; k++)
            if (l[k] > l[best]) best = k;
        correct += best == labels[i];
    }
    return correct;
}
