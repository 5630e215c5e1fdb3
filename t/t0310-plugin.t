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

PLUGIN_SO=$DPTRAIN_BUILD_DIR/lib/dptrain.so
TRAINER=$DPTRAIN_BUILD_DIR/bin/dptrain

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
	grep "^required $PLUGIN_SO " "$DPTRAIN_CLUSTER_DIR/plugstack.conf" &&
	PROBE=$DPTRAIN_CLUSTER_RUNDIR/probe.sh &&
	PROBE_OUT=$PWD/probe && export PROBE_OUT &&
	mkdir probe work &&
	cat >"$PROBE" <<-\EOF &&
	#!/bin/sh
	# probe launcher: records what dptrain.so handed over, then runs the task command
	n=${SLURM_PROCID:-x}
	for a in "$0" "$@"; do printf "%s\n" "$a"; done >"$PROBE_OUT/argv.$n"
	env | sort >"$PROBE_OUT/env.$n"
	echo "step ${SLURM_STEP_ID:-none} rank $n: $*" >>"$PROBE_OUT/calls"
	exec "$@"
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

test_expect_success '--dptrain with no file is refused' '
	test_expect_code 1 timeout 30 srun -n1 --dptrain= true 2>err &&
	grep "error: dptrain: --dptrain needs a job config file" err
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

test_expect_success 'a --dptrain task runs the launcher with its original command line' '
	top=$PWD &&
	(cd work && timeout 30 srun -N2 -n2 --dptrain="$top/good.json" \
		sh -c "printf \"%s|\" \"\$@\"; echo" arg0 "two words" "" "\$HOME") >out &&
	printf "two words||\$HOME|\n" >expect1 &&
	cat expect1 expect1 >expect &&
	test_cmp expect out &&
	for r in 0 1; do
		printf "%s\n" "$PROBE" sh -c "printf \"%s|\" \"\$@\"; echo" \
			arg0 "two words" "" "\$HOME" >expect &&
		test_cmp expect probe/argv.$r || return 1
	done
'

# PMIX_MCA_gds=hash only where dptrain was built with PMIx 4 (dptrain(8), VERSIONS)
gds=
test_have_prereq PMIX_GDS_HASH && gds=PMIX_MCA_gds=hash
test_expect_success 'the launcher gets the plain environment plus exactly the dptrain variables' '
	for r in 0 1; do
		per_run probe/env.$r >with.$r &&
		per_run plain.$r >without.$r &&
		comm -13 without.$r with.$r >added.$r &&
		comm -23 without.$r with.$r >removed.$r &&
		printf "%s\n" "DPTRAIN_CONFIG=$PWD/good.json" "DPTRAIN_TRAINER=$TRAINER" $gds |
			sort >expect &&
		test_cmp expect added.$r &&
		test_must_be_empty removed.$r || return 1
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
		sh -c "echo \$DPTRAIN_CONFIG" >out &&
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

test_expect_success 'a launcher that does not exist fails the task, naming it and the node' '
	plugstack launcher=/nonexistent/dptrain-launch &&
	test_must_fail timeout 30 srun -n1 --dptrain=good.json true 2>err &&
	cat err &&
	grep "dptrain: the launcher /nonexistent/dptrain-launch cannot be executed on node n1: No such file" err &&
	timeout 30 srun -n1 true &&
	plugstack
'

test_expect_success 'a launcher that is not executable fails the task' '
	cp "$PROBE" "$DPTRAIN_CLUSTER_RUNDIR/noexec.sh" && chmod 644 "$DPTRAIN_CLUSTER_RUNDIR/noexec.sh" &&
	plugstack launcher=$DPTRAIN_CLUSTER_RUNDIR/noexec.sh &&
	test_must_fail timeout 30 srun -n1 --dptrain=good.json true 2>err &&
	grep "dptrain: the launcher .*noexec.sh cannot be executed on node n1: Permission denied" err &&
	plugstack
'

test_expect_success 'an unknown plugstack.conf argument fails every srun, naming it' '
	plugstack launcher=$PROBE bogus=1 &&
	test_must_fail timeout 30 srun -n1 true 2>err &&
	grep "dptrain: plugstack.conf: unknown argument .bogus=1." err &&
	grep "dptrain: the plugstack.conf line is: .* bogus=1" err &&
	plugstack
'

test_expect_success 'bad plugstack.conf values are refused with what is expected' '
	for a in launcher=relative/path trainer=dptrain "timeout=0" "timeout=abc" timeout=1.5 \
		"iface=a/b" "output_dir=" "launcher=/a launcher=/b" noequals; do
		plugstack $a &&
		test_must_fail timeout 30 srun -n1 true 2>err &&
		grep "error: dptrain: plugstack.conf: " err || return 1
	done &&
	plugstack
'

test_expect_success 'the plugstack.conf example that make install ships is valid' '
	sed -e "s|@LIBDIR@/slurm/dptrain.so|$PLUGIN_SO|" -e "s|@BINDIR@/dptrain-launch|$PROBE|" \
		-e "s|@BINDIR@|$DPTRAIN_BUILD_DIR/bin|g" "$DPTRAIN_SRC_DIR/contrib/plugstack.conf.in" \
		>example.conf &&
	! grep @ example.conf &&
	grep "^required " example.conf >lines &&
	sed -n "s/^# \(required\|optional\) /\1 /p" example.conf >>lines &&
	test "$(wc -l <lines)" -ge 3 &&
	while read -r line; do
		echo "$line" >"$DPTRAIN_CLUSTER_DIR/plugstack.conf" &&
		srun --help | grep -q -- "--dptrain=FILE" &&
		timeout 30 srun -n1 true || return 1
	done <lines &&
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
		srun -n1 sh -c "echo plain \${DPTRAIN_CONFIG:-none}"
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
	grep "^done\$" job.out &&
	head -n 2 probe/argv.0 >argv && printf "%s\n" "$PROBE" sh >expect && test_cmp expect argv &&
	head -n 2 probe/argv.1 >argv && test_cmp expect argv &&
	cat probe/calls &&
	test "$(wc -l <probe/calls)" -eq 4 &&
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

# What the man page says about TaskProlog: with the exec hand-off (Slurm before 23.11) the
# task goes to the launcher before slurmstepd runs it; with spank_prepend_task_argv it runs.
test_expect_success 'TaskProlog runs for plain tasks; for dptrain tasks only on Slurm >= 23.11' '
	prolog=/tmp/dptrain-t0310-taskprolog.$$ &&
	test_when_finished "rm -f $prolog" &&
	printf "#!/bin/sh\necho export FROM_TASKPROLOG=yes\n" >$prolog &&
	chmod 755 $prolog &&
	dp_cluster_start -d "$PWD/prolog" --conf TaskProlog=$prolog &&
	plugstack &&
	timeout 30 srun -n1 sh -c "echo \${FROM_TASKPROLOG:-no}" >plain.out &&
	echo yes >expect && test_cmp expect plain.out &&
	timeout 30 srun -n1 --dptrain=good.json sh -c "echo \${FROM_TASKPROLOG:-no}" >dp.out &&
	version=$(srun --version | awk "{print \$NF}") &&
	case "$version" in
	2[0-2].* | 23.0[0-9].*) echo no >expect ;;
	*) echo yes >expect ;;
	esac &&
	test_cmp expect dp.out &&
	dp_cluster_stop "$PWD/prolog"
'

test_done
