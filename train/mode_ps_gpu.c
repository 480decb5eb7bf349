/* mode_ps_gpu.c — --variable_update parameter_server --local_parameter_device
 * gpu (PyTorch's DataParallel): the variables, momentum slots and moving
 * averages in device memory on tower 0's GPU (ps/ps_gpu.h); every tower
 * copies the variables in from there and its gradient out to there (peer
 * copies, nothing for a gradient already in place), and the server
 * averages and applies by kernels on that GPU.  The host block is a copy
 * for checkpoints, refreshed by save.
 *
 * Where it sits: one entry of train/modes.c's table (train/mode.h).  Built
 * with CUDA; without it the entry only says so (available).
 * What it does not do: run hooks on the tower threads.
 */
#include <stdio.h>

#include "train/mode.h"

#ifdef TOWER_HAVE_CUDA
#define mode_available train_mode_always_available

static void mode_describe(const Trainer *tr, const char *ts) {
    const int d = ps_gpu_device(tr->ps_gpu);
    printf("%s: global batch %d = %d tower(s); mode %s: variables, momentum slots and moving averages in device "
           "memory on /gpu:%d; gradients gathered there (", ts, tr->global_batch, tr->n_towers,
           trainer_mode_name(tr->mode), d);
    for (int t = 0; t < tr->n_towers; t++) {
        const int peer = ps_gpu_peer_access(tr->ps_gpu, t);
        printf("%stower_%d %s", t ? ", " : "", t,
               peer < 0 ? "in place" : peer ? "peer to peer" : "staged through host memory");
    }
    printf("), averaged and applied by kernels on /gpu:%d, variables copied to every tower each step; "
           "global_step on /cpu:0\n", d);
}

/* The server's state on tower 0's GPU, from the (initial or resumed) host block. */
static int mode_open(Trainer *tr, char *err, size_t err_n_bytes) {
    int devices[TOWER_MAX_TOWERS];
    float *params[TOWER_MAX_TOWERS], *grads[TOWER_MAX_TOWERS];
    if (train_device_views(tr, devices, params, grads, err, err_n_bytes) != 0) return -1;
    char e[512];
    tr->ps_gpu = ps_gpu_create(tr->ps, tr->n_towers, devices, grads, e, sizeof e);
    if (!tr->ps_gpu) {
        snprintf(err, err_n_bytes, "--local_parameter_device gpu: %s", e);
        return -1;
    }
    return 0;
}

static int mode_step(Trainer *tr, PipelineBatch *batch, float *loss, char *err, size_t err_n_bytes) {
    PsGpu *g = tr->ps_gpu;
    TowerDeviceCopy dc[TOWER_MAX_TOWERS];
    for (int t = 0; t < tr->n_towers; t++) {
        dc[t].params_src = ps_gpu_params(g);
        dc[t].params_device = ps_gpu_device(g);
        dc[t].grads_dst = ps_gpu_gather_dst(g, t);
        dc[t].grads_device = ps_gpu_device(g);
    }
    TowerStep ts = {.hooks = NULL, .device_copy = dc};
    int rc = train_run_towers(tr, &ts, batch, loss, err, err_n_bytes);
    if (rc != 1) return rc;
    PsGpuSpanMs average, apply;
    const double t0 = tower_now_sec();
    const int bad = ps_gpu_step(g, tr->ps, &average, &apply);
    tr->times.average = train_device_span(t0, &average);
    tr->times.apply = train_device_span(t0, &apply);
    /* As ps_cpu: a non-finite mean gradient was not applied (the kernels skipped it). */
    if (bad == PS_GPU_MEAN_NONFINITE)
        return train_diverged(tr->ps->global_step + 1, "non-finite gradients (not applied)", *loss, err, err_n_bytes);
    if (bad == PS_GPU_VARS_NONFINITE)
        return train_diverged(tr->ps->global_step, "non-finite variables", *loss, err, err_n_bytes);
    /* Batch norm's moving statistics (train/batch_norm.c): the host block's are current (the GPU's only ever
     * come from it), the towers' statistics through the host, the mean up to the server's GPU, where it
     * replaces whatever the optimizer's kernel wrote there. */
    if (tr->moving_n_floats == 0) return 1;
    const int moving_rc = train_update_moving(tr, &tr->ps->params, 1, *loss, err, err_n_bytes);
    if (moving_rc != 0) return moving_rc;
    if (tower_group_write_moving_device(tr->towers, 0, tr->ps->params, (float *)ps_gpu_params(g), ps_gpu_device(g),
                                        err, err_n_bytes) != 0)
        return -1;
    return 1;
}

/* The host block <- the GPU's variables, slots and moving averages. */
static void mode_save(const Trainer *tr) {
    if (tr->ps_gpu) ps_gpu_download(tr->ps_gpu, tr->ps);
}

static void mode_close(Trainer *tr) {
    ps_gpu_free(tr->ps_gpu);
    tr->ps_gpu = NULL;
}
#else
static int mode_available(char *err, size_t err_n_bytes) {
    snprintf(err, err_n_bytes, "--variable_update parameter_server --local_parameter_device gpu needs GPU towers: "
             "this tower was built without CUDA (cmake -DTOWER_CUDA=ON)");
    return 0;
}
#define mode_describe NULL
#define mode_open NULL
#define mode_step NULL
#define mode_save NULL
#define mode_close NULL
#endif

static const char *const aliases[] = {"parameter_server/gpu", NULL};

const TrainModeI train_mode_ps_gpu = {
    .name = "ps_gpu",
    .variable_update = "parameter_server",
    .placement = "gpu",
    .flags = "--variable_update parameter_server --local_parameter_device gpu",
    .aliases = aliases,
    .needs_gpu_towers = 1,
    .server_row = "parameter server (GPU)",
    .server_apply = "apply",
    .available = mode_available,
    .describe = mode_describe,
    .open = mode_open,
    .step = mode_step,
    .save = mode_save,
    .close = mode_close,
};
