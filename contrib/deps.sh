#!/bin/bash
# deps.sh — install every Debian package dptrain needs to build and test, on Debian 12
# (bookworm) and Debian 13 (trixie). Idempotent: packages already present are left alone.
# Run as root (or through sudo).
set -euo pipefail

# A bare Debian (debootstrap --variant=minbase, a minimal container) has make only if the user
# installed it to run 'make deps': everything else the build and the tests call is here.
# contrib/ci/cleanroot.sh checks that on such a root of each release.
BUILD="gcc libc6-dev binutils make pkg-config libjansson-dev zlib1g-dev libjpeg62-turbo-dev libpng-dev
       libslurm-dev libpmix-dev
       libdnnl-dev libopenblas-dev clang @CLANG_RT@"
TEST="perl sharness slurm-wlm slurmctld slurmd slurm-client munge openmpi-bin libopenmpi-dev
      python3 python3-torch python3-torchvision python3-numpy python3-pil python3-mpi4py libopenblas0-openmp
      python3-protobuf protobuf-compiler
      dataset-fashion-mnist
      iproute2 procps psmisc util-linux man-db groff-base time clang-format
      chromium"

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
	echo "deps: needs apt-get and dpkg (Debian 12 or 13); install by hand:" $BUILD $TEST >&2 # one line
	echo "deps: (@CLANG_RT@ is the libFuzzer runtime of the default clang; README.md names the packages of other distributions)" >&2
	exit 1
fi

installed() {
	dpkg-query -W -f='${Status}\n' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

# The one name that differs between releases: clang's runtime (libFuzzer, the sanitizers) comes
# with the default clang's version, libclang-rt-14-dev on Debian 12, libclang-rt-19-dev on 13.
# Asked of what clang depends on (installed, else in apt's index), else of the release.
clang_rt() {
	local v
	v=$({
		dpkg-query -W -f='${Depends}\n' clang 2>/dev/null || true
		apt-cache depends clang 2>/dev/null || true
	} | grep -oE '(^|[ ,])clang-[0-9]+' | head -n 1 | grep -oE '[0-9]+' || true)
	if [ -z "$v" ]; then
		case "$(. /etc/os-release 2>/dev/null && echo "${VERSION_ID:-}")" in
		12) v=14 ;;
		13) v=19 ;;
		esac
	fi
	[ -z "$v" ] || echo "libclang-rt-$v-dev"
}

SUDO=
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 || { echo "deps: run as root (no sudo here): make deps" >&2; exit 1; }
	SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
updated=0
update() {
	[ $updated = 1 ] && return 0
	$SUDO apt-get -o DPkg::Lock::Timeout=900 update -q
	updated=1
}

rt=$(clang_rt)
if [ -z "$rt" ]; then # a release this script does not know: ask apt's fresh index
	update
	rt=$(clang_rt)
	[ -n "$rt" ] || { echo "deps: cannot tell which clang this release has (apt-cache depends clang)" >&2; exit 1; }
fi

missing=()
for p in $BUILD $TEST; do
	[ "$p" = @CLANG_RT@ ] && p=$rt
	installed "$p" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "deps: all packages present"
	exit 0
fi
echo "deps: installing ${missing[*]}"
update
$SUDO apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}"
