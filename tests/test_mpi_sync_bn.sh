#!/usr/bin/env bash
# test_mpi_sync_bn.sh TOWER IMAGES HELPER — --batch_norm sync across MPI ranks (docs/hosts.md): every batch norm's
# sums go from the towers of a rank (tower order) on through the ranks (rank order, MPI_Allgather), so
#   - HELPER (tests/test_mpi_sync_bn_helper.c) under mpirun -np 2 with 1 and 2 towers a rank: the job's gradient
#     equals one tower of the whole batch within test_tower_sync_bn's tolerances, without sync it does not, and a
#     rank whose tower fails before the first sum ends the step on every rank with a line naming it (no hang);
#   - `tower train` mobilenet_v2 (width 0.35, 32x32 image folder, momentum, 2 steps) under mpirun -np 2 with one
#     tower a rank writes the checkpoint of one process of 2 towers with --batch_norm sync byte for byte, in
#     replicated (replicated_mpi) and parameter_server (ps_mpi, --checkpoint_writers rank0: one file): a
#     rank's sum of one tower is its slot, and the ranks' sum in rank order is the towers' in tower order;
#   - the comparison can fail: --batch_norm tower under mpirun differs.
# Skips (77) without mpirun or without MPI in the build.
set -euo pipefail
tower=$1 images=$2 helper=$3
mpi_timeout=300
source "$(dirname "$0")/mpi_common.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for t in 1 2; do
  rc=0
  "${mpi[@]}" -np 2 "$helper" "$t" >"$work/helper.log" 2>&1 || rc=$?
  cat "$work/helper.log"
  [ "$rc" = 0 ] || fail "the helper, 2 ranks x $t tower(s): exit $rc"
done
"$images" make "$work/imgs" 20
common=(--model mobilenet_v2 --width_multiplier 0.35 --data "$work/imgs" --image_size 32 --num_classes 3
        --batch_size 4 --max_steps 2 --optimizer momentum --skip_corrupt --max_corrupt_fraction 1 --min_after_dequeue 20
        --device cpu --no_progress --summary_every 0 --histogram_every 0 --log_every 100 --seed 7)
"$tower" train "${common[@]}" --batch_norm sync --num_towers 2 --train_dir "$work/ref" >/dev/null 2>&1 || fail "one process"
for vu in replicated parameter_server; do # ps_mpi: --checkpoint_writers rank0, one file to compare byte for byte
  "${mpi[@]}" -np 2 "$tower" train "${common[@]}" --batch_norm sync --num_towers 1 --variable_update $vu --checkpoint_writers rank0 \
    --train_dir "$work/job-$vu" >"$work/job.out" 2>&1 || fail "mpirun, $vu: $(tail -3 "$work/job.out")"
  cmp -s "$work/ref/model.ckpt-2" "$work/job-$vu/model.ckpt-2" ||
    fail "$vu, --batch_norm sync: 2 ranks x 1 tower differ from 1 process x 2 towers (model.ckpt-2)"
  echo "ok: $vu, --batch_norm sync: 2 ranks x 1 tower = 1 process x 2 towers, byte for byte (moving statistics included)"
done
"${mpi[@]}" -np 2 "$tower" train "${common[@]}" --batch_norm tower --num_towers 1 --variable_update replicated \
  --train_dir "$work/apart" >/dev/null 2>&1 || fail "mpirun, --batch_norm tower"
! cmp -s "$work/ref/model.ckpt-2" "$work/apart/model.ckpt-2" || fail "--batch_norm tower gave sync's checkpoint"
echo "ok: the comparison can fail (--batch_norm tower across the ranks differs)"
