/* activations.c — bias add and relu, the building blocks fused into conv2d
 * and dense.
 *
 * Where it sits: called per image from inside conv2d's parallel loop and
 * per batch from dense, so these loops are serial on purpose (no OpenMP):
 * the caller decides the threading.
 */
#include "model/layers.h"

void bias_add_forward(float *out, const float *inp, const float *bias, size_t n_rows, int C) {
    for (size_t r = 0; r < n_rows; r++) {
        const float *x = inp + r * C;
        float *y = out + r * C;
        for (int c = 0; c < C; c++) y[c] = x[c] + bias[c];
    }
}

void bias_add_backward(float *dbias, const float *dout, size_t n_rows, int C) {
    for (size_t r = 0; r < n_rows; r++) {
        const float *g = dout + r * C;
        for (int c = 0; c < C; c++) dbias[c] += g[c];
    }
}

void relu_forward(float *out, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void relu_backward(float *dinp, const float *out, const float *dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float g = dout[i]; /* loaded unconditionally, so the select vectorises */
        dinp[i] = out[i] > 0.0f ? g : 0.0f;
    }
}
