/* fuzz_replay.c — runs a fuzz target over files, without libFuzzer.
 *
 * Where it sits: tests/fuzz/; linked with one target's source into
 * fuzz_<target>_replay, which the ctests labelled `fuzz` run over the
 * committed regression inputs and seeds, so the normal suite (gcc, and its
 * sanitizer build) re-checks every input that ever broke a parser.
 * usage: fuzz_<target>_replay [--optional=]PATH...  (files, or directories
 * whose regular files are all run, in name order; a path given as
 * --optional=PATH may be missing: a target's regression directory exists
 * only once it has had a finding).  Exits 0 after running every input;
 * a broken invariant or a sanitizer report aborts it; a path that cannot be
 * read, or no input at all, exits 1 (a test that runs nothing proves nothing).
 * What it does not do: no mutation, no coverage; fuzzing is scripts/fuzz.sh.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_common.h"

static long n_inputs;

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz_replay: %s: cannot open\n", path);
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        if (n == cap) {
            uint8_t *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f) || !buf;
    fclose(f);
    if (bad) {
        free(buf);
        fprintf(stderr, "fuzz_replay: %s: cannot read\n", path);
        return -1;
    }
    /* An exact-size copy, so that an over-read of the input is caught by the sanitizer. */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    if (n) memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    n_inputs++;
    return 0;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int run_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "fuzz_replay: %s: cannot open the directory\n", dir);
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **p = realloc(names, cap * sizeof *p);
            if (!p) {
                rc = -1;
                break;
            }
            names = p;
        }
        if (!(names[n] = strdup(e->d_name))) {
            rc = -1;
            break;
        }
        n++;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_name);
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (rc == 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode) && run_file(path) != 0) rc = -1;
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        const char *path = argv[i];
        int optional = !strncmp(path, "--optional=", 11);
        if (optional) path += 11;
        struct stat st;
        if (stat(path, &st) != 0) {
            if (optional) continue;
            fprintf(stderr, "fuzz_replay: %s: no such file or directory\n", path);
            rc = 1;
            continue;
        }
        if ((S_ISDIR(st.st_mode) ? run_dir(path) : run_file(path)) != 0) rc = 1;
    }
    if (n_inputs == 0) {
        fprintf(stderr, "fuzz_replay: no input was run\n");
        rc = 1;
    }
    if (rc == 0) printf("fuzz_replay: %ld inputs, no finding\n", n_inputs);
    return rc;
}
