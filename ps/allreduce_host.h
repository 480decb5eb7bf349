/* allreduce_host.h — ring all-reduce (mean) over host gradient buffers, run
 * by the towers' own threads.
 *
 * Where it sits: the gradient-aggregation step of the replicated modes
 * (`--variable_update replicated --all_reduce host`, docs/modes.md).  In the
 * parameter-server modes one thread averages every tower's buffer into one
 * (ps_average_grads); here every tower keeps its own variables, and the N
 * tower threads cooperate to leave the mean gradient in EVERY tower's buffer,
 * each thread moving 2(N-1)/N of the buffer: the bandwidth-optimal ring of
 * Horovod and NCCL, on shared memory.
 *
 * The ring, for N ranks and buffers bufs[0..N-1] of n_floats each, split into
 * N chunks, chunk c = elements [c * n / N, (c + 1) * n / N) (a chunk may be
 * empty when n_floats < N):
 *   reduce-scatter, phases s = 0..N-2: rank r adds chunk (r - 1 - s) mod N of
 *     rank r-1's buffer into its own; in the last phase it also divides the
 *     sum by N.  Rank r then holds the mean of chunk (r + 1) mod N.
 *   all-gather, phases s = 0..N-2: rank r copies chunk (r - s) mod N from
 *     rank r-1's buffer into its own.
 * A barrier separates consecutive phases (2N-3 barriers); within a phase no
 * two ranks touch the same chunk of the same buffer, so no locks are needed.
 *
 * Summation order (fixed, so a run is bitwise deterministic for a given N):
 * element i of chunk c is (((g_c + g_{c+1}) + g_{c+2}) + ... + g_{c-1}) / N,
 * ranks taken cyclically from c, in float32: the same operations as
 * ps_average_grads but starting at rank c instead of rank 0, so the two agree
 * to float rounding, not bitwise (tests/test_modes_allreduce.c checks both).
 *
 * What it does not do: no devices (a GPU all-reduce is NCCL's job), no
 * optimizer, no threads of its own: the callers are the tower threads.
 */
#ifndef TOWER_PS_ALLREDUCE_HOST_H
#define TOWER_PS_ALLREDUCE_HOST_H

#include <stddef.h>

typedef struct AllreduceHost AllreduceHost;

/* A ring for n_ranks threads (1 <= n_ranks <= 64).  Owns a barrier.
 * Returns NULL with one line in err on a bad n_ranks or when the barrier
 * cannot be made. */
AllreduceHost *allreduce_host_create(int n_ranks, char *err, size_t err_n_bytes);

/* Free the ring.  No rank may be inside allreduce_host_ring_mean.  NULL is a no-op. */
void allreduce_host_free(AllreduceHost *ar);

/* Ring all-reduce (mean), called concurrently by every rank 0..n_ranks-1,
 * each on its own thread, with the same bufs and n_floats.
 *   bufs : [n_ranks] -> (n_floats) each; on entry bufs[r] holds rank r's
 *          values, on return of rank r's call bufs[r] holds the mean above.
 * Rank r writes only bufs[r] and reads bufs[r-1]; a rank must not write its
 * buffer again until EVERY rank has returned (its right neighbour may still
 * be reading it).  Memory belongs to the caller.  Never fails; blocks until
 * the rank's phases are done (a rank that never calls blocks the others). */
void allreduce_host_ring_mean(AllreduceHost *ar, int rank, float *const *bufs, size_t n_floats);

/* Elements [*begin, *end) of chunk c of n_floats split into n_chunks, as the ring splits them. */
void allreduce_host_chunk(size_t n_floats, int n_chunks, int c, size_t *begin, size_t *end);

#endif
