// llama.cpp (through the npm package node-llama-cpp, its prebuilt CPU binaries) as the CPU
// generation peer of rlx: prompt processing and greedy decode of a GGUF model from token ids.
//   node bench/llama_cpp_peer.mjs MODEL.gguf --prompt-ids 1,2,3 [--n 64] [--threads N] [--ctx 256]
//        [--repeat N] [--warmup N] [--kv f16|f32] [--flash-attn auto|on|off] [--trace OUT.json]
// (--repeat 0: no timing, e.g. with --trace only)
// The prompt ids are used as given (no BOS is added). Timing (like bench_generate): prompt tokens/s
// = prompt length / the time until the first generated token (prefill + one greedy pick);
// decode tokens/s = (n - 1) / the time from the first to the n-th generated token (each a run of
// one token and a greedy pick). Prints one machine-readable line with the medians of --repeat runs:
//   LLAMA_PEER threads=T ctx=C prompt_tokens=P prompt_tps=X decode_steps=D decode_tps=Y
// --trace: greedy ids over n steps (argmax of the logits, lowest id on ties) and the top-8 of each
// step as [id, log-probability] (softmax of the raw logits: differences are logit differences),
// written as {"tokens": [...], "top": [[[id, logp], ...], ...]}; --kv defaults to f32 and --flash-attn
// to off then (llama.cpp's CPU flash attention rounds to f16 inside even with an f32 cache).
// Otherwise llama.cpp's defaults: an F16 KV cache, flash attention auto (on for the CPU).
// The package is looked up in $RLX_LLAMA_CPP_DIR (default ~/.cache/rlx/llama-cpp, where
// bench/bench_llm_cpu.py installs it), then in node's ordinary module path.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

function fail(msg) {
  process.stderr.write(`llama_cpp_peer: ${msg}\n`);
  process.exit(2);
}

async function loadPackage() {
  const home = process.env.XDG_CACHE_HOME || path.join(process.env.HOME || '/root', '.cache');
  const dir = process.env.RLX_LLAMA_CPP_DIR || path.join(home, 'rlx', 'llama-cpp');
  for (const base of [path.join(dir, 'node_modules'), dir]) {
    let resolved;
    try {
      resolved = createRequire(path.join(base, 'x.js')).resolve('node-llama-cpp');
    } catch (e) { continue; }
    return import(pathToFileURL(resolved).href);
  }
  try {
    return await import('node-llama-cpp');
  } catch (e) {
    fail(`node-llama-cpp not found in ${dir} (bench/bench_llm_cpu.py installs it) nor in node's module path`);
  }
}

function parseArgs(argv) {
  const o = { model: null, prompt: null, n: 64, threads: 1, ctx: 256, repeat: 3, warmup: 1, kv: null, fa: null, trace: null };
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    const next = () => { if (i + 1 >= argv.length) fail(`${a} needs a value`); return argv[++i]; };
    const int = (s) => { const v = Number(s); if (!Number.isInteger(v) || v < 0) fail(`${a}: bad number ${s}`); return v; };
    if (a === '--prompt-ids') o.prompt = next().split(',').filter((s) => s.length).map(int);
    else if (a === '--n') o.n = Math.max(1, int(next()));
    else if (a === '--threads' || a === '-t') o.threads = Math.max(1, int(next()));
    else if (a === '--ctx') o.ctx = int(next());
    else if (a === '--repeat') o.repeat = int(next());
    else if (a === '--warmup') o.warmup = int(next());
    else if (a === '--kv') o.kv = next().toUpperCase();
    else if (a === '--trace') o.trace = next();
    else if (a === '--flash-attn') o.fa = next();
    else if (a.startsWith('-')) fail(`unknown option ${a}`);
    else if (o.model) fail(`one model only (got ${o.model} and ${a})`);
    else o.model = a;
  }
  if (!o.model || !o.prompt || !o.prompt.length)
    fail('usage: node bench/llama_cpp_peer.mjs MODEL.gguf --prompt-ids 1,2,3 [--n 64] [--threads N] [--ctx 256] [--repeat N] [--warmup N] [--kv f16|f32] [--trace OUT.json]');
  if (!o.kv) o.kv = o.trace ? 'F32' : 'F16';
  if (!o.fa) o.fa = o.trace ? 'off' : 'auto';
  if (!['on', 'off', 'auto'].includes(o.fa)) fail(`--flash-attn ${o.fa}: on, off or auto`);
  if (o.kv !== 'F16' && o.kv !== 'F32') fail(`--kv ${o.kv}: f16 or f32`);
  return o;
}

const median = (v) => {
  const s = [...v].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

const opts = parseArgs(process.argv.slice(2));
const { getLlama, LlamaLogLevel } = await loadPackage();
const llama = await getLlama({
  gpu: false, build: 'never', maxThreads: opts.threads, logLevel: LlamaLogLevel.warn, progressLogs: false,
});
const model = await llama.loadModel({ modelPath: path.resolve(opts.model), gpuLayers: 0 });
const context = await model.createContext({
  contextSize: opts.ctx, batchSize: Math.min(512, opts.ctx), sequences: 1,
  threads: { ideal: opts.threads, min: opts.threads },
  experimentalKvCacheKeyType: opts.kv, experimentalKvCacheValueType: opts.kv,
  flashAttention: opts.fa === 'auto' ? 'auto' : opts.fa === 'on',
});
const sequence = context.getSequence();
if (opts.prompt.length + opts.n > context.contextSize)
  fail(`prompt ${opts.prompt.length} + n ${opts.n} tokens do not fit the context of ${context.contextSize}`);

// One prompt + n greedy tokens; returns the timings and the ids.
async function generate(n) {
  await sequence.clearHistory();
  const ids = [];
  const t0 = process.hrtime.bigint();
  let tFirst = t0, tLast = t0;
  for await (const token of sequence.evaluate(opts.prompt, { temperature: 0 })) {
    const t = process.hrtime.bigint();
    if (ids.length === 0) tFirst = t;
    tLast = t;
    ids.push(token);
    if (ids.length >= n) break;
  }
  const prefillS = Number(tFirst - t0) / 1e9;
  const decodeS = Number(tLast - tFirst) / 1e9;
  return { ids, prefillS, decodeS };
}

if (opts.trace) {
  // The full distribution of each step (temperature 1, no truncation), greedy picked here.
  const next = { probabilities: true, options: { temperature: 1, topK: 0, topP: 1, minP: 0, seed: 1 } };
  await sequence.clearHistory();
  const tokens = [], tops = [];
  let input = [...opts.prompt.slice(0, -1), [opts.prompt[opts.prompt.length - 1], { generateNext: next }]];
  for (let step = 0; step < opts.n; ++step) {
    const out = await sequence.controlledEvaluate(input);
    const probs = out[input.length - 1]?.next?.probabilities;
    if (!probs || probs.size === 0) fail('controlledEvaluate gave no probabilities');
    const entries = [...probs.entries()].sort((a, b) => b[1] - a[1] || a[0] - b[0]);
    const best = entries[0][0];
    tokens.push(best);
    tops.push(entries.slice(0, 8).map(([id, p]) => [id, Math.log(p)]));
    input = [[best, { generateNext: next }]];
  }
  fs.writeFileSync(opts.trace, JSON.stringify({ tokens, top: tops }) + '\n');
}

if (opts.repeat > 0) {
  for (let i = 0; i < opts.warmup; ++i) await generate(Math.min(opts.n, 4));
  const ptps = [], dtps = [];
  for (let i = 0; i < opts.repeat; ++i) {
    const r = await generate(opts.n);
    ptps.push(opts.prompt.length / r.prefillS);
    if (r.ids.length > 1) dtps.push((r.ids.length - 1) / r.decodeS);
  }
  console.log(`LLAMA_PEER threads=${opts.threads} ctx=${context.contextSize} prompt_tokens=${opts.prompt.length} ` +
    `prompt_tps=${median(ptps).toFixed(3)} decode_steps=${opts.n - 1} decode_tps=${median(dtps).toFixed(3)}`);
}
await context.dispose();
await model.dispose();
await llama.dispose();
