/* cuda_check.h — the one checking macro family for CUDA, cuDNN, cuBLAS and
 * NCCL calls.
 *
 * Where it sits: used by every .cu file of the CUDA backend (tower/, model/,
 * ps/).  A failing call prints one line with the call's text, the library's
 * error string, the file and the line, then exits non-zero: a GPU error in the
 * middle of a step is not recoverable, and a silent one would train garbage.
 */
#ifndef TOWER_CUDA_CHECK_H
#define TOWER_CUDA_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define TOWER_CHECK_FAIL(what, call, msg)                                                       \
    do {                                                                                       \
        fprintf(stderr, "%s error: %s failed: %s (%s:%d)\n", what, #call, msg, __FILE__, __LINE__); \
        exit(2);                                                                               \
    } while (0)

#define CUDA_CHECK(call)                                                       \
    do {                                                                       \
        cudaError_t e_ = (call);                                               \
        if (e_ != cudaSuccess) TOWER_CHECK_FAIL("CUDA", call, cudaGetErrorString(e_)); \
    } while (0)

#define CUDNN_CHECK(call)                                                        \
    do {                                                                         \
        cudnnStatus_t s_ = (call);                                               \
        if (s_ != CUDNN_STATUS_SUCCESS) TOWER_CHECK_FAIL("cuDNN", call, cudnnGetErrorString(s_)); \
    } while (0)

#define CUBLAS_CHECK(call)                                                         \
    do {                                                                           \
        cublasStatus_t s_ = (call);                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) TOWER_CHECK_FAIL("cuBLAS", call, cublasGetStatusString(s_)); \
    } while (0)

#define NCCL_CHECK(call)                                                      \
    do {                                                                      \
        ncclResult_t r_ = (call);                                             \
        if (r_ != ncclSuccess) TOWER_CHECK_FAIL("NCCL", call, ncclGetErrorString(r_)); \
    } while (0)

#endif
