// Run-time kernel errors (issue 26, items 16 and "poor messages"): every Sample mode, greedy
// included, rejects an all -inf or NaN row naming the row; kernel messages carry the node label
// exactly once (the executor adds it; kernels must not add it again).
#include <cmath>
#include <limits>
#include <string>

#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using testing::error_message;
using testing::from_doubles;

std::string sample_error(const ops::Sample& op, const Tensor& logits) {
  Graph g;
  g.add_output(g.apply(op, {g.input("logits", logits.shape_info())}));
  return error_message([&] { testing::run_cpu1(g, {{"logits", logits}}); });
}

size_t occurrences(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

const ops::Sample kModes[] = {{.temperature = 0.0},
                              {.temperature = 1.0, .seed = 3},
                              {.top_k = 1, .temperature = 0.7, .seed = 4},
                              {.top_p = 0.5, .temperature = 1.3, .seed = 5}};

TEST(KernelErrors, SampleAllNegInfRowIsAnErrorInEveryMode) {
  const double ninf = -std::numeric_limits<double>::infinity();
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (const ops::Sample& op : kModes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " temperature " + std::to_string(op.temperature));
      const std::string m = sample_error(op, from_doubles(dt, {3, 2}, {0, 1, 2, 3, ninf, ninf}));
      EXPECT_THAT(m, HasSubstr("every logit of row 2 is -inf"));
      EXPECT_EQ(occurrences(m, "(sample)"), 1u) << m;
    }
  }
}

TEST(KernelErrors, SampleNanRowIsAnErrorInEveryMode) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const ops::Sample& op : kModes) {
    SCOPED_TRACE("temperature " + std::to_string(op.temperature));
    EXPECT_THAT(sample_error(op, from_doubles(DType::F32, {2, 3}, {0, 1, 2, 5, nan, 1})),
                HasSubstr("logits row 1 has NaN at index 1"));
  }
}

TEST(KernelErrors, GreedySampleStillPicksTheFirstMaximum) {
  const double ninf = -std::numeric_limits<double>::infinity();
  Graph g;
  const Tensor logits = from_doubles(DType::F32, {2, 3}, {ninf, 2, 2, ninf, ninf, 0});
  g.add_output(g.apply(ops::Sample{.temperature = 0.0}, {g.input("logits", logits.shape_info())}));
  EXPECT_EQ(testing::run_cpu1(g, {{"logits", logits}}).to_i64(), (std::vector<int64_t>{1, 2}));
}

TEST(KernelErrors, GatherAndScatterNameTheNodeOnce) {
  {
    Graph g;
    Value x = g.input("x", Shape::of({4, 2}));
    Value i = g.input("i", Shape::of({2}, DType::I64));
    g.add_output(g.gather(x, i, 0));
    const std::string m = error_message([&] {
      testing::run_cpu1(g, {{"x", Tensor::zeros(DType::F32, {4, 2})}, {"i", from_doubles(DType::I64, {2}, {1, 9})}});
    });
    EXPECT_THAT(m, HasSubstr("index 9 is out of range for axis 0 of size 4"));
    EXPECT_EQ(occurrences(m, "(gather)"), 1u) << m;
  }
  {
    Graph g;
    Value d = g.input("d", Shape::of({3}));
    Value i = g.input("i", Shape::of({2}, DType::I32));
    Value u = g.input("u", Shape::of({2}));
    g.add_output(g.scatter_add(d, i, u, 0));
    const std::string m = error_message([&] {
      testing::run_cpu1(g, {{"d", Tensor::zeros(DType::F32, {3})},
                            {"i", from_doubles(DType::I32, {2}, {0, -4})},
                            {"u", Tensor::zeros(DType::F32, {2})}});
    });
    EXPECT_THAT(m, HasSubstr("index -4 is out of range"));
    EXPECT_EQ(occurrences(m, "(scatter_add)"), 1u) << m;
  }
}

}  // namespace
}  // namespace rlx
