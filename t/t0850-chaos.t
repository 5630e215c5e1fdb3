#!/bin/sh
# t0850-chaos.t — the short version of contrib/chaos (make chaos runs the long one): a
# 2-node x 2-rank sbatch --requeue job of LeNet on Fashion-MNIST, on a local cluster whose
# nodes live in their own network namespaces, is hit by six fault events drawn from a fixed
# seed (a stop signal, a killed rank, a failed node that comes back, a link down, a slowed
# link, a full output file system, a fault during a resume, two at once); the checker then
# wants the final weights and every step's metrics bit-identical to an uninterrupted run of
# the same config (the trainer is deterministic: t0800-ckpt.t proves resume = uninterrupted
# bit for bit for 1 and 2 ranks), no step counted twice, at most checkpoint.every_steps steps
# recomputed per resume, every checkpoint verifying, and nothing left behind (processes,
# namespaces, mounts, shared memory, a held lock). The second test shows the checker's parts
# fail on a doctored result. Owns its trash directory, its cluster and its namespaces.

test_description='chaos: many faults, one requeued job, the weights of an uninterrupted run'

. "$(dirname "$0")/sharness.sh"

dp_need_cluster FMNIST
for p in ip nsenter tc mount flock; do
	command -v $p >/dev/null 2>&1 || { skip_all="needs $p (iproute2, util-linux)"; test_done; }
done
chaos="$DPTRAIN_SRC_DIR/contrib/chaos/chaos.py"

test_expect_success 'six fault events (seed 169): the job ends as if never interrupted' '
	{ /usr/bin/python3 "$chaos" --seed 169 --faults 6 --steps 500 --slurmd-timeout 12 --dir "$PWD/run" \
		--time-limit 600 --keep --report report.json >out 2>&1; rc=$?; } ;
	cat out && test $rc = 0 &&
	grep "PASS (seed 169)" out &&
	grep "passed the checker" out &&
	dp_json report.json "d[\"fault_events\"] == 6 and not d[\"checker_failures\"]" >ok &&
	test "$(cat ok)" = True
'

test_expect_success 'the checker fails a doctored run: weights, metrics, checkpoints' '
	cat >doctor.py <<-\EOF &&
	import importlib.util, json, os, shutil, sys
	spec = importlib.util.spec_from_file_location("chaos", sys.argv[1])
	c = importlib.util.module_from_spec(spec)
	spec.loader.exec_module(c)
	job = sys.argv[2]
	steps, runs, dup = c.read_metrics(job + "/metrics.jsonl")
	assert len(steps) == 500 and dup == 0, (len(steps), dup)
	# a step counted twice within one run, and a changed loss, are both seen
	lines = open(job + "/metrics.jsonl").read().splitlines()
	train = [l for l in lines if "\"event\":\"train\"" in l]
	# (right after itself, inside its run: the last run may have trained nothing, when it
	# resumed from the checkpoint of the last step)
	i = lines.index(train[-1])
	open("dup.jsonl", "w").write("\n".join(lines[:i + 1] + [train[-1]] + lines[i + 1:]) + "\n")
	assert c.read_metrics("dup.jsonl")[2] == 1
	d = json.loads(train[5]); d["loss"] = d["loss"] * (1 + 2 ** -20)
	open("bad.jsonl", "w").write("\n".join(lines[:1] + [json.dumps(d)]) + "\n")
	assert c.read_metrics("bad.jsonl")[0][0] != steps[d["global_step"] - 1]
	# a flipped byte in a checkpoint
	ck = sorted(e for e in os.listdir(job + "/checkpoints") if e.startswith("step-"))[-1]
	shutil.copytree(job + "/checkpoints/" + ck, "ck")
	c.verify_checkpoint("ck")
	with open("ck/model.safetensors", "r+b") as f:
	    f.seek(200); b = f.read(1); f.seek(200); f.write(bytes([b[0] ^ 1]))
	try:
	    c.verify_checkpoint("ck")
	    sys.exit("a flipped byte verified")
	except c.Fail as e:
	    print("caught:", e)
	# finding 5: a fault that lands as the last step is done ends no run (the run finished),
	# one that lands before does
	done = "dptrain: done: 500 steps, 1 epoch in 80.0 s\nchaos: run 2: srun exit 0\n"
	died = "dptrain: rank 1: allreduce: rank 2 (n2) died\nchaos: run 1: srun exit 3\n"
	assert c.ended_by_finishing({"step": 499}, done, 500)
	assert c.ended_by_finishing({"step": 500}, "", 500)
	assert not c.ended_by_finishing({"step": 250}, died, 500)
	assert not c.ended_by_finishing({"step": 499}, done.replace("exit 0", "exit 4"), 500)
	print("finding 5: a fault at the end is not a run ended")
	# a node fault that kills slurmstepd before rank 0: the log lost the line of step 60, the
	# checkpoint of step 60 was written and metrics.jsonl recorded the step
	log = "chaos: run 1 of job 1\n" + "".join(
	    "epoch: 1 step: %d, loss is 1.0, lr 0.05, 9.0 img/s\n" % s for s in range(1, 60)) + \
	    "chaos: run 2 of job 1\ndptrain: resuming from x: step 60, epoch 1\n" + \
	    "epoch: 1 step: 61, loss is 1.0, lr 0.05, 9.0 img/s\n"
	runs = c.parse_runs(log)
	with open("m.jsonl", "w") as f:
	    ev = [{"event": "start", "resumed_from_step": 0}] + \
	        [{"event": "train", "global_step": s} for s in range(1, 61)] + \
	        [{"event": "start", "resumed_from_step": 60}]
	    f.write("".join(json.dumps(e) + "\n" for e in ev))
	assert c.metrics_runs("m.jsonl") == [(0, 60), (60, None)]
	assert c.steps_lost(runs, c.metrics_runs("m.jsonl"), 20) == ([0], [])
	lost, why = c.steps_lost(runs, [], 20)
	assert lost == [-1] and "resumed from step 60 after reaching step 59" in why[0], why
	lost, why = c.steps_lost(runs, [(0, 58), (60, None)], 20)
	assert why, "a run that got to 58 cannot give a checkpoint of step 60"
	runs = c.parse_runs(log.replace("step 60,", "step 30,"))
	lost, why = c.steps_lost(runs, c.metrics_runs("m.jsonl"), 20)
	assert lost == [29] and why, "29 steps lost with a checkpoint every 20 passed"
	print("a run seen to step 59 that checkpointed step 60 loses no steps")
	# finding 7: srun still there STUCK_S after the done line is killed, once
	import subprocess
	class Cl:
	    calls = []
	    def job_sruns(self, jid):
	        self.calls.append(jid)
	        return [self.stand_in.pid]
	class J:
	    jid = 6
	    text = "chaos: run 1 of job 6\nepoch: 1 step: 1, loss is 1.0\n"
	    def logtext(self):
	        return self.text
	h = type("H", (), {"cl": Cl(), "srun_hangs": []})()
	h.cl.stand_in = subprocess.Popen(["sleep", "600"])
	j = J()
	c.Harness.unstick(h, j)
	assert j.done_seen is None and not h.cl.calls, "no done line: nothing to do"
	j.text += "dptrain: done: 500 steps, 1 epoch in 1.0 s\n"
	c.Harness.unstick(h, j)
	assert j.done_seen is not None and not h.cl.calls, "the done line starts the clock"
	j.done_seen -= c.STUCK_S + 1
	c.Harness.unstick(h, j)
	assert h.cl.stand_in.wait(timeout=30) == -9 and h.srun_hangs == [6], h.cl.calls
	c.Harness.unstick(h, j)
	assert h.cl.calls == [6], "once per run"
	j.text += "chaos: run 1: srun exit 137\n"
	c.Harness.unstick(h, j)
	assert j.done_seen is None
	print("finding 7: a srun that outlives a finished trainer is ended, once")
	# and by the job script itself, JOB_STUCK_S after the trainer s last metrics event
	import shlex, tempfile
	d = os.path.abspath(tempfile.mkdtemp(dir="."))
	out, bindir = os.path.join(d, "out"), os.path.join(d, "bin")
	os.makedirs(out), os.makedirs(bindir)
	with open(os.path.join(bindir, "srun"), "w") as f:
	    f.write("#!/bin/sh\n: >%s\n" % shlex.quote(out + "/model.safetensors") +
	            "echo {\\\"event\\\":\\\"end\\\"} >>%s\nexec sleep 600\n" %
	            shlex.quote(out + "/metrics.jsonl"))
	with open(os.path.join(bindir, "scontrol"), "w") as f:
	    f.write("#!/bin/sh\necho scontrol $* >>%s\n" % shlex.quote(d + "/calls"))
	for x in ("srun", "scontrol"):
	    os.chmod(os.path.join(bindir, x), 0o755)
	script = c.JOB_SH.replace("@OUT@", shlex.quote(out)).replace("@MARK@", shlex.quote(os.path.join(d, "mark"))).replace(
	    "@STUCK@", "2").replace("@MAXRESTARTS@", "3")
	r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120,
	                   env=dict(os.environ, PATH=bindir + ":" + os.environ["PATH"], SLURM_JOB_ID="6"))
	assert r.returncode == 0 and "Slurm did not hear" in r.stderr, (r.returncode, r.stdout, r.stderr)
	assert not os.path.exists(os.path.join(d, "calls")), "finished: not requeued"
	print("finding 7: the job script ends a srun that outlives the last metrics event")
	# finding 9: a run that ends during its fault s injection is read from before it
	class J9:
	    idx, jid = 3, 9
	    text = "chaos: run 1 of job 9\nepoch: 1 step: 96, loss is 1.0\n"
	    def logtext(self):
	        return self.text
	def inject(job, kind, f):
	    job.text += "slurmstepd-n1: error: *** STEP 9.0 ON n1 CANCELLED ***\nchaos: run 1: srun exit 3\n"
	    return "n1 eth0 down for 10.4 s", "rank \\d"
	h9 = type("H", (), {"inject": staticmethod(inject)})()
	j9 = J9()
	rec = c.Harness.inject_all(h9, j9, {"kinds": ["link-long"], "at": "step"}, 8, 1, 96)
	seg = j9.text[rec["log_at"]:]
	assert "STEP 9.0 ON n1 CANCELLED" in seg and "srun exit 3" in seg, rec
	assert rec["step"] == 96 and rec["run"] == 1 and rec["kinds"] == ["link-long"], rec
	print("finding 9: a run that ends during the injection is read from before it")
	EOF
	/usr/bin/python3 doctor.py "$chaos" run/kept/job1 2>&1 | tee doctor.out &&
	grep "caught: .*size or CRC32 differs" doctor.out &&
	grep "finding 5: a fault at the end is not a run ended" doctor.out &&
	grep "a run seen to step 59 that checkpointed step 60 loses no steps" doctor.out &&
	grep "finding 7: a srun that outlives a finished trainer is ended, once" doctor.out &&
	grep "finding 7: the job script ends a srun that outlives the last metrics event" doctor.out &&
	grep "finding 9: a run that ends during the injection is read from before it" doctor.out
'

test_done
