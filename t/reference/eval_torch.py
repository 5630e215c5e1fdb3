#!/usr/bin/python3
"""eval_torch.py — evaluates weights dptrain exported, in PyTorch, to check the export.

    eval_torch.py CONFIG WEIGHTS.safetensors

builds the PyTorch model the dptrain config CONFIG names (mlp, lenet or resnet18 with the
small stem, as t/reference/ddp_torch.py builds them), loads WEIGHTS with
load_state_dict(strict=True) after checking every name and shape, switches it to eval() (so
BatchNorm uses the running statistics stored with the weights) and evaluates the config's eval
set: data.eval.images/labels, else data.dir's t10k files, with data.transforms.normalize as
dptrain applies it (the random augmentations are for training only and ignored here), in
batches of 1000. It prints one line of JSON:

    {"correct": C, "count": N, "accuracy": C/N, "loss": mean cross-entropy, "near_ties": T}

where near_ties counts the samples whose two largest logits are within 1e-3 relative of each
other: the only ones whose prediction float rounding differences could flip. The safetensors
package reads WEIGHTS where it is installed; otherwise ddp_torch's reader does (Debian's
python3-torch has no safetensors package). Exit status 0 on success, 1 with a message starting
"eval_torch: " otherwise. It owns nothing else: models, data and safetensors parsing are
ddp_torch.py's.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ddp_torch as ref  # noqa: E402  (after the path it is found on)
from ddp_torch import Failure, fail  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

PROG = "eval_torch"
BATCH = 1000
NEAR_TIE = 1e-3


def eval_files(cfg):
    """The eval set's image and label files, resolved as dptrain resolves them."""
    data = cfg.get("data", {})
    if data.get("format") != "idx":
        fail("%s: data.format %r: this reference reads idx files only"
             % (cfg["_path"], data.get("format")))
    images = labels = None
    if data.get("dir"):
        d = ref.resolve(cfg, data["dir"])

        def std(name):
            p = os.path.join(d, name)
            return p if os.path.exists(p) else p + ".gz"
        images, labels = std("t10k-images-idx3-ubyte"), std("t10k-labels-idx1-ubyte")
    ev = data.get("eval") or {}
    if ev.get("images"):
        images = ref.resolve(cfg, ev["images"])
    if ev.get("labels"):
        labels = ref.resolve(cfg, ev["labels"])
    if not images or not labels:
        fail("%s: no eval set: give data.eval.images and data.eval.labels (or data.dir)"
             % cfg["_path"])
    return images, labels


def eval_set(cfg):
    """ddp_torch's IdxSet (checks against the model, the normalize table) on the eval files."""
    images, labels = eval_files(cfg)
    ecfg = dict(cfg)
    ecfg["data"] = dict(cfg.get("data", {}), train={"images": images, "labels": labels})
    ecfg["data"].pop("dir", None)
    return ref.IdxSet(ecfg)


def read_weights(path):
    if not os.path.exists(path):
        fail("%s: no such file; give the model.safetensors dptrain wrote in its output.dir"
             % path)
    try:
        from safetensors.torch import load_file
    except ImportError:
        return ref.read_safetensors(path)
    try:
        return load_file(path)
    except Exception as e:  # the package's own error types differ between versions
        fail("%s: not a readable safetensors file: %s" % (path, e))


def load_weights(model, path, config):
    state = read_weights(path)
    want = model.state_dict()
    missing = sorted(set(want) - set(state))
    extra = sorted(set(state) - set(want))
    if missing or extra:
        fail("%s does not hold the weights of the model %s names: missing %s, unexpected %s"
             % (path, config, missing[:5] or "none", extra[:5] or "none"))
    for k, v in want.items():
        if tuple(state[k].shape) != tuple(v.shape):
            fail("%s: tensor %s has shape %s; the model %s names needs %s"
                 % (path, k, list(state[k].shape), config, list(v.shape)))
        state[k] = state[k].to(v.dtype)
    model.load_state_dict(state, strict=True)


def evaluate(model, ds):
    correct, loss_sum, near = 0, 0.0, 0
    with torch.no_grad():
        for lo in range(0, len(ds), BATCH):
            x = ds.lut[ds.x[lo:lo + BATCH].long()]
            y = ds.y[lo:lo + BATCH]
            logits = model(x)
            loss_sum += F.cross_entropy(logits.double(), y, reduction="sum").item()
            correct += int((logits.argmax(1) == y).sum())
            top = logits.topk(2, dim=1).values
            gap = top[:, 0] - top[:, 1]
            near += int((gap <= NEAR_TIE * top[:, 0].abs().clamp(min=1.0)).sum())
    n = len(ds)
    return {"correct": correct, "count": n, "accuracy": correct / n if n else 0.0,
            "loss": loss_sum / n if n else 0.0, "near_ties": near}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", metavar="CONFIG", help="dptrain job config (JSON)")
    ap.add_argument("weights", metavar="WEIGHTS.safetensors",
                    help="the model.safetensors dptrain wrote")
    args = ap.parse_args()
    try:
        cfg = ref.load_config(args.config)
        model = ref.build_model(cfg)
        load_weights(model, args.weights, args.config)
        model.eval()
        ds = eval_set(cfg)
        if len(ds) == 0:
            fail("%s: the eval set is empty" % args.config)
        print(json.dumps(evaluate(model, ds)))
    except Failure as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return 1
    except Exception as e:  # torch's own error or a bug: name it, then the traceback
        print("%s: %s: %s" % (PROG, type(e).__name__, e), file=sys.stderr)
        import traceback
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
