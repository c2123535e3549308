#!/usr/bin/env bash
# Two flowrun binaries on one config, one process and two data-parallel ranks, interleaved in one
# run: the step time of each and NEW's speed over OLD's. For a change that must not slow training
# down (a refactor); tools/compare_binaries.py checks that it computes the same bits.
# Each figure is the median of REPEATS runs: a shared VM's speed drifts by 10-30% within a minute.
# Usage: bench/binaries.sh OLD_FLOWRUN NEW_FLOWRUN [CONFIG] [STEPS] [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
old=$1 new=$2
config=${3:-configs/gpt.yaml}
steps=${4:-40}
repeats=${5:-5}
export OMP_NUM_THREADS=1 DNNL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() {  # binary, ranks: prints ms/step (the mean after the first step, from the "done:" line)
  local cmd=("$1" train "$config" --set train.steps=$((steps + 1)) --set log.every=$((steps + 1)) --set save.onnx="$work/saved.onnx")
  if [ "$2" -gt 1 ]; then cmd=(mpirun --oversubscribe -n "$2" "${cmd[@]}" --set 'parallel.sbp={idx: ["S(0)"]}'); fi
  timeout 900 "${cmd[@]}" 2>&1 | sed -nE 's/^done: .*, ([0-9.]+) ms\/step.*/\1/p'
}
for r in $(seq "$repeats"); do
  for n in 1 2; do
    run "$old" $n >> "$work/old$n"
    run "$new" $n >> "$work/new$n"
  done
done
median() { sort -g "$1" | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
echo "config $config, $steps steps, median of $repeats interleaved runs"
for n in 1 2; do
  o=$(median "$work/old$n") w=$(median "$work/new$n")
  awk -v n="$n" -v o="$o" -v w="$w" \
    'BEGIN { printf "%d rank(s): old %.2f ms/step, new %.2f ms/step, new speed / old speed %.3f\n", n, o, w, o / w }'
done
