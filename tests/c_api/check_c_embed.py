#!/usr/bin/env python3
"""Runs examples/c_embed on mlp.onnx and checks what it prints: an accepted plan report (JSON),
the model's input, and the output `probs` equal to the forward pass that make_mlp_onnx.py
computes in double precision from the same weights and inputs (after checking that mlp.onnx is
the file make_mlp_onnx.py writes).

usage: check_c_embed.py C_EMBED MODEL.onnx
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[2])))
import make_mlp_onnx  # noqa: E402  (beside the model)


def fail(message, output):
    print(output)
    sys.exit("check_c_embed: " + message)


def main():
    with open(sys.argv[2], "rb") as f:
        if f.read() != make_mlp_onnx.model():
            sys.exit(f"check_c_embed: {sys.argv[2]} is not what make_mlp_onnx.py writes; regenerate it")
    run = subprocess.run([sys.argv[1], sys.argv[2]], capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    if run.returncode != 0:
        fail(f"c_embed exited with {run.returncode}", out)
    start = run.stdout.find("{")
    if start < 0:
        fail("no plan report", out)
    report, _ = json.JSONDecoder().raw_decode(run.stdout[start:])
    if report.get("status") != "accepted" or report.get("profile") != "checked_cpu":
        fail("the plan report is not an accepted checked_cpu plan", out)
    capsules = [group["capsule"] for group in report["groups"]]
    if not capsules or not all(c.startswith("reference.") for c in capsules):
        fail(f"unexpected capsules {capsules}", out)
    if not re.search(r"^input x float32 \[2, 4\]$", run.stdout, re.MULTILINE):
        fail("the input line is missing", out)
    match = re.search(r"^output probs float32 \[2, 3\]:((?: \S+)+)$", run.stdout, re.MULTILINE)
    if not match:
        fail("the output line is missing", out)
    got = [float(v) for v in match.group(1).split()]
    want = [v for row in make_mlp_onnx.forward(make_mlp_onnx.example_input()) for v in row]
    if len(got) != len(want) or any(abs(g - w) > 2e-6 + 1e-5 * abs(w) for g, w in zip(got, want)):
        fail(f"output {got}, expected {want}", out)
    print(f"c_embed: plan accepted ({len(capsules)} groups), output matches: {got}")


if __name__ == "__main__":
    main()
