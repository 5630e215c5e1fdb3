#!/bin/sh
# ddp-exposed.sh — exposed communication share of a data-parallel training step, dptrain vs
# PyTorch DDP, measured side by side in the same run: mlp and lenet with the per-rank batch of
# contrib/examples/<model>-fmnist.json, synthetic 1x28x28 data, 2 ranks x 1 thread.
#
#   exposed = (t_sync - t_nosync) / t_sync
#
# dptrain: t_sync is a step of `dptrain-run -n 2`; t_nosync a step of two single-rank dptrain
# processes running at the same time (the same compute and the same contention for the cores,
# no communication). Each is the median over the logged intervals after the first (log every
# 20 steps). dptrain also reports the time its step waited for communication itself
# (metrics.jsonl "comm_wait_ms", the exposed part measured from inside). PyTorch:
# contrib/bench/ddp-exposed.py (DDP sync vs model.no_sync(), gloo).
#
# Both at bucket_cap_mb 25 (PyTorch's default, and dptrain's) and at 1.
#
#   contrib/bench/ddp-exposed.sh [STEPS]      (default 400 per run; needs a build in build/)
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
bin="${DPTRAIN_BUILD_DIR:-$top/build}/bin"
steps=${1:-400}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# median step time in ms from a metrics file: batch * world / img_per_s per interval
step_ms() { # METRICS BATCH WORLD
	/usr/bin/python3 - "$@" <<'EOF'
import json, statistics, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
ips = [e["img_per_s"] for e in ev if e.get("event") == "train"][1:]
print("%.4f" % statistics.median(1e3 * int(sys.argv[2]) * int(sys.argv[3]) / x for x in ips))
EOF
}
wait_ms() { # METRICS
	/usr/bin/python3 - "$1" <<'EOF'
import json, statistics, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
print("%.4f" % statistics.median(e["comm_wait_ms"] for e in ev if e.get("event") == "train"))
EOF
}

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo
for cap in 25 1; do
echo
echo "$("$bin/dptrain" --version 2>/dev/null | head -n 1), 2 ranks x 1 thread, TCP ring on 127.0.0.1, bucket_cap_mb $cap, $steps steps"
echo "| model | batch/rank | step sync ms | step no-sync ms | exposed | comm wait ms (inside) |"
echo "|-------|-----------:|-------------:|----------------:|--------:|----------------------:|"
for model in mlp lenet; do
	cfg="$top/contrib/examples/$model-fmnist.json"
	batch=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["data"]["batch_size"])' "$cfg")
	set -- data.format=synthetic data.train.size=200000 data.eval=null train.epochs=0 \
		train.max_steps="$steps" train.log_every=20 train.threads=1 parallel.bucket_cap_mb=$cap \
		checkpoint.resume=never checkpoint.every_epochs=0
	"$bin/dptrain-run" -n 2 -o "$work/$model.$cap.sync" "$cfg" "$bin/dptrain" "$cfg" "$@" >/dev/null 2>&1
	"$bin/dptrain" "$cfg" "$@" output.dir="$work/$model.$cap.a" >/dev/null 2>&1 &
	a=$!
	"$bin/dptrain" "$cfg" "$@" output.dir="$work/$model.$cap.b" >/dev/null 2>&1
	wait $a
	ts=$(step_ms "$work/$model.$cap.sync/metrics.jsonl" "$batch" 2)
	tn=$(step_ms "$work/$model.$cap.a/metrics.jsonl" "$batch" 1)
	tw=$(wait_ms "$work/$model.$cap.sync/metrics.jsonl")
	awk -v m="$model" -v b="$batch" -v s="$ts" -v n="$tn" -v w="$tw" \
		'BEGIN { printf "| %s | %d | %.3f | %.3f | %.1f%% | %.3f |\n", m, b, s, n, 100 * (s - n) / s, w }'
done
echo
/usr/bin/python3 "$top/contrib/bench/ddp-exposed.py" --steps "$steps" --bucket-cap-mb $cap
done
