#!/usr/bin/env python3
"""Writes the binary seed files of tests/fuzz/corpus (npy, safetensors, idx): small valid files of
every supported dtype and layout, plus a few near misses. Standard library only; rerun it to
regenerate them (the JSON and ONNX seeds are copied from the repository and libonnx-testdata)."""
import gzip
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    with open(os.path.join(ROOT, target, name), "wb") as f:
        f.write(data)


def npy(descr, shape, payload, major=1, fortran="False"):
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (descr, fortran, dims)
    prefix = 10 if major == 1 else 12
    header += " " * ((64 - (prefix + len(header) + 1) % 64) % 64) + "\n"
    length = struct.pack("<H", len(header)) if major == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([major, 0]) + length + header.encode("latin1") + payload


PACK = {"<f4": "f", "<f8": "d", "<i8": "q", "|b1": "?"}


def values(descr, n):
    if descr == "|b1":
        return struct.pack("<%d?" % n, *[i % 2 == 0 for i in range(n)])
    if descr == "<i8":
        return struct.pack("<%dq" % n, *[i - 2 for i in range(n)])
    return struct.pack("<%d%s" % (n, PACK[descr]), *[0.5 * i - 1 for i in range(n)])


def seeds_npy():
    write("npy", "f32_2x3.npy", npy("<f4", [2, 3], values("<f4", 6)))
    write("npy", "f64_4.npy", npy("<f8", [4], values("<f8", 4)))
    write("npy", "i64_2x1x2.npy", npy("<i8", [2, 1, 2], values("<i8", 4)))
    write("npy", "bool_3.npy", npy("|b1", [3], values("|b1", 3)))
    write("npy", "f32_scalar.npy", npy("<f4", [], values("<f4", 1)))
    write("npy", "f32_empty.npy", npy("<f4", [0, 5], b""))
    write("npy", "f32_v2.npy", npy("<f4", [2], values("<f4", 2), major=2))
    write("npy", "f32_v3.npy", npy("<f4", [1], values("<f4", 1), major=3))
    write("npy", "fortran.npy", npy("<f4", [2, 2], values("<f4", 4), fortran="True"))
    write("npy", "big_endian.npy", npy(">f4", [1], b"\0\0\0\0"))


def safetensors(tensors, metadata=None):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, shape, payload) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text.encode() + data


def seeds_safetensors():
    write("safetensors", "mlp_small.safetensors", safetensors({
        "fc1.weight": ("F32", [3, 2], values("<f4", 6)),
        "fc1.bias": ("F32", [3], values("<f4", 3)),
    }))
    write("safetensors", "all_dtypes.safetensors", safetensors({
        "a": ("F64", [2], values("<f8", 2)),
        "b": ("I64", [1, 2], values("<i8", 2)),
        "c": ("BOOL", [4], values("|b1", 4)),
        "d": ("F32", [], values("<f4", 1)),
        "e": ("F32", [0, 3], b""),
    }, metadata={"format": "pt"}))
    write("safetensors", "empty.safetensors", safetensors({}))
    write("safetensors", "f16.safetensors", safetensors({"h": ("F16", [2], b"\0\0\0\0")}))


def idx(shape, payload):
    return bytes([0, 0, 8, len(shape)]) + b"".join(struct.pack(">I", d) for d in shape) + payload


def seeds_idx():
    images = idx([2, 28, 28], bytes((i * 7) % 256 for i in range(2 * 28 * 28)))
    labels = idx([3], bytes([0, 9, 4]))
    write("idx", "images-2x28x28-idx3-ubyte", images)
    write("idx", "images-2x28x28-idx3-ubyte.gz", gzip.compress(images, mtime=0))
    write("idx", "labels-3-idx1-ubyte", labels)
    write("idx", "labels-3-idx1-ubyte.gz", gzip.compress(labels, mtime=0))
    write("idx", "rank4.idx", idx([1, 2, 1, 3], bytes(range(6))))
    write("idx", "int32.idx", bytes([0, 0, 0x0C, 1]) + struct.pack(">I", 1) + b"\0\0\0\1")


if __name__ == "__main__":
    seeds_npy()
    seeds_safetensors()
    seeds_idx()
