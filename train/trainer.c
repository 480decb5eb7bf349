/* trainer.c — the training loop's parts wired together (see trainer.h).
 * No math lives here: it plans the towers and shards, opens io/, ps/ and
 * tower/ in order, and each step hands the next batch to the placement
 * mode's step (train/mode.h; one file per mode) and records where the time
 * went (TrainerStepTimes, the --trace file).  Nothing here names a mode.
 */
#include "train/trainer.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base/escape.h"
#include "base/memory.h"
#include "base/ranks.h"
#include "io/events.h"
#include "io/imagefolder.h"
#include "io/synthetic.h"
#include "train/mode.h"

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
    o->accum_steps = 1;
    o->loss_scaling = "tower_mean";
    o->num_towers = 0;
    o->num_gpus = 1;
    o->gpus = "";
    o->num_classes = 10;
    o->image_size = 24;
    o->labels = "";
    o->resize_mode = "resize";
    o->central_fraction = 1.0f;
    o->max_image_pixels = (int)PIPELINE_DEFAULT_MAX_IMAGE_PIXELS;
    o->learning_rate = NAN;
    o->momentum = 0.9f;
    o->nesterov = 1;
    o->adam_beta1 = 0.9;
    o->adam_beta2 = 0.999;
    o->adam_epsilon = NAN;
    o->weight_decay = 0.004f;
    o->rmsprop_decay = 0.9f;
    o->rmsprop_momentum = 0.0f;
    o->rmsprop_epsilon = 1e-10f;
    o->rmsprop_centered = 0;
    o->lr_schedule = "exponential";
    o->lr_decay_factor = 0.1f;
    o->num_epochs_per_decay = 0.0f;
    o->piecewise_lr = "";
    o->cosine_decay_epochs = 0.0f;
    o->cosine_alpha = 0.0f;
    o->warmup_epochs = 0.0f;
    o->moving_average_decay = 0.9999f;
    o->seed = 1;
    o->log_every = 10;
    o->save_every = 1000;
    o->keep_checkpoints = 5;
    o->min_after_dequeue = 20000;
    o->input_threads = 0;
    o->max_corrupt_fraction = IO_DEFAULT_MAX_CORRUPT_FRACTION;
    o->variable_update = "parameter_server";
    o->local_parameter_device = "cpu";
    o->all_reduce = "auto";
    o->trace = "";
    o->ps_ranks = 0;
    o->ps_dedicated = 0;
    o->ps_placement = "greedy";
    o->checkpoint_writers = "owners";
    o->input_split = "none";
    o->sync_replicas = 1;
    o->max_staleness = 16;
    o->batch_norm = "tower";
    o->model_opts.width_multiplier = 1.0f;
    o->model_opts.head = MODEL_HEAD_KERAS;
}

/* After plan_towers: the mode may settle on another (--all_reduce auto
 * becomes nccl on GPU towers when this build has NCCL; under mpirun with
 * several ranks, the across-ranks mode its own settle names (ps_cpu: ps_mpi),
 * else with --all_reduce auto the entry of the same --variable_update that
 * runs across ranks, never for a GPU mode), and the GPU modes need GPU towers.  0, or -1 with err. */
static int settle_mode(Trainer *tr, char *err, size_t err_n_bytes) {
    const TrainModeI *m = train_mode(tr->mode);
    const TrainModeI *other = m->settle ? m->settle(tr) : NULL;
    if (tr->n_ranks > 1 && !m->across_ranks && !(other && other->across_ranks)) {
        other = NULL; /* its own settle picked among one-process modes */
        for (int k = 0; k < TRAINER_N_MODES && !other && !strcmp(tr->opt.all_reduce, "auto") && !m->needs_gpu_towers; k++)
            if (train_mode((TrainerMode)k)->across_ranks && !strcmp(train_mode((TrainerMode)k)->variable_update, m->variable_update))
                other = train_mode((TrainerMode)k);
        if (!other || !other->across_ranks) {
            snprintf(err, err_n_bytes, "%s runs in one process, and mpirun started %d ranks (across ranks: "
                     "--variable_update replicated with --all_reduce auto or mpi, or parameter_server with --local_parameter_device cpu or mpi)", m->flags, tr->n_ranks);
            return -1;
        }
    }
    for (int k = 0; other && k < TRAINER_N_MODES; k++)
        if (train_mode((TrainerMode)k) == other) tr->mode = (TrainerMode)k;
    m = train_mode(tr->mode);
    if (!tr->opt.sync_replicas && !m->asynchronous) {
        snprintf(err, err_n_bytes, "--sync_replicas false: asynchronous updates need --variable_update parameter_server "
                 "across the ranks of mpirun -np R (R > 1); this run is %s on %d rank(s)", m->flags, tr->n_ranks);
        return -1;
    }
    if (m->needs_gpu_towers && tr->backend->device_view == NULL) {
        snprintf(err, err_n_bytes, "%s needs GPU towers, and --device %s gave %s towers (use --device gpu on a "
                 "machine with a usable GPU)", m->flags, tr->opt.device, tr->backend->name);
        return -1;
    }
    return 0;
}

/* --ps_dedicated: ranks 0 .. ps_ranks - 1 only serve, the others are the
 * workers (tr->n_servers, n_workers, worker); without it every rank is a
 * worker.  After settle_mode (the mode must run with server-only ranks).
 * 0, or -1 with err. */
static int plan_servers(Trainer *tr, char *err, size_t err_n_bytes) {
    const TrainModeI *m = train_mode(tr->mode);
    tr->n_servers = 0;
    if (tr->opt.ps_dedicated) {
        if (tr->n_ranks < 2) {
            snprintf(err, err_n_bytes, "--ps_dedicated: server-only ranks need mpirun -np R with R > 1 (servers and "
                     "workers); this run is one process");
            return -1;
        }
        if (!m->dedicated_servers) {
            snprintf(err, err_n_bytes, "--ps_dedicated: server-only ranks are supported by --variable_update "
                     "parameter_server across the ranks of mpirun -np R (ps_mpi, or ps_mpi_async with --sync_replicas "
                     "false); this run is %s (%s) on %d rank(s)", m->name, m->flags, tr->n_ranks);
            return -1;
        }
        if (tr->opt.ps_ranks < 1 || tr->opt.ps_ranks >= tr->n_ranks) {
            snprintf(err, err_n_bytes, "--ps_dedicated --ps_ranks %d: expected 1 to %d (the first N of the %d ranks only "
                     "serve, the other R - N are the workers: at least one must be left)", tr->opt.ps_ranks,
                     tr->n_ranks - 1, tr->n_ranks);
            return -1;
        }
        tr->n_servers = tr->opt.ps_ranks;
    }
    tr->n_workers = tr->n_ranks - tr->n_servers;
    tr->worker = tr->rank >= tr->n_servers ? tr->rank - tr->n_servers : -1;
    tr->worker_towers = tr->n_towers;
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

/* The names of --loss_scaling, in the order of Trainer.loss_global_batch (0, 1). */
static const char *const loss_scalings[] = {"tower_mean", "global_batch"};

double train_tower_weight(const Trainer *tr, int shard_n) {
    if (!tr->loss_global_batch) return 1.0;
    return (double)tr->n_workers * tr->worker_towers * shard_n / tr->global_batch;
}

/* The examples tower t takes in a step (of the job's shards, t up to n_workers x worker_towers): its micro-batches. */
static int step_shard_n(const Trainer *tr, int t) { return tr->accum_steps * tr->shard_sizes[t % tr->worker_towers]; }

/* Per-tower micro-batch sizes: equal (batch_size each) or the user's list;
 * --accum_steps of them make a tower's shard, and --loss_scaling says how
 * the towers are weighted.  0, or -1 with err. */
static int plan_shards(Trainer *tr, char *err, size_t err_n_bytes) {
    const TrainerOptions *o = &tr->opt;
    tr->global_batch = 0;
    tr->accum_steps = o->accum_steps;
    if (o->accum_steps < 1) {
        snprintf(err, err_n_bytes, "--accum_steps must be at least 1, got %d", o->accum_steps);
        return -1;
    }
    tr->loss_global_batch = -1;
    for (int k = 0; k < 2; k++)
        if (!strcmp(o->loss_scaling, loss_scalings[k])) tr->loss_global_batch = k;
    if (tr->loss_global_batch < 0) {
        snprintf(err, err_n_bytes, "--loss_scaling '%s': expected tower_mean or global_batch", o->loss_scaling);
        return -1;
    }
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
                int n_sizes = 1;
                for (const char *q = o->shard_sizes; *q; q++) n_sizes += *q == ',';
                snprintf(err, err_n_bytes, "--shard_sizes '%s': %d sizes for %d tower%s (one size a tower: give "
                         "--num_towers %d, or fewer sizes)", o->shard_sizes, n_sizes, tr->n_towers,
                         tr->n_towers == 1 ? "" : "s", n_sizes);
                return -1;
            }
        }
    }
    for (int t = 0; t < tr->n_towers; t++) {
        if ((long)tr->shard_sizes[t] * tr->accum_steps > 1L << 20) {
            snprintf(err, err_n_bytes, "--accum_steps %d x %d examples: tower %d's shard would hold %ld examples, "
                     "at most %d fit a step", tr->accum_steps, tr->shard_sizes[t], t,
                     (long)tr->shard_sizes[t] * tr->accum_steps, 1 << 20);
            return -1;
        }
        tr->global_batch += step_shard_n(tr, t);
    }
    if ((long)tr->global_batch * tr->n_workers > 1L << 30) {
        snprintf(err, err_n_bytes, "a step of %ld examples (%d worker rank(s) x %d micro-batch(es) x %d): at most %d",
                 (long)tr->global_batch * tr->n_workers, tr->n_workers, tr->accum_steps, tr->global_batch / tr->accum_steps,
                 1 << 30);
        return -1;
    }
    tr->global_batch *= tr->n_workers;
    if (tr->n_workers * tr->n_towers > PIPELINE_MAX_SHARDS) {
        snprintf(err, err_n_bytes, "%d worker ranks x %d towers: at most %d towers in a job", tr->n_workers, tr->n_towers,
                 PIPELINE_MAX_SHARDS);
        return -1;
    }
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

/* 1 when GNU OpenMP's idle threads sleep at once instead of spinning for the next parallel region: libgomp's
 * rule, read from the environment it read at load time: GOMP_SPINCOUNT, where set, is the spin count (here only
 * a plain 0 counts as sleeping); else OMP_WAIT_POLICY=passive (any case) gives 0.  Anything else: 0 (spinning,
 * or not known). */
static int omp_idle_threads_sleep(void) {
    const char *spin = getenv("GOMP_SPINCOUNT");
    if (spin) {
        while (isspace((unsigned char)*spin)) spin++;
        const char *q = spin;
        while (*q == '0') q++;
        while (isspace((unsigned char)*q)) q++;
        return q > spin && spin[0] == '0' && *q == '\0';
    }
    const char *policy = getenv("OMP_WAIT_POLICY");
    if (!policy) return 0;
    while (isspace((unsigned char)*policy)) policy++;
    if (strncasecmp(policy, "passive", 7) != 0) return 0;
    policy += 7;
    while (isspace((unsigned char)*policy)) policy++;
    return *policy == '\0';
}

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
    tr->backend = &tower_backend_cpu;
    tr->n_towers = o->num_towers > 0 ? o->num_towers : 1;
    if (!strcmp(dev, "auto")) {
        /* One calm line; and GPU towers asked for (--num_gpus, --gpus) are not given in silence. */
        char ts[64], asked[400] = "", value[200];
        trainer_timestamp(ts, sizeof ts);
        if (o->gpus[0]) snprintf(value, sizeof value, "--gpus %s", o->gpus);
        else snprintf(value, sizeof value, "--num_gpus %d", o->num_gpus);
        if (o->gpus[0] || o->num_gpus > 1)
            snprintf(asked, sizeof asked, "; %s asked for GPU towers, this run has %d CPU tower%s%s", value,
                     tr->n_towers, tr->n_towers == 1 ? "" : "s", o->num_towers > 0 ? "" : " (--num_towers sets how many)");
        if (!strncmp(why_cpu, "no GPU driver found", 19))
            printf("%s: no GPU driver found: CPU towers%s\n", ts, asked);
        else
            printf("%s: device auto: CPU towers (%s)%s\n", ts, why_cpu, asked);
    }
    /* The server's average and update run while the towers wait.  With as many CPU
     * towers as cores, a second OpenMP thread of the server would, after those loops,
     * keep spinning (libgomp's default wait for its next region) on a core that a tower
     * needs: measured, it slowed one of 2 towers' forward pass by 2x (docs/modes.md).
     * Where idle OpenMP threads sleep at once (`tower` runs OMP_WAIT_POLICY=passive for
     * towers of one thread each unless the environment chose, cmd/main.c), the server
     * takes every thread: mnist's 2 towers on 2 cores, average 3.6 -> 2.0 ms, update
     * 4.7 -> 2.9 ms, the towers' forward and backward unchanged (bench/RESULTS.md). */
    /* The ranks of a job on one host that run towers share its cores (--ps_dedicated's synchronous server-only
     * ranks run none, and their loops run while the workers wait, so a worker's tower gets the threads a tower
     * of one process of the workers' towers gets, and steps bitwise as it: a layer's bits depend on its threads;
     * an asynchronous server applies while the workers compute, so it keeps its share); OMP_NUM_THREADS (or a
     * narrower affinity mask, which omp_get_max_threads reflects) caps them. */
    const int local_servers =
        o->ps_dedicated && o->ps_ranks > 0 && o->sync_replicas ? ranks_local_below(o->ps_ranks) : 0;
    const int local_towered = ranks_local_size() - local_servers > 0 ? ranks_local_size() - local_servers : 1;
    long cores = sysconf(_SC_NPROCESSORS_ONLN) / local_towered;
    if (cores > omp_get_max_threads()) cores = omp_get_max_threads();
    tr->server_threads = tr->n_towers >= cores && !omp_idle_threads_sleep() ? 1 : omp_get_max_threads();
    if (tr->n_towers > TOWER_MAX_TOWERS) {
        snprintf(err, err_n_bytes, "--num_towers %d: at most %d", tr->n_towers, TOWER_MAX_TOWERS);
        return -1;
    }
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
    if (tr->worker < 0) {
        m->input_n_bytes = 0; /* a server-only rank reads nothing */
    } else if (tr->opt.synthetic) {
        m->input_n_bytes = synthetic_batch_n_bytes(tr->global_batch, (size_t)tr->spec.H * tr->spec.W * tr->spec.C);
    } else {
        m->input_n_bytes = pipeline_max_n_bytes(&tr->pipeline_cfg, tr->record_n_bytes, &m->pipeline);
    }
    m->variables_n_bytes = tr->ps ? ps_host_n_bytes(tr->ps) : 0;
    /* --batch_norm tower's packed statistics (train/batch_norm.c), with the server. */
    const size_t moving_slots = (size_t)tr->worker_towers * (tr->n_ranks > 1 ? 1 + tr->n_ranks : 1);
    if (tr->ps) m->variables_n_bytes += moving_slots * train_moving_n_floats(&tr->spec) * sizeof(float);
    m->towers_known = tr->backend && tr->backend->host_n_bytes;
    /* A tower's activations are sized for one micro-batch (shard_sizes), whatever --accum_steps: that is the
     * point of accumulation (beside them only the earlier micro-batches' batch statistics are kept); the
     * input (staging batches, shuffle capacity) holds whole steps. */
    if (m->towers_known) {
        for (int t = 0; t < tr->n_towers; t++)
            m->towers_n_bytes += tr->backend->host_n_bytes(&tr->spec, tr->shard_sizes[t], tr->accum_steps);
    }
    const TrainModeI *mode = train_mode(tr->mode);
    m->mode_n_bytes = mode->host_n_bytes ? mode->host_n_bytes(tr) : 0;
    m->checkpoint_n_bytes = tr->ps && tr->opt.resume ? 2 * ckpt_max_n_bytes(tr->ps) : 0; /* a save streams its file */
    m->summaries_n_bytes = event_writer_max_n_bytes((size_t)tr->spec.n_vars);
    m->loaded_n_bytes = tr->loaded_n_bytes;
    m->runtime_n_bytes = TRAINER_RUNTIME_N_BYTES;
    m->total_n_bytes = m->input_n_bytes + m->variables_n_bytes + m->towers_n_bytes + m->mode_n_bytes + m->checkpoint_n_bytes +
                       m->summaries_n_bytes + m->loaded_n_bytes + m->runtime_n_bytes;
    return m->total_n_bytes;
}

static double mib(size_t n_bytes) { return (double)n_bytes / (1024.0 * 1024.0); }

static double gib(size_t n_bytes) { return (double)n_bytes / (1024.0 * 1024.0 * 1024.0); }

/* What shrinks a part that the batch does not, into out: "lower --num_towers" (each tower's gradients,
 * activations), "lower" the model's size flag, or for a network without one the input size where the pipeline
 * decodes it, else the model.  Returns out. */
static const char *size_lever(const Trainer *tr, char *out, size_t out_n_bytes) {
    const char *flag = tr->n_towers > 1 ? "--num_towers" : model_size_flag(tr->opt.model);
    if (flag) snprintf(out, out_n_bytes, "lower %s", flag);
    else snprintf(out, out_n_bytes, "%s", tr->image_folder || tr->image_encoded
                                              ? "lower --image_size, or train a smaller --model"
                                              : "train a smaller --model");
    return out;
}

int trainer_check_memory(const Trainer *tr, char *err, size_t err_n_bytes) {
    TrainerMemory m;
    const size_t bound = trainer_max_n_bytes(tr, &m);
    char source[4400];
    const size_t available = memory_available_n_bytes(source, sizeof source);
    /* What is resident already is not asked of the machine again: what the process held at the open (loaded), and
     * what it holds now of the bound (the server, once made, is resident: MemAvailable no longer counts it). */
    const size_t now_n_bytes = resident_n_bytes();
    const size_t resident = now_n_bytes > m.loaded_n_bytes ? now_n_bytes : m.loaded_n_bytes;
    if (available == 0 || bound <= resident || bound - resident <= available) return 0;
    /* Said as at the open: the bound beyond what was loaded then, against what was available before the server
     * (once made) took its part. */
    const size_t more = bound - m.loaded_n_bytes;
    const size_t available_at_open = available + (tr->ps ? resident - m.loaded_n_bytes : 0);
    /* The flag that shrinks the largest part (of the input: its decode buffers or its shuffle buffer). */
    char lever[64];
    const char *lower = "lower --batch_size";
    if (tr->opt.shard_sizes[0]) lower = "lower --shard_sizes";
    const int decodes = tr->image_folder || tr->image_encoded;
    const size_t slots_n_bytes = (size_t)m.pipeline.n_slots * m.pipeline.slot_n_bytes;
    if (m.input_n_bytes >= m.towers_n_bytes && decodes && m.pipeline.workers_n_bytes > slots_n_bytes)
        lower = "lower --max_image_pixels or --input_threads"; /* each decoding thread holds buffers of that many pixels */
    else if (m.input_n_bytes >= m.towers_n_bytes && !tr->opt.synthetic &&
             tr->opt.min_after_dequeue > 3L * tr->global_batch)
        lower = decodes ? "lower --min_after_dequeue or --image_size" : "lower --min_after_dequeue";
    else if (m.variables_n_bytes > m.input_n_bytes && m.variables_n_bytes > m.towers_n_bytes)
        lower = size_lever(tr, lever, sizeof lever); /* each tower's gradients */
    else if (tr->accum_steps > 1 && m.input_n_bytes >= m.towers_n_bytes)
        lower = "lower --accum_steps";
    else if (m.towers_known && m.towers_n_bytes > m.input_n_bytes) {
        /* The towers' part: their activations scale with the batch, their variable-sized buffers (gradients,
         * weights) do not; where a batch of 1 would keep more than half of it, the batch is not the lever. */
        size_t at_one = 0;
        for (int t = 0; t < tr->n_towers; t++) at_one += tr->backend->host_n_bytes(&tr->spec, 1, tr->accum_steps);
        if (2 * at_one > m.towers_n_bytes) lower = size_lever(tr, lever, sizeof lever);
    }
    char server[96] = ", the server's not yet counted";
    if (tr->ps)
        snprintf(server, sizeof server, ", variables %.2f GiB, checkpoint %.2f GiB", gib(m.variables_n_bytes),
                 gib(m.checkpoint_n_bytes));
    snprintf(err, err_n_bytes, "not enough memory: this run needs up to %.2f GiB of host memory (the memory bound: "
             "input %.2f GiB, towers %.2f GiB%s; global batch %d), and %.2f GiB is available (%s): %s", gib(more),
             gib(m.input_n_bytes), gib(m.towers_n_bytes), server, tr->global_batch, gib(available_at_open), source, lower);
    return -1;
}

/* One line: the bound and its parts. */
static void log_memory_bound(const Trainer *tr, const char *ts) {
    TrainerMemory m;
    trainer_max_n_bytes(tr, &m);
    if (tr->opt.synthetic)
        printf("%s: memory bound %.1f MiB = synthetic batch %.1f", ts, mib(m.total_n_bytes), mib(m.input_n_bytes));
    else if (tr->image_folder || tr->image_encoded)
        printf("%s: memory bound %.1f MiB = input pipeline %.1f (shuffle capacity %ld, %ld slots of %zu bytes, "
               "%d staging batches, %s: %.1f MiB of decode buffers for images up to %zu pixels, reader %.1f MiB%s)",
               ts, mib(m.total_n_bytes), mib(m.input_n_bytes), m.pipeline.capacity, m.pipeline.n_slots,
               m.pipeline.slot_n_bytes, m.pipeline.prefetch_batches,
               tr->image_folder ? "image folder" : "encoded TFRecord images", mib(m.pipeline.workers_n_bytes),
               tr->pipeline_cfg.max_image_pixels, mib(m.pipeline.reader_n_bytes),
               tr->image_folder ? ": the listing" : ": a record and the encoded images waiting for a worker");
    else
        printf("%s: memory bound %.1f MiB = input pipeline %.1f (shuffle capacity %ld, %ld slots of %zu bytes, "
               "%d staging batches, records up to %zu bytes)", ts, mib(m.total_n_bytes), mib(m.input_n_bytes),
               m.pipeline.capacity, m.pipeline.n_slots, m.pipeline.slot_n_bytes, m.pipeline.prefetch_batches,
               tr->record_n_bytes);
    char mode[64] = "";
    if (m.mode_n_bytes) snprintf(mode, sizeof mode, " + %s's buffers %.1f", train_mode(tr->mode)->name, mib(m.mode_n_bytes));
    printf(" + variables %.1f + towers %.1f%s%s + checkpoint %.1f + summaries %.1f + loaded %.1f + runtime %.1f\n",
           mib(m.variables_n_bytes), mib(m.towers_n_bytes),
           m.towers_known ? "" : " (not counted: device memory, and the CUDA runtime's host memory)", mode,
           mib(m.checkpoint_n_bytes), mib(m.summaries_n_bytes), mib(m.loaded_n_bytes), mib(m.runtime_n_bytes));
}

static void log_device_placement(const Trainer *tr, const TowerGroupConfig *tc) {
    const TrainModeI *m = train_mode(tr->mode);
    char ts[64];
    trainer_timestamp(ts, sizeof ts);
    char slots[128] = "no slots";
    for (int k = 0, n = 0; k < tr->ps->n_slots && n >= 0 && (size_t)n < sizeof slots; k++)
        n += snprintf(slots + n, sizeof slots - (size_t)n, "%s%s", k ? ", " : "slots ", tr->ps->slot_info[k].name);
    printf("%s: variables: %zu floats (%.1f MiB) of model %s in %s on /cpu:0, with %s's %s and moving averages beside them%s\n",
           ts, tr->spec.n_params, tr->spec.n_params * 4.0 / (1024 * 1024), tr->spec.name, tr->alloc.kind,
           optimizer_name(&tr->ps->cfg.opt), slots,
           m->needs_gpu_towers ? " (a copy for checkpoints; the trained ones live on the GPUs)" : "");
    for (int t = 0; t < tr->n_towers; t++) {
        char d[256];
        tr->backend->describe_device(tc->devices[t], d, sizeof d);
        printf("%s: tower_%d: %s backend, device %s, %d OpenMP thread(s), batch %d", ts, t,
               tr->backend->name, d, tc->n_threads[t], tr->shard_sizes[t]);
        if (tr->accum_steps > 1) printf(" x %d micro-batches (--accum_steps)", tr->accum_steps);
        printf("\n");
        char algorithms[32768];
        tower_group_describe_algorithms(tr->towers, t, algorithms, sizeof algorithms);
        if (algorithms[0]) printf("%s: tower_%d: conv algorithms: %s\n", ts, t, algorithms);
    }
    m->describe(tr, ts);
    if (tr->accum_steps > 1 || tr->loss_global_batch)
        printf("%s: a step: each tower sums the gradients of its %d micro-batch(es) and divides by %d; the towers' "
               "gradients weighted by %s (--loss_scaling %s)\n", ts, tr->accum_steps, tr->accum_steps,
               tr->loss_global_batch ? "their shard sizes over the global batch" : "1 / the number of towers",
               loss_scalings[tr->loss_global_batch]);
    log_memory_bound(tr, ts);
    fflush(stdout);
}

int trainer_close(Trainer *tr, char *err, size_t err_n_bytes) {
    int rc = 0;
    if (tr->pipeline) pipeline_close(tr->pipeline);
    if (tr->image_listing) tr->image_listing->close(tr->image_listing);
    const TrainModeI *m = train_mode(tr->mode);
    if (m->close) m->close(tr);
    if (tr->towers) tower_group_free(tr->towers);
    if (tr->trace) {
        char e[1200];
        if (trace_close(tr->trace, e, sizeof e) != 0) {
            if (err) snprintf(err, err_n_bytes, "%s", e);
            else {
                escape_in_place(e, sizeof e);
                fprintf(stderr, "tower: %s\n", e);
            }
            rc = -1;
        }
    }
    synthetic_batch_free(&tr->synthetic, tr->alloc);
    free(tr->moving_buf);
    if (tr->ps) ps_free(tr->ps);
    if (tr->files) {
        for (int i = 0; i < tr->n_files; i++) free(tr->files[i]);
        free(tr->files);
    }
    memset(tr, 0, sizeof *tr);
    return rc;
}

int train_device_views(const Trainer *tr, int *devices, float **params, float **grads, char *err,
                       size_t err_n_bytes) {
    for (int t = 0; t < tr->n_towers; t++) {
        TowerDeviceView v;
        if (tower_group_device_view(tr->towers, t, &v, err, err_n_bytes) != 0) return -1;
        devices[t] = v.device;
        params[t] = v.params;
        grads[t] = v.grads;
    }
    return 0;
}

/* The last part of trainer_open: the --trace file with its rows named, and the placement log. */
static int open_trace(Trainer *tr, const TowerGroupConfig *tc, char *err, size_t err_n_bytes) {
    const TrainerOptions *o = &tr->opt;
    const TrainModeI *m = train_mode(tr->mode);
    if (o->trace && o->trace[0]) {
        char process[128];
        snprintf(process, sizeof process, "tower %s %s, %d tower(s)", tr->spec.name, m->name, tr->n_towers);
        tr->trace = trace_open(o->trace, process, err, err_n_bytes);
        if (!tr->trace) return -1;
        trace_name_row(tr->trace, 0, m->server_row);
        for (int t = 0; t < tr->n_towers; t++) {
            char name[32];
            snprintf(name, sizeof name, "tower_%d", t);
            trace_name_row(tr->trace, 1 + t, name);
        }
        if (m->reduce_row) trace_name_row(tr->trace, 1 + tr->n_towers, m->reduce_row);
    }
    if (o->log_device_placement) log_device_placement(tr, tc);
    const LrSchedule *lr = &tr->ps->cfg.lr;
    if (o->log_device_placement || lr->kind != LR_EXPONENTIAL || lr->warmup_steps > 0) {
        char ts[64], what[1024];
        trainer_timestamp(ts, sizeof ts);
        lr_schedule_describe(lr, what, sizeof what);
        printf("%s: learning rate: %s\n", ts, what);
        fflush(stdout);
    }
    return 0;
}

/* The size images decoded in the pipeline (an image folder, encoded TFRecords) are resized to: --image_size
 * square, with a --resize_mode and a --max_image_pixels that can hold it.  0, or -1 with err ("WHAT --image_size
 * >= 1 ..."). */
static int decoded_size(const TrainerOptions *o, const char *what, int *H, int *W, char *err, size_t err_n_bytes) {
    if (o->image_size < 1 || imagefolder_resize_mode_from_name(o->resize_mode) < 0) {
        snprintf(err, err_n_bytes, "%s --image_size >= 1 and --resize_mode resize, center_crop or random_crop", what);
        return -1;
    }
    *H = *W = o->image_size;
    return imagefolder_check_max_pixels((size_t)o->max_image_pixels, *H, *W, err, err_n_bytes);
}

/* The input pipeline's configuration for the data files (tr->pipeline_cfg),
 * writing batches into staging buffers from the backend's allocator; the
 * memory bound reads it before anything is allocated. */
static void config_pipeline(Trainer *tr, int compression, int H, int W, int C, int is_float, int out_H, int out_W,
                            int distorts) {
    const TrainerOptions *o = &tr->opt;
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
    pcfg.augment = distorts ? AUGMENT_CIFAR_TRAIN : AUGMENT_MNIST;
    /* Every worker rank reads the job's whole stream, split into n_workers x
     * n_towers shards, and its towers take shards worker x n_towers ...
     * (rank_shards); with --input_split files or records each reads its own
     * part of the data and makes its own towers' shards of it (worker: the
     * rank less the --ps_dedicated server ranks, which read nothing). */
    const int own_part = tr->input_split != PIPELINE_SPLIT_NONE;
    pcfg.n_shards = own_part ? tr->n_towers : tr->n_workers * tr->n_towers;
    for (int t = 0; t < pcfg.n_shards; t++) pcfg.shard_sizes[t] = step_shard_n(tr, (own_part ? tr->worker * tr->n_towers : 0) + t);
    if (own_part) {
        pcfg.split_by = tr->input_split;
        pcfg.split_n = tr->n_workers;
        pcfg.split_index = tr->worker;
    }
    pcfg.shuffle = 1;
    pcfg.min_after_dequeue = o->min_after_dequeue;
    pcfg.capacity = o->min_after_dequeue + 3L * tr->global_batch / (own_part ? tr->n_workers : 1);
    pcfg.num_epochs = o->num_epochs;
    pcfg.seed = (uint64_t)o->seed;
    if (o->input_threads > 0) pcfg.n_workers = o->input_threads;
    if (pcfg.prefetch_batches < 2 * pcfg.n_shards) pcfg.prefetch_batches = 2 * pcfg.n_shards;
    pcfg.alloc = tr->alloc;
    pcfg.skip_corrupt = o->skip_corrupt;
    pcfg.max_corrupt_fraction = o->max_corrupt_fraction;
    pcfg.warn = o->warn;
    pcfg.warn_ctx = o->warn_ctx;
    pcfg.drop_remainder = 1;
    pcfg.skip_examples = tr->examples_consumed;
    if (tr->image_folder) {
        pcfg.image_dir = o->data;
        pcfg.image_listing = tr->image_listing;
        pcfg.labels_file = o->labels[0] ? o->labels : NULL;
    }
    pcfg.image_encoded = tr->image_encoded;
    if (tr->image_folder || tr->image_encoded) {
        pcfg.resize_mode = imagefolder_resize_mode_from_name(o->resize_mode);
        pcfg.short_side = imagefolder_short_side(o->image_size, o->central_fraction);
        pcfg.max_image_pixels = (size_t)o->max_image_pixels;
    }
    tr->pipeline_cfg = pcfg;
}

/* The input pipeline of tr->pipeline_cfg (after a --resume: skipping the
 * examples the checkpoint's steps consumed: the job's, or with --input_split
 * its own part's, part_start).  0, or -1 with err. */
static int open_pipeline(Trainer *tr, char *err, size_t err_n_bytes) {
    tr->pipeline_cfg.skip_examples = tr->input_split != PIPELINE_SPLIT_NONE ? tr->part_start[tr->worker] : tr->examples_consumed;
    char e[PIPELINE_ERR_N_BYTES];
    tr->pipeline = pipeline_open(&tr->pipeline_cfg, e, sizeof e);
    if (!tr->pipeline) {
        snprintf(err, err_n_bytes, "%s", e);
        return -1;
    }
    return 0;
}

/* With several worker ranks the batch holds the job's n_workers x n_towers
 * shards: this worker's towers take shards worker x n_towers + t (moved to t). */
static void rank_shards(const Trainer *tr, PipelineBatch *b) {
    for (int t = 0; t < tr->n_towers && tr->worker > 0; t++) {
        b->shard_offset[t] = b->shard_offset[tr->worker * tr->n_towers + t];
        b->shard_n[t] = b->shard_n[tr->worker * tr->n_towers + t];
    }
}

/* The job's split of its step for the run state: batch_size (tower 0's micro-batch), and every tower's, the
 * workers' in rank order, where they differ (--shard_sizes 5,3; --shard_sizes 4,4 is batch 4; 2 ranks of 3,1 are
 * 3,1,3,1, as one process of --shard_sizes 3,1,3,1 records). */
static void run_split_save(const Trainer *tr, CkptRunState *run) {
    run->batch_size = tr->shard_sizes[0];
    run->n_shard_sizes = 0;
    for (int t = 1; t < tr->worker_towers; t++)
        if (tr->shard_sizes[t] != tr->shard_sizes[0]) run->n_shard_sizes = tr->n_workers * tr->worker_towers;
    for (int t = 0; t < run->n_shard_sizes; t++) run->shard_sizes[t] = tr->shard_sizes[t % tr->worker_towers];
}

/* "batch 4" or "shards 5,3": a run state's split, for the resume note. */
static const char *run_split_describe(const CkptRunState *run, char *out, size_t out_n_bytes) {
    if (run->n_shard_sizes == 0) {
        snprintf(out, out_n_bytes, "batch %d", run->batch_size);
        return out;
    }
    size_t n = (size_t)snprintf(out, out_n_bytes, "shards ");
    for (int t = 0; t < run->n_shard_sizes && n < out_n_bytes; t++)
        n += (size_t)snprintf(out + n, out_n_bytes - n, "%s%d", t ? "," : "", run->shard_sizes[t]);
    return out;
}

/* --resume: the latest checkpoint in train_dir, if any, into the server
 * (none: one line says the run starts from step 0; checkpoint files and no
 * index: the newest, with a note, or refused when it does not load).  0, or
 * -1 with err. */
static int resume(Trainer *tr, char *err, size_t err_n_bytes) {
    const TrainerOptions *o = &tr->opt;
    char path[4096], e[PIPELINE_ERR_N_BYTES]; /* a message naming a file, whole */
    int found = ckpt_find_latest(o->train_dir, path, sizeof path, e, sizeof e);
    if (found < 0) {
        snprintf(err, err_n_bytes, "--resume: %s", e);
        return -1;
    }
    char newest[256] = "", safe_dir[ESCAPE_PATH_N_BYTES], safe_newest[1024];
    if (found == 0 && ckpt_dir_scan(o->train_dir, newest, sizeof newest) == 0) {
        char ts[64];
        trainer_timestamp(ts, sizeof ts);
        printf("%s: --resume: no checkpoint in %s: starting from step 0\n", ts,
               escape_str(safe_dir, sizeof safe_dir, o->train_dir));
        return 0;
    }
    /* Checkpoint files and no index naming them: a run killed between its first checkpoint's rename and its
     * index (or an index removed by hand) continues from the newest, when that one loads whole. */
    if (found == 0 && snprintf(path, sizeof path, "%s/%s", o->train_dir, newest) >= (int)sizeof path) {
        snprintf(err, err_n_bytes, "--resume: the train_dir's path is too long");
        return -1;
    }
    CkptRunState run;
    if (ckpt_load(path, tr->ps, &run, e, sizeof e) != 0) {
        if (found == 0)
            snprintf(err, err_n_bytes, "--resume: %s holds checkpoints but no index (%s/checkpoint) naming the latest, "
                     "and the newest, %s, does not load (%s): write an index (model_checkpoint_path: \"NAME\") naming "
                     "one that does, or remove them to start over", escape_str(safe_dir, sizeof safe_dir, o->train_dir),
                     safe_dir, escape_str(safe_newest, sizeof safe_newest, newest), e);
        else snprintf(err, err_n_bytes, "--resume: %s", e);
        return -1;
    }
    if (found == 0 && tr->rank == 0) {
        char ts[64];
        trainer_timestamp(ts, sizeof ts);
        fprintf(stderr, "%s: note: %s has no index (%s/checkpoint): continuing from its newest checkpoint, %s (a run "
                "stopped before writing its first index); the next save writes the index\n", ts,
                escape_str(safe_dir, sizeof safe_dir, o->train_dir), safe_dir,
                escape_str(safe_newest, sizeof safe_newest, newest));
    }
    /* Another tower count, batch, accumulation or seed: a note, and the run goes on.  examples_consumed counts
     * examples, not steps (a step of K micro-batches counts K x B per tower), so the epoch and the position in
     * it carry over; with the same global batch the next step reads the first example the saved run had not
     * (another global batch sizes the shuffle buffer otherwise: docs/ps.md, "Checkpoints"). */
    CkptRunState now = {.n_towers = tr->n_workers * tr->worker_towers};
    run_split_save(tr, &now);
    const int same_split = run.n_towers == now.n_towers && run.batch_size == now.batch_size &&
                           run.n_shard_sizes == now.n_shard_sizes &&
                           !memcmp(run.shard_sizes, now.shard_sizes, sizeof(int) * (size_t)now.n_shard_sizes);
    if ((!same_split || run.accum_steps != tr->accum_steps || run.seed != (uint64_t)o->seed) && tr->rank == 0) {
        char ts[64], safe_path[ESCAPE_PATH_N_BYTES], was[400], is[400]; /* rank 0's: the note is the job's, said once */
        trainer_timestamp(ts, sizeof ts);
        fprintf(stderr, "%s: note: %s was written with %d tower(s), %s, accum_steps %d, seed %llu; continuing "
                "with %d, %s, %d, %ld (the run will not be bitwise a straight one)\n",
                ts, escape_str(safe_path, sizeof safe_path, path), run.n_towers, run_split_describe(&run, was, sizeof was),
                run.accum_steps, (unsigned long long)run.seed, now.n_towers, run_split_describe(&now, is, sizeof is),
                tr->accum_steps, o->seed);
    }
    /* Another shuffle buffer mid-epoch: the epoch's order is replayed to the position with this run's buffer, which
     * draws another order (1,000 examples: 208 read again in that epoch, 216 not at all); the next epochs as usual. */
    const int epoch_known = tr->examples_per_epoch > 0 && tr->input_split == PIPELINE_SPLIT_NONE;
    const int at_boundary = epoch_known && run.examples_consumed % tr->examples_per_epoch == 0;
    if (run.min_after_dequeue > 0 && run.min_after_dequeue != o->min_after_dequeue && !at_boundary && tr->rank == 0) {
        char ts[64], safe_path[ESCAPE_PATH_N_BYTES];
        trainer_timestamp(ts, sizeof ts);
        fprintf(stderr, "%s: note: %s was written with --min_after_dequeue %ld; with %ld %s is drawn in another order, "
                "so some of the epoch's examples are read again and others not until the next epoch\n", ts,
                escape_str(safe_path, sizeof safe_path, path), run.min_after_dequeue, o->min_after_dequeue,
                epoch_known ? "the rest of its epoch" : "the rest of its epoch (where it stopped within one)");
    }
    if (run.had_moving_averages && !tr->ps->ema && tr->rank == 0) { /* the averages would be lost with its rotation */
        char ts[64], safe_path[ESCAPE_PATH_N_BYTES];
        trainer_timestamp(ts, sizeof ts);
        fprintf(stderr, "%s: note: %s holds moving averages; --moving_average_decay 0 discards them (this run's "
                "checkpoints have none, and eval and export take the raw variables)\n", ts,
                escape_str(safe_path, sizeof safe_path, path));
    }
    tr->examples_consumed = run.examples_consumed;
    tr->resume_run = run;
    tr->resumed = 1;
    char ts[64], safe_path[ESCAPE_PATH_N_BYTES];
    trainer_timestamp(ts, sizeof ts);
    printf("%s: resumed from %s at step %ld\n", ts, escape_str(safe_path, sizeof safe_path, path), tr->ps->global_step);
    return 0;
}

/* A run from step 0 (no --resume) in a train_dir that holds an earlier run's checkpoints would replace them as it
 * saves (its steps' names, then the newest --keep_checkpoints of its own): refused, so nothing saved is lost
 * (TensorFlow's MonitoredTrainingSession would restore instead; Tower asks for --resume).  0, or -1 with err. */
static int refuse_earlier_run(const Trainer *tr, char *err, size_t err_n_bytes) {
    char newest[256], safe_dir[ESCAPE_PATH_N_BYTES], safe_newest[1024];
    const int n = ckpt_dir_scan(tr->opt.train_dir, newest, sizeof newest);
    if (n == 0) return 0;
    snprintf(err, err_n_bytes, "--train_dir %s holds the checkpoints of an earlier run (%d file%s, the newest %s): "
             "--resume continues from them; to start over, remove them or give another --train_dir",
             escape_str(safe_dir, sizeof safe_dir, tr->opt.train_dir), n, n == 1 ? "" : "s",
             escape_str(safe_newest, sizeof safe_newest, newest));
    return -1;
}

/* After the mode's open (a resumed state is then rank 0's on every rank): a run resumed with another step size
 * (another global batch, --accum_steps, tower count) runs its learning-rate schedule at the step the examples
 * consumed make in its own steps, so the epoch-based schedules carry over (docs/ps.md, "Checkpoints"): the
 * schedule's step is global_step + examples_consumed / (this run's step) - global_step at the open.  A synchronous
 * run that kept its step size all along has examples_consumed = global_step x its step: offset 0, the schedule
 * bitwise as before.  Ranks that step apart (the asynchronous parameter server) count steps per push: 0. */
static void settle_lr_offset(Trainer *tr) {
    if (trainer_ranks_step_apart(tr) || tr->examples_consumed == 0) return;
    LrSchedule *lr = &tr->ps->cfg.lr;
    lr->step_offset = tr->examples_consumed / trainer_step_examples(tr) - tr->ps->global_step;
    /* A cosine that decays to --max_steps ends at the schedule's step of the run's last one (it ended 4 steps
     * short of 0, at 0.00283 of 0.01, after a resume at twice the batch). */
    if (lr->kind == LR_COSINE && !(tr->opt.cosine_decay_epochs > 0)) {
        const long steps = tr->opt.max_steps + lr->step_offset - lr->warmup_steps;
        lr->cosine_steps = steps > 0 ? steps : 1;
    }
}

/* --input_split's names, by PIPELINE_SPLIT_* value (trainer_open reads them, the run state writes them). */
static const char *const split_names[] = {[PIPELINE_SPLIT_NONE] = "none", [PIPELINE_SPLIT_FILES] = "files",
                                          [PIPELINE_SPLIT_RECORDS] = "records"};

/* After the mode's open (a resumed state is then rank 0's on every rank): where each worker's part of the data
 * starts (--input_split files|records).  A checkpoint that records the parts' own counts, of as many workers and
 * the same split: each part's own; otherwise (a checkpoint of a run without a split or older than the counts,
 * another worker count or split: a note) examples_consumed / W each, exact where the parts were consumed equally
 * (every synchronous mode: each step takes W x a worker's batch), approximate otherwise. */
static void settle_parts(Trainer *tr) {
    tr->examples_at_open = tr->examples_consumed;
    if (tr->input_split == PIPELINE_SPLIT_NONE) return;
    const CkptRunState *run = &tr->resume_run;
    const int own = run->n_parts == tr->n_workers && !strcmp(run->input_split, split_names[tr->input_split]);
    for (int w = 0; w < tr->n_workers; w++)
        tr->part_start[w] = own ? run->part_examples_consumed[w] : tr->examples_consumed / tr->n_workers;
    if (run->n_parts > 0 && !own && tr->rank == 0) {
        char ts[64]; /* run->input_split is "files", "records" or "" (ckpt_load keeps no other value) */
        trainer_timestamp(ts, sizeof ts);
        fprintf(stderr, "%s: note: the checkpoint records the examples of %d worker(s)' parts of --input_split %s; "
                "this run has %d worker(s) with --input_split %s: each part skips %ld (examples consumed / %d), "
                "not its own count\n", ts, run->n_parts, run->input_split, tr->n_workers, split_names[tr->input_split],
                tr->examples_consumed / tr->n_workers, tr->n_workers);
    }
}

int trainer_check_lr_schedule(const TrainerOptions *o, char *err, size_t err_n_bytes) {
    LrScheduleKind kind;
    if (lr_schedule_kind_from_name(o->lr_schedule, &kind, err, err_n_bytes) != 0) return -1;
    const char *only = NULL; /* a flag of another schedule than the one asked for */
    if (kind != LR_PIECEWISE && o->piecewise_lr[0]) only = "--piecewise_learning_rate_schedule applies to --lr_schedule piecewise";
    if (kind != LR_COSINE && (o->cosine_decay_epochs > 0 || o->cosine_alpha > 0))
        only = o->cosine_decay_epochs > 0 ? "--cosine_decay_epochs applies to --lr_schedule cosine"
                                          : "--cosine_alpha applies to --lr_schedule cosine";
    if (kind != LR_EXPONENTIAL && o->num_epochs_per_decay > 0)
        only = "--num_epochs_per_decay applies to --lr_schedule exponential";
    if (only) {
        snprintf(err, err_n_bytes, "%s (this run: --lr_schedule %s)", only, o->lr_schedule);
        return -1;
    }
    if (kind == LR_PIECEWISE) {
        if (!o->piecewise_lr[0]) {
            snprintf(err, err_n_bytes, "--lr_schedule piecewise needs --piecewise_learning_rate_schedule "
                     "'RATE;EPOCH;RATE;...', e.g. '0.1;80;0.01;120;0.001'");
            return -1;
        }
        if (!isnan(o->learning_rate)) {
            snprintf(err, err_n_bytes, "--learning_rate with --lr_schedule piecewise: the schedule's first rate is the "
                     "initial rate (as in tf_cnn_benchmarks)");
            return -1;
        }
        float values[LR_MAX_PIECES];
        double epochs[LR_MAX_PIECES];
        int n;
        if (lr_piecewise_parse(o->piecewise_lr, values, epochs, &n, err, err_n_bytes) != 0) return -1;
    }
    return 0;
}

/* 1 when the schedule counts in epochs, which need the epoch's size. */
static int lr_counts_epochs(const TrainerOptions *o) {
    LrScheduleKind kind = LR_EXPONENTIAL;
    (void)lr_schedule_kind_from_name(o->lr_schedule, &kind, NULL, 0);
    return o->warmup_epochs > 0 || kind == LR_PIECEWISE || (kind == LR_EXPONENTIAL && o->num_epochs_per_decay > 0) ||
           (kind == LR_COSINE && o->cosine_decay_epochs > 0);
}

/* Epochs as steps, int(steps per epoch * epochs) as tf_cnn_benchmarks turns them, saturating at 2^62 (a step no
 * run reaches, with room for the sums and differences the schedule takes of it): a product past what a long
 * holds was converted to LONG_MIN, which dropped a warmup silently and named a "-9223372036854775808-step
 * warmup". */
static long epochs_to_steps(double steps_per_epoch, double epochs) {
    const double steps = steps_per_epoch * epochs, never = (double)((long)1 << 62);
    return steps >= never ? (long)1 << 62 : (long)steps;
}

/* The learning-rate schedule of the flags (checked by trainer_check_lr_schedule), its epochs turned into
 * steps (epochs_to_steps), a piecewise boundary one less.  0, or -1 with one line in err. */
static int config_lr_schedule(const Trainer *tr, OptimizerKind opt_kind, LrSchedule *lr, char *err, size_t err_n_bytes) {
    const TrainerOptions *o = &tr->opt;
    const double steps_per_epoch =
        tr->examples_per_epoch > 0 ? (double)tr->examples_per_epoch / trainer_step_examples(tr) : 0.0;
    if (lr_counts_epochs(o) && !(steps_per_epoch > 0)) {
        snprintf(err, err_n_bytes, "--lr_schedule %s counts epochs, and this run's epoch size is unknown: give "
                 "--num_examples_per_epoch", o->lr_schedule);
        return -1;
    }
    memset(lr, 0, sizeof *lr);
    if (lr_schedule_kind_from_name(o->lr_schedule, &lr->kind, err, err_n_bytes) != 0) return -1;
    lr->initial_lr = !isnan(o->learning_rate) ? o->learning_rate : optimizer_default_lr(opt_kind);
    lr->decay_factor = o->lr_decay_factor;
    lr->staircase = 1;
    if (o->num_epochs_per_decay > 0) lr->decay_steps = epochs_to_steps(steps_per_epoch, o->num_epochs_per_decay);
    if (o->num_epochs_per_decay > 0 && lr->decay_steps <= 0) {
        /* tf.train.exponential_decay would divide by 0 steps (NaN, then 0): not a constant rate in silence */
        snprintf(err, err_n_bytes, "--lr_schedule exponential: no step to decay over: --num_epochs_per_decay %g is "
                 "under one step of this run (%.3g steps an epoch)", o->num_epochs_per_decay, steps_per_epoch);
        return -1;
    }
    lr->warmup_steps = epochs_to_steps(steps_per_epoch, o->warmup_epochs);
    if (lr->kind == LR_PIECEWISE) {
        double epochs[LR_MAX_PIECES];
        if (lr_piecewise_parse(o->piecewise_lr, lr->values, epochs, &lr->n_pieces, err, err_n_bytes) != 0) return -1;
        for (int i = 0; i < lr->n_pieces - 1; i++) lr->boundaries[i] = epochs_to_steps(steps_per_epoch, epochs[i]) - 1;
        lr->initial_lr = lr->values[0];
    }
    if (lr->kind == LR_COSINE) {
        lr->alpha = o->cosine_alpha;
        lr->cosine_steps = o->cosine_decay_epochs > 0 ? epochs_to_steps(steps_per_epoch, o->cosine_decay_epochs)
                                                      : o->max_steps - lr->warmup_steps;
        if (lr->cosine_steps <= 0 && o->cosine_decay_epochs > 0) {
            snprintf(err, err_n_bytes, "--lr_schedule cosine: no step to decay over: --cosine_decay_epochs %g is under "
                     "one step of this run (%.3g steps an epoch)", o->cosine_decay_epochs, steps_per_epoch);
            return -1;
        }
        if (lr->cosine_steps <= 0 && o->max_steps == 0)
            lr->cosine_steps = 1; /* --max_steps 0 runs no step (model.ckpt-0 only): any length serves */
        if (lr->cosine_steps <= 0) {
            snprintf(err, err_n_bytes, "--lr_schedule cosine: no step to decay over: --max_steps %ld ends within the "
                     "%ld-step warmup (give --cosine_decay_epochs, or more --max_steps)", o->max_steps, lr->warmup_steps);
            return -1;
        }
    }
    return 0;
}

int trainer_check_batch_norm(const char *batch_norm, char *err, size_t err_n_bytes) {
    if (!strcmp(batch_norm, "tower") || !strcmp(batch_norm, "sync")) return 0;
    snprintf(err, err_n_bytes, "--batch_norm '%s': expected tower or sync", batch_norm);
    return -1;
}

/* trainer_open's first part, what each rank does alone (no collective): the checks of the options and the data, the
 * plan of towers and shards, the server, a --resume load, the towers.  0, or -1 with err (the caller closes). */
static int open_plan(Trainer *tr, const TrainerOptions *opt, TowerGroupConfig *tc, char *err, size_t err_n_bytes) {
    memset(tr, 0, sizeof *tr);
    tr->loaded_n_bytes = resident_n_bytes();
    tr->opt = *opt;
    tr->rank = ranks_rank();
    tr->n_ranks = ranks_size();
    const TrainerOptions *o = &tr->opt;
    char e[PIPELINE_ERR_N_BYTES]; /* a message naming a data file, whole */
    if (trainer_check_batch_norm(o->batch_norm, err, err_n_bytes) != 0 ||
        trainer_check_lr_schedule(o, err, err_n_bytes) != 0)
        return -1;
    tr->bn_sync = !strcmp(o->batch_norm, "sync");
    tr->staleness_max = -1;
    const char *split = o->input_split ? o->input_split : "none";
    int split_kind = -1;
    for (int k = 0; k < (int)(sizeof split_names / sizeof split_names[0]); k++)
        if (!strcmp(split, split_names[k])) split_kind = k;
    if (split_kind < 0) {
        snprintf(err, err_n_bytes, "--input_split '%s': expected none, files or records", split);
        return -1;
    }
    /* One process reads everything; synthetic data has nothing to split. */
    if (tr->n_ranks > 1 && !o->synthetic) tr->input_split = split_kind;
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
    if (plan_towers(tr, tc, err, err_n_bytes) || settle_mode(tr, err, err_n_bytes) ||
        plan_servers(tr, err, err_n_bytes) || plan_shards(tr, err, err_n_bytes))
        return -1;
    if (tr->worker < 0) { /* a server-only rank: the workers' plan (shard sizes, global batch), no towers of its own */
        tr->n_towers = tc->n_towers = 0;
        tr->server_threads = omp_get_max_threads(); /* no tower shares its cores */
    }
    tc->max_batch = 0;
    for (int t = 0; t < tr->n_towers; t++)
        if (tr->shard_sizes[t] > tc->max_batch) tc->max_batch = tr->shard_sizes[t];
    tc->sync_batch_norm = tr->bn_sync;
    /* Across ranks the towers' sums go on through the ranks, in rank order (base/ranks.h). */
    tc->sum_across = tr->bn_sync && tr->n_ranks > 1 ? ranks_sum_ordered : NULL;
    tr->alloc = tr->backend->host_alloc(tc->devices[0]);

    /* The data: its files and the shape of one stored image (synthetic: the model's own). */
    ModelInputFacts facts;
    (void)model_input_facts(o->model, &facts); /* an unknown name: model_spec_init says so below */
    int H = facts.H, W = facts.W, C = facts.C, is_float = 1, probed = 0; /* probed: the file the shape came from */
    tr->image_folder = !o->synthetic && imagefolder_is_folder(o->data);
    if (tr->image_folder && tr->input_split != PIPELINE_SPLIT_NONE) {
        snprintf(err, err_n_bytes, "--input_split %s: TFRecord files only (an image folder is read whole by every rank: "
                 "--input_split none)", o->input_split);
        return -1;
    }
    if (tr->image_folder && imagefolder_check_data_flags(1, 0, o->compression, o->image_key, o->label_key, o->labels,
                                                         o->resize_mode, err, err_n_bytes) != 0)
        return -1;
    if (tr->image_folder) {
        /* Decoded and resized to --image_size in the pipeline; the count (candidate files) for the epoch. */
        if (decoded_size(o, "an image folder as --data needs", &H, &W, err, err_n_bytes) != 0) return -1;
        is_float = 0;
        /* Listed once: the count here, the files for the pipeline (pipeline_cfg.image_listing, closed by
         * trainer_close); its warnings (a subfolder, a class without files) go where the pipeline's go. */
        if (o->labels[0]) { /* its own faults named as its own, not the folder's */
            char **names;
            int n_names;
            if (imagefolder_read_labels(o->labels, &names, &n_names, e, sizeof e) != 0) {
                snprintf(err, err_n_bytes, "--labels: %s", e);
                return -1;
            }
            for (int k = 0; k < n_names; k++) free(names[k]);
            free(names);
        }
        ImageFolderConfig ic;
        imagefolder_config_defaults(&ic);
        ic.labels_file = o->labels[0] ? o->labels : NULL;
        ic.warn = o->warn;
        ic.warn_ctx = o->warn_ctx;
        if (!(tr->image_listing = convert_open_imagefolder(o->data, &ic, e, sizeof e))) {
            snprintf(err, err_n_bytes, "--data: %s", e);
            return -1;
        }
        tr->examples_per_epoch = imagefolder_n_files(tr->image_listing);
        /* A class list (--labels, or the class folders) of another length than the model's outputs: refused here,
         * before the pipeline's workers start (their warnings would come first), as a TFRecord labels.txt is. */
        int n_classes = 0;
        imagefolder_classes(tr->image_listing, &n_classes);
        if (n_classes != o->num_classes) {
            if (o->labels[0])
                snprintf(err, err_n_bytes, "%s names %d class%s but --num_classes is %d: the model's outputs would "
                         "not be the list's classes", o->labels, n_classes, n_classes == 1 ? "" : "es",
                         o->num_classes);
            else
                snprintf(err, err_n_bytes, "%s holds %d class folder%s but --num_classes is %d: the model's outputs "
                         "would not be its classes (pass --num_classes %d)", o->data, n_classes,
                         n_classes == 1 ? "" : "s", o->num_classes, n_classes);
            return -1; /* trainer_open closes: the listing freed */
        }
    } else if (!o->synthetic) {
        if (io_expand_globs(o->data, &tr->files, &tr->n_files, e, sizeof e) != 0) {
            snprintf(err, err_n_bytes, "--data: %s", e);
            return -1;
        }
        if (io_check_regular_files(tr->files, tr->n_files, e, sizeof e) != 0 ||
            io_check_shard_sets(tr->files, tr->n_files, e, sizeof e) != 0) {
            snprintf(err, err_n_bytes, "--data: %s", e);
            return -1;
        }
        int kind;
        if (io_probe_image_shape(tr->files, tr->n_files, o->image_key, compression, o->skip_corrupt, &H, &W, &C,
                                 &kind, &probed, e, sizeof e) != 0) {
            snprintf(err, err_n_bytes, "%s", e);
            return -1;
        }
        is_float = kind == IO_IMAGE_FLOAT;
        tr->image_encoded = kind == IO_IMAGE_ENCODED;
        if (imagefolder_check_data_flags(0, tr->image_encoded, o->compression, o->image_key, o->label_key, o->labels,
                                         o->resize_mode, err, err_n_bytes) != 0)
            return -1;
        if (tr->image_encoded) { /* JPEG/PNG records: decoded and resized to --image_size in the pipeline */
            if (decoded_size(o, "encoded TFRecord images as --data need", &H, &W, err, err_n_bytes) != 0) return -1;
            C = facts.C;
        }
    }
    const int decodes = tr->image_folder || tr->image_encoded; /* resized to --image_size in the pipeline */
    tr->record_n_bytes = tr->image_encoded ? pipeline_encoded_max_n_bytes((size_t)o->max_image_pixels) + 4096
                                           : (size_t)H * W * C * (is_float ? sizeof(float) : 1) + 4096;
    int out_H = H, out_W = W;
    if (facts.distorts && o->image_size > 0 && !decodes) {
        if (o->image_size > H || o->image_size > W) {
            snprintf(err, err_n_bytes, "--image_size %d is larger than the %dx%d images of %s", o->image_size, H, W,
                     tr->files[probed]);
            return -1;
        }
        out_H = out_W = o->image_size;
    }
    if (o->image_size_given && o->image_size != 0 && !facts.distorts && !decodes && !o->synthetic &&
        (o->image_size != H || o->image_size != W)) { /* 0, "no crop", is what such a model does */
        snprintf(err, err_n_bytes, "--image_size %d: --model %s uses TFRecord images at their stored size, %dx%d in %s "
                 "(--image_size crops cifar10's and resizes an image folder's; tower convert --image_size resizes "
                 "records)", o->image_size, o->model, H, W, tr->files[probed]);
        return -1;
    }
    if (model_spec_init_opts(&tr->spec, o->model, out_H, out_W, C, o->num_classes, &o->model_opts, e, sizeof e) != 0) {
        /* TFRecords are used as stored (cifar10 crops them); an image folder is resized to --image_size. */
        if (o->synthetic)
            snprintf(err, err_n_bytes, "--model: %s", e);
        else if (decodes)
            snprintf(err, err_n_bytes, "--model: %s (%s are resized to --image_size, %d here: give a size the model "
                     "takes)", e, tr->image_folder ? "the image folder's images" : "encoded TFRecord images",
                     o->image_size);
        else
            snprintf(err, err_n_bytes, "--model: %s (TFRecord images are used at their stored size: give an image "
                     "folder as --data with --image_size, which resizes)", e);
        return -1;
    }
    tr->moving_n_floats = train_moving_n_floats(&tr->spec);
    if (tr->moving_n_floats == 0 && tr->bn_sync) { /* no batch norm: nothing to sum across towers or ranks (the
                                                     * sums' protocol would wait for --ps_dedicated's servers) */
        tr->bn_sync = 0;
        tc->sync_batch_norm = 0;
        tc->sum_across = NULL;
    }
    if (tr->moving_n_floats > 0 && tr->n_servers > 0 && tr->bn_sync) {
        snprintf(err, err_n_bytes, "--ps_dedicated with --batch_norm sync: the statistics of every layer are summed "
                 "across the ranks inside the forward pass, which server-only ranks do not run; use --batch_norm tower");
        return -1;
    }
    if (tr->moving_n_floats > 0 && !tr->backend->update_moving) {
        snprintf(err, err_n_bytes, "--model %s has batch norm, which %s towers cannot update", o->model,
                 tr->backend->name);
        return -1;
    }
    if (train_mode(tr->mode)->check && train_mode(tr->mode)->check(tr, err, err_n_bytes) != 0) return -1;
    if (!tr->image_folder || o->num_examples_per_epoch > 0) tr->examples_per_epoch = o->num_examples_per_epoch;
    if (tr->examples_per_epoch <= 0 && lr_counts_epochs(o) && !o->synthetic) {
        tr->examples_per_epoch = io_count_records((const char *const *)tr->files, tr->n_files, compression,
                                                  o->skip_corrupt, e, sizeof e);
        if (tr->examples_per_epoch < 0) {
            snprintf(err, err_n_bytes, "%s", e);
            return -1;
        }
    }

    /* Does the bound fit?  First without the server (a batch too large is refused before anything
     * big is allocated), then with it, before the towers, the pipeline and a --resume load. */
    if (!o->synthetic && tr->worker >= 0) config_pipeline(tr, compression, H, W, C, is_float, out_H, out_W, facts.distorts);
    if (trainer_check_memory(tr, err, err_n_bytes) != 0) return -1;

    /* The parameter server: master variables in host memory from the backend. */
    PsConfig pc;
    ps_config_defaults(&pc);
    if (optimizer_kind_from_name(o->optimizer, &pc.opt.kind, err, err_n_bytes) != 0) return -1;
    pc.opt.momentum = o->momentum;
    pc.opt.nesterov = o->nesterov;
    pc.opt.beta1 = o->adam_beta1;
    pc.opt.beta2 = o->adam_beta2;
    pc.opt.epsilon = !isnan(o->adam_epsilon) ? o->adam_epsilon : optimizer_default_adam_epsilon(pc.opt.kind);
    pc.opt.weight_decay = o->weight_decay;
    pc.opt.rms_decay = o->rmsprop_decay;
    pc.opt.rms_momentum = o->rmsprop_momentum;
    pc.opt.rms_epsilon = o->rmsprop_epsilon;
    pc.opt.centered = o->rmsprop_centered;
    if (config_lr_schedule(tr, pc.opt.kind, &pc.lr, err, err_n_bytes) != 0) return -1;
    pc.ema_decay = o->moving_average_decay;
    unsigned char keep[MODEL_MAX_VARS];
    const TrainModeI *mk = train_mode(tr->mode);
    if (mk->server_keeps) {
        mk->server_keeps(tr, keep);
        pc.keep = keep;
    }
    /* The server's block before it is asked for: a network too large for the machine (vgg11 --fc_width 65536:
     * 4.3 G variables) is a memory refusal naming the flag that shrinks it, not a failed allocation. */
    char source[4400];
    const size_t plan = ps_plan_n_bytes(&tr->spec, tr->n_towers, &pc), available = memory_available_n_bytes(source, sizeof source);
    if (available > 0 && plan > available) {
        char lever[64];
        snprintf(err, err_n_bytes, "not enough memory: the parameter server of %zu variables needs %.2f GiB of host "
                 "memory (the variables, their mean gradient, %d tower gradient%s, the optimizer's slots and moving "
                 "averages), and %.2f GiB is available (%s): %s", tr->spec.n_params, gib(plan), tr->n_towers,
                 tr->n_towers == 1 ? "" : "s", gib(available), source, size_lever(tr, lever, sizeof lever));
        return -1;
    }
    tr->ps = ps_create(&tr->spec, tr->n_towers, &pc, tr->alloc, (uint64_t)o->seed);
    if (!tr->ps) {
        snprintf(err, err_n_bytes, "cannot create the parameter server for %zu variables (out of memory?)", tr->spec.n_params);
        return -1;
    }
    if (trainer_check_memory(tr, err, err_n_bytes) != 0) return -1;
    /* A mode that keeps per-rank state (server_keeps: ps_mpi) broadcasts rank 0's loaded server at its open:
     * the other ranks load nothing (their slots stay their shard's). */
    if (o->resume && !(mk->server_keeps && tr->rank != 0) && resume(tr, err, err_n_bytes) != 0) return -1;
    if (!o->resume && !o->no_checkpoints && tr->rank == 0 && refuse_earlier_run(tr, err, err_n_bytes) != 0)
        return -1;

    /* The towers, each delivering into its own host gradient buffer, then
     * the mode's own state (replicas, device variables, communicators). */
    if (tr->n_towers > 0) tr->towers = tower_group_create(tc, &tr->spec, tr->ps->tower_grads, e, sizeof e);
    if (tr->n_towers > 0 && !tr->towers) {
        snprintf(err, err_n_bytes, "%s", e);
        return -1;
    }
    if (tr->moving_n_floats > 0) {
        /* A server-only rank (--ps_dedicated) has no towers but takes part in the gather with a worker's rows. */
        const size_t slots = (size_t)tr->worker_towers * (tr->n_ranks > 1 ? 1 + tr->n_ranks : 1);
        tr->moving_buf = malloc(slots * tr->moving_n_floats * sizeof(float));
        if (!tr->moving_buf) {
            snprintf(err, err_n_bytes, "out of memory for the batch norm statistics of %d tower(s)", tr->n_towers);
            return -1;
        }
    }
    return 0;
}

/* trainer_open's last part, after the mode's open: the data checked by the caller (check_data), the input (the
 * pipeline's threads start here) and the trace.  Local to each rank.  0, or -1 with err (the caller closes). */
static int open_input(Trainer *tr, const TowerGroupConfig *tc, char *err, size_t err_n_bytes) {
    const TrainerOptions *o = &tr->opt;
    settle_parts(tr);
    settle_lr_offset(tr);

    if (o->check_data && o->check_data(o->check_data_ctx, tr, err, err_n_bytes) != 0) return -1;
    if (tr->worker < 0) {
        /* A server-only rank reads nothing: every step hands its mode the empty tr->synthetic. */
    } else if (o->synthetic) {
        int sizes[PIPELINE_MAX_SHARDS];
        for (int k = 0; k < tr->n_workers * tr->n_towers; k++) sizes[k] = step_shard_n(tr, k);
        if (synthetic_batch_create(&tr->synthetic, tr->global_batch, (size_t)tr->spec.H * tr->spec.W * tr->spec.C,
                                   tr->spec.num_classes, (uint64_t)o->seed, tr->n_workers * tr->n_towers, sizes,
                                   tr->alloc, err, err_n_bytes) != 0)
            return -1;
        rank_shards(tr, &tr->synthetic);
    } else if (open_pipeline(tr, err, err_n_bytes) != 0) {
        return -1;
    }
    if (open_trace(tr, tc, err, err_n_bytes) != 0) return -1;
    return 0;
}

/* Across ranks (mpirun): this rank's outcome so far (rc 0 or -1, its line in err) made the job's, so that every rank
 * goes on, or every rank stops here and none is left waiting in a collective for one that stopped.  Returns 0 when
 * every rank got here with 0; else TRAINER_OPEN_REFUSED on every rank, err holding the line on the lowest rank that
 * failed (prefixed "rank R of N: " unless it is rank 0) and "" on the others, which have nothing to add (the same
 * flags: most often the same line).  One process: rc. */
static int agree_open(const Trainer *tr, int rc, char *err, size_t err_n_bytes) {
    if (tr->n_ranks < 2) return rc;
    const int first = ranks_first(rc != 0);
    if (first < 0) return 0;
    if (tr->rank != first) {
        err[0] = '\0';
    } else if (tr->rank != 0) {
        char line[1024];
        snprintf(line, sizeof line, "%s", err);
        snprintf(err, err_n_bytes, "rank %d of %d: %s", tr->rank, tr->n_ranks, line);
    }
    return TRAINER_OPEN_REFUSED;
}

/* FNV-1a over n bytes, continued from h. */
static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
    return h;
}

/* Across ranks, what each rank compares with rank 0's before the mode's open (one broadcast of rank 0's). */
typedef struct {
    int rc;                /* open_plan's outcome on this rank */
    int H, W, C;           /* the model's input: a step's broadcasts need one model */
    uint64_t n_params;
    int has_classes;       /* 1: a class list (an image folder's classes, or the labels.txt beside the TFRecords) */
    uint64_t classes_hash; /* FNV-1a of that list, a line a class (a last newline is no difference) */
    int n_writers;         /* rank 0's: ranks 0 .. n_writers - 1 write checkpoint files into --train_dir */
    char probe[64];        /* rank 0's: the name of a file it made in --train_dir for them to find, or "" */
} StartFacts;

/* This rank's facts (rc: open_plan's outcome); the path of the labels.txt it hashed into found ("" for none or an
 * image folder's list).  Rank 0, when other ranks write into the train_dir, makes the probe file there: 0, or -1
 * with err. */
static int start_facts(const Trainer *tr, int rc, StartFacts *f, char *found, size_t found_n_bytes, char *err,
                       size_t err_n_bytes) {
    *f = (StartFacts){.rc = rc, .H = tr->spec.H, .W = tr->spec.W, .C = tr->spec.C,
                      .n_params = (uint64_t)tr->spec.n_params, .classes_hash = 0xcbf29ce484222325ull, .n_writers = 1};
    found[0] = '\0';
    if (rc != 0) return 0;
    int n_classes = 0;
    const char *const *classes = trainer_classes(tr, &n_classes);
    char e[PIPELINE_ERR_N_BYTES];
    if (classes) {
        f->has_classes = 1;
        for (int k = 0; k < n_classes; k++)
            f->classes_hash = fnv1a(fnv1a(f->classes_hash, classes[k], strlen(classes[k])), "\n", 1);
    } else if (tr->n_files > 0 && io_labels_find(tr->files, tr->n_files, found, found_n_bytes, e, sizeof e) == 0 &&
               found[0]) {
        char *text;
        size_t n;
        if (imagefolder_read_labels_text(found, &text, &n, e, sizeof e) > 0) {
            f->has_classes = 1;
            f->classes_hash = fnv1a(f->classes_hash, text, n);
            if (n == 0 || text[n - 1] != '\n') f->classes_hash = fnv1a(f->classes_hash, "\n", 1);
            free(text);
        }
    }
    const TrainModeI *m = train_mode(tr->mode);
    const char *advice = "";
    if (tr->rank != 0 || tr->opt.no_checkpoints || !m->train_dir_writers) return 0;
    f->n_writers = m->train_dir_writers(tr, &advice);
    if (f->n_writers < 2) return 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(f->probe, sizeof f->probe, ".rank0-probe-%ld-%lx", (long)getpid(), (unsigned long)ts.tv_nsec);
    char path[4200], dir[4096];
    snprintf(path, sizeof path, "%s/%s", tr->opt.train_dir, f->probe);
    FILE *fp = fopen(path, "wx");
    if (!fp || fclose(fp) != 0) {
        escape_str(dir, sizeof dir, tr->opt.train_dir);
        snprintf(err, err_n_bytes, "--train_dir %s: cannot make %s there: %s", dir, f->probe, strerror(errno));
        f->probe[0] = '\0';
        return -1;
    }
    return 0;
}

/* This rank's facts against rank 0's (both opened): the model (another image shape on one host's copy of --data
 * crashed the first broadcast), the class list (rank 0 alone checks it against the train_dir's and records it:
 * another list on one host would train label numbers that name other classes there), and, on a rank that writes
 * into --train_dir, rank 0's probe there (a host with its own directory of that name failed at the first
 * checkpoint).  0, or -1 with err. */
static int compare_start(const Trainer *tr, const StartFacts *mine, const StartFacts *rank0, const char *found,
                         char *err, size_t err_n_bytes) {
    if (mine->H != rank0->H || mine->W != rank0->W || mine->C != rank0->C || mine->n_params != rank0->n_params) {
        snprintf(err, err_n_bytes, "this rank's model takes %dx%dx%d images (%llu variables) but rank 0's %dx%dx%d "
                 "(%llu): every rank's --data must hold images of one shape", mine->H, mine->W, mine->C,
                 (unsigned long long)mine->n_params, rank0->H, rank0->W, rank0->C, (unsigned long long)rank0->n_params);
        return -1;
    }
    if (mine->has_classes && rank0->has_classes && mine->classes_hash != rank0->classes_hash) {
        char what[4200];
        if (!found[0] && tr->opt.labels && tr->opt.labels[0]) snprintf(what, sizeof what, "--labels %s", tr->opt.labels);
        else if (!found[0]) snprintf(what, sizeof what, "the class folders of %s", tr->opt.data);
        else snprintf(what, sizeof what, "%s", found);
        snprintf(err, err_n_bytes, "this rank's class list (%s) differs from rank 0's: a label number would name "
                 "another class on each host", what);
        return -1;
    }
    if (rank0->probe[0] && tr->rank < rank0->n_writers) {
        char path[4200], dir[4096];
        snprintf(path, sizeof path, "%s/%s", tr->opt.train_dir, rank0->probe);
        struct stat sb;
        if (stat(path, &sb) != 0) {
            const TrainModeI *m = train_mode(tr->mode);
            const char *advice = "";
            if (m->train_dir_writers) (void)m->train_dir_writers(tr, &advice);
            escape_str(dir, sizeof dir, tr->opt.train_dir);
            snprintf(err, err_n_bytes, "--train_dir %s here is not rank 0's (the file %s rank 0 just made in its "
                     "train_dir is not in this one): %s", dir, rank0->probe, advice);
            return -1;
        }
    }
    return 0;
}

/* Across ranks: every rank's facts against rank 0's, then the agreement (agree_open), then rank 0's probe removed.
 * rc (this rank's outcome so far), or as agree_open.  A collective: every rank calls it.  One process: rc. */
static int agree_start(const Trainer *tr, int rc, char *err, size_t err_n_bytes) {
    if (tr->n_ranks < 2) return rc;
    char found[4096];
    StartFacts mine, rank0;
    if (start_facts(tr, rc, &mine, found, sizeof found, err, err_n_bytes) != 0) rc = mine.rc = -1;
    rank0 = mine;
    ranks_bcast(&rank0, sizeof rank0);
    if (rc == 0 && rank0.rc == 0) rc = compare_start(tr, &mine, &rank0, found, err, err_n_bytes);
    rc = agree_open(tr, rc, err, err_n_bytes);
    if (mine.probe[0]) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", tr->opt.train_dir, mine.probe);
        (void)unlink(path);
    }
    return rc;
}

int trainer_open(Trainer *tr, const TrainerOptions *opt, char *err, size_t err_n_bytes) {
    TowerGroupConfig tc;
    /* Each rank alone; every rank's model, class list and train_dir against rank 0's; then the agreement before the mode's
     * open (its collectives: a broadcast of rank 0's variables, communicators); the mode's own refusal ends the job
     * (the caller's MPI_Abort), since the other ranks may be inside one of its collectives.  Then the input, and
     * the agreement again (check_data runs on one rank; a mode's close may be collective, so every rank closes or
     * none). */
    int rc = open_plan(tr, opt, &tc, err, err_n_bytes);
    rc = agree_start(tr, rc, err, err_n_bytes);
    if (rc == 0) {
        const TrainModeI *m = train_mode(tr->mode);
        if (m->open && m->open(tr, err, err_n_bytes) != 0) rc = TRAINER_OPEN_FAILED;
        else rc = agree_open(tr, open_input(tr, &tc, err, err_n_bytes), err, err_n_bytes);
    }
    if (rc != 0) trainer_close(tr, NULL, 0);
    return rc;
}

const char *const *trainer_classes(const Trainer *tr, int *n_classes) {
    *n_classes = 0;
    return tr->image_listing ? imagefolder_classes(tr->image_listing, n_classes) : NULL;
}

/* The next global batch: from the pipeline, or the synthetic one. */
static int next_batch(Trainer *tr, PipelineBatch **batch, char *err, size_t err_n_bytes) {
    /* A server-only rank, or a worker whose input ended and stays (tr->input_done): the empty batch, never ending
     * by itself (the mode's step ends it). */
    if (tr->opt.synthetic || tr->worker < 0 || tr->input_done) {
        *batch = &tr->synthetic;
        if (tr->opt.synthetic || tr->input_done) return 1;
    }
    int got = tr->worker < 0 ? 1 : pipeline_next(tr->pipeline, batch, err, err_n_bytes);
    if (got > 0 && tr->worker >= 0 && tr->input_split == PIPELINE_SPLIT_NONE) rank_shards(tr, *batch);
    /* Ranks that step apart never meet here (the mode's input_ended: with a split or --ps_dedicated the servers
     * hear the end from the workers, and a worker whose own part ended first stays in the job, passive, until the
     * others' end); one process has no one to agree with. */
    const int apart = trainer_ranks_step_apart(tr);
    if (apart || tr->n_ranks <= 1) {
        const TrainModeI *m = train_mode(tr->mode);
        if (got == 0 && tr->worker >= 0 && apart && m->input_ended && m->input_ended(tr)) {
            tr->input_done = 1;
            *batch = &tr->synthetic;
            return 1;
        }
        return got;
    }
    /* Each rank reads its own part, or a server-only rank none, or every worker the same stream (which ends on
     * every rank at once, unless the hosts' copies of --data differ): they agree, so that all step or none does (a
     * rank whose input ended or failed first ends the job's steps, where the others would wait for it in the
     * step's collectives for ever; MPI_Allgather of each rank's answer). */
    int all[PIPELINE_MAX_SHARDS];
    ranks_allgather(&got, all, sizeof got);
    int ended = -1, failed = -1;
    for (int r = 0; r < tr->n_ranks; r++) {
        if (all[r] < 0 && failed < 0) failed = r;
        if (all[r] == 0 && ended < 0) ended = r;
    }
    if (failed < 0 && ended < 0) return got;
    if (got > 0 && tr->worker >= 0) pipeline_release(tr->pipeline, *batch);
    if (failed < 0 && tr->input_split == PIPELINE_SPLIT_NONE && tr->rank == 0) {
        int n_ended = 0;
        for (int r = 0; r < tr->n_ranks; r++) n_ended += all[r] == 0;
        if (n_ended < tr->n_ranks - tr->n_servers) { /* the same stream ended on some ranks only */
            char line[256];
            snprintf(line, sizeof line, "rank %d's input ended before the others' (--input_split none: every rank "
                     "reads the same stream, so the hosts' copies of --data differ); the job ends here", ended);
            if (tr->opt.warn) tr->opt.warn(tr->opt.warn_ctx, line);
            else fprintf(stderr, "tower train: warning: %s\n", line);
        }
    }
    if (failed >= 0) {
        if (got >= 0) snprintf(err, err_n_bytes, "rank %d's input failed (its own line says why)", failed);
        return -1;
    }
    return 0;
}

static void release_batch(Trainer *tr, PipelineBatch *batch) {
    if (!tr->opt.synthetic && tr->worker >= 0) pipeline_release(tr->pipeline, batch);
}

int train_run_towers(Trainer *tr, TowerStep *step, PipelineBatch *batch, float *loss, char *err, size_t err_n_bytes) {
    step->x = batch->x;
    step->labels = batch->labels;
    step->shard_offset = batch->shard_offset;
    step->shard_n = batch->shard_n;
    /* Each tower's gradient: the mean over its micro-batches (grad_scale 1/K; exactly 1 with one micro-batch:
     * nothing to scale) of the gradient of its weight in the mean over the towers that every mode then takes
     * times its cross-entropy (loss_weight; exactly 1 with equal shards).  The weight goes onto the tower's
     * output gradient before the backward, not onto its gradient after: sync batch norm's backward sums mix
     * the towers' output gradients, which must carry their weights there. */
    float grad_scale[TOWER_MAX_TOWERS], loss_weight[TOWER_MAX_TOWERS];
    for (int t = 0; t < tr->n_towers; t++) {
        loss_weight[t] = (float)train_tower_weight(tr, batch->shard_n[t]);
        grad_scale[t] = (float)(1.0 / tr->accum_steps);
    }
    step->accum_steps = tr->accum_steps;
    step->grad_scale = grad_scale;
    step->loss_weight = loss_weight;
    tr->times.towers.start_sec = tower_now_sec();
    int rc = tower_group_run(tr->towers, step, err, err_n_bytes);
    tr->times.towers.end_sec = tower_now_sec();
    double loss_sum = 0.0, correct = 0.0;
    for (int t = 0; t < tr->n_towers && rc == 0; t++) {
        tr->tower_losses[t] = tr->towers->towers[t].loss;
        tr->tower_accuracy[t] = tr->towers->towers[t].accuracy;
        loss_sum += train_tower_weight(tr, batch->shard_n[t]) * tr->tower_losses[t];
        correct += (double)tr->tower_accuracy[t] * batch->shard_n[t];
    }
    int n_examples = batch->n;
    release_batch(tr, batch);
    if (rc != 0) return -1;
    *loss = (float)(loss_sum / tr->n_towers);
    tr->accuracy = (float)(correct / n_examples);
    if (!isfinite(*loss)) {
        snprintf(err, err_n_bytes, "Model diverged with loss = %s at step %ld", *loss != *loss ? "NaN" : "Inf",
                 tr->ps->global_step + 1);
        return -2;
    }
    return 1;
}

int train_diverged(long step, const char *what, float loss, char *err, size_t err_n_bytes) {
    snprintf(err, err_n_bytes, "Model diverged with %s at step %ld (loss = %.2f)", what, step, loss);
    return -2;
}

int train_run_replicated(Trainer *tr, TowerStep *step, PipelineBatch *batch, float *loss, char *err,
                         size_t err_n_bytes) {
    tr->step_lr = ps_step_lr(tr->ps);
    int rc = train_run_towers(tr, step, batch, loss, err, err_n_bytes);
    if (rc != 1) return rc;
    tr->times.apply.start_sec = tower_now_sec();
    ps_finish_replicated_step(tr->ps, tr->step_lr);
    tr->times.apply.end_sec = tower_now_sec();
    return 1;
}

int train_mode_always_available(char *err, size_t err_n_bytes) {
    (void)err;
    (void)err_n_bytes;
    return 1;
}

TowerSpan train_device_span(double host_sec, const PsGpuSpanMs *ms) {
    TowerSpan s = {0.0, 0.0};
    if (ms->ran) {
        s.start_sec = host_sec + 1e-3 * ms->start_ms;
        s.end_sec = host_sec + 1e-3 * ms->end_ms;
    }
    return s;
}

/* One step's spans into the --trace file: the server row, a row per tower, the all-reduce row. */
static void trace_step(Trainer *tr, long step) {
    static const char *const labels[TOWER_N_PHASES] = {"copy-in", "forward", "backward", "copy-out",
                                                       "wait for towers", "all-reduce", "apply"};
    static const char *const cats[TOWER_N_PHASES] = {"copy", "compute", "compute", "copy", "wait", "reduce", "apply"};
    const TrainModeI *m = train_mode(tr->mode);
    Trace *trc = tr->trace;
    const TrainerStepTimes *st = &tr->times;
    char name[48];
    snprintf(name, sizeof name, "step %ld", step);
    trace_marker(trc, name, st->start_sec);
    trace_span(trc, 0, "input", "input", st->input.start_sec, st->input.end_sec);
    trace_span(trc, 0, "average", "reduce", st->average.start_sec, st->average.end_sec);
    trace_span(trc, 0, m->server_apply, "apply", st->apply.start_sec, st->apply.end_sec);
    TowerSpan reduce = {0.0, 0.0};
    for (int t = 0; t < tr->n_towers; t++) {
        const TowerTimes *tt = &tr->towers->towers[t].times;
        trace_span(trc, 1 + t, "waiting for input", "wait", st->start_sec, tt->go_sec);
        for (int p = 0; p < TOWER_N_PHASES; p++)
            trace_span(trc, 1 + t, labels[p], cats[p], tt->span[p].start_sec, tt->span[p].end_sec);
        const TowerSpan *r = &tt->span[TOWER_PHASE_REDUCE];
        if (r->start_sec > 0.0 && (reduce.start_sec == 0.0 || r->start_sec < reduce.start_sec)) reduce.start_sec = r->start_sec;
        if (r->end_sec > reduce.end_sec) reduce.end_sec = r->end_sec;
    }
    if (m->reduce_device_span) reduce = m->reduce_device_span(tr);
    if (m->reduce_row) trace_span(trc, 1 + tr->n_towers, m->reduce_span, "reduce", reduce.start_sec, reduce.end_sec);
}

int trainer_next_batch(Trainer *tr, PipelineBatch **batch, char *err, size_t err_n_bytes) {
    TrainerStepTimes *st = &tr->times;
    memset(st, 0, sizeof *st);
    st->start_sec = st->input.start_sec = tower_now_sec();
    int got = next_batch(tr, batch, err, err_n_bytes);
    st->input.end_sec = tower_now_sec();
    return got;
}

int trainer_step_batch(Trainer *tr, PipelineBatch *batch, float *loss, char *err, size_t err_n_bytes) {
    long step = tr->ps->global_step + 1;
    int n_examples = batch->n;
    int rc = train_mode(tr->mode)->step(tr, batch, loss, err, err_n_bytes);
    tr->times.end_sec = tower_now_sec();
    /* The job's examples (a server-only rank, which reads none, counts them too: rank 0 saves the count); where
     * the ranks step apart the mode's step counts them (the job's as owner 0 knows them). */
    if (rc == 1 && !trainer_ranks_step_apart(tr))
        tr->examples_consumed += tr->worker < 0 ? (long)tr->global_batch
                                                : (long)n_examples * (tr->input_split != PIPELINE_SPLIT_NONE ? tr->n_workers : 1);
    if (tr->trace && rc != -1) trace_step(tr, step);
    return rc;
}

int trainer_step(Trainer *tr, float *loss, char *err, size_t err_n_bytes) {
    PipelineBatch *batch;
    int got = trainer_next_batch(tr, &batch, err, err_n_bytes);
    return got <= 0 ? got : trainer_step_batch(tr, batch, loss, err, err_n_bytes);
}

const float *trainer_variables(const Trainer *tr) {
    const TrainModeI *m = train_mode(tr->mode);
    if (m->variables) return m->variables(tr);
    if (m->save) m->save(tr);
    return tr->ps->params;
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
    const int n = tr->n_towers > 0 ? tr->n_towers : 1; /* a server-only rank: no tower phases */
    out->copy = copy / n;
    out->compute = compute / n;
    out->reduce = reduce / n + (st->average.end_sec - st->average.start_sec);
    out->apply = apply / n + (st->apply.end_sec - st->apply.start_sec);
    out->other = out->step - out->input - out->copy - out->compute - out->reduce - out->apply;
}

int trainer_variables_finite(const Trainer *tr, char *err, size_t err_n_bytes) {
    for (size_t i = 0; i < tr->spec.n_params; i++) {
        if (!isfinite(tr->ps->params[i])) {
            snprintf(err, err_n_bytes, "not saving step %ld: its variables are not finite (the model diverged)",
                     tr->ps->global_step);
            return 0;
        }
    }
    return 1;
}

int trainer_save(Trainer *tr, char *err, size_t err_n_bytes) {
    const TrainModeI *m = train_mode(tr->mode);
    CkptRunState run = {
        .seed = (uint64_t)tr->opt.seed,
        .examples_consumed = tr->examples_consumed,
        .n_towers = tr->n_workers * tr->worker_towers,
        .accum_steps = tr->accum_steps,
        .min_after_dequeue = tr->opt.min_after_dequeue,
    };
    run_split_save(tr, &run);
    /* With a split, each worker part's own examples: in lockstep every part took the steps since open, each W x
     * a worker's batch of the job's count (exact); the modes whose ranks step apart give theirs (run_state). */
    if (tr->input_split != PIPELINE_SPLIT_NONE) {
        run.n_parts = tr->n_workers;
        snprintf(run.input_split, sizeof run.input_split, "%s", split_names[tr->input_split]);
        for (int w = 0; w < tr->n_workers; w++)
            run.part_examples_consumed[w] = tr->part_start[w] + (tr->examples_consumed - tr->examples_at_open) / tr->n_workers;
    }
    /* Across ranks, a mode whose state is spread over them may write it where it lies (ps_mpi: each owner its shard). */
    if (m->write_checkpoint && tr->n_ranks > 1) return m->write_checkpoint(tr, &run, err, err_n_bytes);
    /* The variables every tower shares, in the host block (the mode knows where they are). */
    if (m->save) m->save(tr);
    if (m->run_state) m->run_state(tr, &run);
    if (tr->rank != 0) return 0; /* rank 0 alone writes */
    /* Never replace a good checkpoint with variables that have blown up. */
    if (!trainer_variables_finite(tr, err, err_n_bytes)) return -1;
    return ckpt_save(tr->opt.train_dir, tr->ps, &run, tr->opt.keep_checkpoints, err, err_n_bytes);
}

int trainer_save_needs_every_rank(const Trainer *tr) {
    return tr->n_ranks > 1 && train_mode(tr->mode)->save_on_every_rank;
}

int trainer_ranks_step_apart(const Trainer *tr) { return tr->n_ranks > 1 && train_mode(tr->mode)->asynchronous; }

long trainer_step_examples(const Trainer *tr) {
    return trainer_ranks_step_apart(tr) ? tr->global_batch / tr->n_workers : tr->global_batch;
}

long trainer_schedule_step(const Trainer *tr) {
    return trainer_ranks_step_apart(tr) ? tr->schedule_step : tr->ps->global_step;
}

int trainer_ranks_stop(Trainer *tr, int stop_here) {
    if (trainer_ranks_step_apart(tr)) return tr->stop_agreed;
    return tr->n_ranks > 1 ? ranks_any(stop_here) : stop_here;
}
