#!/bin/sh
# t0800-ckpt.t — checkpoints and resume: training 2k steps straight and k + resume + k give
# the same losses (compared as text, i.e. ==) and the same final weights (cmp), for 1 and 2
# ranks, momentum and AdamW, mid-epoch and at an epoch boundary; a corrupt checkpoint is
# skipped with a warning, another model's is refused, --resume picks one, a different world
# size continues the same sample sequence, and SIGTERM checkpoints and stops with status 4.
# Owns only its trash directory.

test_description='checkpoints, bit-exact resume, preemption'

. "$(dirname "$0")/sharness.sh"

fm=/usr/share/datasets/fashion-mnist
ref="$DPTRAIN_SRC_DIR/t/reference"

cat >mlp.json <<EOF
{
  "seed": 7,
  "model": {"name": "mlp", "num_classes": 10, "input_shape": [1, 28, 28], "hidden": [128, 64]},
  "data": {"format": "idx", "dir": "$fm", "batch_size": 64, "drop_remainder": true,
           "transforms": {"normalize": {"mean": [0.286], "std": [0.353]},
                          "random_crop": {"size": 28, "padding": 2}, "horizontal_flip": true}},
  "optimizer": {"name": "momentum", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.0001},
  "train": {"epochs": 0, "max_steps": 40, "log_every": 1, "threads": 1}
}
EOF

# the per-step losses of a run, as printed (%.9g: every float32 bit)
losses() {
	grep '"event":"train"' "$1/metrics.jsonl" | sed 's/.*"global_step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/'
}
# same NAME RUN1 RUN2: the losses of two runs are identical, step for step, and so are the
# final weights
same() {
	losses "$2" >"$1.a" && losses "$3" >"$1.b" &&
	test -s "$1.a" && test_cmp "$1.a" "$1.b" &&
	cmp "$2/model.safetensors" "$3/model.safetensors"
}

test_expect_success FMNIST '1 rank, momentum, mid-epoch: 40 steps = 20 + resume + 20, bit for bit' '
	dptrain mlp.json output.dir=s1 >s1.out 2>&1 &&
	dptrain mlp.json output.dir=r1 train.max_steps=20 >r1a.out 2>&1 &&
	test -f r1/checkpoints/step-20/state.json &&
	dptrain mlp.json output.dir=r1 >r1b.out 2>&1 &&
	grep "resuming from r1/checkpoints/step-20: step 20, epoch 1, sample 1280" r1b.out &&
	same m1 s1 r1
'

test_expect_success FMNIST 'the checkpoint: safetensors weights, optimizer state, checksums, latest' '
	test "$(cat r1/checkpoints/latest)" = step-40 &&
	dp_json r1/checkpoints/step-40/trainer_state.json "d[\"step\"]" >step &&
	test "$(cat step)" = 40 &&
	/usr/bin/python3 "$ref/st_compare.py" r1/checkpoints/step-40/model.safetensors \
		r1/model.safetensors --rtol 0 &&
	/usr/bin/python3 -c "import sys, json, zlib
d = json.load(open(sys.argv[1] + \"/state.json\"))
for n, f in d[\"files\"].items():
    b = open(sys.argv[1] + \"/\" + n, \"rb\").read()
    assert len(b) == f[\"bytes\"] and zlib.crc32(b) == f[\"crc32\"], n
print(sorted(d[\"files\"]))" r1/checkpoints/step-40
'

test_expect_success FMNIST '1 rank, AdamW, at an epoch boundary: 2 epochs = 1 + resume + 1' '
	set -- optimizer.name=adamw optimizer.lr=0.002 optimizer.weight_decay=0.01 \
		data.batch_size=1000 train.max_steps=0 train.epochs=2 &&
	dptrain mlp.json output.dir=s2 "$@" >s2.out 2>&1 &&
	dptrain mlp.json output.dir=r2 "$@" train.epochs=1 >r2a.out 2>&1 &&
	dptrain mlp.json output.dir=r2 "$@" >r2b.out 2>&1 &&
	grep "resuming from r2/checkpoints/step-60: step 60, epoch 2, sample 0" r2b.out &&
	same m2 s2 r2
'

test_expect_success FMNIST,LAUNCH '2 ranks, momentum, mid-epoch: bit for bit' '
	dptrain-run -n 2 -o s3 mlp.json dptrain mlp.json data.batch_size=32 >s3.out 2>&1 &&
	dptrain-run -n 2 -o r3 mlp.json dptrain mlp.json data.batch_size=32 train.max_steps=20 >r3a.out 2>&1 &&
	dptrain-run -n 2 -o r3 mlp.json dptrain mlp.json data.batch_size=32 >r3b.out 2>&1 &&
	grep "resuming from .*r3/checkpoints/step-20" r3b.out &&
	same m3 s3 r3
'

test_expect_success FMNIST,LAUNCH '2 ranks, AdamW, ZeRO-1, at an epoch boundary: bit for bit' '
	set -- data.batch_size=500 optimizer.name=adamw optimizer.lr=0.002 train.max_steps=0 \
		train.epochs=2 parallel.enable_parallel_optimizer=true &&
	dptrain-run -n 2 -o s4 mlp.json dptrain mlp.json "$@" >s4.out 2>&1 &&
	dptrain-run -n 2 -o r4 mlp.json dptrain mlp.json "$@" train.epochs=1 >r4a.out 2>&1 &&
	dptrain-run -n 2 -o r4 mlp.json dptrain mlp.json "$@" >r4b.out 2>&1 &&
	grep "resuming from .*r4/checkpoints/step-60: step 60, epoch 2, sample 0" r4b.out &&
	same m4 s4 r4
'

test_expect_success FMNIST,LAUNCH 'another world size continues the same samples: 2x32 then 4x16 = 2x32 throughout' '
	dptrain-run -n 2 -o w2 mlp.json dptrain mlp.json data.batch_size=32 train.max_steps=20 >w2a.out 2>&1 &&
	dptrain-run -n 4 -o w2 mlp.json dptrain mlp.json data.batch_size=16 >w2b.out 2>&1 &&
	grep "resuming from .*w2/checkpoints/step-20: step 20, epoch 1, sample 1280" w2b.out &&
	losses s3 | tail -n 20 >w.a && losses w2 | tail -n 20 >w.b &&
	/usr/bin/python3 -c "import sys
a = [float(l.split()[1]) for l in open(sys.argv[1])]
b = [float(l.split()[1]) for l in open(sys.argv[2])]
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(len(a), \"steps, worst relative difference\", worst)
sys.exit(len(a) != 20 or worst > 1e-5)" w.a w.b
'

test_expect_success FMNIST 'a truncated newest checkpoint is skipped with a warning naming it' '
	cp -r r1 c1 &&
	f=c1/checkpoints/step-40/model.safetensors &&
	head -c 1000 $f >t && mv t $f &&
	dptrain mlp.json output.dir=c1 train.max_steps=45 >c1.out 2>c1.err &&
	grep "warning: .*step-40.*model.safetensors" c1.err &&
	grep "resuming from c1/checkpoints/step-20" c1.out
'

# reseal DIR KEY JSON: trainer_state.json's KEY set to JSON, its new size and CRC written into
# state.json, as a buggy or hostile writer would: the checksums pass, only the bounds are left
cat >reseal.py <<'EOF'
import json, sys, zlib
d, key, val = sys.argv[1:4]
p = d + "/trainer_state.json"
st = json.load(open(p))
st[key] = json.loads(val)
data = json.dumps(st, indent=1).encode()
open(p, "wb").write(data)
m = json.load(open(d + "/state.json"))
m["files"]["trainer_state.json"] = {"bytes": len(data), "crc32": zlib.crc32(data)}
open(d + "/state.json", "w").write(json.dumps(m, indent=1))
EOF

test_expect_success FMNIST 'trainer_state.json out of bounds, checksums right: skipped with a warning naming it' '
	for kv in offset:1000000000000000 epoch:2147483653 step:4611686018427387904 \
		optimizer_step:-1 world_size:0 batch_size:0 loss_scale:-1; do
		k=${kv%%:*} v=${kv#*:} &&
		rm -rf c3 && cp -r r1 c3 &&
		/usr/bin/python3 reseal.py c3/checkpoints/step-40 $k $v &&
		dptrain mlp.json output.dir=c3 train.max_steps=45 >c3.out 2>c3.err &&
		grep "warning: .*step-40: trainer_state.json: .*$k $v" c3.err &&
		grep "resuming from c3/checkpoints/step-20" c3.out || { cat c3.err; return 1; }
	done &&
	test_expect_code 3 dptrain --resume c3/checkpoints/step-40 mlp.json output.dir=c4 >c4.out 2>c4.err &&
	grep "checkpoint.resume .*step-40: .*loss_scale -1 is not a positive number" c4.err
'

test_expect_success FMNIST 'trainer_state.json changed without its checksum: skipped with a warning' '
	rm -rf c3 && cp -r r1 c3 &&
	sed "s/\"step\": 40/\"step\": 41/" c3/checkpoints/step-40/trainer_state.json >t &&
	! cmp -s t c3/checkpoints/step-40/trainer_state.json &&
	mv t c3/checkpoints/step-40/trainer_state.json &&
	dptrain mlp.json output.dir=c3 train.max_steps=45 >c3.out 2>c3.err &&
	grep "warning: .*step-40.*trainer_state.json" c3.err &&
	grep "resuming from c3/checkpoints/step-20" c3.out
'

test_expect_success FMNIST 'a checkpoint of another model is refused, naming it' '
	test_expect_code 3 dptrain mlp.json output.dir=r1 "model.hidden=[64]" >o.out 2>o.err &&
	grep "r1/checkpoints/step-40 was written for mlp .*109386 parameters" o.err
'

test_expect_success FMNIST '--resume PATH picks a checkpoint; a bad one is an error' '
	dptrain --resume r1/checkpoints/step-20 mlp.json output.dir=p1 >p1.out 2>&1 &&
	grep "resuming from .*r1/checkpoints/step-20: step 20" p1.out &&
	losses s1 | tail -n 20 >m5.a && losses p1 >m5.b && test_cmp m5.a m5.b &&
	cmp s1/model.safetensors p1/model.safetensors &&
	test_expect_code 3 dptrain --resume c1/nothing mlp.json output.dir=p2 >p2.out 2>p2.err &&
	grep "checkpoint.resume .*c1/nothing" p2.err
'

test_expect_success FMNIST 'a resume with another seed goes on, warning that it is not the same run' '
	! grep "warning" p1.out &&
	dptrain --resume r1/checkpoints/step-20 mlp.json output.dir=p3 data.seed=99 >p3.out 2>p3.err &&
	cat p3.err &&
	grep "^dptrain: warning: .*r1/checkpoints/step-20 was written by a run with seed [0-9-]* and data.seed [0-9-]*, this one has [0-9-]* and 99: from here on the data order and augmentation differ" p3.err &&
	grep "resuming from .*r1/checkpoints/step-20: step 20" p3.out
'

test_expect_success FMNIST 'checkpoint.resume=never starts fresh; keep=2 keeps the newest two' '
	dptrain mlp.json output.dir=r1 checkpoint.resume=never checkpoint.every_steps=10 \
		checkpoint.keep=2 >n.out 2>&1 &&
	! grep resuming n.out &&
	ls r1/checkpoints >list && test "$(cat list | tr "\n" " ")" = "latest step-30 step-40 "
'

test_expect_success FMNIST,ROOT 'a full disk: a clear error, exit 3, the previous checkpoint intact' '
	mkdir full &&
	mount -t tmpfs -o size=1200k tmpfs full &&
	test_when_finished "umount full" &&
	test_expect_code 3 dptrain mlp.json output.dir=d1 checkpoint.dir=full/ck \
		checkpoint.every_steps=5 >d1.out 2>d1.err &&
	cat d1.err &&
	grep "step-10.*disk is full" d1.err &&
	ls full/ck >list && test "$(cat list | tr "\n" " ")" = "latest step-5 " &&
	/usr/bin/python3 -c "import sys, json, zlib
d = json.load(open(sys.argv[1] + \"/state.json\"))
for n, f in d[\"files\"].items():
    b = open(sys.argv[1] + \"/\" + n, \"rb\").read()
    assert len(b) == f[\"bytes\"] and zlib.crc32(b) == f[\"crc32\"], n" full/ck/step-5
'

test_expect_success FMNIST,LAUNCH 'SIGTERM: every rank stops after the same step, checkpoints, exits 4; resuming is bit-exact' '
	dptrain-run -n 2 -o g mlp.json dptrain mlp.json data.batch_size=32 train.max_steps=3000 \
		train.log_every=1 >g.out 2>&1 &
	pid=$! &&
	i=0 && until grep -q "step: 30," g.out 2>/dev/null || [ $i -ge 3000 ]; do sleep 0.1; i=$((i + 1)); done &&
	grep -q "step: 30," g.out &&
	kill -TERM $pid &&
	{ wait $pid; s=$?; } && echo "exit $s" && test $s = 4 &&
	grep "stopping on request at step" g.out &&
	at=$(sed -n "s/.*stopping on request at step \([0-9]*\).*/\1/p" g.out) &&
	test -f g/checkpoints/step-$at/state.json &&
	n=$((at + 20)) &&
	dptrain-run -n 2 -o g mlp.json dptrain mlp.json data.batch_size=32 train.max_steps=$n >g2.out 2>&1 &&
	dptrain-run -n 2 -o gs mlp.json dptrain mlp.json data.batch_size=32 train.max_steps=$n >gs.out 2>&1 &&
	same m6 gs g
'

test_done
