#!/bin/bash
# rendezvous-bench.sh — the rendezvous at scale, simulated on this machine: time to a complete
# rank table and the store's memory with 256, 1,024 and 4,096 ranks (client threads of 8
# processes against one store on 127.0.0.1), dptrain's store (contrib/bench/rendezvous-bench.c,
# with a rank table's host names and without: -H) beside PyTorch's TCPStore doing the same
# (contrib/bench/rendezvous-tcpstore.py) with Debian's torch and, where PY26 names a Python with
# PyTorch 2.6 that sees this tree as its working directory, that one too. Rounds interleaved;
# one JSON line per run on stdout, a markdown table of medians on stderr.
#
#   contrib/bench/rendezvous-bench.sh [ROUNDS] [COUNTS...]   (default 3; 256 1024 4096)
#   PY26="sudo chroot-wrapper /usr/bin/python3" contrib/bench/rendezvous-bench.sh
# Needs `make bench`; raises its open-files limit to the hard limit (2 x 4,096 descriptors).
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
bench="${DPTRAIN_BUILD_DIR:-$top/build}/bench/rendezvous-bench"
rounds=${1:-3}
shift || true
counts=${*:-256 1024 4096}
ulimit -n "$(ulimit -Hn)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
tag() { # JSON from a tool on stdin: tool name, machine, date and commit added
	/usr/bin/python3 -c '
import json, sys
tool, cpu, cpus, commit, rnd = sys.argv[1:]
for l in sys.stdin:
    l = l.strip()
    if not l.startswith("{"):
        continue
    r = json.loads(l)
    r.update({"tool": r.get("tool", tool), "round": int(rnd), "cpu": cpu, "cpus": int(cpus),
              "date": __import__("datetime").date.today().isoformat(), "commit": commit})
    if "torch" in r:
        r["tool"] = "TCPStore (torch %s)" % r["torch"]
    print(json.dumps(r))' "$1" "$cpu" "$(nproc)" "$commit" "$2"
}
for round in $(seq "$rounds"); do
	for n in $counts; do
		timeout 600 "$bench" -n "$n" -p 8 | tag "dptrain store, rank table's names" "$round" || true
		timeout 600 "$bench" -n "$n" -p 8 -H | tag "dptrain store, names from the store" "$round" || true
		timeout 900 /usr/bin/python3 contrib/bench/rendezvous-tcpstore.py -n "$n" -p 8 |
			tag TCPStore "$round" || true
		if [ -n "${PY26:-}" ]; then
			timeout 900 $PY26 contrib/bench/rendezvous-tcpstore.py -n "$n" -p 8 |
				tag TCPStore "$round" || true
		fi
	done
done | tee "$work/all.jsonl"
/usr/bin/python3 - "$work/all.jsonl" >&2 <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(list)
for l in open(sys.argv[1]):
    r = json.loads(l)
    runs[(r["tool"], r["ranks"])].append(r)
print("| store | ranks | runs | time to the complete table, median ms | store's RSS growth, median MiB |")
print("|---|--:|--:|--:|--:|")
for (tool, n), rs in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    t = statistics.median(r["table_ms"] for r in rs)
    m = statistics.median((r["rss_kb"] - r["rss_before_kb"]) / 1024 for r in rs)
    print("| %s | %d | %d | %.0f | %.1f |" % (tool, n, len(rs), t, m))
PY
