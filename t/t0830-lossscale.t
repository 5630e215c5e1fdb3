#!/bin/sh
# t0830-lossscale.t — loss scaling (precision.loss_scale): a power-of-two scale, static or
# dynamic, changes no bit of fp32 training (the gradients are scaled and unscaled exactly); an
# overflow skips the step (the weights equal those of the run one step shorter) and halves the
# scale; growth_interval good steps double it; a checkpoint carries the scale across a resume;
# gradients that never become finite stop training with a message. Overflows are made by the
# test hook DPTRAIN_TEST_OVERFLOW_AT (what fp16 does by itself). Owns only its trash directory.

test_description='loss scaling: exact, skip on overflow, growth, resume'

. "$(dirname "$0")/sharness.sh"

fm=/usr/share/datasets/fashion-mnist

cat >mlp.json <<JSON
{
  "seed": 3,
  "model": {"name": "mlp", "num_classes": 10, "input_shape": [1, 28, 28], "hidden": [64]},
  "data": {"format": "idx", "dir": "$fm", "batch_size": 32, "drop_remainder": true,
           "transforms": {"normalize": {"mean": [0.286], "std": [0.353]}}},
  "optimizer": {"name": "adamw", "lr": 0.002, "weight_decay": 0.01},
  "train": {"epochs": 0, "max_steps": 12, "log_every": 1, "threads": 1}
}
JSON

losses() {
	grep '"event":"train"' "$1/metrics.jsonl" | sed 's/.*"global_step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/'
}
# the scale each step ran with, space-separated
scales() {
	grep '"event":"train"' "$1/metrics.jsonl" | sed 's/.*"loss_scale":\([^,}]*\).*/\1/' | tr '\n' ' '
}
same() {
	losses "$2" >"$1.a" && losses "$3" >"$1.b" &&
	test -s "$1.a" && test_cmp "$1.a" "$1.b" &&
	cmp "$2/model.safetensors" "$3/model.safetensors"
}
dyn="precision.loss_scale=dynamic"

test_expect_success FMNIST 'static and dynamic power-of-two scales change no bit of fp32 training' '
	dptrain mlp.json output.dir=plain >plain.out 2>&1 &&
	dptrain mlp.json output.dir=static precision.loss_scale=1024 >static.out 2>&1 &&
	dptrain mlp.json output.dir=dyn $dyn precision.initial_loss_scale=65536 >dyn.out 2>&1 &&
	same s plain static && same d plain dyn &&
	test "$(scales static)" = "1024 1024 1024 1024 1024 1024 1024 1024 1024 1024 1024 1024 " &&
	test "$(scales plain)" = "1 1 1 1 1 1 1 1 1 1 1 1 "
'

test_expect_success FMNIST 'a scale that is not a power of two trains to nearly the same losses' '
	dptrain mlp.json output.dir=odd precision.loss_scale=1000 >odd.out 2>&1 &&
	losses plain >p.l && losses odd >o.l &&
	paste p.l o.l | awk "{ d = \$2 - \$4; if (d < 0) d = -d; if (d > 1e-4 * \$2) bad++ }
		END { exit bad > 0 }"
'

test_expect_success FMNIST 'an overflow skips the step: the weights are those of one step less' '
	DPTRAIN_TEST_OVERFLOW_AT=5 dptrain mlp.json output.dir=ov train.max_steps=5 $dyn \
		precision.initial_loss_scale=256 precision.growth_interval=100 >ov.out 2>&1 &&
	cat ov.out &&
	grep "dptrain: step 5: gradients overflowed at loss scale 256; step skipped, scale now 128" ov.out &&
	dptrain mlp.json output.dir=four train.max_steps=4 >four.out 2>&1 &&
	/usr/bin/python3 "$DPTRAIN_SRC_DIR/t/reference/st_compare.py" ov/model.safetensors \
		four/model.safetensors --rtol 0 &&
	grep "\"skipped_steps\":1,\"loss_scale\":128[,}]" ov/metrics.jsonl
'

test_expect_success FMNIST 'overflows halve the scale, growth_interval good steps double it' '
	DPTRAIN_TEST_OVERFLOW_AT=2,3 dptrain mlp.json output.dir=grow $dyn \
		precision.initial_loss_scale=1024 precision.growth_interval=3 >grow.out 2>&1 &&
	scales grow >got && cat got &&
	test "$(cat got)" = "1024 1024 512 256 256 256 512 512 512 1024 1024 1024 "
'

test_expect_success FMNIST 'the optimizer does not count a skipped step; the checkpoint has the scale' '
	DPTRAIN_TEST_OVERFLOW_AT=3 dptrain mlp.json output.dir=oc train.max_steps=6 $dyn \
		>oc.out 2>&1 &&
	dp_json oc/checkpoints/step-6/trainer_state.json "d[\"optimizer_step\"]" >ostep &&
	test "$(cat ostep)" = 5 &&
	dp_json oc/checkpoints/step-6/trainer_state.json "d[\"loss_scale\"]" >lscale &&
	test "$(cat lscale)" = 32768
'

test_expect_success FMNIST 'a resumed run goes on with the scale and good steps it had' '
	args="$dyn precision.initial_loss_scale=1024 precision.growth_interval=4" &&
	DPTRAIN_TEST_OVERFLOW_AT=2 dptrain mlp.json output.dir=st $args >st.out 2>&1 &&
	DPTRAIN_TEST_OVERFLOW_AT=2 dptrain mlp.json output.dir=rs $args train.max_steps=5 \
		>rs1.out 2>&1 &&
	dptrain mlp.json output.dir=rs $args >rs2.out 2>&1 &&
	grep "resuming from rs/checkpoints/step-5" rs2.out &&
	same r st rs &&
	scales st >st.s && scales rs >rs.s && cat st.s && test_cmp st.s rs.s &&
	test "$(cat st.s)" = "1024 1024 512 512 512 512 1024 1024 1024 1024 2048 2048 " &&
	grep -o "\"skipped_steps\":[0-9]*" st/metrics.jsonl >st.k &&
	grep -o "\"skipped_steps\":[0-9]*" rs/metrics.jsonl | tail -n 1 >rs.k &&
	echo "\"skipped_steps\":1" >want.k && test_cmp want.k st.k && test_cmp want.k rs.k
'

test_expect_success FMNIST 'gradients that never become finite stop training, naming the step' '
	test_expect_code 3 env DPTRAIN_TEST_OVERFLOW_AT=1,2,3,4,5,6,7,8,9,10,11,12 dptrain mlp.json \
		output.dir=bad $dyn precision.initial_loss_scale=0.0000002 >bad.out 2>&1 &&
	cat bad.out &&
	grep "step 2: the gradients are not finite even at loss scale 1e-07" bad.out &&
	grep "training diverged" bad.out
'

test_done
