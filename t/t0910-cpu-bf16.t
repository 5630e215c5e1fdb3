#!/bin/sh
# t0910-cpu-bf16.t — precision.mode bf16 on the CPU (AVX512_BF16 or AMX): refused, saying why,
# where oneDNN runs a set without bfloat16; where it has it, the losses of a few steps follow
# PyTorch's CPU autocast to bfloat16 from the same weights as closely as bfloat16 lets them
# (measured: PyTorch's bf16 against its own fp32), and Fashion-MNIST accuracy is fp32's.
# Nothing here depends on the machine's speed or load.

test_description='bfloat16 training on the CPU against PyTorch autocast'

. "$(dirname "$0")/sharness.sh"

ref="$DPTRAIN_SRC_DIR/t/reference"
ex="$DPTRAIN_SRC_DIR/contrib/examples"
fm=/usr/share/datasets/fashion-mnist

losses_log() { # a train.log's or stdout's "loss is" figures, numbered by step
	sed -n 's/^epoch: [0-9]* step: [0-9]*, loss is \([^,]*\),.*/\1/p' "$1" | cat -n
}
torch_losses() {
	/usr/bin/python3 -c 'import json,sys
for i, l in enumerate(open(sys.argv[1]), 1):
    print(i, repr(json.loads(l)["loss"]))' "$1/losses.rank0.jsonl"
}
last_accuracy() {
	grep '"event":"eval"' "$1" | tail -n 1 | sed 's/.*"accuracy":\([0-9.e+-]*\).*/\1/'
}

test_expect_success 'bf16 where oneDNN runs AVX2 (no bfloat16): refused, exit 3, saying why' '
	ONEDNN_MAX_CPU_ISA=AVX2 test_expect_code 3 dptrain "$ex/lenet-fmnist.json" \
		precision.mode=bf16 train.epochs=0 train.max_steps=1 output.dir=no16 >out 2>err &&
	cat err &&
	grep "precision.mode bf16: bfloat16 needs AVX512_BF16 or AMX; oneDNN runs avx2" err &&
	grep "use \"fp32\" on this CPU" err &&
	! test -e no16/model.safetensors
'

dptrain "$ex/lenet-fmnist.json" precision.mode=bf16 train.epochs=0 train.max_steps=1 \
	output.dir=probe16 >/dev/null 2>&1 && test_set_prereq CPUBF16

# Under the sanitizers, with oneDNN 2 on an AMX CPU, the bf16 tests run at AVX512_CORE_BF16:
# oneDNN 2.6.3 (Debian 12) reads past a heap block of its own while it creates an AMX bf16
# convolution of ResNet-18 (the one after the 128-channel 14x14 layer): AddressSanitizer's
# allocator puts that block at the end of its mapping and the read faults inside
# dnnl_primitive_create (measured; not at AVX512_CORE_BF16, not in oneDNN's code paths the
# other tests take). The unsanitized suite runs them at the CPU's own ISA, AMX included.
if test "${DPTRAIN_SAN:-0}" = 1 && dptrain --devices 2>/dev/null | grep -q "oneDNN 2\..*amx"; then
	ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16
	export ONEDNN_MAX_CPU_ISA
fi

# vs_torch NAME STEPS CONFIG: dptrain and PyTorch in fp32 and in bf16 from the same weights;
# dptrain's bf16 losses within 2x the worst difference between PyTorch's bf16 and its fp32 (the
# error bfloat16 itself brings, at least 1e-3), and not dptrain's fp32 losses (bf16 in effect).
vs_torch() {
	_n=$1 _s=$2 _c=$3 &&
	/usr/bin/python3 "$ref/ddp_torch.py" --save-init $_n.init.safetensors --config $_c &&
	for _m in fp32 bf16; do
		dptrain $_c "model.init=$PWD/$_n.init.safetensors" train.max_steps=$_s \
			precision.mode=$_m output.dir=$_n.dp.$_m >$_n.dp.$_m.out 2>&1 &&
		losses_log $_n.dp.$_m.out >$_n.d.$_m &&
		dptrain --check $_c precision.mode=$_m >$_n.$_m.json &&
		/usr/bin/python3 "$ref/ddp_torch.py" --nproc 1 --config $_n.$_m.json \
			--init $_n.init.safetensors --steps $_s --out $_n.torch.$_m \
			>$_n.torch.$_m.out 2>&1 &&
		torch_losses $_n.torch.$_m >$_n.t.$_m || return 1
	done &&
	/usr/bin/python3 - $_n.d.bf16 $_n.t.bf16 $_n.t.fp32 $_n.d.fp32 $_s <<-\EOF
	import sys
	rd = lambda p: [float(l.split()[1]) for l in open(p) if l.strip()]
	d16, t16, t32, d32 = (rd(p) for p in sys.argv[1:5])
	n = int(sys.argv[5])
	if not len(d16) == len(t16) == len(t32) == len(d32) == n:
	    sys.exit("steps: %d %d %d %d, want %d" % (len(d16), len(t16), len(t32), len(d32), n))
	rel = lambda a, b: max(abs(x - y) / abs(y) for x, y in zip(a, b))
	bound = 2 * max(rel(t16, t32), 1e-3)
	got, own = rel(d16, t16), rel(d16, d32)
	print("dptrain bf16 vs PyTorch bf16: %.3g (bound %.3g: 2x PyTorch bf16 vs fp32); "
	      "dptrain bf16 vs its fp32: %.3g" % (got, bound, own))
	sys.exit(not (got <= bound and own > 1e-6))
	EOF
}

test_expect_success CPUBF16,FMNIST,TORCH 'lenet, 30 steps: bf16 = PyTorch autocast bf16 within bfloat16 error' '
	cat >lenet.json <<-EOF &&
	{"seed": 5, "model": {"name": "lenet", "num_classes": 10, "input_shape": [1, 28, 28]},
	 "data": {"format": "idx", "dir": "$fm", "batch_size": 32, "drop_remainder": true,
	          "transforms": {"normalize": {"mean": [0.286], "std": [0.353]}}},
	 "optimizer": {"name": "adamw", "lr": 0.002},
	 "train": {"epochs": 1, "log_every": 1, "threads": 2}}
	EOF
	vs_torch le 30 lenet.json
'

# BatchNorm, the fused BN+ReLU and add+ReLU, max pooling and global pooling in bfloat16
test_expect_success CPUBF16,FMNIST,TORCH 'resnet18, 4 steps: bf16 = PyTorch autocast bf16 within bfloat16 error' '
	cat >resnet.json <<-EOF &&
	{"seed": 5,
	 "model": {"name": "resnet18", "num_classes": 10, "input_shape": [1, 28, 28], "stem": "small"},
	 "data": {"format": "idx", "dir": "$fm", "batch_size": 16, "drop_remainder": true,
	          "transforms": {"normalize": {"mean": [0.286], "std": [0.353]}}},
	 "optimizer": {"name": "momentum", "lr": 0.002, "momentum": 0.9},
	 "train": {"epochs": 1, "log_every": 1, "threads": 2}}
	EOF
	vs_torch rn 4 resnet.json
'

# one epoch of the example's LeNet in each precision: bf16 within a point of fp32's accuracy
test_expect_success CPUBF16,FMNIST 'lenet on Fashion-MNIST, 1 epoch: bf16 accuracy = fp32 within 0.01' '
	for m in fp32 bf16; do
		dptrain "$ex/lenet-fmnist.json" train.epochs=1 precision.mode=$m output.dir=acc.$m \
			>acc.$m.out 2>&1 || return 1
	done &&
	a32=$(last_accuracy acc.fp32/metrics.jsonl) && a16=$(last_accuracy acc.bf16/metrics.jsonl) &&
	echo "accuracy fp32 $a32, bf16 $a16" &&
	awk -v a="$a16" -v b="$a32" "BEGIN { exit !(a + 0 >= b - 0.01 && b + 0 >= 0.80) }"
'

test_done
