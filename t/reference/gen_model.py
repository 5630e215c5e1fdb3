#!/usr/bin/python3
# gen_model.py — PyTorch reference for whole training steps of dptrain's models.
#
# For each model (mlp, lenet, resnet18 and resnet50 with the small stem) writes
# OUTDIR/NAME.safetensors holding: the initial weights as PyTorch initialises them
# ("init.<state_dict name>"), a fixed input batch ("x", "y"), and what one training step
# gives: logits, loss, every parameter's gradient ("grad.<name>"), the BN running stats after
# the forward ("after.<buffer>"), and the weights after one SGD-momentum step and, separately,
# one AdamW step from the same gradients ("sgd.<name>", "adamw.<name>").
# Models come from torchvision (resnets) and the PyTorch tutorials (lenet), so they are an
# independent statement of the architecture. The step itself runs in float64 from the float32
# initial weights and batch, so the stored results are the exact answer rounded to float32 and
# a comparison measures dptrain's float32 error alone (deep nets like resnet50 at init are
# ill-conditioned enough that torch's own float32 step differs from float64 by ~1e-4). Run with Debian's python3-torch:
#     /usr/bin/python3 t/reference/gen_model.py OUTDIR [MODEL...]
import copy
import json
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SGD = dict(lr=0.1, momentum=0.9, weight_decay=5e-4)
# eps 1.0, not 1e-8: a first AdamW step moves each weight by lr * g / (|g| + eps), a sign
# function of g wherever |g| << eps, so element-wise rounding in tiny gradients (harmless to
# training) would become whole-lr differences. With eps 1.0 the update stays proportional to g
# and the comparison measures the step's arithmetic; t/unit/optim.c checks AdamW against
# PyTorch at the default eps on fixed gradients.
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1.0, weight_decay=0.01)


class MLP(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.fc1 = nn.Linear(784, 512)
        self.fc2 = nn.Linear(512, 512)
        self.fc3 = nn.Linear(512, classes)

    def forward(self, x):
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class LeNet(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def resnet_small(depth, classes):
    m = getattr(torchvision.models, "resnet%d" % depth)(num_classes=classes)
    m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    nn.init.kaiming_normal_(m.conv1.weight, mode="fan_out", nonlinearity="relu")
    m.maxpool = nn.Identity()
    return m


# name: (constructor, input shape, batch, label smoothing)
MODELS = {
    "mlp": (lambda: MLP(10), (1, 28, 28), 8, 0.0),
    "lenet": (lambda: LeNet(10), (1, 28, 28), 8, 0.1),
    "resnet18": (lambda: resnet_small(18, 10), (3, 32, 32), 4, 0.0),
    "resnet50": (lambda: resnet_small(50, 10), (3, 32, 32), 2, 0.0),
    # torchvision's own ImageNet stem (7x7/2 conv, 3x3/2 max pool), unmodified
    "resnet18-imagenet": (lambda: torchvision.models.resnet18(num_classes=10), (3, 64, 64), 2, 0.0),
}


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        if t.dtype == torch.float64:
            t = t.float()
        dtype = {torch.float32: "F32", torch.int64: "I64", torch.int32: "I32"}[t.dtype]
        data = t.numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text.encode())
        for b in blobs:
            f.write(b)


def step(model, init, x, y, smoothing):
    """One training step in the model's dtype: logits, loss, grads, BN stats, and the weights
    after one SGD and (separately) one AdamW update from the same gradients."""
    dt = next(model.parameters()).dtype
    model.load_state_dict({k: v.to(dt) if v.is_floating_point() else v for k, v in init.items()})
    model.train()
    logits = model(x.to(dt))
    loss = F.cross_entropy(logits, y, label_smoothing=smoothing)
    loss.backward()
    r = {"logits": logits.detach().clone(), "loss": loss.detach().reshape(())}
    grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    for k, g in grads.items():
        r["grad." + k] = g
    for k, v in model.state_dict().items():
        if "running" in k:
            r["after." + k] = v.clone()
    for tag, cls, kw in (("sgd", torch.optim.SGD, SGD), ("adamw", torch.optim.AdamW, ADAMW)):
        with torch.no_grad():
            for k, p in model.named_parameters():
                p.copy_(init[k].to(dt))
                p.grad = grads[k].clone()
        opt = cls(model.parameters(), foreach=False, **kw)
        opt.step()
        for k, p in model.named_parameters():
            # the update itself, so a comparison is not swamped by the unchanged weights
            r["delta_" + tag + "." + k] = p.detach() - init[k].to(dt)
    return r


def generate(name, outdir):
    ctor, shape, batch, smoothing = MODELS[name]
    torch.manual_seed(20261122)
    model = ctor()
    init = {k: v.clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(7)
    x = torch.randn((batch,) + shape, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)

    exact = step(copy.deepcopy(model).double(), init, x, y, smoothing)
    torch32 = step(model, init, x, y, smoothing)
    out = {"x": x, "y": y.to(torch.int32)}
    out["label_smoothing"] = torch.tensor(smoothing, dtype=torch.float32)
    for k, v in init.items():
        out["init." + k] = v
    for k, v in exact.items():
        out[k] = v
        # PyTorch's own float32 error on this tensor: ||torch32 - exact|| / ||exact||
        d = (torch32[k].double() - v.double()).norm()
        out["err32." + k] = (d / v.double().norm().clamp_min(1e-300)).float().reshape(())
    write_safetensors("%s/%s.safetensors" % (outdir, name), out)


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: gen_model.py OUTDIR [MODEL...]")
    torch.set_num_threads(2)
    for name in sys.argv[2:] or MODELS:
        generate(name, sys.argv[1])


if __name__ == "__main__":
    main()
