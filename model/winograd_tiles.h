/* winograd_tiles.h — the per-tile transforms of model/winograd.c's 4x4-output kinds as a table of functions,
 * one table per vector width (model/winograd_tiles.inc, compiled as winograd_tiles8.c and winograd_tiles16.c).
 *
 * Where it sits: model/, between winograd.c (the tiling, products and threads, which picks a table) and the
 * transforms.  What it does not do: choose the width (winograd.c, by conv_algo.h's conv_cpu_lanes).
 */
#ifndef TOWER_MODEL_WINOGRAD_TILES_H
#define TOWER_MODEL_WINOGRAD_TILES_H

#include <stddef.h>

/* The clones of the 8-lane transforms (winograd_tiles8.c) and of winograd.c's F(2x2, 3x3) loops: AVX-512
 * (x86-64-v4: its 32 vector registers hold more of a tile), AVX2 and the baseline, the loader picking one
 * (target_clones: an ifunc).  None under ThreadSanitizer (the TOWER_SANITIZE_THREAD build): the loader runs
 * an ifunc's resolver before the sanitizer's runtime starts, and an instrumented resolver crashes there (the
 * baseline clone is the same arithmetic); none off x86-64 ELF. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__ELF__) && !defined(TOWER_SANITIZE_THREAD)
#define WINO_CLONES_8 __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define WINO_CLONES_8
#endif

/* One kind's transforms: a = the input tile's side, m = 4 the output tile's, r the kernel's. */
typedef struct {
    /* U (a*a, C, K) from the weights (r, r, C, K), rows c0..c1 of each cell */
    void (*weights)(float *U, const float *w, int C, int K, int c0, int c1);
    /* one tile's V (a*a cells at v_stride) from its a*a input pixels (C floats each) */
    void (*input)(float *V, size_t v_stride, const float *const *p, int C);
    /* one tile's m x m outputs (K floats each, + bias, ReLU) from its M (a*a cells at m_stride) */
    void (*output)(float *const *y, const float *M, size_t m_stride, const float *bias, int relu, int K);
    /* one tile's dM (a*a cells at m_stride) from its m x m output gradients: output's adjoint */
    void (*output_grad)(float *dM, size_t m_stride, const float *const *p, int K);
    /* the weight gradient (r, r, C, K) from dU (a*a, C, K), rows c0..c1: weights' adjoint */
    void (*weights_grad)(float *dw, const float *dU, int C, int K, int c0, int c1);
} WinoTileFns;

typedef struct {
    WinoTileFns f4_3x3; /* F(4x4, 3x3): 6x6 tiles */
    WinoTileFns f4_5x5; /* F(4x4, 5x5): 8x8 tiles */
} WinoTiles;

extern const WinoTiles winograd_tiles_8;  /* 8 channels a vector: AVX-512, AVX2 and the baseline (clones) */
extern const WinoTiles winograd_tiles_16; /* 16 channels a vector, compiled for x86-64-v4 (AVX-512): call only
                                             where the CPU has it (winograd.c checks) */

#endif
