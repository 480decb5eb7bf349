/* test_ps_average.c — gradient averaging and one full server step.
 *
 * Where it sits: tests of the point where the towers' gradients meet on the
 * CPU (ps_average_grads) and of the step order of ps_apply_gradients
 * (lr before the increment, optimizer, global_step++, moving average after).
 * Uses a small hand-made ModelSpec, so it does not depend on the layout of
 * the real models; it does not test checkpoints.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/ps.h"

#include "tests/check.h"

static int close_to(double got, double want, double rel) {
    return fabs(got - want) <= rel * fabs(want) + 1e-12;
}

/* A spec of two variables: "w" (rows, cols) then "b" (cols). */
static void make_spec(ModelSpec *s, int rows, int cols) {
    memset(s, 0, sizeof *s);
    s->kind = MODEL_MNIST;
    s->name = "tiny";
    s->H = 4; s->W = 4; s->C = 1; s->num_classes = cols;
    ModelVar *w = &s->vars[0], *b = &s->vars[1];
    snprintf(w->name, sizeof w->name, "w");
    w->ndim = 2; w->shape[0] = rows; w->shape[1] = cols;
    w->offset = 0; w->n_floats = (size_t)rows * cols;
    w->init = INIT_TRUNCATED_NORMAL; w->init_value = 0.1f;
    snprintf(b->name, sizeof b->name, "b");
    b->ndim = 1; b->shape[0] = cols;
    b->offset = w->n_floats; b->n_floats = (size_t)cols;
    b->init = INIT_CONSTANT; b->init_value = 0.1f;
    w->trainable = b->trainable = 1;
    s->n_vars = 2;
    s->n_params = w->n_floats + b->n_floats;
}

static uint64_t g_rng = 88172645463325252ull;
static float rnd(void) { /* xorshift64, uniform in [-0.5, 0.5) */
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0) - 0.5f;
}

static void test_create(void) {
    ModelSpec spec;
    make_spec(&spec, 7, 3); /* 24 floats */
    PsConfig cfg;
    ps_config_defaults(&cfg);
    CHECK(cfg.opt.kind == OPT_MOMENTUM && cfg.opt.nesterov == 1 && cfg.opt.momentum == 0.9f,
          "defaults must be momentum 0.9 Nesterov");
    CHECK(cfg.lr.initial_lr == 0.01f && lr_schedule_at(&cfg.lr, 123456) == 0.01f, "default lr must be a constant 0.01");
    CHECK(cfg.ema_decay == 0.9999f, "default ema decay must be 0.9999");

    ParamServer *ps = ps_create(&spec, 3, &cfg, host_alloc_default(), 42);
    CHECK(ps != NULL, "ps_create failed");
    if (!ps) return;
    CHECK(ps->global_step == 0 && ps->n_towers == 3, "fresh server: step %ld, towers %d", ps->global_step, ps->n_towers);
    CHECK(ps->slots[0] && ps->ema && ps->grads && ps->tower_grads, "slices missing");
    CHECK(memcmp(ps->ema, ps->params, spec.n_params * sizeof(float)) == 0, "ema must start equal to params");
    int zero = 1;
    for (size_t i = 0; i < spec.n_params; i++) zero &= ps->slots[0][i] == 0.0f;
    CHECK(zero, "accum must start at 0");
    float *slices[6] = {ps->params, ps->grads, ps->slots[0], ps->ema, ps->tower_grads[0], ps->tower_grads[1]};
    const char *blk = ps->block;
    for (int i = 0; i < 6; i++) {
        CHECK(((uintptr_t)slices[i] & 4095) == 0, "slice %d not page-aligned", i);
        CHECK((const char *)slices[i] >= blk && (const char *)(slices[i] + spec.n_params) <= blk + ps->block_n_bytes,
              "slice %d outside the one block", i);
        for (int j = 0; j < i; j++) CHECK(slices[i] != slices[j], "slices %d and %d alias", i, j);
    }
    /* same seed, same params */
    ParamServer *again = ps_create(&spec, 1, &cfg, host_alloc_default(), 42);
    CHECK(again && memcmp(again->params, ps->params, spec.n_params * sizeof(float)) == 0, "same seed gave other params");
    ps_free(again);
    ps_free(ps);

    PsConfig sgd = cfg;
    sgd.opt.kind = OPT_SGD;
    sgd.ema_decay = 0.0f;
    ps = ps_create(&spec, 1, &sgd, host_alloc_default(), 1);
    CHECK(ps && ps->n_slots == 0 && ps->slots[0] == NULL && ps->ema == NULL, "sgd without ema must have no accum and no ema");
    ps_free(ps);
    CHECK(ps_create(&spec, -1, &cfg, host_alloc_default(), 1) == NULL, "-1 towers must fail");
    /* A server-only rank (ps_mpi --ps_dedicated): no tower buffers; keep: only variable 0's slots and moving
     * averages are initialised, the others stay zero (untouched pages). */
    unsigned char keep[MODEL_MAX_VARS] = {1};
    PsConfig kept = cfg;
    kept.keep = keep;
    ps = ps_create(&spec, 0, &kept, host_alloc_default(), 1);
    CHECK(ps && ps->n_towers == 0 && ps->state_block && ps->cfg.keep == NULL &&
              ps->kept_n_floats == spec.vars[0].n_floats, "0 towers with keep: a server without tower buffers");
    const ModelVar *v0 = &spec.vars[0], *v1 = &spec.vars[1];
    CHECK(memcmp(ps->ema + v0->offset, ps->params + v0->offset, v0->n_floats * sizeof(float)) == 0,
          "keep: the kept variable's moving average starts at its value");
    int untouched = 1;
    for (size_t i = 0; i < v1->n_floats; i++) untouched &= ps->ema[v1->offset + i] == 0.0f && ps->slots[0][v1->offset + i] == 0.0f;
    CHECK(untouched, "keep: a variable not kept has zero (untouched) slots and moving averages");
    ps_free(ps);
    /* ps_plan_n_bytes (the memory check before the server exists) is what ps_host_n_bytes counts once it does,
     * but for the server struct and its pointer tables: with and without keep, towers or none, each optimizer. */
    for (int k = 0; k < OPT_N_KINDS; k++)
        for (int towers = 0; towers <= 3; towers += 3)
            for (int with_keep = 0; with_keep < 2; with_keep++) {
                PsConfig c = cfg;
                c.opt.kind = (OptimizerKind)k;
                c.keep = with_keep ? keep : NULL;
                const size_t plan = ps_plan_n_bytes(&spec, towers, &c);
                ps = ps_create(&spec, towers, &c, host_alloc_default(), 1);
                const size_t held = ps ? ps_host_n_bytes(ps) : 0;
                CHECK(ps && plan <= held && held - plan <= sizeof *ps + 16 * sizeof(float *),
                      "optimizer %d, %d towers, keep %d: planned %zu bytes, the server holds %zu", k, towers, with_keep,
                      plan, held);
                ps_free(ps);
            }
    PsConfig bad = cfg;
    bad.opt.kind = (OptimizerKind)7;
    CHECK(ps_create(&spec, 1, &bad, host_alloc_default(), 1) == NULL, "unknown optimizer must fail");
    ps_free(NULL);
}

/* The reference: per element s = g0; s += g1; ...; s / n, serially. */
static void serial_average(float *out, float *const *tg, int n_towers, size_t n, int reverse) {
    for (size_t i = 0; i < n; i++) {
        float s = tg[reverse ? n_towers - 1 : 0][i];
        for (int k = 1; k < n_towers; k++) s += tg[reverse ? n_towers - 1 - k : k][i];
        out[i] = s / (float)n_towers;
    }
}

static void test_average(void) {
    ModelSpec spec;
    make_spec(&spec, 1000, 100); /* 100,100 floats: several OpenMP blocks, a partial last block */
    const size_t n = spec.n_params;
    PsConfig cfg;
    ps_config_defaults(&cfg);
    float *want = malloc(n * sizeof *want), *rev = malloc(n * sizeof *rev), *first = malloc(n * sizeof *first);
    const int tower_counts[5] = {1, 2, 3, 4, 8};
    for (int c = 0; c < 5; c++) {
        const int nt = tower_counts[c];
        ParamServer *ps = ps_create(&spec, nt, &cfg, host_alloc_default(), 7);
        CHECK(ps != NULL, "ps_create(%d towers) failed", nt);
        if (!ps) continue;
        /* magnitudes spread over 8 decades so that the summation order shows, and every 50th element
         * subnormal in every tower (so is its mean: a power-of-two tower count divides by multiplying with
         * 1/N, which must round the same there too) */
        for (int t = 0; t < nt; t++)
            for (size_t i = 0; i < n; i++)
                ps->tower_grads[t][i] = rnd() * (i % 50 == 0 ? 2e-39f * (float)(i % 7 + 1)
                                                             : powf(10.0f, (float)((i + (size_t)t) % 9) - 4.0f));
        serial_average(want, ps->tower_grads, nt, n, 0);
        for (int threads = 1; threads <= 2; threads++) {
            omp_set_num_threads(threads);
            memset(ps->grads, 0xff, n * sizeof(float));
            ps_average_grads(ps);
            /* the mean the update reads: grads, or with one tower the tower's own buffer, grads untouched */
            CHECK(ps->mean == (nt == 1 ? ps->tower_grads[0] : ps->grads), "%d towers: ps->mean points elsewhere", nt);
            if (!ps->mean) continue;
            if (nt == 1) {
                size_t touched = 0;
                for (size_t i = 0; i < n; i++) touched += ((const uint32_t *)ps->grads)[i] != 0xffffffffu;
                CHECK(touched == 0, "1 tower: %zu elements of grads written (nothing to copy)", touched);
            }
            CHECK(memcmp(ps->mean, want, n * sizeof(float)) == 0,
                  "%d towers, %d threads: not bitwise equal to the serial loop in tower order", nt, threads);
            if (threads == 1) memcpy(first, ps->mean, n * sizeof(float));
            else CHECK(memcmp(ps->mean, first, n * sizeof(float)) == 0, "%d towers: 1 and 2 threads differ", nt);
        }
        ps_average_grads(ps);
        CHECK(ps->mean && memcmp(ps->mean, first, n * sizeof(float)) == 0, "%d towers: a second run differs", nt);
        if (!ps->mean) continue;
        /* equal to sum / N in double within float tolerance */
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            double s = 0, mag = 0;
            for (int t = 0; t < nt; t++) { s += ps->tower_grads[t][i]; mag += fabs(ps->tower_grads[t][i]); }
            /* recursive summation: error <= (nt - 1) u sum|g|, then / nt, then one rounding; among subnormals
             * each rounding may be off by half their spacing (1.4e-45) instead */
            if (fabs(ps->mean[i] - s / nt) > 2.4e-7 * mag + (nt + 1) * 1.4013e-45) bad++;
        }
        CHECK(bad == 0, "%d towers: %zu elements differ from sum/N beyond float tolerance", nt, bad);
        /* the order is observable: summing in reverse gives other bits, so the
         * bitwise checks above would catch a wrong order */
        if (nt >= 3) {
            serial_average(rev, ps->tower_grads, nt, n, 1);
            CHECK(memcmp(rev, want, n * sizeof(float)) != 0, "%d towers: reverse order should differ somewhere", nt);
        }
        ps_free(ps);
    }
    omp_set_num_threads(2);
    free(want); free(rev); free(first);
}

/* Three full steps on 2 towers, by hand.  One scalar element x of "w":
 * x0 = 1.0; tower gradients (0.3, 0.1), (-0.2, 0.6), (0.5, 0.5) -> averages
 * 0.2, 0.2, 0.5.  Nesterov 0.9; lr staircase 0.1 * 0.5^floor(step / 2)
 * read before the increment: 0.1, 0.1, 0.05.  EMA 0.9999 with num_updates =
 * global_step after the increment: decays 2/11, 3/12, 4/13. */
static void test_three_steps(void) {
    ModelSpec spec;
    make_spec(&spec, 2, 2);
    PsConfig cfg;
    ps_config_defaults(&cfg);
    cfg.lr.initial_lr = 0.1f;
    cfg.lr.decay_factor = 0.5f;
    cfg.lr.decay_steps = 2;
    cfg.lr.staircase = 1;
    ParamServer *ps = ps_create(&spec, 2, &cfg, host_alloc_default(), 3);
    CHECK(ps != NULL, "ps_create failed");
    if (!ps) return;
    for (size_t i = 0; i < spec.n_params; i++) ps->params[i] = ps->ema[i] = 1.0f;
    const float g[3][2] = {{0.3f, 0.1f}, {-0.2f, 0.6f}, {0.5f, 0.5f}};

    /* a1 = 0.2;                x1 = 1      - 0.1  * (0.2 + 0.18)   = 0.962
     * a2 = 0.18 + 0.2 = 0.38;  x2 = 0.962  - 0.1  * (0.2 + 0.342)  = 0.9078
     * a3 = 0.342 + 0.5 = 0.842; x3 = 0.9078 - 0.05 * (0.5 + 0.7578) = 0.84491 */
    const double x[4] = {1.0, 0.962, 0.9078, 0.84491};
    const double lr[3] = {0.1, 0.1, 0.05};
    const double e1 = (2.0 / 11) * x[0] + (9.0 / 11) * x[1];
    const double e2 = (3.0 / 12) * e1 + (9.0 / 12) * x[2];
    const double e3 = (4.0 / 13) * e2 + (9.0 / 13) * x[3];
    const double e[3] = {e1, e2, e3};
    for (int s = 0; s < 3; s++) {
        for (int t = 0; t < 2; t++)
            for (size_t i = 0; i < spec.n_params; i++) ps->tower_grads[t][i] = g[s][t];
        ps_average_grads(ps);
        ps_apply_gradients(ps);
        CHECK(ps->global_step == s + 1, "global_step after step %d = %ld", s + 1, ps->global_step);
        CHECK(close_to(ps->last_lr, lr[s], 1e-6), "lr of step %d = %.9g, want %.9g", s + 1, ps->last_lr, lr[s]);
        for (size_t i = 0; i < spec.n_params; i++) {
            CHECK(close_to(ps->params[i], x[s + 1], 1e-6), "param %zu after step %d = %.9g, want %.9g",
                  i, s + 1, ps->params[i], x[s + 1]);
            CHECK(close_to(ps->ema[i], e[s], 1e-6), "ema %zu after step %d = %.9g, want %.9g", i, s + 1, ps->ema[i], e[s]);
        }
    }
    /* Had the average used num_updates before the increment (0, 1, 2) it
     * would be 0.1*1 + 0.9*0.962 = 0.9658 after step 1, not e1 = 0.9690909. */
    CHECK(!close_to(e1, 0.1 * 1.0 + 0.9 * 0.962, 1e-4), "the two EMA rules must be distinguishable here");
    ps_free(ps);
}

/* The non-finite flags: a NaN or an infinity anywhere in one tower's gradient (in a block the OpenMP
 * loop splits, and in the last, partial block) makes ps_average_grads return -1; finite ones 0; an update
 * that overflows the variables makes ps_apply_gradients and ps_replica_apply return -1. */
static void test_nonfinite(void) {
    ModelSpec spec;
    make_spec(&spec, 3000, 11); /* 33011 floats: 17 blocks of 2048, the last partial, so the loop is parallel */
    PsConfig cfg;
    ps_config_defaults(&cfg);
    ParamServer *ps = ps_create(&spec, 3, &cfg, host_alloc_default(), 5);
    CHECK(ps != NULL, "ps_create failed");
    if (!ps) return;
    const size_t n = spec.n_params;
    const size_t where[3] = {0, 20000, n - 1};
    const float bad_values[2] = {NAN, INFINITY};
    for (int t = 0; t < 3; t++)
        for (size_t i = 0; i < n; i++) ps->tower_grads[t][i] = rnd();
    CHECK(ps_average_grads(ps) == 0, "finite gradients flagged as non-finite");
    CHECK(ps_apply_gradients(ps) == 0, "a finite update flagged as non-finite");
    for (int k = 0; k < 3; k++) {
        for (int v = 0; v < 2; v++) {
            const float keep = ps->tower_grads[1][where[k]];
            ps->tower_grads[1][where[k]] = bad_values[v];
            CHECK(ps_average_grads(ps) == -1, "a %s at element %zu of tower 1 not flagged", v ? "inf" : "NaN", where[k]);
            ps->tower_grads[1][where[k]] = keep;
        }
    }
    CHECK(ps_average_grads(ps) == 0, "finite again, still flagged");
    /* Finite gradients, a learning rate that overflows one variable (float max is about 3.4e38): the update
     * reads grads when no ps_average_grads has set the mean since the last update. */
    CHECK(ps_apply_gradients(ps) == 0 && ps->mean == NULL, "the update left ps->mean set");
    for (size_t i = 0; i < n; i++) ps->grads[i] = 0.0f;
    ps->grads[n / 2] = 1e30f;
    ps->cfg.lr.initial_lr = 1e30f;
    CHECK(ps_apply_gradients(ps) == -1, "an overflowing update not flagged");
    CHECK(!isfinite(ps->params[n / 2]), "the overflow did not happen (test setup)");
    ps_free(ps);

    /* One tower: its own gradient is checked (no copy) and applied in place, as two towers' equal gradients
     * (whose mean is the same floats) are. */
    ps_config_defaults(&cfg);
    ParamServer *one = ps_create(&spec, 1, &cfg, host_alloc_default(), 5), *two = ps_create(&spec, 2, &cfg,
                                                                                             host_alloc_default(), 5);
    CHECK(one && two, "ps_create (1 and 2 towers) failed");
    if (one && two) {
        for (size_t i = 0; i < n; i++)
            one->tower_grads[0][i] = two->tower_grads[0][i] = two->tower_grads[1][i] = rnd();
        for (int k = 0; k < 3; k++) {
            for (int v = 0; v < 2; v++) {
                const float keep = one->tower_grads[0][where[k]];
                one->tower_grads[0][where[k]] = bad_values[v];
                CHECK(ps_average_grads(one) == -1, "1 tower: a %s at element %zu not flagged", v ? "inf" : "NaN",
                      where[k]);
                one->tower_grads[0][where[k]] = keep;
            }
        }
        CHECK(ps_average_grads(one) == 0 && ps_average_grads(two) == 0, "1 and 2 towers: finite flagged");
        CHECK(ps_apply_gradients(one) == 0 && ps_apply_gradients(two) == 0, "1 and 2 towers: update flagged");
        CHECK(memcmp(one->params, two->params, n * sizeof(float)) == 0 &&
                  memcmp(one->slots[0], two->slots[0], n * sizeof(float)) == 0,
              "1 tower's update in place differs from 2 towers' with the same gradient");
    }
    ps_free(one);
    ps_free(two);

    ps = ps_create(&spec, 2, &cfg, host_alloc_default(), 5);
    CHECK(ps && ps_create_replicas(ps, 2) == 0, "replicas failed");
    if (!ps) return;
    float *g = calloc(n, sizeof(float));
    CHECK(ps_replica_apply(ps, 0, g, 0.01f) == 0, "a finite replica update flagged");
    g[7] = NAN;
    CHECK(ps_replica_apply(ps, 1, g, 0.01f) == -1, "a NaN gradient in a replica update not flagged");
    free(g);
    ps_free(ps);
}

int main(void) {
    test_create();
    test_average();
    test_three_steps();
    test_nonfinite();
    if (check_failures) fprintf(stderr, "test_ps_average: %d check(s) failed\n", check_failures);
    else printf("test_ps_average: all checks passed\n");
    return check_failures ? 1 : 0;
}
