/* winograd.c — conv2d's three passes for a 3x3 kernel at stride 1 as
 * Winograd's minimal filtering F(2x2, 3x3) (Lavin and Gray, 2015): each
 * 2x2 block of outputs comes from a 4x4 block of input, and the 9 x C_in
 * multiply-adds per output become 16 x C_in per 4 outputs, sixteen matrix
 * products (one per cell of the 4x4 transform domain) instead of one
 * product with 9 x C_in rows: 2.25x fewer multiply-adds.
 *
 * Where it sits: model/, beside conv2d.c's loops (the readable version
 * and the oracle: tests/test_winograd.c compares every pass with them);
 * conv2d_dnnl.c runs these where conv_cpu_winograd_f2 says so (a CPU
 * without oneDNN's own Winograd kernels, which are AVX-512 only).
 * How, NHWC activations and HWIO weights as everywhere on the CPU:
 *   forward          Y = A^T [ U ⊙ V ] A summed over input channels, with
 *                    U = G g G^T (weights), V = B^T d B (input tile); per
 *                    transform cell xi the sum over channels is one sgemm
 *                    (tiles x C_in) @ (C_in x C_out);
 *   backward data    the forward convolution of the output gradient with
 *                    the flipped filter, channels swapped (conv_algo.h's
 *                    conv_dgrad_as_forward), whose transformed weights are
 *                    the forward's U with cells 0 and 3 of each axis
 *                    swapped and each cell's matrix transposed: the same U,
 *                    read with trans_b;
 *   backward weights the adjoint in the weights: dU = V^T (A dY A^T)
 *                    summed over every tile of the batch (one sgemm per
 *                    cell, tiles as the inner dimension), dW = G^T dU G.
 * Every transform is a few additions per channel with the channel loop
 * innermost (contiguous in NHWC), built for AVX2 and the baseline
 * (target_clones): the same additions, so the same bits, either way.
 * Threads: the forward passes split their tiles into chunks of a fixed
 * size (a function of the channels), one chunk at a time per thread with
 * single-threaded sgemm; backward weights splits its tiles into segments
 * of a fixed size and each segment's sixteen products over the threads,
 * accumulating in segment order: every result is the same from run to run
 * and whatever the team size.
 * What it does not do: strides other than 1, kernels other than 3x3, or
 * allocate (the caller's scratch, winograd_scratch_n_floats).
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
#define WINO_CLONES __attribute__((target_clones("avx2", "default")))
#endif

enum { XI = 16 }; /* cells of the transform domain: a 4x4 input tile per 2x2 output tile */

int winograd_applies(const Conv2d *c) {
    int pad_h, pad_w;
    return c->KH == 3 && c->KW == 3 && c->stride_h == 1 && c->stride_w == 1 &&
           conv_dgrad_pad(c, &pad_h, &pad_w);
}

/* One convolution as the transforms see it: an input map (H, W, C), an output map (OH, OW, K), the zero cells
 * before row 0 and column 0, and the output's 2x2 tiles. */
typedef struct {
    int H, W, C;
    int OH, OW, K;
    int pad_top, pad_left;
    int tiles_h, tiles_w;
} Geom;

static Geom geom_make(int H, int W, int C, int OH, int OW, int K, int pad_top, int pad_left) {
    return (Geom){H, W, C, OH, OW, K, pad_top, pad_left, (OH + 1) / 2, (OW + 1) / 2};
}

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

static int team_size(int n_threads) {
    int nt = omp_get_max_threads();
    if (n_threads < 1) n_threads = 1;
    return nt < n_threads ? nt : n_threads;
}

/* Tiles per chunk of the forward passes: the chunk's transformed input and output, 16 x tiles x (C + K)
 * floats, at most about 2 MiB, as a power of two from 16 to 128 (so that a batch's chunks split evenly over 2
 * or 4 threads).  A function of the channels alone: the chunks, and with them every sgemm's operands, are the
 * same whatever the team size, and so are the results (dnnl_sgemm's rounding depends on a product's
 * dimensions). */
static int chunk_tiles(int C, int K) {
    const long budget = (2L << 20) / (4L * XI * (C + K));
    int t = 16;
    while (t < 128 && 2L * t <= budget) t *= 2;
    return t;
}

/* Tiles per segment of backward weights: the segment's V and dM, about 4 MiB, 32 to 1024 tiles. */
static int segment_tiles(int C, int K) {
    long t = (4L << 20) / (4L * XI * (C + K));
    if (t > 1024) t = 1024;
    if (t < 32) t = 32;
    return (int)t;
}

/* A thread's chunk buffers: the chunk's V (16, tc, C) and M (16, tc, K), and a spare output row (K); tc no
 * more than the batch's tiles. */
static size_t chunk_n_floats(const Geom *g, int B) {
    const long n_tiles = (long)B * g->tiles_h * g->tiles_w;
    const size_t tc = (size_t)(chunk_tiles(g->C, g->K) < n_tiles ? chunk_tiles(g->C, g->K) : n_tiles);
    return round16((size_t)XI * tc * (g->C + g->K)) + round16((size_t)g->K);
}

static size_t fwd_n_floats(const Geom *g, int B, int nt) {
    return round16((size_t)XI * g->C * g->K) + (size_t)nt * chunk_n_floats(g, B);
}

size_t winograd_scratch_n_floats(const Conv2d *c, int B, int n_threads) {
    const int nt = team_size(n_threads);
    int pad_h = 0, pad_w = 0;
    conv_dgrad_pad(c, &pad_h, &pad_w);
    const Geom f = geom_make(c->H, c->W, c->C_in, c->OH, c->OW, c->C_out, c->pad_top, c->pad_left);
    const Geom d = geom_make(c->OH, c->OW, c->C_out, c->H, c->W, c->C_in, pad_h, pad_w);
    const size_t zero = round16((size_t)(c->C_in > c->C_out ? c->C_in : c->C_out));
    const size_t fwd = fwd_n_floats(&f, B, nt), dgrad = fwd_n_floats(&d, B, nt);
    const size_t wgrad = round16((size_t)XI * c->C_in * c->C_out) +
                         round16((size_t)XI * segment_tiles(c->C_in, c->C_out) * (c->C_in + c->C_out));
    size_t n = fwd > dgrad ? fwd : dgrad;
    if (wgrad > n) n = wgrad;
    return zero + n;
}

/* ---- the transforms, channel loop innermost --------------------------------------- */

/* U[xi][c][k] = (G g G^T)[xi] for every (c, k), g the 3x3 kernel w[.][.][c][k] (HWIO), rows c0..c1 of each
 * cell's (C, K) matrix.  G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]. */
WINO_CLONES static void transform_weights(float *U, const float *w, int C, int K, int c0, int c1) {
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
WINO_CLONES static void transform_input(float *V, size_t v_stride, const float *const *p_in, int C) {
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
WINO_CLONES static void transform_output(float *const *y_out, const float *M, size_t m_stride, const float *bias,
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
 * map's edge): the adjoint of transform_output.  A = [1 0; 1 1; 1 -1; 0 -1]. */
WINO_CLONES static void transform_output_grad(float *dM, size_t m_stride, const float *const *p_in, int K) {
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

/* dw[.][.][c][k] = (G^T dU G) for rows c0..c1: the adjoint of transform_weights.
 * G^T = [1 1/2 1/2 0; 0 1/2 -1/2 0; 0 1/2 1/2 1]. */
WINO_CLONES static void transform_weights_grad(float *dw, const float *dU, int C, int K, int c0, int c1) {
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

/* ---- tiles -------------------------------------------------------------------------- */

/* The 16 input pixels of tile t (image-major, then tile rows, then tile columns) of map `in` (B, H, W, C):
 * pointers into in, or zero_row (C zeros) where the 4x4 window hangs over the padding. */
static void tile_inputs(const float **p, const float *in, const float *zero_row, const Geom *g, long t) {
    const long per_image = (long)g->tiles_h * g->tiles_w;
    const long b = t / per_image, r = t % per_image;
    const int ih0 = (int)(r / g->tiles_w) * 2 - g->pad_top, iw0 = (int)(r % g->tiles_w) * 2 - g->pad_left;
    const float *img = in + (size_t)b * g->H * g->W * g->C;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            const int ih = ih0 + i, iw = iw0 + j;
            p[i * 4 + j] = ih >= 0 && ih < g->H && iw >= 0 && iw < g->W ? img + ((size_t)ih * g->W + iw) * g->C
                                                                        : zero_row;
        }
}

/* The 2x2 output pixels of tile t (row by row) as pixel indices into a map (B, OH, OW, K), -1 past the map's
 * edge. */
static void tile_outputs(long *idx, const Geom *g, long t) {
    const long per_image = (long)g->tiles_h * g->tiles_w;
    const long b = t / per_image, r = t % per_image;
    const int oh0 = (int)(r / g->tiles_w) * 2, ow0 = (int)(r % g->tiles_w) * 2;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            const int oh = oh0 + i, ow = ow0 + j;
            idx[i * 2 + j] = oh < g->OH && ow < g->OW ? (b * g->OH + oh) * g->OW + ow : -1;
        }
}

/* ---- the passes ----------------------------------------------------------------------- */

/* out (B, OH, OW, K) = act(conv(in, weights whose transform is U) + bias) over geometry g.  U: (16, C, K)
 * when !u_flipped; with u_flipped, U is the transform of a kernel whose flipped, channel-swapped twin this
 * convolution applies: U is (16, K, C) and cell (i, j) reads U's cell (p(i), p(j)) transposed, p swapping 0
 * and 3.  Work: nt threads' chunk buffers after U in scratch. */
static void wino_conv(float *out, float *work, const float *in, const float *U, int u_flipped, const float *bias,
                      int relu, const float *zero_row, const Geom *g, int B, int nt) {
    const long n_tiles = (long)B * g->tiles_h * g->tiles_w;
    /* Chunks of chunk_tiles (one chunk of every tile where the batch has fewer: the same partition). */
    const int tc = chunk_tiles(g->C, g->K) < n_tiles ? chunk_tiles(g->C, g->K) : (int)n_tiles;
    const long n_chunks = (n_tiles + tc - 1) / tc;
    const size_t per_thread = chunk_n_floats(g, B);
    static const int flip[4] = {3, 1, 2, 0};
#pragma omp parallel num_threads(nt)
    {
        float *V = work + (size_t)omp_get_thread_num() * per_thread; /* (16, tc, C) */
        float *M = V + (size_t)XI * tc * g->C;                        /* (16, tc, K) */
        float *spare = M + (size_t)XI * tc * g->K;                    /* (K): outputs past the map's edge */
#pragma omp for schedule(static)
        for (long q = 0; q < n_chunks; q++) {
            const long t0 = q * tc, t1 = t0 + tc < n_tiles ? t0 + tc : n_tiles;
            const int n = (int)(t1 - t0);
            for (long t = t0; t < t1; t++) {
                const float *p[16];
                tile_inputs(p, in, zero_row, g, t);
                transform_input(V + (size_t)(t - t0) * g->C, (size_t)tc * g->C, p, g->C);
            }
            for (int xi = 0; xi < XI; xi++) {
                const float *Vx = V + (size_t)xi * tc * g->C;
                float *Mx = M + (size_t)xi * tc * g->K;
                if (!u_flipped)
                    sgemm(0, 0, n, g->K, g->C, 1.0f, Vx, g->C, U + (size_t)xi * g->C * g->K, g->K, 0.0f, Mx, g->K);
                else
                    sgemm(0, 1, n, g->K, g->C, 1.0f, Vx, g->C,
                          U + (size_t)(flip[xi / 4] * 4 + flip[xi % 4]) * g->C * g->K, g->C, 0.0f, Mx, g->K);
            }
            for (long t = t0; t < t1; t++) {
                long idx[4];
                float *y[4];
                tile_outputs(idx, g, t);
                for (int i = 0; i < 4; i++) y[i] = idx[i] >= 0 ? out + (size_t)idx[i] * g->K : spare;
                transform_output(y, M + (size_t)(t - t0) * g->K, (size_t)tc * g->K, bias, relu, g->K);
            }
        }
    }
}

/* U = the weights' transform, (16, C_in, C_out), over the team. */
static void weights_to_winograd(float *U, const float *weight, const Conv2d *c, int nt) {
#pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num(), n = omp_get_num_threads();
        transform_weights(U, weight, c->C_in, c->C_out, (int)((long)c->C_in * t / n),
                          (int)((long)c->C_in * (t + 1) / n));
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
    const int nt = team_size(n_threads);
    const float *zero = zero_row_of(scratch, c);
    float *U = work_of(scratch, c);
    weights_to_winograd(U, weight, c, nt);
    const Geom g = geom_make(c->H, c->W, c->C_in, c->OH, c->OW, c->C_out, c->pad_top, c->pad_left);
    wino_conv(out, U + round16((size_t)XI * c->C_in * c->C_out), inp, U, 0, bias, c->act == ACT_RELU, zero, &g, B,
              nt);
}

void winograd_backward_data(float *dinp, float *scratch, const float *dout, const float *weight, const Conv2d *c,
                            int B, int n_threads) {
    if (B < 1) return; /* no image: nothing to write */
    const int nt = team_size(n_threads);
    int pad_h, pad_w;
    conv_dgrad_pad(c, &pad_h, &pad_w);
    const float *zero = zero_row_of(scratch, c);
    float *U = work_of(scratch, c);
    weights_to_winograd(U, weight, c, nt);
    const Geom g = geom_make(c->OH, c->OW, c->C_out, c->H, c->W, c->C_in, pad_h, pad_w);
    wino_conv(dinp, U + round16((size_t)XI * c->C_in * c->C_out), dout, U, 1, NULL, 0, zero, &g, B, nt);
}

void winograd_backward_weights(float *dweight, float *dbias, float *scratch, const float *dout, const float *inp,
                               const Conv2d *c, int B, int n_threads) {
    if (B < 1) { /* no image: the gradients are 0 */
        memset(dweight, 0, sizeof(float) * 9 * (size_t)c->C_in * c->C_out);
        if (dbias) memset(dbias, 0, sizeof(float) * (size_t)c->C_out);
        return;
    }
    const int nt = team_size(n_threads);
    const int C = c->C_in, K = c->C_out;
    const float *zero = zero_row_of(scratch, c);
    float *dU = work_of(scratch, c);                          /* (16, C, K) */
    float *V = dU + round16((size_t)XI * C * K);              /* (16, ts, C) */
    const Geom g = geom_make(c->H, c->W, C, c->OH, c->OW, K, c->pad_top, c->pad_left);
    const long n_tiles = (long)B * g.tiles_h * g.tiles_w;
    const int ts = segment_tiles(C, K);
    float *dM = V + (size_t)XI * ts * C;                      /* (16, ts, K) */
    const long n_segments = (n_tiles + ts - 1) / ts;
#pragma omp parallel num_threads(nt)
    {
        for (long s = 0; s < n_segments; s++) {
            const long t0 = s * ts, t1 = t0 + ts < n_tiles ? t0 + ts : n_tiles;
            const int n = (int)(t1 - t0);
#pragma omp for schedule(static)
            for (long t = t0; t < t1; t++) {
                const float *p[16];
                tile_inputs(p, inp, zero, &g, t);
                transform_input(V + (size_t)(t - t0) * C, (size_t)ts * C, p, C);
                long idx[4];
                const float *dy[4];
                tile_outputs(idx, &g, t);
                for (int i = 0; i < 4; i++) dy[i] = idx[i] >= 0 ? dout + (size_t)idx[i] * K : zero;
                transform_output_grad(dM + (size_t)(t - t0) * K, (size_t)ts * K, dy, K);
            }
#pragma omp for schedule(static)
            for (int xi = 0; xi < XI; xi++)
                sgemm(1, 0, C, K, n, 1.0f, V + (size_t)xi * ts * C, C, dM + (size_t)xi * ts * K, K,
                      s == 0 ? 0.0f : 1.0f, dU + (size_t)xi * C * K, K);
        }
        const int t = omp_get_thread_num(), n_t = omp_get_num_threads();
        transform_weights_grad(dweight, dU, C, K, (int)((long)C * t / n_t), (int)((long)C * (t + 1) / n_t));
        /* The bias gradient: each thread its own columns, every row in order. */
        if (dbias) {
            const int k0 = (int)((long)K * t / n_t), k1 = (int)((long)K * (t + 1) / n_t);
            for (int k = k0; k < k1; k++) dbias[k] = 0.0f;
            for (long r = 0; r < (long)B * c->OH * c->OW; r++) {
                const float *row = dout + (size_t)r * K;
                for (int k = k0; k < k1; k++) dbias[k] += row[k];
            }
        }
    }
}
