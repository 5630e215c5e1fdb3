#!/usr/bin/python3
"""image-torchvision.py — torchvision's side of the image pipeline benchmark
(contrib/bench/image-pipeline.sh; image-bench.c is dptrain's): ImageFolder(ROOT) with
Compose([RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(), Normalize(ImageNet
mean/std)]) through DataLoader(batch_size=B, num_workers=N, shuffle=True,
persistent_workers=True, pin_memory=False, drop_last=True). Each worker runs
torch.set_num_threads(1), so N workers use N cores. One warm-up epoch (workers started, files
in the page cache), then E timed epochs; the batches are only counted.

Reported (one line, key=value, and --json): img/s, img/s per worker (img/s / N), CPU seconds
of the main process and all workers over the timed epochs (from /proc/PID/stat) and img per
CPU-second, and peak RSS: the main process's VmHWM plus the sum of every worker's VmHWM (from
/proc/PID/status, read after the timed epochs while the persistent workers are alive). That
sum counts pages the workers share with each other and with the main process (the torch
libraries, copy-on-write memory from the fork) once per process, so it overstates the memory
really used; Pss (/proc/PID/smaps_rollup), which splits shared pages among their users, is
reported beside it, read at the same moment (the current, not the peak).

    /usr/bin/python3 contrib/bench/image-torchvision.py ROOT [-j N] [-e EPOCHS] [-b BATCH]
        [--json]
"""
import argparse
import json
import os
import sys
import time

import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def worker_init(_):
    torch.set_num_threads(1)


def proc_kb(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def pss_kb(pid):
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_s(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def children(pid):
    kids = []
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                kids += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return kids


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("-j", "--workers", type=int, default=1)
    ap.add_argument("-e", "--epochs", type=int, default=2)
    ap.add_argument("-b", "--batch", type=int, default=256)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.workers < 1:
        sys.exit("image-torchvision: --workers must be >= 1 (one worker process per core)")

    torch.manual_seed(0)
    tf = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(MEAN, STD),
    ])
    ds = datasets.ImageFolder(a.root, transform=tf)
    dl = DataLoader(ds, batch_size=a.batch, num_workers=a.workers, shuffle=True,
                    persistent_workers=True, pin_memory=False, drop_last=True,
                    worker_init_fn=worker_init)

    def epoch():
        n = 0
        for x, y in dl:
            assert x.shape[1:] == (3, 224, 224)
            n += x.shape[0]
        return n

    epoch()  # warm-up: workers started, files read once
    me = os.getpid()
    procs = [me] + children(me)
    c0 = sum(cpu_s(p) for p in procs)
    t0 = time.perf_counter()
    images = sum(epoch() for _ in range(a.epochs))
    dt = time.perf_counter() - t0
    procs = [me] + children(me)  # persistent workers: the same ones
    cpu = sum(cpu_s(p) for p in procs) - c0
    hwm = sum(proc_kb(p, "VmHWM") for p in procs)
    pss = sum(pss_kb(p) for p in procs)
    r = {
        "tool": "torchvision", "workers": a.workers, "batch": a.batch, "epochs": a.epochs,
        "images": images, "seconds": round(dt, 3), "img_s": round(images / dt, 1),
        "img_s_per_core": round(images / dt / a.workers, 1),
        "cpu_s": round(cpu, 2), "img_per_cpu_s": round(images / cpu, 1) if cpu else None,
        "peak_rss_mb": round(hwm / 1024, 1), "pss_mb": round(pss / 1024, 1),
        "processes": len(procs), "dataset": len(ds),
        "versions": "torch %s torchvision %s PIL %s" % (
            torch.__version__, torchvision.__version__, __import__("PIL").__version__),
    }
    del dl
    if a.json:
        print(json.dumps(r))
    else:
        print(" ".join("%s=%s" % (k, v) for k, v in r.items() if k != "versions"))


if __name__ == "__main__":
    main()
