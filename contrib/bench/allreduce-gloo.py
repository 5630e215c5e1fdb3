#!/usr/bin/python3
"""allreduce-gloo.py — torch.distributed's gloo allreduce, measured like allreduce-bench.c: W
processes on 127.0.0.1 (env:// rendezvous, one torch thread each) allreduce float32 tensors of
several sizes; rank 0 prints one line per size: "size_mb median_ms GB/s" (GB/s = size / time,
as PyTorch reports it). Touches nothing but stdout.

    /usr/bin/python3 contrib/bench/allreduce-gloo.py [-w WORLD] [-i ITERS] [SIZE_MB ...]
    srun --dptrain /usr/bin/python3 contrib/bench/allreduce-gloo.py -e [-i ITERS] [SIZE_MB ...]

-e: this process is one rank of a job started by srun --dptrain or dptrain-run (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the environment); gloo binds the interface that
routes to MASTER_ADDR (GLOO_SOCKET_IFNAME, unless set).
"""
import argparse
import os
import socket
import statistics
import subprocess
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, world, port, iters, sizes):
    torch.set_num_threads(1)
    if port:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
    # Debian's PyTorch 2.x is built without libuv, which its TCPStore asks for by default
    os.environ.setdefault("USE_LIBUV", "0")
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    for mb in sizes:
        t = torch.rand(int(mb * 1e6 / 4), dtype=torch.float32)
        times = []
        for it in range(-2, iters):  # two warm-up rounds
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            if it >= 0:
                times.append(time.perf_counter() - t0)
        times.sort()
        med = times[iters // 2]
        if rank == 0:
            print(f"{mb:g} {med * 1e3:.3f} {mb * 1e6 / med / 1e9:.3f}", flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-w", type=int, default=2, help="processes (ranks)")
    ap.add_argument("-i", type=int, default=20, help="timed iterations per size")
    ap.add_argument("-e", action="store_true", help="one rank of a job from the environment")
    ap.add_argument("sizes", type=float, nargs="*", default=[1, 11.2, 44.8, 102])
    a = ap.parse_args()
    if a.e:
        if "GLOO_SOCKET_IFNAME" not in os.environ:
            route = subprocess.run(["ip", "-o", "route", "get", os.environ["MASTER_ADDR"]],
                                   capture_output=True, text=True, check=True).stdout.split()
            os.environ["GLOO_SOCKET_IFNAME"] = route[route.index("dev") + 1]
        rank_main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), 0, a.i, a.sizes)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(rank_main, args=(a.w, port, a.i, a.sizes), nprocs=a.w, join=True)


if __name__ == "__main__":
    main()
