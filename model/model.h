/* model.h — the models a tower drives (mnist, cifar10, mobilenet_v2, vgg11,
 * vgg16, resnet20, resnet50: the table model/nets/nets.c), each a layer
 * graph (graph.h) built by one builder (model/nets/) and run by one CPU
 * executor (model.c) and one CUDA executor (model_cuda.cu).
 *
 * Where it sits: a tower (tower/) owns one ModelActs per device and calls
 * model_forward / model_backward on its shard; the parameter server (ps/)
 * only sees the flat parameter block described by ModelSpec's table of
 * named variables.  This file knows nothing of towers, threads or devices.
 *
 * Parameters are ONE contiguous float block.  The table `vars` says where
 * each named variable (TensorFlow's names, e.g. "conv1/weights") lives in it
 * and its shape in TensorFlow's layout: conv weights (KH, KW, C_in, C_out),
 * fully connected weights (n_in, n_out), biases (n_out).  Gradients use the
 * same layout, so a gradient block and a parameter block are interchangeable
 * in size and offsets.  A variable may be NON-TRAINABLE (batch norm's
 * moving statistics): it is in the block, its gradient entries stay 0, and
 * the executor, not the optimizer, updates it.
 */
#ifndef TOWER_MODEL_MODEL_H
#define TOWER_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

/* MobileNetV2 has about 260 variables (4 per batch norm), ResNet-50 320. */
#define MODEL_MAX_VARS 512
#define MODEL_VAR_NAME_MAX 64

/* The networks, in the order of their table (model/nets/nets.c). */
typedef enum {
    MODEL_MNIST = 0,
    MODEL_CIFAR10 = 1,
    MODEL_MOBILENET_V2 = 2,
    MODEL_VGG11 = 3,
    MODEL_VGG16 = 4,
    MODEL_RESNET20 = 5,
    MODEL_RESNET50 = 6,
    MODEL_N_KINDS
} ModelKind;
/* INIT_GLOROT_UNIFORM: Keras's default kernel initializer; init_value is
 * unused (the limit comes from the shape: fan_in = prod(shape[:-1]), fan_out
 * = prod(shape[:-2]) * shape[-1], as Keras computes them). */
typedef enum { INIT_TRUNCATED_NORMAL = 0, INIT_CONSTANT = 1, INIT_GLOROT_UNIFORM = 2 } InitKind;

/* Options of the Keras networks; each network reads the fields it names
 * (width_multiplier and head: mobilenet_v2; fc_width: vgg11, vgg16), the
 * others ignore them. */
typedef enum { MODEL_HEAD_KERAS = 0, MODEL_HEAD_SEED = 1 } ModelHead;
typedef struct {
    float width_multiplier;        /* Keras's alpha; 0 means 1.0 */
    ModelHead head;                /* KERAS: GAP + predictions; SEED: GAP, dense 512 relu, dense_1 */
    int fc_width;                  /* VGG: units of fc1 and fc2; 0 means 4096 (Keras's) */
} ModelOptions;

typedef struct {
    char name[MODEL_VAR_NAME_MAX]; /* TensorFlow's variable name */
    int ndim;                      /* 1, 2 or 4 */
    int shape[4];                  /* TensorFlow layout (see above); unused dims 0 */
    size_t offset;                 /* in floats, from the start of the block */
    size_t n_floats;               /* product of shape */
    float wd;                      /* weight decay: adds wd * sum(w^2) / 2 to the loss; 0 = none */
    InitKind init;
    float init_value;              /* stddev (truncated normal) or the constant */
    int trainable;                 /* 1: has a gradient; 0: updated by the executor (moving statistics) */
} ModelVar;

typedef struct {
    ModelKind kind;
    const char *name;              /* the network's name in model/nets/nets.c: "mnist", ..., "resnet50" */
    ModelOptions opts;             /* as given to model_spec_init_opts (width_multiplier 0 -> 1.0, fc_width 0 -> 4096) */
    int H, W, C;                   /* input shape of one example, after augmentation */
    int num_classes;
    int n_vars;
    ModelVar vars[MODEL_MAX_VARS];
    size_t n_params;               /* floats in the whole block */
    size_t n_trainable;            /* floats in the trainable variables (n_params for mnist and cifar10) */
} ModelSpec;

/* Fill `spec` for the model `name` (a name of model/nets/nets.c's table:
 * mnist, cifar10, mobilenet_v2, vgg11, vgg16, resnet20, resnet50; the Keras
 * networks with their default options) on inputs of shape
 * (H, W, C) with `num_classes` classes.  Returns 0, or -1 for an unknown name
 * or a shape the model cannot take (a message is written to err). */
int model_spec_init(ModelSpec *spec, const char *name, int H, int W, int C,
                    int num_classes, char *err, size_t err_n_bytes);

/* opts as the network `name` reads them: width_multiplier 0 -> 1.0 and fc_width 0 -> 4096, and the options
 * the network does not read at their defaults (what model_spec_init_opts stores in spec->opts, and what
 * ckpt_load compares a checkpoint's recorded options with).  An unknown name: the zeros only.  Validates
 * nothing. */
void model_opts_normalize(const char *name, ModelOptions *opts);

/* The options the network `name` reads, as the flags that give them ("--width_multiplier 0.333 --head seed";
 * a width in the fewest digits that read back as it, so two that differ print apart; "no options" for a
 * network that reads none; an unknown name: all three), into out (out_n_bytes). */
void model_opts_describe(const char *name, const ModelOptions *opts, char *out, size_t out_n_bytes);

/* The flag that shrinks the variables of the network `name` most: "--fc_width" for a network with a
 * configurable dense width, else "--width_multiplier" for one with a width, else NULL (none: a smaller
 * --model is the way). */
const char *model_size_flag(const char *name);

/* model_spec_init with options (NULL: the defaults).  mobilenet_v2 takes
 * any input from 32x32 with 1 or 3 channels; vgg11, vgg16 and resnet50 any
 * from 32x32, resnet20 any size (any channel count).  A width multiplier
 * outside (0, 16], an unknown head or an fc_width outside [1, 65536] is
 * refused with a message. */
int model_spec_init_opts(ModelSpec *spec, const char *name, int H, int W, int C, int num_classes,
                         const ModelOptions *opts, char *err, size_t err_n_bytes);

/* What a model expects of its data before any spec exists: the shape of
 * its stored images (the synthetic data's shape) and how training treats
 * them.  mnist: 28x28x1, whole images scaled to [-0.5, 0.5]; cifar10:
 * 32x32x3, cropped to --image_size and distorted (random crop, flip,
 * brightness, contrast) then standardized, as TensorFlow's cifar10_input. */
typedef struct {
    int H, W, C;   /* the native stored image */
    int distorts;  /* 1: training crops to image_size and distorts (cifar10); 0: images used whole */
} ModelInputFacts;

/* Fill f for the model `name`.  Returns 0, or -1 for an unknown name with
 * f set as for mnist (model_spec_init then reports the name). */
int model_input_facts(const char *name, ModelInputFacts *f);

/* Index of the variable called `name`, or -1. */
int model_spec_find(const ModelSpec *spec, const char *name);

/* Initialise every variable as the table says (truncated normal resampled
 * beyond 2 stddev, or constant) from a seeded RNG: the same seed gives the
 * same bits on every machine.  params: (n_params) floats, owned by the caller. */
void model_init_params(float *params, const ModelSpec *spec, uint64_t seed);

/* Per-tower workspace: activations saved by forward for backward, and
 * scratch (im2col, ...) for batches of up to max_batch examples.  Owns its
 * memory; NULL on allocation failure. */
typedef struct ModelActs ModelActs;
ModelActs *model_acts_create(const ModelSpec *spec, int max_batch);
void model_acts_free(ModelActs *acts);

/* model_acts_create with the graph's fusion (graph_fuse: batch norm + ReLU6
 * / ReLU in one node, zero padding folded into the depthwise) on (fuse = 1,
 * what model_acts_create does) or off (fuse = 0: every Keras layer a node
 * of its own, the readable reference the tests compare the fused plan with). */
ModelActs *model_acts_create_fused(const ModelSpec *spec, int max_batch, int fuse);

/* Bytes model_acts_create(spec, max_batch) allocates when called from this
 * thread (its conv scratch is sized for omp_get_max_threads()), each array
 * rounded up to whole pages; 0 for a spec the plan cannot take.  For memory
 * bounds; never fails. */
size_t model_acts_n_bytes(const ModelSpec *spec, int max_batch);

/* Forward pass on a batch of B <= max_batch examples.
 *   x      : (B, H, W, C) float inputs
 *   labels : (B) class indices in [0, num_classes)
 *   params : (n_params) the variables
 * Saves what backward needs in `acts`.  Returns the loss: the mean sparse
 * softmax cross-entropy over the B examples plus every weight-decay term.
 * If logits is not NULL, copies the (B, num_classes) logits there.
 * If ce_loss is not NULL, stores the cross-entropy part alone. */
float model_forward(float *logits, float *ce_loss, ModelActs *acts,
                    const float *x, const int32_t *labels, const float *params, int B);

/* Backward pass for the batch of the last model_forward on `acts`.
 *   dparams: (n_params) d(loss)/d(params) is ADDED to it (llm.c's
 *            convention: the caller zeroes it once per step, so K
 *            micro-batches accumulate), where loss is exactly the value
 *            model_forward returned (mean over the batch plus weight decay).
 *            Entries of non-trainable variables are left as they are.
 * Without a successful forward on acts: one line on stderr, nothing added. */
void model_backward(float *dparams, ModelActs *acts, const float *params);

/* As model_backward, but dparams is OVERWRITTEN: every one of its n_params
 * floats is written (non-trainable variables' entries and those of
 * variables no gradient reaches with 0), so the caller need not zero it.
 * A step's first micro-batch: the same values as zeroing dparams and
 * calling model_backward (bit for bit but for the sign of a zero: a
 * product written straight may be -0 where 0 + -0 gives +0), without the
 * memset and without conv2d's and dense's gradient passing through
 * scratch and an add (vgg11's step on 2 AVX2 cores: bench/RESULTS.md,
 * 2026-11-27).  Without a successful training forward: one line on stderr,
 * nothing written. */
void model_backward_write(float *dparams, ModelActs *acts, const float *params);

/* Training (1, the default) or evaluation (0) mode of the next forwards on
 * acts: batch norm normalises with the batch's statistics (and saves them
 * for model_update_moving) or with the moving ones.  model_backward needs
 * a training forward (after an evaluation one it prints a line and adds
 * nothing). */
void model_acts_set_training(ModelActs *acts, int training);

/* The weight w of the cross-entropy in the loss the next backward passes
 * differentiate: w x (the batch's mean cross-entropy) + the weight-decay
 * terms (1, the default: model_forward's loss).  The trainer gives a tower
 * its weight in the step's loss here, before the backward, where sync batch
 * norm's sums over the towers mix the towers' output gradients
 * (--loss_scaling global_batch with unequal shards; train_run_towers). */
void model_acts_set_loss_weight(ModelActs *acts, float loss_weight);

/* Sync batch norm (`--batch_norm sync`, Keras's SyncBatchNormalization):
 * the towers of a step normalise with the statistics of the global batch.
 * Every tower's executor calls sum at the same points in the same order
 * (twice per batch-norm layer: its forward sums, its backward sums); sum
 * ADDS buf (n_doubles) over every tower of the step, in tower order, and
 * writes the total back into buf on every tower, so all towers see the
 * same bits.  It is a collective: it returns on every tower or the step
 * has failed (the towers' owner, tower/tower.c, then releases the others).
 * A tower's parameter gradients stay its own (gamma, beta: its rows'),
 * and its input gradient uses the global sums, so N towers of B averaged
 * equal one tower of N x B (the executor's part of the contract; tested
 * in test_model_sync_bn). */
typedef struct {
    void (*sum)(void *ctx, double *buf, size_t n_doubles);
    void *ctx;
} ModelSync;

/* From the next training forward on, batch norm on acts reduces its
 * statistics through sync (copied; NULL: each tower's own statistics, the
 * default).  Evaluation forwards never synchronise (moving statistics). */
void model_acts_set_sync(ModelActs *acts, const ModelSync *sync);

/* After a training forward: update every non-trainable variable from what
 * the forward saved (batch norm: moving = moving * momentum + batch *
 * (1 - momentum)), in params (n_params).  A no-op for networks without
 * such variables, and without a successful training forward. */
void model_update_moving(float *params, const ModelActs *acts);

/* Several training forwards per update (--accum_steps: Keras runs a batch
 * norm's update on every training forward, so K micro-batches are K
 * successive updates): the statistics a training forward saved, kept
 * aside before the next forward overwrites them, and applied later in
 * the order they were taken.
 *   model_moving_stats_n_bytes: bytes of one forward's (0 for networks
 *     without non-trainable variables);
 *   model_moving_stats_save: the last training forward's into stats (that
 *     many bytes); 0 with nothing saved (no training forward yet), 1 done;
 *   model_update_moving_saved: as model_update_moving, from stats (a
 *     model_moving_stats_save of acts, or of acts of the same network and
 *     max_batch). */
size_t model_moving_stats_n_bytes(const ModelActs *acts);
/* The same figure without activations: what model_moving_stats_n_bytes gives for acts of spec made with
 * max_batch (the executors' fused graph), for memory bounds; 0 when the graph cannot be built. */
size_t model_moving_stats_spec_n_bytes(const ModelSpec *spec, int max_batch);
int model_moving_stats_save(void *stats, const ModelActs *acts);
void model_update_moving_saved(float *params, const ModelActs *acts, const void *stats);

/* Each variable's batch norm momentum (its layer's) where it is a moving
 * statistic, 0 elsewhere: for a server that applies shares of the update
 * away from the towers (batchnorm_apply_moving_share; the asynchronous
 * parameter servers).  momentum: (spec->n_vars).  0, or -1 when spec's
 * graph cannot be built. */
int model_moving_momentum(const ModelSpec *spec, double *momentum);

/* Number of the n examples whose largest logit is their label (ties: the
 * first largest wins).  logits: (n, num_classes); labels: (n). */
int model_count_correct(const float *logits, const int32_t *labels, int n, int num_classes);

/* Multiply-add counts of one example's forward pass, for FLOP/s figures. */
double model_forward_flops_per_example(const ModelSpec *spec);

/* ---- label checks and per-layer timing ---- */

/* Check that every label of a batch lies in [0, num_classes).  Returns 0,
 * or -1 with one line in err naming the first bad example (model_forward
 * itself only returns NAN for such a batch). */
int model_check_labels(const ModelSpec *spec, const int32_t *labels, int B,
                       char *err, size_t err_n_bytes);

/* Wall-clock time spent in each layer by model_forward/model_backward on
 * one ModelActs since it was created or last reset (TensorFlow's scope
 * names, then "loss" for the cross-entropy and weight decay). */
typedef struct {
    const char *name;      /* static string, e.g. "conv1" */
    double forward_s, backward_s;
    long n_forward, n_backward;  /* calls counted */
} ModelLayerTime;

/* Fills up to max_n entries of times; returns how many were written. */
int model_layer_times(ModelLayerTime *times, int max_n, const ModelActs *acts);
void model_layer_times_reset(ModelActs *acts);

/* One line: how the CPU runs the layers that have a choice, at the workspace's max_batch and threads (each
 * conv layer's passes: oneDNN's Winograd or direct kernels, or the loops; model/conv_algo.h), e.g.
 * "block2_conv1: oneDNN Winograd, every pass | ..."; "" for a network without such layers.  Creates the
 * conv layers' primitives if needed. */
void model_acts_describe(const ModelActs *acts, char *out, size_t out_n_bytes);

#endif
