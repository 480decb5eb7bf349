/* inspect.c — `tower inspect`'s engine (see inspect.h).
 *
 * Where it sits: io/, reading files one record at a time through TfrReader
 * and ExampleDecoder; memory is one record plus the report.
 */
#include "io/inspect.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/escape.h"
#include "io/imagefolder.h"
#include "io/pipeline.h"
#include "io/tfrecord.h"

void inspect_config_defaults(InspectConfig *c) {
    memset(c, 0, sizeof *c);
    c->compression = IO_COMPRESSION_AUTO;
    c->image_key = "image_raw";
    c->label_key = "label";
    c->height_key = "height";
    c->width_key = "width";
    c->depth_key = "depth";
    c->max_corrupt_fraction = IO_DEFAULT_MAX_CORRUPT_FRACTION;
}

/* Finds or adds the feature key (key_n_bytes bytes, any bytes, NUL included). */
static int note_feature(InspectReport *rep, const char *key, size_t key_n_bytes, const Tensorflow__Feature *f) {
    InspectFeature *x = NULL;
    for (int i = 0; i < rep->n_features; i++)
        if (rep->features[i].key_n_bytes == key_n_bytes && !memcmp(rep->features[i].key, key, key_n_bytes)) {
            x = &rep->features[i];
            break;
        }
    FeatureKind kind = feature_kind(f);
    size_t n = feature_n_values(f);
    if (!x) {
        if (rep->n_features == INSPECT_MAX_KEYS) {
            rep->n_extra_keys++;
            return 0;
        }
        char *copy = malloc(key_n_bytes + 1);
        if (!copy) return -1;
        memcpy(copy, key, key_n_bytes);
        copy[key_n_bytes] = '\0';
        x = &rep->features[rep->n_features++];
        memset(x, 0, sizeof *x);
        x->key = copy;
        x->key_n_bytes = key_n_bytes;
        x->kind = kind;
        x->min_values = x->max_values = n;
        x->min_value_bytes = (size_t)-1;
    }
    if (kind != x->kind) x->mixed_kinds = 1;
    x->n_records++;
    if (n < x->min_values) x->min_values = n;
    if (n > x->max_values) x->max_values = n;
    if (kind == FEATURE_BYTES)
        for (size_t i = 0; i < n; i++) {
            size_t len = f->bytes_list->value[i].len;
            if (len < x->min_value_bytes) x->min_value_bytes = len;
            if (len > x->max_value_bytes) x->max_value_bytes = len;
        }
    return 0;
}

/* An optional single int64: 1 present, 0 absent or not one int64. */
static int get_dim(const Tensorflow__Example *ex, const char *key, int64_t *v) {
    if (!key || !key[0]) return 0;
    return example_get_int64(ex, key, v, NULL, 0) == 0;
}

/* Checks one decoded record; 0 good, -1 bad with why. */
static int check_example(const Tensorflow__Example *ex, const InspectConfig *cfg,
                         InspectReport *rep, char *why, size_t why_n) {
    const size_t n_features = example_n_features(ex);
    for (size_t i = 0; i < n_features; i++) {
        size_t key_n_bytes;
        const char *key = example_feature_key(ex, i, &key_n_bytes); /* any bytes, NUL included */
        if (note_feature(rep, key, key_n_bytes, example_feature_at(ex, i)) != 0) {
            snprintf(why, why_n, "out of memory");
            return -2;
        }
    }
    int64_t h, w, c;
    int have_dims = get_dim(ex, cfg->height_key, &h) && get_dim(ex, cfg->width_key, &w) && get_dim(ex, cfg->depth_key, &c);
    if (have_dims) {
        if (!rep->shape_seen) {
            rep->shape_seen = 1;
            rep->H = (long)h;
            rep->W = (long)w;
            rep->C = (long)c;
        } else if (rep->H != h || rep->W != w || rep->C != c) {
            rep->shape_varies = 1;
        }
        const Tensorflow__Feature *img = example_find(ex, cfg->image_key);
        FeatureKind k = feature_kind(img);
        if ((k == FEATURE_BYTES && img->bytes_list->n_value == 1) || k == FEATURE_FLOAT) {
            size_t n = k == FEATURE_BYTES ? img->bytes_list->value[0].len : img->float_list->n_value;
            /* an encoded JPEG or PNG with its stored size beside it: train decodes it (io_probe_image_shape) */
            const int encoded = k == FEATURE_BYTES && imagefolder_encoded_kind(img->bytes_list->value[0].data, n);
            if (example_check_image_shape(cfg->image_key, n, k == FEATURE_BYTES ? "bytes" : "floats", h, w, c, why,
                                          why_n) != 0 && !encoded)
                return -1;
        }
    }
    const Tensorflow__Feature *image = example_find(ex, cfg->image_key);
    const FeatureKind ik = feature_kind(image);
    if (!((ik == FEATURE_BYTES && image->bytes_list->n_value == 1) || (ik == FEATURE_FLOAT && image->float_list->n_value > 0)))
        rep->n_without_image++; /* what train and eval refuse: said, as the labels are */
    else if (ik == FEATURE_BYTES && imagefolder_encoded_kind(image->bytes_list->value[0].data, image->bytes_list->value[0].len)) {
        rep->n_image_encoded++;
        rep->n_image_over_bound += image->bytes_list->value[0].len > pipeline_encoded_max_n_bytes(0);
    }
    else if (ik == FEATURE_BYTES)
        rep->n_image_not_encoded++;
    else if (ik == FEATURE_FLOAT) /* a NaN or infinity: train and eval refuse the record (io/pipeline_tfrecord.c) */
        for (size_t i = 0; i < image->float_list->n_value; i++)
            if (!isfinite(image->float_list->value[i])) {
                snprintf(why, why_n, "image '%s' holds a non-finite value (%g) at index %zu", cfg->image_key,
                         (double)image->float_list->value[i], i);
                return -1;
            }
    int64_t label;
    char lwhy[256];
    if (example_get_int64(ex, cfg->label_key, &label, lwhy, sizeof lwhy) == 0) {
        if (cfg->num_classes > 0 && (label < 0 || label >= cfg->num_classes)) {
            snprintf(why, why_n, "label %lld outside [0, %d)", (long long)label, cfg->num_classes);
            return -1;
        }
        if (label >= 0 && label < INSPECT_MAX_LABEL) {
            if (label >= rep->label_cap) {
                long cap = rep->label_cap ? rep->label_cap : 16;
                while (cap <= label) cap *= 2;
                long *p = realloc(rep->label_count, (size_t)cap * sizeof *p);
                if (!p) {
                    snprintf(why, why_n, "out of memory");
                    return -2;
                }
                memset(p + rep->label_cap, 0, (size_t)(cap - rep->label_cap) * sizeof *p);
                rep->label_count = p;
                rep->label_cap = cap;
            }
            rep->label_count[label]++;
        } else {
            rep->n_labels_other++;
        }
    } else {
        rep->n_without_label++;
        if (cfg->num_classes > 0) {
            snprintf(why, why_n, "%s", lwhy);
            return -1;
        }
    }
    return 0;
}

/* Size of path in bytes, 0 when it cannot be stat'ed or is a stream (a pipe: its size is known at its end). */
static uint64_t file_n_bytes(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size : 0;
}

/* 1 when the bytes lost are over --max_corrupt_fraction of the input's, after one line on err_out. */
static int over_fraction(const InspectConfig *cfg, InspectReport *rep, FILE *err_out) {
    if (cfg->max_corrupt_fraction < 0 || (double)rep->n_bytes_lost <= cfg->max_corrupt_fraction * (double)rep->n_bytes_total)
        return 0;
    fprintf(err_out, "inspect: stopped: bad records made %s%llu of %s%llu bytes unreadable (%.3g%%), over --max_corrupt_fraction %g\n",
            rep->n_bytes_partial ? "at least " : "", (unsigned long long)rep->n_bytes_lost,
            rep->n_bytes_partial ? "at least " : "the ", (unsigned long long)rep->n_bytes_total,
            rep->n_bytes_total ? 100.0 * (double)rep->n_bytes_lost / (double)rep->n_bytes_total : 100.0,
            cfg->max_corrupt_fraction);
    rep->over_fraction = 1;
    return 1;
}

int io_inspect(const char *const *files, int n_files, const InspectConfig *cfg, InspectReport *rep, FILE *out,
               FILE *err_out) {
    memset(rep, 0, sizeof *rep);
    ExampleDecoder *dec = example_decoder_new();
    if (!dec) return -1;
    for (int fi = 0; fi < n_files; fi++) rep->n_bytes_total += file_n_bytes(files[fi]);
    int stopped = 0, oom = 0;
    char err[PIPELINE_ERR_N_BYTES], why[384], name[ESCAPE_PATH_N_BYTES];
    for (int fi = 0; fi < n_files && !stopped; fi++) {
        rep->n_files++;
        escape_str(name, sizeof name, files[fi]);
        TfrReader *r = tfr_reader_open(files[fi], cfg->compression, cfg->max_record_n_bytes, err, sizeof err);
        if (!r) {
            fprintf(err_out, "%s\n", err);
            rep->n_bad++;
            rep->n_bytes_lost += file_n_bytes(files[fi]);
            if (!cfg->skip_corrupt) stopped = 1;
            continue;
        }
        long n_rec = 0, n_bad = 0;
        uint64_t lost = 0;
        int dead = 0;
        /* A stream's size joins the input's at its end: its bad records are weighed against the fraction then. */
        const int stream = tfr_reader_size_unknown(r);
        for (;;) {
            const uint8_t *data;
            size_t n;
            int st = tfr_reader_next(r, &data, &n, err, sizeof err);
            if (st == TFR_END) break;
            int bad = st < 0;
            if (!bad) {
                const Tensorflow__Example *ex = example_decode(dec, data, n);
                int crc = 0;
                if (!ex) {
                    snprintf(why, sizeof why, "payload is not a tf.train.Example (protobuf parse error)");
                    crc = -1;
                } else {
                    crc = check_example(ex, cfg, rep, why, sizeof why);
                }
                if (crc == -2) {
                    oom = 1;
                    stopped = 1;
                    break;
                }
                if (crc != 0) {
                    bad = 1;
                    snprintf(err, sizeof err, "%s: record %ld at offset %llu: %s", files[fi], tfr_reader_record_index(r),
                             (unsigned long long)tfr_reader_record_offset(r), why);
                    escape_in_place(err, sizeof err);
                }
            }
            if (bad) {
                n_bad++;
                uint64_t k = tfr_reader_lost_n_bytes(r);
                lost += k;
                rep->n_bytes_lost += k;
                if (st == TFR_BAD_STREAM) {
                    dead = 1;
                    if (tfr_reader_size_unknown(r))
                        fprintf(err_out, "%s (the rest of the stream cannot be read; its size is unknown)\n", err);
                    else
                        fprintf(err_out, "%s (the rest of the file, %llu of its %llu bytes, cannot be read)\n", err,
                                (unsigned long long)k, (unsigned long long)tfr_reader_file_n_bytes(r));
                } else {
                    fprintf(err_out, "%s\n", err);
                }
                if (!cfg->skip_corrupt) {
                    stopped = 1;
                    break;
                }
                if (!stream && over_fraction(cfg, rep, err_out)) {
                    stopped = 1;
                    break;
                }
                if (st == TFR_BAD_STREAM) break;
            } else {
                n_rec++;
            }
        }
        /* A stream read to its end adds its size; one that stopped before (a broken frame, the first bad record
         * without --skip_corrupt) what was read of it, a lower bound. */
        const int size_unknown = tfr_reader_size_unknown(r);
        const uint64_t size = size_unknown ? tfr_reader_file_n_read(r) : tfr_reader_file_n_bytes(r);
        if (stream) {
            rep->n_bytes_total += size;
            rep->n_bytes_partial |= size_unknown;
            if (n_bad && !stopped && over_fraction(cfg, rep, err_out)) stopped = 1;
        }
        fprintf(out, "%s: %ld records, %s%s", name, n_rec, io_compression_name(tfr_reader_compression(r)),
                n_bad ? "" : ", every CRC verified\n");
        if (n_bad)
            fprintf(out, ", %ld bad record%s%s, %s%llu of %s%llu bytes unreadable%s\n", n_bad, n_bad > 1 ? "s" : "",
                    stopped && !rep->over_fraction ? " (stopped at the first)" : "", size_unknown && dead ? "at least " : "",
                    (unsigned long long)lost, size_unknown ? "at least " : "", (unsigned long long)size,
                    dead ? size_unknown ? " (and the rest of the stream after a broken frame)"
                                        : " (the rest of the file after a broken frame)" : "");
        rep->n_records += n_rec;
        rep->n_bad += n_bad;
        tfr_reader_close(r);
    }
    example_decoder_free(dec);
    if (oom) return -1;
    return rep->n_bad ? 1 : 0;
}

static const char *kind_short(FeatureKind k) { return feature_kind_name(k); }

void inspect_report_print(const InspectReport *rep, const InspectConfig *cfg, FILE *out) {
    fprintf(out, "total: %ld good records in %ld file%s", rep->n_records, rep->n_files, rep->n_files == 1 ? "" : "s");
    if (rep->n_bad)
        fprintf(out, ", %ld bad (%s%llu of %s%llu bytes unreadable)", rep->n_bad, rep->n_bytes_partial ? "at least " : "",
                (unsigned long long)rep->n_bytes_lost, rep->n_bytes_partial ? "at least " : "",
                (unsigned long long)rep->n_bytes_total);
    fprintf(out, "\n");
    if (rep->n_features) fprintf(out, "features (key, kind, values per record, records that have it):\n");
    for (int i = 0; i < rep->n_features; i++) {
        const InspectFeature *x = &rep->features[i];
        char vals[64], bytes[96] = "";
        if (x->min_values == x->max_values) snprintf(vals, sizeof vals, "[%zu]", x->min_values);
        else snprintf(vals, sizeof vals, "[%zu..%zu]", x->min_values, x->max_values);
        if (x->kind == FEATURE_BYTES && x->max_value_bytes > 0) {
            if (x->min_value_bytes == x->max_value_bytes) snprintf(bytes, sizeof bytes, " x %zu bytes", x->max_value_bytes);
            else snprintf(bytes, sizeof bytes, " x %zu..%zu bytes", x->min_value_bytes, x->max_value_bytes);
        }
        /* The key came from the file: escaped, and cut after INSPECT_SHOW_KEY_N_BYTES bytes. */
        char key[4 * INSPECT_SHOW_KEY_N_BYTES + 1], more[64] = "";
        size_t shown = x->key_n_bytes < INSPECT_SHOW_KEY_N_BYTES ? x->key_n_bytes : INSPECT_SHOW_KEY_N_BYTES;
        escape_bytes(key, sizeof key, x->key, shown);
        if (shown < x->key_n_bytes) snprintf(more, sizeof more, "... (%zu bytes)", x->key_n_bytes);
        fprintf(out, "  %-16s%s %-10s %s%s%s  %ld\n", key, more, kind_short(x->kind), vals, bytes,
                x->mixed_kinds ? " (other kinds too)" : "", x->n_records);
    }
    if (rep->n_extra_keys) fprintf(out, "  (%ld more occurrences of further keys not listed)\n", rep->n_extra_keys);
    char safe_key[1024], safe_w[1024], safe_d[1024]; /* keys from the command line: escaped as the file's are */
    if (rep->shape_seen) {
        escape_str(safe_key, sizeof safe_key, cfg->height_key);
        escape_str(safe_w, sizeof safe_w, cfg->width_key);
        escape_str(safe_d, sizeof safe_d, cfg->depth_key);
        if (rep->shape_varies) fprintf(out, "image shape (%s x %s x %s): varies\n", safe_key, safe_w, safe_d);
        else fprintf(out, "image shape (%s x %s x %s): %ld x %ld x %ld\n", safe_key, safe_w, safe_d, rep->H, rep->W, rep->C);
    }
    long n_labelled = 0;
    for (long k = 0; k < rep->label_cap; k++) n_labelled += rep->label_count[k];
    if (n_labelled || rep->n_labels_other) {
        fprintf(out, "label histogram ('%s': count):\n", escape_str(safe_key, sizeof safe_key, cfg->label_key));
        for (long k = 0; k < rep->label_cap; k++)
            if (rep->label_count[k]) fprintf(out, "  %ld: %ld\n", k, rep->label_count[k]);
        if (rep->n_labels_other) fprintf(out, "  other (negative or >= %d): %ld\n", INSPECT_MAX_LABEL, rep->n_labels_other);
    }
    if (rep->n_without_image)
        fprintf(out, "records without an image '%s' (one bytes value, or floats): %ld\n",
                escape_str(safe_key, sizeof safe_key, cfg->image_key), rep->n_without_image);
    if (rep->n_without_label)
        fprintf(out, "records without a single int64 '%s': %ld\n", escape_str(safe_key, sizeof safe_key, cfg->label_key),
                rep->n_without_label);
}

void inspect_report_free(InspectReport *rep) {
    for (int i = 0; i < rep->n_features; i++) {
        free(rep->features[i].key);
        rep->features[i].key = NULL;
    }
    rep->n_features = 0;
    free(rep->label_count);
    rep->label_count = NULL;
    rep->label_cap = 0;
}
