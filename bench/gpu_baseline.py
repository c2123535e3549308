#!/usr/bin/env python3
"""PyTorch's figures on a GPU, for issue 30's speed section (run by tools/gpu_check.sh).

    python3 bench/gpu_baseline.py --parts libs,gemm,eager,sdpa,compile [--batch 8] [--steps 10]
                                  [--warmup 3] [--jsonl FILE]

Parts (each one reports and goes on if it fails; gpu_check.sh runs `compile` in its own process
under its own timeout):

- libs:  torch, CUDA, cuDNN and NCCL versions and the files they were loaded from (the CUDA build
         of flowrun will link the same pip NCCL and cuDNN), with their headers where present.
- gemm:  8192^3 matrix products through torch (cuBLAS): FP32 with TF32 off (SGEMM), FP32 with TF32
         allowed, and BF16 for reference; random inputs, median of CUDA-event timings.
- eager: training steps of a GPT at GPT-2-small size in PyTorch eager, FP32 with TF32 allowed.
- sdpa:  the same with attention through F.scaled_dot_product_attention (flash), for reference
         only: flowrun's import has the masked_fill + softmax attention of `eager`.
- compile: the `eager` model under torch.compile (default mode); the first step's time (the
         compilation) is reported apart.

The model is tools/make_gpt.py's nanoGPT-style decoder (the module flowrun imports through ONNX:
token and learned position embeddings, pre-LayerNorm blocks, causal self-attention with a fused qkv
Linear and a registered tril mask applied with masked_fill, erf-GELU MLP, final LayerNorm, untied
bias-free head) at d=768, 12 layers, 12 heads, T=1024, vocab 50304, made with its init (seed
20240601, PyTorch's default initialisation, LayerNorms perturbed). One step: forward, cross-entropy
over all B*T tokens, backward, clip the gradient norm to 1.0, AdamW (lr 6e-4, betas 0.9/0.95,
weight decay 0.1, PyTorch's default foreach implementation), as configs/scale/gpt2_124m.yaml
trains. Tokens are uniform random ids, a fixed batch per step drawn from a seeded generator.

Each step is timed with CUDA events after a synchronize; tokens/s = B*T / median step time. The
FLOP count per step is 6*N*B*T for the N parameters outside the position embedding plus
12*L*B*T^2*d for attention (QK^T and AV, forward and backward, the masked half counted too, since
this attention computes it), the usual nanoGPT-style estimate. MFU is against the dense TF32 peak
(--peak-tf32, default 494.7e12 for H100/H200 SXM) and against this run's measured TF32 GEMM rate.
Peak memory is torch.cuda.max_memory_allocated over the warm-up and timed steps.
"""

import argparse
import glob
import json
import math
import os
import statistics
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

D, N_LAYER, N_HEAD, T, VOCAB = 768, 12, 12, 1024, 50304
TORCH_SEED = 20240601  # tools/make_reference.py's TORCH_SEED


class CausalSelfAttention(nn.Module):
    def __init__(self, c, n_head, block, sdpa=False):
        super().__init__()
        self.n_head = n_head
        self.sdpa = sdpa
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.register_buffer("bias", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        B, T_, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)
        k = k.view(B, T_, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T_, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T_, self.n_head, C // self.n_head).transpose(1, 2)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T_, :T_] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T_, C)
        return self.proj(y)


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc = nn.Linear(c, 4 * c)
        self.act = nn.GELU()  # exact (erf) form
        self.proj = nn.Linear(4 * c, c)

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    def __init__(self, c, n_head, block, sdpa):
        super().__init__()
        self.ln1 = nn.LayerNorm(c)
        self.attn = CausalSelfAttention(c, n_head, block, sdpa)
        self.ln2 = nn.LayerNorm(c)
        self.mlp = Mlp(c)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    def __init__(self, c, n_head, n_layer, block, vocab, sdpa=False):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(block, c)
        self.blocks = nn.ModuleList([Block(c, n_head, block, sdpa) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(c)
        self.head = nn.Linear(c, vocab, bias=False)  # untied from wte

    def forward(self, idx):
        B, T_ = idx.size()
        pos = torch.arange(0, T_, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def init_model(sdpa=False):
    """tools/make_gpt.py's init_model at these sizes (on the CPU, so that it is device-independent)."""
    torch.manual_seed(TORCH_SEED)
    model = Gpt(D, N_HEAD, N_LAYER, T, VOCAB, sdpa)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.add_(0.1 * torch.randn(m.weight.shape))
                m.bias.add_(0.1 * torch.randn(m.bias.shape))
    return model


def allow_tf32(on):
    """TF32 for float32 matrix products through the one (legacy) setter that torch.compile also reads:
    torch 2.9+ raises when the legacy and the new (fp32_precision) TF32 APIs are mixed."""
    torch.set_float32_matmul_precision("high" if on else "highest")


RESULTS = []


def report(part, **fields):
    rec = {"part": part, **fields}
    RESULTS.append(rec)
    print(f"[{part}] " + ", ".join(f"{k}={_fmt(v)}" for k, v in fields.items()), flush=True)
    if ARGS.jsonl:
        with open(ARGS.jsonl, "a") as f:
            f.write(json.dumps(rec) + "\n")


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def loaded_libs(pattern_words):
    """Files mapped into this process whose names contain one of pattern_words."""
    found = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5].startswith("/"):
                base = os.path.basename(parts[5])
                if any(w in base for w in pattern_words):
                    found.add(os.path.realpath(parts[5]))
    return sorted(found)


def part_libs():
    info = {
        "python": sys.version.split()[0], "executable": sys.executable, "torch": torch.__version__,
        "torch_cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0),
        "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
    }
    p = torch.cuda.get_device_properties(0)
    info["sms"] = p.multi_processor_count
    info["memory_gib"] = round(p.total_memory / 2**30, 1)
    info["l2_mib"] = round(getattr(p, "L2_cache_size", 0) / 2**20, 1)
    free, total = torch.cuda.mem_get_info()
    info["free_gib"] = round(free / 2**30, 1)
    try:
        v = torch.cuda.nccl.version()
        info["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception as e:  # noqa: BLE001
        info["nccl"] = f"unavailable: {e}"
    info["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    info["cudnn"] = str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else "unavailable"
    report("libs", **info)
    # Touch cuDNN and cuBLAS so that their libraries are mapped, then list what is.
    x = torch.randn(8, 16, 32, 32, device="cuda")
    w = torch.randn(16, 16, 3, 3, device="cuda")
    F.conv2d(x, w, padding=1)
    torch.randn(64, 64, device="cuda") @ torch.randn(64, 64, device="cuda")
    torch.cuda.synchronize()
    words = ["nccl", "cudnn", "cublas", "cudart", "nvrtc", "nvJitLink", "cusparse", "libcuda.so", "libtorch_cuda"]
    for path in loaded_libs(words):
        report("libs", loaded=path)
    # Headers and libraries of the pip packages, for a future meson -Dcuda=enabled build.
    try:
        import nvidia  # noqa: F401  (namespace package of the pip CUDA wheels)
        roots = list(getattr(nvidia, "__path__", []))
    except Exception:  # noqa: BLE001
        roots = []
    for root in roots:
        for name in ("nccl", "cudnn", "cublas", "cuda_runtime", "cu13"):
            d = os.path.join(root, name)
            if not os.path.isdir(d):
                continue
            heads = sorted(os.path.basename(h) for h in glob.glob(os.path.join(d, "include", "*.h")))
            libs = sorted(os.path.basename(h) for h in glob.glob(os.path.join(d, "lib*", "*.so*")))
            report("libs", pip_dir=d, headers=" ".join(h for h in heads if h.split(".")[0] in (
                "nccl", "cudnn", "cublas_v2", "cublasLt", "cuda_runtime", "cudnn_version")) or f"{len(heads)} files",
                libs=" ".join(libs[:12]) + (" ..." if len(libs) > 12 else ""))


def time_cuda(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return times


def part_gemm():
    n = ARGS.gemm_n
    flop = 2.0 * n ** 3
    g = torch.Generator(device="cuda").manual_seed(1)
    for name, dtype, tf32 in (("sgemm_fp32", torch.float32, False), ("gemm_tf32", torch.float32, True),
                              ("gemm_bf16", torch.bfloat16, False)):
        allow_tf32(tf32)
        # Three input sets in rotation, so that no timing reads a cache warmed by the previous one.
        sets = [(torch.randn(n, n, device="cuda", generator=g, dtype=torch.float32).to(dtype),
                 torch.randn(n, n, device="cuda", generator=g, dtype=torch.float32).to(dtype)) for _ in range(3)]
        out = torch.empty(n, n, device="cuda", dtype=dtype)
        i = [0]

        def f():
            a, b = sets[i[0] % 3]
            i[0] += 1
            torch.matmul(a, b, out=out)

        ts = time_cuda(f, 3, ARGS.gemm_reps)
        med = statistics.median(ts)
        # Check one product against float64 on a slice (METHOD.md: relative error).
        a, b = sets[0]
        ref = a[:256].double() @ b.double()
        err = ((torch.matmul(a[:256], b).double() - ref).norm() / ref.norm()).item()
        report("gemm", kind=name, n=n, median_ms=med * 1e3, tflops=flop / med / 1e12,
               min_ms=min(ts) * 1e3, rel_err=err)
        GEMM[name] = flop / med
        del sets, out
        torch.cuda.empty_cache()
    allow_tf32(True)


GEMM = {}


def step_flops(model, batch):
    n = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    return 6.0 * n * batch * T + 12.0 * N_LAYER * batch * T * T * D, n


def train(part, sdpa=False, compile_=False):
    allow_tf32(True)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model = init_model(sdpa).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    fwd = torch.compile(model) if compile_ else model
    g = torch.Generator(device="cuda").manual_seed(1234)
    B = ARGS.batch
    batches = [(torch.randint(0, VOCAB, (B, T), device="cuda", generator=g),
                torch.randint(0, VOCAB, (B, T), device="cuda", generator=g)) for _ in range(4)]
    flop, n_params = step_flops(model, B)
    losses = []

    def step(i):
        x, y = batches[i % len(batches)]
        logits = fwd(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    losses.append(step(0).item())  # includes compilation under torch.compile
    first_s = time.perf_counter() - t0
    for i in range(1, ARGS.warmup):
        losses.append(step(i).item())
    torch.cuda.synchronize()
    times = []
    for i in range(ARGS.steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        loss = step(ARGS.warmup + i)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
        losses.append(loss.item())
    med = statistics.median(times)
    peak = torch.cuda.max_memory_allocated()
    fields = dict(batch=B, T=T, params=n_params, first_step_s=first_s, median_ms=med * 1e3,
                  min_ms=min(times) * 1e3, max_ms=max(times) * 1e3, tokens_per_s=B * T / med,
                  tflops=flop / med / 1e12, mfu_vs_peak_tf32=flop / med / ARGS.peak_tf32,
                  peak_mem_gib=peak / 2**30, loss_first=losses[0], loss_last=losses[-1])
    if "gemm_tf32" in GEMM:
        fields["mfu_vs_measured_tf32_gemm"] = flop / med / GEMM["gemm_tf32"]
    if not all(math.isfinite(v) for v in losses):
        fields["error"] = "non-finite loss"
    report(part, **fields)
    del model, opt, fwd, batches
    torch.cuda.empty_cache()


PARTS = {
    "libs": part_libs,
    "gemm": part_gemm,
    "eager": lambda: train("eager"),
    "sdpa": lambda: train("eager_sdpa", sdpa=True),
    "compile": lambda: train("compile", compile_=True),
}


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="libs,gemm,eager,sdpa,compile")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--gemm-n", type=int, default=8192)
    ap.add_argument("--gemm-reps", type=int, default=20)
    ap.add_argument("--peak-tf32", type=float, default=494.7e12, help="dense TF32 peak, FLOP/s")
    ap.add_argument("--jsonl", default=None, help="append one JSON object per result")
    ARGS = ap.parse_args()
    if not torch.cuda.is_available():
        print("gpu_baseline: no CUDA device visible to torch", file=sys.stderr)
        return 1
    failed = 0
    for name in ARGS.parts.split(","):
        t0 = time.perf_counter()
        try:
            PARTS[name]()
        except Exception as e:  # noqa: BLE001  (report and go on)
            failed += 1
            traceback.print_exc()
            report(name, error=f"{type(e).__name__}: {str(e)[:300]}")
        print(f"[{name}] took {time.perf_counter() - t0:.1f} s", flush=True)
    return 1 if failed else 0


ARGS = None

if __name__ == "__main__":
    sys.exit(main())
