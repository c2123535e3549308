#!/usr/bin/env bash
# Peak memory of restoring a checkpoint onto another layout (docs/checkpoints.md): GPT-2 small's
# sizes (tools/make_gpt2.py, block 64), AdamW, one step on 1 rank with a checkpoint (1.9 GB, one
# file), then resumed on 2 ZeRO ranks, each of which needs half of every tensor from that one
# file. The ranks' peak anonymous memory for a fresh 2-rank run and for the resumed one,
# so that the difference is what restoring costs; with BASELINE=path/to/flowrun, the same for that
# binary beside this one, in the same run.
# Usage: bench/restore_memory.sh [DIR]   (default /tmp/flowrun_restore_bench)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/flowrun_restore_bench}
model=/tmp/flowrun_gpt2_t64.onnx
[ -f "$model" ] || /usr/bin/python3 tools/make_gpt2.py "$model" --block 64
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(--set parallel.device=cpu --set "model.onnx=$model" --set data.seq_len=64 --set train.global_batch=4 --set train.micro_batch=4
        --set log.every=1 --set log.jsonl=/tmp/flowrun_restore_bench.jsonl)
zero=(--set 'parallel.sbp={idx: ["S(0)"]}' --set parallel.zero=true)
rm -rf "$dir"
./build/src/flowrun train configs/scale/gpt2_124m.yaml "${common[@]}" --set train.steps=1 \
  --set "checkpoint={dir: $dir, every: 1, keep: 1}" | grep '^checkpoint: '
# The most anonymous memory the 2 ranks held at once, in MiB (their RssAnon summed, sampled every
# 20 ms): not their peak RSS, which also counts the resident pages of a mapped file, pages the
# kernel can drop and that the ranks share through the page cache.
taken() {
  local bin=$1; shift
  mpirun --oversubscribe -n 2 "$bin" train configs/scale/gpt2_124m.yaml "${common[@]}" "${zero[@]}" "$@" > /tmp/flowrun_restore_bench.out 2>&1 &
  local job=$! high=0 now pids
  while kill -0 $job 2>/dev/null; do
    pids=$(pgrep -P $job -x flowrun | sed 's|.*|/proc/&/status|' | tr '\n' ' ')
    now=0
    [ -n "$pids" ] && now=$(cat $pids 2>/dev/null | awk '/RssAnon/ {s += $2} END {print s + 0}')
    [ "$now" -gt "$high" ] && high=$now
    sleep 0.02
  done
  wait $job || { cat /tmp/flowrun_restore_bench.out; exit 1; }
  if [ -n "${WANT_RESUME:-}" ] && ! grep -q '^resumed:' /tmp/flowrun_restore_bench.out; then echo "(not resumed)"; exit 1; fi
  echo $(( high / 1024 ))
}

# Three rounds, the binaries interleaved; each figure is listed, then the medians.
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
declare -A fresh resumed
for round in 1 2 3; do
  for bin in ./build/src/flowrun ${BASELINE:-}; do
    sync; echo 1 > /proc/sys/vm/drop_caches 2>/dev/null || true  # read from disk, as after a restart
    fresh[$bin]+="$(taken "$bin" --set train.steps=2) "
    sync; echo 1 > /proc/sys/vm/drop_caches 2>/dev/null || true
    resumed[$bin]+="$(WANT_RESUME=1 taken "$bin" --set train.steps=2 --resume "$dir") "
  done
done
for bin in ./build/src/flowrun ${BASELINE:-}; do
  echo "$bin: peak anonymous memory of 2 ZeRO ranks together, MiB: fresh ${fresh[$bin]}(median $(echo ${fresh[$bin]} | median)), resumed from the 1-rank checkpoint ${resumed[$bin]}(median $(echo ${resumed[$bin]} | median))"
done
rm -rf "$dir"
