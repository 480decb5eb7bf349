/* modes.c — the table of variable placement modes, in TrainerMode order,
 * and the names and flags that select them (train/trainer.h).
 *
 * Where it sits: train/; the trainer reaches a mode only through
 * train_mode(m) (train/mode.h).  A new mode adds one line to `modes`.
 * What it does not do: know what any mode does.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "train/mode.h"

extern const TrainModeI train_mode_ps_cpu, train_mode_ps_gpu, train_mode_replicated_host, train_mode_replicated_nccl,
    train_mode_replicated_mpi, train_mode_ps_mpi, train_mode_replicated_mpi_allreduce, train_mode_ps_mpi_async,
    train_mode_replicated_nccl_mpi;

static const TrainModeI *const modes[TRAINER_N_MODES] = {
    [TRAINER_PS_CPU] = &train_mode_ps_cpu,
    [TRAINER_PS_GPU] = &train_mode_ps_gpu,
    [TRAINER_REPLICATED_HOST] = &train_mode_replicated_host,
    [TRAINER_REPLICATED_NCCL] = &train_mode_replicated_nccl,
    [TRAINER_REPLICATED_MPI] = &train_mode_replicated_mpi,
    [TRAINER_PS_MPI] = &train_mode_ps_mpi,
    [TRAINER_REPLICATED_MPI_ALLREDUCE] = &train_mode_replicated_mpi_allreduce,
    [TRAINER_PS_MPI_ASYNC] = &train_mode_ps_mpi_async,
    [TRAINER_REPLICATED_NCCL_MPI] = &train_mode_replicated_nccl_mpi,
};

const TrainModeI *train_mode(TrainerMode m) { return modes[m]; }

double trainer_mode_predict_ms(TrainerMode m, const TrainCostFigures *f, int n_towers) {
    if (m < 0 || m >= TRAINER_N_MODES || !modes[m]->predict_ms || n_towers < 1) return NAN;
    const double share = (double)n_towers / (n_towers < f->cores ? n_towers : f->cores);
    return modes[m]->predict_ms(f, n_towers, share);
}

const char *trainer_mode_name(TrainerMode m) { return m >= 0 && m < TRAINER_N_MODES ? modes[m]->name : "?"; }

/* "a, b or c": the distinct values of `field` among the modes of
 * variable_update (every mode when it is NULL), `first` (if any) leading. */
static void list_values(char *out, size_t out_n_bytes, const char *variable_update, const char *first) {
    const char *vals[TRAINER_N_MODES + 1];
    int n = 0;
    if (first) vals[n++] = first;
    for (int m = 0; m < TRAINER_N_MODES; m++) {
        const char *v = variable_update ? (strcmp(modes[m]->variable_update, variable_update) ? NULL : modes[m]->placement)
                                        : modes[m]->variable_update;
        int seen = v == NULL;
        for (int k = 0; k < n && !seen; k++) seen = !strcmp(vals[k], v);
        if (!seen) vals[n++] = v;
    }
    size_t used = 0;
    out[0] = '\0';
    for (int k = 0; k < n && used < out_n_bytes; k++)
        used += (size_t)snprintf(out + used, out_n_bytes - used, "%s%s", k == 0 ? "" : k + 1 == n ? " or " : ", ",
                                 vals[k]);
}

int trainer_mode_from_flags(const char *variable_update, const char *local_parameter_device,
                            const char *all_reduce, TrainerMode *mode, char *err, size_t err_n_bytes) {
    char expected[200];
    /* tf_cnn_benchmarks: parameter_server places by --local_parameter_device,
     * replicated by --all_reduce, whose "auto" is host here (trainer_open
     * settles it once the towers are known). */
    const int ps = !strcmp(variable_update, "parameter_server");
    const int replicated = !strcmp(variable_update, "replicated");
    if (!ps && !replicated) {
        list_values(expected, sizeof expected, NULL, NULL);
        snprintf(err, err_n_bytes, "--variable_update '%s': expected %s", variable_update, expected);
        return -1;
    }
    const char *placement = ps ? local_parameter_device : !strcmp(all_reduce, "auto") ? "host" : all_reduce;
    for (int m = 0; m < TRAINER_N_MODES; m++) {
        if (!strcmp(modes[m]->variable_update, variable_update) && !strcmp(modes[m]->placement, placement)) {
            *mode = (TrainerMode)m;
            return 0;
        }
    }
    list_values(expected, sizeof expected, variable_update, replicated ? "auto" : NULL);
    snprintf(err, err_n_bytes, "%s '%s': expected %s", ps ? "--local_parameter_device" : "--all_reduce",
             ps ? local_parameter_device : all_reduce, expected);
    return -1;
}

int trainer_mode_from_name(const char *name, TrainerMode *mode, char *err, size_t err_n_bytes) {
    for (int m = 0; m < TRAINER_N_MODES; m++) {
        int match = !strcmp(name, modes[m]->name);
        for (const char *const *a = modes[m]->aliases; a && *a && !match; a++) match = !strcmp(name, *a);
        if (match) {
            *mode = (TrainerMode)m;
            return 0;
        }
    }
    snprintf(err, err_n_bytes, "unknown mode '%s': expected ps_cpu, ps_gpu, replicated_host, replicated_nccl, replicated_mpi, ps_mpi, "
             "replicated_mpi_allreduce, ps_mpi_async or replicated_nccl_mpi (or parameter_server/cpu, parameter_server/gpu, "
             "replicated/host, replicated/nccl, replicated/mpi, parameter_server/mpi, replicated/mpi_allreduce, "
             "parameter_server/mpi_async, replicated/nccl_mpi)", name);
    return -1;
}

void trainer_mode_set_flags(TrainerMode m, TrainerOptions *o) {
    const TrainModeI *mi = modes[m];
    const int ps = !strcmp(mi->variable_update, "parameter_server");
    o->variable_update = mi->variable_update;
    o->local_parameter_device = ps ? mi->placement : "cpu";
    o->all_reduce = ps ? "auto" : mi->placement;
    o->sync_replicas = !mi->asynchronous; /* it shares ps_mpi's flags; ps_mpi's settle picks it */
}

int trainer_mode_available(TrainerMode m, char *err, size_t err_n_bytes) {
    if (m < 0 || m >= TRAINER_N_MODES) {
        snprintf(err, err_n_bytes, "unknown mode %d", (int)m);
        return 0;
    }
    return modes[m]->available(err, err_n_bytes);
}
