#!/bin/bash
# launch-bench.sh — what --dptrain adds to a job step's launch: wall time of
# `srun -n4 CMD` with and without --dptrain on the project's local Slurm (contrib/localcluster),
# interleaved, N runs each (default 15); prints the median and quartiles as a markdown table.
# With --dptrain every task goes through dptrain-launch: PMIx exchange (two fences), rank
# table, environment, device directory; Slurm then runs CMD. Run as root after `make`.
# BASELINE=DIR (the build directory of another version, e.g. a worktree of an older commit
# built with make) adds a third column, timed the same way with that version's plugin and
# launcher in the same cluster, interleaved.
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
ours=$(cat "$DPTRAIN_CLUSTER_DIR/plugstack.conf")
use() { # the plugin and launcher of build directory $1 (Slurm re-reads plugstack.conf per srun)
	echo "required $1/lib/dptrain.so launcher=$1/bin/dptrain-launch trainer=$1/bin/dptrain" \
		>"$DPTRAIN_CLUSTER_DIR/plugstack.conf"
}
timeout 60 srun -n4 true # warm up: first step after start pays for slurmd's caches
timeout 60 srun -n4 --dptrain="$cfg" true
: >plain; : >dp; : >base
for i in $(seq "$n"); do
	ms timeout 60 srun -n4 true >>plain
	ms timeout 60 srun -n4 --dptrain="$cfg" true >>dp
	if [ -n "${BASELINE:-}" ]; then
		use "$BASELINE"
		ms timeout 60 srun -n4 --dptrain="$cfg" true >>base
		echo "$ours" >"$DPTRAIN_CLUSTER_DIR/plugstack.conf"
	fi
done
stats() { sort -n "$1" | awk '{v[NR]=$1} END {printf "%.1f | %.1f | %.1f", v[int((NR+1)/2)]/1000, v[int(NR/4)+1]/1000, v[int(3*NR/4)]/1000}'; }
echo "| srun -n4 true ($n runs each, interleaved) | median ms | 25% ms | 75% ms |"
echo "|---|---|---|---|"
echo "| without --dptrain | $(stats plain) |"
echo "| with --dptrain | $(stats dp) |"
[ -z "${BASELINE:-}" ] || echo "| with --dptrain, BASELINE's plugin and launcher | $(stats base) |"
pm=$(sort -n plain | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
dm=$(sort -n dp | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
echo
echo "added by --dptrain (difference of medians): $(((dm - pm) / 1000)) ms"
if [ -n "${BASELINE:-}" ]; then
	bm=$(sort -n base | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
	echo "added by BASELINE's --dptrain: $(((bm - pm) / 1000)) ms"
fi
