#!/usr/bin/python3
"""perf-compare.py — compare two runs of a benchmark by their JSON lines (doc/perf/*.jsonl), or
check that recorded lines can be compared at all.

    contrib/bench/perf-compare.py [--threshold F] [--ignore FIELD,...] [-v] OLD.jsonl NEW.jsonl
    contrib/bench/perf-compare.py --check FILE.jsonl...

A line's fields are of three kinds. Measurements: numbers named like one (img_s, ms, ms_*, *_ms,
*_gbs, *_kb, *_cpu_s, speedup*, *ratio, busbw_vs_memcpy, cpu_busy, neighbour_cpu) and lists or
objects of them (img_s_rounds, ms_per_step); when the run was (date, commit*, round, run, load_avg, command, what);
everything else names the configuration (tool, impl, model, dtype, size_mb, ranks, threads,
batch, cpu, isa, ...). Lines of one configuration in a file (the rounds of a run) count as one,
each measurement their median. Each configuration found in both files is printed with its main
measurement (the first of img_s, ms, ms_median, step_ms, table_ms, busbw_gbs, img_s_after it has), old and new and
the change, "better" or "worse" by the measurement's direction (img/s and GB/s higher, times and
memory lower); configurations in one file only are counted (-v lists them). Either file may be
- (standard input), so a run's lines can be picked first (grep '"commit": "722bc85"' FILE).

Exit status: 0; 1 when a main measurement is worse by more than --threshold (a fraction of the
old value; default 0.10), so a script can stop on a regression; 2 for unreadable input (a line
that is not a JSON object, a file with no line to compare), naming the file and line. --ignore
leaves fields out of the configuration (--ignore cpu,isa compares across machines).
--check only reads: every line a JSON object with a date, a commit and a main measurement."""
import argparse
import json
import statistics
import sys

WHEN = {"date", "commit", "commit_before", "commit_after", "round", "run", "load_avg",
        "command", "what"}
MAIN = ("img_s", "ms", "ms_median", "step_ms", "table_ms", "busbw_gbs", "img_s_after")
HIGHER = ("img_s", "gbs", "speedup", "ratio", "busbw_vs_memcpy")


def is_measure(name):
    return (name in ("img_s", "ms", "busbw_vs_memcpy", "cpu_busy", "neighbour_cpu") or
            name.startswith(("img_s_", "ms_", "speedup", "runs_before", "runs_after")) or
            name.endswith(("_ms", "_gbs", "_kb", "_cpu_s", "ratio")))


def higher_is_better(name):
    return any(h in name for h in HIGHER)


def read(path):
    """The lines of path as dicts; exits 2 naming the first that is not a JSON object."""
    rows = []
    try:
        f = sys.stdin if path == "-" else open(path, encoding="utf-8")
    except OSError as e:
        print("perf-compare: %s: %s" % (path, e.strerror), file=sys.stderr)
        sys.exit(2)
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except ValueError as e:
                print("perf-compare: %s:%d: not JSON (%s)" % (path, n, e), file=sys.stderr)
                sys.exit(2)
            if not isinstance(r, dict):
                print("perf-compare: %s:%d: not a JSON object" % (path, n), file=sys.stderr)
                sys.exit(2)
            rows.append((n, r))
    return rows


def main_measure(r):
    for m in MAIN:
        if isinstance(r.get(m), (int, float)) and not isinstance(r.get(m), bool):
            return m
    return None


def config(r, ignore):
    return tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in r.items()
                        if k not in WHEN and k not in ignore and not is_measure(k)))


def group(rows, ignore):
    """configuration -> {main measurement name: median}, in the order first seen."""
    out = {}
    for _, r in rows:
        m = main_measure(r)
        if m is None:
            continue
        out.setdefault(config(r, ignore), {}).setdefault(m, []).append(float(r[m]))
    return {k: {m: statistics.median(v) for m, v in ms.items()} for k, ms in out.items()}


def label(key, common=()):
    return ", ".join("%s=%s" % (k, v.strip('"')) for k, v in key if (k, v) not in common) or "-"


def num(v):
    return "%.0f" % v if abs(v) >= 1000 else "%.4g" % v


def check(paths):
    bad = 0
    for p in paths:
        rows = read(p)
        if not rows:
            print("perf-compare: %s: no JSON lines" % p, file=sys.stderr)
            bad = 1
        for n, r in rows:
            why = []
            if "date" not in r:
                why.append("no date")
            if not any(k in r for k in ("commit", "commit_before", "commit_after")):
                why.append("no commit")
            if main_measure(r) is None:
                why.append("no measurement (one of %s)" % ", ".join(MAIN))
            if why:
                print("perf-compare: %s:%d: %s" % (p, n, "; ".join(why)), file=sys.stderr)
                bad = 1
        if rows:
            print("%s: %d lines, %d configurations" % (p, len(rows), len(group(rows, set()))))
    return 2 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threshold", type=float, default=0.10)
    ap.add_argument("--ignore", default="")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    if a.check:
        return check(a.files)
    if len(a.files) != 2:
        ap.error("two files: OLD NEW")
    ignore = {f for f in a.ignore.split(",") if f}
    old, new = (group(read(p), ignore) for p in a.files)
    for p, g in zip(a.files, (old, new)):
        if not g:
            print("perf-compare: %s: no line with a measurement (%s)" % (p, ", ".join(MAIN)),
                  file=sys.stderr)
            return 2
    worse = 0
    both = [k for k in new if k in old]
    # the fields every compared configuration shares, said once
    common = set(both[0]).intersection(*both[1:]) if both else set()
    if common:
        print("all: %s\n" % label(tuple(sorted(common))))
    print("| configuration | measurement | old | new | new / old | |")
    print("|---|---|--:|--:|--:|---|")
    for k in both:
        for m in new[k]:
            if m not in old[k]:
                continue
            o, n = old[k][m], new[k][m]
            if o == 0:
                continue
            r = n / o
            good = r >= 1 if higher_is_better(m) else r <= 1
            loss = (1 - r) if higher_is_better(m) else (r - 1)
            verdict = "better" if good else "worse"
            if not good and loss > a.threshold:
                verdict = "**worse by %.0f%%**" % (100 * loss)
                worse = 1
            print("| %s | %s | %s | %s | %.3f | %s |" % (label(k, common), m, num(o), num(n), r,
                                                          verdict))
    for name, g, other in (("old", old, new), ("new", new, old)):
        alone = [k for k in g if k not in other]
        if alone:
            print("only in %s: %d configuration%s%s" % (name, len(alone), "s"[:len(alone) > 1],
                                                       "" if a.verbose else " (-v lists them)"))
        for k in alone if a.verbose else ():
            print("  %s" % label(k))
    if not both:
        print("perf-compare: no configuration in both files (--ignore cpu,isa across machines?)",
              file=sys.stderr)
    return worse


if __name__ == "__main__":
    sys.exit(main())
