/* test_base_flags.c — flags_env_on and flags_env_default_on, the two
 * rules of the environment switches (off by default: TOWER_CUDNN_FIND,
 * TOWER_CONV1X1_CUDNN, TOWER_CONV_WGRAD_CUDNN, TOWER_CONV_DGRAD_CUDNN,
 * TOWER_DEPTHWISE_CUDNN, TOWER_CUDA_SYNC_CHECK; on by default:
 * TOWER_GPU_OVERLAP).
 *
 * Where it sits: ctest (CPU).  flags_env_on: unset, empty and "0" are off;
 * "1" and any other value are on.  flags_env_default_on: only "0" is off.
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/flags.h"
#include "tests/check.h"

#define NAME "TOWER_TEST_BASE_FLAGS_SWITCH"

int main(void) {
    unsetenv(NAME);
    CHECK(flags_env_on(NAME) == 0, "unset: on");
    CHECK(flags_env_default_on(NAME) == 1, "unset: default_on off");
    const struct { const char *value; int on, default_on; } cases[] = {
        {"", 0, 1}, {"0", 0, 0}, {"1", 1, 1}, {"yes", 1, 1}, {"00", 1, 1}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        setenv(NAME, cases[k].value, 1);
        CHECK(flags_env_on(NAME) == cases[k].on, "%s=\"%s\": %d, want %d", NAME, cases[k].value, flags_env_on(NAME),
              cases[k].on);
        CHECK(flags_env_default_on(NAME) == cases[k].default_on, "%s=\"%s\": default_on %d, want %d", NAME,
              cases[k].value, flags_env_default_on(NAME), cases[k].default_on);
    }
    unsetenv(NAME);
    if (check_failures) {
        printf("FAIL: %d checks failed\n", check_failures);
        return 1;
    }
    printf("flags_env_on: unset, \"\" and \"0\" off, any other value on: ok\n");
    printf("flags_env_default_on: \"0\" off, unset and any other value on: ok\n");
    return 0;
}
