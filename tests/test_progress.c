/* test_progress.c — the progress line's formatting and drawing (cmd/progress.h).
 *
 * What it proves: durations and bars are rendered as documented (tqdm's
 * forms), the line fits the terminal width and carries the caller's text,
 * rate and time left are computed from the line's own progress, and the
 * drawing writes carriage-return updates and one newline per line only when
 * enabled (a disabled or not-yet-due line writes nothing).  The tty path of
 * `tower train` itself is tested by tests/test_eco_cli.sh under script(1).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/progress.h"

#include "tests/check.h"

static void expect_duration(double s, const char *want) {
    char buf[32];
    progress_format_duration(buf, sizeof buf, s);
    CHECK(!strcmp(buf, want), "duration %g -> '%s', expected '%s'", s, buf, want);
}

static void expect_bar(double fraction, int width, const char *want) {
    char buf[64];
    progress_format_bar(buf, sizeof buf, fraction, width);
    CHECK(!strcmp(buf, want), "bar(%g, %d) -> '%s', expected '%s'", fraction, width, buf, want);
}

/* The text between the first two '|' of a line (the bar), or "" */
static void bar_of(const char *line, char *out, size_t n) {
    const char *a = strchr(line, '|'), *b = a ? strchr(a + 1, '|') : NULL;
    out[0] = '\0';
    if (a && b && (size_t)(b - a - 1) < n) {
        memcpy(out, a + 1, (size_t)(b - a - 1));
        out[b - a - 1] = '\0';
    }
}

/* Everything written to f so far. */
static char *contents(FILE *f) {
    fflush(f);
    long n = ftell(f);
    char *s = calloc((size_t)n + 1, 1);
    rewind(f);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = '\0';
    fseek(f, 0, SEEK_END);
    return s;
}

/* The run's total and warnings during a run (issue 14: the bar followed the
 * epoch, and warnings landed inside the line). */
static void test_run_and_warnings(void) {
    /* --max_steps 150 of 128 on 60000 examples: the run is 19200 examples, not an epoch. */
    CHECK(progress_run_total(150, 128, 128, 0, 60000) == 19200, "max_steps 150: %ld",
          progress_run_total(150, 128, 128, 0, 60000));
    /* --num_epochs 2 of 100 examples, batches of 16, ends first: 12 whole batches. */
    CHECK(progress_run_total(1000000, 16, 16, 2, 100) == 192, "num_epochs 2: %ld",
          progress_run_total(1000000, 16, 16, 2, 100));
    /* --max_steps first. */
    CHECK(progress_run_total(5, 16, 16, 2, 100) == 80, "max_steps 5: %ld", progress_run_total(5, 16, 16, 2, 100));
    /* Unknown epoch size: max_steps alone. */
    CHECK(progress_run_total(7, 10, 10, 3, 0) == 70, "unknown epoch: %ld", progress_run_total(7, 10, 10, 3, 0));
    /* Asynchronous ranks step apart, each update one worker's batch: `mpirun -np 2 tower train --sync_replicas false
     * --batch_size 32 --num_epochs 1` on 60,000 examples ended at step 1874 (each rank's input holds 937 whole global
     * batches of 64, a rank using its 32 of each), 59,968 examples: the bar counted 1875 updates and ended at 99%. */
    CHECK(progress_run_total(100000, 32, 64, 1, 60000) == 1874L * 32, "async num_epochs 1: %ld",
          progress_run_total(100000, 32, 64, 1, 60000));
    /* ... and its --max_steps in updates of one worker's batch. */
    CHECK(progress_run_total(1000, 32, 64, 1, 60000) == 1000L * 32, "async max_steps: %ld",
          progress_run_total(1000, 32, 64, 1, 60000));

    /* A warning erases the drawn line first: it starts a line of its own, and the bar is redrawn after it. */
    FILE *f = tmpfile();
    Progress p;
    progress_start(&p, f, 1, "epoch 1/3", "ex", 0, 100, 0.0);
    progress_update(&p, 10, "step 1");
    progress_warn(&p, f, "bad record (skipped)");
    CHECK(!p.drawn, "the line is still marked drawn after a warning");
    progress_update(&p, 20, "step 2");
    progress_relabel(&p, "epoch 2/3");
    progress_end(&p, 30, "step 3");
    char *s = contents(f);
    const char *w = strstr(s, "warning: bad record (skipped)\n");
    CHECK(w != NULL, "no warning line in '%s'", s);
    if (w) {
        CHECK(w >= s + 4 && !strncmp(w - 4, "\r\033[K", 4), "the warning does not follow an erased line: '%.*s'", (int)(w - s), s);
        CHECK(strstr(w, "\repoch 1/3  20%") != NULL, "the line is not redrawn after the warning");
        CHECK(strstr(w, "\repoch 2/3  30%") != NULL, "the relabelled line is not drawn");
    }
    free(s);
    fclose(f);
}

int main(void) {
    test_run_and_warnings();
    /* Durations: MM:SS under an hour, H:MM:SS from an hour, rounded down; "?" when unknown. */
    expect_duration(0, "00:00");
    expect_duration(59.99, "00:59");
    expect_duration(61, "01:01");
    expect_duration(3599.5, "59:59");
    expect_duration(3600, "1:00:00");
    expect_duration(86399, "23:59:59");
    expect_duration(90061, "25:01:01");
    expect_duration(-1, "?");
    expect_duration(NAN, "?");
    expect_duration(INFINITY, "?");
    char small[4];
    progress_format_duration(small, sizeof small, 3725);
    CHECK(strlen(small) == 3, "a small buffer is not respected ('%s')", small);

    /* Bars: '#' per full cell, a digit for the tenths of the next, spaces after. */
    expect_bar(0.0, 10, "          ");
    expect_bar(0.5, 10, "#####     ");
    expect_bar(0.25, 10, "##5       ");
    expect_bar(0.99, 10, "#########9");
    expect_bar(1.0, 10, "##########");
    expect_bar(1.7, 4, "####");
    expect_bar(-0.3, 4, "    ");
    expect_bar(NAN, 4, "    ");
    expect_bar(0.5, 0, "");
    expect_bar(1.0 / 3.0, 3, "#  ");
    char tiny[4];
    progress_format_bar(tiny, sizeof tiny, 1.0, 10);
    CHECK(!strcmp(tiny, "###"), "bar in a 4-byte buffer: '%s'", tiny);

    /* A line: label, percentage, bar, the caller's text, [elapsed<left, rate]. */
    char line[512], bar[64];
    int len = progress_format_line(line, sizeof line, "epoch 2/5", "ex", 50, 0, 100, 10.0, "step 7, loss 0.532", 100);
    CHECK(len == (int)strlen(line) && len <= 99, "length %d of '%s'", len, line);
    CHECK(!strncmp(line, "epoch 2/5  50%|", 15), "start of '%s'", line);
    CHECK(strstr(line, "| step 7, loss 0.532 [00:10<00:10, 5.0 ex/s]") != NULL, "end of '%s'", line);
    bar_of(line, bar, sizeof bar);
    CHECK(strlen(bar) == 30 && !strncmp(bar, "###############", 15) && bar[15] == ' ', "bar '%s' (30 cells, half full)", bar);
    /* The bar takes what room is left: a narrower terminal, a shorter bar, never wider than cols - 1. */
    len = progress_format_line(line, sizeof line, "epoch 2/5", "ex", 50, 0, 100, 10.0, "step 7, loss 0.532", 70);
    bar_of(line, bar, sizeof bar);
    CHECK(len <= 69 && strlen(bar) >= 5 && strlen(bar) < 30, "70 columns: '%s' (bar %zu)", line, strlen(bar));
    CHECK(len == 69, "70 columns: the bar does not fill the line (%d)", len);
    len = progress_format_line(line, sizeof line, "epoch 2/5", "ex", 50, 0, 100, 10.0,
                               "a very long text that cannot fit in a narrow terminal at all", 40);
    CHECK(len <= 39 && (int)strlen(line) == len, "40 columns: %d characters", len);
    /* 80 columns and a long postfix: the postfix is cut, the rate and the closing bracket stay. */
    len = progress_format_line(line, sizeof line, "epoch 1/320", "ex", 21, 0, 3200000, 2.0,
                               "step 21, loss 2.297, acc 0.125, lr 0.01, something more", 80);
    CHECK(len <= 79 && strstr(line, "[00:02<") && !strcmp(line + len - 12, ", 10.5 ex/s]") && strstr(line, "| step 21"),
          "80 columns, a long postfix: '%s'", line);
    /* Rate and time left count from the line's start (a resumed epoch). */
    progress_format_line(line, sizeof line, "eval", "ex", 60, 50, 100, 5.0, NULL, 120);
    CHECK(strstr(line, "[00:05<00:20, 2.0 ex/s]") != NULL, "rate from start_done: '%s'", line);
    CHECK(strstr(line, " 60%|") != NULL, "percentage in '%s'", line);
    /* Nothing done yet: the time left is unknown. */
    progress_format_line(line, sizeof line, "eval", "ex", 0, 0, 100, 0.0, NULL, 120);
    CHECK(strstr(line, "[00:00<?, 0.0 ex/s]") != NULL, "start: '%s'", line);
    /* Unknown total: no bar, no percentage. */
    progress_format_line(line, sizeof line, "train", "ex", 300, 0, 0, 3.0, "step 3", 120);
    CHECK(!strcmp(line, "train step 3 [00:03, 100.0 ex/s]"), "open-ended line '%s'", line);
    /* Past 100% (a batch crossing the end) stays at 100%. */
    progress_format_line(line, sizeof line, "x", "ex", 130, 0, 100, 1.0, NULL, 120);
    CHECK(strstr(line, "100%|") != NULL, "over 100%%: '%s'", line);

    /* Drawing: carriage-return updates, throttled, one newline at the end. */
    FILE *f = tmpfile();
    Progress p;
    progress_start(&p, f, 1, "epoch 1/1", "ex", 0, 10, 0.0);
    progress_update(&p, 3, "step 3");
    progress_update(&p, 4, "step 4"); /* within 0.1 s of the last draw: skipped */
    char *s = contents(f);
    CHECK(!strncmp(s, "\repoch 1/1  30%|", 16) && !strstr(s, "step 4") && !strchr(s, '\n'), "first draw '%s'", s);
    free(s);
    progress_clear(&p);
    s = contents(f);
    CHECK(strstr(s, "\r\033[K") && !p.drawn, "clear did not erase the line");
    free(s);
    progress_update(&p, 5, "step 5"); /* after a clear: drawn again at once */
    progress_end(&p, 10, "step 10");
    s = contents(f);
    CHECK(strstr(s, "step 5") && strstr(s, "100%|") && strstr(s, "step 10"), "end draw missing in '%s'", s);
    CHECK(s[strlen(s) - 1] == '\n' && strchr(s, '\n') == s + strlen(s) - 1, "not exactly one newline, at the end");
    free(s);
    fclose(f);

    /* Disabled, or within the delay: nothing at all. */
    f = tmpfile();
    progress_start(&p, f, 0, "eval", "ex", 0, 10, 0.0);
    progress_update(&p, 5, "x");
    progress_end(&p, 10, "x");
    progress_start(&p, f, 1, "eval", "ex", 0, 10, 60.0);
    progress_update(&p, 5, "x");
    progress_end(&p, 10, "x");
    fflush(f);
    CHECK(ftell(f) == 0, "%ld bytes written by a disabled or delayed line", ftell(f));
    fclose(f);
    /* Not a terminal: not wanted. */
    f = tmpfile();
    CHECK(!progress_wanted(f, 0) && !progress_wanted(f, 1), "a regular file counts as a terminal");
    fclose(f);

    if (check_failures) {
        fprintf(stderr, "%d check(s) failed\n", check_failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
