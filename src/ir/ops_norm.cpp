// Shape inference for the norm family: LayerNorm, RmsNorm, GroupNorm, LayerNorm2d,
// BatchNormInference, FusedResidualLN, FusedResidualRmsNorm.
#include <cmath>
#include <string>
#include <vector>

#include "ir/infer_util.h"
#include "rlx/ops.h"

namespace rlx {
namespace {

using infer::dims_compatible;

void check_float(const Shape& x, const std::string& what) {
  if (!is_float(x.dtype))
    throw Error(what + ": x must be a float tensor (f32/f16/bf16/f64), got " + x.str() +
                "; cast integer inputs to a float type first");
}

void check_eps(double eps, const std::string& what) {
  if (!(eps >= 0.0) || !std::isfinite(eps))
    throw Error(what + ": eps must be finite and >= 0, got " + std::to_string(eps));
}

// `p` (named `name`) must have x's dtype and exactly the dims `want`.
void check_param(const Shape& p, const char* name, const std::vector<Dim>& want, DType dtype,
                 const std::string& what, const std::string& expect_text) {
  if (p.dtype != dtype)
    throw Error(what + ": " + name + " " + p.str() + " must have x's dtype " + dtype_name(dtype));
  bool ok = p.dims.size() == want.size();
  for (size_t i = 0; ok && i < want.size(); ++i) ok = dims_compatible(p.dims[i], want[i]);
  if (!ok)
    throw Error(what + ": " + name + " " + p.str() + " must have shape " + dims_str(want) + " (" + expect_text +
                ")");
}

// [x, gamma, beta?] normalized over [axis, rank).
Shape trailing_norm_infer(std::span<const Shape> in, int64_t axis, double eps, const std::string& what) {
  const Shape& x = in[0];
  check_float(x, what);
  check_eps(eps, what);
  if (x.rank() < 1) throw Error(what + ": x must have rank >= 1, got " + x.str());
  const int64_t a = normalize_axis(axis, x.rank(), what + " on " + x.str());
  const std::vector<Dim> want(x.dims.begin() + a, x.dims.end());
  const std::string expect = "x.shape[" + std::to_string(a) + ":] of x " + x.str();
  check_param(in[1], "gamma", want, x.dtype, what, expect);
  if (in.size() > 2) check_param(in[2], "beta", want, x.dtype, what, expect);
  return x;
}

// [x (N, C, ...), per-channel params...]; returns C.
Dim channel_dim(const Shape& x, int64_t min_rank, const std::string& what) {
  if (x.rank() < min_rank)
    throw Error(what + ": x must be (N, C, ...) with rank >= " + std::to_string(min_rank) + ", got " + x.str());
  return x.dims[1];
}

// [x, residual, gamma, beta?] for the fused residual norms.
Shape residual_norm_infer(std::span<const Shape> in, bool has_bias, double eps, const std::string& what) {
  const Shape& x = in[0];
  const Shape& r = in[1];
  check_float(x, what);
  check_eps(eps, what);
  if (x.rank() < 1) throw Error(what + ": x must have rank >= 1, got " + x.str());
  if (r.dtype != x.dtype)
    throw Error(what + ": residual " + r.str() + " must have x's dtype " + dtype_name(x.dtype));
  if (!dims_compatible(r, x)) throw Error(what + ": residual " + r.str() + " must have the shape of x " + x.str());
  const bool beta = in.size() > 3;
  if (beta != has_bias)
    throw Error(what + ": has_bias=" + (has_bias ? "true" : "false") + " but " + (beta ? "a" : "no") +
                " beta input was given (" + std::to_string(in.size()) + " inputs); pass beta exactly when has_bias");
  const std::vector<Dim> want{x.dims.back()};
  const std::string expect = "the last dim of x " + x.str();
  check_param(in[2], "gamma", want, x.dtype, what, expect);
  if (beta) check_param(in[3], "beta", want, x.dtype, what, expect);
  Shape out = x;
  for (int64_t i = 0; i < x.rank(); ++i)
    if (out.dims[i].is_symbolic() && r.dims[i].is_static()) out.dims[i] = r.dims[i];
  return out;
}

}  // namespace

std::vector<Shape> ops::LayerNorm::infer(std::span<const Shape> in) const {
  return {trailing_norm_infer(in, axis, eps, "layer_norm")};
}

std::vector<Shape> ops::RmsNorm::infer(std::span<const Shape> in) const {
  return {trailing_norm_infer(in, axis, eps, "rms_norm")};
}

std::vector<Shape> ops::GroupNorm::infer(std::span<const Shape> in) const {
  const std::string what = "group_norm";
  const Shape& x = in[0];
  check_float(x, what);
  check_eps(eps, what);
  const Dim c = channel_dim(x, 2, what);
  if (groups <= 0) throw Error(what + ": groups must be > 0, got " + std::to_string(groups));
  if (c.is_symbolic())
    throw Error(what + ": the channel dim of x " + x.str() + " must be static to split it into groups");
  if (c.value % groups != 0)
    throw Error(what + ": groups=" + std::to_string(groups) + " does not divide the channel count C=" +
                std::to_string(c.value) + " of x " + x.str());
  const std::string expect = "[C] with C = x.shape[1] of x " + x.str();
  check_param(in[1], "gamma", {c}, x.dtype, what, expect);
  check_param(in[2], "beta", {c}, x.dtype, what, expect);
  return {x};
}

std::vector<Shape> ops::LayerNorm2d::infer(std::span<const Shape> in) const {
  const std::string what = "layer_norm_2d";
  const Shape& x = in[0];
  check_float(x, what);
  check_eps(eps, what);
  if (x.rank() != 4) throw Error(what + ": x must be (N, C, H, W), got " + x.str());
  const std::string expect = "[C] with C = x.shape[1] of x " + x.str();
  check_param(in[1], "gamma", {x.dims[1]}, x.dtype, what, expect);
  check_param(in[2], "beta", {x.dims[1]}, x.dtype, what, expect);
  return {x};
}

std::vector<Shape> ops::BatchNormInference::infer(std::span<const Shape> in) const {
  const std::string what = "batch_norm_inference";
  const Shape& x = in[0];
  check_float(x, what);
  check_eps(eps, what);
  const Dim c = channel_dim(x, 2, what);
  const std::string expect = "[C] with C = x.shape[1] of x " + x.str();
  const char* names[] = {"scale", "bias", "mean", "var"};
  for (int i = 0; i < 4; ++i) check_param(in[i + 1], names[i], {c}, x.dtype, what, expect);
  return {x};
}

std::vector<Shape> ops::FusedResidualLN::infer(std::span<const Shape> in) const {
  return {residual_norm_infer(in, has_bias, eps, "fused_residual_ln")};
}

std::vector<Shape> ops::FusedResidualRmsNorm::infer(std::span<const Shape> in) const {
  return {residual_norm_infer(in, has_bias, eps, "fused_residual_rms_norm")};
}

}  // namespace rlx
