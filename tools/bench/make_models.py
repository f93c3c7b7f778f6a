#!/usr/bin/env python3
"""Writes the benchmark models of issue 12 as ONNX files, with seeded random weights.

    python3 tools/bench/make_models.py OUT_DIR

Writes OUT_DIR/mlp.onnx (MLP 784-256-256-10: Gemm, Relu), OUT_DIR/lenet5.onnx (LeNet-5 as in
examples/lenet.json: 5x5 convolutions with 6 and 16 channels, 2x2 max pooling, fully connected
120-84-10) and OUT_DIR/resnet18.onnx (ResNet-18 of He et al., "Deep Residual Learning for Image
Recognition", 2015, in torchvision's layout: 7x7/2 stem, 3x3/2 max pool, four stages of two basic
blocks at 64/128/256/512 channels with 1x1/2 projection shortcuts, global average pool, 1000-way
Gemm). Every input is float32 NCHW (or N x 784) with a symbolic batch dimension "N", so a bench
fixes the batch with an input shape. ResNet-18 keeps each BatchNormalization as its own node (as
the ONNX model zoo's resnet18-v1-7 does), so a runtime that folds it into the convolution must do
so itself. Opset 13. Needs python3-onnx and python3-numpy (Debian packages); weights come from
numpy's default_rng(seed 12), He-normal scaled so activations stay in range.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13


class GraphBuilder:
    """Collects nodes and initializers; names are generated from a prefix and a counter."""

    def __init__(self, seed=12):
        self.nodes, self.inits, self.rng, self.count = [], [], np.random.default_rng(seed), 0

    def name(self, prefix):
        self.count += 1
        return f"{prefix}_{self.count}"

    def weight(self, prefix, shape, fan_in):
        array = (self.rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        return self.constant(prefix, array)

    def constant(self, prefix, array):
        n = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(array, dtype=np.float32), n))
        return n

    def node(self, op, inputs, **attrs):
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def gemm(self, x, fan_in, fan_out):
        w = self.weight("w", (fan_out, fan_in), fan_in)
        b = self.constant("b", self.rng.uniform(-0.05, 0.05, fan_out))
        return self.node("Gemm", [x, w, b], transB=1)

    def conv(self, x, c_in, c_out, k, stride=1, pad=0, bias=True):
        w = self.weight("w", (c_out, c_in, k, k), c_in * k * k)
        inputs = [x, w]
        if bias:
            inputs.append(self.constant("b", self.rng.uniform(-0.05, 0.05, c_out)))
        return self.node("Conv", inputs, kernel_shape=[k, k], strides=[stride, stride],
                         pads=[pad] * 4)

    def batch_norm(self, x, c):
        scale = self.constant("gamma", self.rng.uniform(0.8, 1.2, c))
        bias = self.constant("beta", self.rng.uniform(-0.1, 0.1, c))
        mean = self.constant("mean", self.rng.uniform(-0.1, 0.1, c))
        var = self.constant("var", self.rng.uniform(0.8, 1.2, c))
        return self.node("BatchNormalization", [x, scale, bias, mean, var], epsilon=1e-5)

    def save(self, path, graph_name, input_name, input_dims, output, output_dims):
        graph = helper.make_graph(
            self.nodes, graph_name,
            [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, input_dims)],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, output_dims)],
            self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="capsule tools/bench/make_models.py")
        onnx.checker.check_model(model)
        onnx.save(model, path)


def mlp(path):
    g = GraphBuilder()
    x = g.node("Relu", [g.gemm("input", 784, 256)])
    x = g.node("Relu", [g.gemm(x, 256, 256)])
    g.save(path, "mlp_784_256_256_10", "input", ["N", 784], g.gemm(x, 256, 10), ["N", 10])


def lenet5(path):
    g = GraphBuilder()
    x = g.node("Relu", [g.conv("input", 1, 6, 5, pad=2)])
    x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.node("Relu", [g.conv(x, 6, 16, 5)])
    x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.node("Flatten", [x], axis=1)
    x = g.node("Relu", [g.gemm(x, 400, 120)])
    x = g.node("Relu", [g.gemm(x, 120, 84)])
    g.save(path, "lenet5", "input", ["N", 1, 28, 28], g.gemm(x, 84, 10), ["N", 10])


def resnet18(path):
    g = GraphBuilder()

    def conv_bn(x, c_in, c_out, k, stride, pad):
        return g.batch_norm(g.conv(x, c_in, c_out, k, stride, pad, bias=False), c_out)

    def basic_block(x, c_in, c_out, stride):
        y = g.node("Relu", [conv_bn(x, c_in, c_out, 3, stride, 1)])
        y = conv_bn(y, c_out, c_out, 3, 1, 1)
        shortcut = x if stride == 1 and c_in == c_out else conv_bn(x, c_in, c_out, 1, stride, 0)
        return g.node("Relu", [g.node("Add", [y, shortcut])])

    x = g.node("Relu", [conv_bn("input", 3, 64, 7, 2, 3)])
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c_in = 64
    for c_out, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        x = basic_block(x, c_in, c_out, stride)
        x = basic_block(x, c_out, c_out, 1)
        c_in = c_out
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])], axis=1)
    g.save(path, "resnet18", "input", ["N", 3, 224, 224], g.gemm(x, 512, 1000), ["N", 1000])


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_models.py OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, make in (("mlp", mlp), ("lenet5", lenet5), ("resnet18", resnet18)):
        make(os.path.join(out, name + ".onnx"))


if __name__ == "__main__":
    main()
