#!/usr/bin/env bash
# test_mpi_input_split.sh TOWER FAULT_HELPER HELPER IMAGES — --input_split across MPI ranks (docs/hosts.md) on 1000
# synthetic mnist-shaped records in 3 TFRecord files:
#   - HELPER (tests/test_mpi_input_split_helper.c) reads one epoch on every rank: with none every rank reads all
#     1000; with files (2 ranks: files 0, 2 | 1) and records (2 and 3 ranks: records r, r+R, ...) the ranks read
#     disjoint examples that together are all 1000 (records: N/R each, rounded);
#   - `tower train` under mpirun -np 2 with --input_split files and records learns: after 200 steps of batch 16
#     a tower, `tower eval` on the data gives precision @ 1 of at least 0.9 (chance: 0.1);
#   - --input_split with an image folder is refused with one line.
# Skips (77) without mpirun or without MPI in the build.
set -euo pipefail
tower=$1 fault=$2 helper=$3 images=$4
mpi_timeout=300
source "$(dirname "$0")/mpi_common.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$fault" idx "$work/img" "$work/lab" 1000
"$tower" convert --from idx --images "$work/img" --labels "$work/lab" --out "$work/data" --num_shards 3 >/dev/null
for case in "none 2" "files 2" "records 2" "records 3"; do
  set -- $case
  rc=0
  "${mpi[@]}" -np "$2" "$helper" "$1" "$work/data-*.tfrecord" 1000 >"$work/helper.log" 2>&1 || rc=$?
  grep -v '^20[0-9][0-9]-' "$work/helper.log" || true
  [ "$rc" = 0 ] || { cat "$work/helper.log"; fail "--input_split $1, $2 ranks: exit $rc"; }
done
common=(--model mnist --data "$work/data-*.tfrecord" --batch_size 16 --max_steps 200 --log_every 50 --no_progress
        --summary_every 0 --histogram_every 0 --min_after_dequeue 200 --device cpu --num_towers 1)
for split in files records; do
  "${mpi[@]}" -np 2 "$tower" train "${common[@]}" --input_split $split --train_dir "$work/train-$split" \
    >"$work/train.log" 2>&1 || { cat "$work/train.log"; fail "--input_split $split: training failed"; }
  "$tower" eval --checkpoint_dir "$work/train-$split" --data "$work/data-*.tfrecord" --eval_dir none >"$work/eval.log" 2>&1 ||
    { cat "$work/eval.log"; fail "--input_split $split: eval failed"; }
  p=$(sed -n 's/.*precision @ 1 = \([0-9.]*\).*/\1/p' "$work/eval.log")
  [ -n "$p" ] && awk -v p="$p" 'BEGIN { exit !(p >= 0.9) }' || { cat "$work/train.log" "$work/eval.log"; fail "--input_split $split: precision $p < 0.9"; }
  echo "--input_split $split, 2 ranks x 1 tower, 200 steps: losses $(grep -o 'loss = [0-9.]*' "$work/train.log" | tr '\n' ' '); precision @ 1 = $p"
done
"$images" make "$work/imgs" 20 >/dev/null
rc=0
out=$("${mpi[@]}" -np 2 "$tower" train --model mnist --data "$work/imgs" --image_size 28 --input_split files --max_steps 1 \
  --train_dir "$work/refused" --device cpu 2>&1) || rc=$?
[ "$rc" != 0 ] && echo "$out" | grep -q -- "--input_split files: TFRecord files only" ||
  { echo "$out"; fail "--input_split with an image folder: exit $rc, expected a refusal"; }
echo "--input_split with an image folder: refused (exit $rc)"
