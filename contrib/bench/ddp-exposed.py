#!/usr/bin/python3
"""ddp-exposed.py — PyTorch's side of the benchmark "exposed communication share of a DDP step".

For mlp and lenet (t/reference/gen_model.py's, Fashion-MNIST shapes 1x28x28, 10 classes, the
per-rank batch and SGD settings of contrib/examples/<model>-fmnist.json) runs NPROC ranks with
THREADS compute threads each (gloo over TCP on 127.0.0.1, env://; the workers are started here,
not by torchrun) and times one DDP training step (zero_grad, forward, cross-entropy, backward
with DDP's bucketed all-reduce, optimizer step) two ways:

    sync     normal DDP: gradients are averaged across the ranks during backward
    nosync   the same step inside model.no_sync(): no communication at all

The input is a fixed synthetic batch (data loading is not what is measured). Before every
timed step the ranks meet at a barrier (not timed), so each step starts aligned; a step's time
is the slowest rank's, and the table gives the median over STEPS steps after WARMUP. The modes
take turns step by step (which goes first swaps every 10), so drift in the machine's speed
hits both alike.

    exposed = (t_sync - t_nosync) / t_sync

is the share of a step spent on communication that backward did not hide.

    /usr/bin/python3 contrib/bench/ddp-exposed.py [--steps 200] [--warmup 20] [--json]
"""
import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import types

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = ("mlp", "lenet")
BLOCK = 10


def gen_model():
    """t/reference/gen_model.py; torchvision is only needed there for the resnets."""
    sys.path.insert(0, os.path.join(TOP, "t", "reference"))
    try:
        import gen_model as gm
    except ImportError as e:
        if getattr(e, "name", None) != "torchvision":
            raise
        sys.modules["torchvision"] = types.ModuleType("torchvision")
        import gen_model as gm
    return gm


def example(name):
    """Batch size and SGD settings of contrib/examples/<name>-fmnist.json."""
    with open(os.path.join(TOP, "contrib", "examples", "%s-fmnist.json" % name)) as f:
        cfg = json.load(f)
    o = cfg.get("optimizer", {})
    if o.get("name", "sgd") not in ("sgd", "momentum"):
        sys.exit("ddp-exposed: %s-fmnist.json: optimizer %r; this benchmark runs SGD only"
                 % (name, o.get("name")))
    return {"batch": cfg["data"].get("batch_size", 32), "lr": o.get("lr", 1e-3),
            "momentum": o.get("momentum", 0.9 if o.get("name") == "momentum" else 0.0),
            "weight_decay": o.get("weight_decay", 0.0)}


def measure(name, args, dist, torch):
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    ex = example(name)
    gm = gen_model()
    torch.manual_seed(1)
    model = DDP(gm.MLP(10) if name == "mlp" else gm.LeNet(10), bucket_cap_mb=args.bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=ex["lr"], momentum=ex["momentum"],
                          weight_decay=ex["weight_decay"])
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    x = torch.randn(ex["batch"], 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (ex["batch"],), generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    times = {"sync": [], "nosync": []}
    for i in range(args.warmup + args.steps):
        block = (i // BLOCK) % 2
        for mode in (("sync", "nosync") if block == 0 else ("nosync", "sync")):
            dist.barrier()
            t0 = time.perf_counter()
            if mode == "sync":
                step()
            else:
                with model.no_sync():
                    step()
            t = time.perf_counter() - t0
            if i >= args.warmup:
                times[mode].append(t)
    # a step lasts as long as its slowest rank
    out = {}
    for mode, ts in times.items():
        mine = torch.tensor(ts, dtype=torch.float64)
        every = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
        dist.all_gather(every, mine)
        out[mode] = statistics.median(torch.stack(every).max(0).values.tolist())
    params = sum(p.numel() for p in model.parameters())
    return {"batch": ex["batch"], "params": params, "grad_mb": params * 4 / 2**20,
            "t_sync_ms": out["sync"] * 1e3, "t_nosync_ms": out["nosync"] * 1e3,
            "exposed": (out["sync"] - out["nosync"]) / out["sync"]}


def worker(args):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method="env://",
                            timeout=datetime.timedelta(seconds=args.timeout))
    res = {m: measure(m, args, dist, torch) for m in args.models}
    if dist.get_rank() == 0:
        with open(args.result, "w") as f:
            json.dump({"torch": torch.__version__, "results": res}, f)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args):
    """Runs the workers; returns rank 0's results, or exits 1 when a rank fails."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="ddp-exposed.") as tmp:
        result = os.path.join(tmp, "result.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--result", result,
               "--models", ",".join(args.models), "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--threads", str(args.threads),
               "--timeout", str(args.timeout), "--bucket-cap-mb", str(args.bucket_cap_mb)]
        procs = []
        for r in range(args.nproc):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                       WORLD_SIZE=str(args.nproc), LOCAL_RANK=str(r),
                       OMP_NUM_THREADS=str(args.threads))
            procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL))
        deadline, err = time.monotonic() + args.timeout, None
        try:
            while any(p.poll() is None for p in procs) and not err:
                if any(p.returncode not in (None, 0) for p in procs):
                    err = "a rank failed; stopped the others"
                elif time.monotonic() > deadline:
                    err = "timed out after %d s (--timeout)" % args.timeout
                time.sleep(0.05)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        bad = ["rank %d: status %d" % (r, p.returncode) for r, p in enumerate(procs)
               if p.returncode]
        if err or bad:
            sys.exit("ddp-exposed: %s" % "; ".join(([err] if err else []) + bad))
        with open(result) as f:
            return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS),
                    help="comma-separated, of %s (default: both)" % ", ".join(MODELS))
    ap.add_argument("--nproc", type=int, default=2, help="ranks (default 2)")
    ap.add_argument("--threads", type=int, default=1, help="compute threads per rank (default 1)")
    ap.add_argument("--steps", type=int, default=200, help="timed steps per mode (default 200)")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps first (default 20)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds for everything (default 600)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0,
                    help="DDP's bucket_cap_mb (default 25, PyTorch's)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.models = [m for m in args.models.split(",") if m]
    for m in args.models:
        if m not in MODELS:
            ap.error("unknown model %r; choose from %s" % (m, ", ".join(MODELS)))
    if args.nproc < 1 or args.threads < 1 or args.steps < 1 or args.warmup < 0:
        ap.error("need --nproc >= 1, --threads >= 1, --steps >= 1, --warmup >= 0")
    if args.worker:
        worker(args)
        return
    r = launch(args)
    report = {"benchmark": "ddp-exposed", "framework": "pytorch", "torch": r["torch"],
              "backend": "gloo", "nproc": args.nproc, "threads": args.threads,
              "steps": args.steps, "warmup": args.warmup, "models": r["results"]}
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print("PyTorch %s DDP, gloo, %d ranks x %d thread(s), bucket_cap_mb %g, median of %d steps"
          % (r["torch"], args.nproc, args.threads, args.bucket_cap_mb, args.steps))
    print("| model | batch/rank | grads MB | step sync ms | step no_sync ms | exposed |")
    print("|-------|-----------:|---------:|-------------:|----------------:|--------:|")
    for m, v in r["results"].items():
        print("| %s | %d | %.2f | %.3f | %.3f | %.1f%% |"
              % (m, v["batch"], v["grad_mb"], v["t_sync_ms"], v["t_nosync_ms"],
                 100 * v["exposed"]))


if __name__ == "__main__":
    main()
