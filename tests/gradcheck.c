/* gradcheck.c — central-difference gradient checker (see gradcheck.h). */
#include "gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

void gradcheck_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t seed) {
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        double u = (double)(mix(&s) >> 11) * 0x1.0p-53;
        x[i] = (float)(lo + (hi - lo) * u);
    }
}

double gradcheck_rel_max_diff(const float *ref, const float *x, size_t n) {
    double m = 0.0, s = 0.0;
    for (size_t i = 0; i < n; i++) {
        m = fmax(m, fabs((double)ref[i] - x[i]));
        s = fmax(s, fabs((double)ref[i]));
    }
    return s > 0.0 ? m / s : m;
}

size_t gradcheck_count_not_doubled(const ModelSpec *spec, const float *once, const float *twice,
                                   const float *params) {
    size_t n_bad = 0;
    for (int v = 0; v < spec->n_vars; v++) {
        const ModelVar *mv = &spec->vars[v];
        double g_max = 0;
        for (size_t i = mv->offset; i < mv->offset + mv->n_floats; i++) g_max = fmax(g_max, fabs(once[i]));
        for (size_t i = mv->offset; i < mv->offset + mv->n_floats; i++)
            n_bad += !(fabs(twice[i] - 2.0 * once[i]) <= 1e-6 * (g_max + mv->wd * fabs(params[i])));
    }
    return n_bad;
}

double gradcheck_dot(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* f at x[i] + h and x[i] - h, and the actual steps taken in float;
 * x[i] is restored bit for bit. */
typedef struct { double fp, fm, hp, hm; } Probe;
static Probe probe(float *x, size_t i, double h, GradcheckObjective f, void *ctx) {
    const float x0 = x[i];
    const float xp = (float)(x0 + h), xm = (float)(x0 - h);
    Probe p;
    x[i] = xp;
    p.fp = f(ctx);
    x[i] = xm;
    p.fm = f(ctx);
    x[i] = x0;
    p.hp = (double)xp - x0;
    p.hm = (double)x0 - xm;
    return p;
}

typedef struct { size_t i; float a; } Coord;
static int cmp_coord(const void *pa, const void *pb) {
    float a = fabsf(((const Coord *)pa)->a), b = fabsf(((const Coord *)pb)->a);
    return a < b ? 1 : a > b ? -1 : 0;
}

GradcheckResult gradcheck(float *x, size_t n, const float *analytic,
                          GradcheckObjective f, void *ctx, const GradcheckOpts *o) {
    GradcheckResult r = {0, 0, 0, 0.0, 0};
    size_t n_idx = n <= (size_t)o->max_checks ? n : (size_t)o->max_checks;
    size_t *idx = malloc(sizeof(size_t) * (n_idx ? n_idx : 1));
    if (n <= (size_t)o->max_checks) {
        for (size_t k = 0; k < n; k++) idx[k] = k;
    } else {
        /* The largest gradients first (where a wrong formula shows most),
         * then distinct random coordinates. */
        Coord *c = malloc(sizeof(Coord) * n);
        for (size_t k = 0; k < n; k++) { c[k].i = k; c[k].a = analytic[k]; }
        qsort(c, n, sizeof(Coord), cmp_coord);
        size_t n_top = n_idx / 2;
        for (size_t k = 0; k < n_top; k++) idx[k] = c[k].i;
        uint64_t s = o->seed;
        for (size_t k = n_top; k < n_idx; k++) { /* partial Fisher-Yates over the rest */
            size_t j = k + (size_t)(mix(&s) % (n - k));
            Coord t = c[k]; c[k] = c[j]; c[j] = t;
            idx[k] = c[k].i;
        }
        free(c);
    }
    const double f0 = f(ctx);
    int printed = 0;
    for (size_t k = 0; k < n_idx; k++) {
        size_t i = idx[k];
        Probe p = probe(x, i, o->eps, f, ctx);
        double num = (p.fp - p.fm) / (p.hp + p.hm);
        double a = analytic[i];
        double tol = o->atol + o->rtol * fmax(fabs(a), fabs(num));
        if (o->kink_guard) {
            /* On smooth ground the forward and backward differences agree to
             * O(f'' h); across a kink they differ by the jump in slope. */
            double fwd = (p.fp - f0) / p.hp, bwd = (f0 - p.fm) / p.hm;
            if (fabs(fwd - bwd) > 2 * o->atol + o->rtol * fmax(fabs(fwd), fabs(bwd))) {
                r.n_skipped++;
                continue;
            }
        }
        double err = fabs(a - num);
        r.n_checked++;
        if (err > r.max_abs_err) { r.max_abs_err = err; r.worst_index = i; }
        if (!(err <= tol)) {
            r.n_failed++;
            if (o->verbose || printed < 5) {
                printf("  %s[%zu]: analytic %.6g numeric %.6g (|diff| %.3g > tol %.3g)\n",
                       o->what, i, a, num, err, tol);
                printed++;
            }
        }
    }
    printf("gradcheck %-28s checked %5d  skipped(kink) %3d  failed %3d  max|diff| %.3g\n",
           o->what, r.n_checked, r.n_skipped, r.n_failed, r.max_abs_err);
    free(idx);
    return r;
}
