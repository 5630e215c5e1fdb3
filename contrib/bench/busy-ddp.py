#!/usr/bin/python3
"""busy-ddp.py — PyTorch's side of contrib/bench/busy-bench.sh: free-running DDP training
throughput (gloo over TCP on 127.0.0.1) of mlp or lenet (t/reference/gen_model.py's, the per-rank
batch and SGD settings of contrib/examples/<model>-fmnist.json, synthetic 1x28x28 input) with
NPROC ranks of THREADS compute threads each, as dptrain's ranks run: no barrier between steps.
Prints one JSON object: img_s = ranks x batch x STEPS / the time rank 0 took for STEPS steps
after WARMUP (between two barriers); window: that time's start and end (epoch seconds).

    /usr/bin/python3 contrib/bench/busy-ddp.py --model lenet --nproc 4 --threads 1 --steps 200
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ddp_exposed = __import__("ddp-exposed")


def worker(a):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method="env://",
                            timeout=datetime.timedelta(seconds=a.timeout))
    ex = ddp_exposed.example(a.model)
    gm = ddp_exposed.gen_model()
    torch.manual_seed(1)
    model = DDP(gm.MLP(10) if a.model == "mlp" else gm.LeNet(10))
    opt = torch.optim.SGD(model.parameters(), lr=ex["lr"], momentum=ex["momentum"],
                          weight_decay=ex["weight_decay"])
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    x = torch.randn(ex["batch"], 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (ex["batch"],), generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    dist.barrier()
    t0, w0 = time.perf_counter(), time.time()
    for _ in range(a.steps):
        step()
    dist.barrier()
    t, w1 = time.perf_counter() - t0, time.time()
    if dist.get_rank() == 0:
        with open(a.result, "w") as f:
            json.dump({"torch": torch.__version__, "model": a.model, "ranks": a.nproc,
                       "threads": a.threads, "batch": ex["batch"], "steps": a.steps,
                       "img_s": a.nproc * ex["batch"] * a.steps / t,
                       "window": [w0, w1]}, f)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="lenet", choices=("mlp", "lenet"))
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return
    port = ddp_exposed.free_port()
    with tempfile.TemporaryDirectory(prefix="busy-ddp.") as tmp:
        result = os.path.join(tmp, "result.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--result", result,
               "--model", a.model, "--nproc", str(a.nproc), "--threads", str(a.threads),
               "--steps", str(a.steps), "--warmup", str(a.warmup), "--timeout", str(a.timeout)]
        procs = [subprocess.Popen(cmd, stdin=subprocess.DEVNULL, env=dict(
            os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
            WORLD_SIZE=str(a.nproc), LOCAL_RANK=str(r), OMP_NUM_THREADS=str(a.threads),
            # Debian's PyTorch 2.x has no libuv, which its TCPStore asks for by default
            USE_LIBUV=os.environ.get("USE_LIBUV", "0")))
            for r in range(a.nproc)]
        try:
            rcs = [p.wait(timeout=a.timeout) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        if any(rcs):
            sys.exit("busy-ddp: a rank failed: %s" % rcs)
        with open(result) as f:
            print(f.read())


if __name__ == "__main__":
    main()
