#!/bin/sh
# t0940-straggler-nodes.t — the straggler watch on two emulated Slurm nodes: every rank's node
# in the ranks events, hosts in the start event, and a slow node (both its ranks read full-size
# JPEGs) named once as a node, with cause data. Owns its trash directory and cluster.

test_description='a slow node named while a 2-node srun --dptrain job runs'

. "$(dirname "$0")/sharness.sh"

dp_need_cluster
/usr/bin/python3 -c 'import PIL, numpy' 2>/dev/null && test_set_prereq PIL

# newest DIR: the most recent step directory under DIR
newest() {
	ls -dt "$1"/*.* | head -n 1
}

# As t0930: a busy shared machine, so reports of 8 steps and threshold 3; the slow node's ranks
# decode 2048x2048 JPEGs whole where the others decode 32x32 ones (about 10x).
watch="train.straggler_threshold=3 train.straggler_window=8 train.log_every=8"

test_expect_success PIL 'setup: a two-node Slurm, the same 32 pictures small and full-size, a config' '
	dp_cluster_start -N 2 &&
	/usr/bin/python3 "$DPTRAIN_SRC_DIR/t/lib/straggler_pictures.py" &&
	cat >job.json <<-EOF
	{"seed": 1, "model": {"name": "mlp", "num_classes": 2, "input_shape": [3, 32, 32],
	  "hidden": [1024, 1024]},
	 "data": {"format": "imagefolder", "train": {"root": "$PWD/small"}, "batch_size": 8,
	          "workers": 0, "transforms": {"dct_scaling": false}},
	 "optimizer": {"name": "sgd", "lr": 0.01},
	 "train": {"epochs": 0, "max_steps": 96, "threads": 1}, "checkpoint": {"every_epochs": 0},
	 "device": {"kind": "cpu"}, "output": {"dir": "steps/%j.%s"}}
	EOF
'

test_expect_success PIL 'srun -N2 -n4: the second node reads full-size JPEGs: the node is named, cause data' '
	BIG=$PWD/big && export BIG &&
	timeout 300 srun --mpi=pmix -N2 --ntasks-per-node=2 --dptrain=job.json \
		sh -c "if [ \"\$SLURM_NODEID\" = 1 ]; then set -- \"data.train.root=\$BIG\"; fi; exec dptrain $watch \"\$@\"" \
		>out 2>err &&
	cat out &&
	d=$(newest steps) &&
	/usr/bin/python3 - "$d/metrics.jsonl" <<-\EOF &&
	import json, sys
	ev = [json.loads(l) for l in open(sys.argv[1])]
	assert ev[0]["hosts"] == 2 and ev[0]["world_size"] == 4, ev[0]
	ranks = [e for e in ev if e["event"] == "ranks"]
	nodes = [x["node"] for x in ranks[-1]["ranks"]]
	assert nodes[0] == nodes[1] and nodes[2] == nodes[3] and nodes[0] != nodes[2], nodes
	st = [e for e in ev if e["event"] == "straggler"]
	assert len(st) == 1, st
	s = st[0]
	assert s["node_ranks"] == 2 and s["node"] == nodes[2] and s["rank"] in (2, 3), s
	assert s["cause"] == "data" and s["slower"] >= 3, s
	print("named:", s)
	EOF
	grep "^dptrain: node [^ ]* (2 ranks, the slowest rank [23]) is a straggler: .*, waiting on data" out &&
	test $(grep -c "is a straggler" out) = 1
'

test_done
