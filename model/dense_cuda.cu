/* dense_cuda.cu — fully connected layers on the GPU with cuBLAS: the CUDA
 * mirror of dense.c.
 *
 * Where it sits: local3, local4 and softmax_linear of both models on a GPU
 * tower (model_cuda.cu).  cuBLAS is column-major; a row-major (R, C) matrix
 * is the column-major (C, R) matrix, its transpose, so each row-major
 * product below is written as the product of the transposes in the other
 * order:
 *   out (B, N) = inp (B, K) @ W (K, N)    <=>  out^T = W^T @ inp^T
 *   dW  (K, N) = inp^T @ g (B, N)         <=>  dW^T  = g^T @ inp
 *   dinp (B, K) = g @ W^T                 <=>  dinp^T = W @ g^T
 * TF32 follows the handle's math mode (model_cuda.cu sets it).
 * What it does not do: allocate, or synchronise.
 */
#include "model/layers_cuda.h"
#include "base/cuda_check.h"

extern "C" void dense_forward_cuda(float *out, const float *inp, const float *weight, const float *bias,
                                   const Dense *d, int B, cublasHandle_t cublas, cudaStream_t stream) {
    const int N = d->n_out, K = d->n_in;
    const float one = 1.0f, zero = 0.0f;
    /* column-major: out^T (N, B) = W^T (N, K; ld N) @ inp^T (K, B; ld K) */
    CUBLAS_CHECK(cublasSgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_N, N, B, K, &one, weight, N, inp, K, &zero, out, N));
    if (bias || d->act != ACT_NONE) bias_act_forward_cuda(out, bias, (size_t)B, N, d->act, stream);
}

extern "C" void dense_backward_cuda(float *dinp, float *dweight, float *dbias, float *dpre,
                                    const float *out, const float *dout, const float *inp,
                                    const float *weight, const Dense *d, int B, int dw_add,
                                    cublasHandle_t cublas, cudaStream_t stream) {
    const int N = d->n_out, K = d->n_in;
    const float one = 1.0f, zero = 0.0f;
    const float *dw_beta = dw_add ? &one : &zero;
    const float *g = dout;
    if (d->act == ACT_RELU) {
        relu_backward_cuda(dpre, out, dout, (size_t)B * N, stream);
        g = dpre;
    }
    if (dbias) {
        if (!dw_add) CUDA_CHECK(cudaMemsetAsync(dbias, 0, sizeof(float) * N, stream));
        bias_add_backward_cuda(dbias, g, (size_t)B, N, stream);
    }
    /* column-major: dW^T (N, K; ld N) = g^T (N, B; ld N) @ inp (B, K) = op_T(inp^T (K, B; ld K)) */
    CUBLAS_CHECK(cublasSgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_T, N, K, B, &one, g, N, inp, K, dw_beta, dweight, N));
    /* column-major: dinp^T (K, B; ld K) = W (K, N) = op_T(W^T (N, K; ld N)) @ g^T (N, B; ld N) */
    if (dinp) CUBLAS_CHECK(cublasSgemm(cublas, CUBLAS_OP_T, CUBLAS_OP_N, K, B, N, &one, weight, N, g, N, &zero, dinp, K));
}
