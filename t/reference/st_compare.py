#!/usr/bin/python3
"""Compare two safetensors files tensor by tensor (an independent reader: the format is
parsed here with json + numpy, not with dptrain's code).

    st_compare.py A.safetensors B.safetensors [--rtol 1e-5] [--names-only]

For every tensor: ||a - b|| / max(||b||, floor), where floor is the tensor's even share of
the whole file's norm (so a tensor near zero is judged on the scale of the model, like
allclose's atol). Prints the worst tensors; exits 1 if the names, shapes or dtypes differ or
any error is above --rtol, 2 on a file that cannot be read.
"""
import argparse
import json
import math
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64,
          "I32": np.int32, "U8": np.uint8}


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    out = {}
    for name, t in header.items():
        lo, hi = t["data_offsets"]
        dt = DTYPES[t["dtype"]]
        a = np.frombuffer(raw[base + lo:base + hi], dtype=dt).reshape(t["shape"])
        out[name] = (t["dtype"], a.astype(np.float64))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--names-only", action="store_true")
    args = ap.parse_args()
    try:
        a, b = load(args.a), load(args.b)
    except (OSError, ValueError, KeyError) as e:
        print(f"st_compare: {e}", file=sys.stderr)
        return 2
    if sorted(a) != sorted(b):
        print(f"st_compare: tensor names differ: only in A {sorted(set(a) - set(b))}, "
              f"only in B {sorted(set(b) - set(a))}", file=sys.stderr)
        return 1
    bad = 0
    for k in a:
        if a[k][0] != b[k][0] or a[k][1].shape != b[k][1].shape:
            print(f"st_compare: {k}: {a[k][0]}{list(a[k][1].shape)} vs "
                  f"{b[k][0]}{list(b[k][1].shape)}", file=sys.stderr)
            bad += 1
    if bad or args.names_only:
        return 1 if bad else 0
    total = math.sqrt(sum(float(np.sum(v[1] ** 2)) for v in b.values()))
    nel = sum(v[1].size for v in b.values())
    rows = []
    for k in a:
        x, y = a[k][1], b[k][1]
        floor = total * math.sqrt(y.size / nel) if nel else 0.0
        err = float(np.linalg.norm(x - y)) / max(float(np.linalg.norm(y)), floor, 1e-30)
        rows.append((err, k))
    rows.sort(reverse=True)
    for err, k in rows[:5]:
        print(f"{k}: relative error {err:.3g}")
    worst = rows[0][0] if rows else 0.0
    print(f"worst relative error {worst:.3g} over {len(rows)} tensors (rtol {args.rtol:g})")
    return 1 if worst > args.rtol else 0


if __name__ == "__main__":
    sys.exit(main())
