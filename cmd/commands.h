/* commands.h — the `tower` subcommands.  Each takes argv with argv[0] the
 * subcommand's name and returns the process exit code. */
#ifndef TOWER_CMD_COMMANDS_H
#define TOWER_CMD_COMMANDS_H

#include "cmd/flags.h"

int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#endif
