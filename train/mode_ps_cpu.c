/* mode_ps_cpu.c — --variable_update parameter_server --local_parameter_device
 * cpu (TensorFlow's cifar10_multi_gpu_train): the master variables in host
 * memory; every tower copies them in, computes its gradient and copies it
 * out to its host buffer; the server thread averages the gradients and
 * applies the update (ps/ps.h).  CPU towers share the host's memory with the
 * master variables, so they read them in place instead (bound at open, as
 * TensorFlow reads a variable on /cpu:0 from an op on /cpu:0 without a
 * copy): the server updates them only while every tower waits.
 *
 * Where it sits: one entry of train/modes.c's table (train/mode.h).
 * Under mpirun with several ranks it settles on ps_mpi (mode_ps_mpi.c), or
 * with --sync_replicas false on ps_mpi_async (mode_ps_async.c).
 * What it does not do: run anything on the tower threads after their
 * copy-out (no hooks).
 */
#include <omp.h>
#include <stdio.h>

#include "train/mode.h"

static void mode_describe(const Trainer *tr, const char *ts) {
    printf("%s: global batch %d = %d tower(s); mode %s: the variables %s, gradients averaged and applied on /cpu:0 "
           "by %d OpenMP thread(s)\n", ts, tr->global_batch, tr->n_towers, trainer_mode_name(tr->mode),
           tr->params_bound ? "read in place by the towers" : "copied in by every tower", tr->server_threads);
}

/* CPU towers bound to the master variables (tower_group_bind_params: a backend that cannot, a GPU's, copies). */
static int mode_open(Trainer *tr, char *err, size_t err_n_bytes) {
    float *params[TOWER_MAX_TOWERS];
    for (int t = 0; t < tr->n_towers; t++) params[t] = tr->ps->params;
    tr->params_bound = tower_group_bind_params(tr->towers, params, err, err_n_bytes);
    return tr->params_bound < 0 ? -1 : 0;
}

/* Every tower copies the master variables in (or reads them in place: bound); the server thread averages
 * the gradients and applies the update, on server_threads OpenMP threads;
 * a non-finite mean gradient (not applied) or variable stops the run (-2). */
static int mode_step(Trainer *tr, PipelineBatch *batch, float *loss, char *err, size_t err_n_bytes) {
    ParamServer *ps = tr->ps;
    TowerStep ts = {.hooks = NULL};
    for (int t = 0; t < tr->n_towers; t++) ts.params[t] = tr->params_bound ? NULL : ps->params;
    int rc = train_run_towers(tr, &ts, batch, loss, err, err_n_bytes);
    if (rc != 1) return rc;
    const int threads_before = omp_get_max_threads();
    omp_set_num_threads(tr->server_threads);
    tr->times.average.start_sec = tower_now_sec();
    const int grads_bad = ps_average_grads(ps);
    tr->times.average.end_sec = tr->times.apply.start_sec = tower_now_sec();
    /* A non-finite mean gradient is not applied: the variables stay those of the last step. */
    const int vars_bad = grads_bad ? 0 : ps_apply_gradients(ps);
    tr->times.apply.end_sec = tower_now_sec();
    omp_set_num_threads(threads_before);
    if (grads_bad)
        return train_diverged(ps->global_step + 1, "non-finite gradients (not applied)", *loss, err, err_n_bytes);
    if (vars_bad) return train_diverged(ps->global_step, "non-finite variables", *loss, err, err_n_bytes);
    /* Batch norm's moving statistics from the towers' batch statistics (train/batch_norm.c). */
    const int moving_rc = train_update_moving(tr, &ps->params, 1, *loss, err, err_n_bytes);
    return moving_rc == 0 ? 1 : moving_rc;
}

/* The cost model (CPU towers, which read the variables in place: no copy):
 * the server reads N gradients and writes one mean (one tower: reads its
 * gradient only, ps_average_grads), then updates on every core. */
static double mode_predict_ms(const TrainCostFigures *f, int n_towers, double share) {
    (void)share;
    const double M = f->model_n_bytes, N = n_towers, reduce_n = n_towers == 1 ? 1.0 : N + 1;
    return reduce_n * M / (f->reduce_gbps * 1e9) * 1e3 + f->ps_apply_ms;
}

/* Under mpirun with several ranks: the parameter server sharded across
 * them, synchronous or (--sync_replicas false) not. */
static const TrainModeI *mode_settle(const Trainer *tr) {
    extern const TrainModeI train_mode_ps_mpi, train_mode_ps_mpi_async;
    return tr->n_ranks <= 1 ? NULL : tr->opt.sync_replicas ? &train_mode_ps_mpi : &train_mode_ps_mpi_async;
}

static const char *const aliases[] = {"parameter_server", "parameter_server/cpu", NULL};

const TrainModeI train_mode_ps_cpu = {
    .name = "ps_cpu",
    .variable_update = "parameter_server",
    .placement = "cpu",
    .flags = "--variable_update parameter_server --local_parameter_device cpu",
    .aliases = aliases,
    .server_row = "parameter server",
    .server_apply = "apply",
    .available = train_mode_always_available,
    .open = mode_open,
    .settle = mode_settle,
    .describe = mode_describe,
    .step = mode_step,
    .predict_ms = mode_predict_ms,
};
