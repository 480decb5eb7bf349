/* fuzz_tfrecord.c — fuzz target of the TFRecord reader (io/tfrecord.h):
 * uncompressed, GZIP and ZLIB, from memory and from a file.
 *
 * Where it sits: tests/fuzz/; the first parser of io -> shards, so every
 * byte of every training file goes through the code this target drives.
 * The input is a record stream.  It is read
 *   1. from memory, compression forced to none (the reference trace);
 *   2. from a file through a 64-byte input buffer (this target compiles
 *      io/tfrecord.c with -DTFR_IN_BUFFER_N_BYTES=64), so small inputs
 *      cross every refill and direct-read path of the file reader;
 *   3. gzip-compressed by the target (as two concatenated gzip members) and
 *      read back with GZIP from memory and with AUTO from a file;
 *   4. zlib-compressed by the target and read back with ZLIB;
 *   5. as it is, with AUTO, GZIP and ZLIB (garbage into inflate).
 * 1 to 4 see the same uncompressed stream, so they must agree exactly:
 * the same statuses, record bytes, indexes, offsets and messages (the
 * compressed readers report offsets in the uncompressed stream).  Every
 * pass checks the reader's contract: one-line errors in the form
 * "<file>: record <i> at offset <o>: <what>", a BAD_STREAM that repeats,
 * records no longer than the limit, progress on every call.
 * The last input byte picks the record limit (64 bytes or the default).
 * What it does not do: no Example decoding (fuzz_example.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "fuzz_common.h"
#include "io/tfrecord.h"

#define NAME "fuzz.tfrecord"

typedef struct {
    int status;
    size_t n_bytes;      /* record length (TFR_RECORD) */
    uint32_t hash;       /* crc32 of the record (TFR_RECORD) */
    long index;
    uint64_t offset;
    char err[512];
} Event;

typedef struct {
    Event *ev;
    size_t n, cap;
} Trace;

static void trace_push(Trace *t, const Event *e) {
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->ev = realloc(t->ev, t->cap * sizeof *t->ev);
        FUZZ_REQUIRE(t->ev != NULL, "out of memory for the trace");
    }
    t->ev[t->n++] = *e;
}

/* Reads r to its end, checking the reader's contract, into t (emptied
 * first).  r was opened under the name `name`; messages are stored with
 * NAME in its place, so that traces of a file and of memory compare.
 * stream_n_bytes (the uncompressed stream's size, or a bound) bounds
 * offsets and the number of calls: every call consumes a header. */
static void trace_reader(TfrReader *r, const char *name, size_t max_record_n_bytes, uint64_t stream_n_bytes, Trace *t) {
    t->n = 0;
    FUZZ_REQUIRE(tfr_reader_compression(r) >= IO_COMPRESSION_NONE && tfr_reader_compression(r) <= IO_COMPRESSION_ZLIB,
                 "compression %d after open", tfr_reader_compression(r));
    FUZZ_REQUIRE(!strcmp(tfr_reader_name(r), name), "name \"%s\", opened as \"%s\"", tfr_reader_name(r), name);
    uint64_t min_next_offset = 0;
    for (;;) {
        FUZZ_REQUIRE(t->n <= stream_n_bytes / TFR_HEADER_N_BYTES + 1, "%zu calls on a stream of %" PRIu64 " bytes", t->n,
                     stream_n_bytes);
        Event e;
        memset(&e, 0, sizeof e);
        const uint8_t *data = NULL;
        size_t n = 0;
        char raw[512] = "";
        e.status = tfr_reader_next(r, &data, &n, raw, sizeof raw);
        e.index = tfr_reader_record_index(r);
        e.offset = tfr_reader_record_offset(r);
        FUZZ_REQUIRE(e.status >= TFR_BAD_STREAM && e.status <= TFR_RECORD, "status %d", e.status);
        if (e.status == TFR_END) {
            trace_push(t, &e);
            FUZZ_REQUIRE(tfr_reader_next(r, &data, &n, NULL, 0) == TFR_END, "a call after TFR_END did not return TFR_END");
            return;
        }
        FUZZ_REQUIRE(e.index == (long)t->n, "record index %ld, expected %zu", e.index, t->n);
        FUZZ_REQUIRE(e.offset >= min_next_offset && e.offset <= stream_n_bytes,
                     "record %ld at offset %" PRIu64 " (the previous record ends at %" PRIu64 ", the stream has %" PRIu64 " bytes)",
                     e.index, e.offset, min_next_offset, stream_n_bytes);
        if (e.status == TFR_RECORD) {
            FUZZ_REQUIRE(n <= max_record_n_bytes, "a record of %zu bytes over the limit of %zu", n, max_record_n_bytes);
            FUZZ_REQUIRE(e.offset + TFR_HEADER_N_BYTES + n + TFR_FOOTER_N_BYTES <= stream_n_bytes,
                         "record %ld of %zu bytes at offset %" PRIu64 " ends after the stream's %" PRIu64 " bytes", e.index, n,
                         e.offset, stream_n_bytes);
            FUZZ_REQUIRE(n == 0 || data != NULL, "NULL data for a record of %zu bytes", n);
            e.n_bytes = n;
            e.hash = (uint32_t)crc32_z(0, n ? data : Z_NULL, n);
            min_next_offset = e.offset + TFR_HEADER_N_BYTES + n + TFR_FOOTER_N_BYTES;
        } else {
            char prefix[4200];
            snprintf(prefix, sizeof prefix, "%s: record %ld at offset %" PRIu64 ": ", name, e.index, e.offset);
            fuzz_require_line(raw, prefix, "tfr_reader_next");
            snprintf(e.err, sizeof e.err, NAME "%s", raw + strlen(name));
            min_next_offset = e.offset + TFR_HEADER_N_BYTES;
        }
        trace_push(t, &e);
        if (e.status == TFR_BAD_STREAM) {
            /* Every later call repeats it, message included. */
            char again[512];
            FUZZ_REQUIRE(tfr_reader_next(r, &data, &n, again, sizeof again) == TFR_BAD_STREAM,
                         "a call after TFR_BAD_STREAM did not repeat it");
            FUZZ_REQUIRE(!strcmp(again, raw), "the repeated error \"%s\" differs from \"%s\"", again, raw);
            return;
        }
    }
}

static void trace_memory(const uint8_t *data, size_t n, int compression, size_t max_record, uint64_t stream_n_bytes,
                         Trace *t) {
    char err[512];
    TfrReader *r = tfr_reader_open_memory(data, n, NAME, compression, max_record, err, sizeof err);
    FUZZ_REQUIRE(r != NULL, "tfr_reader_open_memory failed: %s", err);
    trace_reader(r, NAME, max_record ? max_record : TFR_DEFAULT_MAX_RECORD_N_BYTES, stream_n_bytes, t);
    tfr_reader_close(r);
}

static void trace_file(const FuzzFile *f, int compression, size_t max_record, uint64_t stream_n_bytes, Trace *t) {
    char err[512];
    TfrReader *r = tfr_reader_open(f->path, compression, max_record, err, sizeof err);
    FUZZ_REQUIRE(r != NULL, "tfr_reader_open(%s) failed: %s", f->path, err);
    trace_reader(r, f->path, max_record ? max_record : TFR_DEFAULT_MAX_RECORD_N_BYTES, stream_n_bytes, t);
    tfr_reader_close(r);
}

static int events_equal(const Event *a, const Event *b) {
    return a->status == b->status && a->n_bytes == b->n_bytes && a->hash == b->hash && a->index == b->index &&
           a->offset == b->offset && !strcmp(a->err, b->err);
}

static void require_same(const Trace *ref, const Trace *t, const char *what) {
    size_t n = ref->n < t->n ? ref->n : t->n;
    for (size_t i = 0; i < n; i++) {
        const Event *a = &ref->ev[i], *b = &t->ev[i];
        FUZZ_REQUIRE(events_equal(a, b),
                     "%s disagrees with the uncompressed memory reader at call %zu: status %d/%d, %zu/%zu bytes, "
                     "index %ld/%ld, offset %" PRIu64 "/%" PRIu64 ", \"%s\" / \"%s\"",
                     what, i, a->status, b->status, a->n_bytes, b->n_bytes, a->index, b->index, a->offset, b->offset, a->err,
                     b->err);
    }
    FUZZ_REQUIRE(ref->n == t->n, "%s: %zu calls, the uncompressed memory reader %zu", what, t->n, ref->n);
}

/* Compresses (data, n) with deflate (window_bits 31: gzip, 15: zlib) into
 * *out; for gzip, as two members split at `split`. */
static size_t compress_stream(const uint8_t *data, size_t n, int window_bits, size_t split, uint8_t **out) {
    size_t parts[2][2] = {{0, split}, {split, n - split}};
    int n_parts = window_bits == 31 ? 2 : 1;
    if (n_parts == 1) parts[0][1] = n;
    size_t cap = 64;
    for (int p = 0; p < n_parts; p++) cap += compressBound((uLong)parts[p][1]) + 64;
    uint8_t *buf = malloc(cap);
    FUZZ_REQUIRE(buf != NULL, "out of memory for the compressed copy");
    size_t used = 0;
    for (int p = 0; p < n_parts; p++) {
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        FUZZ_REQUIRE(deflateInit2(&zs, 1, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY) == Z_OK, "deflateInit2");
        zs.next_in = (Bytef *)(uintptr_t)(data + parts[p][0]);
        zs.avail_in = (uInt)parts[p][1];
        zs.next_out = buf + used;
        zs.avail_out = (uInt)(cap - used);
        FUZZ_REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END, "deflate did not finish");
        used = cap - zs.avail_out;
        deflateEnd(&zs);
    }
    *out = buf;
    return used;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FuzzFile file;
    static Trace ref, t;
    if (!file.path[0]) fuzz_file_init(&file, "fuzz_tfrecord");
    if (size > ((size_t)1 << 24)) return 0;
    size_t max_record = size && (data[size - 1] & 1) ? 64 : 0;

    /* 1. the reference: memory, uncompressed. */
    trace_memory(data, size, IO_COMPRESSION_NONE, max_record, size, &ref);

    /* 2. the file reader, uncompressed, through its 64-byte buffer. */
    fuzz_file_set(&file, data, size);
    trace_file(&file, IO_COMPRESSION_NONE, max_record, size, &t);
    require_same(&ref, &t, "the uncompressed file reader");

    /* 3. gzip, two members. */
    uint8_t *gz;
    size_t split = size ? (size_t)data[0] * size / 256 : 0;
    size_t gz_n = compress_stream(data, size, 31, split, &gz);
    trace_memory(gz, gz_n, IO_COMPRESSION_GZIP, max_record, size, &t);
    require_same(&ref, &t, "the gzip memory reader");
    fuzz_file_set(&file, gz, gz_n);
    /* AUTO must detect gzip (deflate's gzip header is not a valid record header). */
    trace_file(&file, IO_COMPRESSION_AUTO, max_record, size, &t);
    require_same(&ref, &t, "the gzip file reader (auto)");
    free(gz);

    /* 4. zlib. */
    uint8_t *zz;
    size_t zz_n = compress_stream(data, size, 15, 0, &zz);
    trace_memory(zz, zz_n, IO_COMPRESSION_ZLIB, max_record, size, &t);
    require_same(&ref, &t, "the zlib memory reader");
    free(zz);

    /* 5. the raw bytes with auto-detection and forced decompression. */
    trace_memory(data, size, IO_COMPRESSION_AUTO, max_record, (uint64_t)size * 1100 + 64, &t);
    trace_memory(data, size, IO_COMPRESSION_GZIP, max_record, (uint64_t)size * 1100 + 64, &t);
    trace_memory(data, size, IO_COMPRESSION_ZLIB, max_record, (uint64_t)size * 1100 + 64, &t);
    return 0;
}
