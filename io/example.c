/* example.c — tf.train.Example through protobuf-c (see example.h).
 *
 * Where it sits: io/, decoding each record's payload for the pipeline,
 * `tower inspect` and the interop tests, and encoding for the converters.
 * The decoder hands protobuf-c a bump allocator, reset before every decode,
 * so decoding allocates nothing once the arena has grown to the largest
 * record seen.
 */
#include "io/example.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *feature_kind_name(FeatureKind k) {
    switch (k) {
    case FEATURE_BYTES: return "bytes_list";
    case FEATURE_FLOAT: return "float_list";
    case FEATURE_INT64: return "int64_list";
    default: return "none";
    }
}

/* ---- the decoder's arena ---- */

typedef struct ArenaBlock {
    struct ArenaBlock *next;
    size_t cap, used;
    max_align_t data[];
} ArenaBlock;

struct ExampleDecoder {
    ArenaBlock *blocks;   /* newest first */
    size_t total_cap;
    int overflowed;       /* a block was added since the last reset: merge on reset */
    ProtobufCAllocator allocator;
    Tensorflow__Example *msg;
};

static ArenaBlock *arena_block_new(size_t cap) {
    ArenaBlock *b = malloc(sizeof *b + cap);
    if (!b) return NULL;
    b->next = NULL;
    b->cap = cap;
    b->used = 0;
    return b;
}

static void *arena_alloc(void *ctx, size_t n) {
    ExampleDecoder *d = ctx;
    size_t a = sizeof(max_align_t);
    n = (n + a - 1) / a * a;
    if (n == 0) n = a;
    ArenaBlock *b = d->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = d->total_cap > n * 2 ? d->total_cap : n * 2;
        if (cap < 65536) cap = 65536;
        ArenaBlock *nb = arena_block_new(cap);
        if (!nb) return NULL;
        nb->next = b;
        d->blocks = nb;
        d->total_cap += cap;
        d->overflowed = 1;
        b = nb;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    return p;
}

static void arena_free(void *ctx, void *p) {
    (void)ctx;
    (void)p;
}

/* Empties the arena; if it needed several blocks, replace them with one big enough for all. */
static void arena_reset(ExampleDecoder *d) {
    if (d->overflowed && d->blocks && d->blocks->next) {
        size_t cap = d->total_cap;
        for (ArenaBlock *b = d->blocks; b;) {
            ArenaBlock *next = b->next;
            free(b);
            b = next;
        }
        d->blocks = arena_block_new(cap);
        d->total_cap = d->blocks ? cap : 0;
    }
    d->overflowed = 0;
    if (d->blocks) d->blocks->used = 0;
}

ExampleDecoder *example_decoder_new(void) {
    ExampleDecoder *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->allocator.alloc = arena_alloc;
    d->allocator.free = arena_free;
    d->allocator.allocator_data = d;
    return d;
}

void example_decoder_free(ExampleDecoder *d) {
    if (!d) return;
    for (ArenaBlock *b = d->blocks; b;) {
        ArenaBlock *next = b->next;
        free(b);
        b = next;
    }
    free(d);
}

size_t example_decoder_max_n_bytes(size_t record_n_bytes) {
    const size_t decoded_n_bytes = 2 * record_n_bytes + 4096;
    const size_t block_n_bytes = 2 * decoded_n_bytes > 65536 ? 2 * decoded_n_bytes : 65536; /* arena_alloc's minimum */
    return sizeof(ExampleDecoder) + 4 * block_n_bytes + 4096;
}

const Tensorflow__Example *example_decode(ExampleDecoder *d, const uint8_t *data, size_t n_bytes) {
    arena_reset(d);
    d->msg = tensorflow__example__unpack(&d->allocator, n_bytes, data);
    return d->msg;
}

/* ---- lookups ---- */

size_t example_n_features(const Tensorflow__Example *ex) {
    return ex && ex->features ? ex->features->n_feature : 0;
}

const char *example_feature_key(const Tensorflow__Example *ex, size_t i, size_t *key_n_bytes) {
    *key_n_bytes = 0;
    if (i >= example_n_features(ex) || !ex->features->feature[i] || !ex->features->feature[i]->key.data) return "";
    *key_n_bytes = ex->features->feature[i]->key.len;
    return (const char *)ex->features->feature[i]->key.data;
}

const Tensorflow__Feature *example_feature_at(const Tensorflow__Example *ex, size_t i) {
    if (i >= example_n_features(ex) || !ex->features->feature[i]) return NULL;
    return ex->features->feature[i]->value;
}

const Tensorflow__Feature *example_find(const Tensorflow__Example *ex, const char *key) {
    const size_t n = example_n_features(ex), key_n_bytes = strlen(key);
    for (size_t i = n; i-- > 0;) {
        const Tensorflow__Features__FeatureEntry *e = ex->features->feature[i];
        if (e && e->key.len == key_n_bytes && (key_n_bytes == 0 || !memcmp(e->key.data, key, key_n_bytes))) return e->value;
    }
    return NULL;
}

FeatureKind feature_kind(const Tensorflow__Feature *f) {
    if (!f) return FEATURE_NONE;
    switch (f->kind_case) {
    case TENSORFLOW__FEATURE__KIND_BYTES_LIST: return f->bytes_list ? FEATURE_BYTES : FEATURE_NONE;
    case TENSORFLOW__FEATURE__KIND_FLOAT_LIST: return f->float_list ? FEATURE_FLOAT : FEATURE_NONE;
    case TENSORFLOW__FEATURE__KIND_INT64_LIST: return f->int64_list ? FEATURE_INT64 : FEATURE_NONE;
    default: return FEATURE_NONE;
    }
}

size_t feature_n_values(const Tensorflow__Feature *f) {
    switch (feature_kind(f)) {
    case FEATURE_BYTES: return f->bytes_list->n_value;
    case FEATURE_FLOAT: return f->float_list->n_value;
    case FEATURE_INT64: return f->int64_list->n_value;
    default: return 0;
    }
}

/* The feature under key if it has the wanted kind, else NULL and a reason. */
static const Tensorflow__Feature *find_kind(const Tensorflow__Example *ex, const char *key, FeatureKind want,
                                            char *why, size_t why_n) {
    const Tensorflow__Feature *f = example_find(ex, key);
    if (!f) {
        if (why) snprintf(why, why_n, "missing feature '%s'", key);
        return NULL;
    }
    FeatureKind k = feature_kind(f);
    if (k != want) {
        if (why)
            snprintf(why, why_n, "feature '%s' is %s, expected %s", key, feature_kind_name(k), feature_kind_name(want));
        return NULL;
    }
    return f;
}

static int want_one(const char *key, size_t n, char *why, size_t why_n) {
    if (n == 1) return 0;
    if (why) snprintf(why, why_n, "feature '%s' has %zu values, expected 1", key, n);
    return -1;
}

int example_get_int64(const Tensorflow__Example *ex, const char *key, int64_t *value, char *why, size_t why_n) {
    const Tensorflow__Feature *f = find_kind(ex, key, FEATURE_INT64, why, why_n);
    if (!f || want_one(key, f->int64_list->n_value, why, why_n) != 0) return -1;
    *value = f->int64_list->value[0];
    return 0;
}

int example_get_bytes(const Tensorflow__Example *ex, const char *key, const uint8_t **data, size_t *n_bytes,
                      char *why, size_t why_n) {
    const Tensorflow__Feature *f = find_kind(ex, key, FEATURE_BYTES, why, why_n);
    if (!f || want_one(key, f->bytes_list->n_value, why, why_n) != 0) return -1;
    *data = f->bytes_list->value[0].data;
    *n_bytes = f->bytes_list->value[0].len;
    return 0;
}

int example_get_floats(const Tensorflow__Example *ex, const char *key, const float **values, size_t *n_values,
                       char *why, size_t why_n) {
    const Tensorflow__Feature *f = find_kind(ex, key, FEATURE_FLOAT, why, why_n);
    if (!f) return -1;
    *values = f->float_list->value;
    *n_values = f->float_list->n_value;
    return 0;
}

int example_get_int64s(const Tensorflow__Example *ex, const char *key, const int64_t **values, size_t *n_values,
                       char *why, size_t why_n) {
    const Tensorflow__Feature *f = find_kind(ex, key, FEATURE_INT64, why, why_n);
    if (!f) return -1;
    *values = f->int64_list->value;
    *n_values = f->int64_list->n_value;
    return 0;
}

int example_check_image_shape(const char *image_key, size_t n_values, const char *unit, int64_t h, int64_t w,
                              int64_t c, char *why, size_t why_n_bytes) {
    const int64_t lo = h < w ? (h < c ? h : c) : (w < c ? w : c), hi = h > w ? (h > c ? h : c) : (w > c ? w : c);
    if (lo < 1 || hi > 65536) {
        snprintf(why, why_n_bytes, "image '%s' shape %lld x %lld x %lld (height x width x depth) has a dimension %s",
                 image_key, (long long)h, (long long)w, (long long)c, lo < 1 ? "under 1" : "over 65536");
        return -1;
    }
    const uint64_t want = (uint64_t)h * (uint64_t)w * (uint64_t)c; /* at most 2^48 */
    if (want != (uint64_t)n_values) {
        snprintf(why, why_n_bytes, "image '%s' has %zu %s, expected %llu (%lld x %lld x %lld)", image_key, n_values, unit,
                 (unsigned long long)want, (long long)h, (long long)w, (long long)c);
        return -1;
    }
    return 0;
}

/* ---- encoding ---- */

void example_builder_init(ExampleBuilder *b) {
    memset(b, 0, sizeof *b);
}

void example_builder_reset(ExampleBuilder *b) { b->n_features = 0; }

static int builder_slot(ExampleBuilder *b, const char *key) {
    if (b->n_features >= EXAMPLE_BUILDER_MAX_FEATURES) return -1;
    int i = b->n_features++;
    tensorflow__features__feature_entry__init(&b->entries[i]);
    tensorflow__feature__init(&b->feature[i]);
    b->entries[i].key.data = (uint8_t *)(uintptr_t)key;
    b->entries[i].key.len = strlen(key);
    b->entries[i].value = &b->feature[i];
    b->entry_ptrs[i] = &b->entries[i];
    return i;
}

int example_add_bytes_list(ExampleBuilder *b, const char *key, ProtobufCBinaryData *values, size_t n_values) {
    int i = builder_slot(b, key);
    if (i < 0) return -1;
    tensorflow__bytes_list__init(&b->bytes_list[i]);
    b->bytes_list[i].n_value = n_values;
    b->bytes_list[i].value = values;
    b->feature[i].kind_case = TENSORFLOW__FEATURE__KIND_BYTES_LIST;
    b->feature[i].bytes_list = &b->bytes_list[i];
    return 0;
}

int example_add_bytes(ExampleBuilder *b, const char *key, const void *data, size_t n_bytes) {
    if (b->n_features >= EXAMPLE_BUILDER_MAX_FEATURES) return -1;
    int i = b->n_features;
    b->one_bytes[i].data = (uint8_t *)(uintptr_t)data;
    b->one_bytes[i].len = n_bytes;
    return example_add_bytes_list(b, key, &b->one_bytes[i], 1);
}

int example_add_floats(ExampleBuilder *b, const char *key, const float *values, size_t n_values) {
    int i = builder_slot(b, key);
    if (i < 0) return -1;
    tensorflow__float_list__init(&b->float_list[i]);
    b->float_list[i].n_value = n_values;
    b->float_list[i].value = (float *)(uintptr_t)values;
    b->feature[i].kind_case = TENSORFLOW__FEATURE__KIND_FLOAT_LIST;
    b->feature[i].float_list = &b->float_list[i];
    return 0;
}

int example_add_int64s(ExampleBuilder *b, const char *key, const int64_t *values, size_t n_values) {
    int i = builder_slot(b, key);
    if (i < 0) return -1;
    tensorflow__int64_list__init(&b->int64_list[i]);
    b->int64_list[i].n_value = n_values;
    b->int64_list[i].value = (int64_t *)(uintptr_t)values;
    b->feature[i].kind_case = TENSORFLOW__FEATURE__KIND_INT64_LIST;
    b->feature[i].int64_list = &b->int64_list[i];
    return 0;
}

int example_add_int64(ExampleBuilder *b, const char *key, int64_t value) {
    if (b->n_features >= EXAMPLE_BUILDER_MAX_FEATURES) return -1;
    int i = b->n_features;
    b->one_int64[i] = value;
    return example_add_int64s(b, key, &b->one_int64[i], 1);
}

size_t example_builder_encode(ExampleBuilder *b, const uint8_t **data) {
    tensorflow__example__init(&b->example);
    tensorflow__features__init(&b->features);
    b->features.n_feature = (size_t)b->n_features;
    b->features.feature = b->entry_ptrs;
    b->example.features = &b->features;
    size_t n = tensorflow__example__get_packed_size(&b->example);
    if (n > b->buf_cap) {
        size_t cap = b->buf_cap ? b->buf_cap : 256;
        while (cap < n) cap *= 2;
        uint8_t *p = realloc(b->buf, cap);
        if (!p) {
            *data = NULL;
            return 0;
        }
        b->buf = p;
        b->buf_cap = cap;
    }
    size_t w = tensorflow__example__pack(&b->example, b->buf);
    *data = b->buf;
    return w;
}

void example_builder_free(ExampleBuilder *b) {
    free(b->buf);
    b->buf = NULL;
    b->buf_cap = 0;
}
