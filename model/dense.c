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

#include <omp.h>
#include <string.h>

/* dinp (B, K) = g (B, N) @ weight (K, N)^T.  dnnl_sgemm runs this shape
 * (few rows, B operand transposed) on one thread however many it is given
 * (bench/RESULTS.md: mnist local3 at ~150 GFLOP/s with 1 or 2 threads), so
 * the K output columns are split across the OpenMP team instead, one
 * single-threaded sgemm per thread on its own column block. */
static void input_grad(float *dinp, const float *g, const float *weight, int B, int K, int N) {
    if ((double)B * K * N < SGEMM_SERIAL_MACS || omp_get_max_threads() == 1) {
        sgemm(0, 1, B, K, N, 1.0f, g, N, weight, N, 0.0f, dinp, K);
        return;
    }
#pragma omp parallel
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int k0 = (int)((long)K * t / nt), k1 = (int)((long)K * (t + 1) / nt);
        sgemm(0, 1, B, k1 - k0, N, 1.0f, g, N, weight + (size_t)k0 * N, N, 0.0f, dinp + k0, K);
    }
}

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
                    const float *weight, const Dense *d, int B, int dw_add) {
    const int N = d->n_out, K = d->n_in;
    const float *g = dout;
    if (d->act == ACT_RELU) {
        relu_backward(dpre, out, dout, (size_t)B * N);
        g = dpre;
    }
    if (dbias) {
        if (!dw_add) memset(dbias, 0, sizeof(float) * N);
        bias_add_backward(dbias, g, B, N);
    }
    sgemm(1, 0, K, N, B, 1.0f, inp, K, g, N, dw_add ? 1.0f : 0.0f, dweight, N);
    if (dinp) input_grad(dinp, g, weight, B, K, N);
}
