/* cmd_convert.c — `tower convert`: a raw dataset to sharded TFRecord files.
 *
 * Where it sits: cmd/ only wires flags to io/convert.h, offline, before
 * training.  Formats: --from idx (MNIST, Fashion-MNIST; --images, --labels),
 * --from cifar10 (the .bin files as arguments) and --from imagefolder (one
 * DIR argument of DIR/<class>/FILE.png|jpg|jpeg, io/imagefolder.h, which
 * also writes labels.txt beside the shards; --labels FILE gives the class
 * list, so that every split shares one); a new format is one more
 * convert_open_* and one more branch in open_source().  On a terminal a
 * progress line (cmd/progress.h) follows the examples as they are written.
 * An image folder's images are written in a permutation of --seed (the
 * listing is class after class; --keep_order keeps it), resized, or with
 * --encoded as their files are stored (ImageNet's image/encoded form).
 * What it does not do: no shuffling of IDX or CIFAR-10 input (their files
 * are mixed already; the pipeline shuffles); only image folders are resized.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cmd/commands.h"
#include "base/escape.h"
#include "base/flags.h"
#include "cmd/progress.h"
#include "io/convert.h"
#include "io/imagefolder.h"
#include "io/pipeline.h"
#include "io/tfrecord.h"

typedef struct {
    const char *from, *images, *labels, *out, *compression, *image_key, *label_key, *resize_mode;
    int num_shards, image_size, channels, no_progress, overwrite, num_classes, keep_order, encoded;
    long seed;
    float central_fraction;
} ConvertOptions;

#define CONVERT_MAX_FLAGS 24 /* convert_flags' table fits the caller's array of this many */

static int convert_flags(ConvertOptions *o, Flag *flags) {
    const Flag table[] = {
        {"from", FLAG_STRING, &o->from, "input format: idx (MNIST, Fashion-MNIST; .gz or raw), cifar10 (binary .bin files given as arguments) or imagefolder (one DIR argument holding DIR/<class>/*.png|jpg|jpeg)"},
        {"images", FLAG_STRING, &o->images, "--from idx: the images file (e.g. train-images-idx3-ubyte.gz)"},
        {"labels", FLAG_STRING, &o->labels, "--from idx: the labels file (e.g. train-labels-idx1-ubyte.gz); --from imagefolder: the class list, one name a line (e.g. the train split's labels.txt), so that every split shares it: a class folder not in it is refused"},
        {"out", FLAG_STRING, &o->out, "output prefix: writes PREFIX-00000-of-0000N.tfrecord"},
        {"num_classes", FLAG_INT, &o->num_classes, "--from idx: refuse a label outside [0, N), naming its record (0: any label byte; train and eval check --num_classes again)", FLAG_RANGE(0, 256, "[]", NULL)},
        {"num_shards", FLAG_INT, &o->num_shards, "number of output files (example i goes to shard i mod N)", FLAG_RANGE(1, 99999, "[]", NULL)},
        {"compression", FLAG_STRING, &o->compression, "output compression: none, gzip or zlib (TensorFlow's compression_type)"},
        {"image_key", FLAG_STRING, &o->image_key, "feature key of the image (bytes, uint8, HWC)"},
        {"label_key", FLAG_STRING, &o->label_key, "feature key of the label (int64)"},
        {"image_size", FLAG_INT, &o->image_size, "--from imagefolder: output height and width in pixels", FLAG_RANGE(1, 4096, "[]", NULL)},
        {"resize_mode", FLAG_STRING, &o->resize_mode, "--from imagefolder: resize (both sides to image_size) or center_crop (shorter side to image_size, then the central square)"},
        {"central_fraction", FLAG_FLOAT, &o->central_fraction, "--from imagefolder, --resize_mode center_crop: " CMD_CENTRAL_FRACTION_HELP("image_size"), FLAG_RANGE(0, 1, "(]", NULL)},
        {"channels", FLAG_INT, &o->channels, "--from imagefolder: 3 (RGB) or 1 (grey)"},
        {"seed", FLAG_LONG, &o->seed, "--from imagefolder: seed of the order the images are written in (a permutation of the files, so that every shard mixes the classes, as TensorFlow's build_image_data.py writes them)"},
        {"encoded", FLAG_BOOL, &o->encoded, "--from imagefolder: write each image's file as stored (its JPEG or PNG bytes under --image_key, and its label; no resizing, no height/width/depth), as build_image_data.py writes ImageNet: tower train and eval decode and resize them (--image_size)"},
        {"keep_order", FLAG_BOOL, &o->keep_order, "--from imagefolder: write the images class after class, in the listing's order (a shuffle buffer smaller than the data then cannot mix the classes)"},
        {"no_progress", FLAG_BOOL, &o->no_progress, "no live progress line, even on a terminal"},
        {"overwrite", FLAG_BOOL, &o->overwrite, "replace the shards of --out already there (any --num_shards); without it they are refused"},
    };
    _Static_assert(sizeof table / sizeof table[0] <= CONVERT_MAX_FLAGS, "convert's flag table outgrew its array");
    memcpy(flags, table, sizeof table);
    return (int)(sizeof table / sizeof table[0]);
}

/* Image-folder warnings: one line on stderr each, with the progress line cleared first. */
static void warn_line(void *ctx, const char *line) {
    progress_clear((Progress *)ctx);
    cmd_errorf("tower convert: warning: %s\n", line); /* escaped there: file names may hold any byte */
}

/* The source for --from, or NULL with err; *usage_error is 1 when the command line is at fault. */
static ConvertSource *open_source(const ConvertOptions *o, char **files, int n_files, Progress *bar,
                                  int *usage_error, char *err, size_t err_n) {
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
        ConvertSource *src = convert_open_idx(o->images, o->labels, err, err_n);
        if (src) src->num_classes = o->num_classes;
        return src;
    }
    if (o->num_classes > 0) {
        snprintf(err, err_n, "--num_classes applies to --from idx (CIFAR-10's labels are checked against 10, an image "
                 "folder's are its classes)");
        return NULL;
    }
    if (!strcmp(o->from, "cifar10")) {
        if (n_files == 0) {
            snprintf(err, err_n, "--from cifar10 needs the .bin files as arguments (data_batch_1.bin ...)");
            return NULL;
        }
        *usage_error = 0;
        return convert_open_cifar10((const char *const *)files, n_files, err, err_n);
    }
    /* --from imagefolder (cmd_convert checked --from against its three choices) */
    if (n_files != 1) {
        snprintf(err, err_n, "--from imagefolder takes exactly one DIR argument (DIR/<class>/*.png|jpg|jpeg), got %d",
                 n_files);
        return NULL;
    }
    ImageFolderConfig ic;
    imagefolder_config_defaults(&ic);
    ic.image_size = o->image_size;
    ic.channels = o->channels;
    ic.mode = (ImageFolderResizeMode)imagefolder_resize_mode_from_name(o->resize_mode);
    ic.short_side = imagefolder_short_side(o->image_size, o->central_fraction);
    ic.warn = warn_line;
    ic.warn_ctx = bar;
    ic.labels_file = o->labels && o->labels[0] ? o->labels : NULL;
    ic.shuffle = !o->keep_order;
    ic.shuffle_seed = (uint64_t)o->seed;
    ic.encoded = o->encoded;
    *usage_error = 0;
    return convert_open_imagefolder(files[0], &ic, err, err_n);
}

/* A source that counts what the wrapped one yields into the progress line. */
typedef struct {
    ConvertSource *inner;
    Progress *bar;
    long done;
} CountingState;

static int counting_next(ConvertSource *s, ConvertItem *item, char *err, size_t err_n) {
    CountingState *st = s->state;
    int got = st->inner->next(st->inner, item, err, err_n);
    if (got == 1) {
        st->done++;
        char post[64];
        snprintf(post, sizeof post, "%ld examples", st->done);
        progress_update(st->bar, st->done, post);
    }
    return got;
}

/* labels.txt beside the shards: the directory part of the --out prefix. */
static void labels_path(char *buf, size_t n, const char *out_prefix) {
    const char *slash = strrchr(out_prefix, '/');
    if (!slash) snprintf(buf, n, "labels.txt");
    else snprintf(buf, n, "%.*s/labels.txt", (int)(slash - out_prefix), out_prefix);
}

int cmd_convert(int argc, char **argv) {
    ConvertOptions o = {.from = "idx", .images = "", .labels = "", .out = "", .compression = "none",
                        .image_key = "image_raw", .label_key = "label", .resize_mode = "resize", .num_shards = 1,
                        .image_size = 32, .channels = 3, .central_fraction = 1.0f, .seed = 12345};
    Flag flags[CONVERT_MAX_FLAGS];
    int n_flags = convert_flags(&o, flags);
    char *positional[argc > 0 ? argc : 1];
    int n_positional = 0;
    unsigned char given[CONVERT_MAX_FLAGS] = {0};
    int rc = flags_parse_given(flags, n_flags, argc, argv, positional, &n_positional, given);
    if (rc == 1) {
        flags_print_usage("tower convert",
                          "--from idx --images F --labels F --out PREFIX [flags] | --from cifar10 --out PREFIX FILE... | "
                          "--from imagefolder --out PREFIX DIR",
                          flags, n_flags);
        return 0;
    }
    static const char *const froms[] = {"idx", "cifar10", "imagefolder", NULL};
    static const char *const compressions[] = {"none", "gzip", "zlib", NULL};
    static const char *const resize_modes[] = {"resize", "center_crop", NULL};
    if (rc != 0 || cmd_check_choice("convert", "from", o.from, froms) ||
        cmd_check_choice("convert", "compression", o.compression, compressions) ||
        cmd_check_choice("convert", "resize_mode", o.resize_mode, resize_modes))
        return 2;
    if (o.channels != 1 && o.channels != 3) {
        cmd_errorf("tower convert: --channels %d: expected 1 or 3\n", o.channels);
        return 2;
    }
    if (cmd_check_central_fraction("convert", o.central_fraction, o.resize_mode) != 0) return 2;
    /* --encoded writes the files as stored: the options of decoded images, given, would be ignored. */
    static const char *const decoded_flags[] = {"image_size", "channels", "resize_mode", "central_fraction"};
    const char *decoded_only = NULL;
    for (size_t k = 0; k < sizeof decoded_flags / sizeof decoded_flags[0] && !decoded_only; k++)
        if (flags_was_given(flags, n_flags, given, decoded_flags[k])) decoded_only = decoded_flags[k];
    if (o.encoded && (strcmp(o.from, "imagefolder") || decoded_only)) {
        if (strcmp(o.from, "imagefolder"))
            cmd_errorf("tower convert: --encoded applies to --from imagefolder (its files as stored)\n");
        else
            cmd_errorf("tower convert: --%s applies to decoded images: --encoded writes the files as stored (tower "
                       "train and eval resize them: their --image_size and --resize_mode)\n", decoded_only);
        return 2;
    }
    const int compression = io_compression_parse(o.compression);
    if (!o.out || !o.out[0]) {
        cmd_errorf("tower convert: --out PREFIX is required\n");
        return 2;
    }
    if (o.out[strlen(o.out) - 1] == '/') { /* the shards would be named "-00000-of-00001.tfrecord" inside it */
        char safe[ESCAPE_PATH_N_BYTES];
        escape_str(safe, sizeof safe, o.out);
        cmd_errorf("tower convert: --out %s ends in '/': PREFIX is a directory and a file name stem, e.g. --out "
                   "%strain (PREFIX-00000-of-0000N.tfrecord)\n", safe, safe);
        return 2;
    }
    /* Every shard is open at once: more than the process may hold open failed after thousands of files. */
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY &&
        (rlim_t)o.num_shards + 32 > nofile.rlim_cur) {
        const long room = (long)nofile.rlim_cur > 32 ? (long)nofile.rlim_cur - 32 : 0;
        cmd_errorf("tower convert: --num_shards %d: more than the %ld files this process may hold open besides its "
                   "input (ulimit -n %ld): lower --num_shards, or raise ulimit -n\n", o.num_shards, room,
                   (long)nofile.rlim_cur);
        return 2;
    }
    char err[1024];
    ConvertConfig keys; /* the feature keys, checked before any input is opened */
    convert_config_defaults(&keys);
    keys.image_key = o.image_key;
    keys.label_key = o.label_key;
    if (o.encoded) keys.height_key = keys.width_key = keys.depth_key = NULL; /* not written: the file has its shape */
    if (convert_check_keys(&keys, err, sizeof err) != 0) {
        char safe[1100];
        cmd_errorf("tower convert: %s\n", escape_str(safe, sizeof safe, err));
        return 2;
    }
    int usage_error = 0;
    Progress bar;
    progress_start(&bar, stdout, 0, "convert", "ex", 0, 0, 0.0);
    ConvertSource *src = open_source(&o, positional, n_positional, &bar, &usage_error, err, sizeof err);
    if (!src) {
        cmd_errorf("tower convert: %s\n", err); /* names from files: escaped there */
        return usage_error ? 2 : 1;
    }
    /* labels.txt is shared by every split converted into the directory: one already there with another class
     * list would be replaced, and the splits converted before it would name other classes by their labels. */
    char labels_file[4096] = "";
    if (!strcmp(src->format, "imagefolder")) {
        labels_path(labels_file, sizeof labels_file, o.out);
        int n_classes;
        const char *const *classes = imagefolder_classes(src, &n_classes);
        char what[4200];
        if (o.labels && o.labels[0]) snprintf(what, sizeof what, "--labels %s", o.labels);
        else snprintf(what, sizeof what, "the class folders of %s", positional[0]);
        int lrc = io_labels_compare_names(labels_file, classes, n_classes, what, err, sizeof err);
        if (lrc != 0) {
            if (lrc > 0)
                cmd_errorf("tower convert: %s already holds another class list, which this conversion would replace: "
                           "%s; pass --labels %s (this split then takes its label numbers) or another --out directory\n",
                           labels_file, err, labels_file);
            else cmd_errorf("tower convert: %s\n", err);
            src->close(src);
            return 1;
        }
    }
    /* Long inputs get a live line on a terminal; a short one finishes within the delay and shows none. */
    progress_start(&bar, stdout, progress_wanted(stdout, o.no_progress), "convert", "ex", 0,
                   src->n_examples > 0 ? src->n_examples : 0, 0.5);
    CountingState counting = {src, &bar, 0};
    ConvertSource counted = *src;
    counted.next = counting_next;
    counted.close = NULL;
    counted.state = &counting;
    ConvertConfig cfg;
    convert_config_defaults(&cfg);
    cfg.out_prefix = o.out;
    cfg.num_shards = o.num_shards;
    cfg.compression = compression;
    cfg.image_key = o.image_key;
    cfg.label_key = o.label_key;
    if (o.encoded) cfg.height_key = cfg.width_key = cfg.depth_key = NULL;
    cfg.overwrite = o.overwrite;
    /* A signal stops the run between two examples: the .tmp shards removed, the shards already there kept
     * (--overwrite replaces them only at the end), exit 128 + the signal. */
    cfg.stop = &cmd_stop_signal;
    cmd_catch_stop_signals();
    ConvertStats st;
    rc = convert_run(&counted, &cfg, &st, err, sizeof err);
    char post[64];
    snprintf(post, sizeof post, "%ld examples", counting.done);
    if (rc == 0) progress_end(&bar, counting.done, post);
    else progress_clear(&bar);
    long n_skipped = 0;
    if (rc == 0 && labels_file[0]) {
        n_skipped = imagefolder_n_skipped(src);
        rc = imagefolder_write_labels(src, labels_file, err, sizeof err);
    }
    src->close(src);
    if (rc != 0 && cmd_stop_signal) {
        cmd_errorf("tower convert: %s by %s: no shard written (the partial .tmp files removed)%s\n", err,
                   cmd_signal_name(cmd_stop_signal),
                   o.overwrite ? ", the shards already there kept" : "");
        return 128 + cmd_stop_signal;
    }
    if (rc != 0) {
        cmd_errorf("tower convert: %s\n", err); /* names from files: escaped there */
        return 1;
    }
    /* The paths are --out's bytes, escaped as every name that reaches the terminal. */
    char path[4096], first[16384], last[16384], out[16384], labels[16384];
    convert_shard_path(path, sizeof path, o.out, 0, o.num_shards);
    escape_str(first, sizeof first, path);
    convert_shard_path(path, sizeof path, o.out, o.num_shards - 1, o.num_shards);
    escape_str(last, sizeof last, path);
    escape_str(out, sizeof out, o.out);
    char shape[96];
    if (o.encoded) snprintf(shape, sizeof shape, "JPEG and PNG files as stored, the first %d x %d pixels", st.W, st.H);
    else snprintf(shape, sizeof shape, "%d x %d x %d", st.H, st.W, st.C);
    printf("tower convert: wrote %ld example%s (%s, %s) to %d shard%s: %s%s%s\n", st.n_examples,
           st.n_examples == 1 ? "" : "s", shape, io_compression_name(compression), o.num_shards,
           o.num_shards > 1 ? "s" : "", first, o.num_shards > 1 ? " .. " : "", o.num_shards > 1 ? last : "");
    if (st.n_examples < o.num_shards)
        cmd_errorf("tower convert: warning: %d of the %d shards are empty (%ld example%s; --num_shards at most %ld "
                   "writes none empty)\n", o.num_shards - (int)st.n_examples, o.num_shards, st.n_examples,
                   st.n_examples == 1 ? "" : "s", st.n_examples);
    if (st.n_old_shards_removed > 0)
        printf("tower convert: --overwrite: removed %d old shard%s of %s\n", st.n_old_shards_removed,
               st.n_old_shards_removed == 1 ? "" : "s", out);
    printf("labels (label: count):");
    const char *sep = " ";
    for (int k = 0; k < 256; k++)
        if (st.label_count[k]) {
            printf("%s%d: %ld", sep, k, st.label_count[k]);
            sep = ", ";
        }
    if (st.n_labels_over_255) printf("%s%ld of labels 256 and over", sep, st.n_labels_over_255);
    printf("\n");
    if (labels_file[0])
        printf("tower convert: class names in label order in %s; %ld file%s skipped%s\n",
               escape_str(labels, sizeof labels, labels_file), n_skipped,
               n_skipped == 1 ? "" : "s", n_skipped ? " (one warning line each above)" : "");
    return 0;
}
