#!/usr/bin/env bash
# test_mpi_async_bn.sh TOWER HELPER — batch norm's moving statistics under the
# asynchronous parameter servers (--sync_replicas false --batch_norm tower,
# train/mode_ps_async.c: each push carries its towers' shares of the update,
# the owner applies them on arrival, the pulls bring the statistics back):
#   - one worker: ps_mpi_async is bitwise ps_mpi on resnet20 (one process of
#     2 towers, momentum; and mpirun -np 1, adam), moving statistics included,
#     through tests/test_mpi_ps_helper; and the statistics moved there;
#   - --batch_norm sync with --sync_replicas false is refused with one line;
#   - 2 ranks x 1 tower of resnet20 on Fashion-MNIST (600 applied updates of 8
#     examples): the checkpoint's moving statistics all moved from their
#     initial values and are finite (variances positive), and `tower eval`
#     (the moving averages of the variables, the owners' statistics among
#     them) on the first 2000 test images scores above 0.5 (chance: 0.10;
#     0.69-0.74 over 9 runs of seeds 7 and 8, 4 of them two at a time).  The
#     statistics lag (momentum 0.99 from variance 1): after 100 updates
#     synchronous ps_mpi and async both scored 0.10, and after 300 async
#     scored 0.19-0.66 over 4 runs (it failed CI and 1 of 5 runs alone at
#     0.25), so the run is 600.  Not the raw variables: at this rate (per
#     example twice a synchronous run's at 0.05) the loss still jumps, the
#     statistics lag the jumps by about 100 updates, and one run of 5 scored
#     0.11 raw after 300 (0.35-0.62 the others).  At a synchronous run's rate
#     per example the two agree (docs/hosts.md).
# Skips (77) without mpirun, MPI in the build, or the data.
source "$(dirname "$0")/train_common.sh"
helper=$2
source "$(dirname "$0")/mpi_common.sh"
t0=$(date +%s)

# One worker: the owner's arithmetic on the towers' shares is train_update_moving's, bitwise.
for run in "2 momentum" "1 adam"; do
  set -- $run
  towers=$1 opt=$2
  launch=()
  [ "$towers" = 1 ] && launch=("${mpi[@]}" -np 1)
  mkdir -p "$work/h-sync-$opt" "$work/h-async-$opt"
  "${launch[@]}" "$helper" train resnet20 "$opt" "$towers" 3 "$work/h-sync-$opt" ps_mpi >/dev/null || fail "helper ps_mpi ($opt) failed"
  "${launch[@]}" "$helper" train resnet20 "$opt" "$towers" 3 "$work/h-async-$opt" ps_mpi_async >/dev/null ||
    fail "helper ps_mpi_async ($opt) failed"
  cmp "$work/h-sync-$opt/model.ckpt-3" "$work/h-async-$opt/model.ckpt-3" ||
    fail "resnet20, $towers tower(s), $opt: ps_mpi_async differs from ps_mpi"
  "$helper" moving "$work/h-async-$opt/model.ckpt-3" >/dev/null || fail "resnet20, $opt: the moving statistics did not move"
done
echo "one worker, resnet20: ps_mpi_async bitwise ps_mpi, moving statistics included (1 process x 2 towers, momentum; mpirun -np 1, adam)"

convert_fashion_mnist
# The first 2000 test images, for a quicker eval.
python3 - "$src" "$work" <<'PY'
import gzip, struct, sys
src, out = sys.argv[1], sys.argv[2]
for kind, n_head in (("images-idx3", 16), ("labels-idx1", 8)):
    data = gzip.open(f"{src}/t10k-{kind}-ubyte.gz").read()
    head = bytearray(data[:n_head])
    struct.pack_into(">I", head, 4, 2000)
    item = 28 * 28 if kind.startswith("images") else 1
    open(f"{out}/few-{kind}-ubyte", "wb").write(bytes(head) + data[n_head:n_head + 2000 * item])
PY
"$tower" convert --from idx --images "$work/few-images-idx3-ubyte" --labels "$work/few-labels-idx1-ubyte" \
  --out "$work/few" --num_shards 1 >/dev/null
common=(--model resnet20 --data "$work/train-*.tfrecord" --batch_size 8 --seed 7 --min_after_dequeue 500 --device cpu
        --no_progress --summary_every 0 --histogram_every 0 --num_towers 1 --variable_update parameter_server
        --sync_replicas false --learning_rate 0.05)

if "${mpi[@]}" -np 2 "$tower" train "${common[@]}" --batch_norm sync --max_steps 2 --train_dir "$work/bnsync" \
  >"$work/bnsync.log" 2>&1; then fail "--batch_norm sync with --sync_replicas false was accepted"; fi
grep -q "batch_norm sync with --sync_replicas false: a global batch's statistics need a synchronous step" "$work/bnsync.log" ||
  { cat "$work/bnsync.log"; fail "--batch_norm sync with --sync_replicas false: no line says why"; }
echo "refused: $(grep -m1 -o -- "--batch_norm sync with.*" "$work/bnsync.log" | cut -c1-120)"

"${mpi[@]}" -np 2 "$tower" train "${common[@]}" --max_steps 600 --log_every 100 --train_dir "$work/async" \
  >"$work/async.log" 2>&1 || { cat "$work/async.log"; fail "2 ranks of resnet20, asynchronous, failed"; }
grep -q "done at step 600;" "$work/async.log" || { cat "$work/async.log"; fail "the run did not end at step 600"; }
"$helper" moving "$work/async/model.ckpt-600" >"$work/moving.log" || { cat "$work/moving.log"; fail "moving statistics"; }
echo "2 ranks x 1 tower, 600 updates: $(cat "$work/moving.log")"
p=$("$tower" eval --checkpoint "$work/async/model.ckpt-600" --data "$work/few-*.tfrecord" --eval_dir none --no_progress \
  2>&1 | sed -n 's/.*precision @ 1 = \([0-9.]*\).*/\1/p')
[ -n "$p" ] || fail "no precision from eval"
awk -v p="$p" 'BEGIN { exit !(p > 0.5) }' || fail "eval of the asynchronous resnet20: precision $p, not above 0.5"
echo "eval (moving averages) on 2000 test images: precision @ 1 = $p"
echo "asynchronous batch norm: all checks passed ($(( $(date +%s) - t0 )) s)"
