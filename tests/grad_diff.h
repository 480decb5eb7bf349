/* grad_diff.h — how far one model gradient is from another, variable by
 * variable: the measure of the batch-norm tower-equivalence tests
 * (test_tower_sync_bn, and test_mpi_sync_bn_helper across ranks).
 *
 * Header-only, because those two tests link different libraries (the
 * towers alone; the towers and the ranks) and share no test library.
 * What it does not do: decide a tolerance (each test sets its own).
 */
#ifndef TOWER_TESTS_GRAD_DIFF_H
#define TOWER_TESTS_GRAD_DIFF_H

#include <math.h>
#include <stddef.h>

#include "model/model.h"

/* Largest over trainable variables of max|a - b| / scale, where scale is
 * the variable's largest |b|, but at least 1e-2 of the whole gradient's
 * largest: a batch norm whose output feeds another through a convolution
 * has a beta gradient that is zero but for rounding (the next one removes
 * any shift), and rounding must not count as a relative difference of 1.
 * a, b: (spec->n_params) gradients in the spec's layout.  *worst: the name of
 * the variable that gave the result (left as it was when every variable's
 * difference is 0). */
static inline double grad_rel_diff(const ModelSpec *spec, const float *a, const float *b, const char **worst) {
    double rel = 0.0, all = 1e-30;
    for (size_t i = 0; i < spec->n_params; i++) all = fmax(all, fabs((double)b[i]));
    for (int v = 0; v < spec->n_vars; v++) {
        const ModelVar *var = &spec->vars[v];
        if (!var->trainable) continue;
        double d = 0.0, m = 1e-2 * all;
        for (size_t i = 0; i < var->n_floats; i++) {
            d = fmax(d, fabs((double)a[var->offset + i] - b[var->offset + i]));
            m = fmax(m, fabs((double)b[var->offset + i]));
        }
        if (d / m > rel) {
            rel = d / m;
            *worst = var->name;
        }
    }
    return rel;
}

#endif
