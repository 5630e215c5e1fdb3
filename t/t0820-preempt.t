#!/bin/sh
# t0820-preempt.t — preemption under the project's local Slurm: scancel --signal=USR1 and TERM,
# a time limit with sbatch --signal=USR1@N and one without, and a requeued --requeue job that
# resumes by itself from its checkpoint (same job id, same output directory). Owns its trash
# directory and cluster.

test_description='SIGUSR1/SIGTERM from Slurm: checkpoint, exit 4, requeue resumes'

. "$(dirname "$0")/sharness.sh"

dp_need_cluster FMNIST

# wait_for FILE PATTERN SECONDS
wait_for() {
	_i=0
	while ! grep -q "$2" "$1" 2>/dev/null && [ $_i -lt $(($3 * 10)) ]; do
		sleep 0.1; _i=$((_i + 1))
	done
	grep -q "$2" "$1"
}
# wait_pending JOBID SECONDS: the job is back in the queue, waiting
wait_pending() {
	_i=0
	while [ "$(squeue -h -j "$1" -o %T 2>/dev/null)" != PENDING ] && [ $_i -lt $(($2 * 10)) ]; do
		sleep 0.1; _i=$((_i + 1))
	done
	[ "$(squeue -h -j "$1" -o %T 2>/dev/null)" = PENDING ]
}
# nodes_idle SECONDS: every node has finished with the jobs it ran (no COMPLETING, nothing
# allocated), and the clock has passed the second in which that was seen. Before an admin
# starts a requeued job at once (StartTime=now): Slurm holds it for a while by itself,
# because a relaunch whose credential is not newer than the node's revocation of the last run
# (both in whole seconds) is killed as "Job credential revoked" (measured: a start 0.2 s after
# the requeue, in the same second).
nodes_idle() {
	_i=0
	while [ -n "$(sinfo -h -N -o %T 2>/dev/null | grep -v '^idle$')" ] && [ $_i -lt $(($1 * 10)) ]; do
		sleep 0.1; _i=$((_i + 1))
	done
	[ -z "$(sinfo -h -N -o %T 2>/dev/null | grep -v '^idle$')" ] || return 1
	_t=$(($(date +%s) + 1))
	while [ "$(date +%s)" -le $_t ]; do sleep 0.1; done
}
# wait_gone JOBID SECONDS: the job left the queue
wait_gone() {
	_i=0
	while [ -n "$(squeue -h -j "$1" -o %T 2>/dev/null)" ] && [ $_i -lt $(($2 * 10)) ]; do
		sleep 0.1; _i=$((_i + 1))
	done
	[ -z "$(squeue -h -j "$1" -o %T 2>/dev/null)" ]
}

test_expect_success 'setup: a Slurm with the plugin, a long job' '
	dp_cluster_start -c 4 --conf KillWait=10 &&
	cat >job.json <<-EOF
	{
	  "seed": 7,
	  "model": {"name": "mlp", "num_classes": 10, "input_shape": [1, 28, 28], "hidden": [128, 64]},
	  "data": {"format": "idx", "dir": "/usr/share/datasets/fashion-mnist", "batch_size": 32,
	           "drop_remainder": true},
	  "optimizer": {"name": "momentum", "lr": 0.05, "momentum": 0.9},
	  "train": {"epochs": 0, "max_steps": 10000000, "log_every": 10, "threads": 1},
	  "output": {"dir": "$PWD/out/%j.%s"}
	}
	EOF
	dptrain --check job.json >/dev/null
'

# scancel_stop SIG NAME: a 2-rank job stopped by scancel --signal=SIG after step 50 (its
# output in NAME.out, NAME.err): srun and every rank exit 4, the checkpoint of the step it
# stopped at is there. Sets jid and at (that job and step).
scancel_stop() {
	{ timeout 600 srun -n2 --dptrain=job.json dptrain >$2.out 2>$2.err & } &&
	_pid=$! &&
	wait_for $2.out "step: 50," 300 &&
	jid=$(squeue -h -o %i | head -n 1) &&
	scancel --signal=$1 "$jid" &&
	{ wait $_pid; _s=$?; } && echo "srun exit $_s" && cat $2.err &&
	test $_s = 4 &&
	grep "Exited with exit code 4" $2.err && ! grep "Exited with exit code [0-35-9]" $2.err &&
	at=$(sed -n "s/.*stopping on request at step \([0-9]*\).*/\1/p" $2.out) &&
	test -f "out/$jid.0/checkpoints/step-$at/state.json" &&
	grep "stopped at step $at on request" $2.out
}

test_expect_success 'scancel --signal=TERM: both ranks stop after one step, checkpoint, exit 4' '
	scancel_stop TERM t &&
	grep "rank 0: SIGTERM: stopping after this step, with a checkpoint" t.err
'

test_expect_success 'scancel --signal=USR1: the same' '
	scancel_stop USR1 s &&
	grep "rank 0: SIGUSR1: stopping after this step, with a checkpoint" s.err
'

test_expect_success 'the next job resumes from it with --resume' '
	ck=out/$jid.0/checkpoints/step-$at &&
	timeout 600 srun -n2 --dptrain=job.json dptrain --resume "$PWD/$ck" train.max_steps=$((at + 10)) >r.out 2>&1 &&
	grep "resuming from $PWD/$ck: step $at" r.out &&
	grep "dptrain: done: $((at + 10)) steps" r.out
'

test_expect_success 'a time limit with sbatch --signal=USR1@50: checkpoint before the end' '
	cat >limit.sh <<-\EOF &&
	#!/bin/sh
	#SBATCH -n 2
	srun dptrain
	echo "srun exit $?"
	EOF
	jid=$(sbatch --parsable --dptrain=job.json --time=1 --signal=USR1@50 -o limit.out limit.sh) &&
	wait_gone "$jid" 300 &&
	cat limit.out &&
	grep "stopping on request at step" limit.out &&
	grep "^srun exit 4" limit.out &&
	ls "out/$jid.0/checkpoints/" | grep step-
'

# No --signal: at the time limit Slurm sends SIGTERM to every task, and SIGKILL KillWait (10 s
# here) later; the ranks must have their checkpoint written by then.
test_expect_success 'a time limit alone: SIGTERM at the limit, every rank checkpoints within KillWait' '
	cat >tl.sh <<-\EOF &&
	#!/bin/sh
	#SBATCH -n 2
	srun dptrain
	EOF
	jid=$(sbatch --parsable --dptrain=job.json --time=1 -o tl.out tl.sh) &&
	wait_gone "$jid" 300 &&
	cat tl.out &&
	at=$(sed -n "s/.*stopping on request at step \([0-9]*\).*/\1/p" tl.out | head -n 1) &&
	test -n "$at" &&
	grep "stopped at step $at on request" tl.out &&
	test -f "out/$jid.0/checkpoints/step-$at/state.json" &&
	test "$(cat "out/$jid.0/checkpoints/latest")" = "step-$at" &&
	grep "Exited with exit code 4" tl.out && ! grep "Exited with exit code [0-35-9]" tl.out &&
	! grep -i "killed\|signal 9" tl.out
'

test_expect_success 'contrib/examples/requeue.sbatch: stopped by USR1, it requeues itself and resumes' '
	jid=$(sbatch --parsable --dptrain=job.json --ntasks=2 -o example.out \
		"$DPTRAIN_SRC_DIR/contrib/examples/requeue.sbatch") &&
	wait_for example.out "step: 50," 300 &&
	scancel --signal=USR1 "$jid" &&
	wait_for example.out "requeueing job $jid" 300 &&
	wait_pending "$jid" 300 &&
	nodes_idle 300 &&
	scontrol update JobId="$jid" StartTime=now &&
	{ wait_for example.out "resuming from" 300 || { cat example.out; squeue -j "$jid"; false; }; } &&
	scancel "$jid" && wait_gone "$jid" 300 &&
	cat example.out &&
	at=$(sed -n "s/.*stopping on request at step \([0-9]*\).*/\1/p" example.out | head -n 1) &&
	grep "resuming from .*/lenet.$jid/checkpoints/step-$at: step $at" example.out
'

test_expect_success 'sbatch --requeue: a requeued job resumes by itself and finishes' '
	cat >requeue.sh <<-\EOF &&
	#!/bin/sh
	#SBATCH -n 2
	#SBATCH --requeue
	# the first run trains "forever"; the requeued one (same job id, same output directory)
	# resumes by itself and is asked for 20 more steps so the test ends
	steps=
	if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then
		last=$(cat "out/$SLURM_JOB_ID.0/checkpoints/latest")
		steps="train.max_steps=$((${last#step-} + 20))"
	fi
	echo "run ${SLURM_RESTART_COUNT:-0}"
	srun dptrain $steps
	echo "srun exit $?"
	EOF
	jid=$(sbatch --parsable --dptrain=job.json -o requeue.out --open-mode=append requeue.sh) &&
	wait_for requeue.out "step: 50," 300 &&
	scontrol requeue "$jid" &&
	wait_for requeue.out "stopped at step .* on request" 300 &&
	wait_pending "$jid" 300 &&
	# Slurm holds a requeued job for a while (BeginTime); an admin may release it at once
	nodes_idle 300 &&
	scontrol update JobId="$jid" StartTime=now &&
	wait_gone "$jid" 300 &&
	cat requeue.out &&
	at=$(sed -n "s/.*stopping on request at step \([0-9]*\).*/\1/p" requeue.out) &&
	grep "^run 1" requeue.out &&
	grep "resuming from .*out/$jid.0/checkpoints/step-$at: step $at" requeue.out &&
	grep "dptrain: done: $((at + 20)) steps" requeue.out &&
	grep "^srun exit 0" requeue.out
'

test_expect_success 'stop the cluster; nothing left running' '
	dp_cluster_stop
'

test_done
