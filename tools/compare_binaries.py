#!/usr/bin/env python3
"""Two flowrun binaries on the parity and golden configs: the same losses and norms, bit for bit.

A refactor of the runtime, the plan or the kernels must not change a single bit of what training
computes. This runs every multi-rank case of tests/parity/distributed_test.cpp and every golden
config with both binaries, 20 steps each, and compares the loss and grad norm of every step as
the step log prints them (JSONL, 9 significant digits: a float32 round-trips exactly).

  tools/compare_binaries.py OLD_FLOWRUN NEW_FLOWRUN [--only SUBSTRING] [--device sim]

--device runs NEW on that device (parallel.device) while OLD keeps its config's device: the
device path against the CPU's. Exit 0 when every case matches, 1 otherwise. Runs from the
repository root; Open MPI as root is allowed through the environment.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

MLP, LN, GPT = "configs/mlp.yaml", "configs/mlp_ln_gelu.yaml", "configs/gpt.yaml"
LLAMA = "tests/golden/exports/llama_dynamo_sgd.yaml"
BERT = "tests/golden/exports/bert_torchscript_sgd.yaml"
MLM = "tests/golden/exports/bert_mlm_dynamo_sgd.yaml"
DROPOUT = "tests/golden/exports/bert_dropout_torchscript_sgd.yaml"
RESNET = "tests/golden/exports/resnet_torchscript_sgd.yaml"
FAST = ["cluster.flops=1.0e+13", "cluster.latency={intra: 5.0e-6, inter: 5.0e-6}",
        "cluster.bandwidth={intra: 1.0e+11, inter: 1.0e+11}", "cluster.p2p_latency=5.0e-6", "cluster.op_overhead=0"]
DP_X = 'parallel.sbp={x: ["S(0)"]}'

# (name, config, ranks, --set values): the strategies of tests/parity/distributed_test.cpp.
CASES = [
    ("dp2", MLP, 2, [DP_X]),
    ("dp3", MLP, 3, [DP_X]),
    ("dp4", LN, 4, [DP_X]),
    ("dp2_sgd", LN, 2, [DP_X, "optimizer={type: sgd, lr: 0.05, momentum: 0.9, grad_clip: 1.0}", "schedule.warmup=2"]),
    ("tp2", MLP, 2, ['parallel.sbp={fc1.weight: ["S(0)"]}']),
    ("hybrid", MLP, 4, ["parallel.mesh=[2, 2]", 'parallel.sbp={x: ["S(0)", B], fc1.weight: [B, "S(0)"]}']),
    ("zero", MLP, 2, ["parallel.zero=true", DP_X]),
    ("zero4", MLP, 4, ["parallel.zero=true", DP_X]),
    ("zero_2d", MLP, 4, ["parallel.mesh=[2, 2]", 'parallel.sbp={x: ["S(0)", "S(0)"]}', "parallel.zero=true"]),
    ("pp2", LN, 2, ['parallel.stages=[["/fc1/*", "/ln/*"], ["*"]]', "train.micro_batch=4", "train.global_batch=16"]),
    ("pp_dp", MLP, 4, ['parallel.stages=[["/fc1/*", "/Relu"], ["*"]]', DP_X, "train.micro_batch=16"]),
    ("pp_zero", MLP, 4, ['parallel.stages=[["/fc1/*", "/Relu"], ["*"]]', DP_X, "parallel.zero=true", "train.micro_batch=16"]),
    ("gpt_dp2", GPT, 2, ['parallel.sbp={idx: ["S(0)"]}', "schedule.warmup=2"]),
    ("gpt_tp2", GPT, 2, ['parallel.sbp={"/blocks.*/attn/qkv/MatMul:1": ["S(1)"], "/blocks.*/mlp/fc/MatMul:1": ["S(1)"]}',
                         "schedule.warmup=2", "train.global_batch=2", "train.micro_batch=1"] + FAST),
    ("gpt_pp2", GPT, 2, ['parallel.stages=[["/wte/*", "/wpe/*", "/Add", "/blocks.0/*"], ["*"]]', "schedule.warmup=2",
                         "train.micro_batch=4"]),
    ("gpt_hybrid", GPT, 4, ["parallel.mesh=[2, 2]", 'parallel.sbp={idx: ["S(0)", B], "/blocks.*/attn/qkv/MatMul:1": [B, "S(1)"], '
                            '"/blocks.*/mlp/fc/MatMul:1": [B, "S(1)"]}', "schedule.warmup=2"]),
    ("llama_dp2", LLAMA, 2, ['parallel.sbp={input_ids: ["S(0)"]}']),
    ("bert_dp2", BERT, 2, ['parallel.sbp={input_ids: ["S(0)"]}']),
    ("mlm_dp2", MLM, 2, ['parallel.sbp={input_ids: ["S(0)"]}']),
    ("drop_dp2", DROPOUT, 2, ['parallel.sbp={input_ids: ["S(0)"]}', "model.dropout=true"]),
    ("drop_pp2", DROPOUT, 2, ['parallel.stages=[["/bert/bert/embeddings/*", "/bert/bert/encoder/layer.0/*"], ["*"]]',
                              "model.dropout=true"]),
    ("resnet_dp2", RESNET, 2, ['parallel.sbp={x: ["S(0)"]}']),
]
GOLDENS = sorted(os.path.join(d, f) for d in ("tests/golden", "tests/golden/exports") for f in os.listdir(d)
                 if f.endswith(".yaml"))
CASES += [(os.path.basename(g)[:-5], g, 1, []) for g in GOLDENS]


def train(binary, config, ranks, sets, out):
    cmd = (["mpirun", "--oversubscribe", "-n", str(ranks)] if ranks > 1 else []) + [binary, "train", config]
    for s in sets + ["train.steps=20", "log.every=1", "log.jsonl=" + out, "save.onnx=" + out[:-len(".jsonl")] + ".onnx"]:
        cmd += ["--set", s]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if r.returncode != 0:
        return None, " ".join(cmd) + "\n" + r.stdout[-2000:] + r.stderr[-2000:]
    with open(out) as f:
        return [(json.loads(l)["loss"], json.loads(l)["gnorm"]) for l in f], ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--only", default="")
    ap.add_argument("--device", default="")
    a = ap.parse_args()
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, config, ranks, sets in CASES:
            if a.only not in name:
                continue
            old, err_old = train(a.old, config, ranks, sets, os.path.join(tmp, name + "_old.jsonl"))
            new_sets = sets + (["parallel.device=" + a.device] if a.device else [])
            new, err_new = train(a.new, config, ranks, new_sets, os.path.join(tmp, name + "_new.jsonl"))
            if old is None or new is None:
                print(f"{name:12s} {ranks} rank(s)  FAILED TO RUN\n{err_old or err_new}")
                bad += 1
                continue
            diff = [i + 1 for i, (o, n) in enumerate(zip(old, new)) if o != n]
            same = len(old) == len(new) == 20 and not diff
            what = "identical" if same else f"DIFFER from step {diff[0] if diff else len(min(old, new, key=len)) + 1}"
            print(f"{name:12s} {ranks} rank(s)  {len(old)} steps  {what}  (final loss {old[-1][0]})", flush=True)
            bad += not same
    print(f"{'all identical' if not bad else str(bad) + ' case(s) differ or failed'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
