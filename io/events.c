/* events.c — TensorBoard event files (see events.h).
 *
 * Where it sits: io/, on top of TfrWriter (tfrecord.h) for the framing and
 * protobuf-c for the tensorflow.Event messages (io/event.proto).  Queued
 * values are kept as plain structs and turned into messages only in
 * event_writer_write.
 * What it does not do: no reading, no compression (TensorBoard expects
 * uncompressed event files).
 */
#include "io/events.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "io/event.pb-c.h"
#include "io/tfrecord.h"

/* ---------------------------------------------------------------- histograms */

/* 774 limits each side of zero: 1e-12 * 1.1^k < 1e20 for k = 0..773. */
#define EVENTS_MAX_LIMITS 2048

static double default_limits[EVENTS_MAX_LIMITS];
static int n_default_limits;
static pthread_once_t default_limits_once = PTHREAD_ONCE_INIT;

/* TensorFlow's InitDefaultBucketsInner (tensorflow/core/lib/histogram/
 * histogram.cc): the same repeated multiplication, so the same doubles. */
static void build_default_limits(void) {
    double pos[EVENTS_MAX_LIMITS / 2];
    int n_pos = 0;
    for (double v = 1.0e-12; v < 1.0e20; v *= 1.1) pos[n_pos++] = v;
    pos[n_pos++] = DBL_MAX;
    int n = 0;
    for (int i = n_pos - 1; i >= 0; i--) default_limits[n++] = -pos[i];
    default_limits[n++] = 0.0;
    for (int i = 0; i < n_pos; i++) default_limits[n++] = pos[i];
    n_default_limits = n;
}

const double *event_default_bucket_limits(int *n_limits) {
    pthread_once(&default_limits_once, build_default_limits);
    *n_limits = n_default_limits;
    return default_limits;
}

/* Index of the first limit > v (std::upper_bound), in [0, n], n >= 1.
 * Branch-free halving (a conditional move per level, no mispredicted
 * branches): invariant, every limit before base is <= v and the answer lies
 * in [base, base + len]. */
static int upper_bound(const double *limits, int n, double v) {
    int base = 0, len = n;
    while (len > 1) {
        int half = len / 2;
        base = limits[base + half] <= v ? base + half : base;
        len -= half;
    }
    return base + (limits[base] <= v);
}

void event_histogram_free(EventHistogram *h) {
    if (!h) return;
    free(h->bucket_limit);
    free(h->bucket);
    memset(h, 0, sizeof *h);
}

int event_histogram_compute(EventHistogram *h, const float *values, size_t n_values) {
    int n_limits;
    const double *limits = event_default_bucket_limits(&n_limits);
    memset(h, 0, sizeof *h);
    double *counts = calloc((size_t)n_limits, sizeof *counts);
    if (!counts) return -1;
    h->min = DBL_MAX;
    h->max = -DBL_MAX;
    for (size_t i = 0; i < n_values; i++) {
        double v = values[i];
        if (!isfinite(v)) continue;
        int b = upper_bound(limits, n_limits, v);
        if (b >= n_limits) b = n_limits - 1; /* v == DBL_MAX cannot come from a float; kept for safety */
        counts[b] += 1.0;
        if (v < h->min) h->min = v;
        if (v > h->max) h->max = v;
        h->num += 1.0;
        h->sum += v;
        h->sum_squares += v * v;
    }
    /* EncodeToProto(preserve_zero_buckets = false): a run of empty buckets
     * becomes one bucket whose limit is the run's last limit. */
    int n_out = 0;
    for (int i = 0; i < n_limits;) {
        double count = counts[i];
        i++;
        if (count <= 0.0)
            while (i < n_limits && counts[i] <= 0.0) i++;
        n_out++;
    }
    h->bucket_limit = malloc((size_t)(n_out > 0 ? n_out : 1) * sizeof(double));
    h->bucket = malloc((size_t)(n_out > 0 ? n_out : 1) * sizeof(double));
    if (!h->bucket_limit || !h->bucket) {
        free(counts);
        event_histogram_free(h);
        return -1;
    }
    for (int i = 0; i < n_limits;) {
        double end = limits[i], count = counts[i];
        i++;
        if (count <= 0.0) {
            while (i < n_limits && counts[i] <= 0.0) {
                end = limits[i];
                count = counts[i];
                i++;
            }
        }
        h->bucket_limit[h->n_buckets] = end;
        h->bucket[h->n_buckets] = count;
        h->n_buckets++;
    }
    if (h->n_buckets == 0) {
        h->bucket_limit[0] = DBL_MAX;
        h->bucket[0] = 0.0;
        h->n_buckets = 1;
    }
    free(counts);
    return 0;
}

/* ---------------------------------------------------------------- writer */

typedef struct {
    char *tag;
    int is_histogram;
    float simple_value;
    EventHistogram histo;
} QueuedValue;

struct EventWriter {
    TfrWriter *tfr;
    char *path;
    QueuedValue *queued;   /* (n_queued) values for the next event */
    int n_queued, cap_queued;
    uint8_t *buf;          /* serialisation buffer */
    size_t buf_n_bytes;
};

double event_wall_time_now(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

const char *event_writer_path(const EventWriter *w) { return w->path; }

static void clear_queue(EventWriter *w) {
    for (int i = 0; i < w->n_queued; i++) {
        free(w->queued[i].tag);
        event_histogram_free(&w->queued[i].histo);
    }
    w->n_queued = 0;
}

/* Serialises msg into w->buf and appends it as one record. */
static int write_message(EventWriter *w, const ProtobufCMessage *msg, char *err, size_t err_n) {
    size_t n = protobuf_c_message_get_packed_size(msg);
    if (n > w->buf_n_bytes) {
        uint8_t *b = realloc(w->buf, n);
        if (!b) {
            snprintf(err, err_n, "%s: out of memory for a %zu-byte event", w->path, n);
            return -1;
        }
        w->buf = b;
        w->buf_n_bytes = n;
    }
    protobuf_c_message_pack(msg, w->buf);
    if (tfr_writer_write(w->tfr, w->buf, n, err, err_n) != 0) return -1;
    return tfr_writer_flush(w->tfr, err, err_n);
}

EventWriter *event_writer_open(const char *dir, char *err, size_t err_n) {
    char host[256];
    if (gethostname(host, sizeof host) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        snprintf(err, err_n, "%s: cannot write an events file there: %s", dir, strerror(errno));
        return NULL;
    }
    if (!S_ISDIR(sb.st_mode)) {
        snprintf(err, err_n, "%s: cannot write an events file there: not a directory", dir);
        return NULL;
    }
    EventWriter *w = calloc(1, sizeof *w);
    size_t path_n = strlen(dir) + strlen(host) + 64;
    if (!w || !(w->path = malloc(path_n))) {
        free(w);
        snprintf(err, err_n, "%s: out of memory", dir);
        return NULL;
    }
    double now = event_wall_time_now();
    int k = snprintf(w->path, path_n, "%s/events.out.tfevents.%010lld.%s", dir, (long long)now, host);
    /* The first free name of the second: taken and created in one step, so a second writer never shares it. */
    int exists = 1;
    for (int suffix = 1; suffix <= EVENTS_MAX_SUFFIX + 1; suffix++) {
        if ((w->tfr = tfr_writer_open_new(w->path, IO_COMPRESSION_NONE, &exists, err, err_n)) || !exists) break;
        snprintf(w->path + k, path_n - (size_t)k, ".%d", suffix);
    }
    if (!w->tfr) {
        if (exists) {
            w->path[k] = '\0';
            snprintf(err, err_n, "%s: cannot write an events file there: %s and its .1 to .%d exist", dir, w->path,
                     EVENTS_MAX_SUFFIX);
        }
        free(w->path);
        free(w);
        return NULL;
    }
    Tensorflow__Event ev = TENSORFLOW__EVENT__INIT;
    ev.wall_time = now;
    ev.step = 0;
    ev.what_case = TENSORFLOW__EVENT__WHAT_FILE_VERSION;
    ev.file_version = (char *)EVENTS_FILE_VERSION;
    if (write_message(w, &ev.base, err, err_n) != 0) { /* a file without its version is no events file: not left */
        char *made = strdup(w->path);
        event_writer_close(w, NULL, 0);
        if (made) remove(made);
        free(made);
        return NULL;
    }
    return w;
}

int event_writer_session_start(EventWriter *w, long step, char *err, size_t err_n) {
    Tensorflow__SessionLog log = TENSORFLOW__SESSION_LOG__INIT;
    log.status = TENSORFLOW__SESSION_LOG__SESSION_STATUS__START;
    Tensorflow__Event ev = TENSORFLOW__EVENT__INIT;
    ev.wall_time = event_wall_time_now();
    ev.step = step;
    ev.what_case = TENSORFLOW__EVENT__WHAT_SESSION_LOG;
    ev.session_log = &log;
    return write_message(w, &ev.base, err, err_n);
}

/* A new queue slot with its tag copied, or NULL with err. */
static QueuedValue *queue_slot(EventWriter *w, const char *tag, char *err, size_t err_n) {
    if (w->n_queued == w->cap_queued) {
        int cap = w->cap_queued ? 2 * w->cap_queued : 32;
        QueuedValue *q = realloc(w->queued, (size_t)cap * sizeof *q);
        if (!q) goto oom;
        w->queued = q;
        w->cap_queued = cap;
    }
    QueuedValue *v = &w->queued[w->n_queued];
    memset(v, 0, sizeof *v);
    if (!(v->tag = strdup(tag))) goto oom;
    w->n_queued++;
    return v;
oom:
    snprintf(err, err_n, "%s: out of memory queueing '%s'", w->path, tag);
    return NULL;
}

int event_writer_add_scalar(EventWriter *w, const char *tag, float value, char *err, size_t err_n) {
    QueuedValue *v = queue_slot(w, tag, err, err_n);
    if (!v) return -1;
    v->simple_value = value;
    return 0;
}

int event_writer_add_histogram(EventWriter *w, const char *tag, const float *values, size_t n_values, char *err,
                               size_t err_n) {
    QueuedValue *v = queue_slot(w, tag, err, err_n);
    if (!v) return -1;
    v->is_histogram = 1;
    if (event_histogram_compute(&v->histo, values, n_values) != 0) {
        free(v->tag);
        w->n_queued--;
        snprintf(err, err_n, "%s: out of memory for the histogram of '%s'", w->path, tag);
        return -1;
    }
    return 0;
}

int event_writer_write(EventWriter *w, long step, double wall_time_sec, char *err, size_t err_n) {
    if (w->n_queued == 0) return 0;
    Tensorflow__Summary__Value *values = calloc((size_t)w->n_queued, sizeof *values);
    Tensorflow__Summary__Value **value_ptrs = calloc((size_t)w->n_queued, sizeof *value_ptrs);
    Tensorflow__HistogramProto *histos = calloc((size_t)w->n_queued, sizeof *histos);
    int rc = -1;
    if (!values || !value_ptrs || !histos) {
        snprintf(err, err_n, "%s: out of memory writing step %ld", w->path, step);
        goto out;
    }
    for (int i = 0; i < w->n_queued; i++) {
        const QueuedValue *q = &w->queued[i];
        Tensorflow__Summary__Value init = TENSORFLOW__SUMMARY__VALUE__INIT;
        values[i] = init;
        values[i].tag = q->tag;
        if (q->is_histogram) {
            Tensorflow__HistogramProto hinit = TENSORFLOW__HISTOGRAM_PROTO__INIT;
            Tensorflow__HistogramProto *hp = &histos[i];
            *hp = hinit;
            hp->min = q->histo.min;
            hp->max = q->histo.max;
            hp->num = q->histo.num;
            hp->sum = q->histo.sum;
            hp->sum_squares = q->histo.sum_squares;
            hp->n_bucket_limit = (size_t)q->histo.n_buckets;
            hp->bucket_limit = q->histo.bucket_limit;
            hp->n_bucket = (size_t)q->histo.n_buckets;
            hp->bucket = q->histo.bucket;
            values[i].value_case = TENSORFLOW__SUMMARY__VALUE__VALUE_HISTO;
            values[i].histo = hp;
        } else {
            values[i].value_case = TENSORFLOW__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
            values[i].simple_value = q->simple_value;
        }
        value_ptrs[i] = &values[i];
    }
    Tensorflow__Summary summary = TENSORFLOW__SUMMARY__INIT;
    summary.n_value = (size_t)w->n_queued;
    summary.value = value_ptrs;
    Tensorflow__Event ev = TENSORFLOW__EVENT__INIT;
    ev.wall_time = wall_time_sec;
    ev.step = step;
    ev.what_case = TENSORFLOW__EVENT__WHAT_SUMMARY;
    ev.summary = &summary;
    rc = write_message(w, &ev.base, err, err_n);
out:
    clear_queue(w);
    free(values);
    free(value_ptrs);
    free(histos);
    return rc;
}

int event_writer_close(EventWriter *w, char *err, size_t err_n) {
    if (!w) return 0;
    clear_queue(w);
    int rc = tfr_writer_close(w->tfr, err, err_n);
    free(w->queued);
    free(w->buf);
    free(w->path);
    free(w);
    return rc;
}

size_t event_writer_max_n_bytes(size_t n_histograms) {
    int n_limits;
    event_default_bucket_limits(&n_limits);
    return n_histograms * (size_t)n_limits * (2 * sizeof(double) + 18) + (size_t)n_limits * sizeof(double) +
           ((size_t)64 << 10);
}
