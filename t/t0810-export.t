#!/bin/sh
test_description='exported weights: PyTorch loads model.safetensors and evaluates it as dptrain did'
. "$(dirname "$0")/sharness.sh"

ex="$DPTRAIN_SRC_DIR/contrib/examples"
ref="$DPTRAIN_SRC_DIR/t/reference"

eval_torch() {
	/usr/bin/python3 "$ref/eval_torch.py" "$@"
}

# same_eval METRICS TORCH_JSON TOL: dptrain's last evaluation (metrics.jsonl) against
# eval_torch's. The counts must be equal, the correct counts within TOL and the mean losses
# within 1e-3 relative. TOL: dptrain and PyTorch sum convolutions and matrix products in other
# orders, so logits differ by float32 rounding (1e-6 relative, far below 1e-3); a prediction
# can only flip where the two largest logits are that close, which eval_torch counts as
# near_ties (top two within 1e-3 relative: 10 of 10000 for lenet after an epoch, 0 of 500 for
# the resnet). TOL is 5 per 10000 samples: room for a few such flips, while a wrong weight, a
# lost buffer or another normalisation moves the count by hundreds (the last tests).
same_eval() {
	/usr/bin/python3 - "$@" <<-\EOF
	import json, sys
	metrics, torch_out, tol = sys.argv[1], sys.argv[2], int(sys.argv[3])
	ev = [json.loads(l) for l in open(metrics) if '"event":"eval"' in l]
	if not ev:
	    sys.exit("same_eval: no eval event in %s" % metrics)
	d, t = ev[-1], json.load(open(torch_out))
	print("dptrain: %d/%d loss %.9g; pytorch: %d/%d loss %.9g, near ties %d"
	      % (d["correct"], d["count"], d["loss"], t["correct"], t["count"], t["loss"],
	         t["near_ties"]))
	if d["count"] != t["count"]:
	    sys.exit("same_eval: dptrain evaluated %d samples, pytorch %d" % (d["count"], t["count"]))
	if abs(d["correct"] - t["correct"]) > tol:
	    sys.exit("same_eval: correct counts differ by %d (more than %d)"
	             % (abs(d["correct"] - t["correct"]), tol))
	if abs(d["loss"] - t["loss"]) > 1e-3 * abs(d["loss"]):
	    sys.exit("same_eval: losses differ by more than 1e-3 relative")
	EOF
}

# change_weights IN OUT WHAT: a copy of IN with one change, written by ddp_torch's own
# safetensors code: "bias" adds 3 to the last layer's bias for class 0, "bn-stats" resets
# every BatchNorm's running mean and variance to 0 and 1.
change_weights() {
	/usr/bin/python3 - "$ref" "$@" <<-\EOF
	import sys
	sys.path.insert(0, sys.argv[1])
	import ddp_torch
	src, dst, what = sys.argv[2:5]
	w = ddp_torch.read_safetensors(src)
	if what == "bias":
	    last = [k for k in w if k.endswith(".bias")][-1]
	    w[last][0] += 3.0
	else:
	    for k in list(w):
	        if k.endswith(".running_mean"):
	            w[k].zero_()
	        elif k.endswith(".running_var"):
	            w[k].fill_(1.0)
	ddp_torch.write_safetensors(dst, w)
	EOF
}

# Under the sanitizers dptrain runs several times slower: fewer steps, a smaller eval set.
if test "$DPTRAIN_SAN" = 1; then
	lenet_args="train.epochs=0 train.max_steps=300"
	rn_steps=20
	rn_eval=200
else
	lenet_args="train.epochs=1"
	rn_steps=60
	rn_eval=500
fi
rn_tol=$(((5 * rn_eval + 9999) / 10000))

test_expect_success FMNIST,TORCH 'lenet: PyTorch evaluates the exported weights as dptrain did' '
	dptrain "$ex/lenet-fmnist.json" output.dir=lenet train.log_every=1000 $lenet_args >out &&
	cat out &&
	test -s lenet/model.safetensors &&
	eval_torch "$ex/lenet-fmnist.json" lenet/model.safetensors >torch.json &&
	cat torch.json &&
	same_eval lenet/metrics.jsonl torch.json 5
'

# BatchNorm: eval mode uses the running statistics, so they must be in the file under
# PyTorch's names and must have been accumulated as PyTorch does. A first part of the
# Fashion-MNIST test set keeps the 2-core evaluation of a resnet18 short.
test_expect_success FMNIST,TORCH "resnet18 (small stem): $rn_steps steps, the same evaluation" '
	/usr/bin/python3 - $rn_eval <<-\EOF &&
	import gzip, struct, sys
	n = int(sys.argv[1])
	src = "/usr/share/datasets/fashion-mnist/t10k-%s-idx%d-ubyte.gz"
	x = gzip.open(src % ("images", 3)).read()
	y = gzip.open(src % ("labels", 1)).read()
	open("ev-images", "wb").write(struct.pack(">IIII", 0x803, n, 28, 28) + x[16:16 + n * 784])
	open("ev-labels", "wb").write(struct.pack(">II", 0x801, n) + y[8:8 + n])
	EOF
	cat >rn.json <<-EOF &&
	{
	  "seed": 3,
	  "model": {"name": "resnet18", "num_classes": 10, "input_shape": [1, 28, 28],
	            "stem": "small"},
	  "data": {
	    "format": "idx",
	    "dir": "/usr/share/datasets/fashion-mnist",
	    "eval": {"images": "ev-images", "labels": "ev-labels"},
	    "batch_size": 32,
	    "eval_batch_size": 100,
	    "transforms": {"normalize": {"mean": [0.2860], "std": [0.3530]}}
	  },
	  "optimizer": {"name": "adamw", "lr": 0.001},
	  "train": {"epochs": 0, "max_steps": $rn_steps, "log_every": 20}
	}
	EOF
	dptrain rn.json output.dir=rn >out &&
	cat out &&
	eval_torch rn.json rn/model.safetensors >torch.json &&
	cat torch.json &&
	same_eval rn/metrics.jsonl torch.json $rn_tol
'

test_expect_success FMNIST,TORCH 'the check fails on lenet weights with one bias changed' '
	change_weights lenet/model.safetensors bias.safetensors bias &&
	eval_torch "$ex/lenet-fmnist.json" bias.safetensors >torch.json &&
	cat torch.json &&
	! same_eval lenet/metrics.jsonl torch.json 5 2>err &&
	grep "same_eval: correct counts differ" err
'

test_expect_success FMNIST,TORCH 'the check fails on resnet18 weights without the BatchNorm statistics' '
	change_weights rn/model.safetensors nostats.safetensors bn-stats &&
	eval_torch rn.json nostats.safetensors >torch.json &&
	cat torch.json &&
	! same_eval rn/metrics.jsonl torch.json $rn_tol 2>err &&
	grep "same_eval: correct counts differ" err
'

test_expect_success FMNIST,TORCH 'weights of another model are refused, the missing tensors named' '
	test_expect_code 1 eval_torch rn.json lenet/model.safetensors >out 2>err &&
	cat err &&
	test_must_be_empty out &&
	grep "^eval_torch: lenet/model.safetensors does not hold the weights of the model rn.json names: missing \[.bn1.bias.," err
'

test_expect_success TORCH 'a missing weights file: exit 1, the file named' '
	test_expect_code 1 eval_torch "$ex/lenet-fmnist.json" nothere.safetensors 2>err &&
	grep "^eval_torch: nothere.safetensors: no such file" err
'

test_done
