"""LeNet-5 and ResNet-18 (issue 13's models) defined in PyTorch with seeded random weights, written
twice into OUTDIR: as TorchScript (`<name>.pt`, scripted and frozen, what LibTorch runs directly) and as ONNX (`<name>.onnx`, torch.onnx.export, opset 13, what Capsule
runs), plus one input and PyTorch's output for it (`<name>.input.npy`, `<name>.output.npy`), so
that both runtimes compute the same thing from the same weights.

    /usr/bin/python3 tools/bench/torchscript_models.py OUTDIR

Needs Debian's python3-torch (apt-get install python3-torch); CI does not run it.
"""
import os
import sys

import numpy as np
import torch
from torch import nn


class LeNet5(nn.Module):
    """LeCun et al. 1998 as in tools/bench/make_models.py: 1x28x28 input, conv 6@5x5 (pad 2),
    max pool 2, conv 16@5x5, max pool 2, linear 120, 84, 10, ReLU activations."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 6, 5, padding=2)
        self.c2 = nn.Conv2d(6, 16, 5)
        self.f1 = nn.Linear(16 * 5 * 5, 120)
        self.f2 = nn.Linear(120, 84)
        self.f3 = nn.Linear(84, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.c1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.c2(x)), 2)
        x = torch.flatten(x, 1)
        return self.f3(torch.relu(self.f2(torch.relu(self.f1(x)))))


class BasicBlock(nn.Module):
    """ResNet's basic block (He et al. 2016, torchvision's BasicBlock)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    """torchvision's resnet18 layout: 7x7 stem, 4 stages of 2 basic blocks, global pool, fc 1000."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, 1000)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layers(x)
        return self.fc(torch.flatten(torch.mean(x, dim=(2, 3), keepdim=True), 1))


def randomise_batch_norms(model, generator):
    """Non-trivial running statistics, so that batch norm is not the identity."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1, generator=generator)
            m.running_var.uniform_(0.5, 1.5, generator=generator)
            m.weight.data.uniform_(0.5, 1.5, generator=generator)
            m.bias.data.uniform_(-0.1, 0.1, generator=generator)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: torchscript_models.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(13)
    generator = torch.Generator().manual_seed(13)
    for name, model, shape in (("lenet5", LeNet5(), (64, 1, 28, 28)), ("resnet18", ResNet18(), (1, 3, 224, 224))):
        randomise_batch_norms(model, generator)
        model.eval()
        x = torch.rand(shape, generator=generator)
        with torch.no_grad():
            y = model(x)
            torch.onnx.export(model, x, os.path.join(out, name + ".onnx"), opset_version=13,
                              input_names=["input"], output_names=["output"])
            # Frozen (weights as constants, batch norm folded); torchscript_bench applies
            # optimize_for_inference after loading (its MKL-DNN constants do not serialise).
            scripted = torch.jit.freeze(torch.jit.script(model))
        scripted.save(os.path.join(out, name + ".pt"))
        np.save(os.path.join(out, name + ".input.npy"), x.numpy())
        np.save(os.path.join(out, name + ".output.npy"), y.numpy())
        print(f"{name}: {out}/{name}.pt and {name}.onnx, input {list(shape)}")


if __name__ == "__main__":
    main()
