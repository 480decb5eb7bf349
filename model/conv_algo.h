/* conv_algo.h — which algorithm a conv layer takes: on the GPU one of
 * cuDNN's (a pure function of cuDNN's heuristics list), on the CPU, pass by
 * pass, oneDNN's convolution primitive or model/conv2d.c's loops (a pure
 * function of the shape and of the implementation oneDNN would run), so
 * that both rules are tested anywhere (tests/test_conv_algo.c).
 *
 * Where it sits: model/, plain C (no CUDA or oneDNN headers);
 * conv2d_cuda.cu turns each cudnnConvolution*AlgoPerf_t entry into a
 * ConvAlgoCandidate (asking cuDNN for its workspace with the math type it
 * would run with) and calls conv_algo_pick for each of forward, backward
 * data and backward filter; conv2d_dnnl.c asks conv_cpu_pick for each CPU
 * pass.
 * What it does not do: talk to cuDNN or oneDNN, or know cuDNN's algorithm
 * names.
 */
#ifndef TOWER_MODEL_CONV_ALGO_H
#define TOWER_MODEL_CONV_ALGO_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cuDNN's math types (cudnnMathType_t), named here so the rule below needs
 * no cuDNN header; conv2d_cuda.cu maps between the two. */
typedef enum {
    CONV_MATH_DEFAULT,                   /* CUDNN_DEFAULT_MATH: float32, TF32 allowed on Ampere+ */
    CONV_MATH_TENSOR_OP,                 /* CUDNN_TENSOR_OP_MATH: tensor cores (TF32 on float32 data) */
    CONV_MATH_TENSOR_OP_ALLOW_CONVERSION,/* CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: may convert to FP16/BF16 */
    CONV_MATH_FMA,                       /* CUDNN_FMA_MATH: float32 FMA only */
} ConvMath;

/* The math type an entry cuDNN lists with `listed` runs with, or -1 when
 * it may not run at all: without TF32 every entry runs CONV_MATH_FMA (the
 * tensor-op ones are refused by conv_algo_pick); with TF32 an entry runs
 * with its own DEFAULT, TENSOR_OP or FMA math, and an ALLOW_CONVERSION
 * entry is refused (it would let cuDNN compute in FP16/BF16). */
int conv_algo_run_math(ConvMath listed, int allow_tf32);

/* One entry of cuDNN's heuristics list (best first). */
typedef struct {
    int usable;            /* cuDNN's status was SUCCESS and its workspace could be asked */
    int tensor_op;         /* its math type uses tensor cores (TF32 on float32 data) */
    int deterministic;     /* cuDNN's determinism field says CUDNN_DETERMINISTIC */
    size_t ws_n_bytes;     /* workspace it needs, with the math type it would run with */
} ConvAlgoCandidate;

/* The index of the entry to use, or -1 when none fits:
 *   - an entry must be usable, need at most cap_n_bytes of workspace, and
 *     not be tensor-op unless allow_tf32;
 *   - the first (best) deterministic entry that fits wins;
 *   - only when none does and !deterministic_only, the first entry that fits
 *     (a non-deterministic one: run-to-run results may then differ in the
 *     last bits, docs/gpu.md);
 *   - with deterministic_only and no deterministic entry that fits: -1. */
int conv_algo_pick(const ConvAlgoCandidate *cand, int n, int allow_tf32, int deterministic_only, size_t cap_n_bytes);

/* ---- GPU: TensorFlow's padding in cuDNN's terms --------------------------------- */

/* One dimension of a convolution whose geometry pads `before` cells before
 * (layers.h: pad_top / pad_left) and whatever (out - 1) * stride + k - in
 * leaves after (TensorFlow's SAME puts an odd total's extra cell there; 0
 * when VALID leaves the last cells unused, as cuDNN's floor does).  cuDNN
 * pads symmetrically: returns the symmetric part min(before, after), and
 * writes the rest, the zero cells an explicit padded copy of the input must
 * add, to *ext_before and *ext_after (0 and 0 for a symmetric geometry).
 * Then cuDNN's output size (in + ext_before + ext_after + 2 sym - k) /
 * stride + 1 is `out` (tests/test_conv_algo.c sweeps it). */
int conv_pad_split(int in, int out, int k, int stride, int before, int *ext_before, int *ext_after);

/* One dimension of a stride-1 convolution's input gradient as a forward
 * convolution: dinp[i] = sum over r of dout[i - pad + r] * w[k - 1 - r]
 * (the output gradient zero-padded by `pad` on both sides, cross-correlated
 * with the flipped kernel), which is
 * sum over o of dout[o] * w[i - o + before].  Applies when stride is 1 and
 * TensorFlow's padding is symmetric (before == after, conv_pad_split's
 * ext parts 0) and at most k - 1: returns 1 with *pad = k - 1 - before (then
 * out + 2 pad - k + 1 == in); else 0.  conv2d_cuda.cu runs backward data
 * this way when cuDNN has no deterministic backward-data algorithm within
 * the workspace cap (docs/gpu.md); tests/test_conv_algo.c checks both sums
 * equal on every geometry of sizes 1-24, kernels 1-7. */
int conv_dgrad_as_forward(int in, int out, int k, int stride, int before, int *pad);

/* ---- CPU: oneDNN's convolution primitive or the loops, pass by pass ---------- */

typedef enum { CONV_PASS_FORWARD, CONV_PASS_BACKWARD_DATA, CONV_PASS_BACKWARD_WEIGHTS, CONV_PASS_COUNT } ConvPass;
/* CONV_CPU_WINOGRAD: oneDNN's Winograd kernels; CONV_CPU_WINOGRAD_F2: model/winograd.c's own, F(2x2, 3x3),
 * F(4x4, 3x3) and F(4x4, 5x5) (named for the first of them, as is TOWER_CONV_WINOGRAD_F2; winograd_name says
 * which runs a layer); CONV_CPU_FIRST: model/conv_first.c's direct kernels for a first layer. */
typedef enum { CONV_CPU_LOOPS, CONV_CPU_ONEDNN, CONV_CPU_WINOGRAD, CONV_CPU_WINOGRAD_F2, CONV_CPU_FIRST } ConvCpuPath;

/* What the CPU rule looks at: the layer's geometry, and the batch. */
typedef struct {
    int C_in, C_out;   /* channels in and out */
    int KH, KW;        /* kernel */
    int OH, OW;        /* output map */
    int stride_h, stride_w;
    int B;             /* images in the call */
} ConvCpuShape;

/* 1 when oneDNN's implementation string (dnnl_query_impl_info_str) names a
 * direct kernel ("brgconv:avx512_core", "jit:avx2", "jit_1x1:..."), 0 for
 * its im2col + gemm fallback ("gemm:jit") and its reference loops
 * ("ref:any"), which are never faster than model/conv2d.c's own im2col. */
int conv_cpu_impl_direct(const char *impl_info);

/* The path of one pass (the table in conv_algo.c, measured with
 * bench/bench_conv, bench/RESULTS.md): oneDNN only where the implementation
 * it would run (impl_info, as conv_cpu_impl_direct reads it) is direct and
 * a row of the table for the pass says the shape gains with it. */
ConvCpuPath conv_cpu_pick(ConvPass pass, const ConvCpuShape *s, const char *impl_info);

/* 1 when the layer's three passes should run oneDNN's Winograd kernels
 * (F(4x4, 3x3), "jit_wino_4x3", AVX-512 only; conv2d_dnnl.c falls back to
 * conv_cpu_pick's rule where oneDNN has none): a 3x3 kernel at stride 1
 * with at least 32 channels in and out, output tiles of 4x4 that waste at
 * most 35% of their cells on the map's edge, and at least 64 tiles in the
 * call.  Measured (bench/bench_conv --winograd, bench/RESULTS.md) 1.4-2.5x
 * the direct kernels there, blocked-layout reorders included; slower on
 * 2x2 maps (a tile of 16 cells for 4; 3x3 maps, 9 of 16, fall under the
 * same waste rule unmeasured), at 16 channels and on a first layer of 3,
 * and level on 7x7 maps at batch 8 (32 tiles). */
int conv_cpu_winograd(const ConvCpuShape *s);

/* 1 when pass should run model/winograd.c's own kernels (F(2x2, 3x3)
 * or F(4x4, 3x3) by the map's size, F(4x4, 5x5); conv2d_dnnl.c asks only for a geometry winograd_applies
 * accepts); avx512: this oneDNN runs AVX-512 kernels (it has Winograd
 * ones).  Stride 1: a 5x5 kernel with at least 32 channels in and out, on
 * every CPU, every pass; a 3x3 one without AVX-512 from 16 channels, every
 * pass; with it, on a 2x2 map from 64 (which oneDNN's 4x4 tiles waste),
 * and where oneDNN's Winograd would run, forward at C_in <= 128, backward
 * data at C_out <= 128, backward weights at C_in <= 256 (measured in
 * conv_algo.c). */
int conv_cpu_winograd_f2(ConvPass pass, const ConvCpuShape *s, int avx512);

/* 1 when pass should run model/conv_first.c's direct kernels (conv2d_dnnl.c asks only for a geometry
 * conv_first_applies accepts: 1 to 4 channels in, C_out a multiple of 32), at lanes channels a vector
 * (conv_cpu_lanes), where they beat what the rules above would run (measured in conv_algo.c): backward
 * weights on one channel in up to 25 taps; with 16 lanes also the forward of every layer of 64k channels
 * out, and of one channel in at 25 taps and more; never backward data. */
int conv_cpu_first(ConvPass pass, const ConvCpuShape *s, int lanes);

/* The vector width of Tower's own CPU kernels that come in two builds (model/winograd_tiles.inc's 4x4
 * tiles, model/conv_first.inc): 16 channels a vector where the CPU has x86-64-v4's AVX-512 (F, CD, BW, DQ,
 * VL: libgcc's check of CPUID and of the OS's saving of the 512-bit registers), else 8; the same bits either
 * way.  conv_cpu_set_lanes(8) keeps them at 8 (0 or 16: the CPU's choice again), for the tests' comparison
 * of the two; it returns the previous setting (0, 8 or 16).  8 wherever the build is not x86-64 GCC/clang or
 * is ThreadSanitizer's. */
int conv_cpu_lanes(void);
int conv_cpu_set_lanes(int lanes);

/* The team a CPU convolution pass runs on: the caller's n_threads (at least 1), at most OpenMP's
 * omp_get_max_threads() on the calling thread (a tower's own setting).  Every CPU path sizes its
 * per-thread scratch and splits its work by it (conv2d.c, conv2d_dnnl.c, winograd.c, conv_first.c). */
int conv_cpu_team(int n_threads);

#ifdef __cplusplus
}
#endif

#endif
