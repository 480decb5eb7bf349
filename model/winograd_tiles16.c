/* winograd_tiles16.c — model/winograd_tiles.inc at 16 channels a vector, for AVX-512 (x86-64-v4) only: one
 * 512-bit register a vector, half the instructions of 8 lanes (mnist's step 1.03x, bench/RESULTS.md).  Built
 * for AVX2 instead, two registers a vector, the tiles spill (mnist 1.36x slower), so an AVX2 or older CPU runs
 * winograd_tiles8.c's clones.  model/winograd.c calls these only where the CPU has AVX-512 (F, CD, BW, DQ,
 * VL); elsewhere (not x86-64, ThreadSanitizer's build) they are built for the baseline and never chosen. */
#define WT_LANES 16
#define WT_NAME winograd_tiles_16
#if defined(__x86_64__) && defined(__GNUC__) && !defined(TOWER_SANITIZE_THREAD)
#define WT_TARGET __attribute__((target("arch=x86-64-v4")))
#else
#define WT_TARGET
#endif
#include "model/winograd_tiles.inc"
