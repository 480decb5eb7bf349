/* trainer.h — the training loop's parts, wired together: the input pipeline
 * (io/), the towers (tower/) and the parameter server (ps/).
 *
 * Where it sits: cmd/; `tower train` drives it, and the tests drive the same
 * functions.  It owns nothing of the math: one call of trainer_step is
 *
 *     pipeline_next          the next global batch, split into tower shards
 *     tower_group_step       each tower: copy the variables in, forward and
 *                            backward on its shard, deliver its gradients
 *     ps_average_grads       the mean of the tower gradients, in tower order
 *     ps_apply_gradients     the optimizer, global_step + 1, moving averages
 */
#ifndef TOWER_CMD_TRAINER_H
#define TOWER_CMD_TRAINER_H

#include "io/pipeline.h"
#include "model/model.h"
#include "ps/checkpoint.h"
#include "ps/ps.h"
#include "tower/tower.h"

/* Everything `tower train` can be told; defaults in trainer_options_defaults. */
typedef struct {
    const char *model;              /* "mnist" | "cifar10" */
    const char *data;               /* comma-separated globs of TFRecord files */
    const char *train_dir;
    const char *device;             /* "cpu" | "gpu" | "auto" */
    const char *optimizer;          /* "momentum" | "sgd" */
    const char *image_key, *label_key;
    const char *compression;        /* "auto" | "none" | "gzip" | "zlib" */
    const char *shard_sizes;        /* "" (equal) or e.g. "80,48": examples per tower */
    long max_steps;
    int batch_size;                 /* per tower, as in TensorFlow's script */
    int num_towers;                 /* 0: one per device */
    int num_gpus;
    int num_classes;
    int image_size;                 /* cifar10: crop to image_size x image_size (0: no crop) */
    float learning_rate;
    float momentum;
    int nesterov;
    float lr_decay_factor;
    float num_epochs_per_decay;     /* 0: constant learning rate */
    long num_examples_per_epoch;    /* 0: count the records of --data */
    float moving_average_decay;
    long seed;
    int log_every, save_every, keep_checkpoints;
    int resume;
    int log_device_placement;
    long min_after_dequeue;
    int input_threads;
    int skip_corrupt;
    int num_epochs;                 /* 0: as many as max_steps needs */
} TrainerOptions;

void trainer_options_defaults(TrainerOptions *o);

typedef struct {
    TrainerOptions opt;
    ModelSpec spec;
    const TowerBackend *backend;
    HostAlloc alloc;
    ParamServer *ps;
    TowerGroup *towers;
    Pipeline *pipeline;
    char **files;
    int n_files;
    int n_towers;
    int shard_sizes[TOWER_MAX_TOWERS];
    int global_batch;
    long examples_per_epoch;
    long examples_consumed;          /* by the steps taken so far (for resume) */
    float tower_losses[TOWER_MAX_TOWERS];     /* each tower's mean loss in the last step */
    float tower_accuracy[TOWER_MAX_TOWERS];   /* each tower's batch accuracy in the last step */
    float accuracy;                           /* the global batch's accuracy in the last step */
} Trainer;

/* Build the pipeline, the parameter server and the towers from the options
 * (and resume from the latest checkpoint in train_dir when opt->resume).
 * Prints what it placed where when log_device_placement.  Returns 0, or -1
 * with one line in err; on failure everything made so far is freed. */
int trainer_open(Trainer *tr, const TrainerOptions *opt, char *err, size_t err_n_bytes);

/* One synchronous step.  *loss = the mean of the towers' losses.
 * Returns 1 after a step, 0 when the data has run out (num_epochs), and -1
 * on an error (message in err).  A non-finite loss returns -2 and leaves the
 * variables as they were before the step. */
int trainer_step(Trainer *tr, float *loss, char *err, size_t err_n_bytes);

/* Write a checkpoint of the current state to train_dir. */
int trainer_save(Trainer *tr, char *err, size_t err_n_bytes);

void trainer_close(Trainer *tr);

/* "2026-11-21 12:00:00.123456" (local time), as Python's datetime.now(). */
void trainer_timestamp(char *out, size_t out_n_bytes);

#endif
