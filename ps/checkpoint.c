/* checkpoint.c — model.ckpt-STEP files and the `checkpoint` index
 * (format, atomicity and errors: ps/checkpoint.h).
 *
 * Where it sits: beside the parameter server; it serialises a ParamServer's
 * host arrays (no copies: the protobuf tensors point into them) and restores
 * them, mapping tensors onto the ModelSpec table by name.  It does not
 * decide when to save and never touches a tower.
 */
#include "ps/checkpoint.h"
#include "base/escape.h"
#include "base/file.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "ps/checkpoint.pb-c.h"

static const unsigned char CKPT_MAGIC[8] = {'T', 'W', 'R', 'C', 'K', 'P', 'T', '\0'};
#define CKPT_PREFIX "model.ckpt-"
#define CKPT_TMP_SUFFIX ".tmp"
#define CKPT_MAX_INDEX_ENTRIES CKPT_MAX_KEEP
#define CKPT_SLOT_NAME_MAX (MODEL_VAR_NAME_MAX + 32) /* "<variable>/<slot>" */

static CkptFault g_fault = CKPT_FAULT_NONE;

void ckpt_set_fault(CkptFault fault) { g_fault = fault; }

/* ---- small helpers ---- */

/* Formats the message into err.  Model and variable names come from the
 * file: every byte outside printable ASCII (a newline, an escape sequence)
 * is written as \xHH (base/escape.h), so the message stays one line and
 * prints safely. */
static int fail(char *err, size_t err_n_bytes, const char *fmt, ...) {
    if (err && err_n_bytes) {
        char raw[4096 + 1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(raw, sizeof raw, fmt, ap);
        va_end(ap);
        escape_str(err, err_n_bytes, raw);
    }
    return -1;
}

static int join_path(char *out, size_t out_n_bytes, const char *dir, const char *name) {
    int n = snprintf(out, out_n_bytes, "%s/%s", dir, name);
    return (n < 0 || (size_t)n >= out_n_bytes) ? -1 : 0;
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint32_t crc32_of(const uint8_t *data, size_t n_bytes) {
    return (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), data, n_bytes);
}

/* 1 when name is exactly "model.ckpt-<digits>" (no directory, no suffix). */
static int is_ckpt_name(const char *name) {
    size_t plen = strlen(CKPT_PREFIX);
    if (strncmp(name, CKPT_PREFIX, plen) != 0 || name[plen] == '\0') return 0;
    for (const char *p = name + plen; *p; p++)
        if (!isdigit((unsigned char)*p)) return 0;
    return 1;
}

static int fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Write dir/name through dir/name.tmp: write_body(f, ctx) (0, or the errno of a failed write), fflush, fsync,
 * rename, fsync(dir).  `fault_here` stops after the fsync of the temporary file (the test hook). */
static int write_atomic_with(const char *dir, const char *name, int (*write_body)(FILE *f, void *ctx), void *ctx,
                             int fault_here, char *err, size_t err_n_bytes) {
    char final_path[4096], tmp_path[4096];
    if (join_path(final_path, sizeof final_path, dir, name) != 0 ||
        snprintf(tmp_path, sizeof tmp_path, "%s" CKPT_TMP_SUFFIX, final_path) >= (int)sizeof tmp_path)
        return fail(err, err_n_bytes, "%s/%s: path too long", dir, name);
    FILE *f = fopen(tmp_path, "wb");
    if (!f) return fail(err, err_n_bytes, "%s: cannot create: %s", tmp_path, strerror(errno));
    const int write_errno = write_body(f, ctx);
    if (write_errno) {
        fclose(f);
        unlink(tmp_path);
        return fail(err, err_n_bytes, "%s: write failed: %s", tmp_path, strerror(write_errno));
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        int e = errno;
        fclose(f);
        unlink(tmp_path);
        return fail(err, err_n_bytes, "%s: flush/fsync failed: %s", tmp_path, strerror(e));
    }
    if (fclose(f) != 0) {
        int e = errno;
        unlink(tmp_path);
        return fail(err, err_n_bytes, "%s: close failed: %s", tmp_path, strerror(e));
    }
    if (fault_here)
        return fail(err, err_n_bytes, "%s: simulated crash before rename (test hook)", tmp_path);
    if (rename(tmp_path, final_path) != 0) {
        int e = errno;
        unlink(tmp_path);
        return fail(err, err_n_bytes, "%s: cannot rename to %s: %s", tmp_path, final_path, strerror(e));
    }
    if (fsync_dir(dir) != 0)
        return fail(err, err_n_bytes, "%s: fsync of the directory failed: %s", dir, strerror(errno));
    return 0;
}

typedef struct {
    const void *const *parts;
    const size_t *part_n_bytes;
    int n_parts;
} Parts;

static int write_parts(FILE *f, void *ctx) {
    const Parts *p = ctx;
    for (int i = 0; i < p->n_parts; i++)
        if (p->part_n_bytes[i] && fwrite(p->parts[i], 1, p->part_n_bytes[i], f) != p->part_n_bytes[i])
            return errno ? errno : EIO;
    return 0;
}

/* write_atomic_with of the n_parts buffers, one after another. */
static int write_atomic(const char *dir, const char *name, const void *const *parts, const size_t *part_n_bytes,
                        int n_parts, int fault_here, char *err, size_t err_n_bytes) {
    Parts p = {parts, part_n_bytes, n_parts};
    return write_atomic_with(dir, name, write_parts, &p, fault_here, err, err_n_bytes);
}

/* A checkpoint file's payload as protobuf-c packs it, into the file and its CRC through a 64 KiB chunk: no copy of
 * the whole payload in memory (one the size of the variables and slots was allocated at every save, and a save
 * late in a run could fail for it, losing every step since the last).  protobuf-c appends a variable's floats from
 * the server's own array, which an asynchronous server's updates may change meanwhile: the CRC and the file are
 * both taken from the chunk's copy, so they agree, as they did over the whole copy. */
typedef struct {
    ProtobufCBuffer base;
    FILE *f;
    uLong crc;
    size_t n_bytes;
    int errno_value; /* the first failed write's, or 0 */
    uint8_t chunk[(size_t)64 << 10];
} FileSink;

static void file_sink_append(ProtobufCBuffer *buffer, size_t len, const uint8_t *data) {
    FileSink *s = (FileSink *)buffer;
    s->n_bytes += len;
    while (len > 0 && !s->errno_value) {
        const size_t n = len < sizeof s->chunk ? len : sizeof s->chunk;
        memcpy(s->chunk, data, n);
        s->crc = crc32_z(s->crc, s->chunk, n);
        if (fwrite(s->chunk, 1, n, s->f) != n) s->errno_value = errno ? errno : EIO;
        data += n;
        len -= n;
    }
}

typedef struct {
    const Tower__Checkpoint *msg;
    size_t payload_n_bytes; /* get_packed_size's */
} Payload;

/* The header (its size and CRC zero until the payload is written, then filled in), then the payload. */
static int write_checkpoint_body(FILE *f, void *ctx) {
    const Payload *p = ctx;
    unsigned char header[CKPT_HEADER_N_BYTES];
    memset(header, 0, sizeof header);
    if (fwrite(header, 1, sizeof header, f) != sizeof header) return errno ? errno : EIO;
    FileSink *sink = malloc(sizeof *sink);
    if (!sink) return ENOMEM;
    *sink = (FileSink){.base = {file_sink_append}, .f = f, .crc = crc32_z(0L, Z_NULL, 0)};
    tower__checkpoint__pack_to_buffer(p->msg, &sink->base);
    const int errno_value = sink->errno_value, sized = sink->n_bytes == p->payload_n_bytes;
    const uLong crc = sink->crc;
    free(sink);
    if (errno_value) return errno_value;
    if (!sized) return EIO; /* protobuf-c packed other than it sized */
    memcpy(header, CKPT_MAGIC, 8);
    put_u32(header + 8, CKPT_FORMAT_VERSION);
    put_u64(header + 12, (uint64_t)p->payload_n_bytes);
    put_u32(header + 20, (uint32_t)crc);
    if (fseek(f, 0, SEEK_SET) != 0 || fwrite(header, 1, sizeof header, f) != sizeof header) return errno ? errno : EIO;
    return 0;
}

/* ---- the index file ---- */

typedef struct {
    int n;
    int overflow; /* 1: the index listed more than CKPT_MAX_INDEX_ENTRIES, the newest kept: not whole (no sweep) */
    char names[CKPT_MAX_INDEX_ENTRIES][256];
} IndexList;

/* Appends entry (index_entry_name's form) unless the list holds it (one file named by two paths); a full list
 * drops its oldest (first) entry for it: the newest, the latest among them, are the ones kept. */
static void index_list_add(IndexList *list, const char *entry) {
    for (int i = 0; i < list->n; i++)
        if (!strcmp(list->names[i], entry)) return;
    if (list->n == CKPT_MAX_INDEX_ENTRIES) {
        memmove(list->names[0], list->names[1], (size_t)(CKPT_MAX_INDEX_ENTRIES - 1) * sizeof list->names[0]);
        list->n--;
        list->overflow = 1;
    }
    snprintf(list->names[list->n++], sizeof list->names[0], "%s", entry);
}

/* An index entry as the list keeps it: a path into dir itself (TensorFlow 1's Saver writes absolute paths,
 * "/tmp/cifar10_train/model.ckpt-2"; "./model.ckpt-2") as its bare name, so that the sweep sees it listed and the
 * next index names it as Tower does; any other value as it is. */
static void index_entry_name(const char *dir, const char *value, char *out, size_t out_n_bytes) {
    const char *slash = strrchr(value, '/');
    struct stat in_dir, in_entry;
    char parent[4096];
    if (slash && slash[1] && (size_t)(slash - value) + strlen(dir) + 2 < sizeof parent) { /* "DIR/": not a file */
        /* The entry's folder: an absolute one as it is ("/model.ckpt-2": the root), a relative one from dir's. */
        const size_t n = slash == value ? 1 : (size_t)(slash - value);
        if (value[0] == '/') snprintf(parent, sizeof parent, "%.*s", (int)n, value);
        else snprintf(parent, sizeof parent, "%s/%.*s", dir, (int)n, value);
        if (stat(parent, &in_entry) == 0 && stat(dir, &in_dir) == 0 && in_entry.st_dev == in_dir.st_dev &&
            in_entry.st_ino == in_dir.st_ino) {
            snprintf(out, out_n_bytes, "%s", slash + 1);
            return;
        }
    }
    snprintf(out, out_n_bytes, "%s", value);
}

/* Lines of the checkpoint index and of a shard manifest are short (a name
 * of at most 255 bytes and its key): LINE_MAX_N_BYTES holds any valid one. */
#define LINE_MAX_N_BYTES 1024

/* Reads the next line of f into line (LINE_MAX_N_BYTES; the '\n' dropped,
 * and the line cut at a '\r', so CRLF files read as LF ones).  1: a line;
 * 0: the end of f; LINE_TOO_LONG: a line of LINE_MAX_N_BYTES bytes or more,
 * read to its end (fgets would hand its rest back as the next line);
 * LINE_NUL: a line holding a NUL byte (read as text, its tail would be
 * lost unseen). */
enum { LINE_TOO_LONG = -1, LINE_NUL = -2 };
static int read_line(FILE *f, char *line) {
    size_t n = 0;
    int c, over = 0, nul = 0;
    while ((c = getc(f)) != EOF && c != '\n') {
        nul |= c == '\0';
        if (n + 1 < LINE_MAX_N_BYTES) line[n++] = (char)c;
        else over = 1;
    }
    line[n] = '\0';
    if (c == EOF && n == 0) return 0;
    line[strcspn(line, "\r")] = '\0';
    return over ? LINE_TOO_LONG : nul ? LINE_NUL : 1;
}

/* Parse `line` of the form  key: "value"  into value (spaces may follow,
 * nothing else); returns 1 if the key matched, 0 if not, -1 if malformed. */
static int index_line_value(const char *line, const char *key, char *value, size_t value_n_bytes) {
    size_t klen = strlen(key);
    if (strncmp(line, key, klen) != 0 || line[klen] != ':') return 0;
    const char *p = line + klen + 1;
    while (*p == ' ') p++;
    if (*p != '"') return -1;
    p++;
    const char *end = strchr(p, '"');
    if (!end || end == p || (size_t)(end - p) >= value_n_bytes || end[strspn(end + 1, " \t") + 1] != '\0') return -1;
    memcpy(value, p, (size_t)(end - p));
    value[end - p] = '\0';
    return 1;
}

/* Read dir/checkpoint.  Returns 1 (read), 0 (no index), -1 (unreadable or
 * malformed, with one line in err saying why).  latest and list may be NULL.
 * The list holds every all_model_checkpoint_paths entry and the latest (an
 * index of only a model_checkpoint_path line lists that one, as TensorFlow's
 * CheckpointState counts it: a save must not sweep it as unlisted). */
static int index_read(const char *dir, char *latest, size_t latest_n_bytes, IndexList *list, char *err,
                      size_t err_n_bytes) {
    char path[4096];
    if (join_path(path, sizeof path, dir, CKPT_INDEX_NAME) != 0)
        return fail(err, err_n_bytes, "%s: path too long", dir);
    const char *not_regular;
    FILE *f = file_open_regular(path, &not_regular);
    if (!f && not_regular) return fail(err, err_n_bytes, "%s: the checkpoint index is not a regular file", path);
    if (!f) {
        if (errno == ENOENT || errno == ENOTDIR) return 0;
        return fail(err, err_n_bytes, "%s: cannot open the checkpoint index: %s", path, strerror(errno));
    }
    char line[LINE_MAX_N_BYTES], value[256], latest_name[256];
    int have_latest = 0, bad = 0, line_no = 0, got;
    if (list) list->n = list->overflow = 0;
    while ((got = read_line(f, line)) != 0) {
        line_no++;
        if (got == LINE_TOO_LONG) { bad = 2; break; }
        if (got == LINE_NUL) { bad = 1; break; }
        if (line[0] == '\0') continue;
        int r = index_line_value(line, "model_checkpoint_path", value, sizeof value);
        if (r == 1) {
            if (latest) {
                if (strlen(value) >= latest_n_bytes) { bad = 1; break; }
                strcpy(latest, value);
            }
            strcpy(latest_name, value);
            have_latest = 1;
            continue;
        }
        if (r == 0) r = index_line_value(line, "all_model_checkpoint_paths", value, sizeof value);
        if (r != 1) { bad = 1; break; }
        if (list) {
            char entry[256];
            index_entry_name(dir, value, entry, sizeof entry);
            index_list_add(list, entry);
        }
    }
    fclose(f);
    if (bad == 2)
        return fail(err, err_n_bytes, "%s: line %d of the checkpoint index is over %d bytes", path, line_no,
                    LINE_MAX_N_BYTES - 1);
    if (bad)
        return fail(err, err_n_bytes, "%s: line %d of the checkpoint index is not model_checkpoint_path: \"NAME\" "
                    "or all_model_checkpoint_paths: \"NAME\"", path, line_no);
    if (!have_latest)
        return fail(err, err_n_bytes, "%s: the checkpoint index has no model_checkpoint_path line", path);
    if (list) {
        char latest_entry[256];
        index_entry_name(dir, latest_name, latest_entry, sizeof latest_entry);
        index_list_add(list, latest_entry);
    }
    return 1;
}

int ckpt_find_latest(const char *dir, char *path, size_t path_n_bytes, char *err, size_t err_n_bytes) {
    char name[256];
    int r = index_read(dir, name, sizeof name, NULL, err, err_n_bytes);
    if (r <= 0) return r;
    if (name[0] == '/') {
        if (strlen(name) >= path_n_bytes)
            return fail(err, err_n_bytes, "%s/%s: the path it names is too long", dir, CKPT_INDEX_NAME);
        strcpy(path, name);
        return 1;
    }
    if (join_path(path, path_n_bytes, dir, name) != 0)
        return fail(err, err_n_bytes, "%s/%s: the path it names is too long", dir, CKPT_INDEX_NAME);
    return 1;
}

int ckpt_latest(const char *dir, char *path, size_t path_n_bytes) {
    return ckpt_find_latest(dir, path, path_n_bytes, NULL, 0);
}

/* ---- saving ---- */

/* Point storage[v] (and ptrs[v]) at variable v of block, without copying.
 *   block   : (n_params) params, a slot or ema
 *   storage : [n_vars] tensors filled here; ptrs: [n_vars] -> storage
 *   shapes  : [n_vars][4] the int32 shapes the tensors point to */
/* The tensors of the variables keep[v] != 0 selects (keep NULL: all), in
 * table order, pointing into block; returns how many. */
static size_t tensors_for(const ModelSpec *spec, const unsigned char *keep, const float *block,
                          Tower__Tensor *storage, Tower__Tensor **ptrs, int32_t shapes[][4]) {
    size_t n = 0;
    for (int v = 0; v < spec->n_vars; v++) {
        if (keep && !keep[v]) continue;
        const ModelVar *mv = &spec->vars[v];
        tower__tensor__init(&storage[n]);
        storage[n].name = (char *)mv->name;
        for (int d = 0; d < mv->ndim; d++) shapes[n][d] = mv->shape[d];
        storage[n].n_shape = (size_t)mv->ndim;
        storage[n].shape = shapes[n];
        storage[n].n_data = mv->n_floats;
        storage[n].data = (float *)(block + mv->offset);
        ptrs[n] = &storage[n];
        n++;
    }
    return n;
}

/* 1 when name is a file of checkpoint <base>: "model.ckpt-<digits>" itself,
 * its shard manifest "<base>.shards" or a shard "<base>.shard-..." (with
 * base written to base_out). */
static int ckpt_family(const char *name, char *base_out, size_t base_n_bytes) {
    const size_t plen = strlen(CKPT_PREFIX);
    if (strncmp(name, CKPT_PREFIX, plen) != 0 || !isdigit((unsigned char)name[plen])) return 0;
    size_t n = plen;
    while (isdigit((unsigned char)name[n])) n++;
    if (name[n] != '\0' && strcmp(name + n, ".shards") != 0 && strncmp(name + n, ".shard-", 7) != 0) return 0;
    if (n >= base_n_bytes) return 0;
    memcpy(base_out, name, n);
    base_out[n] = '\0';
    return 1;
}

int ckpt_dir_scan(const char *dir, char *newest, size_t newest_n_bytes) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int n = 0;
    unsigned long long best = 0;
    char base[256];
    while ((e = readdir(d)) != NULL) {
        if (!ckpt_family(e->d_name, base, sizeof base)) continue;
        const unsigned long long step = strtoull(base + strlen(CKPT_PREFIX), NULL, 10);
        if (n++ == 0 || step > best) {
            best = step;
            if (newest) snprintf(newest, newest_n_bytes, "%s", base);
        }
    }
    closedir(d);
    return n;
}

int ckpt_is_train_dir_file(const char *path) {
    const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
    char base[256], bare[256];
    if (!strcmp(name, CKPT_INDEX_NAME) || ckpt_family(name, base, sizeof base)) return 1; /* there or to come */
    const size_t n = strlen(name), tmp_n = strlen(CKPT_TMP_SUFFIX);
    if (n > tmp_n && n - tmp_n < sizeof bare && !strcmp(name + n - tmp_n, CKPT_TMP_SUFFIX)) { /* a save's .tmp */
        snprintf(bare, sizeof bare, "%.*s", (int)(n - tmp_n), name);
        if (!strcmp(bare, CKPT_INDEX_NAME) || ckpt_family(bare, base, sizeof base)) return 1;
    }
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    const char *not_regular;
    FILE *f = file_open_regular(path, &not_regular);
    if (!f) return 0;
    unsigned char magic[sizeof CKPT_MAGIC];
    const int is = fread(magic, 1, sizeof magic, f) == sizeof magic && !memcmp(magic, CKPT_MAGIC, sizeof magic);
    fclose(f);
    return is;
}

/* Delete checkpoint base: its single file, or its manifest and shards.  1 when something went. */
static int unlink_family(const char *dir, const char *base) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int removed = 0;
    char b[256], path[4096];
    while ((e = readdir(d)) != NULL)
        if (ckpt_family(e->d_name, b, sizeof b) && !strcmp(b, base) && join_path(path, sizeof path, dir, e->d_name) == 0 &&
            unlink(path) == 0)
            removed = 1;
    closedir(d);
    return removed;
}

/* Remove leftover temporary files of checkpoints or of the index, and, when
 * kept is not NULL, every checkpoint not among kept[0..n_kept): those a crash
 * left unlisted (killed after a checkpoint's rename but before the index's,
 * or before the dropped ones were deleted), which no later save would ever
 * delete.  Returns 1 when a checkpoint was removed. */
static int remove_stale(const char *dir, const char *const *kept, int n_kept) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    size_t slen = strlen(CKPT_TMP_SUFFIX);
    int removed = 0;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        char fam[256];
        if (kept && ckpt_family(e->d_name, fam, sizeof fam)) {
            int listed = 0;
            for (int i = 0; i < n_kept && !listed; i++) listed = strcmp(kept[i], fam) == 0;
            char path[4096];
            if (!listed && join_path(path, sizeof path, dir, e->d_name) == 0 && unlink(path) == 0) removed = 1;
            continue;
        }
        if (len <= slen || strcmp(e->d_name + len - slen, CKPT_TMP_SUFFIX) != 0) continue;
        char base[256];
        if (len - slen >= sizeof base) continue;
        memcpy(base, e->d_name, len - slen);
        base[len - slen] = '\0';
        char tmp_fam[256];
        if (!ckpt_family(base, tmp_fam, sizeof tmp_fam) && strcmp(base, CKPT_INDEX_NAME) != 0) continue;
        char path[4096];
        if (join_path(path, sizeof path, dir, e->d_name) == 0) unlink(path);
    }
    closedir(d);
    return removed;
}

size_t ckpt_max_n_bytes(const ParamServer *ps) {
    const size_t n_arrays = 1 + (size_t)ps->n_slots + (ps->ema ? 1 : 0);
    return n_arrays * ps->spec.n_params * sizeof(float) + ((size_t)64 << 10) +
           (size_t)ps->n_slots * (size_t)ps->spec.n_vars * (sizeof(Tower__Tensor) + CKPT_SLOT_NAME_MAX + 64);
}

/* Write dir/name: ps's variables that keep selects (NULL: all), their slots
 * and moving averages, the scalars, global_step and run, atomically. */
static int save_file(const char *dir, const char *name, const ParamServer *ps, const unsigned char *keep,
                     const CkptRunState *run, char *err, size_t err_n_bytes) {
    const ModelSpec *spec = &ps->spec;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return fail(err, err_n_bytes, "%s: cannot create the train dir: %s", dir, strerror(errno));

    Tower__Tensor vars[MODEL_MAX_VARS], moms[MODEL_MAX_VARS], emas[MODEL_MAX_VARS];
    Tower__Tensor *var_ptrs[MODEL_MAX_VARS], *mom_ptrs[MODEL_MAX_VARS], *ema_ptrs[MODEL_MAX_VARS];
    int32_t shapes[MODEL_MAX_VARS][4];
    Tower__Checkpoint msg;
    Tower__RunState rs;
    int64_t part_counts[CKPT_MAX_PARTS];
    int32_t shard_sizes[CKPT_MAX_PARTS];
    tower__checkpoint__init(&msg);
    tower__run_state__init(&rs);
    msg.model = (char *)spec->name;
    msg.height = spec->H;
    msg.width = spec->W;
    msg.channels = spec->C;
    msg.num_classes = spec->num_classes;
    msg.global_step = ps->global_step;
    msg.n_variables = tensors_for(spec, keep, ps->params, vars, var_ptrs, shapes);
    msg.variables = var_ptrs;
    /* The optimizer's slots: the Momentum slot in its own section under the
     * variables' names (format version 1), every other one in `slots` as
     * "<variable>/<slot>"; then the scalars. */
    const size_t n_other = (size_t)ps->n_slots * (size_t)spec->n_vars;
    Tower__Tensor *slot_tensors = calloc(n_other ? n_other : 1, sizeof *slot_tensors);
    Tower__Tensor **slot_ptrs = calloc(n_other ? n_other : 1, sizeof *slot_ptrs);
    char (*slot_names)[CKPT_SLOT_NAME_MAX] = calloc(n_other ? n_other : 1, sizeof *slot_names);
    int32_t (*slot_shapes)[4] = calloc(n_other ? n_other : 1, sizeof *slot_shapes);
    if (!slot_tensors || !slot_ptrs || !slot_names || !slot_shapes) {
        free(slot_tensors), free(slot_ptrs), free(slot_names), free(slot_shapes);
        return fail(err, err_n_bytes, "%s/%s: out of memory for the slot tensors", dir, name);
    }
    size_t n_slot_tensors = 0;
    for (int k = 0; k < ps->n_slots; k++) {
        if (ps->slot_info[k].momentum_field) {
            msg.n_momentum = tensors_for(spec, keep, ps->slots[k], moms, mom_ptrs, shapes);
            msg.momentum = mom_ptrs;
            continue;
        }
        Tower__Tensor *t = slot_tensors + n_slot_tensors;
        const size_t n = tensors_for(spec, keep, ps->slots[k], t, slot_ptrs + n_slot_tensors, slot_shapes + n_slot_tensors);
        for (size_t v = 0; v < n; v++) {
            char *nm = slot_names[n_slot_tensors + v];
            snprintf(nm, CKPT_SLOT_NAME_MAX, "%s/%s", t[v].name, ps->slot_info[k].name);
            t[v].name = nm;
        }
        n_slot_tensors += n;
    }
    msg.n_slots = n_slot_tensors;
    msg.slots = slot_ptrs;
    const OptimizerI *opt = optimizer_i(ps->cfg.opt.kind);
    Tower__Tensor scalar_tensors[OPT_MAX_SCALARS];
    Tower__Tensor *scalar_ptrs[OPT_MAX_SCALARS];
    for (int k = 0; k < opt->n_scalars; k++) {
        tower__tensor__init(&scalar_tensors[k]);
        scalar_tensors[k].name = (char *)opt->scalar_names[k];
        scalar_tensors[k].n_data = 1;
        scalar_tensors[k].data = (float *)&ps->scalars[k];
        scalar_ptrs[k] = &scalar_tensors[k];
    }
    msg.n_optimizer_scalars = (size_t)opt->n_scalars;
    msg.optimizer_scalars = scalar_ptrs;
    msg.optimizer = (char *)optimizer_name(&ps->cfg.opt);
    msg.width_multiplier = spec->opts.width_multiplier;
    msg.head = (int32_t)spec->opts.head;
    msg.fc_width = spec->opts.fc_width;
    if (ps->ema) {
        msg.n_moving_averages = tensors_for(spec, keep, ps->ema, emas, ema_ptrs, shapes);
        msg.moving_averages = ema_ptrs;
    }
    if (run) {
        rs.seed = run->seed;
        rs.examples_consumed = run->examples_consumed;
        rs.n_towers = run->n_towers;
        rs.batch_size = run->batch_size;
        rs.accum_steps = run->accum_steps;
        rs.min_after_dequeue = run->min_after_dequeue;
        if (run->n_parts > 0) {
            rs.n_part_examples_consumed = (size_t)run->n_parts;
            rs.part_examples_consumed = part_counts;
            for (int w = 0; w < run->n_parts; w++) part_counts[w] = run->part_examples_consumed[w];
            rs.input_split = (char *)run->input_split;
        }
        if (run->n_shard_sizes > 0) {
            rs.n_shard_sizes = (size_t)run->n_shard_sizes;
            rs.shard_sizes = shard_sizes;
            for (int t = 0; t < run->n_shard_sizes; t++) shard_sizes[t] = run->shard_sizes[t];
        }
    }
    msg.run = &rs;

    Payload payload = {&msg, tower__checkpoint__get_packed_size(&msg)};
    const int rc = write_atomic_with(dir, name, write_checkpoint_body, &payload, g_fault == CKPT_FAULT_BEFORE_RENAME,
                                     err, err_n_bytes);
    free(slot_tensors), free(slot_ptrs), free(slot_names), free(slot_shapes);
    return rc;
}

/* The index dir/checkpoint naming checkpoint `name` (a single file or a
 * manifest's base) as the latest, atomically; then the checkpoints beyond
 * the newest keep_last go, and stale files (remove_stale). */
static int index_commit(const char *dir, const char *name, int keep_last, char *err, size_t err_n_bytes) {
    int rc;

    /* The new index: the previous list without `name`, then `name`; the
     * newest keep_last stay, the others are deleted after the index is in
     * place. */
    IndexList *old = calloc(1, sizeof *old);
    if (!old)
        return fail(err, err_n_bytes, "%s: out of memory for the index", dir);
    int index_ok = index_read(dir, NULL, 0, old, NULL, 0) == 1;
    if (!index_ok) old->n = 0; /* none, or unreadable: start a new list */
    int n_all = 0;
    const char *all[CKPT_MAX_INDEX_ENTRIES + 1];
    for (int i = 0; i < old->n; i++)
        if (strcmp(old->names[i], name) != 0) all[n_all++] = old->names[i];
    all[n_all++] = name;
    int first_kept = (keep_last > 0 && n_all > keep_last) ? n_all - keep_last : 0;
    if (first_kept == 0 && n_all > CKPT_MAX_INDEX_ENTRIES) first_kept = n_all - CKPT_MAX_INDEX_ENTRIES;

    size_t text_cap = 128 + (size_t)(n_all + 1) * 300, text_n = 0;
    char *text = malloc(text_cap);
    if (!text) {
        free(old);
        return fail(err, err_n_bytes, "%s: out of memory for the index", dir);
    }
    text_n += (size_t)snprintf(text + text_n, text_cap - text_n, "model_checkpoint_path: \"%s\"\n", name);
    for (int i = first_kept; i < n_all; i++)
        text_n += (size_t)snprintf(text + text_n, text_cap - text_n, "all_model_checkpoint_paths: \"%s\"\n", all[i]);
    const void *iparts[1] = {text};
    size_t ipart_n_bytes[1] = {text_n};
    rc = write_atomic(dir, CKPT_INDEX_NAME, iparts, ipart_n_bytes, 1,
                      g_fault == CKPT_FAULT_BEFORE_INDEX_RENAME, err, err_n_bytes);
    free(text);
    if (rc == 0) {
        int removed = 0;
        for (int i = 0; keep_last > 0 && i < first_kept; i++)
            if (is_ckpt_name(all[i]) && unlink_family(dir, all[i])) removed = 1;
        /* Unlisted checkpoints go only when the list is known to be whole:
         * keep_last > 0 and the previous index was read, all of it. */
        int sweep = keep_last > 0 && index_ok && !old->overflow;
        if (remove_stale(dir, sweep ? all + first_kept : NULL, n_all - first_kept)) removed = 1;
        if (removed) fsync_dir(dir);
    }
    free(old);
    return rc;
}

int ckpt_save(const char *dir, const ParamServer *ps, const CkptRunState *run,
              int keep_last, char *err, size_t err_n_bytes) {
    char name[64];
    snprintf(name, sizeof name, CKPT_PREFIX "%ld", ps->global_step);
    if (save_file(dir, name, ps, NULL, run, err, err_n_bytes) != 0) return -1;
    /* A sharded checkpoint of the same step (an earlier run's) would hide behind this file: its manifest goes. */
    char manifest[4096];
    if (snprintf(manifest, sizeof manifest, "%s/%s.shards", dir, name) < (int)sizeof manifest) unlink(manifest);
    return index_commit(dir, name, keep_last, err, err_n_bytes);
}

static void shard_name(char *out, size_t out_n_bytes, long step, int shard, int n_shards) {
    snprintf(out, out_n_bytes, CKPT_PREFIX "%ld.shard-%05d-of-%05d", step, shard, n_shards);
}

int ckpt_save_shard(const char *dir, const ParamServer *ps, const unsigned char *keep, int shard, int n_shards,
                    const CkptRunState *run, char *err, size_t err_n_bytes) {
    char name[128];
    shard_name(name, sizeof name, ps->global_step, shard, n_shards);
    return save_file(dir, name, ps, keep, run, err, err_n_bytes);
}

int ckpt_commit_shards(const char *dir, long global_step, int n_shards, int keep_last, char *err, size_t err_n_bytes) {
    char name[64], shard[128], path[4096];
    snprintf(name, sizeof name, CKPT_PREFIX "%ld", global_step);
    size_t text_cap = 64 + (size_t)n_shards * 160, text_n = 0;
    char *text = malloc(text_cap);
    if (!text) return fail(err, err_n_bytes, "%s: out of memory for the shard manifest", dir);
    text_n += (size_t)snprintf(text, text_cap, "n_shards: %d\n", n_shards);
    for (int k = 0; k < n_shards; k++) {
        shard_name(shard, sizeof shard, global_step, k, n_shards);
        struct stat st;
        if (join_path(path, sizeof path, dir, shard) != 0 || stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(text);
            return fail(err, err_n_bytes, "%s: shard %d of %d is not there (%s): every rank must write into the same "
                        "--train_dir (a shared file system)", path, k, n_shards, strerror(errno));
        }
        text_n += (size_t)snprintf(text + text_n, text_cap - text_n, "shard: \"%s\"\n", shard);
    }
    char manifest[128];
    snprintf(manifest, sizeof manifest, "%s.shards", name);
    const void *parts[1] = {text};
    size_t part_n_bytes[1] = {text_n};
    int rc = write_atomic(dir, manifest, parts, part_n_bytes, 1, 0, err, err_n_bytes);
    free(text);
    if (rc != 0) return -1;
    /* A single file of the same step would hide the manifest. */
    if (join_path(path, sizeof path, dir, name) == 0) unlink(path);
    return index_commit(dir, name, keep_last, err, err_n_bytes);
}

/* ---- loading ---- */

/* Read and check the header and checksum of path; returns the decoded
 * message or NULL with a message in err. */
/* What is wrong with the run state a file holds (its checksum may be right and its numbers still none that Tower
 * writes): one phrase in why and 1, or 0.  Its lists fit their arrays (CKPT_MAX_PARTS), and no count is negative
 * (a shard size is at least 1). */
static int run_state_problem(const Tower__RunState *rs, char *why, size_t why_n_bytes) {
    if (rs->n_part_examples_consumed > CKPT_MAX_PARTS) {
        snprintf(why, why_n_bytes, "the run state counts %zu workers' parts, at most %d", rs->n_part_examples_consumed,
                 CKPT_MAX_PARTS);
        return 1;
    }
    if (rs->n_shard_sizes > CKPT_MAX_PARTS) {
        snprintf(why, why_n_bytes, "the run state lists %zu towers' shard sizes, at most %d", rs->n_shard_sizes,
                 CKPT_MAX_PARTS);
        return 1;
    }
    typedef struct {
        const char *name;
        long long value, least;
    } RunCount;
    RunCount counts[5 + 2 * CKPT_MAX_PARTS] = {
        {"examples_consumed", rs->examples_consumed, 0}, {"n_towers", rs->n_towers, 0},
        {"batch_size", rs->batch_size, 0}, {"accum_steps", rs->accum_steps, 0},
        {"min_after_dequeue", rs->min_after_dequeue, 0}};
    size_t n = 5;
    for (size_t k = 0; k < rs->n_part_examples_consumed; k++)
        counts[n++] = (RunCount){"part_examples_consumed", rs->part_examples_consumed[k], 0};
    for (size_t k = 0; k < rs->n_shard_sizes; k++) counts[n++] = (RunCount){"shard_sizes", rs->shard_sizes[k], 1};
    for (size_t i = 0; i < n; i++) {
        if (counts[i].value >= counts[i].least) continue;
        snprintf(why, why_n_bytes, "the run state's %s is %lld: out of range (not a file Tower wrote)", counts[i].name,
                 counts[i].value);
        return 1;
    }
    return 0;
}

static Tower__Checkpoint *read_checkpoint(const char *path, char *err, size_t err_n_bytes) {
    const char *not_regular;
    FILE *f = file_open_regular(path, &not_regular);
    if (!f) {
        if (not_regular) fail(err, err_n_bytes, "%s: not a regular file", path);
        else fail(err, err_n_bytes, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fail(err, err_n_bytes, "%s: cannot stat: %s", path, strerror(errno));
        fclose(f);
        return NULL;
    }
    const uint64_t file_n_bytes = (uint64_t)st.st_size;
    unsigned char header[CKPT_HEADER_N_BYTES];
    size_t got = fread(header, 1, sizeof header, f);
    size_t magic_n = got < 8 ? got : 8;
    if (got == 0) {
        fclose(f);
        fail(err, err_n_bytes, "%s: empty file (0 bytes), not a checkpoint", path);
        return NULL;
    }
    if (memcmp(header, CKPT_MAGIC, magic_n) != 0) {
        fclose(f);
        fail(err, err_n_bytes, "%s: not a checkpoint (bad magic)", path);
        return NULL;
    }
    if (got < sizeof header) {
        fclose(f);
        fail(err, err_n_bytes, "%s: truncated: %zu bytes, the header alone needs %d", path, got, CKPT_HEADER_N_BYTES);
        return NULL;
    }
    uint32_t version = get_u32(header + 8);
    uint64_t payload_n_bytes = get_u64(header + 12);
    uint32_t crc_stored = get_u32(header + 20);
    if (version != CKPT_FORMAT_VERSION) {
        fclose(f);
        fail(err, err_n_bytes, "%s: unsupported checkpoint format version %u (this build reads version %u)",
             path, version, CKPT_FORMAT_VERSION);
        return NULL;
    }
    const uint64_t have = file_n_bytes - CKPT_HEADER_N_BYTES;
    if (payload_n_bytes > have) {
        fclose(f);
        fail(err, err_n_bytes, "%s: truncated: the header says %llu payload bytes at offset %d, the file has %llu",
             path, (unsigned long long)payload_n_bytes, CKPT_HEADER_N_BYTES, (unsigned long long)have);
        return NULL;
    }
    if (payload_n_bytes < have) {
        fclose(f);
        fail(err, err_n_bytes, "%s: %llu unexpected bytes after the payload (the header says %llu payload bytes)",
             path, (unsigned long long)(have - payload_n_bytes), (unsigned long long)payload_n_bytes);
        return NULL;
    }
    uint8_t *payload = malloc(payload_n_bytes ? (size_t)payload_n_bytes : 1);
    if (!payload) {
        fclose(f);
        fail(err, err_n_bytes, "%s: cannot allocate %llu bytes for the payload", path, (unsigned long long)payload_n_bytes);
        return NULL;
    }
    got = fread(payload, 1, (size_t)payload_n_bytes, f);
    fclose(f);
    if (got != payload_n_bytes) {
        free(payload);
        fail(err, err_n_bytes, "%s: truncated: read %zu of %llu payload bytes", path, got, (unsigned long long)payload_n_bytes);
        return NULL;
    }
    uint32_t crc = crc32_of(payload, (size_t)payload_n_bytes);
    if (crc != crc_stored) {
        free(payload);
        fail(err, err_n_bytes, "%s: checksum mismatch: file is corrupted (crc32 stored 0x%08x, computed 0x%08x)",
             path, crc_stored, crc);
        return NULL;
    }
    Tower__Checkpoint *msg = tower__checkpoint__unpack(NULL, (size_t)payload_n_bytes, payload);
    free(payload);
    if (!msg) {
        fail(err, err_n_bytes, "%s: cannot decode the payload (protobuf tower.Checkpoint)", path);
        return NULL;
    }
    if (!msg->run) {
        tower__checkpoint__free_unpacked(msg, NULL);
        fail(err, err_n_bytes, "%s: the run state is missing", path);
        return NULL;
    }
    char why[256];
    if (run_state_problem(msg->run, why, sizeof why)) {
        fail(err, err_n_bytes, "%s: %s", path, why);
        tower__checkpoint__free_unpacked(msg, NULL);
        return NULL;
    }
    if (msg->global_step < 0) {
        fail(err, err_n_bytes, "%s: negative global_step %lld", path, (long long)msg->global_step);
        tower__checkpoint__free_unpacked(msg, NULL);
        return NULL;
    }
    return msg;
}

/* A checkpoint as one message: a single file's, or the shards' of a manifest
 * joined (each section the shards' tensors one after the other; the rest
 * from shard 0, which every shard must agree with on model and step). */
typedef struct {
    Tower__Checkpoint *msg;    /* what the loaders read */
    Tower__Checkpoint *parts[CKPT_MAX_SHARDS];
    int n_parts;
    Tower__Checkpoint joined;  /* msg when n_parts > 1 or a manifest was read */
} CkptMsg;

static void msg_close(CkptMsg *m) {
    if (m->msg == &m->joined) {
        free(m->joined.variables);
        free(m->joined.momentum);
        free(m->joined.slots);
        free(m->joined.moving_averages);
    }
    for (int k = 0; k < m->n_parts; k++) tower__checkpoint__free_unpacked(m->parts[k], NULL);
    memset(m, 0, sizeof *m);
}

/* Concatenate section `field` of every part into a new array; -1 out of memory. */
#define JOIN_SECTION(m, n_field, field)                                                                 \
    do {                                                                                                \
        size_t n_ = 0;                                                                                  \
        for (int k_ = 0; k_ < (m)->n_parts; k_++) n_ += (m)->parts[k_]->n_field;                        \
        (m)->joined.field = malloc((n_ ? n_ : 1) * sizeof *(m)->joined.field);                          \
        if (!(m)->joined.field) return fail(err, err_n_bytes, "%s: out of memory joining shards", path); \
        (m)->joined.n_field = 0;                                                                        \
        for (int k_ = 0; k_ < (m)->n_parts; k_++)                                                       \
            for (size_t i_ = 0; i_ < (m)->parts[k_]->n_field; i_++)                                     \
                (m)->joined.field[(m)->joined.n_field++] = (m)->parts[k_]->field[i_];                   \
    } while (0)

/* What defines a part's network and run, as text for comparing and for the message: input, classes, optimizer,
 * the model options. */
static void part_network(const Tower__Checkpoint *p, char *out, size_t n_bytes) {
    snprintf(out, n_bytes, "%dx%dx%d, %d classes, optimizer '%.32s', width %.9g, head %d, fc %d", p->height, p->width,
             p->channels, p->num_classes, p->optimizer ? p->optimizer : "", (double)p->width_multiplier, p->head,
             p->fc_width);
}

/* The shard count of the manifest's first line "n_shards: N" (1 <= N <= CKPT_MAX_SHARDS, nothing after it), or -1. */
static int manifest_n_shards(const char *line) {
    static const char key[] = "n_shards:";
    if (strncmp(line, key, sizeof key - 1) != 0) return -1;
    const char *p = line + sizeof key - 1;
    while (*p == ' ') p++;
    if (!isdigit((unsigned char)*p)) return -1;
    long n = 0;
    for (; isdigit((unsigned char)*p); p++)
        if ((n = n * 10 + (*p - '0')) > CKPT_MAX_SHARDS) return -1; /* before it could overflow */
    return *p == '\0' && n >= 1 ? (int)n : -1;
}

/* 1 when name can be a shard's file beside the manifest: printable ASCII (what ckpt_commit_shards writes), no '/'.
 * A byte outside it would print as \xHH, four characters: a 255-byte name then filled a message before the
 * reason came (regress/checkpoint/shard-name-not-ascii). */
static int shard_name_ok(const char *name) {
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        if (*p < 0x20 || *p > 0x7e || *p == '/') return 0;
    return 1;
}

/* path: a checkpoint file, or (when there is no such file) the base of the
 * manifest path.shards written by ckpt_commit_shards.  Each shard is read
 * once: a file the manifest names twice (by one name or two) is refused
 * before it is read again, so the shards held in memory never exceed the
 * files themselves (fuzz_checkpoint's regress/checkpoint/manifest-repeats-
 * one-shard: a 40 KB shard named 2048 times once held over 2 GiB). */
static int msg_open_shards(const char *path, CkptMsg *m, char *err, size_t err_n_bytes) {
    char manifest[4096], dir[4096];
    if (snprintf(manifest, sizeof manifest, "%s.shards", path) >= (int)sizeof manifest)
        return fail(err, err_n_bytes, "%s: path too long", path);
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    const char *not_regular;
    FILE *f = file_open_regular(manifest, &not_regular);
    if (!f && not_regular) return fail(err, err_n_bytes, "%s: the shard manifest %s is not a regular file", path, manifest);
    if (!f) return fail(err, err_n_bytes, "%s: cannot open (nor a shard manifest %s): %s", path, manifest, strerror(errno));
    char line[LINE_MAX_N_BYTES], value[256];
    int n_shards = -1, line_no = 0, got;
    int bad = 0; /* line line_no is not the n_shards line (1) or a shard line (2), a shard too many (3), too long (4) */
    struct {
        dev_t dev;
        ino_t ino;
        int line_no; /* 0: the shard could not be stat'ed (read_checkpoint then says why) */
    } *seen = NULL;
    while (!bad && (got = read_line(f, line)) != 0) {
        line_no++;
        if (got == LINE_TOO_LONG) {
            bad = 4;
            break;
        }
        if (got == LINE_NUL) {
            bad = n_shards < 0 ? 1 : 2;
            break;
        }
        if (line[0] == '\0') continue;
        if (n_shards < 0) {
            if ((n_shards = manifest_n_shards(line)) < 0) {
                bad = 1;
            } else if (!(seen = calloc((size_t)n_shards, sizeof *seen))) {
                fclose(f);
                return fail(err, err_n_bytes, "%s: out of memory for %d shards", manifest, n_shards);
            }
            continue;
        }
        char shard_path[4096];
        if (index_line_value(line, "shard", value, sizeof value) != 1 || !shard_name_ok(value) ||
            join_path(shard_path, sizeof shard_path, dir, value) != 0) {
            bad = 2;
            break;
        }
        if (m->n_parts >= n_shards) {
            bad = 3;
            break;
        }
        struct stat st;
        if (stat(shard_path, &st) == 0) {
            for (int k = 0; k < m->n_parts; k++)
                if (seen[k].line_no && seen[k].dev == st.st_dev && seen[k].ino == st.st_ino) {
                    const int first = seen[k].line_no;
                    fclose(f);
                    free(seen);
                    return fail(err, err_n_bytes, "%s: line %d of the shard manifest names %s, the file line %d "
                                "names: each shard is listed once", manifest, line_no, shard_path, first);
                }
            seen[m->n_parts].dev = st.st_dev;
            seen[m->n_parts].ino = st.st_ino;
            seen[m->n_parts].line_no = line_no;
        }
        m->parts[m->n_parts] = read_checkpoint(shard_path, err, err_n_bytes);
        if (!m->parts[m->n_parts]) {
            fclose(f);
            free(seen);
            return -1;
        }
        m->n_parts++;
    }
    fclose(f);
    free(seen);
    if (bad == 1)
        return fail(err, err_n_bytes, "%s: line %d of the shard manifest is not n_shards: N (1 <= N <= %d)", manifest,
                    line_no, CKPT_MAX_SHARDS);
    if (bad == 2)
        return fail(err, err_n_bytes, "%s: line %d of the shard manifest is not shard: \"NAME\" (a file beside it, "
                    "printable ASCII)", manifest, line_no);
    if (bad == 4)
        return fail(err, err_n_bytes, "%s: line %d of the shard manifest is over %d bytes", manifest, line_no,
                    LINE_MAX_N_BYTES - 1);
    if (bad == 3)
        return fail(err, err_n_bytes, "%s: line %d of the shard manifest names a shard more than its n_shards: %d",
                    manifest, line_no, n_shards);
    if (n_shards < 0) return fail(err, err_n_bytes, "%s: the shard manifest has no n_shards: N line", manifest);
    if (m->n_parts != n_shards)
        return fail(err, err_n_bytes, "%s: the shard manifest lists %d of its %d shards", manifest, m->n_parts, n_shards);
    const Tower__Checkpoint *p0 = m->parts[0];
    for (int k = 1; k < m->n_parts; k++) {
        const Tower__Checkpoint *pk = m->parts[k];
        if (strcmp(pk->model, p0->model) != 0 || pk->global_step != p0->global_step)
            return fail(err, err_n_bytes, "%s: shard %d is of model '%s' at step %lld, shard 0 of '%s' at step %lld",
                        manifest, k, pk->model, (long long)pk->global_step, p0->model, (long long)p0->global_step);
        /* One save of one job: the same network (a shard of another run whose tensors fit would be joined). */
        char a[256], b[256];
        part_network(pk, a, sizeof a);
        part_network(p0, b, sizeof b);
        if (strcmp(a, b) != 0)
            return fail(err, err_n_bytes, "%s: shard %d is of another run than shard 0 (%s; shard 0: %s)", manifest, k,
                        a, b);
    }
    m->joined = *p0;
    m->joined.variables = NULL;
    m->joined.momentum = NULL;
    m->joined.slots = NULL;
    m->joined.moving_averages = NULL;
    m->msg = &m->joined;
    JOIN_SECTION(m, n_variables, variables);
    JOIN_SECTION(m, n_momentum, momentum);
    JOIN_SECTION(m, n_slots, slots);
    JOIN_SECTION(m, n_moving_averages, moving_averages);
    return 0;
}

static int msg_open(const char *path, CkptMsg *m, char *err, size_t err_n_bytes) {
    memset(m, 0, sizeof *m);
    /* The index, a sharded checkpoint's manifest or one of its shards named in the checkpoint's place: which
     * name to give (the manifest read as a checkpoint was "bad magic", a shard "variable ... missing"). */
    const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
    char base[256];
    if (!strcmp(name, CKPT_INDEX_NAME))
        return fail(err, err_n_bytes, "%s: the index of a train_dir's checkpoints, not a checkpoint: name the "
                    "directory (--checkpoint_dir) or one of its " CKPT_PREFIX "N", path);
    if (ckpt_family(name, base, sizeof base) && strcmp(name, base) != 0)
        return fail(err, err_n_bytes, "%s: %s of a sharded checkpoint, not a checkpoint: name the checkpoint, %.*s%s",
                    path, strcmp(name + strlen(base), ".shards") ? "a shard" : "the manifest", (int)(name - path),
                    path, base);
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT) {
        char manifest[4096];
        if (snprintf(manifest, sizeof manifest, "%s.shards", path) < (int)sizeof manifest && stat(manifest, &st) == 0) {
            if (msg_open_shards(path, m, err, err_n_bytes) == 0) return 0;
            msg_close(m);
            return -1;
        }
    }
    m->parts[0] = read_checkpoint(path, err, err_n_bytes);
    if (!m->parts[0]) return -1;
    m->n_parts = 1;
    m->msg = m->parts[0];
    return 0;
}

static void shape_str(char *out, size_t out_n_bytes, const int32_t *shape, size_t ndim) {
    size_t n = 0;
    n += (size_t)snprintf(out + n, out_n_bytes - n, "(");
    for (size_t d = 0; d < ndim && n < out_n_bytes; d++)
        n += (size_t)snprintf(out + n, out_n_bytes - n, d ? ", %d" : "%d", shape[d]);
    if (n < out_n_bytes) snprintf(out + n, out_n_bytes - n, ")");
}

/* The variable named by the first name_len bytes of name, or -1. */
static int find_var(const ModelSpec *spec, const char *name, size_t name_len) {
    for (int v = 0; v < spec->n_vars; v++)
        if (strlen(spec->vars[v].name) == name_len && strncmp(spec->vars[v].name, name, name_len) == 0) return v;
    return -1;
}

/* The slot name of a `slots` tensor: what follows its last '/', or NULL. */
static const char *slot_suffix(const char *name) {
    const char *p = strrchr(name, '/');
    return p && p[1] ? p + 1 : NULL;
}

/* Map one section's tensors onto the spec by name: map[v] = the tensor of
 * spec->vars[v].  With suffix, only the tensors named "<variable>/<suffix>"
 * belong to the section, and <variable> is what is matched.  Returns 1
 * (complete), 0 (section empty), -1 (error). */
static int map_section(Tower__Tensor *const *tensors, size_t n_tensors, const ModelSpec *spec,
                       const char *section, const char *suffix, const Tower__Tensor **map, const char *path,
                       char *err, size_t err_n_bytes) {
    if (n_tensors == 0) return 0;
    for (int v = 0; v < spec->n_vars; v++) map[v] = NULL;
    for (size_t t = 0; t < n_tensors; t++) {
        const Tower__Tensor *x = tensors[t];
        size_t name_len = strlen(x->name);
        if (suffix) {
            const char *sfx = slot_suffix(x->name);
            if (!sfx || strcmp(sfx, suffix) != 0) continue;
            name_len = (size_t)(sfx - 1 - x->name);
        }
        int v = find_var(spec, x->name, name_len);
        if (v < 0)
            return fail(err, err_n_bytes, "%s: %s: unexpected variable '%s' (not in model '%s')",
                        path, section, x->name, spec->name);
        if (map[v])
            return fail(err, err_n_bytes, "%s: %s: variable '%s' appears twice", path, section, x->name);
        const ModelVar *mv = &spec->vars[v];
        int same = x->n_shape == (size_t)mv->ndim;
        for (int d = 0; same && d < mv->ndim; d++) same = x->shape[d] == mv->shape[d];
        if (!same) {
            char got[96], want[96];
            int32_t want_shape[4];
            for (int d = 0; d < mv->ndim; d++) want_shape[d] = mv->shape[d];
            shape_str(got, sizeof got, x->shape, x->n_shape);
            shape_str(want, sizeof want, want_shape, (size_t)mv->ndim);
            return fail(err, err_n_bytes, "%s: %s: variable '%s' has shape %s, expected %s",
                        path, section, x->name, got, want);
        }
        if (x->n_data != mv->n_floats)
            return fail(err, err_n_bytes, "%s: %s: variable '%s' holds %zu floats, its shape needs %zu",
                        path, section, x->name, x->n_data, mv->n_floats);
        map[v] = x;
    }
    for (int v = 0; v < spec->n_vars; v++)
        if (!map[v]) {
            if (suffix)
                return fail(err, err_n_bytes, "%s: %s: variable '%s/%s' missing", path, section, spec->vars[v].name,
                            suffix);
            return fail(err, err_n_bytes, "%s: %s: variable '%s' missing", path, section, spec->vars[v].name);
        }
    return 1;
}

static void copy_section(float *block, const ModelSpec *spec, const Tower__Tensor **map) {
    for (int v = 0; v < spec->n_vars; v++)
        memcpy(block + spec->vars[v].offset, map[v]->data, spec->vars[v].n_floats * sizeof(float));
}

/* The name of the slot the `momentum` section holds. */
#define CKPT_MOMENTUM_SLOT "Momentum"

typedef struct {
    const Tower__Tensor *vars[MODEL_MAX_VARS];
    const Tower__Tensor *ema[MODEL_MAX_VARS];
    int has_ema;
    /* The optimizer's slots: the `momentum` section (named "Momentum") and
     * the `slots` section grouped by slot name, in the file's order. */
    int n_slots;
    char slot_names[OPT_MAX_SLOTS][CKPT_SLOT_NAME_MAX];
    const Tower__Tensor *slots[OPT_MAX_SLOTS][MODEL_MAX_VARS];
    char optimizer[32]; /* the file's optimizer field, or inferred: "momentum" / "sgd" / "an unnamed optimizer" */
} SectionMaps;

/* The slot named name in m, or -1. */
static int find_slot(const SectionMaps *m, const char *name) {
    for (int k = 0; k < m->n_slots; k++)
        if (!strcmp(m->slot_names[k], name)) return k;
    return -1;
}

static int map_all(const Tower__Checkpoint *msg, const ModelSpec *spec, SectionMaps *m,
                   const char *path, char *err, size_t err_n_bytes) {
    m->n_slots = 0;
    int r = map_section(msg->variables, msg->n_variables, spec, "variables", NULL, m->vars, path, err, err_n_bytes);
    if (r < 0) return -1;
    if (r == 0) return fail(err, err_n_bytes, "%s: the checkpoint holds no variables", path);
    int has_mom = map_section(msg->momentum, msg->n_momentum, spec, "momentum", NULL, m->slots[0], path, err,
                              err_n_bytes);
    if (has_mom < 0) return -1;
    if (has_mom) snprintf(m->slot_names[m->n_slots++], CKPT_SLOT_NAME_MAX, "%s", CKPT_MOMENTUM_SLOT);
    for (size_t t = 0; t < msg->n_slots; t++) {
        const char *sfx = slot_suffix(msg->slots[t]->name);
        if (!sfx)
            return fail(err, err_n_bytes, "%s: slots: '%s' is not named <variable>/<slot>", path, msg->slots[t]->name);
        if (find_slot(m, sfx) >= 0) continue;
        if (m->n_slots == OPT_MAX_SLOTS || strlen(sfx) >= CKPT_SLOT_NAME_MAX)
            return fail(err, err_n_bytes, "%s: slots: more than %d slot names ('%s' is one too many)", path,
                        OPT_MAX_SLOTS, sfx);
        const int k = m->n_slots;
        if (map_section(msg->slots, msg->n_slots, spec, "slots", sfx, m->slots[k], path, err, err_n_bytes) < 0)
            return -1;
        snprintf(m->slot_names[k], CKPT_SLOT_NAME_MAX, "%s", sfx);
        m->n_slots++;
    }
    m->has_ema = map_section(msg->moving_averages, msg->n_moving_averages, spec, "moving_averages", NULL,
                             m->ema, path, err, err_n_bytes);
    if (m->has_ema < 0) return -1;
    for (size_t t = 0; t < msg->n_optimizer_scalars; t++) {
        const Tower__Tensor *x = msg->optimizer_scalars[t];
        if (x->n_shape != 0 || x->n_data != 1)
            return fail(err, err_n_bytes, "%s: optimizer_scalars: '%s' holds %zu floats of %zu dimensions, expected "
                        "one of shape ()", path, x->name, x->n_data, x->n_shape);
    }
    if (msg->optimizer && msg->optimizer[0])
        snprintf(m->optimizer, sizeof m->optimizer, "%s", msg->optimizer);
    else
        snprintf(m->optimizer, sizeof m->optimizer, "%s", has_mom ? "momentum" : m->n_slots ? "an unnamed optimizer" : "sgd");
    return 0;
}

/* The optimizer state of the file against the server's optimizer: every
 * slot and scalar it keeps present; no slot it does not keep, unless it
 * keeps none (sgd starts from any checkpoint's variables).  0, or -1 with
 * one line in err. */
static int check_optimizer_state(const Tower__Checkpoint *msg, const SectionMaps *m, const ParamServer *ps,
                                 const char *path, char *err, size_t err_n_bytes) {
    const char *want = optimizer_name(&ps->cfg.opt);
    for (int k = 0; k < ps->n_slots; k++) {
        const OptSlot *s = &ps->slot_info[k];
        if (find_slot(m, s->name) < 0)
            return fail(err, err_n_bytes, "%s: no %s (saved with %s): cannot resume with %s", path, s->what,
                        m->optimizer, want);
    }
    for (int j = 0; ps->n_slots > 0 && j < m->n_slots; j++) {
        int kept = 0;
        for (int k = 0; k < ps->n_slots && !kept; k++) kept = !strcmp(ps->slot_info[k].name, m->slot_names[j]);
        if (!kept)
            return fail(err, err_n_bytes, "%s: holds optimizer slots '%s' that %s does not keep (saved with %s): "
                        "cannot resume with %s", path, m->slot_names[j], want, m->optimizer, want);
    }
    const OptimizerI *opt = optimizer_i(ps->cfg.opt.kind);
    for (int k = 0; k < opt->n_scalars; k++) {
        int found = 0;
        for (size_t t = 0; t < msg->n_optimizer_scalars && !found; t++)
            found = !strcmp(msg->optimizer_scalars[t]->name, opt->scalar_names[k]);
        if (!found)
            return fail(err, err_n_bytes, "%s: no %s (saved with %s): cannot resume with %s", path,
                        opt->scalar_names[k], m->optimizer, want);
    }
    return 0;
}

static void run_from_msg(CkptRunState *run, const Tower__RunState *rs) {
    run->seed = rs->seed;
    run->examples_consumed = (long)rs->examples_consumed;
    run->n_towers = rs->n_towers;
    run->batch_size = rs->batch_size;
    run->accum_steps = rs->accum_steps > 0 ? rs->accum_steps : 1; /* absent (older files): one micro-batch */
    /* absent (no split, older files): none; msg_open refused more than CKPT_MAX_PARTS */
    run->n_parts = (int)rs->n_part_examples_consumed;
    for (int w = 0; w < run->n_parts; w++) run->part_examples_consumed[w] = (long)rs->part_examples_consumed[w];
    snprintf(run->input_split, sizeof run->input_split, "%s",
             run->n_parts > 0 && (!strcmp(rs->input_split, "files") || !strcmp(rs->input_split, "records"))
                 ? rs->input_split : "");
    run->min_after_dequeue = (long)rs->min_after_dequeue;
    run->n_shard_sizes = (int)rs->n_shard_sizes; /* msg_open refused more than CKPT_MAX_PARTS */
    for (int t = 0; t < run->n_shard_sizes; t++) run->shard_sizes[t] = rs->shard_sizes[t];
}

/* The file's network options; a file older than them gets the defaults (width 1.0, Keras's head). */
static ModelOptions opts_from_msg(const Tower__Checkpoint *msg) {
    ModelOptions o = {.width_multiplier = msg->width_multiplier, .head = (ModelHead)msg->head, .fc_width = msg->fc_width};
    if (o.width_multiplier == 0.0f) o.width_multiplier = 1.0f;
    if (o.fc_width == 0) o.fc_width = 4096;
    return o;
}

int ckpt_load(const char *path, ParamServer *ps, CkptRunState *run, char *err, size_t err_n_bytes) {
    const ModelSpec *spec = &ps->spec;
    CkptMsg cm;
    if (msg_open(path, &cm, err, err_n_bytes) != 0) return -1;
    const Tower__Checkpoint *msg = cm.msg;
    int rc = 0;
    SectionMaps m;
    /* Both sides' options as the network reads them (ckpt_read's rule): one it ignores is not a mismatch, and a
     * spec made by hand (no model_spec_init_opts) may leave its width or fc_width 0, the defaults. */
    ModelOptions file_opts = opts_from_msg(msg), spec_opts = spec->opts;
    model_opts_normalize(msg->model, &file_opts);
    model_opts_normalize(spec->name, &spec_opts);
    if (strcmp(msg->model, spec->name) != 0 || msg->height != spec->H || msg->width != spec->W ||
        msg->channels != spec->C || msg->num_classes != spec->num_classes) {
        rc = fail(err, err_n_bytes, "%s: the checkpoint is for model '%s' on %dx%dx%d inputs with %d classes, "
                  "expected '%s' on %dx%dx%d inputs with %d classes", path, msg->model, msg->height, msg->width,
                  msg->channels, msg->num_classes, spec->name, spec->H, spec->W, spec->C, spec->num_classes);
    } else if (file_opts.width_multiplier != spec_opts.width_multiplier || file_opts.head != spec_opts.head ||
               file_opts.fc_width != spec_opts.fc_width) {
        char file_words[128], spec_words[128];
        model_opts_describe(msg->model, &file_opts, file_words, sizeof file_words);
        model_opts_describe(spec->name, &spec_opts, spec_words, sizeof spec_words);
        rc = fail(err, err_n_bytes, "%s: the checkpoint is for '%s' with %s, expected %s", path, msg->model, file_words,
                  spec_words);
    } else if (map_all(msg, spec, &m, path, err, err_n_bytes) != 0) {
        rc = -1;
    } else if (check_optimizer_state(msg, &m, ps, path, err, err_n_bytes) != 0) {
        rc = -1;
    } else if (ps->ema && !m.has_ema) {
        rc = fail(err, err_n_bytes, "%s: no moving averages (saved with the moving average disabled): resume with "
                  "--moving_average_decay 0, or from step 0 into another train_dir", path);
    }
    if (rc == 0) {
        copy_section(ps->params, spec, m.vars);
        for (int k = 0; k < ps->n_slots; k++) copy_section(ps->slots[k], spec, m.slots[find_slot(&m, ps->slot_info[k].name)]);
        const OptimizerI *opt = optimizer_i(ps->cfg.opt.kind);
        for (int k = 0; k < opt->n_scalars; k++)
            for (size_t t = 0; t < msg->n_optimizer_scalars; t++)
                if (!strcmp(msg->optimizer_scalars[t]->name, opt->scalar_names[k]))
                    ps->scalars[k] = msg->optimizer_scalars[t]->data[0];
        if (ps->ema) copy_section(ps->ema, spec, m.ema);
        ps->global_step = (long)msg->global_step;
        if (run) {
            run_from_msg(run, msg->run);
            run->had_moving_averages = m.has_ema;
        }
    }
    msg_close(&cm);
    return rc;
}

int ckpt_read(const char *path, CkptContents *out, char *err, size_t err_n_bytes) {
    memset(out, 0, sizeof *out);
    CkptMsg cm;
    if (msg_open(path, &cm, err, err_n_bytes) != 0) return -1;
    const Tower__Checkpoint *msg = cm.msg;
    ModelSpec spec;
    const ModelOptions file_opts = opts_from_msg(msg);
    char spec_err[256] = "";
    SectionMaps m;
    int rc = 0;
    if (strlen(msg->model) >= sizeof out->model) {
        rc = fail(err, err_n_bytes, "%s: model name '%.40s...' too long", path, msg->model);
    } else if (model_spec_init_opts(&spec, msg->model, msg->height, msg->width, msg->channels, msg->num_classes,
                                    &file_opts, spec_err, sizeof spec_err) != 0) {
        rc = fail(err, err_n_bytes, "%s: model '%s' on %dx%dx%d inputs with %d classes is not known to this build: %s",
                  path, msg->model, msg->height, msg->width, msg->channels, msg->num_classes, spec_err);
    } else if (map_all(msg, &spec, &m, path, err, err_n_bytes) != 0) {
        rc = -1;
    }
    if (rc == 0) {
        size_t n_bytes = spec.n_params * sizeof(float);
        out->params = malloc(n_bytes);
        int slots_ok = 1;
        for (int k = 0; k < m.n_slots; k++) slots_ok &= (out->slots[k] = malloc(n_bytes)) != NULL;
        out->n_slots = m.n_slots;
        out->ema = m.has_ema ? malloc(n_bytes) : NULL;
        if (!out->params || !slots_ok || (m.has_ema && !out->ema)) {
            ckpt_contents_free(out);
            rc = fail(err, err_n_bytes, "%s: cannot allocate %d x %zu bytes", path, 2 + m.n_slots, n_bytes);
        }
    }
    if (rc == 0) {
        strcpy(out->model, msg->model);
        out->H = msg->height;
        out->W = msg->width;
        out->C = msg->channels;
        out->num_classes = msg->num_classes;
        out->opts = spec.opts;
        out->global_step = (long)msg->global_step;
        out->n_params = spec.n_params;
        copy_section(out->params, &spec, m.vars);
        for (int k = 0; k < m.n_slots; k++) {
            snprintf(out->slot_names[k], sizeof out->slot_names[k], "%s", m.slot_names[k]);
            copy_section(out->slots[k], &spec, m.slots[k]);
        }
        snprintf(out->optimizer, sizeof out->optimizer, "%s", m.optimizer);
        if (out->ema) copy_section(out->ema, &spec, m.ema);
        run_from_msg(&out->run, msg->run);
    }
    msg_close(&cm);
    return rc;
}

void ckpt_contents_free(CkptContents *c) {
    if (!c) return;
    free(c->params);
    free(c->ema);
    for (int k = 0; k < OPT_MAX_SLOTS; k++) free(c->slots[k]);
    memset(c, 0, sizeof *c);
}
