/* trace.c — Chrome trace-event JSON writer (format: trace.h).
 *
 * Where it sits: cmd/, called by the trainer after each step.  It streams
 * events through stdio's buffer and escapes names; it measures nothing.
 */
#include "train/trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tower/tower.h"

struct Trace {
    FILE *f;
    char path[1024];
    double t0_sec;   /* tower_now_sec() at open: ts 0 */
    int n_events;    /* events written, for the commas */
};

/* s as a JSON string body (quotes, backslashes and control characters escaped). */
static void write_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

static void begin_event(Trace *tr) {
    fputs(tr->n_events++ ? ",\n" : "\n", tr->f);
}

Trace *trace_open(const char *path, const char *process_name, char *err, size_t err_n_bytes) {
    Trace *tr = calloc(1, sizeof *tr);
    if (!tr) {
        snprintf(err, err_n_bytes, "--trace %s: out of memory", path);
        return NULL;
    }
    tr->f = fopen(path, "w");
    if (!tr->f) {
        snprintf(err, err_n_bytes, "--trace %s: cannot create the file: %s", path, strerror(errno));
        free(tr);
        return NULL;
    }
    snprintf(tr->path, sizeof tr->path, "%s", path);
    tr->t0_sec = tower_now_sec();
    fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [", tr->f);
    begin_event(tr);
    fputs("{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 1, \"tid\": 0, \"args\": {\"name\": ", tr->f);
    write_json_string(tr->f, process_name);
    fputs("}}", tr->f);
    return tr;
}

void trace_name_row(Trace *tr, int row, const char *name) {
    begin_event(tr);
    fprintf(tr->f, "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 1, \"tid\": %d, \"args\": {\"name\": ", row);
    write_json_string(tr->f, name);
    fputs("}},\n", tr->f);
    fprintf(tr->f, "{\"ph\": \"M\", \"name\": \"thread_sort_index\", \"pid\": 1, \"tid\": %d, \"args\": {\"sort_index\": %d}}",
            row, row);
    tr->n_events++;
}

void trace_span(Trace *tr, int row, const char *name, const char *cat, double start_sec, double end_sec) {
    if (start_sec <= 0.0 || end_sec < start_sec) return;
    begin_event(tr);
    fputs("{\"ph\": \"X\", \"name\": ", tr->f);
    write_json_string(tr->f, name);
    fputs(", \"cat\": ", tr->f);
    write_json_string(tr->f, cat);
    fprintf(tr->f, ", \"pid\": 1, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f}", row, (start_sec - tr->t0_sec) * 1e6,
            (end_sec - start_sec) * 1e6);
}

void trace_marker(Trace *tr, const char *name, double t_sec) {
    begin_event(tr);
    fputs("{\"ph\": \"i\", \"s\": \"g\", \"name\": ", tr->f);
    write_json_string(tr->f, name);
    fprintf(tr->f, ", \"pid\": 1, \"tid\": 0, \"ts\": %.3f}", (t_sec - tr->t0_sec) * 1e6);
}

int trace_close(Trace *tr, char *err, size_t err_n_bytes) {
    if (!tr) return 0;
    fputs("\n]}\n", tr->f);
    /* A full disk makes the buffered writes fail at this flush (or already did:
     * then the flush retries what is left and fails the same way). */
    int bad = fflush(tr->f) != 0 || ferror(tr->f);
    const int flush_errno = bad ? errno : 0;
    if (fclose(tr->f) != 0 && !bad) bad = 1;
    const int why = flush_errno ? flush_errno : errno;
    if (bad) {
        snprintf(err, err_n_bytes, "--trace %s: write failed: %s", tr->path, strerror(why));
        remove(tr->path); /* cut JSON no viewer opens */
    }
    free(tr);
    return bad ? -1 : 0;
}
