/* test_layers_keras_helper.c — runs one MobileNetV2 layer of model/ on
 * float32 files, for tests/interop/keras_layers.py, which compares the
 * results with Keras's layers and TensorFlow's gradients.
 *
 * Where it sits: the `interop` ctest test_layers_keras (skipped without
 * TensorFlow).  Usage:
 *   test_layers_keras_helper depthwise DIR B H W C STRIDE
 *       reads x (B,H,W,C), w (3,3,C), dy; stride 1: depthwise SAME;
 *       stride 2: ZeroPadding2D(correct_pad) then depthwise VALID, as
 *       MobileNetV2; writes y, dx, dw.
 *   test_layers_keras_helper batchnorm DIR B H W C
 *       reads x, gamma, beta, dy; momentum 0.999, epsilon 1e-3, moving
 *       statistics starting at 0 and 1; writes y (training), dx, dgamma,
 *       dbeta, moving_mean, moving_var (after one step), y_eval.
 *   test_layers_keras_helper head DIR B H W C
 *       reads x, dy (B, C); ReLU6 then global average pooling; writes y, dx.
 * Files are raw little-endian float32 named DIR/<name>.f32.  Exits 1 with
 * one line on a missing or short file.
 * What it does not do: compare anything (the Python side does).
 */
#include "model/layers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_dir;

static float *load(const char *name, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.f32", g_dir, name);
    float *x = malloc(sizeof(float) * (n ? n : 1));
    FILE *f = fopen(path, "rb");
    if (!x || !f || fread(x, sizeof(float), n, f) != n) {
        fprintf(stderr, "test_layers_keras_helper: cannot read %zu floats from %s\n", n, path);
        exit(1);
    }
    fclose(f);
    return x;
}

static void save(const char *name, const float *x, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.f32", g_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(x, sizeof(float), n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "test_layers_keras_helper: cannot write %s\n", path);
        exit(1);
    }
}

static float *zeros(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: test_layers_keras_helper depthwise|batchnorm|head DIR B H W C [STRIDE]\n");
        return 2;
    }
    const char *layer = argv[1];
    g_dir = argv[2];
    const int B = atoi(argv[3]), H = atoi(argv[4]), W = atoi(argv[5]), C = atoi(argv[6]);
    const size_t n = (size_t)B * H * W * C;
    if (!strcmp(layer, "depthwise") && argc == 8) {
        const int stride = atoi(argv[7]);
        float *x = load("x", n), *w = load("w", (size_t)9 * C);
        ZeroPad z;
        int t = 0, b = 0, l = 0, r = 0;
        if (stride == 2) keras_correct_pad(&t, &b, &l, &r, H, W, 3);
        Depthwise d;
        if (zeropad_init(&z, H, W, C, t, b, l, r) ||
            depthwise_init(&d, z.OH, z.OW, C, 3, 3, stride, stride == 2 ? PAD_VALID : PAD_SAME)) {
            fprintf(stderr, "test_layers_keras_helper: bad depthwise shape\n");
            return 1;
        }
        const size_t pn = (size_t)B * z.OH * z.OW * C, out_n = (size_t)B * d.OH * d.OW * C;
        float *xp = zeros(pn), *y = zeros(out_n), *dy = load("dy", out_n), *dxp = zeros(pn), *dx = zeros(n);
        float *dw = zeros((size_t)9 * C), *scratch = zeros(depthwise_scratch_n_floats(&d, 2));
        zeropad_forward(xp, x, &z, B);
        depthwise_forward(y, xp, w, &d, B);
        depthwise_backward(dxp, dw, scratch, dy, xp, w, &d, B, 2);
        zeropad_backward(dx, dxp, &z, B);
        save("y", y, out_n);
        save("dx", dx, n);
        save("dw", dw, (size_t)9 * C);
        return 0;
    }
    if (!strcmp(layer, "batchnorm")) {
        const BatchNorm bn = {C, 0.999, 1e-3f, ACT_NONE};
        const size_t rows = (size_t)B * H * W;
        float *x = load("x", n), *gamma = load("gamma", C), *beta = load("beta", C), *dy = load("dy", n);
        float *y = zeros(n), *dx = zeros(n), *mean = zeros(C), *var = zeros(C), *inv_std = zeros(C);
        float *dgamma = zeros(C), *dbeta = zeros(C), *mm = zeros(C), *mv = zeros(C);
        double *scratch = calloc(batchnorm_scratch_n_doubles(C), sizeof(double));
        for (int c = 0; c < C; c++) mv[c] = 1.0f;
        batchnorm_forward_train(y, mean, var, inv_std, scratch, x, gamma, beta, &bn, rows);
        batchnorm_backward(dx, dgamma, dbeta, scratch, dy, x, mean, inv_std, gamma, &bn, rows);
        batchnorm_update_moving(mm, mv, mean, var, bn.momentum, C);
        save("y", y, n);
        save("dx", dx, n);
        save("dgamma", dgamma, C);
        save("dbeta", dbeta, C);
        save("moving_mean", mm, C);
        save("moving_var", mv, C);
        batchnorm_forward_eval(y, inv_std, x, mm, mv, gamma, beta, &bn, rows);
        save("y_eval", y, n);
        return 0;
    }
    if (!strcmp(layer, "head")) {
        float *x = load("x", n), *dy = load("dy", (size_t)B * C);
        float *r6 = zeros(n), *y = zeros((size_t)B * C), *dr6 = zeros(n), *dx = zeros(n);
        relu6_forward(r6, x, n);
        global_avgpool_forward(y, r6, B, H * W, C);
        global_avgpool_backward(dr6, dy, B, H * W, C);
        relu6_backward(dx, r6, dr6, n);
        save("y", y, (size_t)B * C);
        save("dx", dx, n);
        return 0;
    }
    fprintf(stderr, "test_layers_keras_helper: unknown layer or arguments: %s\n", layer);
    return 2;
}
