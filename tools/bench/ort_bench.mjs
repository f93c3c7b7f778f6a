// ONNX Runtime (onnxruntime-node, its bundled CPU library) as the peer of `capsule bench`, used
// by tools/bench_vs_ort.sh.
//
//   node ort_bench.mjs time MODEL.onnx THREADS WARMUP ITERATIONS NAME=D0xD1x... ...
//       prints the wall time of each timed run, in milliseconds, one per line
//   node ort_bench.mjs check MODEL.onnx THREADS INPUT_NAME=INPUT.npy OURS_OUTPUT.npy
//       runs the model on INPUT.npy and prints the max abs difference of its first output to
//       OURS_OUTPUT.npy (float32 .npy files, C order)
//
// Sessions use intraOpNumThreads=THREADS, interOpNumThreads=1, sequential execution and
// graphOptimizationLevel 'all'. The module is resolved from ORT_NODE_MODULES (the directory
// holding node_modules/onnxruntime-node). Errors exit 2 with the cause on stderr.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

function fail(message) {
  process.stderr.write(`ort_bench: ${message}\n`);
  process.exit(2);
}

const base = process.env.ORT_NODE_MODULES;
if (!base) fail('set ORT_NODE_MODULES to the directory holding node_modules/onnxruntime-node');
const ort = createRequire(path.join(base, 'package.json'))('onnxruntime-node');

async function session(model, threads) {
  return ort.InferenceSession.create(model, {
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
}

/// Deterministic pseudo-random floats in [-1, 1) (a 32-bit LCG).
function randomFloats(count, seed) {
  const data = new Float32Array(count);
  let state = seed >>> 0;
  for (let i = 0; i < count; ++i) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    data[i] = state / 2 ** 31 - 1;
  }
  return data;
}

function parseShape(spec) {
  const eq = spec.indexOf('=');
  if (eq <= 0) fail(`'${spec}': expected NAME=D0xD1x...`);
  const dims = spec.slice(eq + 1).split(/[x,]/).map(Number);
  if (dims.some((d) => !Number.isInteger(d) || d < 0)) fail(`'${spec}': dimensions must be integers`);
  return [spec.slice(0, eq), dims];
}

/// A float32, C-order .npy file as {shape, data}.
function readNpy(file) {
  const bytes = fs.readFileSync(file);
  if (bytes.toString('latin1', 1, 6) !== 'NUMPY') fail(`${file}: not a .npy file`);
  const major = bytes[6];
  const headerLength = major === 1 ? bytes.readUInt16LE(8) : bytes.readUInt32LE(8);
  const start = (major === 1 ? 10 : 12) + headerLength;
  const header = bytes.toString('latin1', major === 1 ? 10 : 12, start);
  if (!/'descr':\s*'<f4'/.test(header) || /'fortran_order':\s*True/.test(header))
    fail(`${file}: only little-endian float32 in C order is read (header ${header.trim()})`);
  const shape = header.match(/'shape':\s*\(([^)]*)\)/)[1].split(',').filter((s) => s.trim()).map(Number);
  const count = shape.reduce((a, b) => a * b, 1);
  const data = new Float32Array(bytes.buffer.slice(bytes.byteOffset + start, bytes.byteOffset + start + 4 * count));
  return { shape, data };
}

async function time([model, threads, warmup, iterations, ...shapes]) {
  const s = await session(model, Number(threads));
  const feeds = {};
  shapes.map(parseShape).forEach(([name, dims], i) => {
    feeds[name] = new ort.Tensor('float32', randomFloats(dims.reduce((a, b) => a * b, 1), i + 1), dims);
  });
  for (let i = 0; i < Number(warmup); ++i) await s.run(feeds);
  const ms = [];
  for (let i = 0; i < Number(iterations); ++i) {
    const start = process.hrtime.bigint();
    await s.run(feeds);
    ms.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  process.stdout.write(ms.map((v) => v.toFixed(4)).join('\n') + '\n');
}

async function check([model, threads, input, oursFile]) {
  const eq = input.indexOf('=');
  if (eq <= 0) fail(`'${input}': expected NAME=FILE.npy`);
  const x = readNpy(input.slice(eq + 1));
  const s = await session(model, Number(threads));
  const result = await s.run({ [input.slice(0, eq)]: new ort.Tensor('float32', x.data, x.shape) });
  const theirs = result[s.outputNames[0]].data;
  const ours = readNpy(oursFile).data;
  if (ours.length !== theirs.length) fail(`output sizes differ: ours ${ours.length}, ORT ${theirs.length}`);
  let maxDiff = 0, maxAbs = 0;
  for (let i = 0; i < ours.length; ++i) {
    maxDiff = Math.max(maxDiff, Math.abs(ours[i] - theirs[i]));
    maxAbs = Math.max(maxAbs, Math.abs(theirs[i]));
  }
  process.stdout.write(`max abs diff ${maxDiff.toExponential(2)} (max |output| ${maxAbs.toExponential(2)}, ${ours.length} values)\n`);
}

const [mode, ...rest] = process.argv.slice(2);
const modes = { time, check };
if (!modes[mode]) fail('usage: ort_bench.mjs time|check ... (see the comment at the top)');
modes[mode](rest).catch((e) => fail(e.message));
