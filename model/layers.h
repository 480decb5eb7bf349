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
typedef enum { ACT_NONE = 0, ACT_RELU = 1 } Activation;

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
 * OpenMP threads: per thread one image's im2col matrix (OH*OW, KH*KW*C_in),
 * its gradient, the pre-activation gradient (OH*OW, C_out) and partial
 * weight/bias gradients. */
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
 *   dweight: (KH, KW, C_in, C_out) OVERWRITTEN
 *   dbias  : (C_out)           OVERWRITTEN; may be NULL
 *   scratch: as for forward, clobbered
 *   out    : (B, OH, OW, C_out) forward's output (read only when act == ACT_RELU)
 *   dout   : (B, OH, OW, C_out) gradient of the loss w.r.t. out (not modified)
 *   inp, weight: as for forward.
 * The relu derivative at exactly 0 is taken as 0 (TensorFlow's choice). */
void conv2d_backward(float *dinp, float *dweight, float *dbias, float *scratch,
                     const float *out, const float *dout, const float *inp,
                     const float *weight, const Conv2d *c, int B, int n_threads);

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
 *   dweight: (n_in, n_out)   OVERWRITTEN
 *   dbias  : (n_out)         OVERWRITTEN; may be NULL
 *   dpre   : (B, n_out)      scratch for the pre-activation gradient when
 *                            act == ACT_RELU (may alias dout, which is then
 *                            overwritten); unused and may be NULL otherwise
 *   out    : (B, n_out)      forward's output (read only when act == ACT_RELU)
 *   dout   : (B, n_out) */
void dense_backward(float *dinp, float *dweight, float *dbias, float *dpre,
                    const float *out, const float *dout, const float *inp,
                    const float *weight, const Dense *d, int B);

/* ---- bias add and relu (building blocks, also fused into conv2d/dense) ---- */

/* out[r, c] = inp[r, c] + bias[c].  out, inp: (n_rows, C), may alias; bias: (C). */
void bias_add_forward(float *out, const float *inp, const float *bias, size_t n_rows, int C);

/* dbias[c] ADDS sum over rows of dout[r, c].  dbias: (C); dout: (n_rows, C). */
void bias_add_backward(float *dbias, const float *dout, size_t n_rows, int C);

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

#endif
