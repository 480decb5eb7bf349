/* test_gpu_modes.c — every variable placement mode trains the same
 * trajectory on GPU towers: ps_gpu, replicated_nccl (when built with NCCL)
 * and replicated_host against ps_cpu, all on the same GPU towers.
 *
 * Where it sits: label gpu; skipped (77) without a GPU.  It drives the
 * trainer itself (tests/modes_common.h, as test_modes_equivalence.c does on
 * CPU towers): synthetic data, both models, momentum 0.9 Nesterov, 1, 2 and
 * 4 towers of batch 2 on GPU 0 (and, with several GPUs, spread over them),
 * 3 steps.  Checked:
 *   - each mode's variables and moving averages within 1e-5 (largest
 *     normwise relative difference over the variables) of ps_cpu's on the
 *     same GPU towers, and every variable moved far beyond that; whether
 *     they are bitwise equal is printed (they should be for ps_gpu, and for
 *     replicated_nccl on one GPU: the same gradients, the same sum order,
 *     the same formulas, as long as cuDNN's algorithms are deterministic);
 *   - ps_cpu on GPU towers against ps_cpu on CPU towers (the GPU layers
 *     round differently: tests/test_gpu_tower_equivalence.c): within 1e-4
 *     after 1 step, within 1e-3 after 3 (TOLERANCE_CPU_* say why);
 *   - the comparison can fail: ps_gpu and replicated_nccl with a learning
 *     rate 0.1% higher differ by more than 1e-5 (at 2 towers);
 *   - replicated_nccl: after the steps every tower's device variables and
 *     mean gradient are bitwise tower 0's;
 *   - the last step's spans (CUDA events on the host clock) are ordered and
 *     inside the step: copy-in, forward, backward (and copy-out only where
 *     a gradient had to move), the server's average and apply (ps_gpu), the
 *     leaders' ncclAllReduce inside their all-reduce phase (replicated_nccl);
 *   - ps_gpu and replicated_nccl: 2 steps, a checkpoint, --resume and 1 step
 *     give the 3-step variables (within 1e-5; bitwise printed), and the same
 *     checkpoint resumed by ps_cpu stays within 1e-5 (one format);
 *   - the other optimizers of the table (sgd, adam, adamw, centered rmsprop
 *     with momentum), mnist on 2 towers: ps_gpu and replicated_nccl against
 *     ps_cpu, and the resume check above, for each.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/trainer.h"
#include "tests/modes_common.h"
#include "tests/test_gpu_common.h"

#define TOLERANCE 1e-5      /* a mode against ps_cpu on the same GPU towers */
/* GPU towers against CPU towers.  After 1 step from the same variables only
 * float rounding in the layers separates them: 1e-4.  After 3 steps at
 * learning rate 0.1 a pre-activation within rounding of 0 (relu) or a
 * max-pool tie within rounding may fall the other way on one side in step
 * 1 or 2, which moves a conv gradient, and the variables after it, by about
 * 1e-3 relative: harmless, so 1e-3 there (a real error, a wrong layer,
 * shows at step 1 and far above either bound). */
#define TOLERANCE_CPU_STEP1 1e-4
#define TOLERANCE_CPU 1e-3
#define STEPS 3
#define BATCH 2
#define SLACK_SEC 2e-6      /* event timing resolution, when comparing spans of different clocks */

static int n_gpus;

/* The optimizer gpu_options sets (check_optimizers); NULL: the default, momentum 0.9 Nesterov. */
typedef struct {
    const char *optimizer;
    float lr;
    int centered;
    float rms_momentum;
} GpuOptChoice;
static const GpuOptChoice *g_opt;

static void gpu_options(TrainerOptions *o, const char *model, int n_towers, int spread, TrainerMode mode) {
    modes_base_options(o, model, "gpu", n_towers, BATCH);
    o->num_gpus = spread ? (n_towers < n_gpus ? n_towers : n_gpus) : 1;
    if (g_opt) {
        o->optimizer = g_opt->optimizer;
        o->learning_rate = g_opt->lr;
        o->rmsprop_centered = g_opt->centered;
        o->rmsprop_momentum = g_opt->rms_momentum;
        o->weight_decay = 0.1f;
    }
    trainer_mode_set_flags(mode, o);
}

static int mode_built(TrainerMode m) {
    char err[512];
    return trainer_mode_available(m, err, sizeof err);
}

/* replicated_nccl: every tower's device variables and gradient bitwise tower 0's. */
static int device_replicas_equal(Trainer *tr) {
    const size_t n_bytes = tr->spec.n_params * sizeof(float);
    float *ref_p = gpu_test_host(n_bytes), *ref_g = gpu_test_host(n_bytes);
    float *p = gpu_test_host(n_bytes), *g = gpu_test_host(n_bytes);
    int equal = 1;
    for (int t = 0; t < tr->n_towers; t++) {
        TowerDeviceView v;
        char err[256];
        if (tower_group_device_view(tr->towers, t, &v, err, sizeof err) != 0) {
            fprintf(stderr, "tower_group_device_view: %s\n", err);
            exit(1);
        }
        CUDA_CHECK(cudaSetDevice(v.device));
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(t ? p : ref_p, v.params, n_bytes, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(t ? g : ref_g, v.grads, n_bytes, cudaMemcpyDeviceToHost));
        if (t && (memcmp(p, ref_p, n_bytes) || memcmp(g, ref_g, n_bytes))) equal = 0;
    }
    free(ref_p);
    free(ref_g);
    free(p);
    free(g);
    return equal;
}

static int span_ok(const TowerSpan *s, double lo, double hi) {
    return s->start_sec > 0.0 && s->start_sec <= s->end_sec && s->start_sec >= lo - SLACK_SEC && s->end_sec <= hi + SLACK_SEC;
}

/* The last step's spans, as docs/modes.md ("Reading a trace") promises them. */
static int spans_ok(const Trainer *tr, char *why, size_t why_n_bytes) {
    const TrainerStepTimes *st = &tr->times;
    for (int t = 0; t < tr->n_towers; t++) {
        const TowerSpan *sp = tr->towers->towers[t].times.span;
        const TowerSpan *in = &sp[TOWER_PHASE_COPY_IN], *fw = &sp[TOWER_PHASE_FORWARD], *bw = &sp[TOWER_PHASE_BACKWARD],
                        *out = &sp[TOWER_PHASE_COPY_OUT];
        if (!span_ok(in, st->start_sec, st->end_sec) || !span_ok(fw, in->end_sec, st->end_sec) ||
            !span_ok(bw, fw->end_sec, st->end_sec)) {
            snprintf(why, why_n_bytes, "tower %d: copy-in %.6f-%.6f, forward %.6f-%.6f, backward %.6f-%.6f in step %.6f-%.6f",
                     t, in->start_sec, in->end_sec, fw->start_sec, fw->end_sec, bw->start_sec, bw->end_sec,
                     st->start_sec, st->end_sec);
            return 0;
        }
        int want_copy_out = 1;
#ifdef TOWER_HAVE_CUDA
        if (tr->mode == TRAINER_PS_GPU) want_copy_out = ps_gpu_gather_dst(tr->ps_gpu, t) != NULL;
#endif
        if (tr->mode == TRAINER_REPLICATED_NCCL) want_copy_out = 0;
        if (want_copy_out ? !span_ok(out, bw->end_sec, st->end_sec) : out->start_sec != 0.0) {
            snprintf(why, why_n_bytes, "tower %d: copy-out %.6f-%.6f (%s expected)", t, out->start_sec, out->end_sec,
                     want_copy_out ? "one" : "none");
            return 0;
        }
        if (tr->mode == TRAINER_REPLICATED_NCCL) {
            const TowerSpan *red = &sp[TOWER_PHASE_REDUCE], *nc = &tr->nccl_spans[t];
            const int leader = nc->start_sec > 0.0;
            if (!span_ok(red, bw->end_sec, st->end_sec) || !span_ok(&sp[TOWER_PHASE_APPLY], red->end_sec, st->end_sec) ||
                (leader && !span_ok(nc, red->start_sec, red->end_sec)) || (t == 0 && !leader)) {
                snprintf(why, why_n_bytes, "tower %d: all-reduce %.6f-%.6f, ncclAllReduce %.6f-%.6f, apply %.6f-%.6f", t,
                         red->start_sec, red->end_sec, nc->start_sec, nc->end_sec, sp[TOWER_PHASE_APPLY].start_sec,
                         sp[TOWER_PHASE_APPLY].end_sec);
                return 0;
            }
        }
    }
    if (tr->mode == TRAINER_PS_GPU &&
        (!span_ok(&st->average, st->towers.end_sec, st->end_sec) || !span_ok(&st->apply, st->average.end_sec, st->end_sec))) {
        snprintf(why, why_n_bytes, "server: average %.6f-%.6f, apply %.6f-%.6f after the towers' end %.6f, step end %.6f",
                 st->average.start_sec, st->average.end_sec, st->apply.start_sec, st->apply.end_sec, st->towers.end_sec,
                 st->end_sec);
        return 0;
    }
    snprintf(why, why_n_bytes, "ordered");
    return 1;
}

typedef struct {
    RunResult r;
    int replicas_equal;  /* replicated_nccl: on the devices; 1 otherwise */
    int spans;           /* the last step's spans check out */
    char why[512];
} GpuRun;

static GpuRun run_mode(const TrainerOptions *o) {
    GpuRun g;
    Trainer *tr = modes_open_or_die(o);
    modes_steps_or_die(tr, STEPS);
    g.spans = spans_ok(tr, g.why, sizeof g.why);
    g.replicas_equal = tr->mode == TRAINER_REPLICATED_NCCL ? device_replicas_equal(tr) : 1;
    g.r = modes_collect(tr);
    if (!g.r.replicas_equal) g.replicas_equal = 0;
    trainer_close(tr, NULL, 0);
    return g;
}

static int bitwise(const ModelSpec *spec, const RunResult *a, const RunResult *b) {
    return !memcmp(a->params, b->params, spec->n_params * sizeof(float)) &&
           !memcmp(a->ema, b->ema, spec->n_params * sizeof(float));
}

static int check_model(const char *model, int H, int W, int C, int spread) {
    ModelSpec spec;
    char err[1024];
    if (model_spec_init(&spec, model, H, W, C, 10, err, sizeof err) != 0) {
        fprintf(stderr, "model_spec_init: %s\n", err);
        exit(1);
    }
    const char *where = spread ? "over the GPUs" : "on GPU 0";
    const TrainerMode modes[] = {TRAINER_PS_GPU, TRAINER_REPLICATED_NCCL, TRAINER_REPLICATED_HOST};
    const int counts[] = {1, 2, 4};
    int failures = 0;
    float *init = gpu_test_host(spec.n_params * sizeof(float));
    model_init_params(init, &spec, 5); /* modes_base_options' seed */
    for (int c = 0; c < 3; c++) {
        const int n = counts[c];
        TrainerOptions o;
        gpu_options(&o, model, n, spread, TRAINER_PS_CPU);
        GpuRun ref = run_mode(&o);
        const char *w = "";
        double moved = modes_var_rel_diff(&spec, ref.r.params, init, 1, &w);
        int ok = moved > 100 * TOLERANCE && ref.spans;
        printf("%-7s %d tower(s) %s, ps_cpu: every variable moved >= %.3g (%s); spans %s  %s\n", model, n, where, moved,
               w, ref.why, ok ? "ok" : "FAIL");
        failures += !ok;
        if (!spread) {
            RunResult gpu1 = modes_run(&o, 1); /* o: ps_cpu on GPU towers */
            modes_base_options(&o, model, "cpu", n, BATCH);
            RunResult cpu1 = modes_run(&o, 1);
            RunResult cpu = modes_run(&o, STEPS);
            double d1 = modes_var_rel_diff(&spec, cpu1.params, gpu1.params, 0, &w);
            ok = d1 <= TOLERANCE_CPU_STEP1;
            printf("%-7s %d tower(s) %s, ps_cpu: GPU towers vs CPU towers after 1 step %.3g (%s), bound %.0e  %s\n", model,
                   n, where, d1, w, TOLERANCE_CPU_STEP1, ok ? "ok" : "FAIL");
            failures += !ok;
            double d = modes_var_rel_diff(&spec, cpu.params, ref.r.params, 0, &w);
            ok = d <= TOLERANCE_CPU;
            printf("%-7s %d tower(s) %s, ps_cpu: GPU towers vs CPU towers after %d steps %.3g (%s), bound %.0e  %s\n",
                   model, n, where, STEPS, d, w, TOLERANCE_CPU, ok ? "ok" : "FAIL");
            failures += !ok;
            modes_free_result(&gpu1);
            modes_free_result(&cpu1);
            modes_free_result(&cpu);
        }
        for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
            if (!mode_built(modes[m])) {
                /* Under the GPU check every mode must run: a build without NCCL fails it. */
                const int required = gpu_test_gpu_required();
                printf("%-7s %d tower(s) %s, %s: not built in, %s\n", model, n, where, trainer_mode_name(modes[m]),
                       required ? "FAIL (TOWER_TEST_REQUIRE_GPU=1)" : "skipped");
                failures += required;
                continue;
            }
            gpu_options(&o, model, n, spread, modes[m]);
            GpuRun run = run_mode(&o);
            const char *wp = "", *we = "";
            double dp = modes_var_rel_diff(&spec, ref.r.params, run.r.params, 0, &wp);
            double de = modes_var_rel_diff(&spec, ref.r.ema, run.r.ema, 0, &we);
            ok = dp <= TOLERANCE && de <= TOLERANCE && run.replicas_equal && run.spans;
            printf("%-7s %d tower(s) %s, %-15s vs ps_cpu: variables %.3g (%s), moving averages %.3g (%s), bitwise %s; "
                   "replicas equal: %s; spans %s  %s\n",
                   model, n, where, trainer_mode_name(modes[m]), dp, wp, de, we, bitwise(&spec, &ref.r, &run.r) ? "yes" : "no",
                   run.replicas_equal ? "yes" : "NO", run.why, ok ? "ok" : "FAIL");
            failures += !ok;
            modes_free_result(&run.r);
            if (n == 2 && modes[m] != TRAINER_REPLICATED_HOST) {
                o.learning_rate *= 1.001f;
                GpuRun off = run_mode(&o);
                double d = modes_var_rel_diff(&spec, ref.r.params, off.r.params, 0, &wp);
                ok = d > TOLERANCE;
                printf("%-7s %d tower(s) %s, %s with the learning rate +0.1%%: differs by %.3g (%s), more than %.0e  %s\n",
                       model, n, where, trainer_mode_name(modes[m]), d, wp, TOLERANCE, ok ? "ok" : "FAIL");
                failures += !ok;
                modes_free_result(&off.r);
            }
        }
        modes_free_result(&ref.r);
    }
    free(init);
    return failures;
}

/* 2 steps + checkpoint + resume + 1 step = 3 steps; the checkpoint also resumes under ps_cpu. */
static int check_resume(TrainerMode mode) {
    char dir[] = "/tmp/test_gpu_modes_resume_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    TrainerOptions o;
    gpu_options(&o, "mnist", 2, 0, mode);
    o.train_dir = dir;
    RunResult straight = modes_run(&o, STEPS);
    Trainer *tr = modes_open_or_die(&o);
    modes_steps_or_die(tr, STEPS - 1);
    char err[1024];
    if (trainer_save(tr, err, sizeof err) != 0) {
        fprintf(stderr, "trainer_save: %s\n", err);
        exit(1);
    }
    ModelSpec spec = tr->spec;
    trainer_close(tr, NULL, 0);
    o.resume = 1;
    tr = modes_open_or_die(&o);
    long resumed_at = tr->ps->global_step;
    modes_steps_or_die(tr, 1);
    RunResult resumed = modes_collect(tr);
    trainer_close(tr, NULL, 0);
    const char *wp = "", *we = "";
    double dp = modes_var_rel_diff(&spec, straight.params, resumed.params, 0, &wp);
    double de = modes_var_rel_diff(&spec, straight.ema, resumed.ema, 0, &we);
    int ok = resumed_at == STEPS - 1 && dp <= TOLERANCE && de <= TOLERANCE;
    printf("%s, 2 towers: %d steps + checkpoint + resume (at step %ld) + 1 step vs %d straight: %.3g (%s), moving "
           "averages %.3g (%s), bitwise %s  %s\n", trainer_mode_name(mode), STEPS - 1, resumed_at, STEPS, dp, wp, de, we,
           bitwise(&spec, &straight, &resumed) ? "yes" : "no", ok ? "ok" : "FAIL");
    trainer_mode_set_flags(TRAINER_PS_CPU, &o);
    tr = modes_open_or_die(&o); /* resumes the same checkpoint (step 2; the resumed run saved nothing) */
    modes_steps_or_die(tr, 1);
    RunResult as_ps = modes_collect(tr);
    trainer_close(tr, NULL, 0);
    double d = modes_var_rel_diff(&spec, straight.params, as_ps.params, 0, &wp);
    int ok_ps = d <= TOLERANCE;
    printf("the %s checkpoint resumed as ps_cpu for 1 step: %.3g (%s) from the straight run  %s\n",
           trainer_mode_name(mode), d, wp, ok_ps ? "ok" : "FAIL");
    modes_free_result(&straight);
    modes_free_result(&resumed);
    modes_free_result(&as_ps);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return !ok + !ok_ps;
}

/* Every other optimizer of the table (its slots on the devices, Adam's beta
 * powers on the host): mnist, 2 towers on GPU 0, ps_gpu and replicated_nccl
 * against ps_cpu on the same GPU towers (within TOLERANCE, bitwise printed),
 * and each GPU mode's 2 steps + checkpoint + resume + 1 step. */
static int check_optimizers(void) {
    static const GpuOptChoice choices[] = {{"sgd", 0.1f, 0, 0.0f}, {"adam", 0.001f, 0, 0.0f}, {"adamw", 0.001f, 0, 0.0f},
                                           {"rmsprop", 0.1f, 1, 0.5f}};
    ModelSpec spec;
    char err[1024];
    if (model_spec_init(&spec, "mnist", 28, 28, 1, 10, err, sizeof err) != 0) {
        fprintf(stderr, "model_spec_init: %s\n", err);
        exit(1);
    }
    int failures = 0;
    const TrainerMode modes[] = {TRAINER_PS_GPU, TRAINER_REPLICATED_NCCL};
    for (size_t c = 0; c < sizeof choices / sizeof choices[0]; c++) {
        g_opt = &choices[c];
        TrainerOptions o;
        gpu_options(&o, "mnist", 2, 0, TRAINER_PS_CPU);
        GpuRun ref = run_mode(&o);
        for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
            if (!mode_built(modes[m])) continue; /* check_model said why */
            gpu_options(&o, "mnist", 2, 0, modes[m]);
            GpuRun run = run_mode(&o);
            const char *wp = "", *we = "";
            double dp = modes_var_rel_diff(&spec, ref.r.params, run.r.params, 0, &wp);
            double de = modes_var_rel_diff(&spec, ref.r.ema, run.r.ema, 0, &we);
            int ok = dp <= TOLERANCE && de <= TOLERANCE && run.replicas_equal;
            printf("%-8s%s mnist 2 towers on GPU 0, %-15s vs ps_cpu: variables %.3g (%s), moving averages %.3g (%s), "
                   "bitwise %s; replicas equal: %s  %s\n", g_opt->optimizer, g_opt->centered ? " centered" : "",
                   trainer_mode_name(modes[m]), dp, wp, de, we, bitwise(&spec, &ref.r, &run.r) ? "yes" : "no",
                   run.replicas_equal ? "yes" : "NO", ok ? "ok" : "FAIL");
            failures += !ok;
            modes_free_result(&run.r);
            printf("%s: ", g_opt->optimizer);
            failures += check_resume(modes[m]);
        }
        modes_free_result(&ref.r);
    }
    g_opt = NULL;
    return failures;
}

int main(void) {
    gpu_test_require_gpu();
    char err[256];
    n_gpus = tower_cuda_device_count(err, sizeof err);
    if (n_gpus < 1) gpu_test_skip(err);
    for (int d = 0; d < n_gpus; d++) {
        char desc[256];
        tower_cuda_describe_device(d, desc, sizeof desc);
        printf("%s\n", desc);
    }
    int failures = 0;
    for (int spread = 0; spread < (n_gpus > 1 ? 2 : 1); spread++) {
        failures += check_model("mnist", 28, 28, 1, spread);
        failures += check_model("cifar10", 24, 24, 3, spread);
    }
    failures += check_resume(TRAINER_PS_GPU);
    if (mode_built(TRAINER_REPLICATED_NCCL)) failures += check_resume(TRAINER_REPLICATED_NCCL);
    else failures += gpu_test_gpu_required(); /* the mode loop above said why */
    failures += check_optimizers();
    printf("%s\n", failures ? "GPU modes FAILED" : "every GPU mode trains ps_cpu's trajectory");
    return failures ? 1 : 0;
}
