/* test_io_util.h — small helpers shared by the io/ tests (tests/test_io_*.c).
 *
 * Where it sits: tests/ only.  The checks are tests/check.h's; each
 * test's main returns io_test_result().  Temporary files live in one
 * mkdtemp directory per test process, removed at the end.  Captured output:
 * io_capture_begin/end redirect stdout and stderr into files so a test can
 * check the one-line messages of a command it runs in-process.
 * What it does not do: no timing (speed is measured in bench/).
 */
#ifndef TOWER_TEST_IO_UTIL_H
#define TOWER_TEST_IO_UTIL_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/check.h"

static char io_test_dir[256];

static inline void io_test_cleanup(void) {
    if (io_test_dir[0]) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", io_test_dir);
        if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", io_test_dir);
    }
}

/* Path of a file in this test's temporary directory (static buffer rotation of 8). */
static inline const char *io_tmp(const char *name) {
    static char bufs[8][512];
    static int next = 0;
    if (!io_test_dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(io_test_dir, sizeof io_test_dir, "%s/tower_io_test_XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(io_test_dir)) {
            perror("mkdtemp");
            exit(1);
        }
        atexit(io_test_cleanup);
    }
    char *b = bufs[next];
    next = (next + 1) % 8;
    snprintf(b, 512, "%s/%s", io_test_dir, name);
    return b;
}

static inline int io_test_result(const char *name) {
    if (check_failures) {
        fprintf(stderr, "%s: %d of %d checks failed\n", name, check_failures, check_count);
        return 1;
    }
    printf("%s: all %d checks passed\n", name, check_count);
    return 0;
}

/* Writes bytes to path; exits the test on failure. */
static inline void io_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

/* Reads a whole (small) file; *n set; caller frees.  Exits on failure. */
static inline uint8_t *io_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)len + 1);
    if (!p || fread(p, 1, (size_t)len, f) != (size_t)len) {
        perror(path);
        exit(1);
    }
    fclose(f);
    p[len] = 0;
    *n = (size_t)len;
    return p;
}

/* Redirect stdout and stderr into two files until io_capture_end. */
typedef struct {
    int saved_out, saved_err;
    char out_path[512], err_path[512];
} IoCapture;

static inline void io_capture_begin(IoCapture *c) {
    static int k = 0;
    char name[64];
    snprintf(name, sizeof name, "capture_out_%d", k);
    snprintf(c->out_path, sizeof c->out_path, "%s", io_tmp(name));
    snprintf(name, sizeof name, "capture_err_%d", k++);
    snprintf(c->err_path, sizeof c->err_path, "%s", io_tmp(name));
    fflush(stdout);
    fflush(stderr);
    c->saved_out = dup(1);
    c->saved_err = dup(2);
    int fo = open(c->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fe = open(c->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fo, 1);
    dup2(fe, 2);
    close(fo);
    close(fe);
}

/* Restores stdout/stderr; returns the captured texts (caller frees). */
static inline void io_capture_end(IoCapture *c, char **out_text, char **err_text) {
    fflush(stdout);
    fflush(stderr);
    dup2(c->saved_out, 1);
    dup2(c->saved_err, 2);
    close(c->saved_out);
    close(c->saved_err);
    size_t n;
    *out_text = (char *)io_read_file(c->out_path, &n);
    *err_text = (char *)io_read_file(c->err_path, &n);
}

/* Number of lines in text. */
static inline int io_count_lines(const char *text) {
    int n = 0;
    for (const char *p = text; *p; p++) n += *p == '\n';
    return n;
}

#endif
