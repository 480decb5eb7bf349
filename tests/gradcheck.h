/* gradcheck.h — the one finite-difference gradient checker of the test suite.
 *
 * Where it sits: tests/ only.  Every layer's backward and both whole models
 * (model/) are checked through it, so a change to the tolerance rules
 * happens in one place.
 * How: for each checked coordinate i of a float array x, the objective f
 * (a double computed by the caller from a forward pass, e.g.
 * sum(out * random_weights)) is evaluated at x[i] +- eps; the central
 * difference is compared with the analytic gradient:
 *     pass if |analytic - numeric| <= atol + rtol * max(|analytic|, |numeric|).
 * With kink_guard set, the forward difference (f(x+h) - f(x)) / h and the
 * backward difference (f(x) - f(x-h)) / h are compared too: on smooth
 * ground they agree to O(f'' h), across a relu or max kink inside the step
 * they differ by the jump in slope.  Where they disagree by more than
 * 2 * atol + rtol * max(|fwd|, |bwd|) the coordinate is skipped (and
 * counted) rather than judged.  A wrong analytic gradient is never hidden
 * by this: the test looks at f alone, never at the analytic value.
 * What it does not do: choose the objective, or allocate beyond the
 * coordinate list.
 */
#ifndef TOWER_TESTS_GRADCHECK_H
#define TOWER_TESTS_GRADCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

/* Evaluates the objective at the current contents of the checked array. */
typedef double (*GradcheckObjective)(void *ctx);

typedef struct {
    const char *what;     /* name printed in messages, e.g. "conv2d dweight" */
    double eps;           /* step (absolute); 1e-3 is usual */
    double rtol, atol;    /* see above */
    int max_checks;       /* n <= max_checks: every coordinate; else the
                             max_checks/2 largest |analytic| plus random others */
    uint64_t seed;        /* picks the random coordinates */
    int kink_guard;       /* 1: skip coordinates with a kink inside the step */
    int verbose;          /* 1: print every failing coordinate (else the first 5) */
} GradcheckOpts;

typedef struct {
    int n_checked;        /* coordinates judged */
    int n_failed;
    int n_skipped;        /* kinks (kink_guard only) */
    double max_abs_err;   /* largest |analytic - numeric| among judged */
    size_t worst_index;
} GradcheckResult;

/* Check analytic (n floats, the gradient of f w.r.t. x) against central
 * differences of f.  x: (n) perturbed in place and restored bit for bit.
 * Prints one summary line (and the first failures) to stdout. */
GradcheckResult gradcheck(float *x, size_t n, const float *analytic,
                          GradcheckObjective f, void *ctx, const GradcheckOpts *opts);

/* sum(a[i] * b[i]) in double: the usual objective sum(out * weights). */
double gradcheck_dot(const float *a, const float *b, size_t n);

/* Fill x (n) with uniform values in [lo, hi) from a splitmix64 stream. */
void gradcheck_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t seed);

/* max |ref[i] - x[i]| / max |ref[i]| (in double; the largest difference
 * itself when ref is all zero): two ways to compute one tensor compared
 * on the scale of its largest entry. */
double gradcheck_rel_max_diff(const float *ref, const float *x, size_t n);

/* The entries of a whole model's gradient block where a second backward
 * onto the first's result did not double it: |twice - 2 once| above 1e-6 of
 * the variable's largest |once| plus its weight decay's term (wd |param|),
 * which is added after each call.  Within rounding, not bit for bit:
 * dense's sgemm sums its products onto the block (beta 1).  An overwrite
 * instead of an add misses by |once|.  once, twice, params: (n_params). */
size_t gradcheck_count_not_doubled(const ModelSpec *spec, const float *once, const float *twice,
                                   const float *params);

#endif
