/* file.c — file_open_regular (file.h): a regular file opened for reading
 * without the wait a FIFO's open would make; file_make_dirs and
 * file_remove_made_dirs: mkdir -p, and its undoing.  base/, the floor. */
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What a file of mode is, where it is not a regular file. */
static const char *kind_of(mode_t mode) {
    return S_ISDIR(mode) ? "a directory" : S_ISFIFO(mode) ? "a pipe or FIFO" : S_ISSOCK(mode) ? "a socket"
         : S_ISCHR(mode) || S_ISBLK(mode) ? "a device" : "not a regular file";
}

FILE *file_open_regular(const char *path, const char **instead) {
    *instead = NULL;
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENXIO) *instead = "a socket or a device"; /* a socket, or a device with no driver behind it */
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        const int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        *instead = kind_of(st.st_mode);
        return NULL;
    }
    const int flags = fcntl(fd, F_GETFL);
    FILE *f = flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 ? NULL : fdopen(fd, "rb");
    if (!f) {
        const int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

int file_make_dirs(const char *path, size_t *made_n_bytes) {
    *made_n_bytes = 0;
    if (!path[0]) {
        errno = ENOENT;
        return -1;
    }
    char *dir = strdup(path);
    if (!dir) return -1;
    int rc = 0;
    struct stat st;
    for (char *q = dir + 1;; q++) {
        if (*q != '/' && *q != '\0') continue;
        const char save = *q;
        *q = '\0';
        if (mkdir(dir, 0777) == 0) {
            if (!*made_n_bytes) *made_n_bytes = strlen(dir);
        } else if (errno != EEXIST) {
            rc = -1;
        } else if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) { /* a file (or a dangling link) by that name */
            errno = ENOTDIR;
            rc = -1;
        }
        *q = save;
        if (rc || save == '\0') break;
    }
    free(dir);
    return rc;
}

void file_remove_made_dirs(const char *path, size_t made_n_bytes) {
    char *dir = made_n_bytes ? strdup(path) : NULL;
    if (!dir) return;
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') dir[--n] = '\0'; /* "a/b/" is "a/b" */
    while (n >= made_n_bytes && rmdir(dir) == 0) {
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir) break;
        *slash = '\0';
        n = (size_t)(slash - dir);
    }
    free(dir);
}
