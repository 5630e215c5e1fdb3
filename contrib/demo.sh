#!/bin/bash
# demo.sh — what `make demo` runs: install the packages, build, start a private single-host
# Slurm (contrib/localcluster), run jobs through srun --dptrain, show what the ranks got, train
# LeNet-5 on 4 ranks and show its accuracy, and stop the cluster. Everything it writes is under demo/.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
[ "$(id -u)" -eq 0 ] || { echo "demo: run as root (it installs packages and starts Slurm daemons)" >&2; exit 1; }

make deps
make -j"$(nproc)"

export DPTRAIN_BUILD_DIR="$top/build"
work="$top/demo"
cluster="$work/cluster"
mkdir -p "$work"
contrib/localcluster/cluster stop -d "$cluster" >/dev/null 2>&1 || true
contrib/localcluster/cluster start -d "$cluster" -c 8
trap '"$top/contrib/localcluster/cluster" stop -d "$cluster"' EXIT
. "$cluster/env.sh"
export PATH="$DPTRAIN_BUILD_DIR/bin:$PATH"
cd "$work"
config="$top/contrib/examples/mlp-fmnist.json"
lenet="$top/contrib/examples/lenet-fmnist.json"

echo
echo "== 4 ranks: srun -n4 --dptrain=mlp-fmnist.json dptrain-ranktable show \$DPTRAIN_RANK_TABLE"
timeout 120 srun -n4 --dptrain="$config" sh -c 'dptrain-ranktable show "$DPTRAIN_RANK_TABLE"'
step1=$(ls -dt dptrain.*.* | head -n 1)
echo
echo "   rank table:        $work/$step1/rank_table.json"
echo "   device directories: $(cd "$step1" && echo device*)  (env.log, train.log in each)"
echo "   rank 2 got:         $(grep -E '^(RANK|WORLD_SIZE|LOCAL_RANK|MASTER_ADDR|MASTER_PORT)=' "$step1/device2/env.log" | tr '\n' ' ')"

echo
echo "== training, 4 ranks data-parallel: srun -n4 --dptrain=lenet-fmnist.json dptrain"
timeout 1800 srun -n4 --dptrain="$lenet" dptrain train.log_every=200
step2=$(ls -dt dptrain.*.* | head -n 1)
acc=$(grep '"event":"eval"' "$step2/metrics.jsonl" | tail -n 1 | sed 's/.*"accuracy":\([0-9.]*\).*/\1/')
echo
echo "demo: final test accuracy $acc (4 ranks, LeNet-5, Fashion-MNIST)"
echo "demo: rank table $work/$step2/rank_table.json"
echo "      device directories $work/$step2/device0 .. device3 (env.log, train.log: each rank's own loss lines)"
echo "      metrics $work/$step2/metrics.jsonl, weights $work/$step2/model.safetensors"
