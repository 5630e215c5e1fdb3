#!/usr/bin/env python3
# rendezvous-tcpstore.py — PyTorch's TCPStore doing what rendezvous-bench.c has dptrain's store
# do, at the same counts, on 127.0.0.1: rank 0's master store in this process, the other ranks
# as threads of P forked processes. Every rank connects, sets its record; rank 0 gets every
# record in rank order and sets the table; every node's writer (one rank in R) gets the table;
# a barrier (add, then wait for the key the last one sets).
#
#   rendezvous-tcpstore.py [-n RANKS] [-p PROCS] [-r RANKS_PER_NODE] [-t TIMEOUT_S]
#
# Output, one JSON object: table_ms (every rank through the barrier after the table), the master process's resident
# memory before and after (rss_kb), times from the moment the other ranks were released.
import argparse
import datetime
import json
import os
import socket
import sys
import threading
import time

import torch
import torch.distributed as dist


def rss_kb(field="VmRSS"):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def record(rank, per_node):
    return ("n%d 10.%d.%d.%d %d %d gpu=%d/8 id=GPU-%08x" %
            (rank // per_node, (rank >> 16) & 255, (rank >> 8) & 255, rank & 255,
             rank // per_node, rank % per_node, rank % per_node,
             (rank * 2654435761) & 0xffffffff)).encode()


# PyTorch >= 2.2 serves with libuv by default; Debian's build has none: the classic server
LIBUV = {} if torch.__version__ < "2.2" else {"use_libuv": False}


def rank_main(a, port, rank, go, failed, keep):
    try:
        go.wait()
        st = dist.TCPStore("127.0.0.1", port, a.n, False,
                           datetime.timedelta(seconds=a.t), **LIBUV)
        st.set("rec.%d" % rank, record(rank, a.r))
        if rank % a.r == 0:
            st.get("table")
        if st.add("done", 1) == a.n:
            st.set("done.all", b"1")
        st.get("done.all")
        keep.append(st)  # not freed on this thread: torch 2.6's pybind11 may abort then
    except Exception as e:  # noqa: BLE001 (counted and shown)
        failed.append("rank %d: %s" % (rank, e))


def child(a, port, first, rfd, wfd):
    go = threading.Event()
    failed, keep = [], []
    ts = [threading.Thread(target=rank_main, args=(a, port, r, go, failed, keep))
          for r in range(first, a.n, a.p)]
    for t in ts:
        t.start()
    os.write(wfd, b"1")
    os.read(rfd, 1)  # EOF: released
    go.set()
    for t in ts:
        t.join()
    if failed:
        sys.stderr.write("rendezvous-tcpstore: %d failed, e.g. %s\n" % (len(failed), failed[0]))
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=1024)
    ap.add_argument("-p", type=int, default=8)
    ap.add_argument("-r", type=int, default=8)
    ap.add_argument("-t", type=float, default=120)
    a = ap.parse_args()
    a.p = min(a.p, a.n - 1)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    go_r, go_w = os.pipe()
    ready_r, ready_w = os.pipe()
    pids = []
    for p in range(a.p):
        pid = os.fork()
        if pid == 0:
            os.close(go_w)
            os.close(ready_r)
            rc = 1
            try:
                rc = child(a, port, 1 + p, go_r, ready_w)
            finally:
                os._exit(rc)
        pids.append(pid)
    os.close(go_r)
    os.close(ready_w)
    for _ in range(a.p):
        if os.read(ready_r, 1) != b"1":
            sys.exit("rendezvous-tcpstore: a child died before its ranks were ready")
    rss0 = rss_kb()
    # the master is made before the others go (its constructor, waiting for workers, would
    # hold the GIL in torch 1.13): what is timed is every rank's connection and requests
    res = {"listening": threading.Event(), "go": threading.Event()}

    def master():
        try:
            st = dist.TCPStore("127.0.0.1", port, a.n, True,
                               datetime.timedelta(seconds=a.t), wait_for_workers=False,
                               **LIBUV)
            res["listening"].set()
            res["go"].wait()
            st.set("rec.0", record(0, a.r))
            recs = [st.get("rec.%d" % r) for r in range(a.n)]
            st.set("table", b"\n".join(recs) + b"\n")
            if st.add("done", 1) == a.n:
                st.set("done.all", b"1")
            st.get("done.all")
            res["table"] = time.monotonic()
            res["rss"] = rss_kb()
            res["st"] = st  # closed after the workers
        except Exception as e:  # noqa: BLE001
            res["err"] = str(e)

    mt = threading.Thread(target=master)
    mt.start()
    res["listening"].wait(a.t)
    t0 = time.monotonic()
    os.close(go_w)
    res["go"].set()
    mt.join()
    bad = 0
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        bad += status != 0
    if "err" in res or bad:
        sys.exit("rendezvous-tcpstore: %s; %d of %d processes failed" %
                 (res.get("err", "rank 0 ok"), bad, a.p))
    print(json.dumps({"tool": "torch.distributed.TCPStore", "torch": torch.__version__,
                      "ranks": a.n, "procs": a.p, "ranks_per_node": a.r,
                      "table_ms": round((res["table"] - t0) * 1e3, 1),
                      "rss_before_kb": rss0, "rss_kb": res["rss"],
                      "hwm_kb": rss_kb("VmHWM")}))


if __name__ == "__main__":
    main()
