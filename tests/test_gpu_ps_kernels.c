/* test_gpu_ps_kernels.c — the GPU modes' arithmetic (ps/ps_gpu_kernels.h)
 * against the parameter server's own CPU functions, bit for bit:
 *   - ps_gpu_sum_div over N = 1, 2, 3, 4, 7 buffers against ps_average_grads
 *     of a ParamServer with N towers;
 *   - ps_gpu_optimizer_apply against optimizer_apply for every entry of
 *     the optimizer table (sgd, momentum, Nesterov, adam, adamw, rmsprop
 *     plain and centered with momentum), slots included, three updates in
 *     a row (the slots and Adam's beta powers carry over);
 *   - ps_gpu_ema_apply against ema_apply at a num_updates-limited decay;
 *   - the non-finite flags (ps_gpu_kernels.h): a NaN or an infinity placed
 *     at a random element (the last one too) of a gradient sets the mean's
 *     flag, finite data leaves it 0; an optimizer and the moving average
 *     given a set skip flag leave every variable, slot and shadow as they
 *     were; an update that overflows a variable sets the variables' flag;
 * on the mnist model's 3,274,744 variables (more than one pass of the
 * kernels' grid), random values, the seed printed.  Bitwise, because the
 * kernels use round-to-nearest intrinsics that are never fused into
 * multiply-adds: any reordering or fusion of the formulas shows.  That the
 * comparison can fail is checked too: Nesterov on the GPU against plain
 * momentum on the CPU must differ, and so must Adam against Adam with
 * another epsilon.
 * Label gpu; skipped (77) without a GPU.
 */
#include <math.h>
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
        ps_gpu_sum_div(out_dev, (const float *const *)srcs_dev, n_towers, n, (float)n_towers, NULL, 0);
        float *got = gpu_test_host(n * sizeof(float));
        gpu_test_download(got, out_dev, n * sizeof(float));
        char what[64];
        snprintf(what, sizeof what, "mean of %d gradient(s) vs ps_average_grads", n_towers);
        failures += count_bit_diffs(what, got, ps->grads, n) != 0;
        /* in place over the first buffer, as the NCCL all-reduce sums a GPU's towers */
        ps_gpu_sum_div(srcs_dev[0], (const float *const *)srcs_dev, n_towers, n, (float)n_towers, NULL, 0);
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

/* Three updates of `cfg` on the GPU (the table's prepare on the host, the
 * kernel, the table's finish) and with optimizer_apply; returns the failures.
 * cpu_cfg: the CPU's configuration (the same as cfg, except for the can-fail
 * checks).  The slots start at fresh random values in [0.05, 0.5] (positive,
 * so RMSProp's mean squares and Adam's second moments are as in training),
 * centered RMSProp's mean gradient within +-0.72 sqrt(mean squares). */
static int check_optimizer(const char *name, const OptimizerConfig *cfg, const OptimizerConfig *cpu_cfg, size_t n,
                           int expect_equal) {
    const OptSlot *info;
    const int n_slots = optimizer_slots(cfg, &info);
    const OptimizerI *opt = optimizer_i(cfg->kind);
    float *params = gpu_test_host(n * sizeof(float)), *grads = gpu_test_host(n * sizeof(float));
    float *slots[OPT_MAX_SLOTS] = {NULL}, *slots_dev[OPT_MAX_SLOTS] = {NULL};
    gpu_test_fill(params, n, -0.5f, 0.5f);
    float *params_dev = dev_copy(params, n), *grads_dev = gpu_test_dev(n * sizeof(float));
    for (int k = 0; k < n_slots; k++) {
        slots[k] = gpu_test_host(n * sizeof(float));
        gpu_test_fill(slots[k], n, 0.05f, 0.5f);
    }
    /* Centered RMSProp's mean gradient must satisfy mg^2 < ms, as training
     * keeps it (both are averages with one decay): otherwise ms - mg^2 + eps
     * is negative and both sides take the square root of it (a NaN, whose
     * sign bit the GPU and the CPU set differently). */
    if (cfg->kind == OPT_RMSPROP && cfg->centered)
        for (size_t i = 0; i < n; i++) slots[1][i] = (2.0f * slots[1][i] - 0.55f) * 1.6f * sqrtf(slots[0][i]);
    for (int k = 0; k < n_slots; k++) slots_dev[k] = dev_copy(slots[k], n);
    float scalars_cpu[OPT_MAX_SCALARS] = {0}, scalars_gpu[OPT_MAX_SCALARS] = {0};
    if (opt->init_scalars) opt->init_scalars(cfg, scalars_gpu);
    if (optimizer_i(cpu_cfg->kind)->init_scalars) optimizer_i(cpu_cfg->kind)->init_scalars(cpu_cfg, scalars_cpu);
    const float lrs[3] = {0.1f, 0.0123f, 0.001f};
    for (int step = 0; step < 3; step++) {
        gpu_test_fill(grads, n, -2.0f, 2.0f);
        CUDA_CHECK(cudaMemcpy(grads_dev, grads, n * sizeof(float), cudaMemcpyHostToDevice));
        OptStep st;
        opt->prepare(cfg, scalars_gpu, step, lrs[step], &st);
        ps_gpu_optimizer_apply(params_dev, slots_dev, grads_dev, n, &st, cfg->kind, NULL, NULL, 0);
        if (opt->finish) opt->finish(cfg, scalars_gpu);
        optimizer_apply(params, slots, scalars_cpu, grads, n, lrs[step], step, cpu_cfg);
    }
    float *got = gpu_test_host(n * sizeof(float));
    char what[128];
    gpu_test_download(got, params_dev, n * sizeof(float));
    snprintf(what, sizeof what, "%s, 3 updates: variables", name);
    size_t bad = count_bit_diffs(what, got, params, n);
    for (int k = 0; k < n_slots; k++) {
        gpu_test_download(got, slots_dev[k], n * sizeof(float));
        snprintf(what, sizeof what, "%s, 3 updates: slot %s", name, info[k].name);
        bad += count_bit_diffs(what, got, slots[k], n);
    }
    int fail = expect_equal ? bad != 0 : bad == 0;
    if (!expect_equal) printf("  (the comparison must see a difference here: %s)\n", bad ? "it does" : "IT DOES NOT");
    free(params);
    free(grads);
    free(got);
    for (int k = 0; k < n_slots; k++) {
        free(slots[k]);
        CUDA_CHECK(cudaFree(slots_dev[k]));
    }
    CUDA_CHECK(cudaFree(params_dev));
    CUDA_CHECK(cudaFree(grads_dev));
    return fail;
}

static int check_ema(size_t n) {
    float *shadow = gpu_test_host(n * sizeof(float)), *params = gpu_test_host(n * sizeof(float));
    gpu_test_fill(shadow, n, -1.0f, 1.0f);
    gpu_test_fill(params, n, -1.0f, 1.0f);
    float *shadow_dev = dev_copy(shadow, n), *params_dev = dev_copy(params, n);
    const float decay = ema_decay_at(0.9999f, 7); /* (1 + 7) / (10 + 7): the num_updates rule */
    ps_gpu_ema_apply(shadow_dev, params_dev, n, decay, NULL, 0);
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

/* The device int's value. */
static int flag_value(const int *flag_dev) {
    int v = -1;
    CUDA_CHECK(cudaMemcpy(&v, flag_dev, sizeof v, cudaMemcpyDeviceToHost));
    return v;
}

static int check_nonfinite_flags(size_t n) {
    int failures = 0;
    float *g = gpu_test_host(n * sizeof(float)), *p = gpu_test_host(n * sizeof(float));
    float *got = gpu_test_host(n * sizeof(float));
    gpu_test_fill(g, n, -1.0f, 1.0f);
    gpu_test_fill(p, n, -1.0f, 1.0f);
    float *g_dev = dev_copy(g, n), *p_dev = dev_copy(p, n), *mean_dev = gpu_test_dev(n * sizeof(float));
    int *flags = (int *)gpu_test_dev(PS_GPU_N_FLAGS * sizeof(int));
    const float *srcs[2] = {g_dev, g_dev};
    /* finite: the flag stays 0 */
    CUDA_CHECK(cudaMemset(flags, 0, PS_GPU_N_FLAGS * sizeof(int)));
    ps_gpu_sum_div(mean_dev, srcs, 2, n, 2.0f, flags + PS_GPU_FLAG_MEAN, 0);
    int v = flag_value(flags + PS_GPU_FLAG_MEAN);
    printf("  %-44s flag %d (expected 0)\n", "finite mean", v);
    failures += v != 0;
    /* a NaN, an infinity, at a random element and at the last one */
    const float poison[2] = {NAN, INFINITY};
    const size_t where[2] = {(size_t)rand() % n, n - 1};
    for (int k = 0; k < 2; k++)
        for (int w = 0; w < 2; w++) {
            CUDA_CHECK(cudaMemset(flags, 0, PS_GPU_N_FLAGS * sizeof(int)));
            CUDA_CHECK(cudaMemcpy(g_dev + where[w], &poison[k], sizeof(float), cudaMemcpyHostToDevice));
            ps_gpu_sum_div(mean_dev, srcs, 2, n, 2.0f, flags + PS_GPU_FLAG_MEAN, 0);
            CUDA_CHECK(cudaMemcpy(g_dev + where[w], &g[where[w]], sizeof(float), cudaMemcpyHostToDevice));
            v = flag_value(flags + PS_GPU_FLAG_MEAN);
            printf("  mean with %s at element %-12zu flag %d (expected 1)\n", k ? "inf" : "NaN", where[w], v);
            failures += v != 1;
        }
    /* a set skip flag: the optimizer and the moving average change nothing */
    OptimizerConfig mom;
    optimizer_config_defaults(&mom);
    mom.kind = OPT_MOMENTUM;
    float *slot_dev = gpu_test_dev(n * sizeof(float));
    CUDA_CHECK(cudaMemset(slot_dev, 0, n * sizeof(float)));
    float *slots_dev[OPT_MAX_SLOTS] = {slot_dev};
    OptStep st;
    optimizer_i(mom.kind)->prepare(&mom, NULL, 0, 0.1f, &st);
    int one = 1;
    CUDA_CHECK(cudaMemcpy(flags + PS_GPU_FLAG_MEAN, &one, sizeof one, cudaMemcpyHostToDevice));
    ps_gpu_optimizer_apply(p_dev, slots_dev, mean_dev, n, &st, mom.kind, flags + PS_GPU_FLAG_MEAN,
                           flags + PS_GPU_FLAG_VARS, 0);
    ps_gpu_ema_apply(p_dev, mean_dev, n, 0.5f, flags + PS_GPU_FLAG_MEAN, 0);
    gpu_test_download(got, p_dev, n * sizeof(float));
    failures += count_bit_diffs("skipped momentum + moving average: variables", got, p, n) != 0;
    /* an overflowing update: the variables' flag */
    const float huge = 3e38f;
    CUDA_CHECK(cudaMemset(flags, 0, PS_GPU_N_FLAGS * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(mean_dev + where[0], &huge, sizeof(float), cudaMemcpyHostToDevice));
    optimizer_i(mom.kind)->prepare(&mom, NULL, 0, -10.0f, &st); /* var -= g * -10: 3e39 overflows */
    ps_gpu_optimizer_apply(p_dev, slots_dev, mean_dev, n, &st, mom.kind, flags + PS_GPU_FLAG_MEAN,
                           flags + PS_GPU_FLAG_VARS, 0);
    v = flag_value(flags + PS_GPU_FLAG_VARS);
    printf("  %-44s flag %d (expected 1)\n", "momentum update overflowing one variable", v);
    failures += v != 1;
    free(g);
    free(p);
    free(got);
    CUDA_CHECK(cudaFree(g_dev));
    CUDA_CHECK(cudaFree(p_dev));
    CUDA_CHECK(cudaFree(mean_dev));
    CUDA_CHECK(cudaFree(slot_dev));
    CUDA_CHECK(cudaFree(flags));
    return failures;
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
    OptimizerConfig sgd, mom, nes, adam, adamw, rms, rms_c, adam_eps;
    optimizer_config_defaults(&sgd);
    sgd.kind = OPT_SGD;
    mom = nes = adam = adamw = rms = sgd;
    mom.kind = OPT_MOMENTUM, mom.nesterov = 0;
    nes.kind = OPT_MOMENTUM, nes.nesterov = 1;
    adam.kind = OPT_ADAM;
    adamw.kind = OPT_ADAMW, adamw.epsilon = 1e-7f, adamw.weight_decay = 0.05f;
    rms.kind = OPT_RMSPROP, rms.rms_momentum = 0.5f;
    rms_c = rms;
    rms_c.centered = 1;
    adam_eps = adam;
    adam_eps.epsilon = 1e-3f;
    failures += check_optimizer("sgd", &sgd, &sgd, spec.n_params, 1);
    failures += check_optimizer("momentum 0.9", &mom, &mom, spec.n_params, 1);
    failures += check_optimizer("Nesterov momentum 0.9", &nes, &nes, spec.n_params, 1);
    failures += check_optimizer("adam", &adam, &adam, spec.n_params, 1);
    failures += check_optimizer("adamw, weight decay 0.05", &adamw, &adamw, spec.n_params, 1);
    failures += check_optimizer("rmsprop, momentum 0.5", &rms, &rms, spec.n_params, 1);
    failures += check_optimizer("rmsprop centered, momentum 0.5", &rms_c, &rms_c, spec.n_params, 1);
    failures += check_optimizer("Nesterov (GPU) vs plain momentum (CPU)", &nes, &mom, spec.n_params, 0);
    failures += check_optimizer("adam (GPU) vs adam with epsilon 1e-3 (CPU)", &adam, &adam_eps, spec.n_params, 0);
    failures += check_ema(spec.n_params);
    failures += check_nonfinite_flags(spec.n_params);
    printf("%s\n", failures ? "GPU parameter-server kernels FAILED" : "GPU parameter-server kernels equal the CPU's, bit for bit");
    return failures ? 1 : 0;
}
