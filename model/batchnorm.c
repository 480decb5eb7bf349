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
 * Threads: OpenMP over channel blocks; each channel's sum runs over the rows
 * in order, so results do not depend on the thread count.
 * What it does not do: allocate, keep the moving statistics (the caller's
 * non-trainable variables), or reduce across towers.
 */
#include "model/layers.h"

#include <math.h>
#include <string.h>

/* Channels per OpenMP work item: 16 floats of a row are one cache line. */
#define BN_CHANNEL_BLOCK 16

void batchnorm_sums(double *sums, const float *inp, size_t n_rows, int C) {
    const int n_blocks = (C + BN_CHANNEL_BLOCK - 1) / BN_CHANNEL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < n_blocks; k++) {
        const int c0 = k * BN_CHANNEL_BLOCK, c1 = c0 + BN_CHANNEL_BLOCK < C ? c0 + BN_CHANNEL_BLOCK : C;
        double s[BN_CHANNEL_BLOCK] = {0}, s2[BN_CHANNEL_BLOCK] = {0};
        for (size_t r = 0; r < n_rows; r++) {
            const float *x = inp + r * C;
            for (int c = c0; c < c1; c++) {
                double v = x[c];
                s[c - c0] += v;
                s2[c - c0] += v * v;
            }
        }
        for (int c = c0; c < c1; c++) {
            sums[c] = s[c - c0];
            sums[C + c] = s2[c - c0];
        }
    }
}

void batchnorm_moments(float *mean, float *var, const double *sums, double count, int C) {
    for (int c = 0; c < C; c++) {
        double m = sums[c] / count;
        double v = sums[C + c] / count - m * m;
        mean[c] = (float)m;
        var[c] = (float)(v > 0.0 ? v : 0.0);
    }
}

void batchnorm_normalize(float *out, float *inv_std, const float *inp, const float *mean,
                         const float *var, const float *gamma, const float *beta, float epsilon,
                         size_t n_rows, int C) {
    for (int c = 0; c < C; c++) inv_std[c] = 1.0f / sqrtf(var[c] + epsilon);
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < n_rows; r++) {
        const float *x = inp + r * C;
        float *y = out + r * C;
        for (int c = 0; c < C; c++) y[c] = (x[c] - mean[c]) * inv_std[c] * gamma[c] + beta[c];
    }
}

void batchnorm_forward_train(float *out, float *mean, float *var, float *inv_std, double *sums,
                             const float *inp, const float *gamma, const float *beta,
                             const BatchNorm *bn, size_t n_rows) {
    batchnorm_sums(sums, inp, n_rows, bn->C);
    batchnorm_moments(mean, var, sums, (double)n_rows, bn->C);
    batchnorm_normalize(out, inv_std, inp, mean, var, gamma, beta, bn->epsilon, n_rows, bn->C);
}

void batchnorm_forward_eval(float *out, float *inv_std, const float *inp, const float *moving_mean,
                            const float *moving_var, const float *gamma, const float *beta,
                            const BatchNorm *bn, size_t n_rows) {
    batchnorm_normalize(out, inv_std, inp, moving_mean, moving_var, gamma, beta, bn->epsilon, n_rows, bn->C);
}

void batchnorm_update_moving(float *moving_mean, float *moving_var, const float *mean,
                             const float *var, double momentum, int C) {
    const float m = (float)momentum, one_minus_m = (float)(1.0 - momentum);
    for (int c = 0; c < C; c++) {
        moving_mean[c] = moving_mean[c] * m + mean[c] * one_minus_m;
        moving_var[c] = moving_var[c] * m + var[c] * one_minus_m;
    }
}

void batchnorm_backward_sums(double *dsums, const float *dout, const float *inp, const float *mean,
                             const float *inv_std, size_t n_rows, int C) {
    const int n_blocks = (C + BN_CHANNEL_BLOCK - 1) / BN_CHANNEL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < n_blocks; k++) {
        const int c0 = k * BN_CHANNEL_BLOCK, c1 = c0 + BN_CHANNEL_BLOCK < C ? c0 + BN_CHANNEL_BLOCK : C;
        double s[BN_CHANNEL_BLOCK] = {0}, s2[BN_CHANNEL_BLOCK] = {0};
        for (size_t r = 0; r < n_rows; r++) {
            const float *x = inp + r * C, *g = dout + r * C;
            for (int c = c0; c < c1; c++) {
                double xhat = (double)((x[c] - mean[c]) * inv_std[c]);
                s[c - c0] += g[c];
                s2[c - c0] += (double)g[c] * xhat;
            }
        }
        for (int c = c0; c < c1; c++) {
            dsums[c] = s[c - c0];
            dsums[C + c] = s2[c - c0];
        }
    }
}

void batchnorm_param_grads(float *dgamma, float *dbeta, const double *dsums, int C) {
    for (int c = 0; c < C; c++) {
        dgamma[c] += (float)dsums[C + c];
        dbeta[c] += (float)dsums[c];
    }
}

void batchnorm_backward_input(float *dinp, const float *dout, const float *inp, const float *mean,
                              const float *inv_std, const float *gamma, const double *dsums,
                              double count, size_t n_rows, int C) {
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < n_rows; r++) {
        const float *x = inp + r * C, *g = dout + r * C;
        float *dx = dinp + r * C;
        for (int c = 0; c < C; c++) {
            const float mean_dy = (float)(dsums[c] / count), mean_dy_xhat = (float)(dsums[C + c] / count);
            const float xhat = (x[c] - mean[c]) * inv_std[c];
            dx[c] = gamma[c] * inv_std[c] * (g[c] - mean_dy - xhat * mean_dy_xhat);
        }
    }
}

void batchnorm_backward(float *dinp, float *dgamma, float *dbeta, double *dsums, const float *dout,
                        const float *inp, const float *mean, const float *inv_std,
                        const float *gamma, const BatchNorm *bn, size_t n_rows) {
    batchnorm_backward_sums(dsums, dout, inp, mean, inv_std, n_rows, bn->C);
    batchnorm_param_grads(dgamma, dbeta, dsums, bn->C);
    if (dinp)
        batchnorm_backward_input(dinp, dout, inp, mean, inv_std, gamma, dsums, (double)n_rows, n_rows, bn->C);
}
