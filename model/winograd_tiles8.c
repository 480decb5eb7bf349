/* winograd_tiles8.c — model/winograd_tiles.inc at 8 channels a vector, cloned for AVX-512 (x86-64-v4: its 32
 * vector registers hold more of a tile), AVX2 and the baseline (target_clones: the loader picks one). */
#define WT_LANES 8
#define WT_NAME winograd_tiles_8
/* No clones under ThreadSanitizer (the TOWER_SANITIZE_THREAD build): the loader runs an ifunc's resolver before
 * the sanitizer's runtime starts, and an instrumented resolver crashes there (the baseline clone is the same
 * arithmetic). */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__ELF__) && !defined(TOWER_SANITIZE_THREAD)
#define WT_TARGET __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define WT_TARGET
#endif
#include "model/winograd_tiles.inc"
