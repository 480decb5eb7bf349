/* test_events.c — TensorBoard event files, decoded by the test's own reader.
 *
 * What it proves: io/events.h writes TensorFlow's format.  The file is read
 * back with this file's own TFRecord framing check (its own bitwise CRC-32C
 * and masking) and its own protobuf wire decoding of Event / Summary /
 * Value / HistogramProto, not with io/ or protobuf-c, so a shared mistake
 * cannot hide.  Histograms are checked against the test's own TensorFlow
 * bucket series and its own counting of the values.
 *
 * Modes:
 *   test_events                           unit tests of the writer
 *   test_events train DIR EVERY HEVERY MAX_STEPS N_TOWERS LR GLOBAL_BATCH
 *       the events file `tower train` wrote in DIR: scalar tags and steps,
 *       learning rate, loss = mean of the tower losses, throughput, and at
 *       the last step the norms and histograms equal to DIR's checkpoint
 *   test_events eval DIR STEP PRECISION
 *       the events file `tower eval` wrote in DIR: "Precision @ 1" at STEP
 *   test_events scalars DIR TAG
 *       prints "STEP VALUE" for each event of DIR's one events file that has
 *       the scalar TAG, in file order (%.9g), for a script's checks
 * Exit 0 on success, 1 with "FAIL: ..." lines otherwise.
 */
#include <dirent.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "io/events.h"
#include "model/model.h"
#include "ps/checkpoint.h"

#include "tests/check.h"

/* ---------------------------------------------------------------- independent decoding */

static uint32_t crc32c_bitwise(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
    }
    return c ^ 0xffffffffu;
}

static uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

typedef struct {
    double min, max, num, sum, sum_squares;
    double *limit, *count;
    int n_limit, n_count;
} Histo;

typedef struct {
    char tag[256];
    int is_histo, has_simple;
    float simple;
    Histo histo;
} Value;

typedef struct {
    double wall_time;
    long long step;
    char file_version[64];
    int session_status; /* SessionLog.status (1 START) where the event is a session log, else 0 */
    int has_summary;
    Value *values;
    int n_values;
} Event;

typedef struct {
    const uint8_t *p, *end;
    int bad;
} Wire;

static uint64_t varint(Wire *w) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (w->p >= w->end) {
            w->bad = 1;
            return 0;
        }
        uint8_t b = *w->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    w->bad = 1;
    return 0;
}

static double f64(Wire *w) {
    if (w->end - w->p < 8) {
        w->bad = 1;
        return 0;
    }
    uint64_t u = le64(w->p);
    w->p += 8;
    double d;
    memcpy(&d, &u, 8);
    return d;
}

static float f32(Wire *w) {
    if (w->end - w->p < 4) {
        w->bad = 1;
        return 0;
    }
    uint32_t u = le32(w->p);
    w->p += 4;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A length-delimited field's bytes as a sub-wire. */
static Wire sub(Wire *w) {
    uint64_t n = varint(w);
    Wire s = {w->p, w->p, 0};
    if (w->bad || (uint64_t)(w->end - w->p) < n) {
        w->bad = 1;
        s.bad = 1;
        return s;
    }
    s.end = w->p + n;
    w->p += n;
    return s;
}

static void skip(Wire *w, int wt) {
    if (wt == 0) varint(w);
    else if (wt == 1) w->p += 8;
    else if (wt == 2) sub(w);
    else if (wt == 5) w->p += 4;
    else w->bad = 1;
    if (w->p > w->end) w->bad = 1;
}

static void push_double(double **arr, int *n, double v) {
    *arr = realloc(*arr, (size_t)(*n + 1) * sizeof **arr);
    (*arr)[(*n)++] = v;
}

/* repeated double: packed (wire type 2) or one per field (wire type 1). */
static void repeated_double(Wire *w, int wt, double **arr, int *n) {
    if (wt == 2) {
        Wire s = sub(w);
        while (!s.bad && s.p < s.end) push_double(arr, n, f64(&s));
        if (s.bad) w->bad = 1;
    } else if (wt == 1) {
        push_double(arr, n, f64(w));
    } else {
        w->bad = 1;
    }
}

static void decode_histo(Wire w, Histo *h, int *bad) {
    memset(h, 0, sizeof *h);
    while (!w.bad && w.p < w.end) {
        uint64_t key = varint(&w);
        int field = (int)(key >> 3), wt = (int)(key & 7);
        if (field >= 1 && field <= 5 && wt == 1) {
            double v = f64(&w);
            if (field == 1) h->min = v;
            if (field == 2) h->max = v;
            if (field == 3) h->num = v;
            if (field == 4) h->sum = v;
            if (field == 5) h->sum_squares = v;
        } else if (field == 6) {
            repeated_double(&w, wt, &h->limit, &h->n_limit);
        } else if (field == 7) {
            repeated_double(&w, wt, &h->count, &h->n_count);
        } else {
            skip(&w, wt);
        }
    }
    if (w.bad) *bad = 1;
}

static void decode_value(Wire w, Value *v, int *bad) {
    memset(v, 0, sizeof *v);
    while (!w.bad && w.p < w.end) {
        uint64_t key = varint(&w);
        int field = (int)(key >> 3), wt = (int)(key & 7);
        if (field == 1 && wt == 2) {
            Wire s = sub(&w);
            size_t n = (size_t)(s.end - s.p);
            if (n >= sizeof v->tag) n = sizeof v->tag - 1;
            memcpy(v->tag, s.p, n);
            v->tag[n] = '\0';
        } else if (field == 2 && wt == 5) {
            v->simple = f32(&w);
            v->has_simple = 1;
        } else if (field == 5 && wt == 2) {
            v->is_histo = 1;
            decode_histo(sub(&w), &v->histo, bad);
        } else {
            skip(&w, wt);
        }
    }
    if (w.bad) *bad = 1;
}

static int decode_event(const uint8_t *data, size_t n, Event *ev) {
    memset(ev, 0, sizeof *ev);
    Wire w = {data, data + n, 0};
    int bad = 0;
    while (!w.bad && w.p < w.end) {
        uint64_t key = varint(&w);
        int field = (int)(key >> 3), wt = (int)(key & 7);
        if (field == 1 && wt == 1) {
            ev->wall_time = f64(&w);
        } else if (field == 2 && wt == 0) {
            ev->step = (long long)varint(&w);
        } else if (field == 3 && wt == 2) {
            Wire s = sub(&w);
            size_t k = (size_t)(s.end - s.p);
            if (k >= sizeof ev->file_version) k = sizeof ev->file_version - 1;
            memcpy(ev->file_version, s.p, k);
        } else if (field == 7 && wt == 2) { /* session_log: its status, START 1 (0 would be unspecified) */
            Wire s = sub(&w);
            ev->session_status = -1;
            while (!s.bad && s.p < s.end) {
                uint64_t k2 = varint(&s);
                if ((k2 >> 3) == 1 && (k2 & 7) == 0) ev->session_status = (int)varint(&s);
                else skip(&s, (int)(k2 & 7));
            }
            if (s.bad) bad = 1;
        } else if (field == 5 && wt == 2) {
            ev->has_summary = 1;
            Wire s = sub(&w);
            while (!s.bad && s.p < s.end) {
                uint64_t k2 = varint(&s);
                if ((k2 >> 3) == 1 && (k2 & 7) == 2) {
                    ev->values = realloc(ev->values, (size_t)(ev->n_values + 1) * sizeof *ev->values);
                    decode_value(sub(&s), &ev->values[ev->n_values++], &bad);
                } else {
                    skip(&s, (int)(k2 & 7));
                }
            }
            if (s.bad) bad = 1;
        } else {
            skip(&w, wt);
        }
    }
    return (w.bad || bad) ? -1 : 0;
}

static void free_event(Event *ev) {
    for (int i = 0; i < ev->n_values; i++) {
        free(ev->values[i].histo.limit);
        free(ev->values[i].histo.count);
    }
    free(ev->values);
}

/* Reads every record of an events file, checking the framing byte by byte. */
static int read_events(const char *path, Event **out, int *n_out) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "FAIL: cannot open %s\n", path);
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)size + 1);
    if (fread(buf, 1, (size_t)size, f) != (size_t)size) size = -1;
    fclose(f);
    Event *evs = NULL;
    int n = 0, rc = 0;
    long off = 0;
    while (size >= 0 && off < size) {
        if (size - off < 12) {
            fprintf(stderr, "FAIL: %s: truncated header at offset %ld\n", path, off);
            rc = -1;
            break;
        }
        uint64_t len = le64(buf + off);
        if (le32(buf + off + 8) != masked(crc32c_bitwise(buf + off, 8))) {
            fprintf(stderr, "FAIL: %s: length CRC at offset %ld\n", path, off);
            rc = -1;
            break;
        }
        if ((uint64_t)(size - off - 12) < len + 4) {
            fprintf(stderr, "FAIL: %s: truncated record at offset %ld\n", path, off);
            rc = -1;
            break;
        }
        const uint8_t *data = buf + off + 12;
        if (le32(data + len) != masked(crc32c_bitwise(data, (size_t)len))) {
            fprintf(stderr, "FAIL: %s: data CRC at offset %ld\n", path, off);
            rc = -1;
            break;
        }
        evs = realloc(evs, (size_t)(n + 1) * sizeof *evs);
        if (decode_event(data, (size_t)len, &evs[n]) != 0) {
            fprintf(stderr, "FAIL: %s: record %d does not decode as an Event\n", path, n);
            rc = -1;
            n++;
            break;
        }
        n++;
        off += 12 + (long)len + 4;
    }
    free(buf);
    *out = evs;
    *n_out = n;
    return size < 0 ? -1 : rc;
}

static const Value *find_value(const Event *ev, const char *tag) {
    for (int i = 0; i < ev->n_values; i++)
        if (!strcmp(ev->values[i].tag, tag)) return &ev->values[i];
    return NULL;
}

/* The test's own TensorFlow bucket series (histogram.cc's InitDefaultBucketsInner). */
static int tf_series(double *limits) {
    double pos[1000];
    int n_pos = 0, n = 0;
    for (double v = 1.0e-12; v < 1.0e20; v *= 1.1) pos[n_pos++] = v;
    pos[n_pos++] = DBL_MAX;
    for (int i = n_pos - 1; i >= 0; i--) limits[n++] = -pos[i];
    limits[n++] = 0.0;
    for (int i = 0; i < n_pos; i++) limits[n++] = pos[i];
    return n;
}

static int series_index(const double *series, int n, double v) {
    for (int i = 0; i < n; i++)
        if (series[i] == v) return i;
    return -1;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Index of the first sorted value >= x. */
static size_t first_at_least(const double *sorted, size_t n, double x) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The histogram of values (finite ones) as the test understands TensorFlow's. */
static void check_histogram(const Histo *h, const float *values, size_t n_values, const char *what) {
    static double series[2048];
    static int n_series = 0;
    if (!n_series) n_series = tf_series(series);
    double mn = DBL_MAX, mx = -DBL_MAX, num = 0, sum = 0, sq = 0;
    for (size_t i = 0; i < n_values; i++) {
        double v = values[i];
        if (!isfinite(v)) continue;
        if (v < mn) mn = v;
        if (v > mx) mx = v;
        num += 1;
        sum += v;
        sq += v * v;
    }
    CHECK(h->min == mn && h->max == mx, "%s: min/max %g %g, expected %g %g", what, h->min, h->max, mn, mx);
    CHECK(h->num == num, "%s: num %g, expected %g", what, h->num, num);
    CHECK(h->sum == sum && h->sum_squares == sq, "%s: sum %.17g sum_squares %.17g, expected %.17g %.17g", what, h->sum,
          h->sum_squares, sum, sq);
    CHECK(h->n_limit == h->n_count && h->n_limit >= 1, "%s: %d limits, %d counts", what, h->n_limit, h->n_count);
    if (h->n_limit != h->n_count || h->n_limit < 1) return;
    CHECK(h->limit[h->n_limit - 1] == DBL_MAX, "%s: last limit %g, expected DBL_MAX", what, h->limit[h->n_limit - 1]);
    /* The finite values sorted, so each bucket's count is two binary searches. */
    double *sorted = malloc((n_values ? n_values : 1) * sizeof *sorted);
    size_t n_sorted = 0;
    for (size_t i = 0; i < n_values; i++)
        if (isfinite(values[i])) sorted[n_sorted++] = values[i];
    qsort(sorted, n_sorted, sizeof *sorted, cmp_double);
    double total = 0;
    int prev_index = -1;
    for (int b = 0; b < h->n_limit; b++) {
        int idx = series_index(series, n_series, h->limit[b]);
        CHECK(idx >= 0, "%s: bucket %d limit %.17g is not one of TensorFlow's", what, b, h->limit[b]);
        CHECK(idx > prev_index, "%s: bucket limits not increasing at %d", what, b);
        double lo = b == 0 ? -INFINITY : h->limit[b - 1], hi = h->limit[b];
        double c = (double)(first_at_least(sorted, n_sorted, hi) - first_at_least(sorted, n_sorted, lo));
        CHECK(h->count[b] == c, "%s: bucket %d [%g, %g) holds %g, expected %g", what, b, lo, hi, h->count[b], c);
        if (h->count[b] > 0) /* a non-empty bucket is one of TensorFlow's buckets, not merged */
            CHECK(idx == prev_index + 1 || (b == 0 && idx == 0), "%s: non-empty bucket %d spans several buckets", what, b);
        else if (b > 0)
            CHECK(h->count[b - 1] > 0, "%s: empty buckets %d and %d not merged", what, b - 1, b);
        total += h->count[b];
        prev_index = idx;
    }
    CHECK(total == num, "%s: buckets sum to %g, expected %g", what, total, num);
    free(sorted);
}

/* The one events.out.tfevents.* file in dir (fails when there are several). */
static int find_events_file(const char *dir, char *path, size_t n) {
    DIR *d = opendir(dir);
    int found = 0;
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "events.out.tfevents.", 20)) {
            snprintf(path, n, "%s/%s", dir, e->d_name);
            found++;
        }
    closedir(d);
    return found == 1 ? 0 : -1;
}

/* ---------------------------------------------------------------- unit tests */

static void unit_tests(void) {
    char dir[] = "/tmp/tower_test_events_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    char err[512];
    double t0 = (double)time(NULL);

    /* The default limits are TensorFlow's series. */
    int n_limits;
    const double *limits = event_default_bucket_limits(&n_limits);
    static double series[2048];
    int n_series = tf_series(series);
    CHECK(n_limits == n_series && n_limits == 1551, "%d default limits, the series has %d", n_limits, n_series);
    for (int i = 0; i < n_limits && i < n_series; i++)
        if (limits[i] != series[i]) {
            CHECK(0, "default limit %d is %.17g, TensorFlow's %.17g", i, limits[i], series[i]);
            break;
        }

    EventWriter *w = event_writer_open(dir, err, sizeof err);
    CHECK(w != NULL, "open: %s", err);
    if (!w) return;
    EventWriter *w2 = event_writer_open(dir, err, sizeof err);
    CHECK(w2 != NULL, "second open in the same second: %s", err);
    CHECK(w2 && strcmp(event_writer_path(w), event_writer_path(w2)) != 0, "two writers share %s", event_writer_path(w));

    /* The name: events.out.tfevents.<10 digits>.<hostname>. */
    char host[256] = "";
    gethostname(host, sizeof host);
    const char *base = strrchr(event_writer_path(w), '/') + 1;
    long long secs = 0;
    char rest[300] = "";
    CHECK(sscanf(base, "events.out.tfevents.%10lld.%299s", &secs, rest) == 2, "file name %s", base);
    CHECK(strlen(base) > 31 && base[30] == '.', "timestamp not 10 digits in %s", base);
    CHECK(fabs((double)secs - t0) <= 5, "timestamp %lld, now %.0f", secs, t0);
    CHECK(!strcmp(rest, host), "host part '%s', hostname '%s'", rest, host);

    /* The session's start, at the step it starts from. */
    CHECK(event_writer_session_start(w, 7, err, sizeof err) == 0, "session start: %s", err);
    /* Nothing queued: no record. */
    CHECK(event_writer_write(w, 5, 1.0, err, sizeof err) == 0, "empty write: %s", err);
    /* Scalars at step 10, in order. */
    CHECK(event_writer_add_scalar(w, "loss", 1.5f, err, sizeof err) == 0, "%s", err);
    CHECK(event_writer_add_scalar(w, "tower_1/loss", -0.25f, err, sizeof err) == 0, "%s", err);
    CHECK(event_writer_write(w, 10, 1234.5, err, sizeof err) == 0, "%s", err);
    /* A histogram with zeros, tiny, negative, huge and non-finite values at step 20. */
    float vals[] = {-1.0f, 0.0f, 0.0f, 0.5f, 3.0f, 1e-13f, NAN, 2e30f, -INFINITY, 0.5f, 1.0f, 1.1f, -3e-12f};
    size_t n_vals = sizeof vals / sizeof vals[0];
    CHECK(event_writer_add_histogram(w, "conv1/weights", vals, n_vals, err, sizeof err) == 0, "%s", err);
    CHECK(event_writer_add_scalar(w, "learning_rate", 0.1f, err, sizeof err) == 0, "%s", err);
    CHECK(event_writer_write(w, 20, 1300.25, err, sizeof err) == 0, "%s", err);
    /* An empty histogram and a large step (varint > 32 bits) at step 2^33. */
    CHECK(event_writer_add_histogram(w, "empty", vals, 0, err, sizeof err) == 0, "%s", err);
    /* 10,000 normal-ish values: many buckets. */
    float *many = malloc(10000 * sizeof *many);
    for (int i = 0; i < 10000; i++) many[i] = (float)(sin(i * 0.37) * pow(10.0, (i % 13) - 6));
    CHECK(event_writer_add_histogram(w, "many", many, 10000, err, sizeof err) == 0, "%s", err);
    long big_step = (long)1 << 33;
    CHECK(event_writer_write(w, big_step, 1400.0, err, sizeof err) == 0, "%s", err);

    /* Flushed after each write: readable before close. */
    Event *evs;
    int n_evs;
    CHECK(read_events(event_writer_path(w), &evs, &n_evs) == 0, "reading before close");
    CHECK(n_evs == 5, "%d records before close, expected 5", n_evs);
    for (int i = 0; i < n_evs; i++) free_event(&evs[i]);
    free(evs);

    char path[4096];
    snprintf(path, sizeof path, "%s", event_writer_path(w));
    CHECK(event_writer_close(w, err, sizeof err) == 0, "close: %s", err);
    event_writer_close(w2, NULL, 0);

    CHECK(read_events(path, &evs, &n_evs) == 0, "reading %s", path);
    CHECK(n_evs == 5, "%d records, expected 5", n_evs);
    if (n_evs == 5) {
        CHECK(!strcmp(evs[0].file_version, "brain.Event:2"), "file_version '%s'", evs[0].file_version);
        CHECK(!evs[0].has_summary && fabs(evs[0].wall_time - t0) < 5, "first event wall_time %f", evs[0].wall_time);
        CHECK(evs[1].session_status == 1 && evs[1].step == 7 && !evs[1].has_summary && fabs(evs[1].wall_time - t0) < 5,
              "the session start: status %d at step %lld", evs[1].session_status, evs[1].step);
        memmove(evs + 1, evs + 2, 3 * sizeof *evs); /* the summaries as events 1 to 3 */
        n_evs = 4;
        CHECK(evs[1].step == 10 && evs[1].wall_time == 1234.5, "event 1 step %lld time %f", evs[1].step, evs[1].wall_time);
        CHECK(evs[1].n_values == 2, "event 1 has %d values", evs[1].n_values);
        if (evs[1].n_values == 2) {
            CHECK(!strcmp(evs[1].values[0].tag, "loss") && evs[1].values[0].has_simple && evs[1].values[0].simple == 1.5f,
                  "value 0: %s %g", evs[1].values[0].tag, evs[1].values[0].simple);
            CHECK(!strcmp(evs[1].values[1].tag, "tower_1/loss") && evs[1].values[1].simple == -0.25f, "value 1: %s %g",
                  evs[1].values[1].tag, evs[1].values[1].simple);
        }
        CHECK(evs[2].step == 20 && evs[2].n_values == 2, "event 2: step %lld, %d values", evs[2].step, evs[2].n_values);
        const Value *h = find_value(&evs[2], "conv1/weights");
        CHECK(h && h->is_histo && !h->has_simple, "no histogram conv1/weights");
        if (h) check_histogram(&h->histo, vals, n_vals, "conv1/weights");
        const Value *lr = find_value(&evs[2], "learning_rate");
        CHECK(lr && lr->has_simple && lr->simple == 0.1f, "learning_rate");
        CHECK(evs[3].step == big_step, "step %lld, expected %ld", evs[3].step, big_step);
        const Value *e = find_value(&evs[3], "empty");
        CHECK(e && e->is_histo, "no empty histogram");
        if (e) {
            CHECK(e->histo.n_limit == 1 && e->histo.limit[0] == DBL_MAX && e->histo.count[0] == 0,
                  "empty histogram: %d buckets", e->histo.n_limit);
            CHECK(e->histo.num == 0 && e->histo.min == DBL_MAX && e->histo.max == -DBL_MAX, "empty histogram stats");
        }
        const Value *m = find_value(&evs[3], "many");
        CHECK(m && m->is_histo && m->histo.n_limit > 50, "many: %d buckets", m ? m->histo.n_limit : 0);
        if (m) check_histogram(&m->histo, many, 10000, "many");
    }
    for (int i = 0; i < n_evs; i++) free_event(&evs[i]);
    free(evs);
    free(many);

    /* A missing directory: NULL and one line naming it. */
    char missing[600];
    snprintf(missing, sizeof missing, "%s/no/such/dir", dir);
    err[0] = '\0';
    CHECK(event_writer_open(missing, err, sizeof err) == NULL, "opened in a missing directory");
    CHECK(strstr(err, missing) && !strchr(err, '\n'), "message '%s'", err);

    /* Names taken: every name of this second and the next two (the base and .1 to .999) exists, so the open
     * refuses in one line and leaves them as they were; with .500 free it takes .500. */
    char taken[600];
    snprintf(taken, sizeof taken, "%s/taken", dir);
    CHECK(mkdir(taken, 0755) == 0, "mkdir %s", taken);
    gethostname(host, sizeof host);
    const long long now_s = (long long)time(NULL);
    for (long long t = now_s; t < now_s + 3; t++)
        for (int k = 0; k <= EVENTS_MAX_SUFFIX; k++) {
            char name[1200];
            int len = snprintf(name, sizeof name, "%s/events.out.tfevents.%010lld.%s", taken, t, host);
            if (k) snprintf(name + len, sizeof name - (size_t)len, ".%d", k);
            FILE *f = fopen(name, "w");
            CHECK(f && fputs("MARKER", f) >= 0 && fclose(f) == 0, "writing %s", name);
        }
    err[0] = '\0';
    EventWriter *wt = event_writer_open(taken, err, sizeof err);
    CHECK(!wt && strstr(err, "and its .1 to .999 exist") && !strchr(err, '\n'), "every name taken: %s",
          wt ? event_writer_path(wt) : err);
    event_writer_close(wt, NULL, 0);
    int kept = 1;
    for (long long t = now_s; t < now_s + 3; t++) {
        char name[1200];
        snprintf(name, sizeof name, "%s/events.out.tfevents.%010lld.%s.999", taken, t, host);
        struct stat sb;
        kept &= stat(name, &sb) == 0 && sb.st_size == 6;
    }
    CHECK(kept, "a taken name was overwritten");
    for (long long t = now_s; t < now_s + 3; t++) {
        char name[1200];
        snprintf(name, sizeof name, "%s/events.out.tfevents.%010lld.%s.500", taken, t, host);
        remove(name);
    }
    wt = event_writer_open(taken, err, sizeof err);
    CHECK(wt && strlen(event_writer_path(wt)) > 4 &&
          !strcmp(event_writer_path(wt) + strlen(event_writer_path(wt)) - 4, ".500"),
          "with .500 free: %s", wt ? event_writer_path(wt) : err);
    event_writer_close(wt, NULL, 0);

    /* A write that fails part-way (a file size limit, in a child): the file keeps its whole records only. */
    char limited[600];
    snprintf(limited, sizeof limited, "%s/limited", dir);
    CHECK(mkdir(limited, 0755) == 0, "mkdir %s", limited);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        EventWriter *wl = event_writer_open(limited, err, sizeof err);
        if (!wl) _exit(3);
        struct rlimit rl = {.rlim_cur = 20000, .rlim_max = 20000};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(4);
        float v[2000];
        for (int i = 0; i < 2000; i++) v[i] = (float)(i - 1000) * 1e-3f;
        int failed = 0;
        for (long step = 1; step < 1000 && !failed; step++)
            failed = event_writer_add_histogram(wl, "h", v, 2000, err, sizeof err) != 0 ||
                     event_writer_write(wl, step, 1.0, err, sizeof err) != 0;
        event_writer_close(wl, NULL, 0);
        _exit(failed ? 0 : 5);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the writer under a 20000-byte limit: status %d", status);
    char lpath[4096];
    if (find_events_file(limited, lpath, sizeof lpath) == 0) {
        struct stat sb;
        CHECK(stat(lpath, &sb) == 0 && sb.st_size < 20000, "%s: %lld bytes", lpath, (long long)sb.st_size);
        CHECK(read_events(lpath, &evs, &n_evs) == 0 && n_evs >= 2, "%s after the failed write: %d whole records",
              lpath, n_evs);
        for (int i = 0; i < n_evs; i++) free_event(&evs[i]);
        free(evs);
    } else {
        CHECK(0, "%s: not exactly one events file", limited);
    }

    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", dir);
}

/* ---------------------------------------------------------------- `tower train` output */

static void check_train(int argc, char **argv) {
    if (argc != 9) {
        fprintf(stderr, "usage: test_events train DIR EVERY HEVERY MAX_STEPS N_TOWERS LR GLOBAL_BATCH\n");
        exit(2);
    }
    const char *dir = argv[2];
    long every = atol(argv[3]), hevery = atol(argv[4]), max_steps = atol(argv[5]);
    int n_towers = atoi(argv[6]);
    float lr = strtof(argv[7], NULL);
    int global_batch = atoi(argv[8]);
    char path[4096], ckpt_path[4096], err[512];
    CHECK(find_events_file(dir, path, sizeof path) == 0, "%s: not exactly one events file", dir);
    CHECK(ckpt_latest(dir, ckpt_path, sizeof ckpt_path) == 1, "%s: no checkpoint", dir);
    if (check_failures) return;
    CkptContents ck;
    CHECK(ckpt_read(ckpt_path, &ck, err, sizeof err) == 0, "%s", err);
    if (check_failures) return;
    CHECK(ck.global_step == max_steps, "checkpoint at step %ld, expected %ld", ck.global_step, max_steps);
    ModelSpec spec;
    CHECK(model_spec_init(&spec, ck.model, ck.H, ck.W, ck.C, ck.num_classes, err, sizeof err) == 0, "%s", err);

    Event *evs;
    int n_evs;
    CHECK(read_events(path, &evs, &n_evs) == 0, "reading %s", path);
    CHECK(n_evs >= 3 && !strcmp(evs[0].file_version, "brain.Event:2"), "first record is not the file version");
    CHECK(n_evs >= 3 && evs[1].session_status == 1 && evs[1].step == 1 && !evs[1].has_summary,
          "second record is not the session's start at step 1, its first");
    /* Expected steps: multiples of every / hevery, and the last step. */
    long n_scalar_steps = 0, n_histo_steps = 0;
    for (int i = 2; i < n_evs; i++) {
        const Event *ev = &evs[i];
        long step = (long)ev->step;
        const Value *loss = find_value(ev, "loss");
        int has_histo = find_value(ev, spec.vars[0].name) != NULL;
        CHECK(step >= 1 && step <= max_steps, "event at step %ld", step);
        if (loss) {
            n_scalar_steps++;
            CHECK(step % every == 0 || step == max_steps, "scalars at step %ld (every %ld)", step, every);
            double sum = 0;
            char tag[MODEL_VAR_NAME_MAX + 32];
            for (int t = 0; t < n_towers; t++) {
                snprintf(tag, sizeof tag, "tower_%d/loss", t);
                const Value *tl = find_value(ev, tag);
                CHECK(tl && tl->has_simple && isfinite(tl->simple), "step %ld: no %s", step, tag);
                if (tl) sum += tl->simple;
                snprintf(tag, sizeof tag, "tower_%d/accuracy", t);
                const Value *ta = find_value(ev, tag);
                CHECK(ta && ta->simple >= 0 && ta->simple <= 1, "step %ld: %s", step, tag);
            }
            snprintf(tag, sizeof tag, "tower_%d/loss", n_towers);
            CHECK(!find_value(ev, tag), "step %ld: a tower too many (%s)", step, tag);
            CHECK(fabs(loss->simple - sum / n_towers) <= 1e-5 * fabs(loss->simple) + 1e-6,
                  "step %ld: loss %g is not the mean of the tower losses %g", step, loss->simple, sum / n_towers);
            const Value *acc = find_value(ev, "accuracy");
            CHECK(acc && acc->simple >= 0 && acc->simple <= 1, "step %ld: accuracy", step);
            const Value *l = find_value(ev, "learning_rate");
            CHECK(l && l->simple == lr, "step %ld: learning_rate %g, expected %g", step, l ? l->simple : -1, lr);
            const Value *eps = find_value(ev, "examples_per_sec"), *sps = find_value(ev, "global_step/sec");
            CHECK(eps && sps && eps->simple > 0 && sps->simple > 0, "step %ld: no throughput", step);
            if (eps && sps)
                CHECK(fabs(eps->simple - sps->simple * global_batch) <= 1e-4 * eps->simple,
                      "step %ld: examples_per_sec %g != global_step/sec %g x %d", step, eps->simple, sps->simple,
                      global_batch);
            for (int v = 0; v < spec.n_vars; v++) {
                snprintf(tag, sizeof tag, "%s/norm", spec.vars[v].name);
                const Value *nv = find_value(ev, tag);
                CHECK(nv && nv->simple > 0, "step %ld: no %s", step, tag);
                if (nv && step == max_steps) {
                    double sq = 0;
                    for (size_t k = 0; k < spec.vars[v].n_floats; k++)
                        sq += (double)ck.params[spec.vars[v].offset + k] * ck.params[spec.vars[v].offset + k];
                    CHECK(fabs(nv->simple - sqrt(sq)) <= 1e-6 * sqrt(sq), "%s at the last step %g, checkpoint %g", tag,
                          nv->simple, sqrt(sq));
                }
            }
        }
        if (has_histo) {
            n_histo_steps++;
            CHECK(step % hevery == 0 || step == max_steps, "histograms at step %ld (every %ld)", step, hevery);
            for (int v = 0; v < spec.n_vars; v++) {
                const Value *hv = find_value(ev, spec.vars[v].name);
                CHECK(hv && hv->is_histo, "step %ld: no histogram %s", step, spec.vars[v].name);
                if (hv && step == max_steps)
                    check_histogram(&hv->histo, ck.params + spec.vars[v].offset, spec.vars[v].n_floats,
                                    spec.vars[v].name);
            }
        }
        CHECK(loss || has_histo, "event at step %ld holds neither scalars nor histograms", step);
    }
    long want_scalars = max_steps / every + (max_steps % every != 0);
    long want_histos = max_steps / hevery + (max_steps % hevery != 0);
    CHECK(n_scalar_steps == want_scalars, "%ld scalar events, expected %ld", n_scalar_steps, want_scalars);
    CHECK(n_histo_steps == want_histos, "%ld histogram events, expected %ld", n_histo_steps, want_histos);
    for (int i = 0; i < n_evs; i++) free_event(&evs[i]);
    free(evs);
    ckpt_contents_free(&ck);
}

/* A mode's command line of want_argc arguments (exit 2 with usage otherwise), and the one events file of
 * its DIR (argv[2]) read into *evs (the caller frees them): 0, or -1 after a failed check. */
static int read_dir_events(int argc, char **argv, int want_argc, const char *usage, Event **evs, int *n_evs) {
    if (argc != want_argc) {
        fprintf(stderr, "usage: %s\n", usage);
        exit(2);
    }
    char path[4096];
    CHECK(find_events_file(argv[2], path, sizeof path) == 0, "%s: not exactly one events file", argv[2]);
    if (check_failures) return -1;
    CHECK(read_events(path, evs, n_evs) == 0, "reading %s", path);
    return check_failures ? -1 : 0;
}

static void check_eval(int argc, char **argv) {
    Event *evs;
    int n_evs;
    if (read_dir_events(argc, argv, 5, "test_events eval DIR STEP PRECISION", &evs, &n_evs) != 0) return;
    CHECK(n_evs == 2, "%d records, expected the version and one summary", n_evs);
    if (n_evs == 2) {
        CHECK(!strcmp(evs[0].file_version, "brain.Event:2"), "file_version");
        CHECK(evs[1].step == atol(argv[3]), "eval step %lld, expected %s", evs[1].step, argv[3]);
        const Value *p = find_value(&evs[1], "Precision @ 1");
        CHECK(p && p->has_simple, "no 'Precision @ 1'");
        if (p) CHECK(fabs(p->simple - atof(argv[4])) <= 5e-4, "Precision @ 1 = %g, printed %s", p->simple, argv[4]);
        const Value *l = find_value(&evs[1], "loss"), *ce = find_value(&evs[1], "cross_entropy");
        CHECK(l && ce && ce->simple > 0 && l->simple >= ce->simple, "eval loss / cross_entropy");
    }
    for (int i = 0; i < n_evs; i++) free_event(&evs[i]);
    free(evs);
}

static void print_scalars(int argc, char **argv) {
    Event *evs;
    int n_evs;
    if (read_dir_events(argc, argv, 4, "test_events scalars DIR TAG", &evs, &n_evs) != 0) return;
    for (int i = 0; i < n_evs; i++) {
        const Value *v = find_value(&evs[i], argv[3]);
        if (v && v->has_simple) printf("%lld %.9g\n", (long long)evs[i].step, v->simple);
        free_event(&evs[i]);
    }
    free(evs);
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "train")) check_train(argc, argv);
    else if (argc >= 2 && !strcmp(argv[1], "eval")) check_eval(argc, argv);
    else if (argc >= 2 && !strcmp(argv[1], "scalars")) {
        print_scalars(argc, argv);
        if (!check_failures) return 0;
    }
    else unit_tests();
    if (check_failures) {
        fprintf(stderr, "%d check(s) failed\n", check_failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
