#!/usr/bin/env python3
"""capsule serve over REST (Open Inference Protocol v2), with a client written with the Python
standard library only, and over gRPC, by running the C++ client tests/serve/grpc_client.cpp.

    test_serve.py --capsule BIN/capsule --models tests/data/models [--grpc-client BIN]
                  [--load CLIENTS REQUESTS]

Builds a model repository in a temporary directory: an MLP 784-256-256-10 as an ONNX file with a
dynamic batch (written here, protobuf wire format by hand) served with max_batch_size 8 and
dynamic batching; the same MLP at batch 1 as a JSON IR graph with a safetensors parameters file;
the shared ONNX models squeezenet1_1 and mobilenet_v2; a model whose profile cannot run here and
one with a malformed config.json. Starts `capsule serve` on 127.0.0.1 (any free port), checks
health, metadata, outputs (against `capsule run`, the shared models' recorded outputs and, for the
MLP, a pure-Python forward pass), every error path and malformed bodies, then SIGTERM: the server
must drain and exit 0. With --load, instead runs CLIENTS threads of REQUESTS JSON requests each
against the JSON IR MLP, checks every response and prints throughput, p50 and p99.
"""
import argparse
import gzip
import http.client
import json
import math
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

FAILURES = []
CHECKS = [0]


def check(condition, what):
    CHECKS[0] += 1
    if not condition:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)


# ---- files: protobuf (ONNX), npy, safetensors -----------------------------------------------

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, wire, payload):
    key = varint((number << 3) | wire)
    if wire == 0:
        return key + varint(payload)
    return key + varint(len(payload)) + payload


def text(number, s):
    return field(number, 2, s.encode())


def onnx_tensor(name, dims, values):
    return (b"".join(field(1, 0, d) for d in dims) + field(2, 0, 1) + text(8, name) +
            field(9, 2, struct.pack("<%df" % len(values), *values)))


def onnx_value_info(name, dims, elem_type=1):  # 1: FLOAT, 7: INT64
    shape = b"".join(field(1, 2, text(2, d) if isinstance(d, str) else field(1, 0, d)) for d in dims)
    tensor_type = field(1, 0, elem_type) + field(2, 2, shape)
    return text(1, name) + field(2, 2, field(1, 2, tensor_type))


def onnx_node(op, inputs, output, trans_b=False, int_attrs=(), ints_attrs=()):
    node = b"".join(text(1, i) for i in inputs) + text(2, output) + text(3, output) + text(4, op)
    if trans_b:
        node += field(5, 2, text(1, "transB") + field(20, 0, 2) + field(3, 0, 1))
    for name, value in int_attrs:  # AttributeProto: name 1, i 3, type 20 (INT = 2)
        node += field(5, 2, text(1, name) + field(20, 0, 2) + field(3, 0, value))
    for name, values in ints_attrs:  # ints 8, type INTS = 7
        node += field(5, 2, text(1, name) + field(20, 0, 7) + b"".join(field(8, 0, v) for v in values))
    return node


def write_onnx(path, nodes, inputs, outputs):
    graph = (b"".join(field(1, 2, n) for n in nodes) + text(2, "g") +
             b"".join(field(11, 2, onnx_value_info(*i)) for i in inputs) +
             b"".join(field(12, 2, onnx_value_info(*o)) for o in outputs))
    with open(path, "wb") as f:
        f.write(field(1, 0, 8) + text(2, "test_serve.py") + field(7, 2, graph) + field(8, 2, field(2, 0, 13)))


def mlp_weights(seed=7):
    rng = random.Random(seed)
    layers = []
    for fan_in, fan_out in ((784, 256), (256, 256), (256, 10)):
        bound = 1 / math.sqrt(fan_in)
        w = [rng.uniform(-bound, bound) for _ in range(fan_out * fan_in)]  # [out, in]
        b = [rng.uniform(-bound, bound) for _ in range(fan_out)]
        layers.append((fan_in, fan_out, w, b))
    return layers


def write_mlp_onnx(path, layers):
    nodes, inits, x = [], [], "input"
    for k, (fan_in, fan_out, w, b) in enumerate(layers):
        inits += [onnx_tensor("w%d" % k, [fan_out, fan_in], w), onnx_tensor("b%d" % k, [fan_out], b)]
        out = "logits" if k == len(layers) - 1 else "gemm%d" % k
        nodes.append(onnx_node("Gemm", [x, "w%d" % k, "b%d" % k], out, trans_b=True))
        if k < len(layers) - 1:
            nodes.append(onnx_node("Relu", [out], "relu%d" % k))
            out = "relu%d" % k
        x = out
    graph = (b"".join(field(1, 2, n) for n in nodes) + text(2, "mlp") +
             b"".join(field(5, 2, t) for t in inits) +
             field(11, 2, onnx_value_info("input", ["N", 784])) + field(12, 2, onnx_value_info("logits", ["N", 10])))
    model = field(1, 0, 8) + text(2, "test_serve.py") + field(7, 2, graph) + field(8, 2, field(2, 0, 13))
    with open(path, "wb") as f:
        f.write(model)


def write_mlp_json_ir(directory, layers):
    """The MLP at batch 1 as JSON IR (linear + relu) with a safetensors file of its parameters."""
    tensors, offset, header, blob = {}, 0, {}, bytearray()
    for k, (fan_in, fan_out, w, b) in enumerate(layers):
        for key, shape, values in (("fc%d.weight" % k, [fan_out, fan_in], w), ("fc%d.bias" % k, [fan_out], b)):
            data = struct.pack("<%df" % len(values), *values)
            header[key] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
            blob += data
            offset += len(data)
    head = json.dumps(header).encode()
    head += b" " * ((8 - len(head) % 8) % 8)
    with open(os.path.join(directory, "mlp.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + blob)
    nodes = [{"id": 0, "op": "input", "name": "input", "shape": [1, 784], "dtype": "float32"}]
    parent = 0
    for k, (fan_in, fan_out, _, _) in enumerate(layers):
        nodes.append({"id": len(nodes), "op": "linear", "name": "fc%d" % k, "parents": [parent],
                      "attrs": {"out_features": fan_out}, "shape": [1, fan_out]})
        parent = len(nodes) - 1
        if k < len(layers) - 1:
            nodes.append({"id": len(nodes), "op": "relu", "name": "relu%d" % k, "parents": [parent], "shape": [1, fan_out]})
            parent = len(nodes) - 1
    graph = {"format": "capsule-ir", "version": 1, "nodes": nodes, "outputs": [parent], "parameters": "mlp.safetensors"}
    with open(os.path.join(directory, "model.json"), "w") as f:
        json.dump(graph, f)


def mlp_forward(layers, row):
    """The MLP in pure Python (float64): an independent reference."""
    x = row
    for k, (fan_in, fan_out, w, b) in enumerate(layers):
        y = [b[o] + sum(w[o * fan_in + i] * x[i] for i in range(fan_in)) for o in range(fan_out)]
        x = [max(v, 0.0) for v in y] if k < len(layers) - 1 else y
    return x


def write_npy(path, shape, values):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % (
        ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else ""))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(struct.pack("<%df" % len(values), *values))


def read_npy(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<H", data[8:10])[0]
    header = data[10:10 + n].decode("latin1")
    assert "'<f4'" in header and "False" in header, header
    shape = tuple(int(d) for d in header.split("(")[1].split(")")[0].split(",") if d.strip())
    count = 1
    for d in shape:
        count *= d
    return list(shape), list(struct.unpack("<%df" % count, data[10 + n:10 + n + 4 * count]))


def close(a, b, rtol=1e-5, atol=1e-6):
    return len(a) == len(b) and all(abs(x - y) <= atol + rtol * abs(y) for x, y in zip(a, b))


# ---- the server and a REST client ----------------------------------------------------------------

class Server:
    def __init__(self, capsule, repository, extra=()):
        self.proc = subprocess.Popen([capsule, "serve", "--model-repository", repository, "--host", "127.0.0.1",
                                      "--http-port", "0", "--grpc-port", "0", *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.log = []
        deadline = time.time() + 120
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.log.append(line.rstrip())
            if "gRPC on " in line:
                self.grpc_port = int(line.rsplit(":", 1)[1])
            if "listening on http://" in line:
                self.port = int(line.rsplit(":", 1)[1])
                self.reader = threading.Thread(target=self._drain, daemon=True)
                self.reader.start()
                return
        raise SystemExit("capsule serve did not start:\n" + "\n".join(self.log))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        """A check that raised must not leave the server running."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def _drain(self):
        for line in self.proc.stdout:
            self.log.append(line.rstrip())

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        self.reader.join(timeout=10)
        return code


def request(port, method, path, body=None, headers=None, conn=None):
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", **(headers or {})}
    conn.request(method, path, body=body, headers=headers or {})
    r = conn.getresponse()
    data = r.read()
    result = (r.status, dict(r.getheaders()), data)
    if own:
        conn.close()
    return result


def raw_exchange(port, *parts, pause=0.0, timeout=10):
    """Sends `parts` on a new connection, `pause` seconds apart (stopping when the server closes),
    and returns everything the server sends until it closes."""
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            for k, part in enumerate(parts):
                if k and pause:
                    time.sleep(pause)
                s.sendall(part)
        except OSError:
            pass
        while True:
            try:
                chunk = s.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            answer += chunk
    return answer


def run_concurrently(target, count):
    """Runs target(k) for k in range(count), each on its own thread, and waits for all."""
    threads = [threading.Thread(target=target, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def as_json(data):
    try:
        return json.loads(data)
    except ValueError:
        return None


def infer_json(port, model, rows_of_values, shape, conn=None, extra=None):
    body = {"inputs": [{"name": "input", "shape": shape, "datatype": "FP32", "data": rows_of_values}]}
    body.update(extra or {})
    return request(port, "POST", "/v2/models/%s/infer" % model, body, conn=conn)


def expect_error(port, what, status, path, body, headers=None, contains=""):
    code, _, data = request(port, "POST", path, body, headers)
    doc = as_json(data)
    ok = code == status and isinstance(doc, dict) and isinstance(doc.get("error"), str) and contains in doc["error"]
    check(ok, "%s: expected HTTP %d with an error object containing %r, got %d %r" % (what, status, contains, code, data[:300]))


# ---- the checks ----------------------------------------------------------------------------------

def build_repository(root, models_dir, layers):
    def model(name, config, files):
        os.makedirs(os.path.join(root, name, "1"))
        with open(os.path.join(root, name, "config.json"), "w") as f:
            f.write(config if isinstance(config, str) else json.dumps(config))
        for src, dst in files:
            with open(src, "rb") as a, open(os.path.join(root, name, "1", dst), "wb") as b:
                b.write(a.read())

    os.makedirs(os.path.join(root, "mlp", "1"))
    write_mlp_onnx(os.path.join(root, "mlp", "1", "model.onnx"), layers)
    with open(os.path.join(root, "mlp", "config.json"), "w") as f:
        json.dump({"profile": "checked_cpu", "max_batch_size": 8, "inputs": {"input": [784]},
                   "dynamic_batching": {"max_queue_delay_us": 2000, "preferred_batch_sizes": [4, 8]}}, f)
    os.makedirs(os.path.join(root, "mlp_json", "1"))
    write_mlp_json_ir(os.path.join(root, "mlp_json", "1"), layers)
    with open(os.path.join(root, "mlp_json", "config.json"), "w") as f:
        json.dump({"profile": "checked_cpu"}, f)
    for name in ("squeezenet1_1", "mobilenet_v2"):
        model(name, {"profile": "checked_cpu"}, [(os.path.join(models_dir, name, "model.onnx"), "model.onnx")])
    model("rocm_only", {"profile": "future_rocm"}, [(os.path.join(models_dir, "squeezenet1_1", "model.onnx"), "model.onnx")])
    model("bad_config", '{"profile": "checked_cpu", "profile": "onednn_cpu"}', [])
    os.makedirs(os.path.join(root, "no_version"))  # a model without a version directory
    with open(os.path.join(root, "no_version", "config.json"), "w") as f:
        json.dump({"profile": "checked_cpu"}, f)
    # A model whose output's dimension 0 is not the batch (a mean over it): refused with batching.
    os.makedirs(os.path.join(root, "rowmix", "1"))
    write_onnx(os.path.join(root, "rowmix", "1", "model.onnx"),
               [onnx_node("ReduceMean", ["x"], "y", int_attrs=[("keepdims", 1)], ints_attrs=[("axes", [0])])],
               [("x", ["N", 4])], [("y", [1, 4])])
    with open(os.path.join(root, "rowmix", "config.json"), "w") as f:
        json.dump({"profile": "checked_cpu", "max_batch_size": 4, "inputs": {"x": [4]}}, f)
    # A model whose output's other dimensions depend on the batch (x x^T is [N, N]): refused too.
    os.makedirs(os.path.join(root, "gram", "1"))
    write_onnx(os.path.join(root, "gram", "1", "model.onnx"),
               [onnx_node("Transpose", ["x"], "xt", ints_attrs=[("perm", [1, 0])]), onnx_node("MatMul", ["x", "xt"], "y")],
               [("x", ["N", 2])], [("y", ["N", "N"])])
    with open(os.path.join(root, "gram", "config.json"), "w") as f:
        json.dump({"profile": "checked_cpu", "max_batch_size": 4, "inputs": {"x": [2]}}, f)
    # An output of data-dependent length (NonZero): its metadata marks that axis -1.
    os.makedirs(os.path.join(root, "nonzero", "1"))
    write_onnx(os.path.join(root, "nonzero", "1", "model.onnx"), [onnx_node("NonZero", ["x"], "nz")],
               [("x", [3, 4])], [("nz", [2, "K"], 7)])
    with open(os.path.join(root, "nonzero", "config.json"), "w") as f:
        json.dump({"profile": "checked_cpu"}, f)
    # Data a kernel refuses (an index out of range) in one request of a dynamic batch.
    os.makedirs(os.path.join(root, "pick", "1"))
    write_onnx(os.path.join(root, "pick", "1", "model.onnx"),
               [onnx_node("GatherElements", ["x", "i"], "y", int_attrs=[("axis", 1)])],
               [("x", ["N", 4]), ("i", ["N", 2], 7)], [("y", ["N", 2])])
    with open(os.path.join(root, "pick", "config.json"), "w") as f:
        json.dump({"profile": "checked_cpu", "max_batch_size": 8, "inputs": {"x": [4], "i": [2]},
                   "dynamic_batching": {"max_queue_delay_us": 300000, "preferred_batch_sizes": [8]}}, f)


def functional(args, layers):
    with tempfile.TemporaryDirectory() as tmp:
        repo = os.path.join(tmp, "repo")
        build_repository(repo, args.models, layers)
        with Server(args.capsule, repo, ["--max-request-bytes", str(4 << 20), "--header-timeout", "2"]) as server:
            functional_checks(args, layers, tmp, repo, server)


def functional_checks(args, layers, tmp, repo, server):
    port = server.port
    print("\n".join(server.log), flush=True)

    # Health and metadata.
    check(request(port, "GET", "/v2/health/live")[0] == 200, "live")
    check(request(port, "GET", "/v2/health/ready")[0] == 200, "ready")
    meta = as_json(request(port, "GET", "/v2")[2])
    check(meta and meta["name"] == "capsule" and "binary_tensor_data" in meta["extensions"], "server metadata %r" % meta)
    code, _, data = request(port, "GET", "/v2/models/mlp")
    meta = as_json(data)
    check(code == 200 and meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 784]}]
          and meta["outputs"] == [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}]
          and meta["versions"] == ["1"], "mlp metadata %r" % data)
    check(request(port, "GET", "/v2/models/mlp/versions/1/ready")[0] == 200, "mlp version 1 ready")
    # NonZero's output: [2, -1] in the metadata (the session's [2, 12] is only its bound), and a
    # reply of the length the data gives, with numpy.nonzero's indices.
    code, _, data = request(port, "GET", "/v2/models/nonzero")
    meta = as_json(data)
    check(code == 200 and meta["outputs"] == [{"name": "nz", "datatype": "INT64", "shape": [2, -1]}],
          "NonZero metadata: %r" % data)
    x = [0, 1.5, 0, 0, -2, 0, 0, 0, 0, 0, 0, 7]
    code, _, data = request(port, "POST", "/v2/models/nonzero/infer",
                            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [3, 4], "data": x}]})
    out = as_json(data)
    check(code == 200 and out["outputs"][0]["shape"] == [2, 3] and out["outputs"][0]["data"] == [0, 1, 2, 1, 0, 3],
          "NonZero reply: %r" % data)
    code, _, data = request(port, "GET", "/v2/models/rocm_only/ready")
    doc = as_json(data)
    check(code == 503 and doc["ready"] is False and "rocm" in doc["reason"].lower(),
          "a model whose profile cannot run here is not ready, with the reason: %d %r" % (code, data))
    check(request(port, "GET", "/v2/models/squeezenet1_1/ready")[0] == 200,
          "the other models are still served")
    code, _, data = request(port, "GET", "/v2/models/bad_config")
    check(code == 503 and "is not ready" in as_json(data)["error"] and "duplicate key" in as_json(data)["error"],
          "a malformed config.json makes the model not ready, naming the cause: %r" % data)
    code, _, data = request(port, "GET", "/v2/models/nope")
    check(code == 404 and "unknown model 'nope'" in as_json(data)["error"], "unknown model: %r" % data)
    check(request(port, "GET", "/v2/models/mlp/versions/7")[0] == 404, "unknown version")
    check(request(port, "GET", "/v2/nothing/here")[0] == 404, "unknown endpoint")

    # Outputs: the MLP against `capsule run` (the same session, run directly) and pure Python.
    rng = random.Random(1)
    rows = [[rng.uniform(-1, 1) for _ in range(784)] for _ in range(3)]
    flat = [v for r in rows for v in r]
    write_npy(os.path.join(tmp, "x.npy"), [3, 784], flat)
    subprocess.run([args.capsule, "run", "--profile", "checked_cpu", "--quiet", os.path.join(repo, "mlp", "1", "model.onnx"),
                    "--input", "input=" + os.path.join(tmp, "x.npy"), "--output-dir", os.path.join(tmp, "direct")],
                   check=True, stdout=subprocess.DEVNULL)
    direct_shape, direct = read_npy(os.path.join(tmp, "direct", "logits.npy"))
    code, _, data = infer_json(port, "mlp", flat, [3, 784], extra={"id": "req-1"})
    doc = as_json(data)
    check(code == 200 and doc["id"] == "req-1" and doc["model_name"] == "mlp" and doc["model_version"] == "1",
          "mlp infer: %d %r" % (code, data[:300]))
    out = doc["outputs"][0]
    check(out["name"] == "logits" and out["shape"] == [3, 10] and out["datatype"] == "FP32", "mlp output %r" % out)
    check(close(out["data"], direct), "mlp outputs equal `capsule run`'s")
    check(close(out["data"][:10], mlp_forward(layers, rows[0]), rtol=1e-4, atol=1e-5),
          "mlp outputs equal a pure-Python forward pass")
    code, _, data = infer_json(port, "mlp", rows, [3, 784])  # nested arrays
    check(code == 200 and close(as_json(data)["outputs"][0]["data"], direct), "nested-array data")

    # The binary tensor data extension, both ways.
    header = json.dumps({"inputs": [{"name": "input", "shape": [3, 784], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 3 * 784 * 4}}],
                         "outputs": [{"name": "logits", "parameters": {"binary_data": True}}]}).encode()
    body = header + struct.pack("<%df" % len(flat), *flat)
    code, headers, data = request(port, "POST", "/v2/models/mlp/infer", body,
                                  {"Inference-Header-Content-Length": str(len(header)),
                                   "Content-Type": "application/octet-stream"})
    n = int(headers.get("Inference-Header-Content-Length", "-1"))
    doc = as_json(data[:n]) if n > 0 else None
    check(code == 200 and doc and doc["outputs"][0]["parameters"]["binary_data_size"] == 120 and len(data) == n + 120,
          "binary response: %d %r" % (code, data[:200]))
    if code == 200 and n > 0:
        check(close(list(struct.unpack("<30f", data[n:n + 120])), direct), "binary outputs equal `capsule run`'s")

    # The shared models against their recorded outputs.
    for name in ("squeezenet1_1", "mobilenet_v2"):
        shape, x = read_npy(os.path.join(args.models, name, "input.npy"))
        _, expected = read_npy(os.path.join(args.models, name, "output.npy"))
        header = json.dumps({"inputs": [{"name": "input", "shape": shape, "datatype": "FP32",
                                         "parameters": {"binary_data_size": 4 * len(x)}}],
                             "parameters": {"binary_data_output": True}}).encode()
        code, headers, data = request(port, "POST", "/v2/models/%s/infer" % name,
                                      header + struct.pack("<%df" % len(x), *x),
                                      {"Inference-Header-Content-Length": str(len(header))})
        n = int(headers.get("Inference-Header-Content-Length", "-1"))
        got = list(struct.unpack("<%df" % len(expected), data[n:])) if code == 200 and n > 0 else []
        scale = max(abs(v) for v in expected)
        check(close(got, expected, rtol=1e-4, atol=1e-4 * scale), "%s outputs equal the recorded ones" % name)

    # Dynamic batching: concurrent requests of 1..3 rows, each checked against `capsule run`.
    results = []

    def client(k):
        n_rows = 1 + k % 3
        x = [v for r in rows[:n_rows] for v in r]
        code, _, data = infer_json(port, "mlp", x, [n_rows, 784])
        results.append((code, n_rows, as_json(data)))

    run_concurrently(client, 12)
    check(all(code == 200 and close(doc["outputs"][0]["data"], direct[:10 * n]) for code, n, doc in results),
          "12 concurrent requests through the dynamic batcher each get their own rows: %r" %
          [(c, n) for c, n, _ in results])

    # gRPC: the C++ client checks metadata, outputs against `capsule run` and its error paths.
    if args.grpc_client:
        result = subprocess.run([args.grpc_client, str(server.grpc_port), os.path.join(tmp, "x.npy"),
                                 os.path.join(tmp, "direct", "logits.npy")], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        print(result.stdout.strip(), flush=True)
        check(result.returncode == 0, "the gRPC client's checks")

    # A model whose output's dimension 0 is not the batch is not ready (it would be sliced by rows).
    code, _, data = request(port, "GET", "/v2/models/rowmix/ready")
    check(code == 503 and "dimension 0 of every input and output must be the batch" in as_json(data)["reason"],
          "rowmix is not ready: %r" % data[:300])
    code, _, data = request(port, "GET", "/v2/models/gram/ready")
    check(code == 503 and "only dimension 0 may depend on the batch" in as_json(data)["reason"],
          "gram is not ready: %r" % data[:300])
    # One request with an index out of range in a dynamic batch fails alone.
    picks = []

    def pick(k):
        idx = [[0, 3]] if k != 1 else [[0, 100]]
        body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [10.0 * k + j for j in range(4)]},
                           {"name": "i", "shape": [1, 2], "datatype": "INT64", "data": idx}]}
        code, _, data = request(port, "POST", "/v2/models/pick/infer", body)
        picks.append((k, code, as_json(data)))

    run_concurrently(pick, 3)
    for k, code, doc in sorted(picks, key=lambda p: p[0]):
        if k == 1:
            check(code == 400 and "100" in doc["error"] and "refused the request's data" in doc["error"],
                  "the request with index 100 fails with 400 (the client's data): %d %r" % (code, doc))
        else:
            check(code == 200 and doc["outputs"][0]["data"] == [10.0 * k, 10.0 * k + 3],
                  "request %d of the same batch still gets its rows: %d %r" % (k, code, doc))

    # A second server on the same ports fails to start (no SO_REUSEPORT sharing).
    second = subprocess.run([args.capsule, "serve", "--model-repository", repo, "--host", "127.0.0.1",
                             "--http-port", str(port), "--grpc-port", "-1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    check(second.returncode == 1 and "cannot listen" in second.stdout,
          "a second server on a port in use: %d %r" % (second.returncode, second.stdout[-300:]))

    # Every error path: the protocol's error object, a 4xx status, a cause to act on.
    path = "/v2/models/mlp/infer"
    ok_input = {"name": "input", "shape": [1, 784], "datatype": "FP32", "data": flat[:784]}
    expect_error(port, "truncated JSON", 400, path, b'{"inputs": [{"name": "input", "shape": [1, 7',
                 {"Content-Type": "application/json"}, "malformed JSON")
    expect_error(port, "not an object", 400, path, [1, 2], contains="JSON object")
    expect_error(port, "duplicate key", 400, path, b'{"inputs": [], "inputs": []}',
                 {"Content-Type": "application/json"}, "duplicate key")
    expect_error(port, "unknown key", 400, path, {"inputs": [ok_input], "input": 1}, contains="unknown request key")
    expect_error(port, "wrong datatype", 400, path, {"inputs": [dict(ok_input, datatype="FP64")]},
                 contains="datatype 'FP64' is not the model's FP32")
    expect_error(port, "wrong shape", 400, path, {"inputs": [dict(ok_input, shape=[1, 783])]},
                 contains="is not the model's [-1, 784]")
    expect_error(port, "batch above max_batch_size", 400, path,
                 {"inputs": [dict(ok_input, shape=[9, 784], data=flat[:784] * 9)]}, contains="outside 1..8")
    expect_error(port, "huge declared shape", 400, path,
                 {"inputs": [dict(ok_input, shape=[2 ** 62, 784])]}, contains="outside 1..8")
    expect_error(port, "negative dimension", 400, path, {"inputs": [dict(ok_input, shape=[-1, 784])]},
                 contains="non-negative")
    expect_error(port, "too few values", 400, path, {"inputs": [dict(ok_input, data=flat[:783])]},
                 contains="holds 783 values, its shape [1, 784] needs 784")
    expect_error(port, "too many values", 400, path, {"inputs": [dict(ok_input, data=flat[:785])]},
                 contains="holds 785 values")
    expect_error(port, "ragged nesting", 400, path,
                 {"inputs": [dict(ok_input, shape=[2, 784], data=[flat[:1000], flat[:568]])]},
                 contains="nested 'data' does not match its shape [2, 784] at depth 1")
    expect_error(port, "nesting deeper than the shape", 400, path,
                 {"inputs": [dict(ok_input, data=[[[v] for v in flat[:784]]])]}, contains="nested deeper than its shape")
    deep = b'{"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32", "data": ' + \
        b"[" * 100000 + b"0" + b"]" * 100000 + b"}]}"
    expect_error(port, "100,000 levels of nesting", 400, path, deep, {"Content-Type": "application/json"},
                 "does not match its shape")
    deep_shape = b'{"inputs": [{"name": "input", "shape": ' + b"[" * 100000 + b"]" * 100000 + b', "datatype": "FP32"}]}'
    expect_error(port, "a deeply nested shape", 400, path, deep_shape, {"Content-Type": "application/json"},
                 "must hold non-negative integers")
    for dim, shown in ((2 ** 64, "1.8446744073709552e+19"), (2 ** 63, "9223372036854775808")):
        expect_error(port, "test_shape_too_large: %d" % dim, 400, path, {"inputs": [dict(ok_input, shape=[dim, 1])]},
                     contains="'shape' dimension %s is too large (over 2^63-1)" % shown)
    x4 = {"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}
    for value, named in ((845.0, "the number 845.0, not an integer literal (INT64): a JSON number with a fraction"),
                         (2 ** 63, "not within INT64's range [-9223372036854775808, 9223372036854775807]")):
        expect_error(port, "test_int64_value_messages: %r" % value, 400, "/v2/models/pick/infer",
                     {"inputs": [x4, {"name": "i", "shape": [1, 2], "datatype": "INT64", "data": [0, value]}]},
                     contains=named)
    expect_error(port, "an object as a value", 400, path, {"inputs": [dict(ok_input, data=[{"a": [[1]]}] * 784)]},
                 contains="value 0 is an object, not a number")
    expect_error(port, "a string value", 400, path, {"inputs": [dict(ok_input, data=["1"] * 784)]},
                 contains="value 0 is a string, not a number")
    expect_error(port, "a value beyond FP32", 400, path, {"inputs": [dict(ok_input, data=[1e39] * 784)]},
                 contains="within FP32's range")
    expect_error(port, "unknown input", 400, path, {"inputs": [dict(ok_input, name="x")]}, contains="unknown input 'x'")
    expect_error(port, "missing input", 400, path, {"inputs": []}, contains="missing input 'input'")
    expect_error(port, "input twice", 400, path, {"inputs": [ok_input, ok_input]}, contains="given twice")
    expect_error(port, "unknown output", 400, path, {"inputs": [ok_input], "outputs": [{"name": "y"}]},
                 contains="unknown output 'y'")
    head = json.dumps({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32",
                                   "parameters": {"binary_data_size": 784 * 4}}]}).encode()
    binary = struct.pack("<784f", *flat[:784])
    for what, body, length, contains in (
            ("binary data shorter than declared", head + binary[:-4], len(head), "exceeds the 3132 binary bytes"),
            ("binary bytes nobody claims", head + binary + b"xxxx", len(head), "4 bytes of binary data are not claimed"),
            ("header length past the body", head + binary, len(head) + len(binary) + 1, "exceeds the body"),
            ("header length cutting the JSON", head + binary, len(head) - 3, "malformed JSON")):
        expect_error(port, what, 400, path, body, {"Inference-Header-Content-Length": str(length)}, contains)
    expect_error(port, "header length not a number", 400, path, head + binary,
                 {"Inference-Header-Content-Length": "12x"}, "is not a byte count")
    wrong_size = json.dumps({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32",
                                         "parameters": {"binary_data_size": 100}}]}).encode()
    expect_error(port, "binary_data_size not the tensor's", 400, path, wrong_size + binary[:100],
                 {"Inference-Header-Content-Length": str(len(wrong_size))}, "is not the 3136 bytes")
    expect_error(port, "binary_data_size without the header", 400, path, json.loads(head.decode()),
                 contains="without an Inference-Header-Content-Length")
    # A body over --max-request-bytes is refused from its Content-Length, before it is read; the
    # server then closes the connection (the client's send may fail: a well-behaved client
    # sends Expect: 100-continue, as here, and gets the 413 instead of a 100).
    answer = raw_exchange(port, b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (path.encode(), 6 << 20))
    check(answer.startswith(b"HTTP/1.1 413") and b"exceeds 4194304 bytes" in answer,
          "a body over --max-request-bytes: %r" % answer[:300])
    expect_error(port, "infer on a model that is not ready", 503, "/v2/models/rocm_only/infer",
                 {"inputs": []}, contains="is not ready")
    expect_error(port, "infer on an unknown model", 404, "/v2/models/nope/infer", {"inputs": []},
                 contains="unknown model 'nope'")
    expect_error(port, "a body that is not gzip", 400, path, b"\x1f\x8b\x08\x00",
                 {"Content-Type": "application/json", "Content-Encoding": "gzip"}, "")
    bomb = gzip.compress(b"[" + b"0," * (3 << 20) + b"0]")  # 6 MiB as decoded, 6 KiB as sent
    expect_error(port, "a gzip body over the limit once decoded", 413, path, bomb,
                 {"Content-Type": "application/json", "Content-Encoding": "gzip"}, "bytes as decoded")
    code, _, data = request(port, "POST", path, gzip.compress(json.dumps({"inputs": [ok_input]}).encode()),
                            {"Content-Type": "application/json", "Content-Encoding": "gzip"})
    check(code == 200 and close(as_json(data)["outputs"][0]["data"], direct[:10]), "a gzip request: %d" % code)
    # An output JSON cannot carry: FP32 inputs of 3e38 overflow the MLP to infinities.
    expect_error(port, "an infinite output as JSON", 400, path, {"inputs": [dict(ok_input, data=[3e38] * 784)]},
                 contains="which JSON cannot carry")
    code, headers, data = request(port, "POST", path, {"inputs": [dict(ok_input, data=[3e38] * 784)],
                                                       "parameters": {"binary_data_output": True}})
    n = int(headers.get("Inference-Header-Content-Length", "-1"))
    check(code == 200 and n > 0 and not all(math.isfinite(v) for v in struct.unpack("<10f", data[n:n + 40])),
          "the same non-finite outputs as binary data: %d" % code)
    code, _, data = request(port, "POST", path, {"inputs": [dict(ok_input, data=[3.4028235e+38] + [0.0] * 783)]})
    check(code == 200 or b"JSON cannot carry" in data, "FLT_MAX as printed by other languages is a float32: %r" % data[:200])
    # A body that cannot be decoded is never read as the next request (request smuggling).
    smuggled = json.dumps({"id": "SMUGGLED", "inputs": [ok_input]}).encode()
    inner = (b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             b"Content-Length: %d\r\n\r\n" % len(smuggled)) + smuggled
    answer = raw_exchange(port, b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\n"
                                b"Content-Length: %d\r\n\r\n" % len(inner), inner, pause=0.3)
    check(answer.startswith(b"HTTP/1.1 400") and b"SMUGGLED" not in answer and answer.count(b"HTTP/1.1") == 1,
          "a body that is not gzip is not run as a request: %r" % answer[:400])
    # Framing a front proxy could read differently: refused, and the connection closes (the
    # trailing request is never run).
    follow = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
    head = b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    for what, extra, status in (
            ("two Content-Length headers", b"Content-Length: 2\r\nContent-Length: 2\r\n", b"400"),
            ("Content-Length and Transfer-Encoding", b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n", b"400"),
            ("Content-Length +2", b"Content-Length: +2\r\n", b"400"),
            ("Transfer-Encoding gzip, chunked", b"Transfer-Encoding: gzip, chunked\r\n", b"400"),
            ("two Transfer-Encoding headers", b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n", b"400"),
            ("Content-Encoding br", b"Content-Encoding: br\r\nContent-Length: 2\r\n", b"415")):
        answer = raw_exchange(port, head + extra + b"\r\n{}" + follow)
        check(answer.startswith(b"HTTP/1.1 " + status) and answer.count(b"HTTP/1.1 ") == 1,
              "%s: refused and closed: %r" % (what, answer[:300]))
    # A body on a method whose bodies are never read (GET, HEAD, OPTIONS) would be the next
    # request: refused and closed, the hidden request never answered.
    hidden = b"GET /v2/models/mlp HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    for method in (b"GET", b"HEAD", b"OPTIONS"):
        answer = raw_exchange(port, method + b" /v2/health/ready HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                              % len(hidden) + hidden, pause=0.3)
        check(answer.startswith(b"HTTP/1.1 400") and answer.count(b"HTTP/1.1 ") == 1 and b'"platform"' not in answer,
              "%s with a body: refused, the body not run: %r" % (method, answer[:300]))
        answer = raw_exchange(port, method + b" /v2/health/ready HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                              + b"%x\r\n" % len(hidden) + hidden + b"\r\n0\r\n\r\n", pause=0.3)
        check(answer.startswith(b"HTTP/1.1 400") and answer.count(b"HTTP/1.1 ") == 1,
              "%s with a chunked body: refused: %r" % (method, answer[:300]))
    # A POST that declares no length has an empty body in HTTP/1.1: 411 at once, not a worker
    # waiting for the connection to close (HTTP/1.0 too, and an empty Content-Length value).
    for version in (b"HTTP/1.1", b"HTTP/1.0"):
        started = time.monotonic()
        answer = raw_exchange(port, b"POST /v2/models/mlp/infer " + version + b"\r\nHost: x\r\n\r\n", timeout=10)
        check(answer.startswith(b"HTTP/1.1 411") and time.monotonic() - started < 1.5,
              "a %s POST without a length: 411 at once: %r" % (version, answer[:300]))
    answer = raw_exchange(port, b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n", timeout=10)
    check(answer.startswith(b"HTTP/1.1 4") and not answer.startswith(b"HTTP/1.1 408"),
          "an empty Content-Length value: refused at once: %r" % answer[:300])
    # Chunked bodies: read with the same limit (cpp-httplib itself has none for them).
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        body = json.dumps({"inputs": [ok_input]}).encode()
        s.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
        answer = b""
        while b'"outputs"' not in answer and b'"error"' not in answer:
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
    check(answer.startswith(b"HTTP/1.1 200"), "a chunked request: %r" % answer[:200])
    piece = b"0," * 32768
    answer = raw_exchange(port, b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
                          *[b"%x\r\n" % len(piece) + piece + b"\r\n"] * 80, timeout=30)  # 5 MiB, over the 4 MiB limit
    check(answer.startswith(b"HTTP/1.1 413") and b"bytes as decoded" in answer, "a chunked body over the limit: %r" % answer[:200])
    # Paths that are not UTF-8: a 404 naming the path, and the server lives on.
    for bad_path in ("/%ff", "/v2/models/%ff", "/v2/models/%ff/infer"):
        infer = "infer" in bad_path
        code, _, data = request(port, "POST" if infer else "GET", bad_path, b"{}" if infer else None)
        check(code == 404 and as_json(data) is not None and "\\xff" in as_json(data)["error"],
              "path %s: %d %r" % (bad_path, code, data[:200]))
    # Garbage bytes on the socket: the server answers the next request as usual.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"\x00\xff GARBAGE / HTTP/9\r\n\r\n")
        s.recv(1024)
    check(request(port, "GET", "/v2/health/live")[0] == 200, "still live after a garbage request")

    # Slow clients (slowloris) hold no worker: 40 connections that trickle a request's head and 40
    # that send nothing (more than the 16 workers) while a normal request is answered at once; the
    # trickling ones are closed, unanswered, --header-timeout (2 s here) after their first byte.
    trickling = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(40)]
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(40)]
    for s in trickling:
        s.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\n")
    time.sleep(0.3)
    start = time.time()
    code, _, data = infer_json(port, "mlp", ok_input["data"], ok_input["shape"])
    waited = time.time() - start
    check(code == 200 and waited < 1.0, "a request among 80 slow connections: %d after %.2f s" % (code, waited))
    closed = 0
    for _ in range(6):  # 3 s of one byte per connection every 0.5 s
        time.sleep(0.5)
        for s in trickling:
            try:
                s.sendall(b"X")
            except OSError:
                pass
    for s in trickling:
        try:
            s.settimeout(2)
            closed += s.recv(1024) == b""
        except socket.timeout:  # still open
            pass
        except OSError:  # reset: closed too
            closed += 1
        s.close()
    for s in idle:
        s.close()
    check(closed == 40, "connections trickling their head are closed after --header-timeout: %d of 40" % closed)
    # A head that arrives in pieces within the timeout is served; a body that trickles slower
    # than --min-body-rate after the grace gets a 408 naming the limit, and the connection closes,
    # whether the gate buffers it (Content-Length) or a worker reads it (chunked).
    body = json.dumps({"inputs": [ok_input]}).encode()
    head = (b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body))
    answer = raw_exchange(port, head[:20], head[20:60], head[60:] + body, pause=0.4)
    check(answer.startswith(b"HTTP/1.1 200"), "a head sent in three pieces: %r" % answer[:200])
    start = time.time()
    answer = raw_exchange(port, head, *[body[k:k + 10] for k in range(0, 50, 10)], pause=0.3, timeout=20)
    waited = time.time() - start
    check(answer.startswith(b"HTTP/1.1 408") and b"min-body-rate" in answer and 1.5 < waited < 6,
          "50 bytes of a body in 1.2 s, then nothing: %r after %.1f s" % (answer[:300], waited))
    chunked_head = head.replace(b"Content-Length: %d" % len(body), b"Transfer-Encoding: chunked")
    start = time.time()
    answer = raw_exchange(port, chunked_head, b"a\r\n" + body[:10] + b"\r\n", b"a\r\n" + body[10:20] + b"\r\n",
                          pause=0.5, timeout=20)
    waited = time.time() - start
    check(answer.startswith(b"HTTP/1.1 408") and b"min-body-rate" in answer and 1.5 < waited < 6,
          "a chunked body that stops after 20 bytes: %r after %.1f s" % (answer[:300], waited))

    # Pipelined requests (sent in one write) are answered in order.
    answer = raw_exchange(port, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\nGET /v2 HTTP/1.1\r\nHost: x\r\n\r\n"
                                b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    check(answer.count(b"HTTP/1.1 200") == 3 and
          0 < answer.find(b'"live"') < answer.find(b'"extensions"') < answer.find(b'"ready"'),
          "three pipelined requests: %r" % answer[:600])

    range_checks(port, flat)
    bare_line_end_checks(port)
    head_limit_checks(port)
    chunked_framing_checks(port)
    header_line_checks(port)
    percent_framing_checks(port)
    not_ready_checks(port)
    inference_header_length_checks(port, flat)
    output_checks(port, flat)
    content_coding_checks(port, flat, direct)
    method_checks(port)

    metrics = request(port, "GET", "/metrics")[2].decode()
    # Every failure series has its requests series: those that named no model version too.
    unrouted = [l for l in metrics.splitlines() if l.startswith('capsule_inference_failures_total{model="",version=""')]
    requests_line = [l for l in metrics.splitlines() if l.startswith('capsule_inference_requests_total{model="",version=""}')]
    check(unrouted and requests_line and
          int(requests_line[0].split()[-1]) == sum(int(l.split()[-1]) for l in unrouted),
          "test_metrics_unrouted_requests: %r %r" % (unrouted, requests_line))
    metrics = request(port, "GET", "/metrics")[2].decode()
    check('capsule_inference_requests_total{model="mlp",version="1"}' in metrics and
          'capsule_inference_failures_total{model="mlp",version="1",status="400"}' in metrics and
          'capsule_inference_compute_duration_us_bucket{model="mlp",version="1",le="+Inf"}' in metrics,
          "Prometheus metrics:\n" + metrics[:2000])

    # SIGTERM while a request is in flight: it is answered, then the server exits 0.
    slow = threading.Thread(target=lambda: results.append(infer_json(port, "squeezenet1_1", [0.0] * (2 * 3 * 224 * 224),
                                                                     [2, 3, 224, 224])))
    slow.start()
    time.sleep(0.3)
    code = server.stop()
    slow.join()
    check(code == 0, "exit status after SIGTERM is %s" % code)
    check(results[-1][0] == 200, "the request in flight at SIGTERM was answered: %r" % (results[-1][:1],))
    check(any("SIGTERM" in line for line in server.log), "the server says it is draining")


def response_parts(answer):
    """(status, headers lowercased, body) of the first response in `answer`, read by its
    Content-Length."""
    head, _, rest = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if len(lines[0].split()) > 1 else 0
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, rest[:int(headers.get("content-length", len(rest)))]


def range_checks(port, flat):
    """Range is ignored: every response whole, with its status (RFC 9110 14.2 lets a server)."""
    header = json.dumps({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 784 * 4}}],
                         "parameters": {"binary_data_output": True}}).encode()
    body = header + struct.pack("<784f", *flat[:784])
    infer = {"Inference-Header-Content-Length": str(len(header))}
    code, _, plain = request(port, "POST", "/v2/models/mlp/infer", body, infer)
    ranges = "bytes=" + ",".join(["0-"] * 300)
    code, headers, data = request(port, "POST", "/v2/models/mlp/infer", body, dict(infer, Range=ranges))
    check(code == 200 and data == plain and "Content-Range" not in headers and
          headers.get("Content-Type") == "application/octet-stream",
          "test_range_ignored_on_infer: 300 ranges on POST infer: %d %r %r" % (code, headers, data[:200]))
    _, _, meta = request(port, "GET", "/v2/models/mlp")
    for value in ("bytes=0-10", "bytes=999999-", "bytes=0-1,3-4"):
        code, headers, data = request(port, "GET", "/v2/models/mlp", headers={"Range": value})
        check(code == 200 and data == meta and "Content-Range" not in headers and headers.get("Accept-Ranges") == "none",
              "test_range_ignored_on_get: Range %s on GET metadata: %d %r %r" % (value, code, headers, data[:200]))
    code, headers, _ = request(port, "HEAD", "/v2/models/mlp")
    check(code == 200 and headers.get("Accept-Ranges") == "none", "test_range_head_not_advertised: %r" % headers)
    for value, shown in ((b"bytes=abc", "'bytes=abc'"), (b"bytes=0-1,5-3", "'bytes=0-1,5-3'")):
        answer = raw_exchange(port, b"GET /v2/models/mlp HTTP/1.1\r\nHost: x\r\nRange: " + value + b"\r\n\r\n")
        status, headers, data = response_parts(answer)
        doc = as_json(data)
        check(status == 416 and "content-range" not in headers and doc and
              doc["error"] == "malformed Range header %s (this server ignores Range, but cpp-httplib refuses one it "
                              "cannot parse)" % shown,
              "test_range_malformed: Range %s: %r" % (value, answer[:400]))


def bare_line_end_checks(port):
    """A bare LF or CR, or a NUL, anywhere in a head: 400 naming it, from the gate, and the
    connection closed. cpp-httplib skips a line without CRLF and reads on, so a head a proxy ends
    at a bare LF would go on to a Transfer-Encoding line here (request smuggling)."""
    smuggled = b'{"id":"SMUGGLED","inputs":[{"name":"input","shape":[1,784],"datatype":"FP32","data":[%s]}]}' % (
        b",".join([b"0"] * 784))
    inner = (b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: h\r\nConnection: close\r\n"
             b"Content-Length: %d\r\n\r\n" % len(smuggled)) + smuggled
    rest = b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n" + inner
    answer = raw_exchange(port, b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\n" % len(rest) + rest)
    status, _, data = response_parts(answer)
    doc = as_json(data)
    check(status == 400 and answer.count(b"HTTP/1.1 ") == 1 and b"SMUGGLED" not in answer and doc and
          "a bare LF (not after CR) ending an empty line" in doc["error"],
          "test_bare_lf_smuggling: %r" % answer[:400])
    started = time.monotonic()
    answer = raw_exchange(port, b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: h\r\nContent-Length: 10\n\r\n0123456789")
    check(answer.startswith(b"HTTP/1.1 400") and b"ending header line 'Content-Length: 10'" in answer and
          time.monotonic() - started < 1.5, "test_bare_lf_length_line: refused at once: %r" % answer[:400])
    follow = b"GET /v2/models/mlp HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
    for what, head, named in (
            ("bare LF ending the request line", b"GET /v2/health/live HTTP/1.1\nHost: h\r\n\r\n",
             "a bare LF (not after CR) ending the request line 'GET /v2/health/live HTTP/1.1'"),
            ("bare CR in a header line", b"GET /v2/health/live HTTP/1.1\r\nHost: h\rX: 1\r\n\r\n",
             "a bare CR (not before LF) after header line 'Host: h'"),
            ("bare CR in the request line", b"GET /v2/health/live\r HTTP/1.1\r\nHost: h\r\n\r\n",
             "a bare CR (not before LF) after the request line 'GET /v2/health/live'"),
            ("NUL in a header value", b"GET /v2/health/live HTTP/1.1\r\nHost: h\x00x\r\n\r\n",
             "a NUL byte in header line 'Host: h'"),
            ("NUL in the request line", b"GET /v2/health/live\x00 HTTP/1.1\r\nHost: h\r\n\r\n",
             "a NUL byte in the request line 'GET /v2/health/live'")):
        answer = raw_exchange(port, head + follow)
        status, headers, data = response_parts(answer)
        doc = as_json(data)
        check(status == 400 and answer.count(b"HTTP/1.1 ") == 1 and headers.get("connection") == "close" and doc and
              named in doc["error"], "test_bare_cr_lf_nul: %s: %r" % (what, answer[:400]))
    # The same behind a request answered on the worker (pipelined): the gate still decides.
    answer = raw_exchange(port, b"GET /v2/health/live HTTP/1.1\r\nHost: h\r\n\r\n"
                                b"GET /v2 HTTP/1.1\r\nHost: h\nX: 1\r\n\r\n" + follow)
    check(answer.startswith(b"HTTP/1.1 200") and answer.count(b"HTTP/1.1 ") == 2 and b"HTTP/1.1 400" in answer and
          b"ending header line 'Host: h'" in answer, "test_bare_lf_pipelined: %r" % answer[:600])


def chunked_framing_checks(port):
    """Chunked framing is checked strictly (RFC 9112 section 7.1) before cpp-httplib, which
    parses sizes with strtoul and ends a body early at a line that is not CRLF: each malformed
    body gets 400 naming the fault, and the pipelined request after it is never answered."""
    body = json.dumps({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32", "data": [0] * 784}]}).encode()
    n = len(body)
    head = b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
    follow = b"GET /v2/health/live HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
    for what, chunks, named in (
            ("0x prefix", b"0x%x\r\n" % n + body + b"\r\n0\r\n\r\n", "chunk 1: 'x' after its size"),
            ("0X prefix", b"0X%x\r\n" % n + body + b"\r\n0\r\n\r\n", "chunk 1: 'X' after its size"),
            ("leading space", b" %x\r\n" % n + body + b"\r\n0\r\n\r\n", "chunk 1: its size line starts with ' '"),
            ("plus sign", b"+%x\r\n" % n + body + b"\r\n0\r\n\r\n", "chunk 1: its size line starts with '+'"),
            ("junk after the size", b"%x zz\r\n" % n + body + b"\r\n0\r\n\r\n", "chunk 1: extension ' zz' is not"),
            ("negative last chunk", b"%x\r\n" % n + body + b"\r\n-0\r\n\r\n", "chunk 2: its size line starts with '-'"),
            ("negative size", b"-3\r\nabc\r\n0\r\n\r\n", "chunk 1: its size line starts with '-'"),
            ("bare LF after the size", b"%x\n" % n + body + b"\r\n0\r\n\r\n", "chunk 1: its size line ends in a bare LF"),
            ("bare LF after the data", b"%x\r\n" % n + body + b"\n0\r\n\r\n", "chunk 1: its data is not followed by CRLF"),
            ("no CRLF after the data", b"%x\r\n" % n + body + b"XX\r\n", "chunk 1: its data is not followed by CRLF"),
            ("size over 64 bits", b"1%016x\r\n" % n + body + b"\r\n0\r\n\r\n", "chunk 1: its size overflows 64 bits"),
            ("unterminated quoted extension", b"%x;a=\"x\r\n" % n + body + b"\r\n0\r\n\r\n", "chunk 1: extension ';a=\"x' is not"),
            ("a trailer field", b"%x\r\n" % n + body + b"\r\n0\r\nX-T: 1\r\n\r\n", "trailer fields are not supported"),
            ("no final CRLF", b"%x\r\n" % n + body + b"\r\n0\r\n", "after the last chunk, header line 'GET /v2/health/live HTTP/1.1' has no colon")):
        started = time.monotonic()
        answer = raw_exchange(port, head + chunks + follow)
        status, _, data = response_parts(answer)
        doc = as_json(data)
        check(status == 400 and answer.count(b"HTTP/1.1 ") == 1 and doc and "malformed chunked body" in doc["error"] and
              named in doc["error"] and time.monotonic() - started < 1.5,
              "test_chunked_strict: %s: %r" % (what, answer[:400]))
    for coding in (b"Chunked", b"CHUNKED"):  # coding names are case-insensitive (RFC 9112 section 7)
        answer = raw_exchange(port, head.replace(b"chunked", coding) + b"%x\r\n" % n + body + b"\r\n0\r\n\r\n" + follow)
        check(answer.startswith(b"HTTP/1.1 200") and b'"outputs"' in answer and answer.count(b"HTTP/1.1 200") == 2,
              "test_chunked_any_case: Transfer-Encoding %s: %r" % (coding, answer[:400]))
    for what, chunks in (
            ("an extension", b"%x;a=b\r\n" % n + body + b"\r\n0\r\n\r\n"),
            ("extensions with whitespace and a quoted value", b"%x ; a = \"q\\\"x\" ;c\r\n" % n + body + b"\r\n0;z\r\n\r\n"),
            ("leading zeros", b"00000000000000000000%x\r\n" % n + body + b"\r\n00\r\n\r\n"),
            ("two chunks", b"%x\r\n" % 10 + body[:10] + b"\r\n%X\r\n" % (n - 10) + body[10:] + b"\r\n0\r\n\r\n")):
        answer = raw_exchange(port, head + chunks + follow)
        check(answer.startswith(b"HTTP/1.1 200") and answer.count(b"HTTP/1.1 200") == 2 and b'"live":true' in answer,
              "test_chunked_valid: %s: %r" % (what, answer[:400]))


def head_limit_checks(port):
    """A head that never ends is refused with 431 once over 64 KiB (cpp-httplib read header lines
    without a limit: gigabytes of memory); a request line over 8 KiB with 414, a header line over
    8 KiB with 431, each naming the line and the limit."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: h\r\n")
        sent = 0
        try:
            while sent < 64 << 20:  # the server must stop this long before 64 MiB
                s.sendall(b"a:b\r\n" * 20000)
                sent += 100000
        except OSError:
            pass
        answer = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                answer += chunk
        except OSError:
            pass
    check(answer.startswith(b"HTTP/1.1 431") and b"over 65536 bytes without its end" in answer and sent < 16 << 20,
          "test_endless_head: 431 after %d bytes: %r" % (sent, answer[:300]))
    for what, head, status, named in (
            ("request line", b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: h\r\n\r\n", 414,
             "the request line 'GET /aaaa"),
            ("header line", b"GET / HTTP/1.1\r\nHost: h\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n", 431,
             "header line 'X-Long: aaaa")):
        answer = raw_exchange(port, head)
        status_, _, data = response_parts(answer)
        doc = as_json(data)
        check(status_ == status and doc and named in doc["error"] and "is over 8192 bytes" in doc["error"],
              "test_long_line: %s: %r" % (what, answer[:300]))
    code, _, _ = request(port, "GET", "/v2/health/live", headers={"X-Long": "a" * 8000})
    check(code == 200, "test_long_line: a header line just under 8 KiB is served: %d" % code)


def header_line_checks(port):
    """A header name that is not a token (whitespace before the colon) or an obs-fold line: 400,
    and the connection closes (the pipelined request is never answered)."""
    b = b'{"inputs":[{"name":"x","shape":[2,3],"datatype":"FP32","data":[1,2,3,4,5,6]}]}'
    follow = b"GET /v2/models/mlp HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
    for what, line, named in (
            ("Transfer-Encoding : chunked", b"Transfer-Encoding : chunked\r\n", "header name 'Transfer-Encoding '"),
            ("Content-Length<TAB>: 3", b"X-A: 1\r\nContent-Length\t: 3\r\n", "header name 'Content-Length\\x09'"),
            ("obs-fold with a colon", b"X-A: 1\r\n X-B: 2\r\n", "header line ' X-B: 2' starts with whitespace"),
            ("obs-fold without a colon", b"X-A: 1\r\n\tchunked\r\n", "header line '\\x09chunked' starts with whitespace"),
            ("a line without a colon", b"X-A 1\r\n", "header line 'X-A 1' has no colon")):
        answer = raw_exchange(port, b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: h\r\n" + line +
                              b"Content-Length: %d\r\n\r\n" % len(b) + b + follow, pause=0.3)
        status, _, data = response_parts(answer)
        doc = as_json(data)
        check(status == 400 and answer.count(b"HTTP/1.1 ") == 1 and doc and named in doc["error"],
              "test_header_name_not_token: %s: %r" % (what, answer[:400]))


def percent_framing_checks(port):
    """Framing headers are read as sent: cpp-httplib percent-decodes header values, so
    "Content-Length: %32" would be 2 to it and no length to a proxy in front. Refused with 400
    naming the value, and the pipelined request after it is never answered."""
    follow = b"GET /v2/models/mlp HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
    for what, line, named in (
            ("Content-Length %32", b"Content-Length: %32\r\n", "Content-Length '%32' is not a decimal byte count"),
            ("Transfer-Encoding %63hunked", b"Transfer-Encoding: %63hunked\r\n",
             "Transfer-Encoding '%63hunked' is not supported")):
        answer = raw_exchange(port, b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: h\r\n" + line + b"\r\n{}" + follow,
                              pause=0.3)
        status, _, data = response_parts(answer)
        doc = as_json(data)
        check(status == 400 and answer.count(b"HTTP/1.1 ") == 1 and doc and named in doc["error"],
              "test_percent_encoded_framing: %s: %r" % (what, answer[:400]))


def not_ready_checks(port):
    """A model not ready as a whole answers ready like a version that is not ready."""
    for name, reason in (("bad_config", "duplicate key"), ("no_version", "no version directory"), ("rocm_only", "rocm")):
        code, _, data = request(port, "GET", "/v2/models/%s/ready" % name)
        doc = as_json(data)
        check(code == 503 and isinstance(doc, dict) and doc.get("name") == name and doc.get("ready") is False and
              reason in doc.get("reason", "").lower() and "version" in doc and "error" not in doc,
              "test_model_not_ready_body: %s: %d %r" % (name, code, data[:300]))
    code, _, data = request(port, "GET", "/v2/models/nope/ready")
    check(code == 404 and "unknown model 'nope'" in as_json(data)["error"], "ready of an unknown model: %d %r" % (code, data))
    # A version string no version may have is 404 for every model, whether ready as a whole or not.
    for name in ("mlp", "rocm_only", "bad_config", "no_version"):
        for version in ("0", "01"):
            code, _, data = request(port, "GET", "/v2/models/%s/versions/%s/ready" % (name, version))
            check(code == 404 and "has no version '%s'" % version in as_json(data)["error"],
                  "test_ready_malformed_version: %s version %s: %d %r" % (name, version, code, data))


def inference_header_length_checks(port, flat):
    head = json.dumps({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32",
                                   "parameters": {"binary_data_size": 784 * 4}}]}).encode()
    body = head + struct.pack("<784f", *flat[:784])
    start = b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n" % len(body)
    for what, lines, message in (
            ("two different values", b"Inference-Header-Content-Length: %d\r\nInference-Header-Content-Length: 5\r\n" % len(head),
             "more than one Inference-Header-Content-Length header"),
            ("two equal values", b"Inference-Header-Content-Length: %d\r\ninference-header-content-length: %d\r\n" % (len(head), len(head)),
             "more than one Inference-Header-Content-Length header"),
            ("an empty value", b"Inference-Header-Content-Length:\r\n", "Inference-Header-Content-Length '' is not a byte count"),
            ("a blank value", b"Inference-Header-Content-Length:   \r\n", "Inference-Header-Content-Length '' is not a byte count")):
        answer = raw_exchange(port, start + lines + b"\r\n" + body)
        status, _, data = response_parts(answer)
        doc = as_json(data)
        check(status == 400 and doc and doc["error"] == message,
              "test_inference_header_length: %s: %r" % (what, answer[:400]))


def output_checks(port, flat):
    path = "/v2/models/mlp/infer"
    ok_input = {"name": "input", "shape": [1, 784], "datatype": "FP32", "data": flat[:784]}
    expect_error(port, "test_output_unknown_key", 400, path, {"inputs": [ok_input], "outputs": [{"name": "logits", "foo": 1}]},
                 contains="output 'logits': unknown key 'foo'")
    expect_error(port, "test_output_classification", 400, path,
                 {"inputs": [ok_input], "outputs": [{"name": "logits", "parameters": {"classification": 2}}]},
                 contains="classification extension, which this server does not support")
    code, headers, data = request(port, "POST", path, {"inputs": [ok_input],
                                                       "outputs": [{"name": "logits", "parameters": {"binary_data": True}}]})
    n = int(headers.get("Inference-Header-Content-Length", "-1"))
    check(code == 200 and n > 0 and len(data) == n + 40, "test_output_binary_data still works: %d %r" % (code, data[:200]))


def content_coding_checks(port, flat, direct):
    path = "/v2/models/mlp/infer"
    text = json.dumps({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32", "data": flat[:784]}]}).encode()
    for what, coding, body in (
            ("GZIP", "GZIP", gzip.compress(text)),
            ("Gzip, two members", "Gzip", gzip.compress(text[:1000]) + gzip.compress(text[1000:])),
            ("gzip, three members", "gzip", gzip.compress(text[:10]) + gzip.compress(text[10:20]) + gzip.compress(text[20:])),
            ("DEFLATE", "DEFLATE", __import__("zlib").compress(text))):
        code, _, data = request(port, "POST", path, body, {"Content-Type": "application/json", "Content-Encoding": coding})
        doc = as_json(data)
        check(code == 200 and doc and close(doc["outputs"][0]["data"], direct[:10]),
              "test_content_coding: %s: %d %r" % (what, code, data[:200]))
    expect_error(port, "test_content_coding: a gzip member cut short", 400, path, gzip.compress(text)[:-8],
                 {"Content-Type": "application/json", "Content-Encoding": "gzip"}, "could not be read")
    expect_error(port, "test_content_coding: bytes after a deflate stream", 400, path,
                 __import__("zlib").compress(text) + b"xx", {"Content-Type": "application/json", "Content-Encoding": "deflate"},
                 "could not be read")
    bomb = gzip.compress(b"[" + b"0," * (3 << 19) + b"0]") * 2  # two members, 6 MiB as decoded
    expect_error(port, "test_content_coding: a two-member gzip body over the limit once decoded", 413, path, bomb,
                 {"Content-Type": "application/json", "Content-Encoding": "gzip"}, "bytes as decoded")


def method_checks(port):
    code, headers, data = request(port, "GET", "/v2/models/mlp/infer")
    doc = as_json(data)
    check(code == 405 and headers.get("Allow") == "POST" and doc and "allowed: POST" in doc["error"],
          "test_wrong_method: GET infer: %d %r %r" % (code, headers, data[:200]))
    code, headers, data = request(port, "POST", "/v2/health/live", b"{}", {"Content-Type": "application/json"})
    doc = as_json(data)
    check(code == 405 and headers.get("Allow") == "GET, HEAD" and doc and "allowed: GET, HEAD" in doc["error"],
          "test_wrong_method: POST live: %d %r %r" % (code, headers, data[:200]))
    code, headers, data = request(port, "DELETE", "/v2/models/mlp/versions/1/ready", b"")
    check(code == 405 and headers.get("Allow") == "GET, HEAD", "test_wrong_method: DELETE ready: %d %r" % (code, data[:200]))
    check(request(port, "GET", "/v2/models/mlp/nothing")[0] == 404, "test_wrong_method: an unknown path stays 404")


def busy(args):
    """A request refused as busy (--max-concurrency) is counted under its model."""
    with tempfile.TemporaryDirectory() as tmp:
        repo = os.path.join(tmp, "repo")
        os.makedirs(os.path.join(repo, "slow", "1"))
        write_onnx(os.path.join(repo, "slow", "1", "model.onnx"), [onnx_node("Relu", ["x"], "y")],
                   [("x", ["N", 4])], [("y", ["N", 4])])
        with open(os.path.join(repo, "slow", "config.json"), "w") as f:
            json.dump({"profile": "checked_cpu", "max_batch_size": 8, "inputs": {"x": [4]},
                       "dynamic_batching": {"max_queue_delay_us": 1000000, "preferred_batch_sizes": [8]}}, f)
        with Server(args.capsule, repo, ["--max-concurrency", "2"]) as server:
            body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
            codes = []
            waiting = [threading.Thread(target=lambda: codes.append(request(server.port, "POST", "/v2/models/slow/infer", body)[0]))
                       for _ in range(2)]
            for t in waiting:
                t.start()
            time.sleep(0.3)  # both admitted, waiting out the batcher's delay
            code, _, data = request(server.port, "POST", "/v2/models/slow/infer", body)
            for t in waiting:
                t.join()
            check(code == 503 and "server busy" in as_json(data)["error"] and codes == [200, 200],
                  "test_busy_counted_under_model: the third of three: %d %r, the others %r" % (code, data[:200], codes))
            metrics = request(server.port, "GET", "/metrics")[2].decode()
            check('capsule_inference_requests_total{model="slow",version="1"} 3' in metrics and
                  'capsule_inference_failures_total{model="slow",version="1",status="503"} 1' in metrics and
                  'model="",version="",status="503"' not in metrics,
                  "test_busy_counted_under_model: metrics:\n" + metrics[:1500])
            check(server.stop() == 0, "the busy server exits 0")


def load(args, layers, clients, requests_each):
    with tempfile.TemporaryDirectory() as tmp:
        repo = os.path.join(tmp, "repo")
        os.makedirs(os.path.join(repo, "mlp", "1"))
        write_mlp_json_ir(os.path.join(repo, "mlp", "1"), layers)
        with open(os.path.join(repo, "mlp", "config.json"), "w") as f:
            json.dump({"profile": "checked_cpu", "threads": 1}, f)
        with Server(args.capsule, repo, ["--http-threads", str(clients + 2)]) as server:
            load_checks(layers, clients, requests_each, server)


def load_checks(layers, clients, requests_each, server):
    rng = random.Random(3)
    inputs = [[rng.uniform(-1, 1) for _ in range(784)] for _ in range(8)]
    bodies = [json.dumps({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32", "data": x}]}).encode()
              for x in inputs]
    expected = []
    for body in bodies:  # one answer per distinct input, which every later response must equal
        expected.append(as_json(request(server.port, "POST", "/v2/models/mlp/infer", body,
                                        {"Content-Type": "application/json"})[2])["outputs"][0]["data"])
        check(close(expected[-1], mlp_forward(layers, inputs[len(expected) - 1]), rtol=1e-4, atol=1e-5),
              "load-test reference %d equals the pure-Python forward pass" % len(expected))
    latencies, errors = [], []
    lock = threading.Lock()

    def client(k):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        mine = []
        for i in range(requests_each):
            j = (k + i) % len(bodies)
            start = time.perf_counter()
            conn.request("POST", "/v2/models/mlp/infer", body=bodies[j], headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            mine.append(time.perf_counter() - start)
            doc = as_json(data)
            if r.status != 200 or doc is None or doc["outputs"][0]["data"] != expected[j]:
                with lock:
                    errors.append((r.status, data[:200]))
        conn.close()
        with lock:
            latencies.extend(mine)

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    code = server.stop()
    latencies.sort()
    total = clients * requests_each
    print("load: %d clients x %d requests (MLP 784-256-256-10, batch 1, REST/JSON, checked_cpu): "
          "%.0f requests/s, p50 %.2f ms, p99 %.2f ms, %d errors or wrong responses"
          % (clients, requests_each, total / elapsed, 1e3 * latencies[len(latencies) // 2],
             1e3 * latencies[int(len(latencies) * 0.99)], len(errors)), flush=True)
    check(len(latencies) == total, "every request got a response")
    check(not errors, "wrong or failed responses: %r" % errors[:3])
    check(code == 0, "exit status after SIGTERM is %s" % code)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--capsule", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--grpc-client", help="serve_grpc_client, run against the server's gRPC port")
    parser.add_argument("--load", nargs=2, type=int, metavar=("CLIENTS", "REQUESTS"))
    args = parser.parse_args()
    layers = mlp_weights()
    if args.load:
        load(args, layers, *args.load)
    else:
        functional(args, layers)
        busy(args)
    if FAILURES:
        print("%d check(s) failed" % len(FAILURES))
        return 1
    print("all %d checks passed" % CHECKS[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
