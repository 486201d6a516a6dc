// Decode GEMVs that compute the RmsNorm or FusedSwiGLU producing their rows in their prologue
// (plan::plan_gemv_prologues; knob webgpu_gemv_prologue): one dispatch less, the same numbers as
// the CPU (the producer's rounding to the dtype included), through the plain, paired-word and
// split-K GEMVs; a producer whose result something else reads is run on its own.
#include <gtest/gtest.h>

#include <string>

#include "support/parity.h"
#include "webgpu/webgpu_test_util.h"

namespace {

using namespace rlx;
using rlx::testing::expect_webgpu_parity;
using rlx::testing::webgpu_dispatches;

CompileOptions prologue(bool on) {
  CompileOptions o;
  o.tuning.webgpu_gemv_prologue = on;
  return o;
}

// rows x k normalized (with beta when asked), then times w [k, n].
Graph norm_gemv(int64_t rows, int64_t k, int64_t n, DType t, bool beta, bool norm_is_output = false) {
  Graph g;
  const Value x = g.input("x", Shape::of({rows, k}, t));
  const Value gamma = g.param("gamma", Shape::of({k}, t));
  const Value y = beta ? g.rms_norm(x, gamma, g.param("beta", Shape::of({k}, t)), 1e-5) : g.rms_norm(x, gamma);
  g.add_output(g.matmul(y, g.param("w", Shape::of({k, n}, t))));
  if (norm_is_output) g.add_output(y);
  return g;
}

TEST(WebGpuGemvPrologue, RmsNormIsComputedByTheGemv) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t rows : {1, 3})
      for (int64_t n : {23, 46}) {  // an odd row length: one value a load; even: two a word when packed
        SCOPED_TRACE(std::string(dtype_name(t)) + " rows " + std::to_string(rows) + " n " + std::to_string(n));
        const Graph g = norm_gemv(rows, 70, n, t, rows == 3);
        EXPECT_EQ(webgpu_dispatches(g, prologue(false)) - webgpu_dispatches(g), 1u);
        expect_webgpu_parity(g);
      }
}

TEST(WebGpuGemvPrologue, SplitKGemvNormalizesTheWholeRow) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    const Graph g = norm_gemv(2, 4100, 40, t, false);  // few columns, long k: split over the y grid
    EXPECT_EQ(webgpu_dispatches(g, prologue(false)) - webgpu_dispatches(g), 1u);
    expect_webgpu_parity(g);
  }
}

TEST(WebGpuGemvPrologue, SwiGLUIsComputedByTheGemv) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : {DType::F32, DType::F16})
    for (bool gate_first : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (gate_first ? " gate first" : " up first"));
      Graph g;
      ops::FusedSwiGLU sw;
      sw.gate_first = gate_first;
      const Value a = g.apply(sw, {g.input("x", Shape::of({2, 2 * 33}, t))});
      g.add_output(g.matmul(a, g.param("w", Shape::of({33, 30}, t))));
      EXPECT_EQ(webgpu_dispatches(g, prologue(false)) - webgpu_dispatches(g), 1u);
      rlx::testing::ParityOptions o;
      o.lo = -3, o.hi = 3;
      expect_webgpu_parity(g, o);
    }
}

TEST(WebGpuGemvPrologue, ANormSomethingElseReadsRunsOnItsOwn) {
  RLX_REQUIRE_WEBGPU();
  const Graph g = norm_gemv(1, 64, 32, DType::F32, false, true);
  EXPECT_EQ(webgpu_dispatches(g, prologue(false)), webgpu_dispatches(g));
  expect_webgpu_parity(g);
}

}  // namespace
