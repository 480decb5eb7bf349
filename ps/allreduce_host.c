/* allreduce_host.c — ring all-reduce over host buffers (see allreduce_host.h).
 *
 * Where it sits: called by the tower threads in the replicated modes, after
 * each has delivered its gradient into its host buffer.  It only adds,
 * divides and copies floats between the ranks' buffers with a barrier
 * between phases; it starts no threads and knows nothing of models.
 */
#include "ps/allreduce_host.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/limits.h"

#define ALLREDUCE_MAX_RANKS TOWER_MAX_TOWERS /* one rank per tower */

struct AllreduceHost {
    int n_ranks;
    pthread_barrier_t barrier;
};

AllreduceHost *allreduce_host_create(int n_ranks, char *err, size_t err_n_bytes) {
    if (n_ranks < 1 || n_ranks > ALLREDUCE_MAX_RANKS) {
        snprintf(err, err_n_bytes, "all-reduce: number of ranks must be in [1, %d], got %d", ALLREDUCE_MAX_RANKS,
                 n_ranks);
        return NULL;
    }
    AllreduceHost *ar = calloc(1, sizeof *ar);
    if (!ar) {
        snprintf(err, err_n_bytes, "all-reduce: out of memory");
        return NULL;
    }
    ar->n_ranks = n_ranks;
    if (pthread_barrier_init(&ar->barrier, NULL, (unsigned)n_ranks) != 0) {
        snprintf(err, err_n_bytes, "all-reduce: cannot create a barrier for %d threads", n_ranks);
        free(ar);
        return NULL;
    }
    return ar;
}

void allreduce_host_free(AllreduceHost *ar) {
    if (!ar) return;
    pthread_barrier_destroy(&ar->barrier);
    free(ar);
}

void allreduce_host_chunk(size_t n_floats, int n_chunks, int c, size_t *begin, size_t *end) {
    *begin = n_floats * (size_t)c / (size_t)n_chunks;
    *end = n_floats * (size_t)(c + 1) / (size_t)n_chunks;
}

static int ring_mod(int a, int n) { return ((a % n) + n) % n; }

void allreduce_host_ring_mean(AllreduceHost *ar, int rank, float *const *bufs, size_t n_floats) {
    const int n = ar->n_ranks;
    if (n == 1) return; /* the mean of one buffer is itself */
    float *mine = bufs[rank];
    const float *left = bufs[ring_mod(rank - 1, n)];
    const float n_f = (float)n, inv_n = 1.0f / n_f;
    const int n_pow2 = (n & (n - 1)) == 0; /* divide by multiplying with 1/n: the same bits (count_divide) */

    /* Reduce-scatter: after phase s, chunk (rank - 1 - s) of this rank holds the sum of s + 2 ranks. */
    for (int s = 0; s < n - 1; s++) {
        size_t lo, hi;
        allreduce_host_chunk(n_floats, n, ring_mod(rank - 1 - s, n), &lo, &hi);
        if (s < n - 2) {
            for (size_t i = lo; i < hi; i++) mine[i] += left[i];
        } else if (n_pow2) {
            for (size_t i = lo; i < hi; i++) mine[i] = (mine[i] + left[i]) * inv_n;
        } else {
            for (size_t i = lo; i < hi; i++) mine[i] = (mine[i] + left[i]) / n_f;
        }
        pthread_barrier_wait(&ar->barrier);
    }
    /* All-gather: the mean of chunk (rank - s) arrives from the left neighbour. */
    for (int s = 0; s < n - 1; s++) {
        size_t lo, hi;
        allreduce_host_chunk(n_floats, n, ring_mod(rank - s, n), &lo, &hi);
        if (hi > lo) memcpy(mine + lo, left + lo, (hi - lo) * sizeof(float));
        if (s < n - 2) pthread_barrier_wait(&ar->barrier);
    }
}
