/* file.c — file_open_regular (file.h): a regular file opened for reading
 * without the wait a FIFO's open would make.  base/, the floor. */
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
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
