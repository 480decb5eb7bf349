/* pointwise.c — the 1x1 convolution without bias (Keras Conv2D(k, 1,
 * use_bias=False)) as one GEMM over every pixel of the batch.
 *
 * Where it sits: MobileNetV2's *_expand and *_project layers and Conv_1.
 * In NHWC a (B, H, W, C_in) tensor is already the (B*H*W, C_in) matrix and
 * Keras's (1, 1, C_in, C_out) kernel the (C_in, C_out) matrix, so nothing
 * is copied.  Why not conv2d with a 1x1 kernel: conv2d copies each image
 * through im2col and multiplies image by image (a 16-row GEMM on a 4x4
 * map), and it OVERWRITES its weight gradient; this layer ADDS (the
 * convention of the new layers).
 * What it does not do: strides, a bias, allocate; call it outside an
 * OpenMP parallel region (sgemm then splits across the team).
 */
#include "model/layers.h"
#include "model/sgemm.h"

#include <stdio.h>
#include <stdlib.h>

/* sgemm takes int dimensions. */
static int rows_as_int(size_t n_rows) {
    if (n_rows > 0x7fffffff) {
        fprintf(stderr, "pointwise: %zu rows exceed sgemm's int range\n", n_rows);
        abort();
    }
    return (int)n_rows;
}

void pointwise_forward(float *out, const float *inp, const float *weight, size_t n_rows,
                       int C_in, int C_out) {
    const int M = rows_as_int(n_rows);
    sgemm(0, 0, M, C_out, C_in, 1.0f, inp, C_in, weight, C_out, 0.0f, out, C_out);
}

void pointwise_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                        const float *weight, size_t n_rows, int C_in, int C_out) {
    const int M = rows_as_int(n_rows);
    /* dweight (C_in, C_out) += inp^T @ dout */
    sgemm(1, 0, C_in, C_out, M, 1.0f, inp, C_in, dout, C_out, 1.0f, dweight, C_out);
    /* dinp (M, C_in) = dout @ weight^T */
    if (dinp) sgemm(0, 1, M, C_in, C_out, 1.0f, dout, C_out, weight, C_out, 0.0f, dinp, C_in);
}
