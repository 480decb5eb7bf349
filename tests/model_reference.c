/* model_reference.c — the ORACLE of the layer graph: the pre-graph
 * hand-written plans of `mnist` and `cifar10` and their forward/backward
 * loops, kept verbatim from model/model.c before the graph replaced them,
 * calling the same layer functions of layers.h.
 *
 * Where it sits: tests/ only (test_model_graph_oracle.c).  The graph
 * executor (model.c) must give BITWISE the same variable table, loss,
 * logits and gradients as this code on any input.
 * What it differs in from the old model.c: names (ref_*), no timings kept
 * beyond the fields the loops write, and ref_backward OVERWRITES dparams
 * as the old model_backward did.  Nothing else: do not "improve" it.
 */
#include "tests/model_reference.h"
#include "model/layers.h"

#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LAYERS 10

typedef enum { LAYER_CONV, LAYER_POOL, LAYER_LRN, LAYER_DENSE } LayerKind;

typedef struct {
    LayerKind kind;
    const char *name;         /* TensorFlow's scope: "conv1", "pool1", "norm1", "local3", ... */
    Conv2d conv;              /* LAYER_CONV */
    MaxPool pool;             /* LAYER_POOL */
    Lrn lrn;                  /* LAYER_LRN */
    int lrn_C;                /* LAYER_LRN: channels (the layer sees (B*H*W, C)) */
    Dense dense;              /* LAYER_DENSE */
    float w_stddev, b_value, wd; /* conv/dense: initializers and weight decay */
    int w_var, b_var;         /* conv/dense: indices into ModelSpec.vars; -1 otherwise */
    size_t in_n, out_n;       /* floats per example in and out */
    float *out;               /* (max_batch, out_n) */
    float *scale;             /* LAYER_LRN: (max_batch, out_n), saved for backward */
    int32_t *argmax;          /* LAYER_POOL: (max_batch, out_n), saved for backward */
    double forward_s, backward_s;
    long n_forward, n_backward;
} Layer;

struct RefActs {
    ModelSpec spec;
    int max_batch;
    int n_threads;            /* conv scratch is sized for this many OpenMP threads */
    int n_layers;
    Layer layers[MAX_LAYERS];
    float *x;                 /* (max_batch, H, W, C) copy of the last forward's input */
    int32_t *labels;          /* (max_batch) copy of the last forward's labels */
    float *probs;             /* (max_batch, num_classes) softmax, saved for backward */
    float *grad_a, *grad_b;   /* (max_batch, max out_n) ping-pong activation gradients */
    float *conv_scratch;      /* max over conv layers of conv2d_scratch_n_floats */
    int B;                    /* batch of the last forward; 0 before the first */
    double loss_forward_s, loss_backward_s;
    long n_loss_forward, n_loss_backward;
};

/* ---- plans ------------------------------------------------------------------ */

typedef struct {
    Layer *layers;
    int n;
    int H, W, C;              /* shape of the current activation (per example) */
    size_t flat;              /* its size in floats */
    int ok;
} Planner;

static Layer *plan_next(Planner *p, LayerKind kind, const char *name) {
    Layer *L = &p->layers[p->n++];
    memset(L, 0, sizeof *L);
    L->kind = kind;
    L->name = name;
    L->w_var = L->b_var = -1;
    L->in_n = p->flat;
    return L;
}

static void plan_conv(Planner *p, const char *name, int C_out, float w_stddev, float b_value) {
    Layer *L = plan_next(p, LAYER_CONV, name);
    if (!p->ok || conv2d_init(&L->conv, p->H, p->W, p->C, 5, 5, C_out, 1, 1, PAD_SAME, ACT_RELU) != 0) {
        p->ok = 0;
        return;
    }
    L->w_stddev = w_stddev; L->b_value = b_value; L->wd = 0.0f;
    p->H = L->conv.OH; p->W = L->conv.OW; p->C = C_out;
    p->flat = L->out_n = (size_t)p->H * p->W * p->C;
}

static void plan_pool(Planner *p, const char *name, int k, int stride) {
    Layer *L = plan_next(p, LAYER_POOL, name);
    if (!p->ok || maxpool_init(&L->pool, p->H, p->W, p->C, k, k, stride, stride, PAD_SAME) != 0) {
        p->ok = 0;
        return;
    }
    p->H = L->pool.OH; p->W = L->pool.OW;
    p->flat = L->out_n = (size_t)p->H * p->W * p->C;
}

/* cifar10.py: tf.nn.lrn(x, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75). */
static void plan_lrn(Planner *p, const char *name) {
    Layer *L = plan_next(p, LAYER_LRN, name);
    L->lrn.depth_radius = 4;
    L->lrn.bias = 1.0f;
    L->lrn.alpha = (float)(0.001 / 9.0);
    L->lrn.beta = 0.75f;
    L->lrn_C = p->C;
    L->out_n = p->flat;
}

static void plan_dense(Planner *p, const char *name, int n_out, Activation act,
                       float w_stddev, float b_value, float wd) {
    Layer *L = plan_next(p, LAYER_DENSE, name);
    if (p->flat > (size_t)INT_MAX) p->ok = 0; /* n_in is an int: a larger input would wrap */
    L->dense.n_in = (int)p->flat;
    L->dense.n_out = n_out;
    L->dense.act = act;
    L->w_stddev = w_stddev; L->b_value = b_value; L->wd = wd;
    p->H = p->W = 1; p->C = n_out;
    p->flat = L->out_n = (size_t)n_out;
}

/* The classic multi-GPU MNIST network (TensorFlow's cifar10.py initializers).  local4 is
 * 10 wide as in the original, whatever num_classes is. */
static void plan_mnist(Planner *p, int num_classes) {
    plan_conv(p, "conv1", 32, 5e-2f, 0.0f);
    plan_pool(p, "pool1", 2, 2);
    plan_conv(p, "conv2", 64, 5e-2f, 0.1f);
    plan_pool(p, "pool2", 2, 2);
    plan_dense(p, "local3", 1024, ACT_RELU, 0.04f, 0.1f, 0.0f);
    plan_dense(p, "local4", 10, ACT_RELU, 0.04f, 0.1f, 0.0f);
    plan_dense(p, "softmax_linear", num_classes, ACT_NONE, 1.0f / 192.0f, 0.0f, 0.0f);
}

/* TensorFlow's cifar10.py inference(), layer for layer. */
static void plan_cifar10(Planner *p, int num_classes) {
    plan_conv(p, "conv1", 64, 5e-2f, 0.0f);
    plan_pool(p, "pool1", 3, 2);
    plan_lrn(p, "norm1");
    plan_conv(p, "conv2", 64, 5e-2f, 0.1f);
    plan_lrn(p, "norm2");
    plan_pool(p, "pool2", 3, 2);
    plan_dense(p, "local3", 384, ACT_RELU, 0.04f, 0.1f, 0.004f);
    plan_dense(p, "local4", 192, ACT_RELU, 0.04f, 0.1f, 0.004f);
    plan_dense(p, "softmax_linear", num_classes, ACT_NONE, 1.0f / 192.0f, 0.0f, 0.0f);
}

/* Build the plan of `kind` for (H, W, C) inputs; returns the layer count, or -1. */
static int build_plan(Layer *layers, ModelKind kind, int H, int W, int C, int num_classes) {
    Planner p = {layers, 0, H, W, C, (size_t)H * W * C, H > 0 && W > 0 && C > 0};
    if (kind == MODEL_MNIST) plan_mnist(&p, num_classes);
    else plan_cifar10(&p, num_classes);
    return p.ok ? p.n : -1;
}

/* ---- spec (model.c's model_spec_init, verbatim) ---- */

static void add_var(ModelSpec *s, const char *layer, const char *what, int ndim, const int *shape,
                    InitKind init, float init_value, float wd) {
    ModelVar *v = &s->vars[s->n_vars++];
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s/%s", layer, what);
    v->ndim = ndim;
    v->n_floats = 1;
    for (int i = 0; i < ndim; i++) {
        v->shape[i] = shape[i];
        v->n_floats *= (size_t)shape[i];
    }
    v->offset = s->n_params;
    v->wd = wd;
    v->init = init;
    v->init_value = init_value;
    s->n_params += v->n_floats;
}

int ref_spec_init(ModelSpec *spec, const char *name, int H, int W, int C,
                    int num_classes, char *err, size_t err_n_bytes) {
    memset(spec, 0, sizeof *spec);
    if (name && strcmp(name, "mnist") == 0) {
        spec->kind = MODEL_MNIST;
        spec->name = "mnist";
    } else if (name && strcmp(name, "cifar10") == 0) {
        spec->kind = MODEL_CIFAR10;
        spec->name = "cifar10";
    } else {
        snprintf(err, err_n_bytes, "unknown model '%s' (expected mnist or cifar10)", name ? name : "(null)");
        return -1;
    }
    if (num_classes < 1) {
        snprintf(err, err_n_bytes, "model %s: num_classes must be at least 1, got %d", spec->name, num_classes);
        return -1;
    }
    Layer layers[MAX_LAYERS];
    int n = build_plan(layers, spec->kind, H, W, C, num_classes);
    if (n < 0) {
        snprintf(err, err_n_bytes, "model %s cannot take input %dx%dx%d (HxWxC): each dimension must be at least 1, "
                 "and the input of a fully connected layer at most %d values", spec->name, H, W, C, INT_MAX);
        return -1;
    }
    spec->H = H; spec->W = W; spec->C = C;
    spec->num_classes = num_classes;
    for (int i = 0; i < n; i++) {
        const Layer *L = &layers[i];
        if (L->kind == LAYER_CONV) {
            int ws[4] = {L->conv.KH, L->conv.KW, L->conv.C_in, L->conv.C_out}, bs[1] = {L->conv.C_out};
            add_var(spec, L->name, "weights", 4, ws, INIT_TRUNCATED_NORMAL, L->w_stddev, L->wd);
            add_var(spec, L->name, "biases", 1, bs, INIT_CONSTANT, L->b_value, 0.0f);
        } else if (L->kind == LAYER_DENSE) {
            int ws[2] = {L->dense.n_in, L->dense.n_out}, bs[1] = {L->dense.n_out};
            add_var(spec, L->name, "weights", 2, ws, INIT_TRUNCATED_NORMAL, L->w_stddev, L->wd);
            add_var(spec, L->name, "biases", 1, bs, INIT_CONSTANT, L->b_value, 0.0f);
        }
    }
    return 0;
}

double ref_forward_macs_per_example(const ModelSpec *spec) {
    Layer layers[MAX_LAYERS];
    int n = build_plan(layers, spec->kind, spec->H, spec->W, spec->C, spec->num_classes);
    double macs = 0.0;
    for (int i = 0; i < n; i++) {
        const Layer *L = &layers[i];
        if (L->kind == LAYER_CONV)
            macs += (double)L->conv.OH * L->conv.OW * L->conv.C_out * L->conv.KH * L->conv.KW * L->conv.C_in;
        else if (L->kind == LAYER_DENSE)
            macs += (double)L->dense.n_in * L->dense.n_out;
    }
    return macs;
}

/* ---- workspace --------------------------------------------------------------- */

/* n_bytes of 64-byte-aligned memory, zeroed so its pages are faulted in now
 * rather than during the first steps; NULL on failure. */
static void *alloc_zeroed(size_t n_bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n_bytes ? n_bytes : 64) != 0) return NULL;
    memset(p, 0, n_bytes);
    return p;
}

RefActs *ref_acts_create(const ModelSpec *spec, int max_batch) {
    if (max_batch < 1) return NULL;
    RefActs *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->spec = *spec;
    a->max_batch = max_batch;
    a->n_threads = omp_get_max_threads();
    a->n_layers = build_plan(a->layers, spec->kind, spec->H, spec->W, spec->C, spec->num_classes);
    if (a->n_layers < 0) {
        free(a);
        return NULL;
    }
    const size_t Bm = (size_t)max_batch;
    size_t max_act = (size_t)spec->H * spec->W * spec->C, max_scratch = 0;
    int ok = 1, v = 0;
    for (int i = 0; i < a->n_layers; i++) {
        Layer *L = &a->layers[i];
        if (L->kind == LAYER_CONV || L->kind == LAYER_DENSE) {
            L->w_var = v++;
            L->b_var = v++;
        }
        if (L->out_n > max_act) max_act = L->out_n;
        L->out = alloc_zeroed(sizeof(float) * Bm * L->out_n);
        ok &= L->out != NULL;
        if (L->kind == LAYER_LRN) {
            L->scale = alloc_zeroed(sizeof(float) * Bm * L->out_n);
            ok &= L->scale != NULL;
        } else if (L->kind == LAYER_POOL) {
            L->argmax = alloc_zeroed(sizeof(int32_t) * Bm * L->out_n);
            ok &= L->argmax != NULL;
        } else if (L->kind == LAYER_CONV) {
            size_t s = conv2d_scratch_n_floats(&L->conv, a->n_threads);
            if (s > max_scratch) max_scratch = s;
        }
    }
    a->x = alloc_zeroed(sizeof(float) * Bm * spec->H * spec->W * spec->C);
    a->labels = alloc_zeroed(sizeof(int32_t) * Bm);
    a->probs = alloc_zeroed(sizeof(float) * Bm * spec->num_classes);
    a->grad_a = alloc_zeroed(sizeof(float) * Bm * max_act);
    a->grad_b = alloc_zeroed(sizeof(float) * Bm * max_act);
    a->conv_scratch = alloc_zeroed(sizeof(float) * max_scratch);
    ok &= a->x && a->labels && a->probs && a->grad_a && a->grad_b && a->conv_scratch;
    if (!ok) {
        ref_acts_free(a);
        return NULL;
    }
    return a;
}

void ref_acts_free(RefActs *a) {
    if (!a) return;
    for (int i = 0; i < a->n_layers; i++) {
        free(a->layers[i].out);
        free(a->layers[i].scale);
        free(a->layers[i].argmax);
    }
    free(a->x);
    free(a->labels);
    free(a->probs);
    free(a->grad_a);
    free(a->grad_b);
    free(a->conv_scratch);
    free(a);
}

/* ---- forward / backward ------------------------------------------------------ */

float ref_forward(float *logits, float *ce_loss, RefActs *a,
                    const float *x, const int32_t *labels, const float *params, int B) {
    if (B < 1 || B > a->max_batch) {
        fprintf(stderr, "ref_forward: batch %d outside [1, %d] (the max_batch of model_acts_create)\n",
                B, a->max_batch);
        a->B = 0;
        return NAN;
    }
    const ModelSpec *s = &a->spec;
    a->B = B;
    memcpy(a->x, x, sizeof(float) * B * s->H * s->W * s->C);
    memcpy(a->labels, labels, sizeof(int32_t) * B);
    const float *in = a->x;
    for (int i = 0; i < a->n_layers; i++) {
        Layer *L = &a->layers[i];
        double t0 = omp_get_wtime();
        switch (L->kind) {
        case LAYER_CONV:
            conv2d_forward(L->out, a->conv_scratch, in, params + s->vars[L->w_var].offset,
                           params + s->vars[L->b_var].offset, &L->conv, B, a->n_threads);
            break;
        case LAYER_POOL:
            maxpool_forward(L->out, L->argmax, in, &L->pool, B);
            break;
        case LAYER_LRN:
            lrn_forward(L->out, L->scale, in, &L->lrn, (size_t)B * L->out_n / L->lrn_C, L->lrn_C);
            break;
        case LAYER_DENSE:
            dense_forward(L->out, in, params + s->vars[L->w_var].offset,
                          params + s->vars[L->b_var].offset, &L->dense, B);
            break;
        }
        L->forward_s += omp_get_wtime() - t0;
        L->n_forward++;
        in = L->out;
    }
    double t0 = omp_get_wtime();
    float ce = softmax_xent_forward(a->probs, in, a->labels, B, s->num_classes);
    double loss = ce;
    for (int v = 0; v < s->n_vars; v++)
        if (s->vars[v].wd != 0.0f)
            loss += l2_loss_forward(params + s->vars[v].offset, s->vars[v].n_floats, s->vars[v].wd);
    a->loss_forward_s += omp_get_wtime() - t0;
    a->n_loss_forward++;
    if (logits) memcpy(logits, in, sizeof(float) * B * s->num_classes);
    if (ce_loss) *ce_loss = ce;
    return (float)loss;
}

void ref_backward(float *dparams, RefActs *a, const float *params) {
    const ModelSpec *s = &a->spec;
    const int B = a->B;
    if (B < 1) {
        fprintf(stderr, "ref_backward: no successful model_forward on this ModelActs; gradient set to 0\n");
        memset(dparams, 0, sizeof(float) * s->n_params);
        return;
    }
    double t0 = omp_get_wtime();
    float *g = a->grad_a, *dst = a->grad_b;
    softmax_xent_backward(g, a->probs, a->labels, 1.0f, B, s->num_classes);
    a->loss_backward_s += omp_get_wtime() - t0;
    a->n_loss_backward++;
    for (int i = a->n_layers - 1; i >= 0; i--) {
        Layer *L = &a->layers[i];
        const float *in = i > 0 ? a->layers[i - 1].out : a->x;
        float *dinp = i > 0 ? dst : NULL;
        t0 = omp_get_wtime();
        switch (L->kind) {
        case LAYER_CONV:
            conv2d_backward(dinp, dparams + s->vars[L->w_var].offset, dparams + s->vars[L->b_var].offset,
                            a->conv_scratch, L->out, g, in, params + s->vars[L->w_var].offset,
                            &L->conv, B, a->n_threads);
            break;
        case LAYER_POOL:
            if (dinp) maxpool_backward(dinp, L->argmax, g, &L->pool, B);
            break;
        case LAYER_LRN:
            if (dinp) lrn_backward(dinp, L->scale, L->out, g, in, &L->lrn, (size_t)B * L->out_n / L->lrn_C, L->lrn_C);
            break;
        case LAYER_DENSE:
            /* The pre-activation gradient overwrites g in place (g is ours). */
            dense_backward(dinp, dparams + s->vars[L->w_var].offset, dparams + s->vars[L->b_var].offset,
                           g, L->out, g, in, params + s->vars[L->w_var].offset, &L->dense, B, 0);
            break;
        }
        L->backward_s += omp_get_wtime() - t0;
        L->n_backward++;
        float *tmp = g;
        g = dst;
        dst = tmp;
    }
    t0 = omp_get_wtime();
    for (int v = 0; v < s->n_vars; v++)
        if (s->vars[v].wd != 0.0f)
            l2_loss_backward(dparams + s->vars[v].offset, params + s->vars[v].offset,
                             s->vars[v].n_floats, s->vars[v].wd);
    a->loss_backward_s += omp_get_wtime() - t0;
}

