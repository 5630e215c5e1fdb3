#!/bin/sh
# t0821-requeue-script.t — the decisions of contrib/examples/requeue.sbatch, beside the real
# job in t0820: here srun and scontrol are stand-ins on PATH that do what Slurm does in the
# cases a real cluster cannot be made to show on demand — srun exiting 0 although no task was
# launched (Slurm 22.05 after "task 0 launch failed", doc/reliability.md), a run that finishes,
# a stop with a checkpoint, a crash — and record what the script asks of Slurm.

test_description='contrib/examples/requeue.sbatch: finished only with new final weights'

. "$(dirname "$0")/sharness.sh"

script="$DPTRAIN_SRC_DIR/contrib/examples/requeue.sbatch"

# fake_slurm MODE: srun that, as the trainer would (MODE finish: writes the final weights, exit
# 0; stop: a checkpoint, exit 4; crash: exit 3; nolaunch: nothing, exit 0; finish-hang and
# stop-hang: the same with the trainer's last metrics event, then srun never returns, as when
# Slurm lost the tasks' exit; slow: 3 s without an event, then exit 3), and scontrol that logs
# its arguments.
fake_slurm() {
	mkdir -p bin &&
	cat >bin/srun <<-EOF &&
	#!/bin/sh
	out=\$DPTRAIN_OUTPUT_DIR
	echo "srun \$*" >>"$PWD/calls"
	case $1 in
	finish) mkdir -p "\$out" && : >"\$out/.w.tmp" && mv "\$out/.w.tmp" "\$out/model.safetensors"; exit 0 ;;
	stop) mkdir -p "\$out/checkpoints/step-40" && echo step-40 >"\$out/checkpoints/latest"; exit 4 ;;
	crash) exit 3 ;;
	nolaunch) echo "srun: error: task 0 launch failed: Unspecified error" >&2; exit 0 ;;
	finish-hang) mkdir -p "\$out" && : >"\$out/.w.tmp" && mv "\$out/.w.tmp" "\$out/model.safetensors" &&
		echo "{\"event\":\"end\",\"steps\":500}" >>"\$out/metrics.jsonl" && exec sleep 600 ;;
	stop-hang) mkdir -p "\$out/checkpoints/step-60" && echo step-60 >"\$out/checkpoints/latest" &&
		echo "{\"event\":\"stop\",\"global_step\":60}" >>"\$out/metrics.jsonl" && exec sleep 600 ;;
	slow) sleep 3; exit 3 ;;
	esac
	EOF
	cat >bin/scontrol <<-EOF &&
	#!/bin/sh
	echo "scontrol \$*" >>"$PWD/calls"
	EOF
	chmod +x bin/srun bin/scontrol &&
	rm -f calls
}

# job RESTARTS: run the script as the batch step of job 77 would
job() {
	env -u DPTRAIN_OUTPUT_DIR PATH="$PWD/bin:$PATH" SLURM_JOB_ID=77 SLURM_SUBMIT_DIR="$PWD" \
		SLURM_RESTART_COUNT="$1" bash "$script" >job.out 2>job.err
}

test_expect_success 'a run that writes the final weights: done, nothing requeued' '
	fake_slurm finish &&
	job 0 &&
	test -f lenet.77/model.safetensors &&
	! grep scontrol calls &&
	test_must_be_empty job.err
'

test_expect_success 'srun exits 0 but no task ran: not finished, the job requeues itself' '
	rm -rf lenet.77 && fake_slurm nolaunch &&
	test_expect_code 1 job 0 &&
	cat job.out job.err &&
	grep "srun exited 0 but training did not finish (no new .*/lenet.77/model.safetensors)" job.err &&
	grep "^scontrol requeue 77$" calls &&
	grep "requeueing job 77" job.out
'

test_expect_success 'final weights of an earlier run do not count as this run finishing' '
	fake_slurm nolaunch &&
	mkdir -p lenet.77 && : >lenet.77/model.safetensors &&
	test_expect_code 1 job 1 &&
	grep "^scontrol requeue 77$" calls
'

test_expect_success 'a stop with a checkpoint (exit 4): requeued, the checkpoint named' '
	rm -rf lenet.77 && fake_slurm stop &&
	test_expect_code 4 job 0 &&
	grep "stopped with a checkpoint (.*/lenet.77/checkpoints/step-40)" job.out &&
	grep "^scontrol requeue 77$" calls
'

test_expect_success 'too many requeues: it gives up, naming the last good checkpoint' '
	fake_slurm nolaunch &&
	test_expect_code 1 job 10 &&
	cat job.err &&
	! grep scontrol calls &&
	grep "giving up after 10 requeues" job.err &&
	grep "the last good checkpoint is .*/lenet.77/checkpoints/step-40; submit this script again with DPTRAIN_OUTPUT_DIR=.*/lenet.77 to resume from it" job.err
'

test_expect_success 'a crash (exit 3): not requeued, its status kept, the checkpoint named' '
	fake_slurm crash &&
	test_expect_code 3 job 0 &&
	! grep scontrol calls &&
	grep "training did not finish (exit status 3); the last good checkpoint is .*/lenet.77/checkpoints/step-40" job.err
'

test_expect_success 'nothing saved yet: it says so' '
	rm -rf lenet.77 && fake_slurm crash &&
	test_expect_code 3 job 0 &&
	grep "the last good checkpoint is none (nothing was saved)" job.err
'

test_expect_success 'a run whose batch host died is named by the next run' '
	rm -rf lenet.77 && fake_slurm finish &&
	job 0 &&
	! test -e lenet-77.running &&
	! grep "ended with its job script unfinished" job.err &&
	fake_slurm stop &&
	test_expect_code 4 job 1 &&
	! test -e lenet-77.running &&
	: the batch step of restart 2 is killed with its node, as a SIGKILL does &&
	cat >bin/srun <<-\EOF &&
	#!/bin/sh
	kill -9 $PPID
	EOF
	export SLURMD_NODENAME=n7 &&
	test_expect_code 137 job 2 &&
	unset SLURMD_NODENAME &&
	test -f lenet-77.running &&
	fake_slurm finish &&
	job 3 &&
	cat job.err &&
	grep "the run before this one (restart 2 of job 77 on batch host n7) ended with its job script unfinished: that node failed or was rebooted and Slurm requeued the job" job.err &&
	! test -e lenet-77.running
'

test_expect_success 'srun that never returns after the trainer ended: ended, training done' '
	rm -rf lenet.77 && fake_slurm finish-hang &&
	SRUN_STUCK_S=2 && export SRUN_STUCK_S &&
	job 0 &&
	cat job.err &&
	grep "srun still runs 2 s after the trainer.s last event (end): its tasks ended but Slurm did not hear" job.err &&
	! grep scontrol calls
'

test_expect_success 'srun that never returns after a stop: ended, the job requeued' '
	fake_slurm stop-hang &&
	test_expect_code 4 job 1 &&
	grep "(stop): its tasks ended but Slurm did not hear" job.err &&
	grep "stopped with a checkpoint (.*/lenet.77/checkpoints/step-60)" job.out &&
	grep "^scontrol requeue 77$" calls
'

test_expect_success 'a run without its last event is waited for, however long; earlier runs events do not count' '
	fake_slurm slow &&
	SRUN_STUCK_S=1 &&
	test_expect_code 3 job 2 &&
	unset SRUN_STUCK_S &&
	grep -c "\"event\":\"\(end\|stop\)\"" lenet.77/metrics.jsonl >count &&
	echo 2 >expect && test_cmp expect count &&
	! grep "Slurm did not hear" job.err
'

test_expect_success 'SRUN_STUCK_S that is not a number: refused before srun, saying why' '
	fake_slurm finish &&
	SRUN_STUCK_S=2m && export SRUN_STUCK_S &&
	test_expect_code 2 job 0 &&
	unset SRUN_STUCK_S &&
	grep "SRUN_STUCK_S=2m: want a number of seconds" job.err &&
	test_must_fail grep srun calls
'

test_done
