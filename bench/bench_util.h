/* bench_util.h — what every benchmark program in bench/ needs to time
 * repeated runs: a monotonic clock and the order statistics of a sample;
 * and to read its command line through its flag table.
 *
 * Where it sits: bench/ only (benchmarks, never tests); header only.
 * What it does not do: decide how many runs or what to report; each
 * program says that in its own header.
 */
#ifndef TOWER_BENCH_UTIL_H
#define TOWER_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/escape.h"
#include "base/flags.h"

/* A benchmark program's command line through its flag table (base/flags.h):
 * argv[0] becomes `program`, so that the parser's one-line refusals name it
 * rather than its path; --help prints the usage (synopsis after the name).
 * positional: at least argc entries, the caller's; it gets the arguments that
 * are not flags.  Returns -1 when the program goes on, else its exit status:
 * 0 after --help, 2 after a refused flag or value, or an argument past the
 * first max_positional (one line). */
static inline int bench_parse_flags(const char *program, const char *synopsis, const Flag *flags, int n_flags,
                                    int argc, char **argv, char **positional, int *n_positional, int max_positional) {
    *n_positional = 0;
    if (argc < 1) return -1;
    argv[0] = (char *)program;
    const int rc = flags_parse(flags, n_flags, argc, argv, positional, n_positional);
    if (rc == 1) {
        flags_print_usage(program, synopsis, flags, n_flags);
        return 0;
    }
    if (rc != 0) return 2;
    if (*n_positional > max_positional) {
        char arg[256];
        fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", program,
                escape_str(arg, sizeof arg, positional[max_positional]));
        return 2;
    }
    return -1;
}

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
