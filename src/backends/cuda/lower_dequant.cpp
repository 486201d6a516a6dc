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
#include <algorithm>
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
constexpr int64_t kDp4aRows = 8;      // most rows of x the integer-dot path takes

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
}  // namespace

std::string quantize_x_q8_source(DType t) { return kernel_source(ksrc::kQuantizeXQ8, {{"T", storage_type(t)}}, ""); }

std::string dequant_gemv_dp4a_source(QuantFormat f, DType t, int64_t rows) {
  const int tasks = dp4a_tasks(f);
  if (tasks == 0) throw Error(std::string("dequant_gemv_dp4a: no integer-dot kernel for ") + EnumNames<QuantFormat>::names[static_cast<size_t>(f)]);
  return kernel_source(ksrc::kDequantGemvDp4a, {{"T", storage_type(t)}},
                       format_defines(f, rows, "#define UPB " + std::to_string(tasks) + "\n"));
}

bool claims_node_dequant(const Graph& g, const Node& n, std::string* why) {
  const DType t = g.shape(n.inputs.at(0)).dtype;
  if (!cuda_float(t)) {
    if (why) *why = std::string("CUDA dequant_matmul takes f32/f16/bf16 activations, not ") + dtype_name(t);
    return false;
  }
  return true;
}

std::string dequant_gemv_source(QuantFormat f, DType t, int64_t rows, bool xvec) {
  return kernel_source(ksrc::kDequantGemv, {{"T", storage_type(t)}}, format_defines(f, rows, xvec_define(xvec)));
}

std::string dequant_gemv_half_source(QuantFormat f, DType t, int64_t rows, bool xvec) {
  if (f != QuantFormat::F16 && f != QuantFormat::BF16)
    throw Error(std::string("dequant_gemv_half: takes the f16 / bf16 formats, not ") +
                EnumNames<QuantFormat>::names[static_cast<size_t>(f)]);
  return kernel_source((std::string(ksrc::kDequantGemv) + ksrc::kDequantGemvHalf).c_str(), {{"T", storage_type(t)}},
                       format_defines(f, rows, xvec_define(xvec)));
}

std::string dequant_rows_source(QuantFormat f) {
  return kernel_source((std::string(ksrc::kDequantGemv) + ksrc::kDequantRows).c_str(), {{"T", "float"}},
                       format_defines(f, 1, xvec_define(false)));
}

namespace {
constexpr int64_t kDequantScratch = int64_t{32} << 20;  // bytes of decoded weight rows at a time

// y[m, n] = x[m, k] @ dequant(w)^T for f32 x: per chunk of weight rows, dequant_rows into the
// shared scratch, then one cuBLASLt GEMM (TF32) writing the chunk's columns of y.
void lower_dequant_gemm(LowerContext& cx, const plan::Step& st, QuantFormat f, int64_t m, int64_t k, int64_t n,
                        int64_t row_bytes) {
  const std::string what = step_label(st);
  const plan::TensorRef &x = st.in.at(0), &w = st.in.at(1), &y = st.out.at(0);
  const int64_t row_scratch = k * 4;
  const int64_t chunk = std::min(n, std::max<int64_t>(64, kDequantScratch / row_scratch / 64 * 64));
  uint8_t* ws = cx.shared_scratch(static_cast<size_t>(chunk * row_scratch), "decoded DequantMatMul weights");
  const CUfunction fn = get_kernel("dequant_rows", dequant_rows_source(f));
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
    p.dtype = p.ab_dtype = DType::F32;
    p.m = m, p.n = rows, p.k = k;
    p.trans_b = true;
    p.lda = k, p.ldb = k, p.ldc = n;
    // Block formats: TF32 (their weights' own rounding dominates; decode already rounds x to 8
    // bits). F16 / BF16 weights promise f32 math on the 16-bit values: strict f32 unless the
    // compile asks for another precision.
    const bool half = f == QuantFormat::F16 || f == QuantFormat::BF16;
    p.precision = half && cx.options().precision == Precision::Fp32 ? Precision::Fp32 : Precision::Tf32;
    uint8_t* yc = yp + n0 * 4;
    p.align_a = pointer_alignment(xp), p.align_b = pointer_alignment(ws), p.align_c = pointer_alignment(yc);
    GemmPlan& plan = cx.gemm(p, what);
    void* gws = cx.gemm_workspace();
    cx.add([&plan, xp, ws, yc, gws](cudaStream_t s) { plan.run(s, xp, ws, yc, nullptr, gws); });
  }
}
}  // namespace

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
  const int64_t m = k > 0 ? x.numel() / k : 0;
  if (m == 0 || n == 0) return;
  constexpr int64_t kRows = 8, kWarps = kDequantWarps;
  const int64_t align = op.format == QuantFormat::Q4_K ? 4 : 2;  // the kernel's word loads
  if (dp4a_tasks(op.format) > 0 && m <= kDp4aRows && cx.knobs().cuda_dequant_dp4a() &&
      reinterpret_cast<uintptr_t>(cx.ptr(w)) % align == 0 && row_bytes % align == 0) {
    // x -> 8-bit blocks (xq, then the blocks' (d, d * sum q) at a 16-byte aligned offset), once
    // per value: the projections reading the same x share one copy.
    const int64_t blocks = m * k / 32, xq_bytes = (m * k + 15) / 16 * 16;
    const uint8_t* xp = cx.ptr(x);
    uint8_t* xs = nullptr;
    for (const auto& q : cx.quantized_x)
      if (q.value == x.value && q.x == xp && q.elems == m * k) xs = q.xs;
    if (!xs) {
      xs = cx.scratch(static_cast<size_t>(xq_bytes + blocks * 8), what + " quantized x");
      auto q = std::make_shared<KernelLaunch>(what + " (quantize x)", get_kernel("quantize_x_q8", quantize_x_q8_source(x.dtype)),
                                              static_cast<unsigned>((blocks + 7) / 8), 256u);
      q->arg(static_cast<const void*>(xp)).arg(static_cast<void*>(xs)).arg(static_cast<void*>(xs + xq_bytes))
          .arg(static_cast<long long>(blocks));
      push_launch(cx, q);
      cx.quantized_x.push_back({x.value, xp, m * k, xs});
    }
    const int64_t gx = (n + kWarps - 1) / kWarps;
    if (gx > 0x7fffffff) throw Error(what + ": CUDA dequant_matmul takes at most 2^31 warps");
    auto l = std::make_shared<KernelLaunch>(what, get_kernel("dequant_gemv_dp4a", dequant_gemv_dp4a_source(op.format, x.dtype, m)),
                                            static_cast<unsigned>(gx), static_cast<unsigned>(32 * kWarps));
    l->arg(static_cast<const void*>(xs)).arg(static_cast<const void*>(xs + xq_bytes))
        .arg(static_cast<const unsigned char*>(cx.ptr(w))).arg(static_cast<void*>(cx.ptr(y)))
        .arg(static_cast<long long>(m)).arg(static_cast<long long>(k)).arg(static_cast<long long>(n))
        .arg(static_cast<long long>(row_bytes));
    push_launch(cx, l);
    return;
  }
  const int64_t gemm_rows = cx.knobs().cuda_dequant_gemm_rows();
  if (x.dtype == DType::F32 && gemm_rows > 0 && m >= gemm_rows) {
    lower_dequant_gemm(cx, st, op.format, m, k, n, row_bytes);
    return;
  }
  const bool xvec = reinterpret_cast<uintptr_t>(cx.ptr(x)) % 16 == 0 && (k * static_cast<int64_t>(dtype_size(x.dtype))) % 16 == 0;
  // 16-bit float weights, decode: coalesced 16-byte words (dequant_gemv_half); otherwise the
  // generic decoder, one grid row per chunk of kRows rows of x.
  const bool half = (op.format == QuantFormat::F16 || op.format == QuantFormat::BF16) && m <= kRows &&
                    reinterpret_cast<uintptr_t>(cx.ptr(w)) % 16 == 0 && row_bytes % 16 == 0;
  const std::string src = half ? dequant_gemv_half_source(op.format, x.dtype, m, xvec)
                               : dequant_gemv_source(op.format, x.dtype, std::min(kRows, m), xvec);
  const int64_t gx = (n + kWarps - 1) / kWarps, gy = half ? 1 : (m + kRows - 1) / kRows;
  if (gx > 0x7fffffff || gy > 65535)
    throw Error(what + ": CUDA dequant_matmul takes at most " + std::to_string(65535 * kRows) + " rows and 2^31 warps");
  auto l = std::make_shared<KernelLaunch>(what, get_kernel(half ? "dequant_gemv_half" : "dequant_gemv", src),
                                          static_cast<unsigned>(gx), static_cast<unsigned>(32 * kWarps), 0,
                                          static_cast<unsigned>(gy));
  l->arg(static_cast<const void*>(cx.ptr(x))).arg(static_cast<const unsigned char*>(cx.ptr(w)))
      .arg(static_cast<void*>(cx.ptr(y))).arg(static_cast<long long>(m)).arg(static_cast<long long>(k))
      .arg(static_cast<long long>(n)).arg(static_cast<long long>(row_bytes));
  push_launch(cx, l);
}

}  // namespace rlx::cuda
