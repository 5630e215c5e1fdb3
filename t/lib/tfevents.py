#!/usr/bin/python3
"""tfevents.py — reads the TensorBoard event files of an output directory as TensorBoard would,
independently of the trainer's writer (trainer/tbevents.c): its own CRC-32C, and the Event and
Summary messages decoded by the Python classes protoc generated from t/data/tensorboard/*.proto
(Debian's python3-protobuf, protobuf-compiler). Used by t/t0920-tensorboard.t.

usage: tfevents.py PB_DIR check OUTDIR
           every file events.out.tfevents.* of OUTDIR, in name order: each record's length and
           both masked CRCs right, nothing after the last record, the first record the file
           version "brain.Event:2", the second a SessionLog START; then the scalars as
           TensorBoard shows them (a START after a run's first drops what came before at its
           step and after): each (tag, step) once, and equal, as float32, to the value of
           OUTDIR/metrics.jsonl's train or eval line of that step (the runs' lines, from each
           start line, after the same rule). Prints what it read.
       tfevents.py PB_DIR dump OUTDIR [--raw]
           "TAG STEP VALUE" lines of the scalars as TensorBoard shows them (--raw: every point
           in every file, before any START drops one), then "start FILE STEP" lines.
Exits 1 with a message on the first thing wrong.
"""
import glob
import json
import math
import os
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fail(msg):
    print("tfevents: " + msg, file=sys.stderr)
    sys.exit(1)


def records(path):
    data = open(path, "rb").read()
    at, out = 0, []
    while at < len(data):
        if len(data) - at < 12:
            fail("%s: %d bytes at the end, not a record" % (path, len(data) - at))
        (n,) = struct.unpack_from("<Q", data, at)
        (lcrc,) = struct.unpack_from("<I", data, at + 8)
        if lcrc != masked(crc32c(data[at : at + 8])):
            fail("%s: record %d at byte %d: the length's CRC is wrong" % (path, len(out), at))
        if at + 12 + n + 4 > len(data):
            fail("%s: record %d at byte %d: cut short" % (path, len(out), at))
        body = data[at + 12 : at + 12 + n]
        (dcrc,) = struct.unpack_from("<I", data, at + 12 + n)
        if dcrc != masked(crc32c(body)):
            fail("%s: record %d at byte %d: the data's CRC is wrong" % (path, len(out), at))
        out.append(body)
        at += 16 + n
    return out


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32_of_g9(got, v):
    """Whether the float32 got is what a double that %.9g prints as v rounds to: a value
    that was a float32 (the loss of one rank) is f32(v) exactly; a double (a mean over ranks,
    the learning rate) is only known to 9 digits, so got must be the rounding of some double
    that prints as v, i.e. lie between the roundings of the ends of v's interval."""
    if got == f32(v):
        return True
    if v == 0:
        return False
    half = 0.5 * 10.0 ** (math.floor(math.log10(abs(v))) - 8)
    return f32(v - half) <= got <= f32(v + half)


def read_dir(outdir, event_pb2):
    """The points as TensorBoard keeps them, every raw point, and the START events."""
    files = sorted(glob.glob(os.path.join(glob.escape(outdir), "events.out.tfevents.*")))
    if not files:
        fail("%s: no events.out.tfevents.* file" % outdir)
    kept, raw, starts, seen_start = [], [], [], False
    for path in files:
        recs = records(path)
        evs = []
        for i, body in enumerate(recs):
            ev = event_pb2.Event()
            ev.ParseFromString(body)
            evs.append(ev)
        if len(evs) < 2:
            fail("%s: %d records, not the file version and START" % (path, len(evs)))
        if evs[0].WhichOneof("what") != "file_version" or evs[0].file_version != "brain.Event:2":
            fail("%s: the first record is not file_version brain.Event:2: %s" % (path, evs[0]))
        if (
            evs[1].WhichOneof("what") != "session_log"
            or evs[1].session_log.status != event_pb2.SessionLog.START
        ):
            fail("%s: the second record is not a SessionLog START: %s" % (path, evs[1]))
        for ev in evs:
            if ev.wall_time <= 0:
                fail("%s: an event without a wall time" % path)
            what = ev.WhichOneof("what")
            if what == "session_log" and ev.session_log.status == event_pb2.SessionLog.START:
                starts.append((os.path.basename(path), ev.step))
                # TensorBoard's rule (file version 2): a run's first START is its start,
                # every later one a restart that drops the points at its step and after
                if seen_start:
                    kept = [p for p in kept if p[1] < ev.step]
                seen_start = True
            elif what == "summary":
                for v in ev.summary.value:
                    if v.WhichOneof("value") != "simple_value":
                        fail("%s: %s at step %d is not a simple_value" % (path, v.tag, ev.step))
                    kept.append((v.tag, ev.step, v.simple_value))
                    raw.append((v.tag, ev.step, v.simple_value))
            elif what != "file_version":
                fail("%s: an unexpected event (%s)" % (path, what))
        print("%s: %d records" % (os.path.basename(path), len(recs)), file=sys.stderr)
    return kept, raw, starts


# metrics.jsonl's key for each tag, and how the line rounds it (0: %.9g, every bit of a
# float32, f32_of_g9; img/s %.3f and the waits %.4f: within half their last digit)
TAGS = {
    "train/loss": ("train", "loss", 0),
    "train/lr": ("train", "lr", 0),
    "train/loss_scale": ("train", "loss_scale", 0),
    "train/img_per_s": ("train", "img_per_s", 0.0005),
    "train/data_wait_ms": ("train", "data_wait_ms", 0.00005),
    "train/comm_wait_ms": ("train", "comm_wait_ms", 0.00005),
    "train/step_ms": ("train", "step_ms", 0.00005),
    "train/compute_ms": ("train", "compute_ms", 0.00005),
    "eval/accuracy": ("eval", "accuracy", 0),
    "eval/loss": ("eval", "loss", 0),
}


def check(outdir, event_pb2):
    kept, raw, starts = read_dir(outdir, event_pb2)
    points = {}
    for tag, step, value in kept:
        if (tag, step) in points:
            fail("%s at step %d twice in TensorBoard's view" % (tag, step))
        points[(tag, step)] = value
    # metrics.jsonl's lines, each run's (from a start line) after the same rule: a resumed
    # run drops the lines of the runs before at its first step and after (a step once)
    lines, run = {}, -1
    for line in open(os.path.join(outdir, "metrics.jsonl")):
        d = json.loads(line)
        if d.get("event") == "start":
            run += 1
            if run >= len(starts):
                fail("metrics.jsonl has more runs than the event files (%d)" % len(starts))
            if run > 0:
                lines = {k: v for k, v in lines.items() if k[1] < starts[run][1]}
        if d.get("event") in ("train", "eval", "ranks"):
            if (d["event"], d["global_step"]) in lines:
                fail("metrics.jsonl: %s at step %d twice in a run" % (d["event"], d["global_step"]))
            lines[(d["event"], d["global_step"])] = d
    if run + 1 != len(starts):
        fail("metrics.jsonl has %d runs, the event files %d" % (run + 1, len(starts)))
    want = {}
    for tag, (event, key, tol) in TAGS.items():
        for (ev, step), d in lines.items():
            if ev == event and key in d:
                want[(tag, step)] = (d[key], tol)
    # every rank's figures of a ranks event: ranks/rank_N/KEY, each within half the last
    # digit of its %.4f
    for (ev, step), d in lines.items():
        if ev == "ranks":
            for x in d["ranks"]:
                for key in ("step_ms", "compute_ms", "data_wait_ms", "comm_wait_ms"):
                    want[("ranks/rank_%d/%s" % (x["rank"], key), step)] = (x[key], 0.00005)
    # the loss scale only where loss scaling is on: then in every train event
    if not any(t == "train/loss_scale" for t, _ in points):
        want = {k: v for k, v in want.items() if k[0] != "train/loss_scale"}
    missing = sorted(set(want) - set(points))
    extra = sorted(set(points) - set(want))
    if missing:
        fail("not in the event files: %s" % missing[:5])
    if extra:
        fail("not in metrics.jsonl: %s" % extra[:5])
    for k, (v, tol) in sorted(want.items()):
        got = points[k]
        if tol == 0 and not f32_of_g9(got, v):
            fail("%s at step %d: %r, metrics.jsonl has %r (%r as float32)" % (k + (got, v, f32(v))))
        if tol and abs(got - v) > tol + abs(v) * 2.0**-23:
            fail("%s at step %d: %r, metrics.jsonl has %r" % (k + (got, v)))
    tags = sorted({t for t, _ in points})
    for t in tags:
        steps = sorted(s for tt, s in points if tt == t)
        print("%s: %d points, steps %d..%d" % (t, len(steps), steps[0], steps[-1]))
    print("starts: %s" % " ".join("%d" % s for _, s in starts))
    print("%d scalars equal metrics.jsonl's" % len(points))


def main():
    if len(sys.argv) < 4:
        fail(__doc__)
    sys.path.insert(0, sys.argv[1])
    import event_pb2  # generated by protoc into PB_DIR

    cmd, outdir = sys.argv[2], sys.argv[3]
    if cmd == "check":
        check(outdir, event_pb2)
    elif cmd == "dump":
        kept, raw, starts = read_dir(outdir, event_pb2)
        for tag, step, value in raw if "--raw" in sys.argv[4:] else kept:
            print("%s %d %.9g" % (tag, step, value))
        for name, step in starts:
            print("start %s %d" % (name, step))
    else:
        fail(__doc__)


main()
