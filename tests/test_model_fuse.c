/* test_model_fuse.c — the graph's fusion (graph_fuse: batch norm + ReLU6 /
 * ReLU in one node, ZeroPadding2D folded into the following depthwise)
 * against the unfused plan, its readable reference.
 *
 * Where it sits: ctest (CPU).  Checks, on fresh random inputs:
 *   1. the rewrite: mobilenet_v2 loses every ReLU6 and ZeroPadding2D node,
 *      resnet20 every ReLU (those after a batch norm into it, those after
 *      an Add into the Add),
 *      and every node that owns variables keeps its name, var0 and n_vars;
 *      mnist and cifar10 are untouched;
 *   2. the layers: batch norm with a fused ReLU6 / ReLU (training and
 *      evaluation forward, backward, the split sums of sync batch norm)
 *      against batchnorm_* followed by relu6_* / relu_layer_*, and a
 *      depthwise with implicit padding against zeropad + depthwise;
 *   3. finite differences of the fused batch norm + ReLU6 / ReLU
 *      (gradcheck.c, with the kink guard) w.r.t. input, gamma and beta;
 *      the fused Add + ReLU / ReLU6 against add_forward then the activation
 *      and back (bit for bit: the same float operations), both inputs'
 *      gradients, a NULL one, and finite differences w.r.t. both inputs;
 *   4. whole models: mobilenet_v2 (alpha 0.35, 32x32 and 33x33) and resnet20
 *      with the fused plan (model_acts_create) against the unfused one
 *      (model_acts_create_fused(.., 0)): loss, logits and every gradient,
 *      training and evaluation forward, 1 and 2 threads.
 * The fused code does the same float operations as the unfused sequence,
 * so the comparisons ask for 1e-6 relative agreement and print how many
 * values differ in their bits at all.
 */
#include "gradcheck.h"
#include "model/graph.h"
#include "model/layers.h"
#include "model/model.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failed = 0;
#define CHECK(cond, ...)                                   \
    do {                                                   \
        if (!(cond)) {                                     \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);    \
            printf(__VA_ARGS__);                           \
            printf("\n");                                  \
            g_failed = 1;                                  \
        }                                                  \
    } while (0)

static float *uniform(size_t n, float lo, float hi, uint64_t seed) {
    float *x = malloc(sizeof(float) * n);
    gradcheck_fill_uniform(x, n, lo, hi, seed);
    return x;
}

/* max |a - b| / (max |b| + 1e-30) over n, and how many differ in their bits. */
static double rel_diff(const float *a, const float *b, size_t n, size_t *n_differ) {
    double worst = 0.0, scale = 0.0;
    *n_differ = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabs(b[i]) > scale) scale = fabs(b[i]);
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= worst)) worst = d; /* NaN counts as worst */
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0 && !(a[i] == 0.0f && b[i] == 0.0f)) (*n_differ)++;
    }
    return worst / (scale + 1e-30);
}

static void expect_close(const char *what, const float *got, const float *want, size_t n, double tol) {
    size_t n_differ;
    double r = rel_diff(got, want, n, &n_differ);
    CHECK(r <= tol, "%s: relative difference %.3g > %.3g", what, r, tol);
    printf("%s %s: max rel diff %.3g, %zu of %zu values differ in their bits\n", r <= tol ? "ok:" : "FAIL:", what, r,
           n_differ, n);
}

/* ---- 1. the rewrite ---- */

static int count_kind(const Graph *g, NodeKind k) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i].kind == k;
    return n;
}

static int count_bn_act(const Graph *g, Activation act) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i].kind == NODE_BATCHNORM && g->nodes[i].bn.act == act;
    return n;
}

static int count_add_act(const Graph *g, Activation act) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i].kind == NODE_ADD && g->nodes[i].add_act == act;
    return n;
}

/* Every node with variables appears in both graphs, in order, with the same name, var0, n_vars. */
static void same_variable_nodes(const char *what, const Graph *a, const Graph *b) {
    int i = 0, j = 0, ok = 1;
    for (;;) {
        while (i < a->n_nodes && a->nodes[i].n_vars == 0) i++;
        while (j < b->n_nodes && b->nodes[j].n_vars == 0) j++;
        if (i == a->n_nodes || j == b->n_nodes) {
            ok &= i == a->n_nodes && j == b->n_nodes;
            break;
        }
        ok &= strcmp(a->nodes[i].name, b->nodes[j].name) == 0 && a->nodes[i].var0 == b->nodes[j].var0 &&
              a->nodes[i].n_vars == b->nodes[j].n_vars;
        i++, j++;
    }
    CHECK(ok, "%s: the nodes owning variables differ after fusion", what);
}

static void test_rewrite(void) {
    static Graph g, f;
    ModelSpec s;
    char err[256];
    ModelOptions o = {0.35f, MODEL_HEAD_KERAS, 0};
    CHECK(model_spec_init_opts(&s, "mobilenet_v2", 32, 32, 3, 10, &o, err, sizeof err) == 0, "%s", err);
    CHECK(graph_build(&g, &s) == 0 && graph_build(&f, &s) == 0, "mobilenet_v2 builds");
    const int n_relu6 = count_kind(&g, NODE_RELU6), n_pad = count_kind(&g, NODE_ZEROPAD);
    const int removed = graph_fuse(&f);
    CHECK(n_relu6 == 35 && n_pad == 4, "mobilenet_v2 before fusion: %d ReLU6 (want 35), %d pads (want 4)", n_relu6,
          n_pad);
    CHECK(removed == n_relu6 + n_pad && f.n_nodes == g.n_nodes - removed, "mobilenet_v2: %d nodes removed", removed);
    CHECK(count_kind(&f, NODE_RELU6) == 0 && count_kind(&f, NODE_ZEROPAD) == 0 &&
              count_bn_act(&f, ACT_RELU6) == n_relu6,
          "mobilenet_v2 after fusion: no ReLU6 or pad node, %d batch norms with ReLU6", count_bn_act(&f, ACT_RELU6));
    int n_implicit = 0;
    for (int i = 0; i < f.n_nodes; i++)
        if (f.nodes[i].kind == NODE_DEPTHWISE && f.nodes[i].dw.stride == 2) {
            const Depthwise *d = &f.nodes[i].dw;
            n_implicit += d->H == f.nodes[i].in.H && d->W == f.nodes[i].in.W &&
                          node_shape_n(graph_shape(&f, f.nodes[i].inputs[0])) == node_shape_n(f.nodes[i].in);
        }
    CHECK(n_implicit == 4, "mobilenet_v2: %d stride-2 depthwise read their unpadded input (want 4)", n_implicit);
    CHECK(f.output == f.n_nodes - 1 && f.nodes[f.output].var0 + f.nodes[f.output].n_vars == s.n_vars,
          "mobilenet_v2: the output node and the variable count survive");
    same_variable_nodes("mobilenet_v2", &g, &f);
    printf("ok: mobilenet_v2: %d nodes -> %d (%d ReLU6 into batch norms, %d pads into depthwise)\n", g.n_nodes,
           f.n_nodes, n_relu6, n_pad);

    CHECK(model_spec_init(&s, "resnet20", 32, 32, 3, 10, err, sizeof err) == 0, "%s", err);
    graph_build(&g, &s);
    graph_build(&f, &s);
    const int r = graph_fuse(&f);
    CHECK(r == 19 && count_bn_act(&f, ACT_RELU) == 10 && count_add_act(&f, ACT_RELU) == 9 &&
              count_kind(&f, NODE_RELU) == 0 && count_add_act(&g, ACT_NONE) == 9,
          "resnet20: %d fused (want 19: the ReLU after each block's first batch norm and the stem's into the batch "
          "norms, the 9 after the additions into them), %d ReLU nodes left (want 0)", r, count_kind(&f, NODE_RELU));
    same_variable_nodes("resnet20", &g, &f);
    printf("ok: resnet20: %d ReLUs fused, %d into batch norms and %d into additions\n", r, count_bn_act(&f, ACT_RELU),
           count_add_act(&f, ACT_RELU));

    const char *untouched[2] = {"mnist", "cifar10"};
    for (int k = 0; k < 2; k++) {
        CHECK(model_spec_init(&s, untouched[k], k ? 24 : 28, k ? 24 : 28, k ? 3 : 1, 10, err, sizeof err) == 0, "%s",
              err);
        graph_build(&g, &s);
        CHECK(graph_fuse(&g) == 0, "%s: nothing to fuse", untouched[k]);
    }
}

/* ---- 2. and 3. the layers ---- */

typedef struct {
    BatchNorm bn;
    size_t rows;
    float *inp, *gamma, *beta, *out, *mean, *var, *inv_std, *R;
    double *sums;
} FusedBn;

static double fused_obj(void *p) {
    FusedBn *k = p;
    batchnorm_forward_train(k->out, k->mean, k->var, k->inv_std, k->sums, k->inp, k->gamma, k->beta, &k->bn, k->rows);
    return gradcheck_dot(k->out, k->R, k->rows * k->bn.C);
}

static void test_bn_act(Activation act, size_t rows, int C, uint64_t seed) {
    const char *an = act == ACT_RELU6 ? "relu6" : "relu";
    const size_t n = rows * C;
    FusedBn k = {{C, 0.99, 1e-3f, act}, rows, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    k.inp = uniform(n, -2, 3, seed);
    k.gamma = uniform(C, 0.5f, 4.0f, seed + 1); /* wide enough that ReLU6 clips */
    k.beta = uniform(C, -1.0f, 3.0f, seed + 2);
    k.R = uniform(n, -1, 1, seed + 3);
    k.out = malloc(sizeof(float) * n);
    k.mean = malloc(sizeof(float) * C);
    k.var = malloc(sizeof(float) * C);
    k.inv_std = malloc(sizeof(float) * C);
    k.sums = malloc(sizeof(double) * batchnorm_scratch_n_doubles(C));
    BatchNorm plain = k.bn;
    plain.act = ACT_NONE;
    float *z = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n), *m2 = malloc(sizeof(float) * 3 * C);
    double *s2 = malloc(sizeof(double) * batchnorm_scratch_n_doubles(C));
    char what[128];

    /* forward, training: fused against batch norm then the activation */
    fused_obj(&k);
    batchnorm_forward_train(z, m2, m2 + C, m2 + 2 * C, s2, k.inp, k.gamma, k.beta, &plain, rows);
    if (act == ACT_RELU6) relu6_forward(y, z, n);
    else relu_layer_forward(y, z, n);
    snprintf(what, sizeof what, "bn+%s forward (training)", an);
    expect_close(what, k.out, y, n, 1e-6);
    size_t n_clipped = 0;
    for (size_t i = 0; i < n; i++) n_clipped += y[i] == 0.0f || y[i] == 6.0f;
    CHECK(n_clipped > n / 20 && n_clipped < n - n / 20, "%s: %zu of %zu outputs clipped: not a test of the mask",
          an, n_clipped, n);

    /* backward: fused against the activation's backward then batch norm's */
    float *dx = malloc(sizeof(float) * n), *dg = calloc(C, sizeof(float)), *db = calloc(C, sizeof(float));
    float *dz = malloc(sizeof(float) * n), *dx2 = malloc(sizeof(float) * n), *dg2 = calloc(C, sizeof(float)),
          *db2 = calloc(C, sizeof(float));
    batchnorm_backward_act(dx, dg, db, k.sums, k.R, k.inp, k.mean, k.inv_std, k.gamma, k.beta, &k.bn, rows);
    if (act == ACT_RELU6) relu6_backward(dz, y, k.R, n);
    else relu_layer_backward(dz, y, k.R, n);
    batchnorm_backward(dx2, dg2, db2, s2, dz, k.inp, m2, m2 + 2 * C, k.gamma, &plain, rows);
    snprintf(what, sizeof what, "bn+%s dinp", an);
    expect_close(what, dx, dx2, n, 1e-6);
    snprintf(what, sizeof what, "bn+%s dgamma", an);
    expect_close(what, dg, dg2, C, 1e-6);
    snprintf(what, sizeof what, "bn+%s dbeta", an);
    expect_close(what, db, db2, C, 1e-6);

    /* sync batch norm's split form: sums_act + input_act with the same (here: one tower's) sums */
    double *ds = malloc(sizeof(double) * batchnorm_scratch_n_doubles(C));
    batchnorm_backward_sums_act(ds, ds + 2 * C, k.R, k.inp, k.mean, k.inv_std, k.gamma, k.beta, act, rows, C);
    float *dx3 = malloc(sizeof(float) * n);
    memcpy(dx3, k.R, sizeof(float) * n); /* in place: dinp aliases dout */
    batchnorm_backward_input_act(dx3, dx3, k.inp, k.mean, k.inv_std, k.gamma, k.beta, act, ds, (double)rows, rows, C);
    snprintf(what, sizeof what, "bn+%s split sums + input (in place)", an);
    expect_close(what, dx3, dx2, n, 1e-6);

    /* evaluation forward */
    float *mm = uniform(C, -0.5f, 0.5f, seed + 4), *mv = uniform(C, 0.5f, 2.0f, seed + 5);
    batchnorm_forward_eval(k.out, k.inv_std, k.inp, mm, mv, k.gamma, k.beta, &k.bn, rows);
    batchnorm_forward_eval(z, m2, k.inp, mm, mv, k.gamma, k.beta, &plain, rows);
    if (act == ACT_RELU6) relu6_forward(y, z, n);
    else relu_layer_forward(y, z, n);
    snprintf(what, sizeof what, "bn+%s forward (evaluation)", an);
    expect_close(what, k.out, y, n, 1e-6);

    /* finite differences of the fused layer (training) */
    memset(dg, 0, sizeof(float) * C);
    memset(db, 0, sizeof(float) * C);
    fused_obj(&k);
    batchnorm_backward_act(dx, dg, db, k.sums, k.R, k.inp, k.mean, k.inv_std, k.gamma, k.beta, &k.bn, rows);
    GradcheckOpts o = {NULL, 1e-3, 2e-2, 2e-3, 200, seed, 1, 0};
    float *arrays[3] = {k.inp, k.gamma, k.beta}, *grads[3] = {dx, dg, db};
    const size_t sizes[3] = {n, (size_t)C, (size_t)C};
    const char *names[3] = {"dinp", "dgamma", "dbeta"};
    for (int a = 0; a < 3; a++) {
        snprintf(what, sizeof what, "bn+%s %s (finite differences)", an, names[a]);
        o.what = what;
        GradcheckResult r = gradcheck(arrays[a], sizes[a], grads[a], fused_obj, &k, &o);
        CHECK(r.n_failed == 0 && r.n_checked > 0, "%s: %d of %d failed", what, r.n_failed, r.n_checked);
    }
    free(k.inp); free(k.gamma); free(k.beta); free(k.R); free(k.out); free(k.mean); free(k.var); free(k.inv_std);
    free(k.sums); free(z); free(y); free(m2); free(s2); free(dx); free(dg); free(db); free(dz); free(dx2); free(dg2);
    free(db2); free(ds); free(dx3); free(mm); free(mv);
}

/* The Add with a fused ReLU / ReLU6 against add_forward + the activation and back, then finite differences. */
typedef struct {
    size_t n;
    Activation act;
    float *a, *b, *out, *R;
} FusedAdd;

static double add_obj(void *p) {
    FusedAdd *k = p;
    add_act_forward(k->out, k->a, k->b, k->act, k->n);
    return gradcheck_dot(k->out, k->R, k->n);
}

static void test_add_act(Activation act, size_t n, uint64_t seed) {
    const char *an = act == ACT_RELU6 ? "relu6" : "relu";
    FusedAdd k = {n, act, uniform(n, -4, 5, seed), uniform(n, -3, 4, seed + 1), malloc(sizeof(float) * n),
                  uniform(n, -1, 1, seed + 2)};
    float *s = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n), *dz = malloc(sizeof(float) * n);
    float *da = malloc(sizeof(float) * n), *db = malloc(sizeof(float) * n), *da2 = malloc(sizeof(float) * n),
          *db2 = malloc(sizeof(float) * n);
    char what[96];
    add_obj(&k);
    add_forward(s, k.a, k.b, n);
    if (act == ACT_RELU6) relu6_forward(y, s, n);
    else relu_layer_forward(y, s, n);
    snprintf(what, sizeof what, "add+%s forward", an);
    expect_close(what, k.out, y, n, 0.0);
    size_t n_clipped = 0;
    for (size_t i = 0; i < n; i++) n_clipped += y[i] == 0.0f || y[i] == 6.0f;
    CHECK(n_clipped > n / 20 && n_clipped < n - n / 20, "add+%s: %zu of %zu outputs clipped: not a test of the mask",
          an, n_clipped, n);
    add_act_backward(da, db, k.out, k.R, act, n);
    if (act == ACT_RELU6) relu6_backward(dz, y, k.R, n);
    else relu_layer_backward(dz, y, k.R, n);
    add_backward(da2, db2, dz, n);
    snprintf(what, sizeof what, "add+%s da", an);
    expect_close(what, da, da2, n, 0.0);
    snprintf(what, sizeof what, "add+%s db", an);
    expect_close(what, db, db2, n, 0.0);
    memset(db, 0x7f, sizeof(float) * n); /* da NULL: db alone, the same */
    add_act_backward(NULL, db, k.out, k.R, act, n);
    snprintf(what, sizeof what, "add+%s db with da NULL", an);
    expect_close(what, db, db2, n, 0.0);
    add_act_backward(da, db, k.out, k.R, act, n);
    GradcheckOpts o = {NULL, 1e-3, 2e-2, 2e-3, 200, seed, 1, 0};
    float *arrays[2] = {k.a, k.b}, *grads[2] = {da, db};
    const char *names[2] = {"da", "db"};
    for (int i = 0; i < 2; i++) {
        snprintf(what, sizeof what, "add+%s %s (finite differences)", an, names[i]);
        o.what = what;
        GradcheckResult r = gradcheck(arrays[i], n, grads[i], add_obj, &k, &o);
        CHECK(r.n_failed == 0 && r.n_checked > 0, "%s: %d of %d failed", what, r.n_failed, r.n_checked);
    }
    free(k.a); free(k.b); free(k.out); free(k.R); free(s); free(y); free(dz); free(da); free(db); free(da2);
    free(db2);
}

/* A stride-2 VALID depthwise after Keras's correct_pad, against the same depthwise reading the unpadded input. */
static void test_implicit_pad(int B, int H, int W, int C, uint64_t seed) {
    ZeroPad z;
    int t, b, l, r;
    keras_correct_pad(&t, &b, &l, &r, H, W, 3);
    CHECK(zeropad_init(&z, H, W, C, t, b, l, r) == 0, "zeropad_init");
    Depthwise ref, imp;
    CHECK(depthwise_init(&ref, z.OH, z.OW, C, 3, 3, 2, PAD_VALID) == 0, "depthwise_init");
    imp = ref; /* what graph_fuse writes */
    imp.H = H;
    imp.W = W;
    imp.pad_top = t;
    imp.pad_left = l;
    const size_t in_n = (size_t)B * H * W * C, pad_n = (size_t)B * z.OH * z.OW * C,
                 out_n = (size_t)B * ref.OH * ref.OW * C, w_n = 9 * (size_t)C;
    float *x = uniform(in_n, -1, 1, seed), *w = uniform(w_n, -1, 1, seed + 1), *g = uniform(out_n, -1, 1, seed + 2);
    float *xp = malloc(sizeof(float) * pad_n), *y1 = malloc(sizeof(float) * out_n), *y2 = malloc(sizeof(float) * out_n);
    const int nt = omp_get_max_threads();
    float *s1 = malloc(sizeof(float) * depthwise_scratch_n_floats(&ref, nt));
    float *s2 = malloc(sizeof(float) * depthwise_scratch_n_floats(&imp, nt));
    zeropad_forward(xp, x, &z, B);
    depthwise_forward(y1, xp, w, &ref, B);
    depthwise_forward(y2, x, w, &imp, B);
    char what[96];
    snprintf(what, sizeof what, "implicit pad %dx%d forward", H, W);
    expect_close(what, y2, y1, out_n, 0.0);
    float *dxp = malloc(sizeof(float) * pad_n), *dx1 = malloc(sizeof(float) * in_n), *dx2 = malloc(sizeof(float) * in_n);
    float *dw1 = calloc(w_n, sizeof(float)), *dw2 = calloc(w_n, sizeof(float));
    depthwise_backward(dxp, dw1, s1, g, xp, w, &ref, B, nt);
    zeropad_backward(dx1, dxp, &z, B);
    depthwise_backward(dx2, dw2, s2, g, x, w, &imp, B, nt);
    snprintf(what, sizeof what, "implicit pad %dx%d dinp", H, W);
    expect_close(what, dx2, dx1, in_n, 1e-6);
    snprintf(what, sizeof what, "implicit pad %dx%d dweight", H, W);
    expect_close(what, dw2, dw1, w_n, 1e-6);
    free(x); free(w); free(g); free(xp); free(y1); free(y2); free(s1); free(s2); free(dxp); free(dx1); free(dx2);
    free(dw1); free(dw2);
}

/* ---- 4. whole models ---- */

static void test_model(const char *name, int H, float alpha, int B, int threads, uint64_t seed) {
    ModelSpec s;
    char err[256];
    ModelOptions o = {alpha, MODEL_HEAD_KERAS, 0};
    CHECK(model_spec_init_opts(&s, name, H, H, 3, 10, &o, err, sizeof err) == 0, "%s", err);
    omp_set_num_threads(threads);
    ModelActs *fused = model_acts_create(&s, B), *plain = model_acts_create_fused(&s, B, 0);
    CHECK(fused && plain, "%s: workspaces", name);
    if (!fused || !plain) return;
    float *params = malloc(sizeof(float) * s.n_params);
    model_init_params(params, &s, seed);
    /* moving statistics away from 0 / 1, so evaluation mode tests something */
    for (int v = 0; v < s.n_vars; v++)
        if (!s.vars[v].trainable) gradcheck_fill_uniform(params + s.vars[v].offset, s.vars[v].n_floats, 0.1f, 0.9f,
                                                         seed + 10 + v);
    float *x = uniform((size_t)B * H * H * 3, -1, 1, seed + 1);
    int32_t *labels = malloc(sizeof(int32_t) * B);
    for (int i = 0; i < B; i++) labels[i] = (i * 7 + (int)seed) % 10;
    float *l1 = malloc(sizeof(float) * B * 10), *l2 = malloc(sizeof(float) * B * 10);
    float *d1 = calloc(s.n_params, sizeof(float)), *d2 = calloc(s.n_params, sizeof(float));
    char what[128];
    for (int training = 1; training >= 0; training--) {
        model_acts_set_training(fused, training);
        model_acts_set_training(plain, training);
        float a = model_forward(l1, NULL, fused, x, labels, params, B);
        float b = model_forward(l2, NULL, plain, x, labels, params, B);
        CHECK(fabsf(a - b) <= 1e-6f * fabsf(b), "%s %s: loss %.9g against %.9g", name, training ? "training" : "eval",
              a, b);
        snprintf(what, sizeof what, "%s %dx%d B=%d threads=%d %s logits", name, H, H, B, threads,
                 training ? "training" : "evaluation");
        expect_close(what, l1, l2, (size_t)B * 10, 1e-6);
    }
    model_acts_set_training(fused, 1);
    model_acts_set_training(plain, 1);
    model_forward(NULL, NULL, fused, x, labels, params, B);
    model_forward(NULL, NULL, plain, x, labels, params, B);
    model_backward(d1, fused, params);
    model_backward(d2, plain, params);
    double worst = 0.0;
    int worst_v = 0;
    for (int v = 0; v < s.n_vars; v++) {
        if (!s.vars[v].trainable) continue;
        size_t nd;
        double r = rel_diff(d1 + s.vars[v].offset, d2 + s.vars[v].offset, s.vars[v].n_floats, &nd);
        if (!(r <= worst)) worst = r, worst_v = v;
    }
    CHECK(worst <= 1e-5, "%s: gradient of %s differs by %.3g (relative to its largest entry)", name,
          s.vars[worst_v].name, worst);
    printf("%s %s %dx%d B=%d threads=%d: every gradient within %.3g of the unfused plan's (worst: %s)\n",
           worst <= 1e-5 ? "ok:" : "FAIL:", name, H, H, B, threads, worst, s.vars[worst_v].name);
    free(params); free(x); free(labels); free(l1); free(l2); free(d1); free(d2);
    model_acts_free(fused);
    model_acts_free(plain);
}

int main(void) {
    test_rewrite();
    test_bn_act(ACT_RELU6, 301, 19, 100);
    test_bn_act(ACT_RELU, 257, 40, 200);
    test_add_act(ACT_RELU, 5000, 250);
    test_add_act(ACT_RELU6, 4099, 260);
    test_implicit_pad(2, 8, 8, 5, 300);
    test_implicit_pad(3, 9, 7, 17, 400);
    test_model("mobilenet_v2", 32, 0.35f, 3, 1, 500);
    test_model("mobilenet_v2", 33, 0.35f, 2, 2, 600);
    test_model("resnet20", 32, 0.0f, 2, 2, 700);
    if (g_failed) {
        printf("test_model_fuse: FAILED\n");
        return 1;
    }
    printf("test_model_fuse: all passed\n");
    return 0;
}
