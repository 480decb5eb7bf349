/* imagefolder.c — DIR/<class>/FILE.png|jpg|jpeg to uint8 images (see imagefolder.h).
 *
 * Where it sits: io/, a ConvertSource for convert_run.  Opening lists the
 * folders; next() decodes one file at a time (libpng and libjpeg-turbo,
 * each with a longjmp error handler so a bad file never exits the process), converts the channels and resamples.  Memory: the file list
 * plus one decoded image and one output image.
 * What it does not do: no recursion, no threads, no writing of TFRecords
 * (convert_run does that).
 */
#include "io/imagefolder.h"
#include "base/escape.h"
#include "base/file.h"
#include "io/pipeline.h"
#include "io/rng.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <jerror.h>
/* The resizer's code paths (tests/test_resize_paths.c builds this file with each): by default the AVX2 clones
 * where the compiler and loader can make them, the SSE2 passes, plain C; IMAGEFOLDER_RESIZE_BASELINE drops the
 * AVX2 clones, IMAGEFOLDER_RESIZE_SCALAR the SSE2 passes as well. */
#ifdef IMAGEFOLDER_RESIZE_SCALAR
#define IMAGEFOLDER_RESIZE_BASELINE
#endif
#if defined(__SSE2__) && !defined(IMAGEFOLDER_RESIZE_SCALAR)
#define RESIZE_SSE2 1
#include <emmintrin.h>
#else
#define RESIZE_SSE2 0
#endif

int imagefolder_short_side(int S, double central_fraction) {
    if (!(central_fraction > 0.0 && central_fraction < 1.0)) return 0;
    const double r = floor((double)S / central_fraction + 1e-9);
    return r > 65535.0 ? 65535 : (int)r;
}

int imagefolder_short_side_valid(ImageFolderResizeMode mode, int short_side, int S) {
    return short_side == 0 || (mode == IMAGEFOLDER_CENTER_CROP && short_side >= S && short_side <= 65535);
}

int imagefolder_resize_mode_from_name(const char *name) {
    static const char *const names[] = {[IMAGEFOLDER_RESIZE] = "resize", [IMAGEFOLDER_CENTER_CROP] = "center_crop",
                                        [IMAGEFOLDER_RANDOM_CROP] = "random_crop"};
    for (int m = 0; m < (int)(sizeof names / sizeof names[0]); m++)
        if (name && !strcmp(name, names[m])) return m;
    return -1;
}

int imagefolder_check_data_flags(int image_folder, int encoded, const char *compression, const char *image_key,
                                 const char *label_key, const char *labels, const char *resize_mode, char *err,
                                 size_t err_n_bytes) {
    if (image_folder) {
        const char *tfr_only = strcmp(compression, "auto")      ? "--compression"
                               : strcmp(image_key, "image_raw") ? "--image_key"
                               : strcmp(label_key, "label")     ? "--label_key"
                                                                : NULL;
        if (tfr_only) {
            snprintf(err, err_n_bytes, "%s applies to TFRecord data (an image folder's images and labels come from "
                     "its files and class folders)", tfr_only);
            return -1;
        }
        return 0;
    }
    if (labels[0]) {
        snprintf(err, err_n_bytes, "--labels applies to an image folder as --data (TFRecord data carries its "
                 "labels.txt beside the files)");
        return -1;
    }
    if (!encoded && strcmp(resize_mode, "resize")) {
        snprintf(err, err_n_bytes, "--resize_mode %s applies to an image folder or encoded TFRecord images as --data "
                 "(raw TFRecord images are used at their stored size)", resize_mode);
        return -1;
    }
    return 0;
}

int imagefolder_check_max_pixels(size_t max_image_pixels, int H, int W, char *err, size_t err_n_bytes) {
    const size_t floor_pixels = 2 * (size_t)H * (size_t)W;
    if (max_image_pixels >= floor_pixels) return 0;
    snprintf(err, err_n_bytes, "--max_image_pixels %zu is below twice the %d x %d images the model takes (%zu)",
             max_image_pixels, H, W, floor_pixels);
    return -1;
}

void imagefolder_config_defaults(ImageFolderConfig *c) {
    memset(c, 0, sizeof *c);
    c->image_size = 32;
    c->channels = 3;
    c->mode = IMAGEFOLDER_RESIZE;
}

/* ---------------------------------------------------------------- decoding */

/* Grows *buf (malloc'ed, *n_bytes long) to at least need bytes, keeping nothing: the old buffer goes first, so
 * that one is held at a time (what the pipeline's memory bound counts).  0, or -1 when memory is short (*buf
 * NULL, *n_bytes 0). */
static int grow(uint8_t **buf, size_t *n_bytes, size_t need) {
    if (need <= *n_bytes) return 0;
    free(*buf);
    *buf = malloc(need);
    *n_bytes = *buf ? need : 0;
    return *buf ? 0 : -1;
}

typedef struct {
    jmp_buf jump;
    char msg[256];
} PngError;

static void png_on_error(png_structp png, png_const_charp msg) {
    PngError *e = png_get_error_ptr(png);
    snprintf(e->msg, sizeof e->msg, "%s", msg);
    longjmp(e->jump, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

/* The file's bytes as libpng's input (decode_png without a FILE). */
typedef struct {
    const uint8_t *data; /* (n_bytes) */
    size_t n_bytes, at;
} PngMemory;

/* Reads n bytes or fails as libpng's own stdio reader does at the end of a file ("Read Error"). */
static void png_read_memory(png_structp png, png_bytep out, size_t n) {
    PngMemory *m = png_get_io_ptr(png);
    if (n > m->n_bytes - m->at) png_error(png, "Read Error");
    memcpy(out, m->data + m->at, n);
    m->at += n;
}

/* " (at most N pixels are read...)": the bound an image was refused by, and where the caller's bound is below
 * IMAGEFOLDER_MAX_PIXELS (the input pipeline's, --max_image_pixels of train and eval) how it is raised.  A static
 * buffer per thread. */
static const char *pixels_limit(size_t max_pixels) {
    static _Thread_local char text[160];
    if (max_pixels < IMAGEFOLDER_MAX_PIXELS)
        snprintf(text, sizeof text, " (at most %zu pixels are read: --max_image_pixels raises it, up to %zu)", max_pixels,
                 IMAGEFOLDER_MAX_PIXELS);
    else snprintf(text, sizeof text, " (at most %zu pixels are read)", max_pixels);
    return text;
}

/* PNG to RGB, from the open file f, or from the file's bytes (data,
 * n_bytes) when f is NULL, with libpng's low-level reader and only the
 * format transforms (no gamma or colour-space conversion, as PIL): 16-bit
 * keeps the high byte, palettes and 1/2/4-bit grey expand, grey becomes
 * RGB, alpha is dropped.  At most max_pixels pixels.  *pixels:
 * scr->pixels (grown, kept by scr) when scr is given, else malloc'ed for
 * the caller.  Closes nothing. */
static int decode_png(const char *path, FILE *f, const uint8_t *data, size_t n_bytes, size_t max_pixels,
                      ImageFolderScratch *scr, uint8_t **pixels, int *H, int *W, char *err, size_t err_n) {
    uint8_t *volatile buf = NULL; /* malloc'ed here (no scr) */
    PngMemory mem = {data, n_bytes, 0};
    PngError e;
    memset(&e, 0, sizeof e);
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &e, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        snprintf(err, err_n, "%s: out of memory for the PNG reader", path);
        png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
        return -1;
    }
    if (setjmp(e.jump)) {
        snprintf(err, err_n, "%s: PNG does not decode: %s", path, e.msg);
        png_destroy_read_struct(&png, &info, NULL);
        free(buf);
        return -1;
    }
    if (f) png_init_io(png, f);
    else png_set_read_fn(png, &mem, png_read_memory);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
    if (w == 0 || h == 0 || (size_t)w * h > max_pixels) {
        snprintf(err, err_n, "%s: PNG of %u x %u pixels%s", path, (unsigned)w, (unsigned)h,
                 w == 0 || h == 0 ? " (an empty image)" : pixels_limit(max_pixels));
        png_destroy_read_struct(&png, &info, NULL);
        return -1;
    }
    if (depth == 16) png_set_strip_16(png);
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
    /* A palette with a tRNS chunk expands to RGBA: drop that alpha too. */
    if ((color & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS)) png_set_strip_alpha(png);
    int n_passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != (size_t)w * 3) {
        snprintf(err, err_n, "%s: PNG of colour type %d, depth %d does not convert to RGB", path, color, depth);
        png_destroy_read_struct(&png, &info, NULL);
        return -1;
    }
    uint8_t *out;
    if (scr) {
        out = grow(&scr->pixels, &scr->pixels_n_bytes, (size_t)w * h * 3) == 0 ? scr->pixels : NULL;
    } else {
        out = buf = malloc((size_t)w * h * 3);
    }
    if (!out) {
        snprintf(err, err_n, "%s: out of memory for a %u x %u image", path, (unsigned)w, (unsigned)h);
        png_destroy_read_struct(&png, &info, NULL);
        return -1;
    }
    /* No png_read_end: the chunks after the image data hold no pixels, and a
     * damaged one does not make PIL or libpng's simplified reader refuse the
     * image, so it does not make this decoder refuse it either. */
    /* Row by row (each pass of an interlaced image over every row), so that no row-pointer array of the
     * image's height is needed: the decoder's memory is the image and libpng's row buffers. */
    for (int pass = 0; pass < n_passes; pass++)
        for (png_uint_32 y = 0; y < h; y++) png_read_row(png, out + (size_t)y * w * 3, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    *H = (int)h;
    *W = (int)w;
    *pixels = out;
    return 0;
}

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    int truncated;            /* libjpeg reached the end of the file inside the image */
    char msg[JMSG_LENGTH_MAX];
    char damaged[JMSG_LENGTH_MAX]; /* libjpeg's first warning of damaged scan data, or "" */
} JpegError;

static void jpeg_on_error(j_common_ptr cinfo) {
    JpegError *e = (JpegError *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(e->jump, 1);
}

/* Warnings (level -1) are not printed here.  A premature end of the file is remembered (the image is refused);
 * so is the first warning that the scan data is damaged (a marker where data should be, a bad Huffman or
 * arithmetic code, a lost restart marker): libjpeg fills in what it could not decode and the image is kept, as
 * TensorFlow's decode_jpeg and PIL keep it, with a warning line for the caller.  The other warnings (bytes
 * after the scan data, an unknown JFIF revision or Adobe transform, odd progression parameters) leave the
 * picture whole. */
static void jpeg_on_message(j_common_ptr cinfo, int level) {
    JpegError *e = (JpegError *)cinfo->err;
    if (level >= 0) return;
    const int code = cinfo->err->msg_code;
    if (code == JWRN_JPEG_EOF) e->truncated = 1;
    else if (!e->damaged[0] && (code == JWRN_HIT_MARKER || code == JWRN_HUFF_BAD_CODE || code == JWRN_ARITH_BAD_CODE ||
                                code == JWRN_MUST_RESYNC))
        (*cinfo->err->format_message)(cinfo, e->damaged);
}

/* The size the image is scaled to before the centre crop (both sides S for
 * IMAGEFOLDER_RESIZE; torchvision's Resize(R) for IMAGEFOLDER_CENTER_CROP,
 * R = short_side, or S where short_side is 0). */
static void target_size(int S, ImageFolderResizeMode mode, int short_side, int H, int W, int *tH, int *tW) {
    *tH = *tW = S;
    if (mode == IMAGEFOLDER_CENTER_CROP) {
        /* torchvision Resize(R): the shorter side becomes R, the longer int(R * long / short). */
        const int R = short_side > S ? short_side : S;
        /* In double and capped: R x 530000 / 1 wrapped an int to INT_MIN, which the floor below made R, so a
         * 1 x 530000 image was resized whole instead of refused (scale_check bounds the capped size). */
        const double longer = H <= W ? (double)R * W / H : (double)R * H / W;
        const int t = longer > INT_MAX ? INT_MAX : (int)longer;
        *tH = *tW = R;
        if (H <= W) *tW = t;
        else *tH = t;
        if (*tW < R) *tW = R;
        if (*tH < R) *tH = R;
    }
}

/* Whether an orig_W x orig_H image, decoded to W x H, may be resampled to tW x tH within max_pixels: the
 * resampled image is tH x tW pixels, the first pass's work tH x W; a side over 65535 pixels is not resampled.
 * 0, or -1 with one line in why (path first). */
static int scale_check(const char *path, int tH, int tW, int H, int W, int orig_H, int orig_W, size_t max_pixels,
                       char *why, size_t why_n) {
    if (H > 65535 || W > 65535) {
        snprintf(why, why_n, "%s: a %d x %d image: a side over 65535 pixels is not resized", path, orig_W, orig_H);
        return -1;
    }
    if ((size_t)tH * (size_t)W > max_pixels || (size_t)tH * (size_t)tW > max_pixels) {
        snprintf(why, why_n, "%s: a %d x %d image does not scale to %d x %d within %zu pixels", path, orig_W, orig_H,
                 tW, tH, max_pixels);
        return -1;
    }
    return 0;
}

/* The decoded size whose rectangle crop (of an H x W image) still covers S x S: S H / h by S W / w, rounded up. */
static void crop_cover_size(int S, const ImageFolderCrop *crop, int H, int W, int *tH, int *tW) {
    *tH = (int)ceil((double)S * H / crop->h);
    *tW = (int)ceil((double)S * W / crop->w);
}

/* Where a crop lies in the decoded pixels: columns [x, x + w) and rows [y, y + h) of the H x W pixels the
 * decode returns (the whole image at the decode's scale, or for a JPEG decoded through a window only its
 * rows and columns: decode_jpeg), crop_in_decoded's rounding. */
typedef struct {
    int x, y, w, h;
} DecodeWindow;

/* What a decode is for: S, the output side a reduced scale must still cover (0: decode at full size), and
 * either the resize of (mode, short_side) (target_size) or, where crop_rng is set (a random crop's stream),
 * a crop: *crop drawn once the stored size is known, *win where the decoded pixels lie (a JPEG is decoded
 * through the crop's window only). */
typedef struct {
    int S;
    ImageFolderResizeMode mode;
    int short_side;
    const uint64_t *crop_rng;
    ImageFolderCrop *crop;
    DecodeWindow *win;
} DecodeWant;

/* round(v * to / from) for v in [0, from]: a stored coordinate in the decoded image's pixels. */
static int scale_coord(int v, int to, int from) { return (int)floor((double)v * to / from + 0.5); }

/* The crop (in the stored orig_H x orig_W image's pixels) in the pixels of the H x W decode of it: [*x0, *x1)
 * by [*y0, *y1), the edges rounded to the nearest decoded pixel, at least one pixel a side, inside the image. */
static void crop_in_decoded(const ImageFolderCrop *crop, int H, int W, int orig_H, int orig_W, int *x0, int *x1,
                            int *y0, int *y1) {
    *x0 = scale_coord(crop->x, W, orig_W);
    *x1 = scale_coord(crop->x + crop->w, W, orig_W);
    *y0 = scale_coord(crop->y, H, orig_H);
    *y1 = scale_coord(crop->y + crop->h, H, orig_H);
    if (*x1 <= *x0) *x0 > 0 ? (void)(*x0 = *x1 - 1) : (void)(*x1 = *x0 + 1);
    if (*y1 <= *y0) *y0 > 0 ? (void)(*y0 = *y1 - 1) : (void)(*y1 = *y0 + 1);
}

/* tf_cnn_benchmarks' train_image arguments to sample_distorted_bounding_box. */
#define CROP_MIN_OBJECT_COVERED 0.1f
#define CROP_MIN_ASPECT 0.75f
#define CROP_MAX_ASPECT 1.33f
#define CROP_MIN_AREA 0.05f
#define CROP_MAX_AREA 1.0f
#define CROP_MAX_ATTEMPTS 100

/* TensorFlow's GenerateRandomCrop (sample_distorted_bounding_box_op.cc), in its float arithmetic and its
 * lrintf rounding: a height uniform among the integers from round(sqrt(min_area / aspect)) to the largest
 * whose width round(h aspect) fits the image, corrected by one where rounding puts the area out of range, then
 * the offsets.  1 with *c set, 0 when the constraints cannot be met. */
static int generate_random_crop(int W, int H, float min_rel, float max_rel, float aspect, uint64_t *rng,
                                ImageFolderCrop *c) {
    const float min_area = min_rel * (float)W * (float)H, max_area = max_rel * (float)W * (float)H;
    int height = (int)lrintf(sqrtf(min_area / aspect));
    int max_height = (int)lrintf(sqrtf(max_area / aspect));
    if (lrintf((float)max_height * aspect) > W) {
        /* the smallest max_height with round(max_height aspect) <= W, as TensorFlow finds it */
        const float eps = 0.0000001f;
        max_height = (int)((W + 0.5 - eps) / aspect);
        if (lrintf((float)max_height * aspect) > W) max_height -= 1;
    }
    if (max_height > H) max_height = H;
    if (height >= max_height) height = max_height;
    if (height < max_height) height += (int)rng_below(rng, (uint64_t)(max_height - height + 1));
    int width = (int)lrintf((float)height * aspect);
    float area = (float)width * (float)height; /* the int product, rounded once, as TensorFlow's; no overflow */
    if (area < min_area) {
        height += 1;
        width = (int)lrintf((float)height * aspect);
        area = (float)width * (float)height;
    }
    if (area > max_area) {
        height -= 1;
        width = (int)lrintf((float)height * aspect);
        area = (float)width * (float)height;
    }
    if (area < min_area || area > max_area || width > W || height > H || width <= 0 || height <= 0) return 0;
    c->y = height < H ? (int)rng_below(rng, (uint64_t)(H - height)) : 0;
    c->x = width < W ? (int)rng_below(rng, (uint64_t)(W - width)) : 0;
    c->w = width;
    c->h = height;
    return 1;
}

void imagefolder_random_crop(ImageFolderCrop *crop, int H, int W, uint64_t *rng_state) {
    int found = 0;
    for (int i = 0; i < CROP_MAX_ATTEMPTS && !found; i++) {
        const float aspect = rng_uniform01(rng_state) * (CROP_MAX_ASPECT - CROP_MIN_ASPECT) + CROP_MIN_ASPECT;
        /* the only box is the whole image: the crop must cover min_object_covered of it */
        found = generate_random_crop(W, H, CROP_MIN_AREA, CROP_MAX_AREA, aspect, rng_state, crop) &&
                (float)((long)crop->w * crop->h) / (float)((long)W * H) >= CROP_MIN_OBJECT_COVERED;
    }
    if (!found) *crop = (ImageFolderCrop){0, 0, W, H, 0};
    crop->flip = rng_uniform01(rng_state) < 0.5f;
}

/* want's crop for an H x W stored image, from a copy of its stream (the same stream, the same crop). */
static void draw_crop(const DecodeWant *want, int H, int W) {
    uint64_t st = *want->crop_rng;
    imagefolder_random_crop(want->crop, H, W, &st);
}

/* A function libFuzzer's coverage leaves alone (clang's no_sanitize("coverage"), and not inlined into a caller that is traced). */
#if defined(__clang__)
#define NO_COVERAGE __attribute__((no_sanitize("coverage"), noinline))
#else
#define NO_COVERAGE
#endif

/* rgb (W, 3) from one row of a CMYK JPEG as libjpeg gives it, cmyk (W, 4),
 * as PIL's Image.open(...).convert("RGB") makes it: PIL reads every CMYK
 * JPEG as Adobe's inverted CMYK (each byte 255 - v: Photoshop, which wrote
 * most of them, stores the inks inverted), then converts with
 * R = (255 - K) - round(C (255 - K) / 255), G and B alike (Pillow's
 * cmyk2rgb, its rounded MULDIV255).  With the inversion undone that is
 * k - round((255 - c) k / 255) on the stored bytes c, k.  Not traced by the
 * fuzz build's coverage (NO_COVERAGE): branch-free arithmetic, whose
 * traced loop compares made a 383-byte CMYK JPEG of 32775 x 4105 pixels
 * take 34 s in fuzz_image. */
NO_COVERAGE static void cmyk_to_rgb(uint8_t *rgb, const uint8_t *cmyk, unsigned W) {
    for (unsigned x = 0; x < W; x++) {
        const int nk = cmyk[4 * x + 3]; /* 255 - K, K = 255 - the stored byte */
        for (int j = 0; j < 3; j++) {
            const int c = 255 - cmyk[4 * x + j];
            const int t = c * nk + 128;
            rgb[3 * x + j] = (uint8_t)(nk - (((t >> 8) + t) >> 8));
        }
    }
}

/* JPEG to RGB, from the open file f, or from the file's bytes (data,
 * n_bytes) when f is NULL.  want->S > 0: decode at the smallest of libjpeg's
 * scales 1/8, 1/4, 1/2 whose output still covers the target size of
 * want on both sides (*scale_eighths = M of M/8; 8 = full size);
 * want->S = 0: full size.  Only these three: libjpeg-turbo has SIMD inverse DCTs
 * for them (and the full size), while its other scales (3/8, 5/8, ...)
 * run plain C and measured slower than a full decode (bench/RESULTS.md).
 * *orig_H, *orig_W: the stored size.  The decoded image is at most
 * max_pixels pixels.  *pixels: scr->pixels (grown, kept by scr) when scr
 * is given, else malloc'ed for the caller.  With want->crop_rng, the crop
 * is drawn for the stored size, the scale is the smallest whose crop covers
 * S x S, and only the crop's window is decoded: *H x *W pixels in which
 * *win gives the crop.
 * Closes nothing. */
static int decode_jpeg(const char *path, FILE *f, const uint8_t *data, size_t n_bytes, const DecodeWant *want,
                       size_t max_pixels, ImageFolderScratch *scr, uint8_t **pixels, int *H, int *W, int *orig_H,
                       int *orig_W, int *scale_eighths, char *err, size_t err_n) {
    const int S = want->S;
    ImageFolderCrop *crop = want->crop;
    DecodeWindow *win = want->win;
    struct jpeg_decompress_struct cinfo;
    JpegError jerr;
    uint8_t *volatile buf = NULL;  /* malloc'ed here (no scr) */
    uint8_t *volatile cmyk = NULL; /* (output_width, 4) one CMYK row, for a CMYK or YCCK JPEG; the last row, read
                                      past a crop */
    memset(&jerr, 0, sizeof jerr);
    cinfo.err = jpeg_std_error(&jerr.pub);
    jerr.pub.error_exit = jpeg_on_error;
    jerr.pub.emit_message = jpeg_on_message;
    if (setjmp(jerr.jump)) {
        /* A file cut short stops libjpeg in whatever it read last ("JPEG datastream contains no image" for a cut
         * header, "Bogus Huffman table definition" inside one): the end of the data, warned of first, is the cause. */
        if (jerr.truncated) snprintf(err, err_n, "%s: JPEG is truncated (premature end of data; libjpeg: %s)", path, jerr.msg);
        else snprintf(err, err_n, "%s: JPEG does not decode: %s", path, jerr.msg);
        jpeg_destroy_decompress(&cinfo);
        free(buf);
        free(cmyk);
        return -1;
    }
    jpeg_create_decompress(&cinfo);
    /* libjpeg's own buffers (a progressive JPEG holds all its coefficients) count against the bound. */
    cinfo.mem->max_memory_to_use = (long)(max_pixels < ((size_t)1 << 40) ? max_pixels * 8 : (size_t)1 << 43);
    if (f) jpeg_stdio_src(&cinfo, f);
    else jpeg_mem_src(&cinfo, data, (unsigned long)n_bytes);
    jpeg_read_header(&cinfo, TRUE);
    /* libjpeg converts YCbCr, grey and RGB to RGB, not CMYK: a CMYK or YCCK JPEG (print work; 22 of
     * ImageNet's training images) is read as CMYK and converted below, as PIL converts it. */
    const int is_cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    cinfo.out_color_space = is_cmyk ? JCS_CMYK : JCS_RGB;
    *orig_H = (int)cinfo.image_height;
    *orig_W = (int)cinfo.image_width;
    if (want->crop_rng) draw_crop(want, *orig_H, *orig_W);
    int M = 8;
    if (S > 0) {
        int tH, tW;
        if (want->crop_rng) crop_cover_size(S, crop, *orig_H, *orig_W, &tH, &tW);
        else target_size(S, want->mode, want->short_side, *orig_H, *orig_W, &tH, &tW);
        for (int m = 1; m < 8; m *= 2) {
            cinfo.scale_num = (unsigned)m;
            cinfo.scale_denom = 8;
            jpeg_calc_output_dimensions(&cinfo);
            if ((int)cinfo.output_height >= tH && (int)cinfo.output_width >= tW) {
                M = m;
                break;
            }
        }
        cinfo.scale_num = (unsigned)M;
        cinfo.scale_denom = 8;
    }
    jpeg_calc_output_dimensions(&cinfo);
    if ((size_t)cinfo.output_width * cinfo.output_height > max_pixels) {
        char scaled[96] = "";
        const char *limit = pixels_limit(max_pixels); /* " (at most ...)" */
        if (M < 8) { /* " (W x H at its reduced scale M/8; at most ...)" */
            snprintf(scaled, sizeof scaled, " (%u x %u at its reduced scale %d/8; ", cinfo.output_width,
                     cinfo.output_height, M);
            limit += 2;
        }
        snprintf(err, err_n, "%s: JPEG of %u x %u pixels%s%s", path, cinfo.image_width, cinfo.image_height, scaled, limit);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    jpeg_start_decompress(&cinfo);
    /* A crop decodes only its window, as TensorFlow's decode_and_crop_jpeg: the columns from the iMCU
     * boundary at or left of the crop (jpeg_crop_scanline), the rows of the crop (jpeg_skip_scanlines over
     * the others, which entropy-decodes them, and the last row read, so that a file truncated or damaged
     * anywhere is refused or warned about whatever the crop). */
    JDIMENSION y_first = 0, y_end = cinfo.output_height;
    if (want->crop_rng) {
        int x0, x1, y0, y1;
        crop_in_decoded(crop, (int)cinfo.output_height, (int)cinfo.output_width, *orig_H, *orig_W, &x0, &x1, &y0,
                        &y1);
        JDIMENSION xoff = (JDIMENSION)x0, w = (JDIMENSION)(x1 - x0);
        if (w < cinfo.output_width) jpeg_crop_scanline(&cinfo, &xoff, &w);
        *win = (DecodeWindow){x0 - (int)xoff, 0, x1 - x0, y1 - y0}; /* the rows decoded are the crop's */
        y_first = (JDIMENSION)y0;
        y_end = (JDIMENSION)y1;
        if (y_first > 0) jpeg_skip_scanlines(&cinfo, y_first);
    }
    size_t row_n_bytes = (size_t)cinfo.output_width * 3;
    const size_t n_rows = y_end - y_first;
    uint8_t *out;
    if (scr) {
        out = grow(&scr->pixels, &scr->pixels_n_bytes, row_n_bytes * n_rows) == 0 ? scr->pixels : NULL;
    } else {
        out = buf = malloc(row_n_bytes * n_rows);
    }
    if (!out) {
        snprintf(err, err_n, "%s: out of memory for a %u x %u image", path, cinfo.output_width, cinfo.output_height);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    if (is_cmyk && !(cmyk = malloc((size_t)cinfo.output_width * 4))) {
        snprintf(err, err_n, "%s: out of memory for a %u x %u CMYK image", path, cinfo.output_width,
                 cinfo.output_height);
        jpeg_destroy_decompress(&cinfo);
        free(buf);
        return -1;
    }
    while (cinfo.output_scanline < y_end) {
        uint8_t *rgb = out + row_n_bytes * (cinfo.output_scanline - y_first);
        JSAMPROW row = is_cmyk ? cmyk : rgb;
        jpeg_read_scanlines(&cinfo, &row, 1);
        if (is_cmyk) cmyk_to_rgb(rgb, cmyk, cinfo.output_width);
    }
    /* The rows below a crop: entropy-decoded as those above (jpeg_skip_scanlines to the last row), and the last
     * row read, for libjpeg-turbo's skip to the very end decodes nothing (it marks the scan done): a file
     * truncated or damaged below the crop was refused or kept in one epoch and not the next, as its crop was
     * drawn anew (and a marker after the scan went unread). */
    if (cinfo.output_scanline + 1 < cinfo.output_height)
        jpeg_skip_scanlines(&cinfo, cinfo.output_height - 1 - cinfo.output_scanline);
    if (cinfo.output_scanline < cinfo.output_height) {
        if (!cmyk && !(cmyk = malloc((size_t)cinfo.output_width * 4))) {
            snprintf(err, err_n, "%s: out of memory for a row of %u pixels", path, cinfo.output_width);
            jpeg_destroy_decompress(&cinfo);
            free(buf);
            return -1;
        }
        JSAMPROW row = cmyk; /* at most 4 components */
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
    *H = (int)n_rows;
    *W = (int)cinfo.output_width;
    jpeg_destroy_decompress(&cinfo);
    free(cmyk);
    if (jerr.truncated) {
        snprintf(err, err_n, "%s: JPEG is truncated (premature end of data)", path);
        free(buf);
        return -1;
    }
    if (jerr.damaged[0])
        snprintf(err, err_n, "%s: damaged JPEG data (libjpeg: %s); decoded with libjpeg's fill-in, as TensorFlow and "
                 "PIL decode it", path, jerr.damaged);
    *pixels = out;
    *scale_eighths = M;
    return 0;
}

const char *imagefolder_encoded_kind(const uint8_t *bytes, size_t n_bytes) {
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (n_bytes >= 8 && !memcmp(bytes, png_sig, 8)) return "PNG";
    if (n_bytes >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff) return "JPEG";
    return NULL;
}

/* The format from the first n bytes of path: 1 PNG, 2 JPEG, or -1 with err. */
static int sniff_bytes(const char *path, const uint8_t *magic, size_t n, char *err, size_t err_n) {
    const char *kind = imagefolder_encoded_kind(magic, n);
    if (kind) return kind[0] == 'P' ? 1 : 2;
    if (n == 0) snprintf(err, err_n, "%s: empty file, not an image", path);
    else if (n == 1) snprintf(err, err_n, "%s: not a PNG or JPEG image (its one byte %02x)", path, magic[0]);
    else snprintf(err, err_n, "%s: not a PNG or JPEG image (first bytes %02x %02x)", path, magic[0], magic[1]);
    return -1;
}

/* The PNG or JPEG at path to RGB, its format from its first bytes: from data (n_bytes, the file read whole) when
 * given, else from the file.  It decodes into scr->pixels when scr is given (kept by scr; want and
 * *scale_eighths as decode_jpeg's, a PNG always at full size), else into a buffer malloc'ed for the caller,
 * which *owned then names too (else NULL).  *orig_H, *orig_W: the stored size.  0 (err "", or a warning line
 * for a JPEG with damaged data), or -1 with err (*pixels and *owned NULL). */
static int decode_image(const char *path, const uint8_t *data, size_t n_bytes, const DecodeWant *want,
                        size_t max_pixels, ImageFolderScratch *scr, uint8_t **pixels, uint8_t **owned, int *H, int *W,
                        int *orig_H, int *orig_W, int *scale_eighths, char *err, size_t err_n) {
    *pixels = *owned = NULL;
    *scale_eighths = 8;
    if (err_n) err[0] = '\0';
    /* Without the bytes, the file is opened once: its first bytes sniffed, then rewound for the decoder. */
    FILE *f = data ? NULL : fopen(path, "rb");
    if (!data && !f) {
        snprintf(err, err_n, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    uint8_t magic[8];
    const size_t got = f ? fread(magic, 1, sizeof magic, f) : 0;
    const int kind = f ? sniff_bytes(path, magic, got, err, err_n) : sniff_bytes(path, data, n_bytes, err, err_n);
    if (kind < 0 || (f && fseek(f, 0, SEEK_SET) != 0)) {
        if (kind >= 0) snprintf(err, err_n, "%s: cannot read: %s", path, strerror(errno));
        if (f) fclose(f);
        return -1;
    }
    int rc;
    if (kind == 1) {
        rc = decode_png(path, f, data, n_bytes, max_pixels, scr, pixels, H, W, err, err_n);
        if (rc == 0) { /* a failed decode may leave *H and *W unset */
            *orig_H = *H;
            *orig_W = *W;
        }
        if (rc == 0 && want->crop_rng) {
            draw_crop(want, *H, *W);
            const ImageFolderCrop *c = want->crop; /* decoded at the stored size: the crop itself */
            *want->win = (DecodeWindow){c->x, c->y, c->w, c->h};
        }
    } else {
        rc = decode_jpeg(path, f, data, n_bytes, want, max_pixels, scr, pixels, H, W, orig_H, orig_W, scale_eighths,
                         err, err_n);
    }
    if (f) fclose(f);
    if (rc == 0 && !scr) *owned = *pixels;
    return rc;
}

int imagefolder_decode_scaled(const char *path, int S, ImageFolderResizeMode mode, int short_side, size_t max_pixels,
                              uint8_t **pixels, int *H, int *W, int *orig_H, int *orig_W, int *scale_eighths, char *err,
                              size_t err_n) {
    uint8_t *owned;
    const DecodeWant want = {S, mode, short_side, NULL, NULL, NULL};
    return decode_image(path, NULL, 0, &want, max_pixels, NULL, pixels, &owned, H, W, orig_H, orig_W, scale_eighths,
                        err, err_n);
}

int imagefolder_decode(const char *path, uint8_t **pixels, int *H, int *W, char *err, size_t err_n) {
    int oh, ow, m;
    return imagefolder_decode_scaled(path, 0, IMAGEFOLDER_RESIZE, 0, IMAGEFOLDER_MAX_PIXELS, pixels, H, W, &oh, &ow, &m,
                                     err, err_n);
}

/* ---------------------------------------------------------------- resampling */

/* PIL's bilinear filter: a triangle of half-width 1. */
static double triangle(double x) {
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* PIL's precompute_coeffs: for each output index, the first input index
 * (*first), the number of inputs (*count) and their normalised weights
 * (k + out * ksize).  Returns ksize, or -1 when memory is short. */
static int resample_coeffs(int in_size, int out_size, int **first, int **count, double **k) {
    double scale = (double)in_size / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    *first = malloc((size_t)out_size * sizeof(int));
    *count = malloc((size_t)out_size * sizeof(int));
    *k = calloc((size_t)out_size * (size_t)ksize, sizeof(double));
    if (!*first || !*count || !*k) {
        free(*first);
        free(*count);
        free(*k);
        return -1;
    }
    for (int xx = 0; xx < out_size; xx++) {
        double center = (xx + 0.5) * scale;
        double ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        if (xmax > ksize) xmax = ksize;
        double *kk = *k + (size_t)xx * ksize, ww = 0.0;
        for (int x = 0; x < xmax; x++) {
            double w = triangle((x + xmin - center + 0.5) * ss);
            kk[x] = w;
            ww += w;
        }
        for (int x = 0; x < xmax && ww != 0.0; x++) kk[x] /= ww;
        (*first)[xx] = xmin;
        (*count)[xx] = xmax;
    }
    return ksize;
}

/* The weights of resample_coeffs as floats, (out_size, ksize).  NULL when memory is short. */
static float *coeffs_float(int in_size, int out_size, int **first, int **count, int *ksize) {
    double *k;
    *ksize = resample_coeffs(in_size, out_size, first, count, &k);
    if (*ksize < 0) return NULL;
    float *kf = malloc((size_t)out_size * (size_t)*ksize * sizeof *kf);
    if (kf)
        for (size_t i = 0; i < (size_t)out_size * (size_t)*ksize; i++) kf[i] = (float)k[i];
    free(k);
    if (!kf) {
        free(*first);
        free(*count);
    }
    return kf;
}

/* v rounded to nearest (halves up) and clamped to [0, 255].  v is a
 * weighted mean of bytes (the weights are >= 0 and sum to 1), so it is
 * finite and within [0, 255] up to rounding; the clamp is on the integer,
 * which the compiler makes conditional moves (the float comparisons were
 * branches, 20% of the resize). */
static inline uint8_t round_u8(float v) {
    int i = (int)(v + 0.5f);
    i = i < 0 ? 0 : i;
    i = i > 255 ? 255 : i;
    return (uint8_t)i;
}

/* The resampler's two loops are compiled twice, for AVX2 and for the
 * baseline, and the loader picks one (target_clones: an ifunc).  Neither
 * has FMA, so both give the same bytes.  Measured: 2.2x on a 375 x 500
 * to 224 x 224 resize, with horizontal_rgb_avx2 (bench/RESULTS.md).  The AVX2 loop must call the AVX2
 * horizontal pass: a baseline (SSE) function called from AVX2 code was
 * slower than no clones at all. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__ELF__) && !defined(IMAGEFOLDER_RESIZE_BASELINE) && \
    !defined(TOWER_SANITIZE_THREAD) /* ThreadSanitizer: see WINO_CLONES in model/winograd.c */
#define RESIZE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define RESIZE_CLONES
#endif

/* The horizontal pass of one output row: out (dW, C) = the weighted sums
 * of row (sW, C) (the first tap sets each sum: 0 + w x is w x exactly),
 * taps in order, rounded to nearest.  n_taps: the most taps a pixel takes
 * (max xc); row holds n_taps * C + 1 floats of zeros past its end. */
RESIZE_CLONES static void horizontal_row_u8(uint8_t *out, const float *row, int dW, int C, const int *xf,
                                            const int *xc, const float *xk, int xks, int n_taps) {
#if RESIZE_SSE2
    if (C == 3) {
        /* A pixel's three sums in one 4-lane register (the fourth lane reads the next pixel's first value, or
         * the padding, and is dropped): the scalar loop's multiplies and adds, lane for lane, in its order, so
         * the same bytes.  Every pixel takes n_taps taps: the weights past its count are 0 (and the padding 0),
         * which leaves its sums as they were, and a loop of one length is predicted (the counts alternate, e.g.
         * 4 and 5).  Rounding: +0.5, truncation, and the packs' saturation to [0, 255] are round_u8's. */
        const __m128 half = _mm_set1_ps(0.5f);
        for (int x = 0; x < dW; x++) {
            const float *kk = xk + (size_t)x * xks, *p = row + (size_t)xf[x] * 3;
            __m128 a = _mm_mul_ps(_mm_set1_ps(xc[x] > 0 ? kk[0] : 0.0f), _mm_loadu_ps(p));
            for (int i = 1; i < n_taps; i++) a = _mm_add_ps(a, _mm_mul_ps(_mm_set1_ps(kk[i]), _mm_loadu_ps(p + 3 * i)));
            __m128i v = _mm_cvttps_epi32(_mm_add_ps(a, half));
            v = _mm_packus_epi16(_mm_packs_epi32(v, v), v);
            const uint32_t rgb = (uint32_t)_mm_cvtsi128_si32(v);
            out[3 * x] = (uint8_t)rgb;
            out[3 * x + 1] = (uint8_t)(rgb >> 8);
            out[3 * x + 2] = (uint8_t)(rgb >> 16);
        }
        return;
    }
#endif
    if (C == 1) { /* n_taps taps a pixel, as above */
        for (int x = 0; x < dW; x++) {
            const float *kk = xk + (size_t)x * xks, *p = row + xf[x];
            float a = (xc[x] > 0 ? kk[0] : 0.0f) * p[0];
            for (int i = 1; i < n_taps; i++) a += kk[i] * p[i];
            out[x] = round_u8(a);
        }
        return;
    }
    for (int x = 0; x < dW; x++) {
        const float *kk = xk + (size_t)x * xks, *p = row + (size_t)xf[x] * C;
        const float w0 = xc[x] > 0 ? kk[0] : 0.0f;
        float a[16];
        for (int c = 0; c < C; c++) a[c] = w0 * p[c];
        for (int i = 1; i < xc[x]; i++)
            for (int c = 0; c < C; c++) a[c] += kk[i] * p[(size_t)i * C + c];
        for (int c = 0; c < C; c++) out[(size_t)x * C + c] = round_u8(a[c]);
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && defined(__ELF__) && !defined(IMAGEFOLDER_RESIZE_BASELINE)
#define RESIZE_HAVE_AVX2 1
#include <immintrin.h>

/* horizontal_rgb_avx2's last step: out (dW, 3) = sums (dW rounded up to 4, 4) rounded four pixels at a time
 * (+0.5, truncation, the packs' saturation: round_u8's), the fourth lanes dropped by a shuffle. */
__attribute__((target("avx2"))) static void round_rgb_avx2(uint8_t *out, const float *sums, int dW) {
    const __m256 half = _mm256_set1_ps(0.5f);
    const __m128i rgb = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    for (int x = 0; x < dW; x += 4) {
        /* pixels x, x+1 in lo; x+2, x+3 in hi; the packs interleave 128-bit halves: lo.0 hi.0 lo.1 hi.1 */
        const __m256i lo = _mm256_cvttps_epi32(_mm256_add_ps(_mm256_loadu_ps(sums + 4 * (size_t)x), half));
        const __m256i hi = _mm256_cvttps_epi32(_mm256_add_ps(_mm256_loadu_ps(sums + 4 * (size_t)x + 8), half));
        const __m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xd8); /* x, x+1, x+2, x+3 */
        const __m128i b = _mm_shuffle_epi8(
            _mm_packus_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1)), rgb);
        uint8_t px[16];
        _mm_storeu_si128((__m128i *)px, b);
        memcpy(out + 3 * (size_t)x, px, 3 * (size_t)(dW - x < 4 ? dW - x : 4));
    }
}

/* The horizontal pass of horizontal_row_u8 for C = 3, two pixels in one 8-lane register: pixel 2q in the low
 * half, 2q + 1 in the high, each as horizontal_row_u8's 4-lane pixel, so the same multiplies and adds lane for
 * lane, in the same order.  pairs (ceil(dW / 2), n_taps, 2, 4): tap i's weight of the pair's two pixels, each
 * four times (0 past a pixel's count, and for the missing pixel of an odd dW), made by horizontal_pairs.  The
 * sums go to sums (dW rounded up to 4, 4) first, then round_rgb_avx2: rounding and storing each pixel on its
 * own took more time than its sums.  (Two rows at a time, reading the weights once for both: no faster.) */
__attribute__((target("avx2"))) static void horizontal_rgb_avx2(uint8_t *out, const float *row, int dW,
                                                               const int *xf, const float *pairs, int n_taps,
                                                               float *sums) {
    for (int x = 0; x < dW; x += 2) {
        const float *w = pairs + (size_t)(x / 2) * n_taps * 8;
        const float *p0 = row + (size_t)xf[x] * 3, *p1 = x + 1 < dW ? row + (size_t)xf[x + 1] * 3 : p0;
        __m256 a = _mm256_mul_ps(_mm256_loadu_ps(w), _mm256_set_m128(_mm_loadu_ps(p1), _mm_loadu_ps(p0)));
        for (int i = 1; i < n_taps; i++) {
            const __m256 v = _mm256_set_m128(_mm_loadu_ps(p1 + 3 * i), _mm_loadu_ps(p0 + 3 * i));
            a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_loadu_ps(w + 8 * i), v));
        }
        _mm256_storeu_ps(sums + 4 * (size_t)x, a);
    }
    round_rgb_avx2(out, sums, dW);
}

/* 8 bytes at p as 8 floats. */
__attribute__((target("avx2"))) static inline __m256 bytes_to_floats_avx2(const uint8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* The vertical pass of one output row for any C: row[j] = the weighted sum of the n rows r0 + i * stride_n
 * (i < n, weights kk[i]; w0 is kk[0], or 0 where n is 0), j < in_row_n, 32 values at a time held in registers
 * over every tap, so that row is written once instead of read and written once a tap (1.35-1.45x the resize;
 * bench/RESULTS.md).  The multiplies and adds are vertical_row's plain loop's, value for value and in its
 * order (the first tap sets the sum: w0 x), so the same floats. */
__attribute__((target("avx2"))) static void vertical_row_avx2(float *row, const uint8_t *r0, size_t in_row_n,
                                                              size_t stride_n, const float *kk, float w0, int n) {
    size_t j = 0;
    for (; j + 32 <= in_row_n; j += 32) {
        const __m256 v0 = _mm256_set1_ps(w0);
        __m256 a[4];
        for (int q = 0; q < 4; q++) a[q] = _mm256_mul_ps(v0, bytes_to_floats_avx2(r0 + j + 8 * q));
        for (int i = 1; i < n; i++) {
            const uint8_t *r = r0 + (size_t)i * stride_n + j;
            const __m256 w = _mm256_set1_ps(kk[i]);
            for (int q = 0; q < 4; q++) a[q] = _mm256_add_ps(a[q], _mm256_mul_ps(w, bytes_to_floats_avx2(r + 8 * q)));
        }
        for (int q = 0; q < 4; q++) _mm256_storeu_ps(row + j + 8 * q, a[q]);
    }
    for (; j < in_row_n; j++) {
        float a = w0 * (float)r0[j];
        for (int i = 1; i < n; i++) a += kk[i] * (float)r0[(size_t)i * stride_n + j];
        row[j] = a;
    }
}

/* horizontal_rgb_avx2's weights from coeffs_float's (xc, xk, xks): malloc'ed, NULL when memory is short. */
static float *horizontal_pairs(int dW, const int *xc, const float *xk, int xks, int n_taps) {
    const int n_pairs = (dW + 1) / 2;
    float *pairs = malloc((size_t)n_pairs * n_taps * 8 * sizeof(float));
    if (!pairs) return NULL;
    for (int q = 0; q < n_pairs; q++)
        for (int i = 0; i < n_taps; i++)
            for (int h = 0; h < 2; h++) {
                const int x = 2 * q + h;
                const float w = x < dW && i < xc[x] ? xk[(size_t)x * xks + i] : 0.0f;
                for (int l = 0; l < 4; l++) pairs[(((size_t)q * n_taps + i) * 2 + h) * 4 + l] = w;
            }
    return pairs;
}
#else
#define RESIZE_HAVE_AVX2 0
#endif

/* The vertical pass of output row y: row (sW * C) = the weighted sum of src's rows yf[y] ... (weights yk),
 * rows stride_n bytes apart, vertical_row_avx2 where avx2, else the plain loop (the same floats).  Inlined
 * into resize_rows' clones. */
static inline void vertical_row(float *row, const uint8_t *src, size_t in_row_n, size_t stride_n, const int *yf,
                                const int *yc, const float *yk, int yks, int y, int avx2) {
    const float *kk = yk + (size_t)y * yks;
    const uint8_t *r0 = src + (size_t)yf[y] * stride_n;
    const float w0 = yc[y] > 0 ? kk[0] : 0.0f;
#if RESIZE_HAVE_AVX2
    if (avx2) {
        vertical_row_avx2(row, r0, in_row_n, stride_n, kk, w0, yc[y]);
        return;
    }
#endif
    (void)avx2;
    for (size_t j = 0; j < in_row_n; j++) row[j] = w0 * (float)r0[j];
    for (int i = 1; i < yc[y]; i++) {
        const float w = kk[i];
        const uint8_t *r = r0 + (size_t)i * stride_n;
        for (size_t j = 0; j < in_row_n; j++) row[j] += w * (float)r[j];
    }
}

/* The two passes over every output row of dst (dH, dW, C) from src (sH, sW, C; rows stride_n bytes apart),
 * with the weights of coeffs_float (x: xf, xc, xk, xks; y: likewise) and row, the vertical pass's (sW, C)
 * floats with its padding; avx2: the CPU has AVX2 (vertical_row_avx2 then); pairs and sums, where given,
 * horizontal_rgb_avx2's.  Static and called from this file only: Clang emits a clone's dispatcher only where
 * it is called. */
RESIZE_CLONES static void resize_rows(uint8_t *dst, int dH, int dW, const uint8_t *src, int sW, size_t stride_n,
                                      int C, float *row, const int *xf, const int *xc, const float *xk, int xks,
                                      int n_taps, const float *pairs, float *sums, const int *yf, const int *yc,
                                      const float *yk, int yks, int avx2) {
    const size_t in_row_n = (size_t)sW * C, out_row_n = (size_t)dW * C;
    for (int y = 0; y < dH; y++) {
        vertical_row(row, src, in_row_n, stride_n, yf, yc, yk, yks, y, avx2);
#if RESIZE_HAVE_AVX2
        if (pairs) {
            horizontal_rgb_avx2(dst + y * out_row_n, row, dW, xf, pairs, n_taps, sums);
            continue;
        }
#endif
        (void)pairs, (void)sums;
        horizontal_row_u8(dst + y * out_row_n, row, dW, C, xf, xc, xk, xks, n_taps);
    }
}

/* PIL's BILINEAR filter (resample_coeffs' weights) as two separable passes
 * in float, one output row at a time: the vertical pass (a weighted sum of
 * input rows, along contiguous memory, which the compiler vectorizes) into
 * one row (sW, C), then the horizontal pass of that row into the output
 * row, rounded once.  PIL itself runs the horizontal pass first, in 22-bit
 * fixed point, rounding to bytes between the passes: the two pictures
 * differ by at most one level, on about one value in seven
 * (tests/interop/pil_interop.py).  PIL's own order, reproduced bit for bit
 * in fixed point, measured 2.5x slower here (its horizontal pass over every
 * input row does not vectorize; bench/RESULTS.md). */
int imagefolder_resize_strided(uint8_t *dst, int dH, int dW, const uint8_t *src, int sH, int sW, size_t stride_n,
                               int C) {
    if (C < 1 || C > 16 || stride_n < (size_t)sW * C) return -1;
    if (dH == sH && dW == sW) {
        for (int y = 0; y < sH; y++) memcpy(dst + (size_t)y * sW * C, src + (size_t)y * stride_n, (size_t)sW * C);
        return 0;
    }
    int *xf = NULL, *xc = NULL, *yf = NULL, *yc = NULL, xks = 0, yks = 0;
    const size_t in_row_n = (size_t)sW * C;
    float *xk = coeffs_float(sW, dW, &xf, &xc, &xks);
    float *yk = xk ? coeffs_float(sH, dH, &yf, &yc, &yks) : NULL;
    int n_taps = 1; /* the most taps an output pixel takes: at most sW */
    for (int x = 0; xk && x < dW; x++) n_taps = xc[x] > n_taps ? xc[x] : n_taps;
    /* (sW, C) one row of the vertical pass, then the zeros the horizontal pass may read past it */
    const size_t pad_n = (size_t)n_taps * C + 1;
    float *row = xk ? malloc((in_row_n + pad_n) * sizeof(float)) : NULL;
    if (!row || !xk || !yk) {
        free(row);
        if (xk) free(xf), free(xc), free(xk);
        if (yk) free(yf), free(yc), free(yk);
        return -1;
    }
    memset(row + in_row_n, 0, pad_n * sizeof(float));
    /* horizontal_rgb_avx2's weights and sums (dW rounded up to 4, 4), where the CPU has AVX2 (else, or short of
     * memory: none, and horizontal_row_u8) */
    float *pairs = NULL, *sums = NULL;
    int avx2 = 0;
#if RESIZE_HAVE_AVX2
    avx2 = __builtin_cpu_supports("avx2");
    if (C == 3 && avx2) {
        pairs = horizontal_pairs(dW, xc, xk, xks, n_taps);
        sums = calloc(((size_t)dW + 3) / 4 * 16, sizeof(float));
        if (!pairs || !sums) {
            free(pairs);
            free(sums);
            pairs = sums = NULL;
        }
    }
#endif
    resize_rows(dst, dH, dW, src, sW, stride_n, C, row, xf, xc, xk, xks, n_taps, pairs, sums, yf, yc, yk, yks, avx2);
    free(pairs);
    free(sums);
    free(row);
    free(xf), free(xc), free(xk);
    free(yf), free(yc), free(yk);
    return 0;
}

int imagefolder_resize(uint8_t *dst, int dH, int dW, const uint8_t *src, int sH, int sW, int C) {
    return imagefolder_resize_strided(dst, dH, dW, src, sH, sW, (size_t)sW * C, C);
}

/* ---------------------------------------------------------------- the source */

typedef struct {
    char *path;
    int label;
} FolderFile;

typedef struct {
    ImageFolderConfig cfg;
    char **classes;        /* (n_classes) sorted names, or those of cfg.labels_file in its order */
    int n_classes;
    char **folders;        /* (n_folders) the class folders found, sorted; == classes without a labels file */
    int n_folders;
    int *folder_label;     /* (n_folders) each folder's label (index in classes) */
    FolderFile *files;     /* (n_files) class after class, names sorted */
    long n_files, next;
    long *order;           /* (n_files) with cfg.shuffle: the order folder_next reads files in; NULL: as listed */
    uint64_t files_n_bytes; /* the files' sizes when listed */
    long n_skipped;
    uint8_t *out;          /* (image_size, image_size, channels) */
    uint8_t *scaled;       /* (scaled_H, scaled_W, 3) before the crop, grown on demand */
    size_t scaled_n_bytes;
    uint8_t *file;         /* (file_n_bytes) cfg.encoded: the last image's file, read whole (read_small_file) */
    size_t file_n_bytes;
} FolderState;

/* The line holds file names, which may hold any byte: escaped here, so
 * every warn callback gets a printable line. */
static void warn_line(const FolderState *st, const char *line) {
    char safe[4096];
    escape_str(safe, sizeof safe, line);
    if (st->cfg.warn) st->cfg.warn(st->cfg.warn_ctx, safe);
    else fprintf(stderr, "warning: %s\n", safe);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void free_names(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* Sorted names of dir's entries, without "." ".." and dot files.  0 or -1
 * (errno set): a read error part way through (readdir's NULL with errno set,
 * EIO on a failing disk) fails the listing, so a folder is never read as
 * holding fewer images than it does. */
static int list_dir(const char *dir, char ***names, int *n_names) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    char **v = NULL;
    int n = 0, cap = 0, read_errno = 0;
    struct dirent *e;
    for (;;) {
        errno = 0;
        if (!(e = readdir(d))) {
            read_errno = errno;
            break;
        }
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) goto oom;
            v = nv;
        }
        if (!(v[n] = strdup(e->d_name))) goto oom;
        n++;
    }
    closedir(d);
    if (read_errno) {
        free_names(v, n);
        errno = read_errno;
        return -1;
    }
    if (n > 1) qsort(v, (size_t)n, sizeof *v, cmp_str);
    *names = v;
    *n_names = n;
    return 0;
oom:
    closedir(d);
    free_names(v, n);
    errno = ENOMEM;
    return -1;
}

static void folder_close(ConvertSource *s) {
    FolderState *st = s->state;
    if (st) {
        if (st->folders != st->classes) free_names(st->folders, st->n_folders);
        free_names(st->classes, st->n_classes);
        free(st->folder_label);
        for (long i = 0; i < st->n_files; i++) free(st->files[i].path);
        free(st->files);
        free(st->order);
        free(st->out);
        free(st->scaled);
        free(st->file);
        free(st);
    }
    free(s);
}

/* out (S, S, C) = the S x S pixels of rgb (RGB rows of W pixels) from row top, column left, mirrored
 * left-right where flip; C 1: PIL's convert("L"), L = (19595 R + 38470 G + 7471 B + 32768) >> 16. */
static void copy_square(uint8_t *out, int S, int C, const uint8_t *rgb, int W, int top, int left, int flip) {
    for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++) {
            const uint8_t *p = rgb + ((size_t)(y + top) * W + (size_t)(left + (flip ? S - 1 - x : x))) * 3;
            uint8_t *q = out + ((size_t)y * S + x) * C;
            if (C == 3) {
                q[0] = p[0];
                q[1] = p[1];
                q[2] = p[2];
            } else {
                q[0] = (uint8_t)((19595u * p[0] + 38470u * p[1] + 7471u * p[2] + 0x8000u) >> 16);
            }
        }
}

/* round((scaled - size) / 2) with halves to even, as Python's round(): d odd
 * gives a half, k + 0.5 -> k when k is even, k + 1 when odd. */
static int center_crop_offset(int scaled, int size) {
    int d = scaled - size, k = d / 2;
    return (d % 2 && k % 2) ? k + 1 : k;
}

int imagefolder_transform(uint8_t *out, int S, int C, ImageFolderResizeMode mode, int short_side, const uint8_t *rgb,
                          int H, int W, int orig_H, int orig_W, ImageFolderScratch *scr) {
    if (mode == IMAGEFOLDER_RANDOM_CROP) return -1; /* imagefolder_transform_crop's */
    int tH, tW; /* size to scale to before cropping, from the stored size */
    target_size(S, mode, short_side, orig_H, orig_W, &tH, &tW);
    if (C == 3 && tH == S && tW == S) return imagefolder_resize(out, S, S, rgb, H, W, 3); /* nothing to crop */
    if (grow(&scr->scaled, &scr->scaled_n_bytes, (size_t)tH * tW * 3) != 0 ||
        imagefolder_resize(scr->scaled, tH, tW, rgb, H, W, 3) != 0)
        return -1;
    /* torchvision CenterCrop: top = int(round((h - S) / 2.)), left likewise, with
     * Python 3's round, which takes a half to the even neighbour (4.5 -> 4). */
    copy_square(out, S, C, scr->scaled, tW, center_crop_offset(tH, S), center_crop_offset(tW, S), 0);
    return 0;
}

/* window (wh rows of ww RGB pixels, stride_n bytes apart) resized to out (S, S, C), mirrored where flip;
 * RGB unmirrored straight into out, else through scr->scaled and copy_square.  0, or -1 when memory is
 * short. */
static int transform_window(uint8_t *out, int S, int C, int flip, const uint8_t *window, int wh, int ww,
                            size_t stride_n, ImageFolderScratch *scr) {
    if (C == 3 && !flip) return imagefolder_resize_strided(out, S, S, window, wh, ww, stride_n, 3);
    if (grow(&scr->scaled, &scr->scaled_n_bytes, (size_t)S * S * 3) != 0 ||
        imagefolder_resize_strided(scr->scaled, S, S, window, wh, ww, stride_n, 3) != 0)
        return -1;
    copy_square(out, S, C, scr->scaled, S, 0, 0, flip);
    return 0;
}

int imagefolder_transform_crop(uint8_t *out, int S, int C, const ImageFolderCrop *crop, const uint8_t *rgb, int H,
                               int W, int orig_H, int orig_W, ImageFolderScratch *scr) {
    if (crop->w < 1 || crop->h < 1 || crop->x < 0 || crop->y < 0 || crop->x + crop->w > orig_W ||
        crop->y + crop->h > orig_H)
        return -1;
    int x0, x1, y0, y1;
    crop_in_decoded(crop, H, W, orig_H, orig_W, &x0, &x1, &y0, &y1);
    return transform_window(out, S, C, crop->flip, rgb + ((size_t)y0 * W + x0) * 3, y1 - y0, x1 - x0, (size_t)W * 3,
                            scr);
}

void imagefolder_scratch_free(ImageFolderScratch *scr) {
    free(scr->scaled);
    free(scr->pixels);
    free(scr->file);
    memset(scr, 0, sizeof *scr);
}

/* Reads path whole into scr->file when it is a file of at most cap bytes: 1 (*n_bytes read), 0 when it is
 * larger, not a regular file, or grew while read (read again the slow way by the loader), -1 with err. */
static int read_small_file(const char *path, size_t cap, ImageFolderScratch *scr, size_t *n_bytes, char *err,
                           size_t err_n) {
    /* open/fstat/read, not stdio: no FILE to allocate and no second fstat (stdio's, for its buffer size) */
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        snprintf(err, err_n, "%s: cannot open: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    /* + 1: a file grown since fstat reads one byte more, and is read again the slow way */
    if (!S_ISREG(sb.st_mode) || sb.st_size < 0 || (uint64_t)sb.st_size > cap ||
        grow(&scr->file, &scr->file_n_bytes, (size_t)sb.st_size + 1) != 0) {
        close(fd);
        return 0;
    }
    const size_t want = (size_t)sb.st_size + 1;
    size_t got = 0;
    while (got < want) {
        const ssize_t r = read(fd, scr->file + got, want - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            snprintf(err, err_n, "%s: cannot read: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    close(fd);
    *n_bytes = got;
    return got <= (size_t)sb.st_size;
}

/* imagefolder_load, imagefolder_load_random_crop and imagefolder_load_bytes: the image of path, or of bytes
 * (n_bytes) already in memory when bytes is not NULL (path then only names it in messages); crop_rng NULL for a
 * resize, else the stream of the crop (drawn into *crop once the stored size is known). */
static int load_image(uint8_t *out, int S, int C, ImageFolderResizeMode mode, int short_side, const uint64_t *crop_rng,
                      ImageFolderCrop *crop, const char *path, const uint8_t *bytes, size_t n_bytes, size_t max_pixels,
                      int scaled, ImageFolderScratch *scr, int *scale_eighths, char *err, size_t err_n) {
    uint8_t *rgb, *owned; /* rgb: scr->pixels; owned: NULL (decode_image with scr) */
    int H, W, oH, oW;
    /* A file of at most max_pixels bytes (the pipeline's bound counts one such buffer a worker) is read with one
     * read and decoded into scr->pixels: no per-image allocation (the page faults of a fresh buffer were 2-3%
     * of a 224 x 224 JPEG's time), no 4 KB reads through stdio, and a PNG is not opened and read a second time
     * (Fashion-MNIST as 28 x 28 PNGs: 18% more images/sec, bench/RESULTS.md). */
    const int whole = bytes ? 1 : read_small_file(path, max_pixels, scr, &n_bytes, err, err_n);
    DecodeWindow win = {0, 0, 0, 0}; /* a crop's: where it lies in the decoded pixels */
    const DecodeWant want = {scaled ? S : 0, mode, short_side, crop_rng, crop, &win};
    if (whole < 0 || decode_image(path, bytes ? bytes : whole ? scr->file : NULL, n_bytes, &want, max_pixels, scr, &rgb,
                                  &owned, &H, &W, &oH, &oW, scale_eighths, err, err_n) != 0)
        return -1;
    int tH = S, tW = S; /* a crop is resampled straight to S x S */
    if (!crop_rng) target_size(S, mode, short_side, oH, oW, &tH, &tW);
    /* The resampled image is (tH, tW) bytes; the work of the first pass is (tH, W) rows: both bounded. */
    if (scale_check(path, tH, tW, H, W, oH, oW, max_pixels, err, err_n) != 0) {
        free(owned);
        return -1;
    }
    int rc;
    if (crop_rng) {
        rc = transform_window(out, S, C, crop->flip, rgb + ((size_t)win.y * W + (size_t)win.x) * 3, win.h, win.w,
                              (size_t)W * 3, scr);
    } else {
        rc = imagefolder_transform(out, S, C, mode, short_side, rgb, H, W, oH, oW, scr);
    }
    free(owned);
    if (rc != 0) snprintf(err, err_n, "%s: out of memory resizing a %d x %d image", path, W, H);
    return rc;
}

int imagefolder_load(uint8_t *out, int S, int C, ImageFolderResizeMode mode, int short_side, const char *path,
                     size_t max_pixels, int scaled, ImageFolderScratch *scr, int *scale_eighths, char *err,
                     size_t err_n) {
    if (mode == IMAGEFOLDER_RANDOM_CROP) {
        snprintf(err, err_n, "%s: a random crop is imagefolder_load_random_crop's", path);
        return -1;
    }
    return load_image(out, S, C, mode, short_side, NULL, NULL, path, NULL, 0, max_pixels, scaled, scr, scale_eighths,
                      err, err_n);
}

int imagefolder_load_random_crop(uint8_t *out, int S, int C, uint64_t rng_state, const char *path, size_t max_pixels,
                                 int scaled, ImageFolderScratch *scr, ImageFolderCrop *crop, int *scale_eighths,
                                 char *err, size_t err_n) {
    ImageFolderCrop own;
    return load_image(out, S, C, IMAGEFOLDER_RANDOM_CROP, 0, &rng_state, crop ? crop : &own, path, NULL, 0, max_pixels,
                      scaled, scr, scale_eighths, err, err_n);
}

int imagefolder_load_bytes(uint8_t *out, int S, int C, ImageFolderResizeMode mode, int short_side, uint64_t rng_state,
                           const uint8_t *bytes, size_t n_bytes, const char *name, size_t max_pixels, int scaled,
                           ImageFolderScratch *scr, int *scale_eighths, char *err, size_t err_n) {
    ImageFolderCrop crop;
    const int random = mode == IMAGEFOLDER_RANDOM_CROP;
    static const uint8_t none[1] = {0}; /* no bytes are still bytes: never the path's (load_image reads it for NULL) */
    return load_image(out, S, C, mode, random ? 0 : short_side, random ? &rng_state : NULL, random ? &crop : NULL,
                      name, bytes ? bytes : none, bytes ? n_bytes : 0, max_pixels, scaled, scr, scale_eighths, err,
                      err_n);
}

/* --encoded: the file's bytes read once (st->file), decoded from those same bytes (a file replaced in between
 * is not written unchecked), and checked against what train reads: a record over TFRecord's 64 MiB limit or an
 * image with a side over 65535 pixels is skipped (why); one over the pipeline's default bounds is kept with a
 * note naming the --max_image_pixels that reads it (note, "" when none).  0 with *H, *W, *n_bytes, or -1. */
static int encoded_file(FolderState *st, const char *path, int *H, int *W, size_t *n_bytes, char *why, size_t why_n,
                        char *note, size_t note_n) {
    note[0] = '\0';
    const size_t max_record = TFR_DEFAULT_MAX_RECORD_N_BYTES - 4096; /* the Example's other bytes */
    ImageFolderScratch scr = {.file = st->file, .file_n_bytes = st->file_n_bytes}; /* the loader's reader, kept */
    const int whole = read_small_file(path, max_record, &scr, n_bytes, why, why_n);
    st->file = scr.file;
    st->file_n_bytes = scr.file_n_bytes;
    if (whole < 0) return -1;
    if (!whole) { /* larger than a record holds, or grown while read */
        struct stat sb;
        const size_t size = stat(path, &sb) == 0 && sb.st_size > 0 ? (size_t)sb.st_size : 0;
        if (size > max_record)
            snprintf(why, why_n, "%s: %zu bytes, over the %zu a TFRecord record holds for train and eval", path, size,
                     max_record);
        else
            snprintf(why, why_n, "%s: changed while read", path);
        return -1;
    }
    uint8_t *rgb, *owned;
    int oH, oW, m;
    DecodeWindow win = {0, 0, 0, 0};
    const DecodeWant want = {0, IMAGEFOLDER_RESIZE, 0, NULL, NULL, &win};
    if (decode_image(path, st->file, *n_bytes, &want, IMAGEFOLDER_MAX_PIXELS, NULL, &rgb, &owned, H, W, &oH, &oW, &m,
                     why, why_n) != 0)
        return -1;
    free(owned);
    if (*H > 65535 || *W > 65535) {
        snprintf(why, why_n, "%s: a %d x %d image: train and eval read no side over 65535 pixels", path, *W, *H);
        return -1;
    }
    /* train's bounds at its defaults: the decoded pixels, and 3 bytes a pixel + 1 MiB of the encoded bytes */
    const size_t pixels = (size_t)*H * (size_t)*W, by_bytes = pipeline_encoded_pixels_for(*n_bytes);
    size_t need = pixels > PIPELINE_DEFAULT_MAX_IMAGE_PIXELS ? pixels : 0;
    if (by_bytes > PIPELINE_DEFAULT_MAX_IMAGE_PIXELS && by_bytes > need) need = by_bytes;
    if (need)
        snprintf(note, note_n, "%s: a %d x %d image of %zu bytes: train and eval read it with --max_image_pixels %zu or "
                 "more (default %zu; kept)", path, *W, *H, *n_bytes, need, (size_t)PIPELINE_DEFAULT_MAX_IMAGE_PIXELS);
    return 0;
}

/* A file the source passes over: "WHY (skipped)", counted. */
static void skip_file(FolderState *st, const char *why) {
    char line[1200];
    snprintf(line, sizeof line, "%s (skipped)", why);
    warn_line(st, line);
    st->n_skipped++;
}

/* A file that did not load (errno as the load left it): skipped (0), or, where the machine failed and not the file,
 * -1 with err. */
static int skip_or_fail(FolderState *st, const char *why, char *err, size_t err_n) {
    if (imagefolder_failed_for_system(errno)) {
        snprintf(err, err_n, "%s" IMAGEFOLDER_SYSTEM_FAULT, why);
        return -1;
    }
    skip_file(st, why);
    return 0;
}

static int folder_next(ConvertSource *s, ConvertItem *item, char *err, size_t err_n) {
    FolderState *st = s->state;
    while (st->next < st->n_files) {
        const long k = st->order ? st->order[st->next] : st->next;
        st->next++;
        const FolderFile *f = &st->files[k];
        uint8_t *rgb;
        int H, W;
        char why[1024];
        if (st->cfg.encoded) { /* the file as stored, once its bytes decoded */
            size_t n_bytes;
            char note[1200];
            errno = 0;
            if (encoded_file(st, f->path, &H, &W, &n_bytes, why, sizeof why, note, sizeof note) != 0) {
                if (skip_or_fail(st, why, err, err_n) != 0) return -1;
                continue;
            }
            if (why[0]) warn_line(st, why); /* damaged JPEG data, decoded all the same */
            if (note[0]) warn_line(st, note);
            *item = (ConvertItem){.H = H, .W = W, .C = 3, .label = f->label, .encoded = st->file,
                                  .encoded_n_bytes = n_bytes};
            return 1;
        }
        errno = 0;
        if (imagefolder_decode(f->path, &rgb, &H, &W, why, sizeof why) != 0) {
            if (skip_or_fail(st, why, err, err_n) != 0) return -1;
            continue;
        }
        if (why[0]) warn_line(st, why); /* damaged JPEG data, decoded all the same */
        int tH, tW; /* as the pipeline bounds it: a 1 x 300000 image's centre crop at 4096 asked for 3.7 TB */
        target_size(st->cfg.image_size, st->cfg.mode, st->cfg.short_side, H, W, &tH, &tW);
        if (scale_check(f->path, tH, tW, H, W, H, W, IMAGEFOLDER_MAX_PIXELS, why, sizeof why) != 0) {
            skip_file(st, why);
            free(rgb);
            continue;
        }
        ImageFolderScratch scr = {.scaled = st->scaled, .scaled_n_bytes = st->scaled_n_bytes};
        int rc = imagefolder_transform(st->out, st->cfg.image_size, st->cfg.channels, st->cfg.mode, st->cfg.short_side,
                                       rgb, H, W, H, W, &scr);
        st->scaled = scr.scaled;
        st->scaled_n_bytes = scr.scaled_n_bytes;
        free(rgb);
        if (rc != 0) {
            snprintf(err, err_n, "%s: out of memory resizing a %d x %d image", f->path, W, H);
            return -1;
        }
        item->image = st->out;
        item->H = item->W = st->cfg.image_size;
        item->C = st->cfg.channels;
        item->label = f->label;
        return 1;
    }
    return 0;
}

int imagefolder_read_labels_text(const char *path, char **text, size_t *n_bytes, char *err, size_t err_n) {
    *text = NULL;
    *n_bytes = 0;
    const char *instead; /* a FIFO's open would wait for a writer: file_open_regular refuses it instead */
    FILE *f = file_open_regular(path, &instead);
    if (!f) {
        if (!instead && errno == ENOENT) return 0;
        if (!instead) snprintf(err, err_n, "%s: cannot open the labels file: %s", path, strerror(errno));
        else if (!strcmp(instead, "a directory")) snprintf(err, err_n, "%s: the labels file is a directory, not a regular file", path);
        else snprintf(err, err_n, "%s: the labels file is not a regular file (%s)", path, instead);
        return -1;
    }
    char *t = malloc(IMAGEFOLDER_MAX_LABELS_N_BYTES + 1);
    size_t n = t ? fread(t, 1, IMAGEFOLDER_MAX_LABELS_N_BYTES + 1, f) : 0;
    int read_error = ferror(f);
    fclose(f);
    if (!t || read_error || n > IMAGEFOLDER_MAX_LABELS_N_BYTES) {
        snprintf(err, err_n, "%s: %s", path, !t ? "out of memory" : read_error ? "read error" : "labels file over 1 MiB");
        free(t);
        return -1;
    }
    t[n] = '\0';
    *text = t;
    *n_bytes = n;
    return 1;
}

int imagefolder_parse_labels(const char *path, const char *text, size_t n, char ***names, int *n_names, char *err,
                             size_t err_n) {
    *names = NULL;
    *n_names = 0;
    if (n == 0 || memchr(text, '\0', n)) {
        snprintf(err, err_n, "%s: %s", path, n ? "labels file holds a NUL byte" : "empty labels file (expected one class name a line)");
        return -1;
    }
    int cap = 0, rc = 0;
    char **list = NULL;
    const char *const text_end = text + n;
    for (const char *line = text; line < text_end && !rc;) {
        const char *end = memchr(line, '\n', (size_t)(text_end - line));
        size_t len = end ? (size_t)(end - line) : (size_t)(text_end - line);
        if (len == 0) {
            snprintf(err, err_n, "%s: line %d is empty (expected one class name a line)", path, *n_names + 1);
            rc = -1;
            break;
        }
        for (int k = 0; k < *n_names && !rc; k++)
            if (strlen(list[k]) == len && !memcmp(list[k], line, len)) {
                snprintf(err, err_n, "%s: line %d repeats class '%.*s' of line %d", path, *n_names + 1, (int)(len > 200 ? 200 : len),
                         line, k + 1);
                rc = -1;
            }
        if (rc) break;
        if (*n_names == cap) {
            cap = cap ? 2 * cap : 16;
            char **q = realloc(list, (size_t)cap * sizeof *q);
            if (!q) {
                rc = -2;
                break;
            }
            list = q;
        }
        if (!(list[*n_names] = strndup(line, len))) {
            rc = -2;
            break;
        }
        (*n_names)++;
        line = end ? end + 1 : line + len;
    }
    if (rc) {
        if (rc == -2) snprintf(err, err_n, "%s: out of memory", path);
        free_names(list, *n_names);
        *n_names = 0;
        return -1;
    }
    *names = list;
    return 0;
}

int imagefolder_read_labels(const char *path, char ***names, int *n_names, char *err, size_t err_n) {
    *names = NULL;
    *n_names = 0;
    char *text;
    size_t n;
    const int got = imagefolder_read_labels_text(path, &text, &n, err, err_n);
    if (got == 0) snprintf(err, err_n, "%s: cannot open the labels file: %s", path, strerror(ENOENT));
    if (got <= 0) return -1;
    const int rc = imagefolder_parse_labels(path, text, n, names, n_names, err, err_n);
    free(text);
    return rc;
}

/* 1 when entry (a labels file's line) is name once a UTF-8 byte-order mark,
 * spaces and tabs before it and a CR, spaces and tabs after it are dropped:
 * a line that names the folder but for bytes an editor added. */
static int same_but_stray_bytes(const char *entry, const char *name) {
    if (!strncmp(entry, "\xef\xbb\xbf", 3)) entry += 3;
    while (*entry == ' ' || *entry == '\t') entry++;
    size_t n = strlen(entry);
    while (n > 0 && (entry[n - 1] == '\r' || entry[n - 1] == ' ' || entry[n - 1] == '\t')) n--;
    return n == strlen(name) && !memcmp(entry, name, n);
}

/* With cfg.labels_file: the classes are its lines, and each class folder
 * found must be one of them (its label is that line's index); without, the
 * classes are the folders.  0, or -1 with err. */
static int assign_labels(FolderState *st, const char *dir, char *err, size_t err_n) {
    st->folders = st->classes;
    st->n_folders = st->n_classes;
    if (!(st->folder_label = malloc((size_t)(st->n_folders > 0 ? st->n_folders : 1) * sizeof *st->folder_label))) {
        snprintf(err, err_n, "%s: out of memory", dir);
        return -1;
    }
    for (int c = 0; c < st->n_folders; c++) st->folder_label[c] = c;
    if (!st->cfg.labels_file) return 0;
    char **list;
    int n_list;
    if (imagefolder_read_labels(st->cfg.labels_file, &list, &n_list, err, err_n) != 0) return -1;
    st->classes = list;
    st->n_classes = n_list;
    int *has_folder = calloc((size_t)n_list, sizeof *has_folder);
    if (!has_folder) {
        snprintf(err, err_n, "%s: out of memory", dir);
        return -1;
    }
    for (int c = 0; c < st->n_folders; c++) {
        int k = 0;
        while (k < n_list && strcmp(list[k], st->folders[c])) k++;
        if (k == n_list) {
            const char *origin = st->cfg.labels_origin ? st->cfg.labels_origin : "--labels";
            int near = 0;
            while (near < n_list && !same_but_stray_bytes(list[near], st->folders[c])) near++;
            if (near < n_list) {
                char line[1024];
                snprintf(err, err_n, "%s/%s: class folder not in %s %s (%d classes): its line %d is '%s', the name with "
                         "stray bytes (CRLF line ends, a byte-order mark, spaces)", dir, st->folders[c], origin,
                         st->cfg.labels_file, n_list, near + 1, escape_str(line, sizeof line, list[near]));
            } else {
                snprintf(err, err_n, "%s/%s: class folder not in %s %s (%d classes): every split must share one class "
                         "list", dir, st->folders[c], origin, st->cfg.labels_file, n_list);
            }
            free(has_folder);
            return -1;
        }
        st->folder_label[c] = k;
        has_folder[k] = 1;
    }
    for (int k = 0; k < n_list; k++)
        if (!has_folder[k]) {
            char line[4200];
            snprintf(line, sizeof line, "%s: class %d ('%s') of %s has no folder here (no examples of it)", dir, k, list[k],
                     st->cfg.labels_file);
            warn_line(st, line);
        }
    free(has_folder);
    return 0;
}

ConvertSource *convert_open_imagefolder(const char *dir, const ImageFolderConfig *cfg, char *err, size_t err_n) {
    if (cfg->image_size < 1 || cfg->image_size > 4096) {
        snprintf(err, err_n, "image folder: image_size %d outside [1, 4096]", cfg->image_size);
        return NULL;
    }
    if (cfg->channels != 1 && cfg->channels != 3) {
        snprintf(err, err_n, "image folder: channels must be 1 or 3, got %d", cfg->channels);
        return NULL;
    }
    if (cfg->mode != IMAGEFOLDER_RESIZE && cfg->mode != IMAGEFOLDER_CENTER_CROP) {
        snprintf(err, err_n, "image folder: resize mode %d is not one a conversion uses (a random crop is drawn "
                 "anew each epoch, by the training pipeline)", (int)cfg->mode);
        return NULL;
    }
    if (!imagefolder_short_side_valid(cfg->mode, cfg->short_side, cfg->image_size)) {
        snprintf(err, err_n, "image folder: a shorter side of %d before the crop needs the center crop and at least "
                 "image_size %d", cfg->short_side, cfg->image_size);
        return NULL;
    }
    ConvertSource *s = calloc(1, sizeof *s);
    FolderState *st = calloc(1, sizeof *st);
    if (!s || !st) {
        free(s);
        free(st);
        snprintf(err, err_n, "image folder: out of memory");
        return NULL;
    }
    s->format = "imagefolder";
    s->next = folder_next;
    s->close = folder_close;
    s->state = st;
    st->cfg = *cfg;
    char **entries = NULL;
    int n_entries = 0;
    size_t dir_len = strlen(dir);
    char *path = NULL;
    long cap_files = 0;
    if (list_dir(dir, &entries, &n_entries) != 0) {
        snprintf(err, err_n, "%s: cannot read the image folder: %s", dir, strerror(errno));
        goto fail;
    }
    if (!(st->classes = calloc((size_t)(n_entries > 0 ? n_entries : 1), sizeof *st->classes))) goto oom;
    for (int i = 0; i < n_entries; i++) {
        if (!(path = malloc(dir_len + strlen(entries[i]) + 2))) goto oom;
        sprintf(path, "%s/%s", dir, entries[i]);
        struct stat sb;
        if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            if (strchr(entries[i], '\n')) {
                snprintf(err, err_n, "%s: a class folder name holds a newline, which labels.txt cannot store", path);
                goto fail;
            }
            st->classes[st->n_classes++] = entries[i];
            entries[i] = NULL;
        } else {
            char line[4200];
            snprintf(line, sizeof line, "%s: not inside a class folder (skipped)", path);
            warn_line(st, line);
            st->n_skipped++;
        }
        free(path);
        path = NULL;
    }
    if (st->n_classes == 0) {
        snprintf(err, err_n, "%s: no class folders (expected %s/<class>/*.png|jpg|jpeg)", dir, dir);
        goto fail;
    }
    if (assign_labels(st, dir, err, err_n) != 0) goto fail;
    for (int c = 0; c < st->n_folders; c++) {
        size_t cdir_n = dir_len + strlen(st->folders[c]) + 2;
        char *cdir = malloc(cdir_n);
        if (!cdir) goto oom;
        snprintf(cdir, cdir_n, "%s/%s", dir, st->folders[c]);
        char **names;
        int n_names;
        if (list_dir(cdir, &names, &n_names) != 0) {
            snprintf(err, err_n, "%s: cannot read the class folder: %s", cdir, strerror(errno));
            free(cdir);
            goto fail;
        }
        long found = 0;
        for (int i = 0; i < n_names; i++) {
            size_t fp_n = cdir_n + strlen(names[i]) + 1;
            char *fp = malloc(fp_n);
            if (!fp) {
                free_names(names, n_names);
                free(cdir);
                goto oom;
            }
            snprintf(fp, fp_n, "%s/%s", cdir, names[i]);
            struct stat sb;
            int stat_rc = stat(fp, &sb), stat_errno = errno;
            if (stat_rc != 0 || !S_ISREG(sb.st_mode)) {
                char line[8400], why[4200], target[4096];
                snprintf(why, sizeof why, "%s",
                         stat_rc != 0 ? strerror(stat_errno)
                         : S_ISDIR(sb.st_mode) ? "a folder inside a class folder (subfolders are not read)"
                         : S_ISFIFO(sb.st_mode) ? "a pipe or FIFO, not a regular file"
                         : S_ISSOCK(sb.st_mode) ? "a socket, not a regular file"
                         : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "a device, not a regular file"
                                                                      : "not a regular file");
                ssize_t target_n = stat_rc != 0 && stat_errno == ENOENT ? readlink(fp, target, sizeof target - 1) : -1;
                if (target_n >= 0) { /* a link whose target is missing: ENOENT alone named no file that is missing */
                    target[target_n] = '\0';
                    snprintf(why, sizeof why, "a symbolic link to %s, which does not exist", target);
                }
                snprintf(line, sizeof line, "%s: %s (skipped)", fp, why);
                warn_line(st, line);
                st->n_skipped++;
                free(fp);
                continue;
            }
            if (st->n_files == cap_files) {
                long cap = cap_files ? 2 * cap_files : 256;
                FolderFile *nf = realloc(st->files, (size_t)cap * sizeof *nf);
                if (!nf) {
                    free(fp);
                    free_names(names, n_names);
                    free(cdir);
                    goto oom;
                }
                st->files = nf;
                cap_files = cap;
            }
            st->files[st->n_files].path = fp;
            st->files[st->n_files].label = st->folder_label[c];
            st->n_files++;
            st->files_n_bytes += (uint64_t)sb.st_size;
            found++;
        }
        if (found == 0) {
            char line[4200];
            snprintf(line, sizeof line, "%s: class %d ('%s') has no files", cdir, st->folder_label[c], st->folders[c]);
            warn_line(st, line);
        }
        free_names(names, n_names);
        free(cdir);
    }
    s->n_examples = st->n_files;
    if (!(st->out = malloc((size_t)cfg->image_size * cfg->image_size * cfg->channels))) goto oom;
    if (cfg->shuffle && st->n_files > 1) { /* Fisher-Yates over the listing, of (shuffle_seed) alone */
        if (!(st->order = malloc((size_t)st->n_files * sizeof *st->order))) goto oom;
        for (long i = 0; i < st->n_files; i++) st->order[i] = i;
        uint64_t rng = rng_seed(cfg->shuffle_seed, RNG_STREAM_SHUFFLE, 0);
        for (long i = st->n_files - 1; i > 0; i--) {
            const long j = (long)rng_below(&rng, (uint64_t)i + 1);
            const long t = st->order[i];
            st->order[i] = st->order[j];
            st->order[j] = t;
        }
    }
    free_names(entries, n_entries);
    return s;
oom:
    snprintf(err, err_n, "%s: out of memory listing the image folder", dir);
fail:
    free(path);
    free_names(entries, n_entries);
    folder_close(s);
    return NULL;
}

const char *const *imagefolder_classes(const ConvertSource *src, int *n_classes) {
    const FolderState *st = src->state;
    *n_classes = st->n_classes;
    return (const char *const *)st->classes;
}

long imagefolder_n_skipped(const ConvertSource *src) { return ((const FolderState *)src->state)->n_skipped; }

int imagefolder_write_labels(const ConvertSource *src, const char *path, char *err, size_t err_n) {
    const FolderState *st = src->state;
    size_t tmp_n = strlen(path) + 5;
    char *tmp = malloc(tmp_n);
    if (!tmp) {
        snprintf(err, err_n, "%s: out of memory", path);
        return -1;
    }
    snprintf(tmp, tmp_n, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(err, err_n, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    for (int c = 0; c < st->n_classes; c++) fprintf(f, "%s\n", st->classes[c]);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        snprintf(err, err_n, "%s: write error: %s", tmp, strerror(errno));
        remove(tmp);
        free(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        snprintf(err, err_n, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        remove(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}

long imagefolder_n_files(const ConvertSource *src) { return ((const FolderState *)src->state)->n_files; }

uint64_t imagefolder_files_n_bytes(const ConvertSource *src) {
    return ((const FolderState *)src->state)->files_n_bytes;
}

const char *imagefolder_file(const ConvertSource *src, long i, int *label) {
    const FolderState *st = src->state;
    *label = st->files[i].label;
    return st->files[i].path;
}

int imagefolder_is_folder(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return 0;
    char **names;
    int n, found = 0;
    if (list_dir(path, &names, &n) != 0) return 1; /* opening it as a folder says why it cannot be read */
    size_t len = strlen(path);
    for (int i = 0; i < n && !found; i++) {
        char *p = malloc(len + strlen(names[i]) + 2);
        if (!p) break;
        sprintf(p, "%s/%s", path, names[i]);
        found = stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
        free(p);
    }
    free_names(names, n);
    return found;
}

size_t imagefolder_listing_n_bytes(const char *dir) {
    char **classes;
    int n_classes;
    if (list_dir(dir, &classes, &n_classes) != 0) return 0;
    size_t dir_len = strlen(dir), total = 0;
    for (int c = 0; c < n_classes; c++) {
        size_t cdir_len = dir_len + strlen(classes[c]) + 2;
        total += 2 * (strlen(classes[c]) + 1 + sizeof(char *)) + sizeof(int);
        char *cdir = malloc(cdir_len);
        if (!cdir) break;
        snprintf(cdir, cdir_len, "%s/%s", dir, classes[c]);
        char **names;
        int n_names;
        if (list_dir(cdir, &names, &n_names) == 0) {
            /* each file: its path and its FolderFile, in an array doubled as it grows */
            for (int i = 0; i < n_names; i++) total += cdir_len + strlen(names[i]) + 1 + 2 * sizeof(FolderFile);
            free_names(names, n_names);
        }
        free(cdir);
    }
    free_names(classes, n_classes);
    return total + 256 * sizeof(FolderFile) + sizeof(FolderState) + sizeof(ConvertSource);
}
