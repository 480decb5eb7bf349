/* test_modes_gpu_plan.c — what of the GPU modes (ps_gpu, replicated_nccl)
 * can be checked without a GPU, in every build:
 *   - the co-located-tower plan of the NCCL all-reduce (ps/device_groups.h):
 *     fixed layouts with known answers, every invariant on 2000 random
 *     layouts, and the bad inputs (one line, output untouched);
 *   - the flags: tf_cnn_benchmarks' pairs and the short names map to the
 *     GPU modes and back (trainer_mode_set_flags round trip);
 *   - availability per build: ps_gpu exactly with CUDA, replicated_nccl
 *     exactly with NCCL, else one line saying what the build lacks;
 *   - on CPU towers (--device cpu) both GPU modes fail to open with one
 *     line naming the flags and "needs GPU towers", and --all_reduce auto
 *     stays host (nccl only for GPU towers).
 * The GPU runs themselves: tests/test_gpu_modes.c (label gpu).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/mode.h"
#include "train/trainer.h"
#include "ps/device_groups.h"
#include "tests/check.h"

static int one_line(const char *s) { return s[0] != '\0' && !strchr(s, '\n'); }

/* The plan of `devices` must be `want_groups` groups with these devices, leaders and member lists. */
static void check_plan(const char *what, int n, const int *devices, int want_groups, const int *want_device,
                       const int (*want_members)[DEVICE_GROUPS_MAX], const int *want_n_members) {
    const int failures_before = check_failures;
    DeviceGroups g;
    char err[256] = "";
    int rc = device_groups_plan(&g, n, devices, err, sizeof err);
    CHECK(rc == 0, "%s: device_groups_plan failed: %s", what, err);
    if (rc != 0) return;
    CHECK(g.n_towers == n && g.n_groups == want_groups, "%s: %d towers, %d groups (want %d, %d)", what, g.n_towers,
          g.n_groups, n, want_groups);
    for (int k = 0; k < want_groups && k < g.n_groups; k++) {
        CHECK(g.device[k] == want_device[k], "%s: group %d on device %d, want %d", what, k, g.device[k], want_device[k]);
        CHECK(g.n_members[k] == want_n_members[k], "%s: group %d has %d towers, want %d", what, k, g.n_members[k],
              want_n_members[k]);
        CHECK(g.leader[k] == want_members[k][0], "%s: group %d led by tower %d, want %d", what, k, g.leader[k],
              want_members[k][0]);
        for (int m = 0; m < want_n_members[k] && m < g.n_members[k]; m++)
            CHECK(g.members[k][m] == want_members[k][m], "%s: group %d member %d is tower %d, want %d", what, k, m,
                  g.members[k][m], want_members[k][m]);
    }
    for (int t = 0; t < n; t++)
        CHECK(g.device[g.group_of[t]] == devices[t], "%s: tower %d (device %d) in group %d of device %d", what, t,
              devices[t], g.group_of[t], g.device[g.group_of[t]]);
    printf("%-40s %d group(s), leaders and members as expected  %s\n", what, g.n_groups,
           check_failures == failures_before ? "ok" : "FAIL");
}

static void check_fixed_plans(void) {
    {
        const int d[] = {0, 0, 0, 0}, dev[] = {0}, nm[] = {4};
        const int mem[1][DEVICE_GROUPS_MAX] = {{0, 1, 2, 3}};
        check_plan("4 towers on GPU 0", 4, d, 1, dev, mem, nm);
    }
    {
        const int d[] = {0, 1, 0, 1}, dev[] = {0, 1}, nm[] = {2, 2};
        const int mem[2][DEVICE_GROUPS_MAX] = {{0, 2}, {1, 3}};
        check_plan("4 towers over GPUs 0,1 (round robin)", 4, d, 2, dev, mem, nm);
    }
    {
        const int d[] = {2, 0, 2, 1, 0}, dev[] = {2, 0, 1}, nm[] = {2, 2, 1};
        const int mem[3][DEVICE_GROUPS_MAX] = {{0, 2}, {1, 4}, {3}};
        check_plan("5 towers on GPUs 2,0,2,1,0", 5, d, 3, dev, mem, nm);
    }
    {
        const int d[] = {7}, dev[] = {7}, nm[] = {1};
        const int mem[1][DEVICE_GROUPS_MAX] = {{0}};
        check_plan("1 tower on GPU 7", 1, d, 1, dev, mem, nm);
    }
}

/* Invariants on random layouts: every tower in exactly one group, members
 * ascending and on the group's device, the leader the lowest, groups in
 * order of first appearance, one group per distinct device. */
static void check_random_plans(void) {
    uint64_t state = 0x2545f4914f6cdd1dull;
    int bad_layouts = 0;
    for (int iter = 0; iter < 2000; iter++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const int n = 1 + (int)((state >> 33) % DEVICE_GROUPS_MAX);
        const int n_devices = 1 + (int)((state >> 17) % 8);
        int devices[DEVICE_GROUPS_MAX];
        for (int t = 0; t < n; t++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            devices[t] = (int)((state >> 40) % (uint64_t)n_devices);
        }
        DeviceGroups g;
        char err[256];
        if (device_groups_plan(&g, n, devices, err, sizeof err) != 0) {
            CHECK(0, "random layout %d: %s", iter, err);
            continue;
        }
        int seen[DEVICE_GROUPS_MAX] = {0}, distinct = 0, ok = 1;
        for (int t = 0; t < n; t++) {
            int first = 1;
            for (int u = 0; u < t; u++) first &= devices[u] != devices[t];
            distinct += first;
            if (first) ok &= g.leader[g.group_of[t]] == t; /* a device's first tower leads it */
        }
        ok &= g.n_groups == distinct;
        for (int k = 0; k < g.n_groups; k++) {
            ok &= g.n_members[k] >= 1 && g.members[k][0] == g.leader[k];
            for (int k2 = 0; k2 < k; k2++) ok &= g.device[k2] != g.device[k];
            for (int k2 = 0; k2 < k; k2++) ok &= g.leader[k2] < g.leader[k]; /* order of first appearance */
            for (int m = 0; m < g.n_members[k]; m++) {
                const int t = g.members[k][m];
                ok &= t >= 0 && t < n && devices[t] == g.device[k] && g.group_of[t] == k;
                if (m > 0) ok &= t > g.members[k][m - 1];
                if (t >= 0 && t < n) seen[t]++;
            }
        }
        for (int t = 0; t < n; t++) ok &= seen[t] == 1;
        bad_layouts += !ok;
    }
    CHECK(bad_layouts == 0, "%d of 2000 random layouts broke an invariant of the plan", bad_layouts);
    printf("2000 random layouts (1-%d towers on 1-8 GPUs): %d broke an invariant\n", DEVICE_GROUPS_MAX, bad_layouts);
}

static void check_bad_plans(void) {
    DeviceGroups g, before;
    memset(&g, 0x5a, sizeof g);
    before = g;
    const int devices[DEVICE_GROUPS_MAX + 1] = {0, 1, -1};
    const struct { int n; const char *say; } cases[] = {{0, "0 towers"}, {DEVICE_GROUPS_MAX + 1, "65 towers"},
                                                        {3, "tower 2 is on device -1"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256] = "";
        int rc = device_groups_plan(&g, cases[i].n, devices, err, sizeof err);
        CHECK(rc == -1 && one_line(err) && strstr(err, cases[i].say), "device_groups_plan(%d towers): rc %d, '%s'",
              cases[i].n, rc, err);
        CHECK(memcmp(&g, &before, sizeof g) == 0, "device_groups_plan(%d towers) wrote its output on failure",
              cases[i].n);
        printf("device_groups_plan, %s: %s\n", cases[i].say, err);
    }
}

static void check_flags(void) {
    struct { const char *vu, *lpd, *ar; TrainerMode want; } flags[] = {
        {"parameter_server", "cpu", "auto", TRAINER_PS_CPU}, {"parameter_server", "gpu", "auto", TRAINER_PS_GPU},
        {"parameter_server", "gpu", "nccl", TRAINER_PS_GPU}, {"replicated", "cpu", "host", TRAINER_REPLICATED_HOST},
        {"replicated", "cpu", "auto", TRAINER_REPLICATED_HOST}, {"replicated", "gpu", "nccl", TRAINER_REPLICATED_NCCL},
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        TrainerMode m = TRAINER_N_MODES;
        char err[256] = "";
        int rc = trainer_mode_from_flags(flags[i].vu, flags[i].lpd, flags[i].ar, &m, err, sizeof err);
        CHECK(rc == 0 && m == flags[i].want, "%s/%s/%s -> rc %d, mode %s (%s)", flags[i].vu, flags[i].lpd, flags[i].ar,
              rc, trainer_mode_name(m), err);
    }
    const char *names[] = {"ps_gpu", "parameter_server/gpu", "replicated_nccl", "replicated/nccl", "replicated_nccl_mpi",
                           "replicated/nccl_mpi"};
    const TrainerMode want[] = {TRAINER_PS_GPU, TRAINER_PS_GPU, TRAINER_REPLICATED_NCCL, TRAINER_REPLICATED_NCCL,
                                TRAINER_REPLICATED_NCCL_MPI, TRAINER_REPLICATED_NCCL_MPI};
    for (int i = 0; i < 6; i++) {
        TrainerMode m = TRAINER_N_MODES;
        char err[256] = "";
        CHECK(trainer_mode_from_name(names[i], &m, err, sizeof err) == 0 && m == want[i], "mode name %s -> %s (%s)",
              names[i], trainer_mode_name(m), err);
    }
    for (int m = 0; m < TRAINER_N_MODES; m++) {
        TrainerOptions o;
        trainer_options_defaults(&o);
        trainer_mode_set_flags((TrainerMode)m, &o);
        TrainerMode back = TRAINER_N_MODES;
        char err[256] = "";
        /* ps_mpi_async shares ps_mpi's flags and is ps_mpi's settle under --sync_replicas false. */
        const TrainerMode expect = m == TRAINER_PS_MPI_ASYNC ? TRAINER_PS_MPI : (TrainerMode)m;
        CHECK(o.sync_replicas == (m != TRAINER_PS_MPI_ASYNC), "%s: sync_replicas %d", trainer_mode_name((TrainerMode)m),
              o.sync_replicas);
        CHECK(trainer_mode_from_flags(o.variable_update, o.local_parameter_device, o.all_reduce, &back, err,
                                      sizeof err) == 0 && back == expect,
              "%s -> %s/%s/%s -> %s", trainer_mode_name((TrainerMode)m), o.variable_update, o.local_parameter_device,
              o.all_reduce, trainer_mode_name(back));
    }
    /* --all_reduce nccl under mpirun with several ranks settles on one communicator over every rank's GPUs. */
    static Trainer tr;
    const TrainModeI *nccl = train_mode(TRAINER_REPLICATED_NCCL);
    tr.n_ranks = 1;
    CHECK(nccl->settle && nccl->settle(&tr) == NULL, "replicated_nccl in one process settles on itself");
    tr.n_ranks = 2;
    CHECK(nccl->settle && nccl->settle(&tr) == train_mode(TRAINER_REPLICATED_NCCL_MPI) &&
              train_mode(TRAINER_REPLICATED_NCCL_MPI)->across_ranks && train_mode(TRAINER_REPLICATED_NCCL_MPI)->needs_gpu_towers,
          "replicated_nccl under 2 ranks settles on replicated_nccl_mpi, which runs across ranks on GPU towers");
    char err[256] = "";
    TrainerMode m;
    CHECK(trainer_mode_from_flags("parameter_server", "tpu", "auto", &m, err, sizeof err) == -1 && one_line(err) &&
              strstr(err, "--local_parameter_device 'tpu'"),
          "--local_parameter_device tpu: '%s'", err);
    printf("flags: tf_cnn_benchmarks pairs, short names and the round trip for the GPU modes checked\n");
}

static void check_availability(void) {
    const TrainerMode gpu_modes[] = {TRAINER_PS_GPU, TRAINER_REPLICATED_NCCL};
#ifdef TOWER_HAVE_CUDA
    const int want[] = {1,
#ifdef TOWER_HAVE_NCCL
                        1
#else
                        0
#endif
    };
#else
    const int want[] = {0, 0};
#endif
    for (int i = 0; i < 2; i++) {
        char err[512] = "";
        int av = trainer_mode_available(gpu_modes[i], err, sizeof err);
        CHECK(av == want[i], "%s available: %d, this build should say %d", trainer_mode_name(gpu_modes[i]), av, want[i]);
        if (!av) CHECK(one_line(err) && strstr(err, "needs"), "%s unavailable, but says '%s'",
                       trainer_mode_name(gpu_modes[i]), err);
        printf("%s in this build: %s%s\n", trainer_mode_name(gpu_modes[i]), av ? "available" : "not available: ", err);
    }
}

/* On CPU towers: the GPU modes refuse with one line; auto stays host. */
static void check_cpu_towers(void) {
    const struct { const char *vu, *lpd, *ar, *flag; } gpu[] = {
        {"parameter_server", "gpu", "auto", "--local_parameter_device gpu"},
        {"replicated", "cpu", "nccl", "--all_reduce nccl"},
    };
    for (int i = 0; i < 2; i++) {
        TrainerOptions o;
        trainer_options_defaults(&o);
        o.device = "cpu";
        o.synthetic = 1;
        o.num_towers = 2;
        o.batch_size = 2;
        o.variable_update = gpu[i].vu;
        o.local_parameter_device = gpu[i].lpd;
        o.all_reduce = gpu[i].ar;
        Trainer tr;
        char err[1024] = "";
        int rc = trainer_open(&tr, &o, err, sizeof err);
        CHECK(rc == -1, "%s on CPU towers opened", gpu[i].flag);
        CHECK(one_line(err) && strstr(err, gpu[i].flag) && (strstr(err, "needs GPU towers") || strstr(err, "needs NCCL")),
              "%s on CPU towers: '%s'", gpu[i].flag, err);
        printf("%s, --device cpu: %s\n", gpu[i].flag, err);
        if (rc == 0) trainer_close(&tr, NULL, 0);
    }
    TrainerOptions o;
    trainer_options_defaults(&o);
    o.device = "cpu";
    o.synthetic = 1;
    o.num_towers = 2;
    o.batch_size = 2;
    o.variable_update = "replicated";
    o.all_reduce = "auto";
    Trainer tr;
    char err[1024] = "";
    int rc = trainer_open(&tr, &o, err, sizeof err);
    CHECK(rc == 0, "replicated/auto on CPU towers: %s", err);
    if (rc == 0) {
        CHECK(tr.mode == TRAINER_REPLICATED_HOST, "replicated/auto on CPU towers runs %s", trainer_mode_name(tr.mode));
        printf("--variable_update replicated --all_reduce auto, --device cpu: mode %s\n", trainer_mode_name(tr.mode));
        trainer_close(&tr, NULL, 0);
    }
}

/* A train_dir holding an earlier run's checkpoint: refused from step 0 (no --resume), unless the caller saves none
 * (TrainerOptions.no_checkpoints, tower bench: it failed whenever /tmp/tower_train held a run's checkpoints). */
static void check_no_checkpoints(void) {
    char dir[] = "/tmp/test_modes_plan_XXXXXX", file[64];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(file, sizeof file, "%s/model.ckpt-5", dir);
    FILE *f = fopen(file, "wb");
    CHECK(f != NULL, "create %s", file);
    if (f) fclose(f);
    for (int no_ckpt = 0; no_ckpt <= 1; no_ckpt++) {
        TrainerOptions o;
        trainer_options_defaults(&o);
        o.device = "cpu";
        o.synthetic = 1;
        o.batch_size = 2;
        o.train_dir = dir;
        o.no_checkpoints = no_ckpt;
        Trainer tr;
        char err[1024] = "";
        int rc = trainer_open(&tr, &o, err, sizeof err);
        if (no_ckpt) CHECK(rc == 0, "no_checkpoints: refused: %s", err);
        else CHECK(rc != 0 && strstr(err, "holds the checkpoints of an earlier run"), "an earlier run's checkpoint: rc %d, '%s'", rc, err);
        if (rc == 0) trainer_close(&tr, NULL, 0);
    }
    remove(file);
    rmdir(dir);
    printf("a train_dir with an earlier run's checkpoint: refused from step 0, opened with no_checkpoints\n");
}

int main(void) {
    check_no_checkpoints();
    check_fixed_plans();
    check_random_plans();
    check_bad_plans();
    check_flags();
    check_availability();
    check_cpu_towers();
    printf("%s\n", check_failures ? "GPU mode plan FAILED" : "GPU mode plan, flags and errors check out");
    return check_failures ? 1 : 0;
}
