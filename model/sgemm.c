/* sgemm.c — row-major sgemm on oneDNN's dnnl_sgemm (see sgemm.h).
 *
 * Where it sits: under every conv2d/dense layer in model/.  dnnl_sgemm is
 * row-major already, so this is a thin checked call.
 */
#include "model/sgemm.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

void sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha,
           const float *A, int lda, const float *B, int ldb,
           float beta, float *C, int ldc) {
    if (M == 0 || N == 0) return;
    /* Small products on this thread only: dnnl_sgemm takes its thread count
     * from omp_get_max_threads(), which omp_set_num_threads sets for the
     * calling thread alone; it is restored right after.  So is every product
     * inside a parallel region of one thread (`num_threads(1)`: the region is
     * inactive, so omp_in_parallel() is 0 there, and dnnl_sgemm would take
     * every thread the caller's thread may use; a caller that asked for one
     * thread gets one, and the bits of a team of one do not depend on
     * OMP_NUM_THREADS: test_winograd under OMP_NUM_THREADS=4 caught it). */
    int saved = 0;
    const int one_thread_region = omp_get_level() > 0 && !omp_in_parallel();
    if (one_thread_region || ((double)M * N * K < SGEMM_SERIAL_MACS && !omp_in_parallel())) {
        saved = omp_get_max_threads();
        if (saved > 1) omp_set_num_threads(1);
    }
    dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N',
                                  M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (saved > 1) omp_set_num_threads(saved);
    if (st != dnnl_success) {
        fprintf(stderr, "sgemm: dnnl_sgemm failed (status %d) for %c%c M=%d N=%d K=%d lda=%d ldb=%d ldc=%d\n",
                (int)st, trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, lda, ldb, ldc);
        abort();
    }
}
