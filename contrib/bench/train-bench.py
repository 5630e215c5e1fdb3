#!/usr/bin/python3
# train-bench.py — single-rank CPU training throughput and peak memory, dptrain beside
# PyTorch in the same run: same model, Fashion-MNIST batches of 64 (1x28x28, normalized),
# SGD momentum 0.9, 2 threads each. Each side trains L steps to warm up, then is timed over L
# more (dptrain: the img/s of its second log interval; PyTorch: wall clock of those steps).
# Peak RSS is the whole process's (GNU time). Prints a markdown table.
#     /usr/bin/python3 contrib/bench/train-bench.py [BUILD_DIR]        (after `make`)
# Two builds of dptrain instead of PyTorch (a change's before and after, same run): each model
# runs ROUNDS times from each build, alternating, and the table gives the median img/s.
#     /usr/bin/python3 contrib/bench/train-bench.py --builds BEFORE AFTER [ROUNDS (3)] [MODEL...]
import gzip
import os
import re
import subprocess
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FMNIST = "/usr/share/datasets/fashion-mnist"
THREADS = 2
BATCH = 64
# model: L, the warm-up and the timed steps
PLAN = {"mlp": 300, "lenet": 300, "resnet18": 6, "resnet50": 4}


def torch_side(name, warm, steps):
    import numpy as np
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, os.path.join(TOP, "t", "reference"))
    import gen_model

    torch.set_num_threads(THREADS)
    with gzip.open(FMNIST + "/train-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(FMNIST + "/train-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    x, y = torch.from_numpy(x.copy()), torch.from_numpy(y)
    if name == "mlp":
        model = gen_model.MLP(10)
    elif name == "lenet":
        model = gen_model.LeNet(10)
    else:
        model = gen_model.resnet_small(int(name[6:]), 10)
        model.conv1 = torch.nn.Conv2d(1, 64, 3, 1, 1, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    perm = torch.randperm(len(y))
    model.train()
    t0 = None
    for i in range(warm + steps):
        if i == warm:
            t0 = time.perf_counter()
        idx = perm[(i * BATCH) % 59968:][:BATCH]
        xb = (x[idx].float() / 255 - 0.2860) / 0.3530
        loss = F.cross_entropy(model(xb), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("IMGS %.3f" % (steps * BATCH / (time.perf_counter() - t0)))


def run_rss(cmd, env=None):
    """Run under GNU time; return (stdout, peak RSS in MB)."""
    with tempfile.NamedTemporaryFile("r") as t:
        out = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", t.name] + cmd, env=env,
                             check=True, capture_output=True, text=True).stdout
        return out, int(t.read().strip().splitlines()[-1]) / 1024


def dptrain_cmd(build, name, steps, outdir):
    cmd = [os.path.join(build, "bin", "dptrain"),
           os.path.join(TOP, "contrib", "examples", "mlp-fmnist.json"),
           "model.name=" + name, "model.hidden=null", "train.epochs=0",
           "train.max_steps=%d" % (2 * steps), "train.log_every=%d" % steps,
           "data.eval=null", "data.batch_size=%d" % BATCH,
           "train.threads=%d" % THREADS, "optimizer.lr=0.05", "output.dir=" + outdir]
    if name.startswith("resnet"):
        cmd.append("model.stem=small")
    return cmd


def compare_builds(before, after, rounds, models=None):
    """The same models from two builds, alternating; the median img/s of each."""
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, steps in PLAN.items():
            if models and name not in models:
                continue
            got = {before: [], after: []}
            for r in range(rounds):
                for build in (before, after) if r % 2 == 0 else (after, before):
                    out = os.path.join(tmp, "%s-%d-%d" % (name, r, build == after))
                    text, rss = run_rss(dptrain_cmd(build, name, steps, out), env)
                    got[build].append(float(re.findall(r"([0-9.]+) img/s", text)[-1]))
            a = sorted(got[before])[rounds // 2]
            b = sorted(got[after])[rounds // 2]
            rows.append((name, a, b, got[before], got[after]))
            print("%s: before %s, after %s img/s" % (name, got[before], got[after]),
                  file=sys.stderr)
    print("| model (1x28x28, batch %d, %d threads) | before img/s | after img/s | after/before |"
          " every run, before | every run, after |" % (BATCH, THREADS))
    print("|---|---|---|---|---|---|")
    for name, a, b, ra, rb in rows:
        print("| %s | %.1f | %.1f | %.3f | %s | %s |" % (
            name, a, b, b / a, ", ".join("%.1f" % v for v in ra),
            ", ".join("%.1f" % v for v in rb)))


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--torch":
        return torch_side(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    if len(sys.argv) > 3 and sys.argv[1] == "--builds":
        rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
        return compare_builds(os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3]), rounds,
                              sys.argv[5:])
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(TOP, "build")
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS))
    blas = "/usr/lib/x86_64-linux-gnu/openblas-openmp"  # torch is 10x slower on reference BLAS
    tenv = dict(env, LD_LIBRARY_PATH=blas + ":" + env.get("LD_LIBRARY_PATH", ""))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, steps in PLAN.items():
            out, rss = run_rss(dptrain_cmd(build, name, steps, os.path.join(tmp, name)), env)
            ips = [float(m) for m in re.findall(r"([0-9.]+) img/s", out)]
            tout, trss = run_rss(["/usr/bin/python3", os.path.abspath(__file__), "--torch",
                                  name, str(steps), str(steps)], tenv)
            tips = float(re.search(r"IMGS ([0-9.]+)", tout).group(1))
            rows.append((name, ips[-1], tips, rss, trss))
            print("%s: dptrain %.1f img/s %.0f MB, PyTorch %.1f img/s %.0f MB" % (
                name, ips[-1], rss, tips, trss), file=sys.stderr)
    print("| model (1x28x28, batch %d, %d threads) | dptrain img/s | PyTorch img/s | speed-up |"
          " dptrain peak RSS MB | PyTorch peak RSS MB |" % (BATCH, THREADS))
    print("|---|---|---|---|---|---|")
    for name, a, b, ra, rb in rows:
        print("| %s | %.1f | %.1f | %.2fx | %.0f | %.0f |" % (name, a, b, a / b, ra, rb))


if __name__ == "__main__":
    main()
