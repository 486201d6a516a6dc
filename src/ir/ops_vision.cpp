// Shape inference for the vision ops: Conv, ConvInteger, ConvTranspose, Pool, Resize, Pad, Im2Col.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "rlx/error.h"
#include "ir/infer_util.h"
#include "rlx/ops.h"

namespace rlx {
namespace {

using std::to_string;

std::string list_str(const std::vector<int64_t>& v) { return dims_str(v); }

std::string list_str(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// An optional per-axis attribute: empty (-> n copies of `def`) or exactly n values >= min_value.
std::vector<int64_t> spatial_attr(const std::vector<int64_t>& v, size_t n, int64_t def, int64_t min_value,
                                  const std::string& name) {
  if (v.empty()) return std::vector<int64_t>(n, def);
  check(v.size() == n, name + " must be empty or have " + to_string(n) + " values, got " + list_str(v));
  for (int64_t x : v)
    check(x >= min_value, name + " values must be >= " + to_string(min_value) + ", got " + list_str(v));
  return v;
}

void check_float(const Shape& s, const std::string& what) {
  check(is_float(s.dtype), what + " must be a float tensor (f32, f16, bf16 or f64), got " + s.str());
}

int64_t static_dim(const Shape& s, int64_t i, const std::string& what) {
  check(s[i].is_static(), what + " (dim " + to_string(i) + " of " + s.str() + ") must be static");
  return s[i].value;
}

void check_static_shape(const Shape& s, const std::string& what) {
  check(s.is_static(), what + " must have static dims, got " + s.str());
}

// Output length of a sliding window along one spatial axis (`axis` counts spatial dims).
// Floor mode: floor((in + pb + pe - extent) / stride) + 1. Ceil mode rounds up, then drops a
// last window that would start past the input and the left padding.
Dim window_out(const Shape& x, int64_t axis, int64_t k, int64_t stride, int64_t pb, int64_t pe, int64_t dil,
               bool ceil_mode) {
  const Dim& in = x[2 + axis];
  const std::string what = "window along spatial dim " + to_string(axis) + " of " + x.str();
  const int64_t extent = infer::add(infer::mul(dil, k - 1, what + ": dilation x (kernel - 1)"), 1, what);
  if (in.is_symbolic()) {
    check(stride == 1 && infer::add(pb, pe, what + ": pads") == extent - 1,
          "spatial dim " + to_string(axis) + " of " + x.str() +
              " is symbolic; its output size needs a static value unless stride is 1 and the pads sum to "
              "dilation*(kernel-1) (a same-size window)");
    return in;
  }
  const int64_t padded = infer::add(infer::add(in.value, pb, what + ": padded size"), pe, what + ": padded size");
  check(padded >= extent, "kernel extent " + to_string(extent) + " (kernel " + to_string(k) + ", dilation " +
                              to_string(dil) + ") is larger than the padded input " + to_string(padded) +
                              " along spatial dim " + to_string(axis) + " of " + x.str() + " (pads " +
                              to_string(pb) + "+" + to_string(pe) + ")");
  const int64_t span = padded - extent;
  int64_t out = ceil_mode ? infer::add(span, stride - 1, what) / stride + 1 : span / stride + 1;
  if (ceil_mode && infer::mul(out - 1, stride, what) >= infer::add(in.value, pb, what)) --out;
  return Dim(out);
}

// Checks x has rank 3..5 (N, C, 1..3 spatial dims); returns the spatial rank.
int64_t spatial_rank(const Shape& x, const std::string& op) {
  check(x.rank() >= 3 && x.rank() <= 5,
        op + " expects x of rank 3..5 (N, C, d1..dk with 1..3 spatial dims), got " + x.str());
  return x.rank() - 2;
}

void check_bias(std::span<const Shape> in, const Shape& x, int64_t cout) {
  if (in.size() < 3) return;
  const Shape& b = in[2];
  check(b.dtype == x.dtype && b.rank() == 1 && b[0] == Dim(cout),
        "bias must be " + std::string(dtype_name(x.dtype)) + "[" + to_string(cout) + "] (one value per output channel), got " +
            b.str());
}

}  // namespace

namespace {

// Conv's geometry checks and output dims for x (N, C, d1..dk) and w (Cout, C/groups, k1..kk),
// in a Shape of x's dtype; `op` starts every message. Dtypes are the caller's.
Shape conv_out(const std::string& op, const Shape& x, const Shape& w, const std::vector<int64_t>& stride,
               const std::vector<int64_t>& pads, const std::vector<int64_t>& dilation, int64_t groups) {
  const int64_t nd = spatial_rank(x, op);
  check(w.rank() == x.rank(), op + " weight must have rank " + to_string(x.rank()) +
                                  " (Cout, C/groups, k1..kk) to match x " + x.str() + ", got " + w.str());
  check_static_shape(w, op + " weight");
  check(groups >= 1, op + " groups must be >= 1, got " + to_string(groups));
  const int64_t c = static_dim(x, 1, op + " input channels C");
  const int64_t cout = w[0].value, cg = w[1].value;
  check(c % groups == 0, op + " input channels C=" + to_string(c) + " of x " + x.str() +
                             " must be divisible by groups=" + to_string(groups));
  check(cout % groups == 0, op + " output channels Cout=" + to_string(cout) + " of weight " + w.str() +
                                " must be divisible by groups=" + to_string(groups));
  check(cg * groups == c, op + " channel mismatch: x " + x.str() + " has C=" + to_string(c) + " but weight " +
                              w.str() + " has C/groups=" + to_string(cg) + " with groups=" + to_string(groups) +
                              " (expects C=" + to_string(cg * groups) + ")");
  for (int64_t i = 0; i < nd; ++i)
    check(w[2 + i].value >= 1, op + " kernel sizes must be >= 1, got weight " + w.str());
  const auto st = spatial_attr(stride, nd, 1, 1, op + " stride");
  const auto dl = spatial_attr(dilation, nd, 1, 1, op + " dilation");
  const auto pd = spatial_attr(pads, 2 * nd, 0, 0, op + " pads ([begins..., ends...])");
  std::vector<Dim> out{x[0], Dim(cout)};
  for (int64_t i = 0; i < nd; ++i)
    out.push_back(window_out(x, i, w[2 + i].value, st[i], pd[i], pd[nd + i], dl[i], false));
  return Shape(std::move(out), x.dtype);
}

}  // namespace

std::vector<Shape> ops::Conv::infer(std::span<const Shape> in) const {
  const Shape& x = in[0];
  const Shape& w = in[1];
  spatial_rank(x, "conv");
  check_float(x, "conv input x");
  check(w.dtype == x.dtype, "conv weight dtype must match x: x " + x.str() + ", weight " + w.str());
  Shape out = conv_out("conv", x, w, stride, pads, dilation, groups);
  check_bias(in, x, out[1].value);
  return {out};
}

std::vector<Shape> ops::ConvInteger::infer(std::span<const Shape> in) const {
  const Shape& x = in[0];
  const Shape& w = in[1];
  const Shape& xz = in[2];
  const Shape& wz = in[3];
  for (const Shape* s : {&x, &w})
    check(s->dtype == DType::U8 || s->dtype == DType::I8,
          std::string("conv_integer ") + (s == &x ? "input x " : "weight ") + s->str() +
              " must be u8 or i8 (quantize or cast it first)");
  Shape out = conv_out("conv_integer", x, w, stride, pads, dilation, groups);
  const int64_t cout = out[1].value;
  auto one_value = [](const Shape& s) {
    return std::all_of(s.dims.begin(), s.dims.end(), [](const Dim& d) { return d == Dim(1); });
  };
  check(xz.dtype == x.dtype, "conv_integer x_zero " + xz.str() + " must have x's dtype " + dtype_name(x.dtype));
  check(one_value(xz), "conv_integer x_zero must be one value (per-tensor), got " + xz.str());
  check(wz.dtype == w.dtype, "conv_integer w_zero " + wz.str() + " must have the weight's dtype " + dtype_name(w.dtype));
  check(one_value(wz) || (wz.rank() == 1 && wz[0] == Dim(cout)),
        "conv_integer w_zero must be one value or one per output channel (" + to_string(cout) + "), got " + wz.str());
  out.dtype = DType::I32;
  return {out};
}

std::vector<Shape> ops::ConvTranspose::infer(std::span<const Shape> in) const {
  const Shape& x = in[0];
  const Shape& w = in[1];
  check(x.rank() == 4, "conv_transpose supports 2-d only: x must be rank 4 (N, Cin, H, W), got " + x.str() +
                           (x.rank() == 3 || x.rank() == 5 ? " (1-d and 3-d transposed convolution are not supported)"
                                                           : ""));
  check_float(x, "conv_transpose input x");
  check(w.dtype == x.dtype, "conv_transpose weight dtype must match x: x " + x.str() + ", weight " + w.str());
  check(w.rank() == 4, "conv_transpose weight must be rank 4 (Cin, Cout/groups, kh, kw), got " + w.str());
  check_static_shape(w, "conv_transpose weight");
  check(groups >= 1, "conv_transpose groups must be >= 1, got " + to_string(groups));
  const int64_t cin = static_dim(x, 1, "conv_transpose input channels Cin");
  check(w[0].value == cin, "conv_transpose channel mismatch: x " + x.str() + " has Cin=" + to_string(cin) +
                               " but weight " + w.str() + " (Cin, Cout/groups, kh, kw) has " +
                               to_string(w[0].value));
  check(cin % groups == 0, "conv_transpose input channels Cin=" + to_string(cin) +
                               " must be divisible by groups=" + to_string(groups));
  const int64_t cout = infer::mul(w[1].value, groups, "conv_transpose output channels (Cout/groups x groups)");
  for (int64_t i = 0; i < 2; ++i)
    check(w[2 + i].value >= 1, "conv_transpose kernel sizes must be >= 1, got weight " + w.str());
  const auto st = spatial_attr(stride, 2, 1, 1, "conv_transpose stride");
  const auto dl = spatial_attr(dilation, 2, 1, 1, "conv_transpose dilation");
  const auto pd = spatial_attr(pads, 4, 0, 0, "conv_transpose pads ([top, left, bottom, right])");
  const auto op = spatial_attr(output_padding, 2, 0, 0, "conv_transpose output_padding");
  for (int64_t i = 0; i < 2; ++i)
    check(op[i] < st[i] || op[i] < dl[i], "conv_transpose output_padding[" + to_string(i) + "]=" +
                                              to_string(op[i]) + " must be smaller than stride (" +
                                              to_string(st[i]) + ") or dilation (" + to_string(dl[i]) + ")");
  check_bias(in, x, cout);
  std::vector<Dim> out{x[0], Dim(cout)};
  for (int64_t i = 0; i < 2; ++i) {
    const Dim& d = x[2 + i];
    const std::string what = "conv_transpose output size along spatial dim " + to_string(i);
    const int64_t grow = infer::sub(
        infer::sub(infer::add(infer::mul(dl[i], w[2 + i].value - 1, what), op[i], what), pd[i], what), pd[2 + i], what);
    if (d.is_symbolic()) {
      check(st[i] == 1 && grow == 0, "spatial dim " + to_string(i) + " of " + x.str() +
                                         " is symbolic; conv_transpose needs it static unless the output has the "
                                         "same size (stride 1, pads summing to dilation*(k-1)+output_padding)");
      out.push_back(d);
      continue;
    }
    const int64_t o = infer::add(infer::add(infer::mul(d.value - 1, st[i], what), grow, what), 1, what);
    check(o >= 1, "conv_transpose output size along spatial dim " + to_string(i) + " would be " + to_string(o) +
                      " for x " + x.str() + ", weight " + w.str() + ", pads " + list_str(pd) +
                      "; it must be positive");
    out.push_back(Dim(o));
  }
  return {Shape(std::move(out), x.dtype)};
}

std::vector<Shape> ops::Pool::infer(std::span<const Shape> in) const {
  const Shape& x = in[0];
  const int64_t nd = spatial_rank(x, "pool");
  if (kind == PoolKind::Avg) check_float(x, "avg pool input x");
  else
    check(is_float(x.dtype) || is_int(x.dtype), "max pool input x must be a float or integer tensor, got " + x.str());
  check(static_cast<int64_t>(kernel.size()) == nd, "pool kernel must have " + to_string(nd) +
                                                       " sizes (one per spatial dim of x " + x.str() + "), got " +
                                                       list_str(kernel));
  for (int64_t k : kernel) check(k >= 1, "pool kernel sizes must be >= 1, got " + list_str(kernel));
  const auto st = spatial_attr(stride, nd, 1, 1, "pool stride");
  const auto dl = spatial_attr(dilation, nd, 1, 1, "pool dilation");
  const auto pd = spatial_attr(pads, 2 * nd, 0, 0, "pool pads ([begins..., ends...])");
  std::vector<Dim> out{x[0], x[1]};
  for (int64_t i = 0; i < nd; ++i) {
    const int64_t extent =
        infer::add(infer::mul(dl[i], kernel[i] - 1, "pool kernel extent along spatial dim " + to_string(i)), 1, "pool kernel extent");
    check(pd[i] < extent && pd[nd + i] < extent,
          "pool pads must be smaller than the kernel extent " + to_string(extent) + " along spatial dim " +
              to_string(i) + ", got pads " + list_str(pd) + " with kernel " + list_str(kernel));
    out.push_back(window_out(x, i, kernel[i], st[i], pd[i], pd[nd + i], dl[i], ceil_mode));
  }
  return {Shape(std::move(out), x.dtype)};
}

std::vector<Shape> ops::Resize::infer(std::span<const Shape> in) const {
  const Shape& x = in[0];
  const int64_t r = x.rank();
  check(r >= 1, "resize needs a tensor of rank >= 1, got " + x.str());
  check(static_cast<int>(mode) <= static_cast<int>(ResizeMode::Linear), "resize: invalid mode value");
  check(static_cast<int>(coord) <= static_cast<int>(ResizeCoord::PytorchHalfPixel), "resize: invalid coord value");
  check(static_cast<int>(nearest) <= static_cast<int>(NearestRound::Ceil), "resize: invalid nearest value");
  if (mode == ResizeMode::Linear) check_float(x, "linear resize input x");
  std::vector<Dim> out;
  if (!sizes.empty()) {
    check(static_cast<int64_t>(sizes.size()) == r, "resize sizes must have one value per dim of x " + x.str() +
                                                       ", got " + list_str(sizes));
    for (int64_t i = 0; i < r; ++i) {
      check(sizes[i] >= 0, "resize sizes must be >= 0, got " + list_str(sizes));
      check(!(x[i].is_static() && x[i].value == 0 && sizes[i] > 0),
            "resize cannot grow the empty dim " + to_string(i) + " of " + x.str() + " to " + to_string(sizes[i]));
      out.push_back(Dim(sizes[i]));
    }
    return {Shape(std::move(out), x.dtype)};
  }
  check(!scales.empty(), "resize needs scales (one per dim) or sizes; both are empty");
  check(static_cast<int64_t>(scales.size()) == r, "resize scales must have one value per dim of x " + x.str() +
                                                      ", got " + list_str(scales));
  for (int64_t i = 0; i < r; ++i) {
    const double s = scales[i];
    check(std::isfinite(s) && s > 0, "resize scales must be finite and > 0, got " + list_str(scales));
    if (x[i].is_symbolic()) {
      check(s == 1.0, "dim " + to_string(i) + " of " + x.str() + " is symbolic; resize with scale " +
                          std::to_string(s) + " needs it static (only scale 1 keeps a symbolic dim)");
      out.push_back(x[i]);
      continue;
    }
    const double o = std::floor(static_cast<double>(x[i].value) * s);
    check(o < 1e15, "resize output dim " + to_string(i) + " of " + x.str() + " with scale " + std::to_string(s) +
                        " is too large");
    out.push_back(Dim(static_cast<int64_t>(o)));
  }
  return {Shape(std::move(out), x.dtype)};
}

std::vector<Shape> ops::Pad::infer(std::span<const Shape> in) const {
  const Shape& x = in[0];
  const int64_t r = x.rank();
  check(static_cast<int>(mode) <= static_cast<int>(PadMode::Edge), "pad: invalid mode value");
  check(pads.empty() || static_cast<int64_t>(pads.size()) == 2 * r,
        "pad pads must be empty or have " + to_string(2 * r) + " values ([begins..., ends...] for x " + x.str() +
            "), got " + list_str(pads));
  if (mode == PadMode::Constant && is_int(x.dtype)) {
    const bool ok = visit_dtype(x.dtype, [&]<DType D>() {
      using T = typename dtype_storage<D>::type;
      if constexpr (std::is_integral_v<T>)
        return std::isfinite(value) && value > static_cast<double>(std::numeric_limits<T>::min()) - 1.0 &&
               value < static_cast<double>(std::numeric_limits<T>::max()) + 1.0;
      else return true;
    });
    check(ok, "pad value " + std::to_string(value) + " is not representable in " + dtype_name(x.dtype));
  }
  std::vector<Dim> out;
  for (int64_t i = 0; i < r; ++i) {
    const int64_t pb = pads.empty() ? 0 : pads[i];
    const int64_t pe = pads.empty() ? 0 : pads[r + i];
    if (pb == 0 && pe == 0) {
      out.push_back(x[i]);
      continue;
    }
    check(x[i].is_static(), "dim " + to_string(i) + " of " + x.str() + " is symbolic; pad needs it static to pad by " +
                                to_string(pb) + "/" + to_string(pe));
    const int64_t d = x[i].value;
    const std::string what = "pad of dim " + to_string(i) + " of " + x.str();
    const int64_t o = infer::add(infer::add(d, pb, what), pe, what);
    check(o >= 0, "pad crops more than dim " + to_string(i) + " of " + x.str() + " holds (pads " + to_string(pb) +
                      "/" + to_string(pe) + " give size " + to_string(o) + ")");
    const int64_t kept = d + std::min<int64_t>(pb, 0) + std::min<int64_t>(pe, 0);  // after cropping
    const int64_t grow = std::max<int64_t>({pb, pe, 0});  // the larger positive pad
    if (mode == PadMode::Reflect && grow > 0)
      check(grow < kept, "reflect pad " + to_string(grow) + " must be smaller than dim " + to_string(i) +
                             " of " + x.str() + " (size " + to_string(kept) + " after cropping)");
    if (mode == PadMode::Edge && grow > 0)
      check(kept > 0, "edge pad of dim " + to_string(i) + " of " + x.str() + " which is empty (after cropping)");
    out.push_back(Dim(o));
  }
  return {Shape(std::move(out), x.dtype)};
}

std::vector<Shape> ops::Im2Col::infer(std::span<const Shape> in) const {
  const Shape& x = in[0];
  check(x.rank() == 4, "im2col expects x of rank 4 (N, C, H, W), got " + x.str());
  check(kernel.size() == 2, "im2col kernel must have 2 sizes (kh, kw), got " + list_str(kernel));
  for (int64_t k : kernel) check(k >= 1, "im2col kernel sizes must be >= 1, got " + list_str(kernel));
  const auto st = spatial_attr(stride, 2, 1, 1, "im2col stride");
  const auto dl = spatial_attr(dilation, 2, 1, 1, "im2col dilation");
  const auto pd = spatial_attr(pads, 4, 0, 0, "im2col pads ([top, left, bottom, right])");
  const int64_t c = static_dim(x, 1, "im2col channels C");
  static_dim(x, 2, "im2col height H");
  static_dim(x, 3, "im2col width W");
  const int64_t oh = window_out(x, 0, kernel[0], st[0], pd[0], pd[2], dl[0], false).value;
  const int64_t ow = window_out(x, 1, kernel[1], st[1], pd[1], pd[3], dl[1], false).value;
  const std::string what = "im2col of " + x.str();
  return {Shape({x[0], Dim(infer::mul(infer::mul(c, kernel[0], what), kernel[1], what)), Dim(infer::mul(oh, ow, what))},
                x.dtype)};
}

}  // namespace rlx
