/* events.h — TensorBoard event files: scalars and histograms, TensorFlow's format.
 *
 * Where it sits: io/, beside the TFRecord writer it reuses.  `tower train`
 * writes the training curves (loss per tower, learning rate, throughput,
 * variable norms and histograms) into its --train_dir, `tower eval` its
 * precision into an eval directory; `tensorboard --logdir` shows both.
 * The file is named events.out.tfevents.%010lld.<hostname> (TensorFlow's
 * EventsWriter), is a TFRecord file of tensorflow.Event messages
 * (io/event.proto), and its first record carries file_version
 * "brain.Event:2".  Every event_writer_write is one Event whose Summary holds
 * the values added since the previous write, pushed to the file at once
 * (tfr_writer_flush), so TensorBoard sees each batch of values as it is made.
 * Histograms are TensorFlow's histogram::Histogram: the default bucket limits
 * (0, +-1e-12 * 1.1^k below 1e20, +-DBL_MAX) and runs of empty buckets
 * merged (EncodeToProto with preserve_zero_buckets false).
 * What it does not do: no reading (tests decode the files on their own), no
 * images, audio, graphs or plugin metadata, no threads (one writer per thread).
 *
 * Errors: functions that take err write one line there naming the file and
 * return -1.
 */
#ifndef TOWER_IO_EVENTS_H
#define TOWER_IO_EVENTS_H

#include <stddef.h>

#define EVENTS_FILE_VERSION "brain.Event:2"

/* TensorFlow's histogram of a set of values (HistogramProto's fields). */
typedef struct {
    double min, max;       /* of the values; DBL_MAX and -DBL_MAX when empty, as TensorFlow */
    double num;            /* number of values counted */
    double sum, sum_squares;
    int n_buckets;
    double *bucket_limit;  /* (n_buckets) right edge of each bucket, increasing, the last one DBL_MAX or a merged run's edge */
    double *bucket;        /* (n_buckets) count of values in [previous limit, this limit) */
} EventHistogram;

/* TensorFlow's default bucket limits, built once: -DBL_MAX, -1e20 > ... <
 * -1e-12, 0, 1e-12 ... < 1e20, DBL_MAX (1551 limits).  The table is static;
 * *n_limits receives its length. */
const double *event_default_bucket_limits(int *n_limits);

/* Fills h with the histogram of values (n_values floats, caller-owned) on
 * the default buckets, empty runs merged; an empty input gives one bucket
 * (limit DBL_MAX, count 0), as TensorFlow does.  Non-finite values are not
 * counted (TensorFlow refuses them; a run that diverged stops before its
 * next summary).  h's arrays are malloc'ed: free with event_histogram_free.
 * Returns 0, or -1 when memory is short (h is then empty). */
int event_histogram_compute(EventHistogram *h, const float *values, size_t n_values);
void event_histogram_free(EventHistogram *h);

typedef struct EventWriter EventWriter;

#define EVENTS_MAX_SUFFIX 999 /* event_writer_open's last ".N" */

/* Creates dir/events.out.tfevents.<now, 10 digits>.<hostname> (a ".N"
 * suffix, N up to EVENTS_MAX_SUFFIX, is added when that name is taken: the
 * name is checked and created in one step, so no file is overwritten or
 * shared with another writer) and writes the file_version event.  dir must
 * exist.  Returns NULL with one line in err when the file cannot be made. */
EventWriter *event_writer_open(const char *dir, char *err, size_t err_n_bytes);

/* Writes a SessionLog START event at step (a run's first step, the
 * checkpoint's + 1, where TensorFlow's SummarySaverHook writes it):
 * TensorBoard's readers then drop what earlier files hold at that step and
 * after (the steps of a run that ended past its last checkpoint, then
 * resumed from it).  Returns 0, or -1 with err (a write error). */
int event_writer_session_start(EventWriter *w, long step, char *err, size_t err_n_bytes);

/* The file's path, owned by the writer. */
const char *event_writer_path(const EventWriter *w);

/* Queue a scalar (Summary.Value.simple_value) for the next event_writer_write.
 * tag is copied.  Returns 0, or -1 with err when memory is short. */
int event_writer_add_scalar(EventWriter *w, const char *tag, float value, char *err, size_t err_n_bytes);

/* Queue the histogram of values (n_values floats, read now, not retained)
 * for the next event_writer_write.  Returns 0, or -1 with err. */
int event_writer_add_histogram(EventWriter *w, const char *tag, const float *values, size_t n_values, char *err,
                               size_t err_n_bytes);

/* Writes one Event (wall_time_sec, step, a Summary of every queued value in
 * the order queued) and flushes the file.  Nothing queued writes nothing.
 * Returns 0, or -1 with err (a write error; the writer is then unusable). */
int event_writer_write(EventWriter *w, long step, double wall_time_sec, char *err, size_t err_n_bytes);

/* The most heap memory (bytes) a writer holds for the histograms of
 * n_histograms tensors queued for one event: per histogram the bucket limits
 * and counts (2 doubles a bucket) and their encoding (up to 2 x 9 bytes),
 * one counts array while computing, and 64 KiB for the rest of the event. */
size_t event_writer_max_n_bytes(size_t n_histograms);

/* Closes the file and frees the writer; queued values not yet written are
 * dropped.  Returns 0, or -1 with err when the close failed.  NULL is fine. */
int event_writer_close(EventWriter *w, char *err, size_t err_n_bytes);

/* Seconds since the epoch with microseconds, for wall_time. */
double event_wall_time_now(void);

#endif
