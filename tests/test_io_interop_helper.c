/* test_io_interop_helper.c — the C side of the TensorFlow interoperability
 * test (tests/interop/tf_interop.py drives it; not a test by itself).
 *
 *   dump FILE [none|gzip|zlib|auto]      every record as one JSON line
 *   write FILE none|gzip|zlib N          writes N examples of every feature kind,
 *                                        prints them as JSON lines (what TF must read)
 *   write-raw FILE                       records "abc" and "" (for a byte comparison)
 *   convert-idx IMAGES LABELS PREFIX SHARDS COMPRESSION
 *   convert-cifar PREFIX SHARDS COMPRESSION FILE...
 *   augment IN.raw OUT.raw H W C OH OW CROP_Y CROP_X FLIP DELTA FACTOR|eval
 *                                        uint8 HWC image in, float32 HWC out
 *   pipeline-none GLOB H W C             each example of a one-epoch, unshuffled
 *                                        pipeline: "label hexbytes" per line
 * JSON: {"features": {"key": {"kind": "bytes_list", "values": ["hex", ...]}}};
 * floats as the hex of their IEEE bits, int64 as decimal numbers.
 * Exit 0, or 1 with one line on stderr.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/augment.h"
#include "io/convert.h"
#include "io/example.h"
#include "io/pipeline.h"
#include "io/tfrecord.h"

static void print_json_string(const char *s, size_t n_bytes) {
    putchar('"');
    for (size_t i = 0; i < n_bytes; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void print_example(const Tensorflow__Example *ex) {
    printf("{\"features\": {");
    for (size_t i = 0; i < example_n_features(ex); i++) {
        const Tensorflow__Feature *f = example_feature_at(ex, i);
        if (i) printf(", ");
        size_t key_n_bytes;
        const char *key = example_feature_key(ex, i, &key_n_bytes);
        print_json_string(key, key_n_bytes);
        printf(": {\"kind\": \"%s\", \"values\": [", feature_kind_name(feature_kind(f)));
        size_t n = feature_n_values(f);
        for (size_t k = 0; k < n; k++) {
            if (k) printf(", ");
            switch (feature_kind(f)) {
            case FEATURE_BYTES:
                putchar('"');
                for (size_t j = 0; j < f->bytes_list->value[k].len; j++) printf("%02x", f->bytes_list->value[k].data[j]);
                putchar('"');
                break;
            case FEATURE_FLOAT: {
                uint32_t u;
                memcpy(&u, &f->float_list->value[k], 4);
                printf("\"%08x\"", u);
                break;
            }
            case FEATURE_INT64: printf("%" PRId64, f->int64_list->value[k]); break;
            default: break;
            }
        }
        printf("]}");
    }
    printf("}}\n");
}

static int compression_arg(const char *s) {
    int c = io_compression_parse(s);
    if (c < 0) {
        fprintf(stderr, "unknown compression '%s'\n", s);
        exit(1);
    }
    return c;
}

static int cmd_dump(const char *path, int compression) {
    char err[1024];
    TfrReader *r = tfr_reader_open(path, compression, 0, err, sizeof err);
    if (!r) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    ExampleDecoder *d = example_decoder_new();
    const uint8_t *data;
    size_t n;
    int st, rc = 0;
    while ((st = tfr_reader_next(r, &data, &n, err, sizeof err)) == TFR_RECORD) {
        const Tensorflow__Example *ex = example_decode(d, data, n);
        if (!ex) {
            fprintf(stderr, "%s: record %ld: not an Example\n", path, tfr_reader_record_index(r));
            rc = 1;
            break;
        }
        print_example(ex);
    }
    if (st < 0) {
        fprintf(stderr, "%s\n", err);
        rc = 1;
    }
    example_decoder_free(d);
    tfr_reader_close(r);
    return rc;
}

/* Example i of the writer test: every feature kind, edge values included. */
static int cmd_write(const char *path, int compression, int n) {
    char err[1024];
    TfrWriter *w = tfr_writer_open(path, compression, err, sizeof err);
    if (!w) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    ExampleBuilder b;
    example_builder_init(&b);
    ExampleDecoder *d = example_decoder_new();
    uint8_t img[3072];
    for (int i = 0; i < n; i++) {
        size_t img_n = (size_t)(i * 397) % 3073;
        for (size_t j = 0; j < img_n; j++) img[j] = (uint8_t)(j * 31 + (size_t)i * 7);
        const int64_t ints[4] = {i, -i - 1, INT64_MAX - i, INT64_MIN + i};
        const float floats[5] = {(float)i * 0.25f, -0.0f, 1e-40f, 3.4e38f, -(float)i / 3.0f};
        uint8_t a[3] = {(uint8_t)i, 0, 255};
        ProtobufCBinaryData multi[3] = {{3, a}, {0, NULL}, {5, (uint8_t *)"tower"}};
        example_builder_reset(&b);
        example_add_bytes(&b, "image_raw", img, img_n);
        example_add_int64(&b, "label", i % 10);
        example_add_int64s(&b, "ints", ints, 4);
        example_add_floats(&b, "floats", floats, 5);
        example_add_bytes_list(&b, "multi", multi, 3);
        example_add_int64s(&b, "empty_ints", NULL, 0);
        if (i % 2) example_add_floats(&b, "odd_only", floats, 1);
        const uint8_t *data;
        size_t dn = example_builder_encode(&b, &data);
        if (tfr_writer_write(w, data, dn, err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        print_example(example_decode(d, data, dn));
    }
    example_builder_free(&b);
    example_decoder_free(d);
    if (tfr_writer_close(w, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    return 0;
}

static int cmd_write_raw(const char *path) {
    char err[1024];
    TfrWriter *w = tfr_writer_open(path, IO_COMPRESSION_NONE, err, sizeof err);
    if (!w || tfr_writer_write(w, "abc", 3, err, sizeof err) || tfr_writer_write(w, "", 0, err, sizeof err) ||
        tfr_writer_close(w, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    return 0;
}

static int run_convert(ConvertSource *s, const char *prefix, int shards, int compression, const char *err_open) {
    char err[1024];
    if (!s) {
        fprintf(stderr, "%s\n", err_open);
        return 1;
    }
    ConvertConfig cfg;
    convert_config_defaults(&cfg);
    cfg.out_prefix = prefix;
    cfg.num_shards = shards;
    cfg.compression = compression;
    ConvertStats st;
    int rc = convert_run(s, &cfg, &st, err, sizeof err);
    s->close(s);
    if (rc) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    return 0;
}

static int cmd_augment(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "augment: too few arguments\n");
        return 1;
    }
    int H = atoi(argv[2]), W = atoi(argv[3]), C = atoi(argv[4]), OH = atoi(argv[5]), OW = atoi(argv[6]);
    AugmentParams p;
    if (!strcmp(argv[7], "eval")) {
        augment_params_eval(&p, H, W, OH, OW);
    } else {
        if (argc < 12) {
            fprintf(stderr, "augment: too few arguments\n");
            return 1;
        }
        p.crop_y = atoi(argv[7]);
        p.crop_x = atoi(argv[8]);
        p.flip = atoi(argv[9]);
        p.adjust_color = 1;
        p.brightness_delta = strtof(argv[10], NULL);
        p.contrast_factor = strtof(argv[11], NULL);
    }
    size_t n;
    FILE *f = fopen(argv[0], "rb");
    uint8_t *in = malloc((size_t)H * W * C);
    float *out = malloc(sizeof(float) * (size_t)OH * OW * C);
    if (!f || (n = fread(in, 1, (size_t)H * W * C, f)) != (size_t)H * W * C) {
        fprintf(stderr, "%s: cannot read %d bytes\n", argv[0], H * W * C);
        return 1;
    }
    fclose(f);
    augment_cifar_u8(out, in, H, W, C, OH, OW, &p);
    f = fopen(argv[1], "wb");
    if (!f || fwrite(out, sizeof(float), (size_t)OH * OW * C, f) != (size_t)OH * OW * C || fclose(f)) {
        fprintf(stderr, "%s: cannot write\n", argv[1]);
        return 1;
    }
    free(in);
    free(out);
    return 0;
}

static int cmd_pipeline_none(const char *glob, int H, int W, int C) {
    char err[1024];
    char **files;
    int n_files;
    if (io_expand_globs(glob, &files, &n_files, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    PipelineConfig c;
    pipeline_config_defaults(&c);
    c.files = (const char *const *)files;
    c.n_files = n_files;
    c.in_H = c.out_H = H;
    c.in_W = c.out_W = W;
    c.in_C = C;
    c.num_classes = 1000;
    c.augment = AUGMENT_NONE;
    c.shuffle = 0;
    c.num_epochs = 1;
    c.drop_remainder = 0;
    c.shard_sizes[0] = 7;
    Pipeline *p = pipeline_open(&c, err, sizeof err);
    io_free_files(files, n_files);
    if (!p) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    PipelineBatch *b;
    int rc;
    while ((rc = pipeline_next(p, &b, err, sizeof err)) == 1) {
        for (int i = 0; i < b->n; i++) {
            printf("%d ", b->labels[i]);
            for (size_t j = 0; j < b->example_n_floats; j++) printf("%02x", (unsigned)b->x[(size_t)i * b->example_n_floats + j]);
            printf("\n");
        }
        pipeline_release(p, b);
    }
    pipeline_close(p);
    if (rc < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    char err[1024] = "";
    if (argc >= 3 && !strcmp(argv[1], "dump")) return cmd_dump(argv[2], argc > 3 ? compression_arg(argv[3]) : IO_COMPRESSION_AUTO);
    if (argc == 5 && !strcmp(argv[1], "write")) return cmd_write(argv[2], compression_arg(argv[3]), atoi(argv[4]));
    if (argc == 3 && !strcmp(argv[1], "write-raw")) return cmd_write_raw(argv[2]);
    if (argc == 7 && !strcmp(argv[1], "convert-idx"))
        return run_convert(convert_open_idx(argv[2], argv[3], err, sizeof err), argv[4], atoi(argv[5]), compression_arg(argv[6]), err);
    if (argc >= 6 && !strcmp(argv[1], "convert-cifar"))
        return run_convert(convert_open_cifar10((const char *const *)argv + 5, argc - 5, err, sizeof err), argv[2], atoi(argv[3]),
                           compression_arg(argv[4]), err);
    if (argc >= 2 && !strcmp(argv[1], "augment")) return cmd_augment(argc - 2, argv + 2);
    if (argc == 6 && !strcmp(argv[1], "pipeline-none")) return cmd_pipeline_none(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
    fprintf(stderr, "usage: see the header of tests/test_io_interop_helper.c\n");
    return 1;
}
