/* pipeline.c — the input pipeline's threads and its shuffle/batch machinery (see pipeline.h).
 *
 * Where it sits: io -> shards.  Data path for one example:
 *   reader thread: the source (io/pipeline_source.h) fills a free slot with
 *     a decoded image and its label — TFRecord: TfrReader -> verify CRCs ->
 *     decode Example -> check keys, shape, label, in the reader; image
 *     folder: a WORK_DECODE item, decoded and resized by a worker, collected
 *     in order -> pipeline_accept: shuffle buffer ->
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
#include "io/imagefolder.h"
#include "io/pipeline_source.h"

#include <errno.h>
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
    c->image_dir = NULL;
    c->labels_file = NULL;
    c->resize_mode = 0;
    c->short_side = 0;
    c->jpeg_scaled = 1;
    c->max_image_pixels = PIPELINE_DEFAULT_MAX_IMAGE_PIXELS;
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
void pipeline_fail(Pipeline *p, const char *msg) {
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
int pipeline_take_slot(Pipeline *p) {
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

void pipeline_put_slot_back(Pipeline *p, int slot) {
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
        pipeline_put_slot_back(p, slot);
        return 0;
    }
    if (p->fill_pos == 0 && start_batch(p, p->fill_seq, p->B) != 0) return -1;
    p->g_next++;
    WorkItem it = {WORK_AUGMENT, slot, p->fill_ring, p->fill_pos, 0, g};
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
static int emit_random(Pipeline *p) {
    long i = (long)rng_below(&p->shuf_rng, (uint64_t)p->shuf_n);
    int slot = p->shuf[i];
    p->shuf[i] = p->shuf[--p->shuf_n];
    return emit(p, slot);
}

int pipeline_accept(Pipeline *p, int slot) {
    if (!p->cfg.shuffle) return emit(p, slot);
    p->shuf[p->shuf_n++] = slot;
    return p->shuf_n == p->cfg.capacity ? emit_random(p) : 0;
}

void pipeline_order(const Pipeline *p, long epoch, long *order, long n) {
    for (long i = 0; i < n; i++) order[i] = i;
    if (!p->cfg.shuffle) return;
    uint64_t s = rng_seed(p->cfg.seed, RNG_STREAM_FILE_ORDER, (uint64_t)epoch);
    for (long i = n - 1; i > 0; i--) {
        long j = (long)rng_below(&s, (uint64_t)i + 1);
        long t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

static void pipeline_damaged(Pipeline *p, const char *msg);

/* The oldest example in the window, once its worker is done, to the shuffle buffer (or as bad to pipeline_bad).
 * 0, or -1 to stop. */
static int decode_collect_one(Pipeline *p, PipelineDecodeStream *s) {
    DecodeEntry *d = &p->win[s->collected % p->win_n];
    pthread_mutex_lock(&p->mu);
    flush_pending_locked(p);
    while (d->state == 0 && !p->stop) pthread_cond_wait(&p->cv_reader, &p->mu);
    const int state = d->state;
    pthread_mutex_unlock(&p->mu);
    if (p->stop) return -1;
    s->collected++;
    if (state > 0) {
        s->good++;
        if (d->why[0]) pipeline_damaged(p, d->why);
        return pipeline_accept(p, d->slot);
    }
    pipeline_put_slot_back(p, d->slot);
    if (state == -2) { /* not the data's fault: no skipping it as corrupt */
        char msg[PIPELINE_MSG_N_BYTES + 96];
        snprintf(msg, sizeof msg, "%s" IMAGEFOLDER_SYSTEM_FAULT, d->why);
        pipeline_fail(p, msg);
        return -1;
    }
    return pipeline_bad(p, d->why, d->lost_n_bytes, d->where);
}

int pipeline_decode_reserve(Pipeline *p, PipelineDecodeStream *s, int *slot) {
    while (s->dispatched - s->collected >= p->win_n)
        if (decode_collect_one(p, s) != 0) return -1;
    if ((*slot = pipeline_take_slot(p)) < 0) return -1;
    return (int)(s->dispatched % p->win_n);
}

void pipeline_decode_dispatch(Pipeline *p, PipelineDecodeStream *s, long item, int slot, const char *where) {
    const int w = (int)(s->dispatched % p->win_n);
    DecodeEntry *d = &p->win[w];
    d->item = item;
    d->slot = slot;
    d->state = 0;
    d->where = where;
    WorkItem it = {WORK_DECODE, slot, 0, 0, w, 0};
    p->pending[p->n_pending++] = it;
    if (p->n_pending == PIPELINE_GROUP) flush_pending(p);
    s->dispatched++;
}

long pipeline_decode_drain(Pipeline *p, PipelineDecodeStream *s) {
    while (s->collected < s->dispatched)
        if (decode_collect_one(p, s) != 0) return -1;
    return s->good;
}

long pipeline_decode_in_workers(Pipeline *p, const long *items, long n) {
    PipelineDecodeStream s = {0, 0, 0};
    for (long i = 0; i < n; i++) {
        int slot;
        if (pipeline_decode_reserve(p, &s, &slot) < 0) return -1;
        pipeline_decode_dispatch(p, &s, items[i], slot, NULL);
    }
    return pipeline_decode_drain(p, &s);
}

static void warn_line(const Pipeline *p, const char *line) {
    if (p->cfg.warn) p->cfg.warn(p->cfg.warn_ctx, line);
    else {
        char safe[PIPELINE_ERR_N_BYTES + 512];
        fprintf(stderr, "warning: %s\n", escape_str(safe, sizeof safe, line));
    }
}

/* Counts one more of a kind this epoch (*epoch_n) against the most any epoch met (*distinct): every epoch meets the
 * same ones, so the n-th is new, a distinct one, only in the first epoch that gets that far.  Under mu.  Returns
 * n when it is new, else 0. */
static long count_distinct_locked(long *epoch_n, long *distinct) {
    const long n = ++*epoch_n;
    if (n <= *distinct) return 0;
    *distinct = n;
    return n;
}

/* The warning for the n-th distinct one of a kind (0: not new, nothing): the first log_corrupt get their line
 * (escaped in place), the next one `further`, saying the rest go silent. */
static void warn_distinct(const Pipeline *p, long n, char *line, size_t line_n_bytes, const char *further) {
    if (n <= 0) return;
    if (n <= p->cfg.log_corrupt) {
        escape_in_place(line, line_n_bytes);
        warn_line(p, line);
    } else if (n == p->cfg.log_corrupt + 1 && p->cfg.log_corrupt > 0) {
        warn_line(p, further);
    }
}

/* A bad record (reader r, message msg): skip and count it, or stop the
 * pipeline.  Every epoch meets the same bad records, so each is counted as
 * a distinct record (and logged) once, in the first epoch that meets it,
 * and as skipped every time.  The bytes it made unreadable count against
 * max_corrupt_fraction of the input.  Returns 0 to go on, -1 to stop. */
int pipeline_bad(Pipeline *p, const char *msg, uint64_t lost, const char *where) {
    if (!p->cfg.skip_corrupt) {
        pipeline_fail(p, msg);
        return -1;
    }
    pthread_mutex_lock(&p->mu);
    p->corrupt++;
    const long n_new = count_distinct_locked(&p->epoch_corrupt, &p->corrupt_distinct);
    p->epoch_lost_n_bytes += lost;
    if (p->epoch_lost_n_bytes > p->lost_n_bytes) p->lost_n_bytes = p->epoch_lost_n_bytes;
    uint64_t lost_total = p->epoch_lost_n_bytes, input = p->input_n_bytes;
    pthread_mutex_unlock(&p->mu);
    char line[PIPELINE_ERR_N_BYTES + 512]; /* msg, the file again, and room to escape them */
    if ((double)lost_total > p->cfg.max_corrupt_fraction * (double)input) {
        snprintf(line, sizeof line,
                 "%s; bad records made %llu of the %llu input bytes unreadable (%.3g%%), over max_corrupt_fraction %g",
                 msg, (unsigned long long)lost_total, (unsigned long long)input,
                 input ? 100.0 * (double)lost_total / (double)input : 100.0, p->cfg.max_corrupt_fraction);
        pipeline_fail(p, line);
        return -1;
    }
    if (!n_new) return 0; /* met in an earlier epoch: counted, not warned about again */
    if (where)
        snprintf(line, sizeof line, "%s (skipped; %llu bytes of %s unreadable)", msg, (unsigned long long)lost, where);
    else
        snprintf(line, sizeof line, "%s (skipped)", msg);
    warn_distinct(p, n_new, line, sizeof line, "further bad records are skipped silently (counted in the statistics)");
    return 0;
}

/* A good example that came with a warning (an image kept though libjpeg found its data damaged): warned about
 * once, in the first epoch that meets it (each epoch meets the same ones, as pipeline_bad counts them), the
 * first log_corrupt of them, escaped; counted in stats.images_damaged.  Reader thread. */
static void pipeline_damaged(Pipeline *p, const char *msg) {
    pthread_mutex_lock(&p->mu);
    const long n_new = count_distinct_locked(&p->epoch_damaged, &p->damaged_distinct);
    pthread_mutex_unlock(&p->mu);
    if (!n_new) return; /* met in an earlier epoch */
    char line[PIPELINE_ERR_N_BYTES];
    snprintf(line, sizeof line, "%s", msg);
    warn_distinct(p, n_new, line, sizeof line,
                  "further images decoded from damaged data are kept without a warning (counted in the statistics)");
}

/* One epoch from the source, then the shuffle buffer drained (epochs never
 * mix).  The number of good examples, or -1 to stop. */
static long run_epoch(Pipeline *p, long epoch) {
    p->shuf_rng = rng_seed(p->cfg.seed, RNG_STREAM_SHUFFLE, (uint64_t)epoch);
    pthread_mutex_lock(&p->mu);
    p->epoch_corrupt = 0;
    p->epoch_damaged = 0;
    p->epoch_lost_n_bytes = 0;
    pthread_mutex_unlock(&p->mu);
    long good = p->src->read_epoch(p, epoch);
    while (good >= 0 && p->shuf_n > 0)
        if (emit_random(p) != 0) good = -1;
    return good;
}

static void *reader_main(void *arg) {
    Pipeline *p = arg;
    const PipelineConfig *c = &p->cfg;
    long start_epoch = 0;
    char err[PIPELINE_MSG_N_BYTES];
    int ok = 1;
    if (c->skip_examples > 0 && !c->skip_corrupt) {
        /* Skip whole epochs without reading them: their size is the source's count. */
        long n = p->src->count(p, err, sizeof err);
        if (n < 0) {
            pipeline_fail(p, err);
            ok = 0;
        } else if (n > 0) {
            start_epoch = c->skip_examples / n;
            if (c->num_epochs > 0 && start_epoch > c->num_epochs) start_epoch = c->num_epochs;
            p->g_next = (uint64_t)start_epoch * (uint64_t)n;
        }
    }
    for (long epoch = start_epoch; ok && (c->num_epochs == 0 || epoch < c->num_epochs); epoch++) {
        p->cur_epoch = epoch;
        long good = run_epoch(p, epoch);
        if (good < 0) {
            ok = 0;
        } else if (good == 0) {
            pipeline_fail(p, p->no_data_msg);
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

/* A WORK_DECODE item: the source decodes into the slot; the result goes to
 * the window entry (its state under mu, by the caller). */
static int decode_one(Pipeline *p, int worker, const WorkItem *it) {
    DecodeEntry *d = &p->win[it->win];
    d->lost_n_bytes = 0;
    d->why[0] = '\0';
    errno = 0;
    int rc = p->src->decode(p, worker, d->item, it->slot, d->why, sizeof d->why, &d->lost_n_bytes);
    return rc == 0 ? 1 : imagefolder_failed_for_system(errno) ? -2 : -1;
}

typedef struct {
    Pipeline *p;
    int id;
} WorkerArg;

static void *worker_main(void *arg) {
    Pipeline *p = ((WorkerArg *)arg)->p;
    const int worker = ((WorkerArg *)arg)->id;
    WorkItem items[PIPELINE_GROUP];
    int results[PIPELINE_GROUP];
    int n_workers = p->cfg.n_workers;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->work_count == 0 && !p->stop) pthread_cond_wait(&p->cv_work, &p->mu);
        if (p->stop) break;
        /* Take a fair share so the other workers are not left idle.  A decode item (milliseconds of
         * work, which the reader collects in order) ends the group, so that it is reported at once. */
        int want = (p->work_count + n_workers - 1) / n_workers, k = 0;
        if (want > PIPELINE_GROUP) want = PIPELINE_GROUP;
        while (k < want) {
            items[k] = p->work[p->work_head];
            p->work_head = (p->work_head + 1) % p->n_slots;
            p->work_count--;
            if (items[k++].kind == WORK_DECODE) break;
        }
        pthread_mutex_unlock(&p->mu);
        int decoded = 0;
        for (int i = 0; i < k; i++) {
            if (items[i].kind == WORK_DECODE) {
                results[i] = decode_one(p, worker, &items[i]);
                decoded = 1;
            } else {
                augment_one(p, &items[i]);
            }
        }
        pthread_mutex_lock(&p->mu);
        int ready = 0;
        for (int i = 0; i < k; i++) {
            if (items[i].kind == WORK_DECODE) {
                p->win[items[i].win].state = results[i]; /* the slot stays the reader's */
                continue;
            }
            p->free_slots[p->n_free++] = items[i].slot;
            RingEntry *e = &p->ring[items[i].ring];
            if (++e->n_done == e->n_target && e->state == RING_FILLING) {
                e->state = RING_READY;
                p->produced += e->n_target;
                ready = 1;
            }
        }
        if (decoded) pthread_cond_broadcast(&p->cv_reader);
        else pthread_cond_signal(&p->cv_reader);
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
    long n_slots;         /* decoded examples in flight: the shuffle buffer, two batches, the groups in transit, the decode window */
    int win_n;            /* decode window (sources that decode in the workers; 0 otherwise) */
    int P;                /* staging buffers */
    size_t in_n_values;   /* in_H * in_W * in_C */
    size_t slot_n_bytes;  /* one decoded image, rounded up to 64 bytes */
    size_t out_n_floats;  /* out_H * out_W * in_C */
} PipelineSizes;

static const PipelineSourceI *source_of(const PipelineConfig *c) {
    return c->image_dir ? &pipeline_source_imagefolder
           : c->image_encoded ? &pipeline_source_tfrecord_encoded
                              : &pipeline_source_tfrecord;
}

static void plan_sizes(const PipelineConfig *c, PipelineSizes *z) {
    z->win_n = source_of(c)->decode_window * c->n_workers;
    z->B = 0;
    for (int t = 0; t < c->n_shards; t++) z->B += c->shard_sizes[t];
    z->capacity = !c->shuffle ? 0 : c->capacity ? c->capacity : c->min_after_dequeue + 3L * z->B;
    z->n_slots = z->capacity + 2L * z->B + 2L * PIPELINE_GROUP * (c->n_workers + 1) + z->win_n;
    z->P = c->prefetch_batches < 2 * c->n_shards ? 2 * c->n_shards : c->prefetch_batches;
    z->in_n_values = (size_t)c->in_H * (size_t)c->in_W * (size_t)c->in_C;
    z->slot_n_bytes = z->in_n_values * (c->image_float ? sizeof(float) : 1);
    z->slot_n_bytes = (z->slot_n_bytes + 63) / 64 * 64;
    z->out_n_floats = (size_t)c->out_H * (size_t)c->out_W * (size_t)c->in_C;
}

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
    /* Each staging buffer is zero (all its pages resident once written), with the page the default allocator
     * keeps before it (base/host_alloc.c). */
    m->staging_n_bytes = (size_t)z.P * (host_alloc_page_aligned_n_bytes((size_t)z.B * z.out_n_floats * sizeof(float)) +
                                        host_alloc_page_aligned_n_bytes((size_t)z.B * sizeof(int32_t)) + sizeof(RingEntry));
    /* The source: what its reader holds (TFRecord: one open reader and the
     * Example decoder, the file names; image folder: the listing and the
     * epoch's order), and the workers' decode scratch (image folder). */
    source_of(cfg)->max_n_bytes(cfg, record_n_bytes, &m->reader_n_bytes, &m->workers_n_bytes);
    m->slots_n_bytes += (size_t)z.win_n * sizeof(DecodeEntry);
    /* The reader's and the workers' stacks and their malloc arenas' slack
     * (augmenting needs no heap scratch: it writes straight into the
     * staging buffer). */
    m->threads_n_bytes = (size_t)(1 + cfg->n_workers) * (PIPELINE_THREAD_N_BYTES + sizeof(pthread_t) + sizeof(int)) +
                         sizeof(Pipeline);
    m->total_n_bytes = m->slots_n_bytes + m->shuffle_n_bytes + m->staging_n_bytes + m->reader_n_bytes +
                       m->workers_n_bytes + m->threads_n_bytes;
    return m->total_n_bytes;
}


static int check_config(const PipelineConfig *c, char *err, size_t err_n) {
#define BAD(...) do { snprintf(err, err_n, __VA_ARGS__); return -1; } while (0)
    if (!c->image_dir && (!c->files || c->n_files < 1)) BAD("pipeline: no input files");
    if (c->image_dir && c->image_encoded) BAD("pipeline: an image folder or encoded TFRecords, not both");
    if (c->image_dir || c->image_encoded) {
        if (c->in_H != c->in_W || c->in_H > 4096 || (c->in_C != 1 && c->in_C != 3) || c->image_float)
            BAD("pipeline: %s decodes to square uint8 images of at most 4096 pixels a side, 1 or 3 channels, not "
                "%d x %d x %d%s", c->image_dir ? "an image folder" : "encoded TFRecords", c->in_H, c->in_W, c->in_C,
                c->image_float ? " floats" : "");
        if (c->resize_mode < 0 || c->resize_mode > 2) BAD("pipeline: unknown resize mode %d", c->resize_mode);
        if (!imagefolder_short_side_valid((ImageFolderResizeMode)c->resize_mode, c->short_side, c->in_H))
            BAD("pipeline: a shorter side of %d before the crop needs the center crop and at least the image size %d",
                c->short_side, c->in_H);
        if (c->max_image_pixels < (size_t)c->in_H * (size_t)c->in_W * 2)
            BAD("pipeline: max_image_pixels %zu is below twice the image size %d x %d", c->max_image_pixels, c->in_H,
                c->in_W);
    }
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
    if (c->n_workers < 1 || c->n_workers > PIPELINE_MAX_WORKERS)
        BAD("pipeline: n_workers %d outside [1, %d]", c->n_workers, PIPELINE_MAX_WORKERS);
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

    p->src = source_of(c);
    if (p->src->open(p, err, err_n) != 0) goto fail;

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
    p->win_n = z.win_n;
    if (p->win_n > 0 && !(p->win = calloc((size_t)p->win_n, sizeof *p->win))) goto oom;
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
    p->workers = calloc((size_t)c->n_workers, sizeof *p->workers);
    WorkerArg *args = calloc((size_t)c->n_workers, sizeof *args);
    p->worker_args = args;
    if (!p->workers || !args) goto oom;
    for (int i = 0; i < c->n_workers; i++) {
        args[i].p = p;
        args[i].id = i;
        if (pthread_create(&p->workers[i], NULL, worker_main, &args[i]) != 0) {
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
    s->images_decoded = atomic_load(&p->images_decoded);
    s->images_scaled = atomic_load(&p->images_scaled);
    s->images_damaged = p->damaged_distinct;
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
    if (p->src && p->src->close) p->src->close(p);
    free(p->win);
    free(p->worker_args);
    free(p->slot_data);
    free(p->slot_label);
    free(p->free_slots);
    free(p->work);
    free(p->shuf);
    free(p->workers);
    pthread_cond_destroy(&p->cv_reader);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_consumer);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
