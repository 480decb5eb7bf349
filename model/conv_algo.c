/* conv_algo.c — conv_algo_pick (conv_algo.h): the rule by which a GPU conv
 * layer takes one of cuDNN's convolution algorithms; conv_cpu_pick: the
 * table by which each pass of a CPU conv layer takes oneDNN's convolution
 * primitive or model/conv2d.c's loops, conv_cpu_winograd where oneDNN's
 * own Winograd kernels take a 3x3 layer, conv_cpu_winograd_f2 which
 * passes model/winograd.c runs instead, conv_cpu_first which passes of a
 * first layer model/conv_first.c runs, conv_cpu_lanes, the vector
 * width of those two, and conv_cpu_team, the team every CPU path runs on.  Plain C, built into tower_model in
 * every build so that tests/test_conv_algo.c runs anywhere.
 * What it does not do: talk to cuDNN (conv2d_cuda.cu does) or oneDNN
 * (conv2d_dnnl.c does).
 */
#include "model/conv_algo.h"

#include <omp.h>
#include <string.h>

int conv_algo_run_math(ConvMath listed, int allow_tf32) {
    if (!allow_tf32) return CONV_MATH_FMA;
    if (listed == CONV_MATH_DEFAULT || listed == CONV_MATH_TENSOR_OP || listed == CONV_MATH_FMA) return (int)listed;
    return -1;
}

static int fits(const ConvAlgoCandidate *c, int allow_tf32, size_t cap_n_bytes) {
    return c->usable && c->ws_n_bytes <= cap_n_bytes && (allow_tf32 || !c->tensor_op);
}

int conv_algo_pick(const ConvAlgoCandidate *cand, int n, int allow_tf32, int deterministic_only, size_t cap_n_bytes) {
    for (int i = 0; i < n; i++)
        if (cand[i].deterministic && fits(&cand[i], allow_tf32, cap_n_bytes)) return i;
    if (deterministic_only) return -1;
    for (int i = 0; i < n; i++)
        if (fits(&cand[i], allow_tf32, cap_n_bytes)) return i;
    return -1;
}

/* ---- CPU ---------------------------------------------------------------------- */

int conv_pad_split(int in, int out, int k, int stride, int before, int *ext_before, int *ext_after) {
    int after = (out - 1) * stride + k - in - before;
    if (after < 0) after = 0;
    const int sym = before < after ? before : after;
    *ext_before = before - sym;
    *ext_after = after - sym;
    return sym;
}

int conv_dgrad_as_forward(int in, int out, int k, int stride, int before, int *pad) {
    int ext_before, ext_after;
    const int sym = conv_pad_split(in, out, k, stride, before, &ext_before, &ext_after);
    if (stride != 1 || ext_before != 0 || ext_after != 0 || sym != before || before > k - 1) return 0;
    if (out + 2 * (k - 1 - before) - k + 1 != in) return 0;
    *pad = k - 1 - before;
    return 1;
}

int conv_cpu_impl_direct(const char *impl_info) {
    if (!impl_info || !*impl_info) return 0;
    return strstr(impl_info, "gemm") == NULL && strstr(impl_info, "ref") == NULL;
}

/* Where oneDNN's direct kernels beat the loops, pass by pass (bench/bench_conv
 * on vgg11's 3x3 and resnet50's convolutions at batch 64, one thread, CPU
 * time, on a 2-core AMD EPYC with AVX-512, and with ONEDNN_MAX_CPU_ISA=AVX2
 * for an AVX2 machine; bench/RESULTS.md, 2026-11-26): a row says oneDNN for
 * the pass when the implementation's name contains impl_needs ("" for any
 * direct kernel), the kernel has at least min_kernel_cells cells, the input
 * at least min_C_in channels, the output map at most max_out_cells cells and
 * the output at most max_C_out channels.
 *   - forward: brgconv (AVX-512) 1.1-1.7x the loops on every 3x3 shape
 *     (the loops' per-image im2col copies the input 9 times), jit:avx2 level
 *     or better; on 1x1 kernels a tie (0.8-1.3x), so the loops keep them.
 *   - backward data: 1.2-8.7x at C_in >= 64 (the loops' col2im and
 *     per-image GEMMs of 4-16 rows starve at 4x4 and 2x2 maps); at C_in 3
 *     (a first layer, whose input gradient nobody wants) 4x slower.
 *   - backward weights: with AVX-512, 1.1-1.6x at maps of 4x4 and less, a
 *     tie at 8x8, slower at 16x16 and 32x32 (vgg11's 3 -> 64 at 32x32 1.7x
 *     slower, its 64 -> 128 at 16x16 a tie; bench_conv's ReLU rows before
 *     2026-11-28 carried a slow mask: bench/RESULTS.md); jit:avx2's is slower
 *     than the loops everywhere measured.  Except where the output has at
 *     most 16 channels (one AVX-512 register's block), at any map: on a
 *     2-core Zen 5, 2 threads, batch 64, bench_conv --wei_any with extra
 *     shapes (bench/RESULTS.md, 2026-11-28), 1.7-2.9x the loops at 16 -> 16
 *     from 8x8 to 64x64 (resnet20's 32x32 layers 1.7x), 32 -> 16 1.8x,
 *     8 -> 8 1.5-1.6x, a first layer 3 -> 16 2.0x (2.3x at stride 2); at
 *     24 output channels 1.2x, at 32 0.5-0.8x (vgg11's 64: 0.6x and 1.0x).
 *   - 1x1 kernels stay on the loops in every pass: at stride 1 the loops
 *     are one sgemm over the batch (model/conv2d.c): against oneDNN's
 *     convolution on resnet50's 1x1 shapes 1.0-1.4x in backward data,
 *     1.1-3.1x in backward weights
 *     (bench/RESULTS.md, 2026-11-26, "ResNet-50's 1x1 convolutions"); at
 *     stride 2 a tie in backward data, 2x in backward weights. */
static const struct {
    ConvPass pass;
    const char *impl_needs;
    int min_kernel_cells, min_C_in, max_out_cells, max_C_out;
} cpu_rows[] = {
    {CONV_PASS_FORWARD, "", 2, 1, 1 << 30, 1 << 30},
    {CONV_PASS_BACKWARD_DATA, "", 2, 16, 1 << 30, 1 << 30},
    {CONV_PASS_BACKWARD_WEIGHTS, "avx512", 2, 1, 16, 1 << 30},
    {CONV_PASS_BACKWARD_WEIGHTS, "avx512", 2, 1, 1 << 30, 16},
};

int conv_cpu_winograd(const ConvCpuShape *s) {
    if (s->KH != 3 || s->KW != 3 || s->stride_h != 1 || s->stride_w != 1 || s->C_in < 32 || s->C_out < 32) return 0;
    const long tiles_h = (s->OH + 3) / 4, tiles_w = (s->OW + 3) / 4;
    const long tile_cells = 16 * tiles_h * tiles_w, cells = (long)s->OH * s->OW;
    return cells > 0 && tile_cells * 100 <= cells * 135 && (long)s->B * tiles_h * tiles_w >= 64;
}

/* Which passes run model/winograd.c's own Winograd, by kernel and ISA (stride 1, square kernels; the figures are
 * bench_conv's per pass and bench_model's step on a 2-core AMD EPYC Zen 5, 2 threads, 2026-11-27/28, with
 * ONEDNN_MAX_CPU_ISA=AVX2 for a CPU without AVX-512: bench/RESULTS.md; docs/models.md names each layer's path):
 *   - 5x5 (F(4x4, 5x5); oneDNN has no 5x5 Winograd on any CPU): every pass from 32 channels in and out.  mnist's
 *     and cifar10's steps 1.21x and 1.37x the F(2x2, 5x5) it replaced, itself 1.19x and 1.28x the table without
 *     it.  First layers (1 and 3 channels in) stay off it (1.5-1.8x slower forward, 5-6x slower backward
 *     weights with ours; conv_cpu_first below takes one channel's); 16 channels are not measured.
 *   - 3x3 without AVX-512 (oneDNN's Winograd kernels are AVX-512 only): every pass from 16 channels in and out
 *     (F(4x4, 3x3), F(2x2, 3x3) on maps of 1 or 2 a side).  Against jit:avx2's forward and backward data and the
 *     loops' backward weights, resnet20's 16 -> 16 layers 1.7x, 1.3x, 1.5x and its 32 -> 32 layers 1.9x, 1.9x,
 *     2.1x; 8 -> 8 and first layers slower.  resnet20's step 1.28x.  Not measured on a real AVX2 machine.
 *   - 3x3 with AVX-512 on 2x2 maps from 64 channels, where oneDNN's 4x4 tiles waste three quarters: F(2x2, 3x3)
 *     one tile an image, against oneDNN's direct kernels on vgg11's 2x2 512 -> 512 layer 2.1x forward, 1.5x
 *     backward data, 2.8x backward weights; vgg11's step 1.18x, vgg16's 1.11x.
 *   - 3x3 with AVX-512 where oneDNN's Winograd would run (conv_cpu_winograd): ours for the passes whose products
 *     take few channels, forward at C_in <= 128, backward data at C_out <= 128 (its products take the output's
 *     channels), backward weights at C_in <= 256: ours 1.05-1.5x there, oneDNN's 1.03-2.1x beyond (its figures
 *     with the reorders to and from its blocked layout that the step runs).  A layer may run both Winograds.
 *     vgg11's step 1.06x, vgg16's 1.06-1.12x, resnet20's 1.03x, resnet50's level.
 *   - 3x3 elsewhere with AVX-512 (oneDNN's direct kernels): ours off; F(4x4, 3x3) on resnet20's 16- and
 *     32-channel layers made its step slower, F(2x2, 3x3) on resnet50's 7x7 maps at batch 8 was level.
 * Every threshold is one machine's measurement; bench_conv (--wei_any, --winograd) measures them again. */
int conv_cpu_winograd_f2(ConvPass pass, const ConvCpuShape *s, int avx512) {
    if (s->stride_h != 1 || s->stride_w != 1 || s->KH != s->KW) return 0;
    if (s->KH == 5) return s->C_in >= 32 && s->C_out >= 32;
    if (s->KH != 3) return 0;
    if (!avx512) return s->C_in >= 16 && s->C_out >= 16;
    if (s->C_in >= 64 && s->C_out >= 64 && s->OH == 2 && s->OW == 2) return 1;
    if (!conv_cpu_winograd(s)) return 0;
    /* Where oneDNN's AVX-512 Winograd kernels would run: ours for the passes whose products are narrow enough
     * (the pass's input channels, backward data's being the layer's output channels). */
    switch (pass) {
    case CONV_PASS_FORWARD: return s->C_in <= 128;
    case CONV_PASS_BACKWARD_DATA: return s->C_out <= 128;
    default: return s->C_in <= 256;
    }
}

static int g_lanes; /* conv_cpu_set_lanes's choice: 0 (the CPU's), 8 or 16 */

static int cpu_has_16_lanes(void) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(TOWER_SANITIZE_THREAD)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
#else
    return 0;
#endif
}

int conv_cpu_lanes(void) {
    const int want = __atomic_load_n(&g_lanes, __ATOMIC_RELAXED);
    return want == 8 || !cpu_has_16_lanes() ? 8 : 16;
}

int conv_cpu_set_lanes(int lanes) {
    return __atomic_exchange_n(&g_lanes, lanes == 8 || lanes == 16 ? lanes : 0, __ATOMIC_RELAXED);
}

int conv_cpu_team(int n_threads) {
    const int nt = omp_get_max_threads();
    if (n_threads < 1) n_threads = 1;
    return nt < n_threads ? nt : n_threads;
}

/* Where model/conv_first.c's direct kernels beat the path the rules above give a first layer (bench_conv's
 * "first" column with --wei_any, against oneDNN's direct kernels and the loops, 2 threads, the 2-core Zen 5,
 * 2026-11-28, bench/RESULTS.md), by the width the CPU runs them at (lanes: conv_cpu_lanes):
 *   - 16 lanes (AVX-512), forward: every layer of 64k channels out (64 channels a block: 6 pixels x 4
 *     registers), against oneDNN's brgconv cifar10's 3 -> 64 5x5 1.26x, vgg11's 3 -> 64 3x3 at 32x32 1.7x, a
 *     grey 1 -> 64 3x3 1.74x, a grey 7x7 stride 2 at 224x224 1.05x; and one channel in at 25 taps and more
 *     (32 channels a block): mnist's conv1 1.06x (0.81 -> 0.71 ms in the step).  A grey 3x3 stride-2 layer of
 *     32 channels out is level (0.70 against 0.74 ms at 96x96) and stays.
 *   - 16 lanes, backward weights, one channel in up to 25 taps, where the loops ran (oneDNN's AVX-512
 *     backward weights is slower on these): mnist's 1.9x, a grey 3x3 stride-2 layer 4x at 32x32 and 2.3x at
 *     96x96, a grey 3x3 1.1x; at 49 taps (a 7x7) 0.73x; three channels in level (cifar10's 1.05x, vgg11's
 *     1.0x), so they stay.
 *   - 8 lanes (no AVX-512; measured on the Zen 5 with the AVX2 clone and oneDNN held to AVX2): the forward
 *     loses to jit:avx2 everywhere (mnist's 0.79x, cifar10's 0.70x); backward weights on one channel up to 25
 *     taps holds or gains against the loops (mnist's 1.02x, a grey 3x3 1.2x, a grey 3x3 stride 2 1.9-2x),
 *     so only that.  Not measured on a real AVX2 machine. */
int conv_cpu_first(ConvPass pass, const ConvCpuShape *s, int lanes) {
    if (s->C_in > 4) return 0;
    const int taps = s->KH * s->KW * s->C_in;
    if (pass == CONV_PASS_BACKWARD_WEIGHTS) return s->C_in == 1 && taps <= 25;
    if (pass != CONV_PASS_FORWARD || lanes != 16) return 0;
    return s->C_out % 64 == 0 || (s->C_in == 1 && taps >= 25);
}

ConvCpuPath conv_cpu_pick(ConvPass pass, const ConvCpuShape *s, const char *impl_info) {
    if (!conv_cpu_impl_direct(impl_info)) return CONV_CPU_LOOPS;
    for (size_t i = 0; i < sizeof cpu_rows / sizeof cpu_rows[0]; i++)
        if (cpu_rows[i].pass == pass && strstr(impl_info, cpu_rows[i].impl_needs) &&
            s->KH * s->KW >= cpu_rows[i].min_kernel_cells && s->C_in >= cpu_rows[i].min_C_in &&
            s->OH * s->OW <= cpu_rows[i].max_out_cells && s->C_out <= cpu_rows[i].max_C_out)
            return CONV_CPU_ONEDNN;
    return CONV_CPU_LOOPS;
}
