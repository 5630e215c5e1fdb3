#!/usr/bin/python3
# resnet50-torch.py — PyTorch's side of the GPU training benchmark: torchvision ResNet-50 at
# 224x224 with 1000 classes, one synthetic batch made once on the device, SGD momentum 0.9, a
# step = forward + cross-entropy + backward + optimizer step, channels_last, cudnn.benchmark.
# Reads and writes no files (unless --table-from); prints a markdown table or, with --json, JSON.
"""ResNet-50 training throughput in PyTorch (fp32, tf32, bf16 autocast).

Modes:  fp32  TF32 off for matmul and cuDNN (cuDNN's TF32 is on by default in PyTorch)
        tf32  torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32 on
        bf16  torch.autocast(device_type="cuda", dtype=torch.bfloat16), fp32 weights, TF32 off
        bf16-compile, bf16-max-autotune   bf16 with the model through torch.compile (mode
              default or max-autotune); compiling happens in the warm-up steps
img/s is batch / the median step time; on a GPU each step is timed with CUDA events, read
after torch.cuda.synchronize(). TFLOP/s assumes 24.5 GFLOP per training image, the figure the
issue states: the forward pass is 4.1 G multiply-adds (8.2 GFLOP) and a training step costs
about 3 forward passes (backward ~2x forward), 3 x 8.2 ~= 24.5 GFLOP. It counts the model's
arithmetic only, not what a kernel really does (cuDNN's Winograd/FFT do less).
The default batch is the largest power of two <= 256 that trains without running out of
device memory, found per mode by trying 256, 128, ... down to 1.

  python3 contrib/bench/resnet50-torch.py [--modes bf16,tf32,fp32] [--batch N] [--json]
  /usr/bin/python3 contrib/bench/resnet50-torch.py --device cpu --batch 2 --steps 2 \\
      --warmup 1 --modes fp32                            (smoke test without a GPU)
  python3 contrib/bench/resnet50-torch.py --table-from a.json b.json   (merge --json outputs)
  python3 contrib/bench/resnet50-torch.py --images DIR [--workers N] --batch B --modes bf16

--images DIR: real JPEGs instead of the synthetic batch: torchvision's ImageFolder on
DIR/train with RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize, a
DataLoader of --workers processes (default the host's cores less 2, pin_memory, shuffled),
each batch copied to the device (non_blocking) in the step. The rows are "MODE jpeg"; a step is
timed on the wall clock (the loader's wait is part of it, which CUDA events would miss), and
data_wait_ms is the median time a step waited for its batch. Give --batch (finding it would
start a DataLoader per try).

Exit status: 0 all modes ran, 1 a mode failed (its row says why), 2 torch/torchvision or the
device is missing.
"""
import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time

GFLOP_PER_IMAGE = 24.5
MODES = ("fp32", "tf32", "bf16", "bf16-compile", "bf16-max-autotune")
# torch.compile's mode for each compiled mode (the model, forward and backward, is compiled;
# the optimizer step stays eager, as in most training scripts)
COMPILE = {"bf16-compile": "default", "bf16-max-autotune": "max-autotune"}


def die(msg, code=2):
    print("resnet50-torch: " + msg, file=sys.stderr)
    sys.exit(code)


def driver_version():
    """The NVIDIA driver's version (torch does not report it): nvidia-smi, else /proc."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        with open("/proc/driver/nvidia/version") as f:
            return f.readline().strip()
    except OSError:
        return None


def environment(torch, torchvision, dev):
    env = {"torch": torch.__version__, "torchvision": torchvision.__version__,
           "python": platform.python_version(), "host_cpus": os.cpu_count()}
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        env.update({"device": torch.cuda.get_device_name(dev),
                    "device_memory_gib": round(p.total_memory / 2**30, 1),
                    "compute_capability": "%d.%d" % (p.major, p.minor),
                    "driver": driver_version(), "cuda": torch.version.cuda,
                    "cudnn": torch.backends.cudnn.version()})
    else:
        env.update({"device": "cpu (%s)" % (platform.processor() or platform.machine()),
                    "torch_threads": torch.get_num_threads()})
    return env


def is_oom(torch, e):
    """Out of device memory, however it surfaces (allocator, cuDNN or cuBLAS workspace)."""
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(e, oom_type):
        return True
    s = str(e)
    return isinstance(e, RuntimeError) and ("out of memory" in s or "ALLOC_FAILED" in s
                                            or "NOT_ENOUGH_WORKSPACE" in s)


def set_mode(torch, mode):
    tf32 = mode == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    return {"matmul_allow_tf32": tf32, "cudnn_allow_tf32": tf32,
            "autocast": "bfloat16" if mode.startswith("bf16") else None,
            "compile": COMPILE.get(mode)}


class JpegFeed:
    """Batches of real JPEGs through torchvision's ImageFolder and a DataLoader."""

    def __init__(self, torch, dev, batch, root, workers):
        from torchvision import datasets, transforms as T
        tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
        ds = datasets.ImageFolder(os.path.join(root, "train"), tf)
        self.torch, self.dev = torch, dev
        more = {"persistent_workers": True, "prefetch_factor": 4} if workers > 0 else {}
        self.loader = torch.utils.data.DataLoader(
            ds, batch_size=batch, shuffle=True, num_workers=workers, drop_last=True,
            pin_memory=dev.type == "cuda", **more)
        self.it = iter(self.loader)
        self.waits = []

    def next(self):
        t0 = time.perf_counter()
        try:
            x, y = next(self.it)
        except StopIteration:
            self.it = iter(self.loader)
            x, y = next(self.it)
        self.waits.append(time.perf_counter() - t0)
        cl = self.torch.channels_last
        return (x.to(self.dev, non_blocking=True).contiguous(memory_format=cl),
                y.to(self.dev, non_blocking=True))


class Trainer:
    """One model, optimizer and synthetic batch (or JPEG feed) on the device."""

    def __init__(self, torch, torchvision, dev, mode, batch, feed=None):
        self.torch, self.dev, self.mode, self.batch, self.feed = torch, dev, mode, batch, feed
        try:
            model = torchvision.models.resnet50(weights=None, num_classes=1000)
        except TypeError:  # torchvision < 0.13
            model = torchvision.models.resnet50(pretrained=False, num_classes=1000)
        self.model = model.to(dev, memory_format=torch.channels_last).train()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        if mode in COMPILE:
            self.model = torch.compile(self.model, mode=COMPILE[mode])
        self.loss_fn = torch.nn.CrossEntropyLoss()
        g = torch.Generator(device=dev).manual_seed(0)
        self.x = torch.randn(batch, 3, 224, 224, device=dev, generator=g).contiguous(
            memory_format=torch.channels_last)
        self.y = torch.randint(0, 1000, (batch,), device=dev, generator=g)

    def step(self):
        torch = self.torch
        x, y = self.feed.next() if self.feed else (self.x, self.y)
        self.opt.zero_grad(set_to_none=True)
        if self.mode.startswith("bf16"):
            with torch.autocast(device_type=self.dev.type, dtype=torch.bfloat16):
                loss = self.loss_fn(self.model(x), y)
        else:
            loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss


def free(torch, dev):
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()


def fit_batch(torch, torchvision, dev, mode):
    """The largest power of two <= 256 whose training step (2 of them: the second holds the
    momentum buffers) does not run out of device memory."""
    b = 256
    while b >= 1:
        t = None
        try:
            t = Trainer(torch, torchvision, dev, mode, b)
            t.step()
            t.step()
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            return b
        except Exception as e:  # noqa: BLE001 - only OOM is retried, everything else raised
            if not is_oom(torch, e):
                raise
        finally:
            del t
            free(torch, dev)
        b //= 2
    raise RuntimeError("out of device memory even at batch 1")


def run_mode(torch, torchvision, dev, mode, args):
    row = {"mode": mode + (" jpeg" if args.images else ""), "flags": set_mode(torch, mode),
           "warmup": args.warmup, "steps": args.steps}
    try:
        batch = args.batch or fit_batch(torch, torchvision, dev, mode)
        row["batch"], row["batch_found"] = batch, not args.batch
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        feed = JpegFeed(torch, dev, batch, args.images, args.workers) if args.images else None
        t = Trainer(torch, torchvision, dev, mode, batch, feed)
        for _ in range(args.warmup):
            t.step()
        ms = []
        if feed:  # the wall clock per step: the loader's wait included
            sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: 0)
            sync()
            feed.waits = []
            for _ in range(args.steps):
                t0 = time.perf_counter()
                loss = t.step()
                sync()
                ms.append((time.perf_counter() - t0) * 1e3)
            row["data_wait_ms"] = round(statistics.median(feed.waits) * 1e3, 3)
            row["loader_workers"] = args.workers
            row["peak_mem_gib"] = (round(torch.cuda.max_memory_allocated(dev) / 2**30, 2)
                                   if dev.type == "cuda" else None)
        elif dev.type == "cuda":
            torch.cuda.synchronize(dev)
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(args.steps)]
            for a, b in ev:
                a.record()
                loss = t.step()
                b.record()
            torch.cuda.synchronize(dev)
            ms = [a.elapsed_time(b) for a, b in ev]
            row["peak_mem_gib"] = round(torch.cuda.max_memory_allocated(dev) / 2**30, 2)
        else:
            for _ in range(args.steps):
                t0 = time.perf_counter()
                loss = t.step()
                ms.append((time.perf_counter() - t0) * 1e3)
            row["peak_mem_gib"] = None
        med = statistics.median(ms)
        row.update({"status": "ok", "step_ms_median": round(med, 3),
                    "step_ms_min": round(min(ms), 3), "step_ms_max": round(max(ms), 3),
                    "img_per_s": round(batch * 1e3 / med, 1),
                    "tflops": round(batch * 1e3 / med * GFLOP_PER_IMAGE / 1e3, 2),
                    "final_loss": round(float(loss), 4)})
        del t
    except Exception as e:  # noqa: BLE001 - the row records it; the next mode still runs
        row.update({"status": "error", "error": "%s: %s" % (type(e).__name__, str(e)[:300])})
    free(torch, dev)
    return row


def table(reports):
    out = []
    for r in reports:
        e = r["env"]
        v = ["torch %s" % e["torch"], "torchvision %s" % e["torchvision"]]
        if "cuda" in e:
            v += ["CUDA %s" % e["cuda"], "cuDNN %s" % e["cudnn"], "driver %s" % e["driver"]]
        out.append("device: %s; %s" % (e["device"], ", ".join(v)))
    out.append("ResNet-50, 224x224, 1000 classes, SGD momentum, channels_last; TFLOP/s at "
               "%.1f GFLOP per training image" % GFLOP_PER_IMAGE)
    out.append("")
    out.append("| mode | batch | img/s | step ms (median) | TFLOP/s | peak GPU mem GiB |")
    out.append("|------|------:|------:|-----------------:|--------:|-----------------:|")
    for r in reports:
        for x in r["results"]:
            if x.get("status") != "ok":
                out.append("| %s | %s | failed: %s | | | |" % (
                    x["mode"], x.get("batch", "-"), x.get("error", "?").replace("|", "/")))
                continue
            mem = "n/a" if x["peak_mem_gib"] is None else "%.2f" % x["peak_mem_gib"]
            out.append("| %s | %d | %.1f | %.2f | %.2f | %s |" % (
                x["mode"], x["batch"], x["img_per_s"], x["step_ms_median"], x["tflops"], mem))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="bf16,tf32,fp32", help="comma list of fp32,tf32,bf16")
    ap.add_argument("--batch", type=int, default=0,
                    help="images per step (default: largest power of two <= 256 that fits)")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps first (default 20)")
    ap.add_argument("--steps", type=int, default=50, help="timed steps (default 50)")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--images", metavar="DIR",
                    help="real JPEGs from DIR/train (ImageFolder) instead of the synthetic batch")
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 3) - 2),
                    help="DataLoader worker processes with --images (default: cores - 2)")
    ap.add_argument("--table-from", nargs="+", metavar="JSON",
                    help="print one table from the JSON outputs of earlier runs, run nothing")
    args = ap.parse_args()

    if args.table_from:
        reports = []
        for p in args.table_from:
            try:
                with open(p) as f:
                    reports.append(json.load(f))
            except (OSError, ValueError) as e:
                die("%s: %s; it should hold what --json printed" % (p, e), 1)
        print(table(reports))
        return 0

    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        die("--modes %s: unknown mode %s; choose from %s" % (args.modes, ",".join(bad) or "(none)",
                                                              ",".join(MODES)))
    if args.steps < 1 or args.warmup < 0 or args.batch < 0:
        die("--steps must be >= 1, --warmup and --batch >= 0")
    if args.images and not os.path.isdir(os.path.join(args.images, "train")):
        die("--images %s: no %s/train (class folders of JPEGs)" % (args.images, args.images))
    if args.images and not args.batch:
        die("--images: give --batch (finding the largest would start a DataLoader per try)")
    if args.workers < 0:
        die("--workers must be >= 0")

    try:
        import torch
    except ImportError as e:
        die("PyTorch is not importable by %s (%s); install it or run another python"
            % (sys.executable, e))
    try:
        import torchvision
    except ImportError as e:
        die("torchvision is not importable by %s (%s), and the model comes from it; "
            "install torchvision (Debian: python3-torchvision) or run another python"
            % (sys.executable, e))

    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        die("--device %s: torch %s sees no CUDA device (built with CUDA %s); "
            "use --device cpu for a smoke test" % (args.device, torch.__version__,
                                                   torch.version.cuda))
    if dev.type == "cuda":
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(dev)
    if dev.type == "cpu" and "bf16" in modes:
        print("resnet50-torch: note: bf16 autocast on the CPU is a smoke test, not a benchmark",
              file=sys.stderr)
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)

    report = {"benchmark": "resnet50-train", "gflop_per_image": GFLOP_PER_IMAGE,
              "image": [3, 224, 224], "classes": 1000, "optimizer": "SGD momentum 0.9",
              "memory_format": "channels_last", "cudnn_benchmark": True,
              "env": environment(torch, torchvision, dev), "results": []}
    for m in modes:
        report["results"].append(run_mode(torch, torchvision, dev, m, args))
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(table([report]))
    return 0 if all(r["status"] == "ok" for r in report["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
