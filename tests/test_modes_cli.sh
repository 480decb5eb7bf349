#!/usr/bin/env bash
# test_modes_cli.sh TOWER — the modes from the command line:
#   - `tower bench` on a tiny matrix (2 models x 2 modes x 1,2 towers, run
#     twice, with --predict and --trace) prints its table and writes a CSV with the
#     documented header and one row per configuration, an SVG that parses as
#     XML with a line per model x mode (measured and predicted, both at the
#     median step; the table's noisy-machine warning when it printed one), and one
#     Chrome trace per configuration;
#   - every trace is valid JSON with a row per tower, the parameter server's
#     row (average, apply) or the all-reduce row, a marker per step, every
#     phase once per step per tower, in order within a step;
#   - `tower train --variable_update replicated --trace` on Fashion-MNIST's
#     test set logs its mode and each CPU tower's conv paths
#     (--log_device_placement) and writes a trace; a tower's OpenMP threads
#     are the cores, or OMP_NUM_THREADS where it says fewer;
#   - bad mode flags, GPU modes on CPU towers (--device cpu) and an
#     unwritable trace fail with one line on stderr and a non-zero exit.
set -euo pipefail
tower=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$tower" bench --device cpu --models mnist,cifar10 --modes ps_cpu,replicated/host --towers 1,2 --batch_size 2 --steps 3 --warmup 1 \
  --repeat 2 --csv "$work/bench.csv" --svg "$work/bench.svg" --trace "$work/t.json" --predict >"$work/bench.log"
grep -q "^model .*img/s.*fwd+bwd.*reduce.*apply" "$work/bench.log" || fail "no table header in the bench output"
grep -q "what-if, mnist" "$work/bench.log" || fail "--predict printed no what-if table"

python3 - "$work" <<'EOF'
import csv, json, re, sys, xml.etree.ElementTree as ET
work = sys.argv[1]
def fail(msg):
    print("FAIL:", msg); sys.exit(1)

# ---- the CSV ----
header = ("model,mode,variable_update,local_parameter_device,all_reduce,towers,batch_per_tower,global_batch,steps,"
          "images_per_sec,step_ms_median,step_ms_p10,step_ms_p90,speedup,scaling_efficiency,input_ms,copy_ms,"
          "compute_ms,reduce_ms,apply_ms,other_ms,predicted_step_ms,cores,repeats,images_per_sec_min,"
          "images_per_sec_max,ranks,local_avg_ms,push_ms,pull_ms,allgather_ms,network_predicted_ms,"
          "staleness_mean,staleness_max,ps_dedicated_ranks").split(",")
with open(f"{work}/bench.csv") as f:
    rows = list(csv.reader(f))
if rows[0] != header: fail(f"CSV header {rows[0]}")
recs = [dict(zip(header, r)) for r in rows[1:]]
want = {(m, mode, t) for m in ("mnist", "cifar10") for mode in ("ps_cpu", "replicated_host") for t in ("1", "2")}
if {(r["model"], r["mode"], r["towers"]) for r in recs} != want or len(recs) != 8: fail(f"CSV rows {rows[1:]}")
for r in recs:
    tag = f'{r["model"]} {r["mode"]} {r["towers"]}'
    if int(r["global_batch"]) != 2 * int(r["towers"]) or r["steps"] != "3": fail(f"{tag}: batch/steps {r}")
    ips, med, p10, p90 = (float(r[k]) for k in ("images_per_sec", "step_ms_median", "step_ms_p10", "step_ms_p90"))
    if not (ips > 0 and 0 < p10 <= med <= p90): fail(f"{tag}: images/sec {ips}, step {p10} <= {med} <= {p90}?")
    lo, hi = float(r["images_per_sec_min"]), float(r["images_per_sec_max"])
    if r["repeats"] != "2" or not lo <= ips <= hi: fail(f"{tag}: {r['repeats']} runs, {lo} <= {ips} <= {hi}?")
    for k in ("input_ms", "copy_ms", "compute_ms", "reduce_ms", "apply_ms"):
        if float(r[k]) < 0: fail(f"{tag}: negative {k}")
    if float(r["compute_ms"]) <= 0: fail(f"{tag}: no forward+backward time")
    if float(r["predicted_step_ms"]) <= 0: fail(f"{tag}: no prediction")
    if r["towers"] == "1" and abs(float(r["speedup"]) - 1) > 1e-9: fail(f"{tag}: speedup of one tower {r['speedup']}")
    expect = ("replicated", "host") if r["mode"] == "replicated_host" else ("parameter_server", "auto")
    if (r["variable_update"], r["all_reduce"]) != expect: fail(f"{tag}: flags {r['variable_update']} {r['all_reduce']}")
    if r["mode"] == "replicated_host" and float(r["copy_ms"]) > float(r["compute_ms"]):
        fail(f"{tag}: replicated towers copy more than they compute ({r['copy_ms']} ms): the variables were copied in")

# ---- the SVG ----
svg = ET.parse(f"{work}/bench.svg").getroot()
ns = "{http://www.w3.org/2000/svg}"
if svg.tag != ns + "svg": fail(f"SVG root {svg.tag}")
lines = svg.findall(f".//{ns}polyline")
if len(lines) != 8: fail(f"SVG: {len(lines)} lines, expected 2 models x 2 modes x (measured, predicted)")
for l in lines:
    if len(l.get("points").split()) != 2: fail(f"SVG line with points {l.get('points')}")
# Measured points are the global batch over the median step, the statistic the cost model predicts
# (they were the mean throughput, compared with a predicted median step).
for c in svg.iter(ns + "circle"):
    title = c.find(ns + "title").text
    m = re.match(r"(\S+) (\d+) tower\(s\): ([0-9.]+) images/sec at the median step", title)
    if not m: fail(f"SVG point title {title!r}")
    cands = [r for r in recs if r["mode"] == m.group(1) and r["towers"] == m.group(2)
             and abs(float(m.group(3)) - int(r["global_batch"]) / (float(r["step_ms_median"]) * 1e-3)) <= 0.001 * float(m.group(3)) + 0.1]
    if not cands: fail(f"SVG point {title!r} is not global_batch / step_ms_median of its CSV row")
texts = " ".join(t.text or "" for t in svg.iter(ns + "text"))
for word in ("mnist", "cifar10", "ps_cpu (measured)", "replicated_host (cost model)", "towers", "images/sec"):
    if word not in texts: fail(f"SVG has no text '{word}'")
# The table's noisy-machine warning is carried into the chart.
noisy = "other work is running" in open(f"{work}/bench.log").read()
if noisy != ("figures are noisy" in texts): fail(f"SVG noisy-machine warning: table {noisy}, chart {'figures are noisy' in texts}")

# ---- the traces ----
tower_phases = ["copy-in", "forward", "backward", "copy-out"]
for model in ("mnist", "cifar10"):
    for mode in ("ps_cpu", "replicated_host"):
        for n in (1, 2):
            path = f"{work}/t-{model}-{mode}-{n}.json"
            ev = json.load(open(path))["traceEvents"]
            rows = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
            want_rows = {f"tower_{t}" for t in range(n)}
            want_rows.add("parameter server" if mode == "ps_cpu" else "server: input, global_step")
            if mode == "replicated_host": want_rows.add("all-reduce (ring)")
            if set(rows.values()) != want_rows: fail(f"{path}: rows {sorted(rows.values())}")
            markers = [e["name"] for e in ev if e["ph"] == "i"]
            if markers != ["step 1", "step 2", "step 3", "step 4"]: fail(f"{path}: markers {markers}")
            spans = [e for e in ev if e["ph"] == "X"]
            if any(e["dur"] < 0 or e["ts"] < 0 for e in spans): fail(f"{path}: a negative span")
            by_row = {}
            for e in spans: by_row.setdefault(rows[e["tid"]], []).append(e)
            server = [e["name"] for e in by_row[[r for r in want_rows if "server" in r][0]]]
            want_server = ["input", "average", "apply"] if mode == "ps_cpu" else ["input", "global_step"]
            if server != want_server * 4: fail(f"{path}: server row {server}")
            if mode == "replicated_host" and n == 2 and len(by_row["all-reduce (ring)"]) != 4:
                fail(f"{path}: all-reduce row {by_row['all-reduce (ring)']}")
            for t in range(n):
                names = [e["name"] for e in by_row[f"tower_{t}"]]
                per_step = ["waiting for input"] + tower_phases
                if mode == "replicated_host": per_step += ["wait for towers", "all-reduce", "apply"]
                if names != per_step * 4: fail(f"{path}: tower_{t} row {names[:12]}")
                ev_t = by_row[f"tower_{t}"]
                for a, b in zip(ev_t, ev_t[1:]):
                    if b["ts"] + 1.0 < a["ts"] + a["dur"]: fail(f"{path}: tower_{t}: {b['name']} starts before {a['name']} ends")
print("bench CSV, SVG and 8 traces check out")
EOF

# ---- tower train with a mode and a trace, on Fashion-MNIST's test set ----
src=/usr/share/datasets/fashion-mnist
if [ -f "$src/t10k-images-idx3-ubyte.gz" ]; then
  "$tower" convert --from idx --images "$src/t10k-images-idx3-ubyte.gz" --labels "$src/t10k-labels-idx1-ubyte.gz" \
    --out "$work/fm" --num_shards 1 >/dev/null
  "$tower" train --model mnist --data "$work/fm-*.tfrecord" --train_dir "$work/train" --num_towers 2 --batch_size 4 \
    --max_steps 6 --log_every 3 --min_after_dequeue 100 --variable_update replicated --all_reduce host \
    --log_device_placement --trace "$work/train.json" >"$work/train.log" 2>&1 ||
    { cat "$work/train.log"; fail "tower train --variable_update replicated failed"; }
  grep -q "mode replicated_host" "$work/train.log" || fail "the placement log does not name the mode"
  # Each CPU tower's conv layers, each pass's path (model/conv_algo.h): mnist's conv1 and conv2, nothing else;
  # conv2 on F(4x4, 5x5), conv1's backward weights on the first layer's direct kernels.
  python3 - "$work/train.log" <<'EOF' || fail "the placement log does not give each conv layer's paths"
import re, sys
path = r"(oneDNN Winograd|Winograd F\(2x2,3x3\)|Winograd F\(4x4,3x3\)|Winograd F\(4x4,5x5\)|oneDNN direct|direct \(first layer\)|loops)"
one = re.compile(f"{path}, every pass|forward {path}, backward data {path}, backward weights {path}")
for t in (0, 1):
    line = [l for l in open(sys.argv[1]) if f"tower_{t}: conv algorithms: " in l]
    assert len(line) == 1, f"tower_{t}: {len(line)} lines"
    layers = [x.split(": ", 1) for x in line[0].split("conv algorithms: ", 1)[1].strip().split(" | ")]
    assert [n for n, _ in layers] == ["conv1", "conv2"], layers
    assert all(one.fullmatch(v) for _, v in layers), layers
    # conv2 (5x5, 32 -> 64 channels) on model/winograd.c's F(4x4, 5x5) whatever the CPU (conv_algo.c).
    assert layers[1][1] == "Winograd F(4x4,5x5), every pass", layers
    # conv1 (one channel in, 5x5): backward weights on model/conv_first.c's direct kernels on every CPU (its
    # forward too with AVX-512: conv_algo.c's conv_cpu_first).
    assert layers[0][1].endswith("backward weights direct (first layer)"), layers
EOF
  grep -q "step 6, loss = " "$work/train.log" || fail "no log line for step 6"
  [ -f "$work/train/model.ckpt-6" ] || fail "no checkpoint after 6 replicated steps"
  python3 -c "
import json, sys
ev = json.load(open(sys.argv[1]))['traceEvents']
n = sum(1 for e in ev if e['ph'] == 'X' and e['name'] == 'all-reduce')
assert n == 12, f'{n} all-reduce spans, expected 2 towers x 6 steps'
" "$work/train.json" || fail "the training trace"
  echo "tower train --variable_update replicated --trace: ok"
  # A CPU tower's threads: the cores (as OpenMP sees them: nproc), or OMP_NUM_THREADS when it says fewer.
  for omp in "" 1; do
    rm -rf "$work/train1"
    env ${omp:+OMP_NUM_THREADS=$omp} "$tower" train --model mnist --data "$work/fm-*.tfrecord" --train_dir "$work/train1" \
      --batch_size 4 --max_steps 1 --min_after_dequeue 100 --log_device_placement >"$work/train1.log" 2>&1 ||
      { cat "$work/train1.log"; fail "tower train${omp:+ under OMP_NUM_THREADS=$omp} failed"; }
    want=${omp:-$(nproc)}
    grep -q "tower_0: cpu backend, .*, $want OpenMP thread(s)" "$work/train1.log" ||
      fail "${omp:+OMP_NUM_THREADS=$omp: }the log does not give tower_0 $want OpenMP thread(s): $(grep 'tower_0: cpu' "$work/train1.log")"
  done
  # The server's threads with as many towers as cores (OMP_NUM_THREADS=2, 2 towers): every thread where idle OpenMP
  # threads sleep (tower's own OMP_WAIT_POLICY=passive, or GOMP_SPINCOUNT=0), one where they would spin on a
  # tower's core (OMP_WAIT_POLICY=active, a GOMP_SPINCOUNT above 0).
  for policy in "" OMP_WAIT_POLICY=active GOMP_SPINCOUNT=0 GOMP_SPINCOUNT=1000; do
    rm -rf "$work/train2"
    env OMP_NUM_THREADS=2 $policy "$tower" train --model mnist --data "$work/fm-*.tfrecord" --train_dir "$work/train2" \
      --num_towers 2 --batch_size 4 --max_steps 1 --min_after_dequeue 100 --log_device_placement >"$work/train2.log" 2>&1 ||
      { cat "$work/train2.log"; fail "tower train with 2 towers${policy:+ under $policy} failed"; }
    case "$policy" in *active|*=1000) want=1 ;; *) want=2 ;; esac
    grep -q "applied on /cpu:0 by $want OpenMP thread(s)" "$work/train2.log" ||
      fail "${policy:-the default wait policy}: the server should have $want OpenMP thread(s): $(grep 'applied on' "$work/train2.log")"
  done
  echo "tower train: the server's OpenMP threads under each wait policy: ok"
  # ps_cpu's CPU towers read the master variables in place (bound at open), not copied in each step.
  grep -q "mode ps_cpu: the variables read in place by the towers" "$work/train2.log" ||
    fail "ps_cpu's CPU towers should read the variables in place: $(grep 'mode ps_cpu' "$work/train2.log")"
else
  echo "skipped the training run: $src is missing (Debian package dataset-fashion-mnist)"
fi

# ---- errors: one line, non-zero exit ----
expect_error() { # expect_error CODE PATTERN ARGS...
  local code=$1 pattern=$2
  shift 2
  set +e
  "$tower" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  set -e
  [ "$rc" -eq "$code" ] || fail "tower $* exited $rc, expected $code ($(cat "$work/err"))"
  [ "$(wc -l <"$work/err")" -eq 1 ] || fail "tower $*: expected one line on stderr, got: $(cat "$work/err")"
  grep -q -- "$pattern" "$work/err" || fail "tower $*: '$(cat "$work/err")' does not say '$pattern'"
}
expect_error 2 "--variable_update 'mirrored'" train --train_dir "$work/e" --variable_update mirrored
expect_error 2 "--all_reduce 'gloo'" train --train_dir "$work/e" --variable_update replicated --all_reduce gloo
expect_error 1 "needs GPU towers\|needs NCCL" train --train_dir "$work/e" --device cpu --local_parameter_device gpu
expect_error 1 "needs GPU towers\|needs NCCL" train --train_dir "$work/e" --device cpu --variable_update replicated --all_reduce nccl
expect_error 1 "needs GPU towers\|needs NCCL" bench --device cpu --modes ps_gpu --models mnist --towers 1 --csv "" --svg ""
expect_error 1 "needs GPU towers\|needs NCCL" bench --device cpu --modes replicated/nccl --models mnist --towers 1 --csv "" --svg ""
# NCCL across ranks: the same refusal, by its own flag value and by name
expect_error 1 "needs GPU towers\|needs NCCL" train --train_dir "$work/e" --device cpu --variable_update replicated --all_reduce nccl_mpi
expect_error 1 "needs GPU towers\|needs NCCL" bench --device cpu --modes replicated_nccl_mpi --models mnist --towers 1 --csv "" --svg ""
expect_error 2 "unknown mode 'allreduce'" bench --modes allreduce
expect_error 2 "'0' is not a tower count" bench --towers 0
expect_error 2 "unknown model 'resnet'" bench --models resnet
expect_error 1 "cannot create the file" bench --models mnist --towers 1 --steps 1 --warmup 0 --batch_size 1 --csv "" --svg "" --trace "$work/no/such/dir/t.json"
expect_error 1 "cannot create the file" bench --models mnist --towers 1 --steps 1 --warmup 0 --batch_size 1 --svg "" --csv "$work/no/such/dir/b.csv"
echo "mode flag errors: one line each"
