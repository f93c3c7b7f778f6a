#!/usr/bin/env python3
"""Writes plugins/cpu/onednn.capsule.json from the oneDNN plugin's capsule list (the same ops, in
the same order, as the kernel table in plugin.cpp) and the reference manifest's spec names (one op
catalog). Run from the repository root after changing the table: python3 plugins/cpu/onednn/gen_manifest.py
"""
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[3]
OPS = ["linear", "matmul", "conv2d", "max_pool2d", "max_pool2d_pad", "avg_pool2d",
       "avg_pool2d_pad", "relu", "gelu", "sigmoid", "tanh", "softmax", "log_softmax", "add", "sub",
       "mul", "batch_norm", "clamp", "concat"]
PRIMITIVE = {
    "linear": "inner_product (weights reordered once at prepare)",
    "matmul": "matmul (batch dims broadcast)",
    "conv2d": "convolution_direct (weights reordered once at prepare; activations in the layout the primitive prefers)",
    "max_pool2d": "pooling_max", "max_pool2d_pad": "pooling_max",
    "avg_pool2d": "pooling_avg", "avg_pool2d_pad": "pooling_avg (count_include_pad past the padding is refused)",
    "relu": "eltwise_relu", "gelu": "eltwise_gelu_erf / eltwise_gelu_tanh", "sigmoid": "eltwise_logistic",
    "tanh": "eltwise_tanh", "softmax": "softmax", "log_softmax": "logsoftmax",
    "add": "binary_add", "sub": "binary_sub", "mul": "binary_mul",
    "batch_norm": "batch_normalization (inference, running statistics; training refused)",
    "clamp": "eltwise_clip (NaN kept, as torch.clamp)",
    "concat": "concat (float32; int64, float64 and bool as row-major block copies)",
}


# Capsules that compute in bfloat16 when the profile allows fpmath bf16, and what they claim then.
BF16 = ("; under fpmath bf16 (e.g. profile onednn_cpu_bf16), on a CPU with native bfloat16 "
        "(avx512_bf16, AMX), input and weights are rounded to bfloat16 with float32 accumulation: "
        "within 2e-2 of the output scale of float32 and the same top-1 class on the shared models "
        "(mobilenet_v2, squeezenet1_1), for inputs and weights below 3.39e38 in magnitude "
        "(bfloat16's largest finite value: larger float32 values round to infinity); elsewhere "
        "float32 as above")
BF16_OPS = {"linear", "conv2d"}
# Value claims that differ from the float32 one above.
VALUE = {"concat": "a copy: values equal torch.cat exactly for float32, float64, int64 and bool (the conformance cases)"}


def main():
    ref = json.loads((ROOT / "plugins/cpu/reference.capsule.json").read_text())
    spec = {c["op"]: c["spec"] for c in ref["capsules"]}
    prov = {"source_file": "plugins/cpu/onednn", "native_symbol": "capsule_plugin_entry"}
    capsules = []
    for op in OPS:
        s = spec[op]
        capsules.append({
            "name": "onednn." + op,
            "op": op,
            "provider": "onednn",
            "device": "cpu",
            "spec": s,
            "trust": "checked",
            "supports_forward": True,
            "vjp": "none",
            "runtime": "eager",
            "contracts": {
                "shape": {"claim": {"kind": "shape-safety", "op": op},
                          "summary": "output shape follows docs/ops.md; prepare checks the node's shapes and attributes, forward refuses shapes other than the prepared ones",
                          "evidence": "runtime-guard", "provenance": prov},
                "layout": {"claim": {"kind": "layout-compatibility", "op": op, "layout": "canonical-tensor"},
                           "summary": "reads and writes contiguous row-major tensors (oneDNN plain layouts); blocked layouts stay inside the kernel",
                           "evidence": "runtime-guard", "provenance": prov},
                "value": {"claim": {"kind": "value-refinement", "op": op, "spec": s},
                          "summary": VALUE.get(op, "float32 values match " + s + " within the conformance tolerances and the reference capsule within 1e-4 relative; float64 is refused (UNSUPPORTED)") + (BF16 if op in BF16_OPS else ""),
                          "evidence": "test-suite", "provenance": prov},
                "vjp": {"claim": {"kind": "vjp-refinement", "op": op, "spec": s, "vjp_mode": "none"},
                        "summary": "forward-only (inference): no backward kernel; admissible only under VJP mode none",
                        "evidence": "runtime-guard", "provenance": prov},
            },
            "notes": "oneDNN " + PRIMITIVE[op] + " (plugins/cpu/onednn)",
        })
    manifest = {
        "name": "onednn",
        "version": "0.1.0",
        "abi_version": {"major": 1, "minor": 1},
        "library": "libcapsule_onednn.so",
        "device": "cpu",
        "providers": ["onednn"],
        "registry_modes": ["default", "with-libtorch"],
        "priority": 50,
        "capsules": capsules,
        "description": "oneDNN (libdnnl 2.x) CPU capsules, float32, forward only, prepared kernels.",
    }
    out = ROOT / "plugins/cpu/onednn.capsule.json"
    out.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
