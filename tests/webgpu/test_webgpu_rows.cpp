// The WebGPU rows family beyond the shared parity cases: every claimed dtype of Reduce in both
// thread layouts (rows, columns, general axes), integer means summed in 64 bits, i64 sums and
// products beyond 32-bit words reported, NaN / -inf lines of Max / Min and softmax, lines longer
// than the register cache (the online softmax, re-read norms), grids beyond 65535 workgroups,
// the fused residual norms with and without bias, GroupNorm, SwiGLU, empty reductions and the
// refusals (f64, which WGSL cannot hold).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "support/parity.h"
#include "webgpu/webgpu_test_util.h"
#ifdef RLX_HAVE_WEBGPU
#include "backends/webgpu/lower.h"
#include "backends/webgpu/wgpu_context.h"
#endif

namespace {

using namespace rlx;
using rlx::testing::from_doubles;
using rlx::testing::ParityOptions;
using rlx::testing::expect_webgpu_parity;

constexpr ReduceKind kKinds[] = {ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max, ReduceKind::Min, ReduceKind::Prod};


#ifdef RLX_HAVE_WEBGPU
// Whether the WebGPU backend runs every non-leaf node of g natively (so parity tests the kernels).
void expect_native(const Graph& g) {
  for (const Node& n : g.nodes()) {
    const std::string name = op_name(n.op);
    if (name == "input" || name == "param" || name == "constant") continue;
    std::string why;
    EXPECT_TRUE(webgpu::webgpu_claims_node(g, n, &webgpu::context().info, &why)) << name << ": " << why;
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

struct ReduceShape {
  std::vector<int64_t> dims, axes;
  bool keep = false;
};
// Contiguous rows (short, many per workgroup, longer than a workgroup), columns with a narrow /
// wide inner run, general walks whose last group is reduced or kept, all axes, keep_dims.
const std::vector<ReduceShape>& reduce_shapes() {
  static const std::vector<ReduceShape> v = {
      {{7, 5}, {1}, false},     {{3, 1000}, {1}, true},   {{9, 600}, {0}, false},
      {{4, 37, 3}, {1}, false}, {{2, 3, 4, 5, 6}, {0, 2, 4}, false}, {{2, 3, 4, 5, 6}, {1, 3}, true},
      {{3, 1, 5, 7}, {}, false}, {{6, 1, 300}, {0, 2}, false}};
  return v;
}

void reduce_dtype(DType t) {
  for (ReduceKind k : kKinds)
    for (const auto& s : reduce_shapes()) {
      // i64 products of more than a few values leave the 32-bit words WebGPU holds i64 in
      // (reported, see I64BeyondWordsIsReported).
      if (t == DType::I64 && k == ReduceKind::Prod) continue;
      Graph g;
      g.add_output(g.reduce(k, g.input("x", Shape::from(s.dims, t)), s.axes, s.keep));
      expect_native(g);
      ParityOptions o;
      int64_t n = 1;
      for (int64_t d : s.dims) n *= d;
      if (!is_float(t)) o.fixed_inputs = {{"x", from_doubles(t, s.dims, int_values(t, static_cast<size_t>(n), 1))}};
      else if (k == ReduceKind::Prod) o.lo = 0.95, o.hi = 1.05;
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + enum_name(k) + " " + dims_str(s.dims) + " axes " + dims_str(s.axes));
      expect_webgpu_parity(g, o);
    }
}

TEST(WebGpuRows, ReduceFloatDtypes) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : {DType::F32, DType::F16, DType::BF16}) reduce_dtype(t);
}

TEST(WebGpuRows, ReduceIntegerDtypes) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : {DType::I8, DType::I16, DType::I32, DType::I64, DType::U8, DType::U32}) reduce_dtype(t);
}

// Means of 32-bit values whose sums overflow 32 bits: the kernel sums in 64 bits (two words).
TEST(WebGpuRows, IntegerMeanSumsIn64Bits) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : {DType::I32, DType::U32, DType::I64}) {
    std::vector<double> v(2 * 700);
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = t != DType::U32 ? (i % 2 ? -2147483000.0 + static_cast<double>(i) : 2147483000.0 - static_cast<double>(i % 5))
                             : 4294967000.0 - static_cast<double>(i);
    for (int64_t axis : {1, 0}) {
      Graph g;
      g.add_output(g.mean(g.input("x", Shape::of({2, 700}, t)), {axis}));
      ParityOptions o;
      o.fixed_inputs = {{"x", from_doubles(t, {2, 700}, v)}};
      SCOPED_TRACE(std::string(dtype_name(t)) + " axis " + std::to_string(axis));
      expect_webgpu_parity(g, o);
    }
  }
}

// i64 is held in 32-bit words: a sum whose partial sums leave them but whose total fits is
// exact (64-bit accumulation); a sum or product whose result leaves them is an error, not a
// wrapped value; a product with a zero factor is 0 even when the others overflow.
TEST(WebGpuRows, I64BeyondWordsIsReported) {
  RLX_REQUIRE_WEBGPU();
  auto run = [](ReduceKind k, const std::vector<double>& v) {
    Graph g;
    g.add_output(g.reduce(k, g.input("x", Shape::of({1, static_cast<int64_t>(v.size())}, DType::I64)), {1}));
    auto cg = Session(Device::WebGpu).compile(g);
    return cg.run({{"x", from_doubles(DType::I64, {1, static_cast<int64_t>(v.size())}, v)}})[0].to_i64();
  };
  EXPECT_EQ(run(ReduceKind::Sum, {2147483000, 2147483000, -2147483000, -2147483000, 5}), std::vector<int64_t>{5});
  EXPECT_EQ(run(ReduceKind::Prod, {70000, 70000, 0, 3}), std::vector<int64_t>{0});
  EXPECT_EQ(run(ReduceKind::Prod, {-46340, 46340, 1}), std::vector<int64_t>{-46340LL * 46340});
  for (ReduceKind k : {ReduceKind::Sum, ReduceKind::Prod}) {
    try {
      run(k, {2147483000, 2147483000, 7});
      ADD_FAILURE() << enum_name(k) << " beyond 32 bits was not reported";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("32-bit words"), std::string::npos) << e.what();
    }
  }
}

TEST(WebGpuRows, BoolAnyAllOverLayouts) {
  RLX_REQUIRE_WEBGPU();
  std::vector<double> v(4 * 300);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i / 300 == 0) ? 0 : (i / 300 == 3) ? 1 : (i % 17 == 3);
  for (ReduceKind k : {ReduceKind::Max, ReduceKind::Min})
    for (int64_t axis : {1, 0}) {
      Graph g;
      g.add_output(g.reduce(k, g.input("x", Shape::of({4, 300}, DType::Bool)), {axis}));
      ParityOptions o;
      o.fixed_inputs = {{"x", from_doubles(DType::Bool, {4, 300}, v)}};
      expect_webgpu_parity(g, o);
    }
}

// Max / Min propagate NaN from anywhere in a line; a line of -inf stays -inf.
TEST(WebGpuRows, MaxMinPropagateNaN) {
  RLX_REQUIRE_WEBGPU();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (int64_t len : {6, 700}) {
    std::vector<double> v(static_cast<size_t>(4 * len));
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i));
    v[0] = nan;
    v[static_cast<size_t>(2 * len - 1)] = nan;
    for (int64_t j = 0; j < len; ++j) v[static_cast<size_t>(2 * len + j)] = -inf;
    v[static_cast<size_t>(3 * len + len / 2)] = inf;
    for (DType t : {DType::F32, DType::F16})
      for (ReduceKind k : {ReduceKind::Max, ReduceKind::Min})
        for (int64_t axis : {1, 0}) {
          Graph g;
          g.add_output(g.reduce(k, g.input("x", Shape::of({4, len}, t)), {axis}));
          ParityOptions o;
          o.fixed_inputs = {{"x", from_doubles(t, {4, len}, v)}};
          SCOPED_TRACE(std::string(dtype_name(t)) + " " + enum_name(k) + " len " + std::to_string(len));
          expect_webgpu_parity(g, o);
        }
  }
}

// Softmax rows with NaN, -inf entries and all--inf rows, in the register-cached (short) and the
// running-max (long) paths, rows and columns.
TEST(WebGpuRows, SoftmaxSpecialValues) {
  RLX_REQUIRE_WEBGPU();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (int64_t len : {40, 9000}) {
    std::vector<double> v(static_cast<size_t>(5 * len));
    for (size_t i = 0; i < v.size(); ++i) v[i] = 3 * std::sin(0.37 * static_cast<double>(i));
    const auto at = [&](int64_t r, int64_t j) -> double& { return v[static_cast<size_t>(r * len + j)]; };
    at(0, len / 3) = nan;
    for (int64_t j = 0; j < len; ++j) at(1, j) = -inf;
    for (int64_t j = 0; j < len; j += 2) at(2, j) = -inf;
    at(3, 0) = -inf;
    for (DType t : {DType::F32, DType::BF16})
      for (int64_t axis : {1, 0}) {
        Graph g;
        const Value x = g.input("x", Shape::of({5, len}, t));
        g.add_output(g.softmax(x, axis));
        g.add_output(g.log_softmax(x, axis));
        expect_native(g);
        ParityOptions o;
        o.fixed_inputs = {{"x", from_doubles(t, {5, len}, v)}};
        SCOPED_TRACE(std::string(dtype_name(t)) + " len " + std::to_string(len) + " axis " + std::to_string(axis));
        expect_webgpu_parity(g, o);
      }
  }
}

TEST(WebGpuRows, SoftmaxMiddleAxes) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : {DType::F32, DType::F16})
    for (int64_t axis : {0, 1, 2}) {
      Graph g;
      const Value x = g.input("x", Shape::of({3, 5000, 3}, t));
      g.add_output(g.softmax(x, axis));
      g.add_output(g.log_softmax(x, axis));
      ParityOptions o;
      o.lo = -6, o.hi = 6;
      expect_webgpu_parity(g, o);
    }
}

// More lines than a 1-D grid holds (65535 workgroups; one 130-element row per workgroup on a CPU
// adapter's 64-wide workgroups): the kernels loop over their tiles.
TEST(WebGpuRows, GridsBeyond65535Workgroups) {
  RLX_REQUIRE_WEBGPU();
  Graph g;
  const Value x = g.input("x", Shape::of({66000, 130}));
  const Value gamma = g.param("gamma", Shape::of({130}));
  g.add_output(g.sum(x, {1}));
  g.add_output(g.layer_norm(x, gamma, g.param("beta", Shape::of({130})), 1e-5));
  g.add_output(g.softmax(x, -1));
  expect_native(g);
  expect_webgpu_parity(g);
}

TEST(WebGpuRows, NormsEveryDtypeAndVariant) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : {DType::F32, DType::F16, DType::BF16})
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
      const Value g2 = g.param("g2", Shape::of({4, len}, t));  // over the last two dims
      g.add_output(g.layer_norm(x, g2, g.param("b2", Shape::of({4, len}, t)), 1e-5, 1));
      g.add_output(g.rms_norm(x, g2, std::nullopt, 1e-6, 1));
      expect_native(g);
      SCOPED_TRACE(std::string(dtype_name(t)) + " len " + std::to_string(len));
      expect_webgpu_parity(g);
    }
}

TEST(WebGpuRows, GroupNorm) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : {DType::F32, DType::F16})
    for (int64_t groups : {1, 2, 6}) {
      Graph g;
      const Value x = g.input("x", Shape::of({2, 6, 7, 9}, t));
      g.add_output(g.apply(ops::GroupNorm{groups, 1e-5},
                           {x, g.param("gamma", Shape::of({6}, t)), g.param("beta", Shape::of({6}, t))}));
      expect_native(g);
      SCOPED_TRACE(std::string(dtype_name(t)) + " groups " + std::to_string(groups));
      expect_webgpu_parity(g);
    }
}

TEST(WebGpuRows, SwiGLUEveryDtype) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (bool gf : {false, true}) {
      Graph g;
      g.add_output(g.apply(ops::FusedSwiGLU{gf}, {g.input("x", Shape::of({7, 2 * 1001}, t))}));
      expect_native(g);
      ParityOptions o;
      o.lo = -12, o.hi = 12;
      expect_webgpu_parity(g, o);
    }
}

// Sum / Prod / float Mean of nothing are 0 / 1 / NaN (the graph refuses Max / Min of nothing).
TEST(WebGpuRows, EmptyReductions) {
  RLX_REQUIRE_WEBGPU();
  for (ReduceKind k : {ReduceKind::Sum, ReduceKind::Prod, ReduceKind::Mean})
    for (DType t : {DType::F32, DType::F16}) {
      Graph g;
      g.add_output(g.reduce(k, g.input("x", Shape::of({3, 0}, t)), {1}));
      expect_webgpu_parity(g);
    }
  for (ReduceKind k : {ReduceKind::Sum, ReduceKind::Prod}) {
    Graph g;
    g.add_output(g.reduce(k, g.input("x", Shape::of({3, 0}, DType::I32)), {1}));
    expect_webgpu_parity(g);
  }
}

#ifdef RLX_HAVE_WEBGPU
TEST(WebGpuRows, HonestRefusals) {
  RLX_REQUIRE_WEBGPU();
  Graph g;
  const Value x = g.input("x", Shape::of({4, 8}, DType::F64));
  const Value s = g.softmax(x, -1);
  const Value r = g.sum(x, {1});
  g.add_output(s), g.add_output(r);
  for (Value v : {s, r}) {
    std::string why;
    EXPECT_FALSE(webgpu::webgpu_claims_node(g, g.node(v.node), &webgpu::context().info, &why));
    EXPECT_NE(why.find("f64"), std::string::npos) << why;
  }
}
#endif

}  // namespace
