/* placement.h — which parameter-server rank holds each variable, when the
 * variables are split into shards across the ranks of a job
 * (--variable_update parameter_server under mpirun; train/mode_ps_mpi.c).
 *
 * Where it sits: ps/, a pure function of the variables' sizes; the mode
 * calls it once at open, on every rank, with the same table, so every rank
 * computes the same placement without talking.
 * The two rules are TensorFlow's ps_strategy of
 * tf.compat.v1.train.replica_device_setter:
 *   round_robin (_RoundRobinStrategy, replica_device_setter's default):
 *       variable i (in table order) goes to task i % n_tasks;
 *   greedy (tf.contrib.training.GreedyLoadBalancingStrategy with
 *       byte_size_load_fn): loads start at 0; for each variable in table
 *       (creation) order, task = np.argmin(loads), the FIRST task with the
 *       least load (ties go to the lowest task number), then
 *       loads[task] += the variable's bytes (n_floats x 4).
 * PsShards: the packed layout of those shards, which ps_mpi and
 * ps_mpi_async share.
 * What it does not do: move anything, or split a variable across tasks
 * (TensorFlow's partitioners): a variable lives whole on one task.
 */
#ifndef TOWER_PS_PLACEMENT_H
#define TOWER_PS_PLACEMENT_H

#include <stddef.h>

#include "model/model.h"

typedef enum { PS_PLACE_GREEDY = 0, PS_PLACE_ROUND_ROBIN = 1 } PsPlacement;

/* The rule a --ps_placement value names: "greedy" or "round_robin".
 * Returns 0, or -1 with one line in err. */
int ps_placement_from_name(const char *name, PsPlacement *rule, char *err, size_t err_n_bytes);

/* "greedy" or "round_robin". */
const char *ps_placement_name(PsPlacement rule);

/* owner[i] = the task in [0, n_tasks) of variable i, for n_vars variables
 * of n_bytes[i] bytes each (n_vars), in table order; task_n_bytes[t]
 * (n_tasks) = the bytes task t then holds.  n_tasks >= 1.
 * Memory belongs to the caller.  Never fails. */
void ps_place_variables(const size_t *n_bytes, int n_vars, int n_tasks, PsPlacement rule, int *owner,
                        size_t *task_n_bytes);

/* The shard layout of a job whose variables are placed on n_ps of its
 * n_ranks ranks: who owns each variable and where each rank's shard lies in
 * the packed layout (rank 0's variables, then rank 1's, ..., table order
 * within a rank), as ps_mpi and ps_mpi_async move and apply them. */
typedef struct PsShards {
    int n_ranks;
    int *owner;            /* (n_vars) the rank holding variable i */
    int *order;            /* (n_vars) variable indices by owner, table order within an owner */
    int *counts;           /* (n_ranks) floats of rank r's shard */
    int *displs;           /* (n_ranks + 1) where rank r's shard starts in the packed layout; [n_ranks] = all */
    size_t *shard_n_bytes; /* (n_ranks) bytes of rank r's shard */
} PsShards;

/* Places spec's variables on the first n_ps of n_ranks ranks by rule and
 * fills s (its arrays allocated here; ps_shards_free releases them).
 * Returns 0, or -1 when out of memory (s then holds nothing to free). */
int ps_shards_init(PsShards *s, const ModelSpec *spec, int n_ranks, int n_ps, PsPlacement rule);
void ps_shards_free(PsShards *s);

/* The bytes ps_shards_init allocates for n_vars variables over n_ranks
 * ranks (its arrays; the memory bound's share of a PsShards). */
size_t ps_shards_n_bytes(int n_vars, int n_ranks);

/* The index into s->order of rank r's first variable (r = n_ranks: n_vars). */
int ps_shards_first(const PsShards *s, const ModelSpec *spec, int r);

/* packed (the packed layout, ranks lo..hi-1's shards at their displs) =
 * block's variables (spec's layout, n_params), or back with unpack.  The
 * caller owns both buffers. */
void ps_shards_pack(const PsShards *s, const ModelSpec *spec, int lo, int hi, const float *block, float *packed);
void ps_shards_unpack(const PsShards *s, const ModelSpec *spec, int lo, int hi, const float *packed, float *block);

#endif
