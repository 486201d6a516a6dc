// ONNX AffineGrid (opset 20) against a naive reference written from the operator's definition,
// and its malformed forms.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "onnx/onnx_builder.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using testing::OnnxBuilder;
using testing::set_attr;
constexpr int32_t kF32 = onnx::TensorProto::FLOAT;

// ---- AffineGrid ----------------------------------------------------------------------------

OnnxBuilder affine_grid_model(const std::vector<int64_t>& size, bool align) {
  const int64_t sp = static_cast<int64_t>(size.size()) - 2;
  OnnxBuilder b(20, 9);
  b.input("theta", kF32, {size[0], sp, sp + 1}).output("grid");
  b.initializer("size", Tensor::i64({static_cast<int64_t>(size.size())}, size));
  auto& n = b.node("AffineGrid", {"theta", "size"}, {"grid"}, "grid");
  set_attr(n, "align_corners", int64_t{align ? 1 : 0});
  return b;
}

// grid[n, (d,) h, w] = theta[n] @ (x_w, y_h, (z_d,) 1), coordinates normalized to [-1, 1].
std::vector<double> affine_grid_reference(const Tensor& theta, const std::vector<int64_t>& size, bool align) {
  const int64_t sp = static_cast<int64_t>(size.size()) - 2;
  auto coord = [&](int64_t i, int64_t n) {
    return align ? (n == 1 ? 0.0 : -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(n - 1))
                 : (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(n) - 1.0;
  };
  const auto t = theta.to_f32();
  const int64_t d_n = sp == 3 ? size[2] : 1, h_n = size[size.size() - 2], w_n = size.back();
  std::vector<double> out;
  for (int64_t n = 0; n < size[0]; ++n)
    for (int64_t d = 0; d < d_n; ++d)
      for (int64_t h = 0; h < h_n; ++h)
        for (int64_t w = 0; w < w_n; ++w) {
          std::vector<double> v{coord(w, w_n), coord(h, h_n)};
          if (sp == 3) v.push_back(coord(d, d_n));
          v.push_back(1.0);
          for (int64_t r = 0; r < sp; ++r) {
            double acc = 0;
            for (int64_t k = 0; k <= sp; ++k) acc += t[static_cast<size_t>((n * sp + r) * (sp + 1) + k)] * v[static_cast<size_t>(k)];
            out.push_back(acc);
          }
        }
  return out;
}

TEST(OnnxAffineGrid, MatchesTheReferenceIn2dAnd3d) {
  for (const std::vector<int64_t>& size : {std::vector<int64_t>{2, 1, 3, 4}, std::vector<int64_t>{2, 3, 2, 3, 4}})
    for (bool align : {false, true}) {
      SCOPED_TRACE(std::to_string(size.size() - 2) + "-d, align_corners " + std::to_string(align));
      const int64_t sp = static_cast<int64_t>(size.size()) - 2;
      const Tensor theta = testing::random_tensor(DType::F32, {2, sp, sp + 1}, 9);
      const auto got = testing::run_cpu(testing::import_built(affine_grid_model(size, align)), {{"theta", theta}});
      std::vector<int64_t> dims{2};
      dims.insert(dims.end(), size.begin() + 2, size.end());
      dims.push_back(sp);
      EXPECT_TRUE(testing::all_close(got.at(0), dims, affine_grid_reference(theta, size, align)));
    }
}

TEST(OnnxAffineGrid, MalformedNodesAreRefused) {
  auto error_of = [](const OnnxBuilder& b) { return testing::error_message([&] { testing::import_built(b); }); };
  EXPECT_THAT(error_of(affine_grid_model({2, 1, 3}, false)), HasSubstr("size must hold 4 (2-d) or 5 (3-d) values"));
  EXPECT_THAT(error_of(affine_grid_model({2, 1, 0, 4}, false)), HasSubstr("size[2] = 0 must be positive"));
  OnnxBuilder b(20, 9);
  b.input("theta", kF32, {2, 2, 3}).output("grid");
  b.initializer("size", Tensor::i64({5}, std::vector<int64_t>{2, 1, 2, 3, 4}));
  b.node("AffineGrid", {"theta", "size"}, {"grid"}, "grid");
  EXPECT_THAT(error_of(b), HasSubstr("theta must be a float (N, 3, 4) tensor"));
}

}  // namespace
}  // namespace rlx
