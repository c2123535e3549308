#!/usr/bin/env bash
# flowrun vs PyTorch eager on a bundled MLP config: same model, data, order, batch, optimizer and
# thread count, measured in one run. Prints both and the ratio (flowrun / PyTorch samples/s).
# Usage: bench/mlp.sh [CONFIG] [THREADS] [STEPS]   (installs its peers and builds flowrun first)
set -euo pipefail
cd "$(dirname "$0")/.."
bash bench/peers.sh
config=${1:-configs/mlp.yaml}
threads=${2:-1}
steps=${3:-300}
export OMP_NUM_THREADS=$threads DNNL_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads MKL_NUM_THREADS=$threads

# flowrun: the mean step time excludes step 1 (warm-up).
fr_out=$(/usr/bin/time -f "peak_rss_kb %M" ./build/src/flowrun train "$config" --set train.steps=$((steps + 1)) \
  --set log.every=1000000 --set log.jsonl=/tmp/flowrun_bench.jsonl 2>&1)
fr_ms=$(sed -n 's/.* \([0-9.]*\) ms\/step.*/\1/p' <<<"$fr_out")
fr_rss=$(sed -n 's/peak_rss_kb \([0-9]*\)/\1/p' <<<"$fr_out")
pt=$(/usr/bin/python3 bench/torch_mlp.py "$config" --steps "$steps" --threads "$threads")
python3 - "$fr_ms" "$fr_rss" "$pt" "$threads" "$config" <<'PY'
import json, sys
fr_ms, fr_rss, pt, threads, config = float(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4], sys.argv[5]
import re
gb = int(re.search(r"global_batch:\s*(\d+)", open(config).read()).group(1))
fr_sps = gb / (fr_ms / 1e3)
print(f"config {config}, threads {threads}, global batch {gb}")
print(f"flowrun : {fr_ms:8.3f} ms/step  {fr_sps:10.0f} samples/s  peak RSS {fr_rss/1024:.0f} MiB")
print(f"pytorch : {pt['step_ms']:8.3f} ms/step  {pt['samples_per_s']:10.0f} samples/s  peak RSS {pt['peak_rss_mb']:.0f} MiB")
print(f"ratio   : flowrun/pytorch samples/s = {fr_sps / pt['samples_per_s']:.2f}x")
PY
