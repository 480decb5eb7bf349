/* bench_model.c — forward+backward speed of the CPU models (not a test).
 *
 * Where it sits: bench/; measures what a CPU tower spends per step inside
 * model_forward + model_backward_write (model/: a step's first micro-batch,
 * the gradient written, as tower_cpu.c runs it), on random in-memory data with
 * TensorFlow's initializers, no optimizer step (that is ps/'s, measured by
 * bench/bench_ps).  bench/run_model_bench.sh runs it beside
 * bench/pytorch_model.py and prints both side by side.
 * Prints, per model and batch: images/sec (median over --reps timed steps,
 * with the min-max spread), achieved GFLOP/s (training = 3 x forward
 * multiply-adds x 2 FLOPs, the usual estimate), and that as a fraction of a
 * dnnl_sgemm 1024^3 measured in the same process with the same threads.
 * Also the minor page faults per step (0 when nothing is allocated and
 * freed per step, as model/ promises).  --per_layer adds each layer's
 * share of the step.  --conv_loops runs every convolution on model/conv2d.c's
 * loops (conv2d_run_set_loops_only), for weighing conv_algo.c's table against
 * them layer by layer.
 * A line starting "RESULT" carries the figures for scripts.
 */
#include "bench/bench_util.h"
#include "base/flags.h"
#include "model/layers.h"
#include "model/model.h"
#include "model/sgemm.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* GFLOP/s of a 1024^3 sgemm with the current threads: median of 7 runs. */
static double sgemm_ceiling(void) {
    const int n = 1024;
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
    uint64_t s = 1;
    for (int i = 0; i < n * n; i++) {
        a[i] = (float)(splitmix(&s) >> 40) * 0x1.0p-24f - 0.5f;
        b[i] = (float)(splitmix(&s) >> 40) * 0x1.0p-24f - 0.5f;
    }
    double t[7];
    sgemm(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    for (int r = 0; r < 7; r++) {
        double t0 = now_s();
        sgemm(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        t[r] = now_s() - t0;
    }
    qsort(t, 7, sizeof(double), cmp_double);
    free(a); free(b); free(c);
    return 2.0 * n * n * n / t[3] / 1e9;
}

/* Time `reps` forward+backward steps of `name` at batch B on size x size
 * inputs (0: mnist 28x28x1, cifar10 24x24x3, another network its table's
 * stored shape); returns 0 or -1. */
static int bench(const char *name, int B, int reps, int warmup, int per_layer, double ceiling, int threads, int size,
                 float width) {
    char err[256];
    ModelSpec spec;
    ModelInputFacts facts;
    if (model_input_facts(name, &facts) != 0) {
        fprintf(stderr, "bench_model: unknown model '%s'\n", name);
        return -1;
    }
    const int H = size ? size : !strcmp(name, "cifar10") ? 24 : facts.H;
    const ModelOptions opts = {.width_multiplier = width};
    if (model_spec_init_opts(&spec, name, H, H, facts.C, 10, &opts, err, sizeof err) != 0) {
        fprintf(stderr, "bench_model: %s\n", err);
        return -1;
    }
    ModelActs *acts = model_acts_create(&spec, B);
    size_t x_n = (size_t)B * spec.H * spec.W * spec.C;
    float *x = malloc(sizeof(float) * x_n), *params = malloc(sizeof(float) * spec.n_params);
    float *dparams = malloc(sizeof(float) * spec.n_params);
    int32_t *labels = malloc(sizeof(int32_t) * B);
    double *t = malloc(sizeof(double) * reps);
    if (!acts || !x || !params || !dparams || !labels || !t) {
        fprintf(stderr, "bench_model: out of memory for %s at batch %d\n", name, B);
        return -1;
    }
    uint64_t s = 7;
    for (size_t i = 0; i < x_n; i++) x[i] = (float)(splitmix(&s) >> 40) * 0x1.0p-24f - 0.5f;
    for (int b = 0; b < B; b++) labels[b] = (int32_t)(splitmix(&s) % 10);
    model_init_params(params, &spec, 1);
    for (int i = 0; i < warmup; i++) {
        model_forward(NULL, NULL, acts, x, labels, params, B);
        model_backward_write(dparams, acts, params); /* a step's first micro-batch, as a CPU tower runs it */
    }
    model_layer_times_reset(acts);
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        model_forward(NULL, NULL, acts, x, labels, params, B);
        model_backward_write(dparams, acts, params);
        t[r] = now_s() - t0;
    }
    getrusage(RUSAGE_SELF, &ru1);
    double faults = (double)(ru1.ru_minflt - ru0.ru_minflt) / reps;
    double total = 0;
    for (int r = 0; r < reps; r++) total += t[r];
    qsort(t, reps, sizeof(double), cmp_double);
    double med = t[reps / 2];
    double train_flop = 3.0 * 2.0 * model_forward_flops_per_example(&spec) * B;
    double gflops = train_flop / med / 1e9;
    printf("%-8s batch %4d threads %d: %8.1f img/s (min-max %.1f-%.1f)  %.1f ms/step  %.1f GFLOP/s = %.0f%% of sgemm %.0f"
           "  %.1f page faults/step\n",
           name, B, threads, B / med, B / t[reps - 1], B / t[0], med * 1e3, gflops, 100 * gflops / ceiling, ceiling,
           faults);
    printf("RESULT framework=tower model=%s batch=%d threads=%d img_s=%.1f img_s_min=%.1f img_s_max=%.1f "
           "gflops=%.1f sgemm_gflops=%.1f faults_per_step=%.1f\n",
           name, B, threads, B / med, B / t[reps - 1], B / t[0], gflops, ceiling, faults);
    if (per_layer) {
        ModelLayerTime lt[512]; /* more than any network's nodes (GRAPH_MAX_NODES) */
        int n = model_layer_times(lt, 512, acts);
        printf("  %-16s %9s %9s %7s\n", "layer", "fwd ms", "bwd ms", "share");
        double sum = 0;
        for (int i = 0; i < n; i++) sum += lt[i].forward_s + lt[i].backward_s;
        for (int i = 0; i < n; i++)
            printf("  %-16s %9.3f %9.3f %6.1f%%\n", lt[i].name, 1e3 * lt[i].forward_s / reps,
                   1e3 * lt[i].backward_s / reps, 100 * (lt[i].forward_s + lt[i].backward_s) / total);
        printf("  %-16s %9.3f ms per step (%.1f%% of the step is outside the layers)\n", "sum", 1e3 * sum / reps,
               100 * (1 - sum / total));
    }
    model_acts_free(acts);
    free(x); free(params); free(dparams); free(labels); free(t);
    return 0;
}

int main(int argc, char **argv) {
    const char *model = "all";
    int batch = 0, threads = 2, reps = 20, warmup = 3, per_layer = 0, size = 0, conv_loops = 0;
    float width = 1.0f;
    Flag flags[] = {
        {"model", FLAG_STRING, &model, "a network of model/nets/nets.c (mnist, cifar10, mobilenet_v2, ...) or all (mnist and cifar10)"},
        {"size", FLAG_INT, &size, "input height and width (0: the network's; cifar10 24)", FLAG_RANGE(0, 4096, "[]", "0: the network's")},
        {"width", FLAG_FLOAT, &width, "mobilenet_v2's width multiplier", FLAG_RANGE(0, 16, "(]", NULL)},
        {"batch", FLAG_INT, &batch, "examples per step; 0 = 64 and 128", FLAG_RANGE(0, 1 << 20, "[]", "0: 64 and 128")},
        {"threads", FLAG_INT, &threads, "OpenMP threads", FLAG_RANGE(1, 1024, "[]", NULL)},
        {"reps", FLAG_INT, &reps, "timed steps (the median is reported)", FLAG_RANGE(1, 1000000, "[]", NULL)},
        {"warmup", FLAG_INT, &warmup, "untimed steps first", FLAG_RANGE(0, 1000000, "[]", NULL)},
        {"per_layer", FLAG_BOOL, &per_layer, "print each layer's forward/backward time"},
        {"conv_loops", FLAG_BOOL, &conv_loops, "every convolution on conv2d.c's loops, whatever conv_algo.c's table says"},
    };
    const int n_flags = sizeof flags / sizeof flags[0];
    char *pos[argc > 0 ? argc : 1];
    int n_pos = 0;
    const int done = bench_parse_flags("bench_model", "[flags]", flags, n_flags, argc, argv, pos, &n_pos, 0);
    if (done >= 0) return done;
    omp_set_num_threads(threads);
    if (conv_loops) conv2d_run_set_loops_only(1);
    double ceiling = sgemm_ceiling();
    const char *all[2] = {"mnist", "cifar10"};
    const int n_models = strcmp(model, "all") ? 1 : 2;
    const char *const *models = strcmp(model, "all") ? &model : all;
    int batches[2] = {64, 128};
    for (int m = 0; m < n_models; m++) {
        for (int b = 0; b < 2; b++) {
            int B = batch ? batch : batches[b];
            if (bench(models[m], B, reps, warmup, per_layer, ceiling, threads, size, width) != 0) return 1;
            if (batch) break;
        }
    }
    return 0;
}
