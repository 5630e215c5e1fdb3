#!/bin/bash
# rendezvous-cluster.sh — the launchers' rendezvous with as many tasks as the project's local
# Slurm (contrib/localcluster) runs on this machine: wall time of `srun -n N --dptrain true`
# through the PMIx exchange (--mpi=pmix: two fences, the rank table) and through the launchers'
# store (--mpi=none: alloc_store.c, rank 0's store), beside `srun -n N true`, N tasks on 4
# emulated nodes, interleaved ROUNDS times; one JSON line per run, the medians at the end.
#
#   contrib/bench/rendezvous-cluster.sh [ROUNDS] [COUNTS...]   (default 3; 16 64 256)
# Run as root after `make`.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${1:-3}
shift || true
counts=${*:-16 64 256}
export DPTRAIN_BUILD_DIR=${DPTRAIN_BUILD_DIR:-$top/build}
dir=$(mktemp -d /tmp/dptrain-rdv-cluster.XXXXXX)
chmod 755 "$dir"
trap '"$top/contrib/localcluster/cluster" stop -d "$dir/cluster" >/dev/null 2>&1; rm -rf "$dir"' EXIT
max=0
for n in $counts; do [ "$n" -gt "$max" ] && max=$n; done
"$top/contrib/localcluster/cluster" start -d "$dir/cluster" -N 4 -c $(((max + 3) / 4)) -t 120 >/dev/null
. "$dir/cluster/env.sh"
cd "$dir"
ulimit -n "$(ulimit -Hn)"
cfg="$top/contrib/examples/mlp-fmnist.json"
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
commit=$(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)
ms() { local t0 t1; t0=$(date +%s%N); "$@" >/dev/null 2>"$dir/err" || { tail -3 "$dir/err" >&2; echo -1; return; }; t1=$(date +%s%N); echo $(((t1 - t0) / 1000000)); }
timeout 120 srun -n4 true
timeout 120 srun -n4 --dptrain="$cfg" true
for round in $(seq "$rounds"); do
	for n in $counts; do
		for how in plain pmix store; do
			case $how in
			plain) t=$(ms timeout 300 srun -n "$n" true) ;;
			pmix) t=$(ms timeout 300 srun --mpi=pmix -n "$n" --dptrain="$cfg" true) ;;
			store) t=$(ms timeout 300 srun --mpi=none -n "$n" --dptrain="$cfg" true) ;;
			esac
			echo "{\"tool\": \"srun $how\", \"ranks\": $n, \"nodes\": 4, \"ms\": $t, \"round\": $round, \"cpu\": \"$cpu\", \"cpus\": $(nproc), \"date\": \"$(date -u +%F)\", \"commit\": \"$commit\"}"
		done
	done
done | tee "$dir/all.jsonl"
/usr/bin/python3 - "$dir/all.jsonl" >&2 <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(list)
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["ms"] >= 0:
        runs[(r["ranks"], r["tool"])].append(r["ms"])
print("| tasks (4 nodes) | srun true, ms | --dptrain, PMIx, ms | --dptrain, store (--mpi=none), ms |")
print("|--:|--:|--:|--:|")
for n in sorted({k[0] for k in runs}):
    m = lambda t: "%.0f" % statistics.median(runs[(n, t)]) if runs[(n, t)] else "failed"
    print("| %d | %s | %s | %s |" % (n, m("srun plain"), m("srun pmix"), m("srun store")))
PY
