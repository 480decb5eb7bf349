/* test_io_tfrecord.c — TFRecord framing: exact bytes against a file built by
 * hand, round trips (none, gzip, zlib; file and memory readers; detection),
 * and every bad-input case of the reader with its one-line message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "io/crc32c.h"
#include "io/tfrecord.h"
#include "test_io_util.h"

/* Records "abc" and "" framed by hand: length 3 LE, masked crc32c of the 8
 * length bytes (0x0e4999b0), "abc", masked crc32c("abc") (0x21f1576e); then
 * length 0, its masked CRC (0x07980329) and the masked CRC of no bytes
 * (0xa282ead8 = mask(0)).  TensorFlow 2.21's tf.io.TFRecordWriter writes
 * these same 35 bytes. */
static const uint8_t HAND_MADE[35] = {
    0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xb0, 0x99, 0x49, 0x0e, 0x61, 0x62, 0x63, 0x6e, 0x57, 0xf1,
    0x21, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x29, 0x03, 0x98, 0x07, 0xd8, 0xea, 0x82, 0xa2};

static void test_exact_bytes(void) {
    char err[512];
    const char *path = io_tmp("hand.tfrecord");
    TfrWriter *w = tfr_writer_open(path, IO_COMPRESSION_NONE, err, sizeof err);
    CHECK(w != NULL);
    CHECK(tfr_writer_write(w, "abc", 3, err, sizeof err) == 0);
    CHECK(tfr_writer_write(w, "", 0, err, sizeof err) == 0);
    CHECK(tfr_writer_n_records(w) == 2);
    CHECK(tfr_writer_close(w, err, sizeof err) == 0);
    size_t n;
    uint8_t *got = io_read_file(path, &n);
    CHECK(n == sizeof HAND_MADE && memcmp(got, HAND_MADE, n) == 0);
    free(got);
    /* The hand-made constants follow from the formula, too. */
    uint8_t hdr[12];
    tfr_encode_header(hdr, 3);
    CHECK(memcmp(hdr, HAND_MADE, 12) == 0);
    CHECK(crc32c_mask(crc32c("abc", 3)) == 0x21f1576eu);
    /* And the reader returns them. */
    TfrReader *r = tfr_reader_open_memory(HAND_MADE, sizeof HAND_MADE, "hand", IO_COMPRESSION_AUTO, 0, err, sizeof err);
    const uint8_t *d;
    size_t dn;
    CHECK(tfr_reader_compression(r) == IO_COMPRESSION_NONE);
    CHECK(tfr_reader_next(r, &d, &dn, err, sizeof err) == TFR_RECORD && dn == 3 && !memcmp(d, "abc", 3));
    CHECK(tfr_reader_record_offset(r) == 0);
    CHECK(tfr_reader_next(r, &d, &dn, err, sizeof err) == TFR_RECORD && dn == 0);
    CHECK(tfr_reader_record_index(r) == 1 && tfr_reader_record_offset(r) == 19);
    CHECK(tfr_reader_next(r, &d, &dn, err, sizeof err) == TFR_END);
    tfr_reader_close(r);
}

/* Deterministic record contents: record i has size sizes[i], byte j = f(i, j). */
static const size_t SIZES[] = {0, 1, 7, 100, 4096, 70000, 300000, 5, 1u << 20};
#define N_SIZES (sizeof SIZES / sizeof SIZES[0])
static uint8_t rec_byte(size_t i, size_t j) { return (uint8_t)((i * 131 + j * 7 + (j >> 9)) & 0xff); }

static void write_records(const char *path, int compression) {
    char err[512];
    TfrWriter *w = tfr_writer_open(path, compression, err, sizeof err);
    CHECK_MSG(w != NULL, "%s", err);
    if (!w) return;
    uint8_t *buf = malloc(1u << 20);
    for (size_t i = 0; i < N_SIZES; i++) {
        for (size_t j = 0; j < SIZES[i]; j++) buf[j] = rec_byte(i, j);
        CHECK(tfr_writer_write(w, buf, SIZES[i], err, sizeof err) == 0);
        if (i == 3) CHECK(tfr_writer_flush(w, err, sizeof err) == 0);
    }
    CHECK(tfr_writer_close(w, err, sizeof err) == 0);
    free(buf);
}

static void check_records(TfrReader *r, int want_compression) {
    char err[512];
    CHECK(r != NULL);
    if (!r) return;
    CHECK(tfr_reader_compression(r) == want_compression);
    const uint8_t *d;
    size_t n;
    uint64_t offset = 0;
    for (size_t i = 0; i < N_SIZES; i++) {
        int st = tfr_reader_next(r, &d, &n, err, sizeof err);
        CHECK_MSG(st == TFR_RECORD, "record %zu: %s", i, err);
        if (st != TFR_RECORD) return;
        CHECK(n == SIZES[i]);
        int same = 1;
        for (size_t j = 0; j < n && same; j++) same = d[j] == rec_byte(i, j);
        CHECK_MSG(same, "record %zu differs", i);
        CHECK(tfr_reader_record_index(r) == (long)i);
        CHECK(tfr_reader_record_offset(r) == offset);
        offset += 16 + SIZES[i];
    }
    CHECK(tfr_reader_next(r, &d, &n, err, sizeof err) == TFR_END);
    CHECK(tfr_reader_next(r, &d, &n, err, sizeof err) == TFR_END);
}

static void test_round_trips(void) {
    char err[512];
    const int kinds[3] = {IO_COMPRESSION_NONE, IO_COMPRESSION_GZIP, IO_COMPRESSION_ZLIB};
    const char *names[3] = {"rt_none.tfrecord", "rt_gzip.tfrecord", "rt_zlib.tfrecord"};
    for (int k = 0; k < 3; k++) {
        const char *path = io_tmp(names[k]);
        write_records(path, kinds[k]);
        size_t n;
        uint8_t *bytes = io_read_file(path, &n);
        if (kinds[k] == IO_COMPRESSION_GZIP) CHECK(bytes[0] == 0x1f && bytes[1] == 0x8b);
        if (kinds[k] == IO_COMPRESSION_ZLIB) CHECK(bytes[0] == 0x78 && ((bytes[0] << 8) | bytes[1]) % 31 == 0);
        /* Explicit compression and auto-detection, from a file and from memory. */
        TfrReader *r = tfr_reader_open(path, kinds[k], 0, err, sizeof err);
        check_records(r, kinds[k]);
        tfr_reader_close(r);
        r = tfr_reader_open(path, IO_COMPRESSION_AUTO, 0, err, sizeof err);
        check_records(r, kinds[k]);
        tfr_reader_close(r);
        r = tfr_reader_open_memory(bytes, n, names[k], IO_COMPRESSION_AUTO, 0, err, sizeof err);
        check_records(r, kinds[k]);
        tfr_reader_close(r);
        free(bytes);
    }
    /* Writer auto-compression from the extension. */
    write_records(io_tmp("ext.tfrecord.gz"), IO_COMPRESSION_AUTO);
    size_t n;
    uint8_t *b = io_read_file(io_tmp("ext.tfrecord.gz"), &n);
    CHECK(b[0] == 0x1f && b[1] == 0x8b);
    free(b);
    /* Concatenated gzip members read as one stream (as gzip -c a b does). */
    const char *a = io_tmp("cat_a.gz"), *c = io_tmp("cat_c.gz");
    TfrWriter *w = tfr_writer_open(a, IO_COMPRESSION_GZIP, err, sizeof err);
    tfr_writer_write(w, "first", 5, err, sizeof err);
    tfr_writer_close(w, err, sizeof err);
    w = tfr_writer_open(c, IO_COMPRESSION_GZIP, err, sizeof err);
    tfr_writer_write(w, "second", 6, err, sizeof err);
    tfr_writer_close(w, err, sizeof err);
    size_t na, nc;
    uint8_t *ba = io_read_file(a, &na), *bc = io_read_file(c, &nc);
    uint8_t *both = malloc(na + nc);
    memcpy(both, ba, na);
    memcpy(both + na, bc, nc);
    TfrReader *r = tfr_reader_open_memory(both, na + nc, "cat", IO_COMPRESSION_AUTO, 0, err, sizeof err);
    const uint8_t *d;
    size_t dn;
    CHECK(tfr_reader_next(r, &d, &dn, err, sizeof err) == TFR_RECORD && dn == 5 && !memcmp(d, "first", 5));
    CHECK(tfr_reader_next(r, &d, &dn, err, sizeof err) == TFR_RECORD && dn == 6 && !memcmp(d, "second", 6));
    CHECK(tfr_reader_next(r, &d, &dn, err, sizeof err) == TFR_END);
    tfr_reader_close(r);
    free(ba);
    free(bc);
    free(both);
    /* An empty file has no records. */
    io_write_file(io_tmp("empty.tfrecord"), "", 0);
    r = tfr_reader_open(io_tmp("empty.tfrecord"), IO_COMPRESSION_AUTO, 0, err, sizeof err);
    CHECK(r && tfr_reader_next(r, &d, &dn, err, sizeof err) == TFR_END);
    tfr_reader_close(r);
    /* Parsing of compression names. */
    CHECK(io_compression_parse("GZIP") == IO_COMPRESSION_GZIP && io_compression_parse("zlib") == IO_COMPRESSION_ZLIB);
    CHECK(io_compression_parse("") == IO_COMPRESSION_NONE && io_compression_parse("none") == IO_COMPRESSION_NONE);
    CHECK(io_compression_parse("auto") == IO_COMPRESSION_AUTO && io_compression_parse("lz4") == -1);
}

/* Reads a memory image until something other than a record; returns that status and the message. */
static int read_until_problem(const uint8_t *bytes, size_t n, int compression, size_t max, long *n_good, char *err,
                              size_t err_n) {
    TfrReader *r = tfr_reader_open_memory(bytes, n, "bad.tfrecord", compression, max, err, err_n);
    if (!r) return 99;
    const uint8_t *d;
    size_t dn;
    int st;
    *n_good = 0;
    while ((st = tfr_reader_next(r, &d, &dn, err, err_n)) == TFR_RECORD) (*n_good)++;
    /* A bad stream stays bad. */
    if (st == TFR_BAD_STREAM) {
        char again[512];
        if (tfr_reader_next(r, &d, &dn, again, sizeof again) != TFR_BAD_STREAM || strcmp(again, err)) st = 98;
    }
    tfr_reader_close(r);
    return st;
}

static void test_bad_inputs(void) {
    /* Two records: "abc" (bytes 0..18) and 40 bytes (19..74). */
    uint8_t file[19 + 56];
    memcpy(file, HAND_MADE, 19);
    uint8_t payload[40];
    for (int i = 0; i < 40; i++) payload[i] = (uint8_t)(i * 3);
    tfr_encode_header(file + 19, 40);
    memcpy(file + 31, payload, 40);
    tfr_encode_footer(file + 71, payload, 40);
    char err[512];
    long good;

    /* Truncation at every length: where it ends decides the message. */
    for (size_t cut = 1; cut < sizeof file; cut++) {
        if (cut == 19) continue; /* a clean end after record 0 */
        int st = read_until_problem(file, cut, IO_COMPRESSION_NONE, 0, &good, err, sizeof err);
        size_t rec_start = cut < 19 ? 0 : 19, in = cut - rec_start, dlen = cut < 19 ? 3 : 40;
        CHECK_MSG(st == TFR_BAD_STREAM, "cut %zu: status %d", cut, st);
        CHECK(good == (cut < 19 ? 0 : 1));
        char where[96];
        snprintf(where, sizeof where, "bad.tfrecord: record %d at offset %zu: truncated", cut < 19 ? 0 : 1, rec_start);
        CHECK_CONTAINS(err, where);
        if (in < 8) CHECK_CONTAINS(err, "inside the length (");
        else if (in < 12) CHECK_CONTAINS(err, "inside the length CRC");
        else if (in < 12 + dlen) CHECK_CONTAINS(err, "inside the data (");
        else CHECK_CONTAINS(err, "inside the data CRC");
    }
    CHECK(read_until_problem(file, 19, IO_COMPRESSION_NONE, 0, &good, err, sizeof err) == TFR_END && good == 1);

    /* Length CRC mismatch: the stream cannot go on. */
    uint8_t bad[sizeof file];
    memcpy(bad, file, sizeof file);
    bad[19 + 9] ^= 0x01;
    CHECK(read_until_problem(bad, sizeof bad, IO_COMPRESSION_NONE, 0, &good, err, sizeof err) == TFR_BAD_STREAM);
    CHECK(good == 1);
    CHECK_CONTAINS(err, "bad.tfrecord: record 1 at offset 19: length CRC mismatch (stored 0x");
    /* A flipped length bit is caught by the length CRC too. */
    memcpy(bad, file, sizeof file);
    bad[19] ^= 0x04;
    CHECK(read_until_problem(bad, sizeof bad, IO_COMPRESSION_NONE, 0, &good, err, sizeof err) == TFR_BAD_STREAM);
    CHECK_CONTAINS(err, "record 1 at offset 19: length CRC mismatch");

    /* Data CRC mismatch: this record is bad, the next one still reads. */
    memcpy(bad, file, sizeof file);
    bad[13] ^= 0x80;
    TfrReader *r = tfr_reader_open_memory(bad, sizeof bad, "bad.tfrecord", IO_COMPRESSION_NONE, 0, err, sizeof err);
    const uint8_t *d;
    size_t dn;
    CHECK(tfr_reader_next(r, &d, &dn, err, sizeof err) == TFR_BAD_RECORD);
    uint32_t computed = crc32c(bad + 12, 3), stored = crc32c("abc", 3);
    char want[160];
    snprintf(want, sizeof want, "bad.tfrecord: record 0 at offset 0: data CRC mismatch (stored 0x%08x, computed 0x%08x)", stored,
             computed);
    CHECK_CONTAINS(err, want);
    CHECK(tfr_reader_next(r, &d, &dn, err, sizeof err) == TFR_RECORD && dn == 40 && !memcmp(d, payload, 40));
    CHECK(tfr_reader_record_index(r) == 1);
    tfr_reader_close(r);
    /* A corrupt data CRC field itself. */
    memcpy(bad, file, sizeof file);
    bad[72] ^= 0x10;
    CHECK(read_until_problem(bad, sizeof bad, IO_COMPRESSION_NONE, 0, &good, err, sizeof err) == TFR_BAD_RECORD);
    CHECK_CONTAINS(err, "record 1 at offset 19: data CRC mismatch");

    /* An absurd length with a valid length CRC: never allocated. */
    uint8_t huge[12 + 8];
    tfr_encode_header(huge, (uint64_t)1 << 60);
    memset(huge + 12, 0, 8);
    CHECK(read_until_problem(huge, sizeof huge, IO_COMPRESSION_NONE, 0, &good, err, sizeof err) == TFR_BAD_STREAM);
    CHECK_CONTAINS(err, "bad.tfrecord: record 0 at offset 0: record length 1152921504606846976 bytes is over the limit of 67108864 bytes");
    /* Over a small limit but present: skipped as one bad record, the next reads. */
    r = tfr_reader_open_memory(file, sizeof file, "bad.tfrecord", IO_COMPRESSION_NONE, 10, err, sizeof err);
    CHECK(tfr_reader_next(r, &d, &dn, err, sizeof err) == TFR_RECORD && dn == 3);
    CHECK(tfr_reader_next(r, &d, &dn, err, sizeof err) == TFR_BAD_RECORD);
    CHECK_CONTAINS(err, "record 1 at offset 19: record length 40 bytes is over the limit of 10 bytes");
    CHECK(tfr_reader_next(r, &d, &dn, err, sizeof err) == TFR_END);
    tfr_reader_close(r);

    /* Not a TFRecord file at all (text): the first header is rejected. */
    const char *text = "hello, this is not a tfrecord file\n";
    CHECK(read_until_problem((const uint8_t *)text, strlen(text), IO_COMPRESSION_AUTO, 0, &good, err, sizeof err) ==
          TFR_BAD_STREAM);
    CHECK_CONTAINS(err, "record 0 at offset 0: length CRC mismatch");

    /* Compressed: truncated stream, corrupt deflate data. */
    const char *gz = io_tmp("bad.gz");
    write_records(gz, IO_COMPRESSION_GZIP);
    size_t n;
    uint8_t *zb = io_read_file(gz, &n);
    CHECK(read_until_problem(zb, n - 9, IO_COMPRESSION_AUTO, 0, &good, err, sizeof err) == TFR_BAD_STREAM);
    CHECK_CONTAINS(err, "gzip data error");
    CHECK_CONTAINS(err, "bad.tfrecord: record ");
    for (size_t i = n / 3; i < n / 3 + 64; i++) zb[i] ^= 0x5a;
    CHECK(read_until_problem(zb, n, IO_COMPRESSION_AUTO, 0, &good, err, sizeof err) < 0);
    CHECK_CONTAINS(err, "bad.tfrecord: record ");
    free(zb);
    /* A zlib stream with trailing garbage. */
    const char *zz = io_tmp("trail.zz");
    write_records(zz, IO_COMPRESSION_ZLIB);
    zb = io_read_file(zz, &n);
    uint8_t *trail = malloc(n + 4);
    memcpy(trail, zb, n);
    memcpy(trail + n, "junk", 4);
    CHECK(read_until_problem(trail, n + 4, IO_COMPRESSION_ZLIB, 0, &good, err, sizeof err) == TFR_BAD_STREAM);
    CHECK(good == (long)N_SIZES);
    CHECK_CONTAINS(err, "trailing bytes");
    free(trail);
    free(zb);

    /* Files that cannot be opened or created. */
    CHECK(tfr_reader_open(io_tmp("does-not-exist"), IO_COMPRESSION_AUTO, 0, err, sizeof err) == NULL);
    CHECK_CONTAINS(err, "does-not-exist: cannot open: ");
    CHECK(tfr_writer_open(io_tmp("no-such-dir/x.tfrecord"), IO_COMPRESSION_NONE, err, sizeof err) == NULL);
    CHECK_CONTAINS(err, "x.tfrecord: cannot create: ");
}

/* A record larger than half the reader's buffer (read straight into the record, past the buffer), then one
 * with a bad data CRC: each one's bytes are its own (16 + its data), and a stream's size counts the large
 * record's bytes. */
static void test_large_record_accounting(void) {
    const size_t big = (size_t)3 << 20;
    uint8_t *payload = calloc(big, 1), small[40];
    for (int i = 0; i < 40; i++) small[i] = (uint8_t)i;
    const char *path = io_tmp("large.tfrecord");
    char err[512];
    TfrWriter *w = tfr_writer_open(path, IO_COMPRESSION_NONE, err, sizeof err);
    CHECK(w && tfr_writer_write(w, payload, big, err, sizeof err) == 0 && tfr_writer_write(w, small, 40, err, sizeof err) == 0 &&
          tfr_writer_close(w, err, sizeof err) == 0);
    size_t n;
    uint8_t *file = io_read_file(path, &n);
    file[n - 1] ^= 0x01; /* the second record's data CRC */
    io_write_file(path, file, n);
    for (int stream = 0; stream < 2; stream++) {
        char src[600];
        snprintf(src, sizeof src, "%s", path);
        FILE *pipe = NULL;
        if (stream) { /* through a pipe: a stream whose size is what was read */
            snprintf(src, sizeof src, "/dev/stdin");
            char cmd[700];
            snprintf(cmd, sizeof cmd, "cat '%s'", path);
            pipe = popen(cmd, "r");
            if (!pipe || dup2(fileno(pipe), 0) < 0) continue;
        }
        TfrReader *r = tfr_reader_open(src, IO_COMPRESSION_NONE, 0, err, sizeof err);
        const uint8_t *d;
        size_t dn;
        CHECK(r && tfr_reader_next(r, &d, &dn, err, sizeof err) == TFR_RECORD && dn == big, "%s: %s", src, err);
        /* what the pipeline counts lost for a record whose payload it refuses (not an Example, no label) */
        CHECK(r && tfr_reader_lost_n_bytes(r) == 16 + big, "%s: %llu bytes in the large record, not %zu", src,
              r ? (unsigned long long)tfr_reader_lost_n_bytes(r) : 0ULL, 16 + big);
        CHECK(r && tfr_reader_next(r, &d, &dn, err, sizeof err) == TFR_BAD_RECORD, "%s: not the bad record", src);
        CHECK(r && tfr_reader_lost_n_bytes(r) == 16 + 40, "%s: %llu bytes lost, not the bad record's 56", src,
              r ? (unsigned long long)tfr_reader_lost_n_bytes(r) : 0ULL);
        CHECK(r && tfr_reader_next(r, &d, &dn, err, sizeof err) == TFR_END && tfr_reader_file_n_bytes(r) == n,
              "%s: size %llu, not %zu", src, r ? (unsigned long long)tfr_reader_file_n_bytes(r) : 0ULL, n);
        tfr_reader_close(r);
        if (pipe) pclose(pipe);
    }
    free(file);
    free(payload);
}

int main(void) {
    test_exact_bytes();
    test_round_trips();
    test_bad_inputs();
    test_large_record_accounting();
    return io_test_result("test_io_tfrecord");
}
