#!/usr/bin/python3
# gen_model.py — PyTorch reference for whole training steps of dptrain's models.
#
# For each model (mlp, lenet, resnet18 and resnet50 with the small stem, resnet18 with
# torchvision's ImageNet stem) writes OUTDIR/NAME.safetensors holding: the initial weights as
# PyTorch initialises them ("init.<state_dict name>"), a fixed input batch ("x", "y"), and what
# one training step gives: logits, loss, every parameter's gradient ("grad.<name>"), the BN
# running stats after the forward ("after.<buffer>"), every ReLU's input in call order
# ("relu.<i>"), and the update one SGD-momentum step and, separately, one AdamW step make from
# the stored gradients ("delta_sgd.<name>", "delta_adamw.<name>").
# Models come from torchvision (resnets) and the PyTorch tutorials (lenet), so they are an
# independent statement of the architecture. The step itself runs in float64 from the float32
# initial weights and batch, so the stored results are the exact answer rounded to float32 and
# a comparison measures dptrain's float32 error alone (deep nets like resnet50 at init are
# ill-conditioned enough that torch's own float32 step differs from float64 by ~1e-4). Each
# result R also gets "err32.R", PyTorch's own float32 error on it: the yardstick.
#
# The updates start from the stored (rounded) gradients, not from each run's own: they test the
# optimizer's arithmetic alone, with PyTorch's float32 optimizer on the same input as yardstick.
#
# A ReLU whose input is within float32 rounding of 0 is a kink: a correct float32 forward may
# put it on either side, and the gradient then legitimately takes the other branch. "relu.<i>"
# and "relu_noise32" (per call: the largest |float32 - float64| PyTorch's own forward shows on
# that input) let t/unit/model_parity.c find where dptrain's forward took the other branch; it
# then asks for the exact step with those masks:
#     gen_model.py OUTDIR MODEL --flips FILE    (FILE: lines "call element")
# writes OUTDIR/MODEL.flipped.safetensors (logits, loss, grad.*, after.*).
# Run with Debian's python3-torch:
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


class ReluTrace:
    """Every ReLU of the reference models runs through relu() below. While active, it keeps
    each call's input (in call order, which is dptrain's node order) and forces the backward's
    mask at the elements in flips[call] to the other branch."""

    def __init__(self):
        self.active = False
        self.pre = []
        self.flips = {}

    def start(self, flips=None):
        self.active, self.pre, self.flips = True, [], flips or {}

    def stop(self):
        self.active = False
        return self.pre


TRACE = ReluTrace()


class _MaskedRelu(torch.autograd.Function):
    """F.relu with the backward's mask given: the same values as F.relu's threshold_backward
    when the mask is x > 0."""

    @staticmethod
    def forward(ctx, x, mask):
        ctx.save_for_backward(mask)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return g.masked_fill(~mask, 0), None


def relu(x):
    if not TRACE.active:
        return F.relu(x)
    call = len(TRACE.pre)
    TRACE.pre.append(x.detach().clone())
    mask = x > 0
    if call in TRACE.flips:
        flat = mask.reshape(-1).clone()
        idx = TRACE.flips[call]
        flat[idx] = ~flat[idx]
        mask = flat.reshape(x.shape)
    return _MaskedRelu.apply(x, mask)


class ReLU(nn.Module):
    def forward(self, x):
        return relu(x)


def traced(model):
    """torchvision's nn.ReLU modules (a block calls its one module twice) replaced by ReLU."""
    for mod in list(model.modules()):
        for name, child in mod.named_children():
            if isinstance(child, nn.ReLU):
                setattr(mod, name, ReLU())
    return model


class MLP(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.fc1 = nn.Linear(784, 512)
        self.fc2 = nn.Linear(512, 512)
        self.fc3 = nn.Linear(512, classes)

    def forward(self, x):
        x = torch.flatten(x, 1)
        return self.fc3(relu(self.fc2(relu(self.fc1(x)))))


class LeNet(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)

    def forward(self, x):
        x = F.max_pool2d(relu(self.conv1(x)), 2)
        x = F.max_pool2d(relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(relu(self.fc2(relu(self.fc1(x)))))


def resnet_small(depth, classes):
    m = getattr(torchvision.models, "resnet%d" % depth)(num_classes=classes)
    m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    nn.init.kaiming_normal_(m.conv1.weight, mode="fan_out", nonlinearity="relu")
    m.maxpool = nn.Identity()
    return traced(m)


# name: (constructor, input shape, batch, label smoothing)
MODELS = {
    "mlp": (lambda: MLP(10), (1, 28, 28), 8, 0.0),
    "lenet": (lambda: LeNet(10), (1, 28, 28), 8, 0.1),
    "resnet18": (lambda: resnet_small(18, 10), (3, 32, 32), 4, 0.0),
    "resnet50": (lambda: resnet_small(50, 10), (3, 32, 32), 2, 0.0),
    # torchvision's own ImageNet stem (7x7/2 conv, 3x3/2 max pool), unmodified
    "resnet18-imagenet": (lambda: traced(torchvision.models.resnet18(num_classes=10)),
                          (3, 64, 64), 2, 0.0),
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


def step(model, init, x, y, smoothing, flips=None):
    """One forward and backward in the model's dtype: logits, loss, grads, BN stats, and every
    ReLU's input (relu.<i>), with the backward's masks flipped where flips says."""
    dt = next(model.parameters()).dtype
    model.load_state_dict({k: v.to(dt) if v.is_floating_point() else v for k, v in init.items()})
    model.train()
    TRACE.start(flips)
    try:
        logits = model(x.to(dt))
    finally:
        pre = TRACE.stop()
    loss = F.cross_entropy(logits, y, label_smoothing=smoothing)
    loss.backward()
    r = {"logits": logits.detach().clone(), "loss": loss.detach().reshape(())}
    for k, p in model.named_parameters():
        r["grad." + k] = p.grad.clone()
    for k, v in model.state_dict().items():
        if "running" in k:
            r["after." + k] = v.clone()
    for i, t in enumerate(pre):
        r["relu.%d" % i] = t
    return r


def updates(model, init, grads):
    """The change one SGD-momentum step and (separately) one AdamW step make to the initial
    weights, given the gradients, in the model's dtype."""
    dt = next(model.parameters()).dtype
    r = {}
    for tag, cls, kw in (("sgd", torch.optim.SGD, SGD), ("adamw", torch.optim.AdamW, ADAMW)):
        with torch.no_grad():
            for k, p in model.named_parameters():
                p.copy_(init[k].to(dt))
                p.grad = grads[k].to(dt).clone()
        opt = cls(model.parameters(), foreach=False, **kw)
        opt.step()
        for k, p in model.named_parameters():
            # the update itself, so a comparison is not swamped by the unchanged weights
            r["delta_" + tag + "." + k] = p.detach() - init[k].to(dt)
    return r


def setup(name):
    ctor, shape, batch, smoothing = MODELS[name]
    torch.manual_seed(20261122)
    model = ctor()
    init = {k: v.clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(7)
    x = torch.randn((batch,) + shape, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)
    return model, init, x, y, smoothing


def generate(name, outdir):
    model, init, x, y, smoothing = setup(name)
    exact = step(copy.deepcopy(model).double(), init, x, y, smoothing)
    torch32 = step(copy.deepcopy(model), init, x, y, smoothing)
    # the updates from the gradients as stored (float32), in float64 and in PyTorch's float32
    grads = {k[len("grad."):]: v.float() for k, v in exact.items() if k.startswith("grad.")}
    exact.update(updates(copy.deepcopy(model).double(), init, grads))
    torch32.update(updates(model, init, grads))
    out = {"x": x, "y": y.to(torch.int32)}
    out["label_smoothing"] = torch.tensor(smoothing, dtype=torch.float32)
    for k, v in init.items():
        out["init." + k] = v
    noise = []
    for k, v in exact.items():
        out[k] = v
        if k.startswith("relu."):
            # the largest deviation PyTorch's float32 forward shows on this ReLU's input
            noise.append((torch32[k].double() - v).abs().max())
            k, v, t = "relu_out." + k[5:], v.clamp(min=0), torch32[k].double().clamp(min=0)
        else:
            t = torch32[k].double()
        # PyTorch's own float32 error on this tensor: ||torch32 - exact|| / ||exact||
        d = (t - v.double()).norm()
        out["err32." + k] = (d / v.double().norm().clamp_min(1e-300)).float().reshape(())
    out["relu_noise32"] = torch.tensor(noise, dtype=torch.float32)
    write_safetensors("%s/%s.safetensors" % (outdir, name), out)


def generate_flipped(name, outdir, path):
    """The exact step with the ReLU masks flipped at the elements listed in path."""
    flips = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                call, elem = map(int, line.split())
                flips.setdefault(call, []).append(elem)
    flips = {c: torch.tensor(e, dtype=torch.long) for c, e in flips.items()}
    model, init, x, y, smoothing = setup(name)
    exact = step(model.double(), init, x, y, smoothing, flips)
    out = {k: v for k, v in exact.items() if not k.startswith("relu.")}
    write_safetensors("%s/%s.flipped.safetensors" % (outdir, name), out)


def main():
    usage = "usage: gen_model.py OUTDIR [MODEL...] | gen_model.py OUTDIR MODEL --flips FILE"
    if len(sys.argv) < 2:
        sys.exit(usage)
    torch.set_num_threads(2)
    if "--flips" in sys.argv:
        if len(sys.argv) != 5 or sys.argv[3] != "--flips" or sys.argv[2] not in MODELS:
            sys.exit(usage)
        generate_flipped(sys.argv[2], sys.argv[1], sys.argv[4])
        return
    for name in sys.argv[2:] or MODELS:
        if name not in MODELS:
            sys.exit("gen_model.py: no model %r (%s)" % (name, ", ".join(MODELS)))
        generate(name, sys.argv[1])


if __name__ == "__main__":
    main()
