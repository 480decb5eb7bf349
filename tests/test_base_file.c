/* test_base_file.c — base/file.h: file_make_dirs and file_remove_made_dirs
 * (mkdir -p and its undoing, which `tower convert --out` and `tower train
 * --train_dir` use so that a refused run leaves the tree as it was), and
 * file_open_regular's refusals.
 *
 * Where it sits: ctest, CPU, in a fresh directory under $TMPDIR.
 *   - a/b/c made from nothing: all three made, made_n_bytes names a; removed
 *     again, nothing left (a too);
 *   - a exists: only b/c made, made_n_bytes names a/b; removing leaves a;
 *   - a file written into the deepest one: nothing removed;
 *   - a trailing slash, an existing path (made_n_bytes 0, nothing removed),
 *     a path under a regular file or a regular file itself (-1, ENOTDIR), a
 *     link to a directory (0), the empty path (-1);
 *   - file_open_regular: a regular file opens, a directory and a FIFO are
 *     refused by name without waiting.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "tests/check.h"

static char root[4096];

static const char *at(const char *rel) {
    static char path[2][4200];
    static int k;
    k ^= 1;
    snprintf(path[k], sizeof path[k], "%s/%s", root, rel);
    return path[k];
}

static int is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int main(void) {
    const char *tmp = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
    snprintf(root, sizeof root, "%s/test_base_file.XXXXXX", tmp);
    CHECK(mkdtemp(root) != NULL, "mkdtemp %s: %s", root, strerror(errno));

    size_t made = 99;
    CHECK(file_make_dirs(at("a/b/c"), &made) == 0, "make a/b/c: %s", strerror(errno));
    CHECK(is_dir(at("a/b/c")), "a/b/c is not a directory");
    CHECK(made == strlen(at("a")), "made_n_bytes %zu, expected %zu (a)", made, strlen(at("a")));
    file_remove_made_dirs(at("a/b/c"), made);
    CHECK(!is_dir(at("a")), "a/b/c removed but a is still there");

    CHECK(mkdir(at("a"), 0755) == 0, "mkdir a");
    CHECK(file_make_dirs(at("a/b/c/"), &made) == 0, "make a/b/c/: %s", strerror(errno));
    CHECK(made == strlen(at("a/b")), "a existed: made_n_bytes %zu, expected %zu (a/b)", made, strlen(at("a/b")));
    size_t again = 99;
    CHECK(file_make_dirs(at("a/b/c"), &again) == 0 && again == 0, "an existing path: rc or made_n_bytes %zu", again);
    file_remove_made_dirs(at("a/b/c"), again);
    CHECK(is_dir(at("a/b/c")), "made_n_bytes 0 removed something");

    FILE *f = fopen(at("a/b/c/x"), "w");
    CHECK(f && fclose(f) == 0, "write a/b/c/x");
    file_remove_made_dirs(at("a/b/c/"), made);
    CHECK(is_dir(at("a/b/c")), "a directory holding a file was removed");
    CHECK(unlink(at("a/b/c/x")) == 0, "unlink x");
    file_remove_made_dirs(at("a/b/c/"), made);
    CHECK(!is_dir(at("a/b")) && is_dir(at("a")), "a/b/c/ removed down to a/b only: a/b %d, a %d", is_dir(at("a/b")),
          is_dir(at("a")));

    f = fopen(at("file"), "w");
    CHECK(f && fclose(f) == 0, "write file");
    errno = 0;
    CHECK(file_make_dirs(at("file/d"), &made) == -1 && errno == ENOTDIR && made == 0,
          "a path under a regular file: made_n_bytes %zu, errno %d", made, errno);
    errno = 0;
    CHECK(file_make_dirs(at("file"), &made) == -1 && errno == ENOTDIR && made == 0,
          "the path itself a regular file: made_n_bytes %zu, errno %d", made, errno);
    CHECK(symlink("a", at("link")) == 0, "symlink");
    CHECK(file_make_dirs(at("link"), &made) == 0 && made == 0, "a link to a directory: errno %d", errno);
    unlink(at("link"));
    CHECK(file_make_dirs("", &made) == -1 && made == 0, "the empty path was accepted");

    const char *instead = "x";
    f = file_open_regular(at("file"), &instead);
    CHECK(f && instead == NULL, "a regular file did not open");
    fclose(f);
    f = file_open_regular(at("a"), &instead);
    CHECK(!f && instead && !strcmp(instead, "a directory"), "a directory: %s", instead ? instead : "(opened)");
    CHECK(mkfifo(at("fifo"), 0644) == 0, "mkfifo");
    f = file_open_regular(at("fifo"), &instead);
    CHECK(!f && instead && !strcmp(instead, "a pipe or FIFO"), "a FIFO: %s", instead ? instead : "(opened)");

    unlink(at("fifo"));
    unlink(at("file"));
    rmdir(at("a"));
    CHECK(rmdir(root) == 0, "the test left files in %s", root);
    if (check_failures) {
        fprintf(stderr, "%d of %d checks failed\n", check_failures, check_count);
        return 1;
    }
    printf("PASS: file_make_dirs / file_remove_made_dirs (made from nothing, below an existing one, a file inside "
           "stops the removal, a file where a directory should be), file_open_regular (a directory, a FIFO refused)\n");
    return 0;
}
