#!/bin/bash
# busy-bench.sh — many ranks per node on a busy machine: training throughput of dptrain
# (dptrain-run, local ranks) and PyTorch DDP (gloo, contrib/bench/busy-ddp.py) at the same
# settings, with the machine otherwise idle and with one CPU-busy process beside the job (a
# shell loop), for mlp and lenet (synthetic 1x28x28 input, contrib/examples' batch):
#
#   4x1  4 ranks x 1 thread each (on a 2-core machine: 2 ranks a core)
#   2x2  2 ranks x 2 threads each (ranks x threads above the cores: OpenMP teams that spin
#        while they wait steal the core their peer's rank needs)
#   1x2  1 rank x 2 threads (the cores to itself, but for the busy process)
#
# CONFIGS="4x1" (say) runs only those (default "4x1 2x2 1x2"); MODELS="mlp" likewise
# (default "mlp lenet"). The spinning 2x2 and 1x2 runs take minutes each.
#
# With threads, each tool runs with its own default wait policy ("default": dptrain's
# launcher sets OMP_WAIT_POLICY=passive, PyTorch leaves libgomp's spin-then-sleep) and with the
# other one: dptrain with GOMP_SPINCOUNT=300000 ("spin", libgomp's default spin made explicit,
# which the launcher leaves alone), PyTorch with OMP_WAIT_POLICY=passive ("passive").
#
# Rounds are interleaved; prints one JSON line per run (img_s; dptrain's the median over the
# logged intervals after the first; cpu_busy: the share of the machine's CPU time that was busy
# over the measured steps, neighbour_cpu: the share the busy process took) and, at the end, the
# median of each configuration and its busy / idle ratio as a markdown table. JSONL=FILE also
# appends the JSON lines to FILE (doc/perf/DATE-busy.jsonl, say). CHROOT and CHROOT_TOP (as
# allreduce-bench.sh's, run as root): PyTorch's ranks run under that root's /usr/bin/python3
# (Debian 13's PyTorch 2.6, say) instead of PYTHON; the busy process and dptrain stay outside.
#
#   contrib/bench/busy-bench.sh [ROUNDS] [STEPS]    (default 3, 120; needs a build in build/)
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
JSONL=${JSONL:+$(realpath -m "$JSONL")}
bin="${DPTRAIN_BUILD_DIR:-$top/build}/bin"
rounds=${1:-3}
steps=${2:-120}
py=${PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
busy=
sampler=
# (under set -e: a sampler that has ended already is no failure of the run)
trap '[ -z "$busy" ] || kill "$busy" 2>/dev/null || true; [ -z "$sampler" ] || kill "$sampler" 2>/dev/null || true; rm -rf "$work"' EXIT
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
commit=$(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)
# shellcheck source=contrib/bench/chroot-lib.sh
. "$top/contrib/bench/chroot-lib.sh"
chroot_check busy-bench.sh
# SCRIPT (of this tree) under PyTorch's python, PYTHON or the chroot's, for at most 600 s
torch_py() { # SCRIPT ARGS...
	local s=$1
	shift
	if [ -n "$chroot_dir" ]; then
		in_chroot timeout 600 /usr/bin/python3 "$chroot_top/${s#"$top"/}" "$@"
	else
		timeout 600 "$py" "$s" "$@"
	fi
}
if [ -n "$chroot_dir" ]; then
	torch=$(in_chroot /usr/bin/python3 -c 'import torch; print(torch.__version__)')
else
	torch=$($py -c 'import torch; print(torch.__version__)')
fi

# Each tool prints its img/s and the wall-clock window it was measured over (epoch seconds).
dptrain_ips() { # MODEL RANKS THREADS
	local cfg="$top/contrib/examples/$1-fmnist.json" out="$work/run.$$"
	rm -rf "$out"
	timeout 600 "$bin/dptrain-run" -n "$2" -o "$out" "$cfg" "$bin/dptrain" "$cfg" \
		data.format=synthetic data.train.size=400000 data.eval=null train.epochs=0 \
		train.max_steps="$steps" train.log_every=$((steps / 6 > 0 ? steps / 6 : 1)) train.threads="$3" \
		checkpoint.resume=never checkpoint.every_epochs=0 >"$work/log" 2>&1 ||
		{ tail -5 "$work/log" >&2; echo 0 0 0; return; }
	$py - "$out/metrics.jsonl" <<'PY'
import json, statistics, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
ev = [e for e in ev if e.get("event") == "train"]
# the intervals after the first: from the first logged step to the last
print("%.1f %.3f %.3f" % (statistics.median([e["img_per_s"] for e in ev][1:]), ev[0]["time"], ev[-1]["time"]))
PY
}
torch_ips() { # MODEL RANKS THREADS
	torch_py "$top/contrib/bench/busy-ddp.py" --model "$1" --nproc "$2" --threads "$3" \
		--steps "$steps" | "$py" -c 'import json,sys; r = json.load(sys.stdin); print("%.1f %.3f %.3f" % (r["img_s"], *r["window"]))' ||
		echo 0 0 0
}

# Where the CPU time went while a tool ran: /proc/stat's CPU time and the busy process's, sampled
# every 50 ms into FILE until killed; `share FILE START END` prints, over that window, the share of
# the machine's CPU time that was busy and the share the busy process took (steal left out).
sampler() { # FILE [PID]
	"$py" - "$1" "${2:-0}" <<'PY' &
import sys, time
out, pid = open(sys.argv[1], "w"), sys.argv[2]
while True:
    with open("/proc/stat") as f:
        c = [int(x) for x in f.readline().split()[1:8]]
    nb = 0
    if pid != "0":
        try:
            with open("/proc/%s/stat" % pid) as f:
                st = f.read().rsplit(")", 1)[1].split()
            nb = int(st[11]) + int(st[12])
        except OSError:
            pass
    out.write("%.3f %d %d %d\n" % (time.time(), sum(c) - c[3] - c[4], sum(c), nb))
    out.flush()
    time.sleep(0.05)
PY
	sampler=$!
}
share() { # FILE START END
	"$py" - "$@" <<'PY'
import sys
s = [[float(x) for x in l.split()] for l in open(sys.argv[1]) if len(l.split()) == 4]
a, b = float(sys.argv[2]), float(sys.argv[3])
lo = max([x for x in s if x[0] <= a] or s[:1], key=lambda x: x[0])
hi = min([x for x in s if x[0] >= b] or s[-1:], key=lambda x: x[0])
tot = hi[2] - lo[2]
print("%.3f %.3f" % ((hi[1] - lo[1]) / tot, (hi[3] - lo[3]) / tot) if tot > 0 else "null null")
PY
}

for cfg in ${CONFIGS:-4x1 2x2 1x2}; do
	case $cfg in
	[1-9]*x[1-9]*) ;;
	*) echo "busy-bench.sh: CONFIGS: $cfg is not RANKSxTHREADS (4x1, say)" >&2; exit 2 ;;
	esac
done
for model in ${MODELS:-mlp lenet}; do
	[ -f "$top/contrib/examples/$model-fmnist.json" ] ||
		{ echo "busy-bench.sh: MODELS: no contrib/examples/$model-fmnist.json" >&2; exit 2; }
done
echo "# $(nproc) CPUs, $cpu; torch $torch; $steps steps per run, $rounds rounds" >&2
for round in $(seq "$rounds"); do
	for model in ${MODELS:-mlp lenet}; do
		for cfg in ${CONFIGS:-4x1 2x2 1x2}; do
			ranks=${cfg%x*} threads=${cfg#*x}
			policies="default"
			[ "$threads" -gt 1 ] && policies="default other"
			for load in idle busy; do
				if [ "$load" = busy ]; then
					sh -c 'while :; do :; done' &
					busy=$!
				fi
				for p in $policies; do
					for tool in dptrain torch; do
						unset OMP_WAIT_POLICY GOMP_SPINCOUNT
						policy=default
						if [ "$p" = other ] && [ "$tool" = dptrain ]; then
							export GOMP_SPINCOUNT=300000 policy=spin
						elif [ "$p" = other ]; then
							export OMP_WAIT_POLICY=passive policy=passive
						fi
						sampler "$work/samples" "$busy"
						read -r ips w0 w1 < <("${tool}_ips" "$model" "$ranks" "$threads")
						read -r used nb < <(share "$work/samples" "$w0" "$w1")
						kill "$sampler"
						wait "$sampler" 2>/dev/null || true
						[ -n "$busy" ] || nb=null
						unset OMP_WAIT_POLICY GOMP_SPINCOUNT
						echo "{\"tool\": \"$tool\", \"model\": \"$model\", \"ranks\": $ranks, \"threads\": $threads, \"load\": \"$load\", \"omp_wait_policy\": \"$policy\", \"img_s\": $ips, \"cpu_busy\": $used, \"neighbour_cpu\": $nb, \"round\": $round, \"steps\": $steps, \"cpu\": \"$cpu\", \"cpus\": $(nproc), \"torch\": \"$torch\", \"date\": \"$(date -u +%F)\", \"commit\": \"$commit\"}" | tee -a "$work/all.jsonl" ${JSONL:+"$JSONL"}
					done
				done
				if [ -n "$busy" ]; then
					kill "$busy"
					wait "$busy" 2>/dev/null || true
					busy=
				fi
			done
		done
	done
done
$py - "$work/all.jsonl" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(list)
for l in open(sys.argv[1]):
    r = json.loads(l)
    runs[(r["model"], r["ranks"], r["threads"], r["omp_wait_policy"], r["tool"], r["load"])].append(r)
def med(k, f):
    v = [r[f] for r in runs.get(k, []) if r[f] is not None]
    return statistics.median(v) if v else None
print("| model | ranks x threads | OMP_WAIT_POLICY | tool | idle img/s | busy img/s | busy / idle "
      "| CPU busy, idle | CPU busy, busy | busy process's CPU |")
print("|---|---|---|---|--:|--:|--:|--:|--:|--:|")
pct = lambda v: "" if v is None else "%.0f%%" % (100 * v)
for k in sorted({k[:5] for k in runs}):
    i, b = med(k + ("idle",), "img_s") or 0, med(k + ("busy",), "img_s") or 0
    print("| %s | %dx%d | %s | %s | %.0f | %.0f | %.2f | %s | %s | %s |" % (
        k[0], k[1], k[2], k[3], k[4], i, b, b / i if i else 0, pct(med(k + ("idle",), "cpu_busy")),
        pct(med(k + ("busy",), "cpu_busy")), pct(med(k + ("busy",), "neighbour_cpu"))))
PY
