# gpu_skip.sh — sourced by the GPU shell tests: gpu_skip WHY prints
# "skipped: WHY" and exits 77 (ctest: skipped), or, when
# TOWER_TEST_REQUIRE_GPU=1 (the GPU check, scripts/gpu-check.sh), prints
# "FAIL: WHY" and exits 1, so that a GPU run cannot pass by running nothing.
# require_gpu skips (so) unless nvidia-smi lists a GPU.
gpu_skip() {
  if [ -n "${TOWER_TEST_REQUIRE_GPU:-}" ] && [ "${TOWER_TEST_REQUIRE_GPU}" != 0 ]; then
    echo "FAIL: $* (TOWER_TEST_REQUIRE_GPU=1: a skip is a failure)"
    exit 1
  fi
  echo "skipped: $*"
  exit 77
}
require_gpu() {
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
    gpu_skip "no GPU (nvidia-smi missing or lists none)"
  fi
}
