"""GEMM peer: PyTorch's float32 matmul throughput at the sizes of bench/gemm_blas.cpp.
Run with Debian's python3 (python3-torch); prints one JSON object."""
import json
import sys
import time

import torch

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
torch.set_num_threads(threads)
out = []
for m, n, k in [(32, 128, 64), (64, 128, 128), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024)]:
    a = torch.full((m, k), 0.5)
    b = torch.full((n, k), 0.25)
    a @ b.t()
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.5:
        a @ b.t()
        reps += 1
    s = time.perf_counter() - t0
    out.append({"m": m, "n": n, "k": k, "torch_gflops": round(2 * m * n * k * reps / s / 1e9, 2)})
print(json.dumps({"threads": threads, "results": out}))
