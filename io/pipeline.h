/* pipeline.h — the parallel input pipeline: TFRecord files or an image folder in, per-tower shards out.
 *
 * Where it sits: the io -> shards step of the tower pattern.  One reader
 * thread streams records (file order reshuffled each epoch), verifies and
 * decodes them, and runs TensorFlow's shuffle-queue semantics; n_workers
 * threads augment each example straight into a staging buffer that came
 * from the caller's HostAlloc (pinned memory with the CUDA backend); the
 * caller takes whole global batches, each split into per-tower shards.
 * Decoding and the key/shape/label checks run in the reader, before the
 * shuffle, so a skipped bad record never leaves a hole in a batch and the
 * stream stays a pure function of the data; the workers only augment (the
 * reader's ceiling is in bench/RESULTS.md).
 * Image folders (cfg.image_dir, DIR/<class>/FILE.png|jpg|jpeg, the class
 * rules of io/imagefolder.h): the file list is permuted each epoch (seeded
 * as the TFRecord file order), the workers decode and resize each image
 * (JPEGs at libjpeg's reduced scale where large), and the reader collects
 * them in that order into the same shuffle buffer; a bad image is skipped
 * (or stops the pipeline) exactly as a bad record.  TFRecords of encoded
 * JPEG/PNG images (cfg.image_encoded) are read by the reader and decoded
 * by the workers the same way, in read order.  The sources (TFRecord,
 * encoded TFRecord, image folder) plug into one machinery:
 * io/pipeline_source.h.
 *
 * Order and determinism: the output is one stream of examples, epoch after
 * epoch; each epoch is a permutation of the (good) records, so every example
 * is seen exactly once per epoch, and batches are consecutive runs of the
 * stream (a batch may span an epoch boundary).  The stream, the shuffle and
 * every augmentation are pure functions of (seed, data): an example's random
 * distortion is seeded from (seed, its index in the stream).  Same seed =>
 * same batches bit for bit, whatever n_workers or timing.
 * Shuffle: a buffer of `capacity` examples is filled, then each new record
 * replaces one drawn uniformly at random (TensorFlow's RandomShuffleQueue
 * with a producer ahead of the consumer); at the end of an epoch the buffer
 * drains, so epochs never mix.  capacity must exceed min_after_dequeue.
 *
 * Memory: fixed at open by the configuration (pipeline_max_n_bytes), never
 * by the data: files are streamed one record at a time.
 * What it does not do: no training, no device copies (the tower backends
 * copy shards out of the staging buffers), no variable image sizes.
 */
#ifndef TOWER_IO_PIPELINE_H
#define TOWER_IO_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "base/host_alloc.h"
#include "base/limits.h"
#include "io/augment.h"
#include "io/tfrecord.h"

typedef enum {
    AUGMENT_NONE = 0,        /* uint8 -> float, unscaled (float images pass through) */
    AUGMENT_MNIST = 1,       /* x / 255 - 0.5 (float images pass through) */
    AUGMENT_CIFAR_TRAIN = 2, /* random crop, flip, brightness, contrast, standardization */
    AUGMENT_CIFAR_EVAL = 3,  /* central crop, standardization */
} AugmentKind;

#define PIPELINE_MAX_SHARDS TOWER_MAX_TOWERS /* one shard per tower */

/* The most decode/augment threads a pipeline runs (PipelineConfig.n_workers; --input_threads). */
#define PIPELINE_MAX_WORKERS 256
/* One message naming a file (PATH_MAX) and a record, with its reason: the
 * bad-record and failure lines are whole for any path.  PIPELINE_ERR_N_BYTES
 * is the err a caller of pipeline_open/pipeline_next gives for such a line
 * escaped (a control byte becomes 4: twice the message). */
#define PIPELINE_MSG_N_BYTES 4608
#define PIPELINE_ERR_N_BYTES (2 * PIPELINE_MSG_N_BYTES)

typedef struct {
    const char *const *files; int n_files;  /* paths, already expanded (see io_expand_globs); copied at open */
    const char *image_key, *label_key;       /* defaults "image_raw", "label" */
    const char *height_key, *width_key, *depth_key; /* optional int64 features checked against in_H/W/C when present; defaults "height", "width", "depth" */
    int image_float;                         /* 0: image is a bytes_list of uint8 (H, W, C); 1: a float_list of H*W*C floats */
    int compression;                         /* IO_COMPRESSION_AUTO / NONE / GZIP / ZLIB */
    int in_H, in_W, in_C;                    /* stored image shape */
    int out_H, out_W;                        /* after crop (== in for no crop) */
    int num_classes;                         /* labels must lie in [0, num_classes) */
    AugmentKind augment;
    AugmentHparams augment_hparams;          /* AUGMENT_CIFAR_TRAIN's ranges; default TF cifar10 */
    int n_shards; int shard_sizes[PIPELINE_MAX_SHARDS]; /* per-tower examples; global batch = sum */
    int shuffle;                             /* 0: file order, no shuffle (eval) */
    long min_after_dequeue, capacity;        /* TF shuffle-queue semantics; capacity 0: min_after_dequeue + 3 x global batch */
    int num_epochs;                          /* 0 = forever */
    uint64_t seed;
    int n_workers;                           /* decode/augment threads (1 .. PIPELINE_MAX_WORKERS) */
    int prefetch_batches;                    /* ring of staging buffers; raised to >= 2 * n_shards (0: that) */
    HostAlloc alloc;                         /* staging buffers come from here */
    int skip_corrupt;                        /* 1: count and skip bad records (stats.corrupt_skipped) */
    int log_corrupt;                         /* with skip_corrupt: warn about the first this-many distinct bad records */
    double max_corrupt_fraction;             /* with skip_corrupt: stop (pipeline_next -1) once one epoch's bad records
                                                made more than this fraction of the files' bytes unreadable; in [0, 1],
                                                default IO_DEFAULT_MAX_CORRUPT_FRACTION */
    void (*warn)(void *ctx, const char *line); /* each warning line (escaped, no newline); NULL: "warning: LINE" on
                                                stderr.  Called from the reader thread. */
    void *warn_ctx;
    size_t max_record_n_bytes;               /* 64 MiB default */
    int drop_remainder;                      /* 0: the last batch of the data may be short (eval) */
    long skip_examples;                      /* resume: fast-forward this many examples deterministically, without augmenting them */
    int split_by;                            /* this reader's part of the TFRecord data (tf.data's shard): PIPELINE_SPLIT_NONE (0,
                                              * everything), _FILES (files split_index, split_index + split_n, ... of the list as
                                              * given) or _RECORDS (the records whose place in the epoch's read order, counting every
                                              * file in that epoch's order, is split_index mod split_n); split_n parts in all */
    int split_n, split_index;
    /* An image folder instead of files: DIR/<class>/FILE.png|jpg|jpeg (io/imagefolder.h's rules), decoded and
     * resized by the workers to in_H x in_W x in_C (in_H == in_W, the image size; in_C 3 RGB or 1 grey). */
    const char *image_dir;                   /* NULL: TFRecord files */
    int image_encoded;                       /* TFRecord files whose image_key holds an encoded JPEG or PNG (TF-slim's
                                              * and tf_cnn_benchmarks' image/encoded): decoded and resized by the
                                              * workers as an image folder's files, to in_H x in_W x in_C with the
                                              * image_dir options below; the height/width/depth keys are not read
                                              * (they describe the stored image) */
    struct ConvertSource *image_listing;     /* image_dir: its listing, convert_open_imagefolder(image_dir) with
                                              * labels_file, borrowed: the caller closes it after pipeline_close
                                              * (a trainer that counted the folder lists it once); NULL: the
                                              * pipeline lists image_dir itself */
    const char *labels_file;                 /* image_dir: the class list (NULL: the sorted class folders) */
    int resize_mode;                         /* image_dir: IMAGEFOLDER_RESIZE (0), _CENTER_CROP (1) or
                                              * _RANDOM_CROP (2: drawn from (seed, epoch, file)) */
    int short_side;                          /* image_dir, _CENTER_CROP: the shorter side before the crop, >= in_H
                                              * (0: in_H; imagefolder_short_side) */
    int jpeg_scaled;                         /* image_dir: 1 (default) decodes JPEGs at libjpeg's reduced scale where larger than needed */
    size_t max_image_pixels;                 /* image_dir: the largest decoded image and resampling buffer, in pixels
                                                (a larger image is a bad example); bounds each worker's memory */
} PipelineConfig;

#define PIPELINE_DEFAULT_MAX_IMAGE_PIXELS ((size_t)1 << 22) /* 4 Mpixels, e.g. 2048 x 2048 decoded */

/* Defaults: TensorFlow cifar10 training input (32x32x3 -> 24x24, 10
 * classes, AUGMENT_CIFAR_TRAIN, one shard, every shard_sizes entry 128 so
 * that setting n_shards alone gives equal shards, shuffle with
 * min_after_dequeue 20000, forever), 2 workers, host_alloc_default(),
 * drop_remainder 1, the keys above.  files must still be set. */
void pipeline_config_defaults(PipelineConfig *cfg);

enum { PIPELINE_SPLIT_NONE = 0, PIPELINE_SPLIT_FILES = 1, PIPELINE_SPLIT_RECORDS = 2 };

typedef struct Pipeline Pipeline;

typedef struct {
    float *x;          /* (n, out_H, out_W, in_C) staging buffer from cfg.alloc */
    int32_t *labels;   /* (n) */
    int n;             /* examples in this batch (global batch, or fewer for the last one when !drop_remainder) */
    int shard_offset[PIPELINE_MAX_SHARDS], shard_n[PIPELINE_MAX_SHARDS]; /* tower t's shard: examples [offset, offset+n) */
    long epoch;        /* epoch of its first example */
    long first_example;/* index of its first example in the pipeline's output stream (for resume) */
    size_t example_n_floats; /* out_H * out_W * in_C: tower t's images start at x + shard_offset[t] * example_n_floats */
} PipelineBatch;

typedef struct {
    double examples_per_sec;  /* examples delivered into batches / seconds since open */
    double queue_fill;        /* mean over pipeline_next calls of (batches ready / prefetch_batches) on entry */
    double consumer_wait_sec; /* total seconds pipeline_next spent waiting for a batch */
    long examples_produced;   /* examples in completed batches */
    long corrupt_skipped;     /* times a bad record was skipped, every epoch counted (skip_corrupt) */
    long corrupt_distinct;    /* distinct bad records (each epoch meets the same ones) */
    uint64_t corrupt_lost_n_bytes; /* bytes of the files those records made unreadable (tfr_reader_lost_n_bytes) */
    uint64_t input_n_bytes;   /* the files' sizes at open */
    long batches_delivered;
    int prefetch_batches;     /* the ring depth in use */
    long images_decoded;      /* image folder: images the workers decoded (every epoch counted) */
    long images_scaled;       /* image folder: of those, JPEGs decoded at a reduced scale */
    long images_damaged;      /* image folder: distinct images kept though libjpeg found their data damaged (warned
                                 about once each, the first log_corrupt of them) */
} PipelineStats;

/* Starts the threads.  Checks the configuration (and that every file opens)
 * first: NULL + one line in err on any problem.  The pipeline copies cfg and
 * the file names; staging buffers are allocated from cfg->alloc here. */
Pipeline *pipeline_open(const PipelineConfig *cfg, char *err, size_t err_n_bytes);

/* Waits for the next global batch.  Returns 1 with *out set (the batch
 * belongs to the caller until pipeline_release), 0 at the end of the data
 * (num_epochs done), or -1 with one line in err ("<file>: record <i> at
 * offset <o>: <what>") when a bad record stopped the pipeline; batches
 * complete before the bad record are delivered first.  Release every batch:
 * holding all prefetch_batches of them blocks the reader. */
int pipeline_next(Pipeline *p, PipelineBatch **out, char *err, size_t err_n_bytes);

/* Gives the staging buffer back (any order). */
void pipeline_release(Pipeline *p, PipelineBatch *b);

/* A snapshot of the pipeline's own statistics. */
void pipeline_stats(Pipeline *p, PipelineStats *s);

/* The pipeline's host memory, part by part (pipeline_max_n_bytes). */
typedef struct {
    size_t slots_n_bytes;    /* decoded examples in flight: n_slots x (slot_n_bytes + label + bookkeeping) */
    size_t shuffle_n_bytes;  /* the shuffle buffer's index: capacity slot ids */
    size_t staging_n_bytes;  /* prefetch_batches staging buffers (images and labels, whole pages, from cfg.alloc) */
    size_t reader_n_bytes;   /* the source's reader: the open TfrReader, the Example decoder's arena and the file names;
                                image folder: the listing (read from the directory) and one epoch's order */
    size_t workers_n_bytes;  /* image folder, encoded records: each worker's decoded image, resampling buffers and
                                libjpeg's memory */
    size_t threads_n_bytes;  /* the reader's and workers' stacks, the Pipeline itself, the file names */
    size_t total_n_bytes;    /* the sum */
    long capacity, n_slots;  /* shuffle capacity (0: no shuffle); slots = capacity + 2 batches + groups in transit */
    int prefetch_batches;    /* staging buffers */
    size_t slot_n_bytes;     /* one decoded image (in_H * in_W * in_C, x4 for float images, rounded up to 64) */
} PipelineMemory;

/* The most host memory a pipeline opened with cfg holds at any time, in
 * bytes, when no record is longer than record_n_bytes (0: the reader's
 * limit cfg->max_record_n_bytes, which every record obeys) and the records
 * are image-like Examples (see example_decoder_max_n_bytes).  It does not
 * depend on the number or size of the files: the pipeline streams them.
 * Mirrors pipeline_open's sizes (capacity 0 and prefetch_batches raised as
 * there).  Fills m (when not NULL) with the parts.  cfg must be one that
 * pipeline_open accepts (n_shards within PIPELINE_MAX_SHARDS); never fails. */
size_t pipeline_max_n_bytes(const PipelineConfig *cfg, size_t record_n_bytes, PipelineMemory *m);

/* Image folder: the class names in label order (owned by the pipeline) and
 * their number; NULL for TFRecord files. */
const char *const *pipeline_classes(const Pipeline *p, int *n_classes);

/* Stops and joins the threads, frees everything (staging buffers through
 * cfg.alloc).  Batches not yet released become invalid.  NULL is fine. */
void pipeline_close(Pipeline *p);

/* ---- helpers (io/files.c) ---- */

/* Expands comma-separated globs or paths into *files (n_files), sorted and
 * without duplicates: a path given twice, or naming the same file as an
 * earlier one (same st_dev and st_ino: ./F, an absolute path, a symlink, a
 * hard link), is dropped silently, the first in sorted order kept; free
 * with io_free_files.  Returns 0, or -1 with a message when a pattern
 * matches nothing or a path does not exist. */
int io_expand_globs(const char *pattern_list, char ***files, int *n_files, char *err, size_t err_n_bytes);
/* io_expand_globs of n_patterns globs or paths, each taken whole (a comma
 * or a space in a name is the name's: tower inspect's FILE arguments). */
int io_expand_patterns(const char *const *patterns, int n_patterns, char ***files, int *n_files, char *err,
                       size_t err_n_bytes);
void io_free_files(char **files, int n_files);

/* Finds the paths (n_paths) that name the same file (same st_dev and
 * st_ino: F and ./F, an absolute path, a symlink, a hard link) as an
 * earlier one, whose examples a reader would read twice; a path stat(2)
 * cannot see is no file here (its reader says why), and nothing is opened.
 * later (n_paths bytes, NULL: not wanted) gets 1 for each such path, else
 * 0.  pair (NULL: not wanted) gets the first pair: pair[1] the lowest index
 * of such a path, pair[0] the lowest index naming its file; untouched when
 * there is none.  Returns how many such paths there are (0: none), or -1
 * when memory is short.  io_expand_globs drops them; convert refuses them. */
long io_find_same_files(const char *const *paths, size_t n_paths, size_t pair[2], unsigned char *later);

/* The shards among files (names PREFIX-DDDDD-of-NNNNN, any suffix, e.g.
 * .tfrecord: convert's and TensorFlow's) of one prefix are of one set: one
 * NNNNN, and no PREFIX-*-of-*SUFFIX.tmp beside them (a conversion to the
 * prefix under way, or killed while it put its shards in place).  Else the
 * glob mixes two conversions' examples (an interrupted convert --overwrite,
 * two at once), read as one data set without a word.  0, or -1 with one
 * line in err naming the files. */
int io_check_shard_sets(char *const *files, int n_files, char *err, size_t err_n_bytes);

/* 0 when each of files is a regular file; -1 with one line in err naming
 * the first that is not (a pipe, a FIFO, a socket, a device), for which
 * the trainer and eval would read a stream twice (the first record for the
 * image shape, then the pipeline; every epoch again) and see garbage.  Only
 * stat(2): a FIFO is never opened, so nothing waits for its writer. */
int io_check_regular_files(char *const *files, int n_files, char *err, size_t err_n_bytes);

/* What a record's image feature holds (io_probe_image_shape). */
enum { IO_IMAGE_UINT8 = 0, IO_IMAGE_FLOAT = 1, IO_IMAGE_ENCODED = 2 };

/* Image kind and shape from the first good record of files (n_files, in
 * order; an empty file is passed over).  *image_kind: IO_IMAGE_UINT8 (a
 * bytes_list of raw pixels), IO_IMAGE_FLOAT (a float_list), or
 * IO_IMAGE_ENCODED (bytes that start as a JPEG or PNG, unless "height" and
 * "width" features describe raw pixels of their size, or a square number
 * of them does not end as a JPEG does, FF D9; *H, *W, *C are 0:
 * the caller decodes to a size of its own, PipelineConfig.image_encoded).
 * Raw shapes: the height/width/depth int64 features ("height", "width",
 * "depth") when present, else, for a square single-channel image, sqrt of
 * its size.  *file_index (NULL: not wanted): the file it came from.  A bad
 * record (or unreadable file) before it is the error (file, record, offset)
 * unless skip_corrupt, which passes over it as the pipeline will; an encoded
 * JPEG or PNG under another key than image_key is named, with the flags
 * to give.  Returns 0, or -1 with one line in err. */
int io_probe_image_shape(char *const *files, int n_files, const char *image_key, int compression, int skip_corrupt,
                         int *H, int *W, int *C, int *image_kind, int *file_index, char *err, size_t err_n_bytes);

/* The largest encoded image a record may hold where decoded images are at
 * most max_image_pixels (0: PIPELINE_DEFAULT_MAX_IMAGE_PIXELS): three bytes
 * a pixel and 1 MiB of headers and metadata.  A larger one is a bad record;
 * it bounds each image waiting for a worker (pipeline_max_n_bytes). */
size_t pipeline_encoded_max_n_bytes(size_t max_image_pixels);

/* Its inverse: the least max_image_pixels whose bound holds an encoded
 * image of n_bytes (0 where any does). */
size_t pipeline_encoded_pixels_for(size_t n_bytes);

/* Number of records in the files, every CRC verified.  -1 with a message on
 * the first bad record or unreadable file; with skip_corrupt the good
 * records alone, a bad one passed over and a broken frame ending its file
 * (as the pipeline reads them: an upper bound of its examples, whose
 * payloads are not decoded here). */
long io_count_records(const char *const *files, int n_files, int compression, int skip_corrupt, char *err,
                      size_t err_n_bytes);

/* ---- the class list beside the data ----
 * `tower convert --from imagefolder` writes labels.txt (class names, one a
 * line; label k is line k + 1) beside the shards.  Training copies it into
 * the train dir, evaluation compares it with the train dir's, so that a
 * split converted with another class list is refused, not scored against
 * shifted labels.  Both are optional: data without labels.txt (IDX, CIFAR)
 * is not checked. */

/* "DIR/labels.txt" for file DIR/NAME ("labels.txt" without a directory).
 * 0, or -1 when buf is too short. */
int io_labels_path(char *buf, size_t buf_n_bytes, const char *file);

/* Compares two labels files byte for byte (a last newline missing from one
 * is no difference).  0 when they agree or either does not exist; 1 when
 * both exist and differ, with the first differing line in err; -1 when one
 * cannot be read (err). */
int io_labels_compare(const char *want_path, const char *have_path, char *err, size_t err_n_bytes);

/* As io_labels_compare for the labels file path against the class list
 * names (n_names, in label order; names_what names it in err, e.g. "the
 * image folder DIR"). */
int io_labels_compare_names(const char *path, const char *const *names, int n_names, const char *names_what,
                            char *err, size_t err_n_bytes);

/* The labels.txt beside the data files (io_labels_path of each, every
 * distinct directory once): 0 with the first one found in found (found_n
 * bytes; "" when none exists) when all found agree (io_labels_compare);
 * 1 when two differ, with the first differing line and both files' names
 * in err; -1 when one cannot be read (err). */
int io_labels_find(char *const *files, int n_files, char *found, size_t found_n, char *err, size_t err_n_bytes);

/* At training: when data_labels exists, checks it against dir_labels (1 with
 * err when they differ, as io_labels_compare) and then writes its bytes to
 * dir_labels (.tmp, then rename).  0 (also when data_labels does not exist),
 * 1 differ, -1 error. */
int io_labels_record(const char *data_labels, const char *dir_labels, char *err, size_t err_n_bytes);

/* As io_labels_record for a class list in memory (an image folder's,
 * pipeline_classes): names, one a line, against (names_what names them in
 * err, as io_labels_compare_names) and then into dir_labels.  0, 1 differ
 * (err), -1 error. */
int io_labels_record_names(const char *const *names, int n_names, const char *names_what, const char *dir_labels,
                           char *err, size_t err_n_bytes);

/* Splits n examples into n_shards shards proportionally to sizes (the
 * configured shard sizes, summing to B): equal to sizes when n == B; for a
 * short batch floor(n * size / B) each, the remainder one by one from shard
 * 0.  Fills offset and count (n_shards each). */
void pipeline_split_shards(int n, int n_shards, const int *sizes, int *offset, int *count);

#endif
