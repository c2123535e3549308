#!/usr/bin/env bash
# Measures SGEMM on OpenBLAS, oneDNN and PyTorch at the same thread count, in one run.
# Usage: bench/gemm.sh [THREADS]   (installs its peers first: OpenBLAS, PyTorch; oneDNN comes with flowrun)
set -euo pipefail
threads=${1:-1}
cd "$(dirname "$0")"
bash peers.sh
out=$(mktemp -d)
g++ -O3 -march=native -std=c++17 gemm_blas.cpp -o "$out/gemm_blas" \
  $(pkg-config --cflags --libs openblas) -ldnnl
echo "threads: $threads ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads DNNL_NUM_THREADS=$threads "$out/gemm_blas"
/usr/bin/python3 gemm_torch.py "$threads"
