#!/usr/bin/env python3
"""Exports the small real-architecture models of tests/data/models that this script defines,
with PyTorch (Debian's python3-torch), and records each one's input and PyTorch's output.

Each model directory holds model.onnx, input.npy, output.npy (PyTorch's output for that input,
float32) and meta.json (names, shapes, tolerance, source). The OnnxModels test imports the model,
runs it under checked_cpu and compares with output.npy. Weights are random (seeded), so nothing is
downloaded. Run from the repository root:

    /usr/bin/python3 tests/data/models/export.py [NAME...]

The models (mobilenet_v2 and squeezenet1_1 came from torchvision in an earlier session):
  detection_head        a two-level feature pyramid (stride-2 convolutions, a bilinear Resize of
                        the coarse level, lateral 1x1 convolutions), per-anchor score and box
                        heads, and detection post-processing: box decoding against constant
                        anchors, TopK of the scores, the boxes gathered at the top indices.
  lstm_text_classifier  int64 token ids -> Embedding (Gather) -> bidirectional LSTM -> Linear
                        on both final hidden states.
  uint8_classifier      an NHWC uint8 image -> Cast, /255, ImageNet normalisation, Transpose ->
                        Conv, BatchNorm, ReLU, MaxPool, global average pool, Gemm.
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

OPSET = 13
ROOT = os.path.dirname(os.path.abspath(__file__))


class DetectionHead(nn.Module):
    """FPN-style detector head with TopK post-processing; output [N, K, 5]: score, box (x1 y1 x2 y2)."""

    anchors_per_cell = 3
    top_k = 10

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.c3 = nn.Conv2d(32, 32, 3, stride=2, padding=1)
        self.lateral4 = nn.Conv2d(32, 16, 1)
        self.lateral5 = nn.Conv2d(32, 16, 1)
        self.score = nn.Conv2d(16, self.anchors_per_cell, 3, padding=1)
        self.box = nn.Conv2d(16, 4 * self.anchors_per_cell, 3, padding=1)

    def forward(self, x):
        p4 = F.relu(self.c2(F.relu(self.c1(x))))
        p5 = F.relu(self.c3(p4))
        feature = self.lateral4(p4) + F.interpolate(self.lateral5(p5), scale_factor=2.0, mode="bilinear",
                                                    align_corners=False)
        n, _, h, w = feature.shape
        a = self.anchors_per_cell
        scores = torch.sigmoid(self.score(feature)).permute(0, 2, 3, 1).reshape(n, h * w * a)
        deltas = self.box(feature).permute(0, 2, 3, 1).reshape(n, h * w * a, 4)
        # Anchors: cell centres (stride 4) with three sizes, as constants.
        ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32),
                                indexing="ij")
        centres = torch.stack([(xs + 0.5) * 4, (ys + 0.5) * 4], -1).reshape(h * w, 1, 2).expand(h * w, a, 2)
        sizes = torch.tensor([8.0, 16.0, 32.0]).reshape(1, a, 1).expand(h * w, a, 2)
        anchors = torch.cat([centres, sizes], -1).reshape(1, h * w * a, 4)
        centre = anchors[..., :2] + deltas[..., :2] * anchors[..., 2:]
        size = anchors[..., 2:] * torch.exp(deltas[..., 2:].clamp(max=4.0))
        boxes = torch.cat([centre - size / 2, centre + size / 2], -1)
        top_scores, top = torch.topk(scores, self.top_k, dim=1)
        top_boxes = torch.gather(boxes, 1, top.unsqueeze(-1).expand(n, self.top_k, 4))
        return torch.cat([top_scores.unsqueeze(-1), top_boxes], -1)


class LstmTextClassifier(nn.Module):
    """int64 ids [N, T] -> logits [N, 5]."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(1000, 32)
        self.lstm = nn.LSTM(32, 48, batch_first=True, bidirectional=True)
        self.classify = nn.Linear(96, 5)

    def forward(self, ids):
        _, (h, _) = self.lstm(self.embedding(ids))
        return self.classify(torch.cat([h[0], h[1]], -1))


class Uint8Classifier(nn.Module):
    """uint8 NHWC image [N, 32, 32, 3] -> logits [N, 10]."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).reshape(1, 1, 1, 3))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).reshape(1, 1, 1, 3))
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32, 10)

    def forward(self, image):
        x = ((image.float() / 255.0 - self.mean) / self.std).permute(0, 3, 1, 2)
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.mean(dim=(2, 3)))


def randomise_batch_norm(model, generator):
    """Non-trivial running statistics and affine parameters (eval mode uses them)."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=generator) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=generator) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=generator) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=generator) * 0.1)


def detection_head():
    torch.manual_seed(0)
    model = DetectionHead().eval()
    # The first input seed whose top-k order does not hinge on rounding (see top_k_margin).
    for seed in range(1, 200):
        x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(seed))
        if top_k_margin(model, x) > 2e-5:
            return model, x, "input", {"rtol": 1e-4, "atol": 1e-4}
    raise RuntimeError("no input seed separates the top-k scores")


def lstm_text_classifier():
    torch.manual_seed(0)
    model = LstmTextClassifier()
    ids = torch.randint(0, 1000, (2, 12), generator=torch.Generator().manual_seed(1), dtype=torch.int64)
    return model, ids, "ids", {"rtol": 1e-4, "atol": 1e-5}


def uint8_classifier():
    torch.manual_seed(0)
    model = Uint8Classifier()
    randomise_batch_norm(model, torch.Generator().manual_seed(2))
    image = torch.randint(0, 256, (2, 32, 32, 3), generator=torch.Generator().manual_seed(1), dtype=torch.uint8)
    return model, image, "image", {"rtol": 1e-4, "atol": 1e-5}


MODELS = {f.__name__: f for f in (detection_head, lstm_text_classifier, uint8_classifier)}


def top_k_margin(model, x):
    """The smallest gap between consecutive scores among the top k + 1 of each image: TopK's order
    (and so the output) must not hinge on float rounding, which differs between runtimes."""
    scores = {}
    handle = model.score.register_forward_hook(
        lambda _, __, out: scores.update(s=torch.sigmoid(out).permute(0, 2, 3, 1).reshape(out.shape[0], -1)))
    with torch.no_grad():
        model(x)
    handle.remove()
    ordered = torch.sort(scores["s"], dim=1, descending=True).values[:, : model.top_k + 1]
    return float((ordered[:, :-1] - ordered[:, 1:]).min())


def export(name):
    model, x, input_name, tolerance = MODELS[name]()
    model.eval()
    with torch.no_grad():
        y = model(x)
    out = os.path.join(ROOT, name)
    os.makedirs(out, exist_ok=True)
    torch.onnx.export(model, (x,), os.path.join(out, "model.onnx"), input_names=[input_name],
                      output_names=["output"], opset_version=OPSET, do_constant_folding=True)
    np.save(os.path.join(out, "input.npy"), x.numpy())
    np.save(os.path.join(out, "output.npy"), y.numpy().astype(np.float32))
    meta = {
        "name": name,
        "input": {"name": input_name, "shape": list(x.shape)},
        "output": {"name": "output", "shape": list(y.shape)},
        "tolerance": tolerance,
        "source": f"torch {torch.__version__}, tests/data/models/export.py, random weights (seed 0), "
                  f"seeded random input, ONNX opset {OPSET}",
    }
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{name}: input {tuple(x.shape)} {x.dtype} -> output {tuple(y.shape)}; "
          f"{os.path.getsize(os.path.join(out, 'model.onnx'))} bytes")


if __name__ == "__main__":
    for model_name in sys.argv[1:] or MODELS:
        export(model_name)
