/* layers_cuda.h — the CUDA versions of the tower models' layers (layers.h),
 * NHWC float32, each call enqueued on one stream.
 *
 * Where it sits: model_cuda.cu builds the `mnist` and `cifar10` networks out
 * of these layers for a GPU tower (tower/tower_cuda.c); each layer lives in
 * <layer>_cuda.cu beside the CPU file it mirrors, takes the CPU arguments in
 * the CPU order, plus the library handle it needs and the stream.  The CPU
 * functions are the reference: tests/test_gpu_layers.c compares every
 * forward and backward here with them.
 * What it does not do: allocate during forward/backward (scratch belongs to
 * the caller, sized by the *_scratch_n_bytes functions), synchronise (every
 * call is asynchronous on `stream`), or keep global state.
 *
 * Conventions (as layers.h):
 *   - Every pointer passed to forward/backward is DEVICE memory unless it
 *     says host.  Tensors are NHWC, conv weights HWIO (KH, KW, C_in, C_out),
 *     dense weights (n_in, n_out): the parameter block's own layout, so a
 *     tower copies the master variables to the GPU as they are.
 *   - A cuDNN or cuBLAS handle passed with a stream must already be bound
 *     to that stream (cudnnSetStream / cublasSetStream); the caller owns
 *     handles and streams.
 *   - Each backward says whether it OVERWRITES or ADDS.
 *   - Layers with descriptors (conv2d, LRN) have <layer>_cuda_init, which
 *     builds them once from the CPU geometry and returns 0, or -1 with one
 *     line in err; a CUDA/cuDNN/cuBLAS failure inside forward/backward is
 *     not recoverable and exits through base/cuda_check.h's macros, naming
 *     the call, the file, the line and the device; init functions use its
 *     soft forms (CUDA_SOFT, CUDNN_SOFT, CUBLAS_SOFT).
 *   - TF32: off unless allow_tf32 (then cuDNN may pick tensor-op math for
 *     convolutions and the caller may set CUBLAS_TF32_TENSOR_OP_MATH); off,
 *     results agree with the CPU to float32 rounding.
 */
#ifndef TOWER_MODEL_LAYERS_CUDA_H
#define TOWER_MODEL_LAYERS_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "base/cuda_check.h"

#ifdef __cplusplus
extern "C" { /* the C headers included here have no guards of their own */
#endif

#include "model/layers.h"

/* ---- conv2d: cuDNN, NHWC activations, TensorFlow's conv2d + bias_add [+ relu]
 * cuDNN's NHWC filter layout is (C_out, KH, KW, C_in) ("KRSC"), not
 * TensorFlow's HWIO: forward and backward transpose the weights into
 * scratch with a small kernel, and the filter gradient back.  cuDNN pads
 * symmetrically; TensorFlow's SAME puts the odd cell, if any, after (a 3x3
 * stride-2 conv on an even map pads 0 before, 1 after), so such a geometry
 * convolves a zero-padded copy of its input (and crops the input gradient
 * back), as TensorFlow's own cuDNN path does.
 * Algorithms: cuDNN's heuristics (cudnnGetConvolution*Algorithm_v7), chosen
 * at init for max_batch and again whenever the batch changes, by
 * model/conv_algo.h's rule (with TOWER_CUDNN_FIND=1 in the environment on
 * cuDNN's measured list, fastest first, cudnnFind*AlgorithmEx on temporary
 * buffers): the best deterministic one that fits, else
 * (unless deterministic_only, --deterministic) the best that fits; never
 * more workspace than init sized; with TF32 only DEFAULT or TENSOR_OP
 * math (never ALLOW_CONVERSION, which would allow FP16/BF16).  The choice
 * and each one's determinism are recorded (conv2d_cuda_describe_algos). */
typedef struct {
    Conv2d geom;                 /* the CPU geometry, from conv2d_init */
    int max_batch;               /* scratch is sized for batches up to this */
    int batch;                   /* the batch the descriptors describe now */
    int allow_tf32;
    int deterministic_only;      /* refuse non-deterministic algorithms (--deterministic) */
    int input_grad;              /* 0: the input gradient is never asked (the network's first layer): no
                                    backward-data algorithm is chosen, and dinp must be NULL */
    int groups;                  /* 1; C_in for a depthwise convolution (conv2d_cuda_init_depthwise) */
    /* Asymmetric padding: cuDNN pads min(before, after) on both sides; the
     * rest is explicit zero rows/columns of a padded copy of the input,
     * (batch, HP, WP, C_in) with HP = H + ext_top + ext_bottom, in scratch.
     * All 0 (HP = H, WP = W) when the padding is symmetric. */
    int ext_top, ext_bottom, ext_left, ext_right;
    int HP, WP;
    cudnnTensorDescriptor_t x_desc;       /* (batch, HP, WP, C_in) NHWC */
    cudnnTensorDescriptor_t y_desc;       /* (batch, OH, OW, C_out) NHWC */
    cudnnFilterDescriptor_t w_desc;       /* (C_out, KH, KW, C_in) */
    cudnnConvolutionDescriptor_t conv_desc[3]; /* forward, backward data, backward filter: each carries its algorithm's math type */
    cudnnConvolutionFwdAlgo_t algo_fwd;
    cudnnConvolutionBwdDataAlgo_t algo_bwd_data;
    cudnnConvolutionBwdFilterAlgo_t algo_bwd_filter;
    size_t workspace_n_bytes;    /* capacity: the largest need of the algorithms chosen at init */
    size_t ws_need_n_bytes[3];   /* what the current algorithms need (<= capacity) */
    int algo_deterministic[3];   /* [forward, backward data, backward filter]: cuDNN says CUDNN_DETERMINISTIC */
    cudnnMathType_t algo_math[3];/* the math type each runs with */
    int measured;                /* chosen by cuDNN's measurements (TOWER_CUDNN_FIND=1), not its heuristics */
    int gemm_1x1;                /* 1: a 1x1 convolution without padding, run as cuBLAS GEMMs on the input
                                    sampled at the stride (no cuDNN algorithms, no workspace); 0 with
                                    TOWER_CONV1X1_CUDNN=1 in the environment at init */
    int wgrad_gemm;              /* 1: (not gemm_1x1, groups 1) the filter gradient is im2col + a cuBLAS GEMM
                                    per chunk of col_batch images, not cuDNN's; 0 with TOWER_CONV_WGRAD_CUDNN=1 */
    int col_batch;               /* wgrad_gemm: images per im2col chunk (at most 64 MiB unrolled) */
    int dgrad_fwd_ok;            /* 1: stride 1, symmetric padding, groups 1, not gemm_1x1, input_grad
                                    (conv_algo.h's conv_dgrad_as_forward), and TOWER_CONV_DGRAD_CUDNN unset
                                    at init: the input gradient may run as a forward convolution */
    int dgrad_fwd;               /* 1 for the current batch: backward data is cuDNN's forward convolution of the
                                    output gradient (y_desc) with the flipped filter (wflip_desc) into dinp
                                    (x_desc), algorithm algo_dgrad_fwd; 0: cuDNN's backward data, algo_bwd_data */
    cudnnFilterDescriptor_t wflip_desc;     /* dgrad_fwd_ok: (C_in, KH, KW, C_out), the kernel flipped in h and w */
    cudnnConvolutionDescriptor_t dgrad_desc;/* dgrad_fwd_ok: stride 1, padding KH-1-pad_top, KW-1-pad_left */
    cudnnConvolutionFwdAlgo_t algo_dgrad_fwd;
    float algo_ms[3];            /* measured: each chosen algorithm's time in ms (cuDNN's Find), else -1 */
} Conv2dCuda;

/* Build descriptors for batch max_batch from geom (conv2d_init's result) and
 * choose the algorithms (backward data: cuDNN's, or a forward convolution
 * with the flipped filter, dgrad_fwd; the workspace cap: 256 MiB or
 * TOWER_CUDNN_WORKSPACE_MIB).  input_grad 0: backward will never be asked for
 * the input gradient (dinp NULL), so none of cuDNN's backward-data
 * algorithms is chosen (under --deterministic resnet50's conv1 has no
 * deterministic one within the cap).  cudnn: a handle on the device the
 * layer will run on.  Returns 0, or -1 with one line in err (odd SAME padding, no
 * algorithm, none deterministic when deterministic_only, a bad
 * TOWER_CUDNN_WORKSPACE_MIB, a cuDNN failure); c is then left freed. */
int conv2d_cuda_init(Conv2dCuda *c, const Conv2d *geom, int max_batch, int allow_tf32, int deterministic_only,
                     int input_grad, cudnnHandle_t cudnn, char *err, size_t err_n_bytes);

/* A depthwise convolution (depth multiplier 1, Keras's (KH, KW, C, 1)
 * kernel, no bias) as cuDNN's grouped convolution with C groups: the same
 * descriptors, algorithm rule, padding and forward/backward as conv2d
 * (weight (KH, KW, C) seen as the (KH*KW, C) matrix whose transpose is
 * cuDNN's (C, KH, KW, 1) filter).  The layer graph takes it for its
 * depthwise nodes with TOWER_DEPTHWISE_CUDNN=1 in the environment, in
 * place of depthwise_cuda.cu's kernels (model/model_cuda.cu).  Returns 0,
 * or -1 with one line in err. */
int conv2d_cuda_init_depthwise(Conv2dCuda *c, const Depthwise *d, int max_batch, int allow_tf32,
                               int deterministic_only, int input_grad, cudnnHandle_t cudnn, char *err,
                               size_t err_n_bytes);

/* One line into out: the three algorithms chosen for the current batch,
 * each with "deterministic" or "NOT deterministic", its math type and its
 * workspace (for --log_device_placement). */
void conv2d_cuda_describe_algos(const Conv2dCuda *c, char *out, size_t out_n_bytes);

/* Describe batch B (1 <= B <= max_batch) and choose algorithms for it within
 * the workspace capacity; a no-op when B is already the batch.  Host-only
 * (no GPU work).  Returns 0, or -1 with one line in err. */
int conv2d_cuda_set_batch(Conv2dCuda *c, int B, cudnnHandle_t cudnn, char *err, size_t err_n_bytes);

/* Destroy the descriptors; c may be zeroed or half-built. */
void conv2d_cuda_free(Conv2dCuda *c);

/* Floats in the layer's filter (and its gradient): KH x KW x (C_in / groups) x C_out. */
size_t conv2d_cuda_filter_n_floats(const Conv2dCuda *c);

/* Device bytes of scratch conv2d_forward_cuda/backward_cuda need: the
 * weights and their gradient in KRSC layout, the pre-activation gradient
 * (max_batch, OH, OW, C_out), bias-gradient partial sums and the cuDNN
 * workspace, each 256-byte aligned (the KRSC weights' room also takes the
 * flipped filter when dgrad_fwd). */
size_t conv2d_cuda_scratch_n_bytes(const Conv2dCuda *c);

/* out = act(conv(inp, weight) + bias).
 *   out    : (B, OH, OW, C_out)                 written
 *   scratch: conv2d_cuda_scratch_n_bytes(c)     clobbered, 256-byte aligned
 *   inp    : (B, H, W, C_in)
 *   weight : (KH, KW, C_in, C_out)              HWIO, as the parameter block
 *   bias   : (C_out), or NULL for none
 * B must be the batch c describes (conv2d_cuda_set_batch); anything else is
 * a programming error: one line on stderr and exit(2).  cudnn and cublas
 * are bound to stream (cublas runs the 1x1 GEMMs, c->gemm_1x1; its math
 * mode decides TF32 there). */
void conv2d_forward_cuda(float *out, void *scratch, const float *inp, const float *weight,
                         const float *bias, const Conv2dCuda *c, int B, cudnnHandle_t cudnn,
                         cublasHandle_t cublas, cudaStream_t stream);

/* Gradients of conv2d_forward_cuda, as conv2d_backward:
 *   dinp   : (B, H, W, C_in)        OVERWRITTEN; may be NULL
 *   dweight: (KH, KW, C_in, C_out)  OVERWRITTEN (HWIO)
 *   dbias  : (C_out)                OVERWRITTEN; may be NULL
 *   scratch: as for forward, clobbered
 *   out    : (B, OH, OW, C_out) forward's output (read only when act == ACT_RELU)
 *   dout   : (B, OH, OW, C_out) not modified
 *   inp, weight: as for forward.
 * The relu derivative at exactly 0 is 0.  Run to run deterministic when
 * cuDNN offers deterministic algorithms for the shape (they are preferred;
 * at stride 1 with symmetric padding the input gradient always has one, as
 * a forward convolution: dgrad_fwd). */
void conv2d_backward_cuda(float *dinp, float *dweight, float *dbias, void *scratch,
                          const float *out, const float *dout, const float *inp,
                          const float *weight, const Conv2dCuda *c, int B, cudnnHandle_t cudnn,
                          cublasHandle_t cublas, cudaStream_t stream);

/* ---- max pooling: our own kernels ------------------------------------------
 * cuDNN pads symmetrically and cannot express TensorFlow's SAME padding of
 * the 3x3/2 pools (24 -> 12 pads 0 before and 1 after), so these kernels
 * mirror maxpool_forward/backward exactly: same windows, same argmax
 * (index (h * W + w) * C + c inside the image, the first maximum in
 * row-major window order wins), and a backward that gathers each input
 * cell's contributions in output order: bitwise the CPU's results. */

/*   out   : (B, OH, OW, C) written
 *   argmax: (B, OH, OW, C) written
 *   inp   : (B, H, W, C)
 *   p     : the CPU geometry from maxpool_init (host struct, passed by value to the kernel) */
void maxpool_forward_cuda(float *out, int32_t *argmax, const float *inp, const MaxPool *p, int B,
                          cudaStream_t stream);

/* dinp: (B, H, W, C) OVERWRITTEN; argmax: forward's; dout: (B, OH, OW, C). */
void maxpool_backward_cuda(float *dinp, const int32_t *argmax, const float *dout, const MaxPool *p,
                           int B, cudaStream_t stream);

/* ---- local response normalisation ----------------------------------------------
 * TensorFlow's tf.nn.lrn (layers.h) with cuDNN's cross-channel LRN, whose
 * window is n = 2 * depth_radius + 1 and whose alpha is divided by n:
 * lrnN = 2r + 1, lrnAlpha = alpha * lrnN, lrnBeta = beta, lrnK = bias.  The
 * (n_pixels, C) tensor is described to cuDNN as NHWC (n_pixels, C, 1, 1)
 * through strides.  cuDNN accepts n <= 16, k >= 1e-5, beta >= 0.01; other
 * parameters (and LRN_CUDA_KERNEL) use our own kernels, which mirror lrn.c
 * operation for operation and save `scale` as the CPU does. */
typedef enum { LRN_CUDA_AUTO = 0, LRN_CUDA_CUDNN = 1, LRN_CUDA_KERNEL = 2 } LrnCudaImpl;

typedef struct {
    Lrn p;                          /* TensorFlow's parameters */
    int C;                          /* channels */
    int use_cudnn;                  /* 1: cuDNN, 0: our kernels */
    size_t n_pixels;                /* what x_desc describes now; 0 before the first call */
    cudnnLRNDescriptor_t lrn_desc;  /* cuDNN path */
    cudnnTensorDescriptor_t x_desc; /* cuDNN path: (n_pixels, C, 1, 1) NHWC */
} LrnCuda;

/* impl: AUTO (cuDNN when the parameters fit it), CUDNN (error when they do
 * not), KERNEL.  Returns 0, or -1 with one line in err. */
int lrn_cuda_init(LrnCuda *l, const Lrn *p, int C, LrnCudaImpl impl, char *err, size_t err_n_bytes);

/* Describe n_pixels rows (host-only; a no-op when unchanged).  0 or -1 + err. */
int lrn_cuda_set_n_pixels(LrnCuda *l, size_t n_pixels, char *err, size_t err_n_bytes);

void lrn_cuda_free(LrnCuda *l);

/*   out  : (n_pixels, C) written
 *   scale: (n_pixels, C) written by our kernels (bias + alpha * sqr_sum),
 *          untouched by the cuDNN path; always pass the buffer
 *   inp  : (n_pixels, C).  n_pixels must be what l describes (cuDNN path). */
void lrn_forward_cuda(float *out, float *scale, const float *inp, const LrnCuda *l, size_t n_pixels,
                      int C, cudnnHandle_t cudnn, cudaStream_t stream);

/* dinp: (n_pixels, C) OVERWRITTEN (must not alias dout); the other
 * arguments as lrn_backward, from the forward on the same l. */
void lrn_backward_cuda(float *dinp, const float *scale, const float *out, const float *dout,
                       const float *inp, const LrnCuda *l, size_t n_pixels, int C,
                       cudnnHandle_t cudnn, cudaStream_t stream);

/* ---- fully connected: cuBLAS, row-major through the transposition trick --- */

/*   out   : (B, n_out) written = act(inp @ weight + bias)
 *   inp   : (B, n_in);  weight: (n_in, n_out);  bias: (n_out) or NULL
 * cublas: bound to stream; its math mode decides TF32 (model_cuda sets it). */
void dense_forward_cuda(float *out, const float *inp, const float *weight, const float *bias,
                        const Dense *d, int B, cublasHandle_t cublas, cudaStream_t stream);

/*   dinp   : (B, n_in)       OVERWRITTEN; may be NULL
 *   dweight: (n_in, n_out)   ADDED to when dw_add (cuBLAS's beta is 1), else
 *                            OVERWRITTEN
 *   dbias  : (n_out)         as dweight; may be NULL
 *   dpre   : (B, n_out)      pre-activation gradient when act == ACT_RELU
 *                            (may alias dout, which is then overwritten)
 *   out    : (B, n_out)      forward's output (read only when act == ACT_RELU)
 *   dout   : (B, n_out) */
void dense_backward_cuda(float *dinp, float *dweight, float *dbias, float *dpre,
                         const float *out, const float *dout, const float *inp,
                         const float *weight, const Dense *d, int B, int dw_add, cublasHandle_t cublas,
                         cudaStream_t stream);

/* ---- bias add and relu: our own kernels ------------------------------------ */

/* out[r, c] = inp[r, c] + bias[c].  out, inp: (n_rows, C), may alias; bias: (C). */
void bias_add_forward_cuda(float *out, const float *inp, const float *bias, size_t n_rows, int C,
                           cudaStream_t stream);

/* dbias[c] ADDS the sum over rows of dout[r, c], rows in order (one thread
 * per column: the CPU's order).  dbias: (C); dout: (n_rows, C). */
void bias_add_backward_cuda(float *dbias, const float *dout, size_t n_rows, int C, cudaStream_t stream);

/* out = max(inp, 0).  out, inp: (n), may alias. */
void relu_forward_cuda(float *out, const float *inp, size_t n, cudaStream_t stream);

/* dinp = out > 0 ? dout : 0 (OVERWRITTEN).  dinp, dout, out: (n); dinp may alias dout. */
void relu_backward_cuda(float *dinp, const float *out, const float *dout, size_t n, cudaStream_t stream);

/* Fused, in place: x[r, c] = act(x[r, c] + bias[c]) (bias may be NULL).  x: (n_rows, C). */
void bias_act_forward_cuda(float *x, const float *bias, size_t n_rows, int C, Activation act,
                           cudaStream_t stream);

/* dbias OVERWRITTEN with the column sums of dout, for many rows: per chunk of
 * rows a partial sum (fixed chunking, so deterministic), then the partials
 * in order.  dbias: (C); dout: (n_rows, C); partials: bias_grad_cuda_partials_n_floats(C). */
#define BIAS_GRAD_CUDA_MAX_CHUNKS 256
static inline size_t bias_grad_cuda_partials_n_floats(int C) { return (size_t)BIAS_GRAD_CUDA_MAX_CHUNKS * (size_t)C; }
void bias_grad_cuda(float *dbias, float *partials, const float *dout, size_t n_rows, int C,
                    cudaStream_t stream);

/* ---- sparse softmax cross-entropy, mean over the batch --------------------- */

/*   ce     : (1) device scalar written: mean_b(logsumexp(logits[b]) - logits[b, labels[b]]),
 *            each example in double, NAN if a label is outside [0, K)
 *   probs  : (B, K) written, softmax(logits), saved for backward
 *   example_loss: (B) doubles, scratch
 *   logits : (B, K);  labels: (B) */
void softmax_xent_forward_cuda(float *ce, float *probs, double *example_loss, const float *logits,
                               const int32_t *labels, int B, int K, cudaStream_t stream);

/* dlogits = dloss * (probs - onehot(labels)) / B, OVERWRITTEN (may alias probs). */
void softmax_xent_backward_cuda(float *dlogits, const float *probs, const int32_t *labels, float dloss,
                                int B, int K, cudaStream_t stream);

/* ---- L2 weight decay ---------------------------------------------------------- */

/* loss: (1) device scalar written = (float)(wd * sum(w^2) / 2), the sum in
 * double over a fixed number of blocks (deterministic).  w: (n);
 * partials: L2_LOSS_CUDA_BLOCKS doubles of scratch. */
#define L2_LOSS_CUDA_BLOCKS 128
void l2_loss_forward_cuda(float *loss, double *partials, const float *w, size_t n, float wd,
                          cudaStream_t stream);

/* dw ADDS wd * w.  dw, w: (n). */
void l2_loss_backward_cuda(float *dw, const float *w, size_t n, float wd, cudaStream_t stream);

/* ---- helpers shared by the layer files --------------------------------------- */

/* dst (cols, rows) = transpose of src (rows, cols), both row-major. */
void transpose_cuda(float *dst, const float *src, int rows, int cols, cudaStream_t stream);

/* =============================================================================
 * The MobileNetV2 layers on the GPU: the twins of the layers.h
 * section of the same name, with the CPU arguments in the CPU order plus
 * the handle (cuBLAS for pointwise) and the stream, and the same backward
 * convention: parameter gradients ADDED, activation gradients WRITTEN.
 * Our own kernels, no atomics: every sum runs in a fixed order (per column
 * over fixed row chunks, then the chunks in order), so results are run to
 * run deterministic.  Why not cuDNN here:
 *   - batch norm: cudnnBatchNormalizationForwardTraining updates the
 *     running variance with the UNBIASED batch variance (and through
 *     exponentialAverageFactor = 1 - momentum), while Tower follows Keras 3's
 *     biased one, and it cannot take statistics reduced across towers (sync
 *     batch norm); the kernels below compute the split of layers.h;
 *   - depthwise: cuDNN's grouped convolution (groups = C) wants the filter
 *     as (C, KH, KW, 1) (a transpose of Keras's (KH, KW, C, 1)) and pads
 *     only symmetrically; the direct kernels below (the CPU's windows, any
 *     padding) ran on an H100 and match the CPU; the grouped convolution
 *     is conv2d_cuda_init_depthwise (TOWER_DEPTHWISE_CUDNN=1), to be
 *     measured against them (docs/gpu.md).
 * ========================================================================== */

/* grad_accumulate: dst += src.  dst, src: (n), must not alias. */
void grad_accumulate_cuda(float *dst, const float *src, size_t n, cudaStream_t stream);

/* ---- batch normalisation ----------------------------------------------------------
 * The per-channel sums go through fixed row chunks (at most
 * BN_CUDA_MAX_CHUNKS, a function of n_rows only) summed in double, the
 * partial sums then added in chunk order.  TOWER_BN_CUDA_CHUNKS=N in the
 * environment (read once; 1 to BN_CUDA_CHUNKS_LIMIT) sets another cap, for
 * measuring (bench_bn_cuda; resnet50's 112x112x64 layers run 2 x 256
 * blocks, half an H100): other sums in another order, as deterministic. */
#define BN_CUDA_MAX_CHUNKS 256
#define BN_CUDA_CHUNKS_LIMIT 1024
static inline size_t batchnorm_cuda_partials_n_doubles(int C) { return (size_t)2 * BN_CUDA_CHUNKS_LIMIT * (size_t)C; }
/* TOWER_BN_CUDA_CHUNKS's cap, BN_CUDA_MAX_CHUNKS when unset; -1 with one
 * line in err for a value outside 1..BN_CUDA_CHUNKS_LIMIT (model_acts_cuda_create
 * refuses to start then). */
int batchnorm_cuda_chunks_from_env(char *err, size_t err_n_bytes);
/* Doubles of scratch batchnorm_forward_train_cuda / batchnorm_backward_cuda
 * need: the sums (2, C) then the partials. */
static inline size_t batchnorm_cuda_scratch_n_doubles(int C) {
    return (size_t)2 * C + batchnorm_cuda_partials_n_doubles(C);
}

/* sums: (2, C) doubles WRITTEN (sum x, sum x^2); partials:
 * batchnorm_cuda_partials_n_doubles(C) scratch; inp: (n_rows, C). */
void batchnorm_sums_cuda(double *sums, double *partials, const float *inp, size_t n_rows, int C,
                         cudaStream_t stream);

/* mean, var: (C) WRITTEN from device sums (2, C) over count rows, as batchnorm_moments. */
void batchnorm_moments_cuda(float *mean, float *var, const double *sums, double count, int C, cudaStream_t stream);

/* As batchnorm_normalize: out (n_rows, C) written (may alias inp), inv_std (C) written. */
void batchnorm_normalize_cuda(float *out, float *inv_std, const float *inp, const float *mean, const float *var,
                              const float *gamma, const float *beta, float epsilon, size_t n_rows, int C,
                              cudaStream_t stream);

/* As batchnorm_forward_train; scratch: batchnorm_cuda_scratch_n_doubles(C) doubles. */
void batchnorm_forward_train_cuda(float *out, float *mean, float *var, float *inv_std, double *scratch,
                                  const float *inp, const float *gamma, const float *beta,
                                  const BatchNorm *bn, size_t n_rows, cudaStream_t stream);

/* As batchnorm_forward_eval. */
void batchnorm_forward_eval_cuda(float *out, float *inv_std, const float *inp, const float *moving_mean,
                                 const float *moving_var, const float *gamma, const float *beta,
                                 const BatchNorm *bn, size_t n_rows, cudaStream_t stream);

/* As batchnorm_update_moving (device moving statistics, updated in place). */
void batchnorm_update_moving_cuda(float *moving_mean, float *moving_var, const float *mean, const float *var,
                                  double momentum, int C, cudaStream_t stream);

/* As batchnorm_backward_sums: dsums (2, C) doubles WRITTEN; partials scratch. */
void batchnorm_backward_sums_cuda(double *dsums, double *partials, const float *dout, const float *inp,
                                  const float *mean, const float *inv_std, size_t n_rows, int C,
                                  cudaStream_t stream);

/* As batchnorm_param_grads: dgamma, dbeta (C) ADDED from dsums (2, C). */
void batchnorm_param_grads_cuda(float *dgamma, float *dbeta, const double *dsums, int C, cudaStream_t stream);

/* As batchnorm_backward_input: dinp (n_rows, C) WRITTEN (may alias dout). */
void batchnorm_backward_input_cuda(float *dinp, const float *dout, const float *inp, const float *mean,
                                   const float *inv_std, const float *gamma, const double *dsums, double count,
                                   size_t n_rows, int C, cudaStream_t stream);

/* As batchnorm_backward: dinp WRITTEN (may be NULL), dgamma/dbeta ADDED;
 * scratch: batchnorm_cuda_scratch_n_doubles(C) doubles. */
void batchnorm_backward_cuda(float *dinp, float *dgamma, float *dbeta, double *scratch,
                             const float *dout, const float *inp, const float *mean, const float *inv_std,
                             const float *gamma, const BatchNorm *bn, size_t n_rows, cudaStream_t stream);

/* Small maps in tower mode, one kernel each way (batchnorm_cuda.cu's header):
 * with TOWER_BN_CUDA_FUSED=1 in the environment (read once; off by
 * default until measured on a GPU), batchnorm_forward_train_cuda,
 * batchnorm_backward_cuda and the layer graph's batch-norm node (with its
 * fused ReLU/ReLU6) take them for at most BN_CUDA_FUSED_MAX_ROWS rows.
 * Bitwise the split kernels' results (tests/test_gpu_layers.c). */
#define BN_CUDA_FUSED_MAX_ROWS 2048
/* 1 when the fused kernels take n_rows rows (the variable set, 1 <= n_rows <= BN_CUDA_FUSED_MAX_ROWS). */
int batchnorm_cuda_fused(size_t n_rows);
/* As batchnorm_forward_train_cuda, then act in place (ACT_NONE, ACT_RELU or
 * ACT_RELU6, as relu_forward_cuda / relu6_forward_cuda), in one kernel of
 * ceil(C / 32) blocks; no scratch.  out may alias inp. */
void batchnorm_act_forward_train_fused_cuda(float *out, float *mean, float *var, float *inv_std, const float *inp,
                                            const float *gamma, const float *beta, const BatchNorm *bn,
                                            Activation act, size_t n_rows, cudaStream_t stream);
/* As act's backward in place on dout (from the activated output out: NULL
 * for ACT_NONE) then batchnorm_backward_cuda, in one kernel: dinp WRITTEN
 * (may be NULL; may alias dout), dgamma/dbeta ADDED; dout is not modified
 * (unless dinp aliases it). */
void batchnorm_act_backward_fused_cuda(float *dinp, float *dgamma, float *dbeta, const float *dout, const float *out,
                                       const float *inp, const float *mean, const float *inv_std, const float *gamma,
                                       const BatchNorm *bn, Activation act, size_t n_rows, cudaStream_t stream);

/* ---- depthwise convolution: direct kernels ----------------------------------------
 * Forward: one thread per output cell.  Backward: dinp gathers, per input
 * cell, the taps that read it (no atomics); dweight sums g * x per (tap,
 * channel) over fixed chunks of output pixels, then the chunks in order. */
#define DEPTHWISE_CUDA_MAX_CHUNKS 256

/* Device bytes of scratch depthwise_backward_cuda needs for batches up to B. */
size_t depthwise_cuda_scratch_n_bytes(const Depthwise *d, int B);

/*   out: (B, OH, OW, C) written;  inp: (B, H, W, C);  weight: (KH, KW, C). */
void depthwise_forward_cuda(float *out, const float *inp, const float *weight, const Depthwise *d, int B,
                            cudaStream_t stream);

/*   dinp: (B, H, W, C) WRITTEN, may be NULL;  dweight: (KH, KW, C) ADDED;
 *   scratch: depthwise_cuda_scratch_n_bytes(d, B), clobbered;  dout: (B, OH, OW, C). */
void depthwise_backward_cuda(float *dinp, float *dweight, void *scratch, const float *dout, const float *inp,
                             const float *weight, const Depthwise *d, int B, cudaStream_t stream);

/* ---- pointwise (1x1) convolution: cuBLAS, as dense (row-major through the
 * transposition trick).  cublas: bound to stream. */

/*   out: (n_rows, C_out) written = inp (n_rows, C_in) @ weight (C_in, C_out). */
void pointwise_forward_cuda(float *out, const float *inp, const float *weight, size_t n_rows, int C_in,
                            int C_out, cublasHandle_t cublas, cudaStream_t stream);

/*   dinp: (n_rows, C_in) WRITTEN, may be NULL;  dweight: (C_in, C_out) ADDED. */
void pointwise_backward_cuda(float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, size_t n_rows, int C_in, int C_out, cublasHandle_t cublas,
                             cudaStream_t stream);

/* ---- zero padding, ReLU6, add, global average pooling, dropout ------------------- */

/* As zeropad_forward / zeropad_backward (z: host struct). */
void zeropad_forward_cuda(float *out, const float *inp, const ZeroPad *z, int B, cudaStream_t stream);
void zeropad_backward_cuda(float *dinp, const float *dout, const ZeroPad *z, int B, cudaStream_t stream);

/* As relu6_forward / relu6_backward. */
void relu6_forward_cuda(float *out, const float *inp, size_t n, cudaStream_t stream);
void relu6_backward_cuda(float *dinp, const float *out, const float *dout, size_t n, cudaStream_t stream);

/* As add_forward / add_backward (da, db may be NULL or alias dout). */
void add_forward_cuda(float *out, const float *a, const float *b, size_t n, cudaStream_t stream);
void add_backward_cuda(float *da, float *db, const float *dout, size_t n, cudaStream_t stream);
/* As add_act_forward / add_act_backward (one kernel each way; ACT_NONE: the two above). */
void add_act_forward_cuda(float *out, const float *a, const float *b, Activation act, size_t n, cudaStream_t stream);
void add_act_backward_cuda(float *da, float *db, const float *out, const float *dout, Activation act, size_t n,
                           cudaStream_t stream);

/* As global_avgpool_forward (one thread per (b, c), pixels in order: the
 * CPU's additions) / global_avgpool_backward. */
void global_avgpool_forward_cuda(float *out, const float *inp, int B, int n_pixels, int C, cudaStream_t stream);
void global_avgpool_backward_cuda(float *dinp, const float *dout, int B, int n_pixels, int C, cudaStream_t stream);

/* As dropout_forward / dropout_backward: the same mask as the CPU for the
 * same key (d: host struct). */
void dropout_forward_cuda(float *out, const float *inp, const Dropout *d, uint64_t key, int training, size_t n,
                          cudaStream_t stream);
void dropout_backward_cuda(float *dinp, const float *dout, const Dropout *d, uint64_t key, int training, size_t n,
                           cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
/* A fused activation inside a kernel (batch norm's and the Add's): act(y) as relu_forward_kernel /
 * relu6_forward_kernel round it, and the gradient through it of dout[i] at the activated output out[i] as
 * relu_backward_kernel / relu6_backward_kernel (out is not read for ACT_NONE: it may be NULL then). */
__device__ static inline float act_apply_cuda(float y, int act) {
    if (act == ACT_NONE) return y;
    const float r = y > 0.0f ? y : 0.0f;
    return act == ACT_RELU6 ? (r < 6.0f ? r : 6.0f) : r;
}
__device__ static inline float act_grad_cuda(const float *dout, const float *out, size_t i, int act) {
    const float g = dout[i];
    if (act == ACT_NONE) return g;
    const float o = out[i];
    if (act == ACT_RELU6) return (o > 0.0f && o < 6.0f) ? g : 0.0f;
    return o > 0.0f ? g : 0.0f;
}
#endif

#endif
