/* test_conv_algo.c — conv_algo_pick (model/conv_algo.h), the rule by which
 * a GPU conv layer takes one of cuDNN's algorithms, on hand-made heuristics
 * lists: no GPU needed, runs in every build.
 *
 * Checked: the best deterministic entry that fits wins over a better
 * non-deterministic one; without --deterministic a non-deterministic entry
 * is taken only when no deterministic one fits; with it, -1 instead;
 * tensor-op entries only with TF32; the workspace cap and unusable entries
 * are honoured; an empty list gives -1; the math type an entry runs with
 * is FMA without TF32 and never ALLOW_CONVERSION (FP16/BF16) with it.
 * The CPU table (conv_cpu_pick): oneDNN's gemm and reference fallbacks are
 * never taken; 3x3 forward, backward data from 16 input channels and
 * backward weights on maps of at most 16 cells with an AVX-512 kernel
 * (not jit:avx2's) take oneDNN, the rest the loops.  conv_cpu_winograd_f2
 * (model/winograd.c's own): 3x3 from 64 channels without AVX-512 (with
 * it on 2x2 maps), 5x5 from 32 on every CPU, stride 1 (mnist's and
 * cifar10's second convolutions yes, their first no).  conv_cpu_first
 * (model/conv_first.c's direct kernels): backward weights on one channel
 * up to 25 taps; at 16 lanes also the forward of 64k channels out and of
 * one channel at 25 taps and more; never backward data.
 * conv_pad_split (the GPU's odd SAME padding): the models' cases by hand,
 * then every geometry conv2d_init makes for sizes 1-40, kernels 1-7,
 * strides 1-3, SAME and VALID: no negative part, the symmetric part no
 * larger than either side, and cuDNN's output size on the padded copy equal
 * to TensorFlow's.
 * conv_dgrad_as_forward (the GPU's input gradient as a forward convolution
 * of the output gradient with the flipped kernel): on every geometry of
 * sizes 1-24, kernels 1-7, strides 1-2, SAME and VALID, where it applies
 * (stride 1, symmetric padding) the flipped forward sum equals the input
 * gradient's definition on integer data, exactly; it applies to every
 * stride-1 odd-kernel geometry and to none with stride 2.
 */
#include <stdio.h>

#include "model/conv_algo.h"
#include "model/layers.h"

static int failures;

static void expect(const char *what, int got, int want) {
    printf("  %-72s %2d (want %2d)  %s\n", what, got, want, got == want ? "ok" : "FAIL");
    failures += got != want;
}

int main(void) {
    /* {usable, tensor_op, deterministic, ws_n_bytes}, best first, as cuDNN's _v7 heuristics list them. */
    const ConvAlgoCandidate bwd_filter[] = {
        {1, 0, 0, 0},        /* ALGO_0: atomics */
        {1, 0, 0, 1 << 20},  /* ALGO_3: atomics */
        {1, 0, 1, 4 << 20},  /* ALGO_1: deterministic, more workspace */
    };
    expect("deterministic preferred over a better non-deterministic entry", conv_algo_pick(bwd_filter, 3, 0, 0, 64 << 20), 2);
    expect("--deterministic: the deterministic entry", conv_algo_pick(bwd_filter, 3, 0, 1, 64 << 20), 2);
    expect("no deterministic entry fits the cap: the best non-deterministic one", conv_algo_pick(bwd_filter, 3, 0, 0, 2 << 20), 0);
    expect("--deterministic and none fits the cap: refused", conv_algo_pick(bwd_filter, 3, 0, 1, 2 << 20), -1);

    const ConvAlgoCandidate tf32[] = {
        {1, 1, 1, 0},  /* tensor-op (TF32) */
        {0, 0, 1, 0},  /* status not SUCCESS */
        {1, 0, 1, 8},  /* FMA */
    };
    expect("no TF32: the tensor-op entry is skipped", conv_algo_pick(tf32, 3, 0, 1, 64), 2);
    expect("TF32 allowed: the tensor-op entry", conv_algo_pick(tf32, 3, 1, 1, 64), 0);
    expect("no TF32, cap below the FMA entry's workspace: none", conv_algo_pick(tf32, 3, 0, 0, 4), -1);

    const ConvAlgoCandidate nondet_only[] = {{1, 0, 0, 0}, {0, 0, 1, 0}};
    expect("only a non-deterministic entry usable: taken without --deterministic", conv_algo_pick(nondet_only, 2, 0, 0, 0), 0);
    expect("only a non-deterministic entry usable: refused with --deterministic", conv_algo_pick(nondet_only, 2, 0, 1, 0), -1);
    expect("empty list", conv_algo_pick(nondet_only, 0, 1, 0, 1 << 30), -1);
    expect("math without TF32: FMA, whatever cuDNN lists", conv_algo_run_math(CONV_MATH_TENSOR_OP, 0), CONV_MATH_FMA);
    expect("math with TF32: DEFAULT stays DEFAULT", conv_algo_run_math(CONV_MATH_DEFAULT, 1), CONV_MATH_DEFAULT);
    expect("math with TF32: TENSOR_OP stays TENSOR_OP", conv_algo_run_math(CONV_MATH_TENSOR_OP, 1), CONV_MATH_TENSOR_OP);
    expect("math with TF32: ALLOW_CONVERSION (FP16/BF16) refused",
           conv_algo_run_math(CONV_MATH_TENSOR_OP_ALLOW_CONVERSION, 1), -1);
    /* The CPU table (conv_algo.c): oneDNN only with a direct kernel, per pass. */
    const ConvCpuShape vgg_4x4 = {256, 512, 3, 3, 4, 4, 1, 1, 64}, vgg_16x16 = {64, 128, 3, 3, 16, 16, 1, 1, 64};
    const ConvCpuShape first = {3, 64, 3, 3, 32, 32, 1, 1, 64}, one_by_one = {64, 256, 1, 1, 8, 8, 1, 1, 64};
    expect("cpu: gemm fallback is not direct", conv_cpu_impl_direct("x64:gemm:jit"), 0);
    expect("cpu: reference loops are not direct", conv_cpu_impl_direct("ref:any"), 0);
    expect("cpu: brgconv is direct", conv_cpu_impl_direct("brgconv:avx512_core"), 1);
    expect("cpu: jit:avx2 is direct", conv_cpu_impl_direct("jit:avx2"), 1);
    expect("cpu: no implementation string", conv_cpu_impl_direct(""), 0);
    const char *brg = "brgconv:avx512_core", *jit512 = "jit:avx512_core", *avx2 = "jit:avx2";
    expect("cpu: no direct kernel: loops", conv_cpu_pick(CONV_PASS_FORWARD, &vgg_4x4, "x64:gemm:jit"), CONV_CPU_LOOPS);
    expect("cpu: jit:avx2 3x3 forward: oneDNN", conv_cpu_pick(CONV_PASS_FORWARD, &vgg_4x4, avx2), CONV_CPU_ONEDNN);
    expect("cpu: jit:avx2 backward weights on 4x4: loops", conv_cpu_pick(CONV_PASS_BACKWARD_WEIGHTS, &vgg_4x4, avx2), CONV_CPU_LOOPS);
    expect("cpu: 3x3 forward: oneDNN", conv_cpu_pick(CONV_PASS_FORWARD, &vgg_16x16, brg), CONV_CPU_ONEDNN);
    expect("cpu: 1x1 forward: loops", conv_cpu_pick(CONV_PASS_FORWARD, &one_by_one, brg), CONV_CPU_LOOPS);
    expect("cpu: backward data at 64 channels: oneDNN", conv_cpu_pick(CONV_PASS_BACKWARD_DATA, &vgg_16x16, avx2), CONV_CPU_ONEDNN);
    expect("cpu: backward data at 3 channels: loops", conv_cpu_pick(CONV_PASS_BACKWARD_DATA, &first, jit512), CONV_CPU_LOOPS);
    expect("cpu: backward weights on 4x4: oneDNN", conv_cpu_pick(CONV_PASS_BACKWARD_WEIGHTS, &vgg_4x4, jit512), CONV_CPU_ONEDNN);
    expect("cpu: backward weights on 16x16: loops", conv_cpu_pick(CONV_PASS_BACKWARD_WEIGHTS, &vgg_16x16, jit512), CONV_CPU_LOOPS);
    expect("cpu: backward weights 1x1 on 8x8: loops", conv_cpu_pick(CONV_PASS_BACKWARD_WEIGHTS, &one_by_one, jit512), CONV_CPU_LOOPS);
    /* At most 16 output channels: oneDNN's AVX-512 backward weights at any map (resnet20's 32x32 layers). */
    const ConvCpuShape res_32x32 = {16, 16, 3, 3, 32, 32, 1, 1, 64}, res_first = {3, 16, 3, 3, 32, 32, 1, 1, 64};
    const ConvCpuShape c_out_32 = {16, 32, 3, 3, 32, 32, 1, 1, 64};
    expect("cpu: backward weights 16 -> 16 on 32x32: oneDNN", conv_cpu_pick(CONV_PASS_BACKWARD_WEIGHTS, &res_32x32, jit512), CONV_CPU_ONEDNN);
    expect("cpu: backward weights 3 -> 16 on 32x32: oneDNN", conv_cpu_pick(CONV_PASS_BACKWARD_WEIGHTS, &res_first, jit512), CONV_CPU_ONEDNN);
    expect("cpu: backward weights 16 -> 32 on 32x32: loops", conv_cpu_pick(CONV_PASS_BACKWARD_WEIGHTS, &c_out_32, jit512), CONV_CPU_LOOPS);
    expect("cpu: jit:avx2 backward weights 16 -> 16: loops", conv_cpu_pick(CONV_PASS_BACKWARD_WEIGHTS, &res_32x32, avx2), CONV_CPU_LOOPS);
    expect("cpu: backward weights 1x1 to 16 channels: loops", conv_cpu_pick(CONV_PASS_BACKWARD_WEIGHTS, &(ConvCpuShape){64, 16, 1, 1, 32, 32, 1, 1, 64}, jit512), CONV_CPU_LOOPS);
    /* 1x1 kernels: the loops' one sgemm over the batch beats oneDNN's convolution in both backward passes. */
    const ConvCpuShape one_by_one_2x2 = {1024, 256, 1, 1, 2, 2, 1, 1, 64};
    expect("cpu: backward data 1x1 at 1024 channels: loops", conv_cpu_pick(CONV_PASS_BACKWARD_DATA, &one_by_one_2x2, jit512), CONV_CPU_LOOPS);
    expect("cpu: backward weights 1x1 on 2x2: loops", conv_cpu_pick(CONV_PASS_BACKWARD_WEIGHTS, &one_by_one_2x2, jit512), CONV_CPU_LOOPS);
    /* Winograd F(4x4, 3x3): 3x3 at stride 1, >= 32 channels, tiles that waste <= 35%, >= 64 tiles a call. */
    expect("cpu winograd: vgg11 4x4 at batch 64", conv_cpu_winograd(&vgg_4x4), 1);
    expect("cpu winograd: vgg11 16x16 at batch 64", conv_cpu_winograd(&vgg_16x16), 1);
    expect("cpu winograd: a first layer of 3 channels", conv_cpu_winograd(&first), 0);
    expect("cpu winograd: 1x1", conv_cpu_winograd(&one_by_one), 0);
    const ConvCpuShape w2x2 = {512, 512, 3, 3, 2, 2, 1, 1, 64}, w3x3 = {256, 256, 3, 3, 3, 3, 1, 1, 64};
    const ConvCpuShape w7_b8 = {512, 512, 3, 3, 7, 7, 1, 1, 8}, w7_b16 = {512, 512, 3, 3, 7, 7, 1, 1, 16};
    const ConvCpuShape w14_b8 = {512, 512, 3, 3, 14, 14, 1, 1, 8}, c16 = {16, 16, 3, 3, 32, 32, 1, 1, 64};
    const ConvCpuShape strided = {64, 64, 3, 3, 8, 8, 2, 2, 64}, c32_out16 = {32, 16, 3, 3, 16, 16, 1, 1, 64};
    const ConvCpuShape w4_b3 = {256, 512, 3, 3, 4, 4, 1, 1, 63}, w10 = {64, 64, 3, 3, 10, 10, 1, 1, 64};
    expect("cpu winograd: 2x2 map (a tile of 16 cells for 4)", conv_cpu_winograd(&w2x2), 0);
    expect("cpu winograd: 3x3 map", conv_cpu_winograd(&w3x3), 0);
    expect("cpu winograd: 10x10 map (44% waste)", conv_cpu_winograd(&w10), 0);
    expect("cpu winograd: 7x7 at batch 8 (32 tiles)", conv_cpu_winograd(&w7_b8), 0);
    expect("cpu winograd: 7x7 at batch 16 (64 tiles)", conv_cpu_winograd(&w7_b16), 1);
    expect("cpu winograd: 14x14 at batch 8", conv_cpu_winograd(&w14_b8), 1);
    expect("cpu winograd: 16 channels", conv_cpu_winograd(&c16), 0);
    expect("cpu winograd: 16 channels out", conv_cpu_winograd(&c32_out16), 0);
    expect("cpu winograd: stride 2", conv_cpu_winograd(&strided), 0);
    expect("cpu winograd: 63 tiles", conv_cpu_winograd(&w4_b3), 0);
    /* model/winograd.c's own: 3x3 from 16 channels in and out without AVX-512; with it, on 2x2 maps from 64
     * and, where oneDNN's Winograd kernels would run (conv_cpu_winograd), the passes with at most 128
     * channels into their products (forward C_in, backward data C_out) and backward weights up to 256 in;
     * F(4x4, 5x5) from 32 on every CPU; stride 1. */
    const ConvCpuShape m2 = {32, 64, 5, 5, 14, 14, 1, 1, 128}, m1 = {1, 32, 5, 5, 28, 28, 1, 1, 128};
    const ConvCpuShape c2 = {64, 64, 5, 5, 12, 12, 1, 1, 128}, c1 = {3, 64, 5, 5, 24, 24, 1, 1, 128};
    const ConvCpuShape f5_16 = {16, 64, 5, 5, 12, 12, 1, 1, 128}, f5_s2 = {64, 64, 5, 5, 6, 6, 2, 2, 128};
    const ConvCpuShape f7 = {64, 64, 7, 7, 12, 12, 1, 1, 128}, f35 = {64, 64, 3, 5, 12, 12, 1, 1, 128};
    const ConvCpuShape f3_64 = {64, 64, 3, 3, 8, 8, 1, 1, 64}, f3_32 = {32, 64, 3, 3, 16, 16, 1, 1, 64};
    const ConvCpuShape f3_2x2 = {512, 512, 3, 3, 2, 2, 1, 1, 64}, f3_1x1 = {512, 512, 3, 3, 1, 1, 1, 1, 64};
    const ConvCpuShape f3_2x2_c32 = {32, 32, 3, 3, 2, 2, 1, 1, 64};
    const ConvCpuShape r32_b4 = {32, 32, 3, 3, 16, 16, 1, 1, 4}, r32_b3 = {32, 32, 3, 3, 16, 16, 1, 1, 3};
    const ConvCpuShape v512 = {512, 512, 3, 3, 4, 4, 1, 1, 64}, r16 = {16, 16, 3, 3, 32, 32, 1, 1, 64};
    const ConvCpuShape r8 = {8, 8, 3, 3, 32, 32, 1, 1, 64}, first16 = {3, 16, 3, 3, 32, 32, 1, 1, 64};
    const ConvCpuShape v128_256 = {128, 256, 3, 3, 8, 8, 1, 1, 64}, v256_256 = {256, 256, 3, 3, 8, 8, 1, 1, 64};
    for (int avx512 = 0; avx512 <= 1; avx512++)
        for (int p = 0; p < CONV_PASS_COUNT; p++) {
            expect("cpu own winograd: mnist's conv2 (5x5, 32 -> 64)", conv_cpu_winograd_f2((ConvPass)p, &m2, avx512), 1);
            expect("cpu own winograd: cifar10's conv2 (5x5, 64 -> 64)", conv_cpu_winograd_f2((ConvPass)p, &c2, avx512), 1);
            expect("cpu own winograd: mnist's conv1 (1 channel in)", conv_cpu_winograd_f2((ConvPass)p, &m1, avx512), 0);
            expect("cpu own winograd: cifar10's conv1 (3 channels in)", conv_cpu_winograd_f2((ConvPass)p, &c1, avx512), 0);
            expect("cpu own winograd: 5x5 with 16 channels in", conv_cpu_winograd_f2((ConvPass)p, &f5_16, avx512), 0);
            expect("cpu own winograd: 5x5 stride 2", conv_cpu_winograd_f2((ConvPass)p, &f5_s2, avx512), 0);
            expect("cpu own winograd: 7x7", conv_cpu_winograd_f2((ConvPass)p, &f7, avx512), 0);
            expect("cpu own winograd: 3x5", conv_cpu_winograd_f2((ConvPass)p, &f35, avx512), 0);
            expect("cpu own winograd: 3x3 at 64 channels", conv_cpu_winograd_f2((ConvPass)p, &f3_64, avx512), 1);
            expect("cpu own winograd: 3x3 at 32 channels in", conv_cpu_winograd_f2((ConvPass)p, &f3_32, avx512), 1);
            expect("cpu own winograd: vgg11's 2x2 layer", conv_cpu_winograd_f2((ConvPass)p, &f3_2x2, avx512), 1);
            expect("cpu own winograd: 3x3 on a 1x1 map", conv_cpu_winograd_f2((ConvPass)p, &f3_1x1, avx512), !avx512);
            expect("cpu own winograd: 2x2 map at 32 channels", conv_cpu_winograd_f2((ConvPass)p, &f3_2x2_c32, avx512), !avx512);
            expect("cpu own winograd: 32 -> 32 on 16x16, 64 tiles", conv_cpu_winograd_f2((ConvPass)p, &r32_b4, avx512),
                   1);
            expect("cpu own winograd: 32 -> 32 on 16x16, 48 tiles (AVX-512: oneDNN's direct kernels)",
                   conv_cpu_winograd_f2((ConvPass)p, &r32_b3, avx512), !avx512);
            expect("cpu own winograd: 512 -> 512 on 4x4", conv_cpu_winograd_f2((ConvPass)p, &v512, avx512), !avx512);
            expect("cpu own winograd: 16 -> 16 on 32x32", conv_cpu_winograd_f2((ConvPass)p, &r16, avx512), !avx512);
            expect("cpu own winograd: 8 -> 8 on 32x32", conv_cpu_winograd_f2((ConvPass)p, &r8, avx512), 0);
            expect("cpu own winograd: 3 -> 16 on 32x32", conv_cpu_winograd_f2((ConvPass)p, &first16, avx512), 0);
        }
    /* With AVX-512, pass by pass: 128 -> 256 ours forward and backward weights, 256 -> 256 backward weights only. */
    const int want_128_256[CONV_PASS_COUNT] = {1, 0, 1}, want_256_256[CONV_PASS_COUNT] = {0, 0, 1};
    for (int p = 0; p < CONV_PASS_COUNT; p++) {
        expect("cpu own winograd, AVX-512: 128 -> 256 on 8x8", conv_cpu_winograd_f2((ConvPass)p, &v128_256, 1),
               want_128_256[p]);
        expect("cpu own winograd, AVX-512: 256 -> 256 on 8x8", conv_cpu_winograd_f2((ConvPass)p, &v256_256, 1),
               want_256_256[p]);
        expect("cpu own winograd, AVX2: 256 -> 256 on 8x8", conv_cpu_winograd_f2((ConvPass)p, &v256_256, 0), 1);
    }
    /* model/conv_first.c's direct kernels, by width: backward weights on one channel in up to 25 taps at either;
     * at 16 lanes also the forward of 64k channels out and of one channel at 25 taps and more; never backward
     * data. */
    const ConvCpuShape mob1 = {1, 32, 3, 3, 16, 16, 2, 2, 64}, vgg1 = {1, 64, 3, 3, 32, 32, 1, 1, 64};
    const ConvCpuShape r50_1 = {1, 64, 7, 7, 112, 112, 2, 2, 8}, vgg3 = {3, 64, 3, 3, 32, 32, 1, 1, 64};
    const struct {
        const char *what;
        const ConvCpuShape *s;
        int want16[CONV_PASS_COUNT], want8[CONV_PASS_COUNT];
    } firsts[] = {
        {"mnist's conv1 (5x5, 1 -> 32)", &m1, {1, 0, 1}, {0, 0, 1}},
        {"3x3 stride 2, 1 -> 32", &mob1, {0, 0, 1}, {0, 0, 1}},
        {"3x3, 1 -> 64", &vgg1, {1, 0, 1}, {0, 0, 1}},
        {"7x7 stride 2, 1 -> 64", &r50_1, {1, 0, 0}, {0, 0, 0}},
        {"cifar10's conv1 (5x5, 3 -> 64)", &c1, {1, 0, 0}, {0, 0, 0}},
        {"vgg11's block1_conv1 (3x3, 3 -> 64)", &vgg3, {1, 0, 0}, {0, 0, 0}},
        {"3 -> 16 on 32x32", &first16, {0, 0, 0}, {0, 0, 0}},
        {"3x3, 64 -> 64", &f3_64, {0, 0, 0}, {0, 0, 0}},
    };
    for (size_t i = 0; i < sizeof firsts / sizeof firsts[0]; i++)
        for (int p = 0; p < CONV_PASS_COUNT; p++) {
            char what[160];
            snprintf(what, sizeof what, "cpu first layer, 16 lanes: %s, pass %d", firsts[i].what, p);
            expect(what, conv_cpu_first((ConvPass)p, firsts[i].s, 16), firsts[i].want16[p]);
            snprintf(what, sizeof what, "cpu first layer, 8 lanes: %s, pass %d", firsts[i].what, p);
            expect(what, conv_cpu_first((ConvPass)p, firsts[i].s, 8), firsts[i].want8[p]);
        }
    /* TensorFlow's padding in cuDNN's terms: {in, k, stride, SAME?} -> sym, ext_before, ext_after. */
    static const struct { int in, k, s, same, sym, eb, ea; const char *what; } pads[] = {
        {32, 3, 2, 1, 0, 0, 1, "resnet20's 3x3 stride 2 on 32: 0 before, 1 after"},
        {96, 3, 2, 1, 0, 0, 1, "mobilenet_v2's Conv1 on 96"},
        {28, 5, 1, 1, 2, 0, 0, "mnist's 5x5 stride 1: 2 + 2, symmetric"},
        {10, 5, 2, 1, 1, 0, 1, "total 3: 1 before, 2 after"},
        {9, 3, 2, 1, 1, 0, 0, "odd map, stride 2: 1 + 1"},
        {10, 3, 2, 0, 0, 0, 0, "VALID leaving the last row unused"},
    };
    for (size_t i = 0; i < sizeof pads / sizeof pads[0]; i++) {
        Conv2d g;
        int eb = -1, ea = -1, sym = -1;
        if (conv2d_init(&g, pads[i].in, pads[i].in, 1, pads[i].k, pads[i].k, 1, pads[i].s, pads[i].s,
                        pads[i].same ? PAD_SAME : PAD_VALID, ACT_NONE) == 0)
            sym = conv_pad_split(g.H, g.OH, g.KH, g.stride_h, g.pad_top, &eb, &ea);
        char what[160];
        snprintf(what, sizeof what, "pad: %s (sym, before, after)", pads[i].what);
        expect(what, sym * 100 + eb * 10 + ea, pads[i].sym * 100 + pads[i].eb * 10 + pads[i].ea);
    }
    int n_geoms = 0, n_bad = 0;
    for (int in = 1; in <= 40; in++)
        for (int k = 1; k <= 7; k++)
            for (int s = 1; s <= 3; s++)
                for (int same = 0; same < 2; same++) {
                    Conv2d g;
                    if (conv2d_init(&g, in, in, 1, k, k, 1, s, s, same ? PAD_SAME : PAD_VALID, ACT_NONE)) continue;
                    int eb, ea;
                    const int sym = conv_pad_split(g.H, g.OH, g.KH, g.stride_h, g.pad_top, &eb, &ea);
                    const int cudnn_out = (in + eb + ea + 2 * sym - k) / s + 1;
                    n_geoms++;
                    if (sym < 0 || eb < 0 || ea < 0 || sym > g.pad_top || cudnn_out != g.OH || sym + eb != g.pad_top) {
                        if (n_bad++ < 5)
                            printf("  pad: in %d, k %d, stride %d, %s: sym %d, before %d, after %d; cuDNN's out %d, TensorFlow's %d: FAIL\n",
                                   in, k, s, same ? "SAME" : "VALID", sym, eb, ea, cudnn_out, g.OH);
                    }
                }
    printf("  pad: %d geometries, cuDNN's output on the padded copy equals TensorFlow's in all but %d  %s\n", n_geoms,
           n_bad, n_bad || n_geoms < 500 ? "FAIL" : "ok");
    failures += n_bad != 0 || n_geoms < 500;
    /* The input gradient as a forward convolution, one dimension (the two are independent). */
    int n_applied = 0, n_wrong = 0, n_missed = 0;
    for (int in = 1; in <= 24; in++)
        for (int k = 1; k <= 7; k++)
            for (int s = 1; s <= 2; s++)
                for (int same = 0; same < 2; same++) {
                    Conv2d g;
                    if (conv2d_init(&g, in, in, 1, k, k, 1, s, s, same ? PAD_SAME : PAD_VALID, ACT_NONE)) continue;
                    int pad = -1;
                    const int applies = conv_dgrad_as_forward(g.H, g.OH, g.KH, g.stride_h, g.pad_top, &pad);
                    if (!applies) {
                        n_missed += s == 1 && k % 2 == 1; /* stride 1, odd kernel: always symmetric */
                        continue;
                    }
                    n_applied++;
                    if (s != 1) { n_wrong++; continue; }
                    long w[7], dout[40], want[40], got[40];
                    for (int r = 0; r < k; r++) w[r] = 3 * r - 5;
                    for (int o = 0; o < g.OH; o++) dout[o] = (o * 7) % 11 - 5;
                    for (int i = 0; i < in; i++) { /* the definition: every output o whose window holds i */
                        want[i] = 0;
                        for (int o = 0; o < g.OH; o++) {
                            const int r = i - o * s + g.pad_top;
                            if (r >= 0 && r < k) want[i] += dout[o] * w[r];
                        }
                        got[i] = 0; /* the flipped forward convolution with `pad` zeros each side */
                        for (int r = 0; r < k; r++) {
                            const int o = i - pad + r;
                            if (o >= 0 && o < g.OH) got[i] += dout[o] * w[k - 1 - r];
                        }
                        if (got[i] != want[i]) {
                            if (n_wrong++ < 5)
                                printf("  dgrad as forward: in %d, k %d, %s, pad %d: dinp[%d] %ld, want %ld: FAIL\n",
                                       in, k, same ? "SAME" : "VALID", pad, i, got[i], want[i]);
                            break;
                        }
                    }
                }
    printf("  dgrad as forward: applies to %d geometries, the sums equal in all but %d, %d stride-1 odd kernels "
           "missed  %s\n", n_applied, n_wrong, n_missed, n_wrong || n_missed || n_applied < 150 ? "FAIL" : "ok");
    failures += n_wrong != 0 || n_missed != 0 || n_applied < 150;
    printf("%s\n", failures ? "conv_algo FAILED" : "conv_algo: every case as expected");
    return failures ? 1 : 0;
}
