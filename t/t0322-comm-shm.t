#!/bin/sh
# t0322-comm-shm.t — the CPU engine's shared memory and hierarchical allreduce in real steps:
# srun --dptrain trains 2 ranks on one node through shared memory (the gradients in it, reduced
# in place) to the very bits of the TCP ring (DPTRAIN_COMM_SHM=0), and 2 nodes x 2 ranks in
# network namespaces go through shared memory in each node (the gradients in it, summed in
# place into each node's leader's) and the TCP ring between the nodes, the same bits from run
# to run; no step leaves anything in /dev/shm. Owns its trash directory and its two clusters.

test_description='shared-memory collectives and the hierarchical allreduce in srun --dptrain steps'

. "$(dirname "$0")/sharness.sh"

dp_need_cluster FMNIST

if ip netns add "dptrain-t0322-$$" 2>/dev/null; then
	ip netns del "dptrain-t0322-$$"
	test_set_prereq NETNS
fi

newest() {
	ls -dt "$1"/*.* | head -n 1
}

# the example's MLP, a short run, its outputs under DIR
job() {
	/usr/bin/python3 - "$DPTRAIN_SRC_DIR/contrib/examples/mlp-fmnist.json" "$1" >"$1.json" <<-\EOF
	import json, sys
	c = json.load(open(sys.argv[1]))
	c["output"] = {"dir": sys.argv[2] + "/%j.%s"}
	json.dump(c, sys.stdout)
	EOF
}
args="train.epochs=0 train.max_steps=40 train.log_every=10 data.eval=null"

test_expect_success 'setup: a one-node Slurm' '
	{ ls /dev/shm | grep -i dptrain >shm.before || :; } &&
	dp_cluster_start -N 1 -c 2 &&
	job one
'

test_expect_success '2 ranks on one node: shared memory, the TCP ring'"'"'s bits' '
	timeout 300 srun -n2 --dptrain=one.json dptrain $args >out 2>err &&
	grep "^dptrain: 2 ranks, average of gradients on cpu (shared memory: 2 ranks on 1 node), gradients in shared memory reduced in place," out &&
	shm=$(newest one) &&
	DPTRAIN_COMM_SHM=0 timeout 300 srun -n2 --dptrain=one.json dptrain $args >out 2>err &&
	grep "^dptrain: 2 ranks, average of gradients on cpu (TCP ring), [0-9]* gradient bucket" out &&
	tcp=$(newest one) &&
	test "$shm" != "$tcp" &&
	test -s "$shm/model.safetensors" &&
	cmp "$shm/model.safetensors" "$tcp/model.safetensors" &&
	grep "^epoch: 1 step: 40, loss is " "$shm/device1/train.log" | sed "s/, [0-9.]* img.s//" >a &&
	grep "^epoch: 1 step: 40, loss is " "$tcp/device1/train.log" | sed "s/, [0-9.]* img.s//" >b &&
	test -s a && test_cmp a b
'

test_expect_success NETNS 'setup: two nodes in network namespaces' '
	dp_cluster_stop &&
	dp_cluster_start -d ns --netns -N 2 -c 2 &&
	job two
'

test_expect_success NETNS '2 nodes x 2 ranks: shared memory in each node, the TCP ring between them, the same bits twice' '
	timeout 300 srun -N2 --ntasks-per-node=2 --dptrain=two.json dptrain $args >out 2>err &&
	grep "^dptrain: 4 ranks, average of gradients on cpu (shared memory in each node, TCP ring between 2 nodes), gradients in shared memory reduced in place, [0-9]* gradient bucket" out &&
	first=$(newest two) &&
	test "$(dp_json "$first/rank_table.json" "d[\"server_count\"]")" = 2 &&
	timeout 300 srun -N2 --ntasks-per-node=2 --dptrain=two.json dptrain $args >out 2>err &&
	second=$(newest two) &&
	test "$first" != "$second" &&
	cmp "$first/model.safetensors" "$second/model.safetensors" &&
	DPTRAIN_COMM_SHM=0 timeout 300 srun -N2 --ntasks-per-node=2 --dptrain=two.json dptrain $args >out 2>err &&
	grep "^dptrain: 4 ranks, average of gradients on cpu (TCP ring)" out &&
	grep "^dptrain: done: 40 steps" out
'

# (other programs on the machine may come and go in /dev/shm: only dptrain's names count)
test_expect_success 'no step left anything in /dev/shm, no process maps a segment' '
	{ ls /dev/shm | grep -i dptrain >shm.after || :; } &&
	test_cmp shm.before shm.after &&
	! grep -l "memfd:dptrain-comm" /proc/[0-9]*/maps 2>/dev/null
'

test_done
