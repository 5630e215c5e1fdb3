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
# dptrain against PyTorch in another root (Debian 13 PyTorch 2.6: eager and torch.compile, float32
# and autocast bfloat16), interleaved rounds (as root: a private mount namespace; the overlay
# DIR is a layer of ours above ROOT, holding what torch.compile needs: g++, python3-dev,
# python3-setuptools, libtorch-dev):
#     /usr/bin/python3 contrib/bench/train-bench.py --root ROOT [--overlay DIR] [--rounds N]
#         [--isa avx2] [--no-bf16] [--no-fp32] [--no-compile] [--steps L] [--json FILE]
#         [--build DIR] [--in-root] [MODEL...]
# --in-root runs dptrain in the root too: DIR a build of this tree made there (against that
# release's oneDNN: `make O=build-deb13` in the overlay, its -dev packages installed in it).
# For every model and type short of 1.3x eager there, one more dptrain run with
# ONEDNN_VERBOSE=1 says where its step goes: each kind of oneDNN primitive (convolution passes,
# reorders, inner products, pooling) in ms per step, and the rest (dptrain's own kernels and
# Winograd convolutions, OpenMP's waits, the data, the optimizer); a "dptrain-profile" JSON line
# each.
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


def torch_side(name, warm, steps, mode="eager", dtype="fp32"):
    """mode eager or compile (torch.compile, Inductor; its compilation falls in the warm-up);
    dtype fp32 or bf16 (CPU autocast to bfloat16, as precision.mode bf16)."""
    import contextlib
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
    fwd = torch.compile(model) if mode == "compile" else model
    cast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if dtype == "bf16" else \
        contextlib.nullcontext
    perm = torch.randperm(len(y))
    model.train()
    t0 = None
    for i in range(warm + steps):
        if i == warm:
            t0 = time.perf_counter()
        idx = perm[(i * BATCH) % 59968:][:BATCH]
        xb = (x[idx].float() / 255 - 0.2860) / 0.3530
        with cast():
            loss = F.cross_entropy(fwd(xb), y[idx])
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


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "?"


def cpu_isa():
    """The CPU's widest vectors as allreduce-bench.sh names them: avx512f or avx2 (or sse),
    +amx where it has AMX tiles. Two CPUs of one model name may differ (an EPYC with AVX-512
    or with AVX2 only, as a hypervisor shows it)."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                fl = set(line.split(":", 1)[1].split())
                isa = "avx512f" if "avx512f" in fl else "avx2" if "avx2" in fl else "sse"
                return isa + ("+amx" if "amx_tile" in fl else "")
    return "?"


def root_cmd(root, upper, argv):
    """argv (a command of the root) run in the root at root, this tree at /mnt/dptrain and the
    data sets at their place, in a mount namespace of its own (nothing stays mounted); with
    upper, in an overlay of the root (our own layer: a compiler for torch.compile, say)."""
    script = "set -e\n"
    r = root
    if upper:
        os.makedirs(os.path.join(upper, "upper"), exist_ok=True)
        os.makedirs(os.path.join(upper, "work"), exist_ok=True)
        os.makedirs(os.path.join(upper, "merged"), exist_ok=True)
        r = os.path.join(upper, "merged")
        script += ("mount -t overlay overlay -o lowerdir=%s,upperdir=%s/upper,workdir=%s/work %s\n"
                   % (root, upper, upper, r))
    script += ("mount --bind /proc {r}/proc; mount --rbind /dev {r}/dev; "
               "mount --rbind /sys {r}/sys\n"
               "mkdir -p {r}/mnt/dptrain {r}{d}; mount --bind {top} {r}/mnt/dptrain; "
               "mount --bind {d} {r}{d}\n"
               'exec chroot {r} "$@"\n').format(r=r, top=TOP, d=os.path.dirname(FMNIST))
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"] + argv


def vs_root(args):
    """dptrain on this host against PyTorch in another root (Debian 13's PyTorch 2.6), eager
    and torch.compile, float32 and bfloat16, interleaved rounds; medians; JSON lines.
        train-bench.py --root ROOT [--overlay DIR] [--rounds N] [--isa avx2] [--no-bf16]
                       [--no-fp32] [--no-compile] [--steps L] [--json FILE] [--build DIR]
                       [--in-root] [MODEL...]"""
    import datetime
    import json
    root, upper, rounds, isa, jpath = args[0], None, 3, None, None
    build, bf16, fp32, compiled, models = os.path.join(TOP, "build"), True, True, True, []
    in_root = False
    i = 1
    while i < len(args):
        a = args[i]
        if a in ("--overlay", "--rounds", "--isa", "--json", "--build", "--steps"):
            v = args[i + 1]
            i += 1
            if a == "--overlay":
                upper = v
            elif a == "--rounds":
                rounds = int(v)
            elif a == "--isa":
                isa = v
            elif a == "--json":
                jpath = v
            elif a == "--steps":  # L for every model, instead of PLAN's
                PLAN.update((k, int(v)) for k in PLAN)
            else:
                build = v
        elif a == "--no-bf16":
            bf16 = False
        elif a == "--no-fp32":
            fp32 = False
        elif a == "--no-compile":
            compiled = False
        elif a == "--in-root":
            in_root = True
        else:
            models.append(a)
        i += 1
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS))
    if isa:  # oneDNN (dptrain's and PyTorch's) and ATen's own kernels capped alike
        env.update(ONEDNN_MAX_CPU_ISA=isa.upper(), ATEN_CPU_CAPABILITY=isa.lower())
    dtypes = (["fp32"] if fp32 else []) + (["bf16"] if bf16 else [])
    if not dtypes:
        sys.exit("train-bench.py: --no-fp32 and --no-bf16 leave nothing to measure")
    sides = [("dptrain", d) for d in dtypes] + [("torch-eager", d) for d in dtypes]
    if compiled:
        sides += [("torch-compile", d) for d in dtypes]
    commit = subprocess.run(["git", "-C", TOP, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    ver = subprocess.run(root_cmd(root, upper, ["python3", "-c",
                                                "import torch; print(torch.__version__)"]),
                         env=env, capture_output=True, text=True).stdout.strip()
    got = {}

    def dp_cmd(name, steps, tag, tmp):
        """dptrain's command for a run named tag: here, or in the root (--in-root)."""
        if not in_root:
            return dptrain_cmd(build, name, steps, os.path.join(tmp, tag))
        mnt = "/mnt/dptrain"
        return root_cmd(root, upper, dptrain_cmd(
            os.path.join(mnt, os.path.relpath(os.path.abspath(build), TOP)), name, steps,
            "/tmp/train-bench-%d-%d-%s" % (os.getpid(), time.time(), tag), top=mnt))

    with tempfile.TemporaryDirectory() as tmp:
        for name, steps in PLAN.items():
            if models and name not in models:
                continue
            for r in range(rounds):
                order = sides if r % 2 == 0 else sides[::-1]
                for tool, dt in order:
                    if tool == "dptrain":
                        cmd = dp_cmd(name, steps, "%s-%d-%s" % (name, r, dt), tmp) + [
                            "precision.mode=" + dt]
                        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
                        v = re.findall(r"([0-9.]+) img/s", out.stdout)
                    else:
                        cmd = root_cmd(root, upper, [
                            "python3", "/mnt/dptrain/contrib/bench/train-bench.py", "--torch",
                            name, str(steps), str(steps), tool[6:], dt])
                        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
                        v = re.findall(r"IMGS ([0-9.]+)", out.stdout)
                    if not v:
                        print("%s %s %s failed: %s" % (name, tool, dt, out.stderr[-2000:]),
                              file=sys.stderr)
                        continue
                    got.setdefault((name, tool, dt), []).append(float(v[-1]))
                    print("%s round %d %s %s: %s img/s" % (name, r, tool, dt, v[-1]),
                          file=sys.stderr)
    med = {k: sorted(v)[len(v) // 2] for k, v in got.items()}
    cpu, date = cpu_model(), datetime.datetime.utcnow().strftime("%Y-%m-%d")
    isa_s = isa or "best (oneDNN's and ATen's): " + cpu_isa()
    print("| model | dtype | dptrain img/s | PyTorch %s eager | torch.compile | vs eager |"
          " vs compile |" % ver)
    print("|---|---|---|---|---|---|---|")
    lines = []
    for name in PLAN:
        for dt in dtypes:
            d = med.get((name, "dptrain", dt))
            e = med.get((name, "torch-eager", dt))
            c = med.get((name, "torch-compile", dt))
            if d is None:
                continue
            f = lambda v: "%.1f" % v if v else "-"
            g = lambda v: "%.2fx" % (d / v) if v else "-"
            print("| %s | %s | %s | %s | %s | %s | %s |" % (name, dt, f(d), f(e), f(c), g(e),
                                                            g(c)))
            for tool in ("dptrain", "torch-eager", "torch-compile"):
                if (name, tool, dt) not in got:
                    continue
                lines.append(json.dumps({
                    "tool": "dptrain" if tool == "dptrain" else "pytorch-%s %s" % (ver,
                                                                                  tool[6:]),
                    "model": name, "input": "1x28x28 Fashion-MNIST", "ranks": 1,
                    "threads": THREADS, "batch": BATCH, "dtype": dt,
                    "img_s": round(med[(name, tool, dt)], 2),
                    "img_s_rounds": got[(name, tool, dt)],
                    "dptrain_ratio": round(d / med[(name, tool, dt)], 3),
                    "cpu": cpu, "isa": isa_s, "date": date, "commit": commit,
                    "dptrain_built_in": "the root" if in_root else "this host"}))
    # where a model misses 1.3x eager: which primitives take dptrain's time
    short = [(name, dt) for name in PLAN for dt in dtypes
             if med.get((name, "dptrain", dt)) and med.get((name, "torch-eager", dt)) and
             med[(name, "dptrain", dt)] / med[(name, "torch-eager", dt)] < 1.3]
    if short:
        print("\nShort of 1.3x eager: dptrain's step by primitive (ONEDNN_VERBOSE=1, the timed "
              "steps of one more run; ms per step and share of the step)\n")
        print("| model | dtype | step ms | " + " | ".join(PROFILE_KINDS) +
              " | dptrain's own kernels (Winograd included) and the rest |")
        print("|---|---|---|" + "---|" * (len(PROFILE_KINDS) + 1))
    with tempfile.TemporaryDirectory() as tmp:
        for name, dt in short:
            cmd = dp_cmd(name, PLAN[name], "profile-" + name + dt, tmp) + [
                "precision.mode=" + dt]
            out = subprocess.run(cmd, env=dict(env, ONEDNN_VERBOSE="1"), capture_output=True,
                                 text=True)
            prof = profile_of(out.stdout, PLAN[name])
            if not prof:
                print("%s %s: no profile: %s" % (name, dt, out.stderr[-500:]), file=sys.stderr)
                continue
            cell = lambda ms: "%.1f (%.0f%%)" % (ms, 100 * ms / prof["step_ms"])
            print("| %s | %s | %.1f | %s | %s |" % (
                name, dt, prof["step_ms"], " | ".join(cell(prof["ms"][k]) for k in PROFILE_KINDS),
                cell(prof["rest_ms"])))
            lines.append(json.dumps({
                "tool": "dptrain-profile", "model": name, "dtype": dt, "ranks": 1,
                "threads": THREADS, "batch": BATCH, "step_ms": round(prof["step_ms"], 2),
                "ms_per_step": {k: round(v, 2) for k, v in prof["ms"].items()},
                "own_and_rest_ms": round(prof["rest_ms"], 2), "cpu": cpu, "isa": isa_s,
                "date": date, "commit": commit}))
    if jpath:
        with open(jpath, "a") as f:
            f.write("".join(line + "\n" for line in lines))


PROFILE_KINDS = ["conv forward", "conv backward data", "conv backward weights", "reorder",
                 "inner product", "pooling", "other oneDNN"]


def profile_of(text, steps):
    """From a dptrain run with ONEDNN_VERBOSE=1 that logs every `steps` steps: the per-step
    milliseconds of each primitive kind over the timed steps (the lines after the first loss
    line; oneDNN's own exec times), the step's wall time in the same run (from the img/s of
    the timed interval: the printing of about 130 lines a step costs well under a
    millisecond), and what is left: dptrain's own kernels, OpenMP's waits and the rest."""
    timed = False
    ms = {k: 0.0 for k in PROFILE_KINDS}
    img_s = None
    for line in text.splitlines():
        if re.match(r"epoch: \d+ step: ", line):
            if timed:
                m = re.search(r"([0-9.]+) img/s", line)
                img_s = float(m.group(1)) if m else None
                break
            timed = True
            continue
        # oneDNN 3 writes onednn_verbose,v1,primitive,exec,...; 2: onednn_verbose,exec,...
        line = re.sub(r"^onednn_verbose,(v\d+,)?(primitive,)?", "onednn_verbose,", line)
        if not timed or not line.startswith("onednn_verbose,exec,"):
            continue
        f = line.split(",")
        try:
            t = float(f[-1])
        except ValueError:
            continue
        kind = f[3]
        if kind == "convolution":
            k = {"forward_training": "conv forward", "forward_inference": "conv forward",
                 "backward_data": "conv backward data",
                 "backward_weights": "conv backward weights"}.get(f[5], "other oneDNN")
        else:
            k = {"reorder": "reorder", "inner_product": "inner product", "pooling": "pooling",
                 "pooling_v2": "pooling"}.get(kind, "other oneDNN")
        ms[k] += t
    if not img_s:
        return None
    step_ms = BATCH / img_s * 1000.0
    per = {k: v / steps for k, v in ms.items()}
    return {"step_ms": step_ms, "ms": per, "rest_ms": step_ms - sum(per.values())}


def dptrain_cmd(build, name, steps, outdir, top=TOP):
    cmd = [os.path.join(build, "bin", "dptrain"),
           os.path.join(top, "contrib", "examples", "mlp-fmnist.json"),
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
        return torch_side(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:7])
    if len(sys.argv) > 2 and sys.argv[1] == "--root":
        return vs_root(sys.argv[2:])
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
