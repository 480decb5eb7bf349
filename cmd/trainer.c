/* trainer.c — the training loop's parts wired together (see trainer.h).
 * No math lives here: it calls io/, tower/ and ps/ in the order of a step.
 */
#include "cmd/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

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
static int plan_towers(Trainer *tr, TowerGroupConfig *tc, char *err, size_t err_n_bytes) {
    const TrainerOptions *o = &tr->opt;
    const char *dev = o->device;
    if (!strcmp(dev, "gpu")) {
#ifdef TOWER_HAVE_CUDA
        char e[256];
        int n = tower_cuda_device_count(e, sizeof e);
        if (n <= 0) {
            snprintf(err, err_n_bytes, "--device gpu: %s", n < 0 ? e : "no GPU is visible");
            return -1;
        }
        snprintf(err, err_n_bytes, "--device gpu: %d GPU(s) found, but GPU towers are not built yet in this version; use --device cpu", n);
#else
        snprintf(err, err_n_bytes, "--device gpu: this tower was built without CUDA (cmake -DTOWER_CUDA=ON)");
#endif
        return -1;
    }
    if (strcmp(dev, "cpu") != 0 && strcmp(dev, "auto") != 0) {
        snprintf(err, err_n_bytes, "--device '%s': expected cpu, gpu or auto", dev);
        return -1;
    }
    tr->backend = &tower_backend_cpu;
    tr->n_towers = o->num_towers > 0 ? o->num_towers : 1;
    if (tr->n_towers > TOWER_MAX_TOWERS) {
        snprintf(err, err_n_bytes, "--num_towers %d: at most %d", tr->n_towers, TOWER_MAX_TOWERS);
        return -1;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    memset(tc, 0, sizeof *tc);
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

static void log_device_placement(const Trainer *tr, const TowerGroupConfig *tc) {
    char ts[64];
    trainer_timestamp(ts, sizeof ts);
    printf("%s: variables: %zu floats (%.1f MiB) of model %s in %s on /cpu:0, with momentum slots and moving averages beside them\n",
           ts, tr->spec.n_params, tr->spec.n_params * 4.0 / (1024 * 1024), tr->spec.name, tr->alloc.kind);
    for (int t = 0; t < tr->n_towers; t++) {
        char d[256];
        tr->backend->describe_device(tc->devices[t], d, sizeof d);
        printf("%s: tower_%d: %s backend, device %s, %d OpenMP thread(s), batch %d\n", ts, t,
               tr->backend->name, d, tc->n_threads[t], tr->shard_sizes[t]);
    }
    printf("%s: global batch %d = %d tower(s); gradients averaged and applied on /cpu:0\n", ts,
           tr->global_batch, tr->n_towers);
    fflush(stdout);
}

void trainer_close(Trainer *tr) {
    if (tr->pipeline) pipeline_close(tr->pipeline);
    if (tr->towers) tower_group_free(tr->towers);
    if (tr->ps) ps_free(tr->ps);
    if (tr->files) {
        for (int i = 0; i < tr->n_files; i++) free(tr->files[i]);
        free(tr->files);
    }
    memset(tr, 0, sizeof *tr);
}

int trainer_open(Trainer *tr, const TrainerOptions *opt, char *err, size_t err_n_bytes) {
    memset(tr, 0, sizeof *tr);
    tr->opt = *opt;
    const TrainerOptions *o = &tr->opt;
    char e[512];
    if (o->batch_size < 1) {
        snprintf(err, err_n_bytes, "--batch_size must be at least 1, got %d", o->batch_size);
        return -1;
    }
    int compression = parse_compression(o->compression);
    if (compression < 0) {
        snprintf(err, err_n_bytes, "--compression '%s': expected auto, none, gzip or zlib", o->compression);
        return -1;
    }
    TowerGroupConfig tc;
    if (plan_towers(tr, &tc, err, err_n_bytes) || plan_shards(tr, err, err_n_bytes)) return -1;
    tc.max_batch = 0;
    for (int t = 0; t < tr->n_towers; t++)
        if (tr->shard_sizes[t] > tc.max_batch) tc.max_batch = tr->shard_sizes[t];
    tr->alloc = tr->backend->host_alloc();

    /* The data: its files and the shape of one stored image. */
    if (io_expand_globs(o->data, &tr->files, &tr->n_files, e, sizeof e) != 0) {
        snprintf(err, err_n_bytes, "--data: %s", e);
        return -1;
    }
    int H, W, C, is_float;
    if (io_probe_image_shape(tr->files[0], o->image_key, compression, &H, &W, &C, &is_float, e, sizeof e) != 0) {
        snprintf(err, err_n_bytes, "%s", e);
        trainer_close(tr);
        return -1;
    }
    int is_cifar = !strcmp(o->model, "cifar10");
    int out_H = H, out_W = W;
    if (is_cifar && o->image_size > 0) {
        if (o->image_size > H || o->image_size > W) {
            snprintf(err, err_n_bytes, "--image_size %d is larger than the %dx%d images of %s", o->image_size, H, W,
                     tr->files[0]);
            trainer_close(tr);
            return -1;
        }
        out_H = out_W = o->image_size;
    }
    if (model_spec_init(&tr->spec, o->model, out_H, out_W, C, o->num_classes, e, sizeof e) != 0) {
        snprintf(err, err_n_bytes, "--model: %s", e);
        trainer_close(tr);
        return -1;
    }
    tr->examples_per_epoch = o->num_examples_per_epoch;
    if (tr->examples_per_epoch <= 0 && o->num_epochs_per_decay > 0) {
        tr->examples_per_epoch = io_count_records((const char *const *)tr->files, tr->n_files, compression, e, sizeof e);
        if (tr->examples_per_epoch < 0) {
            snprintf(err, err_n_bytes, "%s", e);
            trainer_close(tr);
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
        trainer_close(tr);
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
        trainer_close(tr);
        return -1;
    }
    if (o->resume) {
        char path[4096];
        int found = ckpt_latest(o->train_dir, path, sizeof path);
        if (found < 0) {
            snprintf(err, err_n_bytes, "--resume: cannot read the checkpoint index in %s", o->train_dir);
            trainer_close(tr);
            return -1;
        }
        if (found == 1) {
            CkptRunState run;
            if (ckpt_load(path, tr->ps, &run, e, sizeof e) != 0) {
                snprintf(err, err_n_bytes, "--resume: %s", e);
                trainer_close(tr);
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

    /* The towers, each delivering into its own host gradient buffer. */
    tr->towers = tower_group_create(&tc, &tr->spec, tr->ps->tower_grads, e, sizeof e);
    if (!tr->towers) {
        snprintf(err, err_n_bytes, "%s", e);
        trainer_close(tr);
        return -1;
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
    pcfg.drop_remainder = 1;
    pcfg.skip_examples = tr->examples_consumed;
    tr->pipeline = pipeline_open(&pcfg, e, sizeof e);
    if (!tr->pipeline) {
        snprintf(err, err_n_bytes, "%s", e);
        trainer_close(tr);
        return -1;
    }
    if (o->log_device_placement) log_device_placement(tr, &tc);
    return 0;
}

int trainer_step(Trainer *tr, float *loss, char *err, size_t err_n_bytes) {
    ParamServer *ps = tr->ps;
    PipelineBatch *batch;
    int got = pipeline_next(tr->pipeline, &batch, err, err_n_bytes);
    if (got <= 0) return got;

    int rc = tower_group_step(tr->towers, ps->params, batch->x, batch->labels, batch->shard_offset,
                              batch->shard_n, err, err_n_bytes);
    int n_examples = batch->n;
    double loss_sum = 0.0, correct = 0.0;
    for (int t = 0; t < tr->n_towers && rc == 0; t++) {
        tr->tower_losses[t] = tr->towers->towers[t].loss;
        tr->tower_accuracy[t] = tr->towers->towers[t].accuracy;
        loss_sum += tr->tower_losses[t];
        correct += (double)tr->tower_accuracy[t] * batch->shard_n[t];
    }
    pipeline_release(tr->pipeline, batch);
    if (rc != 0) return -1;

    *loss = (float)(loss_sum / tr->n_towers);
    tr->accuracy = (float)(correct / n_examples);
    if (!isfinite(*loss)) return -2;

    ps_average_grads(ps);
    ps_apply_gradients(ps);
    tr->examples_consumed += n_examples;
    return 1;
}

int trainer_save(Trainer *tr, char *err, size_t err_n_bytes) {
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
