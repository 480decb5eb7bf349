/* image_write.h — test images written with libpng and libjpeg, for the
 * image-folder and encoded-image tests.
 *
 * Where it sits: tests/ only; each writer exits the test on failure.
 * What it does not do: no decoding (that is io/imagefolder.c, under test).
 */
#ifndef TOWER_TEST_IMAGE_WRITE_H
#define TOWER_TEST_IMAGE_WRITE_H

#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

/* format: PNG_FORMAT_RGB, _GRAY, _RGBA, or _RGB_COLORMAP (then colormap has n_colors RGB entries). */
static inline void write_png(const char *path, int H, int W, uint32_t format, const uint8_t *pixels, const uint8_t *colormap,
                      int n_colors) {
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = (png_uint_32)W;
    img.height = (png_uint_32)H;
    img.format = format;
    img.colormap_entries = (png_uint_32)n_colors;
    if (!png_image_write_to_file(&img, path, 0, pixels, 0, (void *)colormap)) {
        fprintf(stderr, "cannot write test image %s: %s\n", path, img.message);
        exit(1);
    }
}

/* pixels (H, W, C) to a JPEG: C 1 grey, 3 RGB, 4 CMYK as stored (Adobe's inverted inks, 255 = none; libjpeg
 * writes its Adobe marker), kept as CMYK or, with ycck, transformed to YCCK. */
static inline void write_jpeg_as(const char *path, int H, int W, int C, const uint8_t *pixels, int quality, int ycck) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)W;
    c.image_height = (JDIMENSION)H;
    c.input_components = C;
    c.in_color_space = C == 4 ? JCS_CMYK : C == 3 ? JCS_RGB : JCS_GRAYSCALE;
    jpeg_set_defaults(&c);
    if (ycck) jpeg_set_colorspace(&c, JCS_YCCK);
    jpeg_set_quality(&c, quality, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(pixels + (size_t)c.next_scanline * W * C);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    fclose(f);
}

/* px (H, W, 3): R = 6x, G = 8y, B = 20k: each pixel says where it is and which image (k) it is in (a crop or a
 * resize of it shows which pixels it took). */
static inline void fill_position_rgb(uint8_t *px, int H, int W, int k) {
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint8_t *q = px + ((size_t)y * W + x) * 3;
            q[0] = (uint8_t)(6 * x);
            q[1] = (uint8_t)(8 * y);
            q[2] = (uint8_t)(20 * k);
        }
}

/* pixels (H, W, 3) to an RGB PNG or a JPEG of quality (1-100). */
static inline void write_png_rgb(const char *path, int H, int W, const uint8_t *pixels) {
    write_png(path, H, W, PNG_FORMAT_RGB, pixels, NULL, 0);
}

static inline void write_jpeg_rgb(const char *path, int H, int W, const uint8_t *pixels, int quality) {
    write_jpeg_as(path, H, W, 3, pixels, quality, 0);
}

#endif
