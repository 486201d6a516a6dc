// Vulkan rows family beyond the shared parity cases: every claimed dtype of Reduce in both
// thread layouts (rows, columns, general axes) and its 64-bit integer means, NaN / -inf rows of
// Max / Min and softmax, rows longer than the register cache, grids beyond 65535 workgroups,
// f64 norms, the fused residual norms with and without bias, GroupNorm, SwiGLU, empty
// reductions and the refusals (f64 softmax: no double exp in GLSL).
#include <cmath>
#include <limits>
#include <vector>

#include "vulkan/vulkan_test_util.h"
#ifdef RLX_HAVE_VULKAN
#include "backends/vulkan/lower.h"
#include "backends/vulkan/vk_context.h"
#endif

namespace {

using namespace rlx;
using rlx::testing::expect_vulkan_parity;
using rlx::testing::from_doubles;

constexpr ReduceKind kKinds[] = {ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max, ReduceKind::Min, ReduceKind::Prod};

#ifdef RLX_HAVE_VULKAN
// Whether the Vulkan backend runs every non-leaf node of g natively (so parity tests the kernels).
void expect_native(const Graph& g) {
  for (const Node& n : g.nodes()) {
    const std::string name = op_name(n.op);
    if (name == "input" || name == "param" || name == "constant") continue;
    std::string why;
    EXPECT_TRUE(vulkan::vulkan_claims_node(g, n, &vulkan::context().info, &why)) << name << ": " << why;
  }
}
#else
void expect_native(const Graph&) {}
#endif

// Small integer values (signed ones negative too) whose sums and products wrap narrow types.
std::vector<double> int_values(DType t, size_t n, uint64_t salt) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t a = static_cast<int64_t>((i * 53 + salt * 7 + 3) % 97);
    v[i] = static_cast<double>(is_signed_int(t) ? a - 48 : a);
  }
  return v;
}

// Shapes and axes that exercise both layouts: contiguous rows (short, multiple per workgroup,
// longer than a workgroup), columns with a narrow / wide inner run, general walks whose last
// group is reduced or kept, all axes, keep_dims.
struct ReduceShape {
  std::vector<int64_t> dims, axes;
  bool keep = false;
};
const std::vector<ReduceShape>& reduce_shapes() {
  static const std::vector<ReduceShape> v = {
      {{7, 5}, {1}, false},          {{3, 1000}, {1}, true},         {{9, 600}, {0}, false},
      {{4, 37, 3}, {1}, false},      {{2, 3, 4, 5, 6}, {0, 2, 4}, false}, {{2, 3, 4, 5, 6}, {1, 3}, true},
      {{3, 1, 5, 7}, {}, false},     {{6, 1, 300}, {0, 2}, false}};
  return v;
}

void reduce_dtype(DType t) {
  for (ReduceKind k : kKinds)
    for (const auto& s : reduce_shapes()) {
      Graph g;
      g.add_output(g.reduce(k, g.input("x", Shape::from(s.dims, t)), s.axes, s.keep));
      expect_native(g);
      rlx::testing::ParityOptions o;
      int64_t n = 1;
      for (int64_t d : s.dims) n *= d;
      if (!is_float(t)) o.fixed_inputs = {{"x", from_doubles(t, s.dims, int_values(t, static_cast<size_t>(n), 1))}};
      else if (k == ReduceKind::Prod) o.lo = 0.95, o.hi = 1.05;
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + enum_name(k) + " " + dims_str(s.dims) + " axes " + dims_str(s.axes));
      expect_vulkan_parity(g, Precision::Fp32, o);
    }
}

TEST(VulkanRows, ReduceFloatDtypes) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64}) reduce_dtype(t);
}

TEST(VulkanRows, ReduceIntegerDtypes) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::I8, DType::I16, DType::I32, DType::I64, DType::U8, DType::U32}) reduce_dtype(t);
}

// Means of 32-bit values whose sums overflow 32 bits: the kernel sums in 64 bits.
TEST(VulkanRows, IntegerMeanSumsIn64Bits) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::I32, DType::U32}) {
    std::vector<double> v(2 * 700);
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = t == DType::I32 ? (i % 2 ? -2147483000.0 + static_cast<double>(i) : 2147483000.0 - static_cast<double>(i % 5))
                             : 4294967000.0 - static_cast<double>(i);
    for (int64_t axis : {1, 0}) {
      Graph g;
      g.add_output(g.mean(g.input("x", Shape::of({2, 700}, t)), {axis}));
      rlx::testing::ParityOptions o;
      o.fixed_inputs = {{"x", from_doubles(t, {2, 700}, v)}};
      expect_vulkan_parity(g, Precision::Fp32, o);
    }
  }
}

TEST(VulkanRows, BoolAnyAllOverLayouts) {
  RLX_REQUIRE_VULKAN();
  std::vector<double> v(4 * 300);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i / 300 == 0) ? 0 : (i / 300 == 3) ? 1 : (i % 17 == 3);
  for (ReduceKind k : {ReduceKind::Max, ReduceKind::Min})
    for (int64_t axis : {1, 0}) {
      Graph g;
      g.add_output(g.reduce(k, g.input("x", Shape::of({4, 300}, DType::Bool)), {axis}));
      rlx::testing::ParityOptions o;
      o.fixed_inputs = {{"x", from_doubles(DType::Bool, {4, 300}, v)}};
      expect_vulkan_parity(g, Precision::Fp32, o);
    }
}

// Max / Min propagate NaN from anywhere in a line; a line of -inf stays -inf.
TEST(VulkanRows, MaxMinPropagateNaN) {
  RLX_REQUIRE_VULKAN();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (int64_t len : {6, 700}) {
    std::vector<double> v(static_cast<size_t>(4 * len));
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i));
    v[0] = nan;                                   // first element of row 0
    v[static_cast<size_t>(2 * len - 1)] = nan;    // last element of row 1
    for (int64_t j = 0; j < len; ++j) v[static_cast<size_t>(2 * len + j)] = -inf;  // row 2
    v[static_cast<size_t>(3 * len + len / 2)] = inf;
    for (DType t : {DType::F32, DType::F16, DType::F64})
      for (ReduceKind k : {ReduceKind::Max, ReduceKind::Min})
        for (int64_t axis : {1, 0}) {
          Graph g;
          g.add_output(g.reduce(k, g.input("x", Shape::of({4, len}, t)), {axis}));
          rlx::testing::ParityOptions o;
          o.fixed_inputs = {{"x", from_doubles(t, {4, len}, v)}};
          SCOPED_TRACE(std::string(dtype_name(t)) + " " + enum_name(k) + " len " + std::to_string(len));
          expect_vulkan_parity(g, Precision::Fp32, o);
        }
  }
}

// Softmax rows with NaN, -inf entries and all--inf rows, in the register-cached (short) and the
// running-max (long) paths, rows and columns.
TEST(VulkanRows, SoftmaxSpecialValues) {
  RLX_REQUIRE_VULKAN();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (int64_t len : {40, 9000}) {
    std::vector<double> v(static_cast<size_t>(5 * len));
    for (size_t i = 0; i < v.size(); ++i) v[i] = 3 * std::sin(0.37 * static_cast<double>(i));
    const auto at = [&](int64_t r, int64_t j) -> double& { return v[static_cast<size_t>(r * len + j)]; };
    at(0, len / 3) = nan;
    for (int64_t j = 0; j < len; ++j) at(1, j) = -inf;
    for (int64_t j = 0; j < len; j += 2) at(2, j) = -inf;  // half -inf, the first one too
    at(3, 0) = -inf;
    for (DType t : {DType::F32, DType::BF16})
      for (int64_t axis : {1, 0}) {
        Graph g;
        const Value x = g.input("x", Shape::of({5, len}, t));
        g.add_output(g.softmax(x, axis));
        g.add_output(g.log_softmax(x, axis));
        expect_native(g);
        rlx::testing::ParityOptions o;
        o.fixed_inputs = {{"x", from_doubles(t, {5, len}, v)}};
        SCOPED_TRACE(std::string(dtype_name(t)) + " len " + std::to_string(len) + " axis " + std::to_string(axis));
        expect_vulkan_parity(g, Precision::Fp32, o);
      }
  }
}

TEST(VulkanRows, SoftmaxMiddleAxes) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::F32, DType::F16})
    for (int64_t axis : {0, 1, 2}) {
      Graph g;
      const Value x = g.input("x", Shape::of({3, 5000, 3}, t));
      g.add_output(g.softmax(x, axis));
      g.add_output(g.log_softmax(x, axis));
      rlx::testing::ParityOptions o;
      o.lo = -6, o.hi = 6;
      expect_vulkan_parity(g, Precision::Fp32, o);
    }
}

// More lines than a 1-D grid holds (65535 workgroups; one 130-element row per workgroup on a CPU
// device's 64-wide workgroups): the kernels loop over their tiles.
TEST(VulkanRows, GridsBeyond65535Workgroups) {
  RLX_REQUIRE_VULKAN();
  Graph g;
  const Value x = g.input("x", Shape::of({66000, 130}));
  const Value gamma = g.param("gamma", Shape::of({130}));
  g.add_output(g.sum(x, {1}));
  g.add_output(g.layer_norm(x, gamma, g.param("beta", Shape::of({130})), 1e-5));
  g.add_output(g.softmax(x, -1));
  g.add_output(g.apply(ops::FusedSwiGLU{true}, {g.input("s", Shape::of({66000, 2 * 130}))}));
  expect_native(g);
  expect_vulkan_parity(g);
}

TEST(VulkanRows, NormsEveryDtypeAndVariant) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64})
    for (int64_t len : {5, 768, 5000}) {  // many rows per workgroup, cached, re-read
      Graph g;
      const Value x = g.input("x", Shape::of({3, 4, len}, t));
      const Value r = g.input("r", Shape::of({3, 4, len}, t));
      const Value gamma = g.param("gamma", Shape::of({len}, t));
      const Value beta = g.param("beta", Shape::of({len}, t));
      g.add_output(g.layer_norm(x, gamma, beta, 1e-5));
      g.add_output(g.layer_norm(x, gamma, std::nullopt, 1e-3));
      g.add_output(g.rms_norm(x, gamma, std::nullopt, 1e-6));
      g.add_output(g.rms_norm(x, gamma, beta, 0.5));
      for (bool bias : {false, true}) {
        std::vector<Value> in{x, r, gamma};
        if (bias) in.push_back(beta);
        g.add_output(g.apply(ops::FusedResidualLN{bias, 1e-5}, in));
        g.add_output(g.apply(ops::FusedResidualRmsNorm{bias, 1e-6}, in));
      }
      // Over the last two dims (axis 1): rows of 4 * len.
      const Value g2 = g.param("g2", Shape::of({4, len}, t));
      g.add_output(g.layer_norm(x, g2, g.param("b2", Shape::of({4, len}, t)), 1e-5, 1));
      g.add_output(g.rms_norm(x, g2, std::nullopt, 1e-6, 1));
      expect_native(g);
      SCOPED_TRACE(std::string(dtype_name(t)) + " len " + std::to_string(len));
      expect_vulkan_parity(g);
    }
}

TEST(VulkanRows, GroupNorm) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::F32, DType::F16, DType::F64})
    for (int64_t groups : {1, 2, 6}) {
      Graph g;
      const Value x = g.input("x", Shape::of({2, 6, 7, 9}, t));
      g.add_output(g.apply(ops::GroupNorm{groups, 1e-5},
                           {x, g.param("gamma", Shape::of({6}, t)), g.param("beta", Shape::of({6}, t))}));
      expect_native(g);
      SCOPED_TRACE(std::string(dtype_name(t)) + " groups " + std::to_string(groups));
      expect_vulkan_parity(g);
    }
}

TEST(VulkanRows, SwiGLUEveryDtype) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (bool gf : {false, true}) {
      Graph g;
      g.add_output(g.apply(ops::FusedSwiGLU{gf}, {g.input("x", Shape::of({7, 2 * 1001}, t))}));
      expect_native(g);
      rlx::testing::ParityOptions o;
      o.lo = -12, o.hi = 12;
      expect_vulkan_parity(g, Precision::Fp32, o);
    }
}

// Sum / Prod / float Mean of nothing are 0 / 1 / NaN (the graph refuses Max / Min of nothing).
TEST(VulkanRows, EmptyReductions) {
  RLX_REQUIRE_VULKAN();
  for (ReduceKind k : {ReduceKind::Sum, ReduceKind::Prod, ReduceKind::Mean})
    for (DType t : {DType::F32, DType::F16}) {
      Graph g;
      g.add_output(g.reduce(k, g.input("x", Shape::of({3, 0}, t)), {1}));
      expect_vulkan_parity(g);
    }
}

#ifdef RLX_HAVE_VULKAN
TEST(VulkanRows, HonestRefusals) {
  RLX_REQUIRE_VULKAN();
  Graph g;
  const Value x = g.input("x", Shape::of({4, 8}, DType::F64));
  const Value s = g.softmax(x, -1);
  const Value w = g.apply(ops::FusedSwiGLU{false}, {x});
  const Value c = g.input("c", Shape::of({2, 3, 4, 4}));
  const Value ln2 = g.apply(ops::LayerNorm2d{1e-6}, {c, g.param("g", Shape::of({3})), g.param("b", Shape::of({3}))});
  g.add_output(s), g.add_output(w), g.add_output(ln2);
  for (Value v : {s, w}) {
    std::string why;
    EXPECT_FALSE(vulkan::vulkan_claims_node(g, g.node(v.node), &vulkan::context().info, &why));
    EXPECT_NE(why.find("double exp"), std::string::npos) << why;
  }
  EXPECT_FALSE(vulkan::vulkan_claims_node(g, g.node(ln2.node), &vulkan::context().info, nullptr));
  // f32 LayerNorm2d is still computed (decomposed by the shared legalize).
  Graph h;
  const Value hc = h.input("c", Shape::of({2, 3, 4, 4}));
  h.add_output(h.apply(ops::LayerNorm2d{1e-6}, {hc, h.param("g", Shape::of({3})), h.param("b", Shape::of({3}))}));
  expect_vulkan_parity(h);
}
#endif

}  // namespace
