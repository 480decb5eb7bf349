/* file.c — file_open_regular (file.h): a regular file opened for reading
 * without the wait a FIFO's open would make.  base/, the floor. */
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

FILE *file_open_regular(const char *path, int *not_regular) {
    *not_regular = 0;
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        const int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        *not_regular = 1;
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
