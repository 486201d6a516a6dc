// The Vulkan matmul family beyond the shared parity cases: every claimed dtype on the GEMM, the
// GEMV and its split-K pass (integers wrapping like the CPU), fused epilogues on integers and
// f64, grids past 65535 workgroups, an empty contracting dim, the Fp16/Bf16 precision policies
// (operands rounded, f32 accumulation), GroupedMatMul over dtypes and index types, and its bad
// expert indices reported as errors; the vector GEMV (16-byte loads of B) over the float dtypes
// and row counts, with and without its K split; and the cooperative-matrix GEMM's kernels
// compiled for every configuration (lavapipe has no cooperative matrices: they run on GPUs).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "vulkan/vulkan_test_util.h"
#ifdef RLX_HAVE_VULKAN
#include "backends/vulkan/glsl_compile.h"
#include "backends/vulkan/lower.h"
#include "backends/vulkan/spirv_coopmat.h"
#include "backends/vulkan/variant.h"
#include "backends/vulkan/vk_context.h"
#include "plan/schedule.h"
#include "plan/step_family.h"
#include "vulkan/source_only_context.h"
#endif

namespace {

using namespace rlx;
using namespace rlx::testing;

#ifdef RLX_HAVE_VULKAN

constexpr DType kAllProductTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I8,
                                      DType::I16, DType::I32,  DType::I64,  DType::U8,  DType::U32};

// Integer inputs large enough that sums (and for i32/i64 products) wrap.
ParityOptions wrapping(DType t) {
  ParityOptions o;
  switch (t) {
    case DType::I8: o.int_hi = 100; break;
    case DType::U8: o.int_hi = 250; break;
    case DType::I16: o.int_hi = 30000; break;
    case DType::I32:
    case DType::U32: o.int_hi = int64_t{1} << 30; break;
    case DType::I64: o.int_hi = int64_t{1} << 40; break;
    default: break;
  }
  return o;
}

Graph matmul_graph(const std::vector<int64_t>& a, const std::vector<int64_t>& b, DType t) {
  Graph g;
  g.add_output(g.matmul(g.input("a", Shape::from(a, t)), g.input("b", Shape::from(b, t))));
  return g;
}

Graph fused_graph(int64_t rows, int64_t k, int64_t n, DType t, std::optional<ActKind> act, int64_t bias_len,
                  bool residual) {
  Graph g;
  std::vector<Value> ins{g.input("x", Shape::of({rows, k}, t)), g.param("w", Shape::of({k, n}, t))};
  if (bias_len) ins.push_back(g.param("bias", Shape::of({bias_len}, t)));
  if (residual) ins.push_back(g.input("res", Shape::of({rows, n}, t)));
  ops::FusedMatMulBiasAct f{act};
  f.residual = residual;
  g.add_output(g.apply(f, ins));
  return g;
}

struct Dims2 {
  std::vector<int64_t> a, b;
};

// GEMM (odd tiles, batched with one stride and with a broadcast table), the split-K GEMV (3 rows,
// 2 splits; 1 row, 12 splits), the one-pass GEMV (enough column tiles) and a batched skinny product.
const std::vector<Dims2> kShapes = {{{37, 70}, {70, 45}},    {{2, 5, 9}, {2, 9, 7}},  {{4, 1, 5, 8}, {3, 8, 6}},
                                    {{3, 300}, {300, 130}},  {{1, 3000}, {3000, 70}}, {{2, 8}, {8, 16400}},
                                    {{2, 2, 40}, {40, 33}}};

TEST(VulkanMatmul, EveryDtypeOnGemmAndGemv) {
  RLX_REQUIRE_VULKAN();
  for (DType t : kAllProductTypes)
    for (const Dims2& s : kShapes) {
      SCOPED_TRACE(std::string(dtype_name(t)));
      expect_vulkan_parity(matmul_graph(s.a, s.b, t), Precision::Fp32, wrapping(t));
    }
}

TEST(VulkanMatmul, VectorOperands) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::F32, DType::I32}) {
    expect_vulkan_parity(matmul_graph({70}, {70, 20}, t), Precision::Fp32, wrapping(t));
    expect_vulkan_parity(matmul_graph({6, 70}, {70}, t), Precision::Fp32, wrapping(t));
    expect_vulkan_parity(matmul_graph({3, 6, 70}, {70}, t), Precision::Fp32, wrapping(t));
  }
}

// Integers: the product wraps to the dtype, then bias, activation and residual each wrap again
// (the CPU's unfused semantics); f64 stays in double. GEMM (40 rows) and GEMV (3 rows, split).
TEST(VulkanMatmul, FusedEpilogueOnIntegersAndF64) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::I8, DType::I16, DType::I32, DType::I64, DType::U8, DType::F64})
    for (auto act : std::vector<std::optional<ActKind>>{std::nullopt, ActKind::Relu, ActKind::Abs, ActKind::Neg})
      for (int64_t rows : {40, 3})
        for (int64_t bias_len : {0, 1, 24}) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " rows " + std::to_string(rows) + " bias " + std::to_string(bias_len));
          ParityOptions o = wrapping(t);
          if (t == DType::F64) o.lo = -2, o.hi = 2;
          expect_vulkan_parity(fused_graph(rows, 600, 24, t, act, bias_len, true), Precision::Fp32, o);
        }
}

// Signed values: relu(100 + 100) in i8 is relu(-56) = 0, not 200 wrapped.
TEST(VulkanMatmul, FusedInt8ReluSeesTheWrappedSum) {
  RLX_REQUIRE_VULKAN();
  const Graph g = fused_graph(2, 1, 3, DType::I8, ActKind::Relu, 3, false);
  RunConfig vk;
  vk.label = "vulkan";
  vk.device = Device::Vulkan;
  const NamedTensors ins{{"x", from_doubles(DType::I8, {2, 1}, {10, -10})}};
  const NamedTensors params{{"w", from_doubles(DType::I8, {1, 3}, {10, 12, -3})},
                            {"bias", from_doubles(DType::I8, {3}, {100, 7, -100})}};
  const auto out = run_config(g, vk, ins, params);
  ASSERT_EQ(out.size(), 1u);
  // row 0: 100+100 = -56 -> 0; 120+7 = 127; -30-100 = -130 -> 126. row 1: -100+100 = 0; -120+7 = -113 -> 0;
  // 30-100 = -70 -> 0.
  const std::vector<int64_t> want{0, 127, 126, 0, 0, 0};
  EXPECT_EQ(out[0].to_i64(), want);
}

TEST(VulkanMatmul, F64EpilogueWithoutDoubleMathIsRefused) {
  RLX_REQUIRE_VULKAN();
  const Graph g = fused_graph(4, 8, 8, DType::F64, ActKind::Gelu, 8, false);
  const Node& n = g.nodes().back();
  std::string why;
  EXPECT_FALSE(vulkan::vulkan_claims_node(g, n, nullptr, &why));
  EXPECT_NE(why.find("fused_matmul_bias_act"), std::string::npos) << why;
  EXPECT_NE(why.find("f64"), std::string::npos) << why;
  const Graph ok = fused_graph(4, 8, 8, DType::F64, ActKind::Relu, 8, false);
  EXPECT_TRUE(vulkan::vulkan_claims_node(ok, ok.nodes().back(), nullptr, &why)) << why;
}

// More than 65535 workgroups on each grid axis the kernels loop over.
TEST(VulkanMatmul, GemmBatchPastTheWorkgroupLimit) {
  RLX_REQUIRE_VULKAN();
  expect_vulkan_parity(matmul_graph({70000, 2, 3}, {70000, 3, 2}, DType::F32));  // z: 70000 batch items
}

TEST(VulkanMatmul, GemvColumnsPastTheWorkgroupLimit) {
  RLX_REQUIRE_VULKAN();
  expect_vulkan_parity(matmul_graph({1, 2}, {2, 64 * 65536 + 100}, DType::F32));  // x: 131075 column tiles of 32
}

TEST(VulkanMatmul, GroupedRowsPastTheWorkgroupLimit) {
  RLX_REQUIRE_VULKAN();
  Graph g;
  g.add_output(g.apply(ops::GroupedMatMul{}, {g.input("x", Shape::of({70000, 4})), g.input("w", Shape::of({3, 4, 8})),
                                              g.input("idx", Shape::of({70000}, DType::I32))}));
  std::vector<double> ix(70000);
  for (size_t i = 0; i < ix.size(); ++i) ix[i] = static_cast<double>(i % 3);
  ParityOptions o;
  o.fixed_inputs = {{"idx", from_doubles(DType::I32, {70000}, ix)}};
  expect_vulkan_parity(g, Precision::Fp32, o);  // y: 70000 rows
}

TEST(VulkanMatmul, EmptyContractingDim) {
  RLX_REQUIRE_VULKAN();
  expect_vulkan_parity(matmul_graph({3, 0}, {0, 5}, DType::F32));
  expect_vulkan_parity(matmul_graph({9, 0}, {0, 70}, DType::I32));
  expect_vulkan_parity(fused_graph(2, 0, 5, DType::F16, ActKind::Silu, 5, true));
}

// Fp16 / Bf16: f32 operands rounded to the half type, products accumulated in f32. The result
// matches the CPU product of the rounded operands and differs from the f32 product.
TEST(VulkanMatmul, HalfPrecisionPoliciesRoundTheOperands) {
  RLX_REQUIRE_VULKAN();
  for (Precision p : {Precision::Fp16, Precision::Bf16})
    for (const Dims2& s : std::vector<Dims2>{{{37, 70}, {70, 45}}, {{2, 3000}, {3000, 20}}}) {
      SCOPED_TRACE(precision_name(p));
      const DType h = p == Precision::Fp16 ? DType::F16 : DType::BF16;
      const Graph plain = matmul_graph(s.a, s.b, DType::F32);
      Graph rounded;
      {
        auto half = [&](Value v) { return rounded.cast(rounded.cast(v, h), DType::F32); };
        rounded.add_output(rounded.matmul(half(rounded.input("a", Shape::from(s.a, DType::F32))),
                                          half(rounded.input("b", Shape::from(s.b, DType::F32)))));
      }
      const NamedTensors ins{{"a", random_tensor(DType::F32, s.a, 7)}, {"b", random_tensor(DType::F32, s.b, 8)}};
      RunConfig vk;
      vk.label = "vulkan";
      vk.device = Device::Vulkan;
      vk.options.precision = p;
      const auto got = run_config(plain, vk, ins, {});
      const auto want = run_config(rounded, RunConfig{}, ins, {});
      const auto exact = run_config(plain, RunConfig{}, ins, {});
      const std::vector<double> g = got.at(0).to_f64(), w = want.at(0).to_f64(), e = exact.at(0).to_f64();
      double err = 0, off = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        err = std::max(err, std::abs(g[i] - w[i]));
        off = std::max(off, std::abs(g[i] - e[i]));
      }
      EXPECT_LT(err, 2e-4);
      EXPECT_GT(off, 1e-4);
    }
}

// Split-K GEMV partial sums under an epilogue with a scalar bias (f16, bf16) and exact integers.
TEST(VulkanMatmul, SplitGemvEpilogues) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::F16, DType::BF16, DType::F32, DType::I32})
    for (int64_t rows : {1, 2, 4}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " rows " + std::to_string(rows));
      expect_vulkan_parity(fused_graph(rows, 2000, 40, t, ActKind::Relu, 1, true), Precision::Fp32, wrapping(t));
    }
}

Graph grouped_graph(int64_t m, int64_t k, int64_t n, int64_t e, DType t, DType it) {
  Graph g;
  g.add_output(g.apply(ops::GroupedMatMul{}, {g.input("x", Shape::of({m, k}, t)), g.input("w", Shape::of({e, k, n}, t)),
                                              g.input("idx", Shape::of({m}, it))}));
  return g;
}

TEST(VulkanMatmul, GroupedEveryDtypeAndIndexType) {
  RLX_REQUIRE_VULKAN();
  for (DType t : kAllProductTypes)
    for (DType it : {DType::I8, DType::I16, DType::I32, DType::I64, DType::U8, DType::U32}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " idx " + dtype_name(it));
      const int64_t m = 7, e = 3;
      std::vector<double> ix(static_cast<size_t>(m));
      for (size_t i = 0; i < ix.size(); ++i) ix[i] = static_cast<double>((i * 2 + 1) % e);
      ParityOptions o = wrapping(t);
      o.fixed_inputs = {{"idx", from_doubles(it, {m}, ix)}};
      expect_vulkan_parity(grouped_graph(m, 300, 70, e, t, it), Precision::Fp32, o);
    }
}

TEST(VulkanMatmul, GroupedBadExpertIndexIsAnError) {
  RLX_REQUIRE_VULKAN();
  for (DType it : {DType::I32, DType::I64})
    for (double bad : {3.0, -1.0, 1e6}) {
      const Graph g = grouped_graph(4, 16, 8, 3, DType::F32, it);
      auto cg = Session(Device::Vulkan).compile(g);
      const NamedTensors ins{{"x", random_tensor(DType::F32, {4, 16}, 1)},
                             {"w", random_tensor(DType::F32, {3, 16, 8}, 2)},
                             {"idx", from_doubles(it, {4}, {0, 2, bad, 1})}};
      try {
        cg.run(ins);
        ADD_FAILURE() << "expert index " << bad << " was not reported";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("expert index"), std::string::npos) << e.what();
      }
      // The next run with good indices works.
      NamedTensors good = ins;
      good[2].second = from_doubles(it, {4}, {0, 2, 2, 1});
      EXPECT_NO_THROW(cg.run(good));
    }
}

// The vector GEMV (n a multiple of 16 bytes of elements): f32, f16, bf16 at 1-4 rows, one pass
// (small B) and split over K (a second pass), with a per-column bias, an activation and a
// residual; a ragged last column tile (n = 264: 33 vectors of 8 halfs, tiles of 32 vectors).
TEST(VulkanMatmul, VectorGemv) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t rows : {1, 2, 3, 4})
      for (auto kn : std::vector<std::pair<int64_t, int64_t>>{{70, 264}, {3001, 72}}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " rows " + std::to_string(rows) + " k " + std::to_string(kn.first));
        if (rows != 3) expect_vulkan_parity(fused_graph(rows, kn.first, kn.second, t, ActKind::Gelu, kn.second, true));
        else expect_vulkan_parity(matmul_graph({rows, kn.first}, {kn.first, kn.second}, t));
      }
  // A batched skinny product (rows of A from two batch items against one B).
  expect_vulkan_parity(matmul_graph({2, 2, 300}, {300, 64}, DType::BF16));
}

// A GEMV split over K is one dispatch: the last split of each column tile adds the partials and
// runs the epilogue, and resets its counter, so every later run of the same recording is right.
TEST(VulkanMatmul, SplitGemvFinishesInOneDispatchEveryRun) {
  RLX_REQUIRE_VULKAN();
  Graph g;
  ops::FusedMatMulBiasAct f{ActKind::Relu};
  f.residual = true;
  g.add_output(g.apply(f, {g.input("x", Shape::of({2, 4096})), g.input("w", Shape::of({4096, 64})),
                           g.input("bias", Shape::of({64})), g.input("res", Shape::of({2, 64}))}));
  EXPECT_EQ(rlx::testing::vulkan_dispatches(g), 1u);
  auto cg = Session(Device::Vulkan).compile(g);
  auto ref = Session(Device::Cpu).compile(g);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    NamedTensors ins;
    for (const auto& [name, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
             {"x", {2, 4096}}, {"w", {4096, 64}}, {"bias", {64}}, {"res", {2, 64}}})
      ins.push_back({name, random_tensor(DType::F32, shape, seed * 10 + ins.size())});
    const std::vector<float> got = cg.run(ins)[0].to_f32(), want = ref.run(ins)[0].to_f32();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-3 * (1 + std::abs(want[i]))) << "run " << seed << " at " << i;
  }
}

// A vector GEMV absorbs the RmsNorm of its rows (plan_gemv_prologues): one dispatch, the same
// numbers as the CPU (the norm rounded to the stored dtype first), every dtype, with and without
// beta; not when the norm's result has another reader, nor with the knob off.
TEST(VulkanMatmul, GemvAbsorbsTheRmsNorm) {
  RLX_REQUIRE_VULKAN();
  auto graph = [](DType t, int64_t rows, bool beta, bool second_reader) {
    Graph g;
    const Value x = g.input("x", Shape::of({rows, 512}, t));
    std::vector<Value> ins{x, g.input("gamma", Shape::of({512}, t))};
    if (beta) ins.push_back(g.input("beta", Shape::of({512}, t)));
    ops::RmsNorm n;
    n.eps = 1e-5;
    const Value h = g.apply(n, ins);
    g.add_output(g.matmul(h, g.input("w", Shape::of({512, 96}, t))));
    if (second_reader) g.add_output(g.relu(h));
    return g;
  };
  auto dispatches = [](const Graph& g, bool knob) {
    CompileOptions o;
    o.tuning.vulkan_gemv_prologue = knob;
    return rlx::testing::vulkan_dispatches(g, o);
  };
  EXPECT_EQ(dispatches(graph(DType::F32, 1, false, false), true), 1u);
  EXPECT_EQ(dispatches(graph(DType::F32, 1, false, false), false), 2u);
  EXPECT_EQ(dispatches(graph(DType::F32, 1, false, true), true), 3u);  // the norm, the GEMV, the relu
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t rows : {1, 3})
      for (bool beta : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " rows " + std::to_string(rows) + (beta ? " beta" : ""));
        expect_vulkan_parity(graph(t, rows, beta, false));
      }
}

// ... and the FusedSwiGLU of its rows (the down projection of an MLP), either half the gate.
TEST(VulkanMatmul, GemvAbsorbsTheSwiGLU) {
  RLX_REQUIRE_VULKAN();
  auto graph = [](DType t, int64_t rows, bool gate_first) {
    Graph g;
    ops::FusedSwiGLU sw;
    sw.gate_first = gate_first;
    const Value h = g.apply(sw, {g.input("x", Shape::of({rows, 2 * 384}, t))});
    g.add_output(g.matmul(h, g.input("w", Shape::of({384, 64}, t))));
    return g;
  };
  EXPECT_EQ(rlx::testing::vulkan_dispatches(graph(DType::F32, 1, false)), 1u);
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t rows : {1, 4})
      for (bool gate_first : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " rows " + std::to_string(rows) + (gate_first ? " gate first" : ""));
        expect_vulkan_parity(graph(t, rows, gate_first));
      }
}

// The 128 x 128 SIMT tiles (f32 accumulation, at least 132 of them): ragged edges over a batch,
// a transposed B, and the epilogue on a 2-D product.
TEST(VulkanMatmul, LargeGemmTiles) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    expect_vulkan_parity(matmul_graph({40, 130, 20}, {40, 20, 129}, t));
    Graph g;
    g.add_output(g.matmul(g.input("a", Shape::of({40, 129, 24}, t)),
                          g.transpose(g.input("b", Shape::of({40, 131, 24}, t)), {0, 2, 1})));
    expect_vulkan_parity(g);
    expect_vulkan_parity(fused_graph(1500, 9, 1450, t, ActKind::Relu, 1450, true));
  }
}

// The kernels the matmul lowering emits for the matmul step of `g` on a device like NVIDIA's
// (subgroups of 32, 48 KiB of shared memory, VK_NV_cooperative_matrix when `coopmat`), with
// the step's operands transposed as asked (the geometry patched: the sources do not depend on
// where the operands are).
std::vector<vulkan::Kernel> lowered_kernels(const Graph& g, Precision prec, bool coopmat, bool trans_a = false,
                                            bool trans_b = false, bool knob = true, bool bf16_matrices = false,
                                            bool khr_f16 = false) {
  SourceOnlyContext cx(prec, coopmat, knob);
  cx.dev.coopmat_bf16 = bf16_matrices;
  cx.dev.coopmat_khr_f16 = khr_f16;
  plan::Schedule s = plan::build_schedule(g);
  for (plan::Step& st : s.steps) {
    if (plan::step_family(st.op) != plan::StepFamily::Matmul) continue;
    auto& mg = std::get<plan::MatMulGeom>(st.geom);
    mg.trans_a = trans_a;
    mg.trans_b = trans_b;
    if (trans_a) mg.lda = mg.m;
    if (trans_b) mg.ldb = mg.k;
    vulkan::lower_matmul(cx, st);
  }
  return cx.kernels;
}

// The cooperative-matrix GEMM cannot run on lavapipe: every configuration's GLSL is compiled here
// (f16 and f32 under the Fp16 policy; both transposes; 16-byte and element loads; one batch stride
// and a batch table; no epilogue and bias + activation + residual; 64- and 128-wide tiles).
TEST(VulkanMatmul, CoopmatKernelsCompile) {
  struct Dims {
    int64_t m, k, n;
  };
  int compiled = 0;
  for (DType t : {DType::F16, DType::F32})
    for (const Dims& d : {Dims{64, 96, 136}, Dims{37, 70, 45}, Dims{2048, 64, 2048}})
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (int form = 0; form < 3; ++form) {
            SCOPED_TRACE(std::string(dtype_name(t)) + " m " + std::to_string(d.m) + " ta " + std::to_string(ta) + " tb " +
                         std::to_string(tb) + " form " + std::to_string(form));
            Graph g;
            if (form == 0) {  // one batch stride
              g.add_output(g.matmul(g.input("a", Shape::of({2, d.m, d.k}, t)), g.input("b", Shape::of({2, d.k, d.n}, t))));
            } else if (form == 1) {  // broadcast batch dims: a table of offsets
              g.add_output(
                  g.matmul(g.input("a", Shape::of({2, 1, d.m, d.k}, t)), g.input("b", Shape::of({3, d.k, d.n}, t))));
            } else {
              g = fused_graph(d.m, d.k, d.n, t, ActKind::Silu, d.n, true);
            }
            const Precision prec = t == DType::F32 ? Precision::Fp16 : Precision::Fp32;
            const auto ks = lowered_kernels(g, prec, true, ta, tb);
            ASSERT_EQ(ks.size(), 1u);
            EXPECT_EQ(ks[0].name, "matmul_gemm_coopmat");
            EXPECT_EQ(vulkan::khr_rewrite_of(ks[0].source), vulkan::KhrRewrite::None);
            expect_glsl_compiles(ks[0]);
            // The KHR form of the same kernel (devices listing KHR f16 matrices).
            const auto kk = lowered_kernels(g, prec, true, ta, tb, true, false, true);
            ASSERT_EQ(kk.size(), 1u);
            expect_khr_rewrite(kk[0], vulkan::KhrRewrite::F16);
            ++compiled;
          }
  EXPECT_EQ(compiled, 72);
  // Not taken without the extension, with the knob off, for bf16, or for f32 under Fp32 / Bf16.
  const Graph f16 = matmul_graph({64, 64}, {64, 64}, DType::F16);
  EXPECT_EQ(lowered_kernels(f16, Precision::Fp32, false).at(0).name, "matmul_gemm");
  EXPECT_EQ(lowered_kernels(f16, Precision::Fp32, true, false, false, false).at(0).name, "matmul_gemm");
  EXPECT_EQ(lowered_kernels(matmul_graph({64, 64}, {64, 64}, DType::BF16), Precision::Fp32, true).at(0).name,
            "matmul_gemm");
  for (Precision p : {Precision::Fp32, Precision::Bf16})
    EXPECT_EQ(lowered_kernels(matmul_graph({64, 64}, {64, 64}, DType::F32), p, true).at(0).name, "matmul_gemm");
}

// The bf16 form (devices with KHR bf16 matrices): every configuration's GLSL compiles and its
// SPIR-V takes the KHR rewrite (spirv_coopmat.h; the rewrite itself is tested in
// test_spirv_coopmat.cpp). bf16 products and f32 ones under the Bf16 policy; f16 keeps the NV form.
TEST(VulkanMatmul, CoopmatBf16KernelsCompile) {
  struct Dims {
    int64_t m, k, n;
  };
  int compiled = 0;
  for (DType t : {DType::BF16, DType::F32})
    for (const Dims& d : {Dims{64, 96, 136}, Dims{37, 70, 45}, Dims{2048, 64, 2048}})
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (int form = 0; form < 2; ++form) {
            SCOPED_TRACE(std::string(dtype_name(t)) + " m " + std::to_string(d.m) + " ta " + std::to_string(ta) + " tb " +
                         std::to_string(tb) + " form " + std::to_string(form));
            const Graph g = form == 0 ? matmul_graph({2, d.m, d.k}, {2, d.k, d.n}, t)
                                      : fused_graph(d.m, d.k, d.n, t, ActKind::Silu, d.n, true);
            const Precision prec = t == DType::F32 ? Precision::Bf16 : Precision::Fp32;
            const auto ks = lowered_kernels(g, prec, true, ta, tb, true, true);
            ASSERT_EQ(ks.size(), 1u);
            EXPECT_EQ(ks[0].name, "matmul_gemm_coopmat_bf16");
            expect_khr_rewrite(ks[0], vulkan::KhrRewrite::Bf16);
            ++compiled;
          }
  EXPECT_EQ(compiled, 48);
  // f16 stays on the NV kernel; without the device's bf16 matrices bf16 takes the SIMT GEMM.
  EXPECT_EQ(lowered_kernels(matmul_graph({64, 64}, {64, 64}, DType::F16), Precision::Fp32, true, false, false, true, true)
                .at(0)
                .name,
            "matmul_gemm_coopmat");
  EXPECT_EQ(vulkan::khr_rewrite_of(
                lowered_kernels(matmul_graph({64, 64}, {64, 64}, DType::F16), Precision::Fp32, true, false, false, true, true)
                    .at(0)
                    .source),
            vulkan::KhrRewrite::None);
  // KHR f16 matrices listed but the knob vulkan_coopmat_khr off: the NV form.
  SourceOnlyContext cx(Precision::Fp32, true, true);
  CompileOptions o = cx.options();
  o.tuning.vulkan_coopmat_khr = false;
  SourceOnlyContext off(o);
  off.dev = cx.dev;
  off.dev.coopmat_khr_f16 = true;
  plan::Schedule sched = plan::build_schedule(matmul_graph({64, 64}, {64, 64}, DType::F16));
  for (const plan::Step& st : sched.steps)
    if (plan::step_family(st.op) == plan::StepFamily::Matmul) vulkan::lower_matmul(off, st);
  ASSERT_EQ(off.kernels.size(), 1u);
  EXPECT_EQ(off.kernels[0].name, "matmul_gemm_coopmat");
  EXPECT_EQ(vulkan::khr_rewrite_of(off.kernels[0].source), vulkan::KhrRewrite::None);
  EXPECT_EQ(lowered_kernels(matmul_graph({64, 64}, {64, 64}, DType::BF16), Precision::Fp32, true, false, false, true, false)
                .at(0)
                .name,
            "matmul_gemm");
}

// Knob vulkan_gemm_tile: other tiles of the cooperative-matrix GEMM compile (both forms) and give
// their workgroup size; malformed or oversized tiles are errors naming the knob.
TEST(VulkanMatmul, CoopmatTileKnob) {
  using Dims = std::vector<int64_t>;
  auto lower = [](const std::string& tile, DType t, const Dims& a = {2, 200, 96}, const Dims& b = {2, 96, 136}) {
    SourceOnlyContext nv(Precision::Fp32, true, true);
    CompileOptions o = nv.options();
    o.tuning.vulkan_gemm_tile = tile;
    SourceOnlyContext cx(o);
    cx.dev = nv.dev;
    cx.dev.coopmat_bf16 = cx.dev.coopmat_khr_f16 = true;
    plan::Schedule sched = plan::build_schedule(matmul_graph(a, b, t));
    for (const plan::Step& st : sched.steps)
      if (plan::step_family(st.op) == plan::StepFamily::Matmul) vulkan::lower_matmul(cx, st);
    return cx.kernels;
  };
  for (const char* tile : {"2,4,4,2,32", "4,2,2,4,32", "2,2,4,4,64", "2,2,2,4,16", "4,4,2,2,32", "2,2,2,2,128", "2,2,1,1,256"})
    for (DType t : {DType::F16, DType::BF16}) {
      SCOPED_TRACE(std::string(tile) + " " + dtype_name(t));
      const auto ks = lower(tile, t);
      ASSERT_EQ(ks.size(), 1u);
      int wm = 0, wn = 0;
      ASSERT_EQ(std::sscanf(tile, "%d,%d", &wm, &wn), 2);
      EXPECT_NE(ks[0].source.find("layout(local_size_x = " + std::to_string(32 * wm * wn) + ")"), std::string::npos);
      expect_khr_rewrite(ks[0], t == DType::BF16 ? vulkan::KhrRewrite::Bf16 : vulkan::KhrRewrite::F16);
    }
  for (const char* bad : {"2,2,4", "0,2,4,4,32", "2,2,4,4,48", "8,8,1,1,32", "2,2,4,4,32,1", "4,4,1,1,16"}) {
    SCOPED_TRACE(bad);
    try {
      lower(bad, DType::F16);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("vulkan_gemm_tile"), std::string::npos) << e.what();
    }
  }
  // Unset: 128 x 128 tiles where they fill 132 SMs, else 64 x 64 where those do, else 32 x 32
  // tiles 128 deep (few tiles: each K slice is a round trip to memory).
  for (const auto& [a, b, bm, bk] : {std::tuple{Dims{2048, 512}, Dims{512, 2048}, "128u", "32u"},
                                     std::tuple{Dims{1024, 512}, Dims{512, 1024}, "64u", "32u"},
                                     std::tuple{Dims{128, 768}, Dims{768, 3072}, "32u", "128u"},
                                     std::tuple{Dims{2, 200, 96}, Dims{2, 96, 136}, "32u", "128u"}}) {
    SCOPED_TRACE(std::to_string(a[0]) + " x " + std::to_string(b.back()));
    const auto ks = lower("", DType::BF16, a, b);
    ASSERT_EQ(ks.size(), 1u);
    EXPECT_NE(ks[0].source.find(std::string("#define BM ") + bm + "\n"), std::string::npos);
    EXPECT_NE(ks[0].source.find(std::string("#define BK ") + bk + "\n"), std::string::npos);
  }
  // A tile past the device's shared memory: an error with the sizes.
  try {
    lower("8,4,8,8,64", DType::F16);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bytes of shared memory"), std::string::npos) << e.what();
  }
}

// Few tiles and a long K (BERT's FFN down projection at batch 1): the cooperative-matrix GEMM
// splits K over workgroups and a second dispatch adds the partial sums through the epilogue. The
// sources compile (f16 NV / KHR, bf16 KHR); knob vulkan_gemm_splitk=0 and short K keep one pass.
TEST(VulkanMatmul, CoopmatSplitKSources) {
  auto lower = [](const Graph& g, DType t, bool knob) {
    SourceOnlyContext nv(Precision::Fp32, true, true);
    CompileOptions o = nv.options();
    o.tuning.vulkan_gemm_splitk = knob;
    SourceOnlyContext cx(o);
    cx.dev = nv.dev;
    cx.dev.coopmat_bf16 = cx.dev.coopmat_khr_f16 = t == DType::BF16;
    for (const plan::Step& st : plan::build_schedule(g).steps)
      if (plan::step_family(st.op) == plan::StepFamily::Matmul) vulkan::lower_matmul(cx, st);
    return cx.kernels;
  };
  for (DType t : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    for (const Graph& g : {matmul_graph({96, 2048}, {2048, 200}, t), fused_graph(100, 3000, 300, t, ActKind::Gelu, 300, true)}) {
      const auto ks = lower(g, t, true);
      ASSERT_EQ(ks.size(), 2u);
      EXPECT_NE(ks[0].source.find("#define SPLITK 1\n"), std::string::npos);
      EXPECT_EQ(ks[1].name, "matmul_splitk_sum");
      if (t == DType::BF16) expect_khr_rewrite(ks[0], vulkan::KhrRewrite::Bf16);
      else expect_glsl_compiles(ks[0]);
      expect_glsl_compiles(ks[1]);
      const auto off = lower(g, t, false);
      ASSERT_EQ(off.size(), 1u);
      EXPECT_NE(off[0].source.find("#define SPLITK 0\n"), std::string::npos);
    }
    EXPECT_EQ(lower(matmul_graph({128, 768}, {768, 768}, t), t, true).size(), 1u);  // 6 slices of 128
  }
}

// The workgroup-scope GEMM (VK_NV_cooperative_matrix2) on large products whose tiles lie inside
// the operands: its sources (compiled and rewritten to KHR here) and its near misses.
TEST(VulkanMatmul, WorkgroupScopeGemmSources) {
  using Dims = std::vector<int64_t>;
  auto lower = [](const Graph& g, DType t, bool listed, const std::string& tile = "") {
    SourceOnlyContext nv(Precision::Fp32, true, true);
    CompileOptions o = nv.options();
    if (!tile.empty()) o.tuning.vulkan_gemm_tile = tile;
    SourceOnlyContext cx(o);
    cx.dev = nv.dev;
    cx.dev.coopmat_bf16 = cx.dev.coopmat_khr_f16 = true;
    cx.dev.coopmat2_workgroup = true;
    cx.dev.coopmat2_max_workgroup = 1024;
    const uint32_t comp = t == DType::BF16 ? 1000141000u : 0u;
    if (listed) cx.dev.coopmat2_shapes = {{32, 32, 16, comp, comp, 1, 1, 2, 256}, {32, 16, 16, comp, comp, 1, 1, 2, 128}};
    for (const plan::Step& st : plan::build_schedule(g).steps)
      if (plan::step_family(st.op) == plan::StepFamily::Matmul) vulkan::lower_matmul(cx, st);
    return cx.kernels;
  };
  for (DType t : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    const std::string wg = t == DType::BF16 ? "matmul_gemm_coopmat_wg_bf16" : "matmul_gemm_coopmat_wg";
    Graph tb;  // B transposed, over a strided batch of 2
    tb.add_output(tb.matmul(tb.input("a", Shape::of({2, 2048, 2048}, t)),
                            tb.transpose(tb.input("b", Shape::of({2, 3328, 2048}, t)), {0, 2, 1})));
    for (const Graph& g : {matmul_graph({4096, 2048}, {2048, 3328}, t), fused_graph(4096, 2048, 3328, t, ActKind::Gelu, 3328, true), tb}) {
      const auto ks = lower(g, t, true);
      ASSERT_EQ(ks.size(), 1u);
      EXPECT_EQ(ks[0].name, wg);
      EXPECT_NE(ks[0].source.find("#define LDA 2048u"), std::string::npos);  // compile-time strides
      expect_khr_rewrite(ks[0], t == DType::BF16 ? vulkan::KhrRewrite::Bf16 : vulkan::KhrRewrite::F16);
    }
    // Near misses: the subgroup kernel.
    for (const auto& [a, b] : std::vector<std::pair<Dims, Dims>>{{{4096, 2048}, {2048, 3300}},   // N not a tile multiple
                                                                 {{4040, 2048}, {2048, 3328}},   // M
                                                                 {{4096, 2040}, {2040, 3328}},   // K
                                                                 {{4096, 1024}, {1024, 4096}},   // K below 2048
                                                                 {{4096, 2048}, {2048, 3072}}})  // 384 tiles
      EXPECT_NE(lower(matmul_graph(a, b, t), t, true).at(0).name, wg);
    EXPECT_NE(lower(matmul_graph({4096, 2048}, {2048, 3328}, t), t, false).at(0).name, wg);  // not listed
    EXPECT_NE(lower(matmul_graph({4096, 2048}, {2048, 3328}, t), t, true, "2,2,4,4,32").at(0).name, wg);  // a tile asked
  }
}

// The workgroup-scope GEMM against the CPU where the device has it (a 27-GFLOP product: too
// slow for CPU adapters, which never take that kernel): epilogue, transposed B over a batch.
TEST(VulkanMatmul, WorkgroupScopeGemmParity) {
  RLX_REQUIRE_VULKAN();
  if (!vulkan::context().info.coopmat2_workgroup) GTEST_SKIP() << "the device has no workgroup-scope cooperative matrices";
  for (DType t : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    expect_vulkan_parity(fused_graph(4096, 2048, 3328, t, ActKind::Gelu, 3328, true));
    Graph tb;
    tb.add_output(tb.matmul(tb.input("a", Shape::of({2, 2048, 2048}, t)),
                            tb.transpose(tb.input("b", Shape::of({2, 3328, 2048}, t)), {0, 2, 1})));
    expect_vulkan_parity(tb);
  }
}

// The split-K GEMM against the CPU (on NVIDIA; elsewhere the SIMT GEMM): ragged K and edges, a
// transposed B over a batch, the epilogue after the sum.
TEST(VulkanMatmul, SplitKGemmParity) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    expect_vulkan_parity(matmul_graph({96, 2048}, {2048, 200}, t));
    Graph g;
    g.add_output(g.matmul(g.input("a", Shape::of({3, 50, 1500}, t)),
                          g.transpose(g.input("b", Shape::of({3, 90, 1500}, t)), {0, 2, 1})));
    expect_vulkan_parity(g);
    expect_vulkan_parity(fused_graph(100, 3000, 300, t, ActKind::Gelu, 300, true));
  }
}

// Last in this file: under RLX_VULKAN_VALIDATION=1 the tests above ran with the Khronos layer
// (its messages are collected by the context), and it reported nothing.
TEST(VulkanMatmul, ValidationLayerSilent) {
  RLX_REQUIRE_VULKAN();
  for (const auto& m : vulkan::validation_messages()) ADD_FAILURE() << m;
  EXPECT_EQ(vulkan::validation_error_count(), 0u);
}

#endif  // RLX_HAVE_VULKAN

}  // namespace
