/* test_io_list_fault.c — a directory that fails part way through its listing.
 *
 * readdir(3) ends a listing with NULL both at the end and on a read error
 * (errno set: EIO on a failing disk), and glob(3) ends a directory's listing
 * at either without telling them apart.  Every listing of io/ that decides
 * what is read or written must fail with one line naming the directory and
 * the errno text, never go on with the entries it got: an image folder's
 * classes and files (convert_open_imagefolder), the shards already under an
 * output prefix (convert_existing_shards), the files of a --data glob
 * (io_expand_globs).
 *
 * How: linked with -Wl,--wrap=readdir,--wrap=opendir (tests/io_tests.cmake),
 * so io/'s calls come here.  readdir_calls_left >= 0 lets that many readdir
 * calls through and fails the next with EIO; opendir_refuse names a
 * directory whose opendir fails with EACCES (the test runs as root in CI,
 * where chmod cannot refuse).  The files are empty: nothing is decoded.
 * What it does not do: no training, no decoding, no real disk fault.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "io/convert.h"
#include "io/imagefolder.h"
#include "io/pipeline.h"
#include "test_io_util.h"

struct dirent *__real_readdir(DIR *d);
DIR *__real_opendir(const char *path);

static int readdir_calls_left = -1; // -1: every call goes through
static char opendir_refuse[512];    // "": none refused

struct dirent *__wrap_readdir(DIR *d) {
    if (readdir_calls_left == 0) {
        readdir_calls_left = -1;
        errno = EIO;
        return NULL;
    }
    if (readdir_calls_left > 0) readdir_calls_left--;
    return __real_readdir(d);
}

DIR *__wrap_opendir(const char *path) {
    if (opendir_refuse[0] && strcmp(path, opendir_refuse) == 0) {
        errno = EACCES;
        return NULL;
    }
    return __real_opendir(path);
}

static void make_dir(const char *path) { CHECK(mkdir(path, 0755) == 0, "mkdir %s: %s", path, strerror(errno)); }

/* An image folder ROOT/{cats,dogs}/ of n_per_class empty .png files each. */
static const char *make_folder(int n_per_class) {
    static char root[512];
    snprintf(root, sizeof root, "%s", io_tmp("folder"));
    make_dir(root);
    const char *classes[2] = {"cats", "dogs"};
    for (int c = 0; c < 2; c++) {
        char dir[600];
        snprintf(dir, sizeof dir, "%s/%s", root, classes[c]);
        make_dir(dir);
        for (int i = 0; i < n_per_class; i++) {
            char file[700];
            snprintf(file, sizeof file, "%s/%03d.png", dir, i);
            io_write_file(file, "", 0);
        }
    }
    return root;
}

/* convert_open_imagefolder with the listing failing after `calls` readdir
 * calls (-1: never); 0 when it opened, with its candidate count in *n_files. */
static int open_folder(const char *root, int calls, long *n_files, char *err, size_t err_n) {
    ImageFolderConfig cfg;
    imagefolder_config_defaults(&cfg);
    cfg.warn = NULL;
    readdir_calls_left = calls;
    ConvertSource *src = convert_open_imagefolder(root, &cfg, err, err_n);
    readdir_calls_left = -1;
    if (!src) return -1;
    *n_files = imagefolder_n_files(src);
    src->close(src);
    return 0;
}

static void test_image_folder(void) {
    const char *root = make_folder(6);
    char err[1024] = "";
    long n = 0;
    CHECK(open_folder(root, -1, &n, err, sizeof err) == 0, "%s", err);
    CHECK(n == 12, "%ld files listed, 12 made", n);
    /* The root lists ".", "..", "cats", "dogs" and the end: fail each of its 5 calls. */
    for (int calls = 0; calls <= 4; calls++) {
        err[0] = '\0';
        CHECK(open_folder(root, calls, &n, err, sizeof err) != 0, "a root listing failed after %d calls opened", calls);
        CHECK_CONTAINS(err, root);
        CHECK_CONTAINS(err, strerror(EIO));
    }
    /* Then each class folder in turn: "cats" is listed with the root's 5 calls behind it, "dogs" after cats' 9. */
    const int class_calls[2] = {5 + 4, 5 + 9 + 6};
    const char *class_names[2] = {"/cats", "/dogs"};
    for (int c = 0; c < 2; c++) {
        err[0] = '\0';
        CHECK(open_folder(root, class_calls[c], &n, err, sizeof err) != 0, "%s's listing failed and it opened",
              class_names[c]);
        CHECK_CONTAINS(err, class_names[c]);
        CHECK_CONTAINS(err, strerror(EIO));
    }
    /* A folder that cannot be listed is taken as an image folder, so that opening it says why. */
    readdir_calls_left = 1;
    CHECK(imagefolder_is_folder(root) == 1);
    readdir_calls_left = -1;
    snprintf(opendir_refuse, sizeof opendir_refuse, "%s", root);
    CHECK(imagefolder_is_folder(root) == 1);
    err[0] = '\0';
    CHECK(open_folder(root, -1, &n, err, sizeof err) != 0);
    CHECK_CONTAINS(err, strerror(EACCES));
    opendir_refuse[0] = '\0';
}

static void test_existing_shards(void) {
    const char *dir = io_tmp("out");
    make_dir(dir);
    char prefix[600], shard[700];
    snprintf(prefix, sizeof prefix, "%s/train", dir);
    for (int s = 0; s < 3; s++) {
        snprintf(shard, sizeof shard, "%s-%05d-of-00003.tfrecord", prefix, s);
        io_write_file(shard, "", 0);
    }
    char **paths = NULL, err[1024] = "";
    int n = 0;
    CHECK(convert_existing_shards(prefix, &paths, &n, err, sizeof err) == 0, "%s", err);
    CHECK(n == 3, "%d shards found, 3 made", n);
    convert_free_paths(paths, n);
    /* ".", ".." and three shards: fail at each of the 5 entries' calls (the end's too). */
    for (int calls = 0; calls <= 5; calls++) {
        err[0] = '\0';
        readdir_calls_left = calls;
        const int rc = convert_existing_shards(prefix, &paths, &n, err, sizeof err);
        readdir_calls_left = -1;
        CHECK(rc != 0, "the output directory's listing failed after %d calls and %d shards were reported", calls, n);
        CHECK(paths == NULL && n == 0);
        CHECK_CONTAINS(err, "cannot list the output directory");
        CHECK_CONTAINS(err, strerror(EIO));
    }
}

static void test_globs(void) {
    const char *dir = io_tmp("data");
    make_dir(dir);
    char file[600], pattern[600];
    for (int s = 0; s < 4; s++) {
        snprintf(file, sizeof file, "%s/part-%d.tfrecord", dir, s);
        io_write_file(file, "", 0);
    }
    snprintf(pattern, sizeof pattern, "%s/*.tfrecord", dir);
    char **files = NULL, err[1024] = "";
    int n = 0;
    CHECK(io_expand_globs(pattern, &files, &n, err, sizeof err) == 0, "%s", err);
    CHECK(n == 4, "%d files matched, 4 made", n);
    io_free_files(files, n);
    for (int calls = 0; calls <= 6; calls++) {
        err[0] = '\0';
        readdir_calls_left = calls;
        const int rc = io_expand_globs(pattern, &files, &n, err, sizeof err);
        readdir_calls_left = -1;
        CHECK(rc != 0, "the glob's listing failed after %d calls and %d files were matched", calls, n);
        CHECK(files == NULL && n == 0);
        CHECK_CONTAINS(err, "cannot read the directory");
        CHECK_CONTAINS(err, dir);
        CHECK_CONTAINS(err, strerror(EIO));
    }
    /* A directory that cannot be opened: its errno, not "matches no files". */
    snprintf(opendir_refuse, sizeof opendir_refuse, "%s", dir);
    err[0] = '\0';
    CHECK(io_expand_globs(pattern, &files, &n, err, sizeof err) != 0);
    CHECK_CONTAINS(err, strerror(EACCES));
    opendir_refuse[0] = '\0';
    /* One that does not exist stays what it was: no match. */
    snprintf(pattern, sizeof pattern, "%s/nowhere/*.tfrecord", dir);
    err[0] = '\0';
    CHECK(io_expand_globs(pattern, &files, &n, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "matches no files");
}

int main(void) {
    test_image_folder();
    test_existing_shards();
    test_globs();
    return io_test_result("test_io_list_fault");
}
