/* optimizer.h — update rules of the parameter server: optimizers, the
 * learning-rate schedule and the exponential moving average.
 *
 * Where it sits: the last stage of one synchronous step of the tower
 * pattern.  The towers have delivered gradients, ps/ps.c has averaged them
 * into one gradient; these functions turn that gradient into new master
 * variables on the CPU.  They know nothing of towers, models or files: every
 * function works on flat float arrays of n_floats elements.
 *
 * SIGN CONVENTION AND UPDATE FORMULAS (stated here, and only here):
 *   g is the gradient d(loss)/d(var), pointing uphill; every optimizer
 *   SUBTRACTS lr times a step built from g.  All arithmetic is float32 in
 *   the order TensorFlow's CPU kernels evaluate it, so that a step equals
 *   TensorFlow's to the bit wherever the kernels agree:
 *
 *   sgd (GradientDescentOptimizer, ApplyGradientDescent):
 *       var -= g * lr
 *   momentum (MomentumOptimizer, ApplyMomentum), momentum m:
 *       accum = accum * m + g
 *       plain:    var -= accum * lr
 *       Nesterov: var -= g * lr + (accum * m) * lr     (= lr * (g + m * accum))
 *   adam (AdamOptimizer, ApplyAdam), slots m = Adam, v = Adam_1 (zeros),
 *   scalars beta1_power, beta2_power (start at beta1, beta2; multiplied by
 *   beta1, beta2 in float32 after every step, as TensorFlow's _finish):
 *       lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
 *       m += (g - m) * (1 - beta1)
 *       v += (g * g - v) * (1 - beta2)
 *       var -= (m * lr_t) / (sqrt(v) + epsilon)
 *   adamw (tf.keras.optimizers.AdamW), slots AdamW, AdamW_1 (zeros), no
 *   scalars: Keras computes beta^t = powf(beta, t), t = global_step + 1,
 *   its 1 - beta in double then float32 (Python floats), and decays every
 *   variable with lr (NOT lr_t) BEFORE the Adam step above:
 *       var = var - (var * wd) * lr
 *   rmsprop (RMSPropOptimizer, ApplyRMSProp / ApplyCenteredRMSProp), slots
 *   ms = RMSProp (ONES, as TensorFlow 1 initialises it), mg = RMSProp_1
 *   (centered only, zeros), mom = RMSProp_1, or RMSProp_2 when centered
 *   (zeros), rho = decay:
 *       ms += (g * g - ms) * (1 - rho)
 *       centered: mg += (g - mg) * (1 - rho); den = (ms - mg * mg) + epsilon
 *       plain:    den = ms + epsilon
 *       mom = mom * momentum + (g * lr) / sqrt(den)
 *       var -= mom
 *   learning rate (tf.train.exponential_decay; the other schedules at
 *   LrSchedule), with the step read BEFORE global_step is incremented, as
 *   TensorFlow's apply_gradients reads it:
 *       p  = (float)step / (float)decay_steps;  p = floor(p) with staircase
 *       lr = lr0 * factor ^ p
 *   moving average (tf.train.ExponentialMovingAverage with
 *   num_updates = global_step), applied AFTER the variables are updated and
 *   global_step incremented, so num_updates = the number of steps applied so
 *   far, 1 after the first step (see ps/ps.h and docs/ps.md for why):
 *       decay  = min(decay, (1 + num_updates) / (10 + num_updates))
 *       shadow -= (shadow - var) * (1 - decay)
 *
 * Every loop runs on OpenMP threads over elements; each element's arithmetic
 * is independent of the others, so the result does not depend on the thread
 * count.
 */
#ifndef TOWER_PS_OPTIMIZER_H
#define TOWER_PS_OPTIMIZER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The optimizers, in the order of the table (ps/optimizer.c). */
typedef enum { OPT_SGD = 0, OPT_MOMENTUM = 1, OPT_ADAM = 2, OPT_RMSPROP = 3, OPT_ADAMW = 4, OPT_N_KINDS } OptimizerKind;

#define OPT_MAX_SLOTS 3   /* centered RMSProp: ms, mg, mom */
#define OPT_MAX_SCALARS 2 /* Adam: beta1_power, beta2_power */

/* The optimizer's hyperparameters.  Defaults (optimizer_config_defaults):
 * momentum 0.9 with Nesterov, as the classic multi-GPU MNIST network, and
 * TensorFlow's defaults for the others. */
typedef struct {
    OptimizerKind kind;
    float momentum;     /* m, used by OPT_MOMENTUM only */
    int nesterov;       /* 1: Nesterov momentum; 0: plain momentum */
    double beta1;       /* adam, adamw: 0.9, as typed (a Python float): adam takes its float32 (TF1's tensors), */
    double beta2;       /* adamw 1 - beta from it, then float32 (Keras); 0.999 */
    float epsilon;      /* adam: 1e-8 (TF1); adamw: 1e-7 (Keras) -- optimizer_config_defaults sets 1e-8 */
    float weight_decay; /* adamw: 0.004 (Keras) */
    float rms_decay;    /* rmsprop: rho, 0.9 */
    float rms_momentum; /* rmsprop: 0 */
    float rms_epsilon;  /* rmsprop: 1e-10 */
    int centered;       /* rmsprop: 1: ApplyCenteredRMSProp */
} OptimizerConfig;

/* One optimizer slot: a (n_params) array beside the variables, saved in
 * checkpoints as "<var>/<name>" (TensorFlow's slot variable names). */
typedef struct {
    const char *name;   /* "Momentum", "Adam", "Adam_1", "RMSProp", ... */
    const char *what;   /* for messages: "momentum accumulators", "first moments (m)", ... */
    float init;         /* the value the slot starts at */
    int momentum_field; /* 1: saved in the checkpoint's `momentum` section under the
                           variables' own names (format version 1's Momentum slots) */
} OptSlot;

/* What one step's elementwise update reads besides the arrays: computed
 * once per step on the host from the configuration, the scalars and the
 * learning rate (optimizer_prepare), the same for the CPU loops and the GPU
 * kernels, so both evaluate the same float32 expressions. */
typedef struct {
    float lr;           /* the schedule's learning rate */
    float lr_t;         /* adam, adamw: lr * sqrt(1 - beta2^t) / (1 - beta1^t) */
    float momentum;     /* momentum, rmsprop: the momentum */
    float one_minus_b1; /* adam, adamw: 1 - beta1;  rmsprop: unused */
    float one_minus_b2; /* adam, adamw: 1 - beta2;  rmsprop: 1 - rho */
    float epsilon;      /* adam, adamw, rmsprop */
    float wd;           /* adamw: the weight decay */
    int nesterov;       /* momentum */
    int centered;       /* rmsprop */
} OptStep;

/* One entry of the optimizer table: everything the parameter server,
 * checkpoints, replicas and the GPU placement know of an optimizer.  The
 * GPU kernel of entry k is entry k of the launch table in ps/ps_gpu.cu. */
typedef struct {
    const char *name;        /* the --optimizer value: "sgd", "momentum", "adam", "rmsprop", "adamw" */
    const char *tf_name;     /* TensorFlow's class, for docs and logs */
    /* The slots cfg keeps (their order is the order in ParamServer.slots). */
    int (*slots)(const OptimizerConfig *cfg, const OptSlot **slots);
    int n_scalars;           /* non-slot state saved in checkpoints (0 .. OPT_MAX_SCALARS) */
    const char *scalar_names[OPT_MAX_SCALARS];
    /* The scalars' values before the first step (may be NULL when n_scalars is 0). */
    void (*init_scalars)(const OptimizerConfig *cfg, float *scalars);
    /* The step's constants, from lr (the schedule's) and global_step (before
     * the step increments it). */
    void (*prepare)(const OptimizerConfig *cfg, const float *scalars, long global_step, float lr, OptStep *step);
    /* The elementwise update on the CPU: params (n_floats) and slots[k]
     * (n_floats each) in place, grads (n_floats).  Returns 0, or -1 when a
     * new variable is infinite or NaN (float_nonfinite in the same loop). */
    int (*apply)(float *params, float *const *slots, const float *grads, size_t n_floats, const OptStep *step);
    /* After every element of a step: advance the scalars (may be NULL). */
    void (*finish)(const OptimizerConfig *cfg, float *scalars);
    /* The `tower train` flags that set its options, space-separated ("momentum nesterov"; "" none): a flag
     * of another entry given with this one is refused (cmd/cmd_train.c), not silently ignored. */
    const char *flags;
} OptimizerI;

/* Learning-rate schedules: a table (lr_schedule_kind_from_name, like the
 * optimizers'), every entry a pure function of the step, computed in
 * float32 in the order its TensorFlow or Keras original computes it:
 *   exponential  tf.compat.v1.train.exponential_decay (the tutorial's):
 *                decay_steps <= 0 or decay_factor == 1 gives a constant
 *                initial_lr.  cifar10 uses initial_lr 0.1, decay_factor
 *                0.1, staircase, decay_steps = int(examples per epoch /
 *                global batch * epochs per decay).
 *   piecewise    tf.compat.v1.train.piecewise_constant, as tf_cnn_benchmarks'
 *                --piecewise_learning_rate_schedule builds it: values[0]
 *                while step <= boundaries[0], values[i] while
 *                boundaries[i-1] < step <= boundaries[i], the last value
 *                after (boundaries[i] = int(epoch_i * steps per epoch) - 1,
 *                so values[i] starts exactly at epoch_i).
 *   cosine       keras.optimizers.schedules.CosineDecay with
 *                initial_learning_rate 0 and warmup_target initial_lr
 *                when warmup_steps > 0: after the warmup, from initial_lr
 *                down to alpha * initial_lr over cosine_steps, then flat:
 *                t = min(step, cosine_steps + warmup_steps) - warmup_steps
 *                lr * ((1 - alpha) * 0.5 * (1 + cos(pi * t / cosine_steps)) + alpha)
 * Warmup (warmup_steps > 0; step < warmup_steps): exponential and piecewise
 * as tf_cnn_benchmarks' --num_learning_rate_warmup_epochs, the schedule's
 * first rate r0 times step / warmup_steps, (r0 * step) / warmup_steps, and
 * the schedule not shifted by it; cosine as Keras, r0 * (step /
 * warmup_steps), the cosine starting after it.
 * step is global_step + step_offset (0 but for a resumed run whose steps
 * hold another number of examples than the checkpoint's: the schedule's
 * step is then the examples consumed in this run's steps, so its epochs
 * carry over). */
typedef enum { LR_EXPONENTIAL = 0, LR_PIECEWISE = 1, LR_COSINE = 2, LR_N_KINDS } LrScheduleKind;

#define LR_MAX_PIECES 16 /* values of a piecewise schedule */

typedef struct {
    float initial_lr;   /* exponential, cosine: the rate at step 0 (after a warmup, its end) */
    float decay_factor; /* exponential */
    long decay_steps;   /* exponential, in synchronous steps */
    int staircase;      /* exponential: 1 floors the exponent */
    LrScheduleKind kind;
    int n_pieces;                            /* piecewise: values, in [1, LR_MAX_PIECES] */
    float values[LR_MAX_PIECES];             /* piecewise: (n_pieces) */
    long boundaries[LR_MAX_PIECES - 1];      /* piecewise: (n_pieces - 1) steps, increasing */
    long cosine_steps;                       /* cosine: > 0 */
    double alpha;                            /* cosine: the floor, a fraction of initial_lr, in [0, 1] (Python's
                                                double: 1 - alpha is taken in double, then float32) */
    long warmup_steps;                       /* every kind: 0 for none */
    long step_offset;                        /* the schedule runs at global_step + step_offset: 0, but for a run
                                              * resumed with another step size (the trainer's settle_lr_offset) */
} LrSchedule;

/* The schedule a name selects (exponential, piecewise, cosine): 0, or -1
 * with "--lr_schedule '<name>': expected exponential, piecewise or cosine" in err. */
int lr_schedule_kind_from_name(const char *name, LrScheduleKind *kind, char *err, size_t err_n_bytes);

/* The name of kind's table entry. */
const char *lr_schedule_name(LrScheduleKind kind);

/* tf_cnn_benchmarks' --piecewise_learning_rate_schedule "V0;E1;V1;E2;V2...":
 * rates (finite, > 0) and the epochs where each next one starts (finite,
 * >= 0, increasing).  Fills values (n_values of them, at most LR_MAX_PIECES)
 * and epochs (n_values - 1).  0, or -1 with one line in err naming the
 * piece. */
int lr_piecewise_parse(const char *text, float *values, double *epochs, int *n_values, char *err, size_t err_n_bytes);

/* One line for the log: the schedule's kind and its parameters in steps
 * (piecewise: the step each rate starts at, counted as the log lines count
 * them: the N-th step runs at global_step N - 1). */
void lr_schedule_describe(const LrSchedule *s, char *out, size_t out_n_bytes);

/* Fill cfg with momentum 0.9, Nesterov, and TensorFlow's defaults for
 * the other optimizers' hyperparameters (beta1 0.9, beta2 0.999, epsilon
 * 1e-8, weight_decay 0.004, rms_decay 0.9, rms_momentum 0, rms_epsilon
 * 1e-10, not centered). */
void optimizer_config_defaults(OptimizerConfig *cfg);

/* The table entry of kind, or NULL for a kind outside the table. */
const OptimizerI *optimizer_i(OptimizerKind kind);

/* The optimizer a name selects: one of the table's names (sgd, momentum,
 * adam, rmsprop, adamw).  Returns 0, or -1 for another name with
 * "--optimizer '<name>': expected sgd, momentum, adam, rmsprop or adamw" in err. */
int optimizer_kind_from_name(const char *name, OptimizerKind *kind, char *err, size_t err_n_bytes);

/* The table's name, but "nesterov" for momentum with Nesterov and
 * "rmsprop_centered" for centered RMSProp: a name for logs. */
const char *optimizer_name(const OptimizerConfig *cfg);

/* The learning rate at which the optimizer is usually run when the user
 * gives none: 0.01 for sgd and momentum, 0.001 (TensorFlow's and Keras's
 * default) for adam, adamw and rmsprop. */
float optimizer_default_lr(OptimizerKind kind);

/* Adam's epsilon when the user gives none: 1e-8 for adam (TF1's
 * AdamOptimizer), 1e-7 for adamw (Keras's AdamW, whose default it is). */
float optimizer_default_adam_epsilon(OptimizerKind kind);

/* The slots cfg's optimizer keeps (0 for sgd); *slots points to them. */
int optimizer_slots(const OptimizerConfig *cfg, const OptSlot **slots);

/* The learning rate for the step that reads global_step == `global_step`
 * (the value before the step increments it).  Pure; never fails. */
float lr_schedule_at(const LrSchedule *s, long global_step);

/* Apply one update of `cfg`'s optimizer: prepare, apply, finish of its
 * table entry.
 *   params  : (n_floats) the variables, updated in place
 *   slots   : [optimizer_slots(cfg)] -> (n_floats) each, updated in place
 *             (may be NULL for sgd)
 *   scalars : [n_scalars] the non-slot state, advanced (may be NULL when
 *             the entry has none)
 *   grads   : (n_floats) the gradient g (see the sign convention above)
 *   global_step : the step count before this step (adamw's t - 1)
 * Memory belongs to the caller.  Returns 0, or -1 when a new variable is
 * infinite or NaN (found in the same loop, by an integer test of each
 * result's exponent; the update is applied either way): a non-finite
 * gradient, or a learning rate that overflows the variables. */
int optimizer_apply(float *params, float *const *slots, float *scalars, const float *grads, size_t n_floats,
                    float lr, long global_step, const OptimizerConfig *cfg);

/* 1 when x is infinite or NaN (its exponent bits all ones), else 0: an
 * integer test that vectorizes inside the update and average loops, and
 * that -ffast-math cannot remove. */
static inline int float_nonfinite(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7f800000u) == 0x7f800000u;
}

/* x[i] = x[i] / n for every i of x (n_floats), n a count (towers, ranks), rounded as the divide rounds:
 * for a power of two by multiplying with 1 / n, which is exact (both round the same real number once) and
 * costs a fraction of a divide; else the divide.  Returns 1 when some result is infinite or NaN, else 0.
 * Two loops, not a test per element, so that each vectorizes. */
static inline int count_divide(float *x, size_t n_floats, int n) {
    const float n_f = (float)n, inv = 1.0f / n_f;
    int bad = 0;
    if (n > 0 && (n & (n - 1)) == 0) {
        for (size_t i = 0; i < n_floats; i++) {
            x[i] *= inv;
            bad |= float_nonfinite(x[i]);
        }
    } else {
        for (size_t i = 0; i < n_floats; i++) {
            x[i] /= n_f;
            bad |= float_nonfinite(x[i]);
        }
    }
    return bad;
}

/* The moving-average decay after `num_updates` updates:
 * min(decay, (1 + num_updates) / (10 + num_updates)) computed in float32 as
 * TensorFlow does; num_updates < 0 means "no num_updates rule" and returns
 * decay unchanged. */
float ema_decay_at(float decay, long num_updates);

/* shadow -= (shadow - params) * (1 - decay), elementwise.
 *   shadow : (n_floats) the moving averages, updated in place
 *   params : (n_floats) the variables just updated
 * Memory belongs to the caller.  Never fails. */
void ema_apply(float *shadow, const float *params, size_t n_floats, float decay);

#endif
