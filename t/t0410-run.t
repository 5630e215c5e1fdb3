#!/bin/sh
# t0410-run.t — dptrain-run: N local ranks through dptrain-launch with the env source; their
# variables, rank table, device directories and logs; failure handling (a failed rank stops
# the others), signal forwarding, exit codes. Owns only its trash directory.

test_description='dptrain-run starts local ranks like the plugin would'

. "$(dirname "$0")/sharness.sh"

if ! test_have_prereq LAUNCH || ! test -x "$DPTRAIN_BUILD_DIR/bin/dptrain-run"; then
	skip_all='dptrain-launch/dptrain-run not built'
	test_done
fi

# Every process a test starts carries MARK in its environment: that, not a name, finds what
# is left running (other tests may run the same programs at the same time).
MARK="T0410_MARK=$$.$(date +%s%N)"
export "$MARK"

# nothing_left: no process with our mark runs (SIGKILLed ones get a moment to go).
nothing_left() {
	_i=0
	while [ $_i -lt 50 ]; do
		_left=$(grep -lzxF "$MARK" /proc/[0-9]*/environ 2>/dev/null |
			sed 's|/proc/\([0-9]*\)/environ|\1|' | grep -vx -e "$$" || true)
		# our own shell and its subshells (this function) carry the mark too
		_left=$(for _p in $_left; do
			[ "$(cat /proc/$_p/comm 2>/dev/null)" = sh ] &&
				grep -q "^PPid:[[:space:]]*$$\$" /proc/$_p/status 2>/dev/null && continue
			[ -r /proc/$_p/cmdline ] || continue
			tr '\0' ' ' </proc/$_p/cmdline | grep -q . && echo "$_p: $(tr '\0' ' ' </proc/$_p/cmdline)"
		done)
		test -z "$_left" && return 0
		sleep 0.1
		_i=$((_i + 1))
	done
	echo "left running: $_left" >&2
	return 1
}

# wait_for N FILE...: until every FILE exists, at most N seconds.
wait_for() {
	_n=$(($1 * 10))
	shift
	while [ $_n -gt 0 ]; do
		_all=1
		for _f in "$@"; do test -e "$_f" || _all=0; done
		test $_all = 1 && return 0
		sleep 0.1
		_n=$((_n - 1))
	done
	echo "timed out waiting for $*" >&2
	return 1
}

test_expect_success 'setup: a config and a probe that prints its environment' '
	cat >job.json <<-\EOF &&
	{"model": {"name": "mlp", "num_classes": 10, "input_shape": [1, 28, 28], "hidden": [16]},
	 "data": {"format": "synthetic", "batch_size": 8, "train": {"size": 64}},
	 "optimizer": {"name": "sgd", "lr": 0.1},
	 "train": {"epochs": 1}}
	EOF
	cat >probe.sh <<-\EOF &&
	#!/bin/sh
	echo "probe rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK lws=$LOCAL_WORLD_SIZE node=$NODE_RANK group=$GROUP_RANK master=$MASTER_ADDR:$MASTER_PORT source=$DPTRAIN_SOURCE"
	echo "probe-ms rank=$RANK id=$RANK_ID size=$RANK_SIZE device=$DEVICE_ID table=$RANK_TABLE_FILE"
	echo "probe-dp rank=$RANK table=$DPTRAIN_RANK_TABLE dev=$DPTRAIN_DEVICE_DIR out=$DPTRAIN_OUTPUT_DIR config=$DPTRAIN_CONFIG gpu=$DPTRAIN_GPU"
	echo "probe-args rank=$RANK $*"
	echo "probe-err rank=$RANK" >&2
	EOF
	chmod +x probe.sh &&
	sed "s/\"train\": {\"epochs\": 1}}/\"train\": {\"epochs\": 1}, \"output\": {\"console\": \"all\"}}/" job.json >all.json &&
	sed "s/\"train\": {\"epochs\": 1}}/\"train\": {\"epochs\": 1}, \"output\": {\"console\": \"none\"}}/" job.json >none.json &&
	sed "s/\"train\": {\"epochs\": 1}}/\"train\": {\"epochs\": 1}, \"output\": {\"per_rank_logs\": false}}/" job.json >nologs.json &&
	sed "s/\"train\": {\"epochs\": 1}}/\"train\": {\"epochs\": 1}, \"output\": {\"dir\": \"runs\/%j-%s\"}}/" job.json >outdir.json &&
	sed "s/\"train\": {\"epochs\": 1}}/\"train\": {\"epochs\": 1}, \"device\": {\"allow_shared_gpu\": true}}/" job.json >shared.json &&
	sed "s/\"train\": {\"epochs\": 1}}/\"train\": {\"epochs\": 1}, \"timeouts\": {\"rendezvous_s\": 2}}/" job.json >short.json
'

test_expect_success '--help, --version and usage errors' '
	dptrain-run --help >help &&
	grep "^usage: dptrain-run -n N" help &&
	dptrain-run --version | grep "^dptrain-run [0-9]" &&
	test_expect_code 2 dptrain-run job.json 2>err &&
	grep "dptrain-run: say how many ranks to run with -n N" err &&
	test_expect_code 2 dptrain-run -n 0 job.json 2>err &&
	grep "dptrain-run: -n .0. is not a number from 1 to 4096" err &&
	test_expect_code 2 dptrain-run -n 2 2>err &&
	grep "no CONFIG or COMMAND given" err &&
	test_expect_code 2 dptrain-run -n 2 --bogus job.json 2>err
'

test_expect_success 'a bad config is refused before any rank starts' '
	echo "{\"model\": {\"name\": \"mlpx\"}}" >bad.json &&
	test_must_fail dptrain-run -n 2 -o bad bad.json ./probe.sh 2>err &&
	grep "^dptrain-run: .*bad.json: model.name" err &&
	test ! -e bad &&
	test_must_fail dptrain-run -n 2 missing.json ./probe.sh 2>err &&
	grep "missing.json" err
'

test_expect_success 'four ranks: exit 0, rank 0 on the console' '
	dptrain-run -n 4 -o out job.json ./probe.sh a "b c" >console 2>console.err &&
	grep "^probe rank=0 " console &&
	grep "^probe-err rank=0" console.err &&
	! grep "rank=[123]" console console.err
'

test_expect_success 'every rank sees its variables' '
	port=$(sed -n "s/^probe rank=0 .*master=127.0.0.1:\([0-9]*\) .*/\1/p" out/device0/train.log) &&
	test -n "$port" &&
	for r in 0 1 2 3; do
		grep -x "probe rank=$r world=4 local=$r lws=4 node=0 group=0 master=127.0.0.1:$port source=env" out/device$r/train.log &&
		grep -x "probe-ms rank=$r id=$r size=4 device=$r table=$PWD/out/rank_table.json" out/device$r/train.log &&
		grep -x "probe-dp rank=$r table=$PWD/out/rank_table.json dev=$PWD/out/device$r out=$PWD/out config=$PWD/job.json gpu=-1" out/device$r/train.log &&
		grep -x "probe-args rank=$r a b c" out/device$r/train.log &&
		grep -x "probe-err rank=$r" out/device$r/train.log || return 1
	done
'

test_expect_success 'train.log starts with a header line per launch' '
	for r in 0 1 2 3; do
		head -n 1 out/device$r/train.log >head &&
		grep "^=== dptrain-launch .*: rank $r of 4 on .* (node 0, local rank $r), job local\.[0-9]* step 0, restart 0, source env: ./probe.sh a b c$" head ||
		return 1
	done
'

test_expect_success 'the rank table, read by python' '
	port=$(sed -n "s/^probe rank=0 .*master=127.0.0.1:\([0-9]*\) .*/\1/p" out/device0/train.log) &&
	test "$(dp_json out/rank_table.json "d[\"version\"]")" = 1.0 &&
	test "$(dp_json out/rank_table.json "d[\"server_count\"]")" = 1 &&
	test "$(dp_json out/rank_table.json "\",\".join(x[\"rank_id\"] for x in d[\"server_list\"][0][\"device\"])")" = "0,1,2,3" &&
	test "$(dp_json out/rank_table.json "d[\"dptrain\"][\"world_size\"]")" = 4 &&
	test "$(dp_json out/rank_table.json "d[\"dptrain\"][\"master_addr\"]")" = 127.0.0.1 &&
	test "$(dp_json out/rank_table.json "d[\"dptrain\"][\"master_port\"]")" = "$port" &&
	test "$(dp_json out/rank_table.json "[x[\"local_rank\"] for x in d[\"dptrain\"][\"ranks\"]]")" = "[0, 1, 2, 3]" &&
	test "$(dp_json out/rank_table.json "d[\"dptrain\"][\"job_id\"]")" = "$(sed -n "s/.*job \(local\.[0-9]*\) step.*/\1/p" out/device0/train.log | head -n 1)"
'

test_expect_success 'the rank table passes dptrain-ranktable validate' '
	dptrain-ranktable validate out/rank_table.json >v &&
	grep "ok" v
'

test_expect_success 'env.log: the whole environment, sorted' '
	for r in 0 1 2 3; do
		sort out/device$r/env.log | cmp - out/device$r/env.log &&
		grep -x "RANK=$r" out/device$r/env.log &&
		grep -x "DPTRAIN_DEVICE_DIR=$PWD/out/device$r" out/device$r/env.log &&
		grep -x "$MARK" out/device$r/env.log || return 1
	done &&
	! ls out/device0/env.log.* 2>/dev/null
'

test_expect_success 'each run gives its ranks one fresh secret, which no file holds; a rank without it is refused' '
	cat >secret.sh <<-\EOF &&
	#!/bin/sh
	echo "$DPTRAIN_STORE_SECRET" >"$1.$RANK"
	EOF
	chmod +x secret.sh &&
	dptrain-run -n 2 -o sec job.json ./secret.sh first >/dev/null &&
	dptrain-run -n 2 -o sec job.json ./secret.sh second >/dev/null &&
	grep -Ex "[0-9a-f]{32}" first.0 &&
	cmp first.0 first.1 && cmp second.0 second.1 &&
	! cmp first.0 second.0 &&
	grep -x "DPTRAIN_STORE_SECRET=" sec/device0/env.log &&
	! grep -r "$(cat first.0)" sec &&
	cat >stranger.sh <<-\EOF &&
	#!/bin/sh
	if test "$RANK" = 1; then
		DPTRAIN_STORE_SECRET= dptrain "$@" >stranger.out 2>&1
		echo "stranger exited $?" >>stranger.out
	fi
	exec dptrain "$@"
	EOF
	chmod +x stranger.sh &&
	dptrain-run -n 2 -o sec2 job.json ./stranger.sh train.max_steps=2 >console 2>&1 &&
	cat stranger.out &&
	grep "stranger exited 3" stranger.out &&
	grep "refused rank 1: refused: not a rank of this job" stranger.out &&
	grep "dptrain: rendezvous: refused a connection to port [0-9]* from 127.0.0.1:[0-9]*: it said it was rank 1 on .* but gave no secret" sec2/device0/train.log
'

test_expect_success 'a run into an output directory another run is using is refused, nothing written; free again after' '
	cat >hold.sh <<-\EOF &&
	#!/bin/sh
	# how many of its descriptors hold the directory lock
	ls -l /proc/$$/fd | grep -c "/busy/.dptrain.lock" >"held.$RANK"
	i=0
	while ! test -e release && test $i -lt 600; do sleep 0.1; i=$((i + 1)); done
	EOF
	chmod +x hold.sh &&
	{ dptrain-run -n 2 -o busy job.json ./hold.sh >first.out 2>&1 & } &&
	first=$! &&
	test_when_finished "touch release; wait $first 2>/dev/null || :" &&
	i=0 && while ! test -e held.0 || ! test -e held.1; do
		test $i -lt 600 || return 1; sleep 0.1; i=$((i + 1)); done &&
	test "$(cat held.0) $(cat held.1)" = "1 0" &&
	ls -lR busy >before && cat busy/device*/train.log >logs.before &&
	test_expect_code 1 dptrain-run -n 2 -o busy job.json ./probe.sh >second.out 2>err &&
	cat err &&
	grep "dptrain-run: the output directory .*busy. is in use by another job (dptrain-run pid [0-9]* (job local.[0-9]*), since .*): two jobs writing one directory" err &&
	ls -lR busy | cmp - before && cat busy/device*/train.log | cmp - logs.before &&
	touch release && wait $first &&
	dptrain-run -n 2 -o busy job.json ./probe.sh >third.out 2>err &&
	grep "^probe-args rank=1" busy/device1/train.log
'

test_expect_success 'a second launch appends to train.log' '
	dptrain-run -n 2 -o out job.json ./probe.sh again >/dev/null &&
	test $(grep -c "^=== dptrain-launch" out/device0/train.log) = 2 &&
	grep -x "probe-args rank=1 again" out/device1/train.log &&
	grep -x "probe-args rank=1 a b c" out/device1/train.log
'

test_expect_success 'output.console all: every rank on the console; none: no rank' '
	dptrain-run -n 3 -o out-all all.json ./probe.sh >console &&
	grep "^probe rank=0 " console && grep "^probe rank=1 " console && grep "^probe rank=2 " console &&
	grep "^probe rank=2 " out-all/device2/train.log &&
	dptrain-run -n 3 -o out-none none.json ./probe.sh >console &&
	! grep probe console &&
	grep "^probe rank=0 " out-none/device0/train.log
'

test_expect_success 'output.per_rank_logs false: no train.log, output stays on the console' '
	dptrain-run -n 2 -o out-nologs nologs.json ./probe.sh >console &&
	grep "^probe rank=0 " console && grep "^probe rank=1 " console &&
	test ! -e out-nologs/device0/train.log &&
	test -f out-nologs/device1/env.log
'

test_expect_success 'output directory: config output.dir, DPTRAIN_OUTPUT_DIR, default' '
	mkdir d1 && (cd d1 && dptrain-run -n 1 ../outdir.json ../probe.sh >/dev/null) &&
	ls d1/runs/local.*-0/device0/train.log &&
	mkdir d2 && (cd d2 && DPTRAIN_OUTPUT_DIR=here.%s dptrain-run -n 1 ../outdir.json ../probe.sh >/dev/null) &&
	test -f d2/here.0/rank_table.json &&
	mkdir d3 && (cd d3 && dptrain-run -n 1 ../job.json ../probe.sh >/dev/null) &&
	ls d3/dptrain.local.*.0/device0/env.log
'

test_expect_success 'the default command is the trainer: DPTRAIN_TRAINER for `dptrain`' '
	cat >fake-trainer <<-\EOF &&
	#!/bin/sh
	echo "fake trainer rank=$RANK config=$DPTRAIN_CONFIG args=$#"
	EOF
	chmod +x fake-trainer &&
	DPTRAIN_TRAINER=$PWD/fake-trainer dptrain-run -n 2 -o out-trainer job.json >console &&
	grep -x "fake trainer rank=0 config=$PWD/job.json args=0" console &&
	grep -x "fake trainer rank=1 config=$PWD/job.json args=0" out-trainer/device1/train.log
'

# The elapsed times below only tell "stopped" from "waited for": the ranks that are not
# stopped by dptrain-run sleep for an hour, so a bound of a minute holds on any machine.
test_expect_success 'a failing rank (exit 3) stops the others; dptrain-run exits 3' '
	start=$(date +%s) &&
	test_expect_code 3 dptrain-run -n 4 -o out-fail job.json \
		sh -c "if [ \$RANK = 2 ]; then sleep 0.3; exit 3; fi; exec sleep 4101" 2>err &&
	end=$(date +%s) &&
	grep "dptrain-run: rank 2 exited with status 3 (its output: $PWD/out-fail/device2/train.log); stopping the other 3 ranks" err &&
	test $((end - start)) -lt 60 &&
	nothing_left
'

# Rank 1 fails only once every rank ignores SIGTERM (a sleep would race the others' start).
test_expect_success 'a rank that ignores SIGTERM gets SIGKILL after --grace' '
	cat >ignorer.sh <<-\EOF &&
	#!/bin/sh
	trap "" TERM
	touch "ignoring.$RANK"
	if [ "$RANK" = 1 ]; then
		i=0
		while [ "$(ls ignoring.* | wc -l)" -lt 3 ] && [ $i -lt 2400 ]; do
			sleep 0.05; i=$((i + 1))
		done
		exit 5
	fi
	sleep 4102
	EOF
	chmod +x ignorer.sh && rm -f ignoring.* &&
	start=$(date +%s) &&
	test_expect_code 5 dptrain-run -n 3 --grace 1 -o out-grace job.json ./ignorer.sh 2>err &&
	end=$(date +%s) &&
	grep "rank 1 exited with status 5" err &&
	grep "still running 1 s after SIGTERM; sending SIGKILL" err &&
	test $((end - start)) -lt 60 &&
	nothing_left
'

test_expect_success 'a rank killed by a signal: 128+N' '
	test_expect_code 137 dptrain-run -n 2 -o out-sig job.json \
		sh -c "if [ \$RANK = 1 ]; then kill -KILL \$\$; fi; exec sleep 4103" 2>err &&
	grep "rank 1 was killed by signal 9" err &&
	nothing_left
'

test_expect_success 'SIGTERM to dptrain-run reaches every rank' '
	cat >trapper.sh <<-\EOF &&
	#!/bin/sh
	trap "echo got-TERM-\$RANK; exit 0" TERM
	touch "ready.$RANK"
	sleep 4104 &
	wait
	EOF
	chmod +x trapper.sh &&
	rm -f ready.* &&
	{ dptrain-run -n 3 -o out-term job.json ./trapper.sh >term.out 2>term.err & } &&
	pid=$! &&
	wait_for 120 ready.0 ready.1 ready.2 &&
	kill -TERM $pid &&
	wait $pid &&
	grep "dptrain-run: got SIGTERM: passing it to all ranks" term.err &&
	grep -x got-TERM-0 term.out &&
	grep -x got-TERM-1 out-term/device1/train.log &&
	grep -x got-TERM-2 out-term/device2/train.log &&
	nothing_left
'

test_expect_success 'SIGINT to dptrain-run reaches every rank (exit 130)' '
	rm -f ready.* &&
	cat >sleeper.sh <<-\EOF &&
	#!/bin/sh
	touch "ready.$RANK"
	exec sleep 4105
	EOF
	chmod +x sleeper.sh &&
	{ env --default-signal=INT dptrain-run -n 2 -o out-int job.json ./sleeper.sh 2>int.err & } &&
	pid=$! &&
	wait_for 120 ready.0 ready.1 &&
	kill -INT $pid &&
	test_expect_code 130 wait $pid &&
	grep "dptrain-run: got SIGINT: passing it to all ranks" int.err &&
	nothing_left
'

test_expect_success 'a missing command: 127 and a message naming rank and command' '
	test_expect_code 127 dptrain-run -n 2 -o out-missing job.json no-such-command-t0410 2>err &&
	grep "dptrain-launch: rank [01] on .*: cannot run .no-such-command-t0410.: No such file or directory" err &&
	grep "dptrain-launch: rank [01] on .*: cannot run .no-such-command-t0410.: No such file or directory" out-missing/device*/train.log &&
	nothing_left
'

test_expect_success 'a command that is not executable: 126' '
	echo "echo hi" >not-exec.sh &&
	test_expect_code 126 dptrain-run -n 1 -o out-noexec job.json ./not-exec.sh 2>err &&
	grep "cannot run ..\/not-exec.sh.: Permission denied" err
'

test_expect_success 'GPUs: local rank modulo the visible ones; sharing refused unless allowed' '
	CUDA_VISIBLE_DEVICES=4,5,6,7 dptrain-run -n 4 -o out-gpu job.json ./probe.sh >/dev/null &&
	grep -x "probe-ms rank=3 id=3 size=4 device=3 table=$PWD/out-gpu/rank_table.json" out-gpu/device3/train.log &&
	grep "gpu=3$" out-gpu/device3/train.log &&
	test "$(dp_json out-gpu/rank_table.json "d[\"dptrain\"][\"ranks\"][2][\"gpu\"]")" = 2 &&
	test_must_fail env CUDA_VISIBLE_DEVICES=0,1 dptrain-run -n 4 -o out-shared job.json ./probe.sh 2>err &&
	grep "ranks 0 and 2 on .* would share GPU .0." err &&
	CUDA_VISIBLE_DEVICES=0,1 dptrain-run -n 4 -o out-shared2 shared.json ./probe.sh >/dev/null &&
	grep "gpu=1$" out-shared2/device3/train.log &&
	test_must_fail env CUDA_VISIBLE_DEVICES="0, 1" dptrain-run -n 1 -o out-badcvd job.json ./probe.sh 2>err &&
	grep "CUDA_VISIBLE_DEVICES=.0, 1.: entry 2" err
'

# rank 0 stalls 60 s: a bound below that says the others gave up after their 2 s, not with it
test_expect_success 'local rank 0 never writes the rank table: the others time out naming it' '
	start=$(date +%s) &&
	test_must_fail env DPTRAIN_TEST_STALL_RANK=0 DPTRAIN_TEST_STALL_SECONDS=60 \
		dptrain-run -n 3 --timeout 2 -o out-stall job.json ./probe.sh 2>err &&
	end=$(date +%s) &&
	grep "rank 0: test hook DPTRAIN_TEST_STALL_RANK" err &&
	grep "dptrain-launch: rank [12] on .*: rank 0 (local rank 0 on .*) did not write $PWD/out-stall/rank_table.json within 2 s" err &&
	test $((end - start)) -lt 45 &&
	nothing_left
'

test_expect_success 'a stale rank table (another run) is not taken for this one' '
	mkdir -p out-stale &&
	cp out/rank_table.json out-stale/ &&
	test_must_fail env DPTRAIN_TEST_STALL_RANK=0 DPTRAIN_TEST_STALL_SECONDS=60 \
		dptrain-run -n 4 -o out-stale short.json ./probe.sh 2>err &&
	grep "did not write $PWD/out-stale/rank_table.json within 2 s (last: it holds another step.s table)" err &&
	nothing_left
'

test_expect_success 'bad launcher settings are reported by every rank' '
	test_must_fail env DPTRAIN_TIMEOUT=abc dptrain-run -n 1 -o out-badto job.json ./probe.sh 2>err &&
	grep "dptrain-launch: rank 0 on .*: DPTRAIN_TIMEOUT=.abc. is not an integer >= 1" err &&
	test_must_fail env DPTRAIN_IFACE=nosuch0 dptrain-run -n 1 -o out-badif job.json ./probe.sh 2>err &&
	grep "no interface .nosuch0. on this node" err &&
	test_must_fail env DPTRAIN_SOURCE=bogus dptrain-launch true 2>err &&
	grep "DPTRAIN_SOURCE=.bogus. is not one of pmix, slurm, env, auto" err
'

test_expect_success 'dptrain-launch alone: usage and missing allocation' '
	dptrain-launch --help | grep "^usage: dptrain-launch" &&
	dptrain-launch --version | grep "^dptrain-launch [0-9]" &&
	test_expect_code 2 dptrain-launch 2>err &&
	grep "no command given" err &&
	test_must_fail env -u RANK -u WORLD_SIZE -u SLURM_PROCID -u PMIX_RANK dptrain-launch true 2>err &&
	grep "no allocation found" err &&
	test_must_fail env RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=0 \
		DPTRAIN_SOURCE=env dptrain-launch true 2>err &&
	grep "MASTER_PORT=.0. is not a port number (1-65535)" err
'

test_done
