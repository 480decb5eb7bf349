/* main.c — the `tower` binary: picks the subcommand and hands it argv.
 * It only wires; each subcommand lives in its own cmd_<name>.c. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cmd/commands.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *what;
} Command;

static const Command commands[] = {
    {"train", cmd_train, "train a model with the tower pattern (parameter server on the CPU, N towers)"},
    {"eval", cmd_eval, "evaluate a checkpoint on a TFRecord set: precision @ 1"},
    {"convert", cmd_convert, "convert IDX (MNIST, Fashion-MNIST), CIFAR-10 binary files or an image folder to TFRecord"},
    {"inspect", cmd_inspect, "count and verify the records of TFRecord files, list their features"},
    {"export", cmd_export, "write a checkpoint's variables to a .safetensors file (PyTorch, JAX, NumPy)"},
    {"bench", cmd_bench, "compare variable placement modes (parameter server, all-reduce) x towers x models: table, CSV, SVG"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: tower <command> [flags]   (tower <command> --help for its flags)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].what);
}

int main(int argc, char **argv) {
    /* A write past the file-size limit (ulimit -f) fails with EFBIG, which every
     * writer reports in one line naming its file, instead of SIGXFSZ killing the
     * process halfway through a checkpoint without a word. */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "tower: unknown command '%s' (tower --help lists the commands)\n", argv[1]);
    return 2;
}
