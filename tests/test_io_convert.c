/* test_io_convert.c — the converters on small IDX and CIFAR-10 files made
 * here: pixels land in HWC order with the right labels and shape features,
 * round-robin across TF-style shard names, compressed or not; and each
 * malformed input gives one line naming the file, record and offset, with
 * no output file left behind. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "io/convert.h"
#include "io/example.h"
#include "io/pipeline.h"
#include "io/tfrecord.h"
#include "test_io_util.h"

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint8_t pixel(int i, int j) { return (uint8_t)((i * 37 + j * 11 + 3) & 0xff); }

/* IDX images n x rows x cols [x ch] and labels; gz writes them gzip-compressed.
 * extra_image_bytes < 0 truncates the images file, > 0 appends. */
static void write_idx(const char *images, const char *labels, int n, int rows, int cols, int ch, int gz, int label_n,
                      int extra_image_bytes) {
    int ndims = ch ? 4 : 3;
    size_t per = (size_t)rows * cols * (ch ? ch : 1);
    size_t len = 4 + 4 * (size_t)ndims + (size_t)n * per;
    uint8_t *b = malloc(len + 16);
    b[0] = b[1] = 0;
    b[2] = 0x08;
    b[3] = (uint8_t)ndims;
    put_be32(b + 4, (uint32_t)n);
    put_be32(b + 8, (uint32_t)rows);
    put_be32(b + 12, (uint32_t)cols);
    if (ch) put_be32(b + 16, (uint32_t)ch);
    size_t hdr = 4 + 4 * (size_t)ndims;
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < per; j++) b[hdr + (size_t)i * per + j] = pixel(i, (int)j);
    if (extra_image_bytes > 0) memset(b + len, 9, (size_t)extra_image_bytes);
    size_t out_len = (size_t)((long)len + extra_image_bytes);
    uint8_t *l = malloc(8 + (size_t)label_n);
    l[0] = l[1] = 0;
    l[2] = 0x08;
    l[3] = 1;
    put_be32(l + 4, (uint32_t)label_n);
    for (int i = 0; i < label_n; i++) l[8 + i] = (uint8_t)(i % 10);
    if (gz) {
        gzFile f = gzopen(images, "wb");
        gzwrite(f, b, (unsigned)out_len);
        gzclose(f);
        f = gzopen(labels, "wb");
        gzwrite(f, l, (unsigned)(8 + label_n));
        gzclose(f);
    } else {
        io_write_file(images, b, out_len);
        io_write_file(labels, l, 8 + (size_t)label_n);
    }
    free(b);
    free(l);
}

/* Reads one shard back; checks each record against example ids first, first+step, ... */
static long check_shard(const char *path, int first, int step, int H, int W, int C, int is_cifar, int want_compression) {
    char err[512], why[256];
    TfrReader *r = tfr_reader_open(path, IO_COMPRESSION_AUTO, 0, err, sizeof err);
    CHECK_MSG(r != NULL, "%s", err);
    if (!r) return -1;
    CHECK(tfr_reader_compression(r) == want_compression);
    ExampleDecoder *d = example_decoder_new();
    const uint8_t *data;
    size_t n;
    long count = 0, bad = 0;
    int id = first;
    while (tfr_reader_next(r, &data, &n, err, sizeof err) == TFR_RECORD) {
        const Tensorflow__Example *ex = example_decode(d, data, n);
        const uint8_t *img;
        size_t in;
        int64_t label, h, w, c;
        if (!ex || example_get_bytes(ex, "image_raw", &img, &in, why, sizeof why) ||
            example_get_int64(ex, "label", &label, why, sizeof why) || example_get_int64(ex, "height", &h, why, sizeof why) ||
            example_get_int64(ex, "width", &w, why, sizeof why) || example_get_int64(ex, "depth", &c, why, sizeof why)) {
            bad++;
            continue;
        }
        if (h != H || w != W || c != C || in != (size_t)(H * W * C)) bad++;
        else if (!is_cifar) {
            if (label != id % 10) bad++;
            for (size_t j = 0; j < in; j++)
                if (img[j] != pixel(id, (int)j)) {
                    bad++;
                    break;
                }
        } else {
            /* CIFAR record id: label id % 10, channel-major source pixel (c, y, x) = pixel(id, c*1024 + y*32 + x). */
            if (label != id % 10) bad++;
            for (int y = 0; y < 32; y++)
                for (int x = 0; x < 32; x++)
                    for (int ch = 0; ch < 3; ch++)
                        if (img[(y * 32 + x) * 3 + ch] != pixel(id, ch * 1024 + y * 32 + x)) bad++;
        }
        id += step;
        count++;
    }
    CHECK_MSG(bad == 0, "%s: %ld bad examples", path, bad);
    example_decoder_free(d);
    tfr_reader_close(r);
    return count;
}

static void test_idx(void) {
    char err[512], path[600];
    for (int gz = 0; gz < 2; gz++) {
        const char *images = io_tmp(gz ? "img.idx3.gz" : "img.idx3"), *labels = io_tmp(gz ? "lab.idx1.gz" : "lab.idx1");
        write_idx(images, labels, 25, 5, 4, 0, gz, 25, 0);
        ConvertSource *s = convert_open_idx(images, labels, err, sizeof err);
        CHECK_MSG(s != NULL, "%s", err);
        if (!s) continue;
        CHECK(s->n_examples == 25);
        ConvertConfig cfg;
        convert_config_defaults(&cfg);
        cfg.out_prefix = io_tmp(gz ? "out/idx_gz/train" : "out/idx/train"); /* directories are created */
        cfg.num_shards = 3;
        cfg.compression = gz ? IO_COMPRESSION_GZIP : IO_COMPRESSION_NONE;
        ConvertStats st;
        CHECK_MSG(convert_run(s, &cfg, &st, err, sizeof err) == 0, "%s", err);
        s->close(s);
        CHECK(st.n_examples == 25 && st.H == 5 && st.W == 4 && st.C == 1);
        CHECK(st.label_count[0] == 3 && st.label_count[4] == 3 && st.label_count[5] == 2);
        long total = 0;
        for (int k = 0; k < 3; k++) {
            convert_shard_path(path, sizeof path, cfg.out_prefix, k, 3);
            total += check_shard(path, k, 3, 5, 4, 1, 0, cfg.compression);
            char tmp[700];
            snprintf(tmp, sizeof tmp, "%s.tmp", path);
            CHECK(access(tmp, F_OK) != 0);
        }
        CHECK(total == 25);
    }
    /* Four dimensions: rows x cols x channels. */
    const char *images = io_tmp("img4.idx"), *labels = io_tmp("lab4.idx");
    write_idx(images, labels, 6, 3, 2, 2, 0, 6, 0);
    ConvertSource *s = convert_open_idx(images, labels, err, sizeof err);
    ConvertConfig cfg;
    convert_config_defaults(&cfg);
    cfg.out_prefix = io_tmp("four");
    cfg.compression = IO_COMPRESSION_ZLIB;
    ConvertStats st;
    CHECK(s && convert_run(s, &cfg, &st, err, sizeof err) == 0);
    if (s) s->close(s);
    CHECK(!strcmp(path + strlen(path) - strlen("-00002-of-00003.tfrecord"), "-00002-of-00003.tfrecord"));
    convert_shard_path(path, sizeof path, cfg.out_prefix, 0, 1);
    CHECK_CONTAINS(path, "four-00000-of-00001.tfrecord");
    CHECK(check_shard(path, 0, 1, 3, 2, 2, 0, IO_COMPRESSION_ZLIB) == 6);

    /* num_classes 7 (convert --num_classes): the first label 7 (labels are id mod 10) refused, naming the labels
     * file, its record and offset (8 header bytes + 7); no shard left, nor the directories made for it.  10: all
     * pass. */
    const char *imgs7 = io_tmp("img7.idx"), *labs7 = io_tmp("lab7.idx");
    write_idx(imgs7, labs7, 12, 3, 2, 0, 0, 12, 0);
    for (int num_classes = 7; num_classes <= 10; num_classes += 3) {
        s = convert_open_idx(imgs7, labs7, err, sizeof err);
        CHECK_MSG(s != NULL, "%s", err);
        if (!s) continue;
        CHECK(s->num_classes == 0); /* the open's default: any label */
        s->num_classes = num_classes;
        convert_config_defaults(&cfg);
        cfg.out_prefix = io_tmp(num_classes == 7 ? "seven/deeper/t" : "ten/t");
        int rc = convert_run(s, &cfg, &st, err, sizeof err);
        s->close(s);
        convert_shard_path(path, sizeof path, cfg.out_prefix, 0, 1);
        if (num_classes == 7) {
            char want[700];
            snprintf(want, sizeof want, "%s: record 7 at offset 15: label 7 outside [0, 7) (--num_classes)", labs7);
            CHECK_MSG(rc == -1 && !strcmp(err, want), "rc %d: %s", rc, err);
            CHECK(access(path, F_OK) != 0);
            /* the directories it made for --out, removed again (an empty one was left) */
            CHECK_MSG(access(io_tmp("seven"), F_OK) != 0, "%s left behind", io_tmp("seven"));
        } else {
            CHECK_MSG(rc == 0 && st.n_examples == 12, "%s", err);
        }
    }
}

static void write_cifar(const char *path, int first, int n, int bad_label_at, int truncate_last) {
    size_t len = (size_t)n * 3073;
    uint8_t *b = malloc(len);
    for (int i = 0; i < n; i++) {
        uint8_t *r = b + (size_t)i * 3073;
        int id = first + i;
        r[0] = (uint8_t)(i == bad_label_at ? 10 : id % 10);
        for (int j = 0; j < 3072; j++) r[1 + j] = pixel(id, j);
    }
    io_write_file(path, b, truncate_last ? len - 100 : len);
    free(b);
}

static void test_cifar(void) {
    char err[512], path[600];
    const char *a = io_tmp("data_batch_1.bin"), *b = io_tmp("data_batch_2.bin");
    write_cifar(a, 0, 7, -1, 0);
    write_cifar(b, 7, 4, -1, 0);
    const char *files[2] = {a, b};
    ConvertSource *s = convert_open_cifar10(files, 2, err, sizeof err);
    CHECK_MSG(s != NULL, "%s", err);
    if (!s) return;
    CHECK(s->n_examples == 11);
    ConvertConfig cfg;
    convert_config_defaults(&cfg);
    cfg.out_prefix = io_tmp("cifar/train");
    cfg.num_shards = 2;
    ConvertStats st;
    CHECK_MSG(convert_run(s, &cfg, &st, err, sizeof err) == 0, "%s", err);
    s->close(s);
    CHECK(st.n_examples == 11 && st.H == 32 && st.W == 32 && st.C == 3);
    convert_shard_path(path, sizeof path, cfg.out_prefix, 0, 2);
    long n0 = check_shard(path, 0, 2, 32, 32, 3, 1, IO_COMPRESSION_NONE);
    convert_shard_path(path, sizeof path, cfg.out_prefix, 1, 2);
    long n1 = check_shard(path, 1, 2, 32, 32, 3, 1, IO_COMPRESSION_NONE);
    CHECK(n0 == 6 && n1 == 5);
}

/* Runs a converter expected to fail; checks the message and that no shard is left. */
static void expect_failure(ConvertSource *s, const char *open_err, const char *want, const char *prefix) {
    char err[512] = "";
    if (!s) {
        CHECK_CONTAINS(open_err, want);
        CHECK(strchr(open_err, '\n') == NULL);
        return;
    }
    ConvertConfig cfg;
    convert_config_defaults(&cfg);
    cfg.out_prefix = prefix;
    cfg.num_shards = 2;
    ConvertStats st;
    CHECK(convert_run(s, &cfg, &st, err, sizeof err) == -1);
    s->close(s);
    CHECK_CONTAINS(err, want);
    CHECK(strchr(err, '\n') == NULL);
    char path[600], tmp[700];
    for (int k = 0; k < 2; k++) {
        convert_shard_path(path, sizeof path, prefix, k, 2);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        CHECK_MSG(access(path, F_OK) != 0 && access(tmp, F_OK) != 0, "%s left behind", path);
    }
}

static void test_bad_inputs(void) {
    char err[512] = "", want[700];
    const char *images = io_tmp("bad_img.idx"), *labels = io_tmp("bad_lab.idx");
    /* Truncated images: 10 announced, the last one 5 bytes short. */
    write_idx(images, labels, 10, 4, 4, 0, 1, 10, -5);
    ConvertSource *s = convert_open_idx(images, labels, err, sizeof err);
    snprintf(want, sizeof want, "%s: record 9 at offset %d: truncated: end of file inside the image (11 of 16 bytes", images, 16 + 9 * 16);
    expect_failure(s, err, want, io_tmp("bad1/out"));
    /* Trailing bytes after the announced images. */
    write_idx(images, labels, 10, 4, 4, 0, 0, 10, 3);
    s = convert_open_idx(images, labels, err, sizeof err);
    snprintf(want, sizeof want, "%s: record 10 at offset %d: trailing bytes", images, 16 + 10 * 16);
    expect_failure(s, err, want, io_tmp("bad2/out"));
    /* Label count differs. */
    write_idx(images, labels, 10, 4, 4, 0, 0, 9, 0);
    s = convert_open_idx(images, labels, err, sizeof err);
    expect_failure(s, err, "10 images but", io_tmp("bad3/out"));
    /* A zero dimension (a 3-D file whose magic says 4-D reads its first pixels as the depth): named as such, not as
     * an implausible size. */
    uint8_t hdr[20] = {0, 0, 0x08, 4};
    put_be32(hdr + 4, 10);
    put_be32(hdr + 8, 4);
    put_be32(hdr + 12, 4);
    io_write_file(images, hdr, sizeof hdr);
    s = convert_open_idx(images, labels, err, sizeof err);
    snprintf(want, sizeof want, "%s: offset 4: image size 4 x 4 x 0 has a zero dimension", images);
    CHECK(s == NULL && !strcmp(err, want), "a zero depth: '%s'", err);
    if (s) s->close(s);
    /* Wrong magic: labels given as images. */
    s = convert_open_idx(labels, images, err, sizeof err);
    snprintf(want, sizeof want, "%s: offset 0: not an IDX image file (magic 0x00000801, expected 0x00000803): a label "
             "file; are --images and --labels swapped?", labels);
    expect_failure(s, err, want, io_tmp("bad4/out"));
    /* A gzip stream whose CRC-32 does not match: the path once, the read that meets the member's end (the last
     * record's), zlib's reason. */
    write_idx(images, labels, 10, 4, 4, 0, 1, 10, 0);
    size_t gz_n;
    uint8_t *gz = io_read_file(images, &gz_n);
    gz[gz_n - 8] ^= 0x01;
    io_write_file(images, gz, gz_n);
    s = convert_open_idx(images, labels, err, sizeof err);
    snprintf(want, sizeof want, "%s: record 9 at offset %d: gzip data error: incorrect data check", images, 16 + 9 * 16);
    expect_failure(s, err, want, io_tmp("bad8/out"));
    /* Bytes after the gzip member that are not another member (zlib's gzread dropped them unseen): refused with
     * their count and offset; zeros there (padding) and a second member are read as gzip(1) reads them. */
    gz[gz_n - 8] ^= 0x01;
    uint8_t *more = malloc(2 * gz_n + 16);
    memcpy(more, gz, gz_n);
    memcpy(more + gz_n, "<html>", 6);
    io_write_file(images, more, gz_n + 6);
    s = convert_open_idx(images, labels, err, sizeof err);
    snprintf(want, sizeof want, "%s: record 10 at offset %d: gzip data error: 6 bytes after the last gzip member (at "
             "offset %zu of the file) are not another member", images, 16 + 10 * 16, gz_n);
    expect_failure(s, err, want, io_tmp("bad9/out"));
    memset(more + gz_n, 0, 16);
    io_write_file(images, more, gz_n + 16);
    s = convert_open_idx(images, labels, err, sizeof err);
    ConvertConfig cfg;
    convert_config_defaults(&cfg);
    cfg.out_prefix = io_tmp("pad/out");
    ConvertStats st;
    CHECK(s && convert_run(s, &cfg, &st, err, sizeof err) == 0 && st.n_examples == 10, "zero padding: %s", err);
    if (s) s->close(s);
    /* Two members: the file's first 100 bytes, then the rest (as `cat a.gz b.gz` makes). */
    write_idx(images, labels, 10, 4, 4, 0, 0, 10, 0);
    size_t raw_n;
    uint8_t *raw = io_read_file(images, &raw_n);
    gzFile gf = gzopen(images, "wb");
    gzwrite(gf, raw, 100);
    gzclose(gf);
    size_t first_n;
    uint8_t *first = io_read_file(images, &first_n);
    gf = gzopen(images, "wb");
    gzwrite(gf, raw + 100, (unsigned)(raw_n - 100));
    gzclose(gf);
    size_t second_n;
    uint8_t *second = io_read_file(images, &second_n);
    uint8_t *both = malloc(first_n + second_n);
    memcpy(both, first, first_n);
    memcpy(both + first_n, second, second_n);
    io_write_file(images, both, first_n + second_n);
    s = convert_open_idx(images, labels, err, sizeof err);
    cfg.out_prefix = io_tmp("members/out");
    CHECK(s && convert_run(s, &cfg, &st, err, sizeof err) == 0 && st.n_examples == 10, "two gzip members: %s", err);
    if (s) s->close(s);
    CHECK(check_shard(io_tmp("members/out-00000-of-00001.tfrecord"), 0, 1, 4, 4, 1, 0, IO_COMPRESSION_NONE) == 10);
    free(both);
    free(first);
    free(second);
    free(raw);
    free(more);
    free(gz);
    /* A FIFO is refused at the open (gzopen waited for its writer, forever). */
    const char *fifo = io_tmp("fifo.idx");
    CHECK(mkfifo(fifo, 0644) == 0);
    s = convert_open_idx(fifo, labels, err, sizeof err);
    snprintf(want, sizeof want, "%s: not a regular file (a pipe or FIFO)", fifo);
    CHECK(s == NULL && !strcmp(err, want), "a FIFO: '%s'", err);
    if (s) s->close(s);
    const char *cf[1] = {fifo};
    s = convert_open_cifar10(cf, 1, err, sizeof err);
    if (s) expect_failure(s, err, want, io_tmp("bad10/out"));
    else CHECK_CONTAINS(err, want);
    unlink(fifo);
    /* No examples: an IDX pair announcing 0 images, an empty CIFAR-10 file; no shard is written. */
    write_idx(images, labels, 0, 4, 4, 0, 0, 0, 0);
    s = convert_open_idx(images, labels, err, sizeof err);
    snprintf(want, sizeof want, "%s: offset 4: the header announces 0 images (4 x 4 x 1): nothing to convert", images);
    CHECK(s == NULL && !strcmp(err, want), "'%s'", err);
    if (s) s->close(s);
    const char *c0 = io_tmp("empty.bin");
    io_write_file(c0, "", 0);
    s = convert_open_cifar10(&c0, 1, err, sizeof err);
    CHECK(s != NULL);
    if (s) expect_failure(s, err, "the cifar10 input holds no examples (empty): no shard written", io_tmp("bad0/out"));
    /* Missing file. */
    s = convert_open_idx(io_tmp("nope.idx"), labels, err, sizeof err);
    expect_failure(s, err, "nope.idx: cannot open", io_tmp("bad5/out"));
    /* CIFAR: a label outside [0, 10), a truncated record. */
    const char *c1 = io_tmp("bad_label.bin"), *c2 = io_tmp("short.bin");
    write_cifar(c1, 0, 5, 3, 0);
    const char *f1[1] = {c1};
    s = convert_open_cifar10(f1, 1, err, sizeof err);
    snprintf(want, sizeof want, "%s: record 3 at offset %d: label 10 outside [0, 10)", c1, 3 * 3073);
    expect_failure(s, err, want, io_tmp("bad6/out"));
    write_cifar(c2, 0, 4, -1, 1);
    const char *f2[1] = {c2};
    s = convert_open_cifar10(f2, 1, err, sizeof err);
    snprintf(want, sizeof want, "%s: record 3 at offset %d: truncated: end of file inside the record (2973 of 3073 bytes)", c2,
             3 * 3073);
    expect_failure(s, err, want, io_tmp("bad7/out"));
    /* The downloaded cifar-10-binary.tar.gz given as a batch: a tar header (its "ustar" at byte 257) is named so (it
     * said "label 99 outside [0, 10)", the 'c' of the first member's name). */
    char tar[400];
    snprintf(tar, sizeof tar, "%s", io_tmp("cifar.tar"));
    uint8_t *t = calloc(2, 3073);
    memcpy(t, "cifar-10-batches-bin/", 21);
    memcpy(t + 257, "ustar", 6);
    io_write_file(tar, t, 2 * 3073);
    free(t);
    const char *f3[1] = {tar};
    s = convert_open_cifar10(f3, 1, err, sizeof err);
    snprintf(want, sizeof want, "%s: record 0 at offset 0: a tar archive (as cifar-10-binary.tar.gz is downloaded), "
             "not a CIFAR-10 batch: extract it (tar xzf) and give its data_batch_N.bin files", tar);
    expect_failure(s, err, want, io_tmp("bad11/out"));
}

/* A source that, at its end, puts another conversion's shards of the same prefix in place (as a second convert
 * to it that finished first would): the inner source's examples, then that. */
typedef struct {
    ConvertSource *inner;
    const char *other_shard; /* written at the end */
} RacingSource;

static int racing_next(ConvertSource *s, ConvertItem *item, char *err, size_t err_n) {
    RacingSource *r = s->state;
    const int st = r->inner->next(r->inner, item, err, err_n);
    if (st == 0) io_write_file(r->other_shard, "x", 1);
    return st;
}

/* Two conversions to one prefix at once: the second to put its shards in place finds the first's and, without
 * --overwrite, writes none of its own (two sets read as one: every example twice); with --overwrite it replaces
 * them.  A reader refuses shards of one prefix from two sets, or beside a .tmp of a conversion under way. */
static void test_shard_sets(void) {
    char err[PIPELINE_ERR_N_BYTES], other[700], path[700];
    const char *images = io_tmp("race.idx"), *labels = io_tmp("race_lab.idx");
    write_idx(images, labels, 6, 3, 2, 0, 0, 6, 0);
    for (int overwrite = 0; overwrite <= 1; overwrite++) {
        const char *prefix = io_tmp(overwrite ? "race_o/t" : "race/t");
        snprintf(other, sizeof other, "%s-00000-of-00001.tfrecord", prefix);
        ConvertSource *inner = convert_open_idx(images, labels, err, sizeof err);
        CHECK_MSG(inner != NULL, "%s", err);
        if (!inner) return;
        RacingSource r = {inner, other};
        ConvertSource racing = {.format = "idx", .n_examples = -1, .next = racing_next, .state = &r};
        ConvertConfig cfg;
        convert_config_defaults(&cfg);
        cfg.out_prefix = prefix;
        cfg.num_shards = 2;
        cfg.overwrite = overwrite;
        ConvertStats st;
        const int rc = convert_run(&racing, &cfg, &st, err, sizeof err);
        inner->close(inner);
        convert_shard_path(path, sizeof path, prefix, 0, 2);
        if (!overwrite) {
            CHECK_MSG(rc == -1 && strstr(err, "1 shard of this prefix appeared while converting") &&
                          strstr(err, "another conversion to it finished first"), "rc %d: %s", rc, err);
            CHECK_MSG(access(path, F_OK) != 0, "%s written beside the other conversion's shard", path);
            CHECK(access(other, F_OK) == 0);
            char tmp[720];
            snprintf(tmp, sizeof tmp, "%s.tmp", path);
            CHECK(access(tmp, F_OK) != 0);
        } else {
            CHECK_MSG(rc == 0 && access(path, F_OK) == 0, "rc %d: %s", rc, err);
            CHECK_MSG(access(other, F_OK) != 0, "--overwrite kept the other conversion's %s", other);
        }
    }
    /* The readers' check: two sets of one prefix; a .tmp beside one set; one set, another prefix's alone. */
    char a[700], b[700], c[700], t[720];
    snprintf(a, sizeof a, "%s", io_tmp("sets/p-00000-of-00002.tfrecord"));
    snprintf(b, sizeof b, "%s", io_tmp("sets/p-00001-of-00003.tfrecord"));
    snprintf(c, sizeof c, "%s", io_tmp("sets/q-00000-of-00003.tfrecord"));
    mkdir(io_tmp("sets"), 0700);
    io_write_file(a, "x", 1);
    io_write_file(b, "x", 1);
    io_write_file(c, "x", 1);
    char *mixed[] = {a, b, c}, *one[] = {b, c};
    CHECK_MSG(io_check_shard_sets(mixed, 3, err, sizeof err) == -1 &&
                  strstr(err, "shards of one prefix from two conversions (of 2 and of 3 shards)"), "%s", err);
    CHECK_MSG(io_check_shard_sets(one, 2, err, sizeof err) == 0, "%s", err);
    snprintf(t, sizeof t, "%s", io_tmp("sets/p-00000-of-00003.tfrecord.tmp"));
    io_write_file(t, "x", 1);
    CHECK_MSG(io_check_shard_sets(one, 2, err, sizeof err) == -1 && strstr(err, "a conversion to its prefix is under way") &&
                  strstr(err, "p-00000-of-00003.tfrecord.tmp is there"), "%s", err);
    char *other_prefix[] = {c};
    CHECK_MSG(io_check_shard_sets(other_prefix, 1, err, sizeof err) == 0, "another prefix's .tmp: %s", err);
}

int main(void) {
    test_idx();
    test_cifar();
    test_bad_inputs();
    test_shard_sets();
    return io_test_result("test_io_convert");
}
