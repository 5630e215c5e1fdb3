#!/bin/sh
# t0300-localcluster.t — contrib/localcluster/cluster: a private Slurm that starts in about a
# second on free ports, runs real jobs (PMIx included) on one or several emulated nodes, and
# leaves nothing running when stopped. Owns only its trash directory's clusters.

test_description='single-host Slurm for tests and demos (contrib/localcluster)'

. "$(dirname "$0")/sharness.sh"

if ! test_have_prereq LOCALCLUSTER; then
	skip_all='needs root and slurm-wlm + munge (make deps) to run a local Slurm'
	test_done
fi

if ip netns add "dptrain-t0300-$$" 2>/dev/null; then
	ip netns del "dptrain-t0300-$$"
	test_set_prereq NETNS
fi

# no_process_left DIR: nothing of the cluster in DIR runs: no daemon, no slurmstepd, no task.
no_process_left() {
	_alias=$(sed -n "s/^export DPTRAIN_CLUSTER_RUNDIR=.\(.*\)./\1/p" "$1/env.sh") &&
	test -n "$_alias" &&
	test -z "$(dp_cluster pids -d "$1")" &&
	! pgrep -f "$1" >/dev/null &&
	! pgrep -f "$_alias/" >/dev/null &&
	for _p in $(pgrep -x slurmstepd); do
		! find "/proc/$_p/cwd" "/proc/$_p/fd/" -maxdepth 1 -lname "$1/*" 2>/dev/null |
			grep -q . || return 1
	done
}

test_expect_success 'start and stop refuse to run as an unprivileged user' '
	test_must_fail setpriv --reuid=65534 --regid=65534 --clear-groups \
		"$DP_CLUSTER_SCRIPT" start -d "$PWD/never" 2>err &&
	grep "must run as root" err &&
	test ! -e never
'

test_expect_success 'an unknown option is an error that names it' '
	test_must_fail dp_cluster start --bogus 2>err &&
	grep "unknown option .--bogus." err
'

# A machine that is not ready says what is wrong before any daemon starts (in a mount namespace
# of its own: /etc/hosts without localhost, /sys/fs/cgroup without a cgroup file system).
test_expect_success 'start without a localhost in /etc/hosts says so' '
	printf "10.9.9.9 elsewhere\n" >hosts &&
	test_must_fail unshare -m sh -c "mount --make-rprivate / && mount --bind \"$PWD/hosts\" /etc/hosts &&
		exec \"$DP_CLUSTER_SCRIPT\" start -d \"$PWD/nohosts\" --no-plugin" 2>err &&
	cat err &&
	grep "localhost. does not resolve on this machine .*add the line .127.0.0.1 localhost. to /etc/hosts" err &&
	! grep "timed out" err
'

test_expect_success 'start without a usable cgroup file system says so' '
	test_must_fail unshare -m sh -c "mount --make-rprivate / && mount -t tmpfs none /sys/fs/cgroup &&
		exec \"$DP_CLUSTER_SCRIPT\" start -d \"$PWD/nocgroup\" --no-plugin" 2>err &&
	cat err &&
	grep "no cgroup file system Slurm can use at /sys/fs/cgroup (found: tmpfs).*mount -t cgroup2 none /sys/fs/cgroup" err &&
	! grep "timed out" err
'

# "quickly": without fixed waits; the bound is one no busy machine reaches
test_expect_success 'start a one-node cluster quickly' '
	start=$(date +%s%N) &&
	dp_cluster_start --no-plugin &&
	end=$(date +%s%N) &&
	echo "started in $(( (end - start) / 1000000 )) ms" >&2 &&
	test $(( (end - start) / 1000000 )) -lt 60000 &&
	test -f "$SLURM_CONF" &&
	grep -q "^NodeName=n1 " "$SLURM_CONF"
'

test_expect_success 'the cluster uses its own ports and directory, not the defaults' '
	port=$(sed -n "s/^SlurmctldPort=//p" "$SLURM_CONF") &&
	test "$port" != 6817 && test "$port" -ge 20000 && test "$port" -lt 32768 &&
	! grep -q "^NodeName=.* Port=6818 " "$SLURM_CONF" &&
	grep "^StateSaveLocation=" "$SLURM_CONF" | grep -q "$DPTRAIN_CLUSTER_RUNDIR/" &&
	test -S "$DPTRAIN_CLUSTER_DIR/munge/munge.socket.2"
'

test_expect_success 'srun -n4 hostname runs four tasks' '
	timeout 30 srun -n4 hostname >out &&
	test "$(wc -l <out)" -eq 4 &&
	test "$(sort -u out)" = "$(hostname)"
'

test_expect_success 'srun --mpi=pmix gives every task its PMIx rank' '
	timeout 30 srun -n4 --mpi=pmix sh -c "echo \$PMIX_RANK" | sort >ranks &&
	printf "0\n1\n2\n3\n" >expect &&
	test_cmp expect ranks
'

test_expect_success 'a command that fails gives srun its exit code' '
	test_expect_code 3 timeout 30 srun -n1 sh -c "exit 3"
'

test_expect_success 'status shows the daemons and an idle node' '
	dp_cluster status -d "$DPTRAIN_CLUSTER_DIR" >status &&
	grep "slurmctld: running" status &&
	grep "slurmd.n1: running" status &&
	grep "munged: running" status &&
	grep "^n1 idle" status
'

test_expect_success 'start on a running cluster says so and changes nothing' '
	pids=$(dp_cluster pids -d "$DPTRAIN_CLUSTER_DIR") &&
	dp_cluster start -d "$DPTRAIN_CLUSTER_DIR" --no-plugin 2>err &&
	grep "already running" err &&
	test "$(dp_cluster pids -d "$DPTRAIN_CLUSTER_DIR")" = "$pids"
'

# the bound on the stop tells "stopped it" from "waited for srun's 60 s timeout"
test_expect_success 'stop ends a running job and leaves no process behind' '
	dir=$DPTRAIN_CLUSTER_DIR &&
	nap="sleep 299.$$" &&
	{ timeout 250 srun -n2 sh -c "exec $nap" >/dev/null 2>&1 & } &&
	srun_pid=$! &&
	# Both tasks have become the nap (not the shell before its exec) before stop.
	for i in $(seq 2400); do
		test "$(pgrep -f -x "$nap" | wc -l)" -eq 2 && break; sleep 0.05
	done &&
	test "$(pgrep -f -x "$nap" | wc -l)" -eq 2 &&
	start=$(date +%s) &&
	dp_cluster_stop "$dir" &&
	echo "stopped in $(( $(date +%s) - start )) s" >&2 &&
	no_process_left "$dir" &&
	! pgrep -f -x "$nap" &&
	test ! -e "$dir/munge/munge.socket.2" &&
	{ wait $srun_pid; test $? -ne 124; }
'

test_expect_success 'stop on a stopped cluster is fine' '
	dp_cluster_stop "$PWD/cluster" &&
	dp_cluster_stop "$PWD/no-such-cluster" &&
	test_expect_code 3 dp_cluster status -d "$PWD/cluster"
'

test_expect_success 'a directory with blanks in a long path is reached through a short alias' '
	case "$PWD" in *" "*) ;; *) false ;; esac &&
	alias=$(sed -n "s/^export DPTRAIN_CLUSTER_RUNDIR=.\(.*\)./\1/p" cluster/env.sh) &&
	case "$alias" in /tmp/dptrain-lc.*) ;; *) false ;; esac &&
	test ! -e "$alias"
'

test_expect_success 'start -N 2: tasks spread over both nodes, PMIx across them' '
	dp_cluster_start -d "$PWD/two" --no-plugin -N 2 -c 4 &&
	test "$(sinfo -h -N -o "%N %t" | sort | tr "\n" " ")" = "n1 idle n2 idle " &&
	timeout 30 srun -N2 -n4 --mpi=pmix sh -c "echo \$SLURM_NODEID \$SLURMD_NODENAME \$PMIX_RANK" |
		sort >ids &&
	test "$(cut -d" " -f1 ids | sort -u | tr "\n" " ")" = "0 1 " &&
	test "$(cut -d" " -f2 ids | sort -u | tr "\n" " ")" = "n1 n2 " &&
	test "$(cut -d" " -f3 ids | sort -n | tr "\n" " ")" = "0 1 2 3 " &&
	grep "^0 n1" ids && grep "^1 n2" ids
'

test_expect_success 'every node has its own TmpFS under the cluster directory' '
	grep "^TmpFS=$DPTRAIN_CLUSTER_RUNDIR/tmp/%n" "$SLURM_CONF" &&
	test -d two/tmp/n1 && test -d two/tmp/n2 &&
	timeout 30 srun -N2 -n2 --mpi=pmix true &&
	timeout 30 srun -N2 -n2 --mpi=pmix true
'

test_expect_success 'a second cluster runs beside the first without clashing' '
	conf_two=$SLURM_CONF &&
	dp_cluster_start -d "$PWD/three" --no-plugin &&
	conf_three=$SLURM_CONF &&
	test "$conf_two" != "$conf_three" &&
	p2=$(sed -n "s/^SlurmctldPort=//p" "$conf_two") &&
	p3=$(sed -n "s/^SlurmctldPort=//p" "$conf_three") &&
	test "$p2" != "$p3" &&
	SLURM_CONF=$conf_two timeout 30 srun -N2 -n2 hostname >o2 &&
	SLURM_CONF=$conf_three timeout 30 srun -n2 hostname >o3 &&
	test "$(wc -l <o2)" -eq 2 && test "$(wc -l <o3)" -eq 2 &&
	pids_two=$(dp_cluster pids -d "$PWD/two") &&
	dp_cluster_stop "$PWD/three" &&
	no_process_left "$PWD/three" &&
	test "$(dp_cluster pids -d "$PWD/two")" = "$pids_two" &&
	SLURM_CONF=$conf_two timeout 30 srun -N2 -n2 hostname >o2 &&
	test "$(wc -l <o2)" -eq 2 &&
	dp_cluster_stop "$PWD/two" &&
	no_process_left "$PWD/two"
'

test_expect_success NETNS '--netns: every node has its own address; stop removes the namespaces' '
	dp_cluster_start -d "$PWD/ns" --no-plugin --netns -N 2 -c 2 &&
	test "$(command -v srun)" = "$DPTRAIN_CLUSTER_RUNDIR/bin/srun" &&
	timeout 30 srun -N2 -n2 sh -c "ip -4 -o addr show eth0" | awk "{print \$4}" | sort >addrs &&
	printf "10.251.0.2/24\n10.251.0.3/24\n" >expect &&
	test_cmp expect addrs &&
	timeout 30 srun -N2 -n2 --mpi=pmix sh -c "echo \$PMIX_RANK" | sort >ranks &&
	printf "0\n1\n" >expect &&
	test_cmp expect ranks &&
	prefix=$(cat ns/run/netns | head -n 1 | sed "s/-c\$//") &&
	ip netns list | grep -q "^$prefix" &&
	dp_cluster_stop "$PWD/ns" &&
	no_process_left "$PWD/ns" &&
	! ip netns list | grep -q "^$prefix"
'

test_done
