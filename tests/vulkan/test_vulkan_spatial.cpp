// Vulkan spatial kernels against the CPU oracle where the shared parity cases do not reach: the
// tiled implicit-GEMM conv path (groups with 8+ output channels: every tile height, K over several
// shared-memory chunks, several column tiles, 1-d / 3-d, grouped, ConvTranspose), f64 everywhere,
// integer max pools with negative values, n-linear resize over several axes and every nearest
// rounding, Im2Col of integer dtypes, and several spatial ops in one graph.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "support/conv_graphs.h"
#include "support/test_util.h"
#include "vulkan/vulkan_test_util.h"

namespace {

using namespace rlx;
using rlx::testing::ConvCase;
using rlx::testing::conv_graph;
using rlx::testing::convt_op;
using rlx::testing::expect_vulkan_parity;
using rlx::testing::pool_op;

std::vector<Dim> dims_of(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

// Tile heights 16 / 32 / 64 (8, 24 and 64+ output channels per group), K = 3*3*C over several
// chunks of 16, columns over several 64-wide tiles and batches, partial tiles at every edge.
const std::vector<ConvCase> kGemmConvs = {
    {{2, 5, 11, 13}, {8, 5, 3, 3}, {}, {1, 1, 1, 1}, {}, 1, true},
    {{1, 12, 9, 10}, {24, 12, 3, 3}, {2, 1}, {1, 0, 1, 2}, {1, 2}, 1, false},
    {{2, 7, 8, 9}, {70, 7, 3, 3}, {}, {1, 1, 1, 1}, {}, 1, true},
    {{1, 16, 12, 12}, {96, 8, 1, 1}, {}, {}, {}, 2, true},             // grouped pointwise, coutg 48
    {{3, 6, 40}, {16, 3, 5}, {2}, {2, 1}, {2}, 2, true},              // 1-d, grouped
    {{1, 3, 5, 6, 7}, {10, 3, 2, 3, 3}, {1, 2, 1}, {1, 1, 0, 0, 1, 1}, {}, 1, true},  // 3-d
    {{1, 20, 6, 6}, {40, 4, 3, 3}, {}, {1, 1, 1, 1}, {}, 5, false},    // 5 groups of 4 -> 8 channels
};

TEST(VulkanSpatial, ConvGemmTiles) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (const ConvCase& c : kGemmConvs) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " x" + dims_str(c.x) + " w" + dims_str(c.w));
      expect_vulkan_parity(conv_graph(c, t));
    }
}

TEST(VulkanSpatial, ConvF64) {
  RLX_REQUIRE_VULKAN();
  const std::vector<ConvCase> cases = {kGemmConvs[0], kGemmConvs[4], kGemmConvs[5],
                                       {{1, 6, 7, 7}, {6, 1, 3, 3}, {2, 2}, {1, 1, 1, 1}, {}, 6, true}};
  for (const ConvCase& c : cases) {
    SCOPED_TRACE("x" + dims_str(c.x) + " w" + dims_str(c.w));
    expect_vulkan_parity(conv_graph(c, DType::F64));
  }
}

Graph convt_graph(std::vector<int64_t> x, std::vector<int64_t> w, std::vector<int64_t> stride, std::vector<int64_t> pads,
                  std::vector<int64_t> dil, std::vector<int64_t> outpad, int64_t groups, bool bias, DType t) {
  Graph g;
  std::vector<Value> in{g.input("x", Shape::from(x, t)), g.param("w", Shape::from(w, t))};
  if (bias) in.push_back(g.param("b", Shape::of({w[1] * groups}, t)));
  g.add_output(g.apply(convt_op(stride, pads, dil, outpad, groups), in));
  return g;
}

TEST(VulkanSpatial, ConvTransposeGemmAndF64) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::F32, DType::BF16, DType::F64}) {
    SCOPED_TRACE(dtype_name(t));
    // Tile heights 16 / 32 / 64, stride 2 with output padding, dilation, groups.
    expect_vulkan_parity(convt_graph({2, 6, 5, 7}, {6, 8, 3, 3}, {2, 2}, {1, 1, 1, 1}, {}, {1, 1}, 1, true, t));
    expect_vulkan_parity(convt_graph({1, 20, 4, 4}, {20, 24, 4, 4}, {2, 2}, {1, 1, 1, 1}, {}, {}, 1, false, t));
    expect_vulkan_parity(convt_graph({1, 8, 5, 5}, {8, 32, 3, 2}, {3, 1}, {0, 1, 2, 0}, {2, 1}, {1, 0}, 2, true, t));
    expect_vulkan_parity(convt_graph({1, 4, 3, 3}, {4, 2, 3, 3}, {2, 2}, {}, {}, {}, 2, true, t));  // direct
  }
}

TEST(VulkanSpatial, PoolF64AndCeilMode) {
  RLX_REQUIRE_VULKAN();
  for (PoolKind kind : {PoolKind::Max, PoolKind::Avg})
    for (bool include_pad : {false, true}) {
      Graph g;
      const Value x = g.input("x", Shape::of({2, 3, 9, 10}, DType::F64));
      g.add_output(g.apply(pool_op(kind, {3, 3}, {2, 2}, {1, 1, 1, 1}, include_pad, true), {x}));
      g.add_output(g.apply(pool_op(kind, {2, 3}, {3, 2}, {1, 0, 0, 2}, include_pad, false, {2, 1}), {x}));
      expect_vulkan_parity(g);
    }
}

// Max pools of integer dtypes holding negative values (the lowest value starts each window).
TEST(VulkanSpatial, MaxPoolIntegers) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::I8, DType::I16, DType::I32, DType::I64, DType::U8, DType::U32}) {
    SCOPED_TRACE(dtype_name(t));
    const std::vector<int64_t> dims{1, 3, 7, 8};
    std::vector<double> v(3 * 7 * 8);
    for (size_t i = 0; i < v.size(); ++i) {
      const double mag = static_cast<double>((i * 37) % 100);
      v[i] = is_signed_int(t) ? mag - 120.0 : mag + 150.0 * (i % 2);
    }
    Graph g;
    const Value x = g.input("x", Shape::from(dims, t));
    g.add_output(g.apply(pool_op(PoolKind::Max, {3, 2}, {2, 2}, {1, 1, 1, 0}, false, true), {x}));
    g.add_output(g.apply(pool_op(PoolKind::Max, {2, 2, 3}, {}, {}, false, false), {g.input("z", Shape::of({1, 2, 4, 5, 6}, t))}));
    rlx::testing::ParityOptions o;
    o.fixed_inputs = {{"x", rlx::testing::from_doubles(t, dims, v)}};
    expect_vulkan_parity(g, Precision::Fp32, o);
  }
}

ops::Resize resize_op(ResizeMode mode, ResizeCoord coord, NearestRound nearest, std::vector<double> scales,
                      std::vector<int64_t> sizes) {
  ops::Resize op;
  op.mode = mode, op.coord = coord, op.nearest = nearest, op.scales = std::move(scales), op.sizes = std::move(sizes);
  return op;
}

// n-linear over three and four axes at once (2^3 corners), every nearest rounding, f64 weights.
TEST(VulkanSpatial, ResizeAxesRoundingsAndF64) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::F32, DType::F64, DType::F16})
    for (ResizeCoord coord : {ResizeCoord::HalfPixel, ResizeCoord::Asymmetric, ResizeCoord::AlignCorners,
                              ResizeCoord::PytorchHalfPixel}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + enum_name(coord));
      Graph g;
      const Value x = g.input("x", Shape::of({2, 5, 6, 7}, t));
      g.add_output(g.apply(resize_op(ResizeMode::Linear, coord, NearestRound::RoundPreferFloor, {1, 1.6, 0.5, 2.3}, {}), {x}));
      g.add_output(g.apply(resize_op(ResizeMode::Linear, coord, NearestRound::RoundPreferFloor, {}, {3, 9, 4, 1}), {x}));
      g.add_output(g.apply(resize_op(ResizeMode::Linear, coord, NearestRound::RoundPreferFloor, {}, {1, 3, 2, 2, 5}),
                           {g.input("v", Shape(dims_of({2, 3, 4, 5, 3}), t))}));
      for (NearestRound nr : {NearestRound::RoundPreferFloor, NearestRound::RoundPreferCeil, NearestRound::Floor,
                              NearestRound::Ceil})
        g.add_output(g.apply(resize_op(ResizeMode::Nearest, coord, nr, {1, 2.5, 0.75, 1.5}, {}), {x}));
      expect_vulkan_parity(g);
    }
}

TEST(VulkanSpatial, Im2ColIntegers) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::I32, DType::U8, DType::I64, DType::F64}) {
    SCOPED_TRACE(dtype_name(t));
    ops::Im2Col op;
    op.kernel = {3, 2}, op.stride = {2, 1}, op.pads = {1, 0, 1, 1}, op.dilation = {1, 2};
    Graph g;
    g.add_output(g.apply(op, {g.input("x", Shape::of({2, 3, 9, 8}, t))}));
    expect_vulkan_parity(g);
  }
}

// A small CNN: conv -> relu -> max pool -> depthwise conv -> avg pool -> upsample, so the spatial
// kernels hand each other their results (barriers between dependent dispatches).
TEST(VulkanSpatial, SmallNetwork) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::F32, DType::F16}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    const Value x = g.input("x", Shape::of({2, 3, 32, 32}, t));
    Value h = g.apply(rlx::testing::conv_op({}, {1, 1, 1, 1}),
                      {x, g.param("w1", Shape::of({32, 3, 3, 3}, t)), g.param("b1", Shape::of({32}, t))});
    h = g.relu(h);
    h = g.apply(pool_op(PoolKind::Max, {2, 2}, {2, 2}), {h});
    h = g.apply(rlx::testing::conv_op({}, {1, 1, 1, 1}, {}, 32), {h, g.param("w2", Shape::of({32, 1, 3, 3}, t))});
    h = g.apply(pool_op(PoolKind::Avg, {3, 3}, {1, 1}, {1, 1, 1, 1}), {h});
    g.add_output(g.apply(resize_op(ResizeMode::Linear, ResizeCoord::HalfPixel, NearestRound::RoundPreferFloor,
                                   {1, 1, 2, 2}, {}),
                         {h}));
    expect_vulkan_parity(g);
  }
}

}  // namespace
