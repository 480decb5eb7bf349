/* commands.h — the `tower` subcommands.  Each takes argv with argv[0] the
 * subcommand's name and returns the process exit code. */
#ifndef TOWER_CMD_COMMANDS_H
#define TOWER_CMD_COMMANDS_H

#include <signal.h>
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


/* Read the checkpoint file path into *ck (caller frees with
 * ckpt_contents_free) and build its model's spec, as cmd_open_checkpoint
 * does, printing nothing: 0, or -1 with one line in err (nothing to free). */
int cmd_read_checkpoint(const char *path, CkptContents *ck, ModelSpec *spec, char *err, size_t err_n_bytes);

/* Open the checkpoint `checkpoint` (a file), or else the latest in
 * `checkpoint_dir`, read it into *ck (caller frees with ckpt_contents_free)
 * and build its model's spec (with the network options the file records).
 * The moving averages ck->ema then hold, for a non-trainable variable (batch
 * norm's moving statistics), its raw value: as TensorFlow's
 * ExponentialMovingAverage over the trainable variables restores shadows
 * for those alone.  path receives the file's name.  Returns 0, or
 * -1 after one line "tower <command>: ..." on stderr (nothing to free). */
int cmd_open_checkpoint(const char *command, const char *checkpoint, const char *checkpoint_dir,
                        CkptContents *ck, ModelSpec *spec, char *path, size_t path_n_bytes);

/* ---- parse-time checks of flag values ----
 * Called after flags_parse and before any work; a refusal is exit 2.  Each
 * returns 0 when the value is allowed, else prints one line on stderr,
 * "tower COMMAND: --FLAG VALUE: expected WHAT", and returns -1.  Bytes of
 * control characters in values and paths are printed escaped (\xHH). */

/* value is one of the NULL-terminated choices ("expected a, b or c"). */
/* The networks of THE table (model/nets/nets.c), NULL-terminated, for
 * cmd_check_choice; and "model to train: mnist, cifar10, or mobilenet_v2"-style
 * help (static storage, filled on first use). */
const char *const *cmd_model_names(void);
const char *cmd_model_help(const char *what);

/* The network flags --width_multiplier, --head (keras or seed) and
 * --fc_width into opts (the numbers' ranges are their flags', checked by
 * flags_parse).  0, or -1 after one line on stderr naming the flag. */
int cmd_model_options(const char *command, float width_multiplier, const char *head, int fc_width,
                      ModelOptions *opts);

int cmd_check_choice(const char *command, const char *flag, const char *value, const char *const *choices);

/* --central_fraction of an image folder's --resize_mode (convert, train,
 * eval): a fraction other than 1 applies to center_crop only. */
int cmd_check_central_fraction(const char *command, float central_fraction, const char *resize_mode);

/* --central_fraction's help after the command's own "which data" prefix;
 * size names what the shorter side is scaled against in that command. */
#define CMD_CENTRAL_FRACTION_HELP(size)                                                                          \
    "the central fraction of the shorter side a center_crop keeps: the shorter side is first scaled to floor(" \
    size " / F) (timm's crop_pct; 0.875 at 224: torchvision's Resize(256) + CenterCrop(224), the ImageNet "    \
    "evaluation crop)"

/* The largest --image_size (train, bench): a side of the images decoded and resized in the pipeline. */
#define CMD_MAX_IMAGE_SIZE 4096

/* --max_image_pixels' help (train, eval: an image folder or encoded TFRecord
 * images decoded in the pipeline; convert reads up to IMAGEFOLDER_MAX_PIXELS). */
#define CMD_MAX_IMAGE_PIXELS_HELP                                                                                \
    "an image folder or encoded TFRecord images: the largest image decoded, in pixels (as libjpeg decodes it, " \
    "at a reduced scale where larger than needed); a larger one is a bad example (--skip_corrupt), as is an "   \
    "encoded image over 3 bytes a pixel + 1 MiB.  Each input worker holds decode buffers of this size, "         \
    "counted in the memory bound"

/* A non-empty value: "expected a non-empty WHAT". */
int cmd_check_nonempty(const char *command, const char *flag, const char *value, const char *what);

/* The TFRecord globs of --data (comma-separated; flag is "data") or one
 * argument (flag NULL, as inspect's FILE...): an entry without a glob
 * character that names a directory is refused with a hint: the quoted
 * glob of the directory's .tfrecord files. */
int cmd_check_data_paths(const char *command, const char *flag, const char *globs);

/* --data of train and eval: one image folder (a directory with class
 * subfolders, io/imagefolder.h) is data; anything else goes to
 * cmd_check_data_paths (a plain directory gets its hint).  0, or -1 after
 * one line on stderr. */
int cmd_check_data(const char *command, const char *flag, const char *data);

/* For commands that take no arguments: refuse extra[0] in one line.  When it
 * names an existing file or a .tfrecord, the line says the shell expanded
 * an unquoted glob given to --data, and suggests the quoted pattern made
 * from data (the --data value) and the extra arguments.  n_extra 0: 0. */
int cmd_check_no_arguments(const char *command, const char *data, char **extra, int n_extra);

/* fprintf(stderr, fmt, ...) with the whole message escaped (base/escape.h)
 * before it is written, a final newline kept: every message of cmd/ goes
 * through it, since flag values, paths and the messages of io/, ps/ and
 * train/ may hold any byte, and none of those reaches a terminal raw.  One
 * write of at most 16 KiB (longer is cut). */
void cmd_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* convert's and export's stop: from cmd_catch_stop_signals on, SIGINT, SIGTERM or SIGHUP (a closed terminal)
 * sets cmd_stop_signal to its number (0 until one comes); the work under way reads it and ends with its
 * temporary files removed; the command exits 128 + it.  cmd_signal_name: "SIGINT", "SIGTERM" or "SIGHUP". */
extern volatile sig_atomic_t cmd_stop_signal;
void cmd_catch_stop_signals(void);
/* Installs handler for SIGINT, SIGTERM and SIGHUP, except a SIGHUP the
 * process inherited ignored (nohup), which stays ignored.  Without
 * SA_RESTART: a write blocked on a reader that does not read returns EINTR
 * when one arrives.  train, eval's watch, convert and export stop through it. */
void cmd_catch_signals(void (*handler)(int));
const char *cmd_signal_name(int sig);

/* quiet 1: cmd_errorf writes nothing until called with 0 (a rank other than
 * 0 while it checks the flags that every rank checks alike, so that rank 0
 * alone says why the job is refused).  Set before any thread starts. */
void cmd_errors_quiet(int quiet);

/* tag non-empty ("rank 1 of 2"): cmd_errorf's lines carry it after their
 * first ": " ("tower train: rank 1 of 2: ..."), until called with NULL or
 * "". */
void cmd_errors_tag(const char *tag);

/* Under mpirun, the ranks' agreement on a refusal some may make and others
 * not (a flag, a directory, a host's data): refused is this rank's outcome,
 * said aloud by rank 0 alone (cmd_errors_quiet on the others).  The lowest
 * rank that refused, when not rank 0, then calls say_again(ctx) (may be
 * NULL) with cmd_errors_tag set to "rank R of N", so that one line says why
 * and names it.  Returns that rank on every rank, or -1 when none refused.
 * A collective (every rank calls it); one process: 0 when refused, else
 * -1, and say_again is not called. */
int cmd_agree_refusal(int refused, void (*say_again)(void *ctx), void *ctx);

/* "tower COMMAND: rank R of N" into buf: the program name of a rank's
 * lines that base/flags writes (argv[0] of a parse said again). */
void cmd_rank_program(const char *command, char *buf, size_t n_bytes);

/* Under mpirun every rank must be given the same flags (docs/hosts.md), but
 * for per_rank_flags (NULL-terminated names: what each host has, what a rank
 * shows of itself): a rank with another --max_steps waited for ever in a
 * collective after the others ended, another --model broadcast blocks of
 * another size into them (heap corruption), another --batch_size or --seed
 * trained another job than the log said.  Rank 0's values go to every rank
 * (MPI_Bcast), each finds its first flag that differs, and the lowest rank
 * with one says it in one line ("tower COMMAND: rank 1 of 2 was given ...").
 * A collective.  0 when they agree (or one process), else 2 on every rank
 * (1 on a rank out of memory: the caller ends the job). */
int cmd_check_same_flags(const char *command, const Flag *flags, int n_flags, const char *const *per_rank_flags);

#endif
