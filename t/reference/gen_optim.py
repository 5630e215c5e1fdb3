#!/usr/bin/python3
"""gen_optim.py — PyTorch reference data for t/unit/optim.c and t/unit/lr_schedule.c.

Owns t/reference/data/optim-*.json; touches nothing else. Run with Debian's python3-torch
(the committed files: Debian 12's 1.13; t/t0610-torch-ref.t compares them with what the
installed torch gives): /usr/bin/python3 t/reference/gen_optim.py [OUTDIR]   (default
t/reference/data). Deterministic: the same torch gives the same files byte for byte.

torch runs with ATEN_CPU_CAPABILITY=default: its AVX2/AVX-512 kernels fuse multiply-adds, so
their results depend on the machine; the default kernels do each float32 operation as written,
which is what trainer/optim/optim.c does, so the files are the same everywhere and the C results can
match them bit for bit.

Files (all float32 arrays are strings of space-separated 8-digit hex bit patterns, exact):
  optim-inputs.json   the flat layout (segments with gaps, out of offset order), initial
                      params and the gradients of 5 steps
  optim-CASE.json     one optimizer configuration: hyperparameters, the lr of each step, and
                      params and state (flat, gaps 0) after each step
  optim-lr-CASE.json  one lr schedule: its parameters and the lr of each step from torch's
                      schedulers (see trainer/optim/lr_schedule.h for the compositions)
"""
import os
import sys

os.environ["ATEN_CPU_CAPABILITY"] = "default"  # must precede the torch import

import json  # noqa: E402
import math  # noqa: E402
import tempfile  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

STEPS = 5
F32 = np.float32

# name, offset, count, decay, init: listed in model order, laid out in reverse (as the
# trainer's flat buffer), with padding gaps the optimizer must not touch.
SEGMENTS = [
    ("conv.weight", 32, 11, 1, "randn"),
    ("conv.bias", 25, 3, 0, "zeros"),
    ("bn.weight", 43, 5, 0, "ones"),
    ("fc.weight", 8, 17, 1, "randn"),
    ("fc.bias", 0, 4, 0, "randn"),
]
TOTAL = 52
GAP_PARAM, GAP_GRAD = 7.0, 3.0

SGD_CASES = [
    ("sgd", dict(lr=0.1, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0)),
    ("sgd-wd", dict(lr=0.1, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.01)),
    ("sgd-momentum", dict(lr=0.05, momentum=0.9, dampening=0.0, nesterov=False,
                          weight_decay=1e-4)),
    ("sgd-nesterov", dict(lr=0.05, momentum=0.9, dampening=0.0, nesterov=True,
                          weight_decay=5e-4)),
    ("sgd-dampening", dict(lr=0.05, momentum=0.8, dampening=0.25, nesterov=False,
                           weight_decay=0.01)),
]
ADAMW_CASES = [
    ("adamw", dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)),
    ("adamw-nowd", dict(lr=3e-3, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.0)),
    ("adamw-highwd", dict(lr=1e-2, beta1=0.9, beta2=0.98, eps=1e-8, weight_decay=0.5)),
]
LAMB_CASES = [
    ("lamb", dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.01,
                  max_grad_norm=0.0, nvlamb=False)),
    ("lamb-nowd", dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0,
                       max_grad_norm=0.0, nvlamb=False)),
    ("lamb-nvlamb-clip", dict(lr=2e-2, beta1=0.85, beta2=0.99, eps=1e-6, weight_decay=0.1,
                              max_grad_norm=1.0, nvlamb=True)),
]

LR_CASES = [
    ("constant-warmup", dict(kind="constant", base_lr=0.1, steps_per_epoch=10, total_steps=100,
                             warmup_steps=25)),
    ("step", dict(kind="step", base_lr=0.1, steps_per_epoch=10, total_steps=200, gamma=0.1,
                  step_size=3)),
    ("step-longer-than-run", dict(kind="step", base_lr=0.1, steps_per_epoch=10, total_steps=200,
                                  warmup_steps=25, gamma=0.1, step_size=50)),
    ("multistep-warmup", dict(kind="multistep", base_lr=0.4, steps_per_epoch=13, total_steps=150,
                              warmup_steps=20, gamma=0.2, milestones=[1, 5, 9, 30])),
    ("multistep", dict(kind="multistep", base_lr=0.05, steps_per_epoch=20, total_steps=100,
                       gamma=0.5, milestones=[1, 2, 3])),
    ("cosine", dict(kind="cosine", base_lr=0.1, steps_per_epoch=30, total_steps=300)),
    ("cosine-warmup", dict(kind="cosine", base_lr=0.5, steps_per_epoch=25, total_steps=300,
                           warmup_steps=40, min_lr=1e-3)),
    ("cosine-warmup-epochs", dict(kind="cosine", base_lr=0.2, steps_per_epoch=7,
                                  total_steps=210, warmup_epochs=3)),
]


def hexf(a):
    a = np.ascontiguousarray(np.asarray(a, dtype=F32))
    return " ".join("%08x" % x for x in a.view(np.uint32))


def write_json(outdir, name, obj):
    """Atomically: a reader never sees half a file."""
    text = json.dumps(obj, indent=1, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(prefix="." + name, dir=outdir)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.rename(tmp, os.path.join(outdir, name))
    except BaseException:
        os.unlink(tmp)
        raise


def make_inputs():
    gen = torch.Generator().manual_seed(20240601)
    p = torch.full((TOTAL,), GAP_PARAM)
    for _, off, n, _, init in SEGMENTS:
        if init == "randn":
            p[off:off + n] = torch.randn(n, generator=gen) * 0.5
        elif init == "zeros":
            p[off:off + n] = 0.0
        else:
            p[off:off + n] = 1.0
    grads = []
    for _ in range(STEPS):
        g = torch.full((TOTAL,), GAP_GRAD)
        for _, off, n, _, _ in SEGMENTS:
            g[off:off + n] = torch.randn(n, generator=gen)
        grads.append(g)
    return p, grads


def lrs_for(base):
    # a different lr every step, as under a schedule
    return [base * (1.0 - 0.15 * s) for s in range(STEPS)]


def split(flat):
    """The segments of a flat tensor as separate leaf tensors (torch's parameter list)."""
    return [flat[off:off + n].clone() for _, off, n, _, _ in SEGMENTS]


def to_flat(tensors, fill):
    out = torch.full((TOTAL,), fill)
    for t, (_, off, n, _, _) in zip(tensors, SEGMENTS):
        out[off:off + n] = t
    return out


def groups(params, wd):
    dec = [p for p, s in zip(params, SEGMENTS) if s[3]]
    nodec = [p for p, s in zip(params, SEGMENTS) if not s[3]]
    return [dict(params=dec, weight_decay=wd), dict(params=nodec, weight_decay=0.0)]


def run_torch(p0, grads, case, make_opt, state_keys):
    params = [torch.nn.Parameter(t) for t in split(p0)]
    opt = make_opt(params)
    steps = []
    for s, lr in enumerate(case["lr"]):
        for group in opt.param_groups:
            group["lr"] = lr
        for p, g in zip(params, split(grads[s])):
            p.grad = g
        opt.step()
        rec = {"params": hexf(to_flat([p.detach() for p in params], GAP_PARAM))}
        for key in state_keys:
            rec[key] = hexf(to_flat([opt.state[p][key] for p in params], 0.0))
        steps.append(rec)
    return steps


def lamb_reference(p0, grads, h, lrs):
    """LAMB as trainer/optim/optim.h states it (apex FusedLAMB, adam_w_mode), in float32 torch ops
    one at a time; norms in float64."""
    params = split(p0)
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    b1, b2, wd = h["beta1"], h["beta2"], h["weight_decay"]
    steps = []
    for s, lr in enumerate(lrs):
        t = s + 1
        g = split(grads[s])
        clip = F32(1.0)
        if h["max_grad_norm"] > 0:
            gn = F32(math.sqrt(sum(float((x.double() ** 2).sum()) for x in g)))
            mg = F32(h["max_grad_norm"])
            if gn > mg:
                clip = gn / mg
        bc1, bc2 = F32(1 - b1 ** t), F32(1 - b2 ** t)
        for i, (_, _, _, decay, _) in enumerate(SEGMENTS):
            sg = g[i] / float(clip) if clip != 1 else g[i]
            m[i].mul_(b1).add_(sg, alpha=1 - b1)
            v[i].mul_(b2).addcmul_(sg, sg, value=1 - b2)
            u = (m[i] / float(bc1)) / ((v[i] / float(bc2)).sqrt() + h["eps"])
            use_wd = decay and wd != 0
            if use_wd:
                u = u.add(params[i], alpha=wd)
            ratio = F32(lr)
            if h["nvlamb"] or use_wd:
                pn = F32(math.sqrt(float((params[i].double() ** 2).sum())))
                un = F32(math.sqrt(float((u.double() ** 2).sum())))
                if pn != 0 and un != 0:
                    ratio = F32(lr) * (pn / un)
            params[i].add_(u, alpha=-float(ratio))
        steps.append({"params": hexf(to_flat(params, GAP_PARAM)),
                      "exp_avg": hexf(to_flat(m, 0.0)), "exp_avg_sq": hexf(to_flat(v, 0.0))})
    return steps


def optimizer_cases(outdir):
    p0, grads = make_inputs()
    write_json(outdir, "optim-inputs.json", {
        "total": TOTAL,
        "segments": [dict(name=n, offset=o, count=c, decay=d) for n, o, c, d, _ in SEGMENTS],
        "params": hexf(p0),
        "grads": [hexf(g) for g in grads],
    })
    for name, h in SGD_CASES:
        case = dict(kind="sgd", lr=lrs_for(h["lr"]), **{k: v for k, v in h.items() if k != "lr"})
        keys = ["momentum_buffer"] if h["momentum"] else []
        case["steps"] = run_torch(p0, grads, case, lambda ps: torch.optim.SGD(
            groups(ps, h["weight_decay"]), lr=h["lr"], momentum=h["momentum"],
            dampening=h["dampening"], nesterov=h["nesterov"], foreach=False), keys)
        write_json(outdir, "optim-%s.json" % name, case)
    for name, h in ADAMW_CASES:
        case = dict(kind="adamw", lr=lrs_for(h["lr"]),
                    **{k: v for k, v in h.items() if k != "lr"})
        case["steps"] = run_torch(p0, grads, case, lambda ps: torch.optim.AdamW(
            groups(ps, h["weight_decay"]), lr=h["lr"], betas=(h["beta1"], h["beta2"]),
            eps=h["eps"], foreach=False), ["exp_avg", "exp_avg_sq"])
        write_json(outdir, "optim-%s.json" % name, case)
    for name, h in LAMB_CASES:
        case = dict(kind="lamb", lr=lrs_for(h["lr"]),
                    **{k: v for k, v in h.items() if k != "lr"})
        case["steps"] = lamb_reference(p0, grads, h, case["lr"])
        write_json(outdir, "optim-%s.json" % name, case)


def torch_lrs(c):
    """The lr of each step from torch's schedulers (compositions in lr_schedule.h)."""
    S = torch.optim.lr_scheduler
    spe, total = c["steps_per_epoch"], c["total_steps"]
    warm = c.get("warmup_steps", 0) or c.get("warmup_epochs", 0) * spe
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=c["base_lr"])
    per_iter, per_epoch = [], []
    if c["kind"] == "cosine":
        cos = S.CosineAnnealingLR(opt, T_max=total - warm, eta_min=c.get("min_lr", 0.0))
        if warm > 1:
            lin = S.LinearLR(opt, start_factor=1.0 / warm, end_factor=1.0, total_iters=warm - 1)
            per_iter.append(S.SequentialLR(opt, [lin, cos], milestones=[warm]))
        else:
            per_iter.append(cos)
    else:
        if warm > 1:
            per_iter.append(S.LinearLR(opt, start_factor=1.0 / warm, end_factor=1.0,
                                       total_iters=warm - 1))
        if c["kind"] == "step":
            per_epoch.append(S.StepLR(opt, step_size=c["step_size"], gamma=c["gamma"]))
        elif c["kind"] == "multistep":
            per_epoch.append(S.MultiStepLR(opt, milestones=c["milestones"], gamma=c["gamma"]))
    lrs = []
    for s in range(total):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        for sch in per_iter:
            sch.step()
        if (s + 1) % spe == 0:
            for sch in per_epoch:
                sch.step()
    return lrs


def schedule_cases(outdir):
    for name, c in LR_CASES:
        case = dict(c)
        case["lr"] = torch_lrs(c)
        write_json(outdir, "optim-lr-%s.json" % name, case)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "data")
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=UserWarning)  # SequentialLR's step(0)
    optimizer_cases(outdir)
    schedule_cases(outdir)


if __name__ == "__main__":
    main()
