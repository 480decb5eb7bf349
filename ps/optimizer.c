/* optimizer.c — the optimizer table, the learning-rate schedule and the
 * moving average of the parameter server (formulas and sign convention:
 * ps/optimizer.h; the table and how to add an entry: docs/ps.md).
 *
 * Where it sits: called by ps/ps.c once per synchronous step, on the CPU,
 * after the tower gradients have been averaged.  This file is the only one
 * that tells optimizers apart: everything else goes through the table's
 * entries (slots, scalars, prepare/apply/finish).  The GPU twins of the
 * apply functions are ps/ps_gpu.cu's opt_kernels, in the same order.  It
 * does not average, allocate, or know which variable an element belongs to.
 */
#include "ps/optimizer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Below this many elements a loop runs on the calling thread: starting the
 * OpenMP team costs more than the loop. */
#define OPT_OMP_MIN_FLOATS 16384

void optimizer_config_defaults(OptimizerConfig *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->kind = OPT_MOMENTUM;
    cfg->momentum = 0.9f;
    cfg->nesterov = 1;
    cfg->beta1 = 0.9;
    cfg->beta2 = 0.999;
    cfg->epsilon = 1e-8f;
    cfg->weight_decay = 0.004f;
    cfg->rms_decay = 0.9f;
    cfg->rms_momentum = 0.0f;
    cfg->rms_epsilon = 1e-10f;
    cfg->centered = 0;
}

/* ---- sgd: var -= g * lr ---- */

static int sgd_slots(const OptimizerConfig *cfg, const OptSlot **slots) {
    (void)cfg;
    *slots = NULL;
    return 0;
}

static void sgd_prepare(const OptimizerConfig *cfg, const float *scalars, long global_step, float lr, OptStep *st) {
    (void)cfg, (void)scalars, (void)global_step;
    memset(st, 0, sizeof *st);
    st->lr = lr;
}

static int sgd_apply(float *params, float *const *slots, const float *grads, size_t n_floats, const OptStep *st) {
    (void)slots;
    const float lr = st->lr;
    int bad = 0;
    #pragma omp parallel for schedule(static) if(n_floats >= OPT_OMP_MIN_FLOATS) reduction(|:bad)
    for (size_t i = 0; i < n_floats; i++) {
        params[i] -= grads[i] * lr;
        bad |= float_nonfinite(params[i]);
    }
    return bad ? -1 : 0;
}

/* ---- momentum: accum = accum * m + g; var -= accum * lr (Nesterov: g * lr + (accum * m) * lr) ---- */

static const OptSlot momentum_slots_list[] = {{"Momentum", "momentum accumulators", 0.0f, 1}};

static int momentum_slots(const OptimizerConfig *cfg, const OptSlot **slots) {
    (void)cfg;
    *slots = momentum_slots_list;
    return 1;
}

static void momentum_prepare(const OptimizerConfig *cfg, const float *scalars, long global_step, float lr,
                             OptStep *st) {
    (void)scalars, (void)global_step;
    memset(st, 0, sizeof *st);
    st->lr = lr;
    st->momentum = cfg->momentum;
    st->nesterov = cfg->nesterov;
}

static int momentum_apply(float *params, float *const *slots, const float *grads, size_t n_floats,
                           const OptStep *st) {
    const int par = n_floats >= OPT_OMP_MIN_FLOATS;
    float *accum = slots[0];
    const float m = st->momentum, lr = st->lr;
    int bad = 0;
    if (st->nesterov) {
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

/* ---- adam (TF1's ApplyAdam) and adamw (Keras's AdamW): one elementwise update ---- */

static const OptSlot adam_slots_list[] = {{"Adam", "first moments (Adam)", 0.0f, 0},
                                          {"Adam_1", "second moments (Adam_1)", 0.0f, 0}};
static const OptSlot adamw_slots_list[] = {{"AdamW", "first moments (AdamW)", 0.0f, 0},
                                           {"AdamW_1", "second moments (AdamW_1)", 0.0f, 0}};

static int adam_slots(const OptimizerConfig *cfg, const OptSlot **slots) {
    (void)cfg;
    *slots = adam_slots_list;
    return 2;
}

static int adamw_slots(const OptimizerConfig *cfg, const OptSlot **slots) {
    (void)cfg;
    *slots = adamw_slots_list;
    return 2;
}

static void adam_init_scalars(const OptimizerConfig *cfg, float *scalars) {
    scalars[0] = (float)cfg->beta1; /* beta1_power */
    scalars[1] = (float)cfg->beta2; /* beta2_power */
}

/* TF1: every constant a float32 tensor, so 1 - beta in float32. */
static void adam_prepare(const OptimizerConfig *cfg, const float *scalars, long global_step, float lr, OptStep *st) {
    (void)global_step;
    memset(st, 0, sizeof *st);
    st->lr = lr;
    st->lr_t = lr * sqrtf(1.0f - scalars[1]) / (1.0f - scalars[0]);
    st->one_minus_b1 = 1.0f - (float)cfg->beta1;
    st->one_minus_b2 = 1.0f - (float)cfg->beta2;
    st->epsilon = cfg->epsilon;
}

static void adam_finish(const OptimizerConfig *cfg, float *scalars) {
    scalars[0] *= (float)cfg->beta1;
    scalars[1] *= (float)cfg->beta2;
}

/* Keras: beta^t with t = iterations + 1 in float32 (ops.power), 1 - beta of
 * Python floats (double) cast to float32, weight decay with lr. */
static void adamw_prepare(const OptimizerConfig *cfg, const float *scalars, long global_step, float lr, OptStep *st) {
    (void)scalars;
    memset(st, 0, sizeof *st);
    const float t = (float)(global_step + 1);
    const float b1_power = powf((float)cfg->beta1, t), b2_power = powf((float)cfg->beta2, t);
    st->lr = lr;
    st->lr_t = lr * sqrtf(1.0f - b2_power) / (1.0f - b1_power);
    st->one_minus_b1 = (float)(1.0 - cfg->beta1);
    st->one_minus_b2 = (float)(1.0 - cfg->beta2);
    st->epsilon = cfg->epsilon;
    st->wd = cfg->weight_decay;
}

static int adam_apply(float *params, float *const *slots, const float *grads, size_t n_floats, const OptStep *st) {
    float *mm = slots[0], *vv = slots[1];
    const float lr_t = st->lr_t, c1 = st->one_minus_b1, c2 = st->one_minus_b2, eps = st->epsilon;
    int bad = 0;
    #pragma omp parallel for schedule(static) if(n_floats >= OPT_OMP_MIN_FLOATS) reduction(|:bad)
    for (size_t i = 0; i < n_floats; i++) {
        const float g = grads[i];
        const float m = mm[i] + (g - mm[i]) * c1;
        const float v = vv[i] + (g * g - vv[i]) * c2;
        mm[i] = m;
        vv[i] = v;
        params[i] -= (m * lr_t) / (sqrtf(v) + eps);
        bad |= float_nonfinite(params[i]);
    }
    return bad ? -1 : 0;
}

static int adamw_apply(float *params, float *const *slots, const float *grads, size_t n_floats, const OptStep *st) {
    float *mm = slots[0], *vv = slots[1];
    const float lr = st->lr, wd = st->wd;
    const float lr_t = st->lr_t, c1 = st->one_minus_b1, c2 = st->one_minus_b2, eps = st->epsilon;
    int bad = 0;
    #pragma omp parallel for schedule(static) if(n_floats >= OPT_OMP_MIN_FLOATS) reduction(|:bad)
    for (size_t i = 0; i < n_floats; i++) {
        const float g = grads[i];
        const float p = params[i] - (params[i] * wd) * lr;
        const float m = mm[i] + (g - mm[i]) * c1;
        const float v = vv[i] + (g * g - vv[i]) * c2;
        mm[i] = m;
        vv[i] = v;
        params[i] = p - (m * lr_t) / (sqrtf(v) + eps);
        bad |= float_nonfinite(params[i]);
    }
    return bad ? -1 : 0;
}

/* ---- rmsprop (TF1's ApplyRMSProp / ApplyCenteredRMSProp) ---- */

static const OptSlot rmsprop_slots_list[] = {{"RMSProp", "mean squares (RMSProp)", 1.0f, 0},
                                             {"RMSProp_1", "momentum (RMSProp_1)", 0.0f, 0}};
static const OptSlot rmsprop_centered_slots_list[] = {{"RMSProp", "mean squares (RMSProp)", 1.0f, 0},
                                                      {"RMSProp_1", "mean gradients (RMSProp_1)", 0.0f, 0},
                                                      {"RMSProp_2", "momentum (RMSProp_2)", 0.0f, 0}};

static int rmsprop_slots(const OptimizerConfig *cfg, const OptSlot **slots) {
    *slots = cfg->centered ? rmsprop_centered_slots_list : rmsprop_slots_list;
    return cfg->centered ? 3 : 2;
}

static void rmsprop_prepare(const OptimizerConfig *cfg, const float *scalars, long global_step, float lr,
                            OptStep *st) {
    (void)scalars, (void)global_step;
    memset(st, 0, sizeof *st);
    st->lr = lr;
    st->momentum = cfg->rms_momentum;
    st->one_minus_b2 = 1.0f - cfg->rms_decay;
    st->epsilon = cfg->rms_epsilon;
    st->centered = cfg->centered;
}

static int rmsprop_apply(float *params, float *const *slots, const float *grads, size_t n_floats, const OptStep *st) {
    const int par = n_floats >= OPT_OMP_MIN_FLOATS;
    float *ms = slots[0];
    const float lr = st->lr, mom_m = st->momentum, c = st->one_minus_b2, eps = st->epsilon;
    int bad = 0;
    if (st->centered) {
        float *mg = slots[1], *mom = slots[2];
        #pragma omp parallel for schedule(static) if(par) reduction(|:bad)
        for (size_t i = 0; i < n_floats; i++) {
            const float g = grads[i];
            const float s = ms[i] + (g * g - ms[i]) * c;
            const float a = mg[i] + (g - mg[i]) * c;
            const float den = (s - a * a) + eps;
            const float u = mom[i] * mom_m + (g * lr) / sqrtf(den);
            ms[i] = s;
            mg[i] = a;
            mom[i] = u;
            params[i] -= u;
            bad |= float_nonfinite(params[i]);
        }
    } else {
        float *mom = slots[1];
        #pragma omp parallel for schedule(static) if(par) reduction(|:bad)
        for (size_t i = 0; i < n_floats; i++) {
            const float g = grads[i];
            const float s = ms[i] + (g * g - ms[i]) * c;
            const float u = mom[i] * mom_m + (g * lr) / sqrtf(s + eps);
            ms[i] = s;
            mom[i] = u;
            params[i] -= u;
            bad |= float_nonfinite(params[i]);
        }
    }
    return bad ? -1 : 0;
}

/* ---- the table ---- */

static const OptimizerI optimizers[OPT_N_KINDS] = {
    [OPT_SGD] = {"sgd", "GradientDescentOptimizer", sgd_slots, 0, {NULL, NULL}, NULL, sgd_prepare, sgd_apply, NULL,
                 ""},
    [OPT_MOMENTUM] = {"momentum", "MomentumOptimizer", momentum_slots, 0, {NULL, NULL}, NULL, momentum_prepare,
                      momentum_apply, NULL, "momentum nesterov"},
    [OPT_ADAM] = {"adam", "AdamOptimizer", adam_slots, 2, {"beta1_power", "beta2_power"}, adam_init_scalars,
                  adam_prepare, adam_apply, adam_finish, "adam_beta1 adam_beta2 adam_epsilon"},
    [OPT_RMSPROP] = {"rmsprop", "RMSPropOptimizer", rmsprop_slots, 0, {NULL, NULL}, NULL, rmsprop_prepare,
                     rmsprop_apply, NULL, "rmsprop_decay rmsprop_momentum rmsprop_epsilon rmsprop_centered"},
    [OPT_ADAMW] = {"adamw", "tf.keras.optimizers.AdamW", adamw_slots, 0, {NULL, NULL}, NULL, adamw_prepare,
                   adamw_apply, NULL, "adam_beta1 adam_beta2 adam_epsilon weight_decay"},
};

/* The learning rates used when none is given (optimizer_default_lr). */
static const float default_lrs[OPT_N_KINDS] = {
    [OPT_SGD] = 0.01f, [OPT_MOMENTUM] = 0.01f, [OPT_ADAM] = 0.001f, [OPT_RMSPROP] = 0.001f, [OPT_ADAMW] = 0.001f};

const OptimizerI *optimizer_i(OptimizerKind kind) {
    if ((int)kind < 0 || kind >= OPT_N_KINDS) return NULL;
    return &optimizers[kind];
}

float optimizer_default_lr(OptimizerKind kind) {
    if ((int)kind < 0 || kind >= OPT_N_KINDS) return 0.01f;
    return default_lrs[kind];
}

float optimizer_default_adam_epsilon(OptimizerKind kind) { return kind == OPT_ADAMW ? 1e-7f : 1e-8f; }

int optimizer_slots(const OptimizerConfig *cfg, const OptSlot **slots) {
    return optimizers[cfg->kind].slots(cfg, slots);
}

const char *optimizer_name(const OptimizerConfig *cfg) {
    if (cfg->kind == OPT_MOMENTUM && cfg->nesterov) return "nesterov";
    if (cfg->kind == OPT_RMSPROP && cfg->centered) return "rmsprop_centered";
    const OptimizerI *o = optimizer_i(cfg->kind);
    return o ? o->name : "unknown";
}

int optimizer_kind_from_name(const char *name, OptimizerKind *kind, char *err, size_t err_n_bytes) {
    for (int k = 0; k < OPT_N_KINDS; k++)
        if (!strcmp(name, optimizers[k].name)) {
            *kind = (OptimizerKind)k;
            return 0;
        }
    snprintf(err, err_n_bytes, "--optimizer '%s': expected sgd, momentum, adam, rmsprop or adamw", name);
    return -1;
}

/* ---- learning-rate schedules: the table ---- */

/* tf_cnn_benchmarks' warmup: init_lr * float32(step) / float32(warmup_steps). */
static float warmup_linear(float r0, long step, long warmup_steps) {
    return r0 * (float)step / (float)warmup_steps;
}

static float exponential_at(const LrSchedule *s, long step) {
    if (step < s->warmup_steps) return warmup_linear(s->initial_lr, step, s->warmup_steps);
    if (s->decay_steps <= 0 || s->decay_factor == 1.0f) return s->initial_lr;
    /* tf.train.exponential_decay casts step and decay_steps to float32. */
    float p = (float)step / (float)s->decay_steps;
    if (s->staircase) p = floorf(p);
    return s->initial_lr * powf(s->decay_factor, p);
}

static float piecewise_at(const LrSchedule *s, long step) {
    if (step < s->warmup_steps) return warmup_linear(s->values[0], step, s->warmup_steps);
    for (int i = 0; i < s->n_pieces - 1; i++)
        if (step <= s->boundaries[i]) return s->values[i];
    return s->values[s->n_pieces - 1];
}

/* Keras's CosineDecay(0, cosine_steps, alpha, warmup_target=initial_lr,
 * warmup_steps) op for op: the step and both lengths as float32; 1 - alpha
 * is Python's (double, then float32 where it meets a tensor). */
static float cosine_at(const LrSchedule *s, long step) {
    const float lr = s->initial_lr, decay_steps = (float)s->cosine_steps, warmup = (float)s->warmup_steps;
    float t = (float)step;
    if (s->warmup_steps > 0) {
        t = fminf(t, decay_steps + warmup);
        if (t < warmup) return (lr - 0.0f) * (t / warmup) + 0.0f;
        t = t - warmup;
    } else {
        t = fminf(t, decay_steps);
    }
    const float pi = 3.14159265358979323846f, one_minus_alpha = (float)(1.0 - s->alpha), alpha = (float)s->alpha;
    const float cosine_decayed = 0.5f * (1.0f + cosf(pi * (t / decay_steps)));
    return lr * (one_minus_alpha * cosine_decayed + alpha);
}

typedef struct {
    const char *name;
    float (*at)(const LrSchedule *s, long step);
} LrScheduleI;

static const LrScheduleI lr_schedules[LR_N_KINDS] = {
    [LR_EXPONENTIAL] = {"exponential", exponential_at},
    [LR_PIECEWISE] = {"piecewise", piecewise_at},
    [LR_COSINE] = {"cosine", cosine_at},
};

float lr_schedule_at(const LrSchedule *s, long global_step) {
    return lr_schedules[s->kind].at(s, global_step + s->step_offset);
}

const char *lr_schedule_name(LrScheduleKind kind) { return lr_schedules[kind].name; }

int lr_schedule_kind_from_name(const char *name, LrScheduleKind *kind, char *err, size_t err_n_bytes) {
    for (int k = 0; k < LR_N_KINDS; k++)
        if (!strcmp(name, lr_schedules[k].name)) {
            *kind = (LrScheduleKind)k;
            return 0;
        }
    snprintf(err, err_n_bytes, "--lr_schedule '%s': expected exponential, piecewise or cosine", name);
    return -1;
}

int lr_piecewise_parse(const char *text, float *values, double *epochs, int *n_values, char *err, size_t err_n_bytes) {
    *n_values = 0;
    const char *p = text;
    for (int i = 0;; i++) {
        const char *end = strchr(p, ';');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        char piece[64];
        if (len == 0 || len >= sizeof piece) {
            snprintf(err, err_n_bytes, "--piecewise_learning_rate_schedule: piece %d is %s (expected RATE;EPOCH;RATE;...)",
                     i + 1, len ? "too long" : "empty");
            return -1;
        }
        memcpy(piece, p, len);
        piece[len] = '\0';
        char *stop;
        errno = 0;
        const double v = strtod(piece, &stop);
        const int is_rate = i % 2 == 0;
        if (*stop || errno == ERANGE || !isfinite(v) || (is_rate ? !(v > 0 && (float)v > 0) : v < 0)) {
            snprintf(err, err_n_bytes, "--piecewise_learning_rate_schedule: piece %d '%s': expected %s", i + 1, piece,
                     is_rate ? "a learning rate > 0" : "an epoch >= 0");
            return -1;
        }
        if (is_rate) {
            if (*n_values == LR_MAX_PIECES) {
                snprintf(err, err_n_bytes, "--piecewise_learning_rate_schedule: more than %d rates", LR_MAX_PIECES);
                return -1;
            }
            values[(*n_values)++] = (float)v;
        } else {
            if (*n_values >= 2 && v <= epochs[*n_values - 2]) {
                snprintf(err, err_n_bytes, "--piecewise_learning_rate_schedule: piece %d: epoch %s is not after "
                         "epoch %g (the epochs must increase)", i + 1, piece, epochs[*n_values - 2]);
                return -1;
            }
            epochs[*n_values - 1] = v;
        }
        if (!end) {
            if (!is_rate) {
                snprintf(err, err_n_bytes, "--piecewise_learning_rate_schedule: ends with epoch %s, expected a rate "
                         "after it (an odd number of pieces: RATE;EPOCH;RATE;...)", piece);
                return -1;
            }
            return 0;
        }
        p = end + 1;
    }
}

void lr_schedule_describe(const LrSchedule *s, char *out, size_t out_n_bytes) {
    size_t used = 0;
#define LR_PUT(...)                                                                              \
    do {                                                                                        \
        if (used < out_n_bytes) used += (size_t)snprintf(out + used, out_n_bytes - used, __VA_ARGS__); \
    } while (0)
    switch (s->kind) {
    case LR_EXPONENTIAL:
        if (s->decay_steps > 0 && s->decay_factor != 1.0f)
            LR_PUT("%s: %g, times %g every %ld steps%s", lr_schedule_name(s->kind), s->initial_lr, s->decay_factor,
                   s->decay_steps, s->staircase ? " (staircase)" : "");
        else LR_PUT("constant %g", s->initial_lr);
        break;
    case LR_PIECEWISE: /* values[i] from global_step boundaries[i-1] + 1, the step the log lines count one more */
        LR_PUT("%s: %g", lr_schedule_name(s->kind), s->values[0]);
        for (int i = 1; i < s->n_pieces; i++)
            LR_PUT(", %g from step %ld", s->values[i], s->boundaries[i - 1] + 2 - s->step_offset);
        break;
    case LR_COSINE:
        LR_PUT("%s: from %g to %g over %ld steps", lr_schedule_name(s->kind), s->initial_lr, s->initial_lr * s->alpha,
               s->cosine_steps);
        break;
    default:
        LR_PUT("unknown");
    }
    if (s->warmup_steps > 0)
        LR_PUT("; linear warmup from 0 over the first %ld steps%s", s->warmup_steps,
               s->kind == LR_COSINE ? " (the cosine starts after it)" : "");
    if (s->step_offset != 0)
        LR_PUT("; resumed with another step size: the schedule's step is this run's step %+ld (the examples "
               "consumed, in this run's steps)", s->step_offset);
#undef LR_PUT
}

int optimizer_apply(float *params, float *const *slots, float *scalars, const float *grads, size_t n_floats,
                    float lr, long global_step, const OptimizerConfig *cfg) {
    const OptimizerI *o = &optimizers[cfg->kind];
    OptStep st;
    o->prepare(cfg, scalars, global_step, lr, &st);
    int rc = o->apply(params, slots, grads, n_floats, &st);
    if (o->finish) o->finish(cfg, scalars);
    return rc;
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
