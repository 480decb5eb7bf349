/* bench_sgemm.c — which sgemm should the CPU layers use?  (not a test)
 *
 * Where it sits: bench/; the measurement behind model/sgemm.c's choice of
 * oneDNN's dnnl_sgemm.  Compares dnnl_sgemm with OpenBLAS's cblas_sgemm as
 * installed (OPENBLAS_CORETYPE unset: OpenBLAS's own CPU detection), with
 * the OPENBLAS_CORETYPE the environment exports if it exports one, and with
 * OPENBLAS_CORETYPE=SkylakeX.  OpenBLAS reads the variable when it loads,
 * so each OpenBLAS row set comes from a child process: this program runs
 * itself again with the variable set or unset.
 * Shapes: 1024^3, and the GEMMs model/ issues at batch 128 for both
 * models: the per-image conv GEMMs (forward, weight gradient, im2col
 * gradient), which model/ runs one image per thread, each single-threaded,
 * so with T threads T of them run at once ("per-thread" rows report their
 * total rate); and the fully connected GEMMs, one multi-threaded call
 * ("one call" rows).  Each figure is the median of --reps timings of a
 * batch of calls lasting about 10 ms, with the min-max spread.
 */
#include "bench/bench_util.h"
#include "base/flags.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char *name;
    int ta, tb, M, N, K;
    int per_thread; /* 1: T independent single-threaded calls at once; 0: one T-threaded call */
} Shape;

/* The GEMMs of model/ at batch 128 (see model/conv2d.c and model/dense.c). */
static const Shape shapes[] = {
    {"square 1024^3", 0, 0, 1024, 1024, 1024, 0},
    {"mnist conv1 fwd", 0, 0, 784, 32, 25, 1},
    {"mnist conv1 dW", 1, 0, 25, 32, 784, 1},
    {"mnist conv2 fwd", 0, 0, 196, 64, 800, 1},
    {"mnist conv2 dW", 1, 0, 800, 64, 196, 1},
    {"mnist conv2 dcol", 0, 1, 196, 800, 64, 1},
    {"mnist local3 fwd", 0, 0, 128, 1024, 3136, 0},
    {"mnist local3 dW", 1, 0, 3136, 1024, 128, 0},
    {"mnist local3 dx", 0, 1, 128, 3136, 1024, 0},
    {"cifar10 conv1 fwd", 0, 0, 576, 64, 75, 1},
    {"cifar10 conv1 dW", 1, 0, 75, 64, 576, 1},
    {"cifar10 conv2 fwd", 0, 0, 144, 64, 1600, 1},
    {"cifar10 conv2 dW", 1, 0, 1600, 64, 144, 1},
    {"cifar10 conv2 dcol", 0, 1, 144, 1600, 64, 1},
    {"cifar10 local3 fwd", 0, 0, 128, 384, 2304, 0},
    {"cifar10 local3 dW", 1, 0, 2304, 384, 128, 0},
    {"cifar10 local3 dx", 0, 1, 128, 2304, 384, 0},
};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])

typedef struct {
    float *A, *B, *C;
} Mats;

static void call(int use_dnnl, const Shape *s, Mats *m) {
    int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    if (use_dnnl)
        dnnl_sgemm(s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->M, s->N, s->K, 1.0f, m->A, lda, m->B, ldb, 0.0f, m->C,
                   s->N);
    else
        cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, s->M, s->N,
                    s->K, 1.0f, m->A, lda, m->B, ldb, 0.0f, m->C, s->N);
}

static void fill(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
}

/* Median, min and max GFLOP/s of `s` with `threads` threads. */
static void measure(double *med, double *lo, double *hi, int use_dnnl, const Shape *s, int threads, int reps) {
    const int n_mats = s->per_thread ? threads : 1;
    Mats m[64];
    for (int t = 0; t < n_mats; t++) {
        m[t].A = malloc(sizeof(float) * s->M * s->K);
        m[t].B = malloc(sizeof(float) * s->K * s->N);
        m[t].C = malloc(sizeof(float) * s->M * s->N);
        fill(m[t].A, (size_t)s->M * s->K);
        fill(m[t].B, (size_t)s->K * s->N);
    }
    if (s->per_thread) {
        omp_set_num_threads(1);
        if (!use_dnnl) openblas_set_num_threads(1);
    } else {
        omp_set_num_threads(threads);
        if (!use_dnnl) openblas_set_num_threads(threads);
    }
    const double flop = 2.0 * s->M * s->N * s->K * n_mats;
    /* Calls per timing so that one timing lasts about 10 ms. */
    double t0 = now_s();
    call(use_dnnl, s, &m[0]);
    double one = now_s() - t0;
    int inner = (int)(0.01 / (one > 1e-7 ? one : 1e-7));
    if (inner < 1) inner = 1;
    double *g = malloc(sizeof(double) * reps);
    for (int r = -1; r < reps; r++) {
        double start = now_s();
        if (s->per_thread) {
#pragma omp parallel num_threads(threads)
            {
                Mats *mine = &m[omp_get_thread_num()];
                for (int i = 0; i < inner; i++) call(use_dnnl, s, mine);
            }
        } else {
            for (int i = 0; i < inner; i++) call(use_dnnl, s, &m[0]);
        }
        double dt = now_s() - start;
        if (r >= 0) g[r] = flop * inner / dt / 1e9;
    }
    qsort(g, reps, sizeof(double), cmp_double);
    *med = g[reps / 2];
    *lo = g[0];
    *hi = g[reps - 1];
    free(g);
    for (int t = 0; t < n_mats; t++) {
        free(m[t].A); free(m[t].B); free(m[t].C);
    }
}

static void run_backend(const char *backend, int reps) {
    int use_dnnl = strcmp(backend, "dnnl") == 0;
    char label[80];
    const char *core_env = getenv("OPENBLAS_CORETYPE");
    if (use_dnnl) snprintf(label, sizeof label, "dnnl_sgemm");
    else if (core_env) snprintf(label, sizeof label, "openblas CORETYPE=%s", core_env);
    else snprintf(label, sizeof label, "openblas as installed");
    char core[64] = "-";
    if (!use_dnnl) snprintf(core, sizeof core, "%s", openblas_get_corename());
    for (int i = 0; i < N_SHAPES; i++) {
        const Shape *s = &shapes[i];
        for (int threads = 1; threads <= 2; threads++) {
            double med, lo, hi;
            measure(&med, &lo, &hi, use_dnnl, s, threads, reps);
            printf("| %-27s | %-10s | %-20s | %c%c %5d %5d %5d | %-9s | %d | %7.1f (%.1f-%.1f) |\n", label, core, s->name,
                   s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->M, s->N, s->K, s->per_thread ? "per-thread" : "one call",
                   threads, med, lo, hi);
            fflush(stdout);
        }
    }
}

int main(int argc, char **argv) {
    const char *backend = "all";
    int reps = 15;
    Flag flags[] = {
        {"backend", FLAG_STRING, &backend, "all, dnnl or openblas (openblas reads OPENBLAS_CORETYPE from the environment)"},
        {"reps", FLAG_INT, &reps, "timings per figure (median reported)", FLAG_RANGE(1, 1000, "[]", NULL)},
    };
    char *pos[argc > 0 ? argc : 1];
    int n_pos = 0;
    const int done = bench_parse_flags("bench_sgemm", "[flags]", flags, 2, argc, argv, pos, &n_pos, 0);
    if (done >= 0) return done;
    if (strcmp(backend, "all") && strcmp(backend, "dnnl") && strcmp(backend, "openblas")) {
        fprintf(stderr, "bench_sgemm: --backend all, dnnl or openblas (see --help)\n");
        return 2;
    }
    if (strcmp(backend, "all") != 0) {
        run_backend(backend, reps);
        return 0;
    }
    printf("| sgemm | OpenBLAS core | shape | trans M N K | mode | threads | GFLOP/s median (min-max) |\n");
    printf("|---|---|---|---|---|---|---|\n");
    fflush(stdout);
    char self[4096], reps_s[32];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "bench_sgemm: cannot find /proc/self/exe; run with --backend dnnl|openblas instead\n");
        return 1;
    }
    self[n] = 0;
    snprintf(reps_s, sizeof reps_s, "--reps=%d", reps);
    /* dnnl; OpenBLAS detecting the CPU itself; the environment's core type
     * (if any, and not SkylakeX); SkylakeX. */
    const char *env_core = getenv("OPENBLAS_CORETYPE");
    char env_assign[96] = "";
    if (env_core && strcmp(env_core, "SkylakeX") != 0 && strspn(env_core, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") == strlen(env_core))
        snprintf(env_assign, sizeof env_assign, "OPENBLAS_CORETYPE=%s", env_core);
    const char *runs[4][2] = {{"dnnl", "env -u OPENBLAS_CORETYPE"}, {"openblas", "env -u OPENBLAS_CORETYPE"},
                              {"openblas", env_assign}, {"openblas", "OPENBLAS_CORETYPE=SkylakeX"}};
    for (int r = 0; r < 4; r++) {
        if (!runs[r][1][0]) continue;
        char cmd[8300];
        snprintf(cmd, sizeof cmd, "%s '%s' --backend=%s %s", runs[r][1], self, runs[r][0], reps_s);
        fflush(stdout);
        if (system(cmd) != 0) {
            fprintf(stderr, "bench_sgemm: child run failed: %s\n", cmd);
            return 1;
        }
    }
    return 0;
}
