/* tower.h — the towers: one thread per tower, bound to a device, each with
 * its own copy of the weights and its own activation and gradient buffers.
 *
 * Where it sits: between the input pipeline (io/, which hands each tower its
 * shard of the global batch) and the parameter server (ps/, which owns the
 * master variables and averages the gradients the towers deliver).  One step
 * of a tower:
 *
 *     wait for the go
 *     ps_copy_params_to_tower      master variables -> the tower's weights
 *     tower_copy_shard_to_tower    its shard of the staged batch -> the device
 *     tower_compute                forward and backward on the shard
 *     tower_copy_grads_to_ps       gradients -> the tower's host gradient buffer
 *     signal done
 *
 * The parameter server thread (the caller of tower_group_step) waits for every
 * tower — the synchronisation point — and then averages and applies (ps/).
 *
 * What a device is lives behind TowerBackend: "cpu" (here) and "cuda"
 * (tower_cuda.cu, when built with CUDA).  This file knows nothing of how a
 * variable is updated or how a batch is read.
 */
#ifndef TOWER_TOWER_TOWER_H
#define TOWER_TOWER_TOWER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "tower/host_alloc.h"

#define TOWER_MAX_TOWERS 64

/* A backend: what a tower's device is and how data moves to and from it.
 * Every function that can fail returns 0 or -1 with one line in err. */
typedef struct TowerBackend {
    const char *name;  /* "cpu", "cuda" */
    /* Host memory for the master variables and the staging buffers. */
    HostAlloc (*host_alloc)(void);
    /* Number of devices of this kind (CPU: 1), or -1 + err when unusable. */
    int (*device_count)(char *err, size_t err_n_bytes);
    /* One line naming the device, for --log_device_placement. */
    void (*describe_device)(int device, char *out, size_t out_n_bytes);
    /* Create one tower's device state: weights, activations for up to
     * max_batch examples, and gradients.  grads_host: (n_params) the host
     * buffer this tower delivers its gradients to, owned by the caller. */
    void *(*tower_create)(const ModelSpec *spec, int device, int max_batch, int n_threads,
                          float *grads_host, char *err, size_t err_n_bytes);
    void (*tower_free)(void *dev);
    /* params_host: (n_params) -> the tower's own weights. */
    int (*copy_params_in)(void *dev, const float *params_host, char *err, size_t err_n_bytes);
    /* x_host: (n, H, W, C), labels_host: (n) -> the device. */
    int (*copy_shard_in)(void *dev, const float *x_host, const int32_t *labels_host, int n,
                         char *err, size_t err_n_bytes);
    /* Forward and backward on the shard; *loss = the shard's mean loss,
     * *accuracy = the fraction of the shard whose largest logit is its label. */
    int (*compute)(void *dev, float *loss, float *accuracy, char *err, size_t err_n_bytes);
    /* The tower's gradients -> grads_host given at create; waits until they are there. */
    int (*copy_grads_out)(void *dev, char *err, size_t err_n_bytes);
} TowerBackend;

extern const TowerBackend tower_backend_cpu;

#ifdef TOWER_HAVE_CUDA
/* tower/cuda_device.cu: the number of usable GPUs, or -1 + err (no driver,
 * no device); and one line naming a GPU.  Never crashes without a GPU. */
int tower_cuda_device_count(char *err, size_t err_n_bytes);
void tower_cuda_describe_device(int device, char *out, size_t out_n_bytes);

/* tower/tower_cuda.c: GPU towers (pinned host memory, one stream and
 * cuDNN/cuBLAS handles per tower).  _tf32 lets cuDNN and cuBLAS use TF32
 * tensor cores (faster, about 1e-3 relative error); the plain one keeps
 * float32 math, comparable with the CPU. */
extern const TowerBackend tower_backend_cuda;
extern const TowerBackend tower_backend_cuda_tf32;
#endif

/* Find a backend by name ("cpu"; "cuda" or "gpu", "cuda-tf32"); NULL when not built in. */
const TowerBackend *tower_backend_find(const char *name);

/* Seconds one tower spent in each phase of its last step. */
typedef struct {
    double wait_sec;       /* from the go to the start of copy-in (thread wake-up) */
    double copy_in_sec;    /* params + shard to the device */
    double compute_sec;    /* forward + backward */
    double copy_out_sec;   /* gradients to the host */
} TowerTimes;

typedef struct TowerGroup TowerGroup;

typedef struct Tower {
    TowerGroup *group;             /* the group this tower belongs to */
    int index;
    int device;
    int n_threads;                 /* OpenMP threads this tower uses (CPU backend) */
    const TowerBackend *backend;
    void *dev;                     /* the backend's state */
    pthread_t thread;
    /* the step's inputs, set by the parameter server thread before the go */
    const float *params;           /* (n_params) master variables, read only during the step */
    const float *x;                /* (n, H, W, C) this tower's shard in the staging buffer */
    const int32_t *labels;         /* (n) */
    int n;
    /* the step's outputs */
    float loss;                    /* mean loss over the shard */
    float accuracy;                /* fraction of the shard predicted right (before the update) */
    int status;                    /* 0 ok, -1 failed (err says why) */
    char err[256];
    TowerTimes times;
} Tower;

struct TowerGroup {
    int n_towers;
    Tower towers[TOWER_MAX_TOWERS];
    const ModelSpec *spec;
    pthread_mutex_t mu;
    pthread_cond_t go_cv, done_cv;
    long go_generation;            /* incremented for each step (or to quit) */
    double go_time;                /* tower_now_sec() at the go */
    int n_done;
    int quit;
};

typedef struct {
    const TowerBackend *backend;
    int n_towers;
    int devices[TOWER_MAX_TOWERS];   /* tower t runs on devices[t] */
    int n_threads[TOWER_MAX_TOWERS]; /* OpenMP threads of tower t (CPU) */
    int max_batch;                   /* largest shard a tower will get */
} TowerGroupConfig;

/* Start n_towers tower threads.  tower_grads[t]: (n_params) host buffer of
 * tower t, owned by the caller (the parameter server).  NULL + err on failure. */
TowerGroup *tower_group_create(const TowerGroupConfig *cfg, const ModelSpec *spec,
                               float *const *tower_grads, char *err, size_t err_n_bytes);

/* Run one synchronous step: every tower copies params in, computes on its
 * shard (x + shard_offset[t] examples, shard_n[t] of them) and delivers its
 * gradients; returns when all are done.  Returns 0, or -1 with the first
 * failing tower's message in err.  Each tower's mean loss and batch accuracy
 * are then in g->towers[t].loss and .accuracy. */
int tower_group_step(TowerGroup *g, const float *params, const float *x, const int32_t *labels,
                     const int *shard_offset, const int *shard_n, char *err, size_t err_n_bytes);

/* Stop the threads and free every tower. */
void tower_group_free(TowerGroup *g);

double tower_now_sec(void);

#endif
