/* resize_oracle.h — imagefolder_resize against a plain two-pass oracle, on fresh random images.
 *
 * Where it sits: tests/; included by test_imagefolder.c (the path the loader picks on this machine: on
 * x86-64 with AVX2, the AVX2 clones) and by test_resize_paths.c, which is built with io/imagefolder.c
 * compiled for the other paths (IMAGEFOLDER_RESIZE_BASELINE: no clones, the SSE2 4-lane pass;
 * IMAGEFOLDER_RESIZE_SCALAR: plain C), so that every path is checked on every CI machine.
 * The oracle: PIL's weights (a triangle of half-width max(1, in/out), each output's taps normalised),
 * computed here in double and rounded to float, then the two passes written as plainly as they read:
 * each output value is the float sum over its row taps of (the float sum over its column taps, in
 * order, first tap first), +0.5, truncated, clamped.  imagefolder_resize's vectorised passes (4-lane
 * pixels, zero-weight taps that make every pixel's loop one length, two pixels per AVX2 register) must
 * give these bytes exactly.
 * What it does not do: compare with PIL (tests/interop/pil_interop.py does).
 */
#ifndef TOWER_TESTS_RESIZE_ORACLE_H
#define TOWER_TESTS_RESIZE_ORACLE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "io/imagefolder.h"

#define RESIZE_ORACLE_MAX_SIDE 64
#define RESIZE_ORACLE_MAX_TAPS (2 * (RESIZE_ORACLE_MAX_SIDE + 1) + 1)

/* Output o's taps of an in -> out axis: the first input (*first), the count (*count) and the weights w
 * (at most RESIZE_ORACLE_MAX_TAPS for sides up to RESIZE_ORACLE_MAX_SIDE). */
static void oracle_taps(int in, int out, int o, int *first, int *count, float *w) {
    double scale = (double)in / out, fs = scale < 1.0 ? 1.0 : scale, support = fs, center = (o + 0.5) * scale;
    int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
    lo = lo < 0 ? 0 : lo;
    hi = hi > in ? in : hi;
    int n = hi - lo, ksize = (int)ceil(support) * 2 + 1;
    n = n > ksize ? ksize : n;
    double k[RESIZE_ORACLE_MAX_TAPS], sum = 0.0;
    for (int i = 0; i < n; i++) {
        double t = fabs((i + lo - center + 0.5) / fs);
        k[i] = t < 1.0 ? 1.0 - t : 0.0;
        sum += k[i];
    }
    for (int i = 0; i < n; i++) w[i] = (float)(sum != 0.0 ? k[i] / sum : k[i]);
    *first = lo;
    *count = n;
}

/* dst (dH, dW, C) from src (sH, sW, C), the oracle's way. */
static void oracle_resize(uint8_t *dst, int dH, int dW, const uint8_t *src, int sH, int sW, int C) {
    float wy[RESIZE_ORACLE_MAX_TAPS], wx[RESIZE_ORACLE_MAX_TAPS];
    for (int y = 0; y < dH; y++) {
        int y0, ny;
        oracle_taps(sH, dH, y, &y0, &ny, wy);
        for (int x = 0; x < dW; x++) {
            int x0, nx;
            oracle_taps(sW, dW, x, &x0, &nx, wx);
            for (int c = 0; c < C; c++) {
                float acc = 0.0f;
                for (int i = 0; i < nx; i++) {
                    float col = 0.0f;
                    for (int j = 0; j < ny; j++) {
                        const float v = wy[j] * (float)src[((size_t)(y0 + j) * sW + (x0 + i)) * C + c];
                        col = j ? col + v : v;
                    }
                    acc = i ? acc + wx[i] * col : wx[i] * col;
                }
                int r = (int)(acc + 0.5f);
                dst[((size_t)y * dW + x) * C + c] = (uint8_t)(r < 0 ? 0 : r > 255 ? 255 : r);
            }
        }
    }
}

/* 400 resizes of random sizes (sides 1..64 either way: shrinks up to 64x, enlargements, equal sides), 1, 3
 * or 4 channels, random bytes (a quarter of the images black and white), seeded from the clock and printed;
 * each against the oracle, byte for byte.  Prints a line per differing case (the first 5) and returns the
 * number of failures (0 or 1). */
static int resize_oracle_check(const char *path_name) {
    uint32_t s = (uint32_t)time(NULL) ^ ((uint32_t)getpid() << 16);
    printf("resize oracle (%s): seed %u\n", path_name, s);
    const int channels[] = {1, 3, 4};
    int n_cases = 0, n_bad = 0;
    for (int t = 0; t < 400; t++) {
        s = s * 1664525u + 1013904223u;
        int sH = 1 + (int)(s >> 8) % RESIZE_ORACLE_MAX_SIDE, sW = 1 + (int)(s >> 16) % RESIZE_ORACLE_MAX_SIDE;
        s = s * 1664525u + 1013904223u;
        int dH = 1 + (int)(s >> 8) % RESIZE_ORACLE_MAX_SIDE, dW = 1 + (int)(s >> 16) % RESIZE_ORACLE_MAX_SIDE;
        int C = channels[(s >> 28) % 3];
        const size_t n_src = (size_t)sH * sW * C, n_dst = (size_t)dH * dW * C;
        uint8_t *src = malloc(n_src), *got = malloc(n_dst), *want = malloc(n_dst);
        if (!src || !got || !want) {
            fprintf(stderr, "resize oracle: out of memory\n");
            exit(1);
        }
        for (size_t i = 0; i < n_src; i++) {
            s = s * 1664525u + 1013904223u;
            src[i] = (uint8_t)(t % 4 == 0 ? ((s >> 24) & 1) * 255 : s >> 24);
        }
        int rc = imagefolder_resize(got, dH, dW, src, sH, sW, C);
        oracle_resize(want, dH, dW, src, sH, sW, C);
        n_cases++;
        if (rc != 0 || memcmp(got, want, n_dst)) {
            size_t i = 0;
            while (i + 1 < n_dst && got[i] == want[i]) i++;
            if (n_bad++ < 5)
                fprintf(stderr, "resize oracle (%s): %dx%dx%d -> %dx%d: rc %d, byte %zu is %d, the oracle's %d\n",
                        path_name, sH, sW, C, dH, dW, rc, i, got[i], want[i]);
        }
        free(src);
        free(got);
        free(want);
    }
    if (n_bad) fprintf(stderr, "resize oracle (%s): %d of %d resizes differ\n", path_name, n_bad, n_cases);
    return n_bad != 0;
}

#endif
