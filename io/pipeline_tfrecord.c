/* pipeline_tfrecord.c — the pipeline's TFRecord sources (io/pipeline_source.h).
 *
 * Where it sits: io/, inside the input pipeline: the reader thread streams
 * the TFRecord files of tf.train.Example (file order permuted each epoch),
 * verifies each record, decodes it and checks its keys, shape and label.
 * Raw pixels (pipeline_source_tfrecord): the image and label go in a slot
 * to the shuffle/batch machinery (pipeline_accept) from the reader; the
 * workers only augment.  Encoded images (pipeline_source_tfrecord_encoded,
 * cfg.image_encoded: a JPEG or PNG in the image feature, as TF-slim's and
 * tf_cnn_benchmarks' image/encoded): the reader copies the encoded bytes
 * into a decode-window entry and the workers decode and resize them as an
 * image folder's files (imagefolder_load_bytes), collected in read order
 * (pipeline_decode_reserve/dispatch/drain).  A bad record goes to
 * pipeline_bad with the bytes the reader lost (an image that does not
 * decode: its record's bytes).
 * What it does not do: no shuffling, batching or threads of its own.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/example.h"
#include "io/imagefolder.h"
#include "io/pipeline_source.h"
#include "io/rng.h"
#include "io/tfrecord.h"

#define ENCODED_WINDOW_PER_WORKER 4 /* encoded images in flight per worker (each holds its bytes) */
#define TFR_FRAME_N_BYTES 16        /* a record's length, its CRC and the data's CRC */

#define ENCODED_HEADER_N_BYTES ((size_t)1 << 20) /* an encoded image's headers and metadata beyond 3 bytes a pixel */

size_t pipeline_encoded_max_n_bytes(size_t max_image_pixels) {
    const size_t P = max_image_pixels ? max_image_pixels : PIPELINE_DEFAULT_MAX_IMAGE_PIXELS;
    return 3 * P + ENCODED_HEADER_N_BYTES;
}

size_t pipeline_encoded_pixels_for(size_t n_bytes) {
    return n_bytes > ENCODED_HEADER_N_BYTES ? (n_bytes - ENCODED_HEADER_N_BYTES + 2) / 3 : 0;
}

/* One encoded image between the reader and a worker. */
typedef struct {
    uint8_t *bytes;          /* (cap_n_bytes) the image feature's bytes, n_bytes of them */
    size_t n_bytes, cap_n_bytes;
    uint64_t record_n_bytes; /* the record's bytes in the file, framing included (lost when it does not decode) */
    uint64_t crop_counter;   /* (epoch, file, record): a random crop's draw, whichever worker decodes it */
    char where[PIPELINE_MSG_N_BYTES]; /* "FILE: record N at offset O" */
} EncodedEntry;
typedef struct {
    char **files;            /* (n_files) copied at open */
    int n_files;
    ExampleDecoder *dec;
    EncodedEntry *ent;       /* (win_n) encoded images: the decode window's entries */
    int n_ent;
    ImageFolderScratch *scratch; /* (n_workers) encoded images: each worker's decode buffers */
    long epoch;              /* the epoch being read */
} TfrSource;

static int tfr_open(Pipeline *p, char *err, size_t err_n) {
    PipelineConfig *c = &p->cfg;
    TfrSource *ts = calloc(1, sizeof *ts);
    if (!ts) goto oom;
    p->src_state = ts;
    if (!c->max_record_n_bytes) c->max_record_n_bytes = TFR_DEFAULT_MAX_RECORD_N_BYTES;
    const int split = c->split_by != PIPELINE_SPLIT_NONE && c->split_n > 1;
    if (split && (c->split_index < 0 || c->split_index >= c->split_n)) {
        snprintf(err, err_n, "pipeline: part %d of %d of the data does not exist", c->split_index, c->split_n);
        return -1;
    }
    if (split && c->split_by == PIPELINE_SPLIT_FILES && c->n_files < c->split_n) {
        snprintf(err, err_n, "%d file(s) split into %d parts by file: at least one file a part (split by record, or "
                 "write more files: tower convert --num_shards)", c->n_files, c->split_n);
        return -1;
    }
    ts->files = calloc((size_t)c->n_files, sizeof *ts->files);
    if (!ts->files) goto oom;
    for (int k = 0; k < c->n_files; k++) {
        if (split && c->split_by == PIPELINE_SPLIT_FILES && k % c->split_n != c->split_index) continue;
        const int i = ts->n_files++;
        if (!c->files[k] || !(ts->files[i] = strdup(c->files[k]))) goto oom;
        TfrReader *r = tfr_reader_open(ts->files[i], c->compression, c->max_record_n_bytes, err, err_n);
        if (!r) return -1;
        p->input_n_bytes += tfr_reader_file_n_bytes(r);
        tfr_reader_close(r);
    }
    c->files = (const char *const *)ts->files;
    c->n_files = ts->n_files;
    if (!(ts->dec = example_decoder_new())) goto oom;
    if (c->image_encoded) {
        ts->n_ent = pipeline_source_tfrecord_encoded.decode_window * c->n_workers;
        ts->ent = calloc((size_t)ts->n_ent, sizeof *ts->ent);
        ts->scratch = calloc((size_t)c->n_workers, sizeof *ts->scratch);
        if (!ts->ent || !ts->scratch) goto oom;
    }
    snprintf(p->no_data_msg, sizeof p->no_data_msg, "%s%s: no usable records in %d file(s)", ts->files[0],
             ts->n_files > 1 ? " ..." : "", ts->n_files);
    return 0;
oom:
    snprintf(err, err_n, "pipeline: out of memory");
    return -1;
}

static void tfr_close(Pipeline *p) {
    TfrSource *ts = p->src_state;
    if (!ts) return;
    io_free_files(ts->files, ts->n_files);
    example_decoder_free(ts->dec);
    for (int i = 0; ts->ent && i < ts->n_ent; i++) free(ts->ent[i].bytes);
    free(ts->ent);
    for (int w = 0; ts->scratch && w < p->cfg.n_workers; w++) imagefolder_scratch_free(&ts->scratch[w]);
    free(ts->scratch);
    free(ts);
    p->src_state = NULL;
}

static long tfr_count(Pipeline *p, char *err, size_t err_n) {
    const TfrSource *ts = p->src_state;
    const PipelineConfig *c = &p->cfg;
    const long n = io_count_records((const char *const *)ts->files, ts->n_files, c->compression, 0, err, err_n);
    if (n < 0 || c->split_by != PIPELINE_SPLIT_RECORDS || c->split_n < 2) return n;
    return n / c->split_n + (c->split_index < n % c->split_n); /* this part's records */
}

/* The record's label, checked, into slot.  0, or -1 with why. */
static int label_to_slot(Pipeline *p, const Tensorflow__Example *ex, int slot, char *why, size_t why_n) {
    const PipelineConfig *c = &p->cfg;
    int64_t label;
    if (example_get_int64(ex, c->label_key, &label, why, why_n) != 0) return -1;
    if (label < 0 || label >= c->num_classes) {
        snprintf(why, why_n, "label %lld outside [0, %d)", (long long)label, c->num_classes);
        return -1;
    }
    p->slot_label[slot] = (int32_t)label;
    return 0;
}

/* Checks a decoded record and copies image and label into slot.  0, or -1 with why. */
static int record_to_slot(Pipeline *p, TfrSource *ts, const uint8_t *data, size_t n_bytes, int slot, char *why, size_t why_n) {
    const PipelineConfig *c = &p->cfg;
    const Tensorflow__Example *ex = example_decode(ts->dec, data, n_bytes);
    if (!ex) {
        snprintf(why, why_n, "payload is not a tf.train.Example (protobuf parse error)");
        return -1;
    }
    const char *dim_keys[3] = {c->height_key, c->width_key, c->depth_key};
    const int dim_want[3] = {c->in_H, c->in_W, c->in_C};
    for (int k = 0; k < 3; k++) {
        if (!dim_keys[k] || !dim_keys[k][0] || !example_find(ex, dim_keys[k])) continue;
        int64_t v;
        if (example_get_int64(ex, dim_keys[k], &v, why, why_n) != 0) return -1;
        if (v != dim_want[k]) {
            snprintf(why, why_n, "feature '%s' is %lld but the image shape is %d x %d x %d", dim_keys[k], (long long)v,
                     c->in_H, c->in_W, c->in_C);
            return -1;
        }
    }
    uint8_t *dst = p->slot_data + (size_t)slot * p->slot_n_bytes;
    if (!c->image_float) {
        const uint8_t *img;
        size_t n;
        if (example_get_bytes(ex, c->image_key, &img, &n, why, why_n) != 0) return -1;
        if (n != p->in_n_values) {
            snprintf(why, why_n, "image '%s' has %zu bytes, expected %zu (%d x %d x %d)", c->image_key, n,
                     p->in_n_values, c->in_H, c->in_W, c->in_C);
            return -1;
        }
        memcpy(dst, img, n);
    } else {
        const float *img;
        size_t n;
        if (example_get_floats(ex, c->image_key, &img, &n, why, why_n) != 0) return -1;
        if (n != p->in_n_values) {
            snprintf(why, why_n, "image '%s' has %zu floats, expected %zu (%d x %d x %d)", c->image_key, n,
                     p->in_n_values, c->in_H, c->in_W, c->in_C);
            return -1;
        }
        for (size_t i = 0; i < n; i++)
            if (!isfinite(img[i])) { /* a NaN would reach the loss as "divergence", or eval's figures as a class */
                snprintf(why, why_n, "image '%s' holds a non-finite value (%g) at index %zu", c->image_key,
                         (double)img[i], i);
                return -1;
            }
        memcpy(dst, img, n * sizeof(float));
    }
    return label_to_slot(p, ex, slot, why, why_n);
}

/* An encoded record: its image feature's bytes into window entry e, its
 * label into slot (the workers decode the image later).  0, or -1 with why. */
static int record_to_entry(Pipeline *p, TfrSource *ts, const uint8_t *data, size_t n_bytes, EncodedEntry *e, int slot,
                           char *why, size_t why_n) {
    const PipelineConfig *c = &p->cfg;
    const Tensorflow__Example *ex = example_decode(ts->dec, data, n_bytes);
    if (!ex) {
        snprintf(why, why_n, "payload is not a tf.train.Example (protobuf parse error)");
        return -1;
    }
    const uint8_t *img;
    size_t n;
    if (example_get_bytes(ex, c->image_key, &img, &n, why, why_n) != 0) return -1;
    if (n == 0) {
        snprintf(why, why_n, "encoded image '%s' is empty", c->image_key);
        return -1;
    }
    const size_t max_n = pipeline_encoded_max_n_bytes(c->max_image_pixels);
    if (n > max_n) {
        snprintf(why, why_n, "encoded image '%s' of %zu bytes, over the %zu that --max_image_pixels %zu allows",
                 c->image_key, n, max_n, c->max_image_pixels);
        return -1;
    }
    if (label_to_slot(p, ex, slot, why, why_n) != 0) return -1;
    if (n > e->cap_n_bytes || (e->cap_n_bytes > ((size_t)1 << 20) && n < e->cap_n_bytes / 4)) {
        /* grown to the largest so far; given back after an outsized one */
        uint8_t *b = realloc(e->bytes, n);
        if (!b) {
            snprintf(why, why_n, "out of memory for an encoded image of %zu bytes", n);
            return -1;
        }
        e->bytes = b;
        e->cap_n_bytes = n;
    }
    memcpy(e->bytes, img, n);
    e->n_bytes = n;
    return 0;
}

/* A bad record: the encoded images still in the window go first (their
 * results keep the read order), then pipeline_bad.  0 to go on, -1 to stop. */
static int read_bad(Pipeline *p, PipelineDecodeStream *ds, const char *msg, uint64_t lost_n_bytes, const char *where) {
    if (p->cfg.image_encoded && pipeline_decode_drain(p, ds) < 0) return -1;
    return pipeline_bad(p, msg, lost_n_bytes, where);
}

/* A good record at file k's record r: raw pixels into a slot for
 * pipeline_accept, or an encoded image into the decode window for the
 * workers.  1 accepted (raw; encoded: dispatched), 0 bad (said to
 * pipeline_bad, go on), -1 to stop. */
static int read_record(Pipeline *p, TfrSource *ts, PipelineDecodeStream *ds, TfrReader *r, int k, const uint8_t *data,
                       size_t n_bytes) {
    char why[600], err[PIPELINE_MSG_N_BYTES];
    int slot, rc;
    EncodedEntry *e = NULL;
    if (p->cfg.image_encoded) {
        const int w = pipeline_decode_reserve(p, ds, &slot);
        if (w < 0) return -1;
        e = &ts->ent[w];
        rc = record_to_entry(p, ts, data, n_bytes, e, slot, why, sizeof why);
    } else {
        if ((slot = pipeline_take_slot(p)) < 0) return -1;
        rc = record_to_slot(p, ts, data, n_bytes, slot, why, sizeof why);
    }
    if (rc != 0) {
        pipeline_put_slot_back(p, slot);
        snprintf(err, sizeof err, "%s: record %ld at offset %llu: %s", tfr_reader_name(r), tfr_reader_record_index(r),
                 (unsigned long long)tfr_reader_record_offset(r), why);
        return read_bad(p, ds, err, tfr_reader_lost_n_bytes(r), tfr_reader_name(r)) != 0 ? -1 : 0;
    }
    if (!e) return pipeline_accept(p, slot) != 0 ? -1 : 1;
    snprintf(e->where, sizeof e->where, "%s: record %ld at offset %llu", tfr_reader_name(r), tfr_reader_record_index(r),
             (unsigned long long)tfr_reader_record_offset(r));
    e->record_n_bytes = (uint64_t)n_bytes + TFR_FRAME_N_BYTES;
    e->crop_counter = ((uint64_t)ts->epoch * (uint64_t)ts->n_files + (uint64_t)k) * ((uint64_t)1 << 32) +
                      (uint64_t)tfr_reader_record_index(r);
    pipeline_decode_dispatch(p, ds, (long)(e - ts->ent), slot, ts->files[k]);
    return 1;
}

/* Reads one epoch.  Returns the number of good records, or -1 to stop. */
static long tfr_read_epoch(Pipeline *p, long epoch) {
    const PipelineConfig *c = &p->cfg;
    TfrSource *ts = p->src_state;
    long *order = malloc((size_t)ts->n_files * sizeof *order);
    if (!order) {
        pipeline_fail(p, "out of memory");
        return -1;
    }
    ts->epoch = epoch;
    pipeline_order(p, epoch, order, ts->n_files);
    long good = 0, place = 0; /* place: the record's in this epoch's read order (--input_split records) */
    const int by_record = c->split_by == PIPELINE_SPLIT_RECORDS && c->split_n > 1;
    PipelineDecodeStream ds = {0, 0, 0};
    char err[PIPELINE_MSG_N_BYTES];
    for (int k = 0; k < ts->n_files && good >= 0; k++) {
        TfrReader *r = tfr_reader_open(ts->files[order[k]], c->compression, c->max_record_n_bytes, err, sizeof err);
        if (!r) {
            pipeline_fail(p, err);
            good = -1;
            break;
        }
        for (;;) {
            if (p->stop) {
                good = -1;
                break;
            }
            const uint8_t *data;
            size_t n;
            int st = tfr_reader_next(r, &data, &n, err, sizeof err);
            if (st == TFR_END) break;
            if (by_record && place++ % c->split_n != c->split_index) { /* another part's record (good or bad) */
                if (st == TFR_BAD_STREAM) break;
                continue;
            }
            if (st < 0) {
                if (read_bad(p, &ds, err, tfr_reader_lost_n_bytes(r), tfr_reader_name(r)) != 0) {
                    good = -1;
                    break;
                }
                if (st == TFR_BAD_STREAM) break;
                continue;
            }
            const int rc = read_record(p, ts, &ds, r, (int)order[k], data, n);
            if (rc < 0) {
                good = -1;
                break;
            }
            good += rc;
        }
        tfr_reader_close(r);
    }
    free(order);
    if (good < 0) return -1;
    return c->image_encoded ? pipeline_decode_drain(p, &ds) : good;
}

/* Worker thread `worker`: the encoded image of window entry item, decoded and resized into slot. */
static int tfr_decode(Pipeline *p, int worker, long item, int slot, char *why, size_t why_n, uint64_t *lost_n_bytes) {
    TfrSource *ts = p->src_state;
    const PipelineConfig *c = &p->cfg;
    const EncodedEntry *e = &ts->ent[item];
    uint8_t *dst = p->slot_data + (size_t)slot * p->slot_n_bytes;
    int scale_eighths = 8;
    atomic_fetch_add(&p->images_decoded, 1);
    const uint64_t rng = rng_seed(c->seed, RNG_STREAM_CROP, e->crop_counter);
    if (imagefolder_load_bytes(dst, c->in_H, c->in_C, (ImageFolderResizeMode)c->resize_mode, c->short_side, rng,
                               e->bytes, e->n_bytes, e->where, c->max_image_pixels, c->jpeg_scaled,
                               &ts->scratch[worker], &scale_eighths, why, why_n) != 0) {
        *lost_n_bytes = e->record_n_bytes;
        return -1;
    }
    if (scale_eighths < 8) atomic_fetch_add(&p->images_scaled, 1);
    return 0;
}

static void tfr_max_n_bytes(const PipelineConfig *cfg, size_t record_n_bytes, size_t *reader_n_bytes,
                            size_t *workers_n_bytes) {
    const size_t max_record = cfg->max_record_n_bytes ? cfg->max_record_n_bytes : TFR_DEFAULT_MAX_RECORD_N_BYTES;
    const size_t record = record_n_bytes && record_n_bytes < max_record ? record_n_bytes : max_record;
    size_t names_n_bytes = 0;
    for (int i = 0; cfg->files && i < cfg->n_files; i++)
        names_n_bytes += sizeof(char *) + (cfg->files[i] ? strlen(cfg->files[i]) + 1 : 0);
    /* One reader is open at a time (pipeline_open checks the files one after another); the epoch's file order. */
    *reader_n_bytes = tfr_reader_max_n_bytes(cfg->compression, record, max_record) + example_decoder_max_n_bytes(record) +
                      names_n_bytes + (size_t)cfg->n_files * sizeof(long) + sizeof(TfrSource);
    *workers_n_bytes = 0;
    if (cfg->image_encoded) { /* the window's encoded images, and the workers' decode buffers as an image folder's */
        *reader_n_bytes += (size_t)pipeline_source_tfrecord_encoded.decode_window * (size_t)cfg->n_workers *
                           (pipeline_encoded_max_n_bytes(cfg->max_image_pixels) + sizeof(EncodedEntry));
        *workers_n_bytes = (size_t)cfg->n_workers * pipeline_decode_worker_n_bytes(cfg, 0);
    }
}

const PipelineSourceI pipeline_source_tfrecord = {
    .name = "tfrecord",
    .open = tfr_open,
    .count = tfr_count,
    .read_epoch = tfr_read_epoch,
    .decode = NULL,
    .close = tfr_close,
    .max_n_bytes = tfr_max_n_bytes,
    .decode_window = 0,
};

const PipelineSourceI pipeline_source_tfrecord_encoded = {
    .name = "tfrecord_encoded",
    .open = tfr_open,
    .count = tfr_count,
    .read_epoch = tfr_read_epoch,
    .decode = tfr_decode,
    .close = tfr_close,
    .max_n_bytes = tfr_max_n_bytes,
    .decode_window = ENCODED_WINDOW_PER_WORKER,
};
