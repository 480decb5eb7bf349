#!/usr/bin/env bash
# test_gpu_nccl_mpi.sh TOWER — replicated_nccl_mpi (one NCCL communicator
# over every rank's GPUs, train/mode_replicated_nccl_mpi.c) on GPU towers
# (labels gpu, gpu_modes; skips, 77, without a visible GPU):
#   - in one process (`--all_reduce nccl_mpi`, no mpirun: the id made and
#     used by one rank, the mean from the trainer's thread) 2 towers on GPU 0
#     write, after 6 steps with --deterministic, the same checkpoint byte for
#     byte as replicated_nccl (the same kernels in the same order: the GPU's
#     towers summed in tower order, an all-reduce over one NCCL rank, the
#     division), and resume under ps_cpu;
#   - with mpirun and at least 2 GPUs, `mpirun -np 2` ranks of 1 tower each
#     on GPUs 0 and 1 (--all_reduce nccl, settled to replicated_nccl_mpi)
#     log every step's loss as one process of 2 towers on GPUs 0,1 in
#     replicated_nccl does (NCCL's order on the same two GPUs).
# Under TOWER_TEST_REQUIRE_GPU=1 (tests/gpu_skip.sh) a missing GPU, NCCL or
# dataset is a failure; missing mpirun or a second GPU only skips the second
# part (the GPU check's machine has neither).
set -euo pipefail
tower=$1
source "$(dirname "$0")/gpu_skip.sh"
require_gpu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

if ! "$tower" bench --device gpu --models mnist --modes replicated_nccl_mpi --towers 1 --batch_size 2 --steps 1 \
     --warmup 0 --csv "" --svg "" >"$work/probe.log" 2>&1; then
  grep -q "needs NCCL" "$work/probe.log" && gpu_skip "this tower was built without NCCL"
  cat "$work/probe.log"
  fail "replicated_nccl_mpi did not run in tower bench"
fi
src=${TOWER_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -f "$src/t10k-images-idx3-ubyte.gz" ] || gpu_skip "$src is missing (Debian package dataset-fashion-mnist; TOWER_FASHION_MNIST_DIR)"
"$tower" convert --from idx --images "$src/t10k-images-idx3-ubyte.gz" --labels "$src/t10k-labels-idx1-ubyte.gz" \
  --out "$work/fm" --num_shards 1 >/dev/null

train() { # DIR LOG FLAGS...: 6 steps of 2 x 8 on GPU towers, every step logged
  local dir=$1 log=$2
  shift 2
  "$tower" train --device gpu --model mnist --data "$work/fm-*.tfrecord" --train_dir "$dir" --batch_size 8 \
    --max_steps 6 --log_every 1 --min_after_dequeue 100 --deterministic --log_device_placement "$@" >"$log" 2>&1 ||
    { cat "$log"; fail "tower train $*"; }
}
train "$work/nccl" "$work/nccl.log" --num_towers 2 --variable_update replicated --all_reduce nccl
train "$work/ncclmpi" "$work/ncclmpi.log" --num_towers 2 --variable_update replicated --all_reduce nccl_mpi
grep -q "mode replicated_nccl_mpi" "$work/ncclmpi.log" || fail "the placement log does not name replicated_nccl_mpi"
cmp "$work/nccl/model.ckpt-6" "$work/ncclmpi/model.ckpt-6" ||
  fail "replicated_nccl_mpi in one process wrote another checkpoint than replicated_nccl after 6 steps"
"$tower" train --device gpu --model mnist --data "$work/fm-*.tfrecord" --train_dir "$work/ncclmpi" --num_towers 2 \
  --batch_size 8 --max_steps 8 --log_every 1 --min_after_dequeue 100 --resume >"$work/resume.log" 2>&1 ||
  { cat "$work/resume.log"; fail "replicated_nccl_mpi's checkpoint did not resume under ps_cpu"; }
echo "one process: replicated_nccl_mpi's checkpoint after 6 steps is replicated_nccl's, byte for byte; resumed under ps_cpu"

n_gpus=$(nvidia-smi -L | grep -c "^GPU")
if ! command -v mpirun >/dev/null || [ "$n_gpus" -lt 2 ]; then
  echo "skipped the two-rank part: $(command -v mpirun >/dev/null || echo "no mpirun, ")$n_gpus GPU(s)"
  exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
train "$work/one" "$work/one.log" --gpus 0,1 --num_towers 2 --variable_update replicated --all_reduce nccl
mpirun --oversubscribe --bind-to none -np 2 sh -c 'exec "$0" train --device gpu --gpus "$OMPI_COMM_WORLD_RANK" \
  --num_towers 1 --model mnist --data "$1/fm-*.tfrecord" --train_dir "$1/ranks" --batch_size 8 --max_steps 6 \
  --log_every 1 --min_after_dequeue 100 --deterministic --log_device_placement --variable_update replicated \
  --all_reduce nccl' "$tower" "$work" >"$work/ranks.log" 2>&1 || { cat "$work/ranks.log"; fail "mpirun -np 2 in nccl"; }
grep -q "mode replicated_nccl_mpi" "$work/ranks.log" || fail "two ranks with --all_reduce nccl did not settle on replicated_nccl_mpi"
diff <(grep -o "step [0-9]*, loss = [0-9.]*" "$work/one.log") <(grep -o "step [0-9]*, loss = [0-9.]*" "$work/ranks.log") ||
  fail "two ranks of one GPU tower each logged other losses than one process of two GPU towers"
echo "two ranks x 1 GPU tower: every step's loss as one process of 2 GPU towers"
