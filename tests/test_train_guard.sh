#!/usr/bin/env bash
# test_train_guard.sh TOWER — what `tower train` refuses before it starts and
# how it ends without losing a run (issue 14): a memory bound the machine
# cannot give (train and eval; eval's batch over compressed data larger than
# the data, held at the data's size), a --train_dir that cannot be written, GPU
# towers asked for on a machine without a GPU (and without its driver),
# --resume with no checkpoint, a bad record mid-run (the variables saved), a
# second run on a busy train_dir (readers still work), divergence found at
# the step where the variables stop being finite, SIGTERM/SIGINT (a
# checkpoint, then 128 + the signal), --max_steps 0 (model.ckpt-0), a run
# from step 0 over an earlier run's checkpoints (refused, the files kept)
# and --resume where checkpoints lie without an index (refused), --num_epochs
# ending before one whole step (exit 1, nothing saved), an exponential decay
# under one step (refused), SIGHUP (as SIGTERM, 129; the process keeps its
# name), a closed pipe on stdout (checkpoint, exit 1), a signal after the
# last step (exit 0), an ESC byte in --train_dir (escaped), a bad record
# before the first step (no labels.txt left behind), --resume at --max_steps
# (nothing to train, no empty events file), a second stop signal (ends at
# once).
# Every case is checked and reported; the test fails when any failed.
source "$(dirname "$0")/train_common.sh"
convert_fashion_mnist
data="$work/train-*.tfrecord"
test_data="$work/test-*.tfrecord"
failures=0
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }
mnt=""
bgpid=""
trap '[ -n "$bgpid" ] && kill -9 "$bgpid" 2>/dev/null; [ -n "$mnt" ] && umount "$mnt" 2>/dev/null; rm -rf "$work"' EXIT
# A safety net: a build that ignores its memory bound must fail here, not
# send the machine into the OOM killer (16 GiB of address space).  Not under
# the address sanitizer, whose shadow memory reserves terabytes of address
# space at start (its build is refused by the same bound check, unlimited).
if "$tower" --version | grep -q "sanitizer: none"; then
  limit_as() { ( ulimit -v 16777216; "$@" ); }
else
  limit_as() { "$@"; }
fi
run() { # run NAME ARGS...: stdout in $work/NAME.out, stderr in $work/NAME.err, status in $rc
  local name=$1; shift
  set +e; limit_as "$tower" "$@" >"$work/$name.out" 2>"$work/$name.err"; rc=$?; set -e
}
one_line() { [ "$(wc -l <"$1")" -eq 1 ]; }
# CPU towers (on a GPU machine too): the GPU modes test the loss every step, not the variables.
cpu=(--model mnist --data "$data" --batch_size 16 --summary_every 0 --histogram_every 0 --min_after_dequeue 100
     --log_every 1)
common=("${cpu[@]}" --device cpu)

# 9. --max_steps 0 writes the initial variables as model.ckpt-0 (TensorFlow's CheckpointSaverHook saves at step 0).
run zero train "${common[@]}" --train_dir "$work/zero" --max_steps 0
if [ $rc -eq 0 ] && [ -f "$work/zero/model.ckpt-0" ] && grep -q "done at step 0; checkpoint in" "$work/zero.out" &&
   "$tower" eval --checkpoint_dir "$work/zero" --data "$test_data" --eval_dir none >/dev/null; then
  ok "--max_steps 0 wrote model.ckpt-0, which evaluates"
else bad "--max_steps 0: status $rc, checkpoint: $(ls "$work/zero" 2>&1 | tr '\n' ' ')"; fi
# The same under a cosine that decays to --max_steps (it was refused: "no step to decay over").
run zero_cos train "${common[@]}" --train_dir "$work/zero_cos" --max_steps 0 --lr_schedule cosine
if [ $rc -eq 0 ] && [ -f "$work/zero_cos/model.ckpt-0" ]; then ok "--max_steps 0 --lr_schedule cosine wrote model.ckpt-0"
else bad "--max_steps 0 --lr_schedule cosine: status $rc: $(head -c 400 "$work/zero_cos.err")"; fi

# --resume where the checkpoint is at --max_steps already: one line says there is nothing to train, exit 0, and no
# second events file (an empty run in TensorBoard before); --max_steps 0 with summaries on writes none either.
run atmax train "${common[@]}" --train_dir "$work/atmax" --max_steps 2 --summary_every 1
run atmax2 train "${common[@]}" --train_dir "$work/atmax" --max_steps 2 --summary_every 1 --resume
n_events=$(ls "$work/atmax"/events.out.tfevents.* 2>/dev/null | wc -l)
run zero_ev train "${common[@]}" --train_dir "$work/zero_ev" --max_steps 0 --summary_every 1 --histogram_every 1
if [ $rc -eq 0 ] && [ "$n_events" -eq 1 ] &&
   grep -q -- "--max_steps 2: the checkpoint is at step 2 already: nothing to train (raise --max_steps to go on)" "$work/atmax2.out" &&
   ! ls "$work/zero_ev"/events.out.tfevents.* >/dev/null 2>&1 && [ -f "$work/zero_ev/model.ckpt-0" ]; then
  ok "--resume at --max_steps: $(grep -o 'the checkpoint is at.*' "$work/atmax2.out"); no empty events file"
else bad "--resume at --max_steps: status $rc, $n_events events files, $(cat "$work/atmax2.out" | tail -2); zero_ev: $(ls "$work/zero_ev" | tr '\n' ' ')"; fi

# An exponential decay every --num_epochs_per_decay that is under one step: refused (it ran at a constant rate).
run expo train "${common[@]}" --train_dir "$work/expo" --max_steps 3 --num_examples_per_epoch 80 \
  --num_epochs_per_decay 0.1 --lr_decay_factor 0.5
if [ $rc -eq 1 ] && one_line "$work/expo.err" &&
   [ "$(cat "$work/expo.err")" = "tower train: --lr_schedule exponential: no step to decay over: --num_epochs_per_decay 0.1 is under one step of this run (5 steps an epoch)" ] &&
   ! ls "$work/expo"/model.ckpt-* >/dev/null 2>&1; then
  ok "an exponential decay under one step refused: $(cat "$work/expo.err")"
else bad "--num_epochs_per_decay 0.1 of a 5-step epoch: status $rc: $(head -c 400 "$work/expo.err")"; fi

# Epochs of a schedule past what a step count holds saturate (a step no run reaches): a warmup of 5e18 epochs was
# converted to LONG_MIN and dropped in silence (a constant rate from step 1), a decay of 1e30 epochs was "under one
# step".
run farwarm train "${common[@]}" --train_dir "$work/farwarm" --max_steps 1 --num_examples_per_epoch 16 \
  --num_learning_rate_warmup_epochs 5e18 --log_device_placement
run fardecay train "${common[@]}" --train_dir "$work/fardecay" --max_steps 1 --num_examples_per_epoch 16 \
  --lr_schedule exponential --num_epochs_per_decay 1e30 --log_device_placement
if [ $rc -eq 0 ] && grep -q "learning rate: constant 0.01; linear warmup from 0 over the first 4611686018427387904 steps" "$work/farwarm.out" &&
   grep -q "times 0.1 every 4611686018427387904 steps" "$work/fardecay.out"; then
  ok "schedule epochs past a step count saturate: $(grep -o 'linear warmup.*' "$work/farwarm.out")"
else bad "far schedule epochs: status $rc: $(grep 'learning rate' "$work/farwarm.out" "$work/fardecay.out"; head -c 300 "$work/fardecay.err")"; fi

# Epochs as typed, in double (Python's): 0.7 of a 10-step epoch is 7 steps, 2.3 epochs 23 (as float32, 0.69999998
# and 2.2999999, they were 6 and 22: a decay and a warmup one step short of TensorFlow's int(steps * epochs)).
run epochs7 train "${common[@]}" --train_dir "$work/epochs7" --max_steps 1 --num_examples_per_epoch 160 \
  --num_epochs_per_decay 0.7 --num_learning_rate_warmup_epochs 2.3 --log_device_placement
if [ $rc -eq 0 ] && grep -q "times 0.1 every 7 steps" "$work/epochs7.out" &&
   grep -q "linear warmup from 0 over the first 23 steps" "$work/epochs7.out"; then
  ok "epochs in double: $(grep -o 'learning rate: .*' "$work/epochs7.out")"
else bad "0.7 and 2.3 epochs of 10 steps: status $rc: $(grep 'learning rate' "$work/epochs7.out"; head -c 300 "$work/epochs7.err")"; fi

# A cosine to --max_steps, resumed at twice the batch: the schedule's step is 4 behind the run's, so the decay is
# 10 steps long and ends at the run's last (it was 14 and ended at 0.00283 of 0.01, not 0).
run cos7 train "${common[@]}" --train_dir "$work/cos" --max_steps 7 --num_examples_per_epoch 160 --lr_schedule cosine
run cos14 train "${common[@]}" --train_dir "$work/cos" --max_steps 14 --num_examples_per_epoch 160 --lr_schedule cosine \
  --batch_size 32 --resume --log_device_placement
if [ $rc -eq 0 ] && grep -q "learning rate: cosine: from 0.01 to 0 over 10 steps; resumed with another step size: the schedule's step is this run's step -4" "$work/cos14.out"; then
  ok "a cosine resumed at twice the batch ends at --max_steps: $(grep -o 'cosine: from.*steps;' "$work/cos14.out")"
else bad "cosine resumed at another batch: status $rc: $(grep 'learning rate' "$work/cos14.out"; head -c 300 "$work/cos14.err")"; fi

# 1. The memory bound against what is available: a forced figure, then a batch no machine here can hold.
export TOWER_TEST_MEM_AVAILABLE_BYTES=100000000
run mem train "${common[@]}" --train_dir "$work/mem" --batch_size 1024 --max_steps 1
unset TOWER_TEST_MEM_AVAILABLE_BYTES
if [ $rc -eq 1 ] && one_line "$work/mem.err" &&
   grep -Eq "^tower train: not enough memory: this run needs up to [0-9.]+ GiB of host memory \(the memory bound: .*\), and 0.09 GiB is available \(TOWER_TEST_MEM_AVAILABLE_BYTES\): lower --batch_size$" "$work/mem.err" &&
   ! ls "$work/mem"/model.ckpt-* >/dev/null 2>&1; then
  ok "a bound over the available memory: $(cat "$work/mem.err")"
else bad "forced available memory: status $rc: $(head -c 600 "$work/mem.err")"; fi
run memreal train "${common[@]}" --train_dir "$work/memreal" --batch_size 1048576 --num_towers 2 --max_steps 1
if [ $rc -eq 1 ] && one_line "$work/memreal.err" &&
   grep -Eq "^tower train: not enough memory: .* is available \((MemAvailable in /proc/meminfo|the cgroup limit .*|the address-space limit \(ulimit -v\) of 16.0 GiB .*)\): lower --batch_size$" "$work/memreal.err"; then
  ok "a batch no machine holds: $(cat "$work/memreal.err")"
else bad "--batch_size 1048576 --num_towers 2: status $rc: $(head -c 600 "$work/memreal.err")"; fi
# Under an address-space limit (ulimit -v, as clusters set): the bound is held against it, not MemAvailable alone
# (batch 6500 of mnist in 4 GB passed the check, then dnnl_sgemm's allocation failed and the run aborted, exit 134).
if "$tower" --version | grep -q "sanitizer: none"; then
  set +e
  ( ulimit -v 3906250; "$tower" train "${common[@]}" --train_dir "$work/aslimit" --batch_size 6500 --max_steps 1 \
      >"$work/aslimit.out" 2>"$work/aslimit.err" )
  rc=$?
  set -e
  if [ $rc -eq 1 ] && one_line "$work/aslimit.err" &&
     grep -Eq "^tower train: not enough memory: .* is available \(the address-space limit \(ulimit -v\) of 3.7 GiB minus this process's [0-9.]+ GiB and a reserve for its threads\): lower --batch_size$" "$work/aslimit.err"; then
    ok "an address-space limit: $(cat "$work/aslimit.err")"
  else bad "--batch_size 6500 under ulimit -v 4 GB: status $rc: $(head -c 600 "$work/aslimit.err")"; fi
fi
# eval caps its batch at the examples it reads (10000), then checks its own bound.
export TOWER_TEST_MEM_AVAILABLE_BYTES=1000000
run evalmem eval --checkpoint_dir "$work/zero" --data "$test_data" --eval_dir none --batch_size 1048576
unset TOWER_TEST_MEM_AVAILABLE_BYTES
if [ $rc -eq 1 ] && one_line "$work/evalmem.err" &&
   grep -Eq "^tower eval: not enough memory: batch 10000 needs up to [0-9.]+ GiB .* available \(TOWER_TEST_MEM_AVAILABLE_BYTES\): lower --batch_size$" "$work/evalmem.err"; then
  ok "eval: $(cat "$work/evalmem.err")"
else bad "eval --batch_size 1048576 with 1 MB available: status $rc: $(head -c 600 "$work/evalmem.err")"; fi
# eval makes its activations for the first batch, the most any batch holds: a batch larger than gzip-compressed data
# (whose files bound no count) runs in 3 GiB of address space (batch 20000 made whole held 8.5 GB).  600 examples.
gzip -dc "$src/t10k-images-idx3-ubyte.gz" >"$work/t10k-images"  # whole files: no reader cut short (pipefail)
gzip -dc "$src/t10k-labels-idx1-ubyte.gz" >"$work/t10k-labels"
{ printf '\x00\x00\x08\x03\x00\x00\x02\x58\x00\x00\x00\x1c\x00\x00\x00\x1c'
  head -c $((16 + 600 * 784)) "$work/t10k-images" | tail -c $((600 * 784)); } >"$work/small-images"
{ printf '\x00\x00\x08\x01\x00\x00\x02\x58'; head -c $((8 + 600)) "$work/t10k-labels" | tail -c 600; } \
  >"$work/small-labels"
"$tower" convert --from idx --images "$work/small-images" --labels "$work/small-labels" --out "$work/small_gz" \
  --num_shards 1 --compression gzip >/dev/null
if "$tower" --version | grep -q "sanitizer: none"; then limit_3g() { ( ulimit -v 3145728; "$@" ); }; else limit_3g() { "$@"; }; fi
set +e
limit_3g "$tower" eval --checkpoint_dir "$work/zero" --data "$work/small_gz-*" --eval_dir none --batch_size 20000 \
  --no_progress >"$work/evalgz.out" 2>"$work/evalgz.err"
rc=$?
set -e
if [ $rc -eq 0 ] && grep -q " of 600 examples correct" "$work/evalgz.out"; then
  ok "eval --batch_size 20000 of 600 gzip-compressed examples in 3 GiB of address space"
else bad "eval --batch_size 20000 of 600 gzip-compressed examples: status $rc: $(head -c 600 "$work/evalgz.err")"; fi

# 2. A train_dir that cannot be written is found before the first step, summaries off.
echo x >"$work/afile"
run notdir train "${common[@]}" --train_dir "$work/afile" --max_steps 30 --save_every 1000
if [ $rc -eq 1 ] && one_line "$work/notdir.err" && grep -q "is not a directory" "$work/notdir.err" &&
   ! grep -q "step 1," "$work/notdir.out"; then
  ok "a file as train_dir: $(cat "$work/notdir.err")"
else bad "a file as --train_dir: status $rc, $(grep -c "step " "$work/notdir.out") step lines: $(head -c 300 "$work/notdir.err")"; fi
mkdir -p "$work/ro"
if mount -t tmpfs -o ro,size=1m tmpfs "$work/ro" 2>/dev/null; then
  mnt="$work/ro"
  run rodir train "${common[@]}" --train_dir "$work/ro" --max_steps 30 --save_every 1000
  if [ $rc -eq 1 ] && one_line "$work/rodir.err" && grep -q "cannot be written: .*Read-only file system" "$work/rodir.err" &&
     ! grep -q "step 1," "$work/rodir.out"; then
    ok "a read-only train_dir: $(cat "$work/rodir.err")"
  else bad "a read-only --train_dir: status $rc: $(head -c 300 "$work/rodir.err")"; fi
  umount "$mnt"; mnt=""
elif [ "$(id -u)" != 0 ]; then
  chmod 555 "$work/ro"
  run rodir train "${common[@]}" --train_dir "$work/ro" --max_steps 30 --save_every 1000
  if [ $rc -eq 1 ] && grep -q "cannot be written" "$work/rodir.err" && ! grep -q "step 1," "$work/rodir.out"; then
    ok "a read-only train_dir: $(cat "$work/rodir.err")"
  else bad "a read-only --train_dir: status $rc: $(head -c 300 "$work/rodir.err")"; fi
else echo "skipped: a read-only train_dir (root, and mount is not permitted)"; fi

# 3. GPU towers asked for where none is usable, in one line; no driver is not an alarm.
run gpus train "${cpu[@]}" --device auto --train_dir "$work/gpus" --num_gpus 2 --max_steps 1
if [ -e /proc/driver/nvidia/version ] || grep -q "GPU tower(s) on" "$work/gpus.out"; then
  echo "skipped: --num_gpus 2 on a machine with a GPU driver"
elif [ $rc -eq 0 ] && grep -q "CPU towers.*--num_gpus 2 asked for GPU towers, this run has 1 CPU tower" "$work/gpus.out" &&
     [ "$(grep -c "CPU tower" "$work/gpus.out")" -eq 1 ]; then
  ok "$(grep "CPU tower" "$work/gpus.out")"
else bad "--num_gpus 2 without a GPU: status $rc: $(head -c 400 "$work/gpus.out")"; fi
if grep -q "cudaGetDeviceCount" "$work/gpus.out" "$work/gpus.err"; then
  bad "the device line reads as an alarm: $(grep -h cudaGetDeviceCount "$work/gpus.out" "$work/gpus.err")"
elif "$tower" --version | grep -q "CUDA: on" && [ ! -e /proc/driver/nvidia/version ]; then
  if grep -q "no GPU driver found: CPU towers" "$work/gpus.out"; then ok "no driver: $(grep "no GPU driver" "$work/gpus.out")"
  else bad "a CUDA build without a driver: no 'no GPU driver found: CPU towers' line"; fi
fi

# 4. --resume with nothing to resume says so and goes on.
run resume train "${common[@]}" --train_dir "$work/fresh" --max_steps 1 --resume
if [ $rc -eq 0 ] && grep -q -- "--resume: no checkpoint in $work/fresh: starting from step 0" "$work/resume.out"; then
  ok "$(grep -- "--resume" "$work/resume.out")"
else bad "--resume on an empty train_dir: status $rc, no line saying so"; fi

# 5. A bad record mid-run: exit 1, one line, and the variables of the last step saved.
mkdir -p "$work/cut"
f="$work/cut/train-00000-of-00001.tfrecord"
cp "$work/train-00000-of-00002.tfrecord" "$f"
payload=$(od -An -t u8 -N8 "$f" | tr -d ' ')
record=$((payload + 16))
[ $(( $(stat -c %s "$f") % record )) -eq 0 ] || fail "the records of $f are not all $record bytes"
printf '\xff\xff\xff\xff' | dd of="$f" bs=1 seek=$((800 * record + 12 + 100)) conv=notrunc 2>/dev/null
run badrec train --model mnist --device cpu --data "$f" --batch_size 16 --summary_every 0 --histogram_every 0 \
  --min_after_dequeue 100 --log_every 1 --train_dir "$work/badrec" --max_steps 100000 --save_every 100000
step=$(sed -n 's/.*the variables of step \([0-9]*\) are saved in .*/\1/p' "$work/badrec.err")
if [ $rc -eq 1 ] && one_line "$work/badrec.err" && grep -q "record 800 at offset $((800 * record))" "$work/badrec.err" &&
   [ -n "$step" ] && [ "$step" -gt 0 ] && [ -f "$work/badrec/model.ckpt-$step" ] &&
   "$tower" eval --checkpoint_dir "$work/badrec" --data "$test_data" --eval_dir none >/dev/null; then
  ok "$(cat "$work/badrec.err")"
else bad "a bad record mid-run: status $rc: $(head -c 400 "$work/badrec.err"); checkpoints: $(ls "$work/badrec" 2>&1 | tr '\n' ' ')"; fi

# 6 and 8. A second run on a busy train_dir is refused naming the holder; eval and export read meanwhile;
# SIGTERM saves and exits 143.
"$tower" train "${common[@]}" --train_dir "$work/busy" --max_steps 100000 --save_every 2 >"$work/busy.out" 2>&1 &
bgpid=$!
for _ in $(seq 1 300); do [ -f "$work/busy/checkpoint" ] && break; sleep 0.1; done
run second train "${common[@]}" --train_dir "$work/busy" --max_steps 5
if [ $rc -eq 1 ] && one_line "$work/second.err" &&
   grep -q "^tower train: --train_dir $work/busy is in use by another run (pid $bgpid holds $work/busy/.lock)" "$work/second.err"; then
  ok "$(cat "$work/second.err")"
else bad "a second run on a busy train_dir: status $rc: $(head -c 300 "$work/second.err")"; fi
if "$tower" eval --checkpoint_dir "$work/busy" --data "$test_data" --eval_dir none >/dev/null 2>"$work/reader.err" &&
   "$tower" export --checkpoint_dir "$work/busy" --out "$work/busy.safetensors" >/dev/null 2>>"$work/reader.err"; then
  ok "eval and export read a train_dir while it trains"
else bad "a reader of a busy train_dir: $(cat "$work/reader.err")"; fi
kill -TERM "$bgpid" 2>/dev/null || true
set +e; wait "$bgpid"; rc=$?; set -e
bgpid=""
if [ $rc -eq 143 ] && grep -q "stop requested by SIGTERM after step [0-9]*: checkpoint, then exit status 143" "$work/busy.out"; then
  ok "SIGTERM: checkpoint $(sed -n 's/^model_checkpoint_path: //p' "$work/busy/checkpoint"), exit status 143"
else bad "SIGTERM: exit status $rc (expected 143): $(tail -2 "$work/busy.out")"; fi
# The lock ends with its run: the next run on that train_dir goes on from its checkpoint.
saved=$(sed -n 's/^model_checkpoint_path: "model.ckpt-\([0-9]*\)"/\1/p' "$work/busy/checkpoint")
run after train "${common[@]}" --train_dir "$work/busy" --max_steps $((saved + 1)) --resume
if [ $rc -eq 0 ] && [ ! -e "$work/busy/.lock" ]; then ok "the lock ended with its run, its file removed"
else bad "after the holder ended: status $rc, $(ls -a "$work/busy" | tr '\n' ' '): $(cat "$work/after.err")"; fi
# SIGINT: 130.
"$tower" train "${common[@]}" --train_dir "$work/busy2" --max_steps 100000 --save_every 100000 >"$work/int.out" 2>&1 &
bgpid=$!
for _ in $(seq 1 300); do grep -q "step 2," "$work/int.out" 2>/dev/null && break; sleep 0.1; done
kill -INT "$bgpid" 2>/dev/null || true
set +e; wait "$bgpid"; rc=$?; set -e
bgpid=""
if [ $rc -eq 130 ] && ls "$work/busy2"/model.ckpt-* >/dev/null 2>&1; then ok "SIGINT: checkpoint written, exit status 130"
else bad "SIGINT: exit status $rc (expected 130)"; fi

# 7. Divergence at the step where the gradients or variables stop being finite, while the loss is still
# finite (--learning_rate 1e20: the loss of step 2 is about 3e19); the last good checkpoint stays the latest.
for mode in "parameter_server" "replicated"; do
  run "div_$mode" train "${common[@]}" --variable_update "$mode" --num_towers 2 --batch_size 8 \
    --train_dir "$work/div_$mode" --learning_rate 1e20 --max_steps 30 --save_every 1
  n=$(sed -n 's/.*Model diverged with non-finite \(gradients (not applied)\|variables\) at step \([0-9]*\) (loss = [0-9.]*).*/\2/p' \
      "$work/div_$mode.err")
  latest=$(sed -n 's/^model_checkpoint_path: "model.ckpt-\(.*\)"/\1/p' "$work/div_$mode/checkpoint" 2>/dev/null || true)
  # Every step before n was saved, and a save refuses non-finite variables: step n is the first bad one.
  if [ $rc -eq 1 ] && one_line "$work/div_$mode.err" && [ -n "$n" ] && [ "${latest:-0}" -eq $((n - 1)) ] &&
     grep -q "not saved" "$work/div_$mode.err"; then
    ok "$mode: $(cat "$work/div_$mode.err")"
  else bad "$mode, --learning_rate 1e20: status $rc, latest checkpoint ${latest:-none}: $(head -c 400 "$work/div_$mode.err")"; fi
  # Without a save to find it: the same step is named, and nothing is written.
  run "div3_$mode" train "${common[@]}" --variable_update "$mode" --num_towers 2 --batch_size 8 \
    --train_dir "$work/div3_$mode" --learning_rate 1e20 --max_steps 30 --save_every 1000
  if [ $rc -eq 1 ] && [ -n "$n" ] && grep -q "Model diverged with non-finite .* at step $n (loss = [0-9.]*); not saved (no checkpoint was written)" \
       "$work/div3_$mode.err" && ! ls "$work/div3_$mode"/model.ckpt-* >/dev/null 2>&1; then
    ok "$mode, --save_every 1000: step $n named, nothing written"
  else bad "$mode, --save_every 1000: status $rc: $(head -c 400 "$work/div3_$mode.err")"; fi
done
# Batch norm's moving statistics diverging while the loss is finite (resnet20 at --learning_rate 1000): found at
# their step, every step before it saved (the run went on until a save refused the variables, losing every step
# since the last checkpoint).
for mode in "parameter_server" "replicated"; do
  run "bndiv_$mode" train "${common[@]}" --model resnet20 --variable_update "$mode" --num_towers 2 --batch_size 4 \
    --train_dir "$work/bndiv_$mode" --learning_rate 1000 --max_steps 30 --save_every 1
  n=$(sed -n 's/.*Model diverged with non-finite batch norm moving statistics at step \([0-9]*\) (loss = [0-9.]*).*/\1/p' \
      "$work/bndiv_$mode.err")
  latest=$(sed -n 's/^model_checkpoint_path: "model.ckpt-\(.*\)"/\1/p' "$work/bndiv_$mode/checkpoint" 2>/dev/null || true)
  if [ $rc -eq 1 ] && one_line "$work/bndiv_$mode.err" && [ -n "$n" ] && [ "${latest:-0}" -eq $((n - 1)) ]; then
    ok "$mode, resnet20: $(cat "$work/bndiv_$mode.err")"
  else bad "$mode, resnet20 --learning_rate 1000: status $rc, latest ${latest:-none}: $(head -c 400 "$work/bndiv_$mode.err")"; fi
done

# 10. A run without --resume in a train_dir of an earlier run's checkpoints would replace them: refused, one line,
# nothing touched (the files' bytes and the index as they were); the same with --resume where no index names them.
run first train "${common[@]}" --train_dir "$work/again" --max_steps 4 --save_every 2
sum_before=$(cd "$work/again" && md5sum checkpoint model.ckpt-* | md5sum)
run again train "${common[@]}" --train_dir "$work/again" --max_steps 2 --save_every 1
if [ $rc -eq 1 ] && one_line "$work/again.err" &&
   [ "$(cat "$work/again.err")" = "tower train: --train_dir $work/again holds the checkpoints of an earlier run (2 files, the newest model.ckpt-4): --resume continues from them; to start over, remove them or give another --train_dir" ] &&
   [ "$(cd "$work/again" && md5sum checkpoint model.ckpt-* | md5sum)" = "$sum_before" ]; then
  ok "a run from step 0 over an earlier run: $(cat "$work/again.err")"
else bad "a run from step 0 over an earlier run's checkpoints: status $rc: $(head -c 600 "$work/again.err"); $(ls "$work/again" | tr '\n' ' ')"; fi
mv "$work/again/checkpoint" "$work/again/index.bak"
# Without an index (a run killed between its first checkpoint's rename and its index): --resume continues from the
# newest where it loads whole, with a note, and the next save writes the index; where it does not load, refused.
cp "$work/again/model.ckpt-4" "$work/again.ckpt-4.bak"
head -c 100 "$work/again.ckpt-4.bak" >"$work/again/model.ckpt-4"
run noindex_bad train "${common[@]}" --train_dir "$work/again" --max_steps 6 --resume
if [ $rc -eq 1 ] && one_line "$work/noindex_bad.err" &&
   grep -qF -- "tower train: --resume: $work/again holds checkpoints but no index ($work/again/checkpoint) naming the latest, and the newest, model.ckpt-4, does not load (" "$work/noindex_bad.err" &&
   [ -f "$work/again/model.ckpt-2" ] && [ ! -e "$work/again/checkpoint" ]; then
  ok "--resume without an index, the newest damaged: $(cat "$work/noindex_bad.err")"
else bad "--resume over checkpoints without an index, the newest damaged: status $rc: $(head -c 600 "$work/noindex_bad.err")"; fi
cp "$work/again.ckpt-4.bak" "$work/again/model.ckpt-4"
run noindex train "${common[@]}" --train_dir "$work/again" --max_steps 6 --resume
if [ $rc -eq 0 ] && one_line "$work/noindex.err" &&
   grep -qF -- "note: $work/again has no index ($work/again/checkpoint): continuing from its newest checkpoint, model.ckpt-4" "$work/noindex.err" &&
   grep -q "resumed from $work/again/model.ckpt-4 at step 4" "$work/noindex.out" &&
   grep -qx 'model_checkpoint_path: "model.ckpt-6"' "$work/again/checkpoint"; then
  ok "--resume without an index: $(cat "$work/noindex.err")"
else bad "--resume over checkpoints without an index: status $rc: $(head -c 600 "$work/noindex.err")"; fi

# 11. --num_epochs of data that hold less than one step: no step can run; exit 1 and one line, no checkpoint (a
# model.ckpt-0 of untrained variables and exit 0 before), and no events file (an empty run in TensorBoard before);
# the train_dir it made (short/run, short made too) is removed again: nothing of the refused run is left.
run short train "${common[@]}" --data "$test_data" --train_dir "$work/short/run" --num_towers 2 --batch_size 6000 \
  --num_epochs 1 --max_steps 10 --min_after_dequeue 0 --summary_every 1
if [ $rc -eq 1 ] && one_line "$work/short.err" &&
   [ "$(cat "$work/short.err")" = "tower train: --num_epochs 1 of --data ended before one whole step of 12000 examples: an epoch holds fewer than a step takes (lower --batch_size or --num_towers, or raise --num_epochs); no step ran, nothing saved" ] &&
   [ ! -e "$work/short" ]; then
  ok "--num_epochs 1 of 10000 examples, steps of 12000: $(cat "$work/short.err"); the train_dir it made removed"
else bad "--num_epochs shorter than a step: status $rc: $(head -c 600 "$work/short.err"); $(ls -R "$work/short" 2>&1 | tr '\n' ' ')"; fi

# 11b. A bad record before the first step, in data with a labels.txt beside it: no step ran, nothing saved, and the
# labels.txt the run recorded goes too (it stayed, and refused a later run on data of another class list); in a
# train_dir that was there, the directory stays, empty.
mkdir -p "$work/lbl"
cp "$work/train-00000-of-00002.tfrecord" "$work/lbl/train-00000-of-00001.tfrecord"
printf '\xff\xff\xff\xff' | dd of="$work/lbl/train-00000-of-00001.tfrecord" bs=1 seek=$((5 * record + 12 + 100)) \
  conv=notrunc 2>/dev/null
seq 0 9 | sed 's/^/class/' >"$work/lbl/labels.txt"
mkdir -p "$work/lbl_there"
for td in "$work/lbl_made/run" "$work/lbl_there"; do
  run lbl train "${common[@]}" --data "$work/lbl/train-*.tfrecord" --train_dir "$td" --max_steps 5
  if [ $rc -eq 1 ] && one_line "$work/lbl.err" && grep -q "record 5 at offset $((5 * record)).*no step ran, nothing saved" \
       "$work/lbl.err" && [ ! -e "$td/labels.txt" ] && [ ! -e "$work/lbl_made" ] && [ -d "$work/lbl_there" ]; then
    ok "a bad record before the first step: $(cat "$work/lbl.err"); no labels.txt left in $(basename "$td")"
  else bad "a bad record before the first step: status $rc: $(head -c 400 "$work/lbl.err"); $(ls -aR "$work/lbl_made" "$td" 2>&1 | tr '\n' ' ')"; fi
done

# A second stop signal ends a step too long to wait for (--accum_steps 200000 of one example) at once: one line,
# 128 + the signal, no checkpoint of the step in flight (the first signal alone waited for the step's end).
"$tower" train "${common[@]}" --train_dir "$work/twice" --batch_size 1 --accum_steps 200000 --max_steps 2 \
  >"$work/twice.out" 2>"$work/twice.err" &
bgpid=$!
for _ in $(seq 1 300); do [ -e "$work/twice/.lock" ] && break; sleep 0.1; done
sleep 1
kill -INT "$bgpid" 2>/dev/null || true
sleep 0.5
kill -TERM "$bgpid" 2>/dev/null || true
set +e; wait "$bgpid"; rc=$?; set -e
bgpid=""
if [ $rc -eq 143 ] && grep -q "^tower train: a second stop signal: ending now, without saving the step in flight" "$work/twice.err" &&
   ! ls "$work/twice"/model.ckpt-* >/dev/null 2>&1; then ok "a second signal: $(cat "$work/twice.err")"
else bad "a second signal: exit status $rc (expected 143): $(cat "$work/twice.err")"; fi

# 12. SIGHUP (the terminal closed, the ssh session dropped) stops as SIGTERM does: checkpoint, 129.  The process
# keeps its name (the OpenMP re-exec of /proc/self/exe named it "exe"), so pkill/pgrep -x tower find it.
"$tower" train "${common[@]}" --train_dir "$work/hup" --max_steps 100000 --save_every 100000 >"$work/hup.out" 2>&1 &
bgpid=$!
for _ in $(seq 1 300); do grep -q "step 2," "$work/hup.out" 2>/dev/null && break; sleep 0.1; done
comm=$(cat "/proc/$bgpid/comm" 2>/dev/null || true)
kill -HUP "$bgpid" 2>/dev/null || true
set +e; wait "$bgpid"; rc=$?; set -e
bgpid=""
if [ $rc -eq 129 ] && ls "$work/hup"/model.ckpt-* >/dev/null 2>&1 &&
   grep -q "stop requested by SIGHUP after step [0-9]*: checkpoint, then exit status 129" "$work/hup.out" &&
   grep -q "stopped at step [0-9]*; checkpoint in" "$work/hup.out"; then ok "SIGHUP: checkpoint written, exit status 129"
else bad "SIGHUP: exit status $rc (expected 129): $(tail -2 "$work/hup.out")"; fi
if [ "$comm" = "$(basename "$tower" | cut -c1-15)" ]; then ok "the running process is named $comm"
else bad "the running process is named '$comm', not $(basename "$tower")"; fi

# 13. The log's pipe closed (`| head`): SIGPIPE killed the run without a checkpoint; now it stops after the step,
# saves, says so on stderr (one line) and exits 1.
set +e
"$tower" train "${common[@]}" --train_dir "$work/pipe" --max_steps 100000 --save_every 100000 2>"$work/pipe.err" |
  head -2 >/dev/null
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -eq 1 ] && one_line "$work/pipe.err" &&
   grep -Eq "^tower train: writing standard output: .*: stopping after step [0-9]+: checkpoint, then exit status 1$" "$work/pipe.err" &&
   ls "$work/pipe"/model.ckpt-* >/dev/null 2>&1; then ok "a closed pipe: $(cat "$work/pipe.err")"
else bad "a closed pipe: exit status $rc (expected 1): $(head -c 400 "$work/pipe.err"); $(ls "$work/pipe" 2>&1 | tr '\n' ' ')"; fi

# 14. A signal after the last step (during the final save or the close) leaves a finished run finished: exit 0,
# "done" (it exited 143, as if stopped early).  The signal must reach the process alive after its step-60 line;
# where the run had already ended (a zombie) when kill came, the case runs again, up to 5 times.
delivered=0
for try in 1 2 3 4 5; do
  rm -rf "$work/late"
  "$tower" train "${common[@]}" --train_dir "$work/late" --max_steps 60 --save_every 0 --log_every 60 \
    >"$work/late.out" 2>&1 &
  bgpid=$!
  for _ in $(seq 1 30000); do grep -q "step 60," "$work/late.out" 2>/dev/null && break; sleep 0.002; done
  state=$(sed 's/.*) //' "/proc/$bgpid/stat" 2>/dev/null | cut -c1) # R, S, D...; Z once it has exited
  if [ -n "$state" ] && [ "$state" != Z ] && kill -TERM "$bgpid" 2>/dev/null; then delivered=1; fi
  set +e; wait "$bgpid"; rc=$?; set -e
  bgpid=""
  [ $delivered -eq 0 ] || break
done
if [ $delivered -eq 0 ]; then bad "SIGTERM after the last step: the run had ended before kill in 5 tries"
elif [ $rc -eq 0 ] && grep -q "done at step 60; checkpoint in" "$work/late.out" &&
   ! grep -q "stop requested" "$work/late.out"; then ok "SIGTERM after the last step (try $try): exit 0, done at step 60"
else bad "SIGTERM after the last step: exit status $rc (expected 0): $(tail -2 "$work/late.out")"; fi

# 15. The last line names --train_dir escaped, as every other line does.
esc_dir="$work/esc"$'\e'"[2Jx"
run esc train "${common[@]}" --train_dir "$esc_dir" --max_steps 1
if [ $rc -eq 0 ] && grep -qF 'checkpoint in '"$work"'/esc\x1b[2Jx;' "$work/esc.out" && ! grep -q $'\e' "$work/esc.out"; then
  ok "the done line escapes --train_dir"
else bad "--train_dir with an ESC byte: status $rc: $(tail -1 "$work/esc.out" | cat -v)"; fi

# 16. A SIGHUP the run inherited ignored (nohup) stays ignored: the run goes on (it stopped, exit 129), and
# SIGTERM then stops it as usual.
nohup "$tower" train "${common[@]}" --train_dir "$work/nohup" --max_steps 100000 --save_every 100000 \
  >"$work/nohup.out" 2>"$work/nohup.err" &
bgpid=$!
for _ in $(seq 1 300); do grep -q "step 2," "$work/nohup.out" 2>/dev/null && break; sleep 0.1; done
kill -HUP "$bgpid" 2>/dev/null || true
sleep 1
alive=0; kill -0 "$bgpid" 2>/dev/null && alive=1
kill -TERM "$bgpid" 2>/dev/null || true
set +e; wait "$bgpid"; rc=$?; set -e
bgpid=""
if [ $alive -eq 1 ] && [ $rc -eq 143 ] && ! grep -q "SIGHUP" "$work/nohup.out" &&
   grep -q "stop requested by SIGTERM" "$work/nohup.out"; then ok "nohup: SIGHUP ignored, SIGTERM stops (143)"
else bad "nohup: alive after SIGHUP $alive, exit status $rc: $(grep -h 'stop requested' "$work/nohup.out" | head -2)"; fi

# 17. SIGTERM while the log's write is blocked (a reader that does not read: a FIFO held open, never read): the
# stop is the signal's, at once (the write ends, EINTR), checkpoint, exit 143, one line saying the unwritten lines
# are dropped (it said "writing standard output: Interrupted system call ... exit status 1" and stayed blocked).
mkfifo "$work/blocked.fifo"
exec 7<>"$work/blocked.fifo" # a reader that never reads
"$tower" train "${common[@]}" --train_dir "$work/blocked" --max_steps 1000000 --save_every 1000000 --batch_size 2 \
  --no_progress >"$work/blocked.fifo" 2>"$work/blocked.err" &
bgpid=$!
blocked=0
waits=300 # 30 s to fill the pipe's 64 KiB with log lines; a sanitizer's build steps 5-20 times slower: 120 s
"$tower" --version | grep -q "sanitizer: none" || waits=1200
for _ in $(seq 1 $waits); do
  case $(cat "/proc/$bgpid/wchan" 2>/dev/null) in *pipe_write*|*pipe_wait*) blocked=1; break ;; esac
  sleep 0.1
done
kill -TERM "$bgpid" 2>/dev/null || true
for _ in $(seq 1 100); do kill -0 "$bgpid" 2>/dev/null || break; sleep 0.1; done
ended=1; kill -0 "$bgpid" 2>/dev/null && ended=0
exec 7<&- # the stuck reader goes: a run still blocked ends now
set +e; wait "$bgpid"; rc=$?; set -e
bgpid=""
if [ $blocked -eq 0 ]; then bad "blocked stdout: the run never blocked on its pipe in $((waits / 10)) s"
elif [ $ended -eq 1 ] && [ $rc -eq 143 ] && one_line "$work/blocked.err" &&
   grep -Eq "^tower train: standard output blocked \(its reader does not read\) when SIGTERM arrived: stopping after step [0-9]+: checkpoint, then exit status 143; the log lines not yet written are dropped$" "$work/blocked.err" &&
   ls "$work/blocked"/model.ckpt-* >/dev/null 2>&1; then ok "SIGTERM with stdout blocked: $(cat "$work/blocked.err")"
else bad "SIGTERM with stdout blocked: ended in 10 s $ended, exit status $rc: $(head -c 400 "$work/blocked.err")"; fi

[ $failures -eq 0 ] || fail "$failures case(s) failed"
echo "all cases passed"
