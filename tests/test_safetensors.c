/* test_safetensors.c — the safetensors writer, read back by the test's own parser.
 *
 * What it proves: ps/safetensors.h writes the format byte for byte: an
 * 8-byte little-endian header length, a JSON header (parsed here by a small
 * JSON reader of the test's own, not by the writer's code) with
 * "__metadata__" first and the tensors in name order, each entry's dtype,
 * shape and data_offsets, offsets contiguous from 0 to the end of the file,
 * the header padded with spaces to a multiple of 8, and the data equal to
 * the input bit for bit.  Bad input is refused with one line and no file.
 *
 * Modes:
 *   test_safetensors                          unit tests of the writer
 *   test_safetensors check FILE CKPT_DIR ema|raw
 *       FILE (from `tower export`) holds CKPT_DIR's latest checkpoint: its
 *       moving averages (ema) or raw variables, every variable by name and
 *       TensorFlow shape, and the metadata.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model.h"
#include "ps/checkpoint.h"
#include "ps/safetensors.h"

#include "tests/check.h"

/* ---------------------------------------------------------------- a small JSON reader */

typedef enum { J_NULL, J_STR, J_NUM, J_ARR, J_OBJ } JKind;
typedef struct JVal JVal;
struct JVal {
    JKind kind;
    char *str;          /* J_STR */
    double num;         /* J_NUM (integers here are < 2^53) */
    int n;              /* J_ARR, J_OBJ: entries */
    JVal *items;        /* (n) */
    char **keys;        /* J_OBJ: (n), in file order */
};

typedef struct {
    const char *p, *end;
    int bad;
} JIn;

static void jws(JIn *in) {
    while (in->p < in->end && (*in->p == ' ' || *in->p == '\n' || *in->p == '\t' || *in->p == '\r')) in->p++;
}

static char *jstring(JIn *in) {
    if (in->p >= in->end || *in->p != '"') {
        in->bad = 1;
        return NULL;
    }
    in->p++;
    char *out = malloc((size_t)(in->end - in->p) + 1);
    size_t k = 0;
    while (in->p < in->end && *in->p != '"') {
        char c = *in->p++;
        if (c == '\\') {
            if (in->p >= in->end) break;
            char e = *in->p++;
            if (e == 'n') c = '\n';
            else if (e == 't') c = '\t';
            else if (e == 'r') c = '\r';
            else if (e == 'u') {
                unsigned v = 0;
                if (in->end - in->p < 4 || sscanf(in->p, "%4x", &v) != 1 || v > 0x7f) in->bad = 1;
                in->p += 4;
                c = (char)v;
            } else c = e;
        }
        out[k++] = c;
    }
    if (in->p >= in->end) in->bad = 1;
    else in->p++;
    out[k] = '\0';
    return out;
}

static void jvalue(JIn *in, JVal *v) {
    memset(v, 0, sizeof *v);
    jws(in);
    if (in->p >= in->end) {
        in->bad = 1;
        return;
    }
    if (*in->p == '"') {
        v->kind = J_STR;
        v->str = jstring(in);
    } else if (*in->p == '{' || *in->p == '[') {
        int obj = *in->p == '{';
        v->kind = obj ? J_OBJ : J_ARR;
        in->p++;
        jws(in);
        if (in->p < in->end && *in->p == (obj ? '}' : ']')) {
            in->p++;
            return;
        }
        for (;;) {
            v->items = realloc(v->items, (size_t)(v->n + 1) * sizeof *v->items);
            if (obj) {
                v->keys = realloc(v->keys, (size_t)(v->n + 1) * sizeof *v->keys);
                jws(in);
                v->keys[v->n] = jstring(in);
                jws(in);
                if (in->p >= in->end || *in->p != ':') {
                    in->bad = 1;
                    v->n++;
                    jvalue(in, &v->items[v->n - 1]);
                    return;
                }
                in->p++;
            }
            jvalue(in, &v->items[v->n++]);
            jws(in);
            if (in->bad || in->p >= in->end) {
                in->bad = 1;
                return;
            }
            if (*in->p == ',') {
                in->p++;
                continue;
            }
            if (*in->p == (obj ? '}' : ']')) {
                in->p++;
                return;
            }
            in->bad = 1;
            return;
        }
    } else if ((*in->p >= '0' && *in->p <= '9') || *in->p == '-') {
        v->kind = J_NUM;
        char *e;
        v->num = strtod(in->p, &e);
        in->p = e;
    } else if (in->end - in->p >= 4 && !strncmp(in->p, "null", 4)) {
        v->kind = J_NULL;
        in->p += 4;
    } else {
        in->bad = 1;
    }
}

static void jfree(JVal *v) {
    free(v->str);
    for (int i = 0; i < v->n; i++) {
        jfree(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
}

static const JVal *jget(const JVal *obj, const char *key) {
    if (obj->kind != J_OBJ) return NULL;
    for (int i = 0; i < obj->n; i++)
        if (!strcmp(obj->keys[i], key)) return &obj->items[i];
    return NULL;
}

/* ---------------------------------------------------------------- reading a file */

typedef struct {
    uint8_t *bytes;
    size_t n_bytes;
    uint64_t header_n_bytes;
    JVal header;
    const uint8_t *data;      /* start of the data section */
    size_t data_n_bytes;
} StFile;

static int st_read(const char *path, StFile *f) {
    memset(f, 0, sizeof *f);
    FILE *fp = fopen(path, "rb");
    if (!fp) return -1;
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    f->bytes = malloc((size_t)size + 1);
    f->n_bytes = fread(f->bytes, 1, (size_t)size, fp);
    fclose(fp);
    CHECK(f->n_bytes == (size_t)size && size >= 8, "%s: %ld bytes", path, size);
    if (check_failures) return -1;
    for (int i = 7; i >= 0; i--) f->header_n_bytes = (f->header_n_bytes << 8) | f->bytes[i];
    CHECK(f->header_n_bytes % 8 == 0, "header length %llu not a multiple of 8", (unsigned long long)f->header_n_bytes);
    CHECK(8 + f->header_n_bytes <= f->n_bytes, "header length %llu beyond the file", (unsigned long long)f->header_n_bytes);
    if (check_failures) return -1;
    JIn in = {(const char *)f->bytes + 8, (const char *)f->bytes + 8 + f->header_n_bytes, 0};
    jvalue(&in, &f->header);
    CHECK(!in.bad && f->header.kind == J_OBJ, "the header is not a JSON object");
    for (const char *q = in.p; q < in.end; q++) CHECK(*q == ' ', "header padding byte 0x%02x is not a space", *q);
    CHECK(in.end - in.p < 8, "%ld padding bytes", (long)(in.end - in.p));
    f->data = f->bytes + 8 + f->header_n_bytes;
    f->data_n_bytes = f->n_bytes - 8 - f->header_n_bytes;
    return check_failures ? -1 : 0;
}

static void st_free(StFile *f) {
    jfree(&f->header);
    free(f->bytes);
}

/* Checks the tensor entries: order, dtype, offsets; returns how many there are. */
static int check_layout(const StFile *f) {
    const JVal *h = &f->header;
    int first = 0;
    if (h->n > 0 && !strcmp(h->keys[0], "__metadata__")) first = 1;
    for (int i = 1; i < h->n; i++) CHECK(strcmp(h->keys[i], "__metadata__") != 0, "__metadata__ is not first");
    double expect_begin = 0;
    for (int i = first; i < h->n; i++) {
        const JVal *e = &h->items[i];
        if (i > first) CHECK(strcmp(h->keys[i - 1], h->keys[i]) < 0, "'%s' before '%s': not sorted", h->keys[i - 1], h->keys[i]);
        const JVal *dt = jget(e, "dtype"), *sh = jget(e, "shape"), *off = jget(e, "data_offsets");
        CHECK(e->n == 3 && dt && sh && off, "'%s': entry is not {dtype, shape, data_offsets}", h->keys[i]);
        if (!dt || !sh || !off) continue;
        CHECK(dt->kind == J_STR && !strcmp(dt->str, "F32"), "'%s': dtype", h->keys[i]);
        double n = 1;
        for (int d = 0; d < sh->n; d++) n *= sh->items[d].num;
        CHECK(off->kind == J_ARR && off->n == 2, "'%s': data_offsets", h->keys[i]);
        if (off->n != 2) continue;
        CHECK(off->items[0].num == expect_begin, "'%s' begins at %.0f, expected %.0f (contiguous)", h->keys[i],
              off->items[0].num, expect_begin);
        CHECK(off->items[1].num - off->items[0].num == 4 * n, "'%s': %.0f bytes for %.0f floats", h->keys[i],
              off->items[1].num - off->items[0].num, n);
        expect_begin = off->items[1].num;
    }
    CHECK(expect_begin == (double)f->data_n_bytes, "data section %zu bytes, tensors cover %.0f", f->data_n_bytes,
          expect_begin);
    return h->n - first;
}

/* Tensor `name`'s floats (decoded little-endian) vs want (n floats): bit for bit. */
static void check_tensor(const StFile *f, const char *name, const int *shape, int ndim, const float *want) {
    const JVal *e = jget(&f->header, name);
    CHECK(e != NULL, "no tensor '%s'", name);
    if (!e) return;
    const JVal *sh = jget(e, "shape"), *off = jget(e, "data_offsets");
    if (!sh || !off || off->n != 2) return;
    CHECK(sh->kind == J_ARR && sh->n == ndim, "'%s': %d dims, expected %d", name, sh->n, ndim);
    size_t n = 1;
    for (int d = 0; d < ndim && d < sh->n; d++) {
        CHECK(sh->items[d].num == shape[d], "'%s': dim %d is %.0f, expected %d", name, d, sh->items[d].num, shape[d]);
        n *= (size_t)shape[d];
    }
    size_t begin = (size_t)off->items[0].num;
    if (begin + 4 * n > f->data_n_bytes) return;
    const uint8_t *p = f->data + begin;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
                     (uint32_t)p[4 * i + 3] << 24;
        uint32_t w;
        memcpy(&w, &want[i], 4);
        if (u != w) {
            CHECK(0, "'%s'[%zu]: bits %08x, expected %08x", name, i, u, w);
            return;
        }
    }
}

static const char *meta_value(const StFile *f, const char *key) {
    const JVal *m = jget(&f->header, "__metadata__");
    const JVal *v = m ? jget(m, key) : NULL;
    return v && v->kind == J_STR ? v->str : NULL;
}

/* ---------------------------------------------------------------- unit tests */

static void unit_tests(void) {
    char dir[] = "/tmp/tower_test_safetensors_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);

    float a[2 * 3 * 4], b[7], c[1] = {-0.0f}, big[1000];
    for (int i = 0; i < 24; i++) a[i] = (float)i * 0.5f - 3.0f;
    for (int i = 0; i < 7; i++) b[i] = 1.0f / (float)(i + 1);
    for (int i = 0; i < 1000; i++) big[i] = (float)sin(i) * 1e-30f;
    b[3] = NAN; /* bits kept as they are */
    SafetensorsTensor t[5];
    memset(t, 0, sizeof t);
    /* Given out of order: the file must hold them sorted. */
    t[0] = (SafetensorsTensor){.name = "zeta/weights", .ndim = 3, .shape = {2, 3, 4}, .data = a};
    t[1] = (SafetensorsTensor){.name = "alpha/biases", .ndim = 1, .shape = {7}, .data = b};
    t[2] = (SafetensorsTensor){.name = "scalar", .ndim = 0, .data = c};
    t[3] = (SafetensorsTensor){.name = "odd \"name\"\\x", .ndim = 2, .shape = {10, 100}, .data = big};
    t[4] = (SafetensorsTensor){.name = "empty", .ndim = 2, .shape = {0, 5}, .data = NULL};
    SafetensorsMeta meta[] = {{"source", "tower"}, {"global_step", "123"}, {"note", "line\nbreak"}};
    CHECK(safetensors_write(path, t, 5, meta, 3, NULL, err, sizeof err) == 0, "write: %s", err);
    StFile f;
    if (st_read(path, &f) == 0) {
        CHECK(f.header.n == 6 && !strcmp(f.header.keys[0], "__metadata__"), "%d header entries", f.header.n);
        CHECK(check_layout(&f) == 5, "five tensors");
        check_tensor(&f, "zeta/weights", t[0].shape, 3, a);
        check_tensor(&f, "alpha/biases", t[1].shape, 1, b);
        check_tensor(&f, "scalar", t[2].shape, 0, c);
        check_tensor(&f, "odd \"name\"\\x", t[3].shape, 2, big);
        check_tensor(&f, "empty", t[4].shape, 2, NULL);
        const char *s = meta_value(&f, "source"), *g = meta_value(&f, "global_step"), *nb = meta_value(&f, "note");
        CHECK(s && !strcmp(s, "tower") && g && !strcmp(g, "123") && nb && !strcmp(nb, "line\nbreak"), "metadata");
        const JVal *m = jget(&f.header, "__metadata__");
        CHECK(m && m->n == 3 && !strcmp(m->keys[0], "global_step") && !strcmp(m->keys[2], "source"),
              "metadata keys not sorted");
        /* The reference writer's exact bytes for one entry (compact JSON, this key order). */
        CHECK(strstr((const char *)f.bytes + 8,
                     "\"alpha/biases\":{\"dtype\":\"F32\",\"shape\":[7],\"data_offsets\":[0,28]}") != NULL,
              "alpha/biases entry not in the reference writer's form");
        st_free(&f);
    }
    char tmp_path[700];
    snprintf(tmp_path, sizeof tmp_path, "%s.tmp", path);
    CHECK(access(path, F_OK) == 0 && access(tmp_path, F_OK) != 0, "the temporary file is left behind");

    /* No metadata: the header starts with the first tensor. */
    CHECK(safetensors_write(path, t, 2, NULL, 0, NULL, err, sizeof err) == 0, "write without metadata: %s", err);
    if (st_read(path, &f) == 0) {
        CHECK(f.header.n == 2 && !strcmp(f.header.keys[0], "alpha/biases"), "header without metadata");
        CHECK(check_layout(&f) == 2, "two tensors");
        st_free(&f);
    }

    /* Refusals: one line, and the file that was there stays as it was. */
    char other[600];
    snprintf(other, sizeof other, "%s/bad.safetensors", dir);
    SafetensorsTensor dup[2] = {t[0], t[0]};
    err[0] = '\0';
    CHECK(safetensors_write(other, dup, 2, NULL, 0, NULL, err, sizeof err) == -1, "duplicate names accepted");
    CHECK(strstr(err, "given twice") && strstr(err, other) && !strchr(err, '\n'), "message '%s'", err);
    CHECK(access(other, F_OK) != 0, "a refused write left a file");
    SafetensorsTensor neg = {.name = "n", .ndim = 1, .shape = {-1}, .data = a};
    CHECK(safetensors_write(other, &neg, 1, NULL, 0, NULL, err, sizeof err) == -1, "negative dimension accepted");
    SafetensorsTensor reserved = {.name = "__metadata__", .ndim = 1, .shape = {1}, .data = a};
    CHECK(safetensors_write(other, &reserved, 1, NULL, 0, NULL, err, sizeof err) == -1, "reserved name accepted");
    SafetensorsMeta dupm[2] = {{"k", "1"}, {"k", "2"}};
    CHECK(safetensors_write(other, t, 1, dupm, 2, NULL, err, sizeof err) == -1, "duplicate metadata keys accepted");
    char missing[700];
    snprintf(missing, sizeof missing, "%s/no/such/dir/x.safetensors", dir);
    err[0] = '\0';
    CHECK(safetensors_write(missing, t, 1, NULL, 0, NULL, err, sizeof err) == -1, "wrote into a missing directory");
    CHECK(strstr(err, "no/such/dir") && !strchr(err, '\n'), "message '%s'", err);

    /* A .tmp already there (another writer's, a killed one's, a link): refused, not written through, kept. */
    char tmp_there[700];
    snprintf(tmp_there, sizeof tmp_there, "%s.tmp", other);
    FILE *tf = fopen(tmp_there, "w");
    CHECK(tf && fputs("theirs", tf) >= 0 && fclose(tf) == 0, "writing %s", tmp_there);
    err[0] = '\0';
    CHECK(safetensors_write(other, t, 1, NULL, 0, NULL, err, sizeof err) == -1, "wrote over an existing .tmp");
    CHECK(strstr(err, "exists: another export to") && !strchr(err, '\n'), "message '%s'", err);
    struct stat sb;
    CHECK(stat(tmp_there, &sb) == 0 && sb.st_size == 6 && access(other, F_OK) != 0, "the .tmp there was touched");
    remove(tmp_there);
    /* Stopped (a signal's flag) after the first tensor: no file, no .tmp. */
    volatile sig_atomic_t stop = 1;
    err[0] = '\0';
    CHECK(safetensors_write(other, t, 2, NULL, 0, &stop, err, sizeof err) == -1, "a stopped write succeeded");
    CHECK(strstr(err, "stopped") && access(other, F_OK) != 0 && access(tmp_there, F_OK) != 0,
          "a stopped write: '%s', a file left", err);

    /* A model's variables: TensorFlow's names and shapes from its spec. */
    ModelSpec spec;
    CHECK(model_spec_init(&spec, "cifar10", 24, 24, 3, 10, err, sizeof err) == 0, "%s", err);
    float *params = malloc(spec.n_params * sizeof *params);
    for (size_t i = 0; i < spec.n_params; i++) params[i] = (float)i;
    SafetensorsTensor mt[MODEL_MAX_VARS];
    int n = safetensors_tensors_from_spec(mt, &spec, params);
    CHECK(n == spec.n_vars, "%d tensors for %d variables", n, spec.n_vars);
    CHECK(safetensors_write(path, mt, n, NULL, 0, NULL, err, sizeof err) == 0, "%s", err);
    if (st_read(path, &f) == 0) {
        CHECK(check_layout(&f) == spec.n_vars, "cifar10 variables");
        for (int v = 0; v < spec.n_vars; v++)
            check_tensor(&f, spec.vars[v].name, spec.vars[v].shape, spec.vars[v].ndim, params + spec.vars[v].offset);
        const JVal *c1 = jget(&f.header, "conv1/weights");
        const JVal *sh = c1 ? jget(c1, "shape") : NULL;
        CHECK(sh && sh->n == 4 && sh->items[0].num == 5 && sh->items[2].num == 3 && sh->items[3].num == 64,
              "conv1/weights is not (5, 5, 3, 64)");
        CHECK(f.data_n_bytes == spec.n_params * 4, "%zu data bytes for %zu floats", f.data_n_bytes, spec.n_params);
        st_free(&f);
    }
    free(params);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", dir);
}

/* ---------------------------------------------------------------- `tower export` output */

static void check_export(int argc, char **argv) {
    if (argc != 5 || (strcmp(argv[4], "ema") && strcmp(argv[4], "raw"))) {
        fprintf(stderr, "usage: test_safetensors check FILE CKPT_DIR ema|raw\n");
        exit(2);
    }
    char ckpt_path[4096], err[512];
    CHECK(ckpt_latest(argv[3], ckpt_path, sizeof ckpt_path) == 1, "%s: no checkpoint", argv[3]);
    if (check_failures) return;
    CkptContents ck;
    CHECK(ckpt_read(ckpt_path, &ck, err, sizeof err) == 0, "%s", err);
    if (check_failures) return;
    int want_ema = !strcmp(argv[4], "ema");
    CHECK(!want_ema || ck.ema, "the checkpoint has no moving averages");
    const float *params = want_ema && ck.ema ? ck.ema : ck.params;
    ModelSpec spec;
    CHECK(model_spec_init(&spec, ck.model, ck.H, ck.W, ck.C, ck.num_classes, err, sizeof err) == 0, "%s", err);
    StFile f;
    if (!check_failures && st_read(argv[2], &f) == 0) {
        CHECK(check_layout(&f) == spec.n_vars, "%s: not one tensor per variable", argv[2]);
        for (int v = 0; v < spec.n_vars; v++)
            check_tensor(&f, spec.vars[v].name, spec.vars[v].shape, spec.vars[v].ndim, params + spec.vars[v].offset);
        char step[32];
        snprintf(step, sizeof step, "%ld", ck.global_step);
        const char *g = meta_value(&f, "global_step"), *m = meta_value(&f, "model"), *w = meta_value(&f, "variables");
        CHECK(g && !strcmp(g, step), "metadata global_step %s, checkpoint %s", g ? g : "-", step);
        CHECK(m && !strcmp(m, ck.model), "metadata model %s", m ? m : "-");
        CHECK(w && !strcmp(w, want_ema ? "moving_average" : "raw"), "metadata variables %s", w ? w : "-");
        /* The moving averages and the raw variables differ after a few steps: the right ones were taken. */
        if (ck.ema) {
            const float *other = want_ema ? ck.params : ck.ema;
            int differs = 0;
            for (size_t i = 0; i < spec.n_params && !differs; i++) differs = params[i] != other[i];
            CHECK(differs, "moving averages equal the raw variables: cannot tell which were exported");
        }
        st_free(&f);
    }
    ckpt_contents_free(&ck);
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "check")) check_export(argc, argv);
    else unit_tests();
    if (check_failures) {
        fprintf(stderr, "%d check(s) failed\n", check_failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
