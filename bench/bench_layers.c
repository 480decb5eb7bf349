/* bench_layers.c — the CPU batch norm and depthwise convolution (model/)
 * against oneDNN's primitives on MobileNetV2-like shapes (not a test).
 *
 * Where it sits: bench/; decides whether a layer's fast path should be
 * oneDNN's primitive or the readable loop of model/ (the loop stays the
 * test oracle either way).  Both sides work in Tower's layouts: NHWC
 * activations, Keras's (KH, KW, C) depthwise kernel (oneDNN's hwigo with
 * one input and one output per group), so no reorder is timed or needed.
 * For each shape: forward and backward (depthwise backward = oneDNN's
 * backward data + backward weights; batch norm backward = data, scale and
 * shift), the median and minimum over --reps after 2 warm-up runs, in ms, with
 * oneDNN's implementation name and the largest difference from the loops
 * (a check that both compute the same thing).  Threads: --threads (2).
 * Usage: bench_layers [--batch 64] [--reps 7] [--threads 2] [--only depthwise|batchnorm]
 *                     [--loops_only]   (skip oneDNN: its timings print as 0)
 */
#include "base/flags.h"
#include "bench/bench_util.h"
#include "model/layers.h"

#include <math.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DN(call)                                                                          \
    do {                                                                                  \
        dnnl_status_t s_ = (call);                                                        \
        if (s_ != dnnl_success) {                                                         \
            fprintf(stderr, "oneDNN error %d: %s (%s:%d)\n", (int)s_, #call, __FILE__, __LINE__); \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

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

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

typedef void (*RunFn)(void *ctx);

/* Median and minimum milliseconds of reps runs after 2 warm-ups (the
 * minimum is the run least disturbed by other processes on a shared
 * machine).  A run slower than 2 s is timed once, after one warm-up. */
typedef struct { double med, min; } Ms;
static Ms time_ms(RunFn f, void *ctx, int reps) {
    double t0 = now_s();
    f(ctx);
    if (now_s() - t0 > 2.0) reps = 1;
    else f(ctx);
    double *t = malloc(sizeof(double) * reps);
    for (int r = 0; r < reps; r++) {
        t0 = now_s();
        f(ctx);
        t[r] = (now_s() - t0) * 1e3;
    }
    qsort(t, reps, sizeof(double), cmp_double);
    Ms m = {t[reps / 2], t[0]};
    free(t);
    return m;
}

static int g_loops_only; /* --loops_only: skip oneDNN's timings (printed as 0) */
static dnnl_engine_t g_eng;
static dnnl_stream_t g_stream;

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

/* ---- depthwise ---- */

typedef struct {
    Depthwise d;
    int B, n_threads;
    float *inp, *w, *out, *dout, *dinp, *dw, *scratch, *o_out, *o_dinp, *o_dw;
    dnnl_primitive_t fwd, bwd_d, bwd_w;
    dnnl_exec_arg_t a_fwd[3], a_bd[3], a_bw[3];
} DwBench;

static void dw_loop_fwd(void *p) { DwBench *k = p; depthwise_forward(k->out, k->inp, k->w, &k->d, k->B); }
static void dw_loop_bwd(void *p) {
    DwBench *k = p;
    memset(k->dw, 0, sizeof(float) * 9 * k->d.C);
    depthwise_backward(k->dinp, k->dw, k->scratch, k->dout, k->inp, k->w, &k->d, k->B, k->n_threads);
}
static void dw_dnnl_fwd(void *p) { DwBench *k = p; DN(dnnl_primitive_execute(k->fwd, g_stream, 3, k->a_fwd)); DN(dnnl_stream_wait(g_stream)); }
static void dw_dnnl_bwd(void *p) {
    DwBench *k = p;
    DN(dnnl_primitive_execute(k->bwd_d, g_stream, 3, k->a_bd));
    DN(dnnl_primitive_execute(k->bwd_w, g_stream, 3, k->a_bw));
    DN(dnnl_stream_wait(g_stream));
}

static void bench_depthwise(int B, int H, int C, int stride, int reps, int n_threads) {
    DwBench k;
    memset(&k, 0, sizeof k);
    k.B = B;
    k.n_threads = n_threads;
    /* Stride 2 runs on the zero-padded map (correct_pad: H even -> +1), VALID. */
    const int Hin = stride == 2 ? H + 1 : H;
    depthwise_init(&k.d, Hin, Hin, C, 3, 3, stride, stride == 2 ? PAD_VALID : PAD_SAME);
    const size_t in_n = (size_t)B * Hin * Hin * C, out_n = (size_t)B * k.d.OH * k.d.OW * C, w_n = (size_t)9 * C;
    k.inp = rnd(in_n, 1); k.w = rnd(w_n, 2); k.dout = rnd(out_n, 3);
    k.out = malloc(sizeof(float) * out_n); k.dinp = malloc(sizeof(float) * in_n); k.dw = malloc(sizeof(float) * w_n);
    k.o_out = malloc(sizeof(float) * out_n); k.o_dinp = malloc(sizeof(float) * in_n); k.o_dw = malloc(sizeof(float) * w_n);
    k.scratch = malloc(sizeof(float) * depthwise_scratch_n_floats(&k.d, n_threads));
    dnnl_memory_desc_t src, wei, dst;
    dnnl_dims_t sd = {B, C, Hin, Hin}, wd = {C, 1, 1, 3, 3}, dd = {B, C, k.d.OH, k.d.OW};
    DN(dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, dnnl_nhwc));
    DN(dnnl_memory_desc_init_by_tag(&wei, 5, wd, dnnl_f32, dnnl_hwigo));
    DN(dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, dnnl_nhwc));
    const int pb = (k.d.OH - 1) * stride + 3 - Hin - k.d.pad_top;
    dnnl_dims_t strides = {stride, stride}, pl = {k.d.pad_top, k.d.pad_left}, pr = {pb > 0 ? pb : 0, pb > 0 ? pb : 0};
    dnnl_convolution_desc_t cf, cbd, cbw;
    DN(dnnl_convolution_forward_desc_init(&cf, dnnl_forward_training, dnnl_convolution_direct, &src, &wei, NULL, &dst,
                                          strides, pl, pr));
    DN(dnnl_convolution_backward_data_desc_init(&cbd, dnnl_convolution_direct, &src, &wei, &dst, strides, pl, pr));
    DN(dnnl_convolution_backward_weights_desc_init(&cbw, dnnl_convolution_direct, &src, &wei, NULL, &dst, strides, pl, pr));
    dnnl_primitive_desc_t pf, pbd, pbw;
    DN(dnnl_primitive_desc_create(&pf, &cf, NULL, g_eng, NULL));
    DN(dnnl_primitive_desc_create(&pbd, &cbd, NULL, g_eng, pf));
    DN(dnnl_primitive_desc_create(&pbw, &cbw, NULL, g_eng, pf));
    DN(dnnl_primitive_create(&k.fwd, pf));
    DN(dnnl_primitive_create(&k.bwd_d, pbd));
    DN(dnnl_primitive_create(&k.bwd_w, pbw));
    k.a_fwd[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mem(&src, k.inp)};
    k.a_fwd[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mem(&wei, k.w)};
    k.a_fwd[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, mem(&dst, k.o_out)};
    k.a_bd[0] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, mem(&dst, k.dout)};
    k.a_bd[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, k.a_fwd[1].memory};
    k.a_bd[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, mem(&src, k.o_dinp)};
    k.a_bw[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, k.a_fwd[0].memory};
    k.a_bw[1] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, k.a_bd[0].memory};
    k.a_bw[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, mem(&wei, k.o_dw)};
    const Ms lf = time_ms(dw_loop_fwd, &k, reps), lb = time_ms(dw_loop_bwd, &k, reps);
    const Ms none = {0.0, 0.0};
    const Ms of = g_loops_only ? none : time_ms(dw_dnnl_fwd, &k, reps);
    const Ms ob = g_loops_only ? none : time_ms(dw_dnnl_bwd, &k, reps);
    const double diff = fmax(max_diff(k.out, k.o_out, out_n),
                             fmax(max_diff(k.dinp, k.o_dinp, in_n), max_diff(k.dw, k.o_dw, w_n) / (B * k.d.OH * k.d.OW)));
    printf("depthwise %3dx%-3d C %4d s%d  loops fwd %8.2f (%8.2f) bwd %8.2f (%8.2f) | oneDNN fwd %8.2f (%8.2f)"
           " bwd %8.2f (%8.2f)  %s / %s / %s, max diff %.2g\n",
           Hin, Hin, C, stride, lf.med, lf.min, lb.med, lb.min, of.med, of.min, ob.med, ob.min, impl_name(pf),
           impl_name(pbd), impl_name(pbw), diff);
    printf("RESULT depthwise H=%d C=%d stride=%d loops_fwd_ms=%.3f loops_bwd_ms=%.3f dnnl_fwd_ms=%.3f dnnl_bwd_ms=%.3f"
           " (medians)\n", Hin, C, stride, lf.med, lb.med, of.med, ob.med);
    for (int i = 0; i < 3; i++) {
        dnnl_memory_destroy(k.a_fwd[i].memory);
        if (i != 1) dnnl_memory_destroy(k.a_bd[i].memory);
    }
    dnnl_memory_destroy(k.a_bw[2].memory);
    dnnl_primitive_destroy(k.fwd); dnnl_primitive_destroy(k.bwd_d); dnnl_primitive_destroy(k.bwd_w);
    dnnl_primitive_desc_destroy(pf); dnnl_primitive_desc_destroy(pbd); dnnl_primitive_desc_destroy(pbw);
    free(k.inp); free(k.w); free(k.dout); free(k.out); free(k.dinp); free(k.dw);
    free(k.o_out); free(k.o_dinp); free(k.o_dw); free(k.scratch);
}

/* ---- batch norm ---- */

typedef struct {
    BatchNorm bn;
    size_t rows;
    float *inp, *gamma, *beta, *out, *mean, *var, *inv_std, *dout, *dinp, *dg, *db;
    float *o_out, *o_mean, *o_var, *o_dinp, *o_dg, *o_db;
    double *sums;
    dnnl_primitive_t fwd, bwd;
    dnnl_exec_arg_t a_fwd[6], a_bwd[9];
} BnBench;

static void bn_loop_fwd(void *p) {
    BnBench *k = p;
    batchnorm_forward_train(k->out, k->mean, k->var, k->inv_std, k->sums, k->inp, k->gamma, k->beta, &k->bn, k->rows);
}
static void bn_loop_bwd(void *p) {
    BnBench *k = p;
    memset(k->dg, 0, sizeof(float) * k->bn.C);
    memset(k->db, 0, sizeof(float) * k->bn.C);
    batchnorm_backward(k->dinp, k->dg, k->db, k->sums, k->dout, k->inp, k->mean, k->inv_std, k->gamma, &k->bn, k->rows);
}
static void bn_dnnl_fwd(void *p) { BnBench *k = p; DN(dnnl_primitive_execute(k->fwd, g_stream, 6, k->a_fwd)); DN(dnnl_stream_wait(g_stream)); }
static void bn_dnnl_bwd(void *p) { BnBench *k = p; DN(dnnl_primitive_execute(k->bwd, g_stream, 9, k->a_bwd)); DN(dnnl_stream_wait(g_stream)); }

static void bench_batchnorm(int B, int H, int C, int reps) {
    BnBench k;
    memset(&k, 0, sizeof k);
    k.bn = (BatchNorm){C, 0.999, 1e-3f, ACT_NONE};
    k.rows = (size_t)B * H * H;
    const size_t n = k.rows * C;
    k.inp = rnd(n, 4); k.dout = rnd(n, 5); k.gamma = rnd(C, 6); k.beta = rnd(C, 7);
    k.out = malloc(sizeof(float) * n); k.dinp = malloc(sizeof(float) * n);
    k.o_out = malloc(sizeof(float) * n); k.o_dinp = malloc(sizeof(float) * n);
    k.mean = malloc(sizeof(float) * C); k.var = malloc(sizeof(float) * C); k.inv_std = malloc(sizeof(float) * C);
    k.dg = malloc(sizeof(float) * C); k.db = malloc(sizeof(float) * C);
    k.o_mean = malloc(sizeof(float) * C); k.o_var = malloc(sizeof(float) * C);
    k.o_dg = malloc(sizeof(float) * C); k.o_db = malloc(sizeof(float) * C);
    k.sums = malloc(sizeof(double) * batchnorm_scratch_n_doubles(C));
    dnnl_memory_desc_t data, vec;
    dnnl_dims_t dd = {B, C, H, H}, vd = {C};
    DN(dnnl_memory_desc_init_by_tag(&data, 4, dd, dnnl_f32, dnnl_nhwc));
    DN(dnnl_memory_desc_init_by_tag(&vec, 1, vd, dnnl_f32, dnnl_a));
    const unsigned flags = dnnl_use_scale | dnnl_use_shift;
    dnnl_batch_normalization_desc_t bf, bb;
    DN(dnnl_batch_normalization_forward_desc_init(&bf, dnnl_forward_training, &data, k.bn.epsilon, flags));
    DN(dnnl_batch_normalization_backward_desc_init(&bb, dnnl_backward, &data, &data, k.bn.epsilon, flags));
    dnnl_primitive_desc_t pf, pb;
    DN(dnnl_primitive_desc_create(&pf, &bf, NULL, g_eng, NULL));
    DN(dnnl_primitive_desc_create(&pb, &bb, NULL, g_eng, pf));
    DN(dnnl_primitive_create(&k.fwd, pf));
    DN(dnnl_primitive_create(&k.bwd, pb));
    dnnl_memory_t m_src = mem(&data, k.inp), m_dst = mem(&data, k.o_out), m_scale = mem(&vec, k.gamma);
    dnnl_memory_t m_shift = mem(&vec, k.beta), m_mean = mem(&vec, k.o_mean), m_var = mem(&vec, k.o_var);
    dnnl_memory_t m_ddst = mem(&data, k.dout), m_dsrc = mem(&data, k.o_dinp), m_dscale = mem(&vec, k.o_dg);
    dnnl_memory_t m_dshift = mem(&vec, k.o_db);
    k.a_fwd[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, m_src};
    k.a_fwd[1] = (dnnl_exec_arg_t){DNNL_ARG_DST, m_dst};
    k.a_fwd[2] = (dnnl_exec_arg_t){DNNL_ARG_SCALE, m_scale};
    k.a_fwd[3] = (dnnl_exec_arg_t){DNNL_ARG_SHIFT, m_shift};
    k.a_fwd[4] = (dnnl_exec_arg_t){DNNL_ARG_MEAN, m_mean};
    k.a_fwd[5] = (dnnl_exec_arg_t){DNNL_ARG_VARIANCE, m_var};
    k.a_bwd[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, m_src};
    k.a_bwd[1] = (dnnl_exec_arg_t){DNNL_ARG_MEAN, m_mean};
    k.a_bwd[2] = (dnnl_exec_arg_t){DNNL_ARG_VARIANCE, m_var};
    k.a_bwd[3] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, m_ddst};
    k.a_bwd[4] = (dnnl_exec_arg_t){DNNL_ARG_SCALE, m_scale};
    k.a_bwd[5] = (dnnl_exec_arg_t){DNNL_ARG_SHIFT, m_shift};
    k.a_bwd[6] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, m_dsrc};
    k.a_bwd[7] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SCALE, m_dscale};
    k.a_bwd[8] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SHIFT, m_dshift};
    const Ms lf = time_ms(bn_loop_fwd, &k, reps), lb = time_ms(bn_loop_bwd, &k, reps);
    const Ms none = {0.0, 0.0};
    const Ms of = g_loops_only ? none : time_ms(bn_dnnl_fwd, &k, reps);
    const Ms ob = g_loops_only ? none : time_ms(bn_dnnl_bwd, &k, reps);
    const double diff = fmax(fmax(max_diff(k.out, k.o_out, n), max_diff(k.var, k.o_var, C)),
                             fmax(max_diff(k.dinp, k.o_dinp, n), max_diff(k.dg, k.o_dg, C) / k.rows));
    printf("batchnorm %3dx%-3d C %4d     loops fwd %8.2f (%8.2f) bwd %8.2f (%8.2f) | oneDNN fwd %8.2f (%8.2f)"
           " bwd %8.2f (%8.2f)  %s / %s, max diff %.2g\n",
           H, H, C, lf.med, lf.min, lb.med, lb.min, of.med, of.min, ob.med, ob.min, impl_name(pf), impl_name(pb), diff);
    printf("RESULT batchnorm H=%d C=%d loops_fwd_ms=%.3f loops_bwd_ms=%.3f dnnl_fwd_ms=%.3f dnnl_bwd_ms=%.3f (medians)\n",
           H, C, lf.med, lb.med, of.med, ob.med);
    dnnl_memory_t ms[] = {m_src, m_dst, m_scale, m_shift, m_mean, m_var, m_ddst, m_dsrc, m_dscale, m_dshift};
    for (int i = 0; i < 10; i++) dnnl_memory_destroy(ms[i]);
    dnnl_primitive_destroy(k.fwd); dnnl_primitive_destroy(k.bwd);
    dnnl_primitive_desc_destroy(pf); dnnl_primitive_desc_destroy(pb);
    free(k.inp); free(k.dout); free(k.gamma); free(k.beta); free(k.out); free(k.dinp); free(k.o_out); free(k.o_dinp);
    free(k.mean); free(k.var); free(k.inv_std); free(k.dg); free(k.db); free(k.o_mean); free(k.o_var); free(k.o_dg);
    free(k.o_db); free(k.sums);
}

int main(int argc, char **argv) {
    int batch = 64, reps = 7, threads = 2;
    const char *only = "";
    const Flag flags[] = {
        {"batch", FLAG_INT, &batch, "examples per pass", FLAG_RANGE(1, 4096, "[]", NULL)},
        {"reps", FLAG_INT, &reps, "runs of each pass (the median is reported)", FLAG_RANGE(1, 10000, "[]", NULL)},
        {"threads", FLAG_INT, &threads, "OpenMP threads", FLAG_RANGE(1, 1024, "[]", NULL)},
        {"only", FLAG_STRING, &only, "depthwise or batchnorm alone (\"\": both)"},
        {"loops_only", FLAG_BOOL, &g_loops_only, "skip oneDNN's timings (printed as 0)"},
    };
    const int n_flags = (int)(sizeof flags / sizeof flags[0]);
    char *pos[argc > 0 ? argc : 1];
    int n_pos = 0;
    const int done = bench_parse_flags("bench_layers", "[flags]", flags, n_flags, argc, argv, pos, &n_pos, 0);
    if (done >= 0) return done;
    if (only[0] && strcmp(only, "depthwise") && strcmp(only, "batchnorm")) {
        fprintf(stderr, "bench_layers: --only depthwise or batchnorm (see --help)\n");
        return 2;
    }
    omp_set_num_threads(threads);
    DN(dnnl_engine_create(&g_eng, dnnl_cpu, 0));
    DN(dnnl_stream_create(&g_stream, g_eng, dnnl_stream_default_flags));
    printf("batch %d, %d threads, milliseconds: median of %d runs (minimum in brackets)\n", batch, threads, reps);
    /* MobileNetV2 (alpha 1) maps at 32x32 and 96x96 inputs: after Conv1
     * (H/2, 32 and 96 expanded channels), block 3 (H/4, 144), block 6 (H/8, 192). */
    const int inputs[2] = {32, 96};
    for (int i = 0; i < 2; i++) {
        const int S = inputs[i];
        printf("-- input %dx%d\n", S, S);
        if (strcmp(only, "batchnorm")) {
            bench_depthwise(batch, S / 2, 32, 1, reps, threads);
            bench_depthwise(batch, S / 2, 96, 2, reps, threads);
            bench_depthwise(batch, S / 4, 144, 1, reps, threads);
            bench_depthwise(batch, S / 8, 192, 1, reps, threads);
        }
        if (strcmp(only, "depthwise")) {
            bench_batchnorm(batch, S / 2, 96, reps);
            bench_batchnorm(batch, S / 4, 144, reps);
            bench_batchnorm(batch, S / 8, 192, reps);
        }
    }
    dnnl_stream_destroy(g_stream);
    dnnl_engine_destroy(g_eng);
    return 0;
}
