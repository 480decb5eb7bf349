/* conv2d_dnnl.c — conv2d as the CPU executor runs it: each pass (forward,
 * backward data, backward weights) through oneDNN's convolution primitive
 * or through conv2d.c's loops, as conv_algo.c's CPU table picks (layers.h,
 * "conv2d_run_*").
 *
 * Where it sits: model/; layer_table.c's conv2d node calls it; conv2d.c's
 * loops stay the readable version and the tests' oracle
 * (tests/test_conv_dnnl.c, tests/model_reference.c).
 * How: activations stay NHWC (oneDNN's nhwc tag, no reorder) for the
 * direct kernels; the weights are HWIO for Tower but oneDNN's kernels want
 * a blocked layout of their own choosing (format "any"), so the forward and
 * backward-data passes reorder the weights into scratch and backward
 * weights reorders its gradient back into HWIO.  Where conv_cpu_winograd
 * says so, the passes model/winograd.c does not take (below) run oneDNN's
 * Winograd kernels instead, which take blocked activations only: each pass
 * reorders its activation inputs from NHWC into scratch and its activation
 * output back (the reorders are
 * in the measured gain); where this oneDNN has no Winograd kernel (no
 * AVX-512) the direct rule applies, and the 3x3 stride-1 layers
 * conv_cpu_winograd_f2 names run model/winograd.c's own F(4x4, 3x3)
 * (F(2x2, 3x3) on maps of 1 or 2 a side) instead, every pass (with AVX-512 too where the map is 2x2, which
 * oneDNN's Winograd refuses, and, of the layers oneDNN's Winograd takes, the passes with at most 128
 * channels into their products and backward weights up to 256 in); the 5x5 stride-1 layers it names run
 * model/winograd.c's F(4x4, 5x5) on every CPU (oneDNN has no Winograd
 * kernel for 5x5).  A ReLU after the bias is a post-op
 * forward; its mask is applied to dout in place before the backward
 * primitives (the executor allows a node to clobber dout).  Primitives are created once per
 * (geometry, bias, activation, batch, threads) and cached for the process
 * (a fixed table under a mutex, never freed: a few dozen entries per
 * network); they run with a user scratchpad carved from the node's scratch,
 * so concurrent towers share primitives safely and the memory shows in the
 * node's scratch size.  A batch whose primitive would need more scratch
 * than the node was sized for (a batch other than max_batch), a full cache
 * or a oneDNN error takes the loops: slower, never wrong.
 * Threads: oneDNN (OpenMP runtime) takes omp_get_max_threads(); it is set
 * to min(that, n_threads) around creation and each call, then restored.
 * What it does not do: keep activations blocked between layers (each
 * Winograd pass reorders its own), allocate tensors (oneDNN allocates its
 * small per-call bookkeeping: memory objects, a stream).
 */
#include "base/flags.h"
#include "model/conv_algo.h"
#include "model/layers.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- the primitive cache -------------------------------------------------- */

typedef struct {
    int H, W, C_in, KH, KW, C_out, stride_h, stride_w, pad_top, pad_left, OH, OW;
    int has_bias, relu, B, n_threads;
} ConvKey;

/* A pass's two activations, in argument order: forward (src in, dst out),
 * backward data (diff_dst in, diff_src out), backward weights (src in,
 * diff_dst in). */
static const int act_arg[CONV_PASS_COUNT][2] = {
    {DNNL_ARG_SRC, DNNL_ARG_DST},
    {DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC},
    {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST},
};
static const int act_is_out[CONV_PASS_COUNT][2] = {{0, 1}, {0, 1}, {0, 0}};

/* One primitive per pass, or NULL where the table says loops. */
typedef struct {
    ConvKey key;
    int failed;                              /* creation failed: loops for every pass */
    int winograd;                            /* the passes with a primitive run oneDNN's Winograd kernels on
                                                blocked activations (f2's passes run winograd.c's instead) */
    dnnl_primitive_t prim[CONV_PASS_COUNT];  /* NULL: that pass runs the loops */
    dnnl_primitive_t to_blocked[2];          /* HWIO -> forward's / backward data's layout; NULL: HWIO already */
    dnnl_primitive_t dw_to_hwio;             /* backward weights' gradient layout -> HWIO; NULL: HWIO already */
    dnnl_memory_desc_t src, dst, bias, hwio; /* plain descriptors */
    dnnl_memory_desc_t wei[CONV_PASS_COUNT]; /* each pass's weights (gradient) layout */
    size_t pad_n_bytes[CONV_PASS_COUNT];     /* each pass's scratchpad, its reorders' included */
    size_t wei_n_bytes[CONV_PASS_COUNT];     /* each pass's blocked weights buffer (0: HWIO) */
    /* Winograd only: each pass's activations (act_arg) in their blocked layout, and the reorder of each from
     * NHWC (an input) or back to NHWC (an output); NULL where the layout is NHWC already. */
    dnnl_memory_desc_t act[CONV_PASS_COUNT][2];
    dnnl_primitive_t act_reorder[CONV_PASS_COUNT][2];
    size_t act_n_bytes[CONV_PASS_COUNT][2];  /* each blocked activation's buffer (0: NHWC, none) */
    /* Passes run by winograd.c's own kernels instead (prim[p] NULL there), and the scratch they
     * take. */
    int f2[CONV_PASS_COUNT];
    size_t f2_n_bytes;
    /* Passes run by conv_first.c's direct kernels instead (prim[p] NULL there), and their scratch. */
    int first[CONV_PASS_COUNT];
    size_t first_n_bytes;
} ConvEntry;

#define CONV_CACHE_N 512
static ConvEntry g_cache[CONV_CACHE_N];
static int g_cache_n;
static pthread_mutex_t g_cache_lock = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t g_engine;
static int g_loops_only; /* conv2d_run_set_loops_only */

static size_t align64(size_t n_bytes) { return (n_bytes + 63) / 64 * 64; }

static ConvKey key_of(const Conv2d *c, int has_bias, int B, int n_threads) {
    ConvKey k;
    memset(&k, 0, sizeof k);
    k.H = c->H; k.W = c->W; k.C_in = c->C_in; k.KH = c->KH; k.KW = c->KW; k.C_out = c->C_out;
    k.stride_h = c->stride_h; k.stride_w = c->stride_w; k.pad_top = c->pad_top; k.pad_left = c->pad_left;
    k.OH = c->OH; k.OW = c->OW; k.has_bias = has_bias; k.relu = c->act == ACT_RELU; k.B = B;
    k.n_threads = conv_cpu_team(n_threads);
    return k;
}

/* The layer's geometry back from its key. */
static Conv2d conv_of(const ConvKey *k) {
    Conv2d c;
    memset(&c, 0, sizeof c);
    c.H = k->H; c.W = k->W; c.C_in = k->C_in; c.KH = k->KH; c.KW = k->KW; c.C_out = k->C_out;
    c.stride_h = k->stride_h; c.stride_w = k->stride_w; c.OH = k->OH; c.OW = k->OW;
    c.pad_top = k->pad_top; c.pad_left = k->pad_left; c.act = k->relu ? ACT_RELU : ACT_NONE;
    return c;
}

static ConvCpuShape shape_of(const ConvKey *k) {
    return (ConvCpuShape){k->C_in, k->C_out, k->KH, k->KW, k->OH, k->OW, k->stride_h, k->stride_w, k->B};
}

static size_t scratchpad_n_bytes(const_dnnl_primitive_desc_t pd) {
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    return md ? dnnl_memory_desc_get_size(md) : 0;
}

static const char *impl_of(const_dnnl_primitive_desc_t pd) {
    const char *s = "";
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success || !s) return "";
    return s;
}

/* A reorder from `from` to `to`, or NULL when the layouts are equal; its
 * scratchpad added to *pad_n_bytes.  Returns -1 on a oneDNN error. */
static int make_reorder(dnnl_primitive_t *out, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                        const_dnnl_primitive_attr_t attr, size_t *pad_n_bytes) {
    *out = NULL;
    if (dnnl_memory_desc_equal(from, to)) return 0;
    dnnl_primitive_desc_t pd;
    if (dnnl_reorder_primitive_desc_create(&pd, from, g_engine, to, g_engine, attr) != dnnl_success) return -1;
    size_t pad = scratchpad_n_bytes(pd);
    dnnl_status_t st = dnnl_primitive_create(out, pd);
    dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success) return -1;
    if (pad > *pad_n_bytes) *pad_n_bytes = pad;
    return 0;
}

/* The NHWC descriptor of the pass's activation i (act_arg). */
static const dnnl_memory_desc_t *act_plain(const ConvEntry *e, ConvPass p, int i) {
    return act_arg[p][i] == DNNL_ARG_SRC || act_arg[p][i] == DNNL_ARG_DIFF_SRC ? &e->src : &e->dst;
}

/* The pass's activation i (act_arg) as the primitive pd takes it. */
static const dnnl_memory_desc_t *pass_act_md(const_dnnl_primitive_desc_t pd, ConvPass p, int i) {
    return dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, act_arg[p][i]);
}

/* Fill e's primitives for e->key with convolution algorithm alg (threads
 * already set by the caller): direct, each pass where conv_cpu_pick says
 * oneDNN, on NHWC activations; Winograd, every pass, on the blocked
 * activations oneDNN chooses (any pass it cannot create fails the whole). */
static int entry_create(ConvEntry *e, dnnl_alg_kind_t alg) {
    const ConvKey *k = &e->key;
    const ConvCpuShape shape = shape_of(k);
    const int wino = alg == dnnl_convolution_winograd;
    e->winograd = wino;
    dnnl_dims_t sd = {k->B, k->C_in, k->H, k->W}, wd = {k->C_out, k->C_in, k->KH, k->KW}, bd = {k->C_out},
                dd = {k->B, k->C_out, k->OH, k->OW};
    dnnl_memory_desc_t any, src_any, dst_any;
    if (dnnl_memory_desc_init_by_tag(&e->src, 4, sd, dnnl_f32, dnnl_nhwc) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&e->dst, 4, dd, dnnl_f32, dnnl_nhwc) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&e->hwio, 4, wd, dnnl_f32, dnnl_hwio) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&e->bias, 1, bd, dnnl_f32, dnnl_a) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&any, 4, wd, dnnl_f32, dnnl_format_tag_any) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&src_any, 4, sd, dnnl_f32, dnnl_format_tag_any) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&dst_any, 4, dd, dnnl_f32, dnnl_format_tag_any) != dnnl_success)
        return -1;
    const dnnl_memory_desc_t *src = wino ? &src_any : &e->src, *dst = wino ? &dst_any : &e->dst;
    /* TensorFlow's padding after the last row/column; a negative remainder
     * (VALID with a stride that skips the last cells) is 0 for oneDNN. */
    int pb = (k->OH - 1) * k->stride_h + k->KH - k->H - k->pad_top;
    int pr = (k->OW - 1) * k->stride_w + k->KW - k->W - k->pad_left;
    dnnl_dims_t st = {k->stride_h, k->stride_w}, pl = {k->pad_top, k->pad_left};
    dnnl_dims_t prr = {pb > 0 ? pb : 0, pr > 0 ? pr : 0};
    const dnnl_memory_desc_t *bp = k->has_bias ? &e->bias : NULL;
    dnnl_convolution_desc_t desc[CONV_PASS_COUNT];
    if (dnnl_convolution_forward_desc_init(&desc[CONV_PASS_FORWARD], dnnl_forward_training, alg, src, &any, bp, dst,
                                           st, pl, prr) != dnnl_success ||
        dnnl_convolution_backward_data_desc_init(&desc[CONV_PASS_BACKWARD_DATA], alg, src, &any, dst, st, pl, prr) !=
            dnnl_success ||
        dnnl_convolution_backward_weights_desc_init(&desc[CONV_PASS_BACKWARD_WEIGHTS], alg, src, &any, bp, dst, st,
                                                    pl, prr) != dnnl_success)
        return -1;
    dnnl_primitive_attr_t attr, fwd_attr;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success) return -1;
    if (dnnl_primitive_attr_create(&fwd_attr) != dnnl_success) {
        dnnl_primitive_attr_destroy(attr);
        return -1;
    }
    int rc = 0;
    dnnl_post_ops_t po = NULL;
    rc |= dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success;
    rc |= dnnl_primitive_attr_set_scratchpad_mode(fwd_attr, dnnl_scratchpad_mode_user) != dnnl_success;
    if (k->relu) {
        rc |= dnnl_post_ops_create(&po) != dnnl_success;
        if (!rc) rc |= dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f) != dnnl_success;
        if (!rc) rc |= dnnl_primitive_attr_set_post_ops(fwd_attr, po) != dnnl_success;
        if (po) dnnl_post_ops_destroy(po);
    }
    dnnl_primitive_desc_t fwd_pd = NULL;
    if (!rc)
        rc |= dnnl_primitive_desc_create(&fwd_pd, &desc[CONV_PASS_FORWARD], fwd_attr, g_engine, NULL) != dnnl_success;
    for (int p = 0; p < CONV_PASS_COUNT && !rc; p++) {
        dnnl_primitive_desc_t pd = fwd_pd;
        if (p != CONV_PASS_FORWARD &&
            dnnl_primitive_desc_create(&pd, &desc[p], attr, g_engine, fwd_pd) != dnnl_success) {
            rc = 1;
            break;
        }
        if (wino ? strstr(impl_of(pd), "wino") != NULL
                 : conv_cpu_pick((ConvPass)p, &shape, impl_of(pd)) == CONV_CPU_ONEDNN) {
            const dnnl_query_t q = p == CONV_PASS_BACKWARD_WEIGHTS ? dnnl_query_diff_weights_md : dnnl_query_weights_md;
            e->wei[p] = *dnnl_primitive_desc_query_md(pd, q, 0);
            e->pad_n_bytes[p] = scratchpad_n_bytes(pd);
            rc |= dnnl_primitive_create(&e->prim[p], pd) != dnnl_success;
            if (!rc && p != CONV_PASS_BACKWARD_WEIGHTS)
                rc |= make_reorder(&e->to_blocked[p], &e->hwio, &e->wei[p], attr, &e->pad_n_bytes[p]) != 0;
            if (!rc && p == CONV_PASS_BACKWARD_WEIGHTS)
                rc |= make_reorder(&e->dw_to_hwio, &e->wei[p], &e->hwio, attr, &e->pad_n_bytes[p]) != 0;
            if (!dnnl_memory_desc_equal(&e->wei[p], &e->hwio))
                e->wei_n_bytes[p] = dnnl_memory_desc_get_size(&e->wei[p]);
            for (int i = 0; i < 2 && wino && !rc; i++) {
                const dnnl_memory_desc_t *plain = act_plain(e, (ConvPass)p, i);
                e->act[p][i] = *pass_act_md(pd, (ConvPass)p, i);
                rc |= act_is_out[p][i] ? make_reorder(&e->act_reorder[p][i], &e->act[p][i], plain, attr,
                                                      &e->pad_n_bytes[p]) != 0
                                       : make_reorder(&e->act_reorder[p][i], plain, &e->act[p][i], attr,
                                                      &e->pad_n_bytes[p]) != 0;
                if (e->act_reorder[p][i]) e->act_n_bytes[p][i] = dnnl_memory_desc_get_size(&e->act[p][i]);
            }
        } else if (wino) {
            rc = 1; /* oneDNN took another kernel for a Winograd descriptor: not what was measured */
        }
        if (p != CONV_PASS_FORWARD) dnnl_primitive_desc_destroy(pd);
    }
    if (fwd_pd) dnnl_primitive_desc_destroy(fwd_pd);
    dnnl_primitive_attr_destroy(attr);
    dnnl_primitive_attr_destroy(fwd_attr);
    return rc ? -1 : 0;
}

static void entry_drop(ConvEntry *e) {
    for (int p = 0; p < CONV_PASS_COUNT; p++)
        if (e->prim[p]) dnnl_primitive_destroy(e->prim[p]);
    for (int i = 0; i < 2; i++)
        if (e->to_blocked[i]) dnnl_primitive_destroy(e->to_blocked[i]);
    if (e->dw_to_hwio) dnnl_primitive_destroy(e->dw_to_hwio);
    for (int p = 0; p < CONV_PASS_COUNT; p++)
        for (int i = 0; i < 2; i++)
            if (e->act_reorder[p][i]) dnnl_primitive_destroy(e->act_reorder[p][i]);
    ConvKey k = e->key;
    memset(e, 0, sizeof *e);
    e->key = k;
    e->failed = 1;
}

/* 1 when this oneDNN runs its Winograd kernels (AVX-512 ones, which ONEDNN_MAX_CPU_ISA may hold back): asked
 * once, for vgg11's 4x4 layer at batch 64 (a shape conv_cpu_winograd takes).  Called under g_cache_lock with
 * the engine made. */
static int onednn_has_winograd(void) {
    static int known, has;
    if (known) return has;
    known = 1;
    ConvEntry probe;
    memset(&probe, 0, sizeof probe);
    probe.key = (ConvKey){4, 4, 256, 3, 3, 512, 1, 1, 1, 1, 4, 4, 1, 0, 64, 1};
    has = entry_create(&probe, dnnl_convolution_winograd) == 0;
    entry_drop(&probe);
    return has;
}

/* Pass p's oneDNN primitive, if e has one, destroyed with its weight reorder: another path takes the pass. */
static void pass_drop(ConvEntry *e, ConvPass p) {
    if (!e->prim[p]) return;
    dnnl_primitive_destroy(e->prim[p]);
    e->prim[p] = NULL;
    dnnl_primitive_t *reorder = p == CONV_PASS_BACKWARD_WEIGHTS ? &e->dw_to_hwio : &e->to_blocked[p];
    if (*reorder) dnnl_primitive_destroy(*reorder);
    *reorder = NULL;
    e->wei_n_bytes[p] = e->pad_n_bytes[p] = 0;
}

/* e's primitives: Winograd where conv_cpu_winograd says so, unless
 * TOWER_CONV_DIRECT is on (base/flags.h's rule) or this oneDNN has no
 * Winograd kernel for it; else the direct rule; else (failed) the loops.
 * The passes conv_cpu_winograd_f2 names (told whether this oneDNN has
 * Winograd kernels, i.e. AVX-512 ones) run winograd.c's own kernels
 * (F(2x2, 3x3), F(4x4, 3x3), F(4x4, 5x5)) instead of whatever oneDNN or the loops would (unless
 * TOWER_CONV_WINOGRAD_F2=0). */
static void entry_fill(ConvEntry *e) {
    const ConvCpuShape shape = shape_of(&e->key);
    int done = 0;
    if (conv_cpu_winograd(&shape) && !flags_env_on("TOWER_CONV_DIRECT")) {
        if (entry_create(e, dnnl_convolution_winograd) == 0) done = 1;
        else {
            entry_drop(e);
            e->failed = 0;
        }
    }
    if (!done && entry_create(e, dnnl_convolution_direct) != 0) entry_drop(e);
    const Conv2d c = conv_of(&e->key);
    if (conv_first_applies(&c) && flags_env_default_on("TOWER_CONV_FIRST")) {
        int n_first = 0;
        for (int p = 0; p < CONV_PASS_COUNT; p++) {
            e->first[p] = conv_cpu_first((ConvPass)p, &shape, conv_cpu_lanes());
            n_first += e->first[p];
            if (e->first[p]) pass_drop(e, (ConvPass)p);
        }
        if (n_first) e->first_n_bytes = sizeof(float) * conv_first_scratch_n_floats(&c, e->key.B, e->key.n_threads);
    }
    if (!winograd_applies(&c) || !flags_env_default_on("TOWER_CONV_WINOGRAD_F2")) return;
    const int avx512 = onednn_has_winograd(); /* oneDNN's Winograd kernels are AVX-512 ones */
    int n_f2 = 0;
    for (int p = 0; p < CONV_PASS_COUNT; p++) {
        e->f2[p] = !e->first[p] && conv_cpu_winograd_f2((ConvPass)p, &shape, avx512);
        n_f2 += e->f2[p];
        if (e->f2[p]) pass_drop(e, (ConvPass)p);
    }
    if (n_f2) e->f2_n_bytes = sizeof(float) * winograd_scratch_n_floats(&c, e->key.B, e->key.n_threads);
}

/* The entry for key, created on first use; NULL when the cache is full or
 * oneDNN has no engine (then every pass runs the loops). */
static const ConvEntry *entry_get(const ConvKey *key) {
    pthread_mutex_lock(&g_cache_lock);
    ConvEntry *e = NULL;
    for (int i = 0; i < g_cache_n; i++)
        if (!memcmp(&g_cache[i].key, key, sizeof *key)) e = &g_cache[i];
    if (!e && g_cache_n < CONV_CACHE_N) {
        if (!g_engine && dnnl_engine_create(&g_engine, dnnl_cpu, 0) != dnnl_success) g_engine = NULL;
        if (g_engine) {
            e = &g_cache[g_cache_n++];
            memset(e, 0, sizeof *e);
            e->key = *key;
            const int saved = omp_get_max_threads();
            omp_set_num_threads(key->n_threads);
            entry_fill(e);
            omp_set_num_threads(saved);
        }
    }
    pthread_mutex_unlock(&g_cache_lock);
    return e;
}

/* Scratch layout of one pass: [blocked weights][blocked activation 0][blocked activation 1][scratchpad] (the
 * activations only for Winograd). */
static size_t pass_act_at(const ConvEntry *e, ConvPass p, int i) {
    size_t at = align64(e->wei_n_bytes[p]);
    for (int j = 0; j < i; j++) at += align64(e->act_n_bytes[p][j]);
    return at;
}

static size_t pass_pad_at(const ConvEntry *e, ConvPass p) { return pass_act_at(e, p, 2); }

static size_t pass_n_bytes(const ConvEntry *e, ConvPass p) {
    if (e->f2[p]) return e->f2_n_bytes;
    if (e->first[p]) return e->first_n_bytes;
    return e->prim[p] ? pass_pad_at(e, p) + align64(e->pad_n_bytes[p]) : 0;
}

/* ---- running a pass ----------------------------------------------------------- */

static int mem_make(dnnl_memory_t *m, const dnnl_memory_desc_t *md, void *p) {
    return dnnl_memory_create(m, md, g_engine, p) == dnnl_success ? 0 : -1;
}

/* Run prim (with args[0..n_args), plus DNNL_ARG_SCRATCHPAD when pad is
 * non-NULL) on a fresh stream; the memories in args are destroyed. */
static int run(dnnl_primitive_t prim, dnnl_exec_arg_t *args, int n_args, const ConvEntry *e, void *pad) {
    int rc = 0;
    for (int i = 0; i < n_args; i++) rc |= args[i].memory == NULL;
    dnnl_memory_t m_pad = NULL;
    const dnnl_memory_desc_t *pad_md = NULL;
    if (!rc && pad) {
        const_dnnl_primitive_desc_t pd;
        rc |= dnnl_primitive_get_primitive_desc(prim, &pd) != dnnl_success;
        if (!rc) pad_md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        if (!rc && pad_md && dnnl_memory_desc_get_size(pad_md) > 0) {
            rc |= mem_make(&m_pad, pad_md, pad);
            args[n_args++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, m_pad};
        }
    }
    dnnl_stream_t s = NULL;
    if (!rc) rc |= dnnl_stream_create(&s, g_engine, dnnl_stream_default_flags) != dnnl_success;
    if (!rc) {
        const int saved = omp_get_max_threads();
        omp_set_num_threads(e->key.n_threads);
        rc |= dnnl_primitive_execute(prim, s, n_args, args) != dnnl_success;
        rc |= dnnl_stream_wait(s) != dnnl_success;
        omp_set_num_threads(saved);
    }
    if (s) dnnl_stream_destroy(s);
    for (int i = 0; i < n_args; i++)
        if (args[i].memory) dnnl_memory_destroy(args[i].memory);
    return rc ? -1 : 0;
}

/* The weights in pass p's layout: w itself when HWIO, else reordered into blk. */
static int weights_for(const ConvEntry *e, ConvPass p, const float *w, void *blk, void *pad, const void **out) {
    *out = w;
    if (!e->to_blocked[p]) return 0;
    dnnl_exec_arg_t a[3];
    dnnl_memory_t from = NULL, to = NULL;
    mem_make(&from, &e->hwio, (void *)w);
    mem_make(&to, &e->wei[p], blk);
    a[0] = (dnnl_exec_arg_t){DNNL_ARG_FROM, from};
    a[1] = (dnnl_exec_arg_t){DNNL_ARG_TO, to};
    *out = blk;
    return run(e->to_blocked[p], a, 2, e, pad);
}

/* The pass's activation i as its primitive takes it: the NHWC tensor at `plain` itself (direct kernels, or a
 * layout that is NHWC already), or its blocked copy in scratch: an input reordered there now, an output to be
 * reordered back by act_out.  The memory object goes to *m. */
static int act_in(const ConvEntry *e, ConvPass p, int i, void *plain, char *scratch, dnnl_memory_t *m) {
    if (!e->act_reorder[p][i]) return mem_make(m, act_plain(e, p, i), plain);
    char *blk = scratch + pass_act_at(e, p, i), *pad = scratch + pass_pad_at(e, p);
    if (mem_make(m, &e->act[p][i], blk) != 0) return -1;
    if (act_is_out[p][i]) return 0;
    dnnl_exec_arg_t a[2];
    dnnl_memory_t from = NULL, to = NULL;
    mem_make(&from, act_plain(e, p, i), plain);
    mem_make(&to, &e->act[p][i], blk);
    a[0] = (dnnl_exec_arg_t){DNNL_ARG_FROM, from};
    a[1] = (dnnl_exec_arg_t){DNNL_ARG_TO, to};
    return run(e->act_reorder[p][i], a, 2, e, pad);
}

/* An output activation computed into its blocked copy: back to NHWC at `plain`. */
static int act_out(const ConvEntry *e, ConvPass p, int i, void *plain, char *scratch) {
    if (!e->act_reorder[p][i]) return 0;
    dnnl_exec_arg_t a[2];
    dnnl_memory_t from = NULL, to = NULL;
    mem_make(&from, &e->act[p][i], scratch + pass_act_at(e, p, i));
    mem_make(&to, act_plain(e, p, i), plain);
    a[0] = (dnnl_exec_arg_t){DNNL_ARG_FROM, from};
    a[1] = (dnnl_exec_arg_t){DNNL_ARG_TO, to};
    return run(e->act_reorder[p][i], a, 2, e, scratch + pass_pad_at(e, p));
}

static int pass_forward(const ConvEntry *e, float *out, char *scratch, const float *inp, const float *weight,
                        const float *bias) {
    const ConvPass p = CONV_PASS_FORWARD;
    char *blk = scratch, *pad = scratch + pass_pad_at(e, p);
    const void *w;
    if (weights_for(e, p, weight, blk, pad, &w) != 0) return -1;
    dnnl_exec_arg_t a[5];
    dnnl_memory_t m[4] = {NULL, NULL, NULL, NULL};
    if (act_in(e, p, 0, (void *)inp, scratch, &m[0]) != 0 || act_in(e, p, 1, out, scratch, &m[2]) != 0) {
        for (int i = 0; i < 4; i++)
            if (m[i]) dnnl_memory_destroy(m[i]);
        return -1;
    }
    mem_make(&m[1], &e->wei[p], (void *)w);
    a[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, m[0]};
    a[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, m[1]};
    a[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, m[2]};
    int n = 3;
    if (e->key.has_bias) {
        mem_make(&m[3], &e->bias, (void *)bias);
        a[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, m[3]};
    }
    if (run(e->prim[p], a, n, e, pad) != 0) return -1;
    return act_out(e, p, 1, out, scratch);
}

static int pass_backward_data(const ConvEntry *e, float *dinp, char *scratch, const float *g, const float *weight) {
    const ConvPass p = CONV_PASS_BACKWARD_DATA;
    char *blk = scratch, *pad = scratch + pass_pad_at(e, p);
    const void *w;
    if (weights_for(e, p, weight, blk, pad, &w) != 0) return -1;
    dnnl_exec_arg_t a[4];
    dnnl_memory_t m[3] = {NULL, NULL, NULL};
    if (act_in(e, p, 0, (void *)g, scratch, &m[0]) != 0 || act_in(e, p, 1, dinp, scratch, &m[2]) != 0) {
        for (int i = 0; i < 3; i++)
            if (m[i]) dnnl_memory_destroy(m[i]);
        return -1;
    }
    mem_make(&m[1], &e->wei[p], (void *)w);
    a[0] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, m[0]};
    a[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, m[1]};
    a[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, m[2]};
    if (run(e->prim[p], a, 3, e, pad) != 0) return -1;
    return act_out(e, p, 1, dinp, scratch);
}

static int pass_backward_weights(const ConvEntry *e, float *dweight, float *dbias, char *scratch, const float *g,
                                 const float *inp) {
    const ConvPass p = CONV_PASS_BACKWARD_WEIGHTS;
    char *blk = scratch, *pad = scratch + pass_pad_at(e, p);
    dnnl_exec_arg_t a[5];
    dnnl_memory_t m[4] = {NULL, NULL, NULL, NULL};
    if (act_in(e, p, 0, (void *)inp, scratch, &m[0]) != 0 || act_in(e, p, 1, (void *)g, scratch, &m[1]) != 0) {
        for (int i = 0; i < 4; i++)
            if (m[i]) dnnl_memory_destroy(m[i]);
        return -1;
    }
    mem_make(&m[2], &e->wei[p], e->dw_to_hwio ? (void *)blk : (void *)dweight);
    a[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, m[0]};
    a[1] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, m[1]};
    a[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, m[2]};
    int n = 3;
    if (e->key.has_bias) {
        mem_make(&m[3], &e->bias, dbias);
        a[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_BIAS, m[3]};
    }
    if (run(e->prim[p], a, n, e, pad) != 0) return -1;
    if (!e->dw_to_hwio) return 0;
    dnnl_exec_arg_t r[3];
    dnnl_memory_t from = NULL, to = NULL;
    mem_make(&from, &e->wei[p], blk);
    mem_make(&to, &e->hwio, dweight);
    r[0] = (dnnl_exec_arg_t){DNNL_ARG_FROM, from};
    r[1] = (dnnl_exec_arg_t){DNNL_ARG_TO, to};
    return run(e->dw_to_hwio, r, 2, e, pad);
}

/* ---- the layer as the executor runs it ---------------------------------------- */

/* Bytes for the oneDNN passes of e (the largest pass: passes run one at a time). */
static size_t dnnl_n_bytes(const ConvEntry *e) {
    size_t n = 0;
    for (int p = 0; p < CONV_PASS_COUNT; p++)
        if (pass_n_bytes(e, (ConvPass)p) > n) n = pass_n_bytes(e, (ConvPass)p);
    return n;
}

size_t conv2d_run_scratch_n_bytes(const Conv2d *c, int has_bias, int max_batch, int n_threads) {
    size_t loops = align64(sizeof(float) * conv2d_scratch_n_floats(c, n_threads));
    const ConvKey key = key_of(c, has_bias, max_batch, n_threads);
    const ConvEntry *e = entry_get(&key);
    size_t dnnl = e ? 63 + dnnl_n_bytes(e) : 0; /* 63: room to align the caller's pointer (aligned_scratch) */
    return loops > dnnl ? loops : dnnl;
}

/* oneDNN's kernels (Winograd's) load their scratchpad 64 bytes at a time: the scratch from its first 64-byte
 * boundary, and *n_bytes less what that skips. */
static char *aligned_scratch(void *scratch, size_t *n_bytes) {
    const size_t skip = (64 - (uintptr_t)scratch % 64) % 64;
    *n_bytes = *n_bytes > skip ? *n_bytes - skip : 0;
    return (char *)scratch + skip;
}

/* The entry for this call when it fits scratch_n_bytes, else NULL (loops). */
static const ConvEntry *entry_for_call(const Conv2d *c, int has_bias, int B, int n_threads, size_t scratch_n_bytes) {
    if (__atomic_load_n(&g_loops_only, __ATOMIC_RELAXED)) return NULL;
    const ConvKey key = key_of(c, has_bias, B, n_threads);
    const ConvEntry *e = entry_get(&key);
    return e && dnnl_n_bytes(e) <= scratch_n_bytes ? e : NULL; /* a failed entry has no primitives */
}

void conv2d_run_forward(float *out, void *scratch, size_t scratch_n_bytes, const float *inp, const float *weight,
                        const float *bias, const Conv2d *c, int B, int n_threads) {
    size_t n_bytes = scratch_n_bytes;
    char *aligned = aligned_scratch(scratch, &n_bytes);
    const ConvEntry *e = entry_for_call(c, bias != NULL, B, n_threads, n_bytes);
    if (e && e->f2[CONV_PASS_FORWARD]) {
        winograd_forward(out, (float *)aligned, inp, weight, bias, c, B, n_threads);
        return;
    }
    if (e && e->first[CONV_PASS_FORWARD]) {
        conv_first_forward(out, (float *)aligned, inp, weight, bias, c, B, n_threads);
        return;
    }
    if (e && e->prim[CONV_PASS_FORWARD] && pass_forward(e, out, aligned, inp, weight, bias) == 0) return;
    conv2d_forward(out, scratch, inp, weight, bias, c, B, n_threads);
}

void conv2d_run_backward(float *dinp, float *dweight, float *dbias, void *scratch, size_t scratch_n_bytes,
                         const float *out, float *dout, const float *inp, const float *weight, const Conv2d *c, int B,
                         int n_threads) {
    size_t n_bytes = scratch_n_bytes;
    char *aligned = aligned_scratch(scratch, &n_bytes);
    const ConvEntry *e = entry_for_call(c, dbias != NULL, B, n_threads, n_bytes);
    if (e && dweight && e->first[CONV_PASS_BACKWARD_WEIGHTS]) { /* masks as it reads dout: no pass over it */
        conv_first_backward_weights(dweight, dbias, (float *)aligned, out, dout, inp, c, B, n_threads);
        if (!dinp) return;
        dweight = dbias = NULL;
    }
    const int data_f2 = e && dinp && e->f2[CONV_PASS_BACKWARD_DATA];
    const int weights_f2 = e && dweight && e->f2[CONV_PASS_BACKWARD_WEIGHTS];
    const int data_dnnl = e && dinp && e->prim[CONV_PASS_BACKWARD_DATA];
    const int weights_dnnl = e && dweight && e->prim[CONV_PASS_BACKWARD_WEIGHTS];
    if (!data_dnnl && !weights_dnnl && !data_f2 && !weights_f2) {
        conv2d_backward(dinp, dweight, dbias, scratch, out, dout, inp, weight, c, B, n_threads);
        return;
    }
    /* The ReLU's mask once, in place; the loops then see a plain conv. */
    Conv2d plain = *c;
    if (c->act == ACT_RELU) {
        const size_t n = (size_t)B * c->OH * c->OW * c->C_out;
#pragma omp parallel for schedule(static) num_threads(conv_cpu_team(n_threads))
        for (size_t i = 0; i < n; i++) dout[i] = out[i] > 0.0f ? dout[i] : 0.0f;
        plain.act = ACT_NONE;
    }
    int data_done = 0, weights_done = 0;
    if (weights_f2) {
        winograd_backward_weights(dweight, dbias, (float *)aligned, dout, inp, c, B, n_threads);
        weights_done = 1;
    }
    if (data_f2) {
        winograd_backward_data(dinp, (float *)aligned, dout, weight, c, B, n_threads);
        data_done = 1;
    }
    if (weights_dnnl) weights_done = pass_backward_weights(e, dweight, dbias, aligned, dout, inp) == 0;
    if (data_dnnl) data_done = pass_backward_data(e, dinp, aligned, dout, weight) == 0;
    if ((dinp && !data_done) || (dweight && !weights_done))
        conv2d_backward(data_done ? NULL : dinp, weights_done ? NULL : dweight, weights_done ? NULL : dbias, scratch,
                        out, dout, inp, weight, &plain, B, n_threads);
}

int conv2d_run_path(const Conv2d *c, int has_bias, int B, int n_threads, int pass) {
    if (pass < 0 || pass >= CONV_PASS_COUNT) return CONV_CPU_LOOPS;
    const ConvKey key = key_of(c, has_bias, B, n_threads);
    const ConvEntry *e = entry_get(&key);
    if (e && e->f2[pass]) return CONV_CPU_WINOGRAD_F2;
    if (e && e->first[pass]) return CONV_CPU_FIRST;
    if (!e || e->failed || !e->prim[pass]) return CONV_CPU_LOOPS;
    return e->winograd ? CONV_CPU_WINOGRAD : CONV_CPU_ONEDNN;
}

int conv2d_run_set_loops_only(int on) { return __atomic_exchange_n(&g_loops_only, on ? 1 : 0, __ATOMIC_RELAXED); }
