#!/bin/sh
# t0320-srun-dptrain.t — the whole chain as a user runs it: srun/sbatch --dptrain through the
# plugin and the real dptrain-launch (from the build tree's plugstack.conf), PMIx and
# SLURM_* on one and two emulated nodes, checked against Slurm's own variables and the rank
# table; then the bundled trainer as the command. Owns its trash directory and cluster.

test_description='srun --dptrain end to end: plugin, launcher, trainer'

. "$(dirname "$0")/sharness.sh"

dp_need_cluster
# Two users of this script's own (t/sharness.d/00-dptrain.sh), made before the cluster starts
# so that they are removed after it stops.
dp_make_user VICTIM victim && dp_make_user ATTACKER attacker || {
	echo "Bail out! could not make the test users"
	exit 1
}

# newest DIR: the most recent step directory under DIR
newest() {
	ls -dt "$1"/*.* | head -n 1
}

test_expect_success 'setup: a two-node Slurm with the plugin, a config, a probe' '
	dp_cluster_start -N 2 &&
	/usr/bin/python3 - "$DPTRAIN_SRC_DIR/contrib/examples/mlp-fmnist.json" >job.json <<-\EOF &&
	import json, sys
	c = json.load(open(sys.argv[1]))
	c["output"] = {"dir": "steps/%j.%s"}
	json.dump(c, sys.stdout)
	EOF
	dp_write_probe probe.sh
'

test_expect_success 'srun --dptrain -n4 (PMIx): every rank got its variables, rank table, device dir' '
	timeout 60 srun --mpi=pmix -n4 --dptrain=job.json ./probe.sh >out &&
	d=$(newest steps) &&
	dp_check_ranks "$d" 4 pmix &&
	test $(grep -c "^probe" out) = 1 &&
	for r in 0 1 2 3; do
		grep "^RANK=$r$" "$d/device$r/env.log" &&
		grep "^DPTRAIN_CONFIG=$PWD/job.json$" "$d/device$r/env.log" || return 1
	done
'

test_expect_success 'srun --dptrain -N2 -n4 (PMIx): two nodes' '
	timeout 60 srun --mpi=pmix -N2 --ntasks-per-node=2 --dptrain=job.json ./probe.sh >out &&
	d=$(newest steps) &&
	dp_check_ranks "$d" 4 pmix &&
	dptrain-ranktable validate "$d/rank_table.json"
'

test_expect_success 'srun --dptrain -N2 -n4 --mpi=none: the SLURM_* fallback' '
	MASTER_ADDR=127.0.0.1 timeout 60 srun --mpi=none -N2 --ntasks-per-node=2 \
		--dptrain=job.json ./probe.sh >out &&
	dp_check_ranks "$(newest steps)" 4 slurm
'

test_expect_success 'sbatch with #SBATCH --dptrain: the script runs as itself, its srun goes through dptrain' '
	# relative paths: the trash directory has a blank, and the job runs where it was submitted
	cat >batch.sh <<-\EOF &&
	#!/bin/sh
	#SBATCH --dptrain=job.json
	#SBATCH -n 2
	echo "batch script ran: RANK=${RANK:-unset}" >batch.out
	srun ./probe.sh
	EOF
	job=$(sbatch --parsable -o slurm-%j.out batch.sh) &&
	dp_job_wait "$job" &&
	grep "batch script ran: RANK=unset" batch.out &&
	dp_check_ranks "$(newest steps)" 2 pmix
'

test_expect_success FMNIST 'srun --dptrain -n1 dptrain: the bundled trainer trains and writes its outputs' '
	timeout 300 srun -n1 --dptrain=job.json dptrain train.epochs=0 train.max_steps=30 \
		train.log_every=10 data.eval=null >out 2>err &&
	grep "^epoch: 1 step: 30, loss is " out &&
	grep "^dptrain: done: 30 steps" out &&
	d=$(newest steps) &&
	test -s "$d/model.safetensors" &&
	grep "\"event\":\"end\"" "$d/metrics.jsonl" &&
	grep "^epoch: 1 step: 30, loss is " "$d/device0/train.log"
'

test_expect_success FMNIST 'each srun --dptrain step has its own secret; a rank without it is refused, and logged by rank 0' '
	cat >stranger.sh <<-\EOF &&
	#!/bin/sh
	echo "$DPTRAIN_STORE_SECRET" >"secret.$SLURM_STEP_ID.$RANK"
	if test "$RANK" = 1; then
		# first as a stranger (a wrong secret) on the same port, then as itself
		DPTRAIN_STORE_SECRET=00000000000000000000000000000000 dptrain "$@" >stranger.out 2>&1
		echo "stranger exited $?" >>stranger.out
	fi
	exec dptrain "$@"
	EOF
	chmod +x stranger.sh &&
	timeout 300 srun -n2 --dptrain=job.json ./stranger.sh train.epochs=0 train.max_steps=5 \
		data.eval=null >out 2>err &&
	d=$(newest steps) && step=${d##*.} &&
	cat stranger.out &&
	grep "stranger exited 3" stranger.out &&
	grep "refused rank 1: refused: not a rank of this job" stranger.out &&
	# nothing of the job is told to the stranger: not its id, not its directory ("6.0" as
	# a pattern matched the port 36807; as a fixed string "2.0" is in the address 192.0.2.2)
	job=${d##*/} && job=${job%.*} &&
	! grep -w -e "job $job" -e "$job\.$step" stranger.out &&
	grep "dptrain: rendezvous: refused a connection to port [0-9]* from .*: it said it was rank 1 on .* but gave a wrong secret" "$d/device0/train.log" &&
	grep "^dptrain: done: 5 steps" out &&
	s0=$(cat secret.$step.0) && s1=$(cat secret.$step.1) &&
	echo "$s0" | grep -Ex "[0-9a-f]{32}" &&
	test "$s0" = "$s1" &&
	! grep -r "$s0" "$d" &&
	grep -x "DPTRAIN_STORE_SECRET=" "$d/device0/env.log" &&
	timeout 120 srun -n2 --dptrain=job.json ./probe.sh >/dev/null &&
	srun -n1 --dptrain=job.json sh -c "echo \$DPTRAIN_STORE_SECRET" >next &&
	echo "$(cat next)" | grep -Ex "[0-9a-f]{32}" &&
	test "$(cat next)" != "$s0"
'

# The README's job: LeNet-5 on 4 ranks, as one node and as two, to the single-process
# accuracy target (t0900); under the sanitizers fewer steps and a lower bar.
if test "$DPTRAIN_SAN" = 1; then
	lenet_args="train.epochs=0 train.max_steps=150" lenet_min=0.65
else
	lenet_args="" lenet_min=0.87
fi
lenet_job() {
	/usr/bin/python3 - "$DPTRAIN_SRC_DIR/contrib/examples/lenet-fmnist.json" "$1" >"$1.json" <<-\EOF
	import json, sys
	c = json.load(open(sys.argv[1]))
	c["output"] = {"dir": sys.argv[2] + "/%j.%s"}
	json.dump(c, sys.stdout)
	EOF
}
accuracy_of() {
	grep '"event":"eval"' "$1" | tail -n 1 | sed 's/.*"accuracy":\([0-9.]*\).*/\1/'
}
at_least() {
	awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'
}

test_expect_success FMNIST "srun -n4 --dptrain=lenet-fmnist.json dptrain (one node) reaches $lenet_min" '
	lenet_job one &&
	timeout 1200 srun -N1 -n4 --dptrain=one.json dptrain train.log_every=50 $lenet_args >out 2>err &&
	cat out &&
	grep "^dptrain: 4 ranks, average of gradients" out &&
	d=$(newest one) &&
	acc=$(accuracy_of "$d/metrics.jsonl") && echo "accuracy $acc" &&
	at_least "$acc" $lenet_min &&
	grep "\"count\":10000" "$d/metrics.jsonl" &&
	for r in 0 1 2 3; do grep -q "^epoch: 1 step: 50, loss is " "$d/device$r/train.log" || return 1; done
'

test_expect_success FMNIST "srun -N2 -n4 --dptrain=lenet-fmnist.json dptrain (two nodes) reaches $lenet_min" '
	lenet_job two &&
	timeout 1200 srun -N2 -n4 --dptrain=two.json dptrain train.log_every=200 $lenet_args >out 2>err &&
	d=$(newest two) &&
	test "$(dp_json "$d/rank_table.json" "d[\"server_count\"]")" = 2 &&
	acc=$(accuracy_of "$d/metrics.jsonl") && echo "accuracy $acc" &&
	at_least "$acc" $lenet_min
'

test_expect_success 'a bad config is refused by srun before anything runs' '
	echo "{\"modle\": {}}" >bad.json &&
	test_expect_code 1 timeout 60 srun -n2 --dptrain=bad.json ./probe.sh >out 2>err &&
	grep "modle: unknown key; did you mean \"model\"" err &&
	test_must_be_empty out
'

test_expect_success 'output.dir on the trainer command line under srun: refused, not ignored' '
	rc=0 &&
	timeout 120 srun -n1 --dptrain=job.json dptrain output.dir=elsewhere >out 2>err || rc=$? &&
	cat out err &&
	test $rc = 1 &&
	grep "output.dir on the command line cannot move this rank.s output: the launcher already made its directory" out err &&
	! test -e elsewhere
'

# A shared file system: another user may have made the job's output directory first, to
# read its files or plant a checkpoint. It is refused, nothing is written into it.
test_expect_success 'an output directory of another user, or a symlinked device dir, is refused' '
	mkdir taken && chown 65534:65534 taken &&
	rc=0 &&
	DPTRAIN_OUTPUT_DIR=$PWD/taken timeout 120 srun -n2 --dptrain=job.json true 2>err || rc=$? &&
	cat err &&
	test $rc != 0 && test $rc != 124 &&
	grep "the output directory .*taken. belongs to another user (uid 65534)" err &&
	test -z "$(ls -A taken)" &&
	mkdir -p mine/elsewhere && ln -s "$PWD/mine/elsewhere" mine/device0 &&
	rc=0 &&
	DPTRAIN_OUTPUT_DIR=$PWD/mine timeout 120 srun -n1 --dptrain=job.json true 2>err || rc=$? &&
	cat err &&
	test $rc != 0 && test $rc != 124 &&
	grep "device0. is not a directory (a symbolic link" err &&
	test -z "$(ls -A mine/elsewhere)"
'

# One output directory, two live steps: the second is refused before any of its ranks writes
# there (PMIx: rank 0 takes the directory's lock before the others pass a fence), naming the
# step that holds it; the lock goes with the first step's end. Without PMIx and without a
# console copy (no watcher process) the command itself holds it.
test_expect_success 'a step into an output directory another step is using is refused, nothing written; free once it ends' '
	cat >hold.sh <<-\EOF &&
	#!/bin/sh
	: >"held.$1.$RANK"
	i=0
	while ! test -e "release.$1" && test $i -lt 900; do sleep 0.1; i=$((i + 1)); done
	EOF
	chmod +x hold.sh &&
	test_when_finished "touch release.a release.b; wait" &&
	{ DPTRAIN_OUTPUT_DIR=$PWD/busy timeout 120 srun --mpi=pmix -N2 -n4 --dptrain=job.json \
		./hold.sh a >first.out 2>&1 & } &&
	i=0 && while test $(ls held.a.* 2>/dev/null | wc -l) != 4; do
		test $i -lt 900 || return 1; sleep 0.1; i=$((i + 1)); done &&
	ls -lR busy >before && cat busy/device*/train.log >logs.before &&
	rc=0 && DPTRAIN_OUTPUT_DIR=$PWD/busy timeout 120 srun --mpi=pmix -N2 -n4 --dptrain=job.json \
		./probe.sh >out 2>err || rc=$? &&
	cat err && test $rc != 0 && test $rc != 124 &&
	grep "the output directory .*busy. is in use by another job (job [0-9]* step 0, rank 0 on n1, pid [0-9]*, since .*): two jobs writing one directory mix" err &&
	ls -lR busy >after && { diff before after; true; } && test_cmp before after && cat busy/device*/train.log | cmp - logs.before &&
	touch release.a && wait &&
	DPTRAIN_OUTPUT_DIR=$PWD/busy timeout 120 srun --mpi=pmix -N2 -n4 --dptrain=job.json \
		./probe.sh >out 2>err &&
	grep "^probe rank=3 " busy/device3/train.log &&
	/usr/bin/python3 -c "import json; c = json.load(open(\"job.json\")); c[\"output\"][\"console\"] = \"none\"; json.dump(c, open(\"quiet.json\", \"w\"))" &&
	{ MASTER_ADDR=127.0.0.1 DPTRAIN_OUTPUT_DIR=$PWD/busy2 timeout 120 srun --mpi=none -n2 --dptrain=quiet.json \
		./hold.sh b >first.out 2>&1 & } &&
	i=0 && while test $(ls held.b.* 2>/dev/null | wc -l) != 2; do
		test $i -lt 900 || return 1; sleep 0.1; i=$((i + 1)); done &&
	rc=0 && MASTER_ADDR=127.0.0.1 DPTRAIN_OUTPUT_DIR=$PWD/busy2 timeout 120 srun --mpi=none -n1 --dptrain=job.json \
		./probe.sh >out 2>err || rc=$? &&
	cat err && test $rc != 0 && test $rc != 124 &&
	grep "the output directory .*busy2. is in use by another job (job [0-9]* step [0-9]*, rank 0 on n1" err &&
	touch release.b && wait
'

# Two unprivileged users on one shared, sticky directory (a site's /scratch): the victim's
# job output is the victim's, and the attacker can neither take that directory over, read its
# environment, nor lure the victim's job into a directory (and symlinks) the attacker made.
test_expect_success 'two unprivileged users share a sticky directory: neither can take over or read the other'"'"'s job' '
	mkdir -m 1777 shared &&
	as() {
		_u=$1 && shift &&
		(cd shared && runuser -u "$_u" -- env PATH="$PATH" SLURM_CONF="$SLURM_CONF" "$@")
	} &&
	as $VICTIM env DPTRAIN_OUTPUT_DIR="$PWD/shared/run" timeout 120 \
		srun -n2 --dptrain=../job.json ../probe.sh >out 2>err &&
	test "$(stat -c %U shared/run shared/run/device0 shared/run/device1/env.log shared/run/rank_table.json | sort -u)" = $VICTIM &&
	test "$(stat -c %a shared/run/device0/env.log)" = 600 &&
	grep "^probe rank=1 " shared/run/device1/train.log &&
	test_must_fail as $ATTACKER cat "$PWD/shared/run/device0/env.log" &&
	# the attacker runs a job into the victim'"'"'s directory: refused, nothing written there
	ls -lR shared/run >before &&
	rc=0 && as $ATTACKER env DPTRAIN_OUTPUT_DIR="$PWD/shared/run" timeout 120 \
		srun -n1 --dptrain=../job.json ../probe.sh >out 2>err || rc=$? &&
	cat err && test $rc != 0 && test $rc != 124 &&
	grep "the output directory .*shared/run. belongs to another user (uid $(id -u $VICTIM))" err &&
	ls -lR shared/run | cmp - before &&
	# the attacker prepares a directory, world-writable, whose train.log leads to a file of
	# the attacker'"'"'s: the victim'"'"'s job refuses it and writes nothing through the link
	as $ATTACKER sh -c "mkdir -m 777 trap trap/device0 && : >loot && chmod 666 loot && ln -s ../../shared/loot trap/device0/train.log" &&
	rc=0 && as $VICTIM env DPTRAIN_OUTPUT_DIR="$PWD/shared/trap" timeout 120 \
		srun -n1 --dptrain=../job.json ../probe.sh >out 2>err || rc=$? &&
	cat err && test $rc != 0 && test $rc != 124 &&
	grep "the output directory .*shared/trap. belongs to another user (uid $(id -u $ATTACKER))" err &&
	test_must_be_empty shared/loot &&
	test "$(ls shared/trap)" = device0
'

# A rank that fails ends the step for any command (dptrain(8)): the plugin's watcher asks
# PMIx to abort it, as srun -K would. The others sleep 300 s (exec: nothing of theirs can run
# after Slurm kills them), srun's bound is 120 s: srun returning with the failed rank's
# status, not timeout's 124, is the step ending.
fail_rank() { # RANK HOW: the command of every rank; RANK leaves by HOW, the others sleep
	printf '#!/bin/sh\nif [ "$RANK" = %s ]; then %s; fi\nexec sleep 300\n' "$1" "$2" >fail.sh &&
	chmod +x fail.sh
}

test_expect_success 'a rank that exits 3 ends the step at once, naming itself (-N2 -n4)' '
	fail_rank 2 "exit 3" &&
	test_expect_code 3 timeout 120 srun -N2 --ntasks-per-node=2 --dptrain=job.json ./fail.sh \
		>out 2>err &&
	cat err &&
	grep "dptrain: rank 2 on n2: the command exited with status 3; ending the step" err
'

test_expect_success 'a rank killed by SIGKILL (as by the OOM killer) ends the step' '
	fail_rank 1 "kill -9 \$\$" &&
	test_expect_code 137 timeout 120 srun -n2 --dptrain=job.json ./fail.sh >out 2>err &&
	cat err &&
	grep "dptrain: rank 1 on n[12]: the command was killed by signal 9" err
'

test_expect_success 'exit 4 (stopped, checkpoint written) does not end the others' '
	printf "#!/bin/sh\nif [ \"\$RANK\" = 1 ]; then exit 4; fi\nsleep 2\necho finished\n" >stop4.sh &&
	chmod +x stop4.sh &&
	test_expect_code 4 timeout 120 srun -n3 --dptrain=job.json ./stop4.sh >out 2>err &&
	d=$(newest steps) &&
	grep -h "^finished" "$d"/device0/train.log "$d"/device2/train.log >finished &&
	test "$(wc -l <finished)" = 2 &&
	! grep "ending the step" err
'

test_expect_success FMNIST 'a stalled rank (SIGSTOP): the others give up naming it, and the step ends' '
	cat >stall.sh <<-\EOF &&
	#!/bin/sh
	if [ "$RANK" = 1 ]; then (sleep 3; kill -STOP $$) & fi
	exec dptrain "$@"
	EOF
	chmod +x stall.sh &&
	rc=0 &&
	timeout 120 srun -n2 --dptrain=job.json ./stall.sh train.epochs=50 data.eval=null \
		timeouts.collective_s=5 >out 2>err || rc=$? &&
	cat err &&
	test $rc != 0 && test $rc != 124 &&
	grep "rank 1" err &&
	grep "ending the step" err
'

test_done
