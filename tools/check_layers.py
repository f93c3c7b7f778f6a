#!/usr/bin/env python3
"""Checks the layering of DESIGN.md section 3: no file of a lower layer includes a header of a
higher layer, and each third-party library is included only from the layers that link it.

usage: check_layers.py LAYER_MAP [--header-dir DIR ...]

LAYER_MAP has one `<layer>\t<file>` line per source or header of a layer's target (the build
writes it from the targets' source lists and HEADERS file sets). Layers, lowest first: abi
(plugins sit at this level: they may include only the ABI), core, runtime, onnx, c (the C API,
which loads ONNX models), training, tool.
A header that a mapped file includes with a relative path and that is not mapped itself belongs
to the includer's layer and is checked too. Every header under a --header-dir must be mapped.
"""
import argparse
import os
import re
import sys

RANK = {"abi": 0, "plugin": 0, "core": 1, "runtime": 2, "onnx": 3, "c": 4, "training": 5, "tool": 6}
# Third-party headers and the lowest layer that may include them.
THIRD_PARTY = [
    ("boost/", "runtime"), ("nettle/", "runtime"), ("dlfcn.h", "runtime"),
    ("onnx/", "onnx"), ("google/protobuf/", "onnx"),
    ("zlib.h", "training"),
    ("spdlog/", "tool"), ("CLI/", "tool"),
]
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.MULTILINE)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("layer_map")
    parser.add_argument("--header-dir", action="append", default=[])
    args = parser.parse_args()

    layer_of = {}
    problems = []
    with open(args.layer_map, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            layer, path = line.rstrip("\n").split("\t", 1)
            if layer not in RANK:
                sys.exit(f"check_layers: unknown layer '{layer}' in {args.layer_map}")
            path = os.path.realpath(path)
            if layer_of.setdefault(path, layer) != layer:
                problems.append(f"{path}: in layers {layer_of[path]} and {layer}")
    by_spelling = {}
    for path in layer_of:
        parent = os.path.basename(os.path.dirname(path))
        by_spelling.setdefault(f"{parent}/{os.path.basename(path)}", path)

    for header_dir in args.header_dir:
        for name in sorted(os.listdir(header_dir)):
            path = os.path.realpath(os.path.join(header_dir, name))
            if os.path.isfile(path) and path not in layer_of:
                problems.append(f"{path}: in no layer (add it to a target's HEADERS file set)")

    work = sorted(layer_of.items())
    seen = set(layer_of)
    while work:
        path, layer = work.pop()
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as e:
            problems.append(f"{path}: {e.strerror}")
            continue
        for quote, spelled in INCLUDE.findall(text):
            if quote == "<":
                for prefix, lowest in THIRD_PARTY:
                    if spelled.startswith(prefix) and RANK[layer] < RANK[lowest]:
                        problems.append(f"{path} ({layer}) includes <{spelled}>, which only "
                                        f"layer {lowest} and above may use")
                continue
            local = os.path.realpath(os.path.join(os.path.dirname(path), spelled))
            if local in layer_of:
                target = local
            elif spelled in by_spelling:
                target = by_spelling[spelled]
            elif os.path.isfile(local):
                if local not in seen:
                    seen.add(local)
                    work.append((local, layer))
                continue
            elif spelled.startswith("capsule/"):
                problems.append(f'{path} ({layer}) includes "{spelled}", which is in no layer')
                continue
            else:
                continue  # a directory of the consumer's own include path (tests, fixtures)
            if RANK[layer_of[target]] > RANK[layer]:
                problems.append(f'{path} ({layer}) includes "{spelled}" of the higher layer '
                                f"{layer_of[target]}")

    print(f"checked {len(seen)} files in layers abi < core < runtime < onnx < c < training < tool")
    if problems:
        print("layering violations:\n  " + "\n  ".join(sorted(set(problems))))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
