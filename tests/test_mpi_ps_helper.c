/* test_mpi_ps_helper.c — the driver of tests/test_mpi_ps.sh: trains on
 * synthetic data (both networks without data files) through the trainer's
 * own open / step / save, under `mpirun -np R` or as one process, and
 * compares checkpoints.
 *
 *   test_mpi_ps_helper train MODEL OPTIMIZER TOWERS STEPS TRAIN_DIR MODE [PS_RANKS PLACEMENT RESUME]
 *       MODE: a trainer_mode_from_name name (ps_cpu, ps_mpi, ...); every
 *       rank calls trainer_save after the last step (rank 0 writes
 *       model.ckpt-STEP); RESUME 1: --resume from TRAIN_DIR first.  With
 *       PLACEMENT given, rank 0 prints the placement (--log_device_placement).
 *       TEST_MPI_PS_OTHER_DIR set: the ranks other than 0 use that train_dir
 *       (a host that does not see rank 0's checkpoints; rank 0 then writes
 *       the checkpoint alone, --checkpoint_writers rank0).
 *       TEST_MPI_PS_WRITERS: --checkpoint_writers (owners, the default, or rank0).
 *       TEST_MPI_PS_SAVE=0: no save after the last step (to measure the
 *       training's peak memory without the checkpoint's).
 *       TEST_MPI_PS_DEDICATED=1: --ps_dedicated (ranks 0 .. PS_RANKS - 1 only serve).
 *   test_mpi_ps_helper memory MODE TOWERS
 *       opens the trainer (mnist, synthetic) in MODE and checks on rank 0
 *       that the memory bound counts the mode's own buffers
 *       (TrainerMemory.mode_n_bytes): replicated_mpi across R > 1 ranks at
 *       least its send and gather floats, (T + R x T) x M x 4 bytes; ps_mpi
 *       across ranks at least the packed block, M x 4 (and rank 0's save
 *       gather with --checkpoint_writers rank0, TEST_MPI_PS_WRITERS, another
 *       M x 4; at most (3 + R) x M x 4); a one-process mode none
 *       (under 1 MiB).  Exit 0 when so, 1 otherwise.
 *   test_mpi_ps_helper memory-dedicated OPTIMIZER N_SERVERS
 *       --ps_dedicated --ps_ranks N_SERVERS (mnist, synthetic, 1 tower a
 *       worker): a server-only rank has no towers, input or tower
 *       gradients, and slots and moving averages for its shard only; a
 *       worker owning no shard keeps none; 2 steps; each rank prints its
 *       peak resident set.  Exit 0 when so on every rank, 1 otherwise.
 *   test_mpi_ps_helper compare A B TOL
 *       the variables, slots and moving averages of checkpoints A and B:
 *       prints the largest normwise relative difference ||a - b|| / ||a||
 *       over the arrays; exit 0 when it is at most TOL, 1 otherwise.
 *   test_mpi_ps_helper moving CKPT
 *       batch norm's moving statistics in checkpoint CKPT: prints how many
 *       floats, how many moved from their initial values (moving mean 0,
 *       moving variance 1) and the largest magnitude; exit 0 when every one
 *       is finite, some moved and every moving variance is positive, 1
 *       otherwise.
 *
 * Exit 77 when launched by mpirun with several ranks in a build without MPI.
 * Where it sits: tests/, label mpi.  What it does not do: read data files.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/ranks.h"
#include "ps/placement.h"
#include "modes_common.h"

static double rel_diff(const float *a, const float *b, size_t n) {
    double d2 = 0.0, a2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        d2 += d * d;
        a2 += (double)a[i] * a[i];
    }
    return isnan(d2) ? INFINITY : sqrt(d2) / (sqrt(a2) + 1e-30);
}

static int compare(const char *pa, const char *pb, double tol) {
    CkptContents a, b;
    char err[1024];
    if (ckpt_read(pa, &a, err, sizeof err) != 0 || ckpt_read(pb, &b, err, sizeof err) != 0) {
        fprintf(stderr, "compare: %s\n", err);
        return 1;
    }
    if (a.n_params != b.n_params || a.n_slots != b.n_slots || !a.ema != !b.ema || a.global_step != b.global_step) {
        fprintf(stderr, "compare: %s and %s differ in shape, slots or step\n", pa, pb);
        return 1;
    }
    double worst = rel_diff(a.params, b.params, a.n_params);
    const char *where = "variables";
    if (a.ema && rel_diff(a.ema, b.ema, a.n_params) > worst) {
        worst = rel_diff(a.ema, b.ema, a.n_params);
        where = "moving averages";
    }
    for (int k = 0; k < a.n_slots; k++)
        if (rel_diff(a.slots[k], b.slots[k], a.n_params) > worst) {
            worst = rel_diff(a.slots[k], b.slots[k], a.n_params);
            where = a.slot_names[k];
        }
    printf("largest relative difference %.3g (%s)\n", worst, where);
    ckpt_contents_free(&a);
    ckpt_contents_free(&b);
    return worst <= tol ? 0 : 1;
}

static int moving(const char *path) {
    CkptContents c;
    ModelSpec spec;
    char err[1024];
    if (ckpt_read(path, &c, err, sizeof err) != 0 ||
        model_spec_init_opts(&spec, c.model, c.H, c.W, c.C, c.num_classes, &c.opts, err, sizeof err) != 0) {
        fprintf(stderr, "moving: %s\n", err);
        return 1;
    }
    size_t n = 0, moved = 0, bad = 0;
    double largest = 0.0;
    for (int v = 0; v < spec.n_vars; v++) {
        const ModelVar *mv = &spec.vars[v];
        if (mv->trainable) continue;
        for (size_t i = 0; i < mv->n_floats; i++) {
            const float x = c.params[mv->offset + i];
            n++;
            moved += x != mv->init_value;
            bad += !isfinite(x) || (mv->init_value == 1.0f && !(x > 0.0f)); /* a moving variance stays positive */
            if (fabs((double)x) > largest) largest = fabs((double)x);
        }
    }
    printf("moving statistics: %zu floats, %zu moved from their initial values, %zu non-finite or non-positive "
           "variances, largest magnitude %.4g\n", n, moved, bad, largest);
    ckpt_contents_free(&c);
    return n > 0 && moved > 0 && bad == 0 ? 0 : 1;
}

static int memory(const char *mode_name, int n_towers) {
    char err[1024];
    TrainerOptions o;
    modes_base_options(&o, "mnist", "cpu", n_towers, 4);
    o.train_dir = "/nonexistent-never-written";
    o.no_checkpoints = 1; /* nothing is saved: trainer_open leaves the train_dir alone */
    if (getenv("TEST_MPI_PS_WRITERS")) o.checkpoint_writers = getenv("TEST_MPI_PS_WRITERS");
    TrainerMode mode;
    if (trainer_mode_from_name(mode_name, &mode, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    trainer_mode_set_flags(mode, &o);
    Trainer tr;
    if (trainer_open(&tr, &o, err, sizeof err) != 0) {
        fprintf(stderr, "rank %d: trainer_open: %s\n", ranks_rank(), err);
        ranks_abort(1);
        return 1;
    }
    TrainerMemory m;
    trainer_max_n_bytes(&tr, &m);
    const size_t M = tr.spec.n_params, R = (size_t)tr.n_ranks, T = (size_t)tr.n_towers;
    size_t want = 0, most = (size_t)1 << 20; /* at least, at most (1 MiB for the tables and step codes) */
    if (!strcmp(trainer_mode_name(tr.mode), "replicated_mpi") && R > 1) {
        want = (T + R * T) * M * sizeof(float);
        most += want;
    }
    if (!strcmp(trainer_mode_name(tr.mode), "ps_mpi")) { /* + the R workers' slices of its shard and their mean */
        want = (tr.rank == 0 && R > 1 && !strcmp(o.checkpoint_writers, "rank0") ? 2 : 1) * M * sizeof(float);
        most += (3 + R) * M * sizeof(float);
    }
    const int ok = m.mode_n_bytes >= want && m.mode_n_bytes <= most;
    if (tr.rank == 0)
        printf("%s, %zu rank(s) x %zu tower(s): the memory bound counts %zu bytes of the mode's buffers (expected at "
               "least %zu): %s\n", trainer_mode_name(tr.mode), R, T, m.mode_n_bytes, want, ok ? "ok" : "FAIL");
    trainer_close(&tr, NULL, 0);
    const int failed = ranks_any(!ok);
    ranks_finalize();
    return failed ? 1 : 0;
}

/* --ps_dedicated, mnist on synthetic data, 1 tower a worker: each rank's own
 * memory.  A server-only rank has no towers, no input, no tower gradient
 * buffers, and slots and moving averages for its shard only; a worker that
 * owns no shard keeps none (kept_n_floats 0), and its server's part of the
 * bound is below the full-size layout's.  Then 2 steps, and each rank's
 * peak resident set (VmHWM). */
static int memory_dedicated(const char *optimizer, int n_servers) {
    char err[1024];
    TrainerOptions o;
    modes_base_options(&o, "mnist", "cpu", 1, 4);
    o.optimizer = optimizer;
    o.train_dir = "/nonexistent-never-written";
    o.no_checkpoints = 1; /* nothing is saved: trainer_open leaves the train_dir alone */
    trainer_mode_set_flags(TRAINER_PS_MPI, &o);
    o.ps_ranks = n_servers;
    o.ps_dedicated = 1;
    Trainer tr;
    if (trainer_open(&tr, &o, err, sizeof err) != 0) {
        fprintf(stderr, "rank %d: trainer_open: %s\n", ranks_rank(), err);
        ranks_abort(1);
        return 1;
    }
    TrainerMemory m;
    trainer_max_n_bytes(&tr, &m);
    const ParamServer *ps = tr.ps;
    const size_t M = tr.spec.n_params, state = (size_t)ps->n_slots + (ps->ema ? 1 : 0);
    /* This rank's shard by the rule (ps/placement.h, greedy over the n_servers ranks). */
    size_t owned = 0, var_n_bytes[MODEL_MAX_VARS], task_n_bytes[64];
    int owner[MODEL_MAX_VARS];
    for (int i = 0; i < tr.spec.n_vars; i++) var_n_bytes[i] = tr.spec.vars[i].n_floats * sizeof(float);
    ps_place_variables(var_n_bytes, tr.spec.n_vars, n_servers, PS_PLACE_GREEDY, owner, task_n_bytes);
    for (int i = 0; i < tr.spec.n_vars; i++) owned += owner[i] == tr.rank ? tr.spec.vars[i].n_floats : 0;
    const int server = tr.rank < n_servers;
    /* Full size: params, grads, T tower gradients and every slot and moving average, M floats each. */
    const size_t full = (2 + (size_t)tr.n_towers + state) * M * sizeof(float);
    int ok = tr.n_workers == tr.n_ranks - n_servers && tr.worker == (server ? -1 : tr.rank - n_servers) &&
             ps->kept_n_floats == owned && (server ? owned > 0 : owned == 0) && m.variables_n_bytes < full;
    if (server) ok &= tr.n_towers == 0 && ps->n_towers == 0 && !tr.towers && m.towers_n_bytes == 0 && m.input_n_bytes == 0;
    else ok &= tr.n_towers == 1 && ps->n_towers == 1 && m.towers_n_bytes > 0;
    for (int s = 0; ok && s < 2; s++) {
        float loss;
        if (trainer_step(&tr, &loss, err, sizeof err) != 1) {
            fprintf(stderr, "rank %d: step: %s\n", tr.rank, err);
            ok = 0;
        }
    }
    long hwm_kib = 0;
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &hwm_kib) == 1) break;
    if (f) fclose(f);
    fprintf(stderr, "%s: rank %d (%s): %zu of %zu floats' slots and moving averages kept, the server's bound %.1f MiB "
            "(full size %.1f MiB), towers %.1f MiB, input %.1f MiB; peak resident %.1f MiB: %s\n", optimizer, tr.rank,
            server ? "server only" : "worker", ps->kept_n_floats, M, m.variables_n_bytes / 1048576.0, full / 1048576.0,
            m.towers_n_bytes / 1048576.0, m.input_n_bytes / 1048576.0, hwm_kib / 1024.0, ok ? "ok" : "FAIL");
    trainer_close(&tr, NULL, 0);
    const int failed = ranks_any(!ok);
    ranks_finalize();
    return failed ? 1 : 0;
}

int main(int argc, char **argv) {
    char err[1024];
    if (argc == 5 && !strcmp(argv[1], "compare")) return compare(argv[2], argv[3], atof(argv[4]));
    if (argc == 3 && !strcmp(argv[1], "moving")) return moving(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "memory")) {
        if (ranks_init(&argc, &argv, err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            return strstr(err, "built without MPI") ? 77 : 1;
        }
        return memory(argv[2], atoi(argv[3]));
    }
    if (argc == 4 && !strcmp(argv[1], "memory-dedicated")) {
        if (ranks_init(&argc, &argv, err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            return strstr(err, "built without MPI") ? 77 : 1;
        }
        return memory_dedicated(argv[2], atoi(argv[3]));
    }
    if (argc < 8 || strcmp(argv[1], "train")) {
        fprintf(stderr, "usage: %s train MODEL OPTIMIZER TOWERS STEPS TRAIN_DIR MODE [PS_RANKS PLACEMENT RESUME] | "
                "compare A B TOL | moving CKPT\n", argv[0]);
        return 2;
    }
    if (ranks_init(&argc, &argv, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return strstr(err, "built without MPI") ? 77 : 1;
    }
    TrainerOptions o;
    modes_base_options(&o, argv[2], "cpu", atoi(argv[4]), 4);
    o.optimizer = argv[3];
    o.learning_rate = !strcmp(argv[3], "adam") ? 0.01f : 0.1f;
    o.train_dir = argv[6];
    if (getenv("TEST_MPI_PS_OTHER_DIR") && ranks_rank() != 0) o.train_dir = getenv("TEST_MPI_PS_OTHER_DIR");
    /* Owners write their shards into their own train_dir: a rank that does not share rank 0's needs rank0 writers. */
    if (getenv("TEST_MPI_PS_OTHER_DIR")) o.checkpoint_writers = "rank0";
    if (getenv("TEST_MPI_PS_WRITERS")) o.checkpoint_writers = getenv("TEST_MPI_PS_WRITERS");
    /* TEST_MPI_PS_DEDICATED=1: --ps_dedicated (the PS_RANKS first ranks only serve). */
    o.ps_dedicated = getenv("TEST_MPI_PS_DEDICATED") && !strcmp(getenv("TEST_MPI_PS_DEDICATED"), "1");
    TrainerMode mode;
    if (trainer_mode_from_name(argv[7], &mode, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    trainer_mode_set_flags(mode, &o);
    if (argc > 8) o.ps_ranks = atoi(argv[8]);
    if (argc > 9) {
        o.ps_placement = argv[9];
        o.log_device_placement = ranks_rank() == 0;
    }
    if (argc > 10) o.resume = atoi(argv[10]);
    if (ranks_rank() != 0 && !freopen("/dev/null", "w", stdout)) return 1;
    Trainer tr;
    int rc = 0;
    if (trainer_open(&tr, &o, err, sizeof err) != 0) {
        fprintf(stderr, "rank %d: trainer_open: %s\n", ranks_rank(), err);
        rc = 1;
    }
    const long steps = atol(argv[5]);
    while (rc == 0 && tr.ps->global_step < steps) {
        float loss;
        if (trainer_step(&tr, &loss, err, sizeof err) != 1) {
            fprintf(stderr, "rank %d: step %ld: %s\n", ranks_rank(), tr.ps->global_step + 1, err);
            rc = 1;
        }
    }
    const int save = !getenv("TEST_MPI_PS_SAVE") || strcmp(getenv("TEST_MPI_PS_SAVE"), "0") != 0;
    if (rc == 0 && save && trainer_save(&tr, err, sizeof err) != 0) {
        fprintf(stderr, "rank %d: trainer_save: %s\n", ranks_rank(), err);
        rc = 1;
    }
    if (rc == 0) {
        printf("%s: mode %s, %d rank(s) x %d tower(s), %ld steps, %s\n", argv[2], trainer_mode_name(tr.mode),
               tr.n_ranks, tr.n_towers, tr.ps->global_step, save ? "saved" : "not saved");
        trainer_close(&tr, NULL, 0);
    }
    if (rc != 0) ranks_abort(rc);
    ranks_finalize();
    return rc;
}
