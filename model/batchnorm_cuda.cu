/* batchnorm_cuda.cu — Keras's BatchNormalization on the GPU, NHWC, per
 * channel: the CUDA twin of batchnorm.c, with the same split (per-tower
 * sums, moments over any count, normalise; backward sums, parameter
 * gradients, input gradient) so that sync batch norm can add the towers'
 * sums between the steps.
 *
 * Where it sits: the layer graph's batch-norm node on a GPU tower.  Why our
 * own kernels and not cuDNN's batch norm: cuDNN's running variance is the
 * unbiased one and its training call cannot take statistics reduced across
 * towers (layers_cuda.h).  Column sums go through fixed row chunks in
 * double (block (32, 8): 32 channels, 8 rows at a time), the chunks then
 * added in order: deterministic, no atomics.
 * Small maps in tower mode (at most BN_CUDA_FUSED_MAX_ROWS rows, with
 * TOWER_BN_CUDA_FUSED=1 in the environment): one kernel for the whole
 * forward (sums, moments, normalise, the fused ReLU/ReLU6) and one for the
 * whole backward, one block per 32 channels walking the same chunks in the
 * same order: bitwise the split kernels' results with 1 launch instead of
 * 6 forward and 5 backward (mobilenet_v2's 1x1 to 4x4 maps were
 * launch-bound: 0.03-0.04 ms a call against cuDNN's 0.02).
 * What it does not do: allocate, synchronise, or reduce across towers.
 */
#include "model/layers_cuda.h"
#include "base/flags.h"

#include <stdlib.h>

static unsigned blocks_for(size_t n, int threads) {
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    return (unsigned)(b < 65535u * 32u ? (b ? b : 1) : 65535u * 32u);
}

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

/* Thread (x, y)'s share of one chunk's sums of column c: rows r0 + y, r0 + y + 8, ... below r1, in order
 * (0 and 0 when c >= C), every operation rounded on its own (no fused multiply-add: the split and the fused
 * kernels must give the same bits whatever the compiler contracts).  backward == 0: (x, x^2); backward == 1:
 * (g, g * xhat) with g act's gradient of dout at out and xhat = (x - m) * is as the CPU rounds it. */
__device__ static inline void bn_lane_sums(double *s_out, double *s2_out, const float *inp, const float *dout,
                                           const float *out, float m, float is, int act, size_t r0, size_t r1,
                                           int C, int c, int backward) {
    double s = 0.0, s2 = 0.0;
    if (c < C) {
        if (backward) {
            for (size_t r = r0 + threadIdx.y; r < r1; r += 8) {
                const float g = act_grad_cuda(dout, out, r * C + c, act);
                const float xhat = __fmul_rn(__fsub_rn(inp[r * C + c], m), is);
                s = __dadd_rn(s, (double)g);
                s2 = __dadd_rn(s2, __dmul_rn((double)g, (double)xhat));
            }
        } else {
            for (size_t r = r0 + threadIdx.y; r < r1; r += 8) {
                const double v = inp[r * C + c];
                s = __dadd_rn(s, v);
                s2 = __dadd_rn(s2, __dmul_rn(v, v));
            }
        }
    }
    *s_out = s;
    *s2_out = s2;
}

/* The block's 8 lanes of column threadIdx.x, stored in sh and synchronised, added in lane order. */
__device__ static inline void bn_lanes_total(double *t_out, double *t2_out, double (*sh)[8][32]) {
    double t = sh[0][0][threadIdx.x], t2 = sh[1][0][threadIdx.x];
    for (int k = 1; k < 8; k++) {
        t += sh[0][k][threadIdx.x];
        t2 += sh[1][k][threadIdx.x];
    }
    *t_out = t;
    *t2_out = t2;
}

/* Stage 1 of the column sums.  Block (32, 8) covers 32 channels of chunk
 * blockIdx.y; thread (x, y) takes every 8th row from y; row 0 of the block
 * adds the 8 partials in order.  backward == 0: (x, x^2); backward == 1:
 * (dy, dy * xhat). */
__global__ static void bn_partial_kernel(double *partials, const float *inp, const float *dout, const float *mean,
                                         const float *inv_std, size_t n_rows, int C, size_t rows_per_chunk,
                                         int backward) {
    __shared__ double sh[2][8][32];
    const int c = blockIdx.x * 32 + threadIdx.x;
    const size_t r0 = blockIdx.y * rows_per_chunk;
    const size_t r1 = r0 + rows_per_chunk < n_rows ? r0 + rows_per_chunk : n_rows;
    const float m = backward && c < C ? mean[c] : 0.0f, is = backward && c < C ? inv_std[c] : 0.0f;
    double s, s2;
    bn_lane_sums(&s, &s2, inp, dout, NULL, m, is, ACT_NONE, r0, r1, C, c, backward);
    sh[0][threadIdx.y][threadIdx.x] = s;
    sh[1][threadIdx.y][threadIdx.x] = s2;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        double t, t2;
        bn_lanes_total(&t, &t2, sh);
        partials[(size_t)blockIdx.y * 2 * C + c] = t;
        partials[(size_t)blockIdx.y * 2 * C + C + c] = t2;
    }
}

/* Stage 2: sums[j] = the chunks' partials of column j (of 2C), in chunk order. */
__global__ static void bn_final_kernel(double *sums, const double *partials, int n_chunks, int C) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= 2 * C) return;
    double s = 0.0;
    for (int k = 0; k < n_chunks; k++) s += partials[(size_t)k * 2 * C + j];
    sums[j] = s;
}

extern "C" int batchnorm_cuda_chunks_from_env(char *err, size_t err_n_bytes) {
    const char *e = getenv("TOWER_BN_CUDA_CHUNKS");
    if (!e || !*e) return BN_CUDA_MAX_CHUNKS;
    char *end = NULL;
    const long v = strtol(e, &end, 10);
    if (*end != '\0' || v < 1 || v > BN_CUDA_CHUNKS_LIMIT) {
        snprintf(err, err_n_bytes, "TOWER_BN_CUDA_CHUNKS=%.32s: expected a whole number from 1 to %d", e,
                 BN_CUDA_CHUNKS_LIMIT);
        return -1;
    }
    return (int)v;
}

/* The cap on chunks, read once (a bad value, refused by model_acts_cuda_create, counts as unset here). */
static size_t read_max_chunks(void) {
    char err[128];
    const int v = batchnorm_cuda_chunks_from_env(err, sizeof err);
    return v > 0 ? (size_t)v : BN_CUDA_MAX_CHUNKS;
}

/* The row chunks of the column sums: at least 64 rows, at most the cap, a function of n_rows only (the split
 * kernels and the fused ones walk the same chunks). */
static void chunking(size_t n_rows, size_t *n_chunks, size_t *rows_per_chunk) {
    static const size_t max_chunks = read_max_chunks(); /* initialised once, thread-safely */
    size_t n = (n_rows + 63) / 64;
    if (n > max_chunks) n = max_chunks;
    if (n < 1) n = 1;
    *n_chunks = n;
    *rows_per_chunk = (n_rows + n - 1) / n;
}

static void column_sums(double *sums, double *partials, const float *inp, const float *dout, const float *mean,
                        const float *inv_std, size_t n_rows, int C, int backward, cudaStream_t stream) {
    size_t n_chunks, rows_per_chunk;
    chunking(n_rows, &n_chunks, &rows_per_chunk);
    dim3 grid((unsigned)((C + 31) / 32), (unsigned)n_chunks), block(32, 8);
    bn_partial_kernel<<<grid, block, 0, stream>>>(partials, inp, dout, mean, inv_std, n_rows, C, rows_per_chunk,
                                                  backward);
    CUDA_CHECK(cudaGetLastError());
    bn_final_kernel<<<blocks_for((size_t)2 * C, 128), 128, 0, stream>>>(sums, partials, (int)n_chunks, C);
    CUDA_CHECK(cudaGetLastError());
}

/* mean and biased variance from the sums over count rows, as batchnorm_moments (each operation rounded on
 * its own: the split and the fused kernels give the same bits). */
__device__ static inline void bn_moments(float *mean, float *var, double s, double s2, double count) {
    const double m = __ddiv_rn(s, count);
    const double v = __dsub_rn(__ddiv_rn(s2, count), __dmul_rn(m, m));
    *mean = (float)m;
    *var = (float)(v > 0.0 ? v : 0.0);
}

__global__ static void bn_moments_kernel(float *mean, float *var, const double *sums, double count, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    bn_moments(&mean[c], &var[c], sums[c], sums[C + c], count);
}

__global__ static void bn_inv_std_kernel(float *inv_std, const float *var, float epsilon, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < C) inv_std[c] = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(var[c], epsilon)));
}

/* y = (x - mean) * inv_std * gamma + beta, rounded as the CPU's expression. */
__global__ static void bn_normalize_kernel(float *out, const float *inp, const float *mean, const float *inv_std,
                                           const float *gamma, const float *beta, size_t n, int C) {
    GRID_STRIDE(i, n) {
        const int c = (int)(i % C);
        const float t = __fmul_rn(__fmul_rn(__fsub_rn(inp[i], mean[c]), inv_std[c]), gamma[c]);
        out[i] = __fadd_rn(t, beta[c]);
    }
}

__global__ static void bn_moving_kernel(float *mm, float *mv, const float *mean, const float *var, float m,
                                        float one_minus_m, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    mm[c] = __fadd_rn(__fmul_rn(mm[c], m), __fmul_rn(mean[c], one_minus_m));
    mv[c] = __fadd_rn(__fmul_rn(mv[c], m), __fmul_rn(var[c], one_minus_m));
}

__global__ static void bn_param_grads_kernel(float *dgamma, float *dbeta, const double *dsums, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    dgamma[c] = __fadd_rn(dgamma[c], (float)dsums[C + c]);
    dbeta[c] = __fadd_rn(dbeta[c], (float)dsums[c]);
}

__global__ static void bn_backward_input_kernel(float *dinp, const float *dout, const float *inp, const float *mean,
                                                const float *inv_std, const float *gamma, const double *dsums,
                                                double count, size_t n, int C) {
    GRID_STRIDE(i, n) {
        const int c = (int)(i % C);
        const float mean_dy = (float)(dsums[c] / count), mean_dy_xhat = (float)(dsums[C + c] / count);
        const float xhat = __fmul_rn(__fsub_rn(inp[i], mean[c]), inv_std[c]);
        const float t = __fsub_rn(__fsub_rn(dout[i], mean_dy), __fmul_rn(xhat, mean_dy_xhat));
        dinp[i] = __fmul_rn(__fmul_rn(gamma[c], inv_std[c]), t);
    }
}

/* ---- small maps: one kernel each way (the file's header) ---- */

/* Column sums of the block's 32 channels over every chunk, in bn_partial_kernel's order within a chunk and
 * bn_final_kernel's across chunks; valid in row 0 of the block (threadIdx.y == 0).  backward == 0: (x, x^2);
 * 1: (g, g * xhat), g = act's gradient of dout at out. */
__device__ static void bn_block_sums(double *S, double *S2, double (*sh)[8][32], const float *inp, const float *dout,
                                     const float *out, float m, float is, int act, size_t n_rows, int C, int c,
                                     size_t n_chunks, size_t rows_per_chunk, int backward) {
    double tot = 0.0, tot2 = 0.0;
    for (size_t k = 0; k < n_chunks; k++) {
        const size_t r0 = k * rows_per_chunk, r1 = r0 + rows_per_chunk < n_rows ? r0 + rows_per_chunk : n_rows;
        double s, s2;
        bn_lane_sums(&s, &s2, inp, dout, out, m, is, act, r0, r1, C, c, backward);
        sh[0][threadIdx.y][threadIdx.x] = s;
        sh[1][threadIdx.y][threadIdx.x] = s2;
        __syncthreads();
        if (threadIdx.y == 0) {
            double t, t2;
            bn_lanes_total(&t, &t2, sh);
            tot += t;
            tot2 += t2;
        }
        __syncthreads(); /* sh is the next chunk's */
    }
    *S = tot;
    *S2 = tot2;
}

/* Block (32, 8) per 32 channels: the sums, bn_moments_kernel's and bn_inv_std_kernel's statistics, then
 * bn_normalize_kernel's output through act. */
__global__ static void bn_fused_forward_kernel(float *out, float *mean, float *var, float *inv_std, const float *inp,
                                               const float *gamma, const float *beta, float epsilon, int act,
                                               size_t n_rows, int C, size_t n_chunks, size_t rows_per_chunk) {
    __shared__ double sh[2][8][32];
    __shared__ float s_mean[32], s_inv[32];
    const int c = blockIdx.x * 32 + threadIdx.x;
    double S, S2;
    bn_block_sums(&S, &S2, sh, inp, NULL, NULL, 0.0f, 0.0f, ACT_NONE, n_rows, C, c, n_chunks, rows_per_chunk, 0);
    if (threadIdx.y == 0 && c < C) {
        float mf, vf;
        bn_moments(&mf, &vf, S, S2, (double)n_rows);
        const float is = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(vf, epsilon)));
        mean[c] = mf;
        var[c] = vf;
        inv_std[c] = is;
        s_mean[threadIdx.x] = mf;
        s_inv[threadIdx.x] = is;
    }
    __syncthreads();
    if (c >= C) return;
    const float mf = s_mean[threadIdx.x], is = s_inv[threadIdx.x], ga = gamma[c], be = beta[c];
    for (size_t r = threadIdx.y; r < n_rows; r += 8) {
        const size_t i = r * C + c;
        const float t = __fmul_rn(__fmul_rn(__fsub_rn(inp[i], mf), is), ga);
        out[i] = act_apply_cuda(__fadd_rn(t, be), act);
    }
}

/* Block (32, 8) per 32 channels: the (g, g * xhat) sums, bn_param_grads_kernel's additions, then
 * bn_backward_input_kernel's input gradient (when dinp is not NULL). */
__global__ static void bn_fused_backward_kernel(float *dinp, float *dgamma, float *dbeta, const float *dout,
                                                const float *out, const float *inp, const float *mean,
                                                const float *inv_std, const float *gamma, int act, size_t n_rows,
                                                int C, size_t n_chunks, size_t rows_per_chunk) {
    __shared__ double sh[2][8][32];
    __shared__ float s_mdy[32], s_mdyx[32];
    const int c = blockIdx.x * 32 + threadIdx.x;
    const float m = c < C ? mean[c] : 0.0f, is = c < C ? inv_std[c] : 0.0f;
    double S, S2;
    bn_block_sums(&S, &S2, sh, inp, dout, out, m, is, act, n_rows, C, c, n_chunks, rows_per_chunk, 1);
    if (threadIdx.y == 0 && c < C) {
        dgamma[c] = __fadd_rn(dgamma[c], (float)S2);
        dbeta[c] = __fadd_rn(dbeta[c], (float)S);
        const double count = (double)n_rows;
        s_mdy[threadIdx.x] = (float)(S / count);
        s_mdyx[threadIdx.x] = (float)(S2 / count);
    }
    __syncthreads();
    if (!dinp || c >= C) return;
    const float mean_dy = s_mdy[threadIdx.x], mean_dy_xhat = s_mdyx[threadIdx.x];
    const float scale = __fmul_rn(gamma[c], is);
    for (size_t r = threadIdx.y; r < n_rows; r += 8) {
        const size_t i = r * C + c;
        const float g = act_grad_cuda(dout, out, i, act);
        const float xhat = __fmul_rn(__fsub_rn(inp[i], m), is);
        const float t = __fsub_rn(__fsub_rn(g, mean_dy), __fmul_rn(xhat, mean_dy_xhat));
        dinp[i] = __fmul_rn(scale, t);
    }
}

extern "C" int batchnorm_cuda_fused(size_t n_rows) {
    static const int on = flags_env_on("TOWER_BN_CUDA_FUSED"); /* read once */
    return on && n_rows >= 1 && n_rows <= BN_CUDA_FUSED_MAX_ROWS;
}

extern "C" void batchnorm_act_forward_train_fused_cuda(float *out, float *mean, float *var, float *inv_std,
                                                       const float *inp, const float *gamma, const float *beta,
                                                       const BatchNorm *bn, Activation act, size_t n_rows,
                                                       cudaStream_t stream) {
    size_t n_chunks, rows_per_chunk;
    chunking(n_rows, &n_chunks, &rows_per_chunk);
    bn_fused_forward_kernel<<<(unsigned)((bn->C + 31) / 32), dim3(32, 8), 0, stream>>>(
        out, mean, var, inv_std, inp, gamma, beta, bn->epsilon, (int)act, n_rows, bn->C, n_chunks, rows_per_chunk);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void batchnorm_act_backward_fused_cuda(float *dinp, float *dgamma, float *dbeta, const float *dout,
                                                  const float *out, const float *inp, const float *mean,
                                                  const float *inv_std, const float *gamma, const BatchNorm *bn,
                                                  Activation act, size_t n_rows, cudaStream_t stream) {
    size_t n_chunks, rows_per_chunk;
    chunking(n_rows, &n_chunks, &rows_per_chunk);
    bn_fused_backward_kernel<<<(unsigned)((bn->C + 31) / 32), dim3(32, 8), 0, stream>>>(
        dinp, dgamma, dbeta, dout, out, inp, mean, inv_std, gamma, (int)act, n_rows, bn->C, n_chunks, rows_per_chunk);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void batchnorm_sums_cuda(double *sums, double *partials, const float *inp, size_t n_rows, int C,
                                    cudaStream_t stream) {
    column_sums(sums, partials, inp, NULL, NULL, NULL, n_rows, C, 0, stream);
}

extern "C" void batchnorm_moments_cuda(float *mean, float *var, const double *sums, double count, int C,
                                       cudaStream_t stream) {
    bn_moments_kernel<<<blocks_for((size_t)C, 128), 128, 0, stream>>>(mean, var, sums, count, C);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void batchnorm_normalize_cuda(float *out, float *inv_std, const float *inp, const float *mean,
                                         const float *var, const float *gamma, const float *beta, float epsilon,
                                         size_t n_rows, int C, cudaStream_t stream) {
    bn_inv_std_kernel<<<blocks_for((size_t)C, 128), 128, 0, stream>>>(inv_std, var, epsilon, C);
    CUDA_CHECK(cudaGetLastError());
    const size_t n = n_rows * (size_t)C;
    bn_normalize_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, inp, mean, inv_std, gamma, beta, n, C);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void batchnorm_forward_train_cuda(float *out, float *mean, float *var, float *inv_std, double *scratch,
                                             const float *inp, const float *gamma, const float *beta,
                                             const BatchNorm *bn, size_t n_rows, cudaStream_t stream) {
    if (batchnorm_cuda_fused(n_rows)) {
        batchnorm_act_forward_train_fused_cuda(out, mean, var, inv_std, inp, gamma, beta, bn, ACT_NONE, n_rows, stream);
        return;
    }
    double *sums = scratch, *partials = scratch + 2 * (size_t)bn->C;
    batchnorm_sums_cuda(sums, partials, inp, n_rows, bn->C, stream);
    batchnorm_moments_cuda(mean, var, sums, (double)n_rows, bn->C, stream);
    batchnorm_normalize_cuda(out, inv_std, inp, mean, var, gamma, beta, bn->epsilon, n_rows, bn->C, stream);
}

extern "C" void batchnorm_forward_eval_cuda(float *out, float *inv_std, const float *inp, const float *moving_mean,
                                            const float *moving_var, const float *gamma, const float *beta,
                                            const BatchNorm *bn, size_t n_rows, cudaStream_t stream) {
    batchnorm_normalize_cuda(out, inv_std, inp, moving_mean, moving_var, gamma, beta, bn->epsilon, n_rows, bn->C,
                             stream);
}

extern "C" void batchnorm_update_moving_cuda(float *moving_mean, float *moving_var, const float *mean,
                                             const float *var, double momentum, int C, cudaStream_t stream) {
    bn_moving_kernel<<<blocks_for((size_t)C, 128), 128, 0, stream>>>(moving_mean, moving_var, mean, var,
                                                                      (float)momentum, (float)(1.0 - momentum), C);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void batchnorm_backward_sums_cuda(double *dsums, double *partials, const float *dout, const float *inp,
                                             const float *mean, const float *inv_std, size_t n_rows, int C,
                                             cudaStream_t stream) {
    column_sums(dsums, partials, inp, dout, mean, inv_std, n_rows, C, 1, stream);
}

extern "C" void batchnorm_param_grads_cuda(float *dgamma, float *dbeta, const double *dsums, int C,
                                           cudaStream_t stream) {
    bn_param_grads_kernel<<<blocks_for((size_t)C, 128), 128, 0, stream>>>(dgamma, dbeta, dsums, C);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void batchnorm_backward_input_cuda(float *dinp, const float *dout, const float *inp, const float *mean,
                                              const float *inv_std, const float *gamma, const double *dsums,
                                              double count, size_t n_rows, int C, cudaStream_t stream) {
    const size_t n = n_rows * (size_t)C;
    bn_backward_input_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(dinp, dout, inp, mean, inv_std, gamma, dsums,
                                                                      count, n, C);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void batchnorm_backward_cuda(float *dinp, float *dgamma, float *dbeta, double *scratch, const float *dout,
                                        const float *inp, const float *mean, const float *inv_std, const float *gamma,
                                        const BatchNorm *bn, size_t n_rows, cudaStream_t stream) {
    if (batchnorm_cuda_fused(n_rows)) {
        batchnorm_act_backward_fused_cuda(dinp, dgamma, dbeta, dout, NULL, inp, mean, inv_std, gamma, bn, ACT_NONE,
                                          n_rows, stream);
        return;
    }
    double *dsums = scratch, *partials = scratch + 2 * (size_t)bn->C;
    batchnorm_backward_sums_cuda(dsums, partials, dout, inp, mean, inv_std, n_rows, bn->C, stream);
    batchnorm_param_grads_cuda(dgamma, dbeta, dsums, bn->C, stream);
    if (dinp)
        batchnorm_backward_input_cuda(dinp, dout, inp, mean, inv_std, gamma, dsums, (double)n_rows, n_rows, bn->C,
                                      stream);
}
