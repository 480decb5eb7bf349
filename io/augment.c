/* augment.c — TensorFlow cifar10_input preprocessing (see augment.h).
 *
 * Where it sits: io/, inside the pipeline's workers.  uint8 images take two
 * passes over the crop window (integer channel statistics, then one
 * multiply-add per value, see augment_cifar_u8); float images take the op
 * by op path: crop + flip, brightness and contrast, standardization with a
 * two-pass variance.  Sums are kept in double.
 */
#include "io/augment.h"

#include <math.h>
#include <stdint.h>
#if defined(__SSE2__)
#define AUGMENT_STREAM 1
#define AUGMENT_STREAM_MIN_VALUES 65536 /* an image of at least 256 KB of floats */
#include <emmintrin.h>
#else
#define AUGMENT_STREAM 0
#endif

#include "io/rng.h"

#define AUGMENT_MAX_C 16

AugmentHparams augment_hparams_cifar10(void) {
    AugmentHparams hp = {63.0f, 0.2f, 1.8f, 1};
    return hp;
}

void augment_draw_train(AugmentParams *p, const AugmentHparams *hp, uint64_t seed, uint64_t example_index,
                        int in_H, int in_W, int out_H, int out_W) {
    uint64_t s = rng_seed(seed, RNG_STREAM_AUGMENT, example_index);
    p->crop_y = (int)rng_below(&s, (uint64_t)(in_H - out_H + 1));
    p->crop_x = (int)rng_below(&s, (uint64_t)(in_W - out_W + 1));
    float u_flip = rng_uniform01(&s);
    p->flip = hp->random_flip && u_flip < 0.5f;
    p->adjust_color = 1;
    p->brightness_delta = -hp->max_brightness_delta + 2.0f * hp->max_brightness_delta * rng_uniform01(&s);
    p->contrast_factor = hp->contrast_lower + (hp->contrast_upper - hp->contrast_lower) * rng_uniform01(&s);
}

void augment_params_eval(AugmentParams *p, int in_H, int in_W, int out_H, int out_W) {
    p->crop_y = (in_H - out_H) / 2;
    p->crop_x = (in_W - out_W) / 2;
    p->flip = 0;
    p->adjust_color = 0;
    p->brightness_delta = 0.0f;
    p->contrast_factor = 1.0f;
}

void per_image_standardization(float *x, size_t n) {
    if (n == 0) return;
    /* Eight independent partial sums so the loops vectorise. */
    double acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += x[i + (size_t)k];
    double sum = 0.0;
    for (; i < n; i++) sum += x[i];
    for (int k = 0; k < 8; k++) sum += acc[k];
    float mean = (float)(sum / (double)n);
    double sq[8] = {0};
    for (i = 0; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            double d = (double)x[i + (size_t)k] - (double)mean;
            sq[k] += d * d;
        }
    double ss = 0.0;
    for (; i < n; i++) ss += ((double)x[i] - (double)mean) * ((double)x[i] - (double)mean);
    for (int k = 0; k < 8; k++) ss += sq[k];
    float stddev = (float)sqrt(ss / (double)n);
    float min_stddev = (float)(1.0 / sqrt((double)n));
    float adj = stddev > min_stddev ? stddev : min_stddev;
    for (i = 0; i < n; i++) x[i] = (x[i] - mean) / adj;
}

/* Passes 2 and 3, shared by the uint8 and float paths; chan_sum (C) holds pass 1's sums. */
static void color_and_standardize(float *out, int out_H, int out_W, int C, const double *chan_sum,
                                  const AugmentParams *p) {
    size_t n_pixels = (size_t)out_H * (size_t)out_W, n = n_pixels * (size_t)C;
    if (p->adjust_color) {
        float mean_c[AUGMENT_MAX_C];
        float delta = p->brightness_delta, f = p->contrast_factor;
        for (int c = 0; c < C; c++) mean_c[c] = (float)(chan_sum[c] / (double)n_pixels) + delta;
        for (size_t i = 0; i < n_pixels; i++) {
            float *px = out + i * (size_t)C;
            for (int c = 0; c < C; c++) px[c] = (px[c] + delta - mean_c[c]) * f + mean_c[c];
        }
    }
    per_image_standardization(out, n);
}

/* uint8 images: the channel sums and sums of squares of the crop window are
 * exact integers, and brightness + contrast is an affine map per channel,
 * so the standardization's mean and variance follow in closed form:
 *   y_c = (x - m_c) * f + m_c + delta           (m_c, v_c: channel mean, variance)
 *   mean(y) = mean_c(m_c) + delta
 *   var(y)  = mean_c(f^2 v_c + (m_c - mean_c(m_c))^2)
 * and the output is one multiply-add per value: (x - center_c) * f / adj.
 * Same values as the op-by-op computation up to float rounding (~1e-6). */
void augment_cifar_u8(float *out, const uint8_t *in, int in_H, int in_W, int C, int out_H, int out_W,
                      const AugmentParams *p) {
    (void)in_H;
    uint64_t s1[AUGMENT_MAX_C] = {0}, s2[AUGMENT_MAX_C] = {0};
    size_t row_n = (size_t)out_W * (size_t)C;
    for (int y = 0; y < out_H; y++) {
        const uint8_t *row = in + ((size_t)(p->crop_y + y) * (size_t)in_W + (size_t)p->crop_x) * (size_t)C;
        for (size_t j = 0; j < row_n; j += (size_t)C)
            for (int c = 0; c < C; c++) {
                uint32_t v = row[j + (size_t)c];
                s1[c] += v;
                s2[c] += v * v;
            }
    }
    double n_pix = (double)out_H * (double)out_W, n = n_pix * (double)C;
    double f = p->adjust_color ? (double)p->contrast_factor : 1.0;
    double delta = p->adjust_color ? (double)p->brightness_delta : 0.0;
    double m[AUGMENT_MAX_C], m_bar = 0.0;
    for (int c = 0; c < C; c++) {
        m[c] = (double)s1[c] / n_pix;
        m_bar += m[c];
    }
    m_bar /= (double)C;
    double var = 0.0;
    for (int c = 0; c < C; c++) {
        double v_c = (double)s2[c] / n_pix - m[c] * m[c];
        if (v_c < 0.0) v_c = 0.0;
        var += f * f * v_c + (m[c] - m_bar) * (m[c] - m_bar);
    }
    var /= (double)C;
    double mu = m_bar + delta;
    double adj = sqrt(var), min_adj = 1.0 / sqrt(n);
    if (adj < min_adj) adj = min_adj;
    float scale = (float)(f / adj);
    float center[AUGMENT_MAX_C], offset[AUGMENT_MAX_C];
    for (int c = 0; c < C; c++) {
        /* y - mu = f * (x - center_c) with center_c = (mu - delta - m_c (1 - f)) / f */
        center[c] = f != 0.0 ? (float)((mu - delta - m[c] * (1.0 - f)) / f) : 0.0f;
        offset[c] = (float)((m[c] + delta - mu) / adj); /* the f == 0 case: a constant per channel */
    }
    for (int y = 0; y < out_H; y++) {
        const uint8_t *row = in + ((size_t)(p->crop_y + y) * (size_t)in_W + (size_t)p->crop_x) * (size_t)C;
        float *orow = out + (size_t)y * row_n;
        for (int x = 0; x < out_W; x++) {
            int sx = p->flip ? out_W - 1 - x : x;
            const uint8_t *src = row + (size_t)sx * (size_t)C;
            float *dst = orow + (size_t)x * (size_t)C;
            if (f != 0.0)
                for (int c = 0; c < C; c++) dst[c] = ((float)src[c] - center[c]) * scale;
            else
                for (int c = 0; c < C; c++) dst[c] = offset[c];
        }
    }
}

void augment_cifar_f32(float *out, const float *in_f, int in_H, int in_W, int C, int out_H, int out_W,
                       const AugmentParams *p) {
    (void)in_H;
    double chan_sum[AUGMENT_MAX_C] = {0};
    for (int y = 0; y < out_H; y++) {
        const float *row = in_f + ((size_t)(p->crop_y + y) * (size_t)in_W + (size_t)p->crop_x) * (size_t)C;
        float *orow = out + (size_t)y * (size_t)out_W * (size_t)C;
        for (int x = 0; x < out_W; x++) {
            int sx = p->flip ? out_W - 1 - x : x;
            const float *src = row + (size_t)sx * (size_t)C;
            float *dst = orow + (size_t)x * (size_t)C;
            for (int c = 0; c < C; c++) {
                dst[c] = src[c];
                chan_sum[c] += src[c];
            }
        }
    }
    color_and_standardize(out, out_H, out_W, C, chan_sum, p);
}

void augment_mnist_u8(float *out, const uint8_t *in, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = (float)in[i] / 255.0f - 0.5f;
}

void augment_none_u8(float *out, const uint8_t *in, size_t n) {
    size_t i = 0;
#if AUGMENT_STREAM
    /* A large image's batch is read by a tower long after and is past any cache (a batch of 64 at 224 x 224 is
     * 38 MB): stores that bypass the cache write it without first reading each line in, half the memory
     * traffic (+1% images/sec, bench/RESULTS.md).  A small image's batch may still be in cache when a tower
     * reads it: plain stores. */
    if (n >= AUGMENT_STREAM_MIN_VALUES) {
        for (; i < n && ((uintptr_t)(out + i) & 15); i++) out[i] = (float)in[i];
        const __m128i zero = _mm_setzero_si128();
        for (; i + 16 <= n; i += 16) {
            const __m128i b = _mm_loadu_si128((const __m128i *)(in + i));
            const __m128i lo = _mm_unpacklo_epi8(b, zero), hi = _mm_unpackhi_epi8(b, zero);
            _mm_stream_ps(out + i, _mm_cvtepi32_ps(_mm_unpacklo_epi16(lo, zero)));
            _mm_stream_ps(out + i + 4, _mm_cvtepi32_ps(_mm_unpackhi_epi16(lo, zero)));
            _mm_stream_ps(out + i + 8, _mm_cvtepi32_ps(_mm_unpacklo_epi16(hi, zero)));
            _mm_stream_ps(out + i + 12, _mm_cvtepi32_ps(_mm_unpackhi_epi16(hi, zero)));
        }
        _mm_sfence(); /* the streamed stores before the pipeline's hand-over */
    }
#endif
    for (; i < n; i++) out[i] = (float)in[i];
}
