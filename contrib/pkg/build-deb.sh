#!/bin/sh
# build-deb.sh OUTDIR — make deb: the Debian packages of this checkout (debian/), built with
# dpkg-buildpackage from a copy of the files git knows (as they are in the working tree) in
# OUTDIR/src, so the build of the tree itself is not touched; then lintian on them (its
# remaining tags are justified in debian/*.lintian-overrides). The .deb files land in OUTDIR.
# Needs the build dependencies of debian/control (apt-get build-dep ./ installs them) and
# dpkg-dev, debhelper, lintian. DEB_CUDA_HOME=DIR in the environment: a CUDA build
# (debian/README.Debian).
set -eu
OUT=${1:?usage: build-deb.sh OUTDIR}
TOP=$(cd "$(dirname "$0")/../.." && pwd -P)
for c in dpkg-buildpackage dh lintian; do
	command -v $c >/dev/null 2>&1 ||
		{ echo "make deb: '$c' is missing (Debian: apt-get install dpkg-dev debhelper lintian)" >&2; exit 1; }
done
missing=$(cd "$TOP" && dpkg-checkbuilddeps 2>&1 | sed -n 's/.*Unmet build dependencies: //p')
[ -z "$missing" ] || { echo "make deb: missing build dependencies: $missing (apt-get build-dep ./)" >&2; exit 1; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd -P)
rm -rf "$OUT/src" && mkdir -p "$OUT/src"
rm -f "$OUT"/dptrain*.deb "$OUT"/dptrain*.changes "$OUT"/dptrain*.buildinfo
sh "$TOP/contrib/pkg/tree.sh" "$TOP" | tar -C "$OUT/src" -xf -
cd "$OUT/src"
# the parent make's jobserver and variables are not the package build's
echo "make deb: dpkg-buildpackage in $OUT/src (log: $OUT/build.log)"
if ! env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS -u DPTRAIN_BUILD_DIR -u DPTRAIN_SRC_DIR -u DPTRAIN_SAN \
	dpkg-buildpackage -us -uc -b -j"$(nproc)" >"$OUT/build.log" 2>&1; then
	tail -n 40 "$OUT/build.log" >&2
	echo "make deb: dpkg-buildpackage failed (log: $OUT/build.log)" >&2
	exit 1
fi
grep -E '^(dpkg-deb: building|dptrain.so exports|[0-9]+\.\.[0-9]+$)' "$OUT/build.log" || true
ls "$OUT"/dptrain*.deb
echo "make deb: lintian"
lintian --fail-on error,warning --info "$OUT"/dptrain_*.changes
