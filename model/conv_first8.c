/* conv_first8.c — model/conv_first.inc at 8 channels a vector, cloned for AVX-512 (x86-64-v4), AVX2 with FMA
 * (x86-64-v3) and the baseline (target_clones: the loader picks one; none under ThreadSanitizer, as
 * model/winograd_tiles8.c).  Its multiply-adds are fused where the clone has FMA (model/CMakeLists.txt): the
 * baseline's bits differ from the others', each the same from run to run. */
#define CF_LANES 8
#define CF_NAME conv_first_8
#if defined(__x86_64__) && defined(__GNUC__) && defined(__ELF__) && !defined(TOWER_SANITIZE_THREAD)
#define CF_TARGET __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CF_TARGET
#endif
#include "model/conv_first.inc"
