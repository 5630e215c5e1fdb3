#!/bin/bash
# package-test.sh — the Debian packages as a site admin meets them (issue 36): built with
# 'make deb', then installed in a fresh root of the same Debian release that has no compiler and
# no build dependency (contrib/ci/package-in-root.sh says what is checked there: only runtime
# libraries pulled, the plugin not enabled until 'dptrain-plugstack enable', then srun --dptrain
# and the bundled trainer on a local Slurm, remove and purge).
#
# usage: contrib/ci/package-test.sh [--debian 12|13] [--build host|root] [--debs DIR]
#   --debian N    the release of the roots (default: this machine's, else 12)
#   --build host  'make deb' on this machine (the default where it runs release N and has the
#                 build dependencies: what CI does on Debian 12)
#   --build root  'make deb' in a clean root of release N first (apt-get build-dep ./)
#   --debs DIR    where the .deb files go (default build/pkg-debN)
# Roots, caches and mirrors as in contrib/ci/cleanroot.sh, which builds them.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd -P)
HOST_VERSION=$(. /etc/os-release 2>/dev/null && echo "${VERSION_ID:-}")
DEBIAN=
BUILD=
DEBS=
die() {
	echo "package-test: $*" >&2
	exit 1
}
while [ $# -gt 0 ]; do
	case "$1" in
	--debian) DEBIAN=${2:?}; shift ;;
	--build) BUILD=${2:?}; shift ;;
	--debs) DEBS=${2:?}; shift ;;
	-h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
	*) die "unknown argument '$1' (see: $0 --help)" ;;
	esac
	shift
done
[ -n "$DEBIAN" ] || DEBIAN=${HOST_VERSION:-12}
case "$DEBIAN" in 12 | 13) ;; *) die "--debian $DEBIAN: 12 or 13" ;; esac
if [ -z "$BUILD" ]; then
	BUILD=root
	if [ "$HOST_VERSION" = "$DEBIAN" ] && command -v dpkg-checkbuilddeps >/dev/null 2>&1; then
		# what debian/control needs beyond the packaging tools, which are installed below
		# (dpkg-checkbuilddeps exits 1 when anything is unmet: under pipefail and set -e
		# that ended this script, silently, on a machine with dpkg-dev but not debhelper)
		missing=$(cd "$TOP" && { dpkg-checkbuilddeps 2>&1 || true; } |
			sed -n 's/.*Unmet build dependencies: //p' |
			sed -E 's/debhelper-compat \([^)]*\)//')
		[ -n "${missing// /}" ] || BUILD=host
	fi
fi
# The packaging tools on this machine (not in 'make deps': only the package build needs them).
if [ "$BUILD" = host ] && ! { command -v dh && command -v lintian && command -v dpkg-buildpackage; } >/dev/null 2>&1; then
	echo "package-test: installing dpkg-dev debhelper lintian on this machine (make deb needs them)"
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -q \
		--no-install-recommends dpkg-dev debhelper lintian >/dev/null ||
		die "could not install dpkg-dev debhelper lintian"
fi
DEBS=${DEBS:-$TOP/build/pkg-deb$DEBIAN}
mkdir -p "$DEBS"
DEBS=$(cd "$DEBS" && pwd -P)
T0=$SECONDS
case "$BUILD" in
host)
	echo "package-test: make deb on this machine (Debian $HOST_VERSION) into $DEBS"
	sh "$TOP/contrib/pkg/build-deb.sh" "$DEBS"
	;;
root)
	echo "package-test: make deb in a clean Debian $DEBIAN root into $DEBS"
	rm -f "$DEBS"/*.deb
	"$TOP/contrib/ci/cleanroot.sh" --debian "$DEBIAN" --script contrib/ci/package-build-in-root.sh \
		--bind "$DEBS:/out"
	;;
*) die "--build $BUILD: host or root" ;;
esac
ls "$DEBS"/dptrain-slurm-plugin_*.deb "$DEBS"/dptrain-launcher_*.deb "$DEBS"/dptrain-trainer_*.deb >/dev/null ||
	die "no packages in $DEBS"
echo "package-test: packages built in $((SECONDS - T0)) s; installing them in a clean Debian $DEBIAN root"
"$TOP/contrib/ci/cleanroot.sh" --debian "$DEBIAN" --script contrib/ci/package-in-root.sh \
	--bind "$DEBS:/debs"
echo "package-test: Debian $DEBIAN: passed in $((SECONDS - T0)) s"
