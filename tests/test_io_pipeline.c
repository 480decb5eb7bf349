/* test_io_pipeline.c — the input pipeline: every example exactly once per
 * epoch, shards of the requested sizes, determinism under a seed whatever
 * the worker count, resume with skip_examples, the augmentation (against a
 * straightforward reference and its statistics), the caller's allocator,
 * the statistics, and every bad-record case with its one-line message,
 * stopping or (skip_corrupt) counting. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/augment.h"
#include "io/example.h"
#include "io/pipeline.h"
#include "io/tfrecord.h"
#include "test_io_util.h"

/* ---------------------------------------------------------------- data */

enum { BAD_NONE, BAD_DATA_CRC, BAD_NOT_EXAMPLE, BAD_MISSING_LABEL, BAD_LABEL_TYPE, BAD_LABEL_RANGE, BAD_IMAGE_SIZE,
       BAD_HEIGHT, BAD_IMAGE_TYPE, BAD_TRUNCATED, BAD_LENGTH };

/* Image of example id: bytes 0, 1 hold the id, the rest a pattern. */
static void image_of(uint8_t *img, int id, size_t n) {
    for (size_t j = 0; j < n; j++) img[j] = (uint8_t)((id * 31 + (int)j * 17 + 5) & 0xff);
    img[0] = (uint8_t)(id & 0xff);
    img[1] = (uint8_t)(id >> 8);
}

typedef struct {
    char paths[4][512];
    int n_files;
    int counts[4];
    int first_id[4];
    uint64_t offsets[4][256]; /* header offset of each record */
} Dataset;

/* Writes n_files files holding counts[f] examples each (ids consecutive).
 * One record (file bad_file, index bad_index) can be made bad. */
static void write_dataset(Dataset *ds, const char *name, int n_files, const int *counts, int H, int W, int C, int compression,
                          int bad_kind, int bad_file, int bad_index) {
    char err[512];
    ExampleBuilder b;
    example_builder_init(&b);
    size_t n = (size_t)H * W * C;
    uint8_t *img = malloc(n + 8);
    int id = 0;
    ds->n_files = n_files;
    for (int f = 0; f < n_files; f++) {
        char fname[128];
        snprintf(fname, sizeof fname, "%s-%05d-of-%05d.tfrecord", name, f, n_files);
        snprintf(ds->paths[f], sizeof ds->paths[f], "%s", io_tmp(fname));
        ds->counts[f] = counts[f];
        ds->first_id[f] = id;
        TfrWriter *w = tfr_writer_open(ds->paths[f], compression, err, sizeof err);
        uint64_t off = 0;
        for (int i = 0; i < counts[f]; i++, id++) {
            int bad = (f == bad_file && i == bad_index) ? bad_kind : BAD_NONE;
            image_of(img, id, n);
            example_builder_reset(&b);
            float fimg[4] = {1, 2, 3, 4};
            if (bad == BAD_IMAGE_SIZE) example_add_bytes(&b, "image_raw", img, n - 1);
            else if (bad == BAD_IMAGE_TYPE) example_add_floats(&b, "image_raw", fimg, 4);
            else example_add_bytes(&b, "image_raw", img, n);
            if (bad == BAD_LABEL_TYPE) example_add_floats(&b, "label", fimg, 1);
            else if (bad == BAD_LABEL_RANGE) example_add_int64(&b, "label", 10);
            else if (bad != BAD_MISSING_LABEL) example_add_int64(&b, "label", id % 10);
            example_add_int64(&b, "height", bad == BAD_HEIGHT ? H + 1 : H);
            example_add_int64(&b, "width", W);
            example_add_int64(&b, "depth", C);
            const uint8_t *data;
            size_t dn = example_builder_encode(&b, &data);
            if (bad == BAD_NOT_EXAMPLE) {
                data = (const uint8_t *)"\x0a\x80\x80";
                dn = 3;
            }
            ds->offsets[f][i] = off;
            tfr_writer_write(w, data, dn, err, sizeof err);
            off += 16 + dn;
        }
        tfr_writer_close(w, err, sizeof err);
        if (f == bad_file && (bad_kind == BAD_DATA_CRC || bad_kind == BAD_TRUNCATED || bad_kind == BAD_LENGTH)) {
            size_t fn;
            uint8_t *bytes = io_read_file(ds->paths[f], &fn);
            size_t at = (size_t)ds->offsets[f][bad_index];
            if (bad_kind == BAD_DATA_CRC) bytes[at + 12 + 20] ^= 0x01;
            if (bad_kind == BAD_LENGTH) tfr_encode_header(bytes + at, (uint64_t)1 << 40);
            io_write_file(ds->paths[f], bytes, bad_kind == BAD_TRUNCATED ? at + 20 : fn);
            free(bytes);
        }
    }
    free(img);
    example_builder_free(&b);
}

static const char *const *ds_files(const Dataset *ds, const char **buf) {
    for (int f = 0; f < ds->n_files; f++) buf[f] = ds->paths[f];
    return buf;
}

static int ds_total(const Dataset *ds) {
    int t = 0;
    for (int f = 0; f < ds->n_files; f++) t += ds->counts[f];
    return t;
}

/* A config for the 4x4x3 test images with no augmentation. */
static void base_config(PipelineConfig *c, const Dataset *ds, const char **files_buf) {
    pipeline_config_defaults(c);
    c->files = ds_files(ds, files_buf);
    c->n_files = ds->n_files;
    c->in_H = c->out_H = 4;
    c->in_W = c->out_W = 4;
    c->in_C = 3;
    c->num_classes = 10;
    c->augment = AUGMENT_NONE;
    c->n_shards = 3;
    c->shard_sizes[0] = 3;
    c->shard_sizes[1] = 5;
    c->shard_sizes[2] = 2;
    c->min_after_dequeue = 20;
    c->num_epochs = 3;
    c->seed = 42;
    c->n_workers = 3;
    c->drop_remainder = 0;
}

/* Id of an AUGMENT_NONE example from its first two values. */
static int id_of(const float *x) { return (int)x[0] + 256 * (int)x[1]; }

/* ---------------------------------------------------------------- tests */

static void test_exactly_once_and_shards(const Dataset *ds) {
    const char *fb[4];
    PipelineConfig c;
    char err[512];
    int N = ds_total(ds);
    for (int drop = 0; drop < 2; drop++) {
        base_config(&c, ds, fb);
        c.drop_remainder = drop;
        Pipeline *p = pipeline_open(&c, err, sizeof err);
        CHECK_MSG(p != NULL, "%s", err);
        if (!p) return;
        int *seen = calloc((size_t)N, sizeof *seen);
        int *stream = malloc(sizeof(int) * (size_t)N * 3);
        long total = 0, n_batches = 0, bad_content = 0, bad_shards = 0, bad_meta = 0;
        PipelineBatch *b;
        int rc;
        uint8_t want[48];
        while ((rc = pipeline_next(p, &b, err, sizeof err)) == 1) {
            if (b->first_example != total || b->epoch != total / N || b->example_n_floats != 48) bad_meta++;
            int sum = 0;
            for (int t = 0; t < 3; t++) {
                if (b->shard_offset[t] != sum || b->shard_n[t] < 0 || b->shard_n[t] > c.shard_sizes[t]) bad_shards++;
                sum += b->shard_n[t];
            }
            if (sum != b->n) bad_shards++;
            if (b->n == 10 && (b->shard_n[0] != 3 || b->shard_n[1] != 5 || b->shard_n[2] != 2)) bad_shards++;
            for (int i = 0; i < b->n; i++) {
                const float *x = b->x + (size_t)i * 48;
                int id = id_of(x);
                if (id < 0 || id >= N) {
                    bad_content++;
                    continue;
                }
                image_of(want, id, 48);
                for (int j = 0; j < 48; j++)
                    if (x[j] != (float)want[j]) {
                        bad_content++;
                        break;
                    }
                if (b->labels[i] != id % 10) bad_content++;
                stream[total++] = id;
            }
            n_batches++;
            pipeline_release(p, b);
        }
        CHECK_MSG(rc == 0, "%s", err);
        CHECK(pipeline_next(p, &b, err, sizeof err) == 0);
        CHECK(bad_content == 0 && bad_shards == 0 && bad_meta == 0);
        long want_total = drop ? (3L * N / 10) * 10 : 3L * N;
        CHECK_MSG(total == want_total, "drop %d: %ld examples, expected %ld", drop, total, want_total);
        CHECK(n_batches == (drop ? 3L * N / 10 : (3L * N + 9) / 10));
        /* Each epoch is a permutation of the data set. */
        for (int e = 0; e < 3; e++) {
            memset(seen, 0, sizeof(int) * (size_t)N);
            int dup = 0, miss = 0, in_order = 1;
            long end = (e + 1) * (long)N < total ? (e + 1) * (long)N : total;
            for (long k = e * (long)N; k < end; k++) {
                dup += seen[stream[k]]++ > 0;
                if (k > e * (long)N && stream[k] != stream[k - 1] + 1) in_order = 0;
            }
            for (int i = 0; i < N; i++) miss += !seen[i];
            CHECK_MSG(dup == 0, "epoch %d: %d duplicates", e, dup);
            if (end - e * (long)N == N) CHECK_MSG(miss == 0, "epoch %d: %d missing", e, miss);
            CHECK_MSG(!in_order, "epoch %d is not shuffled", e);
        }
        CHECK(memcmp(stream, stream + N, sizeof(int) * 20) != 0); /* epochs are shuffled differently */
        PipelineStats st;
        pipeline_stats(p, &st);
        CHECK(st.examples_produced == total && st.batches_delivered == n_batches && st.corrupt_skipped == 0);
        CHECK(st.queue_fill >= 0.0 && st.queue_fill <= 1.0 && st.consumer_wait_sec >= 0.0 && st.examples_per_sec > 0.0);
        CHECK(st.prefetch_batches >= 6);
        pipeline_close(p);
        free(seen);
        free(stream);
    }
    /* No shuffle: file order, every epoch. */
    base_config(&c, ds, fb);
    c.shuffle = 0;
    c.num_epochs = 2;
    Pipeline *p = pipeline_open(&c, err, sizeof err);
    PipelineBatch *b;
    long k = 0, out_of_order = 0;
    while (pipeline_next(p, &b, err, sizeof err) == 1) {
        for (int i = 0; i < b->n; i++, k++) out_of_order += id_of(b->x + (size_t)i * 48) != (int)(k % N);
        pipeline_release(p, b);
    }
    CHECK(k == 2L * N && out_of_order == 0);
    pipeline_close(p);
}

static void test_split_shards(void) {
    PipelineConfig d;
    pipeline_config_defaults(&d);
    CHECK(d.shard_sizes[0] == 128 && d.shard_sizes[3] == 128 && d.shard_sizes[PIPELINE_MAX_SHARDS - 1] == 128);
    int sizes[3] = {3, 5, 2}, off[3], cnt[3];
    pipeline_split_shards(10, 3, sizes, off, cnt);
    CHECK(cnt[0] == 3 && cnt[1] == 5 && cnt[2] == 2 && off[0] == 0 && off[1] == 3 && off[2] == 8);
    pipeline_split_shards(9, 3, sizes, off, cnt);
    CHECK(cnt[0] + cnt[1] + cnt[2] == 9 && cnt[0] == 3 && cnt[1] == 5 && cnt[2] == 1 && off[2] == 8);
    pipeline_split_shards(1, 3, sizes, off, cnt);
    CHECK(cnt[0] == 1 && cnt[1] == 0 && cnt[2] == 0);
    int eq[4] = {64, 64, 64, 64}, o4[4], c4[4];
    pipeline_split_shards(100, 4, eq, o4, c4);
    CHECK(c4[0] == 25 && c4[1] == 25 && c4[2] == 25 && c4[3] == 25 && o4[3] == 75);
}

/* Collects every batch's x and labels into one buffer (allocated), for comparisons. */
typedef struct {
    float *x;
    int32_t *labels;
    long *first;
    long n_examples, n_batches;
} Collected;

static int collect(const PipelineConfig *c, Collected *out, long max_batches) {
    char err[512];
    memset(out, 0, sizeof *out);
    Pipeline *p = pipeline_open(c, err, sizeof err);
    if (!p) {
        fprintf(stderr, "pipeline_open: %s\n", err);
        return -1;
    }
    size_t per = (size_t)c->out_H * c->out_W * c->in_C;
    long cap = 64, B = 0;
    for (int t = 0; t < c->n_shards; t++) B += c->shard_sizes[t];
    out->x = malloc(sizeof(float) * per * (size_t)(cap * B));
    out->labels = malloc(sizeof(int32_t) * (size_t)(cap * B));
    out->first = malloc(sizeof(long) * (size_t)cap);
    PipelineBatch *b;
    int rc;
    while (out->n_batches < max_batches && (rc = pipeline_next(p, &b, err, sizeof err)) == 1) {
        if (out->n_batches == cap) {
            cap *= 2;
            out->x = realloc(out->x, sizeof(float) * per * (size_t)(cap * B));
            out->labels = realloc(out->labels, sizeof(int32_t) * (size_t)(cap * B));
            out->first = realloc(out->first, sizeof(long) * (size_t)cap);
        }
        memcpy(out->x + per * (size_t)out->n_examples, b->x, sizeof(float) * per * (size_t)b->n);
        memcpy(out->labels + out->n_examples, b->labels, sizeof(int32_t) * (size_t)b->n);
        out->first[out->n_batches++] = b->first_example;
        out->n_examples += b->n;
        pipeline_release(p, b);
    }
    pipeline_close(p);
    return 0;
}

static void free_collected(Collected *c) {
    free(c->x);
    free(c->labels);
    free(c->first);
}

static void test_determinism_and_resume(void) {
    /* CIFAR-like 8x8x3 images cropped to 6x6 with the full training distortion. */
    Dataset ds;
    int counts[3] = {30, 30, 17};
    write_dataset(&ds, "aug", 3, counts, 8, 8, 3, IO_COMPRESSION_NONE, BAD_NONE, -1, -1);
    const char *fb[4];
    PipelineConfig c;
    pipeline_config_defaults(&c);
    c.files = ds_files(&ds, fb);
    c.n_files = 3;
    c.in_H = c.in_W = 8;
    c.in_C = 3;
    c.out_H = c.out_W = 6;
    c.augment = AUGMENT_CIFAR_TRAIN;
    c.n_shards = 2;
    c.shard_sizes[0] = c.shard_sizes[1] = 5;
    c.min_after_dequeue = 25;
    c.num_epochs = 3;
    c.seed = 7;
    c.drop_remainder = 1;
    Collected a, b2, s;
    c.n_workers = 1;
    c.prefetch_batches = 4;
    CHECK(collect(&c, &a, 1000) == 0);
    c.n_workers = 4;
    c.prefetch_batches = 9;
    CHECK(collect(&c, &b2, 1000) == 0);
    CHECK(a.n_examples == 230 && b2.n_examples == 230);
    CHECK(!memcmp(a.x, b2.x, sizeof(float) * 108 * 230) && !memcmp(a.labels, b2.labels, sizeof(int32_t) * 230));
    /* Standardized: each image has mean 0 and stddev 1. */
    int bad_stats = 0;
    for (long i = 0; i < a.n_examples; i++) {
        double m = 0, v = 0;
        for (int j = 0; j < 108; j++) m += a.x[i * 108 + j];
        m /= 108;
        for (int j = 0; j < 108; j++) v += (a.x[i * 108 + j] - m) * (a.x[i * 108 + j] - m);
        v = sqrt(v / 108);
        if (fabs(m) > 1e-4 || fabs(v - 1.0) > 1e-3) bad_stats++;
    }
    CHECK_MSG(bad_stats == 0, "%d images not standardized", bad_stats);
    /* Another seed, another stream. */
    c.seed = 8;
    CHECK(collect(&c, &s, 1000) == 0);
    CHECK(s.n_examples == 230 && memcmp(a.x, s.x, sizeof(float) * 108 * 230) != 0);
    free_collected(&s);
    /* Resume: skipping K examples gives the tail of the full run, bit for bit
     * (K = 40: inside epoch 0; K = 170: past two whole epochs). */
    c.seed = 7;
    long skips[2] = {40, 170};
    for (int k = 0; k < 2; k++) {
        c.skip_examples = skips[k];
        CHECK(collect(&c, &s, 1000) == 0);
        long K = skips[k];
        CHECK_MSG(s.n_examples == 230 - K, "skip %ld: %ld examples", K, s.n_examples);
        CHECK(s.n_batches > 0 && s.first[0] == K);
        CHECK(!memcmp(s.x, a.x + 108 * K, sizeof(float) * 108 * (size_t)s.n_examples));
        CHECK(!memcmp(s.labels, a.labels + K, sizeof(int32_t) * (size_t)s.n_examples));
        free_collected(&s);
    }
    /* Eval: central crop + standardization, identical whatever the seed. */
    c.skip_examples = 0;
    c.augment = AUGMENT_CIFAR_EVAL;
    c.shuffle = 0;
    c.num_epochs = 1;
    c.drop_remainder = 0;
    CHECK(collect(&c, &s, 1000) == 0);
    CHECK(s.n_examples == 77);
    uint8_t img[192];
    float want[108];
    int bad_eval = 0;
    for (int i = 0; i < 77; i++) {
        image_of(img, i, 192);
        for (int y = 0; y < 6; y++)
            for (int x = 0; x < 6; x++)
                for (int ch = 0; ch < 3; ch++) want[(y * 6 + x) * 3 + ch] = img[((y + 1) * 8 + x + 1) * 3 + ch];
        per_image_standardization(want, 108);
        for (int j = 0; j < 108; j++)
            if (fabsf(want[j] - s.x[i * 108 + j]) > 1e-5f) {
                bad_eval++;
                break;
            }
    }
    CHECK_MSG(bad_eval == 0, "%d eval images differ", bad_eval);
    free_collected(&s);
    free_collected(&a);
    free_collected(&b2);
}

/* The reference: each TensorFlow op in turn, as written in its documentation. */
static void reference_train(float *out, const uint8_t *in, int H, int W, int C, int oh, int ow, const AugmentParams *p) {
    (void)H;
    int n_pix = oh * ow, n = n_pix * C;
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++)
            for (int c = 0; c < C; c++) {
                int sx = p->flip ? ow - 1 - x : x; /* flip_left_right of the crop */
                out[(y * ow + x) * C + c] = in[((p->crop_y + y) * W + p->crop_x + sx) * C + c];
            }
    if (p->adjust_color) {
        for (int i = 0; i < n; i++) out[i] += p->brightness_delta;
        for (int c = 0; c < C; c++) {
            double m = 0;
            for (int i = 0; i < n_pix; i++) m += out[i * C + c];
            m /= n_pix;
            for (int i = 0; i < n_pix; i++) out[i * C + c] = (float)((out[i * C + c] - m) * p->contrast_factor + m);
        }
    }
    double m = 0, v = 0;
    for (int i = 0; i < n; i++) m += out[i];
    m /= n;
    for (int i = 0; i < n; i++) v += (out[i] - m) * (out[i] - m);
    double sd = sqrt(v / n), adj = sd > 1.0 / sqrt(n) ? sd : 1.0 / sqrt(n);
    for (int i = 0; i < n; i++) out[i] = (float)((out[i] - m) / adj);
}

static void test_augment_reference(void) {
    AugmentHparams hp = augment_hparams_cifar10();
    CHECK(hp.max_brightness_delta == 63.0f && hp.contrast_lower == 0.2f && hp.contrast_upper == 1.8f);
    uint8_t img[32 * 32 * 3];
    float got[24 * 24 * 3], want[24 * 24 * 3], img_f[32 * 32 * 3], got_f[24 * 24 * 3];
    int flips = 0, worst_bad = 0, float_bad = 0, crops_seen[9] = {0};
    double delta_sum = 0, delta_min = 1e9, delta_max = -1e9, f_min = 1e9, f_max = -1e9;
    for (int k = 0; k < 400; k++) {
        for (int j = 0; j < 3072; j++) img[j] = (uint8_t)((j * 13 + k * 101 + (j / 96) * 7) & 0xff);
        AugmentParams p;
        augment_draw_train(&p, &hp, 1234, (uint64_t)k, 32, 32, 24, 24);
        CHECK(p.crop_y >= 0 && p.crop_y <= 8 && p.crop_x >= 0 && p.crop_x <= 8);
        crops_seen[p.crop_y]++;
        flips += p.flip;
        delta_sum += p.brightness_delta;
        if (p.brightness_delta < delta_min) delta_min = p.brightness_delta;
        if (p.brightness_delta > delta_max) delta_max = p.brightness_delta;
        if (p.contrast_factor < f_min) f_min = p.contrast_factor;
        if (p.contrast_factor > f_max) f_max = p.contrast_factor;
        augment_cifar_u8(got, img, 32, 32, 3, 24, 24, &p);
        reference_train(want, img, 32, 32, 3, 24, 24, &p);
        for (int j = 0; j < 1728; j++)
            if (fabsf(got[j] - want[j]) > 2e-4f) {
                worst_bad++;
                break;
            }
        /* The float-image path (op by op) agrees with the uint8 path (closed form). */
        for (int j = 0; j < 3072; j++) img_f[j] = img[j];
        augment_cifar_f32(got_f, img_f, 32, 32, 3, 24, 24, &p);
        for (int j = 0; j < 1728; j++)
            if (fabsf(got[j] - got_f[j]) > 2e-4f) {
                float_bad++;
                break;
            }
        /* The same draw again: a pure function of (seed, index). */
        AugmentParams q;
        augment_draw_train(&q, &hp, 1234, (uint64_t)k, 32, 32, 24, 24);
        CHECK(!memcmp(&p, &q, sizeof p));
    }
    CHECK_MSG(worst_bad == 0, "%d images differ from the reference", worst_bad);
    CHECK_MSG(float_bad == 0, "%d float-path images differ from the uint8 path", float_bad);
    CHECK(flips > 150 && flips < 250);
    CHECK(delta_min >= -63.0 && delta_max < 63.0 && delta_min < -50 && delta_max > 50 && fabs(delta_sum / 400) < 8);
    CHECK(f_min >= 0.2 && f_max < 1.8 && f_min < 0.35 && f_max > 1.65);
    for (int y = 0; y <= 8; y++) CHECK(crops_seen[y] > 10);
    /* Eval parameters: the central crop. */
    AugmentParams e;
    augment_params_eval(&e, 32, 32, 24, 24);
    CHECK(e.crop_y == 4 && e.crop_x == 4 && !e.flip && !e.adjust_color);
    /* A constant image: stddev 0, so the divisor is 1/sqrt(N) and the output 0. */
    memset(img, 77, sizeof img);
    augment_cifar_u8(got, img, 32, 32, 3, 24, 24, &e);
    int nonzero = 0;
    for (int j = 0; j < 1728; j++) nonzero += got[j] != 0.0f;
    CHECK(nonzero == 0);
    /* mnist scaling. */
    uint8_t px[3] = {0, 255, 51};
    float o[3];
    augment_mnist_u8(o, px, 3);
    CHECK(o[0] == -0.5f && o[1] == 0.5f && fabsf(o[2] - (51.0f / 255.0f - 0.5f)) < 1e-7f);
}

/* augment_none_u8 (uint8 to float, no scaling) on fresh random bytes: a large image (its streaming stores) and a
 * small one, at an aligned and an unaligned output, with a length that leaves a tail; nothing past n written. */
static void test_augment_none(void) {
    const size_t sizes[3] = {224 * 224 * 3 + 7, 65536, 32 * 32 * 3 + 5};
    const uint64_t seed = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull + 1;
    uint64_t s = seed;
    for (int k = 0; k < 3; k++)
        for (int shift = 0; shift < 3; shift++) {
            const size_t n = sizes[k];
            uint8_t *in = malloc(n);
            float *buf = malloc((n + 8) * sizeof(float));
            CHECK(in && buf);
            if (!in || !buf) return;
            for (size_t i = 0; i < n; i++) in[i] = (uint8_t)((s = s * 6364136223846793005ull + 1442695040888963407ull) >> 56);
            for (size_t i = 0; i < n + 8; i++) buf[i] = -1.0f;
            float *out = buf + shift;
            augment_none_u8(out, in, n);
            size_t bad = 0;
            for (size_t i = 0; i < n; i++) bad += out[i] != (float)in[i];
            for (float *q = buf; q < out; q++) bad += *q != -1.0f;
            for (float *q = out + n; q < buf + n + 8; q++) bad += *q != -1.0f;
            CHECK_MSG(bad == 0, "augment_none_u8: %zu wrong values (n %zu, output shifted by %d floats, seed %llu)", bad,
                      n, shift, (unsigned long long)seed);
            free(in);
            free(buf);
        }
}

/* Counting allocator: the staging buffers must come from the caller's HostAlloc. */
typedef struct {
    int n_alloc, n_free;
    void *ptrs[256];
} CountingCtx;
static void *counting_alloc(size_t n, void *ctx) {
    CountingCtx *c = ctx;
    void *p = host_alloc_page_aligned(n, NULL);
    if (c->n_alloc < 256) c->ptrs[c->n_alloc] = p;
    c->n_alloc++;
    return p;
}
static void counting_free(void *p, void *ctx) {
    CountingCtx *c = ctx;
    c->n_free++;
    host_free_page_aligned(p, NULL);
}

static void test_allocator_and_close(const Dataset *ds) {
    const char *fb[4];
    PipelineConfig c;
    char err[512];
    base_config(&c, ds, fb);
    CountingCtx cc = {0, 0, {0}};
    c.alloc.alloc = counting_alloc;
    c.alloc.free = counting_free;
    c.alloc.ctx = &cc;
    c.alloc.kind = "counting";
    c.num_epochs = 0; /* forever */
    c.prefetch_batches = 2; /* raised to 2 x 3 shards */
    Pipeline *p = pipeline_open(&c, err, sizeof err);
    CHECK(p != NULL);
    PipelineBatch *b1, *b2;
    CHECK(pipeline_next(p, &b1, err, sizeof err) == 1);
    CHECK(pipeline_next(p, &b2, err, sizeof err) == 1);
    int found = 0;
    for (int i = 0; i < cc.n_alloc && i < 256; i++) found += cc.ptrs[i] == b1->x || cc.ptrs[i] == b2->labels;
    CHECK(found == 2);
    CHECK(((uintptr_t)b1->x & 63) == 0);
    PipelineStats st;
    pipeline_stats(p, &st);
    CHECK(st.prefetch_batches == 6 && cc.n_alloc == 12);
    pipeline_release(p, b1);
    pipeline_release(p, b2);
    /* Forever: several epochs' worth, then close with a batch still held. */
    long total = 0;
    for (int i = 0; i < 40; i++) {
        PipelineBatch *b;
        CHECK(pipeline_next(p, &b, err, sizeof err) == 1);
        total += b->n;
        pipeline_release(p, b);
    }
    CHECK(total == 400);
    CHECK(pipeline_next(p, &b1, err, sizeof err) == 1);
    pipeline_close(p);
    CHECK(cc.n_free == cc.n_alloc);
}

typedef struct {
    int n;
    char last[1024];
} WarnLines;

static void count_warning(void *ctx, const char *line) {
    WarnLines *w = ctx;
    w->n++;
    snprintf(w->last, sizeof w->last, "%s", line);
}

static void test_bad_records(void) {
    struct {
        int kind;
        const char *what;
    } cases[] = {
        {BAD_DATA_CRC, "data CRC mismatch (stored 0x"},
        {BAD_NOT_EXAMPLE, "payload is not a tf.train.Example"},
        {BAD_MISSING_LABEL, "missing feature 'label'"},
        {BAD_LABEL_TYPE, "feature 'label' is float_list, expected int64_list"},
        {BAD_LABEL_RANGE, "label 10 outside [0, 10)"},
        {BAD_IMAGE_SIZE, "image 'image_raw' has 47 bytes, expected 48 (4 x 4 x 3)"},
        {BAD_HEIGHT, "feature 'height' is 5 but the image shape is 4 x 4 x 3"},
        {BAD_IMAGE_TYPE, "feature 'image_raw' is float_list, expected bytes_list"},
        {BAD_TRUNCATED, "truncated: end of file inside the data"},
        {BAD_LENGTH, "record length 1099511627776 bytes is over the limit of 67108864 bytes"},
    };
    int counts[3] = {12, 12, 12};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        Dataset ds;
        char name[32];
        snprintf(name, sizeof name, "bad%zu", k);
        write_dataset(&ds, name, 3, counts, 4, 4, 3, IO_COMPRESSION_NONE, cases[k].kind, 1, 5);
        const char *fb[4];
        PipelineConfig c;
        char err[512] = "", want[1200];
        base_config(&c, &ds, fb);
        c.shuffle = 0;
        c.num_epochs = 1;
        c.n_shards = 1;
        c.shard_sizes[0] = 4;
        Pipeline *p = pipeline_open(&c, err, sizeof err);
        CHECK(p != NULL);
        if (!p) continue;
        PipelineBatch *b;
        int rc, n_before = 0, wrong = 0;
        while ((rc = pipeline_next(p, &b, err, sizeof err)) == 1) {
            for (int i = 0; i < b->n; i++) wrong += id_of(b->x + (size_t)i * 48) != n_before++;
            pipeline_release(p, b);
        }
        CHECK_MSG(rc == -1, "case %zu: rc %d", k, rc);
        snprintf(want, sizeof want, "%s: record 5 at offset %llu: %s", ds.paths[1], (unsigned long long)ds.offsets[1][5],
                 cases[k].what);
        CHECK_CONTAINS(err, want);
        CHECK(strchr(err, '\n') == NULL);
        /* Batches before the bad record came out whole: 17 good records, batches of 4. */
        CHECK_MSG(n_before == 16 && wrong == 0, "case %zu: %d examples before the error", k, n_before);
        CHECK(pipeline_next(p, &b, err, sizeof err) == -1);
        pipeline_close(p);

        /* skip_corrupt: counted, skipped, everything else delivered, twice (2 epochs);
         * the one bad record is one distinct record, warned about once. */
        c.skip_corrupt = 1;
        c.log_corrupt = 10;
        WarnLines warned = {0, ""};
        c.warn = count_warning;
        c.warn_ctx = &warned;
        c.max_corrupt_fraction = 1; /* 1 record in 36 is over the default */
        c.num_epochs = 2;
        c.shuffle = 1;
        c.min_after_dequeue = 5;
        p = pipeline_open(&c, err, sizeof err);
        long total = 0;
        while ((rc = pipeline_next(p, &b, err, sizeof err)) == 1) {
            total += b->n;
            pipeline_release(p, b);
        }
        PipelineStats st;
        pipeline_stats(p, &st);
        /* A truncated file, or one whose absurd length runs past its end, loses its tail. */
        long lost = cases[k].kind == BAD_TRUNCATED || cases[k].kind == BAD_LENGTH ? 7 : 1;
        CHECK_MSG(rc == 0 && total == 2 * (36 - lost) && st.corrupt_skipped == 2, "case %zu: rc %d total %ld skipped %ld", k, rc,
                  total, st.corrupt_skipped);
        CHECK_MSG(st.corrupt_distinct == 1 && warned.n == 1, "case %zu: %ld distinct, %d warnings", k, st.corrupt_distinct,
                  warned.n);
        /* The bytes lost: the bad record, or the file from it on. */
        size_t file_n = 0;
        free(io_read_file(ds.paths[1], &file_n));
        uint64_t want_lost = lost == 1 ? ds.offsets[1][6] - ds.offsets[1][5] : (uint64_t)file_n - ds.offsets[1][5];
        CHECK_MSG(st.corrupt_lost_n_bytes == want_lost && st.input_n_bytes > 0,
                  "case %zu: %llu bytes lost, expected %llu", k, (unsigned long long)st.corrupt_lost_n_bytes,
                  (unsigned long long)want_lost);
        snprintf(want, sizeof want, "%llu bytes of %s unreadable", (unsigned long long)want_lost, ds.paths[1]);
        CHECK_MSG(strstr(warned.last, want) != NULL, "case %zu: warning '%s'", k, warned.last);
        pipeline_close(p);
        /* The epoch's count (CRCs only): a bad frame stops it, unless skip_corrupt, which counts the good records
         * (it stopped the run's epoch-based schedules under --skip_corrupt). */
        const long n_strict = io_count_records(ds_files(&ds, fb), 3, IO_COMPRESSION_NONE, 0, err, sizeof err);
        const long n_skip = io_count_records(ds_files(&ds, fb), 3, IO_COMPRESSION_NONE, 1, err, sizeof err);
        CHECK_MSG(n_skip == (n_strict < 0 ? 36 - lost : 36), "case %zu: counted %ld, skipping %ld", k, n_strict, n_skip);

        /* Under the default limit (1 % of the bytes), a bad record that loses more (most of them: 1 record
         * of 36 is 2.8 %) stops the pipeline, saying why; a smaller one (a 3-byte payload, a file cut
         * just after the header) is skipped. */
        c.max_corrupt_fraction = IO_DEFAULT_MAX_CORRUPT_FRACTION;
        p = pipeline_open(&c, err, sizeof err);
        while ((rc = pipeline_next(p, &b, err, sizeof err)) == 1) pipeline_release(p, b);
        int over = (double)want_lost > 0.01 * (double)st.input_n_bytes;
        CHECK_MSG(rc == (over ? -1 : 0), "case %zu: %d at the default max_corrupt_fraction (%llu of %llu bytes lost)", k, rc,
                  (unsigned long long)want_lost, (unsigned long long)st.input_n_bytes);
        if (over) CHECK_CONTAINS(err, "over max_corrupt_fraction 0.01");
        CHECK_MSG(over || cases[k].kind == BAD_NOT_EXAMPLE || cases[k].kind == BAD_TRUNCATED, "case %zu: expected over the limit", k);
        pipeline_close(p);
    }
}

/* 12 records of a 3 x 3 float image (value 0.25 (i - j) at pixel j of record i) and label i mod 3, without shape
 * features; record 5's pixel 4 is `bad` where bad is not 0 (a NaN, an infinity). */
static void write_float_records(const char *path, int compression, float bad) {
    char err[512];
    TfrWriter *w = tfr_writer_open(path, compression, err, sizeof err);
    CHECK_MSG(w != NULL, "%s", err);
    if (!w) return;
    ExampleBuilder b;
    example_builder_init(&b);
    float pix[9];
    for (int i = 0; i < 12; i++) {
        for (int j = 0; j < 9; j++) pix[j] = 0.25f * (float)(i - j);
        if (i == 5 && bad != 0.0f) pix[4] = bad;
        example_builder_reset(&b);
        example_add_floats(&b, "image_raw", pix, 9);
        example_add_int64(&b, "label", i % 3);
        const uint8_t *data;
        size_t dn = example_builder_encode(&b, &data);
        tfr_writer_write(w, data, dn, err, sizeof err);
    }
    tfr_writer_close(w, err, sizeof err);
    example_builder_free(&b);
}

/* Records of raw payloads (each record's bytes as given: a garbage one is not an Example). */
static void write_payloads(const char *path, const uint8_t *const *payloads, const size_t *n_bytes, int n) {
    char err[512];
    TfrWriter *w = tfr_writer_open(path, IO_COMPRESSION_NONE, err, sizeof err);
    CHECK_MSG(w != NULL, "%s", err);
    if (!w) return;
    for (int i = 0; i < n; i++) tfr_writer_write(w, payloads[i], n_bytes[i], err, sizeof err);
    tfr_writer_close(w, err, sizeof err);
}

/* The shape probe (what train and eval do first) goes past what the pipeline goes past: an empty file first in
 * --data, and with skip_corrupt a bad first record (it refused the whole run: "record 0 at offset 0: payload is
 * not a tf.train.Example"); an encoded JPEG or PNG is one (IO_IMAGE_ENCODED, with or without height and width
 * features that do not fit it as raw pixels), named as such under another key, with the flags to give; raw
 * pixels that begin as a JPEG and fit their shape are raw; a height without a width is named. */
static void test_probe(void) {
    char err[1024];
    int H = 0, W = 0, C = 0, is_float = -1, at = -1;
    uint8_t good_img[16];
    memset(good_img, 7, sizeof good_img);
    ExampleBuilder b;
    example_builder_init(&b);
    example_add_bytes(&b, "image_raw", good_img, sizeof good_img);
    example_add_int64(&b, "label", 1);
    const uint8_t *good;
    const size_t good_n = example_builder_encode(&b, &good);
    uint8_t *good_copy = malloc(good_n);
    memcpy(good_copy, good, good_n);
    const uint8_t junk[] = {0xff, 0xff, ' ', 'j', 'u', 'n', 'k'};
    const uint8_t *payloads[2] = {junk, good_copy};
    const size_t sizes[2] = {sizeof junk, good_n};
    const char *empty = io_tmp("probe-a-empty.tfrecord"), *bad_first = io_tmp("probe-b-badfirst.tfrecord");
    write_payloads(empty, payloads, sizes, 0);
    write_payloads(bad_first, payloads, sizes, 2);
    char *files[2] = {(char *)empty, (char *)bad_first};
    CHECK(io_probe_image_shape(files, 2, "image_raw", IO_COMPRESSION_AUTO, 0, &H, &W, &C, &is_float, &at, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "probe-b-badfirst.tfrecord: record 0 at offset 0: payload is not a tf.train.Example");
    CHECK(io_probe_image_shape(files, 2, "image_raw", IO_COMPRESSION_AUTO, 1, &H, &W, &C, &is_float, &at, err, sizeof err) == 0);
    CHECK_MSG(H == 4 && W == 4 && C == 1 && is_float == 0 && at == 1, "%d x %d x %d, float %d, file %d", H, W, C, is_float, at);
    CHECK(io_probe_image_shape(files, 1, "image_raw", IO_COMPRESSION_AUTO, 1, &H, &W, &C, &is_float, &at, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "probe-a-empty.tfrecord: no records");
    char *bad_only[1] = {(char *)bad_first};
    const uint8_t *junk_only[1] = {junk};
    write_payloads(bad_first, junk_only, sizes, 1);
    CHECK(io_probe_image_shape(bad_only, 1, "image_raw", IO_COMPRESSION_AUTO, 1, &H, &W, &C, &is_float, &at, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "no good record in the 1 file of --data (--skip_corrupt); the first bad one: ");
    /* An encoded JPEG (tf_cnn_benchmarks' image/encoded), with and without shape features. */
    const uint8_t jpeg[] = {0xff, 0xd8, 0xff, 0xe0, 0, 16, 'J', 'F', 'I', 'F', 0, 1, 1, 0, 0, 1, 0, 1, 0, 0};
    for (int shape = 0; shape < 2; shape++) {
        example_builder_reset(&b);
        example_add_bytes(&b, "image/encoded", jpeg, sizeof jpeg);
        example_add_int64(&b, "image/class/label", 3);
        if (shape) {
            example_add_int64(&b, "height", 40);
            example_add_int64(&b, "width", 50);
            example_add_int64(&b, "depth", 3);
        }
        const uint8_t *enc;
        const size_t enc_n = example_builder_encode(&b, &enc);
        const uint8_t *one[1] = {enc};
        write_payloads(bad_first, one, &enc_n, 1);
        /* An encoded image (its height and width, where given, are not a raw size of 20 bytes): decoded in the
         * pipeline, to a size of the caller's. */
        H = W = C = 7;
        CHECK(io_probe_image_shape(bad_only, 1, "image/encoded", IO_COMPRESSION_AUTO, 0, &H, &W, &C, &is_float, NULL, err,
                                   sizeof err) == 0, "%s", err);
        CHECK_MSG(is_float == IO_IMAGE_ENCODED && H == 0 && W == 0 && C == 0, "shape %d: kind %d, %d x %d x %d", shape,
                  is_float, H, W, C);
        /* With the default key, the missing feature names the one that holds the encoded image, and the flags. */
        CHECK(io_probe_image_shape(bad_only, 1, "image_raw", IO_COMPRESSION_AUTO, 0, &H, &W, &C, &is_float, NULL, err,
                                   sizeof err) == -1);
        CHECK_CONTAINS(err, "record 0 at offset 0: missing feature 'image_raw'; feature 'image/encoded' is an encoded "
                            "JPEG file (20 bytes): give --image_key image/encoded");
    }
    /* A gzip file read as --compression none: the refusal says how it was read and what tells the kinds apart. */
    const char *gz = io_tmp("probe-gzip.tfrecord");
    write_float_records(gz, IO_COMPRESSION_GZIP, 0.0f);
    char *gz_only[1] = {(char *)gz};
    CHECK(io_probe_image_shape(gz_only, 1, "image_raw", IO_COMPRESSION_NONE, 0, &H, &W, &C, &is_float, NULL, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "probe-gzip.tfrecord: record 0 at offset 0: ");
    CHECK_CONTAINS(err, "(read as --compression none; --compression auto tells none, gzip and zlib apart by their first bytes)");
    CHECK(io_probe_image_shape(gz_only, 1, "image_raw", IO_COMPRESSION_AUTO, 0, &H, &W, &C, &is_float, NULL, err, sizeof err) == 0);
    /* Raw pixels that begin as a JPEG does (255, 216, 255) and fit their shape are raw pixels. */
    uint8_t jpeg_like[16];
    memset(jpeg_like, 9, sizeof jpeg_like);
    memcpy(jpeg_like, jpeg, 4);
    example_builder_reset(&b);
    example_add_bytes(&b, "image_raw", jpeg_like, sizeof jpeg_like);
    const uint8_t *raw;
    const size_t raw_n = example_builder_encode(&b, &raw);
    const uint8_t *one_raw[1] = {raw};
    write_payloads(bad_first, one_raw, &raw_n, 1);
    CHECK(io_probe_image_shape(bad_only, 1, "image_raw", IO_COMPRESSION_AUTO, 0, &H, &W, &C, &is_float, NULL, err, sizeof err) == 0);
    CHECK_MSG(H == 4 && W == 4 && C == 1, "raw pixels beginning ff d8 ff: %d x %d x %d", H, W, C);
    /* The same square ending as a JPEG does (ff d9), or starting as a PNG: an encoded image. */
    for (int k = 0; k < 2; k++) {
        uint8_t square[16];
        memcpy(square, jpeg_like, sizeof square);
        if (k == 0) square[14] = 0xff, square[15] = 0xd9;
        else memcpy(square, "\x89PNG\r\n\x1a\n", 8);
        example_builder_reset(&b);
        example_add_bytes(&b, "image_raw", square, sizeof square);
        const uint8_t *sq;
        const size_t sq_n = example_builder_encode(&b, &sq);
        const uint8_t *one_sq[1] = {sq};
        write_payloads(bad_first, one_sq, &sq_n, 1);
        CHECK(io_probe_image_shape(bad_only, 1, "image_raw", IO_COMPRESSION_AUTO, 0, &H, &W, &C, &is_float, NULL, err,
                                   sizeof err) == 0);
        CHECK_MSG(is_float == IO_IMAGE_ENCODED, "a 16-byte %s: kind %d", k ? "PNG" : "JPEG ending ff d9", is_float);
    }
    /* A height without a width. */
    example_builder_reset(&b);
    example_add_bytes(&b, "image_raw", good_img, sizeof good_img);
    example_add_int64(&b, "height", 2);
    const uint8_t *hw;
    const size_t hw_n = example_builder_encode(&b, &hw);
    const uint8_t *one[1] = {hw};
    write_payloads(bad_first, one, &hw_n, 1);
    CHECK(io_probe_image_shape(bad_only, 1, "image_raw", IO_COMPRESSION_AUTO, 0, &H, &W, &C, &is_float, NULL, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "feature 'height' without 'width'");
    example_builder_free(&b);
    free(good_copy);
}

static void test_helpers_and_config(const Dataset *ds) {
    char err[512];
    char **files;
    int n;
    char pattern[1800];
    snprintf(pattern, sizeof pattern, "%s/ds-*.tfrecord", io_test_dir);
    CHECK(io_expand_globs(pattern, &files, &n, err, sizeof err) == 0 && n == 3);
    if (n == 3) CHECK(!strcmp(files[0], ds->paths[0]) && !strcmp(files[2], ds->paths[2]));
    io_free_files(files, n);
    /* Lists, duplicates, sorting. */
    snprintf(pattern, sizeof pattern, "%s,%s , %s", ds->paths[2], ds->paths[0], ds->paths[2]);
    CHECK(io_expand_globs(pattern, &files, &n, err, sizeof err) == 0 && n == 2);
    if (n == 2) CHECK(!strcmp(files[0], ds->paths[0]) && !strcmp(files[1], ds->paths[2]));
    io_free_files(files, n);
    /* The same file under other spellings (DIR/./F, a symlink) is one file, kept once: the first in sorted order. */
    char dot[1800], link[1800], list[8192];
    const char *base = strrchr(ds->paths[0], '/') + 1;
    snprintf(dot, sizeof dot, "%s/./%s", io_test_dir, base);
    snprintf(link, sizeof link, "%s/link.tfrecord", io_test_dir);
    unlink(link);
    CHECK(symlink(ds->paths[0], link) == 0);
    snprintf(list, sizeof list, "%s,%s,%s,%s", link, ds->paths[1], ds->paths[0], dot);
    CHECK(io_expand_globs(list, &files, &n, err, sizeof err) == 0 && n == 2);
    if (n == 2) CHECK(!strcmp(files[0], dot) && !strcmp(files[1], ds->paths[1]), "%s, %s", files[0], files[1]);
    io_free_files(files, n);
    /* io_find_same_files: the first pair at the lowest later index, with its file's first name; a path stat
     * cannot see is passed over. */
    const char *same[] = {ds->paths[1], link, io_tmp("missing.tfrecord"), dot, ds->paths[0], ds->paths[1]};
    size_t pair[2] = {99, 99};
    unsigned char later[6];
    CHECK(io_find_same_files(same, 6, pair, later) == 3 && pair[0] == 1 && pair[1] == 3, "%zu %zu", pair[0], pair[1]);
    CHECK(!later[0] && !later[1] && !later[2] && later[3] && later[4] && later[5]);
    pair[0] = pair[1] = 99;
    CHECK(io_find_same_files(same, 3, pair, NULL) == 0 && pair[0] == 99 && pair[1] == 99);
    unlink(link);
    snprintf(pattern, sizeof pattern, "%s/nothing-*.tfrecord", io_test_dir);
    CHECK(io_expand_globs(pattern, &files, &n, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "matches no files");
    CHECK(io_expand_globs(io_tmp("missing.tfrecord"), &files, &n, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "missing.tfrecord: no such file");
    /* Only regular files: a FIFO (no writer: refused by stat alone, never opened, so this cannot hang) and a
     * device are refused, naming the file; the data set's files pass. */
    char fifo[1800];
    snprintf(fifo, sizeof fifo, "%s/stream.tfrecord", io_test_dir);
    unlink(fifo);
    CHECK(mkfifo(fifo, 0600) == 0);
    char *data_files[3] = {(char *)ds->paths[0], (char *)ds->paths[1], (char *)ds->paths[2]};
    CHECK(io_check_regular_files(data_files, 3, err, sizeof err) == 0);
    char *lists[][2] = {{data_files[0], fifo}, {"/dev/null", data_files[0]}};
    const char *want[] = {"stream.tfrecord: not a regular file (a pipe or FIFO)", "/dev/null: not a regular file (a device)"};
    for (int k = 0; k < 2; k++) {
        err[0] = '\0';
        CHECK(io_check_regular_files(lists[k], 2, err, sizeof err) == -1);
        CHECK_CONTAINS(err, want[k]);
    }
    unlink(fifo);
    /* Probing and counting. */
    int H, W, C, is_float;
    char *first[1] = {(char *)ds->paths[0]};
    CHECK(io_probe_image_shape(first, 1, "image_raw", IO_COMPRESSION_AUTO, 0, &H, &W, &C, &is_float, NULL, err, sizeof err) == 0);
    CHECK(H == 4 && W == 4 && C == 3 && is_float == 0);
    CHECK(io_probe_image_shape(first, 1, "pixels", IO_COMPRESSION_AUTO, 0, &H, &W, &C, &is_float, NULL, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "record 0 at offset 0: missing feature 'pixels'");
    const char *fb[4];
    CHECK(io_count_records(ds_files(ds, fb), 3, IO_COMPRESSION_AUTO, 0, err, sizeof err) == ds_total(ds));
    /* A float image without shape features: square, one channel. */
    const char *fp = io_tmp("float.tfrecord");
    write_float_records(fp, IO_COMPRESSION_GZIP, 0.0f);
    char *float_file[1] = {(char *)fp};
    CHECK(io_probe_image_shape(float_file, 1, "image_raw", IO_COMPRESSION_AUTO, 0, &H, &W, &C, &is_float, NULL, err, sizeof err) == 0);
    CHECK(H == 3 && W == 3 && C == 1 && is_float == 1);
    /* ... and the pipeline passes normalised float images through unchanged. */
    PipelineConfig c;
    pipeline_config_defaults(&c);
    const char *ff[1] = {fp};
    c.files = ff;
    c.n_files = 1;
    c.image_float = 1;
    c.in_H = c.in_W = c.out_H = c.out_W = 3;
    c.in_C = 1;
    c.num_classes = 3;
    c.augment = AUGMENT_MNIST;
    c.shuffle = 0;
    c.num_epochs = 1;
    c.shard_sizes[0] = 5;
    c.drop_remainder = 0;
    Collected got;
    CHECK(collect(&c, &got, 100) == 0);
    CHECK(got.n_examples == 12);
    int diff = 0;
    for (int i = 0; i < 12; i++)
        for (int j = 0; j < 9; j++) diff += got.x[i * 9 + j] != 0.25f * (float)(i - j);
    CHECK(diff == 0 && got.labels[11] == 2);
    free_collected(&got);
    /* A non-finite pixel (NaN, +-Inf) is a bad record naming its file, record and index (it reached the loss as
     * "divergence" and eval's figures as a class), and --skip_corrupt skips it. */
    for (int kind = 0; kind < 2; kind++) {
        const char *np = io_tmp(kind ? "float_inf.tfrecord" : "float_nan.tfrecord");
        write_float_records(np, IO_COMPRESSION_NONE, kind ? -INFINITY : NAN);
        for (int skip = 0; skip < 2; skip++) {
            const char *nf[1] = {np};
            c.files = nf;
            c.skip_corrupt = skip;
            c.max_corrupt_fraction = 1.0f;
            Pipeline *pp = pipeline_open(&c, err, sizeof err);
            CHECK_MSG(pp != NULL, "%s", err);
            if (!pp) continue;
            PipelineBatch *batch;
            int rc;
            long n_read = 0;
            while ((rc = pipeline_next(pp, &batch, err, sizeof err)) == 1) {
                n_read += batch->n;
                pipeline_release(pp, batch);
            }
            if (!skip) {
                CHECK(rc == -1);
                CHECK_CONTAINS(err, "record 5 at offset");
                CHECK_CONTAINS(err, kind ? "image 'image_raw' holds a non-finite value (-inf) at index 4"
                                         : "image 'image_raw' holds a non-finite value (nan) at index 4");
            } else {
                CHECK_MSG(rc == 0 && n_read == 11, "--skip_corrupt: rc %d, %ld examples", rc, n_read);
            }
            pipeline_close(pp);
        }
    }
    c.files = ff;
    c.skip_corrupt = 0;
    /* Configuration errors: one line each. */
    base_config(&c, ds, fb);
    c.capacity = 10;
    CHECK(pipeline_open(&c, err, sizeof err) == NULL);
    CHECK_CONTAINS(err, "capacity 10 must exceed min_after_dequeue 20");
    base_config(&c, ds, fb);
    c.out_H = 5;
    CHECK(pipeline_open(&c, err, sizeof err) == NULL);
    CHECK_CONTAINS(err, "does not fit");
    base_config(&c, ds, fb);
    const char *missing[2] = {ds->paths[0], io_tmp("gone.tfrecord")};
    c.files = missing;
    c.n_files = 2;
    CHECK(pipeline_open(&c, err, sizeof err) == NULL);
    CHECK_CONTAINS(err, "gone.tfrecord: cannot open");
    base_config(&c, ds, fb);
    c.shard_sizes[1] = 0;
    CHECK(pipeline_open(&c, err, sizeof err) == NULL);
    CHECK_CONTAINS(err, "shard 1 has size 0");
}

int main(void) {
    Dataset ds;
    int counts[3] = {40, 40, 23};
    write_dataset(&ds, "ds", 3, counts, 4, 4, 3, IO_COMPRESSION_GZIP, BAD_NONE, -1, -1);
    test_split_shards();
    test_exactly_once_and_shards(&ds);
    test_augment_reference();
    test_augment_none();
    test_determinism_and_resume();
    test_allocator_and_close(&ds);
    test_bad_records();
    test_helpers_and_config(&ds);
    test_probe();
    return io_test_result("test_io_pipeline");
}
