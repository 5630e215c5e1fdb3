#!/bin/bash
# deps.sh — install every Debian package dptrain needs to build and test (Debian 12).
# Idempotent: packages already present are left alone. Run as root (or through sudo).
set -euo pipefail

# A bare Debian 12 (debootstrap --variant=minbase, a minimal container) has make only if the
# user installed it to run 'make deps': everything else the build and the tests call is here.
# contrib/ci/cleanroot.sh checks that on such a root.
BUILD="gcc libc6-dev binutils make pkg-config libjansson-dev zlib1g-dev libslurm-dev libpmix-dev
       libdnnl-dev libopenblas-dev clang libclang-rt-14-dev"
TEST="perl sharness slurm-wlm slurmctld slurmd slurm-client munge openmpi-bin libopenmpi-dev
      python3 python3-torch python3-torchvision python3-numpy libopenblas0-openmp dataset-fashion-mnist
      iproute2 procps psmisc util-linux man-db groff-base time"

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
	echo "deps: needs apt-get and dpkg (Debian 12); install by hand:" $BUILD $TEST >&2 # one line
	exit 1
fi

missing=()
for p in $BUILD $TEST; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' ||
		missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "deps: all packages present"
	exit 0
fi
echo "deps: installing ${missing[*]}"
SUDO=
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 || { echo "deps: run as root (no sudo here): make deps" >&2; exit 1; }
	SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=900 update -q
$SUDO apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}"
