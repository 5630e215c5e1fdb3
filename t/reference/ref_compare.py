#!/usr/bin/python3
"""ref_compare.py — committed PyTorch reference data against a fresh run of its generator.

The files in t/reference/data were written by one PyTorch (see `make reference`); the C tests
compare dptrain against them bit for bit or within their own tolerances. t/t0610-torch-ref.t
runs the generators with the PyTorch installed here into a temporary directory and this script
compares the two, so a change of PyTorch's numbers or semantics between versions (an op, an
optimizer, a scheduler, the sampler) shows up as a failure here instead of going unnoticed.

usage: ref_compare.py NEW_DIR COMMITTED_DIR FILE...
Every FILE (a name in both directories) is compared by its kind:
  ops.bin        the same records in the same order; inputs (drawn from a seeded generator)
                 bit for bit, outputs within float32 tolerance
  *.json         the same structure; float32 hex strings and numbers within float32
                 tolerance, everything else equal
  *.txt          equal, lines starting with '#' (which name the generating torch) aside
Tolerance: |new - old| <= RTOL * |old| + ATOL * rms(the committed array), RTOL = 1e-6 (8 to 16
float32 units in the last place: the generators compute in float64 and round, or do float32
ops one by one, so another torch may differ by a few roundings), ATOL = 1e-7 (for values
near zero after cancellation).
Prints one line per file and the largest differences; exits 1 on any difference beyond it.
"""
import json
import os
import sys

import numpy as np

RTOL = 1e-6
ATOL = 1e-7

# ops.bin records that are inputs (drawn from the seeded generator or configuration): they
# must be bit-identical, or every output after them differs for that reason alone.
OPS_INPUTS = {"cfg", "x", "w", "b", "dy", "gamma", "beta", "rm0", "rv0", "logits", "labels"}


class Diff:
    def __init__(self):
        self.errors = []
        self.worst = (0.0, "")  # (difference in units of the tolerance, where)

    def close(self, new, old, where):
        new = np.asarray(new, dtype=np.float64).reshape(-1)
        old = np.asarray(old, dtype=np.float64).reshape(-1)
        if new.shape != old.shape:
            self.errors.append("%s: %d values, committed %d" % (where, new.size, old.size))
            return
        if new.size == 0:
            return
        if not np.array_equal(np.isnan(new), np.isnan(old)):
            self.errors.append("%s: NaN in one but not the other" % where)
            return
        ok = ~np.isnan(old)
        tol = RTOL * np.abs(old[ok]) + ATOL * np.sqrt(np.mean(np.square(old[ok])))
        d = np.abs(new[ok] - old[ok])
        with np.errstate(divide="ignore", invalid="ignore"):
            units = np.where(tol > 0, d / tol, np.where(d > 0, np.inf, 0.0))
        i = int(np.argmax(units))
        if units[i] > self.worst[0]:
            self.worst = (float(units[i]), "%s[%d]: %.9g vs committed %.9g" % (
                where, i, new[ok][i], old[ok][i]))
        if units[i] > 1:
            self.errors.append("%s: %d of %d values beyond tolerance, e.g. [%d] %.9g vs "
                               "committed %.9g" % (where, int((units > 1).sum()), d.size, i,
                                                   new[ok][i], old[ok][i]))

    def exact(self, new, old, where):
        if not np.array_equal(np.asarray(new).view(np.uint32), np.asarray(old).view(np.uint32)):
            self.errors.append("%s: differs (an input: must be bit-identical)" % where)


def read_ops(path):
    recs = []
    with open(path, "rb") as f:
        if f.readline() != b"DPTRAIN-OPS 1\n":
            raise ValueError("%s: not a DPTRAIN-OPS 1 file" % path)
        while True:
            line = f.readline()
            if line in (b"END\n", b""):
                break
            name, count = line.decode().split()
            recs.append((name, np.frombuffer(f.read(4 * int(count)), dtype="<f4")))
    return recs


def compare_ops(new, old, diff):
    a, b = read_ops(new), read_ops(old)
    if [n for n, _ in a] != [n for n, _ in b]:
        diff.errors.append("ops.bin: the records differ: %s" % sorted(
            set(n for n, _ in a) ^ set(n for n, _ in b)))
        return
    for (name, x), (_, y) in zip(a, b):
        if name.split(".", 1)[1] in OPS_INPUTS:
            diff.exact(x, y, "ops.bin " + name)
        else:
            diff.close(x, y, "ops.bin " + name)


def is_hex32(s):
    words = s.split()
    return bool(words) and all(len(w) == 8 for w in words) and all(
        c in "0123456789abcdef" for c in s.replace(" ", ""))


def hex32(s):
    return np.array([int(w, 16) for w in s.split()], dtype=np.uint32).view(np.float32)


def compare_json(x, y, where, diff):
    if isinstance(y, dict):
        if not isinstance(x, dict) or sorted(x) != sorted(y):
            diff.errors.append("%s: keys %s, committed %s" % (
                where, sorted(x) if isinstance(x, dict) else type(x).__name__, sorted(y)))
            return
        for k in y:
            compare_json(x[k], y[k], "%s.%s" % (where, k), diff)
    elif isinstance(y, list):
        if not isinstance(x, list) or len(x) != len(y):
            diff.errors.append("%s: a list of %s, committed %d" % (
                where, len(x) if isinstance(x, list) else type(x).__name__, len(y)))
        elif y and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in y):
            diff.close(x, y, where)
        else:
            for i, (u, v) in enumerate(zip(x, y)):
                compare_json(u, v, "%s[%d]" % (where, i), diff)
    elif isinstance(y, str) and is_hex32(y):
        if not isinstance(x, str) or not is_hex32(x):
            diff.errors.append("%s: not a float32 array" % where)
        else:
            diff.close(hex32(x), hex32(y), where)
    elif isinstance(y, float) and not isinstance(x, bool) and isinstance(x, (int, float)):
        diff.close([x], [y], where)
    elif x != y:
        diff.errors.append("%s: %r, committed %r" % (where, x, y))


def compare_text(new, old, diff, name):
    def lines(p):
        with open(p) as f:
            return [l for l in f if not l.startswith("#")]
    a, b = lines(new), lines(old)
    if a != b:
        i = next((i for i, (u, v) in enumerate(zip(a, b)) if u != v), min(len(a), len(b)))
        diff.errors.append("%s: line %d differs (%d lines, committed %d): %r vs committed %r" % (
            name, i + 1, len(a), len(b), a[i][:80] if i < len(a) else "",
            b[i][:80] if i < len(b) else ""))


def main():
    if len(sys.argv) < 4:
        sys.exit("usage: ref_compare.py NEW_DIR COMMITTED_DIR FILE...")
    new_dir, old_dir, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    failed = 0
    for name in files:
        new, old = os.path.join(new_dir, name), os.path.join(old_dir, name)
        diff = Diff()
        if not os.path.exists(new):
            diff.errors.append("%s: the generator did not write it" % name)
        elif name.endswith(".bin"):
            compare_ops(new, old, diff)
        elif name.endswith(".json"):
            with open(new) as f, open(old) as g:
                compare_json(json.load(f), json.load(g), name, diff)
        else:
            compare_text(new, old, diff, name)
        same = not diff.errors and open(new, "rb").read() == open(old, "rb").read()
        if diff.errors:
            failed += 1
            print("ref_compare: %s: DIFFERS from the committed file" % name)
            for e in diff.errors[:20]:
                print("ref_compare:   " + e)
            if len(diff.errors) > 20:
                print("ref_compare:   ... %d more" % (len(diff.errors) - 20))
        elif same:
            print("ref_compare: %s: identical" % name)
        elif not name.endswith((".bin", ".json")):
            print("ref_compare: %s: identical but for its '#' lines" % name)
        else:
            print("ref_compare: %s: within tolerance (largest %.2f of it: %s)" % (
                name, diff.worst[0], diff.worst[1] or "-"))
    if failed:
        print("ref_compare: %d of %d files differ beyond float32 tolerance" % (failed, len(files)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
