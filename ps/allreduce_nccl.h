/* allreduce_nccl.h — the mean of the towers' gradients on their GPUs with
 * NCCL: the gradient aggregation of replicated_nccl
 * (--variable_update replicated --all_reduce nccl, docs/modes.md).
 *
 * Where it sits: ps/, built only with CUDA and NCCL (TOWER_HAVE_NCCL); the
 * device counterpart of allreduce_host.h.  One NCCL communicator for all
 * the GPUs of the process (ncclCommInitAll), one rank per GPU.  NCCL
 * refuses two ranks on one GPU, so with several towers on a GPU the
 * reduction runs in three stages (the plan: ps/device_groups.h):
 *   1. the GPU's leader (its lowest-numbered tower) sums its towers'
 *      gradients into its own buffer, in tower order (ps_gpu_sum_div);
 *   2. the leaders ncclAllReduce (ncclSum, in place) across the GPUs, then
 *      divide by the number of TOWERS (not of GPUs): the mean;
 *   3. after a barrier of all the tower threads, every other tower of a GPU
 *      copies the mean from its leader's buffer.
 * Summation order: with one GPU, (((g0 + g1) + g2) + ...) / N in tower
 * order, as ps_average_grads, so replicated_nccl on one GPU averages
 * bitwise as ps_cpu does; across GPUs NCCL's order (fixed for a given
 * topology and size) replaces it, which differs by float rounding.  Every
 * tower ends with the same bits (NCCL hands every rank the same result).
 * Each tower's stream here is this object's own: every call has finished
 * on the device when it returns, and the towers' gradients were complete
 * when their compute returned (tower_cuda.c waits), so no stream waits on
 * another.  What it does not do: apply anything (ps/ps_gpu.h), or own the
 * gradient buffers (the towers do).
 */
#ifndef TOWER_PS_ALLREDUCE_NCCL_H
#define TOWER_PS_ALLREDUCE_NCCL_H

#include <stddef.h>

#include "ps/ps_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct AllreduceNccl AllreduceNccl;

/* An all-reduce for n_towers (1 to 64) tower threads, tower t on
 * devices[t] with its gradient in grads[t] ((n_floats) device memory on
 * devices[t], owned by the tower, which must outlive this object).
 * Creates the communicator over the distinct devices, a stream and events
 * per tower, and the threads' barrier.  Returns NULL with one line in err
 * (NCCL's message when ncclCommInitAll fails).  Leaves the caller's current
 * device as it was. */
AllreduceNccl *allreduce_nccl_create(int n_towers, const int *devices, float *const *grads, size_t n_floats, char *err,
                                     size_t err_n_bytes);

/* NCCL ranks (distinct GPUs) of the communicator: this process's. */
int allreduce_nccl_n_ranks(const AllreduceNccl *ar);

/* ---- across processes (replicated_nccl_mpi, train/mode_replicated_nccl_mpi.c) ----
 * One communicator over the GPUs of every process of a job: the caller
 * (train/, which owns MPI) makes the id on one process with
 * allreduce_nccl_unique_id, hands it to every process (MPI_Bcast), and each
 * process creates its part with allreduce_nccl_create_ranks; NCCL rank
 * first_rank + g is this process's g-th distinct GPU.  The mean then runs
 * from one thread (allreduce_nccl_mean_all), after the processes agreed on
 * the step (a process whose step failed must not leave the others inside
 * ncclAllReduce: they would wait for it until TOWER_NCCL_TIMEOUT_SEC). */

#define ALLREDUCE_NCCL_ID_N_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */

/* NCCL ranks of the whole communicator (every process's GPUs). */
int allreduce_nccl_n_ranks_total(const AllreduceNccl *ar);

/* A new communicator id (ncclGetUniqueId) into id (ALLREDUCE_NCCL_ID_N_BYTES
 * bytes, the caller's).  0, or -1 with NCCL's message in err. */
int allreduce_nccl_unique_id(void *id, char *err, size_t err_n_bytes);

/* As allreduce_nccl_create, but this process's n_groups distinct GPUs are
 * NCCL ranks first_rank .. first_rank + n_groups - 1 of n_ranks_total in the
 * communicator named by id (every process calls it with the same id and
 * n_ranks_total: ncclCommInitRank, a collective across the processes), and
 * the mean divides by job_towers (every process's towers).  NULL with one
 * line in err. */
AllreduceNccl *allreduce_nccl_create_ranks(int n_towers, const int *devices, float *const *grads, size_t n_floats,
                                           const void *id, int first_rank, int n_ranks_total, int job_towers,
                                           char *err, size_t err_n_bytes);

/* The distinct GPUs of devices[0 .. n_towers) (1 to 64 towers): the number
 * of NCCL ranks allreduce_nccl_create_ranks gives this process; -1 with err. */
int allreduce_nccl_count_gpus(int n_towers, const int *devices, char *err, size_t err_n_bytes);

/* allreduce_nccl_mean's three stages for every tower of this process, from
 * one thread (the GPUs' collectives inside one ncclGroupStart/End): on
 * return every grads[t] holds the job's mean.  spans (may be NULL):
 * [n_towers], each GPU leader's ncclAllReduce time.  A collective of every
 * process of the communicator.  Never fails: a CUDA or NCCL error, or a
 * peer that never joins, exits with one line (as allreduce_nccl_mean). */
void allreduce_nccl_mean_all(AllreduceNccl *ar, PsGpuSpanMs *spans);

/* Called concurrently by every tower 0..n_towers-1, each on its own thread
 * (collective: it returns on every tower once all have called it): on
 * return, grads[tower] holds the mean of every tower's gradient as it was
 * on entry.  *nccl (may be NULL) gets the device's time of this tower's
 * ncclAllReduce (a GPU's leader; ran = 0 for the other towers).  Never
 * fails: a CUDA or NCCL error exits with one line. */
void allreduce_nccl_mean(AllreduceNccl *ar, int tower, PsGpuSpanMs *nccl);

/* Destroy the communicators, streams, events and the barrier (NULL: no-op).
 * No tower may be inside allreduce_nccl_mean. */
void allreduce_nccl_free(AllreduceNccl *ar);

#ifdef __cplusplus
}
#endif

#endif
