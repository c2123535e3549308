#!/usr/bin/env python3
"""PyTorch's evaluation losses for the BatchNorm exports (the TorchScript CNN and ResNet, exported
in training mode), for Eval.BatchNormIsPyTorchsEvalMode_1n1d.

    /usr/bin/python3 tools/make_bn_eval.py     # Debian's python3 with python3-torch,
                                               # python3-torchvision, python3-onnx, python3-yaml

For each tests/golden/exports/{cnn,resnet}_torchscript_{sgd,adamw}.yaml it trains as that config
with EVAL (below) set: the last quarter of the samples held out, an evaluation after steps 10 and
20. PyTorch's model starts from the export's initializers (every weight and running statistic), so
the numbers do not depend on the random initialisation of the PyTorch that exported it. An
evaluation is model.eval(): BatchNorm normalizes with its running statistics. It writes
NAME_eval.json beside the config: the 20 training losses and the evaluations' losses. Nothing in
flowrun's build or tests runs this; its output is committed.
"""

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402
from onnx import numpy_helper  # noqa: E402

import make_exports  # noqa: E402
import make_reference as ref  # noqa: E402

EVAL_EVERY, EVAL_STEPS, SPLIT = 10, 2, 0.25
EVAL = f"eval={{every: {EVAL_EVERY}, steps: {EVAL_STEPS}, split: {SPLIT}}}"


def model_from_export(name, path):
    """make_exports' model with every state_dict entry the export holds (num_batches_tracked,
    which the training-mode BatchNorm with a momentum never reads, is not in it)."""
    model = getattr(make_exports, name)()
    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    with torch.no_grad():
        for k, v in model.state_dict().items():
            if k.endswith("num_batches_tracked"):
                continue
            if k not in inits:
                sys.exit(f"make_bn_eval: {path} has no initializer '{k}'")
            if tuple(inits[k].shape) != tuple(v.shape):
                sys.exit(f"make_bn_eval: {path}: '{k}' is {inits[k].shape}, the model's {tuple(v.shape)}")
            v.copy_(torch.from_numpy(inits[k].copy()))
    return model


def evaluate(model, criterion, x, y, cfg):
    """flowrun's evaluation: EVAL_STEPS batches of the global batch from the start of the held-out
    samples; each step's loss the mean of its micro-batches' mean losses; their mean."""
    g, mb, m = ref.batch_sizes(cfg)
    model.eval()
    steps = []
    with torch.no_grad():
        for s in range(EVAL_STEPS):
            rows = ref.batch_rows(s, g, x.shape[0])
            xs, ys = x[rows], y[rows]
            micro = [criterion(model(xs[i * mb:(i + 1) * mb]), ys[i * mb:(i + 1) * mb]).item() for i in range(m)]
            steps.append(float(np.mean(np.asarray(micro, dtype=np.float64))))
    model.train()
    return float(np.mean(np.asarray(steps, dtype=np.float64)))


def main():
    os.chdir(ROOT)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for name in ("cnn", "resnet"):
        for opt in ("sgd", "adamw"):
            stem = f"tests/golden/exports/{name}_torchscript_{opt}"
            with open(stem + ".yaml") as f:
                cfg = yaml.safe_load(f)
            model = model_from_export(name, cfg["model"]["onnx"]).train()
            x, y = ref.load_data(cfg)
            n = x.shape[0]
            held = int(round(SPLIT * n))
            xt, yt, xe, ye = x[:n - held], y[:n - held], x[n - held:], y[n - held:]
            criterion = ref.make_criterion(cfg)
            optimizer = ref.make_optimizer(cfg, model.parameters())
            losses, evals = [], []
            for s in range(cfg["train"]["steps"]):
                loss, _ = ref.train_step(model, optimizer, criterion, xt, yt, s, cfg, ref.lr_at(cfg, s))
                losses.append(loss)
                if (s + 1) % EVAL_EVERY == 0:
                    evals.append((s + 1, evaluate(model, criterion, xe, ye, cfg)))
            out = {"config": stem + ".yaml", "set": EVAL, "torch": torch.__version__, "losses": losses,
                   "eval_steps": [e[0] for e in evals], "eval_losses": [e[1] for e in evals]}
            with open(stem + "_eval.json", "w") as f:
                json.dump(out, f, indent=1)
                f.write("\n")
            print(f"{stem}: loss {losses[0]:.6f} -> {losses[-1]:.6f}, eval " +
                  ", ".join(f"{e[1]:.6f} (step {e[0]})" for e in evals))


if __name__ == "__main__":
    main()
