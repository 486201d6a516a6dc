// GPU benchmarks of rlx on CUDA, or with `--device vulkan|webgpu` on the Vulkan or WebGPU backend (the peer,
// PyTorch, is bench/cuda_peer.py; scripts/gpu-check.sh runs them and bench/cuda_summary.py joins
// them). Prints one CSV line per case:
//   name,impl,p50_ms,extra          (impl: rlx for CUDA, rlx-vulkan / rlx-webgpu for the others)
// p50_ms is the device time of the compiled schedule (CUDA events around its graph launch,
// Vulkan timestamps around its recorded command buffer, WebGPU timestamp queries around its
// encoded passes;
// inputs/outputs copies excluded, as for the PyTorch timings of device-resident tensors);
// `extra` carries a derived rate (TFLOP/s, GB/s, % of the bandwidth bound).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "models/transformer.h"
#include "rlx/rlx.h"
#include "runtime/device_api.h"
#ifdef RLX_HAVE_VULKAN
#include "backends/vulkan/variant.h"
#endif
#ifdef RLX_HAVE_WEBGPU
#include "backends/webgpu/variant.h"
#endif
#include "runtime/knobs.h"
#ifdef RLX_HAVE_CUDA
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include "backends/cuda/stats.h"
#endif

namespace {

using namespace rlx;

Device g_device = Device::Cuda;  // --device vulkan: the Vulkan backend on the same GPU
// A whole case name as the argument (e.g. bert_base_b1_bf16, llama_decode_ctx511_bf16): only that
// case of its group runs (one compile: what RLX_VULKAN_DUMP / profiles should hold).
std::string g_case;
bool skip_case(const std::string& name) { return !g_case.empty() && name != g_case; }

// Deterministic pseudo-random values in [-amp, amp) (cheap for a billion weights).
Tensor fill(DType t, std::vector<int64_t> shape, uint64_t seed, float amp) {
  Tensor x = Tensor::empty(t, shape);
  const int64_t n = x.numel();
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  auto next = [&] {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return (static_cast<float>(s >> 40) / static_cast<float>(1 << 24) * 2.f - 1.f) * amp;
  };
  if (t == DType::F32) {
    float* p = x.data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = next();
  } else if (t == DType::BF16) {
    auto* p = static_cast<uint16_t*>(x.raw());
    for (int64_t i = 0; i < n; ++i) p[i] = f32_to_bf16_bits(next());
  } else {
    auto* p = static_cast<uint16_t*>(x.raw());
    for (int64_t i = 0; i < n; ++i) p[i] = f32_to_f16_bits(next());
  }
  return x;
}

void set_all_params(CompiledGraph& cg, const Graph& g) {
  uint64_t seed = 1;
  for (NodeId id : g.param_nodes()) {
    const auto& p = std::get<ops::Param>(g.node(id).op);
    const bool norm = p.name.find("norm") != std::string::npos || p.name.find("ln") != std::string::npos;
    cg.set_param(p.name, norm ? fill(p.shape.dtype, p.shape.concrete(), seed++, 0.1f) : fill(p.shape.dtype, p.shape.concrete(), seed++, 0.03f));
  }
}

struct Timing {
  double device_p50 = 0, wall_p50 = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// RLX_BENCH_PROFILE_RUN=<i>: the i-th timed run of every case (0 the first) runs inside a
// profiler range (cudaProfilerStart / Stop), so `ncu --profile-from-start off` profiles one
// graph replay rather than the compile-time kernels before it (scripts/cuda-pm-timeline.sh).
int profile_run() {
  const std::optional<int64_t> i = process_knobs::bench_profile_run();  // 0..1000, validated
  return i ? static_cast<int>(*i) : -1;
}

Timing time_runs(CompiledGraph& cg, const NamedTensors& ins, int iters) {
  for (int i = 0; i < 3; ++i) cg.run(ins, {});
  std::vector<double> dev, wall;
  const int profiled = profile_run();
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
#ifdef RLX_HAVE_CUDA
    if (i == profiled) cudaProfilerStart();
#endif
    cg.run(ins, {});
#ifdef RLX_HAVE_CUDA
    if (i == profiled) cudaProfilerStop();
#endif
    const auto t1 = std::chrono::steady_clock::now();
    wall.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    dev.push_back(device_stats().last_device_ms);
  }
  return {dev.empty() ? 0 : median(dev), median(wall)};
}

const char* tag(DType t) { return t == DType::BF16 ? "bf16" : (t == DType::F16 ? "fp16" : "fp32"); }

void report(const std::string& name, const Timing& t, const std::string& extra = "") {
  std::printf("%s,%s,%.4f,%s\n", name.c_str(),
              g_device == Device::Vulkan ? "rlx-vulkan" : g_device == Device::WebGpu ? "rlx-webgpu" : "rlx", t.device_p50,
              extra.c_str());
  std::fprintf(stderr, "%-28s device p50 %9.4f ms  wall p50 %9.4f ms  %s\n", name.c_str(), t.device_p50, t.wall_p50,
               extra.c_str());
  std::fflush(stdout);
#ifdef RLX_HAVE_CUDA
  const std::string prof = cuda::take_profile_report();  // non-empty with RLX_CUDA_PROFILE=1
  if (!prof.empty()) std::fprintf(stderr, "%s", prof.c_str());
#endif
#ifdef RLX_HAVE_VULKAN
  const std::string vprof = vulkan::take_vulkan_profile();  // non-empty with RLX_VULKAN_PROFILE=1
  if (!vprof.empty()) std::fprintf(stderr, "%s", vprof.c_str());
#endif
#ifdef RLX_HAVE_WEBGPU
  const std::string wprof = webgpu::take_webgpu_profile();  // non-empty with RLX_WEBGPU_PROFILE=1
  if (!wprof.empty()) std::fprintf(stderr, "%s", wprof.c_str());
#endif
}

// ---- BERT-base encoder: 12 post-norm layers, hidden 768, 12 heads, FFN 3072, seq 128 ----
void bench_bert(int64_t batch, DType t) {
  const std::string name = "bert_base_b" + std::to_string(batch) + "_" + tag(t);
  if (skip_case(name)) return;
  Graph g;
  models::BertLayerConfig cfg;
  cfg.hidden = 768, cfg.num_heads = 12, cfg.ffn = 3072;
  const int64_t s = 128;
  Value x = g.input("hidden", Shape::of({batch, s, 768}, t));
  const Value mask = g.input("mask", Shape::of({batch, s}, t));
  for (int l = 0; l < 12; ++l) x = models::build_bert_layer(g, x, mask, cfg, "bert." + std::to_string(l));
  g.add_output(x);
  auto cg = Session(g_device).compile(g);
  set_all_params(cg, g);
  std::vector<double> ones(static_cast<size_t>(batch * s), 1.0);
  Tensor m = Tensor::empty(t, {batch, s});
  if (t == DType::F32) std::fill(m.data<float>(), m.data<float>() + batch * s, 1.f);
  else std::fill(static_cast<uint16_t*>(m.raw()), static_cast<uint16_t*>(m.raw()) + batch * s, f32_to_bf16_bits(1.f));
  if (t == DType::F16) std::fill(static_cast<uint16_t*>(m.raw()), static_cast<uint16_t*>(m.raw()) + batch * s, f32_to_f16_bits(1.f));
  const NamedTensors ins = {{"hidden", fill(t, {batch, s, 768}, 99, 1.f)}, {"mask", m}};
  report(name, time_runs(cg, ins, 30));
}

// ---- Llama-style decoder: hidden 2048, 16 layers, 32 heads, 8 KV heads, SwiGLU 5632 ----
constexpr int64_t kE = 2048, kH = 32, kHkv = 8, kD = 64, kI = 5632, kLayers = 16;

Value linear(Graph& g, Value x, const std::string& name, int64_t in, int64_t out, DType t) {
  return g.matmul(x, g.param(name, Shape::of({in, out}, t)));
}

// Prefill: the model builders' block (causal attention over the prompt).
void bench_llama_prefill(int64_t s, DType t) {
  const std::string name = "llama_prefill" + std::to_string(s) + "_" + tag(t);
  if (skip_case(name)) return;
  Graph g;
  models::LlamaBlockConfig cfg;
  cfg.hidden = kE, cfg.num_heads = kH, cfg.num_kv_heads = kHkv, cfg.intermediate = kI;
  Value x = g.input("hidden", Shape::of({1, s, kE}, t));
  const Value pos = g.input("positions", Shape::of({s}, DType::I64));
  const auto [cos, sin] = models::build_rope_tables(g, pos, kD, 10000.0, t);
  for (int64_t l = 0; l < kLayers; ++l) x = models::build_llama_block(g, x, cos, sin, cfg, "l" + std::to_string(l));
  g.add_output(g.rms_norm(x, g.param("norm", Shape::of({kE}, t))));
  auto cg = Session(g_device).compile(g);
  set_all_params(cg, g);
  std::vector<int64_t> p(static_cast<size_t>(s));
  for (int64_t i = 0; i < s; ++i) p[static_cast<size_t>(i)] = i;
  const NamedTensors ins = {{"hidden", fill(t, {1, s, kE}, 7, 1.f)}, {"positions", Tensor::i64({s}, p)}};
  report(name, time_runs(cg, ins, 10));
}

// Decode of one token at position `past` with a KV cache of `past` tokens per layer (params,
// device-resident): each layer concatenates its cache with the new k/v and attends causally.
void bench_llama_decode(int64_t past, DType t, double copy_gbps) {
  const std::string name = "llama_decode_ctx" + std::to_string(past) + "_" + tag(t);
  if (skip_case(name)) return;
  Graph g;
  Value x = g.input("hidden", Shape::of({1, 1, kE}, t));
  const Value pos = g.input("positions", Shape::of({1}, DType::I64));
  const auto [cos, sin] = models::build_rope_tables(g, pos, kD, 10000.0, t);
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = "l" + std::to_string(l);
    Value h = g.rms_norm(x, g.param(p + ".attn_norm", Shape::of({kE}, t)));
    Value q = g.reshape(linear(g, h, p + ".q", kE, kH * kD, t), {1, 1, kH, kD});
    Value k = g.reshape(linear(g, h, p + ".k", kE, kHkv * kD, t), {1, 1, kHkv, kD});
    Value v = g.reshape(linear(g, h, p + ".v", kE, kHkv * kD, t), {1, 1, kHkv, kD});
    q = g.rope(q, cos, sin, kD, kD);
    k = g.rope(k, cos, sin, kD, kD);
    k = g.concat({g.param(p + ".k_cache", Shape::of({1, past, kHkv, kD}, t)), k}, 1);
    v = g.concat({g.param(p + ".v_cache", Shape::of({1, past, kHkv, kD}, t)), v}, 1);
    ops::Attention a;
    a.num_heads = kH, a.num_kv_heads = kHkv, a.head_dim = kD, a.mask_kind = MaskKind::Causal;
    Value ctx = g.reshape(g.attention(q, k, v, std::nullopt, a), {1, 1, kH * kD});
    x = g.add(x, linear(g, ctx, p + ".o", kH * kD, kE, t));
    Value y = g.rms_norm(x, g.param(p + ".mlp_norm", Shape::of({kE}, t)));
    Value gate = g.silu(linear(g, y, p + ".gate", kE, kI, t));
    x = g.add(x, linear(g, g.mul(gate, linear(g, y, p + ".up", kE, kI, t)), p + ".down", kI, kE, t));
  }
  g.add_output(g.rms_norm(x, g.param("norm", Shape::of({kE}, t))));
  auto cg = Session(g_device).compile(g);
  set_all_params(cg, g);
  const NamedTensors ins = {{"hidden", fill(t, {1, 1, kE}, 7, 1.f)}, {"positions", Tensor::i64({1}, std::vector<int64_t>{past})}};
  const Timing tm = time_runs(cg, ins, 30);
  const double es = static_cast<double>(dtype_size(t));
  const double weight_bytes = es * kLayers * (kE * (kH * kD) * 2 + kE * (kHkv * kD) * 2 + 3.0 * kE * kI) + es * 2 * kE;
  const double kv_bytes = es * kLayers * 2.0 * (past + 1) * kHkv * kD;
  const double bound_ms = (weight_bytes + kv_bytes) / (copy_gbps * 1e6);
  char extra[128];
  std::snprintf(extra, sizeof extra, "bound %.3f ms = %.1f%% of DRAM bound", bound_ms, 100.0 * bound_ms / tm.device_p50);
  report(name, tm, extra);
}

// ---- microbenchmarks ----
void bench_gemm(int64_t n, DType t, Precision prec) {
  Graph g;
  g.add_output(g.matmul(g.param("a", Shape::of({n, n}, t)), g.param("b", Shape::of({n, n}, t))));
  CompileOptions o;
  o.precision = prec;
  auto cg = Session(g_device).compile(g, o);
  set_all_params(cg, g);
  const Timing tm = time_runs(cg, {}, 20);
  char extra[64];
  std::snprintf(extra, sizeof extra, "%.1f TFLOP/s", 2.0 * n * n * n / (tm.device_p50 * 1e9));
  report("gemm" + std::to_string(n) + "_" + tag(t) + (prec == Precision::Tf32 ? "_tf32" : ""), tm, extra);
}

// Decode-shaped product (one row against a weight that lives in DRAM): weight bytes / time.
void bench_gemv(int64_t k, int64_t n, DType t) {
  Graph g;
  g.add_output(g.matmul(g.input("x", Shape::of({1, k}, t)), g.param("w", Shape::of({k, n}, t))));
  auto cg = Session(g_device).compile(g);
  set_all_params(cg, g);
  const Timing tm = time_runs(cg, {{"x", fill(t, {1, k}, 5, 1.f)}}, 50);
  char extra[64];
  std::snprintf(extra, sizeof extra, "%.0f GB/s", static_cast<double>(k * n) * dtype_size(t) / (tm.device_p50 * 1e6));
  report("gemv_1x" + std::to_string(k) + "x" + std::to_string(n) + "_" + tag(t), tm, extra);
}

// DequantMatMul (GGUF blocks decoded as they stream): m rows of x against an n x k weight of
// format f; GB/s of the quantized weight bytes (the decode bound) and TFLOP/s (2 m n k).
// gemm_rows >= 0 sets the knob cuda_dequant_gemm_rows (0: the f32 decoder, named "_decoder").
void bench_dequant(QuantFormat f, int64_t m, int64_t k, int64_t n, DType t, int64_t gemm_rows = -1) {
  Graph g;
  ops::DequantMatMul op;
  op.format = f;
  op.k = k;
  const QuantBlock blk = quant_block(f);
  const int64_t row_bytes = k / blk.elements * blk.bytes;
  g.add_output(g.apply(op, {g.input("x", Shape::of({m, k}, t)), g.param("w", Shape::of({n, row_bytes}, DType::U8))}));
  CompileOptions o;
  if (gemm_rows >= 0) o.tuning.cuda_dequant_gemm_rows = gemm_rows;
  auto cg = Session(g_device).compile(g, o);
  // Blocks of small f16 scales (0x2000 = 2^-7) over random quants: finite products.
  std::vector<uint8_t> w(static_cast<size_t>(n * row_bytes));
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  for (size_t b = 0; b + static_cast<size_t>(blk.bytes) <= w.size(); b += static_cast<size_t>(blk.bytes))
    for (size_t o = 0; o < static_cast<size_t>(blk.bytes); o += 2) w[b + o + 1] = w[b + o + 1] & 0x23;
  cg.set_param("w", Tensor::from_bytes(DType::U8, {n, row_bytes}, w.data(), w.size()));
  const Timing tm = time_runs(cg, {{"x", fill(t, {m, k}, 5, 1.f)}}, 50);
  char extra[64];
  std::snprintf(extra, sizeof extra, "%.0f GB/s %.2f TFLOP/s", static_cast<double>(n * row_bytes) / (tm.device_p50 * 1e6),
                2.0 * static_cast<double>(m * n * k) / (tm.device_p50 * 1e9));
  report(std::string("dequant_") + EnumNames<QuantFormat>::names[static_cast<size_t>(f)] + "_" + std::to_string(m) +
             "x" + std::to_string(k) + "x" + std::to_string(n) + "_" + tag(t) + (gemm_rows == 0 ? "_decoder" : ""),
         tm, extra);
}

void bench_attention(int64_t b, int64_t h, int64_t s, int64_t d, DType t) {
  Graph g;
  ops::Attention a;
  a.num_heads = h, a.num_kv_heads = h, a.head_dim = d, a.mask_kind = MaskKind::Causal;
  const Shape sh = Shape::of({b, s, h, d}, t);
  g.add_output(g.attention(g.param("q", sh), g.param("k", sh), g.param("v", sh), std::nullopt, a));
  auto cg = Session(g_device).compile(g);
  set_all_params(cg, g);
  const Timing tm = time_runs(cg, {}, 20);
  const double flops = 4.0 * b * h * s * s * d / 2;  // causal: half of QK^T and PV
  char extra[64];
  std::snprintf(extra, sizeof extra, "%.1f TFLOP/s", flops / (tm.device_p50 * 1e9));
  report("attn_causal_b" + std::to_string(b) + "h" + std::to_string(h) + "s" + std::to_string(s) + "d" +
             std::to_string(d) + "_" + tag(t), tm, extra);
}

void bench_rows(const char* kind, int64_t rows, int64_t cols, DType t) {
  Graph g;
  const Value x = g.param("x", Shape::of({rows, cols}, t));
  if (std::string(kind) == "layernorm")
    g.add_output(g.layer_norm(x, g.param("g", Shape::of({cols}, t)), g.param("b", Shape::of({cols}, t))));
  else
    g.add_output(g.softmax(x));
  auto cg = Session(g_device).compile(g);
  set_all_params(cg, g);
  const Timing tm = time_runs(cg, {}, 20);
  const double bytes = 2.0 * rows * cols * static_cast<double>(dtype_size(t));
  char extra[64];
  std::snprintf(extra, sizeof extra, "%.0f GB/s", bytes / (tm.device_p50 * 1e6));
  report(std::string(kind) + "_" + std::to_string(rows) + "x" + std::to_string(cols) + "_" + tag(t), tm, extra);
}

}  // namespace

int main(int argc, char** argv) {
#ifndef RLX_HAVE_CUDA
  (void)argc, (void)argv;
  std::fprintf(stderr, "bench_cuda: this build has no CUDA backend (configure with -DRLX_CUDA=ON)\n");
  return 0;
#else
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) {
      const std::string d = argv[++i];
      if (d != "cuda" && d != "vulkan" && d != "webgpu") {
        std::fprintf(stderr, "bench_cuda: --device takes cuda, vulkan or webgpu, not '%s'\n", d.c_str());
        return 2;
      }
      g_device = d == "vulkan" ? Device::Vulkan : d == "webgpu" ? Device::WebGpu : Device::Cuda;
    } else {
      only = a;
    }
  }
  try {
    Session(g_device).compile([] {
      Graph g;
      g.add_output(g.relu(g.input("x", Shape::of({1}))));
      return g;
    }());
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_cuda: %s\n", e.what());
    return 0;
  }
  // Device-to-device copy bandwidth (bytes read + written), the memory-bound reference.
  double copy_gbps = 0;
  {
    const size_t bytes = size_t(1) << 30;
    void *a = nullptr, *b = nullptr;
    auto ok = [](cudaError_t e, const char* what) {
      if (e != cudaSuccess) throw Error(std::string("bench_cuda: ") + what + ": " + cudaGetErrorString(e));
    };
    cudaEvent_t e0, e1;
    std::vector<double> ms;
    try {
      ok(cudaMalloc(&a, bytes), "cudaMalloc");
      ok(cudaMalloc(&b, bytes), "cudaMalloc");
      ok(cudaMemset(a, 1, bytes), "cudaMemset");
      ok(cudaEventCreate(&e0), "cudaEventCreate");
      ok(cudaEventCreate(&e1), "cudaEventCreate");
      for (int i = 0; i < 12; ++i) {
        ok(cudaEventRecord(e0), "cudaEventRecord");
        ok(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync");
        ok(cudaEventRecord(e1), "cudaEventRecord");
        ok(cudaEventSynchronize(e1), "cudaEventSynchronize");
        float m = 0;
        ok(cudaEventElapsedTime(&m, e0, e1), "cudaEventElapsedTime");
        if (i >= 2) ms.push_back(m);
      }
    } catch (const Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
    const double m = median(ms);
    copy_gbps = 2.0 * static_cast<double>(bytes) / (m * 1e6);
    std::printf("d2d_copy_1GiB,cuda,%.4f,%.0f GB/s\n", m, copy_gbps);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cudaFree(a), cudaFree(b);
  }
  for (const char* group : {"bert_", "llama_"})
    if (only.rfind(group, 0) == 0) g_case = only;
  auto want = [&](const std::string& n) {
    return only.empty() || n.find(only) != std::string::npos || (!g_case.empty() && only.rfind(n, 0) == 0);
  };
  try {
    if (want("gemm")) {
      bench_gemm(4096, DType::BF16, Precision::Fp32);
      bench_gemm(8192, DType::BF16, Precision::Fp32);
      bench_gemm(4096, DType::F32, Precision::Fp32);
      bench_gemm(4096, DType::F32, Precision::Tf32);
      bench_gemm(4096, DType::F16, Precision::Fp32);
      bench_gemm(8192, DType::F16, Precision::Fp32);
    }
    if (want("gemv"))
      for (DType t : {DType::BF16, DType::F32}) {
        bench_gemv(4096, 4096, t);
        bench_gemv(4096, 14336, t);
        bench_gemv(14336, 4096, t);
        // The Llama decode benchmark's products: QKV, O, gate+up, down.
        bench_gemv(2048, 3072, t);
        bench_gemv(2048, 2048, t);
        bench_gemv(2048, 11264, t);
        bench_gemv(5632, 2048, t);
      }
    // CUDA and Vulkan run DequantMatMul (WebGPU does not claim it). Decode rows (1, 8) and a
    // prefill chunk (128: Vulkan's tiled kernel).
    if (want("dequant") && g_device != Device::WebGpu)
      for (QuantFormat f : {QuantFormat::Q4_0, QuantFormat::Q8_0, QuantFormat::Q4_K, QuantFormat::Q6_K}) {
        bench_dequant(f, 1, 4096, 4096, DType::F16);
        bench_dequant(f, 1, 4096, 14336, DType::F16);
        bench_dequant(f, 8, 4096, 4096, DType::F16);
        bench_dequant(f, 128, 4096, 4096, DType::F16);
      }
    // Prefill-sized products with f32 x: the TF32 tensor-core path against the f32 decoder.
    if ((want("dequant") || want("prefill")) && g_device == Device::Cuda)
      for (QuantFormat f : {QuantFormat::Q4_0, QuantFormat::Q4_K, QuantFormat::BF16})
        for (int64_t m : {16, 64, 512})
          for (int64_t rows : {int64_t{-1}, int64_t{0}}) bench_dequant(f, m, 4096, 4096, DType::F32, rows);
    if (want("attn")) {
      for (DType t : {DType::BF16, DType::F16}) {
        bench_attention(4, 32, 2048, 128, t);
        bench_attention(4, 32, 2048, 64, t);
      }
    }
    if (want("rows")) {
      bench_rows("layernorm", 16384, 4096, DType::BF16);
      bench_rows("softmax", 16384, 4096, DType::BF16);
      bench_rows("layernorm", 16384, 4096, DType::F32);
    }
    if (want("bert"))
      for (DType t : {DType::BF16, DType::F16, DType::F32})
        for (int64_t b : {1, 32}) bench_bert(b, t);
    // "llama" runs both; "decode" / "prefill" one of them.
    for (DType t : {DType::BF16, DType::F32}) {
      if (want("llama") || want("decode")) bench_llama_decode(511, t, copy_gbps);
      if (want("llama") || want("prefill")) bench_llama_prefill(512, t);
    }
    if (want("llama") || want("prefill")) bench_llama_prefill(512, DType::F16);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
#endif
}
