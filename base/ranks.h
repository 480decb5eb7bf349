/* ranks.h — this process's place in a job of several processes (MPI ranks,
 * one per host, launched by mpirun or srun), and the few collectives the
 * trainer needs across them.
 *
 * Where it sits: base/, the floor: the trainer (train/) asks it for its
 * rank and gathers gradients through it, `tower train` (cmd/) starts and
 * ends it.  Only this file's .c includes <mpi.h>; it is built with MPI when
 * the build has it (TOWER_HAVE_MPI, cmake -DTOWER_MPI) and as a job of one
 * otherwise.  A process not launched by mpirun/srun (no OMPI_COMM_WORLD_SIZE,
 * PMIX_RANK or PMI_SIZE in its environment) is a job of one and never calls
 * MPI: a run without mpirun is exactly the run of a build without MPI.
 * Every collective is called by every rank, on one thread (the caller's,
 * the trainer's server thread), in the same order.  A failed collective (a
 * rank died) prints one line naming this rank and the call, then ends the
 * job (MPI_Abort): never a hang, never a silently wrong answer.
 * What it does not do: choose what to send (train/), own the buffers, or
 * place anything on GPUs.
 */
#ifndef TOWER_BASE_RANKS_H
#define TOWER_BASE_RANKS_H

#include <stddef.h>

/* Start MPI when this process was launched by mpirun/srun and the build
 * has MPI (MPI_Init_thread asking MPI_THREAD_MULTIPLE: the collectives stay
 * on the calling thread; the asynchronous parameter servers' thread sends
 * and receives beside it, ranks_thread_multiple says whether it may).  Call once, before any thread starts.  Returns 0, or -1
 * with one line in err: launched by mpirun with several ranks in a build
 * without MPI, or MPI failed to start. */
int ranks_init(int *argc, char ***argv, char *err, size_t err_n_bytes);

/* This process's rank in [0, ranks_size()), and how many there are (1 for
 * a process not launched by mpirun, or before ranks_init). */
int ranks_rank(void);
int ranks_size(void);

/* How many ranks of the job run on this host (MPI_COMM_TYPE_SHARED), 1
 * without mpirun: they share its cores. */
int ranks_local_size(void);

/* How many of this host's ranks have a rank below n (--ps_dedicated's server-only ranks, 0 .. n - 1, on this
 * host): from the host's ranks gathered once by ranks_init, no collective here.  0 without mpirun. */
int ranks_local_below(int n);

/* recv (ranks_size() x n_bytes) = every rank's send (n_bytes), in rank
 * order (MPI_Allgather); with one rank, a copy.  n_bytes must be the same
 * on every rank and at most INT_MAX.  Never returns on failure. */
void ranks_allgather(const void *send, void *recv, size_t n_bytes);

/* buf (n_bytes) = rank 0's buf on every rank (MPI_Bcast); with one rank,
 * nothing.  Never returns on failure. */
void ranks_bcast(void *buf, size_t n_bytes);

/* The variable-sized exchanges of a parameter server sharded across ranks
 * (train/mode_ps_mpi.c).  Counts and displacements are in floats, one per
 * rank, each at most INT_MAX; every rank passes counts that agree with the
 * others' (what r sends to s is what s expects from r).  With one rank, a
 * copy of the own part.  Never return on failure (as above). */

/* Rank r sends send + send_displs[s] (send_counts[s] floats) to every rank
 * s, and receives s's part for it at recv + recv_displs[s] (MPI_Alltoallv). */
void ranks_alltoallv(const float *send, const int *send_counts, const int *send_displs, float *recv,
                     const int *recv_counts, const int *recv_displs);

/* Every rank's send (counts[rank] floats) lands at recv + displs[r] on every
 * rank (MPI_Allgatherv); send may be recv + displs[rank] (in place). */
void ranks_allgatherv(const float *send, float *recv, const int *counts, const int *displs);

/* As ranks_allgatherv, but only rank 0 receives (MPI_Gatherv); recv is
 * ignored on the other ranks. */
void ranks_gatherv(const float *send, float *recv, const int *counts, const int *displs);

/* buf (n_floats) = the sum over the ranks of every rank's buf (MPI_Allreduce,
 * MPI_SUM, in place; in chunks of at most INT_MAX floats).  The summation
 * order is the library's (a ring, a tree: it depends on R and the sizes),
 * so the result agrees with an ordered sum to float rounding only, and may
 * differ from run to run where the library adapts.  With one rank, nothing.
 * Never returns on failure. */
void ranks_allreduce_sum(float *buf, size_t n_floats);

/* 1 on every rank when flag is non-zero on any rank (MPI_Allreduce, MAX);
 * with one rank, flag != 0.  Never returns on failure. */
int ranks_any(int flag);

/* The lowest rank whose flag is non-zero, the same on every rank, or -1
 * when none is (MPI_Allreduce, MIN); with one rank, flag ? 0 : -1.  Never
 * returns on failure. */
int ranks_first(int flag);

/* Seconds of one round trip of n_bytes between rank 0 and rank `peer`
 * (MPI_Send / MPI_Recv, rank 0 first): the median over `reps` round trips
 * after one untimed, the same value returned on every rank (broadcast from
 * rank 0).  Every rank calls it (the ones other than 0 and peer only wait
 * for the result); with one rank, or peer outside [1, ranks_size()), it
 * returns -1 and sends nothing.  reps in [1, 1000].  Never returns on a
 * failed call (as above).  `tower bench`'s ping-pong (latency = half the
 * round trip of a small message, bandwidth = n_bytes / half the round trip). */
double ranks_pingpong_sec(int peer, size_t n_bytes, int reps);

/* Sync batch norm's sums across ranks (--batch_norm sync; tower/tower.c
 * calls it through TowerGroupConfig.sum_across, on the caller's thread of
 * tower_group_run).  state says where this rank stands in its step:
 *   RANKS_SUM_DATA: buf (n_doubles) holds this rank's sum over its towers;
 *     on success buf = rank 0's + rank 1's + ... in rank order (the same
 *     bits on every rank; each rank's part gathered with MPI_Allgather, never
 *     MPI_Allreduce, whose order is the library's) and 0 is returned;
 *   RANKS_SUM_END / RANKS_SUM_FAILED: this rank's towers have finished the
 *     step (or failed) and will sum nothing more; buf is not read.
 * Every call first gathers each rank's (state, n_doubles); then a DATA call
 * that meets a rank not in DATA (failed, or ended: another network?) or
 * another size returns -1 with *other = that rank (this rank's step fails
 * and ends its towers); an END/FAILED call returns 1 while some rank is
 * still in DATA (call again: that rank will see this one and stop), 0 once
 * every rank has ended, with *other = the first rank that failed, or -1.
 * So a rank that fails anywhere in its step never leaves the others waiting
 * in a sum.  With one rank: DATA leaves buf as it is, END returns 0.  Out
 * of memory or a failed MPI call ends the job (one line). */
enum { RANKS_SUM_DATA = 0, RANKS_SUM_END = 1, RANKS_SUM_FAILED = 2 };
int ranks_sum_ordered(double *buf, size_t n_doubles, int state, int *other);

/* End the job: with several ranks MPI_Abort(code), which ends every rank;
 * with one, nothing (the caller returns code). */
void ranks_abort(int code);

/* MPI_Finalize when ranks_init started MPI; else nothing.  Every rank must
 * call it (it waits for the others). */
void ranks_finalize(void);

/* The asynchronous parameter servers (train/mode_ps_async.c): messages
 * between two ranks on a communicator of their own, sent and received by
 * any thread.  Every function but ranks_thread_multiple needs several
 * ranks; a failure prints one line and ends the job, as the collectives. */

/* 1 when MPI gave MPI_THREAD_MULTIPLE (or the job is one process). */
int ranks_thread_multiple(void);

/* A duplicate of the world's communicator for ranks_send / ranks_recv
 * (collective: every rank calls it once, before any send), and its end
 * (after every message was received). */
void ranks_p2p_open(void);
void ranks_p2p_close(void);

/* Send n_bytes (at most INT_MAX) to rank `to` under tag (MPI_Send: returns
 * when buf may be reused). */
void ranks_send(const void *buf, size_t n_bytes, int to, int tag);

/* Receive a message of tag from rank `from` (-1: any rank) into buf (at
 * most n_bytes); returns its bytes, its sender in *source (may be NULL). */
size_t ranks_recv(void *buf, size_t n_bytes, int from, int tag, int *source);

/* To each rank i < n: send[i] (send_n_bytes[i]) under send_tag, and from
 * each its answer into recv[i] (at most recv_n_bytes[i], each at most
 * INT_MAX) under recv_tag; the receives are posted before any send, so an
 * answer sent while this rank still sends never waits.  Returns when all
 * answers are in. */
void ranks_exchange_each(void *const *send, const size_t *send_n_bytes, void *const *recv, const size_t *recv_n_bytes,
                         int n, int send_tag, int recv_tag);

/* "MPI (Open MPI v4.1.4, ...)" in a build with MPI, or "none". */
const char *ranks_library(void);

#endif
