/* bench_bn_cuda.cu — Tower's batch-norm kernels against cuDNN's, training
 * mode, NHWC float32, on the batch-norm layers of the networks that matter
 * (not a test; needs a GPU).
 *
 * Where it sits: bench/, built with CUDA only (bench/gpu.cmake); the profile
 * stage of scripts/gpu-check.sh runs it.  It answers issue 15: keep our own
 * kernels (model/batchnorm_cuda.cu) or call cuDNN's?
 *
 * The shapes come from the networks themselves: each network of --nets is
 * built through model/graph.h (graph_build, unfused) and every BATCHNORM
 * node's input (H, W, C) and epsilon is taken, equal ones counted once with
 * their multiplicity.  resnet20 and mobilenet_v2 at 32x32x3, resnet50 at
 * 224x224x3, each at --batch examples (default 128).
 *
 * Per shape, on the same random inputs (x with a per-channel shift and
 * scale, some channels' variance near epsilon; dy partly correlated with x):
 *   ours        batchnorm_forward_train_cuda + batchnorm_update_moving_cuda
 *               (the node's training forward), batchnorm_backward_cuda
 *   spatial     cudnnBatchNormalizationForwardTraining / ...Backward,
 *               CUDNN_BATCHNORM_SPATIAL
 *   persistent  the same, CUDNN_BATCHNORM_SPATIAL_PERSISTENT
 *   ex_spatial  cudnnBatchNormalizationForwardTrainingEx / ...BackwardEx,
 *               CUDNN_BATCHNORM_OPS_BN, SPATIAL
 *   ex_persist  the same, SPATIAL_PERSISTENT (cuDNN's NHWC kernels)
 * cuDNN gets the node's epsilon (its convention is Keras's: 1 / sqrt(var +
 * eps) with the biased batch variance; its saved inverse variance is our
 * inv_std), running averages updated with factor 1 - momentum, and backward
 * ADDS the parameter gradients (betaParamDiff = 1), Tower's convention.
 * Correctness first: each cuDNN variant once against ours; the max relative
 * difference of out, dinp, dgamma and dbeta, each max|cudnn - ours| /
 * max|ours| over the tensor, is printed (with that of the saved mean and
 * inverse variance, for information), and above 1e-3 the run exits 1.  A
 * variant cuDNN refuses for a shape is shown "-" and left out of the
 * totals.  Then --warmup untimed and --repeat timed rounds, the
 * implementations interleaved within a round, each call alone between two
 * cudaEvents; a shape's figure is the median of its repeats, in ms.
 *
 * Output: one line per shape (forward and backward ms of each
 * implementation, the worst relative difference); per network the sum over
 * its batch-norm layers (multiplicity counted) of forward + backward, ours
 * against each cuDNN variant, and a line
 *   BNBENCH net=<name> ours_ms=<x> cudnn_ms=<y> cudnn_best=<variant> ...
 * where cudnn_ms is the variant with the smallest network total among those
 * that ran every shape.
 *
 * What it does not do: time the fused activation (graph_fuse folds the
 * following ReLU / ReLU6 into the node; cuDNN's OPS_BN_ACTIVATION would be
 * its twin), synchronised batch norm across towers, or half precision.
 * Without a GPU it prints one line and exits 77; --list prints the shapes
 * (no GPU needed).
 */
#include "model/layers_cuda.h"
#include "base/cuda_check.h"

extern "C" {
#include "model/graph.h"
}
#include "bench/bench_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <cudnn.h>

#define BNB_MAX_SHAPES GRAPH_MAX_NODES
#define BNB_TOLERANCE 1e-3
#define BNB_SEED 20261126u

/* ---- the networks ---------------------------------------------------------- */

typedef struct {
    const char *name;      /* a name of model/nets/nets.c's table */
    int H, W, C;           /* input of one example */
    int num_classes;
} BenchNet;

static const BenchNet bench_nets[] = {
    {"resnet20", 32, 32, 3, 10},
    {"mobilenet_v2", 32, 32, 3, 10},
    {"resnet50", 224, 224, 3, 1000},
};
#define BNB_N_NETS ((int)(sizeof bench_nets / sizeof bench_nets[0]))

typedef struct {
    int H, W, C;           /* the node's input, one example */
    float epsilon;
    double momentum;
    int count;             /* batch-norm layers of this shape in the network */
} BnShape;

/* The network's batch-norm shapes, equal (H, W, C, epsilon) counted once,
 * in graph order; returns how many, or -1 with a line on stderr. */
static int net_bn_shapes(const BenchNet *net, BnShape *shapes, int *n_layers) {
    ModelSpec *spec = (ModelSpec *)calloc(1, sizeof *spec);
    Graph *g = (Graph *)calloc(1, sizeof *g);
    char err[256] = "";
    int n = -1;
    if (!spec || !g) {
        fprintf(stderr, "bench_bn_cuda: out of host memory\n");
    } else if (model_spec_init(spec, net->name, net->H, net->W, net->C, net->num_classes, err, sizeof err) != 0) {
        fprintf(stderr, "bench_bn_cuda: %s: %s\n", net->name, err);
    } else if (graph_build(g, spec) != 0) {
        fprintf(stderr, "bench_bn_cuda: %s: graph_build failed\n", net->name);
    } else {
        n = 0;
        *n_layers = 0;
        for (int i = 0; i < g->n_nodes; i++) {
            const Node *node = &g->nodes[i];
            if (node->kind != NODE_BATCHNORM) continue;
            (*n_layers)++;
            int j = 0;
            while (j < n && !(shapes[j].H == node->in.H && shapes[j].W == node->in.W && shapes[j].C == node->in.C &&
                              shapes[j].epsilon == node->bn.epsilon))
                j++;
            if (j == n) {
                shapes[n].H = node->in.H;
                shapes[n].W = node->in.W;
                shapes[n].C = node->in.C;
                shapes[n].epsilon = node->bn.epsilon;
                shapes[n].momentum = node->bn.momentum;
                shapes[n].count = 0;
                n++;
            }
            shapes[j].count++;
        }
    }
    free(g);
    free(spec);
    return n;
}

/* ---- the implementations ----------------------------------------------------- */

typedef enum { API_OURS, API_CUDNN, API_CUDNN_EX } BnApi;

typedef struct {
    const char *name;
    BnApi api;
    cudnnBatchNormMode_t mode;   /* cuDNN's; unused by ours */
} BnImpl;

static const BnImpl bn_impls[] = {
    {"ours", API_OURS, CUDNN_BATCHNORM_SPATIAL},
    {"spatial", API_CUDNN, CUDNN_BATCHNORM_SPATIAL},
    {"persistent", API_CUDNN, CUDNN_BATCHNORM_SPATIAL_PERSISTENT},
    {"ex_spatial", API_CUDNN_EX, CUDNN_BATCHNORM_SPATIAL},
    {"ex_persist", API_CUDNN_EX, CUDNN_BATCHNORM_SPATIAL_PERSISTENT},
};
#define BNB_N_IMPLS ((int)(sizeof bn_impls / sizeof bn_impls[0]))

/* One shape's device state.  Tensors (n_rows, C) = (B, H, W, C); vectors (C). */
typedef struct {
    BatchNorm bn;
    size_t n_rows;                      /* B * H * W */
    cudnnHandle_t cudnn;                /* bound to stream */
    cudaStream_t stream;
    cudnnTensorDescriptor_t x_desc;     /* (B, C, H, W) described NHWC: x, y, dy, dx */
    cudnnTensorDescriptor_t p_desc[BNB_N_IMPLS]; /* (1, C, 1, 1) derived for each variant's mode */
    float *x, *dy;                      /* (n_rows, C) inputs */
    float *y_ours, *dx_ours;            /* (n_rows, C) ours' outputs */
    float *y, *dx;                      /* (n_rows, C) the cuDNN variant's outputs */
    float *gamma, *beta;                /* (C) */
    float *mean, *var, *inv_std;        /* (C) ours' batch statistics */
    float *moving_mean, *moving_var;    /* (C) ours' running averages */
    float *dgamma_ours, *dbeta_ours;    /* (C) ADDED by ours */
    float *save_mean, *save_inv_var;    /* (C) cuDNN's saved statistics */
    float *run_mean, *run_var;          /* (C) cuDNN's running averages */
    float *dgamma, *dbeta;              /* (C) ADDED by cuDNN */
    double *scratch;                    /* batchnorm_cuda_scratch_n_doubles(C) */
    void *workspace;                    /* the Ex calls', shared */
    size_t workspace_n_bytes;
    void *reserve[BNB_N_IMPLS];         /* each Ex variant's reserve space, forward to backward */
    size_t reserve_n_bytes[BNB_N_IMPLS];
} BnRun;

static const float ONE = 1.0f, ZERO = 0.0f;

/* Forward of implementation i; ours always succeeds (it exits on a CUDA error). */
static cudnnStatus_t bn_forward(const BnRun *r, int i) {
    const BnImpl *im = &bn_impls[i];
    const double eps = (double)r->bn.epsilon, factor = 1.0 - r->bn.momentum;
    switch (im->api) {
    case API_OURS:
        batchnorm_forward_train_cuda(r->y_ours, r->mean, r->var, r->inv_std, r->scratch, r->x, r->gamma, r->beta,
                                     &r->bn, r->n_rows, r->stream);
        batchnorm_update_moving_cuda(r->moving_mean, r->moving_var, r->mean, r->var, r->bn.momentum, r->bn.C,
                                     r->stream);
        return CUDNN_STATUS_SUCCESS;
    case API_CUDNN:
        return cudnnBatchNormalizationForwardTraining(r->cudnn, im->mode, &ONE, &ZERO, r->x_desc, r->x, r->x_desc, r->y,
                                                      r->p_desc[i], r->gamma, r->beta, factor, r->run_mean,
                                                      r->run_var, eps, r->save_mean, r->save_inv_var);
    case API_CUDNN_EX:
        return cudnnBatchNormalizationForwardTrainingEx(
            r->cudnn, im->mode, CUDNN_BATCHNORM_OPS_BN, &ONE, &ZERO, r->x_desc, r->x, NULL, NULL, r->x_desc, r->y,
            r->p_desc[i], r->gamma, r->beta, factor, r->run_mean, r->run_var, eps, r->save_mean, r->save_inv_var,
            NULL, r->workspace, r->workspace_n_bytes, r->reserve[i], r->reserve_n_bytes[i]);
    }
    return CUDNN_STATUS_BAD_PARAM;
}

/* Backward of implementation i, after its forward: dx WRITTEN, dgamma and dbeta ADDED. */
static cudnnStatus_t bn_backward(const BnRun *r, int i) {
    const BnImpl *im = &bn_impls[i];
    const double eps = (double)r->bn.epsilon;
    switch (im->api) {
    case API_OURS:
        batchnorm_backward_cuda(r->dx_ours, r->dgamma_ours, r->dbeta_ours, r->scratch, r->dy, r->x, r->mean,
                                r->inv_std, r->gamma, &r->bn, r->n_rows, r->stream);
        return CUDNN_STATUS_SUCCESS;
    case API_CUDNN:
        return cudnnBatchNormalizationBackward(r->cudnn, im->mode, &ONE, &ZERO, &ONE, &ONE, r->x_desc, r->x,
                                               r->x_desc, r->dy, r->x_desc, r->dx, r->p_desc[i], r->gamma, r->dgamma,
                                               r->dbeta, eps, r->save_mean, r->save_inv_var);
    case API_CUDNN_EX:
        return cudnnBatchNormalizationBackwardEx(
            r->cudnn, im->mode, CUDNN_BATCHNORM_OPS_BN, &ONE, &ZERO, &ONE, &ONE, r->x_desc, r->x, r->x_desc, r->y,
            r->x_desc, r->dy, NULL, NULL, r->x_desc, r->dx, r->p_desc[i], r->gamma, r->beta, r->dgamma, r->dbeta,
            eps, r->save_mean, r->save_inv_var, NULL, r->workspace, r->workspace_n_bytes, r->reserve[i],
            r->reserve_n_bytes[i]);
    }
    return CUDNN_STATUS_BAD_PARAM;
}

/* ---- inputs and comparisons ----------------------------------------------------- */

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

static unsigned grid_for(size_t n) {
    const size_t b = (n + 255) / 256;
    return (unsigned)(b < 4096 ? (b ? b : 1) : 4096);
}

/* Uniform in [-1, 1) from (seed, i): splitmix64's finaliser. */
__device__ static float hash_uniform(uint64_t seed, uint64_t i) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

/* x: (n / C, C) = shift_c + scale_c * u, scale_c in [0.02, 2] (some
 * channels' variance near epsilon, where its convention shows); dy: (n / C,
 * C) = 0.5 u' + a_c + b_c x, so dgamma and dbeta are far from zero. */
__global__ static void fill_inputs_kernel(float *x, float *dy, size_t n, int C, uint64_t seed) {
    GRID_STRIDE(i, n) {
        const int c = (int)(i % C);
        const float shift = 2.0f * hash_uniform(seed + 1, c);
        const float scale = 0.02f + 0.99f * (1.0f + hash_uniform(seed + 2, c));
        const float xv = shift + scale * hash_uniform(seed, i);
        x[i] = xv;
        dy[i] = 0.5f * hash_uniform(seed + 3, i) + hash_uniform(seed + 4, c) + hash_uniform(seed + 5, c) * xv;
    }
}

/* gamma, beta: (C). */
__global__ static void fill_params_kernel(float *gamma, float *beta, int C, uint64_t seed) {
    GRID_STRIDE(c, (size_t)C) {
        gamma[c] = 1.0f + 0.5f * hash_uniform(seed + 6, c);
        beta[c] = 0.5f * hash_uniform(seed + 7, c);
    }
}

/* out[0] = max |a - ref|, out[1] = max |ref| (float bits: non-negative
 * floats order as their unsigned bits), out[2] = 1 if any a or ref is NaN.
 * a, ref: (n). */
__global__ static void diff_max_kernel(unsigned *out, const float *a, const float *ref, size_t n) {
    float d = 0.0f, m = 0.0f;
    unsigned nan = 0;
    GRID_STRIDE(i, n) {
        const float e = fabsf(a[i] - ref[i]);
        if (e != e) nan = 1;
        else d = fmaxf(d, e);
        m = fmaxf(m, fabsf(ref[i]));
    }
    atomicMax(&out[0], __float_as_uint(d));
    atomicMax(&out[1], __float_as_uint(m));
    if (nan) atomicOr(&out[2], 1u);
}

/* max |a - ref| / max |ref| over n floats (NaN if either has one); counters: 3 device unsigned. */
static double max_rel_diff(const float *a, const float *ref, size_t n, unsigned *counters, cudaStream_t stream) {
    unsigned h[3];
    CUDA_CHECK(cudaMemsetAsync(counters, 0, 3 * sizeof(unsigned), stream));
    diff_max_kernel<<<grid_for(n), 256, 0, stream>>>(counters, a, ref, n);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpyAsync(h, counters, sizeof h, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    if (h[2]) return NAN;
    float d, m;
    memcpy(&d, &h[0], sizeof d);
    memcpy(&m, &h[1], sizeof m);
    return m > 0.0f ? (double)d / (double)m : (d > 0.0f ? INFINITY : 0.0);
}

/* ---- one shape ------------------------------------------------------------------ */

typedef struct {
    int ok[BNB_N_IMPLS];           /* 1: ran (ours always) */
    double fwd_ms[BNB_N_IMPLS];    /* median over the repeats */
    double bwd_ms[BNB_N_IMPLS];
    double worst_rel;              /* over the cuDNN variants and out, dinp, dgamma, dbeta */
    const char *worst_impl, *worst_tensor;
    double stats_rel;              /* saved mean and inverse variance, for information */
} ShapeResult;

static void *device_alloc(size_t n_bytes) {
    void *p = NULL;
    CUDA_CHECK(cudaMalloc(&p, n_bytes ? n_bytes : 1));
    return p;
}

static void run_setup(BnRun *r, const BnShape *s, int B, cudnnHandle_t cudnn, cudaStream_t stream) {
    memset(r, 0, sizeof *r);
    const int C = s->C;
    r->bn.C = C;
    r->bn.momentum = s->momentum;
    r->bn.epsilon = s->epsilon;
    r->bn.act = ACT_NONE;
    r->n_rows = (size_t)B * s->H * s->W;
    r->cudnn = cudnn;
    r->stream = stream;
    const size_t tensor_n_bytes = r->n_rows * C * sizeof(float), vector_n_bytes = (size_t)C * sizeof(float);
    float **tensors[] = {&r->x, &r->dy, &r->y_ours, &r->dx_ours, &r->y, &r->dx};
    for (size_t k = 0; k < sizeof tensors / sizeof tensors[0]; k++) *tensors[k] = (float *)device_alloc(tensor_n_bytes);
    float **vectors[] = {&r->gamma,     &r->beta,       &r->mean,         &r->var,       &r->inv_std,
                         &r->moving_mean, &r->moving_var, &r->dgamma_ours, &r->dbeta_ours, &r->save_mean,
                         &r->save_inv_var, &r->run_mean,  &r->run_var,     &r->dgamma,    &r->dbeta};
    for (size_t k = 0; k < sizeof vectors / sizeof vectors[0]; k++) {
        *vectors[k] = (float *)device_alloc(vector_n_bytes);
        CUDA_CHECK(cudaMemsetAsync(*vectors[k], 0, vector_n_bytes, stream));
    }
    r->scratch = (double *)device_alloc(batchnorm_cuda_scratch_n_doubles(C) * sizeof(double));
    fill_inputs_kernel<<<grid_for(r->n_rows * C), 256, 0, stream>>>(r->x, r->dy, r->n_rows * C, C, BNB_SEED);
    CUDA_CHECK(cudaGetLastError());
    fill_params_kernel<<<grid_for((size_t)C), 256, 0, stream>>>(r->gamma, r->beta, C, BNB_SEED);
    CUDA_CHECK(cudaGetLastError());
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&r->x_desc));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(r->x_desc, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, B, C, s->H, s->W));
    for (int i = 0; i < BNB_N_IMPLS; i++) {
        CUDNN_CHECK(cudnnCreateTensorDescriptor(&r->p_desc[i]));
        CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(r->p_desc[i], r->x_desc, bn_impls[i].mode));
    }
}

/* The Ex variant i's workspace (grown to the largest) and reserve space;
 * 0, or cuDNN's status when it refuses the shape. */
static cudnnStatus_t run_setup_ex(BnRun *r, int i) {
    const cudnnBatchNormMode_t mode = bn_impls[i].mode;
    size_t fwd_n_bytes = 0, bwd_n_bytes = 0;
    cudnnStatus_t st = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
        r->cudnn, mode, CUDNN_BATCHNORM_OPS_BN, r->x_desc, NULL, r->x_desc, r->p_desc[i], NULL, &fwd_n_bytes);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnGetBatchNormalizationBackwardExWorkspaceSize(r->cudnn, mode, CUDNN_BATCHNORM_OPS_BN, r->x_desc,
                                                               r->x_desc, r->x_desc, NULL, r->x_desc, r->p_desc[i],
                                                               NULL, &bwd_n_bytes);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(r->cudnn, mode, CUDNN_BATCHNORM_OPS_BN, NULL,
                                                                  r->x_desc, &r->reserve_n_bytes[i]);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    const size_t need = fwd_n_bytes > bwd_n_bytes ? fwd_n_bytes : bwd_n_bytes;
    if (need > r->workspace_n_bytes) {
        CUDA_CHECK(cudaFree(r->workspace));
        r->workspace = device_alloc(need);
        r->workspace_n_bytes = need;
    }
    r->reserve[i] = device_alloc(r->reserve_n_bytes[i]);
    return CUDNN_STATUS_SUCCESS;
}

static void run_free(BnRun *r) {
    void *bufs[] = {r->x,        r->dy,          r->y_ours,      r->dx_ours,     r->y,         r->dx,
                    r->gamma,    r->beta,        r->mean,        r->var,         r->inv_std,   r->moving_mean,
                    r->moving_var, r->dgamma_ours, r->dbeta_ours, r->save_mean,  r->save_inv_var, r->run_mean,
                    r->run_var,  r->dgamma,      r->dbeta,       r->scratch,     r->workspace};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) CUDA_CHECK(cudaFree(bufs[k]));
    for (int i = 0; i < BNB_N_IMPLS; i++) {
        CUDA_CHECK(cudaFree(r->reserve[i]));
        CUDNN_CHECK(cudnnDestroyTensorDescriptor(r->p_desc[i]));
    }
    CUDNN_CHECK(cudnnDestroyTensorDescriptor(r->x_desc));
}

/* Run each cuDNN variant once against ours; set res->ok and the differences. */
static void check_shape(BnRun *r, ShapeResult *res, unsigned *counters) {
    const size_t n = r->n_rows * r->bn.C, vector_n_bytes = (size_t)r->bn.C * sizeof(float);
    CUDA_CHECK(cudaMemsetAsync(r->dgamma_ours, 0, vector_n_bytes, r->stream));
    CUDA_CHECK(cudaMemsetAsync(r->dbeta_ours, 0, vector_n_bytes, r->stream));
    bn_forward(r, 0);
    bn_backward(r, 0);
    res->ok[0] = 1;
    res->worst_rel = 0.0;
    res->stats_rel = 0.0;
    res->worst_impl = res->worst_tensor = "-";
    for (int i = 1; i < BNB_N_IMPLS; i++) {
        cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
        if (bn_impls[i].api == API_CUDNN_EX) st = run_setup_ex(r, i);
        CUDA_CHECK(cudaMemsetAsync(r->dgamma, 0, vector_n_bytes, r->stream));
        CUDA_CHECK(cudaMemsetAsync(r->dbeta, 0, vector_n_bytes, r->stream));
        CUDA_CHECK(cudaMemsetAsync(r->run_mean, 0, vector_n_bytes, r->stream));
        CUDA_CHECK(cudaMemsetAsync(r->run_var, 0, vector_n_bytes, r->stream));
        if (st == CUDNN_STATUS_SUCCESS) st = bn_forward(r, i);
        if (st == CUDNN_STATUS_SUCCESS) st = bn_backward(r, i);
        if (st != CUDNN_STATUS_SUCCESS) {
            printf("    %s refused: %s\n", bn_impls[i].name, cudnnGetErrorString(st));
            continue;
        }
        res->ok[i] = 1;
        const struct {
            const char *name;
            const float *a, *ref;
            size_t n;
        } pairs[] = {{"out", r->y, r->y_ours, n},
                     {"dinp", r->dx, r->dx_ours, n},
                     {"dgamma", r->dgamma, r->dgamma_ours, (size_t)r->bn.C},
                     {"dbeta", r->dbeta, r->dbeta_ours, (size_t)r->bn.C}};
        for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
            const double rel = max_rel_diff(pairs[k].a, pairs[k].ref, pairs[k].n, counters, r->stream);
            if (!(rel <= res->worst_rel)) {
                res->worst_rel = rel;
                res->worst_impl = bn_impls[i].name;
                res->worst_tensor = pairs[k].name;
            }
        }
        const double rm = max_rel_diff(r->save_mean, r->mean, (size_t)r->bn.C, counters, r->stream);
        const double ri = max_rel_diff(r->save_inv_var, r->inv_std, (size_t)r->bn.C, counters, r->stream);
        if (!(rm <= res->stats_rel)) res->stats_rel = rm;
        if (!(ri <= res->stats_rel)) res->stats_rel = ri;
    }
}

/* --warmup + --repeat rounds, the implementations interleaved; medians into res. */
static void time_shape(BnRun *r, ShapeResult *res, int warmup, int repeat, cudaEvent_t ev0, cudaEvent_t ev1) {
    double *samples_ms = (double *)malloc((size_t)2 * BNB_N_IMPLS * repeat * sizeof(double));
    if (!samples_ms) {
        fprintf(stderr, "bench_bn_cuda: out of host memory\n");
        exit(2);
    }
    for (int round = 0; round < warmup + repeat; round++)
        for (int dir = 0; dir < 2; dir++)
            for (int i = 0; i < BNB_N_IMPLS; i++) {
                if (!res->ok[i]) continue;
                CUDA_CHECK(cudaEventRecord(ev0, r->stream));
                CUDNN_CHECK(dir == 0 ? bn_forward(r, i) : bn_backward(r, i));
                CUDA_CHECK(cudaEventRecord(ev1, r->stream));
                CUDA_CHECK(cudaEventSynchronize(ev1));
                float ms = 0.0f;
                CUDA_CHECK(cudaEventElapsedTime(&ms, ev0, ev1));
                if (round >= warmup) samples_ms[((size_t)dir * BNB_N_IMPLS + i) * repeat + (round - warmup)] = ms;
            }
    for (int i = 0; i < BNB_N_IMPLS; i++) {
        if (!res->ok[i]) continue;
        res->fwd_ms[i] = median(samples_ms + (size_t)i * repeat, repeat);
        res->bwd_ms[i] = median(samples_ms + ((size_t)BNB_N_IMPLS + i) * repeat, repeat);
    }
    free(samples_ms);
}

/* ---- main ------------------------------------------------------------------------ */

#define BNB_USAGE \
    "usage: bench_bn_cuda [--nets resnet20,mobilenet_v2,resnet50] [--repeat N (20)] [--warmup N (3)]" \
    " [--batch B (128)]\n" \
    "       bench_bn_cuda --list [--nets ...]   (the batch-norm shapes only; needs no GPU)\n"

/* One line saying why, the usage, and 2. */
static int usage(const char *why) {
    fprintf(stderr, "bench_bn_cuda: %s\n" BNB_USAGE, why);
    return 2;
}

/* A positive int from s, or -1. */
static int parse_positive(const char *s) {
    char *end = NULL;
    long v = strtol(s, &end, 10);
    return (end != s && *end == '\0' && v > 0 && v <= 1000000) ? (int)v : -1;
}

int main(int argc, char **argv) {
    const char *nets_arg = "resnet20,mobilenet_v2,resnet50";
    int repeat = 20, warmup = 3, batch = 128, list_only = 0;
    for (int a = 1; a < argc; a++) {
        const char *flag = argv[a];
        if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
            printf(BNB_USAGE);
            return 0;
        }
        if (strcmp(flag, "--list") == 0) {
            list_only = 1;
            continue;
        }
        if (a + 1 >= argc) return usage("a flag without its value, or an unknown argument");
        const char *val = argv[++a];
        if (strcmp(flag, "--nets") == 0) nets_arg = val;
        else if (strcmp(flag, "--repeat") == 0) repeat = parse_positive(val);
        else if (strcmp(flag, "--warmup") == 0) warmup = parse_positive(val);
        else if (strcmp(flag, "--batch") == 0) batch = parse_positive(val);
        else return usage("unknown flag");
        if (repeat < 0 || warmup < 0 || batch < 0)
            return usage("--repeat, --warmup and --batch take a positive integer");
    }
    int wanted[BNB_N_NETS] = {0};
    char names[256];
    snprintf(names, sizeof names, "%s", nets_arg);
    for (char *tok = strtok(names, ","); tok; tok = strtok(NULL, ",")) {
        int k = 0;
        while (k < BNB_N_NETS && strcmp(bench_nets[k].name, tok) != 0) k++;
        if (k == BNB_N_NETS) return usage("--nets takes resnet20, mobilenet_v2, resnet50 (comma-separated)");
        wanted[k] = 1;
    }
    static BnShape shapes[BNB_MAX_SHAPES];
    if (list_only) {
        for (int k = 0; k < BNB_N_NETS; k++) {
            if (!wanted[k]) continue;
            int n_layers = 0;
            const int n_shapes = net_bn_shapes(&bench_nets[k], shapes, &n_layers);
            if (n_shapes < 0) return 2;
            printf("%s at %dx%dx%d: %d batch-norm layers, %d shapes (HxWxC n eps):\n", bench_nets[k].name,
                   bench_nets[k].H, bench_nets[k].W, bench_nets[k].C, n_layers, n_shapes);
            for (int s = 0; s < n_shapes; s++)
                printf("  %dx%dx%d %d %g\n", shapes[s].H, shapes[s].W, shapes[s].C, shapes[s].count,
                       shapes[s].epsilon);
        }
        return 0;
    }

    int n_devices = 0;
    const cudaError_t dev_err = cudaGetDeviceCount(&n_devices);
    if (dev_err != cudaSuccess || n_devices == 0) {
        printf("bench_bn_cuda: no GPU (%s): skipped\n",
               dev_err != cudaSuccess ? cudaGetErrorString(dev_err) : "no device");
        return 77;
    }
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("bench_bn_cuda: %s, cuDNN %zu, batch %d, median of %d after %d warm-up, ms per call\n", prop.name,
           cudnnGetVersion(), batch, repeat, warmup);

    cudaStream_t stream;
    cudnnHandle_t cudnn;
    cudaEvent_t ev0, ev1;
    unsigned *counters = NULL;
    CUDA_CHECK(cudaStreamCreate(&stream));
    CUDNN_CHECK(cudnnCreate(&cudnn));
    CUDNN_CHECK(cudnnSetStream(cudnn, stream));
    CUDA_CHECK(cudaEventCreate(&ev0));
    CUDA_CHECK(cudaEventCreate(&ev1));
    CUDA_CHECK(cudaMalloc((void **)&counters, 3 * sizeof(unsigned)));

    int failed = 0;
    for (int k = 0; k < BNB_N_NETS; k++) {
        if (!wanted[k]) continue;
        const BenchNet *net = &bench_nets[k];
        int n_layers = 0;
        const int n_shapes = net_bn_shapes(net, shapes, &n_layers);
        if (n_shapes < 0) return 2;
        printf("\n%s at %dx%dx%d, batch %d: %d batch-norm layers, %d shapes\n", net->name, net->H, net->W, net->C,
               batch, n_layers, n_shapes);
        printf("  %-13s %3s %9s |", "HxWxC", "n", "eps");
        for (int i = 0; i < BNB_N_IMPLS; i++) printf(" %10s", bn_impls[i].name);
        printf(" |");
        for (int i = 0; i < BNB_N_IMPLS; i++) printf(" %10s", bn_impls[i].name);
        printf(" | max rel diff\n");
        printf("  %-27s | %-54s | %-54s |\n", "", "forward ms", "backward ms");

        double total_ms[BNB_N_IMPLS] = {0}, total_fwd_ms[BNB_N_IMPLS] = {0}, total_bwd_ms[BNB_N_IMPLS] = {0};
        int all_ok[BNB_N_IMPLS];
        for (int i = 0; i < BNB_N_IMPLS; i++) all_ok[i] = 1;
        for (int s = 0; s < n_shapes; s++) {
            BnRun run;
            ShapeResult res;
            memset(&res, 0, sizeof res);
            run_setup(&run, &shapes[s], batch, cudnn, stream);
            check_shape(&run, &res, counters);
            time_shape(&run, &res, warmup, repeat, ev0, ev1);
            run_free(&run);

            char hwc[32];
            snprintf(hwc, sizeof hwc, "%dx%dx%d", shapes[s].H, shapes[s].W, shapes[s].C);
            printf("  %-13s %3d %9.3g |", hwc, shapes[s].count, shapes[s].epsilon);
            for (int dir = 0; dir < 2; dir++) {
                for (int i = 0; i < BNB_N_IMPLS; i++) {
                    if (res.ok[i]) printf(" %10.4f", dir == 0 ? res.fwd_ms[i] : res.bwd_ms[i]);
                    else printf(" %10s", "-");
                }
                printf(" |");
            }
            printf(" %.2e (%s %s), stats %.2e\n", res.worst_rel, res.worst_impl, res.worst_tensor, res.stats_rel);
            if (!(res.worst_rel <= BNB_TOLERANCE)) {
                printf("  FAIL: %s's %s differs from ours by %.2e relative (> %.0e) at %s\n", res.worst_impl,
                       res.worst_tensor, res.worst_rel, BNB_TOLERANCE, hwc);
                failed = 1;
            }
            for (int i = 0; i < BNB_N_IMPLS; i++) {
                if (!res.ok[i]) {
                    all_ok[i] = 0;
                    continue;
                }
                total_fwd_ms[i] += shapes[s].count * res.fwd_ms[i];
                total_bwd_ms[i] += shapes[s].count * res.bwd_ms[i];
                total_ms[i] += shapes[s].count * (res.fwd_ms[i] + res.bwd_ms[i]);
            }
        }
        int best = -1;
        printf("  total over %d layers, forward + backward ms:", n_layers);
        for (int i = 0; i < BNB_N_IMPLS; i++) {
            if (!all_ok[i]) {
                printf(" %s -", bn_impls[i].name);
                continue;
            }
            printf(" %s %.3f (%.3f + %.3f)", bn_impls[i].name, total_ms[i], total_fwd_ms[i], total_bwd_ms[i]);
            if (i > 0 && (best < 0 || total_ms[i] < total_ms[best])) best = i;
        }
        printf("\n");
        if (best < 0)
            printf("BNBENCH net=%s ours_ms=%.3f cudnn_ms=nan cudnn_best=none ours_fwd_ms=%.3f ours_bwd_ms=%.3f\n",
                   net->name, total_ms[0], total_fwd_ms[0], total_bwd_ms[0]);
        else
            printf("BNBENCH net=%s ours_ms=%.3f cudnn_ms=%.3f cudnn_best=%s ours_fwd_ms=%.3f ours_bwd_ms=%.3f "
                   "cudnn_fwd_ms=%.3f cudnn_bwd_ms=%.3f layers=%d batch=%d\n",
                   net->name, total_ms[0], total_ms[best], bn_impls[best].name, total_fwd_ms[0], total_bwd_ms[0],
                   total_fwd_ms[best], total_bwd_ms[best], n_layers, batch);
    }

    CUDA_CHECK(cudaFree(counters));
    CUDA_CHECK(cudaEventDestroy(ev0));
    CUDA_CHECK(cudaEventDestroy(ev1));
    CUDNN_CHECK(cudnnDestroy(cudnn));
    CUDA_CHECK(cudaStreamDestroy(stream));
    if (failed) printf("bench_bn_cuda: FAILED: cuDNN and ours differ beyond %.0e relative\n", BNB_TOLERANCE);
    return failed ? 1 : 0;
}
