/* test_base_check.c — the fatal report of base/check.h, which every CUDA,
 * cuDNN, cuBLAS and NCCL check ends in (base/cuda_check.h).
 *
 * Where it sits: ctest (CPU; no GPU needed: the report itself is plain C).
 * A child process registers an atexit handler and starts 8 threads that
 * all call tower_check_fatal at once, as tower threads hitting a failed
 * CUDA call in the same step would.  The parent checks that the child
 * ended with status 2, that exactly one report line reached stderr, naming
 * the call, the message, the file, the line and the device, that the
 * atexit handler did not run (exit() would run the CUDA and NCCL teardown
 * while other tower threads still use the devices), and that a line the
 * child wrote to stdout before the failure was flushed.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/check.h"
#include "tests/check.h"

#define N_THREADS 8

static pthread_barrier_t start;

static void on_exit_handler(void) { fprintf(stderr, "atexit handler ran\n"); }

static void *fail_thread(void *arg) {
    const int device = (int)(long)arg;
    pthread_barrier_wait(&start);
    tower_check_fatal("CUDA", "cudaMemcpyAsync(dst, src, n, kind, stream)", "an illegal memory access was encountered",
                      "tower/tower_cuda.c", 123, device);
}

/* The child: a buffered stdout line, the atexit handler, 8 failing threads. */
static void child(void) {
    printf("step 1, loss = 2.30\n"); /* buffered (stdout is a file) until the report flushes it */
    atexit(on_exit_handler);
    pthread_barrier_init(&start, NULL, N_THREADS);
    pthread_t th[N_THREADS];
    for (long t = 0; t < N_THREADS; t++) pthread_create(&th[t], NULL, fail_thread, (void *)t);
    for (int t = 0; t < N_THREADS; t++) pthread_join(th[t], NULL);
    exit(0); /* not reached: the first report ends the process */
}

static long read_file(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t got = fread(buf, 1, n - 1, f);
    buf[got] = '\0';
    fclose(f);
    return (long)got;
}

int main(void) {
    char out_path[] = "/tmp/test_base_check_out.XXXXXX", err_path[] = "/tmp/test_base_check_err.XXXXXX";
    int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
    CHECK(out_fd >= 0 && err_fd >= 0, "mkstemp");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out_fd, 1);
        dup2(err_fd, 2);
        child();
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork/waitpid");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 2, "the child ended with status 2 (raw status %d)", status);
    char out[4096], err[8192];
    CHECK(read_file(out_path, out, sizeof out) >= 0 && read_file(err_path, err, sizeof err) >= 0, "read the output");
    int n_lines = 0;
    for (const char *p = err; (p = strstr(p, "CUDA error: ")) != NULL; p++) n_lines++;
    CHECK(n_lines == 1, "%d report lines, want exactly 1; stderr:\n%s", n_lines, err);
    CHECK(strstr(err, "CUDA error: cudaMemcpyAsync(dst, src, n, kind, stream) failed: an illegal memory access was "
                      "encountered (tower/tower_cuda.c:123, device ") == err,
          "the report names the call, the message, the file, the line and the device; stderr:\n%s", err);
    CHECK(strstr(err, "atexit handler ran") == NULL, "the atexit handlers ran (exit instead of _Exit)");
    CHECK(strstr(out, "step 1, loss = 2.30\n") != NULL, "the log line written before the failure was lost");
    unlink(out_path);
    unlink(err_path);
    printf("fatal report: status %d, %d line(s): %s", WIFEXITED(status) ? WEXITSTATUS(status) : -1, n_lines, err);
    return check_failures ? 1 : 0;
}
