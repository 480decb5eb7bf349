/* fuzz_checkpoint.c — fuzz target of the checkpoint loader (ps/checkpoint.h):
 * ckpt_read, ckpt_load into a ParamServer, the `checkpoint` index, and a
 * sharded checkpoint (manifest and shards, joined).
 *
 * Where it sits: tests/fuzz/; the files `tower train --resume`, `tower
 * eval` and `tower export` read back.  The first input byte b picks what the
 * rest is: mode 3 when b % 4 == 3, else mode b % 3 (so every first byte
 * keeps the meaning it had before mode 3, except 3, 7, 11, ...: those were
 * b % 3 and are now mode 3):
 *   0  a tower.Checkpoint payload: the target writes the 24-byte header
 *      around it (magic, version 1, length, crc32), so mutations reach the
 *      protobuf decoding and the name/shape mapping instead of stopping at
 *      the checksum;
 *   1  a whole model.ckpt-STEP file, header included (the header checks);
 *   2  the text of a train dir's `checkpoint` index, read by
 *      ckpt_find_latest and ckpt_latest;
 *   3  a sharded checkpoint (ckpt_commit_shards, docs/hosts.md "Checkpoints
 *      across ranks"): the rest is cut at each SHARD_SEP ("\n%%shard%%\n",
 *      at most 4 cuts; a later separator is part of the 4th payload):
 *          MANIFEST [SEP PAYLOAD_0 [SEP PAYLOAD_1 [SEP PAYLOAD_2 [SEP PAYLOAD_3]]]]
 *      MANIFEST is written as it is to DIR/model.ckpt-1.shards (text:
 *      `n_shards: N`, one `shard: "NAME"` a line), and payload k of n as
 *      DIR/model.ckpt-1.shard-0000k-of-0000n with mode 0's header around it
 *      (so mutations reach the manifest parsing and the join, not the
 *      checksum); the base DIR/model.ckpt-1 itself never exists, and the
 *      checks below read that base.  scripts/fuzz-corpus.sh makes such inputs
 *      from real checkpoints cut into shards as ckpt_save_shard writes them.
 * A checkpoint goes through ckpt_read (the model and shape come from
 * the file) and, when that accepts it, ckpt_load into a ParamServer built
 * for that model and its options, which must accept it too and restore the same bits, run
 * state and step; it also goes through ckpt_load into a fixed server
 * (mnist on 4x4x1 inputs, 10 classes, momentum and moving averages: the
 * model of the seed corpus), which must leave the server untouched when it
 * refuses.  Every refusal is one line naming the file (of a sharded
 * checkpoint: the base, its manifest, or a shard in its directory).
 * What it does not do: no saving (ckpt_save writes what it is given).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "fuzz_common.h"
#include "ps/checkpoint.h"
#include "ps/ps.h"

static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* (header, payload) as a checkpoint file: a valid 24-byte header (magic, version, length, crc32) around payload.
 * Returns a malloc'd buffer of CKPT_HEADER_N_BYTES + n bytes. */
static uint8_t *with_header(const uint8_t *payload, size_t n) {
    uint8_t *buf = malloc(CKPT_HEADER_N_BYTES + n);
    FUZZ_REQUIRE(buf != NULL, "out of memory");
    memcpy(buf, "TWRCKPT", 8);
    put_le32(buf + 8, CKPT_FORMAT_VERSION);
    for (int i = 0; i < 8; i++) buf[12 + i] = (uint8_t)((uint64_t)n >> (8 * i));
    put_le32(buf + 20, (uint32_t)crc32_z(0, n ? payload : Z_NULL, n));
    if (n) memcpy(buf + CKPT_HEADER_N_BYTES, payload, n);
    return buf;
}

/* Mode 3's directory and base (set once the first sharded input comes): a refusal of the base names the base,
 * its manifest (base.shards) or a shard in the directory. */
static char shard_dir[512], shard_base[600];

static void require_refusal_line(const char *err, const char *path, const char *what) {
    if (!shard_base[0] || strcmp(path, shard_base) != 0) {
        fuzz_require_line(err, path, what);
        return;
    }
    FUZZ_REQUIRE(err && err[0] && !strchr(err, '\n'), "%s: not one line: \"%s\"", what, err ? err : "(null)");
    const size_t nb = strlen(shard_base), nd = strlen(shard_dir);
    const int names_base = !strncmp(err, shard_base, nb) && (err[nb] == ':' || !strncmp(err + nb, ".shards:", 8));
    const int names_shard = !strncmp(err, shard_dir, nd) && err[nd] == '/' && strchr(err + nd + 1, ':') != NULL;
    FUZZ_REQUIRE(names_base || names_shard, "%s: message \"%s\" names neither %s, its manifest nor a shard in %s",
                 what, err, shard_base, shard_dir);
}

/* The fixed server and a copy of its state, to see that a refused load leaves it alone. */
static ParamServer *fixed;
static float *fixed_copy; /* (3 * n_params) params, the Momentum slot, ema */
static long fixed_step;

static void snapshot_fixed(void) {
    size_t n = fixed->spec.n_params;
    memcpy(fixed_copy, fixed->params, n * sizeof(float));
    memcpy(fixed_copy + n, fixed->slots[0], n * sizeof(float));
    memcpy(fixed_copy + 2 * n, fixed->ema, n * sizeof(float));
    fixed_step = fixed->global_step;
}

static void setup(void) {
    ModelSpec spec;
    char err[256];
    FUZZ_REQUIRE(model_spec_init(&spec, "mnist", 4, 4, 1, 10, err, sizeof err) == 0, "model_spec_init: %s", err);
    PsConfig pc;
    ps_config_defaults(&pc);
    fixed = ps_create(&spec, 1, &pc, host_alloc_default(), 1);
    FUZZ_REQUIRE(fixed && fixed->slots[0] && fixed->ema, "ps_create failed");
    fixed_copy = malloc(3 * spec.n_params * sizeof(float));
    FUZZ_REQUIRE(fixed_copy != NULL, "out of memory");
    snapshot_fixed();
}

static void check_fixed_unchanged(void) {
    size_t n = fixed->spec.n_params;
    FUZZ_REQUIRE(!memcmp(fixed_copy, fixed->params, n * sizeof(float)) &&
                     !memcmp(fixed_copy + n, fixed->slots[0], n * sizeof(float)) &&
                     !memcmp(fixed_copy + 2 * n, fixed->ema, n * sizeof(float)) && fixed_step == fixed->global_step,
                 "a refused ckpt_load changed the server");
}

/* ckpt_read, then ckpt_load into a server of the model the file names. */
static void read_and_reload(const char *path) {
    CkptContents c;
    char err[1024];
    if (ckpt_read(path, &c, err, sizeof err) != 0) {
        require_refusal_line(err, path, "ckpt_read");
        FUZZ_REQUIRE(!c.params && !c.slots[0] && c.n_slots == 0 && !c.ema && c.n_params == 0, "ckpt_read failed without zeroing its output");
        return;
    }
    ModelSpec spec;
    char why[256];
    /* The server as the file names it, options included (ckpt_read's, as the network reads them).  A file may
     * record options its network ignores (regress/checkpoint/cifar10-width-option: a cifar10 file saying
     * --width_multiplier 1.00027, which ckpt_load once refused while ckpt_read took it). */
    FUZZ_REQUIRE(model_spec_init_opts(&spec, c.model, c.H, c.W, c.C, c.num_classes, &c.opts, why, sizeof why) == 0,
                 "ckpt_read accepted model '%s' %dx%dx%d/%d that model_spec_init_opts refuses: %s", c.model, c.H, c.W,
                 c.C, c.num_classes, why);
    FUZZ_REQUIRE(c.params && spec.n_params == c.n_params, "ckpt_read: %zu params, the spec has %zu", c.n_params, spec.n_params);
    /* A model the spec accepts has no empty variable (an input shape too large
     * for the plan's int sizes once gave local3/weights a shape of (0, 1024)). */
    for (int v = 0; v < spec.n_vars; v++)
        FUZZ_REQUIRE(spec.vars[v].n_floats > 0, "ckpt_read accepted model '%s' on %dx%dx%d whose '%s' holds no value", c.model, c.H,
                     c.W, c.C, spec.vars[v].name);
    FUZZ_REQUIRE(c.global_step >= 0, "ckpt_read: global_step %ld", c.global_step);
    PsConfig pc;
    ps_config_defaults(&pc);
    /* Momentum slots alone resume momentum; anything else loads into sgd, which takes any slots. */
    const int momentum = c.n_slots == 1 && !strcmp(c.slot_names[0], "Momentum");
    if (!momentum) pc.opt.kind = OPT_SGD;
    if (!c.ema) pc.ema_decay = 0.0f;
    ParamServer *ps = ps_create(&spec, 1, &pc, host_alloc_default(), 2);
    FUZZ_REQUIRE(ps != NULL, "ps_create failed for the model ckpt_read accepted");
    CkptRunState run;
    memset(&run, 0, sizeof run);
    FUZZ_REQUIRE(ckpt_load(path, ps, &run, err, sizeof err) == 0, "ckpt_read accepted the file but ckpt_load refuses it: %s", err);
    size_t nb = c.n_params * sizeof(float);
    FUZZ_REQUIRE(!memcmp(ps->params, c.params, nb), "ckpt_load and ckpt_read restored different variables");
    FUZZ_REQUIRE(!momentum || !memcmp(ps->slots[0], c.slots[0], nb), "ckpt_load and ckpt_read restored different momentum");
    FUZZ_REQUIRE(!c.ema || !memcmp(ps->ema, c.ema, nb), "ckpt_load and ckpt_read restored different moving averages");
    FUZZ_REQUIRE(ps->global_step == c.global_step && run.seed == c.run.seed && run.examples_consumed == c.run.examples_consumed &&
                     run.n_towers == c.run.n_towers && run.batch_size == c.run.batch_size,
                 "ckpt_load and ckpt_read restored a different step or run state");
    ps_free(ps);
    ckpt_contents_free(&c);
}

static void load_fixed(const char *path) {
    char err[1024];
    CkptRunState run;
    if (ckpt_load(path, fixed, &run, err, sizeof err) == 0) {
        snapshot_fixed();
        return;
    }
    require_refusal_line(err, path, "ckpt_load");
    check_fixed_unchanged();
}

static void index_file(const uint8_t *text, size_t n) {
    static char dir[512], index_path[600];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/train", fuzz_scratch_dir());
        FUZZ_REQUIRE(mkdir(dir, 0755) == 0, "mkdir %s failed", dir);
        snprintf(index_path, sizeof index_path, "%s/" CKPT_INDEX_NAME, dir);
    }
    fuzz_write_path(index_path, text, n);
    char path[4096], err[1024];
    int r = ckpt_find_latest(dir, path, sizeof path, err, sizeof err);
    FUZZ_REQUIRE(r == -1 || r == 1, "ckpt_find_latest returned %d with an index present", r);
    if (r == -1) fuzz_require_line(err, index_path, "ckpt_find_latest");
    FUZZ_REQUIRE(ckpt_latest(dir, path, sizeof path) == r, "ckpt_latest and ckpt_find_latest disagree");
    if (r == 1) {
        /* dir is absolute, and so is an absolute name in the index. */
        FUZZ_REQUIRE(path[0] == '/' && strlen(path) < sizeof path, "ckpt_latest: path \"%s\"", path);
        /* A buffer too small must be refused, not overrun. */
        char small[24];
        int r2 = ckpt_latest(dir, small, sizeof small);
        FUZZ_REQUIRE(r2 == (strlen(path) < sizeof small ? 1 : -1), "ckpt_latest with a %zu-byte buffer returned %d for \"%s\"",
                     sizeof small, r2, path);
    }
}

/* Mode 3: the manifest and up to 4 shards (see the header), read through the base path. */
#define SHARD_SEP "\n%%shard%%\n"
#define SHARD_MAX_PAYLOADS 4

static void sharded(const uint8_t *body, size_t n) {
    static char written[1 + SHARD_MAX_PAYLOADS][700];
    static int n_written;
    if (!shard_dir[0]) {
        snprintf(shard_dir, sizeof shard_dir, "%s/sharded", fuzz_scratch_dir());
        FUZZ_REQUIRE(mkdir(shard_dir, 0755) == 0, "mkdir %s failed", shard_dir);
        snprintf(shard_base, sizeof shard_base, "%s/model.ckpt-1", shard_dir);
    }
    /* The previous input's files go: a shard it wrote must not stand in for one this input lacks. */
    for (int k = 0; k < n_written; k++) FUZZ_REQUIRE(unlink(written[k]) == 0, "unlink %s failed", written[k]);
    n_written = 0;
    const uint8_t *part[1 + SHARD_MAX_PAYLOADS];
    size_t part_n[1 + SHARD_MAX_PAYLOADS];
    int n_parts = 0;
    const size_t sep_n = strlen(SHARD_SEP);
    const uint8_t *p = body, *end = body + n;
    while (n_parts < SHARD_MAX_PAYLOADS) {
        const uint8_t *s = memmem(p, (size_t)(end - p), SHARD_SEP, sep_n);
        if (!s) break;
        part[n_parts] = p;
        part_n[n_parts++] = (size_t)(s - p);
        p = s + sep_n;
    }
    part[n_parts] = p;
    part_n[n_parts++] = (size_t)(end - p);
    const int n_shards = n_parts - 1;
    snprintf(written[n_written], sizeof written[0], "%s.shards", shard_base);
    fuzz_write_path(written[n_written++], part[0], part_n[0]);
    for (int k = 0; k < n_shards; k++) {
        snprintf(written[n_written], sizeof written[0], "%s.shard-%05d-of-%05d", shard_base, k, n_shards);
        uint8_t *file = with_header(part[1 + k], part_n[1 + k]);
        fuzz_write_path(written[n_written++], file, CKPT_HEADER_N_BYTES + part_n[1 + k]);
        free(file);
    }
    read_and_reload(shard_base);
    load_fixed(shard_base);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FuzzFile file;
    if (!fixed) {
        setup();
        fuzz_file_init(&file, "fuzz_checkpoint");
    }
    if (size > ((size_t)64 << 20)) return 0;
    int mode = !size ? 1 : data[0] % 4 == 3 ? 3 : data[0] % 3;
    const uint8_t *body = size ? data + 1 : data;
    size_t n = size ? size - 1 : 0;
    if (mode == 2) {
        index_file(body, n);
        return 0;
    }
    if (mode == 3) {
        sharded(body, n);
        return 0;
    }
    if (mode == 0) {
        uint8_t *buf = with_header(body, n);
        fuzz_file_set(&file, buf, CKPT_HEADER_N_BYTES + n);
        free(buf);
    } else {
        fuzz_file_set(&file, body, n);
    }
    read_and_reload(file.path);
    load_fixed(file.path);
    return 0;
}
