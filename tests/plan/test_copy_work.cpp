// copy_work: each Copy op kind maps to its backend-neutral move (a Narrow of one outer row is
// contiguous, of several a 2-D strided copy); the shared copy claim and 32-bit index checks.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "plan/copy_work.h"
#include "plan/gpu_work_test_util.h"
#include "rlx/error.h"

namespace rlx {
namespace {

TEST(CopyWork, EachCopyKind) {
  plan::Step st;
  st.node = 5;
  plan::CopyGeom cg;
  cg.out_dims = {3, 4};
  cg.in_strides = {1, 3};
  cg.in_offset = 2;
  st.op = ops::Transpose{};
  st.geom = cg;
  const auto s = std::get<plan::StridedCopyWork>(plan::copy_work(st, "Vulkan"));
  EXPECT_EQ(s.dims, cg.out_dims);
  EXPECT_EQ(s.strides, cg.in_strides);
  EXPECT_EQ(s.in_offset, 2);
  // Narrow of one outer row: contiguous; of several: 2-D strided.
  plan::AxisGeom ag;
  ag.outer = 1, ag.axis = 10, ag.inner = 3, ag.out_axis = 4, ag.start = 2;
  st.op = ops::Narrow{};
  st.geom = ag;
  const auto c = std::get<plan::ContiguousCopyWork>(plan::copy_work(st, "Vulkan"));
  EXPECT_EQ(c.start, 6);
  EXPECT_EQ(c.count, 12);
  ag.outer = 5;
  st.geom = ag;
  const auto n = std::get<plan::StridedCopyWork>(plan::copy_work(st, "Vulkan"));
  EXPECT_EQ(n.dims, (std::vector<int64_t>{5, 12}));
  EXPECT_EQ(n.strides, (std::vector<int64_t>{30, 1}));
  EXPECT_EQ(n.in_offset, 6);
  st.op = ops::Concat{};
  st.geom = plan::ConcatGeom{};
  EXPECT_TRUE(std::holds_alternative<plan::ConcatCopyWork>(plan::copy_work(st, "Vulkan")));
  st.op = ops::Gather{};
  st.geom = plan::AxisGeom{};
  EXPECT_TRUE(std::holds_alternative<plan::GatherCopyWork>(plan::copy_work(st, "Vulkan")));
  st.op = ops::Pad{};
  st.geom = plan::PadGeom{};
  EXPECT_EQ(std::get<plan::PadCopyWork>(plan::copy_work(st, "Vulkan")).op, &std::get<ops::Pad>(st.op));
  st.op = ops::MatMul{};
  st.geom = plan::GenericGeom{};
  EXPECT_EQ(plantest::thrown([&] { plan::copy_work(st, "WebGPU"); }),
            "node 5 (matmul): not a data-movement op of the WebGPU backend");
}

TEST(CopyWork, ClaimsAndIndexChecks) {
  Graph g;
  const Shape data({4, 3}, DType::F32), out({2, 3}, DType::F32);
  const NodeId bad = plantest::add_on_inputs(g, ops::Gather{}, {data, Shape({2}, DType::F32)}, {out});
  const NodeId good = plantest::add_on_inputs(g, ops::Gather{}, {data, Shape({2}, DType::U8)}, {out});
  for (const auto& [id, expect] : {std::pair{good, ""}, std::pair{bad, "Vulkan gather needs integer indices, got f32"}})
    EXPECT_EQ(plantest::refusal([&](std::string* why) {
                return plan::copy_claims_gather_indices(g, g.node(id), "Vulkan", why);
              }),
              expect);
  EXPECT_EQ(plan::index_u32(INT32_MAX, "w", "X"), uint32_t{INT32_MAX});
  for (const char* kind : {"pad", "stop_gradient", "gather", "narrow"}) EXPECT_TRUE(plan::copy_claims_kind(kind)) << kind;
  EXPECT_FALSE(plan::copy_claims_kind("slice"));
  EXPECT_EQ(plan::index_i32_bits(-1, "w", "X"), 0xffffffffu);
  EXPECT_THROW(plan::index_u32(-1, "w", "X"), Error);
  EXPECT_THROW(plan::index_i32_bits(int64_t{INT32_MAX} + 1, "w", "X"), Error);
  EXPECT_EQ(plantest::thrown([&] { plan::index_u32(int64_t{1} << 31, "node 1 (concat)", "WebGPU"); }),
            "node 1 (concat): the WebGPU kernels index with 32 bits; a size of 2147483648 elements (2^31 or more) is "
            "too large: split the tensor or use the CUDA/CPU backend");
}

TEST(CopyWork, PadTableWords) {
  plan::PadGeom pg;
  pg.out_dims = {3, 2};
  pg.in_strides = {2, 1};
  pg.source_offset = {0, 3};
  pg.source = {-1, 0, 1, 0, 1};
  EXPECT_EQ(plan::pad_table_words(pg, "w", "Vulkan"),
            (std::vector<uint32_t>{2, 3, 2, 2, 1, 0, 3, 0xffffffffu, 0, 1, 0, 1}));
  pg.out_dims = {int64_t{1} << 31};
  EXPECT_NE(plantest::thrown([&] { plan::pad_table_words(pg, "w", "Vulkan"); }), "");
}

}  // namespace
}  // namespace rlx
