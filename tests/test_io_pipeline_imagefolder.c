/* test_io_pipeline_imagefolder.c — the input pipeline on an image folder
 * (io/pipeline_imagefolder.c) and libjpeg's scaled decoding (io/imagefolder.h).
 *
 * What it proves, on images written here (12x12 RGB PNGs whose first pixel
 * carries a unique id, the class in its green byte):
 *   every image comes out exactly once per epoch with its folder's label,
 *   whatever the number of workers; the shuffle is seeded (same seed: the
 *   same stream with 1 or 3 workers; another seed: another stream; no
 *   shuffle: class after class, names sorted); resume (skip_examples)
 *   continues the stream mid-epoch and after whole epochs; a bad image stops
 *   the pipeline with one line naming it, or with skip_corrupt is skipped,
 *   counted once per epoch and warned about once, its name escaped; the
 *   memory bound counts the workers' decode buffers.
 * Scaled JPEG decoding: a 600x450 JPEG for 224 decodes at 4/8 (300x225),
 * the smallest scale covering 224 on both sides; the result of
 * decode-at-scale + resize is within 1.0 grey level (mean absolute
 * difference) and 8 (largest) of full decode + resize on a smooth image
 * (measured: 0.22 and 2 with libjpeg-turbo 2.1.5; the margin is for other
 * IDCTs: the reduced DCT averages 2x2 pixels where PIL's triangle filter
 * weighs 3-4 taps, and the two round differently, most at edges),
 * while a one-pixel shift of the same image is far outside it (so the
 * comparison can fail); the pipeline counts the scaled decodes
 * (stats.images_scaled), and none with jpeg_scaled 0 or small images.
 * An Adam7-interlaced PNG decodes to its pixels (the decoder reads row by
 * row, pass after pass).
 * A JPEG whose scan data stops at a marker (cut at 70%, then its end
 * marker: libjpeg's "premature end of data segment") is kept, as
 * TensorFlow and PIL keep it, with one warning naming it: from
 * imagefolder_decode and imagefolder_load (a good JPEG gives none, whatever
 * err held before), once from tower convert's source, and once from the
 * pipeline over two epochs (stats.images_damaged 1); the same file cut
 * without its end marker is still refused.
 * The random crop (resize_mode IMAGEFOLDER_RANDOM_CROP), on 40 x 30 PNGs
 * whose pixels carry their position and whose blue byte their id: every
 * example, in file order, is imagefolder_load_random_crop's for the stream
 * (seed, crop, epoch x files + file); the same batches with 1 or 3 workers;
 * a file's crop is drawn anew each epoch; with the shuffle, a resume
 * (skip_examples) continues the stream with the same crops.
 */
#include <math.h>
#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>

#include "io/imagefolder.h"
#include "io/pipeline.h"
#include "io/rng.h"

#include "tests/check.h"
#include "tests/image_write.h"
#include "tests/pipeline_run.h"

#define N_CLASSES 3
#define PER_CLASS 25
#define N_IMAGES (N_CLASSES * PER_CLASS)
#define S 12

/* An Adam7-interlaced RGB PNG through libpng's low-level writer. */
static void write_png_interlaced(const char *path, int H, int W, const uint8_t *pixels) {
    FILE *f = fopen(path, "wb");
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    if (!f || !png || !info || setjmp(png_jmpbuf(png))) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)W, (png_uint_32)H, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_ADAM7,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    png_bytep rows[64];
    for (int y = 0; y < H && y < 64; y++) rows[y] = (png_bytep)(pixels + (size_t)y * W * 3);
    png_write_image(png, rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    fclose(f);
}

/* The decoder reads PNGs row by row, each interlace pass over every row: an interlaced one decodes to its pixels. */
static void test_interlaced_png(const char *dir) {
    const int H = 13, W = 9;
    uint8_t px[13 * 9 * 3];
    for (int i = 0; i < H * W * 3; i++) px[i] = (uint8_t)(i * 37 + 11);
    char path[1024], err[1024];
    snprintf(path, sizeof path, "%s/interlaced.png", dir);
    write_png_interlaced(path, H, W, px);
    uint8_t *got;
    int gH, gW;
    CHECK(imagefolder_decode(path, &got, &gH, &gW, err, sizeof err) == 0, "%s", err);
    CHECK(gH == H && gW == W && !memcmp(got, px, sizeof px), "the interlaced PNG decodes to other pixels");
    free(got);
}

static const char *class_names[N_CLASSES] = {"ant", "bee", "cat"};

/* DIR/{ant,bee,cat}/NN.png: image id k = class * PER_CLASS + i has R = k, G = class, B = 200 everywhere. */
static void make_folder(const char *dir) {
    char path[1024];
    mkdir(dir, 0755);
    uint8_t px[S * S * 3];
    for (int c = 0; c < N_CLASSES; c++) {
        snprintf(path, sizeof path, "%s/%s", dir, class_names[c]);
        mkdir(path, 0755);
        for (int i = 0; i < PER_CLASS; i++) {
            int k = c * PER_CLASS + i;
            for (int p = 0; p < S * S; p++) {
                px[3 * p] = (uint8_t)k;
                px[3 * p + 1] = (uint8_t)c;
                px[3 * p + 2] = 200;
            }
            snprintf(path, sizeof path, "%s/%s/%02d.png", dir, class_names[c], i);
            write_png_rgb(path, S, S, px);
        }
    }
}

typedef struct {
    int n;
    char lines[16][1024];
} Warnings;

static void collect_warning(void *ctx, const char *line) {
    Warnings *w = ctx;
    if (w->n < 16) snprintf(w->lines[w->n], sizeof w->lines[0], "%s", line);
    w->n++;
}

static void config(PipelineConfig *c, const char *dir, int n_workers, uint64_t seed, int shuffle) {
    pipeline_config_defaults(c);
    c->image_dir = dir;
    c->in_H = c->in_W = c->out_H = c->out_W = S;
    c->in_C = 3;
    c->num_classes = N_CLASSES;
    c->augment = AUGMENT_NONE; /* uint8 -> float unscaled: the pixels as written */
    c->shard_sizes[0] = 5;
    c->shuffle = shuffle;
    c->min_after_dequeue = 10;
    c->num_epochs = 2;
    c->seed = seed;
    c->n_workers = n_workers;
    c->drop_remainder = 0;
}

/* The bytes of the regular files (not dot files) in dir's class folders (not dot folders), read here with
 * opendir and stat: what the pipeline's input_n_bytes must be. */
static uint64_t folder_n_bytes(const char *dir) {
    uint64_t total = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char cdir[1024];
        struct stat sb;
        snprintf(cdir, sizeof cdir, "%s/%s", dir, e->d_name);
        if (e->d_name[0] == '.' || stat(cdir, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
        DIR *c = opendir(cdir);
        for (struct dirent *f; c && (f = readdir(c));) {
            char fp[2048];
            snprintf(fp, sizeof fp, "%s/%s", cdir, f->d_name);
            if (f->d_name[0] != '.' && stat(fp, &sb) == 0 && S_ISREG(sb.st_mode)) total += (uint64_t)sb.st_size;
        }
        if (c) closedir(c);
    }
    if (d) closedir(d);
    return total;
}

/* Runs the pipeline to its end: the ids (R of the first pixel) in stream order into ids (at most cap).
 * Returns the count, or -1 with err on a pipeline error. */
static long run(const PipelineConfig *c, int *ids, long cap, PipelineStats *st, char *err, size_t err_n) {
    Pipeline *p = pipeline_open(c, err, err_n);
    if (!p) return -1;
    long n = 0;
    int bad_label = 0;
    for (;;) {
        PipelineBatch *b;
        int got = pipeline_next(p, &b, err, err_n);
        if (got < 0) {
            pipeline_close(p);
            return -1;
        }
        if (got == 0) break;
        for (int i = 0; i < b->n; i++) {
            const float *x = b->x + (size_t)i * b->example_n_floats;
            int id = (int)x[0];
            if ((int)x[1] != b->labels[i] || x[2] != 200.0f || x[(S * S - 1) * 3] != x[0]) bad_label++;
            if (n < cap) ids[n] = id;
            n++;
        }
        pipeline_release(p, b);
    }
    if (st) pipeline_stats(p, st);
    pipeline_close(p);
    CHECK(bad_label == 0, "%d examples whose label is not their folder's (or whose pixels are not as written)", bad_label);
    return n;
}

static void test_epochs_and_order(const char *dir) {
    char err[1024];
    PipelineConfig c;
    static int a[4 * N_IMAGES], b[4 * N_IMAGES], d[4 * N_IMAGES];
    config(&c, dir, 3, 7, 1);
    long n = run(&c, a, 4 * N_IMAGES, NULL, err, sizeof err);
    CHECK(n == 2 * N_IMAGES, "%ld examples in 2 epochs (%s)", n, n < 0 ? err : "");
    for (int e = 0; e < 2 && n == 2 * N_IMAGES; e++) {
        int seen[N_IMAGES] = {0}, dup = 0;
        for (int i = 0; i < N_IMAGES; i++) {
            int id = a[e * N_IMAGES + i];
            if (id < 0 || id >= N_IMAGES || seen[id]++) dup++;
        }
        CHECK(dup == 0, "epoch %d: %d images missing or repeated", e, dup);
    }
    int in_order = 1;
    for (int i = 0; i < N_IMAGES; i++) in_order &= a[i] == i;
    CHECK(!in_order, "the shuffled stream is in file order");
    config(&c, dir, 1, 7, 1);
    CHECK(run(&c, b, 4 * N_IMAGES, NULL, err, sizeof err) == 2 * N_IMAGES);
    CHECK(!memcmp(a, b, sizeof(int) * 2 * N_IMAGES), "seed 7: 3 workers and 1 worker give different streams");
    config(&c, dir, 2, 8, 1);
    CHECK(run(&c, d, 4 * N_IMAGES, NULL, err, sizeof err) == 2 * N_IMAGES);
    CHECK(memcmp(a, d, sizeof(int) * 2 * N_IMAGES) != 0, "seeds 7 and 8 give the same stream");
    /* A listing made by the caller (the trainer's, which counted the folder with it): the same stream, twice,
     * and the listing still the caller's after each pipeline_close (under ASan a use after free would show). */
    ImageFolderConfig ic;
    imagefolder_config_defaults(&ic);
    ConvertSource *listing = convert_open_imagefolder(dir, &ic, err, sizeof err);
    CHECK(listing != NULL, "listing: %s", err);
    for (int k = 0; listing && k < 2; k++) {
        config(&c, dir, 3, 7, 1);
        c.image_listing = listing;
        CHECK(run(&c, d, 4 * N_IMAGES, NULL, err, sizeof err) == 2 * N_IMAGES, "with a listing: %s", err);
        CHECK(!memcmp(a, d, sizeof(int) * 2 * N_IMAGES), "pass %d: the caller's listing gives another stream", k);
        CHECK(imagefolder_n_files(listing) == N_IMAGES, "pass %d: the listing holds %ld files after pipeline_close",
              k, imagefolder_n_files(listing));
    }
    if (listing) listing->close(listing);
    config(&c, dir, 2, 7, 0);
    CHECK(run(&c, d, 4 * N_IMAGES, NULL, err, sizeof err) == 2 * N_IMAGES);
    int ordered = 1;
    for (int i = 0; i < 2 * N_IMAGES; i++) ordered &= d[i] == i % N_IMAGES;
    CHECK(ordered, "without shuffle the stream is not class after class, names sorted");

    /* Resume: the stream from skip_examples on, mid-epoch and past a whole epoch. */
    const long skips[2] = {37, N_IMAGES + 12};
    for (int k = 0; k < 2; k++) {
        config(&c, dir, 2, 7, 1);
        c.skip_examples = skips[k];
        long m = run(&c, b, 4 * N_IMAGES, NULL, err, sizeof err);
        CHECK(m == 2 * N_IMAGES - skips[k], "skip %ld: %ld examples", skips[k], m);
        CHECK(m > 0 && !memcmp(b, a + skips[k], sizeof(int) * (size_t)m), "skip %ld: not the rest of the stream", skips[k]);
    }
}

static void test_bad_images(const char *dir) {
    char path[1024], err[1024];
    snprintf(path, sizeof path, "%s/bee/zz_broken.png", dir);
    FILE *f = fopen(path, "wb");
    fputs("\x89PNG\r\n\x1a\nnot really", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/ant/odd\x01name.jpg", dir);
    f = fopen(path, "wb");
    fputs("\xff\xd8\xff\xe0 cut short", f);
    fclose(f);
    PipelineConfig c;
    static int ids[4 * N_IMAGES];
    config(&c, dir, 2, 3, 1);
    long n = run(&c, ids, 4 * N_IMAGES, NULL, err, sizeof err);
    CHECK(n == -1, "a bad image without skip_corrupt did not stop the pipeline");
    CHECK(strstr(err, "zz_broken.png") || strstr(err, "odd\\x01name.jpg"), "the error names no bad file: %s", err);
    CHECK(!strchr(err, '\x01'), "a raw control byte in the error");
    Warnings w = {0};
    config(&c, dir, 2, 3, 1);
    c.skip_corrupt = 1;
    c.max_corrupt_fraction = 1.0;
    c.warn = collect_warning;
    c.warn_ctx = &w;
    PipelineStats st;
    n = run(&c, ids, 4 * N_IMAGES, &st, err, sizeof err);
    CHECK(n == 2 * N_IMAGES, "skip_corrupt: %ld examples, expected every good image twice (%s)", n, n < 0 ? err : "");
    CHECK(st.corrupt_distinct == 2 && st.corrupt_skipped == 4, "corrupt distinct %ld, skipped %ld", st.corrupt_distinct,
          st.corrupt_skipped);
    CHECK(st.input_n_bytes > 0 && st.input_n_bytes == folder_n_bytes(dir), "input_n_bytes %llu, the files hold %llu",
          (unsigned long long)st.input_n_bytes, (unsigned long long)folder_n_bytes(dir));
    CHECK(w.n == 2, "%d warnings, expected one per bad file", w.n);
    int escaped = 0;
    for (int i = 0; i < w.n && i < 16; i++) {
        CHECK(!strchr(w.lines[i], '\x01'), "raw control byte in warning: %s", w.lines[i]);
        CHECK(strstr(w.lines[i], "(skipped)") != NULL, "warning without (skipped): %s", w.lines[i]);
        escaped += strstr(w.lines[i], "odd\\x01name.jpg: JPEG is truncated") != NULL;
    }
    CHECK(escaped == 1, "no escaped warning for odd\\x01name.jpg");
    /* max_corrupt_fraction: two bad files of a few bytes among 75 PNGs are well under 50%, but over 0 */
    config(&c, dir, 2, 3, 1);
    c.skip_corrupt = 1;
    c.max_corrupt_fraction = 0.0;
    c.warn = collect_warning;
    c.warn_ctx = &w;
    CHECK(run(&c, ids, 4 * N_IMAGES, NULL, err, sizeof err) == -1 && strstr(err, "max_corrupt_fraction"),
          "max_corrupt_fraction 0 did not stop at the first bad image: %s", err);
    unlink(path);
    snprintf(path, sizeof path, "%s/bee/zz_broken.png", dir);
    unlink(path);
}

static void test_memory_bound(const char *dir) {
    PipelineConfig c;
    config(&c, dir, 3, 1, 1);
    PipelineMemory m;
    size_t total = pipeline_max_n_bytes(&c, 0, &m);
    CHECK(m.workers_n_bytes >= 3 * c.max_image_pixels * 3, "workers' share %zu below 3 decoded images", m.workers_n_bytes);
    CHECK(m.reader_n_bytes >= (size_t)N_IMAGES * strlen(dir), "the listing's share %zu is below its paths", m.reader_n_bytes);
    CHECK(total == m.slots_n_bytes + m.shuffle_n_bytes + m.staging_n_bytes + m.reader_n_bytes + m.workers_n_bytes +
                       m.threads_n_bytes);
    c.max_image_pixels = (size_t)1 << 16;
    PipelineMemory m2;
    pipeline_max_n_bytes(&c, 0, &m2);
    CHECK(m2.workers_n_bytes < m.workers_n_bytes, "max_image_pixels does not bound the workers' share");
}

/* A smooth 600x450 image: low-frequency waves and a soft disc. */
static void smooth_image(uint8_t *px, int H, int W, int shift) {
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            double u = (double)(x + shift) / W, v = (double)y / H;
            double r = sqrt((u - 0.5) * (u - 0.5) + (v - 0.5) * (v - 0.5));
            uint8_t *p = px + ((size_t)y * W + x) * 3;
            p[0] = (uint8_t)(127.5 + 100 * sin(6.28 * 3 * u) * cos(6.28 * 2 * v));
            p[1] = (uint8_t)(127.5 + 120 * tanh((0.3 - r) * 20));
            p[2] = (uint8_t)(255 * u * v);
        }
}

static void compare(const uint8_t *a, const uint8_t *b, size_t n, double *mean, int *max) {
    double s = 0;
    *max = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        s += d;
        if (d > *max) *max = d;
    }
    *mean = s / (double)n;
}

static void test_scaled_jpeg(const char *dir) {
    const int H = 450, W = 600, T = 224;
    uint8_t *px = malloc((size_t)H * W * 3), *shifted = malloc((size_t)H * W * 3);
    smooth_image(px, H, W, 0);
    smooth_image(shifted, H, W, 8);
    char path[512], shifted_path[512], err[1024];
    snprintf(path, sizeof path, "%s/big.jpg", dir);
    snprintf(shifted_path, sizeof shifted_path, "%s/big_shifted.jpg", dir);
    write_jpeg_rgb(path, H, W, px, 95);
    write_jpeg_rgb(shifted_path, H, W, shifted, 95);

    uint8_t *dec;
    int dH, dW, oH, oW, m;
    CHECK(imagefolder_decode_scaled(path, T, IMAGEFOLDER_RESIZE, 0, (size_t)1 << 22, &dec, &dH, &dW, &oH, &oW, &m, err,
                                    sizeof err) == 0, "%s", err);
    CHECK(m == 4 && dH == 225 && dW == 300 && oH == H && oW == W, "decoded at %d/8 to %d x %d (stored %d x %d)", m, dW,
          dH, oW, oH);
    free(dec);
    CHECK(imagefolder_decode_scaled(path, 0, IMAGEFOLDER_RESIZE, 0, (size_t)1 << 22, &dec, &dH, &dW, &oH, &oW, &m, err,
                                    sizeof err) == 0 && m == 8 && dH == H && dW == W, "S 0 is not a full decode");
    free(dec);
    /* center_crop needs the shorter side 224 and the longer 298: 4/8 gives 225 x 300 */
    CHECK(imagefolder_decode_scaled(path, T, IMAGEFOLDER_CENTER_CROP, 0, (size_t)1 << 22, &dec, &dH, &dW, &oH, &oW, &m,
                                    err, sizeof err) == 0 && m == 4, "center_crop scale %d/8", m);
    free(dec);

    const size_t n = (size_t)T * T * 3;
    uint8_t *full = malloc(n), *scaled = malloc(n), *other = malloc(n);
    ImageFolderScratch scr = {0};
    int m_full, m_scaled, m_other;
    CHECK(imagefolder_load(full, T, 3, IMAGEFOLDER_RESIZE, 0, path, (size_t)1 << 22, 0, &scr, &m_full, err, sizeof err) == 0);
    CHECK(imagefolder_load(scaled, T, 3, IMAGEFOLDER_RESIZE, 0, path, (size_t)1 << 22, 1, &scr, &m_scaled, err, sizeof err) == 0);
    CHECK(imagefolder_load(other, T, 3, IMAGEFOLDER_RESIZE, 0, shifted_path, (size_t)1 << 22, 0, &scr, &m_other, err,
                           sizeof err) == 0);
    CHECK(m_full == 8 && m_scaled == 4, "scales %d and %d", m_full, m_scaled);
    double mean, mean_other;
    int max, max_other;
    compare(full, scaled, n, &mean, &max);
    compare(full, other, n, &mean_other, &max_other);
    printf("scaled JPEG decode + resize vs full decode + resize: mean |d| %.3f, max %d; an 8-pixel shift: mean %.3f, max %d\n",
           mean, max, mean_other, max_other);
    CHECK(mean <= 1.0 && max <= 8, "scaled path too far from the full one: mean %.3f max %d", mean, max);
    CHECK(mean_other > 1.0 && max_other > 8, "the comparison cannot tell a shifted image apart (mean %.3f)", mean_other);
    /* too large for max_pixels even at the reduced scale: refused before decoding */
    CHECK(imagefolder_load(full, T, 3, IMAGEFOLDER_RESIZE, 0, path, (size_t)40000, 1, &scr, &m, err, sizeof err) == -1 &&
              strstr(err, "pixels"), "max_pixels not enforced: %s", err);
    imagefolder_scratch_free(&scr);

    /* In the pipeline: a folder of two large JPEGs and one small PNG; the scaled decodes are counted. */
    char fdir[512], cdir[512], p2[600];
    snprintf(fdir, sizeof fdir, "%s/big", dir);
    snprintf(cdir, sizeof cdir, "%s/big/one", dir);
    mkdir(fdir, 0755);
    mkdir(cdir, 0755);
    snprintf(p2, sizeof p2, "%s/a.jpg", cdir);
    write_jpeg_rgb(p2, H, W, px, 90);
    snprintf(p2, sizeof p2, "%s/b.jpg", cdir);
    write_jpeg_rgb(p2, H, W, shifted, 90);
    snprintf(p2, sizeof p2, "%s/c.png", cdir);
    write_png_rgb(p2, 40, 40, px);
    for (int scaled_on = 0; scaled_on < 2; scaled_on++) {
        PipelineConfig c;
        pipeline_config_defaults(&c);
        c.image_dir = fdir;
        c.in_H = c.in_W = c.out_H = c.out_W = T;
        c.in_C = 3;
        c.num_classes = 1;
        c.augment = AUGMENT_NONE;
        c.shard_sizes[0] = 3;
        c.shuffle = 0;
        c.num_epochs = 1;
        c.jpeg_scaled = scaled_on;
        Pipeline *p = pipeline_open(&c, err, sizeof err);
        CHECK(p != NULL, "%s", err);
        if (!p) continue;
        PipelineBatch *b;
        CHECK(pipeline_next(p, &b, err, sizeof err) == 1 && b->n == 3);
        /* the first example (a.jpg) is imagefolder_load's image on the same path */
        uint8_t *want = malloc(n);
        ImageFolderScratch s2 = {0};
        int m2;
        snprintf(p2, sizeof p2, "%s/a.jpg", cdir);
        CHECK(imagefolder_load(want, T, 3, IMAGEFOLDER_RESIZE, 0, p2, PIPELINE_DEFAULT_MAX_IMAGE_PIXELS, scaled_on, &s2, &m2,
                               err, sizeof err) == 0 && m2 == (scaled_on ? 4 : 8));
        int same = 1;
        for (size_t i = 0; i < n; i++) same &= b->x[i] == (float)want[i];
        CHECK(same, "jpeg_scaled %d: the pipeline's a.jpg differs from imagefolder_load's", scaled_on);
        imagefolder_scratch_free(&s2);
        free(want);
        pipeline_release(p, b);
        PipelineStats st;
        pipeline_stats(p, &st);
        CHECK(st.images_decoded == 3 && st.images_scaled == (scaled_on ? 2 : 0), "jpeg_scaled %d: %ld decoded, %ld scaled",
              scaled_on, st.images_decoded, st.images_scaled);
        pipeline_close(p);
    }
    free(px);
    free(shifted);
    free(full);
    free(scaled);
    free(other);
}

typedef struct {
    int n;
    char line[1024];
} OneWarning;

static void keep_warning(void *ctx, const char *line) {
    OneWarning *w = ctx;
    if (w->n++ == 0) snprintf(w->line, sizeof w->line, "%s", line);
}

/* A warning about the damaged file: names it and what libjpeg said, one line. */
static int damaged_line(const char *line, const char *path) {
    return strstr(line, path) && strstr(line, "premature end of data segment") && strstr(line, "damaged JPEG data") &&
           !strchr(line, '\n');
}

static void test_damaged_jpeg(const char *tmp) {
    char dir[700], path[800], good[800], cut[800], err[1024];
    snprintf(dir, sizeof dir, "%s/damaged", tmp);
    mkdir(dir, 0755);
    for (int c = 0; c < 2; c++) {
        snprintf(path, sizeof path, "%s/%c", dir, 'a' + c);
        mkdir(path, 0755);
    }
    /* A noisy 64 x 64 JPEG (its scan data fills most of the file), and a copy cut at 70% with its end marker. */
    static uint8_t px[64 * 64 * 3];
    for (int i = 0; i < 64 * 64 * 3; i++) px[i] = (uint8_t)((i * 2654435761u) >> 24);
    snprintf(good, sizeof good, "%s/b/good.jpg", dir);
    write_jpeg_rgb(good, 64, 64, px, 90);
    FILE *f = fopen(good, "rb");
    static uint8_t bytes[64 * 64 * 3 * 2];
    const size_t n = f ? fread(bytes, 1, sizeof bytes, f) : 0;
    if (f) fclose(f);
    CHECK(n > 1000 && n < sizeof bytes, "the JPEG has %zu bytes", n);
    const size_t keep = n * 7 / 10;
    snprintf(path, sizeof path, "%s/a/damaged.jpg", dir);
    f = fopen(path, "wb");
    fwrite(bytes, 1, keep, f);
    fwrite("\xff\xd9", 1, 2, f);
    fclose(f);
    snprintf(cut, sizeof cut, "%s/cut.jpg", tmp); /* outside the folder */
    f = fopen(cut, "wb");
    fwrite(bytes, 1, keep, f);
    fclose(f);

    uint8_t *rgb = NULL;
    int H = 0, W = 0;
    CHECK(imagefolder_decode(path, &rgb, &H, &W, err, sizeof err) == 0 && H == 64 && W == 64,
          "the damaged JPEG does not decode: %s", err);
    CHECK(damaged_line(err, path), "imagefolder_decode's warning: '%s'", err);
    free(rgb);
    rgb = NULL;
    snprintf(err, sizeof err, "left over");
    CHECK(imagefolder_decode(good, &rgb, &H, &W, err, sizeof err) == 0 && err[0] == '\0',
          "the good JPEG: '%s'", err);
    free(rgb);
    rgb = NULL;
    CHECK(imagefolder_decode(cut, &rgb, &H, &W, err, sizeof err) != 0 && strstr(err, "truncated"),
          "the JPEG cut without its end marker: '%s'", err);
    /* Cut inside its header (3 and 100 bytes): truncated too, not "JPEG datastream contains no image". */
    for (size_t head = 3; head <= 100; head += 97) {
        f = fopen(cut, "wb");
        fwrite(bytes, 1, head, f);
        fclose(f);
        CHECK(imagefolder_decode(cut, &rgb, &H, &W, err, sizeof err) != 0 && strstr(err, "JPEG is truncated"),
              "the JPEG cut after %zu bytes: '%s'", head, err);
    }
    ImageFolderScratch scr = {0};
    uint8_t out[S * S * 3];
    int scale = 0;
    CHECK(imagefolder_load(out, S, 3, IMAGEFOLDER_RESIZE, 0, path, (size_t)1 << 20, 1, &scr, &scale, err, sizeof err) == 0 &&
              damaged_line(err, path), "imagefolder_load: '%s'", err);
    snprintf(err, sizeof err, "left over");
    CHECK(imagefolder_load(out, S, 3, IMAGEFOLDER_RESIZE, 0, good, (size_t)1 << 20, 1, &scr, &scale, err, sizeof err) == 0 &&
              err[0] == '\0', "imagefolder_load of the good JPEG: '%s'", err);
    imagefolder_scratch_free(&scr);

    /* tower convert's source: both images, one warning. */
    OneWarning w = {0};
    ImageFolderConfig icfg;
    imagefolder_config_defaults(&icfg);
    icfg.image_size = S;
    icfg.warn = keep_warning;
    icfg.warn_ctx = &w;
    ConvertSource *src = convert_open_imagefolder(dir, &icfg, err, sizeof err);
    CHECK(src != NULL, "convert_open_imagefolder: %s", err);
    if (src) {
        ConvertItem item;
        int k = 0;
        while (src->next(src, &item, err, sizeof err) == 1) k++;
        CHECK(k == 2 && imagefolder_n_skipped(src) == 0, "convert: %d images, %ld skipped", k, imagefolder_n_skipped(src));
        CHECK(w.n == 1 && damaged_line(w.line, path), "convert: %d warnings, the first '%s'", w.n, w.line);
        src->close(src);
    }

    /* The pipeline, two epochs: both images each time, one warning. */
    PipelineConfig c;
    config(&c, dir, 2, 5, 1);
    c.num_classes = 2;
    OneWarning pw = {0};
    c.warn = keep_warning;
    c.warn_ctx = &pw;
    Pipeline *p = pipeline_open(&c, err, sizeof err);
    CHECK(p != NULL, "pipeline_open: %s", err);
    if (!p) return;
    long got = 0;
    PipelineBatch *b;
    int rc;
    while ((rc = pipeline_next(p, &b, err, sizeof err)) == 1) {
        got += b->n;
        pipeline_release(p, b);
    }
    CHECK(rc == 0, "pipeline: %s", err);
    PipelineStats st;
    pipeline_stats(p, &st);
    pipeline_close(p);
    CHECK(got == 4, "the pipeline gave %ld examples in 2 epochs of 2 images", got);
    CHECK(pw.n == 1 && damaged_line(pw.line, path), "pipeline: %d warnings, the first '%s'", pw.n, pw.line);
    CHECK(st.images_damaged == 1 && st.corrupt_skipped == 0, "images_damaged %ld, corrupt_skipped %ld",
          st.images_damaged, st.corrupt_skipped);
}

#define CROP_H 30
#define CROP_W 40
#define CROP_N 9

static void test_random_crop(const char *tmp) {
    char dir[600], path[700], err[1024];
    snprintf(dir, sizeof dir, "%s/crops", tmp);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/only", dir);
    mkdir(path, 0755);
    uint8_t px[CROP_H * CROP_W * 3];
    for (int k = 0; k < CROP_N; k++) {
        fill_position_rgb(px, CROP_H, CROP_W, k);
        snprintf(path, sizeof path, "%s/only/%02d.png", dir, k);
        write_png_rgb(path, CROP_H, CROP_W, px);
    }
    enum { T = 16, EPOCHS = 3, N = CROP_N * EPOCHS };
    const size_t ex = (size_t)T * T * 3;
    float *a = malloc(N * ex * sizeof(float)), *b = malloc(N * ex * sizeof(float));
    PipelineConfig c;
    config(&c, dir, 3, 21, 0);
    c.in_H = c.in_W = c.out_H = c.out_W = T;
    c.num_classes = 1;
    c.num_epochs = EPOCHS;
    c.resize_mode = IMAGEFOLDER_RANDOM_CROP;
    long n = pipeline_run_floats(&c, a, NULL, N, NULL, err, sizeof err);
    CHECK(n == N, "random crop: %ld examples (%s)", n, n < 0 ? err : "");
    /* in file order: example i is file i % CROP_N of epoch i / CROP_N */
    ImageFolderScratch scr = {0};
    uint8_t want[T * T * 3];
    int wrong = 0, redrawn = 0;
    for (long i = 0; i < n && n == N; i++) {
        const long e = i / CROP_N, k = i % CROP_N;
        snprintf(path, sizeof path, "%s/only/%02ld.png", dir, k);
        const uint64_t st = rng_seed(21, RNG_STREAM_CROP, (uint64_t)(e * CROP_N + k));
        int m;
        CHECK(imagefolder_load_random_crop(want, T, 3, st, path, (size_t)1 << 20, 1, &scr, NULL, &m, err, sizeof err) == 0,
              "%s", err);
        for (size_t j = 0; j < ex; j++) wrong += a[(size_t)i * ex + j] != (float)want[j];
        if (e > 0) redrawn += memcmp(a + (size_t)i * ex, a + (size_t)(i - CROP_N) * ex, ex * sizeof(float)) != 0;
    }
    CHECK(wrong == 0, "random crop: %d values differ from imagefolder_load_random_crop's for (seed, epoch, file)", wrong);
    CHECK(redrawn >= CROP_N * (EPOCHS - 1) - 1, "random crop: only %d of %d crops differ from the last epoch's",
          redrawn, CROP_N * (EPOCHS - 1));
    config(&c, dir, 1, 21, 0);
    c.in_H = c.in_W = c.out_H = c.out_W = T;
    c.num_classes = 1;
    c.num_epochs = EPOCHS;
    c.resize_mode = IMAGEFOLDER_RANDOM_CROP;
    CHECK(pipeline_run_floats(&c, b, NULL, N, NULL, err, sizeof err) == N && !memcmp(a, b, N * ex * sizeof(float)),
          "random crop: 1 worker and 3 give other batches");
    /* shuffled, then resumed 11 examples in: the rest of the same stream, crops included */
    c.shuffle = 1;
    c.n_workers = 2;
    CHECK(pipeline_run_floats(&c, a, NULL, N, NULL, err, sizeof err) == N, "shuffled: %s", err);
    c.skip_examples = 11;
    CHECK(pipeline_run_floats(&c, b, NULL, N, NULL, err, sizeof err) == N - 11 &&
              !memcmp(a + 11 * ex, b, (N - 11) * ex * sizeof(float)),
          "random crop: a resume 11 examples in is not the rest of the stream");
    imagefolder_scratch_free(&scr);
    free(a);
    free(b);
}

/* tower convert's source: the images' ids (R) in the order next gives them, with labels checked; n of them. */
static int convert_order(const char *dir, int shuffle, uint64_t seed, int *ids) {
    ImageFolderConfig icfg;
    imagefolder_config_defaults(&icfg);
    icfg.image_size = S;
    icfg.shuffle = shuffle;
    icfg.shuffle_seed = seed;
    char err[1024];
    ConvertSource *src = convert_open_imagefolder(dir, &icfg, err, sizeof err);
    CHECK(src != NULL, "convert_open_imagefolder: %s", err);
    if (!src) return 0;
    ConvertItem item;
    int n = 0;
    while (n < N_CLASSES * PER_CLASS && src->next(src, &item, err, sizeof err) == 1) {
        ids[n] = item.image[0];
        CHECK(item.label == ids[n] / PER_CLASS, "image %d has label %d", ids[n], item.label);
        n++;
    }
    src->close(src);
    return n;
}

/* convert writes a folder's images in a permutation of --seed (every shard a mix of the classes, as
 * build_image_data.py writes them), or with --keep_order class after class. */
static void test_convert_order(const char *dir) {
    enum { N = N_CLASSES * PER_CLASS };
    int listed[N], a[N], b[N], c[N];
    CHECK(convert_order(dir, 0, 0, listed) == N, "keep_order: not %d images", N);
    for (int i = 0; i < N; i++) CHECK(listed[i] == i, "keep_order: image %d at %d", listed[i], i);
    CHECK(convert_order(dir, 1, 12345, a) == N && convert_order(dir, 1, 12345, b) == N &&
          convert_order(dir, 1, 7, c) == N, "shuffled: not %d images", N);
    int seen[N] = {0}, moved = 0, same = 1, other = 0, first_half_classes = 0;
    for (int i = 0; i < N; i++) {
        seen[a[i]]++;
        moved += a[i] != i;
        same &= a[i] == b[i];
        other += a[i] != c[i];
    }
    for (int i = 0; i < N; i++) CHECK(seen[i] == 1, "shuffled: image %d written %d times", i, seen[i]);
    int has[N_CLASSES] = {0};
    for (int i = 0; i < N / 2; i++) has[a[i] / PER_CLASS] = 1;
    for (int k = 0; k < N_CLASSES; k++) first_half_classes += has[k];
    CHECK(moved > N / 2 && first_half_classes == N_CLASSES, "shuffled: %d of %d moved, %d classes in the first half",
          moved, N, first_half_classes);
    CHECK(same, "the same seed gave another order");
    CHECK(other > 0, "seeds 12345 and 7 gave one order");
}

int main(void) {
    char dir[] = "/tmp/test_pipeline_imagefolder_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char folder[600];
    snprintf(folder, sizeof folder, "%s/data", dir);
    make_folder(folder);
    test_epochs_and_order(folder);
    test_convert_order(folder);
    test_bad_images(folder);
    test_memory_bound(folder);
    test_scaled_jpeg(dir);
    test_interlaced_png(dir);
    test_damaged_jpeg(dir);
    test_random_crop(dir);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    printf("%d checks, %d failures\n", check_count, check_failures);
    return check_failures != 0;
}
