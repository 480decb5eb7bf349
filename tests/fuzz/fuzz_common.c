/* fuzz_common.c — memfd files, the scratch directory and the invariant
 * checks the fuzz targets share (see fuzz_common.h). */
#include "fuzz_common.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void fuzz_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
    fprintf(stderr, "%s:%d: FUZZ_REQUIRE(%s) failed: ", file, line, cond);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}

void fuzz_file_init(FuzzFile *f, const char *name) {
    f->fd = memfd_create(name, 0);
    FUZZ_REQUIRE(f->fd >= 0, "memfd_create(%s) failed", name);
    snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
}

void fuzz_file_set(FuzzFile *f, const void *data, size_t n_bytes) {
    FUZZ_REQUIRE(ftruncate(f->fd, 0) == 0, "ftruncate of %s failed", f->path);
    size_t done = 0;
    while (done < n_bytes) {
        ssize_t w = pwrite(f->fd, (const char *)data + done, n_bytes - done, (off_t)done);
        FUZZ_REQUIRE(w > 0, "write to %s failed", f->path);
        done += (size_t)w;
    }
}

static char scratch[256];

/* rm -r of one level of directories below dir (the targets nest at most two). */
static void remove_tree(const char *dir, int depth) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode) && depth < 4) remove_tree(p, depth + 1);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void remove_scratch(void) {
    if (scratch[0]) remove_tree(scratch, 0);
}

const char *fuzz_scratch_dir(void) {
    if (scratch[0]) return scratch;
    struct stat st;
    const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
    snprintf(scratch, sizeof scratch, "%s/tower-fuzz-XXXXXX", base);
    FUZZ_REQUIRE(mkdtemp(scratch) != NULL, "mkdtemp(%s) failed", scratch);
    atexit(remove_scratch);
    return scratch;
}

void fuzz_write_path(const char *path, const void *data, size_t n_bytes) {
    FILE *f = fopen(path, "wb");
    FUZZ_REQUIRE(f != NULL, "cannot create %s", path);
    FUZZ_REQUIRE(n_bytes == 0 || fwrite(data, 1, n_bytes, f) == n_bytes, "write to %s failed", path);
    FUZZ_REQUIRE(fclose(f) == 0, "close of %s failed", path);
}

void fuzz_require_line(const char *msg, const char *prefix, const char *what) {
    size_t k = strlen(prefix);
    FUZZ_REQUIRE(msg && msg[0], "%s: empty error message", what);
    FUZZ_REQUIRE(!strchr(msg, '\n'), "%s: message of several lines: \"%s\"", what, msg);
    FUZZ_REQUIRE(strncmp(msg, prefix, k) == 0 && msg[k] && (k == 0 || prefix[k - 1] == ' ' || msg[k] == ':'),
                 "%s: message \"%s\" does not start with \"%s\"", what, msg, prefix);
}
