/* fuzz_checkpoint.c — fuzz target of the checkpoint loader (ps/checkpoint.h):
 * ckpt_read, ckpt_load into a ParamServer, and the `checkpoint` index.
 *
 * Where it sits: tests/fuzz/; the files `tower train --resume`, `tower
 * eval` and `tower export` read back.  The first input byte picks what the
 * rest is (mod 3):
 *   0  a tower.Checkpoint payload: the target writes the 24-byte header
 *      around it (magic, version 1, length, crc32), so mutations reach the
 *      protobuf decoding and the name/shape mapping instead of stopping at
 *      the checksum;
 *   1  a whole model.ckpt-STEP file, header included (the header checks);
 *   2  the text of a train dir's `checkpoint` index, read by
 *      ckpt_find_latest and ckpt_latest.
 * A checkpoint file goes through ckpt_read (the model and shape come from
 * the file) and, when that accepts it, ckpt_load into a ParamServer built
 * for that model and its options, which must accept it too and restore the same bits, run
 * state and step; it also goes through ckpt_load into a fixed server
 * (mnist on 4x4x1 inputs, 10 classes, momentum and moving averages: the
 * model of the seed corpus), which must leave the server untouched when it
 * refuses.  Every refusal is one line naming the file.
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
        fuzz_require_line(err, path, "ckpt_read");
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
    fuzz_require_line(err, path, "ckpt_load");
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FuzzFile file;
    if (!fixed) {
        setup();
        fuzz_file_init(&file, "fuzz_checkpoint");
    }
    if (size > ((size_t)64 << 20)) return 0;
    int mode = size ? data[0] % 3 : 1;
    const uint8_t *body = size ? data + 1 : data;
    size_t n = size ? size - 1 : 0;
    if (mode == 2) {
        index_file(body, n);
        return 0;
    }
    if (mode == 0) {
        uint8_t *buf = malloc(CKPT_HEADER_N_BYTES + n);
        FUZZ_REQUIRE(buf != NULL, "out of memory");
        memcpy(buf, "TWRCKPT", 8);
        put_le32(buf + 8, CKPT_FORMAT_VERSION);
        for (int i = 0; i < 8; i++) buf[12 + i] = (uint8_t)((uint64_t)n >> (8 * i));
        put_le32(buf + 20, (uint32_t)crc32_z(0, n ? body : Z_NULL, n));
        if (n) memcpy(buf + CKPT_HEADER_N_BYTES, body, n);
        fuzz_file_set(&file, buf, CKPT_HEADER_N_BYTES + n);
        free(buf);
    } else {
        fuzz_file_set(&file, body, n);
    }
    read_and_reload(file.path);
    load_fixed(file.path);
    return 0;
}
