#!/bin/bash
# crash-consistency.sh — the checkpoint crash test (too long for make check): trains one job in
# one output directory ITER times, SIGKILLing every process of the job at a random moment (a
# share of the kills aimed at the moment a checkpoint is being written), and checks after each
# kill that what is on disk is a valid checkpoint set, that the next start resumes from it and
# loses at most every_steps + 1 steps, and that no run printed an error or a damaged-checkpoint
# warning. Run after `make`; writes only into its own temporary directory. See
# doc/crash-consistency.md.
set -euo pipefail

usage() {
	cat <<EOF
usage: $0 [-n RANKS] [-i ITER] [-s SEED] [-a PERCENT] [-w MIN_MS-MAX_MS] [-k] [-- OVERRIDE...]
  -n RANKS    1: dptrain; more: dptrain-run -n RANKS (default 1)
  -i ITER     start/kill cycles (default 100)
  -s SEED     seed of the kill times; the same seed gives the same schedule (default 1)
  -a PERCENT  share of kills aimed at a checkpoint write (default 30)
  -w MIN-MAX  random wait before a kill (or before watching for a write), ms (default 50-2000)
  -k          keep the work directory even when every check passed
  OVERRIDE    more key=value overrides for the trainer (e.g. checkpoint.every_steps=10)
EOF
	exit 2
}

# When dptrain-run is killed its ranks would be orphaned, and an init that does not reap would
# keep them as zombies: run as a child subreaper (kept across exec) so that this shell reaps them.
if [ -z "${DPTRAIN_CRASH_REAPER:-}" ]; then
	export DPTRAIN_CRASH_REAPER=1
	exec "${PYTHON:-python3}" -c 'import ctypes, os, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
os.execvp(sys.argv[1], sys.argv[1:])' bash "$0" "$@"
fi

ranks=1 iter=100 seed=1 aim=30 wmin=50 wmax=2000 keepdir=0
while getopts "n:i:s:a:w:kh" o; do
	case $o in
	n) ranks=$OPTARG ;;
	i) iter=$OPTARG ;;
	s) seed=$OPTARG ;;
	a) aim=$OPTARG ;;
	w) wmin=${OPTARG%-*} wmax=${OPTARG#*-} ;;
	k) keepdir=1 ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
for v in "$ranks" "$iter" "$seed" "$aim" "$wmin" "$wmax"; do
	[[ $v =~ ^[0-9]+$ ]] || usage
done
((ranks >= 1 && iter >= 1 && wmax >= wmin)) || usage

top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${DPTRAIN_BUILD_DIR:-$top/build}/bin
PATH="$bin:$PATH"
py=${PYTHON:-python3}
fm=${DPTRAIN_FMNIST:-/usr/share/datasets/fashion-mnist}
every=5 keep=3
[ -x "$bin/dptrain" ] || { echo "dptrain: crash-consistency: no $bin/dptrain; run make (or set DPTRAIN_BUILD_DIR)" >&2; exit 2; }
[ -f "$fm/train-images-idx3-ubyte.gz" ] || [ -f "$fm/train-images-idx3-ubyte" ] ||
	{ echo "dptrain: crash-consistency: no Fashion-MNIST in $fm; set DPTRAIN_FMNIST" >&2; exit 2; }

for o in "$@"; do # the bounds below follow an overridden interval
	case $o in
	checkpoint.every_steps=*) every=${o#*=} ;;
	checkpoint.keep=*) keep=${o#*=} ;;
	esac
done
((every > 0)) || usage

work=$(mktemp -d /tmp/dptrain-crash.XXXXXX)
out=$work/out ck=$work/out/checkpoints
cd "$work"
cat >job.json <<EOF
{
  "seed": 7,
  "model": {"name": "mlp", "num_classes": 10, "input_shape": [1, 28, 28], "hidden": [512, 512]},
  "data": {"format": "idx", "dir": "$fm", "batch_size": 64, "drop_remainder": true,
           "transforms": {"normalize": {"mean": [0.286], "std": [0.353]},
                          "random_crop": {"size": 28, "padding": 2}, "horizontal_flip": true}},
  "optimizer": {"name": "momentum", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.0001},
  "train": {"epochs": 0, "max_steps": 100000000, "log_every": 1, "threads": 1},
  "checkpoint": {"every_steps": $every, "keep": $keep}
}
EOF
# job.sh [OVERRIDE...]: one start of the job; stdout line-buffered, so that a kill cannot
# swallow the "resuming from" line
{
	echo '#!/bin/bash'
	if ((ranks == 1)); then
		printf 'exec stdbuf -oL dptrain job.json output.dir=%q' "$out"
	else
		printf 'exec dptrain-run -n %d -o %q job.json stdbuf -oL dptrain job.json' "$ranks" "$out"
	fi
	(($# == 0)) || printf ' %q' "$@"
	echo ' "$@"'
} >job.sh
chmod +x job.sh

# validate.py ROOT KEEP: every step-N directory in the checkpoint dir is complete (state.json
# parses, names step N, every file has its size and CRC-32), as t/t0800-ckpt.t checks. One line;
# status 1 if any is not. An invalid step with KEEP valid newer ones is one a prune was removing
# (named "half-removed"); any other is "damaged".
cat >validate.py <<'EOF'
import json, os, re, sys, zlib
root, keep = sys.argv[1], int(sys.argv[2])
bad, good, other = [], [], []
for d in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    m = re.fullmatch(r"step-(\d+)", d)
    if not m:
        if d != "latest":
            other.append(d)
        continue
    try:
        with open(os.path.join(root, d, "state.json")) as f:
            st = json.load(f)
        assert st["format"] == "dptrain-checkpoint" and st["step"] == int(m[1]), "state.json header"
        assert st["files"], "no files"
        for n, e in st["files"].items():
            with open(os.path.join(root, d, n), "rb") as f:
                b = f.read()
            assert len(b) == e["bytes"], "%s: %d bytes, state.json says %d" % (n, len(b), e["bytes"])
            assert zlib.crc32(b) == e["crc32"], "%s: CRC mismatch" % n
        good.append(int(m[1]))
    except Exception as e:
        bad.append((int(m[1]), d, "%s: %s" % (type(e).__name__, e)))
good.sort()
latest = ""
if os.path.exists(os.path.join(root, "latest")):
    latest = open(os.path.join(root, "latest")).read().strip()
stale = bool(good) and latest != "step-%d" % good[-1]
msg = ""
for step, d, why in bad:
    kind = "half-removed" if sum(g > step for g in good) >= keep else "damaged"
    has = ",".join(sorted(os.listdir(os.path.join(root, d)))) or "nothing"
    msg += " %s %s (%s; holds %s)" % (kind.upper(), d, why, has)
print("valid=%s invalid=%d leftovers=%d latest=%s%s%s" % (
    ",".join(map(str, good)) or "-", len(bad), len(other), latest or "-",
    " (not the newest)" if stale else "", msg))
sys.exit(1 if bad else 0)
EOF

exec {zz}<> <(:) # a pipe nobody writes: read -t on it is a sleep without a fork
msleep() { local t; printf -v t '%d.%03d' $(($1 / 1000)) $(($1 % 1000)); read -t "$t" -u "$zz" || :; }
now_ms() { echo $((${EPOCHREALTIME/./} / 1000)); }
rnd() { echo $((wmin + (RANDOM * 32768 + RANDOM) % (wmax - wmin + 1))); } # ms in [wmin, wmax]

# The processes of session $1 that are alive (not zombies).
session_pids() { ps -e -o pid=,sid=,stat= | awk -v s="$1" '$2 == s && $3 !~ /^Z/ {print $1}'; }
# Kills the whole job at one instant: stop every process of the session (again until no new
# one appears, as dptrain-run may be forking ranks), then SIGKILL them all, so no rank sees a
# peer die and reacts; $2: processes known to be in it, stopped first without waiting for ps.
# Fails if something survives 5 s.
kill_session() {
	local sid=$1 pids all="" i
	[ -z "${2:-}" ] || kill -STOP $2 2>/dev/null || :
	for ((i = 0; i < 100; i++)); do
		pids=$(session_pids "$sid")
		[ "$pids" = "$all" ] && break
		all=$pids
		[ -n "$pids" ] && kill -STOP $pids 2>/dev/null || :
	done
	for ((i = 0; i < 250; i++)); do
		pids=$(session_pids "$sid")
		[ -z "$pids" ] && return 0
		kill -KILL $pids 2>/dev/null || :
		msleep 20
	done
	echo "dptrain: crash-consistency: session $sid still has processes $pids after SIGKILL" # stdout: stderr may be quieted
	return 1
}
invalid_steps() { grep -o '\(HALF-REMOVED\|DAMAGED\) step-[0-9]*' <<<"$1" | sort || :; }
leftovers() { (shopt -s nullglob; cd "$ck" 2>/dev/null && printf '%s\n' *.tmp-* *.old-*) || :; }
last_logged() { # the last global_step in metrics.jsonl, 0 if none
	local s=""
	[ -f "$out/metrics.jsonl" ] &&
		s=$(tail -n 50 "$out/metrics.jsonl" | sed -n 's/.*"event":"train".*"global_step":\([0-9]*\),.*/\1/p' | tail -n 1)
	echo "${s:-0}"
}

pid=""
# on any exit (an error, ^C) the job in flight goes too
trap '[ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null || kill_session "$pid" >/dev/null 2>&1' EXIT
trap 'exit 130' INT TERM HUP

RANDOM=$seed
fail=0 halfrm=0 damaged=0 notices=0 aimed=0 wtmp=0 wprune=0 unknown=0 fresh=0 resumed=0 warns=0 maxlost=0 sumlost=0 missed=0
declare -a lostv=()
v_before=""
violation() { echo "FAIL iteration $it: $*"; fail=$((fail + 1)); }
t_start=$(now_ms)
for ((it = 1; it <= iter; it++)); do
	prev=$(last_logged)
	before=$(leftovers)
	wait_ms=$(rnd)
	aimed_it=0
	((RANDOM % 100 < aim)) && aimed_it=1
	extra=$((RANDOM % 3 == 0 ? 0 : RANDOM % 20)) # ms after a write is seen: 0 or up to 20
	setsid ./job.sh >"it$it.out" 2>"it$it.err" &
	pid=$!
	t0=$(now_ms)
	while [ "$(ps -o sid= -p "$pid" | tr -d ' ')" != "$pid" ]; do # setsid has not run yet
		kill -0 "$pid" 2>/dev/null || break
		(($(now_ms) - t0 < 5000)) || { echo "dptrain: crash-consistency: no session for $pid" >&2; exit 1; }
		msleep 1
	done
	died=0
	msleep "$wait_ms"
	known=$(session_pids "$pid")
	if ((aimed_it)); then
		aimed=$((aimed + 1))
		# watch for a new step-N.tmp-* (a write under way); give up after 10 s
		t1=${EPOCHREALTIME/./} seen=""
		while [ -z "$seen" ] && ((${EPOCHREALTIME/./} - t1 < 10000000)); do
			kill -0 "$pid" 2>/dev/null || break
			for d in "$ck"/step-*.tmp-*; do
				[ -e "$d" ] && [[ $'\n'$before$'\n' != *$'\n'${d##*/}$'\n'* ]] && seen=$d && break
			done
			[ -n "$seen" ] || msleep 1
		done
		[ -n "$seen" ] && ((extra > 0)) && msleep "$extra"
		[ -n "$seen" ] || missed=$((missed + 1))
	fi
	kill -0 "$pid" 2>/dev/null || died=1
	rc=0
	{ # quietly: bash would report "Killed"
		kill_session "$pid" "$known" || exit 1
		wait "$pid" || rc=$?
	} 2>/dev/null
	pid=""
	# what the kill left: a new leftover means it landed inside a checkpoint write (.tmp-: before
	# the rename into place; .old-: a step moved aside to be replaced or removed)
	after=$(leftovers)
	new=$(comm -13 <(echo "$before" | sort) <(echo "$after" | sort))
	new_tmp=$(grep -c '\.tmp-' <<<"$new" || :)
	new_old=$(grep -c '\.old-' <<<"$new" || :)
	v=$("$py" validate.py "$ck" "$keep") || :
	# new invalid step directories: a kill can leave one, a later one should not add more
	bad_new=$(comm -13 <(invalid_steps "$v_before") <(invalid_steps "$v"))
	if [ -n "$bad_new" ]; then
		violation "a step directory does not validate after the kill: $v"
		[[ $bad_new == *HALF-REMOVED* ]] && halfrm=$((halfrm + 1))
		[[ $bad_new == *DAMAGED* ]] && damaged=$((damaged + 1))
	fi
	now=$(last_logged)
	# where in ckpt_write the kill landed, from what it left
	nvalid=$(sed -n 's/^valid=\([0-9,]*\) .*/\1/p' <<<"$v" | tr ',' '\n' | grep -c . || :)
	if ((new_tmp > 0)); then
		phase="inside a checkpoint write (left a temporary directory)" wtmp=$((wtmp + 1))
	elif ((new_old > 0)) || [[ $bad_new == *HALF-REMOVED* ]]; then
		phase="inside a checkpoint write (in the prune)" wprune=$((wprune + 1))
	elif ((nvalid > keep)) && [ "${v%% *}" != "${v_before%% *}" ]; then
		phase="inside a checkpoint write (installed, not yet pruned)" wprune=$((wprune + 1))
	else
		phase="between checkpoint writes"
	fi
	v_before=$v
	# (1) the run started (resumed) without failing
	if ((died)); then
		violation "the run exited by itself (status $rc) before the kill: $(tail -n 3 "it$it.err" | tr '\n' ' ')"
	fi
	# (2) it resumed from a step at most every_steps + 1 before the last one logged before
	r=$(sed -n 's/^dptrain: resuming from .*: step \([0-9]*\), epoch.*/\1/p' "it$it.out" | head -n 1)
	what="?"
	if [ -n "$r" ]; then
		resumed=$((resumed + 1))
		lost=$((prev - r))
		lostv+=("$lost")
		sumlost=$((sumlost + lost))
		((lost > maxlost)) && maxlost=$lost
		((r >= prev - every - 1)) || violation "resumed from step $r, but step $prev was logged before the last kill"
		((r <= prev)) || violation "resumed from step $r, beyond the last logged step $prev"
		what="resumed $r (lost $lost)"
	elif grep -q '^dptrain: [a-z0-9_-]*, [0-9]* parameters' "it$it.out"; then
		fresh=$((fresh + 1))
		what="fresh start"
		# a complete checkpoint exists once step every_steps + 1 has been logged
		((prev <= every)) || violation "started fresh though step $prev had been logged"
	else
		unknown=$((unknown + 1))
		what="killed before resuming"
	fi
	# (3) no errors; warnings counted (a damaged checkpoint is reported as one)
	w=$(grep 'warning' "it$it.err" | grep -vc 'left by an interrupted checkpoint write' || :)
	notices=$((notices + $(grep -c 'left by an interrupted checkpoint write' "it$it.err" || :)))
	warns=$((warns + w))
	if grep -v 'warning' "it$it.err" | grep -q . || grep -qi 'error' "it$it.out"; then
		violation "the run printed an error: $(grep -v warning "it$it.err" | head -n 3 | tr '\n' ' ')"
	fi
	((w == 0)) || echo "iteration $it: $w warning(s) about damaged checkpoints: $(grep warning "it$it.err" | grep -v 'left by an interrupted' | head -n 3 | tr '\n' ' ')"
	printf 'iteration %d: %s; waited %d ms%s, logged %d -> %d, %s; %s\n' "$it" "$what" "$wait_ms" \
		"$( ((aimed_it)) && echo " + aimed at a write (+${extra} ms)")" "$prev" "$now" \
		"killed $phase" "$v"
done

# (4) the end: every step-N validates, and a last start resumes and finishes cleanly
prev=$(last_logged)
v=$("$py" validate.py "$ck" "$keep") || violation "final validation: $v"
echo "final state: $v"
it=final
setsid ./job.sh train.max_steps=$((prev + 10)) >final.out 2>final.err &
pid=$!
t0=$(now_ms)
while kill -0 "$pid" 2>/dev/null && (($(now_ms) - t0 < 300000)); do msleep 50; done
if kill -0 "$pid" 2>/dev/null; then
	kill_session "$pid" || :
	violation "the final resume run did not finish in 300 s"
fi
rc=0
{ wait "$pid"; } 2>/dev/null || rc=$?
pid=""
((rc == 0)) || violation "the final resume run failed (status $rc): $(tail -n 3 final.err | tr '\n' ' ')"
r=$(sed -n 's/^dptrain: resuming from .*: step \([0-9]*\), epoch.*/\1/p' final.out | head -n 1)
if [ -z "$r" ] || ((r < prev - every - 1)); then
	violation "the final run resumed from '${r:-nothing}', last logged step $prev"
fi
grep -v warning final.err | grep -q . && violation "the final run printed an error: $(head -n 3 final.err | tr '\n' ' ')"
warns=$((warns + $(grep warning final.err | grep -vc 'left by an interrupted checkpoint write' || :)))
v=$("$py" validate.py "$ck" "$keep") || violation "validation after the final run: $v"

t_total=$((($(now_ms) - t_start) / 1000))
median=$(printf '%s\n' "${lostv[@]:-0}" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
echo
echo "| crash-consistency, $ranks rank(s), seed $seed | |"
echo "|---|---|"
echo "| iterations (start, random wait, SIGKILL of every process) | $iter |"
echo "| kills aimed at a checkpoint write (seen / aimed) | $((aimed - missed)) / $aimed |"
echo "| kills inside a checkpoint write: all / before the rename (a .tmp left) / after it (latest, prune) | $((wtmp + wprune)) / $wtmp / $wprune |"
echo "| starts that resumed / started fresh / were killed before resuming | $resumed / $fresh / $unknown |"
echo "| steps lost per kill: max / median / mean (bound: every_steps + 1 = $((every + 1))) | $maxlost / $median / $(awk -v s="$sumlost" -v n="$resumed" 'BEGIN {printf "%.1f", n ? s / n : 0}') |"
echo "| warnings about damaged checkpoints | $warns |"
echo "| notices of leftovers of interrupted writes (expected) | $notices |"
echo "| last step logged; final resume from | $prev; ${r:-none} |"
echo "| kills after which a step-N did not validate: damaged / half-removed by a prune | $damaged / $halfrm |"
echo "| violations | $fail |"
echo "| wall time | ${t_total} s |"
if ((fail == 0 && warns == 0)); then
	((keepdir)) && echo "work directory kept: $work" || rm -rf "$work"
	exit 0
fi
echo "work directory kept for inspection: $work"
exit 1
