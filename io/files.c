/* files.c — file lists and dataset probes for the input pipeline.
 *
 * Where it sits: io/, before the pipeline opens (io -> shards): the trainer
 * expands its --data flag with io_expand_globs, learns the image shape with
 * io_probe_image_shape and the epoch size with io_count_records.
 * What it does not do: no directory walking beyond glob(3), no caching.
 */
#include "io/pipeline.h"

#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/example.h"

static int has_wildcard(const char *s) { return strpbrk(s, "*?[") != NULL; }

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void io_free_files(char **files, int n_files) {
    if (!files) return;
    for (int i = 0; i < n_files; i++) free(files[i]);
    free(files);
}

int io_expand_globs(const char *pattern_list, char ***files_out, int *n_files_out, char *err, size_t err_n) {
    *files_out = NULL;
    *n_files_out = 0;
    if (!pattern_list || !*pattern_list) {
        snprintf(err, err_n, "no input files given");
        return -1;
    }
    char *list = strdup(pattern_list);
    char **files = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    if (!list) {
        snprintf(err, err_n, "out of memory");
        return -1;
    }
    char *save = NULL;
    for (char *item = strtok_r(list, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        while (*item == ' ') item++;
        size_t len = strlen(item);
        while (len && item[len - 1] == ' ') item[--len] = '\0';
        if (!len) continue;
        glob_t g;
        memset(&g, 0, sizeof g);
        int grc = glob(item, 0, NULL, &g);
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
    free(list);
    if (rc == 0 && n == 0) {
        snprintf(err, err_n, "'%s' names no files", pattern_list);
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
    *files_out = files;
    *n_files_out = (int)k;
    return 0;
}

/* An optional single int64 feature: 1 found (value set), 0 absent, -1 malformed (why set). */
static int optional_int64(const Tensorflow__Example *ex, const char *key, int64_t *value, char *why, size_t why_n) {
    if (!example_find(ex, key)) return 0;
    return example_get_int64(ex, key, value, why, why_n) == 0 ? 1 : -1;
}

int io_probe_image_shape(const char *file, const char *image_key, int compression, int *H, int *W, int *C,
                         int *is_float, char *err, size_t err_n) {
    TfrReader *r = tfr_reader_open(file, compression, 0, err, err_n);
    if (!r) return -1;
    ExampleDecoder *dec = example_decoder_new();
    const uint8_t *data = NULL;
    size_t n_bytes = 0;
    int rc = -1;
    char why[256];
    int st = tfr_reader_next(r, &data, &n_bytes, err, err_n);
    if (st == TFR_END) {
        snprintf(err, err_n, "%s: no records", file);
        goto out;
    }
    if (st != TFR_RECORD) goto out;
    const char *where_fmt = "%s: record 0 at offset 0: %s";
    const Tensorflow__Example *ex = dec ? example_decode(dec, data, n_bytes) : NULL;
    if (!ex) {
        snprintf(err, err_n, where_fmt, file, "payload is not a tf.train.Example (protobuf parse error)");
        goto out;
    }
    const Tensorflow__Feature *f = example_find(ex, image_key);
    size_t n_values;
    if (feature_kind(f) == FEATURE_BYTES) {
        const uint8_t *img;
        if (example_get_bytes(ex, image_key, &img, &n_values, why, sizeof why) != 0) {
            snprintf(err, err_n, where_fmt, file, why);
            goto out;
        }
        *is_float = 0;
    } else if (feature_kind(f) == FEATURE_FLOAT) {
        n_values = f->float_list->n_value;
        *is_float = 1;
    } else {
        if (!f) snprintf(why, sizeof why, "missing feature '%s'", image_key);
        else snprintf(why, sizeof why, "feature '%s' is %s, expected bytes_list or float_list", image_key,
                      feature_kind_name(feature_kind(f)));
        snprintf(err, err_n, where_fmt, file, why);
        goto out;
    }
    int64_t h = 0, w = 0, c = 0;
    int fh = optional_int64(ex, "height", &h, why, sizeof why);
    int fw = fh < 0 ? 0 : optional_int64(ex, "width", &w, why, sizeof why);
    int fc = fh < 0 || fw < 0 ? 0 : optional_int64(ex, "depth", &c, why, sizeof why);
    if (fh < 0 || fw < 0 || fc < 0) {
        snprintf(err, err_n, where_fmt, file, why);
        goto out;
    }
    if (fh && fw) {
        /* h and w are bounded before they are multiplied (2^32 x 2^32 wrapped to a division by 0). */
        int hw_ok = h > 0 && w > 0 && h <= 65536 && w <= 65536;
        if (!fc) c = (hw_ok && n_values % (size_t)(h * w) == 0) ? (int64_t)(n_values / (size_t)(h * w)) : 0;
        if (!hw_ok || c <= 0 || c > 65536 || (size_t)(h * w * c) != n_values) {
            snprintf(why, sizeof why, "image '%s' has %zu values but height x width x depth is %lld x %lld x %lld", image_key,
                     n_values, (long long)h, (long long)w, (long long)c);
            snprintf(err, err_n, where_fmt, file, why);
            goto out;
        }
    } else {
        size_t s = (size_t)llround(sqrt((double)n_values));
        if (n_values == 0 || s * s != n_values) {
            snprintf(why, sizeof why, "cannot infer the shape of image '%s' (%zu values): add height, width and depth features",
                     image_key, n_values);
            snprintf(err, err_n, where_fmt, file, why);
            goto out;
        }
        h = w = (int64_t)s;
        c = 1;
    }
    *H = (int)h;
    *W = (int)w;
    *C = (int)c;
    rc = 0;
out:
    example_decoder_free(dec);
    tfr_reader_close(r);
    return rc;
}

long io_count_records(const char *const *files, int n_files, int compression, char *err, size_t err_n) {
    long total = 0;
    for (int i = 0; i < n_files; i++) {
        TfrReader *r = tfr_reader_open(files[i], compression, 0, err, err_n);
        if (!r) return -1;
        const uint8_t *data;
        size_t n;
        int st;
        while ((st = tfr_reader_next(r, &data, &n, err, err_n)) == TFR_RECORD) total++;
        tfr_reader_close(r);
        if (st != TFR_END) return -1;
    }
    return total;
}
