#!/usr/bin/env bash
# flowrun vs PyTorch on a GPT config, measured in one run with the same model init, tokens, order,
# batch, optimizer and threads. Prints, as ratios:
#   - single process: tokens/s and peak memory, flowrun vs PyTorch eager;
#   - two ranks, data parallel: flowrun under mpirun vs PyTorch DDP over gloo, and the scaling
#     efficiency of each (2-rank tokens/s over 2x the single-process tokens/s);
#   - model FLOP utilisation: flowrun's matmul FLOP/s over this machine's single-core SGEMM peak.
# Usage: bench/gpt.sh [CONFIG] [STEPS]   (threads per process: 1; needs python3-torch, a built flowrun)
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/gpt.yaml}
steps=${2:-40}
export OMP_NUM_THREADS=1 DNNL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fr=./build/src/flowrun
run_fr() {  # ranks, extra sets...
  local n=$1; shift
  local cmd=("$fr" train "$config" --set train.steps=$((steps + 1)) --set log.every=1000000 --set schedule.warmup=1 "$@")
  if [ "$n" -gt 1 ]; then cmd=(mpirun --oversubscribe --allow-run-as-root -n "$n" "${cmd[@]}"); fi
  /usr/bin/time -f "peak_rss_kb %M" "${cmd[@]}" 2>&1
}
fr1=$(run_fr 1)
fr2=$(run_fr 2 --set 'parallel.sbp={idx: ["S(0)"]}')
pt1=$(/usr/bin/python3 bench/torch_gpt.py "$config" --steps "$steps" --threads 1)
pt2=$(/usr/bin/python3 bench/torch_gpt.py "$config" --steps "$steps" --threads 1 --ddp)
gemm=$(g++ -O3 -march=native -std=c++17 bench/gemm_blas.cpp -o /tmp/flowrun_gemm_blas $(pkg-config --cflags --libs openblas 2>/dev/null) -ldnnl 2>/dev/null && /tmp/flowrun_gemm_blas || echo '{}')
python3 - "$config" "$fr1" "$fr2" "$pt1" "$pt2" "$gemm" <<'PY'
import json, re, sys
config, fr1, fr2, pt1, pt2, gemm = sys.argv[1:]
def ms(out):
    return float(re.search(r"([0-9.]+) ms/step", out).group(1))
def rss(out):
    return int(re.search(r"peak_rss_kb (\d+)", out).group(1)) / 1024
def gf(out):
    m = re.findall(r"([0-9.]+) GFLOP/s/dev", out)
    return float(m[-1]) if m else float("nan")
text = open(config).read()
gb = int(re.search(r"global_batch:\s*(\d+)", text).group(1))
T = int(re.search(r"seq_len:\s*(\d+)", text).group(1))
tok = gb * T
p1, p2 = json.loads(pt1), json.loads(pt2)
f1, f2 = tok / (ms(fr1) / 1e3), tok / (ms(fr2) / 1e3)
peak = max((r["onednn_gflops"] for r in json.loads(gemm).get("results", [])), default=float("nan"))
print(f"machine: {open('/proc/cpuinfo').read().split('model name')[1].split(':')[1].splitlines()[0].strip()}, 1 thread per process")
print(f"model: {config}, {tok} tokens per step")
print(f"single process : flowrun {f1:9.0f} tok/s ({rss(fr1):.0f} MiB)  pytorch {p1['tokens_per_s']:9.0f} tok/s ({p1['peak_rss_mb']:.0f} MiB)  ratio {f1 / p1['tokens_per_s']:.2f}x")
print(f"2 ranks (dp)   : flowrun {f2:9.0f} tok/s  pytorch ddp {p2['tokens_per_s']:9.0f} tok/s  ratio {f2 / p2['tokens_per_s']:.2f}x")
print(f"scaling eff.   : flowrun {f2 / (2 * f1):.2f}  pytorch {p2['tokens_per_s'] / (2 * p1['tokens_per_s']):.2f}")
print(f"MFU            : {gf(fr1):.1f} GFLOP/s (matmul) over {peak:.1f} GFLOP/s single-core SGEMM peak = {gf(fr1) / peak:.0%}")
PY
