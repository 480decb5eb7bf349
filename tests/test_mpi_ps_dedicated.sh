#!/usr/bin/env bash
# test_mpi_ps_dedicated.sh HELPER TOWER — --ps_dedicated (train/mode_ps_mpi.c): the first --ps_ranks N ranks
# of mpirun -np R are parameter servers only (no towers, no input), the other R - N the workers, over loopback.
# Through tests/test_mpi_ps_helper on synthetic data, 3 steps of batch 4 a tower:
#   - 1 server + 2 workers x 1 tower (3 ranks), 2 servers + 2 workers x 1 (4 ranks) and 1 server + 3 workers x 1
#     save a checkpoint (variables, slots, moving averages, global_step) bit for bit equal to one process of
#     W towers in ps_cpu (the owner adds the W workers' gradients in worker order: ps_average_grads' order),
#     mnist and cifar10, momentum and adam;
#   - 2 servers + 2 workers x 2 towers (4 ranks; each worker sums its 2 towers first) bit for bit equal to the
#     co-located 2 ranks x 2 towers (the same order), and within 1e-5 of one process of 4 towers after one step;
#   - the comparison can fail: 1 server + 2 workers against one process of 3 towers differ beyond 1e-5;
#   - checkpoint + --resume (2 steps, then to 4) bitwise the straight run of 2 towers: dedicated to dedicated,
#     dedicated (2 shard files) to co-located 2 ranks, co-located to dedicated, dedicated to one process, and
#     from rank 0's single file (--checkpoint_writers rank0);
#   - each rank's own memory (helper memory-dedicated, adam): a server-only rank has no towers, no input and no
#     tower gradients, and every rank keeps slots and moving averages for its own shard only;
# through `tower train` on 1000 mnist-shaped records in 3 TFRecord files, 6 steps of batch 8:
#   - 1 server + 1 worker of cifar10 bitwise one process of 1 tower (the server-only rank is not counted among
#     the host's ranks that share its cores: the worker's tower gets a lone process's threads);
#   - 1 server + 2 workers bitwise the co-located 2 ranks with --input_split none, files and records (the
#     workers read what ranks 0 and 1 read: the split goes by the worker index, not the rank), and rank 0 (the
#     server) logs the same losses; the log names the server-only rank and the global batch of the workers,
#     and rank 0's done line says it has no input pipeline;
#   - refused, one line each: --ps_ranks N >= R (no worker left), --ps_dedicated without --ps_ranks, in one
#     process, with --variable_update replicated, with --batch_norm sync (--sync_replicas false now runs:
#     tests/test_mpi_async_dedicated.sh);
#   - resnet20 (batch norm, --batch_norm tower): 1 server + 2 workers and 2 + 2 (x 1 tower) bitwise one process
#     of 2 towers, 2 + 2 x 2 towers bitwise the co-located 2 ranks x 2 (moving statistics included);
#   - kill -9 of the server-only rank 0 ends the job, non-zero, within 10 s.
# Skips (77) without mpirun or without MPI in the build.
set -euo pipefail
helper=$1 tower=$2 fault=$3
mpi_timeout=300
source "$(dirname "$0")/mpi_common.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
same() { "$helper" compare "$1" "$2" 0 >/dev/null; } # every variable, slot, moving average and the step, bit for bit
probe=$("${mpi[@]}" -np 2 "$helper" train mnist sgd 1 0 "$work" ps_mpi 2>&1) && rc=0 || rc=$?
[ "$rc" != 77 ] || { echo "skipped: this build has no MPI"; exit 77; }
[ "$rc" = 0 ] || { echo "skipped: mpirun cannot start 2 ranks here: $probe" | head -5; exit 77; }
t0=$(date +%s)
run() { # run R T MODEL OPT STEPS DIR N_SERVERS [RESUME]: R = 0: one process in ps_cpu; N_SERVERS 0: co-located
  local r=$1 t=$2 model=$3 opt=$4 steps=$5 dir=$6 n=$7 resume=${8:-0} ded=0
  [ "$n" = 0 ] || ded=1
  mkdir -p "$dir"
  if [ "$r" = 0 ]; then "$helper" train "$model" "$opt" "$t" "$steps" "$dir" ps_cpu 0 greedy "$resume"
  else TEST_MPI_PS_DEDICATED=$ded "${mpi[@]}" -x TEST_MPI_PS_DEDICATED -np "$r" "$helper" train "$model" "$opt" "$t" \
    "$steps" "$dir" ps_mpi "$n" greedy "$resume"; fi
}
ref() { # ref N MODEL OPT STEPS: one process of N towers in ps_cpu
  local dir="$work/ref-$1-$2-$3-$4"
  [ -f "$dir/model.ckpt-$4" ] || run 0 "$1" "$2" "$3" "$4" "$dir" 0 >/dev/null 2>&1
  echo "$dir/model.ckpt-$4"
}

for model in mnist cifar10; do
  for opt in momentum adam; do
    for case in "3 1" "4 2" "4 1"; do # R N_SERVERS, 1 tower a worker
      set -- $case
      w=$(( $1 - $2 ))
      dir="$work/job-$model-$opt-$1-$2"
      run "$1" 1 "$model" "$opt" 3 "$dir" "$2" >"$work/job.log" 2>&1 || { cat "$work/job.log"; fail "$model $opt: $2 server(s) + $w workers failed"; }
      grep -q "mode ps_mpi, $1 rank(s) x 0 tower(s), 3 steps" "$work/job.log" ||
        { cat "$work/job.log"; fail "$model $opt: rank 0 is not a server-only rank"; }
      same "$(ref "$w" "$model" "$opt" 3)" "$dir/model.ckpt-3" ||
        fail "$model $opt: $2 server(s) + $w workers x 1 tower differ from one process of $w towers in ps_cpu"
    done
    dir="$work/job-$model-$opt-2x2"
    run 4 2 "$model" "$opt" 3 "$dir" 2 >"$work/job.log" 2>&1 || { cat "$work/job.log"; fail "$model $opt: 2 servers + 2 x 2 failed"; }
    run 2 2 "$model" "$opt" 3 "$work/colo-$model-$opt-2x2" 0 >/dev/null 2>&1 || fail "$model $opt: co-located 2 x 2 failed"
    same "$work/colo-$model-$opt-2x2/model.ckpt-3" "$dir/model.ckpt-3" ||
      fail "$model $opt: 2 servers + 2 workers x 2 towers differ from the co-located 2 ranks x 2 towers"
    # Within 1e-5 after one step (only the sum's order differs; later steps can cross a kink, test_mpi_ps.sh).
    run 4 2 "$model" "$opt" 1 "$dir-1" 2 >/dev/null 2>&1 || fail "$model $opt: 2 servers + 2 x 2, 1 step, failed"
    d=$("$helper" compare "$(ref 4 "$model" "$opt" 1)" "$dir-1/model.ckpt-1" 1e-5) ||
      fail "$model $opt: 2 servers + 2 workers x 2 towers against one process of 4 towers after a step: $d"
    echo "$model $opt: 1 server + 2 workers, 2 + 2, 1 + 3 (x 1 tower) bitwise one process of 2, 2, 3 towers;" \
      "2 servers + 2 workers x 2 towers bitwise co-located 2 x 2, within 1e-5 of 4 towers after a step ($d)"
  done
done
if d=$("$helper" compare "$(ref 3 mnist momentum 3)" "$work/job-mnist-momentum-3-1/model.ckpt-3" 1e-5); then
  fail "3 towers and 1 server + 2 workers agreed to 1e-5 ($d): the comparison cannot fail"
fi
echo "the comparison can fail: 1 server + 2 workers against 3 towers: $d"

resume_case() { # resume_case WHAT OPT "R1 T1 N1" "R2 T2 N2": 2 towers in all, 2 steps then to 4
  local what=$1 opt=$2 dir="$work/resume-$RANDOM"
  local -a first=($3) second=($4)
  run "${first[0]}" "${first[1]}" mnist "$opt" 2 "$dir" "${first[2]}" 0 >"$work/resume.log" 2>&1 ||
    { cat "$work/resume.log"; fail "resume ($what): the first 2 steps failed"; }
  run "${second[0]}" "${second[1]}" mnist "$opt" 4 "$dir" "${second[2]}" 1 >"$work/resume.log" 2>&1 ||
    { cat "$work/resume.log"; fail "resume ($what): --resume failed"; }
  grep -q "resumed from .*model.ckpt-2 at step 2" "$work/resume.log" || { cat "$work/resume.log"; fail "resume ($what): no 'resumed' line"; }
  same "$(ref 2 mnist "$opt" 4)" "$dir/model.ckpt-4" || fail "resume ($what): 2 steps + --resume to 4 differ from the straight run"
  echo "checkpoint + resume, $what: bitwise the straight run of 2 towers"
}
resume_case "1 server + 2 workers to the same, adam" adam "3 1 1" "3 1 1"
resume_case "2 servers + 2 workers (2 shard files) to co-located 2 ranks, adam" adam "4 1 2" "2 1 0"
resume_case "co-located 2 ranks to 2 servers + 2 workers, momentum" momentum "2 1 0" "4 1 2"
resume_case "1 server + 2 workers to one process of 2 towers, adam" adam "3 1 1" "0 2 0"
resume_case "one process of 2 towers to 1 server + 2 workers, momentum" momentum "0 2 0" "3 1 1"
TEST_MPI_PS_WRITERS=rank0 resume_case "2 servers + 2 workers, rank 0 writes one file (--checkpoint_writers rank0), to the same" \
  adam "4 1 2" "4 1 2"

"${mpi[@]}" -np 4 "$helper" memory-dedicated adam 2 2>&1 | grep -v '^20[0-9][0-9]-' ||
  fail "--ps_dedicated: a rank's memory holds more than its part"

# `tower train` on TFRecord data: the workers read what the co-located ranks read.
"$fault" idx "$work/img" "$work/lab" 1000
"$tower" convert --from idx --images "$work/img" --labels "$work/lab" --out "$work/data" --num_shards 3 >/dev/null
common=(train --model mnist --data "$work/data-*.tfrecord" --batch_size 8 --max_steps 6 --save_every 3 --log_every 2
        --no_progress --summary_every 0 --histogram_every 0 --min_after_dequeue 100 --device cpu --num_towers 1)
for split in none files records; do
  "${mpi[@]}" -np 2 "$tower" "${common[@]}" --input_split $split --train_dir "$work/colo-$split" >"$work/colo.log" 2>&1 ||
    { cat "$work/colo.log"; fail "co-located 2 ranks, --input_split $split failed"; }
  "${mpi[@]}" -np 3 "$tower" "${common[@]}" --input_split $split --ps_dedicated --ps_ranks 1 --log_device_placement \
    --train_dir "$work/ded-$split" >"$work/train.log" 2>&1 || { cat "$work/train.log"; fail "1 server + 2 workers, --input_split $split failed"; }
  grep -q "done at step 6; checkpoint in .*; no input pipeline on this rank (a parameter server only" "$work/train.log" ||
    { cat "$work/train.log"; fail "--input_split $split: rank 0 (a server) does not say it has no input pipeline"; }
  same "$work/colo-$split/model.ckpt-6" "$work/ded-$split/model.ckpt-6" ||
    fail "--input_split $split: 1 server + 2 workers differ from the co-located 2 ranks"
  # rank 0, a server with no towers, logs the job's loss from the workers' (train_ranks_agree): the co-located one.
  losses() { grep -o 'step [0-9]*, loss = [0-9.]*' "$1"; }
  [ "$(losses "$work/train.log")" = "$(losses "$work/colo.log")" ] && [ "$(losses "$work/train.log" | wc -l)" = 4 ] ||
    { losses "$work/colo.log"; losses "$work/train.log"; fail "--input_split $split: rank 0 (a server) logs other losses"; }
done
echo "tower train, --input_split none, files and records: 1 server + 2 workers bitwise the co-located 2 ranks"

# The server-only rank runs no towers, so the worker's tower takes the host's cores as one process's tower does:
# 1 server + 1 worker of cifar10 (whose conv1 weight gradient depends on its thread count) bitwise one process
# (32x32x3 images; the worker's tower had 1 thread of 2, the server rank counted among the host's ranks: 6e-7
# apart).
"$fault" cifar "$work/data_batch_1.bin" 500
"$tower" convert --from cifar10 --out "$work/cifar" "$work/data_batch_1.bin" >/dev/null
one=(train --model cifar10 --data "$work/cifar-*.tfrecord" --batch_size 8 --max_steps 3 --no_progress --summary_every 0
     --histogram_every 0 --min_after_dequeue 100 --device cpu --num_towers 1)
"$tower" "${one[@]}" --train_dir "$work/one-proc" >"$work/one.log" 2>&1 || { cat "$work/one.log"; fail "one process of cifar10"; }
"${mpi[@]}" -np 2 "$tower" "${one[@]}" --local_parameter_device mpi --ps_dedicated --ps_ranks 1 \
  --train_dir "$work/one-ded" >"$work/one.log" 2>&1 || { cat "$work/one.log"; fail "1 server + 1 worker of cifar10"; }
same "$work/one-proc/model.ckpt-3" "$work/one-ded/model.ckpt-3" ||
  fail "1 server + 1 worker of cifar10 differ from one process of 1 tower (the worker's tower has other threads?)"
echo "tower train: 1 server + 1 worker bitwise one process (the worker's tower has the host's cores)"

bad=("${common[@]}" --max_steps 1 --train_dir "$work/refused")
refused "--ps_dedicated --ps_ranks 2 of 2 ranks" "--ps_dedicated --ps_ranks 2: expected 1 to 1" \
  "${mpi[@]}" -np 2 "$tower" "${bad[@]}" --ps_dedicated --ps_ranks 2
refused "--ps_dedicated without --ps_ranks" "--ps_dedicated --ps_ranks 0: expected 1 to 2" \
  "${mpi[@]}" -np 3 "$tower" "${bad[@]}" --ps_dedicated
refused "--ps_dedicated in one process" "--ps_dedicated: server-only ranks need mpirun -np R with R > 1" \
  "$tower" "${bad[@]}" --ps_dedicated --ps_ranks 1
refused "--ps_dedicated under mpirun -np 1" "--ps_dedicated: server-only ranks need mpirun -np R with R > 1" \
  "${mpi[@]}" -np 1 "$tower" "${bad[@]}" --local_parameter_device mpi --ps_dedicated --ps_ranks 1
refused "--ps_dedicated with --variable_update replicated" "this run is replicated_mpi" \
  "${mpi[@]}" -np 3 "$tower" "${bad[@]}" --variable_update replicated --ps_dedicated --ps_ranks 1
refused "--ps_dedicated with --batch_norm sync" "--ps_dedicated with --batch_norm sync: the statistics of every layer" \
  "${mpi[@]}" -np 3 "$tower" "${bad[@]}" --model resnet20 --batch_norm sync --ps_dedicated --ps_ranks 1

# Batch norm (--batch_norm tower): the server-only ranks take no part in the moving statistics' mean, the
# workers' towers make it in the job's order, so the job equals one process of the workers' towers.
for case in "3 1 1 2" "4 2 1 2" "4 2 2 4"; do # R N_SERVERS TOWERS_A_WORKER ALL_TOWERS
  set -- $case
  dir="$work/bn-$1-$2-$3"
  run "$1" "$3" resnet20 momentum 3 "$dir" "$2" >"$work/bn.log" 2>&1 ||
    { cat "$work/bn.log"; fail "resnet20 (batch norm): $2 server(s) + $(( $1 - $2 )) workers x $3 failed"; }
  if [ "$3" = 1 ]; then
    same "$(ref "$4" resnet20 momentum 3)" "$dir/model.ckpt-3" ||
      fail "resnet20 (batch norm): $2 server(s) + $(( $1 - $2 )) workers x 1 tower differ from one process of $4 towers"
  else
    run 2 "$3" resnet20 momentum 3 "$work/bn-colo" 0 >/dev/null 2>&1 || fail "resnet20: co-located 2 x $3 failed"
    same "$work/bn-colo/model.ckpt-3" "$dir/model.ckpt-3" ||
      fail "resnet20 (batch norm): $2 servers + 2 workers x $3 towers differ from the co-located 2 ranks x $3"
  fi
done
echo "resnet20 (batch norm): 1 server + 2 workers, 2 + 2 (x 1 tower) bitwise one process of 2 towers, 2 + 2 x 2" \
  "bitwise co-located 2 x 2 (the moving statistics included)"

# kill -9 of the server-only rank 0: the job ends, non-zero, within 10 s.
TEST_MPI_PS_DEDICATED=1 "${mpi[@]}" -x TEST_MPI_PS_DEDICATED -np 3 "$helper" train mnist momentum 1 100000 "$work/killed" \
  ps_mpi 1 >"$work/kill.log" 2>&1 &
launcher=$!
mpi_kill_rank 0 3
echo "kill -9 of the server-only rank 0: the job ended with exit $killed_rc"
echo "dedicated parameter-server ranks equal one process ($(( $(date +%s) - t0 )) s)"
