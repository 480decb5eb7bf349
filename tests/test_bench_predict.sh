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
#     (with every host's sum of the H x G gradients: at one host too);
#   - --predict over a matrix without a 1-tower row: the what-if takes that
#     row's forward+backward and says so; every row's break-even size is
#     recomputed from the printed figures with the updates per byte (they were
#     fixed costs: "more than 7.12 MB" at one tower); the summary line's runs
#     of tower counts match the rows (a 256-byte list was cut at N = 66); the
#     chart's legend of 4 modes fits inside its height;
#   - each table's crossover line names the first tower count of each change
#     (a later win of the server overwrote the first);
#   - bad values fail with one line and exit 2: a list naming a value twice
#     (a second row was the first's baseline: speedup 0.08x) or more than 16
#     (cut in silence), --csv and --svg naming one file, --trace a folder.
# No timings are asserted.
set -euo pipefail
tower=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$tower" bench --predict_nets vgg16,resnet50 --predict_sizes 224,32 --predict_only --device_tflops 10 \
  --predict_copy_gbps 12 --predict_hosts --predict_host_counts 1,8,256 --predict_link_gbits 10,100 \
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
hb = re.findall(r"\n(\S+ \d+x\d+) across hosts of (\d+) towers: forward\+backward ([\d.]+) ms.*?link latency ([\d.]+) us.*?sums at ([\d.e+]+) GB/s(.*?)(?=\n\S|\Z)", text, re.S)
if len(hb) != 4: fail(f"{len(hb)} host tables, want 4")
for name, G, tc, lat, sum_gbps, body in hb:
    G, tc, lat, sum_gbps = int(G), float(tc), float(lat) * 1e-3, float(sum_gbps)
    M = float(re.search(re.escape(name) + r": [\d.]+ M variables \(M = ([\d.]+) MB\)", text).group(1)) * 1e6
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+(\d+) \|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+) \| (\S+)\s+(\d+)%$", body, re.M)
    if [(r[0], r[1]) for r in rows] != [(g, h) for g in ("10", "100") for h in ("1", "8", "256")]: fail(f"{name}: host rows {rows}")
    for r in rows:
        gb, H = float(r[0]), int(r[1])
        # the gathered H x G gradients summed on every host, in order (a host of 8 towers is not free: H = 1 has it)
        want = H * G * 32 / (tc + (H - 1) * G * M / (gb * 1e9 / 8) * 1e3 + (H - 1) * lat + (H * G + 1) * M / (sum_gbps * 1e9) * 1e3) * 1e3
        if abs(float(r[7]) - want) > 0.01 * want + 1: fail(f"{name} {gb} Gb/s {H} hosts: allgather {r[7]}, formula {want:.0f}")
        if not all(int(x) > 0 for x in r[3:8]): fail(f"{name}: non-positive images/sec {r}")
print("predict tables:", len(towers), "tower tables,", len(hb), "host tables, formulas recomputed")
PY

# ---- --predict over a matrix without a 1-tower row: the what-if's inputs and its break-even sizes ----
#      (four modes, two with a predicted line: the chart's legend of 6 entries fits inside it)
"$tower" bench --models mnist --modes ps_cpu,replicated_host,ps_mpi,replicated_mpi --towers 2 --steps 2 --warmup 1 \
  --batch_size 4 --predict --predict_max_towers 40 --csv "" --svg "$work/w.svg" >"$work/w.log"
python3 - "$work/w.log" "$work/w.svg" <<'PY'
import re, sys, xml.etree.ElementTree as ET
text = open(sys.argv[1]).read()
def fail(m): print("FAIL:", m); sys.exit(1)
svg = ET.parse(sys.argv[2]).getroot()
ns = "{http://www.w3.org/2000/svg}"
height = float(svg.get("height"))
legend = [t for t in svg.iter(ns + "text") if t.text and re.match(r"(ps_cpu|replicated_host|ps_mpi|replicated_mpi)", t.text)]
if len(legend) != 6: fail(f"the chart's legend has {len(legend)} entries, want 4 measured and 2 predicted (the MPI modes have no model)")
for t in svg.iter(ns + "text"):
    if t.get("y") and float(t.get("y")) > height - 4: fail(f"chart text '{t.text}' at y={t.get('y')}, outside its height {height}")
f = re.search(r"server update ([\d.]+) ms; replica update ([\d.]+) ms \(1 thread\); moving averages ([\d.]+) ms", text)
h = re.search(r"what-if, mnist \(M = ([\d.]+) MB\): .*?forward\+backward ([\d.e+]+) ms per tower \(([^)]*)\), "
              r"host<->device ([\d.e+]+) GB/s, all-reduce ([\d.e+]+) GB/s per link, CPU reduce ([\d.e+]+) GB/s, barrier ([\d.]+) ms", text)
if not f or not h: fail("no cost model figures or what-if header")
apply_ps, opt1, ema1 = (float(x) for x in f.groups())
M, comp, source, copy, ar, red, bar = float(h[1]) * 1e6, float(h[2]), h[3], float(h[4]), float(h[5]), float(h[6]), float(h[7])
row = re.search(r"^mnist\s+ps_cpu\s+2\s+8\s.*?\|\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s", text, re.M)
if "2-tower row's: no 1-tower row ran" not in source: fail(f"the compute's source says '{source}'")
if not row or abs(float(row[1]) - comp) > 0.01 + 0.01 * comp: fail(f"what-if compute {comp} ms, the 2-tower row's fwd+bwd {row and row[1]}")
rows = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+(ring|ps)  (any size|more than ([\d.]+) MB|no size.*)$", text, re.M)
if [int(r[0]) for r in rows] != list(range(1, 41)): fail(f"what-if rows {[r[0] for r in rows]}")
for n, ps, ring, faster, words, x in rows:
    N = int(n)
    if faster != ("ring" if float(ring) < float(ps) else "ps"): fail(f"N={N}: faster {faster} for ps {ps}, ring {ring}")
    # the updates grow with the model as the copies do: per byte, like every other term
    per_byte = (2 * N / copy + (N + 1) / red - (2 * (N - 1) / N / ar if N > 1 else 0)) / 1e9 + (apply_ps - opt1 - ema1 / N) * 1e-3 / M
    fixed = (2 * N - 3) * bar * 1e-3 if N > 1 else 0.0
    want = "any size" if per_byte > 0 and fixed == 0 else "no size" if per_byte <= 0 else f"more than {fixed / per_byte / 1e6:.3f}"
    if per_byte > 0 and fixed > 0:
        got = float(x)
        if abs(got - fixed / per_byte / 1e6) > 0.15 * got + 0.0015: fail(f"N={N}: break-even {got} MB, want {fixed / per_byte / 1e6:.4f}")
    elif not words.startswith(want): fail(f"N={N}: '{words}', want '{want}'")
def runs(ns):
    out, i = [], 0
    while i < len(ns):
        j = i
        while j + 1 < len(ns) and ns[j + 1] == ns[j] + 1: j += 1
        out.append(str(ns[i]) if i == j else f"{ns[i]}-{ns[j]}")
        i = j + 1
    return ", ".join(out) or "none"
ring_at = runs([int(r[0]) for r in rows if r[3] == "ring"]); ps_at = runs([int(r[0]) for r in rows if r[3] == "ps"])
if f"the ring at N = {ring_at}; the parameter server at N = {ps_at}" not in text: fail(f"summary line, want ring {ring_at}, ps {ps_at}")
print("what-if: compute from the 2-tower row, 40 rows' break-even sizes recomputed, the summary's runs:", ring_at, "/", ps_at)
PY

# ---- the crossover line names the first tower count of each change (a later win of the server overwrote it) ----
"$tower" bench --predict_nets resnet20 --predict_sizes 32 --predict_only --device_tflops 9 --predict_allreduce_gbps 0.01 \
  >"$work/c.log"
cat "$work/p.log" >>"$work/c.log"
python3 - "$work/c.log" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def fail(m): print("FAIL:", m); sys.exit(1)
n = 0
for block in re.split(r"\n(?=\S+ \d+x\d+: )", text)[1:]:
    faster = [(int(t), w) for t, w in re.findall(r"^\s+(\d+)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+(ring|ps)  ", block, re.M)]
    first_ring = next((t for t, w in faster if w == "ring"), None)
    again = next((t for t, w in faster if w == "ps" and first_ring and t > first_ring), None)
    want = ("crossover: none up to 8 towers" if first_ring is None else
            f"crossover: the ring is ahead at {first_ring} tower(s), the parameter server again from {again}" if again else
            "crossover: none: the ring is ahead" if first_ring == 1 else f"crossover: the ring overtakes the parameter server at {first_ring} towers")
    if want not in block: fail(f"{block.split(':')[0]}: rows {faster}, want '{want}' in {re.findall(r'crossover:.*', block)}")
    n += 1
if n < 5: fail(f"{n} tower tables")
print(f"crossover lines of {n} tables agree with their rows")
PY

for bad in "--predict_hosts" "--predict_only" "--predict_nets vgg16 --predict_sizes 16 --predict_only" \
           "--predict_nets vgg16 --predict_link_gbits 0 --predict_hosts --predict_only" "--predict_nets nosuch --predict_only" \
           "--predict_nets vgg16 --device_tflops -1 --predict_only" "--models mnist,mnist" "--towers 2,1,01" \
           "--towers 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17" "--predict_nets vgg16,vgg16 --predict_only" \
           "--predict_nets vgg16 --predict_sizes 32,032 --predict_only" "--predict_link_gbits 10,10.0 --predict_nets vgg16 --predict_hosts --predict_only" \
           "--csv $work/same --svg $work/same" "--trace $work" "--trace $work/" "--trace .json" \
           "--predict_copy_gbps 1e38"; do
  set +e
  # shellcheck disable=SC2086
  "$tower" bench $bad >"$work/out" 2>"$work/err"
  rc=$?
  set -e
  [ "$rc" = 2 ] || fail "'$bad': exit $rc, want 2"
  [ "$(wc -l <"$work/err")" = 1 ] || fail "'$bad': not one line on stderr: $(cat "$work/err")"
done
echo "bad values refused with one line"

# ---- the files it wrote, named escaped: a name's control bytes do not reach the terminal ----
esc=$(printf '\033[2J\r')
"$tower" bench --models mnist --modes ps_cpu --towers 1 --steps 1 --warmup 0 --batch_size 4 --csv "$work/t${esc}.csv" \
  --svg "$work/c${esc}.svg" --trace "$work/tr${esc}.json" >"$work/esc.out" 2>"$work/esc.err" ||
  fail "bench with control bytes in its file names: $(cat -v "$work/esc.err")"
for want in "table written to $work/t\\x1b[2J\\x0d.csv" "chart written to $work/c\\x1b[2J\\x0d.svg" \
            "timelines written to $work/tr\\x1b[2J\\x0d-<model>-<mode>-<towers>.json"; do
  grep -qF -- "$want" "$work/esc.out" || fail "no '$want': $(cat -v "$work/esc.out")"
done
! grep -q "$(printf '\033')" "$work/esc.out" "$work/esc.err" || fail "a raw ESC reached the terminal: $(cat -v "$work/esc.out")"
[ -f "$work/t${esc}.csv" ] && [ -f "$work/c${esc}.svg" ] || fail "the files were not written under their names"
echo "file names said escaped"
echo "PASS"
