#!/usr/bin/python3
"""gen_ops.py — PyTorch reference data for the backend op tests (t/unit/backend_torch.c).

Owns t/reference/data/ops.bin; touches nothing else. Run with Debian's python3-torch
(the committed file: Debian 12's 1.13; t/t0610-torch-ref.t compares it with what the installed
torch gives): /usr/bin/python3 t/reference/gen_ops.py [OUTDIR]   (default t/reference/data).
Deterministic: the same torch gives the same file byte for byte.

Inputs are drawn as float32 from a fixed seed; torch then computes every output and gradient
in float64 from those float32 values (the same functions, so the same semantics), and the
results are rounded to float32. The file thus holds the exact answer to float32 precision
and the C backends are judged by their own error alone.

Format (little-endian): the line "DPTRAIN-OPS 1\\n", then records, each a text line
"NAME COUNT\\n" followed by COUNT float32 values, then the line "END\\n". Integers (shapes,
labels, counts) are stored as floats; they are small enough to be exact. Per case CASE:
  CASE.cfg  conv:   n c h w k kh kw stride pad has_bias
            bn:     n c h w eps fuse_relu momentum
            pool:   kind(0 max, 1 avg) n c h w kh kw stride pad   (avg: count_include_pad)
            linear: n in out has_bias
            gap:    n c hw
            xent:   n classes smoothing scale
  conv*, linear*: x w [b] dy -> y dx dw [db]
  bn*:   x gamma beta rm0 rv0 dy -> y save_mean save_invstd rm1 rv1 dx dgamma dbeta
         (training forward with running stats rm0/rv0 updated to rm1/rv1; backward of
         relu(bn(x)) when fused), and y_eval (inference with rm1/rv1)
  pool*, relu, gap*: x dy -> y dx
  xent*: logits labels -> loss dlogits (of loss * scale) correct (top-1 count)
"""
import os
import sys

os.environ["ATEN_CPU_CAPABILITY"] = "default"  # must precede the torch import

import tempfile  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

CONV = [  # n c h w k kh kw stride pad bias
    (2, 3, 9, 11, 5, 3, 3, 1, 1, 1),    # odd sizes, bias
    (1, 5, 7, 7, 6, 3, 3, 2, 1, 0),     # batch 1, stride 2
    (2, 16, 8, 8, 8, 1, 1, 2, 0, 0),    # 1x1/2 downsample
    (2, 3, 23, 23, 8, 7, 7, 2, 3, 0),   # 7x7/2 stem
    (2, 17, 6, 6, 19, 3, 3, 1, 1, 0),   # channels not multiple of 8
    (2, 32, 8, 8, 32, 3, 3, 1, 1, 0),   # blocked-friendly
]
BN = [  # n c h w eps fuse_relu momentum
    (2, 3, 5, 7, 1e-5, 0, 0.1),
    (4, 16, 3, 3, 1e-5, 1, 0.1),
    (3, 17, 2, 5, 1e-3, 0, 0.2),
]
POOL = [  # kind n c h w kh kw stride pad; ties: inputs quantised to a few levels
    ((0, 2, 3, 9, 9, 3, 3, 2, 1), False),
    ((0, 2, 3, 7, 7, 2, 2, 2, 0), False),
    ((0, 2, 4, 10, 10, 3, 3, 2, 1), True),
    ((1, 2, 3, 9, 9, 3, 3, 2, 1), False),
    ((1, 2, 3, 8, 8, 2, 2, 2, 0), False),
]
LINEAR = [(3, 20, 7, 1), (5, 16, 10, 0)]  # n in out bias
GAP = [(2, 5, 9)]  # n c hw
XENT = [(6, 10, 0.0, 1.0), (6, 10, 0.1, 1.0), (5, 13, 0.1, 0.5)]  # n classes smoothing scale


def rand(gen, *shape, lo=-1.0, hi=1.0):
    """float32 draws, returned as float64 for the computation."""
    t = torch.rand(*shape, generator=gen, dtype=torch.float32) * (hi - lo) + lo
    return t.double()


def leaf(t):
    return t.clone().requires_grad_(True)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "data")
    gen = torch.Generator().manual_seed(20240607)
    recs = []

    def put(name, t):
        recs.append((name, np.asarray(torch.as_tensor(t, dtype=torch.float64).detach()
                                      .reshape(-1).numpy(), dtype="<f4")))

    for i, (n, c, h, w, k, kh, kw, s, p, bias) in enumerate(CONV):
        name = f"conv{i}"
        x, wt = leaf(rand(gen, n, c, h, w)), leaf(rand(gen, k, c, kh, kw, lo=-0.5, hi=0.5))
        b = leaf(rand(gen, k)) if bias else None
        y = F.conv2d(x, wt, b, stride=s, padding=p)
        dy = rand(gen, *y.shape)
        y.backward(dy)
        put(name + ".cfg", [n, c, h, w, k, kh, kw, s, p, bias])
        put(name + ".x", x), put(name + ".w", wt)
        if bias:
            put(name + ".b", b)
        put(name + ".dy", dy), put(name + ".y", y), put(name + ".dx", x.grad)
        put(name + ".dw", wt.grad)
        if bias:
            put(name + ".db", b.grad)

    for i, (n, c, h, w, eps, relu, mom) in enumerate(BN):
        name = f"bn{i}"
        # per-channel offset and scale, so normalisation has something to undo
        scale = torch.arange(1, c + 1, dtype=torch.float64).reshape(1, c, 1, 1)
        x = leaf((rand(gen, n, c, h, w) * scale + 0.5 * scale).float().double())
        g, bt = leaf(rand(gen, c, lo=0.5, hi=1.5)), leaf(rand(gen, c, lo=-0.5, hi=0.5))
        rm0, rv0 = rand(gen, c, lo=-0.2, hi=0.2), rand(gen, c, lo=0.5, hi=1.5)
        rm, rv = rm0.clone(), rv0.clone()
        y, save_mean, save_invstd = torch.ops.aten.native_batch_norm(
            x, g, bt, rm, rv, True, mom, eps)
        if relu:
            y = F.relu(y)
        dy = rand(gen, *y.shape)
        y.backward(dy)
        with torch.no_grad():
            y_eval = F.batch_norm(x, rm, rv, g, bt, training=False, eps=eps)
            if relu:
                y_eval = F.relu(y_eval)
        put(name + ".cfg", [n, c, h, w, eps, relu, mom])
        for k_, v in (("x", x), ("gamma", g), ("beta", bt), ("rm0", rm0), ("rv0", rv0),
                      ("dy", dy), ("y", y), ("save_mean", save_mean),
                      ("save_invstd", save_invstd), ("rm1", rm), ("rv1", rv), ("dx", x.grad),
                      ("dgamma", g.grad), ("dbeta", bt.grad), ("y_eval", y_eval)):
            put(f"{name}.{k_}", v)

    for i, ((kind, n, c, h, w, kh, kw, s, p), ties) in enumerate(POOL):
        name = f"pool{i}"
        x = rand(gen, n, c, h, w)
        if ties:
            x = torch.floor((x + 1) * 1.5)  # values 0, 1, 2: most windows hold ties
        x = leaf(x)
        if kind == 0:
            y = F.max_pool2d(x, (kh, kw), stride=s, padding=p)
        else:
            y = F.avg_pool2d(x, (kh, kw), stride=s, padding=p, count_include_pad=True)
        dy = rand(gen, *y.shape)
        y.backward(dy)
        put(name + ".cfg", [kind, n, c, h, w, kh, kw, s, p])
        put(name + ".x", x), put(name + ".dy", dy), put(name + ".y", y)
        put(name + ".dx", x.grad)

    for i, (n, fin, fout, bias) in enumerate(LINEAR):
        name = f"linear{i}"
        x, wt = leaf(rand(gen, n, fin)), leaf(rand(gen, fout, fin, lo=-0.5, hi=0.5))
        b = leaf(rand(gen, fout)) if bias else None
        y = F.linear(x, wt, b)
        dy = rand(gen, *y.shape)
        y.backward(dy)
        put(name + ".cfg", [n, fin, fout, bias])
        put(name + ".x", x), put(name + ".w", wt)
        if bias:
            put(name + ".b", b)
        put(name + ".dy", dy), put(name + ".y", y), put(name + ".dx", x.grad)
        put(name + ".dw", wt.grad)
        if bias:
            put(name + ".db", b.grad)

    x = leaf(rand(gen, 2, 3, 4, 5))
    y = F.relu(x)
    dy = rand(gen, *y.shape)
    y.backward(dy)
    put("relu.x", x), put("relu.dy", dy), put("relu.y", y), put("relu.dx", x.grad)

    for i, (n, c, hw) in enumerate(GAP):
        name = f"gap{i}"
        x = leaf(rand(gen, n, c, hw))
        y = x.mean(dim=2)
        dy = rand(gen, *y.shape)
        y.backward(dy)
        put(name + ".cfg", [n, c, hw])
        put(name + ".x", x), put(name + ".dy", dy), put(name + ".y", y)
        put(name + ".dx", x.grad)

    for i, (n, classes, smoothing, scale) in enumerate(XENT):
        name = f"xent{i}"
        logits = leaf(rand(gen, n, classes, lo=-4.0, hi=4.0))
        labels = torch.randint(0, classes, (n,), generator=gen)
        loss = F.cross_entropy(logits, labels, label_smoothing=smoothing)
        (loss * scale).backward()
        correct = int((logits.argmax(dim=1) == labels).sum())
        put(name + ".cfg", [n, classes, smoothing, scale])
        put(name + ".logits", logits), put(name + ".labels", labels)
        put(name + ".loss", [loss.item()]), put(name + ".dlogits", logits.grad)
        put(name + ".correct", [correct])

    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, "ops.bin")
    fd, tmp = tempfile.mkstemp(prefix=".ops.bin.", dir=outdir)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(b"DPTRAIN-OPS 1\n")
            for name, arr in recs:
                f.write(f"{name} {arr.size}\n".encode())
                f.write(arr.tobytes())
            f.write(b"END\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    print(f"gen_ops.py: wrote {path} ({len(recs)} arrays)")


if __name__ == "__main__":
    main()
