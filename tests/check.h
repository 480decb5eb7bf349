/* check.h — the assertion every C test of tests/ uses.
 *
 * CHECK(cond, fmt, ...) counts a failure and prints one line with the file,
 * the line, the condition and the message when cond is false; the test goes
 * on, so one run reports every broken check; a test's main returns non-zero
 * when check_failures is not 0.
 * What it does not do: timing (speed is measured in bench/), skipping (a
 * test exits 77 itself when it cannot run).
 */
#ifndef TOWER_TESTS_CHECK_H
#define TOWER_TESTS_CHECK_H

#include <stdio.h>

static int check_failures = 0;

#define CHECK(cond, ...)                                                                \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            check_failures++;                                                           \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                               \
            fputc('\n', stderr);                                                        \
        }                                                                               \
    } while (0)

#endif
