/* cmd_inspect.c — `tower inspect FILE...`: count and verify TFRecord files.
 *
 * Where it sits: cmd/ only wires flags to io/inspect.h.  Prints one line per
 * file, then the features, image shape and label histogram; every bad record
 * is one line on stderr.  Then what tower train and eval make of the files
 * (their probe of the first good record, and the records they would refuse:
 * no image, an image of another size, kind or shape, no label, a negative
 * one): one line on stdout when they read them all, else one on stderr.
 * Exit 0 when every record is good and train would read them, 1 when any is
 * bad (or a file cannot be read), 2 on a bad command line, 3 when every
 * record is good but train and eval would refuse the files (another
 * program's TFRecords: their CRCs verified, inspect's first use).  With
 * --skip_corrupt it reads on past bad records, but stops once they made more
 * than --max_corrupt_fraction of the files' bytes unreadable.  Bytes from
 * files and file names are printed escaped (base/escape.h).
 * What it does not do: no repair, no writing.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd/commands.h"
#include "base/escape.h"
#include "base/flags.h"
#include "io/inspect.h"
#include "io/pipeline.h"
#include "io/tfrecord.h"

#define INSPECT_EXIT_TRAIN_REFUSES 3 /* every record good, but tower train and eval would refuse the files */

/* What tower train and eval make of good files (rep: io_inspect's): their probe of the shape (a second read of
 * the files: regular files only, a stream is not read again), then the records they would refuse.  0 after one
 * line on stdout when they read every record; INSPECT_EXIT_TRAIN_REFUSES after one on stderr when not. */
static int train_verdict(char *const *files, int n_files, const InspectConfig *cfg, const InspectReport *rep) {
    char err[PIPELINE_ERR_N_BYTES], key[1024], label[1024];
    int H, W, C, kind;
    escape_str(key, sizeof key, cfg->image_key);
    escape_str(label, sizeof label, cfg->label_key);
    for (int i = 0; i < n_files; i++) {
        struct stat sb;
        if (stat(files[i], &sb) != 0 || !S_ISREG(sb.st_mode)) { /* a FIFO would wait for a writer, a pipe is spent */
            printf("tower train and eval: not checked (%s is a stream, read once)\n",
                   escape_str(err, sizeof err, files[i]));
            return 0;
        }
    }
    const int refuses = INSPECT_EXIT_TRAIN_REFUSES;
    if (io_check_shard_sets(files, n_files, err, sizeof err) != 0) {
        cmd_errorf("tower inspect: tower train and eval would refuse these files: %s\n", err);
        return refuses;
    }
    if (io_probe_image_shape(files, n_files, cfg->image_key, cfg->compression, cfg->skip_corrupt, &H, &W, &C,
                             &kind, NULL, err, sizeof err) != 0) {
        cmd_errorf("tower inspect: tower train and eval would refuse these files: %s\n", err);
        return refuses;
    }
    /* The image feature's sizes and kinds over every record, against the probed shape (encoded images: any
     * size, each decoded and resized by the pipeline, not here). */
    const int is_float = kind == IO_IMAGE_FLOAT, encoded = kind == IO_IMAGE_ENCODED;
    const size_t want = (size_t)H * W * C;
    size_t lo = want, hi = want;
    int found = 0, mixed = 0;
    for (int i = 0; i < rep->n_features; i++) {
        const InspectFeature *x = &rep->features[i];
        if (x->key_n_bytes != strlen(cfg->image_key) || memcmp(x->key, cfg->image_key, x->key_n_bytes) != 0) continue;
        found = 1;
        mixed = x->mixed_kinds;
        lo = is_float ? x->min_values : x->min_value_bytes;
        hi = is_float ? x->max_values : x->max_value_bytes;
    }
    const char *unit = is_float ? "floats" : "bytes";
    if (!found) { /* past the report's first INSPECT_MAX_KEYS keys: its records' sizes are not known here */
        printf("tower train and eval: the image '%s' is past the %d keys inspect tallies: its records not checked\n",
               key, INSPECT_MAX_KEYS);
        return 0;
    }
    if (rep->n_without_image) {
        cmd_errorf("tower inspect: tower train and eval would refuse %ld record%s without an image '%s' (one bytes "
                   "value, or floats)\n", rep->n_without_image, rep->n_without_image == 1 ? "" : "s", key);
        return refuses;
    }
    if (encoded && rep->n_image_not_encoded) { /* the first record's kind is every record's */
        cmd_errorf("tower inspect: tower train and eval would refuse %ld record%s whose image '%s' is not a JPEG or PNG "
                   "file (empty, or other bytes), as the first good record's is\n", rep->n_image_not_encoded,
                   rep->n_image_not_encoded == 1 ? "" : "s", key);
        return refuses;
    }
    if (encoded && rep->n_image_over_bound) {
        cmd_errorf("tower inspect: tower train and eval would refuse %ld record%s whose encoded image '%s' is over %zu "
                   "bytes (the largest holds %zu) at their default --max_image_pixels %zu: an encoded image may hold 3 "
                   "bytes a pixel + 1 MiB, so their --max_image_pixels %zu reads it\n", rep->n_image_over_bound,
                   rep->n_image_over_bound == 1 ? "" : "s", key, pipeline_encoded_max_n_bytes(0), hi,
                   (size_t)PIPELINE_DEFAULT_MAX_IMAGE_PIXELS, pipeline_encoded_pixels_for(hi));
        return refuses;
    }
    if (mixed) {
        cmd_errorf("tower inspect: tower train and eval would refuse the records whose image '%s' is not %s, as the "
                   "first good record's is\n", key, is_float ? "floats" : "bytes");
        return refuses;
    }
    if (!encoded && rep->shape_varies) {
        cmd_errorf("tower inspect: tower train and eval would refuse the records whose height, width and depth "
                   "features are not %d x %d x %d, the first good record's\n", H, W, C);
        return refuses;
    }
    if (!encoded && (lo != want || hi != want)) {
        cmd_errorf("tower inspect: tower train and eval would refuse the records whose image '%s' is not %d x %d x %d "
                   "(%zu %s, the first good record's): they hold %zu to %zu %s\n", key, H, W, C, want, unit, lo, hi,
                   unit);
        return refuses;
    }
    if (rep->n_without_label) {
        cmd_errorf("tower inspect: tower train and eval would refuse %ld record%s without a single int64 '%s'\n",
                   rep->n_without_label, rep->n_without_label == 1 ? "" : "s", label);
        return refuses;
    }
    long lo_label = -1, hi_label = -1;
    for (long k = 0; k < rep->label_cap; k++)
        if (rep->label_count[k]) {
            if (lo_label < 0) lo_label = k;
            hi_label = k;
        }
    if (rep->n_labels_other) { /* negative or past the histogram: refused by train whatever --num_classes */
        cmd_errorf("tower inspect: tower train and eval would refuse %ld record%s whose label '%s' is negative or over "
                   "%d\n", rep->n_labels_other, rep->n_labels_other == 1 ? "" : "s", label, INSPECT_MAX_LABEL - 1);
        return refuses;
    }
    char labels[160] = "";
    if (hi_label >= 0)
        snprintf(labels, sizeof labels, " from %ld to %ld (--num_classes %ld or more)", lo_label, hi_label, hi_label + 1);
    if (encoded)
        printf("tower train and eval read these files: encoded JPEG or PNG images ('%s', %zu to %zu bytes; decoded "
               "and resized to --image_size in the pipeline, not here), int64 labels ('%s')%s\n", key, lo, hi, label,
               labels);
    else
        printf("tower train and eval read these files: %d x %d x %d images ('%s', %s), int64 labels ('%s')%s\n", H, W,
               C, key, is_float ? "float" : "uint8", label, labels);
    return 0;
}

int cmd_inspect(int argc, char **argv) {
    InspectConfig cfg;
    inspect_config_defaults(&cfg);
    const char *compression = "auto";
    int max_record_mb = 64;
    double max_corrupt_fraction = IO_DEFAULT_MAX_CORRUPT_FRACTION;
    const Flag flags[] = {
        {"compression", FLAG_STRING, &compression, "auto (detect from the first bytes), none, gzip or zlib"},
        {"image_key", FLAG_STRING, &cfg.image_key, "feature key of the image, checked against height x width x depth"},
        {"label_key", FLAG_STRING, &cfg.label_key, "feature key of the label (int64) for the histogram"},
        {"num_classes", FLAG_INT, &cfg.num_classes, "check every label lies in [0, num_classes) (0: no check)", FLAG_RANGE(0, 1 << 16, "[]", "0: no check")},
        {"skip_corrupt", FLAG_BOOL, &cfg.skip_corrupt, "report bad records and go on (the exit is still 1); default: stop at the first"},
        {"max_record_mb", FLAG_INT, &max_record_mb, "records longer than this many MiB are bad (never allocated)", FLAG_RANGE(1, 4096, "[]", NULL)},
        {"max_corrupt_fraction", FLAG_DOUBLE, &max_corrupt_fraction,
         "with --skip_corrupt, stop once bad records made more than this fraction of the files' bytes unreadable (1: no limit)", FLAG_RANGE(0, 1, "[]", NULL)},
    };
    int n_flags = (int)(sizeof flags / sizeof flags[0]);
    char *positional[argc > 0 ? argc : 1];
    int n_positional = 0;
    int rc = flags_parse(flags, n_flags, argc, argv, positional, &n_positional);
    if (rc == 1) {
        flags_print_usage("tower inspect", "[flags] FILE... (files or quoted globs)", flags, n_flags);
        return 0;
    }
    static const char *const compressions[] = {"auto", "none", "gzip", "zlib", NULL};
    if (rc != 0 || cmd_check_choice("inspect", "compression", compression, compressions)) return 2;
    cfg.compression = io_compression_parse(compression);
    cfg.max_record_n_bytes = (size_t)max_record_mb << 20;
    cfg.max_corrupt_fraction = max_corrupt_fraction;
    if (n_positional == 0) {
        cmd_errorf("tower inspect: no files given (see --help)\n");
        return 2;
    }
    for (int i = 0; i < n_positional; i++)
        if (cmd_check_data_paths("inspect", NULL, positional[i]) != 0) return 2;
    /* Each argument is a path or a quoted glob, taken whole (a comma is the name's). */
    char err[PIPELINE_ERR_N_BYTES];
    char **files = NULL;
    int n_files = 0;
    if (io_expand_patterns((const char *const *)positional, n_positional, &files, &n_files, err, sizeof err) != 0) {
        cmd_errorf("tower inspect: %s\n", err);
        return 1;
    }
    InspectReport rep;
    rc = io_inspect((const char *const *)files, n_files, &cfg, &rep, stdout, stderr);
    inspect_report_print(&rep, &cfg, stdout);
    if (rep.n_bad)
        printf("bad records: %ld; %s%llu of %s%llu bytes unreadable%s\n", rep.n_bad, rep.n_bytes_partial ? "at least " : "",
               (unsigned long long)rep.n_bytes_lost, rep.n_bytes_partial ? "at least " : "", (unsigned long long)rep.n_bytes_total,
               rep.over_fraction ? " (stopped: over --max_corrupt_fraction)" : "");
    if (rc == 0 && rep.n_records > 0) rc = train_verdict(files, n_files, &cfg, &rep);
    else if (rc == 0) { /* no record at all: nothing for train and eval to read */
        cmd_errorf("tower inspect: tower train and eval would refuse these files: they hold no records\n");
        rc = INSPECT_EXIT_TRAIN_REFUSES;
    }
    inspect_report_free(&rep);
    io_free_files(files, n_files);
    if (rc < 0) {
        cmd_errorf("tower inspect: out of memory\n");
        return 1;
    }
    return rc == INSPECT_EXIT_TRAIN_REFUSES ? rc : rc ? 1 : 0;
}
