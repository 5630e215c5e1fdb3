#!/bin/sh
# t0330-frameworks.t — real clients on two nodes in network namespaces (each its own address),
# with emulated GPUs Slurm binds as it binds real ones: what LOCAL_RANK, DPTRAIN_GPU and
# CUDA_VISIBLE_DEVICES are under --gpus-per-node, --gres=gpu:N and --gpus-per-task, and the
# warning a LOCAL_RANK-indexing script gets where that cannot work; a PyTorch DDP script under
# --mpi=pmix, --mpi=none and dptrain-run; mpi4py beside torch in one rank; MindSpore's
# dynamic-cluster (msrun) variables and scheduler, and device_ip from hccn.conf.
# Owns its trash directory and cluster.

test_description='framework scripts under --dptrain: GPU binding, PyTorch, MPI, MindSpore'

. "$(dirname "$0")/sharness.sh"

dp_need_cluster

/usr/bin/python3 -c 'import mpi4py' 2>/dev/null && test_set_prereq MPI4PY

newest() {
	ls -dt $1 | head -n 1
}

# show COMMAND...: run it with its output in out and err; when it fails, say so with its
# error output (which the test's log would not otherwise have)
# A command still running after 90 s (the tests give 120) leaves evidence: the process tree
# with each process's wait channel, and the Python ranks' stacks (SIGUSR1: ddp.py registers
# faulthandler for it) in their train.log; a failure prints both. (Once, under CI's load, a
# step whose two DDP ranks had both printed their result did not end: torch's teardown, see
# ddp.py below.)
show() {
	: >.show-start
	rm -f hung.ps
	(sleep 90 && ps -eo pid,ppid,stat,wchan:24,etime,args --forest >hung.ps 2>&1 &&
		for p in $(pgrep -f "python3 ddp\.py"); do
			test "$(cat /proc/$p/comm 2>/dev/null)" = python3 &&
				case "$(readlink /proc/$p/cwd)" in "$PWD"*) kill -USR1 $p ;; esac
		done) &
	_wd=$!
	_rc=0
	"$@" >out 2>err || _rc=$?
	pkill -P $_wd 2>/dev/null
	kill $_wd 2>/dev/null
	wait $_wd 2>/dev/null
	test $_rc = 0 && return 0
	echo "failed with status $_rc: $*" >&2
	cat err >&2
	if test -s hung.ps; then
		echo "processes after 90 s:" >&2
		cat hung.ps >&2
		find . -name train.log -newer .show-start -exec tail -n 40 {} + >&2
	fi
	return $_rc
}

# gpu_check DIR N: every rank's gpuprobe line: DPTRAIN_GPU is a device the rank sees, and it
# is what LOCAL_RANK % (the number it sees) gives, as the warning advises.
gpu_check() {
	for r in $(seq 0 $(($2 - 1))); do
		line=$(grep "^gpu " "$1/device$r/train.log") &&
		eval "${line#gpu }" &&
		test "$visible" -ge 1 && test "$dptrain_gpu" -lt "$visible" &&
		test "$dptrain_gpu" = $((local % visible)) || return 1
	done
}

test_expect_success 'setup: two nodes in their own namespaces, two emulated GPUs each' '
	dp_cluster_start -N 2 -c 4 --gpus 2 --netns &&
	cat >gpuprobe.sh <<-\EOF &&
	#!/bin/sh
	n=$(printf "%s" "$CUDA_VISIBLE_DEVICES" | tr "," "\n" | grep -c .)
	echo "gpu rank=$RANK local=$LOCAL_RANK dptrain_gpu=$DPTRAIN_GPU visible=$n cvd=$CUDA_VISIBLE_DEVICES"
	EOF
	chmod +x gpuprobe.sh
'

test_expect_success '--gpus-per-node=2: each rank sees both; LOCAL_RANK is its GPU, no warning' '
	show timeout 60 srun -N2 --ntasks-per-node=2 --gpus-per-node=2 --dptrain ./gpuprobe.sh &&
	d=$(newest "dptrain.*") &&
	gpu_check "$d" 4 &&
	for r in 0 1 2 3; do
		grep "^gpu rank=$r local=$((r % 2)) dptrain_gpu=$((r % 2)) visible=2 cvd=0,1$" \
			"$d/device$r/train.log" || return 1
	done &&
	! grep -i warning err $d/device*/train.log
'

test_expect_success '--gres=gpu:2: the same binding, no warning' '
	show timeout 60 srun -N2 --ntasks-per-node=2 --gres=gpu:2 --dptrain ./gpuprobe.sh &&
	d=$(newest "dptrain.*") &&
	gpu_check "$d" 4 &&
	grep "^gpu rank=3 local=1 dptrain_gpu=1 visible=2" "$d/device3/train.log" &&
	! grep -i warning err $d/device*/train.log
'

test_expect_success '--gpus-per-task=1: LOCAL_RANK 1 has no device 1; said once on the console, and in its log' '
	show timeout 60 srun -N2 --ntasks-per-node=2 --gpus-per-task=1 --dptrain ./gpuprobe.sh &&
	cat err >&2 &&
	d=$(newest "dptrain.*") &&
	gpu_check "$d" 4 &&
	grep "^gpu rank=1 local=1 dptrain_gpu=0 visible=1" "$d/device1/train.log" &&
	test "$(grep -c warning err)" = 1 &&
	grep "^dptrain-launch: rank 0 on n1: warning: ranks 1, 3 have a LOCAL_RANK at or above the number of GPUs they see (rank 1 sees 1; .*torch.cuda.set_device(LOCAL_RANK) fails there; use DPTRAIN_GPU .* or LOCAL_RANK % torch.cuda.device_count()" err &&
	grep "ranks 1, 3 have a LOCAL_RANK" "$d/device0/train.log" &&
	for r in 1 3; do
		grep "^dptrain-launch: rank $r on n[12]: warning: LOCAL_RANK is 1 but this rank sees 1 GPU (CUDA_VISIBLE_DEVICES=[01]): .*use DPTRAIN_GPU (0 here) or LOCAL_RANK % torch.cuda.device_count()" \
			"$d/device$r/train.log" || return 1
	done &&
	! grep -i warning "$d/device2/train.log"
'

test_expect_success 'the same binding under dptrain-run: the warning comes from the launcher there too' '
	cat >ok.json <<-\EOF &&
	{"device": {"allow_shared_gpu": true}}
	EOF
	show env CUDA_VISIBLE_DEVICES=0 timeout 60 dptrain-run -n 2 -o shared ok.json ./gpuprobe.sh &&
	grep "warning: rank 1 has a LOCAL_RANK at or above the number of GPUs it sees (rank 1 sees 1" err &&
	grep "warning: LOCAL_RANK is 1 but this rank sees 1 GPU (CUDA_VISIBLE_DEVICES=0)" shared/device1/train.log
'

cat >ddp.py <<\EOF
# A DDP script as the PyTorch tutorials write it: env://, the local rank picks the device.
# It ends with os._exit: torch 1.13's ProcessGroupGloo destructor joins its worker thread with
# the GIL held, and a worker dropping a tensor that has a Python object waits for the GIL, so
# freeing the DDP model (its Reducer holds the group) deadlocks now and then (3 runs in 173
# here; gdb: ~Reducer, ~ProcessGroupGloo, thread::join against ~TensorImpl,
# PyEval_AcquireThread). That is torch's teardown, not the launcher these tests are about.
import faulthandler, os, signal, sys, torch, torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

faulthandler.register(signal.SIGUSR1, all_threads=True)  # stacks, should it hang (show)

@record
def main():
    local = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local % torch.cuda.device_count())
    dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    r, w = dist.get_rank(), dist.get_world_size()
    assert r == int(os.environ["RANK"]) and w == int(os.environ["WORLD_SIZE"])
    assert local < int(os.environ["LOCAL_WORLD_SIZE"])
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1, bias=False))
    with torch.no_grad():
        model.module.weight.fill_(1.0)
    model(torch.full((1, 4), float(r + 1))).sum().backward()
    g = model.module.weight.grad
    want = sum(range(1, w + 1)) / w  # DDP averages r + 1 over the ranks
    assert torch.allclose(g, torch.full_like(g, want)), (g, want)
    print("ddp rank %d of %d local %d on %s: grad %.3f"
          % (r, w, local, os.environ.get("SLURMD_NODENAME", "-"), g[0, 0]))
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # before the model is freed (above)

main()
EOF

# ddp_check DIR: the four ranks of two nodes trained and agree
ddp_check() {
	for r in 0 1 2 3; do
		grep "^ddp rank $r of 4 local $((r % 2)) on n$((r / 2 + 1)): grad 2.500$" \
			"$1/device$r/train.log" || return 1
	done
}

# USE_LIBUV=0: Debian 13's torch 2.6 lacks the libuv TCPStore torch asks for by default
test_expect_success TORCH 'a DDP script on two nodes under srun --mpi=pmix --dptrain' '
	show env USE_LIBUV=0 timeout 120 srun --mpi=pmix -N2 --ntasks-per-node=2 --dptrain \
		/usr/bin/python3 ddp.py &&
	ddp_check "$(newest "dptrain.*")"
'

test_expect_success TORCH 'the same under --mpi=none: the SLURM_* source finds master and interface' '
	show env USE_LIBUV=0 timeout 120 srun --mpi=none -N2 --ntasks-per-node=2 --dptrain \
		/usr/bin/python3 ddp.py &&
	d=$(newest "dptrain.*") &&
	ddp_check "$d" &&
	grep "^DPTRAIN_SOURCE=slurm$" "$d/device3/env.log" &&
	grep "^MASTER_ADDR=10.251.0.2$" "$d/device3/env.log"
'

# (the step itself needs no PMIx: --mpi=none)
test_expect_success TORCH 'the same under dptrain-run on one node, and dptrain-run inside a step' '
	show env USE_LIBUV=0 timeout 120 dptrain-run -n 2 -o run1 /usr/bin/python3 ddp.py &&
	grep "^ddp rank 1 of 2 local 1 on -: grad 1.500$" run1/device1/train.log &&
	show env USE_LIBUV=0 timeout 120 srun --mpi=none -N1 -n1 -c 2 dptrain-run -n 2 -o run2 \
		/usr/bin/python3 ddp.py &&
	grep "^ddp rank 0 of 2 local 0 on n[12]: grad 1.500$" run2/device0/train.log &&
	grep "^ddp rank 1 of 2 local 1 on n[12]: grad 1.500$" run2/device1/train.log
'

cat >mpitorch.py <<\EOF
# mpi4py and torch.distributed in one rank: MPI from PMIx, gloo from dptrain's variables.
import os
from mpi4py import MPI
import torch, torch.distributed as dist
c = MPI.COMM_WORLD
s = c.allreduce(c.Get_rank() + 1)
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
assert c.Get_rank() == dist.get_rank() == int(os.environ["RANK"]), "ranks differ"
assert c.Get_size() == dist.get_world_size() == int(os.environ["WORLD_SIZE"]), "sizes differ"
print("mpi rank %d of %d sum %d, torch sum %d" % (c.Get_rank(), c.Get_size(), s, int(t.item())))
dist.destroy_process_group()
EOF

test_expect_success TORCH,MPI4PY 'mpi4py beside torch in one rank (OMPI_MCA_btl=self,tcp)' '
	show env OMPI_MCA_btl=self,tcp USE_LIBUV=0 timeout 120 srun --mpi=pmix -N1 -n2 --dptrain \
		/usr/bin/python3 mpitorch.py &&
	d=$(newest "dptrain.*") &&
	grep "^mpi rank 0 of 2 sum 3, torch sum 3$" "$d/device0/train.log" &&
	grep "^mpi rank 1 of 2 sum 3, torch sum 3$" "$d/device1/train.log"
'

# OpenMPI 5 (Debian 13) may not start across emulated nodes at all; where plain mpi4py does,
# so must it under --dptrain.
if test_have_prereq TORCH,MPI4PY &&
	OMPI_MCA_btl=self,tcp timeout 120 srun --mpi=pmix -N2 --ntasks-per-node=1 \
		/usr/bin/python3 -c "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()" \
		>plain.out 2>&1; then
	test_set_prereq MPI_NODES
fi

test_expect_success TORCH,MPI4PY,MPI_NODES 'mpi4py beside torch on two nodes' '
	show env OMPI_MCA_btl=self,tcp USE_LIBUV=0 timeout 120 srun --mpi=pmix -N2 --ntasks-per-node=2 \
		--dptrain /usr/bin/python3 mpitorch.py &&
	d=$(newest "dptrain.*") &&
	grep "^mpi rank 3 of 4 sum 10, torch sum 10$" "$d/device3/train.log"
'

# Its name is this run's own, so that a look for leftovers sees no one else's processes.
MS=ms-t0330-$$.py
cat >"$MS" <<\EOF
# A stand-in for a MindSpore script started as msrun starts it (dynamic cluster): the scheduler
# role (MS_ROLE=MS_SCHED) accepts MS_WORKER_NUM workers on MS_SCHED_HOST:MS_SCHED_PORT; each
# worker (MS_ROLE=MS_WORKER) joins with its MS_NODE_ID. T0330_LINGER: the scheduler stays on.
import os, socket, sys, time
role = os.environ["MS_ROLE"]
host, port = os.environ["MS_SCHED_HOST"], int(os.environ["MS_SCHED_PORT"])
n = int(os.environ["MS_WORKER_NUM"])
socket.inet_aton(host)  # an address, as MindSpore needs
if role == "MS_SCHED":
    assert "MS_NODE_ID" not in os.environ and os.environ["RANK_ID"] == "0", "scheduler env"
    s = socket.create_server((host, port))
    s.settimeout(int(os.environ["MS_TOPO_TIMEOUT"]))
    ids = []
    for _ in range(n):
        c, _ = s.accept()
        ids.append(int(c.recv(64).decode()))
        c.sendall(b"ok")
        c.close()
    print("scheduler pid %d: workers %s joined, cwd %s" % (os.getpid(), sorted(ids), os.getcwd()),
          flush=True)
    if os.environ.get("T0330_LINGER"):
        time.sleep(3600)
    sys.exit(0 if sorted(ids) == list(range(n)) else 1)
assert role == "MS_WORKER", role
me = int(os.environ["MS_NODE_ID"])
assert me == int(os.environ["RANK_ID"]) == int(os.environ["RANK"]), "MS_NODE_ID is the rank"
assert n == int(os.environ["RANK_SIZE"]) == int(os.environ["WORLD_SIZE"]), "MS_WORKER_NUM"
deadline = time.time() + int(os.environ["MS_TOPO_TIMEOUT"])
while True:
    try:
        c = socket.create_connection((host, port), timeout=5)
        break
    except OSError:
        if time.time() > deadline:
            raise
        time.sleep(0.1)
c.sendall(str(me).encode())
assert c.recv(64) == b"ok"
print("worker %d of %d joined %s:%d device %s cwd %s"
      % (me, n, host, port, os.environ["DEVICE_ID"], os.getcwd()), flush=True)
EOF

# ms_check DIR N: every worker joined the scheduler that rank 0's launcher started, at the
# master's address and port, and the scheduler saw them all
ms_check() {
	master=$(sed -n "s/^MASTER_ADDR=//p" "$1/device0/env.log") &&
	port=$(sed -n "s/^MASTER_PORT=//p" "$1/device0/env.log") &&
	for r in $(seq 0 $(($2 - 1))); do
		e="$1/device$r/env.log" &&
		grep "^MS_ROLE=MS_WORKER$" "$e" && grep "^MS_NODE_ID=$r$" "$e" &&
		grep "^MS_WORKER_NUM=$2$" "$e" && grep "^MS_SCHED_HOST=$master$" "$e" &&
		grep "^MS_SCHED_PORT=$port$" "$e" && grep "^MS_TOPO_TIMEOUT=60$" "$e" &&
		grep "^worker $r of $2 joined $master:$port " "$1/device$r/train.log" || return 1
	done &&
	grep "^scheduler pid [0-9]*: workers \[$(seq -s ", " 0 $(($2 - 1)))\] joined" \
		"$1/scheduler.log" &&
	test $(ls "$1"/device*/train.log | wc -l) = $2
}

test_expect_success 'mindspore.dynamic_cluster under srun --mpi=pmix: MS_* and a scheduler, as msrun' '
	cat >ms.json <<-\EOF &&
	{"output": {"dir": "ms.%j"}, "mindspore": {"dynamic_cluster": true},
	 "timeouts": {"rendezvous_s": 60}}
	EOF
	show timeout 120 srun --mpi=pmix -N2 --ntasks-per-node=2 --dptrain=ms.json \
		/usr/bin/python3 "$MS" &&
	d=$(newest "ms.*") &&
	ms_check "$d" 4 &&
	grep "^MASTER_ADDR=10.251.0.2$" "$d/device3/env.log" &&
	! pgrep -f "python3 $MS"
'

test_expect_success 'the same under --mpi=none (the port rank 0 served the rendezvous on)' '
	show timeout 120 srun --mpi=none -N2 --ntasks-per-node=2 --dptrain=ms.json \
		/usr/bin/python3 "$MS" &&
	ms_check "$(newest "ms.*")" 4
'

test_expect_success 'the same under dptrain-run' '
	show timeout 120 dptrain-run -n 3 -o msrun ms.json /usr/bin/python3 "$MS" &&
	ms_check msrun 3
'

test_expect_success 'a scheduler that does not end by itself is ended after rank 0, with the step' '
	show env T0330_LINGER=1 timeout 200 srun --mpi=pmix -N2 --ntasks-per-node=1 --dptrain=ms.json \
		/usr/bin/python3 "$MS" &&
	d=$(newest "ms.*") &&
	pid=$(sed -n "s/^scheduler pid \([0-9]*\):.*/\1/p" "$d/scheduler.log") &&
	test -n "$pid" &&
	! kill -0 "$pid" 2>/dev/null &&
	! pgrep -f "python3 $MS"
'

test_expect_success 'without mindspore.dynamic_cluster: no MS_* and no scheduler' '
	show timeout 60 srun --mpi=pmix -N1 -n2 --dptrain ./gpuprobe.sh &&
	d=$(newest "dptrain.*") &&
	! grep "^MS_" "$d"/device*/env.log &&
	test ! -e "$d/scheduler.log"
'

test_expect_success 'device_ip from each node'"'"'s hccn.conf (%n: a file per emulated node)' '
	printf "address_0=192.168.100.11\nnetmask_0=255.255.255.0\naddress_1=192.168.101.11\n" \
		>hccn.n1.conf &&
	printf "# hccn_tool -i 1 -ip -s\naddress_0=192.168.100.12\naddress_1 = 192.168.101.12\n" \
		>hccn.n2.conf &&
	cat >hccn.json <<-\EOF &&
	{"output": {"dir": "hccn.%j"}, "mindspore": {"hccn_conf": "hccn.%n.conf"}}
	EOF
	for mpi in pmix none; do
		show timeout 60 srun --mpi=$mpi -N2 --ntasks-per-node=2 --dptrain=hccn.json true &&
		d=$(newest "hccn.*") &&
		/usr/bin/python3 - "$d/rank_table.json" <<-\EOF || return 1
		import json, sys
		t = json.load(open(sys.argv[1]))
		got = [(s["server_id"], d["device_id"], d["device_ip"], d["rank_id"])
		       for s in t["server_list"] for d in s["device"]]
		want = [("10.251.0.2", "0", "192.168.100.11", "0"), ("10.251.0.2", "1", "192.168.101.11", "1"),
		        ("10.251.0.3", "0", "192.168.100.12", "2"), ("10.251.0.3", "1", "192.168.101.12", "3")]
		assert got == want, got
		EOF
	done &&
	printf "address_0=192.168.100.11\n" >short.conf &&
	echo "{\"mindspore\": {\"hccn_conf\": \"short.conf\"}}" >short.json &&
	test_must_fail timeout 60 srun --mpi=pmix -N1 -n2 --dptrain=short.json true >out 2>err &&
	grep "rank 1 on n[12]: $PWD/short.conf has no address_1, this rank.s device" err &&
	echo "{\"mindspore\": {\"hccn_conf\": \"none.conf\"}}" >none.json &&
	test_must_fail timeout 60 srun --mpi=pmix -N1 -n1 --dptrain=none.json true >out 2>err &&
	grep "$PWD/none.conf: cannot read it: No such file or directory (mindspore.hccn_conf names it)" err
'

test_expect_success 'output.device_dirs "device" and run_in_device_dir: MindSpore'"'"'s layout' '
	cat >dev.json <<-\EOF &&
	{"output": {"dir": "dev.%j", "device_dirs": "device"}}
	EOF
	test_must_fail timeout 60 srun --mpi=pmix -N2 --ntasks-per-node=2 --dptrain=dev.json true \
		>out 2>err &&
	grep "output.device_dirs \"device\" names directories device<DEVICE_ID>, which repeat on each of the 2 nodes: put %n" err &&
	cat >devn.json <<-\EOF &&
	{"output": {"dir": "devn.%j/%n", "device_dirs": "device", "run_in_device_dir": true},
	 "mindspore": {"dynamic_cluster": true}, "timeouts": {"rendezvous_s": 60}}
	EOF
	show timeout 120 srun --mpi=pmix -N2 --ntasks-per-node=2 --dptrain=devn.json \
		/usr/bin/python3 "../../../$MS" &&
	d=$(newest "devn.*") &&
	for r in 0 1 2 3; do
		n=n$((r / 2 + 1)) && dev=$((r % 2)) &&
		grep "^worker $r of 4 joined .* device $dev cwd $PWD/$d/$n/device$dev$" \
			"$d/$n/device$dev/train.log" &&
		grep "^DPTRAIN_DEVICE_DIR=$PWD/$d/$n/device$dev$" "$d/$n/device$dev/env.log" &&
		test -s "$d/$n/rank_table.json" || return 1
	done &&
	grep "cwd $PWD/$d/n1/device0$" "$d/n1/scheduler.log"
'

test_expect_success 'mindspore.dynamic_cluster with the bundled trainer: refused before it starts' '
	cat >trainer-ms.json <<-\EOF &&
	{"model": {"name": "lenet"}, "data": {"format": "synthetic", "train": {"size": 64}},
	 "output": {"dir": "trainer-ms.%j"}, "mindspore": {"dynamic_cluster": true}}
	EOF
	test_must_fail timeout 60 srun -N1 -n1 --dptrain=trainer-ms.json dptrain >out 2>err &&
	grep "rank 0 on n[12]: mindspore.dynamic_cluster is for MindSpore scripts: the bundled trainer would also run as the scheduler" err &&
	! ls -d trainer-ms.[0-9]* 2>/dev/null
'

test_done
