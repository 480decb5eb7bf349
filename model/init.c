/* init.c — the seeded RNG and TensorFlow's initializers (truncated normal,
 * constant), bit-identical on every IEEE-754 machine.
 *
 * Where it sits: model_init_params (model.c) draws every variable from its
 * own stream, seeded from (seed, variable name); the parameter server then
 * owns the values.
 * How the bits stay the same everywhere: splitmix64 is integer-only; the
 * normal transform (Marsaglia's polar method) uses only +, -, *, /, sqrt
 * (all correctly rounded by IEEE 754) and a logarithm computed below from
 * those and frexp (exact); this file is compiled with -ffp-contract=off
 * so no multiply-add is fused on one machine and not on another.
 * What it does not do: use libm's log/exp/cos, or any global state.
 */
#include "model/layers.h"

#include <math.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

void init_rng_seed(InitRng *r, uint64_t seed, uint64_t stream) {
    uint64_t s = seed;
    uint64_t a = splitmix64(&s);
    s = stream ^ 0x6A09E667F3BCC909ULL;
    uint64_t b = splitmix64(&s);
    r->state = a ^ (b * 0x9E3779B97F4A7C15ULL);
    r->have_spare = 0;
    r->spare = 0.0;
}

uint64_t init_rng_next_u64(InitRng *r) { return splitmix64(&r->state); }

double init_rng_uniform(InitRng *r) { return (double)(init_rng_next_u64(r) >> 11) * 0x1.0p-53; }

/* ln(x) for x > 0 with basic operations only: x = m * 2^e, m in [sqrt(1/2), sqrt(2)),
 * ln(m) = 2 * atanh(t), t = (m - 1) / (m + 1), |t| < 0.172, by its series to
 * t^41 (the next term is below 1e-32: far past double precision). */
static double det_log(double x) {
    int e;
    double m = frexp(x, &e); /* m in [0.5, 1), exact */
    if (m < 0.70710678118654752440) { m *= 2.0; e -= 1; }
    double t = (m - 1.0) / (m + 1.0), t2 = t * t;
    double sum = 0.0;
    for (int k = 41; k >= 1; k -= 2) sum = sum * t2 + 1.0 / k;
    return 2.0 * t * sum + e * 0.69314718055994530942;
}

double init_rng_normal(InitRng *r) {
    if (r->have_spare) {
        r->have_spare = 0;
        return r->spare;
    }
    double u, v, s;
    do {
        u = 2.0 * init_rng_uniform(r) - 1.0;
        v = 2.0 * init_rng_uniform(r) - 1.0;
        s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    double f = sqrt(-2.0 * det_log(s) / s);
    r->spare = v * f;
    r->have_spare = 1;
    return u * f;
}

void init_truncated_normal(float *out, size_t n, float stddev, InitRng *r) {
    for (size_t i = 0; i < n; i++) {
        double z;
        do z = init_rng_normal(r); while (z < -2.0 || z > 2.0);
        out[i] = (float)(z * stddev);
    }
}

void init_constant(float *out, size_t n, float value) {
    for (size_t i = 0; i < n; i++) out[i] = value;
}

void init_glorot_uniform(float *out, size_t n, double limit, InitRng *r) {
    for (size_t i = 0; i < n; i++) out[i] = (float)((2.0 * init_rng_uniform(r) - 1.0) * limit);
}
