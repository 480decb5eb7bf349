/* dense.c — fully connected layers (TensorFlow's matmul + bias [+ relu]).
 *
 * Where it sits: local3, local4 and softmax_linear of both models
 * (model.c).  Each call is one sgemm over the whole batch, threaded by
 * oneDNN with the calling thread's omp_get_max_threads().
 * What it does not do: allocate, or run inside an OpenMP parallel region
 * (it would then run on one thread).
 */
#include "model/layers.h"
#include "model/sgemm.h"

#include <string.h>

void dense_forward(float *out, const float *inp, const float *weight, const float *bias,
                   const Dense *d, int B) {
    const int N = d->n_out, K = d->n_in;
    if (bias) {
        for (int b = 0; b < B; b++) memcpy(out + (size_t)b * N, bias, sizeof(float) * N);
    }
    sgemm(0, 0, B, N, K, 1.0f, inp, K, weight, N, bias ? 1.0f : 0.0f, out, N);
    if (d->act == ACT_RELU) relu_forward(out, out, (size_t)B * N);
}

void dense_backward(float *dinp, float *dweight, float *dbias, float *dpre,
                    const float *out, const float *dout, const float *inp,
                    const float *weight, const Dense *d, int B) {
    const int N = d->n_out, K = d->n_in;
    const float *g = dout;
    if (d->act == ACT_RELU) {
        relu_backward(dpre, out, dout, (size_t)B * N);
        g = dpre;
    }
    if (dbias) {
        memset(dbias, 0, sizeof(float) * N);
        bias_add_backward(dbias, g, B, N);
    }
    sgemm(1, 0, K, N, B, 1.0f, inp, K, g, N, 0.0f, dweight, N);
    if (dinp) sgemm(0, 1, B, K, N, 1.0f, g, N, weight, N, 0.0f, dinp, K);
}
