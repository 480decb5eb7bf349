/* layers.h — the CPU reference layers of the tower models, NHWC float32.
 *
 * Where it sits: model/ builds the `mnist` and `cifar10` networks (model.c)
 * out of these layers; a tower calls the models, never the layers.  The
 * CUDA versions (tower/ backends) will take the same arguments plus a stream.
 * What it does not do: allocate.  Every buffer, including scratch, belongs
 * to the caller (ModelActs preallocates them all); no layer keeps state.
 *
 * Conventions (docs/models.md has the full table):
 *   - Tensors are NHWC: (B, H, W, C), C fastest.  Conv weights are HWIO,
 *     (KH, KW, C_in, C_out), fully connected weights (n_in, n_out): both as
 *     TensorFlow stores them.
 *   - <layer>_forward(outputs, saved values, inputs, weights, params, sizes);
 *     <layer>_backward(gradients written, scratch, saved values, dout,
 *     inputs, weights, params, sizes).  Gradients start with `d`.
 *   - Each backward says whether it OVERWRITES or ADDS to what it writes.
 *   - Parallel with OpenMP over the batch (or pixels) with the calling
 *     thread's omp_get_max_threads(); inside a parallel region, sgemm runs
 *     single-threaded, outside it splits across the calling thread's team.
 *   - Bad shapes are programming errors checked once by the *_init
 *     functions (they return -1); forward/backward do not re-check.
 */
#ifndef TOWER_MODEL_LAYERS_H
#define TOWER_MODEL_LAYERS_H

#include <stddef.h>
#include <stdint.h>

typedef enum { PAD_VALID = 0, PAD_SAME = 1 } Padding;
typedef enum { ACT_NONE = 0, ACT_RELU = 1, ACT_RELU6 = 2 } Activation; /* ACT_RELU6: a fused ReLU(6.) (batch norm, add) only */

/* ---- TensorFlow's padding arithmetic (one spatial dimension) ----------------
 * VALID: out = ceil((in - k + 1) / stride), no padding.
 * SAME:  out = ceil(in / stride), pad_total = max((out - 1) * stride + k - in, 0),
 *        pad_before = pad_total / 2 (the extra cell, if any, goes after).
 * Writes *out_size and *pad_before; returns 0, or -1 if out_size would be < 1
 * or an argument is not positive. */
int tf_padding(int *out_size, int *pad_before, int in_size, int k, int stride, Padding padding);

/* ---- conv2d: im2col + sgemm, TensorFlow's conv2d + bias_add [+ relu] ------- */
typedef struct {
    int H, W, C_in;          /* input of one example (H, W, C_in) */
    int KH, KW, C_out;       /* weights (KH, KW, C_in, C_out) */
    int stride_h, stride_w;
    Padding padding;
    Activation act;          /* applied after the bias */
    /* derived by conv2d_init: */
    int OH, OW;              /* output of one example (OH, OW, C_out) */
    int pad_top, pad_left;   /* cells of zero padding before row 0 / column 0 */
} Conv2d;

/* Fill the geometry and derive OH, OW, pad_top, pad_left.  Returns 0 or -1. */
int conv2d_init(Conv2d *c, int H, int W, int C_in, int KH, int KW, int C_out,
                int stride_h, int stride_w, Padding padding, Activation act);

/* Scratch floats that conv2d_forward/backward need for up to n_threads
 * OpenMP threads: per thread one image's im2col matrix (OH*OW, KH*KW*C_in)
 * (a band of its output rows where that passes 4 MiB; a group of images
 * where the map is under 64 cells), its gradient, the pre-activation
 * gradient (OH*OW, C_out) and partial weight/bias gradients. */
size_t conv2d_scratch_n_floats(const Conv2d *c, int n_threads);

/* out = act(conv(inp, weight) + bias), one image per thread.
 *   out    : (B, OH, OW, C_out)                       written
 *   scratch: conv2d_scratch_n_floats(c, n_threads)    clobbered
 *   inp    : (B, H, W, C_in)
 *   weight : (KH, KW, C_in, C_out)
 *   bias   : (C_out), or NULL for none
 * Uses min(omp_get_max_threads(), n_threads) threads. */
void conv2d_forward(float *out, float *scratch, const float *inp, const float *weight,
                    const float *bias, const Conv2d *c, int B, int n_threads);

/* Gradients of conv2d_forward.
 *   dinp   : (B, H, W, C_in)   OVERWRITTEN; may be NULL (not wanted, e.g. first layer)
 *   dweight: (KH, KW, C_in, C_out) OVERWRITTEN; may be NULL (not wanted: then
 *            no bias gradient either, whatever dbias is)
 *   dbias  : (C_out)           OVERWRITTEN; may be NULL
 *   scratch: as for forward, clobbered
 *   out    : (B, OH, OW, C_out) forward's output (read only when act == ACT_RELU)
 *   dout   : (B, OH, OW, C_out) gradient of the loss w.r.t. out (not modified)
 *   inp, weight: as for forward.
 * The relu derivative at exactly 0 is taken as 0 (TensorFlow's choice). */
void conv2d_backward(float *dinp, float *dweight, float *dbias, float *scratch,
                     const float *out, const float *dout, const float *inp,
                     const float *weight, const Conv2d *c, int B, int n_threads);

/* conv2d's passes as Winograd's F(2x2, 3x3) (maps of 1 or 2 a side), F(4x4, 3x3) or F(4x4, 5x5) (winograd.c):
 * same arguments and results as conv2d_forward/backward within float
 * rounding (another order of additions), for a geometry winograd_applies
 * accepts: a 3x3 or 5x5 kernel at stride 1 with symmetric padding (SAME's
 * 1 and 1 or 2 and 2, VALID's 0 and 0).
 *   scratch: winograd_scratch_n_floats(c, B, n_threads) floats (for the
 *            largest B it will see), clobbered
 *   winograd_backward_data: dinp (B, H, W, C_in) OVERWRITTEN from dout,
 *            the output gradient after any activation's mask (unmodified)
 *   winograd_backward_weights: dweight (KH, KW, C_in, C_out) OVERWRITTEN,
 *            dbias (C_out) OVERWRITTEN unless NULL
 * Uses min(omp_get_max_threads(), n_threads) threads; the results are the
 * same bits whatever the team size.  B 0: nothing written, the weight and
 * bias gradients 0. */
int winograd_applies(const Conv2d *c);
/* The kind that runs c, as --log_device_placement names it ("Winograd F(2x2,3x3)", "Winograd F(4x4,3x3)",
 * "Winograd F(4x4,5x5)"; a static string), or NULL where winograd_applies does not. */
const char *winograd_name(const Conv2d *c);
size_t winograd_scratch_n_floats(const Conv2d *c, int B, int n_threads);
void winograd_forward(float *out, float *scratch, const float *inp, const float *weight, const float *bias,
                      const Conv2d *c, int B, int n_threads);
void winograd_backward_data(float *dinp, float *scratch, const float *dout, const float *weight, const Conv2d *c,
                            int B, int n_threads);
void winograd_backward_weights(float *dweight, float *dbias, float *scratch, const float *dout, const float *inp,
                               const Conv2d *c, int B, int n_threads);

/* conv2d's forward and backward weights for a first layer, computed directly (conv_first.c): each output
 * pixel's channels in registers over the kernel's taps, each tap's weight gradients over an image's pixels;
 * the same results as conv2d_forward / conv2d_backward's dweight and dbias within float rounding.  Where
 * conv_first_applies: 1 to 4 channels in, C_out a multiple of 32, at most 7 x 7 x 4 taps, any stride and
 * padding.
 *   scratch: conv_first_scratch_n_floats(c, B, n_threads) floats (for the largest batch and the threads to
 *            be used), clobbered;
 *   conv_first_forward: out (B, OH, OW, C_out) OVERWRITTEN (+ bias, ReLU where c->act says);
 *   conv_first_backward_weights: dweight (KH, KW, C_in, C_out) and dbias (C_out; NULL: not wanted)
 *            OVERWRITTEN from dout (B, OH, OW, C_out), masked by out > 0 where c->act is ACT_RELU (out:
 *            forward's output; dout is not modified); the images' sums in fixed groups of 8, so the same
 *            bits whatever the team size; B = 0 gives zeros.
 * No backward data (a first layer's input gradient is not wanted). */
int conv_first_applies(const Conv2d *c);
size_t conv_first_scratch_n_floats(const Conv2d *c, int B, int n_threads);
void conv_first_forward(float *out, float *scratch, const float *inp, const float *weight, const float *bias,
                        const Conv2d *c, int B, int n_threads);
void conv_first_backward_weights(float *dweight, float *dbias, float *scratch, const float *out,
                                 const float *dout, const float *inp, const Conv2d *c, int B, int n_threads);
/* A stride-1 conv's input gradient as a forward convolution of the output
 * gradient zero-padded by *pad_h rows and *pad_w columns on each side with
 * the flipped kernel: returns 1 and the padding when the geometry's padding
 * is symmetric and at most the kernel less one (conv_algo.h's
 * conv_dgrad_as_forward, both axes), else 0.  conv2d.c; winograd.c's
 * backward data and conv2d_cuda.cu's forward-way input gradient use it. */
int conv_dgrad_pad(const Conv2d *c, int *pad_h, int *pad_w);

/* conv2d as the CPU executor runs it (conv2d_dnnl.c): each pass through
 * oneDNN's convolution primitive or the loops above, as conv_algo.h's CPU
 * table picks; same arguments and results as conv2d_forward/backward
 * (within float rounding: another summation order), except:
 *   scratch: conv2d_run_scratch_n_bytes(c, bias != NULL, max_batch, n_threads)
 *            bytes (scratch_n_bytes says how many were given), clobbered;
 *            a batch larger than max_batch still runs (the loops take it);
 *   dout   : clobbered after a ReLU (the mask is applied in place).
 * The first call for a new (shape, batch, threads) creates oneDNN's
 * primitives (cached for the process, so conv2d_run_scratch_n_bytes at
 * planning time creates those of max_batch). */
size_t conv2d_run_scratch_n_bytes(const Conv2d *c, int has_bias, int max_batch, int n_threads);
void conv2d_run_forward(float *out, void *scratch, size_t scratch_n_bytes, const float *inp, const float *weight,
                        const float *bias, const Conv2d *c, int B, int n_threads);
void conv2d_run_backward(float *dinp, float *dweight, float *dbias, void *scratch, size_t scratch_n_bytes,
                         const float *out, float *dout, const float *inp, const float *weight, const Conv2d *c, int B,
                         int n_threads);
/* The path pass (conv_algo.h's ConvPass) takes for this shape, batch and
 * threads: CONV_CPU_WINOGRAD, CONV_CPU_ONEDNN (direct kernels) or
 * CONV_CPU_LOOPS (creating the primitives if needed). */
int conv2d_run_path(const Conv2d *c, int has_bias, int B, int n_threads, int pass);
/* on = 1: every conv2d_run_* call of the process runs the loops (the
 * bit-for-bit oracle tests, bench_model --conv_loops for A/B timings);
 * returns the previous setting. */
int conv2d_run_set_loops_only(int on);

/* ---- max pooling ------------------------------------------------------------
 * TensorFlow's max_pool: windows (KH, KW) moved by the strides; SAME pads with
 * cells that never win (as -infinity). */
typedef struct {
    int H, W, C;            /* input of one example */
    int KH, KW, stride_h, stride_w;
    Padding padding;
    /* derived by maxpool_init: */
    int OH, OW, pad_top, pad_left;
} MaxPool;

int maxpool_init(MaxPool *p, int H, int W, int C, int KH, int KW,
                 int stride_h, int stride_w, Padding padding);

/* out = max over each window, per channel.
 *   out   : (B, OH, OW, C)  written
 *   argmax: (B, OH, OW, C)  written: index of the winner inside its image,
 *                           (h * W + w) * C + c; the first maximum in
 *                           row-major window order wins ties.
 *   inp   : (B, H, W, C) */
void maxpool_forward(float *out, int32_t *argmax, const float *inp, const MaxPool *p, int B);

/* dinp: (B, H, W, C) OVERWRITTEN: each dout cell is routed to its argmax
 * (cells that win several overlapping windows receive the sum).
 * argmax: forward's; dout: (B, OH, OW, C). */
void maxpool_backward(float *dinp, const int32_t *argmax, const float *dout, const MaxPool *p, int B);

/* ---- local response normalisation (TensorFlow's tf.nn.lrn) -----------------
 * For channel d of a pixel: sqr_sum[d] = sum of inp[j]^2 for j in
 * [d - r, d + r] clipped to [0, C) (no division by the window size);
 * scale[d] = bias + alpha * sqr_sum[d];  out[d] = inp[d] * scale[d]^(-beta). */
typedef struct {
    int depth_radius;       /* r */
    float bias, alpha, beta;
} Lrn;

/*   out  : (n_pixels, C) written
 *   scale: (n_pixels, C) written, saved for backward
 *   inp  : (n_pixels, C)  — n_pixels = B * H * W for NHWC tensors. */
void lrn_forward(float *out, float *scale, const float *inp, const Lrn *p, size_t n_pixels, int C);

/* dinp: (n_pixels, C) OVERWRITTEN (must not alias dout);
 *   dinp[i] = dout[i] * scale[i]^-beta
 *             - 2 * alpha * beta * inp[i] * sum_{d in window(i)} dout[d] * out[d] / scale[d]. */
void lrn_backward(float *dinp, const float *scale, const float *out, const float *dout,
                  const float *inp, const Lrn *p, size_t n_pixels, int C);

/* ---- fully connected: out = act(inp @ weight + bias) -------------------- */
typedef struct {
    int n_in, n_out;
    Activation act;
} Dense;

/*   out   : (B, n_out) written
 *   inp   : (B, n_in)   (an NHWC tensor flattened per example, as tf.reshape)
 *   weight: (n_in, n_out)
 *   bias  : (n_out), or NULL
 * One multi-threaded sgemm (call it outside any parallel region). */
void dense_forward(float *out, const float *inp, const float *weight, const float *bias,
                   const Dense *d, int B);

/*   dinp   : (B, n_in)       OVERWRITTEN; may be NULL
 *   dweight: (n_in, n_out)   ADDED to when dw_add (the layer convention: the
 *                            sgemm's beta is 1, no buffer in between), else
 *                            OVERWRITTEN (a step's first micro-batch: no memset)
 *   dbias  : (n_out)         as dweight; may be NULL
 *   dpre   : (B, n_out)      scratch for the pre-activation gradient when
 *                            act == ACT_RELU (may alias dout, which is then
 *                            overwritten); unused and may be NULL otherwise
 *   out    : (B, n_out)      forward's output (read only when act == ACT_RELU)
 *   dout   : (B, n_out) */
void dense_backward(float *dinp, float *dweight, float *dbias, float *dpre,
                    const float *out, const float *dout, const float *inp,
                    const float *weight, const Dense *d, int B, int dw_add);

/* ---- bias add and relu (building blocks, also fused into conv2d/dense) ---- */

/* out[r, c] = inp[r, c] + bias[c].  out, inp: (n_rows, C), may alias; bias: (C). */
void bias_add_forward(float *out, const float *inp, const float *bias, size_t n_rows, int C);

/* dbias[c] ADDS sum over rows of dout[r, c], rows in order.  dbias: (C); dout: (n_rows, C). */
void bias_add_backward(float *dbias, const float *dout, size_t n_rows, int C);

/* The same for columns c0..c1 - 1 only (dbias[c0..c1) ADDS; the others untouched), the rows in order: the
 * same bits as bias_add_backward's there.  For a caller that splits the columns over threads. */
void bias_add_backward_columns(float *dbias, const float *dout, size_t n_rows, int C, int c0, int c1);

/* out = max(inp, 0).  out, inp: (n) may alias. */
void relu_forward(float *out, const float *inp, size_t n);

/* dinp = out > 0 ? dout : 0 (OVERWRITTEN).  dinp, dout, out: (n); dinp may alias dout. */
void relu_backward(float *dinp, const float *out, const float *dout, size_t n);

/* ---- sparse softmax cross-entropy, mean over the batch -------------------- */

/* Returns mean_b( logsumexp(logits[b]) - logits[b, labels[b]] ), computed
 * with the max subtracted (stable for any finite logits), accumulated in
 * double; returns NAN if a label is outside [0, K).
 *   probs : (B, K) written, softmax(logits), saved for backward
 *   logits: (B, K);  labels: (B) */
float softmax_xent_forward(float *probs, const float *logits, const int32_t *labels, int B, int K);

/* dlogits = dloss * (probs - onehot(labels)) / B, OVERWRITTEN (may alias probs).
 *   dlogits, probs: (B, K); labels: (B); dloss: gradient of the final loss
 *   w.r.t. the mean cross-entropy (1 when it is added to the loss as is). */
void softmax_xent_backward(float *dlogits, const float *probs, const int32_t *labels,
                           float dloss, int B, int K);

/* tf.math.in_top_k for one row: 1 when fewer than k classes have a larger
 * logit than the label's (so a label tied with the k-th counts, as
 * TensorFlow counts it), 0 when any logit of the row is not finite.
 *   logits: (K);  label in [0, K);  k >= 1 */
int in_top_k(const float *logits, int K, int label, int k);

/* ---- L2 weight decay: TensorFlow's wd * tf.nn.l2_loss(w) = wd * sum(w^2) / 2 */

/* Returns wd * sum(w^2) / 2, accumulated in double.  w: (n). */
float l2_loss_forward(const float *w, size_t n, float wd);

/* dw ADDS wd * w.  dw, w: (n). */
void l2_loss_backward(float *dw, const float *w, size_t n, float wd);

/* ---- initializers: seeded, bit-identical on every IEEE-754 machine --------
 * The generator is splitmix64 (64-bit state, integer arithmetic only).  A
 * uniform double is the top 53 bits times 2^-53.  Normals come from
 * Marsaglia's polar method with a logarithm computed here from +, -, *, /
 * and frexp (never libm's log, whose last bit varies between libms),
 * and sqrt (correctly rounded by IEEE 754).  init.c is compiled with
 * -ffp-contract=off so no compiler fuses a multiply-add differently. */
typedef struct {
    uint64_t state;
    int have_spare;         /* the polar method makes normals in pairs */
    double spare;
} InitRng;

/* Seed a stream: the same (seed, stream) gives the same sequence everywhere. */
void init_rng_seed(InitRng *r, uint64_t seed, uint64_t stream);
uint64_t init_rng_next_u64(InitRng *r);
double init_rng_uniform(InitRng *r);          /* in [0, 1) */
double init_rng_normal(InitRng *r);           /* standard normal */

/* TensorFlow's truncated_normal(stddev): normal samples, redrawn while
 * |z| > 2, times stddev.  out: (n). */
void init_truncated_normal(float *out, size_t n, float stddev, InitRng *r);

/* out[i] = value.  out: (n). */
void init_constant(float *out, size_t n, float value);

/* Keras's glorot_uniform: uniform in [-limit, limit), limit = sqrt(6 /
 * (fan_in + fan_out)) computed by the caller; (2u - 1) * limit in double,
 * rounded once.  out: (n). */
void init_glorot_uniform(float *out, size_t n, double limit, InitRng *r);

/* =============================================================================
 * The MobileNetV2 layers: batch normalisation, depthwise and
 * pointwise convolutions, zero padding, ReLU6, residual addition, global
 * average pooling, dropout.  docs/models.md ("The MobileNetV2 layers") has
 * the formulas.
 *
 * Backward convention for EVERY layer below (llm.c's):
 *   - parameter gradients (dweight, dgamma, dbeta) are ADDED to: the caller
 *     zeroes them once per step, so K micro-batches accumulate;
 *   - activation gradients (dinp, da, db) are WRITTEN (overwritten).
 * A tensor read by several layers (a DAG: the residual's shortcut) gets its
 * gradient summed by the executor, not by the layers: walking the layers in
 * reverse order, the FIRST consumer's backward writes the tensor's gradient
 * buffer, each later consumer writes a scratch buffer that grad_accumulate
 * then adds into it (in a fixed order, so results are deterministic).
 * add_backward may pass dout through without a copy: da and db may alias
 * dout.
 * ========================================================================== */

/* dst[i] += src[i] (the executor's sum of a tensor's consumers' gradients).
 * dst, src: (n), must not alias. */
void grad_accumulate(float *dst, const float *src, size_t n);

/* ---- batch normalisation, NHWC, per channel (Keras BatchNormalization) ------
 * Over the n_rows = B * H * W rows of a (B, H, W, C) tensor, per channel c:
 *   mean = sum x / n,  var = max(sum x^2 / n - mean^2, 0)   (BIASED: / n)
 *   inv_std = 1 / sqrt(var + epsilon)
 *   out = (x - mean) * inv_std * gamma + beta
 *   training: the batch's mean/var; evaluation: the moving ones;
 *   after a training step: moving = moving * momentum + batch * (1 - momentum)
 *   with the BIASED batch variance, as Keras 3 (keras/src/layers/
 *   normalization/batch_normalization.py: ops.moments, i.e. tf.nn.moments
 *   or, synchronized, E[x^2] - E[x]^2 clipped at 0).  tf.keras 2 with its
 *   fused kernel (fused=None in TF2) fed the UNBIASED variance, n / (n - 1)
 *   times larger, to the moving average; Tower follows Keras 3 (the Keras of
 *   TensorFlow >= 2.16 and of the interop environment).
 * The statistics are split so that the caller can reduce them across towers
 * (sync batch norm): a tower computes its per-channel sums
 * (batchnorm_sums), the caller adds the towers' sums (in tower order) and
 * turns them into moments (batchnorm_moments) over the global count, and
 * every tower normalises with the same global moments
 * (batchnorm_normalize).  Backward likewise: batchnorm_backward_sums per
 * tower, the caller adds them, batchnorm_backward_input with the global
 * sums and count.  N towers of B then equal one tower of N x B.  The
 * one-tower forms batchnorm_forward_train / batchnorm_backward do the same
 * with the tower's own rows.  Sums are in double. */
typedef struct {
    int C;                  /* channels */
    double momentum;        /* Keras: 0.99 (MobileNetV2: 0.999) */
    float epsilon;          /* Keras: 1e-3 (ResNet50: 1.001e-5) */
    Activation act;         /* the following ReLU6 / ReLU fused in (graph_fuse), or ACT_NONE: out =
                               act(z), z the normalised value; backward masks dy by act'(z), z
                               recomputed from the input (0 < z < 6 for ReLU6, z > 0 for ReLU) */
} BatchNorm;

/* The sums run over min(n_rows, BATCHNORM_CPU_CHUNKS) fixed row chunks,
 * each in double, added in chunk order: the same bits for any thread count. */
#define BATCHNORM_CPU_CHUNKS 16

/* Doubles of scratch batchnorm_forward_train / batchnorm_backward need:
 * the sums (2, C) then the chunks' partials (BATCHNORM_CPU_CHUNKS, 2, C). */
static inline size_t batchnorm_scratch_n_doubles(int C) {
    return (size_t)(BATCHNORM_CPU_CHUNKS + 1) * 2 * (size_t)C;
}

/* sums: (2, C) WRITTEN: sums[c] = sum over rows of x[r, c], sums[C + c] =
 * sum of x[r, c]^2.  partials: (BATCHNORM_CPU_CHUNKS, 2, C) scratch.
 * inp: (n_rows, C). */
void batchnorm_sums(double *sums, double *partials, const float *inp, size_t n_rows, int C);

/* mean, var: (C) WRITTEN from sums (2, C) over count rows (count >= 1):
 * mean = s / count, var = max(s2 / count - mean^2, 0), in double, then
 * rounded to float. */
void batchnorm_moments(float *mean, float *var, const double *sums, double count, int C);

/* out = (x - mean) * inv_std * gamma + beta;  inv_std WRITTEN (saved for backward).
 *   out    : (n_rows, C) written (may alias inp)
 *   inv_std: (C) written = 1 / sqrt(var + epsilon)
 *   inp    : (n_rows, C)
 *   mean, var, gamma, beta: (C) (batch or moving statistics) */
void batchnorm_normalize(float *out, float *inv_std, const float *inp, const float *mean,
                         const float *var, const float *gamma, const float *beta, float epsilon,
                         size_t n_rows, int C);

/* batchnorm_normalize followed by act (ACT_NONE: batchnorm_normalize
 * itself) in the same pass: out = act((x - mean) * inv_std * gamma + beta),
 * the same float operations as batchnorm_normalize then relu6_forward /
 * relu_layer_forward.  Arguments as batchnorm_normalize. */
void batchnorm_normalize_act(float *out, float *inv_std, const float *inp, const float *mean,
                             const float *var, const float *gamma, const float *beta, float epsilon,
                             Activation act, size_t n_rows, int C);

/* Training forward on this tower's rows alone: sums, moments, normalize (with bn->act).
 *   out          : (n_rows, C) written
 *   mean, var    : (C) written: the batch statistics (saved; var feeds the moving update)
 *   inv_std      : (C) written (saved)
 *   scratch      : batchnorm_scratch_n_doubles(C)
 *   inp          : (n_rows, C);  gamma, beta: (C) */
void batchnorm_forward_train(float *out, float *mean, float *var, float *inv_std, double *scratch,
                             const float *inp, const float *gamma, const float *beta,
                             const BatchNorm *bn, size_t n_rows);

/* Evaluation forward: batchnorm_normalize with the moving statistics.
 *   out: (n_rows, C) written;  inv_std: (C) scratch written;
 *   inp: (n_rows, C);  moving_mean, moving_var, gamma, beta: (C). */
void batchnorm_forward_eval(float *out, float *inv_std, const float *inp, const float *moving_mean,
                            const float *moving_var, const float *gamma, const float *beta,
                            const BatchNorm *bn, size_t n_rows);

/* moving = moving * momentum + batch * (1 - momentum), in float with
 * (1 - momentum) rounded once from double, as Keras's float32 variables.
 *   moving_mean, moving_var: (C) updated in place;  mean, var: (C) the batch's. */
void batchnorm_update_moving(float *moving_mean, float *moving_var, const float *mean,
                             const float *var, double momentum, int C);

/* The same update in two halves, for a server away from the towers: a
 * tower's batchnorm_update_moving on moving statistics of zero gives its
 * share, batch * (1 - momentum) (0 * m + x is x, exactly); then
 * out = moving * momentum + share, the same float operations as
 * batchnorm_update_moving's, so the result is bitwise its.
 *   out: (n), may be moving;  moving, share: (n). */
void batchnorm_apply_moving_share(float *out, const float *moving, const float *share, double momentum, size_t n);

/* dsums: (2, C) WRITTEN: dsums[c] = sum over rows of dy, dsums[C + c] = sum of
 * dy * xhat with xhat = (x - mean) * inv_std (in float, then summed in
 * double as batchnorm_sums).  partials: (BATCHNORM_CPU_CHUNKS, 2, C)
 * scratch.  dout, inp: (n_rows, C); mean, inv_std: (C) the statistics
 * forward used (global ones when synced). */
void batchnorm_backward_sums(double *dsums, double *partials, const float *dout, const float *inp,
                             const float *mean, const float *inv_std, size_t n_rows, int C);

/* batchnorm_backward_sums of a batch norm with a fused activation: dy is
 * first masked by act'(z), z = xhat * gamma + beta recomputed from inp (so
 * the activation's input is never stored).  ACT_NONE: batchnorm_backward_sums.
 * gamma, beta: (C); the rest as batchnorm_backward_sums. */
void batchnorm_backward_sums_act(double *dsums, double *partials, const float *dout, const float *inp,
                                 const float *mean, const float *inv_std, const float *gamma,
                                 const float *beta, Activation act, size_t n_rows, int C);

/* dgamma[c] ADDS dsums[C + c], dbeta[c] ADDS dsums[c] (this tower's sums:
 * the parameter gradients are per tower, averaged by the caller like any
 * other).  dgamma, dbeta: (C); dsums: (2, C). */
void batchnorm_param_grads(float *dgamma, float *dbeta, const double *dsums, int C);

/* dinp WRITTEN = gamma * inv_std * (dy - S1 / count - xhat * S2 / count),
 * S1, S2 = dsums (2, C) summed over every row the statistics came from
 * (count rows: this tower's, or the global batch's when synced).
 *   dinp: (n_rows, C) written (may alias dout);  dout, inp: (n_rows, C);
 *   mean, inv_std, gamma: (C). */
void batchnorm_backward_input(float *dinp, const float *dout, const float *inp, const float *mean,
                              const float *inv_std, const float *gamma, const double *dsums,
                              double count, size_t n_rows, int C);

/* batchnorm_backward_input with dy masked by act'(z) as
 * batchnorm_backward_sums_act (dsums from it).  beta: (C); dinp may alias
 * dout (each element is read before it is written).  ACT_NONE:
 * batchnorm_backward_input. */
void batchnorm_backward_input_act(float *dinp, const float *dout, const float *inp, const float *mean,
                                  const float *inv_std, const float *gamma, const float *beta,
                                  Activation act, const double *dsums, double count, size_t n_rows, int C);

/* One-tower backward: backward_sums, param_grads (ADD), backward_input (WRITE).
 *   dinp: (n_rows, C) written, may be NULL;  dgamma, dbeta: (C) ADDED;
 *   scratch: batchnorm_scratch_n_doubles(C) (the sums come first);  dout, inp: (n_rows, C);
 *   mean, inv_std: forward's;  gamma: (C). */
void batchnorm_backward(float *dinp, float *dgamma, float *dbeta, double *scratch, const float *dout,
                        const float *inp, const float *mean, const float *inv_std,
                        const float *gamma, const BatchNorm *bn, size_t n_rows);

/* batchnorm_backward of a batch norm with a fused activation (bn->act; dy
 * masked by act'(z) as batchnorm_backward_sums_act); beta: (C), may be NULL
 * for ACT_NONE.  batchnorm_backward is this with ACT_NONE (a fused bn there
 * is a programming error: one line on stderr and abort()). */
void batchnorm_backward_act(float *dinp, float *dgamma, float *dbeta, double *scratch, const float *dout,
                            const float *inp, const float *mean, const float *inv_std,
                            const float *gamma, const float *beta, const BatchNorm *bn, size_t n_rows);

/* ---- depthwise convolution (Keras DepthwiseConv2D, depth multiplier 1, no bias)
 * out[b, oh, ow, c] = sum_{kh, kw} in[b, oh*s - pad_top + kh, ow*s - pad_left + kw, c]
 *                                  * weight[kh, kw, c]
 * weight (KH, KW, C, 1) as Keras stores depthwise_kernel.  MobileNetV2 uses
 * 3x3 with stride 1 SAME (pad 1 each side) and stride 2 VALID after a
 * ZeroPadding2D; TensorFlow's padding arithmetic (tf_padding) decides the
 * rest. */
typedef struct {
    int H, W, C;             /* input of one example (H, W, C) */
    int KH, KW, stride;      /* same stride in both dimensions */
    Padding padding;
    /* derived by depthwise_init: */
    int OH, OW, pad_top, pad_left;
} Depthwise;

/* Returns 0, or -1 for a non-positive size or an output smaller than 1. */
int depthwise_init(Depthwise *d, int H, int W, int C, int KH, int KW, int stride, Padding padding);

/* Floats of scratch depthwise_backward needs for up to n_threads threads
 * (one partial weight gradient per thread). */
size_t depthwise_scratch_n_floats(const Depthwise *d, int n_threads);

/*   out   : (B, OH, OW, C) written
 *   inp   : (B, H, W, C)
 *   weight: (KH, KW, C)  (Keras's (KH, KW, C, 1))
 * OpenMP over the batch. */
void depthwise_forward(float *out, const float *inp, const float *weight, const Depthwise *d, int B);

/*   dinp   : (B, H, W, C) WRITTEN; may be NULL
 *   dweight: (KH, KW, C)  ADDED (the threads' partials summed in thread order)
 *   scratch: depthwise_scratch_n_floats(d, n_threads), clobbered
 *   dout   : (B, OH, OW, C);  inp, weight: as forward. */
void depthwise_backward(float *dinp, float *dweight, float *scratch, const float *dout,
                        const float *inp, const float *weight, const Depthwise *d, int B,
                        int n_threads);

/* ---- pointwise (1x1) convolution without bias: one GEMM over every pixel --
 * out (n_rows, C_out) = inp (n_rows, C_in) @ weight (C_in, C_out), n_rows =
 * B * H * W; weight is Keras's (1, 1, C_in, C_out).  conv2d with a 1x1
 * kernel computes the same but copies each image through im2col, runs one
 * GEMM per image (M = H * W: 16 rows at MobileNetV2's 4x4 maps) and
 * OVERWRITES dweight; this is one GEMM over the whole batch.  Call outside
 * an OpenMP parallel region (sgemm then uses the team). */
void pointwise_forward(float *out, const float *inp, const float *weight, size_t n_rows,
                       int C_in, int C_out);

/*   dinp   : (n_rows, C_in) WRITTEN; may be NULL
 *   dweight: (C_in, C_out)  ADDED
 *   dout   : (n_rows, C_out);  inp, weight: as forward. */
void pointwise_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                        const float *weight, size_t n_rows, int C_in, int C_out);

/* ---- zero padding (Keras ZeroPadding2D(((top, bottom), (left, right)))) ---- */
typedef struct {
    int H, W, C;                    /* input of one example */
    int top, bottom, left, right;   /* rows/columns of zeros added */
    int OH, OW;                     /* H + top + bottom, W + left + right */
} ZeroPad;

/* Returns 0, or -1 for a non-positive size or a negative pad. */
int zeropad_init(ZeroPad *z, int H, int W, int C, int top, int bottom, int left, int right);

/* Keras applications' correct_pad(inputs, kernel_size) for a square kernel
 * k: adjust = 1 - size % 2, correct = k / 2; pad (correct - adjust, correct)
 * in each dimension.  Writes the four pads. */
void keras_correct_pad(int *top, int *bottom, int *left, int *right, int H, int W, int k);

/* out: (B, OH, OW, C) written; inp: (B, H, W, C). */
void zeropad_forward(float *out, const float *inp, const ZeroPad *z, int B);

/* dinp: (B, H, W, C) WRITTEN, the crop of dout: (B, OH, OW, C). */
void zeropad_backward(float *dinp, const float *dout, const ZeroPad *z, int B);

/* ---- ReLU6 (Keras ReLU(6.)): out = min(max(x, 0), 6) ---------------------- */

/* out, inp: (n), may alias. */
void relu6_forward(float *out, const float *inp, size_t n);

/* dinp WRITTEN = 0 < out < 6 ? dout : 0 (TensorFlow's Relu6Grad: the
 * derivative is 0 at both kinks).  dinp, out, dout: (n); dinp may alias dout. */
void relu6_backward(float *dinp, const float *out, const float *dout, size_t n);

/* ---- ReLU as a layer (Keras Activation("relu"), ResNet's after a batch norm):
 * relu_forward / relu_backward, but OpenMP-parallel over the elements (those
 * two are serial: they run inside conv2d's per-image loop). ------------------ */

/* out = max(inp, 0).  out, inp: (n), may alias. */
void relu_layer_forward(float *out, const float *inp, size_t n);

/* dinp WRITTEN = out > 0 ? dout : 0 (the derivative at 0 is 0, TensorFlow's
 * ReluGrad).  dinp, out, dout: (n); dinp may alias dout. */
void relu_layer_backward(float *dinp, const float *out, const float *dout, size_t n);

/* ---- residual addition (Keras Add) ---------------------------------------- */

/* out = a + b.  out, a, b: (n); out may alias a or b. */
void add_forward(float *out, const float *a, const float *b, size_t n);

/* da, db WRITTEN = dout (each may be NULL, or alias dout: then nothing is
 * copied for it; or da and db one buffer: copied once).  da, db, dout: (n).
 * See the DAG rule above. */
void add_backward(float *da, float *db, const float *dout, size_t n);

/* The residual addition with a fused activation (graph_fuse: Keras's Add
 * followed by Activation("relu"), ResNet's "*_add" + "*_out"):
 *   out = act(a + b), act ACT_NONE, ACT_RELU or ACT_RELU6, rounded as
 *         add_forward then relu_layer_forward / relu6_forward;
 *   da = db = act's gradient of dout at out, as relu_layer_backward /
 *         relu6_backward then add_backward (WRITTEN; either may be NULL;
 *         out and dout not modified unless da or db aliases dout).
 * Shapes: out, a, b, dout, da, db: (n). */
void add_act_forward(float *out, const float *a, const float *b, Activation act, size_t n);
void add_act_backward(float *da, float *db, const float *out, const float *dout, Activation act, size_t n);

/* ---- global average pooling (Keras GlobalAveragePooling2D): NHWC -> NC ---- */

/* out[b, c] = sum over the n_pixels = H * W pixels of inp[b, p, c] / n_pixels,
 * summed in pixel order in float.  out: (B, C) written; inp: (B, n_pixels, C). */
void global_avgpool_forward(float *out, const float *inp, int B, int n_pixels, int C);

/* dinp[b, p, c] WRITTEN = dout[b, c] / n_pixels.  dinp: (B, n_pixels, C); dout: (B, C). */
void global_avgpool_backward(float *dinp, const float *dout, int B, int n_pixels, int C);

/* ---- dropout (Keras Dropout, inverted): training keeps each element with
 * probability 1 - rate and scales it by 1 / (1 - rate); evaluation is the
 * identity.  The mask is not stored: element i is kept iff
 * (hash(key, i) >> 40) >= threshold, hash = splitmix64's finaliser of
 * key + (i + 1) * 0x9E3779B97F4A7C15, threshold = ceil(rate * 2^24); the key
 * comes from (seed, step, tower, layer), so every (step, tower) draws its
 * own mask, the same on CPU and GPU and for any thread count, and backward
 * recomputes it. */
typedef struct {
    float rate;             /* in [0, 1) */
    float scale;            /* 1 / (1 - rate), in float as TensorFlow */
    uint32_t threshold;     /* ceil(rate * 2^24) */
} Dropout;

/* Returns 0, or -1 unless 0 <= rate < 1. */
int dropout_init(Dropout *d, float rate);

/* The mask's key for one (seed, training step, tower, dropout layer). */
uint64_t dropout_key(uint64_t seed, uint64_t step, int tower, int layer);

/* 1 if element i is kept under key (the mask both passes use). */
int dropout_keep(const Dropout *d, uint64_t key, size_t i);

/* training: out = keep(i) ? inp * scale : 0; otherwise out = inp.
 * out, inp: (n), may alias. */
void dropout_forward(float *out, const float *inp, const Dropout *d, uint64_t key, int training, size_t n);

/* dinp WRITTEN = keep(i) ? dout * scale : 0 (training), dout (evaluation).
 * dinp, dout: (n), may alias. */
void dropout_backward(float *dinp, const float *dout, const Dropout *d, uint64_t key, int training, size_t n);

#endif
