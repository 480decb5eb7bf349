/* test_fault_helper.c — the checkpoint side of the fault tests
 * (tests/test_fault_*.sh): it checks a train dir after a kill -9 and forges
 * checkpoints that are valid files of the wrong content.
 *
 * Where it sits: tests/, linked to ps/ only (ckpt_read, the protobuf-c
 * message of ps/checkpoint.proto); the shell tests drive the `tower` binary
 * and call this for what the binary cannot say about itself.
 * What it does not do: no training, no repair; it never writes into DIR.
 *
 *   test_fault_helper check DIR
 *       Every file of DIR under a final name (model.ckpt-<digits>) must load
 *       with ckpt_read (header, CRC, decoding, variables); the index
 *       DIR/checkpoint, when present, must parse and name only files that
 *       load (a listed checkpoint in shards, model.ckpt-N.shards and its
 *       shard files, with ckpt_read too).  Prints `latest STEP` (-1 without an index), one `tmp NAME
 *       N_BYTES` per temporary file left by an interrupted write, one
 *       `orphan NAME` per checkpoint the index does not list, and one `bad
 *       ...` line per problem.  Exit 0 when there is no problem, 1 otherwise.
 *
 *   test_fault_helper forge IN OUT KIND
 *       Reads the checkpoint IN, changes its payload and writes OUT with a
 *       correct header and CRC, so that only the content is wrong.  KIND:
 *         rename_var    the first variable gets the name "forged/weights"
 *         drop_var      the last variable is left out (everywhere)
 *         extra_var     a variable "forged/biases" is added (everywhere)
 *         reshape_var   the first variable's last two dimensions swap
 *         no_momentum   the momentum accumulators and the optimizer's name
 *                       are left out (an sgd checkpoint of an older build)
 *         version       a valid payload under format version 99
 *         no_parts      the run state without the worker parts' own examples
 *                       and their split (a file of a build before them)
 *         negative_examples  the run state's examples_consumed is -5
 *         zero_vars     every variable and moving average 0 (a valid file whose
 *                       logits all tie, for eval's tie rule)
 *         huge_vars     every variable and moving average 1e30 (finite; the
 *                       logits overflow: eval's non-finite rule)
 *
 *   test_fault_helper run CKPT
 *       Prints the run state of the checkpoint CKPT (dir/model.ckpt-N, read
 *       with ckpt_read) on one line: `step N examples E parts P0,P1,...
 *       split S` (parts and split `-` when it records none).
 *
 *   test_fault_helper idx IMAGES LABELS N
 *   test_fault_helper cifar OUT N
 *       Writes N synthetic examples (label i % 10, a label-dependent stripe
 *       plus noise) as raw IDX files (28x28x1) or one CIFAR-10 binary file
 *       (32x32x3), for `tower convert`: the tests need no data set.
 */
#include <ctype.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "ps/checkpoint.h"
#include "ps/checkpoint.pb-c.h"

static int is_ckpt_name(const char *name, long *step) {
    const char *prefix = "model.ckpt-";
    size_t plen = strlen(prefix);
    if (strncmp(name, prefix, plen) != 0 || name[plen] == '\0') return 0;
    for (const char *p = name + plen; *p; p++)
        if (!isdigit((unsigned char)*p)) return 0;
    *step = strtol(name + plen, NULL, 10);
    return 1;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The names listed by the index (model_checkpoint_path first); -1 when it
 * does not parse.  names: [cap][256]. */
static int read_index(const char *path, char names[][256], int cap, int *n_names) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[1024];
    int ok = 1, have_latest = 0;
    *n_names = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[strlen(line) - 1] != '\n') ok = 0; /* a line cut short: half-written */
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0]) continue;
        const char *keys[2] = {"model_checkpoint_path: \"", "all_model_checkpoint_paths: \""};
        int which = -1;
        for (int k = 0; k < 2; k++)
            if (strncmp(line, keys[k], strlen(keys[k])) == 0) which = k;
        if (which < 0) { ok = 0; break; }
        const char *v = line + strlen(keys[which]);
        const char *end = strchr(v, '"');
        if (!end || end[1] != '\0' || end == v || end - v >= 256 || *n_names >= cap) { ok = 0; break; }
        if (which == 0) have_latest = 1;
        memcpy(names[*n_names], v, (size_t)(end - v));
        names[*n_names][end - v] = '\0';
        (*n_names)++;
    }
    fclose(f);
    return ok && have_latest ? 0 : -1;
}

static int check_dir(const char *dir) {
    int n_bad = 0;
    char path[4096], err[1024];
    static char listed[1100][256];
    int n_listed = 0;
    long latest = -1;
    snprintf(path, sizeof path, "%s/checkpoint", dir);
    struct stat st;
    int have_index = stat(path, &st) == 0;
    if (have_index && read_index(path, listed, 1100, &n_listed) != 0) {
        printf("bad %s: the index does not parse\n", path);
        n_bad++;
        n_listed = 0;
    }
    DIR *d = opendir(dir);
    if (!d) {
        printf("bad %s: cannot open the directory\n", dir);
        return 1;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long step;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (ends_with(e->d_name, ".tmp")) {
            long n_bytes = stat(path, &st) == 0 ? (long)st.st_size : -1;
            printf("tmp %s %ld\n", e->d_name, n_bytes);
            continue;
        }
        if (!is_ckpt_name(e->d_name, &step)) continue;
        CkptContents ck;
        if (ckpt_read(path, &ck, err, sizeof err) != 0) {
            printf("bad %s\n", err);
            n_bad++;
            continue;
        }
        if (ck.global_step != step) {
            printf("bad %s: holds global_step %ld\n", path, ck.global_step);
            n_bad++;
        }
        ckpt_contents_free(&ck);
        int in_index = 0;
        for (int i = 0; i < n_listed; i++) in_index |= strcmp(listed[i], e->d_name) == 0;
        if (!in_index) printf("orphan %s\n", e->d_name);
    }
    closedir(d);
    for (int i = 0; i < n_listed; i++) {
        long step;
        snprintf(path, sizeof path, "%s/%s", dir, listed[i]);
        char shards[4200];
        snprintf(shards, sizeof shards, "%s.shards", path);
        const int sharded = stat(path, &st) != 0 && stat(shards, &st) == 0;
        if (!is_ckpt_name(listed[i], &step) || (stat(path, &st) != 0 && !sharded)) {
            printf("bad %s/checkpoint: lists '%s', which is not there\n", dir, listed[i]);
            n_bad++;
            continue;
        }
        if (sharded) {
            CkptContents ck;
            if (ckpt_read(path, &ck, err, sizeof err) != 0) {
                printf("bad %s (listed, in shards)\n", err);
                n_bad++;
                continue;
            }
            const long held = ck.global_step;
            ckpt_contents_free(&ck);
            if (held != step) {
                printf("bad %s: its shards hold global_step %ld\n", path, held);
                n_bad++;
                continue;
            }
        }
        if (i == 0) latest = step;
    }
    printf("latest %ld\n", latest);
    return n_bad ? 1 : 0;
}

/* ---- forge ---- */

static uint8_t *read_file(const char *path, size_t *n_bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = n > 0 ? malloc((size_t)n) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *n_bytes = (size_t)n;
    return b;
}

static void put_le(uint8_t *p, uint64_t v, int n_bytes) {
    for (int i = 0; i < n_bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Drops the last tensor of a section, or appends `extra` to it. */
static void edit_section(Tower__Tensor ***tensors, size_t *n, const char *kind, Tower__Tensor *extra,
                         Tower__Tensor **grown) {
    if (*n == 0) return;
    if (!strcmp(kind, "drop_var")) {
        (*n)--;
    } else if (!strcmp(kind, "extra_var")) {
        memcpy(grown, *tensors, *n * sizeof *grown);
        grown[(*n)++] = extra;
        *tensors = grown;
    }
}

static int forge(const char *in, const char *out, const char *kind) {
    size_t n_bytes;
    uint8_t *b = read_file(in, &n_bytes);
    if (!b || n_bytes < CKPT_HEADER_N_BYTES) {
        fprintf(stderr, "forge: cannot read %s\n", in);
        free(b);
        return 1;
    }
    Tower__Checkpoint *m = tower__checkpoint__unpack(NULL, n_bytes - CKPT_HEADER_N_BYTES, b + CKPT_HEADER_N_BYTES);
    if (!m || m->n_variables < 2) {
        fprintf(stderr, "forge: %s does not decode\n", in);
        free(b);
        return 1;
    }
    uint32_t version = CKPT_FORMAT_VERSION;
    static float extra_data[3];
    int32_t extra_shape[1] = {3};
    Tower__Tensor extra;
    tower__tensor__init(&extra);
    extra.name = "forged/biases";
    extra.n_shape = 1;
    extra.shape = extra_shape;
    extra.n_data = 3;
    extra.data = extra_data;
    Tower__Tensor *grown[3][MODEL_MAX_VARS + 1];
    /* What the edits change, put back before free_unpacked frees the message. */
    const Tower__Checkpoint saved = *m;
    char *saved_name = m->variables[0]->name;
    const Tower__RunState saved_run = *m->run;
    if (!strcmp(kind, "rename_var")) {
        m->variables[0]->name = "forged/weights";
    } else if (!strcmp(kind, "drop_var") || !strcmp(kind, "extra_var")) {
        edit_section(&m->variables, &m->n_variables, kind, &extra, grown[0]);
        edit_section(&m->momentum, &m->n_momentum, kind, &extra, grown[1]);
        edit_section(&m->moving_averages, &m->n_moving_averages, kind, &extra, grown[2]);
    } else if (!strcmp(kind, "reshape_var")) {
        Tower__Tensor *t = m->variables[0];
        size_t a = t->n_shape - 2, z = t->n_shape - 1; /* the last two dimensions swap */
        if (t->n_shape < 2 || t->shape[a] == t->shape[z]) {
            fprintf(stderr, "forge: the first variable of %s has no two different dimensions\n", in);
            tower__checkpoint__free_unpacked(m, NULL);
            free(b);
            return 1;
        }
        int32_t s = t->shape[a];
        t->shape[a] = t->shape[z];
        t->shape[z] = s;
    } else if (!strcmp(kind, "no_momentum")) {
        m->n_momentum = 0;
        m->optimizer = (char *)""; /* as a file from before the optimizer table, saved with sgd */
    } else if (!strcmp(kind, "version")) {
        version = 99;
    } else if (!strcmp(kind, "no_parts")) {
        m->run->n_part_examples_consumed = 0;
        m->run->input_split = (char *)"";
    } else if (!strcmp(kind, "negative_examples")) {
        m->run->examples_consumed = -5;
    } else if (!strcmp(kind, "zero_vars")) { /* every logit 0: each example's classes all tie */
        for (size_t k = 0; k < m->n_variables; k++) memset(m->variables[k]->data, 0, m->variables[k]->n_data * sizeof(float));
        for (size_t k = 0; k < m->n_moving_averages; k++)
            memset(m->moving_averages[k]->data, 0, m->moving_averages[k]->n_data * sizeof(float));
    } else if (!strcmp(kind, "huge_vars")) { /* finite variables whose products overflow: non-finite logits */
        for (size_t k = 0; k < m->n_variables; k++)
            for (size_t i = 0; i < m->variables[k]->n_data; i++) m->variables[k]->data[i] = 1e30f;
        for (size_t k = 0; k < m->n_moving_averages; k++)
            for (size_t i = 0; i < m->moving_averages[k]->n_data; i++) m->moving_averages[k]->data[i] = 1e30f;
    } else {
        fprintf(stderr, "forge: unknown kind '%s'\n", kind);
        tower__checkpoint__free_unpacked(m, NULL);
        free(b);
        return 1;
    }
    size_t payload_n_bytes = tower__checkpoint__get_packed_size(m);
    uint8_t *payload = malloc(payload_n_bytes);
    tower__checkpoint__pack(m, payload);
    uint8_t header[CKPT_HEADER_N_BYTES];
    memcpy(header, "TWRCKPT\0", 8);
    put_le(header + 8, version, 4);
    put_le(header + 12, payload_n_bytes, 8);
    put_le(header + 20, (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), payload, payload_n_bytes), 4);
    FILE *f = fopen(out, "wb");
    int ok = f && fwrite(header, 1, sizeof header, f) == sizeof header &&
             fwrite(payload, 1, payload_n_bytes, f) == payload_n_bytes;
    if (f && fclose(f) != 0) ok = 0;
    m->variables = saved.variables;
    m->n_variables = saved.n_variables;
    m->momentum = saved.momentum;
    m->n_momentum = saved.n_momentum;
    m->optimizer = saved.optimizer;
    m->moving_averages = saved.moving_averages;
    m->n_moving_averages = saved.n_moving_averages;
    m->variables[0]->name = saved_name;
    *m->run = saved_run;
    tower__checkpoint__free_unpacked(m, NULL);
    free(payload);
    free(b);
    if (!ok) {
        fprintf(stderr, "forge: cannot write %s\n", out);
        return 1;
    }
    return 0;
}

/* ---- synthetic data ---- */

static uint8_t pixel(uint64_t *state, int label, int row) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    int noise = (int)(*state >> 58); /* 0..63 */
    return (uint8_t)((row / 3 == label ? 160 : 0) + noise);
}

static int write_idx(const char *images, const char *labels, long n) {
    FILE *fi = fopen(images, "wb"), *fl = fopen(labels, "wb");
    if (!fi || !fl) {
        fprintf(stderr, "idx: cannot create %s or %s\n", images, labels);
        if (fi) fclose(fi);
        if (fl) fclose(fl);
        return 1;
    }
    uint8_t h[16] = {0, 0, 8, 3};
    for (int i = 0; i < 4; i++) h[4 + i] = (uint8_t)(n >> (8 * (3 - i)));
    h[11] = 28;
    h[15] = 28;
    fwrite(h, 1, 16, fi);
    uint8_t hl[8] = {0, 0, 8, 1};
    memcpy(hl + 4, h + 4, 4);
    fwrite(hl, 1, 8, fl);
    uint64_t state = 1;
    uint8_t img[28 * 28];
    for (long i = 0; i < n; i++) {
        int label = (int)(i % 10);
        for (int k = 0; k < 28 * 28; k++) img[k] = pixel(&state, label, k / 28);
        fwrite(img, 1, sizeof img, fi);
        uint8_t l = (uint8_t)label;
        fwrite(&l, 1, 1, fl);
    }
    int ok = !ferror(fi) && !ferror(fl);
    ok &= fclose(fi) == 0;
    ok &= fclose(fl) == 0;
    return ok ? 0 : 1;
}

static int write_cifar(const char *out, long n) {
    FILE *f = fopen(out, "wb");
    if (!f) {
        fprintf(stderr, "cifar: cannot create %s\n", out);
        return 1;
    }
    uint64_t state = 2;
    uint8_t rec[1 + 3072];
    for (long i = 0; i < n; i++) {
        int label = (int)(i % 10);
        rec[0] = (uint8_t)label;
        for (int k = 0; k < 3072; k++) rec[1 + k] = pixel(&state, label, (k % 1024) / 32);
        fwrite(rec, 1, sizeof rec, f);
    }
    int ok = !ferror(f);
    ok &= fclose(f) == 0;
    return ok ? 0 : 1;
}

/* ---- the run state ---- */

static int print_run(const char *path) {
    CkptContents c;
    char err[1024];
    if (ckpt_read(path, &c, err, sizeof err) != 0) {
        fprintf(stderr, "run: %s\n", err);
        return 1;
    }
    printf("step %ld examples %ld parts ", c.global_step, c.run.examples_consumed);
    for (int w = 0; w < c.run.n_parts; w++) printf("%s%ld", w ? "," : "", c.run.part_examples_consumed[w]);
    printf("%s split %s\n", c.run.n_parts ? "" : "-", c.run.input_split[0] ? c.run.input_split : "-");
    ckpt_contents_free(&c);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "idx")) return write_idx(argv[2], argv[3], atol(argv[4]));
    if (argc == 4 && !strcmp(argv[1], "cifar")) return write_cifar(argv[2], atol(argv[3]));
    if (argc == 3 && !strcmp(argv[1], "check")) return check_dir(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "run")) return print_run(argv[2]);
    if (argc == 5 && !strcmp(argv[1], "forge")) return forge(argv[2], argv[3], argv[4]);
    fprintf(stderr, "usage: test_fault_helper check DIR | run CKPT | forge IN OUT KIND | idx IMAGES LABELS N | cifar OUT N\n");
    return 2;
}
