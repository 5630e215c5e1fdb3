#!/usr/bin/python3
"""chaos — a Jepsen-style fault-injection run of dptrain on the local test cluster.

A 2-node x 2-rank `sbatch --requeue` job of the bundled trainer (LeNet on Fashion-MNIST) on
contrib/localcluster/cluster --netns (each node its own network namespace) is hit, at moments
drawn from a printed seed, by the faults listed in FAULTS below; after the last resume the
checker compares it with an uninterrupted run of the same config and seed, bit for bit, and
checks that nothing this run started is left behind. See contrib/chaos/README.md and
doc/reliability.md.

  contrib/chaos/chaos.py [--seed S] [--faults N] [--jobs J] [--steps M] [--every K] ...

Exit status: 0 every job passed the checker, 1 a checker failure (the seed is printed: rerun
with --seed), 2 a usage or setup error. Standard library only; runs as root (the cluster,
namespaces and tmpfs need it).
"""

import argparse
import glob
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
CLUSTER = os.path.join(SRC, "contrib", "localcluster", "cluster")
FMNIST = "/usr/share/datasets/fashion-mnist"
# how long srun may outlive a trainer that printed its done line (Harness.unstick), and the
# job script's own limit after the trainer's last metrics event (JOB_SH), which comes first
STUCK_S = 60
JOB_STUCK_S = 30

# Every kind of fault, what it does, and whether it is expected to end the run it hits.
# The "cause" is a regular expression the job's log must match after a fault that ended a run
# ({rank}, {node} filled in): the job names what happened, to whom.
FAULTS = {
    "term": "scancel --signal=TERM to the job's step: every rank checkpoints and exits 4",
    "usr1": "scancel --signal=USR1 to the job's step: the same",
    "kill-rank": "SIGKILL of one rank",
    "node-fail": "SIGKILL of one node's slurmd, its slurmstepds and every task on it; the "
    "node comes back (slurmd restarted) a few seconds later",
    "link-short": "the node's interface down for less than the collective timeout",
    "link-long": "the node's interface down for longer than the collective timeout",
    "slow": "a token-bucket filter (tc tbf: low rate, short queue) on the node's interface: "
    "delay and tail drops (sch_netem is not in this kernel; see README)",
    "disk-full": "the output directory's file system (a small tmpfs) filled to the last block",
}
SINGLE = ["term", "usr1", "kill-rank", "node-fail", "link-short", "link-long", "slow", "disk-full"]
WEIGHTS = {"term": 2, "usr1": 1, "kill-rank": 3, "node-fail": 2, "link-short": 1,
           "link-long": 2, "slow": 1, "disk-full": 2}
CAUSE = {
    "term": r"SIGTERM",
    "usr1": r"SIGUSR1",
    "kill-rank": r"rank {rank} on {node}: the command was killed by signal 9",
    "node-fail": r"{node}",
    "link-long": r"(timed out|timeout|time limit).*|{node}",
    "link-short": r"(timed out|timeout).*",
    "slow": r"(timed out|timeout).*",
    "disk-full": r"(disk is full|No space left on device)",
}

T0 = time.monotonic()


def now():
    return time.monotonic() - T0


def log(msg):
    sys.stderr.write("chaos %7.1fs: %s\n" % (now(), msg))
    sys.stderr.flush()


class Fail(Exception):
    pass


def sh(cmd, check=True, timeout=60, env=None, capture=True):
    """Runs cmd (a list); its stdout as text. Every call is bounded."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE if capture else None,
                           stderr=subprocess.PIPE if capture else None, timeout=timeout,
                           env=env, text=True)
    except subprocess.TimeoutExpired:
        raise Fail("%s: no answer in %d s" % (" ".join(cmd), timeout))
    if check and p.returncode != 0:
        raise Fail("%s: exit %d: %s" % (" ".join(cmd), p.returncode,
                                         (p.stderr or "").strip()[-500:]))
    return p.stdout or ""


# ---- the cluster ----------------------------------------------------------------------------

class Cluster:
    def __init__(self, d, args):
        self.dir = d
        self.args = args
        self.env = None
        self.marker = None
        self.ns = {}
        self.conf = None

    def start(self):
        # The epilog a site needs with Slurm 22.05's PMIx plugin: a slurmstepd that ended
        # abnormally (its peer's node vanished mid-launch, a stop signal during the PMIx
        # fence) leaves its socket stepd.slurm.pmix.JOB.STEP in the spool directory, and the
        # requeued job (same id, step 0 again) then fails to launch on that node with
        # "Cannot bind() UNIX socket ... Address already in use" - and srun exits 0. Slurm
        # runs the epilog on every node when the job ends or is requeued, after its steps.
        os.makedirs(self.dir, exist_ok=True)
        real = os.path.realpath(self.dir)
        # the spelling the cluster's slurm.conf uses (contrib/localcluster/cluster): a
        # directory with blanks or a long path is reached through /tmp/dptrain-lc.HASH
        run = real
        if re.search(r"\s", real) or len(real) > 48:
            crc = subprocess.run(["cksum"], input=real.encode(), stdout=subprocess.PIPE,
                                 check=True).stdout.split()[0]
            run = "/tmp/dptrain-lc.%08x" % int(crc)
        ep = os.path.join(run, "epilog.sh")
        with open(os.path.join(real, "epilog.sh"), "w") as f:
            f.write("#!/bin/sh\n# remove the PMIx sockets and directories the job's "
                    "slurmstepds left\nd=%s/spool/$SLURMD_NODENAME\nt=%s/tmp/$SLURMD_NODENAME\n"
                    "for s in $d/stepd.slurm.pmix.$SLURM_JOB_ID.* $d/pmix.$SLURM_JOB_ID.* "
                    "$t/spmix_appdir_*_$SLURM_JOB_ID.*; do\n"
                    "\t[ -e \"$s\" ] || continue\n"
                    "\trm -rf \"$s\" && echo \"$(date +%%s) $SLURMD_NODENAME $s\" >>%s\n"
                    "done\nexit 0\n" % (run, run, os.path.join(run, "epilog.log")))
        os.chmod(os.path.join(real, "epilog.sh"), 0o755)
        cmd = [CLUSTER, "start", "-d", self.dir, "-N", "2", "-c", "2", "--netns", "-t", "60",
               "--conf", "Epilog=" + ep,
               "--conf", "SlurmdTimeout=%d" % self.args.slurmd_timeout,
               "--conf", "KillWait=2", "--conf", "MessageTimeout=5"]
        sh(cmd, timeout=180)
        self.dir = os.path.realpath(self.dir)
        self.marker = "DPTRAIN_LOCALCLUSTER=" + self.dir
        env = dict(os.environ)
        with open(os.path.join(self.dir, "env.sh")) as f:
            for line in f:
                m = re.match(r"export (\w+)='([^']*)'(:\"\$PATH\")?$", line.strip())
                if m:
                    env[m.group(1)] = m.group(2) + (":" + env["PATH"] if m.group(3) else "")
        self.env = env
        self.conf = env["SLURM_CONF"]
        with open(os.path.join(self.dir, "run", "netns")) as f:
            for name in f.read().split():
                self.ns[name.rsplit("-", 1)[1]] = name

    def stop(self):
        if self.env is None and not os.path.isdir(self.dir):
            return
        sh([CLUSTER, "stop", "-d", self.dir, "-t", "30"], check=False, timeout=240)

    def slurm(self, *cmd, check=True, timeout=30):
        return sh(list(cmd), check=check, timeout=timeout, env=self.env)

    def nodes_idle(self):
        out = self.slurm("sinfo", "-h", "-N", "-o", "%N %T", check=False, timeout=15)
        states = dict(l.split() for l in out.splitlines() if len(l.split()) == 2)
        return len(states) == 2 and all(s == "idle" for s in states.values())

    def node_down(self, node):
        out = self.slurm("sinfo", "-h", "-n", node, "-o", "%T", check=False, timeout=15)
        return out.strip().startswith("down")

    def job_state(self, jid):
        out = self.slurm("squeue", "-h", "-j", str(jid), "-o", "%T %r", check=False,
                         timeout=15).split()
        # a job that ended stays listed for MinJobAge: it counts as gone
        if not out or out[0] not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING",
                                     "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED"):
            return None, ""
        return out[0], out[1] if len(out) > 1 else ""

    # processes of this cluster, by what their environment says (never by name)
    def env_of(self, pid):
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                items = f.read().split(b"\0")
        except OSError:
            return None
        e = {}
        for it in items:
            k, _, v = it.partition(b"=")
            e[k.decode(errors="replace")] = v.decode(errors="replace")
        return e

    def tasks(self, jid=None, node=None):
        """{pid: env} of this cluster's job processes (tasks, batch scripts)."""
        r = {}
        for p in os.listdir("/proc"):
            if not p.isdigit() or int(p) == os.getpid():
                continue
            e = self.env_of(int(p))
            if not e or e.get("SLURM_CONF") not in (self.conf,) or "SLURMD_NODENAME" not in e:
                continue
            if jid is not None and e.get("SLURM_JOB_ID") != str(jid):
                continue
            if node is not None and e.get("SLURMD_NODENAME") != node:
                continue
            r[int(p)] = e
        return r

    def ranks(self, jid):
        """{rank: (pid, node)} of the job's running dptrain processes."""
        r = {}
        for pid, e in self.tasks(jid).items():
            try:
                exe = os.path.basename(os.readlink("/proc/%d/exe" % pid))
            except OSError:
                continue
            if exe == "dptrain" and "SLURM_PROCID" in e and "SLURM_STEPID" in e:
                r[int(e["SLURM_PROCID"])] = (pid, e["SLURMD_NODENAME"])
        return r

    def job_sruns(self, jid):
        """The srun processes of job jid's batch scripts (the nodes are namespaces of this
        machine, so they are processes here): their environment names the job."""
        pids = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/comm" % d) as f:
                    if f.read().strip() != "srun":
                        continue
                with open("/proc/%s/environ" % d, "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue
            if ("SLURM_JOB_ID=%d" % jid).encode() in env and \
                    ("SLURM_CONF=%s" % self.conf).encode() in env:
                pids.append(int(d))
        return pids

    def slurmd_pid(self, node):
        try:
            with open(os.path.join(self.dir, "run", "slurmd.%s.pid" % node)) as f:
                pid = int(f.read().strip())
        except (OSError, ValueError):
            return None
        e = self.env_of(pid)
        return pid if e and e.get("DPTRAIN_LOCALCLUSTER") == self.dir else None

    def stepd_pids(self, node):
        """The slurmstepds of node: they keep the node's slurmd log open."""
        want = os.path.join(self.dir, "log", "slurmd.%s.log" % node)
        r = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                if open("/proc/%s/comm" % p).read().strip() != "slurmstepd":
                    continue
                fds = os.listdir("/proc/%s/fd" % p)
            except OSError:
                continue
            for fd in fds:
                try:
                    if os.readlink("/proc/%s/fd/%s" % (p, fd)) == want:
                        r.append(int(p))
                        break
                except OSError:
                    pass
        return r

    def kill_node(self, node):
        pids = set(self.stepd_pids(node)) | set(self.tasks(node=node))
        sd = self.slurmd_pid(node)
        if sd:
            pids.add(sd)
        # all at once, as a machine stops: frozen first, so that no slurmstepd reports a
        # task's death before it dies itself
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for p in pids:
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass
        return sorted(pids)

    def start_slurmd(self, node):
        """The node comes back, as after a reboot. Slurm's PMIx plugin leaves the socket of
        a killed slurmstepd (stepd.slurm.pmix.JOB.STEP) in the node's spool directory, and a
        requeued job, with the same id, that lands there again cannot launch its step until
        it is gone ("Cannot bind() UNIX socket ... Address already in use")."""
        if self.slurmd_pid(node):
            return
        spool = os.path.join(self.dir, "spool", node)
        for s in glob.glob(os.path.join(spool, "stepd.slurm.pmix.*")):
            os.unlink(s)
        for s in glob.glob(os.path.join(spool, "pmix.*")) + glob.glob(
                os.path.join(self.dir, "tmp", node, "spmix_appdir_*")):
            shutil.rmtree(s, ignore_errors=True)
        sh(["nsenter", "--net=/run/netns/" + self.ns[node], "env", self.marker, "slurmd", "-f",
            self.conf, "-N", node], timeout=30)

    def ip(self, node, *cmd):
        return sh(["ip", "-n", self.ns[node]] + list(cmd), timeout=15)

    def tc(self, node, *cmd, check=True):
        return sh(["nsenter", "--net=/run/netns/" + self.ns[node], "tc"] + list(cmd),
                  timeout=15, check=check)


# ---- the job --------------------------------------------------------------------------------

JOB_SH = r"""#!/bin/bash
# One run of a chaos job: srun the trainer; on anything but success requeue the job (same id,
# same output directory: checkpoint.resume "auto" continues from the newest checkpoint), up to
# a bound, after which the job ends saying so and naming the last good checkpoint.
out=@OUT@
mark=@MARK@
echo "chaos: run ${SLURM_RESTART_COUNT:-0} of job $SLURM_JOB_ID on $SLURM_JOB_NODELIST"
# as contrib/examples/requeue.sbatch: a note left by a run whose job script never ended names
# the batch host it died with (nothing else of that run reaches this log)
if [ -f "$mark" ]; then
	echo "chaos: the run before this one ($(cat "$mark")) ended with its job script unfinished: that node failed or was rebooted and Slurm requeued the job"
fi
echo "restart ${SLURM_RESTART_COUNT:-0} of job $SLURM_JOB_ID on batch host $SLURMD_NODENAME" >"$mark"
trap 'rm -f "$mark"' EXIT
rm -f "$out/model.safetensors"
# as contrib/examples/requeue.sbatch: srun still running @STUCK@ s after the trainer's last
# metrics event (end or stop) lost a task's exit (finding 7) and is ended; the run counts as
# what the event says (the harness's own unstick is the fallback, STUCK_S)
seen=0
[ -f "$out/metrics.jsonl" ] && seen=$(wc -l <"$out/metrics.jsonl")
srun dptrain &
srun_pid=$!
last='' since='' rc=''
while kill -0 "$srun_pid" 2>/dev/null; do
	if [ -z "$last" ]; then
		last=$(tail -n "+$((seen + 1))" "$out/metrics.jsonl" 2>/dev/null | grep -o '"event": *"\(end\|stop\)"' | tail -1 | grep -o 'end\|stop')
		[ -n "$last" ] && since=$SECONDS
	elif [ $((SECONDS - since)) -ge @STUCK@ ]; then
		echo "chaos: srun still runs @STUCK@ s after the trainer's last event ($last): its tasks ended but Slurm did not hear; ending srun" >&2
		kill -KILL "$srun_pid" 2>/dev/null
		wait "$srun_pid"
		[ "$last" = stop ] && rc=4 || rc=0
		break
	fi
	sleep 1
done
if [ -z "$rc" ]; then
	wait "$srun_pid"
	rc=$?
fi
echo "chaos: run ${SLURM_RESTART_COUNT:-0}: srun exit $rc"
# srun exits 0 when no task could be launched at all: only the trainer's final weights say
# that training ended
[ "$rc" -eq 0 ] && [ -f "$out/model.safetensors" ] && exit 0
[ "$rc" -eq 0 ] && rc=1 && echo "chaos: srun exited 0 but the trainer did not finish (no $out/model.safetensors)" >&2
last=$(cat "$out/checkpoints/latest" 2>/dev/null)
if [ "${SLURM_RESTART_COUNT:-0}" -ge @MAXRESTARTS@ ]; then
	echo "chaos: giving up after ${SLURM_RESTART_COUNT:-0} restarts; the last good checkpoint is ${last:+$out/checkpoints/$last}${last:-none}" >&2
	exit "$rc"
fi
echo "chaos: requeueing job $SLURM_JOB_ID (last checkpoint: ${last:-none})"
scontrol requeue "$SLURM_JOB_ID" || echo "chaos: scontrol requeue failed" >&2
exit "$rc"
"""


def job_config(args, out):
    return {
        "seed": args.train_seed,
        "model": {"name": args.model, "num_classes": 10, "input_shape": [1, 28, 28]},
        "data": {"format": "idx", "dir": FMNIST, "batch_size": 32, "drop_remainder": True,
                 "transforms": {"normalize": {"mean": [0.286], "std": [0.353]}}},
        "optimizer": {"name": "momentum", "lr": 0.05, "momentum": 0.9,
                      "weight_decay": 0.0001},
        "train": {"epochs": 0, "max_steps": args.steps, "log_every": 1, "threads": 1},
        "checkpoint": {"every_steps": args.every, "keep": 3},
        "timeouts": {"collective_s": args.collective_s, "rendezvous_s": 60,
                     "shutdown_s": 15},
        "output": {"dir": out},
    }


TIMING_KEYS = ("img_per_s", "comm_wait_ms", "data_wait_ms", "step_ms", "compute_ms", "eta_s", "time")


def read_metrics(path):
    """The train events that count, in order: a run that resumed from step S supersedes the
    earlier runs' steps after S. Returns (steps, starts, duplicates): steps[i] is the event of
    global step i+1 without its timing fields; duplicates counts steps that appear twice
    within one run (never allowed)."""
    runs = []
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            if d["event"] == "start":
                runs.append([])
            elif d["event"] == "train":
                if not runs:
                    runs.append([])
                runs[-1].append(d)
    kept = {}
    dup = 0
    for r in runs:
        if not r:
            continue
        first = r[0]["global_step"]
        for s in [s for s in kept if s >= first]:
            del kept[s]
        seen = set()
        for d in r:
            g = d["global_step"]
            if g in seen:
                dup += 1
            seen.add(g)
            kept[g] = {k: v for k, v in d.items() if k not in TIMING_KEYS}
    return [kept[s] for s in sorted(kept)], len(runs), dup


def verify_checkpoint(d):
    """A step-N directory: state.json lists every file with its size and CRC32."""
    with open(os.path.join(d, "state.json")) as f:
        st = json.load(f)
    for name, meta in st["files"].items():
        with open(os.path.join(d, name), "rb") as f:
            b = f.read()
        if len(b) != meta["bytes"] or zlib.crc32(b) != meta["crc32"]:
            raise Fail("%s/%s: size or CRC32 differs from state.json" % (d, name))
    return st


def parse_runs(logtext):
    """The runs of a job, from its log: [{resumed, last, exit, lines}]."""
    runs = []
    for line in logtext.splitlines():
        m = re.match(r"chaos: run (\d+) of job", line)
        if m:
            runs.append({"resumed": None, "exit": None, "lines": []})
            continue
        if not runs:
            continue
        r = runs[-1]
        r["lines"].append(line)
        m = re.search(r"resuming from .*: step (\d+),", line)
        if m:
            r["resumed"] = int(m.group(1))
        m = re.match(r"chaos: run \d+: srun exit (\d+)", line)
        if m:
            r["exit"] = int(m.group(1))
    # the global step reached: the step lines after the resume point. A run that never
    # reached the trainer's first step (a launch that failed, a fault during the resume)
    # trained nothing: it is "idle" and leaves the count where it was.
    for r in runs:
        n = sum(1 for l in r["lines"] if re.match(r"epoch: \d+ step: \d+, ", l))
        r["steps"] = n
        if r["resumed"] is None and n:
            r["resumed"] = 0
        r["reached"] = (r["resumed"] or 0) + n
    return runs


def metrics_runs(path):
    """The runs metrics.jsonl saw, in order: [(resumed_from_step, highest global step)]."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                if d.get("event") == "start":
                    out.append([d.get("resumed_from_step", 0), None])
                elif d.get("event") == "train" and out:
                    g = d.get("global_step", 0)
                    out[-1][1] = g if out[-1][1] is None else max(out[-1][1], g)
    except OSError:
        pass
    return [tuple(x) for x in out]


def steps_lost(runs, mruns, every):
    """Steps lost at each resume: what the run before it had reached, less where it resumed.
    A run's step lines reach the log through its node's slurmstepd; when a fault kills that
    first, rank 0 trains on (and may checkpoint) unseen until it is killed too, so the log
    can show fewer steps than the run did. When the log says a run resumed past where the
    one before it got, metrics.jsonl (which rank 0 writes straight to the output directory)
    must show that run reaching the step: a run that started from the same step and got at
    least as far. Returns (lost, complaints)."""
    lost, bad = [], []
    prev = None
    for cur in runs:
        if cur["resumed"] is None:
            continue  # it trained nothing
        if prev is not None:
            reached = prev["reached"]
            if reached < cur["resumed"]:
                seen = [m for f, m in mruns if f == prev["resumed"] and m is not None and
                        reached < cur["resumed"] <= m]
                if seen:
                    reached = seen[0]
            n = reached - cur["resumed"]
            lost.append(n)
            if n < 0 or n > every:
                bad.append("run resumed from step %d after reaching step %d: %d steps "
                           "lost, not within the %d since a checkpoint" %
                           (cur["resumed"], reached, n, every))
        prev = cur
    return lost, bad


class Job:
    def __init__(self, h, idx, faults):
        self.h = h
        self.idx = idx
        self.plan = faults
        self.out = os.path.join(h.outfs, "job%d" % idx)
        self.logf = os.path.join(h.dir, "job%d.log" % idx)
        self.jid = None
        self.events = []

    def logtext(self):
        try:
            with open(self.logf, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def progress(self):
        """(runs started, global step reached in the newest run)."""
        runs = parse_runs(self.logtext())
        if not runs:
            return 0, 0
        return len(runs), runs[-1]["reached"]

    def submit(self):
        h = self.h
        cfg = os.path.join(h.dir, "job%d.json" % self.idx)
        with open(cfg, "w") as f:
            json.dump(job_config(h.args, self.out), f)
        script = os.path.join(h.dir, "job%d.sh" % self.idx)
        with open(script, "w") as f:
            f.write(JOB_SH.replace("@OUT@", shlex.quote(self.out)).replace(
                "@MAXRESTARTS@", str(3 * len(self.plan) + 10)).replace(
                "@MARK@", shlex.quote(os.path.join(h.dir, "job%d.running" % self.idx))).replace(
                "@STUCK@", str(JOB_STUCK_S)))
        os.chmod(script, 0o755)
        self.jid = int(h.cl.slurm("sbatch", "--parsable", "-J", "chaos%d" % self.idx, "-N2",
                                  "-n4", "--ntasks-per-node=2", "--requeue",
                                  "--open-mode=append", "-o", self.logf,
                                  "--dptrain=" + cfg, script).strip().split(";")[0])
        log("job %d: Slurm job %d, %d faults planned" % (self.idx, self.jid, len(self.plan)))


# ---- the harness ----------------------------------------------------------------------------

class Harness:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.dir = os.path.realpath(args.dir)
        self.cl = Cluster(os.path.join(self.dir, "cluster"), args)
        self.outfs = os.path.join(self.dir, "out")
        self.mounted = False
        self.active = []  # restorations due: (time, fn, what)
        self.records = []
        self.failures = []
        self.srun_hangs = []  # jobs whose srun outlived a finished trainer (finding 7)
        self.deadline = T0 + args.time_limit
        self.shm_before = set(os.listdir("/dev/shm"))
        self.idle_since = None
        self.ran = []

    # -- bookkeeping
    def left(self):
        return self.deadline - time.monotonic()

    def check_time(self):
        if time.monotonic() > self.deadline:
            raise Fail("the time limit (%d s) is spent" % self.args.time_limit)

    def tick(self):
        """Called in every wait: the restorations that are due, and the release of a
        requeued job once nothing is broken any more."""
        t = now()
        due = [a for a in self.active if a[0] <= t and (len(a) < 4 or a[3]() or
                                                         t > a[0] + self.args.wait_s)]
        self.active = [a for a in self.active if a not in due]
        for _, fn, what, *_ in due:
            fn()
            log("restored: %s" % what)
        self.check_time()

    def release(self, job):
        """A requeued job waits for its BeginTime; as an admin would, start it once both
        nodes are idle and the clock has passed the second in which that was seen (a
        relaunch in the same second as the node's revocation of the last run is refused)."""
        st, reason = self.cl.job_state(job.jid)
        if st != "PENDING" or self.active or not self.cl.nodes_idle():
            self.idle_since = None
            return False
        # a node that has just come back registers its state in more than one message:
        # both nodes idle for a few seconds first
        if self.idle_since is None:
            self.idle_since = now()
        if now() - self.idle_since < 5:
            return False
        # a slurmstepd of the last run that is still there (stuck in PMIx after its peer
        # vanished) holds the step's PMIx socket: the next launch of the same step id on
        # that node would fail. Wait for it, as the node's own cleanup does.
        if self.cl.stepd_pids("n1") or self.cl.stepd_pids("n2"):
            if job.stepd_seen is None:
                job.stepd_seen = now()
            if now() - job.stepd_seen > self.args.wait_s:
                raise Fail("a slurmstepd of job %d outlived the job by %d s" %
                           (job.jid, self.args.wait_s))
            return False
        job.stepd_seen = None
        t = time.time()
        time.sleep(max(0.0, int(t) + 1.05 - t))
        self.cl.slurm("scontrol", "update", "JobId=%d" % job.jid, "StartTime=now",
                      check=False)
        return True

    def wait(self, cond, secs, what, job=None):
        end = time.monotonic() + secs
        while True:
            self.tick()
            if job is not None and self.release_due(job):
                pass
            if job is not None:
                self.unstick(job)
            v = cond()
            if v:
                return v
            if time.monotonic() > end:
                raise Fail("timed out after %d s waiting for %s" % (secs, what))
            time.sleep(0.05)

    def inject_all(self, job, f, fault, n_before, at_before):
        """The faults of one event, injected; their record, or None if none landed. The
        record's log position is taken before the first injection: a run can end during it
        (a link taken down fails a collective at once), and what it printed as it ended is
        what says why (finding 9)."""
        t_fault = now()
        log_at = len(job.logtext())
        done = []
        for kind in f["kinds"]:
            what, cause = self.inject(job, kind, f)
            if what:
                done.append({"kind": kind, "what": what, "cause": cause})
                log("job %d fault %d: %s (at step %d, run %d)" %
                    (job.jid, fault, what, at_before, n_before))
        if not done:
            return None
        return {"job": job.idx, "jid": job.jid, "fault": fault, "at": f["at"],
                "kinds": [d["kind"] for d in done], "what": [d["what"] for d in done],
                "causes": [d["cause"] for d in done], "t": t_fault, "step": at_before,
                "run": n_before, "log_at": log_at}

    def unstick(self, job):
        """doc/reliability.md, finding 7: a link lost as the tasks exit can lose a task's exit
        message (slurmstepd: "Failed to send MESSAGE_TASK_EXIT: Network is unreachable"; it
        tells slurmctld the step is complete but never sends the exits again), and srun then
        waits for that task for good though the trainer finished and its weights are
        written. STUCK_S after the newest run printed its done line with srun still there,
        the job's srun is killed (the step is already gone from Slurm), as an operator would;
        the job script then goes on as after any failed run."""
        runs = parse_runs(job.logtext())
        r = runs[-1] if runs else None
        if not r or r["exit"] is not None or not any(
                l.startswith("dptrain: done: ") for l in r["lines"]):
            job.done_seen = None
            return
        if getattr(job, "done_seen", None) is None:
            job.done_seen = now()
            return
        if now() - job.done_seen < STUCK_S or getattr(job, "unstuck", None) == len(runs):
            return
        job.unstuck = len(runs)
        pids = self.cl.job_sruns(job.jid)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.srun_hangs.append(job.jid)
        log("job %d: run %d printed its done line %.0f s ago and srun has not returned "
            "(a task's exit message lost with a link: finding 7): srun killed (pid %s)" %
            (job.jid, len(runs), now() - job.done_seen,
             " ".join(map(str, pids)) or "none found"))

    def release_due(self, job):
        st, _ = self.cl.job_state(job.jid)
        if st != "PENDING" or self.active or not self.cl.nodes_idle():
            self.idle_since = None
        if st == "PENDING" and not self.active:
            if job.pending_since is None:
                job.pending_since = now()
                job.last_requeue = now()
            return self.release(job)
        if st != "PENDING":
            job.pending_since = None
        return False

    # -- setup and teardown
    def setup(self):
        a = self.args
        if os.path.exists(self.dir) and os.listdir(self.dir):
            raise Fail("%s exists and is not empty" % self.dir)
        os.makedirs(self.outfs, exist_ok=True)
        sh(["mount", "-t", "tmpfs", "-o", "size=%dm" % a.tmpfs_mb, "chaos", self.outfs])
        self.mounted = True
        log("output file system: a %d MiB tmpfs on %s" % (a.tmpfs_mb, self.outfs))
        self.cl.start()
        log("cluster: 2 nodes in network namespaces %s" % " ".join(sorted(self.cl.ns.values())))

    def teardown(self):
        """Stops everything this run started; what is left is a failure."""
        for _, fn, what, *_ in self.active:
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - teardown goes on
                log("restoring %s: %s" % (what, e))
        self.active = []
        ns = dict(self.cl.ns)
        self.cl.stop()
        left = []
        if self.mounted and self.args.keep:
            for d in glob.glob(os.path.join(self.outfs, "job*")):
                shutil.copytree(d, os.path.join(self.dir, "kept", os.path.basename(d)),
                                symlinks=True)
        if self.mounted:
            if sh(["umount", self.outfs], check=False) != "" or os.path.ismount(self.outfs):
                left.append("mount %s" % self.outfs)
            self.mounted = False
        for n in ns.values():
            if os.path.exists("/run/netns/" + n):
                left.append("network namespace " + n)
        pids = sh([CLUSTER, "pids", "-d", self.cl.dir], check=False).split()
        if pids:
            left.append("processes " + " ".join(pids))
        if self.cl.tasks():
            left.append("job processes %s" % sorted(self.cl.tasks()))
        new_shm = set(os.listdir("/dev/shm")) - self.shm_before
        ours = [s for s in new_shm if "dptrain" in s or "chaos" in s]
        if ours:
            left.append("shared memory " + " ".join(sorted(ours)))
        mounts = open("/proc/mounts").read()
        if " %s " % self.outfs in mounts or " %s/" % self.dir in mounts:
            left.append("a mount under " + self.dir)
        return left

    # -- faults
    def plan(self, n):
        """n faults: single kinds by weight, some at the moment a requeued run starts, some
        two at once."""
        kinds = [k for k in SINGLE if k in self.args.kinds]
        w = [WEIGHTS[k] for k in kinds]
        out = []
        for _ in range(n):
            r = self.rng.random()
            if r < self.args.p_double and len(kinds) > 1:
                out.append({"kinds": self.rng.sample(kinds, 2), "at": "step"})
            elif r < self.args.p_double + self.args.p_resume:
                res = [k for k in kinds if k in ("term", "usr1", "kill-rank", "node-fail",
                                                 "link-long", "disk-full")] or kinds
                out.append({"kinds": [self.rng.choice(res)], "at": "resume"})
            else:
                out.append({"kinds": self.rng.choices(kinds, w)[0:1], "at": "step"})
            for f in [out[-1]]:
                f["node"] = self.rng.choice(["n1", "n2"])
                f["rank"] = self.rng.randrange(4)
                f["dur"] = self.rng.uniform(0.3, 1.0)
                f["delay"] = self.rng.randrange(1, 2 * self.args.every + 1)
                f["jitter"] = self.rng.uniform(0.0, 0.6)
        return out

    def inject(self, job, kind, f):
        """Does one fault; returns (description, expected cause regex or None)."""
        cl = self.cl
        node, rank = f["node"], f["rank"]
        a = self.args
        if kind in ("term", "usr1"):
            cl.slurm("scancel", "--signal=" + kind.upper(), str(job.jid), check=False)
            return "scancel --signal=%s job %d" % (kind.upper(), job.jid), CAUSE[kind]
        if kind == "kill-rank":
            ranks = cl.ranks(job.jid)
            if rank not in ranks:
                if not ranks:
                    return None, None
                rank = sorted(ranks)[rank % len(ranks)]
            pid, node = ranks[rank]
            os.kill(pid, signal.SIGKILL)
            return ("SIGKILL rank %d (pid %d) on %s" % (rank, pid, node),
                    CAUSE[kind].format(rank=rank, node=node))
        if kind == "node-fail":
            pids = cl.kill_node(node)
            # the node stays dead until Slurm has noticed (SlurmdTimeout): a node back within
            # seconds is one that was never seen to fail, which real nodes do not do
            down = 2 + f["dur"] * 6
            self.active.append((now() + down, lambda: cl.start_slurmd(node),
                                "%s's slurmd started again" % node,
                                lambda: cl.node_down(node)))
            return ("node %s fails: SIGKILL of slurmd, slurmstepds and tasks (%d processes); "
                    "back once Slurm marks it down" % (node, len(pids)),
                    CAUSE[kind].format(node=node))
        if kind in ("link-short", "link-long"):
            if kind == "link-short":
                down = 0.3 + f["dur"] * min(2.0, a.collective_s / 3)
            else:
                down = a.collective_s + 2 + f["dur"] * 4
            cl.ip(node, "link", "set", "eth0", "down")
            self.active.append((now() + down,
                                lambda: cl.ip(node, "link", "set", "eth0", "up"),
                                "%s's eth0 up" % node))
            return ("%s's eth0 down for %.1f s" % (node, down),
                    CAUSE[kind].format(node=node) if kind == "link-long" else None)
        if kind == "slow":
            dur = 2 + f["dur"] * 4
            cl.tc(node, "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "40mbit",
                  "burst", "32kbit", "latency", "20ms")
            self.active.append((now() + dur,
                                lambda: cl.tc(node, "qdisc", "del", "dev", "eth0", "root",
                                              check=False),
                                "%s's tbf removed" % node))
            return ("%s's eth0 behind tbf 40mbit, 20 ms queue, for %.1f s" % (node, dur), None)
        if kind == "disk-full":
            dur = 0.5 + f["dur"] * 1.5
            filler = os.path.join(self.outfs, "filler.%d" % len(self.records))
            fill(filler)
            self.active.append((now() + dur, lambda: os.unlink(filler),
                                "%s removed" % filler))
            return ("%s full for %.1f s" % (self.outfs, dur), CAUSE[kind])
        raise Fail("unknown fault " + kind)

    def run_job(self, job):
        a = self.args
        job.pending_since = None
        job.last_requeue = None
        job.stepd_seen = None
        job.submit()
        for i, f in enumerate(job.plan):
            if self.left() < a.reserve_s:
                log("job %d: %d s left: no more faults, the job runs to its end" %
                    (job.jid, self.left()))
                break
            runs0, _ = job.progress()
            # the moment: a step some way past the newest one, or the start of a resumed run
            if f["at"] == "resume":
                # a resumed run: the next one, or one forced by a SIGTERM
                got = self.wait(moment_or_ended(self, job, runs0), a.wait_s,
                                "a new run of job %d" % job.jid, job)
            else:
                n0, at0 = job.progress()
                target = at0 + f["delay"]

                def moment(target=target):
                    st, _ = self.cl.job_state(job.jid)
                    if st is None:
                        return "gone"
                    n, at = job.progress()
                    return "ok" if st == "RUNNING" and at >= target else None
                got = self.wait(moment, a.wait_s, "job %d to reach step %d" % (job.jid, target),
                                job)
            if got == "gone":
                log("job %d ended before fault %d could land" % (job.jid, i + 1))
                break
            time.sleep(f["jitter"])
            n_before, at_before = job.progress()
            job.last_requeue = None
            rec = self.inject_all(job, f, i + 1, n_before, at_before)
            if not rec:
                continue
            self.records.append(rec)
            # the run ends (or the fault passes): wait until everything is restored and the
            # job is running again or done
            def ended():
                st, _ = self.cl.job_state(job.jid)
                if st != "RUNNING":
                    return True
                text = job.logtext()[rec["log_at"]:]
                return re.search(r"chaos: run \d+: srun exit", text) is not None
            # a fault meant to end the run gets time to do so; one the job may ride out
            # (a short link loss, a slow link, a full disk between checkpoints) only until
            # it is undone
            ending = set(rec["kinds"]) & {"term", "usr1", "kill-rank", "node-fail",
                                          "link-long"}
            endwait = max((x[0] for x in self.active), default=now()) - now() + (
                a.collective_s + 8 if ending else 1)
            t_end = None
            try:
                self.wait(ended, endwait, "", job)
                t_end = now()
            except Fail:
                if time.monotonic() > self.deadline:
                    raise
            rec["ended_run"] = t_end is not None
            rec["t_end"] = t_end
            self.wait(lambda: not self.active, a.wait_s, "restorations", job)
            if t_end is not None:
                def again():
                    st, _ = self.cl.job_state(job.jid)
                    if st is None:
                        return "gone"
                    n, at = job.progress()
                    runs = parse_runs(job.logtext())
                    if n > n_before and runs and any(
                            re.match(r"epoch: \d+ step: ", l) for l in runs[-1]["lines"]):
                        return "ok"
                    return None
                got = self.wait(again, a.wait_s, "job %d to run again" % job.jid, job)
                rec["t_first_step"] = now() if got == "ok" else None
                rec["t_requeued"] = job.last_requeue
        # no more faults: the job runs to its end
        self.wait(lambda: self.cl.job_state(job.jid)[0] is None, a.wait_s * 4,
                  "job %d to finish" % job.jid, job)

    def reference(self):
        """The same config, never interrupted: srun on the same two nodes."""
        out = os.path.join(self.outfs, "ref")
        cfg = os.path.join(self.dir, "ref.json")
        with open(cfg, "w") as f:
            json.dump(job_config(self.args, out), f)
        t = now()
        text = self.cl.slurm("srun", "-N2", "-n4", "--ntasks-per-node=2", "--dptrain=" + cfg,
                             "dptrain", timeout=self.args.wait_s * 4)
        with open(os.path.join(self.dir, "ref.log"), "w") as f:
            f.write(text)
        log("reference run: %d steps in %.1f s" % (self.args.steps, now() - t))
        # keep it off the small file system the disk-full faults fill
        keep = os.path.join(self.dir, "ref")
        os.makedirs(keep)
        shutil.copy(os.path.join(out, "metrics.jsonl"), keep)
        shutil.copy(os.path.join(out, "model.safetensors"), keep)
        shutil.rmtree(out)
        return keep

    def clear_out(self, job):
        """A checked job's output leaves the small output file system (to kept/ with --keep):
        a long run's finished jobs (about 3 MB each) would otherwise fill it, and every later
        run would fail to launch on "No space left on device" (seed 1255776828, job 22)."""
        if not os.path.isdir(job.out):
            return
        if self.args.keep:
            shutil.copytree(job.out, os.path.join(self.dir, "kept", os.path.basename(job.out)),
                            symlinks=True)
        shutil.rmtree(job.out)

    def ctld_log(self):
        try:
            with open(os.path.join(self.cl.dir, "log", "slurmctld.log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    # -- the checker
    def check(self, job, ref):
        a = self.args
        bad = []
        text = job.logtext()
        if not re.search(r"dptrain: done: %d steps" % a.steps, text):
            bad.append("the job did not finish its %d steps" % a.steps)
        try:
            with open(os.path.join(ref, "model.safetensors"), "rb") as f1, \
                    open(os.path.join(job.out, "model.safetensors"), "rb") as f2:
                if f1.read() != f2.read():
                    bad.append("final weights differ from the uninterrupted run's")
        except OSError as e:
            bad.append("final weights: %s" % e)
        try:
            mine, starts, dup = read_metrics(os.path.join(job.out, "metrics.jsonl"))
            theirs, _, _ = read_metrics(os.path.join(ref, "metrics.jsonl"))
            if dup:
                bad.append("%d steps counted twice within one run" % dup)
            if len(mine) != len(theirs):
                have = {d["global_step"] for d in mine}
                miss = [s for s in range(1, a.steps + 1) if s not in have]
                bad.append("metrics: %d train steps, the reference has %d (missing %s)" %
                           (len(mine), len(theirs), miss[:10]))
            for x, y in zip(mine, theirs):
                if x != y:
                    bad.append("metrics of step %d differ: %s vs %s" % (y["global_step"], x, y))
                    break
            job.starts = starts
        except (OSError, ValueError, KeyError) as e:
            bad.append("metrics: %s" % e)
        # steps lost per fault: what the run before a resume had reached, less where the
        # resume started; never more than the steps since the last checkpoint
        runs = parse_runs(text)
        job.lost, why = steps_lost(runs, metrics_runs(os.path.join(job.out, "metrics.jsonl")),
                                   a.every)
        bad += why
        job.runs = len(runs)
        # every checkpoint verifies; nothing half-written is left
        ck = os.path.join(job.out, "checkpoints")
        for e in sorted(os.listdir(ck)) if os.path.isdir(ck) else []:
            p = os.path.join(ck, e)
            if re.fullmatch(r"step-\d+", e):
                try:
                    verify_checkpoint(p)
                except (Fail, OSError, ValueError, KeyError) as x:
                    bad.append("checkpoint %s does not verify: %s" % (e, x))
            elif e != "latest":
                bad.append("left in %s: %s" % (ck, e))
        # the output directory's lock is free
        lock = os.path.join(job.out, ".dptrain.lock")
        if os.path.exists(lock):
            if subprocess.run(["flock", "-n", lock, "true"], timeout=10).returncode != 0:
                bad.append("%s is still locked" % lock)
        # each fault that ended a run is named in the log, after it
        for r in self.records:
            if r["job"] != job.idx:
                continue
            seg = text[r["log_at"]:]
            nxt = re.search(r"chaos: run \d+ of job", seg)
            if nxt:
                # up to the next run, and what that run says of this one's end (its job
                # script's first words; other lines may come before them)
                after = seg[nxt.end():]
                nxt2 = re.search(r"chaos: run \d+ of job", after)
                said = re.search(r"^chaos: the run before this one.*$",
                                 after[:nxt2.start()] if nxt2 else after, re.M)
                seg = seg[:nxt.start()] + (said.group(0) + "\n" if said else "")
            if ended_by_finishing(r, seg, a.steps):
                r["ended_run"] = False
            named = []
            for cause in r["causes"]:
                if cause and re.search(cause, seg, re.M):
                    named.append(cause)
            r["named"] = bool(named) or not any(r["causes"])
            if (not named and "node-fail" in r["kinds"] and
                    re.search(r"Requeuing JobId=%d" % job.jid, self.ctld_log())):
                # the batch host itself failed and the next run's job script did not say so
                # (seen with Slurm 24.11: its batch script may outlive the node's slurmstepd
                # and end as after any run); Slurm says so, and requeues the job
                r["named"] = "slurmctld"
                named = ["slurmctld"]
            if r.get("ended_run") and any(r["causes"]) and not named:
                ended_by = re.findall(r"^(?:dptrain|srun|slurmstepd).*(?:error|died|killed|"
                                      r"stopp|timed out).*$", seg, re.M)
                r["named_other"] = ended_by[:3]
                if not ended_by:
                    bad.append("fault %d (%s) ended run %d and the log does not say why" %
                               (r["fault"], "; ".join(r["what"]), r["run"]))
        return bad


def ended_by_finishing(r, seg, steps):
    """A fault r that landed as the job's last step was done, seen in seg (the job's log from
    the fault to the next run): the run it hit ended by finishing, not by the fault, and its
    log need not name the fault (doc/reliability.md, finding 5)."""
    return r["step"] >= steps or bool(
        re.search(r"^dptrain: done: \d+ steps", seg, re.M) and
        re.search(r"^chaos: run \d+: srun exit 0$", seg, re.M))


def moment_or_ended(h, job, runs0):
    """For a fault during a resume: a run newer than runs0 that is running."""
    def cond():
        st, _ = h.cl.job_state(job.jid)
        if st is None:
            return "gone"
        n, at = job.progress()
        runs = parse_runs(job.logtext())
        if n > runs0 and st == "RUNNING" and runs[-1]["resumed"] is not None:
            return "ok"  # the trainer is resuming: it has read its checkpoint
        if n == runs0 and st == "RUNNING":
            # force a resume: stop the current run with SIGTERM once, then wait for the next
            if not getattr(job, "forced", None) == runs0:
                job.forced = runs0
                h.cl.slurm("scancel", "--signal=TERM", str(job.jid), check=False)
                log("job %d: SIGTERM to get a resume to fault" % job.jid)
        return None
    return cond


def fill(path):
    """Writes path until the file system is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        block = b"\0" * (1 << 20)
        while True:
            try:
                if os.write(fd, block) <= 0:
                    break
            except OSError:
                break
        small = b"\0" * 4096
        while True:
            try:
                if os.write(fd, small) <= 0:
                    break
            except OSError:
                break
    finally:
        os.close(fd)


def summary(h, jobs, started):
    recs = h.records
    lost = [x for j in jobs for x in getattr(j, "lost", [])]
    to_end = [r["t_end"] - r["t"] for r in recs if r.get("t_end") is not None]
    to_step = [r["t_first_step"] - r["t_requeued"] for r in recs
               if r.get("t_first_step") is not None and r.get("t_requeued") is not None]
    kinds = {}
    for r in recs:
        for k in r["kinds"]:
            kinds[k] = kinds.get(k, 0) + 1

    def stat(v):
        return {"n": len(v), "mean": round(sum(v) / len(v), 2) if v else None,
                "max": round(max(v), 2) if v else None}
    return {
        "seed": h.args.seed, "faults": sum(len(r["kinds"]) for r in recs),
        "fault_events": len(recs),
        "double": sum(1 for r in recs if len(r["kinds"]) > 1),
        "during_resume": sum(1 for r in recs if r["at"] == "resume"),
        "kinds": kinds, "jobs": len(jobs), "resumes": sum(getattr(j, "runs", 1) - 1 for j in jobs),
        "runs_ended_by_faults": sum(1 for r in recs if r.get("ended_run")),
        "steps_lost_per_resume": stat(lost),
        "seconds_fault_to_run_end": stat(to_end),
        "seconds_requeue_to_first_step": stat(to_step),
        "steps_per_job": h.args.steps, "checkpoint_every": h.args.every,
        "seconds": round(time.monotonic() - started, 1),
        "checker_failures": h.failures,
        "srun_hangs_after_done": len(h.srun_hangs),
        "srun_hangs_ended_by_job_script": sum(
            j.logtext().count("Slurm did not hear") for j in jobs),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=None, help="the run's seed (default: random)")
    ap.add_argument("--faults", type=int, default=10, help="faults in all (default 10)")
    ap.add_argument("--jobs", type=int, default=1, help="jobs the faults are spread over")
    ap.add_argument("--steps", type=int, default=400, help="training steps per job")
    ap.add_argument("--every", type=int, default=20, help="checkpoint.every_steps")
    ap.add_argument("--model", default="lenet", choices=["lenet", "mlp"])
    ap.add_argument("--train-seed", type=int, default=11, help="the job config's seed")
    ap.add_argument("--kinds", default=",".join(SINGLE),
                    help="fault kinds to draw from (default: all): " + ", ".join(SINGLE))
    ap.add_argument("--p-double", type=float, default=0.15, help="share of two faults at once")
    ap.add_argument("--p-resume", type=float, default=0.15,
                    help="share of faults at the start of a resumed run")
    ap.add_argument("--collective-s", type=int, default=6, help="timeouts.collective_s")
    ap.add_argument("--slurmd-timeout", type=int, default=20, help="slurm.conf SlurmdTimeout")
    ap.add_argument("--tmpfs-mb", type=int, default=64, help="the output tmpfs's size")
    ap.add_argument("--wait-s", type=int, default=120, help="the limit of every wait")
    ap.add_argument("--time-limit", type=int, default=3600,
                    help="the whole run's limit (s); faults stop --reserve-s before it")
    ap.add_argument("--reserve-s", type=int, default=240,
                    help="time kept for the last job to finish without faults")
    ap.add_argument("--dir", default=None, help="work directory (default: a new one in /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--report", default=None, help="write the figures as JSON here")
    a = ap.parse_args()
    if a.seed is None:
        a.seed = int.from_bytes(os.urandom(4), "little")
    a.kinds = [k.strip() for k in a.kinds.split(",") if k.strip()]
    for k in a.kinds:
        if k not in SINGLE:
            ap.error("unknown fault kind '%s' (one of %s)" % (k, ", ".join(SINGLE)))
    # a fault waits for 1..2 checkpoint intervals of steps: a job takes about steps / (2 *
    # every) of them before it ends; more faults get more jobs
    cap = max(1, a.steps // (2 * a.every))
    a.jobs = max(a.jobs, -(-a.faults // cap))
    if os.geteuid() != 0:
        ap.error("must run as root (Slurm daemons, network namespaces, a tmpfs)")
    if a.dir is None:
        import tempfile
        a.dir = tempfile.mkdtemp(prefix="dptrain-chaos.", dir="/tmp")
    print("chaos: seed %d (rerun: contrib/chaos/chaos.py --seed %d --faults %d --jobs %d "
          "--steps %d --every %d)" % (a.seed, a.seed, a.faults, a.jobs, a.steps, a.every),
          flush=True)
    if not os.environ.get("DPTRAIN_BUILD_DIR"):
        os.environ["DPTRAIN_BUILD_DIR"] = os.path.join(SRC, "build")
    for prog in ("ip", "nsenter", "tc", "mount", "flock"):
        if not shutil.which(prog):
            print("chaos: '%s' is not installed (Debian: iproute2 util-linux mount)" % prog,
                  file=sys.stderr)
            return 2
    h = Harness(a)
    started = time.monotonic()
    rc = 0
    jobs = []
    # an interrupt (SIGTERM from a time limit, ^C) still runs the teardown
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        h.setup()
        ref = h.reference()
        per = [a.faults // a.jobs + (1 if i < a.faults % a.jobs else 0) for i in range(a.jobs)]
        for i in range(a.jobs):
            jobs.append(Job(h, i + 1, h.plan(per[i])))
        for j in jobs:
            if h.ran and h.left() < 2 * a.reserve_s:
                log("%d s left: jobs %d-%d are not run" % (h.left(), j.idx, len(jobs)))
                break
            h.run_job(j)
            h.ran.append(j)
            bad = h.check(j, ref)
            if bad:
                rc = 1
                for b in bad:
                    log("CHECKER FAILURE job %d (Slurm %d): %s" % (j.idx, j.jid, b))
                h.failures.append({"seed": a.seed, "job": j.idx, "why": bad})
            else:
                log("job %d: passed the checker: %d runs, steps lost %s" %
                    (j.idx, j.runs, j.lost))
            h.clear_out(j)
        if not h.ran:
            raise Fail("no job ran")
    except Fail as e:
        log("FAILED: %s" % e)
        h.failures.append({"seed": a.seed, "why": [str(e)]})
        rc = 1
    except KeyboardInterrupt:
        log("interrupted")
        rc = 1
    finally:
        left = h.teardown()
        if left:
            log("CHECKER FAILURE: left behind: %s" % "; ".join(left))
            h.failures.append({"seed": a.seed, "why": ["left behind: " + "; ".join(left)]})
            rc = 1
    s = summary(h, h.ran, started)
    s["records"] = h.records
    if a.report:
        with open(a.report, "w") as f:
            json.dump(s, f, indent=1)
    brief = {k: v for k, v in s.items() if k != "records"}
    print("chaos: " + json.dumps(brief), flush=True)
    if rc == 0 and not a.keep:
        shutil.rmtree(a.dir, ignore_errors=True)
    else:
        print("chaos: work directory kept: %s" % a.dir, flush=True)
    print("chaos: %s (seed %d)" % ("PASS" if rc == 0 else "FAIL", a.seed), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
