/* test_modes_allreduce.c — the host ring all-reduce (ps/allreduce_host.h)
 * against serial sums, on N = 1..6 threads and sizes that do not divide
 * evenly (n_floats < N, n_floats = N +- 1, odd sizes), repeated so that
 * reusing the barrier between calls is exercised.
 *
 * For every call it checks:
 *   1. every rank's buffer is bitwise equal to the documented order:
 *      element i of chunk c = (g_c + g_{c+1} + ... + g_{c-1}) / N, ranks taken
 *      cyclically from c, in float32 (so the run is deterministic);
 *   2. every rank holds the same values (bitwise): no replica drifts;
 *   3. the result is within float rounding of ps_average_grads's order
 *      (ranks 0..N-1), the parameter server's mean: per element at most
 *      2 N eps (|g_0| + ... + |g_{N-1}|) / N, the forward error bound of
 *      two summation orders;
 *   4. with small integers (exact sums) it equals the exact mean bitwise.
 * And that the check can fail: a reference in the wrong order (ranks
 * 0..N-1) differs bitwise from the ring for some element when N >= 3.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/allreduce_host.h"

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static float uniform_pm1(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

typedef struct {
    AllreduceHost *ar;
    int rank;
    float *const *bufs;
    size_t n_floats;
} RankArgs;

static void *rank_main(void *arg) {
    RankArgs *a = arg;
    allreduce_host_ring_mean(a->ar, a->rank, a->bufs, a->n_floats);
    return NULL;
}

/* Run the ring on n_ranks threads over bufs. */
static void run_ring(AllreduceHost *ar, int n_ranks, float *const *bufs, size_t n_floats) {
    pthread_t th[64];
    RankArgs args[64];
    for (int r = 0; r < n_ranks; r++) {
        args[r] = (RankArgs){ar, r, bufs, n_floats};
        if (pthread_create(&th[r], NULL, rank_main, &args[r]) != 0) {
            fprintf(stderr, "cannot start a thread\n");
            exit(1);
        }
    }
    for (int r = 0; r < n_ranks; r++) pthread_join(th[r], NULL);
}

/* expected = the documented ring order; in_order = ranks 0..N-1 (ps_average_grads). */
static void serial_means(float *const *in, int n, size_t n_floats, float *expected, float *in_order) {
    for (int c = 0; c < n; c++) {
        size_t lo, hi;
        allreduce_host_chunk(n_floats, n, c, &lo, &hi);
        for (size_t i = lo; i < hi; i++) {
            float s = in[c][i];
            for (int k = 1; k < n; k++) s += in[(c + k) % n][i];
            expected[i] = s / (float)n;
            float t = in[0][i];
            for (int k = 1; k < n; k++) t += in[k][i];
            in_order[i] = t / (float)n;
        }
    }
}

/* One case; returns the number of failed checks.  *order_differs is set when
 * the rank-order reference differed bitwise from the ring somewhere. */
static int check_case(AllreduceHost *ar, int n, size_t n_floats, int integers, int *order_differs) {
    float *in[64], *bufs[64];
    for (int r = 0; r < n; r++) {
        in[r] = malloc((n_floats + 1) * sizeof(float));
        bufs[r] = malloc((n_floats + 1) * sizeof(float));
        for (size_t i = 0; i < n_floats; i++)
            in[r][i] = integers ? (float)((int)(uniform_pm1() * 1000.0f)) : uniform_pm1() * (float)(1 + r);
        memcpy(bufs[r], in[r], n_floats * sizeof(float));
    }
    float *expected = malloc((n_floats + 1) * sizeof(float));
    float *in_order = malloc((n_floats + 1) * sizeof(float));
    serial_means(in, n, n_floats, expected, in_order);
    run_ring(ar, n, bufs, n_floats);

    int fails = 0;
    double worst = 0.0; /* largest |ring - rank order| / bound */
    for (size_t i = 0; i < n_floats; i++) {
        double abs_sum = 0.0;
        for (int r = 0; r < n; r++) abs_sum += fabs((double)in[r][i]);
        double bound = 2.0 * n * FLT_EPSILON * abs_sum / n + 1e-30;
        double ratio = fabs((double)bufs[0][i] - in_order[i]) / bound;
        if (ratio > worst) worst = ratio;
        if (memcmp(&in_order[i], &bufs[0][i], sizeof(float)) != 0) *order_differs = 1;
    }
    for (int r = 0; r < n; r++) {
        if (memcmp(bufs[r], expected, n_floats * sizeof(float)) != 0) {
            fprintf(stderr, "N=%d n=%zu: rank %d differs from the documented ring order\n", n, n_floats, r);
            fails++;
        }
        if (memcmp(bufs[r], bufs[0], n_floats * sizeof(float)) != 0) {
            fprintf(stderr, "N=%d n=%zu: rank %d differs from rank 0\n", n, n_floats, r);
            fails++;
        }
    }
    if (worst > 1.0) {
        fprintf(stderr, "N=%d n=%zu: %.3g times the rounding bound away from the parameter server's mean\n", n,
                n_floats, worst);
        fails++;
    }
    if (integers && memcmp(bufs[0], in_order, n_floats * sizeof(float)) != 0) {
        fprintf(stderr, "N=%d n=%zu: integer sums are exact, yet the ring differs from them\n", n, n_floats);
        fails++;
    }
    for (int r = 0; r < n; r++) {
        free(in[r]);
        free(bufs[r]);
    }
    free(expected);
    free(in_order);
    return fails;
}

int main(void) {
    int failures = 0, cases = 0;
    for (int n = 1; n <= 6; n++) {
        char err[256];
        AllreduceHost *ar = allreduce_host_create(n, err, sizeof err);
        if (!ar) {
            fprintf(stderr, "allreduce_host_create(%d): %s\n", n, err);
            return 1;
        }
        const size_t sizes[] = {0, 1, (size_t)n - 1, (size_t)n, (size_t)n + 1, 7, 1000, 1001, 4099, 65537};
        int order_differs = 0, failures_before = failures;
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            for (int rep = 0; rep < 20; rep++) {
                failures += check_case(ar, n, sizes[k], 0, &order_differs);
                cases++;
            }
            int unused = 0;
            failures += check_case(ar, n, sizes[k], 1, &unused);
            cases++;
        }
        if (n >= 3 && !order_differs) {
            fprintf(stderr, "N=%d: the rank-order reference never differed bitwise from the ring: the order check "
                    "could not fail\n", n);
            failures++;
        }
        printf("N=%d: ring all-reduce %s the serial sums (%s)\n", n, failures == failures_before ? "matches" : "DIFFERS FROM",
               n >= 3 ? "and a reference in the wrong order is told apart" : "one or two ranks: one order");
        allreduce_host_free(ar);
    }
    char err[256];
    if (allreduce_host_create(0, err, sizeof err) != NULL || allreduce_host_create(65, err, sizeof err) != NULL) {
        fprintf(stderr, "allreduce_host_create accepted 0 or 65 ranks\n");
        failures++;
    }
    printf("%d cases, %d failure(s): %s\n", cases, failures, failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
