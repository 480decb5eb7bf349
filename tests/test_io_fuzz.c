/* test_io_fuzz.c — no crash and no out-of-bounds read on any input: a small
 * valid file (uncompressed and gzip) cut at every length, every byte
 * flipped, and thousands of seeded random mutations, each read through the
 * TFRecord reader, the Example decoder and the typed getters, some through
 * `inspect` and the pipeline too.  Every problem must come back as one
 * line in the "<file>: record <i> at offset <o>: <what>" form.  Meant to
 * run under the sanitizer build (-DTOWER_SANITIZE=ON) as well. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/example.h"
#include "io/inspect.h"
#include "io/pipeline.h"
#include "io/tfrecord.h"
#include "test_io_util.h"

static long n_good_records, n_bad_records, n_bad_streams, n_not_example, n_format_errors;

static int well_formed(const char *err, const char *name) {
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%s: record ", name);
    return strncmp(err, prefix, strlen(prefix)) == 0 && strstr(err, " at offset ") && !strchr(err, '\n');
}

/* Reads everything it can from a memory image. */
static void read_all(const uint8_t *bytes, size_t n, int compression, ExampleDecoder *d) {
    char err[512];
    TfrReader *r = tfr_reader_open_memory(bytes, n, "fuzz.tfrecord", compression, 4096, err, sizeof err);
    if (!r) {
        n_format_errors += !strstr(err, "fuzz.tfrecord");
        return;
    }
    for (int guard = 0; guard < 1000; guard++) {
        const uint8_t *data;
        size_t dn;
        int st = tfr_reader_next(r, &data, &dn, err, sizeof err);
        if (st == TFR_END) break;
        if (st < 0) {
            if (!well_formed(err, "fuzz.tfrecord")) {
                n_format_errors++;
                fprintf(stderr, "badly formed: %s\n", err);
            }
            if (st == TFR_BAD_STREAM) {
                n_bad_streams++;
                break;
            }
            n_bad_records++;
            continue;
        }
        n_good_records++;
        const Tensorflow__Example *ex = example_decode(d, data, dn);
        if (!ex) {
            n_not_example++;
            continue;
        }
        char why[256];
        for (size_t i = 0; i < example_n_features(ex); i++) {
            const Tensorflow__Feature *f = example_feature_at(ex, i);
            size_t key_n_bytes;
            (void)example_feature_key(ex, i, &key_n_bytes);
            size_t nv = feature_n_values(f);
            volatile uint64_t sink = 0;
            switch (feature_kind(f)) {
            case FEATURE_BYTES:
                for (size_t k = 0; k < nv; k++)
                    for (size_t j = 0; j < f->bytes_list->value[k].len; j++) sink += f->bytes_list->value[k].data[j];
                break;
            case FEATURE_FLOAT:
                for (size_t k = 0; k < nv; k++) sink += (uint64_t)(f->float_list->value[k] != 0);
                break;
            case FEATURE_INT64:
                for (size_t k = 0; k < nv; k++) sink += (uint64_t)f->int64_list->value[k];
                break;
            default:
                break;
            }
            (void)sink;
        }
        int64_t label;
        const uint8_t *img;
        size_t in;
        (void)example_get_int64(ex, "label", &label, why, sizeof why);
        (void)example_get_bytes(ex, "image_raw", &img, &in, why, sizeof why);
    }
    tfr_reader_close(r);
}

static uint8_t *make_valid(int compression, size_t *n) {
    char err[512];
    const char *path = io_tmp(compression == IO_COMPRESSION_GZIP ? "valid.gz" : "valid.tfrecord");
    TfrWriter *w = tfr_writer_open(path, compression, err, sizeof err);
    ExampleBuilder b;
    example_builder_init(&b);
    uint8_t img[12];
    const float fl[2] = {0.5f, 1.5f};
    for (int i = 0; i < 3; i++) {
        memset(img, 40 * i, sizeof img);
        example_builder_reset(&b);
        example_add_bytes(&b, "image_raw", img, sizeof img);
        example_add_int64(&b, "label", i);
        example_add_int64(&b, "height", 2);
        example_add_int64(&b, "width", 2);
        example_add_int64(&b, "depth", 3);
        example_add_floats(&b, "f", fl, 2);
        const uint8_t *data;
        size_t dn = example_builder_encode(&b, &data);
        tfr_writer_write(w, data, dn, err, sizeof err);
    }
    tfr_writer_close(w, err, sizeof err);
    example_builder_free(&b);
    return io_read_file(path, n);
}

/* Runs inspect and a one-epoch pipeline over a mutated file: they must end, cleanly. */
static void through_inspect_and_pipeline(const uint8_t *bytes, size_t n) {
    const char *path = io_tmp("mutant.tfrecord");
    io_write_file(path, bytes, n);
    const char *files[1] = {path};
    InspectConfig ic;
    inspect_config_defaults(&ic);
    ic.skip_corrupt = 1;
    ic.num_classes = 3;
    ic.max_record_n_bytes = 4096;
    InspectReport rep;
    FILE *null_out = fopen("/dev/null", "w");
    int rc = io_inspect(files, 1, &ic, &rep, null_out, null_out);
    CHECK(rc == 0 || rc == 1);
    inspect_report_free(&rep);
    fclose(null_out);
    PipelineConfig c;
    pipeline_config_defaults(&c);
    c.files = files;
    c.n_files = 1;
    c.in_H = c.in_W = c.out_H = c.out_W = 2;
    c.in_C = 3;
    c.num_classes = 3;
    c.augment = AUGMENT_NONE;
    c.shard_sizes[0] = 2;
    c.min_after_dequeue = 1;
    c.num_epochs = 1;
    c.drop_remainder = 0;
    c.max_record_n_bytes = 4096;
    char err[512];
    /* 0: stop at the first bad record; 1: skip every bad record (no limit); 2: skip up to the default
     * max_corrupt_fraction of the bytes. */
    for (int skip = 0; skip < 3; skip++) {
        c.skip_corrupt = skip > 0;
        c.max_corrupt_fraction = skip == 1 ? 1.0 : IO_DEFAULT_MAX_CORRUPT_FRACTION;
        c.log_corrupt = 0;
        Pipeline *p = pipeline_open(&c, err, sizeof err);
        if (!p) continue;
        PipelineBatch *b;
        int st;
        long total = 0;
        while ((st = pipeline_next(p, &b, err, sizeof err)) == 1) {
            total += b->n;
            pipeline_release(p, b);
        }
        CHECK(total <= 3);
        if (st < 0) CHECK_MSG(strstr(err, "mutant.tfrecord") && !strchr(err, '\n'), "%s", err);
        if (skip == 1) CHECK(st == 0 || strstr(err, "no usable records"));
        if (skip == 2) CHECK(st == 0 || strstr(err, "no usable records") || strstr(err, "over max_corrupt_fraction"));
        pipeline_close(p);
    }
}

int main(void) {
    ExampleDecoder *d = example_decoder_new();
    uint64_t s = 0x1234567;
    for (int comp = 0; comp < 2; comp++) {
        int compression = comp ? IO_COMPRESSION_GZIP : IO_COMPRESSION_NONE;
        size_t n;
        uint8_t *valid = make_valid(compression, &n);
        uint8_t *m = malloc(n + 64);
        /* The valid file reads fully. */
        long before = n_good_records;
        read_all(valid, n, IO_COMPRESSION_AUTO, d);
        CHECK(n_good_records - before == 3);
        /* Every truncation. */
        for (size_t cut = 0; cut < n; cut++) read_all(valid, cut, compression, d);
        /* Every byte, two flips each. */
        for (size_t i = 0; i < n; i++)
            for (int f = 0; f < 2; f++) {
                memcpy(m, valid, n);
                m[i] ^= f ? 0xff : 0x01;
                read_all(m, n, compression, d);
                read_all(m, n, IO_COMPRESSION_AUTO, d);
                if (i % 17 == 0 && f == 0) through_inspect_and_pipeline(m, n);
            }
        /* Random mutations: a few bytes overwritten, sometimes cut or extended. */
        for (int it = 0; it < 3000; it++) {
            memcpy(m, valid, n);
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            int k = 1 + (int)((s >> 33) % 6);
            for (int j = 0; j < k; j++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                m[(s >> 33) % n] = (uint8_t)(s >> 20);
            }
            size_t len = n;
            if (it % 5 == 0) len = (size_t)((s >> 40) % (n + 64));
            if (len > n) memset(m + n, (int)(s & 0xff), len - n);
            read_all(m, len, it % 2 ? compression : IO_COMPRESSION_AUTO, d);
            if (it % 300 == 0) through_inspect_and_pipeline(m, len);
        }
        free(m);
        free(valid);
    }
    /* Mutated payloads framed with correct CRCs: the decoder and getters see them. */
    {
        size_t n;
        uint8_t *valid = make_valid(IO_COMPRESSION_NONE, &n);
        uint8_t framed[1024];
        for (int it = 0; it < 3000; it++) {
            size_t len = 0, pos = 0;
            while (pos + 16 <= n) {
                size_t dn = valid[pos] | ((size_t)valid[pos + 1] << 8);
                uint8_t payload[256];
                memcpy(payload, valid + pos + 12, dn);
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                int k = 1 + (int)((s >> 33) % 4);
                for (int j = 0; j < k; j++) {
                    s = s * 6364136223846793005ull + 1442695040888963407ull;
                    payload[(s >> 33) % dn] = (uint8_t)(s >> 20);
                }
                size_t plen = it % 7 == 0 ? (size_t)((s >> 45) % (dn + 1)) : dn;
                tfr_encode_header(framed + len, plen);
                memcpy(framed + len + 12, payload, plen);
                tfr_encode_footer(framed + len + 12 + plen, payload, plen);
                len += 16 + plen;
                pos += 16 + dn;
            }
            read_all(framed, len, IO_COMPRESSION_NONE, d);
            if (it % 250 == 0) through_inspect_and_pipeline(framed, len);
        }
        free(valid);
    }
    /* Random payloads straight into the decoder. */
    uint8_t buf[256];
    for (int it = 0; it < 5000; it++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        size_t len = (s >> 33) % sizeof buf;
        for (size_t j = 0; j < len; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            buf[j] = (uint8_t)(s >> 40);
        }
        const Tensorflow__Example *ex = example_decode(d, buf, len);
        if (ex) (void)example_find(ex, "label");
    }
    example_decoder_free(d);
    printf("records read %ld, bad records %ld, bad streams %ld, payloads not an Example %ld\n", n_good_records, n_bad_records,
           n_bad_streams, n_not_example);
    CHECK(n_format_errors == 0);
    CHECK(n_bad_records > 0 && n_bad_streams > 0 && n_not_example > 0 && n_good_records > 1000);
    return io_test_result("test_io_fuzz");
}
