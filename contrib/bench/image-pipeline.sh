#!/bin/bash
# image-pipeline.sh — the image pipeline beside torchvision (doc/performance.md, "Image
# pipeline: dptrain vs torchvision"): decode + RandomResizedCrop(224) + horizontal flip +
# ToTensor + Normalize of ImageNet-sized JPEGs, dptrain's loader (image-bench.c) against
# PyTorch's DataLoader(ImageFolder, num_workers=N) (image-torchvision.py), same files, same
# batches of 256, N = 1, 2, 4, ... up to nproc workers, the two tools alternating run by run
# (and which goes first alternating round by round) so that load from elsewhere hits both.
#
#   contrib/bench/image-pipeline.sh [DIR]
#
# DIR (else IMGBENCH_DIR, else /var/tmp/dptrain-imgbench) caches the image set: DIR/images,
# made once by make-images.py from the photographs of Debian's opencv-doc package (used where
# it is installed, else fetched with `apt-get download opencv-doc` and unpacked into
# DIR/opencv-doc with dpkg-deb -x: nothing is installed). Environment: O (build directory,
# default build; the script runs `make O=$O bench`), IMAGES (2000), QUALITY (JPEG quality, 90;
# another makes DIR/images-qQUALITY: 95 gives about ImageNet's bytes per file), ROUNDS (3), EPOCHS
# (timed epochs per run, 3; 1792 images each with drop_last), WORKERS ("1 2 ..." to override),
# NODCT (1: also dptrain with DCT scaling off; 0 skips it), PYTHON (/usr/bin/python3: Debian's
# torch, torchvision, PIL and numpy).
#
# Prints every run's line, then a markdown table per tool and worker count: best img/s of the
# rounds, that per worker, img per CPU-second (median; all the process's threads or all
# torch's processes), peak RSS (the largest of the rounds; torchvision: main + workers'
# VmHWM summed), dptrain/torchvision at the same N; and the cores 3,000 img/s (one H100's
# ResNet-50 training rate) needs at dptrain's and torchvision's rate per core.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-${IMGBENCH_DIR:-/var/tmp/dptrain-imgbench}}
O=${O:-build}
IMAGES=${IMAGES:-2000}
QUALITY=${QUALITY:-90}
ROUNDS=${ROUNDS:-3}
EPOCHS=${EPOCHS:-3}
NODCT=${NODCT:-1}
PYTHON=${PYTHON:-/usr/bin/python3}
prog=image-pipeline

die() {
	echo "$prog: $*" >&2
	exit 1
}

if [ -z "${WORKERS:-}" ]; then
	ncpu=$(nproc)
	WORKERS=""
	for ((n = 1; n < ncpu; n *= 2)); do WORKERS+="$n "; done
	WORKERS+=$ncpu
fi

"$PYTHON" -c 'import torch, torchvision, PIL, numpy' 2>/dev/null ||
	die "$PYTHON lacks torch/torchvision/PIL/numpy (Debian: python3-torchvision python3-pil python3-numpy)"

# The image set, made once.
mkdir -p "$dir"
set_name=images
[ "$QUALITY" = 90 ] || set_name=images-q$QUALITY
images=$dir/$set_name
if [ ! -f "$images.json" ] || [ "$("$PYTHON" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["count"], d["quality"])' "$images.json")" != "$IMAGES $QUALITY" ]; then
	src=/usr/share/doc/opencv-doc/examples
	if [ ! -f $src/data/baboon.jpg ]; then
		src=$dir/opencv-doc/usr/share/doc/opencv-doc/examples
		if [ ! -f "$src/data/baboon.jpg" ]; then
			echo "$prog: fetching Debian's opencv-doc (its sample photographs) into $dir" >&2
			(cd "$dir" && rm -f opencv-doc_*.deb && apt-get download opencv-doc >&2 &&
				dpkg-deb -x opencv-doc_*.deb opencv-doc && rm -f opencv-doc_*.deb) ||
				echo "$prog: no opencv-doc: synthetic content instead" >&2
		fi
	fi
	rm -rf "$images" "$images.json"
	"$PYTHON" "$top/contrib/bench/make-images.py" "$images" -n "$IMAGES" --quality "$QUALITY" \
		--sources "$src"
else
	echo "$prog: image set $images: $(cat "$images.json")"
fi

make -C "$top" O="$O" -j"$(nproc)" bench >/dev/null || die "make O=$O bench failed"
bench=$top/$O/bench/image-bench
[ -x "$bench" ] || die "$bench missing"

# Page cache warm for both: every file read once.
cat "$images"/*/* >/dev/null

results=$(mktemp)
trap 'rm -f "$results"' EXIT
run_tv() { "$PYTHON" "$top/contrib/bench/image-torchvision.py" "$images" -j "$1" -e "$EPOCHS"; }
run_dp() { "$bench" "$images" -j "$1" -e "$EPOCHS"; }
run_nodct() { "$bench" "$images" -j "$1" -e "$EPOCHS" --no-dct; }

echo "$prog: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= ROUNDS; r++)); do
	for n in $WORKERS; do
		if ((r % 2)); then order="tv dp"; else order="dp tv"; fi
		((NODCT)) && order+=" nodct"
		for t in $order; do
			line=$(run_"$t" "$n") || die "run $t -j $n failed"
			[ "$t" = nodct ] && line=${line/tool=dptrain/tool=dptrain-nodct}
			echo "round=$r $line" | tee -a "$results"
		done
	done
done
echo "$prog: load after $(cut -d' ' -f1-3 /proc/loadavg)"

"$PYTHON" - "$results" <<'EOF'
import statistics, sys
runs = []
for line in open(sys.argv[1]):
    d = dict(kv.split("=", 1) for kv in line.split())
    runs.append(d)
groups = {}
for d in runs:
    groups.setdefault((d["tool"], int(d["workers"])), []).append(d)
best = {}
print()
print("| tool | workers | img/s | img/s per worker | img per CPU-s | peak RSS MB | dptrain / torchvision |")
print("|---|---|---|---|---|---|---|")
order = {"torchvision": 0, "dptrain": 1, "dptrain-nodct": 2}
for (tool, n), ds in sorted(groups.items(), key=lambda k: (k[0][1], order.get(k[0][0], 9))):
    ips = max(float(d["img_s"]) for d in ds)
    cpu = statistics.median(float(d["img_per_cpu_s"]) for d in ds)
    rss = max(float(d["peak_rss_mb"]) for d in ds)
    best[tool, n] = ips
    tv = best.get(("torchvision", n))
    ratio = "%.2fx" % (ips / tv) if tv and tool != "torchvision" else ""
    name = {"dptrain-nodct": "dptrain, no DCT scaling"}.get(tool, tool)
    print("| %s | %d | %.0f | %.0f | %.0f | %.0f | %s |" % (name, n, ips, ips / n, cpu, rss, ratio))
print()
for tool in ("dptrain", "torchvision"):
    if (tool, 1) in best:
        print("%s: %.0f img/s on one worker core: 3,000 img/s needs %.1f cores" %
              (tool, best[tool, 1], 3000 / best[tool, 1]))
EOF
