/* check.c — the process's one fatal report (see check.h). */
#include "base/check.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static atomic_flag reported = ATOMIC_FLAG_INIT;

void tower_check_fatal(const char *what, const char *call, const char *msg, const char *file, int line, int device) {
    if (atomic_flag_test_and_set(&reported)) {
        for (;;) pause(); /* the first failing thread is ending the process */
    }
    fflush(stdout);
    fprintf(stderr, "%s error: %s failed: %s (%s:%d, device %d)\n", what, call, msg, file, line, device);
    fflush(stderr);
    _Exit(2);
}
