/* bench_gpu.c — training speed of GPU towers, and where a step's time goes
 * (not a test; needs a GPU).
 *
 * Where it sits: bench/, built with CUDA only (bench/gpu.cmake).  It drives
 * the trainer's own step (train/trainer.h, mode ps_cpu) on a synthetic
 * in-memory batch: the parameter server's variables in pinned host memory
 * (the CUDA backend's allocator), N GPU towers on one GPU (copy the
 * variables and the shard in, forward + backward, copy the gradients out),
 * then ps_average_grads + ps_apply_gradients on the CPU (Nesterov momentum,
 * no moving average).  For each model and tower count it prints images/sec
 * (median over --reps timed runs of --steps steps, after --warmup steps,
 * with the min-max spread) and a breakdown of one step, the median over
 * every timed step of:
 *   copy in    variables + shard host -> GPU (TOWER_PHASE_COPY_IN, mean over towers)
 *   compute    forward + backward on the GPU (TOWER_PHASE_FORWARD + _BACKWARD)
 *   copy out   gradients GPU -> host (TOWER_PHASE_COPY_OUT)
 *   wake-up    from the go to the tower's copy-in start (tower_wake_sec; on the device's clock), and
 *              from the go to the tower's thread running (tower_thread_wake_sec; host), which tells a
 *              thread woken late from a first CUDA call that reached the device late
 *   ps         ps_average_grads + ps_apply_gradients on the CPU
 * plus, measured alone on the same GPU, one H2D copy of the variables.
 * A line starting "RESULT" carries the figures for run_gpu_bench.sh.
 *
 * --per_layer --model M (any model of the trainer) instead: where one
 * GPU step's time goes, node by node.  No trainer: ONE workspace
 * (model/model_cuda.h) on --device, random variables (model_init_params),
 * a random batch of --batch uploaded once, --warmup steps, --steps steps
 * timed by events around forward + backward (no profiling), then --steps
 * profiled steps (model_acts_cuda_profile).  It prints a table sorted by
 * each node's time, the median over the profiled steps: GPU milliseconds
 * forward and backward, share of the profiled step, the host's enqueue
 * milliseconds, and the node's own line (a conv's cuDNN algorithms); then
 * the nodes' sum beside the whole step, and the sums per kind.  --csv
 * writes the table too.  docs/gpu.md ("Per-layer profile") reads it.
 *
 * What it does not do: read files (the input pipeline is io/'s, measured by
 * bench_pipeline) or check results (tests/test_gpu_*.c do).
 */
#include "bench/bench_util.h"
#include "base/flags.h"
#include "model/model_cuda.h"
#include "train/trainer.h"
#include "base/cuda_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

typedef struct {
    const char *model;
    int batch;        /* per tower */
    int steps, reps, warmup;
    int device;
    int tf32;
    int per_layer;    /* 1: the per-node table of one model instead */
    int image_size;   /* --per_layer: input height and width; 0: the model's default */
    int deterministic; /* --per_layer: only deterministic cuDNN algorithms */
    const char *csv;  /* --per_layer: also write the table here ("" = no) */
} Opts;

/* Seconds for one pinned host -> device copy of n_bytes: median of 9. */
static double h2d_alone(const void *pinned, size_t n_bytes, int device) {
    void *d = NULL;
    cudaStream_t s;
    if (cudaSetDevice(device) != cudaSuccess || cudaMalloc(&d, n_bytes) != cudaSuccess ||
        cudaStreamCreate(&s) != cudaSuccess)
        return -1.0;
    double t[9];
    for (int r = 0; r < 10; r++) {
        double t0 = tower_now_sec();
        cudaMemcpyAsync(d, pinned, n_bytes, cudaMemcpyHostToDevice, s);
        cudaStreamSynchronize(s);
        if (r) t[r - 1] = tower_now_sec() - t0;
    }
    cudaStreamDestroy(s);
    cudaFree(d);
    return median(t, 9);
}

/* One configuration: n_towers GPU towers of o->batch on o->device, trained
 * by the trainer's own step (mode ps_cpu) on a synthetic batch. */
static int bench(const Opts *o, const char *name, int n_towers) {
    char err[1024], gpus[16];
    snprintf(gpus, sizeof gpus, "%d", o->device);
    TrainerOptions to;
    trainer_options_defaults(&to);
    to.model = name;
    to.device = "gpu";
    to.gpus = gpus;
    to.num_towers = n_towers;
    to.batch_size = o->batch;
    to.allow_tf32 = o->tf32;
    to.synthetic = 1;
    to.moving_average_decay = 0.0f;
    to.log_every = 0;
    Trainer tr;
    if (trainer_open(&tr, &to, err, sizeof err) != 0) {
        fprintf(stderr, "bench_gpu: %s\n", err);
        return -1;
    }
    const int B = o->batch, total = B * n_towers;
    const int n_steps = o->reps * o->steps;
    double *rate = calloc(o->reps, sizeof(double));
    double *ph[6];
    for (int p = 0; p < 6; p++) ph[p] = calloc(n_steps, sizeof(double));
    int rc = 1;
    float loss = 0.0f;
    for (int i = 0; i < o->warmup && rc == 1; i++) rc = trainer_step(&tr, &loss, err, sizeof err);
    for (int r = 0; r < o->reps && rc == 1; r++) {
        double t0 = tower_now_sec();
        for (int i = 0; i < o->steps && rc == 1; i++) {
            const int k = r * o->steps + i;
            rc = trainer_step(&tr, &loss, err, sizeof err);
            const TrainerStepTimes *st = &tr.times;
            ph[4][k] = (st->average.end_sec - st->average.start_sec) + (st->apply.end_sec - st->apply.start_sec);
            for (int t = 0; t < n_towers; t++) {
                const TowerTimes *tt = &tr.towers->towers[t].times;
                ph[0][k] += tower_phase_sec(tt, TOWER_PHASE_COPY_IN) / n_towers;
                ph[1][k] += (tower_phase_sec(tt, TOWER_PHASE_FORWARD) + tower_phase_sec(tt, TOWER_PHASE_BACKWARD)) / n_towers;
                ph[2][k] += tower_phase_sec(tt, TOWER_PHASE_COPY_OUT) / n_towers;
                ph[3][k] += tower_wake_sec(tt) / n_towers;
                ph[5][k] += tower_thread_wake_sec(tt) / n_towers;
            }
        }
        rate[r] = (double)total * o->steps / (tower_now_sec() - t0);
    }
    if (rc != 1) {
        fprintf(stderr, "bench_gpu: %s\n", rc == -2 ? "the loss is not finite" : err);
    } else {
        double lo = rate[0], hi = rate[0];
        for (int r = 1; r < o->reps; r++) {
            lo = rate[r] < lo ? rate[r] : lo;
            hi = rate[r] > hi ? rate[r] : hi;
        }
        const double img_s = median(rate, o->reps);
        double ms[6];
        for (int p = 0; p < 6; p++) ms[p] = 1e3 * median(ph[p], n_steps);
        const double h2d = 1e3 * h2d_alone(tr.ps->params, tr.spec.n_params * sizeof(float), o->device);
        printf("%-8s %d tower(s) x %d on GPU %d%s: %9.0f img/s (min-max %.0f-%.0f)  step %.2f ms: copy in %.2f, "
               "compute %.2f, copy out %.2f, wake-up %.2f (thread %.2f), ps %.2f; variables H2D alone %.2f ms, "
               "loss %.3f\n",
               name, n_towers, B, o->device, o->tf32 ? " (TF32)" : "", img_s, lo, hi, 1e3 * total / img_s, ms[0], ms[1],
               ms[2], ms[3], ms[5], ms[4], h2d, tr.tower_losses[0]);
        printf("RESULT framework=tower model=%s towers=%d batch=%d img_s=%.1f img_s_min=%.1f img_s_max=%.1f "
               "copy_in_ms=%.3f compute_ms=%.3f copy_out_ms=%.3f wake_ms=%.3f wake_thread_ms=%.3f ps_ms=%.3f "
               "h2d_vars_ms=%.3f tf32=%d\n",
               name, n_towers, B, img_s, lo, hi, ms[0], ms[1], ms[2], ms[3], ms[5], ms[4], h2d, o->tf32);
    }
    for (int p = 0; p < 6; p++) free(ph[p]);
    free(rate);
    trainer_close(&tr, NULL, 0);
    return rc == 1 ? 0 : -1;
}

/* ---- --per_layer ---------------------------------------------------------------------------- */

/* One node's medians over the profiled steps (milliseconds). */
typedef struct {
    int index;
    ModelNodeInfoCuda info;
    double fwd_ms, bwd_ms, host_fwd_ms, host_bwd_ms;
} LayerRow;

static int row_by_total(const void *x, const void *y) {
    const LayerRow *a = x, *b = y;
    const double ta = a->fwd_ms + a->bwd_ms, tb = b->fwd_ms + b->bwd_ms;
    return ta > tb ? -1 : ta < tb ? 1 : a->index - b->index;
}

/* The median of column i of an (n_steps, n) float table. */
static double column_median(const float *t, int n_steps, int n, int i, double *tmp) {
    for (int k = 0; k < n_steps; k++) tmp[k] = t[(size_t)k * n + i];
    return median(tmp, n_steps);
}

/* One training step on the workspace: zero the gradient, then forward +
 * backward between two events.  Returns the GPU milliseconds between them,
 * or -1 when the loss is not finite. */
static double layer_step(ModelActsCuda *a, float *loss, float *d_dparams, size_t n_params, const float *d_x,
                         const int32_t *d_labels, const float *d_params, int B, cudaEvent_t ev[2]) {
    cudaStream_t st = model_acts_cuda_stream(a);
    CUDA_CHECK(cudaMemsetAsync(d_dparams, 0, n_params * sizeof(float), st));
    CUDA_CHECK(cudaEventRecord(ev[0], st));
    model_forward_cuda_async(loss, NULL, a, d_x, d_labels, d_params, B);
    model_backward_cuda(d_dparams, a, d_params);
    CUDA_CHECK(cudaEventRecord(ev[1], st));
    CUDA_CHECK(cudaEventSynchronize(ev[1]));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
    return isfinite(*loss) ? (double)ms : -1.0;
}

/* s with every '"' doubled, inside quotes (a CSV field). */
static void csv_field(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static int per_layer(const Opts *o, const char *device_desc) {
    ModelInputFacts facts;
    (void)model_input_facts(o->model, &facts); /* an unknown name: model_spec_init says so */
    const int H = o->image_size > 0 ? o->image_size : facts.distorts ? 24 : facts.H;
    const int W = o->image_size > 0 ? o->image_size : facts.distorts ? 24 : facts.W;
    const int B = o->batch, n_steps = o->steps;
    char err[1024];
    ModelSpec *spec = calloc(1, sizeof *spec);
    if (!spec) {
        fprintf(stderr, "bench_gpu: out of host memory\n");
        return -1;
    }
    if (model_spec_init(spec, o->model, H, W, facts.C, 10, err, sizeof err) != 0) {
        fprintf(stderr, "bench_gpu: --per_layer: %s\n", err);
        free(spec);
        return -1;
    }
    CUDA_CHECK(cudaSetDevice(o->device));
    cudaStream_t st;
    cudnnHandle_t cudnn;
    cublasHandle_t cublas;
    CUDA_CHECK(cudaStreamCreate(&st));
    CUDNN_CHECK(cudnnCreate(&cudnn));
    CUBLAS_CHECK(cublasCreate(&cublas));
    ModelActsCuda *a = model_acts_cuda_create(spec, B, cudnn, cublas, st, o->tf32, o->deterministic, err, sizeof err);
    if (!a) {
        fprintf(stderr, "bench_gpu: --per_layer: %s\n", err);
        return -1;
    }
    const size_t n_params = spec->n_params, x_n = (size_t)B * H * W * facts.C;
    float *params = malloc(n_params * sizeof(float)), *x = malloc(x_n * sizeof(float));
    int32_t *labels = malloc((size_t)B * sizeof(int32_t));
    const int n = model_acts_cuda_n_nodes(a);
    float *t_fwd = malloc(sizeof(float) * n_steps * n), *t_bwd = malloc(sizeof(float) * n_steps * n);
    float *h_fwd = malloc(sizeof(float) * n_steps * n), *h_bwd = malloc(sizeof(float) * n_steps * n);
    double *plain = malloc(sizeof(double) * n_steps), *prof = malloc(sizeof(double) * n_steps);
    double *tmp = malloc(sizeof(double) * n_steps);
    double *tot[7]; /* (7, n_steps): ModelProfileTotalsCuda's fields per profiled step */
    LayerRow *rows = calloc((size_t)n, sizeof *rows);
    int tot_ok = 1;
    for (int k = 0; k < 7; k++) tot_ok &= (tot[k] = malloc(sizeof(double) * n_steps)) != NULL;
    if (!params || !x || !labels || !t_fwd || !t_bwd || !h_fwd || !h_bwd || !plain || !prof || !tmp || !rows ||
        !tot_ok) {
        fprintf(stderr, "bench_gpu: out of host memory\n");
        return -1;
    }
    model_init_params(params, spec, 1);
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < x_n; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((r >> 40) * (2.0 / 16777216.0) - 1.0); /* uniform in [-1, 1) */
    }
    for (int b = 0; b < B; b++) labels[b] = b % spec->num_classes;
    float *d_params, *d_dparams, *d_x, *loss;
    int32_t *d_labels;
    CUDA_CHECK(cudaMalloc((void **)&d_params, n_params * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void **)&d_dparams, n_params * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void **)&d_x, x_n * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void **)&d_labels, (size_t)B * sizeof(int32_t)));
    CUDA_CHECK(cudaMallocHost((void **)&loss, sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d_params, params, n_params * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_x, x, x_n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_labels, labels, (size_t)B * sizeof(int32_t), cudaMemcpyHostToDevice));
    cudaEvent_t ev[2];
    CUDA_CHECK(cudaEventCreate(&ev[0]));
    CUDA_CHECK(cudaEventCreate(&ev[1]));

    int rc = 0;
    double host_step[2] = {0.0, 0.0}; /* host seconds of the unprofiled and the profiled steps */
    for (int k = 0; k < o->warmup && rc == 0; k++)
        rc = layer_step(a, loss, d_dparams, n_params, d_x, d_labels, d_params, B, ev) < 0.0 ? -1 : 0;
    double t0 = now_s();
    for (int k = 0; k < n_steps && rc == 0; k++)
        rc = (plain[k] = layer_step(a, loss, d_dparams, n_params, d_x, d_labels, d_params, B, ev)) < 0.0 ? -1 : 0;
    host_step[0] = (now_s() - t0) / n_steps;
    if (rc == 0 && model_acts_cuda_profile(a, 1, err, sizeof err) != 0) {
        fprintf(stderr, "bench_gpu: --per_layer: %s\n", err);
        rc = -2;
    }
    t0 = now_s();
    for (int k = 0; k < n_steps && rc == 0; k++) {
        ModelProfileTotalsCuda pt;
        rc = (prof[k] = layer_step(a, loss, d_dparams, n_params, d_x, d_labels, d_params, B, ev)) < 0.0 ? -1 : 0;
        if (rc == 0 && (model_acts_cuda_profile_read(a, t_fwd + (size_t)k * n, t_bwd + (size_t)k * n) != 0 ||
                        model_acts_cuda_profile_read_host(a, h_fwd + (size_t)k * n, h_bwd + (size_t)k * n) != 0 ||
                        model_acts_cuda_profile_totals(a, &pt) != 0)) {
            fprintf(stderr, "bench_gpu: --per_layer: a profiled step left nothing to read\n");
            rc = -2;
        }
        if (rc == 0) {
            const double v[7] = {pt.forward_ms, pt.backward_ms, pt.input_ms, pt.loss_forward_ms, pt.loss_backward_ms,
                                 pt.host_forward_ms, pt.host_backward_ms};
            for (int j = 0; j < 7; j++) tot[j][k] = v[j];
        }
    }
    host_step[1] = (now_s() - t0) / n_steps;
    if (rc == -1) fprintf(stderr, "bench_gpu: --per_layer: the loss is not finite (%g)\n", (double)*loss);
    if (rc == 0) {
        const double step_ms = median(prof, n_steps), plain_ms = median(plain, n_steps);
        double m[7];
        for (int j = 0; j < 7; j++) m[j] = median(tot[j], n_steps);
        double sum_f = 0.0, sum_b = 0.0;
        for (int i = 0; i < n; i++) {
            LayerRow *w = &rows[i];
            w->index = i;
            model_acts_cuda_node_info(a, i, &w->info);
            w->fwd_ms = column_median(t_fwd, n_steps, n, i, tmp);
            w->bwd_ms = column_median(t_bwd, n_steps, n, i, tmp);
            w->host_fwd_ms = column_median(h_fwd, n_steps, n, i, tmp);
            w->host_bwd_ms = column_median(h_bwd, n_steps, n, i, tmp);
            sum_f += w->fwd_ms;
            sum_b += w->bwd_ms;
        }
        qsort(rows, (size_t)n, sizeof *rows, row_by_total);
        printf("# per-layer profile: %s %dx%dx%d, batch %d, on %s; %s math, %s cuDNN algorithms; %d warm-up steps, "
               "medians of %d steps\n", o->model, H, W, facts.C, B, device_desc, o->tf32 ? "TF32" : "FP32 (FMA)",
               o->deterministic ? "only deterministic" : "the trainer's", o->warmup, n_steps);
        printf("# step (events around forward + backward): %.3f ms profiled, %.3f ms without profiling; host %.3f / "
               "%.3f ms a step; %.0f img/s unprofiled\n", step_ms, plain_ms, 1e3 * host_step[1], 1e3 * host_step[0],
               1e3 * B / plain_ms);
        printf("# the executor's passes: forward %.3f ms (host enqueue %.3f), backward %.3f ms (host enqueue %.3f)\n",
               m[0], m[5], m[1], m[6]);
        printf("%4s %4s  %-26s %-10s %-5s %-14s %10s %10s %10s %6s %6s %9s %9s  %s\n", "rank", "node", "name", "kind",
               "act", "out HxWxC", "fwd ms", "bwd ms", "total ms", "share", "cum", "host fwd", "host bwd",
               "describe (conv: cuDNN algorithms)");
        double cum = 0.0;
        for (int j = 0; j < n; j++) {
            const LayerRow *w = &rows[j];
            char shape[32];
            snprintf(shape, sizeof shape, "%dx%dx%d", w->info.H, w->info.W, w->info.C);
            const double total = w->fwd_ms + w->bwd_ms;
            cum += total;
            printf("%4d %4d  %-26s %-10s %-5s %-14s %10.3f %10.3f %10.3f %5.1f%% %5.1f%% %9.3f %9.3f  %s\n", j + 1,
                   w->index, w->info.name, w->info.kind, w->info.act, shape, w->fwd_ms, w->bwd_ms, total,
                   100.0 * total / step_ms, 100.0 * cum / step_ms, w->host_fwd_ms, w->host_bwd_ms, w->info.describe);
        }
        const double loss_ms = m[2] + m[3] + m[4];
        printf("# sum over the %d nodes: forward %.3f + backward %.3f = %.3f ms (%.1f%% of the %.3f ms step); input "
               "copy %.3f, loss forward %.3f, loss backward %.3f ms; the rest, %.3f ms, is between events (launch "
               "gaps, the gradient's zeroing is outside the step)\n", n, sum_f, sum_b, sum_f + sum_b,
               100.0 * (sum_f + sum_b) / step_ms, step_ms, m[2], m[3], m[4], step_ms - (sum_f + sum_b) - loss_ms);
        printf("# by kind (ms forward + backward = total, share of the step, nodes):");
        for (int kind_row = 0; kind_row < n; kind_row++) {
            const char *kind = rows[kind_row].info.kind;
            int first = 1, count = 0;
            double f = 0.0, b = 0.0;
            for (int j = 0; j < n; j++) {
                if (strcmp(rows[j].info.kind, kind) != 0) continue;
                if (j < kind_row) first = 0;
                f += rows[j].fwd_ms;
                b += rows[j].bwd_ms;
                count++;
            }
            if (first) printf("%s %s %.3f + %.3f = %.3f (%.1f%%, %d)", kind_row ? ";" : "", kind, f, b, f + b,
                              100.0 * (f + b) / step_ms, count);
        }
        printf("\n");
        printf("PERLAYER model=%s batch=%d H=%d W=%d tf32=%d step_ms=%.3f step_unprofiled_ms=%.3f forward_ms=%.3f "
               "backward_ms=%.3f nodes_forward_ms=%.3f nodes_backward_ms=%.3f top=%s top_ms=%.3f\n", o->model, B, H, W,
               o->tf32, step_ms, plain_ms, m[0], m[1], sum_f, sum_b, rows[0].info.name,
               rows[0].fwd_ms + rows[0].bwd_ms);
        if (o->csv[0]) {
            FILE *f = fopen(o->csv, "w");
            if (!f) {
                fprintf(stderr, "bench_gpu: cannot write --csv %s\n", o->csv);
                rc = -2;
            } else {
                fprintf(f, "model,batch,rank,node,name,kind,act,H,W,C,fwd_ms,bwd_ms,total_ms,share,host_fwd_ms,"
                           "host_bwd_ms,describe\n");
                for (int j = 0; j < n; j++) {
                    const LayerRow *w = &rows[j];
                    fprintf(f, "%s,%d,%d,%d,", o->model, B, j + 1, w->index);
                    csv_field(f, w->info.name);
                    fprintf(f, ",%s,%s,%d,%d,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,", w->info.kind, w->info.act, w->info.H,
                            w->info.W, w->info.C, w->fwd_ms, w->bwd_ms, w->fwd_ms + w->bwd_ms,
                            (w->fwd_ms + w->bwd_ms) / step_ms, w->host_fwd_ms, w->host_bwd_ms);
                    csv_field(f, w->info.describe);
                    fputc('\n', f);
                }
                if (fclose(f) != 0) {
                    fprintf(stderr, "bench_gpu: cannot write --csv %s\n", o->csv);
                    rc = -2;
                }
            }
        }
    }
    cudaEventDestroy(ev[0]);
    cudaEventDestroy(ev[1]);
    model_acts_cuda_free(a);
    cudaFree(d_params);
    cudaFree(d_dparams);
    cudaFree(d_x);
    cudaFree(d_labels);
    cudaFreeHost(loss);
    cublasDestroy(cublas);
    cudnnDestroy(cudnn);
    cudaStreamDestroy(st);
    for (int k = 0; k < 7; k++) free(tot[k]);
    free(rows);
    free(tmp);
    free(prof);
    free(plain);
    free(h_bwd);
    free(h_fwd);
    free(t_bwd);
    free(t_fwd);
    free(labels);
    free(x);
    free(params);
    free(spec);
    return rc == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    Opts o = {"all", 128, 20, 5, 10, 0, 0, 0, 0, 0, ""};
    int max_towers = 4;
    Flag flags[] = {
        {"model", FLAG_STRING, &o.model, "mnist, cifar10 or all; with --per_layer one model of the trainer (mnist, "
                                         "cifar10, mobilenet_v2, vgg11, vgg16, resnet20, resnet50)"},
        {"batch", FLAG_INT, &o.batch, "examples per tower", FLAG_RANGE(1, 1 << 20, "[]", NULL)},
        {"max_towers", FLAG_INT, &max_towers, "tower counts 1, 2, 4, ... up to this", FLAG_RANGE(1, TOWER_MAX_TOWERS, "[]", NULL)},
        {"steps", FLAG_INT, &o.steps, "steps per timed run", FLAG_RANGE(1, 1000000, "[]", NULL)},
        {"reps", FLAG_INT, &o.reps, "timed runs (median reported)", FLAG_RANGE(1, 1000, "[]", NULL)},
        {"warmup", FLAG_INT, &o.warmup, "untimed steps first", FLAG_RANGE(0, 1000000, "[]", NULL)},
        {"device", FLAG_INT, &o.device, "the GPU every tower runs on", FLAG_RANGE(0, 4096, "[]", NULL)},
        {"tf32", FLAG_BOOL, &o.tf32, "let cuDNN and cuBLAS use TF32 tensor cores"},
        {"per_layer", FLAG_BOOL, &o.per_layer, "instead: one --model's GPU time node by node (--steps profiled steps "
                                               "after --warmup), a table sorted by time; no trainer"},
        {"image_size", FLAG_INT, &o.image_size, "--per_layer: input height and width (0: the model's default as tower "
                                                "bench trains it: cifar10 24, vgg16 and resnet50 224, others native)", FLAG_RANGE(0, 4096, "[]", "0: the model's default")},
        {"deterministic", FLAG_BOOL, &o.deterministic, "--per_layer: only cuDNN algorithms cuDNN calls deterministic "
                                                       "(tower train's --deterministic)"},
        {"csv", FLAG_STRING, &o.csv, "--per_layer: also write the table to this CSV file"},
    };
    const int n_flags = (int)(sizeof flags / sizeof flags[0]);
    char *pos[argc > 0 ? argc : 1]; /* flags_parse's rule: room for argc (was 64 entries: 65 arguments overran it) */
    int n_pos = 0;
    const int done = bench_parse_flags("bench_gpu", "[flags]", flags, n_flags, argc, argv, pos, &n_pos, 0);
    if (done >= 0) return done;
    if (o.per_layer && strcmp(o.model, "all") == 0) {
        fprintf(stderr, "bench_gpu: --per_layer needs one --model (mnist, cifar10, mobilenet_v2, vgg11, vgg16, "
                        "resnet20 or resnet50)\n");
        return 2;
    }
    char err[256];
    int n = tower_backend_cuda.device_count(err, sizeof err);
    if (n < 1) {
        fprintf(stderr, "bench_gpu: %s\n", err);
        return 1;
    }
    if (o.device < 0 || o.device >= n) {
        fprintf(stderr, "bench_gpu: --device %d, but %d GPU(s) are visible\n", o.device, n);
        return 1;
    }
    char desc[256];
    tower_backend_cuda.describe_device(o.device, desc, sizeof desc);
    if (o.per_layer) return per_layer(&o, desc) == 0 ? 0 : 1;
    printf("# %s; %s; %d warm-up steps, then %d runs of %d steps\n", desc, tower_backend_cuda.host_alloc(0).kind,
           o.warmup, o.reps, o.steps);
    const char *models[2] = {"mnist", "cifar10"};
    for (int m = 0; m < 2; m++) {
        if (strcmp(o.model, "all") && strcmp(o.model, models[m])) continue;
        for (int t = 1; t <= max_towers; t *= 2)
            if (bench(&o, models[m], t)) return 1;
    }
    return 0;
}
