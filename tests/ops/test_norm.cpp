// Norm family: LayerNorm, RmsNorm, GroupNorm, LayerNorm2d, BatchNormInference,
// FusedResidualLN, FusedResidualRmsNorm, checked against naive double references.
#include <cmath>
#include <optional>
#include <vector>

#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using namespace rlx::testing;

const DType kFloatDTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16};

// Normalized outputs are O(1): compare with an absolute floor suited to the dtype.
Tolerance tol_for(DType t) {
  switch (t) {
    case DType::F32: return {1e-5, 1e-5};
    case DType::F16: return {2e-3, 2e-3};
    case DType::BF16: return {1.6e-2, 1.6e-2};
    default: return {1e-10, 1e-10};
  }
}

// Normalizes rows of `len` (stride 1): LN (centered) or RMS, then * gamma + beta.
// `index(row, j)` maps to the flat element; `chan(j)` to the gamma/beta element.
template <class Index, class Chan>
void ref_norm_rows(const std::vector<double>& x, std::vector<double>& y, int64_t rows, int64_t len, bool rms,
                   double eps, const std::vector<double>& gamma, const std::vector<double>& beta, Index index,
                   Chan chan) {
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, sq = 0;
    for (int64_t j = 0; j < len; ++j) mean += x[index(r, j)];
    mean = rms ? 0.0 : mean / static_cast<double>(len);
    for (int64_t j = 0; j < len; ++j) sq += (x[index(r, j)] - mean) * (x[index(r, j)] - mean);
    const double inv = 1 / std::sqrt(sq / static_cast<double>(len) + eps);
    for (int64_t j = 0; j < len; ++j) {
      const int64_t c = chan(j);
      y[index(r, j)] = (x[index(r, j)] - mean) * inv * gamma[c] + (beta.empty() ? 0.0 : beta[c]);
    }
  }
}

// ---- LayerNorm / RmsNorm -----------------------------------------------------------------
TEST(Norm, LayerNormAndRmsNormEveryAxisDTypeAndBeta) {
  const std::vector<int64_t> dims{2, 3, 4};
  uint64_t seed = 1;
  for (DType dt : kFloatDTypes) {
    for (bool rms : {false, true}) {
      for (int64_t axis : {-1, 1, -3, 2}) {
        for (bool with_beta : {true, false}) {
          for (double eps : {1e-5, 0.5}) {
            SCOPED_TRACE(std::string(dtype_name(dt)) + (rms ? " rms" : " ln") + " axis=" + std::to_string(axis) +
                         " beta=" + std::to_string(with_beta) + " eps=" + std::to_string(eps));
            const int64_t a = axis < 0 ? axis + 3 : axis;
            std::vector<int64_t> pd(dims.begin() + a, dims.end());
            int64_t len = 1;
            for (auto d : pd) len *= d;
            Tensor x = random_tensor(dt, dims, seed++, -2, 3);
            Tensor gamma = random_tensor(dt, pd, seed++), beta = random_tensor(dt, pd, seed++);
            std::vector<Tensor> ins{x, gamma};
            if (with_beta) ins.push_back(beta);
            const auto xv = to_doubles(x);
            std::vector<double> y(xv.size());
            ref_norm_rows(xv, y, 24 / len, len, rms, eps, to_doubles(gamma),
                          with_beta ? to_doubles(beta) : std::vector<double>{},
                          [len](int64_t r, int64_t j) { return r * len + j; }, [](int64_t j) { return j; });
            Op op = rms ? Op(ops::RmsNorm{axis, eps}) : Op(ops::LayerNorm{axis, eps});
            EXPECT_TRUE(all_close(run_op(op, ins), dims, y, tol_for(dt)));
          }
        }
      }
    }
  }
}

TEST(Norm, ZeroSizeAndSingleElementRows) {
  for (bool rms : {false, true}) {
    Op op = rms ? Op(ops::RmsNorm{-1, 1e-6}) : Op(ops::LayerNorm{-1, 1e-5});
    Tensor out = run_op(op, {random_tensor(DType::F32, {0, 4}, 1), random_tensor(DType::F32, {4}, 2)});
    EXPECT_EQ(out.shape(), (std::vector<int64_t>{0, 4}));
    out = run_op(op, {random_tensor(DType::F32, {3, 0}, 1), random_tensor(DType::F32, {0}, 2)});
    EXPECT_EQ(out.shape(), (std::vector<int64_t>{3, 0}));
  }
  // LayerNorm of a single element is beta (x - mean = 0).
  Tensor x = Tensor::f32({2, 1}, std::vector<float>{5, -7});
  Tensor g = Tensor::f32({1}, std::vector<float>{3}), b = Tensor::f32({1}, std::vector<float>{0.25f});
  EXPECT_TRUE(all_close(run_op(ops::LayerNorm{-1, 1e-5}, {x, g, b}), {2, 1}, {0.25, 0.25}));
}

TEST(Norm, SymbolicLeadingDimsPassThrough) {
  Shape x({Dim::symbol("batch"), Dim::symbol("seq"), 8});
  EXPECT_EQ(infer_node(ops::LayerNorm{-1, 1e-5}, {x, Shape::of({8}), Shape::of({8})}).str(), "f32[batch,seq,8]");
  EXPECT_EQ(infer_node(ops::RmsNorm{-1, 1e-6}, {x, Shape::of({8})}).str(), "f32[batch,seq,8]");
}

TEST(Norm, LayerNormRejectsBadInputs) {
  const Shape x = Shape::of({2, 3, 4});
  EXPECT_THAT(error_message([&] { infer_node(ops::LayerNorm{-1, 1e-5}, {x, Shape::of({3, 4})}); }),
              HasSubstr("gamma f32[3,4] must have shape [4]"));
  EXPECT_THAT(error_message([&] { infer_node(ops::LayerNorm{1, 1e-5}, {x, Shape::of({4})}); }),
              HasSubstr("must have shape [3,4]"));
  EXPECT_THAT(error_message([&] { infer_node(ops::RmsNorm{-1, 1e-5}, {x, Shape::of({4}), Shape::of({5})}); }),
              HasSubstr("beta f32[5]"));
  EXPECT_THAT(error_message([&] { infer_node(ops::LayerNorm{3, 1e-5}, {x, Shape::of({4})}); }),
              HasSubstr("out of range"));
  EXPECT_THAT(error_message([&] {
                infer_node(ops::LayerNorm{-1, 1e-5}, {Shape::of({2, 4}, DType::I32), Shape::of({4}, DType::I32)});
              }),
              HasSubstr("float"));
  EXPECT_THAT(error_message([&] { infer_node(ops::RmsNorm{-1, 1e-5}, {x, Shape::of({4}, DType::F16)}); }),
              HasSubstr("dtype"));
  EXPECT_THAT(error_message([&] { infer_node(ops::LayerNorm{-1, -1.0}, {x, Shape::of({4})}); }),
              HasSubstr("eps"));
  EXPECT_THAT(error_message([&] { infer_node(ops::LayerNorm{-1, 1e-5}, {Shape::of({}), Shape::of({})}); }),
              HasSubstr("rank >= 1"));
}

// ---- GroupNorm -------------------------------------------------------------------------
TEST(Norm, GroupNormEveryGroupCountAndRank) {
  struct Case {
    std::vector<int64_t> dims;
    int64_t groups;
  };
  const std::vector<Case> cases = {{{2, 6, 3, 2}, 1}, {{2, 6, 3, 2}, 2}, {{2, 6, 3, 2}, 3},
                                   {{2, 6, 3, 2}, 6}, {{3, 4}, 2},        {{2, 4, 5}, 4},
                                   {{0, 4, 2}, 2},    {{1, 2, 2, 2, 2}, 1}};
  uint64_t seed = 50;
  for (DType dt : kFloatDTypes) {
    for (const auto& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + dims_str(c.dims) + " groups=" + std::to_string(c.groups));
      const int64_t N = c.dims[0], C = c.dims[1];
      int64_t S = 1;
      for (size_t d = 2; d < c.dims.size(); ++d) S *= c.dims[d];
      Tensor x = random_tensor(dt, c.dims, seed++, -1, 2);
      Tensor gamma = random_tensor(dt, {C}, seed++), beta = random_tensor(dt, {C}, seed++);
      const auto xv = to_doubles(x);
      std::vector<double> y(xv.size());
      const int64_t len = C / c.groups * S;
      // One row per (n, group) of len = C/groups * S contiguous elements; the element's channel
      // is g0 + j / S, so gamma/beta are passed shifted to the group's first channel.
      const std::vector<double> gv = to_doubles(gamma), bv = to_doubles(beta);
      for (int64_t r = 0; r < N * c.groups; ++r) {
        const int64_t g0 = (r % c.groups) * (C / c.groups);
        std::vector<double> gs(gv.begin() + g0, gv.end()), bs(bv.begin() + g0, bv.end());
        ref_norm_rows(xv, y, 1, len, false, 1e-5, gs, bs, [&](int64_t, int64_t j) { return r * len + j; },
                      [&](int64_t j) { return j / S; });
      }
      EXPECT_TRUE(all_close(run_op(ops::GroupNorm{c.groups, 1e-5}, {x, gamma, beta}), c.dims, y, tol_for(dt)));
    }
  }
}

TEST(Norm, GroupNormRejectsBadInputs) {
  const Shape x = Shape::of({2, 6, 4}), p = Shape::of({6});
  EXPECT_THAT(error_message([&] { infer_node(ops::GroupNorm{4, 1e-5}, {x, p, p}); }),
              HasSubstr("groups=4 does not divide the channel count C=6"));
  EXPECT_THAT(error_message([&] { infer_node(ops::GroupNorm{0, 1e-5}, {x, p, p}); }), HasSubstr("groups must be > 0"));
  EXPECT_THAT(error_message([&] { infer_node(ops::GroupNorm{2, 1e-5}, {x, Shape::of({4}), p}); }),
              HasSubstr("gamma f32[4]"));
  EXPECT_THAT(error_message([&] { infer_node(ops::GroupNorm{2, 1e-5}, {Shape::of({6}), p, p}); }),
              HasSubstr("(N, C, ...)"));
  EXPECT_THAT(error_message([&] {
                infer_node(ops::GroupNorm{2, 1e-5}, {Shape::of({2, 6, 4}, DType::I64), Shape::of({6}, DType::I64),
                                                     Shape::of({6}, DType::I64)});
              }),
              HasSubstr("float"));
  EXPECT_THAT(error_message([&] { infer_node(ops::GroupNorm{2, 1e-5}, {Shape({2, Dim::symbol("c"), 4}), p, p}); }),
              HasSubstr("must be static"));
}

// ---- LayerNorm2d -----------------------------------------------------------------------
TEST(Norm, LayerNorm2dNormalizesOverChannels) {
  uint64_t seed = 80;
  for (DType dt : kFloatDTypes) {
    for (const std::vector<int64_t>& dims : {std::vector<int64_t>{2, 5, 3, 4}, std::vector<int64_t>{1, 3, 17, 19},
                                             std::vector<int64_t>{2, 1, 2, 2}, std::vector<int64_t>{0, 3, 2, 2}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + dims_str(dims));
      const int64_t N = dims[0], C = dims[1], HW = dims[2] * dims[3];
      Tensor x = random_tensor(dt, dims, seed++, -1, 2);
      Tensor gamma = random_tensor(dt, {C}, seed++), beta = random_tensor(dt, {C}, seed++);
      const auto xv = to_doubles(x);
      std::vector<double> y(xv.size());
      // row r = (n, hw); element j = channel
      ref_norm_rows(xv, y, N * HW, C, false, 1e-6, to_doubles(gamma), to_doubles(beta),
                    [&](int64_t r, int64_t j) { return (r / HW * C + j) * HW + r % HW; },
                    [](int64_t j) { return j; });
      EXPECT_TRUE(all_close(run_op(ops::LayerNorm2d{1e-6}, {x, gamma, beta}), dims, y, tol_for(dt)));
    }
  }
  EXPECT_THAT(error_message([] {
                infer_node(ops::LayerNorm2d{}, {Shape::of({2, 3, 4}), Shape::of({3}), Shape::of({3})});
              }),
              HasSubstr("(N, C, H, W)"));
  EXPECT_THAT(error_message([] {
                infer_node(ops::LayerNorm2d{}, {Shape::of({2, 3, 4, 4}), Shape::of({3}), Shape::of({4})});
              }),
              HasSubstr("beta f32[4]"));
}

// ---- BatchNormInference ----------------------------------------------------------------
TEST(Norm, BatchNormInferenceUsesRunningStats) {
  uint64_t seed = 120;
  for (DType dt : kFloatDTypes) {
    for (const std::vector<int64_t>& dims : {std::vector<int64_t>{2, 3, 4}, std::vector<int64_t>{4, 3},
                                             std::vector<int64_t>{2, 3, 2, 3}, std::vector<int64_t>{2, 3, 0}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + dims_str(dims));
      const int64_t C = dims[1];
      int64_t S = 1;
      for (size_t d = 2; d < dims.size(); ++d) S *= dims[d];
      Tensor x = random_tensor(dt, dims, seed++, -2, 2);
      Tensor scale = random_tensor(dt, {C}, seed++), bias = random_tensor(dt, {C}, seed++);
      Tensor mean = random_tensor(dt, {C}, seed++), var = random_tensor(dt, {C}, seed++, 0.1, 2.0);
      const auto xv = to_doubles(x), sv = to_doubles(scale), bv = to_doubles(bias), mv = to_doubles(mean),
                 vv = to_doubles(var);
      std::vector<double> y(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) {
        const int64_t c = static_cast<int64_t>(i) / S % C;
        y[i] = (xv[i] - mv[c]) / std::sqrt(vv[c] + 1e-3) * sv[c] + bv[c];
      }
      EXPECT_TRUE(
          all_close(run_op(ops::BatchNormInference{1e-3}, {x, scale, bias, mean, var}), dims, y, tol_for(dt)));
    }
  }
  const Shape p = Shape::of({3});
  EXPECT_THAT(error_message([&] {
                infer_node(ops::BatchNormInference{}, {Shape::of({2, 3, 4}), p, p, Shape::of({4}), p});
              }),
              HasSubstr("mean f32[4]"));
  EXPECT_THAT(error_message([&] { infer_node(ops::BatchNormInference{}, {Shape::of({3}), p, p, p, p}); }),
              HasSubstr("rank >= 2"));
}

// ---- FusedResidualLN / FusedResidualRmsNorm --------------------------------------------
TEST(Norm, FusedResidualNormsMatchNormOfSum) {
  uint64_t seed = 200;
  for (DType dt : kFloatDTypes) {
    for (bool rms : {false, true}) {
      for (bool has_bias : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + (rms ? " rms" : " ln") + " has_bias=" + std::to_string(has_bias));
        const std::vector<int64_t> dims{2, 3, 8};
        Tensor x = random_tensor(dt, dims, seed++, -1, 2), r = random_tensor(dt, dims, seed++);
        Tensor gamma = random_tensor(dt, {8}, seed++), beta = random_tensor(dt, {8}, seed++);
        std::vector<Tensor> ins{x, r, gamma};
        if (has_bias) ins.push_back(beta);
        // The sum is what an unfused graph would see: rounded to the dtype.
        auto xv = to_doubles(x), rv = to_doubles(r);
        std::vector<double> sv(xv.size());
        for (size_t i = 0; i < xv.size(); ++i) sv[i] = xv[i] + rv[i];
        sv = to_doubles(from_doubles(dt, dims, sv));
        std::vector<double> y(xv.size());
        const double eps = rms ? 1e-6 : 1e-5;
        ref_norm_rows(sv, y, 6, 8, rms, eps, to_doubles(gamma), has_bias ? to_doubles(beta) : std::vector<double>{},
                      [](int64_t row, int64_t j) { return row * 8 + j; }, [](int64_t j) { return j; });
        Op op = rms ? Op(ops::FusedResidualRmsNorm{has_bias, eps}) : Op(ops::FusedResidualLN{has_bias, eps});
        EXPECT_TRUE(all_close(run_op(op, ins), dims, y, tol_for(dt)));
      }
    }
  }
}

TEST(Norm, FusedResidualNormsRejectBadInputs) {
  const Shape x = Shape::of({2, 8}), p = Shape::of({8});
  EXPECT_THAT(error_message([&] { infer_node(ops::FusedResidualLN{true, 1e-5}, {x, x, p}); }),
              HasSubstr("has_bias=true but no beta"));
  EXPECT_THAT(error_message([&] { infer_node(ops::FusedResidualRmsNorm{false, 1e-6}, {x, x, p, p}); }),
              HasSubstr("has_bias=false but a beta"));
  EXPECT_THAT(error_message([&] { infer_node(ops::FusedResidualLN{false, 1e-5}, {x, Shape::of({1, 8}), p}); }),
              HasSubstr("residual f32[1,8] must have the shape of x"));
  EXPECT_THAT(error_message([&] { infer_node(ops::FusedResidualLN{false, 1e-5}, {x, x, Shape::of({2, 8})}); }),
              HasSubstr("gamma f32[2,8]"));
  EXPECT_THAT(error_message([&] {
                const Shape i = Shape::of({2, 8}, DType::I32);
                infer_node(ops::FusedResidualRmsNorm{false, 1e-6}, {i, i, Shape::of({8}, DType::I32)});
              }),
              HasSubstr("float"));
}

}  // namespace
}  // namespace rlx
