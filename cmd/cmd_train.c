/* cmd_train.c — `tower train`: flags, the step loop, the log lines,
 * checkpoints on a schedule, on SIGINT/SIGTERM and at the end.
 *
 * Where it sits: cmd/ only wires; the step itself is trainer_step
 * (trainer.h).  Log lines follow TensorFlow's cifar10_multi_gpu_train:
 *   2026-11-21 12:00:00.123456: step 120, loss = 0.52 (4210.3 examples/sec; 0.030 sec/batch)
 * with two deliberate differences: the loss is the mean over the towers (the
 * original logs the last tower's), and the rate is averaged over the steps
 * since the previous line (the original times one step).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd/commands.h"
#include "cmd/flags.h"
#include "cmd/trainer.h"

static volatile sig_atomic_t stop_requested = 0;

static void on_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

static int make_dirs(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

int train_flags(TrainerOptions *o, Flag *flags) {
    const Flag table[] = {
        {"model", FLAG_STRING, &o->model, "model to train: mnist or cifar10"},
        {"data", FLAG_STRING, &o->data, "TFRecord files of the training set: comma-separated globs"},
        {"train_dir", FLAG_STRING, &o->train_dir, "directory for checkpoints (model.ckpt-STEP, checkpoint)"},
        {"max_steps", FLAG_LONG, &o->max_steps, "number of steps (global batches) to run"},
        {"batch_size", FLAG_INT, &o->batch_size, "examples per tower per step; the global batch is batch_size x towers"},
        {"num_towers", FLAG_INT, &o->num_towers, "number of towers (0: one per device; CPU: 1)"},
        {"num_gpus", FLAG_INT, &o->num_gpus, "GPUs to use with --device gpu (reserved for GPU towers)"},
        {"device", FLAG_STRING, &o->device, "tower device: cpu, gpu or auto (GPU towers when a GPU is usable)"},
        {"shard_sizes", FLAG_STRING, &o->shard_sizes, "uneven split of the global batch, e.g. 80,48 (overrides batch_size)"},
        {"log_device_placement", FLAG_BOOL, &o->log_device_placement, "print where the variables and each tower live"},
        {"optimizer", FLAG_STRING, &o->optimizer, "momentum (TensorFlow's MomentumOptimizer) or sgd (plain gradient descent)"},
        {"learning_rate", FLAG_FLOAT, &o->learning_rate, "initial learning rate"},
        {"momentum", FLAG_FLOAT, &o->momentum, "momentum of the momentum optimizer"},
        {"nesterov", FLAG_BOOL, &o->nesterov, "Nesterov momentum"},
        {"lr_decay_factor", FLAG_FLOAT, &o->lr_decay_factor, "learning rate decay factor (staircase exponential decay)"},
        {"num_epochs_per_decay", FLAG_FLOAT, &o->num_epochs_per_decay, "epochs between decays (0: constant learning rate)"},
        {"num_examples_per_epoch", FLAG_LONG, &o->num_examples_per_epoch, "examples in one epoch (0: count the records of --data)"},
        {"moving_average_decay", FLAG_FLOAT, &o->moving_average_decay, "decay of the variables' moving averages (0: none)"},
        {"num_classes", FLAG_INT, &o->num_classes, "number of classes; labels must lie in [0, num_classes)"},
        {"image_size", FLAG_INT, &o->image_size, "cifar10: random crop to image_size x image_size (0: no crop)"},
        {"image_key", FLAG_STRING, &o->image_key, "Example feature holding the image"},
        {"label_key", FLAG_STRING, &o->label_key, "Example feature holding the label"},
        {"compression", FLAG_STRING, &o->compression, "TFRecord compression: auto, none, gzip or zlib"},
        {"min_after_dequeue", FLAG_LONG, &o->min_after_dequeue, "shuffle buffer: examples kept in it after each dequeue"},
        {"input_threads", FLAG_INT, &o->input_threads, "decode/augment threads (0: automatic)"},
        {"num_epochs", FLAG_INT, &o->num_epochs, "stop after this many epochs of --data (0: only --max_steps)"},
        {"skip_corrupt", FLAG_BOOL, &o->skip_corrupt, "count and skip corrupt records instead of stopping"},
        {"seed", FLAG_LONG, &o->seed, "seed of the initial variables and of the input pipeline"},
        {"log_every", FLAG_INT, &o->log_every, "steps between log lines"},
        {"save_every", FLAG_INT, &o->save_every, "steps between checkpoints (one is always written at the end)"},
        {"keep_checkpoints", FLAG_INT, &o->keep_checkpoints, "checkpoints kept in train_dir"},
        {"resume", FLAG_BOOL, &o->resume, "continue from the latest checkpoint in train_dir"},
        {"variable_update", FLAG_STRING, &o->variable_update, "parameter_server (one copy of the variables, updated centrally) or replicated (a copy per tower, gradients all-reduced); see docs/modes.md"},
        {"local_parameter_device", FLAG_STRING, &o->local_parameter_device, "parameter_server: where the variables live, cpu or gpu (gpu needs GPU towers)"},
        {"all_reduce", FLAG_STRING, &o->all_reduce, "replicated: how gradients are averaged: host (ring over host buffers), nccl (needs GPU towers), auto"},
        {"trace", FLAG_STRING, &o->trace, "write a Chrome trace-event JSON timeline of every step to this file (ui.perfetto.dev)"},
    };
    int n = (int)(sizeof table / sizeof table[0]);
    if (flags) memcpy(flags, table, sizeof table);
    return n;
}

int cmd_train(int argc, char **argv) {
    TrainerOptions o;
    trainer_options_defaults(&o);
    Flag flags[64];
    int n_flags = train_flags(&o, flags);
    char *positional[argc > 0 ? argc : 1];
    int n_positional;
    int rc = flags_parse(flags, n_flags, argc, argv, positional, &n_positional);
    if (rc == 1) {
        flags_print_usage("train", "[flags]", flags, n_flags);
        return 0;
    }
    if (rc != 0) return 2;
    if (n_positional > 0) {
        fprintf(stderr, "tower train: unexpected argument '%s' (see --help)\n", positional[0]);
        return 2;
    }
    if (make_dirs(o.train_dir) != 0) {
        fprintf(stderr, "tower train: cannot create --train_dir %s: %s\n", o.train_dir, strerror(errno));
        return 1;
    }

    char err[1024], ts[64];
    Trainer tr;
    if (trainer_open(&tr, &o, err, sizeof err) != 0) {
        fprintf(stderr, "tower train: %s\n", err);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    int exit_code = 0;
    long last_saved = tr.ps->global_step;
    double interval_start = tower_now_sec();
    long interval_steps = 0;
    while (tr.ps->global_step < o.max_steps) {
        float loss;
        int got = trainer_step(&tr, &loss, err, sizeof err);
        if (got == 0) break;
        if (got == -2) {
            trainer_timestamp(ts, sizeof ts);
            fprintf(stderr, "%s: Model diverged with loss = %s at step %ld\n", ts, loss != loss ? "NaN" : "Inf",
                    tr.ps->global_step + 1);
            trainer_close(&tr);
            return 1;
        }
        if (got < 0) {
            fprintf(stderr, "tower train: %s\n", err);
            exit_code = 1;
            break;
        }
        interval_steps++;
        long step = tr.ps->global_step;
        if (o.log_every > 0 && (step % o.log_every == 0 || step == 1)) {
            double now = tower_now_sec();
            double duration = (now - interval_start) / (double)interval_steps;
            trainer_timestamp(ts, sizeof ts);
            printf("%s: step %ld, loss = %.2f (%.1f examples/sec; %.3f sec/batch)\n", ts, step, loss,
                   tr.global_batch / duration, duration / tr.n_towers);
            fflush(stdout);
            interval_start = now;
            interval_steps = 0;
        }
        if (o.save_every > 0 && step % o.save_every == 0) {
            if (trainer_save(&tr, err, sizeof err) != 0) {
                fprintf(stderr, "tower train: checkpoint at step %ld: %s\n", step, err);
                exit_code = 1;
                break;
            }
            last_saved = step;
        }
        if (stop_requested) {
            trainer_timestamp(ts, sizeof ts);
            printf("%s: stop requested by a signal after step %ld\n", ts, step);
            break;
        }
    }
    if (exit_code == 0 && tr.ps->global_step != last_saved) {
        if (trainer_save(&tr, err, sizeof err) != 0) {
            fprintf(stderr, "tower train: final checkpoint: %s\n", err);
            exit_code = 1;
        }
    }
    if (exit_code == 0) {
        PipelineStats st;
        pipeline_stats(tr.pipeline, &st);
        trainer_timestamp(ts, sizeof ts);
        printf("%s: done at step %ld; checkpoint in %s; input pipeline: %.0f examples/sec produced, consumer waited %.1f s",
               ts, tr.ps->global_step, o.train_dir, st.examples_per_sec, st.consumer_wait_sec);
        if (st.corrupt_skipped > 0) printf("; %ld corrupt records skipped", st.corrupt_skipped);
        printf("\n");
    }
    trainer_close(&tr);
    return exit_code;
}
