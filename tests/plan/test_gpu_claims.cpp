// The claim checks and matmul step checks the shader-language GPU backends share
// (plan/gpu_claims.h, plan/matmul_work.h): refusals name the backend, the fused epilogue's
// operands are found and checked, errors name the node.
#include <gtest/gtest.h>

#include <string>

#include "codegen/elementwise.h"
#include "codegen/language.h"
#include "plan/attention_work.h"
#include "plan/gpu_claims.h"
#include "plan/matmul_work.h"
#include "plan/select_work.h"
#include "plan/gpu_work_test_util.h"
#include "rlx/error.h"

namespace rlx {
namespace {

plan::TensorRef ref(DType t, std::vector<int64_t> dims) {
  plan::TensorRef r;
  r.dtype = t;
  r.dims = std::move(dims);
  return r;
}

plan::Step matmul_step(Op op, std::vector<plan::TensorRef> in, plan::TensorRef out, int64_t bias_len = 0) {
  plan::Step st;
  st.node = 3;
  st.op = std::move(op);
  st.in = std::move(in);
  st.out = {std::move(out)};
  plan::MatMulGeom g;
  g.m = 2, g.k = 4, g.n = 8, g.bias_len = bias_len;
  st.geom = g;
  return st;
}

std::string error_of(const plan::Step& st) {
  return plantest::thrown([&] { plan::matmul_operands(st, "WebGPU"); });
}

TEST(GpuClaims, MatmulOperandsPlainAndFused) {
  const auto a = ref(DType::F32, {2, 4}), b = ref(DType::F32, {4, 8}), c = ref(DType::F32, {2, 8});
  const auto plain = plan::matmul_operands(matmul_step(ops::MatMul{}, {a, b}, c), "Vulkan");
  EXPECT_EQ(plain.fused, nullptr);
  EXPECT_EQ(plain.bias, nullptr);
  EXPECT_EQ(plain.residual, nullptr);

  ops::FusedMatMulBiasAct f;
  f.residual = true;
  const plan::Step st = matmul_step(f, {a, b, ref(DType::F32, {8}), c}, c, 8);
  const auto m = plan::matmul_operands(st, "Vulkan");
  ASSERT_NE(m.fused, nullptr);
  EXPECT_EQ(m.bias, &st.in[2]);
  EXPECT_EQ(m.bias_len, 8);
  EXPECT_EQ(m.residual, &st.in[3]);
}

TEST(GpuClaims, MatmulOperandsErrorsNameTheNodeAndBackend) {
  const auto a = ref(DType::F32, {2, 4}), b = ref(DType::F32, {4, 8}), c = ref(DType::F32, {2, 8});
  EXPECT_EQ(error_of(matmul_step(ops::DotGeneral{}, {a, b}, c)),
            "node 3 (dot_general): the WebGPU backend has no kernel for this op (it should have been legalized)");
  EXPECT_EQ(error_of(matmul_step(ops::MatMul{}, {ref(DType::F16, {2, 4}), b}, c)),
            "node 3 (matmul): WebGPU matmul needs every operand in the result's dtype");
  EXPECT_EQ(error_of(matmul_step(ops::MatMul{}, {ref(DType::Bool, {2, 4}), ref(DType::Bool, {4, 8})},
                                 ref(DType::Bool, {2, 8}))),
            "node 3 (matmul): WebGPU matmul: bool products are not supported (floats and integers only)");
  ops::FusedMatMulBiasAct f;
  EXPECT_EQ(error_of(matmul_step(f, {a, b, ref(DType::F32, {3})}, c, 3)),
            "node 3 (fused_matmul_bias_act): the bias has 3 elements, expected 1 or 8 (one per column)");
  f.residual = true;
  EXPECT_EQ(error_of(matmul_step(f, {a, b, ref(DType::F32, {2, 4})}, c)),
            "node 3 (fused_matmul_bias_act): the residual has 8 elements, expected 16");
  EXPECT_EQ(plantest::thrown([&] {
              plan::check_matmul_index(ref(DType::F32, {int64_t{1} << 31}), "node 3 (matmul)", "A", "Vulkan");
            }),
            "node 3 (matmul): the Vulkan matmul kernels index with 32 bits; A has 2147483648 elements (2^31 or "
            "more): split the product or run it on the CPU or CUDA backend");
}

TEST(GpuClaims, GroupedMatmulChecks) {
  plan::Step st;
  st.node = 2;
  st.op = ops::GroupedMatMul{};
  st.in = {ref(DType::F32, {2, 4}), ref(DType::F32, {3, 4, 8}), ref(DType::I32, {2})};
  st.out = {ref(DType::F32, {2, 8})};
  plan::GroupedMatMulGeom g;
  g.m = 2, g.k = 4, g.n = 8, g.experts = 3;
  st.geom = g;
  EXPECT_EQ(plantest::thrown([&] { plan::check_grouped_matmul(st, "Vulkan"); }), "");
  g.experts = int64_t{1} << 31;
  st.geom = g;
  EXPECT_EQ(plantest::thrown([&] { plan::check_grouped_matmul(st, "Vulkan"); }),
            "node 2 (grouped_matmul): more than 2^31 experts");
}

TEST(GpuClaims, MatmulClaimsNameTheBackend) {
  EXPECT_TRUE(plan::matmul_claims_kind("matmul"));
  EXPECT_TRUE(plan::matmul_claims_kind("grouped_matmul"));
  EXPECT_FALSE(plan::matmul_claims_kind("dot_general"));
  Graph g;
  const Shape a({2, 4}, DType::F32), c({2, 8}, DType::F32);
  const NodeId ok = plantest::add_on_inputs(g, ops::MatMul{}, {a, Shape({4, 8}, DType::F32)}, {c});
  const NodeId mixed = plantest::add_on_inputs(g, ops::MatMul{}, {a, Shape({4, 8}, DType::F16)}, {c});
  EXPECT_EQ(plantest::refusal([&](std::string* why) {
              return plan::matmul_claims_node(codegen::glsl_language(), "Vulkan", g, g.node(ok), why);
            }),
            "");
  EXPECT_EQ(plantest::refusal([&](std::string* why) {
              return plan::matmul_claims_node(codegen::wgsl_language(), "WebGPU", g, g.node(mixed), why);
            }),
            "WebGPU matmul needs every operand in the result's dtype (f32), operand 1 is f16");
  EXPECT_EQ(plan::matmul_epilogue_dtype(DType::BF16), DType::F32);
  EXPECT_EQ(plan::matmul_epilogue_dtype(DType::F64), DType::F64);
  EXPECT_EQ(plan::matmul_epilogue_inputs(DType::F16, true, true), std::vector<DType>(3, DType::F32));
}

TEST(GpuClaims, ElementwiseIsTheLanguagesChain) {
  EXPECT_TRUE(plan::elementwise_claims_kind("elementwise_region"));
  EXPECT_FALSE(plan::elementwise_claims_kind("matmul"));
  Graph g;
  const Value x = g.input("x", Shape({4}, DType::F64));
  const Value y = g.input("y", Shape({4}, DType::F64));
  const NodeId add = g.add_node(ops::Binary{BinaryKind::Add}, {x, y});
  for (const codegen::Language* lang : {&codegen::glsl_language(), &codegen::wgsl_language()}) {
    std::string expect_why, why;
    const bool expect = codegen::chain_supported(*lang, codegen::single_step_chain(g.node(add).op), {DType::F64, DType::F64},
                                                 &expect_why);
    EXPECT_EQ(plan::elementwise_claims_node(*lang, g, g.node(add), &why), expect);
    EXPECT_EQ(why, expect ? "" : expect_why);
  }
}

TEST(GpuClaims, EpiloguePlanAndElementwisePlan) {
  EXPECT_TRUE(plan::matmul_epilogue_plan(DType::F32, false, std::nullopt, false).steps.empty());
  const auto p = plan::matmul_epilogue_plan(DType::F16, true, ActKind::Relu, true);
  EXPECT_EQ(p.steps, codegen::matmul_epilogue_chain(true, ActKind::Relu, true));
  EXPECT_EQ(p.in_dtypes, std::vector<DType>(3, DType::F32));
  EXPECT_EQ(p.out_dtype, DType::F32);
  plan::ElementwiseGeom geom;
  geom.out_dims = {4};
  geom.in_strides = {{1}};
  geom.numel = 4;
  const auto chain = codegen::single_step_chain(ops::Activation{});
  EXPECT_EQ(plan::elementwise_plan_32(chain, {DType::F32}, DType::F32, geom, "n", "Vulkan").steps, chain);
}

TEST(GpuClaims, AttentionIndexChecks) {
  plan::Step st;
  st.node = 9;
  st.op = ops::Attention{};
  plan::AttentionGeom g;
  g.mask = MaskKind::Custom;
  st.geom = g;
  st.in = {ref(DType::F32, {2}), ref(DType::F32, {2}), ref(DType::F32, {2}), ref(DType::F32, {int64_t{1} << 31})};
  st.out = {ref(DType::F32, {2})};
  EXPECT_EQ(plantest::thrown([&] { plan::check_attention_operands(st, "WebGPU"); }),
            "node 9 (attention): the WebGPU attention kernel indexes with 32 bits; its mask has 2147483648 elements "
            "(2^31 or more): split the batch or use the CUDA/CPU backend");
  g.mask = MaskKind::None;
  st.geom = g;
  EXPECT_NO_THROW(plan::check_attention_operands(st, "WebGPU"));
}

// CacheWrite in the shared Scatter family's claims: any cache the kernels index with 32 bits.
TEST(GpuClaims, CacheWriteIsAScatterFamilyClaim) {
  EXPECT_TRUE(plan::scatter_claims_kind("cache_write"));
  auto graph = [](int64_t rows) {
    Graph g;
    g.add_output(g.cache_write(g.input("cache", Shape::of({1, rows, 2, 8})), g.input("rows", Shape::of({1, 1, 2, 8})),
                               g.input("pos", Shape::of({1}, DType::I32))));
    return g;
  };
  for (const char* be : {"Vulkan", "WebGPU"}) {
    std::string why;
    const Graph ok = graph(1024);
    EXPECT_TRUE(plan::select_family_claims_node(be, {}, ok, ok.nodes().back(), &why)) << why;
    const Graph big = graph(int64_t{1} << 27);  // 2^31 elements
    EXPECT_FALSE(plan::select_family_claims_node(be, {}, big, big.nodes().back(), &why));
    EXPECT_EQ(why, std::string(be) + " cache_write indexes with 32 bits; the cache has 2^31 elements or more");
  }
}

}  // namespace
}  // namespace rlx
