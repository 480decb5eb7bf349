/* progress.c — the live progress line (see progress.h).
 *
 * Where it sits: cmd/; drawing is "\r" + the line + "\033[K" (erase the rest
 * of the old line) on the caller's FILE, flushed at every draw.
 * What it does not do: it never reads the clock for the formatting
 * functions, so those are pure and tested alone.
 */
#include "cmd/progress.h"

#include "base/escape.h"

#include <math.h>
#include <pthread.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One terminal: drawing, erasing and warnings from other threads (the input
 * pipeline's reader) take turns. */
static pthread_mutex_t g_terminal_mu = PTHREAD_MUTEX_INITIALIZER;

int progress_wanted(FILE *out, int no_progress) { return !no_progress && isatty(fileno(out)); }

static int terminal_cols(FILE *out) {
    struct winsize ws;
    if (ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
    return 80;
}

void progress_start(Progress *p, FILE *out, int enabled, const char *label, const char *unit, long done, long total,
                    double delay_sec) {
    pthread_mutex_lock(&g_terminal_mu); /* progress_warn may be reading p from another thread */
    memset(p, 0, sizeof *p);
    p->out = out;
    p->enabled = enabled;
    snprintf(p->label, sizeof p->label, "%s", label ? label : "");
    snprintf(p->unit, sizeof p->unit, "%s", unit ? unit : "it");
    p->start_done = done;
    p->total = total;
    p->delay_sec = delay_sec;
    p->start_sec = now_sec();
    p->last_draw_sec = -1e30;
    p->cols = enabled ? terminal_cols(out) : 80;
    pthread_mutex_unlock(&g_terminal_mu);
}

static void draw(Progress *p, long done, const char *postfix, double t) {
    char line[1024];
    progress_format_line(line, sizeof line, p->label, p->unit, done, p->start_done, p->total, t - p->start_sec,
                         postfix, p->cols);
    fprintf(p->out, "\r%s\033[K", line);
    fflush(p->out);
    p->drawn = 1;
    p->last_draw_sec = t;
}

void progress_update(Progress *p, long done, const char *postfix) {
    if (!p->enabled) return;
    double t = now_sec();
    if (t - p->start_sec < p->delay_sec || t - p->last_draw_sec < PROGRESS_MIN_INTERVAL_SEC) return;
    pthread_mutex_lock(&g_terminal_mu);
    draw(p, done, postfix, t);
    pthread_mutex_unlock(&g_terminal_mu);
}

void progress_end(Progress *p, long done, const char *postfix) {
    if (!p->enabled) return;
    double t = now_sec();
    if (!p->drawn && t - p->start_sec < p->delay_sec) return;
    pthread_mutex_lock(&g_terminal_mu);
    draw(p, done, postfix, t);
    fputc('\n', p->out);
    fflush(p->out);
    p->drawn = 0;
    pthread_mutex_unlock(&g_terminal_mu);
}

static void clear_locked(Progress *p) {
    if (!p->enabled || !p->drawn) return;
    fputs("\r\033[K", p->out);
    fflush(p->out);
    p->drawn = 0;
    p->last_draw_sec = -1e30;
}

void progress_clear(Progress *p) {
    pthread_mutex_lock(&g_terminal_mu);
    clear_locked(p);
    pthread_mutex_unlock(&g_terminal_mu);
}

void progress_warn(Progress *p, FILE *to, const char *line) {
    pthread_mutex_lock(&g_terminal_mu);
    if (p) clear_locked(p);
    char safe[16384]; /* a line naming a file of PATH_MAX bytes, escaped */
    fprintf(to, "warning: %s\n", escape_str(safe, sizeof safe, line));
    fflush(to);
    pthread_mutex_unlock(&g_terminal_mu);
}

void progress_relabel(Progress *p, const char *label) {
    pthread_mutex_lock(&g_terminal_mu);
    snprintf(p->label, sizeof p->label, "%s", label ? label : "");
    pthread_mutex_unlock(&g_terminal_mu);
}

long progress_run_total(long max_steps, long step_examples, long global_batch, long num_epochs,
                        long examples_per_epoch) {
    if (max_steps < 0) max_steps = 0;
    long total = max_steps * step_examples;
    if (num_epochs > 0 && examples_per_epoch > 0 && global_batch > 0) {
        long batches = (long)((double)num_epochs * (double)examples_per_epoch / (double)global_batch);
        if (batches * global_batch < total) total = batches * global_batch;
    }
    return total;
}

void progress_format_duration(char *buf, size_t n, double seconds) {
    if (!isfinite(seconds) || seconds < 0.0 || seconds > 1e9) {
        snprintf(buf, n, "?");
        return;
    }
    long s = (long)seconds;
    if (s < 3600) snprintf(buf, n, "%02ld:%02ld", s / 60, s % 60);
    else snprintf(buf, n, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
}

void progress_format_bar(char *buf, size_t n, double fraction, int width) {
    if (n == 0) return;
    if (width < 0) width = 0;
    if ((size_t)width + 1 > n) width = (int)n - 1;
    if (!(fraction > 0.0)) fraction = 0.0; /* also NaN */
    if (fraction > 1.0) fraction = 1.0;
    long tenths = (long)(fraction * width * 10.0 + 1e-6); /* 1/3 of 3 cells is one full cell */
    int full = (int)(tenths / 10), part = (int)(tenths % 10);
    int i = 0;
    for (; i < full && i < width; i++) buf[i] = '#';
    if (i < width && part > 0) buf[i++] = (char)('0' + part);
    for (; i < width; i++) buf[i] = ' ';
    buf[width] = '\0';
}

int progress_format_line(char *buf, size_t n, const char *label, const char *unit, long done, long start_done,
                         long total, double elapsed_sec, const char *postfix, int cols) {
    if (n == 0) return 0;
    if (cols < 20) cols = 20;
    size_t max_len = (size_t)cols - 1 < n - 1 ? (size_t)cols - 1 : n - 1;
    double rate = elapsed_sec > 0.0 ? (double)(done - start_done) / elapsed_sec : 0.0;
    char elapsed[32], left[32], tail[160];
    progress_format_duration(elapsed, sizeof elapsed, elapsed_sec);
    const char *pf = postfix && postfix[0] ? postfix : NULL;
    char pf_cut[256]; /* the postfix cut at its end where the line is too narrow for all of it */
    int len;
    if (total > 0) {
        progress_format_duration(left, sizeof left, rate > 0.0 ? (double)(total - done) / rate : NAN);
        snprintf(tail, sizeof tail, "[%s<%s, %.1f %s/s]", elapsed, left, rate, unit);
        double fraction = (double)done / (double)total;
        int pct = (int)floor(100.0 * (fraction < 0 ? 0 : fraction > 1 ? 1 : fraction));
        /* Everything but the bar, to see how much room the bar has. */
        int rest = snprintf(NULL, 0, "%s %3d%%|| %s%s%s", label, pct, pf ? pf : "", pf ? " " : "", tail);
        /* Too narrow for the smallest bar: the postfix gives way first, then (below) the line's end. */
        int over = rest + 5 - (int)max_len;
        if (over > 0 && pf) {
            int keep = (int)strlen(pf) - over;
            if (keep >= 4 && keep < (int)sizeof pf_cut) {
                snprintf(pf_cut, sizeof pf_cut, "%.*s", keep, pf);
                pf = pf_cut;
            } else if (keep < 4) {
                pf = NULL;
            }
            rest = snprintf(NULL, 0, "%s %3d%%|| %s%s%s", label, pct, pf ? pf : "", pf ? " " : "", tail);
        }
        int width = (int)max_len - rest;
        if (width > 30) width = 30;
        if (width < 5) width = 5;
        char bar[40];
        progress_format_bar(bar, sizeof bar, fraction, width);
        len = snprintf(buf, n, "%s %3d%%|%s| %s%s%s", label, pct, bar, pf ? pf : "", pf ? " " : "", tail);
    } else {
        snprintf(tail, sizeof tail, "[%s, %.1f %s/s]", elapsed, rate, unit);
        len = snprintf(buf, n, "%s %s%s%s", label, pf ? pf : "", pf ? " " : "", tail);
    }
    if (len < 0) len = 0;
    if ((size_t)len > max_len) {
        buf[max_len] = '\0';
        len = (int)max_len;
    }
    return len;
}
