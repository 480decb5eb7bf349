/* test_ps_checkpoint.c — model.ckpt-STEP files and the `checkpoint` index.
 *
 * Where it sits: tests of what the trainer saves between synchronous steps
 * and what resume, eval and export read back.  Most cases use a small
 * hand-made ModelSpec (a few hundred floats, so every byte of a file can be
 * flipped); one case uses the real `mnist` spec through ckpt_read.  It does
 * not test the optimizer (test_ps_optimizer.c).  Files go to a fresh
 * directory under $TMPDIR (or /tmp), removed at the end.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "ps/checkpoint.h"
#include "ps/checkpoint.pb-c.h"

#include "tests/check.h"

static char g_root[512];

/* ---- helpers ---- */

static void make_dir(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/%s", g_root, name);
    mkdir(out, 0755);
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static int file_exists(const char *dir, const char *name) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* The file's bytes (*n of them) and a NUL after them, so the index's text takes strstr; the caller frees them. */
static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(len > 0 ? (size_t)len + 1 : 1);
    *n = len > 0 ? fread(b, 1, (size_t)len, f) : 0;
    b[*n] = '\0';
    fclose(f);
    return b;
}

static void write_all(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(2); }
    if (n) fwrite(b, 1, n, f);
    fclose(f);
}

static uint32_t le32(const unsigned char *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t le64(const unsigned char *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }
static void put_le32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> 8 * i); }
static void put_le64(unsigned char *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> 8 * i); }

/* Wrap payload in a valid header (correct length and crc32). */
static void write_with_header(const char *path, const void *payload, size_t n) {
    unsigned char *b = malloc(24 + n);
    memcpy(b, "TWRCKPT", 8);
    put_le32(b + 8, 1);
    put_le64(b + 12, n);
    put_le32(b + 20, (uint32_t)crc32(crc32(0, Z_NULL, 0), payload, (uInt)n));
    memcpy(b + 24, payload, n);
    write_all(path, b, 24 + n);
    free(b);
}

/* "tiny": w (rows, cols), b (cols) on H x W x 1 inputs. */
static void make_spec(ModelSpec *s, const char *name, int H, int rows, int cols) {
    memset(s, 0, sizeof *s);
    s->kind = MODEL_MNIST;
    s->name = name;
    s->H = H; s->W = 4; s->C = 1; s->num_classes = 10;
    ModelVar *w = &s->vars[0], *b = &s->vars[1];
    snprintf(w->name, sizeof w->name, "dense/weights");
    w->ndim = 2; w->shape[0] = rows; w->shape[1] = cols;
    w->offset = 0; w->n_floats = (size_t)rows * cols;
    w->init = INIT_TRUNCATED_NORMAL; w->init_value = 0.1f;
    snprintf(b->name, sizeof b->name, "dense/biases");
    b->ndim = 1; b->shape[0] = cols;
    b->offset = w->n_floats; b->n_floats = (size_t)cols;
    b->init = INIT_CONSTANT; b->init_value = 0.1f;
    w->trainable = b->trainable = 1;
    s->n_vars = 2;
    s->n_params = w->n_floats + b->n_floats;
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float rnd(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0) - 0.5f;
}

/* Run `steps` synchronous steps with random gradients. */
static void train(ParamServer *ps, int steps) {
    for (int s = 0; s < steps; s++) {
        for (int t = 0; t < ps->n_towers; t++)
            for (size_t i = 0; i < ps->spec.n_params; i++) ps->tower_grads[t][i] = rnd();
        ps_average_grads(ps);
        ps_apply_gradients(ps);
    }
}

static ParamServer *tiny_ps(const char *name, int H, int rows, int cols, OptimizerKind kind, float ema, uint64_t seed) {
    ModelSpec spec;
    make_spec(&spec, name, H, rows, cols);
    PsConfig cfg;
    ps_config_defaults(&cfg);
    cfg.opt.kind = kind;
    cfg.ema_decay = ema;
    ParamServer *ps = ps_create(&spec, 2, &cfg, host_alloc_default(), seed);
    if (!ps) { fprintf(stderr, "ps_create failed\n"); exit(2); }
    return ps;
}

static int same_floats(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* ---- cases ---- */

static void test_round_trip(void) {
    char dir[600], path[700], err[512];
    make_dir(dir, sizeof dir, "roundtrip");
    ParamServer *a = tiny_ps("tiny", 4, 16, 10, OPT_MOMENTUM, 0.9999f, 1);
    train(a, 3);
    a->params[5] = -0.0f; /* bits that a value-compare would miss */
    CkptRunState run = {.seed = 0xDEADBEEFCAFEF00Dull, .examples_consumed = 1234567890123L, .n_towers = 2,
                        .batch_size = 128, .accum_steps = 4};
    CHECK(ckpt_save(dir, a, &run, 5, err, sizeof err) == 0, "save: %s", err);
    CHECK(ckpt_latest(dir, path, sizeof path) == 1, "latest not found");
    char want[700];
    snprintf(want, sizeof want, "%s/model.ckpt-3", dir);
    CHECK(strcmp(path, want) == 0, "latest = %s, want %s", path, want);

    /* the header, checked byte by byte against the documented layout */
    size_t n;
    unsigned char *b = read_all(want, &n);
    CHECK(b && n > 24, "cannot read %s", want);
    if (b && n > 24) {
        CHECK(memcmp(b, "TWRCKPT\0", 8) == 0, "magic");
        CHECK(le32(b + 8) == 1, "version %u", le32(b + 8));
        CHECK(le64(b + 12) == n - 24, "payload length %llu, file %zu", (unsigned long long)le64(b + 12), n);
        CHECK(le32(b + 20) == (uint32_t)crc32(crc32(0, Z_NULL, 0), b + 24, (uInt)(n - 24)), "crc32");
        /* the payload decodes as tower.Checkpoint and names its tensors */
        Tower__Checkpoint *m = tower__checkpoint__unpack(NULL, n - 24, b + 24);
        CHECK(m != NULL, "payload does not decode");
        if (m) {
            CHECK(!strcmp(m->model, "tiny") && m->height == 4 && m->width == 4 && m->channels == 1 && m->num_classes == 10,
                  "model/shape fields");
            CHECK(m->n_variables == 2 && m->n_momentum == 2 && m->n_moving_averages == 2, "tensor counts");
            CHECK(m->n_variables == 2 && !strcmp(m->variables[0]->name, "dense/weights") && m->variables[0]->n_shape == 2 &&
                  m->variables[0]->shape[0] == 16 && m->variables[0]->shape[1] == 10, "variable 0 name/shape");
            tower__checkpoint__free_unpacked(m, NULL);
        }
    }
    free(b);

    ParamServer *c = tiny_ps("tiny", 4, 16, 10, OPT_MOMENTUM, 0.9999f, 99);
    CHECK(!same_floats(c->params, a->params, a->spec.n_params), "different seeds should differ before loading");
    CkptRunState got;
    memset(&got, 0, sizeof got);
    CHECK(ckpt_load(path, c, &got, err, sizeof err) == 0, "load: %s", err);
    const size_t np = a->spec.n_params;
    CHECK(same_floats(c->params, a->params, np), "params not bitwise equal");
    CHECK(same_floats(c->slots[0], a->slots[0], np), "accum not bitwise equal");
    CHECK(same_floats(c->ema, a->ema, np), "ema not bitwise equal");
    CHECK(c->global_step == 3, "global_step %ld", c->global_step);
    CHECK(got.seed == run.seed && got.examples_consumed == run.examples_consumed && got.n_towers == 2 &&
          got.batch_size == 128 && got.accum_steps == 4, "run state differs");
    /* resuming continues bit for bit */
    g_rng = 77; train(a, 2);
    g_rng = 77; train(c, 2);
    CHECK(same_floats(c->params, a->params, np) && same_floats(c->ema, a->ema, np), "resumed training diverged");

    /* a momentum checkpoint into an sgd server without EMA: only params */
    ParamServer *s = tiny_ps("tiny", 4, 16, 10, OPT_SGD, 0.0f, 5);
    CHECK(ckpt_load(path, s, NULL, err, sizeof err) == 0, "momentum ckpt into sgd: %s", err);
    CHECK(s->global_step == 3, "sgd load step");
    /* an sgd checkpoint cannot resume momentum */
    CHECK(ckpt_save(dir, s, NULL, 5, err, sizeof err) == 0, "save sgd: %s", err);
    CHECK(ckpt_load(path, c, NULL, err, sizeof err) == -1 && strstr(err, "no momentum accumulators") && strstr(err, path),
          "sgd ckpt into momentum server: '%s'", err);
    ps_free(s);
    ps_free(a);
    ps_free(c);
}

static void test_index_and_keep_last(void) {
    char dir[600], path[700], err[512];
    make_dir(dir, sizeof dir, "keep");
    ParamServer *ps = tiny_ps("tiny", 4, 4, 4, OPT_MOMENTUM, 0.9999f, 1);
    for (int step = 1; step <= 7; step++) {
        train(ps, 1);
        CHECK(ckpt_save(dir, ps, NULL, 5, err, sizeof err) == 0, "save step %d: %s", step, err);
    }
    for (int step = 1; step <= 7; step++) {
        char name[64];
        snprintf(name, sizeof name, "model.ckpt-%d", step);
        CHECK(file_exists(dir, name) == (step >= 3), "%s %s", name, step >= 3 ? "missing" : "not deleted");
    }
    char ipath[700];
    snprintf(ipath, sizeof ipath, "%s/checkpoint", dir);
    size_t n;
    char *text = (char *)read_all(ipath, &n);
    const char *want =
        "model_checkpoint_path: \"model.ckpt-7\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-3\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-4\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-5\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-6\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-7\"\n";
    CHECK(text && n == strlen(want) && memcmp(text, want, n) == 0, "index file:\n%.*s", (int)n, text ? text : "");
    free(text);
    CHECK(ckpt_latest(dir, path, sizeof path) == 1 && strstr(path, "/model.ckpt-7") != NULL, "latest %s", path);
    /* saving the same step again replaces it and does not duplicate the entry */
    CHECK(ckpt_save(dir, ps, NULL, 5, err, sizeof err) == 0, "re-save: %s", err);
    text = (char *)read_all(ipath, &n);
    CHECK(text && n == strlen(want) && memcmp(text, want, n) == 0, "index after re-save:\n%.*s", (int)n, text ? text : "");
    free(text);
    /* no index: none; a directory that does not exist: none; a malformed index: error */
    char empty[600];
    make_dir(empty, sizeof empty, "empty");
    CHECK(ckpt_latest(empty, path, sizeof path) == 0, "empty dir must have no latest");
    snprintf(ipath, sizeof ipath, "%s/nonexistent", g_root);
    CHECK(ckpt_latest(ipath, path, sizeof path) == 0, "missing dir must have no latest");
    snprintf(ipath, sizeof ipath, "%s/checkpoint", empty);
    write_all(ipath, "garbage\n", 8);
    CHECK(ckpt_latest(empty, path, sizeof path) == -1, "malformed index must be an error");
    CHECK(ckpt_find_latest(empty, path, sizeof path, err, sizeof err) == -1 && strstr(err, ipath) &&
          strstr(err, "line 1 of the checkpoint index"), "malformed index: %s", err);
    /* A line over 1023 bytes is refused whole: fgets's cut once read its two halves as two valid lines, so the
     * latest was the second name; text after the closing quote, and a NUL byte, are refused too. */
    char long_line[1400];
    int at = snprintf(long_line, sizeof long_line, "model_checkpoint_path: \"model.ckpt-7\"");
    memset(long_line + at, ' ', 1023 - (size_t)at);
    at = 1023 + snprintf(long_line + 1023, sizeof long_line - 1023, "model_checkpoint_path: \"model.ckpt-6\"\n");
    write_all(ipath, long_line, (size_t)at);
    CHECK(ckpt_find_latest(empty, path, sizeof path, err, sizeof err) == -1 &&
              strstr(err, "line 1 of the checkpoint index is over 1023 bytes"),
          "a line of %d bytes: %s (latest %s)", at - 1, err, path);
    const char after_quote[] = "model_checkpoint_path: \"model.ckpt-7\" model_checkpoint_path: \"x\"\n";
    write_all(ipath, after_quote, sizeof after_quote - 1);
    CHECK(ckpt_find_latest(empty, path, sizeof path, err, sizeof err) == -1 && strstr(err, "line 1 of the checkpoint index is not"),
          "text after the name: %s", err);
    const char with_nul[] = "model_checkpoint_path: \"model.ckpt-7\"\0junk\n";
    write_all(ipath, with_nul, sizeof with_nul - 1);
    CHECK(ckpt_find_latest(empty, path, sizeof path, err, sizeof err) == -1 && strstr(err, "line 1 of the checkpoint index is not"),
          "a NUL byte in a line: %s", err);
    const char crlf_spaces[] = "model_checkpoint_path: \"model.ckpt-7\"  \r\n";
    write_all(ipath, crlf_spaces, sizeof crlf_spaces - 1);
    CHECK(ckpt_find_latest(empty, path, sizeof path, err, sizeof err) == 1 && strstr(path, "/model.ckpt-7"),
          "spaces and CRLF after the name: %s", err);
    CHECK(ckpt_latest(dir, path, 8) == -1, "a too small path buffer must be an error");
    /* keep_last <= 0 keeps everything */
    char all[600];
    make_dir(all, sizeof all, "keepall");
    for (int i = 0; i < 7; i++) { train(ps, 1); ckpt_save(all, ps, NULL, 0, err, sizeof err); }
    int count = 0;
    for (long s = ps->global_step - 6; s <= ps->global_step; s++) {
        char name[64];
        snprintf(name, sizeof name, "model.ckpt-%ld", s);
        count += file_exists(all, name);
    }
    CHECK(count == 7, "keep_last 0 kept %d of 7", count);
    /* An index of only a model_checkpoint_path line (TensorFlow reads it so, and so do eval, export, --resume):
     * the checkpoint it names is listed, and the next save keeps it (it was swept as unlisted). */
    char lone[600];
    make_dir(lone, sizeof lone, "lone");
    CHECK(ckpt_save(lone, ps, NULL, 5, err, sizeof err) == 0, "save: %s", err);
    char lone_name[64];
    snprintf(lone_name, sizeof lone_name, "model.ckpt-%ld", ps->global_step);
    snprintf(ipath, sizeof ipath, "%s/checkpoint", lone);
    char lone_index[128];
    const int lone_n = snprintf(lone_index, sizeof lone_index, "model_checkpoint_path: \"%s\"\n", lone_name);
    write_all(ipath, lone_index, (size_t)lone_n);
    train(ps, 1);
    CHECK(ckpt_save(lone, ps, NULL, 5, err, sizeof err) == 0, "save after a one-line index: %s", err);
    CHECK(file_exists(lone, lone_name), "%s (named by the one-line index) was deleted by the next save", lone_name);
    text = (char *)read_all(ipath, &n);
    CHECK(text && strstr(text, lone_name) != NULL, "the new index lists %s:\n%.*s", lone_name, (int)n, text ? text : "");
    free(text);
    /* An index of absolute paths (TensorFlow 1's Saver) and of "./" ones: its checkpoints are listed (the next
     * save deleted every one of them as unlisted, and the new index still named them), rotated by keep_last, and
     * the new index names them bare. */
    for (int form = 0; form < 2; form++) {
        char tf1[600], abs_dir[4096];
        make_dir(tf1, sizeof tf1, form ? "dotslash" : "absolute");
        CHECK(realpath(tf1, abs_dir) != NULL, "realpath %s", tf1);
        long steps[3];
        for (int k = 0; k < 3; k++) {
            train(ps, 1);
            CHECK(ckpt_save(tf1, ps, NULL, 5, err, sizeof err) == 0, "save: %s", err);
            steps[k] = ps->global_step;
        }
        char index[4096 * 4];
        int len = 0;
        const char *pre = form ? "." : abs_dir;
        len += snprintf(index + len, sizeof index - (size_t)len, "model_checkpoint_path: \"%s/model.ckpt-%ld\"\n", pre,
                        steps[2]);
        for (int k = 0; k < 3; k++)
            len += snprintf(index + len, sizeof index - (size_t)len, "all_model_checkpoint_paths: \"%s/model.ckpt-%ld\"\n",
                            pre, steps[k]);
        snprintf(ipath, sizeof ipath, "%s/checkpoint", tf1);
        write_all(ipath, index, (size_t)len);
        train(ps, 1);
        CHECK(ckpt_save(tf1, ps, NULL, 3, err, sizeof err) == 0, "save over a TF1 index: %s", err);
        char name[64];
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof name, "model.ckpt-%ld", steps[k]);
            CHECK(file_exists(tf1, name) == (k > 0), "%s index: %s %s", form ? "./" : "absolute", name,
                  k > 0 ? "deleted" : "kept past keep_last 3");
        }
        text = (char *)read_all(ipath, &n);
        CHECK(text && !strstr(text, "/model.ckpt-") && strstr(text, "all_model_checkpoint_paths: \"model.ckpt-"),
              "the new index over a %s one:\n%.*s", form ? "./" : "absolute", (int)n, text ? text : "");
        free(text);
    }
    /* An index longer than CKPT_MAX_KEEP entries (the list is cut): no sweep of what the cut left out, among it the
     * checkpoint resumed from, listed last (it was deleted by the next save). */
    char many[600];
    make_dir(many, sizeof many, "many");
    train(ps, 1);
    CHECK(ckpt_save(many, ps, NULL, 5, err, sizeof err) == 0, "save: %s", err);
    char resumed[64];
    snprintf(resumed, sizeof resumed, "model.ckpt-%ld", ps->global_step);
    const size_t cap = (size_t)(CKPT_MAX_KEEP + 80) * 64;
    char *long_index = malloc(cap);
    int len = snprintf(long_index, cap, "model_checkpoint_path: \"%s\"\n", resumed);
    for (int k = 0; k < CKPT_MAX_KEEP + 50; k++)
        len += snprintf(long_index + len, cap - (size_t)len, "all_model_checkpoint_paths: \"model.ckpt-%d\"\n", 100000 + k);
    len += snprintf(long_index + len, cap - (size_t)len, "all_model_checkpoint_paths: \"%s\"\n", resumed);
    snprintf(ipath, sizeof ipath, "%s/checkpoint", many);
    write_all(ipath, long_index, (size_t)len);
    free(long_index);
    train(ps, 1);
    CHECK(ckpt_save(many, ps, NULL, 5, err, sizeof err) == 0, "save over a long index: %s", err);
    CHECK(file_exists(many, resumed), "%s, listed past the index's %d entries, was swept", resumed, CKPT_MAX_KEEP);
    /* The newest entries were read: the next index lists the resumed one, and the save after it keeps it too. */
    train(ps, 1);
    CHECK(ckpt_save(many, ps, NULL, 5, err, sizeof err) == 0, "second save over a long index: %s", err);
    CHECK(file_exists(many, resumed), "%s deleted by the second save after a long index", resumed);
    ps_free(ps);
}

static void test_crash_before_rename(void) {
    char dir[600], path[700], err[512], prev[700];
    make_dir(dir, sizeof dir, "crash");
    ParamServer *ps = tiny_ps("tiny", 4, 8, 8, OPT_MOMENTUM, 0.9999f, 1);
    train(ps, 1);
    CHECK(ckpt_save(dir, ps, NULL, 5, err, sizeof err) == 0, "save 1: %s", err);
    snprintf(prev, sizeof prev, "%s/model.ckpt-1", dir);
    float *saved = malloc(ps->spec.n_params * sizeof(float));
    memcpy(saved, ps->params, ps->spec.n_params * sizeof(float));

    train(ps, 1);
    ckpt_set_fault(CKPT_FAULT_BEFORE_RENAME);
    err[0] = '\0';
    CHECK(ckpt_save(dir, ps, NULL, 5, err, sizeof err) == -1 && err[0], "faulted save must fail with a message");
    ckpt_set_fault(CKPT_FAULT_NONE);
    CHECK(file_exists(dir, "model.ckpt-2.tmp"), "the temporary file must be left behind");
    CHECK(!file_exists(dir, "model.ckpt-2"), "model.ckpt-2 must not exist");
    CHECK(ckpt_latest(dir, path, sizeof path) == 1 && strcmp(path, prev) == 0, "latest after crash = %s", path);
    ParamServer *r = tiny_ps("tiny", 4, 8, 8, OPT_MOMENTUM, 0.9999f, 2);
    CHECK(ckpt_load(path, r, NULL, err, sizeof err) == 0, "previous checkpoint must load: %s", err);
    CHECK(r->global_step == 1 && same_floats(r->params, saved, ps->spec.n_params), "previous checkpoint content");

    /* crash at step 3 after the checkpoint is in place but before the index
     * moves (model.ckpt-2.tmp from the first crash is still there) */
    train(ps, 1);
    ckpt_set_fault(CKPT_FAULT_BEFORE_INDEX_RENAME);
    CHECK(ckpt_save(dir, ps, NULL, 5, err, sizeof err) == -1, "faulted index save must fail");
    ckpt_set_fault(CKPT_FAULT_NONE);
    CHECK(file_exists(dir, "model.ckpt-3") && file_exists(dir, "checkpoint.tmp"), "ckpt-3 in place, index tmp left");
    CHECK(ckpt_latest(dir, path, sizeof path) == 1 && strcmp(path, prev) == 0, "latest after index crash = %s", path);
    CHECK(ckpt_load(path, r, NULL, err, sizeof err) == 0, "previous checkpoint must still load: %s", err);

    /* the next good save (step 4) cleans the stale temporary files up */
    CHECK(file_exists(dir, "model.ckpt-2.tmp"), "tmp of step 2 still there before the next save");
    train(ps, 1);
    CHECK(ckpt_save(dir, ps, NULL, 5, err, sizeof err) == 0, "save after crash: %s", err);
    CHECK(!file_exists(dir, "model.ckpt-2.tmp") && !file_exists(dir, "checkpoint.tmp"), "stale temporary files left");
    CHECK(!file_exists(dir, "model.ckpt-3") && file_exists(dir, "model.ckpt-1"),
          "model.ckpt-3, never listed by the index, must go; the listed model.ckpt-1 must stay");
    CHECK(ckpt_latest(dir, path, sizeof path) == 1 && strstr(path, "/model.ckpt-4"), "latest = %s", path);
    free(saved);
    ps_free(r);
    ps_free(ps);
}

static void test_corruption(void) {
    char dir[600], path[700], bad[700], err[512];
    make_dir(dir, sizeof dir, "corrupt");
    ParamServer *ps = tiny_ps("tiny", 4, 8, 6, OPT_MOMENTUM, 0.9999f, 1);
    train(ps, 2);
    CHECK(ckpt_save(dir, ps, NULL, 5, err, sizeof err) == 0, "save: %s", err);
    snprintf(path, sizeof path, "%s/model.ckpt-2", dir);
    snprintf(bad, sizeof bad, "%s/bad.ckpt", dir);
    size_t n;
    unsigned char *orig = read_all(path, &n);
    unsigned char *b = malloc(n + 16);
    ParamServer *r = tiny_ps("tiny", 4, 8, 6, OPT_MOMENTUM, 0.9999f, 3);
    const size_t np = r->spec.n_params;
    float *before = malloc(np * sizeof(float));
    memcpy(before, r->params, np * sizeof(float));

    /* every byte of the file, flipped */
    int undetected = 0, unnamed = 0, not_checksum = 0;
    for (size_t off = 0; off < n; off++) {
        memcpy(b, orig, n);
        b[off] ^= 0xFF;
        write_all(bad, b, n);
        err[0] = '\0';
        if (ckpt_load(bad, r, NULL, err, sizeof err) == 0) undetected++;
        if (!strstr(err, bad) || strchr(err, '\n')) unnamed++;
        if (off >= 24 && !strstr(err, "checksum mismatch: file is corrupted")) not_checksum++;
    }
    CHECK(undetected == 0, "%d flipped bytes of %zu went undetected", undetected, n);
    CHECK(unnamed == 0, "%d messages do not name the file on one line", unnamed);
    CHECK(not_checksum == 0, "%d payload flips not reported as a checksum mismatch", not_checksum);
    CHECK(same_floats(r->params, before, np) && r->global_step == 0, "a failed load changed the server");

    /* header fields, one by one */
    memcpy(b, orig, n); memcpy(b, "NOTACKPT", 8); write_all(bad, b, n);
    CHECK(ckpt_load(bad, r, NULL, err, sizeof err) == -1 && strstr(err, "not a checkpoint (bad magic)"), "magic: %s", err);
    memcpy(b, orig, n); put_le32(b + 8, 2); write_all(bad, b, n);
    CHECK(ckpt_load(bad, r, NULL, err, sizeof err) == -1 && strstr(err, "unsupported checkpoint format version 2"), "version: %s", err);
    /* truncation at several lengths */
    const size_t cuts[] = {n - 1, n / 2, 25, 24, 23, 5};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        write_all(bad, orig, cuts[i]);
        err[0] = '\0';
        CHECK(ckpt_load(bad, r, NULL, err, sizeof err) == -1 && strstr(err, "truncated") && strstr(err, bad),
              "cut at %zu: '%s'", cuts[i], err);
    }
    write_all(bad, orig, 0);
    CHECK(ckpt_load(bad, r, NULL, err, sizeof err) == -1 && strstr(err, "not a checkpoint"), "empty: %s", err);
    /* a huge claimed length is not allocated: it is reported as truncation */
    memcpy(b, orig, n); put_le64(b + 12, (uint64_t)1 << 60); write_all(bad, b, n);
    CHECK(ckpt_load(bad, r, NULL, err, sizeof err) == -1 && strstr(err, "truncated"), "huge length: %s", err);
    /* bytes appended after the payload */
    memcpy(b, orig, n); memset(b + n, 0, 16); write_all(bad, b, n + 16);
    CHECK(ckpt_load(bad, r, NULL, err, sizeof err) == -1 && strstr(err, "16 unexpected bytes"), "trailing: %s", err);
    /* a valid header around a payload that is not a tower.Checkpoint */
    const unsigned char junk[] = {0x0A, 0x7F, 'x'}; /* field 1, string of 127 bytes, 1 present */
    write_with_header(bad, junk, sizeof junk);
    CHECK(ckpt_load(bad, r, NULL, err, sizeof err) == -1 && strstr(err, "cannot decode"), "decode: %s", err);
    snprintf(bad, sizeof bad, "%s/does-not-exist", dir);
    CHECK(ckpt_load(bad, r, NULL, err, sizeof err) == -1 && strstr(err, "cannot open") && strstr(err, bad), "open: %s", err);
    CHECK(same_floats(r->params, before, np) && r->global_step == 0, "failed loads changed the server");
    free(before);
    free(b);
    free(orig);
    ps_free(r);
    ps_free(ps);
}

/* A tensor list for crafted payloads. */
static void craft(const char *path, const char *model, Tower__Tensor **vars, size_t n_vars) {
    Tower__Checkpoint m;
    Tower__RunState rs;
    tower__checkpoint__init(&m);
    tower__run_state__init(&rs);
    m.model = (char *)model;
    m.height = 4; m.width = 4; m.channels = 1; m.num_classes = 10;
    m.global_step = 9;
    m.n_variables = n_vars;
    m.variables = vars;
    m.run = &rs;
    size_t len = tower__checkpoint__get_packed_size(&m);
    uint8_t *buf = malloc(len);
    tower__checkpoint__pack(&m, buf);
    write_with_header(path, buf, len);
    free(buf);
}

static void test_mismatch(void) {
    char dir[600], path[700], bad[700], err[512];
    make_dir(dir, sizeof dir, "mismatch");
    ParamServer *ps = tiny_ps("tiny", 4, 8, 6, OPT_MOMENTUM, 0.9999f, 1);
    train(ps, 1);
    CHECK(ckpt_save(dir, ps, NULL, 5, err, sizeof err) == 0, "save: %s", err);
    snprintf(path, sizeof path, "%s/model.ckpt-1", dir);

    ParamServer *other = tiny_ps("other", 4, 8, 6, OPT_MOMENTUM, 0.9999f, 1);
    CHECK(ckpt_load(path, other, NULL, err, sizeof err) == -1 && strstr(err, "'tiny'") && strstr(err, "expected 'other'") &&
          strstr(err, path), "other model: %s", err);
    ps_free(other);
    other = tiny_ps("tiny", 8, 8, 6, OPT_MOMENTUM, 0.9999f, 1); /* H 8, not 4 */
    CHECK(ckpt_load(path, other, NULL, err, sizeof err) == -1 && strstr(err, "4x4x1") && strstr(err, "8x4x1"),
          "other input shape: %s", err);
    ps_free(other);
    other = tiny_ps("tiny", 4, 6, 8, OPT_MOMENTUM, 0.9999f, 1); /* w (6, 8), b (8) */
    CHECK(ckpt_load(path, other, NULL, err, sizeof err) == -1 && strstr(err, "'dense/weights' has shape (8, 6), expected (6, 8)"),
          "other variable shape: %s", err);
    ps_free(other);

    /* a spec with a third variable: missing in the file */
    ModelSpec spec3;
    make_spec(&spec3, "tiny", 4, 8, 6);
    ModelVar *x = &spec3.vars[2];
    snprintf(x->name, sizeof x->name, "extra/biases");
    x->ndim = 1; x->shape[0] = 3; x->offset = spec3.n_params; x->n_floats = 3;
    x->init = INIT_CONSTANT; x->init_value = 0.0f;
    x->trainable = 1;
    spec3.n_vars = 3;
    spec3.n_params += 3;
    PsConfig cfg;
    ps_config_defaults(&cfg);
    other = ps_create(&spec3, 1, &cfg, host_alloc_default(), 1);
    CHECK(ckpt_load(path, other, NULL, err, sizeof err) == -1 && strstr(err, "variable 'extra/biases' missing"),
          "missing variable: %s", err);
    ps_free(other);

    /* crafted payloads: unexpected, duplicate, and wrongly sized tensors */
    snprintf(bad, sizeof bad, "%s/crafted.ckpt", dir);
    float data[48] = {0};
    int32_t wshape[2] = {8, 6}, bshape[1] = {6};
    Tower__Tensor w, b2, extra;
    tower__tensor__init(&w); tower__tensor__init(&b2); tower__tensor__init(&extra);
    w.name = "dense/weights"; w.n_shape = 2; w.shape = wshape; w.n_data = 48; w.data = data;
    b2.name = "dense/biases"; b2.n_shape = 1; b2.shape = bshape; b2.n_data = 6; b2.data = data;
    extra.name = "surprise"; extra.n_shape = 1; extra.shape = bshape; extra.n_data = 6; extra.data = data;
    Tower__Tensor *list1[3] = {&w, &b2, &extra};
    craft(bad, "tiny", list1, 3);
    CHECK(ckpt_load(bad, ps, NULL, err, sizeof err) == -1 && strstr(err, "unexpected variable 'surprise'"), "unexpected: %s", err);
    Tower__Tensor *list2[3] = {&w, &b2, &b2};
    craft(bad, "tiny", list2, 3);
    CHECK(ckpt_load(bad, ps, NULL, err, sizeof err) == -1 && strstr(err, "'dense/biases' appears twice"), "duplicate: %s", err);
    b2.n_data = 5;
    Tower__Tensor *list3[2] = {&w, &b2};
    craft(bad, "tiny", list3, 2);
    CHECK(ckpt_load(bad, ps, NULL, err, sizeof err) == -1 && strstr(err, "holds 5 floats, its shape needs 6"), "size: %s", err);
    b2.n_data = 6;
    craft(bad, "tiny", list3, 2); /* valid variables, but no momentum and no moving averages */
    CHECK(ckpt_load(bad, ps, NULL, err, sizeof err) == -1 && strstr(err, "no momentum accumulators"), "no slots: %s", err);
    ParamServer *plain = tiny_ps("tiny", 4, 8, 6, OPT_SGD, 0.0f, 1);
    CHECK(ckpt_load(bad, plain, NULL, err, sizeof err) == 0 && plain->global_step == 9, "crafted valid file: %s", err);
    ps_free(plain);
    ps_free(ps);
}

/* ckpt_read: the real mnist spec, without a ParamServer on the reading side. */
static void test_read_real_model(void) {
    char dir[600], path[700], err[512];
    make_dir(dir, sizeof dir, "read");
    ModelSpec spec;
    CHECK(model_spec_init(&spec, "mnist", 28, 28, 1, 10, err, sizeof err) == 0, "mnist spec: %s", err);
    PsConfig cfg;
    ps_config_defaults(&cfg);
    ParamServer *ps = ps_create(&spec, 1, &cfg, host_alloc_default(), 11);
    CHECK(ps != NULL, "ps_create(mnist)");
    if (!ps) return;
    for (size_t i = 0; i < spec.n_params; i++) ps->tower_grads[0][i] = (float)(i % 17) * 1e-3f - 8e-3f;
    ps_average_grads(ps);
    ps_apply_gradients(ps);
    CkptRunState run = {.seed = 7, .examples_consumed = 128, .n_towers = 1, .batch_size = 128, .accum_steps = 1};
    CHECK(ckpt_save(dir, ps, &run, 5, err, sizeof err) == 0, "save mnist: %s", err);
    CHECK(ckpt_latest(dir, path, sizeof path) == 1, "latest");
    CkptContents c;
    CHECK(ckpt_read(path, &c, err, sizeof err) == 0, "read: %s", err);
    CHECK(!strcmp(c.model, "mnist") && c.H == 28 && c.W == 28 && c.C == 1 && c.num_classes == 10 && c.global_step == 1,
          "header fields of the contents");
    CHECK(c.n_params == spec.n_params && c.params && c.ema && c.n_slots == 1 && c.slots[0] && !strcmp(c.slot_names[0], "Momentum"), "arrays");
    if (c.params && c.ema && c.slots[0] && c.n_params == spec.n_params) {
        CHECK(same_floats(c.params, ps->params, c.n_params), "params");
        CHECK(same_floats(c.ema, ps->ema, c.n_params), "ema");
        CHECK(same_floats(c.slots[0], ps->slots[0], c.n_params), "accum");
    }
    CHECK(c.run.seed == 7 && c.run.examples_consumed == 128 && c.run.n_towers == 1 && c.run.batch_size == 128, "run");
    ckpt_contents_free(&c);
    CHECK(c.params == NULL && c.n_params == 0, "contents_free must zero");
    /* a model this build does not know */
    char bad[700];
    snprintf(bad, sizeof bad, "%s/unknown.ckpt", dir);
    Tower__Tensor *none[1] = {NULL};
    craft(bad, "no-such-model", none, 0);
    CHECK(ckpt_read(bad, &c, err, sizeof err) == -1 && strstr(err, "no-such-model") && strstr(err, bad), "unknown: %s", err);
    CHECK(c.params == NULL, "failed read leaves contents zeroed");

    /* Options the network does not read (mnist: the width multiplier, the head, fc_width), recorded otherwise than
     * their defaults (a crafted file; fuzz_checkpoint found one): ckpt_read and ckpt_load both take them as the
     * network reads them, so the file loads into the model's server (it was refused: "expected
     * --width_multiplier 1").  The server's spec here is made by hand from the real one, as such a file's writer's. */
    char odd_dir[600];
    make_dir(odd_dir, sizeof odd_dir, "ignored-options");
    ModelSpec odd = spec;
    odd.opts.width_multiplier = 1.00027f;
    odd.opts.head = MODEL_HEAD_SEED;
    odd.opts.fc_width = 17;
    ParamServer *writer = ps_create(&odd, 1, &cfg, host_alloc_default(), 12);
    CHECK(writer && ckpt_save(odd_dir, writer, &run, 5, err, sizeof err) == 0, "save with odd options: %s", err);
    CHECK(ckpt_latest(odd_dir, path, sizeof path) == 1, "latest (odd options)");
    CHECK(ckpt_read(path, &c, err, sizeof err) == 0 && c.opts.width_multiplier == 1.0f && c.opts.head == MODEL_HEAD_KERAS &&
              c.opts.fc_width == 4096, "ckpt_read of ignored options: %s (width %g)", err, c.opts.width_multiplier);
    ckpt_contents_free(&c);
    CHECK(ckpt_load(path, ps, NULL, err, sizeof err) == 0 && writer && same_floats(ps->params, writer->params, spec.n_params),
          "ckpt_load of options mnist does not read: %s", err);
    ps_free(writer);
    /* An option the network reads still has to match: mobilenet_v2's width multiplier. */
    ModelSpec m35, m50;
    const ModelOptions w35 = {.width_multiplier = 0.35f}, w50 = {.width_multiplier = 0.5f};
    CHECK(model_spec_init_opts(&m35, "mobilenet_v2", 32, 32, 1, 10, &w35, err, sizeof err) == 0 &&
              model_spec_init_opts(&m50, "mobilenet_v2", 32, 32, 1, 10, &w50, err, sizeof err) == 0, "mobilenet specs: %s", err);
    ParamServer *a = ps_create(&m35, 1, &cfg, host_alloc_default(), 1), *b = ps_create(&m50, 1, &cfg, host_alloc_default(), 1);
    make_dir(odd_dir, sizeof odd_dir, "used-option");
    CHECK(a && b && ckpt_save(odd_dir, a, &run, 5, err, sizeof err) == 0, "save mobilenet_v2 0.35: %s", err);
    CHECK(ckpt_latest(odd_dir, path, sizeof path) == 1, "latest (mobilenet_v2)");
    CHECK(b && ckpt_load(path, b, NULL, err, sizeof err) == -1 &&
              strstr(err, "with --width_multiplier 0.35 --head keras, expected --width_multiplier 0.5 --head keras") &&
              !strstr(err, "fc_width"), "a width mobilenet_v2 reads, mismatched (no --fc_width, which it does not read): '%s'", err);
    ps_free(b);
    /* Widths one float apart print apart (%g printed both as 0.333). */
    const ModelOptions w333 = {.width_multiplier = 0.333f}, w333b = {.width_multiplier = nextafterf(0.333f, 1.0f)};
    ModelSpec m333, m333b;
    CHECK(model_spec_init_opts(&m333, "mobilenet_v2", 32, 32, 1, 10, &w333, err, sizeof err) == 0 &&
              model_spec_init_opts(&m333b, "mobilenet_v2", 32, 32, 1, 10, &w333b, err, sizeof err) == 0, "specs: %s", err);
    ParamServer *c333 = ps_create(&m333, 1, &cfg, host_alloc_default(), 1), *c333b = ps_create(&m333b, 1, &cfg, host_alloc_default(), 1);
    make_dir(odd_dir, sizeof odd_dir, "near-width");
    CHECK(c333 && ckpt_save(odd_dir, c333, &run, 5, err, sizeof err) == 0, "save mobilenet_v2 0.333: %s", err);
    CHECK(ckpt_latest(odd_dir, path, sizeof path) == 1, "latest (0.333)");
    CHECK(c333b && ckpt_load(path, c333b, NULL, err, sizeof err) == -1 &&
              strstr(err, "with --width_multiplier 0.333 --head keras, expected --width_multiplier 0.33300003 --head keras"),
          "widths a float apart: '%s'", err);
    ps_free(c333);
    ps_free(c333b);
    ps_free(a);
    ps_free(ps);
}

/* Every optimizer of the table: save after 3 steps, load into a fresh
 * server, 2 more steps on both give bitwise the same variables, slots and
 * scalars (N + resume + M == N + M); the slots are in the file under
 * TensorFlow's names; and a checkpoint of one optimizer refuses to resume
 * another whose slots differ, in one line. */
typedef struct {
    const char *label;
    OptimizerKind kind;
    int centered;
} OptCase;

static ParamServer *opt_ps(const OptCase *oc, uint64_t seed) {
    ModelSpec spec;
    make_spec(&spec, "tiny", 4, 8, 6);
    PsConfig cfg;
    ps_config_defaults(&cfg);
    cfg.opt.kind = oc->kind;
    cfg.opt.centered = oc->centered;
    cfg.opt.rms_momentum = 0.5f;
    ParamServer *ps = ps_create(&spec, 2, &cfg, host_alloc_default(), seed);
    if (!ps) { fprintf(stderr, "ps_create failed\n"); exit(2); }
    return ps;
}

static void test_each_optimizer(void) {
    static const OptCase cases[] = {{"sgd", OPT_SGD, 0},         {"momentum", OPT_MOMENTUM, 0}, {"adam", OPT_ADAM, 0},
                                    {"rmsprop", OPT_RMSPROP, 0}, {"rmsprop_centered", OPT_RMSPROP, 1},
                                    {"adamw", OPT_ADAMW, 0}};
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    char paths[8][700], err[512];
    for (int c = 0; c < n_cases; c++) {
        char dir[600];
        make_dir(dir, sizeof dir, cases[c].label);
        ParamServer *a = opt_ps(&cases[c], 1), *b = opt_ps(&cases[c], 99);
        g_rng = 5; train(a, 3);
        CHECK(ckpt_save(dir, a, NULL, 5, err, sizeof err) == 0, "%s: save: %s", cases[c].label, err);
        snprintf(paths[c], sizeof paths[c], "%s/model.ckpt-3", dir);
        CHECK(ckpt_load(paths[c], b, NULL, err, sizeof err) == 0, "%s: load: %s", cases[c].label, err);
        const size_t np = a->spec.n_params;
        int same = same_floats(a->params, b->params, np) && !memcmp(a->scalars, b->scalars, sizeof a->scalars);
        for (int k = 0; k < a->n_slots; k++) same &= same_floats(a->slots[k], b->slots[k], np);
        CHECK(same, "%s: the loaded state is not bitwise the saved one", cases[c].label);
        g_rng = 6; train(a, 2);
        g_rng = 6; train(b, 2);
        same = same_floats(a->params, b->params, np) && same_floats(a->ema, b->ema, np) &&
               !memcmp(a->scalars, b->scalars, sizeof a->scalars) && a->global_step == 5 && b->global_step == 5;
        for (int k = 0; k < a->n_slots; k++) same &= same_floats(a->slots[k], b->slots[k], np);
        CHECK(same, "%s: 3 steps + resume + 2 steps differ from 5 steps", cases[c].label);
        /* the file: slot names as TensorFlow's, the scalars, the optimizer's name */
        size_t n;
        unsigned char *bytes = read_all(paths[c], &n);
        Tower__Checkpoint *m = bytes && n > 24 ? tower__checkpoint__unpack(NULL, n - 24, bytes + 24) : NULL;
        CHECK(m != NULL, "%s: the file does not decode", cases[c].label);
        if (m) {
            const OptimizerI *o = optimizer_i(cases[c].kind);
            const int in_slots = a->n_slots - (cases[c].kind == OPT_MOMENTUM);
            CHECK(m->n_slots == (size_t)(in_slots * 2) && m->n_optimizer_scalars == (size_t)o->n_scalars &&
                      !strcmp(m->optimizer, optimizer_name(&a->cfg.opt)),
                  "%s: %zu slot tensors, %zu scalars, optimizer '%s'", cases[c].label, m->n_slots, m->n_optimizer_scalars,
                  m->optimizer);
            if (in_slots > 0 && m->n_slots > 1) {
                char want[96];
                snprintf(want, sizeof want, "dense/weights/%s", a->slot_info[cases[c].kind == OPT_MOMENTUM].name);
                CHECK(!strcmp(m->slots[0]->name, want), "%s: first slot tensor '%s', want '%s'", cases[c].label,
                      m->slots[0]->name, want);
            }
            tower__checkpoint__free_unpacked(m, NULL);
        }
        free(bytes);
        ps_free(a);
        ps_free(b);
    }
    /* Cross loads: only the same slots resume; sgd starts from anything. */
    for (int from = 0; from < n_cases; from++)
        for (int to = 0; to < n_cases; to++) {
            ParamServer *ps = opt_ps(&cases[to], 3);
            const int ok = ckpt_load(paths[from], ps, NULL, err, sizeof err) == 0;
            const int want_ok = from == to || cases[to].kind == OPT_SGD;
            CHECK(ok == want_ok, "%s checkpoint into %s: %s (%s)", cases[from].label, cases[to].label,
                  ok ? "loaded" : "refused", ok ? "" : err);
            if (!ok) CHECK(strstr(err, paths[from]) && strstr(err, "cannot resume with") && !strchr(err, '\n'),
                           "%s into %s: not one line naming the file: %s", cases[from].label, cases[to].label, err);
            ps_free(ps);
        }
    /* The messages */
    ParamServer *mom = opt_ps(&cases[1], 3), *adam = opt_ps(&cases[2], 3), *rms = opt_ps(&cases[3], 3);
    CHECK(ckpt_load(paths[2], mom, NULL, err, sizeof err) == -1 &&
              strstr(err, "no momentum accumulators (saved with adam): cannot resume with nesterov"), "adam into momentum: %s", err);
    CHECK(ckpt_load(paths[1], adam, NULL, err, sizeof err) == -1 &&
              strstr(err, "no first moments (Adam) (saved with nesterov): cannot resume with adam"), "momentum into adam: %s", err);
    CHECK(ckpt_load(paths[4], rms, NULL, err, sizeof err) == -1 &&
              strstr(err, "holds optimizer slots 'RMSProp_2' that rmsprop does not keep (saved with rmsprop_centered)"),
          "centered into plain rmsprop: %s", err);
    ps_free(mom);
    ps_free(adam);
    ps_free(rms);
}

/* The worker parts' own examples (RunState.part_examples_consumed and input_split): saved and read back; absent
 * (a run without a split, a file older than the field) they read as none; more parts than CKPT_MAX_PARTS is a
 * load error of one line. */
static void test_run_parts(void) {
    char dir[600], path[700], err[512];
    make_dir(dir, sizeof dir, "parts");
    ParamServer *a = tiny_ps("tiny", 4, 8, 6, OPT_MOMENTUM, 0.9999f, 1);
    train(a, 2);
    CkptRunState run = {.seed = 3, .examples_consumed = 212, .n_towers = 3, .batch_size = 4, .accum_steps = 1,
                        .n_parts = 3, .part_examples_consumed = {68, 80, 64}, .input_split = "records"};
    CHECK(ckpt_save(dir, a, &run, 5, err, sizeof err) == 0, "save: %s", err);
    snprintf(path, sizeof path, "%s/model.ckpt-2", dir);
    CkptRunState got;
    memset(&got, 0x55, sizeof got);
    CHECK(ckpt_load(path, a, &got, err, sizeof err) == 0, "load: %s", err);
    CHECK(got.examples_consumed == 212 && got.n_parts == 3 && got.part_examples_consumed[0] == 68 &&
          got.part_examples_consumed[1] == 80 && got.part_examples_consumed[2] == 64 && !strcmp(got.input_split, "records"),
          "parts: %d, %ld %ld %ld, split '%.8s'", got.n_parts, got.part_examples_consumed[0], got.part_examples_consumed[1],
          got.part_examples_consumed[2], got.input_split);
    run.n_parts = 0; /* a run without a split writes none */
    train(a, 1);
    CHECK(ckpt_save(dir, a, &run, 5, err, sizeof err) == 0, "save: %s", err);
    snprintf(path, sizeof path, "%s/model.ckpt-3", dir);
    memset(&got, 0x55, sizeof got);
    CHECK(ckpt_load(path, a, &got, err, sizeof err) == 0 && got.n_parts == 0 && got.input_split[0] == '\0' &&
          got.examples_consumed == 212, "no parts: %d parts, split '%.8s' (%s)", got.n_parts, got.input_split, err);
    /* one part count too many */
    size_t n;
    unsigned char *b = read_all(path, &n);
    Tower__Checkpoint *m = b ? tower__checkpoint__unpack(NULL, n - 24, b + 24) : NULL;
    CHECK(m != NULL, "%s does not decode", path);
    if (m) {
        int64_t many[CKPT_MAX_PARTS + 1] = {0};
        m->run->n_part_examples_consumed = CKPT_MAX_PARTS + 1;
        m->run->part_examples_consumed = many;
        size_t len = tower__checkpoint__get_packed_size(m);
        uint8_t *buf = malloc(len);
        tower__checkpoint__pack(m, buf);
        m->run->n_part_examples_consumed = 0;
        m->run->part_examples_consumed = NULL;
        tower__checkpoint__free_unpacked(m, NULL);
        write_with_header(path, buf, len);
        free(buf);
        char want[96];
        snprintf(want, sizeof want, "counts %d workers' parts, at most %d", CKPT_MAX_PARTS + 1, CKPT_MAX_PARTS);
        CHECK(ckpt_load(path, a, &got, err, sizeof err) == -1 && strstr(err, want) && strstr(err, path),
              "too many parts: %s", err);
    }
    free(b);
    ps_free(a);
}

/* A sharded checkpoint (ckpt_save_shard, ckpt_commit_shards) reads back whole; a shard of another run at the same
 * step, whose tensors still fit (the biases: the same shapes at another input height), is refused, not joined. */
static void test_shards_of_one_run(void) {
    char dir[600], err[1024], base[700];
    make_dir(dir, sizeof dir, "shards");
    ParamServer *a = tiny_ps("mnist", 4, 8, 10, OPT_MOMENTUM, 0.9f, 1), *b = tiny_ps("mnist", 5, 8, 10, OPT_MOMENTUM, 0.9f, 2);
    train(a, 2);
    train(b, 2);
    const unsigned char keep0[2] = {1, 0}, keep1[2] = {0, 1};
    CHECK(ckpt_save_shard(dir, a, keep0, 0, 2, NULL, err, sizeof err) == 0, "shard 0: %s", err);
    CHECK(ckpt_save_shard(dir, a, keep1, 1, 2, NULL, err, sizeof err) == 0, "shard 1: %s", err);
    CHECK(ckpt_commit_shards(dir, 2, 2, 5, err, sizeof err) == 0, "commit: %s", err);
    snprintf(base, sizeof base, "%s/model.ckpt-2", dir);
    ParamServer *r = tiny_ps("mnist", 4, 8, 10, OPT_MOMENTUM, 0.9f, 3);
    CHECK(ckpt_load(base, r, NULL, err, sizeof err) == 0, "load the shards of one run: %s", err);
    CHECK(r->global_step == 2 && same_floats(r->params, a->params, a->spec.n_params),
          "the joined variables differ from the run's");
    /* Shard 1 again, from run b (input height 5): its biases fit run a's shapes. */
    CHECK(ckpt_save_shard(dir, b, keep1, 1, 2, NULL, err, sizeof err) == 0, "shard 1 of b: %s", err);
    CHECK(ckpt_load(base, r, NULL, err, sizeof err) == -1 && strstr(err, "shard 1 is of another run than shard 0") &&
              strstr(err, "5x4x1") && strstr(err, "4x4x1") && !strchr(err, '\n'),
          "a shard of another run: %s", err);
    /* A manifest line over 1023 bytes is named as such (it was read as two lines, the second's number named). */
    char manifest[800], text[1500];
    snprintf(manifest, sizeof manifest, "%s.shards", base);
    int n = snprintf(text, sizeof text, "n_shards: 2\nshard: \"model.ckpt-2");
    memset(text + n, 'x', 1100);
    n += 1100;
    n += snprintf(text + n, sizeof text - (size_t)n, "\"\nshard: \"y\"\n");
    write_all(manifest, text, (size_t)n);
    CHECK(ckpt_load(base, r, NULL, err, sizeof err) == -1 && strstr(err, "line 2 of the shard manifest is over 1023 bytes"),
          "a long manifest line: %s", err);
    ps_free(a);
    ps_free(b);
    ps_free(r);
}

/* A save holds no copy of its payload: under an address-space limit that leaves less room than the payload (about
 * 40 MB for mnist's variables, momentum and moving averages), ckpt_save still writes the file, and it reads back
 * equal (a save late in a run failed for want of the payload's buffer, losing the steps since the last).  In a
 * child process, whose limit goes with it; not under a sanitizer, whose shadow memory needs the address space. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#endif

static void test_save_streams(void) {
#ifdef UNDER_SANITIZER
    printf("test_save_streams: skipped under a sanitizer\n");
#else
    char dir[600], path[700], err[512];
    make_dir(dir, sizeof dir, "stream");
    ModelSpec spec;
    CHECK(model_spec_init(&spec, "mnist", 28, 28, 1, 10, err, sizeof err) == 0, "mnist spec: %s", err);
    PsConfig cfg;
    ps_config_defaults(&cfg);
    ParamServer *ps = ps_create(&spec, 1, &cfg, host_alloc_default(), 13);
    CHECK(ps != NULL, "ps_create(mnist)");
    if (!ps) return;
    const size_t payload_n_bytes = ckpt_max_n_bytes(ps);
    fflush(stdout);
    const pid_t child = fork();
    if (child == 0) {
        FILE *f = fopen("/proc/self/status", "r");
        char line[256];
        unsigned long long kib = 0;
        while (f && fgets(line, sizeof line, f) && sscanf(line, "VmSize: %llu kB", &kib) != 1) {}
        if (f) fclose(f);
        const struct rlimit rl = {kib * 1024ULL + payload_n_bytes / 2, kib * 1024ULL + payload_n_bytes / 2};
        if (kib == 0 || setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
        void *volatile probe = malloc(payload_n_bytes);
        if (probe) _exit(4); /* the limit must refuse a payload-sized buffer */
        _exit(ckpt_save(dir, ps, NULL, 5, err, sizeof err) == 0 ? 0 : (fprintf(stderr, "%s\n", err), 1));
    }
    int status = 0;
    CHECK(child > 0 && waitpid(child, &status, 0) == child, "fork/wait");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "save under an address-space limit of half its %zu-byte payload: status %d", payload_n_bytes, status);
    CHECK(ckpt_latest(dir, path, sizeof path) == 1, "latest");
    CkptContents c;
    CHECK(ckpt_read(path, &c, err, sizeof err) == 0, "read: %s", err);
    if (c.params && c.n_params == spec.n_params) CHECK(same_floats(c.params, ps->params, c.n_params), "params");
    ckpt_contents_free(&c);
    ps_free(ps);
#endif
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(g_root, sizeof g_root, "%s/test_ps_checkpoint.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_root)) { perror("mkdtemp"); return 2; }
    test_round_trip();
    test_index_and_keep_last();
    test_crash_before_rename();
    test_corruption();
    test_mismatch();
    test_read_real_model();
    test_each_optimizer();
    test_run_parts();
    test_shards_of_one_run();
    test_save_streams();
    if (!check_failures) remove_tree(g_root);
    else fprintf(stderr, "files left in %s\n", g_root);
    if (check_failures) fprintf(stderr, "test_ps_checkpoint: %d check(s) failed\n", check_failures);
    else printf("test_ps_checkpoint: all checks passed\n");
    return check_failures ? 1 : 0;
}
