/* fuzz_example.c — fuzz target of the tf.train.Example decoder and of the
 * key, shape and label checks the trainer, `tower inspect` and the input
 * pipeline apply to every record.
 *
 * Where it sits: tests/fuzz/; io -> shards, after the TFRecord framing
 * (fuzz_tfrecord.c fuzzes that).  The input is one record's payload, a
 * serialized Example (no framing: a CRC would stop every mutation).  It goes
 *   1. through example_decode and every lookup (example_find, the typed
 *      getters under the default keys, a walk over every value);
 *   2. framed as a one-record TFRecord file (a memfd), through io_inspect
 *      with num_classes 10 (the key, shape and label checks of inspect.c);
 *   3. through io_probe_image_shape (what `tower train` does first) and, when
 *      the probe gives a shape of at most 64K values, through a real
 *      pipeline (pipeline_open / pipeline_next, AUGMENT_NONE, 10 classes,
 *      one epoch) whose reader applies the pipeline's own checks: image key
 *      present, bytes length == H*W*C or float_list of H*W*C floats, label
 *      one int64 in [0, 10), height/width/depth when present; an encoded
 *      JPEG or PNG (IO_IMAGE_ENCODED) through the encoded source, decoded by
 *      a worker to 8 x 8 x 3.
 * Invariants: a payload protobuf-c rejects is bad for inspect too; every
 * message is one line naming the file (and the record, for record errors);
 * the pipeline's labels lie in [0, 10) and its batch has the probed shape;
 * a record the pipeline accepts is one inspect accepts; the getters agree
 * with feature_kind / feature_n_values.
 * What it does not do: no augmentation checks (not a parser), no multi-record
 * files (the pipeline's record loop is the TFRecord reader's loop).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "io/example.h"
#include "io/inspect.h"
#include "io/pipeline.h"
#include "io/tfrecord.h"

#define PIPELINE_MAX_VALUES 65536

static const char *const KEYS[] = {"image_raw", "label", "height", "width", "depth"};

/* Walks every value of ex and checks the getters against the kinds. */
static void walk(const Tensorflow__Example *ex) {
    volatile uint64_t sink = 0;
    size_t n = example_n_features(ex);
    for (size_t i = 0; i < n; i++) {
        size_t key_n_bytes;
        const char *key = example_feature_key(ex, i, &key_n_bytes);
        FUZZ_REQUIRE(key != NULL, "feature %zu has a NULL key", i);
        for (size_t j = 0; j < key_n_bytes; j++) sink += (unsigned char)key[j];
        const Tensorflow__Feature *f = example_feature_at(ex, i);
        size_t nv = feature_n_values(f);
        switch (feature_kind(f)) {
        case FEATURE_BYTES:
            for (size_t k = 0; k < nv; k++)
                for (size_t j = 0; j < f->bytes_list->value[k].len; j++) sink += f->bytes_list->value[k].data[j];
            break;
        case FEATURE_FLOAT:
            for (size_t k = 0; k < nv; k++) sink += f->float_list->value[k] != 0.0f;
            break;
        case FEATURE_INT64:
            for (size_t k = 0; k < nv; k++) sink += (uint64_t)f->int64_list->value[k];
            break;
        default:
            FUZZ_REQUIRE(nv == 0, "a feature of no kind with %zu values", nv);
            break;
        }
        (void)example_find(ex, key);
    }
    for (size_t k = 0; k < sizeof KEYS / sizeof KEYS[0]; k++) {
        const char *key = KEYS[k];
        const Tensorflow__Feature *f = example_find(ex, key);
        FeatureKind kind = feature_kind(f);
        size_t nv = feature_n_values(f);
        char why[256];
        int64_t v;
        const uint8_t *bytes;
        size_t nb;
        const float *floats;
        const int64_t *ints;
        int ok = example_get_int64(ex, key, &v, why, sizeof why) == 0;
        FUZZ_REQUIRE(ok == (kind == FEATURE_INT64 && nv == 1), "example_get_int64('%s') = %d for a %s of %zu values", key, ok,
                     feature_kind_name(kind), nv);
        if (!ok) FUZZ_REQUIRE(why[0] && strstr(why, key), "example_get_int64 reason \"%s\"", why);
        ok = example_get_bytes(ex, key, &bytes, &nb, why, sizeof why) == 0;
        FUZZ_REQUIRE(ok == (kind == FEATURE_BYTES && nv == 1), "example_get_bytes('%s') = %d", key, ok);
        if (ok)
            for (size_t j = 0; j < nb; j++) sink += bytes[j];
        ok = example_get_floats(ex, key, &floats, &nb, why, sizeof why) == 0;
        FUZZ_REQUIRE(ok == (kind == FEATURE_FLOAT), "example_get_floats('%s') = %d", key, ok);
        if (ok) {
            FUZZ_REQUIRE(nb == nv, "example_get_floats: %zu values, feature_n_values %zu", nb, nv);
            for (size_t j = 0; j < nb; j++) sink += floats[j] != 0.0f;
        }
        ok = example_get_int64s(ex, key, &ints, &nb, why, sizeof why) == 0;
        FUZZ_REQUIRE(ok == (kind == FEATURE_INT64), "example_get_int64s('%s') = %d", key, ok);
        if (ok)
            for (size_t j = 0; j < nb; j++) sink += (uint64_t)ints[j];
    }
    (void)sink;
}

/* One record around payload (n bytes): header, data, footer; *out malloc'ed. */
static size_t frame(const uint8_t *payload, size_t n, uint8_t **out) {
    uint8_t *buf = malloc(n + TFR_HEADER_N_BYTES + TFR_FOOTER_N_BYTES);
    FUZZ_REQUIRE(buf != NULL, "out of memory");
    tfr_encode_header(buf, n);
    if (n) memcpy(buf + TFR_HEADER_N_BYTES, payload, n);
    tfr_encode_footer(buf + TFR_HEADER_N_BYTES + n, payload, n);
    *out = buf;
    return n + TFR_HEADER_N_BYTES + TFR_FOOTER_N_BYTES;
}

/* io_inspect on the file: 0 good, 1 bad. */
static int run_inspect(const FuzzFile *f, FILE *devnull) {
    const char *files[1] = {f->path};
    InspectConfig cfg;
    inspect_config_defaults(&cfg);
    cfg.num_classes = 10;
    InspectReport rep;
    /* Its messages go to a memory stream, so that their form can be checked. */
    char *text = NULL;
    size_t text_n = 0;
    FILE *errs = open_memstream(&text, &text_n);
    FUZZ_REQUIRE(errs != NULL, "open_memstream failed");
    int rc = io_inspect(files, 1, &cfg, &rep, devnull, errs);
    fclose(errs);
    FUZZ_REQUIRE(rc == 0 || rc == 1, "io_inspect returned %d", rc);
    FUZZ_REQUIRE(rep.n_files == 1 && rep.n_records + rep.n_bad == 1, "io_inspect: %ld files, %ld records, %ld bad", rep.n_files,
                 rep.n_records, rep.n_bad);
    if (rc == 1) {
        char prefix[128];
        snprintf(prefix, sizeof prefix, "%s: record 0 at offset 0: ", f->path);
        FUZZ_REQUIRE(text_n > 0 && text[text_n - 1] == '\n', "io_inspect: bad record without a message line");
        text[text_n - 1] = '\0';
        fuzz_require_line(text, prefix, "io_inspect");
    } else {
        FUZZ_REQUIRE(text_n == 0, "io_inspect: a message for a good file: %s", text);
    }
    inspect_report_print(&rep, &cfg, devnull);
    inspect_report_free(&rep);
    free(text);
    return rc;
}

/* The pipeline over the file for the probed shape: 1 delivered the example, 0 rejected it. */
static int run_pipeline(const FuzzFile *f, int H, int W, int C, int kind) {
    const char *files[1] = {f->path};
    PipelineConfig cfg;
    pipeline_config_defaults(&cfg);
    cfg.files = files;
    cfg.n_files = 1;
    cfg.image_float = kind == IO_IMAGE_FLOAT;
    cfg.image_encoded = kind == IO_IMAGE_ENCODED; /* decoded by the workers to 8 x 8 x 3 */
    if (cfg.image_encoded) H = W = 8, C = 3, cfg.max_image_pixels = (size_t)1 << 16;
    cfg.in_H = cfg.out_H = H;
    cfg.in_W = cfg.out_W = W;
    cfg.in_C = C;
    cfg.num_classes = 10;
    cfg.augment = AUGMENT_NONE;
    cfg.n_shards = 1;
    cfg.shard_sizes[0] = 1;
    cfg.shuffle = 0;
    cfg.num_epochs = 1;
    cfg.n_workers = 1;
    cfg.drop_remainder = 0;
    char err[1024];
    Pipeline *p = pipeline_open(&cfg, err, sizeof err);
    if (!p) {
        /* The probe accepted the shape; only the pipeline's own limit (16 channels) may refuse it. */
        FUZZ_REQUIRE(C > 16, "pipeline_open refused %d x %d x %d: %s", H, W, C, err);
        fuzz_require_line(err, "pipeline: ", "pipeline_open");
        return 0;
    }
    int delivered = 0;
    for (;;) {
        PipelineBatch *b;
        int rc = pipeline_next(p, &b, err, sizeof err);
        if (rc == 0) break;
        if (rc < 0) {
            char prefix[128];
            snprintf(prefix, sizeof prefix, "%s: record 0 at offset 0: ", f->path);
            /* A rejected record, or "no usable records" after it. */
            if (strncmp(err, prefix, strlen(prefix)) != 0) fuzz_require_line(err, f->path, "pipeline_next");
            else fuzz_require_line(err, prefix, "pipeline_next");
            break;
        }
        FUZZ_REQUIRE(rc == 1 && b && b->n == 1 && delivered == 0, "pipeline_next: rc %d, batch of %d after %d", rc, b ? b->n : -1,
                     delivered);
        FUZZ_REQUIRE(b->labels[0] >= 0 && b->labels[0] < 10, "label %d delivered", (int)b->labels[0]);
        FUZZ_REQUIRE(b->example_n_floats == (size_t)H * W * C, "batch of %zu floats per example for %d x %d x %d",
                     b->example_n_floats, H, W, C);
        delivered++;
        pipeline_release(p, b);
    }
    pipeline_close(p);
    return delivered;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static ExampleDecoder *dec;
    static FuzzFile file;
    static FILE *devnull;
    if (!dec) {
        dec = example_decoder_new();
        fuzz_file_init(&file, "fuzz_example");
        devnull = fopen("/dev/null", "w");
        FUZZ_REQUIRE(dec && devnull, "setup failed");
    }
    if (size > ((size_t)1 << 22)) return 0;

    /* 1. decode and look up. */
    const Tensorflow__Example *ex = example_decode(dec, data, size);
    if (ex) walk(ex);

    /* 2. inspect's checks on the framed record. */
    uint8_t *framed;
    size_t framed_n = frame(data, size, &framed);
    fuzz_file_set(&file, framed, framed_n);
    free(framed);
    int inspect_bad = run_inspect(&file, devnull);
    if (!ex) FUZZ_REQUIRE(inspect_bad, "io_inspect accepted a payload protobuf-c rejects");

    /* 3. the trainer's probe, then the pipeline's checks. */
    int H = 0, W = 0, C = 0, is_float = -1;
    char err[1024];
    char *files[1] = {(char *)file.path};
    if (io_probe_image_shape(files, 1, "image_raw", IO_COMPRESSION_AUTO, 0, &H, &W, &C, &is_float, NULL, err, sizeof err) != 0) {
        fuzz_require_line(err, file.path, "io_probe_image_shape");
        return 0;
    }
    FUZZ_REQUIRE(ex != NULL, "io_probe_image_shape accepted a payload protobuf-c rejects");
    if (is_float == IO_IMAGE_ENCODED) { /* through the encoded source: the reader's window, the workers' decode */
        FUZZ_REQUIRE(H == 0 && W == 0 && C == 0, "an encoded image probed as %d x %d x %d", H, W, C);
        (void)run_pipeline(&file, H, W, C, is_float); /* inspect checks raw sizes an encoded image need not fit */
        return 0;
    }
    FUZZ_REQUIRE(H >= 1 && W >= 1 && C >= 1 && H <= 65536 && W <= 65536 && C <= 65536 && (is_float == 0 || is_float == 1),
                 "io_probe_image_shape gave %d x %d x %d, is_float %d", H, W, C, is_float);
    if ((size_t)H * W * C > PIPELINE_MAX_VALUES) return 0;
    if (run_pipeline(&file, H, W, C, is_float)) FUZZ_REQUIRE(!inspect_bad, "the pipeline delivered a record io_inspect rejects");
    return 0;
}
