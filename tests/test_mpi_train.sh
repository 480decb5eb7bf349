#!/usr/bin/env bash
# test_mpi_train.sh TOWER — `mpirun -np R tower train --variable_update
# replicated` (train/mode_replicated_mpi.c) on Fashion-MNIST over loopback:
#   - R ranks of T CPU towers write, after 4 steps, a checkpoint byte for
#     byte equal to one process of R x T towers (parameter_server/cpu, the
#     default) with the same per-tower batch and seed: variables, momentum
#     slots, moving averages, global_step and the run state; for R x T =
#     1 x 2, 2 x 1, 2 x 2 and 4 x 1 with momentum, 2 x 1 and 4 x 1 with sgd;
#   - 2 ranks x 2 towers with --shard_sizes 3,1 --accum_steps 2 --loss_scaling
#     global_batch: bitwise one process of 4 towers with shards 3,1,3,1;
#   - the comparison can fail: 2 ranks with another seed differ;
#   - 2 steps, a checkpoint, then --resume to 4 under mpirun give that
#     same checkpoint; only rank 0 logs (one "done" line);
#   - SIGINT to mpirun: the ranks stop after the same step and rank 0
#     writes that step's checkpoint;
#   - a one-process mode (--all_reduce host) under mpirun -np 2 is refused
#     with one line;
#   - the default --variable_update parameter_server under mpirun -np 2 runs
#     sharded across the ranks (ps_mpi, tests/test_mpi_ps.sh for the rest):
#     4 steps with --save_every 2 (every rank joins each save;
#     --checkpoint_writers rank0: one file) give one process's checkpoint of
#     2 towers (the shard files of the default: tests/test_mpi_ps.sh), and SIGINT stops it with a checkpoint;
#     a corrupt record mid-run ends it non-zero, rank 0 saying the step's
#     shards were not saved and naming the latest checkpoint, which exists;
#   - ranks given another flag (--max_steps) are refused with one line naming
#     the rank and both values (a hang before), a refusal every rank makes is
#     said once;
#   - --input_split none where rank 1's copy of --data is shorter: the job
#     ends when its input does, with a warning (rank 0 waited for ever);
#   - a bad flag value, --help, an extra argument or another optimizer's
#     flag on rank 1 alone (named "rank 1 of 2"), a bad value on every rank,
#     a train_dir that is a file on rank 1's host, images of another shape on
#     rank 1's host, a labels.txt of other classes on rank 1's host, a placement mode's
#     refusal (--ps_ranks 5 of 2), a refusal of trainer_open on every rank (--data missing), on rank 1
#     alone (its host lacks the data) or on rank 0 after the mode's open (the
#     class list against the train_dir's): every rank ends with one line and
#     no MPI_Abort;
#   - kill -9 of rank 1 mid-run: mpirun exits non-zero within 10 s with a
#     line naming rank 1, and no process of the job is left.
# Skips (77) without mpirun, without MPI in the build, or without the data.
source "$(dirname "$0")/train_common.sh"
source "$(dirname "$0")/mpi_common.sh"
echo "a one-process mode under mpirun -np 2: $(echo "$probe" | grep -m1 'runs in one process')"
convert_fashion_mnist
common=(--model mnist --data "$work/train-*.tfrecord" --batch_size 4 --seed 7 --log_every 1 --save_every 1000
        --min_after_dequeue 200 --device cpu --no_progress --summary_every 0 --histogram_every 0)
t0=$(date +%s)
ref() { # ref N OPT: one process, N towers, 4 steps
  [ -f "$work/ref-$1-$2/model.ckpt-4" ] ||
    "$tower" train "${common[@]}" --optimizer "$2" --num_towers "$1" --max_steps 4 --train_dir "$work/ref-$1-$2" >/dev/null
}
job() { # job R T OPT DIR [flags...]: R ranks of T towers
  local r=$1 t=$2 opt=$3 dir=$4
  shift 4
  "${mpi[@]}" -np "$r" "$tower" train "${common[@]}" --variable_update replicated --optimizer "$opt" \
    --num_towers "$t" --train_dir "$dir" "$@"
}
for case in "1 2 momentum" "2 1 momentum" "2 2 momentum" "4 1 momentum" "2 1 sgd" "4 1 sgd"; do
  set -- $case
  n=$(( $1 * $2 ))
  ref "$n" "$3"
  s=$(date +%s.%N)
  job "$1" "$2" "$3" "$work/job-$1x$2-$3" --max_steps 4 >"$work/job.log" 2>&1 || { cat "$work/job.log"; fail "$1 x $2 $3 failed"; }
  cmp "$work/ref-$n-$3/model.ckpt-4" "$work/job-$1x$2-$3/model.ckpt-4" ||
    fail "$1 rank(s) x $2 tower(s), $3: the checkpoint after 4 steps differs from one process of $n towers"
  echo "$1 rank(s) x $2 tower(s), $3, 4 steps: checkpoint bitwise one process of $n towers ($(printf '%.1f' "$(echo "$(date +%s.%N) - $s" | bc)") s)"
  [ "$(grep -c ': done at step 4' "$work/job.log")" = 1 ] || fail "$1 x $2: expected one 'done' line (rank 0 alone logs)"
done
# --accum_steps and --loss_scaling global_batch across ranks: each tower's weight counts the job's towers and batch.
acc=(--shard_sizes 3,1 --accum_steps 2 --loss_scaling global_batch --max_steps 4)
"$tower" train "${common[@]}" --num_towers 4 --train_dir "$work/ref-acc" "${acc[@]/3,1/3,1,3,1}" >/dev/null ||
  fail "one process of 4 towers, --accum_steps 2 --loss_scaling global_batch failed"
job 2 2 momentum "$work/job-acc" "${acc[@]}" >"$work/job.log" 2>&1 || { cat "$work/job.log"; fail "2 x 2 --accum_steps failed"; }
cmp "$work/ref-acc/model.ckpt-4" "$work/job-acc/model.ckpt-4" ||
  fail "2 ranks x 2 towers (shards 3,1, 2 micro-batches, global_batch): the checkpoint differs from one process of 4"
echo "2 rank(s) x 2 tower(s), shards 3,1, --accum_steps 2, --loss_scaling global_batch: checkpoint bitwise one process of 4 towers"
"${mpi[@]}" -np 2 "$tower" train "${common[@]}" --num_towers 1 --max_steps 4 --save_every 2 --log_device_placement \
  --checkpoint_writers rank0 --train_dir "$work/ps-2x1" >"$work/ps.log" 2>&1 || { cat "$work/ps.log"; fail "parameter_server under mpirun -np 2 failed"; }
grep -q "mode ps_mpi: variables in shards on 2 parameter-server rank(s)" "$work/ps.log" ||
  { cat "$work/ps.log"; fail "parameter_server under mpirun -np 2 did not run as ps_mpi"; }
[ -f "$work/ps-2x1/model.ckpt-2" ] || fail "ps_mpi: no checkpoint at step 2 (--save_every 2)"
cmp "$work/ref-2-momentum/model.ckpt-4" "$work/ps-2x1/model.ckpt-4" ||
  fail "parameter_server, 2 ranks x 1 tower: the checkpoint after 4 steps differs from one process of 2 towers"
echo "parameter_server under mpirun -np 2 (ps_mpi, --save_every 2, --checkpoint_writers rank0): checkpoint bitwise one process of 2 towers"

mkdir -p "$work/bad"
cp "$work"/train-*.tfrecord "$work/bad/"
for bad in "$work"/bad/train-*.tfrecord; do # every file: whichever the shuffled stream opens first
  printf '\xff\xff\xff\xff' | dd of="$bad" bs=1 seek=$(( $(stat -c %s "$bad") / 100 )) conv=notrunc 2>/dev/null
done
rc=0
timeout 120 "${mpi[@]}" -np 2 "$tower" train "${common[@]}" --data "$work/bad/train-*.tfrecord" --num_towers 1 \
  --max_steps 100000 --save_every 2 --log_every 0 --train_dir "$work/ps-bad" >"$work/bad.log" 2>&1 || rc=$?
[ "$rc" != 0 ] && [ "$rc" != 124 ] || { cat "$work/bad.log"; fail "ps_mpi, a corrupt record: exit $rc (want non-zero, no hang)"; }
kept=$(sed -n 's/.*shards live on every rank, not saved: the latest checkpoint stays \(.*\)$/\1/p' "$work/bad.log")
[ -n "$kept" ] && { [ -f "$kept" ] || [ -f "$kept.shards" ]; } || { cat "$work/bad.log"; fail "ps_mpi, a corrupt record: rank 0 did not name an existing latest checkpoint"; }
echo "ps_mpi, a corrupt record mid-run: exit $rc, rank 0 kept $(basename "$kept") (the shards are not saved by rank 0 alone)"

job 2 1 momentum "$work/other-seed" --max_steps 4 --seed 8 >/dev/null 2>&1 || fail "2 ranks, seed 8 failed"
if cmp -s "$work/ref-2-momentum/model.ckpt-4" "$work/other-seed/model.ckpt-4"; then fail "seed 8 gave seed 7's checkpoint"; fi
echo "2 ranks with seed 8 differ from seed 7 (the comparison can fail)"

job 2 1 momentum "$work/resumed" --max_steps 2 >/dev/null 2>&1 || fail "2 ranks, 2 steps failed"
job 2 1 momentum "$work/resumed" --max_steps 4 --resume >"$work/resume.log" 2>&1 || { cat "$work/resume.log"; fail "--resume failed"; }
grep -q "resumed from .*model.ckpt-2 at step 2" "$work/resume.log" || fail "the resumed job did not say it resumed from step 2"
cmp "$work/ref-2-momentum/model.ckpt-4" "$work/resumed/model.ckpt-4" ||
  fail "2 ranks: 2 steps + --resume to 4 differ from one process of 2 towers"
echo "2 ranks: 2 steps, checkpoint, --resume to 4: bitwise one process of 2 towers"

# SIGINT to mpirun reaches every rank: all stop after the same step, rank 0 saves it.  mpirun forwards it
# as SIGTERM and SIGKILLs the ranks odls_base_sigkill_timeout seconds later (Open MPI's default: 1), which a
# loaded machine's final checkpoint (ps_mpi: every owner's shard, then the index) can outlast: docs/hosts.md.
# mpirun also waits that long before the SIGTERM and again before it returns: 20 s, not 60, keeps each case
# to about 40 s (60 made the test 270 s long).
for vu in replicated parameter_server; do
  OMPI_MCA_odls_base_sigkill_timeout=20 "${mpi[@]}" -np 2 "$tower" train "${common[@]}" --variable_update $vu --max_steps 100000 --log_every 0 \
    --train_dir "$work/stopped-$vu" >"$work/stop.log" 2>&1 &
  launcher=$!
  sleep 6
  kill -INT "$launcher"
  wait "$launcher" || true
  stopped=$(sed -n 's/.*stop requested by [A-Za-z ]* after step \([0-9]*\):.*/\1/p' "$work/stop.log")
  [ -n "$stopped" ] || { cat "$work/stop.log"; fail "$vu: SIGINT: no 'stop requested' line"; }
  [ -f "$work/stopped-$vu/model.ckpt-$stopped" ] || [ -f "$work/stopped-$vu/model.ckpt-$stopped.shards" ] || { cat "$work/stop.log"; fail "$vu: SIGINT: no checkpoint of step $stopped"; }
  grep -q "stopped at step $stopped;" "$work/stop.log" || fail "$vu: SIGINT: rank 0 did not finish at step $stopped"
  echo "$vu: SIGINT to mpirun: every rank stopped after step $stopped, rank 0 saved model.ckpt-$stopped"
done

# Ranks given other flags: one line from the rank that differs, every rank exits 2 (rank 1 with --max_steps 8
# waited for ever after rank 0's 4 steps; another --model corrupted the heap in the first broadcast).
cat >"$work/rank_flags.sh" <<'SH'
#!/usr/bin/env bash
# rank_flags.sh TOWER RANK0_FLAG RANK1_FLAG ARGS...: tower train ARGS plus this rank's flag
tower=$1 a=$2 b=$3
shift 3
if [ "${OMPI_COMM_WORLD_RANK:-0}" = 0 ]; then exec "$tower" train "$@" $a; else exec "$tower" train "$@" $b; fi
SH
set +e
timeout 120 "${mpi[@]}" -np 2 bash "$work/rank_flags.sh" "$tower" "--max_steps 4" "--max_steps 8" "${common[@]}" \
  --variable_update replicated --train_dir "$work/flags" >/dev/null 2>"$work/flags.err"
rc=$?
set -e
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$work/flags.err"; fail "ranks with other --max_steps: exit $rc"; }
[ "$(grep -c '^tower train' "$work/flags.err")" = 1 ] &&
  grep -q "^tower train: rank 1 of 2 was given --max_steps 8 but rank 0 --max_steps 4: every rank of the job needs the same flags (docs/hosts.md)$" "$work/flags.err" ||
  { cat "$work/flags.err"; fail "ranks with other --max_steps: not the one line"; }
echo "ranks given other flags: $(grep '^tower train' "$work/flags.err")"
# The same refused flags on every rank: one line (rank 0's), not one a rank.
set +e
timeout 120 "${mpi[@]}" -np 2 "$tower" train "${common[@]}" --optimizer sgd --nesterov --train_dir "$work/flags2" >/dev/null \
  2>"$work/flags2.err"
rc=$?
set -e
[ "$rc" -eq 2 ] && [ "$(grep -c '^tower train' "$work/flags2.err")" = 1 ] ||
  { cat "$work/flags2.err"; fail "a refusal every rank makes: exit $rc, not one line"; }
echo "a refusal every rank makes: one line"

# --input_split none with hosts whose copies of --data differ (the same relative paths, rank 1's shorter): the
# job ends when rank 1's input does, with a warning, not rank 0 waiting for it for ever.
for r in 0 1; do mkdir -p "$work/host$r"; done
first="$(ls "$work"/train-*.tfrecord | head -1)"
for k in 0 1; do head -c $((100 * 891)) "$first" >"$work/host0/a-$k.tfrecord"; cp "$work/host0/a-$k.tfrecord" "$work/host1/"; done
head -c $((50 * 891)) "$first" >"$work/host0/a-2.tfrecord"
cat >"$work/host_dir.sh" <<'SH'
#!/usr/bin/env bash
# host_dir.sh WORK TOWER ARGS...: tower train ARGS in WORK/host<rank> (each "host" its own copy of the data)
cd "$1/host${OMPI_COMM_WORLD_RANK:-0}" && shift && exec "$@"
SH
set +e
timeout 120 "${mpi[@]}" -np 2 bash "$work/host_dir.sh" "$work" "$tower" train "${common[@]}" --data 'a-*.tfrecord' \
  --batch_size 10 --num_towers 1 --num_epochs 1 --min_after_dequeue 0 --max_steps 100 --variable_update replicated \
  --train_dir "$work/short" >"$work/short.out" 2>"$work/short.err"
rc=$?
set -e
[ "$rc" -eq 0 ] && grep -q "done at step 10;" "$work/short.out" &&
  grep -q "^warning: rank 1's input ended before the others' (--input_split none: every rank reads the same stream, so the hosts' copies of --data differ); the job ends here$" "$work/short.err" ||
  { cat "$work/short.out" "$work/short.err"; fail "a rank whose input ends first: exit $rc"; }
echo "--input_split none, rank 1's copy of --data shorter: the job ended at step 10 with a warning"

# trainer_open's refusals: the ranks agree before the mode's open and after the input's, so a refusal ends every
# rank together with one line, not one a rank followed by MPI_Abort's banner ("rank 1 of 2 ends the job").
refused_once() { # refused_once NAME 'LINE (grep -E)' MPIRUN-ARGS...: exit non-zero, that one line, no MPI_Abort
  local name=$1 line=$2
  shift 2
  set +e
  timeout 120 "${mpi[@]}" -np 2 "$@" >"$work/$name.out" 2>"$work/$name.err"
  local rc=$?
  set -e
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$(grep -c '^tower train' "$work/$name.err")" = 1 ] &&
    grep -Eq "^tower train: $line\$" "$work/$name.err" && ! grep -q "MPI_ABORT\|ends the job" "$work/$name.err" ||
    { cat "$work/$name.err"; fail "$name: exit $rc, not the one line"; }
  echo "$name: $(grep '^tower train' "$work/$name.err")"
}
refused_once open_all "--data: pattern '.*/none-.*' matches no files" \
  "$tower" train "${common[@]}" --data "$work/none-*.tfrecord" --train_dir "$work/open_all"
refused_once parse_all "--max_staleness -1: expected an integer in .*" \
  "$tower" train "${common[@]}" --sync_replicas false --max_staleness -1 --train_dir "$work/parse_all"
refused_once parse_rank1 "rank 1 of 2: --max_steps -3: expected an integer >= 0" \
  bash "$work/rank_flags.sh" "$tower" "--max_steps 4" "--max_steps=-3" "${common[@]}" --train_dir "$work/parse_rank1"
refused_once help_rank1 "rank 1 of 2: --help was given to this rank but not to rank 0: every rank of the job needs the same flags \\(docs/hosts.md\\)" \
  bash "$work/rank_flags.sh" "$tower" "--max_steps 4" "--max_steps 4 --help" "${common[@]}" --train_dir "$work/help_rank1"
refused_once args_rank1 "rank 1 of 2: unexpected argument 'extra_arg' \\(see --help\\)" \
  bash "$work/rank_flags.sh" "$tower" "--max_steps 4" "--max_steps 4 extra_arg" "${common[@]}" --train_dir "$work/args_rank1"
refused_once given_rank1 "rank 1 of 2: --width_multiplier applies to --model mobilenet_v2 \\(this run: --model mnist\\)" \
  bash "$work/rank_flags.sh" "$tower" "--max_steps 4" "--max_steps 4 --width_multiplier 1" "${common[@]}" \
  --train_dir "$work/given_rank1"
refused_once mode_check "--ps_ranks 5: expected 1 to 2 \\(the ranks of this job\\), or 0 for every rank" \
  "$tower" train "${common[@]}" --ps_ranks 5 --train_dir "$work/mode_check"
mkdir -p "$work/miss/host0" "$work/miss/host1"
cp "$work/host0"/a-*.tfrecord "$work/miss/host0/"
refused_once open_rank1 "rank 1 of 2: --data: pattern 'a-.*' matches no files" \
  bash "$work/host_dir.sh" "$work/miss" "$tower" train "${common[@]}" --data 'a-*.tfrecord' --variable_update replicated \
  --train_dir "$work/open_rank1"
mkdir -p "$work/tdfile/host0" "$work/tdfile/host1"
touch "$work/tdfile/host1/td" # rank 1's host has a file where the train_dir should be: its shards would fail at the end
refused_once dir_rank1 "rank 1 of 2: --train_dir td is not a directory" \
  bash "$work/host_dir.sh" "$work/tdfile" "$tower" train "${common[@]}" --train_dir td
# Each "host" its own train_dir of one name: ps_mpi's owners write their shards there, and rank 0 found rank 1's
# missing only at the first checkpoint (MPI_Abort, shards left behind); now refused before the first step, nothing
# left in either directory.  With --checkpoint_writers rank0 (rank 0 writes alone) the same job runs.
mkdir -p "$work/tdown/host0" "$work/tdown/host1"
refused_once td_rank1 "rank 1 of 2: --train_dir td here is not rank 0's \\(the file \\.rank0-probe-[0-9]+-[0-9a-f]+ rank 0 just made in its train_dir is not in this one\\): each parameter-server rank writes its shard of every checkpoint there .*, pass --checkpoint_writers rank0" \
  bash "$work/host_dir.sh" "$work/tdown" "$tower" train "${common[@]}" --train_dir td
[ -z "$(find "$work/tdown/host0/td" "$work/tdown/host1/td" -mindepth 1)" ] ||
  { find "$work/tdown"; fail "td_rank1: the refused job left files in a train_dir"; }
set +e
timeout 120 "${mpi[@]}" -np 2 bash "$work/host_dir.sh" "$work/tdown" "$tower" train "${common[@]}" --train_dir td \
  --checkpoint_writers rank0 --max_steps 2 >"$work/tdown.out" 2>"$work/tdown.err"
rc=$?
set -e
[ "$rc" -eq 0 ] && [ -f "$work/tdown/host0/td/model.ckpt-2" ] && [ -z "$(ls -A "$work/tdown/host1/td")" ] ||
  { cat "$work/tdown.err"; fail "per-host train_dirs with --checkpoint_writers rank0: exit $rc"; }
echo "per-host train_dirs with --checkpoint_writers rank0: rank 0 wrote model.ckpt-2 alone"
# Rank 1's copy of --data holds 8x8 images (rank 0's 28x28): its model would be another size (the first broadcast
# crashed); refused with both shapes named.
mkdir -p "$work/shape/host0" "$work/shape/host1"
cp "$work/host0/a-0.tfrecord" "$work/shape/host0/x-0.tfrecord"
{ printf '\x00\x00\x08\x03\x00\x00\x00\x14\x00\x00\x00\x08\x00\x00\x00\x08'; head -c 1280 /dev/urandom; } >"$work/shape/i8"
{ printf '\x00\x00\x08\x01\x00\x00\x00\x14'; for i in $(seq 0 19); do printf "\\x0$((i % 10))"; done; } >"$work/shape/l8"
"$tower" convert --from idx --images "$work/shape/i8" --labels "$work/shape/l8" --out "$work/shape/host1/x" \
  --num_classes 10 >/dev/null
mv "$work/shape/host1/x-00000-of-00001.tfrecord" "$work/shape/host1/x-0.tfrecord"
refused_once shape_rank1 "rank 1 of 2: this rank's model takes 8x8x1 images \\([0-9]+ variables\\) but rank 0's 28x28x1 \\([0-9]+\\): every rank's --data must hold images of one shape" \
  bash "$work/host_dir.sh" "$work/shape" "$tower" train "${common[@]}" --data 'x-*.tfrecord' --variable_update replicated \
  --train_dir "$work/shape_run"
# Rank 1's copy of --data lists other classes in its labels.txt: rank 0 alone checks the list against the
# train_dir's, so rank 1's label numbers would have named other classes, without a word.
mkdir -p "$work/cl/host0" "$work/cl/host1"
for r in 0 1; do
  ln -s "$work/host0/a-0.tfrecord" "$work/cl/host$r/x-0.tfrecord"
  seq 0 9 | sed "s/^/c$r/;s/^c0/c/;s/^c1\([0-8]\)$/c\1/" >"$work/cl/host$r/labels.txt" # host1: line 10 differs
done
refused_once classes_rank1 "rank 1 of 2: this rank's class list \\(labels.txt\\) differs from rank 0's: a label number would name another class on each host" \
  bash "$work/host_dir.sh" "$work/cl" "$tower" train "${common[@]}" --data 'x-*.tfrecord' --train_dir "$work/cl_run"
[ ! -e "$work/cl_run/labels.txt" ] ||
  fail "the refused job recorded rank 0's class list in the train_dir"
mkdir -p "$work/lab" "$work/open_data"
for f in "$work"/train-*.tfrecord; do ln -s "$f" "$work/lab/"; done
seq 0 9 | sed 's/^/class/' >"$work/lab/labels.txt"
seq 0 9 | sed 's/^/other/' >"$work/open_data/labels.txt"
# trained with that list: a checkpoint beside it (a labels.txt beside none is a killed start-up's, replaced)
cp "$work/tdown/host0/td/checkpoint" "$work"/tdown/host0/td/model.ckpt-* "$work/open_data/"
refused_once open_data "the data's class list differs from the one this train_dir was trained with: .*" \
  "$tower" train "${common[@]}" --data "$work/lab/train-*.tfrecord" --train_dir "$work/open_data" --resume

# --batch_norm sync on a network without batch norm beside --ps_dedicated's server rank: nothing to sum (the
# workers waited in the sums' protocol for the server, which runs no towers, for ever).
set +e
timeout 120 "${mpi[@]}" -np 3 "$tower" train "${common[@]}" --max_steps 2 --ps_dedicated --ps_ranks 1 \
  --batch_norm sync --train_dir "$work/bn_ded" >"$work/bn_ded.out" 2>"$work/bn_ded.err"
rc=$?
set -e
[ "$rc" -eq 0 ] && grep -q "done at step 2;" "$work/bn_ded.out" ||
  { cat "$work/bn_ded.err"; fail "--ps_dedicated --batch_norm sync on mnist: exit $rc"; }
echo "--ps_dedicated --batch_norm sync on a network without batch norm: done at step 2"

# kill -9 of rank 1: the job ends, non-zero, within 10 s, naming the rank.
"${mpi[@]}" -np 2 "$tower" train "${common[@]}" --variable_update replicated --max_steps 100000 --log_every 0 \
  --train_dir "$work/killed" >"$work/kill.log" 2>&1 &
launcher=$!
mpi_kill_rank 1 3 # 3 s into the steps
rc=$killed_rc took=$killed_took
grep -q "rank 1 .*signal 9" "$work/kill.log" || { cat "$work/kill.log"; fail "no line names rank 1 and its signal"; }
echo "kill -9 of rank 1: the job ended with exit $rc after $(printf '%.1f' "$took") s: $(grep -m1 'rank 1' "$work/kill.log" | sed 's/^ *//')"
echo "mpi training equals one process ($(( $(date +%s) - t0 )) s)"
