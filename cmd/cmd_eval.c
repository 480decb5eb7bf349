/* cmd_eval.c — `tower eval`: load a checkpoint (the moving averages by
 * default), run a TFRecord set once in file order and print TensorFlow's
 *   2026-11-21 12:00:00.123456: precision @ 1 = 0.912
 * over exactly the examples in the set (the original rounds the denominator
 * up to a batch multiple; Tower counts each example once).
 *
 * Where it sits: cmd/; it wires a checkpoint (ps/), the input pipeline (io/)
 * and the model's forward pass (model/).  No towers: evaluation is one
 * forward pass per batch on all the cores.
 * The result also goes to TensorBoard: an events file in --eval_dir (by
 * default the checkpoint directory's eval/ subdirectory, so that
 * `tensorboard --logdir TRAIN_DIR` shows the training curves and the
 * evaluations together) with TensorFlow's tag "Precision @ 1", the loss and
 * the cross-entropy, at the checkpoint's global step.  On a terminal a
 * progress line follows long evaluations (cmd/progress.h).
 *
 * With --eval_interval_secs N it keeps watching --checkpoint_dir, as
 * TensorFlow's cifar10_eval.py does beside a training run: every N seconds
 * the latest checkpoint, when it is not the one evaluated last, is
 * evaluated and added to the same events file, until a checkpoint of
 * --until_step or later is evaluated, or SIGINT, SIGTERM or SIGHUP.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/escape.h"
#include "base/file.h"
#include "base/memory.h"
#include "cmd/commands.h"
#include "cmd/progress.h"
#include "train/trainer.h"
#include "io/events.h"
#include "io/imagefolder.h"
#include "io/pipeline.h"
#include "model/layers.h"

typedef struct {
    const char *checkpoint_dir, *checkpoint, *data, *image_key, *label_key, *compression, *eval_dir, *labels, *resize_mode;
    int batch_size, num_classes, image_size, no_moving_average, confusion_matrix, input_threads, skip_corrupt;
    int no_progress, eval_interval_secs, top_k;
    long until_step;
    double max_corrupt_fraction;
    float central_fraction;
    int max_image_pixels; /* an image folder: the largest image decoded, in pixels */
} EvalOptions;

/* Watching (--eval_interval_secs): the SIGINT, SIGTERM or SIGHUP received, or 0. */
static volatile sig_atomic_t eval_stop = 0;

static void on_eval_signal(int sig) { eval_stop = sig; }

/* The pipeline's warnings (reader thread), with the progress line erased first. */
static void eval_warn(void *ctx, const char *line) { progress_warn((Progress *)ctx, stderr, line); }

static int eval_flags(EvalOptions *o, Flag *flags) {
    const Flag table[] = {
        {"checkpoint_dir", FLAG_STRING, &o->checkpoint_dir, "directory whose latest checkpoint is evaluated"},
        {"checkpoint", FLAG_STRING, &o->checkpoint, "a checkpoint file (overrides --checkpoint_dir)"},
        {"data", FLAG_STRING, &o->data, "TFRecord files of the evaluation set: comma-separated globs; or an image folder DIR (DIR/<class>/*.png|jpg|jpeg, decoded in the input pipeline)"},
        {"labels", FLAG_STRING, &o->labels, "an image folder: the class list, one name a line (default: the checkpoint directory's labels.txt when there, else the sorted class folders)"},
        {"resize_mode", FLAG_STRING, &o->resize_mode, "an image folder or encoded TFRecord images: resize (both sides to the model's input size) or center_crop (shorter side to it, then the central square)"},
        {"central_fraction", FLAG_FLOAT, &o->central_fraction, "an image folder or encoded TFRecord images, --resize_mode center_crop: " CMD_CENTRAL_FRACTION_HELP("input size"), FLAG_RANGE(0, 1, "(]", NULL)},
        {"max_image_pixels", FLAG_INT, &o->max_image_pixels, CMD_MAX_IMAGE_PIXELS_HELP, FLAG_RANGE(1, IMAGEFOLDER_MAX_PIXELS, "[]", NULL)},
        {"batch_size", FLAG_INT, &o->batch_size, "examples per forward pass", FLAG_RANGE(1, 1 << 20, "[]", NULL)},
        {"num_classes", FLAG_INT, &o->num_classes, "number of classes; labels must lie in [0, num_classes) (0: the checkpoint's)", FLAG_RANGE(0, 1 << 16, "[]", "0: the checkpoint's")},
        {"image_size", FLAG_INT, &o->image_size, "cifar10 on TFRecords: central crop to image_size x image_size (0: the checkpoint's; an image folder is resized to the model's input: --resize_mode)", FLAG_RANGE(0, 4096, "[]", "0: the checkpoint's")},
        {"no_moving_average", FLAG_BOOL, &o->no_moving_average, "evaluate the raw variables, not their moving averages"},
        {"confusion_matrix", FLAG_BOOL, &o->confusion_matrix, "print the confusion matrix (rows: true class, columns: predicted)"},
        {"image_key", FLAG_STRING, &o->image_key, "Example feature holding the image: raw pixels (bytes or floats), or an encoded JPEG or PNG (ImageNet's image/encoded), decoded and resized to the model's input"},
        {"label_key", FLAG_STRING, &o->label_key, "Example feature holding the label"},
        {"compression", FLAG_STRING, &o->compression, "TFRecord compression: auto, none, gzip or zlib"},
        {"input_threads", FLAG_INT, &o->input_threads, "decode threads (0: automatic)", FLAG_RANGE(0, PIPELINE_MAX_WORKERS, "[]", "0: automatic")},
        {"skip_corrupt", FLAG_BOOL, &o->skip_corrupt, "count and skip corrupt records instead of stopping"},
        {"max_corrupt_fraction", FLAG_DOUBLE, &o->max_corrupt_fraction, "with --skip_corrupt, stop once bad records made more than this fraction of the input's bytes unreadable (1: no limit)", FLAG_RANGE(0, 1, "[]", NULL)},
        {"eval_dir", FLAG_STRING, &o->eval_dir, "directory for the TensorBoard events file (default: CHECKPOINT_DIR/eval; none: no events file)"},
        {"no_progress", FLAG_BOOL, &o->no_progress, "no live progress line, even on a terminal"},
        {"top_k", FLAG_INT, &o->top_k, "also report precision @ K: the fraction whose label is among the K largest logits (TensorFlow's in_top_k: a label tied with the K-th counts; a row with a non-finite logit does not)", FLAG_RANGE(1, 1 << 16, "[]", NULL)},
        {"eval_interval_secs", FLAG_INT, &o->eval_interval_secs, "keep watching --checkpoint_dir: every this many seconds, evaluate its latest checkpoint when it is new (cifar10_eval.py's loop), until --until_step or SIGINT/SIGTERM/SIGHUP", FLAG_RANGE(0, 86400, "[]", "0: evaluate once")},
        {"until_step", FLAG_LONG, &o->until_step, "with --eval_interval_secs: stop after evaluating a checkpoint of this step or later", FLAG_RANGE(0, INFINITY, "[)", "0: until SIGINT, SIGTERM or SIGHUP")},
    };
    int n = (int)(sizeof table / sizeof table[0]);
    if (flags) memcpy(flags, table, sizeof table);
    return n;
}


/* The events directory: --eval_dir, or the checkpoint's directory + "/eval";
 * "" when --eval_dir none. */
static void events_dir(char *buf, size_t n, const char *eval_dir, const char *checkpoint_path) {
    if (!strcmp(eval_dir, "none")) {
        buf[0] = '\0';
    } else if (eval_dir[0]) {
        snprintf(buf, n, "%s", eval_dir);
    } else {
        const char *slash = strrchr(checkpoint_path, '/');
        if (!slash) snprintf(buf, n, "eval");
        else snprintf(buf, n, "%.*s/eval", (int)(slash - checkpoint_path), checkpoint_path);
    }
}

static double gib(size_t n_bytes) { return (double)n_bytes / (1024.0 * 1024.0 * 1024.0); }

/* Eval's memory bound (the pipeline, the activations and logits of one
 * batch) against what the machine can give (base/memory.h), before either
 * is allocated.  1 when it fits (or nothing can be read); else 0, after one
 * line on stderr naming both and the flag when say. */
static int eval_memory_fits(const PipelineConfig *pc, const ModelSpec *spec, int batch, size_t image_n_bytes, int say) {
    const size_t input = pipeline_max_n_bytes(pc, image_n_bytes + 4096, NULL);
    const size_t acts = model_acts_n_bytes(spec, batch) + (size_t)batch * spec->num_classes * sizeof(float);
    char source[4400];
    const size_t available = memory_available_n_bytes(source, sizeof source);
    if (available == 0 || input + acts <= available) return 1;
    if (!say) return 0;
    cmd_errorf("tower eval: not enough memory: batch %d needs up to %.2f GiB of host memory (input %.2f, "
            "activations %.2f GiB), and %.2f GiB is available (%s): lower %s\n", batch,
            gib(input + acts), gib(input), gib(acts), gib(available), source,
            input <= acts ? "--batch_size"
            : pc->image_dir || pc->image_encoded ? "--input_threads or --max_image_pixels (each thread holds decode "
                                                   "buffers of that many pixels) or --batch_size"
                                                 : "--input_threads or --batch_size");
    return 0;
}

/* The examples eval will read: the image folder's files (its listing), or
 * the records of the TFRecord files; -1 when they cannot be counted (the
 * pipeline then reports why). */
static long count_examples(const ConvertSource *listing, char **files, int n_files, int compression,
                           int skip_corrupt, char *err, size_t err_n_bytes) {
    if (listing) return imagefolder_n_files(listing);
    return io_count_records((const char *const *)files, n_files, compression, skip_corrupt, err, err_n_bytes);
}

/* At least as many examples as the data can hold, found without reading it: for a folder its files; for
 * TFRecord files that are all uncompressed, their bytes over the smallest record of a record_n_bytes image
 * (framing 16 bytes + the image); -1 where a file is compressed or cannot be opened (no bound). */
static long max_examples(const ConvertSource *listing, char **files, int n_files, int compression,
                         size_t image_n_bytes) {
    if (listing) return imagefolder_n_files(listing);
    uint64_t total = 0;
    for (int i = 0; i < n_files; i++) {
        char e[512];
        TfrReader *r = tfr_reader_open(files[i], compression, 0, e, sizeof e);
        if (!r) return -1;
        const int plain = tfr_reader_compression(r) == IO_COMPRESSION_NONE && !tfr_reader_size_unknown(r);
        total += tfr_reader_file_n_bytes(r);
        tfr_reader_close(r);
        if (!plain) return -1;
    }
    const uint64_t bound = total / (16 + (uint64_t)image_n_bytes);
    return bound > (uint64_t)LONG_MAX ? LONG_MAX : (long)bound;
}

/* What one run of eval carries from one evaluation to the next (--eval_interval_secs evaluates many). */
typedef struct {
    EventWriter *events; /* opened by the first evaluation (NULL until then, and with --eval_dir none); the caller
                            closes it */
    long n_recorded;       /* evaluations written to events */
    int said_folder_order; /* the note that an image folder's classes are its sorted folder names was printed */
    char events_dir[4096]; /* the --eval_dir the first evaluation made (made_n_bytes of it), taken away again with an */
    size_t made_n_bytes;   /* events file that recorded nothing */
} EvalRun;

/* Closes run's events file: 0, or 1 after one line when the close failed (where rc, the exit status so far, is
 * 0).  A file that recorded no evaluation (the first failed, or was stopped) is removed: TensorBoard would list
 * an empty run. */
static int eval_run_close(EvalRun *run, int rc) {
    char err[1024], path[4200] = "";
    if (run->events && run->n_recorded == 0) snprintf(path, sizeof path, "%s", event_writer_path(run->events));
    const int closed = event_writer_close(run->events, err, sizeof err);
    run->events = NULL;
    if (path[0]) remove(path);
    if (!run->n_recorded) file_remove_made_dirs(run->events_dir, run->made_n_bytes); /* where left empty */
    if (closed != 0 && rc == 0) {
        cmd_errorf("tower eval: %s\n", err);
        return 1;
    }
    return rc;
}

/* The input an image folder's files or encoded TFRecord images decode to
 * (what: "an image folder decodes", "encoded images decode"): the
 * checkpoint's model's, a square, within --max_image_pixels.  Returns 0 with *H, *W, *C set, or -1 with one line in
 * err. */
static int decoded_size(const EvalOptions *o, const ModelSpec *spec, const char *what, int *H, int *W, int *C,
                        char *err, size_t err_n_bytes) {
    if (spec->H != spec->W) {
        snprintf(err, err_n_bytes, "the checkpoint's model takes %dx%d inputs; %s to squares", spec->H, spec->W,
                 what);
        return -1;
    }
    *H = *W = spec->H;
    *C = spec->C;
    return imagefolder_check_max_pixels((size_t)o->max_image_pixels, spec->H, spec->W, err, err_n_bytes);
}

/* One evaluation of the checkpoint read from path (ck and spec, from
 * cmd_read_checkpoint; the caller frees them): the checks against the
 * flags, the data, one pass over it, the lines on stdout and, unless
 * --eval_dir none, one event at the checkpoint's global step.  run->events
 * is opened here when NULL (the first evaluation) and left open.  Returns
 * 0; 1 after one line on stderr; 2 when a stop signal arrived while
 * watching (nothing printed or recorded for it). */
static int eval_checkpoint(const EvalOptions *o, int compression, const char *path, const CkptContents *ck,
                           const ModelSpec *spec, EvalRun *run) {
    char err[PIPELINE_ERR_N_BYTES + 512]; /* a pipeline's message naming a file, escaped */
    if (o->num_classes > 0 && o->num_classes != spec->num_classes) {
        cmd_errorf("tower eval: --num_classes %d but %s was trained for %d classes\n", o->num_classes, path,
                spec->num_classes);
        return 1;
    }
    if (o->top_k > spec->num_classes) {
        cmd_errorf("tower eval: --top_k %d but %s was trained for %d classes\n", o->top_k, path, spec->num_classes);
        return 1;
    }
    if (o->image_size > 0 && (o->image_size != spec->H || o->image_size != spec->W)) {
        cmd_errorf("tower eval: --image_size %d but %s was trained on %dx%d inputs\n", o->image_size, path, spec->H,
                spec->W);
        return 1;
    }
    const float *params = (!o->no_moving_average && ck->ema) ? ck->ema : ck->params;

    char **files = NULL;
    int n_files = 0, H, W, C, is_float, exit_code = 1;
    Pipeline *pipe = NULL;
    ConvertSource *listing = NULL; /* an image folder's, listed once: the count and the pipeline's files */
    ModelActs *acts = NULL; /* for acts_batch examples: the first batch's, made when it arrives */
    int acts_batch = 0;
    float *logits = NULL; /* (acts_batch, num_classes) */
    long *confusion = NULL;
    /* The events file: opened at the first evaluation, kept open by the caller for the next. */
    if (!run->events) {
        char edir[4096];
        events_dir(edir, sizeof edir, o->eval_dir, path);
        size_t made_n_bytes = 0;
        if (edir[0] && file_make_dirs(edir, &made_n_bytes) != 0) {
            cmd_errorf("tower eval: cannot create --eval_dir %s: %s (--eval_dir none writes no events file)\n",
                    edir, strerror(errno));
            goto done;
        }
        snprintf(run->events_dir, sizeof run->events_dir, "%s", edir);
        run->made_n_bytes = made_n_bytes;
        if (edir[0] && !(run->events = event_writer_open(edir, err, sizeof err))) {
            cmd_errorf("tower eval: %s (--eval_dir none writes no events file)\n", err);
            goto done;
        }
    }
    EventWriter *events = run->events;
    const int image_folder = imagefolder_is_folder(o->data);
    char ckpt_labels[4096];
    const char *labels_file = o->labels[0] ? o->labels : NULL;
    if (image_folder && imagefolder_check_data_flags(1, 0, o->compression, o->image_key, o->label_key, o->labels,
                                                     o->resize_mode, err, sizeof err) != 0) { /* as train refuses them */
        cmd_errorf("tower eval: %s\n", err);
        goto done;
    }
    if (image_folder && decoded_size(o, spec, "an image folder decodes", &H, &W, &C, err, sizeof err) != 0) {
        cmd_errorf("tower eval: %s\n", err);
        goto done;
    }
    /* The checkpoint's class list (train_dir/labels.txt) names the model's classes, as train checked: one edited
     * or of another run is refused, not used to map folders or compared with the data's. */
    struct stat ckpt_labels_sb;
    if (io_labels_path(ckpt_labels, sizeof ckpt_labels, path) == 0 && stat(ckpt_labels, &ckpt_labels_sb) == 0) {
        char **names;
        int n_names;
        if (imagefolder_read_labels(ckpt_labels, &names, &n_names, err, sizeof err) != 0) {
            cmd_errorf("tower eval: %s\n", err);
            goto done;
        }
        for (int k = 0; k < n_names; k++) free(names[k]);
        free(names);
        if (n_names != spec->num_classes) {
            char safe[4200];
            cmd_errorf("tower eval: %s names %d class%s but the checkpoint's model has %d outputs: it is not the class "
                       "list the model was trained with\n", escape_str(safe, sizeof safe, ckpt_labels), n_names,
                       n_names == 1 ? "" : "es", spec->num_classes);
            goto done;
        }
    }
    if (image_folder) {
        /* The class list: --labels, or the one the checkpoint was trained with, so that the folders map to its
         * label numbers by name (a split may lack a class); --labels is compared with the checkpoint's. */
        struct stat sb;
        if (io_labels_path(ckpt_labels, sizeof ckpt_labels, path) == 0 && stat(ckpt_labels, &sb) == 0) {
            if (!labels_file) {
                labels_file = ckpt_labels;
            } else {
                int lrc = io_labels_compare(ckpt_labels, labels_file, err, sizeof err);
                if (lrc != 0) {
                    if (lrc > 0)
                        cmd_errorf("tower eval: --labels differs from the checkpoint's class list, so its label "
                                "numbers name other classes: %s\n", err);
                    else cmd_errorf("tower eval: %s\n", err);
                    goto done;
                }
            }
        }
        is_float = 0;
    } else if (io_expand_globs(o->data, &files, &n_files, err, sizeof err) != 0 ||
               io_check_regular_files(files, n_files, err, sizeof err) != 0 ||
               io_check_shard_sets(files, n_files, err, sizeof err) != 0) {
        cmd_errorf("tower eval: --data: %s\n", err);
        goto done;
    }
    /* The class list: labels.txt beside the data (every directory's the same) against the one the checkpoint
     * was trained with. */
    char data_labels[4096];
    if (!image_folder) {
        int lrc = io_labels_find(files, n_files, data_labels, sizeof data_labels, err, sizeof err);
        if (lrc > 0) {
            cmd_errorf("tower eval: the class lists beside --data's files differ, so their label numbers name other "
                       "classes: %s\n", err);
            goto done;
        }
        if (lrc < 0) {
            cmd_errorf("tower eval: %s\n", err);
            goto done;
        }
    }
    if (!image_folder && data_labels[0] && io_labels_path(ckpt_labels, sizeof ckpt_labels, path) == 0) {
        int lrc = io_labels_compare(ckpt_labels, data_labels, err, sizeof err);
        if (lrc > 0) {
            cmd_errorf("tower eval: the data's class list differs from the checkpoint's, so its label numbers name other "
                       "classes: %s (convert the split with --labels %s)\n", err, ckpt_labels);
            goto done;
        }
        if (lrc < 0) {
            cmd_errorf("tower eval: %s\n", err);
            goto done;
        }
    }
    int probed = 0, encoded = 0; /* probed: the file the shape came from; encoded: JPEG/PNG records */
    if (!image_folder) {
        int kind;
        if (io_probe_image_shape(files, n_files, o->image_key, compression, o->skip_corrupt, &H, &W, &C, &kind, &probed,
                                 err, sizeof err) != 0 ||
            imagefolder_check_data_flags(0, kind == IO_IMAGE_ENCODED, o->compression, o->image_key, o->label_key,
                                         o->labels, o->resize_mode, err, sizeof err) != 0) {
            cmd_errorf("tower eval: %s\n", err);
            goto done;
        }
        is_float = kind == IO_IMAGE_FLOAT;
        encoded = kind == IO_IMAGE_ENCODED;
    }
    if (encoded && decoded_size(o, spec, "encoded images decode", &H, &W, &C, err, sizeof err) != 0) {
        cmd_errorf("tower eval: %s\n", err);
        goto done;
    }
    if (C != spec->C || H < spec->H || W < spec->W) {
        cmd_errorf("tower eval: %s holds %dx%dx%d images; the checkpoint's model takes %dx%dx%d\n",
                files[probed], H, W, C, spec->H, spec->W, spec->C);
        goto done;
    }
    int is_cifar = spec->kind == MODEL_CIFAR10;
    if (!is_cifar && (H != spec->H || W != spec->W)) {
        cmd_errorf("tower eval: %s holds %dx%d images; the checkpoint's model takes %dx%d\n",
                files[probed], H, W, spec->H, spec->W);
        goto done;
    }
    Progress bar; /* started (disabled) before the listing and the pipeline, whose warnings erase it */
    progress_start(&bar, stdout, 0, "eval", "ex", 0, 0, 0.5);
    if (image_folder) {
        /* Listed once: the count below and the pipeline's files (pc.image_listing, closed after the pipeline). */
        ImageFolderConfig ic;
        imagefolder_config_defaults(&ic);
        ic.labels_file = labels_file;
        if (labels_file == ckpt_labels) ic.labels_origin = "the checkpoint's class list";
        ic.warn = eval_warn;
        ic.warn_ctx = &bar;
        if (!(listing = convert_open_imagefolder(o->data, &ic, err, sizeof err))) {
            cmd_errorf("tower eval: %s\n", err);
            goto done;
        }
        if (!labels_file) { /* no class list: label k is the k-th folder name, sorted, which nothing checks */
            int n_folders = 0;
            (void)imagefolder_classes(listing, &n_folders);
            char safe[ESCAPE_PATH_N_BYTES];
            escape_str(safe, sizeof safe, o->data);
            if (n_folders != spec->num_classes) { /* a folder lacking a class renumbered the rest: 0 of 268 */
                cmd_errorf("tower eval: %s holds %d class folder%s and the model has %d outputs, and the checkpoint "
                           "has no labels.txt to map the folders to its classes by name: give --labels FILE (the "
                           "training run's class names, one a line, in label order)\n", safe, n_folders,
                           n_folders == 1 ? "" : "s", spec->num_classes);
                goto done;
            }
            if (!run->said_folder_order)
                cmd_errorf("tower eval: note: %s's classes are its folder names in sorted order (the checkpoint has "
                           "no labels.txt): label k is the k-th; give --labels FILE where training numbered them "
                           "otherwise\n", safe);
            run->said_folder_order = 1;
        }
    }
    /* The batch: at most the examples the set holds, where they are counted (a folder's listing; one pass over
     * the records, CRCs only): for the progress line, or when the batch asked for does not fit in memory. */
    const int live = progress_wanted(stdout, o->no_progress);
    long n_records = live ? count_examples(listing, files, n_files, compression, o->skip_corrupt, err, sizeof err) : -1;
    int batch = o->batch_size;
    if (n_records > 0 && n_records < batch) batch = (int)n_records;
    /* Not counted: a bound read from the files' sizes keeps a batch larger than the data from being allocated
     * whole (--batch_size 20000 on Fashion-MNIST's 10,000 test images held 8.6 GB, 4.4 with the count). */
    const long at_most = n_records < 0 ? max_examples(listing, files, n_files, compression,
                                                      encoded ? 0 : (size_t)H * W * C * (is_float ? sizeof(float) : 1))
                                       : -1;
    if (at_most > 0 && at_most < batch) batch = (int)at_most;
    PipelineConfig pc;
    pipeline_config_defaults(&pc);
    pc.files = (const char *const *)files;
    pc.n_files = n_files;
    pc.image_key = o->image_key;
    pc.label_key = o->label_key;
    pc.compression = compression;
    pc.in_H = H;
    pc.in_W = W;
    pc.in_C = C;
    pc.image_float = is_float;
    pc.out_H = spec->H;
    pc.out_W = spec->W;
    pc.num_classes = spec->num_classes;
    pc.augment = is_cifar ? AUGMENT_CIFAR_EVAL : AUGMENT_MNIST;
    pc.n_shards = 1;
    pc.shard_sizes[0] = batch;
    pc.shuffle = 0;
    pc.num_epochs = 1;
    pc.drop_remainder = 0;
    pc.skip_corrupt = o->skip_corrupt;
    pc.max_corrupt_fraction = o->max_corrupt_fraction;
    if (image_folder) {
        pc.image_dir = o->data;
        pc.image_listing = listing;
        pc.labels_file = labels_file;
    }
    pc.image_encoded = encoded;
    if (image_folder || encoded) {
        pc.resize_mode = imagefolder_resize_mode_from_name(o->resize_mode);
        pc.short_side = imagefolder_short_side(spec->H, o->central_fraction);
        pc.max_image_pixels = (size_t)o->max_image_pixels;
    }
    pc.warn = eval_warn;
    pc.warn_ctx = &bar;
    if (o->input_threads > 0) pc.n_workers = o->input_threads;
    pc.alloc = host_alloc_default();
    const size_t image_n_bytes = encoded ? pipeline_encoded_max_n_bytes((size_t)o->max_image_pixels)
                                         : (size_t)H * W * C * (is_float ? 4 : 1); /* a record's image */
    if (!eval_memory_fits(&pc, spec, batch, image_n_bytes, 0) && n_records < 0) {
        n_records = count_examples(listing, files, n_files, compression, o->skip_corrupt, err, sizeof err);
        if (n_records > 0 && n_records < batch) batch = pc.shard_sizes[0] = (int)n_records;
    }
    if (!eval_memory_fits(&pc, spec, batch, image_n_bytes, 1)) goto done;
    pipe = pipeline_open(&pc, err, sizeof err);
    confusion = calloc((size_t)spec->num_classes * spec->num_classes, sizeof(long));
    if (!pipe) {
        cmd_errorf("tower eval: %s\n", err);
        goto done;
    }
    if (!confusion) {
        cmd_errorf("tower eval: out of memory for a %d x %d confusion matrix\n", spec->num_classes,
                   spec->num_classes);
        goto done;
    }
    /* The activations and logits: for the first batch's examples, the most any batch holds (only the last is
     * short); a batch larger than data whose size is not known from its files (compressed records) is not
     * allocated whole (--batch_size 20000 on 600 gzip-compressed records held 8.5 GB, now 0.5). */
    long n_expected = live ? n_records : 0;
    progress_start(&bar, stdout, live, "eval", "ex", 0, n_expected > 0 ? n_expected : 0, 0.5);
    long n_total = 0, n_correct = 0, n_top_k = 0, n_nonfinite = 0;
    double loss_sum = 0.0, total_loss_sum = 0.0;
    for (;;) {
        PipelineBatch *b;
        int got = pipeline_next(pipe, &b, err, sizeof err);
        if (got < 0) {
            progress_clear(&bar);
            cmd_errorf("tower eval: %s\n", err);
            goto done;
        }
        if (got == 0) break;
        if (eval_stop) { /* watching, and asked to stop: this evaluation is not recorded */
            progress_clear(&bar);
            exit_code = 2;
            goto done;
        }
        if (b->n > acts_batch) {
            model_acts_free(acts);
            free(logits);
            acts = model_acts_create(spec, b->n);
            logits = malloc((size_t)b->n * spec->num_classes * sizeof(float));
            if (!acts || !logits) {
                progress_clear(&bar);
                cmd_errorf("tower eval: out of memory for batch %d\n", b->n);
                goto done;
            }
            model_acts_set_training(acts, 0); /* evaluation: batch norm's moving statistics, no dropout */
            acts_batch = b->n;
        }
        float ce;
        float total_loss = model_forward(logits, &ce, acts, b->x, b->labels, params, b->n);
        for (int i = 0; i < b->n; i++) {
            const float *l = logits + (size_t)i * spec->num_classes;
            int finite = 1;
            for (int k = 0; k < spec->num_classes; k++) finite &= isfinite(l[k]) != 0;
            if (!finite) { /* counted wrong (in_top_k), kept out of the confusion matrix, said at the end */
                n_nonfinite++;
                continue;
            }
            int best = 0;
            for (int k = 1; k < spec->num_classes; k++)
                if (l[k] > l[best]) best = k;
            const int correct = in_top_k(l, spec->num_classes, b->labels[i], 1);
            if (correct) best = b->labels[i]; /* a tie with the largest logit: correct, as in_top_k counts it */
            n_correct += correct; /* cifar10_eval's in_top_k(logits, labels, 1) */
            if (o->top_k > 1) n_top_k += in_top_k(l, spec->num_classes, b->labels[i], o->top_k);
            confusion[(size_t)b->labels[i] * spec->num_classes + best]++;
        }
        loss_sum += (double)ce * b->n;
        total_loss_sum += (double)total_loss * b->n;
        n_total += b->n;
        pipeline_release(pipe, b);
        char post[96];
        snprintf(post, sizeof post, "%ld examples, precision %.3f", n_total, (double)n_correct / (double)n_total);
        progress_update(&bar, n_total, post);
    }
    if (n_total > 0) {
        char post[96];
        snprintf(post, sizeof post, "%ld examples, precision %.3f", n_total, (double)n_correct / (double)n_total);
        progress_end(&bar, n_total, post);
    }
    if (n_total == 0) {
        cmd_errorf("tower eval: %s holds no examples\n", o->data);
        goto done;
    }
    double precision = (double)n_correct / (double)n_total;
    if (events) {
        /* TensorFlow's cifar10_eval tag; "loss" is the training loss's definition (cross-entropy + weight decay). */
        char top_k_tag[32];
        snprintf(top_k_tag, sizeof top_k_tag, "Precision @ %d", o->top_k);
        if (event_writer_add_scalar(events, "Precision @ 1", (float)precision, err, sizeof err) != 0 ||
            (o->top_k > 1 &&
             event_writer_add_scalar(events, top_k_tag, (float)((double)n_top_k / (double)n_total), err, sizeof err) != 0) ||
            event_writer_add_scalar(events, "loss", (float)(total_loss_sum / (double)n_total), err, sizeof err) != 0 ||
            event_writer_add_scalar(events, "cross_entropy", (float)(loss_sum / (double)n_total), err, sizeof err) != 0 ||
            event_writer_write(events, ck->global_step, event_wall_time_now(), err, sizeof err) != 0) {
            cmd_errorf("tower eval: %s\n", err);
            goto done;
        }
        run->n_recorded++;
    }
    char ts[64];
    trainer_timestamp(ts, sizeof ts);
    printf("%s: precision @ 1 = %.3f\n", ts, precision);
    if (o->top_k > 1) printf("%s: precision @ %d = %.3f\n", ts, o->top_k, (double)n_top_k / (double)n_total);
    PipelineStats pst;
    pipeline_stats(pipe, &pst);
    if (pst.corrupt_skipped > 0)
        printf("%s: %ld corrupt record%s skipped (%llu of %llu input bytes unreadable)\n", ts, pst.corrupt_distinct,
               pst.corrupt_distinct == 1 ? "" : "s", (unsigned long long)pst.corrupt_lost_n_bytes,
               (unsigned long long)pst.input_n_bytes);
    if (pst.images_damaged > 0)
        printf("%s: %ld image%s kept with damaged JPEG data (warned about above)\n", ts, pst.images_damaged,
               pst.images_damaged == 1 ? "" : "s");
    char safe_path[16384], xent[32]; /* the name comes from the checkpoint index: escaped, as every byte from a file */
    const double mean_ce = loss_sum / (double)n_total;
    if (isnan(mean_ce)) snprintf(xent, sizeof xent, "nan"); /* not glibc's "-nan" */
    else snprintf(xent, sizeof xent, "%.4f", mean_ce);
    printf("%s: %ld of %ld examples correct; cross-entropy %s; checkpoint %s (step %ld, %s)\n", ts, n_correct,
           n_total, xent, escape_str(safe_path, sizeof safe_path, path), ck->global_step,
           params == ck->ema ? "moving averages" : "raw variables");
    /* A model that overflows in evaluation mode (its moving statistics, its variables): the precision counts those
     * examples wrong, as TensorFlow's in_top_k does, and the line says so. */
    if (n_nonfinite > 0)
        cmd_errorf("tower eval: warning: %ld of %ld examples have non-finite logits (the model overflows on them): "
                   "counted wrong, as in_top_k counts them, and left out of the confusion matrix; the cross-entropy "
                   "is %s\n", n_nonfinite, n_total, xent);
    if (o->confusion_matrix) {
        if (n_nonfinite > 0)
            printf("confusion matrix (rows: true class, columns: predicted class; %ld example%s of non-finite logits "
                   "left out)\n      ", n_nonfinite, n_nonfinite == 1 ? "" : "s");
        else printf("confusion matrix (rows: true class, columns: predicted class)\n      ");
        for (int k = 0; k < spec->num_classes; k++) printf(" %6d", k);
        printf("\n");
        for (int r = 0; r < spec->num_classes; r++) {
            printf("%6d", r);
            for (int k = 0; k < spec->num_classes; k++) printf(" %6ld", confusion[(size_t)r * spec->num_classes + k]);
            printf("\n");
        }
    }
    exit_code = 0;
done:
    if (pipe) pipeline_close(pipe);
    if (listing) listing->close(listing);
    model_acts_free(acts);
    free(logits);
    free(confusion);
    for (int i = 0; i < n_files; i++) free(files[i]);
    free(files);
    return exit_code;
}

/* Sleep up to secs seconds, waking early when a stop signal arrives. */
static void eval_sleep(int secs) {
    const struct timespec tick = {0, 100 * 1000 * 1000};
    for (long i = 0; i < 10L * secs && !eval_stop; i++) nanosleep(&tick, NULL);
}

/* What tells one checkpoint file from another of the same name (a run
 * started over in the same directory writes model.ckpt-N again, by rename):
 * the file's, or for a checkpoint in shards (ps/checkpoint.h) its
 * manifest's, device, inode and modification time. */
typedef struct {
    char path[4096];
    dev_t dev;
    ino_t ino;
    struct timespec mtime;
} EvalFileId;

static int eval_file_id(const char *path, EvalFileId *id) {
    struct stat sb;
    char manifest[4200];
    snprintf(manifest, sizeof manifest, "%s.shards", path);
    if (stat(path, &sb) != 0 && stat(manifest, &sb) != 0) return -1;
    snprintf(id->path, sizeof id->path, "%s", path);
    id->dev = sb.st_dev;
    id->ino = sb.st_ino;
    id->mtime = sb.st_mtim;
    return 0;
}

static int eval_same_file(const EvalFileId *a, const EvalFileId *b) {
    return !strcmp(a->path, b->path) && a->dev == b->dev && a->ino == b->ino && a->mtime.tv_sec == b->mtime.tv_sec &&
           a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* --eval_interval_secs: cifar10_eval.py's loop.  Every interval, the latest
 * checkpoint of --checkpoint_dir, when it is not the file evaluated last;
 * until one of --until_step or later is evaluated (exit 0) or SIGINT,
 * SIGTERM or SIGHUP (exit 128 + the signal, as `tower train` stopped by one).  No
 * checkpoint yet is waited for; a checkpoint the index names but that is
 * gone when read (train's --keep_checkpoints removed it after a newer
 * index) is passed over for the newer one; any other failure is one line
 * and exit 1. */
/* What watching can know before the first checkpoint, refused at once rather than when one appears (hours later):
 * --checkpoint_dir, where it exists, is a directory; --data names files (its globs match regular files of one
 * shard set) or an image folder.  0, or 1 after one line. */
static int watch_check(const EvalOptions *o) {
    struct stat sb;
    if (stat(o->checkpoint_dir, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
        cmd_errorf("tower eval: --checkpoint_dir %s is not a directory\n", o->checkpoint_dir);
        return 1;
    }
    if (imagefolder_is_folder(o->data)) return 0;
    char err[PIPELINE_ERR_N_BYTES], **files = NULL;
    int n_files = 0;
    const int bad = io_expand_globs(o->data, &files, &n_files, err, sizeof err) != 0 ||
                    io_check_regular_files(files, n_files, err, sizeof err) != 0 ||
                    io_check_shard_sets(files, n_files, err, sizeof err) != 0;
    io_free_files(files, n_files);
    if (bad) cmd_errorf("tower eval: --data: %s\n", err);
    return bad;
}

static int eval_watch(const EvalOptions *o, int compression) {
    if (watch_check(o) != 0) return 1;
    cmd_catch_signals(on_eval_signal);
    char ts[64], err[1024], until[64];
    if (o->until_step > 0) snprintf(until, sizeof until, "until step %ld", o->until_step);
    else snprintf(until, sizeof until, "until SIGINT, SIGTERM or SIGHUP");
    trainer_timestamp(ts, sizeof ts);
    char safe_dir[16384];
    escape_str(safe_dir, sizeof safe_dir, o->checkpoint_dir);
    printf("%s: watching %s for new checkpoints every %d s (%s)\n", ts, safe_dir, o->eval_interval_secs, until);
    fflush(stdout);
    EvalRun run = {0};
    EvalFileId last = {.path = ""};
    long n_evals = 0, last_step = -1;
    int rc = 0, said_waiting = 0, passed_over = 0;
    while (!eval_stop) {
        char path[4096];
        const int found = ckpt_find_latest(o->checkpoint_dir, path, sizeof path, err, sizeof err);
        if (found < 0) {
            cmd_errorf("tower eval: %s\n", err);
            rc = 1;
            break;
        }
        EvalFileId id = {.path = ""}; /* a file stat cannot see is read (and judged) anyway */
        if (found == 0 && !said_waiting) {
            trainer_timestamp(ts, sizeof ts);
            printf("%s: no checkpoint in %s yet: waiting\n", ts, safe_dir);
            fflush(stdout);
            said_waiting = 1;
        }
        if (found == 1 && (eval_file_id(path, &id) != 0 || !eval_same_file(&id, &last))) {
            CkptContents ck;
            ModelSpec spec;
            if (cmd_read_checkpoint(path, &ck, &spec, err, sizeof err) != 0) {
                char now[4096];
                if (passed_over < 8 && ckpt_find_latest(o->checkpoint_dir, now, sizeof now, NULL, 0) == 1 &&
                    strcmp(now, path) != 0) {
                    passed_over++; /* the index moved on while this one was read */
                    continue;
                }
                cmd_errorf("tower eval: %s\n", err);
                rc = 1;
                break;
            }
            passed_over = 0;
            const int r = eval_checkpoint(o, compression, path, &ck, &spec, &run);
            const long step = ck.global_step;
            ckpt_contents_free(&ck);
            if (r == 2) break;
            if (r != 0) {
                rc = 1;
                break;
            }
            fflush(stdout);
            last = id;
            n_evals++;
            last_step = step;
            if (o->until_step > 0 && step >= o->until_step) break;
        }
        eval_sleep(o->eval_interval_secs);
    }
    if (rc == 0 && eval_stop) {
        trainer_timestamp(ts, sizeof ts);
        char last_s[64] = "";
        if (n_evals > 0) snprintf(last_s, sizeof last_s, " (the last at step %ld)", last_step);
        printf("%s: stopped by %s after %ld evaluation%s%s\n", ts, cmd_signal_name(eval_stop),
               n_evals, n_evals == 1 ? "" : "s", last_s);
        rc = 128 + eval_stop;
    }
    return eval_run_close(&run, rc);
}

int cmd_eval(int argc, char **argv) {
    EvalOptions o = {
        .checkpoint_dir = "/tmp/tower_train", .checkpoint = "", .data = "data/fashion-mnist/test-*.tfrecord",
        .image_key = "image_raw", .label_key = "label", .compression = "auto", .eval_dir = "", .labels = "",
        .resize_mode = "resize", .batch_size = 500, .top_k = 1, .central_fraction = 1.0f,
        .max_image_pixels = (int)PIPELINE_DEFAULT_MAX_IMAGE_PIXELS,
        .num_classes = 0, .max_corrupt_fraction = IO_DEFAULT_MAX_CORRUPT_FRACTION,
    };
    Flag flags[32];
    int n_flags = eval_flags(&o, flags);
    char *positional[argc > 0 ? argc : 1];
    int n_positional;
    int rc = flags_parse(flags, n_flags, argc, argv, positional, &n_positional);
    if (rc == 1) {
        flags_print_usage("tower eval", "[flags]", flags, n_flags);
        return 0;
    }
    static const char *const compressions[] = {"auto", "none", "gzip", "zlib", NULL};
    static const char *const resize_modes[] = {"resize", "center_crop", NULL};
    if (rc != 0 || cmd_check_no_arguments("eval", o.data, positional, n_positional) != 0 ||
        cmd_check_nonempty("eval", "data", o.data, "list of TFRecord files or globs") ||
        cmd_check_data("eval", "data", o.data) ||
        cmd_check_choice("eval", "resize_mode", o.resize_mode, resize_modes) ||
        cmd_check_choice("eval", "compression", o.compression, compressions) ||
        cmd_check_nonempty("eval", "image_key", o.image_key, "feature key") ||
        cmd_check_nonempty("eval", "label_key", o.label_key, "feature key"))
        return 2;
    if (cmd_check_central_fraction("eval", o.central_fraction, o.resize_mode) != 0) return 2;
    if (!o.checkpoint[0] && !o.checkpoint_dir[0]) {
        cmd_errorf("tower eval: --checkpoint_dir '': expected a directory (or --checkpoint FILE)\n");
        return 2;
    }
    if (o.eval_interval_secs > 0 && o.checkpoint[0]) {
        cmd_errorf("tower eval: --eval_interval_secs watches --checkpoint_dir for new checkpoints; --checkpoint "
                   "names one file\n");
        return 2;
    }
    if (o.until_step > 0 && o.eval_interval_secs == 0) {
        cmd_errorf("tower eval: --until_step %ld needs --eval_interval_secs (without it eval evaluates once)\n",
                   o.until_step);
        return 2;
    }
    const int compression = io_compression_parse(o.compression);
    if (o.eval_interval_secs > 0) return eval_watch(&o, compression);

    char path[4096];
    CkptContents ck;
    ModelSpec spec;
    if (cmd_open_checkpoint("eval", o.checkpoint, o.checkpoint_dir, &ck, &spec, path, sizeof path) != 0) return 1;
    EvalRun run = {0};
    const int exit_code = eval_run_close(&run, eval_checkpoint(&o, compression, path, &ck, &spec, &run));
    ckpt_contents_free(&ck);
    return exit_code;
}

