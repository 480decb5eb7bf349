/* tower_cpu.c — the CPU backend: a tower whose device is a share of the
 * host's cores.
 *
 * Where it sits: behind TowerBackend (tower.h).  A CPU tower reads its
 * weights from a host buffer it is bound to (bind_params: the master
 * variables in ps_cpu and ps_mpi, its replica in the replicated modes; no
 * copy-in), or, unbound (the asynchronous parameter server, whose server
 * updates while towers compute), from its own copy, copied in each step as
 * a GPU tower's are.  It keeps its own activations (ModelActs) and computes
 * its gradients straight into the host gradient buffer the parameter server
 * gave it (written by a step's first micro-batch, added to by the others,
 * scaled in place), so its copy-out is empty.  Its OpenMP threads: about C/N of the
 * C cores for N towers, set on the tower's own thread.  With several
 * micro-batches per step it keeps each earlier micro-batch's batch-norm
 * statistics aside (the next forward overwrites the activations' own), so
 * that update_moving applies every micro-batch's, in order, as Keras's
 * update on every training forward does.
 */
#include "tower/tower.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const ModelSpec *spec;
    ModelActs *acts;
    float *logits;         /* (max_batch, num_classes) of the last forward */
    float *weights;        /* (n_params) the variables compute reads: own_weights, or the bound buffer */
    float *own_weights;    /* (n_params) the tower's own copy, filled by copy_params_in */
    float *grads_host;     /* (n_params) the parameter server's buffer for this tower */
    const float *x;        /* (n, H, W, C) the shard, read in place from the staging buffer */
    const int32_t *labels; /* (n) */
    int n;
    int max_batch;
    int n_threads;
    int threads_set;
    double forward_end_sec; /* tower_now_sec() when the last forward ended */
    size_t stats_n_bytes;   /* one training forward's batch statistics (model_moving_stats_n_bytes); 0: none */
    unsigned char *stats;   /* (stats_cap, stats_n_bytes): this step's micro-batches before the last, in order */
    int n_stats, stats_cap;
} CpuTower;

static HostAlloc cpu_host_alloc(int device) {
    (void)device;
    return host_alloc_default();
}

static int cpu_device_count(char *err, size_t err_n_bytes) {
    (void)err;
    (void)err_n_bytes;
    return 1;
}

static void cpu_describe_device(int device, char *out, size_t out_n_bytes) {
    (void)device;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(out, out_n_bytes, "/cpu:0 (%ld cores)", n);
}

static void *cpu_tower_create(const ModelSpec *spec, int device, int max_batch, int n_threads,
                              float *grads_host, char *err, size_t err_n_bytes) {
    (void)device;
    CpuTower *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, err_n_bytes, "out of memory");
        return NULL;
    }
    t->spec = spec;
    t->max_batch = max_batch;
    t->n_threads = n_threads;
    t->grads_host = grads_host;
    t->own_weights = host_alloc_page_aligned(spec->n_params * sizeof(float), NULL);
    t->weights = t->own_weights;
    /* The workspace plans for the tower's threads (its scratch, the conv layers' oneDNN primitives), which
     * model_acts_create reads from omp_get_max_threads(); compute runs on them (cpu_compute). */
    const int threads_before = omp_get_max_threads();
    omp_set_num_threads(n_threads);
    t->acts = model_acts_create(spec, max_batch);
    omp_set_num_threads(threads_before);
    t->logits = malloc((size_t)max_batch * spec->num_classes * sizeof(float));
    if (t->acts) t->stats_n_bytes = model_moving_stats_n_bytes(t->acts);
    if (!t->weights || !t->acts || !t->logits) {
        snprintf(err, err_n_bytes, "out of memory for the weights and activations of batch %d", max_batch);
        host_free_page_aligned(t->own_weights, NULL);
        free(t->logits);
        model_acts_free(t->acts);
        free(t);
        return NULL;
    }
    return t;
}

static void cpu_tower_free(void *dev) {
    CpuTower *t = dev;
    if (!t) return;
    host_free_page_aligned(t->own_weights, NULL);
    free(t->logits);
    free(t->stats);
    model_acts_free(t->acts);
    free(t);
}

static int cpu_copy_params_in(void *dev, const float *params_host, char *err, size_t err_n_bytes) {
    (void)err;
    (void)err_n_bytes;
    CpuTower *t = dev;
    t->weights = t->own_weights;
    memcpy(t->weights, params_host, t->spec->n_params * sizeof(float));
    return 0;
}

static int cpu_bind_params(void *dev, float *params_host, char *err, size_t err_n_bytes) {
    CpuTower *t = dev;
    if (!params_host) {
        snprintf(err, err_n_bytes, "no buffer to bind the variables to");
        return -1;
    }
    t->weights = params_host;
    return 0;
}

static int cpu_set_sync(void *dev, const ModelSync *sync, char *err, size_t err_n_bytes) {
    (void)err;
    (void)err_n_bytes;
    model_acts_set_sync(((CpuTower *)dev)->acts, sync);
    return 0;
}

static double cpu_forward_end_sec(const void *dev) { return ((const CpuTower *)dev)->forward_end_sec; }

static int cpu_copy_shard_in(void *dev, const float *x_host, const int32_t *labels_host, int n,
                             char *err, size_t err_n_bytes) {
    CpuTower *t = dev;
    if (n < 1 || n > t->max_batch) {
        snprintf(err, err_n_bytes, "shard of %d examples, this tower holds 1 to %d", n, t->max_batch);
        return -1;
    }
    t->x = x_host;
    t->labels = labels_host;
    t->n = n;
    return 0;
}

/* A later micro-batch is about to run: the previous one's batch statistics to the end of t->stats. */
static int keep_stats(CpuTower *t, char *err, size_t err_n_bytes) {
    if (t->stats_n_bytes == 0) return 0;
    if (t->n_stats == t->stats_cap) {
        const int cap = t->stats_cap ? 2 * t->stats_cap : 4;
        unsigned char *p = realloc(t->stats, (size_t)cap * t->stats_n_bytes);
        if (!p) {
            snprintf(err, err_n_bytes, "out of memory for %d micro-batches' batch statistics", cap);
            return -1;
        }
        t->stats = p;
        t->stats_cap = cap;
    }
    t->n_stats += model_moving_stats_save(t->stats + (size_t)t->n_stats * t->stats_n_bytes, t->acts);
    return 0;
}

static int cpu_compute(void *dev, int accumulate, float loss_weight, float *loss, float *accuracy, char *err,
                       size_t err_n_bytes) {
    CpuTower *t = dev;
    if (!t->threads_set) {
        omp_set_num_threads(t->n_threads);
        t->threads_set = 1;
    }
    if (!accumulate) t->n_stats = 0;
    else if (keep_stats(t, err, err_n_bytes) != 0) return -1;
    *loss = model_forward(t->logits, NULL, t->acts, t->x, t->labels, t->weights, t->n);
    *accuracy = (float)model_count_correct(t->logits, t->labels, t->n, t->spec->num_classes) / (float)t->n;
    t->forward_end_sec = tower_now_sec();
    /* A step's first micro-batch writes the gradient (model_backward_write: no memset, conv2d's and dense's
     * products straight into it); the later ones add (llm.c's convention). */
    model_acts_set_loss_weight(t->acts, loss_weight);
    if (!accumulate) model_backward_write(t->grads_host, t->acts, t->weights);
    else model_backward(t->grads_host, t->acts, t->weights);
    return 0;
}

/* grads_host *= scale, on the tower's OpenMP threads. */
static int cpu_scale_grads(void *dev, float scale, char *err, size_t err_n_bytes) {
    (void)err;
    (void)err_n_bytes;
    CpuTower *t = dev;
    float *g = t->grads_host;
    const long n = (long)t->spec->n_params;
    #pragma omp parallel for schedule(static) if(n > 65536)
    for (long i = 0; i < n; i++) g[i] *= scale;
    return 0;
}

static int cpu_copy_grads_out(void *dev, char *err, size_t err_n_bytes) {
    (void)dev;
    (void)err;
    (void)err_n_bytes;
    return 0; /* compute already wrote them into the host gradient buffer */
}

/* Each micro-batch's batch statistics of the step, in order, into params_host's moving statistics: the kept
 * ones, then the last forward's. */
static int cpu_update_moving(void *dev, float *params_host, char *err, size_t err_n_bytes) {
    (void)err;
    (void)err_n_bytes;
    CpuTower *t = dev;
    for (int k = 0; k < t->n_stats; k++)
        model_update_moving_saved(params_host, t->acts, t->stats + (size_t)k * t->stats_n_bytes);
    model_update_moving(params_host, t->acts);
    return 0;
}

static void cpu_describe_algorithms(const void *dev, char *out, size_t out_n_bytes) {
    model_acts_describe(((const CpuTower *)dev)->acts, out, out_n_bytes);
}

/* own_weights (page-aligned), logits and the activations, as cpu_tower_create allocates them, and
 * keep_stats' array for the accum_steps - 1 earlier micro-batches (its capacity: 4, doubled as needed). */
static size_t cpu_host_n_bytes(const ModelSpec *spec, int max_batch, int accum_steps) {
    const size_t weights_n_bytes = (spec->n_params * sizeof(float) + 4095) / 4096 * 4096 + 4096;
    const size_t logits_n_bytes = (size_t)max_batch * spec->num_classes * sizeof(float) + 4096;
    size_t stats_cap = 0;
    if (accum_steps > 1)
        for (stats_cap = 4; stats_cap < (size_t)accum_steps - 1; stats_cap *= 2) {}
    const size_t stats_n_bytes = stats_cap ? stats_cap * model_moving_stats_spec_n_bytes(spec, max_batch) : 0;
    return sizeof(CpuTower) + weights_n_bytes + logits_n_bytes + model_acts_n_bytes(spec, max_batch) + stats_n_bytes;
}

const TowerBackend tower_backend_cpu = {
    .name = "cpu",
    .host_alloc = cpu_host_alloc,
    .device_count = cpu_device_count,
    .describe_device = cpu_describe_device,
    .tower_create = cpu_tower_create,
    .tower_free = cpu_tower_free,
    .copy_params_in = cpu_copy_params_in,
    .copy_shard_in = cpu_copy_shard_in,
    .compute = cpu_compute,
    .scale_grads = cpu_scale_grads,
    .copy_grads_out = cpu_copy_grads_out,
    .bind_params = cpu_bind_params,
    .set_sync = cpu_set_sync,
    .forward_end_sec = cpu_forward_end_sec,
    .describe_algorithms = cpu_describe_algorithms,
    .host_n_bytes = cpu_host_n_bytes,
    .update_moving = cpu_update_moving,
};
