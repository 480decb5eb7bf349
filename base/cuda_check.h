/* cuda_check.h — the one checking family for CUDA, cuDNN, cuBLAS and NCCL
 * calls, after ggml's CUDA_CHECK_GEN (ggml/src/ggml-cuda/common.cuh).
 *
 * Where it sits: base/, under every CUDA file (model/, tower/, ps/, tests).
 * One generic macro, TOWER_CHECK_GEN(what, call, success, error_fn), runs
 * `call` once and, when its result is not `success`, reports
 *
 *     <what> error: <call's text> failed: <error_fn(result)> (<file>:<line>, device <d>)
 *
 * with d the calling thread's current device (cudaGetDevice; -1 when even
 * that fails), and ends the process with status 2 through
 * tower_check_fatal (base/check.h): only the first failing thread prints,
 * and the exit is _Exit, not exit, so no atexit teardown of CUDA or NCCL
 * races the other tower threads.  A GPU error in the middle of a step is
 * not recoverable, and a silent one would train garbage.
 *
 * CUDA_CHECK, CUDNN_CHECK, CUBLAS_CHECK and NCCL_CHECK are that macro with
 * each library's success value and error-string function; a cuDNN error
 * also carries cudnnGetLastErrorString's text (cuDNN 9 and later).
 *
 * The soft forms, for set-up code (allocations, handles, descriptors),
 * write the same line (without the exit) to a caller's buffer and evaluate
 * to -1, or to 0 on success: CUDA_SOFT, and CUDNN_SOFT / CUBLAS_SOFT where
 * cudnn.h / cublas_api.h are included before this header's later sections.
 *
 * What it does not do: recover, retry or reset a device.
 */
#ifndef TOWER_BASE_CUDA_CHECK_H
#define TOWER_BASE_CUDA_CHECK_H

#include <stddef.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "base/check.h"

/* The calling thread's current device, or -1 when it cannot be read. */
static inline int tower_cuda_current_device(void) {
    int d = -1;
    if (cudaGetDevice(&d) != cudaSuccess) d = -1;
    return d;
}

/* The generic check: `call` evaluated once; on a result other than
 * `success`, one line (what, call, error_fn(result), file, line, device)
 * and _Exit(2). */
#define TOWER_CHECK_GEN(what, call, success, error_fn)                                                   \
    do {                                                                                                 \
        __typeof__(call) e_ = (call);                                                                    \
        if (e_ != (success))                                                                             \
            tower_check_fatal(what, #call, error_fn(e_), __FILE__, __LINE__, tower_cuda_current_device()); \
    } while (0)

#define CUDA_CHECK(call) TOWER_CHECK_GEN("CUDA", call, cudaSuccess, cudaGetErrorString)
#define CUDNN_CHECK(call) TOWER_CHECK_GEN("cuDNN", call, CUDNN_STATUS_SUCCESS, tower_cudnn_error_string)
#define CUBLAS_CHECK(call) TOWER_CHECK_GEN("cuBLAS", call, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)
#define NCCL_CHECK(call) TOWER_CHECK_GEN("NCCL", call, ncclSuccess, ncclGetErrorString)

/* The soft forms' common part: the check line into err, then -1. */
static inline int tower_soft_fail(const char *what, const char *call, const char *msg, const char *file, int line,
                                  char *err, size_t err_n_bytes) {
    snprintf(err, err_n_bytes, "%s error: %s failed: %s (%s:%d, device %d)", what, call, msg, file, line,
             tower_cuda_current_device());
    return -1;
}

/* CUDA_SOFT(call, err, err_n_bytes): 0 on success, else the line in err
 * and -1 (a non-sticky error is cleared so later checks do not see it). */
static inline int tower_cuda_soft(cudaError_t e, const char *call, const char *file, int line, char *err,
                                  size_t err_n_bytes) {
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError();
    return tower_soft_fail("CUDA", call, cudaGetErrorString(e), file, line, err, err_n_bytes);
}
#define CUDA_SOFT(call, err, err_n_bytes) tower_cuda_soft((call), #call, __FILE__, __LINE__, err, err_n_bytes)

#ifdef __cplusplus
#define TOWER_THREAD_LOCAL thread_local
#else
#define TOWER_THREAD_LOCAL _Thread_local
#endif

#endif /* TOWER_BASE_CUDA_CHECK_H */

/* ---- cuDNN: defined once cudnn.h has been included (CUDNN_VERSION) ---- */
#if defined(CUDNN_VERSION) && !defined(TOWER_BASE_CUDA_CHECK_CUDNN)
#define TOWER_BASE_CUDA_CHECK_CUDNN
/* cudnnGetErrorString(s), and from cuDNN 9 on the library's last error
 * message after it; the text lives in a per-thread buffer until the
 * thread's next call. */
static inline const char *tower_cudnn_error_string(cudnnStatus_t s) {
#if CUDNN_VERSION >= 90000
    static TOWER_THREAD_LOCAL char buf[1024];
    char last[768];
    last[0] = '\0';
    cudnnGetLastErrorString(last, sizeof last);
    if (last[0] == '\0') return cudnnGetErrorString(s);
    snprintf(buf, sizeof buf, "%s (%s)", cudnnGetErrorString(s), last);
    return buf;
#else
    return cudnnGetErrorString(s);
#endif
}
static inline int tower_cudnn_soft(cudnnStatus_t s, const char *call, const char *file, int line, char *err,
                                   size_t err_n_bytes) {
    return s == CUDNN_STATUS_SUCCESS ? 0
                                     : tower_soft_fail("cuDNN", call, tower_cudnn_error_string(s), file, line, err,
                                                       err_n_bytes);
}
#define CUDNN_SOFT(call, err, err_n_bytes) tower_cudnn_soft((call), #call, __FILE__, __LINE__, err, err_n_bytes)
#endif

/* ---- cuBLAS: defined once cublas_api.h has been included (CUBLAS_VER_MAJOR) ---- */
#if defined(CUBLAS_VER_MAJOR) && !defined(TOWER_BASE_CUDA_CHECK_CUBLAS)
#define TOWER_BASE_CUDA_CHECK_CUBLAS
static inline int tower_cublas_soft(cublasStatus_t s, const char *call, const char *file, int line, char *err,
                                    size_t err_n_bytes) {
    return s == CUBLAS_STATUS_SUCCESS ? 0
                                      : tower_soft_fail("cuBLAS", call, cublasGetStatusString(s), file, line, err,
                                                        err_n_bytes);
}
#define CUBLAS_SOFT(call, err, err_n_bytes) tower_cublas_soft((call), #call, __FILE__, __LINE__, err, err_n_bytes)
#endif
