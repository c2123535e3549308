#!/usr/bin/env bash
# flowrun vs PyTorch on a GPT config, measured in one run with the same model init, tokens, order,
# batch, optimizer and threads (one per process). Prints, as ratios:
#   - single process: tokens/s and peak memory, flowrun vs PyTorch eager;
#   - two ranks, data parallel: flowrun under mpirun vs PyTorch DDP over gloo, and the scaling
#     efficiency of each (2-rank tokens/s over 2x the single-process tokens/s);
#   - the ceiling the machine puts on 2-rank scaling: two independent processes with one rank's
#     work each, at once, no communication (a synchronous step waits for the slower), by their
#     mean step times and in lockstep (step by step, the slower of the two);
#   - model FLOP utilisation: flowrun's matmul FLOP/s over this machine's single-core SGEMM peak.
# The four runs are repeated REPEATS times, interleaved, and each figure is the median: a shared
# VM's speed drifts by 10-30% within a minute, which one run of each would mistake for a ratio.
# Usage: bench/gpt.sh [CONFIG] [STEPS] [REPEATS] [GLOBAL_BATCH]
#   GLOBAL_BATCH overrides train.global_batch for both (micro_batch becomes half of it).
# Installs its peers and builds flowrun first (bench/peers.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/gpt.yaml}
steps=${2:-40}
repeats=${3:-3}
batch=${4:-}
bash bench/peers.sh
export OMP_NUM_THREADS=1 DNNL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "$batch" ]; then  # one config file both peers read
  sed -E -e "s/^(\s*global_batch:\s*)[0-9]+/\1$batch/" -e "s/^(\s*micro_batch:\s*)[0-9]+/\1$((batch / 2))/" \
    "$config" > "$work/config.yaml"
  config=$work/config.yaml
fi
fr=./build/src/flowrun
run_fr() {  # ranks, extra sets...
  local n=$1; shift
  local cmd=("$fr" train "$config" --set train.steps=$((steps + 1)) --set log.every=$((steps + 1))
             --set schedule.warmup=1 "$@")
  if [ "$n" -gt 1 ]; then cmd=(mpirun --oversubscribe -n "$n" "${cmd[@]}"); fi
  timeout 900 /usr/bin/time -f "peak_rss_kb %M" "${cmd[@]}" 2>&1
}
# The ceiling on 2-rank scaling that the machine sets: two independent processes, each with one
# rank's half of every micro-batch and no communication, at once on cores 0 and 1 (as mpirun binds
# two ranks). A synchronous step waits for the slower of them.
gb=$(grep -E '^\s*global_batch:' "$config" | grep -oE '[0-9]+' | head -1)
mb=$(grep -E '^\s*micro_batch:' "$config" | grep -oE '[0-9]+' | head -1)
run_pair() {
  local half=(--set train.global_batch=$((gb / 2)) --set train.micro_batch=$((mb / 2)))
  taskset -c 0 "$fr" train "$config" --set train.steps=$((steps + 1)) --set log.every=1 \
    --set schedule.warmup=1 --set log.jsonl="$work/pa.$1.jsonl" "${half[@]}" > "$work/pa.$1" 2>&1 &
  taskset -c 1 "$fr" train "$config" --set train.steps=$((steps + 1)) --set log.every=1 \
    --set schedule.warmup=1 --set log.jsonl="$work/pb.$1.jsonl" "${half[@]}" > "$work/pb.$1" 2>&1
  wait
}
for r in $(seq "$repeats"); do
  run_fr 1 > "$work/fr1.$r"
  run_fr 2 --set 'parallel.sbp={idx: ["S(0)"]}' > "$work/fr2.$r"
  run_pair "$r"
  timeout 900 /usr/bin/python3 bench/torch_gpt.py "$config" --steps "$steps" --threads 1 > "$work/pt1.$r"
  timeout 900 /usr/bin/python3 bench/torch_gpt.py "$config" --steps "$steps" --threads 1 --ddp > "$work/pt2.$r"
done
g++ -O3 -march=native -std=c++17 bench/gemm_blas.cpp -o "$work/gemm_blas" $(pkg-config --cflags --libs openblas) -ldnnl
"$work/gemm_blas" > "$work/gemm.json"
python3 - "$config" "$work" "$repeats" "${1:-configs/gpt.yaml}" <<'PY'
import json, re, statistics, sys
config, work, repeats, named = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def read(name):
    return [open(f"{work}/{name}.{r}").read() for r in range(1, repeats + 1)]
def med(xs):
    return statistics.median(xs)
def ms(out):
    return float(re.search(r"([0-9.]+) ms/step", out).group(1))
def rss(out):
    return int(re.search(r"peak_rss_kb (\d+)", out).group(1)) / 1024
def regs(out):
    return re.search(r"registers peak ([0-9.]+ \w+)", out).group(1)
def gflops(out):
    return float(re.findall(r"([0-9.]+) GFLOP/s/dev", out)[-1])
text = open(config).read()
gb = int(re.search(r"global_batch:\s*(\d+)", text).group(1))
T = int(re.search(r"seq_len:\s*(\d+)", text).group(1))
tok = gb * T
fr1, fr2 = read("fr1"), read("fr2")
pt1 = [json.loads(x) for x in read("pt1")]
pt2 = [json.loads(x) for x in read("pt2")]
f1 = med([tok / (ms(o) / 1e3) for o in fr1])
f2 = med([tok / (ms(o) / 1e3) for o in fr2])
p1 = med([p["tokens_per_s"] for p in pt1])
p2 = med([p["tokens_per_s"] for p in pt2])
eff_f = med([tok / (ms(b) / 1e3) / (2 * tok / (ms(a) / 1e3)) for a, b in zip(fr1, fr2)])
eff_p = med([b["tokens_per_s"] / (2 * a["tokens_per_s"]) for a, b in zip(pt1, pt2)])
pa, pb = read("pa"), read("pb")
ceiling = med([ms(a) / (2 * max(ms(x), ms(y))) for a, x, y in zip(fr1, pa, pb)])
pair = med([max(ms(x), ms(y)) for x, y in zip(pa, pb)])
# The same pair in lockstep: a synchronous step waits for the slower rank every step, and this
# VM's cores each have slow spells of many steps (25-35% slower) that the other's do not share.
def step_ms(path):
    return [json.loads(line)["step_ms"] for line in open(path)][1:]  # as ms/step: past the first
lockstep = [statistics.mean(max(x, y) for x, y in zip(step_ms(f"{work}/pa.{r}.jsonl"), step_ms(f"{work}/pb.{r}.jsonl")))
            for r in range(1, repeats + 1)]
ceiling_lockstep = med([ms(a) / (2 * s) for a, s in zip(fr1, lockstep)])
faster = med([min(ms(x), ms(y)) for x, y in zip(pa, pb)])
gf = med([gflops(o) for o in fr1])
flops_per_token = gf * 1e9 / f1
peak = max(r["onednn_gflops"] for r in json.load(open(f"{work}/gemm.json"))["results"])
cpu = open("/proc/cpuinfo").read().split("model name")[1].split(":")[1].splitlines()[0].strip()
print(f"machine: {cpu}, {open('/proc/cpuinfo').read().count('processor')} cores; 1 thread per process")
print(f"model: {named}, {pt1[0]['params']:,} parameters, {flops_per_token / 1e6:.2f} MFLOP per token "
      f"(matmuls, forward and backward); {gb} x {T} = {tok} tokens per step")
print(f"medians of {repeats} interleaved runs of each")
print(f"single process : flowrun {f1:9.0f} tok/s ({med([rss(o) for o in fr1]):.0f} MiB peak RSS, registers {regs(fr1[0])})"
      f"  pytorch {p1:9.0f} tok/s ({med([p['peak_rss_mb'] for p in pt1]):.0f} MiB)  ratio {f1 / p1:.2f}x")
print(f"2 ranks (dp)   : flowrun {f2:9.0f} tok/s  pytorch ddp {p2:9.0f} tok/s  ratio {f2 / p2:.2f}x")
print(f"scaling eff.   : flowrun {eff_f:.2f}  pytorch {eff_p:.2f}")
print(f"machine ceiling: {ceiling:.2f} (two independent flowrun processes, each with half of every micro-batch and "
      f"no communication, at once on cores 0 and 1: {faster:.2f} and {pair:.2f} ms/step against "
      f"{med([ms(o) for o in fr1]):.2f} for one on the whole batch)")
print(f"in lockstep    : {ceiling_lockstep:.2f} (the same pair, each step waiting for the slower of the two, as a "
      f"synchronous step does: {med(lockstep):.2f} ms/step)")
# What the communication and synchronisation cost flowrun, apart from the machine: the 2 ranks'
# step over the lockstep pair's, run by run (the pair does the same compute with none of either).
over = [ms(b) / s for b, s in zip(fr2, lockstep)]
print(f"2 ranks / pair : {med(over):.3f}x the lockstep pair's step (runs {min(over):.3f}-{max(over):.3f}): "
      f"what data parallelism costs beyond the machine")
print(f"MFU            : {gf:.1f} GFLOP/s (matmul) over {peak:.1f} GFLOP/s single-core SGEMM peak = {gf / peak:.0%}")
def runs(xs):
    return " ".join(f"{x:.2f}" for x in xs)
print(f"ms/step by run : flowrun 1 process {runs(ms(o) for o in fr1)}; 2 ranks {runs(ms(o) for o in fr2)}; "
      f"pair, slower {runs(max(ms(x), ms(y)) for x, y in zip(pa, pb))}; in lockstep {runs(lockstep)}")
PY
