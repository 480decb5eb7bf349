/* convert.h — dataset converters: IDX (MNIST, Fashion-MNIST) and CIFAR-10 binary to TFRecord.
 *
 * Where it sits: io/, offline, before training (`tower convert`): it turns a
 * raw dataset into the sharded TFRecord files of tf.train.Example the
 * pipeline reads.  Every example gets image_raw (bytes, uint8, HWC), label
 * (int64), height, width, depth (int64), under configurable keys; an
 * encoded item (ConvertItem.encoded: the image folder's --encoded) gets its
 * file's bytes under image_raw's key and the label, no shape features.
 * A converter is a ConvertSource (an iterator of images and labels) plus one
 * writer loop, convert_run(); a new input format (e.g. an image folder) is a
 * new convert_open_* returning a ConvertSource.
 * Shards: example i goes to shard i % num_shards, named
 * PREFIX-00000-of-00004.tfrecord (TensorFlow style); files are written as
 * NAME.tmp and renamed only when complete.
 * What it does not do: no resizing, no label remapping, no shuffling (a
 * source gives its examples in its order: the image folder's is a seeded
 * permutation, ImageFolderConfig.shuffle; the pipeline shuffles).
 */
#ifndef TOWER_IO_CONVERT_H
#define TOWER_IO_CONVERT_H

#include <stddef.h>
#include <signal.h> /* sig_atomic_t */
#include <stdint.h>

typedef struct {
    const uint8_t *image; /* (H, W, C) uint8, owned by the source, valid until its next call */
    int H, W, C;
    int64_t label;
    const uint8_t *encoded; /* (encoded_n_bytes) instead of image, when not NULL: an encoded JPEG or PNG file's bytes
                               as stored (its stored size H x W, C 3), owned by the source as image */
    size_t encoded_n_bytes;
} ConvertItem;

typedef struct ConvertSource ConvertSource;
struct ConvertSource {
    const char *format;   /* "idx", "cifar10" */
    long n_examples;      /* total, or -1 when unknown until the end */
    /* Fills item with the next example: 1, 0 at the end, -1 with one line in
     * err ("<file>: record <i> at offset <o>: <what>"). */
    int (*next)(ConvertSource *s, ConvertItem *item, char *err, size_t err_n_bytes);
    int num_classes;      /* idx: > 0 (set after the open), a label outside [0, num_classes) is such an error;
                             0 (the open's default): any label byte */
    void (*close)(ConvertSource *s); /* frees the source */
    void *state;
};

/* One IDX image is at most this many bytes (its buffer is allocated from
 * the header, before any pixel is read). */
#define CONVERT_MAX_IMAGE_N_BYTES ((size_t)1 << 28)

/* IDX images (magic 0x00000803, dims n x rows x cols [x channels], uint8)
 * and labels (0x00000801, n, uint8), gzip-compressed or raw (detected).
 * Checks both headers, that one image is at most CONVERT_MAX_IMAGE_N_BYTES
 * and that the counts agree and are not 0.  NULL + message on error. */
ConvertSource *convert_open_idx(const char *images_path, const char *labels_path, char *err, size_t err_n_bytes);

/* CIFAR-10 binary files (records of 1 label byte + 3072 bytes, channel-major
 * 3 x 32 x 32), converted to HWC; labels must be < 10.  The paths are
 * copied.  NULL + message on error. */
ConvertSource *convert_open_cifar10(const char *const *paths, int n_paths, char *err, size_t err_n_bytes);

typedef struct {
    const char *out_prefix;  /* shards are OUT_PREFIX-%05d-of-%05d.tfrecord; missing directories are created */
    int num_shards;          /* >= 1 */
    int compression;         /* IO_COMPRESSION_NONE / GZIP / ZLIB */
    const char *image_key, *label_key, *height_key, *width_key, *depth_key; /* the shape keys NULL: records of
                                encoded items only (--encoded: the file carries its shape), no shape features */
    int overwrite;           /* 0: refuse when shards of out_prefix (any count) exist; 1: replace them (the old
                                ones the new ones do not overwrite are removed after the new ones are in place) */
    const volatile sig_atomic_t *stop; /* NULL, or read before each example: non-zero (a signal's handler set it)
                                          ends the run as a failure, "stopped", its .tmp files removed */
} ConvertConfig;

/* num_shards 1, no compression, keys image_raw, label, height, width, depth. */
void convert_config_defaults(ConvertConfig *cfg);

/* The feature keys of cfg (the shape keys where not NULL): none empty, no
 * two the same (a record would hold one key twice, and the readers keep its
 * last value: --label_key depth made every label the depth).  0, or -1 with
 * one line in err. */
int convert_check_keys(const ConvertConfig *cfg, char *err, size_t err_n_bytes);

typedef struct {
    long n_examples;
    long label_count[256];   /* histogram of labels 0..255 */
    long n_labels_over_255;
    int H, W, C;             /* shape of the first image */
    int n_old_shards_removed; /* overwrite: old shards of another count removed */
} ConvertStats;

/* Drains src into the shards.  Returns 0 with stats filled, or -1 with one
 * line in err (and no shard left behind: the .tmp files are removed).  Does
 * not close src.  Refuses (before reading src) when shards of the prefix
 * exist already, unless cfg->overwrite, and (after) a source that yielded
 * no example. */
int convert_run(ConvertSource *src, const ConvertConfig *cfg, ConvertStats *stats, char *err, size_t err_n_bytes);

/* The files PREFIX-DDDDD-of-DDDDD.tfrecord (any count) in PREFIX's
 * directory, sorted, as malloc'ed paths (free with convert_free_paths).
 * 0 (none when the directory does not exist), or -1 with one line in err. */
int convert_existing_shards(const char *prefix, char ***paths, int *n_paths, char *err, size_t err_n_bytes);
void convert_free_paths(char **paths, int n_paths);

/* Writes "PREFIX-%05d-of-%05d.tfrecord" into buf.  Returns 0, -1 if it does not fit. */
int convert_shard_path(char *buf, size_t buf_n_bytes, const char *prefix, int shard, int num_shards);

#endif
