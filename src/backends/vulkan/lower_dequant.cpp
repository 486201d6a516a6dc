// DequantMatMul on Vulkan (kernels/dequant.h): x (..., M, K) f32/f16/bf16 @ dequant(w)^T with w
// the raw GGUF blocks, decoded as they stream. Up to kGemvRows rows of x (decode) run on the GEMV
// kernel (groups of up to 32 invocations per 2 weight rows, the blocks decoded in registers, x
// staged in shared memory, subgroup reductions), more rows on the tiled kernel (weight tiles decoded to
// shared memory, then the f32 tiled product). Accumulation in f32; f16 / bf16 y rounded once
// at the store. The precision policy does not apply (the weights are quantized already).
#include <algorithm>
#include <string>
#include <vector>

#include "backends/vulkan/kernels/dequant.h"
#include "backends/vulkan/lower.h"
#include "rlx/error.h"

namespace rlx::vulkan {
namespace {

// Rows of x up to which the GEMV kernel runs (one pass over the weights); more take the tiled one.
constexpr int64_t kGemvRows = 8;

// The number of the formats with a Vulkan decoder (FMT in kernels/dequant.h), or -1: a format
// added to QuantFormat is refused until a decoder is written for it.
int decoder_of(QuantFormat f) {
  switch (f) {
    case QuantFormat::Q4_0: return 0;
    case QuantFormat::Q4_1: return 1;
    case QuantFormat::Q5_0: return 2;
    case QuantFormat::Q5_1: return 3;
    case QuantFormat::Q8_0: return 4;
    case QuantFormat::Q2_K: return 5;
    case QuantFormat::Q3_K: return 6;
    case QuantFormat::Q4_K: return 7;
    case QuantFormat::Q5_K: return 8;
    case QuantFormat::Q6_K: return 9;
    default: return -1;
  }
}

bool float_act(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

std::string format_name(QuantFormat f) { return EnumNames<QuantFormat>::names[static_cast<size_t>(f)]; }

bool kind(std::string_view name) { return name == "dequant_matmul"; }

bool node(const Graph& g, const Node& n, const DeviceInfo*, std::string* why) {
  const auto* op = std::get_if<ops::DequantMatMul>(&n.op);
  if (!op) return refuse(why, "not a dequant_matmul node");
  if (decoder_of(op->format) < 0)
    return refuse(why, "the Vulkan backend has no dequant_matmul kernel for weight format " + format_name(op->format));
  const DType t = g.shape(n.inputs.at(0)).dtype;
  if (!float_act(t))
    return refuse(why, std::string("Vulkan dequant_matmul takes f32/f16/bf16 activations, not ") + dtype_name(t));
  if (g.shape(n.inputs.at(1)).dtype != DType::U8)
    return refuse(why, "Vulkan dequant_matmul takes the weight's blocks as u8");
  return true;
}

uint32_t u32(int64_t v, const std::string& what, const char* of) {
  if (v < 0 || v > static_cast<int64_t>(UINT32_MAX))
    throw Error(what + ": the Vulkan dequant_matmul kernels index with 32 bits; " + of + " = " + std::to_string(v) +
                " does not fit: split the product or use the CUDA/CPU backend");
  return static_cast<uint32_t>(v);
}

std::string def(const char* name, int64_t v) { return std::string("#define ") + name + " " + std::to_string(v) + "u\n"; }

// Bindings X, W, Y and the push constants of kernels/dequant.h, and load_x / store_y.
struct Bound {
  std::vector<Operand> ops;
  std::vector<uint32_t> push;
  std::string decl;
};

Bound bind(LowerContext& cx, const plan::Step& st, int64_t m, int64_t n, int64_t k, int64_t row_bytes) {
  const std::string what = step_label(st);
  const plan::TensorRef &x = st.in.at(0), &w = st.in.at(1), &y = st.out.at(0);
  const DType t = x.dtype;
  Bound b;
  b.ops = {cx.in(x), cx.in(w), cx.out(y)};
  const Operand& wo = b.ops[1];
  // The kernels read the weight as whole words, the last one past its end when its bytes are not
  // a multiple of 4: the window must cover that word (the backend binds whole words).
  if (wo.range < (wo.skip + wo.bytes + 3) / 4 * 4)
    throw Error(what + ": internal: the weight's binding (" + std::to_string(wo.range) +
                " bytes) does not reach the end of its last 32-bit word (" + std::to_string(wo.skip + wo.bytes) +
                " bytes)");
  u32(static_cast<int64_t>(wo.skip + wo.bytes), what, "the weight's end in its binding (bytes)");
  u32(x.numel(), what, "x's elements");
  u32(y.numel(), what, "y's elements");
  b.push = {b.ops[0].elem(dtype_size(t)), static_cast<uint32_t>(wo.skip), b.ops[2].elem(dtype_size(t)),
            u32(m, what, "rows"), u32(n, what, "N"), u32(k, what, "K"), u32(row_bytes, what, "row bytes")};
  b.decl = glsl_buffer(0, "X", t, true) +
           "layout(std430, set = 0, binding = 1) readonly buffer B1 { uint data[]; } W;\n" +
           glsl_buffer(2, "Y", t, false) +
           "layout(push_constant) uniform Push { uint o_X, o_W, o_Y, m, n, k, row_bytes; } pc;\n" +
           glsl_dtype_helpers({t}) + "float load_x(uint i) { return float(" + glsl_load(t, "X.data[pc.o_X + i]") +
           "); }\nvoid store_y(uint i, float v) { Y.data[pc.o_Y + i] = " + glsl_store(t, "v") + "; }\n";
  return b;
}

}  // namespace

const FamilyClaims kDequantClaims{kind, node};

void lower_dequant(LowerContext& cx, const plan::Step& st) {
  const auto& op = std::get<ops::DequantMatMul>(st.op);
  const std::string what = step_label(st);
  const plan::TensorRef &x = st.in.at(0), &w = st.in.at(1), &y = st.out.at(0);
  const int fmt = decoder_of(op.format);
  if (fmt < 0) throw Error(what + ": the Vulkan backend has no dequant_matmul kernel for " + format_name(op.format));
  if (!float_act(x.dtype) || y.dtype != x.dtype || x.storage() != x.dtype || w.dtype != DType::U8)
    throw Error(what + ": Vulkan dequant_matmul takes f32/f16/bf16 activations (held as themselves), u8 weight "
                "blocks, and returns x's dtype");
  const QuantBlock blk = quant_block(op.format);
  const int64_t k = op.k;
  if (k <= 0 || k % blk.elements != 0 || w.dims.size() != 2 || w.dims[1] != k / blk.elements * blk.bytes)
    throw Error(what + ": Vulkan dequant_matmul needs K a positive multiple of the block (" +
                std::to_string(blk.elements) + ") and a 2-d weight of K / " + std::to_string(blk.elements) + " * " +
                std::to_string(blk.bytes) + " bytes a row (it should have been verified)");
  const int64_t n = w.dims[0], row_bytes = w.dims[1], m = x.numel() / k;
  if (m == 0 || n == 0) return;
  const DeviceInfo& info = cx.info();
  const Bound b = bind(cx, st, m, n, k, row_bytes);
  const std::string head = glsl_header({x.dtype}, info.subgroup_arith);
  const std::string decode =
      def("QE", blk.elements) + def("QB", blk.bytes) + "#define FMT " + std::to_string(fmt) + "\n";
  if (m <= kGemvRows) {
    // TPR invocations per 2 weight rows: 32, or the power of two (>= 4) at or above the row's
    // units of 32 values when it has fewer. About 256 invocations a workgroup, fewer while that
    // leaves under 264 workgroups (two per SM of an H100).
    constexpr int64_t rpt = 2;
    const int64_t units = k / 32;
    int64_t tpr = 32;
    while (tpr > 4 && tpr / 2 >= units) tpr /= 2;
    int64_t groups = 256 / tpr;
    auto few_groups = [&](int64_t gr) { return gr > 2 && (n + gr * rpt - 1) / (gr * rpt) < 264; };
    while (groups > 1 && (groups * tpr > info.max_invocations || few_groups(groups))) groups /= 2;
    const int64_t nt = groups * tpr, rpw = groups * rpt;
    // MR rows of x a pass and UPT units staged per invocation and chunk (up to 4, no more than the
    // row has) as shared memory allows: each unit of each row of x takes 9 vec4; the partial sums
    // (MR * 2 per invocation) reuse the buffer.
    auto xs_vec4 = [&](int64_t mr, int64_t upt) { return std::max(mr * tpr * upt * 9, (mr * rpt * nt + 3) / 4); };
    const int64_t cap = static_cast<int64_t>(info.max_shared_bytes) - 4;
    int64_t mr = std::min(m, kGemvRows), upt = std::min<int64_t>(4, (units + tpr - 1) / tpr);
    while (mr > 1 && xs_vec4(mr, 1) * 16 > cap) --mr;
    while (upt > 1 && xs_vec4(mr, upt) * 16 > cap) upt /= 2;
    if (xs_vec4(mr, upt) * 16 > cap)
      throw Error(what + ": the Vulkan dequant_matmul GEMV needs " + std::to_string(xs_vec4(mr, upt) * 16 + 4) +
                  " bytes of shared memory, above the device's " + std::to_string(info.max_shared_bytes));
    const std::string defines = "layout(local_size_x = " + std::to_string(nt) + ") in;\n" + def("NT", nt) +
                                def("TPR", tpr) + def("RPT", rpt) + def("RPW", rpw) + def("MR", mr) + def("UPT", upt) +
                                def("XS", xs_vec4(mr, upt)) + "#define SG " + (info.subgroup_arith ? "1" : "0") + "\n";
    const Kernel kern{"dequant_gemv", head + decode + defines + b.decl + ksrc::kDequantDecode + ksrc::kDequantBlock +
                                          ksrc::kDequantGemv};
    const uint32_t gx = static_cast<uint32_t>(std::clamp<int64_t>((n + rpw - 1) / rpw, 1, info.max_groups[0]));
    const uint32_t gy = static_cast<uint32_t>(std::clamp<int64_t>((m + mr - 1) / mr, 1, info.max_groups[1]));
    cx.dispatch(kern, b.ops, b.push, gx, gy);
    return;
  }
  // 64 x 64 tiles of y, K slices of 32, 128 invocations of 8 x 4 outputs: 16.6 KB of shared memory.
  constexpr int64_t nt = 128, bm = 64, bn = 64, bk = 32, tm = 8, tn = 4, wx = bn / tn, wy = bm / tm;
  static_assert(wx * wy == nt && bn * bk / 16 == nt);
  const std::string defines = "layout(local_size_x = " + std::to_string(nt) + ") in;\n" + def("NT", nt) + def("BM", bm) +
                              def("BN", bn) + def("BK", bk) + def("TM", tm) + def("TN", tn) + def("WX", wx) +
                              def("WY", wy) + def("PAD", 1);
  const Kernel kern{"dequant_gemm", head + decode + defines + b.decl + ksrc::kDequantDecode + ksrc::kDequantBlock +
                                        ksrc::kDequantGemm};
  const uint32_t gx = static_cast<uint32_t>(std::clamp<int64_t>((n + bn - 1) / bn, 1, info.max_groups[0]));
  const uint32_t gy = static_cast<uint32_t>(std::clamp<int64_t>((m + bm - 1) / bm, 1, info.max_groups[1]));
  cx.dispatch(kern, b.ops, b.push, gx, gy);
}

}  // namespace rlx::vulkan
