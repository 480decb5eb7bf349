#!/usr/bin/env bash
# test_bench_predict.sh TOWER — `tower bench --predict_nets` (docs/modes.md,
# "--predict_nets" and "Across hosts"), with an assumed device rate so that
# nothing is trained (only the host rates are measured):
#   - vgg16 and resnet50 at 224 and 32: four tower tables of 1, 2, 4, 8
#     towers with positive images/sec for both designs, a crossover line, the
#     inputs named (assumed / measured / given); the variables and FLOPs
#     are the graph's (vgg16 224x224: 138,357,544 variables, 553.4 MB,
#     92.82 GFLOP per image trained; resnet50 224x224: 23.28 GFLOP);
#     forward+backward = GFLOP x batch / --device_tflops; each row's
#     images/sec = towers x batch / its step time, both designs;
#   - --predict_hosts: a row per link speed x host count, and the allgather
#     column recomputed from the printed inputs by the formula of
#     docs/modes.md within 1% (so a changed formula is caught);
#   - bad values fail with one line and exit 2.
# No timings are asserted.
set -euo pipefail
tower=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$tower" bench --predict_nets vgg16,resnet50 --predict_sizes 224,32 --predict_only --device_tflops 10 \
  --predict_copy_gbps 12 --predict_hosts --predict_host_counts 8,256 --predict_link_gbits 10,100 \
  --batch_size 32 >"$work/p.log"
python3 - "$work/p.log" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def fail(m): print("FAIL:", m); sys.exit(1)
blocks = re.split(r"\n(?=(?:vgg16|resnet50) \d+x\d+: )", text)
towers = {b.split(":")[0]: b for b in blocks[1:]}
if set(towers) != {"vgg16 224x224", "vgg16 32x32", "resnet50 224x224", "resnet50 32x32"}: fail(f"tower tables {list(towers)}")
for name, b in towers.items():
    rows = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(ring|ps)  (any size|more than [\d.]+ MB|no size.*)$", b, re.M)
    if [r[0] for r in rows] != ["1", "2", "4", "8"]: fail(f"{name}: tower rows {rows}")
    for r in rows:
        if not all(float(x) > 0 for x in r[1:5]): fail(f"{name}: non-positive figure {r}")
    for r in rows:
        for step, ips in ((float(r[1]), float(r[2])), (float(r[3]), float(r[4]))):
            # (the step is printed to 0.1 ms, so the recomputed rate carries 0.05 / step of rounding)
            if abs(ips - int(r[0]) * 32 / step * 1e3) > 0.06 + 1e-3 * ips + ips * 0.05 / step: fail(f"{name}: {ips} img/s for a {step} ms step of {r[0]} towers")
    if "crossover:" not in b: fail(f"{name}: no crossover line")
    for word in ("assumed 10.0 TFLOP/s", "given (--predict_copy_gbps)", "measured (2-rank host ring)", "measured"):
        if word not in b: fail(f"{name}: the inputs do not say '{word}'")
    gflop = float(re.search(r"([\d.]+) GFLOP per image trained", b).group(1))
    tc = float(re.search(r"forward\+backward ([\d.]+) ms per tower", b).group(1))
    if abs(tc - gflop * 32 / 10e3 * 1e3) > 0.06 + 1e-3 * tc: fail(f"{name}: forward+backward {tc} ms, want {gflop}*32/10 TFLOP/s")
v = towers["vgg16 224x224"]
if "138.4 M variables (M = 553.4 MB), 92.82 GFLOP" not in v: fail("vgg16 224x224: variables or FLOPs are not Keras's VGG16's")
if "23.28 GFLOP per image trained" not in towers["resnet50 224x224"]: fail("resnet50 224x224: FLOPs")
# hosts
hb = re.findall(r"\n(\S+ \d+x\d+) across hosts of (\d+) towers: forward\+backward ([\d.]+) ms.*?link latency ([\d.]+) us(.*?)(?=\n\S|\Z)", text, re.S)
if len(hb) != 4: fail(f"{len(hb)} host tables, want 4")
for name, G, tc, lat, body in hb:
    G, tc, lat = int(G), float(tc), float(lat) * 1e-3
    M = float(re.search(re.escape(name) + r": [\d.]+ M variables \(M = ([\d.]+) MB\)", text).group(1)) * 1e6
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+(\d+) \|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+) \| (\S+)\s+(\d+)%$", body, re.M)
    if [(r[0], r[1]) for r in rows] != [("10", "8"), ("10", "256"), ("100", "8"), ("100", "256")]: fail(f"{name}: host rows {rows}")
    for r in rows:
        gb, H = float(r[0]), int(r[1])
        want = H * G * 32 / (tc + (H - 1) * G * M / (gb * 1e9 / 8) * 1e3 + (H - 1) * lat) * 1e3
        if abs(float(r[7]) - want) > 0.01 * want + 1: fail(f"{name} {gb} Gb/s {H} hosts: allgather {r[7]}, formula {want:.0f}")
        if not all(int(x) > 0 for x in r[3:8]): fail(f"{name}: non-positive images/sec {r}")
print("predict tables:", len(towers), "tower tables,", len(hb), "host tables, formulas recomputed")
PY

for bad in "--predict_hosts" "--predict_only" "--predict_nets vgg16 --predict_sizes 16 --predict_only" \
           "--predict_nets vgg16 --predict_link_gbits 0 --predict_hosts --predict_only" "--predict_nets nosuch --predict_only" \
           "--predict_nets vgg16 --device_tflops -1 --predict_only"; do
  set +e
  # shellcheck disable=SC2086
  "$tower" bench $bad >"$work/out" 2>"$work/err"
  rc=$?
  set -e
  [ "$rc" = 2 ] || fail "'$bad': exit $rc, want 2"
  [ "$(wc -l <"$work/err")" = 1 ] || fail "'$bad': not one line on stderr: $(cat "$work/err")"
done
echo "bad values refused with one line"
echo "PASS"
