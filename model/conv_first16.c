/* conv_first16.c — model/conv_first.inc at 16 channels a vector, for AVX-512 (x86-64-v4) only, as
 * model/winograd_tiles16.c: model/conv_first.c calls it only where conv_cpu_lanes() is 16. */
#define CF_LANES 16
#define CF_NAME conv_first_16
#if defined(__x86_64__) && defined(__GNUC__) && !defined(TOWER_SANITIZE_THREAD)
#define CF_TARGET __attribute__((target("arch=x86-64-v4")))
#else
#define CF_TARGET
#endif
#include "model/conv_first.inc"
