#!/usr/bin/env bash
# test_gpu_modes_cli.sh TOWER — the GPU modes from the command line, on GPU
# towers (label gpu; skips, 77, without nvidia-smi or a visible GPU):
#   - `tower bench --device gpu` over ps_cpu, replicated_host, ps_gpu and
#     replicated_nccl (when built with NCCL) x 1, 2 towers on GPU 0 x both
#     models, with --trace: the CSV has every row with its flags, and every
#     trace has the rows and spans docs/modes.md promises for its mode
#     (ps_gpu: the GPU server's average and apply, no copy-out for towers on
#     the server's GPU; replicated_nccl: no copy-in of variables and no
#     copy-out, the all-reduce and apply per tower, an NCCL row), in order;
#   - `tower train` in ps_gpu and in replicated_nccl on Fashion-MNIST's test
#     set (when the dataset is installed) logs its placement, writes a
#     checkpoint, and that checkpoint resumes under ps_cpu.
# Under TOWER_TEST_REQUIRE_GPU=1 (tests/gpu_skip.sh) a missing GPU, NCCL or
# dataset (TOWER_FASHION_MNIST_DIR, else /usr/share/datasets/fashion-mnist)
# is a failure, not a skip.
set -euo pipefail
tower=$1
source "$(dirname "$0")/gpu_skip.sh"
require_gpu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

modes=ps_cpu,replicated_host,ps_gpu
if "$tower" bench --device gpu --models mnist --modes replicated_nccl --towers 1 --batch_size 2 --steps 1 --warmup 0 \
     --csv "" --svg "" >"$work/probe.log" 2>&1; then
  modes=$modes,replicated_nccl
elif grep -q "needs NCCL" "$work/probe.log"; then
  [ -n "${TOWER_TEST_REQUIRE_GPU:-}" ] && [ "$TOWER_TEST_REQUIRE_GPU" != 0 ] &&
    fail "this tower was built without NCCL (TOWER_TEST_REQUIRE_GPU=1: every mode must run)"
  echo "this tower was built without NCCL: replicated_nccl left out"
else
  cat "$work/probe.log"
  fail "replicated_nccl did not run"
fi

"$tower" bench --device gpu --models mnist,cifar10 --modes "$modes" --towers 1,2 --batch_size 4 --steps 3 --warmup 1 \
  --csv "$work/bench.csv" --svg "$work/bench.svg" --trace "$work/t.json" >"$work/bench.log" ||
  { cat "$work/bench.log"; fail "tower bench --device gpu"; }
cat "$work/bench.log"

python3 - "$work" "$modes" <<'EOF'
import csv, json, sys
work, modes = sys.argv[1], sys.argv[2].split(",")
def fail(msg):
    print("FAIL:", msg); sys.exit(1)
flags = {"ps_cpu": ("parameter_server", "cpu", "auto"), "ps_gpu": ("parameter_server", "gpu", "auto"),
         "replicated_host": ("replicated", "cpu", "host"), "replicated_nccl": ("replicated", "cpu", "nccl")}
recs = list(csv.DictReader(open(f"{work}/bench.csv")))
want = {(m, mode, t) for m in ("mnist", "cifar10") for mode in modes for t in ("1", "2")}
if {(r["model"], r["mode"], r["towers"]) for r in recs} != want: fail(f"CSV rows {[(r['model'], r['mode'], r['towers']) for r in recs]}")
for r in recs:
    tag = f'{r["model"]} {r["mode"]} {r["towers"]}'
    if (r["variable_update"], r["local_parameter_device"], r["all_reduce"]) != flags[r["mode"]]: fail(f"{tag}: flags")
    if not float(r["images_per_sec"]) > 0 or not float(r["compute_ms"]) > 0: fail(f"{tag}: no speed or no compute time")

for model in ("mnist", "cifar10"):
    for mode in modes:
        for n in (1, 2):
            path = f"{work}/t-{model}-{mode}-{n}.json"
            ev = json.load(open(path))["traceEvents"]
            rows = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
            server = {"ps_cpu": "parameter server", "ps_gpu": "parameter server (GPU)"}.get(mode, "server: input, global_step")
            want_rows = {server} | {f"tower_{t}" for t in range(n)}
            if mode == "replicated_host": want_rows.add("all-reduce (ring)")
            if mode == "replicated_nccl": want_rows.add("all-reduce (NCCL)")
            if set(rows.values()) != want_rows: fail(f"{path}: rows {sorted(rows.values())}")
            by_row = {}
            for e in ev:
                if e["ph"] == "X": by_row.setdefault(rows[e["tid"]], []).append(e)
            steps = 4
            srv = [e["name"] for e in by_row[server]]
            want_srv = (["input", "average", "apply"] if mode.startswith("ps_") else ["input", "global_step"]) * steps
            if srv != want_srv: fail(f"{path}: server row {srv}")
            if mode == "replicated_nccl" and [e["name"] for e in by_row["all-reduce (NCCL)"]] != ["ncclAllReduce"] * steps:
                fail(f"{path}: NCCL row {by_row['all-reduce (NCCL)']}")
            per_step = ["waiting for input", "copy-in", "forward", "backward"]
            if mode in ("ps_cpu", "replicated_host"): per_step.append("copy-out")  # ps_gpu: all towers on the server's GPU
            if mode.startswith("replicated"): per_step += ["wait for towers", "all-reduce", "apply"]
            for t in range(n):
                evs = by_row[f"tower_{t}"]
                if [e["name"] for e in evs] != per_step * steps: fail(f"{path}: tower_{t} row {[e['name'] for e in evs][:10]}")
                for a, b in zip(evs, evs[1:]):
                    if b["ts"] + 1.0 < a["ts"] + a["dur"]: fail(f"{path}: tower_{t}: {b['name']} starts before {a['name']} ends")
                if any(e["dur"] <= 0 for e in evs if e["name"] in ("forward", "backward")): fail(f"{path}: tower_{t}: empty compute")
print(f"bench CSV and {2 * len(modes) * 2} GPU traces check out")
EOF

src=${TOWER_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [ ! -f "$src/t10k-images-idx3-ubyte.gz" ]; then
  [ -n "${TOWER_TEST_REQUIRE_GPU:-}" ] && [ "$TOWER_TEST_REQUIRE_GPU" != 0 ] &&
    fail "$src is missing (TOWER_TEST_REQUIRE_GPU=1; set TOWER_FASHION_MNIST_DIR)"
  echo "skipped the training runs: $src is missing (Debian package dataset-fashion-mnist)"
  exit 0
fi
"$tower" convert --from idx --images "$src/t10k-images-idx3-ubyte.gz" --labels "$src/t10k-labels-idx1-ubyte.gz" \
  --out "$work/fm" --num_shards 1 >/dev/null
for mode in ${modes//,/ }; do
  case $mode in
    ps_gpu) mflags="--variable_update parameter_server --local_parameter_device gpu" ;;
    replicated_nccl) mflags="--variable_update replicated --all_reduce nccl" ;;
    *) continue ;;
  esac
  # shellcheck disable=SC2086
  "$tower" train --device gpu --model mnist --data "$work/fm-*.tfrecord" --train_dir "$work/$mode" --num_towers 2 \
    --batch_size 8 --max_steps 6 --log_every 3 --min_after_dequeue 100 $mflags --log_device_placement \
    --trace "$work/$mode.json" >"$work/$mode.log" 2>&1 || { cat "$work/$mode.log"; fail "tower train in $mode"; }
  grep -q "mode $mode" "$work/$mode.log" || fail "$mode: the placement log does not name the mode"
  grep -q "step 6, loss = " "$work/$mode.log" || fail "$mode: no log line for step 6"
  [ -f "$work/$mode/model.ckpt-6" ] || fail "$mode: no checkpoint after 6 steps"
  python3 -c "import json, sys; json.load(open(sys.argv[1]))" "$work/$mode.json" || fail "$mode: the trace is not JSON"
  "$tower" train --device gpu --model mnist --data "$work/fm-*.tfrecord" --train_dir "$work/$mode" --num_towers 2 \
    --batch_size 8 --max_steps 8 --log_every 1 --min_after_dequeue 100 --resume >"$work/$mode.resume.log" 2>&1 ||
    { cat "$work/$mode.resume.log"; fail "$mode's checkpoint did not resume under ps_cpu"; }
  grep -q "resumed from .*model.ckpt-6 at step 6" "$work/$mode.resume.log" || fail "$mode: no resume line"
  echo "tower train in $mode, 6 steps, resumed under ps_cpu to step 8: ok"
done
