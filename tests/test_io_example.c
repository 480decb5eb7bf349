/* test_io_example.c — tf.train.Example through protobuf-c: every feature
 * kind round-trips; hand-written wire bytes (independent of protobuf-c's
 * encoder) decode with packed and unpacked repeated scalars and with map
 * entries in any order; the typed getters' messages; garbage is rejected;
 * the image shape check (wrapped products, zero dimensions). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "io/example.h"
#include "test_io_util.h"

/* ---- a tiny protobuf wire writer, from the encoding spec ---- */
typedef struct {
    uint8_t b[4096];
    size_t n;
} Wire;

static void w_varint(Wire *w, uint64_t v) {
    do {
        uint8_t byte = v & 0x7f;
        v >>= 7;
        w->b[w->n++] = byte | (v ? 0x80 : 0);
    } while (v);
}
static void w_tag(Wire *w, int field, int wire_type) { w_varint(w, ((uint64_t)field << 3) | (uint64_t)wire_type); }
static void w_bytes(Wire *w, int field, const void *p, size_t n) {
    w_tag(w, field, 2);
    w_varint(w, n);
    memcpy(w->b + w->n, p, n);
    w->n += n;
}
static void w_fixed32(Wire *w, uint32_t v) {
    for (int i = 0; i < 4; i++) w->b[w->n++] = (uint8_t)(v >> (8 * i));
}
static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Feature with an Int64List, packed or not. */
static void feature_int64(Wire *out, const int64_t *v, int n, int packed) {
    Wire list = {{0}, 0}, feat = {{0}, 0};
    if (packed) {
        Wire pk = {{0}, 0};
        for (int i = 0; i < n; i++) w_varint(&pk, (uint64_t)v[i]);
        w_bytes(&list, 1, pk.b, pk.n);
    } else {
        for (int i = 0; i < n; i++) {
            w_tag(&list, 1, 0);
            w_varint(&list, (uint64_t)v[i]);
        }
    }
    w_bytes(&feat, 3, list.b, list.n);
    *out = feat;
}

static void feature_float(Wire *out, const float *v, int n, int packed) {
    Wire list = {{0}, 0}, feat = {{0}, 0};
    if (packed) {
        Wire pk = {{0}, 0};
        for (int i = 0; i < n; i++) w_fixed32(&pk, f2u(v[i]));
        w_bytes(&list, 1, pk.b, pk.n);
    } else {
        for (int i = 0; i < n; i++) {
            w_tag(&list, 1, 5);
            w_fixed32(&list, f2u(v[i]));
        }
    }
    w_bytes(&feat, 2, list.b, list.n);
    *out = feat;
}

static void feature_bytes(Wire *out, const char *const *v, int n) {
    Wire list = {{0}, 0}, feat = {{0}, 0};
    for (int i = 0; i < n; i++) w_bytes(&list, 1, v[i], strlen(v[i]));
    w_bytes(&feat, 1, list.b, list.n);
    *out = feat;
}

/* Map entry: key = 1, value = 2 (value_first puts the value first). */
static void map_entry(Wire *features, const char *key, const Wire *feat, int value_first) {
    Wire e = {{0}, 0};
    if (value_first) {
        w_bytes(&e, 2, feat->b, feat->n);
        w_bytes(&e, 1, key, strlen(key));
    } else {
        w_bytes(&e, 1, key, strlen(key));
        w_bytes(&e, 2, feat->b, feat->n);
    }
    w_bytes(features, 1, e.b, e.n);
}

static void check_decoded(const Tensorflow__Example *ex, const char *what) {
    char why[256];
    int64_t label;
    CHECK_MSG(ex != NULL, "%s", what);
    if (!ex) return;
    CHECK_MSG(example_get_int64(ex, "label", &label, why, sizeof why) == 0 && label == -7, "%s: %s", what, why);
    const int64_t *iv;
    size_t n;
    CHECK(example_get_int64s(ex, "ids", &iv, &n, why, sizeof why) == 0 && n == 3 && iv[0] == 1 && iv[1] == 300 &&
          iv[2] == (int64_t)1 << 40);
    const float *fv;
    CHECK(example_get_floats(ex, "f", &fv, &n, why, sizeof why) == 0 && n == 2 && fv[0] == 0.5f && fv[1] == -2.25f);
    const uint8_t *b;
    CHECK(example_get_bytes(ex, "img", &b, &n, why, sizeof why) == 0 && n == 5 && !memcmp(b, "hello", 5));
    const Tensorflow__Feature *f = example_find(ex, "names");
    CHECK(feature_kind(f) == FEATURE_BYTES && feature_n_values(f) == 2);
    CHECK(f && f->bytes_list->n_value == 2 && f->bytes_list->value[1].len == 2 && !memcmp(f->bytes_list->value[1].data, "yz", 2));
}

static void build_wire(Wire *ex_wire, int packed, int reverse, int value_first) {
    Wire feats = {{0}, 0}, fe[5];
    const int64_t label = -7, ids[3] = {1, 300, (int64_t)1 << 40};
    const float fl[2] = {0.5f, -2.25f};
    const char *img[1] = {"hello"}, *names[2] = {"x", "yz"};
    feature_int64(&fe[0], &label, 1, packed);
    feature_int64(&fe[1], ids, 3, packed);
    feature_float(&fe[2], fl, 2, packed);
    feature_bytes(&fe[3], img, 1);
    feature_bytes(&fe[4], names, 2);
    const char *keys[5] = {"label", "ids", "f", "img", "names"};
    for (int k = 0; k < 5; k++) {
        int i = reverse ? 4 - k : k;
        map_entry(&feats, keys[i], &fe[i], value_first);
    }
    ex_wire->n = 0;
    w_bytes(ex_wire, 1, feats.b, feats.n);
}

static void test_wire_variants(void) {
    ExampleDecoder *d = example_decoder_new();
    for (int packed = 0; packed < 2; packed++)
        for (int reverse = 0; reverse < 2; reverse++)
            for (int vf = 0; vf < 2; vf++) {
                Wire w;
                build_wire(&w, packed, reverse, vf);
                char what[64];
                snprintf(what, sizeof what, "packed %d reverse %d value_first %d", packed, reverse, vf);
                check_decoded(example_decode(d, w.b, w.n), what);
            }
    /* A key given twice: the last entry wins (map semantics). */
    Wire feats = {{0}, 0}, a, b, ex = {{0}, 0};
    const int64_t one = 1, two = 2;
    feature_int64(&a, &one, 1, 1);
    feature_int64(&b, &two, 1, 0);
    map_entry(&feats, "label", &a, 0);
    map_entry(&feats, "label", &b, 0);
    w_bytes(&ex, 1, feats.b, feats.n);
    const Tensorflow__Example *e = example_decode(d, ex.b, ex.n);
    int64_t v = 0;
    CHECK(e && example_get_int64(e, "label", &v, NULL, 0) == 0 && v == 2);
    /* Empty payload: a valid Example with no features. */
    e = example_decode(d, (const uint8_t *)"", 0);
    CHECK(e != NULL && example_n_features(e) == 0);
    char why[128];
    CHECK(example_get_int64(e, "label", &v, why, sizeof why) == -1);
    CHECK_CONTAINS(why, "missing feature 'label'");
    /* Garbage: truncated varint, wrong wire type, length past the end. */
    const uint8_t bad1[] = {0x0a, 0x80};
    const uint8_t bad2[] = {0x0a, 0x10, 0x0a, 0x02};
    const uint8_t bad3[] = {0x0d, 0x01, 0x02, 0x03, 0x04, 0x0a, 0x05, 0x0a};
    CHECK(example_decode(d, bad1, sizeof bad1) == NULL);
    CHECK(example_decode(d, bad2, sizeof bad2) == NULL);
    CHECK(example_decode(d, bad3, sizeof bad3) == NULL || example_find(example_decode(d, bad3, sizeof bad3), "x") == NULL);
    const char *text = "this is text, not a protobuf";
    CHECK(example_decode(d, (const uint8_t *)text, strlen(text)) == NULL);
    example_decoder_free(d);
}

static void test_builder_round_trip(void) {
    ExampleBuilder b;
    example_builder_init(&b);
    ExampleDecoder *d = example_decoder_new();
    uint8_t img[3072];
    for (int i = 0; i < 3072; i++) img[i] = (uint8_t)(i * 7);
    const float fl[4] = {1.0f, -0.0f, 3.5e-8f, INFINITY};
    const int64_t iv[3] = {INT64_MIN, 0, INT64_MAX};
    ProtobufCBinaryData multi[2] = {{3, (uint8_t *)"abc"}, {0, NULL}};
    for (int round = 0; round < 3; round++) {
        example_builder_reset(&b);
        CHECK(example_add_bytes(&b, "image_raw", img, sizeof img) == 0);
        CHECK(example_add_int64(&b, "label", 9 - round) == 0);
        CHECK(example_add_floats(&b, "floats", fl, 4) == 0);
        CHECK(example_add_int64s(&b, "ints", iv, 3) == 0);
        CHECK(example_add_bytes_list(&b, "multi", multi, 2) == 0);
        CHECK(example_add_floats(&b, "empty_floats", NULL, 0) == 0);
        const uint8_t *data;
        size_t n = example_builder_encode(&b, &data);
        CHECK(n > 3072 && data != NULL);
        const Tensorflow__Example *ex = example_decode(d, data, n);
        CHECK(ex != NULL);
        if (!ex) continue;
        CHECK(example_n_features(ex) == 6);
        size_t key_n_bytes;
        const char *key0 = example_feature_key(ex, 0, &key_n_bytes);
        CHECK(key_n_bytes == 9 && !memcmp(key0, "image_raw", 9));
        const uint8_t *bp;
        size_t bn;
        CHECK(example_get_bytes(ex, "image_raw", &bp, &bn, NULL, 0) == 0 && bn == 3072 && !memcmp(bp, img, 3072));
        int64_t label;
        CHECK(example_get_int64(ex, "label", &label, NULL, 0) == 0 && label == 9 - round);
        const float *fp;
        size_t fn;
        CHECK(example_get_floats(ex, "floats", &fp, &fn, NULL, 0) == 0 && fn == 4 && !memcmp(fp, fl, sizeof fl));
        const int64_t *ip;
        size_t in;
        CHECK(example_get_int64s(ex, "ints", &ip, &in, NULL, 0) == 0 && in == 3 && !memcmp(ip, iv, sizeof iv));
        const Tensorflow__Feature *mf = example_find(ex, "multi");
        CHECK(feature_kind(mf) == FEATURE_BYTES && feature_n_values(mf) == 2 && mf->bytes_list->value[1].len == 0);
        const Tensorflow__Feature *ef = example_find(ex, "empty_floats");
        CHECK(feature_kind(ef) == FEATURE_FLOAT && feature_n_values(ef) == 0);
        /* Getter messages. */
        char why[256];
        CHECK(example_get_int64(ex, "image_raw", &label, why, sizeof why) == -1);
        CHECK_CONTAINS(why, "feature 'image_raw' is bytes_list, expected int64_list");
        CHECK(example_get_int64(ex, "ints", &label, why, sizeof why) == -1);
        CHECK_CONTAINS(why, "feature 'ints' has 3 values, expected 1");
        CHECK(example_get_bytes(ex, "multi", &bp, &bn, why, sizeof why) == -1);
        CHECK_CONTAINS(why, "feature 'multi' has 2 values, expected 1");
        CHECK(example_get_floats(ex, "label", &fp, &fn, why, sizeof why) == -1);
        CHECK_CONTAINS(why, "feature 'label' is int64_list, expected float_list");
    }
    /* The builder's bound. */
    example_builder_reset(&b);
    int added = 0;
    for (int i = 0; i < EXAMPLE_BUILDER_MAX_FEATURES + 3; i++) added += example_add_int64(&b, "k", i) == 0;
    CHECK(added == EXAMPLE_BUILDER_MAX_FEATURES);
    /* The encoder agrees with the hand-written packed wire bytes. */
    example_builder_reset(&b);
    example_add_int64(&b, "label", 5);
    const uint8_t *data;
    size_t n = example_builder_encode(&b, &data);
    Wire fe, feats = {{0}, 0}, ex = {{0}, 0};
    const int64_t five = 5;
    feature_int64(&fe, &five, 1, 1);
    map_entry(&feats, "label", &fe, 0);
    w_bytes(&ex, 1, feats.b, feats.n);
    CHECK(n == ex.n && !memcmp(data, ex.b, n));
    example_builder_free(&b);
    example_decoder_free(d);
}

/* example_check_image_shape: the one shape check of inspect and of train's and eval's first record.  Shapes whose
 * product wraps around 2^64 to the image's size (inspect called them good), zero dimensions (eval said "has 0
 * values but ... is 0 x 28 x 1"), the largest bounded shape (its product held exactly). */
/* A key holding a NUL byte is its whole bytes, as TensorFlow's std::string keys are: "label\0old" is not
 * "label" (protobuf-c's strings ended at the NUL, so its 7 was read as the label, and a file with only
 * "label\0v2" trained where TensorFlow says 'label' is missing). */
static void test_key_with_nul(void) {
    ExampleDecoder *d = example_decoder_new();
    CHECK(d != NULL);
    if (!d) return;
    /* Example { features { feature { key: "label\0old" value { int64_list { value: 7 } } }
     *                      feature { key: "label"      value { int64_list { value: 3 } } } } }, by hand */
    static const uint8_t entry_nul[] = {0x0a, 9, 'l', 'a', 'b', 'e', 'l', 0, 'o', 'l', 'd', 0x12, 5, 0x1a, 3, 0x0a, 1, 7};
    static const uint8_t entry_plain[] = {0x0a, 5, 'l', 'a', 'b', 'e', 'l', 0x12, 5, 0x1a, 3, 0x0a, 1, 3};
    for (int both = 0; both < 2; both++) {
        uint8_t wire[64];
        size_t n = 0;
        const size_t features_n = 2 + sizeof entry_nul + (both ? 2 + sizeof entry_plain : 0);
        wire[n++] = 0x0a;
        wire[n++] = (uint8_t)features_n;
        wire[n++] = 0x0a;
        wire[n++] = sizeof entry_nul;
        memcpy(wire + n, entry_nul, sizeof entry_nul);
        n += sizeof entry_nul;
        if (both) {
            wire[n++] = 0x0a;
            wire[n++] = sizeof entry_plain;
            memcpy(wire + n, entry_plain, sizeof entry_plain);
            n += sizeof entry_plain;
        }
        const Tensorflow__Example *ex = example_decode(d, wire, n);
        CHECK(ex != NULL);
        if (!ex) continue;
        size_t key_n_bytes;
        const char *key = example_feature_key(ex, 0, &key_n_bytes);
        CHECK_MSG(key_n_bytes == 9 && !memcmp(key, "label\0old", 9), "the first key has %zu bytes", key_n_bytes);
        int64_t label = -1;
        char why[128] = "";
        const int rc = example_get_int64(ex, "label", &label, why, sizeof why);
        if (both) CHECK_MSG(rc == 0 && label == 3, "'label' read %lld (rc %d), want 3", (long long)label, rc);
        else CHECK_MSG(rc == -1 && strstr(why, "missing feature 'label'"), "'label' read %lld (rc %d: %s), want missing",
                       (long long)label, rc, why);
    }
    example_decoder_free(d);
}

static void test_image_shape(void) {
    char why[256];
    CHECK(example_check_image_shape("image_raw", 784, "bytes", 28, 28, 1, why, sizeof why) == 0, "28x28x1: %s", why);
    CHECK(example_check_image_shape("image_raw", 783, "bytes", 28, 28, 1, why, sizeof why) == -1 &&
              !strcmp(why, "image 'image_raw' has 783 bytes, expected 784 (28 x 28 x 1)"), "783 bytes: %s", why);
    CHECK(example_check_image_shape("image_raw", 784, "bytes", ((int64_t)1 << 62) + 196, 4, 1, why, sizeof why) == -1 &&
              strstr(why, "has a dimension over 65536"), "(2^62 + 196) x 4 x 1 wraps to 784: %s", why);
    CHECK(example_check_image_shape("image_raw", 0, "bytes", (int64_t)1 << 32, (int64_t)1 << 32, 1, why, sizeof why) == -1 &&
              strstr(why, "over 65536"), "2^32 x 2^32 x 1 wraps to 0: %s", why);
    CHECK(example_check_image_shape("image_raw", 0, "bytes", 0, 28, 1, why, sizeof why) == -1 &&
              !strcmp(why, "image 'image_raw' shape 0 x 28 x 1 (height x width x depth) has a dimension under 1"),
          "0 x 28 x 1: %s", why);
    CHECK(example_check_image_shape("x", 0, "floats", 28, 28, 0, why, sizeof why) == -1 && strstr(why, "under 1"),
          "28 x 28 x 0: %s", why);
    CHECK(example_check_image_shape("x", 784, "floats", -28, -28, 1, why, sizeof why) == -1 && strstr(why, "under 1"),
          "-28 x -28 x 1 (product 784): %s", why);
    CHECK(example_check_image_shape("x", 5, "floats", 65536, 65536, 65536, why, sizeof why) == -1 &&
              strstr(why, "expected 281474976710656 (65536 x 65536 x 65536)"), "2^16 cubed: %s", why);
}

int main(void) {
    test_wire_variants();
    test_builder_round_trip();
    test_image_shape();
    test_key_with_nul();
    return io_test_result("test_io_example");
}
