/* progress.h — the live progress line of `tower train`, `eval` and `convert`.
 *
 * Where it sits: cmd/ only; the subcommands feed it counts, it draws one
 * line on a terminal, tqdm-style:
 *   epoch 2/5  40%|############                  | step 1234, loss 0.532, acc 0.812 [00:12<00:18, 2000.0 ex/s]
 * redrawn in place with a carriage return at most every 0.1 s, and kept
 * (a newline) when the line ends.  For training the line follows the whole
 * run (--max_steps or --num_epochs, whichever ends it), the epoch shown in
 * its label.  The rate is over the line's own progress; the time left is the
 * rest of the line at that rate.  When the output is not a terminal (or --no_progress)
 * nothing is drawn and the subcommands print their log lines instead.
 * What it does not do: no colours, no multi-line bars; one Progress per
 * loop, driven by that loop (only progress_warn comes from other threads).
 */
#ifndef TOWER_CMD_PROGRESS_H
#define TOWER_CMD_PROGRESS_H

#include <stddef.h>
#include <stdio.h>

#define PROGRESS_MIN_INTERVAL_SEC 0.1  /* throttle: at most 10 redraws a second */
#define PROGRESS_LABEL_MAX 48
#define PROGRESS_UNIT_MAX 16

typedef struct {
    FILE *out;
    int enabled;                    /* 0: every call is a no-op */
    char label[PROGRESS_LABEL_MAX]; /* "epoch 2/5", "eval" */
    char unit[PROGRESS_UNIT_MAX];   /* what the counts count, for the rate: "ex" -> "ex/s" */
    long total;                     /* count at 100% (<= 0: unknown, no bar and no time left) */
    long start_done;                /* count when the line started (a resumed epoch starts part-way) */
    double start_sec;               /* monotonic clock at the start */
    double last_draw_sec;
    double delay_sec;               /* nothing is drawn before this many seconds (short inputs stay quiet) */
    int drawn;                      /* a partial line is on the screen */
    int cols;                       /* terminal width, 80 when unknown */
} Progress;

/* 1 when a live line should be drawn on out: out is a terminal and
 * no_progress is 0. */
int progress_wanted(FILE *out, int no_progress);

/* Starts a line (draws nothing yet).  enabled 0 makes every later call a
 * no-op.  label and unit are copied (truncated to fit).  done is the count
 * the line starts from. */
void progress_start(Progress *p, FILE *out, int enabled, const char *label, const char *unit, long done, long total,
                    double delay_sec);

/* Redraws the line with count done and the caller's text (e.g. "step 12,
 * loss 0.53"; may be NULL), unless the last redraw was less than
 * PROGRESS_MIN_INTERVAL_SEC ago or delay_sec has not passed. */
void progress_update(Progress *p, long done, const char *postfix);

/* Draws the line a last time (whatever the throttle) and ends it with a
 * newline, when anything was drawn.  The Progress may then be started again. */
void progress_end(Progress *p, long done, const char *postfix);

/* Erases the partial line so that another message can be printed; the
 * next progress_update draws it again. */
void progress_clear(Progress *p);

/* Prints "warning: LINE" and a newline on `to` (stderr) after erasing the
 * partial line (p may be NULL), so a warning never lands inside the bar;
 * the next progress_update draws the line again.  Safe to call from another
 * thread (the input pipeline's reader) while the owner draws: every drawing
 * call takes one process-wide lock. */
void progress_warn(Progress *p, FILE *to, const char *line);

/* Changes the label ("epoch 3/5") without restarting the line's clock. */
void progress_relabel(Progress *p, const char *label);

/* Examples a training run will have consumed when it ends: max_steps global
 * steps of step_examples each (the global batch, one worker's batch in an
 * asynchronous run: trainer_step_examples), or fewer when num_epochs (> 0)
 * epochs of examples_per_epoch (> 0) end it first: whole global batches
 * (global_batch, the job's examples a step; every rank's input drops its last
 * partial one, and asynchronous ranks reading the whole data each use their
 * share of every global batch).  The progress line of `tower train` runs from
 * 0 to this. */
long progress_run_total(long max_steps, long step_examples, long global_batch, long num_epochs,
                        long examples_per_epoch);

/* ---- the formatting, pure functions (tested on their own) ---- */

/* "MM:SS" below an hour, "H:MM:SS" from an hour on, "?" for a negative or
 * non-finite time; seconds are rounded down.  Writes at most buf_n_bytes. */
void progress_format_duration(char *buf, size_t buf_n_bytes, double seconds);

/* A bar of width cells (buf needs width + 1 bytes): fraction in [0, 1]
 * (clamped; NaN is 0) of the cells, each full cell '#', then one partial
 * cell as a digit 1-9 for the tenths of a cell, then spaces (tqdm's ASCII
 * bar). */
void progress_format_bar(char *buf, size_t buf_n_bytes, double fraction, int width);

/* The whole line (no carriage return, no newline), at most cols - 1
 * characters: "LABEL PCT%|BAR| POSTFIX [ELAPSED<LEFT, RATE UNIT/s]", the
 * bar taking the room left (5 to 30 cells); with total <= 0,
 * "LABEL POSTFIX [ELAPSED, RATE UNIT/s]".  rate = (done - start_done) /
 * elapsed_sec.  Returns the length written. */
int progress_format_line(char *buf, size_t buf_n_bytes, const char *label, const char *unit, long done,
                         long start_done, long total, double elapsed_sec, const char *postfix, int cols);

#endif
