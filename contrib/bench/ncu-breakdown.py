#!/usr/bin/python3
# ncu-breakdown.py — sums an ncu --csv log of gpu__time_duration.sum (one training step, as
# contrib/bench/gpu-session.sh's profile stage captures it with DPTRAIN_PROFILE_STEP) by kernel
# kind and prints a markdown table: convolutions, matrix products, batch norm, element-wise,
# pooling, loss, optimizer, NCCL, other; then the ten longest kernels.
#
#   python3 contrib/bench/ncu-breakdown.py profile.csv [--step-ms MS]
#
# --step-ms: the step's wall time measured without the profiler (the benchmark's median); the
# difference to the kernels' sum is then reported as time the GPU did not compute (host gaps,
# waits). ncu serializes kernels, so the kernels' sum is an upper bound of the GPU's busy time.
"""Sum one step's kernel durations from an ncu CSV log by kind."""
import csv
import re
import sys

KINDS = [  # (kind, pattern on the kernel's name), first match wins
    ("NCCL", r"nccl"),
    ("batch norm", r"bn_|batch_?norm|bn[A-Z]|BatchNorm"),
    ("convolution", r"conv|implicit_?gemm|xmma_fprop|xmma_dgrad|xmma_wgrad|fprop|dgrad|wgrad"
                    r"|cudnn|winograd|fft"),
    ("matrix product", r"gemm|cublas|cutlass|sm90_|Kernel2"),
    ("optimizer", r"k_sgd|k_adamw|k_lamb|sgd|adam|lamb|momentum"),
    ("pooling", r"pool|k_gap"),
    ("loss", r"xent|softmax|cross"),
    ("element-wise", r"k_relu|k_add|k_axpby|k_act|k_import|k_export|k_widen|k_fill|k_bias"
                     r"|k_col_sum|k_channel_sum|k_sum|relu|elementwise|transpose|nhwc|nchw"),
]
UNIT = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
        "second": 1e3, "s": 1e3}


def kind_of(name):
    for k, pat in KINDS:
        if re.search(pat, name, re.I):
            return k
    return "other"


def main():
    args = sys.argv[1:]
    step_ms = None
    if "--step-ms" in args:
        i = args.index("--step-ms")
        step_ms = float(args[i + 1])
        del args[i:i + 2]
    if len(args) != 1:
        sys.exit("usage: ncu-breakdown.py profile.csv [--step-ms MS]")
    lines = open(args[0], errors="replace").read().splitlines()
    # ncu's own lines (==PROF== ...) come before the CSV header
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit("ncu-breakdown: %s holds no CSV table (did ncu capture any kernel?)" % args[0])
    per_kind, per_kernel, n = {}, {}, 0
    for r in csv.DictReader(lines[start:]):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        ms = float(r["Metric Value"].replace(",", "")) * UNIT.get(r["Metric Unit"], 1e-6)
        name = r["Kernel Name"]
        k = kind_of(name)
        c, t = per_kind.get(k, (0, 0.0))
        per_kind[k] = (c + 1, t + ms)
        c, t = per_kernel.get(name, (0, 0.0))
        per_kernel[name] = (c + 1, t + ms)
        n += 1
    total = sum(t for _, t in per_kind.values())
    if not n:
        sys.exit("ncu-breakdown: no gpu__time_duration.sum rows in %s" % args[0])
    print("| kind | kernels | ms | share |")
    print("|------|--------:|---:|------:|")
    for k, (c, t) in sorted(per_kind.items(), key=lambda kv: -kv[1][1]):
        print("| %s | %d | %.2f | %.1f%% |" % (k, c, t, 100 * t / total))
    print("| all kernels | %d | %.2f | |" % (n, total))
    if step_ms:
        print("| step (measured, no profiler) | | %.2f | GPU idle %.2f ms (%.1f%%) |"
              % (step_ms, step_ms - total, 100 * (step_ms - total) / step_ms))
    print()
    print("Longest kernels (summed over launches):")
    print()
    print("| kernel | launches | ms |")
    print("|--------|---------:|---:|")
    for name, (c, t) in sorted(per_kernel.items(), key=lambda kv: -kv[1][1])[:10]:
        print("| %s | %d | %.2f |" % (name[:110].replace("|", "/"), c, t))


if __name__ == "__main__":
    main()
