/* conv_first.h — what model/conv_first.c (the public functions, layers.h) shares with the two builds of
 * model/conv_first.inc (8 and 16 channels a vector): the layer's padded geometry and the builds' entry points.
 *
 * Where it sits: model/, internal to the first-layer convolution; nothing else includes it.
 */
#ifndef TOWER_MODEL_CONV_FIRST_H
#define TOWER_MODEL_CONV_FIRST_H

#include "model/layers.h"

#include <stddef.h>

enum {
    CF_BLOCK = 32,                /* output channels a block: C_out a multiple of it */
    CONV_FIRST_MAX_PIX = 8,       /* the most output pixels a forward block holds (the padded row's margin) */
    CONV_FIRST_GROUP_IMAGES = 8,  /* images a backward-weights partial: fixed, so the sums do not depend on the
                                     team */
    CONV_FIRST_MAX_TAPS = 7 * 7 * 4
};

/* A layer as the kernels see it: its zero-padded input image (Hp, Wp, C_in) and each tap's offset in it. */
typedef struct {
    const Conv2d *c;
    int Hp, Wp;                          /* padded image: every window of every output pixel (and of
                                            CONV_FIRST_MAX_PIX - 1 more) inside it, and the image itself */
    int n_taps;                          /* KH * KW * C_in, in HWIO order: t = (i * KW + j) * C_in + c */
    int band_rows;                       /* backward weights: output rows a band (conv_first.inc) */
    long tap_off[CONV_FIRST_MAX_TAPS];   /* (i * Wp + j) * C_in + c */
} ConvFirstGeom;

/* Floats of one padded image, and of one group's partial gradient (dW (n_taps, C_out), then db (C_out)). */
static inline size_t conv_first_pad_n_floats(const ConvFirstGeom *g) {
    return ((size_t)g->Hp * g->Wp * g->c->C_in + 15) & ~(size_t)15;
}
static inline size_t conv_first_part_n_floats(const ConvFirstGeom *g) {
    return (((size_t)g->n_taps + 1) * g->c->C_out + 15) & ~(size_t)15;
}

/* One build's passes (conv_first.inc): scratch as conv_first_scratch_n_floats lays it out. */
typedef struct {
    void (*forward)(float *out, float *scratch, const float *inp, const float *weight, const float *bias,
                    const ConvFirstGeom *g, int B, int nt);
    void (*backward_weights)(float *dweight, float *dbias, float *scratch, const float *out, const float *dout,
                             const float *inp, const ConvFirstGeom *g, int B, int nt);
} ConvFirstFns;

extern const ConvFirstFns conv_first_8;  /* 8 channels a vector: AVX-512, AVX2 and the baseline (clones) */
extern const ConvFirstFns conv_first_16; /* 16, built for x86-64-v4 (AVX-512): only where the CPU has it */

#endif
