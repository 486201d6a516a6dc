// rlx-web.js: runs a model that `rlx export-web` compiled ahead of time, on WebGPU, with no other
// runtime. The bundle's model.json holds the WGSL kernels, the buffers of the memory plan and the
// recorded dispatches; weights.bin the initial bytes of weights and tables. Loading creates every
// buffer, pipeline and bind group once; each run uploads the inputs, encodes the recorded
// commands into one command buffer, and reads back only the outputs asked for.
//
//   import { loadModel } from './rlx-web.js';
//   const model = await loadModel('./model.json');          // or loadModel(url, { device })
//   console.log(model.inputs, model.outputs);               // [{ name, dtype, dims }]
//   const out = await model.run({ x: new Float32Array(model.inputs[0].size) });
//   out.y.data, out.y.dims, out.y.dtype                      // a typed array, its dims and dtype
//
// Input values: a typed array or an array of numbers (BigInt64Array or bigints for i64 are
// accepted too) with exactly the input's element count. Every tensor lives on the device as
// 32-bit words (f16/bf16 as f32, i64/i8/i16 as i32, u8/bool as u32): values are rounded to an
// f16/bf16 input's precision, and an integer that does not fit its dtype, or an i64 outside
// [-2^31, 2^31), is an error naming the input and the element.
// Output arrays: Float32Array (f32, f16, bf16), Int32Array/Int16Array/Int8Array, BigInt64Array
// (i64), Uint32Array, Uint8Array (u8, bool as 0/1).

const FORMAT = 'rlx-web-bundle';
const VERSION = 1;
const UNIFORM_STRIDE = 256;
// WebGPU's default limits: anything above is requested when rlx creates the device.
const DEFAULT_LIMITS = { maxStorageBuffersPerShaderStage: 8, maxStorageBufferBindingSize: 134217728, maxBufferSize: 268435456 };

export class RlxError extends Error {
  constructor(message) {
    super('rlx: ' + message);
    this.name = 'RlxError';
  }
}

const align4 = (n) => Math.ceil(n / 4) * 4;
const numel = (dims) => dims.reduce((a, b) => a * b, 1);
const FLOATS = new Set(['f32', 'f16', 'bf16']);
const INT_RANGE = {
  i8: [-128, 127], i16: [-32768, 32767], i32: [-2147483648, 2147483647], i64: [-2147483648, 2147483647],
  u8: [0, 255], u32: [0, 4294967295], bool: [0, 1],
};

async function fetchOk(url, what) {
  let res;
  try {
    res = await fetch(url);
  } catch (e) {
    throw new RlxError(`cannot fetch ${what} '${url}': ${e.message}`);
  }
  if (!res.ok) throw new RlxError(`cannot fetch ${what} '${url}': HTTP ${res.status}`);
  return res;
}

// f32 -> the nearest f16 / bf16 value (ties to even), as a number.
function f16Round(x) {
  if (Math.f16round) return Math.f16round(x);
  if (!Number.isFinite(x) || x === 0) return x;
  const a = Math.abs(x);
  if (a >= 65520) return x > 0 ? Infinity : -Infinity;
  let e = Math.max(Math.floor(Math.log2(a)), -14);
  if (a >= 2 ** (e + 1)) e += 1;
  const ulp = 2 ** (e - 10);
  const r = a / ulp, f = Math.floor(r), d = r - f;
  const n = d > 0.5 ? f + 1 : d < 0.5 ? f : f % 2 === 0 ? f : f + 1;
  return Math.sign(x) * n * ulp;
}
const scratchF = new Float32Array(1);
const scratchU = new Uint32Array(scratchF.buffer);
function bf16Round(x) {
  scratchF[0] = x;
  if (Number.isNaN(scratchF[0])) return x;
  const b = scratchU[0];
  scratchU[0] = ((b + 0x7fff + ((b >>> 16) & 1)) >>> 0) & 0xffff0000;
  return scratchF[0];
}

// 2-byte f16 / bf16 weights (`bytes` at `offset` of weights.bin) widened to the f32 words the
// kernels read.
let f16Table = null;
function widen(weights, offset, bytes, form) {
  const halves = new Uint16Array(weights, offset, bytes / 2);
  const out = new Float32Array(halves.length);
  if (form === 'bf16') {
    const bits = new Uint32Array(out.buffer);
    for (let i = 0; i < halves.length; ++i) bits[i] = halves[i] << 16;
    return out;
  }
  if (form !== 'f16') throw new RlxError(`weights.bin holds values of an unknown form '${form}'; export the model again`);
  if (!f16Table) {
    f16Table = new Float32Array(65536);
    for (let h = 0; h < 65536; ++h) {
      const e = (h >> 10) & 31, m = h & 1023, s = h & 0x8000 ? -1 : 1;
      f16Table[h] = e === 0 ? s * m * 2 ** -24 : e === 31 ? (m ? NaN : s * Infinity) : s * (1024 + m) * 2 ** (e - 25);
    }
  }
  for (let i = 0; i < halves.length; ++i) out[i] = f16Table[halves[i]];
  return out;
}

// The 32-bit words an input's value is stored as on the device.
function toStorage(input, value) {
  const what = `input '${input.name}' (${input.dtype}[${input.dims.join(', ')}])`;
  if (value === undefined || value === null) throw new RlxError(`${what} has no value`);
  if (!ArrayBuffer.isView(value) && !Array.isArray(value))
    throw new RlxError(`${what}: give a typed array or an array of numbers, got ${typeof value}`);
  if (value.length !== input.size)
    throw new RlxError(`${what} takes ${input.size} elements, got ${value.length}`);
  if (FLOATS.has(input.dtype)) {
    if (value instanceof BigInt64Array || value instanceof BigUint64Array)
      throw new RlxError(`${what} is a float tensor; got a ${value.constructor.name}`);
    const out = value instanceof Float32Array && input.dtype === 'f32' ? value : Float32Array.from(value, Number);
    if (input.dtype === 'f32') return out;
    const round = input.dtype === 'f16' ? f16Round : bf16Round;
    const res = new Float32Array(out.length);
    for (let i = 0; i < out.length; ++i) {
      res[i] = round(out[i]);
      if (!Number.isFinite(res[i]) && Number.isFinite(out[i]))
        throw new RlxError(`${what}: element ${i} = ${out[i]} overflows ${input.dtype}`);
    }
    return res;
  }
  const [lo, hi] = INT_RANGE[input.dtype];
  const res = input.storage === 'i32' ? new Int32Array(value.length) : new Uint32Array(value.length);
  for (let i = 0; i < value.length; ++i) {
    const v = value[i];
    if (input.dtype === 'bool') {
      res[i] = v ? 1 : 0;
      continue;
    }
    const n = typeof v === 'bigint' ? Number(v) : v;
    if (typeof n !== 'number' || !Number.isInteger(n))
      throw new RlxError(`${what}: element ${i} = ${v} is not an integer`);
    if (n < lo || n > hi) {
      const why = input.dtype === 'i64' ? 'WebGPU holds i64 values in 32-bit words, [-2^31, 2^31)' : `${input.dtype} holds [${lo}, ${hi}]`;
      throw new RlxError(`${what}: element ${i} = ${v} does not fit: ${why}`);
    }
    res[i] = n;
  }
  return res;
}

// A host array of an output's dtype from its storage words.
function fromStorage(output, bytes) {
  const n = output.size;
  if (output.storage === 'f32') return new Float32Array(bytes.slice(0, n * 4));
  if (output.storage === 'i32') {
    const w = new Int32Array(bytes, 0, n);
    switch (output.dtype) {
      case 'i64': return BigInt64Array.from(w, (v) => BigInt(v));
      case 'i16': return Int16Array.from(w);
      case 'i8': return Int8Array.from(w);
      default: return Int32Array.from(w);
    }
  }
  const w = new Uint32Array(bytes, 0, n);
  if (output.dtype === 'bool') return Uint8Array.from(w, (v) => (v ? 1 : 0));
  if (output.dtype === 'u8') return Uint8Array.from(w);
  return Uint32Array.from(w);
}

async function makeDevice(manifest, options) {
  const needs = manifest.requires || {};
  if (options.device) {
    for (const [k, v] of Object.entries(needs))
      if (v > options.device.limits[k])
        throw new RlxError(`the model needs the WebGPU limit ${k} = ${v}; the given device has ${options.device.limits[k]}`);
    return options.device;
  }
  if (!globalThis.navigator || !navigator.gpu)
    throw new RlxError('this browser has no WebGPU (navigator.gpu); use a browser or a flag that enables it');
  const adapter = await navigator.gpu.requestAdapter(options.adapter || {});
  if (!adapter) throw new RlxError('the browser gave no WebGPU adapter');
  const requiredLimits = {};
  for (const [k, v] of Object.entries(needs)) {
    if (v > adapter.limits[k])
      throw new RlxError(`the model needs the WebGPU limit ${k} = ${v}; this adapter allows ${adapter.limits[k]}`);
    if (v > (DEFAULT_LIMITS[k] ?? 0)) requiredLimits[k] = v;
  }
  return adapter.requestDevice({ requiredLimits, label: 'rlx' });
}

export async function loadModel(url = './model.json', options = {}) {
  const base = new URL(url, globalThis.location ? globalThis.location.href : undefined);
  const manifest = await (await fetchOk(base, 'the model')).json();
  if (manifest.format !== FORMAT || manifest.version !== VERSION)
    throw new RlxError(`'${base}' is not an rlx web bundle of version ${VERSION} (format ${manifest.format}, ` +
                       `version ${manifest.version}); export it again with this rlx`);
  const weightsUrl = new URL(manifest.weights.file, base);
  const [device, weights] = await Promise.all([
    makeDevice(manifest, options),
    fetchOk(weightsUrl, 'the weights').then((r) => r.arrayBuffer()),
  ]);
  if (weights.byteLength !== manifest.weights.bytes)
    throw new RlxError(`'${weightsUrl}' has ${weights.byteLength} bytes, the model expects ${manifest.weights.bytes}`);
  const model = new Model(device, manifest, weights);
  await model._build();
  return model;
}

class Model {
  constructor(device, manifest, weights) {
    this.device = device;
    this.manifest = manifest;
    this._weights = weights;
    this._busy = false;
    this.lost = null;
    device.lost.then((info) => { this.lost = info.message || info.reason || 'lost'; });
    const tensor = (t) => ({ name: t.name, dtype: t.dtype, dims: t.dims, size: numel(t.dims), storage: t.storage,
                             buffer: t.buffer, offset: t.offset || 0 });
    this._inputs = manifest.inputs.map(tensor);
    this._outputs = manifest.outputs.map(tensor);
    this.inputs = this._inputs.map(({ name, dtype, dims, size }) => ({ name, dtype, dims, size }));
    this.outputs = this._outputs.map(({ name, dtype, dims, size }) => ({ name, dtype, dims, size }));
    this.lastRunMs = 0;
  }

  async _build() {
    const d = this.device, m = this.manifest;
    d.pushErrorScope('out-of-memory');
    d.pushErrorScope('validation');
    const U = GPUBufferUsage;
    this._buffers = m.buffers.map((b) => {
      const buf = d.createBuffer({ size: Math.max(align4(b.bytes), 4), usage: U.STORAGE | U.COPY_SRC | U.COPY_DST,
                                   label: `${b.role} ${b.name}` });
      if (b.init && b.init[2]) d.queue.writeBuffer(buf, 0, widen(this._weights, b.init[0], b.init[1], b.init[2]));
      else if (b.init) d.queue.writeBuffer(buf, 0, this._weights, b.init[0], b.init[1]);
      return buf;
    });
    this._weights = null;
    const layouts = m.kernels.map((k) => d.createBindGroupLayout({
      label: k.name,
      entries: k.bindings.map((kind, i) => ({
        binding: i, visibility: GPUShaderStage.COMPUTE,
        buffer: { type: kind === 'uniform' ? 'uniform' : kind === 'read' ? 'read-only-storage' : 'storage' },
      })),
    }));
    const pipelines = await Promise.all(m.kernels.map(async (k, i) => {
      const module = d.createShaderModule({ code: k.wgsl, label: k.name });
      try {
        return await d.createComputePipelineAsync({
          label: k.name, layout: d.createPipelineLayout({ bindGroupLayouts: [layouts[i]] }),
          compute: { module, entryPoint: 'main' },
        });
      } catch (e) {
        const info = await module.getCompilationInfo();
        const msgs = info.messages.map((x) => `${x.type} ${x.lineNum}:${x.linePos} ${x.message}`).join('; ');
        throw new RlxError(`kernel '${k.name}' does not build on this device: ${e.message}${msgs ? ' (' + msgs + ')' : ''}`);
      }
    }));
    const dispatches = m.commands.filter((c) => c.op === 'dispatch');
    this._uniforms = d.createBuffer({ size: Math.max(dispatches.length, 1) * UNIFORM_STRIDE,
                                      usage: U.UNIFORM | U.COPY_DST, label: 'rlx uniforms' });
    const words = new Uint32Array(Math.max(dispatches.length, 1) * UNIFORM_STRIDE / 4);
    let j = 0;
    this._commands = m.commands.map((c) => {
      if (c.op !== 'dispatch') return c;
      words.set(c.uniform, j * UNIFORM_STRIDE / 4);
      const entries = c.buffers.map((b, i) => ({ binding: i, resource: { buffer: this._buffers[b] } }));
      entries.push({ binding: c.buffers.length, resource: { buffer: this._uniforms, offset: j * UNIFORM_STRIDE,
                                                            size: Math.max(Math.ceil(c.uniform.length * 4 / 16) * 16, 16) } });
      ++j;
      return { op: 'dispatch', label: c.label, pipeline: pipelines[c.kernel], groups: c.groups,
               group: d.createBindGroup({ label: c.label, layout: layouts[c.kernel], entries }) };
    });
    d.queue.writeBuffer(this._uniforms, 0, words);
    this._readback = new Map();
    const staging = (bytes, label) => d.createBuffer({ size: Math.max(align4(bytes), 4), usage: U.MAP_READ | U.COPY_DST, label });
    for (const o of this._outputs) this._readback.set(o.name, staging(o.size * 4, `read-back ${o.name}`));
    this._flagReadback = staging(4, 'read-back error flag');
    const validation = await d.popErrorScope();
    const oom = await d.popErrorScope();
    if (validation) throw new RlxError(`loading the model failed: ${validation.message}`);
    if (oom) throw new RlxError(`the device is out of memory for the model's buffers: ${oom.message}`);
    await d.queue.onSubmittedWorkDone();
  }

  // Runs the model. `feeds`: { inputName: array }. `options.outputs`: the names to read back
  // (default: every output). Resolves to { name: { data, dims, dtype } }.
  async run(feeds, options = {}) {
    if (this.lost) throw new RlxError(`the WebGPU device was lost (${this.lost}); load the model again`);
    if (this._busy) throw new RlxError('run() is already in flight on this model; await it before the next');
    if (!feeds || typeof feeds !== 'object') throw new RlxError('run() takes an object { inputName: array }');
    for (const name of Object.keys(feeds))
      if (!this._inputs.some((i) => i.name === name))
        throw new RlxError(`the model has no input '${name}' (inputs: ${this._inputs.map((i) => `'${i.name}'`).join(', ')})`);
    const wanted = options.outputs ? options.outputs.map((n) => {
      const o = this._outputs.find((x) => x.name === n);
      if (!o) throw new RlxError(`the model has no output '${n}' (outputs: ${this._outputs.map((x) => `'${x.name}'`).join(', ')})`);
      return o;
    }) : this._outputs;
    const words = this._inputs.map((i) => toStorage(i, feeds[i.name]));
    this._busy = true;
    try {
      const d = this.device, start = performance.now();
      this._inputs.forEach((inp, k) => { if (words[k].byteLength) d.queue.writeBuffer(this._buffers[inp.buffer], 0, words[k]); });
      const enc = d.createCommandEncoder({ label: 'rlx run' });
      const flag = this._buffers[this.manifest.flag];
      enc.clearBuffer(flag, 0, 4);
      let pass = null;
      for (const c of this._commands) {
        if (c.op === 'dispatch') {
          if (!pass) pass = enc.beginComputePass();
          pass.setPipeline(c.pipeline);
          pass.setBindGroup(0, c.group);
          pass.dispatchWorkgroups(c.groups[0], c.groups[1], c.groups[2]);
          continue;
        }
        if (pass) pass.end(), (pass = null);
        if (c.op === 'copy') enc.copyBufferToBuffer(this._buffers[c.src], c.src_offset, this._buffers[c.dst], c.dst_offset, c.bytes);
        else enc.clearBuffer(this._buffers[c.dst], c.dst_offset, c.bytes);
      }
      if (pass) pass.end();
      for (const o of wanted)
        if (o.size) enc.copyBufferToBuffer(this._buffers[o.buffer], o.offset, this._readback.get(o.name), 0, o.size * 4);
      enc.copyBufferToBuffer(flag, 0, this._flagReadback, 0, 4);
      d.queue.submit([enc.finish()]);
      const maps = wanted.filter((o) => o.size).map((o) => this._readback.get(o.name));
      maps.push(this._flagReadback);
      await Promise.all(maps.map((b) => b.mapAsync(GPUMapMode.READ)));
      const code = new Int32Array(this._flagReadback.getMappedRange())[0];
      const result = {};
      for (const o of wanted) {
        const data = o.size ? fromStorage(o, this._readback.get(o.name).getMappedRange()) : fromStorage(o, new ArrayBuffer(0));
        result[o.name] = { data, dims: o.dims, dtype: o.dtype };
      }
      for (const b of maps) b.unmap();
      this.lastRunMs = performance.now() - start;
      if (code !== 0)
        throw new RlxError(this.manifest.errors[String(code)] || `a kernel reported error code ${code}`);
      return result;
    } finally {
      this._busy = false;
    }
  }

  // Frees the model's device memory (the device itself stays).
  destroy() {
    for (const b of this._buffers || []) b.destroy();
    for (const b of this._readback ? this._readback.values() : []) b.destroy();
    if (this._flagReadback) this._flagReadback.destroy();
    if (this._uniforms) this._uniforms.destroy();
    this._buffers = [];
  }
}
