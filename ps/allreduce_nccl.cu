/* allreduce_nccl.cu — the towers' mean gradient with NCCL, one rank per
 * GPU, co-located towers reduced on their GPU first (see allreduce_nccl.h).
 *
 * Where it sits: ps/, CUDA + NCCL builds only; called on the tower threads
 * by the trainer's replicated_nccl reduce hook.  It uses the kernels of
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

extern "C" AllreduceNccl *allreduce_nccl_create(int n_towers, const int *devices, float *const *grads, size_t n_floats,
                                                char *err, size_t err_n_bytes) {
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
    for (int t = 0; t < n_towers; t++) ar->grads[t] = grads[t];
    /* One communicator, one rank per distinct GPU, in order of first appearance. */
    ncclResult_t r = ncclCommInitAll(ar->comms, ar->groups.n_groups, ar->groups.device);
    if (r != ncclSuccess) {
        snprintf(err, err_n_bytes, "NCCL error: ncclCommInitAll over %d GPU(s) failed: %s", ar->groups.n_groups,
                 ncclGetErrorString(r));
        free(ar);
        cudaSetDevice(prev);
        return NULL;
    }
    ar->n_comms = ar->groups.n_groups;
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
            fprintf(stderr, "NCCL all-reduce of tower %d (rank %d of %d, GPU %d): %s; communicator aborted\n", tower, g,
                    ar->groups.n_groups, ar->groups.device[g], why);
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
        ps_gpu_sum_div(ar->grads[tower], self, 1, ar->n_floats, (float)ar->n_towers, NULL, s);
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
