/* test_io_cli.c — `tower convert` and `tower inspect`, run in-process
 * through cmd_convert / cmd_inspect with stdout and stderr captured: the
 * exit codes (0 good, 1 bad data, 2 bad command line), the summary lines,
 * and for every bad-record case exactly one line naming file, record and
 * offset; --skip_corrupt goes on and prints the count. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <zlib.h>

#include "cmd/commands.h"
#include "io/example.h"
#include "io/tfrecord.h"
#include "test_io_util.h"

/* Runs a subcommand with the given arguments (NULL-terminated), capturing output. */
static int run(int (*cmd)(int, char **), char **out, char **err, ...) {
    char *argv[64];
    int argc = 0;
    va_list ap;
    va_start(ap, err);
    for (const char *a; (a = va_arg(ap, const char *)) != NULL && argc < 63;) argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    IoCapture cap;
    io_capture_begin(&cap);
    int rc = cmd(argc, argv);
    io_capture_end(&cap, out, err);
    return rc;
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static int label_of(int i) { return i % 3 == 0 ? 7 : i % 4; }

/* 30 Fashion-MNIST-like images of 6 x 5, gzip-compressed like Debian's. */
static void write_idx(const char *images, const char *labels) {
    uint8_t b[16 + 30 * 30], l[8 + 30];
    memset(b, 0, 4);
    b[2] = 8;
    b[3] = 3;
    put_be32(b + 4, 30);
    put_be32(b + 8, 6);
    put_be32(b + 12, 5);
    for (int i = 0; i < 30 * 30; i++) b[16 + i] = (uint8_t)(i * 7);
    memset(l, 0, 4);
    l[2] = 8;
    l[3] = 1;
    put_be32(l + 4, 30);
    for (int i = 0; i < 30; i++) l[8 + i] = (uint8_t)label_of(i);
    gzFile f = gzopen(images, "wb");
    gzwrite(f, b, sizeof b);
    gzclose(f);
    f = gzopen(labels, "wb");
    gzwrite(f, l, sizeof l);
    gzclose(f);
}

static void test_convert_then_inspect(void) {
    char *out, *err;
    const char *images = io_tmp("train-images-idx3-ubyte.gz"), *labels = io_tmp("train-labels-idx1-ubyte.gz");
    write_idx(images, labels);
    const char *prefix = io_tmp("fm/train");
    int rc = run(cmd_convert, &out, &err, "convert", "--from", "idx", "--images", images, "--labels", labels, "--out", prefix,
                 "--num_shards", "3", "--compression=zlib", NULL);
    CHECK_MSG(rc == 0, "convert: %s", err);
    CHECK_CONTAINS(out, "wrote 30 examples (6 x 5 x 1, zlib) to 3 shards");
    CHECK_CONTAINS(out, "train-00000-of-00003.tfrecord .. ");
    int hist[8] = {0};
    for (int i = 0; i < 30; i++) hist[label_of(i)]++;
    char want[160];
    snprintf(want, sizeof want, "labels (label: count): 0: %d, 1: %d, 2: %d, 3: %d, 7: %d\n", hist[0], hist[1], hist[2], hist[3],
             hist[7]);
    CHECK_CONTAINS(out, want);
    CHECK(err[0] == '\0');
    free(out);
    free(err);
    char glob[700];
    snprintf(glob, sizeof glob, "%s-*-of-00003.tfrecord", prefix);
    rc = run(cmd_inspect, &out, &err, "inspect", glob, "--num_classes", "10", NULL);
    CHECK_MSG(rc == 0, "inspect: %s", err);
    CHECK_CONTAINS(out, "train-00001-of-00003.tfrecord: 10 records, zlib, every CRC verified");
    CHECK_CONTAINS(out, "total: 30 good records in 3 files");
    CHECK_CONTAINS(out, "image_raw        bytes_list [1] x 30 bytes  30");
    CHECK_CONTAINS(out, "label            int64_list [1]  30");
    CHECK_CONTAINS(out, "image shape (height x width x depth): 6 x 5 x 1");
    for (int k = 0; k < 8; k++) {
        if (!hist[k]) continue;
        snprintf(want, sizeof want, "\n  %d: %d\n", k, hist[k]);
        CHECK_CONTAINS(out, want);
    }
    CHECK(err[0] == '\0');
    free(out);
    free(err);
    /* The label range check. */
    rc = run(cmd_inspect, &out, &err, "inspect", "--num_classes", "5", glob, NULL);
    CHECK(rc == 1);
    CHECK_CONTAINS(err, "train-00000-of-00003.tfrecord: record 0 at offset 0: label 7 outside [0, 5)");
    CHECK(io_count_lines(err) == 1);
    free(out);
    free(err);
}

static void test_command_line_errors(void) {
    char *out, *err;
    struct {
        int (*cmd)(int, char **);
        const char *args[8];
        int want_rc;
        const char *want_err;
    } cases[] = {
        {cmd_convert, {"convert", "--from", "png", "--out", "x"}, 2, "--from 'png': expected idx, cifar10 or imagefolder"},
        {cmd_convert, {"convert", "--from", "idx", "--images", "a"}, 2, "--out PREFIX is required"},
        {cmd_convert, {"convert", "--out", "x", "--compression", "lz4"}, 2, "--compression 'lz4': expected none, gzip or zlib"},
        {cmd_convert, {"convert", "--out", "x", "--num_shards", "0"}, 2, "--num_shards 0: expected an integer in [1, 99999]"},
        {cmd_convert, {"convert", "--from", "idx", "--out", "data/"}, 2,
         "--out data/ ends in '/': PREFIX is a directory and a file name stem, e.g. --out data/train"},
        {cmd_convert, {"convert", "--from", "cifar10", "--out", "x"}, 2, "needs the .bin files"},
        {cmd_convert, {"convert", "--bogus"}, 2, "unknown flag --bogus"},
        {cmd_inspect, {"inspect"}, 2, "no files given"},
        {cmd_inspect, {"inspect", "--compression", "brotli", "x"}, 2, "--compression 'brotli': expected auto, none, gzip or zlib"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char *argv[9] = {0};
        int argc = 0;
        while (argc < 8 && cases[k].args[argc]) {
            argv[argc] = (char *)cases[k].args[argc];
            argc++;
        }
        IoCapture cap;
        io_capture_begin(&cap);
        int rc = cases[k].cmd(argc, argv);
        io_capture_end(&cap, &out, &err);
        CHECK_MSG(rc == cases[k].want_rc, "case %zu: rc %d", k, rc);
        CHECK_CONTAINS(err, cases[k].want_err);
        CHECK_MSG(io_count_lines(err) == 1, "case %zu: %d lines", k, io_count_lines(err));
        free(out);
        free(err);
    }
    /* A missing input file is a data error (1), not a usage error. */
    int rc = run(cmd_convert, &out, &err, "convert", "--images", io_tmp("missing-images.gz"), "--labels", "y", "--out",
                 io_tmp("m/out"), NULL);
    CHECK(rc == 1);
    CHECK_CONTAINS(err, "missing-images.gz: cannot open");
    free(out);
    free(err);
    /* A file name from the command line or the file system reaches the terminal escaped. */
    char evil[700];
    snprintf(evil, sizeof evil, "%s", io_tmp("evil\n\x1b[2Jimages.gz"));
    rc = run(cmd_convert, &out, &err, "convert", "--images", evil, "--labels", "y", "--out", io_tmp("m/out"), NULL);
    CHECK(rc == 1);
    CHECK_CONTAINS(err, "evil\\x0a\\x1b[2Jimages.gz: cannot open");
    CHECK(io_count_lines(err) == 1);
    free(out);
    free(err);
    rc = run(cmd_inspect, &out, &err, "inspect", io_tmp("missing.tfrecord"), NULL);
    CHECK(rc == 1);
    CHECK_CONTAINS(err, "missing.tfrecord: no such file");
    free(out);
    free(err);
    rc = run(cmd_inspect, &out, &err, "inspect", "--help", NULL);
    CHECK(rc == 0);
    CHECK_CONTAINS(out, "usage: tower inspect");
    CHECK_CONTAINS(out, "--skip_corrupt");
    free(out);
    free(err);
    rc = run(cmd_convert, &out, &err, "convert", "--help", NULL);
    CHECK(rc == 0);
    CHECK_CONTAINS(out, "--from cifar10 --out PREFIX FILE...");
    free(out);
    free(err);
}

enum { BAD_DATA_CRC, BAD_LENGTH_CRC, BAD_TRUNCATED, BAD_NOT_EXAMPLE, BAD_LABEL_RANGE, BAD_IMAGE_SIZE, BAD_IMAGE_NAN,
       BAD_SHAPE_WRAP, BAD_SHAPE_ZERO, BAD_LENGTH, BAD_LENGTH_WRAP4, BAD_LENGTH_WRAP1 };

/* 8 good records with record 3 made bad; offsets[i] receives each header offset.  BAD_IMAGE_NAN: float images,
 * record 3's holding a NaN at index 5 (train and eval refuse it).  BAD_SHAPE_WRAP: record 3's height 2^62 + 1,
 * width 4, depth 3, whose product wraps around 2^64 to its 12 bytes (inspect called it good); BAD_SHAPE_ZERO: height
 * 0 and no bytes. */
static void write_bad_file(const char *path, int kind, uint64_t *offsets) {
    char err[512];
    TfrWriter *w = tfr_writer_open(path, IO_COMPRESSION_NONE, err, sizeof err);
    ExampleBuilder b;
    example_builder_init(&b);
    uint8_t img[12];
    uint64_t off = 0;
    for (int i = 0; i < 8; i++) {
        memset(img, i, sizeof img);
        example_builder_reset(&b);
        float pixels[12]; /* the builder keeps a pointer to it until the encode below */
        if (kind == BAD_IMAGE_NAN) {
            for (int j = 0; j < 12; j++) pixels[j] = i == 3 && j == 5 ? NAN : 0.25f * (float)i;
            example_add_floats(&b, "image_raw", pixels, 12);
        } else {
            example_add_bytes(&b, "image_raw", img, i == 3 && kind == BAD_IMAGE_SIZE ? 11 : i == 3 && kind == BAD_SHAPE_ZERO ? 0 : 12);
        }
        example_add_int64(&b, "label", i == 3 && kind == BAD_LABEL_RANGE ? 12 : i % 2);
        example_add_int64(&b, "height", i != 3 ? 2 : kind == BAD_SHAPE_WRAP ? ((int64_t)1 << 62) + 1 : kind == BAD_SHAPE_ZERO ? 0 : 2);
        example_add_int64(&b, "width", i == 3 && kind == BAD_SHAPE_WRAP ? 4 : 2);
        example_add_int64(&b, "depth", 3);
        const uint8_t *data;
        size_t n = example_builder_encode(&b, &data);
        if (i == 3 && kind == BAD_NOT_EXAMPLE) {
            data = (const uint8_t *)"\xff\xff\xff";
            n = 3;
        }
        offsets[i] = off;
        tfr_writer_write(w, data, n, err, sizeof err);
        off += 16 + n;
    }
    tfr_writer_close(w, err, sizeof err);
    example_builder_free(&b);
    size_t n;
    uint8_t *bytes = io_read_file(path, &n);
    size_t at = (size_t)offsets[3];
    if (kind == BAD_DATA_CRC) bytes[at + 14] ^= 0x40;
    if (kind == BAD_LENGTH_CRC) bytes[at + 9] ^= 0x40;
    if (kind == BAD_LENGTH) tfr_encode_header(bytes + at, (uint64_t)1 << 33);
    /* Lengths whose sum with the 4-byte data CRC wraps past 2^64 (to 0 and to 3 bytes). */
    if (kind == BAD_LENGTH_WRAP4) tfr_encode_header(bytes + at, UINT64_MAX - 3);
    if (kind == BAD_LENGTH_WRAP1) tfr_encode_header(bytes + at, UINT64_MAX);
    io_write_file(path, bytes, kind == BAD_TRUNCATED ? at + 13 : n);
    free(bytes);
}

static void test_bad_records(void) {
    struct {
        int kind;
        const char *what;
        int records_after; /* good records still read after it with --skip_corrupt */
    } cases[] = {
        {BAD_DATA_CRC, "data CRC mismatch (stored 0x", 4},
        {BAD_LENGTH_CRC, "length CRC mismatch (stored 0x", 0},
        {BAD_TRUNCATED, "truncated: end of file inside the data (1 of ", 0},
        {BAD_NOT_EXAMPLE, "payload is not a tf.train.Example", 4},
        {BAD_LABEL_RANGE, "label 12 outside [0, 10)", 4},
        {BAD_IMAGE_SIZE, "image 'image_raw' has 11 bytes, expected 12 (2 x 2 x 3)", 4},
        {BAD_IMAGE_NAN, "image 'image_raw' holds a non-finite value (nan) at index 5", 4},
        {BAD_SHAPE_WRAP, "image 'image_raw' shape 4611686018427387905 x 4 x 3 (height x width x depth) has a dimension over 65536", 4},
        {BAD_SHAPE_ZERO, "image 'image_raw' shape 0 x 2 x 3 (height x width x depth) has a dimension under 1", 4},
        {BAD_LENGTH, "record length 8589934592 bytes is over the limit of 1048576 bytes", 0},
        {BAD_LENGTH_WRAP4, "record length 18446744073709551612 bytes is over the limit of 1048576 bytes", 0},
        {BAD_LENGTH_WRAP1, "record length 18446744073709551615 bytes is over the limit of 1048576 bytes", 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char name[64], want[900];
        snprintf(name, sizeof name, "bad_%zu.tfrecord", k);
        const char *path = io_tmp(name);
        uint64_t offsets[8];
        write_bad_file(path, cases[k].kind, offsets);
        char *out, *err;
        int rc = run(cmd_inspect, &out, &err, "inspect", "--num_classes", "10", "--max_record_mb", "1", path, NULL);
        CHECK_MSG(rc == 1, "case %zu: exit %d", k, rc);
        snprintf(want, sizeof want, "%s: record 3 at offset %llu: %s", path, (unsigned long long)offsets[3], cases[k].what);
        CHECK_CONTAINS(err, want);
        CHECK_MSG(io_count_lines(err) == 1, "case %zu: %d lines on stderr", k, io_count_lines(err));
        CHECK_CONTAINS(out, "3 records, none, 1 bad record (stopped at the first)");
        free(out);
        free(err);
        /* One bad record in 8 is over the default --max_corrupt_fraction: lift it to read on. */
        rc = run(cmd_inspect, &out, &err, "inspect", "--skip_corrupt", "--num_classes=10", "--max_record_mb=1",
                 "--max_corrupt_fraction=1", path, NULL);
        CHECK_MSG(rc == 1, "case %zu --skip_corrupt: exit %d", k, rc);
        CHECK_CONTAINS(err, want);
        CHECK(io_count_lines(err) == 1);
        char counts[96];
        snprintf(counts, sizeof counts, "%d records, none, 1 bad record, ", 3 + cases[k].records_after);
        CHECK_CONTAINS(out, counts);
        CHECK_CONTAINS(out, "bad records: 1; ");
        if (cases[k].kind >= BAD_LENGTH) {
            /* A length past the file's end loses the rest of it, however large (none wraps to a short skip). */
            size_t file_n;
            free(io_read_file(path, &file_n));
            snprintf(want, sizeof want, "(the rest of the file, %zu of its %zu bytes, cannot be read)",
                     file_n - (size_t)offsets[3], file_n);
            CHECK_CONTAINS(err, want);
        }
        free(out);
        free(err);
    }
}

/* ---- raw Examples, for keys no ExampleBuilder can write (a NUL inside) ---- */

static size_t put_varint(uint8_t *p, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

/* Appends field 1 (length-delimited) holding (data, n) to buf at *at. */
static void put_len1(uint8_t *buf, size_t *at, const void *data, size_t n) {
    buf[(*at)++] = 0x0a;
    *at += put_varint(buf + *at, n);
    memcpy(buf + *at, data, n);
    *at += n;
}

/* An Example whose features are (keys[i], key_n_bytes[i]) -> bytes_list{"v"}; returns its size. */
static size_t raw_example(uint8_t *out, const char *const *keys, const size_t *key_n_bytes, int n_keys) {
    uint8_t features[4096], entry[1024], feature[16], bytes_list[8];
    size_t nf = 0;
    for (int i = 0; i < n_keys; i++) {
        size_t nb = 0, nfe = 0, ne = 0;
        put_len1(bytes_list, &nb, "v", 1);       /* BytesList.value */
        put_len1(feature, &nfe, bytes_list, nb); /* Feature.bytes_list */
        put_len1(entry, &ne, keys[i], key_n_bytes[i]); /* entry.key */
        entry[ne++] = 0x12;                     /* entry.value */
        ne += put_varint(entry + ne, nfe);
        memcpy(entry + ne, feature, nfe);
        ne += nfe;
        put_len1(features, &nf, entry, ne);     /* Features.feature */
    }
    size_t n = 0;
    put_len1(out, &n, features, nf); /* Example.features */
    return n;
}

/* Keys and file names from the data reach the terminal escaped, and keys of
 * any length (a NUL inside, 200 bytes) are counted as one key each. */
static void test_inspect_escapes_keys(void) {
    char long_key[200];
    for (int i = 0; i < 200; i++) long_key[i] = (char)('a' + i % 26);
    const char *keys[] = {"new\nline", "\x1b[2J", "car\rriage", "nul\0cut", long_key};
    const size_t key_n_bytes[] = {8, 4, 9, 7, 200};
    const char *path = io_tmp("keys\nforged line \x1b[2J.tfrecord");
    char err_text[512];
    TfrWriter *w = tfr_writer_open(path, IO_COMPRESSION_NONE, err_text, sizeof err_text);
    CHECK_MSG(w != NULL, "%s", err_text);
    uint8_t rec[8192];
    size_t n = raw_example(rec, keys, key_n_bytes, 5);
    for (int i = 0; i < 50 && w; i++) tfr_writer_write(w, rec, n, err_text, sizeof err_text);
    /* The key "nul" (the NUL's prefix) is another key. */
    const char *short_key[] = {"nul"};
    const size_t short_n[] = {3};
    n = raw_example(rec, short_key, short_n, 1);
    if (w) tfr_writer_write(w, rec, n, err_text, sizeof err_text);
    tfr_writer_close(w, err_text, sizeof err_text);
    char *out, *err;
    int rc = run(cmd_inspect, &out, &err, "inspect", path, NULL);
    /* Good records, but none train can read: exit 3, one line saying so (the file's name escaped). */
    CHECK_MSG(rc == 3, "inspect: exit %d: %s", rc, err);
    CHECK_CONTAINS(err, "tower inspect: tower train and eval would refuse these files: "
                        "/tmp/tower_io_test_");
    CHECK_CONTAINS(err, "keys\\x0aforged line \\x1b[2J.tfrecord: record 0 at offset 0: missing feature 'image_raw'\n");
    for (const char *c = err; *c; c++) CHECK_MSG(*c == '\n' || (*c >= 0x20 && *c < 0x7f), "raw byte 0x%02x in stderr", (unsigned char)*c);
    for (const char *c = out; *c; c++) CHECK_MSG(*c == '\n' || (*c >= 0x20 && *c < 0x7f), "raw byte 0x%02x in the output", (unsigned char)*c);
    CHECK_CONTAINS(out, "keys\\x0aforged line \\x1b[2J.tfrecord: 51 records");
    CHECK_CONTAINS(out, "  new\\x0aline ");
    CHECK_CONTAINS(out, "  \\x1b[2J ");
    CHECK_CONTAINS(out, "  car\\x0driage ");
    CHECK_CONTAINS(out, "  nul\\x00cut ");
    CHECK_CONTAINS(out, "\n  nul       ");
    char want[300];
    snprintf(want, sizeof want, "  %.200s bytes_list [1] x 1 bytes  50\n", long_key);
    CHECK_CONTAINS(out, want);
    /* 6 distinct keys: 5 in every record but the last, "nul" in the last. */
    int n_key_lines = 0;
    for (const char *c = strstr(out, "features ("); c && (c = strstr(c, "\n  ")); c++) n_key_lines++;
    CHECK_MSG(n_key_lines == 6, "%d key lines:\n%s", n_key_lines, out);
    /* No record holds the image or the label train and eval read: both said (the image was not). */
    CHECK_CONTAINS(out, "records without an image 'image_raw' (one bytes value, or floats): 51\n");
    CHECK_CONTAINS(out, "records without a single int64 'label': 51\n");
    free(out);
    free(err);
    /* A label key from the command line that holds control bytes: the histogram's title escapes it, as every
     * other line does (it was printed raw). */
    const char *esc_path = io_tmp("esc_label.tfrecord");
    w = tfr_writer_open(esc_path, IO_COMPRESSION_NONE, err_text, sizeof err_text);
    CHECK_MSG(w != NULL, "%s", err_text);
    ExampleBuilder b;
    example_builder_init(&b);
    example_add_bytes(&b, "image_raw", "abcd", 4);
    example_add_int64(&b, "lab\x1b[31m", 2);
    const uint8_t *data;
    const size_t data_n = example_builder_encode(&b, &data);
    for (int i = 0; i < 3 && w; i++) tfr_writer_write(w, data, data_n, err_text, sizeof err_text);
    tfr_writer_close(w, err_text, sizeof err_text);
    example_builder_free(&b);
    rc = run(cmd_inspect, &out, &err, "inspect", "--label_key", "lab\x1b[31m", esc_path, NULL);
    CHECK_MSG(rc == 0, "inspect --label_key: exit %d: %s", rc, err);
    for (const char *c = out; *c; c++) CHECK_MSG(*c == '\n' || (*c >= 0x20 && *c < 0x7f), "raw byte 0x%02x in the output", (unsigned char)*c);
    CHECK_CONTAINS(out, "label histogram ('lab\\x1b[31m': count):\n  2: 3\n");
    free(out);
    free(err);
}

/* A broken frame early in a file loses the rest of it: inspect says how many
 * bytes, and with --skip_corrupt stops once more than --max_corrupt_fraction
 * of the bytes are lost; a single bad record in many stays under the limit. */
static void test_inspect_corrupt_fraction(void) {
    const char *path = io_tmp("frame.tfrecord");
    char e[512];
    TfrWriter *w = tfr_writer_open(path, IO_COMPRESSION_NONE, e, sizeof e);
    ExampleBuilder b;
    example_builder_init(&b);
    uint8_t img[12] = {0};
    example_add_bytes(&b, "image_raw", img, sizeof img);
    example_add_int64(&b, "label", 1);
    const uint8_t *data;
    size_t n = example_builder_encode(&b, &data);
    for (int i = 0; i < 500; i++) tfr_writer_write(w, data, n, e, sizeof e);
    tfr_writer_close(w, e, sizeof e);
    example_builder_free(&b);
    size_t file_n;
    uint8_t *bytes = io_read_file(path, &file_n);
    size_t rec_n = 16 + n;
    bytes[rec_n + 9] ^= 0x40; /* record 1's length CRC: the framing is lost */
    io_write_file(path, bytes, file_n);
    char *out, *err;
    int rc = run(cmd_inspect, &out, &err, "inspect", "--skip_corrupt", path, NULL);
    CHECK(rc == 1);
    char want[256];
    snprintf(want, sizeof want, "1 records, none, 1 bad record, %zu of %zu bytes unreadable", file_n - rec_n, file_n);
    CHECK_CONTAINS(out, want);
    snprintf(want, sizeof want, "(the rest of the file, %zu of its %zu bytes, cannot be read)", file_n - rec_n, file_n);
    CHECK_CONTAINS(err, want);
    CHECK_CONTAINS(err, "over --max_corrupt_fraction 0.01");
    free(out);
    free(err);
    /* Record 250's data CRC instead: 1 record of 500 lost (0.2 %), under the limit. */
    bytes[rec_n + 9] ^= 0x40;
    bytes[250 * rec_n + 14] ^= 0x40;
    io_write_file(path, bytes, file_n);
    rc = run(cmd_inspect, &out, &err, "inspect", "--skip_corrupt", path, NULL);
    CHECK(rc == 1);
    snprintf(want, sizeof want, "499 records, none, 1 bad record, %zu of %zu bytes unreadable", rec_n, file_n);
    CHECK_CONTAINS(out, want);
    CHECK(strstr(err, "max_corrupt_fraction") == NULL);
    free(out);
    free(err);
    /* A limit of 0 stops at the first. */
    rc = run(cmd_inspect, &out, &err, "inspect", "--skip_corrupt", "--max_corrupt_fraction", "0", path, NULL);
    CHECK(rc == 1);
    CHECK_CONTAINS(err, "over --max_corrupt_fraction 0");
    CHECK_CONTAINS(out, "250 records, none, 1 bad record");
    free(out);
    free(err);
    rc = run(cmd_inspect, &out, &err, "inspect", "--max_corrupt_fraction", "2", path, NULL);
    CHECK(rc == 2);
    CHECK_CONTAINS(err, "--max_corrupt_fraction 2: expected a number in [0, 1]");
    free(out);
    free(err);
    free(bytes);
}

/* Converting again with another --num_shards is refused while shards of the
 * prefix exist (the documented glob would read both); --overwrite replaces
 * them, removing the old ones the new ones do not overwrite.  More shards
 * than examples: a warning. */
static void test_convert_overwrite(void) {
    char *out, *err;
    char images[600], labels[600], prefix[600]; /* io_tmp's buffers are reused by the captures */
    snprintf(images, sizeof images, "%s", io_tmp("ow-images.gz"));
    snprintf(labels, sizeof labels, "%s", io_tmp("ow-labels.gz"));
    snprintf(prefix, sizeof prefix, "%s", io_tmp("ow/train"));
    write_idx(images, labels);
    int rc = run(cmd_convert, &out, &err, "convert", "--images", images, "--labels", labels, "--out", prefix, "--num_shards", "3",
                 NULL);
    CHECK_MSG(rc == 0, "convert: %s", err);
    free(out);
    free(err);
    rc = run(cmd_convert, &out, &err, "convert", "--images", images, "--labels", labels, "--out", prefix, "--num_shards", "2",
             NULL);
    CHECK_MSG(rc == 1, "a second conversion beside 3 shards: exit %d", rc);
    CHECK_CONTAINS(err, "3 shards of this prefix exist already (");
    CHECK_CONTAINS(err, "pass --overwrite");
    CHECK(io_count_lines(err) == 1);
    free(out);
    free(err);
    char glob[700];
    snprintf(glob, sizeof glob, "%s-*.tfrecord", prefix);
    rc = run(cmd_inspect, &out, &err, "inspect", glob, NULL);
    CHECK_CONTAINS(out, "total: 30 good records in 3 files"); /* the refused run left the old shards as they were */
    free(out);
    free(err);
    rc = run(cmd_convert, &out, &err, "convert", "--images", images, "--labels", labels, "--out", prefix, "--num_shards", "2",
             "--overwrite", NULL);
    CHECK_MSG(rc == 0, "--overwrite: %s", err);
    CHECK_CONTAINS(out, "--overwrite: removed 3 old shards");
    free(out);
    free(err);
    rc = run(cmd_inspect, &out, &err, "inspect", glob, NULL);
    CHECK_MSG(rc == 0, "inspect after --overwrite: %s", err);
    CHECK_CONTAINS(out, "total: 30 good records in 2 files");
    free(out);
    free(err);    /* More shards than examples: written (valid, empty TFRecord files), with one warning line. */
    snprintf(prefix, sizeof prefix, "%s", io_tmp("many/train"));
    rc = run(cmd_convert, &out, &err, "convert", "--images", images, "--labels", labels, "--out", prefix, "--num_shards",
             "40", NULL);
    CHECK_MSG(rc == 0, "40 shards of 30 examples: %s", err);
    CHECK_CONTAINS(err, "tower convert: warning: 10 of the 40 shards are empty (30 examples; --num_shards at most 30 "
                        "writes none empty)");
    CHECK(io_count_lines(err) == 1);
    free(out);
    free(err);
}

/* inspect's last line: records that train and eval refuse although every record is good (exit 3): a shape that
 * varies (28 x 28 x 1 and 1 x 28 x 28 of the same 784 bytes), an image of floats among bytes, a negative label;
 * and a good file read as a stream is not read again for the verdict (a FIFO waited for ever). */
static void test_inspect_train_verdict(void) {
    ExampleBuilder b;
    example_builder_init(&b);
    uint8_t img[784];
    float fimg[784];
    memset(img, 7, sizeof img);
    for (int i = 0; i < 784; i++) fimg[i] = 0.5f;
    const char *cases[3] = {"shape varies", "kind varies", "negative label"};
    const char *want[3] = {"would refuse the records whose height, width and depth features are not 28 x 28 x 1",
                           "would refuse the records whose image 'image_raw' is not bytes",
                           "would refuse 1 record whose label 'label' is negative"};
    for (int k = 0; k < 3; k++) {
        char name[64], err_text[512];
        snprintf(name, sizeof name, "verdict%d.tfrecord", k);
        const char *path = io_tmp(name);
        TfrWriter *w = tfr_writer_open(path, IO_COMPRESSION_NONE, err_text, sizeof err_text);
        for (int i = 0; i < 4 && w; i++) {
            example_builder_reset(&b);
            if (k == 1 && i == 2) example_add_floats(&b, "image_raw", fimg, 784);
            else example_add_bytes(&b, "image_raw", img, sizeof img);
            example_add_int64(&b, "label", k == 2 && i == 3 ? -1 : i);
            example_add_int64(&b, "height", k == 0 && i % 2 ? 1 : 28);
            example_add_int64(&b, "width", 28);
            example_add_int64(&b, "depth", k == 0 && i % 2 ? 28 : 1);
            const uint8_t *data;
            const size_t n = example_builder_encode(&b, &data);
            tfr_writer_write(w, data, n, err_text, sizeof err_text);
        }
        tfr_writer_close(w, err_text, sizeof err_text);
        char *out, *err;
        const int rc = run(cmd_inspect, &out, &err, "inspect", path, NULL);
        CHECK_MSG(rc == 3 && strstr(err, want[k]), "inspect of a file whose %s: exit %d: %s", cases[k], rc, err);
        free(out);
        free(err);
    }
    /* Encoded images (JPEG bytes; the rest of a JPEG does not matter here): with height, width and depth of their
     * stored size beside them, not a shape error (train decodes them); a record among them whose image is not a
     * JPEG or PNG is one train refuses. */
    uint8_t jpeg[40];
    memset(jpeg, 1, sizeof jpeg);
    memcpy(jpeg, "\xff\xd8\xff\xe0", 4);
    for (int k = 0; k < 2; k++) {
        char err_text[512];
        const char *path = io_tmp(k ? "verdict_enc_bad.tfrecord" : "verdict_enc.tfrecord");
        TfrWriter *w = tfr_writer_open(path, IO_COMPRESSION_NONE, err_text, sizeof err_text);
        for (int i = 0; i < 3 && w; i++) {
            example_builder_reset(&b);
            if (k && i == 2) example_add_bytes(&b, "image_raw", img, 30); /* bytes of 7: no image */
            else example_add_bytes(&b, "image_raw", jpeg, sizeof jpeg);
            example_add_int64(&b, "label", i);
            if (!(k && i == 2)) { /* the stored size (the odd one out has none: not a shape error) */
                example_add_int64(&b, "height", 30);
                example_add_int64(&b, "width", 40);
                example_add_int64(&b, "depth", 3);
            }
            const uint8_t *data;
            const size_t n = example_builder_encode(&b, &data);
            tfr_writer_write(w, data, n, err_text, sizeof err_text);
        }
        tfr_writer_close(w, err_text, sizeof err_text);
        char *out, *err;
        const int rc = run(cmd_inspect, &out, &err, "inspect", path, NULL);
        if (k)
            CHECK_MSG(rc == 3 && strstr(err, "would refuse 1 record whose image 'image_raw' is not a JPEG or PNG"),
                      "inspect of encoded images and one that is not: exit %d: %s", rc, err);
        else
            CHECK_MSG(rc == 0 && strstr(out, "read these files: encoded JPEG or PNG images ('image_raw', 40 to 40 bytes"),
                      "inspect of encoded images with their stored shape: exit %d: %s%s", rc, out, err);
        free(out);
        free(err);
    }
    example_builder_free(&b);
    /* A FIFO holding a good file: the report, then no second read (the verdict not checked), exit 0. */
    const char *good = io_tmp("verdict_good.tfrecord"), *fifo = io_tmp("verdict.fifo");
    char err_text[512];
    TfrWriter *w = tfr_writer_open(good, IO_COMPRESSION_NONE, err_text, sizeof err_text);
    example_builder_init(&b);
    example_add_bytes(&b, "image_raw", img, sizeof img);
    example_add_int64(&b, "label", 1);
    const uint8_t *data;
    const size_t n = example_builder_encode(&b, &data);
    if (w) tfr_writer_write(w, data, n, err_text, sizeof err_text);
    tfr_writer_close(w, err_text, sizeof err_text);
    example_builder_free(&b);
    unlink(fifo);
    CHECK(mkfifo(fifo, 0600) == 0);
    pid_t feeder = fork();
    if (feeder == 0) { /* writes the file into the FIFO once, as `cat good > fifo` */
        size_t len;
        uint8_t *bytes = io_read_file(good, &len);
        FILE *f = fopen(fifo, "wb");
        if (f && bytes) fwrite(bytes, 1, len, f);
        if (f) fclose(f);
        _exit(0);
    }
    char *out, *err;
    const int rc = run(cmd_inspect, &out, &err, "inspect", fifo, NULL);
    CHECK_MSG(rc == 0 && strstr(out, "1 records") && strstr(out, "tower train and eval: not checked"),
              "inspect of a FIFO: exit %d: %s%s", rc, out, err);
    waitpid(feeder, NULL, 0);
    free(out);
    free(err);
}

/* A bad record under a long path (4 directories of 200 bytes): the message whole, the file, record and reason.
 * Each FILE argument is taken whole: a comma or a space is the name's, not a list's. */
static void test_inspect_names_whole(void) {
    char dir[1024], path[1100], want[1400];
    snprintf(dir, sizeof dir, "%s", io_tmp("long"));
    CHECK_MSG(mkdir(dir, 0700) == 0, "mkdir %s", dir);
    for (int d = 0; d < 4; d++) {
        size_t n = strlen(dir);
        dir[n++] = '/';
        memset(dir + n, 'a', 200);
        dir[n + 200] = '\0';
        CHECK_MSG(mkdir(dir, 0700) == 0, "mkdir %s", dir);
    }
    snprintf(path, sizeof path, "%s/bad.tfrecord", dir);
    uint64_t offsets[8];
    write_bad_file(path, BAD_DATA_CRC, offsets);
    char *out, *err;
    int rc = run(cmd_inspect, &out, &err, "inspect", "--num_classes", "10", path, NULL);
    snprintf(want, sizeof want, "%s: record 3 at offset %llu: data CRC mismatch (stored 0x", path,
             (unsigned long long)offsets[3]);
    CHECK_MSG(rc == 1, "a bad record under a %zu-byte path: exit %d", strlen(path), rc);
    CHECK_CONTAINS(err, want);
    CHECK_MSG(io_count_lines(err) == 1, "%d lines on stderr", io_count_lines(err));
    free(out);
    free(err);

    const char *comma = io_tmp("x,y.tfrecord"), *plain = io_tmp("k.tfrecord");
    write_bad_file(comma, BAD_DATA_CRC, offsets); /* its 3 good records before the bad one: read, then the refusal */
    rc = run(cmd_inspect, &out, &err, "inspect", "--num_classes", "10", comma, NULL);
    snprintf(want, sizeof want, "%s: record 3 at offset", comma);
    CHECK_MSG(rc == 1, "inspect x,y.tfrecord: exit %d (%s)", rc, err);
    CHECK_CONTAINS(err, want);
    free(out);
    free(err);
    write_bad_file(plain, BAD_DATA_CRC, offsets);
    char spaced[1100];
    snprintf(spaced, sizeof spaced, " %s", plain); /* " /tmp/.../k.tfrecord": no such file, though the rest is one */
    rc = run(cmd_inspect, &out, &err, "inspect", "--num_classes", "10", spaced, NULL);
    snprintf(want, sizeof want, "%s: no such file", spaced);
    CHECK_MSG(rc == 1, "inspect 'DIR/ k.tfrecord': exit %d", rc);
    CHECK_CONTAINS(err, want);
    free(out);
    free(err);
}

int main(void) {
    test_inspect_train_verdict();
    test_convert_then_inspect();
    test_command_line_errors();
    test_bad_records();
    test_inspect_escapes_keys();
    test_convert_overwrite();
    test_inspect_corrupt_fraction();
    test_inspect_names_whole();
    return io_test_result("test_io_cli");
}
