// Smaller ONNX ops: window functions (Hann, Hamming, Blackman), CenterCropPad, CumProd, DFT,
// QuantizeLinear/DequantizeLinear/DynamicQuantizeLinear (the integer types, float8 and float4:
// per tensor, per axis and blocked).
#include <cmath>
#include <numbers>
#include <numeric>

#include "io/onnx/importer.h"
#include "io/onnx/proto.h"

namespace rlx::onnx_io {
namespace {

using V = std::vector<Val>;

enum class Window { Hann, Hamming, Blackman };

V window_op(const NodeCtx& c, Window w) {
  c.allow_only({"output_datatype", "periodic"});
  const int64_t size = c.scalar_input(0, "size");
  if (size < 0 || size > kMaxFoldElements) c.fail("size " + std::to_string(size) + " is out of range");
  const DType dt = dtype_from_onnx(static_cast<int32_t>(c.i("output_datatype", 1)), c.where());
  const double n = static_cast<double>(c.i("periodic", 1) != 0 ? size : size - 1);
  std::vector<double> v(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    const double x = 2 * std::numbers::pi * static_cast<double>(i) / n;
    switch (w) {
      case Window::Hann: v[static_cast<size_t>(i)] = 0.5 - 0.5 * std::cos(x); break;
      case Window::Hamming: v[static_cast<size_t>(i)] = 25.0 / 46.0 - (21.0 / 46.0) * std::cos(x); break;
      case Window::Blackman: v[static_cast<size_t>(i)] = 0.42 - 0.5 * std::cos(x) + 0.08 * std::cos(2 * x); break;
    }
  }
  return {Val::known(Tensor::f64({size}, v).cast(dt))};
}

V center_crop_pad(const NodeCtx& c) {
  c.allow_only({"axes"});
  auto& g = c.g();
  const auto target = c.ints_input(1, "shape");
  const Shape& xs = c.shape(0);
  const int64_t r = xs.rank();
  std::vector<int64_t> axes = c.ints("axes");
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  if (axes.size() != target.size()) c.fail("shape must have one entry per axis");
  Value x = c.value(0);
  std::vector<int64_t> pads(static_cast<size_t>(2 * r), 0);
  bool any_pad = false;
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = normalize_axis(axes[i], r, "CenterCropPad axes");
    const Dim& d = xs.dims[static_cast<size_t>(a)];
    if (d.is_symbolic()) c.fail("symbolic dim '" + d.sym + "'");
    const int64_t want = target[i];
    if (want < 0) c.fail("negative target size");
    if (want < d.value) x = g.narrow(x, a, (d.value - want) / 2, want);
    if (want > d.value) {
      pads[static_cast<size_t>(a)] = (want - d.value) / 2;
      pads[static_cast<size_t>(a + r)] = want - d.value - (want - d.value) / 2;
      any_pad = true;
    }
  }
  if (any_pad) {
    ops::Pad p;
    p.pads = pads;
    x = g.apply(p, {x});
  }
  return {c.out(any_pad ? x : g.expand(x, g.shape(x).dims))};
}

V cumprod(const NodeCtx& c) {
  c.allow_only({"exclusive", "reverse"});
  auto& g = c.g();
  const Shape& xs = c.shape(0);
  const int64_t axis = normalize_axis(c.scalar_input(1, "axis"), xs.rank(), "CumProd axis");
  const Dim& d = xs.dims[static_cast<size_t>(axis)];
  if (d.is_symbolic() || d.value > 4096) c.fail("needs a static axis of at most 4096 elements");
  const bool exclusive = c.i("exclusive", 0) != 0, reverse = c.i("reverse", 0) != 0;
  const int64_t n = d.value;
  if (n == 0) return {c.out(g.expand(c.value(0), xs.dims))};
  Value x = c.value(0);
  std::vector<Value> out(static_cast<size_t>(n));
  auto at = [&](int64_t i) { return g.narrow(x, axis, i, 1); };
  Value one = g.expand(c.scalar_like(1.0, xs.dtype), g.shape(at(0)).dims);
  Value acc = one;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = reverse ? n - 1 - k : k;
    if (exclusive) {
      out[static_cast<size_t>(i)] = acc;
      acc = g.mul(acc, at(i));
    } else {
      acc = k == 0 ? at(i) : g.mul(acc, at(i));
      out[static_cast<size_t>(i)] = acc;
    }
  }
  return {c.out(g.concat(out, axis))};
}

// The scale (or zero point) broadcast against x: a scalar, per-axis 1-d, or blocked.
Value per_axis(const NodeCtx& c, Value v, const Shape& xs, int64_t axis_attr, int64_t block) {
  auto& g = c.g();
  const Shape& vs = g.shape(v);
  if (block < 0) c.fail("block_size is " + std::to_string(block) + "; it must be >= 0");
  if (vs.rank() == 0 || (vs.rank() == 1 && vs.dims[0] == Dim(1) && block == 0)) return v;
  const int64_t axis = normalize_axis(axis_attr, xs.rank(), "axis");
  if (block > 0) {  // same rank as x; repeat each entry `block` times along the axis
    if (vs.rank() != xs.rank()) c.fail("blocked scale must have the input's rank");
    const Dim& n = xs.dims[static_cast<size_t>(axis)];
    if (n.is_symbolic()) c.fail("blocked quantization needs a static axis");
    std::vector<int64_t> idx(static_cast<size_t>(n.value));
    for (int64_t i = 0; i < n.value; ++i) idx[static_cast<size_t>(i)] = i / block;
    return g.gather(v, g.constant(Tensor::i64({n.value}, idx)), axis);
  }
  if (vs.rank() != 1) c.fail("scale must be a scalar or 1-d, got " + vs.str());
  if (vs.dims[0] != xs.dims[static_cast<size_t>(axis)])
    c.fail("the per-axis scale/zero point " + vs.str() + " must have one entry per element of axis " +
           std::to_string(axis) + " of " + xs.str());
  std::vector<Dim> shape(static_cast<size_t>(xs.rank()), Dim(1));
  shape[static_cast<size_t>(axis)] = vs.dims[0];
  return g.reshape(v, shape);
}

V dequantize(const NodeCtx& c) {
  c.allow_only({"axis", "block_size", "output_dtype"});
  auto& g = c.g();
  const Shape& xs = c.shape(0);
  if (!is_int(xs.dtype) && !is_narrow_int(xs.dtype) && !is_narrow_float(xs.dtype))
    c.fail("input must be an integer, float8 or float4 tensor, got " + xs.str());
  const int64_t axis = c.i("axis", 1);
  const int64_t block = c.i("block_size", 0);
  DType out = c.shape(1).dtype;
  if (c.i("output_dtype", 0) != 0) out = dtype_from_onnx(static_cast<int32_t>(c.i("output_dtype", 0)), c.where());
  const DType work = out == DType::F64 ? DType::F64 : DType::F32;
  Value x = g.cast(c.value(0), work);
  // The float formats have no zero point (float8's must be 0; float4's is not used, as in the
  // reference implementation).
  if (c.present(2) && !is_narrow_float(xs.dtype)) x = g.sub(x, per_axis(c, g.cast(c.value(2), work), xs, axis, block));
  Value y = g.mul(x, per_axis(c, c.cast_to(c.value(1), work), xs, axis, block));
  return {c.out(c.cast_to(y, out))};
}

V quantize(const NodeCtx& c) {
  c.allow_only({"axis", "block_size", "output_dtype", "saturate", "precision"});
  auto& g = c.g();
  const Shape& xs = c.shape(0);
  const int64_t axis = c.i("axis", 1);
  const int64_t block = c.i("block_size", 0);
  DType out = c.present(2) ? c.shape(2).dtype : DType::U8;
  if (c.i("output_dtype", 0) != 0) out = dtype_from_onnx(static_cast<int32_t>(c.i("output_dtype", 0)), c.where());
  const bool float_out = is_narrow_float(out) && out != DType::F8E8M0;
  double lo = 0, hi = 0;
  switch (out) {
    case DType::U8: lo = 0, hi = 255; break;
    case DType::I8: lo = -128, hi = 127; break;
    case DType::U16: lo = 0, hi = 65535; break;
    case DType::I16: lo = -32768, hi = 32767; break;
    case DType::I32: lo = -2147483648.0, hi = 2147483647.0; break;
    case DType::U4: lo = 0, hi = 15; break;
    case DType::I4: lo = -8, hi = 7; break;
    case DType::U2: lo = 0, hi = 3; break;
    case DType::I2: lo = -2, hi = 1; break;
    default:
      if (!float_out)
        c.fail(std::string("output type ") + dtype_name(out) +
               " is not supported (uint2/4/8/16, int2/4/8/16/32, float8 e4m3fn/e4m3fnuz/e5m2/e5m2fnuz, float4e2m1)");
  }
  // The division x / y_scale (and its rounding, half to even) is done in the precision the
  // operator names: the `precision` attribute, else y_scale's type (a wider type would round
  // values near halfway points differently); the zero point is added exactly after.
  const DType scale_t = c.shape(1).dtype;
  const DType div_t = c.has("precision") ? dtype_from_onnx(static_cast<int32_t>(c.i("precision", 0)), c.where()) : scale_t;
  if (!is_float(div_t)) c.fail(std::string("the division precision must be a float type, got ") + dtype_name(div_t));
  if (!is_float(scale_t)) c.fail("y_scale must be a float tensor, got " + c.shape(1).str());
  if (float_out) {
    // y = cast(x / y_scale) rounded to nearest even by the cast, saturating unless saturate=0
    // (float4 always saturates); float8's zero point is 0, float4's is added before the cast.
    Value q = g.div(c.cast_to(c.value(0), div_t), per_axis(c, c.cast_to(c.value(1), div_t), xs, axis, block));
    if (out == DType::F4E2M1 && c.present(2)) q = g.add(q, per_axis(c, g.cast(c.value(2), div_t), xs, axis, block));
    ops::Cast cast;
    cast.to = out;
    cast.saturate = c.i("saturate", 1) != 0;
    return {c.out(g.apply(cast, {q}))};
  }
  const DType work = DType::F64;
  Value q = g.act(ActKind::Round, g.div(c.cast_to(c.value(0), div_t), per_axis(c, c.cast_to(c.value(1), div_t), xs, axis, block)));
  q = c.cast_to(q, work);
  if (c.present(2)) q = g.add(q, per_axis(c, g.cast(c.value(2), work), xs, axis, block));
  q = g.min(g.max(q, c.scalar_like(lo, work)), c.scalar_like(hi, work));
  return {c.out(g.cast(q, out))};
}

// The operator's definition, every step in float32 like the spec (x is float32):
//   y_scale = (max(0, max x) - min(0, min x)) / 255
//   y_zero_point = saturate(round(0 - min(0, min x) / y_scale))
//   y = saturate(round(x / y_scale) + y_zero_point)
// with round half to even (ActKind::Round) and saturate to [0, 255]. An all-zero x has
// y_scale 0: y and the zero point are then 0 (dividing by 1 instead of 0).
V dynamic_quantize(const NodeCtx& c) {
  c.allow_only({});
  auto& g = c.g();
  const DType dt = c.shape(0).dtype;
  if (dt != DType::F32) c.fail("x must be float32 (the only type the operator allows), got " + c.shape(0).str());
  Value x = c.value(0);
  const auto w = [&](double v) { return c.scalar_like(v, DType::F32); };
  Value hi = g.max(g.reduce(ReduceKind::Max, x, {}, false), w(0));
  Value lo = g.min(g.reduce(ReduceKind::Min, x, {}, false), w(0));
  Value scale = g.div(g.sub(hi, lo), w(255));
  Value divisor = g.where(g.compare(CompareKind::Eq, scale, w(0)), w(1), scale);
  Value zp = g.min(g.max(g.act(ActKind::Round, g.sub(w(0), g.div(lo, divisor))), w(0)), w(255));
  Value q = g.add(g.act(ActKind::Round, g.div(x, divisor)), zp);
  q = g.min(g.max(q, w(0)), w(255));
  return {c.out(g.cast(q, DType::U8)), c.out(scale), c.out(g.cast(zp, DType::U8))};
}

// DFT as two matmuls with constant cosine/sine matrices over the (static) signal axis.
V dft(const NodeCtx& c) {
  c.allow_only({"axis", "inverse", "onesided"});
  auto& g = c.g();
  const Shape& xs = c.shape(0);
  if (!xs.is_static() || xs.rank() < 2) c.fail("needs a static input of rank >= 2");
  const auto d = xs.concrete();
  const int64_t r = xs.rank();
  const int64_t comp = d.back();
  if (comp != 1 && comp != 2) c.fail("the last dim must be 1 (real) or 2 (complex)");
  int64_t axis = c.opset() >= 20 ? (c.present(2) ? c.scalar_input(2, "axis") : -2) : c.i("axis", 1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r - 1) c.fail("axis must name a signal dim (not the last one)");
  const bool inverse = c.i("inverse", 0) != 0, onesided = c.i("onesided", 0) != 0;
  if (inverse && onesided) c.fail("inverse with onesided=1 is not supported");
  const int64_t n_in = d[static_cast<size_t>(axis)];
  const int64_t L = c.present(1) ? c.scalar_input(1, "dft_length") : n_in;
  if (L <= 0 || L > 4096) c.fail("dft_length must be in [1, 4096]");
  const int64_t m = onesided ? L / 2 + 1 : L;
  // Signal to (..., L) real and imaginary parts, the axis moved last.
  Value x = c.cast_to(c.value(0), DType::F64);
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < r - 1; ++i)
    if (i != axis) perm.push_back(i);
  perm.push_back(axis);
  perm.push_back(r - 1);
  x = g.transpose(x, perm);  // (..., n_in, comp)
  const int64_t keep = std::min(n_in, L);
  if (keep < n_in) x = g.narrow(x, r - 2, 0, keep);
  if (L > keep) {
    ops::Pad p;
    p.pads.assign(static_cast<size_t>(2 * r), 0);
    p.pads[static_cast<size_t>(2 * r - 2)] = L - keep;
    x = g.apply(p, {x});
  }
  auto part = [&](int64_t k) {
    auto dims = g.shape(x).dims;
    dims.pop_back();
    return g.reshape(g.narrow(x, r - 1, k, 1), dims);
  };
  Value xr = part(0);
  std::optional<Value> xi;
  if (comp == 2) xi = part(1);
  std::vector<double> cm(static_cast<size_t>(L * m)), sm(static_cast<size_t>(L * m));
  for (int64_t n = 0; n < L; ++n)
    for (int64_t k = 0; k < m; ++k) {
      const double th = 2 * std::numbers::pi * static_cast<double>((n * k) % L) / static_cast<double>(L);
      cm[static_cast<size_t>(n * m + k)] = std::cos(th);
      sm[static_cast<size_t>(n * m + k)] = std::sin(th);
    }
  Value C = g.constant(Tensor::f64({L, m}, cm)), S = g.constant(Tensor::f64({L, m}, sm));
  // forward: Yr = xr C + xi S, Yi = xi C - xr S; inverse: Yr = xr C - xi S, Yi = xi C + xr S (then / L)
  Value yr = g.matmul(xr, C);
  Value yi = g.act(ActKind::Neg, g.matmul(xr, S));
  if (inverse) yi = g.act(ActKind::Neg, yi);
  if (xi) {
    Value xis = g.matmul(*xi, S);
    yr = inverse ? g.sub(yr, xis) : g.add(yr, xis);
    yi = g.add(yi, g.matmul(*xi, C));
  }
  if (inverse) {
    yr = g.div(yr, c.scalar_like(static_cast<double>(L), DType::F64));
    yi = g.div(yi, c.scalar_like(static_cast<double>(L), DType::F64));
  }
  auto dims = g.shape(yr).dims;
  dims.push_back(1);
  Value y = g.concat({g.reshape(yr, dims), g.reshape(yi, dims)}, r - 1);  // (..., m, 2)
  std::vector<int64_t> back(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) back[static_cast<size_t>(perm[static_cast<size_t>(i)])] = i;
  return {c.out(c.cast_to(g.transpose(y, back), xs.dtype))};
}

}  // namespace

void register_misc(ConverterTable& t) {
  t["HannWindow"] = [](const NodeCtx& c) { return window_op(c, Window::Hann); };
  t["HammingWindow"] = [](const NodeCtx& c) { return window_op(c, Window::Hamming); };
  t["BlackmanWindow"] = [](const NodeCtx& c) { return window_op(c, Window::Blackman); };
  t["CenterCropPad"] = center_crop_pad;
  t["CumProd"] = cumprod;
  t["DFT"] = dft;
  t["DequantizeLinear"] = dequantize;
  t["QuantizeLinear"] = quantize;
  t["DynamicQuantizeLinear"] = dynamic_quantize;
}

}  // namespace rlx::onnx_io
