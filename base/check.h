/* check.h — how a thread ends the process on an error nothing can recover
 * from (a failed CUDA, cuDNN, cuBLAS or NCCL call in the middle of a step).
 *
 * Where it sits: base/, under everything; base/cuda_check.h's macros call
 * it, from the tower threads as well as the main one.  exit() would run
 * the atexit handlers (the CUDA runtime's and NCCL's teardown) while the
 * other tower threads still use the devices, and several failing threads
 * would print several lines: here only the first caller prints, stdout is
 * flushed (the log so far stays), and the process ends with _Exit.
 * What it does not do: return, or clean anything up.
 */
#ifndef TOWER_BASE_CHECK_H
#define TOWER_BASE_CHECK_H

#ifdef __cplusplus
extern "C" {
#endif

/* Print "<what> error: <call> failed: <msg> (<file>:<line>, device <device>)"
 * on stderr, once per process, and _Exit(2).  A second thread that fails
 * meanwhile prints nothing and waits for the first one's exit. */
#if defined(__cplusplus)
[[noreturn]]
#else
_Noreturn
#endif
void tower_check_fatal(const char *what, const char *call, const char *msg, const char *file, int line, int device);

#ifdef __cplusplus
}
#endif

#endif
