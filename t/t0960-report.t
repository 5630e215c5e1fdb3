#!/bin/sh
test_description='report.html: written by the trainer and by dptrain-report, drawn in a headless
chromium (the plotted values are metrics.jsonl'"'"'s, no network request, no script error, a
non-blank screenshot), strings escaped, and bad input (truncated, corrupt, empty, missing,
schema 1, no eval) said with a partial report or a clear failure'
. "$(dirname "$0")/sharness.sh"

PY=/usr/bin/python3

# Debian's chromium (make deps installs it); as root it runs only without its sandbox.
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if test -n "$CHROMIUM"; then
	test_set_prereq CHROMIUM
else
	say "# skipping the rendering checks: no chromium on PATH (Debian: chromium; make deps installs it)"
fi
"$PY" -c 'import PIL' 2>/dev/null && test_set_prereq PIL

# render PAGE OUT: OUT.dom (the DOM after the page's script ran), OUT.console (what the page
# said on its console: errors, Content-Security-Policy refusals), OUT.png (a screenshot).
render() {
	rm -rf "$2.profile" &&
	timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run \
		--user-data-dir="$PWD/$2.profile" --enable-logging=stderr --v=0 \
		--dump-dom "file://$PWD/$1" >"$2.dom" 2>"$2.log" &&
	timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run \
		--user-data-dir="$PWD/$2.profile" --hide-scrollbars --window-size=1200,2000 \
		--screenshot="$PWD/$2.png" "file://$PWD/$1" >/dev/null 2>&1 &&
	{ grep ":CONSOLE" "$2.log" >"$2.console" || true; } &&
	test -s "$2.dom" && test -s "$2.png"
}

# check_dom DOM METRICS: the curves drawn are metrics.jsonl's values (exactly: the page keeps
# what it plotted in data-x/data-y), the heat map's cells the ranks' step times, the markers
# its checkpoints, resumes, stops and stragglers.
cat >check_dom.py <<'EOF'
import json, sys
from html.parser import HTMLParser

class P(HTMLParser):
    def __init__(self):
        super().__init__()
        self.els = []
    def handle_starttag(self, tag, attrs):
        self.els.append((tag, dict(attrs)))

p = P()
p.feed(open(sys.argv[1], encoding="utf-8").read())
events = []
for line in open(sys.argv[2], encoding="utf-8"):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if isinstance(e, dict) and isinstance(e.get("event"), str):
        events.append(e)
bad = []
def same(what, got, want):
    if got != want:
        bad.append("%s: page %r, metrics.jsonl %r" % (what, got[:8], want[:8]))

body = [a for t, a in p.els if t == "body"]
if not body or body[0].get("data-rendered") != "1":
    bad.append("the page's script did not finish (no data-rendered on <body>)")
series = {a["data-series"]: a for t, a in p.els if t == "path" and "data-series" in a}
def values(name, axis):
    a = series.get(name)
    return [float(v) for v in a["data-" + axis].split()] if a else []
train = [e for e in events if e["event"] == "train"]
evals = [e for e in events if e["event"] == "eval"]
for name, key, src in (("loss", "loss", train), ("lr", "lr", train),
                       ("img_per_s", "img_per_s", train), ("accuracy", "accuracy", evals),
                       ("data_wait_ms", "data_wait_ms", train), ("step_ms", "step_ms", train)):
    want = [e for e in src if key in e]
    same(name + " x", values(name, "x"), [float(e["global_step"]) for e in want])
    same(name + " y", values(name, "y"), [float(e[key]) for e in want])
if not train or "loss" not in series:
    bad.append("no loss curve drawn")
# heat map: one cell per rank and ranks line, its step time
cells = {(int(a["data-step"]), int(a["data-rank"])): a["data-ms"]
         for t, a in p.els if t == "rect" and a.get("class") == "cell"}
want = {}
for e in events:
    if e["event"] == "ranks":
        for i, r in enumerate(e["ranks"]):
            want[(e["global_step"], r.get("rank", i))] = float(r["step_ms"])
same("heat map cells", sorted((k, float(v)) for k, v in cells.items()), sorted(want.items()))
# markers
got = sorted((a["class"].split()[1][7:], int(a["data-step"])) for t, a in p.els
             if "marker" in a.get("class", "").split())
kinds = {"checkpoint": "checkpoint", "stop": "stop", "straggler": "straggler"}
want = set()
starts = 0
last = None
for e in events:
    k = e["event"]
    if k in kinds:
        want.add((kinds[k], e["global_step"]))
    if k == "start":
        starts += 1
        if starts > 1 or e.get("resumed_from_step", 0) > 0:
            want.add(("resume", e.get("resumed_from_step", last)))
    if k == "end":
        want.add(("end", e["steps"]))
    if "global_step" in e:
        last = e["global_step"]
same("markers", sorted(set(got)), sorted(want))
for b in bad:
    print("check_dom: " + b)
sys.exit(1 if bad else 0)
EOF

# png_ok PNG: a PNG of the window's size with more than a few colours (not blank)
png_ok() {
	"$PY" -c '
import sys
from PIL import Image
im = Image.open(sys.argv[1])
n = len(im.convert("RGB").getcolors(1 << 24))
print("%s: %dx%d, %d colours" % (sys.argv[1], im.size[0], im.size[1], n))
sys.exit(0 if im.format == "PNG" and im.size == (1200, 2000) and n > 16 else 1)' "$1"
}

if test "$DPTRAIN_SAN" = 1; then
	epochs=2
else
	epochs=3
fi
# a small MLP on synthetic data: a few seconds a run (its description would break a page
# that did not escape it)
cat >mlp.json <<'EOF'
{
  "description": "report test </script><b>&amp;",
  "seed": 1,
  "model": {"name": "mlp", "num_classes": 10, "input_shape": [1, 28, 28], "hidden": [64]},
  "data": {"format": "synthetic", "train": {"size": 256}, "eval": {"size": 64},
           "batch_size": 32},
  "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
  "lr_schedule": {"name": "cosine"},
  "train": {"epochs": 1, "log_every": 2}
}
EOF

test_expect_success 'the trainer writes report.html at each evaluation and at the end' '
	dptrain mlp.json output.dir=run >out1 2>err1 &&
	test_must_be_empty err1 &&
	test -s run/report.html &&
	grep -c "\"event\":\"eval\"" run/metrics.jsonl >n && test "$(cat n)" = 1 &&
	grep "id=\"status\" class=\"status finished\"" run/report.html &&
	cp run/report.html first.html &&
	dptrain mlp.json output.dir=run train.epochs=$epochs >out2 2>err2 &&
	grep "dptrain: resuming from" out2 &&
	test $(grep -c "\"event\":\"start\"" run/metrics.jsonl) = 2 &&
	! test_cmp first.html run/report.html &&
	grep "As the trainer resolved it from .*/mlp.json and its overrides" run/report.html &&
	grep "report test &lt;/script&gt;&lt;b&gt;&amp;amp;" run/report.html &&
	grep "<div><dt>runs</dt><dd id=\"runs\">2 " run/report.html &&
	test_must_be_empty err2
'

test_expect_success CHROMIUM 'the trainer'"'"'s page draws its metrics: values, markers, no error' '
	cp run/report.html trained.html &&
	render trained.html trained &&
	"$PY" check_dom.py trained.dom run/metrics.jsonl &&
	test_must_be_empty trained.console
'

test_expect_success 'dptrain-report writes the same data from the output directory' '
	rm run/report.html &&
	dptrain-report --config mlp.json run 2>err &&
	test_must_be_empty err &&
	grep "<pre id=\"config\">" run/report.html &&
	grep "&quot;name&quot;: &quot;mlp&quot;" run/report.html &&
	grep "<p>mlp.json</p>" run/report.html &&
	grep "id=\"model\">mlp<" run/report.html
'

test_expect_success CHROMIUM 'the checker notices a value the page did not draw' '
	cp run/report.html cli.html &&
	render cli.html cli &&
	"$PY" check_dom.py cli.dom run/metrics.jsonl &&
	sed "0,/\"loss\":[0-9.e+-]*/s//\"loss\":12345/" run/metrics.jsonl >wrong.jsonl &&
	! "$PY" check_dom.py cli.dom wrong.jsonl >out &&
	grep "check_dom: loss y" out
'

# A run of the next schema (doc/dptrain-report.1): 4 ranks on 2 nodes, a straggler,
# checkpoints, a stop on SIGTERM and a resume; strings that would break a page unescaped.
cat >synth.py <<'EOF'
import json, sys
evil = "n1</script><img src=x onerror=document.title='pwned'>&amp;"
out = []
t = 1700000000.0
def line(**kw):
    global t
    t += 7.5
    kw["time"] = round(t, 3)
    out.append(json.dumps(kw))
line(event="start", schema=2, model="resnet18", parameters=11689512, world_size=4,
     steps_per_epoch=40, total_steps=80, resumed_from_step=0, job="4242", restart_count=0,
     output_dir="/x", hosts=2)
def train(step):
    slow = 3 if 20 <= step <= 30 else 1
    line(event="train", epoch=1 + step // 40, step=step % 40 or 40, global_step=step,
         loss=round(2.3 / (1 + step / 20), 6), lr=0.1, img_per_s=round(900.5 - step, 3),
         step_ms=120.25 * slow, compute_ms=100.5, data_wait_ms=4.25 * slow,
         comm_wait_ms=15.5, eta_s=100 - step)
    line(event="ranks", global_step=step, ranks=[
        {"rank": r, "node": evil if r < 2 else "n2", "gpu": r % 2,
         "step_ms": 120.25 * (slow if r == 3 else 1) + r, "compute_ms": 100.5,
         "data_wait_ms": 4.25, "comm_wait_ms": 15.5, "img_per_s": 225.0,
         "device_mib": 4096} for r in range(4)])
for s in range(5, 45, 5):
    train(s)
    if s == 25:
        line(event="straggler", global_step=25, rank=3, node="n2", gpu=1, slower=2.97,
             cause="data", step_ms=361.75, median_step_ms=121.75, window=20)
    if s % 20 == 0:
        line(event="checkpoint", global_step=s, path="/x/checkpoints/step-%d" % s)
line(event="eval", epoch=1, global_step=40, accuracy=0.5125, loss=1.5, correct=5125,
     count=10000)
line(event="checkpoint", global_step=42, path="/x/checkpoints/step-42")
line(event="stop", global_step=42, signal="SIGTERM")
line(event="start", schema=2, model="resnet18", parameters=11689512, world_size=4,
     steps_per_epoch=40, total_steps=80, resumed_from_step=42, job="4243", restart_count=1,
     output_dir="/x", hosts=2)
for s in range(45, 85, 5):
    train(s)
line(event="eval", epoch=2, global_step=80, accuracy=0.75, loss=0.9, correct=7500,
     count=10000)
line(event="checkpoint", global_step=80, path="/x/checkpoints/step-80")
line(event="end", steps=80, epochs=2, seconds=600.5, eval_accuracy=0.75, peak_device_mib=4096,
     skipped_steps=0, loss_scale=1)
sys.stdout.write("\n".join(out) + "\n")
EOF

cat >evil.json <<'EOF'
{"description": "</script><script>document.title=\"pwned\"</script> & <!-- <b>"}
EOF

test_expect_success 'a schema-2 run with 4 ranks, a straggler, a stop and a resume' '
	mkdir -p s2/device0 &&
	"$PY" synth.py >s2/metrics.jsonl &&
	sed "s|\"host\": \"gpu01\"|\"host\": \"gpu01</script><b>x\&amp;y\"|; s|\"job_id\": \"4242\"|\"job_id\": \"42<i>42\"|" \
		"$DPTRAIN_SRC_DIR/t/data/ranktable/dptrain_2x2.json" >s2/rank_table.json &&
	printf "HOME=/x\nDPTRAIN_CONFIG=%s\n" "$PWD/evil.json" >s2/device0/env.log &&
	dptrain-report s2 2>err &&
	test_must_be_empty err &&
	grep "id=\"status\" class=\"status finished\"" s2/report.html &&
	grep "id=\"steps\">80 of 80 (100%)" s2/report.html &&
	grep "id=\"best-acc\">0.7500 <small>at step 80" s2/report.html &&
	grep "<td>gpu01&lt;/script&gt;&lt;b&gt;x&amp;amp;y</td>" s2/report.html &&
	grep "&lt;/script&gt;&lt;script&gt;document.title" s2/report.html &&
	grep "<table id=\"stragglers\">" s2/report.html &&
	grep "<td>25</td>.*<td>3</td><td>n2</td><td>1</td><td>2.97x</td><td>data</td>" s2/report.html &&
	grep -c "<script" s2/report.html >n && test "$(cat n)" = 2 &&
	! grep "<img\|<b>x\|<i>42" s2/report.html
'

test_expect_success 'the page can make no network request: a CSP of default-src none, no URL' '
	grep "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src '"'"'none'"'"'; style-src '"'"'unsafe-inline'"'"'; script-src '"'"'unsafe-inline'"'"'; img-src data:;" s2/report.html &&
	grep -o "[a-z]*://[^\"'"'"' )<>]*" s2/report.html run/report.html | sed "s/^[^:]*://" | sort -u >urls &&
	echo "http://www.w3.org/2000/svg" >expect &&
	test_cmp expect urls
'

test_expect_success CHROMIUM 'the schema-2 page draws: curves, heat map, markers; strings stay text' '
	cp s2/report.html s2.html &&
	render s2.html s2 &&
	"$PY" check_dom.py s2.dom s2/metrics.jsonl &&
	test_must_be_empty s2.console &&
	! grep "<img\|<b>" s2.dom &&
	grep "<title>finished · resnet18 · s2</title>" s2.dom &&
	grep -c "class=\"cell\"" s2.dom >n && test "$(cat n)" -ge 1 &&
	"$PY" -c "
import sys, re
d = open(\"s2.dom\").read()
# the ranks named by their node, escaped as text
assert \"rank 0 n1&lt;/script&gt;&lt;img src=x onerror=document.title=\" in d, \"labels\"
assert re.search(r\"straggler at step 25: rank 3 on n2: 2.97x\", d), \"straggler title\"
"
'

test_expect_success CHROMIUM 'a page that fetches or throws is caught by the checks' '
	sed "s|</body>|<img src=\"http://127.0.0.1:9/x.png\"><script>throw new Error(\"boom\")</script></body>|" \
		s2.html >bad.html &&
	render bad.html bad &&
	grep "violates the following Content Security Policy directive" bad.console &&
	grep "Uncaught Error: boom" bad.console
'

test_expect_success CHROMIUM,PIL 'the screenshots are non-blank PNGs' '
	png_ok trained.png &&
	png_ok s2.png
'

test_expect_success 'a stopped run: status stopped, the signal and what to do' '
	mkdir -p st &&
	sed "/\"resumed_from_step\": 42/,\$d" s2/metrics.jsonl >st/metrics.jsonl &&
	dptrain-report -q st &&
	grep "id=\"status\" class=\"status stopped\">stopped (SIGTERM)</dd>" st/report.html &&
	grep "<p id=\"status-note\">Stopped on request at step 42: a checkpoint was written; submit the job again to resume.</p>" st/report.html &&
	grep "<p id=\"config-none\">No config found" st/report.html
'

# ---- bad input ----
test_expect_success 'a truncated last line: said with its line number, the rest reported' '
	mkdir -p tr &&
	cp run/metrics.jsonl tr/ &&
	n=$(($(wc -l <tr/metrics.jsonl) + 1)) &&
	printf "{\"event\":\"train\",\"epoch\":1,\"step\":9,\"glo" >>tr/metrics.jsonl &&
	dptrain-report tr 2>err &&
	echo "dptrain-report: warning: tr/metrics.jsonl:$n: the last line is incomplete (the run was stopped while writing it?): ignored" >expect &&
	test_cmp expect err &&
	grep "id=\"problems\"" tr/report.html &&
	grep "class=\"status finished\"" tr/report.html
'

test_expect_success 'a corrupt line in the middle: skipped and named, the others reported' '
	mkdir -p co &&
	sed "3s/.*/{\"event\":\"train\",\"loss\":nan}/; 5s/.*/[1,2]/" run/metrics.jsonl >co/metrics.jsonl &&
	dptrain-report co 2>err &&
	cat err &&
	grep "^dptrain-report: warning: co/metrics.jsonl:3: not JSON (.*, column [0-9]*): line skipped$" err &&
	grep "^dptrain-report: warning: co/metrics.jsonl:5: not an event (no \"event\" name): line skipped$" err &&
	test $(wc -l <err) = 2 &&
	grep "(.* lines, 2 skipped)" co/report.html
'

test_expect_success CHROMIUM 'the partial report draws the lines that were good' '
	cp co/report.html co.html &&
	render co.html co &&
	"$PY" check_dom.py co.dom co/metrics.jsonl &&
	test_must_be_empty co.console
'

test_expect_success 'an empty metrics.jsonl, none, or nothing but bad lines: exit 1, no page' '
	mkdir -p empty none junk &&
	: >empty/metrics.jsonl &&
	test_expect_code 1 dptrain-report empty 2>err &&
	echo "dptrain-report: empty/metrics.jsonl: empty: no event written yet (has the run started?); no report written" >expect &&
	test_cmp expect err &&
	test_expect_code 1 dptrain-report none 2>err &&
	grep "^dptrain-report: none/metrics.jsonl: no such file: not a dptrain output directory, or the run has not started (or has output.metrics false); no report written$" err &&
	printf "garbage\n\n{}\n" >junk/metrics.jsonl &&
	test_expect_code 1 dptrain-report junk 2>err &&
	grep "junk/metrics.jsonl:1: not JSON" err &&
	grep "junk/metrics.jsonl:3: not an event" err &&
	grep "^dptrain-report: junk/metrics.jsonl: none of its 3 lines is an event; no report written$" err &&
	! test -e empty/report.html && ! test -e none/report.html && ! test -e junk/report.html &&
	test_expect_code 1 dptrain-report /nonexistent-dir 2>err &&
	grep "/nonexistent-dir/metrics.jsonl: no such file" err
'

test_expect_success 'an older output directory (schema 1) with no eval and no rank table' '
	mkdir -p old &&
	"$PY" - run/metrics.jsonl >old/metrics.jsonl <<-\EOF &&
	# what a dptrain of schema 1 wrote: start, train and end lines with their fields of then,
	# no eval (this run had none)
	import json, sys
	keep = {"start": ["model", "parameters", "world_size", "steps_per_epoch", "total_steps"],
	        "train": ["epoch", "step", "global_step", "loss", "mean_loss", "rank0_loss", "lr",
	                  "img_per_s", "comm_wait_ms", "data_wait_ms", "loss_scale"],
	        "end": ["steps", "epochs", "seconds", "eval_accuracy", "peak_device_mib",
	                "skipped_steps", "loss_scale"]}
	for line in open(sys.argv[1]):
	    d = json.loads(line)
	    if d["event"] in keep:
	        print(json.dumps(dict([("event", d["event"])] + [(k, d[k]) for k in keep[d["event"]]])))
	EOF
	test -s old/metrics.jsonl &&
	! grep "\"time\"\|\"schema\"\|\"ranks\"\|\"eval\"" old/metrics.jsonl &&
	dptrain-report old 2>err &&
	test_must_be_empty err &&
	grep "id=\"best-acc\">&mdash; <small>(no evaluation yet)" old/report.html &&
	grep "No rank_table.json" old/report.html &&
	grep "No per-rank step times\|\"columns\":\[\]" old/report.html
'

test_expect_success CHROMIUM 'the schema-1 page without eval draws and says there is none' '
	cp old/report.html old.html &&
	render old.html old &&
	"$PY" check_dom.py old.dom old/metrics.jsonl &&
	grep "No evaluation in this run" old.dom &&
	test_must_be_empty old.console
'

test_expect_success 'a bad rank table is said, and the rest reported' '
	mkdir -p brt &&
	cp run/metrics.jsonl brt/ &&
	echo "{\"version\": " >brt/rank_table.json &&
	dptrain-report brt 2>err &&
	grep "^dptrain-report: warning: brt/rank_table.json: " err &&
	grep "class=\"bad\">brt/rank_table.json: " brt/report.html
'

test_expect_success 'usage errors: exit 2' '
	test_expect_code 2 dptrain-report 2>err &&
	grep "give the output directory" err &&
	test_expect_code 2 dptrain-report a b 2>err &&
	test_expect_code 2 dptrain-report --bogus run 2>err &&
	test_expect_code 2 dptrain-report --config /nonexistent.json run 2>err &&
	grep "^dptrain-report: --config: /nonexistent.json: cannot open: No such file or directory$" err &&
	dptrain-report --help >out && grep "Exit status" out &&
	dptrain-report --version >out && grep "^dptrain-report [0-9]" out
'

test_expect_success 'a page that cannot be written: exit 1, the file named' '
	test_expect_code 1 dptrain-report -o /nonexistent-dir/r.html run 2>err &&
	grep "^dptrain-report: /nonexistent-dir/r.html: .*; no report written$" err
'

test_expect_success 'the trainer: output.report false writes none; a failure is said once, training goes on' '
	dptrain mlp.json output.dir=off output.report=false train.epochs=2 >out 2>err &&
	test -s off/metrics.jsonl && ! test -e off/report.html &&
	mkdir -p blocked/report.html &&
	dptrain mlp.json output.dir=blocked train.epochs=2 >out 2>err &&
	cat err &&
	grep "dptrain: done: 16 steps" out &&
	test $(grep -c "report.html not written" err) = 1 &&
	grep "^dptrain: warning: report.html not written (.*blocked/report.html: .*); training goes on" err
'

test_done
