/* pipeline.c — the input pipeline's threads (see pipeline.h).
 *
 * Where it sits: io -> shards.  Data path for one example:
 *   reader thread: TfrReader -> verify CRCs -> decode Example -> check keys,
 *     shape, label -> copy the image into a free slot -> shuffle buffer ->
 *     "emit": it gets the next stream index g, which fixes its batch and
 *     position -> a work item (slot, batch, position, g) on the work queue
 *   workers: augment slot -> staging buffer x[position], label -> labels[position];
 *     give the slot back; the batch turns READY when all its examples are in
 *   consumer: pipeline_next hands out READY batches in stream order.
 * Only the reader decides order (single thread, RNG streams keyed by seed
 * and epoch), and workers seed augmentation from g, hence determinism.
 * One mutex guards the shared state (free slots, work queue, batch ring);
 * the reader and workers move items in small groups to keep it cool.
 * What it does not do: no per-tower queues (the caller splits a batch by
 * shard_offset/shard_n), no device copies.
 */
#include "io/pipeline.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/escape.h"
#include "io/example.h"
#include "io/rng.h"
#include "io/tfrecord.h"

#define PIPELINE_GROUP 16 /* work items / slots moved per lock */
#define PIPELINE_THREAD_N_BYTES ((size_t)128 << 10) /* a thread's touched stack and malloc arena slack (pipeline_max_n_bytes) */

typedef struct {
    int slot;      /* slot holding the decoded image and label */
    int ring;      /* batch ring entry */
    int pos;       /* position in that batch */
    uint64_t g;    /* index in the output stream */
} WorkItem;

enum { RING_FREE = 0, RING_FILLING, RING_READY, RING_OUT };

typedef struct {
    PipelineBatch pub;
    int state;
    long seq;      /* batch sequence number while FILLING/READY/OUT */
    int n_target;  /* examples it will hold */
    int n_done;    /* examples the workers have finished */
} RingEntry;

struct Pipeline {
    PipelineConfig cfg;
    char **files;
    int n_files;
    int B;                    /* global batch */
    size_t in_n_values;       /* in_H * in_W * in_C */
    size_t slot_n_bytes;      /* in_n_values * (1 or 4) */
    size_t out_n_floats;      /* out_H * out_W * in_C */

    /* slots: decoded examples between the reader and the workers */
    int n_slots;
    uint8_t *slot_data;       /* (n_slots, slot_n_bytes) */
    int32_t *slot_label;      /* (n_slots) */
    int *free_slots;          /* (n_slots) stack of free slot ids */
    int n_free;

    WorkItem *work;           /* (n_slots) ring buffer of pending work */
    int work_head, work_count;

    RingEntry *ring;          /* (P) staging buffers */
    int P;
    long deliver_seq;         /* next batch the consumer gets */

    pthread_mutex_t mu;
    pthread_cond_t cv_reader, cv_work, cv_consumer;
    atomic_int stop;          /* read by the reader between records without the lock */
    int reader_done;
    long end_seq;             /* batches in the stream, once reader_done */
    int failed;
    long fail_seq;            /* batches before the failure are still delivered */
    char fail_msg[600];

    /* statistics (under mu) */
    struct timespec t_open;
    long produced;            /* examples in batches that became READY */
    long corrupt, delivered, n_next_calls;
    long corrupt_distinct;     /* the most bad records one epoch met (each epoch meets the same ones) */
    uint64_t lost_n_bytes;     /* the most bytes one epoch lost to bad records */
    uint64_t input_n_bytes;    /* the files' sizes, at open */
    long epoch_corrupt;        /* this epoch's (reader thread) */
    uint64_t epoch_lost_n_bytes;
    double fill_sum, wait_sec;

    /* reader-thread state */
    int *shuf;                /* (capacity) slot ids in the shuffle buffer */
    long shuf_n;
    uint64_t g_next;
    long fill_seq;            /* batch being filled (or next to start) */
    int fill_pos;             /* examples assigned to it so far */
    int fill_ring;
    long cur_epoch;
    WorkItem pending[PIPELINE_GROUP];
    int n_pending;
    int slot_cache[PIPELINE_GROUP];
    int n_slot_cache;
    ExampleDecoder *dec;

    pthread_t reader;
    pthread_t *workers;
    int reader_started, n_workers_started;
};

static double now_sec(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void pipeline_config_defaults(PipelineConfig *c) {
    memset(c, 0, sizeof *c);
    c->image_key = "image_raw";
    c->label_key = "label";
    c->height_key = "height";
    c->width_key = "width";
    c->depth_key = "depth";
    c->compression = IO_COMPRESSION_AUTO;
    c->in_H = 32;
    c->in_W = 32;
    c->in_C = 3;
    c->out_H = 24;
    c->out_W = 24;
    c->num_classes = 10;
    c->augment = AUGMENT_CIFAR_TRAIN;
    c->augment_hparams = augment_hparams_cifar10();
    c->n_shards = 1;
    for (int t = 0; t < PIPELINE_MAX_SHARDS; t++) c->shard_sizes[t] = 128; /* equal shards for any n_shards */
    c->shuffle = 1;
    c->min_after_dequeue = 20000;
    c->capacity = 0;
    c->num_epochs = 0;
    c->seed = 0;
    c->n_workers = 2;
    c->prefetch_batches = 0;
    c->alloc = host_alloc_default();
    c->skip_corrupt = 0;
    c->log_corrupt = 10;
    c->max_corrupt_fraction = IO_DEFAULT_MAX_CORRUPT_FRACTION;
    c->max_record_n_bytes = TFR_DEFAULT_MAX_RECORD_N_BYTES;
    c->drop_remainder = 1;
    c->skip_examples = 0;
}

void pipeline_split_shards(int n, int n_shards, const int *sizes, int *offset, int *count) {
    long B = 0;
    for (int t = 0; t < n_shards; t++) B += sizes[t];
    int assigned = 0;
    for (int t = 0; t < n_shards; t++) {
        count[t] = (n == B) ? sizes[t] : (int)((long)n * sizes[t] / (B ? B : 1));
        assigned += count[t];
    }
    for (int t = 0; assigned < n && n_shards > 0; t = (t + 1) % n_shards) {
        count[t]++;
        assigned++;
    }
    int off = 0;
    for (int t = 0; t < n_shards; t++) {
        offset[t] = off;
        off += count[t];
    }
}

/* ------------------------------------------------------------------ reader */

/* Records a fatal error: batches before the one being filled still go out. */
static void reader_fail(Pipeline *p, const char *msg) {
    pthread_mutex_lock(&p->mu);
    if (!p->failed) {
        p->failed = 1;
        p->fail_seq = p->fill_seq;
        snprintf(p->fail_msg, sizeof p->fail_msg, "%s", msg);
        escape_in_place(p->fail_msg, sizeof p->fail_msg); /* file names may hold any byte */
    }
    pthread_cond_broadcast(&p->cv_consumer);
    pthread_mutex_unlock(&p->mu);
}

/* Hands the pending work items to the workers.  Call with mu held. */
static void flush_pending_locked(Pipeline *p) {
    if (!p->n_pending) return;
    for (int i = 0; i < p->n_pending; i++) {
        int at = (p->work_head + p->work_count) % p->n_slots;
        p->work[at] = p->pending[i];
        p->work_count++;
    }
    if (p->n_pending > 1) pthread_cond_broadcast(&p->cv_work);
    else pthread_cond_signal(&p->cv_work);
    p->n_pending = 0;
}

static void flush_pending(Pipeline *p) {
    if (!p->n_pending) return;
    pthread_mutex_lock(&p->mu);
    flush_pending_locked(p);
    pthread_mutex_unlock(&p->mu);
}

/* A free slot for the next record, or -1 when stopping. */
static int take_slot(Pipeline *p) {
    if (p->n_slot_cache) return p->slot_cache[--p->n_slot_cache];
    pthread_mutex_lock(&p->mu);
    if (p->n_free == 0) flush_pending_locked(p);
    while (p->n_free == 0 && !p->stop) pthread_cond_wait(&p->cv_reader, &p->mu);
    int slot = -1;
    if (!p->stop) {
        while (p->n_free && p->n_slot_cache < PIPELINE_GROUP) p->slot_cache[p->n_slot_cache++] = p->free_slots[--p->n_free];
        slot = p->slot_cache[--p->n_slot_cache];
    }
    pthread_mutex_unlock(&p->mu);
    return slot;
}

static void put_slot_back(Pipeline *p, int slot) {
    if (p->n_slot_cache < PIPELINE_GROUP) {
        p->slot_cache[p->n_slot_cache++] = slot;
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->free_slots[p->n_free++] = slot;
    pthread_mutex_unlock(&p->mu);
}

/* Waits for the ring entry of batch seq and starts filling it.  -1 when stopping. */
static int start_batch(Pipeline *p, long seq, int n_target) {
    int idx = (int)(seq % p->P);
    RingEntry *e = &p->ring[idx];
    pthread_mutex_lock(&p->mu);
    if (e->state != RING_FREE) flush_pending_locked(p);
    while (e->state != RING_FREE && !p->stop) pthread_cond_wait(&p->cv_reader, &p->mu);
    int rc = p->stop ? -1 : 0;
    if (!rc) {
        e->state = RING_FILLING;
        e->seq = seq;
        e->n_target = n_target;
        e->n_done = 0;
        e->pub.n = n_target;
        e->pub.epoch = p->cur_epoch;
        e->pub.first_example = (long)p->g_next;
        pipeline_split_shards(n_target, p->cfg.n_shards, p->cfg.shard_sizes, e->pub.shard_offset, e->pub.shard_n);
        p->fill_ring = idx;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

/* The next example of the stream is in slot.  -1 when stopping. */
static int emit(Pipeline *p, int slot) {
    uint64_t g = p->g_next;
    if (g < (uint64_t)p->cfg.skip_examples) {
        p->g_next++;
        put_slot_back(p, slot);
        return 0;
    }
    if (p->fill_pos == 0 && start_batch(p, p->fill_seq, p->B) != 0) return -1;
    p->g_next++;
    WorkItem it = {slot, p->fill_ring, p->fill_pos, g};
    p->pending[p->n_pending++] = it;
    if (++p->fill_pos == p->B) {
        p->fill_pos = 0;
        p->fill_seq++;
        flush_pending(p);
    } else if (p->n_pending == PIPELINE_GROUP) {
        flush_pending(p);
    }
    return 0;
}

/* Emits a uniformly drawn element of the shuffle buffer. */
static int emit_random(Pipeline *p, uint64_t *rng) {
    long i = (long)rng_below(rng, (uint64_t)p->shuf_n);
    int slot = p->shuf[i];
    p->shuf[i] = p->shuf[--p->shuf_n];
    return emit(p, slot);
}

/* Checks a decoded record and copies image and label into slot.  0, or -1 with why. */
static int record_to_slot(Pipeline *p, const uint8_t *data, size_t n_bytes, int slot, char *why, size_t why_n) {
    const PipelineConfig *c = &p->cfg;
    const Tensorflow__Example *ex = example_decode(p->dec, data, n_bytes);
    if (!ex) {
        snprintf(why, why_n, "payload is not a tf.train.Example (protobuf parse error)");
        return -1;
    }
    const char *dim_keys[3] = {c->height_key, c->width_key, c->depth_key};
    const int dim_want[3] = {c->in_H, c->in_W, c->in_C};
    for (int k = 0; k < 3; k++) {
        if (!dim_keys[k] || !dim_keys[k][0] || !example_find(ex, dim_keys[k])) continue;
        int64_t v;
        if (example_get_int64(ex, dim_keys[k], &v, why, why_n) != 0) return -1;
        if (v != dim_want[k]) {
            snprintf(why, why_n, "feature '%s' is %lld but the image shape is %d x %d x %d", dim_keys[k], (long long)v,
                     c->in_H, c->in_W, c->in_C);
            return -1;
        }
    }
    uint8_t *dst = p->slot_data + (size_t)slot * p->slot_n_bytes;
    if (!c->image_float) {
        const uint8_t *img;
        size_t n;
        if (example_get_bytes(ex, c->image_key, &img, &n, why, why_n) != 0) return -1;
        if (n != p->in_n_values) {
            snprintf(why, why_n, "image '%s' has %zu bytes, expected %zu (%d x %d x %d)", c->image_key, n,
                     p->in_n_values, c->in_H, c->in_W, c->in_C);
            return -1;
        }
        memcpy(dst, img, n);
    } else {
        const float *img;
        size_t n;
        if (example_get_floats(ex, c->image_key, &img, &n, why, why_n) != 0) return -1;
        if (n != p->in_n_values) {
            snprintf(why, why_n, "image '%s' has %zu floats, expected %zu (%d x %d x %d)", c->image_key, n,
                     p->in_n_values, c->in_H, c->in_W, c->in_C);
            return -1;
        }
        memcpy(dst, img, n * sizeof(float));
    }
    int64_t label;
    if (example_get_int64(ex, c->label_key, &label, why, why_n) != 0) return -1;
    if (label < 0 || label >= c->num_classes) {
        snprintf(why, why_n, "label %lld outside [0, %d)", (long long)label, c->num_classes);
        return -1;
    }
    p->slot_label[slot] = (int32_t)label;
    return 0;
}

static void warn_line(const Pipeline *p, const char *line) {
    if (p->cfg.warn) p->cfg.warn(p->cfg.warn_ctx, line);
    else fprintf(stderr, "warning: %s\n", line);
}

/* A bad record (reader r, message msg): skip and count it, or stop the
 * pipeline.  Every epoch meets the same bad records, so each is counted as
 * a distinct record (and logged) once, in the first epoch that meets it,
 * and as skipped every time.  The bytes it made unreadable count against
 * max_corrupt_fraction of the input.  Returns 0 to go on, -1 to stop. */
static int bad_record(Pipeline *p, TfrReader *r, const char *msg) {
    if (!p->cfg.skip_corrupt) {
        reader_fail(p, msg);
        return -1;
    }
    uint64_t lost = tfr_reader_lost_n_bytes(r);
    pthread_mutex_lock(&p->mu);
    p->corrupt++;
    long n = ++p->epoch_corrupt;
    int is_new = n > p->corrupt_distinct;
    if (is_new) p->corrupt_distinct = n;
    p->epoch_lost_n_bytes += lost;
    if (p->epoch_lost_n_bytes > p->lost_n_bytes) p->lost_n_bytes = p->epoch_lost_n_bytes;
    uint64_t lost_total = p->epoch_lost_n_bytes, input = p->input_n_bytes;
    pthread_mutex_unlock(&p->mu);
    char line[900];
    if ((double)lost_total > p->cfg.max_corrupt_fraction * (double)input) {
        snprintf(line, sizeof line,
                 "%s; bad records made %llu of the %llu input bytes unreadable (%.3g%%), over max_corrupt_fraction %g",
                 msg, (unsigned long long)lost_total, (unsigned long long)input,
                 input ? 100.0 * (double)lost_total / (double)input : 100.0, p->cfg.max_corrupt_fraction);
        reader_fail(p, line);
        return -1;
    }
    if (is_new && n <= p->cfg.log_corrupt) {
        snprintf(line, sizeof line, "%s (skipped; %llu bytes of %s unreadable)", msg, (unsigned long long)lost,
                 tfr_reader_name(r));
        escape_in_place(line, sizeof line);
        warn_line(p, line);
    }
    if (is_new && n == p->cfg.log_corrupt + 1 && p->cfg.log_corrupt > 0)
        warn_line(p, "further bad records are skipped silently (counted in the statistics)");
    return 0;
}

/* Reads one epoch.  Returns the number of good records, or -1 to stop. */
static long read_epoch(Pipeline *p, long epoch) {
    const PipelineConfig *c = &p->cfg;
    int *order = malloc((size_t)p->n_files * sizeof *order);
    if (!order) {
        reader_fail(p, "out of memory");
        return -1;
    }
    for (int i = 0; i < p->n_files; i++) order[i] = i;
    if (c->shuffle) {
        uint64_t s = rng_seed(c->seed, RNG_STREAM_FILE_ORDER, (uint64_t)epoch);
        for (int i = p->n_files - 1; i > 0; i--) {
            int j = (int)rng_below(&s, (uint64_t)i + 1);
            int t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
    }
    uint64_t shuf_rng = rng_seed(c->seed, RNG_STREAM_SHUFFLE, (uint64_t)epoch);
    pthread_mutex_lock(&p->mu);
    p->epoch_corrupt = 0;
    p->epoch_lost_n_bytes = 0;
    pthread_mutex_unlock(&p->mu);
    long good = 0, capacity = c->capacity;
    char err[600], why[300];
    for (int k = 0; k < p->n_files; k++) {
        TfrReader *r = tfr_reader_open(p->files[order[k]], c->compression, c->max_record_n_bytes, err, sizeof err);
        if (!r) {
            reader_fail(p, err);
            good = -1;
            break;
        }
        for (;;) {
            if (p->stop) {
                good = -1;
                break;
            }
            const uint8_t *data;
            size_t n;
            int st = tfr_reader_next(r, &data, &n, err, sizeof err);
            if (st == TFR_END) break;
            if (st < 0) {
                if (bad_record(p, r, err) != 0) {
                    good = -1;
                    break;
                }
                if (st == TFR_BAD_STREAM) break;
                continue;
            }
            int slot = take_slot(p);
            if (slot < 0) {
                good = -1;
                break;
            }
            if (record_to_slot(p, data, n, slot, why, sizeof why) != 0) {
                put_slot_back(p, slot);
                snprintf(err, sizeof err, "%s: record %ld at offset %llu: %s", tfr_reader_name(r),
                         tfr_reader_record_index(r), (unsigned long long)tfr_reader_record_offset(r), why);
                if (bad_record(p, r, err) != 0) {
                    good = -1;
                    break;
                }
                continue;
            }
            good++;
            if (!c->shuffle) {
                if (emit(p, slot) != 0) {
                    good = -1;
                    break;
                }
                continue;
            }
            p->shuf[p->shuf_n++] = slot;
            if (p->shuf_n == capacity && emit_random(p, &shuf_rng) != 0) {
                good = -1;
                break;
            }
        }
        tfr_reader_close(r);
        if (good < 0) break;
    }
    free(order);
    while (good >= 0 && p->shuf_n > 0)
        if (emit_random(p, &shuf_rng) != 0) good = -1;
    return good;
}

static void *reader_main(void *arg) {
    Pipeline *p = arg;
    const PipelineConfig *c = &p->cfg;
    long start_epoch = 0;
    char err[600];
    int ok = 1;
    if (c->skip_examples > 0 && !c->skip_corrupt) {
        /* Skip whole epochs without reading them: their size is the record count. */
        long n = io_count_records((const char *const *)p->files, p->n_files, c->compression, err, sizeof err);
        if (n < 0) {
            reader_fail(p, err);
            ok = 0;
        } else if (n > 0) {
            start_epoch = c->skip_examples / n;
            if (c->num_epochs > 0 && start_epoch > c->num_epochs) start_epoch = c->num_epochs;
            p->g_next = (uint64_t)start_epoch * (uint64_t)n;
        }
    }
    for (long epoch = start_epoch; ok && (c->num_epochs == 0 || epoch < c->num_epochs); epoch++) {
        p->cur_epoch = epoch;
        long good = read_epoch(p, epoch);
        if (good < 0) {
            ok = 0;
        } else if (good == 0) {
            snprintf(err, sizeof err, "%s%s: no usable records in %d file(s)", p->files[0], p->n_files > 1 ? " ..." : "",
                     p->n_files);
            reader_fail(p, err);
            ok = 0;
        }
    }
    pthread_mutex_lock(&p->mu);
    if (ok && p->fill_pos > 0) {
        if (!c->drop_remainder) {
            /* The short last batch. */
            RingEntry *e = &p->ring[p->fill_ring];
            e->n_target = e->pub.n = p->fill_pos;
            pipeline_split_shards(p->fill_pos, c->n_shards, c->shard_sizes, e->pub.shard_offset, e->pub.shard_n);
            if (e->n_done == e->n_target) {
                e->state = RING_READY;
                p->produced += e->n_target;
                pthread_cond_broadcast(&p->cv_consumer);
            }
            p->fill_seq++;
        }
        p->fill_pos = 0;
    }
    flush_pending_locked(p);
    p->end_seq = p->fill_seq;
    p->reader_done = 1;
    pthread_cond_broadcast(&p->cv_consumer);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ------------------------------------------------------------------ workers */

static void augment_one(Pipeline *p, const WorkItem *it) {
    const PipelineConfig *c = &p->cfg;
    const uint8_t *src = p->slot_data + (size_t)it->slot * p->slot_n_bytes;
    RingEntry *e = &p->ring[it->ring];
    float *dst = e->pub.x + (size_t)it->pos * p->out_n_floats;
    AugmentParams ap;
    switch (c->augment) {
    case AUGMENT_CIFAR_TRAIN:
    case AUGMENT_CIFAR_EVAL:
        if (c->augment == AUGMENT_CIFAR_TRAIN)
            augment_draw_train(&ap, &c->augment_hparams, c->seed, it->g, c->in_H, c->in_W, c->out_H, c->out_W);
        else
            augment_params_eval(&ap, c->in_H, c->in_W, c->out_H, c->out_W);
        if (c->image_float) augment_cifar_f32(dst, (const float *)src, c->in_H, c->in_W, c->in_C, c->out_H, c->out_W, &ap);
        else augment_cifar_u8(dst, src, c->in_H, c->in_W, c->in_C, c->out_H, c->out_W, &ap);
        break;
    case AUGMENT_MNIST:
    case AUGMENT_NONE:
    default:
        if (c->image_float) memcpy(dst, src, p->in_n_values * sizeof(float));
        else if (c->augment == AUGMENT_MNIST) augment_mnist_u8(dst, src, p->in_n_values);
        else augment_none_u8(dst, src, p->in_n_values);
        break;
    }
    e->pub.labels[it->pos] = p->slot_label[it->slot];
}

static void *worker_main(void *arg) {
    Pipeline *p = arg;
    WorkItem items[PIPELINE_GROUP];
    int n_workers = p->cfg.n_workers;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->work_count == 0 && !p->stop) pthread_cond_wait(&p->cv_work, &p->mu);
        if (p->stop) break;
        /* Take a fair share so the other workers are not left idle. */
        int k = (p->work_count + n_workers - 1) / n_workers;
        if (k > PIPELINE_GROUP) k = PIPELINE_GROUP;
        for (int i = 0; i < k; i++) {
            items[i] = p->work[p->work_head];
            p->work_head = (p->work_head + 1) % p->n_slots;
            p->work_count--;
        }
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < k; i++) augment_one(p, &items[i]);
        pthread_mutex_lock(&p->mu);
        int ready = 0;
        for (int i = 0; i < k; i++) {
            p->free_slots[p->n_free++] = items[i].slot;
            RingEntry *e = &p->ring[items[i].ring];
            if (++e->n_done == e->n_target && e->state == RING_FILLING) {
                e->state = RING_READY;
                p->produced += e->n_target;
                ready = 1;
            }
        }
        pthread_cond_signal(&p->cv_reader);
        if (ready) pthread_cond_broadcast(&p->cv_consumer);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ------------------------------------------------------------------ public */

/* The sizes pipeline_open derives from a (checked) configuration. */
typedef struct {
    int B;                /* global batch */
    long capacity;        /* shuffle buffer (0 without shuffle) */
    long n_slots;         /* decoded examples in flight: the shuffle buffer, two batches, the groups in transit */
    int P;                /* staging buffers */
    size_t in_n_values;   /* in_H * in_W * in_C */
    size_t slot_n_bytes;  /* one decoded image, rounded up to 64 bytes */
    size_t out_n_floats;  /* out_H * out_W * in_C */
} PipelineSizes;

static void plan_sizes(const PipelineConfig *c, PipelineSizes *z) {
    z->B = 0;
    for (int t = 0; t < c->n_shards; t++) z->B += c->shard_sizes[t];
    z->capacity = !c->shuffle ? 0 : c->capacity ? c->capacity : c->min_after_dequeue + 3L * z->B;
    z->n_slots = z->capacity + 2L * z->B + 2L * PIPELINE_GROUP * (c->n_workers + 1);
    z->P = c->prefetch_batches < 2 * c->n_shards ? 2 * c->n_shards : c->prefetch_batches;
    z->in_n_values = (size_t)c->in_H * (size_t)c->in_W * (size_t)c->in_C;
    z->slot_n_bytes = z->in_n_values * (c->image_float ? sizeof(float) : 1);
    z->slot_n_bytes = (z->slot_n_bytes + 63) / 64 * 64;
    z->out_n_floats = (size_t)c->out_H * (size_t)c->out_W * (size_t)c->in_C;
}

static size_t round_up_pages(size_t n_bytes) { return (n_bytes + 4095) / 4096 * 4096; }

size_t pipeline_max_n_bytes(const PipelineConfig *cfg, size_t record_n_bytes, PipelineMemory *m) {
    PipelineMemory local;
    if (!m) m = &local;
    memset(m, 0, sizeof *m);
    PipelineSizes z;
    plan_sizes(cfg, &z);
    const size_t n_slots = (size_t)z.n_slots;
    m->capacity = z.capacity;
    m->n_slots = z.n_slots;
    m->prefetch_batches = z.P;
    m->slot_n_bytes = z.slot_n_bytes;
    /* slot_data, slot_label, free_slots, work */
    m->slots_n_bytes = n_slots * (z.slot_n_bytes + sizeof(int32_t) + sizeof(int) + sizeof(WorkItem));
    m->shuffle_n_bytes = (size_t)(z.capacity > 0 ? z.capacity : 1) * sizeof(int);
    /* Each staging buffer is zeroed by cfg->alloc (all its pages resident). */
    m->staging_n_bytes = (size_t)z.P * (round_up_pages((size_t)z.B * z.out_n_floats * sizeof(float)) +
                                        round_up_pages((size_t)z.B * sizeof(int32_t)) + sizeof(RingEntry));
    const size_t max_record = cfg->max_record_n_bytes ? cfg->max_record_n_bytes : TFR_DEFAULT_MAX_RECORD_N_BYTES;
    const size_t record = record_n_bytes && record_n_bytes < max_record ? record_n_bytes : max_record;
    /* One reader is open at a time (pipeline_open checks the files one after another). */
    m->reader_n_bytes = tfr_reader_max_n_bytes(cfg->compression, record, max_record) + example_decoder_max_n_bytes(record);
    size_t names_n_bytes = 0;
    for (int i = 0; cfg->files && i < cfg->n_files; i++)
        names_n_bytes += sizeof(char *) + (cfg->files[i] ? strlen(cfg->files[i]) + 1 : 0);
    /* The reader's and the workers' stacks and their malloc arenas' slack;
     * the workers need no heap scratch (they augment straight into the
     * staging buffer). */
    m->threads_n_bytes = (size_t)(1 + cfg->n_workers) * (PIPELINE_THREAD_N_BYTES + sizeof(pthread_t)) + sizeof(Pipeline) +
                         names_n_bytes + (size_t)cfg->n_files * sizeof(int);
    m->total_n_bytes = m->slots_n_bytes + m->shuffle_n_bytes + m->staging_n_bytes + m->reader_n_bytes + m->threads_n_bytes;
    return m->total_n_bytes;
}


static int check_config(const PipelineConfig *c, char *err, size_t err_n) {
#define BAD(...) do { snprintf(err, err_n, __VA_ARGS__); return -1; } while (0)
    if (!c->files || c->n_files < 1) BAD("pipeline: no input files");
    if (!c->image_key || !c->image_key[0] || !c->label_key || !c->label_key[0]) BAD("pipeline: image_key and label_key must be set");
    if (c->compression < IO_COMPRESSION_AUTO || c->compression > IO_COMPRESSION_ZLIB) BAD("pipeline: unknown compression %d", c->compression);
    if (c->in_H < 1 || c->in_W < 1 || c->in_C < 1 || c->in_H > 65536 || c->in_W > 65536 || c->in_C > 16)
        BAD("pipeline: bad image shape %d x %d x %d (channels at most 16)", c->in_H, c->in_W, c->in_C);
    if (c->out_H < 1 || c->out_W < 1 || c->out_H > c->in_H || c->out_W > c->in_W)
        BAD("pipeline: output %d x %d does not fit in the image %d x %d", c->out_H, c->out_W, c->in_H, c->in_W);
    if ((c->augment == AUGMENT_NONE || c->augment == AUGMENT_MNIST) && (c->out_H != c->in_H || c->out_W != c->in_W))
        BAD("pipeline: augment none/mnist does not crop: output must equal the image size %d x %d", c->in_H, c->in_W);
    if (c->augment < AUGMENT_NONE || c->augment > AUGMENT_CIFAR_EVAL) BAD("pipeline: unknown augment kind %d", (int)c->augment);
    if (c->augment == AUGMENT_CIFAR_TRAIN &&
        (c->augment_hparams.contrast_lower > c->augment_hparams.contrast_upper || c->augment_hparams.max_brightness_delta < 0))
        BAD("pipeline: bad augmentation ranges");
    if (c->num_classes < 1) BAD("pipeline: num_classes must be at least 1");
    if (!(c->max_corrupt_fraction >= 0 && c->max_corrupt_fraction <= 1))
        BAD("pipeline: max_corrupt_fraction %g outside [0, 1]", c->max_corrupt_fraction);
    if (c->n_shards < 1 || c->n_shards > PIPELINE_MAX_SHARDS) BAD("pipeline: n_shards %d outside [1, %d]", c->n_shards, PIPELINE_MAX_SHARDS);
    long B = 0;
    for (int t = 0; t < c->n_shards; t++) {
        if (c->shard_sizes[t] < 1) BAD("pipeline: shard %d has size %d (must be at least 1)", t, c->shard_sizes[t]);
        B += c->shard_sizes[t];
    }
    if (B > (1L << 24)) BAD("pipeline: global batch %ld is too large", B);
    if (c->shuffle && c->min_after_dequeue < 0) BAD("pipeline: min_after_dequeue must be >= 0");
    if (c->shuffle && c->capacity != 0 && c->capacity <= c->min_after_dequeue)
        BAD("pipeline: capacity %ld must exceed min_after_dequeue %ld", c->capacity, c->min_after_dequeue);
    if (c->num_epochs < 0) BAD("pipeline: num_epochs must be >= 0 (0 = forever)");
    if (c->n_workers < 1 || c->n_workers > 256) BAD("pipeline: n_workers %d outside [1, 256]", c->n_workers);
    if (c->skip_examples < 0) BAD("pipeline: skip_examples must be >= 0");
    if (c->alloc.alloc && !c->alloc.free) BAD("pipeline: the allocator has no free function");
#undef BAD
    return 0;
}

Pipeline *pipeline_open(const PipelineConfig *cfg, char *err, size_t err_n) {
    if (check_config(cfg, err, err_n) != 0) return NULL;
    Pipeline *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, err_n, "pipeline: out of memory");
        return NULL;
    }
    p->cfg = *cfg;
    PipelineConfig *c = &p->cfg;
    if (!c->alloc.alloc) c->alloc = host_alloc_default();
    if (!c->max_record_n_bytes) c->max_record_n_bytes = TFR_DEFAULT_MAX_RECORD_N_BYTES;
    if (!c->height_key) c->height_key = "";
    if (!c->width_key) c->width_key = "";
    if (!c->depth_key) c->depth_key = "";
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_reader, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_consumer, NULL);
    clock_gettime(CLOCK_MONOTONIC, &p->t_open);

    p->n_files = c->n_files;
    p->files = calloc((size_t)c->n_files, sizeof *p->files);
    if (!p->files) goto oom;
    for (int i = 0; i < c->n_files; i++) {
        if (!c->files[i] || !(p->files[i] = strdup(c->files[i]))) goto oom;
        TfrReader *r = tfr_reader_open(p->files[i], c->compression, c->max_record_n_bytes, err, err_n);
        if (!r) goto fail;
        p->input_n_bytes += tfr_reader_file_n_bytes(r);
        tfr_reader_close(r);
    }
    c->files = (const char *const *)p->files;

    PipelineSizes z;
    plan_sizes(c, &z);
    p->B = z.B;
    c->capacity = z.capacity;
    c->prefetch_batches = z.P;
    p->in_n_values = z.in_n_values;
    p->slot_n_bytes = z.slot_n_bytes;
    p->out_n_floats = z.out_n_floats;
    if (z.n_slots > (1L << 28)) {
        snprintf(err, err_n, "pipeline: shuffle capacity %ld is too large", c->capacity);
        goto fail;
    }
    p->n_slots = (int)z.n_slots;
    p->slot_data = malloc((size_t)p->n_slots * p->slot_n_bytes);
    p->slot_label = malloc((size_t)p->n_slots * sizeof *p->slot_label);
    p->free_slots = malloc((size_t)p->n_slots * sizeof *p->free_slots);
    p->work = malloc((size_t)p->n_slots * sizeof *p->work);
    p->shuf = malloc((size_t)(c->capacity > 0 ? c->capacity : 1) * sizeof *p->shuf);
    if (!p->slot_data || !p->slot_label || !p->free_slots || !p->work || !p->shuf) goto oom;
    for (int i = 0; i < p->n_slots; i++) p->free_slots[i] = p->n_slots - 1 - i;
    p->n_free = p->n_slots;

    p->P = c->prefetch_batches;
    p->ring = calloc((size_t)p->P, sizeof *p->ring);
    if (!p->ring) goto oom;
    for (int i = 0; i < p->P; i++) {
        PipelineBatch *b = &p->ring[i].pub;
        b->x = c->alloc.alloc((size_t)p->B * p->out_n_floats * sizeof(float), c->alloc.ctx);
        b->labels = c->alloc.alloc((size_t)p->B * sizeof(int32_t), c->alloc.ctx);
        b->example_n_floats = p->out_n_floats;
        if (!b->x || !b->labels) {
            snprintf(err, err_n, "pipeline: cannot allocate %d staging buffers of %zu bytes from %s", p->P,
                     (size_t)p->B * p->out_n_floats * sizeof(float), c->alloc.kind ? c->alloc.kind : "the allocator");
            goto fail;
        }
    }
    p->dec = example_decoder_new();
    p->workers = calloc((size_t)c->n_workers, sizeof *p->workers);
    if (!p->dec || !p->workers) goto oom;
    for (int i = 0; i < c->n_workers; i++) {
        if (pthread_create(&p->workers[i], NULL, worker_main, p) != 0) {
            snprintf(err, err_n, "pipeline: cannot start worker thread %d", i);
            goto fail;
        }
        p->n_workers_started++;
    }
    if (pthread_create(&p->reader, NULL, reader_main, p) != 0) {
        snprintf(err, err_n, "pipeline: cannot start the reader thread");
        goto fail;
    }
    p->reader_started = 1;
    return p;
oom:
    snprintf(err, err_n, "pipeline: out of memory");
fail:
    pipeline_close(p);
    return NULL;
}

int pipeline_next(Pipeline *p, PipelineBatch **out, char *err, size_t err_n) {
    *out = NULL;
    pthread_mutex_lock(&p->mu);
    int ready = 0;
    for (int i = 0; i < p->P; i++) ready += p->ring[i].state == RING_READY;
    p->n_next_calls++;
    p->fill_sum += (double)ready / (double)p->P;
    double t0 = 0.0;
    int waited = 0, rc;
    for (;;) {
        RingEntry *e = &p->ring[p->deliver_seq % p->P];
        if (e->state == RING_READY && e->seq == p->deliver_seq) {
            e->state = RING_OUT;
            p->deliver_seq++;
            p->delivered++;
            *out = &e->pub;
            rc = 1;
            break;
        }
        if (p->failed && p->deliver_seq >= p->fail_seq) {
            snprintf(err, err_n, "%s", p->fail_msg);
            rc = -1;
            break;
        }
        if (p->reader_done && p->deliver_seq >= p->end_seq) {
            rc = 0;
            break;
        }
        if (!waited) {
            t0 = now_sec();
            waited = 1;
        }
        pthread_cond_wait(&p->cv_consumer, &p->mu);
    }
    if (waited) p->wait_sec += now_sec() - t0;
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void pipeline_release(Pipeline *p, PipelineBatch *b) {
    if (!b) return;
    RingEntry *e = (RingEntry *)((char *)b - offsetof(RingEntry, pub));
    pthread_mutex_lock(&p->mu);
    if (e >= p->ring && e < p->ring + p->P && e->state == RING_OUT) {
        e->state = RING_FREE;
        pthread_cond_broadcast(&p->cv_reader);
    }
    pthread_mutex_unlock(&p->mu);
}

void pipeline_stats(Pipeline *p, PipelineStats *s) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double elapsed = (double)(t.tv_sec - p->t_open.tv_sec) + 1e-9 * (double)(t.tv_nsec - p->t_open.tv_nsec);
    pthread_mutex_lock(&p->mu);
    s->examples_produced = p->produced;
    s->examples_per_sec = elapsed > 0 ? (double)p->produced / elapsed : 0.0;
    s->queue_fill = p->n_next_calls ? p->fill_sum / (double)p->n_next_calls : 0.0;
    s->consumer_wait_sec = p->wait_sec;
    s->corrupt_skipped = p->corrupt;
    s->corrupt_distinct = p->corrupt_distinct;
    s->corrupt_lost_n_bytes = p->lost_n_bytes;
    s->input_n_bytes = p->input_n_bytes;
    s->batches_delivered = p->delivered;
    s->prefetch_batches = p->P;
    pthread_mutex_unlock(&p->mu);
}

void pipeline_close(Pipeline *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv_reader);
    pthread_cond_broadcast(&p->cv_work);
    pthread_cond_broadcast(&p->cv_consumer);
    pthread_mutex_unlock(&p->mu);
    if (p->reader_started) pthread_join(p->reader, NULL);
    for (int i = 0; i < p->n_workers_started; i++) pthread_join(p->workers[i], NULL);
    if (p->ring) {
        for (int i = 0; i < p->P; i++) {
            if (p->ring[i].pub.x) p->cfg.alloc.free(p->ring[i].pub.x, p->cfg.alloc.ctx);
            if (p->ring[i].pub.labels) p->cfg.alloc.free(p->ring[i].pub.labels, p->cfg.alloc.ctx);
        }
    }
    free(p->ring);
    io_free_files(p->files, p->n_files);
    free(p->slot_data);
    free(p->slot_label);
    free(p->free_slots);
    free(p->work);
    free(p->shuf);
    free(p->workers);
    example_decoder_free(p->dec);
    pthread_cond_destroy(&p->cv_reader);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_consumer);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
