/* cmd_convert.c — `tower convert`: a raw dataset to sharded TFRecord files.
 *
 * Where it sits: cmd/ only wires flags to io/convert.h, offline, before
 * training.  Formats: --from idx (MNIST, Fashion-MNIST; --images, --labels)
 * and --from cifar10 (the .bin files as arguments); a new format is one more
 * convert_open_* and one more branch in open_source().
 * What it does not do: no shuffling (the pipeline shuffles), no resizing.
 */
#include <stdio.h>
#include <string.h>

#include "cmd/commands.h"
#include "cmd/flags.h"
#include "io/convert.h"
#include "io/tfrecord.h"

typedef struct {
    const char *from, *images, *labels, *out, *compression, *image_key, *label_key;
    int num_shards;
} ConvertOptions;

static int convert_flags(ConvertOptions *o, Flag *flags) {
    const Flag table[] = {
        {"from", FLAG_STRING, &o->from, "input format: idx (MNIST, Fashion-MNIST; .gz or raw) or cifar10 (binary .bin files given as arguments)"},
        {"images", FLAG_STRING, &o->images, "--from idx: the images file (e.g. train-images-idx3-ubyte.gz)"},
        {"labels", FLAG_STRING, &o->labels, "--from idx: the labels file (e.g. train-labels-idx1-ubyte.gz)"},
        {"out", FLAG_STRING, &o->out, "output prefix: writes PREFIX-00000-of-0000N.tfrecord"},
        {"num_shards", FLAG_INT, &o->num_shards, "number of output files (example i goes to shard i mod N)"},
        {"compression", FLAG_STRING, &o->compression, "output compression: none, gzip or zlib (TensorFlow's compression_type)"},
        {"image_key", FLAG_STRING, &o->image_key, "feature key of the image (bytes, uint8, HWC)"},
        {"label_key", FLAG_STRING, &o->label_key, "feature key of the label (int64)"},
    };
    memcpy(flags, table, sizeof table);
    return (int)(sizeof table / sizeof table[0]);
}

/* The source for --from, or NULL with err; *usage_error is 1 when the command line is at fault. */
static ConvertSource *open_source(const ConvertOptions *o, char **files, int n_files, int *usage_error, char *err,
                                  size_t err_n) {
    *usage_error = 1;
    if (!strcmp(o->from, "idx")) {
        if (n_files > 0) {
            snprintf(err, err_n, "--from idx takes --images and --labels, not arguments ('%s')", files[0]);
            return NULL;
        }
        if (!o->images || !o->images[0] || !o->labels || !o->labels[0]) {
            snprintf(err, err_n, "--from idx needs --images and --labels");
            return NULL;
        }
        *usage_error = 0;
        return convert_open_idx(o->images, o->labels, err, err_n);
    }
    if (!strcmp(o->from, "cifar10")) {
        if (n_files == 0) {
            snprintf(err, err_n, "--from cifar10 needs the .bin files as arguments (data_batch_1.bin ...)");
            return NULL;
        }
        *usage_error = 0;
        return convert_open_cifar10((const char *const *)files, n_files, err, err_n);
    }
    snprintf(err, err_n, "unknown --from '%s' (idx or cifar10)", o->from);
    return NULL;
}

int cmd_convert(int argc, char **argv) {
    ConvertOptions o = {"idx", "", "", "", "none", "image_raw", "label", 1};
    Flag flags[16];
    int n_flags = convert_flags(&o, flags);
    char *positional[argc > 0 ? argc : 1];
    int n_positional = 0;
    int rc = flags_parse(flags, n_flags, argc, argv, positional, &n_positional);
    if (rc == 1) {
        flags_print_usage("convert", "--from idx --images F --labels F --out PREFIX [flags] | --from cifar10 --out PREFIX FILE...",
                          flags, n_flags);
        return 0;
    }
    if (rc != 0) return 2;
    int compression = io_compression_parse(o.compression);
    if (compression < 0 || compression == IO_COMPRESSION_AUTO) {
        fprintf(stderr, "tower convert: bad --compression '%s' (none, gzip or zlib)\n", o.compression);
        return 2;
    }
    if (!o.out || !o.out[0]) {
        fprintf(stderr, "tower convert: --out PREFIX is required\n");
        return 2;
    }
    if (o.num_shards < 1 || o.num_shards > 99999) {
        fprintf(stderr, "tower convert: --num_shards must be in [1, 99999]\n");
        return 2;
    }
    char err[1024];
    int usage_error = 0;
    ConvertSource *src = open_source(&o, positional, n_positional, &usage_error, err, sizeof err);
    if (!src) {
        fprintf(stderr, "tower convert: %s\n", err);
        return usage_error ? 2 : 1;
    }
    ConvertConfig cfg;
    convert_config_defaults(&cfg);
    cfg.out_prefix = o.out;
    cfg.num_shards = o.num_shards;
    cfg.compression = compression;
    cfg.image_key = o.image_key;
    cfg.label_key = o.label_key;
    ConvertStats st;
    rc = convert_run(src, &cfg, &st, err, sizeof err);
    src->close(src);
    if (rc != 0) {
        fprintf(stderr, "tower convert: %s\n", err);
        return 1;
    }
    char first[4096], last[4096];
    convert_shard_path(first, sizeof first, o.out, 0, o.num_shards);
    convert_shard_path(last, sizeof last, o.out, o.num_shards - 1, o.num_shards);
    printf("tower convert: wrote %ld examples (%d x %d x %d, %s) to %d shard%s: %s%s%s\n", st.n_examples, st.H, st.W,
           st.C, io_compression_name(compression), o.num_shards, o.num_shards > 1 ? "s" : "", first,
           o.num_shards > 1 ? " .. " : "", o.num_shards > 1 ? last : "");
    printf("labels (label: count):");
    const char *sep = " ";
    for (int k = 0; k < 256; k++)
        if (st.label_count[k]) {
            printf("%s%d: %ld", sep, k, st.label_count[k]);
            sep = ", ";
        }
    printf("\n");
    return 0;
}
