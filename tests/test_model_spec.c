/* test_model_spec.c — the models' variable tables and initialisation.
 *
 * Where it sits: ctest (CPU).  Checks model_spec_init against the figures
 * of the models' definitions (TensorFlow's cifar10.py in tensorflow/models,
 * tutorials/image/cifar10, and the MNIST network stated in model/model.c:
 * parameter counts, TensorFlow's variable names,
 * shapes, init stddevs, weight decay, forward cost), rejection of bad
 * names and shapes, and the initializer: splitmix64 against its published
 * reference outputs, the deterministic logarithm against libm, same seed ->
 * same bits, different seed -> different values, truncated normal within
 * 2 stddev with the truncated distribution's spread.
 */
#include "model/layers.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"

typedef struct {
    const char *name;
    int ndim, shape[4];
    InitKind init;
    float value, wd;
} WantVar;

static void expect_table(const ModelSpec *s, const WantVar *want, int n_want, size_t want_params) {
    CHECK(s->n_vars == n_want, "%s: %d variables, want %d", s->name, s->n_vars, n_want);
    size_t offset = 0;
    for (int i = 0; i < n_want && i < s->n_vars; i++) {
        const ModelVar *v = &s->vars[i];
        const WantVar *w = &want[i];
        CHECK(strcmp(v->name, w->name) == 0, "%s var %d: name %s, want %s", s->name, i, v->name, w->name);
        CHECK(v->ndim == w->ndim, "%s %s: ndim %d, want %d", s->name, w->name, v->ndim, w->ndim);
        size_t n = 1;
        for (int d = 0; d < 4; d++) {
            CHECK(v->shape[d] == w->shape[d], "%s %s: shape[%d] = %d, want %d", s->name, w->name, d,
                   v->shape[d], w->shape[d]);
            if (d < w->ndim) n *= (size_t)w->shape[d];
        }
        CHECK(v->n_floats == n, "%s %s: n_floats %zu, want %zu", s->name, w->name, v->n_floats, n);
        CHECK(v->offset == offset, "%s %s: offset %zu, want %zu (packed in table order)", s->name, w->name,
               v->offset, offset);
        CHECK(v->init == w->init && v->init_value == w->value, "%s %s: init %d %g, want %d %g", s->name,
               w->name, v->init, v->init_value, w->init, w->value);
        CHECK(v->wd == w->wd, "%s %s: wd %g, want %g", s->name, w->name, v->wd, w->wd);
        CHECK(model_spec_find(s, w->name) == i, "model_spec_find(%s) = %d, want %d", w->name,
               model_spec_find(s, w->name), i);
        offset += n;
    }
    CHECK(s->n_params == want_params, "%s: %zu parameters, want %zu", s->name, s->n_params, want_params);
    CHECK(offset == s->n_params, "%s: variables cover %zu floats of %zu", s->name, offset, s->n_params);
}

static void test_tables(void) {
    char err[256];
    ModelSpec s;
    const InitKind T = INIT_TRUNCATED_NORMAL, K = INIT_CONSTANT;
    /* The classic multi-GPU MNIST network (model/model.c's plan_mnist). */
    const WantVar mnist[] = {
        {"conv1/weights", 4, {5, 5, 1, 32}, T, 5e-2f, 0}, {"conv1/biases", 1, {32}, K, 0.0f, 0},
        {"conv2/weights", 4, {5, 5, 32, 64}, T, 5e-2f, 0}, {"conv2/biases", 1, {64}, K, 0.1f, 0},
        {"local3/weights", 2, {3136, 1024}, T, 0.04f, 0}, {"local3/biases", 1, {1024}, K, 0.1f, 0},
        {"local4/weights", 2, {1024, 10}, T, 0.04f, 0}, {"local4/biases", 1, {10}, K, 0.1f, 0},
        {"softmax_linear/weights", 2, {10, 10}, T, 1.0f / 192.0f, 0},
        {"softmax_linear/biases", 1, {10}, K, 0.0f, 0}};
    CHECK(model_spec_init(&s, "mnist", 28, 28, 1, 10, err, sizeof err) == 0, "mnist 28x28x1: %s", err);
    expect_table(&s, mnist, 10, 3274744);
    CHECK(s.H == 28 && s.W == 28 && s.C == 1 && s.num_classes == 10 && s.kind == MODEL_MNIST &&
           strcmp(s.name, "mnist") == 0, "mnist spec header");
    /* Forward cost: 27.8 MFLOP per image (multiply-add = 2 FLOPs). */
    double macs = model_forward_flops_per_example(&s);
    CHECK(fabs(2 * macs / 1e6 - 27.8) < 0.05, "mnist forward %.3f MFLOP, want about 27.8", 2 * macs / 1e6);

    /* TensorFlow's cifar10.py inference(). */
    const WantVar cifar[] = {
        {"conv1/weights", 4, {5, 5, 3, 64}, T, 5e-2f, 0}, {"conv1/biases", 1, {64}, K, 0.0f, 0},
        {"conv2/weights", 4, {5, 5, 64, 64}, T, 5e-2f, 0}, {"conv2/biases", 1, {64}, K, 0.1f, 0},
        {"local3/weights", 2, {2304, 384}, T, 0.04f, 0.004f}, {"local3/biases", 1, {384}, K, 0.1f, 0},
        {"local4/weights", 2, {384, 192}, T, 0.04f, 0.004f}, {"local4/biases", 1, {192}, K, 0.1f, 0},
        {"softmax_linear/weights", 2, {192, 10}, T, 1.0f / 192.0f, 0},
        {"softmax_linear/biases", 1, {10}, K, 0.0f, 0}};
    CHECK(model_spec_init(&s, "cifar10", 24, 24, 3, 10, err, sizeof err) == 0, "cifar10 24x24x3: %s", err);
    expect_table(&s, cifar, 10, 1068298);
    macs = model_forward_flops_per_example(&s);
    CHECK(fabs(2 * macs / 1e6 - 36.9) < 0.05, "cifar10 forward %.3f MFLOP, want about 36.9", 2 * macs / 1e6);

    /* The input shape comes from the data: 32x32x3 uncropped gives 8x8x64 = 4096 into local3;
     * 28x28x1 cifar10 (grayscale) 7x7x64 = 3136. */
    CHECK(model_spec_init(&s, "cifar10", 32, 32, 3, 10, err, sizeof err) == 0 &&
           s.vars[model_spec_find(&s, "local3/weights")].shape[0] == 4096, "cifar10 32x32x3 local3 input");
    CHECK(model_spec_init(&s, "cifar10", 28, 28, 1, 7, err, sizeof err) == 0 &&
           s.vars[4].shape[0] == 3136 && s.vars[0].shape[2] == 1 && s.vars[8].shape[1] == 7,
           "cifar10 28x28x1, 7 classes");
    CHECK(model_spec_init(&s, "mnist", 9, 11, 3, 4, err, sizeof err) == 0 &&
           s.vars[4].shape[0] == 3 * 3 * 64 && s.vars[8].shape[1] == 4, "mnist 9x11x3 (odd: 9->5->3, 11->6->3)");
    CHECK(model_spec_find(&s, "no/such") == -1, "model_spec_find of an unknown name must be -1");

    /* Bad input: one clear message, -1. */
    err[0] = 0;
    CHECK(model_spec_init(&s, "resnet", 24, 24, 3, 10, err, sizeof err) == -1 && strstr(err, "resnet"),
           "unknown model must fail naming it (err: %s)", err);
    err[0] = 0;
    CHECK(model_spec_init(&s, "mnist", 0, 28, 1, 10, err, sizeof err) == -1 && strstr(err, "0x28x1"),
           "0x28x1 must fail naming the shape (err: %s)", err);
    err[0] = 0;
    CHECK(model_spec_init(&s, "cifar10", 24, 24, 3, 0, err, sizeof err) == -1 && strstr(err, "num_classes"),
           "0 classes must fail (err: %s)", err);
    model_spec_init(&s, "cifar10", 24, 24, 3, 10, err, sizeof err);
    int32_t labels[3] = {0, 9, 10};
    err[0] = 0;
    CHECK(model_check_labels(&s, labels, 2, err, sizeof err) == 0, "labels 0, 9 are valid");
    CHECK(model_check_labels(&s, labels, 3, err, sizeof err) == -1 && strstr(err, "example 2"),
           "label 10 of 10 classes must be rejected naming example 2 (err: %s)", err);
}

static void test_rng(void) {
    /* splitmix64 from state 1234567: the reference outputs of Vigna's splitmix64.c. */
    InitRng r = {1234567, 0, 0.0};
    const uint64_t want[5] = {6457827717110365317ULL, 3203168211198807973ULL, 9817491932198370423ULL,
                              4593380528125082431ULL, 16408922859458223821ULL};
    for (int i = 0; i < 5; i++) {
        uint64_t got = init_rng_next_u64(&r);
        CHECK(got == want[i], "splitmix64 output %d: %llu, want %llu", i, (unsigned long long)got,
               (unsigned long long)want[i]);
    }
    /* The polar method with libm's log on the same uniforms must agree with
     * init_rng_normal (whose log is computed from basic operations) to ~1 ulp. */
    InitRng a, b;
    init_rng_seed(&a, 99, 5);
    init_rng_seed(&b, 99, 5);
    double worst = 0;
    for (int i = 0; i < 20000; i++) {
        double u, v, s;
        do {
            u = 2.0 * init_rng_uniform(&b) - 1.0;
            v = 2.0 * init_rng_uniform(&b) - 1.0;
            s = u * u + v * v;
        } while (s >= 1.0 || s == 0.0);
        double f = sqrt(-2.0 * log(s) / s);
        double z0 = init_rng_normal(&a), z1 = init_rng_normal(&a);
        worst = fmax(worst, fabs(z0 - u * f) / fabs(u * f));
        worst = fmax(worst, fabs(z1 - v * f) / fabs(v * f));
    }
    CHECK(worst < 1e-13, "init_rng_normal vs libm polar method: worst relative difference %g", worst);
    /* Moments of 200k normals. */
    InitRng n;
    init_rng_seed(&n, 7, 0);
    double m = 0, m2 = 0;
    const int N = 200000;
    for (int i = 0; i < N; i++) {
        double z = init_rng_normal(&n);
        m += z;
        m2 += z * z;
    }
    m /= N;
    m2 = m2 / N - m * m;
    CHECK(fabs(m) < 0.01 && fabs(m2 - 1.0) < 0.01, "normal mean %g variance %g", m, m2);
}

static void test_init(void) {
    char err[256];
    ModelSpec s;
    model_spec_init(&s, "cifar10", 24, 24, 3, 10, err, sizeof err);
    float *p1 = malloc(sizeof(float) * s.n_params), *p2 = malloc(sizeof(float) * s.n_params),
          *p3 = malloc(sizeof(float) * s.n_params);
    model_init_params(p1, &s, 42);
    model_init_params(p2, &s, 42);
    model_init_params(p3, &s, 43);
    CHECK(memcmp(p1, p2, sizeof(float) * s.n_params) == 0, "same seed must give the same bits");
    size_t same = 0;
    for (int v = 0; v < s.n_vars; v++) {
        const ModelVar *var = &s.vars[v];
        const float *x = p1 + var->offset;
        if (var->init == INIT_CONSTANT) {
            for (size_t i = 0; i < var->n_floats; i++)
                if (x[i] != var->init_value) {
                    CHECK(0, "%s[%zu] = %g, want the constant %g", var->name, i, x[i], var->init_value);
                    break;
                }
            continue;
        }
        for (size_t i = 0; i < var->n_floats; i++) same += p1[var->offset + i] == p3[var->offset + i];
        double sd = var->init_value, m = 0, m2 = 0, mx = 0;
        for (size_t i = 0; i < var->n_floats; i++) {
            m += x[i];
            m2 += (double)x[i] * x[i];
            mx = fmax(mx, fabs(x[i]));
        }
        m /= var->n_floats;
        double stddev = sqrt(m2 / var->n_floats - m * m);
        /* A normal truncated at +-2 sigma has stddev sigma * sqrt(1 - 4 phi(2) / (2 Phi(2) - 1)). */
        double phi2 = exp(-2.0) / sqrt(2 * M_PI), mass = erf(2 / sqrt(2.0));
        double want_sd = sd * sqrt(1 - 4 * phi2 / mass);
        CHECK(mx <= 2 * sd * (1 + 1e-6), "%s: |value| %g beyond 2 stddev (%g)", var->name, mx, 2 * sd);
        double tol = var->n_floats > 10000 ? 0.02 : 0.15; /* small tables are noisy */
        CHECK(fabs(stddev / want_sd - 1) < tol, "%s: stddev %g, want about %g", var->name, stddev, want_sd);
        CHECK(fabs(m) < 4 * want_sd / sqrt((double)var->n_floats) + 1e-9, "%s: mean %g too far from 0",
               var->name, m);
    }
    CHECK(same < 10, "seeds 42 and 43 agree on %zu truncated-normal values", same);
    /* A variable's values depend only on (seed, name): mnist's conv2/weights equals
     * cifar10's?  No: shapes differ.  But the same model at another input size
     * keeps conv1/conv2 bit for bit. */
    ModelSpec s32;
    model_spec_init(&s32, "cifar10", 32, 32, 3, 10, err, sizeof err);
    float *q = malloc(sizeof(float) * s32.n_params);
    model_init_params(q, &s32, 42);
    int c2 = model_spec_find(&s, "conv2/weights"), c2b = model_spec_find(&s32, "conv2/weights");
    CHECK(memcmp(p1 + s.vars[c2].offset, q + s32.vars[c2b].offset, sizeof(float) * s.vars[c2].n_floats) == 0,
           "conv2/weights must not depend on the input size (streams are per name)");
    free(p1); free(p2); free(p3); free(q);
}

/* Options a network does not read take their defaults (NetInfo.opts_used). */
static void test_unused_options(void) {
    ModelSpec s;
    char err[256];
    ModelOptions o = {.width_multiplier = 0.5f, .head = MODEL_HEAD_SEED, .fc_width = 512};
    CHECK(model_spec_init_opts(&s, "mnist", 28, 28, 1, 10, &o, err, sizeof err) == 0, "%s", err);
    CHECK(s.opts.width_multiplier == 1.0f && s.opts.head == MODEL_HEAD_KERAS && s.opts.fc_width == 4096,
          "mnist kept options it does not read: width %g head %d fc %d", s.opts.width_multiplier, (int)s.opts.head,
          s.opts.fc_width);
    CHECK(model_spec_init_opts(&s, "mobilenet_v2", 32, 32, 3, 10, &o, err, sizeof err) == 0, "%s", err);
    CHECK(s.opts.width_multiplier == 0.5f && s.opts.head == MODEL_HEAD_SEED && s.opts.fc_width == 4096,
          "mobilenet_v2: width %g head %d fc %d", s.opts.width_multiplier, (int)s.opts.head, s.opts.fc_width);
    CHECK(model_spec_init_opts(&s, "vgg11", 32, 32, 3, 10, &o, err, sizeof err) == 0, "%s", err);
    CHECK(s.opts.width_multiplier == 1.0f && s.opts.fc_width == 512, "vgg11: width %g fc %d",
          s.opts.width_multiplier, s.opts.fc_width);
}

int main(void) {
    test_unused_options();
    test_tables();
    test_rng();
    test_init();
    if (check_failures) {
        printf("%d spec checks FAILED\n", check_failures);
        return 1;
    }
    printf("all spec checks passed\n");
    return 0;
}
