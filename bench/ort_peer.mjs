// ONNX Runtime (the npm package onnxruntime-node) as the CPU benchmark peer of rlx.
//   node bench/ort_peer.mjs MODEL.onnx [--input NAME=FILE.npy ...] [--threads N] [--warmup N]
//        [--repeat N] [--save-outputs DIR]
// Inputs not given are random normal(0,1) floats of the model's input shapes (dynamic dims: 1).
// Prints one machine-readable line:  ORT_PEER ms_p50=<median ms> ms_min=<ms> runs=<n> threads=<n>
// The package is looked up in $RLX_ORT_DIR (default ~/.cache/rlx/ort, where
// bench/bench_cpu_models.py installs it), then in node's ordinary module path.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

function fail(msg) {
  process.stderr.write(`ort_peer: ${msg}\n`);
  process.exit(2);
}

function loadOrt() {
  const home = process.env.XDG_CACHE_HOME || path.join(process.env.HOME || '/root', '.cache');
  const dir = process.env.RLX_ORT_DIR || path.join(home, 'rlx', 'ort');
  for (const base of [path.join(dir, 'node_modules'), dir]) {
    try {
      return createRequire(path.join(base, 'x.js'))('onnxruntime-node');
    } catch (e) { /* try the next place */ }
  }
  try {
    return createRequire(import.meta.url)('onnxruntime-node');
  } catch (e) {
    fail(`onnxruntime-node not found in ${dir} (bench/bench_cpu_models.py installs it) nor in node's module path`);
  }
}

// .npy (version 1/2/3, little-endian, C order) -> {type, dims, data}.
const NPY_TYPES = {
  '<f4': ['float32', Float32Array], '<f8': ['float64', Float64Array], '<i8': ['int64', BigInt64Array],
  '<i4': ['int32', Int32Array], '|u1': ['uint8', Uint8Array], '|b1': ['bool', Uint8Array],
};
function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.length < 10 || buf.toString('latin1', 0, 6) !== '\x93NUMPY') fail(`${file}: not an .npy file`);
  const major = buf[6];
  const hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const hstart = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', hstart, hstart + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header);
  const order = /'fortran_order':\s*(True|False)/.exec(header);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header);
  if (!descr || !order || !shape) fail(`${file}: unreadable .npy header`);
  if (order[1] === 'True') fail(`${file}: Fortran-order arrays are not supported`);
  const t = NPY_TYPES[descr[1]];
  if (!t) fail(`${file}: unsupported dtype ${descr[1]}`);
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s.length).map(Number);
  const count = dims.reduce((a, b) => a * b, 1);
  const off = hstart + hlen;
  const bytes = buf.subarray(off, off + count * t[1].BYTES_PER_ELEMENT);
  if (bytes.length !== count * t[1].BYTES_PER_ELEMENT) fail(`${file}: truncated data`);
  const data = new t[1](count);
  new Uint8Array(data.buffer).set(bytes);
  return { type: t[0], dims, data };
}

function writeNpy(file, tensor) {
  const descr = { float32: '<f4', float64: '<f8', int64: '<i8', int32: '<i4', uint8: '|u1', bool: '|b1' }[tensor.type];
  if (!descr) return;
  const shape = tensor.dims.length === 1 ? `(${tensor.dims[0]},)` : `(${tensor.dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  header += ' '.repeat((64 - ((10 + header.length + 1) % 64)) % 64) + '\n';
  const head = Buffer.alloc(10);
  head.write('\x93NUMPY', 0, 'latin1');
  head[6] = 1; head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  const data = tensor.data;
  fs.writeFileSync(file, Buffer.concat([head, Buffer.from(header, 'latin1'),
    Buffer.from(data.buffer, data.byteOffset, data.byteLength)]));
}

function randomInput(ort, meta) {
  const dims = (meta.shape || []).map((d) => (typeof d === 'number' && d > 0 ? d : 1));
  const count = dims.reduce((a, b) => a * b, 1);
  let seed = 12345;
  const uniform = () => { seed = (seed * 1103515245 + 12345) >>> 0; return (seed + 0.5) / 4294967296; };
  if (meta.type === 'float32') {
    const data = new Float32Array(count);
    for (let i = 0; i < count; ++i) data[i] = Math.sqrt(-2 * Math.log(uniform())) * Math.cos(2 * Math.PI * uniform());
    return new ort.Tensor('float32', data, dims);
  }
  if (meta.type === 'int64') return new ort.Tensor('int64', new BigInt64Array(count), dims);
  fail(`input ${meta.name}: no random generator for type ${meta.type}; pass --input`);
}

function parseArgs(argv) {
  const o = { model: null, inputs: {}, threads: 1, warmup: 3, repeat: 20, save: null };
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    const next = () => { if (i + 1 >= argv.length) fail(`${a} needs a value`); return argv[++i]; };
    const int = (s) => { const v = Number(s); if (!Number.isInteger(v) || v < 0) fail(`${a}: bad number ${s}`); return v; };
    if (a === '--input' || a === '-i') {
      const kv = next(); const eq = kv.indexOf('=');
      if (eq <= 0) fail(`--input wants NAME=FILE.npy, got ${kv}`);
      o.inputs[kv.slice(0, eq)] = kv.slice(eq + 1);
    } else if (a === '--threads' || a === '-t') o.threads = int(next());
    else if (a === '--warmup') o.warmup = int(next());
    else if (a === '--repeat' || a === '-n') o.repeat = Math.max(1, int(next()));
    else if (a === '--save-outputs') o.save = next();
    else if (a.startsWith('-')) fail(`unknown option ${a}`);
    else if (o.model) fail(`one model only (got ${o.model} and ${a})`);
    else o.model = a;
  }
  if (!o.model) fail('usage: node bench/ort_peer.mjs MODEL.onnx [--input NAME=FILE.npy] [--threads N] [--warmup N] [--repeat N] [--save-outputs DIR]');
  return o;
}

const opts = parseArgs(process.argv.slice(2));
const ort = loadOrt();
const session = await ort.InferenceSession.create(opts.model, {
  intraOpNumThreads: opts.threads, interOpNumThreads: 1, executionMode: 'sequential',
  graphOptimizationLevel: 'all', executionProviders: ['cpu'],
});
const feeds = {};
const metas = session.inputMetadata || [];
for (const name of session.inputNames) {
  if (opts.inputs[name]) {
    const t = readNpy(opts.inputs[name]);
    feeds[name] = new ort.Tensor(t.type, t.data, t.dims);
  } else {
    const meta = metas.find((m) => m.name === name);
    if (!meta || !meta.isTensor) fail(`input ${name}: no metadata for a random value; pass --input`);
    feeds[name] = randomInput(ort, meta);
  }
}
for (const name of Object.keys(opts.inputs))
  if (!session.inputNames.includes(name)) fail(`--input ${name}: the model has no such input`);

let out;
for (let i = 0; i < opts.warmup; ++i) out = await session.run(feeds);
const ms = [];
for (let i = 0; i < opts.repeat; ++i) {
  const t0 = process.hrtime.bigint();
  out = await session.run(feeds);
  ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
}
ms.sort((a, b) => a - b);
const p50 = ms.length % 2 ? ms[(ms.length - 1) / 2] : (ms[ms.length / 2 - 1] + ms[ms.length / 2]) / 2;
if (opts.save) {
  fs.mkdirSync(opts.save, { recursive: true });
  for (const [name, t] of Object.entries(out)) writeNpy(path.join(opts.save, `${name}.npy`), t);
}
console.log(`ORT_PEER ms_p50=${p50.toFixed(4)} ms_min=${ms[0].toFixed(4)} runs=${ms.length} threads=${opts.threads}`);
