/* sgemm.h — the one matrix multiply every CPU layer uses, row-major.
 *
 * Where it sits: model/ layers (conv2d via im2col, dense) call it; it wraps
 * oneDNN's dnnl_sgemm, chosen by measurement (bench/bench_sgemm.c,
 * bench/RESULTS.md) because it picks the CPU's best kernels (AVX-512 here)
 * by itself, with no environment variable to set.
 * What it does not do: allocate.  Called inside an OpenMP parallel region
 * (an active one, or a team of one) it runs on the calling thread only;
 * outside one it uses the calling thread's omp_get_max_threads(), except
 * for products under
 * SGEMM_SERIAL_MACS multiply-adds (softmax_linear, mnist's local4), which
 * run on the calling thread alone: splitting them costs more in
 * synchronisation than it saves, and much more when other processes
 * compete for the cores.
 */
#ifndef TOWER_MODEL_SGEMM_H
#define TOWER_MODEL_SGEMM_H

#define SGEMM_SERIAL_MACS (2.0 * 1024 * 1024)

/* C = alpha * op(A) @ op(B) + beta * C, all row-major.
 *   op(A): (M, K) — A is (M, K) with row stride lda if !trans_a, else (K, M) with stride lda
 *   op(B): (K, N) — B is (K, N) with row stride ldb if !trans_b, else (N, K) with stride ldb
 *   C    : (M, N) with row stride ldc
 * beta == 0 ignores C's old contents (NaN included).  Bad arguments are a
 * programming error: one line on stderr and abort(). */
void sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha,
           const float *A, int lda, const float *B, int ldb,
           float beta, float *C, int ldc);

#endif
