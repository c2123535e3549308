#!/usr/bin/env bash
# What an evaluation costs in memory (docs/config.md, "Evaluation"): GPT-2 small's sizes
# (tools/make_gpt2.py, block 64), AdamW, 2 steps on one rank, without and with an eval: section
# (one held-out batch, evaluated at the end). Prints the process's peak anonymous memory (RssAnon,
# sampled every 20 ms: not its peak RSS, which also counts the mapped model file's pages) for each,
# three rounds interleaved, and the medians. With BASELINE=path/to/flowrun, the same for that
# binary beside this one, in the same run.
# Usage: bench/eval_memory.sh
set -euo pipefail
cd "$(dirname "$0")/.."
model=/tmp/flowrun_gpt2_t64.onnx
[ -f "$model" ] || /usr/bin/python3 tools/make_gpt2.py "$model" --block 64
common=(--set parallel.device=cpu --set "model.onnx=$model" --set data.seq_len=64 --set train.global_batch=4 --set train.micro_batch=4
        --set train.steps=2 --set log.every=1 --set log.jsonl=/tmp/flowrun_eval_bench.jsonl)
taken() {
  local bin=$1; shift
  "$bin" train configs/scale/gpt2_124m.yaml "${common[@]}" "$@" > /tmp/flowrun_eval_bench.out 2>&1 &
  local job=$! high=0 now
  while kill -0 $job 2>/dev/null; do
    now=$(awk '/RssAnon/ {print $2}' /proc/$job/status 2>/dev/null || echo 0)
    [ "${now:-0}" -gt "$high" ] && high=$now
    sleep 0.02
  done
  wait $job || { cat /tmp/flowrun_eval_bench.out; exit 1; }
  if [ $# -gt 0 ] && ! grep -q '^eval step' /tmp/flowrun_eval_bench.out; then echo "(no evaluation)"; exit 1; fi
  echo $(( high / 1024 ))
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
declare -A plain evaluated
for round in 1 2 3; do
  for bin in ./build/src/flowrun ${BASELINE:-}; do
    plain[$bin]+="$(taken "$bin") "
    evaluated[$bin]+="$(taken "$bin" --set 'eval={steps: 1, split: 0.01}') "
  done
done
for bin in ./build/src/flowrun ${BASELINE:-}; do
  echo "$bin: peak anonymous memory, MiB: without eval ${plain[$bin]}(median $(echo ${plain[$bin]} | median)), with eval ${evaluated[$bin]}(median $(echo ${evaluated[$bin]} | median))"
done
