/* ranks.c — the job of several processes over MPI, or a job of one (see ranks.h). */
#include "base/ranks.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef TOWER_HAVE_MPI
#include <mpi.h>
#endif

static int rank_, size_ = 1, local_size_ = 1;
static int *local_ranks_; /* (local_size_) the world ranks on this host, from ranks_init; NULL without mpirun */
#ifdef TOWER_HAVE_MPI
static int started_; /* ranks_init called MPI_Init_thread */
static int provided_; /* the thread level MPI gave (MPI_THREAD_MULTIPLE asked) */
static MPI_Comm p2p_ = MPI_COMM_NULL; /* ranks_p2p_open's communicator: the point-to-point messages */
#endif

/* The size mpirun / srun announced in the environment, or 0 when none did
 * (not SLURM_NTASKS: a whole allocation has it, also outside srun). */
static int launched_size(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return getenv("PMIX_RANK") ? 1 : 0;
}

int ranks_init(int *argc, char ***argv, char *err, size_t err_n_bytes) {
    const int launched = launched_size();
#ifdef TOWER_HAVE_MPI
    if (launched == 0 || started_) return 0;
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        snprintf(err, err_n_bytes, "MPI_Init_thread failed (launched by mpirun/srun with %d rank(s))", launched);
        return -1;
    }
    started_ = 1;
    provided_ = provided;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm local;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
        MPI_Comm_size(local, &local_size_);
        local_ranks_ = malloc((size_t)local_size_ * sizeof *local_ranks_);
        if (local_ranks_ && MPI_Allgather(&rank_, 1, MPI_INT, local_ranks_, 1, MPI_INT, local) != MPI_SUCCESS) {
            free(local_ranks_);
            local_ranks_ = NULL;
        }
        MPI_Comm_free(&local);
    }
    return 0;
#else
    (void)argc;
    (void)argv;
    if (launched > 1) {
        snprintf(err, err_n_bytes, "launched by mpirun/srun as one of %d ranks, but this tower was built without MPI "
                 "(install libopenmpi-dev and configure with cmake -DTOWER_MPI=ON)", launched);
        return -1;
    }
    return 0;
#endif
}

int ranks_rank(void) { return rank_; }
int ranks_size(void) { return size_; }
int ranks_local_size(void) { return local_size_; }

int ranks_local_below(int n) {
    int k = 0;
    for (int i = 0; local_ranks_ && i < local_size_; i++) k += local_ranks_[i] < n;
    return local_ranks_ ? k : (rank_ < n && size_ > 1 ? 1 : 0);
}

#ifdef TOWER_HAVE_MPI
/* A failed collective: one line naming this rank and the call, then the job ends. */
static void check_mpi(int rc, const char *call) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "error %d", rc);
    fprintf(stderr, "tower: rank %d of %d: %s failed: %s (another rank died or its host is unreachable); "
            "ending the job\n", rank_, size_, call, text);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    exit(3);
}
#endif

void ranks_allgather(const void *send, void *recv, size_t n_bytes) {
    if (size_ == 1) {
        if (recv != send) memmove(recv, send, n_bytes);
        return;
    }
#ifdef TOWER_HAVE_MPI
    if (n_bytes > INT_MAX) {
        fprintf(stderr, "tower: rank %d: MPI_Allgather of %zu bytes: more than INT_MAX; ending the job\n", rank_,
                n_bytes);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    check_mpi(MPI_Allgather(send, (int)n_bytes, MPI_BYTE, recv, (int)n_bytes, MPI_BYTE, MPI_COMM_WORLD),
              "MPI_Allgather");
#endif
}

void ranks_bcast(void *buf, size_t n_bytes) {
    if (size_ == 1) return;
#ifdef TOWER_HAVE_MPI
    for (size_t done = 0; done < n_bytes;) {
        size_t n = n_bytes - done < (size_t)INT_MAX ? n_bytes - done : (size_t)INT_MAX;
        check_mpi(MPI_Bcast((char *)buf + done, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
        done += n;
    }
#else
    (void)buf;
    (void)n_bytes;
#endif
}

void ranks_alltoallv(const float *send, const int *send_counts, const int *send_displs, float *recv,
                     const int *recv_counts, const int *recv_displs) {
    if (size_ == 1) {
        if (recv_counts[0] > 0) memmove(recv + recv_displs[0], send + send_displs[0], (size_t)send_counts[0] * sizeof(float));
        return;
    }
#ifdef TOWER_HAVE_MPI
    check_mpi(MPI_Alltoallv(send, send_counts, send_displs, MPI_FLOAT, recv, recv_counts, recv_displs, MPI_FLOAT,
                            MPI_COMM_WORLD), "MPI_Alltoallv");
#endif
}

void ranks_allgatherv(const float *send, float *recv, const int *counts, const int *displs) {
    float *own = recv + displs[rank_];
    if (size_ == 1) {
        if (own != send && counts[0] > 0) memmove(own, send, (size_t)counts[0] * sizeof(float));
        return;
    }
#ifdef TOWER_HAVE_MPI
    check_mpi(MPI_Allgatherv(send == own ? MPI_IN_PLACE : send, counts[rank_], MPI_FLOAT, recv, counts, displs,
                             MPI_FLOAT, MPI_COMM_WORLD), "MPI_Allgatherv");
#endif
}

void ranks_gatherv(const float *send, float *recv, const int *counts, const int *displs) {
    if (size_ == 1) {
        if (recv + displs[0] != send && counts[0] > 0) memmove(recv + displs[0], send, (size_t)counts[0] * sizeof(float));
        return;
    }
#ifdef TOWER_HAVE_MPI
    check_mpi(MPI_Gatherv(send, counts[rank_], MPI_FLOAT, recv, counts, displs, MPI_FLOAT, 0, MPI_COMM_WORLD),
              "MPI_Gatherv");
#endif
}

void ranks_allreduce_sum(float *buf, size_t n_floats) {
    if (size_ == 1) return;
#ifdef TOWER_HAVE_MPI
    for (size_t done = 0; done < n_floats;) {
        const size_t n = n_floats - done < (size_t)INT_MAX ? n_floats - done : (size_t)INT_MAX;
        check_mpi(MPI_Allreduce(MPI_IN_PLACE, buf + done, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
        done += n;
    }
#else
    (void)buf;
    (void)n_floats;
#endif
}

int ranks_any(int flag) {
    int any = flag != 0;
#ifdef TOWER_HAVE_MPI
    if (size_ > 1) check_mpi(MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
#endif
    return any;
}

int ranks_first(int flag) {
    int first = flag ? rank_ : size_;
#ifdef TOWER_HAVE_MPI
    if (size_ > 1) check_mpi(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
#endif
    return first < size_ ? first : -1;
}

#ifdef TOWER_HAVE_MPI
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
#endif

double ranks_pingpong_sec(int peer, size_t n_bytes, int reps) {
    if (size_ == 1 || peer < 1 || peer >= size_ || reps < 1 || reps > 1000 || n_bytes > INT_MAX) return -1.0;
    double result = -1.0;
#ifdef TOWER_HAVE_MPI
    char *buf = calloc(n_bytes ? n_bytes : 1, 1);
    double t[1000];
    if (!buf) {
        fprintf(stderr, "tower: rank %d: ping-pong: out of memory for %zu bytes; ending the job\n", rank_, n_bytes);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    for (int i = 0; i <= reps && (rank_ == 0 || rank_ == peer); i++) {
        double t0 = MPI_Wtime();
        if (rank_ == 0) {
            check_mpi(MPI_Send(buf, (int)n_bytes, MPI_BYTE, peer, 77, MPI_COMM_WORLD), "MPI_Send");
            check_mpi(MPI_Recv(buf, (int)n_bytes, MPI_BYTE, peer, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
        } else {
            check_mpi(MPI_Recv(buf, (int)n_bytes, MPI_BYTE, 0, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
            check_mpi(MPI_Send(buf, (int)n_bytes, MPI_BYTE, 0, 77, MPI_COMM_WORLD), "MPI_Send");
        }
        if (i > 0) t[i - 1] = MPI_Wtime() - t0;
    }
    if (rank_ == 0) {
        qsort(t, (size_t)reps, sizeof t[0], cmp_double);
        result = t[reps / 2];
    }
    free(buf);
    check_mpi(MPI_Bcast(&result, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD), "MPI_Bcast");
#endif
    return result;
}

int ranks_sum_ordered(double *buf, size_t n_doubles, int state, int *other) {
    *other = -1;
    if (size_ == 1) return 0;
#ifdef TOWER_HAVE_MPI
    if (n_doubles > INT_MAX / sizeof(double) / (size_t)size_) {
        fprintf(stderr, "tower: rank %d: a sync batch norm sum of %zu doubles: more than MPI's int counts; ending the job\n",
                rank_, n_doubles);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    long mine[2] = {state, state == RANKS_SUM_DATA ? (long)n_doubles : 0}, all[2 * 4096];
    long *heads = size_ <= 4096 ? all : malloc((size_t)size_ * sizeof mine);
    if (!heads) {
        fprintf(stderr, "tower: rank %d: out of memory for a sync batch norm sum; ending the job\n", rank_);
        MPI_Abort(MPI_COMM_WORLD, 3);
        exit(3);
    }
    check_mpi(MPI_Allgather(mine, 2, MPI_LONG, heads, 2, MPI_LONG, MPI_COMM_WORLD), "MPI_Allgather");
    int any_data = 0;
    for (int r = 0; r < size_; r++) {
        const long s = heads[2 * r], n = heads[2 * r + 1];
        any_data |= s == RANKS_SUM_DATA;
        if (state == RANKS_SUM_DATA && *other < 0 && (s != RANKS_SUM_DATA || n != (long)n_doubles)) *other = r;
        if (state != RANKS_SUM_DATA && *other < 0 && s == RANKS_SUM_FAILED) *other = r;
    }
    if (heads != all) free(heads);
    if (state != RANKS_SUM_DATA) return any_data ? 1 : 0;
    if (*other >= 0) return -1;
    double *parts = malloc((size_t)size_ * n_doubles * sizeof *parts + 1);
    if (!parts) {
        fprintf(stderr, "tower: rank %d: out of memory for a sync batch norm sum of %zu doubles; ending the job\n",
                rank_, n_doubles);
        MPI_Abort(MPI_COMM_WORLD, 3);
        exit(3);
    }
    check_mpi(MPI_Allgather(buf, (int)n_doubles, MPI_DOUBLE, parts, (int)n_doubles, MPI_DOUBLE, MPI_COMM_WORLD),
              "MPI_Allgather");
    for (size_t i = 0; i < n_doubles; i++) {
        double s = parts[i];
        for (int r = 1; r < size_; r++) s += parts[(size_t)r * n_doubles + i];
        buf[i] = s;
    }
    free(parts);
    return 0;
#else
    (void)buf;
    (void)n_doubles;
    (void)state;
    return 0;
#endif
}

void ranks_abort(int code) {
#ifdef TOWER_HAVE_MPI
    if (started_ && size_ > 1) {
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, code);
    }
#else
    (void)code;
#endif
}

void ranks_finalize(void) {
#ifdef TOWER_HAVE_MPI
    if (started_) MPI_Finalize();
    started_ = 0;
#endif
    free(local_ranks_);
    local_ranks_ = NULL;
}

const char *ranks_library(void) {
#ifdef TOWER_HAVE_MPI
    static char version[MPI_MAX_LIBRARY_VERSION_STRING + 8];
    if (!version[0]) {
        char v[MPI_MAX_LIBRARY_VERSION_STRING] = "";
        int len = 0;
        MPI_Get_library_version(v, &len);
        v[strcspn(v, ",\n")] = '\0';
        snprintf(version, sizeof version, "MPI (%s)", v);
    }
    return version;
#else
    return "none";
#endif
}

/* The point-to-point messages of the asynchronous parameter servers (ranks.h). */

int ranks_thread_multiple(void) {
#ifdef TOWER_HAVE_MPI
    return size_ == 1 || (started_ && provided_ >= MPI_THREAD_MULTIPLE);
#else
    return 1;
#endif
}

void ranks_p2p_open(void) {
#ifdef TOWER_HAVE_MPI
    if (size_ > 1 && p2p_ == MPI_COMM_NULL) {
        check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &p2p_), "MPI_Comm_dup");
        MPI_Comm_set_errhandler(p2p_, MPI_ERRORS_RETURN);
    }
#endif
}

void ranks_p2p_close(void) {
#ifdef TOWER_HAVE_MPI
    if (p2p_ != MPI_COMM_NULL) MPI_Comm_free(&p2p_);
    p2p_ = MPI_COMM_NULL;
#endif
}

void ranks_send(const void *buf, size_t n_bytes, int to, int tag) {
#ifdef TOWER_HAVE_MPI
    if (n_bytes > INT_MAX) {
        fprintf(stderr, "tower: rank %d: MPI_Send of %zu bytes: more than INT_MAX; ending the job\n", rank_, n_bytes);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    check_mpi(MPI_Send(buf, (int)n_bytes, MPI_BYTE, to, tag, p2p_), "MPI_Send");
#else
    (void)buf;
    (void)n_bytes;
    (void)to;
    (void)tag;
#endif
}

size_t ranks_recv(void *buf, size_t n_bytes, int from, int tag, int *source) {
#ifdef TOWER_HAVE_MPI
    MPI_Status status;
    check_mpi(MPI_Recv(buf, n_bytes > INT_MAX ? INT_MAX : (int)n_bytes, MPI_BYTE, from < 0 ? MPI_ANY_SOURCE : from,
                       tag, p2p_, &status), "MPI_Recv");
    int got = 0;
    MPI_Get_count(&status, MPI_BYTE, &got);
    if (source) *source = status.MPI_SOURCE;
    return (size_t)got;
#else
    (void)buf;
    (void)n_bytes;
    (void)from;
    (void)tag;
    if (source) *source = 0;
    return 0;
#endif
}

void ranks_exchange_each(void *const *send, const size_t *send_n_bytes, void *const *recv, const size_t *recv_n_bytes,
                         int n, int send_tag, int recv_tag) {
#ifdef TOWER_HAVE_MPI
    MPI_Request req[64];
    for (int lo = 0; lo < n; lo += 64) {
        const int hi = lo + 64 < n ? lo + 64 : n;
        for (int i = lo; i < hi; i++)
            check_mpi(MPI_Irecv(recv[i], (int)recv_n_bytes[i], MPI_BYTE, i, recv_tag, p2p_, &req[i - lo]), "MPI_Irecv");
        for (int i = lo; i < hi; i++) ranks_send(send[i], send_n_bytes[i], i, send_tag);
        check_mpi(MPI_Waitall(hi - lo, req, MPI_STATUSES_IGNORE), "MPI_Waitall");
    }
#else
    (void)send;
    (void)send_n_bytes;
    (void)recv;
    (void)recv_n_bytes;
    (void)n;
    (void)send_tag;
    (void)recv_tag;
#endif
}
