/* pipeline_tfrecord.c — the pipeline's TFRecord source (io/pipeline_source.h).
 *
 * Where it sits: io/, inside the input pipeline: the reader thread streams
 * the TFRecord files of tf.train.Example (file order permuted each epoch),
 * verifies each record, decodes it and checks its keys, shape and label, and
 * hands the image and label in a slot to the shuffle/batch machinery
 * (pipeline_accept); a bad record goes to pipeline_bad with the bytes the
 * reader lost.  Decoding runs in the reader: the workers only augment.
 * What it does not do: no shuffling, batching or threads of its own.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/example.h"
#include "io/pipeline_source.h"
#include "io/tfrecord.h"

typedef struct {
    char **files;            /* (n_files) copied at open */
    int n_files;
    ExampleDecoder *dec;
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
    int64_t label;
    if (example_get_int64(ex, c->label_key, &label, why, why_n) != 0) return -1;
    if (label < 0 || label >= c->num_classes) {
        snprintf(why, why_n, "label %lld outside [0, %d)", (long long)label, c->num_classes);
        return -1;
    }
    p->slot_label[slot] = (int32_t)label;
    return 0;
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
    pipeline_order(p, epoch, order, ts->n_files);
    long good = 0, place = 0; /* place: the record's in this epoch's read order (--input_split records) */
    const int by_record = c->split_by == PIPELINE_SPLIT_RECORDS && c->split_n > 1;
    char err[600], why[300];
    for (int k = 0; k < ts->n_files; k++) {
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
                if (pipeline_bad(p, err, tfr_reader_lost_n_bytes(r), tfr_reader_name(r)) != 0) {
                    good = -1;
                    break;
                }
                if (st == TFR_BAD_STREAM) break;
                continue;
            }
            int slot = pipeline_take_slot(p);
            if (slot < 0) {
                good = -1;
                break;
            }
            if (record_to_slot(p, ts, data, n, slot, why, sizeof why) != 0) {
                pipeline_put_slot_back(p, slot);
                snprintf(err, sizeof err, "%s: record %ld at offset %llu: %s", tfr_reader_name(r),
                         tfr_reader_record_index(r), (unsigned long long)tfr_reader_record_offset(r), why);
                if (pipeline_bad(p, err, tfr_reader_lost_n_bytes(r), tfr_reader_name(r)) != 0) {
                    good = -1;
                    break;
                }
                continue;
            }
            good++;
            if (pipeline_accept(p, slot) != 0) {
                good = -1;
                break;
            }
        }
        tfr_reader_close(r);
        if (good < 0) break;
    }
    free(order);
    return good;
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
