/* convert.c — IDX and CIFAR-10 binary to sharded TFRecord (see convert.h).
 *
 * Where it sits: io/, behind `tower convert`.  Inputs are read through
 * io/gzfile.h, which inflates gzip files and passes raw files through, so
 * train-images-idx3-ubyte.gz and an uncompressed copy both work.
 * What it does not do: no image decoding (PNG/JPEG: a later image-folder
 * source), no validation split.
 */
#include "io/convert.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "io/example.h"
#include "io/gzfile.h"
#include "io/pipeline.h"
#include "io/tfrecord.h"

void convert_config_defaults(ConvertConfig *c) {
    memset(c, 0, sizeof *c);
    c->num_shards = 1;
    c->compression = IO_COMPRESSION_NONE;
    c->image_key = "image_raw";
    c->label_key = "label";
    c->height_key = "height";
    c->width_key = "width";
    c->depth_key = "depth";
}

int convert_shard_path(char *buf, size_t n, const char *prefix, int shard, int num_shards) {
    int k = snprintf(buf, n, "%s-%05d-of-%05d.tfrecord", prefix, shard, num_shards);
    return (k < 0 || (size_t)k >= n) ? -1 : 0;
}

/* After gzfile_read failed on path: "PATH: [WHERE: ]WHY" into err, WHY
 * "read error: ..." or "gzip data error: ..." (io/gzfile.h).  where (NULL:
 * none) names the read that failed, "record 3 at offset 9216" or "offset 0"
 * (offsets in the uncompressed data, as TFRecord's messages give them);
 * decompression reads ahead, so a bad check value found at the stream's end
 * surfaces at the read in flight. */
static void gz_fail(const GzFile *f, const char *path, const char *where, char *err, size_t err_n) {
    snprintf(err, err_n, "%s: %s%s%s", path, where ? where : "", where ? ": " : "", gzfile_error(f));
}

static uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* ---------------------------------------------------------------- IDX */

typedef struct {
    char *images_path, *labels_path;
    GzFile *images, *labels;
    long n, next;
    int H, W, C;
    size_t image_n_bytes, images_header_n_bytes, labels_header_n_bytes;
    uint8_t *image; /* (H, W, C) */
} IdxState;

static void idx_close(ConvertSource *s) {
    IdxState *st = s->state;
    if (st) {
        gzfile_close(st->images);
        gzfile_close(st->labels);
        free(st->images_path);
        free(st->labels_path);
        free(st->image);
        free(st);
    }
    free(s);
}

static int idx_next(ConvertSource *s, ConvertItem *item, char *err, size_t err_n) {
    IdxState *st = s->state;
    if (st->next >= st->n) {
        uint8_t extra;
        const size_t images_end = st->images_header_n_bytes + (size_t)st->n * st->image_n_bytes;
        const size_t labels_end = st->labels_header_n_bytes + (size_t)st->n;
        char where[96];
        long got = gzfile_read(st->images, &extra, 1);
        if (got != 0) {
            snprintf(where, sizeof where, "record %ld at offset %zu", st->n, images_end);
            if (got < 0) gz_fail(st->images, st->images_path, where, err, err_n);
            else snprintf(err, err_n, "%s: %s: trailing bytes after the %ld images the header announces",
                          st->images_path, where, st->n);
            return -1;
        }
        got = gzfile_read(st->labels, &extra, 1);
        if (got != 0) {
            snprintf(where, sizeof where, "record %ld at offset %zu", st->n, labels_end);
            if (got < 0) gz_fail(st->labels, st->labels_path, where, err, err_n);
            else snprintf(err, err_n, "%s: %s: trailing bytes after the %ld labels the header announces",
                          st->labels_path, where, st->n);
            return -1;
        }
        return 0;
    }
    long i = st->next;
    size_t img_off = st->images_header_n_bytes + (size_t)i * st->image_n_bytes;
    long got = gzfile_read(st->images, st->image, st->image_n_bytes);
    if (got < 0) {
        char where[96];
        snprintf(where, sizeof where, "record %ld at offset %zu", i, img_off);
        gz_fail(st->images, st->images_path, where, err, err_n);
        return -1;
    }
    if ((size_t)got < st->image_n_bytes) {
        snprintf(err, err_n, "%s: record %ld at offset %zu: truncated: end of file inside the image (%ld of %zu bytes; the header announces %ld images)",
                 st->images_path, i, img_off, got, st->image_n_bytes, st->n);
        return -1;
    }
    uint8_t label;
    got = gzfile_read(st->labels, &label, 1);
    size_t lab_off = st->labels_header_n_bytes + (size_t)i;
    if (got < 0) {
        char where[96];
        snprintf(where, sizeof where, "record %ld at offset %zu", i, lab_off);
        gz_fail(st->labels, st->labels_path, where, err, err_n);
        return -1;
    }
    if (got < 1) {
        snprintf(err, err_n, "%s: record %ld at offset %zu: truncated: end of file before the label (the header announces %ld labels)",
                 st->labels_path, i, lab_off, st->n);
        return -1;
    }
    if (s->num_classes > 0 && label >= s->num_classes) {
        snprintf(err, err_n, "%s: record %ld at offset %zu: label %d outside [0, %d) (--num_classes)", st->labels_path,
                 i, lab_off, label, s->num_classes);
        return -1;
    }
    item->image = st->image;
    item->H = st->H;
    item->W = st->W;
    item->C = st->C;
    item->label = label;
    st->next++;
    return 1;
}

/* Reads an IDX header: magic (type 0x08, ndims) and dims.  0, or -1 with err. */
static int idx_header(GzFile *f, const char *path, int want_ndims_min, int want_ndims_max, uint32_t *dims, int *ndims,
                      char *err, size_t err_n) {
    uint8_t magic[4];
    long got = gzfile_read(f, magic, 4);
    if (got < 0) {
        gz_fail(f, path, "offset 0", err, err_n);
        return -1;
    }
    if (got < 4) {
        snprintf(err, err_n, "%s: offset 0: truncated: end of file inside the IDX magic (%ld of 4 bytes)", path, got);
        return -1;
    }
    if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] < want_ndims_min || magic[3] > want_ndims_max) {
        /* The other kind of IDX file: the two flags given the other way round. */
        const int other_kind = magic[0] == 0 && magic[1] == 0 && magic[2] == 0x08 &&
                               (want_ndims_min == 1 ? magic[3] == 3 || magic[3] == 4 : magic[3] == 1);
        snprintf(err, err_n, "%s: offset 0: not an IDX %s file (magic 0x%02x%02x%02x%02x, expected 0x000008%02x)%s", path,
                 want_ndims_min == 1 ? "label" : "image", magic[0], magic[1], magic[2], magic[3], want_ndims_min,
                 !other_kind ? "" : want_ndims_min == 1 ? ": an image file; are --images and --labels swapped?"
                                                        : ": a label file; are --images and --labels swapped?");
        return -1;
    }
    *ndims = magic[3];
    uint8_t raw[4 * 4];
    got = gzfile_read(f, raw, (size_t)*ndims * 4);
    if (got < 0) {
        gz_fail(f, path, "offset 4", err, err_n);
        return -1;
    }
    if (got < *ndims * 4) {
        snprintf(err, err_n, "%s: offset 4: truncated: end of file inside the IDX dimensions (%ld of %d bytes)", path,
                 got, *ndims * 4);
        return -1;
    }
    for (int d = 0; d < *ndims; d++) dims[d] = be32(raw + 4 * d);
    return 0;
}

ConvertSource *convert_open_idx(const char *images_path, const char *labels_path, char *err, size_t err_n) {
    ConvertSource *s = calloc(1, sizeof *s);
    IdxState *st = calloc(1, sizeof *st);
    if (!s || !st) {
        free(s);
        free(st);
        snprintf(err, err_n, "convert: out of memory");
        return NULL;
    }
    s->format = "idx";
    s->next = idx_next;
    s->close = idx_close;
    s->state = st;
    st->images_path = strdup(images_path ? images_path : "");
    st->labels_path = strdup(labels_path ? labels_path : "");
    if (!st->images_path || !st->labels_path) {
        snprintf(err, err_n, "convert: out of memory");
        goto fail;
    }
    if (!(st->images = gzfile_open(images_path, err, err_n))) goto fail;
    if (!(st->labels = gzfile_open(labels_path, err, err_n))) goto fail;
    uint32_t idims[4], ldims[4];
    int in_d, ln_d;
    if (idx_header(st->images, images_path, 3, 4, idims, &in_d, err, err_n) != 0) goto fail;
    if (idx_header(st->labels, labels_path, 1, 1, ldims, &ln_d, err, err_n) != 0) goto fail;
    st->images_header_n_bytes = 4 + 4 * (size_t)in_d;
    st->labels_header_n_bytes = 8;
    st->H = (int)idims[1];
    st->W = (int)idims[2];
    const uint32_t depth = in_d == 4 ? idims[3] : 1;
    if (idims[1] == 0 || idims[2] == 0 || depth == 0) { /* an image file's header read as another's, say */
        snprintf(err, err_n, "%s: offset 4: image size %u x %u x %u has a zero dimension", images_path, idims[1],
                 idims[2], depth);
        goto fail;
    }
    if (idims[1] > 65536 || idims[2] > 65536 || depth > 4096 ||
        (uint64_t)idims[1] * idims[2] * (uint64_t)depth > CONVERT_MAX_IMAGE_N_BYTES) {
        snprintf(err, err_n, "%s: offset 4: implausible image size %u x %u x %u (at most %zu bytes per image)", images_path,
                 idims[1], idims[2], depth, CONVERT_MAX_IMAGE_N_BYTES);
        goto fail;
    }
    st->C = (int)depth;
    if (idims[0] != ldims[0]) {
        snprintf(err, err_n, "%s: offset 4: %u images but %s has %u labels", images_path, idims[0], labels_path, ldims[0]);
        goto fail;
    }
    if (idims[0] > 0x7fffffffu || idims[0] == 0) {
        if (idims[0] == 0)
            snprintf(err, err_n, "%s: offset 4: the header announces 0 images (%u x %u x %d): nothing to convert",
                     images_path, idims[1], idims[2], st->C);
        else snprintf(err, err_n, "%s: offset 4: implausible image count %u", images_path, idims[0]);
        goto fail;
    }
    st->n = (long)idims[0];
    s->n_examples = st->n;
    st->image_n_bytes = (size_t)st->H * (size_t)st->W * (size_t)st->C;
    if (!(st->image = malloc(st->image_n_bytes))) {
        snprintf(err, err_n, "convert: out of memory");
        goto fail;
    }
    return s;
fail:
    idx_close(s);
    return NULL;
}

/* ---------------------------------------------------------------- CIFAR-10 */

#define CIFAR_H 32
#define CIFAR_W 32
#define CIFAR_C 3
#define CIFAR_RECORD_N_BYTES (1 + CIFAR_H * CIFAR_W * CIFAR_C)
#define CIFAR_NUM_CLASSES 10

typedef struct {
    char **paths;
    int n_paths, cur;
    GzFile *f;
    long index;                       /* record index in the current file */
    uint8_t rec[CIFAR_RECORD_N_BYTES];
    uint8_t image[CIFAR_H * CIFAR_W * CIFAR_C]; /* (32, 32, 3) */
} CifarState;

static void cifar_close(ConvertSource *s) {
    CifarState *st = s->state;
    if (st) {
        gzfile_close(st->f);
        for (int i = 0; i < st->n_paths; i++) free(st->paths[i]);
        free(st->paths);
        free(st);
    }
    free(s);
}

static int cifar_next(ConvertSource *s, ConvertItem *item, char *err, size_t err_n) {
    CifarState *st = s->state;
    for (;;) {
        if (!st->f) {
            if (st->cur >= st->n_paths) return 0;
            const char *path = st->paths[st->cur];
            if (!(st->f = gzfile_open(path, err, err_n))) return -1;
            st->index = 0;
        }
        const char *path = st->paths[st->cur];
        size_t off = (size_t)st->index * CIFAR_RECORD_N_BYTES;
        long got = gzfile_read(st->f, st->rec, CIFAR_RECORD_N_BYTES);
        if (got < 0) {
            char where[96];
            snprintf(where, sizeof where, "record %ld at offset %zu", st->index, off);
            gz_fail(st->f, path, where, err, err_n);
            return -1;
        }
        if (got == 0) {
            gzfile_close(st->f);
            st->f = NULL;
            st->cur++;
            continue;
        }
        if (got < CIFAR_RECORD_N_BYTES) {
            snprintf(err, err_n, "%s: record %ld at offset %zu: truncated: end of file inside the record (%ld of %d bytes)",
                     path, st->index, off, got, CIFAR_RECORD_N_BYTES);
            return -1;
        }
        if (st->index == 0 && !memcmp(st->rec + 257, "ustar", 5)) { /* the tar header's magic, POSIX and GNU */
            snprintf(err, err_n, "%s: record 0 at offset 0: a tar archive (as cifar-10-binary.tar.gz is downloaded), "
                     "not a CIFAR-10 batch: extract it (tar xzf) and give its data_batch_N.bin files", path);
            return -1;
        }
        if (st->rec[0] >= CIFAR_NUM_CLASSES) {
            snprintf(err, err_n, "%s: record %ld at offset %zu: label %d outside [0, %d)", path, st->index, off, st->rec[0],
                     CIFAR_NUM_CLASSES);
            return -1;
        }
        const uint8_t *chw = st->rec + 1;
        const size_t plane = CIFAR_H * CIFAR_W;
        for (size_t i = 0; i < plane; i++)
            for (int c = 0; c < CIFAR_C; c++) st->image[i * CIFAR_C + (size_t)c] = chw[(size_t)c * plane + i];
        item->image = st->image;
        item->H = CIFAR_H;
        item->W = CIFAR_W;
        item->C = CIFAR_C;
        item->label = st->rec[0];
        st->index++;
        return 1;
    }
}

ConvertSource *convert_open_cifar10(const char *const *paths, int n_paths, char *err, size_t err_n) {
    if (n_paths < 1) {
        snprintf(err, err_n, "convert: no CIFAR-10 files given");
        return NULL;
    }
    ConvertSource *s = calloc(1, sizeof *s);
    CifarState *st = calloc(1, sizeof *st);
    if (!s || !st) {
        free(s);
        free(st);
        snprintf(err, err_n, "convert: out of memory");
        return NULL;
    }
    s->format = "cifar10";
    s->next = cifar_next;
    s->close = cifar_close;
    s->state = st;
    s->n_examples = 0;
    st->paths = calloc((size_t)n_paths, sizeof *st->paths);
    if (!st->paths) goto oom;
    st->n_paths = n_paths;
    /* One file named twice (c1.bin ./c1.bin, a link): its records written twice.  Refused at the later name, after
     * any path before it that cannot be opened. */
    size_t twice[2];
    const long n_twice = io_find_same_files(paths, (size_t)n_paths, twice, NULL);
    if (n_twice < 0) goto oom;
    for (int i = 0; i < n_paths; i++) {
        if (!(st->paths[i] = strdup(paths[i]))) goto oom;
        struct stat sb;
        if (stat(paths[i], &sb) != 0) {
            snprintf(err, err_n, "%s: cannot open: %s", paths[i], strerror(errno));
            cifar_close(s);
            return NULL;
        }
        if (n_twice > 0 && (size_t)i == twice[1]) {
            snprintf(err, err_n, "%s and %s are the same file: its examples would be converted twice", paths[twice[0]],
                     paths[i]);
            cifar_close(s);
            return NULL;
        }
        /* Known for raw files only; a gzip input makes the total unknown. */
        if (s->n_examples >= 0 && sb.st_size % CIFAR_RECORD_N_BYTES == 0) s->n_examples += (long)(sb.st_size / CIFAR_RECORD_N_BYTES);
        else s->n_examples = -1;
    }
    return s;
oom:
    snprintf(err, err_n, "convert: out of memory");
    cifar_close(s);
    return NULL;
}

/* ---------------------------------------------------------------- writer loop */

/* The directory part of prefix ("" for none, and for "/name"): malloc'd, or NULL out of memory. */
static char *prefix_dir(const char *prefix) {
    char *dir = strdup(prefix);
    char *slash = dir ? strrchr(dir, '/') : NULL;
    if (dir) *(slash && slash != dir ? slash : dir) = '\0';
    return dir;
}

static int cmp_path(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* 1 when name is BASE-DDDDD-of-DDDDD.tfrecord (a shard of any count). */
static int is_shard_name(const char *name, const char *base) {
    size_t b = strlen(base);
    if (strncmp(name, base, b) != 0) return 0;
    const char *p = name + b;
    if (*p++ != '-') return 0;
    for (int i = 0; i < 5; i++)
        if (!isdigit((unsigned char)*p++)) return 0;
    if (strncmp(p, "-of-", 4) != 0) return 0;
    p += 4;
    for (int i = 0; i < 5; i++)
        if (!isdigit((unsigned char)*p++)) return 0;
    return !strcmp(p, ".tfrecord");
}

int convert_existing_shards(const char *prefix, char ***paths, int *n_paths, char *err, size_t err_n) {
    *paths = NULL;
    *n_paths = 0;
    const char *slash = strrchr(prefix, '/');
    const char *base = slash ? slash + 1 : prefix;
    size_t dir_n = slash ? (size_t)(slash - prefix) : 0;
    char *dir = slash ? strndup(prefix, dir_n ? dir_n : 1) : strdup(".");
    if (!dir) {
        snprintf(err, err_n, "convert: out of memory");
        return -1;
    }
    DIR *d = opendir(dir);
    if (!d) {
        int e = errno;
        free(dir);
        if (e == ENOENT) return 0; /* nothing there yet */
        snprintf(err, err_n, "%s: cannot list the output directory: %s", prefix, strerror(e));
        return -1;
    }
    int rc = 0, cap = 0, read_errno = 0;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            read_errno = errno; /* a read error, not the end: a shard could be missed */
            break;
        }
        if (!is_shard_name(e->d_name, base)) continue;
        if (*n_paths == cap) {
            cap = cap ? 2 * cap : 8;
            char **q = realloc(*paths, (size_t)cap * sizeof *q);
            if (!q) {
                rc = -1;
                break;
            }
            *paths = q;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *path = malloc(len);
        if (!path) {
            rc = -1;
            break;
        }
        snprintf(path, len, "%s/%s", dir, e->d_name);
        (*paths)[(*n_paths)++] = path;
    }
    closedir(d);
    free(dir);
    if (rc || read_errno) {
        convert_free_paths(*paths, *n_paths);
        *paths = NULL;
        *n_paths = 0;
        if (read_errno) snprintf(err, err_n, "%s: cannot list the output directory: %s", prefix, strerror(read_errno));
        else snprintf(err, err_n, "convert: out of memory");
        return -1;
    }
    if (*n_paths > 1) qsort(*paths, (size_t)*n_paths, sizeof **paths, cmp_path);
    return 0;
}

void convert_free_paths(char **paths, int n_paths) {
    for (int i = 0; i < n_paths; i++) free(paths[i]);
    free(paths);
}

int convert_check_keys(const ConvertConfig *cfg, char *err, size_t err_n) {
    const char *const keys[5] = {cfg->image_key, cfg->label_key, cfg->height_key, cfg->width_key, cfg->depth_key};
    static const char *const what[5] = {"--image_key", "--label_key", "the height feature", "the width feature",
                                        "the depth feature"};
    for (int i = 0; i < 5; i++) {
        if (i >= 2 && !keys[i]) continue; /* no shape features written */
        if (!keys[i] || !keys[i][0]) {
            snprintf(err, err_n, "%s '': a feature key cannot be empty", what[i]);
            return -1;
        }
        for (int j = 0; j < i; j++) {
            if (keys[j] && !strcmp(keys[i], keys[j])) {
                snprintf(err, err_n, "%s '%s' is also the key of %s: a record would hold the key twice, and readers "
                         "keep the last (TensorFlow's and Tower's)", what[j], keys[j], what[i]);
                return -1;
            }
        }
    }
    return 0;
}

int convert_run(ConvertSource *src, const ConvertConfig *cfg, ConvertStats *stats, char *err, size_t err_n) {
    if (convert_check_keys(cfg, err, err_n) != 0) return -1;
    memset(stats, 0, sizeof *stats);
    int N = cfg->num_shards;
    if (N < 1 || N > 99999) {
        snprintf(err, err_n, "convert: num_shards %d outside [1, 99999]", N);
        return -1;
    }
    if (!cfg->out_prefix || !cfg->out_prefix[0]) {
        snprintf(err, err_n, "convert: no output prefix");
        return -1;
    }
    if (cfg->compression != IO_COMPRESSION_NONE && cfg->compression != IO_COMPRESSION_GZIP &&
        cfg->compression != IO_COMPRESSION_ZLIB) {
        snprintf(err, err_n, "convert: compression must be none, gzip or zlib");
        return -1;
    }
    /* Shards of the prefix already there: a glob PREFIX-*.tfrecord would read them beside the new ones. */
    char **old = NULL;
    int n_old = 0;
    if (convert_existing_shards(cfg->out_prefix, &old, &n_old, err, err_n) != 0) return -1;
    if (n_old > 0 && !cfg->overwrite) {
        snprintf(err, err_n, "%s: %d shard%s of this prefix exist%s already (%s%s); a glob would read them beside the new ones: "
                 "remove them or pass --overwrite",
                 cfg->out_prefix, n_old, n_old == 1 ? "" : "s", n_old == 1 ? "s" : "", old[0], n_old > 1 ? " ..." : "");
        convert_free_paths(old, n_old);
        return -1;
    }
    /* The directories of --out are made here; a conversion that fails removes the ones it made (where empty). */
    size_t made_n_bytes = 0;
    char *out_dir = prefix_dir(cfg->out_prefix);
    if (!out_dir || (out_dir[0] && file_make_dirs(out_dir, &made_n_bytes) != 0)) {
        if (out_dir) snprintf(err, err_n, "%s: cannot create directory: %s", out_dir, strerror(errno));
        else snprintf(err, err_n, "convert: out of memory");
        if (out_dir) file_remove_made_dirs(out_dir, made_n_bytes);
        free(out_dir);
        convert_free_paths(old, n_old);
        return -1;
    }
    size_t path_n = strlen(cfg->out_prefix) + 64;
    char **final_paths = calloc((size_t)N, sizeof *final_paths);
    char **tmp_paths = calloc((size_t)N, sizeof *tmp_paths);
    TfrWriter **w = calloc((size_t)N, sizeof *w);
    ExampleBuilder eb;
    example_builder_init(&eb);
    int rc = -1, dir_fd = -1; /* dir_fd: the output directory, locked while the shards are put in place */
    if (!final_paths || !tmp_paths || !w) {
        snprintf(err, err_n, "convert: out of memory");
        goto out;
    }
    for (int i = 0; i < N; i++) {
        final_paths[i] = malloc(path_n);
        tmp_paths[i] = malloc(path_n + 4);
        if (!final_paths[i] || !tmp_paths[i]) {
            snprintf(err, err_n, "convert: out of memory");
            goto out;
        }
        convert_shard_path(final_paths[i], path_n, cfg->out_prefix, i, N);
        snprintf(tmp_paths[i], path_n + 4, "%s.tmp", final_paths[i]);
        /* Created here or not at all: another convert's .tmp (or a link) is neither written through nor removed. */
        int exists;
        if (!(w[i] = tfr_writer_open_new(tmp_paths[i], cfg->compression, &exists, err, err_n))) {
            if (exists)
                snprintf(err, err_n, "%s exists: another convert to %s is under way, or one was killed before it "
                         "finished (remove its files: %s-*.tfrecord.tmp)", tmp_paths[i], cfg->out_prefix,
                         cfg->out_prefix);
            free(tmp_paths[i]);
            tmp_paths[i] = NULL; /* not ours: kept */
            goto out;
        }
    }
    for (long i = 0;; i++) {
        if (cfg->stop && *cfg->stop) {
            snprintf(err, err_n, "stopped after %ld examples", i);
            goto out;
        }
        ConvertItem item = {0}; /* a source sets what it gives: encoded stays NULL but for an encoded one */
        int st = src->next(src, &item, err, err_n);
        if (st < 0) goto out;
        if (st == 0) break;
        if (i == 0) {
            stats->H = item.H;
            stats->W = item.W;
            stats->C = item.C;
        }
        example_builder_reset(&eb);
        if (item.encoded) { /* the file as stored (the readers decode and resize it): its bytes and label */
            example_add_bytes(&eb, cfg->image_key, item.encoded, item.encoded_n_bytes);
            example_add_int64(&eb, cfg->label_key, item.label);
        } else {
            if (!cfg->height_key || !cfg->width_key || !cfg->depth_key) {
                snprintf(err, err_n, "convert: example %ld is a decoded image but no shape keys were given", i);
                goto out;
            }
            example_add_bytes(&eb, cfg->image_key, item.image, (size_t)item.H * (size_t)item.W * (size_t)item.C);
            example_add_int64(&eb, cfg->label_key, item.label);
            example_add_int64(&eb, cfg->height_key, item.H);
            example_add_int64(&eb, cfg->width_key, item.W);
            example_add_int64(&eb, cfg->depth_key, item.C);
        }
        const uint8_t *data;
        size_t n = example_builder_encode(&eb, &data);
        if (!data) {
            snprintf(err, err_n, "convert: out of memory");
            goto out;
        }
        if (tfr_writer_write(w[i % N], data, n, err, err_n) != 0) goto out;
        stats->n_examples++;
        if (item.label >= 0 && item.label < 256) stats->label_count[item.label]++;
        else stats->n_labels_over_255++;
    }
    if (stats->n_examples == 0) { /* empty shards would read as a data set of 0 examples, of no shape */
        snprintf(err, err_n, "the %s input holds no examples (%s): no shard written", src->format,
                 strcmp(src->format, "imagefolder") ? "empty" : src->n_examples > 0 ? "every image skipped"
                                                                                   : "no image files");
        goto out;
    }
    for (int i = 0; i < N; i++) {
        int c = tfr_writer_close(w[i], err, err_n);
        w[i] = NULL;
        if (c != 0) goto out;
    }
    /* The commit, under a lock on the output directory: the shards of the prefix there now (another conversion to
     * it may have put its own in place since the start; two sets would be read as one): without --overwrite any
     * refuses this one; with it, they are the old ones it replaces. */
    const char *lock_dir = out_dir[0] ? out_dir : cfg->out_prefix[0] == '/' ? "/" : ".";
    if ((dir_fd = open(lock_dir, O_RDONLY | O_DIRECTORY)) < 0 || flock(dir_fd, LOCK_EX) != 0) {
        snprintf(err, err_n, "%s: cannot lock the output directory: %s", lock_dir, strerror(errno));
        goto out;
    }
    char **now = NULL;
    int n_now = 0;
    if (convert_existing_shards(cfg->out_prefix, &now, &n_now, err, err_n) != 0) goto out;
    if (n_now > n_old && !cfg->overwrite) {
        snprintf(err, err_n, "%s: %d shard%s of this prefix appeared while converting (%s%s): another conversion to "
                 "it finished first, and this one's are not written (remove those or pass --overwrite)", cfg->out_prefix, n_now,
                 n_now == 1 ? "" : "s", now[0], n_now > 1 ? " ..." : "");
        convert_free_paths(now, n_now);
        goto out;
    }
    convert_free_paths(old, n_old);
    old = now;
    n_old = n_now;
    for (int i = 0; i < N; i++) {
        if (rename(tmp_paths[i], final_paths[i]) != 0) {
            snprintf(err, err_n, "%s: cannot rename to %s: %s", tmp_paths[i], final_paths[i], strerror(errno));
            goto out;
        }
        free(tmp_paths[i]);
        tmp_paths[i] = NULL;
    }
    /* --overwrite: the old shards the new ones did not replace go, now that the new ones are in place. */
    for (int k = 0; k < n_old; k++) {
        int replaced = 0;
        for (int i = 0; i < N && !replaced; i++) replaced = !strcmp(old[k], final_paths[i]);
        if (!replaced && remove(old[k]) != 0 && errno != ENOENT) {
            snprintf(err, err_n, "%s: cannot remove the old shard: %s", old[k], strerror(errno));
            goto out;
        }
        stats->n_old_shards_removed += !replaced;
    }
    rc = 0;
out:
    if (dir_fd >= 0) close(dir_fd); /* the lock with it */
    convert_free_paths(old, n_old);
    for (int i = 0; i < N && w; i++) tfr_writer_close(w[i], NULL, 0);
    for (int i = 0; i < N && tmp_paths; i++) {
        if (tmp_paths[i]) remove(tmp_paths[i]);
        free(tmp_paths[i]);
    }
    for (int i = 0; i < N && final_paths; i++) free(final_paths[i]);
    free(final_paths);
    free(tmp_paths);
    free(w);
    example_builder_free(&eb);
    if (rc != 0) file_remove_made_dirs(out_dir, made_n_bytes);
    free(out_dir);
    return rc;
}
