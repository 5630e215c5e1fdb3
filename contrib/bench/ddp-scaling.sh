#!/bin/sh
# ddp-scaling.sh — training throughput on 1, 2 and 4 local ranks, dptrain vs PyTorch DDP (gloo)
# in the same run: mlp and lenet with the per-rank batch of contrib/examples/<model>-fmnist.json,
# synthetic 1x28x28 data, the machine's cores shared among the ranks (threads per rank =
# cores / ranks, at least 1). Total img/s over all ranks; dptrain's is the median over the
# logged intervals after the first, PyTorch's is batch x ranks / median synchronous step
# (contrib/bench/ddp-exposed.py).
#
#   contrib/bench/ddp-scaling.sh [STEPS]      (default 400; needs a build in build/)
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
bin="${DPTRAIN_BUILD_DIR:-$top/build}/bin"
steps=${1:-400}
cores=$(nproc)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

median_ips() { # METRICS
	/usr/bin/python3 - "$1" <<'PY'
import json, statistics, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
print("%.0f" % statistics.median([e["img_per_s"] for e in ev if e.get("event") == "train"][1:]))
PY
}
torch_ips() { # MODEL RANKS THREADS BATCH
	/usr/bin/python3 "$top/contrib/bench/ddp-exposed.py" --models "$1" --nproc "$2" \
		--threads "$3" --steps "$steps" --json >"$work/torch.json"
	/usr/bin/python3 - "$work/torch.json" "$1" "$2" "$4" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["models"][sys.argv[2]]
print("%.0f" % (int(sys.argv[4]) * int(sys.argv[3]) * 1e3 / r["t_sync_ms"]))
PY
}

echo "machine: $cores CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); $steps steps per run"
echo "| model | ranks | threads/rank | dptrain img/s | PyTorch DDP img/s | dptrain / PyTorch |"
echo "|-------|------:|-------------:|--------------:|------------------:|------------------:|"
for model in mlp lenet; do
	cfg="$top/contrib/examples/$model-fmnist.json"
	batch=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["data"]["batch_size"])' "$cfg")
	for n in 1 2 4; do
		t=$((cores / n)); [ "$t" -ge 1 ] || t=1
		"$bin/dptrain-run" -n "$n" -o "$work/$model.$n" "$cfg" "$bin/dptrain" "$cfg" \
			data.format=synthetic data.train.size=400000 data.eval=null train.epochs=0 \
			train.max_steps="$steps" train.log_every=20 train.threads="$t" \
			checkpoint.resume=never checkpoint.every_epochs=0 >/dev/null 2>&1
		d=$(median_ips "$work/$model.$n/metrics.jsonl")
		p=$(torch_ips "$model" "$n" "$t" "$batch")
		awk -v m="$model" -v n="$n" -v t="$t" -v d="$d" -v p="$p" \
			'BEGIN { printf "| %s | %d | %d | %d | %d | %.2fx |\n", m, n, t, d, p, d / p }'
	done
done
