#!/bin/bash
# allreduce-netns.sh — the hierarchical allreduce across nodes: a local Slurm
# (contrib/localcluster) of NODES nodes, each in its own network namespace (veth, 10.251.0.x),
# PPN ranks per node, and as srun --dptrain steps: dptrain's allreduce-bench -e (shared memory
# in each node, the TCP ring between the nodes' leaders; dptrain-hier-shared: the buffers in
# the comm's shared buffer, as DDP keeps its gradients, each node's summed in place into its
# leader's, the ring on it, the others copying the result back), the same with
# DPTRAIN_COMM_SHM=0 (every rank in one TCP ring) and torch.distributed's gloo
# (allreduce-gloo.py -e; with CHROOT also under that root's PyTorch, as allreduce-bench.sh:
# each rank in a mount namespace of its own with /proc, /dev, /sys and this tree at
# CHROOT_TOP bound), RUNS rounds, interleaved. Prints the median time, algbw and busbw per
# tool and size; with JSONL=FILE appends one JSON line per tool and size. Root only (the
# cluster); after `make bench`; leaves nothing running.
#   contrib/bench/allreduce-netns.sh [SIZE_MB...]
#   environment: NODES (2), PPN (2), RUNS (3), ITERS (10), PYTHON (/usr/bin/python3), JSONL,
#     CHROOT and CHROOT_TOP (as for allreduce-bench.sh)
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
# the script works in a directory of its own: paths given relative to the caller's, made whole
build=$(realpath -m "${DPTRAIN_BUILD_DIR:-$top/build}")
JSONL=${JSONL:+$(realpath -m "$JSONL")}
bench=$build/bench/allreduce-bench
python=${PYTHON:-/usr/bin/python3}
nodes=${NODES:-2} ppn=${PPN:-2} runs=${RUNS:-3} iters=${ITERS:-10}
chroot_dir=${CHROOT:-} chroot_top=${CHROOT_TOP:-}
sizes=${*:-11.2 44.8 102}
world=$((nodes * ppn))
if [ ! -x "$bench" ]; then
	echo "allreduce-netns.sh: no $bench: run 'make bench' (or set DPTRAIN_BUILD_DIR)" >&2
	exit 1
fi
if [ -n "$chroot_dir" ] && { [ -z "$chroot_top" ] || [ ! -d "$chroot_dir$chroot_top" ]; }; then
	echo "allreduce-netns.sh: CHROOT_TOP='$chroot_top': an empty directory in $chroot_dir is needed to bind this tree at" >&2
	exit 1
fi
dir=$(mktemp -d /tmp/dptrain-allreduce-netns.XXXXXX)
commit=$(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown) # the tree measured, as it was at the start
chmod 755 "$dir" # munge wants its socket's directories open to all
cleanup() {
	DPTRAIN_BUILD_DIR=$build "$top/contrib/localcluster/cluster" stop -d "$dir/cluster" >/dev/null 2>&1 || :
	rm -rf "$dir"
}
trap cleanup EXIT
DPTRAIN_BUILD_DIR=$build "$top/contrib/localcluster/cluster" start -d "$dir/cluster" --netns -N "$nodes" -c "$ppn" >/dev/null
# shellcheck disable=SC1091
. "$dir/cluster/env.sh"
cd "$dir"
gloo="gloo-torch$("$python" -c 'import torch; print(torch.__version__.split("+")[0])')"
gloos=$gloo
if [ -n "$chroot_dir" ]; then
	# one rank of gloo under the root's Python: the interface to MASTER_ADDR found out here
	# (the root need not have ip), the root's mounts in a namespace of the rank's own
	cat >"$dir/chroot-gloo" <<-EOF
	#!/bin/sh
	route=\$(ip -o route get "\$MASTER_ADDR") || exit 1
	export GLOO_SOCKET_IFNAME=\${GLOO_SOCKET_IFNAME:-\$(echo "\$route" | sed -n 's/.* dev \([^ ]*\).*/\1/p')}
	exec unshare -m --propagation private sh -c 'r=\$1 t=\$2 top=\$3; shift 3
		mount --rbind /proc "\$r/proc" && mount --rbind /dev "\$r/dev" &&
		mount --rbind /sys "\$r/sys" && mount --bind "\$top" "\$r\$t" && exec chroot "\$r" "\$@"' \
		sh "$chroot_dir" "$chroot_top" "$top" /usr/bin/python3 "$chroot_top/contrib/bench/allreduce-gloo.py" -e "\$@"
	EOF
	chmod 755 "$dir/chroot-gloo"
	gloo_chroot="gloo-torch$(unshare -m --propagation private sh -c 'mount --rbind /proc "$1/proc" && exec chroot "$1" /usr/bin/python3 -c "import torch; print(torch.__version__.split(\"+\")[0])"' sh "$chroot_dir")"
	gloos="$gloo $gloo_chroot"
fi
step() { timeout 600 srun -N"$nodes" --ntasks-per-node="$ppn" --dptrain "$@" 2>>"$dir/err"; }
# shellcheck disable=SC2086 # sizes are words
for _ in $(seq "$runs"); do
	step "$bench" -e -i "$iters" $sizes >>"$dir/dptrain-hier"
	step "$bench" -e -s -i "$iters" $sizes >>"$dir/dptrain-hier-shared"
	DPTRAIN_COMM_SHM=0 step "$bench" -e -i "$iters" $sizes >>"$dir/dptrain-tcp"
	step "$python" "$top/contrib/bench/allreduce-gloo.py" -e -i "$iters" $sizes >>"$dir/$gloo"
	[ -z "$chroot_dir" ] || step "$dir/chroot-gloo" -i "$iters" $sizes >>"$dir/$gloo_chroot"
done
grep -h "allreduce-bench: $world ranks" "$dir/err" | sort -u >&2 || :
med() { awk -v s="$2" '$1 == s { print $2 }' "$dir/$1" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
isa=$(grep -o -m1 -w 'avx512f\|avx2' /proc/cpuinfo | sort -u | tail -1)
date=$(date -u +%Y-%m-%d)
echo "allreduce of float32, $nodes nodes (network namespaces, veth) x $ppn ranks; $(nproc) CPUs (${cpu:-unknown}, $isa); 1 thread per rank"
echo "median of $runs interleaved runs of $iters iterations each; busbw = 2 (n-1) / n * size / time"
echo
echo "| size | tool | ms | algbw GB/s | busbw GB/s | time vs ${gloo_chroot:-$gloo} |"
echo "|---:|---|---:|---:|---:|---:|"
for s in $sizes; do
	ref=$(med "${gloo_chroot:-$gloo}" "$s")
	for t in dptrain-hier dptrain-hier-shared dptrain-tcp $gloos; do
		m=$(med "$t" "$s")
		[ -n "$m" ] || continue
		awk -v s="$s" -v t="$t" -v m="$m" -v w="$world" -v n="$nodes" -v ref="$ref" \
			-v jsonl="${JSONL:-}" -v cpu="$cpu" -v isa="$isa" -v commit="$commit" -v date="$date" \
			-v runs="$runs" -v iters="$iters" -v ncpu="$(nproc)" 'BEGIN {
			alg = s / m; bus = 2 * (w - 1) / w * alg
			printf "| %s MB | %s | %.2f | %.2f | %.2f | %.2fx |\n", s, t, m, alg, bus, ref / m
			if (jsonl != "")
				printf "{\"date\": \"%s\", \"commit\": \"%s\", \"tool\": \"contrib/bench/allreduce-netns.sh\", \"impl\": \"%s\", \"op\": \"allreduce\", \"size_mb\": %s, \"ranks\": %d, \"nodes\": %d, \"threads\": 1, \"ms\": %.3f, \"algbw_gbs\": %.3f, \"busbw_gbs\": %.3f, \"speedup_vs_gloo\": %.3f, \"runs\": %d, \"iters\": %d, \"cpu\": \"%s\", \"isa\": \"%s\", \"cpus\": %d}\n", \
					date, commit, t, s, w, n, m, alg, bus, ref / m, runs, iters, cpu, isa, ncpu >> jsonl
		}'
	done
done
