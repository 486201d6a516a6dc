// MatMul and FusedMatMulBiasAct. Skinny products (decode) run on the split-K GEMV kernel with the
// whole epilogue (and an absorbed RmsNorm / SwiGLU prologue) fused; the rest on cuBLASLt, whose
// epilogue takes the bias, tanh-GELU and a residual without activation; any other activation
// (ReLU, whose cuBLASLt form maps NaN to 0; exact-erf GELU, SiLU, ...), a scalar bias or a
// residual after an activation runs in one fused elementwise kernel over the product, in place.
#include <atomic>
#include <cstdlib>

#include "backends/cuda/cuda_types.h"
#include "backends/cuda/elementwise_codegen.h"
#include "codegen/elementwise.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/gemv_packed.h"
#include "backends/cuda/kernels/mma.h"
#include "backends/cuda/launch.h"
#include "backends/cuda/lower.h"
#include "backends/cuda/status.h"
#include "rlx/error.h"

namespace rlx::cuda {
namespace {

struct Epilogue {
  GemmEpilogue lt = GemmEpilogue::None;
  bool add_c = false;  // cuBLASLt adds the residual (its C input, beta = 1)
  // Applied after the GEMM when non-empty (codegen::matmul_epilogue_chain: x0 = C, then the scalar bias when
  // chain_uses_bias, then the residual when chain_uses_residual).
  std::vector<RegionStep> chain;
  bool chain_uses_bias = false, chain_uses_residual = false;
};

// cuBLASLt's epilogue takes a bias vector and tanh-GELU, and adds C before it (so a
// residual only without an activation); whatever it cannot do runs in one fused kernel after it.
Epilogue choose_epilogue(int64_t bias_len, int64_t n, std::optional<ActKind> act, bool residual) {
  Epilogue e;
  const bool vec_bias = bias_len > 0 && bias_len == n;
  const bool scalar_bias = bias_len > 0 && !vec_bias;
  // cuBLASLt's ReLU epilogue is max(x, 0), which turns NaN into 0; the standalone Relu keeps
  // NaN (and -0.0), so ReLU runs in the elementwise chain (float_activation_expr) instead.
  const bool lt_act = !act || *act == ActKind::GeluApprox;
  if (vec_bias) e.lt = GemmEpilogue::Bias;
  if (!scalar_bias && !act) {
    e.add_c = residual;
    return e;
  }
  if (!scalar_bias && lt_act && !residual) {
    e.lt = vec_bias ? GemmEpilogue::BiasGeluTanh : GemmEpilogue::GeluTanh;
    return e;
  }
  e.chain = codegen::matmul_epilogue_chain(scalar_bias, act, residual);
  e.chain_uses_bias = scalar_bias;
  e.chain_uses_residual = residual;
  return e;
}

// f64 products: no cuBLASLt epilogue; a residual alone is C, anything else the chain.
Epilogue f64_epilogue(int64_t bias_len, std::optional<ActKind> act, bool residual) {
  Epilogue e;
  if (bias_len == 0 && !act) {
    e.add_c = residual;
    return e;
  }
  e.chain = codegen::matmul_epilogue_chain(bias_len > 0, act, residual);
  e.chain_uses_bias = bias_len > 0;
  e.chain_uses_residual = residual;
  return e;
}

}  // namespace

namespace {

// Columns per block of the GEMV kernel (TILE): lanes per row times elements per 16 bytes.
int64_t gemv_tile(const GemvConfig& c) { return c.lanes_per_row * static_cast<int64_t>(16 / dtype_size(c.t)); }

}  // namespace

namespace {

std::atomic<uint64_t> g_vec_a{0};
std::atomic<uint64_t> g_tensor_core{0};
std::atomic<uint64_t> g_evict_first{0};
std::atomic<uint64_t> g_weight_prefetches{0};

std::string flag(bool b) { return b ? "1" : "0"; }

// The #defines both GEMV kernels take: element and row counts, epilogue and prologue.
std::string gemv_common_defines(const GemvConfig& c) {
  const std::string a = c.act ? float_activation_expr(*c.act, "(x)") : "(x)";
  return "#define VW " + std::to_string(16 / dtype_size(c.t)) + "\n#define MR " + std::to_string(c.rows) +
         "\n#define HAS_BIAS " + flag(c.bias > 0) + "\n#define BIAS_SCALAR " + flag(c.bias == 1) +
         "\n#define ACT(x) " + a + "\n#define HAS_RES " + flag(c.residual) + "\n#define PRO " +
         std::to_string(c.prologue) + "\n#define HAS_PB " + flag(c.has_beta) + "\n#define GATE_FIRST " +
         flag(c.gate_first) + "\n#define EVF " + flag(c.evict_first) + "\n";
}

}  // namespace

std::string gemv_source(const GemvConfig& c) {
  if (c.lanes_per_row < 1 || c.lanes_per_row > 32 || (c.lanes_per_row & (c.lanes_per_row - 1)) != 0)
    throw Error("CUDA GEMV: lanes per row must be a power of two in [1, 32], got " + std::to_string(c.lanes_per_row));
  int64_t tpo = 1;  // threads per output of the split reduction
  while (tpo < 32 && 2 * tpo * c.rows * gemv_tile(c) <= 256) tpo *= 2;
  const std::string defs = gemv_common_defines(c) + "#define LPR " + std::to_string(c.lanes_per_row) +
                           "\n#define TPO " + std::to_string(tpo) + "\n#define L2PF " + flag(c.l2_prefetch) +
                           "\n#define W_STATIC " + flag(c.w_static) + "\n#define STAGE " + flag(c.stage_rows) + "\n";
  return kernel_source(ksrc::kGemv, {{"T", storage_type(c.t)}, {"B", storage_type(c.bias_t)}}, defs);
}

std::string gemv_packed_source(const GemvConfig& c, int64_t warps, int64_t wpr) {
  if (c.tensor_cores) {
    if (c.t != DType::F16 && c.t != DType::BF16)
      throw Error(std::string("CUDA packed GEMV: the tensor-core kernel takes f16 or bf16, got ") + dtype_name(c.t));
    if (warps < 1 || warps > 32 || wpr < 1 || warps % wpr != 0 || (wpr > 1 && warps / wpr > 15))
      throw Error("CUDA packed GEMV: expected 1 to 32 warps per block and a divisor of it per tile row (at most 15 "
                  "groups when above 1), got " + std::to_string(warps) + " and " + std::to_string(wpr));
  } else {
    const bool wpr_pow2 = wpr >= 1 && (wpr & (wpr - 1)) == 0;
    if (warps < 1 || warps > 32 || !wpr_pow2 || warps % wpr != 0)
      throw Error("CUDA packed GEMV: expected 1 to 32 warps per block and a power of two dividing it per row, got " +
                  std::to_string(warps) + " and " + std::to_string(wpr));
  }
  std::string defs = gemv_common_defines(c) + "#define WARPS " + std::to_string(warps) + "\n#define WPR " +
                     std::to_string(wpr) + "\n#define G_STATIC " + flag(c.gain_static) + "\n#define VEC_A " +
                     flag(c.vec_a) + "\n";
  if (c.tensor_cores) defs += "#define TC 1\n#define BF16 " + flag(c.t == DType::BF16) + "\n" + ksrc::kMma16816;
  return kernel_source(ksrc::kGemvPacked, {{"T", storage_type(c.t)}, {"B", storage_type(c.bias_t)}}, defs);
}

uint64_t gemv_vec_a_launches() { return g_vec_a.load(std::memory_order_relaxed); }
uint64_t gemv_tensor_core_launches() { return g_tensor_core.load(std::memory_order_relaxed); }

bool gemv_evict_first(int64_t knob, size_t weight_bytes, size_t l2_bytes) {
  return knob >= 0 ? knob == 1 : weight_bytes > l2_bytes;
}

uint64_t gemv_evict_first_launches() { return g_evict_first.load(std::memory_order_relaxed); }

size_t gemv_prefetch_budget(bool after_other, int64_t knob_mb, size_t l2_bytes) {
  if (knob_mb >= 0) return static_cast<size_t>(knob_mb) << 20;
  return after_other ? l2_bytes / 10 * 7 : l2_bytes / 8;
}

uint64_t gemv_weight_prefetches() { return g_weight_prefetches.load(std::memory_order_relaxed); }

std::string gemv_pack_source(size_t elem_bytes, bool tiles) {
  if (tiles && elem_bytes != 2)
    throw Error("CUDA GEMV packing: tensor-core tiles take 2-byte elements, got " + std::to_string(elem_bytes));
  return kernel_source(ksrc::kGemvPack, {{"E", word_type(elem_bytes)}}, std::string("#define TILES ") + flag(tiles) + "\n");
}

namespace {

}  // namespace

// Rows of a skinny product (plan::skinny_rows, at most 4 rows against one shared, 16-byte
// aligned row-major weight) that the GEMV kernels take, or 0 when the step does not qualify. N
// must be a whole number of 16-byte vectors, except for a leaf weight, which the packed kernel
// may take at any N (lower_gemv falls back to the general path when it cannot).
int64_t gemv_rows(const plan::Step& st, Precision precision) {
  const int64_t rows = plan::skinny_rows(st);
  if (rows == 0) return 0;
  const auto& g = std::get<plan::MatMulGeom>(st.geom);
  const plan::TensorRef& c = st.out.at(0);
  const DType t = c.dtype;
  if (st.in.at(0).dtype != t || st.in.at(1).dtype != t || !cuda_float(t) || c.numel() == 0) return 0;
  if (t == DType::F32 && (precision == Precision::Fp16 || precision == Precision::Bf16)) return 0;
  const int64_t vw = static_cast<int64_t>(16 / dtype_size(t));
  // Arena slots and leaf buffers start 256-byte aligned: the offset decides the alignment.
  const bool leaf_w = st.in.at(1).loc.kind == plan::Location::Kind::Leaf;
  if (rows < 1 || rows > 4 || (g.n % vw != 0 && !leaf_w) || st.in.at(1).loc.offset % 16 != 0) return 0;
  if ((g.k + 2047) / 2048 > 65535) return 0;
  return rows;
}

namespace {

// A's producer computed in the GEMV's prologue (when the variant absorbed it).
struct GemvPrologue {
  const uint8_t *px = nullptr, *pg = nullptr, *pb = nullptr;
  float eps = 0.f;
};

// The configuration both GEMV kernels share: types, rows, epilogue and prologue.
GemvConfig gemv_common(LowerContext& cx, const plan::Step& st, const plan::MatMulGeom& g, int64_t rows,
                       int64_t bias_len, const plan::TensorRef* residual, GemvPrologue& pro) {
  GemvConfig cfg;
  cfg.t = st.out.at(0).dtype;
  cfg.evict_first = gemv_evict_first(cx.knobs().gemv_evict_first().value_or(-1), cx.weight_bytes(), device().l2_bytes);
  cfg.bias_t = bias_len > 0 ? st.in.at(2).dtype : cfg.t;
  cfg.rows = rows;
  cfg.bias = bias_len == 0 ? 0 : (bias_len == g.n ? 2 : 1);
  cfg.act = g.activation;
  cfg.residual = residual != nullptr;
  if (const plan::Step* p = cx.absorbed_producer(st)) {
    pro.px = cx.ptr(p->in.at(0));
    if (const auto* rms = std::get_if<ops::RmsNorm>(&p->op)) {
      cfg.prologue = 1;
      pro.pg = cx.ptr(p->in.at(1));
      cfg.has_beta = p->in.size() > 2;
      pro.pb = cfg.has_beta ? cx.ptr(p->in.at(2)) : nullptr;
      pro.eps = static_cast<float>(rms->eps);
      cfg.gain_static = true;  // read by the packed kernel only
      for (size_t i = 1; i < p->in.size(); ++i)
        cfg.gain_static = cfg.gain_static && p->in[i].loc.kind == plan::Location::Kind::Leaf;
    } else {
      cfg.prologue = 2;
      cfg.gate_first = std::get<ops::FusedSwiGLU>(p->op).gate_first;
    }
  }
  return cfg;
}

// Skinny products against a param or constant weight (RLX_GEMV_PACKED=0: off) run on the
// packed-weight kernel: the variant keeps the weight transposed, so each output column is one
// contiguous row. Returns false (nothing lowered) when the weight is computed or an input, or A's
// rows do not fit in shared memory.
bool lower_gemv_packed(LowerContext& cx, const plan::Step& st, const plan::MatMulGeom& g, GemvConfig cfg,
                       const GemvPrologue& pro, const plan::TensorRef* residual) {
  if (!cx.knobs().gemv_packed()) return false;
  const DeviceInfo& dev = device();
  // f16 / bf16 on the tensor cores (RLX_GEMV_TC=0: the CUDA-core kernel), from sm_80 on.
  const bool tc = (cfg.t == DType::F16 || cfg.t == DType::BF16) && dev.cc_major >= 8 &&
                  cx.knobs().gemv_tc();
  cfg.tensor_cores = tc;
  // Default, measured on the H100 (docs/benchmarks.md): 32 warps for the tensor-core kernel
  // (session 19) and for f32, whose longer rows gain more from the bytes in flight of a whole
  // multiprocessor (1.375 against 1.402 ms with 24); 24 for the CUDA-core kernel on 2-byte types,
  // whose blocks leave room for the previous kernel's small blocks, so the early weight loads
  // start before those finish (Llama decode bf16 0.950 -> 0.905 ms).
  const int64_t warps = cx.knobs().gemv_packed_warps().value_or(cfg.t == DType::F32 || tc ? 32 : 24);
  const int64_t es = static_cast<int64_t>(dtype_size(cfg.t)), vw = 16 / es, kq = tc ? 16 : vw;
  const int64_t ldk = (g.k + kq - 1) / kq * kq;
  const int64_t sms = dev.sm_count;
  int64_t wpr = 1, blocks = 1;
  if (tc) {
    // Warps per tile row (RLX_GEMV_TC_SPLIT), default the whole block: the block reads one tile
    // row (a contiguous 16 x ldk piece of the weight) at a time, its warps each a slice of it.
    wpr = cx.knobs().gemv_tc_split().value_or(warps);
    if (warps % wpr != 0 || (wpr > 1 && warps / wpr > 15))
      throw Error("RLX_GEMV_TC_SPLIT=" + std::to_string(wpr) + ": expected a divisor of the " + std::to_string(warps) +
                  " warps per block (RLX_GEMV_PACKED_WARPS) that leaves at most 15 groups of warps");
    const int64_t groups = warps / wpr;
    blocks = std::min(sms, ((g.n + 15) / 16 + groups - 1) / groups);
  } else {
    // Warps per row: while every warp still gets a row and a slice keeps a word per lane, share
    // rows so that small products use the whole GPU; then a single round.
    const int64_t kv = ldk / vw;
    while (warps % (2 * wpr) == 0 && g.n * 2 * wpr <= sms * warps && kv / (2 * wpr) >= 32) wpr *= 2;
    const int64_t groups = warps / wpr;
    blocks = wpr > 1 ? (g.n + groups - 1) / groups : std::min(sms, (g.n + groups - 1) / groups);
  }
  // A's rows, and the RmsNorm's gain and bias; with split tile rows, the slices' sums after them
  // (16-byte aligned; 2 rounds x warps x 16 columns x A's rows, f32).
  size_t smem = static_cast<size_t>((cfg.rows * ldk + (cfg.prologue == 1 ? 2 * g.k : 0)) * es);
  if (tc && wpr > 1) smem = (smem + 15) / 16 * 16 + static_cast<size_t>(2 * warps * 16 * cfg.rows) * sizeof(float);
  if (smem + 4096 > dev.smem_per_block_optin) return false;
  const std::string what = step_label(st);
  uint8_t* pw = cx.packed_weight(st.in.at(1), g.k, g.n, ldk, tc, what);
  if (!pw) return false;
  const int64_t packed_rows = tc ? (g.n + 15) / 16 * 16 : g.n;
  // A (or the prologue's input) in 16-byte words when its rows allow (RLX_GEMV_VEC_A=0: element by
  // element); the tensor-core kernel's rows of A are padded to whole tiles otherwise.
  const void* a_src = cfg.prologue ? static_cast<const void*>(pro.px) : static_cast<const void*>(cx.ptr(st.in.at(0)));
  cfg.vec_a = g.k % kq == 0 && pointer_alignment(a_src) >= 16 && cx.knobs().gemv_vec_a();
  if (cfg.vec_a) g_vec_a.fetch_add(1, std::memory_order_relaxed);
  if (tc) g_tensor_core.fetch_add(1, std::memory_order_relaxed);
  const CUfunction fn = get_kernel("gemv_packed", gemv_packed_source(cfg, warps, wpr));
  if (cfg.evict_first) g_evict_first.fetch_add(1, std::memory_order_relaxed);
  allow_dynamic_smem(fn, smem, 16 * 1024);  // up to 16 KB of static shared memory beside it
  // The multiprocessor's shared-memory share while a block runs (percent; RLX_GEMV_CARVEOUT, -1:
  // the driver's choice). Default, measured on the H100 (docs/benchmarks.md, sessions 12 and 16):
  // 80% for f32 (Llama decode fp32 1.079 against 1.092 ms), the driver's choice for 2-byte types
  // (bf16 0.681 at 80% against 0.671 ms).
  const int64_t carveout = cx.knobs().gemv_carveout().value_or(cfg.t == DType::F32 ? 80 : -1);
  if (carveout >= 0)
    RLX_CU_CHECK(driver().func_set_attribute(fn, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                             static_cast<int>(carveout)));
  auto k1 = std::make_shared<KernelLaunch>(what + " gemv_packed", fn, static_cast<unsigned>(blocks),
                                           static_cast<unsigned>(warps * 32), static_cast<unsigned>(smem));
  k1->pdl_prefetch();  // its first weight loads go before the wait
  k1->arg(static_cast<const uint8_t*>(cx.ptr(st.in.at(0)))).arg(static_cast<const uint8_t*>(pw))
      .arg(static_cast<const uint8_t*>(cfg.bias > 0 ? cx.ptr(st.in.at(2)) : nullptr))
      .arg(static_cast<const uint8_t*>(residual ? cx.ptr(*residual) : nullptr))
      .arg(cx.ptr(st.out.at(0))).arg(g.k).arg(ldk).arg(g.n).arg(pro.px).arg(pro.pg).arg(pro.pb).arg(pro.eps);
  const size_t pf_arg = k1->arg_count();
  k1->arg(static_cast<const uint8_t*>(nullptr)).arg(int64_t{0});  // pf, pf_bytes: set below
  k1->arg(int32_t{0});                                              // early_dependents: likewise
  // The weight stream (decode with weights past the L2): each packed GEMV bulk-prefetches the
  // first part of the next packed GEMV's weight into L2, before its wait. After other work (a
  // decode attention: latency-bound, DRAM nearly idle while this GEMV's early loads take only its
  // own weight) a large part (RLX_GEMV_PREFETCH_MB); right after another GEMV, whose stream
  // keeps DRAM busy, a little (RLX_GEMV_PREFETCH_CHAINED_MB), which hides part of the boundary
  // between the two. Measured on the H100 in docs/benchmarks.md (session 10).
  LowerContext::WeightStream& ws = cx.weight_stream();
  if (ws.tell_next) ws.tell_next(pw, static_cast<size_t>(packed_rows * ldk * es));
  ws.tell_next = nullptr;
  const bool after_other = cx.op_count() != ws.ops_after_gemv;
  const int64_t knob_other = cx.knobs().gemv_prefetch_mb().value_or(-1);
  const int64_t knob_chained = cx.knobs().gemv_prefetch_chained_mb().value_or(-1);
  const size_t budget =
      gemv_prefetch_budget(after_other, after_other ? knob_other : knob_chained, dev.l2_bytes) / 16 * 16;
  if (cfg.evict_first && budget > 0 && dev.cc_major >= 9)
    ws.tell_next = [k1, budget, pf_arg](const uint8_t* next, size_t bytes) {
      k1->set_arg(pf_arg, next);
      k1->set_arg(pf_arg + 1, static_cast<int64_t>(std::min(budget, bytes / 16 * 16)));
      g_weight_prefetches.fetch_add(1, std::memory_order_relaxed);
    };
  cx.add([k1](cudaStream_t s) { k1->launch(s); });
  ws.ops_after_gemv = cx.op_count();
  ws.launch_next_early = [k1, pf_arg] { k1->set_arg(pf_arg + 2, int32_t{1}); };
  return true;
}

// Other skinny products run on the one-launch split-K GEMV kernel with the whole epilogue (and,
// when the variant absorbed the producer of A, its prologue) fused. Returns false (nothing
// lowered) when N is not a whole number of 16-byte vectors and the packed kernel did not take it.
bool lower_gemv(LowerContext& cx, const plan::Step& st, const plan::MatMulGeom& g, int64_t rows, int64_t bias_len,
                const plan::TensorRef* residual) {
  GemvPrologue pro;
  GemvConfig cfg = gemv_common(cx, st, g, rows, bias_len, residual, pro);
  if (lower_gemv_packed(cx, st, g, cfg, pro, residual)) return true;
  const plan::TensorRef& a = st.in.at(0);
  const plan::TensorRef& c = st.out.at(0);
  const DType t = c.dtype;
  const int64_t vw = static_cast<int64_t>(16 / dtype_size(t));
  if (g.n % vw != 0) return false;
  uint8_t* pw = cx.ptr(st.in.at(1));
  const std::string what = step_label(st);
  if (pointer_alignment(pw) < 16) throw Error(what + ": internal: the GEMV weight is not 16-byte aligned");
  // Default, measured on the H100 (docs/benchmarks.md): tiles of 64 columns (bf16/f16 8 lanes,
  // f32 16), so a product of a few MB needs few K splits; from 64 MB of weight on, where the
  // streaming rate outweighs the split reduction, whole 512-byte row pieces (32 lanes).
  const double w_bytes = static_cast<double>(g.k) * static_cast<double>(g.n) * static_cast<double>(dtype_size(t));
  cfg.lanes_per_row = cx.knobs().gemv_lpr().value_or(w_bytes >= 64.0 * (1 << 20) ? 32 : 64 / vw);
  if ((cfg.lanes_per_row & (cfg.lanes_per_row - 1)) != 0)
    throw Error("RLX_GEMV_LPR=" + std::to_string(cfg.lanes_per_row) + ": expected 1, 2, 4, 8, 16 or 32");
  cfg.l2_prefetch = cx.knobs().gemv_l2pf();
  cfg.w_static = st.in.at(1).loc.kind == plan::Location::Kind::Leaf;  // no kernel writes leaves
  const int64_t tile = gemv_tile(cfg);
  const int64_t col_tiles = (g.n + tile - 1) / tile;
  const int64_t target = cx.knobs().gemv_blocks_per_sm() * device().sm_count;
  // K rows per split: a multiple of 32, at most 2048 (its slice of A lives in shared memory).
  int64_t splits = std::clamp<int64_t>((target + col_tiles - 1) / col_tiles, 1, (g.k + 31) / 32);
  int64_t kchunk = std::min<int64_t>(2048, ((g.k + splits - 1) / splits + 31) / 32 * 32);
  splits = (g.k + kchunk - 1) / kchunk;
  float* part = nullptr;
  unsigned* tickets = nullptr;
  if (splits > 1) {
    part = reinterpret_cast<float*>(cx.scratch(static_cast<size_t>(splits * rows * g.n) * 4, what + " split-K partials"));
    tickets = reinterpret_cast<unsigned*>(cx.zeroed_scratch(static_cast<size_t>(col_tiles) * 4, what + " split-K tickets"));
  }
  // xs (then the warps' sums), and with the RmsNorm prologue A's whole rows when they fit.
  cfg.stage_rows = cfg.prologue == 1 && rows * (kchunk + g.k) * 4 <= 64 * 1024;
  const size_t smem = static_cast<size_t>(std::max(rows * (kchunk + (cfg.stage_rows ? g.k : 0)), 8 * rows * tile)) * 4;
  const CUfunction fn = get_kernel("gemv", gemv_source(cfg));
  if (cfg.evict_first) g_evict_first.fetch_add(1, std::memory_order_relaxed);
  allow_dynamic_smem(fn, smem);
  auto k1 = std::make_shared<KernelLaunch>(what + " gemv", fn, static_cast<unsigned>(col_tiles), 256,
                                           static_cast<unsigned>(smem), static_cast<unsigned>(splits));
  if (cfg.w_static) k1->pdl_prefetch();  // its first W loads go before the wait
  else k1->pdl();
  k1->arg(static_cast<const uint8_t*>(cx.ptr(a))).arg(static_cast<const uint8_t*>(pw))
      .arg(static_cast<const uint8_t*>(bias_len > 0 ? cx.ptr(st.in.at(2)) : nullptr))
      .arg(static_cast<const uint8_t*>(residual ? cx.ptr(*residual) : nullptr))
      .arg(cx.ptr(c)).arg(part).arg(tickets).arg(g.k).arg(g.n).arg(kchunk).arg(pro.px).arg(pro.pg).arg(pro.pb)
      .arg(pro.eps);
  cx.add([k1](cudaStream_t s) { k1->launch(s); });
  return true;
}

}  // namespace

void lower_matmul(LowerContext& cx, const plan::Step& st) {
  const auto& g = std::get<plan::MatMulGeom>(st.geom);
  const plan::TensorRef& a = st.in.at(0);
  const plan::TensorRef& b = st.in.at(1);
  const plan::TensorRef& c = st.out.at(0);
  if (a.dtype != b.dtype || a.dtype != c.dtype)
    throw Error(step_label(st) + ": CUDA matmul needs one dtype for both operands and the result");
  const auto* fused = std::get_if<ops::FusedMatMulBiasAct>(&st.op);
  const int64_t bias_len = fused ? g.bias_len : 0;
  const plan::TensorRef* residual = fused && fused->residual ? &st.in.back() : nullptr;
  const Precision prec = cx.options().precision;
  // f32 graphs under the Fp16/Bf16 policy: both operands are converted to the half type on the
  // device every run (params may change) and multiplied with f32 accumulation into f32.
  const bool to_half = a.dtype == DType::F32 && (prec == Precision::Fp16 || prec == Precision::Bf16);
  if (const int64_t rows = gemv_rows(st, prec)) {
    if (lower_gemv(cx, st, g, rows, bias_len, residual)) return;
    // Neither GEMV kernel took it (a weight the packed kernel cannot keep, at an N the split-K
    // kernel cannot tile): the producer it would have computed in its prologue runs first, into
    // the slot the memory plan gave its result, and the general path follows.
    if (const plan::Step* p = cx.absorbed_producer(st)) lower_step(cx, *p);
  } else if (cx.absorbed_producer(st)) {
    throw Error(step_label(st) + ": internal: a GEMV prologue on a non-GEMV product");
  }
  // f64: cuBLASLt's epilogues are for the other types, so bias and activation run as the
  // elementwise chain (in double) and a residual as C (beta = 1).
  const Epilogue epi = c.dtype == DType::F64 ? f64_epilogue(bias_len, g.activation, residual != nullptr)
                                             : choose_epilogue(bias_len, g.n, g.activation, residual != nullptr);
  uint8_t* pa = cx.ptr(a);
  uint8_t* pb = cx.ptr(b);
  DType ab = a.dtype;
  if (to_half && c.numel() > 0) {
    ab = prec == Precision::Fp16 ? DType::F16 : DType::BF16;
    const std::vector<RegionStep> cast{{RegionStepKind::Cast, 0, ab, {0}}};
    auto convert = [&](const plan::TensorRef& r, const char* which) {
      uint8_t* dst = cx.scratch(static_cast<size_t>(r.numel()) * 2, step_label(st) + " " + which + " in half");
      plan::ElementwiseGeom eg;
      eg.out_dims = {r.numel()};
      eg.numel = r.numel();
      eg.in_strides = {{1}};
      add_elementwise(cx, cast, {DType::F32}, ab, eg, dst, {cx.ptr(r)}, step_label(st) + " " + which + " to half");
      return dst;
    };
    pa = convert(a, "lhs");
    pb = convert(b, "rhs");
  }
  uint8_t* pc = cx.ptr(c);
  const uint8_t* pbias = bias_len > 0 ? cx.ptr(st.in.at(2)) : nullptr;
  const uint8_t* pres = residual ? cx.ptr(*residual) : nullptr;
  if (c.numel() == 0) return;
  const size_t es = dtype_size(ab);
  const size_t ces = dtype_size(c.dtype);

  GemmProblem p;
  p.dtype = c.dtype;
  p.ab_dtype = ab;
  p.m = g.m, p.n = g.n, p.k = g.k;
  p.trans_a = g.trans_a, p.trans_b = g.trans_b;
  p.lda = g.lda, p.ldb = g.ldb, p.ldc = g.ldc;
  p.precision = prec;
  p.epilogue = epi.lt;
  p.add_c = epi.add_c;
  p.align_bias = pbias ? pointer_alignment(pbias) : 256;
  const bool strided = g.a_stride >= 0 && g.b_stride >= 0;
  if (g.k == 0) throw Error(step_label(st) + ": CUDA matmul with an empty contracting dim (k = 0) is not supported");
  if (strided) {
    p.batch = g.batch;
    p.a_stride = g.a_stride, p.b_stride = g.b_stride, p.c_stride = g.m * g.n;
    p.align_a = pointer_alignment(pa), p.align_b = pointer_alignment(pb);
    p.align_c = std::min(pointer_alignment(pc), epi.add_c ? pointer_alignment(pres) : 256);
    GemmPlan& plan = cx.gemm(p, step_label(st));
    void* ws = cx.gemm_workspace();
    cx.add([&plan, pa, pb, pc, pbias, ws, pres](cudaStream_t s) { plan.run(s, pa, pb, pc, pbias, ws, pres); });
  } else {
    // Batch dims that do not collapse to one stride: one GEMM per batch item.
    std::vector<std::array<const uint8_t*, 4>> items;
    int align_a = 256, align_b = 256, align_c = 256;
    for (int64_t i = 0; i < g.batch; ++i) {
      int64_t t = i, oa = 0, ob = 0;
      for (int64_t d = static_cast<int64_t>(g.batch_dims.size()) - 1; d >= 0; --d) {
        const int64_t idx = t % g.batch_dims[static_cast<size_t>(d)];
        t /= g.batch_dims[static_cast<size_t>(d)];
        oa += idx * g.a_batch_strides[static_cast<size_t>(d)];
        ob += idx * g.b_batch_strides[static_cast<size_t>(d)];
      }
      items.push_back({pa + oa * static_cast<int64_t>(es), pb + ob * static_cast<int64_t>(es),
                       pc + i * g.m * g.n * static_cast<int64_t>(ces),
                       pres ? pres + i * g.m * g.n * static_cast<int64_t>(ces) : nullptr});
      align_a = std::min(align_a, pointer_alignment(items.back()[0]));
      align_b = std::min(align_b, pointer_alignment(items.back()[1]));
      align_c = std::min(align_c, pointer_alignment(items.back()[2]));
      if (epi.add_c) align_c = std::min(align_c, pointer_alignment(items.back()[3]));
    }
    p.align_a = align_a, p.align_b = align_b, p.align_c = align_c;
    GemmPlan& plan = cx.gemm(p, step_label(st));
    void* ws = cx.gemm_workspace();
    cx.add([&plan, items, pbias, ws](cudaStream_t s) {
      for (const auto& it : items) plan.run(s, it[0], it[1], const_cast<uint8_t*>(it[2]), pbias, ws, it[3]);
    });
  }
  if (!epi.chain.empty()) {
    plan::ElementwiseGeom eg;
    const int64_t rows = c.numel() / g.n;
    eg.out_dims = {rows, g.n};
    eg.numel = c.numel();
    eg.in_strides.push_back({g.n, 1});
    std::vector<DType> dts{c.dtype};
    std::vector<const uint8_t*> ins{pc};
    if (epi.chain_uses_bias) {
      eg.in_strides.push_back({0, bias_len == g.n ? 1 : 0});  // a vector bias only in f64's chain
      dts.push_back(st.in.at(2).dtype);
      ins.push_back(pbias);
      eg.contiguous = false;
    }
    if (epi.chain_uses_residual) {
      eg.in_strides.push_back({g.n, 1});
      dts.push_back(residual->dtype);
      ins.push_back(pres);
    }
    add_elementwise(cx, epi.chain, dts, c.dtype, eg, pc, ins, step_label(st) + " epilogue");
  }
}

}  // namespace rlx::cuda
