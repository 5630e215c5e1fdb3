#!/bin/sh
# gpu-deps.sh — makes DIR (default .gpudeps) hold the Debian packages a GPU machine without
# Debian's libraries lacks for contrib/bench/gpu-session.sh: jansson, libjpeg-turbo, libpng and
# zlib (runtime and headers), sharness and Fashion-MNIST for t/t1000-gpu.t. gpu-session.sh
# unpacks them into a private prefix there (never into /). Downloads with apt-get download
# (nothing is installed here); packages already in DIR are kept. Run from anywhere:
#
#   sh contrib/bench/gpu-deps.sh [DIR]      then carry DIR (device run's carry: [".gpudeps"])
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-$top/.gpudeps}
pkgs="libjansson4 libjansson-dev libjpeg62-turbo libjpeg62-turbo-dev libpng16-16 libpng-dev
zlib1g zlib1g-dev sharness dataset-fashion-mnist"

mkdir -p "$dir"
cd "$dir"
for p in $pkgs; do
	if ls "${p}"_*.deb >/dev/null 2>&1; then
		continue
	fi
	if ! apt-get download "$p" >/dev/null 2>apt.err; then
		echo "gpu-deps: apt-get download $p failed: $(tail -n 1 apt.err)" >&2
		echo "gpu-deps: run apt-get update first, or check that $p exists in this Debian" >&2
		rm -f apt.err
		exit 1
	fi
done
rm -f apt.err
echo "gpu-deps: $(ls ./*.deb | wc -l) packages, $(du -sh . | cut -f1) in $dir"
