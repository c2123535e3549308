#!/usr/bin/env python3
"""Export tiny Hugging Face and torchvision models the way a new user would, and make
PyTorch's reference losses for them.

    python3 tools/make_exports.py [--venv DIR] [--only NAME[,NAME...]]

The first run makes a venv (default ~/.cache/flowrun/exports-venv, from pyenv's python 3.11 or
the python running this script) and installs current torch, transformers, torchvision, onnx and
onnxscript from PyPI into it, then reruns itself there. Nothing in flowrun's build or tests needs
that venv: the exports and the reference numbers are committed.

For each model (a seeded random config, no hub downloads) and each exporter, it writes
models/exports/NAME_EXPORTER.onnx (and .onnx.data where the exporter puts weights beside the
file), and for each optimizer tests/golden/exports/NAME_EXPORTER_OPT.json with PyTorch's 20
losses, gradient norms and learning rates, trained from the same weights on the same data as
tests/golden/exports/NAME_EXPORTER_OPT.yaml, which it also writes. The exporters:

Models: GPT-2 (GPT2LMHeadModel, with its NewGELU and with F.gelu(approximate="tanh")), Llama
(LlamaForCausalLM with grouped-query attention) and
nanoGPT (its model, with F.scaled_dot_product_attention and a tied head).

  dynamo       torch.onnx.export(..., dynamo=True): the default of current PyTorch (opset 18+,
               weights as external data)
  torchscript  torch.onnx.export(..., dynamo=False): the TorchScript exporter at its default
               opset

It prints each export's opset, op types and size, and the import status is left to
`flowrun plan`. Deterministic: a rerun writes the same numbers.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ["torch", "transformers", "torchvision", "onnx", "onnxscript", "numpy", "pyyaml"]
SEQ, BATCH, VOCAB, STEPS, IMAGE_BATCH = 32, 4, 256, 20, 16


def ensure_venv(venv):
    """Reruns this script in the venv, making it first if need be."""
    py = os.path.join(venv, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(venv):
        return
    if not os.path.exists(py):
        base = os.path.expanduser("~/.pyenv/versions/3.11.7/bin/python")
        base = base if os.path.exists(base) else sys.executable
        print(f"make_exports: making {venv} with {base}", flush=True)
        subprocess.check_call([base, "-m", "venv", venv])
        subprocess.check_call([py, "-m", "pip", "install", "-q"] + PACKAGES)
    os.execv(py, [py] + sys.argv)


# --------------------------------------------------------------------------
# The models: tiny seeded configs, every dropout 0 so that PyTorch and flowrun train the same
# model (their dropout masks cannot agree); bert_dropout keeps BERT's dropouts at 0.1.
# --------------------------------------------------------------------------

def gpt2(activation="gelu_new"):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=64, n_layer=2, n_head=4,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, activation_function=activation)
    return GPT2LMHeadModel(cfg)


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ,
                      attention_dropout=0.0)
    return LlamaForCausalLM(cfg)


def nanogpt():
    """nanoGPT's model: learned positions, pre-LayerNorm blocks, causal attention through
    F.scaled_dot_product_attention, tanh GELU (the ONNX Gelu op), and the head tied to the token embedding."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    c, heads, layers = 64, 4, 2

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
            self.c_attn, self.c_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
            self.fc, self.proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))

    class NanoGPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(VOCAB, c), nn.Embedding(SEQ, c)
            self.h = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(c)
            self.lm_head = nn.Linear(c, VOCAB, bias=False)
            self.lm_head.weight = self.wte.weight  # tied, as nanoGPT does

        def forward(self, input_ids, use_cache=False):
            pos = torch.arange(input_ids.shape[1], device=input_ids.device)
            x = self.wte(input_ids) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            return type("Out", (), {"logits": self.lm_head(self.ln_f(x))})

    return NanoGPT()


def cnn():
    """A small CNN: two Conv-BatchNorm-ReLU stages, max and average pooling, a Linear head."""
    import torch.nn as nn
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AvgPool2d(2),
        nn.Flatten(), nn.Linear(16 * 4 * 4, CLASSES))


def resnet():
    """A tiny ResNet: a stem and two basic blocks (the second strided, with a 1x1 downsample),
    global average pooling and a Linear head (torchvision's BasicBlock at widths 8 and 16)."""
    import torch.nn as nn
    from torchvision.models.resnet import BasicBlock

    down = nn.Sequential(nn.Conv2d(8, 16, 1, stride=2, bias=False), nn.BatchNorm2d(16))
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        BasicBlock(8, 8), BasicBlock(8, 16, stride=2, downsample=down),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, CLASSES))


def bert(dropout=0.0):
    """BertForSequenceClassification, 2 labels, returning its logits from input_ids,
    attention_mask and token_type_ids."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                     max_position_embeddings=SEQ, type_vocab_size=2, num_labels=2, hidden_dropout_prob=dropout,
                     attention_probs_dropout_prob=dropout, classifier_dropout=dropout)

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = BertForSequenceClassification(cfg)

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits

    return Classifier()


def bert_mlm():
    """BertForMaskedLM (decoder tied to the word embeddings), returning its logits [B, S, V] from
    input_ids, attention_mask and token_type_ids."""
    import torch
    from transformers import BertConfig, BertForMaskedLM
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                     max_position_embeddings=SEQ, type_vocab_size=2, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)

    class MaskedLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = BertForMaskedLM(cfg)

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits

    return MaskedLM()


MODELS = {"gpt2": gpt2, "llama": llama, "nanogpt": nanogpt, "cnn": cnn, "resnet": resnet, "bert": bert,
          "bert_dropout": lambda: bert(0.1), "bert_mlm": bert_mlm, "gpt2_fresh": gpt2,
          "gpt2_tanh": lambda: gpt2("gelu_pytorch_tanh")}
# gpt2_tanh: GPT-2 with F.gelu(approximate="tanh") (transformers' gelu_pytorch_tanh, as Gemma and
# StarCoder2 use), exported at the opsets earlier PyTorch releases defaulted to (OPSETS): below
# opset 20, which has a Gelu op, each exporter spells it as a chain of its own, unlike NewGELU's.
OPSETS = {"gpt2_tanh": {"dynamo": 18, "torchscript": 17}}
# LayerNorms left at PyTorch's initialisation (weights 1, biases 0): the dynamo exporter merges
# initializers of equal value (up to 1024 elements) into one, which flowrun must train apart. (Its
# optimizer also drops a Linear's all-zero bias, which no trainer can undo: the other parameters
# move off their initial values as everywhere else.)
FRESH_MODELS = {"gpt2_fresh"}
# Exported in training mode with their Dropout nodes; the golden run sets model.dropout: false and
# must equal the model without them (same seed, same weights: dropout has no parameters).
DROPOUT_MODELS = {"bert_dropout": "bert"}
TEXT_FIELDS = ("input_ids", "attention_mask", "token_type_ids")
IMAGE_MODELS = {"cnn", "resnet"}
IMAGE, CLASSES, SAMPLES = (3, 16, 16), 10, 256


def make_images():
    """data/images_x.npy [256, 3, 16, 16] float32 and data/images_y.npy [256] int64: smooth random
    images labelled by a fixed random teacher (the argmax of a linear map of their 4x4 means)."""
    import numpy as np
    rng = np.random.default_rng(7)
    base = rng.standard_normal((SAMPLES, 3, 4, 4)).astype(np.float32)
    x = np.repeat(np.repeat(base, 4, axis=2), 4, axis=3) + 0.3 * rng.standard_normal((SAMPLES,) + IMAGE).astype(np.float32)
    teacher = rng.standard_normal((3 * 16, CLASSES))
    y = (base.reshape(SAMPLES, -1) @ teacher).argmax(axis=1).astype(np.int64)
    np.save("data/images_x.npy", x.astype(np.float32))
    np.save("data/images_y.npy", y)


MASK_TOKEN = VOCAB - 1


def make_masked_lm():
    """data/mlm_{input_ids,labels}.npy: the pairs' tokens with 15% of the unpadded positions replaced
    by MASK_TOKEN, labelled with the token they hid; every other label is -100 (ignored)."""
    import numpy as np
    rng = np.random.default_rng(13)
    ids, mask = np.load("data/pairs_input_ids.npy"), np.load("data/pairs_attention_mask.npy")
    hidden = (rng.random(ids.shape) < 0.15) & (mask == 1)
    labels = np.where(hidden, ids, -100).astype(np.int64)
    np.save("data/mlm_input_ids.npy", np.where(hidden, MASK_TOKEN, ids).astype(np.int64))
    np.save("data/mlm_labels.npy", labels)


def make_text_pairs():
    """data/pairs_{input_ids,attention_mask,token_type_ids,labels}.npy, 256 samples of SEQ: windows
    of the GPT token data as sentence pairs (token types 0 then 1 from a random cut), the last 0-7
    positions padded (mask 0, token 0), labelled 1 where the first segment has more spaces than
    the second."""
    import numpy as np
    rng = np.random.default_rng(11)
    tok = np.fromfile("data/devils_dictionary.u16", dtype="<u2").astype(np.int64)
    ids = np.stack([tok[i * SEQ:(i + 1) * SEQ] for i in range(SAMPLES)])
    types = np.zeros_like(ids)
    mask = np.ones_like(ids)
    labels = np.zeros(SAMPLES, dtype=np.int64)
    for i in range(SAMPLES):
        cut, pad = rng.integers(8, SEQ - 8), rng.integers(0, 8)
        types[i, cut:] = 1
        if pad:
            mask[i, SEQ - pad:] = 0
            ids[i, SEQ - pad:] = 0
            types[i, SEQ - pad:] = 0
        first, second = ids[i, :cut], ids[i, cut:SEQ - pad]
        labels[i] = int((first == 32).sum() > (second == 32).sum())
    for name, a in (("input_ids", ids), ("attention_mask", mask), ("token_type_ids", types), ("labels", labels)):
        np.save(f"data/pairs_{name}.npy", a)


class Logits:
    """Wraps a causal LM so that forward(input_ids) returns the logits alone."""

    def __new__(cls, lm):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self, lm):
                super().__init__()
                self.lm = lm

            def forward(self, input_ids):
                if torch.jit.is_tracing() and hasattr(self.lm, "config"):
                    # transformers 5 looks for packed sequences with aten::diff when no mask is
                    # given, which the TorchScript exporter cannot export: give the all-ones mask.
                    return self.lm(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                   use_cache=False).logits
                return self.lm(input_ids=input_ids, use_cache=False).logits

        return Wrapped(lm)


def build(name, seed=0, jitter=0.0):
    """The model from its seed; `jitter` > 0 moves every parameter by a relative jitter of random
    sign (the conditioning check below)."""
    import torch
    torch.manual_seed(seed)
    model = MODELS[name]() if name in IMAGE_MODELS or name.startswith("bert") else Logits(MODELS[name]())
    # Perturb every parameter a little: default inits (LayerNorm ones, zero biases) would make
    # distinct parameters equal, which exporters then merge.
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if name not in FRESH_MODELS or ".ln_" not in pname:
                p.add_(torch.randn(p.shape, generator=g) * 0.02)
        if jitter:
            for p in model.parameters():
                p.mul_(1 + jitter * torch.randn(p.shape, generator=g).sign())
    return model


# A golden run must be well-conditioned: two correct float32 trainers differ by rounding, about
# 1e-7, and the test asks for 1e-4. A run whose losses jump when every parameter moves by 1e-6
# (a ReLU input or a max a hair from its kink) cannot tell a bug from rounding: a tiny ResNet's
# seed 0 puts a BatchNorm output 6.6e-7 from ReLU's kink, and a 2e-6 shift of one bias moves
# PyTorch's own losses by 1e-3 by step 10. So each model takes the first seed whose reference
# losses move less than this under that jitter, for both optimizers.
MAX_SENSITIVITY, JITTER, SEEDS = 1e-5, 1e-6, 10


def conditioned_seed(name, configs):
    for seed in range(SEEDS):
        worst = 0.0
        for cfg in configs:
            a, b = train(build(name, seed), cfg)[0], train(build(name, seed, JITTER), cfg)[0]
            worst = max([worst] + [abs(x - y) / abs(y) for x, y in zip(a, b)])
        print(f"  {name} seed {seed}: losses move {worst:.1e} under a {JITTER:g} jitter")
        if worst < MAX_SENSITIVITY:
            return seed
    raise SystemExit(f"make_exports: no seed of {name} in {SEEDS} gives a well-conditioned reference")


def example(name):
    """The export's example inputs and their names."""
    import torch
    if name in IMAGE_MODELS:
        return (torch.zeros((IMAGE_BATCH,) + IMAGE),), ["x"]
    if name.startswith("bert"):
        ids = torch.zeros(BATCH, SEQ, dtype=torch.int64)
        return (ids, torch.ones_like(ids), torch.zeros_like(ids)), list(TEXT_FIELDS)
    return (torch.zeros(BATCH, SEQ, dtype=torch.int64),), ["input_ids"]


def export(model, exporter, path, name):
    """Language models in eval mode (dropout is 0 anyway); CNNs in training mode, so that
    BatchNormalization keeps batch statistics (eval mode folds the running ones into the Conv), and
    the dropout models, so that their Dropout nodes are kept."""
    import torch
    image = name in IMAGE_MODELS or name in DROPOUT_MODELS
    model.train() if image else model.eval()
    x, inputs = example(name)
    names = (inputs, ["logits"])
    for f in (path, path + ".data"):
        if os.path.exists(f):
            os.remove(f)
    state = {k: v.clone() for k, v in model.state_dict().items()}  # a training-mode trace updates BN's running stats
    opset = {"opset_version": OPSETS[name][exporter]} if name in OPSETS else {}
    if exporter == "dynamo":
        torch.onnx.export(model, x, path, dynamo=True, input_names=names[0], output_names=names[1], **opset)
    else:
        mode = torch.onnx.TrainingMode.TRAINING if image else torch.onnx.TrainingMode.EVAL
        torch.onnx.export(model, x, path, dynamo=False, training=mode, input_names=names[0], output_names=names[1],
                          **opset)
    model.load_state_dict(state)
    model.train()


def describe(path):
    import onnx
    m = onnx.load(path, load_external_data=False)
    opset = next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
    ops = sorted({n.op_type for n in m.graph.node})
    ext = os.path.exists(path + ".data")
    size = os.path.getsize(path) + (os.path.getsize(path + ".data") if ext else 0)
    print(f"  {os.path.relpath(path, ROOT)}: opset {opset}, {len(m.graph.node)} nodes, "
          f"{len(m.graph.initializer)} initializers, {size / 1024:.0f} KiB{' (external data)' if ext else ''}")
    print(f"    ops: {' '.join(ops)}")


# --------------------------------------------------------------------------
# Reference training: tools/make_reference.py's loop (flowrun's semantics, DESIGN.md section 5).
# --------------------------------------------------------------------------

OPTIMIZERS = {
    "sgd": {"type": "sgd", "lr": 0.1, "momentum": 0.9, "grad_clip": 1.0},
    "adamw": {"type": "adamw", "lr": 3.0e-3, "betas": [0.9, 0.999], "eps": 1.0e-8, "weight_decay": 0.01,
              "grad_clip": 1.0},
}


# The CNNs train at a fifth of those rates: at the language models' rates every seed of the tiny
# ResNet fails the conditioning check below (its ReLUs and max pools cross their kinks too often).
IMAGE_LR = {"sgd": 0.01, "adamw": 5.0e-4}


def golden_config(onnx_path, opt):
    if "/bert_" in onnx_path:
        arrays = {f: f"data/pairs_{f}.npy" for f in TEXT_FIELDS + ("labels",)}
        if "/bert_mlm_" in onnx_path:
            arrays.update(input_ids="data/mlm_input_ids.npy", labels="data/mlm_labels.npy")
        return {
            "model": {"onnx": onnx_path, "inputs": {f: f for f in TEXT_FIELDS},
                      "loss": {"type": "cross_entropy", "logits": "logits", "labels": "labels"},
                      **({"dropout": False} if "/bert_dropout_" in onnx_path else {})},
            "data": {"format": "npy", "arrays": arrays, "order": "sequential"},
            "train": {"steps": STEPS, "global_batch": 2 * BATCH, "micro_batch": BATCH, "seed": 0},
            "optimizer": dict(OPTIMIZERS[opt]),
            "schedule": {"type": "cosine", "warmup": 5, "min_lr": OPTIMIZERS[opt]["lr"] / 10},
            "log": {"every": 1},
        }
    if any(f"/{m}_" in onnx_path for m in IMAGE_MODELS):
        optimizer = dict(OPTIMIZERS[opt], lr=IMAGE_LR[opt])
        return {
            "model": {"onnx": onnx_path, "inputs": {"x": "x"},
                      "loss": {"type": "cross_entropy", "logits": "logits", "labels": "y"}},
            "data": {"format": "npy", "x": "data/images_x.npy", "y": "data/images_y.npy", "order": "sequential"},
            "train": {"steps": STEPS, "global_batch": 2 * IMAGE_BATCH, "micro_batch": IMAGE_BATCH, "seed": 0},
            "optimizer": optimizer,
            "schedule": {"type": "cosine", "warmup": 5, "min_lr": optimizer["lr"] / 10},
            "log": {"every": 1},
        }
    return {
        "model": {"onnx": onnx_path, "inputs": {"input_ids": "tokens"},
                  "loss": {"type": "cross_entropy", "logits": "logits", "labels": "targets"}},
        "data": {"format": "tokens", "train": "data/devils_dictionary.u16", "seq_len": SEQ, "order": "sequential"},
        "train": {"steps": STEPS, "global_batch": 2 * BATCH, "micro_batch": BATCH, "seed": 0},
        "optimizer": dict(OPTIMIZERS[opt]),
        "schedule": {"type": "cosine", "warmup": 5, "min_lr": OPTIMIZERS[opt]["lr"] / 10},
        "log": {"every": 1},
    }


def write_yaml(path, cfg, header):
    import yaml
    with open(path, "w") as f:
        f.write(header)
        for key in ("model", "data", "train", "optimizer", "schedule", "log"):
            f.write(yaml.safe_dump({key: cfg[key]}, default_flow_style=None, sort_keys=False, width=120))


def train(model, cfg):
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import make_gpt
    import make_reference as ref
    if "arrays" in cfg["data"]:  # several inputs: make_reference.py's train_step, unrolled for them
        import numpy as np
        arrays = {f: torch.from_numpy(np.load(p)) for f, p in cfg["data"]["arrays"].items()}
        return train_fields(model, cfg, arrays, ref)
    if cfg["data"]["format"] == "npy":
        x, y = ref.load_data(cfg)
        criterion = ref.make_criterion(cfg)
    else:
        x, y = make_gpt.load_data(cfg)
        criterion = make_gpt.criterion
    model.train()
    opt = ref.make_optimizer(cfg, model.parameters())
    losses, gnorms, lrs = [], [], []
    for s in range(STEPS):
        lr = ref.lr_at(cfg, s)
        loss, gnorm = ref.train_step(model, opt, criterion, x, y, s, cfg, lr)
        losses.append(loss)
        gnorms.append(gnorm)
        lrs.append(lr)
    return losses, gnorms, lrs, running_stats(model)


def start_running_stats_as_exported(model, path):
    """The TorchScript exporter traces a training-mode model once on the example input, and the
    file keeps the running statistics that forward left (var 0.9 after a constant input): the
    reference starts from them too, so that the saved statistics can be compared."""
    import onnx
    import torch
    from onnx import numpy_helper
    inits = {t.name: t for t in onnx.load(path, load_external_data=False).graph.initializer}
    with torch.no_grad():
        for k, v in model.state_dict().items():
            if (k.endswith("running_mean") or k.endswith("running_var")) and k in inits:
                v.copy_(torch.from_numpy(numpy_helper.to_array(inits[k]).copy()))


def running_stats(model):
    """BatchNorm's running statistics after training, by state_dict name (the TorchScript
    export's initializer names)."""
    return {k: v.flatten().tolist() for k, v in model.state_dict().items()
            if k.endswith("running_mean") or k.endswith("running_var")}


def train_fields(model, cfg, arrays, ref):
    """make_reference.train_step's loop for a model of several inputs (TEXT_FIELDS)."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    model.train()
    opt = ref.make_optimizer(cfg, model.parameters())
    g, mb, m = ref.batch_sizes(cfg)
    n = arrays["labels"].shape[0]
    losses, gnorms, lrs = [], [], []
    for s in range(STEPS):
        lr = ref.lr_at(cfg, s)
        rows = ref.batch_rows(s, g, n)
        batch = {f: a[rows] for f, a in arrays.items()}
        opt.zero_grad(set_to_none=False)
        step_losses = []
        for i in range(m):
            part = {f: a[i * mb:(i + 1) * mb] for f, a in batch.items()}
            logits = model(*(part[f] for f in TEXT_FIELDS))
            # A masked LM's [B, S, V] against [B, S]: the mean over the labels that are not -100.
            loss = F.cross_entropy(logits.flatten(0, -2), part["labels"].flatten(), ignore_index=-100)
            (loss / m).backward()
            step_losses.append(loss.item())
        params = list(model.parameters())
        gnorm = torch.nn.utils.clip_grad_norm_(params, float(cfg["optimizer"]["grad_clip"]))
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        losses.append(float(np.mean(np.asarray(step_losses, dtype=np.float64))))
        gnorms.append(float(gnorm))
        lrs.append(lr)
    return losses, gnorms, lrs, running_stats(model)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--venv", default=os.path.expanduser("~/.cache/flowrun/exports-venv"))
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    ensure_venv(args.venv)
    import torch
    import transformers
    import onnx
    os.chdir(ROOT)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, onnx {onnx.__version__}")
    os.makedirs("models/exports", exist_ok=True)
    make_images()
    make_text_pairs()
    make_masked_lm()
    os.makedirs("tests/golden/exports", exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    for name in MODELS:
        if only and name not in only:
            continue
        plain = DROPOUT_MODELS.get(name, name)  # what the reference trains
        seed = conditioned_seed(plain, [golden_config(f"models/exports/{plain}_dynamo.onnx", opt) for opt in OPTIMIZERS])
        for exporter in ("dynamo", "torchscript"):
            path = f"models/exports/{name}_{exporter}.onnx"
            try:
                export(build(name, seed), exporter, path, name)
            except Exception as e:  # an exporter that fails is a finding, not a stop
                print(f"  {path}: export failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                continue
            describe(path)
            for opt in OPTIMIZERS:
                stem = f"tests/golden/exports/{name}_{exporter}_{opt}"
                cfg = golden_config(path, opt)
                write_yaml(stem + ".yaml", cfg, f"# Golden run of a {exporter} export of a tiny {name}: flowrun's 20 losses\n"
                                                f"# must equal PyTorch's in {os.path.basename(stem)}.json (tools/make_exports.py).\n")
                model = build(plain, seed)
                if exporter == "torchscript":
                    start_running_stats_as_exported(model, path)
                losses, gnorms, lrs, running = train(model, cfg)
                if exporter != "torchscript":
                    running = {}  # the dynamo exporter folds BatchNorm away: nothing to compare
                ref = {"config": stem + ".yaml", "torch": torch.__version__, "seed": seed, "losses": losses,
                       "gnorms": gnorms, "lrs": lrs}
                if running:  # BatchNorm's running statistics after the last step, for the saved model
                    ref["running"] = running
                with open(stem + ".json", "w") as f:
                    json.dump(ref, f, indent=1)
                    f.write("\n")
                print(f"    {opt}: loss {losses[0]:.6f} -> {losses[-1]:.6f}")


if __name__ == "__main__":
    main()
