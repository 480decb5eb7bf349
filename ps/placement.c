/* placement.c — the variables' parameter-server tasks (rules: ps/placement.h). */
#include "ps/placement.h"

#include <stdio.h>
#include <stdlib.h>
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

size_t ps_shards_n_bytes(int n_vars, int n_ranks) {
    const PsShards *s = NULL;
    return (size_t)n_vars * (sizeof *s->owner + sizeof *s->order) + (size_t)n_ranks * sizeof *s->counts +
           ((size_t)n_ranks + 1) * sizeof *s->displs + (size_t)n_ranks * sizeof *s->shard_n_bytes;
}

int ps_shards_init(PsShards *s, const ModelSpec *spec, int n_ranks, int n_ps, PsPlacement rule) {
    const int n_vars = spec->n_vars;
    memset(s, 0, sizeof *s);
    s->n_ranks = n_ranks;
    s->owner = malloc((size_t)n_vars * sizeof *s->owner);
    s->order = malloc((size_t)n_vars * sizeof *s->order);
    s->counts = calloc((size_t)n_ranks, sizeof *s->counts);
    s->displs = calloc((size_t)n_ranks + 1, sizeof *s->displs);
    s->shard_n_bytes = calloc((size_t)n_ranks, sizeof *s->shard_n_bytes);
    size_t *var_n_bytes = malloc((size_t)n_vars * sizeof *var_n_bytes);
    if (!s->owner || !s->order || !s->counts || !s->displs || !s->shard_n_bytes || !var_n_bytes) {
        free(var_n_bytes);
        ps_shards_free(s);
        return -1;
    }
    for (int i = 0; i < n_vars; i++) var_n_bytes[i] = spec->vars[i].n_floats * sizeof(float);
    ps_place_variables(var_n_bytes, n_vars, n_ps, rule, s->owner, s->shard_n_bytes);
    free(var_n_bytes);
    int k = 0;
    for (int r = 0; r < n_ranks; r++) {
        s->displs[r] = r == 0 ? 0 : s->displs[r - 1] + s->counts[r - 1];
        for (int i = 0; i < n_vars; i++)
            if (s->owner[i] == r) {
                s->order[k++] = i;
                s->counts[r] += (int)spec->vars[i].n_floats;
            }
    }
    s->displs[n_ranks] = s->displs[n_ranks - 1] + s->counts[n_ranks - 1];
    return 0;
}

void ps_shards_free(PsShards *s) {
    free(s->owner);
    free(s->order);
    free(s->counts);
    free(s->displs);
    free(s->shard_n_bytes);
    memset(s, 0, sizeof *s);
}

int ps_shards_first(const PsShards *s, const ModelSpec *spec, int r) {
    int k = 0;
    for (int i = 0; i < spec->n_vars; i++) k += s->owner[i] < r;
    return k;
}

void ps_shards_pack(const PsShards *s, const ModelSpec *spec, int lo, int hi, const float *block, float *packed) {
    size_t at = (size_t)s->displs[lo];
    for (int k = ps_shards_first(s, spec, lo); k < ps_shards_first(s, spec, hi); k++) {
        const ModelVar *v = &spec->vars[s->order[k]];
        memcpy(packed + at, block + v->offset, v->n_floats * sizeof(float));
        at += v->n_floats;
    }
}

void ps_shards_unpack(const PsShards *s, const ModelSpec *spec, int lo, int hi, const float *packed, float *block) {
    size_t at = (size_t)s->displs[lo];
    for (int k = ps_shards_first(s, spec, lo); k < ps_shards_first(s, spec, hi); k++) {
        const ModelVar *v = &spec->vars[s->order[k]];
        memcpy(block + v->offset, packed + at, v->n_floats * sizeof(float));
        at += v->n_floats;
    }
}
