/* conv_algo.c — conv_algo_pick (conv_algo.h): the rule by which a GPU conv
 * layer takes one of cuDNN's convolution algorithms; conv_cpu_pick: the
 * table by which each pass of a CPU conv layer takes oneDNN's convolution
 * primitive or model/conv2d.c's loops.  Plain C, built into tower_model in
 * every build so that tests/test_conv_algo.c runs anywhere.
 * What it does not do: talk to cuDNN (conv2d_cuda.cu does) or oneDNN
 * (conv2d_dnnl.c does).
 */
#include "model/conv_algo.h"

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
 *     tie at 8x8, 1.5-5x slower at 16x16 and 32x32 (less on the ReLU
 *     layers, whose oneDNN figures carried bench_conv's slow mask until
 *     2026-11-28: vgg11's 3 -> 64 at 32x32 1.7x slower, not 7x; its
 *     64 -> 128 at 16x16 a tie); jit:avx2's is slower than the loops
 *     everywhere measured.  Except where the output has at
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

/* model/winograd.c's F(2x2, 3x3) against what each pass ran before (oneDNN's jit:avx2 forward and backward
 * data, the loops' backward weights), bench_model --per_layer at batch 64 on 2 threads, on a 2-core AMD EPYC
 * with AVX2 and no AVX-512 (bench/RESULTS.md, 2026-11-27): every pass gains where both channel counts are at
 * least 64 (vgg11's layers from 16x16 down to 2x2 1.5-2.2x forward, 1.6-1.8x backward; resnet20's 8x8x64
 * 1.6-1.7x and 1.1-1.4x); at 32 channels (resnet20's 16x16 layers) the forward is level and the backward 1.2x
 * slower, at 16 (32x32) 1.2-1.4x and 1.8-2.0x slower: the products are then too shallow to pay for the
 * transforms, which move 16 values a channel each way.  With AVX-512, oneDNN's own Winograd kernels take 3x3
 * (conv_cpu_winograd) except on maps their 4x4 tiles waste: on 2x2 maps (vgg11's and vgg16's block 5 at 32x32,
 * resnet50's conv4 there) F(2x2, 3x3) is one tile an image, and against oneDNN's direct kernels on the 2-core
 * Zen 5 (bench_conv --only vgg11 --wei_any, batch 64, 2026-11-28) 2.1x forward, 1.5x backward data and 2.8x
 * backward weights on vgg11's 2x2 512 -> 512 layer; the whole step (bench_model --size 32 --batch 64, 3
 * interleaved rounds) vgg11 1.18x, vgg16 1.11x, resnet50 1.02x.  Elsewhere on AVX-512 it stays off: on
 * resnet50's 7x7 maps at batch 8 (where oneDNN's Winograd has too few tiles) it was level with the direct
 * kernels (forward 1.14x, backward data 0.79x, backward weights 1.25x).  Those were F(2x2, 3x3)'s figures;
 * model/winograd.c now runs F(4x4, 3x3) on maps from 3 a side (4x fewer products than the loops, 2.25x for
 * F(2x2, 3x3)): with ONEDNN_MAX_CPU_ISA=AVX2 on the Zen 5 (2026-11-28, bench_model --size 32 --batch 64, 5
 * interleaved rounds) vgg11 1.12x and resnet20 1.08x F(2x2, 3x3)'s step.  With F(4x4, 3x3) the threshold
 * moved from 64 channels to 16 (the same emulation, bench_conv --wei_any, 2026-11-28): against the jit:avx2
 * forward and backward data and the loops' backward weights, resnet20's 16 -> 16 layers 1.7x, 1.3x and 1.5x,
 * its 32 -> 32 layers 1.9x, 1.9x and 2.1x, 16 -> 16 on 8x8 to 64x64 and 16 <-> 32 alike; at 8 -> 8 mixed
 * (forward 1.3x, backward data 0.8x), on first layers (3 channels in) slower; the step 1.28x (resnet20,
 * 3 interleaved rounds).  Not measured on a real AVX2 machine.
 * F(4x4, 5x5), for which oneDNN has no Winograd kernel on any CPU, on mnist's conv2 (14x14, 32 -> 64) and
 * cifar10's (12x12, 64 -> 64) at batch 128 on 2 threads, a 2-core Zen 5 (bench/RESULTS.md, 2026-11-28): the
 * whole step (bench_model, 4 interleaved rounds) 1.21x and 1.37x the F(2x2, 5x5) it replaced, which had been
 * 1.19x and 1.28x the table without it (6 rounds; with ONEDNN_MAX_CPU_ISA=AVX2 1.17x and 1.31x); with
 * backward weights left to the loops F(2x2, 5x5) was 8% and 14% slower than with every pass on it (8 rounds).
 * Backward weights is the pass that moves most memory (the tiles' transforms, 4 times the input and the
 * output gradient, written and read back) and the one the machine's state moves most (in an hour when its
 * memory was contended by other tenants F(2x2, 5x5)'s ran 2x slower).  So every pass from 32 channels in and
 * out; the first layers (1 and 3 channels in) stay off (bench_conv: 1.8x and 1.5x slower forward, 6x and 5x
 * backward weights), as do the 16-channel sizes nobody has measured.
 * With AVX-512, where oneDNN's Winograd kernels would run (conv_cpu_winograd), F(4x4, 3x3) of our own against
 * them pass by pass (bench_conv --winograd, 2 threads, the 2-core Zen 5, 2026-11-28; oneDNN's figures include
 * the reorders of the activations to and from its blocked layout, as the step runs them): ours is faster
 * where few channels go into a pass's products, forward 1.1-1.4x at C_in 32-128 (resnet20's 16x16, vgg11's
 * 16x16 and 8x8 128 -> 256, resnet50's and vgg16's at 224), oneDNN's 1.03-1.65x at 256 and 512; backward
 * data the same with C_out in its place (its products take the output's channels); backward weights ours
 * 1.05-1.5x up to 256 channels in (vgg11, vgg16 and resnet50 at 224), oneDNN's at 512 (1.2-1.6x on 4x4 and
 * 14x14; 7x7 split by the batch).  So ours takes forward at C_in <= 128, backward data at C_out <= 128,
 * backward weights at C_in <= 256: the step (bench_model --size 32 --batch 64, 3 interleaved rounds) vgg11
 * 1.06x, vgg16 1.06-1.12x (2 rounds), resnet20 1.03x, resnet50 level. */
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

ConvCpuPath conv_cpu_pick(ConvPass pass, const ConvCpuShape *s, const char *impl_info) {
    if (!conv_cpu_impl_direct(impl_info)) return CONV_CPU_LOOPS;
    for (size_t i = 0; i < sizeof cpu_rows / sizeof cpu_rows[0]; i++)
        if (cpu_rows[i].pass == pass && strstr(impl_info, cpu_rows[i].impl_needs) &&
            s->KH * s->KW >= cpu_rows[i].min_kernel_cells && s->C_in >= cpu_rows[i].min_C_in &&
            s->OH * s->OW <= cpu_rows[i].max_out_cells && s->C_out <= cpu_rows[i].max_C_out)
            return CONV_CPU_ONEDNN;
    return CONV_CPU_LOOPS;
}
