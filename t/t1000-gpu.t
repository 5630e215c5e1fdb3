#!/bin/sh
# t1000-gpu.t — training on the GPU end to end: the CUDA backend step for step against the CPU
# backend (lenet; resnet18 with BatchNorm), convergence in each GPU precision, NCCL DDP on one
# rank (the same bits as no DDP) and on two GPUs (the CPU ranks' losses), two ranks refused one
# GPU, two ranks on one GPU through the CPU engine (DDP, ZeRO-1, accumulation, a rank killed or
# stopped) and over NCCL 2.30+, bit-exact resume with deterministic cuDNN, and the GPU's weights
# read by PyTorch.
# Skips everything, saying why, where `dptrain --devices` finds no usable GPU.
# Owns only its trash directory.
#
# Tolerances. cuDNN/cuBLAS and oneDNN sum convolutions and products in other orders, so one
# step's loss differs by float32 rounding (~1e-6 relative); training amplifies such differences
# step by step (chaotically with BatchNorm at small batches, see t0700), so the GPU and the CPU
# are held to 1e-3 relative for lenet's first 10 steps and 1e-2 for resnet18's first 6, where
# a wrong kernel is off by far more from the first step. Where both sides run the same kernels
# (DDP over one rank, resume) the comparison is bitwise.
#
# DPTRAIN_FMNIST_DIR: where the Fashion-MNIST idx files are when they are not where Debian's
# dataset-fashion-mnist puts them (a GPU machine without the package).

test_description='training on the GPU: against the CPU, convergence, NCCL, resume'

. "$(dirname "$0")/sharness.sh"

if ! dptrain --devices >devices.out 2>&1; then
	skip_all="no usable GPU (dptrain --devices: $(tr '\n' ' ' <devices.out | cut -c1-200))"
	test_done
fi
sed 's/^/# /' devices.out

py=/usr/bin/python3
test -x "$py" || py=$(command -v python3)
if test -z "$py"; then
	skip_all='no python3 to compare the losses with'
	test_done
fi

ex="$DPTRAIN_SRC_DIR/contrib/examples"
ref="$DPTRAIN_SRC_DIR/t/reference"
fm=${DPTRAIN_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
test -f "$fm/train-images-idx3-ubyte.gz" && test -f "$fm/t10k-images-idx3-ubyte.gz" &&
	test_set_prereq FMNIST
# PyTorch, for reading the exported weights: Debian's python3-torch, else the python3 on PATH
# (where a GPU machine has its PyTorch).
for p in /usr/bin/python3 python3; do
	if "$p" -c 'import torch, numpy' >/dev/null 2>&1; then
		tpy=$p
		test_set_prereq TORCH
		break
	fi
done
# NCCL: linked into dptrain where the build found it.
ldd "$(command -v dptrain)" 2>/dev/null | grep -q libnccl && test_set_prereq NCCL
test -x "$DPTRAIN_BUILD_DIR/bin/dptrain-run" && test_have_prereq LAUNCH && test_set_prereq RUN
# GPUs dptrain-run hands out, counted as dptrain-launch counts them: CUDA_VISIBLE_DEVICES'
# entries, else the /dev/nvidiaN device nodes.
case ${CUDA_VISIBLE_DEVICES-unset} in
unset) ngpus=$(ls /dev 2>/dev/null | grep -c '^nvidia[0-9][0-9]*$') ;;
'' | -1 | NoDevFiles) ngpus=0 ;;
*) ngpus=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .) ;;
esac
test "$ngpus" -ge 2 && test_set_prereq MULTIGPU

# the per-step losses of a run as "global_step loss" (%.9g: every float32 bit)
losses() {
	grep '"event":"train"' "$1/metrics.jsonl" |
		sed 's/.*"global_step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/'
}
# same NAME RUN1 RUN2: identical losses step for step and identical final weights
same() {
	losses "$2" >"$1.a" && losses "$3" >"$1.b" &&
	test -s "$1.a" && test_cmp "$1.a" "$1.b" &&
	cmp "$2/model.safetensors" "$3/model.safetensors"
}
# close A B RTOL N: two "step loss" lists have the same N steps and agree within RTOL relative
close() {
	"$py" - "$@" <<-\EOF
	import sys
	a = [l.split() for l in open(sys.argv[1]) if l.strip()]
	b = [l.split() for l in open(sys.argv[2]) if l.strip()]
	rtol, need = float(sys.argv[3]), int(sys.argv[4])
	if [x[0] for x in a] != [x[0] for x in b] or len(a) != need:
	    sys.exit("steps differ or not %d of them: %d vs %d" % (need, len(a), len(b)))
	worst = max(abs(float(x[1]) - float(y[1])) / max(abs(float(y[1])), 1e-12)
	            for x, y in zip(a, b))
	print("%d steps, worst relative difference %.3g (rtol %g)" % (len(a), worst, rtol))
	sys.exit(worst > rtol)
	EOF
}
# decreases LOSSES: the mean of the last 5 losses is below 0.9 x the mean of the first 5
decreases() {
	awk '{ v[NR] = $2 }
	END {
		if (NR < 10) exit 1
		for (i = 1; i <= 5; i++) { a += v[i]; b += v[NR - 5 + i] }
		printf "%s: first 5 steps %.4f, last 5 %.4f\n", FILENAME, a / 5, b / 5
		exit !(b < 0.9 * a)
	}' "$1"
}
last_accuracy() {
	grep '"event":"eval"' "$1" | tail -n 1 | sed 's/.*"accuracy":\([0-9.e+-]*\).*/\1/'
}
at_least() {
	awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'
}
free_port() {
	"$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Short deterministic-data jobs: augmentation (the data RNG must resume too), constant lr,
# every step logged.
cat >lenet.json <<EOF
{
  "seed": 7,
  "model": {"name": "lenet", "num_classes": 10, "input_shape": [1, 28, 28]},
  "data": {"format": "idx", "dir": "$fm", "batch_size": 64, "drop_remainder": true,
           "transforms": {"normalize": {"mean": [0.286], "std": [0.353]},
                          "random_crop": {"size": 28, "padding": 2}, "horizontal_flip": true}},
  "optimizer": {"name": "momentum", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.0001},
  "train": {"epochs": 0, "max_steps": 40, "log_every": 1}
}
EOF

test_expect_success FMNIST 'lenet fp32, 30 steps: GPU = CPU within 1e-3 for 10 steps, both learn' '
	set -- train.epochs=0 train.max_steps=30 train.log_every=1 data.eval=null \
		data.dir="$fm" precision.mode=fp32 &&
	dptrain "$ex/lenet-fmnist.json" "$@" device.kind=cuda output.dir=ag >ag.out 2>&1 &&
	dptrain "$ex/lenet-fmnist.json" "$@" device.kind=cpu output.dir=ac >ac.out 2>&1 &&
	grep "^dptrain: lenet, [0-9]* parameters, .*, backend cuda$" ag.out &&
	grep "^dptrain: lenet, [0-9]* parameters, .*, backend cpu (oneDNN .*)$" ac.out &&
	losses ag >ag.loss && losses ac >ac.loss &&
	test $(wc -l <ag.loss) = 30 &&
	head -n 10 ag.loss >ag.10 && head -n 10 ac.loss >ac.10 &&
	close ag.10 ac.10 1e-3 10 &&
	decreases ag.loss && decreases ac.loss
'

# JPEGs: the GPU is sent the decoded images as bytes (uint8 NHWC) and normalises them itself
# (backend input_u8); the CPU gets the loader's floats. The inputs are the same bits, so the
# losses are as close as the idx ones above.
"$py" -c 'import PIL, numpy' 2>/dev/null && test_have_prereq FMNIST && test_set_prereq JPEGS
test_expect_success JPEGS 'lenet on a JPEG image folder, 10 steps: GPU (uint8 upload) = CPU within 1e-3' '
	cat >fm2jpeg.py <<-\EOF &&
	import gzip, os, sys, numpy as np
	from PIL import Image
	src = sys.argv[1]
	def read(name, skip):
	    with gzip.open(os.path.join(src, name)) as f:
	        return np.frombuffer(f.read()[skip:], np.uint8)
	x = read("train-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)[:1280]
	y = read("train-labels-idx1-ubyte.gz", 8)[:1280]
	for i in range(len(x)):
	    d = "jpg/c%d" % y[i]
	    os.makedirs(d, exist_ok=True)
	    Image.fromarray(x[i]).resize((36, 36), Image.Resampling.BILINEAR).convert("RGB").save(
	        "%s/%05d.jpg" % (d, i), quality=90)
	EOF
	"$py" fm2jpeg.py "$fm" &&
	cat >jpg.json <<-EOF &&
	{"seed": 3, "model": {"name": "lenet", "num_classes": 10, "input_shape": [3, 32, 32]},
	 "data": {"format": "imagefolder", "train": {"root": "$PWD/jpg"}, "batch_size": 64,
	          "workers": 2},
	 "optimizer": {"name": "momentum", "lr": 0.02, "momentum": 0.9},
	 "train": {"epochs": 0, "max_steps": 10, "log_every": 1}, "precision": {"mode": "fp32"}}
	EOF
	dptrain jpg.json device.kind=cuda output.dir=jg >jg.out 2>&1 &&
	dptrain jpg.json device.kind=cpu output.dir=jc >jc.out 2>&1 &&
	grep "backend cuda$" jg.out &&
	losses jg >jg.loss && losses jc >jc.loss &&
	test $(wc -l <jg.loss) = 10 &&
	close jg.loss jc.loss 1e-3 10
'

# Under the sanitizers everything runs several times slower: fewer steps, a lower bar (as t0900).
if test "$DPTRAIN_SAN" = 1; then
	lenet_args="train.epochs=0 train.max_steps=300" lenet_min=0.70
else
	lenet_args="" lenet_min=0.87
fi

test_expect_success FMNIST "lenet-fmnist.json, device.kind auto: the GPU, $lenet_min test accuracy, peak memory" '
	dptrain "$ex/lenet-fmnist.json" data.dir="$fm" output.dir=b train.log_every=500 \
		$lenet_args >b.out 2>&1 &&
	cat b.out &&
	grep "^dptrain: lenet, .*, backend cuda$" b.out &&
	mib=$(sed -n "s/^dptrain: GPU memory peak \([0-9][0-9]*\) MiB.*/\1/p" b.out) &&
	test -n "$mib" &&
	grep "\"event\":\"end\".*\"peak_device_mib\":$mib[,}]" b/metrics.jsonl &&
	acc=$(last_accuracy b/metrics.jsonl) &&
	echo "accuracy $acc, GPU memory peak $mib MiB" &&
	at_least "$acc" $lenet_min
'

# The other precisions the GPU trains in, each to the fp32 target (fp16 with its default
# dynamic loss scaling).
for mode in tf32 bf16 fp16; do
	test_expect_success FMNIST "lenet-fmnist.json in $mode on the GPU: $lenet_min test accuracy" '
		dptrain "$ex/lenet-fmnist.json" data.dir="$fm" output.dir=p-$mode \
			train.log_every=500 device.kind=cuda precision.mode=$mode $lenet_args \
			>p-$mode.out 2>&1 &&
		cat p-$mode.out &&
		grep "^dptrain: lenet, .*, backend cuda$" p-$mode.out &&
		! grep "warning: precision" p-$mode.out &&
		acc=$(last_accuracy p-$mode/metrics.jsonl) &&
		echo "$mode accuracy $acc" &&
		at_least "$acc" $lenet_min
	'
done

test_expect_success FMNIST,NCCL 'DPTRAIN_DDP=1: one rank over NCCL gives the bits of no DDP' '
	set -- device.kind=cuda device.deterministic=true train.max_steps=30 &&
	dptrain lenet.json "$@" output.dir=d0 >d0.out 2>&1 &&
	port=$(free_port) &&
	DPTRAIN_DDP=1 RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
		dptrain lenet.json "$@" output.dir=d1 >d1.out 2>&1 &&
	cat d1.out &&
	grep "^dptrain: 1 ranks\{0,1\}, average of gradients on nccl" d1.out &&
	! grep "gradients on" d0.out &&
	same d d0 d1
'

test_expect_success FMNIST,NCCL,RUN 'two ranks on one GPU: refused, both ranks named, in bounded time' '
	sed "s/\"train\": {/\"device\": {\"allow_shared_gpu\": true},\n  \"train\": {/" \
		lenet.json >shared.json &&
	set -- device.kind=cuda train.max_steps=5 &&
	{ CUDA_VISIBLE_DEVICES=0 timeout 120 dptrain-run -n 2 -o e1 lenet.json \
		dptrain lenet.json "$@" >e1.out 2>&1; rc=$?; } &&
	echo "launcher: exit $rc" && cat e1.out &&
	test $rc != 0 && test $rc != 124 &&
	grep "ranks 0 and 1 on .* would share GPU .0." e1.out &&
	t0=$(date +%s) &&
	{ CUDA_VISIBLE_DEVICES=0 timeout 120 env -u NCCL_MULTI_RANK_GPU_ENABLE dptrain-run -n 2 \
		-o e2 shared.json dptrain shared.json "$@" >e2.out 2>&1; rc=$?; } &&
	echo "allow_shared_gpu: exit $rc after $(($(date +%s) - t0)) s" &&
	{ cat e2.out e2/device*/train.log 2>/dev/null || :; } >e2.all &&
	cat e2.all &&
	test $rc != 0 && test $rc != 124 &&
	grep "ranks 0 and 1 on .* both use GPU 0 .*device.allow_shared_gpu is set, but NCCL [0-9.]* here .*give each rank its own GPU .*, or reduce through the CPU (DPTRAIN_GPU_COMM=cpu)" e2.all
'

test_expect_success FMNIST 'deterministic cuDNN: 40 steps = 20 + resume + 20, bit for bit' '
	set -- device.kind=cuda device.deterministic=true &&
	dptrain lenet.json "$@" output.dir=s1 >s1.out 2>&1 &&
	dptrain lenet.json "$@" output.dir=r1 train.max_steps=20 >r1a.out 2>&1 &&
	test -f r1/checkpoints/step-20/state.json &&
	dptrain lenet.json "$@" output.dir=r1 >r1b.out 2>&1 &&
	grep "resuming from r1/checkpoints/step-20: step 20, epoch 1, sample 1280" r1b.out &&
	grep "backend cuda$" r1b.out &&
	same f s1 r1
'

# fp16 with dynamic loss scaling: the scale and the skipped steps resume too.
test_expect_success FMNIST 'fp16, deterministic: 40 steps = 20 + resume + 20, bit for bit' '
	set -- device.kind=cuda device.deterministic=true precision.mode=fp16 &&
	dptrain lenet.json "$@" output.dir=s16 >s16.out 2>&1 &&
	grep "\"loss_scale\":" s16/metrics.jsonl | tail -n 1 &&
	dptrain lenet.json "$@" output.dir=r16 train.max_steps=20 >r16a.out 2>&1 &&
	dptrain lenet.json "$@" output.dir=r16 >r16b.out 2>&1 &&
	grep "resuming from r16/checkpoints/step-20" r16b.out &&
	same f16 s16 r16
'

test_expect_success FMNIST,NCCL,RUN,MULTIGPU 'lenet on 2 GPUs over NCCL = 2 CPU ranks within 1e-3 for 10 steps' '
	set -- train.max_steps=20 data.batch_size=32 &&
	dptrain-run -n 2 -o g2 lenet.json dptrain lenet.json device.kind=cuda "$@" >g2.out 2>&1 &&
	cat g2.out &&
	grep "backend cuda$" g2.out &&
	grep "^dptrain: 2 ranks, average of gradients on nccl" g2.out &&
	grep -x "DPTRAIN_GPU=0" g2/device0/env.log && grep -x "DPTRAIN_GPU=1" g2/device1/env.log &&
	dptrain-run -n 2 -o c2 lenet.json dptrain lenet.json device.kind=cpu "$@" >c2.out 2>&1 &&
	grep "^dptrain: 2 ranks, average of gradients on cpu" c2.out &&
	losses g2 | head -n 10 >g2.loss && losses c2 | head -n 10 >c2.loss &&
	close g2.loss c2.loss 1e-3 10
'

# Two ranks on one GPU through the CPU engine (DPTRAIN_GPU_COMM=cpu: the device gradients staged
# through host memory), which needs no second GPU and no NCCL: DDP with its buckets, ZeRO-1
# (parallel.enable_parallel_optimizer) and gradient accumulation on the real CUDA backend, each
# against 2 CPU ranks of the same job (within 1e-3 for 10 steps); then rank 1 killed and rank 1
# stopped mid-training, named by rank 0 (a failed copy: t/unit/comm_staged.c).
test_expect_success FMNIST,RUN 'two ranks on one GPU staged through the CPU = 2 CPU ranks: DDP, ZeRO-1, accumulation' '
	sed "s/\"train\": {/\"device\": {\"allow_shared_gpu\": true},\n  \"train\": {/" \
		lenet.json >shared.json &&
	for v in ddp:parallel.bucket_cap_mb=0.05 zero:parallel.enable_parallel_optimizer=true \
		accum:parallel.grad_accumulation_step=2; do
		name=${v%%:*} kv=${v#*:} &&
		set -- train.max_steps=20 data.batch_size=32 "$kv" &&
		DPTRAIN_GPU_COMM=cpu CUDA_VISIBLE_DEVICES=0 timeout 300 dptrain-run -n 2 -o s$name \
			shared.json dptrain shared.json device.kind=cuda "$@" >s$name.out 2>&1 ||
			{ cat s$name.out; return 1; }
		grep "backend cuda$" s$name.out &&
		grep "^dptrain: 2 ranks, average of gradients on cpu.*, staged through host memory" s$name.out &&
		timeout 300 dptrain-run -n 2 -o p$name shared.json dptrain shared.json device.kind=cpu "$@" \
			>p$name.out 2>&1 &&
		losses s$name | head -n 10 >s$name.loss && losses p$name | head -n 10 >p$name.loss &&
		close s$name.loss p$name.loss 1e-3 10 || return 1
	done
'

# fault_run DIR SIGNAL [KEY=VALUE...]: two ranks on GPU 0 through the CPU engine; once rank 1
# has logged step 10 it gets SIGNAL (KILL: dies, STOP: stops taking part). Sets rc and secs.
fault_run() {
	_d=$1 _s=$2
	shift 2
	_t0=$(date +%s)
	DPTRAIN_GPU_COMM=cpu CUDA_VISIBLE_DEVICES=0 timeout 300 dptrain-run -n 2 -o $_d shared.json \
		sh -c "if [ \"\$RANK\" = 1 ]; then ( i=0; while [ \$i -lt 3000 ] &&
			! grep -q \"^epoch: 1 step: 10,\" $_d/device1/train.log 2>/dev/null; do
			sleep 0.1; i=\$((i + 1)); done; kill -$_s \$\$ ) & fi; exec dptrain \"\$@\"" \
		sh shared.json device.kind=cuda train.max_steps=100000 train.log_every=1 "$@" \
		>$_d.out 2>&1
	rc=$? secs=$(($(date +%s) - _t0))
	echo "$_d: exit $rc after $secs s" && cat $_d.out
}

test_expect_success FMNIST,RUN 'two ranks on one GPU staged through the CPU: rank 1 killed, then stopped, mid-training; rank 0 names it' '
	fault_run skill KILL timeouts.collective_s=60 &&
	test $rc != 0 && test $rc != 124 && test $secs -lt 60 &&
	grep "^dptrain: rank 0: gradient bucket .*allreduce: rank 1 .*died" skill.out &&
	fault_run sstop STOP timeouts.collective_s=5 &&
	test $rc != 0 && test $rc != 124 && test $secs -lt 120 &&
	grep "^dptrain: rank 0: .*allreduce: rank 1 .*stopped taking part" sstop.out
'

# The same two ranks on one GPU over NCCL itself, where it can (2.30 and later, asked with
# NCCL_MULTI_RANK_GPU_ENABLE=1; NCCL_MAX_CTAS=2 as its documentation suggests without MPS):
# DDP against the 2 CPU ranks above; an older NCCL refuses, saying so.
test_expect_success FMNIST,NCCL,RUN 'two ranks on one GPU over NCCL 2.30+ = 2 CPU ranks; refused by an older NCCL' '
	set -- train.max_steps=20 data.batch_size=32 parallel.bucket_cap_mb=0.05 &&
	{ NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_MAX_CTAS=2 CUDA_VISIBLE_DEVICES=0 timeout 300 \
		dptrain-run -n 2 -o nddp shared.json dptrain shared.json device.kind=cuda "$@" \
		>nddp.out 2>&1; rc=$?; } &&
	cat nddp.out &&
	if grep "here puts several ranks on one GPU only from 2.30" nddp.out; then
		test $rc != 0 && test $rc != 124 &&
		grep "DPTRAIN_GPU_COMM=cpu" nddp.out
	else
		test $rc = 0 &&
		grep "^dptrain: 2 ranks, average of gradients on nccl" nddp.out &&
		losses nddp | head -n 10 >nddp.loss &&
		close nddp.loss pddp.loss 1e-3 10
	fi
'

# resnet18-fmnist.json, shortened: 6 steps at a constant small lr (its warm-up is an epoch),
# without label smoothing (PyTorch evaluates plain cross-entropy), evaluated on the first 500
# test images. The CPU run is the slow part; 6 steps of batch 32 keep it to seconds.
# rn_train [OPTION] [KEY=VALUE...]: that job.
rn_train() {
	dptrain "$ex/resnet18-fmnist.json" data.train.images="$fm/train-images-idx3-ubyte.gz" \
		data.train.labels="$fm/train-labels-idx1-ubyte.gz" \
		data.eval.images="$PWD/ev-images" data.eval.labels="$PWD/ev-labels" \
		data.batch_size=32 data.eval_batch_size=100 train.epochs=0 train.max_steps=6 \
		train.log_every=1 lr_schedule=null optimizer.lr=0.002 train.label_smoothing=0 "$@"
}

test_expect_success FMNIST 'resnet18 (BatchNorm), 6 steps: GPU = CPU within 1e-2' '
	"$py" - "$fm" <<-\EOF &&
	import gzip, struct, sys
	n, src = 500, sys.argv[1] + "/t10k-%s-idx%d-ubyte.gz"
	x = gzip.open(src % ("images", 3)).read()
	y = gzip.open(src % ("labels", 1)).read()
	open("ev-images", "wb").write(struct.pack(">IIII", 0x803, n, 28, 28) + x[16:16 + n * 784])
	open("ev-labels", "wb").write(struct.pack(">II", 0x801, n) + y[8:8 + n])
	EOF
	rn_train --check >rn.json &&
	rn_train device.kind=cuda output.dir=hg >hg.out 2>&1 &&
	rn_train device.kind=cpu output.dir=hc >hc.out 2>&1 &&
	grep "^dptrain: resnet18, .*, backend cuda$" hg.out &&
	losses hg >hg.loss && losses hc >hc.loss &&
	close hg.loss hc.loss 1e-2 6
'

# bf16 and fp16 activations and products against the CPU's float32: each step's loss within
# 5e-2 relative over the first 6 steps, where a wrong kernel (a layout or type mix-up) is off
# by far more from the first step.
for mode in bf16 fp16; do
	test_expect_success FMNIST "resnet18 in $mode, 6 steps: GPU = CPU fp32 within 5e-2" '
		rn_train device.kind=cuda precision.mode=$mode output.dir=h-$mode \
			>h-$mode.out 2>&1 &&
		cat h-$mode.out &&
		losses h-$mode >h-$mode.loss &&
		close h-$mode.loss hc.loss 5e-2 6
	'
done

# PyTorch reads the GPU run's weights (BatchNorm running statistics included, copied back from
# the device) and evaluates them as dptrain did on the GPU: the same count, the mean loss within
# 1e-3 relative, the correct count within the near ties (top two logits within 1e-3) plus one.
test_expect_success FMNIST,TORCH "PyTorch evaluates the GPU run's resnet18 weights as dptrain did" '
	"$tpy" "$ref/eval_torch.py" rn.json hg/model.safetensors >torch.json &&
	cat torch.json &&
	"$py" - hg/metrics.jsonl torch.json <<-\EOF
	import json, sys
	ev = [json.loads(l) for l in open(sys.argv[1]) if "\"event\":\"eval\"" in l]
	d, t = ev[-1], json.load(open(sys.argv[2]))
	print("dptrain (GPU): %d/%d loss %.9g; pytorch: %d/%d loss %.9g, near ties %d"
	      % (d["correct"], d["count"], d["loss"], t["correct"], t["count"], t["loss"],
	         t["near_ties"]))
	sys.exit(not (d["count"] == t["count"] == 500
	              and abs(d["correct"] - t["correct"]) <= t["near_ties"] + 1
	              and abs(d["loss"] - t["loss"]) <= 1e-3 * abs(d["loss"])))
	EOF
'

test_done
