#!/bin/sh
# run_keras_nets.sh HELPER — the `interop` ctest test_model_nets_keras:
# finds a Python with TensorFlow and Keras (TOWER_PYTHON, else python3) and
# runs keras_nets.py for each network on a small input, so that it runs in
# about a minute on 2 cores: vgg16 at 32x32 (Keras's 4096-wide head), vgg11
# at 32x32 with a 64-wide head, resnet20 at 32x32 and resnet50 at 64x64
# (batch 4: conv5's maps are 2x2, so its batch norms see 16 rows; at 32x32
# they would see 4, where rounding is amplified on both sides); exits 77
# (skipped) when `import tensorflow, keras` fails.
# ResNet50's gradients at initialisation are refereed by Keras in float64
# where Tower and Keras's float32 differ (keras_nets.py, exit 3 when that
# is the only failure).  That verdict is a draw from float32 noise
# amplified by batch norms over 16-64 rows: over seeds 2026-2029 the worst
# variable came to 0.15-0.68 of the bound with direct convolutions and
# 0.32-1.56 with Winograd's F(2x2, 3x3) forward (model/winograd.c, on
# AVX2), whose rounding is 1.2-2.5x the direct one's (bench/RESULTS.md,
# 2026-11-27).  On an AMD Zen 5 with AVX-512 (2026-11-28) Keras's single
# float32 draw was the weak side: seeds 2027 and 2028 failed at 1.44 and
# 7.1x the bound because Keras's own error happened to be small (seed 2028,
# conv5_block2_1_conv: 0.000111, against 0.00116-0.00805 when the inputs
# move by one unit in the last place; Tower's 0.00673).  So Keras's error
# is now the largest over its run and 4 runs on inputs moved by one ulp:
# seeds 2026-2033 then came to 0.15-0.49 of the bound there (0.19-1.00
# with ONEDNN_MAX_CPU_ISA=AVX2, which moves both sides).  resnet50 still
# runs three seeds and the referee must pass at least two; every other
# check must pass for every seed.  A planted 1% error in one tap of every
# 3x3 convolution's weight gradient fails resnet50's seed 2028 (2.61 of the
# bound) and every other network (3.3-3.5 of theirs).
here=$(cd "$(dirname "$0")" && pwd)
py=${TOWER_PYTHON:-python3}
if ! "$py" -c "import tensorflow, keras" >/dev/null 2>&1; then
  echo "skipped: '$py' cannot import tensorflow and keras (pip install tensorflow-cpu, or set TOWER_PYTHON)"
  exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tower_keras_nets_XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
rc=0
for run in "vgg16 32 4 0" "vgg11 32 4 64" "resnet20 32 4 0"; do
  set -- "$1" $run
  echo "== $2 ${3}x${3}x3, batch $4, 10 classes"
  "$py" "$here/keras_nets.py" "$1" "$tmp" "$2" "$3" "$4" "$5" || rc=1
done
referee_failed=0
for seed in 2026 2027 2028; do
  echo "== resnet50 64x64x3, batch 4, 10 classes, seed $seed"
  "$py" "$here/keras_nets.py" "$1" "$tmp" resnet50 64 4 0 "$seed"
  case $? in
    0) ;;
    3) referee_failed=$((referee_failed + 1)) ;;
    *) rc=1 ;;
  esac
done
if [ "$referee_failed" -gt 1 ]; then
  echo "resnet50: the float64 referee failed $referee_failed of 3 seeds (at most 1 allowed) FAIL"
  rc=1
else
  echo "resnet50: the float64 referee failed $referee_failed of 3 seeds (at most 1 allowed)"
fi
exit $rc
