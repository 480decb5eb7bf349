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
 * innermost (contiguous in NHWC).  F(2x2, 3x3)'s are loops here; the 4x4
 * tiles' are model/winograd_tiles.inc, a vector of channels at a time:
 * 16 channels where the CPU has AVX-512 (winograd_tiles16.c), else 8
 * (winograd_tiles8.c, cloned for AVX-512, AVX2 and the baseline: on an
 * AVX-512 CPU, conv_cpu_set_lanes(8) runs its AVX-512 clone).  Every build
 * of them is compiled without contraction into fused multiply-adds
 * (model/CMakeLists.txt): the same additions, so the same bits, on every
 * path and width (tests/test_winograd.c compares 8 with 16 lanes).
 * Threads: the forward passes split their tiles into chunks of a fixed
 * size (a function of the channels), one chunk at a time per thread with
 * single-threaded sgemm; backward weights splits its tiles into segments
 * of a fixed size and each segment's products over the threads,
 * accumulating in segment order: every result is the same from run to run
 * and whatever the team size.
 * What it does not do: strides other than 1, kernels other than 3x3 and
 * 5x5, or allocate (the caller's scratch, winograd_scratch_n_floats).
 */
#include "model/conv_algo.h"
#include "model/layers.h"
#include "model/sgemm.h"
#include "model/winograd_tiles.h"

#include <omp.h>
#include <string.h>

/* F(2x2, 3x3)'s loops are cloned as winograd_tiles8.c's transforms (WINO_CLONES_8, winograd_tiles.h). */

/* ---- F(2x2, 3x3): 4x4 tiles, the channel loop innermost ---------------------------------- */

/* U[xi][c][k] = (G g G^T)[xi] for every (c, k), g the 3x3 kernel w[.][.][c][k] (HWIO), rows c0..c1 of each
 * cell's (C, K) matrix.  G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]. */
WINO_CLONES_8 static void weights_3x3(float *U, const float *w, int C, int K, int c0, int c1) {
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
WINO_CLONES_8 static void input_3x3(float *V, size_t v_stride, const float *const *p_in, int C) {
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
WINO_CLONES_8 static void output_3x3(float *const *y_out, const float *M, size_t m_stride, const float *bias,
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
WINO_CLONES_8 static void output_grad_3x3(float *dM, size_t m_stride, const float *const *p_in, int K) {
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
WINO_CLONES_8 static void weights_grad_3x3(float *dw, const float *dU, int C, int K, int c0, int c1) {
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
    const WinoTileFns *fns8;  /* its transforms, 8 channels a vector (or its own loops: F(2x2, 3x3)) */
    const WinoTileFns *fns16; /* 16 channels a vector (AVX-512), or NULL */
} WinoKind;

static const int flip_3x3[4] = {3, 1, 2, 0};

static const WinoTileFns f2_3x3 = {weights_3x3, input_3x3, output_3x3, output_grad_3x3, weights_grad_3x3};

static const WinoKind kinds[] = {
    {"Winograd F(2x2,3x3)", 3, 2, 4, flip_3x3, &f2_3x3, NULL},
    {"Winograd F(4x4,3x3)", 3, 4, 6, NULL, &winograd_tiles_8.f4_3x3, &winograd_tiles_16.f4_3x3},
    {"Winograd F(4x4,5x5)", 5, 4, 8, NULL, &winograd_tiles_8.f4_5x5, &winograd_tiles_16.f4_5x5},
};

/* kd's transforms at this call's width (conv_cpu_lanes). */
static const WinoTileFns *fns_of(const WinoKind *kd) {
    return kd->fns16 && conv_cpu_lanes() == 16 ? kd->fns16 : kd->fns8;
}

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
    const int nt = conv_cpu_team(n_threads);
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
    const WinoTileFns *f = fns_of(kd);
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
                f->input(V + (size_t)(t - t0) * g->C, v_stride, p, g->C);
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
                f->output(y, M + (size_t)(t - t0) * g->K, m_stride, bias, relu, g->K);
            }
        }
    }
}

/* U = the transform of weight (r, r, C, K), (xi, C, K), over the team. */
static void weights_to_winograd(float *U, const float *weight, const WinoKind *kd, int C, int K, int nt) {
    const WinoTileFns *f = fns_of(kd);
#pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num(), n = omp_get_num_threads();
        f->weights(U, weight, C, K, (int)((long)C * t / n), (int)((long)C * (t + 1) / n));
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
    const int nt = conv_cpu_team(n_threads);
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
    const int nt = conv_cpu_team(n_threads);
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
    const int nt = conv_cpu_team(n_threads);
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
    const WinoTileFns *f = fns_of(kd);
#pragma omp parallel num_threads(nt)
    {
        for (long s = 0; s < n_segments; s++) {
            const long t0 = s * ts, t1 = t0 + ts < n_tiles ? t0 + ts : n_tiles;
            const int n = (int)(t1 - t0);
#pragma omp for schedule(static)
            for (long t = t0; t < t1; t++) {
                const float *p[MAX_XI];
                tile_inputs(p, inp, zero, &g, t);
                f->input(V + (size_t)(t - t0) * C, v_stride, p, C);
                long idx[MAX_OUT];
                const float *dy[MAX_OUT];
                tile_outputs(idx, &g, t);
                for (int i = 0; i < g.m * g.m; i++) dy[i] = idx[i] >= 0 ? dout + (size_t)idx[i] * K : zero;
                f->output_grad(dM + (size_t)(t - t0) * K, m_stride, dy, K);
            }
#pragma omp for schedule(static)
            for (int xi = 0; xi < xi_n; xi++)
                sgemm(1, 0, C, K, n, 1.0f, V + (size_t)xi * v_stride, C, dM + (size_t)xi * m_stride, K,
                      s == 0 ? 0.0f : 1.0f, dU + (size_t)xi * C * K, K);
        }
        const int t = omp_get_thread_num(), n_t = omp_get_num_threads();
        f->weights_grad(dweight, dU, C, K, (int)((long)C * t / n_t), (int)((long)C * (t + 1) / n_t));
        /* The bias gradient: each thread its own columns, every row in order. */
        if (dbias) {
            const int k0 = (int)((long)K * t / n_t), k1 = (int)((long)K * (t + 1) / n_t);
            for (int k = k0; k < k1; k++) dbias[k] = 0.0f;
            bias_add_backward_columns(dbias, dout, (size_t)B * c->OH * c->OW, K, k0, k1);
        }
    }
}
