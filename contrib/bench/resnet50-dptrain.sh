#!/bin/bash
# resnet50-dptrain.sh — dptrain's side of the GPU training benchmark, the peer of
# resnet50-torch.py: contrib/examples/resnet50-synthetic.json (ResNet-50, 3x224x224, 1000 classes) on its
# synthetic data, with PyTorch's step (SGD momentum 0.9, lr 0.01, no weight decay, no label
# smoothing, no lr schedule), one dptrain process per precision and batch. Writes only a
# temporary directory it removes; prints a markdown table and a JSON line.
#
#   contrib/bench/resnet50-dptrain.sh [--modes bf16,fp16,tf32,fp32] [--batch N | --max-batch N]
#       [--warmup N] [--steps N] [--log-every N] [--seconds S] [--device cuda|cpu] [--json]
#       [--images DIR [--workers N]]
#   contrib/bench/resnet50-dptrain.sh --smoke      (CPU, 3x32x32, batch 2: checks this script
#                                                   end to end, measures nothing)
#
# A run trains WARMUP + STEPS steps (default 20 + 50) and logs every LOG_EVERY (10) steps;
# img/s is the median over the logged intervals after the warm-up ones (metrics.jsonl's
# img_per_s; the first interval holds the cuDNN algorithm search and the first allocations),
# the step time batch / img/s. TFLOP/s assumes 24.5 GFLOP per training image, as
# resnet50-torch.py does. The peak GPU memory is dptrain's own count (the metrics' "end" event,
# peak_device_mib). The batch is the largest of MAX_BATCH (256), MAX_BATCH/2, ... that trains
# without running out of device memory (dptrain's message names "out of memory" or cudaMalloc),
# unless --batch fixes it. --images DIR: real JPEGs instead, contrib/examples/resnet50.json
# (torchvision's RandomResizedCrop + flip, decoded by dptrain's loader with --workers threads,
# default the host's cores less 2) on DIR/train/<class>/*.jpg (contrib/bench/make-images.py
# makes such a set); the rows are then "MODE jpeg", and data_wait_ms says how long each step
# waited for its batch. A mode dptrain refuses on the GPU ("not yet supported on the GPU") or
# warns it does not implement yet ("is not implemented yet") is listed as skipped with
# dptrain's reason. Each dptrain process is stopped after SECONDS
# (--seconds, else BENCH_SECONDS, else 300); the intervals it logged by then still count.
#
# Environment: DPTRAIN (the trainer; default DPTRAIN_BUILD_DIR/bin/dptrain, else build/bin,
# else dptrain on PATH), PYTHON (python3 with json and statistics; default python3), BENCH_SECONDS.
# The JSON has resnet50-torch.py --json's shape (benchmark, gflop_per_image, image, classes,
# env, results[] with mode, batch, status, img_per_s, step_ms_median, tflops, peak_mem_gib ...),
# so the two can be put side by side (contrib/bench/gpu-session.sh does).
# Exit status: 0 every mode ran or was skipped as unsupported, 1 a mode failed (its row says
# why), 2 usage error or no dptrain.
set -u -o pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
prog=resnet50-dptrain
config=$top/contrib/examples/resnet50-synthetic.json
GFLOP_PER_IMAGE=24.5

die() {
	echo "$prog: $*" >&2
	exit 2
}
usage() {
	sed -n '8,12p' "$0" | sed 's/^# \{0,1\}//'
	exit "${1:-2}"
}

modes=bf16,tf32,fp32
batch=0
max_batch=256
warmup=20
steps=50
log_every=10
seconds=${BENCH_SECONDS:-300}
device=cuda
json_only=0
smoke=0
images=
workers=$(($(nproc) - 2))
[ "$workers" -ge 1 ] || workers=1
while [ $# -gt 0 ]; do
	case $1 in
	--modes) modes=${2:-} && shift ;;
	--batch) batch=${2:-} && shift ;;
	--max-batch) max_batch=${2:-} && shift ;;
	--warmup) warmup=${2:-} && shift ;;
	--steps) steps=${2:-} && shift ;;
	--log-every) log_every=${2:-} && shift ;;
	--seconds) seconds=${2:-} && shift ;;
	--device) device=${2:-} && shift ;;
	--json) json_only=1 ;;
	--smoke) smoke=1 ;;
	--images) images=${2:-} && shift ;;
	--workers) workers=${2:-} && shift ;;
	-h | --help) usage 0 ;;
	*) echo "$prog: unknown argument '$1'" >&2 && usage ;;
	esac
	shift
done
if [ $smoke = 1 ]; then
	device=cpu batch=2 warmup=1 steps=3 log_every=1
	# 32x32 inputs: the convolutions' arithmetic scales with the pixels, 24.5 x (32/224)^2
	GFLOP_PER_IMAGE=0.5
	[ "$modes" = bf16,tf32,fp32 ] && modes=fp32
fi
for v in batch max_batch warmup steps log_every seconds; do
	case ${!v} in
	'' | *[!0-9]*) die "--${v//_/-} '${!v}' is not a whole number" ;;
	esac
done
[ "$steps" -ge 1 ] && [ "$log_every" -ge 1 ] && [ "$seconds" -ge 1 ] && [ "$max_batch" -ge 1 ] ||
	die "--steps, --log-every, --seconds and --max-batch must be at least 1"
case $device in cuda | cpu) ;; *) die "--device '$device': choose cuda or cpu" ;; esac
label=
if [ -n "$images" ]; then
	[ -d "$images/train" ] || die "--images $images: no $images/train (class folders of JPEGs)"
	[ "$workers" -ge 1 ] 2>/dev/null || die "--workers must be at least 1"
	config=$top/contrib/examples/resnet50.json
	label=" jpeg"
fi
IFS=, read -r -a mode_list <<<"$modes"
[ ${#mode_list[@]} -gt 0 ] || die "--modes is empty; choose from fp32,tf32,bf16,fp16"
for m in "${mode_list[@]}"; do
	case $m in fp32 | tf32 | bf16 | fp16) ;; *) die "--modes: unknown mode '$m'; choose from fp32,tf32,bf16,fp16" ;; esac
done

if [ -z "${DPTRAIN:-}" ]; then
	for d in "${DPTRAIN_BUILD_DIR:-}" "$top/build"; do
		[ -n "$d" ] && [ -x "$d/bin/dptrain" ] && DPTRAIN=$d/bin/dptrain && break
	done
	DPTRAIN=${DPTRAIN:-$(command -v dptrain)}
fi
[ -n "${DPTRAIN:-}" ] && [ -x "$DPTRAIN" ] ||
	die "no dptrain: build it (make) or set DPTRAIN or DPTRAIN_BUILD_DIR"
PYTHON=${PYTHON:-python3}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=/usr/bin/python3
"$PYTHON" -c 'import json, statistics' 2>/dev/null || die "no python3 ($PYTHON) to read metrics.jsonl"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Warm-up in whole log intervals, at least one.
warm_intervals=$(((warmup + log_every - 1) / log_every))
[ "$warm_intervals" -ge 1 ] || warm_intervals=1
total=$((warm_intervals * log_every + steps))

# What ran where, for the report's env.
if [ "$device" = cuda ]; then
	"$DPTRAIN" --devices >"$work/devices" 2>&1 ||
		echo "(dptrain --devices exited $?: no usable GPU)" >>"$work/devices"
	timeout 60 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
		>"$work/smi" 2>/dev/null || : >"$work/smi"
else
	: >"$work/devices"
	grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//' >"$work/smi"
fi
"$DPTRAIN" --version >"$work/version" 2>&1

# run MODE BATCH DIR: one dptrain process; its output in DIR.log, its status in $rc.
run() {
	local args=(device.kind="$device" precision.mode="$1" data.batch_size="$2"
		train.epochs=0 train.max_steps="$total" train.log_every="$log_every" data.eval=null
		output.dir="$3" output.metrics=true checkpoint.resume=never checkpoint.every_epochs=0
		checkpoint.every_steps=0 lr_schedule=null optimizer.lr=0.01 optimizer.weight_decay=0
		train.label_smoothing=0)
	[ $smoke = 1 ] && args+=("model.input_shape=[3,32,32]")
	[ -n "$images" ] && args+=(data.dir=null data.train.root="$images/train" data.workers="$workers"
		data.prefetch=$((workers + 2)))
	echo "\$ dptrain $(basename "$config") ${args[*]}" >"$3.log"
	# one tiny step first: a mode dptrain does not implement yet says so at once, and its
	# full run would only measure another mode
	timeout -k 10 120 "$DPTRAIN" "$config" "${args[@]}" "model.input_shape=[3,32,32]" \
		data.batch_size=2 train.max_steps=1 output.dir="$3.probe" >"$3.probe.log" 2>&1
	rm -rf "$3.probe"
	if grep -q 'is not implemented yet' "$3.probe.log"; then
		cat "$3.probe.log" >>"$3.log"
		rc=0
		return
	fi
	timeout -k 10 "$seconds" "$DPTRAIN" "$config" "${args[@]}" >>"$3.log" 2>&1
	rc=$?
}

# row MODE BATCH SEARCHED OUTCOME DIR: one results[] entry as JSON, in $work/row-MODE.json
row() {
	"$PYTHON" - "$@" "$warm_intervals" "$log_every" "$warmup" "$steps" "$seconds" "$device" \
		"$GFLOP_PER_IMAGE" "$label" >"$work/row-$1.json" <<-'PY'
	import json, os, re, statistics, sys
	mode, batch, searched, outcome, d = sys.argv[1:6]
	warm, log_every, warmup, steps, seconds = map(int, sys.argv[6:11])
	device, gflop, label = sys.argv[11], float(sys.argv[12]), sys.argv[13]
	batch = int(batch)
	r = {"mode": mode + label, "flags": {"precision.mode": mode, "device.kind": device},
	     "warmup": warm * log_every, "steps": steps, "log_every": log_every,
	     "batch": batch, "batch_found": searched == "1"}
	log = open(d + ".log", errors="replace").read() if os.path.exists(d + ".log") else ""
	said = [l for l in log.splitlines() if l.startswith("dptrain: ") and "warning" not in l]
	why = (said[-1] if said else (log.strip().splitlines() or ["no output"])[-1])[:300]
	ev = []
	if os.path.exists(d + "/metrics.jsonl"):
	    for l in open(d + "/metrics.jsonl"):
	        try:
	            ev.append(json.loads(l))
	        except ValueError:
	            pass  # a line cut short by the time box
	train = [e for e in ev if e.get("event") == "train"]
	timed = train[warm:]
	if outcome == "unsupported":
	    said = [l for l in log.splitlines() if "not implemented yet" in l or "not yet supported" in l]
	    r.update({"status": "skipped", "error": (said[0] if said else why)[:300]})
	elif outcome == "oom":
	    r.update({"status": "error", "error": "out of device memory at batch %d%s: %s"
	              % (batch, " (the smallest tried)" if searched == "1" else "", why)})
	elif outcome not in ("ok", "timeout") or not timed:
	    if outcome == "timeout":
	        why = "timed out after %d s, %d intervals logged, the first %d are warm-up" % (
	            seconds, len(train), warm)
	    elif outcome == "ok":
	        why = "%d intervals logged, the first %d are warm-up: none to time" % (
	            len(train), warm)
	    r.update({"status": "error", "error": why})
	else:
	    ips = [e["img_per_s"] for e in timed]
	    med = statistics.median(ips)
	    # dptrain's count of device memory at its peak (none on the CPU, nor for a run the
	    # time box stopped: it reports at the end)
	    end = [e for e in ev if e.get("event") == "end"]
	    mib = end[-1].get("peak_device_mib") if end else None
	    if mib is None:
	        m = re.findall(r"^dptrain: GPU memory peak (\d+) MiB", log, re.M)
	        mib = int(m[-1]) if m else None
	    if device != "cuda":
	        mib = None
	    r.update({"status": "ok", "intervals": len(timed),
	              "step_ms_median": round(batch * 1e3 / med, 3),
	              "step_ms_min": round(batch * 1e3 / max(ips), 3),
	              "step_ms_max": round(batch * 1e3 / min(ips), 3),
	              "img_per_s": round(med, 1), "tflops": round(med * gflop / 1e3, 2),
	              "final_loss": round(train[-1]["loss"], 4),
	              # the input pipeline: ms per step the trainer waited for a batch
	              "data_wait_ms": round(statistics.median(e.get("data_wait_ms", 0) for e in timed), 3),
	              "peak_mem_gib": None if mib is None else round(mib / 1024, 2)})
	    if outcome == "timeout":
	        r["note"] = "stopped after %d s; %d intervals after the warm-up" % (seconds, len(timed))
	print(json.dumps(r))
	PY
}

failed=0
for mode in "${mode_list[@]}"; do
	b=$batch searched=0
	if [ "$b" = 0 ]; then b=$max_batch searched=1; fi
	while :; do
		d=$work/$mode-$b
		run "$mode" "$b" "$d"
		# a mode dptrain does not implement yet trains in another: not this mode's number
		if grep -q 'is not implemented yet' "$d.log"; then
			outcome=unsupported
		elif [ $rc -eq 0 ]; then
			outcome=ok
		elif grep -qiE 'out of memory|cudaMalloc|ALLOC_FAILED' "$d.log"; then
			outcome=oom
			if [ $searched = 1 ] && [ "$b" -gt 1 ]; then
				echo "$prog: $mode: batch $b does not fit; trying $((b / 2))" >&2
				rm -rf "$d"
				b=$((b / 2))
				continue
			fi
		elif grep -q 'not yet supported on the GPU' "$d.log"; then
			outcome=unsupported
		elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
			outcome=timeout
		else
			outcome=error
		fi
		break
	done
	row "$mode" "$b" "$searched" "$outcome" "$d" || failed=1
	grep -q '"status": "error"' "$work/row-$mode.json" && failed=1
	[ "$outcome" = ok ] || sed 's/^/  | /' "$d.log" | tail -n 15 >&2
	rm -rf "$d" # checkpoints and weights of a ResNet-50: 300 MB per run
done

# The report: resnet50-torch.py's shape, then the table (unless --json) and the JSON line.
"$PYTHON" - "$work" "$device" "$GFLOP_PER_IMAGE" "$json_only" "$smoke" "$images" "$workers" \
	"${mode_list[@]}" <<-'PY' ||
import json, os, sys
work, device, gflop, json_only, smoke, images, workers = sys.argv[1:8]
gflop = float(gflop)
rd = lambda n: open(os.path.join(work, n), errors="replace").read().strip()
results = [json.load(open(os.path.join(work, "row-%s.json" % m))) for m in sys.argv[8:]]
env = {"dptrain": rd("version").replace("dptrain ", ""), "host_cpus": os.cpu_count()}
if device == "cuda":
    smi = rd("smi").splitlines()[0].split(", ") if rd("smi") else [""]
    dev = rd("devices").splitlines()
    env.update({"device": smi[0] or (dev[0] if dev else "unknown GPU"),
                "driver": smi[1] if len(smi) > 1 else None,
                "device_memory": smi[2] if len(smi) > 2 else None,
                "devices": rd("devices")[:400]})
else:
    env["device"] = "cpu (%s)" % (rd("smi") or "unknown")
image = [3, 32, 32] if smoke == "1" else [3, 224, 224]
report = {"benchmark": "resnet50-train", "implementation": "dptrain",
          "gflop_per_image": gflop, "image": image,
          "classes": 1000, "optimizer": "SGD momentum 0.9",
          "data": ("JPEGs in %s/train, decoded and augmented by %s loader threads "
                   "(contrib/examples/resnet50.json's transforms)" % (images, workers) if images
                   else "synthetic (contrib/examples/resnet50-synthetic.json), made on the host by the loader"),
          "env": env, "results": results}
if json_only == "1":
    print(json.dumps(report))
    sys.exit(0)
print("device: %s; dptrain %s" % (env["device"], env["dptrain"])
      + ("; driver %s" % env["driver"] if env.get("driver") else ""))
print("ResNet-50, %s, 1000 classes, SGD momentum, %s; TFLOP/s at %.1f "
      "GFLOP per training image%s" % ("x".join(map(str, report["image"])),
                                      report["data"] if images else "dptrain's synthetic data", gflop,
                                      " (smoke test: not a measurement)" if smoke == "1" else ""))
print()
print("| mode | batch | img/s | step ms (median) | TFLOP/s | peak GPU mem GiB | data wait ms/step |")
print("|------|------:|------:|-----------------:|--------:|-----------------:|------:|")
for x in results:
    if x["status"] != "ok":
        skipped = x["status"] == "skipped"
        print("| %s | %s | %s: %s | | | | |" % (x["mode"], "-" if skipped else x["batch"],
              "skipped" if skipped else "failed", x.get("error", "?").replace("|", "/")))
        continue
    mem = "n/a" if x["peak_mem_gib"] is None else "%.2f" % x["peak_mem_gib"]
    note = " (%s)" % x["note"] if x.get("note") else ""
    print("| %s%s | %d | %.1f | %.2f | %.2f | %s | %.3f |" % (x["mode"], note, x["batch"],
          x["img_per_s"], x["step_ms_median"], x["tflops"], mem, x["data_wait_ms"]))
print()
print(json.dumps(report))
PY
	failed=1
exit $failed
