/* train_dir.c — one run per --train_dir (trainer.h: trainer_lock_dir).
 *
 * Where it sits: train/, beside the trainer; `tower train` (cmd/) takes the
 * lock before trainer_open and keeps it to its exit.  An flock on
 * train_dir/.lock, which holds the holder's PID: the kernel drops it when
 * the process ends however it ends, so a killed run never leaves a stale
 * lock.  A run that ends removes the file (while it still holds the lock; a
 * run that locked a file no longer under that name tries again), so a run
 * that was refused leaves the directory as it was.  The same call finds a train_dir that cannot be written, at
 * start-up rather than at the first save.
 * What it does not do: stop readers (eval, export, inspect take no lock).
 */
#include "train/trainer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/escape.h"

int trainer_lock_dir(const char *train_dir, int *fd_out, char *err, size_t err_n_bytes) {
    *fd_out = -1;
    char dir[4096], path[4200];
    escape_str(dir, sizeof dir, train_dir);
    struct stat st;
    if (stat(train_dir, &st) != 0) {
        snprintf(err, err_n_bytes, "--train_dir %s cannot be used: %s", dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, err_n_bytes, "--train_dir %s is not a directory", dir);
        return -1;
    }
    snprintf(path, sizeof path, "%s/.lock", train_dir);
    int fd = -1, lock_errno = 0;
    for (int attempt = 0;; attempt++) {
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            snprintf(err, err_n_bytes, "--train_dir %s cannot be written: %s/.lock: %s", dir, dir, strerror(errno));
            return -1;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            lock_errno = errno;
            break;
        }
        /* Locked: still the file under that name?  (The run before may have removed it meanwhile.) */
        struct stat held, named;
        if (fstat(fd, &held) == 0 && stat(path, &named) == 0 && held.st_dev == named.st_dev &&
            held.st_ino == named.st_ino)
            break;
        close(fd);
        fd = -1;
        if (attempt == 100) {
            snprintf(err, err_n_bytes, "--train_dir %s: %s/.lock keeps changing under this run", dir, dir);
            return -1;
        }
    }
    if (lock_errno != 0) {
        const int e = lock_errno;
        char pid[32] = "";
        ssize_t n = e == EWOULDBLOCK ? pread(fd, pid, sizeof pid - 1, 0) : -1;
        close(fd);
        if (e != EWOULDBLOCK) {
            snprintf(err, err_n_bytes, "--train_dir %s: cannot lock %s/.lock: %s", dir, dir, strerror(e));
            return -1;
        }
        long holder = 0;
        if (n > 0) {
            pid[n] = '\0';
            if (sscanf(pid, "%ld", &holder) != 1) holder = 0;
        }
        if (holder > 0)
            snprintf(err, err_n_bytes, "--train_dir %s is in use by another run (pid %ld holds %s/.lock): wait for it "
                     "to end, or give another --train_dir", dir, holder, dir);
        else
            snprintf(err, err_n_bytes, "--train_dir %s is in use by another run (it holds %s/.lock): wait for it to "
                     "end, or give another --train_dir", dir, dir);
        return -1;
    }
    /* The holder's PID for the next run's message; then a file made and
     * removed beside the checkpoints: a directory that cannot take them
     * (read-only, a full disk) is found now, not at the first save. */
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    char probe[4300];
    snprintf(probe, sizeof probe, "%s/.write-test-%ld", train_dir, (long)getpid());
    int pfd = -1;
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len ||
        (pfd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0 || write(pfd, pid, (size_t)len) != len) {
        int e = errno;
        if (pfd >= 0) {
            close(pfd);
            unlink(probe);
        }
        unlink(path);
        close(fd);
        snprintf(err, err_n_bytes, "--train_dir %s cannot be written: %s", dir, strerror(e));
        return -1;
    }
    close(pfd);
    unlink(probe);
    *fd_out = fd;
    return 0;
}

void trainer_unlock_dir(const char *train_dir, int fd) {
    if (fd < 0) return;
    char path[4200];
    snprintf(path, sizeof path, "%s/.lock", train_dir);
    unlink(path); /* still holding the lock: a run that opened this file meanwhile sees it gone and tries again */
    close(fd);    /* closing drops the flock */
}
