/* optimizer.c — optimizers, learning-rate schedule and moving average of the
 * parameter server (formulas and sign convention: ps/optimizer.h).
 *
 * Where it sits: called by ps/ps.c once per synchronous step, on the CPU,
 * after the tower gradients have been averaged.  It does not average,
 * allocate, or know which variable an element belongs to.
 */
#include "ps/optimizer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Below this many elements a loop runs on the calling thread: starting the
 * OpenMP team costs more than the loop. */
#define OPT_OMP_MIN_FLOATS 16384

void optimizer_config_defaults(OptimizerConfig *cfg) {
    cfg->kind = OPT_MOMENTUM;
    cfg->momentum = 0.9f;
    cfg->nesterov = 1;
}

const char *optimizer_name(const OptimizerConfig *cfg) {
    if (cfg->kind == OPT_SGD) return "sgd";
    return cfg->nesterov ? "nesterov" : "momentum";
}

int optimizer_kind_from_name(const char *name, OptimizerKind *kind, char *err, size_t err_n_bytes) {
    if (!strcmp(name, "sgd")) *kind = OPT_SGD;
    else if (!strcmp(name, "momentum")) *kind = OPT_MOMENTUM;
    else {
        snprintf(err, err_n_bytes, "--optimizer '%s': expected momentum or sgd", name);
        return -1;
    }
    return 0;
}

float lr_schedule_at(const LrSchedule *s, long global_step) {
    if (s->decay_steps <= 0 || s->decay_factor == 1.0f) return s->initial_lr;
    /* tf.train.exponential_decay casts step and decay_steps to float32. */
    float p = (float)global_step / (float)s->decay_steps;
    if (s->staircase) p = floorf(p);
    return s->initial_lr * powf(s->decay_factor, p);
}

int optimizer_apply(float *params, float *accum, const float *grads,
                    size_t n_floats, float lr, const OptimizerConfig *cfg) {
    const int par = n_floats >= OPT_OMP_MIN_FLOATS;
    int bad = 0; /* any new variable infinite or NaN: an integer OR, which vectorizes */
    if (cfg->kind == OPT_SGD) {
        #pragma omp parallel for schedule(static) if(par) reduction(|:bad)
        for (size_t i = 0; i < n_floats; i++) {
            params[i] -= grads[i] * lr;
            bad |= float_nonfinite(params[i]);
        }
        return bad ? -1 : 0;
    }
    const float m = cfg->momentum;
    if (cfg->nesterov) {
        #pragma omp parallel for schedule(static) if(par) reduction(|:bad)
        for (size_t i = 0; i < n_floats; i++) {
            float a = accum[i] * m + grads[i];
            accum[i] = a;
            params[i] -= grads[i] * lr + (a * m) * lr;
            bad |= float_nonfinite(params[i]);
        }
    } else {
        #pragma omp parallel for schedule(static) if(par) reduction(|:bad)
        for (size_t i = 0; i < n_floats; i++) {
            float a = accum[i] * m + grads[i];
            accum[i] = a;
            params[i] -= a * lr;
            bad |= float_nonfinite(params[i]);
        }
    }
    return bad ? -1 : 0;
}

float ema_decay_at(float decay, long num_updates) {
    if (num_updates < 0) return decay;
    /* TensorFlow casts num_updates to float32 before the division. */
    float n = (float)num_updates;
    float d = (1.0f + n) / (10.0f + n);
    return d < decay ? d : decay;
}

void ema_apply(float *shadow, const float *params, size_t n_floats, float decay) {
    const float one_minus_decay = 1.0f - decay;
    #pragma omp parallel for schedule(static) if(n_floats >= OPT_OMP_MIN_FLOATS)
    for (size_t i = 0; i < n_floats; i++)
        shadow[i] -= (shadow[i] - params[i]) * one_minus_decay;
}
