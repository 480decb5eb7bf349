/* commands.h — the `tower` subcommands.  Each takes argv with argv[0] the
 * subcommand's name and returns the process exit code. */
#ifndef TOWER_CMD_COMMANDS_H
#define TOWER_CMD_COMMANDS_H

#include <stddef.h>

#include "base/flags.h"
#include "model/model.h"
#include "ps/checkpoint.h"

int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_bench(int argc, char **argv);

/* mkdir -p: 0, or -1 with errno set. */
int cmd_make_dirs(const char *path);

/* Open the checkpoint `checkpoint` (a file), or else the latest in
 * `checkpoint_dir`, read it into *ck (caller frees with ckpt_contents_free)
 * and build its model's spec.  path receives the file's name.  Returns 0, or
 * -1 after one line "tower <command>: ..." on stderr (nothing to free). */
int cmd_open_checkpoint(const char *command, const char *checkpoint, const char *checkpoint_dir,
                        CkptContents *ck, ModelSpec *spec, char *path, size_t path_n_bytes);

#endif
