/* cuda_check.h — the one checking macro family for CUDA, cuDNN, cuBLAS and
 * NCCL calls.
 *
 * Where it sits: used by every CUDA file of the GPU code (tower/, model/,
 * ps/).  A failing call prints one line with the call's text, the library's
 * error string, the file and the line, then exits non-zero: a GPU error in the
 * middle of a step is not recoverable, and a silent one would train garbage.
 * CUDA_SOFT is the reporting form for set-up code (allocations, handles),
 * where a failure must become a message for the caller instead of an exit;
 * model/layers_cuda.h adds CUDNN_SOFT and CUBLAS_SOFT on the same helper.
 */
#ifndef TOWER_CUDA_CHECK_H
#define TOWER_CUDA_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

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

/* CUDA_SOFT(call, err, err_n_bytes) evaluates to 0 on success, or writes
 * "CUDA error: <call> failed: <reason> (<file>:<line>)" to err and evaluates
 * to -1. */
static inline int tower_cuda_soft_fail(const char *what, const char *call, const char *msg,
                                       const char *file, int line, char *err, size_t err_n_bytes) {
    snprintf(err, err_n_bytes, "%s error: %s failed: %s (%s:%d)", what, call, msg, file, line);
    return -1;
}
static inline int tower_cuda_soft(cudaError_t e, const char *call, const char *file, int line,
                                  char *err, size_t err_n_bytes) {
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError(); /* clear a non-sticky error so later checks do not see it */
    return tower_cuda_soft_fail("CUDA", call, cudaGetErrorString(e), file, line, err, err_n_bytes);
}
#define CUDA_SOFT(call, err, err_n_bytes) tower_cuda_soft((call), #call, __FILE__, __LINE__, err, err_n_bytes)

#endif
