/* cmd_train.c — `tower train`: flags, the step loop, the log lines,
 * checkpoints on a schedule, on SIGINT/SIGTERM and at the end.
 *
 * Where it sits: cmd/ only wires; the step itself is trainer_step
 * (trainer.h).  Log lines follow TensorFlow's cifar10_multi_gpu_train:
 *   2026-11-21 12:00:00.123456: step 120, loss = 0.52 (4210.3 examples/sec; 0.030 sec/batch)
 * with two deliberate differences: the loss is the mean over the towers (the
 * original logs the last tower's), and the rate is averaged over the steps
 * since the previous line (the original times one step).
 * On a terminal (and without --no_progress) the log lines give way to a live
 * progress line per epoch (cmd/progress.h).  Every --summary_every steps the
 * TensorBoard scalars, and every --histogram_every steps the variables'
 * histograms, go to an events file in --train_dir (io/events.h; the tags are
 * listed in docs/tensorboard.md).
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd/commands.h"
#include "cmd/flags.h"
#include "cmd/progress.h"
#include "cmd/trainer.h"
#include "io/events.h"

static volatile sig_atomic_t stop_requested = 0;

static void on_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}


/* What `tower train` adds around the trainer: summaries and the display. */
typedef struct {
    int summary_every;   /* steps between TensorBoard scalars (0: no events file) */
    int histogram_every; /* steps between variable histograms (0: none) */
    int no_progress;     /* 1: log lines even on a terminal */
} TrainDisplayOptions;

static int train_flags(TrainerOptions *o, TrainDisplayOptions *d, Flag *flags) {
    const Flag table[] = {
        {"model", FLAG_STRING, &o->model, "model to train: mnist or cifar10"},
        {"data", FLAG_STRING, &o->data, "TFRecord files of the training set: comma-separated globs"},
        {"train_dir", FLAG_STRING, &o->train_dir, "directory for checkpoints (model.ckpt-STEP, checkpoint)"},
        {"max_steps", FLAG_LONG, &o->max_steps, "number of steps (global batches) to run"},
        {"batch_size", FLAG_INT, &o->batch_size, "examples per tower per step; the global batch is batch_size x towers"},
        {"num_towers", FLAG_INT, &o->num_towers, "number of towers (0: one per device; CPU: 1)"},
        {"num_gpus", FLAG_INT, &o->num_gpus, "GPU towers: use the first num_gpus visible GPUs"},
        {"gpus", FLAG_STRING, &o->gpus, "GPU towers: the GPUs to use, e.g. 0,2,3 (overrides num_gpus)"},
        {"allow_tf32", FLAG_BOOL, &o->allow_tf32, "GPU towers: allow TF32 tensor-core math (off: results compare with the CPU)"},
        {"deterministic", FLAG_BOOL, &o->deterministic, "GPU towers: only cuDNN algorithms cuDNN calls deterministic, so a run repeats bit for bit (an error when a layer has none)"},
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
        {"summary_every", FLAG_INT, &d->summary_every, "steps between TensorBoard scalars in train_dir/events.out.tfevents.* (0: no events file)"},
        {"histogram_every", FLAG_INT, &d->histogram_every, "steps between TensorBoard histograms of the variables (0: none)"},
        {"no_progress", FLAG_BOOL, &d->no_progress, "print the log lines even on a terminal, instead of the live progress line"},
        {"variable_update", FLAG_STRING, &o->variable_update, "parameter_server (one copy of the variables, updated centrally) or replicated (a copy per tower, gradients all-reduced); see docs/modes.md"},
        {"local_parameter_device", FLAG_STRING, &o->local_parameter_device, "parameter_server: where the variables live, cpu (host memory) or gpu (tower 0's GPU; needs GPU towers)"},
        {"all_reduce", FLAG_STRING, &o->all_reduce, "replicated: how gradients are averaged: host (ring over host buffers), nccl (NCCL over the GPUs; needs GPU towers), auto (nccl on GPU towers when built with NCCL, else host)"},
        {"trace", FLAG_STRING, &o->trace, "write a Chrome trace-event JSON timeline of every step to this file (ui.perfetto.dev)"},
    };
    int n = (int)(sizeof table / sizeof table[0]);
    if (flags) memcpy(flags, table, sizeof table);
    return n;
}

/* Queues and writes one summary event at `step`: the scalars, and the
 * variables' histograms when with_histograms.  0, or -1 with err. */
static int write_summaries(EventWriter *ev, const Trainer *tr, long step, float loss, double examples_per_sec,
                           double steps_per_sec, int with_scalars, int with_histograms, char *err, size_t err_n) {
    char tag[MODEL_VAR_NAME_MAX + 32];
    const float *vars = trainer_variables(tr);
    int rc = 0;
    if (with_scalars) {
        rc |= event_writer_add_scalar(ev, "loss", loss, err, err_n);
        rc |= event_writer_add_scalar(ev, "accuracy", tr->accuracy, err, err_n);
        for (int t = 0; t < tr->n_towers && rc == 0; t++) {
            snprintf(tag, sizeof tag, "tower_%d/loss", t);
            rc |= event_writer_add_scalar(ev, tag, tr->tower_losses[t], err, err_n);
            snprintf(tag, sizeof tag, "tower_%d/accuracy", t);
            rc |= event_writer_add_scalar(ev, tag, tr->tower_accuracy[t], err, err_n);
        }
        rc |= event_writer_add_scalar(ev, "learning_rate", tr->ps->last_lr, err, err_n);
        rc |= event_writer_add_scalar(ev, "examples_per_sec", (float)examples_per_sec, err, err_n);
        rc |= event_writer_add_scalar(ev, "global_step/sec", (float)steps_per_sec, err, err_n);
        for (int i = 0; i < tr->spec.n_vars && rc == 0; i++) {
            const ModelVar *v = &tr->spec.vars[i];
            double sum_sq = 0.0;
            for (size_t k = 0; k < v->n_floats; k++) sum_sq += (double)vars[v->offset + k] * vars[v->offset + k];
            snprintf(tag, sizeof tag, "%s/norm", v->name);
            rc |= event_writer_add_scalar(ev, tag, (float)sqrt(sum_sq), err, err_n);
        }
    }
    for (int i = 0; with_histograms && i < tr->spec.n_vars && rc == 0; i++) {
        const ModelVar *v = &tr->spec.vars[i];
        rc |= event_writer_add_histogram(ev, v->name, vars + v->offset, v->n_floats, err, err_n);
    }
    if (rc != 0) return -1;
    return event_writer_write(ev, step, event_wall_time_now(), err, err_n);
}

/* The progress display's view of the run: which epoch, how far into it. */
typedef struct {
    Progress bar;
    int live;                 /* drawing at all */
    long examples_per_epoch;  /* <= 0: unknown (one open-ended line) */
    long n_epochs;            /* epochs the run will reach (for "epoch e/N") */
    long epoch;               /* 0-based epoch of the current line */
} TrainDisplay;

static void display_start_epoch(TrainDisplay *d, long examples_consumed) {
    char label[PROGRESS_LABEL_MAX];
    if (d->examples_per_epoch <= 0) {
        progress_start(&d->bar, stdout, d->live, "train", "ex", examples_consumed, 0, 0.0);
        return;
    }
    d->epoch = examples_consumed / d->examples_per_epoch;
    snprintf(label, sizeof label, "epoch %ld/%ld", d->epoch + 1, d->n_epochs);
    progress_start(&d->bar, stdout, d->live, label, "ex", examples_consumed % d->examples_per_epoch,
                   d->examples_per_epoch, 0.0);
}

/* After a step: close the epoch's line when the step crossed into the next
 * epoch (and open the next one), else redraw. */
static void display_step(TrainDisplay *d, const Trainer *tr, float loss) {
    if (!d->live) return;
    char post[128];
    snprintf(post, sizeof post, "step %ld, loss %.3f, acc %.3f", tr->ps->global_step, loss, tr->accuracy);
    long consumed = tr->examples_consumed;
    if (d->examples_per_epoch <= 0) {
        progress_update(&d->bar, consumed, post);
        return;
    }
    if (consumed / d->examples_per_epoch > d->epoch) {
        progress_end(&d->bar, d->examples_per_epoch, post);
        display_start_epoch(d, consumed);
        return;
    }
    progress_update(&d->bar, consumed % d->examples_per_epoch, post);
}

/* Ends the current line (keeping it on the screen) before other output. */
static void display_finish(TrainDisplay *d, const Trainer *tr, float loss) {
    if (!d->live) return;
    char post[128];
    snprintf(post, sizeof post, "step %ld, loss %.3f, acc %.3f", tr->ps->global_step, loss, tr->accuracy);
    long consumed = tr->examples_consumed;
    long done = d->examples_per_epoch > 0 ? consumed % d->examples_per_epoch : consumed;
    if (d->bar.drawn) progress_end(&d->bar, done, post);
}

int cmd_train(int argc, char **argv) {
    TrainerOptions o;
    trainer_options_defaults(&o);
    TrainDisplayOptions dopt = {.summary_every = 100, .histogram_every = 1000, .no_progress = 0};
    Flag flags[64];
    int n_flags = train_flags(&o, &dopt, flags);
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
    if (dopt.summary_every < 0 || dopt.histogram_every < 0) {
        fprintf(stderr, "tower train: --summary_every and --histogram_every must be >= 0\n");
        return 2;
    }
    if (cmd_make_dirs(o.train_dir) != 0) {
        fprintf(stderr, "tower train: cannot create --train_dir %s: %s\n", o.train_dir, strerror(errno));
        return 1;
    }

    char err[1024], ts[64];
    Trainer tr;
    if (trainer_open(&tr, &o, err, sizeof err) != 0) {
        fprintf(stderr, "tower train: %s\n", err);
        return 1;
    }
    EventWriter *events = NULL;
    if (dopt.summary_every > 0 || dopt.histogram_every > 0) {
        if (!(events = event_writer_open(o.train_dir, err, sizeof err))) {
            fprintf(stderr, "tower train: %s\n", err);
            trainer_close(&tr, NULL, 0);
            return 1;
        }
    }
    TrainDisplay disp;
    memset(&disp, 0, sizeof disp);
    disp.live = progress_wanted(stdout, dopt.no_progress);
    if (disp.live) {
        disp.examples_per_epoch = tr.examples_per_epoch;
        if (disp.examples_per_epoch <= 0 && tr.n_files > 0) {
            /* Unknown until counted: one pass over the records, CRCs only. */
            int compression = io_compression_parse(o.compression);
            disp.examples_per_epoch = io_count_records((const char *const *)tr.files, tr.n_files,
                                                       compression < 0 ? IO_COMPRESSION_AUTO : compression, err,
                                                       sizeof err);
        }
        if (disp.examples_per_epoch > 0) {
            long total = o.max_steps * (long)tr.global_batch;
            disp.n_epochs = (total + disp.examples_per_epoch - 1) / disp.examples_per_epoch;
            if (o.num_epochs > 0 && o.num_epochs < disp.n_epochs) disp.n_epochs = o.num_epochs;
            if (disp.n_epochs < 1) disp.n_epochs = 1;
        }
        display_start_epoch(&disp, tr.examples_consumed);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    int exit_code = 0;
    long last_saved = tr.ps->global_step, last_scalars = tr.ps->global_step, last_histograms = tr.ps->global_step;
    double interval_start = tower_now_sec(), summary_start = interval_start;
    long interval_steps = 0, summary_steps = 0;
    float loss = 0.0f;
    while (tr.ps->global_step < o.max_steps) {
        int got = trainer_step(&tr, &loss, err, sizeof err);
        if (got == 0) break;
        if (got == -2) {
            display_finish(&disp, &tr, loss);
            trainer_timestamp(ts, sizeof ts);
            fprintf(stderr, "%s: Model diverged with loss = %s at step %ld\n", ts, loss != loss ? "NaN" : "Inf",
                    tr.ps->global_step + 1);
            event_writer_close(events, NULL, 0);
            trainer_close(&tr, NULL, 0);
            return 1;
        }
        if (got < 0) {
            display_finish(&disp, &tr, loss);
            fprintf(stderr, "tower train: %s\n", err);
            exit_code = 1;
            break;
        }
        interval_steps++;
        summary_steps++;
        long step = tr.ps->global_step;
        display_step(&disp, &tr, loss);
        if (!disp.live && o.log_every > 0 && (step % o.log_every == 0 || step == 1)) {
            double now = tower_now_sec();
            double duration = (now - interval_start) / (double)interval_steps;
            trainer_timestamp(ts, sizeof ts);
            printf("%s: step %ld, loss = %.2f (%.1f examples/sec; %.3f sec/batch)\n", ts, step, loss,
                   tr.global_batch / duration, duration / tr.n_towers);
            fflush(stdout);
            interval_start = now;
            interval_steps = 0;
        }
        int scalars_due = dopt.summary_every > 0 && step % dopt.summary_every == 0;
        int histograms_due = dopt.histogram_every > 0 && step % dopt.histogram_every == 0;
        if (events && (scalars_due || histograms_due)) {
            double now = tower_now_sec(), secs = now - summary_start > 1e-9 ? now - summary_start : 1e-9;
            if (write_summaries(events, &tr, step, loss, summary_steps * (double)tr.global_batch / secs,
                                summary_steps / secs, scalars_due, histograms_due, err, sizeof err) != 0) {
                display_finish(&disp, &tr, loss);
                fprintf(stderr, "tower train: summaries at step %ld: %s\n", step, err);
                exit_code = 1;
                break;
            }
            if (scalars_due) {
                summary_start = now;
                summary_steps = 0;
                last_scalars = step;
            }
            if (histograms_due) last_histograms = step;
        }
        if (o.save_every > 0 && step % o.save_every == 0) {
            if (trainer_save(&tr, err, sizeof err) != 0) {
                display_finish(&disp, &tr, loss);
                fprintf(stderr, "tower train: checkpoint at step %ld: %s\n", step, err);
                exit_code = 1;
                break;
            }
            last_saved = step;
        }
        if (stop_requested) {
            display_finish(&disp, &tr, loss);
            trainer_timestamp(ts, sizeof ts);
            printf("%s: stop requested by a signal after step %ld\n", ts, step);
            break;
        }
    }
    display_finish(&disp, &tr, loss);
    /* The last step's scalars and histograms, where the schedule did not just write them. */
    long final_step = tr.ps->global_step;
    int final_scalars = dopt.summary_every > 0 && final_step != last_scalars && summary_steps > 0;
    int final_histograms = dopt.histogram_every > 0 && final_step != last_histograms && final_step > 0;
    if (exit_code == 0 && events && (final_scalars || final_histograms)) {
        double secs = tower_now_sec() - summary_start;
        if (secs < 1e-9) secs = 1e-9;
        if (write_summaries(events, &tr, final_step, loss, summary_steps * (double)tr.global_batch / secs,
                            summary_steps / secs, final_scalars, final_histograms, err, sizeof err) != 0) {
            fprintf(stderr, "tower train: summaries at step %ld: %s\n", final_step, err);
            exit_code = 1;
        }
    }
    if (event_writer_close(events, err, sizeof err) != 0 && exit_code == 0) {
        fprintf(stderr, "tower train: %s\n", err);
        exit_code = 1;
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
    if (trainer_close(&tr, err, sizeof err) != 0) {
        fprintf(stderr, "tower train: %s\n", err);
        exit_code = 1;
    }
    return exit_code;
}
