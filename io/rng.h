/* rng.h — counter-based random numbers for the input pipeline.
 *
 * Where it sits: io/, used by the pipeline (file order, shuffle buffer) and
 * augmentation.  Every stream is a pure function of (seed, stream, counter),
 * e.g. an example's augmentation of (seed, AUGMENT, global example index),
 * so results do not depend on thread count or timing.  splitmix64 mixing.
 * What it does not do: nothing cryptographic.
 */
#ifndef TOWER_IO_RNG_H
#define TOWER_IO_RNG_H

#include <stdint.h>

enum { RNG_STREAM_FILE_ORDER = 1, RNG_STREAM_SHUFFLE = 2, RNG_STREAM_AUGMENT = 3, RNG_STREAM_CROP = 4 };

static inline uint64_t rng_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A generator state for (seed, stream, counter). */
static inline uint64_t rng_seed(uint64_t seed, uint64_t stream, uint64_t counter) {
    return rng_mix64(rng_mix64(seed ^ 0x6a09e667f3bcc908ull) ^ rng_mix64(stream * 0x9e3779b97f4a7c15ull + 0x3c6ef372fe94f82bull) ^
                     rng_mix64(counter + 0xbb67ae8584caa73bull));
}

/* Next 64 random bits (splitmix64 step). */
static inline uint64_t rng_next(uint64_t *state) {
    *state += 0x9e3779b97f4a7c15ull;
    return rng_mix64(*state);
}

/* Uniform integer in [0, n), n >= 1 (multiply-shift; bias below 2^-32 for n < 2^32). */
static inline uint64_t rng_below(uint64_t *state, uint64_t n) {
    uint64_t r = rng_next(state);
    if (n <= 0xffffffffull) return ((r >> 32) * n) >> 32;
    return r % n;
}

/* Uniform float in [0, 1) with 24 random bits. */
static inline float rng_uniform01(uint64_t *state) {
    return (float)(rng_next(state) >> 40) * (1.0f / 16777216.0f);
}

#endif
