#!/usr/bin/python3
"""Turn a text file into a flowrun `tokens` file (DESIGN.md section 5).

    /usr/bin/python3 tools/text_to_tokens.py data/devils_dictionary.txt [OUT.u16] [--seq-len T]

The vocabulary is byte-level: each byte of the file is one token whose id is
the byte value (vocab 256). The output is raw little-endian uint16, one token
per byte of input, no header; it defaults to the input path with its suffix
replaced by `.u16`. It prints the token count and, for --seq-len T, the number
of full windows W = (n_tokens - 1) // T that the sequential order cycles over.
"""

import argparse
import os
import sys

import numpy as np


def text_to_tokens(text_path, out_path):
    with open(text_path, "rb") as f:
        raw = f.read()
    tok = np.frombuffer(raw, dtype=np.uint8).astype("<u2")
    tok.tofile(out_path)
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("text", help="input text file (any bytes; UTF-8 is split into its bytes)")
    ap.add_argument("out", nargs="?", help="output .u16 file (default: TEXT with suffix .u16)")
    ap.add_argument("--seq-len", type=int, default=64, help="report the window count for this T")
    args = ap.parse_args()
    if args.seq_len < 1:
        ap.error("--seq-len must be positive")
    out = args.out or os.path.splitext(args.text)[0] + ".u16"
    tok = text_to_tokens(args.text, out)
    n = int(tok.size)
    print(f"{out}: {n} tokens (byte-level, vocab 256, {len(np.unique(tok))} distinct), "
          f"{max(0, n - 1) // args.seq_len} full windows of {args.seq_len}")


if __name__ == "__main__":
    sys.exit(main())
