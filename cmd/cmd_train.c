/* cmd_train.c — `tower train`: flags, the step loop, the log lines,
 * checkpoints on a schedule, on SIGINT/SIGTERM/SIGHUP, when standard output is lost, and at the end.
 *
 * Where it sits: cmd/ only parses, wires and prints; the step itself is
 * train/'s (trainer_next_batch, trainer_step_batch in train/trainer.h), and
 * the loop reads top to bottom: next batch, step, log, checkpoint.
 * The run holds train_dir's lock (trainer_lock_dir) from start to exit.  It
 * ends with a checkpoint and exit 0 (also when a signal comes after its last
 * step); on SIGINT/SIGTERM/SIGHUP with a checkpoint and exit 128 + the signal;
 * when its log lines cannot be written (a closed pipe: SIGPIPE is ignored;
 * a full disk) with a checkpoint and exit 1; on an input error with the last
 * step's variables saved and exit 1; on divergence with nothing saved and
 * exit 1.  Log lines follow TensorFlow's cifar10_multi_gpu_train:
 *   2026-11-21 12:00:00.123456: step 120, loss = 0.52 (4210.3 examples/sec; 0.030 sec/batch)
 * with two deliberate differences: the loss is the mean over the towers (the
 * original logs the last tower's), and the rate is averaged over the steps
 * since the previous line (the original times one step).
 * On a terminal (and without --no_progress) the log lines give way to a live
 * progress line for the run, the epoch in its label (cmd/progress.h).  Every --summary_every steps the
 * TensorBoard scalars, and every --histogram_every steps the variables'
 * histograms, go to an events file in --train_dir (io/events.h; the tags are
 * listed in docs/tensorboard.md).
 * Under `mpirun -np R` (base/ranks.h; docs/hosts.md) every rank runs this
 * loop in step with the others; rank 0 alone prints, writes summaries, the
 * class list and checkpoints (every rank calls trainer_save at the same step,
 * where ps_mpi gathers its shards; the other ranks' stdout goes to /dev/null,
 * their stderr stays); a stop by signal is agreed by all ranks, and a rank
 * that ends with an error ends the job (MPI_Abort), so none waits forever.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/ranks.h"
#include "cmd/commands.h"
#include "base/file.h"
#include "base/flags.h"
#include "cmd/progress.h"
#include "base/escape.h"
#include "model/graph.h"
#include "train/trainer.h"
#include "io/events.h"
#include "io/imagefolder.h"
#include "io/pipeline.h"

static volatile sig_atomic_t stop_signal = 0; /* the SIGINT, SIGTERM or SIGHUP received, or 0 */

/* The first SIGINT, SIGTERM or SIGHUP asks for a stop after the step in flight (its checkpoint, then 128 + the
 * signal); a second one stops at once, for a step too long to wait for (a large --accum_steps): one line, no
 * checkpoint of that step (the latest stays; the kernel drops the train_dir's lock), 128 + that signal. */
static void on_signal(int sig) {
    if (stop_signal) {
        static const char line[] = "tower train: a second stop signal: ending now, without saving the step in "
                                   "flight (the latest checkpoint stays)\n";
        const ssize_t ignored = write(STDERR_FILENO, line, sizeof line - 1);
        (void)ignored;
        _exit(128 + sig);
    }
    stop_signal = sig;
}

static int stdout_errno = 0; /* why the last failed write of a log line failed (EPIPE: a closed pipe), or 0 */



/* The upper ends of the flags' ranges (train_flags): far above any sane run, low enough
 * that products of them (global batch, shuffle capacity) cannot overflow. */
#define TRAIN_MAX_BATCH (1 << 20)            /* examples per tower */
#define TRAIN_MAX_CLASSES (1 << 16)
#define TRAIN_MAX_SHUFFLE (1L << 30)          /* --min_after_dequeue */
#define TRAIN_MAX_INPUT_THREADS PIPELINE_MAX_WORKERS

/* What `tower train` adds around the trainer: summaries and the display. */
typedef struct {
    int summary_every;   /* steps between TensorBoard scalars (0: none; no events file when histogram_every is 0 too) */
    int histogram_every; /* steps between variable histograms (0: none) */
    int no_progress;     /* 1: log lines even on a terminal */
    float width_multiplier; /* --width_multiplier, into TrainerOptions.model_opts (cmd_model_options) */
    const char *head;       /* --head keras | seed, likewise */
    int fc_width;           /* --fc_width (vgg11, vgg16), likewise */
} TrainDisplayOptions;

static int train_flags(TrainerOptions *o, TrainDisplayOptions *d, Flag *flags) {
    const Flag table[] = {
        {"model", FLAG_STRING, &o->model, cmd_model_help("model to train")},
        {"width_multiplier", FLAG_FLOAT, &d->width_multiplier, "mobilenet_v2: Keras's alpha, the width of every layer (refused with another model)", FLAG_RANGE(0, 16, "(]", NULL)},
        {"head", FLAG_STRING, &d->head, "mobilenet_v2: keras (global average pooling, predictions) or seed (pooling, dense 512 relu, dense_1)"},
        {"fc_width", FLAG_INT, &d->fc_width, "vgg11, vgg16: units of fc1 and fc2 (Keras's 4096; e.g. 512 for a 32x32 VGG16 of 15 M variables)", FLAG_RANGE(1, 65536, "[]", NULL)},
        {"batch_norm", FLAG_STRING, &o->batch_norm, "batch norm across towers: tower (each tower normalises with its shard's statistics; the moving statistics take the towers' mean once per step) or sync (SyncBatchNormalization: every tower normalises with the global batch's statistics, summed across the towers in every layer, and across the ranks under mpirun); docs/models.md"},
        {"data", FLAG_STRING, &o->data, "TFRecord files of the training set: comma-separated globs; or an image folder DIR (DIR/<class>/*.png|jpg|jpeg, decoded in the input pipeline)"},
        {"train_dir", FLAG_STRING, &o->train_dir, "directory for checkpoints (model.ckpt-STEP, checkpoint); one run at a time (TRAIN_DIR/.lock)"},
        {"max_steps", FLAG_LONG, &o->max_steps, "number of steps (global batches) to run (0: only write the initial variables, model.ckpt-0)", FLAG_RANGE(0, INFINITY, "[)", NULL)},
        {"batch_size", FLAG_INT, &o->batch_size, "examples per tower per step (per micro-batch with --accum_steps); the global batch is batch_size x towers x accum_steps", FLAG_RANGE(1, TRAIN_MAX_BATCH, "[]", NULL)},
        {"num_towers", FLAG_INT, &o->num_towers, "number of towers (0: one per device; CPU: 1)", FLAG_RANGE(0, TOWER_MAX_TOWERS, "[]", "0: one per device")},
        {"num_gpus", FLAG_INT, &o->num_gpus, "GPU towers: use the first num_gpus visible GPUs", FLAG_RANGE(1, TOWER_MAX_TOWERS, "[]", NULL)},
        {"gpus", FLAG_STRING, &o->gpus, "GPU towers: the GPUs to use, e.g. 0,2,3 (overrides num_gpus)"},
        {"allow_tf32", FLAG_BOOL, &o->allow_tf32, "GPU towers: allow TF32 tensor-core math (off: results compare with the CPU)"},
        {"deterministic", FLAG_BOOL, &o->deterministic, "GPU towers: only deterministic convolution algorithms (cuDNN's that cuDNN calls so; Tower's GEMMs are), so a run repeats bit for bit (an error when a layer has none)"},
        {"device", FLAG_STRING, &o->device, "tower device: cpu, gpu or auto (GPU towers when a GPU is usable)"},
        {"shard_sizes", FLAG_STRING, &o->shard_sizes, "uneven split of the global batch, e.g. 80,48 (overrides batch_size)"},
        {"accum_steps", FLAG_INT, &o->accum_steps, "gradient accumulation: each tower runs this many micro-batches of batch_size (or its shard_sizes entry) per step, forward and backward, and takes the mean of their gradients; batch norm's moving statistics take one update per micro-batch; a step consumes accum_steps times the examples, activations stay sized for one micro-batch (docs/modes.md)", FLAG_RANGE(1, TRAIN_MAX_BATCH, "[]", NULL)},
        {"loss_scaling", FLAG_STRING, &o->loss_scaling, "how the towers' gradients combine: tower_mean (the mean of the towers' shard means) or global_batch (MirroredStrategy's: the per-example loss summed over the global batch and divided by its size; equal to tower_mean when the shards are equal); docs/modes.md"},
        {"log_device_placement", FLAG_BOOL, &o->log_device_placement, "print where the variables and each tower live"},
        {"optimizer", FLAG_STRING, &o->optimizer, "momentum (TensorFlow's MomentumOptimizer), sgd (plain gradient descent), adam (TF1's AdamOptimizer), rmsprop (TF1's RMSPropOptimizer) or adamw (Keras's AdamW); docs/ps.md"},
        {"learning_rate", FLAG_FLOAT, &o->learning_rate, "initial learning rate (unset, shown as nan: the optimizer's default, 0.01 for momentum and sgd, 0.001 for adam, rmsprop and adamw)", FLAG_RANGE(0, INFINITY, "()", NULL)},
        {"momentum", FLAG_FLOAT, &o->momentum, "momentum of the momentum optimizer", FLAG_RANGE(0, 1, "[)", NULL)},
        {"nesterov", FLAG_BOOL, &o->nesterov, "Nesterov momentum"},
        {"adam_beta1", FLAG_DOUBLE, &o->adam_beta1, "adam, adamw: decay of the first moments", FLAG_RANGE(0, 1, "[)", NULL)},
        {"adam_beta2", FLAG_DOUBLE, &o->adam_beta2, "adam, adamw: decay of the second moments", FLAG_RANGE(0, 1, "[)", NULL)},
        {"adam_epsilon", FLAG_FLOAT, &o->adam_epsilon, "adam, adamw: epsilon (unset, shown as nan: 1e-8 for adam as TF1, 1e-7 for adamw as Keras)", FLAG_RANGE(0, INFINITY, "()", NULL)},
        {"weight_decay", FLAG_FLOAT, &o->weight_decay, "adamw: decoupled weight decay, var -= var * weight_decay * lr before each step", FLAG_RANGE(0, INFINITY, "[)", NULL)},
        {"rmsprop_decay", FLAG_FLOAT, &o->rmsprop_decay, "rmsprop: decay (rho) of the mean squares", FLAG_RANGE(0, 1, "[)", NULL)},
        {"rmsprop_momentum", FLAG_FLOAT, &o->rmsprop_momentum, "rmsprop: momentum", FLAG_RANGE(0, 1, "[)", NULL)},
        {"rmsprop_epsilon", FLAG_FLOAT, &o->rmsprop_epsilon, "rmsprop: epsilon under the square root", FLAG_RANGE(0, INFINITY, "()", NULL)},
        {"rmsprop_centered", FLAG_BOOL, &o->rmsprop_centered, "rmsprop: centered (normalise by the estimated variance)"},
        {"lr_schedule", FLAG_STRING, &o->lr_schedule, "exponential (tf.train.exponential_decay, staircase: --lr_decay_factor every --num_epochs_per_decay; the tutorial's), piecewise (tf_cnn_benchmarks' --piecewise_learning_rate_schedule) or cosine (Keras's CosineDecay: --cosine_decay_epochs, --cosine_alpha); docs/ps.md"},
        {"lr_decay_factor", FLAG_FLOAT, &o->lr_decay_factor, "exponential: learning rate decay factor (staircase exponential decay)", FLAG_RANGE(0, 1, "(]", NULL)},
        {"num_epochs_per_decay", FLAG_DOUBLE, &o->num_epochs_per_decay, "exponential: epochs between decays (0: constant learning rate)", FLAG_RANGE(0, INFINITY, "[)", "0: constant learning rate")},
        {"piecewise_learning_rate_schedule", FLAG_STRING, &o->piecewise_lr, "piecewise: 'RATE;EPOCH;RATE;EPOCH;RATE...', each rate from its epoch on, e.g. '0.1;80;0.01;120;0.001' (tf_cnn_benchmarks' flag; the first rate replaces --learning_rate)"},
        {"cosine_decay_epochs", FLAG_DOUBLE, &o->cosine_decay_epochs, "cosine: epochs from the rate down to --cosine_alpha times it, after the warmup (0: to --max_steps)", FLAG_RANGE(0, INFINITY, "[)", "0: to --max_steps")},
        {"cosine_alpha", FLAG_DOUBLE, &o->cosine_alpha, "cosine: the last rate, a fraction of --learning_rate (Keras's alpha)", FLAG_RANGE(0, 1, "[]", NULL)},
        {"num_learning_rate_warmup_epochs", FLAG_DOUBLE, &o->warmup_epochs, "every schedule: epochs of linear warmup from 0 to the schedule's first rate (tf_cnn_benchmarks' flag; cosine starts after it, as Keras's warmup_steps)", FLAG_RANGE(0, INFINITY, "[)", "0: none")},
        {"num_examples_per_epoch", FLAG_LONG, &o->num_examples_per_epoch, "examples in one epoch (0: count the records of --data)", FLAG_RANGE(0, INFINITY, "[)", "0: count the records")},
        {"moving_average_decay", FLAG_FLOAT, &o->moving_average_decay, "decay of the variables' moving averages (0: none)", FLAG_RANGE(0, 1, "[)", "0: none")},
        {"num_classes", FLAG_INT, &o->num_classes, "number of classes; labels must lie in [0, num_classes)", FLAG_RANGE(1, TRAIN_MAX_CLASSES, "[]", NULL)},
        {"image_size", FLAG_INT, &o->image_size, "cifar10: random crop to image_size x image_size (0: no crop); an image folder or encoded TFRecord images: the size its images are resized to (cropped as --resize_mode says)", FLAG_RANGE(0, CMD_MAX_IMAGE_SIZE, "[]", "0: no crop")},
        {"resize_mode", FLAG_STRING, &o->resize_mode, "an image folder or encoded TFRecord images: resize (both sides to image_size), center_crop (shorter side to image_size, then the central square) or random_crop (tf_cnn_benchmarks' training crop, resized to image_size, flipped half the time; drawn anew each epoch)"},
        {"central_fraction", FLAG_FLOAT, &o->central_fraction, "an image folder or encoded TFRecord images, --resize_mode center_crop: " CMD_CENTRAL_FRACTION_HELP("size"), FLAG_RANGE(0, 1, "(]", NULL)},
        {"max_image_pixels", FLAG_INT, &o->max_image_pixels, CMD_MAX_IMAGE_PIXELS_HELP, FLAG_RANGE(1, IMAGEFOLDER_MAX_PIXELS, "[]", NULL)},
        {"labels", FLAG_STRING, &o->labels, "an image folder: the class list, one name a line (default: the sorted class folders); a class folder not in it is refused"},
        {"image_key", FLAG_STRING, &o->image_key, "Example feature holding the image: raw pixels (bytes or floats), or an encoded JPEG or PNG (ImageNet's image/encoded), decoded and resized to --image_size"},
        {"label_key", FLAG_STRING, &o->label_key, "Example feature holding the label"},
        {"compression", FLAG_STRING, &o->compression, "TFRecord compression: auto, none, gzip or zlib"},
        {"min_after_dequeue", FLAG_LONG, &o->min_after_dequeue, "shuffle buffer: examples kept in it after each dequeue", FLAG_RANGE(0, TRAIN_MAX_SHUFFLE, "[]", NULL)},
        {"input_threads", FLAG_INT, &o->input_threads, "decode/augment threads (0: automatic)", FLAG_RANGE(0, TRAIN_MAX_INPUT_THREADS, "[]", "0: automatic")},
        {"num_epochs", FLAG_INT, &o->num_epochs, "stop after this many epochs of --data (0: only --max_steps)", FLAG_RANGE(0, INFINITY, "[)", "0: only --max_steps")},
        {"skip_corrupt", FLAG_BOOL, &o->skip_corrupt, "count and skip corrupt records instead of stopping"},
        {"max_corrupt_fraction", FLAG_DOUBLE, &o->max_corrupt_fraction, "with --skip_corrupt, stop once bad records made more than this fraction of the input's bytes unreadable (1: no limit)", FLAG_RANGE(0, 1, "[]", NULL)},
        {"seed", FLAG_LONG, &o->seed, "seed of the initial variables and of the input pipeline"},
        {"log_every", FLAG_INT, &o->log_every, "steps between log lines", FLAG_RANGE(0, INFINITY, "[)", "0: no log lines")},
        {"save_every", FLAG_INT, &o->save_every, "steps between checkpoints (one is always written at the end)", FLAG_RANGE(0, INFINITY, "[)", "0: only at the end")},
        {"keep_checkpoints", FLAG_INT, &o->keep_checkpoints, "checkpoints kept in train_dir (0: all)", FLAG_RANGE(0, CKPT_MAX_KEEP, "[]", "0: keep all")},
        {"resume", FLAG_BOOL, &o->resume, "continue from the latest checkpoint in train_dir (none there: start from step 0, and say so)"},
        {"summary_every", FLAG_INT, &d->summary_every, "steps between TensorBoard scalars in train_dir/events.out.tfevents.* (0: none; with --histogram_every 0 too, no events file)", FLAG_RANGE(0, INFINITY, "[)", "0: none")},
        {"histogram_every", FLAG_INT, &d->histogram_every, "steps between TensorBoard histograms of the variables (0: none)", FLAG_RANGE(0, INFINITY, "[)", "0: none")},
        {"no_progress", FLAG_BOOL, &d->no_progress, "print the log lines even on a terminal, instead of the live progress line"},
        {"variable_update", FLAG_STRING, &o->variable_update, "parameter_server (one copy of the variables, updated centrally) or replicated (a copy per tower, gradients all-reduced); see docs/modes.md"},
        {"local_parameter_device", FLAG_STRING, &o->local_parameter_device, "parameter_server: where the variables live, cpu (host memory), gpu (tower 0's GPU; needs GPU towers) or mpi (in shards on the ranks of mpirun -np R, docs/hosts.md; cpu becomes mpi under mpirun with several ranks)"},
        {"ps_ranks", FLAG_INT, &o->ps_ranks, "parameter_server across ranks: the first ps_ranks ranks hold the variables' shards, each also a worker (0: every rank), or only a server with --ps_dedicated", FLAG_RANGE(0, INFINITY, "[)", "0: every rank")},
        {"ps_dedicated", FLAG_BOOL, &o->ps_dedicated, "parameter_server across ranks, synchronous or not (--sync_replicas): the first --ps_ranks N ranks are parameter servers only (TensorFlow's ps tasks: no towers, no input), the other R - N ranks the workers; the global batch is (R - N) x towers x batch_size; docs/hosts.md"},
        {"ps_placement", FLAG_STRING, &o->ps_placement, "parameter_server across ranks: how variables go to shards, greedy (by bytes, to the least loaded so far: TensorFlow's GreedyLoadBalancingStrategy) or round_robin"},
        {"input_split", FLAG_STRING, &o->input_split, "across ranks (mpirun -np R): none (every rank reads the whole stream and takes its shards of each global batch: the job equals one process), files (rank r reads files r, r+R, ...) or records (rank r reads the records r, r+R, ... of each epoch's order), so each rank reads 1/R of the data; TFRecord data only; docs/hosts.md"},
        {"checkpoint_writers", FLAG_STRING, &o->checkpoint_writers, "parameter_server across ranks: who writes a checkpoint, owners (each parameter-server rank its shard's file, rank 0 the manifest and the index after all of them; every rank needs the same train_dir) or rank0 (rank 0 gathers the shards and writes one file)"},
        {"all_reduce", FLAG_STRING, &o->all_reduce, "replicated: how gradients are averaged: host (ring over host buffers), nccl (NCCL over the GPUs; needs GPU towers; under mpirun with several ranks one communicator over every rank's GPUs), nccl_mpi (that across-ranks form by name), mpi (gathered across the ranks of mpirun -np R and summed in rank order: the job equals one process, docs/hosts.md), mpi_allreduce (across ranks by MPI_Allreduce: less traffic, the library's summation order), auto (under mpirun with several ranks mpi, else nccl on GPU towers when built with NCCL, else host)"},
        {"sync_replicas", FLAG_BOOL, &o->sync_replicas, "parameter_server across ranks: true, every step averages every worker's gradient; false, each worker's gradient is applied on arrival (asynchronous, docs/hosts.md; needs several ranks)"},
        {"max_staleness", FLAG_INT, &o->max_staleness, "--sync_replicas false: a worker starts step t only once every worker pushed step t - S - 1 (0: lockstep)", FLAG_RANGE(0, INFINITY, "[)", "steps a worker may run ahead")},
        {"trace", FLAG_STRING, &o->trace, "write a Chrome trace-event JSON timeline of every step to this file (ui.perfetto.dev)"},
    };
    int n = (int)(sizeof table / sizeof table[0]);
    if (flags) memcpy(flags, table, sizeof table);
    return n;
}

/* The next word of a space-separated list ("momentum nesterov"): its start, its length in *n; NULL at the end.
 * *p moves past it. */
static const char *list_next(const char **p, size_t *n) {
    *p += strspn(*p, " ");
    if (!**p) return NULL;
    const char *w = *p;
    *n = strcspn(w, " ");
    *p = w + *n;
    return w;
}

/* 1 when the space-separated list holds word. */
static int list_has(const char *list, const char *word, size_t word_n) {
    size_t n;
    for (const char *w; (w = list_next(&list, &n));)
        if (n == word_n && !strncmp(w, word, n)) return 1;
    return 0;
}

/* A flag of another optimizer than --optimizer's (the entries' flags, ps/optimizer.c), or of another learning-rate
 * schedule than --lr_schedule's, given on the command line: refused, not ignored.  The values alone cannot tell
 * (--momentum 0.9 is the default), so given is flags_parse_given's.  0, or -1 after one line on stderr. */
static int check_given_options(const TrainerOptions *o, const Flag *flags, int n_flags, const unsigned char *given) {
    const OptimizerI *run = NULL;
    for (int k = 0; k < OPT_N_KINDS; k++)
        if (!strcmp(optimizer_i((OptimizerKind)k)->name, o->optimizer)) run = optimizer_i((OptimizerKind)k);
    for (int k = 0; run && k < OPT_N_KINDS; k++) {
        const char *list = optimizer_i((OptimizerKind)k)->flags;
        size_t n;
        for (const char *p; (p = list_next(&list, &n));) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)n, p);
            if (!flags_was_given(flags, n_flags, given, name) || list_has(run->flags, p, n)) continue;
            char owners[256] = "";
            for (int j = 0; j < OPT_N_KINDS; j++)
                if (list_has(optimizer_i((OptimizerKind)j)->flags, p, n))
                    snprintf(owners + strlen(owners), sizeof owners - strlen(owners), "%s%s", owners[0] ? ", " : "",
                             optimizer_i((OptimizerKind)j)->name);
            char own[256] = ""; /* this run's: "--momentum, --nesterov" */
            const char *run_list = run->flags;
            size_t m;
            for (const char *q; (q = list_next(&run_list, &m));)
                snprintf(own + strlen(own), sizeof own - strlen(own), "%s--%.*s", own[0] ? ", " : "", (int)m, q);
            cmd_errorf("tower train: --%s applies to --optimizer %s (this run: --optimizer %s, %s%s)\n", name, owners,
                       o->optimizer, own[0] ? "whose options are " : "which has none", own);
            return -1;
        }
    }
    /* The model options a network reads (its table entry's opts_used): another network's given is refused. */
    static const struct { const char *flag; unsigned bit; } model_flags[] = {
        {"width_multiplier", MODEL_OPT_WIDTH}, {"head", MODEL_OPT_HEAD}, {"fc_width", MODEL_OPT_FC_WIDTH}};
    const NetInfo *net = model_net_find(o->model);
    for (size_t f = 0; net && f < sizeof model_flags / sizeof model_flags[0]; f++) {
        if (!flags_was_given(flags, n_flags, given, model_flags[f].flag) || (net->opts_used & model_flags[f].bit))
            continue;
        char users[256] = "";
        for (int k = 0; k < MODEL_N_KINDS; k++)
            if (model_nets[k].opts_used & model_flags[f].bit)
                snprintf(users + strlen(users), sizeof users - strlen(users), "%s%s", users[0] ? ", " : "",
                         model_nets[k].name);
        cmd_errorf("tower train: --%s applies to --model %s (this run: --model %s)\n", model_flags[f].flag, users,
                   o->model);
        return -1;
    }
    if (flags_was_given(flags, n_flags, given, "lr_decay_factor")) {
        if (strcmp(o->lr_schedule, "exponential")) {
            cmd_errorf("tower train: --lr_decay_factor applies to --lr_schedule exponential (this run: --lr_schedule "
                       "%s)\n", o->lr_schedule);
            return -1;
        }
        if (!(o->num_epochs_per_decay > 0)) {
            cmd_errorf("tower train: --lr_decay_factor needs --num_epochs_per_decay (how often the rate is "
                       "multiplied by it); without, the rate stays --learning_rate\n");
            return -1;
        }
    }
    return 0;
}

/* Every flag's value against its choices and the other flags (docs/cli.md;
 * the numbers' ranges are their table entries', checked by flags_parse),
 * before any work: 0, or -1 after one line on stderr naming the flag (exit
 * 2).  What depends on the machine or the data (GPUs, files, image sizes) is
 * left to trainer_open. */
static int train_check_flags(const TrainerOptions *o) {
    const char *const *models = cmd_model_names();
    static const char *const devices[] = {"cpu", "gpu", "auto", NULL};
    const char *optimizers[OPT_N_KINDS + 1] = {NULL}; /* the optimizer table's names */
    for (int k = 0; k < OPT_N_KINDS; k++) optimizers[k] = optimizer_i((OptimizerKind)k)->name;
    static const char *const compressions[] = {"auto", "none", "gzip", "zlib", NULL};
    static const char *const resize_modes[] = {"resize", "center_crop", "random_crop", NULL};
    static const char *const loss_scalings[] = {"tower_mean", "global_batch", NULL};
    static const char *const ps_placements[] = {"greedy", "round_robin", NULL};
    static const char *const checkpoint_writers[] = {"owners", "rank0", NULL};
    static const char *const input_splits[] = {"none", "files", "records", NULL};
    const char *c = "train";
    char err[512];
    TrainerMode mode;
    if (trainer_mode_from_flags(o->variable_update, o->local_parameter_device, o->all_reduce, &mode, err,
                                sizeof err) != 0) {
        cmd_errorf("tower train: %s\n", err);
        return -1;
    }
    if (cmd_check_central_fraction(c, o->central_fraction, o->resize_mode) != 0) return -1;
    if (o->num_classes == 1) { /* the softmax of one logit is 1 whatever it is: nothing to learn */
        cmd_errorf("tower train: --num_classes 1: a softmax over one class has loss 0 and no gradient whatever the "
                   "data (a two-class task is --num_classes 2)\n");
        return -1;
    }
    /* The betas are kept as typed (Keras's 1 - beta of Python floats); Adam's powers and TF1's 1 - beta are float32's,
     * where a beta that rounds to 1 stops the moment or the step. */
    const double betas[2] = {o->adam_beta1, o->adam_beta2};
    for (int k = 0; k < 2; k++) {
        if ((float)betas[k] >= 1.0f) {
            char typed[32];
            cmd_errorf("tower train: --adam_beta%d %s: rounds to 1 in float32 (expected a number in [0, 1))\n", k + 1,
                       flags_double_str(betas[k], typed, sizeof typed));
            return -1;
        }
    }
    if (!strcmp(o->optimizer, "rmsprop") && o->rmsprop_centered && o->rmsprop_decay == 0.0f) {
        /* ms = g^2 and mg = g: ms - mg^2 is 0 and the step divides by sqrt(epsilon) alone (TensorFlow's formula) */
        cmd_errorf("tower train: --rmsprop_centered with --rmsprop_decay 0: the centered second moment ms - mg^2 is 0 "
                   "every step, so each update is the gradient over sqrt(--rmsprop_epsilon) and diverges (give a "
                   "decay, TensorFlow's 0.9)\n");
        return -1;
    }
    /* The flags alone (exit 2); one rank is the launch's, refused by trainer_open with the same words (exit 1, as
     * --ps_dedicated --ps_ranks 1 of one rank). */
    if (!o->sync_replicas && strcmp(o->variable_update, "parameter_server") != 0) {
        cmd_errorf("tower train: --sync_replicas false: asynchronous updates need --variable_update "
                "parameter_server across the ranks of mpirun -np R (R > 1); this run is --variable_update %s on %d "
                "rank(s)\n", o->variable_update, ranks_size());
        return -1;
    }
    if (cmd_check_choice(c, "model", o->model, models) || cmd_check_choice(c, "device", o->device, devices) ||
        cmd_check_choice(c, "optimizer", o->optimizer, optimizers) ||
        cmd_check_choice(c, "compression", o->compression, compressions) ||
        cmd_check_choice(c, "resize_mode", o->resize_mode, resize_modes) ||
        cmd_check_choice(c, "ps_placement", o->ps_placement, ps_placements) ||
        cmd_check_choice(c, "checkpoint_writers", o->checkpoint_writers, checkpoint_writers) ||
        cmd_check_choice(c, "input_split", o->input_split, input_splits) ||
        cmd_check_nonempty(c, "data", o->data, "list of TFRecord files or globs") ||
        cmd_check_data(c, "data", o->data) ||
        cmd_check_nonempty(c, "train_dir", o->train_dir, "directory") ||
        cmd_check_nonempty(c, "image_key", o->image_key, "feature key") ||
        cmd_check_nonempty(c, "label_key", o->label_key, "feature key") ||
        cmd_check_choice(c, "loss_scaling", o->loss_scaling, loss_scalings))
        return -1;
    if (trainer_check_batch_norm(o->batch_norm, err, sizeof err) != 0 ||
        trainer_check_lr_schedule(o, err, sizeof err) != 0) {
        cmd_errorf("tower train: %s\n", err);
        return -1;
    }
    /* The lists' syntax; how many entries they need is known once the towers are (trainer_open). */
    long largest_shard = o->shard_sizes[0] ? 0 : o->batch_size;
    for (const char *p = o->shard_sizes; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > TRAIN_MAX_BATCH || (*end && *end != ',') || (*end == ',' && !end[1])) {
            cmd_errorf("tower train: --shard_sizes '%s': expected positive sizes (at most %d) separated by commas, "
                    "one per tower, e.g. 80,48\n", o->shard_sizes, TRAIN_MAX_BATCH);
            return -1;
        }
        if (v > largest_shard) largest_shard = v;
        p = *end ? end + 1 : end;
    }
    /* A tower's step takes accum_steps micro-batches: its shard must stay within a tower's most. */
    if (largest_shard * o->accum_steps > TRAIN_MAX_BATCH) {
        cmd_errorf("tower train: --accum_steps %d: %d micro-batches of %ld examples make a tower's step %ld "
                "examples, at most %d (lower --accum_steps or %s)\n", o->accum_steps, o->accum_steps, largest_shard,
                largest_shard * o->accum_steps, TRAIN_MAX_BATCH, o->shard_sizes[0] ? "--shard_sizes" : "--batch_size");
        return -1;
    }
    for (const char *p = o->gpus; *p;) {
        char *end;
        long g = strtol(p, &end, 10);
        if (end == p || g < 0 || g >= TOWER_MAX_TOWERS || (*end && *end != ',') || (*end == ',' && !end[1])) {
            cmd_errorf("tower train: --gpus '%s': expected GPU numbers separated by commas, e.g. 0,2,3\n", o->gpus);
            return -1;
        }
        p = *end ? end + 1 : end;
    }
    return 0;
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

/* The progress display's view of the run: one line from the run's start to
 * its end (--max_steps or --num_epochs, whichever ends it), the epoch in the
 * label. */
typedef struct {
    Progress bar;
    int live;                 /* drawing at all */
    long examples_per_epoch;  /* <= 0: unknown (no epoch in the label) */
    long run_examples;        /* examples consumed when the run ends (progress_run_total) */
    long n_epochs;            /* epochs the run reaches (for "epoch e/N") */
    long epoch;               /* 0-based epoch shown in the label */
} TrainDisplay;

static void display_label(TrainDisplay *d, long examples_consumed, char *label, size_t label_n) {
    if (d->examples_per_epoch <= 0) {
        snprintf(label, label_n, "train");
        return;
    }
    d->epoch = examples_consumed / d->examples_per_epoch;
    if (d->epoch >= d->n_epochs) d->epoch = d->n_epochs - 1; /* the run ends on an epoch's last example */
    snprintf(label, label_n, "epoch %ld/%ld", d->epoch + 1, d->n_epochs);
}

static void display_start(TrainDisplay *d, long examples_consumed) {
    char label[PROGRESS_LABEL_MAX];
    display_label(d, examples_consumed, label, sizeof label);
    progress_start(&d->bar, stdout, d->live, label, "ex", examples_consumed, d->run_examples, 0.0);
}

/* The pipeline's warnings (reader thread): the progress line is erased first. */
static void display_warn(void *ctx, const char *line) {
    TrainDisplay *d = ctx;
    progress_warn(d && d->live ? &d->bar : NULL, stderr, line);
}

/* After a step: relabel when the step crossed into the next epoch, redraw. */
static void display_step(TrainDisplay *d, const Trainer *tr, float loss) {
    if (!d->live) return;
    char post[128];
    snprintf(post, sizeof post, "step %ld, loss %.3f, acc %.3f", tr->ps->global_step, loss, tr->accuracy);
    long consumed = tr->examples_consumed;
    if (d->examples_per_epoch > 0 && consumed / d->examples_per_epoch > d->epoch && d->epoch + 1 < d->n_epochs) {
        char label[PROGRESS_LABEL_MAX];
        display_label(d, consumed, label, sizeof label);
        progress_relabel(&d->bar, label);
    }
    progress_update(&d->bar, consumed, post);
}

/* Ends the line (keeping it on the screen) before other output. */
static void display_finish(TrainDisplay *d, const Trainer *tr, float loss) {
    if (!d->live) return;
    char post[128];
    snprintf(post, sizeof post, "step %ld, loss %.3f, acc %.3f", tr->ps->global_step, loss, tr->accuracy);
    if (d->bar.drawn) progress_end(&d->bar, tr->examples_consumed, post);
}

/* The latest checkpoint of train_dir into path: 1, or 0 when there is none. */
static int latest_checkpoint(const char *train_dir, char *path, size_t path_n_bytes) {
    return ckpt_latest(train_dir, path, path_n_bytes) == 1;
}

/* The run stops mid-way on an error that leaves the variables good (err:
 * the input failed, and the failed batch never ran; the summaries could not
 * be written): save the variables of the last step unless the latest
 * checkpoint holds them, and say so in the one error line (rank 0; the
 * other ranks only report). */
static void save_on_error(Trainer *tr, const TrainerOptions *o, long last_saved, const char *err) {
    char e[1024] = "", kept[4200];
    const long step = tr->ps->global_step;
    if (tr->rank != 0) { /* rank 0 alone writes train_dir, and saves there */
        cmd_errorf("tower train: %s\n", err);
        return;
    }
    if (trainer_save_needs_every_rank(tr)) { /* the shards live on every rank: no save of rank 0 alone */
        if (latest_checkpoint(o->train_dir, kept, sizeof kept))
            cmd_errorf("tower train: %s; the step's shards live on every rank, not saved: the latest checkpoint "
                    "stays %s\n", err, kept);
        else
            cmd_errorf("tower train: %s; the step's shards live on every rank, not saved\n", err);
        return;
    }
    if (step != last_saved) {
        const int saved = trainer_save(tr, e, sizeof e) == 0;
        if (saved && latest_checkpoint(o->train_dir, kept, sizeof kept))
            cmd_errorf("tower train: %s; the variables of step %ld are saved in %s\n", err, step, kept);
        else if (saved)
            cmd_errorf("tower train: %s; the variables of step %ld are saved, but the checkpoint index cannot be "
                       "read\n", err, step);
        else
            cmd_errorf("tower train: %s; saving the variables of step %ld failed too: %s\n", err, step, e);
    } else if (latest_checkpoint(o->train_dir, kept, sizeof kept)) {
        cmd_errorf("tower train: %s; the variables of step %ld are in %s\n", err, step, kept);
    } else {
        cmd_errorf("tower train: %s; no step ran, nothing saved\n", err);
    }
}

/* TensorFlow's log line for the steps since *interval_start (then restarted).  examples/sec: the examples
 * those steps consumed (the global batch a step; fewer in a round of ps_mpi_async after a worker's part
 * ended, as its rank 0 counts them). */
static void log_step(const Trainer *tr, long step, float loss, double *interval_start, long *interval_steps,
                     long *interval_examples) {
    char ts[64];
    double now = tower_now_sec();
    double duration = (now - *interval_start) / (double)*interval_steps;
    trainer_timestamp(ts, sizeof ts);
    printf("%s: step %ld, loss = %.2f (%.1f examples/sec; %.3f sec/batch)\n", ts, step, loss,
           (double)(tr->examples_consumed - *interval_examples) / (now - *interval_start), duration / tr->worker_towers);
    errno = 0;
    if (fflush(stdout) != 0 && errno) stdout_errno = errno;
    *interval_start = now;
    *interval_steps = 0;
    *interval_examples = tr->examples_consumed;
}

/* A run that ran no step (it failed before the first: "no step ran, nothing saved"; --max_steps 0; a --resume at
 * --max_steps already) leaves no events file behind, which TensorBoard would list as an empty run: path (the
 * closed writer's; "" for none) is removed unless ran_steps. */
static void drop_empty_events(const char *path, int ran_steps) {
    if (path[0] && !ran_steps) remove(path);
}

static int train_main(int argc, char **argv, int rank);
static int run_train(TrainerOptions o, TrainDisplayOptions dopt, int rank, int *labels_made);

/* Every rank of the job refused the same command line alike (train_main): the ranks end together, not by an
 * abort, and rank 0 alone said why. */
static int job_refused = 0;

/* Flags that may differ between the ranks of a job: what each host has (its GPUs' numbers, its cores) and what a
 * rank shows or records only of itself. */
static const char *const per_rank_flags[] = {"gpus", "input_threads", "log_device_placement", "no_progress", "trace",
                                             NULL};

/* The job around the loop: MPI started (under mpirun) before any thread,
 * the quiet ranks, and the job ended on any rank's error. */
int cmd_train(int argc, char **argv) {
    char err[512];
    if (ranks_init(&argc, &argv, err, sizeof err) != 0) {
        cmd_errorf("tower train: %s\n", err);
        return 1;
    }
    const int rank = ranks_rank();
    if (rank != 0 && !freopen("/dev/null", "w", stdout)) {
        cmd_errorf("tower train: rank %d: cannot silence stdout\n", rank);
    }
    int rc = train_main(argc, argv, rank);
    /* 128 + SIGINT or SIGTERM: a stop every rank agreed on after the same step, the checkpoint written:
     * the ranks end together, not by an abort. */
    const int stopped = rc == 128 + SIGINT || rc == 128 + SIGTERM || rc == 128 + SIGHUP;
    if (rc != 0 && !stopped && !job_refused && ranks_size() > 1) {
        cmd_errorf("tower train: rank %d of %d ends the job (exit %d)\n", rank, ranks_size(), rc);
        ranks_abort(rc);
    }
    ranks_finalize();
    return rc;
}

/* A check some ranks may refuse and others not (cmd_agree_refusal's say_again: the check again, aloud). */
typedef struct {
    int (*check)(void *ctx);
    void *ctx;
} CheckAgain;

static void check_again(void *ctx) {
    CheckAgain *c = ctx;
    (void)c->check(c->ctx);
}

/* check(ctx) on every rank, aloud on rank 0 only, and the ranks agree (cmd_agree_refusal: the lowest rank that
 * refused, when not rank 0, runs it again aloud, named).  1 on every rank when any refused (job_refused set: no
 * MPI_Abort), else 0.  One process: check's outcome. */
static int agreed_check(int (*check)(void *ctx), void *ctx, int rank) {
    cmd_errors_quiet(rank != 0);
    const int refused = check(ctx) != 0;
    cmd_errors_quiet(0);
    CheckAgain again = {check, ctx};
    if (cmd_agree_refusal(refused, check_again, &again) < 0) return 0;
    job_refused = 1;
    return 1;
}

/* The parse of a rank that refused it alone (cmd_agree_refusal's say_again): --help, or the parse again with
 * this rank named in base/flags' line. */
typedef struct {
    int rc; /* the parse's outcome on this rank: 1 --help, 2 a refusal */
    const Flag *flags;
    int n_flags, argc;
    char **argv;
} ParseAgain;

static void parse_again(void *ctx) {
    ParseAgain *p = ctx;
    if (p->rc == 1) {
        cmd_errorf("tower train: --help was given to this rank but not to rank 0: every rank of the job needs the "
                   "same flags (docs/hosts.md)\n");
        return;
    }
    char program[96], *tagged[p->argc + 1], *positional[p->argc > 0 ? p->argc : 1];
    int n_positional;
    unsigned char given[96];
    cmd_rank_program("train", program, sizeof program);
    memcpy(tagged, p->argv, (size_t)(p->argc + 1) * sizeof *p->argv);
    tagged[0] = program;
    (void)flags_parse_given(p->flags, p->n_flags, p->argc, tagged, positional, &n_positional, given);
}

/* The flags' checks of train_main, after the parse (agreed_check's ctx). */
typedef struct {
    TrainerOptions *o;
    TrainDisplayOptions *d;
    const Flag *flags;
    int n_flags;
    const unsigned char *given;
    char **positional; /* (n_positional) */
    int n_positional;
} TrainChecks;

/* Every flag against its choices and the others, the arguments, the model options: 0, or -1 after one line. */
static int train_checks(void *ctx) {
    TrainChecks *c = ctx;
    return cmd_check_no_arguments("train", c->o->data, c->positional, c->n_positional) != 0 ||
                   train_check_flags(c->o) != 0 || check_given_options(c->o, c->flags, c->n_flags, c->given) != 0 ||
                   cmd_model_options("train", c->d->width_multiplier, c->d->head, c->d->fc_width,
                                     &c->o->model_opts) != 0
               ? -1
               : 0;
}

typedef struct {
    const char *train_dir;
    int rank;
    int *lock_fd;          /* rank 0's lock, held to the exit; -1 elsewhere */
    size_t *made_n_bytes;  /* file_make_dirs': what a run that fails before writing anything removes again */
} TrainDirCheck;

/* --train_dir made (every rank), and locked (rank 0): 0, or -1 after one line. */
static int train_dir_check(void *ctx) {
    TrainDirCheck *c = ctx;
    size_t made = 0;
    const int made_rc = file_make_dirs(c->train_dir, &made);
    if (!*c->made_n_bytes) *c->made_n_bytes = made; /* a second call (said again) makes nothing */
    struct stat sb;
    if (made_rc != 0) { /* a file by that name: on rank 0, or on another rank's host (its shards go there) */
        if (errno == ENOTDIR && stat(c->train_dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
            cmd_errorf("tower train: --train_dir %s is not a directory\n", c->train_dir);
        else
            cmd_errorf("tower train: cannot create --train_dir %s: %s\n", c->train_dir, strerror(errno));
        return -1;
    }
    char err[1024];
    if (c->rank == 0 && *c->lock_fd < 0 && trainer_lock_dir(c->train_dir, c->lock_fd, err, sizeof err) != 0) {
        cmd_errorf("tower train: %s\n", err);
        return -1;
    }
    if (c->rank != 0 && access(c->train_dir, W_OK) != 0) {
        cmd_errorf("tower train: --train_dir %s cannot be written: %s\n", c->train_dir, strerror(errno));
        return -1;
    }
    return 0;
}

static int train_main(int argc, char **argv, int rank) {
    TrainerOptions o;
    trainer_options_defaults(&o);
    TrainDisplayOptions dopt = {.summary_every = 100, .histogram_every = 1000, .no_progress = 0,
                                .width_multiplier = 1.0f, .head = "keras", .fc_width = 4096};
    Flag flags[96];
    int n_flags = train_flags(&o, &dopt, flags);
    char *positional[argc > 0 ? argc : 1];
    int n_positional;
    unsigned char given[96];
    /* Under mpirun every rank parses its own command line, rank 0 aloud, and the ranks agree on the outcome (a
     * rank alone given a bad flag or --help left the others waiting in the first collective): rank 0's --help
     * prints the usage and ends the job; a refusal, or --help on another rank only, ends every rank, the lowest
     * rank that refused saying why ("rank R of N: " in its line). */
    flags_quiet(rank != 0);
    int rc = flags_parse_given(flags, n_flags, argc, argv, positional, &n_positional, given);
    flags_quiet(0);
    if (ranks_size() > 1) {
        int rc0 = rc;
        ranks_bcast(&rc0, sizeof rc0);
        if (rc0 == 1) rc = 1; /* rank 0's --help: the job's usage, every rank ends with 0 */
        ParseAgain again = {rc, flags, n_flags, argc, argv};
        if (rc0 != 1 && cmd_agree_refusal(rc != 0, parse_again, &again) >= 0) {
            job_refused = 1;
            return 2;
        }
    }
    if (rc == 1) {
        if (rank == 0) flags_print_usage("tower train", "[flags]", flags, n_flags);
        return 0;
    }
    /* a size a run that uses none refuses (trainer_open), the default not */
    o.image_size_given = rc == 0 && flags_was_given(flags, n_flags, given, "image_size");
    if (rc != 0) return 2;
    if (cmd_check_same_flags("train", flags, n_flags, per_rank_flags) != 0) {
        job_refused = 1;
        return 2;
    }
    /* The same flags on every rank: the checks below refuse on all of them alike, and rank 0 alone says why; a
     * rank whose own flags (--gpus) or arguments refuse says it. */
    TrainChecks tc = {&o, &dopt, flags, n_flags, given, positional, n_positional};
    if (agreed_check(train_checks, &tc, rank) != 0) return 2;
    /* The train_dir: made on every rank (each host's, or one shared), and one run per train_dir, locked to the
     * exit by rank 0, which alone writes there; a directory that cannot be written is found here.  A run that
     * fails before writing anything there removes the directories it made (file_remove_made_dirs: empty ones). */
    int lock_fd = -1;
    size_t made_n_bytes = 0;
    TrainDirCheck dc = {o.train_dir, rank, &lock_fd, &made_n_bytes};
    if (agreed_check(train_dir_check, &dc, rank) != 0) {
        if (lock_fd >= 0) trainer_unlock_dir(o.train_dir, lock_fd);
        file_remove_made_dirs(o.train_dir, made_n_bytes);
        return 1;
    }
    int labels_made = 0;
    rc = run_train(o, dopt, rank, &labels_made);
    char path[4200];
    /* The labels.txt this run recorded pairs the class list with its checkpoints: with none saved, a failed run
     * takes it away again (a later run on other data would be refused by it). */
    if (rc != 0 && labels_made && !latest_checkpoint(o.train_dir, path, sizeof path) &&
        snprintf(path, sizeof path, "%s/labels.txt", o.train_dir) < (int)sizeof path)
        unlink(path);
    if (rank == 0) trainer_unlock_dir(o.train_dir, lock_fd);
    if (rc != 0) file_remove_made_dirs(o.train_dir, made_n_bytes);
    return rc;
}

/* The data's class list against --num_classes and the train_dir's, then
 * recorded there (train_dir/labels.txt, for eval to compare): an image
 * folder's (its folders, or --labels), or the labels.txt beside the TFRecord
 * files, which must agree where their directories hold several.  The
 * labels.txt must name --num_classes classes (an image folder's --labels:
 * trainer_open checks it).  Rank 0's TrainerOptions.check_data: trainer_open
 * calls it before the input pipeline starts; ctx: an int set to 1 when this
 * call made train_dir/labels.txt (it was not there).  0 (also when the data
 * has no class list), or -1 with one line in err. */
static int check_class_list(void *ctx, const Trainer *tr, char *err, size_t err_n_bytes) {
    int *labels_made = ctx;
    const TrainerOptions *o = &tr->opt;
    char e[1024], data_labels[4096] = "", run_labels[4096];
    int n_classes = 0;
    const char *const *classes = trainer_classes(tr, &n_classes);
    if (!classes && tr->n_files > 0) {
        int lrc = io_labels_find(tr->files, tr->n_files, data_labels, sizeof data_labels, e, sizeof e);
        if (lrc != 0) {
            if (lrc > 0)
                snprintf(err, err_n_bytes, "the class lists beside --data's files differ, so their label numbers name "
                         "other classes: %s", e);
            else snprintf(err, err_n_bytes, "%s", e);
            return -1;
        }
        if (data_labels[0]) {
            char **names;
            if (imagefolder_read_labels(data_labels, &names, &n_classes, e, sizeof e) != 0) {
                snprintf(err, err_n_bytes, "%s", e);
                return -1;
            }
            for (int k = 0; k < n_classes; k++) free(names[k]);
            free(names);
        }
    }
    if ((!classes && !data_labels[0]) ||
        snprintf(run_labels, sizeof run_labels, "%s/labels.txt", o->train_dir) >= (int)sizeof run_labels)
        return 0;
    /* A labels file: first against the train_dir's (the more telling refusal on a resumed run), then its count. */
    const char *list_file = classes ? (o->labels[0] ? o->labels : NULL) : data_labels;
    int had_labels = access(run_labels, F_OK) == 0;
    /* One beside no checkpoint (no index, no checkpoint file) pairs with nothing: a run stopped before its first
     * save left it (a signal in its start-up, kill -9); this run's list takes its place. */
    char index_path[4200];
    if (had_labels && ckpt_latest(o->train_dir, index_path, sizeof index_path) == 0 &&
        ckpt_dir_scan(o->train_dir, NULL, 0) == 0) {
        if (unlink(run_labels) != 0) {
            snprintf(err, err_n_bytes, "%s: cannot remove it: %s", run_labels, strerror(errno));
            return -1;
        }
        char ts[64], safe[ESCAPE_PATH_N_BYTES];
        trainer_timestamp(ts, sizeof ts);
        fprintf(stderr, "%s: note: %s paired with no checkpoint (a run stopped before its first save left it): "
                "replaced by this run's class list\n", ts, escape_str(safe, sizeof safe, run_labels));
        had_labels = 0;
    }
    int lrc = list_file ? io_labels_compare(run_labels, list_file, e, sizeof e) : 0;
    if (lrc == 0 && !classes && list_file && n_classes != o->num_classes) {
        snprintf(err, err_n_bytes, "%s names %d class%s but --num_classes is %d: the model's outputs would not be "
                 "the list's classes", list_file, n_classes, n_classes == 1 ? "" : "es", o->num_classes);
        return -1;
    }
    if (lrc == 0 && classes) {
        char what[4200];
        if (o->labels[0]) snprintf(what, sizeof what, "--labels %s", o->labels);
        else snprintf(what, sizeof what, "the class folders of %s", o->data);
        lrc = io_labels_record_names(classes, n_classes, what, run_labels, e, sizeof e);
    } else if (lrc == 0) {
        lrc = io_labels_record(data_labels, run_labels, e, sizeof e);
    }
    if (lrc != 0) {
        if (lrc > 0) snprintf(err, err_n_bytes, "the data's class list differs from the one this train_dir was trained with: %s", e);
        else snprintf(err, err_n_bytes, "%s", e);
        return -1;
    }
    *labels_made = !had_labels;
    return 0;
}

/* The run on a locked train_dir: the process's exit status. */
static int run_train(TrainerOptions o, TrainDisplayOptions dopt, int rank, int *labels_made) {
    char err[PIPELINE_ERR_N_BYTES + 1024], ts[64]; /* a pipeline message naming a file, escaped */
    Trainer tr;
    TrainDisplay disp; /* before the pipeline starts: its warnings erase the progress line */
    memset(&disp, 0, sizeof disp);
    o.warn = display_warn;
    o.warn_ctx = &disp;
    /* The data's class list (labels.txt beside it, from convert --from imagefolder) goes into train_dir,
     * for eval to compare; a resumed run on data with another list is refused. */
    if (rank == 0) {
        o.check_data = check_class_list;
        o.check_data_ctx = labels_made;
    }
    const int open_rc = trainer_open(&tr, &o, err, sizeof err);
    if (open_rc != 0) {
        if (err[0]) cmd_errorf("tower train: %s\n", err); /* it may name a data file: escaped there */
        job_refused = open_rc == TRAINER_OPEN_REFUSED; /* every rank ends here: no MPI_Abort */
        return 1;
    }
    EventWriter *events = NULL;
    char events_path[4200] = ""; /* removed again when the run fails before its first step (drop_empty_events) */
    if (rank == 0 && (dopt.summary_every > 0 || dopt.histogram_every > 0)) {
        /* The session's start at its first step, the checkpoint's + 1 (SummarySaverHook's global_step after the
         * session's first run): TensorBoard drops the steps an earlier file holds from there on, written past the
         * checkpoint resumed from by a run that ended without saving them; the checkpoint's own step stays. */
        if (!(events = event_writer_open(o.train_dir, err, sizeof err)) ||
            event_writer_session_start(events, tr.ps->global_step + 1, err, sizeof err) != 0) {
            cmd_errorf("tower train: %s\n", err);
            if (events) remove(event_writer_path(events));
            event_writer_close(events, NULL, 0);
            trainer_close(&tr, NULL, 0);
            return 1;
        }
        snprintf(events_path, sizeof events_path, "%s", event_writer_path(events));
    }
    disp.live = rank == 0 && progress_wanted(stdout, dopt.no_progress);
    if (disp.live) {
        disp.examples_per_epoch = tr.examples_per_epoch;
        if (disp.examples_per_epoch <= 0 && tr.n_files > 0) {
            /* Unknown until counted: one pass over the records, CRCs only. */
            int compression = io_compression_parse(o.compression);
            disp.examples_per_epoch = io_count_records((const char *const *)tr.files, tr.n_files,
                                                       compression < 0 ? IO_COMPRESSION_AUTO : compression,
                                                       o.skip_corrupt, err, sizeof err);
        }
        disp.run_examples =
            progress_run_total(o.max_steps, trainer_step_examples(&tr), tr.global_batch, o.num_epochs,
                               disp.examples_per_epoch);
        if (disp.examples_per_epoch > 0) {
            disp.n_epochs = (disp.run_examples + disp.examples_per_epoch - 1) / disp.examples_per_epoch;
            if (disp.n_epochs < 1) disp.n_epochs = 1;
        }
        display_start(&disp, tr.examples_consumed);
    }
    cmd_catch_signals(on_signal); /* SIGHUP (the terminal closed, the ssh session dropped) as SIGTERM */
    /* A closed pipe (`| head`) fails the write (main ignores SIGPIPE): stdout_lost below saves and stops. */
    int stdout_lost = 0; /* rank 0's log lines could not be written: stop after this step, checkpoint, exit 1 */
    int stop_agreed = 0; /* the loop ended on a stop request (a signal to any rank, the lost output) */

    int exit_code = 0;
    long last_saved = trainer_schedule_step(&tr), last_scalars = tr.ps->global_step, last_histograms = tr.ps->global_step;
    double interval_start = tower_now_sec(), summary_start = interval_start;
    long interval_steps = 0, summary_steps = 0, interval_examples = tr.examples_consumed;
    long summary_examples = tr.examples_consumed; /* examples/sec as the log line's: the examples consumed */
    float loss = 0.0f;
    const long step_at_open = tr.ps->global_step, examples_at_open = tr.examples_consumed;
    if (rank == 0 && step_at_open > 0 && trainer_schedule_step(&tr) >= o.max_steps) {
        trainer_timestamp(ts, sizeof ts);
        printf("%s: --max_steps %ld: the checkpoint is at step %ld already: nothing to train (raise --max_steps to "
               "go on)\n", ts, o.max_steps, trainer_schedule_step(&tr));
    }
    /* The schedule (--max_steps, --save_every) reads trainer_schedule_step: global_step, or, where the ranks step
     * apart, a count that is the same on every rank (their global_steps may differ between the save points). */
    while (trainer_schedule_step(&tr) < o.max_steps) {
        /* the next global batch */
        PipelineBatch *batch;
        int got = trainer_next_batch(&tr, &batch, err, sizeof err);
        if (got < 0) {
            /* The input failed (a bad record, a vanished file): the variables are the last step's, good; keep them. */
            display_finish(&disp, &tr, loss);
            save_on_error(&tr, &o, last_saved, err);
            exit_code = 1;
            break;
        }
        /* the step: towers, reduction, update (the placement mode's, train/mode_*.c) */
        tr.stop_requested = stop_signal != 0 || stdout_lost; /* ranks that step apart carry it with the step's pushes */
        if (got > 0) got = trainer_step_batch(&tr, batch, &loss, err, sizeof err);
        if (got == 0 && tr.ps->global_step == step_at_open && o.num_epochs > 0 && tr.worker >= 0) {
            /* --num_epochs ended the input before one whole step: a run from step 0 has nothing to save (its
             * model.ckpt-0 would be untrained variables, its exit 0 a success); a resumed one had its epochs. */
            display_finish(&disp, &tr, loss);
            if (examples_at_open == 0) {
                cmd_errorf("tower train: --num_epochs %d of --data ended before one whole step of %ld examples: an "
                           "epoch holds fewer than a step takes (lower --batch_size or --num_towers, or raise "
                           "--num_epochs); no step ran, nothing saved\n", o.num_epochs, trainer_step_examples(&tr));
                exit_code = 1;
            } else {
                trainer_timestamp(ts, sizeof ts);
                printf("%s: --num_epochs %d: the checkpoint's run had consumed them (%ld examples) at step %ld: no "
                       "step to run\n", ts, o.num_epochs, examples_at_open, step_at_open);
            }
        }
        if (got == 0) break;
        if (got == -2) {
            /* Diverged: nothing is saved; the last checkpoint (before the bad step) stays the latest. */
            display_finish(&disp, &tr, loss);
            trainer_timestamp(ts, sizeof ts);
            char kept[4200];
            if (latest_checkpoint(o.train_dir, kept, sizeof kept))
                cmd_errorf("%s: %s; not saved: the latest checkpoint stays %s\n", ts, err, kept);
            else
                cmd_errorf("%s: %s; not saved (no checkpoint was written)\n", ts, err);
            event_writer_close(events, NULL, 0);
            drop_empty_events(events_path, tr.ps->global_step != step_at_open);
            trainer_close(&tr, NULL, 0);
            return 1;
        }
        if (got < 0) {
            display_finish(&disp, &tr, loss);
            cmd_errorf("tower train: %s\n", err);
            exit_code = 1;
            break;
        }
        /* the log: the progress line or the log line, the summaries */
        interval_steps++;
        summary_steps++;
        long step = tr.ps->global_step;
        display_step(&disp, &tr, loss);
        if (!disp.live && o.log_every > 0 && (step % o.log_every == 0 || step == 1))
            log_step(&tr, step, loss, &interval_start, &interval_steps, &interval_examples);
        int scalars_due = dopt.summary_every > 0 && step % dopt.summary_every == 0;
        int histograms_due = dopt.histogram_every > 0 && step % dopt.histogram_every == 0;
        if (events && (scalars_due || histograms_due)) {
            double now = tower_now_sec(), secs = now - summary_start > 1e-9 ? now - summary_start : 1e-9;
            if (write_summaries(events, &tr, step, loss, (double)(tr.examples_consumed - summary_examples) / secs,
                                summary_steps / secs, scalars_due, histograms_due, err, sizeof err) != 0) {
                /* The variables are good: saved, as after a bad record (the run resumes from them). */
                display_finish(&disp, &tr, loss);
                char what[sizeof err + 64];
                snprintf(what, sizeof what, "summaries at step %ld: %s", step, err);
                save_on_error(&tr, &o, last_saved, what);
                exit_code = 1;
                break;
            }
            if (scalars_due) {
                summary_start = now;
                summary_steps = 0;
                summary_examples = tr.examples_consumed;
                last_scalars = step;
            }
            if (histograms_due) last_histograms = step;
        }
        /* the checkpoint */
        const long scheduled = trainer_schedule_step(&tr);
        if (o.save_every > 0 && scheduled % o.save_every == 0) {
            if (trainer_save(&tr, err, sizeof err) != 0) {
                display_finish(&disp, &tr, loss);
                cmd_errorf("tower train: checkpoint at step %ld: %s\n", step, err);
                exit_code = 1;
                break;
            }
            last_saved = scheduled;
        }
        /* The log lines' destination gone (a closed pipe, a full disk): the run stops as on a signal, its
         * checkpoint written, and says so on stderr, the one stream left. */
        errno = 0;
        if (!stdout_lost && rank == 0 && fflush(stdout) != 0 && errno) stdout_errno = errno;
        if (!stdout_lost && rank == 0 && ferror(stdout) && stdout_errno == EINTR && stop_signal) {
            /* A write blocked on a reader that does not read, ended by the stop signal: the stop is the signal's;
             * the lines not written go to /dev/null, so that the stop's own lines do not block again. */
            cmd_errorf("tower train: standard output blocked (its reader does not read) when %s arrived: stopping "
                       "after step %ld: checkpoint, then exit status %d; the log lines not yet written are dropped\n",
                       cmd_signal_name(stop_signal), step, 128 + stop_signal);
            const int null_fd = open("/dev/null", O_WRONLY);
            if (null_fd >= 0) {
                dup2(null_fd, STDOUT_FILENO);
                close(null_fd);
            }
            clearerr(stdout);
        }
        if (!stdout_lost && rank == 0 && ferror(stdout)) {
            stdout_lost = 1;
            cmd_errorf("tower train: writing standard output: %s: stopping after step %ld: checkpoint, then exit "
                       "status 1\n", stdout_errno ? strerror(stdout_errno) : "write error", step);
        }
        /* Every rank stops after the same step (ranks that step apart agree through their pushes). */
        if (trainer_ranks_stop(&tr, stop_signal != 0 || stdout_lost)) {
            stop_agreed = 1;
            display_finish(&disp, &tr, loss);
            trainer_timestamp(ts, sizeof ts);
            if (trainer_schedule_step(&tr) >= o.max_steps)
                ; /* the run's last step: it ends as a finished run (exit 0), the request moot */
            else if (stop_signal)
                printf("%s: stop requested by %s after step %ld: checkpoint, then exit status %d\n", ts,
                       cmd_signal_name(stop_signal), step, 128 + stop_signal);
            else if (!stdout_lost) /* another rank's signal (mpirun): this rank stops with the job, status 0 */
                printf("%s: stop requested by another rank after step %ld: checkpoint\n", ts, step);
            break;
        }
    }
    /* --max_steps reached: a signal during the last step, the final save or the close changes nothing. */
    const int finished = trainer_schedule_step(&tr) >= o.max_steps;
    display_finish(&disp, &tr, loss);
    /* The last step's scalars and histograms, where the schedule did not just write them. */
    long final_step = tr.ps->global_step;
    int final_scalars = dopt.summary_every > 0 && final_step != last_scalars && summary_steps > 0;
    int final_histograms = dopt.histogram_every > 0 && final_step != last_histograms && final_step > 0;
    if (exit_code == 0 && events && (final_scalars || final_histograms)) {
        double secs = tower_now_sec() - summary_start;
        if (secs < 1e-9) secs = 1e-9;
        if (write_summaries(events, &tr, final_step, loss, (double)(tr.examples_consumed - summary_examples) / secs,
                            summary_steps / secs, final_scalars, final_histograms, err, sizeof err) != 0) {
            char what[sizeof err + 64];
            snprintf(what, sizeof what, "summaries at step %ld: %s", final_step, err);
            save_on_error(&tr, &o, last_saved, what);
            exit_code = 1;
        }
    }
    if (event_writer_close(events, err, sizeof err) != 0 && exit_code == 0) {
        char what[sizeof err + 64]; /* the variables are good: saved, as after a failed summary */
        snprintf(what, sizeof what, "closing the events file: %s", err);
        save_on_error(&tr, &o, last_saved, what);
        exit_code = 1;
    }
    drop_empty_events(events_path, tr.ps->global_step != step_at_open); /* failed or not: no step, no run to list */
    /* The end's checkpoint; a run that ends at step 0 (--max_steps 0) writes model.ckpt-0, the initial
     * variables, as TensorFlow's CheckpointSaverHook does when a session starts. */
    if (exit_code == 0 && (trainer_schedule_step(&tr) != last_saved || trainer_schedule_step(&tr) == 0)) {
        if (trainer_save(&tr, err, sizeof err) != 0) {
            cmd_errorf("tower train: final checkpoint: %s\n", err);
            exit_code = 1;
        }
    }
    if (exit_code == 0) {
        PipelineStats st = {0};
        if (tr.pipeline) pipeline_stats(tr.pipeline, &st);
        trainer_timestamp(ts, sizeof ts);
        char safe_dir[16384];
        printf("%s: %s at step %ld; checkpoint in %s; ", ts, stop_agreed && !finished ? "stopped" : "done",
               tr.ps->global_step, escape_str(safe_dir, sizeof safe_dir, o.train_dir));
        if (tr.worker < 0) /* a server-only rank (--ps_dedicated) reads nothing */
            printf("no input pipeline on this rank (a parameter server only, --ps_dedicated)");
        else
            printf("input pipeline: %.0f examples/sec produced, consumer waited %.1f s", st.examples_per_sec,
                   st.consumer_wait_sec);
        if (st.corrupt_skipped > 0)
            printf("; %ld corrupt record%s (%llu of %llu input bytes) skipped %ld time%s", st.corrupt_distinct,
                   st.corrupt_distinct == 1 ? "" : "s", (unsigned long long)st.corrupt_lost_n_bytes,
                   (unsigned long long)st.input_n_bytes, st.corrupt_skipped, st.corrupt_skipped == 1 ? "" : "s");
        if (st.images_damaged > 0)
            printf("; %ld image%s kept with damaged JPEG data", st.images_damaged, st.images_damaged == 1 ? "" : "s");
        printf("\n");
    }
    if (trainer_close(&tr, err, sizeof err) != 0) {
        cmd_errorf("tower train: %s\n", err);
        exit_code = 1;
    }
    /* Stopped by a signal or by the lost output: the checkpoint is written, and the status says the run did not
     * finish. */
    if (exit_code == 0 && stop_signal && !finished) exit_code = 128 + stop_signal;
    if (exit_code == 0 && stdout_lost) exit_code = 1; /* its output was not delivered, finished or not */
    return exit_code;
}
