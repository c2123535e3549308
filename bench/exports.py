#!/usr/bin/env python3
"""flowrun against PyTorch eager on the exports of tools/make_exports.py, one thread each.

    python3 bench/exports.py [--steps 60] [--rounds 3] [--models gpt2,resnet]

Runs in make_exports.py's venv (current PyTorch; it reruns itself there). For each model it
alternates, round by round, flowrun training the TorchScript export's golden config
(`OMP_NUM_THREADS=1`, its mean ms/step over the steps after the first) and PyTorch training the
same module from the same weights on the same data and schedule (`torch.set_num_threads(1)`,
make_reference.py's loop, the mean over the same steps). It prints the median of each and the
ratio. Build flowrun first (tools/bootstrap.sh).
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_exports as me  # noqa: E402


def flowrun_ms(cfg_path, steps):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run([os.path.join(ROOT, "build/src/flowrun"), "train", cfg_path, "--set", f"train.steps={steps}",
                          "--set", f"log.every={steps}"], capture_output=True, text=True, env=env, check=True).stdout
    return float(re.search(r"([0-9.]+) ms/step", out).group(1))


def torch_ms(name, seed, cfg, steps):
    import torch
    import make_reference as ref
    import make_gpt
    cfg = dict(cfg, train=dict(cfg["train"], steps=steps))
    model = me.build(name, seed)
    model.train()
    if cfg["data"]["format"] == "npy":
        x, y = ref.load_data(cfg)
        criterion = ref.make_criterion(cfg)
    else:
        x, y = make_gpt.load_data(cfg)
        criterion = make_gpt.criterion
    opt = ref.make_optimizer(cfg, model.parameters())
    times = []
    for s in range(steps):
        t0 = time.perf_counter()
        ref.train_step(model, opt, criterion, x, y, s, cfg, ref.lr_at(cfg, s))
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.mean(times[1:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="gpt2,resnet")
    ap.add_argument("--venv", default=os.path.expanduser("~/.cache/flowrun/exports-venv"))
    args = ap.parse_args()
    me.ensure_venv(args.venv)
    import json
    import torch
    os.chdir(ROOT)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {args.steps} steps, {args.rounds} interleaved rounds, one thread each")
    for name in args.models.split(","):
        stem = f"tests/golden/exports/{name}_torchscript_adamw"
        seed = json.load(open(stem + ".json"))["seed"]
        cfg = me.golden_config(f"models/exports/{name}_torchscript.onnx", "adamw")
        fr, pt = [], []
        for _ in range(args.rounds):
            fr.append(flowrun_ms(stem + ".yaml", args.steps))
            pt.append(torch_ms(name, seed, cfg, args.steps))
        f, p = statistics.median(fr), statistics.median(pt)
        print(f"{name}: flowrun {f:.2f} ms/step, PyTorch eager {p:.2f} ms/step: flowrun {p / f:.2f}x PyTorch's speed")


if __name__ == "__main__":
    main()
