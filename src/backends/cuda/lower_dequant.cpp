// DequantMatMul on CUDA: x (..., M, K) f32/f16/bf16 @ dequant(w)^T with w the raw GGUF blocks,
// one warp per output feature.
// - Decode (M <= 8) of Q4_0 / Q8_0 / Q4_K / Q6_K (kernels/dequant_dp4a.h): x quantized to 8-bit
//   blocks once, then integer dot products (__dp4a) on the weight words; knob cuda_dequant_dp4a.
// - Prefill (f32 x of at least cuda_dequant_gemm_rows rows): the weight decoded to f32 into a
//   shared scratch, chunks of rows at a time, each chunk multiplied by cuBLASLt: block formats on
//   the TF32 tensor cores (x and the decoded weights rounded to TF32, f32 sums), f16 / bf16
//   weights in f32 unless CompileOptions::precision asks otherwise.
// - Decode of the f16 / bf16 formats (M <= 8): dequant_gemv_half, coalesced 16-byte weight words.
// - Otherwise (kernels/dequant.h): the weights decoded to f32 in registers as they stream; decode
//   reads them once, larger M walks them once per chunk of 8 rows.
// Decode products of one x planned as a group (plan::plan_dequant_gemv_groups, knob
// cuda_dequant_groups) run as one launch of these kernels, which may also compute x's RmsNorm
// (in quantize_x_q8 or the GEMV's prologue), add a residual, or write silu(gate) * up.
#include <algorithm>
#include <atomic>
#include <string>

#include "backends/cuda/cuda_types.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/kernels/dequant.h"
#include "backends/cuda/kernels/dequant_dp4a.h"
#include "backends/cuda/select_lower.h"
#include "rlx/error.h"

namespace rlx::cuda {

namespace {
constexpr int64_t kDequantWarps = 4;  // output features (warps) per block
// Most rows of x the integer-dot and 16-bit decode kernels take (the generic decoder's chunk).
constexpr int64_t kDp4aRows = 8;
static_assert(kDp4aRows == kDequantGroupLimits.max_rows, "the groups' rows are the decode kernels'");

// The 16-bit float weight formats (2 bytes a weight, no blocks).
bool half_format(QuantFormat f) { return f == QuantFormat::F16 || f == QuantFormat::BF16; }

// Lane tasks per weight block of the integer-dot kernel; 0: the format has none.
int dp4a_tasks(QuantFormat f) {
  switch (f) {
    case QuantFormat::Q4_0:
    case QuantFormat::Q8_0: return 1;
    case QuantFormat::Q4_K: return 4;
    case QuantFormat::Q6_K: return 8;
    default: return 0;
  }
}
// The defines of kernels/dequant.h and kernels/dequant_dp4a.h: the format, its block, rows per
// chunk, warps per block, then `more`.
std::string format_defines(QuantFormat f, int64_t rows, const std::string& more) {
  const QuantBlock blk = quant_block(f);
  return "#define FMT " + std::to_string(static_cast<int>(f)) + "\n#define QE " + std::to_string(blk.elements) +
         "\n#define QB " + std::to_string(blk.bytes) + "\n#define MR " + std::to_string(rows) + "\n#define WARPS " +
         std::to_string(kDequantWarps) + "\n" + more;
}
std::string xvec_define(bool xvec) { return std::string("#define XVEC ") + (xvec ? "1" : "0") + "\n"; }
std::string fusion_defines(DequantFusion fu) {
  return std::string("#define NORM ") + (fu.norm ? "1" : "0") + "\n#define SWIGLU " + (fu.swiglu ? "1" : "0") + "\n";
}
}  // namespace

std::string quantize_x_q8_source(DType t, bool norm) {
  return kernel_source(ksrc::kQuantizeXQ8, {{"T", storage_type(t)}}, std::string("#define NORM ") + (norm ? "1" : "0") + "\n");
}

std::string dequant_gemv_dp4a_source(QuantFormat f, DType t, int64_t rows, bool swiglu) {
  const int tasks = dp4a_tasks(f);
  if (tasks == 0) throw Error(std::string("dequant_gemv_dp4a: no integer-dot kernel for ") + EnumNames<QuantFormat>::names[static_cast<size_t>(f)]);
  return kernel_source((std::string(ksrc::kDequantParts) + ksrc::kDequantGemvDp4a).c_str(), {{"T", storage_type(t)}},
                       format_defines(f, rows, "#define UPB " + std::to_string(tasks) + "\n" + fusion_defines({false, swiglu})));
}

bool claims_node_dequant(const Graph& g, const Node& n, std::string* why) {
  const DType t = g.shape(n.inputs.at(0)).dtype;
  if (!cuda_float(t)) {
    if (why) *why = std::string("CUDA dequant_matmul takes f32/f16/bf16 activations, not ") + dtype_name(t);
    return false;
  }
  return true;
}

std::string dequant_gemv_source(QuantFormat f, DType t, int64_t rows, bool xvec, DequantFusion fu) {
  return kernel_source((std::string(ksrc::kDequantParts) + ksrc::kDequantGemv).c_str(), {{"T", storage_type(t)}},
                       format_defines(f, rows, xvec_define(xvec) + fusion_defines(fu)));
}

std::string dequant_gemv_half_source(QuantFormat f, DType t, int64_t rows, bool xvec, DequantFusion fu) {
  if (!half_format(f))
    throw Error(std::string("dequant_gemv_half: takes the f16 / bf16 formats, not ") +
                EnumNames<QuantFormat>::names[static_cast<size_t>(f)]);
  return kernel_source((std::string(ksrc::kDequantParts) + ksrc::kDequantGemv + ksrc::kDequantGemvHalf).c_str(),
                       {{"T", storage_type(t)}}, format_defines(f, rows, xvec_define(xvec) + fusion_defines(fu)));
}

std::string dequant_rows_source(QuantFormat f, DType out) {
  if (!cuda_float(out)) throw Error(std::string("dequant_rows: decodes into f32, f16 or bf16, not ") + dtype_name(out));
  return kernel_source((std::string(ksrc::kDequantParts) + ksrc::kDequantGemv + ksrc::kDequantRows).c_str(),
                       {{"T", "float"}, {"OT", storage_type(out)}},
                       format_defines(f, 1, xvec_define(false) + "#define OUT_F32 " + (out == DType::F32 ? "1" : "0") + "\n"));
}

namespace {
constexpr int64_t kDequantScratch = int64_t{32} << 20;  // bytes of decoded weight rows at a time

// y[m, n] = x[m, k] @ dequant(w)^T: per chunk of weight rows, dequant_rows into the shared
// scratch (f32 for f32 x, else x's 16-bit type), then one cuBLASLt GEMM writing the chunk's
// columns of y (TF32 for f32 x; 16-bit x: the tensor cores' 16-bit products, f32 sums).
void lower_dequant_gemm(LowerContext& cx, const plan::Step& st, QuantFormat f, int64_t m, int64_t k, int64_t n,
                        int64_t row_bytes) {
  const std::string what = step_label(st);
  const plan::TensorRef &x = st.in.at(0), &w = st.in.at(1), &y = st.out.at(0);
  const DType t = x.dtype;
  const int64_t es = static_cast<int64_t>(dtype_size(t));
  const int64_t row_scratch = k * es;
  const int64_t chunk = std::min(n, std::max<int64_t>(64, kDequantScratch / row_scratch / 64 * 64));
  uint8_t* ws = cx.shared_scratch(static_cast<size_t>(chunk * row_scratch), "decoded DequantMatMul weights");
  const CUfunction fn = get_kernel("dequant_rows", dequant_rows_source(f, t));
  const uint8_t* xp = cx.ptr(x);
  const unsigned char* wp = cx.ptr(w);
  uint8_t* yp = cx.ptr(y);
  for (int64_t n0 = 0; n0 < n; n0 += chunk) {
    const int64_t rows = std::min(chunk, n - n0);
    const int64_t threads = rows * (k / 32);
    if ((threads + 255) / 256 > 0x7fffffff) throw Error(what + ": CUDA dequant_matmul's weight chunk is too large");
    auto l = std::make_shared<KernelLaunch>(what + " (decode weights)", fn, static_cast<unsigned>((threads + 255) / 256), 256u);
    l->arg(wp).arg(static_cast<void*>(ws)).arg(static_cast<long long>(n0)).arg(static_cast<long long>(rows))
        .arg(static_cast<long long>(k)).arg(static_cast<long long>(row_bytes));
    push_launch(cx, l);
    GemmProblem p;
    p.dtype = p.ab_dtype = t;
    p.m = m, p.n = rows, p.k = k;
    p.trans_b = true;
    p.lda = k, p.ldb = k, p.ldc = n;
    // Block formats: TF32 (their weights' own rounding dominates; decode already rounds x to 8
    // bits). F16 / BF16 weights promise f32 math on the 16-bit values: strict f32 unless the
    // compile asks for another precision.
    p.precision = t != DType::F32 || (half_format(f) && cx.options().precision == Precision::Fp32) ? Precision::Fp32 : Precision::Tf32;
    uint8_t* yc = yp + n0 * es;
    p.align_a = pointer_alignment(xp), p.align_b = pointer_alignment(ws), p.align_c = pointer_alignment(yc);
    GemmPlan& plan = cx.gemm(p, what);
    void* gws = cx.gemm_workspace();
    cx.add([&plan, xp, ws, yc, gws](cudaStream_t s) { plan.run(s, xp, ws, yc, nullptr, gws); });
  }
}
}  // namespace

namespace {
std::atomic<uint64_t> g_group_launches{0}, g_group_products{0}, g_group_norms{0}, g_group_residuals{0},
    g_group_swiglus{0};

// The host image of the decode kernels' DqParts (kernels/dequant.h).
struct DqPartsArg {
  const void* w[3] = {};
  void* y[3] = {};
  long long end[3] = {};
  const void* res = nullptr;
};
static_assert(sizeof(DqPartsArg) == 80, "DqPartsArg mirrors the kernels' DqParts");

// One launch of the decode kernels for the products of group `g` (or `st` alone), M <= 8 rows
// of x (any M for the generic decoder without a group).
void lower_dequant_gemv(LowerContext& cx, const plan::Step& st, const LowerContext::DequantGroup* g) {
  const auto& op = std::get<ops::DequantMatMul>(st.op);
  const std::string what = step_label(st);
  const plan::TensorRef& x = st.in.at(0);
  const int64_t k = op.k, m = x.numel() / k, row_bytes = st.in[1].dims[1];
  std::vector<const plan::Step*> parts_of = g ? g->members : std::vector<const plan::Step*>{&st};
  const bool swiglu = g && g->swiglu, norm = g && g->norm;
  if (parts_of.empty() || parts_of.size() > 3 || (swiglu && parts_of.size() != 2) || (g && m > kDp4aRows))
    throw Error(what + ": internal: a CUDA DequantMatMul group the decode kernels cannot take");
  if (swiglu && g->gate == 1) std::swap(parts_of[0], parts_of[1]);
  DqPartsArg parts;
  int64_t features = 0;
  bool w16 = row_bytes % 16 == 0, w4 = row_bytes % 4 == 0, w2 = row_bytes % 2 == 0;
  for (size_t p = 0; p < parts_of.size(); ++p) {
    const plan::Step& ps = *parts_of[p];
    const unsigned char* w = cx.ptr(ps.in.at(1));
    const auto a = reinterpret_cast<uintptr_t>(w);
    w16 = w16 && a % 16 == 0, w4 = w4 && a % 4 == 0, w2 = w2 && a % 2 == 0;
    parts.w[p] = w;
    parts.y[p] = cx.ptr(ps.out.at(0));
    features += ps.in[1].dims[0];
    parts.end[p] = features;
  }
  for (size_t p = parts_of.size(); p < 3; ++p) parts.end[p] = features;
  if (swiglu) {  // one result of the gate's N features
    features = parts.end[0];
    parts.y[0] = cx.ptr(g->swiglu->out.at(0));
    parts.y[1] = nullptr;
  }
  if (g && g->residual_add) {
    const plan::Step& add = *g->residual_add;
    parts.y[0] = cx.ptr(add.out.at(0));
    parts.res = cx.ptr(add.in.at(add.in.at(0).value == st.out.at(0).value ? 1 : 0));
  }
  // x as the kernels read it: the norm's input when they compute x's RmsNorm.
  const plan::TensorRef& xsrc = norm ? g->norm->in.at(0) : x;
  const uint8_t* xp = cx.ptr(xsrc);
  const void* gain = norm ? static_cast<const void*>(cx.ptr(g->norm->in.at(1))) : nullptr;
  const float eps = norm ? static_cast<float>(std::get<ops::RmsNorm>(g->norm->op).eps) : 0.0f;
  const int64_t gx = (features + kDequantWarps - 1) / kDequantWarps;
  if (gx > 0x7fffffff) throw Error(what + ": CUDA dequant_matmul takes at most 2^31 warps");
  if (g) {
    ++g_group_launches;
    g_group_products += parts_of.size();
    g_group_norms += norm, g_group_residuals += g->residual_add != nullptr, g_group_swiglus += swiglu;
  }

  const bool dp4a_align = op.format == QuantFormat::Q4_K ? w4 : w2;  // the kernel's word loads
  if (dp4a_tasks(op.format) > 0 && m <= kDp4aRows && cx.knobs().cuda_dequant_dp4a() && dp4a_align) {
    // x -> 8-bit blocks (xq, then the blocks' (d, d * sum q) at a 16-byte aligned offset), once
    // per value: the projections reading the same x share one copy.
    const int64_t blocks = m * k / 32, xq_bytes = (m * k + 15) / 16 * 16;
    const uint8_t* xkey = cx.ptr(x);
    uint8_t* xs = nullptr;
    for (const auto& q : cx.quantized_x)
      if (q.value == x.value && q.x == xkey && q.elems == m * k) xs = q.xs;
    if (!xs) {
      xs = cx.scratch(static_cast<size_t>(xq_bytes + blocks * 8), what + " quantized x");
      auto q = std::make_shared<KernelLaunch>(what + " (quantize x)",
                                              get_kernel("quantize_x_q8", quantize_x_q8_source(x.dtype, norm)),
                                              static_cast<unsigned>((blocks + 7) / 8), 256u);
      q->arg(static_cast<const void*>(xp)).arg(static_cast<void*>(xs)).arg(static_cast<void*>(xs + xq_bytes))
          .arg(static_cast<long long>(blocks)).arg(gain).arg(static_cast<long long>(k)).arg(eps);
      q->pdl();
      push_launch(cx, q);
      cx.quantized_x.push_back({x.value, xkey, m * k, xs});
    }
    auto l = std::make_shared<KernelLaunch>(
        what, get_kernel("dequant_gemv_dp4a", dequant_gemv_dp4a_source(op.format, x.dtype, m, swiglu)),
        static_cast<unsigned>(gx), static_cast<unsigned>(32 * kDequantWarps));
    l->arg(static_cast<const void*>(xs)).arg(static_cast<const void*>(xs + xq_bytes)).arg(parts)
        .arg(static_cast<long long>(m)).arg(static_cast<long long>(k)).arg(static_cast<long long>(row_bytes));
    l->pdl_prefetch();  // its weight rows go into L2 before the wait
    push_launch(cx, l);
    return;
  }
  const bool xvec = !norm && reinterpret_cast<uintptr_t>(xp) % 16 == 0 &&
                    (k * static_cast<int64_t>(dtype_size(x.dtype))) % 16 == 0;
  const DequantFusion fu{norm, swiglu};
  // 16-bit float weights, decode: coalesced 16-byte words (dequant_gemv_half); otherwise the
  // generic decoder, one grid row per chunk of kDp4aRows rows of x.
  const bool half = half_format(op.format) && m <= kDp4aRows && w16;
  const int64_t rows = std::min(kDp4aRows, m);
  const std::string src = half ? dequant_gemv_half_source(op.format, x.dtype, m, xvec, fu)
                               : dequant_gemv_source(op.format, x.dtype, rows, xvec, fu);
  const int64_t gy = half ? 1 : (m + rows - 1) / rows;
  if (gy > 65535) throw Error(what + ": CUDA dequant_matmul takes at most " + std::to_string(65535 * kDp4aRows) + " rows");
  const unsigned smem = norm ? static_cast<unsigned>(m * k * 4) : 0u;  // the normalized rows (plan-limited)
  auto l = std::make_shared<KernelLaunch>(what, get_kernel(half ? "dequant_gemv_half" : "dequant_gemv", src),
                                          static_cast<unsigned>(gx), static_cast<unsigned>(32 * kDequantWarps), smem,
                                          static_cast<unsigned>(gy));
  l->arg(static_cast<const void*>(xp)).arg(parts).arg(static_cast<long long>(m)).arg(static_cast<long long>(k))
      .arg(static_cast<long long>(row_bytes)).arg(gain).arg(eps);
  l->pdl_prefetch();  // its weight rows go into L2 before the wait
  push_launch(cx, l);
}
}  // namespace

DequantGroupStats dequant_group_stats() {
  return {g_group_launches.load(), g_group_products.load(), g_group_norms.load(), g_group_residuals.load(),
          g_group_swiglus.load()};
}

void lower_dequant_matmul(LowerContext& cx, const plan::Step& st) {
  const auto& op = std::get<ops::DequantMatMul>(st.op);
  const std::string what = step_label(st);
  const plan::TensorRef &x = st.in.at(0), &w = st.in.at(1), &y = st.out.at(0);
  if (!cuda_float(x.dtype) || y.dtype != x.dtype)
    throw Error(what + ": CUDA dequant_matmul takes f32/f16/bf16 activations and returns their dtype");
  const QuantBlock blk = quant_block(op.format);
  const int64_t k = op.k;
  if (k <= 0 || k % blk.elements != 0 || w.dims.size() != 2)
    throw Error(what + ": CUDA dequant_matmul needs K a positive multiple of the block (" +
                std::to_string(blk.elements) + ") and a 2-d weight (it should have been verified)");
  const int64_t n = w.dims[0], row_bytes = w.dims[1];
  const int64_t m = x.numel() / k;
  if (m == 0 || n == 0) return;
  if (const LowerContext::DequantGroup* g = cx.dequant_group(st)) {
    lower_dequant_gemv(cx, st, g);
    return;
  }
  const int64_t gemm_rows = cx.knobs().cuda_dequant_gemm_rows();
  // 16-bit x: the weights decoded to x's type, which keeps block-quantized values to 8 / 11
  // significant bits (what the tensor cores multiply) but would round f16 weights to bf16 or bf16
  // weights' range to f16: those stay on the decoder kernel.
  const bool decodes_exactly =
      x.dtype == DType::F32 || !half_format(op.format) || (op.format == QuantFormat::F16) == (x.dtype == DType::F16);
  if (gemm_rows > 0 && m >= gemm_rows && decodes_exactly) {
    lower_dequant_gemm(cx, st, op.format, m, k, n, row_bytes);
    return;
  }
  lower_dequant_gemv(cx, st, nullptr);
}

}  // namespace rlx::cuda
