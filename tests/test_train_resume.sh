#!/usr/bin/env bash
# test_train_resume.sh TOWER — 100 steps, then --resume for 100 more, give
# bitwise the same checkpoint as 200 steps straight (2 towers, same seed);
# and eval reads the result; --moving_average_decay 0 on resume is noted, the
# way back refused with the way on.
source "$(dirname "$0")/train_common.sh"
convert_fashion_mnist
common=(--model mnist --data "$work/train-*.tfrecord" --num_towers 2 --batch_size 8 --seed 7
        --log_every 50 --save_every 1000 --min_after_dequeue 500)
"$tower" train "${common[@]}" --train_dir "$work/straight" --max_steps 200
"$tower" train "${common[@]}" --train_dir "$work/resumed" --max_steps 100
[ -f "$work/resumed/model.ckpt-100" ] || fail "no checkpoint after 100 steps"
"$tower" train "${common[@]}" --train_dir "$work/resumed" --max_steps 200 --resume | tee "$work/resume.log"
grep -q "resumed from .*model.ckpt-100 at step 100" "$work/resume.log" || fail "the second run did not resume from step 100"
cmp "$work/straight/model.ckpt-200" "$work/resumed/model.ckpt-200" ||
  fail "100 + 100 steps with --resume differ from 200 steps straight"
echo "resume is bitwise equal to a straight run"
# A different seed must give a different checkpoint (the comparison above can fail).
"$tower" train "${common[@]}" --train_dir "$work/other" --max_steps 200 --seed 8 >/dev/null
if cmp -s "$work/straight/model.ckpt-200" "$work/other/model.ckpt-200"; then fail "seed 7 and seed 8 gave the same variables"; fi
"$tower" eval --checkpoint_dir "$work/straight" --data "$work/test-*.tfrecord" | tee "$work/eval.log"
grep -Eq "^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:.]+: precision @ 1 = 0\.[0-9]{3}$" "$work/eval.log" || fail "no precision line"
grep -q " of 10000 examples correct" "$work/eval.log" || fail "eval did not count exactly the 10000 test examples"
# --resume --moving_average_decay 0 from a checkpoint with moving averages: a note that they are discarded (it was
# silent); back with the averages on, the refusal says how to go on.
cp -r "$work/resumed" "$work/no_ema"
"$tower" train "${common[@]}" --train_dir "$work/no_ema" --max_steps 201 --resume --moving_average_decay 0 \
  >/dev/null 2>"$work/no_ema.err" || fail "resume with --moving_average_decay 0: $(cat "$work/no_ema.err")"
grep -q "note: $work/no_ema/model.ckpt-200 holds moving averages; --moving_average_decay 0 discards them" \
  "$work/no_ema.err" || fail "no note that the moving averages are discarded: $(cat "$work/no_ema.err")"
if "$tower" train "${common[@]}" --train_dir "$work/no_ema" --max_steps 202 --resume >/dev/null 2>"$work/no_ema2.err"; then
  fail "resume with moving averages from a checkpoint without them succeeded"
fi
grep -q "model.ckpt-201: no moving averages (saved with the moving average disabled): resume with --moving_average_decay 0" \
  "$work/no_ema2.err" || fail "the refusal does not say how to go on: $(cat "$work/no_ema2.err")"
echo "resume: discarding the moving averages is said; the way back says how to go on"
# Another shuffle buffer mid-epoch: a note (the rest of the epoch is drawn in another order; it was silent).
cp -r "$work/resumed" "$work/buffer"
"$tower" train "${common[@]}" --train_dir "$work/buffer" --max_steps 201 --resume --min_after_dequeue 100 \
  >/dev/null 2>"$work/buffer.err" || fail "resume with another --min_after_dequeue: $(cat "$work/buffer.err")"
grep -q "note: $work/buffer/model.ckpt-200 was written with --min_after_dequeue 500; with 100 the rest of its epoch.* is drawn in another order" \
  "$work/buffer.err" || fail "no note of the other shuffle buffer: $(cat "$work/buffer.err")"
echo "resume: another --min_after_dequeue mid-epoch is said"
