/* inspect.h — verify TFRecord files of tf.train.Example and summarise them.
 *
 * Where it sits: io/, behind `tower inspect`: before training, to see what a
 * data set holds and that every record is sound.  Every record's two CRCs
 * are verified and its payload decoded; the report lists the feature keys
 * with their kinds and value counts, the image shape and a label histogram.
 * A record is bad when its framing or CRCs are wrong, its payload is not an
 * Example, its image size disagrees with its height/width/depth features,
 * or (with num_classes > 0) its label is missing, not one int64, or outside
 * [0, num_classes).
 * What it does not do: no repair; it never writes.
 */
#ifndef TOWER_IO_INSPECT_H
#define TOWER_IO_INSPECT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "io/example.h"
#include "io/tfrecord.h"

typedef struct {
    int compression;                /* IO_COMPRESSION_AUTO / NONE / GZIP / ZLIB */
    const char *image_key, *label_key, *height_key, *width_key, *depth_key;
    int num_classes;                /* 0: labels are not range-checked */
    int skip_corrupt;               /* 0: stop at the first bad record; 1: report it and go on */
    size_t max_record_n_bytes;      /* 0: 64 MiB */
    double max_corrupt_fraction;    /* with skip_corrupt: stop once bad records made more than this fraction of
                                       the files' bytes unreadable (< 0: no limit); default IO_DEFAULT_MAX_CORRUPT_FRACTION */
} InspectConfig;

/* Keys image_raw, label, height, width, depth; AUTO; num_classes 0; stop at the first bad record. */
void inspect_config_defaults(InspectConfig *cfg);

#define INSPECT_MAX_KEYS 64
#define INSPECT_MAX_LABEL 65536
#define INSPECT_SHOW_KEY_N_BYTES 200 /* longer keys are printed cut, with their length */

typedef struct {
    char *key;               /* (key_n_bytes + 1) the key's bytes as stored, any bytes (NUL too), owned by the report */
    size_t key_n_bytes;
    FeatureKind kind;        /* kind of its first occurrence */
    int mixed_kinds;         /* 1: other records hold another kind under this key */
    long n_records;          /* records that have it */
    size_t min_values, max_values;         /* values per record */
    size_t min_value_bytes, max_value_bytes; /* bytes_list: bytes per value */
} InspectFeature;

typedef struct {
    long n_files, n_records, n_bad;
    uint64_t n_bytes_total;   /* the files' sizes (a stream's: what was read of it) */
    uint64_t n_bytes_lost;    /* bytes the bad records made unreadable (tfr_reader_lost_n_bytes; a whole file that does not open) */
    int n_bytes_partial;      /* 1: a stream was not read to its end: both counts are lower bounds (its rest unknown) */
    int over_fraction;        /* 1: stopped because n_bytes_lost passed max_corrupt_fraction */
    InspectFeature features[INSPECT_MAX_KEYS];
    int n_features;
    long n_extra_keys;        /* occurrences of keys beyond INSPECT_MAX_KEYS distinct ones */
    int shape_seen, shape_varies;
    long H, W, C;             /* the height/width/depth features, when all records agree */
    long *label_count;        /* (label_cap) histogram of int64 labels in [0, INSPECT_MAX_LABEL) */
    long label_cap;
    long n_labels_other;      /* labels outside that range */
    long n_without_label;     /* records with no single int64 label */
    long n_without_image;     /* records with no image under the image key (one bytes value, or floats) */
    long n_image_encoded;     /* records whose image (one bytes value) starts as a JPEG or PNG file does */
    long n_image_not_encoded; /* records whose image is one bytes value that does not (empty ones too): what train
                                 refuses where the first record holds an encoded image */
    long n_image_over_bound;  /* of the encoded ones, those over pipeline_encoded_max_n_bytes(0): what train refuses
                                 at its default --max_image_pixels */
} InspectReport;

/* Inspects the files in order, writing one line per file to out and one line
 * per bad record ("<file>: record <i> at offset <o>: <what>") to err_out;
 * every byte from a file name or a record is escaped (base/escape.h).  A
 * broken frame (TFR_BAD_STREAM) makes the rest of its file unreadable: the
 * line says how many bytes; with skip_corrupt, reading stops once the bytes
 * lost pass max_corrupt_fraction of all the files' bytes.
 * Returns 0 when every record is good, 1 when some record is bad (with
 * skip_corrupt 0 it stops at the first), -1 when out of memory.  The report
 * is filled either way; free it with inspect_report_free. */
int io_inspect(const char *const *files, int n_files, const InspectConfig *cfg, InspectReport *rep, FILE *out,
               FILE *err_out);

/* Prints the summary: record count, features, image shape, label histogram. */
void inspect_report_print(const InspectReport *rep, const InspectConfig *cfg, FILE *out);

void inspect_report_free(InspectReport *rep);

#endif
