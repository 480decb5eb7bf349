/* model_reference.h — the oracle of the layer graph: the hand-written
 * mnist/cifar10 plans that model/model.c had before the graph (issue 14),
 * kept as a test reference (model_reference.c).
 *
 * Where it sits: tests/ only.  What it does not do: anything a tower uses.
 */
#ifndef TOWER_TESTS_MODEL_REFERENCE_H
#define TOWER_TESTS_MODEL_REFERENCE_H

#include "model/model.h"

typedef struct RefActs RefActs;

/* The old model_spec_init: same contract. */
int ref_spec_init(ModelSpec *spec, const char *name, int H, int W, int C, int num_classes, char *err,
                  size_t err_n_bytes);

/* The old model_forward_flops_per_example. */
double ref_forward_macs_per_example(const ModelSpec *spec);

/* The old workspace, forward and backward (backward OVERWRITES dparams). */
RefActs *ref_acts_create(const ModelSpec *spec, int max_batch);
void ref_acts_free(RefActs *a);
float ref_forward(float *logits, float *ce_loss, RefActs *a, const float *x, const int32_t *labels,
                  const float *params, int B);
void ref_backward(float *dparams, RefActs *a, const float *params);

#endif
