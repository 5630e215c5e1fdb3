#!/bin/sh
# t0920-tensorboard.t — output.tensorboard: rank 0's TensorBoard event file, read back by an
# independent reader (t/lib/tfevents.py: its own CRC-32C, and the Event and Summary classes
# protoc generates here from t/data/tensorboard/*.proto, TensorBoard's published definitions):
# every record whole with both CRCs right, the file version, a SessionLog START, and every
# scalar equal (as float32) to metrics.jsonl's value at the same step; the loss scale where
# scaling is on; a run resumed from an earlier checkpoint writes a second file whose START
# makes TensorBoard drop the first run's points past the checkpoint, so each step shows once;
# two ranks write one file; output.tensorboard false writes none; a file that can grow no
# more (RLIMIT_FSIZE, as a full disk) keeps whole records and training goes on.
# Owns only its trash directory.

test_description='TensorBoard event files'

. "$(dirname "$0")/sharness.sh"

tfev="$DPTRAIN_SRC_DIR/t/lib/tfevents.py"
protos="$DPTRAIN_SRC_DIR/t/data/tensorboard"

# Debian's protobuf-compiler and python3-protobuf (make deps)
command -v protoc >/dev/null 2>&1 && /usr/bin/python3 -c 'import google.protobuf' 2>/dev/null &&
	test_set_prereq PROTOBUF

# tb CMD DIR [ARGS]: the reader on an output directory
tb() {
	/usr/bin/python3 "$tfev" "$PWD/pb" "$@"
}
events() { # the event files of a directory tree
	find "$1" -name 'events.out.tfevents.*' | sort
}

# 8 steps an epoch (64 samples, batch 8), an evaluation after each epoch
cat >mlp.json <<EOF
{
  "seed": 5,
  "model": {"name": "mlp", "num_classes": 4, "input_shape": [1, 6, 6], "hidden": [8]},
  "data": {"format": "synthetic", "train": {"size": 64}, "eval": {"size": 24},
           "batch_size": 8, "workers": 0},
  "optimizer": {"name": "adamw", "lr": 0.01},
  "lr_schedule": {"name": "cosine"},
  "train": {"epochs": 3, "log_every": 1, "threads": 1},
  "device": {"kind": "cpu"}
}
EOF

test_expect_success PROTOBUF 'protoc compiles the Event and Summary subset' '
	mkdir pb &&
	protoc -I "$protos" --python_out=pb event.proto summary.proto &&
	test -f pb/event_pb2.py && test -f pb/summary_pb2.py
'

test_expect_success PROTOBUF 'a run writes one event file: whole records, every scalar = metrics.jsonl' '
	dptrain mlp.json output.dir=a >a.out 2>&1 &&
	events a >files &&
	test "$(wc -l <files)" = 1 &&
	grep -E "^a/events\.out\.tfevents\.[0-9]{10}\.$(uname -n)\.[0-9]+\.[0-9]+$" files &&
	tb check a >check 2>&1 &&
	cat check &&
	grep "^train/loss: 24 points, steps 1..24$" check &&
	grep "^train/lr: 24 points, steps 1..24$" check &&
	grep "^train/img_per_s: 24 points, steps 1..24$" check &&
	grep "^train/data_wait_ms: 24 points, steps 1..24$" check &&
	grep "^train/comm_wait_ms: 24 points, steps 1..24$" check &&
	grep "^train/step_ms: 24 points, steps 1..24$" check &&
	grep "^train/compute_ms: 24 points, steps 1..24$" check &&
	grep "^ranks/rank_0/step_ms: 24 points, steps 1..24$" check &&
	! grep "^ranks/rank_1/" check &&
	grep "^eval/accuracy: 3 points, steps 8..24$" check &&
	grep "^eval/loss: 3 points, steps 8..24$" check &&
	grep "^starts: 1$" check &&
	! grep loss_scale check
'

test_expect_success PROTOBUF 'the reader finds a wrong value, a wrong CRC and a cut record' '
	cp -r a wrong &&
	sed "s/\"loss\":[^,]*,\"mean_loss\"/\"loss\":9,\"mean_loss\"/" a/metrics.jsonl >wrong/metrics.jsonl &&
	test_must_fail tb check wrong 2>err &&
	grep "train/loss.* at step 1: " err &&
	f=$(events a | head -n 1) &&
	rm -r wrong && cp -r a wrong && g=wrong/${f#a/} &&
	size=$(wc -c <"$f") &&
	printf "\377" | dd of="$g" bs=1 seek=$((size - 5)) conv=notrunc 2>/dev/null &&
	test_must_fail tb check wrong 2>err &&
	grep "the data.s CRC is wrong" err &&
	head -c $((size - 3)) "$f" >"$g" &&
	test_must_fail tb check wrong 2>err &&
	grep "cut short" err
'

test_expect_success PROTOBUF 'the loss scale, where loss scaling is on: metrics.jsonl'"'"'s' '
	DPTRAIN_TEST_OVERFLOW_AT=3,7 dptrain mlp.json output.dir=ls precision.loss_scale=dynamic \
		precision.initial_loss_scale=1024 precision.growth_interval=4 >ls.out 2>&1 &&
	tb check ls >check 2>&1 &&
	grep "^train/loss_scale: 24 points, steps 1..24$" check &&
	tb dump ls >dump &&
	grep "^train/loss_scale 3 1024$" dump &&
	grep "^train/loss_scale 4 512$" dump
'

# A run that stopped after step 13 with its last checkpoint at 10 (as one killed there), and
# the run resumed from that checkpoint: steps 11..13 are logged twice, TensorBoard shows the
# second run's
test_expect_success PROTOBUF 'a resumed run continues the curves: each step once' '
	dptrain mlp.json output.dir=r train.epochs=0 train.max_steps=13 \
		checkpoint.every_steps=5 >r1.out 2>&1 &&
	dptrain mlp.json output.dir=r checkpoint.resume=r/checkpoints/step-10 >r2.out 2>&1 &&
	grep "resuming from .*r/checkpoints/step-10: step 10" r2.out &&
	events r >files &&
	test "$(wc -l <files)" = 2 &&
	tb check r >check 2>&1 &&
	cat check &&
	grep "^starts: 1 11$" check &&
	grep "^train/loss: 24 points, steps 1..24$" check &&
	grep "^eval/accuracy: 3 points, steps 8..24$" check &&
	tb dump r --raw | sed -n "s/^train\/loss \([0-9]*\) .*/\1/p" | sort -n | uniq -d >twice &&
	printf "11\n12\n13\n" >expect &&
	test_cmp expect twice
'

test_expect_success PROTOBUF,LAUNCH 'two ranks: one event file, rank 0'"'"'s, with the global loss' '
	dptrain-run -n 2 -o two mlp.json dptrain mlp.json data.batch_size=4 >two.out 2>&1 &&
	events two >files &&
	test "$(wc -l <files)" = 1 &&
	grep "^two/events\.out\.tfevents\." files &&
	tb check two >check 2>&1 &&
	grep "^train/loss: 24 points, steps 1..24$" check &&
	for r in 0 1; do
		for f in step_ms compute_ms data_wait_ms comm_wait_ms; do
			grep "^ranks/rank_$r/$f: 24 points, steps 1..24$" check || return 1
		done
	done
'

test_expect_success 'output.tensorboard false: no event file' '
	dptrain mlp.json output.dir=off output.tensorboard=false >off.out 2>&1 &&
	test -s off/metrics.jsonl &&
	events off >files &&
	test "$(wc -l <files)" = 0
'

test_expect_success PROTOBUF 'a file that can grow no more: whole records, said once, training goes on' '
	(trap "" XFSZ && prlimit --fsize=2000 dptrain mlp.json output.dir=full \
		optimizer.name=momentum optimizer.momentum=0.9 output.metrics=false 2>&1
	 echo "exit $?") | cat >full.out &&
	grep "^exit 0$" full.out &&
	f=$(events full) &&
	test $(wc -c <"$f") -le 2000 &&
	tb dump full >dump &&
	test $(grep -c "^train/loss " dump) -lt 24 &&
	test $(grep -c "cannot write an event" full.out) = 1 &&
	grep "dptrain: warning: $f: cannot write an event (.*training goes on" full.out &&
	grep "dptrain: done: 24 steps" full.out
'

test_done
