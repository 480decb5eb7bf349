/* test_nets_keras_helper.c — the C side of the interop test
 * test_model_nets_keras and test_model_mobilenet_keras: writes one training
 * step of one of Tower's Keras networks (vgg11, vgg16, resnet20, resnet50,
 * mobilenet_v2) for keras_nets.py / keras_mobilenet.py to compare
 * with the Keras model (tf.keras.applications.VGG16 / ResNet50, or the same
 * layers built in Keras for vgg11 and resnet20) loaded with the same
 * weights by name.
 *
 * Where it sits: tests/ (label interop).  Usage:
 *   test_nets_keras_helper NET OUT_DIR H B FC_WIDTH [WIDTH [SEED]]
 * (10 classes, 3 channels; FC_WIDTH: the VGG head, 0 for Keras's 4096;
 * WIDTH: mobilenet_v2's width multiplier, default (or 0) 1; SEED: the
 * variables' initialiser seed, default 2026)
 * writes into OUT_DIR: vars.txt (one line per variable: name, offset,
 * ndim, shape), params.bin (n_params floats, seeded), x.bin ((B, H, H, 3)
 * floats), labels.bin (B int32), loss.bin (1 float: the training-mode
 * loss), grads.bin (n_params floats: model_backward into zeros),
 * eval_logits.bin ((B, 10) floats: an evaluation-mode forward with moving
 * statistics after one model_update_moving), moved.bin (n_params floats:
 * the variables after that update).
 * What it does not do: judge anything (the Python side does).
 */
#include "gradcheck.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int write_file(const char *dir, const char *name, const void *p, size_t n_bytes) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n_bytes, f) != n_bytes) {
        fprintf(stderr, "cannot write %s\n", path);
        if (f) fclose(f);
        return -1;
    }
    return fclose(f) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    if (argc < 6 || argc > 8) {
        fprintf(stderr, "usage: %s NET OUT_DIR H B FC_WIDTH [WIDTH [SEED]]\n", argv[0]);
        return 2;
    }
    const char *net = argv[1], *dir = argv[2];
    const int H = atoi(argv[3]), B = atoi(argv[4]), K = 10;
    ModelOptions o = {argc >= 7 ? (float)atof(argv[6]) : 0.0f, MODEL_HEAD_KERAS, atoi(argv[5])};
    const uint64_t seed = argc == 8 ? strtoull(argv[7], NULL, 10) : 2026;
    ModelSpec s;
    char err[256];
    if (B < 1 || model_spec_init_opts(&s, net, H, H, 3, K, &o, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const size_t n = s.n_params, x_n = (size_t)B * H * H * 3;
    float *params = malloc(sizeof(float) * n), *grads = calloc(n, sizeof(float)), *x = malloc(sizeof(float) * x_n);
    float *logits = malloc(sizeof(float) * B * K);
    int32_t *labels = malloc(sizeof(int32_t) * B);
    model_init_params(params, &s, seed);
    /* gamma, beta, moving statistics off their initial values, so that every term shows */
    for (int v = 0; v < s.n_vars; v++) {
        const char *nm = strrchr(s.vars[v].name, '/') + 1;
        float lo = 0, hi = 0;
        if (!strcmp(nm, "gamma")) lo = 0.5f, hi = 1.5f;
        else if (!strcmp(nm, "beta")) lo = -0.3f, hi = 0.3f;
        else if (!strcmp(nm, "moving_mean")) lo = -0.2f, hi = 0.2f;
        else if (!strcmp(nm, "moving_variance")) lo = 0.5f, hi = 2.0f;
        else if (!strcmp(nm, "bias")) lo = -0.1f, hi = 0.1f;
        else continue;
        gradcheck_fill_uniform(params + s.vars[v].offset, s.vars[v].n_floats, lo, hi, 300 + (uint64_t)v);
    }
    gradcheck_fill_uniform(x, x_n, -1.0f, 1.0f, 99);
    for (int b = 0; b < B; b++) labels[b] = (3 * b + 1) % K;
    ModelActs *a = model_acts_create(&s, B);
    if (!a) return 1;
    float loss = model_forward(NULL, NULL, a, x, labels, params, B);
    model_backward(grads, a, params);
    FILE *f;
    char path[1024];
    snprintf(path, sizeof path, "%s/vars.txt", dir);
    if (!(f = fopen(path, "w"))) return 1;
    for (int v = 0; v < s.n_vars; v++) {
        fprintf(f, "%s %zu %d", s.vars[v].name, s.vars[v].offset, s.vars[v].ndim);
        for (int d = 0; d < s.vars[v].ndim; d++) fprintf(f, " %d", s.vars[v].shape[d]);
        fprintf(f, "\n");
    }
    fclose(f);
    int rc = write_file(dir, "params.bin", params, sizeof(float) * n) | write_file(dir, "x.bin", x, sizeof(float) * x_n) |
             write_file(dir, "labels.bin", labels, sizeof(int32_t) * B) | write_file(dir, "loss.bin", &loss, sizeof loss) |
             write_file(dir, "grads.bin", grads, sizeof(float) * n);
    model_update_moving(params, a);
    model_acts_set_training(a, 0);
    model_forward(logits, NULL, a, x, labels, params, B);
    rc |= write_file(dir, "eval_logits.bin", logits, sizeof(float) * B * K) |
          write_file(dir, "moved.bin", params, sizeof(float) * n);
    model_acts_free(a);
    free(params);
    free(grads);
    free(x);
    free(logits);
    free(labels);
    return rc ? 1 : 0;
}
