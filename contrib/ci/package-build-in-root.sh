#!/bin/bash
# package-build-in-root.sh — run by contrib/ci/package-test.sh --build root in a clean root
# (cleanroot.sh --script), the checkout as the current directory: the build dependencies that
# debian/control names, then make deb; the packages go to /out (bind-mounted).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get -q update >/dev/null
apt-get -q -y --no-install-recommends install dpkg-dev debhelper lintian >/dev/null
apt-get -q -y --no-install-recommends build-dep ./ >/dev/null
make deb O=/tmp/build
cp /tmp/build/pkg/*.deb /out/
ls -l /out
