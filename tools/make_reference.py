#!/usr/bin/python3
"""Make flowrun's bundled reference artefacts with PyTorch.

Run from the repository root with Debian's system interpreter:

    /usr/bin/python3 tools/make_reference.py

It (re)writes, deterministically:

  models/mlp.onnx, models/mlp_ln_gelu.onnx   the two tiny test models
  data/mlp_x.npy, data/mlp_y.npy             a learnable 10-class problem
  data/reg_x.npy, data/reg_y.npy             a smooth 8-output regression
  tests/golden/<name>.json                   PyTorch's 20 losses, gradient
                                             norms and learning rates for
                                             every tests/golden/<name>.yaml
                                             with npy data (tools/make_gpt.py
                                             makes the tokens ones)

The outputs are committed, so building and testing flowrun never needs
PyTorch; this script is only rerun when an artefact must change.

The training loop here is the reference for flowrun's semantics (sample
order, micro-batch accumulation, loss averaging, gradient clipping, learning
rate schedule, optimizers); see DESIGN.md section 5. bench/torch_mlp.py reuses
the model, data and optimizer helpers below.
"""

import glob
import inspect
import json
import math
import os
import sys

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml

ONNX_OPSET = 17
TORCH_SEED = 20240601   # parameter initialisation of the exported models
NUMPY_SEED = 12345      # bundled data sets


# --------------------------------------------------------------------------
# Models. The attribute names (fc1, ln, ...) become the ONNX initializer
# names (fc1.weight, ...), which is how the golden runs find their weights.
# --------------------------------------------------------------------------

class Mlp(nn.Module):
    """x [B, 64] -> Linear(64,128) -> ReLU -> Linear(128,128) -> ReLU -> Linear(128,10)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc2 = nn.Linear(128, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


class MlpLnGelu(nn.Module):
    """x [B, 32] -> Linear(32,64) -> LayerNorm(64) -> GELU(erf) -> Linear(64,64) -> Tanh -> Linear(64,8)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.ln = nn.LayerNorm(64)
        self.act = nn.GELU()  # exact form, 0.5 * x * (1 + erf(x / sqrt(2)))
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 8)

    def forward(self, x):
        x = self.act(self.ln(self.fc1(x)))
        x = torch.tanh(self.fc2(x))
        return self.fc3(x)


# file name -> (module class, input width, input name, output name)
MODELS = {
    "models/mlp.onnx": (Mlp, 64, "x", "logits"),
    "models/mlp_ln_gelu.onnx": (MlpLnGelu, 32, "x", "pred"),
}


def make_model(cls):
    """A freshly initialised module with fixed parameters."""
    torch.manual_seed(TORCH_SEED)
    model = cls()
    if isinstance(model, MlpLnGelu):
        # LayerNorm starts at weight=1, bias=0. Perturb it so that a runtime
        # mixing up scale and bias, or ignoring either, fails from step 0.
        with torch.no_grad():
            model.ln.weight.add_(0.1 * torch.randn(64))
            model.ln.bias.add_(0.1 * torch.randn(64))
    return model


def export_model(path):
    cls, width, in_name, out_name = MODELS[path]
    model = make_model(cls).eval()
    dummy = torch.zeros(2, width)
    torch.onnx.export(
        model, (dummy,), path,
        export_params=True,
        opset_version=ONNX_OPSET,
        do_constant_folding=True,
        input_names=[in_name],
        output_names=[out_name],
        dynamic_axes={in_name: {0: "batch"}, out_name: {0: "batch"}},
    )


def describe_onnx(path):
    """Check the exported file and print its nodes and initializers."""
    m = onnx.load(path)
    onnx.checker.check_model(m)
    g = m.graph
    print(f"{path}: {os.path.getsize(path)} bytes, opset "
          f"{[(o.domain or 'ai.onnx', o.version) for o in m.opset_import]}")
    print("  inputs :", [(i.name, [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim])
                         for i in g.input])
    print("  outputs:", [(o.name, [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim])
                         for o in g.output])
    print("  op types:", [n.op_type for n in g.node])
    for n in g.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        print(f"    {n.name:28s} {n.op_type:20s} in={list(n.input)} out={list(n.output)} {attrs}")
    print("  initializers:")
    for t in g.initializer:
        print(f"    {t.name:12s} {list(t.dims)} {onnx.TensorProto.DataType.Name(t.data_type)}")


def load_onnx_params(model, path):
    """Copy the ONNX file's initializers into `model`, matched by name.

    Every parameter of the module must be found with the same shape, so the
    golden runs start from exactly the weights flowrun reads.
    """
    inits = {t.name: onnx.numpy_helper.to_array(t)
             for t in onnx.load(path).graph.initializer}
    with torch.no_grad():
        for name, p in model.named_parameters():
            assert name in inits, f"{path}: no initializer named {name} (have {sorted(inits)})"
            a = inits[name]
            assert tuple(a.shape) == tuple(p.shape), \
                f"{path}: {name} has shape {a.shape}, module expects {tuple(p.shape)}"
            p.copy_(torch.from_numpy(a.copy()))
    return model


def model_from_onnx(path, dtype=torch.float32):
    cls = MODELS[path][0]
    return load_onnx_params(cls(), path).to(dtype)


# --------------------------------------------------------------------------
# Data.
# --------------------------------------------------------------------------

def make_data():
    rng = np.random.default_rng(NUMPY_SEED)

    # Classification: labels from a random 2-layer tanh "teacher" net plus a
    # little noise, so the labels depend learnably on x.
    n, d, h, k = 4096, 64, 32, 10
    x = rng.standard_normal((n, d)).astype(np.float32)
    w1 = rng.standard_normal((d, h)) / math.sqrt(d)
    w2 = rng.standard_normal((h, k)) * 2.0 / math.sqrt(h)
    scores = np.tanh(x.astype(np.float64) @ w1) @ w2 + 0.1 * rng.standard_normal((n, k))
    y = np.argmax(scores, axis=1).astype(np.int64)
    np.save("data/mlp_x.npy", np.ascontiguousarray(x, dtype="<f4"))
    np.save("data/mlp_y.npy", np.ascontiguousarray(y, dtype="<i8"))
    print("data/mlp_x.npy", x.shape, x.dtype, "data/mlp_y.npy", y.shape, y.dtype,
          "label counts", np.bincount(y, minlength=k).tolist())

    # Regression: y = tanh(x P + c) plus small noise.
    n, d, k = 2048, 32, 8
    x = rng.standard_normal((n, d)).astype(np.float32)
    proj = rng.standard_normal((d, k)) * 1.5 / math.sqrt(d)
    bias = 0.2 * rng.standard_normal(k)
    y = np.tanh(x.astype(np.float64) @ proj + bias) + 0.02 * rng.standard_normal((n, k))
    y = y.astype(np.float32)
    np.save("data/reg_x.npy", np.ascontiguousarray(x, dtype="<f4"))
    np.save("data/reg_y.npy", np.ascontiguousarray(y, dtype="<f4"))
    print("data/reg_x.npy", x.shape, x.dtype, "data/reg_y.npy", y.shape, y.dtype,
          "y std", float(y.std()))


# --------------------------------------------------------------------------
# Training, with flowrun's semantics.
# --------------------------------------------------------------------------

def load_config(path):
    with open(path) as f:
        cfg = yaml.safe_load(f)
    data = cfg["data"]
    assert data["format"] == "npy", f"{path}: only data.format npy is supported here"
    assert data.get("order", "sequential") == "sequential", f"{path}: only sequential order"
    assert cfg["model"].get("inputs", {}) == {"x": "x"}, f"{path}: expects model.inputs {{x: x}}"
    assert cfg["model"]["loss"]["labels"] == "y", f"{path}: expects loss labels y"
    return cfg


def load_data(cfg, dtype=torch.float32):
    x = torch.from_numpy(np.load(cfg["data"]["x"]))
    y = torch.from_numpy(np.load(cfg["data"]["y"]))
    assert x.shape[0] == y.shape[0]
    x = x.to(dtype)
    if cfg["model"]["loss"]["type"] == "mse":
        y = y.to(dtype)
    return x, y


def make_criterion(cfg):
    loss = cfg["model"]["loss"]
    if loss["type"] == "cross_entropy":
        return lambda out, y: F.cross_entropy(out, y)          # mean over the micro-batch
    if loss["type"] == "mse":
        return lambda out, y: F.mse_loss(out, y)               # mean over all elements
    raise ValueError(f"unknown loss type {loss['type']}")


def _plain(cls):
    # The per-parameter ("for loop") algorithm, not the multi-tensor one.
    return {"foreach": False} if "foreach" in inspect.signature(cls.__init__).parameters else {}


def make_optimizer(cfg, params):
    o = cfg["optimizer"]
    if o["type"] == "sgd":
        return torch.optim.SGD(params, lr=o["lr"], momentum=o.get("momentum", 0.0),
                               nesterov=o.get("nesterov", False),
                               weight_decay=o.get("weight_decay", 0.0), **_plain(torch.optim.SGD))
    if o["type"] == "adamw":
        # flowrun's weight_decay default is 0 (PyTorch's AdamW default is 0.01).
        return torch.optim.AdamW(params, lr=o["lr"], betas=tuple(o.get("betas", [0.9, 0.999])),
                                 eps=o.get("eps", 1e-8), weight_decay=o.get("weight_decay", 0.0),
                                 **_plain(torch.optim.AdamW))
    raise ValueError(f"unknown optimizer type {o['type']}")


def lr_at(cfg, s, total_steps=None):
    """Learning rate of step s (0-based)."""
    lr = float(cfg["optimizer"]["lr"])
    sch = cfg.get("schedule") or {}
    kind = sch.get("type", "constant")
    warm = int(sch.get("warmup", 0))
    min_lr = float(sch.get("min_lr", 0.0))
    steps = int(cfg["train"]["steps"] if total_steps is None else total_steps)
    if s < warm:
        return lr * (s + 1) / warm
    p = (s - warm) / max(1, steps - warm)
    if kind == "constant":
        return lr
    if kind == "linear":
        return lr + (min_lr - lr) * p
    if kind == "cosine":
        return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * p))
    raise ValueError(f"unknown schedule type {kind}")


def batch_sizes(cfg):
    g = int(cfg["train"]["global_batch"])
    mb = int(cfg["train"].get("micro_batch", g))
    assert g % mb == 0, "global_batch must be a multiple of micro_batch"
    return g, mb, g // mb


def batch_rows(s, g, n):
    """Rows of step s: sample b is row (s*G + b) mod N."""
    return (s * g + torch.arange(g, dtype=torch.int64)) % n


def train_step(model, opt, criterion, x, y, s, cfg, lr):
    """One optimizer step; returns (loss, gnorm). Sets `lr` before stepping."""
    g, mb, m = batch_sizes(cfg)
    rows = batch_rows(s, g, x.shape[0])
    xs, ys = x[rows], y[rows]
    params = [p for p in model.parameters()]
    opt.zero_grad(set_to_none=False)
    losses = []
    for i in range(m):
        xm, ym = xs[i * mb:(i + 1) * mb], ys[i * mb:(i + 1) * mb]
        loss_m = criterion(model(xm), ym)
        (loss_m / m).backward()
        losses.append(loss_m.item())
    loss = float(np.mean(np.asarray(losses, dtype=np.float64)))
    clip = float(cfg["optimizer"].get("grad_clip", 0.0))
    if clip > 0:
        # Clips in place by min(1, clip / (gnorm + 1e-6)); returns the pre-clip norm.
        gnorm = torch.nn.utils.clip_grad_norm_(params, clip)
    else:
        gnorm = torch.norm(torch.stack([torch.norm(p.grad.detach(), 2) for p in params]), 2)
    for group in opt.param_groups:
        group["lr"] = lr
    opt.step()
    return loss, float(gnorm)


def run_golden(cfg, dtype):
    model = model_from_onnx(cfg["model"]["onnx"], dtype).train()
    x, y = load_data(cfg, dtype)
    opt = make_optimizer(cfg, model.parameters())
    criterion = make_criterion(cfg)
    losses, gnorms, lrs = [], [], []
    for s in range(int(cfg["train"]["steps"])):
        lr = lr_at(cfg, s)
        loss, gnorm = train_step(model, opt, criterion, x, y, s, cfg, lr)
        losses.append(loss)
        gnorms.append(gnorm)
        lrs.append(lr)
    return losses, gnorms, lrs


def write_golden(name, path, run_golden):
    """Runs a golden config in float32, writes tests/golden/NAME.json, and prints how far the
    float32 losses are from a float64 rerun (from the same initial weights and data): how much of
    the float32 result is rounding noise. Shared with tools/make_gpt.py."""
    losses, gnorms, lrs = run_golden(torch.float32)
    out = {"config": path, "torch": torch.__version__,
           "losses": losses, "gnorms": gnorms, "lrs": lrs}
    with open(f"tests/golden/{name}.json", "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    l64, g64, _ = run_golden(torch.float64)
    rel = max(abs(a - b) / abs(b) for a, b in zip(losses, l64))
    grel = max(abs(a - b) / abs(b) for a, b in zip(gnorms, g64))
    print(f"{name}: loss {losses[0]:.6f} -> {losses[-1]:.6f}  "
          f"gnorm {gnorms[0]:.4f} -> {gnorms[-1]:.4f}  "
          f"f32 vs f64 max rel diff: loss {rel:.3e}, gnorm {grel:.3e}")


def make_goldens():
    for path in sorted(glob.glob("tests/golden/*.yaml")):
        name = os.path.splitext(os.path.basename(path))[0]
        with open(path) as f:
            if yaml.safe_load(f)["data"]["format"] == "tokens":
                continue  # GPT goldens: tools/make_gpt.py
        cfg = load_config(path)
        write_golden(name, path, lambda dtype: run_golden(cfg, dtype))


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(root)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for d in ("models", "data", "tests/golden"):
        os.makedirs(d, exist_ok=True)
    print(f"torch {torch.__version__}, onnx {onnx.__version__}, numpy {np.__version__}")
    for path in MODELS:
        export_model(path)
        describe_onnx(path)
    make_data()
    make_goldens()


if __name__ == "__main__":
    sys.exit(main())
