/* test_gpu_tower_equivalence.c — the tower invariant on GPU towers: N GPU
 * towers of batch B, their gradients averaged by the parameter server,
 * update the variables as 1 GPU tower of batch N x B does, for N = 1..4
 * towers sharing one GPU (and, with several GPUs, spread over them), both
 * models, both optimizers, two steps so the momentum slots take part.
 *
 * Where it sits: label `gpu`; skipped (77) without a GPU.  It drives the
 * trainer's own step as tests/test_tower_equivalence.c does on the CPU
 * (train/trainer.h, mode ps_cpu, through tests/modes_common.h): GPU towers
 * (threads, streams, pinned copies), ps_average_grads and
 * ps_apply_gradients, on one seeded synthetic global batch; the parameter
 * server's block and the input batch both come from the backend's pinned
 * allocator (checked page-locked), so every copy in and out is a pinned
 * asynchronous one.
 * Tolerance: 1e-4 relative (in norm, per variable) instead of the CPU
 * test's 1e-5: cuDNN may pick other algorithms for batch B than for N x B,
 * so the two runs round differently (about 1e-7 here), and now and then a
 * relu or max-pool decision within rounding of a tie routes one gradient
 * entry differently (about 1e-5 after two steps).  A lost, doubled or
 * misplaced shard moves the variables by 1e-3 or more.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/modes_common.h"
#include "tests/test_gpu_common.h"

/* p is page-locked host memory (cudaHostAlloc's). */
static int is_pinned(const void *p) {
    struct cudaPointerAttributes attr;
    return p && cudaPointerGetAttributes(&attr, p) == cudaSuccess && attr.type == cudaMemoryTypeHost;
}

/* Open, run `steps` steps checking every tower's loss and accuracy, collect, close. */
static RunResult train(const TrainerOptions *o, int steps) {
    Trainer *tr = modes_open_or_die(o);
    if (!is_pinned(tr->ps->params) || !is_pinned(tr->synthetic.x) || !is_pinned(tr->synthetic.labels)) {
        fprintf(stderr, "the variables or the input batch are not in page-locked memory (%s): FAIL\n", tr->alloc.kind);
        exit(1);
    }
    for (int s = 0; s < steps; s++) {
        modes_steps_or_die(tr, 1);
        for (int t = 0; t < tr->n_towers; t++) {
            /* about ln(10) = 2.3 of cross-entropy, plus cifar10's weight decay (about 2.4 at init) */
            const float loss = tr->tower_losses[t], acc = tr->tower_accuracy[t];
            if (!isfinite(loss) || loss < 0.5f || loss > 20.0f || !(acc >= 0.0f && acc <= 1.0f)) {
                fprintf(stderr, "tower %d: loss %g, accuracy %g at step %d: expected a loss of a few units\n", t, loss,
                        acc, s);
                exit(1);
            }
        }
    }
    RunResult r = modes_collect(tr);
    trainer_close(tr, NULL, 0);
    return r;
}

/* The backend's allocator must hand out pinned memory when a GPU is there. */
static int check_pinned(void) {
    HostAlloc a = tower_backend_cuda.host_alloc(0);
    void *p = a.alloc(1 << 20, a.ctx);
    struct cudaPointerAttributes attr;
    int ok = p && strstr(a.kind, "pinned") && cudaPointerGetAttributes(&attr, p) == cudaSuccess &&
             attr.type == cudaMemoryTypeHost && ((const unsigned char *)p)[12345] == 0;
    printf("host allocator: \"%s\", page-locked and zeroed: %s\n", a.kind, ok ? "ok" : "FAIL");
    if (p) a.free(p, a.ctx);
    return ok ? 0 : 1;
}

int main(void) {
    gpu_test_require_gpu();
    char err[256];
    int n_gpus = tower_backend_cuda.device_count(err, sizeof err);
    if (n_gpus < 1) gpu_test_skip(err);
    for (int d = 0; d < n_gpus; d++) {
        char desc[256];
        tower_backend_cuda.describe_device(d, desc, sizeof desc);
        printf("%s\n", desc);
    }
    int failures = check_pinned();
    const char *const models[] = {"mnist", "cifar10"};
    const char *const optimizers[] = {"sgd", "momentum"};
    const int B = 3, steps = 2, max_towers = 4;
    for (int spread = 0; spread < (n_gpus > 1 ? 2 : 1); spread++) {
        char all_gpus[256] = "0";
        for (int d = 1; spread && d < n_gpus && d < 32; d++)
            snprintf(all_gpus + strlen(all_gpus), sizeof all_gpus - strlen(all_gpus), ",%d", d);
        for (int m = 0; m < 2; m++) {
            for (int k = 0; k < 2; k++) {
                TrainerOptions o;
                modes_equivalence_options(&o, models[m], "gpu", optimizers[k], 0.1f, B);
                o.gpus = "0";
                RunResult init = modes_run(&o, 0);
                ModelSpec spec = modes_last_spec();
                for (int n = 1; n <= max_towers; n++) {
                    o.gpus = all_gpus; /* tower t on GPU t % n_gpus when spread, else all on GPU 0 */
                    o.num_towers = n;
                    o.batch_size = B;
                    RunResult towers = train(&o, steps);
                    o.gpus = "0";
                    o.num_towers = 1;
                    o.batch_size = n * B;
                    RunResult single = train(&o, steps);
                    const char *worst = "", *moved_worst = "";
                    double rel = modes_var_rel_diff(&spec, single.params, towers.params, 0, &worst);
                    double moved = modes_var_rel_diff(&spec, single.params, init.params, 0, &moved_worst);
                    int ok = rel <= 1e-4 && moved > 1e-3;
                    printf("%-7s %-8s %d GPU tower(s)%s x batch %d vs 1 x %d: max relative difference %.3g (%s); "
                           "update moved the variables by %.3g (%s)  %s\n",
                           models[m], optimizers[k], n, spread ? " over the GPUs" : " on GPU 0", B, n * B, rel, worst,
                           moved, moved_worst, ok ? "ok" : "FAIL");
                    failures += !ok;
                    modes_free_result(&towers);
                    modes_free_result(&single);
                }
                modes_free_result(&init);
            }
        }
    }
    printf("%s\n", failures ? "GPU tower equivalence FAILED" : "GPU tower equivalence holds");
    return failures ? 1 : 0;
}
