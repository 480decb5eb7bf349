/* bench_util.h — what every benchmark program in bench/ needs to time
 * repeated runs: a monotonic clock and the order statistics of a sample.
 *
 * Where it sits: bench/ only (benchmarks, never tests); header only.
 * What it does not do: decide how many runs or what to report; each
 * program says that in its own header.
 */
#ifndef TOWER_BENCH_UTIL_H
#define TOWER_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

/* Seconds on CLOCK_MONOTONIC. */
static inline double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* qsort's comparison of two doubles, ascending. */
static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of n >= 1 doubles (sorts v in place; the mean of the two
 * middle values when n is even). */
static inline double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
