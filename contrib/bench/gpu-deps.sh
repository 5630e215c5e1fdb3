#!/bin/sh
# gpu-deps.sh — makes DIR (default .gpudeps) hold the Debian packages a GPU machine without
# Debian's libraries lacks for contrib/bench/gpu-session.sh: jansson, libjpeg-turbo, libpng and
# zlib (runtime and headers), sharness and Fashion-MNIST for t/t1000-gpu.t, and the photographs
# of the benchmark's JPEG set (photos/, from Debian's opencv-doc). gpu-session.sh
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
# The 28 photographs contrib/bench/make-images.py makes its JPEG set from (Debian's opencv-doc
# sample data, 4 MB of its 96): for the real-JPEG runs of gpu-session.sh.
if [ ! -d photos ]; then
	tmp=$(mktemp -d)
	if (cd "$tmp" && apt-get download opencv-doc >/dev/null 2>&1 && dpkg-deb -x opencv-doc_*.deb x); then
		ex=$tmp/x/usr/share/doc/opencv-doc/examples
		/usr/bin/python3 - "$top/contrib/bench/make-images.py" "$ex" photos.tmp <<-'PY'
		import importlib.util, os, shutil, sys
		spec = importlib.util.spec_from_file_location("mi", sys.argv[1])
		m = importlib.util.module_from_spec(spec)
		spec.loader.exec_module(m)
		for p in m.PHOTOS:
		    os.makedirs(os.path.join(sys.argv[3], os.path.dirname(p)), exist_ok=True)
		    shutil.copy(os.path.join(sys.argv[2], p), os.path.join(sys.argv[3], p))
		PY
		[ $? = 0 ] && mv photos.tmp photos
	else
		echo "gpu-deps: no opencv-doc: gpu-session.sh's JPEG runs will use synthetic content" >&2
	fi
	rm -rf "$tmp" photos.tmp
fi
echo "gpu-deps: $(ls ./*.deb | wc -l) packages$([ -d photos ] && echo ", $(find photos -type f | wc -l) photos"), $(du -sh . | cut -f1) in $dir"
