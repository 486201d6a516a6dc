// CPU kernels for the norm family: LayerNorm, RmsNorm, GroupNorm, LayerNorm2d,
// BatchNormInference, FusedResidualLN, FusedResidualRmsNorm.
//
// Statistics are two-pass (mean, then centered squares) and accumulate in double for every
// float dtype; normalized values are computed in double and rounded once on store. f32 rows run
// on vector lanes (vec_rows.h) with the same formula, the sums in a different order.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/util.h"
#include "backends/cpu/vec_rows.h"

namespace rlx::cpu {
namespace {

constexpr int64_t kGrain = 16384;

// Calls f.template operator()<T>() for a float dtype; other dtypes are rejected.
template <class F>
void visit_float(DType t, const char* what, F&& f) {
  switch (t) {
    case DType::F32: return f.template operator()<float>();
    case DType::F64: return f.template operator()<double>();
    case DType::F16: return f.template operator()<f16>();
    case DType::BF16: return f.template operator()<bf16>();
    default: break;
  }
  throw Error(std::string(what) + ": x must be a float tensor (f32/f16/bf16/f64), got " + dtype_name(t));
}

// Values of a (small) parameter tensor as doubles; empty when absent.
template <class T>
std::vector<double> param_values(const Tensor* t, int64_t expected, const char* name, const char* what) {
  if (!t) return {};
  if (t->numel() != expected)
    throw Error(std::string(what) + ": " + name + " has " + std::to_string(t->numel()) + " elements, expected " +
                std::to_string(expected));
  std::vector<double> v(static_cast<size_t>(expected));
  const T* p = t->data<T>();
  for (int64_t i = 0; i < expected; ++i) v[i] = static_cast<double>(load(p[i]));
  return v;
}

void check_same_numel(const Tensor& a, const Tensor& b, const char* what) {
  if (a.numel() != b.numel())
    throw Error(std::string(what) + ": output has " + std::to_string(b.numel()) + " elements, input " +
                std::to_string(a.numel()));
}

// Normalizes each of `rows` contiguous rows of `len` elements:
//   LayerNorm: (v - mean) / sqrt(var + eps) * gamma + beta
//   RmsNorm:   v / sqrt(mean(v^2) + eps) * gamma + beta
// with v = x, or v = round_T(x + res) for the fused residual variants.
template <class T, bool kRms>
void norm_rows(const T* x, const T* res, const std::vector<double>& gamma, const std::vector<double>& beta, T* y,
               int64_t rows, int64_t len, double eps) {
  if (rows == 0 || len == 0) return;
  if constexpr (std::is_same_v<T, float>) {  // f32 rows on vector lanes (vec_rows.h), same formula
    parallel_for(rows, std::max<int64_t>(1, kGrain / len), [&](int64_t s, int64_t e) {
      for (int64_t r = s; r < e; ++r)
        norm_row_f32(x + r * len, res ? res + r * len : nullptr, gamma.data(), beta.empty() ? nullptr : beta.data(),
                     y + r * len, len, eps, kRms);
    });
    return;
  } else if constexpr (std::is_same_v<T, f16>) {  // widened to an f32 row (v = round_f16(x + res) first)
    parallel_for(rows, std::max<int64_t>(1, kGrain / len), [&](int64_t s, int64_t e) {
      std::vector<float> v(static_cast<size_t>(len));
      std::vector<T> sum(res ? static_cast<size_t>(len) : 0);
      for (int64_t r = s; r < e; ++r) {
        const T* xr = x + r * len;
        if (res) {
          for (int64_t j = 0; j < len; ++j) sum[static_cast<size_t>(j)] = store<T>(load(xr[j]) + load(res[r * len + j]));
          xr = sum.data();
        }
        f16_to_f32(xr, v.data(), len);
        norm_row_f32(v.data(), nullptr, gamma.data(), beta.empty() ? nullptr : beta.data(), v.data(), len, eps, kRms);
        f32_to_f16(v.data(), y + r * len, len);
      }
    });
    return;
  }
  parallel_for(rows, std::max<int64_t>(1, kGrain / len), [&](int64_t s, int64_t e) {
    std::vector<double> v(static_cast<size_t>(len));
    for (int64_t r = s; r < e; ++r) {
      const T* xr = x + r * len;
      if (res) {
        const T* rr = res + r * len;
        for (int64_t j = 0; j < len; ++j) v[j] = static_cast<double>(load(store<T>(load(xr[j]) + load(rr[j]))));
      } else {
        for (int64_t j = 0; j < len; ++j) v[j] = static_cast<double>(load(xr[j]));
      }
      double mean = 0.0;
      if constexpr (!kRms) {
        for (int64_t j = 0; j < len; ++j) mean += v[j];
        mean /= static_cast<double>(len);
      }
      double sq = 0.0;
      for (int64_t j = 0; j < len; ++j) {
        const double d = v[j] - mean;
        sq += d * d;
      }
      const double inv = 1.0 / std::sqrt(sq / static_cast<double>(len) + eps);
      T* yr = y + r * len;
      for (int64_t j = 0; j < len; ++j) {
        double o = (v[j] - mean) * inv * gamma[j];
        if (!beta.empty()) o += beta[j];
        yr[j] = store<T>(static_cast<compute_t<T>>(o));
      }
    }
  });
}

template <bool kRms>
void trailing_norm(double eps, KernelContext& ctx, const char* what) {
  const Tensor& x = ctx.in[0];
  Tensor& y = ctx.out[0];
  check_same_numel(x, y, what);
  const auto& g = std::get<plan::AxisGeom>(ctx.step.geom);  // [rows, normalized size]
  const int64_t len = g.axis;
  const int64_t rows = len == 0 ? 0 : g.outer;
  visit_float(x.dtype(), what, [&]<class T>() {
    const auto gamma = param_values<T>(&ctx.in[1], len, "gamma", what);
    const auto beta = param_values<T>(ctx.in.size() > 2 ? &ctx.in[2] : nullptr, len, "beta", what);
    norm_rows<T, kRms>(x.data<T>(), nullptr, gamma, beta, y.data<T>(), rows, len, eps);
  });
}

template <bool kRms>
void residual_norm(bool has_bias, double eps, KernelContext& ctx, const char* what) {
  const Tensor& x = ctx.in[0];
  const Tensor& res = ctx.in[1];
  Tensor& y = ctx.out[0];
  check_same_numel(x, y, what);
  if (res.shape() != x.shape())
    throw Error(std::string(what) + ": residual " + dims_str(res.shape()) + " must have the shape of x " +
                dims_str(x.shape()));
  if (has_bias != (ctx.in.size() > 3))
    throw Error(std::string(what) + ": has_bias does not agree with the presence of the beta input");
  if (x.rank() < 1) throw Error(std::string(what) + ": x must have rank >= 1");
  const int64_t len = x.dim(x.rank() - 1);
  const int64_t rows = len == 0 ? 0 : x.numel() / len;
  visit_float(x.dtype(), what, [&]<class T>() {
    const auto gamma = param_values<T>(&ctx.in[2], len, "gamma", what);
    const auto beta = param_values<T>(has_bias ? &ctx.in[3] : nullptr, len, "beta", what);
    norm_rows<T, kRms>(x.data<T>(), res.data<T>(), gamma, beta, y.data<T>(), rows, len, eps);
  });
}

// x (N, C, ...): returns {N, C, prod(spatial)}.
std::array<int64_t, 3> ncs(const Tensor& x, const char* what) {
  if (x.rank() < 2) throw Error(std::string(what) + ": x must be (N, C, ...), got " + dims_str(x.shape()));
  int64_t s = 1;
  for (int64_t d = 2; d < x.rank(); ++d) s *= x.dim(d);
  return {x.dim(0), x.dim(1), s};
}

}  // namespace

void kernel(const ops::LayerNorm& op, KernelContext& ctx) { trailing_norm<false>(op.eps, ctx, "layer_norm"); }

void kernel(const ops::RmsNorm& op, KernelContext& ctx) { trailing_norm<true>(op.eps, ctx, "rms_norm"); }

void kernel(const ops::FusedResidualLN& op, KernelContext& ctx) {
  residual_norm<false>(op.has_bias, op.eps, ctx, "fused_residual_ln");
}

void kernel(const ops::FusedResidualRmsNorm& op, KernelContext& ctx) {
  residual_norm<true>(op.has_bias, op.eps, ctx, "fused_residual_rms_norm");
}

void kernel(const ops::GroupNorm& op, KernelContext& ctx) {
  const char* what = "group_norm";
  const Tensor& x = ctx.in[0];
  Tensor& y = ctx.out[0];
  check_same_numel(x, y, what);
  const auto [N, C, S] = ncs(x, what);
  const int64_t G = op.groups;
  if (G <= 0 || C % G != 0)
    throw Error(std::string(what) + ": groups=" + std::to_string(G) + " does not divide C=" + std::to_string(C));
  const int64_t cpg = C / G;
  const int64_t len = cpg * S;
  const double eps = op.eps;
  visit_float(x.dtype(), what, [&]<class T>() {
    const auto gamma = param_values<T>(&ctx.in[1], C, "gamma", what);
    const auto beta = param_values<T>(&ctx.in[2], C, "beta", what);
    const T* xs = x.data<T>();
    T* ys = y.data<T>();
    if (len == 0) return;
    parallel_for(N * G, std::max<int64_t>(1, kGrain / len), [&](int64_t s, int64_t e) {
      for (int64_t r = s; r < e; ++r) {
        const int64_t base = r * len;
        const int64_t c0 = (r % G) * cpg;
        double mean = 0.0;
        for (int64_t j = 0; j < len; ++j) mean += static_cast<double>(load(xs[base + j]));
        mean /= static_cast<double>(len);
        double sq = 0.0;
        for (int64_t j = 0; j < len; ++j) {
          const double d = static_cast<double>(load(xs[base + j])) - mean;
          sq += d * d;
        }
        const double inv = 1.0 / std::sqrt(sq / static_cast<double>(len) + eps);
        for (int64_t c = 0; c < cpg; ++c) {
          const double g = gamma[c0 + c] * inv, b = beta[c0 + c];
          const int64_t off = base + c * S;
          for (int64_t j = 0; j < S; ++j) {
            const double o = (static_cast<double>(load(xs[off + j])) - mean) * g + b;
            ys[off + j] = store<T>(static_cast<compute_t<T>>(o));
          }
        }
      }
    });
  });
}

void kernel(const ops::LayerNorm2d& op, KernelContext& ctx) {
  const char* what = "layer_norm_2d";
  const Tensor& x = ctx.in[0];
  Tensor& y = ctx.out[0];
  check_same_numel(x, y, what);
  if (x.rank() != 4) throw Error(std::string(what) + ": x must be (N, C, H, W), got " + dims_str(x.shape()));
  const auto [N, C, HW] = ncs(x, what);
  const double eps = op.eps;
  // Work items: (n, block of up to kBlock spatial positions); statistics over C per position.
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (HW + kBlock - 1) / kBlock;
  visit_float(x.dtype(), what, [&]<class T>() {
    const auto gamma = param_values<T>(&ctx.in[1], C, "gamma", what);
    const auto beta = param_values<T>(&ctx.in[2], C, "beta", what);
    const T* xs = x.data<T>();
    T* ys = y.data<T>();
    if (C == 0 || HW == 0 || N == 0) return;
    parallel_for(N * blocks, std::max<int64_t>(1, kGrain / (C * std::min(HW, kBlock))), [&](int64_t s, int64_t e) {
      std::vector<double> mean(kBlock), sq(kBlock);
      for (int64_t t = s; t < e; ++t) {
        const int64_t n = t / blocks;
        const int64_t p0 = (t % blocks) * kBlock;
        const int64_t cnt = std::min(kBlock, HW - p0);
        const int64_t base = n * C * HW + p0;
        std::fill(mean.begin(), mean.end(), 0.0);
        std::fill(sq.begin(), sq.end(), 0.0);
        for (int64_t c = 0; c < C; ++c)
          for (int64_t j = 0; j < cnt; ++j) mean[j] += static_cast<double>(load(xs[base + c * HW + j]));
        for (int64_t j = 0; j < cnt; ++j) mean[j] /= static_cast<double>(C);
        for (int64_t c = 0; c < C; ++c)
          for (int64_t j = 0; j < cnt; ++j) {
            const double d = static_cast<double>(load(xs[base + c * HW + j])) - mean[j];
            sq[j] += d * d;
          }
        for (int64_t j = 0; j < cnt; ++j) sq[j] = 1.0 / std::sqrt(sq[j] / static_cast<double>(C) + eps);
        for (int64_t c = 0; c < C; ++c)
          for (int64_t j = 0; j < cnt; ++j) {
            const int64_t i = base + c * HW + j;
            const double o = (static_cast<double>(load(xs[i])) - mean[j]) * sq[j] * gamma[c] + beta[c];
            ys[i] = store<T>(static_cast<compute_t<T>>(o));
          }
      }
    });
  });
}

void kernel(const ops::BatchNormInference& op, KernelContext& ctx) {
  const char* what = "batch_norm_inference";
  const Tensor& x = ctx.in[0];
  Tensor& y = ctx.out[0];
  check_same_numel(x, y, what);
  const auto [N, C, S] = ncs(x, what);
  visit_float(x.dtype(), what, [&]<class T>() {
    const auto scale = param_values<T>(&ctx.in[1], C, "scale", what);
    const auto bias = param_values<T>(&ctx.in[2], C, "bias", what);
    const auto mean = param_values<T>(&ctx.in[3], C, "mean", what);
    const auto var = param_values<T>(&ctx.in[4], C, "var", what);
    std::vector<double> mul(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) mul[c] = scale[c] / std::sqrt(var[c] + op.eps);
    const T* xs = x.data<T>();
    T* ys = y.data<T>();
    if (S == 0) return;
    parallel_for(N * C, std::max<int64_t>(1, kGrain / S), [&](int64_t s, int64_t e) {
      for (int64_t r = s; r < e; ++r) {
        const int64_t c = r % C;
        const double m = mul[c], mu = mean[c], b = bias[c];
        for (int64_t j = 0; j < S; ++j) {
          const int64_t i = r * S + j;
          ys[i] = store<T>(static_cast<compute_t<T>>((static_cast<double>(load(xs[i])) - mu) * m + b));
        }
      }
    });
  });
}

}  // namespace rlx::cpu
