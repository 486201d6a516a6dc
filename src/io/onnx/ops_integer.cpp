// ONNX integer-arithmetic ops on 8-bit operands: MatMulInteger and ConvInteger (the IR's exact
// matmul_integer / conv_integer, i32 results), and QLinearMatMul / QLinearConv (the same products,
// then the requantization of the operator's reference: the multiplier a_scale * b_scale / y_scale
// in the scales' type, the product with the exact int32 sum and the zero point added in float64,
// rounded half to even and saturated to the output's 8-bit type).
#include <string>
#include <vector>

#include "io/onnx/conv_window.h"
#include "io/onnx/importer.h"
#include "io/onnx/proto.h"

namespace rlx::onnx_io {
namespace {

using V = std::vector<Val>;

bool is_int8(DType t) { return t == DType::U8 || t == DType::I8; }

// Every dim statically 1 (rank 0 included).
bool one_value(const Shape& s) {
  for (const Dim& d : s.dims)
    if (d != Dim(1)) return false;
  return true;
}

bool same_dim(const Dim& a, const Dim& b) { return a == b || a.is_symbolic() || b.is_symbolic(); }

void need_int8(const NodeCtx& c, size_t i, const std::string& name) {
  if (!is_int8(c.shape(i).dtype))
    c.fail(name + " must be uint8 or int8, got " + c.shape(i).str() + " (quantize it first, e.g. with QuantizeLinear)");
}

// Input i (a zero point of input `of`, named `name` / `of_name`): its operand's dtype; absent -> 0.
Value zero_point(const NodeCtx& c, size_t i, size_t of, const std::string& name, const std::string& of_name) {
  const DType dt = c.shape(of).dtype;
  if (!c.present(i)) return c.scalar_like(0, dt);
  if (c.shape(i).dtype != dt)
    c.fail(name + " " + c.shape(i).str() + " must have the dtype of " + of_name + " " + c.shape(of).str() +
           " (a zero point is stored in its tensor's type)");
  return c.value(i);
}

// A one-value tensor as a 0-d value (so that it broadcasts without raising the rank).
Value as_scalar(const NodeCtx& c, Value v) { return c.g().shape(v).rank() == 0 ? v : c.g().reshape(v, {}); }

// A per-row (`per_row`) or per-column quantization parameter `v` (zero point or scale) of the
// matmul operand x, as a value of x's rank with K replaced by 1 (x's batch dims expanded when
// `expand`), or a 0-d value for one value. Accepted: one value; a 1-d vector of M (rows) / N
// (columns) values; or x's rank with K = 1 and the other dims 1 or x's.
Value per_line(const NodeCtx& c, Value v, const Shape& x, bool per_row, bool expand, const std::string& name,
               const std::string& x_name) {
  auto& g = c.g();
  const Shape& s = g.shape(v);
  if (one_value(s)) return as_scalar(c, v);
  const std::string form = per_row ? "a scalar, one value per row of " + x_name + " (M) or shape [..., M, 1]"
                                   : "a scalar, one value per column of " + x_name + " (N) or shape [..., 1, N]";
  if (x.rank() < 2) c.fail(name + " " + s.str() + " must be one value: " + x_name + " " + x.str() + " is 1-d");
  const size_t r = static_cast<size_t>(x.rank());
  const size_t kd = per_row ? r - 1 : r - 2;  // the contracted dim
  const size_t ld = per_row ? r - 2 : r - 1;  // the dim the values run along
  std::vector<Dim> want(x.dims);
  want[kd] = Dim(1);
  if (s.rank() == 1) {
    if (!same_dim(s.dims[0], x.dims[ld]))
      c.fail(name + " " + s.str() + " must be " + form + "; " + x_name + " is " + x.str());
    std::vector<Dim> two = per_row ? std::vector<Dim>{s.dims[0], Dim(1)} : std::vector<Dim>{Dim(1), s.dims[0]};
    v = g.reshape(v, two);
    if (!expand || r == 2) return v;
    return g.expand(v, want);
  }
  bool ok = s.rank() == x.rank() && s.dims[kd] == Dim(1);
  for (size_t i = 0; ok && i < r; ++i)
    ok = i == kd || s.dims[i] == Dim(1) || same_dim(s.dims[i], x.dims[i]);
  if (!ok) c.fail(name + " " + s.str() + " must be " + form + "; " + x_name + " is " + x.str());
  return expand ? g.expand(v, want) : v;
}

// A scale input: a float tensor (f32; opset 21 QLinearMatMul also f16 / bf16).
DType scale_type(const NodeCtx& c, size_t i, const std::string& name, bool halves) {
  const DType t = c.shape(i).dtype;
  if (t == DType::F32 || (halves && (t == DType::F16 || t == DType::BF16))) return t;
  c.fail(name + " must be " + (halves ? "float32, float16 or bfloat16" : "float32") + ", got " + c.shape(i).str());
}

// y = saturate(round_half_even(acc * multiplier + y_zero)) in y_zero's type, computed in f64.
Value requantize(const NodeCtx& c, Value acc, Value multiplier, Value y_zero, DType out) {
  auto& g = c.g();
  Value d = g.mul(g.cast(acc, DType::F64), g.cast(multiplier, DType::F64));
  d = g.act(ActKind::Round, g.add(d, g.cast(y_zero, DType::F64)));
  const double lo = out == DType::U8 ? 0 : -128, hi = out == DType::U8 ? 255 : 127;
  d = g.min(g.max(d, c.scalar_like(lo, DType::F64)), c.scalar_like(hi, DType::F64));
  return g.cast(d, out);
}

// The output zero point / scale of a QLinear op: one value (per tensor).
Value one_value_input(const NodeCtx& c, size_t i, const std::string& name) {
  if (!one_value(c.shape(i))) c.fail(name + " must be one value (per-tensor quantization), got " + c.shape(i).str());
  return as_scalar(c, c.value(i));
}

V matmul_integer(const NodeCtx& c) {
  c.allow_only({});
  need_int8(c, 0, "A");
  need_int8(c, 1, "B");
  const Shape& as = c.shape(0);
  const Shape& bs = c.shape(1);
  Value za = zero_point(c, 2, 0, "a_zero_point", "A");
  Value zb = zero_point(c, 3, 1, "b_zero_point", "B");
  za = per_line(c, za, as, true, true, "a_zero_point", "A");
  zb = per_line(c, zb, bs, false, true, "b_zero_point", "B");
  return {c.out(c.g().apply(ops::MatMulInteger{}, {c.value(0), c.value(1), za, zb}))};
}

V qlinear_matmul(const NodeCtx& c) {
  c.allow_only({});
  auto& g = c.g();
  need_int8(c, 0, "a");
  need_int8(c, 3, "b");
  need_int8(c, 7, "y_zero_point");
  const bool halves = c.opset() >= 21;
  const DType ts = scale_type(c, 1, "a_scale", halves);
  if (scale_type(c, 4, "b_scale", halves) != ts || scale_type(c, 6, "y_scale", halves) != ts)
    c.fail("a_scale " + c.shape(1).str() + ", b_scale " + c.shape(4).str() + " and y_scale " + c.shape(6).str() +
           " must have one type");
  const Shape& as = c.shape(0);
  const Shape& bs = c.shape(3);
  if (!one_value(c.shape(1)) || !one_value(c.shape(2)))
    if (c.shape(1).dims != c.shape(2).dims)
      c.fail("a_scale " + c.shape(1).str() + " and a_zero_point " + c.shape(2).str() + " must have the same shape");
  if (!one_value(c.shape(4)) || !one_value(c.shape(5)))
    if (c.shape(4).dims != c.shape(5).dims)
      c.fail("b_scale " + c.shape(4).str() + " and b_zero_point " + c.shape(5).str() + " must have the same shape");
  Value za = per_line(c, zero_point(c, 2, 0, "a_zero_point", "a"), as, true, true, "a_zero_point", "a");
  Value zb = per_line(c, zero_point(c, 5, 3, "b_zero_point", "b"), bs, false, true, "b_zero_point", "b");
  Value acc = g.apply(ops::MatMulInteger{}, {c.value(0), c.value(3), za, zb});
  // The multiplier per output element: a_scale (per row) * b_scale (per column) / y_scale.
  Value sa = per_line(c, c.value(1), as, true, false, "a_scale", "a");
  Value sb = per_line(c, c.value(4), bs, false, false, "b_scale", "b");
  Value mult = g.div(g.mul(sa, sb), one_value_input(c, 6, "y_scale"));
  if (g.shape(mult).rank() > g.shape(acc).rank())  // 1-d operands: the product lost a dim
    c.fail("per-row / per-column scales need 2-d or higher a and b, got " + as.str() + " and " + bs.str());
  const DType out = c.shape(7).dtype;
  return {c.out(requantize(c, acc, mult, one_value_input(c, 7, "y_zero_point"), out))};
}

// ConvInteger / QLinearConv: the i32 conv_integer of x (input xi, which must be 0: the window
// reads input 0) and w (input wi) with their zero points (inputs zxi, zwi), per the node's window
// attributes.
Value conv_integer_of(const NodeCtx& c, size_t xi, size_t wi, size_t zxi, size_t zwi, const char* x_name,
                      const char* w_name) {
  auto& g = c.g();
  need_int8(c, xi, x_name);
  need_int8(c, wi, w_name);
  const Window w = window(c, conv_kernel(c, wi));
  const int64_t group = c.i("group", 1);
  check_conv_group(c, wi, group);
  const std::string zx_name = std::string(x_name) + "_zero_point", zw_name = std::string(w_name) + "_zero_point";
  Value zx = zero_point(c, zxi, xi, zx_name, x_name);
  Value zw = zero_point(c, zwi, wi, zw_name, w_name);
  if (!one_value(g.shape(zx))) c.fail(zx_name + " must be one value (per-tensor), got " + g.shape(zx).str());
  const Shape& zws = g.shape(zw);
  const Dim& m = c.shape(wi).dims[0];
  if (one_value(zws)) zw = as_scalar(c, zw);
  else if (zws.rank() != 1 || zws.dims[0] != m)
    c.fail(zw_name + " must be one value or one per output channel (" + m.str() + "), got " + zws.str());
  ops::ConvInteger op;
  op.stride = w.strides;
  op.pads = w.pads;
  op.dilation = w.dilations;
  op.groups = group;
  return g.apply(op, {c.value(xi), c.value(wi), as_scalar(c, zx), zw});
}

V conv_integer(const NodeCtx& c) {
  c.allow_only({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  return {c.out(conv_integer_of(c, 0, 1, 2, 3, "x", "w"))};
}

V qlinear_conv(const NodeCtx& c) {
  c.allow_only({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  auto& g = c.g();
  need_int8(c, 7, "y_zero_point");
  scale_type(c, 1, "x_scale", false);
  scale_type(c, 4, "w_scale", false);
  scale_type(c, 6, "y_scale", false);
  Value acc = conv_integer_of(c, 0, 3, 2, 5, "x", "w");
  const Shape& ys = g.shape(acc);
  const Dim& m = c.shape(3).dims[0];
  // Bias: int32, one per output channel, added to the exact sum (wrapping like it).
  if (c.present(8)) {
    const Shape& bs = c.shape(8);
    if (bs.dtype != DType::I32 || bs.rank() != 1 || bs.dims[0] != m)
      c.fail("B must be int32 with one value per output channel (" + m.str() + "), got " + bs.str() +
             " (quantized with scale x_scale * w_scale and zero point 0)");
    std::vector<Dim> bshape(static_cast<size_t>(ys.rank()), Dim(1));
    bshape[1] = m;
    acc = g.add(acc, g.reshape(c.value(8), bshape));
  }
  // The multiplier x_scale * w_scale / y_scale in float32, per output channel when w_scale is.
  Value sw = c.value(4);
  const Shape& sws = c.shape(4);
  if (one_value(sws)) {
    sw = as_scalar(c, sw);
  } else {
    if (sws.rank() != 1 || sws.dims[0] != m)
      c.fail("w_scale must be one value or one per output channel (" + m.str() + "), got " + sws.str());
    std::vector<Dim> shape(static_cast<size_t>(ys.rank()), Dim(1));
    shape[1] = m;
    sw = g.reshape(sw, shape);
  }
  Value mult = g.div(g.mul(one_value_input(c, 1, "x_scale"), sw), one_value_input(c, 6, "y_scale"));
  return {c.out(requantize(c, acc, mult, one_value_input(c, 7, "y_zero_point"), c.shape(7).dtype))};
}

}  // namespace

void register_integer(ConverterTable& t) {
  t["MatMulInteger"] = matmul_integer;
  t["ConvInteger"] = conv_integer;
  t["QLinearMatMul"] = qlinear_matmul;
  t["QLinearConv"] = qlinear_conv;
}

}  // namespace rlx::onnx_io
