/* test_ps_optimizer.c — ps/optimizer.{h,c} against arithmetic done by hand.
 *
 * Where it sits: tests of the last stage of a synchronous step (the update
 * of the master variables).  Every expected value below is written out step
 * by step in double in this file; none is produced by the code under test.
 * Adam, AdamW and RMSProp (plain and centered, with and without momentum)
 * run five steps and are compared with their closed forms computed in
 * double, with checks aimed at the classic slips: Adam's bias correction,
 * AdamW's decay with lr rather than lr_t, RMSProp's mean squares starting
 * at one.  It does not test averaging or checkpoints (test_ps_average.c,
 * test_ps_checkpoint.c).
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/optimizer.h"

#include "tests/check.h"

/* |got - want| within rel relative (or 1e-12 absolute near 0). */
static int close_to(double got, double want, double rel) {
    return fabs(got - want) <= rel * fabs(want) + 1e-12;
}

/* Two scalars: x starts at 0.5 with gradients 0.2, -0.1, 0.4;
 *              y starts at -1.0 with gradients -2.0, 1.0, 0.5.  lr 0.1. */
static const float X0 = 0.5f, Y0 = -1.0f;
static const float GX[3] = {0.2f, -0.1f, 0.4f};
static const float GY[3] = {-2.0f, 1.0f, 0.5f};

static void run3(OptimizerKind kind, int nesterov, float out_p[3][2], float out_a[3][2], int with_accum) {
    OptimizerConfig cfg = {.kind = kind, .momentum = 0.9f, .nesterov = nesterov};
    float p[2] = {X0, Y0}, a[2] = {0, 0};
    float *slots[1] = {a};
    for (int s = 0; s < 3; s++) {
        float g[2] = {GX[s], GY[s]};
        optimizer_apply(p, with_accum ? slots : NULL, NULL, g, 2, 0.1f, s, &cfg);
        out_p[s][0] = p[0];
        out_p[s][1] = p[1];
        out_a[s][0] = a[0];
        out_a[s][1] = a[1];
    }
}

static void test_sgd(void) {
    /* var -= lr * g
     * x: 0.5 - 0.1*0.2 = 0.48;  0.48 - 0.1*(-0.1) = 0.49;  0.49 - 0.1*0.4 = 0.45
     * y: -1 - 0.1*(-2) = -0.8; -0.8 - 0.1*1 = -0.9;       -0.9 - 0.1*0.5 = -0.95 */
    const double want_x[3] = {0.48, 0.49, 0.45}, want_y[3] = {-0.8, -0.9, -0.95};
    float p[3][2], a[3][2];
    run3(OPT_SGD, 0, p, a, 0);
    for (int s = 0; s < 3; s++) {
        CHECK(close_to(p[s][0], want_x[s], 1e-6), "sgd step %d x = %.9g, want %.9g", s + 1, p[s][0], want_x[s]);
        CHECK(close_to(p[s][1], want_y[s], 1e-6), "sgd step %d y = %.9g, want %.9g", s + 1, p[s][1], want_y[s]);
    }
}

static void test_momentum_plain(void) {
    /* accum = 0.9 * accum + g;  var -= lr * accum
     * x: a1 = 0.2,                   x1 = 0.5   - 0.1*0.2   = 0.48
     *    a2 = 0.9*0.2 - 0.1 = 0.08,  x2 = 0.48  - 0.1*0.08  = 0.472
     *    a3 = 0.9*0.08 + 0.4 = 0.472, x3 = 0.472 - 0.1*0.472 = 0.4248
     * y: a1 = -2,                    y1 = -1    + 0.2       = -0.8
     *    a2 = -1.8 + 1 = -0.8,       y2 = -0.8  + 0.08      = -0.72
     *    a3 = -0.72 + 0.5 = -0.22,   y3 = -0.72 + 0.022     = -0.698 */
    const double want_x[3] = {0.48, 0.472, 0.4248}, want_y[3] = {-0.8, -0.72, -0.698};
    const double want_ax[3] = {0.2, 0.08, 0.472}, want_ay[3] = {-2.0, -0.8, -0.22};
    float p[3][2], a[3][2];
    run3(OPT_MOMENTUM, 0, p, a, 1);
    for (int s = 0; s < 3; s++) {
        CHECK(close_to(p[s][0], want_x[s], 1e-6), "momentum step %d x = %.9g, want %.9g", s + 1, p[s][0], want_x[s]);
        CHECK(close_to(p[s][1], want_y[s], 1e-6), "momentum step %d y = %.9g, want %.9g", s + 1, p[s][1], want_y[s]);
        CHECK(close_to(a[s][0], want_ax[s], 1e-6), "momentum step %d accum x = %.9g, want %.9g", s + 1, a[s][0], want_ax[s]);
        CHECK(close_to(a[s][1], want_ay[s], 1e-6), "momentum step %d accum y = %.9g, want %.9g", s + 1, a[s][1], want_ay[s]);
    }
}

static void test_momentum_nesterov(void) {
    /* accum = 0.9 * accum + g;  var -= lr * (g + 0.9 * accum)
     * x: a1 = 0.2,   x1 = 0.5    - 0.1*(0.2  + 0.18)   = 0.462
     *    a2 = 0.08,  x2 = 0.462  - 0.1*(-0.1 + 0.072)  = 0.4648
     *    a3 = 0.472, x3 = 0.4648 - 0.1*(0.4  + 0.4248) = 0.38232
     * y: a1 = -2,    y1 = -1     - 0.1*(-2   - 1.8)    = -0.62
     *    a2 = -0.8,  y2 = -0.62  - 0.1*(1    - 0.72)   = -0.648
     *    a3 = -0.22, y3 = -0.648 - 0.1*(0.5  - 0.198)  = -0.6782 */
    const double want_x[3] = {0.462, 0.4648, 0.38232}, want_y[3] = {-0.62, -0.648, -0.6782};
    float p[3][2], a[3][2];
    run3(OPT_MOMENTUM, 1, p, a, 1);
    for (int s = 0; s < 3; s++) {
        CHECK(close_to(p[s][0], want_x[s], 1e-6), "nesterov step %d x = %.9g, want %.9g", s + 1, p[s][0], want_x[s]);
        CHECK(close_to(p[s][1], want_y[s], 1e-6), "nesterov step %d y = %.9g, want %.9g", s + 1, p[s][1], want_y[s]);
    }
    CHECK(close_to(a[2][0], 0.472, 1e-6) && close_to(a[2][1], -0.22, 1e-6),
          "nesterov accum after 3 steps = (%.9g, %.9g), want (0.472, -0.22)", a[2][0], a[2][1]);
}

/* Large arrays (OpenMP path): bitwise equal to a serial loop written in
 * TensorFlow's float evaluation order, on 1 and 2 threads. */
static void test_large_arrays_match_tf_order(void) {
    const size_t n = 100003;
    float *p = malloc(n * sizeof *p), *a = malloc(n * sizeof *a), *g = malloc(n * sizeof *g);
    float *rp = malloc(n * sizeof *rp), *ra = malloc(n * sizeof *ra);
    unsigned s = 12345u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        p[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 3.0f;
        s = s * 1103515245u + 12345u;
        g[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.01f;
        a[i] = g[i] * 7.0f;
    }
    const float lr = 0.0375f, m = 0.9f;
    for (int nesterov = 0; nesterov <= 1; nesterov++) {
        for (int threads = 1; threads <= 2; threads++) {
            memcpy(rp, p, n * sizeof *p);
            memcpy(ra, a, n * sizeof *a);
            float *xp = malloc(n * sizeof *xp), *xa = malloc(n * sizeof *xa);
            memcpy(xp, p, n * sizeof *p);
            memcpy(xa, a, n * sizeof *a);
            for (size_t i = 0; i < n; i++) {
                float acc = ra[i] * m + g[i];
                ra[i] = acc;
                if (nesterov) rp[i] = rp[i] - (g[i] * lr + (acc * m) * lr);
                else rp[i] = rp[i] - acc * lr;
            }
            omp_set_num_threads(threads);
            OptimizerConfig cfg = {.kind = OPT_MOMENTUM, .momentum = m, .nesterov = nesterov};
            float *slots[1] = {xa};
            optimizer_apply(xp, slots, NULL, g, n, lr, 0, &cfg);
            CHECK(memcmp(xp, rp, n * sizeof *rp) == 0 && memcmp(xa, ra, n * sizeof *ra) == 0,
                  "momentum (nesterov=%d) on %d threads differs from the serial TF-order loop", nesterov, threads);
            /* and within float tolerance of the double formula */
            size_t bad = 0;
            for (size_t i = 0; i < n; i++) {
                double acc = (double)a[i] * m + g[i];
                double want = nesterov ? p[i] - lr * ((double)g[i] + m * acc) : p[i] - lr * acc;
                if (fabs(xp[i] - want) > 1e-6 * fabs(want) + 1e-7) bad++;
            }
            CHECK(bad == 0, "%zu elements off the double formula (nesterov=%d)", bad, nesterov);
            free(xp);
            free(xa);
        }
    }
    /* sgd, large */
    memcpy(rp, p, n * sizeof *p);
    for (size_t i = 0; i < n; i++) rp[i] = rp[i] - g[i] * lr;
    OptimizerConfig sgd = {.kind = OPT_SGD, .momentum = 0.9f, .nesterov = 1};
    omp_set_num_threads(2);
    optimizer_apply(p, NULL, NULL, g, n, lr, 0, &sgd);
    CHECK(memcmp(p, rp, n * sizeof *rp) == 0, "sgd on 2 threads differs from the serial loop");
    free(p); free(a); free(g); free(rp); free(ra);
}

static void test_lr_schedule(void) {
    /* cifar10: lr0 0.1, factor 0.1, decay_steps int(50000 / 128 * 350) = 136718 */
    LrSchedule st = {0.1f, 0.1f, 136718, 1};
    struct { long step; double want; } stair[] = {
        {0, 0.1}, {1, 0.1}, {136717, 0.1},            /* floor(136717/136718) = 0 */
        {136718, 0.1 * 0.1}, {136719, 0.01},          /* exactly at the boundary: 0.1^1 */
        {273435, 0.01}, {273436, 0.1 * 0.1 * 0.1},    /* 0.1^2 */
    };
    for (size_t i = 0; i < sizeof stair / sizeof stair[0]; i++) {
        float lr = lr_schedule_at(&st, stair[i].step);
        CHECK(close_to(lr, stair[i].want, 1e-6), "staircase lr at step %ld = %.9g, want %.9g", stair[i].step, lr, stair[i].want);
    }
    LrSchedule smooth = {0.1f, 0.1f, 136718, 0};
    struct { long step; double want; } sm[] = {
        {0, 0.1},
        {68359, 0.1 * 0.31622776601683794},           /* 0.1 * 0.1^0.5 */
        {136718, 0.01},                               /* 0.1 * 0.1^1 */
        {205077, 0.1 * 0.1 * 0.31622776601683794},    /* 0.1 * 0.1^1.5 */
    };
    for (size_t i = 0; i < sizeof sm / sizeof sm[0]; i++) {
        float lr = lr_schedule_at(&smooth, sm[i].step);
        CHECK(close_to(lr, sm[i].want, 1e-6), "smooth lr at step %ld = %.9g, want %.9g", sm[i].step, lr, sm[i].want);
    }
    /* a small staircase with boundaries at 3 steps: 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25 */
    LrSchedule small = {1.0f, 0.5f, 3, 1};
    const double want_small[7] = {1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25};
    for (long step = 0; step < 7; step++) {
        float lr = lr_schedule_at(&small, step);
        CHECK(lr == (float)want_small[step], "small staircase lr at step %ld = %.9g, want %.9g", step, lr, want_small[step]);
    }
    /* constant schedules */
    LrSchedule c1 = {0.01f, 0.1f, 0, 1}, c2 = {0.01f, 1.0f, 100, 0};
    CHECK(lr_schedule_at(&c1, 1000000) == 0.01f, "decay_steps 0 must be constant");
    CHECK(lr_schedule_at(&c2, 1000000) == 0.01f, "factor 1 must be constant");
}

/* The other entries of the schedule table, against their closed forms. */
static void test_lr_schedules(void) {
    /* piecewise: 0.1 through step 9, 0.01 through 19, then 0.001 (tf.train.piecewise_constant's x <= boundary) */
    LrSchedule pw = {.kind = LR_PIECEWISE, .n_pieces = 3, .values = {0.1f, 0.01f, 0.001f}, .boundaries = {9, 19}};
    for (long step = 0; step < 40; step++) {
        const float want = step <= 9 ? 0.1f : step <= 19 ? 0.01f : 0.001f;
        CHECK(lr_schedule_at(&pw, step) == want, "piecewise at step %ld: %.9g, want %.9g", step,
              lr_schedule_at(&pw, step), want);
    }
    /* The log line names the step each rate starts at as the log lines count steps (the N-th runs at global_step
     * N - 1): 0.01 first at global_step 10, the 11th step (it said "from step 10", a QA run found). */
    char line[256];
    lr_schedule_describe(&pw, line, sizeof line);
    CHECK(!strcmp(line, "piecewise: 0.1, 0.01 from step 11, 0.001 from step 21") && lr_schedule_at(&pw, 11 - 1) == 0.01f &&
              lr_schedule_at(&pw, 11 - 2) == 0.1f && lr_schedule_at(&pw, 21 - 1) == 0.001f,
          "piecewise's line: '%s'", line);
    /* A resumed run's offset: the schedule at global_step + step_offset, and the line in this run's steps. */
    LrSchedule shifted = pw;
    shifted.step_offset = -4;
    lr_schedule_describe(&shifted, line, sizeof line);
    CHECK(lr_schedule_at(&shifted, 13) == 0.1f && lr_schedule_at(&shifted, 14) == 0.01f &&
              !strncmp(line, "piecewise: 0.1, 0.01 from step 15, 0.001 from step 25; resumed with another step size", 85),
          "piecewise with step_offset -4: %.9g %.9g '%s'", lr_schedule_at(&shifted, 13), lr_schedule_at(&shifted, 14), line);
    /* with tf_cnn_benchmarks' warmup over 5 steps: (0.1 * step) / 5, then the schedule, not shifted */
    pw.warmup_steps = 5;
    for (long step = 0; step < 5; step++)
        CHECK(lr_schedule_at(&pw, step) == 0.1f * (float)step / 5.0f, "piecewise warmup at step %ld: %.9g", step,
              lr_schedule_at(&pw, step));
    CHECK(lr_schedule_at(&pw, 5) == 0.1f && lr_schedule_at(&pw, 10) == 0.01f, "piecewise after its warmup");
    /* exponential with a warmup: the staircase counts from step 0 */
    LrSchedule ex = {.initial_lr = 0.1f, .decay_factor = 0.5f, .decay_steps = 10, .staircase = 1, .warmup_steps = 4};
    CHECK(lr_schedule_at(&ex, 0) == 0.0f && close_to(lr_schedule_at(&ex, 2), 0.05, 1e-7), "exponential warmup");
    CHECK(lr_schedule_at(&ex, 4) == 0.1f && lr_schedule_at(&ex, 9) == 0.1f && lr_schedule_at(&ex, 10) == 0.05f,
          "exponential after its warmup: %.9g %.9g %.9g", lr_schedule_at(&ex, 4), lr_schedule_at(&ex, 9),
          lr_schedule_at(&ex, 10));
    /* cosine from 0.1 to alpha 0.1 of it over 100 steps: lr (0.9 (1 + cos(pi t / 100)) / 2 + 0.1) */
    LrSchedule cs = {.kind = LR_COSINE, .initial_lr = 0.1f, .cosine_steps = 100, .alpha = 0.1f};
    for (int w = 0; w < 2; w++) {
        cs.warmup_steps = w ? 10 : 0;
        for (long step = 0; step < 130; step++) {
            double want;
            if (step < cs.warmup_steps) {
                want = 0.1 * step / cs.warmup_steps; /* Keras's warmup from 0 to the rate */
            } else {
                const double t = fmin((double)(step - cs.warmup_steps), 100.0);
                want = 0.1 * (0.9 * 0.5 * (1.0 + cos(M_PI * t / 100.0)) + 0.1);
            }
            CHECK(close_to(lr_schedule_at(&cs, step), want, 1e-6), "cosine (warmup %ld) at step %ld: %.9g, want %.9g",
                  cs.warmup_steps, step, lr_schedule_at(&cs, step), want);
        }
    }
    CHECK(lr_schedule_at(&cs, 10) == 0.1f && close_to(lr_schedule_at(&cs, 60), 0.055, 1e-6) &&
          close_to(lr_schedule_at(&cs, 1000000), 0.01, 1e-6), "cosine's three points");

    /* tf_cnn_benchmarks' list, and what it refuses */
    float values[LR_MAX_PIECES];
    double epochs[LR_MAX_PIECES];
    int n = -1;
    char err[256] = "";
    CHECK(lr_piecewise_parse("0.1;80;0.01;120.5;0.001", values, epochs, &n, err, sizeof err) == 0, "%s", err);
    CHECK(n == 3 && values[0] == 0.1f && values[1] == 0.01f && values[2] == 0.001f && epochs[0] == 80 &&
          epochs[1] == 120.5, "parsed %d values", n);
    CHECK(lr_piecewise_parse("0.5", values, epochs, &n, err, sizeof err) == 0 && n == 1 && values[0] == 0.5f,
          "one rate is a constant schedule");
    const struct { const char *text, *why; } bad[] = {
        {"", "empty"}, {"0.1;80", "expected a rate after it"}, {"0.1;;0.01", "piece 2 is empty"},
        {"0.1;x;0.01", "piece 2 'x': expected an epoch >= 0"}, {"0;5;0.01", "piece 1 '0': expected a learning rate > 0"},
        {"0.1;-1;0.01", "expected an epoch >= 0"}, {"0.1;5;0.01;5;0.001", "epoch 5 is not after epoch 5"},
        {"0.1;5;nan", "piece 3 'nan'"}, {"1e-60;5;0.1", "piece 1 '1e-60'"},
        {"0.1;1;0.1;2;0.1;3;0.1;4;0.1;5;0.1;6;0.1;7;0.1;8;0.1;9;0.1;10;0.1;11;0.1;12;0.1;13;0.1;14;0.1;15;0.1;16;0.1",
         "more than 16 rates"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        CHECK(lr_piecewise_parse(bad[i].text, values, epochs, &n, err, sizeof err) != 0, "'%s' accepted", bad[i].text);
        CHECK_CONTAINS(err, bad[i].why);
    }
    LrScheduleKind kind;
    CHECK(lr_schedule_kind_from_name("cosine", &kind, err, sizeof err) == 0 && kind == LR_COSINE &&
          !strcmp(lr_schedule_name(kind), "cosine"));
    CHECK(lr_schedule_kind_from_name("linear", &kind, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "expected exponential, piecewise or cosine");
}

static void test_ema(void) {
    /* decay = min(0.9999, (1 + n) / (10 + n)) */
    struct { long n; double want; } d[] = {
        {0, 1.0 / 10.0}, {1, 2.0 / 11.0}, {2, 3.0 / 12.0}, {3, 4.0 / 13.0},
        {1000, 1001.0 / 1010.0}, {1000000, 0.9999},
    };
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) {
        float got = ema_decay_at(0.9999f, d[i].n);
        CHECK(close_to(got, d[i].want, 1e-6), "ema decay at num_updates %ld = %.9g, want %.9g", d[i].n, got, d[i].want);
    }
    CHECK(ema_decay_at(0.9999f, -1) == 0.9999f, "num_updates < 0 must disable the rule");

    /* shadow starts at 1.0 (= the initial variable); the variable then
     * takes the values 0.8, 0.5, 0.6 after steps 1, 2, 3 (num_updates 1, 2, 3):
     *   s1 = (2/11) * 1.0 + (9/11) * 0.8
     *   s2 = (3/12) * s1  + (9/12) * 0.5
     *   s3 = (4/13) * s2  + (9/13) * 0.6 */
    const double s1 = (2.0 / 11) * 1.0 + (9.0 / 11) * 0.8;
    const double s2 = (3.0 / 12) * s1 + (9.0 / 12) * 0.5;
    const double s3 = (4.0 / 13) * s2 + (9.0 / 13) * 0.6;
    const double want[3] = {s1, s2, s3};
    const float vars[3] = {0.8f, 0.5f, 0.6f};
    float shadow = 1.0f;
    for (int step = 1; step <= 3; step++) {
        ema_apply(&shadow, &vars[step - 1], 1, ema_decay_at(0.9999f, step));
        CHECK(close_to(shadow, want[step - 1], 1e-6), "ema after step %d = %.9g, want %.9g", step, shadow, want[step - 1]);
    }
    CHECK(close_to(s3, 0.5951048951, 1e-9), "hand arithmetic itself: s3 = %.10f", s3);
}

/* ---- the optimizer table's other entries against their closed forms in double ----
 * Four elements, five steps of known gradients (one element's gradient is
 * always 0, one flips sign), learning rate 0.01; each step's expected value
 * is the formula of ps/optimizer.h evaluated in double here. */
#define CF_N 4
#define CF_STEPS 5
static const float CF_P0[CF_N] = {0.5f, -1.0f, 2.0f, 0.25f};
static const float CF_G[CF_STEPS][CF_N] = {{0.2f, -2.0f, 0.0f, 1.0f},
                                           {-0.1f, 1.0f, 0.0f, -1.0f},
                                           {0.4f, 0.5f, 0.0f, 1.0f},
                                           {0.3f, -0.25f, 0.0f, -1.0f},
                                           {-0.2f, 3.0f, 0.0f, 1.0f}};
#define CF_LR 0.01f

/* Runs cfg for CF_STEPS through optimizer_apply; out[s][i]: the variables after step s + 1. */
static void cf_run(const OptimizerConfig *cfg, float out[CF_STEPS][CF_N], float scalars_out[OPT_MAX_SCALARS]) {
    const OptSlot *info;
    const int n_slots = optimizer_slots(cfg, &info);
    float p[CF_N], slot_mem[OPT_MAX_SLOTS][CF_N], *slots[OPT_MAX_SLOTS] = {NULL};
    memcpy(p, CF_P0, sizeof p);
    for (int k = 0; k < n_slots; k++) {
        for (int i = 0; i < CF_N; i++) slot_mem[k][i] = info[k].init;
        slots[k] = slot_mem[k];
    }
    float scalars[OPT_MAX_SCALARS] = {0};
    const OptimizerI *o = optimizer_i(cfg->kind);
    if (o->init_scalars) o->init_scalars(cfg, scalars);
    for (int s = 0; s < CF_STEPS; s++) {
        optimizer_apply(p, slots, scalars, CF_G[s], CF_N, CF_LR, s, cfg);
        memcpy(out[s], p, sizeof p);
    }
    if (scalars_out) memcpy(scalars_out, scalars, sizeof scalars);
}

static void cf_compare(const char *what, float got[CF_STEPS][CF_N], double want[CF_STEPS][CF_N], double rel) {
    for (int s = 0; s < CF_STEPS; s++)
        for (int i = 0; i < CF_N; i++)
            CHECK(fabs(got[s][i] - want[s][i]) <= rel * fabs(want[s][i]) + 1e-9,
                  "%s step %d element %d = %.9g, the closed form says %.9g", what, s + 1, i, got[s][i], want[s][i]);
}

/* adam (TF1) and adamw (Keras): m, v, bias-corrected lr_t, and adamw's decay with lr. */
static void adam_closed_form(double b1, double b2, double eps, double wd, double want[CF_STEPS][CF_N]) {
    double p[CF_N], m[CF_N] = {0}, v[CF_N] = {0};
    for (int i = 0; i < CF_N; i++) p[i] = CF_P0[i];
    for (int s = 0; s < CF_STEPS; s++) {
        const double t = s + 1;
        const double lr_t = CF_LR * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t));
        for (int i = 0; i < CF_N; i++) {
            const double g = CF_G[s][i];
            p[i] -= p[i] * wd * CF_LR;
            m[i] = b1 * m[i] + (1 - b1) * g;
            v[i] = b2 * v[i] + (1 - b2) * g * g;
            p[i] -= lr_t * m[i] / (sqrt(v[i]) + eps);
            want[s][i] = p[i];
        }
    }
}

static void test_adam(void) {
    OptimizerConfig cfg;
    optimizer_config_defaults(&cfg);
    cfg.kind = OPT_ADAM;
    const OptSlot *info;
    CHECK(optimizer_slots(&cfg, &info) == 2 && !strcmp(info[0].name, "Adam") && !strcmp(info[1].name, "Adam_1"),
          "adam's slots are Adam, Adam_1");
    CHECK(optimizer_i(OPT_ADAM)->n_scalars == 2 && !strcmp(optimizer_i(OPT_ADAM)->scalar_names[0], "beta1_power") &&
              !strcmp(optimizer_i(OPT_ADAM)->scalar_names[1], "beta2_power"), "adam's scalars");
    float got[CF_STEPS][CF_N], scalars[OPT_MAX_SCALARS];
    double want[CF_STEPS][CF_N];
    cf_run(&cfg, got, scalars);
    adam_closed_form(0.9f, 0.999f, 1e-8f, 0.0, want);
    cf_compare("adam", got, want, 2e-6);
    /* The bias correction: step 1 moves every element with g != 0 by
     * lr * sign(g) (to 1e-5: epsilon); without it, by lr * 0.1 / sqrt(0.001) = 3.16 lr. */
    for (int i = 0; i < CF_N; i++) {
        const double moved = CF_P0[i] - got[0][i];
        const double want_moved = CF_G[0][i] > 0 ? CF_LR : CF_G[0][i] < 0 ? -CF_LR : 0.0;
        CHECK(fabs(moved - want_moved) <= 1e-5 * CF_LR, "adam step 1 moved element %d by %.9g, want lr * sign(g) = %.9g "
              "(bias correction)", i, moved, want_moved);
    }
    /* beta1_power, beta2_power after 5 steps: beta^6, multiplied in float32 */
    CHECK(fabs(scalars[0] - pow(0.9, 6)) <= 1e-6 && fabs(scalars[1] - pow(0.999, 6)) <= 1e-6,
          "beta powers after 5 steps (%.9g, %.9g), want (%.9g, %.9g)", scalars[0], scalars[1], pow(0.9, 6), pow(0.999, 6));
    /* A gradient of 0 from the start leaves the element where it is (m = v = 0). */
    for (int s = 0; s < CF_STEPS; s++) CHECK(got[s][2] == CF_P0[2], "adam moved an element whose gradient is 0");
}

static void test_adamw(void) {
    OptimizerConfig cfg;
    optimizer_config_defaults(&cfg);
    cfg.kind = OPT_ADAMW;
    cfg.epsilon = 1e-7f;
    cfg.weight_decay = 0.5f;
    const OptSlot *info;
    CHECK(optimizer_slots(&cfg, &info) == 2 && !strcmp(info[0].name, "AdamW") && !strcmp(info[1].name, "AdamW_1"),
          "adamw's slots are AdamW, AdamW_1");
    float got[CF_STEPS][CF_N];
    double want[CF_STEPS][CF_N];
    cf_run(&cfg, got, NULL);
    adam_closed_form(0.9f, 0.999f, 1e-7f, 0.5f, want);
    cf_compare("adamw", got, want, 2e-6);
    /* The decay uses lr, not lr_t: with g = 0 always, var_t = var_0 (1 - wd lr)^t exactly in closed form
     * (lr_t would give (1 - wd lr_1) = 1 - 0.5 * 0.0316 at step 1). */
    for (int s = 0; s < CF_STEPS; s++) {
        const double w = CF_P0[2] * pow(1 - 0.5 * CF_LR, s + 1);
        CHECK(fabs(got[s][2] - w) <= 1e-6 * fabs(w), "adamw decay of a gradient-free element at step %d: %.9g, want %.9g "
              "(var -= var * wd * lr)", s + 1, got[s][2], w);
    }
}

/* rmsprop (TF1): ms starts at 1; centered subtracts mg^2 under the root. */
static void rmsprop_closed_form(double rho, double mom_m, double eps, int centered, double want[CF_STEPS][CF_N]) {
    double p[CF_N], ms[CF_N], mg[CF_N] = {0}, mom[CF_N] = {0};
    for (int i = 0; i < CF_N; i++) p[i] = CF_P0[i], ms[i] = 1.0;
    for (int s = 0; s < CF_STEPS; s++)
        for (int i = 0; i < CF_N; i++) {
            const double g = CF_G[s][i];
            ms[i] = rho * ms[i] + (1 - rho) * g * g;
            mg[i] = rho * mg[i] + (1 - rho) * g;
            const double den = centered ? ms[i] - mg[i] * mg[i] + eps : ms[i] + eps;
            mom[i] = mom_m * mom[i] + CF_LR * g / sqrt(den);
            p[i] -= mom[i];
            want[s][i] = p[i];
        }
}

static void test_rmsprop(void) {
    for (int centered = 0; centered <= 1; centered++) {
        for (int with_momentum = 0; with_momentum <= 1; with_momentum++) {
            OptimizerConfig cfg;
            optimizer_config_defaults(&cfg);
            cfg.kind = OPT_RMSPROP;
            cfg.centered = centered;
            cfg.rms_momentum = with_momentum ? 0.5f : 0.0f;
            const OptSlot *info;
            const int n = optimizer_slots(&cfg, &info);
            CHECK(n == 2 + centered && !strcmp(info[0].name, "RMSProp") && info[0].init == 1.0f &&
                      !strcmp(info[n - 1].name, centered ? "RMSProp_2" : "RMSProp_1"),
                  "rmsprop (centered %d) slots: RMSProp (ones), then %s", centered, centered ? "RMSProp_1, RMSProp_2" : "RMSProp_1");
            float got[CF_STEPS][CF_N];
            double want[CF_STEPS][CF_N];
            cf_run(&cfg, got, NULL);
            rmsprop_closed_form(0.9f, cfg.rms_momentum, 1e-10f, centered, want);
            char what[64];
            snprintf(what, sizeof what, "rmsprop (centered %d, momentum %.1f)", centered, cfg.rms_momentum);
            cf_compare(what, got, want, 2e-6);
        }
    }
    /* The mean squares start at ONE (TF1): step 1 moves by lr g / sqrt(0.9 + 0.1 g^2), not by lr g / sqrt(0.1 g^2). */
    OptimizerConfig cfg;
    optimizer_config_defaults(&cfg);
    cfg.kind = OPT_RMSPROP;
    float got[CF_STEPS][CF_N];
    cf_run(&cfg, got, NULL);
    const double g = CF_G[0][1], want = CF_P0[1] - CF_LR * g / sqrt(0.9 + 0.1 * g * g);
    CHECK(fabs(got[0][1] - want) <= 1e-6 * fabs(want), "rmsprop step 1 = %.9g, want %.9g (ms starts at 1)", got[0][1], want);
}

/* Every entry on 100,003 elements (past the OpenMP threshold, and not a
 * multiple of any vector width): 1 and 2 threads give the same bits. */
static void test_threads_every_entry(void) {
    const size_t n = 100003;
    float *base = malloc(4 * n * sizeof(float)), *p1 = malloc(4 * n * sizeof(float)), *p2 = malloc(4 * n * sizeof(float));
    float *g = malloc(n * sizeof(float));
    for (size_t i = 0; i < 4 * n; i++) base[i] = 0.05f + (float)((i * 2654435761u) % 1000) * 1e-3f;
    for (size_t i = 0; i < n; i++) g[i] = (float)((int)((i * 40503u) % 2001) - 1000) * 1e-3f;
    for (int k = 0; k < OPT_N_KINDS; k++) {
        OptimizerConfig cfg;
        optimizer_config_defaults(&cfg);
        cfg.kind = (OptimizerKind)k;
        cfg.centered = 1;
        cfg.rms_momentum = 0.5f;
        float *runs[2] = {p1, p2};
        for (int r = 0; r < 2; r++) {
            memcpy(runs[r], base, 4 * n * sizeof(float));
            float *slots[OPT_MAX_SLOTS] = {runs[r] + n, runs[r] + 2 * n, runs[r] + 3 * n};
            float scalars[OPT_MAX_SCALARS] = {0.9f, 0.999f};
            omp_set_num_threads(r + 1);
            for (int step = 0; step < 2; step++) optimizer_apply(runs[r], slots, scalars, g, n, 0.01f, step, &cfg);
        }
        CHECK(memcmp(p1, p2, 4 * n * sizeof(float)) == 0, "%s: 1 and 2 threads differ", optimizer_i((OptimizerKind)k)->name);
    }
    free(base), free(p1), free(p2), free(g);
}

/* The table: names round-trip, every entry complete, defaults. */
static void test_table(void) {
    for (int k = 0; k < OPT_N_KINDS; k++) {
        const OptimizerI *o = optimizer_i((OptimizerKind)k);
        OptimizerKind back;
        char err[128];
        CHECK(o && o->name && o->slots && o->prepare && o->apply && (o->n_scalars == 0 || (o->init_scalars && o->finish)),
              "table entry %d incomplete", k);
        CHECK(o && optimizer_kind_from_name(o->name, &back, err, sizeof err) == 0 && back == (OptimizerKind)k,
              "name of entry %d does not select it", k);
    }
    OptimizerKind kind;
    char err[128];
    CHECK(optimizer_kind_from_name("adagrad", &kind, err, sizeof err) == -1 &&
              !strcmp(err, "--optimizer 'adagrad': expected sgd, momentum, adam, rmsprop or adamw"), "unknown name: %s", err);
    CHECK(optimizer_i(OPT_N_KINDS) == NULL, "kind outside the table");
    CHECK(optimizer_default_lr(OPT_MOMENTUM) == 0.01f && optimizer_default_lr(OPT_ADAM) == 0.001f &&
          optimizer_default_lr(OPT_RMSPROP) == 0.001f && optimizer_default_lr(OPT_ADAMW) == 0.001f, "default learning rates");
}

int main(void) {
    test_sgd();
    test_momentum_plain();
    test_momentum_nesterov();
    test_large_arrays_match_tf_order();
    test_lr_schedule();
    test_lr_schedules();
    test_ema();
    test_table();
    test_threads_every_entry();
    test_adam();
    test_adamw();
    test_rmsprop();
    if (check_failures) fprintf(stderr, "test_ps_optimizer: %d check(s) failed\n", check_failures);
    else printf("test_ps_optimizer: all checks passed\n");
    return check_failures ? 1 : 0;
}
