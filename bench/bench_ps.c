/* bench_ps.c — what the parameter server costs per synchronous step, and
 * what a checkpoint costs.
 *
 * Where it sits: bench/, measuring ps/ (built when TOWER_BENCH is on; run it by hand).
 * It times, on the real model sizes, the CPU work a step adds after the
 * towers deliver their gradients: ps_average_grads for 1, 2 and 4 towers and
 * ps_apply_gradients for each optimizer with the moving average; then
 * ckpt_save (with its fsyncs) and ckpt_load.  It prints medians (min-max)
 * of repeated runs as Markdown rows; it asserts nothing and trains nothing.
 *
 * usage: bench_ps [--reps N] [--dir DIR]   (DIR: where checkpoints go, default /tmp; --help)
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/flags.h"
#include "bench/bench_util.h"
#include "ps/checkpoint.h"
#include "ps/ps.h"

typedef struct { double median, min, max; } Stats;

static Stats stats_of(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    Stats s = {t[n / 2], t[0], t[n - 1]};
    return s;
}

static void row(const char *model, const char *what, int threads, Stats s_ms, double bytes) {
    printf("| %s | %s | %d | %.2f (%.2f-%.2f) | %.1f |\n", model, what, threads, s_ms.median, s_ms.min, s_ms.max,
           bytes / (s_ms.median * 1e-3) / 1e9);
}

static void bench_model(const char *name, int H, int W, int C, int reps, const char *dir) {
    ModelSpec spec;
    char err[512];
    if (model_spec_init(&spec, name, H, W, C, 10, err, sizeof err) != 0) {
        fprintf(stderr, "bench_ps: %s\n", err);
        exit(1);
    }
    const double n = (double)spec.n_params, f = sizeof(float);
    double *t = malloc((size_t)reps * sizeof *t);
    char label[64];
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        const int tower_counts[3] = {1, 2, 4};
        for (int c = 0; c < 3; c++) {
            PsConfig cfg;
            ps_config_defaults(&cfg);
            ParamServer *ps = ps_create(&spec, tower_counts[c], &cfg, host_alloc_default(), 1);
            for (int k = 0; k < tower_counts[c]; k++)
                for (size_t i = 0; i < spec.n_params; i++) ps->tower_grads[k][i] = (float)((i + k) % 13) * 1e-3f;
            ps_average_grads(ps);
            for (int r = 0; r < reps; r++) {
                double t0 = now_s();
                ps_average_grads(ps);
                t[r] = (now_s() - t0) * 1e3;
            }
            snprintf(label, sizeof label, "ps_average_grads, %d tower(s)", tower_counts[c]);
            row(name, label, threads, stats_of(t, reps), n * f * (tower_counts[c] + 1));
            ps_free(ps);
        }
        struct { const char *label; OptimizerKind kind; int nesterov; float ema; double arrays; } opts[] = {
            {"ps_apply_gradients, sgd", OPT_SGD, 0, 0.0f, 3},                      /* g, var r + var w */
            {"ps_apply_gradients, sgd + ema", OPT_SGD, 0, 0.9999f, 6},             /* + shadow r/w, var r */
            {"ps_apply_gradients, nesterov + ema", OPT_MOMENTUM, 1, 0.9999f, 8},   /* + accum r/w */
        };
        for (int o = 0; o < 3; o++) {
            PsConfig cfg;
            ps_config_defaults(&cfg);
            cfg.opt.kind = opts[o].kind;
            cfg.opt.nesterov = opts[o].nesterov;
            cfg.ema_decay = opts[o].ema;
            cfg.lr.initial_lr = 1e-6f; /* keep the values tame over the repetitions */
            ParamServer *ps = ps_create(&spec, 1, &cfg, host_alloc_default(), 1);
            ps_apply_gradients(ps);
            for (int r = 0; r < reps; r++) {
                double t0 = now_s();
                ps_apply_gradients(ps);
                t[r] = (now_s() - t0) * 1e3;
            }
            row(name, opts[o].label, threads, stats_of(t, reps), n * f * opts[o].arrays);
            ps_free(ps);
        }
    }
    omp_set_num_threads(2);
    PsConfig cfg;
    ps_config_defaults(&cfg);
    ParamServer *ps = ps_create(&spec, 2, &cfg, host_alloc_default(), 1);
    ParamServer *back = ps_create(&spec, 2, &cfg, host_alloc_default(), 2);
    const int ck_reps = reps < 7 ? reps : 7;
    double *tl = malloc((size_t)ck_reps * sizeof *tl);
    char path[4096];
    for (int r = 0; r < ck_reps; r++) {
        ps->global_step = r + 1;
        double t0 = now_s();
        if (ckpt_save(dir, ps, NULL, 2, err, sizeof err) != 0) { fprintf(stderr, "bench_ps: %s\n", err); exit(1); }
        t[r] = (now_s() - t0) * 1e3;
        snprintf(path, sizeof path, "%s/model.ckpt-%d", dir, r + 1);
        t0 = now_s();
        if (ckpt_load(path, back, NULL, err, sizeof err) != 0) { fprintf(stderr, "bench_ps: %s\n", err); exit(1); }
        tl[r] = (now_s() - t0) * 1e3;
    }
    const double file_bytes = 3.0 * n * f;
    row(name, "ckpt_save (params + accum + ema, fsync)", 2, stats_of(t, ck_reps), file_bytes);
    row(name, "ckpt_load", 2, stats_of(tl, ck_reps), file_bytes);
    for (int r = ck_reps - 2; r <= ck_reps; r++) {
        snprintf(path, sizeof path, "%s/model.ckpt-%d", dir, r);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_INDEX_NAME);
    unlink(path);
    free(tl);
    ps_free(ps);
    ps_free(back);
    free(t);
}

int main(int argc, char **argv) {
    int reps = 31;
    const char *dir = "/tmp";
    const Flag flags[] = {
        {"reps", FLAG_INT, &reps, "runs of each operation (the median is reported)", FLAG_RANGE(1, 10000, "[]", NULL)},
        {"dir", FLAG_STRING, &dir, "where the checkpoints go (a subdirectory, removed after)"},
    };
    const int n_flags = (int)(sizeof flags / sizeof flags[0]);
    char *pos[argc > 0 ? argc : 1];
    int n_pos = 0;
    const int done = bench_parse_flags("bench_ps", "[flags]", flags, n_flags, argc, argv, pos, &n_pos, 0);
    if (done >= 0) return done;
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/bench_ps_ckpt.%d", dir, (int)getpid());
    printf("| model | operation | threads | ms median (min-max) | GB/s moved |\n|---|---|---|---|---|\n");
    bench_model("mnist", 28, 28, 1, reps, sub);
    bench_model("cifar10", 24, 24, 3, reps, sub);
    rmdir(sub);
    return 0;
}
