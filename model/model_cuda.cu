/* model_cuda.cu — the `mnist` and `cifar10` networks on the GPU layers
 * (layers_cuda.h): the CUDA mirror of model.c.
 *
 * Where it sits: implements model_cuda.h for a GPU tower.  The plans below
 * are model.c's plan_mnist / plan_cifar10 layer for layer (model.c keeps its
 * plan private); model_acts_cuda_create checks that the variables they
 * imply are exactly model.c's table (names, shapes, order), so the two
 * cannot drift apart silently, and tests/test_gpu_model.c compares losses
 * and gradients with the CPU's.
 * Memory: one cudaMalloc holds every activation, gradient and scratch
 * buffer, laid out once by layout(); nothing is allocated per step.
 * What it does not do: set the device, synchronise (except
 * model_forward_cuda and model_acts_cuda_free), or know about towers.
 */
#include "model/layers_cuda.h"
#include "model/model_cuda.h"
#include "base/cuda_check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LAYERS 10

typedef enum { LAYER_CONV, LAYER_POOL, LAYER_LRN, LAYER_DENSE } LayerKind;

typedef struct {
    LayerKind kind;
    const char *name;         /* TensorFlow's scope, as model.c */
    Conv2d conv;              /* LAYER_CONV: CPU geometry */
    Conv2dCuda cconv;         /* LAYER_CONV: descriptors, algorithms */
    MaxPool pool;             /* LAYER_POOL */
    Lrn lrn;                  /* LAYER_LRN */
    LrnCuda clrn;             /* LAYER_LRN */
    int lrn_C;                /* LAYER_LRN: channels (the layer sees (B*H*W, C)) */
    Dense dense;              /* LAYER_DENSE */
    int w_var, b_var;         /* conv/dense: indices into ModelSpec.vars; -1 otherwise */
    size_t in_n, out_n;       /* floats per example in and out */
    float *out;               /* (max_batch, out_n) device */
    float *scale;             /* LAYER_LRN: (max_batch, out_n) device, our kernels' saved scale */
    int32_t *argmax;          /* LAYER_POOL: (max_batch, out_n) device */
} LayerCuda;

/* Device scalars, in ModelActsCuda.scalars */
#define SCALAR_CE 0
#define SCALAR_LOSS 1
#define SCALAR_L2 2           /* + v: variable v's weight-decay term */

struct ModelActsCuda {
    ModelSpec spec;
    int max_batch;
    cudnnHandle_t cudnn;      /* the caller's, bound to stream */
    cublasHandle_t cublas;    /* the caller's, bound to stream */
    cudaStream_t stream;      /* the caller's */
    int n_layers;
    LayerCuda layers[MAX_LAYERS];
    void *block;              /* the one device allocation everything below lives in */
    size_t block_n_bytes;
    float *x;                 /* (max_batch, H, W, C) copy of the last forward's input */
    int32_t *labels;          /* (max_batch) copy of the last forward's labels */
    float *probs;             /* (max_batch, num_classes) softmax, saved for backward */
    double *example_loss;     /* (max_batch) cross-entropy per example */
    float *grad_a, *grad_b;   /* (max_batch, max out_n) ping-pong activation gradients */
    void *conv_scratch;       /* max over conv layers of conv2d_cuda_scratch_n_bytes */
    size_t conv_scratch_n_bytes;
    double *l2_partials;      /* (n_vars, L2_LOSS_CUDA_BLOCKS) */
    float *scalars;           /* (SCALAR_L2 + n_vars) device scalars */
    float *loss_pinned;       /* (1) pinned host, model_forward_cuda's loss */
    int described_batch;      /* the batch the conv/LRN descriptors describe */
    int sync_check;           /* TOWER_CUDA_SYNC_CHECK=1: wait and check after every layer (debugging) */
    int B;                    /* batch of the last forward; 0 before the first or after a failed one */
};

/* ---- plans: model.c's, layer for layer ------------------------------------------ */

typedef struct {
    LayerCuda *layers;
    int n;
    int H, W, C;              /* shape of the current activation (per example) */
    size_t flat;              /* its size in floats */
    int ok;
} Planner;

static LayerCuda *plan_next(Planner *p, LayerKind kind, const char *name) {
    LayerCuda *L = &p->layers[p->n++];
    memset(L, 0, sizeof *L);
    L->kind = kind;
    L->name = name;
    L->w_var = L->b_var = -1;
    L->in_n = p->flat;
    return L;
}

static void plan_conv(Planner *p, const char *name, int C_out) {
    LayerCuda *L = plan_next(p, LAYER_CONV, name);
    if (!p->ok || conv2d_init(&L->conv, p->H, p->W, p->C, 5, 5, C_out, 1, 1, PAD_SAME, ACT_RELU) != 0) {
        p->ok = 0;
        return;
    }
    p->H = L->conv.OH;
    p->W = L->conv.OW;
    p->C = C_out;
    p->flat = L->out_n = (size_t)p->H * p->W * p->C;
}

static void plan_pool(Planner *p, const char *name, int k, int stride) {
    LayerCuda *L = plan_next(p, LAYER_POOL, name);
    if (!p->ok || maxpool_init(&L->pool, p->H, p->W, p->C, k, k, stride, stride, PAD_SAME) != 0) {
        p->ok = 0;
        return;
    }
    p->H = L->pool.OH;
    p->W = L->pool.OW;
    p->flat = L->out_n = (size_t)p->H * p->W * p->C;
}

/* cifar10.py: tf.nn.lrn(x, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75). */
static void plan_lrn(Planner *p, const char *name) {
    LayerCuda *L = plan_next(p, LAYER_LRN, name);
    L->lrn.depth_radius = 4;
    L->lrn.bias = 1.0f;
    L->lrn.alpha = (float)(0.001 / 9.0);
    L->lrn.beta = 0.75f;
    L->lrn_C = p->C;
    L->out_n = p->flat;
}

static void plan_dense(Planner *p, const char *name, int n_out, Activation act) {
    LayerCuda *L = plan_next(p, LAYER_DENSE, name);
    L->dense.n_in = (int)p->flat;
    L->dense.n_out = n_out;
    L->dense.act = act;
    p->H = p->W = 1;
    p->C = n_out;
    p->flat = L->out_n = (size_t)n_out;
}

static void plan_mnist(Planner *p, int num_classes) {
    plan_conv(p, "conv1", 32);
    plan_pool(p, "pool1", 2, 2);
    plan_conv(p, "conv2", 64);
    plan_pool(p, "pool2", 2, 2);
    plan_dense(p, "local3", 1024, ACT_RELU);
    plan_dense(p, "local4", 10, ACT_RELU);
    plan_dense(p, "softmax_linear", num_classes, ACT_NONE);
}

static void plan_cifar10(Planner *p, int num_classes) {
    plan_conv(p, "conv1", 64);
    plan_pool(p, "pool1", 3, 2);
    plan_lrn(p, "norm1");
    plan_conv(p, "conv2", 64);
    plan_lrn(p, "norm2");
    plan_pool(p, "pool2", 3, 2);
    plan_dense(p, "local3", 384, ACT_RELU);
    plan_dense(p, "local4", 192, ACT_RELU);
    plan_dense(p, "softmax_linear", num_classes, ACT_NONE);
}

/* Check one variable of the plan against model.c's table. */
static int check_var(const ModelSpec *s, int v, const char *layer, const char *what, int ndim, const int *shape,
                     char *err, size_t err_n_bytes) {
    char name[MODEL_VAR_NAME_MAX];
    snprintf(name, sizeof name, "%s/%s", layer, what);
    int ok = v < s->n_vars && !strcmp(s->vars[v].name, name) && s->vars[v].ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = s->vars[v].shape[i] == shape[i];
    if (!ok) {
        snprintf(err, err_n_bytes,
                 "model %s: the GPU plan (model_cuda.cu) expects variable %d to be '%s' of shape [%d %d %d %d], "
                 "model.c's table has '%s' of shape [%d %d %d %d]: the two plans have drifted apart",
                 s->name, v, name, shape[0], ndim > 1 ? shape[1] : 0, ndim > 2 ? shape[2] : 0, ndim > 3 ? shape[3] : 0,
                 v < s->n_vars ? s->vars[v].name : "(none)", v < s->n_vars ? s->vars[v].shape[0] : 0,
                 v < s->n_vars ? s->vars[v].shape[1] : 0, v < s->n_vars ? s->vars[v].shape[2] : 0,
                 v < s->n_vars ? s->vars[v].shape[3] : 0);
        return -1;
    }
    return 0;
}

/* Build the plan for spec and tie each conv/dense layer to its variables. */
static int build_plan(ModelActsCuda *a, char *err, size_t err_n_bytes) {
    const ModelSpec *s = &a->spec;
    Planner p = {a->layers, 0, s->H, s->W, s->C, (size_t)s->H * s->W * s->C, s->H > 0 && s->W > 0 && s->C > 0};
    if (s->kind == MODEL_MNIST) plan_mnist(&p, s->num_classes);
    else if (s->kind == MODEL_CIFAR10) plan_cifar10(&p, s->num_classes);
    else p.ok = 0;
    if (!p.ok) {
        snprintf(err, err_n_bytes, "model %s cannot take input %dx%dx%d on the GPU", s->name ? s->name : "?", s->H, s->W,
                 s->C);
        return -1;
    }
    a->n_layers = p.n;
    int v = 0;
    for (int i = 0; i < a->n_layers; i++) {
        LayerCuda *L = &a->layers[i];
        if (L->kind == LAYER_CONV) {
            int ws[4] = {L->conv.KH, L->conv.KW, L->conv.C_in, L->conv.C_out}, bs[1] = {L->conv.C_out};
            if (check_var(s, v, L->name, "weights", 4, ws, err, err_n_bytes) ||
                check_var(s, v + 1, L->name, "biases", 1, bs, err, err_n_bytes))
                return -1;
        } else if (L->kind == LAYER_DENSE) {
            int ws[2] = {L->dense.n_in, L->dense.n_out}, bs[1] = {L->dense.n_out};
            if (check_var(s, v, L->name, "weights", 2, ws, err, err_n_bytes) ||
                check_var(s, v + 1, L->name, "biases", 1, bs, err, err_n_bytes))
                return -1;
        } else {
            continue;
        }
        L->w_var = v++;
        L->b_var = v++;
    }
    if (v != s->n_vars) {
        snprintf(err, err_n_bytes, "model %s: the GPU plan has %d variables, model.c's table %d", s->name, v, s->n_vars);
        return -1;
    }
    return 0;
}

/* ---- memory layout ---------------------------------------------------------------------- */

static size_t align256(size_t n_bytes) { return (n_bytes + 255) / 256 * 256; }

/* Carve n_bytes at *off from base (0 on the sizing pass). */
static void *take(uintptr_t base, size_t *off, size_t n_bytes) {
    void *p = (void *)(base + *off);
    *off += align256(n_bytes ? n_bytes : 1);
    return p;
}

/* Assign every buffer its place in the block at base; returns the block's
 * size.  Called once with base 0 to size the block, once to place. */
static size_t layout(ModelActsCuda *a, uintptr_t base) {
    const ModelSpec *s = &a->spec;
    const size_t Bm = (size_t)a->max_batch;
    size_t off = 0, max_act = (size_t)s->H * s->W * s->C;
    for (int i = 0; i < a->n_layers; i++) {
        LayerCuda *L = &a->layers[i];
        if (L->out_n > max_act) max_act = L->out_n;
        L->out = (float *)take(base, &off, sizeof(float) * Bm * L->out_n);
        if (L->kind == LAYER_LRN) L->scale = (float *)take(base, &off, sizeof(float) * Bm * L->out_n);
        if (L->kind == LAYER_POOL) L->argmax = (int32_t *)take(base, &off, sizeof(int32_t) * Bm * L->out_n);
    }
    a->x = (float *)take(base, &off, sizeof(float) * Bm * s->H * s->W * s->C);
    a->labels = (int32_t *)take(base, &off, sizeof(int32_t) * Bm);
    a->probs = (float *)take(base, &off, sizeof(float) * Bm * s->num_classes);
    a->example_loss = (double *)take(base, &off, sizeof(double) * Bm);
    a->grad_a = (float *)take(base, &off, sizeof(float) * Bm * max_act);
    a->grad_b = (float *)take(base, &off, sizeof(float) * Bm * max_act);
    a->conv_scratch = take(base, &off, a->conv_scratch_n_bytes);
    a->l2_partials = (double *)take(base, &off, sizeof(double) * L2_LOSS_CUDA_BLOCKS * (s->n_vars ? s->n_vars : 1));
    a->scalars = (float *)take(base, &off, sizeof(float) * (SCALAR_L2 + s->n_vars));
    return off;
}

/* ---- create / free ------------------------------------------------------------------------ */

extern "C" void model_acts_cuda_free(ModelActsCuda *a) {
    if (!a) return;
    if (a->block) cudaStreamSynchronize(a->stream);
    for (int i = 0; i < a->n_layers; i++) {
        if (a->layers[i].kind == LAYER_CONV) conv2d_cuda_free(&a->layers[i].cconv);
        if (a->layers[i].kind == LAYER_LRN) lrn_cuda_free(&a->layers[i].clrn);
    }
    if (a->block) cudaFree(a->block);
    if (a->loss_pinned) cudaFreeHost(a->loss_pinned);
    free(a);
}

extern "C" ModelActsCuda *model_acts_cuda_create(const ModelSpec *spec, int max_batch, cudnnHandle_t cudnn,
                                                 cublasHandle_t cublas, cudaStream_t stream, int allow_tf32,
                                                 int deterministic_only, char *err, size_t err_n_bytes) {
    if (max_batch < 1) {
        snprintf(err, err_n_bytes, "model_acts_cuda_create: max_batch must be at least 1, got %d", max_batch);
        return NULL;
    }
    ModelActsCuda *a = (ModelActsCuda *)calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, err_n_bytes, "model_acts_cuda_create: out of host memory");
        return NULL;
    }
    a->spec = *spec;
    a->max_batch = max_batch;
    a->cudnn = cudnn;
    a->cublas = cublas;
    a->stream = stream;
    a->sync_check = model_cuda_sync_check_enabled();
    if (CUDNN_SOFT(cudnnSetStream(cudnn, stream), err, err_n_bytes) ||
        CUBLAS_SOFT(cublasSetStream(cublas, stream), err, err_n_bytes) ||
        CUBLAS_SOFT(cublasSetMathMode(cublas, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH), err,
                    err_n_bytes))
        goto fail;
    if (build_plan(a, err, err_n_bytes)) goto fail;
    for (int i = 0; i < a->n_layers; i++) {
        LayerCuda *L = &a->layers[i];
        char e[384];
        int rc = 0;
        if (L->kind == LAYER_CONV) {
            rc = conv2d_cuda_init(&L->cconv, &L->conv, max_batch, allow_tf32, deterministic_only, cudnn, e, sizeof e);
            size_t n = rc ? 0 : conv2d_cuda_scratch_n_bytes(&L->cconv);
            if (n > a->conv_scratch_n_bytes) a->conv_scratch_n_bytes = n;
        } else if (L->kind == LAYER_LRN) {
            rc = lrn_cuda_init(&L->clrn, &L->lrn, L->lrn_C, LRN_CUDA_AUTO, e, sizeof e);
        }
        if (rc) {
            snprintf(err, err_n_bytes, "model %s, layer %s: %s", spec->name, L->name, e);
            goto fail; /* the failed layer freed itself; freeing it again is a no-op */
        }
    }
    a->described_batch = max_batch;
    for (int i = 0; i < a->n_layers; i++) {
        LayerCuda *L = &a->layers[i];
        if (L->kind == LAYER_LRN &&
            lrn_cuda_set_n_pixels(&L->clrn, (size_t)max_batch * L->out_n / L->lrn_C, err, err_n_bytes))
            goto fail;
    }
    a->block_n_bytes = layout(a, 0);
    if (CUDA_SOFT(cudaMalloc(&a->block, a->block_n_bytes), err, err_n_bytes) ||
        CUDA_SOFT(cudaMemsetAsync(a->block, 0, a->block_n_bytes, stream), err, err_n_bytes) ||
        CUDA_SOFT(cudaHostAlloc((void **)&a->loss_pinned, sizeof(float), cudaHostAllocPortable), err, err_n_bytes))
        goto fail;
    layout(a, (uintptr_t)a->block);
    return a;
fail:
    model_acts_cuda_free(a);
    return NULL;
}

extern "C" cudaStream_t model_acts_cuda_stream(const ModelActsCuda *a) { return a->stream; }

extern "C" int model_cuda_sync_check_enabled(void) {
    const char *v = getenv("TOWER_CUDA_SYNC_CHECK");
    return v && *v && strcmp(v, "0") != 0;
}

extern "C" void model_acts_cuda_describe_algos(const ModelActsCuda *a, char *out, size_t out_n_bytes) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < a->n_layers && used < out_n_bytes; i++) {
        const LayerCuda *L = &a->layers[i];
        if (L->kind != LAYER_CONV) continue;
        char d[512];
        conv2d_cuda_describe_algos(&L->cconv, d, sizeof d);
        int k = snprintf(out + used, out_n_bytes - used, "%s%s: %s", used ? " | " : "", L->name, d);
        if (k < 0) break;
        used += (size_t)k;
    }
}

/* TOWER_CUDA_SYNC_CHECK: wait for the stream after layer L's forward or
 * backward and exit naming the layer if anything on it failed, so that an
 * asynchronous kernel fault names its layer instead of surfacing at a
 * later, unrelated wait. */
static void sync_check(const ModelActsCuda *a, const char *layer, const char *pass) {
    if (!a->sync_check) return;
    cudaError_t e = cudaStreamSynchronize(a->stream);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) {
        fprintf(stderr, "CUDA error in model %s, layer %s, %s (TOWER_CUDA_SYNC_CHECK): %s\n", a->spec.name, layer, pass,
                cudaGetErrorString(e));
        fflush(stderr);
        _Exit(1);
    }
}

/* ---- forward / backward ------------------------------------------------------------------------ */

/* Describe batch B in every conv and LRN layer (host-only). */
static int set_batch(ModelActsCuda *a, int B, char *err, size_t err_n_bytes) {
    if (B == a->described_batch) return 0;
    a->described_batch = 0;
    for (int i = 0; i < a->n_layers; i++) {
        LayerCuda *L = &a->layers[i];
        if (L->kind == LAYER_CONV && conv2d_cuda_set_batch(&L->cconv, B, a->cudnn, err, err_n_bytes)) return -1;
        if (L->kind == LAYER_LRN &&
            lrn_cuda_set_n_pixels(&L->clrn, (size_t)B * L->out_n / L->lrn_C, err, err_n_bytes))
            return -1;
    }
    a->described_batch = B;
    return 0;
}

/* One thread: loss = ce + the weight-decay terms in variable order (double,
 * as model.c), for the variables whose bit is set in wd_mask. */
__global__ static void total_loss_kernel(float *scalars, unsigned wd_mask, int n_vars) {
    double loss = scalars[SCALAR_CE];
    for (int v = 0; v < n_vars; v++)
        if (wd_mask >> v & 1u) loss += scalars[SCALAR_L2 + v];
    scalars[SCALAR_LOSS] = (float)loss;
}

extern "C" void model_forward_cuda_async(float *loss_host, float *logits_host, ModelActsCuda *a, const float *x_dev,
                                         const int32_t *labels_dev, const float *params_dev, int B) {
    const ModelSpec *s = &a->spec;
    char e[384];
    a->B = 0;
    if (B < 1 || B > a->max_batch) {
        fprintf(stderr, "model_forward_cuda: batch %d outside [1, %d] (the max_batch of model_acts_cuda_create)\n", B,
                a->max_batch);
        *loss_host = NAN;
        return;
    }
    if (set_batch(a, B, e, sizeof e)) {
        fprintf(stderr, "model_forward_cuda: %s\n", e);
        *loss_host = NAN;
        return;
    }
    a->B = B;
    cudaStream_t st = a->stream;
    CUDA_CHECK(cudaMemcpyAsync(a->x, x_dev, sizeof(float) * B * s->H * s->W * s->C, cudaMemcpyDeviceToDevice, st));
    CUDA_CHECK(cudaMemcpyAsync(a->labels, labels_dev, sizeof(int32_t) * B, cudaMemcpyDeviceToDevice, st));
    const float *in = a->x;
    for (int i = 0; i < a->n_layers; i++) {
        LayerCuda *L = &a->layers[i];
        switch (L->kind) {
        case LAYER_CONV:
            conv2d_forward_cuda(L->out, a->conv_scratch, in, params_dev + s->vars[L->w_var].offset,
                                params_dev + s->vars[L->b_var].offset, &L->cconv, B, a->cudnn, st);
            break;
        case LAYER_POOL:
            maxpool_forward_cuda(L->out, L->argmax, in, &L->pool, B, st);
            break;
        case LAYER_LRN:
            lrn_forward_cuda(L->out, L->scale, in, &L->clrn, (size_t)B * L->out_n / L->lrn_C, L->lrn_C, a->cudnn, st);
            break;
        case LAYER_DENSE:
            dense_forward_cuda(L->out, in, params_dev + s->vars[L->w_var].offset, params_dev + s->vars[L->b_var].offset,
                               &L->dense, B, a->cublas, st);
            break;
        }
        sync_check(a, L->name, "forward");
        in = L->out;
    }
    softmax_xent_forward_cuda(&a->scalars[SCALAR_CE], a->probs, a->example_loss, in, a->labels, B, s->num_classes, st);
    unsigned wd_mask = 0;
    for (int v = 0; v < s->n_vars; v++) {
        if (s->vars[v].wd == 0.0f) continue;
        wd_mask |= 1u << v;
        l2_loss_forward_cuda(&a->scalars[SCALAR_L2 + v], a->l2_partials + (size_t)v * L2_LOSS_CUDA_BLOCKS,
                             params_dev + s->vars[v].offset, s->vars[v].n_floats, s->vars[v].wd, st);
    }
    total_loss_kernel<<<1, 1, 0, st>>>(a->scalars, wd_mask, s->n_vars);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpyAsync(loss_host, &a->scalars[SCALAR_LOSS], sizeof(float), cudaMemcpyDeviceToHost, st));
    if (logits_host)
        CUDA_CHECK(cudaMemcpyAsync(logits_host, in, sizeof(float) * B * s->num_classes, cudaMemcpyDeviceToHost, st));
}

extern "C" float model_forward_cuda(float *logits_host, ModelActsCuda *a, const float *x_dev,
                                    const int32_t *labels_dev, const float *params_dev, int B) {
    model_forward_cuda_async(a->loss_pinned, logits_host, a, x_dev, labels_dev, params_dev, B);
    if (a->B == 0) return NAN;
    CUDA_CHECK(cudaStreamSynchronize(a->stream));
    return *a->loss_pinned;
}

extern "C" void model_backward_cuda(float *dparams_dev, ModelActsCuda *a, const float *params_dev) {
    const ModelSpec *s = &a->spec;
    const int B = a->B;
    cudaStream_t st = a->stream;
    if (B < 1) {
        fprintf(stderr, "model_backward_cuda: no successful model_forward_cuda on this workspace; gradient set to 0\n");
        CUDA_CHECK(cudaMemsetAsync(dparams_dev, 0, sizeof(float) * s->n_params, st));
        return;
    }
    float *g = a->grad_a, *dst = a->grad_b;
    softmax_xent_backward_cuda(g, a->probs, a->labels, 1.0f, B, s->num_classes, st);
    for (int i = a->n_layers - 1; i >= 0; i--) {
        LayerCuda *L = &a->layers[i];
        const float *in = i > 0 ? a->layers[i - 1].out : a->x;
        float *dinp = i > 0 ? dst : NULL;
        switch (L->kind) {
        case LAYER_CONV:
            conv2d_backward_cuda(dinp, dparams_dev + s->vars[L->w_var].offset, dparams_dev + s->vars[L->b_var].offset,
                                 a->conv_scratch, L->out, g, in, params_dev + s->vars[L->w_var].offset, &L->cconv, B,
                                 a->cudnn, st);
            break;
        case LAYER_POOL:
            if (dinp) maxpool_backward_cuda(dinp, L->argmax, g, &L->pool, B, st);
            break;
        case LAYER_LRN:
            if (dinp)
                lrn_backward_cuda(dinp, L->scale, L->out, g, in, &L->clrn, (size_t)B * L->out_n / L->lrn_C, L->lrn_C,
                                  a->cudnn, st);
            break;
        case LAYER_DENSE:
            /* The pre-activation gradient overwrites g in place (g is ours). */
            dense_backward_cuda(dinp, dparams_dev + s->vars[L->w_var].offset, dparams_dev + s->vars[L->b_var].offset, g,
                                L->out, g, in, params_dev + s->vars[L->w_var].offset, &L->dense, B, a->cublas, st);
            break;
        }
        sync_check(a, L->name, "backward");
        float *tmp = g;
        g = dst;
        dst = tmp;
    }
    for (int v = 0; v < s->n_vars; v++)
        if (s->vars[v].wd != 0.0f)
            l2_loss_backward_cuda(dparams_dev + s->vars[v].offset, params_dev + s->vars[v].offset, s->vars[v].n_floats,
                                  s->vars[v].wd, st);
}
