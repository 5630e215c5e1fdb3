#!/bin/bash
# resnet18-fmnist.sh — the convergence benchmark (too long for make check): ResNet-18 with
# the small stem on Fashion-MNIST with augmentation (random crop, padding 4, flip), single
# rank on the CPU, EPOCHS epochs (default 4) of contrib/examples/resnet18-fmnist.json with
# the cosine schedule stretched over them. Prints every eval line; target: >= 0.92 test
# accuracy. Run after `make`; writes into a temporary directory.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
epochs=${1:-4}
out=$(mktemp -d /tmp/dptrain-resnet18-fmnist.XXXXXX)
"${DPTRAIN_BUILD_DIR:-$top/build}/bin/dptrain" "$top/contrib/examples/resnet18-fmnist.json" \
	train.epochs="$epochs" train.log_every=100 output.dir="$out" | grep -E 'eval|done'
