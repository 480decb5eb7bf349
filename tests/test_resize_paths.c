/* test_resize_paths.c — the resizer's other code paths against the oracle (tests/resize_oracle.h).
 *
 * Where it sits: tests/; built twice beside io/imagefolder.c compiled on its own (tests/eco_tests.cmake):
 * with IMAGEFOLDER_RESIZE_BASELINE (no AVX2 clones: the SSE2 4-lane pass on x86-64) and with
 * IMAGEFOLDER_RESIZE_SCALAR (plain C, the path of a machine without SSE2), so that the paths the loader
 * does not pick on the CI machine are checked as well as the one it does (test_imagefolder).
 * What it does not do: decode, crop or convert (test_imagefolder does).
 */
#include "tests/resize_oracle.h"

#ifndef RESIZE_PATH_NAME
#define RESIZE_PATH_NAME "the default path"
#endif

int main(void) {
    if (resize_oracle_check(RESIZE_PATH_NAME)) return 1;
    printf("ok\n");
    return 0;
}
