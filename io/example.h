/* example.h — tf.train.Example encode and decode through protobuf-c.
 *
 * Where it sits: io/, between the TFRecord framing (tfrecord.h) and the
 * pipeline: every record's payload is a serialized tensorflow.Example
 * (io/example.proto, TensorFlow's package and field numbers).  Decoding
 * accepts everything protobuf-c accepts: packed and unpacked repeated
 * scalars, map entries in any order; for a key given twice the last entry
 * wins, as in protobuf map semantics.
 * What it does not do: no SequenceExample, no schema (callers say which keys
 * and kinds they need and get a one-line reason when a record disagrees).
 */
#ifndef TOWER_IO_EXAMPLE_H
#define TOWER_IO_EXAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "io/example.pb-c.h"

typedef enum {
    FEATURE_NONE = 0,  /* key absent, or a Feature with no kind set */
    FEATURE_BYTES = 1, /* bytes_list */
    FEATURE_FLOAT = 2, /* float_list */
    FEATURE_INT64 = 3, /* int64_list */
} FeatureKind;

/* "none", "bytes_list", "float_list", "int64_list". */
const char *feature_kind_name(FeatureKind kind);

/* ---- decoding ---- */

/* A reusable decoder: decoded messages live in its arena until the next
 * decode, so steady-state decoding does not call malloc.  One per thread. */
typedef struct ExampleDecoder ExampleDecoder;

/* Returns a new decoder, or NULL when out of memory.  Free with example_decoder_free. */
ExampleDecoder *example_decoder_new(void);
void example_decoder_free(ExampleDecoder *d);

/* Host memory a decoder holds at most, in bytes, after decoding records of
 * up to record_n_bytes that are image-like Examples: protobuf-c's
 * allocations for one such record (a bytes_list or float_list image copied
 * once, a few int64 scalars, their keys) stay below D = 2 x record_n_bytes
 * + 4 KiB, and the arena, which grows by doubling and merges on reset,
 * below 4 x max(2 x D, 64 KiB).  A record of thousands of tiny features
 * decodes to up to ~24x its size and is not covered.  Never fails. */
size_t example_decoder_max_n_bytes(size_t record_n_bytes);

/* Decodes a serialized Example (data, n_bytes).  Returns the message, owned
 * by the decoder and valid until its next decode or free, or NULL when the
 * bytes are not a valid Example (protobuf-c rejects them). */
const Tensorflow__Example *example_decode(ExampleDecoder *d, const uint8_t *data, size_t n_bytes);

/* Number of map entries and the i-th entry's key (*key_n_bytes long, any
 * bytes, NUL included; not NUL-terminated) and feature (in wire order;
 * feature may be NULL for an entry without a value). */
size_t example_n_features(const Tensorflow__Example *ex);
const char *example_feature_key(const Tensorflow__Example *ex, size_t i, size_t *key_n_bytes);
const Tensorflow__Feature *example_feature_at(const Tensorflow__Example *ex, size_t i);

/* The feature stored under key (the last entry whose key is exactly key's bytes), or NULL. */
const Tensorflow__Feature *example_find(const Tensorflow__Example *ex, const char *key);

/* Kind of a feature (FEATURE_NONE for NULL) and its number of values. */
FeatureKind feature_kind(const Tensorflow__Feature *f);
size_t feature_n_values(const Tensorflow__Feature *f);

/* Typed lookups.  Each returns 0 on success; otherwise -1 and a reason in
 * why (e.g. "missing feature 'label'", "feature 'label' is bytes_list,
 * expected int64_list", "feature 'label' has 3 values, expected 1").
 * Pointers returned point into ex. */
int example_get_int64(const Tensorflow__Example *ex, const char *key, int64_t *value, char *why, size_t why_n_bytes);
int example_get_bytes(const Tensorflow__Example *ex, const char *key, const uint8_t **data, size_t *n_bytes,
                      char *why, size_t why_n_bytes);
int example_get_floats(const Tensorflow__Example *ex, const char *key, const float **values, size_t *n_values,
                       char *why, size_t why_n_bytes);
int example_get_int64s(const Tensorflow__Example *ex, const char *key, const int64_t **values, size_t *n_values,
                       char *why, size_t why_n_bytes);

/* An image feature of n_values values (bytes or floats: unit) against its
 * height x width x depth features (h, w, c): 0 when each is in [1, 65536]
 * and their product is n_values; otherwise -1 with one reason in why:
 * "image 'image_raw' shape 0 x 28 x 1 (height x width x depth) has a
 * dimension under 1", "... has a dimension over 65536", or "image
 * 'image_raw' has 47 bytes, expected 48 (4 x 4 x 3)".  The product is
 * formed only of bounded dimensions, so no shape wraps around to match.
 * The one check of `tower inspect` and of train's and eval's first record. */
int example_check_image_shape(const char *image_key, size_t n_values, const char *unit, int64_t h, int64_t w,
                              int64_t c, char *why, size_t why_n_bytes);

/* ---- encoding ---- */

#define EXAMPLE_BUILDER_MAX_FEATURES 32

/* Collects features, then serializes them.  The builder references the
 * caller's keys and values (not copied) until example_builder_encode; it
 * owns only its output buffer.  Features are written in the order added. */
typedef struct {
    Tensorflow__Example example;
    Tensorflow__Features features;
    Tensorflow__Features__FeatureEntry entries[EXAMPLE_BUILDER_MAX_FEATURES];
    Tensorflow__Features__FeatureEntry *entry_ptrs[EXAMPLE_BUILDER_MAX_FEATURES];
    Tensorflow__Feature feature[EXAMPLE_BUILDER_MAX_FEATURES];
    Tensorflow__BytesList bytes_list[EXAMPLE_BUILDER_MAX_FEATURES];
    Tensorflow__FloatList float_list[EXAMPLE_BUILDER_MAX_FEATURES];
    Tensorflow__Int64List int64_list[EXAMPLE_BUILDER_MAX_FEATURES];
    ProtobufCBinaryData one_bytes[EXAMPLE_BUILDER_MAX_FEATURES]; /* storage for single-value bytes lists */
    int64_t one_int64[EXAMPLE_BUILDER_MAX_FEATURES];              /* storage for single-value int64 lists */
    int n_features;
    uint8_t *buf;       /* (buf_cap) encoded output, owned */
    size_t buf_cap;
} ExampleBuilder;

/* Starts an empty builder (buf NULL). */
void example_builder_init(ExampleBuilder *b);

/* Drops the features added so far (keeps the output buffer). */
void example_builder_reset(ExampleBuilder *b);

/* Adders.  Each returns 0, or -1 when the builder already holds
 * EXAMPLE_BUILDER_MAX_FEATURES features.  values may be NULL when n is 0.
 * The builder keeps key, data and values by pointer, not a copy: they must
 * live until example_builder_encode (example_add_int64 copies its value). */
int example_add_bytes(ExampleBuilder *b, const char *key, const void *data, size_t n_bytes);
int example_add_bytes_list(ExampleBuilder *b, const char *key, ProtobufCBinaryData *values, size_t n_values);
int example_add_floats(ExampleBuilder *b, const char *key, const float *values, size_t n_values);
int example_add_int64s(ExampleBuilder *b, const char *key, const int64_t *values, size_t n_values);
int example_add_int64(ExampleBuilder *b, const char *key, int64_t value);

/* Serializes the features added so far.  Returns the byte count and sets
 * *data to the builder's buffer (valid until the next encode or free), or
 * returns 0 with *data NULL when out of memory.  (An empty Example encodes
 * to 2 bytes: an empty features message.) */
size_t example_builder_encode(ExampleBuilder *b, const uint8_t **data);

/* Frees the output buffer. */
void example_builder_free(ExampleBuilder *b);

#endif
