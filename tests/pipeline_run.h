/* pipeline_run.h — runs an input pipeline to its end and keeps what it
 * delivered, for the pipeline tests that compare whole streams
 * (test_io_pipeline_encoded, test_io_pipeline_imagefolder).
 *
 * Where it sits: tests/ only, over io/pipeline.h's open/next/release/close.
 * What it does not do: no checks of its own; the caller compares.
 */
#ifndef TOWER_TEST_PIPELINE_RUN_H
#define TOWER_TEST_PIPELINE_RUN_H

#include <string.h>

#include "io/pipeline.h"

/* Opens a pipeline on c and takes every batch until the end: the first cap
 * examples' floats go to x (cap, example_n_floats) and their labels to
 * labels (cap), either NULL to drop them; *st (when not NULL) gets the
 * stats at the end or at a failure.  Returns the examples delivered, or -1
 * with the pipeline's line in err when it could not open or stopped on a
 * bad record. */
static inline long pipeline_run_floats(const PipelineConfig *c, float *x, int *labels, long cap, PipelineStats *st,
                                       char *err, size_t err_n_bytes) {
    Pipeline *p = pipeline_open(c, err, err_n_bytes);
    if (!p) return -1;
    long n = 0;
    for (;;) {
        PipelineBatch *b;
        const int got = pipeline_next(p, &b, err, err_n_bytes);
        if (got < 0) n = -1;
        if (got <= 0) break;
        for (int i = 0; i < b->n; i++, n++) {
            if (n >= cap) continue;
            if (x) memcpy(x + (size_t)n * b->example_n_floats, b->x + (size_t)i * b->example_n_floats,
                          b->example_n_floats * sizeof(float));
            if (labels) labels[n] = b->labels[i];
        }
        pipeline_release(p, b);
    }
    if (st) pipeline_stats(p, st);
    pipeline_close(p);
    return n;
}

#endif
