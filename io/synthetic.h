/* synthetic.h — a global batch of random data held in memory, for
 * `tower train --synthetic` and `tower bench` (tf_cnn_benchmarks'
 * synthetic data): the input pipeline's cost taken out of a measurement.
 *
 * Where it sits: io/, beside the pipeline whose PipelineBatch it fills;
 * the trainer (train/) hands the same batch to the towers every step.
 * What it does not do: read files, augment, or change between steps.
 */
#ifndef TOWER_IO_SYNTHETIC_H
#define TOWER_IO_SYNTHETIC_H

#include <stddef.h>
#include <stdint.h>

#include "base/host_alloc.h"
#include "io/pipeline.h"

/* Fill b with n examples of example_n_floats seeded uniform [-1, 1)
 * floats each and uniform labels below num_classes (one stream from seed),
 * split into n_shards shards of shard_sizes[] examples (pipeline_split_shards).
 * b->x (n, example_n_floats) and b->labels (n) come from alloc and are
 * freed by synthetic_batch_free.  Returns 0, or -1 with one line in err
 * (out of memory; b then holds nothing). */
int synthetic_batch_create(PipelineBatch *b, int n, size_t example_n_floats, int num_classes, uint64_t seed,
                           int n_shards, const int *shard_sizes, HostAlloc alloc, char *err, size_t err_n_bytes);

/* Host bytes synthetic_batch_create takes for n examples (a bound: each
 * buffer rounded up by a page). */
size_t synthetic_batch_n_bytes(int n, size_t example_n_floats);

/* Free b's buffers (alloc as given to create); b may be zeroed. */
void synthetic_batch_free(PipelineBatch *b, HostAlloc alloc);

#endif
