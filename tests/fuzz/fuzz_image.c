/* fuzz_image.c — fuzz target of the image-folder decoders of `tower convert
 * --from imagefolder` (io/imagefolder.h: PNG through libpng, JPEG through
 * libjpeg-turbo, then PIL-style resizing).
 *
 * Where it sits: tests/fuzz/; offline, before training.  The input is one
 * image file.  It is written to DIR/cls/img (tmpfs) and goes
 *   1. through imagefolder_decode (format from the content);
 *   2. for files that do not decode and images of at most
 *      SOURCE_MAX_PIXELS, through the whole source:
 *      convert_open_imagefolder(DIR) and next(), which decodes again,
 *      resizes (or resizes and crops) and converts to grey or keeps RGB.
 *      The last input byte picks the configuration: image_size
 *      1 + (b & 63), channels 1 when b & 64, center-crop when b & 128 (a
 *      PNG or JPEG ignores bytes after its end);
 *   3. with the same configuration, through imagefolder_load (the input
 *      pipeline's loader: the file read whole, JPEGs decoded from memory
 *      into buffers kept from one input to the next), at full size and at
 *      libjpeg's reduced scale (at most SCALED_MAX_PIXELS decoded);
 *   4. through imagefolder_load_random_crop (the training crop, its decode
 *      scale chosen from the crop), a crop inside the image or one line.
 * Invariants: a PNG that libpng's own simplified reader (png_image_*)
 * reads as RGB decodes, at the same size; a file that does not decode is
 * one warning line naming it and is skipped (the source never fails for
 * it); a JPEG kept though its data is damaged gives one warning line
 * naming it from each of the decoder, the source and the full-size load,
 * and a good image none; decode and source agree on
 * which files are good, and so does imagefolder_load at full size, with
 * the source's bytes; a good image is at least 1 x 1 and at most
 * IMAGEFOLDER_MAX_PIXELS; the item has the configured shape; with RGB
 * output and image_size equal to both sides, the item is the decoded
 * image itself.
 * What it does not do: it does not fuzz libpng or libjpeg-turbo themselves
 * (they are not built with coverage here), only what Tower does with them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <png.h>

#include "fuzz_common.h"
#include "io/imagefolder.h"

#define ORACLE_MAX_PIXELS ((size_t)1 << 22)
#define SOURCE_MAX_PIXELS ((size_t)1 << 18)
/* The bound of step 3's reduced-scale load: a JPEG too large to decode whole can still load at an eighth of its
 * size (785 M pixels from 237 bytes: 12 M at 1/8), and resizing those under the coverage instrumentation took
 * 2.5 s an input; above this bound the load refuses it, one line, as the pipeline does over its own. */
#define SCALED_MAX_PIXELS SOURCE_MAX_PIXELS

/* libpng's own simplified reader as an oracle: 1 when it reads data as a
 * PNG (as RGB, at most ORACLE_MAX_PIXELS), with its size in *H, *W. */
static int libpng_reads(const uint8_t *data, size_t size, int *H, int *W) {
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&img, data, size)) return 0;
    int ok = 0;
    img.format = PNG_FORMAT_RGB;
    if ((size_t)img.width * img.height <= ORACLE_MAX_PIXELS) {
        uint8_t *buf = malloc(PNG_IMAGE_SIZE(img));
        FUZZ_REQUIRE(buf != NULL, "out of memory");
        ok = png_image_finish_read(&img, NULL, buf, 0, NULL) != 0;
        *H = (int)img.height;
        *W = (int)img.width;
        free(buf);
    }
    png_image_free(&img);
    return ok;
}

typedef struct {
    int n;
    char line[1200];
} Warnings;

static void on_warn(void *ctx, const char *line) {
    Warnings *w = ctx;
    w->n++;
    snprintf(w->line, sizeof w->line, "%s", line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char dir[512], path[600];
    if (!dir[0]) {
        char cls[560];
        snprintf(dir, sizeof dir, "%s/folder", fuzz_scratch_dir());
        snprintf(cls, sizeof cls, "%s/cls", dir);
        FUZZ_REQUIRE(mkdir(dir, 0755) == 0 && mkdir(cls, 0755) == 0, "mkdir %s failed", cls);
        snprintf(path, sizeof path, "%s/img", cls);
    }
    if (size > ((size_t)16 << 20)) return 0;
    fuzz_write_path(path, data, size);

    /* 1. the decoder alone. */
    uint8_t *pixels = NULL;
    int H = 0, W = 0;
    char err[1024];
    int decoded = imagefolder_decode(path, &pixels, &H, &W, err, sizeof err) == 0;
    /* kept though libjpeg found its data damaged: err holds the warning line */
    const int damaged = decoded && err[0];
    if (damaged) {
        fuzz_require_line(err, path, "imagefolder_decode's warning");
        FUZZ_REQUIRE(strstr(err, "damaged JPEG data") != NULL, "a warning that is not about damaged data: %s", err);
    }
    if (decoded) {
        FUZZ_REQUIRE(pixels && H >= 1 && W >= 1 && (size_t)H * W <= IMAGEFOLDER_MAX_PIXELS, "decoded %d x %d", H, W);
        /* Every byte read (the sanitizers see an image shorter than its size); past ORACLE_MAX_PIXELS each row's
         * first and last bytes only: a 240-byte JPEG can say 65289 x 1791, and summing its 350 MB under the
         * coverage instrumentation took over a second an input. */
        volatile unsigned sink = 0;
        const size_t row = (size_t)W * 3;
        if ((size_t)H * W <= ORACLE_MAX_PIXELS)
            for (size_t i = 0; i < (size_t)H * row; i++) sink += pixels[i];
        else
            for (size_t y = 0; y < (size_t)H; y++) sink += pixels[y * row] + pixels[y * row + row - 1];
        (void)sink;
    } else {
        FUZZ_REQUIRE(pixels == NULL, "imagefolder_decode failed but left pixels");
        fuzz_require_line(err, path, "imagefolder_decode");
    }
    int oH, oW;
    if (libpng_reads(data, size, &oH, &oW))
        FUZZ_REQUIRE(decoded && oH == H && oW == W, "libpng reads a %d x %d PNG that imagefolder_decode %s (%s)", oW, oH,
                     decoded ? "reads at another size" : "refuses", decoded ? "" : err);

    /* 2. the source, with the configuration of the last byte.  Resizing is
     * linear in the pixels and the same code at every size: images over
     * SOURCE_MAX_PIXELS (a 300-byte PNG can hold millions) skip this step,
     * which would otherwise take most of the target's time. */
    if (decoded && (size_t)H * W > SOURCE_MAX_PIXELS) {
        free(pixels);
        return 0;
    }
    uint8_t b = size ? data[size - 1] : 0;
    ImageFolderConfig cfg;
    imagefolder_config_defaults(&cfg);
    cfg.image_size = 1 + (b & 63);
    cfg.channels = b & 64 ? 1 : 3;
    cfg.mode = b & 128 ? IMAGEFOLDER_CENTER_CROP : IMAGEFOLDER_RESIZE;
    Warnings w = {0, ""};
    cfg.warn = on_warn;
    cfg.warn_ctx = &w;
    ConvertSource *src = convert_open_imagefolder(dir, &cfg, err, sizeof err);
    FUZZ_REQUIRE(src != NULL, "convert_open_imagefolder failed: %s", err);
    ConvertItem item;
    int rc = src->next(src, &item, err, sizeof err);
    FUZZ_REQUIRE(rc == (decoded ? 1 : 0), "next returned %d for a file imagefolder_decode %s (%s)", rc,
                 decoded ? "decodes" : "refuses", rc < 0 ? err : "");
    /* 3. the input pipeline's loader: the file read whole, decoded from memory into buffers kept from input to
     * input (static scr), at full size and at libjpeg's reduced scale. */
    static ImageFolderScratch scr;
    const int S = cfg.image_size, C = cfg.channels;
    uint8_t *loaded = malloc((size_t)S * S * C);
    FUZZ_REQUIRE(loaded != NULL, "out of memory");
    int scale_eighths = 0;
    char lerr[1024];
    const int lrc = imagefolder_load(loaded, S, C, cfg.mode, cfg.short_side, path, IMAGEFOLDER_MAX_PIXELS, 0, &scr, &scale_eighths, lerr,
                                     sizeof lerr);
    /* the loader also refuses what would scale past its bound (a 1 x 200000 image cropped to 64: 12.8 M x 64) */
    FUZZ_REQUIRE(rc == 1 ? lrc == 0 || strstr(lerr, "does not scale") : lrc != 0,
                 "imagefolder_load returned %d for a file the source %s (%s)", lrc, rc == 1 ? "reads" : "skips",
                 lrc ? lerr : "");
    if (lrc != 0) fuzz_require_line(lerr, path, "imagefolder_load");
    if (lrc == 0 && rc == 1) {
        FUZZ_REQUIRE(scale_eighths == 8 && !memcmp(loaded, item.image, (size_t)S * S * C),
                     "imagefolder_load's %d x %d x %d differs from the source's", S, S, C);
        FUZZ_REQUIRE(!lerr[0] == !damaged, "imagefolder_load %s a warning where imagefolder_decode %s one (%s)",
                     lerr[0] ? "gives" : "gives no", damaged ? "gives" : "gives no", lerr);
    }
    if (imagefolder_load(loaded, S, C, cfg.mode, cfg.short_side, path, SCALED_MAX_PIXELS, 1, &scr, &scale_eighths, lerr, sizeof lerr) != 0)
        fuzz_require_line(lerr, path, "imagefolder_load, scaled");
    else
        FUZZ_REQUIRE(scale_eighths >= 1 && scale_eighths <= 8, "scale %d/8", scale_eighths);
    /* 4. the training pipeline's random crop (its scale chosen from the crop), a stream from the input's size */
    ImageFolderCrop crop = {-1, -1, 0, 0, 0};
    if (imagefolder_load_random_crop(loaded, S, C, (uint64_t)size * 0x9e3779b97f4a7c15ull, path, SCALED_MAX_PIXELS, 1,
                                     &scr, &crop, &scale_eighths, lerr, sizeof lerr) != 0) {
        fuzz_require_line(lerr, path, "imagefolder_load_random_crop");
    } else {
        FUZZ_REQUIRE(crop.x >= 0 && crop.y >= 0 && crop.w >= 1 && crop.h >= 1 && (crop.flip == 0 || crop.flip == 1),
                     "random crop %d,%d %dx%d flip %d", crop.x, crop.y, crop.w, crop.h, crop.flip);
    }
    free(loaded);
    if (rc == 1) {
        FUZZ_REQUIRE(item.H == S && item.W == S && item.C == C && item.label == 0, "item %d x %d x %d, label %lld", item.H, item.W,
                     item.C, (long long)item.label);
        if (C == 3 && H == S && W == S)
            FUZZ_REQUIRE(!memcmp(item.image, pixels, (size_t)S * S * 3), "a %d x %d image at its own size changed", S, S);
        FUZZ_REQUIRE(w.n == damaged && imagefolder_n_skipped(src) == 0, "%d warnings for a good image%s: %s", w.n,
                     damaged ? " of damaged data (one expected)" : "", w.line);
        if (damaged) fuzz_require_line(w.line, path, "the source's warning of damaged data");
        FUZZ_REQUIRE(src->next(src, &item, err, sizeof err) == 0, "a second item from one file");
    } else {
        FUZZ_REQUIRE(w.n == 1 && imagefolder_n_skipped(src) == 1, "%d warnings, %ld skipped for a bad file", w.n,
                     imagefolder_n_skipped(src));
        fuzz_require_line(w.line, path, "imagefolder warning");
    }
    src->close(src);
    free(pixels);
    return 0;
}
