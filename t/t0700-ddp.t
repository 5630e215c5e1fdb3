#!/bin/sh
# t0700-ddp.t — data-parallel training is the same mathematics as one big batch: N ranks x
# batch b against 1 rank x N*b (losses and final weights), gradient accumulation, sharded
# evaluation, PyTorch DDP (gloo) from the same weights, BatchNorm's per-rank statistics, and
# what happens when a rank dies or stalls, the master is missing or its port is taken.
# Owns only its trash directory.

test_description='data-parallel training: equivalence, PyTorch DDP, failures'

. "$(dirname "$0")/sharness.sh"

if ! test_have_prereq LAUNCH || ! test -x "$DPTRAIN_BUILD_DIR/bin/dptrain-run"; then
	skip_all='dptrain-launch/dptrain-run not built'
	test_done
fi

MARK="T0700_MARK=$$.$(date +%s%N)"
export "$MARK"
ref="$DPTRAIN_SRC_DIR/t/reference"
fm=/usr/share/datasets/fashion-mnist

# Losses: metrics.jsonl "loss" (the global batch's) by global step, or a train.log's
# "loss is" figures in order (one rank's own).
losses_metrics() {
	grep '"event":"train"' "$1" | sed 's/.*"global_step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/'
}
losses_log() {
	sed -n 's/^epoch: [0-9]* step: [0-9]*, loss is \([^,]*\),.*/\1/p' "$1" | cat -n
}
# close A B RTOL: two "step value" lists agree step by step within a relative tolerance,
# and have the same steps (at least MIN of them).
close() {
	/usr/bin/python3 - "$1" "$2" "$3" "${4:-20}" <<-\EOF
	import sys
	a = [l.split() for l in open(sys.argv[1]) if l.strip()]
	b = [l.split() for l in open(sys.argv[2]) if l.strip()]
	rtol, need = float(sys.argv[3]), int(sys.argv[4])
	if [x[0] for x in a] != [x[0] for x in b] or len(a) < need:
	    sys.exit(f"steps differ or fewer than {need}: {len(a)} vs {len(b)}")
	worst = max(abs(float(x[1]) - float(y[1])) / max(abs(float(y[1])), 1e-12)
	            for x, y in zip(a, b))
	print(f"{len(a)} steps, worst relative difference {worst:.3g} (rtol {rtol:g})")
	sys.exit(worst > rtol)
	EOF
}
eval_of() { # the last eval's "correct count" from a metrics file
	grep '"event":"eval"' "$1" | tail -n 1 | sed 's/.*"correct":\([0-9]*\),"count":\([0-9]*\).*/\1 \2/'
}
free_port() {
	/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Small, fast, deterministic jobs: no augmentation, constant lr, every step logged.
cat >mlp.json <<EOF
{
  "seed": 3,
  "model": {"name": "mlp", "num_classes": 10, "input_shape": [1, 28, 28], "hidden": [128, 64]},
  "data": {"format": "idx", "dir": "$fm", "batch_size": 64, "drop_remainder": true,
           "transforms": {"normalize": {"mean": [0.286], "std": [0.353]}}},
  "optimizer": {"name": "momentum", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.0001},
  "train": {"epochs": 0, "max_steps": 25, "log_every": 1, "threads": 1}
}
EOF
sed -e 's/"mlp", "num_classes"/"lenet", "num_classes"/' -e 's/, "hidden": \[128, 64\]//' \
	-e 's/"max_steps": 25/"max_steps": 20/' mlp.json >lenet.json

test_expect_success FMNIST 'mlp: 1 rank x 64 (the reference run)' '
	dptrain mlp.json output.dir=m1 >m1.out 2>&1 &&
	losses_metrics m1/metrics.jsonl >m1.loss &&
	test $(wc -l <m1.loss) = 25
'

test_expect_success FMNIST 'mlp: 4 ranks x 16 = 1 rank x 64: losses and final weights' '
	dptrain-run -n 4 -o m4 mlp.json dptrain mlp.json data.batch_size=16 >m4.out 2>&1 &&
	cat m4.out &&
	grep "4 ranks, average of gradients" m4.out &&
	losses_metrics m4/metrics.jsonl >m4.loss &&
	close m4.loss m1.loss 1e-5 25 &&
	/usr/bin/python3 "$ref/st_compare.py" m4/model.safetensors m1/model.safetensors --rtol 1e-5
'

test_expect_success FMNIST 'the evaluation is sharded: every test image once, same result' '
	test "$(eval_of m4/metrics.jsonl | cut -d" " -f2)" = 10000 &&
	a=$(eval_of m4/metrics.jsonl | cut -d" " -f1) && b=$(eval_of m1/metrics.jsonl | cut -d" " -f1) &&
	echo "correct: 4 ranks $a, 1 rank $b" &&
	test $((a - b)) -le 3 && test $((b - a)) -le 3
'

test_expect_success FMNIST 'every rank logs its own loss in its train.log, rank 0 the global one' '
	for r in 0 1 2 3; do
		test $(losses_log m4/device$r/train.log | wc -l) = 25 || return 1
	done &&
	grep -q "global loss" m4/device0/train.log &&
	! grep -q "global loss" m4/device1/train.log &&
	! cmp -s m4/device1/train.log m4/device2/train.log
'

test_expect_success FMNIST 'mlp: 3 ranks x 16 with 2 accumulation micro-steps = 1 rank x 96' '
	dptrain mlp.json output.dir=a1 data.batch_size=96 >a1.out 2>&1 &&
	dptrain-run -n 3 -o a3 mlp.json dptrain mlp.json data.batch_size=16 \
		parallel.grad_accumulation_step=2 >a3.out 2>&1 &&
	losses_metrics a1/metrics.jsonl >a1.loss && losses_metrics a3/metrics.jsonl >a3.loss &&
	close a3.loss a1.loss 1e-5 25 &&
	/usr/bin/python3 "$ref/st_compare.py" a3/model.safetensors a1/model.safetensors --rtol 1e-5
'

test_expect_success FMNIST 'mlp: 1 rank, 4 micro-steps of 16 = one step of 64' '
	dptrain mlp.json output.dir=k4 data.batch_size=16 parallel.grad_accumulation_step=4 >k4.out 2>&1 &&
	losses_metrics k4/metrics.jsonl >k4.loss &&
	close k4.loss m1.loss 1e-5 25 &&
	/usr/bin/python3 "$ref/st_compare.py" k4/model.safetensors m1/model.safetensors --rtol 1e-5
'

test_expect_success FMNIST 'lenet: 2 ranks x 32 = 1 rank x 64, and sum instead of mean = 2x lr' '
	dptrain lenet.json output.dir=l1 >l1.out 2>&1 &&
	dptrain-run -n 2 -o l2 lenet.json dptrain lenet.json data.batch_size=32 >l2.out 2>&1 &&
	losses_metrics l1/metrics.jsonl >l1.loss && losses_metrics l2/metrics.jsonl >l2.loss &&
	close l2.loss l1.loss 1e-5 20 &&
	/usr/bin/python3 "$ref/st_compare.py" l2/model.safetensors l1/model.safetensors --rtol 1e-5 &&
	dptrain-run -n 2 -o ls lenet.json dptrain lenet.json data.batch_size=32 \
		parallel.gradients_mean=false optimizer.lr=0.025 optimizer.weight_decay=0.0002 >ls.out 2>&1 &&
	losses_metrics ls/metrics.jsonl >ls.loss &&
	close ls.loss l1.loss 1e-5 20
'

test_expect_success FMNIST 'buckets: all_reduce_fusion_config and tiny bucket_cap_mb give the same weights' '
	dptrain-run -n 2 -o f2 lenet.json dptrain lenet.json data.batch_size=32 \
		"parallel.all_reduce_fusion_config=[1,4,7]" >f2.out 2>&1 &&
	grep "4 gradient buckets" f2.out &&
	dptrain-run -n 2 -o b2 lenet.json dptrain lenet.json data.batch_size=32 \
		parallel.bucket_cap_mb=0.01 >b2.out 2>&1 &&
	/usr/bin/python3 "$ref/st_compare.py" f2/model.safetensors l2/model.safetensors --rtol 0 &&
	/usr/bin/python3 "$ref/st_compare.py" b2/model.safetensors l2/model.safetensors --rtol 0
'

test_expect_success FMNIST 'two runs of 2 ranks give bitwise the same weights' '
	dptrain-run -n 2 -o l2b lenet.json dptrain lenet.json data.batch_size=32 >l2b.out 2>&1 &&
	cmp l2/model.safetensors l2b/model.safetensors
'

test_expect_success FMNIST 'enable_parallel_optimizer (ZeRO-1): momentum and AdamW give bitwise the same weights' '
	dptrain-run -n 2 -o z2 lenet.json dptrain lenet.json data.batch_size=32 \
		parallel.enable_parallel_optimizer=true >z2.out 2>&1 &&
	grep "optimizer state sharded over 2 ranks" z2.out &&
	/usr/bin/python3 "$ref/st_compare.py" z2/model.safetensors l2/model.safetensors --rtol 0 &&
	dptrain-run -n 3 -o za mlp.json dptrain mlp.json data.batch_size=16 optimizer.name=adamw \
		optimizer.lr=0.001 optimizer.weight_decay=0.01 >za.out 2>&1 &&
	dptrain-run -n 3 -o zb mlp.json dptrain mlp.json data.batch_size=16 optimizer.name=adamw \
		optimizer.lr=0.001 optimizer.weight_decay=0.01 parallel.enable_parallel_optimizer=true >zb.out 2>&1 &&
	/usr/bin/python3 "$ref/st_compare.py" zb/model.safetensors za/model.safetensors --rtol 0
'

test_expect_success FMNIST 'enable_parallel_optimizer with LAMB: per-tensor norms over the shards' '
	dptrain-run -n 3 -o la mlp.json dptrain mlp.json data.batch_size=16 optimizer.name=lamb \
		optimizer.lr=0.01 >la.out 2>&1 &&
	dptrain-run -n 3 -o lb mlp.json dptrain mlp.json data.batch_size=16 optimizer.name=lamb \
		optimizer.lr=0.01 parallel.enable_parallel_optimizer=true >lb.out 2>&1 &&
	/usr/bin/python3 "$ref/st_compare.py" lb/model.safetensors la/model.safetensors --rtol 1e-5 &&
	test_must_fail /usr/bin/python3 "$ref/st_compare.py" lb/model.safetensors m4/model.safetensors --rtol 1e-2
'

# PyTorch DDP (gloo, env://, Debian's python3-torch) from the same weights and data order.
torch_losses() { # DIR RANK: "step loss" lines of a ddp_torch.py run
	/usr/bin/python3 -c 'import json,sys
for l in open(sys.argv[1]):
    d = json.loads(l); print(d["step"], repr(d["loss"]))' "$1/losses.rank$2.jsonl"
}
vs_torch() { # NAME CONFIG RANKS STEPS LOSS_RTOL WEIGHT_RTOL [OVERRIDES...]
	_n=$1 _c=$2 _w=$3 _s=$4 _lt=$5 _wt=$6 && shift 6 &&
	/usr/bin/python3 "$ref/ddp_torch.py" --save-init $_n.init.safetensors --config $_c &&
	dptrain-run -n $_w -o $_n.dp $_c dptrain $_c "model.init=$PWD/$_n.init.safetensors" \
		train.max_steps=$_s "$@" >$_n.dp.out 2>&1 &&
	dptrain --check $_c "$@" >$_n.resolved.json &&
	/usr/bin/python3 "$ref/ddp_torch.py" --nproc $_w --config $_n.resolved.json \
		--init $_n.init.safetensors --steps $_s --out $_n.torch >$_n.torch.out 2>&1 &&
	_r=0 && while [ $_r -lt $_w ]; do
		torch_losses $_n.torch $_r >$_n.t$_r &&
		losses_log $_n.dp/device$_r/train.log >$_n.d$_r &&
		echo "rank $_r:" && close $_n.d$_r $_n.t$_r $_lt $_s || return 1
		_r=$((_r + 1))
	done &&
	/usr/bin/python3 "$ref/st_compare.py" $_n.dp/model.safetensors $_n.torch/model.safetensors --rtol $_wt
}

test_expect_success FMNIST,TORCH 'mlp: 2 ranks of dptrain = 2 ranks of PyTorch DDP, 20 steps' '
	vs_torch mt mlp.json 2 20 1e-5 1e-5 data.batch_size=32
'

test_expect_success FMNIST,TORCH 'lenet with AdamW and label smoothing: 2 ranks = PyTorch DDP, 20 steps' '
	vs_torch lt lenet.json 2 20 1e-5 1e-5 data.batch_size=32 optimizer.name=adamw \
		optimizer.lr=0.002 optimizer.weight_decay=0.01 train.label_smoothing=0.1
'

# BatchNorm: each rank normalises with its own batch's statistics, rank 0's running statistics
# are everyone's (DDP's broadcast_buffers): the same per-rank losses and the same final weights
# and running statistics as PyTorch DDP -- and not those of one big batch. A ResNet with BN at
# batch 16 amplifies float32 rounding quickly (two correct float32 runs, dptrain's or
# PyTorch's on one rank, drift apart by 1e-3 in 10 steps), so this compares 4 steps, where
# the two semantics differ a thousand times more than the two implementations.
cat >resnet.json <<EOF
{
  "seed": 5,
  "model": {"name": "resnet18", "num_classes": 10, "input_shape": [1, 28, 28], "stem": "small"},
  "data": {"format": "idx", "dir": "$fm", "batch_size": 16, "drop_remainder": true,
           "transforms": {"normalize": {"mean": [0.286], "std": [0.353]}}},
  "optimizer": {"name": "momentum", "lr": 0.002, "momentum": 0.9},
  "train": {"epochs": 0, "max_steps": 4, "log_every": 1, "threads": 1}
}
EOF
test_expect_success FMNIST,TORCH 'resnet18 (BatchNorm): 2 ranks = PyTorch DDP per rank, buffers from rank 0' '
	vs_torch rt resnet.json 2 4 1e-4 1e-3 data.eval=null
'

test_expect_success FMNIST,TORCH 'resnet18 (BatchNorm): 2 ranks x 16 is not 1 rank x 32 (per-rank statistics)' '
	dptrain resnet.json "model.init=$PWD/rt.init.safetensors" data.eval=null data.batch_size=32 \
		output.dir=rbig >rbig.out 2>&1 &&
	test_expect_code 1 /usr/bin/python3 "$ref/st_compare.py" rbig/model.safetensors \
		rt.torch/model.safetensors --rtol 1e-2
'

# The example job on 4 local ranks without Slurm reaches the single-process target (t0900);
# under the sanitizers fewer steps and a lower bar.
if test "$DPTRAIN_SAN" = 1; then
	lenet_args="train.epochs=0 train.max_steps=150" lenet_min=0.65
else
	lenet_args="" lenet_min=0.87
fi
test_expect_success FMNIST "dptrain-run -n 4 lenet-fmnist.json reaches $lenet_min test accuracy" '
	dptrain-run -n 4 -o e4 "$DPTRAIN_SRC_DIR/contrib/examples/lenet-fmnist.json" dptrain \
		"$DPTRAIN_SRC_DIR/contrib/examples/lenet-fmnist.json" train.log_every=200 $lenet_args >e4.out 2>&1 &&
	cat e4.out &&
	acc=$(grep "\"event\":\"eval\"" e4/metrics.jsonl | tail -n 1 | sed "s/.*\"accuracy\":\([0-9.]*\).*/\1/") &&
	echo "accuracy $acc" &&
	awk -v a="$acc" -v b="$lenet_min" "BEGIN { exit !(a + 0 >= b + 0) }"
'

# Failures, with ranks started by hand as torchrun-style processes (RANK, WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT): the trainer itself must notice, name the rank and exit, without
# a launcher stopping it. Every wait has a deadline; nothing is left running.
long=$(cat <<EOF
train.epochs=0 train.max_steps=1000000 train.log_every=1 data.eval=null timeouts.collective_s=4 timeouts.rendezvous_s=20
EOF
)
start_rank() { # RANK WORLD PORT [OVERRIDES...]
	_r=$1 _w=$2 _p=$3
	shift 3
	rm -rf fail.$_r fail.$_r.out fail.$_r.err
	RANK=$_r WORLD_SIZE=$_w MASTER_ADDR=127.0.0.1 MASTER_PORT=$_p DPTRAIN_OUTPUT_DIR=$PWD/fail.$_r \
		dptrain mlp.json $long "$@" >fail.$_r.out 2>fail.$_r.err &
	eval "pid$_r=\$!"
}
# wait_exit PID SECONDS: its exit status, or 124 after killing it at the deadline
wait_exit() {
	_i=0
	while kill -0 $1 2>/dev/null && [ $_i -lt $(($2 * 10)) ]; do sleep 0.1; _i=$((_i + 1)); done
	if kill -0 $1 2>/dev/null; then kill -9 $1; wait $1; return 124; fi
	wait $1
}
# until_logged FILE: wait (up to 60 s) until a rank has trained a few steps
logged() {
	_n=$(grep -c "loss is" "$1" 2>/dev/null) || :
	[ "${_n:-0}" -ge 3 ]
}
until_logged() {
	_i=0
	while ! logged "$1" && [ $_i -lt 600 ]; do sleep 0.1; _i=$((_i + 1)); done
	logged "$1"
}
# kill_ranks: whatever start_rank started is gone when a test ends, passed or not
kill_ranks() {
	for _p in $pid0 $pid1 $pid2; do kill -CONT $_p 2>/dev/null; kill -9 $_p 2>/dev/null; done
	wait 2>/dev/null
	pid0= pid1= pid2=
}

test_expect_success FMNIST 'a rank killed mid-training: the others exit 3 within seconds, naming it' '
	test_when_finished kill_ranks &&
	port=$(free_port) &&
	start_rank 0 3 $port && start_rank 1 3 $port && start_rank 2 3 $port &&
	until_logged fail.2.out &&
	t0=$(date +%s) && kill -9 $pid2 &&
	{ wait_exit $pid0 30; s0=$?; } && { wait_exit $pid1 30; s1=$?; } &&
	{ wait $pid2; s2=$?; } &&
	echo "exit: rank 0 $s0, rank 1 $s1, rank 2 $s2 after $(( $(date +%s) - t0 )) s" &&
	cat fail.0.err fail.1.err &&
	test $s0 = 3 && test $s1 = 3 && test $s2 = 137 &&
	grep "^dptrain: rank 0: .*rank 2 .*died" fail.0.err &&
	grep "^dptrain: rank 1: .*rank 2 .*died" fail.1.err
'

test_expect_success FMNIST 'a stalled rank (SIGSTOP): the others exit 3 after timeouts.collective_s, naming it' '
	test_when_finished kill_ranks &&
	port=$(free_port) &&
	start_rank 0 3 $port && start_rank 1 3 $port && start_rank 2 3 $port &&
	until_logged fail.1.out &&
	kill -STOP $pid1 &&
	{ wait_exit $pid0 40; s0=$?; } && { wait_exit $pid2 40; s2=$?; } &&
	kill -9 $pid1 && kill -CONT $pid1 && { wait $pid1 || :; } &&
	echo "exit: rank 0 $s0, rank 2 $s2" && cat fail.0.err fail.2.err &&
	test $s0 = 3 && test $s2 = 3 &&
	grep "^dptrain: rank 0: .*rank 1" fail.0.err &&
	grep "^dptrain: rank 2: .*rank 1" fail.2.err
'

test_expect_success FMNIST 'a rank that stops with an error (its loss diverged) tells the others why' '
	test_when_finished kill_ranks &&
	port=$(free_port) &&
	start_rank 0 2 $port && start_rank 1 2 $port optimizer.lr=1e30 &&
	{ wait_exit $pid0 30; s0=$?; } && { wait_exit $pid1 30; s1=$?; } &&
	cat fail.0.err fail.1.err &&
	test $s0 = 3 && test $s1 = 3 &&
	grep "^dptrain: rank 1: loss is nan" fail.1.err &&
	grep "^dptrain: rank 0: .*rank 1" fail.0.err
'

test_expect_success FMNIST 'a rank that never arrives: the rendezvous names it after timeouts.rendezvous_s' '
	test_when_finished kill_ranks &&
	port=$(free_port) &&
	start_rank 0 3 $port timeouts.rendezvous_s=2 && start_rank 1 3 $port timeouts.rendezvous_s=2 &&
	{ wait_exit $pid0 30; s0=$?; } && { wait_exit $pid1 30; s1=$?; } &&
	cat fail.0.err fail.1.err &&
	test $s0 = 3 && test $s1 = 3 &&
	grep "^dptrain: rank 0: .*rank 2" fail.0.err &&
	test_must_fail grep "rank 1 " fail.0.err
'

test_expect_success FMNIST 'the master port already in use: a clear error from rank 0' '
	test_when_finished kill_ranks &&
	port=$(free_port) &&
	{ /usr/bin/python3 -c "import socket,sys,time; s=socket.socket(); s.bind((\"0.0.0.0\", int(sys.argv[1]))); s.listen(); print(1, flush=True); time.sleep(30)" $port >holder.out & } &&
	holder=$! && until test -s holder.out; do sleep 0.1; done &&
	start_rank 0 2 $port timeouts.rendezvous_s=2 &&
	{ wait_exit $pid0 30; s0=$?; } && kill $holder && { wait $holder || :; } &&
	cat fail.0.err && test $s0 = 3 &&
	grep "^dptrain: rank 0: .*$port.*in use" fail.0.err
'

test_expect_success FMNIST 'no master: rank 1 says it cannot reach MASTER_ADDR:MASTER_PORT' '
	test_when_finished kill_ranks &&
	port=$(free_port) &&
	start_rank 1 2 $port timeouts.rendezvous_s=1 &&
	{ wait_exit $pid1 30; s1=$?; } &&
	cat fail.1.err && test $s1 = 3 &&
	grep "^dptrain: rank 1: .*127.0.0.1:$port" fail.1.err
'

test_expect_success 'WORLD_SIZE > 1 without MASTER_ADDR: a clear error, not a hang' '
	RANK=0 WORLD_SIZE=2 test_expect_code 3 dptrain mlp.json >out 2>err &&
	grep "MASTER_ADDR/MASTER_PORT" err
'

test_expect_success 'nothing left running' '
	for p in $(grep -lzxF "$MARK" /proc/[0-9]*/environ 2>/dev/null | sed "s|/proc/\([0-9]*\)/environ|\1|"); do
		[ "$(cat /proc/$p/comm 2>/dev/null)" = dptrain ] && { echo "left: $p"; return 1; }
	done; :
'

test_done
