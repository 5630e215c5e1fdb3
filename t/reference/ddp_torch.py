#!/usr/bin/python3
"""ddp_torch.py — an independent PyTorch DDP run of a dptrain config, to compare dptrain against.

Trains the model a dptrain config names (mlp, lenet or resnet18 with the small stem on idx
data such as Fashion-MNIST) with
PyTorch's own DistributedDataParallel on the CPU: NPROC worker processes (gloo, env://, started
here rather than by torchrun), each with the per-rank batch data.batch_size drawn through
DistributedSampler(seed=data.seed, shuffle=data.shuffle, drop_last=data.drop_remainder) and
set_epoch(epoch), gradients averaged by DDP, the optimizer of the config (sgd / momentum with
momentum, nesterov, weight_decay; adamw with betas, eps, weight_decay) at a constant learning
rate, and train.label_smoothing; precision.mode bf16 as CPU autocast to bfloat16. Pixels are
fed as ToTensor does (v / 255 in float32), then data.transforms.normalize when it is given;
random augmentations are refused.

    ddp_torch.py --nproc 2 --config X.json --init W.safetensors --steps 20 --out DIR
        trains STEPS steps (across epochs as needed) from the weights in W.safetensors and
        writes DIR/losses.rank<R>.jsonl ({"step": S, "loss": L} per line, S from 1, L the
        rank's own mean loss on its batch) and DIR/model.safetensors (rank 0, the final
        state_dict in float32 under torch's names).
    ddp_torch.py --save-init W.safetensors --config X.json
        builds the model after torch.manual_seed(seed of the config) and saves its initial
        weights, so both trainers can start from the same ones.

The networks are t/reference/gen_model.py's (mlp with other model.hidden widths is the same
stack of fc1..fcN). Run with Debian's python3-torch (torch and numpy, no safetensors package
needed). Exit status 0 on success, 1 with a message starting "ddp_torch: " otherwise.
"""
import argparse
import datetime
import gzip
import json
import math
import os
import socket
import struct
import subprocess
import sys
import time
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = "ddp_torch"


class Failure(Exception):
    """An error to report as one line and exit 1."""


def fail(msg):
    raise Failure(msg)


# ---------------------------------------------------------------------------------------------
# models


def gen_model():
    """t/reference/gen_model.py as a module. It imports torchvision at the top but only uses it
    for the resnets, so a stand-in module is enough where torchvision is not installed."""
    sys.path.insert(0, HERE)
    try:
        try:
            import gen_model as gm
        except ImportError as e:
            if getattr(e, "name", None) != "torchvision":
                raise
            sys.modules["torchvision"] = types.ModuleType("torchvision")
            import gen_model as gm
    finally:
        sys.path.remove(HERE)
    return gm


class WideMLP(nn.Module):
    """gen_model.MLP with any hidden widths: fc1..fcN+1 with ReLU between, as dptrain's mlp."""

    def __init__(self, inputs, hidden, classes):
        super().__init__()
        widths = [inputs] + list(hidden) + [classes]
        self.names = []
        for i in range(len(widths) - 1):
            name = "fc%d" % (i + 1)
            setattr(self, name, nn.Linear(widths[i], widths[i + 1]))
            self.names.append(name)

    def forward(self, x):
        x = torch.flatten(x, 1)
        for i, name in enumerate(self.names):
            x = getattr(self, name)(x)
            if i + 1 < len(self.names):
                x = F.relu(x)
        return x


def build_model(cfg):
    m = cfg.get("model", {})
    name = m.get("name")
    classes = m.get("num_classes", 10)
    shape = list(m.get("input_shape", [1, 28, 28]))
    gm = gen_model()
    if name == "mlp":
        hidden = list(m.get("hidden", [512, 512]))
        if hidden == [512, 512] and shape == [1, 28, 28]:
            return gm.MLP(classes)
        return WideMLP(shape[0] * shape[1] * shape[2], hidden, classes)
    if name == "lenet":
        if shape != [1, 28, 28]:
            fail("model.input_shape %s: this reference has LeNet for [1, 28, 28] only" % shape)
        return gm.LeNet(classes)
    if name == "resnet18" and m.get("stem", "small") == "small":
        # torchvision's ResNet-18 with the small stem (3x3 conv, no max pool) of gen_model,
        # on as many input channels as the data has: a model with BatchNorm, to check that
        # dptrain normalises with per-rank statistics and broadcasts rank 0's buffers as DDP
        model = gm.resnet_small(18, classes)
        model.conv1 = nn.Conv2d(shape[0], 64, 3, 1, 1, bias=False)
        return model
    fail("model.name %r: this reference runs mlp, lenet and resnet18 (small stem) only"
         % (name,))


# ---------------------------------------------------------------------------------------------
# safetensors, by hand (the safetensors package is not needed)

ST_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64,
             "I32": np.int32, "U8": np.uint8}


def read_safetensors(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail("%s: cannot read: %s" % (path, e.strerror))
    if len(data) < 8:
        fail("%s: not a safetensors file (%d bytes)" % (path, len(data)))
    (hlen,) = struct.unpack("<Q", data[:8])
    if hlen > len(data) - 8:
        fail("%s: not a safetensors file (header of %d bytes in a %d-byte file)"
             % (path, hlen, len(data)))
    try:
        header = json.loads(data[8:8 + hlen])
    except ValueError as e:
        fail("%s: bad safetensors header: %s" % (path, e))
    body = memoryview(data)[8 + hlen:]
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        if not 0 <= a <= b <= len(body):
            fail("%s: tensor %s: data offsets [%d, %d] outside the file" % (path, name, a, b))
        dt = h["dtype"]
        if dt == "BF16":
            raw = np.frombuffer(body[a:b], dtype="<u2").astype(np.uint32) << 16
            arr = raw.view(np.float32)
        elif dt in ST_DTYPES:
            arr = np.frombuffer(body[a:b], dtype=np.dtype(ST_DTYPES[dt]).newbyteorder("<"))
        else:
            fail("%s: tensor %s: dtype %s is not supported" % (path, name, dt))
        if arr.size != math.prod(h["shape"]):
            fail("%s: tensor %s: %d values for shape %s" % (path, name, arr.size, h["shape"]))
        out[name] = torch.from_numpy(arr.reshape(h["shape"]).copy())
    return out


def write_safetensors(path, tensors):
    """Writes name -> tensor as safetensors (floats as F32), atomically."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        if t.is_floating_point():
            t = t.float()
        dtype = {torch.float32: "F32", torch.int64: "I64", torch.int32: "I32"}[t.dtype]
        a = t.numpy()
        data = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text.encode())
        for b in blobs:
            f.write(b)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_init(model, path):
    state = read_safetensors(path)
    want = model.state_dict()
    missing = sorted(set(want) - set(state))
    extra = sorted(set(state) - set(want))
    if missing or extra:
        fail("%s: names do not match the model: missing %s, unexpected %s"
             % (path, missing or "none", extra or "none"))
    for k, v in want.items():
        if tuple(state[k].shape) != tuple(v.shape):
            fail("%s: tensor %s has shape %s; the model needs %s"
                 % (path, k, list(state[k].shape), list(v.shape)))
        state[k] = state[k].to(v.dtype)
    model.load_state_dict(state, strict=True)


# ---------------------------------------------------------------------------------------------
# config


def load_config(path):
    try:
        with open(path) as f:
            cfg = json.load(f)
    except OSError as e:
        fail("%s: cannot read: %s" % (path, e.strerror))
    except ValueError as e:
        fail("%s: invalid JSON: %s" % (path, e))
    if not isinstance(cfg, dict):
        fail("%s: the config must be a JSON object" % path)
    cfg["_dir"] = os.path.dirname(os.path.abspath(path))
    cfg["_path"] = path
    return cfg


def resolve(cfg, p):
    return p if os.path.isabs(p) else os.path.join(cfg["_dir"], p)


def train_files(cfg):
    data = cfg.get("data", {})
    if data.get("format") != "idx":
        fail("%s: data.format %r: this reference reads idx files only"
             % (cfg["_path"], data.get("format")))
    images = labels = None
    if "dir" in data:
        d = resolve(cfg, data["dir"])

        def std(name):
            p = os.path.join(d, name)
            return p if os.path.exists(p) else p + ".gz"
        images, labels = std("train-images-idx3-ubyte"), std("train-labels-idx1-ubyte")
    train = data.get("train", {})
    if "images" in train:
        images = resolve(cfg, train["images"])
    if "labels" in train:
        labels = resolve(cfg, train["labels"])
    if not images or not labels:
        fail("%s: data.train.images and data.train.labels (or data.dir) are needed" % cfg["_path"])
    return images, labels


def check_supported(cfg):
    """Refuses what this reference does not reproduce, naming the key."""
    where = cfg["_path"]
    tr = cfg.get("data", {}).get("transforms", {})
    for k in tr:
        if k == "normalize":
            continue
        if k == "horizontal_flip" and tr[k] is False:
            continue
        fail("%s: data.transforms.%s: random augmentations are not supported here; remove it"
             % (where, k))
    sched = cfg.get("lr_schedule", {})
    if sched.get("name", "constant") != "constant":
        fail("%s: lr_schedule.name %r: only a constant learning rate is supported here"
             % (where, sched.get("name")))
    if sched.get("warmup_steps", 0) or sched.get("warmup_epochs", 0):
        fail("%s: lr_schedule warmup is not supported here; use a constant learning rate" % where)
    par = cfg.get("parallel", {})
    if par.get("gradients_mean", True) is not True:
        fail("%s: parallel.gradients_mean false is not supported here (DDP averages)" % where)
    if par.get("grad_accumulation_step", 1) != 1:
        fail("%s: parallel.grad_accumulation_step > 1 is not supported here" % where)
    mode = cfg.get("precision", {}).get("mode", "fp32")
    if mode not in ("fp32", "tf32", "O0", "bf16"):
        fail("%s: precision.mode %r: only fp32 and bf16 are supported here" % (where, mode))
    name = cfg.get("optimizer", {}).get("name", "sgd")
    if name not in ("sgd", "momentum", "adamw"):
        fail("%s: optimizer.name %r: only sgd, momentum and adamw are supported here"
             % (where, name))


def make_optimizer(cfg, model):
    o = cfg.get("optimizer", {})
    name = o.get("name", "sgd")
    lr = float(o.get("lr", 1e-3))
    wd = float(o.get("weight_decay", 0.0 if name in ("sgd", "momentum") else 0.01))
    params = list(model.named_parameters())
    if o.get("no_decay_bn_bias", False):
        groups = [{"params": [p for n, p in params if p.ndim > 1], "weight_decay": wd},
                  {"params": [p for n, p in params if p.ndim <= 1], "weight_decay": 0.0}]
    else:
        groups = [{"params": [p for n, p in params], "weight_decay": wd}]
    if name in ("sgd", "momentum"):
        momentum = float(o.get("momentum", 0.9 if name == "momentum" else 0.0))
        return torch.optim.SGD(groups, lr=lr, momentum=momentum,
                               nesterov=bool(o.get("nesterov", False)), foreach=False)
    betas = tuple(float(b) for b in o.get("betas", [0.9, 0.999]))
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=float(o.get("eps", 1e-8)),
                             foreach=False)


# ---------------------------------------------------------------------------------------------
# data


def read_idx(path, magic, what):
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as e:
        fail("%s: cannot read the %s: %s" % (path, what, e))
    ndim = magic & 0xff
    if len(data) < 4 + 4 * ndim or struct.unpack(">I", data[:4])[0] != magic:
        fail("%s: not an idx %s file (expected magic 0x%08x)" % (path, what, magic))
    dims = struct.unpack(">%dI" % ndim, data[4:4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != math.prod(dims):
        fail("%s: %d bytes of %s for dimensions %s" % (path, body.size, what, list(dims)))
    return body.reshape(dims)


class IdxSet(torch.utils.data.Dataset):
    """Images as uint8, turned into float32 per sample through a 256-entry table:
    ((v / 255) - mean) / std in float32, as trainer/data/transform.c does."""

    def __init__(self, cfg):
        images, labels = train_files(cfg)
        x = read_idx(images, 0x00000803, "images")
        y = read_idx(labels, 0x00000801, "labels")
        if x.shape[0] != y.shape[0]:
            fail("%s has %d images but %s has %d labels" % (images, x.shape[0], labels, y.shape[0]))
        shape = list(cfg.get("model", {}).get("input_shape", [1, 28, 28]))
        if [1, x.shape[1], x.shape[2]] != shape:
            fail("%s: %dx%d images do not fit model.input_shape %s"
                 % (images, x.shape[1], x.shape[2], shape))
        classes = cfg.get("model", {}).get("num_classes", 10)
        if y.size and int(y.max()) >= classes:
            fail("%s: label %d is not below model.num_classes %d" % (labels, y.max(), classes))
        norm = cfg.get("data", {}).get("transforms", {}).get("normalize")
        mean, std = (norm["mean"][0], norm["std"][0]) if norm else (0.0, 1.0)
        v = np.arange(256, dtype=np.float32)
        lut = (v / np.float32(255.0) - np.float32(mean)) / np.float32(std)
        self.lut = torch.from_numpy(lut.astype(np.float32))
        self.x = torch.from_numpy(x.reshape(x.shape[0], 1, x.shape[1], x.shape[2]).copy())
        self.y = torch.from_numpy(y.astype(np.int64))

    def __len__(self):
        return self.x.shape[0]

    def __getitem__(self, i):
        return self.lut[self.x[i].long()], self.y[i]


# ---------------------------------------------------------------------------------------------
# one worker


def worker(args):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data.distributed import DistributedSampler

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    cfg = load_config(args.config)
    check_supported(cfg)
    data = cfg.get("data", {})
    seed = int(cfg.get("seed", 0))
    dseed = int(data.get("seed", seed))
    batch = int(data.get("batch_size", 32))
    shuffle = bool(data.get("shuffle", True))
    drop = bool(data.get("drop_remainder", True))
    smoothing = float(cfg.get("train", {}).get("label_smoothing", 0.0))

    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout))
    torch.manual_seed(seed)
    model = build_model(cfg)
    load_init(model, args.init)
    ddp = DDP(model)
    opt = make_optimizer(cfg, ddp.module)
    ds = IdxSet(cfg)
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=shuffle,
                                 seed=dseed, drop_last=drop)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, sampler=sampler, num_workers=0,
                                         drop_last=drop)
    if len(loader) == 0:
        fail("%s: an epoch has no steps (%d samples per rank, batch %d)"
             % (args.config, len(sampler), batch))
    # precision.mode bf16: CPU autocast to bfloat16 (convolutions and matrix products in
    # bfloat16, float32 weights, gradients and optimizer), as dptrain's bf16 on the CPU
    import contextlib
    bf16 = cfg.get("precision", {}).get("mode", "fp32") == "bf16"
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else \
        contextlib.nullcontext
    log = open(os.path.join(args.out, "losses.rank%d.jsonl" % rank), "w")
    step, epoch = 0, 0
    ddp.train()
    while step < args.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad(set_to_none=True)
            with autocast():
                loss = F.cross_entropy(ddp(x), y, label_smoothing=smoothing)
            loss.backward()
            opt.step()
            step += 1
            log.write(json.dumps({"step": step, "loss": loss.item()}) + "\n")
            if step == args.steps:
                break
        epoch += 1
    log.close()
    if rank == 0:
        write_safetensors(os.path.join(args.out, "model.safetensors"), ddp.module.state_dict())
    dist.barrier()
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------
# the launcher


def held_port():
    """A free port of 127.0.0.1 and the socket that holds it until the workers are done: bound
    with SO_REUSEADDR but not listening, so no other program gets it while the workers start
    (a port that was only free a moment ago can be taken before rank 0 binds it), and rank 0's
    TCPStore, which sets SO_REUSEADDR too, can still bind it and listen."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    return s, s.getsockname()[1]


def ended(procs):
    """How the ranks that failed ended, e.g. "rank 1 was killed by signal 15"."""
    out = []
    for r, p in enumerate(procs):
        rc = p.poll()
        if rc is not None and rc < 0:
            out.append("rank %d was killed by signal %d" % (r, -rc))
        elif rc:
            out.append("rank %d exited with status %d" % (r, rc))
    return ", ".join(out)


def launch(args):
    """Starts the workers, waits for all; on a failure or the timeout kills the rest."""
    # what every rank would refuse is reported once, before any worker starts
    cfg = load_config(args.config)
    check_supported(cfg)
    load_init(build_model(cfg), args.init)
    for p in train_files(cfg):
        if not os.path.exists(p):
            fail("%s: data: %s does not exist" % (args.config, p))
    os.makedirs(args.out, exist_ok=True)
    holder, port = held_port()
    procs = []
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--config", args.config,
           "--init", args.init, "--steps", str(args.steps), "--out", args.out,
           "--timeout", str(args.timeout)]
    for r in range(args.nproc):
        # USE_LIBUV=0: PyTorch 2.4 and later ask for the libuv TCPStore by default, and Debian
        # 13's torch 2.6 is built without libuv ("use_libuv was requested but PyTorch was build
        # without libuv support"); the classic store is also the one held_port's SO_REUSEADDR
        # trick is known to work with. Older torch ignores the variable.
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                   WORLD_SIZE=str(args.nproc), LOCAL_RANK=str(r), OMP_NUM_THREADS="1",
                   USE_LIBUV="0")
        procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL))
    deadline = time.monotonic() + args.timeout
    err = None
    try:
        while any(p.poll() is None for p in procs):
            if any(p.returncode not in (None, 0) for p in procs):
                time.sleep(0.5)  # let a rank that failed with it report too
                err = ended(procs) + "; stopped the others"
                break
            if time.monotonic() > deadline:
                err = "timed out after %d s (--timeout); stopped the workers" % args.timeout
                break
            time.sleep(0.05)
        else:
            if any(p.returncode != 0 for p in procs):
                err = ended(procs)
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
        holder.close()
    if err:
        fail(err)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="dptrain job config (JSON)")
    ap.add_argument("--nproc", type=int, default=2, help="number of ranks (default 2)")
    ap.add_argument("--init", help="safetensors file with the initial weights")
    ap.add_argument("--steps", type=int, default=20, help="optimizer steps (default 20)")
    ap.add_argument("--out", help="output directory")
    ap.add_argument("--timeout", type=int, default=600,
                    help="seconds before the whole run is stopped (default 600)")
    ap.add_argument("--save-init", metavar="W.safetensors",
                    help="only save the initial weights of the config's model, seeded by its seed")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    who = PROG + (": rank %s" % os.environ.get("RANK", "?") if args.worker else "")
    try:
        if args.save_init:
            cfg = load_config(args.config)
            torch.manual_seed(int(cfg.get("seed", 0)))
            write_safetensors(args.save_init, build_model(cfg).state_dict())
            return 0
        if not args.init or not args.out:
            ap.error("--init and --out are needed to train (or give --save-init)")
        if args.nproc < 1 or args.steps < 1:
            ap.error("--nproc and --steps must be >= 1")
        if args.worker:
            worker(args)
        else:
            launch(args)
    except Failure as e:
        print("%s: %s" % (who, e), file=sys.stderr)
        return 1
    except Exception as e:  # a bug or torch's own error: say which rank, then the traceback
        print("%s: %s: %s" % (who, type(e).__name__, e), file=sys.stderr)
        if args.worker:
            import traceback
            traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
