#!/usr/bin/python3
"""PyTorch peer benchmark for flowrun's GPT configs.

    /usr/bin/python3 bench/torch_gpt.py configs/gpt.yaml --steps 100 --threads 1
    /usr/bin/python3 bench/torch_gpt.py configs/gpt.yaml --steps 100 --threads 1 --ddp

Trains the model the config names (built in PyTorch, initialised from the
ONNX file's initializers) on the same tokens, sample order, global batch,
micro-batches, loss, optimizer, clipping and schedule as flowrun, using the
helpers of tools/make_gpt.py and tools/make_reference.py. It runs 5 untimed
warm-up steps, then times --steps steps and prints one JSON line:

    {"tokens_per_s": ..., "step_ms": ..., "threads": ..., "peak_rss_mb": ...}

tokens_per_s counts global_batch * seq_len tokens per step.

--ddp runs data parallel on 2 processes (torch.multiprocessing, the gloo
backend, DistributedDataParallel): each takes its half of every micro-batch
(flowrun's S(0) split of the input), gradients are averaged across the two,
so the math is the single-process one. --threads is per process; rank 0
prints the JSON line, with peak_rss_mb the larger of the two processes'.

Only data.format tokens configs whose model tools/make_gpt.py knows
(models/gpt_mini.onnx, models/gpt_mini2.onnx) are supported.
"""

import argparse
import contextlib
import json
import os
import resource
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_gpt as gpt  # noqa: E402
import make_reference as ref  # noqa: E402

WARMUP_STEPS = 5
DDP_RANKS = 2


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def report(cfg, args, elapsed, rss, model):
    g, _, _ = ref.batch_sizes(cfg)
    tokens = g * int(cfg["data"]["seq_len"]) * args.steps
    print(json.dumps({
        "tokens_per_s": round(tokens / elapsed, 1),
        "step_ms": round(1000.0 * elapsed / args.steps, 4),
        "threads": args.threads,
        "peak_rss_mb": round(rss, 1),
        "params": sum(p.numel() for p in model.parameters()),
    }), flush=True)


def run_single(cfg, args):
    model = gpt.model_from_onnx(cfg["model"]["onnx"]).train()
    x, y = gpt.load_data(cfg)
    opt = ref.make_optimizer(cfg, model.parameters())
    total = WARMUP_STEPS + args.steps  # the schedule spans the whole benchmark run

    def step(s):
        ref.train_step(model, opt, gpt.criterion, x, y, s, cfg, ref.lr_at(cfg, s, total))

    for s in range(WARMUP_STEPS):
        step(s)
    t0 = time.perf_counter()
    for s in range(WARMUP_STEPS, total):
        step(s)
    report(cfg, args, time.perf_counter() - t0, peak_rss_mb(), model)


def ddp_worker(rank, cfg, args, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=DDP_RANKS)
    model = gpt.model_from_onnx(cfg["model"]["onnx"]).train()
    # The only buffer is the constant causal mask: nothing to broadcast.
    ddp = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
    x, y = gpt.load_data(cfg)
    opt = ref.make_optimizer(cfg, ddp.parameters())
    g, mb, m = ref.batch_sizes(cfg)
    half = mb // DDP_RANKS
    clip = float(cfg["optimizer"].get("grad_clip", 0.0))
    total = WARMUP_STEPS + args.steps

    def step(s):
        rows = ref.batch_rows(s, g, x.shape[0])
        opt.zero_grad(set_to_none=False)
        for i in range(m):
            mine = rows[i * mb + rank * half:i * mb + (rank + 1) * half]
            # Gradients are all-reduced (averaged) on the last micro-batch only.
            with ddp.no_sync() if i < m - 1 else contextlib.nullcontext():
                (gpt.criterion(ddp(x[mine]), y[mine]) / m).backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(ddp.parameters(), clip)
        for group in opt.param_groups:
            group["lr"] = ref.lr_at(cfg, s, total)
        opt.step()

    for s in range(WARMUP_STEPS):
        step(s)
    dist.barrier()
    t0 = time.perf_counter()
    for s in range(WARMUP_STEPS, total):
        step(s)
    dist.barrier()
    elapsed = time.perf_counter() - t0
    rss = torch.tensor([peak_rss_mb()], dtype=torch.float64)
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    if rank == 0:
        report(cfg, args, elapsed, float(rss), model)
    dist.barrier()
    # Not destroy_process_group(): in PyTorch 1.13 gloo's teardown can hang the second rank
    # joining one of its threads (seen here); both ranks are done, so leave at once.
    sys.stdout.flush()
    os._exit(0)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", help="flowrun YAML config (tokens data, GPT model)")
    ap.add_argument("--steps", type=int, default=100, help="timed steps (after %d warm-up steps)" % WARMUP_STEPS)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (per process with --ddp)")
    ap.add_argument("--ddp", action="store_true", help="data parallel over %d gloo processes" % DDP_RANKS)
    args = ap.parse_args()
    if args.steps < 1 or args.threads < 1:
        ap.error("--steps and --threads must be positive")

    cfg = gpt.load_config(args.config)  # its paths are relative to the working directory
    if not args.ddp:
        torch.set_num_threads(args.threads)
        run_single(cfg, args)
        return
    _, mb, _ = ref.batch_sizes(cfg)
    if mb % DDP_RANKS:
        ap.error(f"--ddp needs micro_batch divisible by {DDP_RANKS}, got {mb}")
    mp.spawn(ddp_worker, args=(cfg, args, free_port()), nprocs=DDP_RANKS, join=True)


if __name__ == "__main__":
    main()
