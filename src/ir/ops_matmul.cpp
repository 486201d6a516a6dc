// Shape inference for the contraction family: MatMul, DotGeneral, FusedMatMulBiasAct,
// LoraMatMul, GroupedMatMul, DequantMatMul, MatMulInteger.
#include <algorithm>
#include <string>
#include <vector>

#include "ir/infer_util.h"
#include "rlx/ops.h"

namespace rlx {
namespace {

using infer::dims_compatible;
// The more informative of two compatible dims (a static size wins over a symbol).
Dim merge_dim(const Dim& a, const Dim& b) { return a.is_static() ? a : b; }

void check_matmul_dtype(const Shape& a, const Shape& b, const char* what) {
  if (a.dtype != b.dtype)
    throw Error(std::string(what) + ": operands must share a dtype, got " + a.str() + " and " + b.str());
  if (a.dtype == DType::Bool)
    throw Error(std::string(what) + ": bool operands are not supported (" + a.str() + "); cast to a number type first");
}

// numpy matmul result dims of a @ b (in a Shape of a's dtype); dtypes are not checked.
Shape matmul_dims(const Shape& a, const Shape& b, const char* what) {
  if (a.rank() < 1 || b.rank() < 1)
    throw Error(std::string(what) + ": operands must have rank >= 1, got " + a.str() + " and " + b.str());
  const bool a1 = a.rank() == 1, b1 = b.rank() == 1;
  const Dim& ka = a.dims.back();
  const Dim& kb = b1 ? b.dims[0] : b.dims[b.dims.size() - 2];
  if (!dims_compatible(ka, kb))
    throw Error(std::string(what) + ": contracting dims differ: " + a.str() + " has K=" + ka.str() + " but " +
                b.str() + " has K=" + kb.str() + " (expected a[..., M, K] @ b[..., K, N])");
  std::vector<Dim> ab(a.dims.begin(), a.dims.end() - (a1 ? 1 : 2));
  std::vector<Dim> bb(b.dims.begin(), b.dims.end() - (b1 ? 1 : 2));
  auto batch = broadcast_dims(ab, bb);
  if (!batch)
    throw Error(std::string(what) + ": batch dims " + dims_str(ab) + " of " + a.str() + " and " + dims_str(bb) +
                " of " + b.str() + " do not broadcast");
  std::vector<Dim> out = *batch;
  if (!a1) out.push_back(a.dims[a.dims.size() - 2]);
  if (!b1) out.push_back(b.dims.back());
  return Shape(std::move(out), a.dtype);
}

// numpy matmul result shape of a @ b (dtype of a).
Shape matmul_shape(const Shape& a, const Shape& b, const char* what) {
  check_matmul_dtype(a, b, what);
  return matmul_dims(a, b, what);
}

// Every dim statically 1 (rank 0 included): one value.
bool one_value(const Shape& s) {
  for (const Dim& d : s.dims)
    if (d != Dim(1)) return false;
  return true;
}

// matmul_integer's zero point `z` of operand `x` ("a": per row, K = the last dim; "b": per
// column, K = dim -2): one value, or x's dims with K replaced by 1.
void check_integer_zero_point(const Shape& x, const Shape& z, bool per_row) {
  const char* name = per_row ? "a" : "b";
  const std::string zname = std::string(name) + "_zero";
  if (z.dtype != x.dtype)
    throw Error("matmul_integer: " + zname + " " + z.str() + " must have " + name + "'s dtype " + dtype_name(x.dtype) +
                " (" + name + " is " + x.str() + ")");
  if (one_value(z)) return;
  const std::string form = per_row ? "a's dims with K (the last) replaced by 1, one per row"
                                   : "b's dims with K (dim -2) replaced by 1, one per column";
  if (x.rank() < 2 || z.rank() != x.rank())
    throw Error("matmul_integer: " + zname + " " + z.str() + " must be one value or have " + form + "; " + name +
                " is " + x.str() + (x.rank() < 2 ? " (a 1-d operand takes one zero point)" : ""));
  const size_t kd = static_cast<size_t>(per_row ? x.rank() - 1 : x.rank() - 2);
  for (size_t i = 0; i < x.dims.size(); ++i) {
    const bool ok = i == kd ? z.dims[i] == Dim(1) : dims_compatible(z.dims[i], x.dims[i]);
    if (!ok)
      throw Error("matmul_integer: " + zname + " " + z.str() + " must be one value or have " + form + " (" +
                  name + " is " + x.str() + "); dim " + std::to_string(i) + " differs");
  }
}

// Normalizes a list of axes for `rank`, naming `what` in errors.
std::vector<int64_t> norm_axes(const std::vector<int64_t>& axes, int64_t rank, const std::string& what) {
  std::vector<int64_t> out;
  out.reserve(axes.size());
  for (int64_t a : axes) out.push_back(normalize_axis(a, rank, what));
  return out;
}

bool act_accepts_ints(ActKind k) {
  return k == ActKind::Relu || k == ActKind::Neg || k == ActKind::Abs || k == ActKind::Sign;
}

}  // namespace

std::vector<Shape> ops::MatMul::infer(std::span<const Shape> in) const {
  return {matmul_shape(in[0], in[1], "matmul")};
}

std::vector<Shape> ops::MatMulInteger::infer(std::span<const Shape> in) const {
  const Shape& a = in[0];
  const Shape& b = in[1];
  for (const Shape* s : {&a, &b})
    if (s->dtype != DType::U8 && s->dtype != DType::I8)
      throw Error(std::string("matmul_integer: ") + (s == &a ? "a " : "b ") + s->str() +
                  " must be u8 or i8 (quantize or cast it first)");
  Shape out = matmul_dims(a, b, "matmul_integer");
  check_integer_zero_point(a, in[2], true);
  check_integer_zero_point(b, in[3], false);
  out.dtype = DType::I32;
  return {out};
}

std::vector<Shape> ops::DotGeneral::infer(std::span<const Shape> in) const {
  const Shape& l = in[0];
  const Shape& r = in[1];
  check_matmul_dtype(l, r, "dot_general");
  if (lhs_batch.size() != rhs_batch.size())
    throw Error("dot_general: lhs_batch " + dims_str(lhs_batch) + " and rhs_batch " + dims_str(rhs_batch) +
                " must have the same length");
  if (lhs_contract.size() != rhs_contract.size())
    throw Error("dot_general: lhs_contract " + dims_str(lhs_contract) + " and rhs_contract " +
                dims_str(rhs_contract) + " must have the same length");
  const auto lb = norm_axes(lhs_batch, l.rank(), "dot_general lhs_batch of " + l.str());
  const auto rb = norm_axes(rhs_batch, r.rank(), "dot_general rhs_batch of " + r.str());
  const auto lc = norm_axes(lhs_contract, l.rank(), "dot_general lhs_contract of " + l.str());
  const auto rc = norm_axes(rhs_contract, r.rank(), "dot_general rhs_contract of " + r.str());
  auto check_unique = [](const std::vector<int64_t>& b, const std::vector<int64_t>& c, const Shape& s,
                         const char* side) {
    std::vector<int64_t> all = b;
    all.insert(all.end(), c.begin(), c.end());
    std::vector<int64_t> sorted = all;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      throw Error(std::string("dot_general: ") + side + " batch " + dims_str(b) + " and contracting " +
                  dims_str(c) + " dims (normalized) of " + s.str() +
                  " must be distinct axes (each axis used at most once)");
  };
  check_unique(lb, lc, l, "lhs");
  check_unique(rb, rc, r, "rhs");
  std::vector<Dim> out;
  for (size_t i = 0; i < lb.size(); ++i) {
    const Dim& a = l.dims[lb[i]];
    const Dim& b = r.dims[rb[i]];
    if (!dims_compatible(a, b))
      throw Error("dot_general: batch dim pair " + std::to_string(i) + " differs: lhs " + l.str() + " axis " +
                  std::to_string(lb[i]) + " = " + a.str() + ", rhs " + r.str() + " axis " + std::to_string(rb[i]) +
                  " = " + b.str());
    out.push_back(merge_dim(a, b));
  }
  for (size_t i = 0; i < lc.size(); ++i) {
    const Dim& a = l.dims[lc[i]];
    const Dim& b = r.dims[rc[i]];
    if (!dims_compatible(a, b))
      throw Error("dot_general: contracting dim pair " + std::to_string(i) + " differs: lhs " + l.str() +
                  " axis " + std::to_string(lc[i]) + " = " + a.str() + ", rhs " + r.str() + " axis " +
                  std::to_string(rc[i]) + " = " + b.str());
  }
  auto add_free = [&out](const Shape& s, const std::vector<int64_t>& b, const std::vector<int64_t>& c) {
    for (int64_t d = 0; d < s.rank(); ++d)
      if (std::find(b.begin(), b.end(), d) == b.end() && std::find(c.begin(), c.end(), d) == c.end())
        out.push_back(s.dims[d]);
  };
  add_free(l, lb, lc);
  add_free(r, rb, rc);
  return {Shape(std::move(out), l.dtype)};
}

std::vector<Shape> ops::FusedMatMulBiasAct::infer(std::span<const Shape> in) const {
  Shape out = matmul_shape(in[0], in[1], "fused_matmul_bias_act");
  if (activation) {
    if (*activation == ActKind::Not)
      throw Error("fused_matmul_bias_act: activation 'not' takes bool and cannot follow a matmul");
    if (!is_float(out.dtype) && !act_accepts_ints(*activation))
      throw Error(std::string("fused_matmul_bias_act: activation '") + enum_name(*activation) +
                  "' needs float operands, got " + out.str() + " (integer operands allow relu/neg/abs/sign)");
  }
  if (residual) {
    if (in.size() < 3)
      throw Error("fused_matmul_bias_act: residual=true needs the residual as the last input");
    const Shape& res = in.back();
    if (res.dtype != out.dtype || !dims_compatible(res, out))
      throw Error("fused_matmul_bias_act: residual " + res.str() + " must have the product's shape and dtype " +
                  out.str());
  }
  if (has_bias(in.size())) {
    const Shape& bias = in[2];
    if (bias.dtype != out.dtype)
      throw Error("fused_matmul_bias_act: bias " + bias.str() + " must have the operands' dtype " +
                  dtype_name(out.dtype));
    if (bias.rank() > 1)
      throw Error("fused_matmul_bias_act: bias " + bias.str() + " must have rank <= 1 (over the last axis)");
    if (bias.rank() == 1) {
      const Dim& bn = bias.dims[0];
      if (out.rank() == 0)
        throw Error("fused_matmul_bias_act: the product " + out.str() + " is a scalar, so bias " + bias.str() +
                    " must be a scalar too");
      if (!dims_compatible(bn, out.dims.back()) && !(bn.is_static() && bn.value == 1))
        throw Error("fused_matmul_bias_act: bias " + bias.str() + " does not match the last dim of the product " +
                    out.str() + " (expected size N or 1)");
    }
  }
  return {out};
}

std::vector<Shape> ops::LoraMatMul::infer(std::span<const Shape> in) const {
  const Shape& x = in[0];
  if (!is_float(x.dtype))
    throw Error("lora_matmul: operands must be float, got x " + x.str());
  Shape main = matmul_shape(x, in[1], "lora_matmul (x @ w)");
  Shape down = matmul_shape(x, in[2], "lora_matmul (x @ a)");
  Shape up = matmul_shape(down, in[3], "lora_matmul ((x @ a) @ b)");
  bool same = main.rank() == up.rank();
  for (int64_t i = 0; same && i < main.rank(); ++i) same = dims_compatible(main.dims[i], up.dims[i]);
  if (!same)
    throw Error("lora_matmul: x @ w has shape " + main.str() + " but (x @ a) @ b has shape " + up.str() +
                " (w " + in[1].str() + ", a " + in[2].str() + ", b " + in[3].str() + ")");
  for (int64_t i = 0; i < main.rank(); ++i) main.dims[i] = merge_dim(main.dims[i], up.dims[i]);
  return {main};
}

std::vector<Shape> ops::GroupedMatMul::infer(std::span<const Shape> in) const {
  const Shape& x = in[0];
  const Shape& w = in[1];
  const Shape& idx = in[2];
  check_matmul_dtype(x, w, "grouped_matmul");
  if (x.rank() != 2) throw Error("grouped_matmul: x must be (M, K), got " + x.str());
  if (w.rank() != 3) throw Error("grouped_matmul: w must be (E, K, N), got " + w.str());
  if (!is_int(idx.dtype) || idx.rank() != 1)
    throw Error("grouped_matmul: idx must be a 1-d integer tensor (M), got " + idx.str());
  if (!dims_compatible(x.dims[1], w.dims[1]))
    throw Error("grouped_matmul: K of x " + x.str() + " (" + x.dims[1].str() + ") differs from K of w " + w.str() +
                " (" + w.dims[1].str() + ")");
  if (!dims_compatible(x.dims[0], idx.dims[0]))
    throw Error("grouped_matmul: idx " + idx.str() + " must have one expert index per row of x " + x.str());
  return {Shape({merge_dim(x.dims[0], idx.dims[0]), w.dims[2]}, x.dtype)};
}

QuantBlock quant_block(QuantFormat f) {
  switch (f) {
    case QuantFormat::Q4_0: return {32, 18};
    case QuantFormat::Q4_1: return {32, 20};
    case QuantFormat::Q5_0: return {32, 22};
    case QuantFormat::Q5_1: return {32, 24};
    case QuantFormat::Q8_0: return {32, 34};
    case QuantFormat::Q2_K: return {256, 84};
    case QuantFormat::Q3_K: return {256, 110};
    case QuantFormat::Q4_K: return {256, 144};
    case QuantFormat::Q5_K: return {256, 176};
    case QuantFormat::Q6_K: return {256, 210};
    case QuantFormat::F16: return {32, 64};
    case QuantFormat::BF16: return {32, 64};
  }
  throw Error("dequant_matmul: unknown quant format " + std::to_string(static_cast<int>(f)));
}

std::vector<Shape> ops::DequantMatMul::infer(std::span<const Shape> in) const {
  const Shape& x = in[0];
  const Shape& w = in[1];
  const QuantBlock blk = quant_block(format);
  const std::string fmt = enum_name(format);
  if (k <= 0 || k % blk.elements != 0)
    throw Error("dequant_matmul: k = " + std::to_string(k) + " must be a positive multiple of the " + fmt +
                " block size " + std::to_string(blk.elements) + " (pad the weight rows or use a format with smaller blocks)");
  if (x.dtype != DType::F32 && x.dtype != DType::F16 && x.dtype != DType::BF16)
    throw Error("dequant_matmul: x must be f32, f16 or bf16, got " + x.str() + " (cast it first)");
  if (x.rank() < 1)
    throw Error("dequant_matmul: x must have rank >= 1 (..., M, K), got " + x.str());
  const Dim& kx = x.dims.back();
  if (!kx.is_static() || kx.value != k)
    throw Error("dequant_matmul: the last dim of x " + x.str() + " must be K = " + std::to_string(k) +
                " (the op's k attribute, the weight's logical columns)");
  const int64_t row_bytes = k / blk.elements * blk.bytes;
  if (w.dtype != DType::U8 || w.rank() != 2)
    throw Error("dequant_matmul: the weight must be a u8 (N, row_bytes) tensor of raw " + fmt + " blocks, got " +
                w.str() + " (row_bytes = " + std::to_string(row_bytes) + " for K = " + std::to_string(k) + ")");
  if (!w.dims[1].is_static() || w.dims[1].value != row_bytes)
    throw Error("dequant_matmul: the weight " + w.str() + " has " + w.dims[1].str() + " bytes per row, but K = " +
                std::to_string(k) + " values of " + fmt + " take " + std::to_string(k / blk.elements) + " blocks of " +
                std::to_string(blk.bytes) + " bytes = " + std::to_string(row_bytes) +
                " (check the format and k attributes against the stored weight)");
  std::vector<Dim> out(x.dims.begin(), x.dims.end() - 1);
  out.push_back(w.dims[0]);
  return {Shape(std::move(out), x.dtype)};
}

}  // namespace rlx
