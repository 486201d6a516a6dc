// The Select / Scan / Scatter and Spatial work shared by the Vulkan and WebGPU lowerings
// (plan/select_work.h, plan/spatial_work.h): kernel choices, tiles, parameter tables, and the
// claim refusals that depend on what a device offers.
#include <gtest/gtest.h>

#include <cstring>

#include "plan/select_work.h"
#include "plan/spatial_work.h"
#include "plan/gpu_work_test_util.h"

namespace {

using namespace rlx;

plan::TensorRef ref(DType t, std::vector<int64_t> dims) {
  plan::TensorRef r;
  r.dtype = t;
  r.dims = std::move(dims);
  return r;
}

TEST(SpatialWork, ConvChoosesGemmByOutputChannelsPerGroup) {
  plan::Step st;
  st.node = 3;
  ops::Conv c;
  c.groups = 2;
  c.stride = {2};
  c.pads = {1, 0};
  st.op = c;
  st.in = {ref(DType::F32, {2, 4, 9}), ref(DType::F32, {48, 2, 3})};
  st.out = {ref(DType::F32, {2, 48, 4})};
  plan::ConvWork w = plan::conv_work(st, "WebGPU");
  EXPECT_TRUE(w.gemm);
  EXPECT_EQ(w.tm, 2);  // 24 output channels a group
  EXPECT_EQ(w.cg, 2);
  EXPECT_EQ(w.coutg, 24);
  // A 1-d conv is lifted to the last of three spatial dims.
  EXPECT_EQ(w.win.in, (std::array<int64_t, 3>{1, 1, 9}));
  EXPECT_EQ(w.win.stride, (std::array<int64_t, 3>{1, 1, 2}));
  EXPECT_EQ(w.win.pad, (std::array<int64_t, 3>{0, 0, 1}));
  EXPECT_EQ(w.params().size(), 6u + 18u);
  EXPECT_EQ(w.gemm_tiles(), (std::array<int64_t, 3>{1, 1, 2}));  // 8 columns, 24 of 32 rows, 2 groups
  st.in[1] = ref(DType::F32, {8, 2, 3});  // 4 output channels a group: the direct kernel
  st.out = {ref(DType::F32, {2, 8, 4})};
  w = plan::conv_work(st, "WebGPU");
  EXPECT_FALSE(w.gemm);
  // Sizes past 32-bit indices are an error naming the node.
  st.in[0] = ref(DType::F32, {1, 4, int64_t{1} << 31});
  EXPECT_NE(plantest::thrown([&] { plan::conv_work(st, "WebGPU"); }).find("node 3 (conv): the WebGPU spatial kernels"),
            std::string::npos);
}

TEST(SpatialWork, ResizeTablePutsWeightsInOneOrTwoWords) {
  plan::Step st;
  ops::Resize r;
  r.mode = ResizeMode::Linear;
  r.coord = ResizeCoord::AlignCorners;
  r.sizes = {1, 5};
  st.op = r;
  st.in = {ref(DType::F32, {1, 3})};
  st.out = {ref(DType::F32, {1, 5})};
  const plan::ResizeWork w = plan::resize_work(st, false, "WebGPU");
  EXPECT_EQ(w.entry_words, 3);
  EXPECT_EQ(w.table.size(), 3u * (1 + 5));
  EXPECT_EQ(w.params, (std::vector<uint32_t>{5, 1, 5, 3, 1}));  // total, out dims, x strides
  // Output 1 of 5 over 3 inputs (align corners): 0.5 between inputs 0 and 1.
  EXPECT_EQ(w.table[3 * 2 + 0], 0u);
  EXPECT_EQ(w.table[3 * 2 + 1], 1u);
  float wt;
  std::memcpy(&wt, &w.table[3 * 2 + 2], 4);
  EXPECT_EQ(wt, 0.5f);
  EXPECT_EQ(plan::resize_work(st, true, "Vulkan").entry_words, 4);
}

TEST(SpatialWork, Claims) {
  Graph g;
  ops::Pool p;
  p.kind = PoolKind::Avg;
  p.kernel = {2, 2};
  const NodeId avg_int = plantest::add_on_inputs(g, p, {Shape::of({1, 1, 4, 4}, DType::I32)}, {Shape::of({1, 1, 3, 3}, DType::I32)});
  EXPECT_EQ(plantest::refusal([&](std::string* w) { return plan::spatial_claims_node("WebGPU", g, g.node(avg_int), w); }),
            "the WebGPU average pool computes float tensors, got i32");
  p.kind = PoolKind::Max;
  const NodeId max_int = plantest::add_on_inputs(g, p, {Shape::of({1, 1, 4, 4}, DType::I32)}, {Shape::of({1, 1, 3, 3}, DType::I32)});
  EXPECT_EQ(plantest::refusal([&](std::string* w) { return plan::spatial_claims_node("WebGPU", g, g.node(max_int), w); }), "");
  const NodeId conv_int = plantest::add_on_inputs(g, ops::Conv{}, {Shape::of({1, 1, 4}, DType::I8), Shape::of({1, 1, 2}, DType::I8)},
                                                  {Shape::of({1, 1, 3}, DType::I8)});
  EXPECT_NE(plantest::refusal([&](std::string* w) { return plan::spatial_claims_node("Vulkan", g, g.node(conv_int), w); })
                .find("the Vulkan conv kernel computes f32"),
            std::string::npos);
}

TEST(SelectWork, ScanChunksAndArgReduceTiles) {
  const plan::ScanWork s4 = plan::scan_work(2, 5000, 3, 8);
  EXPECT_EQ(s4.ti, 4u);
  EXPECT_EQ(s4.seg, 4u);
  EXPECT_EQ(s4.ch, 64 * 4);
  EXPECT_EQ(s4.nch, 20);
  EXPECT_EQ(s4.tiles(s4.nch), 2 * 20 * 1);
  const plan::ScanWork s1 = plan::scan_work(1, 100, 1000, 4);
  EXPECT_EQ(s1.ti, 32u);
  EXPECT_EQ(s1.seg, 8u);
  EXPECT_EQ(s1.nch, 2);  // 8 lanes x 8 positions a chunk

  plan::Step st;
  st.node = 7;
  st.op = ops::ArgMax{};
  plan::AxisGeom ag;
  ag.outer = 70000, ag.axis = 3, ag.inner = 1;
  st.geom = ag;
  st.in = {ref(DType::F32, {70000, 3})};
  const plan::ArgReduceWork a = plan::arg_reduce_work(st, "WebGPU");
  EXPECT_EQ(a.ti, 1u);
  EXPECT_EQ(a.tiles, 70000);
  ag.axis = 0;
  st.geom = ag;
  EXPECT_NE(plantest::thrown([&] { plan::arg_reduce_work(st, "WebGPU"); }).find("has no element to pick"), std::string::npos);
}

TEST(SelectWork, TopKAndScatterAdd) {
  plan::Step st;
  ops::TopK tk;
  tk.k = 5;
  st.op = tk;
  plan::AxisGeom ag;
  ag.outer = 2, ag.axis = 100, ag.inner = 3;
  st.geom = ag;
  st.in = {ref(DType::F32, {2, 100, 3})};
  EXPECT_EQ(plan::topk_work(st, "WebGPU").slots, 8u);
  tk.k = 101;
  st.op = tk;
  EXPECT_NE(plantest::thrown([&] { plan::topk_work(st, "WebGPU"); }).find("k = 101 is not in [1, 100]"), std::string::npos);

  plan::Step sc;
  sc.op = ops::ScatterAdd{};
  plan::ScatterAddGeom sg;
  sg.axis = 1, sg.axis_size = 6, sg.count = 2 * 4 * 5;
  sg.idx_dims = {2, 4, 5};
  sg.data_strides = {30, 5, 1};
  sc.geom = sg;
  sc.in = {ref(DType::F32, {2, 6, 5})};
  const plan::ScatterAddWork w = plan::scatter_add_work(sc, "WebGPU");
  EXPECT_EQ(w.outer, 2);
  EXPECT_EQ(w.mid, 4);
  EXPECT_EQ(w.inner, 5);
  EXPECT_TRUE(w.by_dest);  // 10 columns on an axis of 6
  EXPECT_EQ(w.items, 60);
  const std::vector<uint32_t> p = w.params();
  ASSERT_EQ(p.size(), 7u + 16u);
  EXPECT_EQ(p[7 + 2], 5u);    // the last index dim
  EXPECT_EQ(p[7 + 3], 1u);    // padding dims
  EXPECT_EQ(p[15 + 0], 30u);  // data's first stride
}

TEST(SelectWork, ClaimsFollowTheDevice) {
  Graph g;
  ops::Sample hot;
  hot.temperature = 0.5;
  const NodeId s = plantest::add_on_inputs(g, hot, {Shape::of({2, 50}, DType::F32)}, {Shape::of({2}, DType::I64)});
  const NodeId c = plantest::add_on_inputs(g, ops::Cumsum{}, {Shape::of({4}, DType::F32)}, {Shape::of({4}, DType::F32)});
  plan::SelectDevice no_f64;
  no_f64.f64 = false;
  no_f64.name = "dev";
  const auto claim = [&](NodeId n, const plan::SelectDevice& d, bool f32_scan) {
    return plantest::refusal(
        [&](std::string* w) { return plan::select_family_claims_node("WebGPU", d, g, g.node(n), w, f32_scan); });
  };
  EXPECT_EQ(claim(s, plan::SelectDevice{}, false), "");
  EXPECT_NE(claim(s, no_f64, false).find("double; dev has no 64-bit floats"), std::string::npos);
  EXPECT_NE(claim(c, no_f64, false).find("accumulates f32 in double"), std::string::npos);
  EXPECT_EQ(claim(c, no_f64, true), "");
  ops::TopK big;
  big.k = 1025;
  const NodeId t = plantest::add_on_inputs(g, big, {Shape::of({2000}, DType::F32)},
                                           {Shape::of({1025}, DType::F32), Shape::of({1025}, DType::I64)});
  EXPECT_NE(claim(t, plan::SelectDevice{}, false).find("k <= 1024"), std::string::npos);
}

TEST(SelectWork, RngUniformExactFormAndBounds) {
  const auto unit = plan::rng_uniform_exact(0, 1);
  ASSERT_TRUE(unit);
  EXPECT_EQ(unit->a, 0);
  EXPECT_EQ(unit->b, 1u);
  EXPECT_EQ(unit->e, -32);
  const auto shifted = plan::rng_uniform_exact(-2.5, 7);  // (-5 * 2^32 + 19 r) * 2^-33
  ASSERT_TRUE(shifted);
  EXPECT_EQ(shifted->a, -5 * (int64_t{1} << 32));
  EXPECT_EQ(shifted->b, 19u);
  EXPECT_EQ(shifted->e, -33);
  EXPECT_FALSE(plan::rng_uniform_exact(0.1, 0.7));        // 0.6 needs 53 bits: the product rounds
  EXPECT_FALSE(plan::rng_uniform_exact(1e300, 2e300));    // beyond f32
  EXPECT_FALSE(plan::rng_uniform_exact(1, 1));            // empty
  EXPECT_FALSE(plan::rng_uniform_exact(0x1p40, 0x1p40 + 1));  // low and the width 2^72 apart in units
  const plan::UniformBounds b = plan::rng_uniform_bounds(DType::F16, 0, 1, "x");
  EXPECT_EQ(b.lo, 0);
  EXPECT_EQ(b.hi, 1 - 0x1p-11);  // the largest f16 below 1
  EXPECT_NE(plantest::thrown([] { plan::rng_uniform_bounds(DType::F16, 1.0001, 1.0002, "node 1"); })
                .find("node 1: the output dtype f16 has no value in [low, high)"),
            std::string::npos);
}

}  // namespace
