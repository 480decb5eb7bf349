/* test_gpu_tower_equivalence.c — the tower invariant on GPU towers: N GPU
 * towers of batch B, their gradients averaged by the parameter server,
 * update the variables as 1 GPU tower of batch N x B does, for N = 1..4
 * towers sharing one GPU (and, with several GPUs, spread over them), both
 * models, both optimizers, two steps so the momentum slots take part.
 *
 * Where it sits: label `gpu`; skipped (77) without a GPU.  It drives the
 * real parts as tests/test_tower_equivalence.c does on the CPU:
 * tower_group_step with tower_backend_cuda (threads, streams, pinned
 * copies), ps_average_grads and ps_apply_gradients, the parameter server's
 * block and the input batch both coming from the backend's pinned
 * allocator (checked page-locked), as the trainer's are, so that every
 * copy in and out is a pinned asynchronous one.
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

#include "ps/ps.h"
#include "tests/test_gpu_common.h"
#include "tower/tower.h"

/* Run `steps` steps of n_towers GPU towers of batch B on the same global
 * data, tower t on devices[t]; return the final variables (malloc'ed). */
static float *train(const ModelSpec *spec, const PsConfig *pc, int n_towers, const int *devices, int B, const float *x,
                    const int32_t *labels, int steps) {
    ParamServer *ps = ps_create(spec, n_towers, pc, tower_backend_cuda.host_alloc(devices[0]), 42);
    if (!ps) {
        fprintf(stderr, "ps_create failed\n");
        exit(1);
    }
    TowerGroupConfig tc;
    memset(&tc, 0, sizeof tc);
    tc.backend = &tower_backend_cuda;
    tc.n_towers = n_towers;
    tc.max_batch = B;
    for (int t = 0; t < n_towers; t++) {
        tc.devices[t] = devices[t];
        tc.n_threads[t] = 1;
    }
    char err[512];
    TowerGroup *g = tower_group_create(&tc, spec, ps->tower_grads, err, sizeof err);
    if (!g) {
        fprintf(stderr, "tower_group_create: %s\n", err);
        exit(1);
    }
    int offset[TOWER_MAX_TOWERS], n[TOWER_MAX_TOWERS];
    for (int t = 0; t < n_towers; t++) {
        offset[t] = t * B;
        n[t] = B;
    }
    for (int s = 0; s < steps; s++) {
        if (tower_group_step(g, ps->params, x, labels, offset, n, err, sizeof err) != 0) {
            fprintf(stderr, "tower_group_step: %s\n", err);
            exit(1);
        }
        for (int t = 0; t < n_towers; t++) {
            /* about ln(10) = 2.3 of cross-entropy, plus cifar10's weight decay (about 2.4 at init) */
            const float loss = g->towers[t].loss, acc = g->towers[t].accuracy;
            if (!isfinite(loss) || loss < 0.5f || loss > 20.0f || !(acc >= 0.0f && acc <= 1.0f)) {
                fprintf(stderr, "tower %d: loss %g, accuracy %g at step %d: expected a loss of a few units\n", t, loss,
                        acc, s);
                exit(1);
            }
        }
        ps_average_grads(ps);
        ps_apply_gradients(ps);
    }
    float *out = malloc(spec->n_params * sizeof(float));
    memcpy(out, ps->params, spec->n_params * sizeof(float));
    tower_group_free(g);
    ps_free(ps);
    return out;
}

/* Largest normwise relative difference over the variables, ||a - b|| / ||a||. */
static double max_var_rel_diff(const ModelSpec *spec, const float *a, const float *b, const char **worst) {
    double worst_rel = 0.0;
    for (int v = 0; v < spec->n_vars; v++) {
        const ModelVar *var = &spec->vars[v];
        double rel = gpu_test_rel_norm(b + var->offset, a + var->offset, var->n_floats);
        if (rel > worst_rel) {
            worst_rel = rel;
            *worst = var->name;
        }
    }
    return worst_rel;
}

/* p is page-locked host memory (cudaHostAlloc's). */
static int is_pinned(const void *p) {
    struct cudaPointerAttributes attr;
    return p && cudaPointerGetAttributes(&attr, p) == cudaSuccess && attr.type == cudaMemoryTypeHost;
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
    /* Fixed data, as the CPU test: the same inputs every run. */
    uint64_t state = 0x9e3779b97f4a7c15ull;
    const struct { const char *name; int H, W, C; } models[] = {{"mnist", 28, 28, 1}, {"cifar10", 24, 24, 3}};
    const int B = 3, steps = 2, max_towers = 4;
    for (int spread = 0; spread < (n_gpus > 1 ? 2 : 1); spread++) {
        int devices[TOWER_MAX_TOWERS], one[1] = {0};
        for (int t = 0; t < max_towers; t++) devices[t] = spread ? t % n_gpus : 0;
        for (int m = 0; m < 2; m++) {
            ModelSpec spec;
            if (model_spec_init(&spec, models[m].name, models[m].H, models[m].W, models[m].C, 10, err, sizeof err)) {
                fprintf(stderr, "model_spec_init: %s\n", err);
                return 1;
            }
            const size_t example_n = (size_t)spec.H * spec.W * spec.C, total = (size_t)max_towers * B;
            /* The batch in pinned memory, as the trainer's staging buffers: the copies in are pinned ones. */
            HostAlloc pinned = tower_backend_cuda.host_alloc(0);
            float *x = pinned.alloc(total * example_n * sizeof(float), pinned.ctx);
            int32_t *labels = pinned.alloc(total * sizeof(int32_t), pinned.ctx);
            if (!is_pinned(x) || !is_pinned(labels)) {
                printf("the input batch is not in page-locked memory (%s): FAIL\n", pinned.kind);
                return 1;
            }
            for (size_t i = 0; i < total * example_n; i++) {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                x[i] = (float)((state >> 40) * (1.0 / 16777216.0)) - 0.5f;
            }
            for (size_t i = 0; i < total; i++) {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                labels[i] = (int32_t)((state >> 40) % 10);
            }
            for (int o = 0; o < 2; o++) {
                PsConfig pc;
                ps_config_defaults(&pc);
                pc.opt.kind = o == 0 ? OPT_SGD : OPT_MOMENTUM;
                pc.lr.initial_lr = 0.1f;
                ParamServer *init = ps_create(&spec, 1, &pc, host_alloc_default(), 42);
                for (int n = 1; n <= max_towers; n++) {
                    float *towers = train(&spec, &pc, n, devices, B, x, labels, steps);
                    float *single = train(&spec, &pc, 1, one, n * B, x, labels, steps);
                    const char *worst = "", *moved_worst = "";
                    double rel = max_var_rel_diff(&spec, single, towers, &worst);
                    double moved = max_var_rel_diff(&spec, single, init->params, &moved_worst);
                    int ok = rel <= 1e-4 && moved > 1e-3;
                    printf("%-7s %-8s %d GPU tower(s)%s x batch %d vs 1 x %d: max relative difference %.3g (%s); "
                           "update moved the variables by %.3g (%s)  %s\n",
                           models[m].name, o == 0 ? "sgd" : "momentum", n, spread ? " over the GPUs" : " on GPU 0", B,
                           n * B, rel, worst, moved, moved_worst, ok ? "ok" : "FAIL");
                    failures += !ok;
                    free(towers);
                    free(single);
                }
                ps_free(init);
            }
            pinned.free(x, pinned.ctx);
            pinned.free(labels, pinned.ctx);
        }
    }
    printf("%s\n", failures ? "GPU tower equivalence FAILED" : "GPU tower equivalence holds");
    return failures ? 1 : 0;
}
