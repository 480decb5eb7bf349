/* test_gpu_ps_kernels.c — the GPU modes' arithmetic (ps/ps_gpu_kernels.h)
 * against the parameter server's own CPU functions, bit for bit:
 *   - ps_gpu_sum_div over N = 1, 2, 3, 4, 7 buffers against ps_average_grads
 *     of a ParamServer with N towers;
 *   - ps_gpu_optimizer_apply against optimizer_apply for sgd, momentum and
 *     Nesterov momentum, two updates in a row (the slots carry over);
 *   - ps_gpu_ema_apply against ema_apply at a num_updates-limited decay;
 * on the mnist model's 3,274,744 variables (more than one pass of the
 * kernels' grid), random values, the seed printed.  Bitwise, because the
 * kernels use round-to-nearest intrinsics that are never fused into
 * multiply-adds: any reordering or fusion of the formulas shows.  That the
 * comparison can fail is checked too: Nesterov on the GPU against plain
 * momentum on the CPU must differ.
 * Label gpu; skipped (77) without a GPU.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/optimizer.h"
#include "ps/ps.h"
#include "ps/ps_gpu_kernels.h"
#include "tests/test_gpu_common.h"

/* Number of elements whose bits differ, and prints one line. */
static size_t count_bit_diffs(const char *what, const float *gpu, const float *cpu, size_t n) {
    size_t bad = 0, first = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&gpu[i], &cpu[i], sizeof(float)) != 0) {
            if (!bad++) first = i;
            double d = fabs((double)gpu[i] - (double)cpu[i]);
            if (d > worst) worst = d;
        }
    }
    printf("  %-44s %9zu values, %zu differ in their bits (largest |diff| %.3g", what, n, bad, worst);
    if (bad) printf("; first at %zu: gpu %.9g, cpu %.9g", first, (double)gpu[first], (double)cpu[first]);
    printf(")\n");
    return bad;
}

static void *dev_copy(const float *host, size_t n) { return gpu_test_upload(host, n * sizeof(float)); }

static int check_average(const ModelSpec *spec) {
    int failures = 0;
    const size_t n = spec->n_params;
    const int counts[] = {1, 2, 3, 4, 7};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        const int n_towers = counts[c];
        PsConfig pc;
        ps_config_defaults(&pc);
        ParamServer *ps = ps_create(spec, n_towers, &pc, host_alloc_default(), 1);
        if (!ps) {
            fprintf(stderr, "ps_create failed\n");
            exit(1);
        }
        float *srcs_dev[PS_GPU_MAX_SRCS];
        for (int t = 0; t < n_towers; t++) {
            gpu_test_fill(ps->tower_grads[t], n, -1.0f, 1.0f);
            srcs_dev[t] = dev_copy(ps->tower_grads[t], n);
        }
        ps_average_grads(ps);
        float *out_dev = gpu_test_dev(n * sizeof(float));
        ps_gpu_sum_div(out_dev, (const float *const *)srcs_dev, n_towers, n, (float)n_towers, 0);
        float *got = gpu_test_host(n * sizeof(float));
        gpu_test_download(got, out_dev, n * sizeof(float));
        char what[64];
        snprintf(what, sizeof what, "mean of %d gradient(s) vs ps_average_grads", n_towers);
        failures += count_bit_diffs(what, got, ps->grads, n) != 0;
        /* in place over the first buffer, as the NCCL all-reduce sums a GPU's towers */
        ps_gpu_sum_div(srcs_dev[0], (const float *const *)srcs_dev, n_towers, n, (float)n_towers, 0);
        gpu_test_download(got, srcs_dev[0], n * sizeof(float));
        snprintf(what, sizeof what, "  the same, in place over buffer 0");
        failures += count_bit_diffs(what, got, ps->grads, n) != 0;
        for (int t = 0; t < n_towers; t++) CUDA_CHECK(cudaFree(srcs_dev[t]));
        CUDA_CHECK(cudaFree(out_dev));
        free(got);
        ps_free(ps);
    }
    return failures;
}

/* Two updates of `cfg` on the GPU and with optimizer_apply; returns the failures.
 * cpu_cfg: the CPU's configuration (the same as cfg, except for the can-fail check). */
static int check_optimizer(const char *name, const OptimizerConfig *cfg, const OptimizerConfig *cpu_cfg, size_t n,
                           int expect_equal) {
    float *params = gpu_test_host(n * sizeof(float)), *accum = gpu_test_host(n * sizeof(float));
    float *grads = gpu_test_host(n * sizeof(float));
    gpu_test_fill(params, n, -0.5f, 0.5f);
    gpu_test_fill(accum, n, -0.1f, 0.1f);
    float *params_dev = dev_copy(params, n), *accum_dev = dev_copy(accum, n), *grads_dev = gpu_test_dev(n * sizeof(float));
    const float lrs[2] = {0.1f, 0.0123f};
    for (int step = 0; step < 2; step++) {
        gpu_test_fill(grads, n, -2.0f, 2.0f);
        CUDA_CHECK(cudaMemcpy(grads_dev, grads, n * sizeof(float), cudaMemcpyHostToDevice));
        ps_gpu_optimizer_apply(params_dev, cfg->kind == OPT_SGD ? NULL : accum_dev, grads_dev, n, lrs[step], cfg, 0);
        optimizer_apply(params, cpu_cfg->kind == OPT_SGD ? NULL : accum, grads, n, lrs[step], cpu_cfg);
    }
    float *got = gpu_test_host(n * sizeof(float));
    char what[96];
    gpu_test_download(got, params_dev, n * sizeof(float));
    snprintf(what, sizeof what, "%s, 2 updates: variables", name);
    size_t bad = count_bit_diffs(what, got, params, n);
    if (cfg->kind != OPT_SGD) {
        gpu_test_download(got, accum_dev, n * sizeof(float));
        snprintf(what, sizeof what, "%s, 2 updates: momentum slots", name);
        bad += count_bit_diffs(what, got, accum, n);
    }
    int fail = expect_equal ? bad != 0 : bad == 0;
    if (!expect_equal) printf("  (the comparison must see a difference here: %s)\n", bad ? "it does" : "IT DOES NOT");
    free(params);
    free(accum);
    free(grads);
    free(got);
    CUDA_CHECK(cudaFree(params_dev));
    CUDA_CHECK(cudaFree(accum_dev));
    CUDA_CHECK(cudaFree(grads_dev));
    return fail;
}

static int check_ema(size_t n) {
    float *shadow = gpu_test_host(n * sizeof(float)), *params = gpu_test_host(n * sizeof(float));
    gpu_test_fill(shadow, n, -1.0f, 1.0f);
    gpu_test_fill(params, n, -1.0f, 1.0f);
    float *shadow_dev = dev_copy(shadow, n), *params_dev = dev_copy(params, n);
    const float decay = ema_decay_at(0.9999f, 7); /* (1 + 7) / (10 + 7): the num_updates rule */
    ps_gpu_ema_apply(shadow_dev, params_dev, n, decay, 0);
    ema_apply(shadow, params, n, decay);
    float *got = gpu_test_host(n * sizeof(float));
    gpu_test_download(got, shadow_dev, n * sizeof(float));
    size_t bad = count_bit_diffs("moving average, decay of step 7", got, shadow, n);
    free(shadow);
    free(params);
    free(got);
    CUDA_CHECK(cudaFree(shadow_dev));
    CUDA_CHECK(cudaFree(params_dev));
    return bad != 0;
}

int main(void) {
    gpu_test_require_gpu();
    gpu_test_seed();
    CUDA_CHECK(cudaSetDevice(0));
    ModelSpec spec;
    char err[256];
    if (model_spec_init(&spec, "mnist", 28, 28, 1, 10, err, sizeof err) != 0) {
        fprintf(stderr, "model_spec_init: %s\n", err);
        return 1;
    }
    int failures = check_average(&spec);
    OptimizerConfig sgd = {OPT_SGD, 0.0f, 0}, mom = {OPT_MOMENTUM, 0.9f, 0}, nes = {OPT_MOMENTUM, 0.9f, 1};
    failures += check_optimizer("sgd", &sgd, &sgd, spec.n_params, 1);
    failures += check_optimizer("momentum 0.9", &mom, &mom, spec.n_params, 1);
    failures += check_optimizer("Nesterov momentum 0.9", &nes, &nes, spec.n_params, 1);
    failures += check_optimizer("Nesterov (GPU) vs plain momentum (CPU)", &nes, &mom, spec.n_params, 0);
    failures += check_ema(spec.n_params);
    printf("%s\n", failures ? "GPU parameter-server kernels FAILED" : "GPU parameter-server kernels equal the CPU's, bit for bit");
    return failures ? 1 : 0;
}
