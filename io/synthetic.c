/* synthetic.c — the in-memory random batch (see synthetic.h). */
#include "io/synthetic.h"

#include <stdio.h>
#include <string.h>

#include "io/rng.h"

int synthetic_batch_create(PipelineBatch *b, int n, size_t example_n_floats, int num_classes, uint64_t seed,
                           int n_shards, const int *shard_sizes, HostAlloc alloc, char *err, size_t err_n_bytes) {
    memset(b, 0, sizeof *b);
    float *x = alloc.alloc((size_t)n * example_n_floats * sizeof(float), alloc.ctx);
    int32_t *labels = alloc.alloc((size_t)n * sizeof(int32_t), alloc.ctx);
    if (!x || !labels) {
        if (x) alloc.free(x, alloc.ctx);
        if (labels) alloc.free(labels, alloc.ctx);
        snprintf(err, err_n_bytes, "out of memory for a synthetic batch of %zu examples", (size_t)n);
        return -1;
    }
    uint64_t state = rng_seed(seed, 0x5e17, 0);
    for (size_t i = 0; i < (size_t)n * example_n_floats; i++) x[i] = 2.0f * rng_uniform01(&state) - 1.0f;
    for (size_t i = 0; i < (size_t)n; i++) labels[i] = (int32_t)rng_below(&state, (uint64_t)num_classes);
    b->x = x;
    b->labels = labels;
    b->n = n;
    b->example_n_floats = example_n_floats;
    pipeline_split_shards(n, n_shards, shard_sizes, b->shard_offset, b->shard_n);
    return 0;
}

size_t synthetic_batch_n_bytes(int n, size_t example_n_floats) {
    return (size_t)n * (example_n_floats * sizeof(float) + sizeof(int32_t)) + 2 * 4096;
}

void synthetic_batch_free(PipelineBatch *b, HostAlloc alloc) {
    if (b->x) alloc.free(b->x, alloc.ctx);
    if (b->labels) alloc.free(b->labels, alloc.ctx);
    memset(b, 0, sizeof *b);
}
