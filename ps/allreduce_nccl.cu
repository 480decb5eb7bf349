/* allreduce_nccl.cu — the towers' mean gradient with NCCL, one rank per
 * GPU, co-located towers reduced on their GPU first (see allreduce_nccl.h).
 *
 * Where it sits: ps/, CUDA + NCCL builds only; called on the tower threads
 * by the trainer's replicated_nccl reduce hook, or, across the processes of
 * an MPI job (replicated_nccl_mpi), from the trainer's thread after the
 * processes agreed on the step (allreduce_nccl_mean_all; the id travels by
 * MPI in train/, never here).  It uses the kernels of
 * ps/ps_gpu_kernels.h for the on-GPU sum and the division, launched once
 * on every GPU at creation (ps_gpu_warm_kernels), so that lazy module
 * loading never runs beside an NCCL kernel (NVIDIA/nccl#613).
 * A leader waits for its all-reduce by polling the stream and
 * ncclCommGetAsyncError: an NCCL error, or no completion within
 * TOWER_NCCL_TIMEOUT_SEC (default 300) seconds, aborts the communicator and
 * exits with one line naming the tower, the rank and the GPU, instead of
 * hanging on a failed peer.
 */
#include "ps/allreduce_nccl.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "ps/device_groups.h"
#include "ps/ps_gpu_kernels.h"
#include "base/cuda_check.h"

enum { AR_EV_ANCHOR = 0, AR_EV_NCCL_START, AR_EV_NCCL_END, AR_N_EVENTS };

struct AllreduceNccl {
    DeviceGroups groups;                              /* which towers share a GPU; rank g = group g */
    int n_towers;
    int job_towers;                                   /* the mean's divisor: every process's towers */
    int first_rank;                                   /* NCCL rank of group 0 (0 within one process) */
    int n_ranks_total;                                /* NCCL ranks of the communicator (every process's GPUs) */
    size_t n_floats;
    float *grads[DEVICE_GROUPS_MAX];                  /* [n_towers] (n_floats) device: the towers' gradients */
    ncclComm_t comms[DEVICE_GROUPS_MAX];              /* [n_groups] rank g's communicator, on groups.device[g] */
    int n_comms;
    cudaStream_t stream[DEVICE_GROUPS_MAX];           /* [n_towers] on the tower's GPU (owned) */
    cudaEvent_t ev[DEVICE_GROUPS_MAX][AR_N_EVENTS];   /* [n_towers] */
    pthread_barrier_t barrier;                        /* the n_towers threads, between stages 2 and 3 */
    int barrier_made;
};

extern "C" void allreduce_nccl_free(AllreduceNccl *ar) {
    if (!ar) return;
    int prev = 0;
    const int have_prev = cudaGetDevice(&prev) == cudaSuccess;
    for (int g = 0; g < ar->n_comms; g++) ncclCommDestroy(ar->comms[g]);
    for (int t = 0; t < ar->n_towers; t++) {
        cudaSetDevice(ar->groups.device[ar->groups.group_of[t]]);
        if (ar->stream[t]) cudaStreamSynchronize(ar->stream[t]);
        for (int k = 0; k < AR_N_EVENTS; k++)
            if (ar->ev[t][k]) cudaEventDestroy(ar->ev[t][k]);
        if (ar->stream[t]) cudaStreamDestroy(ar->stream[t]);
    }
    if (ar->barrier_made) pthread_barrier_destroy(&ar->barrier);
    free(ar);
    if (have_prev) cudaSetDevice(prev);
}

/* The communicator over the groups' GPUs: one process's (id NULL: ncclCommInitAll), or this process's
 * ranks first_rank .. of n_ranks_total in the job's communicator named by id (ncclCommInitRank per GPU,
 * inside one group so that one thread can make several ranks). */
static int init_comms(AllreduceNccl *ar, const void *id, char *err, size_t err_n_bytes) {
    const DeviceGroups *gr = &ar->groups;
    ncclResult_t r;
    if (!id) {
        r = ncclCommInitAll(ar->comms, gr->n_groups, gr->device);
        if (r != ncclSuccess) {
            snprintf(err, err_n_bytes, "NCCL error: ncclCommInitAll over %d GPU(s) failed: %s", gr->n_groups,
                     ncclGetErrorString(r));
            return -1;
        }
        ar->n_comms = gr->n_groups;
        return 0;
    }
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    r = ncclGroupStart();
    for (int g = 0; g < gr->n_groups && r == ncclSuccess; g++) {
        if (cudaSetDevice(gr->device[g]) != cudaSuccess) {
            snprintf(err, err_n_bytes, "CUDA error: cannot select GPU %d for NCCL rank %d", gr->device[g], ar->first_rank + g);
            ncclGroupEnd();
            return -1;
        }
        r = ncclCommInitRank(&ar->comms[g], ar->n_ranks_total, uid, ar->first_rank + g);
    }
    const ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess) r = end;
    if (r != ncclSuccess) {
        snprintf(err, err_n_bytes, "NCCL error: ncclCommInitRank of ranks %d..%d of %d failed: %s", ar->first_rank,
                 ar->first_rank + gr->n_groups - 1, ar->n_ranks_total, ncclGetErrorString(r));
        return -1;
    }
    ar->n_comms = gr->n_groups;
    return 0;
}

static AllreduceNccl *create(int n_towers, const int *devices, float *const *grads, size_t n_floats, const void *id,
                             int first_rank, int n_ranks_total, int job_towers, char *err, size_t err_n_bytes) {
    int prev = 0;
    if (CUDA_SOFT(cudaGetDevice(&prev), err, err_n_bytes)) return NULL;
    AllreduceNccl *ar = (AllreduceNccl *)calloc(1, sizeof *ar);
    if (!ar) {
        snprintf(err, err_n_bytes, "NCCL all-reduce: out of host memory");
        return NULL;
    }
    char e[256];
    if (device_groups_plan(&ar->groups, n_towers, devices, e, sizeof e) != 0) {
        snprintf(err, err_n_bytes, "NCCL all-reduce: %s", e);
        free(ar);
        return NULL;
    }
    ar->n_floats = n_floats;
    ar->job_towers = job_towers;
    ar->first_rank = first_rank;
    ar->n_ranks_total = id ? n_ranks_total : ar->groups.n_groups;
    for (int t = 0; t < n_towers; t++) ar->grads[t] = grads[t];
    if (init_comms(ar, id, err, err_n_bytes) != 0) {
        free(ar);
        cudaSetDevice(prev);
        return NULL;
    }
    for (int g = 0; g < ar->groups.n_groups; g++)
        if (CUDA_SOFT(cudaSetDevice(ar->groups.device[g]), err, err_n_bytes) || ps_gpu_warm_kernels(err, err_n_bytes))
            goto fail;
    for (int t = 0; t < n_towers; t++) {
        ar->n_towers = t + 1; /* what allreduce_nccl_free must look at, should this one fail half-made */
        if (CUDA_SOFT(cudaSetDevice(devices[t]), err, err_n_bytes) ||
            CUDA_SOFT(cudaStreamCreateWithFlags(&ar->stream[t], cudaStreamNonBlocking), err, err_n_bytes))
            goto fail;
        for (int k = 0; k < AR_N_EVENTS; k++)
            if (CUDA_SOFT(cudaEventCreate(&ar->ev[t][k]), err, err_n_bytes)) goto fail;
    }
    if (pthread_barrier_init(&ar->barrier, NULL, (unsigned)n_towers) != 0) {
        snprintf(err, err_n_bytes, "NCCL all-reduce: cannot create a barrier for %d threads", n_towers);
        goto fail;
    }
    ar->barrier_made = 1;
    cudaSetDevice(prev);
    return ar;
fail:
    allreduce_nccl_free(ar);
    cudaSetDevice(prev);
    return NULL;
}

extern "C" AllreduceNccl *allreduce_nccl_create(int n_towers, const int *devices, float *const *grads, size_t n_floats,
                                                char *err, size_t err_n_bytes) {
    return create(n_towers, devices, grads, n_floats, NULL, 0, 0, n_towers, err, err_n_bytes);
}

extern "C" AllreduceNccl *allreduce_nccl_create_ranks(int n_towers, const int *devices, float *const *grads,
                                                      size_t n_floats, const void *id, int first_rank,
                                                      int n_ranks_total, int job_towers, char *err,
                                                      size_t err_n_bytes) {
    if (!id || first_rank < 0 || n_ranks_total < 1 || job_towers < n_towers) {
        snprintf(err, err_n_bytes, "NCCL all-reduce across processes: bad arguments (first rank %d of %d, %d of %d towers)",
                 first_rank, n_ranks_total, n_towers, job_towers);
        return NULL;
    }
    return create(n_towers, devices, grads, n_floats, id, first_rank, n_ranks_total, job_towers, err, err_n_bytes);
}

extern "C" int allreduce_nccl_unique_id(void *id, char *err, size_t err_n_bytes) {
    static_assert(sizeof(ncclUniqueId) == ALLREDUCE_NCCL_ID_N_BYTES, "NCCL_UNIQUE_ID_BYTES changed");
    ncclUniqueId uid;
    const ncclResult_t r = ncclGetUniqueId(&uid);
    if (r != ncclSuccess) {
        snprintf(err, err_n_bytes, "NCCL error: ncclGetUniqueId failed: %s", ncclGetErrorString(r));
        return -1;
    }
    memcpy(id, &uid, sizeof uid);
    return 0;
}

extern "C" int allreduce_nccl_count_gpus(int n_towers, const int *devices, char *err, size_t err_n_bytes) {
    DeviceGroups gr;
    return device_groups_plan(&gr, n_towers, devices, err, err_n_bytes) == 0 ? gr.n_groups : -1;
}

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The all-reduce's timeout: TOWER_NCCL_TIMEOUT_SEC, or 300 s. */
static double nccl_timeout_sec(void) {
    const char *v = getenv("TOWER_NCCL_TIMEOUT_SEC");
    double t = v && *v ? atof(v) : 0.0;
    return t > 0.0 ? t : 300.0;
}

/* Wait for stream s, on which rank g's collective runs, polling NCCL for an
 * asynchronous error (a failed or vanished peer) and the clock; on either,
 * abort the communicator, print one line and exit: other threads may be
 * inside NCCL or CUDA calls, so nothing is torn down (_Exit). */
static void wait_nccl(AllreduceNccl *ar, int tower, int g, cudaStream_t s) {
    const double timeout = nccl_timeout_sec(), start = now_sec();
    for (long polls = 0;; polls++) {
        cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess) return;
        const char *why = NULL;
        char buf[256];
        if (e != cudaErrorNotReady) {
            snprintf(buf, sizeof buf, "CUDA error %s", cudaGetErrorString(e));
            why = buf;
        } else {
            ncclResult_t async = ncclSuccess;
            ncclResult_t r = ncclCommGetAsyncError(ar->comms[g], &async);
            if (r != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
                snprintf(buf, sizeof buf, "NCCL error %s", ncclGetErrorString(r != ncclSuccess ? r : async));
                why = buf;
            } else if (now_sec() - start > timeout) {
                snprintf(buf, sizeof buf, "not complete after %.0f s (a peer failed or is stuck; TOWER_NCCL_TIMEOUT_SEC)",
                         timeout);
                why = buf;
            }
        }
        if (why) {
            fprintf(stderr, "NCCL all-reduce of tower %d (rank %d of %d, GPU %d): %s; communicator aborted\n", tower,
                    ar->first_rank + g, ar->n_ranks_total, ar->groups.device[g], why);
            fflush(stderr);
            ncclCommAbort(ar->comms[g]);
            _Exit(1);
        }
        if (polls < 20000) {
            sched_yield();
        } else {
            struct timespec ts = {0, 50000}; /* 50 us once the wait is long */
            nanosleep(&ts, NULL);
        }
    }
}

extern "C" int allreduce_nccl_n_ranks(const AllreduceNccl *ar) { return ar->groups.n_groups; }

extern "C" int allreduce_nccl_n_ranks_total(const AllreduceNccl *ar) { return ar->n_ranks_total; }

extern "C" void allreduce_nccl_mean(AllreduceNccl *ar, int tower, PsGpuSpanMs *nccl) {
    const DeviceGroups *gr = &ar->groups;
    const int g = gr->group_of[tower], leader = gr->leader[g];
    cudaStream_t s = ar->stream[tower];
    cudaEvent_t *ev = ar->ev[tower];
    if (nccl) {
        nccl->start_ms = nccl->end_ms = 0.0f;
        nccl->ran = 0;
    }
    CUDA_CHECK(cudaSetDevice(gr->device[g]));
    if (tower == leader) {
        CUDA_CHECK(cudaEventRecord(ev[AR_EV_ANCHOR], s));
        /* 1. the GPU's towers, summed into the leader's buffer in tower order (the leader first) */
        if (gr->n_members[g] > 1) {
            const float *srcs[DEVICE_GROUPS_MAX];
            for (int k = 0; k < gr->n_members[g]; k++) srcs[k] = ar->grads[gr->members[g][k]];
            ps_gpu_sum_div(ar->grads[tower], srcs, gr->n_members[g], ar->n_floats, 1.0f, NULL, s);
        }
        /* 2. across the GPUs (count in floats, in place), then the mean over every tower */
        CUDA_CHECK(cudaEventRecord(ev[AR_EV_NCCL_START], s));
        NCCL_CHECK(ncclAllReduce(ar->grads[tower], ar->grads[tower], ar->n_floats, ncclFloat, ncclSum, ar->comms[g], s));
        CUDA_CHECK(cudaEventRecord(ev[AR_EV_NCCL_END], s));
        const float *self[1] = {ar->grads[tower]};
        ps_gpu_sum_div(ar->grads[tower], self, 1, ar->n_floats, (float)ar->job_towers, NULL, s);
        wait_nccl(ar, tower, g, s);
        if (nccl) {
            CUDA_CHECK(cudaEventElapsedTime(&nccl->start_ms, ev[AR_EV_ANCHOR], ev[AR_EV_NCCL_START]));
            CUDA_CHECK(cudaEventElapsedTime(&nccl->end_ms, ev[AR_EV_ANCHOR], ev[AR_EV_NCCL_END]));
            nccl->ran = 1;
        }
    }
    /* Every leader's mean is complete (it waited for its stream) once all threads are past here;
     * no buffer is written again before the next step's compute. */
    pthread_barrier_wait(&ar->barrier);
    /* 3. the other towers of the GPU take the mean from their leader */
    if (tower != leader) {
        CUDA_CHECK(cudaMemcpyAsync(ar->grads[tower], ar->grads[leader], ar->n_floats * sizeof(float),
                                   cudaMemcpyDeviceToDevice, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
    }
}

extern "C" void allreduce_nccl_mean_all(AllreduceNccl *ar, PsGpuSpanMs *spans) {
    const DeviceGroups *gr = &ar->groups;
    int prev = 0;
    CUDA_CHECK(cudaGetDevice(&prev));
    for (int t = 0; spans && t < ar->n_towers; t++) spans[t].start_ms = spans[t].end_ms = 0.0f, spans[t].ran = 0;
    /* 1. each GPU's towers summed into its leader's buffer, in tower order, on the leader's stream */
    for (int g = 0; g < gr->n_groups; g++) {
        const int leader = gr->leader[g];
        cudaStream_t s = ar->stream[leader];
        CUDA_CHECK(cudaSetDevice(gr->device[g]));
        CUDA_CHECK(cudaEventRecord(ar->ev[leader][AR_EV_ANCHOR], s));
        if (gr->n_members[g] > 1) {
            const float *srcs[DEVICE_GROUPS_MAX];
            for (int k = 0; k < gr->n_members[g]; k++) srcs[k] = ar->grads[gr->members[g][k]];
            ps_gpu_sum_div(ar->grads[leader], srcs, gr->n_members[g], ar->n_floats, 1.0f, NULL, s);
        }
        CUDA_CHECK(cudaEventRecord(ar->ev[leader][AR_EV_NCCL_START], s));
    }
    /* 2. every local rank's all-reduce in one group (one thread drives several communicators), then / job towers */
    NCCL_CHECK(ncclGroupStart());
    for (int g = 0; g < gr->n_groups; g++) {
        const int leader = gr->leader[g];
        NCCL_CHECK(ncclAllReduce(ar->grads[leader], ar->grads[leader], ar->n_floats, ncclFloat, ncclSum, ar->comms[g],
                                 ar->stream[leader]));
    }
    NCCL_CHECK(ncclGroupEnd());
    for (int g = 0; g < gr->n_groups; g++) {
        const int leader = gr->leader[g];
        cudaStream_t s = ar->stream[leader];
        CUDA_CHECK(cudaSetDevice(gr->device[g]));
        CUDA_CHECK(cudaEventRecord(ar->ev[leader][AR_EV_NCCL_END], s));
        const float *self[1] = {ar->grads[leader]};
        ps_gpu_sum_div(ar->grads[leader], self, 1, ar->n_floats, (float)ar->job_towers, NULL, s);
    }
    for (int g = 0; g < gr->n_groups; g++) {
        const int leader = gr->leader[g];
        CUDA_CHECK(cudaSetDevice(gr->device[g]));
        wait_nccl(ar, leader, g, ar->stream[leader]);
        if (spans) {
            CUDA_CHECK(cudaEventElapsedTime(&spans[leader].start_ms, ar->ev[leader][AR_EV_ANCHOR], ar->ev[leader][AR_EV_NCCL_START]));
            CUDA_CHECK(cudaEventElapsedTime(&spans[leader].end_ms, ar->ev[leader][AR_EV_ANCHOR], ar->ev[leader][AR_EV_NCCL_END]));
            spans[leader].ran = 1;
        }
    }
    /* 3. the other towers of each GPU take the mean from their leader */
    for (int t = 0; t < ar->n_towers; t++) {
        const int g = gr->group_of[t], leader = gr->leader[g];
        if (t == leader) continue;
        CUDA_CHECK(cudaSetDevice(gr->device[g]));
        CUDA_CHECK(cudaMemcpyAsync(ar->grads[t], ar->grads[leader], ar->n_floats * sizeof(float),
                                   cudaMemcpyDeviceToDevice, ar->stream[t]));
        CUDA_CHECK(cudaStreamSynchronize(ar->stream[t]));
    }
    CUDA_CHECK(cudaSetDevice(prev));
}
