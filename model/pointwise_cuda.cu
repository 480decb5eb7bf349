/* pointwise_cuda.cu — the 1x1 convolution without bias on the GPU: one
 * cuBLAS GEMM over every pixel of the batch, the CUDA twin of pointwise.c.
 *
 * Where it sits: MobileNetV2's *_expand, *_project and Conv_1 on a GPU
 * tower.  Row-major products through cuBLAS's column-major view, as
 * dense_cuda.cu (a row-major (R, C) matrix is the column-major (C, R)):
 *   out (M, N) = inp (M, K) @ W (K, N)   <=>  out^T = W^T @ inp^T
 *   dW  (K, N) += inp^T @ g (M, N)       <=>  dW^T += g^T @ inp   (beta = 1: ADDED)
 *   dinp (M, K) = g @ W^T                <=>  dinp^T = W @ g^T
 * TF32 follows the handle's math mode.
 * What it does not do: allocate, synchronise, strides or a bias.
 */
#include "model/layers_cuda.h"

static int rows_as_int(size_t n_rows) {
    if (n_rows > 0x7fffffff) {
        fprintf(stderr, "pointwise_cuda: %zu rows exceed cuBLAS's int range\n", n_rows);
        exit(2);
    }
    return (int)n_rows;
}

extern "C" void pointwise_forward_cuda(float *out, const float *inp, const float *weight, size_t n_rows, int C_in,
                                       int C_out, cublasHandle_t cublas, cudaStream_t stream) {
    (void)stream; /* cublas is bound to it */
    const int M = rows_as_int(n_rows);
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_N, C_out, M, C_in, &one, weight, C_out, inp, C_in, &zero,
                             out, C_out));
}

extern "C" void pointwise_backward_cuda(float *dinp, float *dweight, const float *dout, const float *inp,
                                        const float *weight, size_t n_rows, int C_in, int C_out,
                                        cublasHandle_t cublas, cudaStream_t stream) {
    (void)stream;
    const int M = rows_as_int(n_rows);
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_T, C_out, C_in, M, &one, dout, C_out, inp, C_in, &one,
                             dweight, C_out));
    if (dinp)
        CUBLAS_CHECK(cublasSgemm(cublas, CUBLAS_OP_T, CUBLAS_OP_N, C_in, M, C_out, &one, weight, C_out, dout, C_out,
                                 &zero, dinp, C_in));
}
