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
 * What it does not do: move anything, or split a variable across tasks
 * (TensorFlow's partitioners): a variable lives whole on one task.
 */
#ifndef TOWER_PS_PLACEMENT_H
#define TOWER_PS_PLACEMENT_H

#include <stddef.h>

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

#endif
