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
 *   wake-up    from the go to the tower thread's start (tower_wake_sec)
 *   ps         ps_average_grads + ps_apply_gradients on the CPU
 * plus, measured alone on the same GPU, one H2D copy of the variables.
 * A line starting "RESULT" carries the figures for run_gpu_bench.sh.
 * What it does not do: read files (the input pipeline is io/'s, measured by
 * bench_pipeline) or check results (tests/test_gpu_*.c do).
 */
#include "bench/bench_util.h"
#include "base/flags.h"
#include "train/trainer.h"

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
    double *ph[5];
    for (int p = 0; p < 5; p++) ph[p] = calloc(n_steps, sizeof(double));
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
        double ms[5];
        for (int p = 0; p < 5; p++) ms[p] = 1e3 * median(ph[p], n_steps);
        const double h2d = 1e3 * h2d_alone(tr.ps->params, tr.spec.n_params * sizeof(float), o->device);
        printf("%-8s %d tower(s) x %d on GPU %d%s: %9.0f img/s (min-max %.0f-%.0f)  step %.2f ms: copy in %.2f, "
               "compute %.2f, copy out %.2f, wake-up %.2f, ps %.2f; variables H2D alone %.2f ms, loss %.3f\n",
               name, n_towers, B, o->device, o->tf32 ? " (TF32)" : "", img_s, lo, hi, 1e3 * total / img_s, ms[0], ms[1],
               ms[2], ms[3], ms[4], h2d, tr.tower_losses[0]);
        printf("RESULT framework=tower model=%s towers=%d batch=%d img_s=%.1f img_s_min=%.1f img_s_max=%.1f "
               "copy_in_ms=%.3f compute_ms=%.3f copy_out_ms=%.3f wake_ms=%.3f ps_ms=%.3f h2d_vars_ms=%.3f tf32=%d\n",
               name, n_towers, B, img_s, lo, hi, ms[0], ms[1], ms[2], ms[3], ms[4], h2d, o->tf32);
    }
    for (int p = 0; p < 5; p++) free(ph[p]);
    free(rate);
    trainer_close(&tr, NULL, 0);
    return rc == 1 ? 0 : -1;
}

int main(int argc, char **argv) {
    Opts o = {"all", 128, 20, 5, 10, 0, 0};
    int max_towers = 4;
    Flag flags[] = {
        {"model", FLAG_STRING, &o.model, "mnist, cifar10 or all"},
        {"batch", FLAG_INT, &o.batch, "examples per tower"},
        {"max_towers", FLAG_INT, &max_towers, "tower counts 1, 2, 4, ... up to this"},
        {"steps", FLAG_INT, &o.steps, "steps per timed run"},
        {"reps", FLAG_INT, &o.reps, "timed runs (median reported)"},
        {"warmup", FLAG_INT, &o.warmup, "untimed steps first"},
        {"device", FLAG_INT, &o.device, "the GPU every tower runs on"},
        {"tf32", FLAG_BOOL, &o.tf32, "let cuDNN and cuBLAS use TF32 tensor cores"},
    };
    const int n_flags = (int)(sizeof flags / sizeof flags[0]);
    char *pos[64];
    int n_pos = 0;
    int p = flags_parse(flags, n_flags, argc, argv, pos, &n_pos);
    if (p == 1) return 0;
    if (p < 0 || n_pos > 0 || o.batch < 1 || o.steps < 1 || o.reps < 1 || o.warmup < 0 || max_towers < 1 ||
        max_towers > TOWER_MAX_TOWERS) {
        flags_print_usage("bench_gpu", "", flags, n_flags);
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
