/* test_gpu_profile.c — the GPU executor's per-node timing
 * (model_acts_cuda_profile and its reads, model/model_cuda.h), which
 * bench_gpu --per_layer prints: on mnist, cifar10 and resnet20 (shared
 * tensors, fused batch norms), one profiled training step gives every
 * node a finite forward and backward time >= 0, their sum is > 0 and
 * within the whole step's events (two events recorded here around forward
 * + backward), the passes' totals hold the nodes and the loss; the reads
 * refuse (-1) before any profiled step, with profiling off, for a backward
 * that has not followed the last profiled forward, and after a forward
 * that failed; profiling changes neither the loss nor the gradient; and
 * model_acts_cuda_node_info names every node (a conv's line names its
 * cuDNN algorithms).
 *
 * Where it sits: label `gpu`; skipped (77) without a GPU.
 * Tolerances: event times are read to about 0.5 us each, so a sum of k
 * intervals may exceed the interval holding them by k us; 2 us per
 * interval plus 10 us is allowed.  The loss of a profiled step equals the
 * unprofiled one within 1e-6 relative and the gradient within 1e-5 in norm
 * (the same algorithms on the same input; only a cuDNN algorithm cuDNN
 * calls non-deterministic could move them at all).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/model_cuda.h"
#include "tests/test_gpu_common.h"

typedef struct {
    cudaStream_t stream;
    cudnnHandle_t cudnn;
    cublasHandle_t cublas;
} Ctx;

/* One check: prints "  <what>: ok|FAIL", returns 1 on failure. */
static int expect(int ok, const char *what) {
    printf("  %-72s %s\n", what, ok ? "ok" : "FAIL");
    return !ok;
}

/* Zero the gradient, then forward + backward between ev[0] and ev[1];
 * waits.  Returns the loss; *step_ms the GPU time between the events. */
static float step(ModelActsCuda *a, float *loss_pinned, float *d_dparams, size_t n_params, const float *d_x,
                  const int32_t *d_labels, const float *d_params, int B, cudaEvent_t ev[2], float *step_ms) {
    cudaStream_t st = model_acts_cuda_stream(a);
    CUDA_CHECK(cudaMemsetAsync(d_dparams, 0, n_params * sizeof(float), st));
    CUDA_CHECK(cudaEventRecord(ev[0], st));
    model_forward_cuda_async(loss_pinned, NULL, a, d_x, d_labels, d_params, B);
    model_backward_cuda(d_dparams, a, d_params);
    CUDA_CHECK(cudaEventRecord(ev[1], st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaEventElapsedTime(step_ms, ev[0], ev[1]));
    return *loss_pinned;
}

static int test_model(const Ctx *x, const char *name, int H, int W, int C, uint64_t seed) {
    ModelSpec *spec = gpu_test_host(sizeof *spec);
    char err[512], what[256];
    if (model_spec_init(spec, name, H, W, C, 10, err, sizeof err)) {
        printf("model_spec_init: %s: FAIL\n", err);
        return 1;
    }
    const int B = 8;
    const size_t n_params = spec->n_params, ex_n = (size_t)H * W * C;
    printf("%s %dx%dx%d, batch %d\n", name, H, W, C, B);
    ModelActsCuda *a = model_acts_cuda_create(spec, B, x->cudnn, x->cublas, x->stream, 0, 0, err, sizeof err);
    if (!a) {
        printf("  model_acts_cuda_create: %s: FAIL\n", err);
        return 1;
    }
    float *params = gpu_test_host(sizeof(float) * n_params), *xs = gpu_test_host(sizeof(float) * B * ex_n);
    int32_t *labels = gpu_test_host(sizeof(int32_t) * B);
    float *g0 = gpu_test_host(sizeof(float) * n_params), *g1 = gpu_test_host(sizeof(float) * n_params);
    model_init_params(params, spec, seed);
    gpu_test_fill(xs, (size_t)B * ex_n, -1.0f, 1.0f);
    for (int b = 0; b < B; b++) labels[b] = (int32_t)(gpu_test_next() % 10);
    float *d_params = gpu_test_upload(params, sizeof(float) * n_params);
    float *d_x = gpu_test_upload(xs, sizeof(float) * B * ex_n);
    int32_t *d_labels = gpu_test_upload(labels, sizeof(int32_t) * B);
    float *d_dparams = gpu_test_dev(sizeof(float) * n_params);
    float *loss;
    CUDA_CHECK(cudaMallocHost((void **)&loss, sizeof(float)));
    cudaEvent_t ev[2];
    CUDA_CHECK(cudaEventCreate(&ev[0]));
    CUDA_CHECK(cudaEventCreate(&ev[1]));
    int fails = 0;

    /* The nodes' names. */
    const int n = model_acts_cuda_n_nodes(a);
    ModelNodeInfoCuda info;
    int named = 1, convs = 0, convs_described = 0;
    for (int i = 0; i < n; i++) {
        if (model_acts_cuda_node_info(a, i, &info) != 0 || !info.name[0] || !info.kind[0] || !info.act ||
            info.H < 1 || info.W < 1 || info.C < 1)
            named = 0;
        else if (strcmp(info.kind, "conv2d") == 0) {
            convs++;
            convs_described += strstr(info.describe, "forward") != NULL;
        }
    }
    snprintf(what, sizeof what, "%d nodes, each with a name, a kind and an output shape", n);
    fails += expect(n >= 1 && named, what);
    snprintf(what, sizeof what, "each of the %d conv2d nodes names its cuDNN algorithms", convs);
    fails += expect(convs >= 1 && convs_described == convs, what);
    fails += expect(model_acts_cuda_node_info(a, -1, &info) == -1 && model_acts_cuda_node_info(a, n, &info) == -1,
                    "node_info outside [0, n_nodes) refuses");

    float *fwd = gpu_test_host(sizeof(float) * n), *bwd = gpu_test_host(sizeof(float) * n);
    float *hfwd = gpu_test_host(sizeof(float) * n), *hbwd = gpu_test_host(sizeof(float) * n);
    ModelProfileTotalsCuda t;
    fails += expect(model_acts_cuda_profile_read(a, fwd, bwd) == -1 && model_acts_cuda_profile_totals(a, &t) == -1,
                    "profiling never on: the reads refuse");

    /* Unprofiled, then profiled: the same loss and gradient. */
    float step_ms = 0.0f;
    const float loss0 = step(a, loss, d_dparams, n_params, d_x, d_labels, d_params, B, ev, &step_ms);
    gpu_test_download(g0, d_dparams, sizeof(float) * n_params);
    fails += expect(model_acts_cuda_profile(a, 1, err, sizeof err) == 0 && model_acts_cuda_profile(a, 1, err, sizeof err) == 0,
                    "profile on, twice");
    fails += expect(model_acts_cuda_profile_read(a, fwd, bwd) == -1 && model_acts_cuda_profile_read(a, fwd, NULL) == -1 &&
                        model_acts_cuda_profile_read_host(a, hfwd, hbwd) == -1 && model_acts_cuda_profile_totals(a, &t) == -1,
                    "profile on, no step yet: the reads refuse");
    const float loss1 = step(a, loss, d_dparams, n_params, d_x, d_labels, d_params, B, ev, &step_ms);
    gpu_test_download(g1, d_dparams, sizeof(float) * n_params);
    snprintf(what, sizeof what, "profiled loss %.9g, unprofiled %.9g", (double)loss1, (double)loss0);
    fails += expect(isfinite(loss0) && fabsf(loss1 - loss0) <= 1e-6f * fabsf(loss0), what);
    const double rel = gpu_test_rel_norm(g1, g0, n_params);
    snprintf(what, sizeof what, "profiled gradient: ||profiled - unprofiled|| / ||unprofiled|| = %.3g", rel);
    fails += expect(rel <= 1e-5, what);

    /* The profiled step's times. */
    fails += expect(model_acts_cuda_profile_read(a, fwd, bwd) == 0, "read after a profiled step");
    int finite = 1;
    double sum_f = 0.0, sum_b = 0.0, sum_hf = 0.0, sum_hb = 0.0;
    for (int i = 0; i < n; i++) {
        finite &= isfinite(fwd[i]) && isfinite(bwd[i]) && fwd[i] >= 0.0f && bwd[i] >= 0.0f;
        sum_f += fwd[i];
        sum_b += bwd[i];
    }
    const double tol = 2e-3 * (2 * n + 6) + 1e-2;
    fails += expect(finite, "every node's forward and backward time is finite and >= 0");
    snprintf(what, sizeof what, "nodes' sum %.4f + %.4f ms > 0 and <= the step's %.4f ms (+ %.3f)", sum_f, sum_b,
           (double)step_ms, tol);
    fails += expect(sum_f + sum_b > 0.0 && sum_f > 0.0 && sum_b > 0.0 && sum_f + sum_b <= step_ms + tol, what);
    fails += expect(model_acts_cuda_profile_totals(a, &t) == 0, "totals after a profiled step");
    snprintf(what, sizeof what, "passes %.4f + %.4f ms hold the nodes and the loss (input %.4f, loss %.4f + %.4f)",
             (double)t.forward_ms, (double)t.backward_ms, (double)t.input_ms, (double)t.loss_forward_ms,
             (double)t.loss_backward_ms);
    fails += expect(t.forward_ms + t.backward_ms <= step_ms + tol &&
                        t.forward_ms + tol >= sum_f + t.input_ms + t.loss_forward_ms &&
                        t.backward_ms + tol >= sum_b + t.loss_backward_ms && t.input_ms >= 0.0f &&
                        t.loss_forward_ms >= 0.0f && t.loss_backward_ms >= 0.0f,
                    what);
    fails += expect(model_acts_cuda_profile_read_host(a, hfwd, hbwd) == 0, "host read after a profiled step");
    finite = 1;
    for (int i = 0; i < n; i++) {
        finite &= isfinite(hfwd[i]) && isfinite(hbwd[i]) && hfwd[i] >= 0.0f && hbwd[i] >= 0.0f;
        sum_hf += hfwd[i];
        sum_hb += hbwd[i];
    }
    snprintf(what, sizeof what, "host times finite, >= 0, within the passes' (%.4f <= %.4f, %.4f <= %.4f ms)", sum_hf,
             (double)t.host_forward_ms, sum_hb, (double)t.host_backward_ms);
    fails += expect(finite && sum_hf <= t.host_forward_ms + 1e-3 && sum_hb <= t.host_backward_ms + 1e-3, what);

    /* A profiled forward alone: its times, not the last backward's. */
    (void)model_forward_cuda(NULL, a, d_x, d_labels, d_params, B);
    fails += expect(model_acts_cuda_profile_read(a, fwd, NULL) == 0 && model_acts_cuda_profile_read(a, fwd, bwd) == -1 &&
                        model_acts_cuda_profile_read(a, NULL, bwd) == -1 && model_acts_cuda_profile_totals(a, &t) == -1,
                    "after a forward alone: forward reads, backward refuses");
    model_backward_cuda(d_dparams, a, d_params);
    fails += expect(model_acts_cuda_profile_read(a, fwd, bwd) == 0 && model_acts_cuda_profile_totals(a, &t) == 0,
                    "then its backward: both read");

    /* A failed forward (batch above the workspace's) counts as none. */
    printf("  (a batch of %d above the workspace's %d: one message on stderr expected)\n", B + 1, B);
    fflush(stdout);
    (void)model_forward_cuda(NULL, a, d_x, d_labels, d_params, B + 1);
    fails += expect(model_acts_cuda_profile_read(a, fwd, NULL) == -1 && model_acts_cuda_profile_totals(a, &t) == -1,
                    "after a failed forward: the reads refuse");

    /* Off: the reads refuse; on again: a fresh start, freed with the workspace. */
    fails += expect(model_acts_cuda_profile(a, 0, err, sizeof err) == 0 && model_acts_cuda_profile(a, 0, err, sizeof err) == 0,
                    "profile off, twice");
    fails += expect(model_acts_cuda_profile_read(a, fwd, bwd) == -1 && model_acts_cuda_profile_read(a, NULL, NULL) == -1 &&
                        model_acts_cuda_profile_read_host(a, hfwd, NULL) == -1 && model_acts_cuda_profile_totals(a, &t) == -1,
                    "profile off: the reads refuse");
    (void)step(a, loss, d_dparams, n_params, d_x, d_labels, d_params, B, ev, &step_ms);
    fails += expect(model_acts_cuda_profile(a, 1, err, sizeof err) == 0 && model_acts_cuda_profile_read(a, fwd, bwd) == -1,
                    "on again after an unprofiled step: nothing to read yet");
    (void)step(a, loss, d_dparams, n_params, d_x, d_labels, d_params, B, ev, &step_ms);
    fails += expect(model_acts_cuda_profile_read(a, fwd, bwd) == 0, "a profiled step reads (the workspace is freed with profiling on)");

    cudaEventDestroy(ev[0]);
    cudaEventDestroy(ev[1]);
    model_acts_cuda_free(a);
    cudaFreeHost(loss);
    cudaFree(d_params);
    cudaFree(d_x);
    cudaFree(d_labels);
    cudaFree(d_dparams);
    free(fwd);
    free(bwd);
    free(hfwd);
    free(hbwd);
    free(g0);
    free(g1);
    free(labels);
    free(xs);
    free(params);
    free(spec);
    return fails;
}

int main(void) {
    gpu_test_require_gpu();
    uint64_t seed = gpu_test_seed();
    Ctx x;
    CUDA_CHECK(cudaStreamCreate(&x.stream));
    CUDNN_CHECK(cudnnCreate(&x.cudnn));
    CUBLAS_CHECK(cublasCreate(&x.cublas));
    int fails = 0;
    fails += test_model(&x, "mnist", 28, 28, 1, seed);
    fails += test_model(&x, "cifar10", 24, 24, 3, seed + 1);
    fails += test_model(&x, "resnet20", 32, 32, 3, seed + 2);
    cublasDestroy(x.cublas);
    cudnnDestroy(x.cudnn);
    cudaStreamDestroy(x.stream);
    printf("%s: %d check(s) failed\n", fails ? "GPU profile FAILED" : "GPU profile ok", fails);
    return fails ? 1 : 0;
}
