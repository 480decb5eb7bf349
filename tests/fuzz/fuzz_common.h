/* fuzz_common.h — what the fuzz targets of tests/fuzz/ share.
 *
 * Where it sits: tests/fuzz/ only.  Every target defines
 * LLVMFuzzerTestOneInput; it is linked either with libFuzzer (clang,
 * TOWER_FUZZ=ON: scripts/fuzz.sh) or with fuzz_replay.c, which feeds it
 * every file of the committed seed and regression directories (the ctests
 * labelled `fuzz`).  The parsers under test mostly take paths, so a target
 * writes its input into a memfd (a file in memory, no disk, nothing left
 * behind by a crash) and hands the parser "/proc/self/fd/N".
 * A target's invariants (one-line error messages, statuses that agree
 * between two ways of reading the same bytes) are checked with FUZZ_REQUIRE,
 * which prints the broken condition and aborts: libFuzzer then saves the
 * input as a crash, and the replay test fails.
 * What it does not do: no mutation logic, no timing.
 */
#ifndef TOWER_FUZZ_COMMON_H
#define TOWER_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts with file, line and a message when cond is false. */
#define FUZZ_REQUIRE(cond, ...)                                          \
    do {                                                                 \
        if (!(cond)) fuzz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);  \
    } while (0)

void fuzz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));

/* A file in memory (memfd) the parsers open by path. */
typedef struct {
    int fd;
    char path[64]; /* "/proc/self/fd/N" */
} FuzzFile;

/* Creates the memfd (name for /proc listings only).  Aborts on failure:
 * a target that cannot make its file tests nothing. */
void fuzz_file_init(FuzzFile *f, const char *name);

/* Replaces the file's contents by (data, n_bytes).  Aborts on failure. */
void fuzz_file_set(FuzzFile *f, const void *data, size_t n_bytes);

/* A scratch directory, /dev/shm/tower-fuzz-XXXXXX (or under /tmp), removed
 * with everything in it at exit.  Returns its path (static storage). */
const char *fuzz_scratch_dir(void);

/* Writes (data, n_bytes) to path (created or truncated).  Aborts on failure. */
void fuzz_write_path(const char *path, const void *data, size_t n_bytes);

/* Checks the project's error-message rule: msg is one non-empty line that
 * starts with prefix: a file name (then ':' must follow) or a longer prefix
 * ending in a space ("FILE: record 3 at offset 40: ").  Aborts otherwise. */
void fuzz_require_line(const char *msg, const char *prefix, const char *what);

#endif
