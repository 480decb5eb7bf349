/* trace.h — a timeline of training steps as Chrome trace-event JSON, the
 * format Perfetto (ui.perfetto.dev) and chrome://tracing open.
 *
 * Where it sits: train/; the trainer writes one span per phase of every tower
 * and of the parameter server after each step (`tower train --trace FILE`,
 * `tower bench --trace FILE`), from the timestamps tower/ and train/trainer.c
 * record anyway, so tracing costs nothing when it is off (no Trace) and a
 * few hundred bytes of buffered output per step when it is on.
 * What it does not do: measure anything itself, or know towers or modes:
 * rows and spans are whatever the caller names.
 *
 * The file is one JSON object, {"displayTimeUnit": "ms", "traceEvents": [...]}:
 *   row names:  {"ph": "M", "name": "thread_name", "pid": 1, "tid": ROW, "args": {"name": "tower_0"}}
 *   row order:  {"ph": "M", "name": "thread_sort_index", ..., "args": {"sort_index": ROW}}
 *   spans:      {"ph": "X", "name": "forward", "cat": CAT, "pid": 1, "tid": ROW, "ts": US, "dur": US}
 *   markers:    {"ph": "i", "name": "step 12", "s": "g", "pid": 1, "tid": 0, "ts": US}
 * ts is in microseconds since trace_open (tower_now_sec's clock).  The file
 * is valid JSON only after trace_close has written the closing brackets.
 */
#ifndef TOWER_TRAIN_TRACE_H
#define TOWER_TRAIN_TRACE_H

#include <stddef.h>

typedef struct Trace Trace;

/* Create (truncate) path and write the header; time 0 is now.  The process
 * shows as process_name in the viewer.  NULL with one line in err when the
 * file cannot be created. */
Trace *trace_open(const char *path, const char *process_name, char *err, size_t err_n_bytes);

/* Name row `row` (>= 0); rows are shown in increasing row order. */
void trace_name_row(Trace *tr, int row, const char *name);

/* A span [start_sec, end_sec] (tower_now_sec clock) named `name` in
 * category `cat` on row `row`.  Spans with end_sec < start_sec or a zero
 * start are skipped (a phase that did not run). */
void trace_span(Trace *tr, int row, const char *name, const char *cat, double start_sec, double end_sec);

/* An instant marker across every row at t_sec (tower_now_sec clock). */
void trace_marker(Trace *tr, const char *name, double t_sec);

/* Write the closing brackets, close the file and free tr.  Returns 0, or -1
 * with one line in err when any write failed (disk full...), the cut file
 * removed.  NULL: 0. */
int trace_close(Trace *tr, char *err, size_t err_n_bytes);

#endif
