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
 *   learning rate (tf.train.exponential_decay), with the step read BEFORE
 *   global_step is incremented, as TensorFlow's apply_gradients reads it:
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

typedef enum { OPT_SGD = 0, OPT_MOMENTUM = 1 } OptimizerKind;

/* The optimizer's hyperparameters.  Defaults (optimizer_config_defaults):
 * momentum 0.9 with Nesterov, as the classic multi-GPU MNIST network. */
typedef struct {
    OptimizerKind kind;
    float momentum;   /* m, used by OPT_MOMENTUM only */
    int nesterov;     /* 1: Nesterov momentum; 0: plain momentum */
} OptimizerConfig;

/* Learning-rate schedule (tf.train.exponential_decay).  decay_steps <= 0 or
 * decay_factor == 1 gives a constant initial_lr.  cifar10 uses
 * initial_lr 0.1, decay_factor 0.1, staircase, decay_steps =
 * int(examples per epoch / global batch * epochs per decay). */
typedef struct {
    float initial_lr;
    float decay_factor;
    long decay_steps;  /* in synchronous steps */
    int staircase;     /* 1: floor the exponent */
} LrSchedule;

/* Fill cfg with momentum 0.9, Nesterov. */
void optimizer_config_defaults(OptimizerConfig *cfg);

/* The optimizer a name selects: "sgd" or "momentum" (the caller sets
 * momentum and nesterov).  Returns 0, or -1 for another name with
 * "--optimizer '<name>': expected momentum or sgd" in err. */
int optimizer_kind_from_name(const char *name, OptimizerKind *kind, char *err, size_t err_n_bytes);

/* "sgd", "momentum" or "nesterov" (momentum with Nesterov): a name for logs. */
const char *optimizer_name(const OptimizerConfig *cfg);

/* The learning rate for the step that reads global_step == `global_step`
 * (the value before the step increments it).  Pure; never fails. */
float lr_schedule_at(const LrSchedule *s, long global_step);

/* Apply one update of `cfg`'s optimizer.
 *   params : (n_floats) the variables, updated in place
 *   accum  : (n_floats) momentum accumulators, updated in place; unused and
 *            may be NULL for OPT_SGD
 *   grads  : (n_floats) the gradient g (see the sign convention above)
 * Memory belongs to the caller.  Returns 0, or -1 when a new variable is
 * infinite or NaN (found in the same loop, by an integer test of each
 * result's exponent; the update is applied either way): a non-finite
 * gradient, or a learning rate that overflows the variables. */
int optimizer_apply(float *params, float *accum, const float *grads,
                    size_t n_floats, float lr, const OptimizerConfig *cfg);

/* 1 when x is infinite or NaN (its exponent bits all ones), else 0: an
 * integer test that vectorizes inside the update and average loops, and
 * that -ffast-math cannot remove. */
static inline int float_nonfinite(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7f800000u) == 0x7f800000u;
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
