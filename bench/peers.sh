#!/usr/bin/env bash
# Installs the peers the benchmarks compare flowrun with (Debian's PyTorch and OpenBLAS; python3-onnx
# too, which bench/torch_gpt.py imports through tools/make_gpt.py) and builds flowrun
# (tools/bootstrap.sh). Idempotent. Used by every bench/*.sh; flowrun itself needs none of it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/bootstrap.sh >/dev/null
missing=()
for p in python3-torch python3-onnx python3-yaml libopenblas-dev pkg-config time; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "bench: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
