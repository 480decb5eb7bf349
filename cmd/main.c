/* main.c — the `tower` binary: picks the subcommand and hands it argv.
 * It only wires; each subcommand lives in its own cmd_<name>.c.  Besides the
 * subcommands it answers `tower --help` (also -h, help), `tower help
 * COMMAND` (= tower COMMAND --help) and `tower --version` (the version and
 * what this binary was built with).  Before anything else it settles
 * OpenMP's wait policy (default_omp_wait_policy). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
} Command;

static const Command commands[] = {
    {"train", "tower train", cmd_train, "train a model with the tower pattern: N towers, variables on a parameter server or replicated (all-reduce), TFRecords or an image folder"},
    {"eval", "tower eval", cmd_eval, "evaluate a checkpoint on TFRecords or an image folder: precision @ 1 (and @ k)"},
    {"convert", "tower convert", cmd_convert, "convert IDX (MNIST, Fashion-MNIST), CIFAR-10 binary files or an image folder to TFRecord"},
    {"inspect", "tower inspect", cmd_inspect, "count and verify the records of TFRecord files, list their features"},
    {"export", "tower export", cmd_export, "write a checkpoint's variables to a .safetensors file (PyTorch, JAX, NumPy)"},
    {"bench", "tower bench", cmd_bench, "compare variable placement modes (parameter server, all-reduce) x towers x models: table, CSV, SVG"},
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

/* OMP_WAIT_POLICY=passive unless the environment sets OMP_WAIT_POLICY or
 * GOMP_SPINCOUNT (then theirs wins).  GNU OpenMP's default lets a thread
 * that waits at a barrier or for the next parallel region spin up to
 * 300000 times before it sleeps; when the cores are shared (another job, a
 * second tower process) the spinning thread holds the core the thread it
 * waits for needs, and every one of a network's hundreds of parallel regions
 * per step pays it: mobilenet_v2's 2-thread step fell from 358 to 16 img/s
 * (bench/RESULTS.md, "OpenMP's wait policy"; docs/performance.md).  libgomp
 * reads its environment once, when it is loaded, before main, so setting it
 * here needs the process to start again: the same binary is exec'd with the
 * same arguments (same PID, descriptors, signal dispositions), and the
 * variable, now set, stops a second exec.  If the exec fails (no /proc) the
 * run goes on under the runtime's default. */
static void default_omp_wait_policy(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY");
}

int main(int argc, char **argv) {
    default_omp_wait_policy(argv);
    /* A write past the file-size limit (ulimit -f) fails with EFBIG, which every
     * writer reports in one line naming its file, instead of SIGXFSZ killing the
     * process halfway through a checkpoint without a word. */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *first = argv[1];
    if (!strcmp(first, "--version")) {
        version();
        return 0;
    }
    if (!strcmp(first, "--help") || !strcmp(first, "-h") || (!strcmp(first, "help") && argc == 2)) {
        usage(stdout);
        return 0;
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
        return c->run(2, help_argv);
    }
    const Command *c = find_command(first);
    if (c) {
        argv[1] = (char *)c->program;
        return c->run(argc - 1, argv + 1);
    }
    cmd_errorf("tower: unknown command '%s' (tower --help lists the commands)\n", first);
    return 2;
}
