#!/bin/sh
# t0002-layers.t — the dependency rules of the tree (contrib/ci/check-layers): the allowed
# includes between components, private headers, where Slurm/PMIx/CUDA/oneDNN headers may be
# used, and no cycle between files or between the objects of this build.
py=/usr/bin/python3
test -x "$py" || py=python3
exec "$py" "${DPTRAIN_SRC_DIR:-.}/contrib/ci/check-layers" "${DPTRAIN_BUILD_DIR:-build}"
