#!/usr/bin/env bash
# run_memory_bench.sh — peak memory of `tower train` does not grow with the data set.
#
# Generates a synthetic training set of --n_mb MiB (bench/gen_records: 64x64x3
# uint8 images, 8 files) and one 10x smaller (a tenth of the records, same
# files), trains the cifar10 model (random 24x24 crops) over each for one
# epoch with the same configuration, and records each run's peak RSS (the
# child's ru_maxrss, read by python3 after it exits: every byte it ever had
# resident, final checkpoint included).  The bound is the one `tower train
# --log_device_placement` prints (trainer_max_n_bytes, train/trainer.h).
# Checks: both peaks within the bound, and the full set's peak at most
# --max_growth_mib above the tenth's.  With --check_response, two short runs
# on the full set (--response_steps steps each) differ only in the shuffle
# buffer, --min_after_dequeue against 8192 records more: the larger must
# raise the peak by at least 80% of what it adds to the bound (96 MiB of
# 64x64x3 records), so the measurement sees a growth of that size and a
# per-record leak of it would be caught.  (The rise is a little below the
# buffer's size: the smaller run's peak can lie in a phase without a full
# buffer, the final checkpoint.  On a 30 MiB tenth the response was only
# 13 MiB and that offset plus noise failed a CI run at 9.5 of 10.4 MiB.)  Every
# run's shuffle buffer must fit in its set several times over, or the
# smaller set would not fill it and the comparison would flatter.
# With --runs N each configuration trains N times: the bound checks take the
# highest peak of the N, the growth and response checks the lowest (a peak
# only ever gains noise, from allocator arenas and pages touched under CPU
# contention: two runs of one configuration differed by up to 27 MiB on a
# loaded 2-core machine, and the lowest of two separates a real growth of
# 8 MiB from that).
#
# usage: bench/run_memory_bench.sh [--build DIR | --tower BIN --gen BIN] [--dir DATA_DIR]
#            [--n_mb 2048] [--min_after_dequeue 4000] [--image 64] [--max_growth_mib 8]
#            [--check_response] [--response_steps 20] [--runs N] [--keep]
# Data goes to --dir (default: a new directory under ${TMPDIR:-/tmp}), removed
# at the end unless --keep.  Exit 0: checks passed; 1: a check failed or a
# run failed; 77: python3 is missing (the measurement needs it).
set -euo pipefail

build=build
tower=""
gen=""
dir=""
n_mb=2048
min_after_dequeue=4000
image=64
max_growth_mib=8
check_response=0
response_steps=20
response_records=8192
runs=1
keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --tower) tower=$2; shift 2 ;;
    --gen) gen=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --n_mb) n_mb=$2; shift 2 ;;
    --min_after_dequeue) min_after_dequeue=$2; shift 2 ;;
    --image) image=$2; shift 2 ;;
    --max_growth_mib) max_growth_mib=$2; shift 2 ;;
    --check_response) check_response=1; shift ;;
    --response_steps) response_steps=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "run_memory_bench: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
tower=${tower:-$build/cmd/tower}
gen=${gen:-$build/bench/gen_records}
for b in "$tower" "$gen"; do
  [ -x "$b" ] || { echo "run_memory_bench: $b is not built (cmake --build $build)" >&2; exit 1; }
done
if ! command -v python3 >/dev/null; then
  echo "skipped: python3 is needed to read the peak RSS (getrusage)"
  exit 77
fi

made_dir=0
if [ -z "$dir" ]; then
  dir=$(mktemp -d "${TMPDIR:-/tmp}/tower_memory.XXXXXX")
  made_dir=1
fi
cleanup() {
  if [ "$keep" = 0 ]; then
    rm -rf "$dir/full" "$dir/tenth" "$dir/train_"*
    [ "$made_dir" = 1 ] && rmdir "$dir" 2>/dev/null || true
  fi
}
trap cleanup EXIT
mkdir -p "$dir"

# gen_records prints "gen_records: N records of HxWxC, B bytes in F files under D".
t0=$(date +%s.%N)
rm -rf "$dir/full" "$dir/tenth"
line=$("$gen" --out_dir "$dir/full" --n_mb "$n_mb" --height "$image" --width "$image" --depth 3)
full_records=$(echo "$line" | awk '{print $2}')
full_bytes=$(echo "$line" | awk '{print $6}')
tenth_records=$((full_records / 10))
line=$("$gen" --out_dir "$dir/tenth" --num_records "$tenth_records" --height "$image" --width "$image" --depth 3)
tenth_bytes=$(echo "$line" | awk '{print $6}')
gen_sec=$(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(date +%s.%N)")

# run NAME DATA_DIR MIN_AFTER_DEQUEUE [MAX_STEPS] -> "peak_kib bound_mib steps seconds"
# (without MAX_STEPS: one epoch)
run() {
  local name=$1 data=$2 mad=$3 max_steps=${4:-1000000000} td="$dir/train_$1" log="$dir/train_$1.log"
  local rc=0
  rm -rf "$td"
  python3 - "$log" "$tower" train --model cifar10 --data "$data/*.tfrecord" --num_epochs 1 \
      --max_steps "$max_steps" --batch_size 128 --min_after_dequeue "$mad" --train_dir "$td" \
      --log_every 100 --log_device_placement --no_progress <<'PY' || rc=$?
import resource, subprocess, sys, time
log, cmd = sys.argv[1], sys.argv[2:]
t0 = time.monotonic()
with open(log, "w") as f:
    rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
secs = time.monotonic() - t0
with open(log, "a") as f:
    f.write("PEAK_RSS_KIB %d\nWALL_SEC %.1f\nEXIT %d\n" % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, secs, rc))
sys.exit(rc)
PY
  if [ $rc -ne 0 ]; then
    echo "run_memory_bench: training on $name failed (exit $rc); its log:" >&2
    tail -5 "$log" >&2
    return 1
  fi
  local peak bound steps secs
  peak=$(awk '/^PEAK_RSS_KIB/ {print $2}' "$log")
  secs=$(awk '/^WALL_SEC/ {print $2}' "$log")
  bound=$(grep -o 'memory bound [0-9.]* MiB' "$log" | awk '{print $3}')
  steps=$(grep -o 'done at step [0-9]*' "$log" | awk '{print $4}')
  [ -n "$bound" ] && [ -n "$steps" ] || { echo "run_memory_bench: no bound or final step in $log" >&2; return 1; }
  echo "$peak $bound $steps $secs"
}

# runs NAME DATA_DIR MIN_AFTER_DEQUEUE [MAX_STEPS] -> "lowest_peak_kib highest_peak_kib bound_mib steps seconds" over --runs runs
runs_of() {
  local lo="" hi="" peak bound steps secs
  for _ in $(seq 1 "$runs"); do
    read -r peak bound steps secs < <(run "$@") || true
    [ -n "${peak:-}" ] || return 1
    if [ -z "$lo" ] || [ "$peak" -lt "$lo" ]; then lo=$peak; fi
    if [ -z "$hi" ] || [ "$peak" -gt "$hi" ]; then hi=$peak; fi
  done
  echo "$lo $hi $bound $steps $secs"
}

read -r full_low full_peak full_bound full_steps full_sec < <(runs_of full "$dir/full" "$min_after_dequeue")
read -r tenth_low tenth_peak tenth_bound tenth_steps tenth_sec < <(runs_of tenth "$dir/tenth" "$min_after_dequeue")
[ -n "${full_peak:-}" ] && [ -n "${tenth_peak:-}" ] || exit 1
bound_line=$(grep -o 'memory bound.*' "$dir/train_full.log")

mib() { python3 -c "import sys; print('%.1f' % (int(sys.argv[1]) / 1024.0))" "$1"; }
full_mib=$(mib "$full_peak")       # the highest of the runs: the bound checks and the table
tenth_mib=$(mib "$tenth_peak")
full_low_mib=$(mib "$full_low")    # the lowest: the growth and response checks
tenth_low_mib=$(mib "$tenth_low")
capacity=$(grep -o 'shuffle capacity [0-9]*' "$dir/train_full.log" | awk '{print $3}')
echo "tower train --model cifar10 --batch_size 128 --num_epochs 1 --min_after_dequeue $min_after_dequeue" \
     "(shuffle capacity $capacity), ${image}x${image}x3 images cropped to 24x24; $(nproc) cores"
echo "generated both sets in $gen_sec s"
echo "| data set | records | MiB on disk | steps | train s | peak RSS MiB | bound MiB | peak / bound |"
echo "|---|---|---|---|---|---|---|---|"
python3 - "$full_records" "$full_bytes" "$full_steps" "$full_sec" "$full_mib" "$full_bound" \
          "$tenth_records" "$tenth_bytes" "$tenth_steps" "$tenth_sec" "$tenth_mib" "$tenth_bound" <<'PY'
import sys
a = sys.argv[1:]
for name, (rec, nb, steps, sec, peak, bound) in (("full", a[0:6]), ("tenth", a[6:12])):
    print("| %s | %s | %.0f | %s | %s | %s | %s | %.2f |" % (name, rec, int(nb) / 2**20, steps, sec, peak, bound,
                                                           float(peak) / float(bound)))
PY
echo "bound: $bound_line"

fail=0
verdict() { # verdict CONDITION(python expr) MESSAGE
  if python3 -c "import sys; sys.exit(0 if ($1) else 1)"; then echo "ok: $2"; else echo "FAIL: $2"; fail=1; fi
}
# The bound's only measured part (what is resident when trainer_open begins:
# code and libraries) differs between two processes by a few pages.
verdict "abs($full_bound - $tenth_bound) <= 1.0" "the bound does not depend on the data ($full_bound and $tenth_bound MiB)"
verdict "$full_mib <= $full_bound" "full set: peak $full_mib MiB within the bound $full_bound MiB"
verdict "$tenth_mib <= $tenth_bound" "tenth: peak $tenth_mib MiB within the bound $tenth_bound MiB"
growth=$(python3 -c "print('%.1f' % ($full_low_mib - $tenth_low_mib))")
verdict "$growth <= $max_growth_mib" "peak (lowest of $runs run(s)) grows by $growth MiB from $tenth_records to $full_records records (limit $max_growth_mib MiB)"

if [ "$check_response" = 1 ]; then
  # Two short runs on the full set: the same steps, a shuffle buffer 8192
  # records larger in the second (filled before its first step).
  resp_mad=$((min_after_dequeue + response_records))
  if [ $((resp_mad + 3 * 128 + response_steps * 128)) -gt "$full_records" ]; then
    echo "FAIL: the full set ($full_records records) is too small for the response check: raise --n_mb"
    exit 1
  fi
  read -r base_low base_peak base_bound base_steps base_sec < <(runs_of response_base "$dir/full" "$min_after_dequeue" "$response_steps")
  [ -n "${base_peak:-}" ] || exit 1
  read -r resp_low resp_peak resp_bound resp_steps resp_sec < <(runs_of response "$dir/full" "$resp_mad" "$response_steps")
  [ -n "${resp_peak:-}" ] || exit 1
  resp_mib=$(mib "$resp_peak")
  rise=$(python3 -c "print('%.1f' % ($(mib "$resp_low") - $(mib "$base_low")))")
  bound_rise=$(python3 -c "print('%.1f' % ($resp_bound - $base_bound))")
  verdict "$resp_mib <= $resp_bound" "full, $response_steps steps, min_after_dequeue $resp_mad: peak $resp_mib MiB within the bound $resp_bound MiB"
  verdict "$rise >= 0.8 * $bound_rise" "the measurement sees memory: over $response_steps steps of the full set, min_after_dequeue $min_after_dequeue -> $resp_mad raises the bound by $bound_rise MiB and the peak (lowest of $runs run(s)) by $rise MiB"
fi
exit $fail
