/* limits.h — the fixed limits every floor shares.
 *
 * Where it sits: base/, under everything.  The tower maximum bounds the
 * fixed arrays of the towers (tower/), the input pipeline's shards (io/),
 * the parameter server's per-tower buffers and device groups (ps/) and the
 * trainer (train/); each of those names it under its own name
 * (PIPELINE_MAX_SHARDS, DEVICE_GROUPS_MAX, ...) defined as this one, so the
 * number lives here only.
 * What it does not do: check anything; each module refuses a count above
 * its limit with its own one-line error.
 */
#ifndef TOWER_BASE_LIMITS_H
#define TOWER_BASE_LIMITS_H

/* The most towers one process runs (and so shards per global batch,
 * all-reduce ranks, device groups, gradient sources of an average). */
#define TOWER_MAX_TOWERS 64

#endif
