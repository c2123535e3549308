#!/usr/bin/python3
"""Make flowrun's GPT reference artefacts with PyTorch.

Run from the repository root with Debian's system interpreter, after
tools/text_to_tokens.py has made the tokens file:

    /usr/bin/python3 tools/make_gpt.py

It (re)writes, deterministically:

  models/gpt_mini.onnx    nanoGPT-style decoder, C=64, 4 heads, 2 layers, T=64
  models/gpt_mini2.onnx   the same code, C=48, 3 heads, 3 layers, T=32
  tests/golden/<name>.json for every tests/golden/<name>.yaml whose data.format
                          is tokens (PyTorch's 20 losses, gradient norms, lrs)

and prints each export's op types and initializer names. The training loop,
optimizers and schedule are tools/make_reference.py's; only the model, the
tokens data and the token-level cross entropy are added here.
bench/torch_gpt.py reuses these helpers.
"""

import collections
import glob
import inspect
import json
import math
import os
import sys
import warnings

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_reference as ref  # noqa: E402

VOCAB = 256  # byte-level tokens


# --------------------------------------------------------------------------
# The model, written the common (nanoGPT) way.
# --------------------------------------------------------------------------

class CausalSelfAttention(nn.Module):
    def __init__(self, c, n_head, block):
        super().__init__()
        assert c % n_head == 0
        self.n_head = n_head
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        # Causal mask, a buffer (not a parameter): 1 on and below the diagonal.
        self.register_buffer("bias", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # [B, nh, T, hd]
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v                                                       # [B, nh, T, hd]
        y = y.transpose(1, 2).contiguous().view(B, T, C)
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
    def __init__(self, c, n_head, block):
        super().__init__()
        self.ln1 = nn.LayerNorm(c)
        self.attn = CausalSelfAttention(c, n_head, block)
        self.ln2 = nn.LayerNorm(c)
        self.mlp = Mlp(c)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    """idx [B, T] int64 -> logits [B, T, vocab] (256 unless given)."""

    def __init__(self, c, n_head, n_layer, block, vocab=VOCAB):
        super().__init__()
        self.block = block
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(block, c)
        self.blocks = nn.ModuleList([Block(c, n_head, block) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(c)
        self.head = nn.Linear(c, vocab, bias=False)  # untied from wte

    def forward(self, idx):
        B, T = idx.size()
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


# file name -> (C, n_head, n_layer, T)
MODELS = {
    "models/gpt_mini.onnx": (64, 4, 2, 64),
    "models/gpt_mini2.onnx": (48, 3, 3, 32),
}


def make_model(path):
    """The module for one of MODELS, as init_model makes it."""
    return init_model(*MODELS[path])


def init_model(c, n_head, n_layer, block, vocab=VOCAB):
    """PyTorch's default initialisation under a fixed seed, LayerNorms perturbed.

    The exporter (eval mode) merges initializers with equal values, so default
    LayerNorms (all ones / all zeros) would come out as one shared tensor.
    A small seeded perturbation keeps every parameter its own initializer, and
    makes a runtime that swaps scale and bias fail from step 0.
    """
    torch.manual_seed(ref.TORCH_SEED)
    model = Gpt(c, n_head, n_layer, block, vocab)
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.add_(0.1 * torch.randn(m.weight.shape))
                m.bias.add_(0.1 * torch.randn(m.bias.shape))
    return model


def export_model(path):
    export_module(make_model(path), MODELS[path][3], path)


def export_module(model, t, path):
    """Export `model` as flowrun's GPT exports are: idx [batch, t] int64 ->
    logits, opset 17, dynamic batch, default constant folding."""
    model = model.eval()
    dummy = torch.zeros(2, t, dtype=torch.int64)
    with warnings.catch_warnings():
        # math.sqrt(k.size(-1)) becomes a constant, as intended (hd is fixed).
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        _export(model, dummy, path)


def _export(model, dummy, path):
    # The TorchScript exporter, which PyTorch 2.9 and later use only when asked (their default, the
    # dynamo exporter, renames and transposes the Linear weights load_onnx_params looks for).
    kw = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    torch.onnx.export(
        model, (dummy,), path,
        export_params=True,
        opset_version=ref.ONNX_OPSET,
        do_constant_folding=True,
        input_names=["idx"],
        output_names=["logits"],
        dynamic_axes={"idx": {0: "batch"}, "logits": {0: "batch"}},
        **kw,
    )


def describe_onnx(path):
    m = onnx.load(path)
    onnx.checker.check_model(m)
    g = m.graph
    dims = lambda v: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]  # noqa: E731
    print(f"{path}: {os.path.getsize(path)} bytes, {len(g.node)} nodes, opset "
          f"{[(o.domain or 'ai.onnx', o.version) for o in m.opset_import]}")
    print("  inputs :", [(i.name, dims(i)) for i in g.input])
    print("  outputs:", [(o.name, dims(o)) for o in g.output])
    counts = collections.Counter(n.op_type for n in g.node)
    print("  op types:", ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())))
    print("  initializers:")
    for t in g.initializer:
        print(f"    {t.name:28s} {list(t.dims)} {onnx.TensorProto.DataType.Name(t.data_type)}")


def load_onnx_params(model, path):
    """Copy the ONNX file's initializers into `model`; returns (model, {init: param}).

    Parameters named after the module keep their names (biases, LayerNorms,
    embeddings). Linear weights feed MatMul, and constant folding stores them
    transposed under anonymous names (onnx::MatMul_N = weight.T). Those are
    matched by exact value against `model` (freshly made, so holding the
    export's values) and cross-checked against the scope of the MatMul that
    reads them (/blocks.0/attn/qkv/MatMul reads blocks.0.attn.qkv.weight.T).
    Every parameter must match exactly one initializer, and no initializer
    two parameters. Buffers (the causal mask) are not parameters.
    """
    graph = onnx.load(path).graph
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
    readers = collections.defaultdict(list)
    for n in graph.node:
        for i, v in enumerate(n.input):
            if v in inits:
                readers[v].append((n.name, i))
    named = set(model.state_dict())
    anon = {k: a for k, a in inits.items() if k not in named and a.dtype == np.float32 and a.ndim == 2}
    used = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            want = p.detach().cpu().numpy()
            if name in inits:
                assert inits[name].shape == want.shape, f"{path}: {name} {inits[name].shape} vs {want.shape}"
                hits = [(name, False)]
            else:
                hits = [(k, t) for k, a in anon.items() for t in (False, True)
                        if (want.T if t else want).shape == a.shape
                        and np.array_equal(a, want.T if t else want)]
            assert len(hits) == 1, f"{path}: parameter {name} {want.shape} matches {hits}"
            k, transposed = hits[0]
            assert k not in used, f"{path}: initializer {k} matches both {used[k]} and {name}"
            if k != name:
                scope = "/" + name.rsplit(".", 1)[0] + "/"  # /blocks.0.attn.qkv/, in dots
                assert readers[k] and all(r.replace("/", ".").startswith(scope.replace("/", "."))
                                          for r, _ in readers[k]), \
                    f"{path}: {k} (= {name}) is read by {readers[k]}, outside {scope}"
            used[k] = name + (".T" if transposed else "")
            a = inits[k].T if transposed else inits[k]
            p.copy_(torch.from_numpy(np.array(a)))
    return model, used


def model_from_onnx(path, dtype=torch.float32):
    """A module holding the ONNX file's weights (value-matched against a fresh
    export-time model, then loaded from the file)."""
    model, _ = load_onnx_params(make_model(path), path)
    return model.to(dtype)


# --------------------------------------------------------------------------
# Data and loss.
# --------------------------------------------------------------------------

def load_config(path):
    with open(path) as f:
        cfg = yaml.safe_load(f)
    data = cfg["data"]
    assert data["format"] == "tokens", f"{path}: only data.format tokens is supported here"
    assert data.get("order", "sequential") == "sequential", f"{path}: only sequential order"
    assert cfg["model"].get("inputs") == {"idx": "tokens"}, f"{path}: expects model.inputs {{idx: tokens}}"
    assert cfg["model"]["loss"] == {"type": "cross_entropy", "logits": "logits", "labels": "targets"}, \
        f"{path}: expects loss {{type: cross_entropy, logits: logits, labels: targets}}"
    assert int(data["seq_len"]) == MODELS[cfg["model"]["onnx"]][3], f"{path}: seq_len must be the model's T"
    return cfg


def load_data(cfg):
    """(tokens, targets), each [W, T] int64: window w is tok[wT : wT+T] and
    its targets tok[wT+1 : wT+T+1], W = (n_tokens - 1) // T."""
    tok = np.fromfile(cfg["data"]["train"], dtype="<u2").astype(np.int64)
    t = int(cfg["data"]["seq_len"])
    w = (tok.size - 1) // t
    assert w >= 1, "the tokens file is shorter than one window"
    x = torch.from_numpy(tok[:w * t].reshape(w, t).copy())
    y = torch.from_numpy(tok[1:w * t + 1].reshape(w, t).copy())
    return x, y


def criterion(logits, targets):
    """Cross entropy, the mean over all B*T positions."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# --------------------------------------------------------------------------
# Golden runs.
# --------------------------------------------------------------------------

def run_golden(cfg, dtype):
    model = model_from_onnx(cfg["model"]["onnx"], dtype).train()
    x, y = load_data(cfg)
    opt = ref.make_optimizer(cfg, model.parameters())
    losses, gnorms, lrs = [], [], []
    for s in range(int(cfg["train"]["steps"])):
        lr = ref.lr_at(cfg, s)
        loss, gnorm = ref.train_step(model, opt, criterion, x, y, s, cfg, lr)
        losses.append(loss)
        gnorms.append(gnorm)
        lrs.append(lr)
    return losses, gnorms, lrs


def tokens_goldens():
    out = []
    for path in sorted(glob.glob("tests/golden/*.yaml")):
        with open(path) as f:
            if yaml.safe_load(f)["data"]["format"] == "tokens":
                out.append(path)
    return out


def make_goldens():
    for path in tokens_goldens():
        name = os.path.splitext(os.path.basename(path))[0]
        cfg = load_config(path)
        ref.write_golden(name, path, lambda dtype: run_golden(cfg, dtype))


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(root)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    print(f"torch {torch.__version__}, onnx {onnx.__version__}, numpy {np.__version__}")
    for path in MODELS:
        export_model(path)
        describe_onnx(path)
        model, used = load_onnx_params(make_model(path), path)
        n = sum(p.numel() for p in model.parameters())
        print(f"  {len(used)} parameters ({n} values) matched; renamed: "
              + ", ".join(f"{k} = {v}" for k, v in used.items() if k != v))
        # The export computes what the module computes.
        idx = load_data({"data": {"train": "data/devils_dictionary.u16", "seq_len": MODELS[path][3]}})[0][:3]
        with torch.no_grad():
            want = model.eval()(idx).numpy()
        diff = _onnx_diff(path, idx.numpy(), want)
        if diff is not None:
            print(f"  onnxruntime vs torch logits, max abs diff: {diff:.2e}")
    make_goldens()


def _onnx_diff(path, idx, want):
    """Max |onnxruntime - torch| of the logits; None where onnxruntime is absent."""
    try:
        import onnxruntime
    except ImportError:
        return None
    sess = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return float(np.abs(sess.run(None, {"idx": idx})[0] - want).max())


if __name__ == "__main__":
    sys.exit(main())
