#!/usr/bin/env python3
"""Writes mlp.onnx, the small ONNX model the C API example runs, and computes its output.

The model (opset 13): probs = Softmax(Gemm(Relu(Gemm(x, W1, b1)), W2, b2)), x float32 [2, 4],
W1 [5, 4] and W2 [3, 5] with transB = 1, probs [2, 3]. Weights come from the formulas below, so
the file is reproducible: `python3 make_mlp_onnx.py mlp.onnx`. The protobuf encoding is written
by hand (no onnx or protobuf module needed). `forward` computes the output in double precision
for the checks of the example's output.
"""
import math
import struct
import sys

BATCH, FEATURES, HIDDEN, CLASSES = 2, 4, 5, 3


def w1():
    return [[((j * FEATURES + k) % 7 - 3) * 0.25 for k in range(FEATURES)] for j in range(HIDDEN)]


def b1():
    return [(j - 2) * 0.1 for j in range(HIDDEN)]


def w2():
    return [[((c * 2 + j * 3) % 5 - 2) * 0.3 for j in range(HIDDEN)] for c in range(CLASSES)]


def b2():
    return [0.05, -0.05, 0.0]


def example_input():
    """The values examples/c_embed/main.c fills a float input with: ((i % 5) - 2) * 0.5."""
    return [[((r * FEATURES + k) % 5 - 2) * 0.5 for k in range(FEATURES)] for r in range(BATCH)]


def forward(x):
    """probs for x (a list of BATCH rows of FEATURES values), in double precision."""
    out = []
    for row in x:
        h = [max(0.0, sum(w * v for w, v in zip(wj, row)) + bj) for wj, bj in zip(w1(), b1())]
        logits = [sum(w * v for w, v in zip(wc, h)) + bc for wc, bc in zip(w2(), b2())]
        top = max(logits)
        e = [math.exp(z - top) for z in logits]
        out.append([v / sum(e) for v in e])
    return out


# Protobuf wire format: varint (type 0), 32-bit (type 5), length-delimited (type 2).
def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field_varint(number, value):
    return varint(number << 3) + varint(value)


def field_bytes(number, payload):
    if isinstance(payload, str):
        payload = payload.encode()
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def field_float(number, value):
    return varint(number << 3 | 5) + struct.pack("<f", value)


FLOAT = 1  # TensorProto.DataType FLOAT
ATTR_FLOAT, ATTR_INT = 1, 2


def tensor(name, dims, values):
    raw = struct.pack("<%df" % len(values), *values)
    return (b"".join(field_varint(1, d) for d in dims) + field_varint(2, FLOAT) +
            field_bytes(8, name) + field_bytes(9, raw))


def value_info(name, dims):
    shape = b"".join(field_bytes(1, field_varint(1, d)) for d in dims)
    tensor_type = field_varint(1, FLOAT) + field_bytes(2, shape)
    return field_bytes(1, name) + field_bytes(2, field_bytes(1, tensor_type))


def int_attribute(name, value):
    return field_bytes(1, name) + field_varint(3, value) + field_varint(20, ATTR_INT)


def node(op, inputs, outputs, name, attributes=()):
    return (b"".join(field_bytes(1, i) for i in inputs) + b"".join(field_bytes(2, o) for o in outputs) +
            field_bytes(3, name) + field_bytes(4, op) + b"".join(field_bytes(5, a) for a in attributes))


def model():
    flat = lambda rows: [v for row in rows for v in row]
    nodes = [
        node("Gemm", ["x", "W1", "b1"], ["hidden"], "fc1", [int_attribute("transB", 1)]),
        node("Relu", ["hidden"], ["activated"], "relu"),
        node("Gemm", ["activated", "W2", "b2"], ["logits"], "fc2", [int_attribute("transB", 1)]),
        node("Softmax", ["logits"], ["probs"], "softmax", [int_attribute("axis", -1)]),
    ]
    initializers = [
        tensor("W1", [HIDDEN, FEATURES], flat(w1())), tensor("b1", [HIDDEN], b1()),
        tensor("W2", [CLASSES, HIDDEN], flat(w2())), tensor("b2", [CLASSES], b2()),
    ]
    graph = (b"".join(field_bytes(1, n) for n in nodes) + field_bytes(2, "mlp") +
             b"".join(field_bytes(5, t) for t in initializers) +
             field_bytes(11, value_info("x", [BATCH, FEATURES])) +
             field_bytes(12, value_info("probs", [BATCH, CLASSES])))
    opset = field_bytes(1, "") + field_varint(2, 13)
    return (field_varint(1, 7) + field_bytes(2, "capsule make_mlp_onnx.py") + field_bytes(7, graph) +
            field_bytes(8, opset))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_mlp_onnx.py OUTPUT.onnx")
    with open(sys.argv[1], "wb") as f:
        f.write(model())
    for row in forward(example_input()):
        print(" ".join("%.6f" % v for v in row))
