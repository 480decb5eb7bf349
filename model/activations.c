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

/* Columns c0 .. c0 + W - 1 (W a constant) summed in W accumulators the compiler keeps in registers: dbias may
 * alias dout as far as it knows, so a loop adding into dbias itself loads and stores it every row. */
#define BIAS_BLOCK(W)                                                                                              \
    static void bias_block_##W(float *dbias, const float *dout, size_t n_rows, int C, int c0) {                   \
        float acc[W];                                                                                              \
        for (int j = 0; j < W; j++) acc[j] = dbias[c0 + j];                                                        \
        for (size_t r = 0; r < n_rows; r++) {                                                                      \
            const float *g = dout + r * C + c0;                                                                    \
            for (int j = 0; j < W; j++) acc[j] += g[j];                                                            \
        }                                                                                                          \
        for (int j = 0; j < W; j++) dbias[c0 + j] = acc[j];                                                        \
    }
BIAS_BLOCK(32)
BIAS_BLOCK(8)
BIAS_BLOCK(1)

void bias_add_backward_columns(float *dbias, const float *dout, size_t n_rows, int C, int c0, int c1) {
    int c = c0;
    for (; c + 32 <= c1; c += 32) bias_block_32(dbias, dout, n_rows, C, c);
    for (; c + 8 <= c1; c += 8) bias_block_8(dbias, dout, n_rows, C, c);
    for (; c < c1; c++) bias_block_1(dbias, dout, n_rows, C, c);
}

void bias_add_backward(float *dbias, const float *dout, size_t n_rows, int C) {
    bias_add_backward_columns(dbias, dout, n_rows, C, 0, C);
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
