#!/bin/sh
# t0400-launch.t — dptrain-launch as the command of a real Slurm step (no plugin): PMIx and
# SLURM_* discovery on one and two emulated nodes checked against Slurm's own variables, the
# rank table against all of them, exit codes, a rank that never arrives, and an OpenMPI
# program run through the launcher. Owns only its trash directory and the cluster in it.

test_description='dptrain-launch under srun: PMIx and SLURM_* discovery'

. "$(dirname "$0")/sharness.sh"

if ! test_have_prereq LAUNCH; then
	skip_all='dptrain-launch not built'
	test_done
fi
if ! test_have_prereq LOCALCLUSTER; then
	skip_all='needs root, slurm-wlm and munge for a local Slurm (make deps)'
	test_done
fi
command -v mpicc >/dev/null 2>&1 && test_set_prereq MPICC

MARK="T0400_MARK=$$.$(date +%s%N)"
export "$MARK"
# The tasks' output directory, relative to the task's working directory (this one).
export DPTRAIN_OUTPUT_DIR

# nothing_left: no task of ours runs any more (tasks inherit MARK from srun's environment).
nothing_left() {
	_i=0
	while [ $_i -lt 100 ]; do
		_left=$(for _f in $(grep -lzxF "$MARK" /proc/[0-9]*/environ 2>/dev/null); do
			_p=${_f#/proc/}
			_p=${_p%/environ}
			grep -qz '^SLURM_JOB_ID=' "$_f" 2>/dev/null || continue
			echo "$_p: $(tr '\0' ' ' <"/proc/$_p/cmdline" 2>/dev/null)"
		done)
		test -z "$_left" && return 0
		sleep 0.1
		_i=$((_i + 1))
	done
	echo "left running: $_left" >&2
	return 1
}

test_expect_success 'setup: a two-node Slurm without the plugin, a probe' '
	dp_cluster_start --no-plugin -N 2 &&
	dp_write_probe probe.sh
'

# the launcher sets PMIX_MCA_gds=hash with PMIx 4 only (dptrain(8), VERSIONS)
gds=
test_have_prereq PMIX_GDS_HASH && gds=hash
test_expect_success 'srun --mpi=pmix -n4: the variables match Slurm' '
	DPTRAIN_OUTPUT_DIR=pmix1 timeout 60 srun --mpi=pmix -n4 dptrain-launch ./probe.sh >out &&
	grep "^probe rank=0 " out &&
	test $(grep -c "^probe" out) = 1 &&
	dp_check_ranks pmix1 4 pmix &&
	grep " gds=$gds " pmix1/device3/train.log
'

test_expect_success 'the PMIx master is rank 0 with a port picked on its node' '
	master=$(sed -n "s/^probe rank=0 .*master=\([^ ]*\) .*/\1/p" out) &&
	port=${master##*:} &&
	test "$port" -gt 0 && test "$port" -lt 65536 &&
	test "$(dp_json pmix1/rank_table.json "d[\"dptrain\"][\"ranks\"][0][\"host\"]")" = n1
'

test_expect_success 'srun --mpi=pmix -N2 -n4: two nodes, node and local ranks match Slurm' '
	DPTRAIN_OUTPUT_DIR=pmix2 timeout 60 srun --mpi=pmix -N2 --ntasks-per-node=2 dptrain-launch ./probe.sh >out &&
	dp_check_ranks pmix2 4 pmix &&
	test "$(dp_json pmix2/rank_table.json "d[\"server_count\"]")" = 2 &&
	grep "node=1 nodeid=1" pmix2/device3/train.log &&
	dptrain-ranktable validate pmix2/rank_table.json
'

test_expect_success 'srun -N2 -n4 with Slurm uneven (3+1): still matches' '
	DPTRAIN_OUTPUT_DIR=pmix3 timeout 60 srun --mpi=pmix -N2 -n4 dptrain-launch ./probe.sh >out &&
	dp_check_ranks pmix3 4 pmix
'

test_expect_success 'srun --mpi=none -n4: the SLURM_* fallback, derived port' '
	MASTER_ADDR=127.0.0.1 DPTRAIN_OUTPUT_DIR=none1 timeout 60 srun --mpi=none -n4 \
		dptrain-launch ./probe.sh >out &&
	dp_check_ranks none1 4 slurm &&
	port=$(dp_json none1/rank_table.json "d[\"dptrain\"][\"master_port\"]") &&
	test "$port" -gt 60999 && test "$port" -le 65535
'

test_expect_success 'srun --mpi=none -N2 -n4: two nodes from SLURM_STEP_NODELIST' '
	MASTER_ADDR=127.0.0.1 DPTRAIN_OUTPUT_DIR=none2 timeout 60 srun --mpi=none -N2 \
		--ntasks-per-node=2 dptrain-launch ./probe.sh >out &&
	dp_check_ranks none2 4 slurm
'

# Issue 18, item 6. Without PMIx a rank knows only its own address and GPU: the launchers meet
# in a store rank 0 runs at the master endpoint, so the table holds every rank's own address
# (the emulated nodes' names do not resolve: it held 0.0.0.0 for the other node) and is
# written once in a shared directory (every node wrote it, each with its own partial view).
test_expect_success 'without PMIx: an unresolvable first node is found by its NodeAddr' '
	env -u MASTER_ADDR DPTRAIN_VERBOSE=1 DPTRAIN_OUTPUT_DIR=none3 timeout 60 \
		srun --mpi=none -N2 --ntasks-per-node=2 dptrain-launch ./probe.sh >out 2>err &&
	dp_check_ranks none3 4 slurm &&
	test "$(dp_json none3/rank_table.json "d[\"dptrain\"][\"master_addr\"]")" = \
		"$(scontrol -o show node n1 | tr " " "\n" | sed -n "s/^NodeAddr=//p")"
'

test_expect_success 'without PMIx: the table holds every rank'"'"'s own address, written once' '
	grep -c "dptrain-launch: rank [0-3] on n[12]: wrote .*/none3/rank_table.json" err >writers &&
	echo 1 >one && test_cmp one writers &&
	grep "dptrain-launch: rank 0 on n1: wrote" err &&
	me=$(dp_json none3/rank_table.json "d[\"server_list\"][0][\"server_id\"]") &&
	test "$me" != 0.0.0.0 &&
	test "$(dp_json none3/rank_table.json "len(set(x[\"device_ip\"] for s in d[\"server_list\"] for x in s[\"device\"]) | {\"$me\"})")" = 1
'

test_expect_success 'without PMIx: node-local output directories each get the whole table' '
	printf "%s\n" "0-1 env DPTRAIN_OUTPUT_DIR=local1 dptrain-launch ./probe.sh" \
		"2-3 env DPTRAIN_OUTPUT_DIR=local2 dptrain-launch ./probe.sh" >local.conf &&
	DPTRAIN_VERBOSE=1 timeout 60 srun --mpi=none -N2 --ntasks-per-node=2 \
		--multi-prog local.conf >out 2>err &&
	grep "dptrain-launch: rank 0 on n1: wrote .*/local1/rank_table.json" err &&
	grep "dptrain-launch: rank 2 on n2: wrote .*/local2/rank_table.json" err &&
	test_cmp local1/rank_table.json local2/rank_table.json
'

test_expect_success 'without PMIx, a first node neither resolvable nor known to Slurm: says so' '
	mkdir -p fakebin &&
	printf "#!/bin/sh\necho \"slurm_load_node error: Invalid node name specified\" >&2\nexit 1\n" >fakebin/scontrol &&
	chmod +x fakebin/scontrol &&
	test_must_fail env -u MASTER_ADDR DPTRAIN_OUTPUT_DIR=none4 timeout 60 srun --mpi=none -n2 \
		env PATH="$PWD/fakebin:$PATH" dptrain-launch ./probe.sh 2>err &&
	cat err >&2 &&
	grep "dptrain-launch: rank [01] on n[12]: cannot find the master: .*n[12].*, and Slurm gives no usable address for it (scontrol show node n[12] failed: slurm_load_node error: Invalid node name specified); .* set MASTER_ADDR" err &&
	test ! -e none4
'

test_expect_success 'a scontrol that hangs is given up after the rendezvous timeout' '
	mkdir -p fakebin &&
	printf "#!/bin/sh\nexec sleep 100\n" >fakebin/scontrol &&
	test_must_fail env -u MASTER_ADDR DPTRAIN_TIMEOUT=2 DPTRAIN_OUTPUT_DIR=none5 timeout 60 \
		srun --mpi=none -n1 env PATH="$PWD/fakebin:$PATH" dptrain-launch ./probe.sh 2>err &&
	cat err >&2 &&
	grep "Slurm gives no usable address for it (scontrol show node n[12] took more than 2 s)" err &&
	nothing_left
'

test_expect_success 'DPTRAIN_SOURCE=slurm under PMIx uses SLURM_*' '
	MASTER_ADDR=127.0.0.1 DPTRAIN_SOURCE=slurm DPTRAIN_OUTPUT_DIR=forced timeout 60 \
		srun --mpi=pmix -n2 dptrain-launch ./probe.sh >out &&
	dp_check_ranks forced 2 slurm
'

test_expect_success 'srun exits with the command'"'"'s status' '
	test_expect_code 7 env DPTRAIN_OUTPUT_DIR=rc timeout 60 srun -n2 dptrain-launch sh -c "exit 7" &&
	test_expect_code 127 env DPTRAIN_OUTPUT_DIR=rc timeout 60 srun -n2 dptrain-launch no-such-cmd-t0400 2>err &&
	grep "dptrain-launch: rank [01] on n[12]: cannot run .no-such-cmd-t0400.: No such file or directory" err
'

# A rank that waited for the stalled one instead of giving up after DPTRAIN_TIMEOUT would be
# ended by srun's timeout without the message looked for: no bound on the elapsed time needed.
test_expect_success 'a rank that never arrives: the others time out naming it, nothing left' '
	# srun reports the ranks Slurm killed (137): any failure will do
	! env DPTRAIN_TIMEOUT=3 DPTRAIN_TEST_STALL_RANK=2 DPTRAIN_OUTPUT_DIR=stall \
		timeout 120 srun --mpi=pmix -N2 -n4 dptrain-launch ./probe.sh 2>err &&
	cat err >&2 &&
	grep "rank 2: test hook DPTRAIN_TEST_STALL_RANK" err &&
	grep "dptrain-launch: rank [0-3] on n[12]: PMIx fence (rendezvous of all ranks) timed out after 3 s: 1 of 4 ranks did not arrive: rank 2 on n1" err &&
	nothing_left
'

test_expect_success 'rank 0 never arrives: the others name it' '
	! env DPTRAIN_TIMEOUT=3 DPTRAIN_TEST_STALL_RANK=0 DPTRAIN_OUTPUT_DIR=stall0 \
		timeout 60 srun --mpi=pmix -N2 --ntasks-per-node=2 dptrain-launch ./probe.sh 2>err &&
	cat err >&2 &&
	grep "dptrain-launch: rank [1-3] on n[12]: PMIx fence (rendezvous of all ranks) timed out after 3 s: rank 0 (on n1) did not arrive: it ended or hangs before this point" err &&
	! grep "ranks did not arrive" err &&
	nothing_left
'

# Issue 18, F8: the ranks were named from Gets made after the failed fence, which Slurm's PMIx
# server may not answer then, so ranks that had arrived were named ("ranks 0, 2-3" where only
# 3 was missing). Rank 0 now names them from Gets posted before the fence; the others defer to
# it, and leave it the time to say so before their error ends the step.
test_expect_success 'a task that ends before the rendezvous: rank 0 names it, and only it' '
	printf "%s\n" "0-2 dptrain-launch ./probe.sh" "3 true" >ends.conf &&
	! env DPTRAIN_TIMEOUT=4 DPTRAIN_OUTPUT_DIR=ends timeout 120 \
		srun --mpi=pmix -N2 --ntasks-per-node=2 --multi-prog ends.conf 2>err &&
	cat err >&2 &&
	grep -x "dptrain-launch: rank 0 on n1: PMIx fence (rendezvous of all ranks) timed out after 4 s: 1 of 4 ranks did not arrive: rank 3 on n2; they ended .*" err &&
	test $(grep -c "did not arrive" err) = 1 &&
	grep "dptrain-launch: rank [12] on n[12]: .*: rank 0 (on n1) arrived, and its message names the ranks that did not" err &&
	nothing_left
'

# When every task of a node has ended, Slurm 22.05's PMIx server on the other node answers
# nothing for half a minute (it retries reaching the ended step there), also Gets of its own
# node's ranks: a rank then names only ranks that never arrived, or says that its server has
# stopped answering; it never names a rank that arrived as missing without saying so.
test_expect_success 'every task of a node ends before the rendezvous: no rank named wrongly' '
	printf "%s\n" "0-2 dptrain-launch ./probe.sh" "3 true" >node.conf &&
	! env DPTRAIN_TIMEOUT=4 DPTRAIN_OUTPUT_DIR=node timeout 120 \
		srun --mpi=pmix -n4 -N2 --ntasks-per-node=3 --multi-prog node.conf 2>err &&
	cat err >&2 &&
	grep "dptrain-launch: rank 0 on n1: PMIx fence (rendezvous of all ranks) timed out after 4 s: " err &&
	grep "did not arrive" err >named &&
	while read -r line; do
		case $line in
		*"has stopped answering"*) ;;
		*"rank 0 on n1: "*": 1 of 4 ranks did not arrive: rank 3 on n2; "*) ;;
		*) echo "named wrongly: $line" >&2 && return 1 ;;
		esac
	done <named &&
	nothing_left
'

test_expect_success 'without PMIx: a rank 0 that never opens the store is named' '
	! env MASTER_ADDR=127.0.0.1 DPTRAIN_TIMEOUT=2 DPTRAIN_TEST_STALL_RANK=0 \
		DPTRAIN_TEST_STALL_SECONDS=60 DPTRAIN_OUTPUT_DIR=stall2 \
		timeout 120 srun --mpi=none -K -n3 dptrain-launch ./probe.sh 2>err &&
	grep "dptrain-launch: rank [12] on n[12]: rendezvous: cannot connect to rank 0.s store at 127.0.0.1:[0-9]* within 2 s" err &&
	test ! -e stall2 &&
	nothing_left
'

test_expect_success MPICC 'setup: an MPI program' '
	cat >allreduce.c <<-\EOF &&
	#include <mpi.h>
	#include <stdio.h>
	int main(int argc, char **argv)
	{
		int rank, size, one, sum;
		MPI_Init(&argc, &argv);
		MPI_Comm_rank(MPI_COMM_WORLD, &rank);
		MPI_Comm_size(MPI_COMM_WORLD, &size);
		one = rank + 1;
		MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
		printf("mpi rank %d of %d sum %d\n", rank, size, sum);
		MPI_Finalize();
		return sum == size * (size + 1) / 2 ? 0 : 1;
	}
	EOF
	mpicc -o allreduce allreduce.c
'

test_expect_success MPICC 'an OpenMPI program as the command (second PMIx client)' '
	DPTRAIN_OUTPUT_DIR=mpi1 timeout 120 srun --mpi=pmix -n4 dptrain-launch ./allreduce >out &&
	grep -x "mpi rank 0 of 4 sum 10" out &&
	for r in 1 2 3; do
		grep -x "mpi rank $r of 4 sum 10" mpi1/device$r/train.log || return 1
	done
'

# OpenMPI 5 (Debian 13) does not start across two emulated nodes of one machine at all, with
# or without dptrain: the dptrain case runs where the plain one does (OpenMPI 4, Debian 12).
if test_have_prereq MPICC && test -x allreduce &&
	OMPI_MCA_btl=self,tcp timeout 120 srun --mpi=pmix -N2 --ntasks-per-node=2 ./allreduce \
		>plain2.out 2>&1; then
	test_set_prereq MPI_EMULATED_NODES
fi

test_expect_success MPICC,MPI_EMULATED_NODES 'an OpenMPI program across two emulated nodes' '
	OMPI_MCA_btl=self,tcp DPTRAIN_OUTPUT_DIR=mpi2 timeout 120 \
		srun --mpi=pmix -N2 --ntasks-per-node=2 dptrain-launch ./allreduce >out &&
	grep -x "mpi rank 0 of 4 sum 10" out &&
	grep -x "mpi rank 3 of 4 sum 10" mpi2/device3/train.log
'

test_expect_success 'stop the cluster; nothing of ours is left' '
	dp_cluster_stop &&
	nothing_left
'

test_done
