/* pipeline_source.h — inside io/ only: the pipeline's state and what a data
 * source plugs into it.
 *
 * Where it sits: io/, between the data and the pipeline's shuffle/batch
 * machinery (io/pipeline.c).  A source (a PipelineSourceI) knows one kind
 * of data: io/pipeline_tfrecord.c reads TFRecord files of tf.train.Example
 * and decodes each record in the reader thread (an encoded JPEG or PNG
 * record: in the workers, as an image folder's); io/pipeline_imagefolder.c
 * lists DIR/<class>/FILE and has the worker threads decode and resize each
 * image (pipeline_decode_in_workers).  Either way the source hands each good
 * example's slot, in its epoch's order, to pipeline_accept (the shuffle
 * buffer, then the batches) and each bad one to pipeline_bad (skip and
 * count, or stop), so that the order, the shuffle, --skip_corrupt, resume
 * and the batches are the machinery's, the same for every source.
 * What it does not do: nothing here is public API (io/pipeline.h is).
 */
#ifndef TOWER_IO_PIPELINE_SOURCE_H
#define TOWER_IO_PIPELINE_SOURCE_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "io/example.h"
#include "io/pipeline.h"

#define PIPELINE_GROUP 16 /* work items / slots moved per lock */
#define PIPELINE_THREAD_N_BYTES ((size_t)128 << 10) /* a thread's touched stack and malloc arena slack (pipeline_max_n_bytes) */

enum { WORK_AUGMENT = 0, WORK_DECODE = 1 };

typedef struct {
    int kind;      /* WORK_AUGMENT: augment slot into batch ring at pos; WORK_DECODE: decode window entry win into slot */
    int slot;      /* slot holding (or receiving) the decoded image and label */
    int ring;      /* batch ring entry */
    int pos;       /* position in that batch */
    int win;       /* WORK_DECODE: entry of the decode window */
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

/* One example a worker decodes for the reader (pipeline_decode_in_workers). */
typedef struct {
    long item;              /* the source's example index */
    int slot;
    int state;              /* 0 in flight, 1 decoded (why: "" or a warning), -1 bad (why, lost_n_bytes) */
    uint64_t lost_n_bytes;
    const char *where;      /* the file whose bytes a bad one made unreadable, for pipeline_bad (NULL: the example's
                               own file, as an image folder's); owned by the source */
    char why[PIPELINE_MSG_N_BYTES];
} DecodeEntry;

typedef struct Pipeline Pipeline;

typedef struct {
    const char *name;                      /* "tfrecord", "imagefolder" */
    /* At pipeline_open, after the configuration check: find and check the
     * data, set p->input_n_bytes and p->no_data_msg, make p->src_state.
     * 0, or -1 with one line in err. */
    int (*open)(Pipeline *p, char *err, size_t err_n_bytes);
    /* Reader thread: examples in one pass over good data (resume skips whole
     * epochs of this size); -1 with err. */
    long (*count)(Pipeline *p, char *err, size_t err_n_bytes);
    /* Reader thread: one epoch, in the order seeded by (seed, epoch) when
     * cfg.shuffle; each good example to pipeline_accept, each bad one to
     * pipeline_bad.  The number of good examples, or -1 to stop. */
    long (*read_epoch)(Pipeline *p, long epoch);
    /* Worker thread `worker`: decode example `item` into slot (image and
     * label).  0 (why: "" or one warning line for an example kept, e.g. a
     * JPEG decoded from damaged data), or -1 with why and the bytes lost.
     * NULL for a source that decodes in read_epoch. */
    int (*decode)(Pipeline *p, int worker, long item, int slot, char *why, size_t why_n_bytes, uint64_t *lost_n_bytes);
    void (*close)(Pipeline *p);            /* frees p->src_state; NULL state is fine */
    /* The source's share of pipeline_max_n_bytes: *reader_n_bytes (what the
     * reader holds) and *workers_n_bytes (all workers' scratch together). */
    void (*max_n_bytes)(const PipelineConfig *cfg, size_t record_n_bytes, size_t *reader_n_bytes,
                        size_t *workers_n_bytes);
    int decode_window;                     /* entries of the decode window per worker (0: no window) */
} PipelineSourceI;

extern const PipelineSourceI pipeline_source_tfrecord;
extern const PipelineSourceI pipeline_source_tfrecord_encoded;
extern const PipelineSourceI pipeline_source_imagefolder;

/* One worker's most memory decoding and resizing images of cfg
 * (max_image_pixels): libjpeg's, the decoded and resampled pixels, the
 * resampler's rows and weights, and with reads_files a file read whole. */
size_t pipeline_decode_worker_n_bytes(const PipelineConfig *cfg, int reads_files);

struct Pipeline {
    PipelineConfig cfg;
    const PipelineSourceI *src;
    void *src_state;
    char no_data_msg[PIPELINE_MSG_N_BYTES]; /* the error when an epoch yields no good example (the source's open writes it) */
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

    DecodeEntry *win;         /* (win_n) the decode window (sources that decode in the workers) */
    int win_n;

    pthread_mutex_t mu;
    pthread_cond_t cv_reader, cv_work, cv_consumer;
    atomic_int stop;          /* read by the reader between records without the lock */
    int reader_done;
    long end_seq;             /* batches in the stream, once reader_done */
    int failed;
    long fail_seq;            /* batches before the failure are still delivered */
    char fail_msg[PIPELINE_ERR_N_BYTES]; /* escaped */

    /* statistics (under mu) */
    struct timespec t_open;
    long produced;            /* examples in batches that became READY */
    long corrupt, delivered, n_next_calls;
    long corrupt_distinct;     /* the most bad records one epoch met (each epoch meets the same ones) */
    uint64_t lost_n_bytes;     /* the most bytes one epoch lost to bad records */
    uint64_t input_n_bytes;    /* the files' sizes, at open */
    long epoch_corrupt;        /* this epoch's (reader thread) */
    long damaged_distinct;     /* the most images decoded from damaged data one epoch met (pipeline_damaged) */
    long epoch_damaged;        /* this epoch's (reader thread) */
    uint64_t epoch_lost_n_bytes;
    double fill_sum, wait_sec;
    atomic_long images_decoded, images_scaled; /* image folders: decodes, and those at a reduced JPEG scale */

    /* reader-thread state */
    int *shuf;                /* (capacity) slot ids in the shuffle buffer */
    long shuf_n;
    uint64_t shuf_rng;        /* this epoch's shuffle-buffer draws */
    uint64_t g_next;
    long fill_seq;            /* batch being filled (or next to start) */
    int fill_pos;             /* examples assigned to it so far */
    int fill_ring;
    long cur_epoch;
    WorkItem pending[PIPELINE_GROUP];
    int n_pending;
    int slot_cache[PIPELINE_GROUP];
    int n_slot_cache;

    pthread_t reader;
    pthread_t *workers;
    void *worker_args;        /* (n_workers) each worker's (pipeline, index) */
    int reader_started, n_workers_started;
};

/* ---- the machinery's side, for the sources (io/pipeline.c) ---- */

/* A free slot for the next example (blocks), or -1 when stopping. */
int pipeline_take_slot(Pipeline *p);
void pipeline_put_slot_back(Pipeline *p, int slot);

/* The next good example of the epoch is in slot: into the shuffle buffer
 * (emitting a random one once full) or, without shuffle, straight on.  0,
 * or -1 when stopping. */
int pipeline_accept(Pipeline *p, int slot);

/* A bad example (msg, lost_n_bytes of the input made unreadable by it;
 * where: the file named in the warning's "N bytes of WHERE", or NULL): skip
 * and count it, or stop the pipeline.  0 to go on, -1 to stop. */
int pipeline_bad(Pipeline *p, const char *msg, uint64_t lost_n_bytes, const char *where);

/* Stops the pipeline with msg (escaped here). */
void pipeline_fail(Pipeline *p, const char *msg);

/* order[0..n) = 0..n-1, permuted by (seed, epoch) when cfg.shuffle. */
void pipeline_order(const Pipeline *p, long epoch, long *order, long n);

/* Has the workers decode items[0..n) (source->decode), at most win_n in
 * flight, and hands the results to pipeline_accept / pipeline_bad in the
 * items' order, so the stream does not depend on which worker finished
 * first.  The number of good examples, or -1 to stop. */
long pipeline_decode_in_workers(Pipeline *p, const long *items, long n);

/* The same for a source that learns its items as it reads (TFRecords of
 * encoded images): per item, pipeline_decode_reserve (blocks while the
 * window is full, collecting the oldest in order) gives the window entry w
 * (0 .. win_n - 1; the source may fill its own per-entry buffers for w) and
 * a slot (its label may be set now), then pipeline_decode_dispatch hands it
 * (where: the file a bad one's warning names as unreadable, or NULL)
 * to the workers; pipeline_decode_drain collects the rest.  reserve: the
 * entry, or -1 to stop; drain: the stream's good examples, or -1. */
typedef struct {
    long dispatched, collected, good;
} PipelineDecodeStream;
int pipeline_decode_reserve(Pipeline *p, PipelineDecodeStream *s, int *slot);
void pipeline_decode_dispatch(Pipeline *p, PipelineDecodeStream *s, long item, int slot, const char *where);
long pipeline_decode_drain(Pipeline *p, PipelineDecodeStream *s);

#endif
