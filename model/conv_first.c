/* conv_first.c — a first layer's convolution computed directly (model/conv_first.inc): the public functions
 * (layers.h, "conv_first_*"), the padded geometry, the scratch, and the choice between the 8- and 16-lane
 * builds (conv_cpu_lanes, the same choice as model/winograd.c's).
 *
 * Where it sits: model/; conv2d_dnnl.c runs these for the passes conv_algo.c's conv_cpu_first names.
 * What it does not do: backward data, or allocate.
 */
#include "model/conv_first.h"

#include "model/conv_algo.h"

int conv_first_applies(const Conv2d *c) {
    return c->C_in >= 1 && c->C_in <= 4 && c->C_out >= CF_BLOCK && c->C_out % CF_BLOCK == 0 &&
           c->KH * c->KW * c->C_in <= CONV_FIRST_MAX_TAPS && c->OH >= 1 && c->OW >= 1;
}

/* g for c: the padded image holds every window of every output pixel (and of CONV_FIRST_MAX_PIX - 1 more, so a
 * forward block of up to that many pixels never reads past it) and the image at (pad_top, pad_left). */
static void geom_of(ConvFirstGeom *g, const Conv2d *c) {
    const int OWr = c->OW + CONV_FIRST_MAX_PIX - 1;
    const int h_win = (c->OH - 1) * c->stride_h + c->KH, w_win = (OWr - 1) * c->stride_w + c->KW;
    g->c = c;
    g->Hp = h_win > c->pad_top + c->H ? h_win : c->pad_top + c->H;
    g->Wp = w_win > c->pad_left + c->W ? w_win : c->pad_left + c->W;
    g->n_taps = c->KH * c->KW * c->C_in;
    const long row_n_bytes = 2L * c->OW * c->C_out * (long)sizeof(float); /* a row's output gradient and output */
    g->band_rows = (int)((128L << 10) / row_n_bytes);
    if (g->band_rows < 1) g->band_rows = 1;
    if (g->band_rows > c->OH) g->band_rows = c->OH;
    for (int i = 0; i < c->KH; i++)
        for (int j = 0; j < c->KW; j++)
            for (int ch = 0; ch < c->C_in; ch++)
                g->tap_off[(i * c->KW + j) * c->C_in + ch] = ((long)i * g->Wp + j) * c->C_in + ch;
}

size_t conv_first_scratch_n_floats(const Conv2d *c, int B, int n_threads) {
    if (!conv_first_applies(c)) return 0;
    ConvFirstGeom g;
    geom_of(&g, c);
    const size_t nt = (size_t)conv_cpu_team(n_threads);
    const size_t n_groups = (size_t)(B + CONV_FIRST_GROUP_IMAGES - 1) / CONV_FIRST_GROUP_IMAGES;
    /* a padded image per thread, then each group of images' partial gradient (conv_first.inc) */
    return nt * conv_first_pad_n_floats(&g) + n_groups * conv_first_part_n_floats(&g);
}

static const ConvFirstFns *fns(void) { return conv_cpu_lanes() == 16 ? &conv_first_16 : &conv_first_8; }

void conv_first_forward(float *out, float *scratch, const float *inp, const float *weight, const float *bias,
                        const Conv2d *c, int B, int n_threads) {
    if (B < 1) return;
    ConvFirstGeom g;
    geom_of(&g, c);
    fns()->forward(out, scratch, inp, weight, bias, &g, B, conv_cpu_team(n_threads));
}

void conv_first_backward_weights(float *dweight, float *dbias, float *scratch, const float *out,
                                 const float *dout, const float *inp, const Conv2d *c, int B, int n_threads) {
    ConvFirstGeom g;
    geom_of(&g, c);
    fns()->backward_weights(dweight, dbias, scratch, c->act == ACT_RELU ? out : NULL, dout, inp, &g,
                            B > 0 ? B : 0, conv_cpu_team(n_threads));
}
