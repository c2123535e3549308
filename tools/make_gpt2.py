#!/usr/bin/python3
"""Make a GPT-2-small-sized export for planning flowrun at scale.

Run from the repository root with Debian's system interpreter:

    /usr/bin/python3 tools/make_gpt2.py [OUT] [--block T] [--vocab V]

It writes, deterministically (fixed seed), models/gpt2_124m.onnx (or OUT):
tools/make_gpt.py's nanoGPT-style decoder (token + learned position
embeddings, pre-LayerNorm blocks, causal self-attention with masked_fill +
softmax, erf-GELU MLP, final LayerNorm, untied bias-free head) at GPT-2 small
sizes: 12 layers, 12 heads, C=768, vocab 50257, block size T=1024. It is
exported exactly as gpt_mini is (make_gpt.export_module: opset 17, input
`idx` [batch, 1024] int64, output `logits` [batch, 1024, 50257], dynamic batch
only, the exporter's default constant folding). --block T binds T instead
(bench/checkpoint.sh uses 64, so that a training step on a CPU is short; the
position table shrinks to T x 768, the rest is the same). --vocab V sizes the
embedding and head for V tokens instead (tools/gpu_check.sh uses 50304, the
padded vocabulary bench/gpu_baseline.py's PyTorch model has, so the two
compare like for like).

GPT-2 small's 124M parameters count a head tied to wte; this head is untied
(as in gpt_mini), which adds 50257 x 768 = 38.6M: the script prints the exact
count. The file (about 650 MB) is not committed (.gitignore); configs/
scale/gpt2_124m.yaml plans it. No training goldens are made for it.
"""

import os
import sys
import time

import onnx
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_gpt  # noqa: E402

OUT = "models/gpt2_124m.onnx"
N_LAYER, N_HEAD, N_EMBD, VOCAB, BLOCK = 12, 12, 768, 50257, 1024
PROTO_LIMIT = 2 ** 31  # protobuf's 2 GB limit on one ModelProto


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(root)
    args = sys.argv[1:]
    block, vocab = BLOCK, VOCAB
    if "--block" in args:
        i = args.index("--block")
        block = int(args[i + 1])
        del args[i:i + 2]
    if "--vocab" in args:
        i = args.index("--vocab")
        vocab = int(args[i + 1])
        del args[i:i + 2]
    out = args[0] if args else OUT
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    print(f"torch {torch.__version__}, onnx {onnx.__version__}")

    model = make_gpt.init_model(N_EMBD, N_HEAD, N_LAYER, block, vocab)
    n = sum(p.numel() for p in model.parameters())
    head = model.head.weight.numel()
    print(f"GPT-2 small sizes: n_layer {N_LAYER}, n_head {N_HEAD}, n_embd {N_EMBD}, vocab {vocab}, "
          f"block {block}")
    print(f"parameters: {n} ({n / 1e6:.2f}M; {n - head} = {(n - head) / 1e6:.2f}M with the head "
          f"tied to wte as in GPT-2), {4 * n} bytes in f32")
    assert 4 * n < PROTO_LIMIT - (64 << 20), "weights near 2 GB: export with external data instead"

    t0 = time.time()
    make_gpt.export_module(model, block, out)
    print(f"exported {out} in {time.time() - t0:.1f} s")
    make_gpt.describe_onnx(out)

    # Every parameter is its own initializer (none merged by the exporter),
    # as tools/make_gpt.py checks for gpt_mini.
    _, used = make_gpt.load_onnx_params(make_gpt.init_model(N_EMBD, N_HEAD, N_LAYER, block, vocab), out)
    assert len(used) == len(list(model.parameters()))
    print(f"  {len(used)} parameters ({n} values) matched, each one initializer")


if __name__ == "__main__":
    sys.exit(main())
