/* placement.c — the variables' parameter-server tasks (rules: ps/placement.h). */
#include "ps/placement.h"

#include <stdio.h>
#include <string.h>

int ps_placement_from_name(const char *name, PsPlacement *rule, char *err, size_t err_n_bytes) {
    if (!strcmp(name, "greedy")) *rule = PS_PLACE_GREEDY;
    else if (!strcmp(name, "round_robin")) *rule = PS_PLACE_ROUND_ROBIN;
    else {
        snprintf(err, err_n_bytes, "--ps_placement '%s': expected greedy or round_robin", name);
        return -1;
    }
    return 0;
}

const char *ps_placement_name(PsPlacement rule) { return rule == PS_PLACE_ROUND_ROBIN ? "round_robin" : "greedy"; }

void ps_place_variables(const size_t *n_bytes, int n_vars, int n_tasks, PsPlacement rule, int *owner,
                        size_t *task_n_bytes) {
    size_t *load = task_n_bytes;
    memset(load, 0, (size_t)n_tasks * sizeof *load);
    for (int i = 0; i < n_vars; i++) {
        int task = i % n_tasks;
        if (rule == PS_PLACE_GREEDY) {
            task = 0; /* np.argmin: the first of the least loaded */
            for (int t = 1; t < n_tasks; t++)
                if (load[t] < load[task]) task = t;
        }
        owner[i] = task;
        load[task] += n_bytes[i];
    }
}
