/* conv2d.c — TensorFlow's padding arithmetic and conv2d (+ bias, + relu)
 * as im2col + sgemm, NHWC with HWIO weights.
 *
 * Where it sits: model.c runs conv1/conv2 of both models through here; a
 * tower never calls it directly.  One image per OpenMP thread: each thread
 * lays its image out as an im2col matrix (OH*OW, KH*KW*C_in) in its own
 * scratch and multiplies by the weights seen as (KH*KW*C_in, C_out), which
 * is exactly TensorFlow's HWIO layout, so no weight reshuffling is needed.
 * The weight gradient of a map under 64 cells takes a group of images per
 * GEMM (wgrad_group_max), so that the product is not 4 or 16 rows deep.
 * Where one image's im2col matrix would pass COL_MAX_FLOATS (VGG16's
 * block1 at 224x224: 115.6 MB), the image goes through in bands of output
 * rows, each unrolled, multiplied and (backward) folded back on its own, so
 * that a thread's scratch stays a few MB however large the map.
 * A 1x1 kernel at stride 1 (ResNet-50's bottleneck convolutions) skips
 * im2col: in NHWC the batch is already the (B*H*W, C_in) matrix, so each
 * product is one sgemm over every pixel of the batch (model/pointwise.c's
 * way; sgemm splits it across the threads) — faster than B small GEMMs
 * where the maps are small (an 8x8 map is a 64-row GEMM per image).
 * What it does not do: allocate (scratch comes from the caller), or check
 * shapes after conv2d_init.
 */
#include "model/conv_algo.h"
#include "model/layers.h"
#include "model/sgemm.h"

#include <omp.h>
#include <string.h>

int tf_padding(int *out_size, int *pad_before, int in_size, int k, int stride, Padding padding) {
    if (in_size <= 0 || k <= 0 || stride <= 0) return -1;
    int out, pad_total;
    if (padding == PAD_SAME) {
        out = (in_size + stride - 1) / stride;
        pad_total = (out - 1) * stride + k - in_size;
        if (pad_total < 0) pad_total = 0;
    } else {
        if (in_size < k) return -1;
        out = (in_size - k + stride) / stride; /* ceil((in - k + 1) / stride) */
        pad_total = 0;
    }
    if (out < 1) return -1;
    *out_size = out;
    *pad_before = pad_total / 2;
    return 0;
}

/* conv_algo.h's rule on both axes. */
int conv_dgrad_pad(const Conv2d *c, int *pad_h, int *pad_w) {
    *pad_h = *pad_w = 0;
    return conv_dgrad_as_forward(c->H, c->OH, c->KH, c->stride_h, c->pad_top, pad_h) &&
           conv_dgrad_as_forward(c->W, c->OW, c->KW, c->stride_w, c->pad_left, pad_w);
}

int conv2d_init(Conv2d *c, int H, int W, int C_in, int KH, int KW, int C_out,
                int stride_h, int stride_w, Padding padding, Activation act) {
    memset(c, 0, sizeof *c);
    if (C_in <= 0 || C_out <= 0) return -1;
    c->H = H; c->W = W; c->C_in = C_in;
    c->KH = KH; c->KW = KW; c->C_out = C_out;
    c->stride_h = stride_h; c->stride_w = stride_w;
    c->padding = padding; c->act = act;
    if (tf_padding(&c->OH, &c->pad_top, H, KH, stride_h, padding) != 0) return -1;
    if (tf_padding(&c->OW, &c->pad_left, W, KW, stride_w, padding) != 0) return -1;
    return 0;
}

/* The weight gradient's GEMM takes the im2col rows of several images at once where a map is small, so that
 * its inner dimension is at least WGRAD_MIN_ROWS: one GEMM per image of vgg11's 2x2 layer (4 rows) read and
 * wrote the thread's 9.4 MB partial gradient 32 times a step for 4 rows of work each (33 ms of the layer's
 * backward on the 2-core AVX2 EPYC; bench/RESULTS.md, 2026-11-27).  Maps of 64 cells or more keep one image
 * per GEMM, and with it their results bit for bit. */
enum { WGRAD_MIN_ROWS = 64 };
static int wgrad_group_max(const Conv2d *c) {
    const int rows = c->OH * c->OW;
    return rows >= WGRAD_MIN_ROWS ? 1 : (WGRAD_MIN_ROWS + rows - 1) / rows;
}

/* Output rows (oh) a band unrolls: as many as keep its im2col matrix within COL_MAX_FLOATS (4 MiB), at least
 * one; the whole map where it fits, and always where images are grouped (a small map).  One band is the whole
 * image's product, as before bands: the same results bit for bit. */
enum { COL_MAX_FLOATS = 1 << 20 };
static int band_rows(const Conv2d *c) {
    const size_t row_n_floats = (size_t)c->OW * c->KH * c->KW * c->C_in;
    if (wgrad_group_max(c) > 1 || (size_t)c->OH * row_n_floats <= COL_MAX_FLOATS) return c->OH;
    const size_t n = COL_MAX_FLOATS / row_n_floats;
    return n > 0 ? (int)n : 1;
}

/* Per-thread scratch layout, each part rounded up to 16 floats (64 bytes). */
static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }
static size_t col_n_floats(const Conv2d *c) {
    return round16((size_t)band_rows(c) * c->OW * c->KH * c->KW * c->C_in);
}
static size_t group_col_n_floats(const Conv2d *c) {
    const int G = wgrad_group_max(c);
    return G > 1 ? round16((size_t)G * c->OH * c->OW * c->KH * c->KW * c->C_in) : col_n_floats(c);
}
static size_t group_out_n_floats(const Conv2d *c) {
    return round16((size_t)wgrad_group_max(c) * c->OH * c->OW * c->C_out);
}
static size_t dw_n_floats(const Conv2d *c) {
    return round16((size_t)c->KH * c->KW * c->C_in * c->C_out);
}
static size_t per_thread_n_floats(const Conv2d *c) {
    /* col (a group's images, or a band of one; forward uses its first band), dcol (a band), dpre (a group's),
     * dweight partial, dbias partial */
    return group_col_n_floats(c) + col_n_floats(c) + group_out_n_floats(c) + dw_n_floats(c) +
           round16((size_t)c->C_out);
}

size_t conv2d_scratch_n_floats(const Conv2d *c, int n_threads) {
    return (size_t)(n_threads > 0 ? n_threads : 1) * per_thread_n_floats(c);
}

/* 1 when the convolution is a plain matrix product of the batch: a 1x1 kernel at stride 1 (no padding either
 * way), with B*H*W rows within sgemm's int range. */
static int one_gemm(const Conv2d *c, int B) {
    return c->KH == 1 && c->KW == 1 && c->stride_h == 1 && c->stride_w == 1 &&
           (size_t)B * c->H * c->W <= 0x7fffffff;
}

/* sgemm on conv_cpu_team(n_threads) threads (it splits across the calling thread's OpenMP threads). */
static void sgemm_on(int n_threads, int trans_a, int trans_b, int M, int N, int K, const float *A, int lda,
                     const float *Bm, int ldb, float beta, float *C, int ldc) {
    const int before = omp_get_max_threads();
    omp_set_num_threads(conv_cpu_team(n_threads));
    sgemm(trans_a, trans_b, M, N, K, 1.0f, A, lda, Bm, ldb, beta, C, ldc);
    omp_set_num_threads(before);
}

/* col: ((oh1 - oh0)*OW, KH*KW*C_in), the windows of output rows oh0 .. oh1-1
 * of one image img: (H, W, C_in); zero where the window hangs over the
 * padding.  For a fixed output pixel and kernel row the KW input pixels are
 * adjacent in NHWC, so each piece is one memcpy. */
static void im2col(float *col, const float *img, const Conv2d *c, int oh0, int oh1) {
    const int C = c->C_in, KW = c->KW, row_n = c->KH * KW * C;
    for (int oh = oh0; oh < oh1; oh++) {
        for (int ow = 0; ow < c->OW; ow++) {
            float *row = col + (size_t)((oh - oh0) * c->OW + ow) * row_n;
            int ih0 = oh * c->stride_h - c->pad_top;
            int iw0 = ow * c->stride_w - c->pad_left;
            int kw_lo = iw0 < 0 ? -iw0 : 0;
            int kw_hi = c->W - iw0 < KW ? c->W - iw0 : KW;
            for (int kh = 0; kh < c->KH; kh++) {
                float *dst = row + (size_t)kh * KW * C;
                int ih = ih0 + kh;
                if (ih < 0 || ih >= c->H || kw_lo >= kw_hi) {
                    memset(dst, 0, sizeof(float) * KW * C);
                    continue;
                }
                if (kw_lo > 0) memset(dst, 0, sizeof(float) * kw_lo * C);
                memcpy(dst + (size_t)kw_lo * C, img + ((size_t)ih * c->W + iw0 + kw_lo) * C,
                       sizeof(float) * (kw_hi - kw_lo) * C);
                if (kw_hi < KW) memset(dst + (size_t)kw_hi * C, 0, sizeof(float) * (KW - kw_hi) * C);
            }
        }
    }
}

/* The adjoint of im2col for output rows oh0 .. oh1-1: every dcol entry
 * ADDED to the cell of dimg: (H, W, C_in) it was copied from (the caller
 * zeroes dimg before an image's first band; bands in order add in the order
 * one whole-image pass would). */
static void col2im(float *dimg, const float *dcol, const Conv2d *c, int oh0, int oh1) {
    const int C = c->C_in, KW = c->KW, row_n = c->KH * KW * C;
    for (int oh = oh0; oh < oh1; oh++) {
        for (int ow = 0; ow < c->OW; ow++) {
            const float *row = dcol + (size_t)((oh - oh0) * c->OW + ow) * row_n;
            int ih0 = oh * c->stride_h - c->pad_top;
            int iw0 = ow * c->stride_w - c->pad_left;
            int kw_lo = iw0 < 0 ? -iw0 : 0;
            int kw_hi = c->W - iw0 < KW ? c->W - iw0 : KW;
            if (kw_lo >= kw_hi) continue;
            const int n = (kw_hi - kw_lo) * C;
            for (int kh = 0; kh < c->KH; kh++) {
                int ih = ih0 + kh;
                if (ih < 0 || ih >= c->H) continue;
                const float *src = row + (size_t)kh * KW * C + (size_t)kw_lo * C;
                float *dst = dimg + ((size_t)ih * c->W + iw0 + kw_lo) * C;
                for (int i = 0; i < n; i++) dst[i] += src[i];
            }
        }
    }
}

void conv2d_forward(float *out, float *scratch, const float *inp, const float *weight,
                    const float *bias, const Conv2d *c, int B, int n_threads) {
    const int rows = c->OH * c->OW, K = c->KH * c->KW * c->C_in, N = c->C_out;
    const size_t in_n = (size_t)c->H * c->W * c->C_in, out_n = (size_t)rows * N;
    const size_t per_thread = per_thread_n_floats(c);
    const int whole = one_gemm(c, B), band = band_rows(c);
    if (whole) sgemm_on(n_threads, 0, 0, B * rows, N, K, inp, K, weight, N, 0.0f, out, N);
#pragma omp parallel num_threads(conv_cpu_team(n_threads))
    {
        float *col = scratch + (size_t)omp_get_thread_num() * per_thread;
#pragma omp for schedule(static)
        for (int b = 0; b < B; b++) {
            float *out_b = out + (size_t)b * out_n;
            for (int oh0 = 0; !whole && oh0 < c->OH; oh0 += band) {
                const int oh1 = oh0 + band < c->OH ? oh0 + band : c->OH;
                im2col(col, inp + (size_t)b * in_n, c, oh0, oh1);
                sgemm(0, 0, (oh1 - oh0) * c->OW, N, K, 1.0f, col, K, weight, N, 0.0f,
                      out_b + (size_t)oh0 * c->OW * N, N);
            }
            if (bias) bias_add_forward(out_b, out_b, bias, rows, N);
            if (c->act == ACT_RELU) relu_forward(out_b, out_b, out_n);
        }
    }
}

/* Thread u's partial weight gradient (K, N) and bias gradient (N) in scratch. */
static float *partial_dw(float *scratch, const Conv2d *c, int u) {
    return scratch + (size_t)u * per_thread_n_floats(c) + group_col_n_floats(c) + col_n_floats(c) +
           group_out_n_floats(c);
}
static float *partial_db(float *scratch, const Conv2d *c, int u) {
    return partial_dw(scratch, c, u) + dw_n_floats(c);
}

void conv2d_backward(float *dinp, float *dweight, float *dbias, float *scratch,
                     const float *out, const float *dout, const float *inp,
                     const float *weight, const Conv2d *c, int B, int n_threads) {
    const int rows = c->OH * c->OW, K = c->KH * c->KW * c->C_in, N = c->C_out;
    const size_t in_n = (size_t)c->H * c->W * c->C_in, out_n = (size_t)rows * N;
    const size_t per_thread = per_thread_n_floats(c), w_n = (size_t)K * N;
    /* A 1x1 kernel at stride 1 without an activation: the two products over the whole batch, the loop below
     * only the bias gradient's partials. */
    const int whole = c->act == ACT_NONE && one_gemm(c, B);
    if (whole && dinp) sgemm_on(n_threads, 0, 1, B * rows, K, N, dout, N, weight, N, 0.0f, dinp, K);
    if (whole && dweight) sgemm_on(n_threads, 1, 0, K, N, B * rows, inp, K, dout, N, 0.0f, dweight, N);
#pragma omp parallel num_threads(conv_cpu_team(n_threads))
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        float *col = scratch + (size_t)t * per_thread;  /* (G * rows, K): the group's images */
        float *dcol = col + group_col_n_floats(c);       /* (rows, K) */
        float *dpre = dcol + col_n_floats(c);            /* (G * rows, N) */
        float *dw_t = partial_dw(scratch, c, t);         /* (K, N) */
        float *db_t = partial_db(scratch, c, t);         /* (N) */
        memset(dw_t, 0, sizeof(float) * w_n);
        memset(db_t, 0, sizeof(float) * N);
        /* Groups of G images (wgrad_group_max), at least one group a thread where the batch allows; a large map
         * in bands of output rows (band_rows: G is then 1). */
        const int per_t = (B + nt - 1) / nt, G_max = wgrad_group_max(c), band = band_rows(c);
        const int G = per_t < G_max ? (per_t > 0 ? per_t : 1) : G_max, n_groups = (B + G - 1) / G;
        const int banded = band < c->OH;
#pragma omp for schedule(static)
        for (int q = 0; q < n_groups; q++) {
            const int b0 = q * G, b1 = b0 + G < B ? b0 + G : B;
            for (int b = b0; b < b1; b++) {
                const float *g = dout + (size_t)b * out_n;
                if (c->act == ACT_RELU) {
                    float *gb = dpre + (size_t)(b - b0) * out_n;
                    relu_backward(gb, out + (size_t)b * out_n, g, out_n);
                    g = gb;
                }
                if (dweight) bias_add_backward(db_t, g, rows, N);
                if (whole) continue;
                if (dinp) memset(dinp + (size_t)b * in_n, 0, sizeof(float) * in_n);
                for (int oh0 = 0; oh0 < c->OH; oh0 += band) {
                    const int oh1 = oh0 + band < c->OH ? oh0 + band : c->OH, band_n = (oh1 - oh0) * c->OW;
                    const float *g_band = g + (size_t)oh0 * c->OW * N;
                    if (dweight) im2col(col + (size_t)(b - b0) * rows * K, inp + (size_t)b * in_n, c, oh0, oh1);
                    if (dweight && banded) sgemm(1, 0, K, N, band_n, 1.0f, col, K, g_band, N, 1.0f, dw_t, N);
                    if (dinp) {
                        sgemm(0, 1, band_n, K, N, 1.0f, g_band, N, weight, N, 0.0f, dcol, K);
                        col2im(dinp + (size_t)b * in_n, dcol, c, oh0, oh1);
                    }
                }
            }
            /* Unbanded, the group's (G * rows, N) output gradient in one product: the masked copies, or dout
             * itself. */
            const float *g0 = c->act == ACT_RELU ? dpre : dout + (size_t)b0 * out_n;
            if (dweight && !whole && !banded) sgemm(1, 0, K, N, (b1 - b0) * rows, 1.0f, col, K, g0, N, 1.0f, dw_t, N);
        }
        /* Sum the partials in thread order (deterministic for a given team
         * size); the loop's implicit barrier makes every partial complete. */
        const float *dw_0 = partial_dw(scratch, c, 0);
        const size_t w_sum_n = dweight && !whole ? w_n : 0;
#pragma omp for schedule(static)
        for (size_t i = 0; i < w_sum_n; i++) {
            float s = 0.0f;
            for (int u = 0; u < nt; u++) s += dw_0[(size_t)u * per_thread + i];
            dweight[i] = s;
        }
#pragma omp single
        if (dweight && dbias) {
            for (int n = 0; n < N; n++) {
                float s = 0.0f;
                for (int u = 0; u < nt; u++) s += partial_db(scratch, c, u)[n];
                dbias[n] = s;
            }
        }
    }
}
