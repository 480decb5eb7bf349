/* test_model_nets.c — the networks vgg11, vgg16, resnet20 and resnet50
 * (model/nets/vgg.c, model/nets/resnet.c) on the CPU executor: their
 * variable tables against Keras's, and a whole-model finite-difference
 * gradient check of each on a small input.
 *
 * Where it sits: ctest (CPU).
 *   1. Tables: tf.keras.applications.VGG16 at 224x224x3 with 1000 classes
 *      has 138,357,544 parameters in 32 variables; ResNet50 25,636,712
 *      (25,583,592 trainable) in 320 variables (Keras's model.summary());
 *      VGG11 (configuration A) 132,863,336 (torchvision's vgg11, the same
 *      layers); resnet20 with option B shortcuts and Keras's conv biases
 *      274,826 (273,258 trainable; the paper's 0.27M) in 128 variables at
 *      10 classes.  Keras's names in the order of Keras's model.weights
 *      (a functional model's layers by depth: in a ResNet block with a
 *      projection, _1 and _2 first, then _0_conv, _3_conv, _0_bn, _3_bn)
 *      at the ends and the seams; the ReLU and Add node counts; fc_width (a 32x32 VGG16 with a
 *      512-wide head: 15,245,130 parameters); small inputs refused with a
 *      message.
 *   2. Gradients: model_backward against central differences of
 *      model_forward's loss (shared checker, kink guard on: ReLU and max
 *      pool have kinks) on coordinates of variables of every kind: VGG's
 *      first and last convolutions and its three dense layers (vgg11 at
 *      32x32, fc_width 16, batch 2); resnet20 (16x16, batch 4: the last
 *      batch norms see 64 rows) and resnet50 (64x64, batch 2: 8 rows at
 *      conv5) through a residual block's convolutions, batch norms, the
 *      projection shortcut and the head.  A planted 15% error is rejected.
 *   3. Skipped gradients (Node.grad_wanted): resnet50's conv1_pad, which
 *      only pads the image, is the one node of the five networks whose
 *      output gradient the executors skip; every node with a variable
 *      wants its gradient.  The gradient checks of 2 run with the skip.
 *   4. The variable block's chunks (graph_var_chunks, the GPU's overlapped
 *      copies) on the executors' fused graphs of every network: they cover
 *      the block in order, each node's variables inside its chunk, each
 *      chunk but the last at least the minimum unless the next one's first
 *      node alone spans it, every node that spans the minimum alone first in
 *      its chunk (mnist at 256 KiB: 3 chunks), chunk_first the chunk's
 *      first node with variables; minimum 0 gives one chunk per node with
 *      variables; too few chunks allowed is refused.
 */
#include "gradcheck.h"
#include "model/graph.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"

static int count_kind(const ModelSpec *s, NodeKind kind) {
    Graph *g = malloc(sizeof *g);
    int n = 0;
    if (graph_build(g, s) == 0)
        for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i].kind == kind;
    free(g);
    return n;
}

/* names[i] must be variable at[i] (negative: counted from the end). */
static void check_names(const ModelSpec *s, const char *const *names, const int *at, int n) {
    for (int i = 0; i < n; i++) {
        int v = at[i] < 0 ? s->n_vars + at[i] : at[i];
        CHECK(v >= 0 && v < s->n_vars && strcmp(s->vars[v].name, names[i]) == 0, "%s: variable %d is %s, want %s",
              s->name, v, v >= 0 && v < s->n_vars ? s->vars[v].name : "(none)", names[i]);
    }
}

static void test_tables(void) {
    char err[256];
    ModelSpec s;
    CHECK(model_spec_init(&s, "vgg16", 224, 224, 3, 1000, err, sizeof err) == 0, "vgg16 224: %s", err);
    CHECK(s.n_params == 138357544 && s.n_trainable == s.n_params && s.n_vars == 32,
          "vgg16: %zu parameters in %d variables, Keras 138357544 in 32", s.n_params, s.n_vars);
    {
        const char *names[] = {"block1_conv1/kernel", "block1_conv1/bias", "block1_conv2/kernel",
                               "block5_conv3/bias",   "fc1/kernel",        "fc2/bias",
                               "predictions/kernel",  "predictions/bias"};
        const int at[] = {0, 1, 2, 25, 26, 29, 30, 31};
        check_names(&s, names, at, 8);
        int fc1 = model_spec_find(&s, "fc1/kernel");
        CHECK(fc1 >= 0 && s.vars[fc1].shape[0] == 7 * 7 * 512 && s.vars[fc1].shape[1] == 4096,
              "fc1/kernel (25088, 4096) as Keras's after flatten");
        CHECK(s.vars[0].init == INIT_GLOROT_UNIFORM, "Keras's glorot_uniform kernels");
    }
    CHECK(model_spec_init(&s, "vgg11", 224, 224, 3, 1000, err, sizeof err) == 0, "vgg11 224: %s", err);
    CHECK(s.n_params == 132863336 && s.n_vars == 22, "vgg11: %zu parameters in %d variables, want 132863336 in 22",
          s.n_params, s.n_vars);
    {
        const char *names[] = {"block1_conv1/kernel", "block2_conv1/kernel", "block3_conv1/kernel",
                               "block3_conv2/kernel", "block5_conv2/bias",   "fc1/kernel"};
        const int at[] = {0, 2, 4, 6, 15, 16};
        check_names(&s, names, at, 6);
    }
    ModelOptions o = {0.0f, MODEL_HEAD_KERAS, 512};
    CHECK(model_spec_init_opts(&s, "vgg16", 32, 32, 3, 10, &o, err, sizeof err) == 0, "vgg16 32 fc 512: %s", err);
    CHECK(s.n_params == 15245130, "vgg16 32x32, fc 512, 10 classes: %zu parameters, want 15245130", s.n_params);
    CHECK(model_spec_init(&s, "vgg16", 31, 32, 3, 10, err, sizeof err) == -1 && strstr(err, "32x32"),
          "vgg16 31x32 must be refused with a message: %s", err);
    o.fc_width = -1;
    CHECK(model_spec_init_opts(&s, "vgg11", 32, 32, 3, 10, &o, err, sizeof err) == -1 && strstr(err, "fc width"),
          "fc width -1 must be refused: %s", err);

    CHECK(model_spec_init(&s, "resnet50", 224, 224, 3, 1000, err, sizeof err) == 0, "resnet50 224: %s", err);
    CHECK(s.n_params == 25636712 && s.n_trainable == 25583592 && s.n_vars == 320,
          "resnet50: %zu parameters (%zu trainable) in %d variables, Keras 25636712 (25583592) in 320", s.n_params,
          s.n_trainable, s.n_vars);
    {
        const char *names[] = {"conv1_conv/kernel",
                               "conv1_conv/bias",
                               "conv1_bn/gamma",
                               "conv1_bn/moving_variance",
                               "conv2_block1_1_conv/kernel",
                               "conv2_block1_0_conv/kernel",
                               "conv2_block1_3_conv/kernel",
                               "conv2_block1_0_bn/gamma",
                               "conv2_block1_3_bn/moving_variance",
                               "conv2_block2_1_conv/kernel",
                               "conv5_block3_3_bn/moving_variance",
                               "predictions/kernel",
                               "predictions/bias"};
        const int at[] = {0, 1, 2, 5, 6, 18, 20, 22, 29, 30, -3, -2, -1};
        check_names(&s, names, at, 13);
        int k = model_spec_find(&s, "conv3_block1_1_conv/kernel"), bnv = model_spec_find(&s, "conv1_bn/moving_mean");
        CHECK(k >= 0 && s.vars[k].shape[0] == 1 && s.vars[k].shape[3] == 128, "conv3_block1_1_conv: 1x1, 128");
        CHECK(bnv >= 0 && !s.vars[bnv].trainable, "moving statistics are non-trainable");
        CHECK(model_spec_find(&s, "conv4_block6_out/kernel") < 0 && model_spec_find(&s, "conv4_block6_3_bn/beta") >= 0,
              "conv4 has 6 blocks");
    }
    CHECK(count_kind(&s, NODE_ADD) == 16 && count_kind(&s, NODE_RELU) == 49, "resnet50: 16 additions, 49 ReLUs");
    CHECK(model_spec_init(&s, "resnet50", 32, 32, 3, 1000, err, sizeof err) == 0 && s.n_params == 25636712,
          "resnet50 at 32x32 has the same table: %s", err);
    CHECK(model_spec_init(&s, "resnet50", 28, 28, 3, 10, err, sizeof err) == -1 && strstr(err, "32x32"),
          "resnet50 28x28 must be refused with a message: %s", err);

    CHECK(model_spec_init(&s, "resnet20", 32, 32, 3, 10, err, sizeof err) == 0, "resnet20 32: %s", err);
    CHECK(s.n_params == 274826 && s.n_trainable == 273258 && s.n_vars == 128,
          "resnet20: %zu parameters (%zu trainable) in %d variables, want 274826 (273258) in 128", s.n_params,
          s.n_trainable, s.n_vars);
    {
        const char *names[] = {"conv1_conv/kernel",         "conv2_block1_1_conv/kernel", "conv3_block1_1_conv/kernel",
                               "conv3_block1_0_conv/kernel", "conv3_block1_2_conv/kernel", "conv3_block1_0_bn/gamma",
                               "conv3_block1_2_bn/gamma",    "predictions/bias"};
        const int at[] = {0, 6, 42, 48, 50, 52, 56, -1};
        check_names(&s, names, at, 8);
        CHECK(model_spec_find(&s, "conv2_block1_0_conv/kernel") < 0 && model_spec_find(&s, "conv4_block1_0_bn/gamma") >= 0 &&
                  model_spec_find(&s, "conv4_block2_0_conv/kernel") < 0,
              "projection shortcuts exactly where the shape changes");
        int k = model_spec_find(&s, "conv4_block3_2_conv/kernel");
        CHECK(k >= 0 && s.vars[k].shape[2] == 64 && s.vars[k].shape[3] == 64, "conv4: 64 filters");
    }
    CHECK(count_kind(&s, NODE_ADD) == 9 && count_kind(&s, NODE_RELU) == 19, "resnet20: 9 additions, 19 ReLUs");
    for (int k = MODEL_VGG11; k <= MODEL_RESNET50; k++) {
        const NetInfo *net = &model_nets[k];
        CHECK(net->name && model_net_find(net->name) == net && net->build, "table entry %d", k);
        CHECK(model_spec_init(&s, net->name, net->facts.H, net->facts.W, net->facts.C, 10, err, sizeof err) == 0,
              "%s builds on its native %dx%dx%d: %s", net->name, net->facts.H, net->facts.W, net->facts.C, err);
        printf("%-9s %3dx%-3d: %3d variables, %10zu parameters (%zu trainable), %.4g G multiply-adds per example\n",
               net->name, s.H, s.W, s.n_vars, s.n_params, s.n_trainable, model_forward_flops_per_example(&s) / 1e9);
    }
}

typedef struct {
    ModelSpec spec;
    ModelActs *acts;
    float *x, *params, *dparams;
    int32_t labels[16];
    int B;
} Fixture;

static double loss_obj(void *ctx) {
    Fixture *f = ctx;
    return model_forward(NULL, NULL, f->acts, f->x, f->labels, f->params, f->B);
}

/* Build net at HxH (batch B, 10 classes), perturb gamma and beta off 1 and 0, run forward and backward,
 * then check each victim variable; the first victim also gets a planted 15% error. */
static void check_net(const char *net, int H, int B, const ModelOptions *o, const char *const *victims, int n_victims,
                      double eps) {
    char err[256];
    Fixture f = {.B = B};
    CHECK(model_spec_init_opts(&f.spec, net, H, H, 3, 10, o, err, sizeof err) == 0, "%s: %s", net, err);
    if (check_failures) return;
    f.acts = model_acts_create(&f.spec, f.B);
    const size_t n = f.spec.n_params, x_n = (size_t)f.B * H * H * 3;
    f.x = malloc(sizeof(float) * x_n);
    f.params = malloc(sizeof(float) * n);
    f.dparams = calloc(n, sizeof(float));
    gradcheck_fill_uniform(f.x, x_n, -1.0f, 1.0f, 77);
    model_init_params(f.params, &f.spec, 2026);
    for (int v = 0; v < f.spec.n_vars; v++) {
        const char *nm = strrchr(f.spec.vars[v].name, '/') + 1;
        if (!strcmp(nm, "gamma"))
            gradcheck_fill_uniform(f.params + f.spec.vars[v].offset, f.spec.vars[v].n_floats, 0.5f, 1.5f, 100 + (uint64_t)v);
        else if (!strcmp(nm, "beta") || !strcmp(nm, "bias"))
            gradcheck_fill_uniform(f.params + f.spec.vars[v].offset, f.spec.vars[v].n_floats, -0.3f, 0.3f, 100 + (uint64_t)v);
    }
    for (int b = 0; b < f.B; b++) f.labels[b] = (3 + 4 * b) % 10;
    float loss = model_forward(NULL, NULL, f.acts, f.x, f.labels, f.params, f.B);
    model_backward(f.dparams, f.acts, f.params);
    CHECK(isfinite(loss), "%s: loss %g", net, loss);
    for (int k = 0; k < n_victims; k++) {
        int v = model_spec_find(&f.spec, victims[k]);
        CHECK(v >= 0, "%s: no %s", net, victims[k]);
        if (v < 0) continue;
        const ModelVar *var = &f.spec.vars[v];
        GradcheckOpts go = {victims[k], eps, 5e-2, 2e-3, 6, 5 + (uint64_t)k, 1, 0};
        GradcheckResult r = gradcheck(f.params + var->offset, var->n_floats, f.dparams + var->offset, loss_obj, &f, &go);
        CHECK(r.n_failed == 0 && r.n_checked >= 2, "%s %s: %d of %d coordinates failed (%d skipped at kinks)", net,
              victims[k], r.n_failed, r.n_checked, r.n_skipped);
    }
    {
        const ModelVar *var = &f.spec.vars[model_spec_find(&f.spec, "predictions/kernel")];
        float *gv = f.dparams + var->offset;
        size_t top = 0;
        for (size_t i = 1; i < var->n_floats; i++)
            if (fabsf(gv[i]) > fabsf(gv[top])) top = i;
        gv[top] *= 1.15f;
        GradcheckOpts go = {"predictions/kernel (perturbed)", eps, 5e-2, 2e-3, 4, 9, 1, 0};
        GradcheckResult r = gradcheck(f.params + var->offset, var->n_floats, gv, loss_obj, &f, &go);
        CHECK(r.n_failed >= 1, "%s: the checker must reject a 15%% error (failed %d)", net, r.n_failed);
    }
    free(f.x);
    free(f.params);
    free(f.dparams);
    model_acts_free(f.acts);
}

static void test_gradients(void) {
    const ModelOptions small_head = {0.0f, MODEL_HEAD_KERAS, 16};
    const char *vgg[] = {"block1_conv1/kernel", "block1_conv1/bias", "block5_conv2/kernel", "fc1/kernel",
                         "fc2/bias",            "predictions/kernel", "predictions/bias"};
    check_net("vgg11", 32, 2, &small_head, vgg, 7, 3e-4);
    const char *r20[] = {"conv3_block3_1_conv/kernel", "conv3_block3_1_bn/gamma", "conv4_block1_0_conv/kernel",
                         "conv4_block1_0_bn/beta",     "conv4_block1_1_conv/bias", "conv4_block3_2_conv/kernel",
                         "conv4_block3_2_bn/gamma",    "predictions/kernel",       "predictions/bias"};
    check_net("resnet20", 16, 4, NULL, r20, 9, 3e-4);
    const char *r50[] = {"conv5_block1_0_conv/kernel", "conv5_block1_0_bn/gamma", "conv5_block3_1_bn/beta",
                         "conv5_block2_2_conv/kernel", "conv5_block3_3_conv/kernel", "conv5_block3_3_bn/gamma",
                         "predictions/kernel",         "predictions/bias"};
    /* A step of 1e-3, not 3e-4: the loss is a float after 50 layers, and its rounding over a 6e-4 span moved the
     * central difference of conv5_block1_0_bn/gamma[889] by 0.004 on an AVX2 machine (oneDNN's AVX2 kernels round
     * otherwise than its AVX-512 ones, where 3e-4 had passed); at 1e-3 the largest difference there is 0.0012. */
    check_net("resnet50", 64, 2, NULL, r50, 8, 1e-3);
}

/* The nodes of `net` whose grad_wanted is 0 must be exactly the n named. */
static void check_grad_skipped(const char *net, int H, const char *const *skipped, int n) {
    char err[256];
    ModelSpec s;
    Graph *g = malloc(sizeof *g);
    CHECK(g && model_spec_init(&s, net, H, H, 3, 10, err, sizeof err) == 0 && graph_build(g, &s) == 0, "%s: %s", net,
          err);
    int n_skipped = 0;
    for (int i = 0; g && i < g->n_nodes; i++) {
        const Node *nd = &g->nodes[i];
        int listed = 0;
        for (int k = 0; k < n; k++) listed |= strcmp(nd->name, skipped[k]) == 0;
        n_skipped += !nd->grad_wanted;
        CHECK(nd->grad_wanted == !listed, "%s: node %d %s has grad_wanted %d", net, i, nd->name, nd->grad_wanted);
        CHECK(nd->n_vars == 0 || nd->grad_wanted, "%s: node %s has variables but no gradient", net, nd->name);
    }
    CHECK(n_skipped == n, "%s: %d nodes skip their gradient, want %d", net, n_skipped, n);
    free(g);
}

static void test_grad_skipped(void) {
    const char *r50[] = {"conv1_pad"};
    check_grad_skipped("resnet50", 64, r50, 1);
    check_grad_skipped("resnet20", 32, NULL, 0);
    check_grad_skipped("vgg11", 32, NULL, 0);
    check_grad_skipped("mobilenet_v2", 32, NULL, 0);
    check_grad_skipped("cifar10", 24, NULL, 0);
}

/* The floats from a node's first variable to the end of its last. */
static size_t node_n_floats(const ModelSpec *s, const Node *nd) {
    if (nd->n_vars == 0) return 0;
    const ModelVar *a = &s->vars[nd->var0], *b = &s->vars[nd->var0 + nd->n_vars - 1];
    return b->offset + b->n_floats - a->offset;
}

/* Returns the number of chunks (-1 when the network cannot be built). */
static int check_var_chunks(const char *net, int H, int C, size_t min_n_floats) {
    char err[256];
    ModelSpec s;
    Graph *g = malloc(sizeof *g);
    int node_chunk[GRAPH_MAX_NODES], chunk_first[GRAPH_MAX_NODES];
    size_t chunk_start[GRAPH_MAX_NODES + 1];
    if (!g || model_spec_init(&s, net, H, H, C, 10, err, sizeof err) != 0 || graph_build(g, &s) != 0) {
        CHECK(0, "%s: %s", net, err);
        free(g);
        return -1;
    }
    graph_fuse(g);
    const int n = graph_var_chunks(g, &s, min_n_floats, node_chunk, chunk_first, chunk_start, GRAPH_MAX_NODES);
    int with_vars = 0;
    for (int i = 0; i < g->n_nodes; i++) with_vars += g->nodes[i].n_vars > 0;
    CHECK(n >= 1 && chunk_start[0] == 0 && chunk_start[n] == s.n_params, "%s: %d chunks, from %zu to %zu of %zu", net,
          n, n >= 1 ? chunk_start[0] : 0, n >= 1 ? chunk_start[n] : 0, s.n_params);
    for (int k = 0; n >= 1 && k < n; k++) {
        CHECK(chunk_start[k] < chunk_start[k + 1], "%s: chunk %d is empty", net, k);
        /* Short only where the next chunk's first node alone spans the minimum. */
        CHECK(k == n - 1 || chunk_start[k + 1] - chunk_start[k] >= min_n_floats ||
                  node_n_floats(&s, &g->nodes[chunk_first[k + 1]]) >= min_n_floats,
              "%s: chunk %d spans %zu < %zu", net, k, chunk_start[k + 1] - chunk_start[k], min_n_floats);
        const int f = chunk_first[k];
        CHECK(f >= 0 && f < g->n_nodes && node_chunk[f] == k && g->nodes[f].n_vars > 0 &&
                  (f == 0 || node_chunk[f - 1] < k || k == 0),
              "%s: chunk %d's first node %d", net, k, f);
    }
    for (int i = 0; n >= 1 && i < g->n_nodes; i++) {
        const Node *nd = &g->nodes[i];
        CHECK(i == 0 || node_chunk[i] >= node_chunk[i - 1], "%s: node %d's chunk goes back", net, i);
        if (nd->n_vars == 0) continue;
        const int k = node_chunk[i];
        const ModelVar *a = &s.vars[nd->var0], *b = &s.vars[nd->var0 + nd->n_vars - 1];
        CHECK(k >= 0 && k < n && a->offset >= chunk_start[k] && b->offset + b->n_floats <= chunk_start[k + 1],
              "%s: node %s's variables [%zu, %zu) outside its chunk %d", net, nd->name, a->offset,
              b->offset + b->n_floats, k);
        CHECK(chunk_first[k] <= i, "%s: node %s comes before its chunk's first node", net, nd->name);
        /* A large layer starts its own chunk. */
        CHECK(node_n_floats(&s, nd) < min_n_floats || chunk_first[k] == i,
              "%s: node %s (%zu floats, minimum %zu) does not start its chunk %d", net, nd->name, node_n_floats(&s, nd),
              min_n_floats, k);
    }
    if (min_n_floats == 0)
        CHECK(n == with_vars, "%s: minimum 0 gives %d chunks for %d nodes with variables", net, n, with_vars);
    if (n > 1)
        CHECK(graph_var_chunks(g, &s, min_n_floats, node_chunk, chunk_first, chunk_start, n - 1) == -1,
              "%s: %d chunks fit in %d", net, n, n - 1);
    printf("%s: %d chunks (minimum %zu floats) over %zu\n", net, n, min_n_floats, s.n_params);
    free(g);
    return n;
}

static void test_var_chunks(void) {
    const struct { const char *net; int H, C; } nets[] = {
        {"mnist", 28, 1}, {"cifar10", 24, 3}, {"resnet20", 32, 3}, {"vgg11", 32, 3}, {"mobilenet_v2", 32, 3},
        {"resnet50", 64, 3}};
    for (size_t k = 0; k < sizeof nets / sizeof nets[0]; k++) {
        check_var_chunks(nets[k].net, nets[k].H, nets[k].C, 0);
        check_var_chunks(nets[k].net, nets[k].H, nets[k].C, 16384);
        const int n_gpu = check_var_chunks(nets[k].net, nets[k].H, nets[k].C, 65536); /* the GPU towers' 256 KiB */
        /* mnist at 256 KiB: conv1 + conv2 (0.2 MB), local3 alone (12.8 MB), softmax_linear; before local3 started
         * its own chunk, chunk 0 held all three layers and nothing overlapped (H100, 2026-11-27). */
        if (!strcmp(nets[k].net, "mnist")) CHECK(n_gpu == 3, "mnist at 65536 floats: %d chunks, want 3", n_gpu);
    }
}

int main(void) {
    test_tables();
    test_grad_skipped();
    test_var_chunks();
    test_gradients();
    if (check_failures) {
        printf("FAIL: %d checks failed\n", check_failures);
        return 1;
    }
    printf("vgg11, vgg16, resnet20, resnet50: tables and gradients ok\n");
    return 0;
}
