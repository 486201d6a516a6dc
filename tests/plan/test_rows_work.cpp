// rows_work: each Rows op kind maps to its backend-neutral work (norm geometry and gamma
// indexing included), and the validation errors name the node; the shared rows claim checks.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "plan/rows_work.h"
#include "plan/gpu_work_test_util.h"
#include "rlx/error.h"

namespace rlx {
namespace {

plan::Step step(Op op, size_t n_in, plan::Geometry geom) {
  plan::Step st;
  st.node = 7;
  st.op = std::move(op);
  st.in.resize(n_in);
  st.out.resize(1);
  st.geom = std::move(geom);
  return st;
}

plan::AxisGeom axis(int64_t outer, int64_t len) {
  plan::AxisGeom g;
  g.outer = outer, g.axis = len;
  return g;
}

std::string error_of(const plan::Step& st) {
  return plantest::thrown([&] { plan::rows_work(st, "Vulkan"); });
}

TEST(RowsWork, ReduceAndSoftmax) {
  EXPECT_TRUE(std::holds_alternative<plan::ReduceWork>(plan::rows_work(step(ops::Reduce{}, 1, plan::ReduceGeom{}), "X")));
  const auto sm = plan::rows_work(step(ops::Softmax{}, 1, axis(2, 3)), "X");
  ASSERT_TRUE(std::holds_alternative<plan::SoftmaxWork>(sm));
  EXPECT_FALSE(std::get<plan::SoftmaxWork>(sm).log);
  const auto lsm = plan::rows_work(step(ops::LogSoftmax{}, 1, axis(2, 3)), "X");
  ASSERT_TRUE(std::holds_alternative<plan::SoftmaxWork>(lsm));
  EXPECT_TRUE(std::get<plan::SoftmaxWork>(lsm).log);
}

TEST(RowsWork, SwiGLU) {
  ops::FusedSwiGLU op;
  op.gate_first = true;
  const auto w = plan::rows_work(step(op, 1, axis(4, 8)), "X");
  ASSERT_TRUE(std::holds_alternative<plan::SwiGLUWork>(w));
  EXPECT_TRUE(std::get<plan::SwiGLUWork>(w).gate_first);
  op.gate_first = false;
  EXPECT_FALSE(std::get<plan::SwiGLUWork>(plan::rows_work(step(op, 1, axis(4, 8)), "X")).gate_first);
}

TEST(RowsWork, LayerAndRmsNorm) {
  ops::LayerNorm ln;
  ln.eps = 1e-3;
  auto n = std::get<plan::NormWork>(plan::rows_work(step(ln, 3, axis(5, 16)), "X"));
  EXPECT_FALSE(n.rms);
  EXPECT_FALSE(n.res);
  EXPECT_TRUE(n.beta);
  EXPECT_EQ(n.eps, 1e-3);
  EXPECT_EQ(n.rows, 5);
  EXPECT_EQ(n.len, 16);
  EXPECT_EQ(n.gmod, 1);
  EXPECT_EQ(n.gmul, 0);
  EXPECT_EQ(n.gdiv, 1);
  ops::RmsNorm rms;
  n = std::get<plan::NormWork>(plan::rows_work(step(rms, 2, axis(3, 4)), "X"));
  EXPECT_TRUE(n.rms);
  EXPECT_FALSE(n.beta);
  EXPECT_EQ(n.eps, rms.eps);
}

TEST(RowsWork, FusedResidualNorms) {
  ops::FusedResidualLN ln;
  ln.has_bias = true;
  auto n = std::get<plan::NormWork>(plan::rows_work(step(ln, 4, axis(2, 8)), "X"));
  EXPECT_FALSE(n.rms);
  EXPECT_TRUE(n.res);
  EXPECT_TRUE(n.beta);
  ops::FusedResidualRmsNorm rms;
  n = std::get<plan::NormWork>(plan::rows_work(step(rms, 3, axis(2, 8)), "X"));
  EXPECT_TRUE(n.rms);
  EXPECT_TRUE(n.res);
  EXPECT_FALSE(n.beta);
  EXPECT_EQ(n.rows, 2);
  EXPECT_EQ(n.len, 8);
  // has_bias without a beta input, and a beta input without has_bias.
  ln.has_bias = true;
  EXPECT_EQ(error_of(step(ln, 3, axis(2, 8))),
            "node 7 (fused_residual_ln): has_bias does not agree with the presence of the beta input");
  rms.has_bias = false;
  EXPECT_EQ(error_of(step(rms, 4, axis(2, 8))),
            "node 7 (fused_residual_rms_norm): has_bias does not agree with the presence of the beta input");
}

TEST(RowsWork, GroupNorm) {
  ops::GroupNorm op;
  op.groups = 2;
  op.eps = 1e-4;
  plan::ChannelGeom g;
  g.n = 3, g.channels = 6, g.spatial = 5, g.groups = 2;
  const auto n = std::get<plan::NormWork>(plan::rows_work(step(op, 3, g), "X"));
  EXPECT_FALSE(n.rms);
  EXPECT_FALSE(n.res);
  EXPECT_TRUE(n.beta);
  EXPECT_EQ(n.eps, 1e-4);
  EXPECT_EQ(n.rows, 6);      // n * groups
  EXPECT_EQ(n.len, 15);      // channels / groups * spatial
  EXPECT_EQ(n.gmod, 2);
  EXPECT_EQ(n.gmul, 3);
  EXPECT_EQ(n.gdiv, 5);
  g.groups = 4;
  EXPECT_EQ(error_of(step(op, 3, g)), "node 7 (group_norm): groups=4 does not divide C=6");
  g.groups = 0;
  EXPECT_EQ(error_of(step(op, 3, g)), "node 7 (group_norm): groups=0 does not divide C=6");
}

TEST(RowsWork, OtherOpNamesTheBackend) {
  EXPECT_EQ(error_of(step(ops::LayerNorm2d{}, 3, plan::ChannelGeom{})),
            "node 7 (layer_norm_2d): the Vulkan backend has no rows kernel for this op (it should have been legalized)");
}

TEST(RowsWork, ReduceWalk) {
  plan::Step st;
  st.node = 4;
  st.op = ops::Reduce{};
  st.in = {plan::TensorRef{}};
  st.in[0].dims = {2, 3, 4};
  st.out = {plan::TensorRef{}};
  st.out[0].dims = {2, 4};
  plan::ReduceGeom g;
  g.simple = false;
  g.dims = {2, 3, 4};
  g.reduced = {0, 1, 0};
  g.count = 3;
  st.geom = g;
  const plan::ReduceWalk w = plan::reduce_walk(st, "Vulkan");
  EXPECT_EQ(w.kept_dims, (std::vector<uint32_t>{2, 4}));
  EXPECT_EQ(w.kept_strides, (std::vector<uint32_t>{12, 1}));
  EXPECT_EQ(w.reduced_dims, (std::vector<uint32_t>{3}));
  EXPECT_EQ(w.reduced_strides, (std::vector<uint32_t>{4}));
  EXPECT_FALSE(w.row_first);
  EXPECT_EQ(w.outputs, 8u);
  EXPECT_EQ(w.count, 3u);
  g.kind = ReduceKind::Max;
  g.count = 0;
  g.dims = {2, 0};
  g.reduced = {0, 1};
  st.geom = g;
  EXPECT_EQ(plantest::thrown([&] { plan::reduce_walk(st, "Vulkan"); }),
            "node 4 (reduce): max reduces zero elements (an empty reduced axis); only sum, prod and float mean allow "
            "that");
  g.kind = ReduceKind::Sum;
  g.count = 1;
  g.dims = {2, 3, 2, 3, 2, 3, 2, 3, 2, 3};
  g.reduced = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
  st.geom = g;
  EXPECT_EQ(plantest::thrown([&] { plan::reduce_walk(st, "WebGPU"); }),
            "node 4 (reduce): the WebGPU reduce walks at most 4 kept and 4 reduced axis groups; this one has 5 and 5");
  EXPECT_EQ(plantest::thrown([&] { plan::rows_u32(int64_t{1} << 31, "node 4 (reduce)", "Vulkan"); }),
            "node 4 (reduce): the Vulkan rows kernels index with 32 bits; a size of 2147483648 (2^31 or more) does "
            "not fit: use the CPU or CUDA backend for tensors this large");
}

TEST(RowsWork, ClaimsKind) {
  for (const char* k : {"reduce", "softmax", "log_softmax", "layer_norm", "rms_norm", "fused_residual_ln",
                        "fused_residual_rms_norm", "fused_swiglu", "group_norm"})
    EXPECT_TRUE(plan::rows_claims_kind(k)) << k;
  EXPECT_FALSE(plan::rows_claims_kind("layer_norm_2d"));
  EXPECT_FALSE(plan::rows_claims_kind("batch_norm_inference"));
  EXPECT_FALSE(plan::rows_claims_kind("matmul"));
}

TEST(RowsWork, ClaimsDtypesAgree) {
  Graph g;
  const Shape x({2, 4}, DType::F32);
  const NodeId ok = plantest::add_on_inputs(g, ops::RmsNorm{}, {x, Shape({4}, DType::F32)}, {x});
  const NodeId mixed = plantest::add_on_inputs(g, ops::RmsNorm{}, {x, Shape({4}, DType::F16)}, {x});
  auto agree = [&](NodeId id) {
    return plantest::refusal([&](std::string* why) { return plan::rows_claims_dtypes_agree(g, g.node(id), "WebGPU", why); });
  };
  EXPECT_EQ(agree(ok), "");
  EXPECT_EQ(agree(mixed), "WebGPU rms_norm needs all its operands in one dtype");
  EXPECT_FALSE(plan::rows_claims_dtypes_agree(g, g.node(mixed), "WebGPU", nullptr));
}

TEST(RowsWork, ClaimsAttributes) {
  Graph g;
  const Shape x({2, 4}, DType::F32), gamma({4}, DType::F32);
  ops::FusedResidualLN ln;
  ln.has_bias = true;
  const NodeId bad = plantest::add_on_inputs(g, ln, {x, x, gamma}, {x, x});
  ln.has_bias = false;
  const NodeId good = plantest::add_on_inputs(g, ln, {x, x, gamma}, {x, x});
  auto attributes = [&](NodeId id) {
    return plantest::refusal([&](std::string* why) { return plan::rows_claims_attributes(g, g.node(id), why); });
  };
  EXPECT_EQ(attributes(good), "");
  EXPECT_EQ(attributes(bad), "fused_residual_ln: has_bias does not agree with the presence of the beta input");
  const NodeId gn = plantest::add_on_inputs(g, ops::GroupNorm{}, {gamma, gamma, gamma}, {gamma});
  EXPECT_EQ(attributes(gn), "group_norm needs x of rank >= 2 (N, C, ...)");
}

}  // namespace
}  // namespace rlx
