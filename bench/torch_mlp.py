#!/usr/bin/python3
"""PyTorch peer benchmark for flowrun's MLP configs.

    /usr/bin/python3 bench/torch_mlp.py configs/mlp.yaml --steps 200 --threads 4

Trains the model the config names (built in PyTorch, initialised from the
ONNX file's initializers) on the same data, sample order, global batch,
micro-batches, loss, optimizer, clipping and schedule as flowrun, using the
helpers of tools/make_reference.py. It runs 5 untimed warm-up steps, then
times --steps steps and prints one JSON line:

    {"samples_per_s": ..., "step_ms": ..., "threads": ..., "peak_rss_mb": ...}

Only data.format npy configs whose model tools/make_reference.py knows
(models/mlp.onnx, models/mlp_ln_gelu.onnx) are supported.
"""

import argparse
import json
import os
import resource
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_reference as ref  # noqa: E402

WARMUP_STEPS = 5


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", help="flowrun YAML config (npy data, MLP model)")
    ap.add_argument("--steps", type=int, default=100, help="timed steps (after %d warm-up steps)" % WARMUP_STEPS)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    args = ap.parse_args()
    if args.steps < 1 or args.threads < 1:
        ap.error("--steps and --threads must be positive")

    torch.set_num_threads(args.threads)
    cfg = ref.load_config(args.config)
    model = ref.model_from_onnx(cfg["model"]["onnx"]).train()
    x, y = ref.load_data(cfg)
    opt = ref.make_optimizer(cfg, model.parameters())
    criterion = ref.make_criterion(cfg)
    g, _, _ = ref.batch_sizes(cfg)
    total = WARMUP_STEPS + args.steps  # the schedule spans the whole benchmark run

    def step(s):
        ref.train_step(model, opt, criterion, x, y, s, cfg, ref.lr_at(cfg, s, total))

    for s in range(WARMUP_STEPS):
        step(s)
    t0 = time.perf_counter()
    for s in range(WARMUP_STEPS, total):
        step(s)
    elapsed = time.perf_counter() - t0

    # ru_maxrss is in KiB on Linux.
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({
        "samples_per_s": round(g * args.steps / elapsed, 1),
        "step_ms": round(1000.0 * elapsed / args.steps, 4),
        "threads": args.threads,
        "peak_rss_mb": round(peak_rss_mb, 1),
    }))


if __name__ == "__main__":
    main()
