/* test_ps_placement.c — the variables' parameter-server tasks
 * (ps/placement.h): greedy (TensorFlow's GreedyLoadBalancingStrategy with
 * byte_size_load_fn) and round_robin against answers worked out by hand
 * from the rule, the greedy bound on random tables and on the real
 * networks, and the --ps_placement names.
 * Where it sits: tests/ of ps/; no MPI, no training.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "ps/placement.h"

#include "tests/check.h"

/* By hand, 3 tasks, bytes 400 100 300 200 250 50 in this order (greedy: the
 * first least-loaded task, then its load grows):
 *   400 -> 0 (0 0 0, first)       loads 400   0   0
 *   100 -> 1 (first of 1, 2)      loads 400 100   0
 *   300 -> 2                      loads 400 100 300
 *   200 -> 1                      loads 400 300 300
 *   250 -> 1 (tie 1, 2: first)    loads 400 550 300
 *    50 -> 2                      loads 400 550 350
 * round_robin: 0 1 2 0 1 2, loads 600 350 350. */
static void check_by_hand(void) {
    const size_t bytes[] = {400, 100, 300, 200, 250, 50};
    const int want_greedy[] = {0, 1, 2, 1, 1, 2}, want_rr[] = {0, 1, 2, 0, 1, 2};
    const size_t load_greedy[] = {400, 550, 350}, load_rr[] = {600, 350, 350};
    int owner[6];
    size_t load[3];
    ps_place_variables(bytes, 6, 3, PS_PLACE_GREEDY, owner, load);
    for (int i = 0; i < 6; i++) CHECK(owner[i] == want_greedy[i], "greedy: variable %d on task %d, want %d", i, owner[i], want_greedy[i]);
    for (int t = 0; t < 3; t++) CHECK(load[t] == load_greedy[t], "greedy: task %d holds %zu, want %zu", t, load[t], load_greedy[t]);
    ps_place_variables(bytes, 6, 3, PS_PLACE_ROUND_ROBIN, owner, load);
    for (int i = 0; i < 6; i++) CHECK(owner[i] == want_rr[i], "round_robin: variable %d on task %d, want %d", i, owner[i], want_rr[i]);
    for (int t = 0; t < 3; t++) CHECK(load[t] == load_rr[t], "round_robin: task %d holds %zu, want %zu", t, load[t], load_rr[t]);
    ps_place_variables(bytes, 6, 1, PS_PLACE_GREEDY, owner, load);
    CHECK(load[0] == 1300 && owner[5] == 0, "one task holds everything");
    printf("by hand: greedy 0 1 2 1 1 2 (loads 400 550 350), round_robin 0 1 2 0 1 2 (600 350 350)\n");
}

/* Greedy's bound: every task that got a variable was the least loaded at
 * that moment, so the most loaded task exceeds the least loaded by at most
 * the largest variable; every byte is placed once. */
static void check_balance(const size_t *bytes, int n, int tasks, const char *what) {
    int owner[MODEL_MAX_VARS];
    size_t load[16], total = 0, biggest = 0, sum = 0;
    ps_place_variables(bytes, n, tasks, PS_PLACE_GREEDY, owner, load);
    size_t hi = 0, lo = (size_t)-1;
    for (int i = 0; i < n; i++) {
        total += bytes[i];
        if (bytes[i] > biggest) biggest = bytes[i];
        CHECK(owner[i] >= 0 && owner[i] < tasks, "%s: variable %d on task %d of %d", what, i, owner[i], tasks);
    }
    for (int t = 0; t < tasks; t++) {
        sum += load[t];
        if (load[t] > hi) hi = load[t];
        if (load[t] < lo) lo = load[t];
    }
    CHECK(sum == total, "%s: %zu bytes placed of %zu", what, sum, total);
    CHECK(hi - lo <= biggest, "%s, %d tasks: loads %zu to %zu differ by more than the largest variable (%zu)", what,
          tasks, lo, hi, biggest);
}

int main(void) {
    check_by_hand();
    srand(11);
    for (int trial = 0; trial < 200; trial++) {
        size_t bytes[64];
        const int n = 1 + rand() % 64, tasks = 1 + rand() % 16;
        for (int i = 0; i < n; i++) bytes[i] = 4 * (size_t)(1 + rand() % 100000);
        check_balance(bytes, n, tasks, "random table");
    }
    printf("random tables: 200 of 1-64 variables on 1-16 tasks within the greedy bound\n");
    const char *models[] = {"mnist", "cifar10"};
    const int shapes[][3] = {{28, 28, 1}, {24, 24, 3}};
    for (int m = 0; m < 2; m++) {
        ModelSpec spec;
        char err[256];
        CHECK(model_spec_init(&spec, models[m], shapes[m][0], shapes[m][1], shapes[m][2], 10, err, sizeof err) == 0, "%s", err);
        size_t bytes[MODEL_MAX_VARS];
        for (int i = 0; i < spec.n_vars; i++) bytes[i] = spec.vars[i].n_floats * sizeof(float);
        for (int tasks = 1; tasks <= 4; tasks++) check_balance(bytes, spec.n_vars, tasks, models[m]);
        int owner[MODEL_MAX_VARS];
        size_t load[4];
        ps_place_variables(bytes, spec.n_vars, 2, PS_PLACE_GREEDY, owner, load);
        printf("%s on 2 tasks, greedy: %zu and %zu bytes\n", models[m], load[0], load[1]);
    }
    PsPlacement rule;
    char err[256];
    CHECK(ps_placement_from_name("round_robin", &rule, err, sizeof err) == 0 && rule == PS_PLACE_ROUND_ROBIN);
    CHECK(ps_placement_from_name("greedy", &rule, err, sizeof err) == 0 && rule == PS_PLACE_GREEDY);
    CHECK(ps_placement_from_name("random", &rule, err, sizeof err) == -1 && strstr(err, "--ps_placement 'random'"), "%s", err);
    printf("test_ps_placement: %d checks, %d failed\n", check_count, check_failures);
    return check_failures != 0;
}
