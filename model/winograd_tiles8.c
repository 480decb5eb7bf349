/* winograd_tiles8.c — model/winograd_tiles.inc at 8 channels a vector, cloned for AVX-512, AVX2 and the
 * baseline (WINO_CLONES_8, winograd_tiles.h). */
#include "model/winograd_tiles.h"

#define WT_LANES 8
#define WT_NAME winograd_tiles_8
#define WT_TARGET WINO_CLONES_8
#include "model/winograd_tiles.inc"
