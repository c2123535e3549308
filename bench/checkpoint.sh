#!/usr/bin/env bash
# Checkpoint write speed (docs/checkpoints.md): GPT-2 small's sizes (tools/make_gpt2.py, 162M
# parameters with its untied head, 124M if it were tied; block 64 so that the one training step
# before each checkpoint is short on a CPU), AdamW, 3 steps with a checkpoint after each:
# parameters and both moments, 1.9 GB. On 1 rank, on 4 data-parallel ranks (the replicas share
# the writing) and on 4 with ZeRO (each holds a quarter), against the disk: the same bytes written with dd and fsynced, and torch.save of the
# same tensors (PyTorch's own checkpoint, one process) when Debian's python3-torch is there. Each
# figure is the median of 3, in one run of this script: a VM's disk varies by 2x from minute to
# minute.
# Usage: bench/checkpoint.sh [DIR]   (DIR: on the disk to measure; default /tmp/flowrun_ckbench)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/flowrun_ckbench}
model=/tmp/flowrun_gpt2_t64.onnx
[ -f "$model" ] || /usr/bin/python3 tools/make_gpt2.py "$model" --block 64
[ -x build/src/flowrun ] || { meson setup build --buildtype=release >/dev/null && ninja -C build >/dev/null; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(--set "model.onnx=$model" --set data.seq_len=64 --set train.steps=3 --set train.global_batch=4
        --set train.micro_batch=4 --set log.every=1 --set log.jsonl=/tmp/flowrun_ckbench.jsonl --set "checkpoint={dir: $dir, every: 1, keep: 1}")
median() { tr ' ' '\n' | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# A VM's host backs the guest's memory lazily: the first touch of a page costs a fault in the host,
# and whatever first fills the page cache with such pages pays for it (3x slower writes,
# measured). Every free page is touched once first, so that no contender pays that alone.
avail_kb=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
python3 - $(( (avail_kb - 3 * 1024 * 1024) * 1024 )) <<'PY'
import mmap, sys
n = int(sys.argv[1])
if n > 0:
    m = mmap.mmap(-1, n)
    for i in range(0, n, 4096):
        m[i] = 1
PY

declare -A secs bytes
for ranks in 1 4 4z; do
  rm -rf "$dir"
  launch=()
  sets=()
  if [ "$ranks" != 1 ]; then
    launch=(mpirun --oversubscribe -n 4)
    sets=(--set 'parallel.sbp={idx: ["S(0)"]}')
    [ "$ranks" = 4z ] && sets+=(--set parallel.zero=true)
  fi
  out=$("${launch[@]}" ./build/src/flowrun train configs/scale/gpt2_124m.yaml "${common[@]}" "${sets[@]}" 2>&1) || { echo "$out"; exit 1; }
  lines=$(grep '^checkpoint: ' <<<"$out")
  secs[$ranks]=$(sed -n 's/.* in \([0-9.]*\) s)$/\1/p' <<<"$lines" | median)
  bytes[$ranks]=$(du -sb "$(sed -n 's/^checkpoint: \([^ ]*\) .*/\1/p' <<<"$lines" | tail -1)" | cut -f1)
  echo "flowrun, $ranks:"
  echo "$lines"
done
rm -rf "$dir"

# The disk: the checkpoint's bytes in 16 MiB blocks, fsynced, as one stream.
mkdir -p "$dir"
n=$(( (bytes[1] + (16 << 20) - 1) / (16 << 20) ))
dd_all=""
for rep in 1 2 3; do
  dd_out=$(dd if=/dev/zero of="$dir/dd" bs=16M count="$n" conv=fsync 2>&1 | tail -1)
  rm -f "$dir/dd"
  echo "dd: $dd_out"
  dd_all+=" $(sed -n 's/.*, \([0-9.]*\) s, .*/\1/p' <<<"$dd_out")"
done
dd_secs=$(echo $dd_all | median)

torch_secs=""
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  torch_secs=$(/usr/bin/python3 - "$dir" <<'PY'
import os, sys, time
import torch
# GPT-2 small's tensors at make_gpt2.py's sizes with AdamW's two moments: the same bytes.
d = sys.argv[1]
shapes = [(50257, 768), (64, 768)]
for _ in range(12):
    shapes += [(768,), (768,), (2304, 768), (2304,), (768, 768), (768,), (768,), (768,), (3072, 768), (3072,), (768, 3072), (768,)]
shapes += [(768,), (768,), (50257, 768)]
g = torch.Generator().manual_seed(0)
params = [torch.randn(s, generator=g) for s in shapes]
state = {"model": {f"p{i}": p for i, p in enumerate(params)},
         "optimizer": {f"p{i}": {"exp_avg": torch.randn_like(p), "exp_avg_sq": torch.rand_like(p)} for i, p in enumerate(params)}}
path = os.path.join(d, "torch.pt")
times = []
for _ in range(3):
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    times.append(time.perf_counter() - t0)
    size = os.path.getsize(path)
    os.remove(path)
print(f"{sorted(times)[1]:.2f} {size}")
PY
)
  echo "torch.save + fsync (median of 3): ${torch_secs% *} s, ${torch_secs#* } bytes"
fi
rm -rf "$dir"

python3 - "${bytes[1]}" "${secs[1]}" "${bytes[4]}" "${secs[4]}" "$dd_secs" "$((n * (16 << 20)))" "${bytes[4z]}" "${secs[4z]}" "${torch_secs% *}" <<'PY'
import sys
b1, s1, b4, s4, dds, ddb = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
bz, sz = int(sys.argv[7]), float(sys.argv[8])
torch_s = float(sys.argv[9]) if len(sys.argv) > 9 and sys.argv[9] else None
disk = ddb / dds
print(f"disk (dd, fsync, median of 3): {disk / 1e9:.2f} GB/s; the checkpoint's {b1 / 1e9:.2f} GB would take {b1 / disk:.2f} s")
print(f"flowrun 1 rank : {s1:.2f} s (median of 3) = {b1 / s1 / 1e9:.2f} GB/s, {(b1 / disk) / s1:.2f}x the disk's speed")
print(f"flowrun 4 ranks: {s4:.2f} s (median of 3) = {b4 / s4 / 1e9:.2f} GB/s, {(b4 / disk) / s4:.2f}x the disk's speed")
print(f"flowrun 4 ZeRO : {sz:.2f} s (median of 3) = {bz / sz / 1e9:.2f} GB/s, {(bz / disk) / sz:.2f}x the disk's speed")
if torch_s:
    print(f"torch.save     : {torch_s:.2f} s; flowrun 1 rank takes {s1 / torch_s:.2f}x its time")
PY
