#!/bin/bash
# allreduce-bench.sh — dptrain's CPU allreduce (allreduce-bench.c) beside torch.distributed's
# gloo (allreduce-gloo.py): WORLD processes on 127.0.0.1 allreduce float32 buffers, RUNS runs
# of each interleaved; prints the median time and bandwidth (size / time) as a markdown table.
#   contrib/bench/allreduce-bench.sh [SIZE_MB...]     (after `make bench`)
#   environment: WORLD (2), RUNS (3), ITERS (20), DPTRAIN_BUILD_DIR (build), PYTHON (/usr/bin/python3)
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
bench=${DPTRAIN_BUILD_DIR:-$top/build}/bench/allreduce-bench
python=${PYTHON:-/usr/bin/python3}
world=${WORLD:-2} runs=${RUNS:-3} iters=${ITERS:-20}
sizes=${*:-1 11.2 44.8 102}
if [ ! -x "$bench" ]; then
	echo "allreduce-bench.sh: no $bench: run 'make bench' (or set DPTRAIN_BUILD_DIR)" >&2
	exit 1
fi
dir=$(mktemp -d /tmp/dptrain-allreduce-bench.XXXXXX)
trap 'rm -rf "$dir"' EXIT
# shellcheck disable=SC2086 # sizes are words
for _ in $(seq "$runs"); do
	timeout 600 "$bench" -w "$world" -i "$iters" $sizes >>"$dir/dptrain"
	timeout 600 "$python" "$top/contrib/bench/allreduce-gloo.py" -w "$world" -i "$iters" $sizes >>"$dir/gloo"
done
# median over the runs of each run's median time, for one size
med() { awk -v s="$2" '$1 == s { print $2 }' "$dir/$1" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
echo "allreduce of float32 between $world processes on 127.0.0.1; $(nproc) CPUs (${cpu:-unknown});"
echo "median of $runs runs of $iters iterations each; GB/s = size / time"
echo
echo "| size | dptrain ms | dptrain GB/s | gloo ms | gloo GB/s | dptrain / gloo |"
echo "|---:|---:|---:|---:|---:|---:|"
for s in $sizes; do
	d=$(med dptrain "$s") g=$(med gloo "$s")
	awk -v s="$s" -v d="$d" -v g="$g" 'BEGIN { printf "| %s MB | %.2f | %.2f | %.2f | %.2f | %.2fx |\n", s, d, s / d, g, s / g, g / d }'
done
