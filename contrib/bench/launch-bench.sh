#!/bin/bash
# launch-bench.sh — what --dptrain adds to a job step's launch: wall time of
# `srun -n4 CMD` with and without --dptrain on the project's local Slurm (contrib/localcluster),
# interleaved, N runs each (default 15); prints the median and quartiles as a markdown table.
# With --dptrain every task goes through dptrain-launch: PMIx exchange (two fences), rank
# table, environment, device directory, then exec of CMD. Run as root after `make`.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
n=${1:-15}
export DPTRAIN_BUILD_DIR=${DPTRAIN_BUILD_DIR:-$top/build}
dir=$(mktemp -d /tmp/dptrain-launch-bench.XXXXXX)
chmod 755 "$dir" # munged refuses a socket under a directory others cannot search
trap '"$top/contrib/localcluster/cluster" stop -d "$dir/cluster" >/dev/null 2>&1; rm -rf "$dir"' EXIT
"$top/contrib/localcluster/cluster" start -d "$dir/cluster" -c 8 >/dev/null
. "$dir/cluster/env.sh"
cd "$dir"
cfg="$top/contrib/examples/mlp-fmnist.json"
ms() { local t0 t1; t0=$(date +%s%N); "$@" >/dev/null; t1=$(date +%s%N); echo $(((t1 - t0) / 1000)); }
timeout 60 srun -n4 true # warm up: first step after start pays for slurmd's caches
timeout 60 srun -n4 --dptrain="$cfg" true
: >plain; : >dp
for i in $(seq "$n"); do
	ms timeout 60 srun -n4 true >>plain
	ms timeout 60 srun -n4 --dptrain="$cfg" true >>dp
done
stats() { sort -n "$1" | awk '{v[NR]=$1} END {printf "%.1f | %.1f | %.1f", v[int((NR+1)/2)]/1000, v[int(NR/4)+1]/1000, v[int(3*NR/4)]/1000}'; }
echo "| srun -n4 true ($n runs each, interleaved) | median ms | 25% ms | 75% ms |"
echo "|---|---|---|---|"
echo "| without --dptrain | $(stats plain) |"
echo "| with --dptrain | $(stats dp) |"
pm=$(sort -n plain | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
dm=$(sort -n dp | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
echo
echo "added by --dptrain (difference of medians): $(((dm - pm) / 1000)) ms"
