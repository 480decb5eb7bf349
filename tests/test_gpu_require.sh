#!/usr/bin/env bash
# test_gpu_require.sh GPU_TEST_BINARY GPU_SHELL_TEST TOWER — on a machine
# without a GPU, TOWER_TEST_REQUIRE_GPU=1 turns the GPU tests' skip (77)
# into a failure: the C binary (tests/test_gpu_common.h) and the shell test
# (tests/gpu_skip.sh) each exit 1 with a "FAIL: ... TOWER_TEST_REQUIRE_GPU"
# line, and without the variable they still exit 77.  On a machine with a
# GPU there is nothing to show (skips, 77).
set -uo pipefail
bin=$1
sh_test=$2
tower=$3
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
  echo "skipped: a GPU is here; this checks the no-GPU path"
  exit 77
fi
fail() { echo "FAIL: $*"; exit 1; }
check() { # what want_rc env... -- cmd...
  local what=$1 want=$2; shift 2
  local out rc
  out=$(env "$@" 2>&1); rc=$?
  [ "$rc" -eq "$want" ] || { echo "$out"; fail "$what: exit $rc, expected $want"; }
  if [ "$want" -eq 1 ]; then
    echo "$out" | grep -q "FAIL: .*TOWER_TEST_REQUIRE_GPU" || { echo "$out"; fail "$what: no FAIL line naming TOWER_TEST_REQUIRE_GPU"; }
  fi
  echo "$what: exit $rc: ok"
}
check "$(basename "$bin") without TOWER_TEST_REQUIRE_GPU" 77 -u TOWER_TEST_REQUIRE_GPU "$bin"
check "$(basename "$bin") with TOWER_TEST_REQUIRE_GPU=1" 1 TOWER_TEST_REQUIRE_GPU=1 "$bin"
check "$(basename "$sh_test") without TOWER_TEST_REQUIRE_GPU" 77 -u TOWER_TEST_REQUIRE_GPU bash "$sh_test" "$tower"
check "$(basename "$sh_test") with TOWER_TEST_REQUIRE_GPU=1" 1 TOWER_TEST_REQUIRE_GPU=1 bash "$sh_test" "$tower"
