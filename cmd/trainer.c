/* trainer.c — the training loop's parts wired together (see trainer.h).
 * No math lives here: it calls io/, tower/ and ps/ in the order of a step,
 * one function per variable placement mode (step_parameter_server_cpu,
 * step_replicated_host, step_parameter_server_gpu, step_replicated_nccl),
 * and records where the time went (TrainerStepTimes, the --trace file).
 * For the GPU modes it takes each tower's device buffers from the tower
 * backend (tower_group_device_view) and hands them to ps/ (ps/ps_gpu.h,
 * ps/allreduce_nccl.h).
 */
#include "cmd/trainer.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "io/events.h"
#include "io/rng.h"

void trainer_options_defaults(TrainerOptions *o) {
    memset(o, 0, sizeof *o);
    o->model = "mnist";
    o->data = "data/fashion-mnist/train-*.tfrecord";
    o->train_dir = "/tmp/tower_train";
    o->device = "auto";
    o->optimizer = "momentum";
    o->image_key = "image_raw";
    o->label_key = "label";
    o->compression = "auto";
    o->shard_sizes = "";
    o->max_steps = 1000000;
    o->batch_size = 128;
    o->num_towers = 0;
    o->num_gpus = 1;
    o->gpus = "";
    o->num_classes = 10;
    o->image_size = 24;
    o->learning_rate = 0.01f;
    o->momentum = 0.9f;
    o->nesterov = 1;
    o->lr_decay_factor = 0.1f;
    o->num_epochs_per_decay = 0.0f;
    o->moving_average_decay = 0.9999f;
    o->seed = 1;
    o->log_every = 10;
    o->save_every = 1000;
    o->keep_checkpoints = 5;
    o->min_after_dequeue = 20000;
    o->input_threads = 0;
    o->max_corrupt_fraction = (float)IO_DEFAULT_MAX_CORRUPT_FRACTION;
    o->variable_update = "parameter_server";
    o->local_parameter_device = "cpu";
    o->all_reduce = "auto";
    o->trace = "";
}

/* ---- variable placement modes ---- */

static const char *const mode_names[TRAINER_N_MODES] = {"ps_cpu", "ps_gpu", "replicated_host", "replicated_nccl"};

const char *trainer_mode_name(TrainerMode m) { return m >= 0 && m < TRAINER_N_MODES ? mode_names[m] : "?"; }

int trainer_mode_from_flags(const char *variable_update, const char *local_parameter_device,
                            const char *all_reduce, TrainerMode *mode, char *err, size_t err_n_bytes) {
    if (!strcmp(variable_update, "parameter_server")) {
        if (!strcmp(local_parameter_device, "cpu")) *mode = TRAINER_PS_CPU;
        else if (!strcmp(local_parameter_device, "gpu")) *mode = TRAINER_PS_GPU;
        else {
            snprintf(err, err_n_bytes, "--local_parameter_device '%s': expected cpu or gpu", local_parameter_device);
            return -1;
        }
        return 0;
    }
    if (!strcmp(variable_update, "replicated")) {
        if (!strcmp(all_reduce, "host") || !strcmp(all_reduce, "auto")) *mode = TRAINER_REPLICATED_HOST;
        else if (!strcmp(all_reduce, "nccl")) *mode = TRAINER_REPLICATED_NCCL;
        else {
            snprintf(err, err_n_bytes, "--all_reduce '%s': expected auto, host or nccl", all_reduce);
            return -1;
        }
        return 0;
    }
    snprintf(err, err_n_bytes, "--variable_update '%s': expected parameter_server or replicated", variable_update);
    return -1;
}

int trainer_mode_from_name(const char *name, TrainerMode *mode, char *err, size_t err_n_bytes) {
    static const struct { const char *name; TrainerMode mode; } aliases[] = {
        {"ps_cpu", TRAINER_PS_CPU}, {"parameter_server", TRAINER_PS_CPU}, {"parameter_server/cpu", TRAINER_PS_CPU},
        {"ps_gpu", TRAINER_PS_GPU}, {"parameter_server/gpu", TRAINER_PS_GPU},
        {"replicated_host", TRAINER_REPLICATED_HOST}, {"replicated", TRAINER_REPLICATED_HOST},
        {"replicated/host", TRAINER_REPLICATED_HOST},
        {"replicated_nccl", TRAINER_REPLICATED_NCCL}, {"replicated/nccl", TRAINER_REPLICATED_NCCL},
    };
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        if (!strcmp(name, aliases[i].name)) {
            *mode = aliases[i].mode;
            return 0;
        }
    }
    snprintf(err, err_n_bytes, "unknown mode '%s': expected ps_cpu, ps_gpu, replicated_host or replicated_nccl "
             "(or parameter_server/cpu, parameter_server/gpu, replicated/host, replicated/nccl)", name);
    return -1;
}

void trainer_mode_set_flags(TrainerMode m, TrainerOptions *o) {
    const int replicated = m == TRAINER_REPLICATED_HOST || m == TRAINER_REPLICATED_NCCL;
    o->variable_update = replicated ? "replicated" : "parameter_server";
    o->local_parameter_device = m == TRAINER_PS_GPU ? "gpu" : "cpu";
    o->all_reduce = m == TRAINER_REPLICATED_NCCL ? "nccl" : replicated ? "host" : "auto";
}

int trainer_mode_available(TrainerMode m, char *err, size_t err_n_bytes) {
    switch (m) {
    case TRAINER_PS_CPU:
    case TRAINER_REPLICATED_HOST: return 1;
    case TRAINER_PS_GPU:
#ifdef TOWER_HAVE_CUDA
        return 1;
#else
        snprintf(err, err_n_bytes, "--variable_update parameter_server --local_parameter_device gpu needs GPU towers: "
                 "this tower was built without CUDA (cmake -DTOWER_CUDA=ON)");
        return 0;
#endif
    case TRAINER_REPLICATED_NCCL:
#if defined(TOWER_HAVE_NCCL)
        return 1;
#elif defined(TOWER_HAVE_CUDA)
        snprintf(err, err_n_bytes, "--variable_update replicated --all_reduce nccl needs NCCL: this tower was built "
                 "without it (cmake -DTOWER_NCCL=ON, with -DNCCL_ROOT=... when it is outside the CUDA toolkit)");
        return 0;
#else
        snprintf(err, err_n_bytes, "--variable_update replicated --all_reduce nccl needs GPU towers and NCCL: this "
                 "tower was built without CUDA (cmake -DTOWER_CUDA=ON)");
        return 0;
#endif
    default: break;
    }
    snprintf(err, err_n_bytes, "unknown mode %d", (int)m);
    return 0;
}

static int is_replicated(TrainerMode m) { return m == TRAINER_REPLICATED_HOST || m == TRAINER_REPLICATED_NCCL; }

/* The modes whose variables live on the GPUs. */
static int is_gpu_mode(TrainerMode m) { return m == TRAINER_PS_GPU || m == TRAINER_REPLICATED_NCCL; }

/* After plan_towers: --all_reduce auto becomes nccl on GPU towers when this
 * build has NCCL, and the GPU modes need GPU towers.  0, or -1 with err. */
static int settle_mode(Trainer *tr, char *err, size_t err_n_bytes) {
    const int gpu_towers = tr->backend->device_view != NULL;
#ifdef TOWER_HAVE_NCCL
    if (tr->mode == TRAINER_REPLICATED_HOST && !strcmp(tr->opt.all_reduce, "auto") && gpu_towers)
        tr->mode = TRAINER_REPLICATED_NCCL;
#endif
    if (is_gpu_mode(tr->mode) && !gpu_towers) {
        snprintf(err, err_n_bytes, "%s needs GPU towers, and --device %s gave %s towers (use --device gpu on a "
                 "machine with a usable GPU)",
                 tr->mode == TRAINER_PS_GPU ? "--variable_update parameter_server --local_parameter_device gpu"
                                            : "--variable_update replicated --all_reduce nccl",
                 tr->opt.device, tr->backend->name);
        return -1;
    }
    return 0;
}

void trainer_timestamp(char *out, size_t out_n_bytes) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    char day[32];
    strftime(day, sizeof day, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(out, out_n_bytes, "%s.%06ld", day, (long)tv.tv_usec);
}

static int parse_compression(const char *s) {
    if (!strcmp(s, "none")) return IO_COMPRESSION_NONE;
    if (!strcmp(s, "gzip")) return IO_COMPRESSION_GZIP;
    if (!strcmp(s, "zlib")) return IO_COMPRESSION_ZLIB;
    if (!strcmp(s, "auto")) return IO_COMPRESSION_AUTO;
    return -1;
}

/* Per-tower shard sizes: equal (batch_size each) or the user's list. */
static int plan_shards(Trainer *tr, char *err, size_t err_n_bytes) {
    const TrainerOptions *o = &tr->opt;
    tr->global_batch = 0;
    if (o->shard_sizes[0] == '\0') {
        for (int t = 0; t < tr->n_towers; t++) tr->shard_sizes[t] = o->batch_size;
    } else {
        const char *p = o->shard_sizes;
        for (int t = 0; t < tr->n_towers; t++) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p || v < 1 || v > 1 << 20 || (t + 1 < tr->n_towers && *end != ',')) {
                snprintf(err, err_n_bytes, "--shard_sizes '%s': need %d positive sizes separated by commas",
                         o->shard_sizes, tr->n_towers);
                return -1;
            }
            tr->shard_sizes[t] = (int)v;
            p = end + 1;
            if (t + 1 == tr->n_towers && *end != '\0') {
                snprintf(err, err_n_bytes, "--shard_sizes '%s': more sizes than the %d towers",
                         o->shard_sizes, tr->n_towers);
                return -1;
            }
        }
    }
    for (int t = 0; t < tr->n_towers; t++) tr->global_batch += tr->shard_sizes[t];
    return 0;
}

/* Which backend, how many towers, and on which devices. */
#ifdef TOWER_HAVE_CUDA
/* The GPUs the towers use: --gpus "0,2,3", else the first --num_gpus of the
 * n_visible ones.  Returns how many, or -1 with err. */
static int plan_gpus(const TrainerOptions *o, int n_visible, int *gpus, char *err, size_t err_n_bytes) {
    int n = 0;
    if (o->gpus[0]) {
        for (const char *p = o->gpus; *p;) {
            char *end;
            long g = strtol(p, &end, 10);
            if (end == p || (*end && *end != ',') || g < 0 || g >= n_visible || n == TOWER_MAX_TOWERS) {
                snprintf(err, err_n_bytes, "--gpus '%s': need comma-separated GPU numbers below %d (the visible GPUs)",
                         o->gpus, n_visible);
                return -1;
            }
            gpus[n++] = (int)g;
            p = *end ? end + 1 : end;
        }
        return n;
    }
    if (o->num_gpus < 1 || o->num_gpus > n_visible) {
        snprintf(err, err_n_bytes, "--num_gpus %d: %d GPU(s) are visible", o->num_gpus, n_visible);
        return -1;
    }
    for (n = 0; n < o->num_gpus; n++) gpus[n] = n;
    return n;
}
#endif

/* Which backend, how many towers, and on which devices.  --device auto takes
 * GPU towers when a GPU is usable and says which it chose. */
static int plan_towers(Trainer *tr, TowerGroupConfig *tc, char *err, size_t err_n_bytes) {
    const TrainerOptions *o = &tr->opt;
    const char *dev = o->device;
    if (strcmp(dev, "cpu") != 0 && strcmp(dev, "gpu") != 0 && strcmp(dev, "auto") != 0) {
        snprintf(err, err_n_bytes, "--device '%s': expected cpu, gpu or auto", dev);
        return -1;
    }
    char why_cpu[300] = "";
    int gpus[TOWER_MAX_TOWERS], n_gpus = 0;
    if (strcmp(dev, "cpu") != 0) {
#ifdef TOWER_HAVE_CUDA
        char e[256];
        int n_visible = tower_cuda_device_count(e, sizeof e);
        if (n_visible > 0) {
            n_gpus = plan_gpus(o, n_visible, gpus, err, err_n_bytes);
            if (n_gpus < 0) return -1;
        } else if (!strcmp(dev, "gpu")) {
            snprintf(err, err_n_bytes, "--device gpu: %s", n_visible < 0 ? e : "no GPU is visible");
            return -1;
        } else {
            snprintf(why_cpu, sizeof why_cpu, "%s", n_visible < 0 ? e : "no GPU is visible");
        }
#else
        if (!strcmp(dev, "gpu")) {
            snprintf(err, err_n_bytes, "--device gpu: this tower was built without CUDA (cmake -DTOWER_CUDA=ON)");
            return -1;
        }
        snprintf(why_cpu, sizeof why_cpu, "built without CUDA");
#endif
    }
    memset(tc, 0, sizeof *tc);
    if (n_gpus > 0) {
#ifdef TOWER_HAVE_CUDA
        tr->backend = o->deterministic ? (o->allow_tf32 ? &tower_backend_cuda_tf32_deterministic
                                                        : &tower_backend_cuda_deterministic)
                                       : (o->allow_tf32 ? &tower_backend_cuda_tf32 : &tower_backend_cuda);
#endif
        tr->n_towers = o->num_towers > 0 ? o->num_towers : n_gpus;
        if (tr->n_towers > TOWER_MAX_TOWERS) {
            snprintf(err, err_n_bytes, "--num_towers %d: at most %d", tr->n_towers, TOWER_MAX_TOWERS);
            return -1;
        }
        tr->server_threads = omp_get_max_threads();
        tc->backend = tr->backend;
        tc->n_towers = tr->n_towers;
        for (int t = 0; t < tr->n_towers; t++) {
            tc->devices[t] = gpus[t % n_gpus]; /* several towers on a GPU: each its own stream */
            tc->n_threads[t] = 1;
        }
        if (!strcmp(dev, "auto")) {
            char ts[64];
            trainer_timestamp(ts, sizeof ts);
            printf("%s: device auto: %d GPU tower(s) on %d GPU(s)\n", ts, tr->n_towers, n_gpus);
        }
        return 0;
    }
    if (!strcmp(dev, "auto")) {
        char ts[64];
        trainer_timestamp(ts, sizeof ts);
        printf("%s: device auto: CPU towers (%s)\n", ts, why_cpu);
    }
    tr->backend = &tower_backend_cpu;
    tr->n_towers = o->num_towers > 0 ? o->num_towers : 1;
    /* The server's average and update run while the towers wait.  With as many CPU
     * towers as cores, a second OpenMP thread of the server would, after those loops,
     * keep spinning (libgomp waits actively for its next region) on a core that a tower
     * needs: measured, it slowed one of 2 towers' forward pass by 2x (docs/modes.md). */
    tr->server_threads = tr->n_towers >= sysconf(_SC_NPROCESSORS_ONLN) ? 1 : omp_get_max_threads();
    if (tr->n_towers > TOWER_MAX_TOWERS) {
        snprintf(err, err_n_bytes, "--num_towers %d: at most %d", tr->n_towers, TOWER_MAX_TOWERS);
        return -1;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    tc->backend = tr->backend;
    tc->n_towers = tr->n_towers;
    for (int t = 0; t < tr->n_towers; t++) {
        /* C cores over N towers: the first C % N towers get one more. */
        int share = (int)(cores / tr->n_towers) + (t < cores % tr->n_towers ? 1 : 0);
        tc->n_threads[t] = share > 0 ? share : 1;
        tc->devices[t] = 0;
    }
    return 0;
}

/* The process's resident set (VmRSS of /proc/self/status) in bytes, or 0
 * where it cannot be read (the bound is then lower by it). */
static size_t resident_n_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %zu kB", &kib) == 1) break;
    fclose(f);
    return kib * 1024;
}

size_t trainer_max_n_bytes(const Trainer *tr, TrainerMemory *m) {
    TrainerMemory local;
    if (!m) m = &local;
    memset(m, 0, sizeof *m);
    if (tr->opt.synthetic) {
        const size_t example_n_floats = (size_t)tr->spec.H * tr->spec.W * tr->spec.C;
        m->input_n_bytes = (size_t)tr->global_batch * (example_n_floats * sizeof(float) + sizeof(int32_t)) + 2 * 4096;
    } else {
        m->input_n_bytes = pipeline_max_n_bytes(&tr->pipeline_cfg, tr->record_n_bytes, &m->pipeline);
    }
    m->variables_n_bytes = tr->ps ? ps_host_n_bytes(tr->ps) : 0;
    m->towers_known = tr->backend && tr->backend->host_n_bytes;
    if (m->towers_known) {
        for (int t = 0; t < tr->n_towers; t++) m->towers_n_bytes += tr->backend->host_n_bytes(&tr->spec, tr->shard_sizes[t]);
    }
    m->checkpoint_n_bytes = tr->ps ? (tr->opt.resume ? 2 : 1) * ckpt_max_n_bytes(tr->ps) : 0;
    m->summaries_n_bytes = event_writer_max_n_bytes((size_t)tr->spec.n_vars);
    m->loaded_n_bytes = tr->loaded_n_bytes;
    m->runtime_n_bytes = TRAINER_RUNTIME_N_BYTES;
    m->total_n_bytes = m->input_n_bytes + m->variables_n_bytes + m->towers_n_bytes + m->checkpoint_n_bytes +
                       m->summaries_n_bytes + m->loaded_n_bytes + m->runtime_n_bytes;
    return m->total_n_bytes;
}

static double mib(size_t n_bytes) { return (double)n_bytes / (1024.0 * 1024.0); }

/* One line: the bound and its parts. */
static void log_memory_bound(const Trainer *tr, const char *ts) {
    TrainerMemory m;
    trainer_max_n_bytes(tr, &m);
    if (tr->opt.synthetic)
        printf("%s: memory bound %.1f MiB = synthetic batch %.1f", ts, mib(m.total_n_bytes), mib(m.input_n_bytes));
    else
        printf("%s: memory bound %.1f MiB = input pipeline %.1f (shuffle capacity %ld, %ld slots of %zu bytes, "
               "%d staging batches, records up to %zu bytes)", ts, mib(m.total_n_bytes), mib(m.input_n_bytes),
               m.pipeline.capacity, m.pipeline.n_slots, m.pipeline.slot_n_bytes, m.pipeline.prefetch_batches,
               tr->record_n_bytes);
    printf(" + variables %.1f + towers %.1f%s + checkpoint %.1f + summaries %.1f + loaded %.1f + runtime %.1f\n",
           mib(m.variables_n_bytes), mib(m.towers_n_bytes),
           m.towers_known ? "" : " (not counted: device memory, and the CUDA runtime's host memory)",
           mib(m.checkpoint_n_bytes), mib(m.summaries_n_bytes), mib(m.loaded_n_bytes), mib(m.runtime_n_bytes));
}

/* The GPU modes' lines of --log_device_placement. */
static void log_gpu_mode_placement(const Trainer *tr, const char *ts) {
#ifdef TOWER_HAVE_CUDA
    if (tr->ps_gpu) {
        const int d = ps_gpu_device(tr->ps_gpu);
        printf("%s: global batch %d = %d tower(s); mode %s: variables, momentum slots and moving averages in device "
               "memory on /gpu:%d; gradients gathered there (", ts, tr->global_batch, tr->n_towers,
               trainer_mode_name(tr->mode), d);
        for (int t = 0; t < tr->n_towers; t++) {
            const int peer = ps_gpu_peer_access(tr->ps_gpu, t);
            printf("%stower_%d %s", t ? ", " : "", t,
                   peer < 0 ? "in place" : peer ? "peer to peer" : "staged through host memory");
        }
        printf("), averaged and applied by kernels on /gpu:%d, variables copied to every tower each step; "
               "global_step on /cpu:0\n", d);
    }
#ifdef TOWER_HAVE_NCCL
    if (tr->nccl)
        printf("%s: global batch %d = %d tower(s); mode %s: every tower keeps its own variables on its GPU, with its "
               "momentum slots and its share of the moving averages; gradients all-reduced by NCCL over %d rank(s), "
               "one per GPU (the towers of a GPU summed on it first); every tower applies the update; global_step "
               "on /cpu:0\n", ts, tr->global_batch, tr->n_towers, trainer_mode_name(tr->mode),
               allreduce_nccl_n_ranks(tr->nccl));
#endif
#else
    (void)tr;
    (void)ts;
#endif
}

static void log_device_placement(const Trainer *tr, const TowerGroupConfig *tc) {
    char ts[64];
    trainer_timestamp(ts, sizeof ts);
    printf("%s: variables: %zu floats (%.1f MiB) of model %s in %s on /cpu:0, with momentum slots and moving averages beside them%s\n",
           ts, tr->spec.n_params, tr->spec.n_params * 4.0 / (1024 * 1024), tr->spec.name, tr->alloc.kind,
           is_gpu_mode(tr->mode) ? " (a copy for checkpoints; the trained ones live on the GPUs)" : "");
    for (int t = 0; t < tr->n_towers; t++) {
        char d[256];
        tr->backend->describe_device(tc->devices[t], d, sizeof d);
        printf("%s: tower_%d: %s backend, device %s, %d OpenMP thread(s), batch %d\n", ts, t,
               tr->backend->name, d, tc->n_threads[t], tr->shard_sizes[t]);
        TowerDeviceView v = {0};
        char e[256];
        if (tr->backend->device_view && tower_group_device_view(tr->towers, t, &v, e, sizeof e) == 0 && v.algorithms &&
            v.algorithms[0])
            printf("%s: tower_%d: cuDNN algorithms: %s\n", ts, t, v.algorithms);
    }
    if (is_gpu_mode(tr->mode))
        log_gpu_mode_placement(tr, ts);
    else if (is_replicated(tr->mode))
        printf("%s: global batch %d = %d tower(s); mode %s: every tower keeps its own variables and momentum slots "
               "(%s), gradients all-reduced by a ring over the towers' host buffers, every tower applies the update; "
               "each tower also updates its share of the moving averages; global_step on /cpu:0\n",
               ts, tr->global_batch, tr->n_towers, trainer_mode_name(tr->mode),
               tr->replicas_bound ? "computed on in place" : "copied in each step");
    else
        printf("%s: global batch %d = %d tower(s); mode %s: gradients averaged and applied on /cpu:0 by %d OpenMP "
               "thread(s)\n", ts, tr->global_batch, tr->n_towers, trainer_mode_name(tr->mode), tr->server_threads);
    log_memory_bound(tr, ts);
    fflush(stdout);
}

int trainer_close(Trainer *tr, char *err, size_t err_n_bytes) {
    int rc = 0;
    if (tr->pipeline) pipeline_close(tr->pipeline);
#ifdef TOWER_HAVE_NCCL
    allreduce_nccl_free(tr->nccl);
#endif
#ifdef TOWER_HAVE_CUDA
    ps_gpu_free(tr->ps_gpu);
    ps_gpu_replicas_free(tr->gpu_replicas);
#endif
    if (tr->towers) tower_group_free(tr->towers);
    if (tr->allreduce) allreduce_host_free(tr->allreduce);
    if (tr->trace) {
        char e[1200];
        if (trace_close(tr->trace, e, sizeof e) != 0) {
            if (err) snprintf(err, err_n_bytes, "%s", e);
            else fprintf(stderr, "tower: %s\n", e);
            rc = -1;
        }
    }
    if (tr->synthetic_x) tr->alloc.free(tr->synthetic_x, tr->alloc.ctx);
    if (tr->synthetic_labels) tr->alloc.free(tr->synthetic_labels, tr->alloc.ctx);
    if (tr->ps) ps_free(tr->ps);
    if (tr->files) {
        for (int i = 0; i < tr->n_files; i++) free(tr->files[i]);
        free(tr->files);
    }
    memset(tr, 0, sizeof *tr);
    return rc;
}

/* The GPU modes' state, from the towers' device buffers: ps_gpu's server
 * on tower 0's GPU, or replicated_nccl's per-tower slots and the NCCL
 * communicator.  0, or -1 with err. */
static int open_gpu_state(Trainer *tr, char *err, size_t err_n_bytes) {
#ifdef TOWER_HAVE_CUDA
    int devices[TOWER_MAX_TOWERS];
    float *params[TOWER_MAX_TOWERS], *grads[TOWER_MAX_TOWERS];
    char e[512];
    for (int t = 0; t < tr->n_towers; t++) {
        TowerDeviceView v;
        if (tower_group_device_view(tr->towers, t, &v, err, err_n_bytes) != 0) return -1;
        devices[t] = v.device;
        params[t] = v.params;
        grads[t] = v.grads;
    }
    if (tr->mode == TRAINER_PS_GPU) {
        tr->ps_gpu = ps_gpu_create(tr->ps, tr->n_towers, devices, grads, e, sizeof e);
        if (!tr->ps_gpu) {
            snprintf(err, err_n_bytes, "--local_parameter_device gpu: %s", e);
            return -1;
        }
        return 0;
    }
#ifdef TOWER_HAVE_NCCL
    tr->gpu_replicas = ps_gpu_replicas_create(tr->ps, tr->n_towers, devices, params, grads, e, sizeof e);
    if (!tr->gpu_replicas) {
        snprintf(err, err_n_bytes, "--all_reduce nccl: %s", e);
        return -1;
    }
    tr->nccl = allreduce_nccl_create(tr->n_towers, devices, grads, tr->spec.n_params, e, sizeof e);
    if (!tr->nccl) {
        snprintf(err, err_n_bytes, "--all_reduce nccl: %s", e);
        return -1;
    }
    return 0;
#else
    (void)params; /* replicated_nccl is not built in: trainer_mode_available refused it */
#endif
#endif
    return trainer_mode_available(tr->mode, err, err_n_bytes) ? 0 : -1;
}

/* opt.synthetic: one global batch of seeded uniform [-1, 1) images and uniform labels,
 * handed out every step (tf_cnn_benchmarks' synthetic data), from the backend's allocator. */
static int make_synthetic_batch(Trainer *tr, char *err, size_t err_n_bytes) {
    const size_t example_n_floats = (size_t)tr->spec.H * tr->spec.W * tr->spec.C;
    const size_t n = (size_t)tr->global_batch;
    tr->synthetic_x = tr->alloc.alloc(n * example_n_floats * sizeof(float), tr->alloc.ctx);
    tr->synthetic_labels = tr->alloc.alloc(n * sizeof(int32_t), tr->alloc.ctx);
    if (!tr->synthetic_x || !tr->synthetic_labels) {
        snprintf(err, err_n_bytes, "out of memory for a synthetic batch of %zu examples", n);
        return -1;
    }
    float *x = tr->synthetic_x;
    int32_t *labels = tr->synthetic_labels;
    uint64_t state = rng_seed((uint64_t)tr->opt.seed, 0x5e17, 0);
    for (size_t i = 0; i < n * example_n_floats; i++) x[i] = 2.0f * rng_uniform01(&state) - 1.0f;
    for (size_t i = 0; i < n; i++) labels[i] = (int32_t)rng_below(&state, (uint64_t)tr->spec.num_classes);
    PipelineBatch *b = &tr->synthetic;
    b->x = x;
    b->labels = labels;
    b->n = (int)n;
    b->example_n_floats = example_n_floats;
    pipeline_split_shards((int)n, tr->n_towers, tr->shard_sizes, b->shard_offset, b->shard_n);
    return 0;
}

/* The last part of trainer_open: the --trace file with its rows named, and the placement log. */
static int open_trace(Trainer *tr, const TowerGroupConfig *tc, char *err, size_t err_n_bytes) {
    const TrainerOptions *o = &tr->opt;
    if (o->trace && o->trace[0]) {
        char process[128];
        snprintf(process, sizeof process, "tower %s %s, %d tower(s)", tr->spec.name, trainer_mode_name(tr->mode),
                 tr->n_towers);
        tr->trace = trace_open(o->trace, process, err, err_n_bytes);
        if (!tr->trace) {
            trainer_close(tr, NULL, 0);
            return -1;
        }
        trace_name_row(tr->trace, 0, is_replicated(tr->mode)       ? "server: input, global_step"
                                     : tr->mode == TRAINER_PS_GPU ? "parameter server (GPU)"
                                                                  : "parameter server");
        for (int t = 0; t < tr->n_towers; t++) {
            char name[32];
            snprintf(name, sizeof name, "tower_%d", t);
            trace_name_row(tr->trace, 1 + t, name);
        }
        if (is_replicated(tr->mode))
            trace_name_row(tr->trace, 1 + tr->n_towers,
                           tr->mode == TRAINER_REPLICATED_NCCL ? "all-reduce (NCCL)" : "all-reduce (ring)");
    }
    if (o->log_device_placement) log_device_placement(tr, tc);
    return 0;
}

int trainer_open(Trainer *tr, const TrainerOptions *opt, char *err, size_t err_n_bytes) {
    memset(tr, 0, sizeof *tr);
    tr->loaded_n_bytes = resident_n_bytes();
    tr->opt = *opt;
    const TrainerOptions *o = &tr->opt;
    char e[512];
    if (o->batch_size < 1) {
        snprintf(err, err_n_bytes, "--batch_size must be at least 1, got %d", o->batch_size);
        return -1;
    }
    if (trainer_mode_from_flags(o->variable_update, o->local_parameter_device, o->all_reduce, &tr->mode, err,
                                err_n_bytes) != 0 ||
        !trainer_mode_available(tr->mode, err, err_n_bytes))
        return -1;
    int compression = parse_compression(o->compression);
    if (compression < 0) {
        snprintf(err, err_n_bytes, "--compression '%s': expected auto, none, gzip or zlib", o->compression);
        return -1;
    }
    TowerGroupConfig tc;
    if (plan_towers(tr, &tc, err, err_n_bytes) || settle_mode(tr, err, err_n_bytes) || plan_shards(tr, err, err_n_bytes))
        return -1;
    tc.max_batch = 0;
    for (int t = 0; t < tr->n_towers; t++)
        if (tr->shard_sizes[t] > tc.max_batch) tc.max_batch = tr->shard_sizes[t];
    tr->alloc = tr->backend->host_alloc(tc.devices[0]);

    /* The data: its files and the shape of one stored image (synthetic: the model's input shape). */
    int is_cifar = !strcmp(o->model, "cifar10");
    int H, W, C, is_float;
    if (o->synthetic) {
        H = W = is_cifar ? 32 : 28;
        C = is_cifar ? 3 : 1;
        is_float = 1;
    } else {
        if (io_expand_globs(o->data, &tr->files, &tr->n_files, e, sizeof e) != 0) {
            snprintf(err, err_n_bytes, "--data: %s", e);
            return -1;
        }
        if (io_probe_image_shape(tr->files[0], o->image_key, compression, &H, &W, &C, &is_float, e, sizeof e) != 0) {
            snprintf(err, err_n_bytes, "%s", e);
            trainer_close(tr, NULL, 0);
            return -1;
        }
    }
    tr->record_n_bytes = (size_t)H * W * C * (is_float ? sizeof(float) : 1) + 4096;
    int out_H = H, out_W = W;
    if (is_cifar && o->image_size > 0) {
        if (o->image_size > H || o->image_size > W) {
            snprintf(err, err_n_bytes, "--image_size %d is larger than the %dx%d images of %s", o->image_size, H, W,
                     tr->files[0]);
            trainer_close(tr, NULL, 0);
            return -1;
        }
        out_H = out_W = o->image_size;
    }
    if (model_spec_init(&tr->spec, o->model, out_H, out_W, C, o->num_classes, e, sizeof e) != 0) {
        snprintf(err, err_n_bytes, "--model: %s", e);
        trainer_close(tr, NULL, 0);
        return -1;
    }
    tr->examples_per_epoch = o->num_examples_per_epoch;
    if (tr->examples_per_epoch <= 0 && o->num_epochs_per_decay > 0 && !o->synthetic) {
        tr->examples_per_epoch = io_count_records((const char *const *)tr->files, tr->n_files, compression, e, sizeof e);
        if (tr->examples_per_epoch < 0) {
            snprintf(err, err_n_bytes, "%s", e);
            trainer_close(tr, NULL, 0);
            return -1;
        }
    }

    /* The parameter server: master variables in host memory from the backend. */
    PsConfig pc;
    ps_config_defaults(&pc);
    if (!strcmp(o->optimizer, "sgd")) {
        pc.opt.kind = OPT_SGD;
    } else if (!strcmp(o->optimizer, "momentum")) {
        pc.opt.kind = OPT_MOMENTUM;
        pc.opt.momentum = o->momentum;
        pc.opt.nesterov = o->nesterov;
    } else {
        snprintf(err, err_n_bytes, "--optimizer '%s': expected momentum or sgd", o->optimizer);
        trainer_close(tr, NULL, 0);
        return -1;
    }
    pc.lr.initial_lr = o->learning_rate;
    pc.lr.decay_factor = o->lr_decay_factor;
    pc.lr.staircase = 1;
    pc.lr.decay_steps = 0;
    if (o->num_epochs_per_decay > 0)
        pc.lr.decay_steps = (long)((double)tr->examples_per_epoch / tr->global_batch * o->num_epochs_per_decay);
    pc.ema_decay = o->moving_average_decay;
    tr->ps = ps_create(&tr->spec, tr->n_towers, &pc, tr->alloc, (uint64_t)o->seed);
    if (!tr->ps) {
        snprintf(err, err_n_bytes, "cannot create the parameter server for %zu variables (out of memory?)", tr->spec.n_params);
        trainer_close(tr, NULL, 0);
        return -1;
    }
    if (o->resume) {
        char path[4096];
        int found = ckpt_find_latest(o->train_dir, path, sizeof path, e, sizeof e);
        if (found < 0) {
            snprintf(err, err_n_bytes, "--resume: %s", e);
            trainer_close(tr, NULL, 0);
            return -1;
        }
        if (found == 1) {
            CkptRunState run;
            if (ckpt_load(path, tr->ps, &run, e, sizeof e) != 0) {
                snprintf(err, err_n_bytes, "--resume: %s", e);
                trainer_close(tr, NULL, 0);
                return -1;
            }
            if (run.n_towers != tr->n_towers || run.batch_size != o->batch_size || run.seed != (uint64_t)o->seed) {
                char ts[64];
                trainer_timestamp(ts, sizeof ts);
                fprintf(stderr, "%s: note: %s was written with %d tower(s), batch %d, seed %llu; continuing with %d, %d, %ld (the run will not be bitwise a straight one)\n",
                        ts, path, run.n_towers, run.batch_size, (unsigned long long)run.seed, tr->n_towers,
                        o->batch_size, o->seed);
            }
            tr->examples_consumed = run.examples_consumed;
            char ts[64];
            trainer_timestamp(ts, sizeof ts);
            printf("%s: resumed from %s at step %ld\n", ts, path, tr->ps->global_step);
        }
    }

    /* replicated_host: every tower's own variables and slots (the initial broadcast), and the ring. */
    if (tr->mode == TRAINER_REPLICATED_HOST) {
        if (ps_create_replicas(tr->ps, tr->n_towers) != 0) {
            snprintf(err, err_n_bytes, "cannot allocate %d replicas of %zu variables (out of memory?)", tr->n_towers,
                     tr->spec.n_params);
            trainer_close(tr, NULL, 0);
            return -1;
        }
        tr->allreduce = allreduce_host_create(tr->n_towers, err, err_n_bytes);
        if (!tr->allreduce) {
            trainer_close(tr, NULL, 0);
            return -1;
        }
    }

    /* The towers, each delivering into its own host gradient buffer. */
    tr->towers = tower_group_create(&tc, &tr->spec, tr->ps->tower_grads, e, sizeof e);
    if (!tr->towers) {
        snprintf(err, err_n_bytes, "%s", e);
        trainer_close(tr, NULL, 0);
        return -1;
    }
    if (tr->mode == TRAINER_REPLICATED_HOST) {
        tr->replicas_bound = tower_group_bind_params(tr->towers, tr->ps->replica_params, e, sizeof e);
        if (tr->replicas_bound < 0) {
            snprintf(err, err_n_bytes, "%s", e);
            trainer_close(tr, NULL, 0);
            return -1;
        }
    }
    /* The GPU modes: the server's state on the GPUs, made from the (initial or resumed) host block. */
    if (is_gpu_mode(tr->mode) && open_gpu_state(tr, err, err_n_bytes) != 0) {
        trainer_close(tr, NULL, 0);
        return -1;
    }

    if (o->synthetic) {
        if (make_synthetic_batch(tr, err, err_n_bytes) != 0) {
            trainer_close(tr, NULL, 0);
            return -1;
        }
        return open_trace(tr, &tc, err, err_n_bytes);
    }

    /* The input pipeline, writing batches into staging buffers from the same allocator. */
    PipelineConfig pcfg;
    pipeline_config_defaults(&pcfg);
    pcfg.files = (const char *const *)tr->files;
    pcfg.n_files = tr->n_files;
    pcfg.image_key = o->image_key;
    pcfg.label_key = o->label_key;
    pcfg.compression = compression;
    pcfg.in_H = H;
    pcfg.in_W = W;
    pcfg.in_C = C;
    pcfg.image_float = is_float;
    pcfg.out_H = out_H;
    pcfg.out_W = out_W;
    pcfg.num_classes = o->num_classes;
    pcfg.augment = is_cifar ? AUGMENT_CIFAR_TRAIN : AUGMENT_MNIST;
    pcfg.n_shards = tr->n_towers;
    for (int t = 0; t < tr->n_towers; t++) pcfg.shard_sizes[t] = tr->shard_sizes[t];
    pcfg.shuffle = 1;
    pcfg.min_after_dequeue = o->min_after_dequeue;
    pcfg.capacity = o->min_after_dequeue + 3L * tr->global_batch;
    pcfg.num_epochs = o->num_epochs;
    pcfg.seed = (uint64_t)o->seed;
    if (o->input_threads > 0) pcfg.n_workers = o->input_threads;
    if (pcfg.prefetch_batches < 2 * tr->n_towers) pcfg.prefetch_batches = 2 * tr->n_towers;
    pcfg.alloc = tr->alloc;
    pcfg.skip_corrupt = o->skip_corrupt;
    pcfg.max_corrupt_fraction = o->max_corrupt_fraction;
    pcfg.warn = o->warn;
    pcfg.warn_ctx = o->warn_ctx;
    pcfg.drop_remainder = 1;
    pcfg.skip_examples = tr->examples_consumed;
    tr->pipeline_cfg = pcfg;
    tr->pipeline = pipeline_open(&pcfg, e, sizeof e);
    if (!tr->pipeline) {
        snprintf(err, err_n_bytes, "%s", e);
        trainer_close(tr, NULL, 0);
        return -1;
    }
    return open_trace(tr, &tc, err, err_n_bytes);
}

/* The next global batch: from the pipeline, or the synthetic one. */
static int next_batch(Trainer *tr, PipelineBatch **batch, char *err, size_t err_n_bytes) {
    if (tr->opt.synthetic) {
        *batch = &tr->synthetic;
        return 1;
    }
    return pipeline_next(tr->pipeline, batch, err, err_n_bytes);
}

static void release_batch(Trainer *tr, PipelineBatch *batch) {
    if (!tr->opt.synthetic) pipeline_release(tr->pipeline, batch);
}

/* Run the towers on the batch (step's params and hooks already set), keep
 * their losses, give the batch back.  Returns 1, -1 (err) or -2 (a loss is
 * not finite: with hooks, no tower has applied anything). */
static int run_towers(Trainer *tr, TowerStep *step, PipelineBatch *batch, float *loss, char *err, size_t err_n_bytes) {
    step->x = batch->x;
    step->labels = batch->labels;
    step->shard_offset = batch->shard_offset;
    step->shard_n = batch->shard_n;
    tr->times.towers.start_sec = tower_now_sec();
    int rc = tower_group_run(tr->towers, step, err, err_n_bytes);
    tr->times.towers.end_sec = tower_now_sec();
    double loss_sum = 0.0, correct = 0.0;
    for (int t = 0; t < tr->n_towers && rc == 0; t++) {
        tr->tower_losses[t] = tr->towers->towers[t].loss;
        tr->tower_accuracy[t] = tr->towers->towers[t].accuracy;
        loss_sum += tr->tower_losses[t];
        correct += (double)tr->tower_accuracy[t] * batch->shard_n[t];
    }
    int n_examples = batch->n;
    release_batch(tr, batch);
    if (rc != 0) return -1;
    *loss = (float)(loss_sum / tr->n_towers);
    tr->accuracy = (float)(correct / n_examples);
    return isfinite(*loss) ? 1 : -2;
}

/* parameter_server, cpu: every tower copies the master variables in; the
 * server thread averages the gradients and applies the update. */
static int step_parameter_server_cpu(Trainer *tr, PipelineBatch *batch, float *loss, char *err, size_t err_n_bytes) {
    ParamServer *ps = tr->ps;
    TowerStep step = {.hooks = NULL};
    for (int t = 0; t < tr->n_towers; t++) step.params[t] = ps->params;
    int rc = run_towers(tr, &step, batch, loss, err, err_n_bytes);
    if (rc != 1) return rc;
    const int threads_before = omp_get_max_threads();
    omp_set_num_threads(tr->server_threads);
    tr->times.average.start_sec = tower_now_sec();
    ps_average_grads(ps);
    tr->times.average.end_sec = tr->times.apply.start_sec = tower_now_sec();
    ps_apply_gradients(ps);
    tr->times.apply.end_sec = tower_now_sec();
    omp_set_num_threads(threads_before);
    return 1;
}

/* The replicated modes' hooks, on each tower's thread. */
static int replicated_reduce_host(void *ctx, int tower, char *err, size_t err_n_bytes) {
    (void)err;
    (void)err_n_bytes;
    Trainer *tr = ctx;
    allreduce_host_ring_mean(tr->allreduce, tower, tr->ps->tower_grads, tr->spec.n_params);
    return 0;
}

static int replicated_apply(void *ctx, int tower, char *err, size_t err_n_bytes) {
    (void)err;
    (void)err_n_bytes;
    Trainer *tr = ctx;
    ps_replica_apply(tr->ps, tower, tr->ps->tower_grads[tower], tr->step_lr);
    return 0;
}

/* replicated, host: every tower computes on its own variables, the tower
 * threads ring-all-reduce their gradients and each applies the same update
 * to its own variables and its share of the moving averages; the server
 * thread only advances global_step. */
static int step_replicated_host(Trainer *tr, PipelineBatch *batch, float *loss, char *err, size_t err_n_bytes) {
    ParamServer *ps = tr->ps;
    tr->step_lr = ps_step_lr(ps);
    const TowerHooks hooks = {.reduce = replicated_reduce_host, .apply = replicated_apply, .ctx = tr};
    TowerStep step = {.hooks = &hooks};
    for (int t = 0; t < tr->n_towers; t++) step.params[t] = tr->replicas_bound ? NULL : ps->replica_params[t];
    int rc = run_towers(tr, &step, batch, loss, err, err_n_bytes);
    if (rc != 1) return rc;
    tr->times.apply.start_sec = tower_now_sec();
    ps_finish_replicated_step(ps, tr->step_lr);
    tr->times.apply.end_sec = tower_now_sec();
    return 1;
}

#ifdef TOWER_HAVE_CUDA
/* A device span (ms after `host_sec`, the host time just before the call
 * that measured it) on the host clock; empty when it did not run. */
static TowerSpan device_span(double host_sec, const PsGpuSpanMs *ms) {
    TowerSpan s = {0.0, 0.0};
    if (ms->ran) {
        s.start_sec = host_sec + 1e-3 * ms->start_ms;
        s.end_sec = host_sec + 1e-3 * ms->end_ms;
    }
    return s;
}

/* parameter_server, gpu: every tower copies the variables in from the
 * server's GPU and its gradient out to it (peer copies; nothing for a
 * gradient already there); the server averages and applies there. */
static int step_parameter_server_gpu(Trainer *tr, PipelineBatch *batch, float *loss, char *err, size_t err_n_bytes) {
    PsGpu *g = tr->ps_gpu;
    TowerDeviceCopy dc[TOWER_MAX_TOWERS];
    for (int t = 0; t < tr->n_towers; t++) {
        dc[t].params_src = ps_gpu_params(g);
        dc[t].params_device = ps_gpu_device(g);
        dc[t].grads_dst = ps_gpu_gather_dst(g, t);
        dc[t].grads_device = ps_gpu_device(g);
    }
    TowerStep step = {.hooks = NULL, .device_copy = dc};
    int rc = run_towers(tr, &step, batch, loss, err, err_n_bytes);
    if (rc != 1) return rc;
    PsGpuSpanMs average, apply;
    const double t0 = tower_now_sec();
    ps_gpu_step(g, tr->ps, &average, &apply);
    tr->times.average = device_span(t0, &average);
    tr->times.apply = device_span(t0, &apply);
    return 1;
}
#endif

#ifdef TOWER_HAVE_NCCL
/* replicated_nccl's hooks, on each tower's thread. */
static int replicated_reduce_nccl(void *ctx, int tower, char *err, size_t err_n_bytes) {
    (void)err;
    (void)err_n_bytes;
    Trainer *tr = ctx;
    PsGpuSpanMs nccl;
    const double t0 = tower_now_sec();
    allreduce_nccl_mean(tr->nccl, tower, &nccl);
    tr->nccl_spans[tower] = device_span(t0, &nccl);
    return 0;
}

static int replicated_apply_gpu(void *ctx, int tower, char *err, size_t err_n_bytes) {
    (void)err;
    (void)err_n_bytes;
    Trainer *tr = ctx;
    ps_gpu_replica_apply(tr->gpu_replicas, tower, tr->ps, tr->step_lr, NULL);
    return 0;
}

/* replicated, nccl: every tower computes on its own device variables (no
 * copy-in) and keeps its gradient on the device (no copy-out); the tower
 * threads all-reduce the gradients with NCCL and each applies the update
 * on its GPU; the server thread only advances global_step. */
static int step_replicated_nccl(Trainer *tr, PipelineBatch *batch, float *loss, char *err, size_t err_n_bytes) {
    ParamServer *ps = tr->ps;
    tr->step_lr = ps_step_lr(ps);
    const TowerHooks hooks = {.reduce = replicated_reduce_nccl, .apply = replicated_apply_gpu, .ctx = tr};
    TowerDeviceCopy dc[TOWER_MAX_TOWERS];
    memset(dc, 0, sizeof dc); /* no copy-in, no copy-out */
    for (int t = 0; t < tr->n_towers; t++) tr->nccl_spans[t] = (TowerSpan){0.0, 0.0};
    TowerStep step = {.hooks = &hooks, .device_copy = dc};
    int rc = run_towers(tr, &step, batch, loss, err, err_n_bytes);
    if (rc != 1) return rc;
    tr->times.apply.start_sec = tower_now_sec();
    ps_finish_replicated_step(ps, tr->step_lr);
    tr->times.apply.end_sec = tower_now_sec();
    return 1;
}
#endif

/* One step's spans into the --trace file: the server row, a row per tower, the all-reduce row. */
static void trace_step(Trainer *tr, long step) {
    static const char *const labels[TOWER_N_PHASES] = {"copy-in", "forward", "backward", "copy-out",
                                                       "wait for towers", "all-reduce", "apply"};
    static const char *const cats[TOWER_N_PHASES] = {"copy", "compute", "compute", "copy", "wait", "reduce", "apply"};
    Trace *trc = tr->trace;
    const TrainerStepTimes *st = &tr->times;
    char name[48];
    snprintf(name, sizeof name, "step %ld", step);
    trace_marker(trc, name, st->start_sec);
    trace_span(trc, 0, "input", "input", st->input.start_sec, st->input.end_sec);
    trace_span(trc, 0, "average", "reduce", st->average.start_sec, st->average.end_sec);
    trace_span(trc, 0, is_replicated(tr->mode) ? "global_step" : "apply", "apply", st->apply.start_sec,
               st->apply.end_sec);
    double reduce_start = 0.0, reduce_end = 0.0;
    for (int t = 0; t < tr->n_towers; t++) {
        const TowerTimes *tt = &tr->towers->towers[t].times;
        trace_span(trc, 1 + t, "waiting for input", "wait", st->start_sec, tt->go_sec);
        for (int p = 0; p < TOWER_N_PHASES; p++)
            trace_span(trc, 1 + t, labels[p], cats[p], tt->span[p].start_sec, tt->span[p].end_sec);
        const TowerSpan *r = &tt->span[TOWER_PHASE_REDUCE];
        if (r->start_sec > 0.0 && (reduce_start == 0.0 || r->start_sec < reduce_start)) reduce_start = r->start_sec;
        if (r->end_sec > reduce_end) reduce_end = r->end_sec;
    }
    if (tr->mode == TRAINER_REPLICATED_NCCL) { /* the device's ncclAllReduce, first leader in to last out */
        reduce_start = reduce_end = 0.0;
        for (int t = 0; t < tr->n_towers; t++) {
            const TowerSpan *n = &tr->nccl_spans[t];
            if (n->start_sec <= 0.0) continue;
            if (reduce_start == 0.0 || n->start_sec < reduce_start) reduce_start = n->start_sec;
            if (n->end_sec > reduce_end) reduce_end = n->end_sec;
        }
        trace_span(trc, 1 + tr->n_towers, "ncclAllReduce", "reduce", reduce_start, reduce_end);
    } else if (is_replicated(tr->mode)) {
        trace_span(trc, 1 + tr->n_towers, "ring all-reduce", "reduce", reduce_start, reduce_end);
    }
}

int trainer_step(Trainer *tr, float *loss, char *err, size_t err_n_bytes) {
    TrainerStepTimes *st = &tr->times;
    memset(st, 0, sizeof *st);
    st->start_sec = st->input.start_sec = tower_now_sec();
    PipelineBatch *batch;
    int got = next_batch(tr, &batch, err, err_n_bytes);
    st->input.end_sec = tower_now_sec();
    if (got <= 0) return got;

    long step = tr->ps->global_step + 1;
    int n_examples = batch->n;
    int rc;
    switch (tr->mode) {
    case TRAINER_REPLICATED_HOST: rc = step_replicated_host(tr, batch, loss, err, err_n_bytes); break;
    case TRAINER_PS_CPU: rc = step_parameter_server_cpu(tr, batch, loss, err, err_n_bytes); break;
#ifdef TOWER_HAVE_CUDA
    case TRAINER_PS_GPU: rc = step_parameter_server_gpu(tr, batch, loss, err, err_n_bytes); break;
#endif
#ifdef TOWER_HAVE_NCCL
    case TRAINER_REPLICATED_NCCL: rc = step_replicated_nccl(tr, batch, loss, err, err_n_bytes); break;
#endif
    default:
        trainer_mode_available(tr->mode, err, err_n_bytes);
        release_batch(tr, batch);
        return -1;
    }
    st->end_sec = tower_now_sec();
    if (rc == 1) tr->examples_consumed += n_examples;
    if (tr->trace && rc != -1) trace_step(tr, step);
    return rc;
}

/* The GPU modes: the host block <- the GPUs' variables, slots and moving averages. */
static void download_gpu_state(const Trainer *tr) {
#ifdef TOWER_HAVE_CUDA
    if (tr->ps_gpu) ps_gpu_download(tr->ps_gpu, tr->ps);
    if (tr->gpu_replicas) ps_gpu_replicas_download(tr->gpu_replicas, tr->ps);
#else
    (void)tr;
#endif
}

const float *trainer_variables(const Trainer *tr) {
    download_gpu_state(tr);
    return tr->ps->n_replicas > 0 ? tr->ps->replica_params[0] : tr->ps->params;
}

void trainer_phase_breakdown(const Trainer *tr, TrainerPhaseSec *out) {
    const TrainerStepTimes *st = &tr->times;
    memset(out, 0, sizeof *out);
    out->step = st->end_sec - st->start_sec;
    out->input = st->input.end_sec - st->input.start_sec;
    double copy = 0.0, compute = 0.0, reduce = 0.0, apply = 0.0;
    for (int t = 0; t < tr->n_towers; t++) {
        const TowerTimes *tt = &tr->towers->towers[t].times;
        copy += tower_phase_sec(tt, TOWER_PHASE_COPY_IN) + tower_phase_sec(tt, TOWER_PHASE_COPY_OUT);
        compute += tower_phase_sec(tt, TOWER_PHASE_FORWARD) + tower_phase_sec(tt, TOWER_PHASE_BACKWARD);
        reduce += tower_phase_sec(tt, TOWER_PHASE_REDUCE);
        apply += tower_phase_sec(tt, TOWER_PHASE_APPLY);
    }
    out->copy = copy / tr->n_towers;
    out->compute = compute / tr->n_towers;
    out->reduce = reduce / tr->n_towers + (st->average.end_sec - st->average.start_sec);
    out->apply = apply / tr->n_towers + (st->apply.end_sec - st->apply.start_sec);
    out->other = out->step - out->input - out->copy - out->compute - out->reduce - out->apply;
}

int trainer_save(Trainer *tr, char *err, size_t err_n_bytes) {
    /* Replicated: every tower holds the same variables; save tower 0's.  GPU modes: bring them to the host. */
    if (tr->ps->n_replicas > 0) ps_gather_replica(tr->ps, 0);
    download_gpu_state(tr);
    /* Never replace a good checkpoint with variables that have blown up. */
    for (size_t i = 0; i < tr->spec.n_params; i++) {
        if (!isfinite(tr->ps->params[i])) {
            snprintf(err, err_n_bytes, "not saving step %ld: its variables are not finite (the model diverged)",
                     tr->ps->global_step);
            return -1;
        }
    }
    CkptRunState run = {
        .seed = (uint64_t)tr->opt.seed,
        .examples_consumed = tr->examples_consumed,
        .n_towers = tr->n_towers,
        .batch_size = tr->opt.batch_size,
    };
    return ckpt_save(tr->opt.train_dir, tr->ps, &run, tr->opt.keep_checkpoints, err, err_n_bytes);
}
