// ONNX Resize and Upsample. Nearest and linear resizes with the coordinate modes the IR knows
// become an IR Resize. Everything else (cubic, antialias, exclude_outside, tf_crop_and_resize,
// half_pixel_symmetric) is separable: each resized axis is a matmul with a constant
// (out x in) interpolation matrix built here from the operator's 1-d definition.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "io/onnx/importer.h"
#include "rlx/limits.h"

namespace rlx::onnx_io {
namespace {

using V = std::vector<Val>;

struct ResizeSpec {
  std::string mode = "nearest", coord = "half_pixel", nearest = "round_prefer_floor";
  double cubic_a = -0.75, extrapolation = 0.0;
  bool exclude_outside = false, antialias = false;
  std::vector<double> scales;   // one per dim (filled from sizes when only sizes are given)
  std::vector<int64_t> sizes;   // one per dim (output sizes)
  std::vector<double> roi;      // 2 * rank (tf_crop_and_resize)
};

// Interpolation coefficients for a fractional position `ratio` in (0, 1].
std::vector<double> coeffs(const ResizeSpec& s, double ratio, double scale) {
  if (s.mode == "nearest") {
    if (ratio == 1.0) return {0, 1};
    if (s.nearest == "round_prefer_floor") return {ratio <= 0.5 ? 1.0 : 0.0, ratio > 0.5 ? 1.0 : 0.0};
    if (s.nearest == "round_prefer_ceil") return {ratio < 0.5 ? 1.0 : 0.0, ratio >= 0.5 ? 1.0 : 0.0};
    if (s.nearest == "floor") return {1, 0};
    return {0, 1};  // ceil
  }
  const double sc = std::min(scale, 1.0);
  if (s.mode == "linear") {
    if (!s.antialias) return {1 - ratio, ratio};
    const auto start = static_cast<int64_t>(std::floor(-1.0 / sc) + 1);
    std::vector<double> c;
    for (int64_t i = start; i < start + 2 - 2 * start; ++i)
      c.push_back(std::clamp(1.0 - std::fabs((static_cast<double>(i) - ratio) * sc), 0.0, 1.0));
    const double sum = std::accumulate(c.begin(), c.end(), 0.0);
    for (double& v : c) v /= sum;
    return c;
  }
  const double A = s.cubic_a;
  auto kernel = [A](double x) {
    x = std::fabs(x);
    if (x <= 1) return (A + 2) * x * x * x - (A + 3) * x * x + 1;
    if (x < 2) return A * x * x * x - 5 * A * x * x + 8 * A * x - 4 * A;
    return 0.0;
  };
  if (!s.antialias) return {kernel(ratio + 1), kernel(ratio), kernel(1 - ratio), kernel(2 - ratio)};
  const auto start = static_cast<int64_t>(std::floor(-2.0 / sc) + 1);
  std::vector<double> c;
  for (int64_t i = start; i < 2 - start; ++i) c.push_back(kernel(sc * (static_cast<double>(i) - ratio)));
  const double sum = std::accumulate(c.begin(), c.end(), 0.0);
  for (double& v : c) v /= sum;
  return c;
}

// The (out x n) matrix and the per-row constant (extrapolated rows) of one axis.
void axis_matrix(const NodeCtx& c, const ResizeSpec& s, int64_t axis, int64_t n, std::vector<double>& w,
                 std::vector<double>& bias) {
  const int64_t out = s.sizes[static_cast<size_t>(axis)];
  const double scale = s.scales[static_cast<size_t>(axis)];
  const double out_f = scale * static_cast<double>(n);
  w.assign(static_cast<size_t>(out * n), 0.0);
  bias.assign(static_cast<size_t>(out), 0.0);
  const size_t r = s.sizes.size();
  for (int64_t x = 0; x < out; ++x) {
    const double xd = static_cast<double>(x), nd = static_cast<double>(n);
    double xo;
    if (s.coord == "align_corners") xo = out_f == 1 ? 0.0 : xd * (nd - 1) / (out_f - 1);
    else if (s.coord == "asymmetric") xo = xd / scale;
    else if (s.coord == "pytorch_half_pixel") xo = out_f == 1 ? -0.5 : (xd + 0.5) / scale - 0.5;
    else if (s.coord == "half_pixel") xo = (xd + 0.5) / scale - 0.5;
    else if (s.coord == "half_pixel_symmetric") {
      const double adjustment = static_cast<double>(out) / out_f;
      xo = nd / 2 * (1 - adjustment) + (xd + 0.5) / scale - 0.5;
    } else if (s.coord == "tf_crop_and_resize") {
      const double r0 = s.roi.at(static_cast<size_t>(axis)), r1 = s.roi.at(static_cast<size_t>(axis) + r);
      xo = out_f == 1 ? (r1 - r0) * (nd - 1) / 2 : xd * (r1 - r0) * (nd - 1) / (out_f - 1);
      xo += r0 * (nd - 1);
      if (xo < 0 || xo > nd - 1) {
        bias[static_cast<size_t>(x)] = s.extrapolation;
        continue;
      }
    } else {
      c.fail("coordinate_transformation_mode '" + s.coord + "' is not supported");
    }
    const double fl = std::floor(xo);
    const double ratio = xo == fl ? 1.0 : xo - fl;
    std::vector<double> k = coeffs(s, ratio, scale);
    const auto m = static_cast<int64_t>(k.size());
    // The m nearest positions to xo (ties prefer the smaller), in the edge-padded axis.
    const int64_t pad = (m + 1) / 2;
    const double xp = xo + static_cast<double>(pad);
    const int64_t limit = n + 2 * pad;
    std::vector<int64_t> cand;
    for (int64_t i = static_cast<int64_t>(fl) + pad - m - 1; i <= static_cast<int64_t>(fl) + pad + m + 1; ++i)
      if (i >= 0 && i < limit) cand.push_back(i);
    std::stable_sort(cand.begin(), cand.end(), [&](int64_t a, int64_t b) {
      const double da = std::fabs(xp - static_cast<double>(a)), db = std::fabs(xp - static_cast<double>(b));
      return da != db ? da < db : a < b;
    });
    if (static_cast<int64_t>(cand.size()) < m) c.fail("the input axis is too short for this interpolation");
    cand.resize(static_cast<size_t>(m));
    std::sort(cand.begin(), cand.end());
    if (s.exclude_outside) {
      double sum = 0;
      for (int64_t i = 0; i < m; ++i) {
        const int64_t src = cand[static_cast<size_t>(i)] - pad;
        if (src < 0 || src >= n) k[static_cast<size_t>(i)] = 0;
        sum += k[static_cast<size_t>(i)];
      }
      for (double& v : k) v /= sum;
    }
    for (int64_t i = 0; i < m; ++i) {
      const int64_t src = std::clamp<int64_t>(cand[static_cast<size_t>(i)] - pad, 0, n - 1);
      w[static_cast<size_t>(x * n + src)] += k[static_cast<size_t>(i)];
    }
  }
}

Value separable(const NodeCtx& c, const ResizeSpec& s) {
  auto& g = c.g();
  const Shape& xs = c.shape(0);
  if (!xs.is_static()) c.fail("this resize mode needs a static input shape, got " + xs.str());
  const auto d = xs.concrete();
  const DType dt = xs.dtype;
  const auto r = static_cast<int64_t>(d.size());
  Value x = c.cast_to(c.value(0), DType::F64);
  for (int64_t a = r - 1; a >= 0; --a) {  // innermost axis first, like the definition's recursion
    const int64_t n = d[static_cast<size_t>(a)], out = s.sizes[static_cast<size_t>(a)];
    if (out == n && s.scales[static_cast<size_t>(a)] == 1.0 && s.coord != "tf_crop_and_resize") continue;
    if (n == 0 && out > 0) c.fail("cannot resize the empty dim " + std::to_string(a) + " to " + std::to_string(out));
    if (out > 0 && n > kMaxFoldElements / out)
      c.fail("axis " + std::to_string(a) + ": the " + std::to_string(out) + " x " + std::to_string(n) +
             " interpolation matrix of this mode is larger than rlx builds at import time");
    std::vector<double> w, bias;
    axis_matrix(c, s, a, n, w, bias);
    std::vector<int64_t> perm(static_cast<size_t>(r));
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[static_cast<size_t>(a)], perm.back());
    Value t = g.transpose(x, perm);
    // (..., n) @ (n, out): the matrix transposed.
    std::vector<double> wt(static_cast<size_t>(n * out));
    for (int64_t i = 0; i < out; ++i)
      for (int64_t j = 0; j < n; ++j) wt[static_cast<size_t>(j * out + i)] = w[static_cast<size_t>(i * n + j)];
    t = g.matmul(t, g.constant(Tensor::f64({n, out}, wt)));
    if (std::any_of(bias.begin(), bias.end(), [](double b) { return b != 0; }))
      t = g.add(t, g.constant(Tensor::f64({out}, bias)));
    x = g.transpose(t, perm);
  }
  return c.cast_to(x, dt);
}

V resize(const NodeCtx& c, bool upsample) {
  const Shape& xs = c.shape(0);
  const int64_t r = xs.rank();
  ResizeSpec s;
  s.mode = c.s("mode", "nearest");
  if (s.mode == "bilinear") s.mode = "linear";
  if (s.mode != "nearest" && s.mode != "linear" && s.mode != "cubic") c.fail("mode '" + s.mode + "' is not supported");
  if (upsample) {
    c.allow_only({"mode", "scales"});
    s.coord = "asymmetric";
    s.nearest = "floor";
    if (c.opset() < 9) {
      for (float f : c.floats("scales")) s.scales.push_back(f);
    } else {
      s.scales = tensor_doubles(c.konst(1, "scales"));
    }
  } else {
    c.allow_only({"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
                  "extrapolation_value", "antialias", "axes", "keep_aspect_ratio_policy"});
    s.coord = c.s("coordinate_transformation_mode", c.opset() < 11 ? "asymmetric" : "half_pixel");
    s.nearest = c.s("nearest_mode", "round_prefer_floor");
    s.cubic_a = c.f("cubic_coeff_a", -0.75);
    s.exclude_outside = c.i("exclude_outside", 0) != 0;
    s.antialias = c.i("antialias", 0) != 0;
    s.extrapolation = c.f("extrapolation_value", 0.0);
    std::vector<double> roi;
    if (c.opset() < 11) {
      s.scales = tensor_doubles(c.konst(1, "scales"));
    } else {
      if (c.present(1) && c.konst(1, "roi").numel() > 0) roi = tensor_doubles(c.konst(1, "roi"));
      if (c.present(2) && c.konst(2, "scales").numel() > 0) s.scales = tensor_doubles(c.konst(2, "scales"));
      if (c.present(3) && c.konst(3, "sizes").numel() > 0) s.sizes = c.ints_input(3, "sizes");
      if (c.present(2) && c.present(3) && !s.scales.empty() && !s.sizes.empty())
        c.fail("scales and sizes are both given; only one may be");
    }
    std::vector<int64_t> axes = c.ints("axes");
    const bool given_axes = !axes.empty();
    if (axes.empty())
      for (int64_t i = 0; i < r; ++i) axes.push_back(i);
    for (int64_t& a : axes) a = normalize_axis(a, r, "Resize axes");
    const std::string policy = c.s("keep_aspect_ratio_policy", "stretch");
    if (!s.sizes.empty() && policy != "stretch") {
      if (policy != "not_larger" && policy != "not_smaller") c.fail("keep_aspect_ratio_policy '" + policy + "'");
      if (!xs.is_static()) c.fail("keep_aspect_ratio_policy needs static dims");
      const auto d = xs.concrete();
      if (s.sizes.size() != axes.size())
        c.fail("sizes has " + std::to_string(s.sizes.size()) + " entries for " + std::to_string(axes.size()) + " axes");
      for (size_t i = 0; i < axes.size(); ++i)
        if (d[static_cast<size_t>(axes[i])] == 0 || s.sizes[i] < 0)
          c.fail("keep_aspect_ratio_policy needs non-empty input dims and sizes >= 0");
      double f = policy == "not_larger" ? std::numeric_limits<double>::infinity() : 0.0;
      for (size_t i = 0; i < axes.size(); ++i) {
        const double ratio = static_cast<double>(s.sizes.at(i)) / static_cast<double>(d[static_cast<size_t>(axes[i])]);
        f = policy == "not_larger" ? std::min(f, ratio) : std::max(f, ratio);
      }
      s.scales.assign(axes.size(), f);
      s.sizes.clear();
      for (size_t i = 0; i < axes.size(); ++i)
        s.sizes.push_back(static_cast<int64_t>(std::round(f * static_cast<double>(d[static_cast<size_t>(axes[i])]))));
    }
    if (given_axes || !roi.empty()) {  // expand per-axis lists to every dim
      std::vector<double> fs(static_cast<size_t>(r), 1.0), froi(static_cast<size_t>(2 * r), 0.0);
      for (int64_t i = 0; i < r; ++i) froi[static_cast<size_t>(i + r)] = 1.0;
      std::vector<int64_t> fz;
      if (!s.sizes.empty()) {
        if (!xs.is_static()) c.fail("sizes with axes need static dims");
        fz = xs.concrete();
      }
      const size_t k = axes.size();
      if (!roi.empty() && roi.size() != 2 * k) c.fail("roi must have 2 entries per resized axis");
      for (size_t i = 0; i < k; ++i) {
        const auto a = static_cast<size_t>(axes[i]);
        if (!s.scales.empty()) fs[a] = s.scales.at(i);
        if (!s.sizes.empty() && fz.size() == static_cast<size_t>(r) && s.sizes.size() == k) fz[a] = s.sizes.at(i);
        if (!roi.empty()) {
          froi[a] = roi[i];
          froi[a + static_cast<size_t>(r)] = roi[i + k];
        }
      }
      if (!s.scales.empty() && (given_axes || s.scales.size() != static_cast<size_t>(r))) s.scales = fs;
      if (!fz.empty() && s.sizes.size() == k) s.sizes = fz;
      s.roi = froi;
    }
  }
  if (s.scales.empty() && s.sizes.empty()) c.fail("needs scales or sizes");
  if (!s.scales.empty() && static_cast<int64_t>(s.scales.size()) != r)
    c.fail("scales has " + std::to_string(s.scales.size()) + " entries; it must have one per dim (" + std::to_string(r) + ")");
  if (!s.sizes.empty() && static_cast<int64_t>(s.sizes.size()) != r)
    c.fail("sizes has " + std::to_string(s.sizes.size()) + " entries; it must have one per dim (" + std::to_string(r) + ")");
  // Every value checked before it becomes a size (NaN, inf, 0 or a huge scale, negative sizes).
  for (size_t i = 0; i < s.scales.size(); ++i)
    if (!std::isfinite(s.scales[i]) || s.scales[i] <= 0)
      c.fail("scales[" + std::to_string(i) + "] is " + std::to_string(s.scales[i]) + "; scales must be finite and > 0");
  for (size_t i = 0; i < s.sizes.size(); ++i)
    if (s.sizes[i] < 0) c.fail("sizes[" + std::to_string(i) + "] is " + std::to_string(s.sizes[i]) + "; sizes must be >= 0");
  if (!s.scales.empty() && xs.is_static()) {
    std::vector<int64_t> out;
    for (int64_t i = 0; i < r; ++i) {
      const double o = std::floor(s.scales[static_cast<size_t>(i)] * static_cast<double>(xs.dims[static_cast<size_t>(i)].value));
      if (!(o <= static_cast<double>(active_limits().max_tensor_elements)))
        c.fail("scales[" + std::to_string(i) + "] makes an output dim of " + std::to_string(o) + " elements");
      out.push_back(static_cast<int64_t>(o));
    }
    checked_nbytes(out, xs.dtype, c.where() + " output");
  }
  if (!s.sizes.empty()) checked_nbytes(s.sizes, xs.dtype, c.where() + " output");
  if (!std::isfinite(s.cubic_a)) c.fail("cubic_coeff_a must be finite");
  if (s.nearest != "round_prefer_floor" && s.nearest != "round_prefer_ceil" && s.nearest != "floor" && s.nearest != "ceil")
    c.fail("nearest_mode '" + s.nearest + "' is not one of round_prefer_floor, round_prefer_ceil, floor, ceil");
  if (s.coord != "half_pixel" && s.coord != "asymmetric" && s.coord != "align_corners" &&
      s.coord != "pytorch_half_pixel" && s.coord != "half_pixel_symmetric" && s.coord != "tf_crop_and_resize")
    c.fail("coordinate_transformation_mode '" + s.coord + "' is not supported");
  if (s.coord == "tf_crop_and_resize" && s.sizes.empty()) {
    // The output length is floor(length * (roi_end - roi_start) * scale) in the operator's text but
    // floor(length * scale) in its reference implementation: ambiguous, so not guessed.
    bool full = true;
    for (int64_t i = 0; i < r && !s.roi.empty(); ++i)
      full = full && s.roi[static_cast<size_t>(i)] == 0.0 && s.roi[static_cast<size_t>(i + r)] == 1.0;
    if (!full)
      c.fail("tf_crop_and_resize with scales and a roi other than [0, 1] is not supported (give sizes instead)");
  }
  for (double v : s.roi)
    if (!std::isfinite(v)) c.fail("roi values must be finite");
  // (extrapolation_value, cubic_coeff_a and nearest_mode have no effect outside their modes,
  // by the operator's definition; exporters set them regardless.)
  // align_corners and pytorch_half_pixel with scales: the operator's length_resized is
  // scale * length (not the integer output length), which the IR Resize (integer lengths)
  // does not express; such resizes go through the separable form.
  bool fractional_out = false;
  if (s.sizes.empty() && (s.coord == "align_corners" || s.coord == "pytorch_half_pixel") && xs.is_static())
    for (int64_t i = 0; i < r; ++i) {
      const double o = s.scales[static_cast<size_t>(i)] * static_cast<double>(xs.dims[static_cast<size_t>(i)].value);
      fractional_out = fractional_out || o != std::floor(o);
    }

  const bool ir_coord = s.coord == "half_pixel" || s.coord == "asymmetric" || s.coord == "align_corners" ||
                        s.coord == "pytorch_half_pixel";
  const bool ir_ok = s.mode != "cubic" && !s.antialias && ir_coord && !fractional_out;
  if (ir_ok) {
    ops::Resize op;
    op.mode = s.mode == "nearest" ? ResizeMode::Nearest : ResizeMode::Linear;
    op.coord = s.coord == "half_pixel"     ? ResizeCoord::HalfPixel
               : s.coord == "asymmetric"   ? ResizeCoord::Asymmetric
               : s.coord == "align_corners" ? ResizeCoord::AlignCorners
                                            : ResizeCoord::PytorchHalfPixel;
    if (s.nearest == "round_prefer_floor") op.nearest = NearestRound::RoundPreferFloor;
    else if (s.nearest == "round_prefer_ceil") op.nearest = NearestRound::RoundPreferCeil;
    else if (s.nearest == "floor") op.nearest = NearestRound::Floor;
    else op.nearest = NearestRound::Ceil;
    op.scales = s.scales;
    op.sizes = s.sizes;
    return {c.out(c.g().apply(op, {c.value(0)}))};
  }
  if (!xs.is_static()) c.fail("mode '" + s.mode + "' with '" + s.coord + "' needs a static input shape");
  const auto d = xs.concrete();
  if (s.sizes.empty()) {
    for (int64_t i = 0; i < r; ++i)
      s.sizes.push_back(static_cast<int64_t>(std::floor(s.scales[static_cast<size_t>(i)] * static_cast<double>(d[static_cast<size_t>(i)]))));
  } else if (s.scales.empty()) {
    for (int64_t i = 0; i < r; ++i)
      s.scales.push_back(static_cast<double>(s.sizes[static_cast<size_t>(i)]) / static_cast<double>(d[static_cast<size_t>(i)]));
  }
  if (s.roi.empty()) {
    s.roi.assign(static_cast<size_t>(2 * r), 0.0);
    for (int64_t i = 0; i < r; ++i) s.roi[static_cast<size_t>(i + r)] = 1.0;
  }
  return {c.out(separable(c, s))};
}

}  // namespace

// AffineGrid (opset 20): [theta (N, 2, 3) | (N, 3, 4), size (4 | 5 ints: N, C, [D,] H, W),
// known at import] -> grid (N, H, W, 2) | (N, D, H, W, 3): each output position's normalized
// coordinates (x along W first, then y, then z; align_corners: -1 and 1 at the first and last
// sample, else at the outer edges of the pixels) as (x, y, [z,] 1), times theta transposed.
V affine_grid(const NodeCtx& c) {
  c.allow_only({"align_corners"});
  auto& g = c.g();
  const Shape& th = c.shape(0);
  const std::vector<int64_t> size = c.ints_input(1, "size");
  const bool align = c.i("align_corners", 0) != 0;
  if (size.size() != 4 && size.size() != 5) c.fail("size must hold 4 (2-d) or 5 (3-d) values, got " + std::to_string(size.size()));
  const int64_t sp = static_cast<int64_t>(size.size()) - 2;  // spatial dims: 2 or 3
  if (th.rank() != 3 || th.dims[1] != Dim(sp) || th.dims[2] != Dim(sp + 1) || !is_float(th.dtype))
    c.fail("theta must be a float (N, " + std::to_string(sp) + ", " + std::to_string(sp + 1) + ") tensor, got " + th.str());
  if (th.dims[0] != Dim(size[0]) && th.dims[0].is_static())
    c.fail("theta has " + th.dims[0].str() + " matrices, size says N = " + std::to_string(size[0]));
  for (size_t i = 2; i < size.size(); ++i)
    if (size[i] <= 0) c.fail("size[" + std::to_string(i) + "] = " + std::to_string(size[i]) + " must be positive");
  // Spatial sizes fastest last: W, H, (D); coordinate j of a position runs along spatial dim sp - 1 - j.
  std::vector<int64_t> spatial(size.begin() + 2, size.end());
  int64_t positions = 1;
  for (int64_t v : spatial) positions = checked_mul(positions, v, "AffineGrid positions");
  auto coord = [&](int64_t i, int64_t n) {
    if (align) return n == 1 ? 0.0 : -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(n - 1);
    return (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(n) - 1.0;
  };
  std::vector<double> base(static_cast<size_t>(positions * (sp + 1)));
  for (int64_t p = 0; p < positions; ++p) {
    int64_t rest = p;
    std::vector<int64_t> idx(static_cast<size_t>(sp));
    for (int64_t d = sp - 1; d >= 0; --d) {
      idx[static_cast<size_t>(d)] = rest % spatial[static_cast<size_t>(d)];
      rest /= spatial[static_cast<size_t>(d)];
    }
    for (int64_t j = 0; j < sp; ++j) {
      const auto d = static_cast<size_t>(sp - 1 - j);
      base[static_cast<size_t>(p * (sp + 1) + j)] = coord(idx[d], spatial[d]);
    }
    base[static_cast<size_t>(p * (sp + 1) + sp)] = 1.0;
  }
  Tensor bt = Tensor::empty(DType::F64, {1, positions, sp + 1});
  std::copy(base.begin(), base.end(), bt.data<double>());
  const Value b = g.constant(bt.cast(th.dtype));
  const Value grid = g.matmul(b, g.transpose(c.value(0), {0, 2, 1}));  // (N, positions, sp)
  std::vector<Dim> out{th.dims[0]};
  for (int64_t v : spatial) out.push_back(Dim(v));
  out.push_back(Dim(sp));
  return {c.out(g.reshape(grid, out))};
}

void register_resize(ConverterTable& t) {
  t["AffineGrid"] = affine_grid;
  t["Resize"] = [](const NodeCtx& c) { return resize(c, false); };
  t["Upsample"] = [](const NodeCtx& c) { return resize(c, true); };
}

}  // namespace rlx::onnx_io
