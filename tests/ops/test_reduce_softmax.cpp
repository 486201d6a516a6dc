// Softmax and LogSoftmax against a naive double reference.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using testing::error_message;
using testing::from_doubles;
using testing::random_tensor;
using testing::run_cpu1;
using testing::to_doubles;

const double kInf = std::numeric_limits<double>::infinity();

std::vector<double> ref_softmax(const std::vector<double>& x, const std::vector<int64_t>& dims, int64_t axis, bool log) {
  int64_t outer = 1, mid = dims[static_cast<size_t>(axis)], inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= dims[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < dims.size(); ++d) inner *= dims[d];
  std::vector<double> out(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t m) { return static_cast<size_t>((o * mid + m) * inner + i); };
      double mx = -kInf;
      for (int64_t m = 0; m < mid; ++m) mx = std::max(mx, x[at(m)]);
      double sum = 0;
      for (int64_t m = 0; m < mid; ++m) sum += std::exp(x[at(m)] - mx);
      for (int64_t m = 0; m < mid; ++m)
        out[at(m)] = log ? x[at(m)] - mx - std::log(sum) : std::exp(x[at(m)] - mx) / sum;
    }
  return out;
}

Tensor run_softmax(const Tensor& x, int64_t axis, bool log) {
  Graph g;
  Value v = g.input("x", x.shape_info());
  g.add_output(log ? g.log_softmax(v, axis) : g.softmax(v, axis));
  return run_cpu1(g, {{"x", x}});
}

void check_softmax(const Tensor& x, int64_t axis) {
  const int64_t a = axis < 0 ? axis + x.rank() : axis;
  for (bool log : {false, true}) {
    SCOPED_TRACE(std::string(log ? "log_softmax " : "softmax ") + dtype_name(x.dtype()) + " " + dims_str(x.shape()) +
                 " axis " + std::to_string(axis));
    const Tensor out = run_softmax(x, axis, log);
    EXPECT_EQ(out.dtype(), x.dtype());
    EXPECT_TRUE(testing::all_close(out, x.shape(), ref_softmax(to_doubles(x), x.shape(), a, log)));
  }
}

TEST(Reduce, SoftmaxEveryFloatDtypeAndAxis) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    const Tensor x = random_tensor(dt, {3, 4, 5}, 11, -3, 3);
    for (int64_t axis : {0, 1, 2, -1, -2}) check_softmax(x, axis);
  }
  check_softmax(random_tensor(DType::F32, {3, 4, 600}, 12, -5, 5), 1);  // inner blocks
  check_softmax(random_tensor(DType::F32, {2, 1, 3}, 13), 1);          // size-1 axis
  check_softmax(random_tensor(DType::F64, {7}, 14), 0);
}

TEST(Reduce, SoftmaxIsNumericallyStable) {
  const Tensor big = from_doubles(DType::F32, {2, 3}, {1000, 1001, 1002, -1000, -1001, -1002});
  check_softmax(big, 1);
  check_softmax(big, 0);
  const Tensor h = from_doubles(DType::F16, {3}, {60000, 60000, 0});
  check_softmax(h, 0);
}

TEST(Reduce, SoftmaxInfinities) {
  for (int64_t axis : {0, 1}) {
    // Rows along `axis` are [0, -inf, 1]; -inf gets probability 0 / log-probability -inf.
    const Tensor x = axis == 0 ? from_doubles(DType::F32, {3, 1}, {0, -kInf, 1}) : from_doubles(DType::F32, {1, 3}, {0, -kInf, 1});
    const std::vector<double> s = to_doubles(run_softmax(x, axis, false));
    const std::vector<double> l = to_doubles(run_softmax(x, axis, true));
    const double e = std::exp(1.0);
    EXPECT_NEAR(s[0], 1 / (1 + e), 1e-6);
    EXPECT_EQ(s[1], 0.0);
    EXPECT_NEAR(s[2], e / (1 + e), 1e-6);
    EXPECT_NEAR(l[0], -std::log(1 + e), 1e-6);
    EXPECT_EQ(l[1], -kInf);
  }
}

TEST(Reduce, SoftmaxZeroSizeAndBadInputs) {
  EXPECT_EQ(run_softmax(Tensor::zeros(DType::F32, {0, 4}), -1, false).shape(), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(run_softmax(Tensor::zeros(DType::F16, {3, 0}), -1, true).shape(), (std::vector<int64_t>{3, 0}));
  Graph g;
  Value x = g.input("x", Shape::of({2, 3}));
  EXPECT_THAT(error_message([&] { g.softmax(x, 2); }), HasSubstr("axis 2 is out of range"));
  EXPECT_THAT(error_message([&] { g.log_softmax(x, -3); }), HasSubstr("f32[2,3]"));
  for (DType dt : {DType::I32, DType::I64, DType::U8, DType::Bool}) {
    Value i = g.input(std::string("i_") + dtype_name(dt), Shape::of({2, 3}, dt));
    EXPECT_THAT(error_message([&] { g.softmax(i, -1); }), HasSubstr("float dtype"));
    EXPECT_THAT(error_message([&] { g.log_softmax(i, -1); }), HasSubstr("float dtype"));
  }
  EXPECT_THAT(error_message([&] { g.softmax(g.input("s", Shape::of({})), -1); }), HasSubstr("scalar"));
}

}  // namespace
}  // namespace rlx
