#!/usr/bin/env bash
# run_imagefolder_bench.sh BUILD_DIR [N_IMAGES] [REPEATS] — images/sec of an image folder of JPEGs decoded and
# resized to 224x224 on 2 threads: Tower's pipeline (bench_imagefolder, scaled and full JPEG decoding) against
# tf.data's decode_jpeg + resize map (bench/tf_imagefolder.py, num_parallel_calls 2, its thread pools 2), on
# the same files (bench/make_jpeg_folder.py: N_IMAGES JPEGs of 300-600 px, PIL, quality 90).  The three run
# interleaved, REPEATS rounds, so that load on a shared machine hits them alike; prints each run and the
# medians.  Needs the interop venv (TensorFlow, PIL): TOWER_PYTHON or ~/.cache/tower/interop-venv/bin/python.
# IMAGE_SIDES="MIN MAX" sets the JPEGs' sides (default "300 600"; "2000 4000": camera photographs, where the
# scaled decode reads 1/8 of the pixels).  RESIZE_MODE=random_crop: the training crop on both sides (Tower's
# --resize_mode random_crop; tf_imagefolder.py --distort, tf_cnn_benchmarks' fused decode_and_crop_jpeg).
# RECORDS=1: the same JPEGs as TFRecords of encoded images (image/encoded, image/class/label; 4 files written by
# tf_imagefolder.py --make_records), read by Tower's encoded source (bench_imagefolder --records) and by tf.data
# as tf_cnn_benchmarks reads ImageNet (TFRecordDataset, parse_single_example, the same decode map).
set -euo pipefail
build=${1:?usage: run_imagefolder_bench.sh BUILD_DIR [N_IMAGES] [REPEATS]}
n=${2:-600} repeats=${3:-5}
py=${TOWER_PYTHON:-$HOME/.cache/tower/interop-venv/bin/python}
here=$(cd "$(dirname "$0")" && pwd)
read -r side_lo side_hi <<<"${IMAGE_SIDES:-300 600}"
mode=${RESIZE_MODE:-resize}
tower_mode=(--resize_mode "$mode") tf_mode=()
[ "$mode" = random_crop ] && tf_mode=(--distort)
dir=${IMAGEFOLDER_BENCH_DIR:-/tmp/tower_imagefolder_bench_${n}_${side_lo}_${side_hi}}
[ -d "$dir" ] || "$py" "$here/make_jpeg_folder.py" "$dir" "$n" "$side_lo" "$side_hi"
src=("$dir") tower_src=() tf_src=() what="image folder"
if [ "${RECORDS:-0}" = 1 ]; then
  [ -e "$dir.records/train-00000-of-00004" ] ||
    { mkdir -p "$dir.records" && "$py" "$here/tf_imagefolder.py" "$dir" --make_records "$dir.records/train" 4 2>/dev/null; }
  src=("$dir.records/train-*") tower_src=(--records) tf_src=(--records) what="TFRecords of encoded JPEGs (4 files)"
fi
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'); flags: $(grep -o -w 'avx2\|avx512f\|sse4_2\|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); $n JPEGs of $side_lo-$side_hi px in $dir, read as $what; 2 threads, 224x224 ($mode), batch 64, 2 passes after a warm-up pass"
declare -a scaled full tf scaled_cpu full_cpu tf_cpu
rate() { sed 's/.* = \([0-9.]*\) images\/sec.*/\1/' <<<"$1"; }
cpu_rate() { sed 's/.* = \([0-9.]*\) images per CPU second.*/\1/' <<<"$1"; }
for r in $(seq "$repeats"); do
  echo "round $r: $(uptime | sed 's/.*load average/load average/')"
  line=$("$build/bench/bench_imagefolder" "${src[@]}" "${tower_src[@]}" --threads 2 --size 224 --epochs 2 "${tower_mode[@]}"); echo "  $line"
  scaled+=("$(rate "$line")"); scaled_cpu+=("$(cpu_rate "$line")")
  line=$("$py" "$here/tf_imagefolder.py" "${src[@]}" "${tf_src[@]}" --threads 2 --size 224 --epochs 2 "${tf_mode[@]}" 2>/dev/null | tail -1); echo "  $line"
  tf+=("$(rate "$line")"); tf_cpu+=("$(cpu_rate "$line")")
  line=$("$build/bench/bench_imagefolder" "${src[@]}" "${tower_src[@]}" --threads 2 --size 224 --epochs 2 --full --max_image_pixels $((side_hi * side_hi)) "${tower_mode[@]}"); echo "  $line"
  full+=("$(rate "$line")"); full_cpu+=("$(cpu_rate "$line")")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
ms=$(median "${scaled[@]}") mf=$(median "${full[@]}") mt=$(median "${tf[@]}")
echo "median images/sec: tower scaled decode $ms, tower full decode $mf, tf.data $mt; tower/tf.data $(awk -v a="$ms" -v b="$mt" 'BEGIN{printf "%.2f", a/b}')x"
cs=$(median "${scaled_cpu[@]}") cf=$(median "${full_cpu[@]}") ct=$(median "${tf_cpu[@]}")
echo "median images per CPU second: tower scaled decode $cs, tower full decode $cf, tf.data $ct; tower/tf.data $(awk -v a="$cs" -v b="$ct" 'BEGIN{printf "%.2f", a/b}')x"
echo "after: $(uptime | sed 's/.*load average/load average/')"
