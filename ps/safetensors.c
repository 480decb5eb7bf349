/* safetensors.c — the safetensors writer (see safetensors.h).
 *
 * Where it sits: ps/, called by `tower export` with a checkpoint's arrays.
 * The JSON header is assembled in memory (compact, as serde_json writes
 * it), then header and data stream to path.tmp, which is fsync'ed and
 * renamed, so a reader never sees half a file.
 * What it does not do: no reading, no other dtypes.
 */
#include "ps/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A growing string; on allocation failure `failed` is set and appends stop. */
typedef struct {
    char *s;
    size_t n, cap;
    int failed;
} JsonBuf;

static void jb_add(JsonBuf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n + 1) cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->failed = 1;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void jb_str(JsonBuf *b, const char *s) { jb_add(b, s, strlen(s)); }

/* A JSON string literal: quotes, backslashes and control characters escaped. */
static void jb_quoted(JsonBuf *b, const char *s) {
    jb_add(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"') jb_add(b, "\\\"", 2);
        else if (*p == '\\') jb_add(b, "\\\\", 2);
        else if (*p == '\n') jb_add(b, "\\n", 2);
        else if (*p == '\r') jb_add(b, "\\r", 2);
        else if (*p == '\t') jb_add(b, "\\t", 2);
        else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            jb_add(b, esc, 6);
        } else jb_add(b, (const char *)p, 1);
    }
    jb_add(b, "\"", 1);
}

static void jb_u64(JsonBuf *b, uint64_t v) {
    char num[32];
    int k = snprintf(num, sizeof num, "%llu", (unsigned long long)v);
    jb_add(b, num, (size_t)k);
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp((*(const SafetensorsTensor *const *)a)->name, (*(const SafetensorsTensor *const *)b)->name);
}

static int cmp_meta_key(const void *a, const void *b) {
    return strcmp((*(const SafetensorsMeta *const *)a)->key, (*(const SafetensorsMeta *const *)b)->key);
}

static uint64_t n_elements(const SafetensorsTensor *t) {
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (uint64_t)t->shape[d];
    return n;
}

/* Writes n floats little-endian. */
static int write_f32_le(FILE *f, const float *x, uint64_t n) {
    if (n == 0) return 0; /* an empty tensor may have no data pointer */
    const uint16_t probe = 1;
    if (*(const uint8_t *)&probe == 1) return fwrite(x, sizeof(float), (size_t)n, f) == (size_t)n ? 0 : -1;
    uint8_t buf[4096];
    uint64_t done = 0;
    while (done < n) {
        size_t k = n - done > 1024 ? 1024 : (size_t)(n - done);
        for (size_t i = 0; i < k; i++) {
            uint32_t u;
            memcpy(&u, x + done + i, 4);
            for (int j = 0; j < 4; j++) buf[4 * i + (size_t)j] = (uint8_t)(u >> (8 * j));
        }
        if (fwrite(buf, 4, k, f) != k) return -1;
        done += k;
    }
    return 0;
}

SafetensorsProbe safetensors_probe(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return errno == ENOENT ? SAFETENSORS_PROBE_NONE : SAFETENSORS_PROBE_ERROR;
    if (!S_ISREG(st.st_mode)) return SAFETENSORS_PROBE_OTHER; /* a directory, a FIFO (whose open would wait) */
    if (st.st_size == 0) return SAFETENSORS_PROBE_NONE;
    FILE *f = fopen(path, "rb");
    if (!f) return SAFETENSORS_PROBE_ERROR;
    /* The header's start: Tower writes "__metadata__" first, its keys sorted, so "source" lies within the first
     * few hundred bytes; 4 KiB of it are read. */
    unsigned char head[8 + 4096 + 1];
    const size_t got = fread(head, 1, sizeof head - 1, f);
    const int read_failed = ferror(f);
    fclose(f);
    if (read_failed) return SAFETENSORS_PROBE_ERROR;
    if (got < 9) return SAFETENSORS_PROBE_OTHER;
    uint64_t n = 0;
    for (int k = 7; k >= 0; k--) n = (n << 8) | head[k];
    if (!(n > 0 && n <= (uint64_t)st.st_size - 8 && head[8] == '{')) return SAFETENSORS_PROBE_OTHER;
    const size_t json_n = (size_t)(n < got - 8 ? n : got - 8);
    head[8 + json_n] = '\0';
    const char *json = (const char *)head + 8;
    if (strlen(json) != json_n) return SAFETENSORS_PROBE_FOREIGN; /* a NUL inside: not ours */
    const char *meta = strstr(json, "\"__metadata__\":{");
    const char *meta_end = meta ? strchr(meta, '}') : NULL;
    const char *source = meta ? strstr(meta, "\"source\":\"tower\"") : NULL;
    return source && meta_end && source < meta_end ? SAFETENSORS_PROBE_EXPORT : SAFETENSORS_PROBE_FOREIGN;
}

int safetensors_write(const char *path, const SafetensorsTensor *tensors, int n_tensors, const SafetensorsMeta *meta,
                      int n_meta, const volatile sig_atomic_t *stop, char *err, size_t err_n) {
    const SafetensorsTensor **order = calloc((size_t)(n_tensors > 0 ? n_tensors : 1), sizeof *order);
    const SafetensorsMeta **morder = calloc((size_t)(n_meta > 0 ? n_meta : 1), sizeof *morder);
    size_t tmp_n = strlen(path) + 5;
    char *tmp = malloc(tmp_n);
    JsonBuf jb = {0};
    FILE *f = NULL;
    int rc = -1;
    if (!order || !morder || !tmp) {
        snprintf(err, err_n, "%s: out of memory", path);
        goto out;
    }
    for (int i = 0; i < n_tensors; i++) {
        const SafetensorsTensor *t = &tensors[i];
        if (!t->name || !t->name[0] || !strcmp(t->name, "__metadata__")) {
            snprintf(err, err_n, "%s: tensor %d has an empty or reserved name", path, i);
            goto out;
        }
        if (t->ndim < 0 || t->ndim > SAFETENSORS_MAX_DIMS) {
            snprintf(err, err_n, "%s: tensor '%s' has %d dimensions (0 to %d allowed)", path, t->name, t->ndim,
                     SAFETENSORS_MAX_DIMS);
            goto out;
        }
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] < 0) {
                snprintf(err, err_n, "%s: tensor '%s' has a negative dimension %d", path, t->name, t->shape[d]);
                goto out;
            }
        if (!t->data && n_elements(t) > 0) {
            snprintf(err, err_n, "%s: tensor '%s' has no data", path, t->name);
            goto out;
        }
        order[i] = t;
    }
    for (int i = 0; i < n_meta; i++) morder[i] = &meta[i];
    qsort(order, (size_t)n_tensors, sizeof *order, cmp_tensor_name);
    qsort(morder, (size_t)n_meta, sizeof *morder, cmp_meta_key);
    for (int i = 1; i < n_tensors; i++)
        if (!strcmp(order[i - 1]->name, order[i]->name)) {
            snprintf(err, err_n, "%s: tensor name '%s' given twice", path, order[i]->name);
            goto out;
        }
    for (int i = 1; i < n_meta; i++)
        if (!strcmp(morder[i - 1]->key, morder[i]->key)) {
            snprintf(err, err_n, "%s: metadata key '%s' given twice", path, morder[i]->key);
            goto out;
        }

    jb_str(&jb, "{");
    if (n_meta > 0) {
        jb_str(&jb, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) jb_str(&jb, ",");
            jb_quoted(&jb, morder[i]->key);
            jb_str(&jb, ":");
            jb_quoted(&jb, morder[i]->value ? morder[i]->value : "");
        }
        jb_str(&jb, "}");
    }
    uint64_t offset = 0;
    for (int i = 0; i < n_tensors; i++) {
        const SafetensorsTensor *t = order[i];
        if (i || n_meta > 0) jb_str(&jb, ",");
        jb_quoted(&jb, t->name);
        jb_str(&jb, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            if (d) jb_str(&jb, ",");
            jb_u64(&jb, (uint64_t)t->shape[d]);
        }
        jb_str(&jb, "],\"data_offsets\":[");
        jb_u64(&jb, offset);
        jb_str(&jb, ",");
        offset += n_elements(t) * 4;
        jb_u64(&jb, offset);
        jb_str(&jb, "]}");
    }
    jb_str(&jb, "}");
    while (!jb.failed && jb.n % 8 != 0) jb_str(&jb, " ");
    if (jb.failed) {
        snprintf(err, err_n, "%s: out of memory for the header", path);
        goto out;
    }

    snprintf(tmp, tmp_n, "%s.tmp", path);
    /* Ours alone: created here or not at all (a second writer's file, or a link, is never written through). */
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666); /* the umask's mode, as fopen's */
    if (fd < 0 && errno == EEXIST) {
        snprintf(err, err_n, "%s exists: another export to %s is under way, or one was killed before it finished "
                 "(remove it)", tmp, path);
        goto out;
    }
    if (fd < 0 || !(f = fdopen(fd, "wb"))) {
        snprintf(err, err_n, "%s: cannot create: %s", tmp, strerror(errno));
        if (fd >= 0) {
            close(fd);
            remove(tmp);
        }
        goto out;
    }
    uint8_t len_le[8];
    for (int j = 0; j < 8; j++) len_le[j] = (uint8_t)((uint64_t)jb.n >> (8 * j));
    int bad = fwrite(len_le, 1, 8, f) != 8 || fwrite(jb.s, 1, jb.n, f) != jb.n;
    int stopped = 0;
    for (int i = 0; i < n_tensors && !bad && !stopped; i++) {
        bad = write_f32_le(f, order[i]->data, n_elements(order[i])) != 0;
        stopped = stop && *stop;
    }
    if (!bad && !stopped) bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    int close_rc = fclose(f);
    f = NULL;
    stopped |= stop && *stop; /* one during the fsync too: nothing replaced after a stop */
    if (stopped) {
        snprintf(err, err_n, "stopped: %s not written (its .tmp removed)", path);
        remove(tmp);
        goto out;
    }
    if (bad || close_rc != 0) {
        snprintf(err, err_n, "%s: write error: %s", tmp, strerror(errno));
        remove(tmp);
        goto out;
    }
    if (rename(tmp, path) != 0) {
        snprintf(err, err_n, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        remove(tmp);
        goto out;
    }
    rc = 0;
out:
    free(order);
    free(morder);
    free(tmp);
    free(jb.s);
    return rc;
}

int safetensors_tensors_from_spec(SafetensorsTensor *tensors, const ModelSpec *spec, const float *params) {
    for (int i = 0; i < spec->n_vars; i++) {
        const ModelVar *v = &spec->vars[i];
        SafetensorsTensor *t = &tensors[i];
        memset(t, 0, sizeof *t);
        t->name = v->name;
        t->ndim = v->ndim;
        const int max_dims = (int)(sizeof v->shape / sizeof v->shape[0]) < SAFETENSORS_MAX_DIMS
                                 ? (int)(sizeof v->shape / sizeof v->shape[0]) : SAFETENSORS_MAX_DIMS;
        for (int d = 0; d < v->ndim && d < max_dims; d++) t->shape[d] = v->shape[d];
        t->data = params + v->offset;
    }
    return spec->n_vars;
}
