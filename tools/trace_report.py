#!/usr/bin/python3
"""Summarises flowrun Chrome traces (train --trace) and optionally draws a timeline.

    tools/trace_report.py TRACE.rank0.json [TRACE.rank1.json ...] [--steps A:B] [--png OUT.png]

For each rank it reports, over the chosen steps (default: all but the first, which warms up),
the busy fraction of each stream and the idle fraction of the compute stream: in a pipeline that
idle share is the bubble, to compare with (p-1)/(m+p-1) for p stages and m micro-batches. On a
device the "compute (device)" track is the kernels' time on it: its busy fraction is how much of
the step the GPU computes (the host never keeping it waiting: near 100%). That track times each
act from an event before its first kernel to one after its last, so it is an upper bound; on CUDA
the trace also has the GPU's own record of every kernel and copy (CUPTI, the "gpu stream N"
tracks), and the report gives the share of the device acts' span in which a kernel ran, the
kernels' time per step and the largest gaps between them.
Needs only the standard library; --png needs matplotlib (python3-matplotlib).
"""
import argparse
import json
from collections import defaultdict


def load(path):
    d = json.load(open(path))
    names, events, rank = {}, [], 0
    for e in d["traceEvents"]:
        if e.get("ph") == "M" and e["name"] == "thread_name":
            names[e["tid"]] = e["args"]["name"]
        elif e.get("ph") == "X":
            rank = e["pid"]
            events.append(e)
    return rank, names, events


def busy(intervals):
    """Total length of a union of [begin, end) intervals."""
    total, end = 0.0, None
    for b, e in sorted(intervals):
        if end is None or b > end:
            total += e - b
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def gpu_report(rank, names, ev, spans, a, b):
    """The GPU's own record (CUPTI) over the span of the device acts of steps a..b-1."""
    acts = [e for e in ev if names.get(e["tid"], "").endswith("(device)") and a <= e["args"]["step"] < b]
    if not acts:
        print(f"rank {rank}: GPU: no device acts in steps {a}..{b - 1}")
        return
    d0 = min(e["ts"] for e in acts)
    d1 = max(e["ts"] + e["dur"] for e in acts)
    span = d1 - d0

    def clipped(cat):
        return [(max(e["ts"], d0), min(e["ts"] + e["dur"], d1)) for e in spans
                if e["cat"] == cat and e["ts"] < d1 and e["ts"] + e["dur"] > d0]

    kernels, copies = clipped("gpu kernel"), clipped("gpu copy")
    k_busy = busy(kernels)
    print(f"rank {rank}: GPU (CUPTI) over the device acts of steps {a}..{b - 1} ({span / 1e3:.2f} ms): "
          f"kernels busy {k_busy / span:.1%}, copies {busy(copies) / span:.1%}; "
          f"{len(kernels) / (b - a):.0f} kernels and {k_busy / 1e3 / (b - a):.3f} ms of kernel time per step")
    # Where the GPU waits: the largest gaps between kernels, with the act that began before each.
    gaps, end, before = [], d0, None
    for e in sorted((e for e in spans if e["cat"] == "gpu kernel" and d0 <= e["ts"] < d1), key=lambda e: e["ts"]):
        if e["ts"] > end:
            gaps.append((e["ts"] - end, before["args"].get("act", "") if before else "", e["args"].get("act", "")))
        if e["ts"] + e["dur"] > end:
            end, before = e["ts"] + e["dur"], e
    gaps.sort(reverse=True)
    for g, after, next_act in gaps[:3]:
        print(f"  gap {g:.1f} us: after {after or '(start)'}, before {next_act}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--steps", help="A:B, steps counted from 0 (default 1:end)")
    ap.add_argument("--png")
    args = ap.parse_args()
    ranks = [load(p) for p in args.traces]
    last = max(e["args"]["step"] for _, _, ev in ranks for e in ev)
    a, b = (1, last + 1) if not args.steps else map(int, args.steps.split(":"))
    gpu = {r: [e for e in ev if e["cat"] in ("gpu kernel", "gpu copy")] for r, _, ev in ranks}
    ranks = [(r, names, [e for e in ev if e["cat"] not in ("gpu kernel", "gpu copy")]) for r, names, ev in ranks]
    window = [e for _, _, ev in ranks for e in ev if a <= e["args"]["step"] < b]
    t0 = min(e["ts"] for e in window)
    t1 = max(e["ts"] + e["dur"] for e in window)
    wall = t1 - t0
    print(f"steps {a}..{b - 1}: {wall / 1e3:.2f} ms, {wall / 1e3 / (b - a):.3f} ms/step")
    for rank, names, ev in ranks:
        by_stream = defaultdict(list)
        for e in ev:
            if a <= e["args"]["step"] < b:
                by_stream[names.get(e["tid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
        parts = ", ".join(f"{s} {busy(iv) / wall:.0%}" for s, iv in sorted(by_stream.items()))
        idle = 1 - busy(by_stream.get("compute", [])) / wall
        print(f"rank {rank}: busy {parts}; compute idle {idle:.1%}")
        if gpu[rank]:
            gpu_report(rank, names, ev, gpu[rank], a, b)
    if args.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        colors = {"compute": "#4C72B0", "variable": "#8172B2", "data": "#55A868", "boxing": "#C44E52",
                  "loss-sink": "#999999", "norm-sink": "#999999", "gpu kernel": "#DD8452", "gpu copy": "#937860"}
        # A posted receive spans the wait for its sender: it gets its own row, so the comm row
        # shows the time collectives and sends are really in flight.
        def row_of(e):
            return (e["pid"], e["tid"], "/recv@" in e["name"])
        rows = []
        for rank, names, ev in ranks:
            for tid, name in sorted(names.items()):
                rows.append(((rank, tid, False), f"rank {rank} {name}"))
                if any(row_of(e) == (rank, tid, True) for e in ev):
                    rows.append(((rank, tid, True), f"rank {rank} recv posted"))
        index = {key: y for y, (key, _) in enumerate(rows)}
        fig, ax = plt.subplots(figsize=(12, 0.5 + 0.45 * len(rows)))
        for rank, _, ev in ranks:
            # The GPU's record by time (its steps are the acts' it began in): what ran in the window.
            for e in ev + [e for e in gpu[rank] if e["ts"] < t1 and e["ts"] + e["dur"] > t0]:
                if e["cat"] in ("gpu kernel", "gpu copy") or a <= e["args"]["step"] < b:
                    y = index[row_of(e)]
                    ax.broken_barh([((e["ts"] - t0) / 1e3, max(e["dur"], 0.5) / 1e3)], (y - 0.4, 0.8),
                                   color=colors.get(e["cat"], "#333333"), alpha=0.85)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([r[1] for r in rows])
        ax.invert_yaxis()
        ax.set_xlabel("ms")
        ax.set_title("flowrun trace: " + ", ".join(f"{k} {v}" for k, v in colors.items() if k not in ("norm-sink",)))
        fig.tight_layout()
        fig.savefig(args.png, dpi=110)
        print("wrote", args.png)


if __name__ == "__main__":
    main()
