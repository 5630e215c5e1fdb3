#!/bin/sh
# t0350-security.t — a second, hostile user on a shared cluster, with the real plugin, launcher
# and trainer on a two-node Slurm: under proctrack/linuxproc, proctrack/pgid and (where the
# machine has a cgroup v1 freezer) proctrack/cgroup, a user cannot drain a node by stopping
# their own rank's watcher or by a FIFO where a log goes; the rendezvous store survives a flood
# of strangers and never lets one in, even under --export=NONE; the rank table does not give
# the master port away; no directory a stranger owns on the way to an output directory, and
# no file of a stranger's (hccn.conf), is used. Every cluster ends with its nodes idle. Owns
# its trash directory, its clusters and the two users it creates (removed at the end, however
# it ends).

test_description='a hostile user: node drain, rendezvous flood, secret, port, output directory'

. "$(dirname "$0")/sharness.sh"

dp_need_cluster

test -d /sys/fs/cgroup/freezer && test_set_prereq CGROUP_V1
command -v mkfifo >/dev/null 2>&1 && command -v runuser >/dev/null 2>&1 && test_set_prereq TOOLS
if ! test_have_prereq TOOLS; then
	skip_all='needs mkfifo and runuser'
	test_done
fi

# The two users of this script's own (t/sharness.d/00-dptrain.sh): names of fixed spelling
# were shared with t0320 running beside it.
dp_make_user VICTIM victim && dp_make_user ATTACKER attacker || {
	echo "Bail out! could not make the test users"
	exit 1
}

SH="$PWD/shared"
BIN="$DPTRAIN_BUILD_DIR/bin"

# as USER CMD...: run CMD as USER in the shared directory, with the cluster's environment.
as() {
	_u=$1 && shift &&
		(cd "$SH" && runuser -u "$_u" -- env PATH="$PATH" SLURM_CONF="$SLURM_CONF" "$@")
}

# node_state NODE: Slurm's state of NODE, in lower case (idle, allocated, drained, ...).
node_state() {
	sinfo -h -N -n "$1" -o %T | head -n 1
}

# nodes_idle: every node of the current cluster idle within 60 s; else show them and fail.
nodes_idle() {
	_i=0
	while test $_i -lt 600; do
		test -z "$(sinfo -h -N -o %T | grep -vx idle)" && return 0
		sleep 0.1
		_i=$((_i + 1))
	done
	sinfo -N -o "%N %T %E" >&2
	return 1
}

# resume_nodes: put drained nodes back (a failed test must not fail the rest).
resume_nodes() {
	sinfo -h -N -o "%N %T" | while read -r n s; do
		case $s in drain* | down*) scontrol update nodename="$n" state=resume ;; esac
	done
}

# mine PID...: those of the PIDs started by this script's jobs (their environment names the
# shared directory, which no other script has), one a line.
mine() {
	for _m in "$@"; do
		grep -qzF "$SH" "/proc/$_m/environ" 2>/dev/null && echo "$_m"
	done
	return 0
}

# pid_of USER NAME: the pid of USER's process NAME of this script's jobs, within 60 s.
pid_of() {
	_i=0
	while test $_i -lt 600; do
		_p=$(mine $(pgrep -u "$1" -x "$2") | head -n 1)
		test -n "$_p" && echo "$_p" && return 0
		sleep 0.1
		_i=$((_i + 1))
	done
	echo "no process $2 of $1 within 60 s" >&2
	return 1
}

test_expect_success 'setup: a shared sticky directory, a config, scripts' '
	mkdir -m 1777 shared &&
	cat >shared/job.json <<-\EOF &&
	{"model": {"name": "lenet"},
	 "data": {"format": "synthetic", "batch_size": 8, "train": {"size": 64}},
	 "train": {"epochs": 0, "max_steps": 4, "log_every": 1},
	 "checkpoint": {"every_steps": 1},
	 "timeouts": {"rendezvous_s": 20, "collective_s": 20}}
	EOF
	chmod 644 shared/job.json
'

# The tests that depend on how Slurm tracks a step's processes, once per type. linuxproc and
# pgid run everywhere; cgroup where this machine's cgroups let Slurm make a step's (the
# setup says so when they do not, and the rest of that type is skipped).
proctrack_tests() {
	pt=$1 prereq=$2

	test_expect_success $prereq "$pt: a two-node cluster with proctrack/$pt" '
		dp_cluster_start -d "cluster-$pt" -N 2 --proctrack $pt \
			--conf UnkillableStepTimeout=15 &&
		grep "^ProctrackType=proctrack/$pt$" "$SLURM_CONF" &&
		nodes_idle &&
		if timeout 60 srun -N2 -n2 true 2>"probe-$pt.err"; then
			test_set_prereq "PT_$pt"
		elif test "$pt" = cgroup; then
			echo "# proctrack/cgroup cannot make a step here: $(cat probe-$pt.err)" &&
			dp_cluster_stop "$PWD/cluster-$pt"
		else
			cat "probe-$pt.err" && false
		fi
	'
	prereq=PT_$pt

	# The watcher is the task'"'"'s process (Slurm waits for it). Stopped, it must still end
	# with the step: before it had a name of its own, proctrack/linuxproc skipped it as
	# "slurmstepd", scancel timed out and Slurm drained the node ("Kill task failed").
	test_expect_success $prereq "$pt: stopping one's own watcher, then scancel, does not drain the node" '
		test_when_finished "resume_nodes" &&
		{ as $ATTACKER env DPTRAIN_OUTPUT_DIR="$SH/stop-$pt.%j" timeout 120 \
			srun -w n2 -n1 --mpi=pmix --dptrain sleep 300 >"stop-$pt.out" 2>&1 & } &&
		s=$(pid_of $ATTACKER sleep) &&
		w=$(ps -o ppid= -p $s | tr -d " ") &&
		test "$(cat /proc/$w/comm)" = dptrain-watch &&
		job=$(squeue -h -u $ATTACKER -o %A) &&
		as $ATTACKER kill -STOP $w &&
		as $ATTACKER scancel $job &&
		dp_job_wait $job 120 &&
		wait &&
		! test -e /proc/$w &&
		nodes_idle &&
		! grep -i "kill task failed" "$DPTRAIN_CLUSTER_DIR/log/slurmctld.log"
	'

	# A FIFO where the rank'"'"'s log goes: without O_NONBLOCK the open waited for a reader (in
	# the task: a process Slurm cannot end; in the helper: until its guard gave up).
	test_expect_success $prereq "$pt: a FIFO at train.log fails the step at once, naming it" '
		test_when_finished "resume_nodes" &&
		as $ATTACKER sh -c "mkdir -p fifo-$pt/device0 && mkfifo fifo-$pt/device0/train.log" &&
		for mpi in pmix none; do
			rc=0 &&
			as $ATTACKER env DPTRAIN_OUTPUT_DIR="$SH/fifo-$pt" DPTRAIN_TIMEOUT=10 \
				MASTER_ADDR=127.0.0.1 timeout 120 srun -w n2 -n1 --mpi=$mpi \
				--dptrain true >"fifo-$pt.out" 2>&1 || rc=$? &&
			cat "fifo-$pt.out" &&
			test $rc != 0 && test $rc != 124 &&
			grep "fifo-$pt/device0/train.log is a FIFO, not a regular file" "fifo-$pt.out" ||
			return 1
		done &&
		nodes_idle
	'

	test_expect_success $prereq "$pt: the nodes are idle, the cluster stops" '
		nodes_idle &&
		! grep -i "kill task failed" "$DPTRAIN_CLUSTER_DIR/log/slurmctld.log" &&
		dp_cluster_stop "$PWD/cluster-$pt"
	'
}

proctrack_tests linuxproc
proctrack_tests pgid
proctrack_tests cgroup CGROUP_V1

test_expect_success 'setup: a cluster for the rest (linuxproc)' '
	dp_cluster_start -d cluster -N 2 &&
	nodes_idle
'

# The victim's rank 1 waits for shared/go, so that its rank 0 serves the store alone meanwhile.
test_expect_success 'setup: the victim'"'"'s rank script' '
	cat >shared/rank.sh <<-EOF &&
	#!/bin/sh
	PATH="$BIN:/usr/bin:/bin"
	echo "\$DPTRAIN_STORE_SECRET" >"$SH/secret.\$RANK"
	if test "\$RANK" = 1; then
		i=0
		while ! test -e "$SH/go" && test \$i -lt 1200; do sleep 0.1; i=\$((i + 1)); done
	fi
	exec dptrain "\$@"
	EOF
	chmod 755 shared/rank.sh
'

# job_with_dir DIR: job.json with output.dir DIR (the environment does not reach a step
# started with --export=NONE)
job_with_dir() {
	/usr/bin/python3 -c "import json, sys; c = json.load(open(sys.argv[1])); c[\"output\"] = {\"dir\": sys.argv[2]}; print(json.dumps(c))" "$SH/job.json" "$1"
}

# wait_table DIR: the rank table in DIR, within 60 s; prints the master's address and port.
wait_table() {
	_i=0
	while ! test -s "$1/rank_table.json" && test $_i -lt 600; do
		sleep 0.1
		_i=$((_i + 1))
	done
	dp_json "$1/rank_table.json" "\"%s %s\" % (d[\"dptrain\"][\"master_addr\"], d[\"dptrain\"][\"master_port\"])"
}

# wait_listen PORT: something listens on PORT within 60 s
wait_listen() {
	_i=0
	while ! ss -Hltn "sport = :$1" | grep -q . && test $_i -lt 600; do
		sleep 0.1
		_i=$((_i + 1))
	done
	ss -Hltn "sport = :$1" | grep -q .
}

# Under --export=NONE the tasks lack srun's environment, the step's secret with it: before,
# the store then let in anyone (a stranger's hello with no secret was rank 1, and could end
# the job). With PMIx the secret now reaches every rank through PMIx: the stranger, another
# user who learned the port, is refused, and the job trains.
test_expect_success 'export=NONE, PMIx: another user who knows the port is refused; the job trains' '
	test_when_finished "touch $SH/go" &&
	rm -f shared/go shared/secret.* &&
	job_with_dir "$SH/none" >shared/none.json &&
	{ as $VICTIM timeout 180 srun --export=NONE -n2 --mpi=pmix --dptrain="$SH/none.json" \
		"$SH/rank.sh" >none.out 2>&1; echo $? >none.rc; } &
	set -- $(wait_table shared/none) && addr=$1 port=$2 &&
	test "$(stat -c %a shared/none/rank_table.json)" = 600 &&
	test_must_fail as $ATTACKER cat "$SH/none/rank_table.json" &&
	wait_listen $port &&
	# what the attacker can learn or guess: the job and step (squeue), the port (here, from
	# the table as root)
	cp shared/none/rank_table.json shared/att-table.json && chmod 644 shared/att-table.json &&
	rc=0 && as $ATTACKER env RANK=1 LOCAL_RANK=0 WORLD_SIZE=2 MASTER_ADDR=$addr \
		MASTER_PORT=$port RANK_TABLE_FILE="$SH/att-table.json" timeout 60 \
		"$BIN/dptrain" "$SH/job.json" output.dir="$SH/attacker-out" >attacker.out 2>&1 ||
		rc=$? &&
	cat attacker.out &&
	test $rc = 3 &&
	grep "refused" attacker.out &&
	touch shared/go && wait &&
	cat none.out &&
	test "$(cat none.rc)" = 0 &&
	grep "refused a connection to port $port from .*gave no secret\|refused a connection to port $port from .*wrong" shared/none/device0/train.log &&
	s0=$(cat shared/secret.0) && s1=$(cat shared/secret.1) &&
	echo "$s0" | grep -Ex "[0-9a-f]{32}" && test "$s0" = "$s1"
'

test_expect_success 'export=NONE without PMIx: the step is refused, naming --export=NONE' '
	job_with_dir "$SH/none2" >shared/none2.json &&
	rc=0 && as $VICTIM timeout 120 srun --export=NONE,MASTER_ADDR=127.0.0.1 -n2 --mpi=none \
		--dptrain="$SH/none2.json" /bin/true >none2.out 2>&1 || rc=$? &&
	cat none2.out &&
	test $rc != 0 && test $rc != 124 &&
	grep "lacks the step.s secret DPTRAIN_STORE_SECRET.*--export=NONE.*--mpi=pmix" none2.out
'

# A flood of strangers at rank 0's store (the attacker learned the port): hundreds of silent
# connections, and frames that claim 16 MiB before any hello. Before, they used up rank 0's
# descriptors (the real rank 1 could no longer connect, a checkpoint failed with "Too many
# open files") and its memory (measured here: 200 MB more under this flood). Now they cost a
# bounded number of descriptors and bytes (under 64 MB more), and the job trains, with a
# checkpoint at every step.
test_expect_success 'a flood of strangers at the store: the job trains, rank 0 stays small' '
	test_when_finished "touch $SH/go $SH/stop-flood" &&
	rm -f shared/go shared/stop-flood &&
	cat >flood.py <<-\EOF &&
	# the attacker: keeps about 1200 connections open to the store, replacing every one the
	# store drops; every fifth sends a frame head claiming 16 MiB, then 1 MiB of it
	import os, resource, select, socket, struct, sys, time
	addr, port, stop = sys.argv[1], int(sys.argv[2]), sys.argv[3]
	resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
	big = struct.pack(">I", 16 << 20) + b"\1" + b"\0" * (1 << 20)
	made = 0
	def one():
	    global made
	    made += 1
	    try:
	        s = socket.create_connection((addr, port), timeout=2)
	        if made % 5 == 0:
	            s.sendall(big)
	        s.setblocking(False)
	        return s
	    except OSError:
	        return None
	held = {}
	for i in range(1200):
	    s = one()
	    if s:
	        held[s.fileno()] = s
	print("flood: %d connections" % len(held), flush=True)
	t = time.time()
	while not os.path.exists(stop) and time.time() - t < 150:
	    p = select.poll()
	    for fd in held:
	        p.register(fd, select.POLLIN)
	    for fd, ev in p.poll(100):
	        s = held.pop(fd)
	        s.close()
	        s = one()
	        if s:
	            held[s.fileno()] = s
	print("flood: %d connections made in all" % made, flush=True)
	EOF
	{ as $VICTIM sh -c "ulimit -n 1024 && DPTRAIN_OUTPUT_DIR=\"$SH/flood\" timeout 180 \
		srun -n2 --mpi=pmix --dptrain=\"$SH/job.json\" \"$SH/rank.sh\"" >flood.out 2>&1; \
		echo $? >flood.rc; } &
	set -- $(wait_table shared/flood) && addr=$1 port=$2 &&
	wait_listen $port &&
	r0=$(for p in $(mine $(pgrep -u $VICTIM -x dptrain)); do
		grep -qz "^RANK=0$" /proc/$p/environ && echo $p; done) &&
	rss0=$(awk "/^VmRSS:/ {print \$2}" /proc/$r0/status) &&
	{ as $ATTACKER /usr/bin/python3 "$PWD/flood.py" $addr $port "$SH/stop-flood" \
		>flood-attacker.out 2>&1 & } &&
	i=0 && while ! grep -q "^flood:" flood-attacker.out && test $i -lt 1200; do
		sleep 0.1; i=$((i + 1)); done &&
	cat flood-attacker.out &&
	rss=$(awk "/^VmRSS:/ {print \$2}" /proc/$r0/status) &&
	echo "rank 0 RSS: $rss0 kB before the flood, $rss kB under it" &&
	test $((rss - rss0)) -lt 65536 &&
	touch shared/go &&
	i=0 && while ! test -s flood.rc && test $i -lt 1800; do sleep 0.1; i=$((i + 1)); done &&
	touch shared/stop-flood && wait &&
	cat flood.out &&
	test "$(cat flood.rc)" = 0 &&
	grep "^dptrain: done: 4 steps" flood.out &&
	test -d shared/flood/checkpoints/step-4 &&
	grep "refused a connection to port $port" shared/flood/device0/train.log
'

# Every directory on the way to the output directory must be the user'"'"'s or root'"'"'s and
# let nobody else rename what is in it: else its owner (a "group-writable project directory",
# the site/ of the first user'"'"'s job) could swap the job'"'"'s directory after any check,
# and the job would resume the stranger'"'"'s checkpoint and write its weights there.
test_expect_success 'an output directory under another user'"'"'s directory is refused' '
	as $ATTACKER sh -c "mkdir -m 777 proj" &&
	rc=0 && as $VICTIM env DPTRAIN_OUTPUT_DIR="$SH/proj/run" timeout 120 \
		srun -n1 --dptrain true >proj.out 2>&1 || rc=$? &&
	cat proj.out &&
	test $rc != 0 && test $rc != 124 &&
	grep "the output directory .*proj/run. is not safe: .*shared/proj. on its way belongs to another user (uid $(id -u $ATTACKER)" proj.out &&
	! test -e shared/proj/run/rank_table.json
'

test_expect_success 'the swap itself: a directory renamed under the victim is never followed' '
	as $ATTACKER sh -c "mkdir -m 777 site && mkdir -m 700 site/decoy" &&
	as $VICTIM sh -c "mkdir -m 755 site/v" &&
	# the attacker moves the victim'"'"'s directory away and puts a link to its own there
	as $ATTACKER sh -c "mv site/v site/v.old && ln -s decoy site/v" &&
	rc=0 && as $VICTIM env DPTRAIN_OUTPUT_DIR="$SH/site/v" timeout 120 \
		srun -n1 --dptrain true >swap.out 2>&1 || rc=$? &&
	cat swap.out && test $rc != 0 && test $rc != 124 &&
	test -z "$(ls -A shared/site/decoy)"
'

test_expect_success 'a group-writable parent is refused; a sticky one, and a link of one'"'"'s own, are not' '
	as $VICTIM sh -c "mkdir -m 775 gw && mkdir -m 1777 sticky && mkdir -m 755 real && ln -s real link" &&
	rc=0 && as $VICTIM env DPTRAIN_OUTPUT_DIR="$SH/gw/run" timeout 120 \
		srun -n1 --dptrain true >gw.out 2>&1 || rc=$? &&
	cat gw.out && test $rc != 0 && test $rc != 124 &&
	grep "gw. on its way is writable by its group and not sticky" gw.out &&
	as $VICTIM env DPTRAIN_OUTPUT_DIR="$SH/sticky/run" timeout 120 srun -n1 --dptrain true &&
	as $VICTIM env DPTRAIN_OUTPUT_DIR="$SH/link/run" timeout 120 srun -n1 --dptrain true &&
	grep -x "DPTRAIN_OUTPUT_DIR=$SH/real/run" shared/real/run/device0/env.log
'

# The documented layout for a site (dptrain(8), SECURITY): a sticky root the admin made, %u
# first. Both users'"'"' jobs run; a directory squatted under the victim'"'"'s name is named.
test_expect_success 'output_dir=ROOT/%u/%j.%s under a sticky root: each user'"'"'s own' '
	mkdir -m 1777 shared/scratch &&
	for u in $VICTIM $ATTACKER; do
		as $u env DPTRAIN_OUTPUT_DIR="$SH/scratch/%u/%j.%s" timeout 120 \
			srun -n2 --dptrain true || return 1
		test "$(stat -c %U shared/scratch/$u)" = $u || return 1
	done &&
	ls shared/scratch/$VICTIM/*/rank_table.json &&
	as $ATTACKER sh -c "mkdir -m 777 scratch/dpx" &&
	rc=0 && as $VICTIM env DPTRAIN_OUTPUT_DIR="$SH/scratch/dpx/%j" timeout 120 \
		srun -n1 --dptrain true >squat.out 2>&1 || rc=$? &&
	cat squat.out && test $rc != 0 &&
	grep "scratch/dpx. on its way belongs to another user" squat.out
'

# hccn.conf chooses the ranks'"'"' device addresses: the same rule as the output directory.
test_expect_success 'mindspore.hccn_conf: another user'"'"'s file, a shared-writable one or a FIFO is refused' '
	as $ATTACKER sh -c "printf \"address_0=192.0.2.66\n\" >evil.conf && chmod 644 evil.conf" &&
	as $VICTIM sh -c "printf \"address_0=192.0.2.7\n\" >ww.conf && chmod 666 ww.conf && mkfifo fifo.conf && printf \"address_0=192.0.2.8\n\" >good.conf" &&
	for f in evil ww fifo good; do
		printf "{\"mindspore\": {\"hccn_conf\": \"%s\"}}\n" "$SH/$f.conf" >shared/hccn-$f.json &&
		chmod 644 shared/hccn-$f.json || return 1
	done &&
	for f in evil ww fifo; do
		rc=0 && as $VICTIM env DPTRAIN_OUTPUT_DIR="$SH/hccn-$f" timeout 120 \
			srun -n1 --dptrain="$SH/hccn-$f.json" true >hccn-$f.out 2>&1 || rc=$? &&
		cat hccn-$f.out && test $rc != 0 && test $rc != 124 || return 1
	done &&
	grep "evil.conf belongs to another user (uid $(id -u $ATTACKER)), neither you nor root" hccn-evil.out &&
	grep "ww.conf is writable by everyone" hccn-ww.out &&
	grep "fifo.conf is a FIFO, not a regular file" hccn-fifo.out &&
	! grep -r 192.0.2.66 shared/hccn-evil &&
	as $VICTIM env DPTRAIN_OUTPUT_DIR="$SH/hccn-good" timeout 120 \
		srun -n1 --dptrain="$SH/hccn-good.json" true &&
	grep 192.0.2.8 shared/hccn-good/rank_table.json
'

test_expect_success 'a DPTRAIN_CONFIG longer than a path is refused, not ignored' '
	long=/$(printf "%05000d" 0) &&
	rc=0 && as $VICTIM env DPTRAIN_OUTPUT_DIR="$SH/long" timeout 120 \
		srun -n1 --export=ALL,DPTRAIN_CONFIG=$long sh -c "echo ran: \${RANK:-no rank}" \
		>long.out 2>&1 || rc=$? &&
	cut -c 1-300 long.out &&
	test $rc != 0 && test $rc != 124 &&
	grep "DPTRAIN_CONFIG in the task.s environment is longer than 4095 bytes" long.out &&
	! grep "^ran:" long.out
'

# A node whose helper cannot run (here a launcher= that fails on n2 before PMIx): rank 0
# names the two ranks there, never rank 1 beside it, run after run.
test_expect_success 'the helper failing on n2: rank 0 names ranks 2-3 and no other' '
	conf="$DPTRAIN_CLUSTER_DIR/plugstack.conf" &&
	cp "$conf" plugstack.saved &&
	test_when_finished "cp plugstack.saved \"$conf\"" &&
	# the cluster'"'"'s short run directory: plugstack.conf'"'"'s words cannot hold a blank
	lw="$DPTRAIN_CLUSTER_RUNDIR/lw.sh" &&
	cat >"$lw" <<-EOF &&
	#!/bin/sh
	if test "\$SLURMD_NODENAME" = n2; then echo "test: no helper on n2" >&2; exit 1; fi
	exec "$BIN/dptrain-launch" "\$@"
	EOF
	chmod 755 "$lw" &&
	sed "s|launcher=[^ ]*|launcher=$lw|" plugstack.saved >"$conf" &&
	grep -F "launcher=$lw " "$conf" &&
	for i in 1 2 3; do
		rc=0 &&
		as $VICTIM env DPTRAIN_OUTPUT_DIR="$SH/n2fail" DPTRAIN_TIMEOUT=8 timeout 120 \
			srun -N2 --ntasks-per-node=2 --mpi=pmix --dptrain true >n2fail.out 2>&1 ||
		rc=$?
		cat n2fail.out &&
		test "$rc" -ne 0 &&
		grep "rank 0 on n1: PMIx fence (rendezvous of all ranks) timed out after 8 s: 2 of 4 ranks did not arrive: ranks 2-3 on n2[ ;]" n2fail.out ||
		return 1
	done
'

test_expect_success 'the nodes are idle at the end' '
	nodes_idle &&
	! grep -i "kill task failed" "$DPTRAIN_CLUSTER_DIR/log/slurmctld.log"
'

test_done
