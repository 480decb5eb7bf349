#!/usr/bin/env bash
# test_bench_ranks.sh TOWER — the ranks dimension of `tower bench` (issue 17):
# `mpirun -np 2 tower bench --modes ps_mpi,replicated_mpi,ps_mpi_async` on loopback
#   - prints one ping-pong line (rank 0 only: one table header, not two) with
#     a positive latency and bandwidth;
#   - writes a CSV row per mode with ranks = 2, the job's global batch
#     (2 ranks x 1 tower x 4), positive images/sec, forward+backward, reduce
#     and local average; ps_mpi with push and pull and no all-gather,
#     replicated_mpi with an all-gather and no push or pull; the cost
#     model's network time positive; ps_mpi_async (--sync_replicas false) as
#     ps_mpi, with its staleness (mean and max >= 0, max within the bound
#     (R - 1)(2S + 1) = 33 of the default S = 16), which the synchronous rows
#     leave empty;
#   - ps_cpu's flags under 2 ranks run as ps_mpi, and the row says so;
#   - --ps_dedicated 1 under 3 ranks: the ps_mpi and ps_mpi_async rows have
#     1 server rank, the 2 workers' global batch, a worker's (non-zero)
#     forward+backward and local average, push and pull (and the async
#     row its staleness within the bound); replicated_mpi's row ignores it;
#   - replicated_host (one process only), --predict and --ps_dedicated 2
#     under 2 ranks (no worker left), --towers 0 and a --csv that cannot be
#     written fail with one line (the
#     ranks agree: no MPI_Abort) and a non-zero exit, never a hang;
#     replicated_host after ps_mpi fails before ps_mpi is measured; another
#     --steps on rank 1 is refused with one line naming both values; a bad
#     value, --towers 0 or --help on rank 1 alone with one line naming rank 1;
#     --help on every rank prints the usage once, exit 0.
# Sane rows, not timed assertions.  Skips (77) without mpirun or without MPI
# in the build.
set -euo pipefail
tower=$(realpath "$1")
command -v mpirun >/dev/null 2>&1 || { echo "skipped: mpirun is missing (apt-get install openmpi-bin)"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp
mpi=(mpirun --oversubscribe --bind-to none -np 2)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
probe=$("${mpi[@]}" "$tower" bench --models nosuch 2>&1 || true)
if echo "$probe" | grep -q "built without MPI"; then echo "skipped: this tower was built without MPI"; exit 77; fi
echo "$probe" | grep -q "unknown model 'nosuch'" || { echo "skipped: mpirun cannot start 2 ranks here: $probe" | head -5; exit 77; }

cd "$work"
timeout 300 "${mpi[@]}" "$tower" bench --device cpu --models mnist --modes ps_mpi,replicated_mpi,ps_mpi_async --towers 1 --batch_size 4 \
  --steps 2 --warmup 1 --csv "$work/r.csv" --svg "" >"$work/r.log" 2>"$work/r.err" || { cat "$work/r.err"; fail "the bench under 2 ranks failed"; }
cat "$work/r.log"
[ "$(grep -c '^model ' "$work/r.log")" = 2 ] || fail "not one main table and one ranks table (did every rank print?)"
grep -Eq '^mnist +ps_mpi_async +2 .* [0-9.]+/[0-9]+ *$' "$work/r.log" || fail "no ps_mpi_async row with its staleness in the ranks table"
grep -Eq '^ping-pong rank 0 <-> rank 1: latency [0-9.]*[1-9][0-9.]* us .* [0-9.]*[1-9][0-9.]* GB/s' "$work/r.log" \
  || fail "no positive ping-pong latency and bandwidth"
python3 - "$work/r.csv" <<'PY'
import csv, sys
def fail(m): print("FAIL:", m); sys.exit(1)
rows = {r["mode"]: r for r in csv.DictReader(open(sys.argv[1]))}
if set(rows) != {"ps_mpi", "replicated_mpi", "ps_mpi_async"}: fail(f"modes {list(rows)}")
for mode, r in rows.items():
    if r["ranks"] != "2" or r["global_batch"] != "8": fail(f"{mode}: ranks {r['ranks']}, global batch {r['global_batch']}")
    for k in ("images_per_sec", "compute_ms", "reduce_ms", "local_avg_ms", "network_predicted_ms"):
        if not float(r[k]) > 0: fail(f"{mode}: {k} = {r[k]}")
    if float(r["apply_ms"]) < 0: fail(f"{mode}: negative apply")
    has = {k: r[k] != "" for k in ("push_ms", "pull_ms", "allgather_ms")}
    ps = mode != "replicated_mpi"
    want = {"push_ms": ps, "pull_ms": ps, "allgather_ms": not ps}
    if has != want: fail(f"{mode}: parts {has}, want {want}")
    for k, v in has.items():
        if v and not float(r[k]) > 0: fail(f"{mode}: {k} = {r[k]}")
    stale = (r["staleness_mean"], r["staleness_max"])
    if mode == "ps_mpi_async":
        if "" in stale or not (0 <= float(stale[0]) <= float(stale[1]) <= 33): fail(f"{mode}: staleness {stale}")
    elif stale != ("", ""): fail(f"{mode}: a staleness {stale} in a synchronous row")
print("rows:", {m: round(float(r["images_per_sec"]), 1) for m, r in rows.items()}, "images/sec; ps_mpi_async staleness",
      rows["ps_mpi_async"]["staleness_mean"], "mean,", rows["ps_mpi_async"]["staleness_max"], "max")
PY

timeout 120 "${mpi[@]}" "$tower" bench --device cpu --models mnist --towers 1 --batch_size 2 --steps 1 --warmup 0 \
  --csv "$work/s.csv" --svg "" --modes ps_cpu >/dev/null
grep -q '^mnist,ps_mpi,parameter_server,mpi,.*,2,[0-9.]*,[0-9.]*,[0-9.]*,,' "$work/s.csv" || fail "ps_cpu under 2 ranks: not a ps_mpi row: $(cat "$work/s.csv")"
echo "ps_cpu's flags under 2 ranks: a ps_mpi row"

# --ps_dedicated 1 under 3 ranks: ps_mpi and ps_mpi_async with rank 0 a server only (2 workers: global batch 8), their phases the
# first worker's (rank 0 computes nothing, so a zero forward+backward would be the server's), push and pull
# between workers and server; replicated_mpi ignores it (3 workers: 12).
timeout 300 mpirun --oversubscribe --bind-to none -np 3 "$tower" bench --device cpu --models mnist --modes ps_mpi,replicated_mpi,ps_mpi_async \
  --towers 1 --batch_size 4 --steps 2 --warmup 1 --ps_dedicated 1 --csv "$work/d.csv" --svg "" >"$work/d.log" 2>"$work/d.err" ||
  { cat "$work/d.err"; fail "the bench with --ps_dedicated 1 under 3 ranks failed"; }
grep -Eq '^mnist +ps_mpi +3 +1 +1 +8 ' "$work/d.log" || { cat "$work/d.log"; fail "no ps_mpi row with 1 server and 8 examples"; }
python3 - "$work/d.csv" <<'PY'
import csv, sys
def fail(m): print("FAIL:", m); sys.exit(1)
rows = {r["mode"]: r for r in csv.DictReader(open(sys.argv[1]))}
ps, rep, asy = rows["ps_mpi"], rows["replicated_mpi"], rows["ps_mpi_async"]
for name, r in (("ps_mpi", ps), ("ps_mpi_async", asy)):
    if (r["ps_dedicated_ranks"], r["global_batch"], r["ranks"]) != ("1", "8", "3"): fail(f"{name}: {r}")
    for k in ("compute_ms", "local_avg_ms", "push_ms", "pull_ms", "network_predicted_ms", "images_per_sec"):
        if not float(r[k]) > 0: fail(f"{name} with a server rank: {k} = {r[k]} (not the first worker's?)")
if (rep["ps_dedicated_ranks"], rep["global_batch"]) != ("0", "12"): fail(f"replicated_mpi: {rep}")
# 2 workers, --max_staleness 16: the bound is (W - 1)(2S + 1) = 33.
if asy["staleness_mean"] == "" or not 0 <= float(asy["staleness_mean"]) <= float(asy["staleness_max"]) <= 33:
    fail(f"ps_mpi_async with a server rank: staleness {asy['staleness_mean']}/{asy['staleness_max']}")
print("--ps_dedicated 1: ps_mpi", round(float(ps["images_per_sec"]), 1), "img/s, a worker's forward+backward",
      ps["compute_ms"], "ms, push", ps["push_ms"], "ms, pull", ps["pull_ms"], "ms")
PY

for bad in "--modes replicated_host" "--modes ps_mpi --predict" "--modes ps_mpi --ps_dedicated 2" "--towers 0" \
  "--modes ps_mpi --csv $work/none/x.csv"; do
  set +e
  # shellcheck disable=SC2086
  timeout 120 "${mpi[@]}" "$tower" bench --device cpu --models mnist --towers 1 --batch_size 2 --steps 1 --warmup 0 \
    --csv "" --svg "" $bad >"$work/out" 2>"$work/err"
  rc=$?
  set -e
  [ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "'$bad' under 2 ranks: exit $rc"
  [ "$(grep -c '^tower bench: ' "$work/err")" = 1 ] && ! grep -q "MPI_ABORT\|ends the job" "$work/err" ||
    fail "'$bad': not one line saying why (every rank agrees, no MPI_Abort): $(cat "$work/err")"
  echo "'$bad' refused: $(grep -m1 'tower bench: ' "$work/err")"
done
cat >"$work/rank1.sh" <<'SH'
#!/usr/bin/env bash
# rank1.sh TOWER EXTRA ARGS...: tower bench ARGS, plus EXTRA on rank 1
tower=$1 extra=$2
shift 2
if [ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ]; then exec "$tower" bench "$@" $extra; else exec "$tower" bench "$@"; fi
SH
# A flag rank 1 alone is given (the matrix runs in step: another --steps left rank 0 waiting in a collective for
# ever), or a refusal of rank 1 alone (a bad value, --towers 0, --help): one line from rank 1, named (its own
# refusals did not name it); rank 0's --help is the job's usage (rank 1 ended with 2 beside it).
for case in "--steps 3|tower bench: rank 1 of 2 was given --steps 3 but rank 0 --steps 1: every rank of the job needs the same flags \\(docs/hosts.md\\)" \
  "--steps=-3|tower bench: rank 1 of 2: --steps -3: expected an integer .*" \
  "--help|tower bench: rank 1 of 2: --help was given to this rank but not to rank 0: every rank of the job needs the same flags \\(docs/hosts.md\\)" \
  "--towers 0|tower bench: rank 1 of 2: --towers: '0' is not a tower count in \\[1, [0-9]+\\]"; do
  set +e
  timeout 120 "${mpi[@]}" bash "$work/rank1.sh" "$tower" "${case%%|*}" --device cpu --models mnist --towers 1 \
    --batch_size 2 --steps 1 --warmup 0 --csv "" --svg "" --modes ps_mpi >"$work/out" 2>"$work/err"
  rc=$?
  set -e
  [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$(grep -c '^tower bench: ' "$work/err")" = 1 ] &&
    grep -Eq "^${case#*|}\$" "$work/err" && ! grep -q "MPI_ABORT\|ends the job" "$work/err" ||
    fail "'${case%%|*}' on rank 1 only: exit $rc, $(cat "$work/err")"
  echo "'${case%%|*}' on rank 1 only: $(grep '^tower bench: ' "$work/err")"
done
set +e
timeout 120 "${mpi[@]}" "$tower" bench --help >"$work/out" 2>"$work/err"
rc=$?
set -e
[ "$rc" = 0 ] && [ "$(grep -c '^usage: tower bench' "$work/out")" = 1 ] && [ ! -s "$work/err" ] ||
  fail "--help under 2 ranks: exit $rc, $(head -3 "$work/out"; cat "$work/err")"
echo "--help under 2 ranks: the usage once, exit 0"
# A one-process mode after one that runs: refused before the first is measured (it was measured, then the run
# ended at the second with no table and no CSV).
set +e
timeout 120 "${mpi[@]}" "$tower" bench --device cpu --models mnist --towers 1 --batch_size 2 --steps 1 --warmup 0 \
  --csv "" --svg "" --modes ps_mpi,replicated_host >"$work/out" 2>"$work/err"
rc=$?
set -e
[ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "ps_mpi,replicated_host under 2 ranks: exit $rc"
[ "$(grep -c '^tower bench: ' "$work/err")" = 1 ] &&
  grep -q "tower bench: mnist, replicated_host, 1 tower(s): .*runs in one process.* (nothing measured)" "$work/err" &&
  ! grep -q "run 1/" "$work/out" || fail "ps_mpi,replicated_host: $(cat "$work/out" "$work/err")"
echo "ps_mpi,replicated_host refused before measuring: $(grep -m1 'tower bench: ' "$work/err")"
echo "PASS"
