#!/usr/bin/env python3
"""Checks that every #include in src/ points down the layers of docs/architecture.md.

    python3 tools/check_layers.py [ROOT]
    python3 tools/check_layers.py --self-test   # the check finds an upward include it is shown

Each source file belongs to the first layer whose pattern matches its path; a file may include
files of its own layer or of layers below, never above. Prints each include that runs against
the rule and exits 1 if there is one. Run by `meson test` (the `layers` test) and so by CI.
"""

import fnmatch
import os
import re
import sys

# Bottom to top: one folder of src/ each (docs/architecture.md).
LAYERS = [
    ("base", ["base/*"]),
    ("vocabulary", ["graph/*", "sbp/*"]),
    ("ops", ["ops/*"]),
    ("boxing", ["boxing/*"]),
    ("frontend", ["ir/*"]),
    ("assign", ["assign/*"]),
    ("plan", ["plan/*"]),
    ("runtime", ["actor/*"]),
    ("config", ["config/*"]),
    ("data", ["data/*"]),
    ("driver", ["driver/*"]),
    ("search", ["search/*"]),
    ("cli", ["cli/*"]),
]

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path):
    for rank, (name, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatch(path, p) for p in patterns):
            return rank, name
    return None


def self_test():
    """A tree with one include down and one up: the check must pass the first and fail the second."""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        for path, text in {"base/a.h": "", "cli/main.cpp": '#include "base/a.h"\n'}.items():
            os.makedirs(os.path.join(root, "src", os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, "src", path), "w") as f:
                f.write(text)
        run = lambda: subprocess.run([sys.executable, __file__, root], capture_output=True, text=True)
        down = run()
        with open(os.path.join(root, "src", "base/a.h"), "w") as f:
            f.write('#include "cli/main.cpp"\n')
        up = run()
    ok = down.returncode == 0 and up.returncode == 1 and "base/a.h (base) includes cli/main.cpp (cli)" in up.stdout
    print("check_layers self-test:", "passed" if ok else f"FAILED\n{down.stdout}\n{up.stdout}")
    return 0 if ok else 1


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    src = os.path.join(root, "src")
    bad, files = [], 0
    for dirpath, _, names in os.walk(src):
        for name in sorted(names):
            if not name.endswith((".h", ".cpp", ".cu", ".cuh")):
                continue
            path = os.path.relpath(os.path.join(dirpath, name), src)
            mine = layer_of(path)
            if mine is None:
                bad.append(f"src/{path}: in no layer (add it to tools/check_layers.py and docs/architecture.md)")
                continue
            files += 1
            with open(os.path.join(src, path), encoding="utf-8") as f:
                text = f.read()
            for inc in INCLUDE.findall(text):
                if not os.path.exists(os.path.join(src, inc)):
                    continue  # a generated header (plan.pb.h) or a library's
                theirs = layer_of(inc)
                if theirs is not None and theirs[0] > mine[0]:
                    bad.append(f"src/{path} ({mine[1]}) includes {inc} ({theirs[1]}), a layer above it")
    for line in bad:
        print(line)
    print(f"check_layers: {files} files, {len(bad)} includes against the layers")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
