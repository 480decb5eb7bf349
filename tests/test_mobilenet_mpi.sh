#!/usr/bin/env bash
# test_mobilenet_mpi.sh TOWER TEST_IMAGEFOLDER — mobilenet_v2 (width 0.35, 32x32 from an image folder, Adam)
# under `mpirun -np 2 tower train --variable_update replicated` (one CPU tower per rank): batch norm's moving
# statistics are gathered across the ranks in the job's tower order (train/batch_norm.c), so after 4 steps the
# checkpoint is byte for byte that of one process of 2 towers (parameter_server/cpu): variables, moving
# statistics, slots, moving averages.  The comparison can fail: another seed differs.
# Skips (77) without mpirun or without MPI in the build.
set -euo pipefail
tower=$1 images=$2
source "$(dirname "$0")/mpi_common.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$images" make "$work/imgs" 20
common=(--model mobilenet_v2 --width_multiplier 0.35 --data "$work/imgs" --image_size 32 --num_classes 3
        --batch_size 4 --max_steps 4 --optimizer adam --skip_corrupt --max_corrupt_fraction 1 --min_after_dequeue 20
        --device cpu --no_progress --summary_every 0 --histogram_every 0 --log_every 100)
"$tower" train "${common[@]}" --seed 7 --num_towers 2 --train_dir "$work/ref" >/dev/null 2>&1 || fail "one process"
"${mpi[@]}" -np 2 "$tower" train "${common[@]}" --seed 7 --num_towers 1 --variable_update replicated \
  --train_dir "$work/job" >"$work/job.out" 2>&1 || fail "mpirun: $(tail -3 "$work/job.out")"
cmp -s "$work/ref/model.ckpt-4" "$work/job/model.ckpt-4" ||
  fail "2 ranks x 1 tower differ from 1 process x 2 towers (model.ckpt-4)"
echo "ok: 2 ranks x 1 tower = 1 process x 2 towers, byte for byte (moving statistics included)"
"${mpi[@]}" -np 2 "$tower" train "${common[@]}" --seed 8 --num_towers 1 --variable_update replicated \
  --train_dir "$work/other" >/dev/null 2>&1 || fail "mpirun, seed 8"
! cmp -s "$work/ref/model.ckpt-4" "$work/other/model.ckpt-4" || fail "another seed gave the same checkpoint"
echo "ok: the comparison can fail (seed 8 differs)"
