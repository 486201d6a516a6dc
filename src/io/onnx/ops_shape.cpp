// ONNX shape ops: Shape/Size, Reshape/Flatten/Squeeze/Unsqueeze, Transpose, Concat, Split,
// Slice, Expand, Tile, ConstantOfShape, Constant, Range, Pad, DepthToSpace/SpaceToDepth,
// EyeLike, Trilu. Shape values with symbolic entries travel as Val::dims.
#include <algorithm>
#include <cmath>
#include <limits>

#include "io/onnx/importer.h"
#include "io/onnx/proto.h"
#include "rlx/limits.h"

namespace rlx::onnx_io {
namespace {

using V = std::vector<Val>;

Tensor i64_tensor(const std::vector<int64_t>& v, bool scalar = false) {
  std::vector<int64_t> shape;
  if (!scalar) shape.push_back(static_cast<int64_t>(v.size()));
  return Tensor::i64(shape, v);
}

// The entries of an integer shape value when known (statically or symbolically).
std::optional<std::vector<Dim>> entries(const Val& v) {
  if (v.konst && is_int(v.konst->dtype()) && v.konst->rank() <= 1) {
    auto ints = v.konst->to_i64();
    return std::vector<Dim>(ints.begin(), ints.end());
  }
  if (v.dims) return v.dims;
  return std::nullopt;
}

std::vector<int64_t> static_dims(const NodeCtx& c, size_t i, const std::string& why) {
  const Shape& s = c.shape(i);
  if (!s.is_static()) c.fail(why + " needs a static input shape, got " + s.str());
  return s.concrete();
}

// Axes from the attribute (old opsets) or the optional input (newer ones).
std::optional<std::vector<int64_t>> axes_operand(const NodeCtx& c, int64_t input_since, size_t input_index) {
  if (c.opset() >= input_since) {
    if (!c.present(input_index)) return std::nullopt;
    return c.ints_input(input_index, "axes");
  }
  if (!c.has("axes")) return std::nullopt;
  return c.ints("axes");
}

V shape_op(const NodeCtx& c) {
  c.allow_only({"start", "end"});
  const auto& dims = c.shape(0).dims;
  const int64_t r = static_cast<int64_t>(dims.size());
  auto clampi = [&](int64_t v) { return std::clamp(v < 0 ? v + r : v, int64_t{0}, r); };
  const int64_t start = clampi(c.i("start", 0)), end = clampi(c.i("end", r));
  std::vector<Dim> out;
  for (int64_t i = start; i < end; ++i) out.push_back(dims[static_cast<size_t>(i)]);
  return {shape_val(out)};
}

V size_op(const NodeCtx& c) {
  c.allow_only({});
  const Shape& s = c.shape(0);
  if (!s.is_static()) c.fail("Size of a tensor with symbolic dims " + s.str() + " is not supported");
  return {Val::known(Tensor::scalar_i64(s.numel()))};
}

V reshape(const NodeCtx& c) {
  c.allow_only({"allowzero", "shape"});
  std::vector<Dim> target;
  if (c.opset() < 5) {
    auto v = c.ints("shape");
    target.assign(v.begin(), v.end());
  } else {
    target = c.dims_input(1, "shape");
  }
  const bool allowzero = c.i("allowzero", 0) != 0;
  const auto& in = c.shape(0).dims;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i].is_static() && target[i].value == 0 && !allowzero) {
      if (i >= in.size()) c.fail("shape entry " + std::to_string(i) + " is 0 (copy) but the input has rank " + std::to_string(in.size()));
      target[i] = in[i];
    }
  }
  const Val& x = c.in(0);
  if (x.dims && !x.konst) {  // reshaping a symbolic shape value (e.g. to 0-d or [1]) keeps it one
    if (target.size() <= 1 && (target.empty() || target[0] == Dim(static_cast<int64_t>(x.dims->size())) ||
                               target[0] == Dim(-1)))
      return {shape_val(*x.dims, target.empty())};
  }
  return {c.out(c.g().reshape(c.value(0), target))};
}

Dim dim_product(const std::vector<Dim>& dims, size_t from, size_t to, bool& ok) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) {
    if (dims[i].is_symbolic()) {
      if (to - from == 1) return dims[i];
      ok = false;
      return Dim(-1);
    }
    p *= dims[i].value;
  }
  return Dim(p);
}

V flatten(const NodeCtx& c) {
  c.allow_only({"axis"});
  const auto& dims = c.shape(0).dims;
  const int64_t r = static_cast<int64_t>(dims.size());
  int64_t axis = c.i("axis", 1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis > r) c.fail("axis " + std::to_string(c.i("axis", 1)) + " is out of range for rank " + std::to_string(r));
  bool ok_l = true, ok_r = true;
  Dim left = dim_product(dims, 0, static_cast<size_t>(axis), ok_l);
  Dim right = dim_product(dims, static_cast<size_t>(axis), dims.size(), ok_r);
  if (!ok_l && !ok_r) c.fail("cannot flatten " + c.shape(0).str() + ": symbolic dims on both sides of the axis");
  return {c.out(c.g().reshape(c.value(0), {left, right}))};
}

V squeeze(const NodeCtx& c) {
  c.allow_only({"axes"});
  const auto& dims = c.shape(0).dims;
  const int64_t r = static_cast<int64_t>(dims.size());
  auto axes = axes_operand(c, 13, 1);
  std::vector<bool> drop(dims.size(), false);
  if (axes) {
    for (int64_t a : *axes) {
      const int64_t n = normalize_axis(a, r, "Squeeze axes");
      if (dims[static_cast<size_t>(n)] != Dim(1)) c.fail("axis " + std::to_string(a) + " of " + c.shape(0).str() + " is not 1");
      drop[static_cast<size_t>(n)] = true;
    }
  } else {
    for (size_t i = 0; i < dims.size(); ++i) drop[i] = dims[i] == Dim(1);
  }
  std::vector<Dim> out;
  for (size_t i = 0; i < dims.size(); ++i)
    if (!drop[i]) out.push_back(dims[i]);
  const Val& x = c.in(0);
  if (x.dims && !x.konst && out.empty()) return {shape_val(*x.dims, true)};
  return {c.out(c.g().reshape(c.value(0), out))};
}

V unsqueeze(const NodeCtx& c) {
  c.allow_only({"axes"});
  const auto& dims = c.shape(0).dims;
  auto axes = axes_operand(c, 13, 1);
  if (!axes) c.fail("axes are required");
  const int64_t r = static_cast<int64_t>(dims.size() + axes->size());
  std::vector<bool> is_new(static_cast<size_t>(r), false);
  for (int64_t a : *axes) {
    const int64_t n = normalize_axis(a, r, "Unsqueeze axes");
    if (is_new[static_cast<size_t>(n)]) c.fail("axis " + std::to_string(a) + " is listed twice");
    is_new[static_cast<size_t>(n)] = true;
  }
  std::vector<Dim> out;
  size_t k = 0;
  for (int64_t i = 0; i < r; ++i) out.push_back(is_new[static_cast<size_t>(i)] ? Dim(1) : dims[k++]);
  const Val& x = c.in(0);
  if (x.dims && !x.konst && out.size() == 1) return {shape_val(*x.dims)};
  return {c.out(c.g().reshape(c.value(0), out))};
}

V transpose(const NodeCtx& c) {
  c.allow_only({"perm"});
  const int64_t r = c.shape(0).rank();
  std::vector<int64_t> perm = c.ints("perm");
  if (perm.empty())
    for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
  return {c.out(c.g().transpose(c.value(0), perm))};
}

V concat(const NodeCtx& c) {
  c.allow_only({"axis"});
  if (!c.has("axis")) c.fail("attribute 'axis' is required");
  // Concatenating shape values with symbolic entries makes another shape value.
  bool any_sym = false, all_entries = true;
  std::vector<Dim> joined;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    const Val& v = c.in(i);
    any_sym = any_sym || (v.dims && !v.konst);
    auto e = entries(v);
    if (!e || v.shape.rank() != 1) all_entries = false;
    else joined.insert(joined.end(), e->begin(), e->end());
  }
  if (any_sym && all_entries) return {shape_val(joined)};
  std::vector<Value> xs;
  for (size_t i = 0; i < c.num_inputs(); ++i) xs.push_back(c.value(i));
  return {c.out(c.g().concat(xs, c.i("axis", 0)))};
}

V split(const NodeCtx& c) {
  c.allow_only({"axis", "split", "num_outputs"});
  const auto& dims = c.shape(0).dims;
  const int64_t axis = normalize_axis(c.i("axis", 0), c.shape(0).rank(), "Split axis");
  const Dim& d = dims[static_cast<size_t>(axis)];
  if (d.is_symbolic()) c.fail("splitting symbolic dim '" + d.sym + "' is not supported");
  std::vector<int64_t> sizes;
  if (c.opset() >= 13 && c.present(1)) sizes = c.ints_input(1, "split");
  else if (c.opset() < 13 && c.has("split")) sizes = c.ints("split");
  const int64_t n = static_cast<int64_t>(c.num_outputs());
  if (n < 1) c.fail("the node has no outputs");
  if (sizes.empty()) {
    const int64_t parts = c.has("num_outputs") ? c.i("num_outputs", n) : n;
    if (parts != n) c.fail("num_outputs=" + std::to_string(parts) + " but the node has " + std::to_string(n) + " outputs");
    if (c.has("num_outputs")) {  // opset 18: chunks of ceil(d/n), the last one smaller
      const int64_t chunk = (d.value + n - 1) / n;
      for (int64_t i = 0, left = d.value; i < n; ++i, left -= chunk) sizes.push_back(std::max<int64_t>(0, std::min(chunk, left)));
    } else {
      if (d.value % n != 0) c.fail("dim " + std::to_string(d.value) + " does not split evenly into " + std::to_string(n));
      sizes.assign(static_cast<size_t>(n), d.value / n);
    }
  }
  if (static_cast<int64_t>(sizes.size()) != n)
    c.fail(std::to_string(sizes.size()) + " split sizes for " + std::to_string(n) + " outputs");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) c.fail("negative split size");
    total += s;
  }
  if (total != d.value) c.fail("split sizes add up to " + std::to_string(total) + ", not the dim " + std::to_string(d.value));
  V outs;
  int64_t start = 0;
  Value x = c.value(0);
  for (int64_t s : sizes) {
    outs.push_back(c.out(c.g().narrow(x, axis, start, s)));
    start += s;
  }
  return outs;
}

// The positions start, start + step, ... before end (start/end clamped to [-1, n]), counted
// first so that no i += step can overflow int64 (steps may be as large as INT64_MAX).
std::vector<int64_t> slice_positions(int64_t start, int64_t end, int64_t step) {
  const int64_t span = step > 0 ? end - start : start - end;
  const int64_t mag = step > 0 ? step : (step == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max() : -step);
  const int64_t count = span <= 0 ? 0 : (span - 1) / mag + 1;
  std::vector<int64_t> idx;
  for (int64_t k = 0; k < count; ++k) idx.push_back(step > 0 ? start + k * mag : start - k * mag);
  return idx;
}

// Slice one axis with a step; start/end already clamped per ONNX rules.
Value slice_axis(const NodeCtx& c, Value x, int64_t axis, int64_t start, int64_t end, int64_t step) {
  auto& g = c.g();
  if (step == 1) return g.narrow(x, axis, start, std::max<int64_t>(0, end - start));
  const std::vector<int64_t> idx = slice_positions(start, end, step);
  if (idx.empty()) return g.narrow(x, axis, 0, 0);
  return g.gather(x, g.constant(Tensor::i64({static_cast<int64_t>(idx.size())}, idx)), axis);
}

V slice(const NodeCtx& c) {
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset() < 10) {
    c.allow_only({"starts", "ends", "axes"});
    starts = c.ints("starts");
    ends = c.ints("ends");
    axes = c.ints("axes");
  } else {
    c.allow_only({});
    starts = c.ints_input(1, "starts");
    ends = c.ints_input(2, "ends");
    if (c.present(3)) axes = c.ints_input(3, "axes");
    if (c.present(4)) steps = c.ints_input(4, "steps");
  }
  const auto& dims = c.shape(0).dims;
  const int64_t r = static_cast<int64_t>(dims.size());
  if (axes.empty())
    for (int64_t i = 0; i < static_cast<int64_t>(starts.size()); ++i) axes.push_back(i);
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    c.fail("starts, ends, axes and steps must have the same length");
  const Val& xv = c.in(0);
  std::optional<std::vector<Dim>> sym = (xv.dims && !xv.konst && r == 1) ? xv.dims : std::nullopt;
  Value x{};
  if (!sym) x = c.value(0);
  std::vector<bool> seen(static_cast<size_t>(r), false);
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t axis = normalize_axis(axes[i], r, "Slice axes");
    if (seen[static_cast<size_t>(axis)]) c.fail("axis " + std::to_string(axes[i]) + " is sliced twice");
    seen[static_cast<size_t>(axis)] = true;
    const Dim& d = dims[static_cast<size_t>(axis)];
    if (d.is_symbolic()) c.fail("slicing symbolic dim '" + d.sym + "' is not supported");
    const int64_t n = d.value, step = steps[i];
    if (step == 0) c.fail("step 0");
    auto clampv = [&](int64_t v, int64_t lo, int64_t hi) {
      if (v < 0) v += n;
      return std::clamp(v, lo, hi);
    };
    int64_t s, e;
    if (step > 0) {
      s = clampv(starts[i], 0, n);
      e = clampv(ends[i], 0, n);
    } else if (n == 0) {  // nothing to take (and clamp's range [0, n - 1] would be empty)
      s = e = -1;
    } else {
      s = clampv(starts[i], 0, n - 1);
      e = ends[i] < -n ? -1 : clampv(ends[i], -1, n - 1);
    }
    if (sym) {
      std::vector<Dim> picked;
      for (int64_t k : slice_positions(s, e, step)) picked.push_back((*sym)[static_cast<size_t>(k)]);
      return {shape_val(picked)};
    }
    x = slice_axis(c, x, axis, s, e, step);
  }
  if (sym) return {shape_val(*sym)};
  return {c.out(x)};
}

V expand(const NodeCtx& c) {
  c.allow_only({});
  const auto target = c.dims_input(1, "shape");
  for (const Dim& d : target)
    if (d.is_static() && d.value < 0) c.fail("shape " + dims_str(target) + " has a negative entry");
  const auto b = broadcast_dims(c.shape(0).dims, target);
  if (!b) c.fail("cannot broadcast " + c.shape(0).str() + " to " + dims_str(target));
  return {c.out(c.g().expand(c.value(0), *b))};
}

V tile(const NodeCtx& c) {
  c.allow_only({});
  const auto reps = c.ints_input(1, "repeats");
  const auto& dims = c.shape(0).dims;
  if (reps.size() != dims.size()) c.fail("repeats has " + std::to_string(reps.size()) + " entries for rank " + std::to_string(dims.size()));
  std::vector<Dim> inter, big, out;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (reps[i] < 0) c.fail("negative repeat");
    if (dims[i].is_symbolic()) c.fail("tiling symbolic dim '" + dims[i].sym + "' is not supported");
    inter.push_back(1);
    inter.push_back(dims[i]);
    big.push_back(reps[i]);
    big.push_back(dims[i]);
    out.push_back(checked_mul(reps[i], dims[i].value, c.where() + " output dim " + std::to_string(i)));
  }
  std::vector<int64_t> out_static;
  for (const Dim& d : out) out_static.push_back(d.value);
  checked_nbytes(out_static, c.shape(0).dtype, c.where() + " output");
  auto& g = c.g();
  Value x = g.reshape(c.value(0), inter);
  return {c.out(g.reshape(g.expand(x, big), out))};
}

V constant_of_shape(const NodeCtx& c) {
  c.allow_only({"value"});
  Tensor v = c.has("value") ? c.tensor_attr("value") : full_tensor(DType::F32, {1}, 0.0);
  if (v.numel() != 1) c.fail("'value' must hold exactly one element");
  const auto dims = c.dims_input(0, "shape");
  bool all_static = std::all_of(dims.begin(), dims.end(), [](const Dim& d) { return d.is_static(); });
  const Tensor scalar = v.reshaped({});
  if (all_static) {
    std::vector<int64_t> shape;
    for (const Dim& d : dims) {
      if (d.value < 0) c.fail("negative dim in shape " + dims_str(dims));
      shape.push_back(d.value);
    }
    return {Val::known(full_tensor(v.dtype(), shape, v.to_f64()[0]))};
  }
  return {c.out(c.g().expand(c.g().constant(scalar), dims))};
}

V constant(const NodeCtx& c) {
  if (c.node().attribute_size() != 1) c.fail("needs exactly one value attribute");
  const auto& a = c.node().attribute(0);
  const std::string& n = a.name();
  if (n == "value") return {Val::known(c.tensor_attr("value"))};
  if (n == "value_float") return {Val::known(Tensor::scalar_f32(a.f()))};
  if (n == "value_floats") {
    std::vector<float> v(a.floats().begin(), a.floats().end());
    return {Val::known(Tensor::f32({static_cast<int64_t>(v.size())}, v))};
  }
  if (n == "value_int") return {Val::known(Tensor::scalar_i64(a.i()))};
  if (n == "value_ints") return {Val::known(i64_tensor({a.ints().begin(), a.ints().end()}))};
  c.fail("attribute '" + n + "' is not supported (strings and sparse tensors have no rlx type)");
}

V range(const NodeCtx& c) {
  c.allow_only({});
  const Tensor& st = c.konst(0, "start");
  const Tensor& li = c.konst(1, "limit");
  const Tensor& de = c.konst(2, "delta");
  if (st.numel() != 1 || li.numel() != 1 || de.numel() != 1) c.fail("start, limit and delta must be scalars");
  const DType dt = st.dtype();
  if (li.dtype() != dt || de.dtype() != dt)
    c.fail(std::string("start, limit and delta must have one type, got ") + dtype_name(dt) + ", " +
           dtype_name(li.dtype()) + ", " + dtype_name(de.dtype()));
  // Range is computed at import time: its element count is capped like any folded constant.
  const int64_t cap = std::min<int64_t>(kMaxFoldElements, active_limits().max_tensor_elements);
  auto too_many = [&](const std::string& count) {
    c.fail("the range has " + count + " elements, more than the " + std::to_string(cap) +
           " rlx computes at import time");
  };
  if (is_float(dt)) {
    const double s = st.to_f64()[0], l = li.to_f64()[0], d = de.to_f64()[0];
    if (!std::isfinite(s) || !std::isfinite(l) || !std::isfinite(d))
      c.fail("start, limit and delta must be finite, got " + std::to_string(s) + ", " + std::to_string(l) + ", " +
             std::to_string(d));
    if (d == 0) c.fail("delta is 0");
    const double count = std::ceil((l - s) / d);  // checked before the conversion to an integer
    if (!(count <= static_cast<double>(cap))) too_many(std::to_string(count));
    const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
    std::vector<double> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = s + static_cast<double>(i) * d;
    if (dt == DType::F32) {  // accumulate in the element type like the reference
      std::vector<float> f(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) f[static_cast<size_t>(i)] = static_cast<float>(s) + static_cast<float>(i) * static_cast<float>(d);
      return {Val::known(Tensor::f32({n}, f))};
    }
    return {Val::known(Tensor::f64({n}, v).cast(dt))};
  }
  const int64_t s = st.to_i64()[0], l = li.to_i64()[0], d = de.to_i64()[0];
  if (d == 0) c.fail("delta is 0");
  // In 128 bits: l - s and the rounding cannot overflow.
  const __int128 span = static_cast<__int128>(l) - s, step = d;
  const __int128 n128 = std::max<__int128>(0, (span + step + (step > 0 ? -1 : 1)) / step);
  if (n128 > cap) too_many(n128 > std::numeric_limits<int64_t>::max() ? std::string("more than 2^63") : std::to_string(static_cast<int64_t>(n128)));
  const auto n = static_cast<int64_t>(n128);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = s + i * d;
  return {Val::known(Tensor::i64({n}, v).cast(dt))};
}

V pad(const NodeCtx& c) {
  const std::string mode = c.s("mode", "constant");
  PadMode m;
  if (mode == "constant") m = PadMode::Constant;
  else if (mode == "reflect") m = PadMode::Reflect;
  else if (mode == "edge") m = PadMode::Edge;
  else c.fail("mode '" + mode + "' is not supported (constant, reflect, edge)");
  const int64_t r = c.shape(0).rank();
  std::vector<int64_t> pads;
  double value = 0.0;
  if (c.opset() < 11) {
    c.allow_only({"mode", "pads", "paddings", "value"});
    pads = c.has("pads") ? c.ints("pads") : c.ints("paddings");
    value = c.f("value", 0.0);
  } else {
    c.allow_only({"mode"});
    pads = c.ints_input(1, "pads");
    if (c.present(2)) {
      const Tensor& v = c.konst(2, "constant_value");
      if (v.numel() != 1) c.fail("constant_value must hold one value");
      value = v.to_f64()[0];
    }
    if (c.present(3)) {  // axes: pads lists begins then ends for these axes only
      const auto axes = c.ints_input(3, "axes");
      if (pads.size() != 2 * axes.size()) c.fail("pads must have 2 entries per axis");
      std::vector<int64_t> full(static_cast<size_t>(2 * r), 0);
      for (size_t i = 0; i < axes.size(); ++i) {
        const int64_t a = normalize_axis(axes[i], r, "Pad axes");
        full[static_cast<size_t>(a)] = pads[i];
        full[static_cast<size_t>(a + r)] = pads[i + axes.size()];
      }
      pads = full;
    }
  }
  if (static_cast<int64_t>(pads.size()) != 2 * r)
    c.fail("pads has " + std::to_string(pads.size()) + " entries; rank " + std::to_string(r) + " needs " + std::to_string(2 * r));
  // Each padded length (begin + dim + end, pads may be negative) checked before the IR sees it.
  for (int64_t i = 0; i < r; ++i) {
    const Dim& d = c.shape(0).dims[static_cast<size_t>(i)];
    const int64_t pb = pads[static_cast<size_t>(i)], pe = pads[static_cast<size_t>(i + r)];
    const int64_t lim = active_limits().max_tensor_elements;
    if (pb > lim || pe > lim || pb < -lim || pe < -lim)
      c.fail("pads for axis " + std::to_string(i) + " (" + std::to_string(pb) + ", " + std::to_string(pe) +
             ") exceed the tensor size limit " + std::to_string(lim));
    if (d.is_static() && d.value + pb + pe < 0)
      c.fail("pads (" + std::to_string(pb) + ", " + std::to_string(pe) + ") crop more than the " +
             std::to_string(d.value) + " elements of axis " + std::to_string(i));
  }
  ops::Pad p;
  p.mode = m;
  p.pads = pads;
  p.value = value;
  return {c.out(c.g().apply(p, {c.value(0)}))};
}

V depth_to_space(const NodeCtx& c, bool to_space) {
  if (to_space) c.allow_only({"blocksize", "mode"});
  else c.allow_only({"blocksize"});  // SpaceToDepth has no mode
  const auto d = static_dims(c, 0, to_space ? "DepthToSpace" : "SpaceToDepth");
  if (d.size() != 4) c.fail("needs a 4-d input");
  const int64_t b = c.i("blocksize", 0);
  if (b <= 0) c.fail("blocksize must be positive");
  const int64_t N = d[0], C = d[1], H = d[2], W = d[3];
  if (b > (int64_t{1} << 20)) c.fail("blocksize " + std::to_string(b) + " is larger than any dim can be");
  auto& g = c.g();
  Value x = c.value(0);
  if (to_space) {
    if (C % (b * b) != 0) c.fail("channels are not divisible by blocksize^2");
    const std::string mode = c.s("mode", "DCR");
    if (mode == "DCR") {
      x = g.reshape(x, {N, b, b, C / (b * b), H, W});
      x = g.transpose(x, {0, 3, 4, 1, 5, 2});
    } else if (mode == "CRD") {
      x = g.reshape(x, {N, C / (b * b), b, b, H, W});
      x = g.transpose(x, {0, 1, 4, 2, 5, 3});
    } else {
      c.fail("mode '" + mode + "' is not DCR or CRD");
    }
    return {c.out(g.reshape(x, {N, C / (b * b), H * b, W * b}))};
  }
  if (H % b != 0 || W % b != 0) c.fail("height and width must be divisible by blocksize");
  x = g.reshape(x, {N, C, H / b, b, W / b, b});
  x = g.transpose(x, {0, 3, 5, 1, 2, 4});
  return {c.out(g.reshape(x, {N, C * b * b, H / b, W / b}))};
}

V eye_like(const NodeCtx& c) {
  c.allow_only({"dtype", "k"});
  const auto d = static_dims(c, 0, "EyeLike");
  if (d.size() != 2) c.fail("needs a 2-d input");
  const DType dt = c.has("dtype") ? dtype_from_onnx(static_cast<int32_t>(c.i("dtype", 1)), c.where()) : c.shape(0).dtype;
  const int64_t k = c.i("k", 0);
  if (checked_numel(d, c.where() + " output") > kMaxFoldElements)
    c.fail("the output " + dims_str(d) + " is larger than the " + std::to_string(kMaxFoldElements) +
           " elements rlx builds at import time");
  std::vector<double> v(static_cast<size_t>(d[0] * d[1]), 0.0);
  for (int64_t i = 0; i < d[0]; ++i)
    if (i + k >= 0 && i + k < d[1]) v[static_cast<size_t>(i * d[1] + i + k)] = 1.0;
  return {Val::known(Tensor::f64(d, v).cast(dt))};
}

V trilu(const NodeCtx& c) {
  c.allow_only({"upper"});
  const auto& dims = c.shape(0).dims;
  if (dims.size() < 2) c.fail("needs rank >= 2");
  const Dim& dn = dims[dims.size() - 2];
  const Dim& dm = dims[dims.size() - 1];
  if (dn.is_symbolic() || dm.is_symbolic()) c.fail("the last two dims must be static");
  const int64_t k = c.present(1) ? c.scalar_input(1, "k") : 0;
  const bool upper = c.i("upper", 1) != 0;
  const int64_t n = dn.value, m = dm.value;
  if (checked_mul(n, m, c.where() + " mask") > kMaxFoldElements)
    c.fail("the last two dims " + std::to_string(n) + " x " + std::to_string(m) + " exceed the " +
           std::to_string(kMaxFoldElements) + "-element mask rlx builds at import time");
  std::vector<uint8_t> mask(static_cast<size_t>(n * m));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) mask[static_cast<size_t>(i * m + j)] = upper ? (j - i >= k) : (j - i <= k);
  auto& g = c.g();
  Value keep = g.constant(Tensor::boolean({n, m}, mask));
  return {c.out(g.where(keep, c.value(0), c.scalar_like(0.0, c.shape(0).dtype)))};
}

}  // namespace

void register_shape(ConverterTable& t) {
  t["Shape"] = shape_op;
  t["Size"] = size_op;
  t["Reshape"] = reshape;
  t["Flatten"] = flatten;
  t["Squeeze"] = squeeze;
  t["Unsqueeze"] = unsqueeze;
  t["Transpose"] = transpose;
  t["Concat"] = concat;
  t["Split"] = split;
  t["Slice"] = slice;
  t["Expand"] = expand;
  t["Tile"] = tile;
  t["ConstantOfShape"] = constant_of_shape;
  t["Constant"] = constant;
  t["Range"] = range;
  t["Pad"] = pad;
  t["DepthToSpace"] = [](const NodeCtx& c) { return depth_to_space(c, true); };
  t["SpaceToDepth"] = [](const NodeCtx& c) { return depth_to_space(c, false); };
  t["EyeLike"] = eye_like;
  t["Trilu"] = trilu;
}

}  // namespace rlx::onnx_io
