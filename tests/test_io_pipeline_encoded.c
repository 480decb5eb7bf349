/* test_io_pipeline_encoded.c — the input pipeline on TFRecords of encoded
 * images (PipelineConfig.image_encoded, io/pipeline_tfrecord.c), as TF-slim's
 * and tf_cnn_benchmarks' ImageNet files hold them (image/encoded,
 * image/class/label).
 *
 * What it proves, on PNGs and JPEGs written here (40 x 30, their pixels
 * carrying position and id) whose bytes go into two TFRecord files:
 *   without shuffle, every example in read order is imagefolder_load's of
 *   the image's own file (center crop to 16): the bytes entry point decodes
 *   as the file path does, labels as written; the same stream with 1 or 3
 *   workers; random crops are the crops of (seed, epoch, file, record),
 *   redrawn each epoch, the same with 1 or 3 workers; shuffled, a resume
 *   (skip_examples) continues the same stream, crops included; a record
 *   whose image is not a JPEG or PNG stops the pipeline with one line naming
 *   the file, the record and its offset, or with skip_corrupt is skipped
 *   (counted once per epoch, its record's bytes lost) while the rest keep
 *   their order; a record missing its label, an encoded image larger
 *   than max_image_pixels allows, and an empty one (once read as a path:
 *   an image's bytes are never a file name) are bad records too; the memory bound
 *   counts the decode window and the workers' buffers.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/example.h"
#include "io/imagefolder.h"
#include "io/pipeline.h"
#include "io/rng.h"
#include "io/tfrecord.h"

#include "tests/check.h"
#include "tests/image_write.h"
#include "tests/pipeline_run.h"
#include "tests/test_io_util.h"

#define IMG_H 30
#define IMG_W 40
#define N_IMAGES 12 /* six a file */
#define N_FILES 2
#define T 16        /* the size decoded to */
#define N_CLASSES 3

static char image_paths[N_IMAGES][512];
static char record_files[N_FILES][512];

/* Image k: R = 6x, G = 8y, B = 20k; even k a PNG, odd k a JPEG (quality 95). */
static void make_images(void) {
    uint8_t px[IMG_H * IMG_W * 3];
    for (int k = 0; k < N_IMAGES; k++) {
        fill_position_rgb(px, IMG_H, IMG_W, k);
        char name[64];
        snprintf(name, sizeof name, "img%02d.%s", k, k % 2 ? "jpg" : "png");
        snprintf(image_paths[k], sizeof image_paths[k], "%s", io_tmp(name));
        if (k % 2) write_jpeg_rgb(image_paths[k], IMG_H, IMG_W, px, 95);
        else write_png_rgb(image_paths[k], IMG_H, IMG_W, px);
    }
}

/* One Example as build_image_data.py writes it: the encoded bytes, the label, the format and stored size. */
static void write_example(TfrWriter *w, const uint8_t *bytes, size_t n, int64_t label, int with_label) {
    ExampleBuilder b;
    example_builder_init(&b);
    CHECK(example_add_bytes(&b, "image/encoded", bytes, n) == 0 && example_add_bytes(&b, "image/format", "JPEG", 4) == 0 &&
          example_add_int64(&b, "image/height", IMG_H) == 0 && example_add_int64(&b, "image/width", IMG_W) == 0 &&
          (!with_label || example_add_int64(&b, "image/class/label", label) == 0), "example_add");
    const uint8_t *data;
    const size_t data_n = example_builder_encode(&b, &data);
    char err[512];
    CHECK(data_n > 0 && tfr_writer_write(w, data, data_n, err, sizeof err) == 0, "write: %s", err);
    example_builder_free(&b);
}

/* Files r0, r1: images 0-5 and 6-11 in order, label k % N_CLASSES; at record `bad_at` of file 0 (-1: none)
 * a record of kind bad (0: bytes that are no image, 1: no label, 2: an image feature of 2 MiB starting as a JPEG,
 * 3: an empty image feature). */
static void write_records(int bad_at, int bad) {
    char err[512];
    for (int f = 0; f < N_FILES; f++) {
        char name[32];
        snprintf(name, sizeof name, "r%d.tfrecord", f);
        snprintf(record_files[f], sizeof record_files[f], "%s", io_tmp(name));
        TfrWriter *w = tfr_writer_open(record_files[f], IO_COMPRESSION_NONE, err, sizeof err);
        CHECK(w != NULL, "%s", err);
        if (!w) exit(1);
        for (int i = 0; i < N_IMAGES / N_FILES; i++) {
            if (f == 0 && i == bad_at) {
                static uint8_t junk[2 << 20];
                junk[0] = 0xff, junk[1] = 0xd8, junk[2] = bad == 2 ? 0xff : 0x00;
                write_example(w, junk, bad == 2 ? sizeof junk : bad == 3 ? 0 : 100, 0, bad != 1);
            }
            const int k = f * (N_IMAGES / N_FILES) + i;
            size_t n;
            uint8_t *bytes = io_read_file(image_paths[k], &n);
            write_example(w, bytes, n, k % N_CLASSES, 1);
            free(bytes);
        }
        CHECK(tfr_writer_close(w, err, sizeof err) == 0, "%s", err);
    }
}

static void config(PipelineConfig *c, int n_workers, int shuffle, int resize_mode, int epochs) {
    static const char *files[N_FILES];
    for (int f = 0; f < N_FILES; f++) files[f] = record_files[f];
    pipeline_config_defaults(c);
    c->files = files;
    c->n_files = N_FILES;
    c->image_key = "image/encoded";
    c->label_key = "image/class/label";
    c->image_encoded = 1;
    c->in_H = c->in_W = c->out_H = c->out_W = T;
    c->in_C = 3;
    c->num_classes = N_CLASSES;
    c->augment = AUGMENT_NONE; /* the decoded bytes as floats */
    c->shard_sizes[0] = 5;
    c->shuffle = shuffle;
    c->min_after_dequeue = 4;
    c->num_epochs = epochs;
    c->seed = 33;
    c->n_workers = n_workers;
    c->drop_remainder = 0;
    c->resize_mode = resize_mode;
    c->max_image_pixels = (size_t)1 << 16;
}

enum { EX = T * T * 3, EPOCHS = 3, N = N_IMAGES * EPOCHS };

/* Example i of an unshuffled run against image k's file: decoded through the path, crop or centre crop. */
static int differs_from_file(const float *x, int k, int resize_mode, uint64_t rng, ImageFolderScratch *scr) {
    uint8_t want[EX];
    char err[512];
    int m;
    const int rc = resize_mode == IMAGEFOLDER_RANDOM_CROP
                       ? imagefolder_load_random_crop(want, T, 3, rng, image_paths[k], (size_t)1 << 16, 1, scr, NULL, &m,
                                                      err, sizeof err)
                       : imagefolder_load(want, T, 3, (ImageFolderResizeMode)resize_mode, T, image_paths[k],
                                          (size_t)1 << 16, 1, scr, &m, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    int wrong = 0;
    for (int j = 0; j < EX; j++) wrong += x[j] != (float)want[j];
    return wrong;
}

static void test_stream(void) {
    write_records(-1, 0);
    float *a = malloc(sizeof(float) * N * EX), *b = malloc(sizeof(float) * N * EX);
    int la[N], lb[N];
    char err[1024];
    PipelineConfig c;
    ImageFolderScratch scr = {0};
    PipelineStats st;

    config(&c, 3, 0, IMAGEFOLDER_CENTER_CROP, 1);
    long n = pipeline_run_floats(&c, a, la, N, &st, err, sizeof err);
    CHECK(n == N_IMAGES, "center crop: %ld examples (%s)", n, n < 0 ? err : "");
    int wrong = 0, bad_label = 0;
    for (int i = 0; i < N_IMAGES && n == N_IMAGES; i++) {
        wrong += differs_from_file(a + (size_t)i * EX, i, IMAGEFOLDER_CENTER_CROP, 0, &scr);
        bad_label += la[i] != i % N_CLASSES;
    }
    CHECK(wrong == 0, "center crop: %d values differ from imagefolder_load of the image files", wrong);
    CHECK(bad_label == 0, "%d labels are not the records'", bad_label);
    CHECK(st.images_decoded == N_IMAGES, "images_decoded %ld", st.images_decoded);
    config(&c, 1, 0, IMAGEFOLDER_CENTER_CROP, 1);
    CHECK(pipeline_run_floats(&c, b, lb, N, NULL, err, sizeof err) == N_IMAGES &&
              !memcmp(a, b, sizeof(float) * N_IMAGES * EX),
          "center crop: 1 worker and 3 give other batches");

    /* random crops: those of (seed, epoch, file, record), redrawn each epoch */
    config(&c, 3, 0, IMAGEFOLDER_RANDOM_CROP, EPOCHS);
    n = pipeline_run_floats(&c, a, la, N, NULL, err, sizeof err);
    CHECK(n == N, "random crop: %ld examples (%s)", n, n < 0 ? err : "");
    int redrawn = 0;
    wrong = 0;
    for (long i = 0; i < n && n == N; i++) {
        const long e = i / N_IMAGES, k = i % N_IMAGES, f = k / (N_IMAGES / N_FILES), r = k % (N_IMAGES / N_FILES);
        const uint64_t counter = ((uint64_t)e * N_FILES + (uint64_t)f) * ((uint64_t)1 << 32) + (uint64_t)r;
        wrong += differs_from_file(a + (size_t)i * EX, (int)k, IMAGEFOLDER_RANDOM_CROP,
                                   rng_seed(33, RNG_STREAM_CROP, counter), &scr);
        if (e > 0) redrawn += memcmp(a + (size_t)i * EX, a + (size_t)(i - N_IMAGES) * EX, EX * sizeof(float)) != 0;
    }
    CHECK(wrong == 0, "random crop: %d values differ from the file's crop of (seed, epoch, file, record)", wrong);
    CHECK(redrawn >= N_IMAGES * (EPOCHS - 1) - 1, "random crop: only %d of %d crops redrawn", redrawn,
          N_IMAGES * (EPOCHS - 1));
    config(&c, 1, 0, IMAGEFOLDER_RANDOM_CROP, EPOCHS);
    CHECK(pipeline_run_floats(&c, b, lb, N, NULL, err, sizeof err) == N && !memcmp(a, b, sizeof(float) * N * EX),
          "random crop: 1 worker and 3 give other batches");

    /* shuffled (file order and shuffle buffer), then resumed 13 examples in */
    config(&c, 2, 1, IMAGEFOLDER_RANDOM_CROP, EPOCHS);
    CHECK(pipeline_run_floats(&c, a, la, N, NULL, err, sizeof err) == N, "shuffled: %s", err);
    int in_order = 1;
    for (int i = 0; i < N_IMAGES; i++) in_order &= la[i] == i % N_CLASSES;
    c.skip_examples = 13;
    CHECK(pipeline_run_floats(&c, b, lb, N, NULL, err, sizeof err) == N - 13 &&
              !memcmp(a + 13 * EX, b, (N - 13) * EX * sizeof(float)) &&
          !memcmp(la + 13, lb, (N - 13) * sizeof(int)), "shuffled: a resume 13 examples in is not the rest of the stream");
    /* No bytes are no image, even where the name is an image file's path (it was read as one) */
    for (int k = 0; k < 2; k++) {
        uint8_t out[EX];
        int m;
        const int rc = imagefolder_load_bytes(out, T, 3, IMAGEFOLDER_RESIZE, 0, 0, k ? (const uint8_t *)"" : NULL, 0,
                                              image_paths[0], (size_t)1 << 16, 1, &scr, &m, err, sizeof err);
        CHECK(rc == -1 && strstr(err, "empty"), "imagefolder_load_bytes of no bytes (%s): rc %d, '%s'",
              k ? "\"\"" : "NULL", rc, err);
    }
    imagefolder_scratch_free(&scr);
    free(a);
    free(b);
}

/* A bad record at record 2 of file 0 (offset: two good records in): stops the pipeline with one line, or is
 * skipped with the others in order. */
static void test_bad(int kind, const char *want_why) {
    write_records(2, kind);
    float *a = malloc(sizeof(float) * N * EX);
    int la[N];
    char err[1024] = "", want[600];
    PipelineConfig c;
    config(&c, 2, 0, IMAGEFOLDER_CENTER_CROP, 1);
    const long n = pipeline_run_floats(&c, a, la, N, NULL, err, sizeof err);
    snprintf(want, sizeof want, "%s: record 2 at offset", record_files[0]);
    CHECK(n == -1 && strstr(err, want) && strstr(err, want_why), "bad record (kind %d): %ld examples, '%s'", kind, n,
          err);
    config(&c, 2, 0, IMAGEFOLDER_CENTER_CROP, 2);
    c.skip_corrupt = 1;
    c.max_corrupt_fraction = 1;
    c.warn = NULL;
    PipelineStats st;
    const long m = pipeline_run_floats(&c, a, la, N, &st, err, sizeof err);
    CHECK(m == 2 * N_IMAGES, "skip_corrupt (kind %d): %ld examples (%s)", kind, m, m < 0 ? err : "");
    int bad_label = 0;
    for (long i = 0; i < m && m == 2 * N_IMAGES; i++) bad_label += la[i] != (i % N_IMAGES) % N_CLASSES;
    CHECK(bad_label == 0, "skip_corrupt (kind %d): %d examples out of order", kind, bad_label);
    CHECK(st.corrupt_distinct == 1 && st.corrupt_skipped == 2, "kind %d: %ld distinct, %ld skipped", kind,
          st.corrupt_distinct, st.corrupt_skipped);
    CHECK(st.corrupt_lost_n_bytes > (kind == 2 ? (uint64_t)2 << 20 : kind == 3 ? 16 : 100) &&
              st.corrupt_lost_n_bytes < ((uint64_t)3 << 20),
          "kind %d: %llu bytes lost", kind, (unsigned long long)st.corrupt_lost_n_bytes);
    free(a);
}

static void test_memory_bound(void) {
    PipelineConfig c;
    config(&c, 2, 1, IMAGEFOLDER_CENTER_CROP, 1);
    PipelineMemory enc, raw;
    pipeline_max_n_bytes(&c, 0, &enc);
    c.image_encoded = 0;
    pipeline_max_n_bytes(&c, 0, &raw);
    /* the window: 4 entries a worker of 3 bytes a pixel and 1 MiB; the workers: libjpeg's and the resampler's */
    const size_t window = 2 * 4 * (3 * ((size_t)1 << 16) + ((size_t)1 << 20));
    CHECK(enc.reader_n_bytes >= raw.reader_n_bytes + window, "reader: %zu, %zu without encoded images", enc.reader_n_bytes,
          raw.reader_n_bytes);
    CHECK(enc.workers_n_bytes > 2 * 14 * ((size_t)1 << 16) && raw.workers_n_bytes == 0, "workers: %zu, %zu",
          enc.workers_n_bytes, raw.workers_n_bytes);
}

int main(void) {
    make_images();
    test_stream();
    test_bad(0, "not a PNG or JPEG image");
    test_bad(1, "image/class/label");
    test_bad(2, "over the");
    test_bad(3, "encoded image 'image/encoded' is empty");
    test_memory_bound();
    return io_test_result("test_io_pipeline_encoded");
}
