/* batchnorm.c — Keras's BatchNormalization over the channels of an NHWC
 * tensor: statistics, normalisation, the moving-statistics update and the
 * gradients, split so that a caller can reduce the statistics across towers.
 *
 * Where it sits: the layer graph's batch-norm node calls these on a tower's
 * shard; with --batch_norm tower each tower uses batchnorm_forward_train /
 * batchnorm_backward on its own rows, with --batch_norm sync the caller adds
 * the towers' batchnorm_sums / batchnorm_backward_sums and every tower
 * normalises with the global moments.  The readable loops here are the
 * test oracle of the CUDA twin (batchnorm_cuda.cu).
 * Threads: the per-channel sums run over BATCHNORM_CPU_CHUNKS fixed row
 * chunks in parallel (row-major, the channel loop innermost and
 * contiguous, so it vectorises), each chunk in double, the chunks then added
 * in order: results do not depend on the thread count.  Normalisation and
 * the input gradient are parallel over rows.
 * What it does not do: allocate, keep the moving statistics (the caller's
 * non-trainable variables), or reduce across towers.
 */
#include "model/layers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Below this many floats a loop runs on the calling thread (a parallel
 * region costs more than the work). */
#define OMP_MIN_FLOATS 32768

/* Fixed row chunks (a function of n_rows only): each chunk's sums in double
 * over its rows in order, then the chunks added in order, so results do not
 * depend on the thread count. */
static int n_chunks_for(size_t n_rows) {
    return n_rows < BATCHNORM_CPU_CHUNKS ? (n_rows > 0 ? (int)n_rows : 1) : BATCHNORM_CPU_CHUNKS;
}

/* Chunk k's rows [r0, r1) of n_rows split into n equal-as-possible parts. */
static void chunk_rows(size_t *r0, size_t *r1, size_t n_rows, int k, int n) {
    *r0 = n_rows * (size_t)k / (size_t)n;
    *r1 = n_rows * (size_t)(k + 1) / (size_t)n;
}

/* sums (2, C) = the chunks' partials (n_chunks, 2, C) added in chunk order. */
static void add_chunks(double *sums, const double *partials, int n_chunks, int C) {
    for (int j = 0; j < 2 * C; j++) {
        double t = 0.0;
        for (int k = 0; k < n_chunks; k++) t += partials[(size_t)k * 2 * C + j];
        sums[j] = t;
    }
}

void batchnorm_sums(double *sums, double *partials, const float *inp, size_t n_rows, int C) {
    const int n = n_chunks_for(n_rows);
#pragma omp parallel for schedule(static) if (n_rows * (size_t)C >= OMP_MIN_FLOATS)
    for (int k = 0; k < n; k++) {
        double *s = partials + (size_t)k * 2 * C, *s2 = s + C;
        size_t r0, r1;
        chunk_rows(&r0, &r1, n_rows, k, n);
        for (int c = 0; c < C; c++) s[c] = s2[c] = 0.0;
        for (size_t r = r0; r < r1; r++) {
            const float *x = inp + r * C;
            for (int c = 0; c < C; c++) {
                const double v = x[c];
                s[c] += v;
                s2[c] += v * v;
            }
        }
    }
    add_chunks(sums, partials, n, C);
}

void batchnorm_moments(float *mean, float *var, const double *sums, double count, int C) {
    for (int c = 0; c < C; c++) {
        double m = sums[c] / count;
        double v = sums[C + c] / count - m * m;
        mean[c] = (float)m;
        var[c] = (float)(v > 0.0 ? v : 0.0);
    }
}

/* The activation's upper bound: ReLU6's 6, ReLU's none. */
static float act_hi(Activation act) { return act == ACT_RELU6 ? 6.0f : INFINITY; }

void batchnorm_normalize_act(float *out, float *inv_std, const float *inp, const float *mean,
                             const float *var, const float *gamma, const float *beta, float epsilon,
                             Activation act, size_t n_rows, int C) {
    for (int c = 0; c < C; c++) inv_std[c] = 1.0f / sqrtf(var[c] + epsilon);
    if (act == ACT_NONE) {
#pragma omp parallel for schedule(static) if (n_rows * (size_t)C >= OMP_MIN_FLOATS)
        for (size_t r = 0; r < n_rows; r++) {
            const float *x = inp + r * C;
            float *y = out + r * C;
            for (int c = 0; c < C; c++) y[c] = (x[c] - mean[c]) * inv_std[c] * gamma[c] + beta[c];
        }
        return;
    }
    const float hi = act_hi(act);
#pragma omp parallel for schedule(static) if (n_rows * (size_t)C >= OMP_MIN_FLOATS)
    for (size_t r = 0; r < n_rows; r++) {
        const float *x = inp + r * C;
        float *y = out + r * C;
        for (int c = 0; c < C; c++) {
            const float z = (x[c] - mean[c]) * inv_std[c] * gamma[c] + beta[c];
            const float p = z > 0.0f ? z : 0.0f; /* relu6_forward's and relu_layer_forward's order */
            y[c] = p < hi ? p : hi;
        }
    }
}

void batchnorm_normalize(float *out, float *inv_std, const float *inp, const float *mean,
                         const float *var, const float *gamma, const float *beta, float epsilon,
                         size_t n_rows, int C) {
    batchnorm_normalize_act(out, inv_std, inp, mean, var, gamma, beta, epsilon, ACT_NONE, n_rows, C);
}

void batchnorm_forward_train(float *out, float *mean, float *var, float *inv_std, double *scratch,
                             const float *inp, const float *gamma, const float *beta,
                             const BatchNorm *bn, size_t n_rows) {
    double *sums = scratch, *partials = scratch + 2 * (size_t)bn->C;
    batchnorm_sums(sums, partials, inp, n_rows, bn->C);
    batchnorm_moments(mean, var, sums, (double)n_rows, bn->C);
    batchnorm_normalize_act(out, inv_std, inp, mean, var, gamma, beta, bn->epsilon, bn->act, n_rows, bn->C);
}

void batchnorm_forward_eval(float *out, float *inv_std, const float *inp, const float *moving_mean,
                            const float *moving_var, const float *gamma, const float *beta,
                            const BatchNorm *bn, size_t n_rows) {
    batchnorm_normalize_act(out, inv_std, inp, moving_mean, moving_var, gamma, beta, bn->epsilon, bn->act, n_rows,
                            bn->C);
}

void batchnorm_update_moving(float *moving_mean, float *moving_var, const float *mean,
                             const float *var, double momentum, int C) {
    const float m = (float)momentum, one_minus_m = (float)(1.0 - momentum);
    for (int c = 0; c < C; c++) {
        moving_mean[c] = moving_mean[c] * m + mean[c] * one_minus_m;
        moving_var[c] = moving_var[c] * m + var[c] * one_minus_m;
    }
}

void batchnorm_apply_moving_share(float *out, const float *moving, const float *share, double momentum, size_t n) {
    const float m = (float)momentum;
    for (size_t i = 0; i < n; i++) out[i] = moving[i] * m + share[i];
}

void batchnorm_backward_sums_act(double *dsums, double *partials, const float *dout, const float *inp,
                                 const float *mean, const float *inv_std, const float *gamma,
                                 const float *beta, Activation act, size_t n_rows, int C) {
    const int n = n_chunks_for(n_rows);
    const float hi = act_hi(act);
#pragma omp parallel for schedule(static) if (n_rows * (size_t)C >= OMP_MIN_FLOATS)
    for (int k = 0; k < n; k++) {
        double *s = partials + (size_t)k * 2 * C, *s2 = s + C;
        size_t r0, r1;
        chunk_rows(&r0, &r1, n_rows, k, n);
        for (int c = 0; c < C; c++) s[c] = s2[c] = 0.0;
        for (size_t r = r0; r < r1; r++) {
            const float *x = inp + r * C, *g = dout + r * C;
            if (act == ACT_NONE) {
                for (int c = 0; c < C; c++) {
                    const float xhat = (x[c] - mean[c]) * inv_std[c];
                    s[c] += (double)g[c];
                    s2[c] += (double)g[c] * (double)xhat;
                }
            } else {
                for (int c = 0; c < C; c++) {
                    const float xhat = (x[c] - mean[c]) * inv_std[c];
                    const float z = xhat * gamma[c] + beta[c];
                    /* the mask as a 0/1 factor in double (a select here keeps GCC from vectorising):
                     * the same sums for finite dy; a masked inf or NaN dy gives NaN, not 0 */
                    const double keep = (double)((z > 0.0f) & (z < hi)), gz = (double)g[c] * keep;
                    s[c] += gz;
                    s2[c] += gz * (double)xhat;
                }
            }
        }
    }
    add_chunks(dsums, partials, n, C);
}

void batchnorm_backward_sums(double *dsums, double *partials, const float *dout, const float *inp,
                             const float *mean, const float *inv_std, size_t n_rows, int C) {
    batchnorm_backward_sums_act(dsums, partials, dout, inp, mean, inv_std, NULL, NULL, ACT_NONE, n_rows, C);
}

void batchnorm_param_grads(float *dgamma, float *dbeta, const double *dsums, int C) {
    for (int c = 0; c < C; c++) {
        dgamma[c] += (float)dsums[C + c];
        dbeta[c] += (float)dsums[c];
    }
}

/* Channels whose per-channel factors are computed once per block (stack arrays). */
#define BN_CHANNEL_BLOCK 256

void batchnorm_backward_input_act(float *dinp, const float *dout, const float *inp, const float *mean,
                                  const float *inv_std, const float *gamma, const float *beta,
                                  Activation act, const double *dsums, double count, size_t n_rows, int C) {
    const float hi = act_hi(act);
    for (int c0 = 0; c0 < C; c0 += BN_CHANNEL_BLOCK) {
        const int nc = C - c0 < BN_CHANNEL_BLOCK ? C - c0 : BN_CHANNEL_BLOCK;
        float mean_dy[BN_CHANNEL_BLOCK], mean_dy_xhat[BN_CHANNEL_BLOCK], scale[BN_CHANNEL_BLOCK];
        float ga[BN_CHANNEL_BLOCK], be[BN_CHANNEL_BLOCK];
        for (int j = 0; j < nc; j++) {
            mean_dy[j] = (float)(dsums[c0 + j] / count);
            mean_dy_xhat[j] = (float)(dsums[C + c0 + j] / count);
            scale[j] = gamma[c0 + j] * inv_std[c0 + j];
            ga[j] = gamma[c0 + j];
            be[j] = act == ACT_NONE ? 0.0f : beta[c0 + j];
        }
        const float *m = mean + c0, *is = inv_std + c0;
#pragma omp parallel for schedule(static) if (n_rows * (size_t)nc >= OMP_MIN_FLOATS)
        for (size_t r = 0; r < n_rows; r++) {
            const float *x = inp + r * C + c0, *g = dout + r * C + c0;
            float *dx = dinp + r * C + c0;
            if (act == ACT_NONE) {
                for (int j = 0; j < nc; j++) {
                    const float xhat = (x[j] - m[j]) * is[j];
                    dx[j] = scale[j] * (g[j] - mean_dy[j] - xhat * mean_dy_xhat[j]);
                }
            } else {
                for (int j = 0; j < nc; j++) {
                    const float xhat = (x[j] - m[j]) * is[j];
                    const float z = xhat * ga[j] + be[j];
                    const float gj = g[j];
                    const float gz = ((z > 0.0f) & (z < hi)) ? gj : 0.0f;
                    dx[j] = scale[j] * (gz - mean_dy[j] - xhat * mean_dy_xhat[j]);
                }
            }
        }
    }
}

void batchnorm_backward_input(float *dinp, const float *dout, const float *inp, const float *mean,
                              const float *inv_std, const float *gamma, const double *dsums,
                              double count, size_t n_rows, int C) {
    batchnorm_backward_input_act(dinp, dout, inp, mean, inv_std, gamma, NULL, ACT_NONE, dsums, count, n_rows, C);
}

void batchnorm_backward_act(float *dinp, float *dgamma, float *dbeta, double *scratch, const float *dout,
                            const float *inp, const float *mean, const float *inv_std,
                            const float *gamma, const float *beta, const BatchNorm *bn, size_t n_rows) {
    double *dsums = scratch, *partials = scratch + 2 * (size_t)bn->C;
    batchnorm_backward_sums_act(dsums, partials, dout, inp, mean, inv_std, gamma, beta, bn->act, n_rows, bn->C);
    batchnorm_param_grads(dgamma, dbeta, dsums, bn->C);
    if (dinp)
        batchnorm_backward_input_act(dinp, dout, inp, mean, inv_std, gamma, beta, bn->act, dsums, (double)n_rows,
                                     n_rows, bn->C);
}

void batchnorm_backward(float *dinp, float *dgamma, float *dbeta, double *scratch, const float *dout,
                        const float *inp, const float *mean, const float *inv_std,
                        const float *gamma, const BatchNorm *bn, size_t n_rows) {
    if (bn->act != ACT_NONE) {
        fprintf(stderr, "batchnorm_backward: a fused activation needs beta (batchnorm_backward_act)\n");
        abort();
    }
    batchnorm_backward_act(dinp, dgamma, dbeta, scratch, dout, inp, mean, inv_std, gamma, NULL, bn, n_rows);
}
