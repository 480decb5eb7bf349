/* files.c — file lists and dataset probes for the input pipeline.
 *
 * Where it sits: io/, before the pipeline opens (io -> shards): the trainer
 * expands its --data flag with io_expand_globs, learns the image shape with
 * io_probe_image_shape and the epoch size with io_count_records; the class
 * list beside the data (labels.txt, from `tower convert --from imagefolder`)
 * is recorded in the train dir and compared at evaluation.
 * What it does not do: no directory walking beyond glob(3) (whose read errors
 * it reports, as glob alone does not), no caching.
 */
#include "io/pipeline.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/escape.h"
#include "io/example.h"
#include "io/imagefolder.h"

static int has_wildcard(const char *s) { return strpbrk(s, "*?[") != NULL; }

/* glob(3) ends a directory's listing at readdir's NULL without looking at
 * errno, so a read error part way through (EIO on a failing disk) would give
 * fewer files and no error.  io_expand_globs reads directories through
 * these (GLOB_ALTDIRFUNC), which keep the first error of the calling thread's
 * glob, and has glob call glob_errfunc for a directory that cannot be opened. */
typedef struct {
    DIR *d;
    char path[]; // the directory, as glob named it
} GlobDir;

static _Thread_local struct {
    int errno_value; // 0: no error in this glob
    char path[1024]; // the directory it happened in
} glob_failure;

static void glob_note_failure(const char *path, int errno_value) {
    if (glob_failure.errno_value) return;
    glob_failure.errno_value = errno_value;
    snprintf(glob_failure.path, sizeof glob_failure.path, "%s", path);
}

/* A directory that does not exist is no match (the caller says which
 * pattern matched nothing); any other error stops glob (1). */
static int glob_errfunc(const char *path, int errno_value) {
    if (errno_value == ENOENT) return 0;
    glob_note_failure(path, errno_value);
    return 1;
}

static void *glob_opendir(const char *path) {
    GlobDir *g = malloc(sizeof *g + strlen(path) + 1);
    if (!g) return NULL;
    if (!(g->d = opendir(path))) {
        const int e = errno;
        free(g);
        errno = e;
        return NULL;
    }
    strcpy(g->path, path);
    return g;
}

static struct dirent *glob_readdir(void *h) {
    GlobDir *g = h;
    errno = 0;
    struct dirent *e = readdir(g->d);
    if (!e && errno) glob_note_failure(g->path, errno);
    return e;
}

static void glob_closedir(void *h) {
    GlobDir *g = h;
    closedir(g->d);
    free(g);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* One file of a list: its device and inode (stat's), and its place in the list. */
typedef struct {
    dev_t dev;
    ino_t ino;
    size_t index;
} FileId;

static int cmp_file_id(const void *a, const void *b) {
    const FileId *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

long io_find_same_files(const char *const *paths, size_t n_paths, size_t pair[2], unsigned char *later) {
    if (later) memset(later, 0, n_paths);
    if (n_paths < 2) return 0;
    FileId *ids = malloc(n_paths * sizeof *ids);
    if (!ids) return -1;
    size_t n_ids = 0;
    for (size_t i = 0; i < n_paths; i++) {
        struct stat st;
        if (stat(paths[i], &st) != 0) continue;
        ids[n_ids++] = (FileId){st.st_dev, st.st_ino, i};
    }
    qsort(ids, n_ids, sizeof *ids, cmp_file_id);
    long n_later = 0;
    size_t first = 0, best[2] = {0, 0}; /* ids[first]: the file of ids[i] under its lowest index */
    for (size_t i = 1; i < n_ids; i++) {
        if (ids[i].dev != ids[i - 1].dev || ids[i].ino != ids[i - 1].ino) {
            first = i;
            continue;
        }
        if (later) later[ids[i].index] = 1;
        if (!n_later++ || ids[i].index < best[1]) {
            best[0] = ids[first].index;
            best[1] = ids[i].index;
        }
    }
    free(ids);
    if (pair && n_later) {
        pair[0] = best[0];
        pair[1] = best[1];
    }
    return n_later;
}

void io_free_files(char **files, int n_files) {
    if (!files) return;
    for (int i = 0; i < n_files; i++) free(files[i]);
    free(files);
}

/* A shard's name, PREFIX-DDDDD-of-NNNNN[SUFFIX]: prefix_n (the bytes of path before "-DDDDD"), n_shards (NNNNN)
 * and suffix (after it; no '-' or '/' in it).  1 when path is one, else 0. */
static int shard_name(const char *path, size_t *prefix_n, long *n_shards, const char **suffix) {
    const char *of = NULL;
    for (const char *p = strstr(path, "-of-"); p; p = strstr(p + 1, "-of-")) of = p; /* the last */
    if (!of) return 0;
    const char *q = of + 4, *d = of;
    size_t n_digits = 0;
    while (isdigit((unsigned char)q[n_digits])) n_digits++;
    if (n_digits == 0 || n_digits > 9 || strchr(q + n_digits, '-') || strchr(q + n_digits, '/')) return 0;
    while (d > path && isdigit((unsigned char)d[-1])) d--;
    if (d == of || d == path || d[-1] != '-' || strchr(d, '/')) return 0;
    *prefix_n = (size_t)(d - 1 - path);
    *n_shards = strtol(q, NULL, 10);
    *suffix = q + n_digits;
    return 1;
}

typedef struct {
    const char *path;
    size_t prefix_n;
    long n_shards;
    const char *suffix;
} ShardName;

static int cmp_shard_name(const void *a, const void *b) {
    const ShardName *x = a, *y = b;
    const size_t n = x->prefix_n < y->prefix_n ? x->prefix_n : y->prefix_n;
    int c = memcmp(x->path, y->path, n);
    if (c) return c;
    if (x->prefix_n != y->prefix_n) return x->prefix_n < y->prefix_n ? -1 : 1;
    c = strcmp(x->suffix, y->suffix);
    if (c) return c;
    return x->n_shards < y->n_shards ? -1 : x->n_shards > y->n_shards;
}

/* The first PREFIX-*-of-*SUFFIX.tmp of shard s's prefix into found (found_n bytes): 1, or 0 when there is none. */
static int shard_tmp_beside(const ShardName *s, char *found, size_t found_n) {
    char pattern[PIPELINE_MSG_N_BYTES];
    size_t o = 0;
    for (size_t i = 0; i < s->prefix_n && o + 3 < sizeof pattern; i++) { /* glob's own characters escaped */
        if (strchr("*?[\\", s->path[i])) pattern[o++] = '\\';
        pattern[o++] = s->path[i];
    }
    pattern[o] = '\0';
    char suffix[512];
    size_t k = 0;
    for (const char *c = s->suffix; *c && k + 3 < sizeof suffix; c++) {
        if (strchr("*?[\\", *c)) suffix[k++] = '\\';
        suffix[k++] = *c;
    }
    suffix[k] = '\0';
    if (snprintf(pattern + o, sizeof pattern - o, "-*-of-*%s.tmp", suffix) >= (int)(sizeof pattern - o)) return 0;
    glob_t g;
    memset(&g, 0, sizeof g);
    const int rc = glob(pattern, 0, NULL, &g);
    const int any = rc == 0 && g.gl_pathc > 0;
    if (any) snprintf(found, found_n, "%s", g.gl_pathv[0]);
    globfree(&g);
    return any;
}

int io_check_shard_sets(char *const *files, int n_files, char *err, size_t err_n) {
    ShardName *s = malloc((size_t)(n_files > 0 ? n_files : 1) * sizeof *s);
    if (!s) {
        snprintf(err, err_n, "out of memory");
        return -1;
    }
    int n = 0, rc = 0;
    for (int i = 0; i < n_files; i++) {
        ShardName x = {.path = files[i]};
        if (shard_name(files[i], &x.prefix_n, &x.n_shards, &x.suffix)) s[n++] = x;
    }
    qsort(s, (size_t)n, sizeof *s, cmp_shard_name);
    for (int i = 0; i < n && rc == 0; i++) {
        const int first_of_prefix = i == 0 || s[i].prefix_n != s[i - 1].prefix_n ||
                                    memcmp(s[i].path, s[i - 1].path, s[i].prefix_n) != 0 ||
                                    strcmp(s[i].suffix, s[i - 1].suffix) != 0;
        char a[ESCAPE_PATH_N_BYTES], b[ESCAPE_PATH_N_BYTES], tmp[PIPELINE_MSG_N_BYTES];
        if (!first_of_prefix && s[i].n_shards != s[i - 1].n_shards) {
            snprintf(err, err_n, "%s and %s: shards of one prefix from two conversions (of %ld and of %ld shards), "
                     "read together: an interrupted tower convert --overwrite, or two at once? Convert again with "
                     "--overwrite, or remove one set", escape_str(a, sizeof a, s[i - 1].path),
                     escape_str(b, sizeof b, s[i].path), s[i - 1].n_shards, s[i].n_shards);
            rc = -1;
        } else if (first_of_prefix && shard_tmp_beside(&s[i], tmp, sizeof tmp)) {
            snprintf(err, err_n, "%s: a conversion to its prefix is under way, or was killed while it put its shards "
                     "in place (%s is there): the shards may mix two conversions; wait for it, or remove the .tmp "
                     "files and convert again with --overwrite", escape_str(a, sizeof a, s[i].path),
                     escape_str(b, sizeof b, tmp));
            rc = -1;
        }
    }
    free(s);
    return rc;
}

int io_check_regular_files(char *const *files, int n_files, char *err, size_t err_n) {
    for (int i = 0; i < n_files; i++) {
        struct stat st;
        const int stat_rc = stat(files[i], &st);
        if (stat_rc == 0 && S_ISREG(st.st_mode)) continue;
        const char *kind = stat_rc != 0 ? strerror(errno)
                           : S_ISFIFO(st.st_mode) ? "a pipe or FIFO"
                           : S_ISSOCK(st.st_mode) ? "a socket"
                           : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : "not a plain file";
        char name[ESCAPE_PATH_N_BYTES];
        snprintf(err, err_n, "%s: not a regular file (%s): the input is read more than once (its first record for "
                 "the image shape, then all of it; in training each epoch again), which a stream cannot give; write it to a "
                 "file first", escape_str(name, sizeof name, files[i]), kind);
        return -1;
    }
    return 0;
}

/* The files of items (n_items globs or paths, each taken whole), as io_expand_globs gives them; what names the
 * items in the message when they name no file (NULL: counted). */
static int expand_items(const char *const *items, size_t n_items, const char *what, char ***files_out,
                        int *n_files_out, char *err, size_t err_n) {
    char **files = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (size_t it = 0; it < n_items; it++) {
        const char *item = items[it];
        glob_t g;
        memset(&g, 0, sizeof g);
        g.gl_opendir = glob_opendir;
        g.gl_readdir = glob_readdir;
        g.gl_closedir = glob_closedir;
        g.gl_stat = stat;
        g.gl_lstat = lstat;
        glob_failure.errno_value = 0;
        int grc = glob(item, GLOB_ALTDIRFUNC, glob_errfunc, &g);
        if (glob_failure.errno_value) {
            char safe_item[ESCAPE_PATH_N_BYTES], safe_dir[ESCAPE_PATH_N_BYTES];
            snprintf(err, err_n, "pattern '%s': cannot read the directory %s: %s",
                     escape_str(safe_item, sizeof safe_item, item),
                     escape_str(safe_dir, sizeof safe_dir, glob_failure.path), strerror(glob_failure.errno_value));
            globfree(&g);
            rc = -1;
            break;
        }
        if (grc == GLOB_NOMATCH || (grc == 0 && g.gl_pathc == 0)) {
            if (has_wildcard(item)) snprintf(err, err_n, "pattern '%s' matches no files", item);
            else snprintf(err, err_n, "%s: no such file", item);
            globfree(&g);
            rc = -1;
            break;
        }
        if (grc != 0) {
            snprintf(err, err_n, "pattern '%s': glob failed", item);
            globfree(&g);
            rc = -1;
            break;
        }
        for (size_t i = 0; i < g.gl_pathc && rc == 0; i++) {
            struct stat st;
            if (stat(g.gl_pathv[i], &st) != 0) {
                snprintf(err, err_n, "%s: no such file", g.gl_pathv[i]);
                rc = -1;
                break;
            }
            if (S_ISDIR(st.st_mode)) continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                char **nf = realloc(files, cap * sizeof *nf);
                if (!nf) {
                    snprintf(err, err_n, "out of memory");
                    rc = -1;
                    break;
                }
                files = nf;
            }
            if (!(files[n] = strdup(g.gl_pathv[i]))) {
                snprintf(err, err_n, "out of memory");
                rc = -1;
                break;
            }
            n++;
        }
        globfree(&g);
        if (rc) break;
    }
    if (rc == 0 && n == 0) {
        if (what) snprintf(err, err_n, "'%s' names no files", what);
        else snprintf(err, err_n, "the %zu patterns given name no files", n_items);
        rc = -1;
    }
    if (rc != 0) {
        io_free_files(files, (int)n);
        return -1;
    }
    qsort(files, n, sizeof *files, cmp_str);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k && !strcmp(files[k - 1], files[i])) free(files[i]);
        else files[k++] = files[i];
    }
    /* The same file under two spellings would be read twice: the first in sorted order kept. */
    unsigned char *later = malloc(k);
    if (!later || io_find_same_files((const char *const *)files, k, NULL, later) < 0) {
        snprintf(err, err_n, "out of memory");
        free(later);
        io_free_files(files, (int)k);
        return -1;
    }
    size_t n_kept = 0;
    for (size_t i = 0; i < k; i++) {
        if (later[i]) free(files[i]);
        else files[n_kept++] = files[i];
    }
    free(later);
    *files_out = files;
    *n_files_out = (int)n_kept;
    return 0;
}

int io_expand_globs(const char *pattern_list, char ***files_out, int *n_files_out, char *err, size_t err_n) {
    *files_out = NULL;
    *n_files_out = 0;
    if (!pattern_list || !*pattern_list) {
        snprintf(err, err_n, "no input files given");
        return -1;
    }
    char *list = strdup(pattern_list);
    const char **items = calloc(strlen(pattern_list) / 2 + 1, sizeof *items); /* at most one item a 2 bytes */
    if (!list || !items) {
        free(list);
        free(items);
        snprintf(err, err_n, "out of memory");
        return -1;
    }
    size_t n_items = 0;
    char *save = NULL;
    for (char *item = strtok_r(list, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        while (*item == ' ') item++;
        size_t len = strlen(item);
        while (len && item[len - 1] == ' ') item[--len] = '\0';
        if (len) items[n_items++] = item;
    }
    const int rc = expand_items(items, n_items, pattern_list, files_out, n_files_out, err, err_n);
    free(items);
    free(list);
    return rc;
}

int io_expand_patterns(const char *const *patterns, int n_patterns, char ***files_out, int *n_files_out, char *err,
                       size_t err_n) {
    *files_out = NULL;
    *n_files_out = 0;
    if (n_patterns < 1) {
        snprintf(err, err_n, "no input files given");
        return -1;
    }
    return expand_items(patterns, (size_t)n_patterns, n_patterns == 1 ? patterns[0] : NULL, files_out, n_files_out,
                        err, err_n);
}

/* An optional single int64 feature: 1 found (value set), 0 absent, -1 malformed (why set). */
static int optional_int64(const Tensorflow__Example *ex, const char *key, int64_t *value, char *why, size_t why_n) {
    if (!example_find(ex, key)) return 0;
    return example_get_int64(ex, key, value, why, why_n) == 0 ? 1 : -1;
}

/* The shape of raw pixels (n_values of them, floats or bytes) from the record's height/width/depth features, or
 * for a square single-channel image from its size: 0, or -1 with why. */
static int raw_shape(const Tensorflow__Example *ex, const char *image_key, size_t n_values, int is_float, int *H, int *W,
                     int *C, char *why, size_t why_n) {
    int64_t h = 0, w = 0, c = 0;
    int fh = optional_int64(ex, "height", &h, why, why_n);
    int fw = fh < 0 ? 0 : optional_int64(ex, "width", &w, why, why_n);
    int fc = fh < 0 || fw < 0 ? 0 : optional_int64(ex, "depth", &c, why, why_n);
    if (fh < 0 || fw < 0 || fc < 0) return -1;
    if (fh != fw) {
        snprintf(why, why_n, "feature '%s' without '%s': give both (and 'depth'), or neither for a square "
                 "single-channel image", fh ? "height" : "width", fh ? "width" : "height");
        return -1;
    }
    if (fh && fw) {
        if (!fc) { /* no depth feature: the channels are what the pixels leave (h and w bounded before their product) */
            const int hw_ok = h >= 1 && w >= 1 && h <= 65536 && w <= 65536;
            c = hw_ok && n_values >= (size_t)(h * w) && n_values % (size_t)(h * w) == 0 ? (int64_t)(n_values / (size_t)(h * w)) : 1;
        }
        if (example_check_image_shape(image_key, n_values, is_float ? "floats" : "bytes", h, w, c, why, why_n) != 0)
            return -1;
    } else {
        size_t s = (size_t)llround(sqrt((double)n_values));
        if (n_values == 0 || s * s != n_values) {
            snprintf(why, why_n, "cannot infer the shape of image '%s' (%zu %s, not a square): add height, width and "
                     "depth features%s", image_key, n_values, is_float ? "floats" : "bytes",
                     is_float ? "" : " (an encoded image would start as a JPEG or PNG does)");
            return -1;
        }
        h = w = (int64_t)s;
        c = 1;
    }
    *H = (int)h;
    *W = (int)w;
    *C = (int)c;
    return 0;
}

/* The image kind and shape of one decoded record (ex, NULL when its payload did not parse): 0, or -1 with why.
 * An encoded image (0 x 0 x 0) is one whose bytes start as a JPEG or PNG, unless height and width features
 * describe raw pixels of its size, or it is a square that does not end as a JPEG (raw pixels may begin with
 * the same bytes: a first pixel of 255, 216, 255). */
static int probe_example(const Tensorflow__Example *ex, const char *image_key, int *H, int *W, int *C, int *image_kind,
                         char *why, size_t why_n) {
    if (!ex) {
        snprintf(why, why_n, "payload is not a tf.train.Example (protobuf parse error)");
        return -1;
    }
    const Tensorflow__Feature *f = example_find(ex, image_key);
    size_t n_values;
    const uint8_t *img = NULL;
    if (feature_kind(f) == FEATURE_BYTES) {
        if (example_get_bytes(ex, image_key, &img, &n_values, why, why_n) != 0) return -1;
        *image_kind = IO_IMAGE_UINT8;
    } else if (feature_kind(f) == FEATURE_FLOAT) {
        n_values = f->float_list->n_value;
        *image_kind = IO_IMAGE_FLOAT;
    } else {
        if (f) {
            snprintf(why, why_n, "feature '%s' is %s, expected bytes_list or float_list", image_key,
                     feature_kind_name(feature_kind(f)));
            return -1;
        }
        /* Another key holding an encoded image (TF-slim's and tf_cnn_benchmarks' image/encoded): said, with the
         * way in, where the missing key alone would leave the user guessing. */
        for (size_t i = 0; i < example_n_features(ex); i++) {
            const Tensorflow__Feature *g = example_feature_at(ex, i);
            if (feature_kind(g) != FEATURE_BYTES || g->bytes_list->n_value != 1) continue;
            const ProtobufCBinaryData *b = &g->bytes_list->value[0];
            const char *kind = imagefolder_encoded_kind(b->data, b->len);
            if (!kind) continue;
            size_t key_n;
            const char *key = example_feature_key(ex, i, &key_n);
            char safe_key[4 * 64 + 1]; /* a longer key cut, marked "..." */
            escape_bytes(safe_key, sizeof safe_key, key, key_n);
            snprintf(why, why_n, "missing feature '%s'; feature '%s' is an encoded %s file (%zu bytes): give "
                     "--image_key %s (with its --label_key, e.g. image/class/label, and --image_size: encoded "
                     "images are decoded and resized in the pipeline)", image_key, safe_key, kind, (size_t)b->len,
                     safe_key);
            return -1;
        }
        snprintf(why, why_n, "missing feature '%s'", image_key);
        return -1;
    }
    const char *encoded = img ? imagefolder_encoded_kind(img, n_values) : NULL;
    if (encoded) {
        /* Raw pixels where height and width features say so, or where a square single-channel image's first
         * pixels happen to be 255, 216, 255 and it does not end as a JPEG does (FF D9). */
        char ignored[300];
        const int described = example_find(ex, "height") && example_find(ex, "width");
        const size_t s = (size_t)llround(sqrt((double)n_values));
        const int ends_as_jpeg = n_values >= 2 && img[n_values - 2] == 0xff && img[n_values - 1] == 0xd9;
        const int raw_like = described || (s * s == n_values && encoded[0] == 'J' && !ends_as_jpeg);
        if (raw_like && raw_shape(ex, image_key, n_values, 0, H, W, C, ignored, sizeof ignored) == 0) return 0;
        *image_kind = IO_IMAGE_ENCODED;
        *H = *W = *C = 0;
        return 0;
    }
    return raw_shape(ex, image_key, n_values, *image_kind == IO_IMAGE_FLOAT, H, W, C, why, why_n);
}

int io_probe_image_shape(char *const *files, int n_files, const char *image_key, int compression, int skip_corrupt,
                         int *H, int *W, int *C, int *image_kind, int *file_index, char *err, size_t err_n) {
    ExampleDecoder *dec = example_decoder_new();
    if (!dec) {
        snprintf(err, err_n, "out of memory");
        return -1;
    }
    char first_bad[PIPELINE_ERR_N_BYTES] = "", why[800], e[PIPELINE_MSG_N_BYTES];
    int rc = -1, stop = 0;
    for (int i = 0; i < n_files && rc != 0 && !stop; i++) {
        TfrReader *r = tfr_reader_open(files[i], compression, 0, e, sizeof e);
        if (!r) { /* unreadable: as a bad stream */
            if (!first_bad[0]) snprintf(first_bad, sizeof first_bad, "%s", e);
            stop = !skip_corrupt;
            continue;
        }
        for (;;) {
            const uint8_t *data = NULL;
            size_t n_bytes = 0;
            const int st = tfr_reader_next(r, &data, &n_bytes, e, sizeof e);
            if (st == TFR_END) break;
            if (st == TFR_RECORD) {
                if (probe_example(example_decode(dec, data, n_bytes), image_key, H, W, C, image_kind, why, sizeof why) == 0) {
                    if (file_index) *file_index = i;
                    rc = 0;
                    break;
                }
                snprintf(e, sizeof e, "%s: record %ld at offset %llu: %s", files[i], tfr_reader_record_index(r),
                         (unsigned long long)tfr_reader_record_offset(r), why);
            }
            if (!first_bad[0]) {
                /* A file's first record that does not frame under a --compression given: said beside it (a gzip
                 * file read as none is a "length CRC mismatch"; a plain one read as gzip "incorrect header check"). */
                const int forced = st != TFR_RECORD && tfr_reader_record_index(r) == 0 && compression != IO_COMPRESSION_AUTO;
                snprintf(first_bad, sizeof first_bad, "%s%s%s%s", e, forced ? " (read as --compression " : "",
                         forced ? io_compression_name(compression) : "",
                         forced ? "; --compression auto tells none, gzip and zlib apart by their first bytes)" : "");
            }
            if (!skip_corrupt) {
                stop = 1;
                break;
            }
            if (st == TFR_BAD_STREAM) break; /* the rest of this file cannot be read */
        }
        tfr_reader_close(r);
    }
    example_decoder_free(dec);
    if (rc == 0) return 0;
    if (first_bad[0] && !skip_corrupt) snprintf(err, err_n, "%s", first_bad);
    else if (first_bad[0])
        snprintf(err, err_n, "no good record in the %d file%s of --data (--skip_corrupt); the first bad one: %s", n_files,
                 n_files == 1 ? "" : "s", first_bad);
    else if (n_files == 1) snprintf(err, err_n, "%s: no records", files[0]);
    else snprintf(err, err_n, "none of the %d files of --data holds a record", n_files);
    return -1;
}

long io_count_records(const char *const *files, int n_files, int compression, int skip_corrupt, char *err,
                      size_t err_n) {
    long total = 0;
    for (int i = 0; i < n_files; i++) {
        TfrReader *r = tfr_reader_open(files[i], compression, 0, err, err_n);
        if (!r) return -1;
        const uint8_t *data;
        size_t n;
        int st;
        while ((st = tfr_reader_next(r, &data, &n, err, err_n)) == TFR_RECORD || (skip_corrupt && st == TFR_BAD_RECORD))
            total += st == TFR_RECORD;
        tfr_reader_close(r);
        if (st != TFR_END && !(skip_corrupt && st == TFR_BAD_STREAM)) return -1;
    }
    return total;
}

/* ---- labels.txt beside the data (imagefolder's class list) ---- */

int io_labels_path(char *buf, size_t n, const char *file) {
    const char *slash = strrchr(file, '/');
    int k = slash ? snprintf(buf, n, "%.*s/labels.txt", (int)(slash - file), file) : snprintf(buf, n, "labels.txt");
    return (k < 0 || (size_t)k >= n) ? -1 : 0;
}

/* Writes to err the first line where the class lists want (want_n bytes,
 * named want_name) and have (have_n, have_name) differ, each one name a
 * line: "line 2 is 'b' in HAVE_NAME but 'c' in WANT_NAME" (a side that
 * ends before that line shows ''), escaped.  Returns 1 when they differ,
 * else 0: a last newline missing on one side is no difference. */
static int labels_text_differ(const char *want, size_t want_n, const char *want_name, const char *have, size_t have_n,
                              const char *have_name, char *err, size_t err_n) {
    if (want_n && want[want_n - 1] == '\n') want_n--;
    if (have_n && have[have_n - 1] == '\n') have_n--;
    if (want_n == have_n && !memcmp(want, have, want_n)) return 0;
    const char *p = want, *q = have, *p_end = want + want_n, *q_end = have + have_n;
    for (int line = 1;; line++) {
        const char *pe = memchr(p, '\n', (size_t)(p_end - p)), *qe = memchr(q, '\n', (size_t)(q_end - q));
        size_t pl = pe ? (size_t)(pe - p) : (size_t)(p_end - p), ql = qe ? (size_t)(qe - q) : (size_t)(q_end - q);
        char safe_p[420], safe_q[420];
        if (pl != ql || memcmp(p, q, pl) != 0) {
            snprintf(err, err_n, "line %d is '%s' in %s but '%s' in %s", line,
                     escape_bytes(safe_q, sizeof safe_q, q, ql), have_name,
                     escape_bytes(safe_p, sizeof safe_p, p, pl), want_name);
            break;
        }
        if (!pe || !qe) { /* the same lines so far, and one list ends here: the other's next line is the difference */
            const char *more = pe ? pe + 1 : qe + 1, *more_end = pe ? p_end : q_end;
            const char *me = memchr(more, '\n', (size_t)(more_end - more));
            size_t ml = me ? (size_t)(me - more) : (size_t)(more_end - more);
            snprintf(err, err_n, "line %d is '%s' in %s but %s ends after line %d", line + 1,
                     escape_bytes(safe_p, sizeof safe_p, more, ml), pe ? want_name : have_name,
                     pe ? have_name : want_name, line);
            break;
        }
        p = pe + 1;
        q = qe + 1;
    }
    escape_in_place(err, err_n);
    return 1;
}

int io_labels_compare(const char *want_path, const char *have_path, char *err, size_t err_n) {
    char *want, *have;
    size_t want_n, have_n;
    int a = imagefolder_read_labels_text(want_path, &want, &want_n, err, err_n);
    if (a <= 0) return a;
    int b = imagefolder_read_labels_text(have_path, &have, &have_n, err, err_n);
    if (b <= 0) {
        free(want);
        return b;
    }
    int rc = labels_text_differ(want, want_n, want_path, have, have_n, have_path, err, err_n);
    free(want);
    free(have);
    return rc;
}

/* The class list names as a labels file's text, one name a line (malloc'd, *n_bytes long, NUL after); NULL when
 * out of memory. */
static char *names_text(const char *const *names, int n_names, size_t *n_bytes) {
    size_t list_n = 1;
    for (int k = 0; k < n_names; k++) list_n += strlen(names[k]) + 1;
    char *list = malloc(list_n);
    if (!list) return NULL;
    size_t o = 0;
    for (int k = 0; k < n_names; k++) {
        size_t len = strlen(names[k]);
        memcpy(list + o, names[k], len);
        list[o + len] = '\n';
        o += len + 1;
    }
    list[o] = '\0';
    *n_bytes = o;
    return list;
}

/* Writes text (n bytes) to path through path.tmp and a rename, so that a reader sees the old file or the whole
 * new one.  0, or -1 with err. */
static int write_labels_text(const char *path, const char *text, size_t n, char *err, size_t err_n) {
    size_t tmp_n = strlen(path) + 5;
    char *tmp = malloc(tmp_n);
    FILE *f = NULL;
    if (tmp) {
        snprintf(tmp, tmp_n, "%s.tmp", path);
        f = fopen(tmp, "wb");
    }
    int bad = !f || fwrite(text, 1, n, f) != n;
    if (f && fclose(f) != 0) bad = 1;
    int rc = 0;
    if (bad || rename(tmp, path) != 0) {
        snprintf(err, err_n, "%s: cannot write: %s", path, tmp ? strerror(errno) : "out of memory");
        if (tmp) remove(tmp);
        rc = -1;
    }
    free(tmp);
    return rc;
}

int io_labels_compare_names(const char *path, const char *const *names, int n_names, const char *names_what,
                            char *err, size_t err_n) {
    char *text;
    size_t text_n;
    int got = imagefolder_read_labels_text(path, &text, &text_n, err, err_n);
    if (got <= 0) return got;
    size_t list_n;
    char *list = names_text(names, n_names, &list_n);
    if (!list) {
        free(text);
        snprintf(err, err_n, "%s: out of memory", path);
        return -1;
    }
    int rc = labels_text_differ(text, text_n, path, list, list_n, names_what, err, err_n);
    free(list);
    free(text);
    return rc;
}

int io_labels_find(char *const *files, int n_files, char *found, size_t found_n, char *err, size_t err_n) {
    found[0] = '\0';
    char *first = NULL, path[4096];
    size_t first_n = 0;
    char **seen = NULL; /* the labels paths looked at, one a directory */
    int n_seen = 0, cap_seen = 0, rc = 0;
    for (int i = 0; i < n_files && rc == 0; i++) {
        if (io_labels_path(path, sizeof path, files[i]) != 0) {
            char safe[512];
            snprintf(err, err_n, "%s: path too long", escape_str(safe, sizeof safe, files[i]));
            rc = -1;
            break;
        }
        int k = n_seen - 1; /* the list is sorted: a directory's files mostly come together */
        while (k >= 0 && strcmp(seen[k], path)) k--;
        if (k >= 0) continue;
        if (n_seen == cap_seen) {
            cap_seen = cap_seen ? 2 * cap_seen : 8;
            char **q = realloc(seen, (size_t)cap_seen * sizeof *q);
            if (!q) {
                snprintf(err, err_n, "out of memory");
                rc = -1;
                break;
            }
            seen = q;
        }
        if (!(seen[n_seen] = strdup(path))) {
            snprintf(err, err_n, "out of memory");
            rc = -1;
            break;
        }
        n_seen++;
        char *text;
        size_t n;
        int got = imagefolder_read_labels_text(path, &text, &n, err, err_n);
        if (got < 0) rc = -1;
        if (got <= 0) continue;
        if (!first) {
            first = text;
            first_n = n;
            snprintf(found, found_n, "%s", path);
            continue;
        }
        rc = labels_text_differ(first, first_n, found, text, n, path, err, err_n);
        free(text);
    }
    free(first);
    for (int k = 0; k < n_seen; k++) free(seen[k]);
    free(seen);
    if (rc != 0) found[0] = '\0';
    return rc;
}

int io_labels_record(const char *data_labels, const char *dir_labels, char *err, size_t err_n) {
    int rc = io_labels_compare(dir_labels, data_labels, err, err_n);
    if (rc != 0) return rc;
    char *text;
    size_t n;
    rc = imagefolder_read_labels_text(data_labels, &text, &n, err, err_n);
    if (rc <= 0) return rc;
    rc = write_labels_text(dir_labels, text, n, err, err_n);
    free(text);
    return rc;
}

int io_labels_record_names(const char *const *names, int n_names, const char *names_what, const char *dir_labels,
                           char *err, size_t err_n) {
    int differ = io_labels_compare_names(dir_labels, names, n_names, names_what, err, err_n);
    if (differ != 0) return differ;
    size_t n;
    char *text = names_text(names, n_names, &n);
    if (!text) {
        snprintf(err, err_n, "%s: out of memory", dir_labels);
        return -1;
    }
    int rc = write_labels_text(dir_labels, text, n, err, err_n);
    free(text);
    return rc;
}
