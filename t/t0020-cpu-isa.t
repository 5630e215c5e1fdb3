#!/bin/sh
# t0020-cpu-isa.t — the CPU backend's kernels under every instruction set oneDNN may pick on
# x86: its convolution, pooling and inner-product kernels (their blocking: 8 floats with AVX2,
# 16 with AVX-512, and their summation orders) differ between levels, and users' clusters
# have all of them. ONEDNN_MAX_CPU_ISA caps the level, so one machine checks every level up to
# its own: every op against the reference backend, every op against PyTorch, fusing changing
# no bit, whole training steps of every model against PyTorch, and the example recipes reaching
# the accuracy they promise. The uncapped level is the plain unit test run (and t0900). Owns
# only its trash directory.

test_description='the CPU backend under SSE4.1, AVX2 and AVX-512 (ONEDNN_MAX_CPU_ISA)'

. "$(dirname "$0")/sharness.sh"

t="$DPTRAIN_BUILD_DIR/t"
case $(uname -m) in
x86_64 | i?86) ;;
*)
	skip_all="ONEDNN_MAX_CPU_ISA levels are x86's; this is $(uname -m)"
	test_done
	;;
esac
native=$(dptrain --devices 2>/dev/null | sed -n 's/^CPU: oneDNN [^,]*, //p')
if test -z "$native"; then
	skip_all='built without oneDNN: the CPU backend is the reference kernels, the same on every CPU'
	test_done
fi
# Correctness, not speed: a waiting OpenMP thread sleeps instead of spinning, so the run takes
# as long on a busy machine as on a quiet one (results are the same either way).
OMP_WAIT_POLICY=passive
export OMP_WAIT_POLICY

test_expect_success "oneDNN runs $native uncapped" '
	echo "$native" | grep -E "^(sse41|avx|avx2|avx2_vnni|avx512_core.*)$"
'

test_expect_success TORCH 'the PyTorch reference for whole training steps' '
	mkdir ref &&
	/usr/bin/python3 "$DPTRAIN_SRC_DIR/t/reference/gen_model.py" "$PWD/ref"
'

# The example recipes' promised accuracy (their descriptions; t0900 holds the uncapped run to
# it). Under the sanitizers t0900 trains them briefly instead: whole recipes would take hours.
test "$DPTRAIN_SAN" = 1 || test_set_prereq RECIPES
ex="$DPTRAIN_SRC_DIR/contrib/examples"
last_accuracy() {
	grep '"event":"eval"' "$1" | tail -n 1 | sed 's/.*"accuracy":\([0-9.e+-]*\).*/\1/'
}
# recipe NAME MIN: contrib/examples/NAME.json trains to at least MIN test accuracy.
recipe() {
	dptrain "$ex/$1.json" output.dir=$isa.$1 train.log_every=100000 >$isa.$1.out 2>&1 &&
	acc=$(last_accuracy $isa.$1/metrics.jsonl) &&
	echo "$isa: $1 test accuracy $acc" &&
	awk -v a="$acc" -v b="$2" "BEGIN { exit !(a + 0 >= b + 0) }"
}

# run_tap NAME [ARGS]: a unit test program, its output kept, its status returned.
run_tap() {
	_n=$1
	shift
	"$t/$_n.t" "$@" >"$isa.$_n.out" 2>&1
	_s=$?
	grep -v "^ok " "$isa.$_n.out"
	return $_s
}

for isa in SSE41 AVX2 AVX512_CORE; do
	want=$(echo $isa | tr A-Z a-z)
	got=$(ONEDNN_MAX_CPU_ISA=$isa dptrain --devices 2>/dev/null | sed -n 's/^CPU: oneDNN [^,]*, //p')
	if test "$got" = "$want"; then
		test_set_prereq $isa
	else
		say "# $isa: this CPU has no $want (oneDNN runs $got there: a lower level or the" \
			"uncapped run covers it)"
	fi
	export ONEDNN_MAX_CPU_ISA=$isa
	test_expect_success $isa "$isa: oneDNN runs $want" '
		dptrain --devices | grep "^CPU: oneDNN .*, $want$"
	'
	case $isa in SSE41) kernels=base ;; AVX2) kernels=avx2 ;; *) kernels=avx512 ;; esac
	test_expect_success $isa "$isa: dptrain's own kernels run the same level ($kernels)" '
		dptrain --devices | grep "^CPU kernels: $kernels$"
	'
	# oneDNN has float32 Winograd convolutions for AVX-512 only (and oneDNN 2 only);
	# below, dptrain runs its own
	case $isa in SSE41 | AVX2) wino="yes \(dptrain.s" ;; *) wino=yes ;; esac
	test_expect_success $isa "$isa: dptrain --devices says whether Winograd runs ($wino)" '
		dptrain --devices | grep -E "^CPU Winograd: $wino "
	'
	test_expect_success $isa "$isa: every op against the reference backend" '
		run_tap backend
	'
	test_expect_success $isa,TORCH "$isa: every op against PyTorch" '
		run_tap backend_torch
	'
	test_expect_success $isa "$isa: fusing BN, add and ReLU changes no bit" '
		run_tap nn --cpu
	'
	test_expect_success $isa,TORCH "$isa: a training step of every model against PyTorch" '
		run_tap model_parity "$PWD/ref"
	'
	# every float32 3x3 stride-1 convolution by Winograd: dptrain's own below AVX-512
	test_expect_success $isa,TORCH "$isa: the same step with Winograd convolutions" '
		run_tap model_parity --winograd "$PWD/ref"
	'
	# A reference kernel is correct but 100x slower: oneDNN 3.7 picked one for the plain
	# layouts of strided 1x1 convolutions (ResNet shortcuts), and t0700 then took 20 minutes.
	test_expect_success $isa "$isa: no convolution of ResNet-18/50 runs a reference kernel" '
		for m in resnet18 resnet50; do
			printf "{\"model\": {\"name\": \"%s\", \"num_classes\": 10, \"input_shape\": [3, 32, 32]}, \"data\": {\"format\": \"synthetic\", \"train\": {\"size\": 4}, \"batch_size\": 2}, \"train\": {\"epochs\": 1}}\n" \
				$m >$isa.$m.json &&
			ONEDNN_VERBOSE=1 dptrain $isa.$m.json output.dir=$isa.$m >$isa.$m.verbose 2>&1 &&
			grep -q "exec,cpu,convolution," $isa.$m.verbose &&
			! grep -E "exec,cpu,convolution,[^,]*ref" $isa.$m.verbose || return 1
		done
	'
	test_expect_success $isa,FMNIST,RECIPES "$isa: mlp-fmnist.json reaches 0.87 test accuracy" '
		recipe mlp-fmnist 0.87
	'
	test_expect_success $isa,FMNIST,RECIPES "$isa: lenet-fmnist.json reaches 0.87 test accuracy" '
		recipe lenet-fmnist 0.87
	'
	unset ONEDNN_MAX_CPU_ISA
done

test_done
