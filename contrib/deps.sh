#!/bin/bash
# deps.sh — install every Debian package dptrain needs to build and test (Debian 12).
# Idempotent: packages already present are left alone. Run as root (or through sudo).
set -euo pipefail

BUILD="gcc make pkg-config libjansson-dev zlib1g-dev libslurm-dev libpmix-dev libdnnl-dev libopenblas-dev
       clang libclang-rt-14-dev"
TEST="perl sharness slurm-wlm slurmctld slurmd slurm-client munge openmpi-bin libopenmpi-dev
      python3 python3-torch python3-torchvision python3-numpy libopenblas0-openmp dataset-fashion-mnist
      iproute2 procps psmisc util-linux man-db groff-base time"

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
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=900 update -q
$SUDO apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}"
