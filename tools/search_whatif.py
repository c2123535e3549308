#!/usr/bin/env python3
"""Scores flowrun search's current model against saved `search --validate` tables, without running them again.

    tools/search_whatif.py CONFIG VALIDATE_LOG[,VALIDATE_LOG...] [search args, e.g. --ranks 4 --set cluster.X=Y]

Each VALIDATE_LOG is the saved output of `flowrun search CONFIG --validate K ...`. The script runs
`flowrun search CONFIG --top 100 --out ""` with the extra arguments, takes its predicted step
times, and prints, per log, Spearman's rank correlation between those and the log's measured times,
how far the newly predicted best measured behind the measured best, and the spread of measured
over predicted step time across the log's candidates (standard deviation over mean: how evenly the
model prices them, whatever their order). It answers "would this
change of model or of `cluster:` figures have ranked those measurements better?" in seconds.
Needs only the standard library and ./build/src/flowrun.
"""
import re
import statistics
import subprocess
import sys

ROW = r"\d+\s+(dp\d+ tp\d+ pp\d+ m\d+(?: zero)?)\s+~?\s*([\d.]+)"


def measured(path):
    """The validation table's measured step times (the rows after "validate:", not the ranking's)."""
    out, table = {}, False
    for line in open(path):
        table = table or line.startswith("validate:")
        m = re.match(ROW + r"\s+([\d.]+)", line) if table else None
        if m:
            out[m.group(1)] = float(m.group(3))
    return out


def predicted(config, extra):
    run = subprocess.run(["./build/src/flowrun", "search", config, "--top", "100", "--out", ""] + extra,
                         capture_output=True, text=True, check=True)
    return {m.group(1): float(m.group(2)) for m in (re.match(ROW, line) for line in run.stdout.splitlines()) if m}


def ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0] * len(xs)
    for k, i in enumerate(order):
        r[i] = k
    return r


def spearman(a, b):
    ra, rb, n = ranks(a), ranks(b), len(a)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    config, logs, extra = sys.argv[1], sys.argv[2].split(","), sys.argv[3:]
    p = predicted(config, extra)
    for log in logs:
        m = measured(log)
        keys = [k for k in m if k in p]
        if len(keys) < 2:
            print(f"{log}: fewer than 2 layouts both measured and predicted")
            continue
        best = min(keys, key=lambda k: p[k])
        mbest = min(keys, key=lambda k: m[k])
        ratios = [m[k] / p[k] for k in keys]
        spread = statistics.pstdev(ratios) / statistics.mean(ratios)
        print(f"{log}: Spearman {spearman([p[k] for k in keys], [m[k] for k in keys]):.2f} over {len(keys)}; "
              f"predicted best {best} measured {m[best] / m[mbest] - 1:+.0%} behind the measured best {mbest}; "
              f"spread of measured/predicted {spread:.2f}")


if __name__ == "__main__":
    main()
