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
# logged intervals after the first) and, at the end, the median of each configuration and its
# busy / idle ratio as a markdown table.
#
#   contrib/bench/busy-bench.sh [ROUNDS] [STEPS]    (default 3, 120; needs a build in build/)
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
bin="${DPTRAIN_BUILD_DIR:-$top/build}/bin"
rounds=${1:-3}
steps=${2:-120}
py=${PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
busy=
trap '[ -n "$busy" ] && kill "$busy" 2>/dev/null; rm -rf "$work"' EXIT
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
commit=$(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)
torch=$($py -c 'import torch; print(torch.__version__)')

dptrain_ips() { # MODEL RANKS THREADS
	local cfg="$top/contrib/examples/$1-fmnist.json" out="$work/run.$$"
	rm -rf "$out"
	timeout 600 "$bin/dptrain-run" -n "$2" -o "$out" "$cfg" "$bin/dptrain" "$cfg" \
		data.format=synthetic data.train.size=400000 data.eval=null train.epochs=0 \
		train.max_steps="$steps" train.log_every=$((steps / 6 > 0 ? steps / 6 : 1)) train.threads="$3" \
		checkpoint.resume=never checkpoint.every_epochs=0 >"$work/log" 2>&1 ||
		{ tail -5 "$work/log" >&2; echo 0; return; }
	$py - "$out/metrics.jsonl" <<'PY'
import json, statistics, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
print("%.1f" % statistics.median([e["img_per_s"] for e in ev if e.get("event") == "train"][1:]))
PY
}
torch_ips() { # MODEL RANKS THREADS
	timeout 600 $py "$top/contrib/bench/busy-ddp.py" --model "$1" --nproc "$2" --threads "$3" \
		--steps "$steps" | $py -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["img_s"])' ||
		echo 0
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
						ips=$("${tool}_ips" "$model" "$ranks" "$threads")
						unset OMP_WAIT_POLICY GOMP_SPINCOUNT
						echo "{\"tool\": \"$tool\", \"model\": \"$model\", \"ranks\": $ranks, \"threads\": $threads, \"load\": \"$load\", \"omp_wait_policy\": \"$policy\", \"img_s\": $ips, \"round\": $round, \"steps\": $steps, \"cpu\": \"$cpu\", \"cpus\": $(nproc), \"torch\": \"$torch\", \"date\": \"$(date -u +%F)\", \"commit\": \"$commit\"}" | tee -a "$work/all.jsonl"
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
    runs[(r["model"], r["ranks"], r["threads"], r["omp_wait_policy"], r["tool"], r["load"])].append(r["img_s"])
med = {k: statistics.median(v) for k, v in runs.items()}
print("| model | ranks x threads | OMP_WAIT_POLICY | tool | idle img/s | busy img/s | busy / idle |")
print("|---|---|---|---|--:|--:|--:|")
for k in sorted({k[:5] for k in med}):
    i, b = med.get(k + ("idle",), 0), med.get(k + ("busy",), 0)
    print("| %s | %dx%d | %s | %s | %.0f | %.0f | %.2f |" % (k[0], k[1], k[2], k[3], k[4], i, b, b / i if i else 0))
PY
