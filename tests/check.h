/* check.h — the assertion family every C test of tests/ uses.
 *
 * CHECK(cond) or CHECK(cond, fmt, ...) counts a check and, when cond is
 * false, a failure, printing one line with the file, the line, the
 * condition and the message (if any); the test goes on, so one run reports
 * every broken check; a test's main returns non-zero when check_failures
 * is not 0.  CHECK_MSG is the same macro under the io tests' older name;
 * CHECK_CONTAINS(msg, sub) checks that a message holds a substring.
 * What it does not do: timing (speed is measured in bench/), skipping (a
 * test exits 77 itself when it cannot run).
 */
#ifndef TOWER_TESTS_CHECK_H
#define TOWER_TESTS_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int check_failures = 0;
static int check_count = 0;

/* The failure line; fmt "" for none (not format-checked: the message
 * arguments are followed by an extra "" that vfprintf ignores). */
static inline void check_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
    check_failures++;
    fprintf(stderr, "%s:%d: CHECK(%s) failed", file, line, cond);
    if (fmt[0]) {
        va_list ap;
        va_start(ap, fmt);
        fputs(": ", stderr);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fputc('\n', stderr);
}

#define CHECK(...) CHECK_ARGS_(__VA_ARGS__, "")
#define CHECK_ARGS_(cond, ...)                                                    \
    do {                                                                          \
        check_count++;                                                            \
        if (!(cond)) check_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);         \
    } while (0)
#define CHECK_MSG CHECK

/* msg contains sub. */
#define CHECK_CONTAINS(msg, sub) CHECK(strstr((msg), (sub)) != NULL, "message \"%s\" lacks \"%s\"", (msg), (sub))

#endif
