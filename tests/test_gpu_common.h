/* test_gpu_common.h — helpers shared by the GPU tests (label `gpu`): skip
 * without a GPU, a printed random seed, device buffers, and the comparison
 * of a GPU result with the CPU reference.
 *
 * Where it sits: included by tests/test_gpu_*.c only.  Every GPU test calls
 * gpu_test_require_gpu() before anything else: with no driver or no device
 * it prints why and exits 77, which ctest counts as skipped, unless
 * TOWER_TEST_REQUIRE_GPU=1 (the GPU check, scripts/gpu-check.sh), which
 * turns every skip into a failure (exit 1): a GPU run must not pass by
 * running nothing.
 * What it does not do: time anything (benchmarks live in bench/).
 */
#ifndef TOWER_TESTS_TEST_GPU_COMMON_H
#define TOWER_TESTS_TEST_GPU_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "base/cuda_check.h"

/* TOWER_TEST_REQUIRE_GPU=1 (anything but empty or "0"): a skip is a failure. */
static inline int gpu_test_gpu_required(void) {
    const char *v = getenv("TOWER_TEST_REQUIRE_GPU");
    return v && *v && strcmp(v, "0") != 0;
}

/* Print "skipped: <why>" and exit 77, or, when TOWER_TEST_REQUIRE_GPU is
 * set, "FAIL: <why> (TOWER_TEST_REQUIRE_GPU=1)" and exit 1. */
static inline void gpu_test_skip(const char *why) {
    if (gpu_test_gpu_required()) {
        printf("FAIL: %s (TOWER_TEST_REQUIRE_GPU=1: a skip is a failure)\n", why);
        exit(1);
    }
    printf("skipped: %s\n", why);
    exit(77);
}

/* Exit 77 (skipped; 1 under TOWER_TEST_REQUIRE_GPU) unless a CUDA device is
 * usable.  Any cudaGetDeviceCount error counts as "no usable GPU" and is
 * named. */
static inline void gpu_test_require_gpu(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1) {
        char why[256];
        snprintf(why, sizeof why, "no usable GPU (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device visible");
        gpu_test_skip(why);
    }
}

/* ---- random numbers: splitmix64, seeded from TOWER_TEST_SEED, /dev/urandom or the clock ---- */

static uint64_t gpu_test_rng_state; /* read and written only through gpu_test_next and gpu_test_seed */

static inline uint64_t gpu_test_next(void) {
    uint64_t z = (gpu_test_rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Seed the generator and print the seed, so a failure can be replayed with
 * TOWER_TEST_SEED=<seed>.  Returns the seed. */
static inline uint64_t gpu_test_seed(void) {
    uint64_t seed = 0;
    const char *env = getenv("TOWER_TEST_SEED");
    if (env && *env) {
        seed = strtoull(env, NULL, 0);
    } else {
        FILE *f = fopen("/dev/urandom", "rb");
        if (!f || fread(&seed, sizeof seed, 1, f) != 1) seed = (uint64_t)time(NULL);
        if (f) fclose(f);
    }
    gpu_test_rng_state = seed;
    printf("seed %llu (replay with TOWER_TEST_SEED=%llu)\n", (unsigned long long)seed, (unsigned long long)seed);
    return seed;
}

/* Uniform in [lo, hi). */
static inline float gpu_test_uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)((gpu_test_next() >> 40) * (1.0 / 16777216.0));
}

static inline void gpu_test_fill(float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = gpu_test_uniform(lo, hi);
}

/* ---- buffers ---- */

static inline void *gpu_test_host(size_t n_bytes) {
    void *p = calloc(1, n_bytes ? n_bytes : 1);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", n_bytes);
        exit(1);
    }
    return p;
}

/* A device buffer filled with 0xff bytes (NaN as floats, -1 as int32), so
 * that a cell a kernel forgets to write shows up in the comparison. */
static inline void *gpu_test_dev(size_t n_bytes) {
    void *p = NULL;
    CUDA_CHECK(cudaMalloc(&p, n_bytes ? n_bytes : 1));
    CUDA_CHECK(cudaMemset(p, 0xff, n_bytes ? n_bytes : 1));
    return p;
}

static inline void *gpu_test_upload(const void *host, size_t n_bytes) {
    void *p = gpu_test_dev(n_bytes);
    CUDA_CHECK(cudaMemcpy(p, host, n_bytes, cudaMemcpyHostToDevice));
    return p;
}

/* Waits for the device, then copies n_bytes back. */
static inline void gpu_test_download(void *host, const void *dev, size_t n_bytes) {
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(host, dev, n_bytes, cudaMemcpyDeviceToHost));
}

/* ---- comparisons ---- */

static inline double gpu_test_max_abs(const float *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)x[i]) > m) m = fabs((double)x[i]);
    return m;
}

/* Every element must satisfy |got - ref| <= atol + rtol * |ref| (a NaN on
 * either side fails, unless both are NaN and nan_ok).  Prints one line with
 * the largest difference (and the first failing element) and returns 0 (ok)
 * or 1 (failed). */
static inline int gpu_test_check(const char *what, const float *got, const float *ref, size_t n, double atol, double rtol,
                          int nan_ok) {
    double worst = 0.0;
    size_t worst_i = 0, bad = 0, first_bad = 0;
    for (size_t i = 0; i < n; i++) {
        const double g = got[i], r = ref[i];
        int fail;
        if (isnan(g) || isnan(r)) {
            fail = !(nan_ok && isnan(g) && isnan(r));
        } else {
            const double d = fabs(g - r);
            if (d > worst) {
                worst = d;
                worst_i = i;
            }
            fail = d > atol + rtol * fabs(r);
        }
        if (fail && !bad++) first_bad = i;
    }
    printf("  %-44s %9zu values, largest |diff| %.3g (at %zu: gpu %.9g, cpu %.9g), tolerance %.2g + %.2g|cpu|: %s\n",
           what, n, worst, worst_i, n ? (double)got[worst_i] : 0.0, n ? (double)ref[worst_i] : 0.0, atol, rtol,
           bad ? "FAIL" : "ok");
    if (bad)
        printf("  %-44s %zu out of tolerance, the first at %zu: gpu %.9g, cpu %.9g\n", "", bad, first_bad,
               (double)got[first_bad], (double)ref[first_bad]);
    return bad ? 1 : 0;
}

/* gpu_test_check with atol = rel * max|ref|, rtol = rel: a tolerance on the
 * scale of the whole tensor, for sums whose terms cancel. */
static inline int gpu_test_check_scaled(const char *what, const float *got, const float *ref, size_t n, double rel) {
    return gpu_test_check(what, got, ref, n, rel * gpu_test_max_abs(ref, n) + 1e-30, rel, 0);
}

/* Exact equality of int32 arrays; prints one line, returns 0 or 1. */
static inline int gpu_test_check_i32(const char *what, const int32_t *got, const int32_t *ref, size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != ref[i] && !bad++) first = i;
    printf("  %-44s %9zu values, %zu differ%s", what, n, bad, bad ? "" : ": ok\n");
    if (bad) printf(" (first at %zu: gpu %d, cpu %d): FAIL\n", first, (int)got[first], (int)ref[first]);
    return bad ? 1 : 0;
}

/* ||got - ref|| / ||ref||. */
static inline double gpu_test_rel_norm(const float *got, const float *ref, size_t n) {
    double d2 = 0.0, r2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)ref[i];
        d2 += d * d;
        r2 += (double)ref[i] * ref[i];
    }
    if (isnan(d2)) return INFINITY;
    return sqrt(d2) / (sqrt(r2) + 1e-30);
}

#endif
