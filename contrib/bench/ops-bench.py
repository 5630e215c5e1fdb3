#!/usr/bin/python3
"""ops-bench.py — PyTorch 1.13's per-op timings on the layer set of ops-bench.c (one ResNet-50
stage at 28x28, batch 64), the anchor the CPU backend is compared with. Touches nothing but
stdout. /usr/bin/python3 contrib/bench/ops-bench.py [-t THREADS] [-n BATCH] [-i ITERS]

Per op: the forward alone, and forward + all gradients in one torch.autograd.grad call ("all",
comparable with ops-bench.c's "all"). Times are the best of ITERS calls, in ms.
"""
import argparse
import time

import torch
import torch.nn.functional as F


def best(iters, fn):
    fn()
    t = float("inf")
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t * 1e3


def report(name, f, fb):
    """fwd alone, and forward + every gradient in one autograd call (their difference is the
    backward; timed apart, torch's noise can make a single pass come out negative)."""
    print(f"{name:34s} fwd {f:8.2f}  bwd {fb - f:8.2f}  all {fb:8.2f}  ms")
    return fb


def conv(iters, name, n, c, h, k, ks, s):
    x = torch.randn(n, c, h, h, requires_grad=True)
    w = torch.randn(k, c, ks, ks, requires_grad=True)
    dy = torch.randn_like(F.conv2d(x, w, None, s, ks // 2))
    f = best(iters, lambda: F.conv2d(x, w, None, s, ks // 2))
    fb = best(iters, lambda: torch.autograd.grad(F.conv2d(x, w, None, s, ks // 2), (x, w), dy))
    return report(name, f, fb)


def bn(iters, name, n, c, h, relu):
    x = torch.randn(n, c, h, h, requires_grad=True)
    g = torch.ones(c, requires_grad=True)
    b = torch.zeros(c, requires_grad=True)
    rm, rv = torch.zeros(c), torch.ones(c)

    def fwd():
        y = F.batch_norm(x, rm, rv, g, b, training=True)
        return F.relu(y) if relu else y

    dy = torch.randn_like(x)
    f = best(iters, fwd)
    fb = best(iters, lambda: torch.autograd.grad(fwd(), (x, g, b), dy))
    return report(name, f, fb)


def eltwise(iters, name, numel):
    x = torch.randn(numel)
    y = torch.relu(x)
    dy = torch.randn(numel)
    f = best(iters, lambda: torch.relu(x))
    b = best(iters, lambda: torch.ops.aten.threshold_backward(dy, y, 0))
    a = best(iters, lambda: torch.add(x, y))
    print(f"{name:34s} relu fwd {f:5.2f}  relu bwd {b:5.2f}  add {a:5.2f}  all {f + b + a:8.2f}"
          "  ms")
    return f + b + a


def pool(iters, name, kind, n, c, h, ks, s, pad):
    x = torch.randn(n, c, h, h, requires_grad=True)
    op = (lambda t: F.max_pool2d(t, ks, s, pad)) if kind == "max" else \
        (lambda t: F.avg_pool2d(t, ks, s, pad))
    dy = torch.randn_like(op(x))
    f = best(iters, lambda: op(x))
    fb = best(iters, lambda: torch.autograd.grad(op(x), x, dy))
    return report(name, f, fb)


def linear(iters, name, n, fin, fout):
    x = torch.randn(n, fin, requires_grad=True)
    w = torch.randn(fout, fin, requires_grad=True)
    b = torch.randn(fout, requires_grad=True)
    dy = torch.randn(n, fout)
    f = best(iters, lambda: F.linear(x, w, b))
    fb = best(iters, lambda: torch.autograd.grad(F.linear(x, w, b), (x, w, b), dy))
    return report(name, f, fb)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-t", type=int, default=0)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-i", type=int, default=5)
    a = ap.parse_args()
    if a.t:
        torch.set_num_threads(a.t)
    n, it = a.n, a.i
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {n}, "
          f"best of {it}")
    total = 0.0
    total += conv(it, "conv 3x3 64->64 28x28", n, 64, 28, 64, 3, 1)
    total += conv(it, "conv 1x1 512->128 28x28", n, 512, 28, 128, 1, 1)
    total += conv(it, "conv 3x3 128->128 28x28", n, 128, 28, 128, 3, 1)
    total += conv(it, "conv 1x1 128->512 28x28", n, 128, 28, 512, 1, 1)
    total += conv(it, "conv 3x3/2 128->128 56->28", n, 128, 56, 128, 3, 2)
    total += conv(it, "conv 1x1/2 256->512 56->28", n, 256, 56, 512, 1, 2)
    total += bn(it, "bn+relu 128 28x28", n, 128, 28, True)
    total += bn(it, "bn 512 28x28", n, 512, 28, False)
    total += eltwise(it, "eltwise 512x28x28", n * 512 * 28 * 28)
    total += pool(it, "maxpool 3x3/2 64 112->56", "max", n, 64, 112, 3, 2, 1)
    total += pool(it, "avgpool 2x2/2 128 28->14", "avg", n, 128, 28, 2, 2, 0)
    total += linear(it, "linear 2048->1000", n, 2048, 1000)
    print(f"total {total:.1f} ms")


if __name__ == "__main__":
    main()
