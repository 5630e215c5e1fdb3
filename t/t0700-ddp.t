#!/bin/sh
# t0700-ddp.t — data-parallel training is the same mathematics as one big batch: N ranks x
# batch b against 1 rank x N*b (losses and final weights), gradient accumulation, sharded
# evaluation, PyTorch DDP (gloo) from the same weights, BatchNorm's per-rank statistics, and
# what happens when a rank dies or stalls, the master is missing or its port is taken.
# Owns only its trash directory. Nothing here depends on the machine's speed or load: see
# "Tolerances" for the numbers and "Failures" for the timeouts.

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

# Tolerances. N ranks x b and 1 rank x N*b compute the same gradient as different float32
# sums: each rank sums its own samples and the ring adds the ranks' sums, where one rank sums
# all N*b in one GEMM, blocked as the CPU's kernels (ONEDNN_MAX_CPU_ISA) choose. Reassociation
# moves a sum by a few ulps, and through the smooth parts of a network such differences stay
# at the losses' ulps (~1e-7 over these 20-25 steps). But a ReLU or max-pool decision that
# sits within an ulp of its kink can go the other way, which moves the gradient by one
# sample's share at once: lenet's losses then differ by ~4e-5 and its weights by ~5e-3 after
# 20 steps. Which runs take which side depends on the kernels, so a fixed rtol near the ulps
# fails on some CPUs (1e-5 did with AVX2), and one loose enough for that everywhere would hide
# real mistakes. So each comparison is judged against the spread between equally valid orders
# of the same sum on this machine: the 1-rank big batch against the same job as accumulation
# micro-steps (the same samples, summed in other orders) and under each ONEDNN_MAX_CPU_ISA
# level (other kernels, other blocking), whatever level the test itself runs at. rtol =
# 4 x max(spread, 16 float32 ulps): a third valid order lies within twice the spread of the
# others (the triangle inequality), and twice again since the spread is estimated from a few
# runs. Where the references agree to the ulps (mlp here) that still catches an lr off by 0.02%
# or twice the weight decay (losses off by 5e-3); where they flip (lenet here) only coarser
# mistakes (an unaveraged gradient, other samples), hence the exact comparison below.
#
# Where the sums can be made order-identical the comparison is exact. With batch_size 1 a
# 2-rank step holds the same two samples, one per rank, as a 1-rank step of 2 micro-steps;
# the 2-rank allreduce is one addition per element (commutative: the same on both ranks) and
# the mean a division by 2, exact, while the accumulation adds the second micro-step's
# gradient to the first once (beta = 1) after scaling each by 1/2 through the loss, exact
# too: the two runs agree bit for bit. So does the sum of gradients with half the lr and
# twice the weight decay against the mean: every difference is a factor of 2.
ulps16=9.5367431640625e-07 # 16 float32 ulps, 16 x 2^-24

# orders RUN REF OTHER...: RUN (several ranks) is the same mathematics as REF (1 rank, one big
# batch): its per-step losses and final weights (st_compare.py's measure) are within 4 x the
# worst difference among REF and the OTHERs (REF's job as accumulation micro-steps), or
# within 4 x 16 float32 ulps where that is smaller. NAME means NAME.loss and NAME/model.safetensors.
orders() {
	/usr/bin/python3 - "$ref" "$ulps16" "$@" <<-\EOF
	import itertools, math, sys
	import numpy as np
	sys.path.insert(0, sys.argv[1])
	from st_compare import load
	floor, run, refs = float(sys.argv[2]), sys.argv[3], sys.argv[4:]
	def steps(n):
	    return [l.split() for l in open(n + ".loss") if l.strip()]
	def dl(a, b):
	    x, y = steps(a), steps(b)
	    if [s[0] for s in x] != [s[0] for s in y] or not x:
	        sys.exit(f"{a} and {b} logged different steps")
	    return max(abs(float(p[1]) - float(q[1])) / max(abs(float(q[1])), 1e-12)
	               for p, q in zip(x, y))
	def dw(a, b):
	    x, y = load(a + "/model.safetensors"), load(b + "/model.safetensors")
	    if sorted(x) != sorted(y):
	        sys.exit(f"{a} and {b} hold different tensors")
	    total = math.sqrt(sum(float(np.sum(v[1] ** 2)) for v in y.values()))
	    nel = sum(v[1].size for v in y.values())
	    return max(float(np.linalg.norm(x[k][1] - y[k][1]))
	               / max(float(np.linalg.norm(y[k][1])), total * math.sqrt(y[k][1].size / nel), 1e-30)
	               for k in y)
	pairs = list(itertools.combinations(refs, 2))
	sl = max(dl(a, b) for a, b in pairs) if pairs else 0.0
	sw = max(dw(a, b) for a, b in pairs) if pairs else 0.0
	tl, tw = 4 * max(sl, floor), 4 * max(sw, floor)
	l, w = dl(run, refs[0]), dw(run, refs[0])
	print(f"{run} vs {refs[0]}: losses {l:.3g} (rtol {tl:.3g}), weights {w:.3g} (rtol {tw:.3g});"
	      f" spread of {', '.join(refs)}: losses {sl:.3g}, weights {sw:.3g}")
	sys.exit(l > tl or w > tw)
	EOF
}
# isa_refs NAME CONFIG [OVERRIDES...]: NAME's 1-rank job again under each ONEDNN_MAX_CPU_ISA
# level, as NAME.SSE41, NAME.AVX2 and NAME.AVX512_CORE (a level the CPU lacks runs as the
# highest it has; elsewhere than x86 they are the same run thrice)
isa_refs() {
	_n=$1 _c=$2 && shift 2 &&
	for _i in SSE41 AVX2 AVX512_CORE; do
		ONEDNN_MAX_CPU_ISA=$_i dptrain $_c output.dir=$_n.$_i "$@" >$_n.$_i.out 2>&1 &&
		losses_metrics $_n.$_i/metrics.jsonl >$_n.$_i.loss || return 1
	done
}
# same RUN REF: bit for bit the same losses and final weights
same() {
	cmp "$1.loss" "$2.loss" && cmp "$1/model.safetensors" "$2/model.safetensors" &&
	echo "$1 = $2 bit for bit ($(wc -l <"$1.loss") steps)"
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

test_expect_success FMNIST 'mlp: 1 rank x 64, and as 2 and 4 accumulation micro-steps (the reference orders)' '
	dptrain mlp.json output.dir=m1 >m1.out 2>&1 &&
	dptrain mlp.json output.dir=mk2 data.batch_size=32 parallel.grad_accumulation_step=2 >mk2.out 2>&1 &&
	dptrain mlp.json output.dir=k4 data.batch_size=16 parallel.grad_accumulation_step=4 >k4.out 2>&1 &&
	for n in m1 mk2 k4; do
		losses_metrics $n/metrics.jsonl >$n.loss && test $(wc -l <$n.loss) = 25 || return 1
	done &&
	isa_refs m1 mlp.json
'

test_expect_success FMNIST 'mlp: 4 ranks x 16 = 1 rank x 64: losses and final weights' '
	dptrain-run -n 4 -o m4 mlp.json dptrain mlp.json data.batch_size=16 >m4.out 2>&1 &&
	cat m4.out &&
	grep "4 ranks, average of gradients" m4.out &&
	losses_metrics m4/metrics.jsonl >m4.loss &&
	orders m4 m1 mk2 k4 m1.SSE41 m1.AVX2 m1.AVX512_CORE
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
	dptrain mlp.json output.dir=ak2 data.batch_size=48 parallel.grad_accumulation_step=2 >ak2.out 2>&1 &&
	dptrain-run -n 3 -o a3 mlp.json dptrain mlp.json data.batch_size=16 \
		parallel.grad_accumulation_step=2 >a3.out 2>&1 &&
	for n in a1 ak2 a3; do
		losses_metrics $n/metrics.jsonl >$n.loss && test $(wc -l <$n.loss) = 25 || return 1
	done &&
	isa_refs a1 mlp.json data.batch_size=96 &&
	orders a3 a1 ak2 a1.SSE41 a1.AVX2 a1.AVX512_CORE
'

test_expect_success FMNIST 'mlp: 1 rank, 4 micro-steps of 16 = one step of 64' '
	orders k4 m1 mk2 m1.SSE41 m1.AVX2 m1.AVX512_CORE
'

test_expect_success FMNIST 'lenet: 2 ranks x 32 = 1 rank x 64, and sum instead of mean = 2x lr' '
	dptrain lenet.json output.dir=l1 >l1.out 2>&1 &&
	dptrain lenet.json output.dir=lk2 data.batch_size=32 parallel.grad_accumulation_step=2 >lk2.out 2>&1 &&
	dptrain lenet.json output.dir=lk4 data.batch_size=16 parallel.grad_accumulation_step=4 >lk4.out 2>&1 &&
	dptrain-run -n 2 -o l2 lenet.json dptrain lenet.json data.batch_size=32 >l2.out 2>&1 &&
	for n in l1 lk2 lk4 l2; do
		losses_metrics $n/metrics.jsonl >$n.loss && test $(wc -l <$n.loss) = 20 || return 1
	done &&
	isa_refs l1 lenet.json &&
	orders l2 l1 lk2 lk4 l1.SSE41 l1.AVX2 l1.AVX512_CORE &&
	dptrain-run -n 2 -o ls lenet.json dptrain lenet.json data.batch_size=32 \
		parallel.gradients_mean=false optimizer.lr=0.025 optimizer.weight_decay=0.0002 >ls.out 2>&1 &&
	losses_metrics ls/metrics.jsonl >ls.loss &&
	same ls l2
'

test_expect_success FMNIST 'batch 1: 2 ranks = 1 rank with 2 accumulation micro-steps, bit for bit' '
	for j in mlp lenet; do
		dptrain $j.json output.dir=${j}1k data.batch_size=1 \
			parallel.grad_accumulation_step=2 >${j}1k.out 2>&1 &&
		dptrain-run -n 2 -o ${j}12 $j.json dptrain $j.json data.batch_size=1 >${j}12.out 2>&1 &&
		losses_metrics ${j}1k/metrics.jsonl >${j}1k.loss &&
		losses_metrics ${j}12/metrics.jsonl >${j}12.loss &&
		test $(wc -l <${j}12.loss) -ge 20 &&
		same ${j}12 ${j}1k || return 1
	done
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
# vs_torch NAME CONFIG RANKS STEPS RTOL [OVERRIDES...]: each rank's losses and the final
# weights of dptrain's ranks against PyTorch DDP's, from the same initial weights. PyTorch sums
# in yet another order (its own kernels, which ONEDNN_MAX_CPU_ISA may not reach), so with
# RTOL "orders" they are judged as `orders` judges one big batch: against the spread between
# dptrain's job, the same job as 2 accumulation micro-steps (each rank's same samples summed
# in another order) and the job under each ONEDNN_MAX_CPU_ISA level. A model with BatchNorm
# has no micro-step order (a micro-batch has its own statistics): RTOL is then "LOSS_RTOL
# WEIGHT_RTOL", fixed.
vs_torch() {
	_n=$1 _c=$2 _w=$3 _s=$4 _lt=${5% *} _wt=${5#* } && shift 5 &&
	/usr/bin/python3 "$ref/ddp_torch.py" --save-init $_n.init.safetensors --config $_c &&
	dptrain-run -n $_w -o $_n.dp $_c dptrain $_c "model.init=$PWD/$_n.init.safetensors" \
		train.max_steps=$_s "$@" >$_n.dp.out 2>&1 &&
	dptrain --check $_c "$@" >$_n.resolved.json &&
	/usr/bin/python3 "$ref/ddp_torch.py" --nproc $_w --config $_n.resolved.json \
		--init $_n.init.safetensors --steps $_s --out $_n.torch >$_n.torch.out 2>&1 &&
	if [ "$_lt" = orders ]; then
		_b=$(dp_json $_n.resolved.json "d[\"data\"][\"batch_size\"]") &&
		dptrain-run -n $_w -o $_n.k2 $_c dptrain $_c "model.init=$PWD/$_n.init.safetensors" \
			train.max_steps=$_s "$@" data.batch_size=$((_b / 2)) \
			parallel.grad_accumulation_step=2 >$_n.k2.out 2>&1 &&
		for _i in SSE41 AVX2 AVX512_CORE; do
			ONEDNN_MAX_CPU_ISA=$_i dptrain-run -n $_w -o $_n.$_i $_c dptrain $_c \
				"model.init=$PWD/$_n.init.safetensors" train.max_steps=$_s "$@" \
				>$_n.$_i.out 2>&1 || return 1
		done
	fi &&
	_r=0 && while [ $_r -lt $_w ]; do
		echo "rank $_r:" &&
		torch_losses $_n.torch $_r >$_n.t$_r &&
		losses_log $_n.dp/device$_r/train.log >$_n.d$_r &&
		if [ "$_lt" = orders ]; then
			for _v in dp torch k2 SSE41 AVX2 AVX512_CORE; do
				mkdir -p $_n.$_v.r$_r &&
				ln -sf "$PWD/$_n.$_v/model.safetensors" $_n.$_v.r$_r/ || return 1
				[ $_v = torch ] || losses_log $_n.$_v/device$_r/train.log >$_n.$_v.r$_r.loss ||
					return 1
			done &&
			cp $_n.t$_r $_n.torch.r$_r.loss &&
			orders $_n.torch.r$_r $_n.dp.r$_r $_n.k2.r$_r $_n.SSE41.r$_r $_n.AVX2.r$_r \
				$_n.AVX512_CORE.r$_r
		else
			close $_n.d$_r $_n.t$_r $_lt $_s
		fi || return 1
		_r=$((_r + 1))
	done &&
	if [ "$_lt" != orders ]; then
		/usr/bin/python3 "$ref/st_compare.py" $_n.dp/model.safetensors \
			$_n.torch/model.safetensors --rtol $_wt
	fi
}

test_expect_success FMNIST,TORCH 'mlp: 2 ranks of dptrain = 2 ranks of PyTorch DDP, 20 steps' '
	vs_torch mt mlp.json 2 20 orders data.batch_size=32
'

test_expect_success FMNIST,TORCH 'lenet with AdamW and label smoothing: 2 ranks = PyTorch DDP, 20 steps' '
	vs_torch lt lenet.json 2 20 orders data.batch_size=32 optimizer.name=adamw \
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
	vs_torch rt resnet.json 2 4 "1e-4 1e-3" data.eval=null
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
#
# No outcome depends on the machine's speed. A timeout that is not what a test is about is
# 600 s, so that a fault found another way (a death, an abort) is certainly found first; the
# tests' own deadlines (wait_exit, until_logged) are hang guards, below 600 s so that a fault
# found only by such a timeout fails the test, and far above what a busy machine takes. Where a
# timeout is the point (a stall, a rank that never arrives), what the test checks does not
# depend on which rank's timer fires first: the store's roll call and rank 0's rendezvous
# verdict decide. Ports are held from the moment they are chosen (hold_port), never merely
# found free, and a rank is started after another only once that one listens.
long=$(cat <<EOF
train.epochs=0 train.max_steps=1000000 train.log_every=1 data.eval=null checkpoint.every_epochs=0 timeouts.collective_s=600 timeouts.rendezvous_s=600
EOF
)
start_rank() { # RANK WORLD PORT [OVERRIDES...]
	_r=$1 _w=$2 _p=$3
	shift 3
	rm -rf fail.$_r.out fail.$_r.err
	[ -n "$keep_output" ] || rm -rf fail.$_r
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
# until_logged FILE: wait (up to 300 s) until a rank has trained a few steps
logged() {
	_n=$(grep -c "loss is" "$1" 2>/dev/null) || :
	[ "${_n:-0}" -ge 3 ]
}
until_logged() {
	_i=0
	while ! logged "$1" && [ $_i -lt 3000 ]; do sleep 0.1; _i=$((_i + 1)); done
	logged "$1"
}
# kill_ranks: whatever start_rank and hold_port started is gone when a test ends, passed or not
kill_ranks() {
	for _p in $pid0 $pid1 $pid2; do kill -CONT $_p 2>/dev/null; kill -9 $_p 2>/dev/null; done
	[ -z "$holder" ] || kill $holder 2>/dev/null
	wait 2>/dev/null
	pid0= pid1= pid2= holder=
}
# hold_port [listen]: a free port of 127.0.0.1 in $port, held by a process ($holder) until
# kill_ranks: bound with SO_REUSEADDR, so the kernel gives it to no other socket, and a
# connection to it is refused until rank 0's store, which sets SO_REUSEADDR too, binds it.
# A port that was only free a moment ago (bind to 0, close) can be taken by any process before
# rank 0 binds it. With listen, the holder listens on it (a port in use).
hold_port() {
	rm -f port.fifo && mkfifo port.fifo &&
	{ /usr/bin/python3 -c 'import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, len(sys.argv) == 1)
s.bind(("127.0.0.1" if len(sys.argv) == 1 else "0.0.0.0", 0))
if len(sys.argv) > 1:
    s.listen()
print(s.getsockname()[1], flush=True)
sys.stdout.close()
time.sleep(3600)' $1 >port.fifo & } &&
	holder=$! && read port <port.fifo && test -n "$port"
}
# until_listening PORT: until something accepts connections on 127.0.0.1:PORT (up to 300 s)
until_listening() {
	/usr/bin/python3 -c 'import socket, sys, time
t0 = time.monotonic()
while True:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1]))).close()
        break
    except OSError:
        if time.monotonic() - t0 > 300:
            sys.exit(f"nothing listens on port {sys.argv[1]} after 300 s")
        time.sleep(0.05)' $1
}

test_expect_success FMNIST 'a rank killed mid-training: the others exit 3 at once, naming it' '
	test_when_finished kill_ranks &&
	hold_port &&
	start_rank 0 3 $port && start_rank 1 3 $port && start_rank 2 3 $port &&
	until_logged fail.2.out &&
	t0=$(date +%s) && kill -9 $pid2 &&
	{ wait_exit $pid0 120; s0=$?; } && { wait_exit $pid1 120; s1=$?; } &&
	{ wait $pid2; s2=$?; } &&
	echo "exit: rank 0 $s0, rank 1 $s1, rank 2 $s2 after $(( $(date +%s) - t0 )) s" &&
	cat fail.0.err fail.1.err &&
	test $s0 = 3 && test $s1 = 3 && test $s2 = 137 &&
	grep "^dptrain: rank 0: .*rank 2 .*died" fail.0.err &&
	grep "^dptrain: rank 1: .*rank 2 .*died" fail.1.err &&
	grep "^dptrain: no checkpoint was written in this run: running the job again starts over" fail.0.err &&
	! grep "checkpoint" fail.1.err
'

test_expect_success FMNIST 'a rank killed after checkpoints: rank 0 names the last good one, and it resumes' '
	test_when_finished kill_ranks &&
	hold_port &&
	start_rank 0 2 $port checkpoint.every_steps=2 && start_rank 1 2 $port checkpoint.every_steps=2 &&
	until_logged fail.1.out &&
	kill -9 $pid1 &&
	{ wait_exit $pid0 120; s0=$?; } &&
	cat fail.0.err &&
	test $s0 = 3 &&
	last=$(cat fail.0/checkpoints/latest) &&
	grep -Fx "dptrain: the last good checkpoint is $PWD/fail.0/checkpoints/$last: running the job again resumes from it" fail.0.err &&
	kill_ranks && hold_port &&
	more="train.max_steps=$((${last#step-} + 1)) checkpoint.every_steps=2" &&
	keep_output=1 && start_rank 0 2 $port $more && start_rank 1 2 $port $more && keep_output= &&
	{ wait_exit $pid0 300; s0=$?; } && { wait_exit $pid1 300; s1=$?; } &&
	cat fail.0.out && test $s0 = 0 && test $s1 = 0 &&
	grep -F "resuming from $PWD/fail.0/checkpoints/$last: step ${last#step-}," fail.0.out
'

# The stall is found by the collective timeout, which must also outlast the ranks' skew at the
# start (each loads the data after the parameter broadcast, then waits for the others): 15 s.
stall=timeouts.collective_s=15
test_expect_success FMNIST 'a stalled rank (SIGSTOP): the others exit 3 after timeouts.collective_s, naming it' '
	test_when_finished kill_ranks &&
	hold_port &&
	start_rank 0 3 $port $stall && start_rank 1 3 $port $stall && start_rank 2 3 $port $stall &&
	until_logged fail.1.out &&
	kill -STOP $pid1 &&
	{ wait_exit $pid0 120; s0=$?; } && { wait_exit $pid2 120; s2=$?; } &&
	kill -9 $pid1 && kill -CONT $pid1 && { wait $pid1 || :; } &&
	echo "exit: rank 0 $s0, rank 2 $s2" && cat fail.0.err fail.2.err &&
	test $s0 = 3 && test $s2 = 3 &&
	grep "^dptrain: rank 0: .*rank 1 ([^)]*) stopped taking part: 2 of 3 ranks were waiting" fail.0.err &&
	grep "^dptrain: rank 2: .*rank 1 ([^)]*) stopped taking part: 2 of 3 ranks were waiting" fail.2.err
'

test_expect_success FMNIST 'a rank that stops with an error (its loss diverged) tells the others why' '
	test_when_finished kill_ranks &&
	hold_port &&
	start_rank 0 2 $port && start_rank 1 2 $port optimizer.lr=1e30 &&
	{ wait_exit $pid0 120; s0=$?; } && { wait_exit $pid1 120; s1=$?; } &&
	cat fail.0.err fail.1.err &&
	test $s0 = 3 && test $s1 = 3 &&
	grep "^dptrain: rank 1: loss is nan" fail.1.err &&
	grep "^dptrain: rank 0: .*rank 1 stopped: loss is nan" fail.0.err
'

# Rank 1 arrives with a rendezvous timeout of its own much shorter than rank 0's, and it
# starts once rank 0 listens: its own deadline passes first, but rank 0's store judges the
# rendezvous, and both ranks name rank 2, which never came (not rank 1 as dead because it
# gave up on its own).
test_expect_success FMNIST 'a rank that never arrives: every rank names it when rank 0 closes the rendezvous' '
	test_when_finished kill_ranks &&
	hold_port &&
	start_rank 0 3 $port timeouts.rendezvous_s=8 &&
	until_listening $port &&
	start_rank 1 3 $port timeouts.rendezvous_s=1 &&
	{ wait_exit $pid0 120; s0=$?; } && { wait_exit $pid1 120; s1=$?; } &&
	cat fail.0.err fail.1.err &&
	test $s0 = 3 && test $s1 = 3 &&
	grep "^dptrain: rank 0: rendezvous: 1 of 3 ranks did not connect within 8 s: rank 2$" fail.0.err &&
	grep "^dptrain: rank 1: rendezvous: 1 of 3 ranks did not connect within 8 s: rank 2$" fail.1.err
'

test_expect_success FMNIST 'the master port already in use: a clear error from rank 0' '
	test_when_finished kill_ranks &&
	hold_port listen &&
	start_rank 0 2 $port timeouts.rendezvous_s=2 &&
	{ wait_exit $pid0 120; s0=$?; } &&
	cat fail.0.err && test $s0 = 3 &&
	grep "^dptrain: rank 0: .*$port.*in use" fail.0.err
'

test_expect_success FMNIST 'no master: rank 1 says it cannot reach MASTER_ADDR:MASTER_PORT' '
	test_when_finished kill_ranks &&
	hold_port &&
	start_rank 1 2 $port timeouts.rendezvous_s=1 &&
	{ wait_exit $pid1 120; s1=$?; } &&
	cat fail.1.err && test $s1 = 3 &&
	grep "^dptrain: rank 1: .*127.0.0.1:$port within 1 s: Connection refused" fail.1.err
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
