/* main.c — the `tower` binary: picks the subcommand and hands it argv.
 * It only wires; each subcommand lives in its own cmd_<name>.c.  Besides the
 * subcommands it answers `tower --help` (also -h, help), `tower help
 * COMMAND` (= tower COMMAND --help) and `tower --version` (the version and
 * what this binary was built with).  Before anything else it settles
 * OpenMP's wait policy (default_omp_wait_policy); after the command, it
 * checks that its output reached standard output (stdout_status). */
#include <sched.h> /* sched_getaffinity: _GNU_SOURCE comes from the build (CMakeLists.txt) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <oneapi/dnnl/dnnl.h>

#include "cmd/commands.h"

#ifndef TOWER_VERSION
#define TOWER_VERSION "unknown"
#endif

typedef struct {
    const char *name;
    const char *program; /* its argv[0]: how the flag parser's messages and --help name it */
    int (*run)(int argc, char **argv);
    const char *what;
    const char *kept; /* what its run leaves written when only its report on stdout is lost (NULL: nothing) */
} Command;

static const Command commands[] = {
    {"train", "tower train", cmd_train, "train a model with the tower pattern: N towers, variables on a parameter server or replicated (all-reduce), TFRecords or an image folder", NULL},
    {"eval", "tower eval", cmd_eval, "evaluate a checkpoint on TFRecords or an image folder: precision @ 1 (and @ k)", NULL},
    {"convert", "tower convert", cmd_convert, "convert IDX (MNIST, Fashion-MNIST), CIFAR-10 binary files or an image folder to TFRecord", "the shards are written"},
    {"inspect", "tower inspect", cmd_inspect, "count and verify the records of TFRecord files, list their features", NULL},
    {"export", "tower export", cmd_export, "write a checkpoint's variables to a .safetensors file (PyTorch, JAX, NumPy)", "the .safetensors file is written"},
    {"bench", "tower bench", cmd_bench, "compare variable placement modes (parameter server, all-reduce) x towers x models: table, CSV, SVG", "its CSV and chart are written"},
};
static const int n_commands = (int)(sizeof commands / sizeof commands[0]);

static void usage(FILE *f) {
    fprintf(f, "usage: tower <command> [flags]   (tower <command> --help, or tower help <command>, for its flags)\n"
               "       tower --version          (the version and the build: CUDA, NCCL, MPI, BLAS, sanitizer)\n\ncommands:\n");
    for (int i = 0; i < n_commands; i++) fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].what);
}

/* `tower --version`: one line of version, one of build options. */
static void version(void) {
    const dnnl_version_t *dnnl = dnnl_version();
    printf("tower %s\n", TOWER_VERSION);
    printf("build: %s; CUDA: ", TOWER_BUILD_TYPE);
#ifdef TOWER_HAVE_CUDA
    printf("on (toolkit %s, architectures %s)", TOWER_CUDA_VERSION, TOWER_CUDA_ARCHITECTURES);
#else
    printf("off");
#endif
#ifdef TOWER_HAVE_NCCL
    printf("; NCCL: on");
#else
    printf("; NCCL: off");
#endif
#ifdef TOWER_HAVE_MPI
    printf("; MPI: on");
#else
    printf("; MPI: off");
#endif
    printf("; BLAS: oneDNN %d.%d.%d dnnl_sgemm", dnnl->major, dnnl->minor, dnnl->patch);
#ifdef _OPENMP
    printf("; OpenMP %d", _OPENMP);
#endif
    printf("; sanitizer: %s\n", TOWER_SANITIZER);
}

static const Command *find_command(const char *name) {
    for (int i = 0; i < n_commands; i++)
        if (!strcmp(name, commands[i].name)) return &commands[i];
    return NULL;
}

/* The value of --name in argv (--name value or --name=value, the last one
 * given, as flags_parse takes it), or NULL. */
static const char *peek_flag(int argc, char **argv, const char *name) {
    const char *value = NULL;
    const size_t n = strlen(name);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || strncmp(a + 2, name, n) != 0) continue;
        if (a[2 + n] == '=') value = a + 3 + n;
        else if (a[2 + n] == '\0' && i + 1 < argc) value = argv[++i];
    }
    return value;
}

/* 1 when the command's compute runs on OpenMP teams of 2 or more threads:
 * `eval` (the model on one team of every core), `train` with CPU towers of
 * 2 or more threads (C cores over N towers, N = --num_towers, 1 by default
 * on a CPU), `bench` whose smallest --towers count gives a tower 2 or more.
 * A guess made before the flags are parsed, since libgomp reads its policy
 * when it loads: --device gpu, or auto where the NVIDIA driver is loaded
 * (/dev/nvidiactl), means GPU towers; C is the CPUs this process may run on
 * over the host's MPI ranks (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE), at most
 * OMP_NUM_THREADS.  A wrong guess costs speed, never a result. */
static int wants_spin(int argc, char **argv) {
    const char *cmd = argv[1];
    const int eval = !strcmp(cmd, "eval"), train = !strcmp(cmd, "train"), bench = !strcmp(cmd, "bench");
    if (!eval && !train && !bench) return 0;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t mask; /* libgomp's default team: the CPUs this process may run on */
    if (sched_getaffinity(0, sizeof mask, &mask) == 0 && CPU_COUNT(&mask) > 0) cores = CPU_COUNT(&mask);
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE"), *omp = getenv("OMP_NUM_THREADS");
    if (local && atol(local) > 1) cores /= atol(local);
    if (omp && atol(omp) > 0 && atol(omp) < cores) cores = atol(omp);
    if (eval) return cores >= 2;
    const char *device = peek_flag(argc, argv, "device");
    if (!device) device = "auto";
    if (!strcmp(device, "gpu") || (!strcmp(device, "auto") && access("/dev/nvidiactl", F_OK) == 0)) return 0;
    long towers = 1;
    const char *n = peek_flag(argc, argv, train ? "num_towers" : "towers");
    if (train && n && atol(n) > 0) towers = atol(n);
    if (bench && n) { /* the smallest count of the list (default 1,2,4) */
        towers = 0;
        for (const char *p = n; p; p = strchr(p, ','), p = p ? p + 1 : NULL)
            if (atol(p) > 0 && (towers == 0 || atol(p) < towers)) towers = atol(p);
        if (towers == 0) towers = 1;
    }
    return (cores + towers - 1) / towers >= 2;
}

/* Settles OpenMP's wait policy unless the environment sets OMP_WAIT_POLICY or
 * GOMP_SPINCOUNT (then theirs wins): passive (an idle thread sleeps at
 * once), or, where the command runs teams of 2 or more threads (wants_spin),
 * a short spin: OMP_WAIT_POLICY=active with GOMP_SPINCOUNT=10000.  The step's
 * hundreds of parallel regions then start without a sleeping thread's wake-up
 * (mobilenet_v2's 1-tower step 1.66x, resnet20's 1.26x on a quiet 2-core
 * machine); under libgomp's own default (OMP_WAIT_POLICY unset) a spin count
 * falls to 100 whenever it manages more threads than cores, as a tower's team
 * beside the server's does.  Passive elsewhere: towers of one thread each (the
 * README's job, where spinning made the server's average and update slower and
 * the step 8-9%) and GPU towers; and where the cores are shared, a spinning
 * thread holds the core that the thread it waits for needs (mobilenet_v2's
 * 1-tower step 0.74x passive beside one busy process; under the runtime's
 * 300000 spins a 2-thread step fell from 358 to 16 img/s): OMP_WAIT_POLICY=
 * passive then (bench/RESULTS.md, "OpenMP's wait policy"; docs/performance.md).
 * LLVM's OpenMP runtime (a clang build may link it) ignores GOMP_SPINCOUNT and
 * under active would spin without end: KMP_BLOCKTIME=1 (ms) bounds it, unless
 * set.  libgomp reads its environment once, when it is loaded, before main, so
 * setting it here needs the process to start again: the same binary is exec'd
 * with the same arguments (same PID, descriptors, signal dispositions), and the
 * variables, now set, stop a second exec.  If the exec fails (no /proc) the run
 * goes on under the runtime's default. */
static void default_omp_wait_policy(int argc, char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    const int spin = argc >= 2 && wants_spin(argc, argv);
    const int set_blocktime = spin && !getenv("KMP_BLOCKTIME");
    if (setenv("OMP_WAIT_POLICY", spin ? "active" : "passive", 1) == 0 &&
        (!spin || setenv("GOMP_SPINCOUNT", "10000", 1) == 0) &&
        (!set_blocktime || setenv("KMP_BLOCKTIME", "1", 1) == 0))
        execv("/proc/self/exe", argv);
    /* Not set, or the exec failed: the run goes on under the runtime's default, as loaded. */
    unsetenv("OMP_WAIT_POLICY");
    unsetenv("GOMP_SPINCOUNT");
    if (set_blocktime) unsetenv("KMP_BLOCKTIME");
}

/* The process's name (comm: what pgrep, pkill, killall, ps -C and top match) after the exec of /proc/self/exe,
 * which names it "exe": the name it was started by, argv[0]'s last part, as the kernel gives it at any exec. */
static void keep_process_name(const char *argv0) {
    const char *slash = argv0 ? strrchr(argv0, '/') : NULL;
    const char *base = slash ? slash + 1 : argv0;
    if (base && base[0]) prctl(PR_SET_NAME, (unsigned long)base, 0, 0, 0); /* cut to 15 bytes, as the kernel's */
}

/* A command's status once its output is written: what it printed must have reached standard output (a full disk,
 * a closed pipe under SIGPIPE ignored): else one line and 1, where the command had succeeded; the line says what
 * the run left written all the same (kept: the command's, NULL for none), so a script that sees the 1 does not
 * take the files for missing. */
static int stdout_status(const char *program, int rc, const char *kept) {
    errno = 0;
    const int flush_failed = fflush(stdout) != 0;
    const int e = errno;
    if ((flush_failed || ferror(stdout)) && rc == 0) {
        cmd_errorf("%s: writing standard output: %s%s%s%s\n", program, e ? strerror(e) : "write error",
                   kept ? " (its report is lost; " : "", kept ? kept : "", kept ? ")" : "");
        return 1;
    }
    return rc;
}

int main(int argc, char **argv) {
    default_omp_wait_policy(argc, argv);
    keep_process_name(argv[0]);
    /* A write past the file-size limit (ulimit -f) fails with EFBIG, which every
     * writer reports in one line naming its file, instead of SIGXFSZ killing the
     * process halfway through a checkpoint without a word. */
    signal(SIGXFSZ, SIG_IGN);
    /* A closed pipe (`| head`) fails the write (EPIPE) instead of killing the command without a word: train stops
     * after its step with a checkpoint, the others say it in one line (stdout_status), exit 1. */
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *first = argv[1];
    if (!strcmp(first, "--version")) {
        version();
        return stdout_status("tower", 0, NULL);
    }
    if (!strcmp(first, "--help") || !strcmp(first, "-h") || (!strcmp(first, "help") && argc == 2)) {
        usage(stdout);
        return stdout_status("tower", 0, NULL);
    }
    if (!strcmp(first, "help")) {
        /* tower help COMMAND: that command's --help. */
        const Command *c = find_command(argv[2]);
        if (!c) {
            cmd_errorf("tower help: unknown command '%s' (tower --help lists the commands)\n", argv[2]);
            return 2;
        }
        if (argc > 3) {
            cmd_errorf("tower help: unexpected argument '%s' (tower help COMMAND)\n", argv[3]);
            return 2;
        }
        char *help_argv[] = {(char *)c->program, "--help", NULL};
        return stdout_status(c->program, c->run(2, help_argv), NULL);
    }
    const Command *c = find_command(first);
    if (c) {
        argv[1] = (char *)c->program;
        return stdout_status(c->program, c->run(argc - 1, argv + 1), c->kept);
    }
    cmd_errorf("tower: unknown command '%s' (tower --help lists the commands)\n", first);
    return 2;
}
