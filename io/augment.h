/* augment.h — image preprocessing as TensorFlow's cifar10_input does it.
 *
 * Where it sits: io/, run by the pipeline's workers on each example between
 * the shuffle buffer and the staging buffer (io -> shards).  Training
 * (distorted_inputs): random crop, random left-right flip, random brightness,
 * random contrast, per-image standardization; evaluation (inputs): central
 * crop (resize_image_with_crop_or_pad) and standardization; the mnist model:
 * x / 255 - 0.5.  All images are HWC; all math in float32 as TensorFlow's ops:
 *   brightness: x + delta
 *   contrast:   (x - mean_c) * factor + mean_c   (mean_c: channel mean over H, W)
 *   standardization: (x - mean) / max(stddev, 1 / sqrt(H * W * C))
 * The random draws are a pure function of (seed, example index), so the
 * output does not depend on which worker runs it.
 * What it does not do: no resizing, no padding (the crop must fit), no
 * hue/saturation.
 */
#ifndef TOWER_IO_AUGMENT_H
#define TOWER_IO_AUGMENT_H

#include <stddef.h>
#include <stdint.h>

/* The hyperparameters of the training distortions. */
typedef struct {
    float max_brightness_delta; /* delta uniform in [-max, max): TF cifar10 63 */
    float contrast_lower;       /* factor uniform in [lower, upper): TF cifar10 0.2 */
    float contrast_upper;       /* 1.8 */
    int random_flip;            /* 1: flip left-right with probability 1/2 */
} AugmentHparams;

/* TensorFlow's cifar10_input.distorted_inputs values (63, 0.2, 1.8, flip). */
AugmentHparams augment_hparams_cifar10(void);

/* One example's distortion, drawn or given. */
typedef struct {
    int crop_y, crop_x;       /* top-left corner of the out_H x out_W window */
    int flip;                 /* 1: mirror left-right after the crop */
    int adjust_color;         /* 0: skip brightness and contrast (evaluation) */
    float brightness_delta;   /* added to every value */
    float contrast_factor;    /* per-channel contrast scale */
} AugmentParams;

/* Draws TF's random distortion for example example_index under seed:
 * crop offsets uniform in [0, in - out], flip with probability 1/2,
 * delta and factor uniform in the hparams' ranges. */
void augment_draw_train(AugmentParams *p, const AugmentHparams *hp, uint64_t seed, uint64_t example_index,
                        int in_H, int in_W, int out_H, int out_W);

/* The evaluation "distortion": central crop offsets (in - out) / 2, no flip, no color. */
void augment_params_eval(AugmentParams *p, int in_H, int in_W, int out_H, int out_W);

/* out (out_H, out_W, C) = standardize(color(flip(crop(in)))) for a uint8
 * image in (in_H, in_W, C) or a float one in_f (in_H, in_W, C).  Overwrites
 * out; reads in only inside the crop window.  Never fails (the caller
 * guarantees crop_y + out_H <= in_H, crop_x + out_W <= in_W, C <= 16). */
void augment_cifar_u8(float *out, const uint8_t *in, int in_H, int in_W, int C, int out_H, int out_W,
                      const AugmentParams *p);
void augment_cifar_f32(float *out, const float *in_f, int in_H, int in_W, int C, int out_H, int out_W,
                       const AugmentParams *p);

/* In place: x (n_floats) = (x - mean) / max(stddev, 1 / sqrt(n_floats)). */
void per_image_standardization(float *x, size_t n_floats);

/* out (n_values) = in / 255 - 0.5 (the mnist model's scaling). */
void augment_mnist_u8(float *out, const uint8_t *in, size_t n_values);

/* out (n_values) = in (uint8 to float, no scaling: AUGMENT_NONE). */
void augment_none_u8(float *out, const uint8_t *in, size_t n_values);

#endif
