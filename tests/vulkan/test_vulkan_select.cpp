// Vulkan Select / Scan / Scatter / Random kernels beyond the shared parity cases: every claimed
// dtype, grids past 65535 workgroups (grid-stride), multi-level scans, both ScatterAdd kernels,
// the Philox stream bit for bit, the error flags (scatter index, NaN / -inf sample rows) and the
// refusals.
#include <cmath>
#include <limits>

#include <gmock/gmock.h>

#include "vulkan/vulkan_test_util.h"

namespace {

using namespace rlx;
using rlx::testing::error_message;
using rlx::testing::expect_vulkan_parity;
using rlx::testing::ParityOptions;
using rlx::testing::Tolerance;

ParityOptions exact() {
  ParityOptions o;
  o.tolerance = [](DType) { return Tolerance{0, 0}; };
  return o;
}

TEST(VulkanSelect, ArgMaxArgMinEveryDtypeAndManyRows) {
  RLX_REQUIRE_VULKAN();
  // [66000, 2] over axis 1: 66000 rows, past 65535 workgroups (grid-stride).
  for (DType t : {DType::I16, DType::U32, DType::Bool, DType::F64, DType::F32})
    for (const std::vector<int64_t>& dims : {std::vector<int64_t>{t == DType::F32 ? 66000 : 300, 2},
                                             std::vector<int64_t>{3, 40, 70}}) {
      for (int64_t axis : {0, 1}) {
        Graph g;
        const Value x = g.input("x", Shape::from(dims, t));
        ops::ArgMax amax;
        amax.axis = axis;
        ops::ArgMin amin;
        amin.axis = axis, amin.select_last = true;
        g.add_output(g.apply(amax, {x}));
        g.add_output(g.apply(amin, {x}));
        ParityOptions o;
        o.int_hi = 3;
        SCOPED_TRACE(std::string(dtype_name(t)) + " axis " + std::to_string(axis));
        expect_vulkan_parity(g, Precision::Fp32, o);
      }
    }
}

TEST(VulkanSelect, TopKWideKeysInnerAxesAndManyRows) {
  RLX_REQUIRE_VULKAN();
  struct C {
    DType t;
    std::vector<int64_t> dims;
    int64_t k, axis;
  };
  for (const C& c : {C{DType::F64, {3, 5000}, 1024, 1}, C{DType::I64, {2, 3000, 3}, 700, 1},
                     C{DType::I8, {4, 300}, 20, 1}, C{DType::I16, {66000, 2}, 1, 1}, C{DType::Bool, {5, 100}, 7, 1},
                     C{DType::F16, {2, 1000, 2}, 1000, 1}})
    for (bool largest : {true, false}) {
      Graph g;
      const auto [v, i] = g.topk(g.input("x", Shape::from(c.dims, c.t)), c.k, c.axis, largest);
      g.add_output(v);
      g.add_output(i);
      ParityOptions o = exact();
      o.int_hi = 5, o.lo = -3, o.hi = 3;
      SCOPED_TRACE(std::string(dtype_name(c.t)) + " k " + std::to_string(c.k));
      expect_vulkan_parity(g, Precision::Fp32, o);
    }
}

TEST(VulkanSelect, TopKAboveTheLimitIsRefusedWithTheReason) {
  RLX_REQUIRE_VULKAN();
  Graph g;
  const auto [v, i] = g.topk(g.input("x", Shape::of({2, 5000})), 2000, 1, true);
  g.add_output(v);
  g.add_output(i);
  EXPECT_THAT(error_message([&] { Session(Device::Vulkan).compile(g); }), ::testing::HasSubstr("k <= 1024"));
}

TEST(VulkanSelect, CumsumEveryDtypeMultiLevelAndManyTiles) {
  RLX_REQUIRE_VULKAN();
  struct C {
    DType t;
    std::vector<int64_t> dims;
    int64_t axis;
  };
  // [1, 1.1M] f32: chunk totals scanned twice (two levels); [70000, 3] axis 0 with inner 3;
  // [66000, 3] axis 1: 66000 tiles, past 65535 workgroups.
  for (const C& c : {C{DType::F32, {1, 1100000}, 1}, C{DType::I32, {2, 300000}, 1}, C{DType::F64, {70000, 3}, 0},
                     C{DType::I16, {3, 5000, 7}, 1}, C{DType::U32, {66000, 3}, 1}, C{DType::BF16, {4, 3000}, 1},
                     C{DType::I64, {5, 9000}, 1}})
    for (bool excl : {false, true})
      for (bool rev : {false, true}) {
        if (c.dims[0] > 65535 && (excl || rev)) continue;  // one run past 65535 workgroups is enough
        Graph g;
        g.add_output(g.cumsum(g.input("x", Shape::from(c.dims, c.t)), c.axis, excl, rev));
        ParityOptions o;
        o.int_hi = 100;
        SCOPED_TRACE(std::string(dtype_name(c.t)) + " " + dims_str(c.dims) + (excl ? " exclusive" : "") +
                     (rev ? " reverse" : ""));
        expect_vulkan_parity(g, Precision::Fp32, o);
      }
}

Graph scatter_graph(DType t, const std::vector<int64_t>& data_dims, const std::vector<int64_t>& idx_dims,
                    DType it, int64_t axis) {
  Graph g;
  const Value data = g.input("data", Shape::from(data_dims, t));
  const Value idx = g.input("idx", Shape::from(idx_dims, it));
  const Value upd = g.input("upd", Shape::from(idx_dims, t));
  g.add_output(g.scatter_add(data, idx, upd, axis));
  return g;
}

TEST(VulkanSelect, ScatterAddByColumnAndByDestination) {
  RLX_REQUIRE_VULKAN();
  // By column: 3 x 5000 columns; by destination: 7 columns over a 4000-long index axis.
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I8, DType::I64, DType::U8}) {
    {
      ParityOptions o = exact();
      o.int_hi = 4;
      SCOPED_TRACE(std::string(dtype_name(t)) + " by column");
      expect_vulkan_parity(scatter_graph(t, {6, 3, 5000}, {5, 3, 5000}, DType::I32, 0), Precision::Fp32, o);
    }
    {
      ParityOptions o = exact();
      o.int_hi = 60;
      SCOPED_TRACE(std::string(dtype_name(t)) + " by destination");
      expect_vulkan_parity(scatter_graph(t, {60, 7}, {4000, 7}, DType::I8, 0), Precision::Fp32, o);
    }
  }
}

TEST(VulkanSelect, ScatterAddIndexOutOfRangeIsAnError) {
  RLX_REQUIRE_VULKAN();
  for (const std::vector<int64_t>& idx_dims : {std::vector<int64_t>{2, 5000}, std::vector<int64_t>{30, 2}}) {
    auto cg = Session(Device::Vulkan).compile(scatter_graph(DType::F32, {4, 5000}, idx_dims, DType::I64, 0));
    const int64_t n = idx_dims[0] * idx_dims[1];
    std::vector<int64_t> ok(static_cast<size_t>(n), -4), bad = ok;
    bad[static_cast<size_t>(n - 1)] = 4;
    const Tensor data = Tensor::zeros(DType::F32, {4, 5000}), upd = Tensor::zeros(DType::F32, idx_dims);
    const auto run = [&](const std::vector<int64_t>& ix) {
      return cg.run({{"data", data}, {"idx", Tensor::i64(idx_dims, ix)}, {"upd", upd}});
    };
    EXPECT_NO_THROW(run(ok));
    EXPECT_THAT(error_message([&] { run(bad); }), ::testing::HasSubstr("scatter_add on Vulkan"));
    EXPECT_NO_THROW(run(ok));  // the next run is clean
  }
}

TEST(VulkanSelect, RngMatchesTheCpuStreamBitForBit) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64})
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{300001}})
      for (bool with_offset : {false, true}) {
        Graph g;
        std::vector<Value> ins;
        if (with_offset) ins.push_back(g.input("offset", Shape::of({}, DType::I64)));
        ops::RngUniform u;
        u.shape = Shape::of({n}, t), u.low = -2.5, u.high = 1.0, u.seed = 0x9876543210ULL;
        ops::RngUniform unit;
        unit.shape = Shape::of({n}, t), unit.seed = 3;  // [0, 1): f16 / bf16 round up to 1, then clamp
        g.add_output(g.apply(u, ins));
        g.add_output(g.apply(unit, ins));
        ParityOptions o = exact();
        if (with_offset) o.fixed_inputs = {{"offset", Tensor::scalar_i64(int64_t{3} << 40)}};
        SCOPED_TRACE(std::string(dtype_name(t)) + " n " + std::to_string(n) + (with_offset ? " offset" : ""));
        expect_vulkan_parity(g, Precision::Fp32, o);
      }
}

TEST(VulkanSelect, RngNormalMatchesTheCpu) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64})
    for (int64_t n : {int64_t{1}, int64_t{6}, int64_t{300001}}) {
      Graph g;
      ops::RngNormal r;
      r.shape = Shape::of({n}, t), r.mean = 0.5, r.stddev = 2.0, r.seed = 77;
      g.add_output(g.apply(r, {}));
      ParityOptions o;
      // Box-Muller's log / sin / cos in double may differ from libm in the last bit of double.
      if (t == DType::F64) o.tolerance = [](DType) { return Tolerance{1e-13, 1e-13}; };
      SCOPED_TRACE(std::string(dtype_name(t)) + " n " + std::to_string(n));
      expect_vulkan_parity(g, Precision::Fp32, o);
    }
}

Graph sample_graph(DType t, const std::vector<int64_t>& dims, const ops::Sample& op) {
  Graph g;
  g.add_output(g.apply(op, {g.input("logits", Shape::from(dims, t))}));
  return g;
}

TEST(VulkanSelect, SampleRulesMatchTheCpu) {
  RLX_REQUIRE_VULKAN();
  struct Rule {
    double temperature;
    int64_t top_k;
    double top_p;
  };
  for (DType t : {DType::F32, DType::BF16})
    for (const Rule& r : {Rule{0.0, 0, 1.0}, Rule{0.8, 1024, 1.0}, Rule{1.0, 300, 0.6}, Rule{1.5, 1, 1.0}})
      for (uint64_t seed : {uint64_t{5}, uint64_t{0xfeedface12345ULL}}) {
        ops::Sample op;
        op.temperature = r.temperature, op.top_k = r.top_k, op.top_p = r.top_p, op.seed = seed;
        ParityOptions o;
        o.lo = -4, o.hi = 4, o.seed = seed;
        SCOPED_TRACE(std::string(dtype_name(t)) + " T " + std::to_string(r.temperature) + " top_k " +
                     std::to_string(r.top_k));
        if (t == DType::F32 && seed == 5 && (r.top_k == 0 || r.top_k == 1))  // rows past 65535 workgroups
          expect_vulkan_parity(sample_graph(t, {66000, 3}, op), Precision::Fp32, o);
        expect_vulkan_parity(sample_graph(t, {40, 3000}, op), Precision::Fp32, o);
        expect_vulkan_parity(sample_graph(t, {2, 50000}, op), Precision::Fp32, o);
      }
}

TEST(VulkanSelect, SampleBadRowsAreErrors) {
  RLX_REQUIRE_VULKAN();
  for (double temperature : {0.0, 1.0}) {
    ops::Sample op;
    op.temperature = temperature, op.top_k = 3;
    auto cg = Session(Device::Vulkan).compile(sample_graph(DType::F32, {2, 5}, op));
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> ok = {1, 2, 3, 4, 5, 0, 0, 0, 0, 1};
    std::vector<float> nan = ok, ninf = ok;
    nan[7] = std::nanf("");
    for (size_t j = 5; j < 10; ++j) ninf[j] = -inf;
    const auto run = [&](const std::vector<float>& v) { return cg.run({{"logits", Tensor::f32({2, 5}, v)}}); };
    EXPECT_NO_THROW(run(ok));
    EXPECT_THAT(error_message([&] { run(nan); }), ::testing::HasSubstr("NaN"));
    EXPECT_THAT(error_message([&] { run(ninf); }), ::testing::HasSubstr("-inf"));
    EXPECT_NO_THROW(run(ok));
  }
}

TEST(VulkanSelect, SampleKeepingTooManyTokensIsRefused) {
  RLX_REQUIRE_VULKAN();
  ops::Sample op;
  op.temperature = 1.0;
  EXPECT_THAT(error_message([&] { Session(Device::Vulkan).compile(sample_graph(DType::F32, {2, 5000}, op)); }),
              ::testing::HasSubstr("top_k in [1, 1024]"));
}

}  // namespace
