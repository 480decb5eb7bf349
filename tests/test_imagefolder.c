/* test_imagefolder.c — image-folder datasets (io/imagefolder.h), on images made here.
 *
 * What it proves: the tiny PNGs (RGB, grey, 16-bit grey, RGBA, palette) and JPEGs this
 * test writes with libpng and libjpeg decode to the colours written; labels
 * follow the sorted class folder names; resampling keeps constant images
 * constant, enlarges with bilinear weights, keeps left/right and top/bottom
 * where they were, and gives, on fresh random images of random sizes, the
 * bytes of a plain two-pass oracle written here; the centre crop keeps the centre; grey output is
 * PIL's luma; every unreadable or non-image file is skipped with exactly
 * one warning naming it; convert_run writes every good image with its label
 * and labels.txt lists the classes.
 *
 * Modes:
 *   test_imagefolder                  the unit tests
 *   test_imagefolder make DIR N       a small dataset for tests/test_eco_cli.sh:
 *       DIR/{circle,cross,square}/ with N 28x28 grey images each (PNG and
 *       JPEG), plus two files that must be skipped (broken.png, notes.txt)
 *   test_imagefolder load PATH S MODE OUT
 *       decode PATH at full size and resize it to S x S RGB as the
 *       converter and the pipeline do (MODE: resize, center_crop, or
 *       center_crop/R: the shorter side scaled to R >= S first), the
 *       S*S*3 bytes into OUT (tests/interop/pil_interop.py compares them
 *       with PIL's); exit 1 with one line on an error
 *   test_imagefolder crop PATH S X Y W H FLIP OUT
 *       decode PATH at full size, crop the W x H rectangle at (X, Y), resize
 *       it to S x S RGB and mirror it where FLIP is 1
 *       (imagefolder_transform_crop), the bytes into OUT
 *   test_imagefolder boxes H W SEED N
 *       N random crops of an H x W image (imagefolder_random_crop, the
 *       stream (SEED, crop, i) for the i-th), one "x y w h flip" line each
 *       (tests/interop/crop_interop.py compares their distribution with
 *       TensorFlow's sample_distorted_bounding_box)
 *
 * The random crop (IMAGEFOLDER_RANDOM_CROP): every crop lies in the image,
 * covers at least a tenth of it (or is the whole image), has width
 * round(h a) for an aspect a in [0.75, 1.33], is a pure function of its
 * stream, flips about half the time, and decodes a large JPEG at a reduced
 * scale only where the crop still covers S x S; its pixels are the plain
 * resize of the crop's pixels, mirrored where it flips; a JPEG decoded
 * through the crop's window is within one level of the whole decode.
 */
#include <math.h>
#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>

#include "io/convert.h"
#include "io/example.h"
#include "io/imagefolder.h"
#include "io/rng.h"
#include "io/tfrecord.h"

#include "tests/check.h"
#include "tests/image_write.h"
#include "tests/resize_oracle.h"

/* ---------------------------------------------------------------- writing test images */

static void write_jpeg(const char *path, int H, int W, int C, const uint8_t *pixels, int quality) {
    write_jpeg_as(path, H, W, C, pixels, quality, 0);
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        perror(path);
        exit(1);
    }
    fclose(f);
}

/* The first n bytes of src copied to dst (a truncated file). */
static void write_truncated(const char *dst, const char *src, double keep) {
    FILE *f = fopen(src, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) exit(1);
    fclose(f);
    write_bytes(dst, b, (size_t)(n * keep));
    free(b);
}

static uint8_t *solid(int H, int W, int C, const uint8_t *color) {
    uint8_t *p = malloc((size_t)H * W * C);
    for (int i = 0; i < H * W; i++) memcpy(p + (size_t)i * C, color, (size_t)C);
    return p;
}

static void mkdir_or_die(const char *path) {
    if (mkdir(path, 0755) != 0) {
        perror(path);
        exit(1);
    }
}

/* ---------------------------------------------------------------- the warning collector */

typedef struct {
    char lines[32][1024];
    int n;
} Warnings;

static void collect(void *ctx, const char *line) {
    Warnings *w = ctx;
    if (w->n < 32) snprintf(w->lines[w->n], sizeof w->lines[0], "%s", line);
    w->n++;
}

static int warned_about(const Warnings *w, const char *name) {
    int k = 0;
    for (int i = 0; i < w->n && i < 32; i++)
        if (strstr(w->lines[i], name)) k++;
    return k;
}

/* ---------------------------------------------------------------- unit tests */

static void test_resize(void) {
    /* Enlarging 1x2 -> 1x4 is bilinear with half-pixel centres: 0, 25, 75, 100. */
    uint8_t src[2] = {0, 100}, dst[4];
    CHECK(imagefolder_resize(dst, 1, 4, src, 1, 2, 1) == 0, "resize");
    CHECK(dst[0] == 0 && dst[1] == 25 && dst[2] == 75 && dst[3] == 100, "1x2 -> 1x4: %d %d %d %d", dst[0], dst[1],
          dst[2], dst[3]);
    /* Same along the other axis. */
    CHECK(imagefolder_resize(dst, 4, 1, src, 2, 1, 1) == 0, "resize");
    CHECK(dst[0] == 0 && dst[1] == 25 && dst[2] == 75 && dst[3] == 100, "2x1 -> 4x1: %d %d %d %d", dst[0], dst[1],
          dst[2], dst[3]);
    /* Constant images stay constant, whatever the sizes. */
    uint8_t color[3] = {12, 200, 77};
    uint8_t *c = solid(37, 53, 3, color), out[13 * 7 * 3];
    CHECK(imagefolder_resize(out, 13, 7, c, 37, 53, 3) == 0, "resize");
    int same = 1;
    for (int i = 0; i < 13 * 7; i++) same &= !memcmp(out + 3 * i, color, 3);
    CHECK(same, "a constant 37x53 image is not constant at 13x7");
    uint8_t big[90 * 70 * 3];
    CHECK(imagefolder_resize(big, 90, 70, c, 37, 53, 3) == 0, "resize");
    same = 1;
    for (int i = 0; i < 90 * 70; i++) same &= !memcmp(big + 3 * i, color, 3);
    CHECK(same, "a constant 37x53 image is not constant at 90x70");
    free(c);
    /* Shrinking averages: a 1-pixel checkerboard halved is mid-grey, not aliased to one phase. */
    uint8_t cb[8 * 8], half[4 * 4];
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 8; x++) cb[y * 8 + x] = (uint8_t)(((x + y) & 1) ? 255 : 0);
    CHECK(imagefolder_resize(half, 4, 4, cb, 8, 8, 1) == 0, "resize");
    for (int i = 0; i < 16; i++) CHECK(half[i] > 90 && half[i] < 165, "checkerboard halved: pixel %d is %d", i, half[i]);
    /* Shrinking by 4 sees every input pixel: a bright pixel in each group of 4 is not lost between samples. */
    uint8_t stripes[16], quarter[4];
    for (int x = 0; x < 16; x++) stripes[x] = x % 4 == 3 ? 255 : 0;
    CHECK(imagefolder_resize(quarter, 1, 4, stripes, 1, 16, 1) == 0, "resize");
    for (int x = 0; x < 4; x++) CHECK(quarter[x] > 40 && quarter[x] < 90, "1-in-4 stripes shrunk by 4: pixel %d is %d", x, quarter[x]);
    /* Orientation: left half dark and right half bright stay so; same for top/bottom. */
    uint8_t lr[8 * 8], tb[8 * 8], o[4 * 4];
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 8; x++) {
            lr[y * 8 + x] = x < 4 ? 10 : 240;
            tb[y * 8 + x] = y < 4 ? 10 : 240;
        }
    imagefolder_resize(o, 4, 4, lr, 8, 8, 1);
    for (int y = 0; y < 4; y++) CHECK(o[y * 4] < 60 && o[y * 4 + 3] > 190, "left/right lost in row %d", y);
    imagefolder_resize(o, 4, 4, tb, 8, 8, 1);
    for (int x = 0; x < 4; x++) CHECK(o[x] < 60 && o[12 + x] > 190, "top/bottom lost in column %d", x);
    /* Same size: a copy. */
    uint8_t id[8 * 8];
    imagefolder_resize(id, 8, 8, lr, 8, 8, 1);
    CHECK(!memcmp(id, lr, 64), "same size is not a copy");
}

static void test_resize_oracle(void) { check_failures += resize_oracle_check("the dispatched path"); }

static void test_folder(void) {
    char dir[] = "/tmp/tower_test_imagefolder_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    char p[4096], q[4096];
    /* Classes given out of order on disk; labels follow the sorted names: a_cat 0, b_dog 1, c_bird 2. */
    const char *classes[] = {"b_dog", "c_bird", "a_cat"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, classes[i]);
        mkdir_or_die(p);
    }
    uint8_t red[3] = {255, 0, 0}, green[3] = {0, 200, 0}, blue_a[4] = {0, 0, 255, 40}, grey[1] = {90};
    /* a_cat: an RGB PNG (8x6), a grey PNG, a green JPEG, and files to skip. */
    uint8_t *img = solid(6, 8, 3, red);
    snprintf(p, sizeof p, "%s/a_cat/1.png", dir);
    write_png(p, 6, 8, PNG_FORMAT_RGB, img, NULL, 0);
    free(img);
    img = solid(5, 5, 1, grey);
    snprintf(p, sizeof p, "%s/a_cat/2_grey.PNG", dir);
    write_png(p, 5, 5, PNG_FORMAT_GRAY, img, NULL, 0);
    free(img);
    img = solid(16, 16, 3, green);
    snprintf(p, sizeof p, "%s/a_cat/3.jpg", dir);
    write_jpeg(p, 16, 16, 3, img, 100);
    free(img);
    /* A noisy 64x64 JPEG cut at 70%: the end of the file falls inside the scan data. */
    img = malloc(64 * 64 * 3);
    for (int i = 0; i < 64 * 64 * 3; i++) img[i] = (uint8_t)((i * 2654435761u) >> 24);
    snprintf(p, sizeof p, "%s/noisy.jpg", dir);
    write_jpeg(p, 64, 64, 3, img, 90);
    snprintf(q, sizeof q, "%s/a_cat/trunc.jpg", dir);
    write_truncated(q, p, 0.7);
    remove(p);
    free(img);
    snprintf(p, sizeof p, "%s/a_cat/bad.png", dir);
    write_bytes(p, "this is not a png", 17);
    snprintf(p, sizeof p, "%s/a_cat/empty.jpeg", dir);
    write_bytes(p, "", 0);
    snprintf(p, sizeof p, "%s/a_cat/notes.txt", dir);
    write_bytes(p, "notes\n", 6);
    snprintf(p, sizeof p, "%s/a_cat/.hidden", dir);
    write_bytes(p, "x", 1);
    snprintf(p, sizeof p, "%s/a_cat/sub", dir);
    mkdir_or_die(p);
    /* b_dog: a 16-bit grey PNG (the high byte is kept: 0xff00 -> 255, where scaling would give 254), a palette PNG (2 colours) and a truncated PNG. */
    uint16_t g16[3 * 3];
    for (int i = 0; i < 9; i++) g16[i] = 0xff00;
    snprintf(p, sizeof p, "%s/b_dog/g16.png", dir);
    write_png(p, 3, 3, PNG_FORMAT_LINEAR_Y, (const uint8_t *)g16, NULL, 0);
    uint8_t cmap[6] = {10, 20, 30, 200, 100, 50}, idx[4 * 4];
    for (int i = 0; i < 16; i++) idx[i] = 1;
    snprintf(p, sizeof p, "%s/b_dog/pal.png", dir);
    write_png(p, 4, 4, PNG_FORMAT_RGB_COLORMAP, idx, cmap, 2);
    img = solid(40, 40, 3, red);
    snprintf(q, sizeof q, "%s/b_dog/full.png", dir);
    write_png(q, 40, 40, PNG_FORMAT_RGB, img, NULL, 0);
    snprintf(p, sizeof p, "%s/b_dog/trunc.png", dir);
    write_truncated(p, q, 0.6);
    remove(q);
    free(img);
    /* c_bird: an RGBA PNG (alpha dropped, colour kept). */
    img = solid(3, 3, 4, blue_a);
    snprintf(p, sizeof p, "%s/c_bird/x.png", dir);
    write_png(p, 3, 3, PNG_FORMAT_RGBA, img, NULL, 0);
    free(img);
    /* A file outside the class folders. */
    snprintf(p, sizeof p, "%s/README", dir);
    write_bytes(p, "readme\n", 7);

    /* Decoding alone. */
    uint8_t *pix;
    int H, W;
    char err[1024];
    snprintf(p, sizeof p, "%s/a_cat/1.png", dir);
    CHECK(imagefolder_decode(p, &pix, &H, &W, err, sizeof err) == 0 && H == 6 && W == 8, "decode 1.png: %s", err);
    if (pix) CHECK(pix[0] == 255 && pix[1] == 0 && pix[2] == 0 && pix[3 * 47] == 255, "1.png is not red");
    free(pix);
    snprintf(p, sizeof p, "%s/a_cat/bad.png", dir);
    CHECK(imagefolder_decode(p, &pix, &H, &W, err, sizeof err) == -1 && strstr(err, p) && !strchr(err, '\n'),
          "bad.png: '%s'", err);

    /* imagefolder_load (the file read whole, decoded from its bytes into kept buffers) against imagefolder_decode
     * (from the open file, into a buffer of its own) and imagefolder_transform: the same pixels for every good
     * file, the same one line for every bad one, whichever file came before (the kept buffers). */
    const char *files[] = {"a_cat/1.png",  "a_cat/2_grey.PNG", "a_cat/3.jpg",   "a_cat/bad.png", "a_cat/trunc.jpg",
                           "b_dog/g16.png", "b_dog/pal.png",   "b_dog/trunc.png", "c_bird/x.png", "a_cat/1.png"};
    ImageFolderScratch kept = {0}, own = {0};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        enum { S = 5 };
        uint8_t loaded[S * S * 3], want_px[S * S * 3];
        char lerr[1024];
        int m = 0;
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        const int lrc = imagefolder_load(loaded, S, 3, IMAGEFOLDER_RESIZE, 0, p, IMAGEFOLDER_MAX_PIXELS, 0, &kept, &m,
                                         lerr, sizeof lerr);
        const int drc = imagefolder_decode(p, &pix, &H, &W, err, sizeof err);
        CHECK(lrc == drc, "%s: imagefolder_load %d, imagefolder_decode %d (%s)", files[i], lrc, drc, lrc ? lerr : err);
        if (lrc == 0 && drc == 0) {
            CHECK(imagefolder_transform(want_px, S, 3, IMAGEFOLDER_RESIZE, 0, pix, H, W, H, W, &own) == 0, "transform");
            CHECK(!memcmp(loaded, want_px, sizeof loaded), "%s: imagefolder_load's pixels differ", files[i]);
        } else if (lrc != 0 && drc != 0) {
            CHECK(!strcmp(lerr, err) && strstr(lerr, p) && !strchr(lerr, '\n'),
                  "%s: imagefolder_load says '%s', imagefolder_decode '%s'", files[i], lerr, err);
        }
        free(pix);
        pix = NULL;
    }
    imagefolder_scratch_free(&kept);
    imagefolder_scratch_free(&own);

    /* The source, RGB 4x4, resize. */
    Warnings warn = {.n = 0};
    ImageFolderConfig cfg;
    imagefolder_config_defaults(&cfg);
    CHECK(cfg.image_size == 32 && cfg.channels == 3 && cfg.mode == IMAGEFOLDER_RESIZE, "defaults");
    cfg.image_size = 4;
    cfg.warn = collect;
    cfg.warn_ctx = &warn;
    ConvertSource *src = convert_open_imagefolder(dir, &cfg, err, sizeof err);
    CHECK(src != NULL, "open: %s", err);
    if (!src) return;
    int n_classes;
    const char *const *names = imagefolder_classes(src, &n_classes);
    CHECK(n_classes == 3 && !strcmp(names[0], "a_cat") && !strcmp(names[1], "b_dog") && !strcmp(names[2], "c_bird"),
          "classes not sorted");
    /* Candidates: a_cat 1.png, 2_grey.PNG, 3.jpg, bad.png, empty.jpeg, notes.txt, trunc.jpg; b_dog g16.png,
     * pal.png, trunc.png; c_bird x.png. */
    CHECK(src->n_examples == 11, "%ld candidate files, expected 11", src->n_examples);
    struct {
        int label;
        uint8_t rgb[3];
        int tol;
    } want[] = {{0, {255, 0, 0}, 0},   {0, {90, 90, 90}, 0},    {0, {0, 200, 0}, 4},
                {1, {255, 255, 255}, 0}, {1, {200, 100, 50}, 0}, {2, {0, 0, 255}, 0}};
    ConvertItem item;
    int k = 0, got;
    while ((got = src->next(src, &item, err, sizeof err)) == 1) {
        CHECK(item.H == 4 && item.W == 4 && item.C == 3, "item %d is %dx%dx%d", k, item.H, item.W, item.C);
        if (k < 6) {
            CHECK(item.label == want[k].label, "item %d label %ld, expected %d", k, (long)item.label, want[k].label);
            int ok = 1;
            for (int i = 0; i < 16 * 3; i++) ok &= abs(item.image[i] - want[k].rgb[i % 3]) <= want[k].tol;
            CHECK(ok, "item %d: pixel (%d %d %d), expected (%d %d %d)", k, item.image[0], item.image[1], item.image[2],
                  want[k].rgb[0], want[k].rgb[1], want[k].rgb[2]);
        }
        k++;
    }
    CHECK(got == 0, "next failed: %s", err);
    CHECK(k == 6, "%d images, expected 6", k);
    /* One warning per skipped file, each naming it: README and sub at open, then the six bad files. */
    const char *skipped[] = {"README", "a_cat/sub", "bad.png", "empty.jpeg", "notes.txt", "trunc.jpg", "trunc.png"};
    for (size_t i = 0; i < sizeof skipped / sizeof skipped[0]; i++)
        CHECK(warned_about(&warn, skipped[i]) == 1, "%d warnings name %s", warned_about(&warn, skipped[i]), skipped[i]);
    CHECK(warn.n == 7 && imagefolder_n_skipped(src) == 7, "%d warnings, %ld skipped; expected 7", warn.n,
          imagefolder_n_skipped(src));
    CHECK(warned_about(&warn, ".hidden") == 0, "a dot file was warned about");
    for (int i = 0; i < warn.n && i < 32; i++) CHECK(!strchr(warn.lines[i], '\n'), "warning with a newline");
    snprintf(p, sizeof p, "%s/labels.txt", dir);
    CHECK(imagefolder_write_labels(src, p, err, sizeof err) == 0, "labels: %s", err);
    FILE *lf = fopen(p, "r");
    char lbuf[256] = "";
    size_t ln = lf ? fread(lbuf, 1, sizeof lbuf - 1, lf) : 0;
    lbuf[ln] = '\0';
    if (lf) fclose(lf);
    CHECK(!strcmp(lbuf, "a_cat\nb_dog\nc_bird\n"), "labels.txt is '%s'", lbuf);
    src->close(src);

    /* Encoded (tower convert --encoded): the six good files as stored, bytes for bytes, at their stored size; the
     * same bad files skipped. */
    warn.n = 0;
    cfg.encoded = 1;
    src = convert_open_imagefolder(dir, &cfg, err, sizeof err);
    CHECK(src != NULL, "open encoded: %s", err);
    if (src) {
        const char *stored[6] = {"a_cat/1.png", "a_cat/2_grey.PNG", "a_cat/3.jpg", "b_dog/g16.png", "b_dog/pal.png",
                                 "c_bird/x.png"};
        k = 0;
        while ((got = src->next(src, &item, err, sizeof err)) == 1) {
            if (k < 6) {
                snprintf(p, sizeof p, "%s/%s", dir, stored[k]);
                FILE *f = fopen(p, "rb");
                static uint8_t file[1 << 16];
                const size_t n = f ? fread(file, 1, sizeof file, f) : 0;
                if (f) fclose(f);
                CHECK(item.encoded && item.encoded_n_bytes == n && !memcmp(item.encoded, file, n) && item.label == want[k].label,
                      "encoded item %d is not %s as stored (%zu bytes of %zu), label %ld", k, stored[k],
                      item.encoded_n_bytes, n, (long)item.label);
            }
            k++;
        }
        /* the same 7, and the labels.txt written above, now beside the class folders */
        CHECK(got == 0 && k == 6 && imagefolder_n_skipped(src) == 8, "encoded: %d images, %ld skipped (%s)", k,
              imagefolder_n_skipped(src), got ? err : "");
        CHECK(k == 0 || (item.H != 4 || item.W != 4), "encoded: the stored size, not image_size");
        src->close(src);
    }
    /* Encoded files train cannot read at its defaults: a JPEG with 14 MiB after its end (over 3 bytes a pixel
     * + 1 MiB at the default 4 Mpixels) is kept with a note naming the --max_image_pixels that reads it; one of
     * 65 MiB (over a record's 64 MiB) is skipped.  Both sparse past the JPEG. */
    char big[1100];
    snprintf(big, sizeof big, "%s_big", dir); /* beside the data set: no class folder of it */
    mkdir_or_die(big);
    snprintf(p, sizeof p, "%s/one", big);
    mkdir_or_die(p);
    img = solid(16, 16, 3, green);
    for (int k = 0; k < 2; k++) {
        snprintf(p, sizeof p, "%s/one/%s.jpg", big, k ? "huge" : "large");
        write_jpeg(p, 16, 16, 3, img, 90);
        CHECK(truncate(p, k ? (off_t)65 << 20 : (off_t)14 << 20) == 0, "truncate %s", p);
    }
    free(img);
    warn.n = 0;
    src = convert_open_imagefolder(big, &cfg, err, sizeof err);
    CHECK(src != NULL, "open encoded big: %s", err);
    if (src) {
        k = 0;
        while ((got = src->next(src, &item, err, sizeof err)) == 1) {
            CHECK(item.encoded_n_bytes == (size_t)14 << 20, "encoded big: an item of %zu bytes", item.encoded_n_bytes);
            k++;
        }
        CHECK(got == 0 && k == 1 && imagefolder_n_skipped(src) == 1, "encoded big: %d kept, %ld skipped (%s)", k,
              imagefolder_n_skipped(src), got ? err : "");
        CHECK(warned_about(&warn, "large.jpg: a 16 x 16 image of 14680064 bytes: train and eval read it with "
                                  "--max_image_pixels 4543830 or more") == 1 &&
                  warned_about(&warn, "huge.jpg: 68157440 bytes, over the") == 1,
              "encoded big: %d warnings, the first '%s'", warn.n, warn.n ? warn.lines[0] : "");
        src->close(src);
    }
    for (int k = 0; k < 2; k++) {
        snprintf(p, sizeof p, "%s/one/%s.jpg", big, k ? "huge" : "large");
        remove(p);
    }
    snprintf(p, sizeof p, "%s/one", big);
    rmdir(p);
    rmdir(big);
    cfg.encoded = 0;

    /* Grey output: PIL's luma of the colours. */
    warn.n = 0;
    cfg.channels = 1;
    src = convert_open_imagefolder(dir, &cfg, err, sizeof err);
    CHECK(src != NULL, "open grey: %s", err);
    if (src) {
        uint8_t luma[6];
        for (int i = 0; i < 6; i++)
            luma[i] = (uint8_t)((19595u * want[i].rgb[0] + 38470u * want[i].rgb[1] + 7471u * want[i].rgb[2] + 0x8000u) >> 16);
        k = 0;
        while (src->next(src, &item, err, sizeof err) == 1) {
            CHECK(item.C == 1, "grey item has %d channels", item.C);
            if (k < 6) CHECK(abs(item.image[5] - luma[k]) <= (k == 2 ? 3 : 0), "grey item %d: %d, expected %d", k,
                             item.image[5], luma[k]);
            k++;
        }
        CHECK(k == 6, "grey: %d images", k);
        src->close(src);
    }

    /* Centre crop: a 16x8 image whose two outer columns each side differ from its centre. */
    char dir2[1024];
    snprintf(dir2, sizeof dir2, "%s/crop", dir);
    mkdir_or_die(dir2);
    snprintf(p, sizeof p, "%s/one", dir2);
    mkdir_or_die(p);
    uint8_t wide[8 * 16 * 3];
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 16; x++) {
            uint8_t *px = wide + ((size_t)y * 16 + x) * 3;
            int edge = x < 2 || x >= 14;
            px[0] = edge ? 255 : 0;
            px[1] = edge ? 255 : 120;
            px[2] = edge ? 0 : 10;
        }
    snprintf(p, sizeof p, "%s/one/w.png", dir2);
    write_png(p, 8, 16, PNG_FORMAT_RGB, wide, NULL, 0);
    cfg.channels = 3;
    cfg.mode = IMAGEFOLDER_CENTER_CROP;
    src = convert_open_imagefolder(dir2, &cfg, err, sizeof err);
    CHECK(src && src->next(src, &item, err, sizeof err) == 1, "centre crop: %s", err);
    if (src) {
        int ok = 1;
        for (int i = 0; i < 16; i++) ok &= item.image[3 * i] == 0 && item.image[3 * i + 1] == 120 && item.image[3 * i + 2] == 10;
        CHECK(ok, "the centre crop holds edge colour (%d %d %d)", item.image[0], item.image[1], item.image[2]);
        src->close(src);
    }
    /* Resize mode on the same image keeps the edges (squeezed, not cropped). */
    cfg.mode = IMAGEFOLDER_RESIZE;
    src = convert_open_imagefolder(dir2, &cfg, err, sizeof err);
    CHECK(src && src->next(src, &item, err, sizeof err) == 1, "resize: %s", err);
    if (src) {
        CHECK(item.image[0] > 100, "resize lost the left edge (%d)", item.image[0]);
        src->close(src);
    }

    /* convert_run over the whole folder: every good image, with its label, in TFRecords. */
    warn.n = 0;
    cfg.image_size = 6;
    src = convert_open_imagefolder(dir, &cfg, err, sizeof err);
    ConvertConfig cc;
    convert_config_defaults(&cc);
    snprintf(p, sizeof p, "%s/out/train", dir);
    cc.out_prefix = p;
    cc.num_shards = 2;
    ConvertStats st;
    CHECK(src && convert_run(src, &cc, &st, err, sizeof err) == 0, "convert_run: %s", err);
    CHECK(st.n_examples == 6 && st.label_count[0] == 3 && st.label_count[1] == 2 && st.label_count[2] == 1,
          "convert_run: %ld examples, labels %ld %ld %ld", st.n_examples, st.label_count[0], st.label_count[1],
          st.label_count[2]);
    CHECK(st.H == 6 && st.W == 6 && st.C == 3, "shape %dx%dx%d", st.H, st.W, st.C);
    if (src) src->close(src);
    long n_read = 0;
    ExampleDecoder *dec = example_decoder_new();
    for (int s = 0; s < 2; s++) {
        convert_shard_path(q, sizeof q, p, s, 2);
        TfrReader *r = tfr_reader_open(q, IO_COMPRESSION_AUTO, 0, err, sizeof err);
        CHECK(r != NULL, "%s", err);
        const uint8_t *data;
        size_t n;
        while (r && tfr_reader_next(r, &data, &n, err, sizeof err) == TFR_RECORD) {
            const Tensorflow__Example *ex = example_decode(dec, data, n);
            const Tensorflow__Feature *img_f = ex ? example_find(ex, "image_raw") : NULL;
            CHECK(img_f && feature_kind(img_f) == FEATURE_BYTES && img_f->bytes_list->value[0].len == 6 * 6 * 3,
                  "record without a 6x6x3 image");
            n_read++;
        }
        tfr_reader_close(r);
    }
    example_decoder_free(dec);
    CHECK(n_read == 6, "%ld records read back, expected 6", n_read);

    /* Refusals: one line each. */
    snprintf(p, sizeof p, "%s/a_cat/sub", dir); /* an empty folder: no class folders */
    CHECK(convert_open_imagefolder(p, &cfg, err, sizeof err) == NULL && strstr(err, "no class folders"), "'%s'", err);
    snprintf(p, sizeof p, "%s/missing", dir);
    CHECK(convert_open_imagefolder(p, &cfg, err, sizeof err) == NULL && strstr(err, p) && !strchr(err, '\n'), "'%s'", err);
    cfg.image_size = 0;
    CHECK(convert_open_imagefolder(dir, &cfg, err, sizeof err) == NULL && strstr(err, "image_size"), "'%s'", err);
    cfg.image_size = 4;
    cfg.channels = 2;
    CHECK(convert_open_imagefolder(dir, &cfg, err, sizeof err) == NULL && strstr(err, "channels"), "'%s'", err);

    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", dir);
}

/* ---------------------------------------------------------------- `make`: a dataset for the CLI test */

static void make_dataset(const char *dir, int n_per_class) {
    const char *classes[] = {"circle", "cross", "square"};
    char p[4096];
    mkdir_or_die(dir);
    uint32_t seed = 12345;
    for (int c = 0; c < 3; c++) {
        snprintf(p, sizeof p, "%s/%s", dir, classes[c]);
        mkdir_or_die(p);
        for (int i = 0; i < n_per_class; i++) {
            uint8_t img[28 * 28];
            int cx = 10 + (int)((seed = seed * 1664525u + 1013904223u) >> 29), cy = 10 + (int)((seed = seed * 1664525u + 1013904223u) >> 29);
            for (int y = 0; y < 28; y++)
                for (int x = 0; x < 28; x++) {
                    int dx = x - cx, dy = y - cy, on;
                    if (c == 0) on = abs(dx * dx + dy * dy - 36) < 8;
                    else if (c == 1) on = (abs(dx) <= 1 && abs(dy) <= 7) || (abs(dy) <= 1 && abs(dx) <= 7);
                    else on = (abs(dx) == 6 && abs(dy) <= 6) || (abs(dy) == 6 && abs(dx) <= 6);
                    seed = seed * 1664525u + 1013904223u;
                    img[y * 28 + x] = (uint8_t)((on ? 200 : 20) + (seed >> 28));
                }
            snprintf(p, sizeof p, "%s/%s/%03d.%s", dir, classes[c], i, i % 4 == 3 ? "jpg" : "png");
            if (i % 4 == 3) write_jpeg(p, 28, 28, 1, img, 95);
            else write_png(p, 28, 28, PNG_FORMAT_GRAY, img, NULL, 0);
        }
    }
    snprintf(p, sizeof p, "%s/circle/broken.png", dir);
    write_bytes(p, "\x89PNG\r\n\x1a\n garbage", 17);
    snprintf(p, sizeof p, "%s/square/notes.txt", dir);
    write_bytes(p, "not an image\n", 13);
}

/* torchvision's CenterCrop offset, int(round((scaled - size) / 2.)), with
 * Python 3's round: halves go to the even neighbour. */
static int torchvision_offset(int scaled, int size) {
    double half = (scaled - size) / 2.0;
    double fl = floor(half);
    if (half - fl != 0.5) return (int)lround(half);
    return ((long)fl % 2 == 0) ? (int)fl : (int)fl + 1;
}

/* The centre crop of sizes whose crop offset is a half: a 23x17 (H x W)
 * image at image_size 28 is scaled to 37x28 (torchvision's Resize), then
 * cropped at top = round(4.5) = 4 (not 5), as torchvision does.  The pixels
 * are random, so a one-row shift shows. */
static void test_center_crop_offset(void) {
    char dir[] = "/tmp/tower_if_crop_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    const int sizes[][3] = {{23, 17, 28}, {17, 23, 28}, {13, 8, 8}, {8, 9, 8}, {11, 8, 8}};
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        int H = sizes[t][0], W = sizes[t][1], S = sizes[t][2];
        char sub[1200], p[1300];
        snprintf(sub, sizeof sub, "%s/%zu", dir, t);
        mkdir_or_die(sub);
        snprintf(p, sizeof p, "%s/one", sub);
        mkdir_or_die(p);
        uint8_t *img = malloc((size_t)H * W * 3);
        uint32_t s = 12345u + (uint32_t)t;
        for (int i = 0; i < H * W * 3; i++) {
            s = s * 1664525u + 1013904223u;
            img[i] = (uint8_t)(s >> 24);
        }
        snprintf(p, sizeof p, "%s/one/x.png", sub);
        write_png(p, H, W, PNG_FORMAT_RGB, img, NULL, 0);
        /* torchvision Resize(S): shorter side S, longer int(S * long / short). */
        int tH = S, tW = S;
        if (H <= W) tW = (int)((double)S * W / H);
        else tH = (int)((double)S * H / W);
        uint8_t *scaled = malloc((size_t)tH * tW * 3);
        CHECK(imagefolder_resize(scaled, tH, tW, img, H, W, 3) == 0, "resize %dx%d", tH, tW);
        int top = torchvision_offset(tH, S), left = torchvision_offset(tW, S);
        ImageFolderConfig cfg;
        imagefolder_config_defaults(&cfg);
        cfg.image_size = S;
        cfg.mode = IMAGEFOLDER_CENTER_CROP;
        char err[1024];
        ConvertItem item;
        ConvertSource *src = convert_open_imagefolder(sub, &cfg, err, sizeof err);
        CHECK(src && src->next(src, &item, err, sizeof err) == 1, "centre crop %dx%d: %s", H, W, err);
        if (src) {
            int max_diff = 0;
            for (int y = 0; y < S; y++)
                for (int x = 0; x < S; x++)
                    for (int c = 0; c < 3; c++) {
                        int d = abs((int)item.image[((size_t)y * S + x) * 3 + c] -
                                    (int)scaled[((size_t)(y + top) * tW + (x + left)) * 3 + c]);
                        if (d > max_diff) max_diff = d;
                    }
            CHECK(max_diff == 0, "%dx%d at %d: the crop differs from torchvision's (top %d, left %d) by up to %d", H, W,
                  S, top, left, max_diff);
            src->close(src);
        }
        free(scaled);
        free(img);
    }
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* A file name holding a newline, ESC and CR reaches the warning escaped, so
 * the warning stays one line and cannot clear the screen. */
static void test_warning_escaped(void) {
    char dir[] = "/tmp/tower_if_esc_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    char p[1200];
    snprintf(p, sizeof p, "%s/one", dir);
    mkdir_or_die(p);
    snprintf(p, sizeof p, "%s/one/evil\n\x1b[2J\r.txt", dir);
    write_bytes(p, "not an image", 12);
    uint8_t red[3] = {255, 0, 0};
    uint8_t *img = solid(4, 4, 3, red);
    snprintf(p, sizeof p, "%s/one/ok.png", dir);
    write_png(p, 4, 4, PNG_FORMAT_RGB, img, NULL, 0);
    free(img);
    Warnings warn = {.n = 0};
    ImageFolderConfig cfg;
    imagefolder_config_defaults(&cfg);
    cfg.image_size = 4;
    cfg.warn = collect;
    cfg.warn_ctx = &warn;
    char err[1024];
    ConvertItem item;
    ConvertSource *src = convert_open_imagefolder(dir, &cfg, err, sizeof err);
    CHECK(src != NULL, "open: %s", err);
    if (src) {
        while (src->next(src, &item, err, sizeof err) == 1) {
        }
        src->close(src);
    }
    CHECK(warn.n == 1, "%d warnings", warn.n);
    CHECK(warned_about(&warn, "one/evil\\x0a\\x1b[2J\\x0d.txt") == 1, "the warning does not escape the name: %s", warn.lines[0]);
    for (const char *c = warn.lines[0]; *c; c++) CHECK(*c >= 0x20 && *c < 0x7f, "raw byte 0x%02x in the warning", (unsigned char)*c);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* The "load" mode: one image through imagefolder_load, full decode. */
static int load_one(const char *path, int S, const char *mode_name, const char *out_path) {
    /* "center_crop/R": the shorter side scaled to R before the crop */
    const int short_side = !strncmp(mode_name, "center_crop/", 12) ? atoi(mode_name + 12) : 0;
    const ImageFolderResizeMode mode = !strncmp(mode_name, "center_crop", 11) ? IMAGEFOLDER_CENTER_CROP : IMAGEFOLDER_RESIZE;
    if (S < 1 || S > 4096 || (strcmp(mode_name, "resize") && strcmp(mode_name, "center_crop") && short_side < S)) {
        fprintf(stderr, "test_imagefolder load: size %d or mode '%s' not understood\n", S, mode_name);
        return 1;
    }
    uint8_t *out = malloc((size_t)S * S * 3);
    ImageFolderScratch scr = {0};
    char err[512];
    int scale_eighths = 8;
    if (!out || imagefolder_load(out, S, 3, mode, short_side, path, IMAGEFOLDER_MAX_PIXELS, 0, &scr, &scale_eighths, err,
                                 sizeof err) != 0) {
        fprintf(stderr, "test_imagefolder load: %s\n", out ? err : "out of memory");
        free(out);
        return 1;
    }
    FILE *f = fopen(out_path, "wb");
    const int ok = f && fwrite(out, 1, (size_t)S * S * 3, f) == (size_t)S * S * 3;
    if (f && fclose(f) != 0) perror(out_path);
    imagefolder_scratch_free(&scr);
    free(out);
    if (!ok) fprintf(stderr, "test_imagefolder load: cannot write %s\n", out_path);
    return ok ? 0 : 1;
}

/* CMYK and YCCK JPEGs (libjpeg gives no RGB for them) decode to PIL's RGB:
 * 8 x 8 blocks of known inks (stored inverted, as Adobe stores them) come
 * out as the colours they print, within JPEG's error at quality 100; the
 * pixel-exact comparison with PIL is tests/interop/pil_interop.py's. */
static void test_cmyk_jpeg(void) {
    char dir[] = "/tmp/tower_if_cmyk_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    /* stored bytes (255 - ink) c, m, y, k -> the RGB PIL makes of them */
    static const uint8_t blocks[][7] = {
        {255, 255, 255, 255, 255, 255, 255}, /* no ink: white */
        {0, 255, 255, 255, 0, 255, 255},     /* full cyan */
        {255, 0, 255, 255, 255, 0, 255},     /* full magenta */
        {255, 255, 0, 255, 255, 255, 0},     /* full yellow */
        {255, 255, 255, 0, 0, 0, 0},         /* full black */
        {255, 255, 255, 128, 128, 128, 128}, /* half black: k - round((255 - c) k / 255) = 128 */
        {128, 255, 255, 255, 128, 255, 255}, /* half cyan */
        {55, 155, 205, 200, 43, 122, 161},   /* a mixture: 200 - round(200 x 200 / 255) = 43, ... */
    };
    const int n_blocks = (int)(sizeof blocks / sizeof blocks[0]), H = 8, W = 8 * n_blocks;
    uint8_t *cmyk = malloc((size_t)H * W * 4);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) memcpy(cmyk + ((size_t)y * W + x) * 4, blocks[x / 8], 4);
    for (int t = 0; t < 2; t++) { /* stored as CMYK, then as YCCK */
        char p[1200], err[512];
        snprintf(p, sizeof p, "%s/%s.jpg", dir, t ? "ycck" : "cmyk");
        write_jpeg_as(p, H, W, 4, cmyk, 100, t);
        uint8_t *pix = NULL;
        int dH = 0, dW = 0;
        CHECK(imagefolder_decode(p, &pix, &dH, &dW, err, sizeof err) == 0 && dH == H && dW == W,
              "%s JPEG decodes: %s", t ? "YCCK" : "CMYK", err);
        if (pix) {
            int worst = 0;
            for (int b = 0; b < n_blocks; b++)
                for (int j = 0; j < 3; j++) { /* the block's centre pixel */
                    const int d = abs((int)pix[((size_t)4 * W + 8 * b + 4) * 3 + j] - blocks[b][4 + j]);
                    worst = d > worst ? d : worst;
                }
            CHECK(worst <= 3, "%s JPEG: a block's colour is %d levels from PIL's", t ? "YCCK" : "CMYK", worst);
        }
        free(pix);
        remove(p);
    }
    free(cmyk);
    rmdir(dir);
}

/* The "crop" mode: one image decoded at full size, then imagefolder_transform_crop. */
static int crop_one(char **a) {
    const int S = atoi(a[0]);
    ImageFolderCrop crop = {atoi(a[1]), atoi(a[2]), atoi(a[3]), atoi(a[4]), atoi(a[5])};
    const char *path = a[-1], *out_path = a[6];
    uint8_t *pix = NULL, *out = S >= 1 && S <= 4096 ? malloc((size_t)S * S * 3) : NULL;
    int H = 0, W = 0, rc = 1;
    char err[512] = "";
    ImageFolderScratch scr = {0};
    if (out && imagefolder_decode(path, &pix, &H, &W, err, sizeof err) == 0 &&
        imagefolder_transform_crop(out, S, 3, &crop, pix, H, W, H, W, &scr) == 0) {
        FILE *f = fopen(out_path, "wb");
        rc = !(f && fwrite(out, 1, (size_t)S * S * 3, f) == (size_t)S * S * 3);
        if (f && fclose(f) != 0) rc = 1;
        if (rc) snprintf(err, sizeof err, "cannot write %s", out_path);
    } else if (!err[0]) {
        snprintf(err, sizeof err, "size %d or crop %d,%d %dx%d not usable for a %d x %d image", S, crop.x, crop.y,
                 crop.w, crop.h, W, H);
    }
    if (rc) fprintf(stderr, "test_imagefolder crop: %s\n", err);
    imagefolder_scratch_free(&scr);
    free(pix);
    free(out);
    return rc;
}

/* The "boxes" mode: n crops of an H x W image, one line each. */
static int print_boxes(int H, int W, uint64_t seed, long n) {
    if (H < 1 || W < 1 || n < 1) {
        fprintf(stderr, "test_imagefolder boxes: size %d x %d or count %ld not usable\n", H, W, n);
        return 1;
    }
    for (long i = 0; i < n; i++) {
        uint64_t st = rng_seed(seed, RNG_STREAM_CROP, (uint64_t)i);
        ImageFolderCrop c;
        imagefolder_random_crop(&c, H, W, &st);
        printf("%d %d %d %d %d\n", c.x, c.y, c.w, c.h, c.flip);
    }
    return fflush(stdout) != 0;
}

/* imagefolder_random_crop's promises over many draws on several image sizes (thin, tiny, photo-like). */
static void test_random_crop_draws(void) {
    static const int sizes[][2] = {{375, 500}, {500, 375}, {224, 224}, {1, 1}, {2, 90}, {90, 2}, {7, 5}, {4000, 3000}};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int H = sizes[k][0], W = sizes[k][1];
        int bad = 0, flips = 0, whole = 0, n = 4000, differ = 0;
        double area_sum = 0;
        ImageFolderCrop first = {0};
        for (int i = 0; i < n; i++) {
            uint64_t st = rng_seed(11, RNG_STREAM_CROP, (uint64_t)i), again = st;
            ImageFolderCrop c, d;
            imagefolder_random_crop(&c, H, W, &st);
            imagefolder_random_crop(&d, H, W, &again);
            if (memcmp(&c, &d, sizeof c)) bad++; /* a pure function of the stream */
            if (i == 0) first = c;
            else differ += memcmp(&c, &first, sizeof c) != 0;
            const double frac = (double)c.w * c.h / ((double)W * H);
            const int is_whole = c.x == 0 && c.y == 0 && c.w == W && c.h == H;
            if (c.x < 0 || c.y < 0 || c.w < 1 || c.h < 1 || c.x + c.w > W || c.y + c.h > H) bad++;
            if (!is_whole && frac < 0.1 - 1e-6) bad++;
            /* the width is round(h a) for some a in [0.75, 1.33]: within half a pixel of [0.75 h, 1.33 h] */
            if (!is_whole && (c.w < 0.75 * c.h - 0.5 || c.w > 1.33 * c.h + 0.5)) bad++;
            /* the offsets stop one short of the far edge (TensorFlow's Uniform(H - h)) */
            if ((c.h < H && c.y > H - c.h - 1) || (c.w < W && c.x > W - c.w - 1)) bad++;
            flips += c.flip;
            whole += is_whole;
            area_sum += frac;
        }
        CHECK(bad == 0, "%d x %d: %d crops break a rule", H, W, bad);
        CHECK(flips > n * 0.45 && flips < n * 0.55, "%d x %d: %d flips in %d crops", H, W, flips, n);
        if (H >= 100 && W >= 100) {
            /* a photo: crops of every size, rarely the whole image; mean area fraction about 0.4 (TensorFlow
             * measured 0.38-0.42 on these sizes: tests/interop/crop_interop.py) */
            CHECK(whole < n / 20, "%d x %d: the whole image %d times in %d", H, W, whole, n);
            CHECK(area_sum / n > 0.3 && area_sum / n < 0.5, "%d x %d: mean area fraction %.3f", H, W, area_sum / n);
            CHECK(differ > n - 20, "%d x %d: only %d crops differ from the first", H, W, differ);
        }
    }
}

/* imagefolder_transform_crop against the plain resize of the crop's pixels copied out (the stride), mirrored
 * where it flips; the whole image as a crop is imagefolder_resize; grey is the luma of the RGB result; a crop
 * outside the image is refused. */
static void test_transform_crop(void) {
    srand(5);
    for (int t = 0; t < 40; t++) {
        const int H = 3 + rand() % 80, W = 3 + rand() % 80, S = 1 + rand() % 40;
        uint8_t *img = malloc((size_t)H * W * 3);
        for (size_t i = 0; i < (size_t)H * W * 3; i++) img[i] = (uint8_t)rand();
        ImageFolderCrop c = {0, 0, 1 + rand() % W, 1 + rand() % H, rand() % 2};
        c.x = rand() % (W - c.w + 1);
        c.y = rand() % (H - c.h + 1);
        uint8_t *window = malloc((size_t)c.w * c.h * 3), *want = malloc((size_t)S * S * 3),
                *got = malloc((size_t)S * S * 3), grey[40 * 40];
        for (int y = 0; y < c.h; y++) memcpy(window + (size_t)y * c.w * 3, img + ((size_t)(c.y + y) * W + c.x) * 3, (size_t)c.w * 3);
        CHECK(imagefolder_resize(want, S, S, window, c.h, c.w, 3) == 0);
        ImageFolderScratch scr = {0};
        CHECK(imagefolder_transform_crop(got, S, 3, &c, img, H, W, H, W, &scr) == 0, "transform_crop");
        int mismatch = 0;
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++)
                for (int j = 0; j < 3; j++)
                    mismatch += got[((size_t)y * S + x) * 3 + j] != want[((size_t)y * S + (c.flip ? S - 1 - x : x)) * 3 + j];
        CHECK(mismatch == 0, "case %d: %dx%d crop %d,%d %dx%d flip %d to %d: %d values differ from the resized crop",
              t, W, H, c.x, c.y, c.w, c.h, c.flip, S, mismatch);
        CHECK(imagefolder_transform_crop(grey, S, 1, &c, img, H, W, H, W, &scr) == 0, "grey transform_crop");
        int grey_bad = 0;
        for (int i = 0; i < S * S; i++)
            grey_bad += grey[i] != (uint8_t)((19595u * got[3 * i] + 38470u * got[3 * i + 1] + 7471u * got[3 * i + 2] + 0x8000u) >> 16);
        CHECK(grey_bad == 0, "case %d: %d grey values are not the luma of the RGB crop", t, grey_bad);
        ImageFolderCrop all = {0, 0, W, H, 0};
        CHECK(imagefolder_transform_crop(got, S, 3, &all, img, H, W, H, W, &scr) == 0 &&
              imagefolder_resize(want, S, S, img, H, W, 3) == 0 && !memcmp(got, want, (size_t)S * S * 3),
              "case %d: the whole image as a crop is not imagefolder_resize's", t);
        ImageFolderCrop out = {W - c.w + 1, 0, c.w, c.h, 0};
        CHECK(imagefolder_transform_crop(got, S, 3, &out, img, H, W, H, W, &scr) == -1, "a crop past the edge taken");
        CHECK(imagefolder_transform(got, S, 3, IMAGEFOLDER_RANDOM_CROP, 0, img, H, W, H, W, &scr) == -1,
              "imagefolder_transform took the random crop mode");
        imagefolder_scratch_free(&scr);
        free(img), free(window), free(want), free(got);
    }
}

/* imagefolder_load_random_crop on a 640 x 480 JPEG: the crop is the stream's (the same state, the same crop and
 * bytes; a state's crop is imagefolder_random_crop's for the stored size); the full decode's bytes are
 * imagefolder_transform_crop's of the decoded image; scaled decoding picks a reduced scale only where the crop
 * still covers S x S, and stays within a few levels of the full decode (a smooth image). */
/* A JPEG cut short near its end (its last rows' scan data missing): refused as truncated whatever the crop, in
 * every draw; libjpeg-turbo's skip to the last row decodes nothing, which kept the image whenever the crop ended
 * above the cut (in some epochs and not others). */
static void test_crop_truncated_below(void) {
    char dir[] = "/tmp/tower_test_crop_trunc_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    enum { H = 128, W = 96 };
    uint8_t *img = malloc((size_t)H * W * 3);
    for (int i = 0; i < H * W * 3; i++) img[i] = (uint8_t)((i * 2654435761u) >> 24);
    char p[1100];
    snprintf(p, sizeof p, "%s/x.jpg", dir);
    write_jpeg(p, H, W, 3, img, 90);
    FILE *f = fopen(p, "rb");
    static uint8_t bytes[1 << 17];
    const size_t n = f ? fread(bytes, 1, sizeof bytes, f) : 0;
    if (f) fclose(f);
    f = fopen(p, "wb");
    if (f) {
        fwrite(bytes, 1, n * 96 / 100, f); /* the last rows' scan data and the end marker gone */
        fclose(f);
    }
    ImageFolderScratch scr = {0};
    uint8_t out[16 * 16 * 3];
    char err[1024];
    int kept = 0, m;
    for (uint64_t k = 0; k < 40; k++)
        if (imagefolder_load_random_crop(out, 16, 3, rng_seed(5, RNG_STREAM_CROP, k), p, (size_t)1 << 20, 1, &scr, NULL,
                                         &m, err, sizeof err) == 0)
            kept++;
        else
            CHECK(strstr(err, "truncated") != NULL, "draw %llu: %s", (unsigned long long)k, err);
    CHECK(kept == 0, "a JPEG truncated near its end was kept in %d of 40 crops", kept);
    imagefolder_scratch_free(&scr);
    remove(p);
    rmdir(dir);
    free(img);
}

static void test_load_random_crop(void) {
    char dir[] = "/tmp/tower_if_crop_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    const int H = 480, W = 640, S = 32;
    uint8_t *img = malloc((size_t)H * W * 3);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint8_t *p = img + ((size_t)y * W + x) * 3;
            p[0] = (uint8_t)(x * 255 / W);
            p[1] = (uint8_t)(y * 255 / H);
            p[2] = (uint8_t)(128 + 100 * sin(x / 37.0) * cos(y / 23.0));
        }
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/a.jpg", dir);
    write_jpeg(path, H, W, 3, img, 95);
    uint8_t *dec = NULL;
    int dH = 0, dW = 0;
    CHECK(imagefolder_decode(path, &dec, &dH, &dW, err, sizeof err) == 0, "decode: %s", err);
    ImageFolderScratch scr = {0};
    uint8_t a[S * S * 3], b[S * S * 3], want[S * S * 3];
    int reduced = 0;
    for (int i = 0; i < 60 && dec; i++) {
        const uint64_t st = rng_seed(3, RNG_STREAM_CROP, (uint64_t)i);
        uint64_t st2 = st;
        ImageFolderCrop c, c2, drawn;
        int m = 0, m2 = 0;
        imagefolder_random_crop(&drawn, H, W, &st2);
        CHECK(imagefolder_load_random_crop(a, S, 3, st, path, IMAGEFOLDER_MAX_PIXELS, 0, &scr, &c, &m, err, sizeof err) == 0 &&
                  imagefolder_load_random_crop(b, S, 3, st, path, IMAGEFOLDER_MAX_PIXELS, 0, &scr, &c2, &m2, err, sizeof err) == 0,
              "load_random_crop: %s", err);
        CHECK(!memcmp(&c, &c2, sizeof c) && !memcmp(a, b, sizeof a) && !memcmp(&c, &drawn, sizeof c) && m == 8,
              "draw %d: the same state gives another crop or other bytes", i);
        /* the window's decode (jpeg_crop_scanline, jpeg_skip_scanlines) against the whole image's: libjpeg's
         * chroma upsampling at the window's edges may move a value by one (measured: at most 1, on at most 7 of
         * the 3072 values, 1.1 on average) */
        CHECK(imagefolder_transform_crop(want, S, 3, &c, dec, dH, dW, dH, dW, &scr) == 0, "transform_crop");
        int wd = 0, nd = 0;
        for (size_t j = 0; j < sizeof a; j++) {
            const int d = abs(a[j] - want[j]);
            wd = d > wd ? d : wd;
            nd += d > 0;
        }
        CHECK(wd <= 1 && nd <= (int)sizeof a / 100, "draw %d: the window's decode is %d levels from the whole image's "
              "(%d of %zu values differ)", i, wd, nd, sizeof a);
        CHECK(imagefolder_load_random_crop(b, S, 3, st, path, IMAGEFOLDER_MAX_PIXELS, 1, &scr, &c2, &m2, err, sizeof err) == 0,
              "scaled: %s", err);
        /* the reduced scale keeps the crop at least S (give or take the rounding of its edges) on both sides */
        CHECK(!memcmp(&c, &c2, sizeof c) && (m2 == 8 || (c.w * m2 / 8 >= S - 1 && c.h * m2 / 8 >= S - 1)),
              "draw %d: crop %dx%d decoded at %d/8", i, c.w, c.h, m2);
        reduced += m2 < 8;
        int worst = 0;
        for (size_t j = 0; j < sizeof a; j++) worst = abs(a[j] - b[j]) > worst ? abs(a[j] - b[j]) : worst;
        CHECK(worst <= 24, "draw %d: the scaled decode's crop is %d levels from the full decode's", i, worst);
    }
    CHECK(reduced > 10, "only %d of 60 crops decoded at a reduced scale", reduced);
    imagefolder_scratch_free(&scr);
    free(dec);
    free(img);
    remove(path);
    rmdir(dir);
}

/* imagefolder_short_side is timm's floor(S / crop_pct); a center crop from a shorter side R keeps the central
 * S x S of the image scaled so that its shorter side is R (the same bytes as resizing to R x R' and cropping by
 * torchvision's offsets, done here), and a scaled JPEG decode covers R, not S; R below S or with another mode is
 * refused by the converter's source. */
static void test_short_side(void) {
    CHECK(imagefolder_short_side(224, 0.875) == 256 && imagefolder_short_side(224, 1.0) == 0 &&
              imagefolder_short_side(32, 0.5) == 64 && imagefolder_short_side(28, 0.875) == 32 &&
              imagefolder_short_side(299, 0.875) == 341 && imagefolder_short_side(10, 0.0) == 0,
          "imagefolder_short_side: %d %d %d %d %d", imagefolder_short_side(224, 0.875), imagefolder_short_side(224, 1.0),
          imagefolder_short_side(32, 0.5), imagefolder_short_side(28, 0.875), imagefolder_short_side(299, 0.875));
    srand(9);
    for (int t = 0; t < 20; t++) {
        const int H = 20 + rand() % 90, W = 20 + rand() % 90, S = 4 + rand() % 16, R = S + rand() % 20;
        uint8_t *img = malloc((size_t)H * W * 3), *got = malloc((size_t)S * S * 3);
        for (size_t i = 0; i < (size_t)H * W * 3; i++) img[i] = (uint8_t)rand();
        /* torchvision Resize(R) then CenterCrop(S), by hand */
        int tH = R, tW = R;
        if (H <= W) tW = (int)((double)R * W / H);
        else tH = (int)((double)R * H / W);
        uint8_t *scaled = malloc((size_t)tH * tW * 3);
        CHECK(imagefolder_resize(scaled, tH, tW, img, H, W, 3) == 0);
        const int top = (int)nearbyint((tH - S) / 2.0), left = (int)nearbyint((tW - S) / 2.0);
        ImageFolderScratch scr = {0};
        CHECK(imagefolder_transform(got, S, 3, IMAGEFOLDER_CENTER_CROP, R, img, H, W, H, W, &scr) == 0);
        int bad = 0;
        for (int y = 0; y < S; y++)
            bad += memcmp(got + (size_t)y * S * 3, scaled + ((size_t)(y + top) * tW + left) * 3, (size_t)S * 3) != 0;
        CHECK(bad == 0, "case %d: %dx%d, S %d from a shorter side of %d: %d rows differ from Resize + CenterCrop", t, W,
              H, S, R, bad);
        imagefolder_scratch_free(&scr);
        free(img), free(got), free(scaled);
    }
    /* a 1000 x 800 JPEG for 100: 1/8 (125 x 100) covers 100; a shorter side of 200 needs 1/4 */
    char dir[] = "/tmp/tower_if_short_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/a.jpg", dir);
    uint8_t grey[3] = {120, 130, 140}, *img = solid(800, 1000, 3, grey), out[100 * 100 * 3];
    write_jpeg(path, 800, 1000, 3, img, 90);
    free(img);
    ImageFolderScratch scr = {0};
    int m1 = 0, m2 = 0;
    CHECK(imagefolder_load(out, 100, 3, IMAGEFOLDER_CENTER_CROP, 0, path, IMAGEFOLDER_MAX_PIXELS, 1, &scr, &m1, err,
                           sizeof err) == 0 &&
              imagefolder_load(out, 100, 3, IMAGEFOLDER_CENTER_CROP, 200, path, IMAGEFOLDER_MAX_PIXELS, 1, &scr, &m2,
                               err, sizeof err) == 0 && m1 == 1 && m2 == 2,
          "scaled decodes at %d/8 and %d/8 (want 1 and 2): %s", m1, m2, err);
    imagefolder_scratch_free(&scr);
    remove(path);
    rmdir(dir);
    ImageFolderConfig ic;
    imagefolder_config_defaults(&ic);
    ic.image_size = 32;
    ic.short_side = 16;
    ic.mode = IMAGEFOLDER_CENTER_CROP;
    CHECK(convert_open_imagefolder("/nonexistent", &ic, err, sizeof err) == NULL && strstr(err, "shorter side of 16"),
          "a shorter side below image_size: %s", err);
    ic.short_side = 40;
    ic.mode = IMAGEFOLDER_RESIZE;
    CHECK(convert_open_imagefolder("/nonexistent", &ic, err, sizeof err) == NULL && strstr(err, "shorter side of 40"),
          "a shorter side with resize: %s", err);
}

/* The image folder dir as TFRecords of encoded images, as build_image_data.py writes them: each file's bytes
 * unchanged under image/encoded, its class under image/class/label, in listing order, split over n_files files
 * out-00000-of-0000N.  For test_imagefolder_cli (encoded records against the folder). */
static int encode_folder(const char *dir, const char *out, int n_files) {
    ImageFolderConfig ic;
    imagefolder_config_defaults(&ic);
    char err[1024];
    ConvertSource *src = convert_open_imagefolder(dir, &ic, err, sizeof err);
    if (!src || n_files < 1) {
        fprintf(stderr, "encode: %s\n", src ? "n_files must be at least 1" : err);
        return 1;
    }
    const long n = imagefolder_n_files(src);
    ExampleBuilder b;
    example_builder_init(&b);
    int rc = 0;
    for (int f = 0; f < n_files && rc == 0; f++) {
        char path[1200];
        snprintf(path, sizeof path, "%s-%05d-of-%05d", out, f, n_files);
        TfrWriter *w = tfr_writer_open(path, IO_COMPRESSION_NONE, err, sizeof err);
        rc = w ? 0 : 1;
        for (long i = f; w && rc == 0 && i < n; i += n_files) {
            int label;
            const char *file = imagefolder_file(src, i, &label);
            FILE *in = fopen(file, "rb");
            static uint8_t bytes[1 << 22];
            const size_t got = in ? fread(bytes, 1, sizeof bytes, in) : 0;
            if (in) fclose(in);
            const char *format = imagefolder_encoded_kind(bytes, got);
            example_builder_reset(&b);
            const uint8_t *data;
            size_t data_n;
            rc = example_add_bytes(&b, "image/encoded", bytes, got) != 0 ||
                 example_add_bytes(&b, "image/format", format ? format : "", format ? strlen(format) : 0) != 0 ||
                 example_add_int64(&b, "image/class/label", label) != 0 ||
                 !(data_n = example_builder_encode(&b, &data)) || tfr_writer_write(w, data, data_n, err, sizeof err) != 0;
        }
        if (w && tfr_writer_close(w, err, sizeof err) != 0) rc = 1;
        if (rc) fprintf(stderr, "encode: %s: %s\n", path, err);
    }
    example_builder_free(&b);
    src->close(src);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 10 && !strcmp(argv[1], "crop")) return crop_one(argv + 3);
    if (argc == 5 && !strcmp(argv[1], "encode")) return encode_folder(argv[2], argv[3], atoi(argv[4]));
    if (argc == 6 && !strcmp(argv[1], "boxes"))
        return print_boxes(atoi(argv[2]), atoi(argv[3]), strtoull(argv[4], NULL, 10), atol(argv[5]));
    if (argc == 4 && !strcmp(argv[1], "make")) {
        make_dataset(argv[2], atoi(argv[3]));
        return 0;
    }
    if (argc == 6 && !strcmp(argv[1], "load")) return load_one(argv[2], atoi(argv[3]), argv[4], argv[5]);
    if (argc == 5 && !strcmp(argv[1], "grey")) { /* a mid-grey PNG of H x W: test_imagefolder_cli's large image */
        const int H = atoi(argv[3]), W = atoi(argv[4]);
        uint8_t *pixels = malloc((size_t)H * (size_t)W);
        if (!pixels) return 1;
        memset(pixels, 128, (size_t)H * (size_t)W);
        write_png(argv[2], H, W, PNG_FORMAT_GRAY, pixels, NULL, 0);
        free(pixels);
        return 0;
    }
    test_resize();
    test_resize_oracle();
    test_folder();
    test_center_crop_offset();
    test_warning_escaped();
    test_cmyk_jpeg();
    test_random_crop_draws();
    test_transform_crop();
    test_load_random_crop();
    test_crop_truncated_below();
    test_short_side();
    if (check_failures) {
        fprintf(stderr, "%d check(s) failed\n", check_failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
