#!/bin/sh
test_description='seeing a training job: where its outputs go, the loss and progress lines (to a
file, a pipe, a terminal), --quiet and output.progress, and metrics.jsonl schema 2 (time on
every line, the start, train, ranks, checkpoint and stop events) from one rank and from 3'
. "$(dirname "$0")/sharness.sh"

PY=/usr/bin/python3

cat >job.json <<EOF
{"seed": 1, "model": {"name": "mlp", "num_classes": 10, "input_shape": [1, 8, 8], "hidden": [32]},
 "data": {"format": "synthetic", "train": {"size": 1536}, "batch_size": 32, "workers": 1},
 "optimizer": {"name": "sgd", "lr": 0.01},
 "train": {"epochs": 1, "log_every": 8, "threads": 1}, "device": {"kind": "cpu"}}
EOF

# progress_ok FILE STEPS EVERY: FILE has, after each loss line, rank 0's progress line for the
# same global step ("dptrain: step N/STEPS (P%), epoch 1/1, elapsed H:MM:SS, ETA H:MM:SS"), the
# last at STEPS with ETA 0:00:00, and no carriage return
progress_ok() {
	$PY - "$@" <<-\EOF
	import re, sys
	text = open(sys.argv[1], "rb").read().decode()
	total, every = int(sys.argv[2]), int(sys.argv[3])
	if "\r" in text:
	    sys.exit("a carriage return in a file")
	lines = text.splitlines()
	loss = [i for i, l in enumerate(lines) if re.match(r"epoch: 1 step: \d+, loss is ", l)]
	prog = [i for i, l in enumerate(lines) if l.startswith("dptrain: step ")]
	want = list(range(every, total + 1, every))
	if len(loss) != len(want) or [i + 1 for i in loss] != prog:
	    sys.exit(f"{len(loss)} loss lines, {len(prog)} progress lines, not one after each of {len(want)}")
	for i, s in zip(prog, want):
	    m = re.fullmatch(r"dptrain: step (\d+)/(\d+) \((\d+\.\d)%\), epoch 1/1, "
	                     r"elapsed (\d+:\d\d:\d\d), ETA (\d+:\d\d:\d\d)", lines[i])
	    if not m or int(m[1]) != s or int(m[2]) != total or abs(float(m[3]) - 100 * s / total) > 0.06:
	        sys.exit(f"bad progress line for step {s}: {lines[i]!r}")
	if not lines[prog[-1]].endswith("ETA 0:00:00"):
	    sys.exit("the last progress line has an ETA: " + lines[prog[-1]])
	print(f"{len(prog)} loss lines, each followed by its progress line")
	EOF
}

test_expect_success 'to a file: the first line says where the outputs go' '
	dptrain job.json output.dir=f >f.out 2>f.err &&
	cat f.out &&
	test "$(head -n 1 f.out)" = "dptrain: output in $PWD/f: metrics $PWD/f/metrics.jsonl, report $PWD/f/report.html"
'

test_expect_success 'to a file: a loss line and a progress line with the total and an ETA per report' '
	progress_ok f.out 48 8 &&
	grep -c "^epoch: 1 step: [0-9]*, loss is [0-9.]*, lr 0.01, [0-9.]* img/s$" f.out >n &&
	test "$(cat n)" = 6
'

test_expect_success 'to a pipe: the same lines' '
	dptrain job.json output.dir=p 2>p.err | cat >p.out &&
	progress_ok p.out 48 8
'

test_expect_success '--quiet and output.progress=off: no loss nor progress lines; the metrics still have them' '
	dptrain --quiet job.json output.dir=q >q.out 2>q.err &&
	dptrain job.json output.dir=o output.progress=off >o.out 2>o.err &&
	cat q.out &&
	for f in q.out o.out; do
		! grep "loss is" $f && ! grep "^dptrain: step" $f &&
		grep "^dptrain: output in " $f && grep "^dptrain: done: 48 steps" $f || return 1
	done &&
	test $(grep -c "\"event\":\"train\"" q/metrics.jsonl) = 6 &&
	dptrain -q --check job.json >check.json &&
	grep "\"progress\": \"off\"" check.json
'

if script -qec true /dev/null >/dev/null 2>&1; then
	test_set_prereq SCRIPT
fi

test_expect_success SCRIPT 'on a terminal (script): one line redrawn in place with step/total and ETA' '
	script -qec "dptrain job.json output.dir=t train.log_every=2" /dev/null >t.out 2>&1 &&
	cat -A t.out | head -c 600 && echo &&
	$PY - t.out <<-\EOF
	import re, sys
	text = open(sys.argv[1], "rb").read().decode()
	draws = re.findall(r"\r(epoch: 1 step: (\d+), loss is [^\r\n]*? \| (\d+)/48 \d+% ETA \d+:\d\d:\d\d)\x1b\[K", text)
	steps = [int(d[2]) for d in draws]
	if steps != list(range(2, 49, 2)) or any(int(d[1]) != int(d[2]) for d in draws):
	    sys.exit(f"redrawn steps {steps}")
	if "dptrain: step " in text:
	    sys.exit("a progress line on a terminal")
	# the redrawn line ends (a newline) once, after the last step, before the next line
	if not re.search(r"\| 48/48 100% ETA 0:00:00\x1b\[K\r?\ndptrain: done: 48 steps", text):
	    sys.exit("the last redraw is not ended before the final line")
	print(f"{len(draws)} redraws")
	EOF
'

test_expect_success SCRIPT 'on a terminal with output.progress=lines: plain lines' '
	script -qec "dptrain job.json output.dir=tl output.progress=lines" /dev/null >tl.out 2>&1 &&
	tr -d "\r" <tl.out >tl.txt &&
	progress_ok tl.txt 48 8
'

# schema FILE WORLD: metrics.jsonl schema 2, read by python
schema() {
	$PY - "$@" <<-\EOF
	import json, os, sys
	path, world = sys.argv[1], int(sys.argv[2])
	ev = [json.loads(l) for l in open(path)]
	times = [e["time"] for e in ev]
	assert all(isinstance(t, float) and t > 1.5e9 for t in times), "a time missing"
	assert times == sorted(times), "times go back"
	start = ev[0]
	assert start["event"] == "start" and start["schema"] == 2, start
	assert start["resumed_from_step"] == 0 and start["world_size"] == world, start
	assert start["output_dir"] == os.path.dirname(os.path.abspath(path)), start
	assert start["hosts"] == 1 and start["backend"] == "cpu", start
	train = [e for e in ev if e["event"] == "train"]
	ranks = [e for e in ev if e["event"] == "ranks"]
	assert len(train) == len(ranks) == start["total_steps"] // start["log_every"], (len(train), len(ranks))
	node = (os.environ.get("SLURMD_NODENAME") or os.uname().nodename).split(".")[0]
	for t, r in zip(train, ranks):
	    assert ev.index(r) == ev.index(t) + 1 and r["global_step"] == t["global_step"], "ranks after train"
	    for k in ("step_ms", "compute_ms", "data_wait_ms", "comm_wait_ms"):
	        assert t[k] >= 0, (k, t)
	    parts = t["compute_ms"] + t["data_wait_ms"] + t["comm_wait_ms"]
	    assert abs(parts - t["step_ms"]) <= 1e-3 + 1e-3 * t["step_ms"], t
	    rs = r["ranks"]
	    assert [x["rank"] for x in rs] == list(range(world)), "each rank once, in order"
	    for x in rs:
	        assert x["gpu"] == -1 and x["device_mib"] == 0 and x["node"] == node, x
	        parts = x["compute_ms"] + x["data_wait_ms"] + x["comm_wait_ms"]
	        assert x["step_ms"] > 0 and abs(parts - x["step_ms"]) <= 1e-3 + 1e-3 * x["step_ms"], x
	        assert x["img_per_s"] > 0, x
	    assert rs[0]["step_ms"] == t["step_ms"] and rs[0]["comm_wait_ms"] == t["comm_wait_ms"], "rank 0 is the train event's"
	    if world > 1:
	        assert sum(x["comm_wait_ms"] for x in rs) > 0, "no rank waited for the others"
	etas = [t["eta_s"] for t in train]
	assert etas[-1] == 0 and all(e >= 0 for e in etas), etas
	ck = [e for e in ev if e["event"] == "checkpoint"]
	assert ck and ck[-1]["global_step"] == start["total_steps"], ck
	assert os.path.isdir(ck[-1]["path"]), ck[-1]["path"]
	assert ev[-1]["event"] == "end", ev[-1]
	print(f"{len(ev)} lines: {len(train)} train and ranks events of {world} rank(s), {len(ck)} checkpoint(s)")
	EOF
}

test_expect_success 'metrics schema 2 of one rank: time, start, train, ranks, checkpoint' '
	schema f/metrics.jsonl 1 &&
	SLURM_JOB_ID=4711 SLURM_RESTART_COUNT=2 dptrain job.json output.dir=j train.max_steps=8 >j.out &&
	head -n 1 j/metrics.jsonl >start &&
	grep "\"job\":\"4711\",\"restart_count\":2," start
'

test_expect_success 'an output directory with a quote, a backslash and a blank in its name: still JSON' '
	dptrain job.json "output.dir=we\"ird\\ dir" train.max_steps=8 >w.out 2>&1 &&
	$PY -c "import json, os, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
assert ev[0][\"output_dir\"] == os.path.abspath(sys.argv[2]), ev[0]
assert [e for e in ev if e[\"event\"] == \"checkpoint\"][0][\"path\"].startswith(ev[0][\"output_dir\"] + \"/\")
print(ev[0][\"output_dir\"])" "we\"ird\\ dir/metrics.jsonl" "we\"ird\\ dir"
'

test_expect_success LAUNCH 'metrics schema 2 of 3 ranks: one ranks event per report, every rank once' '
	dptrain-run -n 3 -o r3 job.json dptrain job.json >r3.out 2>&1 &&
	cat r3.out &&
	schema r3/metrics.jsonl 3 &&
	progress_ok r3/device0/train.log 16 8 &&
	! grep "^dptrain: step" r3/device1/train.log &&
	test $(grep -c "loss is" r3/device1/train.log) = 2
'

test_expect_success LAUNCH 'train.straggler_window=1 (every report judged alone) runs' '
	dptrain-run -n 2 -o w1 job.json dptrain job.json train.straggler_window=1 >w1.out 2>&1 &&
	grep "^dptrain: done: 24 steps" w1.out
'

test_expect_success 'stopped on SIGTERM: a stop event after its checkpoint event; the next run says where it resumed' '
	dptrain job.json output.dir=s train.epochs=1000 train.log_every=1 >s.out 2>s.err &
	pid=$! &&
	i=0 && while ! grep -q "loss is" s.out && test $i -lt 600; do sleep 0.1; i=$((i + 1)); done &&
	kill -TERM $pid &&
	{ wait $pid; rc=$?; } && test $rc = 4 &&
	$PY - s/metrics.jsonl <<-\EOF &&
	import json, sys
	ev = [json.loads(l) for l in open(sys.argv[1])]
	stop = ev[-1]
	assert stop["event"] == "stop" and stop["signal"] == "SIGTERM", stop
	ck = ev[-2]
	assert ck["event"] == "checkpoint" and ck["global_step"] == stop["global_step"], ck
	print("stopped at", stop["global_step"])
	EOF
	at=$(tail -n 1 s/metrics.jsonl | sed "s/.*\"global_step\":\([0-9]*\).*/\1/") &&
	dptrain job.json output.dir=s train.epochs=1000 train.max_steps=$((at + 2)) >s2.out 2>&1 &&
	grep "\"event\":\"start\".*\"resumed_from_step\":$at," s/metrics.jsonl
'

test_expect_success 'bad output.progress and straggler keys: an error naming the key' '
	test_expect_code 1 dptrain job.json output.progress=loud 2>e1 &&
	grep "output.progress: expected one of \"auto\", \"lines\", \"off\", got \"loud\"" e1 &&
	test_expect_code 1 dptrain job.json train.straggler_threshold=1 2>e2 &&
	grep "train.straggler_threshold: expected a number in (1, 1000\], got 1" e2 &&
	test_expect_code 1 dptrain job.json train.straggler_window=-1 2>e3 &&
	grep "train.straggler_window" e3
'

test_done
