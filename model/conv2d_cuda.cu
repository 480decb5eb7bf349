/* conv2d_cuda.cu — conv2d (+ bias, + relu) on the GPU with cuDNN, NHWC,
 * the CUDA mirror of conv2d.c.
 *
 * Where it sits: conv1/conv2 of both models on a GPU tower (model_cuda.cu).
 * The activations are NHWC as on the CPU; the weights arrive in
 * TensorFlow's HWIO layout (the parameter block's), which cuDNN has no
 * filter format for: HWIO seen as a (KH*KW*C_in, C_out) matrix is the
 * transpose of cuDNN's NHWC filter layout (C_out, KH, KW, C_in), so a small
 * tiled transpose kernel converts the weights each step and the filter
 * gradient back.  cuDNN convolves, our kernels add the bias and apply relu.
 * Asymmetric padding (TensorFlow's SAME with an odd total: one more row and
 * column after than before) is a zero-padded copy of the input in scratch,
 * which cuDNN convolves with the symmetric part; backward data writes the
 * padded gradient there and crops it into dinp.
 * A 1x1 convolution (no padding, any stride: ResNet-50's bottleneck ends
 * and projection shortcuts, MobileNetV2's pointwise layers when they are
 * conv nodes) is a matrix product, and runs as three cuBLAS GEMMs on the
 * HWIO weights as they are (no transposes): cuDNN's only algorithm for
 * its input gradient within the workspace cap was ALGO_0, 20-50x slower
 * (bench/RESULTS.md, 2026-11-26).  Strides > 1 gather the sampled input
 * rows into scratch first and scatter the input gradient back.
 * TOWER_CONV1X1_CUDNN=1 in the environment keeps such layers on cuDNN.
 * The filter gradient of the other (ungrouped) convolutions is a GEMM
 * too: the input windows unrolled (im2col, TensorFlow's padding read as
 * zeros) in chunks of images, times the output gradient, summed over the
 * chunks in a fixed order.  cuDNN's deterministic NHWC filter algorithm
 * (ALGO_1) took 5-15x the forward's time on an H100 (resnet20's 3x3
 * layers: 0.65 ms against 0.08).  TOWER_CONV_WGRAD_CUDNN=1 keeps cuDNN.
 * The input gradient of a stride-1 convolution with symmetric padding is
 * a forward convolution of the output gradient with the filter flipped in
 * h and w and its channels swapped (conv_algo.h's conv_dgrad_as_forward):
 * where cuDNN has no deterministic backward-data algorithm within the
 * workspace cap (VGG16 at 224x224, batch 128: only the atomic ALGO_0, with
 * 0.46-1.0 s of backward a layer on an H100, bench/RESULTS.md 2026-11-27), backward data runs as
 * cuDNN's forward on a flipped copy of the weights (dgrad_fwd); with
 * TOWER_CUDNN_FIND=1 also wherever cuDNN timed it faster than its
 * backward-data entry (resnet20's 32x32x16 layers on an H100, timed by
 * cuDNN's Find: ALGO_1 0.17-0.29 ms, their forward 0.12-0.15, 2026-11-27).
 * TOWER_CONV_DGRAD_CUDNN=1 keeps cuDNN's backward data;
 * TOWER_CONV_DGRAD_FORWARD=1 takes the forward wherever it applies (the
 * tests compare it with the CPU that way).
 * What it does not do: allocate during forward/backward, or synchronise.
 */
#include "model/layers_cuda.h"
#include "base/cuda_check.h"
#include "model/conv_algo.h"
#include "base/flags.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- transpose ------------------------------------------------------------- */

#define TILE 32
#define TILE_ROWS 8

/* dst (cols, rows) = src (rows, cols)^T through a padded shared tile, so
 * reads and writes are both coalesced.  Block (TILE, TILE_ROWS). */
__global__ static void transpose_kernel(float *dst, const float *src, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];
    const int c = blockIdx.x * TILE + threadIdx.x;
    const int r0 = blockIdx.y * TILE;
    for (int j = threadIdx.y; j < TILE; j += TILE_ROWS) {
        int r = r0 + j;
        if (r < rows && c < cols) tile[j][threadIdx.x] = src[(size_t)r * cols + c];
    }
    __syncthreads();
    const int r = r0 + threadIdx.x;
    for (int j = threadIdx.y; j < TILE; j += TILE_ROWS) {
        int cc = blockIdx.x * TILE + j;
        if (cc < cols && r < rows) dst[(size_t)cc * rows + r] = tile[threadIdx.x][j];
    }
}

extern "C" void transpose_cuda(float *dst, const float *src, int rows, int cols, cudaStream_t stream) {
    dim3 block(TILE, TILE_ROWS);
    dim3 grid((unsigned)((cols + TILE - 1) / TILE), (unsigned)((rows + TILE - 1) / TILE));
    transpose_kernel<<<grid, block, 0, stream>>>(dst, src, rows, cols);
    CUDA_CHECK(cudaGetLastError());
}

/* ---- the input gradient as a forward convolution: the flipped filter ---------- */

/* dst (C_in, KH, KW, C_out) = src (KH, KW, C_in, C_out) with h and w reversed:
 * dst[ci][r][s][co] = src[KH-1-r][KW-1-s][ci][co], cuDNN's NHWC filter for
 * C_in outputs from C_out inputs.  Both sides are contiguous in co. */
__global__ static void flip_filter_kernel(float *dst, const float *src, size_t n, int KH, int KW, int C_in,
                                          int C_out) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int co = (int)(i % C_out);
        size_t t = i / C_out;
        const int s = (int)(t % KW);
        t /= KW;
        const int r = (int)(t % KH);
        const int ci = (int)(t / KH);
        dst[i] = src[(((size_t)(KH - 1 - r) * KW + (KW - 1 - s)) * C_in + ci) * C_out + co];
    }
}

/* ---- asymmetric padding: pad the input, crop its gradient ----------------------- */

/* (b, h, w, c) of element i of a (B, H, W, C) tensor. */
__device__ static inline void nhwc_coords(size_t i, int H, int W, int C, size_t *b, int *h, int *w, int *c) {
    *c = (int)(i % C);
    size_t t = i / C;
    *w = (int)(t % W);
    t /= W;
    *h = (int)(t % H);
    *b = t / H;
}

/* dst (B, HP, WP, C) = src (B, H, W, C) placed at (top, left), zeros around. */
__global__ static void pad_nhwc_kernel(float *dst, const float *src, size_t n, int H, int W, int C, int HP, int WP,
                                       int top, int left) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t b;
        int h, w, c;
        nhwc_coords(i, HP, WP, C, &b, &h, &w, &c);
        const int ih = h - top, iw = w - left;
        dst[i] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? src[((b * H + ih) * W + iw) * C + c] : 0.0f;
    }
}

/* dst (B, H, W, C) = the window at (top, left) of src (B, HP, WP, C). */
__global__ static void crop_nhwc_kernel(float *dst, const float *src, size_t n, int H, int W, int C, int HP, int WP,
                                        int top, int left) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t b;
        int h, w, c;
        nhwc_coords(i, H, W, C, &b, &h, &w, &c);
        dst[i] = src[((b * HP + h + top) * WP + w + left) * C + c];
    }
}

static unsigned grid_for(size_t n) {
    size_t g = (n + 255) / 256;
    return (unsigned)(g > 65535 ? 65535 : g);
}

static int is_padded(const Conv2dCuda *c) { return c->HP != c->geom.H || c->WP != c->geom.W; }

extern "C" size_t conv2d_cuda_filter_n_floats(const Conv2dCuda *c) {
    const Conv2d *g = &c->geom;
    return (size_t)g->KH * g->KW * (size_t)(g->C_in / c->groups) * g->C_out;
}

static void pad_input(float *xpad, const float *inp, const Conv2dCuda *c, int B, cudaStream_t stream) {
    const Conv2d *g = &c->geom;
    const size_t n = (size_t)B * c->HP * c->WP * g->C_in;
    pad_nhwc_kernel<<<grid_for(n), 256, 0, stream>>>(xpad, inp, n, g->H, g->W, g->C_in, c->HP, c->WP, c->ext_top,
                                                       c->ext_left);
    CUDA_CHECK(cudaGetLastError());
}

static void crop_input_grad(float *dinp, const float *dxpad, const Conv2dCuda *c, int B, cudaStream_t stream) {
    const Conv2d *g = &c->geom;
    const size_t n = (size_t)B * g->H * g->W * g->C_in;
    crop_nhwc_kernel<<<grid_for(n), 256, 0, stream>>>(dinp, dxpad, n, g->H, g->W, g->C_in, c->HP, c->WP, c->ext_top,
                                                        c->ext_left);
    CUDA_CHECK(cudaGetLastError());
}

/* ---- 1x1 convolutions as GEMMs: the input sampled at the stride ------------------- *
 * (the sampled input is im2col_nhwc_kernel's with a 1x1 window and no padding) */

/* dst (B, H, W, C) = src (B, OH, OW, C) at the sampled rows, 0 elsewhere. */
__global__ static void scatter_strided_kernel(float *dst, const float *src, size_t n, int H, int W, int C, int OH,
                                              int OW, int sh, int sw) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t b;
        int h, w, c;
        nhwc_coords(i, H, W, C, &b, &h, &w, &c);
        const int sampled = h % sh == 0 && w % sw == 0 && h / sh < OH && w / sw < OW;
        dst[i] = sampled ? src[((b * OH + h / sh) * OW + w / sw) * C + c] : 0.0f;
    }
}

/* A 1x1 convolution without padding: a GEMM (unless TOWER_CONV1X1_CUDNN=1). */
static int gemm_applies(const Conv2d *g, int groups, int HP, int WP) {
    if (groups != 1 || g->KH != 1 || g->KW != 1 || g->pad_top != 0 || g->pad_left != 0 || HP != g->H || WP != g->W)
        return 0;
    return !flags_env_on("TOWER_CONV1X1_CUDNN");
}

static int is_strided(const Conv2d *g) { return g->stride_h != 1 || g->stride_w != 1; }

/* col (nb, OH, OW, KH, KW, C) = the input windows of x (nb, H, W, C), rows
 * in HWIO's order, zeros where a window reads TensorFlow's padding. */
__global__ static void im2col_nhwc_kernel(float *col, const float *x, size_t n, int H, int W, int C, int OH, int OW,
                                          int KH, int KW, int sh, int sw, int pad_top, int pad_left) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % C);
        size_t t = i / C;
        const int kw = (int)(t % KW);
        t /= KW;
        const int kh = (int)(t % KH);
        t /= KH;
        const int ow = (int)(t % OW);
        t /= OW;
        const int oh = (int)(t % OH);
        const size_t b = t / OH;
        const int ih = oh * sh - pad_top + kh, iw = ow * sw - pad_left + kw;
        col[i] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? x[((b * H + ih) * W + iw) * C + c] : 0.0f;
    }
}

/* The unrolled input of one chunk of images is at most this many bytes. */
#define COL_CHUNK_N_BYTES ((size_t)64 << 20)

/* Images per im2col chunk: as many as fit COL_CHUNK_N_BYTES, at least 1, at most max_batch. */
static int col_batch_for(const Conv2d *g, int max_batch) {
    const size_t per_image = (size_t)g->OH * g->OW * g->KH * g->KW * g->C_in * sizeof(float);
    size_t nb = COL_CHUNK_N_BYTES / (per_image ? per_image : 1);
    if (nb < 1) nb = 1;
    return nb > (size_t)max_batch ? max_batch : (int)nb;
}

/* dweight (K, C_out) = col^T (K, rows) . grad (rows, C_out), or += with accumulate: row-major, so in cuBLAS's
 * column-major terms dweight^T = grad^T . col.  The filter gradient of both GEMM paths. */
static void weight_grad_gemm(float *dweight, const float *col, const float *grad, int rows, int K, int C_out,
                             int accumulate, cublasHandle_t cublas) {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_T, C_out, K, rows, &one, grad, C_out, col, K,
                             accumulate ? &one : &zero, dweight, C_out));
}

/* xsub (B, OH, OW, C_in) = the input rows a strided 1x1 convolution reads (im2col with a 1x1 window); returns xsub. */
static const float *sample_input(float *xsub, const float *inp, const Conv2dCuda *c, int B, cudaStream_t stream) {
    const Conv2d *g = &c->geom;
    const size_t n = (size_t)B * g->OH * g->OW * g->C_in;
    im2col_nhwc_kernel<<<grid_for(n), 256, 0, stream>>>(xsub, inp, n, g->H, g->W, g->C_in, g->OH, g->OW, 1, 1,
                                                        g->stride_h, g->stride_w, 0, 0);
    CUDA_CHECK(cudaGetLastError());
    return xsub;
}

/* dweight (KH, KW, C_in, C_out) = sum over the B images of col^T . grad, chunk by chunk in image order. */
static void filter_grad_gemm(float *dweight, float *col, const float *inp, const float *grad, const Conv2dCuda *c,
                             int B, cublasHandle_t cublas, cudaStream_t stream) {
    const Conv2d *g = &c->geom;
    const int KKC = g->KH * g->KW * g->C_in;
    const size_t img_rows = (size_t)g->OH * g->OW, img_in = (size_t)g->H * g->W * g->C_in;
    for (int b0 = 0; b0 < B; b0 += c->col_batch) {
        const int nb = B - b0 < c->col_batch ? B - b0 : c->col_batch;
        const size_t n = (size_t)nb * img_rows * KKC;
        im2col_nhwc_kernel<<<grid_for(n), 256, 0, stream>>>(col, inp + (size_t)b0 * img_in, n, g->H, g->W, g->C_in,
                                                            g->OH, g->OW, g->KH, g->KW, g->stride_h, g->stride_w,
                                                            g->pad_top, g->pad_left);
        CUDA_CHECK(cudaGetLastError());
        weight_grad_gemm(dweight, col, grad + (size_t)b0 * img_rows * g->C_out, (int)(nb * img_rows), KKC, g->C_out,
                         b0 > 0, cublas);
    }
}

/* ---- scratch layout ------------------------------------------------------------ */

static size_t align256(size_t n_bytes) { return (n_bytes + 255) / 256 * 256; }

typedef struct {
    size_t w_krsc, dw_krsc, dpre, partials, xpad, xsub, col, workspace, total; /* byte offsets, 256-aligned */
} ConvScratchLayout;

static ConvScratchLayout scratch_layout(const Conv2dCuda *c) {
    const Conv2d *g = &c->geom;
    const size_t w_n = conv2d_cuda_filter_n_floats(c);
    const size_t out_n = (size_t)c->max_batch * g->OH * g->OW * g->C_out;
    ConvScratchLayout L;
    size_t off = 0;
    L.w_krsc = off;    off += align256(w_n * sizeof(float));
    L.dw_krsc = off;   off += align256(w_n * sizeof(float));
    L.dpre = off;      off += align256(out_n * sizeof(float));
    L.partials = off;  off += align256(bias_grad_cuda_partials_n_floats(g->C_out) * sizeof(float));
    L.xpad = off;      /* the padded input, then in backward its gradient; only where the padding is asymmetric */
    if (is_padded(c)) off += align256((size_t)c->max_batch * c->HP * c->WP * g->C_in * sizeof(float));
    L.xsub = off;      /* a strided 1x1 GEMM's sampled input, then in backward its gradient */
    if (c->gemm_1x1 && is_strided(g)) off += align256((size_t)c->max_batch * g->OH * g->OW * g->C_in * sizeof(float));
    L.col = off;       /* im2col chunk of the filter gradient's GEMM */
    if (c->wgrad_gemm)
        off += align256((size_t)c->col_batch * g->OH * g->OW * g->KH * g->KW * g->C_in * sizeof(float));
    L.workspace = off; off += align256(c->workspace_n_bytes);
    L.total = off;
    return L;
}

extern "C" size_t conv2d_cuda_scratch_n_bytes(const Conv2dCuda *c) { return scratch_layout(c).total; }

/* ---- algorithm choice ------------------------------------------------------------ */

/* The math type the descriptor of a direction carries while its algorithm
 * is chosen: FMA-only (no TF32) unless TF32 is allowed. */
static cudnnMathType_t query_math(const Conv2dCuda *c) { return c->allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH; }

static ConvMath to_conv_math(cudnnMathType_t m) {
    switch (m) {
    case CUDNN_DEFAULT_MATH: return CONV_MATH_DEFAULT;
    case CUDNN_TENSOR_OP_MATH: return CONV_MATH_TENSOR_OP;
    case CUDNN_FMA_MATH: return CONV_MATH_FMA;
    default: return CONV_MATH_TENSOR_OP_ALLOW_CONVERSION; /* and anything newer: refused with TF32 */
    }
}

static cudnnMathType_t to_cudnn_math(int m) {
    return m == CONV_MATH_DEFAULT ? CUDNN_DEFAULT_MATH : m == CONV_MATH_TENSOR_OP ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
}

/* The math type an entry runs with (conv_algo_run_math: never
 * ALLOW_CONVERSION), or -1 when it may not run. */
static int run_math(cudnnMathType_t listed, int allow_tf32) {
    const int m = conv_algo_run_math(to_conv_math(listed), allow_tf32);
    return m < 0 ? -1 : (int)to_cudnn_math(m);
}

/* Index into perf[0..n_got) of the algorithm to use (conv_algo.h's rule),
 * or -1.  For each entry the workspace is asked of cuDNN
 * (ws_query(algo, &n_bytes)) with the entry's math type set on desc; the
 * chosen entry's math type is left set on desc, its workspace in *ws_out,
 * its determinism in *det_out and its math type in *math_out. */
template <typename Perf, typename WsQuery>
static int pick_algo(const Perf *perf, int n_got, cudnnConvolutionDescriptor_t desc, int allow_tf32,
                     int deterministic_only, size_t cap, size_t *ws_out, int *det_out, cudnnMathType_t *math_out,
                     WsQuery ws_query) {
    ConvAlgoCandidate cand[16];
    if (n_got > 16) n_got = 16;
    for (int i = 0; i < n_got; i++) {
        ConvAlgoCandidate *k = &cand[i];
        const int m = run_math(perf[i].mathType, allow_tf32);
        k->usable = 0;
        k->tensor_op = perf[i].mathType == CUDNN_TENSOR_OP_MATH || perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
        k->deterministic = perf[i].determinism == CUDNN_DETERMINISTIC;
        k->ws_n_bytes = 0;
        if (perf[i].status != CUDNN_STATUS_SUCCESS || m < 0) continue;
        if (cudnnSetConvolutionMathType(desc, (cudnnMathType_t)m) != CUDNN_STATUS_SUCCESS) continue;
        k->usable = ws_query(perf[i].algo, &k->ws_n_bytes) == CUDNN_STATUS_SUCCESS;
    }
    const int i = conv_algo_pick(cand, n_got, allow_tf32, deterministic_only, cap);
    if (i < 0) return -1;
    const cudnnMathType_t m = (cudnnMathType_t)run_math(perf[i].mathType, allow_tf32);
    if (cudnnSetConvolutionMathType(desc, m) != CUDNN_STATUS_SUCCESS) return -1;
    *ws_out = cand[i].ws_n_bytes;
    *det_out = cand[i].deterministic;
    *math_out = m;
    return i;
}

static const char *fwd_algo_name(int a) {
    static const char *const n[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                                    "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
    return a >= 0 && a < (int)(sizeof n / sizeof n[0]) ? n[a] : "?";
}
static const char *bwd_data_algo_name(int a) {
    static const char *const n[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
    return a >= 0 && a < (int)(sizeof n / sizeof n[0]) ? n[a] : "?";
}
static const char *bwd_filter_algo_name(int a) {
    static const char *const n[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
    return a >= 0 && a < (int)(sizeof n / sizeof n[0]) ? n[a] : "?";
}
static const char *math_name(cudnnMathType_t m) {
    return m == CUDNN_FMA_MATH ? "fma" : m == CUDNN_TENSOR_OP_MATH ? "tensor-op" : m == CUDNN_DEFAULT_MATH ? "default" : "?";
}

extern "C" void conv2d_cuda_describe_algos(const Conv2dCuda *c, char *out, size_t out_n_bytes) {
    const char *const what[3] = {"forward", c->dgrad_fwd ? "backward data as a forward convolution (flipped filter)"
                                                         : "backward data", "backward filter"};
    const char *names[3] = {fwd_algo_name(c->algo_fwd),
                            c->dgrad_fwd ? fwd_algo_name(c->algo_dgrad_fwd) : bwd_data_algo_name(c->algo_bwd_data),
                            bwd_filter_algo_name(c->algo_bwd_filter)};
    size_t used = 0;
    if (out_n_bytes == 0) return;
    out[0] = '\0';
    if (c->gemm_1x1) {
        snprintf(out, out_n_bytes, "1x1%s: cuBLAS GEMMs for forward, backward data, backward filter (deterministic, %s, "
                 "0 B workspace)", is_strided(&c->geom) ? " stride > 1, sampled input" : "",
                 c->allow_tf32 ? "TF32 allowed" : "fma");
        return;
    }
    if (c->groups > 1) {
        const int k = snprintf(out, out_n_bytes, "grouped convolution, %d groups: ", c->groups);
        if (k > 0) used = (size_t)k < out_n_bytes ? (size_t)k : out_n_bytes;
    }
    for (int d = 0; d < 3 && used < out_n_bytes; d++) {
        if (d == 2 && c->wgrad_gemm) {
            const int k = snprintf(out + used, out_n_bytes - used, "; backward filter im2col + cuBLAS GEMM "
                                   "(deterministic, %s, %d images a chunk)", c->allow_tf32 ? "TF32 allowed" : "fma",
                                   c->col_batch);
            if (k > 0) used += (size_t)k;
            break;
        }
        if (d == 1 && !c->input_grad) {
            const int k = snprintf(out + used, out_n_bytes - used, "; backward data none (input gradient not wanted)");
            if (k > 0) used += (size_t)k;
            continue;
        }
        char ms[48] = "";
        if (c->measured && c->algo_ms[d] >= 0.0f) snprintf(ms, sizeof ms, ", measured %.3f ms", (double)c->algo_ms[d]);
        int k = snprintf(out + used, out_n_bytes - used, "%s%s %s (%s, %s, %zu B workspace%s)", d ? "; " : "", what[d],
                         names[d], c->algo_deterministic[d] ? "deterministic" : "NOT deterministic",
                         math_name(c->algo_math[d]), c->ws_need_n_bytes[d], ms);
        if (k < 0) break;
        used += (size_t)k;
    }
}

/* TOWER_CUDNN_FIND=1 in the environment (read at each choice): cuDNN
 * measures the candidates (cudnnFind*AlgorithmEx, on scratch buffers of the
 * layer's sizes) and lists them fastest first, instead of its heuristics'
 * order (cudnnGet*Algorithm_v7, which runs nothing).  The rule of
 * conv_algo.h then takes the fastest deterministic one (or, not under
 * --deterministic and none fitting, the fastest that fits): the same
 * determinism as without it, possibly other algorithms. */
static int find_enabled(void) { return flags_env_on("TOWER_CUDNN_FIND"); }

/* The buffers cudnnFind*AlgorithmEx runs on: an input, an output, a filter
 * (zeroed: the time does not depend on the values) and cap bytes of
 * workspace.  Freed by find_bufs_free. */
typedef struct {
    float *x;   /* (batch, HP, WP, C_in) */
    float *y;   /* (batch, OH, OW, C_out) */
    float *w;   /* (C_out, KH, KW, C_in) */
    void *ws;   /* (ws_n_bytes) */
    size_t ws_n_bytes;
} FindBufs;

static void find_bufs_free(FindBufs *b) {
    cudaFree(b->x);
    cudaFree(b->y);
    cudaFree(b->w);
    cudaFree(b->ws);
    memset(b, 0, sizeof *b);
}

static int find_bufs_alloc(FindBufs *b, const Conv2dCuda *c, size_t cap, char *err, size_t err_n_bytes) {
    const Conv2d *g = &c->geom;
    const size_t x_n = (size_t)c->batch * c->HP * c->WP * g->C_in, y_n = (size_t)c->batch * g->OH * g->OW * g->C_out;
    const size_t w_n = conv2d_cuda_filter_n_floats(c);
    memset(b, 0, sizeof *b);
    b->ws_n_bytes = cap;
    if (cap && CUDA_SOFT(cudaMalloc(&b->ws, cap), err, err_n_bytes)) {
        /* the whole cap is asked for: say which setting sizes it */
        const size_t k = strlen(err);
        snprintf(err + k, err_n_bytes - k, " (TOWER_CUDNN_FIND=1 measures every layer with the whole workspace cap, "
                 "%zu MiB: lower TOWER_CUDNN_WORKSPACE_MIB)", cap >> 20);
        find_bufs_free(b);
        return -1;
    }
    if (CUDA_SOFT(cudaMalloc((void **)&b->x, x_n * sizeof(float)), err, err_n_bytes) ||
        CUDA_SOFT(cudaMalloc((void **)&b->y, y_n * sizeof(float)), err, err_n_bytes) ||
        CUDA_SOFT(cudaMalloc((void **)&b->w, w_n * sizeof(float)), err, err_n_bytes) ||
        CUDA_SOFT(cudaMemset(b->x, 0, x_n * sizeof(float)), err, err_n_bytes) ||
        CUDA_SOFT(cudaMemset(b->y, 0, y_n * sizeof(float)), err, err_n_bytes) ||
        CUDA_SOFT(cudaMemset(b->w, 0, w_n * sizeof(float)), err, err_n_bytes)) {
        find_bufs_free(b);
        return -1;
    }
    return 0;
}

/* Direction d runs no cuDNN algorithm (a GEMM path, or no input gradient):
 * no workspace, nothing measured, deterministic, the query's math (FMA
 * unless TF32: as cuBLAS's math mode). */
static void record_not_cudnn(Conv2dCuda *c, int d) {
    c->ws_need_n_bytes[d] = 0;
    c->algo_deterministic[d] = 1;
    c->algo_math[d] = query_math(c);
    c->algo_ms[d] = -1.0f;
}

/* Choose the three algorithms for the current descriptors within cap bytes
 * of workspace: from cuDNN's heuristics, or measured (TOWER_CUDNN_FIND).
 * Returns 0, or -1 with err. */
static int choose_algos(Conv2dCuda *c, cudnnHandle_t h, size_t cap, char *err, size_t err_n_bytes) {
    enum { MAX_PERF = 16 };
    int n_max = 0, n_got = 0, i, rc = -1;
    const char *dir = "forward";
    cudnnConvolutionFwdAlgoPerf_t fwd[MAX_PERF];
    cudnnConvolutionBwdDataAlgoPerf_t bd[MAX_PERF];
    cudnnConvolutionBwdFilterAlgoPerf_t bf[MAX_PERF];
    if (c->gemm_1x1) { /* cuBLAS: nothing to choose */
        for (int d = 0; d < 3; d++) record_not_cudnn(c, d);
        c->measured = 0;
        return 0;
    }
    const int find = find_enabled();
    FindBufs fb;
    memset(&fb, 0, sizeof fb);
    if (find && find_bufs_alloc(&fb, c, cap, err, err_n_bytes)) return -1;
    c->measured = find;

    /* forward */
    if (CUDNN_SOFT(cudnnSetConvolutionMathType(c->conv_desc[0], query_math(c)), err, err_n_bytes) ||
        CUDNN_SOFT(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &n_max), err, err_n_bytes))
        goto out;
    if (n_max > MAX_PERF) n_max = MAX_PERF;
    if (find ? CUDNN_SOFT(cudnnFindConvolutionForwardAlgorithmEx(h, c->x_desc, fb.x, c->w_desc, fb.w, c->conv_desc[0],
                                                                c->y_desc, fb.y, n_max, &n_got, fwd, fb.ws,
                                                                fb.ws_n_bytes),
                          err, err_n_bytes)
             : CUDNN_SOFT(cudnnGetConvolutionForwardAlgorithm_v7(h, c->x_desc, c->w_desc, c->conv_desc[0], c->y_desc,
                                                                 n_max, &n_got, fwd),
                          err, err_n_bytes))
        goto out;
    i = pick_algo(fwd, n_got, c->conv_desc[0], c->allow_tf32, c->deterministic_only, cap, &c->ws_need_n_bytes[0],
                  &c->algo_deterministic[0], &c->algo_math[0], [&](cudnnConvolutionFwdAlgo_t algo, size_t *ws) {
                      return cudnnGetConvolutionForwardWorkspaceSize(h, c->x_desc, c->w_desc, c->conv_desc[0], c->y_desc,
                                                                     algo, ws);
                  });
    if (i < 0) goto none;
    c->algo_fwd = fwd[i].algo;
    c->algo_ms[0] = find ? fwd[i].time : -1.0f;

    /* backward data: not chosen for a layer whose input gradient is never wanted (the first layer) */
    c->dgrad_fwd = 0;
    if (!c->input_grad) {
        record_not_cudnn(c, 1);
        goto filter;
    }
    dir = "backward data";
    {
        const int force_fwd = c->dgrad_fwd_ok && flags_env_on("TOWER_CONV_DGRAD_FORWARD");
        int listed = -1; /* entries of bd once cuDNN has listed them */
        auto list_bwd = [&]() -> int {
            if (listed >= 0) return 0;
            if (CUDNN_SOFT(cudnnSetConvolutionMathType(c->conv_desc[1], query_math(c)), err, err_n_bytes) ||
                CUDNN_SOFT(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &n_max), err, err_n_bytes))
                return -1;
            if (n_max > MAX_PERF) n_max = MAX_PERF;
            if (find ? CUDNN_SOFT(cudnnFindConvolutionBackwardDataAlgorithmEx(h, c->w_desc, fb.w, c->y_desc, fb.y,
                                                                             c->conv_desc[1], c->x_desc, fb.x, n_max,
                                                                             &n_got, bd, fb.ws, fb.ws_n_bytes),
                                  err, err_n_bytes)
                     : CUDNN_SOFT(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c->w_desc, c->y_desc, c->conv_desc[1],
                                                                              c->x_desc, n_max, &n_got, bd),
                                  err, err_n_bytes))
                return -1;
            listed = n_got;
            return 0;
        };
        auto pick_bwd = [&](int det_only) {
            return pick_algo(bd, listed, c->conv_desc[1], c->allow_tf32, det_only, cap, &c->ws_need_n_bytes[1],
                             &c->algo_deterministic[1], &c->algo_math[1],
                             [&](cudnnConvolutionBwdDataAlgo_t algo, size_t *ws) {
                                 return cudnnGetConvolutionBackwardDataWorkspaceSize(h, c->w_desc, c->y_desc,
                                                                                     c->conv_desc[1], c->x_desc, algo,
                                                                                     ws);
                             });
        };
        /* The forward convolution of dout with the flipped filter, deterministic entries only: 1 when one
         * fits (recorded), 0 when none does, -1 on a cuDNN error. */
        auto pick_dgrad_forward = [&]() -> int {
            cudnnConvolutionFwdAlgoPerf_t df[MAX_PERF];
            if (CUDNN_SOFT(cudnnSetConvolutionMathType(c->dgrad_desc, query_math(c)), err, err_n_bytes) ||
                CUDNN_SOFT(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &n_max), err, err_n_bytes))
                return -1;
            if (n_max > MAX_PERF) n_max = MAX_PERF;
            if (find ? CUDNN_SOFT(cudnnFindConvolutionForwardAlgorithmEx(h, c->y_desc, fb.y, c->wflip_desc, fb.w,
                                                                        c->dgrad_desc, c->x_desc, fb.x, n_max, &n_got,
                                                                        df, fb.ws, fb.ws_n_bytes),
                                  err, err_n_bytes)
                     : CUDNN_SOFT(cudnnGetConvolutionForwardAlgorithm_v7(h, c->y_desc, c->wflip_desc, c->dgrad_desc,
                                                                         c->x_desc, n_max, &n_got, df),
                                  err, err_n_bytes))
                return -1;
            const int j = pick_algo(df, n_got, c->dgrad_desc, c->allow_tf32, 1, cap, &c->ws_need_n_bytes[1],
                                    &c->algo_deterministic[1], &c->algo_math[1],
                                    [&](cudnnConvolutionFwdAlgo_t algo, size_t *ws) {
                                        return cudnnGetConvolutionForwardWorkspaceSize(h, c->y_desc, c->wflip_desc,
                                                                                       c->dgrad_desc, c->x_desc, algo,
                                                                                       ws);
                                    });
            if (j < 0) return 0;
            c->algo_dgrad_fwd = df[j].algo;
            c->algo_ms[1] = find ? df[j].time : -1.0f;
            return 1;
        };
        /* 1. cuDNN's backward data: its best deterministic entry that fits, or where the forward way cannot
         *    stand in, conv_algo.h's whole rule (skipped with TOWER_CONV_DGRAD_FORWARD=1) */
        i = -1;
        if (!force_fwd) {
            if (list_bwd()) goto out;
            i = pick_bwd(c->dgrad_fwd_ok || c->deterministic_only);
        }
        /* 1b. measured (TOWER_CUDNN_FIND): the forward way instead when cuDNN timed it faster than step 1's */
        if (i >= 0 && find && c->dgrad_fwd_ok) {
            const size_t ws = c->ws_need_n_bytes[1];
            const int det = c->algo_deterministic[1];
            const cudnnMathType_t math = c->algo_math[1];
            const float native_ms = bd[i].time;
            const int got = pick_dgrad_forward();
            if (got < 0) goto out;
            if (got && c->algo_ms[1] < native_ms) {
                c->dgrad_fwd = 1;
                goto filter;
            }
            c->ws_need_n_bytes[1] = ws; /* step 1's entry stays: its fields back */
            c->algo_deterministic[1] = det;
            c->algo_math[1] = math;
        }
        /* 2. the forward convolution with the flipped filter */
        if (i < 0 && c->dgrad_fwd_ok) {
            const int got = pick_dgrad_forward();
            if (got < 0) goto out;
            if (got) {
                c->dgrad_fwd = 1;
                goto filter;
            }
        }
        /* 3. cuDNN's backward data under conv_algo.h's whole rule (a non-deterministic entry unless
         *    --deterministic), where step 1 was held to deterministic entries or skipped */
        if (i < 0 && (force_fwd || c->dgrad_fwd_ok)) {
            if (list_bwd()) goto out;
            i = pick_bwd(c->deterministic_only);
        }
        if (i < 0) goto none;
        c->algo_bwd_data = bd[i].algo;
        c->algo_ms[1] = find ? bd[i].time : -1.0f;
    }

filter:
    /* backward filter */
    if (c->wgrad_gemm) { /* im2col + cuBLAS */
        record_not_cudnn(c, 2);
        rc = 0;
        goto out;
    }
    dir = "backward filter";
    if (CUDNN_SOFT(cudnnSetConvolutionMathType(c->conv_desc[2], query_math(c)), err, err_n_bytes) ||
        CUDNN_SOFT(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &n_max), err, err_n_bytes))
        goto out;
    if (n_max > MAX_PERF) n_max = MAX_PERF;
    if (find ? CUDNN_SOFT(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, c->x_desc, fb.x, c->y_desc, fb.y,
                                                                       c->conv_desc[2], c->w_desc, fb.w, n_max, &n_got,
                                                                       bf, fb.ws, fb.ws_n_bytes),
                          err, err_n_bytes)
             : CUDNN_SOFT(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, c->x_desc, c->y_desc, c->conv_desc[2],
                                                                        c->w_desc, n_max, &n_got, bf),
                          err, err_n_bytes))
        goto out;
    i = pick_algo(bf, n_got, c->conv_desc[2], c->allow_tf32, c->deterministic_only, cap, &c->ws_need_n_bytes[2],
                  &c->algo_deterministic[2], &c->algo_math[2], [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t *ws) {
                      return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, c->x_desc, c->y_desc, c->conv_desc[2],
                                                                            c->w_desc, algo, ws);
                  });
    if (i < 0) goto none;
    c->algo_bwd_filter = bf[i].algo;
    c->algo_ms[2] = find ? bf[i].time : -1.0f;
    rc = 0;
    goto out;
none:
    snprintf(err, err_n_bytes,
             "conv2d %dx%dx%d -> %dx%dx%d (kernel %dx%d) at batch %d: cuDNN offers no usable %s%s algorithm within %zu "
             "bytes of workspace%s%s",
             c->geom.H, c->geom.W, c->geom.C_in, c->geom.OH, c->geom.OW, c->geom.C_out, c->geom.KH, c->geom.KW, c->batch,
             c->deterministic_only ? "deterministic " : "", dir, cap, c->allow_tf32 ? "" : " without TF32",
             c->deterministic_only ? " (--deterministic: run without it to accept a non-deterministic one)" : "");
out:
    if (find) find_bufs_free(&fb);
    return rc;
}

/* ---- init / batch / free ---------------------------------------------------------- */

/* x and y descriptors for batch B; checks cuDNN's output size against the
 * CPU geometry's. */
static int describe_batch(Conv2dCuda *c, int B, char *err, size_t err_n_bytes) {
    const Conv2d *g = &c->geom;
    if (CUDNN_SOFT(cudnnSetTensor4dDescriptor(c->x_desc, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, B, g->C_in, c->HP, c->WP),
                   err, err_n_bytes) ||
        CUDNN_SOFT(cudnnSetTensor4dDescriptor(c->y_desc, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, B, g->C_out, g->OH, g->OW),
                   err, err_n_bytes))
        return -1;
    int n = 0, ch = 0, h = 0, w = 0;
    if (CUDNN_SOFT(cudnnGetConvolution2dForwardOutputDim(c->conv_desc[0], c->x_desc, c->w_desc, &n, &ch, &h, &w), err,
                   err_n_bytes))
        return -1;
    if (n != B || ch != g->C_out || h != g->OH || w != g->OW) {
        snprintf(err, err_n_bytes, "conv2d: cuDNN computes an output of %dx%dx%dx%d (NCHW), TensorFlow's padding %dx%dx%dx%d",
                 n, ch, h, w, B, g->C_out, g->OH, g->OW);
        return -1;
    }
    if (c->dgrad_fwd_ok) { /* the flipped forward convolution must give back the input's shape */
        if (CUDNN_SOFT(cudnnGetConvolution2dForwardOutputDim(c->dgrad_desc, c->y_desc, c->wflip_desc, &n, &ch, &h, &w),
                       err, err_n_bytes))
            return -1;
        if (n != B || ch != g->C_in || h != g->H || w != g->W) {
            snprintf(err, err_n_bytes, "conv2d: the input gradient as a forward convolution gives %dx%dx%dx%d (NCHW), "
                     "the input is %dx%dx%dx%d", n, ch, h, w, B, g->C_in, g->H, g->W);
            return -1;
        }
    }
    c->batch = B;
    return 0;
}


/* The workspace a layer may ask cuDNN for at init, in bytes: 256 MiB, or
 * TOWER_CUDNN_WORKSPACE_MIB (1 to 65536) from the environment, for
 * measuring what a larger one buys (the scratch holding it is shared by a
 * tower's layers: the largest layer's need counts once).  -1 with one line
 * in err for a bad value. */
static int workspace_cap(size_t *cap, char *err, size_t err_n_bytes) {
    const char *e = getenv("TOWER_CUDNN_WORKSPACE_MIB");
    *cap = (size_t)256 << 20;
    if (!e || !*e) return 0;
    char *end = NULL;
    const long v = strtol(e, &end, 10);
    if (*end != '\0' || v < 1 || v > 65536) {
        snprintf(err, err_n_bytes, "TOWER_CUDNN_WORKSPACE_MIB=%.32s: expected a whole number of MiB from 1 to 65536",
                 e);
        return -1;
    }
    *cap = (size_t)v << 20;
    return 0;
}

/* conv2d_cuda_init and conv2d_cuda_init_depthwise: groups 1, or C_in (each
 * channel its own filter). */
static int init_grouped(Conv2dCuda *c, const Conv2d *geom, int groups, int max_batch, int allow_tf32,
                        int deterministic_only, int input_grad, cudnnHandle_t cudnn, char *err, size_t err_n_bytes) {
    memset(c, 0, sizeof *c);
    c->geom = *geom;
    c->groups = groups;
    c->max_batch = max_batch;
    c->allow_tf32 = allow_tf32 != 0;
    c->deterministic_only = deterministic_only != 0;
    c->input_grad = input_grad != 0;
    const Conv2d *g = &c->geom;
    if (max_batch < 1) {
        snprintf(err, err_n_bytes, "conv2d_cuda_init: max_batch must be at least 1, got %d", max_batch);
        return -1;
    }
    /* cuDNN's symmetric padding, and the explicit rest (model/conv_algo.h) */
    const int sym_h = conv_pad_split(g->H, g->OH, g->KH, g->stride_h, g->pad_top, &c->ext_top, &c->ext_bottom);
    const int sym_w = conv_pad_split(g->W, g->OW, g->KW, g->stride_w, g->pad_left, &c->ext_left, &c->ext_right);
    c->HP = g->H + c->ext_top + c->ext_bottom;
    c->WP = g->W + c->ext_left + c->ext_right;
    c->gemm_1x1 = gemm_applies(g, groups, c->HP, c->WP);
    c->wgrad_gemm = !c->gemm_1x1 && groups == 1 && !flags_env_on("TOWER_CONV_WGRAD_CUDNN");
    c->col_batch = c->wgrad_gemm ? col_batch_for(g, max_batch) : 0;
    /* The input gradient as a forward convolution (the file's header), where the geometry allows it. */
    int dpad_h = 0, dpad_w = 0;
    c->dgrad_fwd_ok = c->input_grad && groups == 1 && !c->gemm_1x1 && !flags_env_on("TOWER_CONV_DGRAD_CUDNN") &&
                      conv_dgrad_pad(g, &dpad_h, &dpad_w);
    if (CUDNN_SOFT(cudnnCreateTensorDescriptor(&c->x_desc), err, err_n_bytes) ||
        CUDNN_SOFT(cudnnCreateTensorDescriptor(&c->y_desc), err, err_n_bytes) ||
        CUDNN_SOFT(cudnnCreateFilterDescriptor(&c->w_desc), err, err_n_bytes))
        goto fail;
    for (int d = 0; d < 3; d++) {
        if (CUDNN_SOFT(cudnnCreateConvolutionDescriptor(&c->conv_desc[d]), err, err_n_bytes) ||
            CUDNN_SOFT(cudnnSetConvolution2dDescriptor(c->conv_desc[d], sym_h, sym_w, g->stride_h, g->stride_w, 1, 1,
                                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                       err, err_n_bytes) ||
            (groups > 1 && CUDNN_SOFT(cudnnSetConvolutionGroupCount(c->conv_desc[d], groups), err, err_n_bytes)))
            goto fail;
    }
    if (CUDNN_SOFT(cudnnSetFilter4dDescriptor(c->w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, g->C_out, g->C_in / groups,
                                              g->KH, g->KW),
                   err, err_n_bytes))
        goto fail;
    if (c->dgrad_fwd_ok &&
        (CUDNN_SOFT(cudnnCreateFilterDescriptor(&c->wflip_desc), err, err_n_bytes) ||
         CUDNN_SOFT(cudnnSetFilter4dDescriptor(c->wflip_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, g->C_in, g->C_out,
                                               g->KH, g->KW),
                    err, err_n_bytes) ||
         CUDNN_SOFT(cudnnCreateConvolutionDescriptor(&c->dgrad_desc), err, err_n_bytes) ||
         CUDNN_SOFT(cudnnSetConvolution2dDescriptor(c->dgrad_desc, dpad_h, dpad_w, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                                    CUDNN_DATA_FLOAT),
                    err, err_n_bytes)))
        goto fail;
    if (describe_batch(c, max_batch, err, err_n_bytes)) goto fail;
    /* At init the workspace is whatever the best algorithms need, up to 256 MiB a layer (workspace_cap). */
    size_t cap;
    if (workspace_cap(&cap, err, err_n_bytes) || choose_algos(c, cudnn, cap, err, err_n_bytes)) goto fail;
    c->workspace_n_bytes = c->ws_need_n_bytes[0];
    for (int d = 1; d < 3; d++)
        if (c->ws_need_n_bytes[d] > c->workspace_n_bytes) c->workspace_n_bytes = c->ws_need_n_bytes[d];
    return 0;
fail:
    conv2d_cuda_free(c);
    return -1;
}

extern "C" int conv2d_cuda_init(Conv2dCuda *c, const Conv2d *geom, int max_batch, int allow_tf32,
                                int deterministic_only, int input_grad, cudnnHandle_t cudnn, char *err,
                                size_t err_n_bytes) {
    return init_grouped(c, geom, 1, max_batch, allow_tf32, deterministic_only, input_grad, cudnn, err, err_n_bytes);
}

extern "C" int conv2d_cuda_init_depthwise(Conv2dCuda *c, const Depthwise *d, int max_batch, int allow_tf32,
                                          int deterministic_only, int input_grad, cudnnHandle_t cudnn, char *err,
                                          size_t err_n_bytes) {
    Conv2d g;
    memset(&g, 0, sizeof g);
    g.H = d->H;
    g.W = d->W;
    g.C_in = g.C_out = d->C;
    g.KH = d->KH;
    g.KW = d->KW;
    g.stride_h = g.stride_w = d->stride;
    g.padding = d->padding;
    g.act = ACT_NONE;
    g.OH = d->OH;
    g.OW = d->OW;
    g.pad_top = d->pad_top;
    g.pad_left = d->pad_left;
    return init_grouped(c, &g, d->C, max_batch, allow_tf32, deterministic_only, input_grad, cudnn, err, err_n_bytes);
}

extern "C" int conv2d_cuda_set_batch(Conv2dCuda *c, int B, cudnnHandle_t cudnn, char *err, size_t err_n_bytes) {
    if (B == c->batch) return 0;
    if (B < 1 || B > c->max_batch) {
        snprintf(err, err_n_bytes, "conv2d_cuda_set_batch: batch %d outside [1, %d]", B, c->max_batch);
        return -1;
    }
    if (describe_batch(c, B, err, err_n_bytes) || choose_algos(c, cudnn, c->workspace_n_bytes, err, err_n_bytes)) {
        c->batch = 0; /* forward/backward refuse until a batch is described again */
        return -1;
    }
    return 0;
}

extern "C" void conv2d_cuda_free(Conv2dCuda *c) {
    if (c->x_desc) cudnnDestroyTensorDescriptor(c->x_desc);
    if (c->y_desc) cudnnDestroyTensorDescriptor(c->y_desc);
    if (c->w_desc) cudnnDestroyFilterDescriptor(c->w_desc);
    if (c->wflip_desc) cudnnDestroyFilterDescriptor(c->wflip_desc);
    if (c->dgrad_desc) cudnnDestroyConvolutionDescriptor(c->dgrad_desc);
    for (int d = 0; d < 3; d++)
        if (c->conv_desc[d]) cudnnDestroyConvolutionDescriptor(c->conv_desc[d]);
    memset(c, 0, sizeof *c);
}

/* ---- forward / backward -------------------------------------------------------------- */

static void check_batch(const Conv2dCuda *c, int B, const char *fn) {
    if (B != c->batch || B < 1) {
        fprintf(stderr, "%s: batch %d, but the descriptors describe batch %d (call conv2d_cuda_set_batch first)\n", fn,
                B, c->batch);
        exit(2);
    }
}

extern "C" void conv2d_forward_cuda(float *out, void *scratch, const float *inp, const float *weight,
                                    const float *bias, const Conv2dCuda *c, int B, cudnnHandle_t cudnn,
                                    cublasHandle_t cublas, cudaStream_t stream) {
    check_batch(c, B, "conv2d_forward_cuda");
    const Conv2d *g = &c->geom;
    const ConvScratchLayout L = scratch_layout(c);
    char *base = (char *)scratch;
    if (c->gemm_1x1) {
        /* out (M, C_out) = x (M, C_in) . weight (C_in, C_out), row-major; in cuBLAS's column-major
         * terms out^T (C_out, M) = weight^T (C_out, C_in) . x^T (C_in, M). */
        const int M = B * g->OH * g->OW;
        const float one = 1.0f, zero = 0.0f;
        const float *x = is_strided(g) ? sample_input((float *)(base + L.xsub), inp, c, B, stream) : inp;
        CUBLAS_CHECK(cublasSgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_N, g->C_out, M, g->C_in, &one, weight, g->C_out, x,
                                 g->C_in, &zero, out, g->C_out));
        if (bias || g->act != ACT_NONE)
            bias_act_forward_cuda(out, bias, (size_t)M, g->C_out, g->act, stream);
        return;
    }
    float *w_krsc = (float *)(base + L.w_krsc);
    const int K = g->KH * g->KW * (g->C_in / c->groups);
    const float one = 1.0f, zero = 0.0f;
    transpose_cuda(w_krsc, weight, K, g->C_out, stream); /* (K, C_out) -> (C_out, K) */
    const float *x = inp;
    if (is_padded(c)) {
        float *xpad = (float *)(base + L.xpad);
        pad_input(xpad, inp, c, B, stream);
        x = xpad;
    }
    CUDNN_CHECK(cudnnConvolutionForward(cudnn, &one, c->x_desc, x, c->w_desc, w_krsc, c->conv_desc[0], c->algo_fwd,
                                        base + L.workspace, c->workspace_n_bytes, &zero, c->y_desc, out));
    if (bias || g->act != ACT_NONE)
        bias_act_forward_cuda(out, bias, (size_t)B * g->OH * g->OW, g->C_out, g->act, stream);
}

extern "C" void conv2d_backward_cuda(float *dinp, float *dweight, float *dbias, void *scratch,
                                     const float *out, const float *dout, const float *inp,
                                     const float *weight, const Conv2dCuda *c, int B, cudnnHandle_t cudnn,
                                     cublasHandle_t cublas, cudaStream_t stream) {
    check_batch(c, B, "conv2d_backward_cuda");
    if (dinp && !c->input_grad) {
        fprintf(stderr, "conv2d_backward_cuda: an input gradient was asked of a layer initialised without one "
                        "(input_grad 0 at conv2d_cuda_init)\n");
        exit(2);
    }
    const Conv2d *g = &c->geom;
    const ConvScratchLayout L = scratch_layout(c);
    char *base = (char *)scratch;
    float *w_krsc = (float *)(base + L.w_krsc), *dw_krsc = (float *)(base + L.dw_krsc);
    float *dpre = (float *)(base + L.dpre), *partials = (float *)(base + L.partials);
    void *ws = base + L.workspace;
    const int K = g->KH * g->KW * (g->C_in / c->groups);
    const size_t rows = (size_t)B * g->OH * g->OW;
    const float one = 1.0f, zero = 0.0f;
    const float *grad = dout;
    if (g->act == ACT_RELU) {
        relu_backward_cuda(dpre, out, dout, rows * g->C_out, stream);
        grad = dpre;
    }
    if (dbias) bias_grad_cuda(dbias, partials, grad, rows, g->C_out, stream);
    if (c->gemm_1x1) {
        /* Row-major: dweight (C_in, C_out) = x^T (C_in, M) . grad (M, C_out); dx (M, C_in) = grad (M, C_out) .
         * weight^T (C_out, C_in).  Column-major: dweight^T = grad^T . x, dx^T = weight . grad^T. */
        const int M = (int)rows;
        float *xsub = is_strided(g) ? (float *)(base + L.xsub) : NULL;
        const float *x = xsub ? sample_input(xsub, inp, c, B, stream) : inp;
        weight_grad_gemm(dweight, x, grad, M, g->C_in, g->C_out, 0, cublas);
        if (dinp) {
            CUBLAS_CHECK(cublasSgemm(cublas, CUBLAS_OP_T, CUBLAS_OP_N, g->C_in, M, g->C_out, &one, weight, g->C_out,
                                     grad, g->C_out, &zero, xsub ? xsub : dinp, g->C_in));
            if (xsub) {
                const size_t n = (size_t)B * g->H * g->W * g->C_in;
                scatter_strided_kernel<<<grid_for(n), 256, 0, stream>>>(dinp, xsub, n, g->H, g->W, g->C_in, g->OH,
                                                                        g->OW, g->stride_h, g->stride_w);
                CUDA_CHECK(cudaGetLastError());
            }
        }
        return;
    }
    /* Asymmetric padding: the forward's padded input again for cuDNN's filter
     * gradient (scratch is shared between layers; im2col reads the padding
     * itself), then the same buffer takes the padded input gradient. */
    float *xpad = is_padded(c) ? (float *)(base + L.xpad) : NULL;
    if (c->wgrad_gemm) {
        filter_grad_gemm(dweight, (float *)(base + L.col), inp, grad, c, B, cublas, stream);
    } else {
        if (xpad) pad_input(xpad, inp, c, B, stream);
        CUDNN_CHECK(cudnnConvolutionBackwardFilter(cudnn, &one, c->x_desc, xpad ? xpad : inp, c->y_desc, grad,
                                                   c->conv_desc[2], c->algo_bwd_filter, ws, c->workspace_n_bytes,
                                                   &zero, c->w_desc, dw_krsc));
        transpose_cuda(dweight, dw_krsc, g->C_out, K, stream); /* (C_out, K) -> (K, C_out) */
    }
    if (dinp && c->dgrad_fwd) { /* a forward convolution of the output gradient with the flipped filter */
        const size_t n = conv2d_cuda_filter_n_floats(c);
        flip_filter_kernel<<<grid_for(n), 256, 0, stream>>>(w_krsc, weight, n, g->KH, g->KW, g->C_in, g->C_out);
        CUDA_CHECK(cudaGetLastError());
        CUDNN_CHECK(cudnnConvolutionForward(cudnn, &one, c->y_desc, grad, c->wflip_desc, w_krsc, c->dgrad_desc,
                                            c->algo_dgrad_fwd, ws, c->workspace_n_bytes, &zero, c->x_desc, dinp));
    } else if (dinp) {
        transpose_cuda(w_krsc, weight, K, g->C_out, stream);
        CUDNN_CHECK(cudnnConvolutionBackwardData(cudnn, &one, c->w_desc, w_krsc, c->y_desc, grad, c->conv_desc[1],
                                                 c->algo_bwd_data, ws, c->workspace_n_bytes, &zero, c->x_desc,
                                                 xpad ? xpad : dinp));
        if (xpad) crop_input_grad(dinp, xpad, c, B, stream);
    }
}
