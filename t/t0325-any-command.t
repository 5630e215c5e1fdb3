#!/bin/sh
# t0325-any-command.t — --dptrain for any command, with no trainer config: srun --dptrain
# alone, a launch-only config (no model, no data), #SBATCH --dptrain, dptrain-run; a PyTorch
# DDP script (gloo, env://) under srun --dptrain with no config; and the bundled trainer
# refused at srun, before anything runs, when its config is missing or lacks model/data.
# Owns its trash directory and cluster.

test_description='--dptrain without a trainer config'

. "$(dirname "$0")/sharness.sh"

dp_need_cluster

# newest PATTERN: the most recent step directory matching PATTERN
newest() {
	ls -dt $1 | head -n 1
}

test_expect_success 'setup: a two-node Slurm with the plugin, a probe, a launch-only config' '
	dp_cluster_start -N 2 &&
	dp_write_probe probe.sh &&
	cat >launch.json <<-\EOF
	{"output": {"dir": "steps/%j.%s"}, "timeouts": {"rendezvous_s": 60}}
	EOF
'

test_expect_success 'srun --dptrain (no file) -N2 -n4 --mpi=pmix: every rank wired up, no config' '
	timeout 60 srun --mpi=pmix -N2 --ntasks-per-node=2 --dptrain ./probe.sh >out &&
	d=$(newest "dptrain.*") &&
	dp_check_ranks "$d" 4 pmix &&
	for r in 0 1 2 3; do
		grep "^RANK=$r$" "$d/device$r/env.log" &&
		! grep "^DPTRAIN_CONFIG=" "$d/device$r/env.log" || return 1
	done
'

test_expect_success 'srun --dptrain (no file) --mpi=none: the SLURM_* source, no config' '
	MASTER_ADDR=127.0.0.1 timeout 60 srun --mpi=none -N2 --ntasks-per-node=2 --dptrain \
		./probe.sh >out &&
	dp_check_ranks "$(newest "dptrain.*")" 4 slurm
'

test_expect_success 'srun --dptrain=launch.json: a config without model or data is valid for a command' '
	timeout 60 srun --mpi=pmix -n2 --dptrain=launch.json ./probe.sh >out 2>err &&
	d=$(newest "steps/*") &&
	dp_check_ranks "$d" 2 pmix &&
	grep "^DPTRAIN_CONFIG=$PWD/launch.json$" "$d/device1/env.log"
'

test_expect_success 'a launch-only config is still checked: a wrong key fails srun, naming it' '
	echo "{\"output\": {\"dir\": 5}}" >bad.json &&
	test_must_fail timeout 60 srun -n1 --dptrain=bad.json ./probe.sh >out 2>err &&
	grep "output.dir: expected a non-empty string, got 5" err &&
	grep "nothing was launched" err &&
	! grep -q "^probe" out
'

test_expect_success 'srun --dptrain dptrain (no file): refused at srun, nothing runs' '
	ls -d dptrain.* steps/* >before &&
	test_must_fail timeout 60 srun -n2 --dptrain dptrain >out 2>err &&
	grep "the bundled trainer needs a job config: --dptrain=JOB.json" err &&
	ls -d dptrain.* steps/* >after &&
	test_cmp before after
'

test_expect_success 'srun --dptrain=launch.json dptrain: the trainer wants its model, said at srun' '
	test_must_fail timeout 60 srun -n2 --dptrain=launch.json dptrain >out 2>err &&
	grep "launch.json: model.name: missing" err &&
	grep "nothing was launched" err &&
	ls -d dptrain.* steps/* >after &&
	test_cmp before after
'

test_expect_success 'sbatch with #SBATCH --dptrain (no file): its srun goes through dptrain' '
	cat >batch.sh <<-\EOF &&
	#!/bin/sh
	#SBATCH --dptrain
	#SBATCH -n 2
	echo "batch script ran: RANK=${RANK:-unset}" >batch.out
	srun ./probe.sh
	EOF
	job=$(sbatch --parsable -o slurm-%j.out batch.sh) &&
	dp_job_wait "$job" &&
	grep "batch script ran: RANK=unset" batch.out &&
	d=$(newest "dptrain.*") &&
	dp_check_ranks "$d" 2 pmix &&
	! grep "^DPTRAIN_CONFIG=" "$d/device0/env.log"
'

test_expect_success 'dptrain-run -n 2 COMMAND: no config needed' '
	timeout 60 dptrain-run -n 2 -o run.%j ./probe.sh >out 2>err &&
	d=$(newest "run.*") &&
	test -s "$d/rank_table.json" &&
	grep "^RANK=1$" "$d/device1/env.log" &&
	! grep "^DPTRAIN_CONFIG=" "$d/device1/env.log" &&
	dptrain-ranktable validate "$d/rank_table.json"
'

test_expect_success 'dptrain-run -n 2 without a config: the bundled trainer is refused' '
	test_must_fail dptrain-run -n 2 >out 2>err &&
	grep "no CONFIG or COMMAND given" err &&
	test_must_fail dptrain-run -n 2 dptrain >out 2>err &&
	grep "the bundled trainer needs a job config" err &&
	test_must_fail dptrain-run -n 1 launch.json >out 2>err &&
	grep "launch.json: model.name: missing" err
'

test_expect_success TORCH 'a PyTorch DDP script (gloo, env://) under srun --dptrain with no config' '
	cat >ddp.py <<-\EOF &&
	import os, sys, torch, torch.distributed as dist
	dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
	r, w = dist.get_rank(), dist.get_world_size()
	assert r == int(os.environ["RANK"]) and w == int(os.environ["WORLD_SIZE"])
	model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1, bias=False))
	with torch.no_grad():
	    model.module.weight.fill_(1.0)
	x = torch.full((1, 4), float(r + 1))
	model(x).sum().backward()  # grad on rank r: r + 1 per weight; DDP averages them
	g = model.module.weight.grad
	want = sum(range(1, w + 1)) / w
	assert torch.allclose(g, torch.full_like(g, want)), (g, want)
	print("ddp rank %d of %d local %s: grad %.3f" % (r, w, os.environ["LOCAL_RANK"], g[0, 0]))
	dist.destroy_process_group()
	# not freeing the DDP model: torch 1.13 can deadlock there (t0330-frameworks.t says how)
	sys.stdout.flush()
	os._exit(0)
	EOF
	# USE_LIBUV=0: torch 2.4 and later ask for the libuv TCPStore by default, and Debian 13s
	# torch 2.6 is built without it (t/reference/ddp_torch.py, dptrain-launch(1))
	USE_LIBUV=0 timeout 120 srun --mpi=pmix -N1 -n2 --dptrain /usr/bin/python3 ddp.py >out 2>err &&
	d=$(newest "dptrain.*") &&
	grep "ddp rank 0 of 2 local 0: grad 1.500" "$d/device0/train.log" &&
	grep "ddp rank 1 of 2 local 1: grad 1.500" "$d/device1/train.log"
'

test_expect_success TORCH 'the same script on two nodes: Gloo finds the interface dptrain chose' '
	USE_LIBUV=0 timeout 120 srun --mpi=pmix -N2 --ntasks-per-node=1 --dptrain \
		/usr/bin/python3 ddp.py \
		>out 2>err &&
	d=$(newest "dptrain.*") &&
	grep "ddp rank 0 of 2 local 0: grad 1.500" "$d/device0/train.log" &&
	grep "ddp rank 1 of 2 local 0: grad 1.500" "$d/device1/train.log"
'

test_expect_success 'framework variables: threads, interface, torchelastic; a user value wins' '
	cat >ifprobe.sh <<-\EOF &&
	#!/bin/sh
	echo "ifaddr $(ip -o addr show dev "$GLOO_SOCKET_IFNAME" | awk "{print \$4}" | cut -d/ -f1 | tr "\n" " ")"
	EOF
	chmod +x ifprobe.sh &&
	timeout 60 srun --mpi=pmix -N2 --ntasks-per-node=1 --dptrain ./ifprobe.sh >out &&
	d=$(newest "dptrain.*") &&
	for r in 0 1; do
		addr=$(/usr/bin/python3 -c "import json, sys; print([d[\"device_ip\"] for s in json.load(open(sys.argv[1]))[\"server_list\"] for d in s[\"device\"] if d[\"rank_id\"] == sys.argv[2]][0])" "$d/rank_table.json" $r) &&
		grep "^ifaddr .*\<$addr " "$d/device$r/train.log" || return 1
	done &&
	# -c 3: SLURM_CPUS_PER_TASK, but never more threads than the CPUs a rank may run on
	cpus=$(nproc) && want=$((cpus < 3 ? cpus : 3)) &&
	# (this suite sets OMP_WAIT_POLICY for its own programs: unset, the launcher sets it)
	env -u OMP_WAIT_POLICY timeout 60 srun --mpi=pmix -N2 --ntasks-per-node=2 -c 3 --dptrain ./probe.sh >out &&
	d=$(newest "dptrain.*") &&
	for r in 0 1 2 3; do
		e="$d/device$r/env.log" &&
		grep "^OMP_NUM_THREADS=$want$" "$e" &&
		grep "^OMP_WAIT_POLICY=passive$" "$e" &&
		ifname=$(sed -n "s/^GLOO_SOCKET_IFNAME=//p" "$e") &&
		test -n "$ifname" &&
		grep "^NCCL_SOCKET_IFNAME=$ifname$" "$e" &&
		grep "^TORCHELASTIC_RUN_ID=[0-9][0-9]*\.[0-9][0-9]*$" "$e" &&
		grep "^TORCHELASTIC_ERROR_FILE=$PWD/$d/device$r/error.json$" "$e" &&
		grep "^TORCHELASTIC_USE_AGENT_STORE=False$" "$e" &&
		grep "^ROLE_RANK=$r$" "$e" && grep "^ROLE_WORLD_SIZE=4$" "$e" || return 1
	done &&
	OMP_NUM_THREADS=7 GLOO_SOCKET_IFNAME=mine OMP_WAIT_POLICY=active timeout 60 srun -n2 --dptrain ./probe.sh >out &&
	d=$(newest "dptrain.*") &&
	grep "^OMP_NUM_THREADS=7$" "$d/device1/env.log" &&
	grep "^GLOO_SOCKET_IFNAME=mine$" "$d/device1/env.log" &&
	grep "^OMP_WAIT_POLICY=active$" "$d/device1/env.log" &&
	# a spin count set by the user: no wait policy over it
	env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=1000 timeout 60 srun -n2 --dptrain ./probe.sh >out &&
	d=$(newest "dptrain.*") &&
	grep "^GOMP_SPINCOUNT=1000$" "$d/device1/env.log" &&
	! grep "^OMP_WAIT_POLICY=" "$d/device1/env.log"
'

test_expect_success 'network.interface in a launch-only config; DPTRAIN_IFACE wins; a wrong one is named' '
	cat >lo.json <<-\EOF &&
	{"output": {"dir": "lo.%j"}, "network": {"interface": "lo"}}
	EOF
	timeout 60 srun --mpi=pmix -n2 --dptrain=lo.json ./probe.sh >out &&
	d=$(newest "lo.*") &&
	grep "^GLOO_SOCKET_IFNAME=lo$" "$d/device1/env.log" &&
	test "$(dp_json "$d/rank_table.json" "d[\"server_list\"][0][\"device\"][1][\"device_ip\"]")" = 127.0.0.1 &&
	DPTRAIN_IFACE=eth0 timeout 60 srun --mpi=pmix -n2 --dptrain=lo.json ./probe.sh >out &&
	d=$(newest "lo.*") &&
	grep "^GLOO_SOCKET_IFNAME=eth0$" "$d/device1/env.log" &&
	cat >bad-if.json <<-\EOF &&
	{"network": {"interface": "nosuch0"}}
	EOF
	test_must_fail timeout 60 srun --mpi=pmix -n1 --dptrain=bad-if.json ./probe.sh >out 2>err &&
	grep "rank 0 on n[12]: no interface .nosuch0. on this node (interfaces: .*lo.*); set DPTRAIN_IFACE or the config.s network.interface to one of them" err
'

test_expect_success TORCH 'torch sees a torchelastic launch' '
	echo "import torch.distributed as d; print(\"elastic\", d.is_torchelastic_launched())" >el.py &&
	timeout 60 srun -n1 --dptrain /usr/bin/python3 el.py >out &&
	grep "elastic True" "$(newest "dptrain.*")/device0/train.log"
'

test_expect_success TORCH 'a rank that fails in a @record function: its exception, said once' '
	cat >fail.py <<-\EOF &&
	import os, time
	from torch.distributed.elastic.multiprocessing.errors import record
	@record
	def main():
	    if os.environ["RANK"] == "1":
	        raise ValueError("boom at rank 1")
	    time.sleep(120)  # ended with the step
	main()
	EOF
	test_must_fail timeout 100 srun --mpi=pmix -n2 --dptrain /usr/bin/python3 fail.py \
		>out 2>err &&
	d=$(newest "dptrain.*") &&
	{
		test "$(grep -c "it recorded: ValueError: boom at rank 1; the traceback is in $PWD/$d/device1/error.json" err)" = 1 &&
		grep "rank 1 on n[12]: the command exited with status 1 (it recorded" err &&
		grep "Traceback" "$d/device1/error.json" || { cat err >&2; false; }
	} &&
	test_must_fail timeout 100 dptrain-run -n 2 -o failrun.%j /usr/bin/python3 fail.py \
		>out 2>err &&
	d=$(newest "failrun.*") &&
	{
		grep "dptrain-run: rank 1 exited with status 1 .*; it recorded: ValueError: boom at rank 1 (the traceback is in $PWD/$d/device1/error.json)" err ||
			{ cat err >&2; false; }
	}
'

test_expect_success 'an error file of an earlier run is not this run'"'"'s' '
	timeout 60 dptrain-run -n 2 -o failrun.%j sh -c "test ! -e \"\$TORCHELASTIC_ERROR_FILE\" && echo ok-\$RANK" >out 2>err &&
	d=$(newest "failrun.*") &&
	echo "{\"message\": {\"message\": \"OldError: stale\"}}" >"$d/device1/error.json" &&
	test_must_fail timeout 60 dptrain-run -n 2 -o "$d" sh -c "exit \$RANK" >out 2>err &&
	grep "dptrain-run: rank 1 exited with status 1" err &&
	! grep "OldError" err
'

test_done
