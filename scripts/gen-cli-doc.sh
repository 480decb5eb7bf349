#!/usr/bin/env bash
# gen-cli-doc.sh TOWER_BINARY — print docs/cli.md, generated from the
# binary's own --help, so the reference cannot drift from the flags
# (tests/test_cli_doc.sh fails when the committed page differs).
# Usage: bash scripts/gen-cli-doc.sh build/cmd/tower > docs/cli.md
set -euo pipefail
tower=$1
cat <<'HEAD'
# The `tower` command line

Generated from `tower <command> --help` by `scripts/gen-cli-doc.sh`; `tests/test_cli_doc.sh` fails when
this page and the binary disagree.  Flags take `--name value` or `--name=value`; booleans also take a
bare `--name` (true), `--name=false`, or the word `true` or `false` after them (`--sync_replicas false`).  `tower --help` (also `-h`, `tower help`) lists the commands;
`tower COMMAND --help` (also `-h`, `tower help COMMAND`) lists a command's flags with their defaults,
as below.  `tower --version` prints the version and what the binary was built with, for example

    tower 0.1
    build: Release; CUDA: off; NCCL: off; MPI: on; BLAS: oneDNN 2.6.3 dnnl_sgemm; OpenMP 201511; sanitizer: none

After the build the binary is `build/cmd/tower`; `cmake --install build --prefix ~/.local` copies it to
`~/.local/bin/tower`.

## Exit status

| status | meaning |
|---|---|
| 0 | success (`--help` and `--version` too) |
| 1 | a failure, explained in one line on stderr: the command line is well-formed but the work cannot be done — a missing or corrupt file, no checkpoint, a path that cannot be written, a GPU mode without GPU towers or in a build without CUDA, a diverged loss |
| 2 | a bad command line, refused before any work: an unknown command or flag, a flag without its value, a value that is not a number, not finite, outside its range or not one of its choices, an argument the command does not take |
| 130, 143, 129 | `tower train` stopped by SIGINT (128 + 2), SIGTERM (128 + 15) or SIGHUP (128 + 1: the terminal closed): the step in flight finished and its checkpoint was written, but the run did not reach `--max_steps`, so a script does not go on as if it had; `--resume` continues it.  A signal after the last step changes nothing (exit 0).  Standard output lost (a closed pipe, `\| head`; a full disk) stops `tower train` the same way with exit 1; any other command that could not write its output exits 1 |

## Refusals

Every value is checked when the command line is parsed, before a file is read or a directory made, and
a refusal is one line on stderr naming the flag, the value and what the flag accepts:

    tower train: --model 'lenet5': expected mnist, cifar10, mobilenet_v2, vgg11, vgg16, resnet20 or resnet50
    tower train: --variable_update 'independent': expected parameter_server or replicated
    tower train: --num_towers 1000: expected an integer in [0, 64] (0: one per device)
    tower train: --batch_size 0: expected an integer in [1, 1048576]
    tower train: --learning_rate -0.1: expected a number > 0
    tower train: --momentum 1: expected a number in [0, 1)
    tower train: --learning_rate 'nan': expected a finite number > 0
    tower train: --batch_size '12x': expected an integer in [1, 1048576]
    tower train: --batch_size 99999999999: expected an integer in [1, 1048576]
    tower train: unknown flag --no_such_flag (see --help)
    tower train: unknown flag -x (flags take two dashes, --name; see --help)

No flag takes `nan` or `inf`, C's hexadecimal (`0x10`), or a blank before or after a number; a float32 flag
takes no nonzero number under float32's smallest normal one (`--learning_rate 1e-40: under float32's smallest
normal number, 1.17549435e-38 (expected a number > 0)`) nor one that rounds out of its range (`--momentum
0.99999999: rounds to 1 in float32 (expected a number in [0, 1))`); the flags kept in double, as typed
(the schedule's epochs, `--cosine_alpha`, `--adam_beta1`/`--adam_beta2`, `--max_corrupt_fraction`), take
any finite number of their range but a double's subnormals (`1e-40` is taken there, `1e-320` refused); the
Adam betas are refused where their float32 is 1 (`--adam_beta2 0.99999999: rounds to 1 in float32`);
integers take no trailing characters.  A number flag's range is part of
its entry in the command's flag table (base/flags.h, `FLAG_RANGE`): the parser refuses a value outside it,
a value past the type's (an int's, a long's) included, and `--help` prints it after the default, as in the
lists below; a flag without one takes any value of its type.
The messages are written escaped (base/escape.h: cmd/'s through `cmd_errorf` in cmd/cmd_util.c, the
flag parser's, and the warnings and notes of io/ and train/): a byte outside printable ASCII, whether it
came from the command line, a file name or a file's contents, is printed as `\xHH`, so a message stays
one line and cannot move the cursor or forge a line of its own:

    tower train: --batch_size '\x1b[2J\x0aforged line': expected an integer in [1, 1048576]

What the ranges do not say: `--learning_rate` takes any finite rate above 0 (one too large for the model
is found as divergence while training) and, unset, is the optimizer's default (docs/ps.md); `--shard_sizes`
entries are batch sizes (1 to 1048576); `--gpus` is a comma-separated list of GPU numbers.

Data given the wrong way gets a hint (exit 2):

    tower train: unexpected argument 'data/x/train-00001-of-00004.tfrecord': an unquoted glob given to --data was expanded by the shell into several files; quote it, e.g. --data 'data/x/train-*-of-00004.tfrecord'
    tower train: --data 'data/x' is a directory: give its TFRecord files, e.g. --data 'data/x/*.tfrecord'
    tower inspect: 'data/x' is a directory: give its TFRecord files, e.g. 'data/x/*.tfrecord'

`tower train` then refuses, exit 1 and one line, what cannot succeed, before its first step:

    tower train: not enough memory: this run needs up to 880.52 GiB of host memory (the memory bound: input 33.01 GiB, towers 847.48 GiB, the server's not yet counted; global batch 2097152), and 22.22 GiB is available (MemAvailable in /proc/meminfo): lower --batch_size
    tower eval: not enough memory: batch 10000 needs up to 4.12 GiB of host memory (input 0.08, activations 4.04 GiB), and 3.50 GiB is available (MemAvailable in /proc/meminfo): lower --batch_size
    tower train: --train_dir runs/a is not a directory
    tower train: --train_dir runs/a cannot be written: runs/a/.lock: Read-only file system
    tower train: --train_dir runs/a is in use by another run (pid 4242 holds runs/a/.lock): wait for it to end, or give another --train_dir

The memory bound is the one `--log_device_placement` prints (less what the process holds already); what
is available is MemAvailable of `/proc/meminfo`, or, where the process's cgroup sets a limit (v2
`memory.max`, v1 `memory.limit_in_bytes`), that limit less its usage, or, under an address-space limit
(`ulimit -v`), that limit less the process's address space and a reserve for its threads, whichever is less.  `eval` caps its
batch at the number of examples it reads when the batch asked for does not fit (it then counts them, one
pass over the records' checksums), and checks again.  A run holds an `flock` on `TRAIN_DIR/.lock`
(which holds its PID) from start to exit and removes the file as it ends; the kernel drops the lock when the process ends, however it ends.
`eval`, `export` and `inspect` take no lock: they read a train_dir while it trains.
Said in one line, and the run goes on: `--resume` on a train_dir without a checkpoint
(`--resume: no checkpoint in DIR: starting from step 0`); GPU towers asked for where no GPU is usable
(`device auto: CPU towers (...); --num_gpus 2 asked for GPU towers, this run has 1 CPU tower (--num_towers
sets how many)`); a CUDA build on a machine without the NVIDIA driver (`no GPU driver found: CPU towers`).

`tower train --max_steps 0` writes `model.ckpt-0`, the initial variables (as TensorFlow's
`CheckpointSaverHook` does when a session starts), for `eval` and `export` of an untrained model.

What depends on the machine, the build or the data is found after parsing and is exit 1: `--device gpu`
or a GPU mode without a usable GPU, a pattern that matches no files, an `--image_size` larger than the
stored images, an `--image_size` given for TFRecords that a model other than `cifar10` uses at their stored
size (another size was ignored), `--shard_sizes` with more or fewer entries than towers.  `tower bench` tries its `--csv`,
`--svg` and `--trace` paths before it measures anything:

    tower bench: --svg out/chart.svg: cannot create the file: No such file or directory

## Commands

HEAD
echo '```'
"$tower" --help
echo '```'
for cmd in $("$tower" --help | awk '/^commands:/ {on=1; next} on && NF {print $1}'); do
  echo
  echo "## tower $cmd"
  echo
  echo '```'
  "$tower" "$cmd" --help
  echo '```'
done
