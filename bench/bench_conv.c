/* bench_conv.c — the CPU convolutions of model/ (conv2d's im2col + sgemm,
 * pointwise's one sgemm over the batch) against oneDNN's convolution and
 * matmul primitives, pass by pass (not a test).
 *
 * Where it sits: bench/; the measurement behind the CPU convolution path
 * table of model/conv_algo.c (docs/models.md, bench/RESULTS.md).  Every
 * side works in Tower's layouts: NHWC activations, HWIO weights (oneDNN's
 * hwio tag; for the matmul the (C_in, C_out) matrix), so nothing is
 * reordered or timed twice.  Shapes: vgg11's 3x3 convolutions (bias, ReLU)
 * at 32x32, mobilenet_v2's 1x1 expand/project convolutions (no bias) at
 * 32x32 and 96x96, resnet50 bottleneck 1x1 convolutions (bias, strides).
 * For each shape and pass (forward; backward data; backward weights, with
 * the bias gradient and, after a ReLU, the ReLU's mask), the sides run
 * interleaved (tower, oneDNN conv, oneDNN matmul, then again) --reps times
 * after one warm-up; the median wall milliseconds and GFLOP/s (2 x
 * multiply-adds / time), beside a 1024^3 dnnl_sgemm timed in the same
 * process with the same threads.  Tower's conv2d computes both backward
 * products in one loop over images: its "data" figure is its full backward
 * minus its weights-only backward (dinp NULL).  "max diff" is the largest
 * |tower - oneDNN| over outputs and gradients, relative to the largest
 * |tower|: a check that both compute the same thing.
 * --wei_any lets the convolution primitive pick its weights layout (on AVX2
 * oneDNN 2.6 has direct jit kernels only for blocked weights; with HWIO it
 * falls back to its own im2col + gemm): the weights are then reordered into
 * it in the forward pass and the gradient back to HWIO in backward weights,
 * both timed.
 * --winograd runs oneDNN's Winograd kernels (F(4x4, 3x3), AVX-512) on the
 * conv side instead of its direct ones: they take blocked activations only,
 * so each pass also reorders its activations from NHWC and its result back,
 * all timed, as model/conv2d_dnnl.c runs them (weights as --wei_any).  The
 * measurement behind conv_cpu_winograd (model/conv_algo.c): run the same
 * --only with and without it.
 * Where model/winograd.c applies (a 3x3 or 5x5 kernel at stride 1), a
 * third side runs its passes (F(2x2, 3x3) or F(4x4, 3x3) by the map, F(4x4, 5x5)) ("wino": forward,
 * backward data, backward weights with the bias gradient, after the ReLU's
 * mask like oneDNN's), the measurement behind conv_cpu_winograd_f2.
 * Where model/conv_first.c applies (1 to 4 channels in, C_out a multiple
 * of 32), one more runs its forward and backward weights ("first"; the
 * ReLU's mask as it reads dout, as the step runs it), the measurement
 * behind conv_cpu_first; the "first" rows are one-channel first layers.
 * --cpu_time times the process's CPU seconds instead of wall seconds: with
 * --threads 1 on a loaded machine the steadier figure (GFLOP/s then per
 * CPU-second).
 * Usage: bench_conv [--reps 9] [--threads 2] [--only NET] [--wei_any] [--winograd] [--cpu_time]
 * (NET: vgg11, mobilenet_v2, resnet50, resnet20, vgg16_224, resnet50_224, mnist, cifar10, narrow, first)
 */
#include "base/flags.h"
#include "bench/bench_util.h"
#include "model/layers.h"
#include "model/sgemm.h"

#include <math.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DN(call)                                                                                  \
    do {                                                                                          \
        dnnl_status_t s_ = (call);                                                                \
        if (s_ != dnnl_success) {                                                                 \
            fprintf(stderr, "oneDNN error %d: %s (%s:%d)\n", (int)s_, #call, __FILE__, __LINE__); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

typedef struct {
    const char *net;
    int B, H, C_in, K, C_out, stride;
    Padding padding;
    int bias, relu;
    int pointwise; /* model/pointwise.c's layer (no bias, stride 1), else conv2d */
} Shape;

static const Shape shapes[] = {
    /* vgg11 at 32x32, batch 64: every 3x3 conv (bias + ReLU, SAME). */
    {"vgg11", 64, 32, 3, 3, 64, 1, PAD_SAME, 1, 1, 0},
    {"vgg11", 64, 16, 64, 3, 128, 1, PAD_SAME, 1, 1, 0},
    {"vgg11", 64, 8, 128, 3, 256, 1, PAD_SAME, 1, 1, 0},
    {"vgg11", 64, 8, 256, 3, 256, 1, PAD_SAME, 1, 1, 0},
    {"vgg11", 64, 4, 256, 3, 512, 1, PAD_SAME, 1, 1, 0},
    {"vgg11", 64, 4, 512, 3, 512, 1, PAD_SAME, 1, 1, 0},
    {"vgg11", 64, 2, 512, 3, 512, 1, PAD_SAME, 1, 1, 0},
    /* mobilenet_v2 (alpha 1) 1x1 expand/project at 32x32 input, batch 64. */
    {"mobilenet_v2", 64, 16, 16, 1, 96, 1, PAD_VALID, 0, 0, 1},
    {"mobilenet_v2", 64, 8, 24, 1, 144, 1, PAD_VALID, 0, 0, 1},
    {"mobilenet_v2", 64, 8, 144, 1, 24, 1, PAD_VALID, 0, 0, 1},
    {"mobilenet_v2", 64, 4, 32, 1, 192, 1, PAD_VALID, 0, 0, 1},
    {"mobilenet_v2", 64, 4, 192, 1, 32, 1, PAD_VALID, 0, 0, 1},
    {"mobilenet_v2", 64, 2, 64, 1, 384, 1, PAD_VALID, 0, 0, 1},
    {"mobilenet_v2", 64, 2, 384, 1, 64, 1, PAD_VALID, 0, 0, 1},
    {"mobilenet_v2", 64, 1, 160, 1, 960, 1, PAD_VALID, 0, 0, 1},
    {"mobilenet_v2", 64, 1, 320, 1, 1280, 1, PAD_VALID, 0, 0, 1},
    /* ... and at 96x96 input. */
    {"mobilenet_v2", 64, 48, 16, 1, 96, 1, PAD_VALID, 0, 0, 1},
    {"mobilenet_v2", 64, 24, 24, 1, 144, 1, PAD_VALID, 0, 0, 1},
    {"mobilenet_v2", 64, 24, 144, 1, 24, 1, PAD_VALID, 0, 0, 1},
    {"mobilenet_v2", 64, 12, 192, 1, 32, 1, PAD_VALID, 0, 0, 1},
    {"mobilenet_v2", 64, 6, 384, 1, 64, 1, PAD_VALID, 0, 0, 1},
    {"mobilenet_v2", 64, 3, 960, 1, 160, 1, PAD_VALID, 0, 0, 1},
    /* resnet50 bottleneck 1x1 convs (Conv2D with bias, VALID): 32x32 input
     * at batch 64 (maps 8, 4, 2, 1), and 224x224 input at batch 8. */
    {"resnet50", 64, 8, 64, 1, 64, 1, PAD_VALID, 1, 0, 0},
    {"resnet50", 64, 8, 64, 1, 256, 1, PAD_VALID, 1, 0, 0},
    {"resnet50", 64, 8, 256, 1, 128, 2, PAD_VALID, 1, 0, 0},
    {"resnet50", 64, 4, 512, 1, 128, 1, PAD_VALID, 1, 0, 0},
    {"resnet50", 64, 2, 1024, 1, 256, 1, PAD_VALID, 1, 0, 0},
    {"resnet50", 8, 56, 64, 1, 256, 1, PAD_VALID, 1, 0, 0},
    {"resnet50", 8, 56, 256, 1, 64, 1, PAD_VALID, 1, 0, 0},
    {"resnet50", 8, 28, 128, 1, 512, 1, PAD_VALID, 1, 0, 0},
    {"resnet50", 8, 14, 1024, 1, 256, 1, PAD_VALID, 1, 0, 0},
    /* resnet50's 3x3 at 32x32 input. */
    {"resnet50", 64, 8, 64, 3, 64, 1, PAD_SAME, 1, 0, 0},
    /* resnet20's 3x3 at 32x32, batch 64: conv1, the three stages' stride-1 layers, the two stride-2 ones. */
    {"resnet20", 64, 32, 3, 3, 16, 1, PAD_SAME, 1, 0, 0},
    {"resnet20", 64, 32, 16, 3, 16, 1, PAD_SAME, 1, 0, 0},
    {"resnet20", 64, 16, 32, 3, 32, 1, PAD_SAME, 1, 0, 0},
    {"resnet20", 64, 8, 64, 3, 64, 1, PAD_SAME, 1, 0, 0},
    {"resnet20", 64, 32, 16, 3, 32, 2, PAD_SAME, 1, 0, 0},
    {"resnet20", 64, 16, 32, 3, 64, 2, PAD_SAME, 1, 0, 0},
    /* Narrow 3x3 layers at batch 64, no ReLU: the measurement behind conv_algo.c's backward-weights row for at
     * most 16 channels out (16 -> 16 over maps of 8 to 64, 32 -> 16, 8 -> 8, then 24 and 32 out, first layers). */
    {"narrow", 64, 8, 16, 3, 16, 1, PAD_SAME, 1, 0, 0},
    {"narrow", 64, 16, 16, 3, 16, 1, PAD_SAME, 1, 0, 0},
    {"narrow", 64, 32, 16, 3, 16, 1, PAD_SAME, 1, 0, 0},
    {"narrow", 64, 64, 16, 3, 16, 1, PAD_SAME, 1, 0, 0},
    {"narrow", 64, 32, 32, 3, 16, 1, PAD_SAME, 1, 0, 0},
    {"narrow", 64, 32, 8, 3, 8, 1, PAD_SAME, 1, 0, 0},
    {"narrow", 64, 32, 16, 3, 24, 1, PAD_SAME, 1, 0, 0},
    {"narrow", 64, 32, 16, 3, 32, 1, PAD_SAME, 1, 0, 0},
    {"narrow", 64, 32, 3, 3, 16, 1, PAD_SAME, 1, 0, 0},
    {"narrow", 64, 32, 3, 3, 32, 1, PAD_SAME, 1, 0, 0},
    {"narrow", 64, 32, 3, 3, 16, 2, PAD_SAME, 1, 0, 0},
    {"narrow", 64, 32, 3, 3, 32, 2, PAD_SAME, 1, 0, 0},
    /* vgg16's 3x3 at 224x224, batch 8: block1's two (an image's windows 115.6 MB unrolled: the loops take
     * them in bands), then one per later block. */
    {"vgg16_224", 8, 224, 3, 3, 64, 1, PAD_SAME, 1, 1, 0},
    {"vgg16_224", 8, 224, 64, 3, 64, 1, PAD_SAME, 1, 1, 0},
    {"vgg16_224", 8, 112, 64, 3, 64, 1, PAD_SAME, 1, 1, 0},
    {"vgg16_224", 8, 56, 128, 3, 128, 1, PAD_SAME, 1, 1, 0},
    {"vgg16_224", 8, 28, 256, 3, 256, 1, PAD_SAME, 1, 1, 0},
    {"vgg16_224", 8, 14, 512, 3, 512, 1, PAD_SAME, 1, 1, 0},
    /* resnet50's 3x3 at 224x224 (conv2 .. conv5), batch 8, and conv5's 7x7 at batch 16. */
    {"resnet50_224", 8, 56, 64, 3, 64, 1, PAD_SAME, 1, 0, 0},
    {"resnet50_224", 8, 28, 128, 3, 128, 1, PAD_SAME, 1, 0, 0},
    {"resnet50_224", 8, 14, 256, 3, 256, 1, PAD_SAME, 1, 0, 0},
    {"resnet50_224", 8, 7, 512, 3, 512, 1, PAD_SAME, 1, 0, 0},
    {"resnet50_224", 16, 7, 512, 3, 512, 1, PAD_SAME, 1, 0, 0},
    /* the tutorials' 5x5 convolutions (bias + ReLU, SAME) at batch 128: mnist's at 28x28 and 14x14,
     * cifar10's at 24x24 and 12x12. */
    {"mnist", 128, 28, 1, 5, 32, 1, PAD_SAME, 1, 1, 0},
    {"mnist", 128, 14, 32, 5, 64, 1, PAD_SAME, 1, 1, 0},
    {"cifar10", 128, 24, 3, 5, 64, 1, PAD_SAME, 1, 1, 0},
    {"cifar10", 128, 12, 64, 5, 64, 1, PAD_SAME, 1, 1, 0},
    /* first layers on one channel (Fashion-MNIST's grey images; model/conv_first.c's measurement): mobilenet_v2's
     * 3x3 stride 2 (no bias: batch norm follows) at 32x32 and 96x96, vgg11's 3x3 at 32x32, resnet50's 7x7 stride
     * 2 at 224x224 (batch 8) as resnet50 runs it: conv1_pad's 3 zeros a side (230x230), then VALID, with bias. */
    {"first", 64, 32, 1, 3, 32, 2, PAD_SAME, 0, 0, 0},
    {"first", 64, 96, 1, 3, 32, 2, PAD_SAME, 0, 0, 0},
    {"first", 64, 32, 1, 3, 64, 1, PAD_SAME, 1, 1, 0},
    {"first", 8, 230, 1, 7, 64, 2, PAD_VALID, 1, 0, 0},
};

static dnnl_engine_t g_eng;
static dnnl_stream_t g_stream;

static float *rnd(size_t n, uint64_t seed) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        x[i] = (float)((double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    }
    return x;
}

static double rel_diff(const float *ref, const float *x, size_t n) {
    double m = 0.0, s = 1e-30;
    for (size_t i = 0; i < n; i++) {
        m = fmax(m, fabs((double)ref[i] - x[i]));
        s = fmax(s, fabs((double)ref[i]));
    }
    return m / s;
}

static dnnl_memory_t mem(const dnnl_memory_desc_t *md, void *p) {
    dnnl_memory_t m;
    DN(dnnl_memory_create(&m, md, g_eng, p));
    return m;
}

static const char *impl_name(const_dnnl_primitive_desc_t pd) {
    const char *s = "?";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s);
    return s;
}

/* A primitive with its arguments. */
typedef struct {
    dnnl_primitive_t p;
    dnnl_primitive_desc_t pd;
    dnnl_exec_arg_t a[5];
    int n_args;
} Prim;

static void prim_run(const Prim *p) {
    DN(dnnl_primitive_execute(p->p, g_stream, p->n_args, p->a));
    DN(dnnl_stream_wait(g_stream));
}

static void prim_make(Prim *p, const void *desc, const_dnnl_primitive_attr_t attr, const_dnnl_primitive_desc_t hint) {
    DN(dnnl_primitive_desc_create(&p->pd, desc, attr, g_eng, hint));
    DN(dnnl_primitive_create(&p->p, p->pd));
}

static void prim_free(Prim *p) {
    if (!p->p) return;
    dnnl_primitive_destroy(p->p);
    dnnl_primitive_desc_destroy(p->pd);
    /* The memories are left (shared between primitives; a few per shape). */
}

typedef struct {
    Shape s;
    Conv2d c;
    int n_threads;
    size_t in_n, out_n, w_n;
    float *inp, *w, *bias, *dout, *out, *dinp, *dw, *db, *scratch, *gtmp;
    float *o_out, *o_dinp, *o_dw, *o_db;
    float *m_out, *m_dinp, *m_dw;
    float *w_out, *w_dinp, *w_dw, *w_db, *w_scratch; /* model/winograd.c's side, where it applies (w_scratch) */
    float *f_out, *f_dw, *f_db, *f_scratch;          /* model/conv_first.c's side, where it applies (f_scratch) */
    Prim cf, cbd, cbw, mf, mbd, mbw;
    Prim r_w, r_wd, r_dw; /* --wei_any: weights HWIO -> forward's / backward data's layout, gradient back */
    /* --winograd: NHWC -> blocked of forward's src, backward data's diff_dst, backward weights' src and diff_dst;
     * blocked -> NHWC of forward's dst and backward data's diff_src (each unset where the layout is NHWC). */
    Prim r_x, r_gd, r_xw, r_gw, r_y, r_dx;
} Bench;

static int g_wei_any;  /* --wei_any: let the convolution primitive choose its weights layout */
static int g_winograd; /* --winograd: oneDNN's Winograd kernels on blocked activations (implies --wei_any) */
static int g_cpu_time; /* --cpu_time: time the process's CPU seconds, not wall (steadier on a shared machine) */

static double clock_s(void) {
    if (!g_cpu_time) return now_s();
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double gflop(const Bench *k) {
    return 2.0 * k->s.B * k->c.OH * k->c.OW * k->c.C_out * k->c.KH * k->c.KW * k->c.C_in / 1e9;
}

/* ---- the sides, pass by pass ---- */

static void tower_fwd(Bench *k) {
    const size_t rows = (size_t)k->s.B * k->s.H * k->s.H;
    if (k->s.pointwise) pointwise_forward(k->out, k->inp, k->w, rows, k->s.C_in, k->s.C_out);
    else conv2d_forward(k->out, k->scratch, k->inp, k->w, k->s.bias ? k->bias : NULL, &k->c, k->s.B, k->n_threads);
}

static void tower_bwd(Bench *k, int with_data) {
    if (k->s.pointwise) {
        memset(k->dw, 0, sizeof(float) * k->w_n);
        pointwise_backward(with_data ? k->dinp : NULL, k->dw, k->dout, k->inp, k->w, (size_t)k->s.B * k->s.H * k->s.H,
                           k->s.C_in, k->s.C_out);
    } else {
        conv2d_backward(with_data ? k->dinp : NULL, k->dw, k->s.bias ? k->db : NULL, k->scratch, k->out, k->dout,
                        k->inp, k->w, &k->c, k->s.B, k->n_threads);
    }
}

/* The ReLU's mask on the output gradient (into gtmp), for oneDNN's backward and model/winograd.c's: as the
 * step masks it (conv2d_run_backward), a select of a gradient loaded unconditionally, which vectorises.  (It
 * loaded k->dout[i] only where out > 0, and through k's fields: a scalar loop with a branch that mispredicts on
 * half the cells, 2-9 ms a call on these shapes, which the backward-weights figures of the ReLU rows carried
 * until 2026-11-28: bench/RESULTS.md.) */
static void relu_mask(Bench *k) {
    const size_t n = k->out_n;
    const float *out = k->out, *dout = k->dout;
    float *g = k->gtmp;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float d = dout[i];
        g[i] = out[i] > 0.0f ? d : 0.0f;
    }
}

/* The memory primitive pd takes for its argument `arg`: the NHWC tensor at p itself, or (--winograd, a blocked
 * layout) a blocked buffer, with *r set to the reorder from p into it (an input) or from it back to p (out). */
static dnnl_memory_t act(Prim *r, const_dnnl_primitive_desc_t pd, int arg, const dnnl_memory_desc_t *nhwc, float *p,
                         int out) {
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
    if (dnnl_memory_desc_equal(md, nhwc)) return mem(nhwc, p);
    dnnl_memory_t blk;
    DN(dnnl_memory_create(&blk, md, g_eng, DNNL_MEMORY_ALLOCATE));
    DN(dnnl_reorder_primitive_desc_create(&r->pd, out ? md : nhwc, g_eng, out ? nhwc : md, g_eng, NULL));
    DN(dnnl_primitive_create(&r->p, r->pd));
    r->a[0] = (dnnl_exec_arg_t){DNNL_ARG_FROM, out ? blk : mem(nhwc, p)};
    r->a[1] = (dnnl_exec_arg_t){DNNL_ARG_TO, out ? mem(nhwc, p) : blk};
    r->n_args = 2;
    return blk;
}

static void setup_conv(Bench *k) {
    const Shape *s = &k->s;
    const Conv2d *c = &k->c;
    dnnl_memory_desc_t src, wei, bia, dst;
    dnnl_dims_t sd = {s->B, s->C_in, s->H, s->H}, wd = {s->C_out, s->C_in, s->K, s->K}, bd = {s->C_out},
                dd = {s->B, s->C_out, c->OH, c->OW};
    DN(dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, dnnl_nhwc));
    DN(dnnl_memory_desc_init_by_tag(&wei, 4, wd, dnnl_f32, g_wei_any ? dnnl_format_tag_any : dnnl_hwio));
    DN(dnnl_memory_desc_init_by_tag(&bia, 1, bd, dnnl_f32, dnnl_a));
    DN(dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, dnnl_nhwc));
    int pb = (c->OH - 1) * s->stride + s->K - s->H - c->pad_top;
    int pr = (c->OW - 1) * s->stride + s->K - s->H - c->pad_left;
    dnnl_dims_t st = {s->stride, s->stride}, pl = {c->pad_top, c->pad_left}, prr = {pb > 0 ? pb : 0, pr > 0 ? pr : 0};
    const dnnl_memory_desc_t *bp = s->bias ? &bia : NULL;
    dnnl_convolution_desc_t df, dbd, dbw;
    const dnnl_alg_kind_t alg = g_winograd ? dnnl_convolution_winograd : dnnl_convolution_direct;
    dnnl_memory_desc_t src_any, dst_any;
    DN(dnnl_memory_desc_init_by_tag(&src_any, 4, sd, dnnl_f32, dnnl_format_tag_any));
    DN(dnnl_memory_desc_init_by_tag(&dst_any, 4, dd, dnnl_f32, dnnl_format_tag_any));
    const dnnl_memory_desc_t *sp = g_winograd ? &src_any : &src, *dp = g_winograd ? &dst_any : &dst;
    DN(dnnl_convolution_forward_desc_init(&df, dnnl_forward_training, alg, sp, &wei, bp, dp, st, pl, prr));
    DN(dnnl_convolution_backward_data_desc_init(&dbd, alg, sp, &wei, dp, st, pl, prr));
    DN(dnnl_convolution_backward_weights_desc_init(&dbw, alg, sp, &wei, bp, dp, st, pl, prr));
    dnnl_primitive_attr_t attr;
    DN(dnnl_primitive_attr_create(&attr));
    if (s->relu) {
        dnnl_post_ops_t po;
        DN(dnnl_post_ops_create(&po));
        DN(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f));
        DN(dnnl_primitive_attr_set_post_ops(attr, po));
        dnnl_post_ops_destroy(po);
    }
    prim_make(&k->cf, &df, attr, NULL);
    prim_make(&k->cbd, &dbd, NULL, k->cf.pd);
    prim_make(&k->cbw, &dbw, NULL, k->cf.pd);
    dnnl_primitive_attr_destroy(attr);
    dnnl_memory_desc_t hwio;
    DN(dnnl_memory_desc_init_by_tag(&hwio, 4, wd, dnnl_f32, dnnl_hwio));
    dnnl_memory_t m_w = mem(&hwio, k->w), m_dw = mem(&hwio, k->o_dw);
    if (g_wei_any) {
        wei = *dnnl_primitive_desc_query_md(k->cf.pd, dnnl_query_weights_md, 0);
        const dnnl_memory_desc_t dwei = *dnnl_primitive_desc_query_md(k->cbw.pd, dnnl_query_diff_weights_md, 0);
        dnnl_memory_t bw, bdw;
        DN(dnnl_memory_create(&bw, &wei, g_eng, DNNL_MEMORY_ALLOCATE));
        DN(dnnl_memory_create(&bdw, &dwei, g_eng, DNNL_MEMORY_ALLOCATE));
        DN(dnnl_reorder_primitive_desc_create(&k->r_w.pd, &hwio, g_eng, &wei, g_eng, NULL));
        DN(dnnl_primitive_create(&k->r_w.p, k->r_w.pd));
        DN(dnnl_reorder_primitive_desc_create(&k->r_dw.pd, &dwei, g_eng, &hwio, g_eng, NULL));
        DN(dnnl_primitive_create(&k->r_dw.p, k->r_dw.pd));
        k->r_w.a[0] = (dnnl_exec_arg_t){DNNL_ARG_FROM, m_w};
        k->r_w.a[1] = (dnnl_exec_arg_t){DNNL_ARG_TO, bw};
        k->r_w.n_args = 2;
        k->r_dw.a[0] = (dnnl_exec_arg_t){DNNL_ARG_FROM, bdw};
        k->r_dw.a[1] = (dnnl_exec_arg_t){DNNL_ARG_TO, m_dw};
        k->r_dw.n_args = 2;
        m_w = bw;
        m_dw = bdw;
        /* Backward data may want another layout than forward's. */
        const dnnl_memory_desc_t wd_md = *dnnl_primitive_desc_query_md(k->cbd.pd, dnnl_query_weights_md, 0);
        dnnl_memory_t bwd_w;
        DN(dnnl_memory_create(&bwd_w, &wd_md, g_eng, DNNL_MEMORY_ALLOCATE));
        DN(dnnl_reorder_primitive_desc_create(&k->r_wd.pd, &hwio, g_eng, &wd_md, g_eng, NULL));
        DN(dnnl_primitive_create(&k->r_wd.p, k->r_wd.pd));
        k->r_wd.a[0] = (dnnl_exec_arg_t){DNNL_ARG_FROM, mem(&hwio, k->w)};
        k->r_wd.a[1] = (dnnl_exec_arg_t){DNNL_ARG_TO, bwd_w};
        k->r_wd.n_args = 2;
    }
    float *g = s->relu ? k->gtmp : k->dout;
    k->cf.a[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, act(&k->r_x, k->cf.pd, DNNL_ARG_SRC, &src, k->inp, 0)};
    k->cf.a[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, m_w};
    k->cf.a[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, act(&k->r_y, k->cf.pd, DNNL_ARG_DST, &dst, k->o_out, 1)};
    k->cf.n_args = 3;
    if (s->bias) k->cf.a[k->cf.n_args++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mem(&bia, k->bias)};
    k->cbd.a[0] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, act(&k->r_gd, k->cbd.pd, DNNL_ARG_DIFF_DST, &dst, g, 0)};
    k->cbd.a[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, k->r_wd.p ? k->r_wd.a[1].memory : m_w};
    k->cbd.a[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, act(&k->r_dx, k->cbd.pd, DNNL_ARG_DIFF_SRC, &src, k->o_dinp, 1)};
    k->cbd.n_args = 3;
    k->cbw.a[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, act(&k->r_xw, k->cbw.pd, DNNL_ARG_SRC, &src, k->inp, 0)};
    k->cbw.a[1] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, act(&k->r_gw, k->cbw.pd, DNNL_ARG_DIFF_DST, &dst, g, 0)};
    k->cbw.a[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, m_dw};
    k->cbw.n_args = 3;
    if (s->bias) k->cbw.a[k->cbw.n_args++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_BIAS, mem(&bia, k->o_db)};
}

/* 1x1 stride 1 only: (M, C_in) x (C_in, C_out) and its two gradients with
 * transposed strides (no copy). */
static void setup_matmul(Bench *k) {
    const Shape *s = &k->s;
    const dnnl_dim_t M = (dnnl_dim_t)s->B * s->H * s->H, Ci = s->C_in, Co = s->C_out;
    dnnl_memory_desc_t a, w, wt, o, at, bia;
    dnnl_dims_t ad = {M, Ci}, wd = {Ci, Co}, wtd = {Co, Ci}, od = {M, Co}, atd = {Ci, M}, bd = {1, Co};
    dnnl_dims_t as = {Ci, 1}, ws = {Co, 1}, wts = {1, Co}, os = {Co, 1}, ats = {1, Ci};
    DN(dnnl_memory_desc_init_by_strides(&a, 2, ad, dnnl_f32, as));
    DN(dnnl_memory_desc_init_by_strides(&w, 2, wd, dnnl_f32, ws));
    DN(dnnl_memory_desc_init_by_strides(&wt, 2, wtd, dnnl_f32, wts));
    DN(dnnl_memory_desc_init_by_strides(&o, 2, od, dnnl_f32, os));
    DN(dnnl_memory_desc_init_by_strides(&at, 2, atd, dnnl_f32, ats));
    DN(dnnl_memory_desc_init_by_tag(&bia, 2, bd, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t df, dbd, dbw;
    DN(dnnl_matmul_desc_init(&df, &a, &w, s->bias ? &bia : NULL, &o));
    DN(dnnl_matmul_desc_init(&dbd, &o, &wt, NULL, &a));
    DN(dnnl_matmul_desc_init(&dbw, &at, &o, NULL, &w));
    dnnl_primitive_attr_t attr;
    DN(dnnl_primitive_attr_create(&attr));
    if (s->relu) {
        dnnl_post_ops_t po;
        DN(dnnl_post_ops_create(&po));
        DN(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f));
        DN(dnnl_primitive_attr_set_post_ops(attr, po));
        dnnl_post_ops_destroy(po);
    }
    prim_make(&k->mf, &df, attr, NULL);
    prim_make(&k->mbd, &dbd, NULL, NULL);
    prim_make(&k->mbw, &dbw, NULL, NULL);
    dnnl_primitive_attr_destroy(attr);
    k->mf.a[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mem(&a, k->inp)};
    k->mf.a[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mem(&w, k->w)};
    k->mf.a[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, mem(&o, k->m_out)};
    k->mf.n_args = 3;
    if (s->bias) k->mf.a[k->mf.n_args++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mem(&bia, k->bias)};
    float *g = s->relu ? k->gtmp : k->dout;
    k->mbd.a[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mem(&o, g)};
    k->mbd.a[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mem(&wt, k->w)};
    k->mbd.a[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, mem(&a, k->m_dinp)};
    k->mbd.n_args = 3;
    k->mbw.a[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mem(&at, k->inp)};
    k->mbw.a[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mem(&o, g)};
    k->mbw.a[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, mem(&w, k->m_dw)};
    k->mbw.n_args = 3;
}

enum { T_FWD, T_BWD_W, T_BWD_ALL, C_FWD, C_BWD_D, C_BWD_W, M_FWD, M_BWD_D, M_BWD_W, W_FWD, W_BWD_D, W_BWD_W, F_FWD,
       F_BWD_W, N_TIMED };

/* 1 when side `which` runs for this shape: tower's and oneDNN's conv always, the matmul on 1x1 stride-1 shapes,
 * model/winograd.c's where it applies. */
static int side_on(const Bench *k, int which) {
    if (which >= F_FWD) return k->f_scratch != NULL;
    if (which >= W_FWD) return k->w_scratch != NULL;
    if (which >= M_FWD) return k->s.K == 1 && k->s.stride == 1;
    return 1;
}

static void run_one(Bench *k, int which) {
    switch (which) {
    case T_FWD: tower_fwd(k); break;
    case T_BWD_W: tower_bwd(k, 0); break;
    case T_BWD_ALL: tower_bwd(k, 1); break;
    case C_FWD:
        if (k->r_w.p) prim_run(&k->r_w);
        if (k->r_x.p) prim_run(&k->r_x);
        prim_run(&k->cf);
        if (k->r_y.p) prim_run(&k->r_y);
        break;
    case C_BWD_D:
        if (k->r_wd.p) prim_run(&k->r_wd);
        if (k->r_gd.p) prim_run(&k->r_gd);
        prim_run(&k->cbd);
        if (k->r_dx.p) prim_run(&k->r_dx);
        break;
    case C_BWD_W:
        if (k->s.relu) relu_mask(k);
        if (k->r_xw.p) prim_run(&k->r_xw);
        if (k->r_gw.p) prim_run(&k->r_gw);
        prim_run(&k->cbw);
        if (k->r_dw.p) prim_run(&k->r_dw);
        break;
    case M_FWD: prim_run(&k->mf); break;
    case M_BWD_D: prim_run(&k->mbd); break;
    case M_BWD_W: prim_run(&k->mbw); break;
    case W_FWD:
        winograd_forward(k->w_out, k->w_scratch, k->inp, k->w, k->s.bias ? k->bias : NULL, &k->c, k->s.B,
                         k->n_threads);
        break;
    case W_BWD_D:
        winograd_backward_data(k->w_dinp, k->w_scratch, k->s.relu ? k->gtmp : k->dout, k->w, &k->c, k->s.B,
                               k->n_threads);
        break;
    case W_BWD_W:
        if (k->s.relu) relu_mask(k);
        winograd_backward_weights(k->w_dw, k->s.bias ? k->w_db : NULL, k->w_scratch, k->s.relu ? k->gtmp : k->dout,
                                  k->inp, &k->c, k->s.B, k->n_threads);
        break;
    case F_FWD:
        conv_first_forward(k->f_out, k->f_scratch, k->inp, k->w, k->s.bias ? k->bias : NULL, &k->c, k->s.B,
                           k->n_threads);
        break;
    case F_BWD_W: /* the mask as it reads dout, as the step runs it */
        conv_first_backward_weights(k->f_dw, k->s.bias ? k->f_db : NULL, k->f_scratch, k->out, k->dout, k->inp, &k->c,
                                    k->s.B, k->n_threads);
        break;
    }
}

static void bench_shape(const Shape *s, int reps, int n_threads) {
    if (g_winograd && (s->K != 3 || s->stride != 1)) return; /* oneDNN's Winograd: 3x3 at stride 1 only */
    Bench k;
    memset(&k, 0, sizeof k);
    k.s = *s;
    k.n_threads = n_threads;
    if (conv2d_init(&k.c, s->H, s->H, s->C_in, s->K, s->K, s->C_out, s->stride, s->stride, s->padding,
                    s->relu ? ACT_RELU : ACT_NONE) != 0) {
        fprintf(stderr, "bench_conv: bad shape\n");
        exit(1);
    }
    k.in_n = (size_t)s->B * s->H * s->H * s->C_in;
    k.out_n = (size_t)s->B * k.c.OH * k.c.OW * s->C_out;
    k.w_n = (size_t)s->K * s->K * s->C_in * s->C_out;
    k.inp = rnd(k.in_n, 1); k.w = rnd(k.w_n, 2); k.bias = rnd(s->C_out, 3); k.dout = rnd(k.out_n, 4);
    k.out = calloc(k.out_n, sizeof(float)); k.dinp = calloc(k.in_n, sizeof(float));
    k.dw = calloc(k.w_n, sizeof(float)); k.db = calloc(s->C_out, sizeof(float));
    k.gtmp = calloc(k.out_n, sizeof(float));
    k.o_out = calloc(k.out_n, sizeof(float)); k.o_dinp = calloc(k.in_n, sizeof(float));
    k.o_dw = calloc(k.w_n, sizeof(float)); k.o_db = calloc(s->C_out, sizeof(float));
    k.m_out = calloc(k.out_n, sizeof(float)); k.m_dinp = calloc(k.in_n, sizeof(float));
    k.m_dw = calloc(k.w_n, sizeof(float));
    k.scratch = malloc(sizeof(float) * conv2d_scratch_n_floats(&k.c, n_threads));
    setup_conv(&k);
    const int mm = side_on(&k, M_FWD);
    if (mm) setup_matmul(&k);
    if (!s->pointwise && winograd_applies(&k.c)) {
        k.w_scratch = malloc(sizeof(float) * winograd_scratch_n_floats(&k.c, s->B, n_threads));
        k.w_out = calloc(k.out_n, sizeof(float)); k.w_dinp = calloc(k.in_n, sizeof(float));
        k.w_dw = calloc(k.w_n, sizeof(float)); k.w_db = calloc(s->C_out, sizeof(float));
    }
    const int wino = side_on(&k, W_FWD);
    if (!s->pointwise && conv_first_applies(&k.c)) {
        k.f_scratch = malloc(sizeof(float) * conv_first_scratch_n_floats(&k.c, s->B, n_threads));
        k.f_out = calloc(k.out_n, sizeof(float));
        k.f_dw = calloc(k.w_n, sizeof(float)); k.f_db = calloc(s->C_out, sizeof(float));
    }
    const int first = side_on(&k, F_FWD);
    /* Warm-up, which also leaves every side's results for the check (the
     * ReLU mask is computed from tower's output before oneDNN's backward). */
    for (int w = 0; w < N_TIMED; w++)
        if (side_on(&k, w)) run_one(&k, w);
    run_one(&k, T_BWD_ALL);
    for (int w = C_BWD_W; w >= C_BWD_D; w--) run_one(&k, w); /* bwd-w computes the mask bwd-d reads */
    if (mm) for (int w = M_BWD_D; w <= M_BWD_W; w++) run_one(&k, w);
    if (wino) for (int w = W_BWD_W; w >= W_BWD_D; w--) run_one(&k, w);
    double diff = fmax(rel_diff(k.out, k.o_out, k.out_n),
                       fmax(rel_diff(k.dinp, k.o_dinp, k.in_n), rel_diff(k.dw, k.o_dw, k.w_n)));
    if (s->bias) diff = fmax(diff, rel_diff(k.db, k.o_db, s->C_out));
    if (mm) diff = fmax(diff, fmax(rel_diff(k.out, k.m_out, k.out_n), fmax(rel_diff(k.dinp, k.m_dinp, k.in_n),
                                                                             rel_diff(k.dw, k.m_dw, k.w_n))));
    if (wino) diff = fmax(diff, fmax(rel_diff(k.out, k.w_out, k.out_n), fmax(rel_diff(k.dinp, k.w_dinp, k.in_n),
                                                                               rel_diff(k.dw, k.w_dw, k.w_n))));
    if (wino && s->bias) diff = fmax(diff, rel_diff(k.db, k.w_db, s->C_out));
    if (first) diff = fmax(diff, fmax(rel_diff(k.out, k.f_out, k.out_n), rel_diff(k.dw, k.f_dw, k.w_n)));
    if (first && s->bias) diff = fmax(diff, rel_diff(k.db, k.f_db, s->C_out));
    double *t[N_TIMED];
    for (int w = 0; w < N_TIMED; w++) t[w] = calloc(reps, sizeof(double));
    for (int r = 0; r < reps; r++)
        for (int w = 0; w < N_TIMED; w++) {
            if (!side_on(&k, w)) continue;
            const double t0 = clock_s();
            run_one(&k, w);
            t[w][r] = clock_s() - t0;
        }
    double med[N_TIMED] = {0};
    for (int w = 0; w < N_TIMED; w++)
        if (side_on(&k, w)) med[w] = median(t[w], reps);
    const double g = gflop(&k);
    /* Tower's data figure is a difference of two noisy medians: 0 (and 0 GFLOP/s) when not positive. */
    const double tf = med[T_FWD], tw = med[T_BWD_W], td = fmax(med[T_BWD_ALL] - med[T_BWD_W], 0.0);
#define RATE(x) ((x) > 0 ? g / (x) : 0.0)
    printf("%-12s B%3d %3dx%-3d %4d->%-4d k%d s%d%s%s | %6.2f GF | tower fwd %7.2f ms %5.0f GF/s  bwd-d %7.2f %5.0f"
           "  bwd-w %7.2f %5.0f | conv fwd %7.2f %5.0f  bwd-d %7.2f %5.0f  bwd-w %7.2f %5.0f",
           s->net, s->B, s->H, s->H, s->C_in, s->C_out, s->K, s->stride, s->bias ? " b" : "", s->relu ? " relu" : "",
           g, tf * 1e3, RATE(tf), td * 1e3, RATE(td), tw * 1e3, RATE(tw), med[C_FWD] * 1e3, RATE(med[C_FWD]),
           med[C_BWD_D] * 1e3, RATE(med[C_BWD_D]), med[C_BWD_W] * 1e3, RATE(med[C_BWD_W]));
    if (mm)
        printf(" | matmul fwd %7.2f %5.0f  bwd-d %7.2f %5.0f  bwd-w %7.2f %5.0f", med[M_FWD] * 1e3, RATE(med[M_FWD]),
               med[M_BWD_D] * 1e3, RATE(med[M_BWD_D]), med[M_BWD_W] * 1e3, RATE(med[M_BWD_W]));
    if (wino)
        printf(" | wino fwd %7.2f %5.0f  bwd-d %7.2f %5.0f  bwd-w %7.2f %5.0f", med[W_FWD] * 1e3, RATE(med[W_FWD]),
               med[W_BWD_D] * 1e3, RATE(med[W_BWD_D]), med[W_BWD_W] * 1e3, RATE(med[W_BWD_W]));
    if (first)
        printf(" | first fwd %7.2f %5.0f  bwd-w %7.2f %5.0f", med[F_FWD] * 1e3, RATE(med[F_FWD]), med[F_BWD_W] * 1e3,
               RATE(med[F_BWD_W]));
    printf(" | max rel diff %.1g | %s / %s / %s", diff, impl_name(k.cf.pd), impl_name(k.cbd.pd), impl_name(k.cbw.pd));
    if (mm) printf(" / mm %s %s %s", impl_name(k.mf.pd), impl_name(k.mbd.pd), impl_name(k.mbw.pd));
    printf("\n");
    printf("RESULT net=%s B=%d H=%d C_in=%d C_out=%d K=%d stride=%d threads=%d tower_fwd_ms=%.3f tower_bwd_d_ms=%.3f "
           "tower_bwd_w_ms=%.3f conv_fwd_ms=%.3f conv_bwd_d_ms=%.3f conv_bwd_w_ms=%.3f mm_fwd_ms=%.3f mm_bwd_d_ms=%.3f "
           "mm_bwd_w_ms=%.3f wino_fwd_ms=%.3f wino_bwd_d_ms=%.3f wino_bwd_w_ms=%.3f first_fwd_ms=%.3f first_bwd_w_ms=%.3f\n",
           s->net, s->B, s->H, s->C_in, s->C_out, s->K, s->stride, n_threads, tf * 1e3, td * 1e3, tw * 1e3,
           med[C_FWD] * 1e3, med[C_BWD_D] * 1e3, med[C_BWD_W] * 1e3, med[M_FWD] * 1e3, med[M_BWD_D] * 1e3,
           med[M_BWD_W] * 1e3, med[W_FWD] * 1e3, med[W_BWD_D] * 1e3, med[W_BWD_W] * 1e3, med[F_FWD] * 1e3,
           med[F_BWD_W] * 1e3);
    fflush(stdout);
#undef RATE
    for (int w = 0; w < N_TIMED; w++) free(t[w]);
    Prim *ps[] = {&k.cf, &k.cbd, &k.cbw, &k.mf, &k.mbd, &k.mbw, &k.r_w, &k.r_wd, &k.r_dw,
                  &k.r_x, &k.r_gd, &k.r_xw, &k.r_gw, &k.r_y, &k.r_dx};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) prim_free(ps[i]);
    float *fs[] = {k.inp, k.w, k.bias, k.dout, k.out, k.dinp, k.dw, k.db, k.gtmp, k.o_out, k.o_dinp, k.o_dw, k.o_db,
                   k.m_out, k.m_dinp, k.m_dw, k.scratch, k.w_out, k.w_dinp, k.w_dw, k.w_db, k.w_scratch,
                   k.f_out, k.f_dw, k.f_db, k.f_scratch};
    for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++) free(fs[i]);
}

/* GFLOP/s of a 1024^3 sgemm with the current threads: median of 7 runs
 * (per CPU second with --cpu_time). */
static double sgemm_rate(void) {
    const int n = 1024;
    float *a = rnd((size_t)n * n, 5), *b = rnd((size_t)n * n, 6), *c = malloc(sizeof(float) * n * n);
    double t[7];
    sgemm(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    for (int r = 0; r < 7; r++) {
        double t0 = clock_s();
        sgemm(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        t[r] = clock_s() - t0;
    }
    free(a); free(b); free(c);
    return 2.0 * n * n * n / median(t, 7) / 1e9;
}

int main(int argc, char **argv) {
    int reps = 9, threads = 2;
    const char *only = "";
    const Flag flags[] = {
        {"reps", FLAG_INT, &reps, "interleaved runs of each pass (the median is reported)", FLAG_RANGE(1, 10000, "[]", NULL)},
        {"threads", FLAG_INT, &threads, "OpenMP threads", FLAG_RANGE(1, 1024, "[]", NULL)},
        {"only", FLAG_STRING, &only, "one network's shapes (a name of the table's, e.g. vgg11; one of none: the sgemm rate alone)"},
        {"wei_any", FLAG_BOOL, &g_wei_any, "let the convolution primitive choose its weights layout"},
        {"winograd", FLAG_BOOL, &g_winograd, "oneDNN's Winograd kernels on blocked activations (implies --wei_any)"},
        {"cpu_time", FLAG_BOOL, &g_cpu_time, "time the process's CPU seconds, not wall (steadier on a shared machine)"},
    };
    const int n_flags = (int)(sizeof flags / sizeof flags[0]);
    char *pos[argc > 0 ? argc : 1];
    int n_pos = 0;
    const int done = bench_parse_flags("bench_conv", "[flags]", flags, n_flags, argc, argv, pos, &n_pos, 0);
    if (done >= 0) return done;
    if (g_winograd) g_wei_any = 1;
    omp_set_num_threads(threads);
    DN(dnnl_engine_create(&g_eng, dnnl_cpu, 0));
    DN(dnnl_stream_create(&g_stream, g_eng, dnnl_stream_default_flags));
    printf("%d threads, median of %d interleaved runs (%s); dnnl_sgemm 1024^3: %.0f GFLOP/s\n", threads, reps,
           g_cpu_time ? "CPU time" : "wall time", sgemm_rate());
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!*only || !strcmp(only, shapes[i].net)) bench_shape(&shapes[i], reps, threads);
    /* --only with a name of no shape (e.g. none): the sgemm rate alone. */
    dnnl_stream_destroy(g_stream);
    dnnl_engine_destroy(g_eng);
    return 0;
}
