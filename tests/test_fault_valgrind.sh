#!/usr/bin/env bash
# test_fault_valgrind.sh TOWER HELPER SUPPRESSIONS — a short training run under
# valgrind memcheck: no invalid read or write, no use of an uninitialised
# value, no memory definitely or indirectly lost, in any of
#   mnist:   train (parameter_server, 2 CPU towers, batch 2, 3 steps, a
#            checkpoint, TensorBoard scalars and histograms), train --resume
#            (1 more step), eval (with its events file), export;
#   cifar10: train (replicated, ring all-reduce, 2 CPU towers, batch 2,
#            2 steps, 24x24 crops), eval.
# Every command runs under memcheck with --error-exitcode=1, so any error
# fails the test.  SUPPRESSIONS (tests/valgrind.supp) covers oneDNN's JIT
# kernels only, each entry justified there.  OMP_WAIT_POLICY=passive: under
# valgrind, which runs one thread at a time, OpenMP threads spinning in their
# barriers slow a run down twenty-fold; it changes no memory access.
# Skipped (77) without valgrind.
set -euo pipefail
tower=$1
helper=$2
supp=$3
if ! command -v valgrind >/dev/null; then
  echo "skipped: valgrind is not installed (Debian package valgrind)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Tiny data, made without valgrind: 64 + 10 mnist-shaped and 40 + 10 cifar10 examples.
"$helper" idx "$work/img" "$work/lab" 64
"$tower" convert --from idx --images "$work/img" --labels "$work/lab" --out "$work/mnist_train" >/dev/null
"$helper" idx "$work/timg" "$work/tlab" 10
"$tower" convert --from idx --images "$work/timg" --labels "$work/tlab" --out "$work/mnist_test" >/dev/null
"$helper" cifar "$work/c.bin" 40
"$tower" convert --from cifar10 --out "$work/cifar_train" "$work/c.bin" >/dev/null
"$helper" cifar "$work/ct.bin" 10
"$tower" convert --from cifar10 --out "$work/cifar_test" "$work/ct.bin" >/dev/null

export OMP_WAIT_POLICY=passive
# One OpenMP thread per process: oneDNN's JIT sgemm moves the stack pointer
# far enough for memcheck to take it for a stack switch ("client switching
# stacks?"), and in a binary linked with the CUDA libraries memcheck then
# reports false uninitialised reads inside the JIT kernels on the OpenMP
# worker threads (eval of cifar10 with 2 threads: ~1.8 million, all in code
# of no object file; none with 1 thread, nor in a CPU-only build).  Training
# runs 2 tower threads either way (on 2 cores each tower has 1 OpenMP thread).
export OMP_NUM_THREADS=1
start=$SECONDS
n_runs=0
# vg NAME ARGS...: tower ARGS under memcheck; the log goes to $work/NAME.vg.
vg() {
  local name=$1 t0=$SECONDS rc=0
  shift
  valgrind --tool=memcheck --suppressions="$supp" --leak-check=full --errors-for-leak-kinds=definite,indirect \
    --error-exitcode=1 --num-callers=40 --log-file="$work/$name.vg" "$tower" "$@" >"$work/$name.out" 2>&1 || rc=$?
  if [ $rc -ne 0 ]; then
    cat "$work/$name.out" "$work/$name.vg"
    fail "$name: exit $rc under memcheck"
  fi
  grep -q "ERROR SUMMARY: 0 errors" "$work/$name.vg" || { cat "$work/$name.vg"; fail "$name: memcheck reported errors"; }
  grep -Eq "definitely lost: 0 bytes|All heap blocks were freed" "$work/$name.vg" || { cat "$work/$name.vg"; fail "$name: leak summary"; }
  echo "ok: $name: no memcheck error, nothing lost ($((SECONDS - t0)) s; $(grep -o 'suppressed: [0-9]* from [0-9]*' "$work/$name.vg" | tail -1))"
  n_runs=$((n_runs + 1))
}
small=(--device cpu --num_towers 2 --batch_size 2 --min_after_dequeue 8 --log_every 1 --no_progress)

vg mnist_train train --model mnist --data "$work/mnist_train-*.tfrecord" --train_dir "$work/m" "${small[@]}" \
  --max_steps 3 --save_every 2 --summary_every 1 --histogram_every 2
[ -f "$work/m/model.ckpt-3" ] || fail "mnist: no checkpoint at step 3"
vg mnist_resume train --model mnist --data "$work/mnist_train-*.tfrecord" --train_dir "$work/m" "${small[@]}" \
  --max_steps 4 --resume
grep -q "resumed from $work/m/model.ckpt-3 at step 3" "$work/mnist_resume.out" || fail "mnist: did not resume"
vg mnist_eval eval --checkpoint_dir "$work/m" --data "$work/mnist_test-*.tfrecord" --batch_size 4
grep -q " of 10 examples correct" "$work/mnist_eval.out" || fail "mnist: eval did not count the 10 examples"
vg mnist_export export --checkpoint_dir "$work/m" --out "$work/m.safetensors"
vg cifar10_train train --model cifar10 --image_size 24 --data "$work/cifar_train-*.tfrecord" --train_dir "$work/c" \
  "${small[@]}" --max_steps 2 --save_every 1 --variable_update replicated --all_reduce host
vg cifar10_eval eval --checkpoint_dir "$work/c" --data "$work/cifar_test-*.tfrecord" --batch_size 4 --eval_dir none
grep -q " of 10 examples correct" "$work/cifar10_eval.out" || fail "cifar10: eval did not count the 10 examples"
echo "ok: $n_runs commands under memcheck in $((SECONDS - start)) s: no invalid access, no leak"
