#!/bin/bash
# allreduce-bench.sh — dptrain's CPU allreduce (allreduce-bench.c) beside torch.distributed's
# gloo (allreduce-gloo.py) on one host: for each world size, WORLD processes allreduce float32
# buffers with dptrain over shared memory (its default on one node: dptrain-shm, buffers of
# the ranks' own, copied in and out of the segment's slices; dptrain-shared, the buffers in
# the comm's shared buffer, reduced in place, as DDP keeps its gradients there; with NODES
# each node's summed into its leader's, the ring between the leaders on it), with dptrain
# over the TCP ring only (DPTRAIN_COMM_SHM=0), with gloo under each Python given, and a plain
# memcpy of the same sizes in one process (the machine's copy bandwidth) and in WORLD
# processes at once (memcpy-par: the floor of an allreduce, each rank reading its input and
# writing its output once, all at once; "floor / time" is how close a tool comes to it), and
# the node's memory bandwidth: a memcpy in one process of a buffer 4 times the last-level
# caches the CPUs share (STREAM's rule, so that no cache holds it; at least 64 MB), which
# "busbw / node memcpy" compares against: a same-size memcpy that fits in the caches (11.2 MB
# in a 32 MiB L3) measures the cache, not the node's memory, while the allreduce of WORLD
# ranks works on WORLD buffers of that size; RUNS
# rounds, the tools interleaved in each. Prints the median time, the algorithm bandwidth
# (size / time, as PyTorch reports it) and the bus bandwidth (2 (n-1) / n * size / time, as
# NCCL's tests report it) as a markdown table, and with JSONL=FILE appends one JSON line per
# tool, size and world to FILE.
#   contrib/bench/allreduce-bench.sh [SIZE_MB...]     (after `make bench`)
#   environment: WORLDS ("2 4"), RUNS (3), ITERS (20), DPTRAIN_BUILD_DIR (build),
#     PYTHON (/usr/bin/python3; "" for none), CHROOT (a root with another PyTorch, e.g. Debian
#     13's: run as root, the script binds /proc, /dev, /sys and this tree at CHROOT_TOP, an empty
#     directory there, in a mount namespace of its own, so nothing stays mounted), JSONL
#   NODES=N: the ranks on N named nodes of this host (shared memory in each, the TCP ring
#     between their leaders) instead of one.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
bench=${DPTRAIN_BUILD_DIR:-$top/build}/bench/allreduce-bench
python=${PYTHON-/usr/bin/python3}
# shellcheck source=contrib/bench/chroot-lib.sh
. "$top/contrib/bench/chroot-lib.sh"
worlds=${WORLDS:-2 4} runs=${RUNS:-3} iters=${ITERS:-20} nodes=${NODES:-}
sizes=${*:-11.2 44.8 102}
if [ ! -x "$bench" ]; then
	echo "allreduce-bench.sh: no $bench: run 'make bench' (or set DPTRAIN_BUILD_DIR)" >&2
	exit 1
fi
chroot_check allreduce-bench.sh
dir=$(mktemp -d /tmp/dptrain-allreduce-bench.XXXXXX)
commit=$(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown) # the tree measured, as it was at the start
trap 'rm -rf "$dir"' EXIT
torch_version() { "$@" -c 'import torch; print(torch.__version__.split("+")[0])'; }
tools="dptrain-shm dptrain-shared dptrain-tcp"
[ -n "$python" ] && gloo_host="gloo-torch$(torch_version "$python")" && tools="$tools $gloo_host"
[ -n "$chroot_dir" ] && gloo_chroot="gloo-torch$(torch_version in_chroot /usr/bin/python3)" && tools="$tools $gloo_chroot"
shm_flags=${nodes:+-n $nodes}
# STREAM's rule: 4 x the last-level caches (each counted once, however many CPUs share it), in MB
node_mb=$(
	for c in /sys/devices/system/cpu/cpu[0-9]*/cache/index[0-9]*; do
		[ -r "$c/level" ] && [ -r "$c/size" ] && echo "$(cat "$c/level") $(cat "$c/size") $(cat "$c/shared_cpu_list" 2>/dev/null)"
	done | awk '{ n = $2 + 0; u = $2; sub(/[0-9]+/, "", u); n *= (u == "M") ? 1048576 : (u == "G") ? 1073741824 : 1024
		if ($1 > top) { top = $1; split("", seen); sum = 0 }
		if ($1 == top && !(($3) in seen)) { seen[$3] = 1; sum += n } }
		END { mb = 4 * sum / 1e6; if (mb < 64) mb = 64; printf "%d\n", mb + 0.999 }'
)
# shellcheck disable=SC2086 # sizes and flags are words
for _ in $(seq "$runs"); do
	timeout 600 "$bench" -m -i "$iters" $sizes >>"$dir/memcpy"
	timeout 600 "$bench" -m -i "$iters" "$node_mb" >>"$dir/memcpy-node"
	for w in $worlds; do
		timeout 600 "$bench" -m -w "$w" -i "$iters" $sizes >>"$dir/memcpy-par.$w"
		timeout 600 "$bench" -w "$w" -i "$iters" $shm_flags $sizes >>"$dir/dptrain-shm.$w" 2>/dev/null
		timeout 600 "$bench" -s -w "$w" -i "$iters" $shm_flags $sizes >>"$dir/dptrain-shared.$w" 2>/dev/null
		timeout 600 "$bench" -w "$w" -i "$iters" -t $sizes >>"$dir/dptrain-tcp.$w" 2>/dev/null
		[ -z "$python" ] || timeout 600 "$python" "$top/contrib/bench/allreduce-gloo.py" -w "$w" -i "$iters" $sizes >>"$dir/$gloo_host.$w"
		[ -z "$chroot_dir" ] || in_chroot timeout 600 /usr/bin/python3 "$chroot_top/contrib/bench/allreduce-gloo.py" -w "$w" -i "$iters" $sizes >>"$dir/$gloo_chroot.$w"
	done
done
# median over the runs of each run's median time, for one size
med() { awk -v s="$2" '$1 == s { print $2 }' "$dir/$1" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
isa=$(grep -o -m1 -w 'avx512f\|avx2' /proc/cpuinfo | sort -u | tail -1)
grep -q -m1 -w amx_tile /proc/cpuinfo && isa="$isa+amx"
date=$(date -u +%Y-%m-%d)
shape="one node"
[ -n "$nodes" ] && shape="$nodes named nodes of one host (shared memory in each, the TCP ring between them)"
echo "allreduce of float32 on 127.0.0.1, $shape; $(nproc) CPUs (${cpu:-unknown}, $isa); 1 thread per rank;"
nc=$(med memcpy-node "$node_mb")
ncbw=$(awk -v s="$node_mb" -v m="$nc" 'BEGIN { printf "%.3f", s / m }')
echo "median of $runs interleaved runs of $iters iterations each; algbw = size / time, busbw = 2 (n-1) / n * size / time;"
echo "node memcpy: $ncbw GB/s (one process, $node_mb MB: 4 x the last-level caches)"
for w in $worlds; do
	echo
	echo "$w ranks:"
	echo
	echo "| size | tool | ms | algbw GB/s | busbw GB/s | busbw / memcpy | busbw / node memcpy | time vs gloo (${gloo_chroot:-${gloo_host:-none}}) | floor / time |"
	echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
	for s in $sizes; do
		mc=$(med memcpy "$s")
		fl=$(med "memcpy-par.$w" "$s")
		ref=""
		[ -n "${gloo_chroot:-}" ] && ref=$(med "$gloo_chroot.$w" "$s")
		[ -z "$ref" ] && [ -n "${gloo_host:-}" ] && ref=$(med "$gloo_host.$w" "$s")
		for t in $tools memcpy memcpy-par; do
			f=$t.$w
			[ "$t" = memcpy ] && f=memcpy
			m=$(med "$f" "$s")
			[ -n "$m" ] || continue
			awk -v s="$s" -v t="$t" -v m="$m" -v w="$w" -v mc="$mc" -v fl="$fl" -v ref="$ref" \
				-v jsonl="${JSONL:-}" -v ncbw="$ncbw" -v nmb="$node_mb" -v cpu="$cpu" -v isa="$isa" -v commit="$commit" \
				-v date="$date" -v runs="$runs" -v iters="$iters" -v nodes="${nodes:-1}" -v ncpu="$(nproc)" 'BEGIN {
				cp = (t ~ /^memcpy/); alg = s / m; bus = cp ? alg : 2 * (w - 1) / w * alg; mcbw = s / mc
				vs = (ref != "" && !cp) ? sprintf("%.2fx", ref / m) : ""
				vf = (fl != "" && !cp) ? sprintf("%.0f%%", 100 * fl / m) : ""
				printf "| %s MB | %s | %.2f | %.2f | %.2f | %.0f%% | %.0f%% | %s | %s |\n", s, t, m, alg, bus, 100 * bus / mcbw, 100 * bus / ncbw, vs, vf
				if (jsonl != "") {
					printf "{\"date\": \"%s\", \"commit\": \"%s\", \"tool\": \"contrib/bench/allreduce-bench.sh\", \"impl\": \"%s\", \"op\": \"%s\", \"size_mb\": %s, \"ranks\": %d, \"nodes\": %d, \"threads\": 1, \"ms\": %.3f, \"algbw_gbs\": %.3f, \"busbw_gbs\": %.3f, \"memcpy_gbs\": %.3f, \"busbw_vs_memcpy\": %.3f, \"node_memcpy_mb\": %d, \"node_memcpy_gbs\": %.3f, \"busbw_vs_node_memcpy\": %.3f, \"speedup_vs_gloo\": %s, \"floor_ms\": %s, \"runs\": %d, \"iters\": %d, \"cpu\": \"%s\", \"isa\": \"%s\", \"cpus\": %d}\n", \
						date, commit, t, cp ? "memcpy" : "allreduce", s, (t == "memcpy") ? 1 : w, nodes, m, alg, bus, mcbw, bus / mcbw, nmb, ncbw, bus / ncbw, \
						(vs == "") ? "null" : sprintf("%.3f", ref / m), (fl == "") ? "null" : sprintf("%.3f", fl), runs, iters, cpu, isa, ncpu >> jsonl
				}
			}'
		done
	done
done
