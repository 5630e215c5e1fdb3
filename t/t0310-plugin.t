#!/bin/sh
# t0310-plugin.t — dptrain.so in a real Slurm: --dptrain in srun, sbatch and salloc; the config
# refused before launch; the task handed to a real (probe) launcher with its argv and the
# environment; jobs without --dptrain left exactly as they are; plugstack.conf mistakes.

test_description='the SPANK plugin dptrain.so in a local Slurm'

. "$(dirname "$0")/sharness.sh"

if ! test_have_prereq LOCALCLUSTER; then
	skip_all='needs root and slurm-wlm + munge (make deps) to run a local Slurm'
	test_done
fi
if ! test_have_prereq PLUGIN; then
	skip_all='dptrain.so was not built (needs libslurm-dev)'
	test_done
fi
unset DPTRAIN_CONFIG DPTRAIN_OUTPUT_DIR DPTRAIN_IFACE DPTRAIN_TIMEOUT DPTRAIN_TRAINER

# The plugin and the trainer as plugstack.conf names them (set once the cluster runs: its
# spelling of the build directory, DPTRAIN_CLUSTER_BUILD, has no blank where the build's has).
PLUGIN_SO=
VERSION=$(cat "$DPTRAIN_SRC_DIR/VERSION")
TRAINER=

# plugstack [ARGS...]: list the plugin with ARGS (no ARGS: the probe launcher); plugstack
# --none: no plugin. Slurm re-reads plugstack.conf for every step and every srun.
plugstack() {
	if test "$1" = --none; then
		echo "# no plugin" >"$DPTRAIN_CLUSTER_DIR/plugstack.conf"
	elif test $# = 0; then
		echo "required $PLUGIN_SO launcher=$PROBE trainer=$TRAINER" \
			>"$DPTRAIN_CLUSTER_DIR/plugstack.conf"
	else
		echo "required $PLUGIN_SO $*" >"$DPTRAIN_CLUSTER_DIR/plugstack.conf"
	fi
}

# Variables whose values change from one job or step to the next, whatever the plugin does.
per_run() {
	sed -E 's/^(SLURM_JOB_ID|SLURM_JOBID|SLURM_TASK_PID|SLURM_SRUN_COMM_PORT|SLURM_STEP_LAUNCHER_PORT|SLURM_PMIXP_ABORT_AGENT_PORT|SLURM_JOB_START_TIME|SLURM_JOB_END_TIME|PMIX_NAMESPACE|PMIX_SERVER_TMPDIR|PMIX_SERVER_URI[0-9]*|PMIX_DSTORE_[0-9A-Z_]*BASE_PATH|OMPI_MCA_orte_precondition_transports)=.*/\1=<per run>/' "$1"
}

# allocations: jobs the controller has accepted so far.
allocations() {
	grep -c -E "_slurm_rpc_allocate_resources|_slurm_rpc_submit_batch_job" \
		"$DPTRAIN_CLUSTER_DIR/log/slurmctld.log"
}

test_expect_success 'start a two-node cluster with the plugin and a probe launcher' '
	dp_cluster_start -N 2 -c 4 &&
	PLUGIN_SO=$DPTRAIN_CLUSTER_BUILD/lib/dptrain.so && TRAINER=$DPTRAIN_CLUSTER_BUILD/bin/dptrain &&
	grep "^required $PLUGIN_SO " "$DPTRAIN_CLUSTER_DIR/plugstack.conf" &&
	PROBE=$DPTRAIN_CLUSTER_RUNDIR/probe.sh &&
	PROBE_OUT=$PWD/probe && export PROBE_OUT &&
	mkdir probe work &&
	cat >"$PROBE" <<-\EOF &&
	#!/bin/sh
	# probe launcher: records what dptrain.so handed over, then answers as dptrain-launch
	# --wire-up=FD does (the records of task/wire.h), with nothing to change; Slurm runs the command.
	n=${SLURM_PROCID:-x}
	# the watcher asking to end the step after a failed command: noted, not done
	case "$1" in --abort=*) echo "rank $n: $*" >>"$PROBE_OUT/aborts"; exit 0 ;; esac
	for a in "$0" "$@"; do printf "%s\n" "$a"; done >"$PROBE_OUT/argv.$n"
	env | sort >"$PROBE_OUT/env.$n"
	test "$1" = --wire-up=3 && shift && shift
	echo "step ${SLURM_STEP_ID:-none} rank $n: $*" >>"$PROBE_OUT/calls"
	printf "D60\0Z\0" >&3
	EOF
	chmod +x "$PROBE" &&
	plugstack &&
	cat >good.json <<-\EOF &&
	{
	  "model": {"name": "mlp", "num_classes": 10, "input_shape": [1, 8, 8], "hidden": [16]},
	  "data": {"format": "synthetic", "train": {"size": 64}, "batch_size": 8},
	  "train": {"epochs": 1}
	}
	EOF
	sed "s/\"model\"/\"modle\"/" good.json >bad.json
'

test_expect_success 'srun, sbatch and salloc --help list --dptrain as [dptrain]' '
	srun --help >srun.help && grep -- "--dptrain=FILE *\[dptrain\]" srun.help &&
	sbatch --help >sbatch.help && grep -- "--dptrain=FILE *\[dptrain\]" sbatch.help &&
	salloc --help >salloc.help && grep -- "--dptrain=FILE *\[dptrain\]" salloc.help
'

test_expect_success 'a job without --dptrain: same environment as without the plugin, no file' '
	plugstack --none &&
	(cd work && timeout 30 srun -N2 -n2 sh -c "env | sort >../plain.\$SLURM_PROCID") &&
	plugstack &&
	(cd work && timeout 30 srun -N2 -n2 sh -c "env | sort >../listed.\$SLURM_PROCID") &&
	for r in 0 1; do
		per_run plain.$r >plain.$r.masked &&
		per_run listed.$r >listed.$r.masked &&
		test_cmp plain.$r.masked listed.$r.masked || return 1
	done &&
	grep "^SLURM_JOB_ID=<per run>" plain.0.masked &&
	! grep DPTRAIN_CONFIG plain.0 &&
	test -z "$(ls -A work)" &&
	test -z "$(ls -A probe)"
'

test_expect_success 'a bad config fails srun before anything is launched' '
	before=$(allocations) &&
	test_expect_code 1 timeout 30 srun -n2 --dptrain=bad.json true 2>err &&
	cat err &&
	grep "error: dptrain: .*$PWD/bad.json.*modle" err &&
	test "$(allocations)" = "$before" &&
	test -z "$(ls -A probe)"
'

test_expect_success 'a missing config file is refused, naming it' '
	test_expect_code 1 timeout 30 srun -n1 --dptrain=no-such.json true 2>err &&
	grep "error: dptrain: .*$PWD/no-such.json" err &&
	test -z "$(ls -A probe)"
'

test_expect_success 'a FIFO as the config is refused at once, not waited on' '
	mkfifo fifo.json &&
	{ sleep 600 >fifo.json & } &&
	holder=$! &&
	test_when_finished "kill $holder 2>/dev/null; rm -f fifo.json" &&
	test_expect_code 1 timeout 30 srun -n1 --dptrain=fifo.json true 2>err &&
	grep "error: dptrain: .*fifo.json: not a regular file" err &&
	test -z "$(ls -A probe)"
'

test_expect_success '--dptrain= with an empty value is refused (--dptrain alone is not)' '
	test_expect_code 1 timeout 30 srun -n1 --dptrain= true 2>err &&
	grep "error: dptrain: --dptrain= has an empty value: give the job config" err &&
	test -z "$(ls -A probe)"
'

test_expect_success 'DPTRAIN_CONFIG is the fallback, validated the same way' '
	test_expect_code 1 env DPTRAIN_CONFIG=bad.json timeout 30 srun -n1 true 2>err &&
	grep "error: dptrain: .*modle.*DPTRAIN_CONFIG=bad.json" err &&
	test -z "$(ls -A probe)" &&
	DPTRAIN_CONFIG=good.json timeout 30 srun -n1 sh -c "echo \$DPTRAIN_CONFIG" >out &&
	echo "$PWD/good.json" >expect &&
	test_cmp expect out &&
	test -s probe/argv.0 &&
	rm -f probe/*
'

test_expect_success '--dptrain wins over DPTRAIN_CONFIG' '
	DPTRAIN_CONFIG=bad.json timeout 30 srun -n1 --dptrain=good.json \
		sh -c "echo \$DPTRAIN_CONFIG" >out &&
	echo "$PWD/good.json" >expect &&
	test_cmp expect out &&
	rm -f probe/*
'

test_expect_success 'a --dptrain task: the launcher is told its command line, Slurm runs it' '
	top=$PWD &&
	(cd work && timeout 30 srun -N2 -n2 --dptrain="$top/good.json" \
		sh -c "printf \"%s|\" \"\$@\"; echo" arg0 "two words" "" "\$HOME") >out &&
	printf "two words||\$HOME|\n" >expect1 &&
	cat expect1 expect1 >expect &&
	test_cmp expect out &&
	for r in 0 1; do
		printf "%s\n" "$PROBE" --wire-up=3 -- sh -c "printf \"%s|\" \"\$@\"; echo" \
			arg0 "two words" "" "\$HOME" >expect &&
		test_cmp expect probe/argv.$r || return 1
	done &&
	# Slurm ran the command itself, in a fork of the task'"'"'s process, which watches it under
	# a name of its own (dptrain-watch: proctrack/linuxproc spares every "slurmstepd"), a
	# child of slurmstepd
	timeout 30 srun -N2 -n2 --dptrain="$top/good.json" \
		sh -c "echo \$(cat /proc/\$PPID/comm) \$(ps -o comm= -p \$(ps -o ppid= -p \$PPID))" \
		>parents &&
	echo "dptrain-watch slurmstepd" >expect1 &&
	cat expect1 expect1 >expect &&
	test_cmp expect parents
'

# PMIX_MCA_gds=hash only where dptrain was built with PMIx 4 (dptrain(8), VERSIONS)
gds=
test_have_prereq PMIX_GDS_HASH && gds=PMIX_MCA_gds=hash
test_expect_success 'the task gets the plain environment plus exactly the dptrain variables' '
	top=$PWD && (cd work && timeout 30 srun -N2 -n2 --dptrain="$top/good.json" \
		sh -c "env | sort >../task.\$SLURM_PROCID") &&
	for r in 0 1; do
		per_run task.$r >with.$r &&
		per_run plain.$r >without.$r &&
		# the step secret is a fresh 32 hex digits
		comm -13 without.$r with.$r |
			sed -E "s/^(DPTRAIN_STORE_SECRET=)[0-9a-f]{32}\$/\1(32 hex digits)/" >added.$r &&
		comm -23 without.$r with.$r >removed.$r &&
		printf "%s\n" "DPTRAIN_CONFIG=$PWD/good.json" "DPTRAIN_TRAINER=$TRAINER" $gds \
			"DPTRAIN_STORE_SECRET=(32 hex digits)" | sort >expect &&
		test_cmp expect added.$r &&
		test_must_be_empty removed.$r &&
		# and the launcher had the same, as Slurm had built it for the task so far
		grep "^SLURM_PROCID=$r\$" probe/env.$r &&
		grep "^DPTRAIN_CONFIG=$PWD/good.json\$" probe/env.$r || return 1
	done
'

test_expect_success 'resource limits of the submitting shell still reach the task' '
	(ulimit -S -n 777 && ulimit -S -c 0 &&
		timeout 30 srun -n1 sh -c "ulimit -n; ulimit -c" >plain.limits &&
		timeout 30 srun -n1 --dptrain=good.json sh -c "ulimit -n; ulimit -c" >limits) &&
	printf "777\n0\n" >expect &&
	test_cmp expect plain.limits &&
	test_cmp expect limits
'

test_expect_success 'the config path is absolute wherever the task starts' '
	rm -f probe/* &&
	timeout 30 srun -n1 --chdir=/ --dptrain=./good.json sh -c "echo \$DPTRAIN_CONFIG; pwd" >out &&
	printf "%s\n" "$PWD/good.json" / >expect &&
	test_cmp expect out
'

test_expect_success 'with --export=NONE a relative path is a clear task error' '
	test_must_fail timeout 30 srun -n1 --export=NONE --dptrain=good.json true 2>err &&
	grep "dptrain: the job config path .good.json. is not absolute" err &&
	timeout 30 srun -n1 --export=NONE --dptrain="$PWD/good.json" \
		/bin/sh -c "echo \$DPTRAIN_CONFIG" >out &&
	echo "$PWD/good.json" >expect &&
	test_cmp expect out
'

test_expect_success 'the exit code of the command is the exit code of srun' '
	test_expect_code 7 timeout 30 srun -n2 --dptrain=good.json sh -c "exit 7" &&
	timeout 30 srun -n2 --dptrain=good.json true
'

test_expect_success 'plugstack.conf output_dir=, iface=, timeout=, trainer= reach the task' '
	plugstack launcher=$PROBE output_dir=/tmp/dp-out.%j iface=lo timeout=42 \
		trainer=/opt/x/dptrain &&
	timeout 30 srun -n1 --dptrain=good.json sh -c \
		"echo \$DPTRAIN_OUTPUT_DIR \$DPTRAIN_IFACE \$DPTRAIN_TIMEOUT \$DPTRAIN_TRAINER" >out &&
	echo "/tmp/dp-out.%j lo 42 /opt/x/dptrain" >expect &&
	test_cmp expect out &&
	plugstack
'

# Site policy (dptrain(8), PLUGSTACK.CONF ARGUMENTS): what the plugin passes on, over the job's
# own values, and what srun refuses before anything is allocated.
test_expect_success 'site policy: default_output_dir=, max_timeout=, max_data_workers= reach the task' '
	plugstack launcher=$PROBE default_output_dir=/scratch/%u/dp.%j max_timeout=600 \
		max_data_workers=4 &&
	DPTRAIN_MAX_TIMEOUT=99999 DPTRAIN_MAX_DATA_WORKERS=99 timeout 30 srun -n1 \
		--dptrain=good.json sh -c "echo \$DPTRAIN_DEFAULT_OUTPUT_DIR \$DPTRAIN_MAX_TIMEOUT \$DPTRAIN_MAX_DATA_WORKERS" >out &&
	echo "/scratch/%u/dp.%j 600 4" >expect &&
	test_cmp expect out &&
	plugstack
'

test_expect_success 'site policy: a config above max_timeout= is refused at srun, naming the key' '
	plugstack launcher=$PROBE max_timeout=600 &&
	sed "s/\"train\": {\"epochs\"/\"timeouts\": {\"rendezvous_s\": 3600}, &/" good.json >slow.json &&
	before=$(allocations) &&
	test_expect_code 1 timeout 30 srun -n1 --dptrain=slow.json true 2>err &&
	cat err &&
	grep "error: dptrain: .*/slow.json: timeouts.rendezvous_s is 3600 s, more than this site allows (max_timeout=600 in plugstack.conf" err &&
	test "$(allocations)" = "$before" &&
	plugstack
'

test_expect_success 'site policy: the launcher refuses a DPTRAIN_TIMEOUT above max_timeout= in the rank' '
	plugstack launcher=$DPTRAIN_CLUSTER_BUILD/bin/dptrain-launch max_timeout=600 &&
	mkdir -p policy && (cd policy &&
	test_must_fail env DPTRAIN_TIMEOUT=3600 timeout 60 srun -n1 --dptrain true 2>../err) &&
	cat err &&
	grep "a rendezvous timeout of 3600 s (DPTRAIN_TIMEOUT) is more than this site allows: at most 600 s (max_timeout= in plugstack.conf" err &&
	(cd policy && DPTRAIN_TIMEOUT=600 timeout 60 srun -n1 --dptrain true) &&
	plugstack
'

test_expect_success 'site policy: default_output_dir= where the config names no output.dir' '
	plugstack launcher=$DPTRAIN_CLUSTER_BUILD/bin/dptrain-launch \
		default_output_dir=$DPTRAIN_CLUSTER_RUNDIR/site/%u.%j.%s &&
	(cd policy && timeout 60 srun -n1 --dptrain=../good.json sh -c "echo \$DPTRAIN_OUTPUT_DIR") >out &&
	cat out &&
	grep "/site/$(id -un)\.[0-9]*\.0\$" out &&
	test -d "$(cat out)" &&
	sed "s/\"train\": {\"epochs\"/\"output\": {\"dir\": \"mine.%j\"}, &/" good.json >mine.json &&
	(cd policy && timeout 60 srun -n1 --dptrain=../mine.json sh -c "echo \$DPTRAIN_OUTPUT_DIR") >out &&
	cat out &&
	grep "/policy/mine\.[0-9]*\$" out &&
	plugstack
'

test_expect_success 'site policy: max_data_workers= refuses a bundled-trainer config above it' '
	plugstack launcher=$PROBE trainer=$TRAINER max_data_workers=2 &&
	sed "s/\"batch_size\": 8/\"batch_size\": 8, \"workers\": 4/" good.json >w4.json &&
	grep "\"workers\": 4" w4.json &&
	rm -f probe/* &&
	test_expect_code 1 timeout 30 srun -n1 --dptrain=w4.json dptrain 2>err &&
	cat err &&
	grep "error: dptrain: .*/w4.json: data.workers is 4, more than this site allows (max_data_workers=2 per rank in plugstack.conf" err &&
	test -z "$(ls -A probe)" &&
	timeout 30 srun -n1 --dptrain=w4.json true &&
	test_expect_code 1 env DPTRAIN_MAX_DATA_WORKERS=2 "$TRAINER" w4.json 2>err &&
	grep "dptrain: w4.json: data.workers is 4, more than this site allows (at most 2 per rank" err &&
	test_expect_code 1 env DPTRAIN_MAX_DATA_WORKERS=2 "$TRAINER" good.json data.workers=3 2>err &&
	grep "data.workers is 3, more than this site allows" err &&
	plugstack
'

test_expect_success 'site policy: trainer=none refuses the bundled trainer, keeps the wire-up' '
	plugstack launcher=$PROBE trainer=none &&
	rm -f probe/* &&
	test_expect_code 1 timeout 30 srun -n1 --dptrain=good.json dptrain 2>err &&
	cat err &&
	grep "error: dptrain: this site disabled the bundled trainer dptrain (trainer=none in plugstack.conf)" err &&
	test -z "$(ls -A probe)" &&
	timeout 30 srun -n1 --dptrain=good.json sh -c "echo \${DPTRAIN_TRAINER-unset}" >out &&
	echo unset >expect &&
	test_cmp expect out &&
	plugstack
'

test_expect_success 'dptrain not on the PATH: the trainer= program runs for it' '
	PATH=/usr/sbin:/usr/bin:/sbin:/bin timeout 30 srun -n1 --dptrain=good.json \
		dptrain --version >out &&
	"$TRAINER" --version >expect &&
	test_cmp expect out &&
	test_must_fail env PATH=/usr/sbin:/usr/bin:/sbin:/bin timeout 30 srun -n1 dptrain --version
'

# The next three name the node: -w n1, since Slurm may place a one-task step on either node
# (it took n2 once, in the Debian 13 root, with the other test of the pair running).
test_expect_success 'a wire-up that hangs is stopped at its own limit + 30 s, naming the rank' '
	cat >"$DPTRAIN_CLUSTER_RUNDIR/hang.sh" <<-\EOF &&
	#!/bin/sh
	# says its limit is 1 s, then never answers
	printf "D1\0" >&3
	exec sleep 600
	EOF
	chmod +x "$DPTRAIN_CLUSTER_RUNDIR/hang.sh" &&
	plugstack launcher=$DPTRAIN_CLUSTER_RUNDIR/hang.sh &&
	test_must_fail timeout 120 srun -n1 -w n1 --dptrain=good.json true 2>err &&
	cat err &&
	grep "dptrain: rank 0 on n1: the wire-up (.*hang.sh) did not finish within 31 s; stopped it" err &&
	plugstack
'

test_expect_success 'a launcher that does not exist fails the task, naming it and the node' '
	plugstack launcher=/nonexistent/dptrain-launch &&
	test_must_fail timeout 30 srun -n1 -w n1 --dptrain=good.json true 2>err &&
	cat err &&
	grep "dptrain: the launcher /nonexistent/dptrain-launch cannot be executed (rank 0 on n1): No such file" err &&
	timeout 30 srun -n1 true &&
	plugstack
'

test_expect_success 'a launcher that is not executable fails the task' '
	cp "$PROBE" "$DPTRAIN_CLUSTER_RUNDIR/noexec.sh" && chmod 644 "$DPTRAIN_CLUSTER_RUNDIR/noexec.sh" &&
	plugstack launcher=$DPTRAIN_CLUSTER_RUNDIR/noexec.sh &&
	test_must_fail timeout 30 srun -n1 -w n1 --dptrain=good.json true 2>err &&
	grep "dptrain: the launcher .*noexec.sh cannot be executed (rank 0 on n1): Permission denied" err &&
	plugstack
'

# A half-upgraded node: plugin and launcher of two wire-up protocol versions (task/wire.h).
# The plugin refuses the launcher at its first record, naming the node and both versions,
# never misreading what follows; it does not wait out the helper (which would run 10 minutes).
test_expect_success 'a launcher of another wire-up protocol fails the step at once, naming both versions' '
	cat >"$DPTRAIN_CLUSTER_RUNDIR/v2.sh" <<-\EOF &&
	#!/bin/sh
	# a dptrain-launch of a later version: protocol 2, then ten minutes of work
	printf "D60 2\0EWHATEVER=1\0" >&3
	exec sleep 600
	EOF
	chmod +x "$DPTRAIN_CLUSTER_RUNDIR/v2.sh" &&
	plugstack launcher=$DPTRAIN_CLUSTER_RUNDIR/v2.sh &&
	rc=0 && timeout 60 srun -n1 -w n2 --dptrain=good.json true 2>err || rc=$? &&
	cat err &&
	test $rc != 0 && test $rc != 124 &&
	grep "dptrain: rank 0 on n2: the launcher $DPTRAIN_CLUSTER_RUNDIR/v2.sh speaks wire-up protocol 2, this plugin (dptrain.so $VERSION) 1: install the same dptrain version of plugin and launcher on every node" err &&
	! pgrep -f "$DPTRAIN_CLUSTER_RUNDIR/v2.sh" &&
	plugstack &&
	timeout 60 srun -n1 -w n2 --dptrain=good.json true
'

# The same with a real build of a later release: the launcher rebuilt with wire-up protocol 2
# and release 9.9.9 (the Makefile's dptrain-launch-wire2), beside this build's plugin.
test_expect_success 'a launcher built for another wire-up protocol fails the step at once, naming node and versions' '
	WIRE2=$DPTRAIN_CLUSTER_BUILD/t/dptrain-launch-wire2 &&
	"$WIRE2" --version >out &&
	echo "dptrain-launch 9.9.9 (wire-up protocol 2)" >expect &&
	test_cmp expect out &&
	plugstack launcher=$WIRE2 &&
	rc=0 && timeout 60 srun -n1 -w n2 --dptrain=good.json true 2>err || rc=$? &&
	cat err &&
	test $rc != 0 && test $rc != 124 &&
	grep "dptrain: rank 0 on n2: the launcher $WIRE2 (dptrain-launch 9.9.9) speaks wire-up protocol 2, this plugin (dptrain.so $VERSION) 1: install the same dptrain version of plugin and launcher on every node" err &&
	! pgrep -f "$WIRE2" &&
	plugstack
'

test_expect_success 'srun --dptrain-version: the plugin, its protocol and Slurm, and the launcher here' '
	plugstack launcher=$DPTRAIN_CLUSTER_BUILD/bin/dptrain-launch &&
	before=$(allocations) &&
	timeout 30 srun --dptrain-version >out 2>err &&
	cat out &&
	grep -x "dptrain.so $VERSION (wire-up protocol 1, built for Slurm [0-9]*\.[0-9]*\.[0-9]*)" out &&
	grep -x "launcher $DPTRAIN_CLUSTER_BUILD/bin/dptrain-launch: dptrain-launch $VERSION (wire-up protocol 1)" out &&
	test_must_be_empty err &&
	plugstack launcher=/nonexistent/dptrain-launch &&
	timeout 30 srun --dptrain-version >out &&
	grep "^launcher /nonexistent/dptrain-launch: not installed on this host" out &&
	plugstack bogus=1 &&
	test_expect_code 1 timeout 30 srun --dptrain-version >out &&
	grep "unknown argument .bogus=1." out &&
	test "$(allocations)" = "$before" &&
	plugstack
'

# A site admin's typo must not stop the cluster: it fails --dptrain jobs only, naming the
# word and the line, in required and optional mode; slurmstepd never fails a step for it, so
# no node is drained (a failing slurm_spank_init there fails batch steps too).
test_expect_success 'an unknown plugstack.conf argument fails --dptrain jobs only, naming it' '
	for kind in required optional; do
		echo "$kind $PLUGIN_SO launcher=$PROBE bogus=1" >"$DPTRAIN_CLUSTER_DIR/plugstack.conf" &&
		test_must_fail timeout 30 srun -n1 --dptrain=good.json true 2>err &&
		cat err &&
		grep "dptrain: plugstack.conf: unknown argument .bogus=1." err &&
		grep "the plugstack.conf line is: .* bogus=1" err &&
		test_must_fail env DPTRAIN_CONFIG=good.json timeout 30 srun -n1 true 2>err &&
		grep "unknown argument .bogus=1." err &&
		timeout 30 srun -n1 sh -c "echo plain" >out 2>err &&
		echo plain >expect && test_cmp expect out &&
		test_must_be_empty err || return 1
	done &&
	plugstack
'

test_expect_success 'bad plugstack.conf values fail --dptrain jobs with what is expected' '
	for a in launcher=relative/path trainer=dptrain "timeout=0" "timeout=abc" timeout=1.5 \
		"iface=a/b" "output_dir=" "launcher=/a launcher=/b" noequals \
		max_timeout=10m max_timeout=-5 max_data_workers=0 max_data_workers=2000 \
		"timeout=700 max_timeout=600" default_output_dir=/x/%q default_output_dir=; do
		plugstack $a &&
		test_must_fail timeout 30 srun -n1 --dptrain=good.json true 2>err &&
		grep "error: dptrain: plugstack.conf: " err &&
		key=${a%%=*} && grep "error: dptrain: plugstack.conf: .*$key" err &&
		timeout 30 srun -n1 true || return 1
	done &&
	plugstack
'

test_expect_success 'a plugstack.conf typo drains no node: batch jobs and steps run, nodes stay up' '
	plugstack launcher=$PROBE bogus=1 &&
	printf "#!/bin/sh\nsrun -n1 true && echo batch-ok\n" >plain-job.sh &&
	for i in 1 2 3; do
		timeout 30 sbatch --parsable -N1 -o "$PWD/plain-job.$i.out" plain-job.sh >>jobids || return 1
	done &&
	for i in $(seq 3000); do
		test -z "$(squeue -h 2>/dev/null)" && break; sleep 0.1
	done &&
	test -z "$(squeue -h)" &&
	cat plain-job.1.out plain-job.2.out plain-job.3.out >outs &&
	test "$(grep -c "^batch-ok\$" outs)" = 3 &&
	sinfo -h -N -o "%N %T" >states &&
	cat states &&
	! grep -E "drain|down|fail" states &&
	plugstack
'

test_expect_success 'the plugstack.conf examples that make install and the packages ship are valid' '
	for in in contrib/plugstack.conf.in contrib/pkg/plugstack.conf.in; do
		sed -e "s|@LIBDIR@/slurm/dptrain.so|$PLUGIN_SO|" \
			-e "s|@BINDIR@/dptrain-launch|$PROBE|" -e "s|/scratch/|/tmp/|g" \
			-e "s|@BINDIR@|$DPTRAIN_CLUSTER_BUILD/bin|g" "$DPTRAIN_SRC_DIR/$in" >example.conf &&
		! grep @ example.conf &&
		grep "^required " example.conf >lines &&
		sed -n "s/^# \(required\|optional\) /\1 /p" example.conf >>lines &&
		test "$(wc -l <lines)" -ge 2 || return 1
		while read -r line; do
			case "$line" in *launcher=*) ;; *) line="$line launcher=$PROBE" ;; esac &&
			echo "$line" &&
			echo "$line" >"$DPTRAIN_CLUSTER_DIR/plugstack.conf" &&
			srun --help | grep -q -- "--dptrain=FILE" &&
			timeout 30 srun -n1 --dptrain=good.json true &&
			timeout 30 srun -n1 true || return 1
		done <lines
	done &&
	plugstack
'

test_expect_success 'sbatch --dptrain: the script runs itself, its sruns go through the launcher' '
	rm -f probe/* &&
	cat >job.sh <<-\EOF &&
	#!/bin/sh
	#SBATCH --dptrain=good.json
	#SBATCH -N 2 -n 2
	#SBATCH -o job.out
	echo "script $DPTRAIN_CONFIG"
	srun sh -c "exit 5"
	echo "srun exit $?"
	srun sh -c "echo rank \$SLURM_PROCID \$DPTRAIN_CONFIG"
	env -u DPTRAIN_CONFIG -u SLURM_SPANK__SLURM_SPANK_OPTION_dptrain_dptrain \
		-u _SLURM_SPANK_OPTION_dptrain_dptrain srun -n1 sh -c "echo plain \${DPTRAIN_CONFIG:-none}"
	srun -n1 --dptrain=none sh -c "echo opted-out \${DPTRAIN_CONFIG:-none}"
	mkdir -p elsewhere && cd elsewhere &&
		srun -n1 sh -c "echo from-elsewhere \$DPTRAIN_CONFIG"
	echo done
	EOF
	jobid=$(timeout 30 sbatch --parsable job.sh) &&
	for i in $(seq 3000); do
		test -z "$(squeue -h -j "$jobid" 2>/dev/null)" && break; sleep 0.1
	done &&
	cat job.out &&
	grep "^script $PWD/good.json\$" job.out &&
	grep "^srun exit 5\$" job.out &&
	grep "^rank 0 $PWD/good.json\$" job.out &&
	grep "^rank 1 $PWD/good.json\$" job.out &&
	grep "^plain none\$" job.out &&
	grep "^opted-out none\$" job.out &&
	grep "^from-elsewhere $PWD/good.json\$" job.out &&
	grep "^done\$" job.out &&
	sed -n "1p;4p" probe/argv.0 >argv && printf "%s\n" "$PROBE" sh >expect && test_cmp expect argv &&
	sed -n "1p;4p" probe/argv.1 >argv && test_cmp expect argv &&
	cat probe/calls &&
	test "$(wc -l <probe/calls)" -eq 5 &&
	# exit 5 is a failed rank: both watchers asked to end that step
	grep -c "^rank [01]: --abort=5 dptrain: rank [01] on n[12]: the command exited with status 5; ending the step\$" probe/aborts >n &&
	echo 2 >expect && test_cmp expect n &&
	! grep slurm_script probe/calls
'

test_expect_success 'sbatch with a bad config is refused at submission' '
	before=$(allocations) &&
	sed "s/good.json/bad.json/" job.sh >bad-job.sh &&
	test_must_fail timeout 30 sbatch bad-job.sh 2>err &&
	grep "error: dptrain: .*$PWD/bad.json.*modle" err &&
	test "$(allocations)" = "$before"
'

test_expect_success 'salloc --dptrain: the srun inside goes through the launcher' '
	rm -f probe/* &&
	timeout 30 salloc -n1 --dptrain=good.json srun sh -c "echo \$DPTRAIN_CONFIG" >out &&
	echo "$PWD/good.json" >expect &&
	test_cmp expect out &&
	test -s probe/argv.0 &&
	test_must_fail timeout 30 salloc -n1 --dptrain=bad.json true 2>err &&
	grep "error: dptrain: .*modle" err
'

# dptrain(8): one step of a --dptrain allocation without dptrain, both ways it gives; and
# the relative path resolved where salloc ran, wherever the srun runs.
test_expect_success 'salloc --dptrain: --dptrain=none and the env -u recipe opt a step out' '
	rm -f probe/* && mkdir -p sub &&
	timeout 60 salloc -n1 --dptrain=good.json sh -c "
		srun -n1 --dptrain=none sh -c \"echo none \\\${DPTRAIN_CONFIG:-unset}\" &&
		env -u DPTRAIN_CONFIG -u SLURM_SPANK__SLURM_SPANK_OPTION_dptrain_dptrain \
			-u _SLURM_SPANK_OPTION_dptrain_dptrain \
			srun -n1 sh -c \"echo env \\\${DPTRAIN_CONFIG:-unset}\" &&
		cd sub && srun -n1 sh -c \"echo sub \\\$DPTRAIN_CONFIG\"" >out &&
	printf "none unset\nenv unset\nsub %s\n" "$PWD/good.json" >expect &&
	test_cmp expect out &&
	test "$(wc -l <probe/calls)" = 1
'

# Everything slurmstepd does between the plugins' task_init and its exec of the command, done
# for --dptrain tasks exactly as for plain ones (dptrain(8), HOW IT WORKS): TaskProlog and
# --task-prolog, step memory limits (VSizeFactor), the task_init of a plugin listed after
# dptrain.so. Rank 0 copies its output to the console and its train.log (a tee), rank 1
# only writes its train.log: both paths.
test_expect_success 'setup: a cluster with TaskProlog, VSizeFactor, memory, a later plugin' '
	prolog=/tmp/dptrain-t0310-taskprolog.$$ &&
	printf "#!/bin/sh\necho export FROM_TASKPROLOG=yes\n" >$prolog &&
	chmod 755 $prolog &&
	printf "#!/bin/sh\necho export FROM_USER_PROLOG=yes\n" >uprolog.sh &&
	chmod 755 uprolog.sh &&
	cat >later.c <<-\EOF &&
	#include <slurm/spank.h>
	SPANK_PLUGIN(later, 1);
	int slurm_spank_task_init(spank_t sp, int ac, char **av)
	{
		(void)ac;
		(void)av;
		return spank_setenv(sp, "LATER_PLUGIN", "ran", 1) == ESPANK_SUCCESS ? 0 : -1;
	}
	EOF
	dp_cluster_start -d "$PWD/prolog" -c 4 --memory 4000 --conf TaskProlog=$prolog \
		--conf VSizeFactor=100 &&
	# plugstack.conf takes no spaces in paths: the cluster run directory has none
	${CC:-cc} -shared -fPIC -o "$DPTRAIN_CLUSTER_RUNDIR/later.so" later.c &&
	cp uprolog.sh "$DPTRAIN_CLUSTER_RUNDIR/" && uprolog=$DPTRAIN_CLUSTER_RUNDIR/uprolog.sh &&
	{
		echo "required $PLUGIN_SO launcher=$DPTRAIN_CLUSTER_BUILD/bin/dptrain-launch trainer=$TRAINER" &&
		echo "required $DPTRAIN_CLUSTER_RUNDIR/later.so"
	} >"$DPTRAIN_CLUSTER_DIR/plugstack.conf" &&
	cat >steps.json <<-EOF &&
	{
	  "model": {"name": "mlp", "num_classes": 10, "input_shape": [1, 8, 8], "hidden": [16]},
	  "data": {"format": "synthetic", "train": {"size": 64}, "batch_size": 8},
	  "output": {"dir": "$PWD/steps/%j.%s"}
	}
	EOF
	cat >show.sh <<-\EOF
	#!/bin/sh
	echo "rank $SLURM_PROCID: ${FROM_TASKPROLOG:-no} ${FROM_USER_PROLOG:-no} ${LATER_PLUGIN:-no} $(ulimit -v)"
	EOF
	chmod 755 show.sh
'

test_expect_success 'TaskProlog, --task-prolog, VSizeFactor and later plugins: as without --dptrain' '
	timeout 60 srun -n2 --mem=300 --task-prolog=$uprolog ./show.sh | sort >plain.out &&
	printf "rank %d: yes yes ran 307200\n" 0 1 >expect &&
	test_cmp expect plain.out &&
	timeout 60 srun -n2 --mem=300 --task-prolog=$uprolog --dptrain=steps.json \
		./show.sh >dp.console &&
	d=$(ls -d steps/*) &&
	grep -h "^rank" "$d"/device0/train.log "$d"/device1/train.log | sort >dp.out &&
	test_cmp expect dp.out &&
	# rank 0 also on the console, rank 1 not (output.console: rank0)
	printf "rank 0: yes yes ran 307200\n" >expect0 &&
	test_cmp expect0 dp.console
'

test_expect_success 'the command runs under the step memory limit: 1 GiB fails, as without --dptrain' '
	test_when_finished "rm -f $prolog" &&
	big="b = bytearray(1 << 30)" &&
	test_must_fail timeout 60 srun -n1 --mem=300 /usr/bin/python3 -c "$big" 2>plain.err &&
	grep MemoryError plain.err &&
	test_must_fail timeout 60 srun -n1 --mem=300 --dptrain=steps.json \
		/usr/bin/python3 -c "$big" 2>dp.err &&
	d=$(ls -td steps/* | head -n 1) &&
	grep MemoryError "$d/device0/train.log" &&
	timeout 60 srun -n1 --mem=3000 --dptrain=steps.json /usr/bin/python3 -c "$big" &&
	dp_cluster_stop "$PWD/prolog"
'

test_done
