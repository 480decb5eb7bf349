/* winograd.c — conv2d's three passes for a 3x3 or 5x5 kernel at stride 1
 * as Winograd's minimal filtering F(m x m, r x r) (Lavin and Gray, 2015),
 * F(2x2, 3x3), F(4x4, 3x3) and F(4x4, 5x5): each m x m block of outputs
 * comes from an a x a block of input (a = m + r - 1: 4, 6 and 8), and the
 * r*r x C_in multiply-adds per output become a*a x C_in per m*m outputs,
 * a*a matrix products (one per cell of the transform domain) instead of
 * one product with r*r x C_in rows: 2.25x, 4x and 6.25x fewer
 * multiply-adds.  Of a kernel size's kinds, the one with the fewest
 * transform-domain floats over the output map runs (kind_of): for 3x3,
 * F(2x2, 3x3) on maps of 1 or 2 a side, F(4x4, 3x3) from 3.
 *
 * Where it sits: model/, beside conv2d.c's loops (the readable version
 * and the oracle: tests/test_winograd.c compares every pass with them);
 * conv2d_dnnl.c runs these where conv_cpu_winograd_f2 says so (3x3: a CPU
 * without oneDNN's own Winograd kernels, which are AVX-512 only; 2x2
 * maps, which those refuse, on every CPU; with them, the passes with few
 * channels into their products; 5x5, for which oneDNN has none: every
 * CPU).
 * How, NHWC activations and HWIO weights as everywhere on the CPU:
 *   forward          Y = A^T [ U ⊙ V ] A summed over input channels, with
 *                    U = G g G^T (weights), V = B^T d B (input tile); per
 *                    transform cell xi the sum over channels is one sgemm
 *                    (tiles x C_in) @ (C_in x C_out);
 *   backward data    the forward convolution of the output gradient with
 *                    the flipped filter, channels swapped (conv_algo.h's
 *                    conv_dgrad_as_forward).  F(2x2, 3x3)'s points (0, 1,
 *                    -1 and infinity) are closed under p -> 1/p, so the
 *                    flipped filter's transform is the forward's U with
 *                    cells 0 and 3 of each axis swapped and each cell's
 *                    matrix transposed: the same U, read with trans_b;
 *                    F(4x4, 3x3)'s (0, 1, -1, 2, -2, infinity) are not,
 *                    and for F(4x4, 5x5)'s (those and 1/2, -1/2) G's row
 *                    for 1/p is the reversed row for p times a factor of
 *                    its own, so for both the flipped filter is
 *                    transformed itself (a kernel, once a pass);
 *   backward weights the adjoint in the weights: dU = V^T (A dY A^T)
 *                    summed over every tile of the batch (one sgemm per
 *                    cell, tiles as the inner dimension), dW = G^T dU G.
 * Each kind is one entry of a table (its tile sides, transforms and flip);
 * the tiling, the products and the threads are the same code for all.
 * Every transform is a few additions per channel with the channel loop
 * innermost (contiguous in NHWC; the 4x4 tiles' eight channels a vector),
 * built for AVX-512 (x86-64-v4: 32 vector registers, so the 8x8 tiles'
 * 64 vectors spill less; mnist's step 1-2% faster than the AVX2 clone on a
 * Zen 5), AVX2 and the baseline (target_clones; compiled without
 * contraction into fused multiply-adds, model/CMakeLists.txt): the same
 * additions, so the same bits, on every path.
 * Threads: the forward passes split their tiles into chunks of a fixed
 * size (a function of the channels), one chunk at a time per thread with
 * single-threaded sgemm; backward weights splits its tiles into segments
 * of a fixed size and each segment's products over the threads,
 * accumulating in segment order: every result is the same from run to run
 * and whatever the team size.
 * What it does not do: strides other than 1, kernels other than 3x3 and
 * 5x5, or allocate (the caller's scratch, winograd_scratch_n_floats).
 */
#include "model/layers.h"
#include "model/sgemm.h"

#include <omp.h>
#include <string.h>

/* No clones under ThreadSanitizer (the TOWER_SANITIZE_THREAD build): the
 * loader runs an ifunc's resolver before the sanitizer's runtime starts,
 * and an instrumented resolver crashes there (the baseline clone is the
 * same additions). */
#if defined(TOWER_SANITIZE_THREAD)
#define WINO_CLONES
#else
#define WINO_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif

/* ---- F(2x2, 3x3): 4x4 tiles, the channel loop innermost ---------------------------------- */

/* U[xi][c][k] = (G g G^T)[xi] for every (c, k), g the 3x3 kernel w[.][.][c][k] (HWIO), rows c0..c1 of each
 * cell's (C, K) matrix.  G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]. */
WINO_CLONES static void weights_3x3(float *U, const float *w, int C, int K, int c0, int c1) {
    const size_t cell = (size_t)C * K;
    for (int c = c0; c < c1; c++) {
        const float *w0 = w + (size_t)c * K;
        float *u = U + (size_t)c * K;
#pragma omp simd
        for (int k = 0; k < K; k++) {
            float g[3][3], t[4][3];
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++) g[i][j] = w0[(size_t)(i * 3 + j) * cell + k];
            for (int j = 0; j < 3; j++) {
                t[0][j] = g[0][j];
                t[1][j] = 0.5f * (g[0][j] + g[1][j] + g[2][j]);
                t[2][j] = 0.5f * (g[0][j] - g[1][j] + g[2][j]);
                t[3][j] = g[2][j];
            }
            for (int i = 0; i < 4; i++) {
                u[(size_t)(i * 4 + 0) * cell + k] = t[i][0];
                u[(size_t)(i * 4 + 1) * cell + k] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);
                u[(size_t)(i * 4 + 2) * cell + k] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);
                u[(size_t)(i * 4 + 3) * cell + k] = t[i][2];
            }
        }
    }
}

/* One tile's V = B^T d B into V[xi * v_stride + c], d's 16 pixels at p[0..15] (each C floats; the zero row
 * where the tile hangs over the padding).  B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]. */
WINO_CLONES static void input_3x3(float *V, size_t v_stride, const float *const *p_in, int C) {
    const float *p[16];
    float *v[16];
    for (int i = 0; i < 16; i++) {
        p[i] = p_in[i];
        v[i] = V + (size_t)i * v_stride;
    }
#pragma omp simd
    for (int c = 0; c < C; c++) {
        float d[4][4], t[4][4];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) d[i][j] = p[i * 4 + j][c];
        for (int j = 0; j < 4; j++) {
            t[0][j] = d[0][j] - d[2][j];
            t[1][j] = d[1][j] + d[2][j];
            t[2][j] = d[2][j] - d[1][j];
            t[3][j] = d[1][j] - d[3][j];
        }
        for (int i = 0; i < 4; i++) {
            v[i * 4 + 0][c] = t[i][0] - t[i][2];
            v[i * 4 + 1][c] = t[i][1] + t[i][2];
            v[i * 4 + 2][c] = t[i][2] - t[i][1];
            v[i * 4 + 3][c] = t[i][1] - t[i][3];
        }
    }
}

/* One tile's Y = A^T m A (+ bias, ReLU) from M[xi * m_stride + k] into the 2x2 output pixels y[0..3] (row by
 * row; a spare row past the map's edge).  A^T = [1 1 1 0; 0 1 -1 -1]. */
WINO_CLONES static void output_3x3(float *const *y_out, const float *M, size_t m_stride, const float *bias,
                                   int relu, int K) {
    const float *mp[16];
    float *y[4];
    for (int i = 0; i < 16; i++) mp[i] = M + (size_t)i * m_stride;
    for (int i = 0; i < 4; i++) y[i] = y_out[i];
#pragma omp simd
    for (int k = 0; k < K; k++) {
        float m[4][4], s[2][4], o[4];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) m[i][j] = mp[i * 4 + j][k];
        for (int j = 0; j < 4; j++) {
            s[0][j] = m[0][j] + m[1][j] + m[2][j];
            s[1][j] = m[1][j] - m[2][j] - m[3][j];
        }
        for (int i = 0; i < 2; i++) {
            o[i * 2 + 0] = s[i][0] + s[i][1] + s[i][2];
            o[i * 2 + 1] = s[i][1] - s[i][2] - s[i][3];
        }
        const float b = bias ? bias[k] : 0.0f;
        for (int q = 0; q < 4; q++) {
            float v = o[q] + b;
            if (relu) v = v > 0.0f ? v : 0.0f;
            y[q][k] = v;
        }
    }
}

/* One tile's dM = A dy A^T into dM[xi * m_stride + k], dy's 2x2 pixels at p[0..3] (the zero row past the
 * map's edge): the adjoint of output_3x3.  A = [1 0; 1 1; 1 -1; 0 -1]. */
WINO_CLONES static void output_grad_3x3(float *dM, size_t m_stride, const float *const *p_in, int K) {
    const float *p[4];
    float *d[16];
    for (int i = 0; i < 4; i++) p[i] = p_in[i];
    for (int i = 0; i < 16; i++) d[i] = dM + (size_t)i * m_stride;
#pragma omp simd
    for (int k = 0; k < K; k++) {
        const float y00 = p[0][k], y01 = p[1][k], y10 = p[2][k], y11 = p[3][k];
        float r[4][2];
        r[0][0] = y00;        r[0][1] = y01;
        r[1][0] = y00 + y10;  r[1][1] = y01 + y11;
        r[2][0] = y00 - y10;  r[2][1] = y01 - y11;
        r[3][0] = -y10;       r[3][1] = -y11;
        for (int i = 0; i < 4; i++) {
            d[i * 4 + 0][k] = r[i][0];
            d[i * 4 + 1][k] = r[i][0] + r[i][1];
            d[i * 4 + 2][k] = r[i][0] - r[i][1];
            d[i * 4 + 3][k] = -r[i][1];
        }
    }
}

/* dw[.][.][c][k] = (G^T dU G) for rows c0..c1: the adjoint of weights_3x3.
 * G^T = [1 1/2 1/2 0; 0 1/2 -1/2 0; 0 1/2 1/2 1]. */
WINO_CLONES static void weights_grad_3x3(float *dw, const float *dU, int C, int K, int c0, int c1) {
    const size_t cell = (size_t)C * K;
    for (int c = c0; c < c1; c++) {
        const float *u = dU + (size_t)c * K;
        float *w0 = dw + (size_t)c * K;
#pragma omp simd
        for (int k = 0; k < K; k++) {
            float v[4][4], q[3][4];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) v[i][j] = u[(size_t)(i * 4 + j) * cell + k];
            for (int j = 0; j < 4; j++) {
                q[0][j] = v[0][j] + 0.5f * (v[1][j] + v[2][j]);
                q[1][j] = 0.5f * (v[1][j] - v[2][j]);
                q[2][j] = 0.5f * (v[1][j] + v[2][j]) + v[3][j];
            }
            for (int i = 0; i < 3; i++) {
                w0[(size_t)(i * 3 + 0) * cell + k] = q[i][0] + 0.5f * (q[i][1] + q[i][2]);
                w0[(size_t)(i * 3 + 1) * cell + k] = 0.5f * (q[i][1] - q[i][2]);
                w0[(size_t)(i * 3 + 2) * cell + k] = 0.5f * (q[i][1] + q[i][2]) + q[i][3];
            }
        }
    }
}

/* ---- vectors of eight channels --------------------------------------------------------------- */

/* Eight channels at a time in GCC's vector type (elementwise IEEE arithmetic: the same bits in every clone
 * and lane as one channel alone); a tail of fewer than 8 channels goes through zero-padded copies.  The
 * helpers take and give vectors through pointers and are always inlined (no vector crosses a call, whose
 * ABI would differ between the clones). */
typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4))); /* the same, at any float's address */
typedef int v8i __attribute__((vector_size(32)));
#define V8_INLINE static inline __attribute__((always_inline))

/* v = n floats at x (n <= 8), the rest 0. */
V8_INLINE void load8(v8 *v, const float *x, int n) {
    if (n == 8) {
        *v = *(const v8u *)x;
        return;
    }
    *v = (v8){0};
    memcpy(v, x, sizeof(float) * (size_t)n);
}

/* The first n floats of v to x. */
V8_INLINE void store8(float *x, const v8 *v, int n) {
    if (n == 8) *(v8u *)x = *v;
    else memcpy(x, v, sizeof(float) * (size_t)n);
}

/* The 2-D transform x -> F x F^T of one n_in x n_in matrix of 8-channel vectors, cell (i, j) read at
 * src + (i * n_in + j) * cell (n floats), into the n_out x n_out matrix at dst + (i * n_out + j) * cell; f is
 * F on one axis.  The weights' transform and its adjoint, whose data is small (a kernel, once a pass). */
V8_INLINE void transform_2d(float *dst, const float *src, size_t cell, int n_in, int n_out,
                            void (*f)(v8 *out, const v8 *in), int n) {
    v8 t[8][8];
    for (int j = 0; j < n_in; j++) { /* column j */
        v8 col[8], r[8];
        for (int i = 0; i < n_in; i++) load8(&col[i], src + (size_t)(i * n_in + j) * cell, n);
        f(r, col);
        for (int i = 0; i < n_out; i++) t[i][j] = r[i];
    }
    for (int i = 0; i < n_out; i++) {
        v8 r[8];
        f(r, t[i]);
        for (int j = 0; j < n_out; j++) store8(dst + (size_t)(i * n_out + j) * cell, &r[j], n);
    }
}

/* v[1 .. 2 n] = e +- o for n point pairs (1, -1), (2, -2), (1/2, -1/2): a row at p is the even part plus the
 * odd part, at -p the even part minus it. */
V8_INLINE void pm_pairs(v8 *v, const v8 *e, const v8 *o, int n) {
    for (int i = 0; i < n; i++) {
        v[1 + 2 * i] = e[i] + o[i];
        v[2 + 2 * i] = e[i] - o[i];
    }
}

/* Rows c0..c1 of every (C, K) cell: dst = F src F^T per (c, k), eight k at a time (transform_2d); the
 * weights' transform (n_in = r, n_out = a) and its adjoint (a, r). */
V8_INLINE void kernel_transform(float *dst, const float *src, int C, int K, int c0, int c1, int n_in, int n_out,
                                void (*f)(v8 *out, const v8 *in)) {
    const size_t cell = (size_t)C * K;
    for (int c = c0; c < c1; c++)
        for (int k = 0; k < K; k += 8)
            transform_2d(dst + (size_t)c * K + k, src + (size_t)c * K + k, cell, n_in, n_out, f, K - k < 8 ? K - k : 8);
}

/* The 4x4-output tiles' three per-tile transforms, for a tile side a (6 or 8) and its one-axis transforms:
 * always inlined with both constant, so each kind's copy is unrolled for its own a. */

/* One tile's V = B^T d B into V[xi * v_stride + c], d's a*a pixels at p[] (each C floats; the zero row where the
 * tile hangs over the padding); bt is B^T on one axis. */
V8_INLINE void input_tile(float *V, size_t v_stride, const float *const *p, int C, int a,
                          void (*bt)(v8 *v, const v8 *d)) {
    for (int c = 0; c < C; c += 8) {
        const int n = C - c < 8 ? C - c : 8;
        v8 t[8][8];
#pragma GCC unroll 8
        for (int j = 0; j < a; j++) {
            v8 d[8], col[8];
#pragma GCC unroll 8
            for (int i = 0; i < a; i++) load8(&d[i], p[i * a + j] + c, n);
            bt(col, d);
#pragma GCC unroll 8
            for (int i = 0; i < a; i++) t[i][j] = col[i];
        }
#pragma GCC unroll 8
        for (int i = 0; i < a; i++) {
            v8 row[8];
            bt(row, t[i]);
#pragma GCC unroll 8
            for (int j = 0; j < a; j++) store8(V + (size_t)(i * a + j) * v_stride + c, &row[j], n);
        }
    }
}

/* One tile's Y = A^T m A (+ bias, ReLU) from M[xi * m_stride + k] into the 4x4 output pixels y[0..15] (row by
 * row; a spare row past the map's edge); at is A^T on one axis (a values to 4). */
V8_INLINE void output_tile(float *const *y, const float *M, size_t m_stride, const float *bias, int relu, int K,
                           int a, void (*at)(v8 *o, const v8 *m)) {
    for (int k = 0; k < K; k += 8) {
        const int n = K - k < 8 ? K - k : 8;
        v8 s[4][8], b = {0};
#pragma GCC unroll 8
        for (int j = 0; j < a; j++) {
            v8 m[8], col[4];
#pragma GCC unroll 8
            for (int i = 0; i < a; i++) load8(&m[i], M + (size_t)(i * a + j) * m_stride + k, n);
            at(col, m);
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) s[i][j] = col[i];
        }
        if (bias) load8(&b, bias + k, n);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            v8 o[4];
            at(o, s[i]);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                v8 v = o[j] + b;
                if (relu) v = (v8)((v8i)v & (v > 0.0f)); /* 0 where not above 0 (NaN too), as the loops */
                store8(y[i * 4 + j] + k, &v, n);
            }
        }
    }
}

/* One tile's dM = A dy A^T into dM[xi * m_stride + k], dy's 4x4 pixels at p[0..15] (the zero row past the
 * map's edge): output_tile's adjoint; fa is A on one axis (4 values to a). */
V8_INLINE void output_grad_tile(float *dM, size_t m_stride, const float *const *p, int K, int a,
                                void (*fa)(v8 *r, const v8 *y)) {
    for (int k = 0; k < K; k += 8) {
        const int n = K - k < 8 ? K - k : 8;
        v8 c[4][8]; /* c[j] = A (column j of dy) */
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            v8 y[4];
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) load8(&y[i], p[i * 4 + j] + k, n);
            fa(c[j], y);
        }
#pragma GCC unroll 8
        for (int i = 0; i < a; i++) {
            const v8 y[4] = {c[0][i], c[1][i], c[2][i], c[3][i]};
            v8 row[8];
            fa(row, y);
#pragma GCC unroll 8
            for (int j = 0; j < a; j++) store8(dM + (size_t)(i * a + j) * m_stride + k, &row[j], n);
        }
    }
}

/* ---- F(4x4, 3x3): 6x6 tiles, points 0, 1, -1, 2, -2 and infinity ------------------------------ */

/* Each 4x4 block of outputs from a 6x6 input tile: 36 products per 16 outputs and input channel where the loops
 * take 144 (4x fewer; F(2x2, 3x3) 2.25x), eight channels a vector as F(4x4, 5x5).  The points are those of
 * oneDNN's own F(4x4, 3x3) (its AVX-512 Winograd kernels), derived and checked as F(4x4, 5x5)'s; B^T keeps small
 * integers, G the fractions. */

/* t = G g for one axis of 3 taps: G = [1/4 0 0; 1/6 1/6 1/6; 1/6 -1/6 1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6;
 * 0 0 1], rows 1-4 as even and odd parts. */
V8_INLINE void g_6(v8 t[6], const v8 g[3]) {
    const v8 e1 = g[0] + g[2], e2 = g[0] + 4.0f * g[2], o2 = 2.0f * g[1];
    t[0] = 0.25f * g[0];
    t[1] = (e1 + g[1]) * (1.0f / 6.0f);
    t[2] = (e1 - g[1]) * (1.0f / 6.0f);
    t[3] = (e2 + o2) * (1.0f / 24.0f);
    t[4] = (e2 - o2) * (1.0f / 24.0f);
    t[5] = g[2];
}

/* U[xi][c][k] = (G g G^T)[xi], g the 3x3 kernel w[.][.][c][k] (HWIO), rows c0..c1 of each cell's (C, K)
 * matrix. */
WINO_CLONES static void weights_f4_3x3(float *U, const float *w, int C, int K, int c0, int c1) {
    kernel_transform(U, w, C, K, c0, c1, 3, 6, g_6);
}

/* v = B^T d for one axis of 6 values: B^T = [4 0 -5 0 1 0; 0 4 4 -1 -1 0; 0 -4 4 1 -1 0; 0 -2 -1 2 1 0;
 * 0 2 -1 -2 1 0; 0 4 0 -5 0 1]. */
V8_INLINE void bt_6(v8 v[6], const v8 d[6]) {
    const v8 a = 4.0f * d[1], b = 4.0f * d[2] - d[4], c = 2.0f * (d[3] - d[1]), e = d[4] - d[2];
    v[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
    v[1] = a + b - d[3];
    v[2] = b - a + d[3];
    v[3] = c + e;
    v[4] = e - c;
    v[5] = a - 5.0f * d[3] + d[5];
}

/* One tile's V = B^T d B for F(4x4, 3x3) (6x6 pixels at p[0..35]). */
WINO_CLONES static void input_f4_3x3(float *V, size_t v_stride, const float *const *p, int C) {
    input_tile(V, v_stride, p, C, 6, bt_6);
}

/* o = A^T m for one axis: A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]. */
V8_INLINE void at_6(v8 o[4], const v8 m[6]) {
    const v8 s1 = m[1] + m[2], d1 = m[1] - m[2], s2 = m[3] + m[4], d2 = m[3] - m[4];
    o[0] = m[0] + s1 + s2;
    o[1] = d1 + 2.0f * d2;
    o[2] = s1 + 4.0f * s2;
    o[3] = d1 + 8.0f * d2 + m[5];
}

/* One tile's 4x4 outputs for F(4x4, 3x3). */
WINO_CLONES static void output_f4_3x3(float *const *y, const float *M, size_t m_stride, const float *bias,
                                      int relu, int K) {
    output_tile(y, M, m_stride, bias, relu, K, 6, at_6);
}

/* r = A y for one axis of 4 values, A = (A^T)^T: y0, y0 +- y1 + y2 +- y3, y0 +- 2 y1 + 4 y2 +- 8 y3, y3. */
V8_INLINE void a_6(v8 r[6], const v8 y[4]) {
    const v8 e[2] = {y[0] + y[2], y[0] + 4.0f * y[2]};
    const v8 o[2] = {y[1] + y[3], 2.0f * y[1] + 8.0f * y[3]};
    r[0] = y[0];
    pm_pairs(r, e, o, 2);
    r[5] = y[3];
}

/* One tile's dM for F(4x4, 3x3): output_f4_3x3's adjoint. */
WINO_CLONES static void output_grad_f4_3x3(float *dM, size_t m_stride, const float *const *p, int K) {
    output_grad_tile(dM, m_stride, p, K, 6, a_6);
}

/* q = G^T u for one axis of 6 values: the columns of g_6's G. */
V8_INLINE void gt_6(v8 q[3], const v8 u[6]) {
    const v8 s1 = u[1] + u[2], d1 = u[1] - u[2], s2 = u[3] + u[4], d2 = u[3] - u[4];
    q[0] = 0.25f * u[0] + s1 * (1.0f / 6.0f) + s2 * (1.0f / 24.0f);
    q[1] = d1 * (1.0f / 6.0f) + d2 * (1.0f / 12.0f);
    q[2] = (s1 + s2) * (1.0f / 6.0f) + u[5];
}

/* dw[.][.][c][k] = (G^T dU G) for rows c0..c1: the adjoint of weights_f4_3x3. */
WINO_CLONES static void weights_grad_f4_3x3(float *dw, const float *dU, int C, int K, int c0, int c1) {
    kernel_transform(dw, dU, C, K, c0, c1, 6, 3, gt_6);
}

/* ---- F(4x4, 5x5): 8x8 tiles, points 0, 1, -1, 2, -2, 1/2, -1/2 and infinity ------------------ */

/* Each 4x4 block of outputs from an 8x8 input tile: 64 products per 16 outputs and input channel where the
 * loops take 400 (6.25x fewer; F(2x2, 5x5), which this replaced, 2.78x).  The points are those of NNPACK's
 * F(6x6, 3x3) (the same a = 8), so B^T is that one's; G holds every fraction (the weights' transform runs once
 * a pass), B^T and A^T only halves, quarters and the like.  Derived with exact fractions (Cook-Toom: A^T's
 * rows the powers of the points, G's rows those over the points' products of differences, B^T solved from
 * the identity) and each 1-D formula below checked against the matrices in float64 before any C; in float32
 * the whole convolution's error is about twice F(2x2, 5x5)'s (tests/test_winograd.c's bound holds). */

/* t = G g for one axis of 5 taps: G's rows 1, 1 / f(p) (1, p, p^2, p^3, p^4) for p = 1, -1, 2, -2, 1/2, -1/2
 * (f(p) the product of p - q over the other finite points q), scaled: -2/9 (g0 + g2 + g4 +- (g1 + g3)),
 * 1/90 (g0 + 4 g2 + 16 g4 +- (2 g1 + 8 g3)), 2/45 (16 g0 + 4 g2 + g4 +- (8 g1 + 2 g3)); row 0 g0, row 7 g4. */
V8_INLINE void g_8(v8 t[8], const v8 g[5]) {
    const v8 e1 = g[0] + g[2] + g[4], o1 = g[1] + g[3];
    const v8 e2 = g[0] + 4.0f * g[2] + 16.0f * g[4], o2 = 2.0f * g[1] + 8.0f * g[3];
    const v8 e3 = 16.0f * g[0] + 4.0f * g[2] + g[4], o3 = 8.0f * g[1] + 2.0f * g[3];
    t[0] = g[0];
    t[1] = (e1 + o1) * (-2.0f / 9.0f);
    t[2] = (e1 - o1) * (-2.0f / 9.0f);
    t[3] = (e2 + o2) * (1.0f / 90.0f);
    t[4] = (e2 - o2) * (1.0f / 90.0f);
    t[5] = (e3 + o3) * (2.0f / 45.0f);
    t[6] = (e3 - o3) * (2.0f / 45.0f);
    t[7] = g[4];
}

/* U[xi][c][k] = (G g G^T)[xi], g the 5x5 kernel w[.][.][c][k] (HWIO), rows c0..c1 of each cell's (C, K)
 * matrix. */
WINO_CLONES static void weights_5x5(float *U, const float *w, int C, int K, int c0, int c1) {
    kernel_transform(U, w, C, K, c0, c1, 5, 8, g_8);
}

/* v = B^T d for one axis of 8 values: B^T = [1 0 -21/4 0 21/4 0 -1 0; 0 1 1 -17/4 -17/4 1 1 0;
 * 0 -1 1 17/4 -17/4 -1 1 0; 0 1/2 1/4 -5/2 -5/4 2 1 0; 0 -1/2 1/4 5/2 -5/4 -2 1 0; 0 2 4 -5/2 -5 1/2 1 0;
 * 0 -2 4 5/2 -5 -1/2 1 0; 0 -1 0 21/4 0 -21/4 0 1], rows 1-6 as even and odd parts. */
V8_INLINE void bt_8(v8 v[8], const v8 d[8]) {
    const v8 e[3] = {d[2] + d[6] - 4.25f * d[4], d[6] + 0.25f * d[2] - 1.25f * d[4],
                     d[6] + 4.0f * (d[2] - 1.25f * d[4])};
    const v8 o[3] = {d[1] + d[5] - 4.25f * d[3], 0.5f * d[1] - 2.5f * d[3] + 2.0f * d[5],
                     2.0f * d[1] - 2.5f * d[3] + 0.5f * d[5]};
    v[0] = d[0] - d[6] + 5.25f * (d[4] - d[2]);
    pm_pairs(v, e, o, 3);
    v[7] = d[7] - d[1] + 5.25f * (d[3] - d[5]);
}

/* One tile's V = B^T d B for F(4x4, 5x5) (8x8 pixels at p[0..63]). */
WINO_CLONES static void input_5x5(float *V, size_t v_stride, const float *const *p, int C) {
    input_tile(V, v_stride, p, C, 8, bt_8);
}

/* o = A^T m for one axis: A^T's rows p^i for p = 0, 1, -1, 2, -2, 1/2, -1/2 (i = 0..3), and 1 at infinity in
 * the last. */
V8_INLINE void at_8(v8 o[4], const v8 m[8]) {
    const v8 s1 = m[1] + m[2], d1 = m[1] - m[2], s2 = m[3] + m[4], d2 = m[3] - m[4];
    const v8 s3 = m[5] + m[6], d3 = m[5] - m[6];
    o[0] = m[0] + s1 + s2 + s3;
    o[1] = d1 + 2.0f * d2 + 0.5f * d3;
    o[2] = s1 + 4.0f * s2 + 0.25f * s3;
    o[3] = d1 + 8.0f * d2 + 0.125f * d3 + m[7];
}

/* One tile's 4x4 outputs for F(4x4, 5x5). */
WINO_CLONES static void output_5x5(float *const *y, const float *M, size_t m_stride, const float *bias, int relu,
                                   int K) {
    output_tile(y, M, m_stride, bias, relu, K, 8, at_8);
}

/* r = A y for one axis of 4 values, A = (A^T)^T: y0, then y0 + p y1 + p^2 y2 + p^3 y3 for p = 1, -1, 2, -2,
 * 1/2, -1/2 as even and odd parts, then y3. */
V8_INLINE void a_8(v8 r[8], const v8 y[4]) {
    const v8 e[3] = {y[0] + y[2], y[0] + 4.0f * y[2], y[0] + 0.25f * y[2]};
    const v8 o[3] = {y[1] + y[3], 2.0f * y[1] + 8.0f * y[3], 0.5f * y[1] + 0.125f * y[3]};
    r[0] = y[0];
    pm_pairs(r, e, o, 3);
    r[7] = y[3];
}

/* One tile's dM for F(4x4, 5x5): output_5x5's adjoint. */
WINO_CLONES static void output_grad_5x5(float *dM, size_t m_stride, const float *const *p, int K) {
    output_grad_tile(dM, m_stride, p, K, 8, a_8);
}

/* q = G^T u for one axis of 8 values: the columns of g_8's G as sums and differences of u's pairs. */
V8_INLINE void gt_8(v8 q[5], const v8 u[8]) {
    const v8 s1 = (u[1] + u[2]) * (-2.0f / 9.0f), d1 = (u[1] - u[2]) * (-2.0f / 9.0f);
    const v8 s2 = (u[3] + u[4]) * (1.0f / 90.0f), d2 = (u[3] - u[4]) * (1.0f / 90.0f);
    const v8 s3 = (u[5] + u[6]) * (2.0f / 45.0f), d3 = (u[5] - u[6]) * (2.0f / 45.0f);
    q[0] = u[0] + s1 + s2 + 16.0f * s3;
    q[1] = d1 + 2.0f * d2 + 8.0f * d3;
    q[2] = s1 + 4.0f * s2 + 4.0f * s3;
    q[3] = d1 + 8.0f * d2 + 2.0f * d3;
    q[4] = s1 + 16.0f * s2 + s3 + u[7];
}

/* dw[.][.][c][k] = (G^T dU G) for rows c0..c1: the adjoint of weights_5x5. */
WINO_CLONES static void weights_grad_5x5(float *dw, const float *dU, int C, int K, int c0, int c1) {
    kernel_transform(dw, dU, C, K, c0, c1, 8, 5, gt_8);
}

/* ---- the table: one entry a kind ------------------------------------------------------------ */

/* The largest tiles: 8x8 input pixels, 4x4 outputs (F(4x4, 5x5)). */
enum { MAX_A = 8, MAX_XI = MAX_A * MAX_A, MAX_M = 4, MAX_OUT = MAX_M * MAX_M };

typedef struct {
    const char *name;     /* as --log_device_placement prints it */
    int r;                /* kernel side */
    int m;                /* output tile side: F(m x m, r x r) */
    int a;                /* input tile side, m + r - 1; a * a cells in the transform domain */
    const int *flip;      /* the cell permutation by which the forward's U serves the flipped filter, or NULL
                             when the points are not closed under p -> 1/p (then the flipped filter is
                             transformed itself) */
    /* U (a*a, C, K) from the weights (r, r, C, K), rows c0..c1 of each cell */
    void (*weights)(float *U, const float *w, int C, int K, int c0, int c1);
    /* one tile's V (a*a cells at v_stride) from its a*a input pixels (C floats each) */
    void (*input)(float *V, size_t v_stride, const float *const *p, int C);
    /* one tile's m x m outputs (K floats each, + bias, ReLU) from its M (a*a cells at m_stride) */
    void (*output)(float *const *y, const float *M, size_t m_stride, const float *bias, int relu, int K);
    /* one tile's dM (a*a cells at m_stride) from its m x m output gradients: output's adjoint */
    void (*output_grad)(float *dM, size_t m_stride, const float *const *p, int K);
    /* the weight gradient (r, r, C, K) from dU (a*a, C, K), rows c0..c1: weights' adjoint */
    void (*weights_grad)(float *dw, const float *dU, int C, int K, int c0, int c1);
} WinoKind;

static const int flip_3x3[4] = {3, 1, 2, 0};

static const WinoKind kinds[] = {
    {"Winograd F(2x2,3x3)", 3, 2, 4, flip_3x3, weights_3x3, input_3x3, output_3x3, output_grad_3x3,
     weights_grad_3x3},
    {"Winograd F(4x4,3x3)", 3, 4, 6, NULL, weights_f4_3x3, input_f4_3x3, output_f4_3x3, output_grad_f4_3x3,
     weights_grad_f4_3x3},
    {"Winograd F(4x4,5x5)", 5, 4, 8, NULL, weights_5x5, input_5x5, output_5x5, output_grad_5x5, weights_grad_5x5},
};

/* The entry for c's kernel, or NULL: of the entries for its size, the one with the fewest transform-domain
 * floats an image and channel over the output map, ceil(OH / m) ceil(OW / m) a^2 (the products and the
 * transforms' traffic both go with it; the first on a tie).  So for 3x3, F(2x2, 3x3) on maps of 1 or 2 a side
 * (16 against F(4x4, 3x3)'s 36 on a 2x2 map), F(4x4, 3x3) from 3 (64 against 36). */
static const WinoKind *kind_of(const Conv2d *c) {
    const WinoKind *best = NULL;
    long best_cells = 0;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        const WinoKind *kd = &kinds[i];
        if (c->KH != kd->r || c->KW != kd->r) continue;
        const long cells = (long)((c->OH + kd->m - 1) / kd->m) * ((c->OW + kd->m - 1) / kd->m) * kd->a * kd->a;
        if (!best || cells < best_cells) best = kd, best_cells = cells;
    }
    return best;
}

int winograd_applies(const Conv2d *c) {
    int pad_h, pad_w;
    return kind_of(c) && c->stride_h == 1 && c->stride_w == 1 && conv_dgrad_pad(c, &pad_h, &pad_w);
}

const char *winograd_name(const Conv2d *c) { return winograd_applies(c) ? kind_of(c)->name : NULL; }

/* One convolution as the transforms see it: an input map (H, W, C), an output map (OH, OW, K), the zero cells
 * before row 0 and column 0, the output's m x m tiles, and the kind's tile (a x a input pixels, xi cells). */
typedef struct {
    int H, W, C;
    int OH, OW, K;
    int pad_top, pad_left;
    int tiles_h, tiles_w;
    int m, a, xi;
} Geom;

static Geom geom_make(const WinoKind *kd, int H, int W, int C, int OH, int OW, int K, int pad_top, int pad_left) {
    const int m = kd->m;
    return (Geom){H, W, C, OH, OW, K, pad_top, pad_left, (OH + m - 1) / m, (OW + m - 1) / m, m, kd->a,
                  kd->a * kd->a};
}

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* The floats between two cells' matrices of n floats in V and M: n rounded up, and 16 more, so that the
 * a*a cells a tile's transform writes do not lie a multiple of 4 KiB apart (a power-of-two stride put all
 * 36 cells of a 6x6 tile into one set of the 12-way L1 cache, each store a miss). */
static size_t cell_stride(size_t n) { return round16(n) + 16; }

static int team_size(int n_threads) {
    int nt = omp_get_max_threads();
    if (n_threads < 1) n_threads = 1;
    return nt < n_threads ? nt : n_threads;
}

/* Tiles per chunk of the forward passes: the chunk's transformed input and output, xi x tiles x (C + K)
 * floats, at most about 2 MiB, as a power of two from 16 to 128 (so that a batch's chunks split evenly over 2
 * or 4 threads).  A function of the kind and the channels alone: the chunks, and with them every sgemm's
 * operands, are the same whatever the team size, and so are the results (dnnl_sgemm's rounding depends on a
 * product's dimensions). */
static int chunk_tiles(int xi, int C, int K) {
    const long budget = (2L << 20) / (4L * xi * (C + K));
    int t = 16;
    while (t < 128 && 2L * t <= budget) t *= 2;
    return t;
}

/* Tiles per segment of backward weights: the segment's V and dM, about 4 MiB, 32 to 1024 tiles. */
static int segment_tiles(int xi, int C, int K) {
    long t = (4L << 20) / (4L * xi * (C + K));
    if (t > 1024) t = 1024;
    if (t < 32) t = 32;
    return (int)t;
}

/* A thread's chunk buffers: the chunk's V (xi, tc, C) and M (xi, tc, K), and a spare output row (K); tc no
 * more than the batch's tiles. */
static size_t chunk_n_floats(const Geom *g, int B) {
    const long n_tiles = (long)B * g->tiles_h * g->tiles_w;
    const int ct = chunk_tiles(g->xi, g->C, g->K);
    const size_t tc = (size_t)(ct < n_tiles ? ct : n_tiles);
    return (size_t)g->xi * (cell_stride(tc * g->C) + cell_stride(tc * g->K)) + round16((size_t)g->K);
}

/* A forward pass's work: U (xi, C, K), and the threads' chunk buffers. */
static size_t fwd_n_floats(const Geom *g, int B, int nt) {
    return round16((size_t)g->xi * g->C * g->K) + (size_t)nt * chunk_n_floats(g, B);
}

/* The flipped filter, (r, r, C_out, C_in), where the kind transforms it itself. */
static size_t flipped_n_floats(const WinoKind *kd, const Conv2d *c) {
    return kd->flip ? 0 : round16((size_t)kd->r * kd->r * c->C_in * c->C_out);
}

size_t winograd_scratch_n_floats(const Conv2d *c, int B, int n_threads) {
    const WinoKind *kd = kind_of(c);
    if (!kd) return 0;
    const int nt = team_size(n_threads);
    int pad_h = 0, pad_w = 0;
    conv_dgrad_pad(c, &pad_h, &pad_w);
    const Geom f = geom_make(kd, c->H, c->W, c->C_in, c->OH, c->OW, c->C_out, c->pad_top, c->pad_left);
    const Geom d = geom_make(kd, c->OH, c->OW, c->C_out, c->H, c->W, c->C_in, pad_h, pad_w);
    const size_t zero = round16((size_t)(c->C_in > c->C_out ? c->C_in : c->C_out));
    const size_t fwd = fwd_n_floats(&f, B, nt), dgrad = flipped_n_floats(kd, c) + fwd_n_floats(&d, B, nt);
    const size_t ts = (size_t)segment_tiles(f.xi, c->C_in, c->C_out);
    const size_t wgrad = round16((size_t)f.xi * c->C_in * c->C_out) +
                         (size_t)f.xi * (cell_stride(ts * c->C_in) + cell_stride(ts * c->C_out));
    size_t n = fwd > dgrad ? fwd : dgrad;
    if (wgrad > n) n = wgrad;
    return zero + n;
}

/* ---- tiles -------------------------------------------------------------------------- */

/* The a*a input pixels of tile t (image-major, then tile rows, then tile columns) of map `in` (B, H, W, C):
 * pointers into in, or zero_row (C zeros) where the a x a window hangs over the padding. */
static void tile_inputs(const float **p, const float *in, const float *zero_row, const Geom *g, long t) {
    const long per_image = (long)g->tiles_h * g->tiles_w;
    const long b = t / per_image, r = t % per_image;
    const int ih0 = (int)(r / g->tiles_w) * g->m - g->pad_top, iw0 = (int)(r % g->tiles_w) * g->m - g->pad_left;
    const float *img = in + (size_t)b * g->H * g->W * g->C;
    for (int i = 0; i < g->a; i++)
        for (int j = 0; j < g->a; j++) {
            const int ih = ih0 + i, iw = iw0 + j;
            p[i * g->a + j] = ih >= 0 && ih < g->H && iw >= 0 && iw < g->W
                                  ? img + ((size_t)ih * g->W + iw) * g->C
                                  : zero_row;
        }
}

/* The m x m output pixels of tile t (row by row) as pixel indices into a map (B, OH, OW, K), -1 past the
 * map's edge. */
static void tile_outputs(long *idx, const Geom *g, long t) {
    const long per_image = (long)g->tiles_h * g->tiles_w;
    const long b = t / per_image, r = t % per_image;
    const int oh0 = (int)(r / g->tiles_w) * g->m, ow0 = (int)(r % g->tiles_w) * g->m;
    for (int i = 0; i < g->m; i++)
        for (int j = 0; j < g->m; j++) {
            const int oh = oh0 + i, ow = ow0 + j;
            idx[i * g->m + j] = oh < g->OH && ow < g->OW ? (b * g->OH + oh) * g->OW + ow : -1;
        }
}

/* ---- the passes ----------------------------------------------------------------------- */

/* out (B, OH, OW, K) = act(conv(in, weights whose transform is U) + bias) over geometry g.  U: (xi, C, K)
 * when !u_flipped; with u_flipped (only a kind with a flip), U is the transform of a kernel whose flipped,
 * channel-swapped twin this convolution applies: U is (xi, K, C) and cell (i, j) reads U's cell (flip(i),
 * flip(j)) transposed.  Work: nt threads' chunk buffers after U in scratch. */
static void wino_conv(float *out, float *work, const float *in, const WinoKind *kd, const float *U, int u_flipped,
                      const float *bias, int relu, const float *zero_row, const Geom *g, int B, int nt) {
    const long n_tiles = (long)B * g->tiles_h * g->tiles_w;
    /* Chunks of chunk_tiles (one chunk of every tile where the batch has fewer: the same partition). */
    const int ct = chunk_tiles(g->xi, g->C, g->K);
    const int tc = ct < n_tiles ? ct : (int)n_tiles;
    const long n_chunks = (n_tiles + tc - 1) / tc;
    const size_t per_thread = chunk_n_floats(g, B);
    const int a = g->a, xi_n = g->xi;
#pragma omp parallel num_threads(nt)
    {
        float *V = work + (size_t)omp_get_thread_num() * per_thread; /* (xi, tc, C) */
        const size_t v_stride = cell_stride((size_t)tc * g->C), m_stride = cell_stride((size_t)tc * g->K);
        float *M = V + (size_t)xi_n * v_stride;                       /* (xi, tc, K) */
        float *spare = M + (size_t)xi_n * m_stride;                   /* (K): outputs past the map's edge */
#pragma omp for schedule(static)
        for (long q = 0; q < n_chunks; q++) {
            const long t0 = q * tc, t1 = t0 + tc < n_tiles ? t0 + tc : n_tiles;
            const int n = (int)(t1 - t0);
            for (long t = t0; t < t1; t++) {
                const float *p[MAX_XI];
                tile_inputs(p, in, zero_row, g, t);
                kd->input(V + (size_t)(t - t0) * g->C, v_stride, p, g->C);
            }
            for (int xi = 0; xi < xi_n; xi++) {
                const float *Vx = V + (size_t)xi * v_stride;
                float *Mx = M + (size_t)xi * m_stride;
                if (!u_flipped)
                    sgemm(0, 0, n, g->K, g->C, 1.0f, Vx, g->C, U + (size_t)xi * g->C * g->K, g->K, 0.0f, Mx, g->K);
                else
                    sgemm(0, 1, n, g->K, g->C, 1.0f, Vx, g->C,
                          U + (size_t)(kd->flip[xi / a] * a + kd->flip[xi % a]) * g->C * g->K, g->C, 0.0f, Mx, g->K);
            }
            for (long t = t0; t < t1; t++) {
                long idx[MAX_OUT];
                float *y[MAX_OUT];
                tile_outputs(idx, g, t);
                for (int i = 0; i < g->m * g->m; i++) y[i] = idx[i] >= 0 ? out + (size_t)idx[i] * g->K : spare;
                kd->output(y, M + (size_t)(t - t0) * g->K, m_stride, bias, relu, g->K);
            }
        }
    }
}

/* U = the transform of weight (r, r, C, K), (xi, C, K), over the team. */
static void weights_to_winograd(float *U, const float *weight, const WinoKind *kd, int C, int K, int nt) {
#pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num(), n = omp_get_num_threads();
        kd->weights(U, weight, C, K, (int)((long)C * t / n), (int)((long)C * (t + 1) / n));
    }
}

/* wf (r, r, K, C) = the filter (r, r, C, K) flipped in both axes, its channels swapped: the kernel of the
 * input gradient as a forward convolution. */
static void flip_filter(float *wf, const float *w, int r, int C, int K, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int tap = 0; tap < r * r; tap++) {
        const float *src = w + (size_t)(r * r - 1 - tap) * C * K;
        float *dst = wf + (size_t)tap * K * C;
        for (int c = 0; c < C; c++)
            for (int k = 0; k < K; k++) dst[(size_t)k * C + c] = src[(size_t)c * K + k];
    }
}

/* Scratch: [zero row][the pass's work]. */
static float *zero_row_of(float *scratch, const Conv2d *c) {
    memset(scratch, 0, sizeof(float) * (size_t)(c->C_in > c->C_out ? c->C_in : c->C_out));
    return scratch;
}
static float *work_of(float *scratch, const Conv2d *c) {
    return scratch + round16((size_t)(c->C_in > c->C_out ? c->C_in : c->C_out));
}

void winograd_forward(float *out, float *scratch, const float *inp, const float *weight, const float *bias,
                      const Conv2d *c, int B, int n_threads) {
    if (B < 1) return; /* no image: nothing to write */
    const WinoKind *kd = kind_of(c);
    const int nt = team_size(n_threads);
    const float *zero = zero_row_of(scratch, c);
    float *U = work_of(scratch, c);
    const Geom g = geom_make(kd, c->H, c->W, c->C_in, c->OH, c->OW, c->C_out, c->pad_top, c->pad_left);
    weights_to_winograd(U, weight, kd, c->C_in, c->C_out, nt);
    wino_conv(out, U + round16((size_t)g.xi * c->C_in * c->C_out), inp, kd, U, 0, bias, c->act == ACT_RELU, zero,
              &g, B, nt);
}

void winograd_backward_data(float *dinp, float *scratch, const float *dout, const float *weight, const Conv2d *c,
                            int B, int n_threads) {
    if (B < 1) return; /* no image: nothing to write */
    const WinoKind *kd = kind_of(c);
    const int nt = team_size(n_threads);
    int pad_h, pad_w;
    conv_dgrad_pad(c, &pad_h, &pad_w);
    const float *zero = zero_row_of(scratch, c);
    float *wf = work_of(scratch, c); /* the flipped filter, where the kind needs it */
    float *U = wf + flipped_n_floats(kd, c);
    const Geom g = geom_make(kd, c->OH, c->OW, c->C_out, c->H, c->W, c->C_in, pad_h, pad_w);
    float *work = U + round16((size_t)g.xi * c->C_in * c->C_out);
    if (kd->flip) {
        weights_to_winograd(U, weight, kd, c->C_in, c->C_out, nt);
        wino_conv(dinp, work, dout, kd, U, 1, NULL, 0, zero, &g, B, nt);
    } else {
        flip_filter(wf, weight, kd->r, c->C_in, c->C_out, nt);
        weights_to_winograd(U, wf, kd, c->C_out, c->C_in, nt);
        wino_conv(dinp, work, dout, kd, U, 0, NULL, 0, zero, &g, B, nt);
    }
}

void winograd_backward_weights(float *dweight, float *dbias, float *scratch, const float *dout, const float *inp,
                               const Conv2d *c, int B, int n_threads) {
    const WinoKind *kd = kind_of(c);
    if (B < 1) { /* no image: the gradients are 0 */
        memset(dweight, 0, sizeof(float) * (size_t)kd->r * kd->r * c->C_in * c->C_out);
        if (dbias) memset(dbias, 0, sizeof(float) * (size_t)c->C_out);
        return;
    }
    const int nt = team_size(n_threads);
    const int C = c->C_in, K = c->C_out;
    const float *zero = zero_row_of(scratch, c);
    const Geom g = geom_make(kd, c->H, c->W, C, c->OH, c->OW, K, c->pad_top, c->pad_left);
    const int xi_n = g.xi;
    float *dU = work_of(scratch, c);                          /* (xi, C, K) */
    float *V = dU + round16((size_t)xi_n * C * K);            /* (xi, ts, C) */
    const long n_tiles = (long)B * g.tiles_h * g.tiles_w;
    const int ts = segment_tiles(xi_n, C, K);
    const size_t v_stride = cell_stride((size_t)ts * C), m_stride = cell_stride((size_t)ts * K);
    float *dM = V + (size_t)xi_n * v_stride;                  /* (xi, ts, K) */
    const long n_segments = (n_tiles + ts - 1) / ts;
#pragma omp parallel num_threads(nt)
    {
        for (long s = 0; s < n_segments; s++) {
            const long t0 = s * ts, t1 = t0 + ts < n_tiles ? t0 + ts : n_tiles;
            const int n = (int)(t1 - t0);
#pragma omp for schedule(static)
            for (long t = t0; t < t1; t++) {
                const float *p[MAX_XI];
                tile_inputs(p, inp, zero, &g, t);
                kd->input(V + (size_t)(t - t0) * C, v_stride, p, C);
                long idx[MAX_OUT];
                const float *dy[MAX_OUT];
                tile_outputs(idx, &g, t);
                for (int i = 0; i < g.m * g.m; i++) dy[i] = idx[i] >= 0 ? dout + (size_t)idx[i] * K : zero;
                kd->output_grad(dM + (size_t)(t - t0) * K, m_stride, dy, K);
            }
#pragma omp for schedule(static)
            for (int xi = 0; xi < xi_n; xi++)
                sgemm(1, 0, C, K, n, 1.0f, V + (size_t)xi * v_stride, C, dM + (size_t)xi * m_stride, K,
                      s == 0 ? 0.0f : 1.0f, dU + (size_t)xi * C * K, K);
        }
        const int t = omp_get_thread_num(), n_t = omp_get_num_threads();
        kd->weights_grad(dweight, dU, C, K, (int)((long)C * t / n_t), (int)((long)C * (t + 1) / n_t));
        /* The bias gradient: each thread its own columns, every row in order. */
        if (dbias) {
            const int k0 = (int)((long)K * t / n_t), k1 = (int)((long)K * (t + 1) / n_t);
            for (int k = k0; k < k1; k++) dbias[k] = 0.0f;
            bias_add_backward_columns(dbias, dout, (size_t)B * c->OH * c->OW, K, k0, k1);
        }
    }
}
