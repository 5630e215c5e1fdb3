#!/bin/sh
# t0840-stop.t — a stop request (SIGTERM from Slurm's preemption or time limit, SIGUSR1 from
# sbatch --signal) at any moment of a run: every trial must end with exit 4 and a checkpoint
# (or, before the first step, with nothing to save), and resuming must give bit for bit the
# weights of the run that was never interrupted. Many trials at random moments, because the
# bug this guards against struck about 1 run in 27 (1 in 10 on some CPUs): a signal handler
# ran on a thread inside oneDNN's AVX-512 GEMM, whose code points the stack pointer into a
# heap workspace, and the kernel wrote the signal frame there ("corrupted size vs. prev_size",
# or a SIGSEGV). Signals are now taken by one thread that runs no kernel.
#
# DPTRAIN_STOP_TRIALS sets the number of trials (default 120: a 1-in-27 event is missed with
# probability (26/27)^120 < 1.2%; under the sanitizers, which cannot see a kernel's write
# anyway, 12). The delays are random but fixed per trial number, so a failing trial reruns.
# Also: the stop path's loose ends (a stop during the rendezvous, dptrain-run killed with
# SIGKILL, a crashed rank named after a stop request). Owns only its trash directory.

test_description='stop requests at random moments: exit 4, a checkpoint, an exact resume'

. "$(dirname "$0")/sharness.sh"

if ! test_have_prereq LAUNCH || ! test -x "$DPTRAIN_BUILD_DIR/bin/dptrain-run"; then
	skip_all='dptrain-launch/dptrain-run not built'
	test_done
fi

if test -n "$DPTRAIN_STOP_TRIALS"; then
	trials=$DPTRAIN_STOP_TRIALS
elif test "$DPTRAIN_SAN" = 1; then
	trials=12
else
	trials=120
fi
MARK="T0840_MARK=$$.$(date +%s%N)"
export "$MARK"
ref="$DPTRAIN_SRC_DIR/t/reference"
# Correctness, not speed: waiting OpenMP threads sleep, so a busy machine only slows it down.
OMP_WAIT_POLICY=passive
export OMP_WAIT_POLICY

# Synthetic data (no file to read: the ranks start at once). Most time goes to the MLP's GEMMs,
# where the old handler struck; lenet adds convolutions. No periodic checkpoints: the one a
# trial finds was written because of its signal.
cat >mlp.json <<EOF
{
  "seed": 3,
  "model": {"name": "mlp", "num_classes": 10, "input_shape": [1, 28, 28], "hidden": [512, 512]},
  "data": {"format": "synthetic", "train": {"size": 60000}, "batch_size": 64},
  "optimizer": {"name": "momentum", "lr": 0.01, "momentum": 0.9},
  "train": {"epochs": 0, "max_steps": 300, "log_every": 100, "threads": 1},
  "checkpoint": {"every_steps": 0}
}
EOF
sed -e 's/"name": "mlp", "num_classes": 10, "input_shape": \[1, 28, 28\], "hidden": \[512, 512\]/"name": "lenet", "num_classes": 10, "input_shape": [1, 28, 28]/' \
	-e 's/"max_steps": 300/"max_steps": 150/' mlp.json >lenet.json

# The three kinds of trial, by number: 2 ranks (dptrain-run) of the MLP on 1 thread each,
# 1 rank of the MLP on 2 threads, 2 ranks of lenet.
kind_of() {
	case $(($1 % 4)) in
	0 | 2) echo mlp2 ;;
	1) echo mlp1 ;;
	3) echo lenet2 ;;
	esac
}
# run_kind KIND DIR [OVERRIDES...]: one run of KIND into DIR (in a subshell: it execs)
run_kind() {
	_k=$1 _d=$2
	shift 2
	case $_k in # exec: in the background, $! is the run itself
	mlp2) exec dptrain-run -n 2 -o $_d mlp.json dptrain mlp.json "$@" ;;
	mlp1) DPTRAIN_OUTPUT_DIR=$PWD/$_d exec dptrain mlp.json train.threads=2 "$@" ;;
	lenet2) exec dptrain-run -n 2 -o $_d lenet.json dptrain lenet.json "$@" ;;
	esac
}

test_expect_success 'the uninterrupted runs, one of each kind' '
	for k in mlp2 mlp1 lenet2; do
		(run_kind $k ref.$k) >ref.$k.out 2>&1 || { cat ref.$k.out; return 1; }
		test -s ref.$k/model.safetensors || return 1
	done
'

# blocking PID: wait (at most 60 s) until PID has SIGTERM and SIGUSR1 blocked, which dptrain
# does at its main's first instruction and dptrain-run before it starts the ranks. Before that the process is still
# being loaded (the dynamic linker, libraries' constructors, the sanitizers' start): a signal
# there ends it with the default action, which no program can prevent (dptrain(1)); under
# srun --dptrain or dptrain-run the trainer starts with them blocked. Timing the signal from
# here makes the trials the same on a busy machine as on a quiet one.
blocking() {
	_w=0
	while test $_w -lt 6000 && kill -0 $1 2>/dev/null; do
		_blk=$(sed -n "s/^SigBlk:[[:space:]]*//p" /proc/$1/status 2>/dev/null)
		_low=${_blk#"${_blk%????}"}
		test -n "$_low" && test $((0x$_low & 0x4200)) = $((0x4200)) && return 0
		# dptrain-run waits in sigtimedwait, which shows the signals it waits for unblocked
		case $(cat /proc/$1/wchan 2>/dev/null) in *sigtimedwait*) return 0 ;; esac
		sleep 0.01
		_w=$((_w + 1))
	done
	return 0
}

# trial N: signal at a random moment, then resume in the same directory to the end. The
# moment is a point of the run, not of the clock, so that it falls the same on a slow build,
# a busy machine or a quiet one: in 1 trial of 7 during the start (the rendezvous), else in a
# random step from 1 to 140 (every kind runs at least 150), in both cases up to 50 ms later:
# mid-step, where the old signal handler struck.
trial() {
	_n=$1
	_k=$(kind_of $_n)
	_sig=TERM
	test $((_n % 3)) = 2 && _sig=USR1
	_at=$(awk -v n=$_n 'BEGIN { srand(8400 + n); s = rand() < 1 / 7 ? 0 : 1 + int(rand() * 140);
		printf "%d %.3f", s, rand() * 0.05 }')
	_step=${_at% *} _delay=${_at#* }
	rm -rf t$_n t$_n.out t$_n.resume
	run_kind $_k t$_n train.log_every=1 >t$_n.out 2>&1 &
	_pid=$!
	blocking $_pid
	_w=0
	while test $_step -gt 0 && test $_w -lt 30000 && ! grep -q "step: $_step," t$_n.out &&
		kill -0 $_pid 2>/dev/null; do
		sleep 0.01
		_w=$((_w + 1))
	done
	_delay="step $_step + ${_delay}"
	sleep ${_delay##* }
	kill -$_sig $_pid 2>/dev/null
	wait $_pid
	_s=$?
	if grep -qiE "corrupt|double free|killed by signal" t$_n.out t$_n/device*/train.log \
		2>/dev/null; then
		echo "trial $_n ($_k, SIG$_sig after $_delay s): a rank crashed (exit $_s):"
		cat t$_n.out
		return 1
	fi
	case $_s in
	4) ;;
	0) echo "trial $_n ($_k): finished before SIG$_sig after $_delay s" >>late ;;
	*)
		echo "trial $_n ($_k, SIG$_sig after $_delay s): exit $_s, not 4:"
		cat t$_n.out
		return 1
		;;
	esac
	# a stop during the start: the trainer says "nothing to save yet", a launcher still wiring
	# up "nothing was trained yet, so there is nothing to save"
	if test $_s = 4 && ! grep -qE "nothing to save yet|there is nothing to save" t$_n.out t$_n/device*/train.log 2>/dev/null; then
		at=$(sed -n "s/.*stopping on request at step \([0-9]*\).*/\1/p" t$_n.out t$_n/device0/train.log 2>/dev/null | head -n 1)
		test -n "$at" && test -s t$_n/checkpoints/step-$at/model.safetensors || {
			echo "trial $_n ($_k, SIG$_sig after $_delay s): exit 4 without its checkpoint:"
			cat t$_n.out
			return 1
		}
		echo "$_n $_k $_sig $_delay step $at" >>stopped
	fi
	(run_kind $_k t$_n) >t$_n.resume 2>&1 || {
		echo "trial $_n ($_k): the resumed run failed:"
		cat t$_n.resume
		return 1
	}
	cmp t$_n/model.safetensors ref.$_k/model.safetensors || {
		echo "trial $_n ($_k, SIG$_sig after $_delay s): resumed weights differ"
		cat t$_n.out t$_n.resume
		return 1
	}
	rm -rf t$_n t$_n.out t$_n.resume
}

test_expect_success "$trials trials: exit 4, a checkpoint, and an exact resume, every time" '
	: >stopped && : >late &&
	n=1 && while test $n -le $trials; do
		trial $n || return 1
		n=$((n + 1))
	done &&
	echo "$(wc -l <stopped) of $trials trials stopped mid-run with a checkpoint" &&
	echo "$(wc -l <late) finished before their signal" &&
	test $(wc -l <stopped) -ge $((trials / 2))
'

# ours: the processes of this test's programs and helpers (the test's shells carry MARK too)
ours() {
	for _p in $(grep -lzxF "$MARK" /proc/[0-9]*/environ 2>/dev/null | sed "s|/proc/\([0-9]*\)/environ|\1|"); do
		case "$(cat /proc/$_p/comm 2>/dev/null)" in
		dptrain | dptrain-launch | dptrain-run | python3) echo $_p ;;
		esac
	done
}

# The loose ends of the stop path, with ranks started as torchrun would (RANK, WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT) so nothing else is in the way.
# hold_port: a port of 127.0.0.1 held (bound, not listening) until the test ends, in $port.
# The number is written whole and renamed into place: reading a file that the next holder's
# shell was still truncating gave an empty port once (seen under stress-ng).
hold_port() {
	rm -f port port.tmp
	/usr/bin/python3 -c '
import os, socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
with open("port.tmp", "w") as f:
    f.write("%d\n" % s.getsockname()[1])
os.rename("port.tmp", "port")
time.sleep(600)' >/dev/null 2>&1 &
	holder=$! # python itself (a simple command in the background), so kill ends it
	_i=0
	until test -s port || test $_i -ge 600; do sleep 0.05; _i=$((_i + 1)); done
	port=$(cat port) && test -n "$port"
}

test_expect_success 'SIGTERM while waiting for a rank that never comes: exit 4 at once, nothing to save' '
	hold_port && test_when_finished "kill $holder" &&
	{
		RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port DPTRAIN_OUTPUT_DIR=$PWD/rz \
			dptrain mlp.json >rz.out 2>&1 &
	} &&
	pid=$! &&
	i=0 && until test -d rz || test $i -ge 600; do sleep 0.1; i=$((i + 1)); done &&
	sleep 0.5 && kill -TERM $pid &&
	t0=$(date +%s) && { wait $pid; s=$?; } && t1=$(date +%s) &&
	cat rz.out && test $s = 4 && test $((t1 - t0)) -lt 60 &&
	grep "rank 0: stopped on request before the first step: nothing to save yet" rz.out &&
	! test -d rz/checkpoints
'

# A launcher that re-raised a stop request with raise() before the exec left it pending on the
# exec'ing thread alone, which becomes the trainer's main thread: the trainer's signal thread
# never saw it, and the rank waited out the rendezvous (exit 3; seen in the trials under the
# sanitizers). The trainer takes such a signal too.
test_expect_success 'a SIGTERM pending on the thread that execs the trainer, not the process: exit 4 at once' '
	hold_port && test_when_finished "kill $holder" &&
	rc=0 && RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port DPTRAIN_OUTPUT_DIR=$PWD/tp \
		/usr/bin/python3 -c "
import os, signal, threading
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
os.execvp(\"dptrain\", [\"dptrain\", \"mlp.json\", \"timeouts.rendezvous_s=60\"])
" >tp.out 2>&1 || rc=$? &&
	cat tp.out && test $rc = 4 &&
	grep "rank 0: stopped on request before the first step: nothing to save yet" tp.out
'

# A library that starts threads in its constructor, before main blocks the stop signals
# (OpenBLAS does): the kernel may deliver SIGTERM to such a thread. It must still reach the
# trainer's waiting thread, not end the process (it did: exit 143, no checkpoint).
blas=$(/sbin/ldconfig -p 2>/dev/null | sed -n "s/^[[:space:]]*libopenblas.so.0 (libc6,x86-64) => //p" | head -n 1)
test -n "$blas" && test -f "$blas" && test_set_prereq OPENBLAS
# (the sanitizers' runtime must come first among preloaded libraries)
test "$DPTRAIN_SAN" = 1 && blas="$(${CC:-cc} -print-file-name=libasan.so) $blas"
test_expect_success OPENBLAS 'SIGTERM with a library thread from before main (OpenBLAS): exit 4, a checkpoint' '
	{
		LD_PRELOAD=$blas DPTRAIN_OUTPUT_DIR=$PWD/pre dptrain mlp.json train.max_steps=100000 \
			train.log_every=1 >pre.out 2>&1 &
	} &&
	pid=$! &&
	i=0 && until grep -q "^epoch: 1 step: 2," pre.out || test $i -ge 6000; do sleep 0.01; i=$((i + 1)); done &&
	test "$(ls /proc/$pid/task | wc -l)" -gt 3 &&
	kill -TERM $pid &&
	{ wait $pid; s=$?; } &&
	tail -n 3 pre.out &&
	test $s = 4 &&
	grep "stopping on request at step" pre.out &&
	ls pre/checkpoints/step-*/model.safetensors
'

test_expect_success 'a stranger on MASTER_PORT: rank 1 says so, without waiting for the rendezvous to close' '
	/usr/bin/python3 -c "
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((\"127.0.0.1\", 0)); s.listen(); print(s.getsockname()[1], flush=True)
c, _ = s.accept(); c.sendall(b\"SSH-2.0-OpenSSH_9.2\\r\\n\"); time.sleep(600)" >sport 2>/dev/null &
	stranger=$! && test_when_finished "kill $stranger" &&
	until test -s sport; do sleep 0.05; done &&
	test_expect_code 3 env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$(cat sport) \
		"DPTRAIN_OUTPUT_DIR=$PWD/st" dptrain mlp.json timeouts.rendezvous_s=600 2>st.err &&
	cat st.err &&
	grep "did not answer as a dptrain store does" st.err &&
	grep "another program listens on that port" st.err
'

test_expect_success 'kill -9 of dptrain-run: its ranks stop with a checkpoint, none is left training' '
	dptrain-run -n 2 -o k9 mlp.json dptrain mlp.json train.max_steps=100000 \
		train.log_every=1 >k9.out 2>&1 &
	pid=$! &&
	i=0 && until grep -q "step: 20," k9.out 2>/dev/null || test $i -ge 600; do sleep 0.1; i=$((i + 1)); done &&
	kill -9 $pid && wait $pid; \
	i=0 && until test -z "$(ours)" || test $i -ge 600; do sleep 0.1; i=$((i + 1)); done &&
	left=$(ours) && echo "left running: ${left:-none}" && test -z "$left" &&
	cat k9/device1/train.log &&
	grep "stopping after this step, with a checkpoint" k9/device0/train.log &&
	ls k9/checkpoints/step-*/model.safetensors
'

test_expect_success 'dptrain-run names a rank that crashed after the stop request, and exits with its status' '
	cat >crash.sh <<-\EOF &&
	#!/bin/sh
	# rank 1 dies of SIGSEGV when asked to stop; rank 0 stops as asked
	if test "$RANK" = 1; then trap "kill -SEGV \$\$" TERM; else trap "exit 4" TERM; fi
	echo ready; while :; do sleep 0.1; done
	EOF
	chmod +x crash.sh &&
	{ dptrain-run -n 2 -o cr mlp.json ./crash.sh >cr.out 2>&1 & } &&
	pid=$! &&
	i=0 && until test $(cat cr/device*/train.log 2>/dev/null | grep -c ready) = 2 ||
		test $i -ge 600; do sleep 0.1; i=$((i + 1)); done &&
	kill -TERM $pid && { wait $pid; s=$?; } &&
	cat cr.out && test $s = $((128 + 11)) &&
	grep "dptrain-run: rank 1 was killed by signal 11" cr.out &&
	! grep "dptrain-run: rank 0 " cr.out
'

test_expect_success 'nothing left running' '
	left=$(ours) && echo "left running: ${left:-none}" && test -z "$left"
'

test_done
