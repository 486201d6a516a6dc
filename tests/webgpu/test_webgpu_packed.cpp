// Packed 16-bit weights on WebGPU (src/backends/webgpu/packed_weights.h): which params are held
// two values per 32-bit word, and that the GEMV, split-K GEMV, GEMM, fused-epilogue and grouped
// kernels read them right: odd element counts (a padded last word), odd K, a view at an offset
// that is not word aligned, both operands packed, new values uploaded packed, and a param that an
// elementwise op also reads kept as f32 words. Each case compares with the CPU; a wrong layout
// (halves swapped, offsets in words) gives errors of the order of the values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "support/parity.h"
#include "support/test_util.h"
#include "webgpu/webgpu_test_util.h"
#ifdef RLX_HAVE_WEBGPU
#include "backends/webgpu/packed_weights.h"
#include "backends/webgpu/variant.h"
#include "codegen/language.h"
#endif

namespace {

using namespace rlx;
using rlx::testing::expect_webgpu_parity;
using rlx::testing::ParityOptions;

#ifdef RLX_HAVE_WEBGPU
uint64_t packed_now() { return webgpu::webgpu_stats().packed; }

// Runs the parity check with every unpackable weight packed (knob webgpu_packed_weights=1, so the
// GEMM kernels read packed operands too) and returns how many params the WebGPU variant held packed.
uint64_t parity_packed(const Graph& g, const ParityOptions& o = {}) {
  const uint64_t before = packed_now();
  rlx::testing::RunConfig cpu, gpu;
  gpu.label = "webgpu";
  gpu.device = Device::WebGpu;
  gpu.options.tuning.webgpu_packed_weights = 1;
  const auto rep = rlx::testing::compare_configs(g, cpu, gpu, o);
  EXPECT_TRUE(rep.pass) << rep.text << "\n" << g.to_text();
  return packed_now() - before;
}

plan::PlanOptions wgsl_plan() {
  plan::PlanOptions o;
  o.device.storage = plan::StorageCaps::from([](DType t) { return codegen::wgsl_language().storage_dtype(t); });
  return o;
}

Graph linear(int64_t rows, int64_t k, int64_t n, DType t) {
  Graph g;
  g.add_output(g.matmul(g.input("x", Shape::of({rows, k}, t)), g.param("w", Shape::of({k, n}, t))));
  return g;
}
#endif

TEST(WebGpuPacked, OnlyParamsEveryReaderUnpacksArePacked) {
#ifndef RLX_HAVE_WEBGPU
  GTEST_SKIP() << "no WebGPU backend in this build";
#else
  Graph g;
  const Value x = g.input("x", Shape::of({8, 8}, DType::BF16));
  const Value only_matmul = g.param("only_matmul", Shape::of({8, 8}, DType::BF16));
  const Value viewed = g.param("viewed", Shape::of({64}, DType::BF16));
  const Value shared = g.param("shared", Shape::of({8, 8}, DType::BF16));
  const Value normed = g.param("norm_w", Shape::of({8}, DType::BF16));
  const Value wide = g.param("wide", Shape::of({8, 8}));  // f32: held as itself anyway
  const Value out_p = g.param("output_too", Shape::of({8, 8}, DType::BF16));
  Value y = g.matmul(x, only_matmul);
  y = g.matmul(y, g.reshape(viewed, {8, 8}));
  y = g.add(g.matmul(y, shared), shared);
  y = g.rms_norm(y, normed);
  g.add_output(g.matmul(g.cast(y, DType::F32), wide));
  g.add_output(g.matmul(y, out_p));
  g.add_output(out_p);
  const Value folded = g.constant(Tensor::f32({8, 8}, std::vector<float>(64, 0.5f)).cast(DType::BF16));
  g.add_output(g.matmul(x, folded));  // a constant weight (ONNX initializers are constants)
  const std::vector<NodeId> got = webgpu::packed_weights(g, wgsl_plan(), webgpu::PackWeights::All);
  EXPECT_EQ(got, (std::vector<NodeId>{only_matmul.node, viewed.node, folded.node}));
  EXPECT_TRUE(webgpu::packed_weights(g, wgsl_plan(), webgpu::PackWeights::Off).empty());  // knob webgpu_packed_weights=0
  // By default only weights a GEMV (x of at most 4 rows) or a gather reads: here x has 8 rows.
  EXPECT_TRUE(webgpu::packed_weights(g, wgsl_plan(), webgpu::PackWeights::Gemv).empty());
  // What the plan makes of it: the packed params and their views are held as bf16 (2 bytes an
  // element), the others as f32 words.
  plan::PlanOptions o = wgsl_plan();
  o.native_weights = got;
  const plan::MemoryPlan mp = plan::plan_memory(g, o);
  EXPECT_EQ(mp.at(only_matmul).storage, DType::BF16);
  EXPECT_EQ(mp.at(only_matmul).bytes, 64 * 2);
  EXPECT_EQ(mp.at(viewed).storage, DType::BF16);
  EXPECT_EQ(mp.at(shared).storage, DType::F32);
  EXPECT_EQ(mp.at(normed).storage, DType::F32);
  EXPECT_EQ(mp.at(out_p).storage, DType::F32);
  for (const Node& n : g.nodes())
    if (std::holds_alternative<ops::Reshape>(n.op)) {
      EXPECT_EQ(mp.locations[n.id][0].storage, DType::BF16);
    }
#endif
}

TEST(WebGpuPacked, GemvOfOddSizesMatchesTheCpu) {
  RLX_REQUIRE_WEBGPU();
#ifdef RLX_HAVE_WEBGPU
  for (DType t : {DType::F16, DType::BF16})
    for (int64_t rows : {1, 3}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " rows " + std::to_string(rows));
      EXPECT_EQ(parity_packed(linear(rows, 37, 23, t)), 1u);  // 851 values: the last word half padding
    }
#endif
}

// An even row length (every row of B starts on a word): the GEMV whose invocations read one word,
// two columns, at a time (matmul_gemv_pairs), alone, split over K and with a fused epilogue.
TEST(WebGpuPacked, GemvReadingTwoColumnsAWord) {
  RLX_REQUIRE_WEBGPU();
#ifdef RLX_HAVE_WEBGPU
  for (DType t : {DType::F16, DType::BF16}) {
    for (int64_t rows : {1, 2, 4}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " rows " + std::to_string(rows));
      EXPECT_EQ(parity_packed(linear(rows, 37, 46, t)), 1u);   // one tile of 128 columns, partly used
      EXPECT_EQ(parity_packed(linear(rows, 40, 300, t)), 1u);  // three tiles
    }
    SCOPED_TRACE(dtype_name(t));
    EXPECT_EQ(parity_packed(linear(1, 4099, 42, t)), 1u);  // split over K
    Graph g;
    const Value x = g.input("x", Shape::of({1, 13}, t)), res = g.input("res", Shape::of({1, 12}, t));
    ops::FusedMatMulBiasAct f{ActKind::Silu};
    f.residual = true;
    g.add_output(g.apply(f, {x, g.param("w", Shape::of({13, 12}, t)), g.param("bias", Shape::of({12}, t)), res}));
    EXPECT_EQ(parity_packed(g), 1u);
  }
#endif
}

TEST(WebGpuPacked, SplitKGemvMatchesTheCpu) {
  RLX_REQUIRE_WEBGPU();
#ifdef RLX_HAVE_WEBGPU
  // One column group and a long K: the K splits' partial sums go through the second kernel.
  for (DType t : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    EXPECT_EQ(parity_packed(linear(1, 4099, 41, t)), 1u);
  }
#endif
}

TEST(WebGpuPacked, GemmWithOddKAndBothOperandsPacked) {
  RLX_REQUIRE_WEBGPU();
#ifdef RLX_HAVE_WEBGPU
  for (DType t : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    EXPECT_EQ(parity_packed(linear(70, 37, 45, t)), 1u);
    Graph g;  // both operands params (the GEMM benchmark's graph), batched
    g.add_output(g.matmul(g.param("a", Shape::of({3, 33, 19}, t)), g.param("b", Shape::of({3, 19, 21}, t))));
    EXPECT_EQ(parity_packed(g), 2u);
  }
#endif
}

TEST(WebGpuPacked, ViewsAtOffsetsThatAreNotWordAligned) {
  RLX_REQUIRE_WEBGPU();
#ifdef RLX_HAVE_WEBGPU
  for (DType t : {DType::F16, DType::BF16})
    for (int64_t start : {1, 2}) {  // 35 * start values in: byte 70 (half a word) or 140
      SCOPED_TRACE(std::string(dtype_name(t)) + " start " + std::to_string(start));
      Graph g;
      const Value all = g.param("w_all", Shape::of({3, 5, 7}, t));
      const Value w = g.reshape(g.narrow(all, 0, start, 1), {5, 7});
      const Value x = g.input("x", Shape::of({2, 5}, t));
      g.add_output(g.matmul(x, w));                                     // GEMV
      g.add_output(g.matmul(g.input("y", Shape::of({40, 5}, t)), w));  // GEMM
      EXPECT_EQ(parity_packed(g), 1u);
    }
#endif
}

TEST(WebGpuPacked, AParamAnElementwiseOpAlsoReadsStaysInWords) {
  RLX_REQUIRE_WEBGPU();
#ifdef RLX_HAVE_WEBGPU
  Graph g;
  const Value w = g.param("w", Shape::of({9, 9}, DType::F16));
  g.add_output(g.add(g.matmul(g.input("x", Shape::of({1, 9}, DType::F16)), w), w));
  EXPECT_EQ(parity_packed(g), 0u);
#endif
}

TEST(WebGpuPacked, FusedEpilogueAndGroupedWeights) {
  RLX_REQUIRE_WEBGPU();
#ifdef RLX_HAVE_WEBGPU
  for (DType t : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    for (int64_t rows : {1, 20}) {
      Graph g;  // w packed; the bias (read by the epilogue as words) is not
      const Value x = g.input("x", Shape::of({rows, 13}, t)), res = g.input("res", Shape::of({rows, 11}, t));
      ops::FusedMatMulBiasAct f{ActKind::Gelu};
      f.residual = true;
      g.add_output(g.apply(f, {x, g.param("w", Shape::of({13, 11}, t)), g.param("bias", Shape::of({11}, t)), res}));
      EXPECT_EQ(parity_packed(g), 1u);
    }
    Graph g;
    g.add_output(g.apply(ops::GroupedMatMul{}, {g.input("x", Shape::of({5, 15}, t)),
                                                g.param("experts", Shape::of({3, 15, 9}, t)),
                                                g.input("idx", Shape::of({5}, DType::I32))}));
    ParityOptions o;
    o.int_hi = 3;
    EXPECT_EQ(parity_packed(g, o), 1u);
  }
#endif
}

// An embedding table read by a Gather (and by a MatMul: a tied weight) is packed; its rows are
// widened to f32 words bit for bit, f16 subnormals, infinities, NaN and -0 included; negative
// indices count from the end.
TEST(WebGpuPacked, EmbeddingRowsWidenedExactly) {
  RLX_REQUIRE_WEBGPU();
#ifdef RLX_HAVE_WEBGPU
  for (DType t : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    const Value table = g.param("table", Shape::of({7, 9}, t));
    const Value ids = g.input("ids", Shape::of({5}, DType::I64));
    g.add_output(g.gather(table, ids, 0));
    g.add_output(g.matmul(g.input("x", Shape::of({2, 7}, t)), table));
    std::vector<double> v(63);
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.37 * static_cast<double>(i) - 11.0;
    v[3] = 3e-6, v[4] = -6e-8, v[5] = -0.0, v[6] = std::numeric_limits<double>::infinity(), v[7] = std::nan("");
    v[8] = 1e-40;  // bf16 subnormal; f16: 0
    const Tensor tv = rlx::testing::from_doubles(t, {7, 9}, v);
    const Tensor iv = Tensor::i64({5}, std::vector<int64_t>{0, 6, -7, 3, -1});
    const NamedTensors ins{{"ids", iv}, {"x", rlx::testing::from_doubles(t, {2, 7}, std::vector<double>(14, 0.5))}};
    const uint64_t before = packed_now();
    auto gpu = Session(Device::WebGpu).compile(g);
    auto cpu = Session(Device::Cpu).compile(g);
    gpu.set_param("table", tv), cpu.set_param("table", tv);
    const Tensor a = gpu.run(ins, {0}).at(0), b = cpu.run(ins, {0}).at(0);
    EXPECT_EQ(packed_now() - before, 1u);
    ASSERT_EQ(a.nbytes(), b.nbytes());
    const auto* pa = static_cast<const uint16_t*>(a.raw());
    const auto* pb = static_cast<const uint16_t*>(b.raw());
    for (size_t i = 0; i < 45; ++i) EXPECT_EQ(pa[i], pb[i]) << "element " << i;
  }
  Graph g;  // the same layout through the parity harness, with a tied matmul: one packed table
  const Value table = g.param("table", Shape::of({7, 9}, DType::BF16));
  g.add_output(g.gather(table, g.input("ids", Shape::of({4}, DType::I32)), 0));
  g.add_output(g.matmul(g.input("x", Shape::of({3, 7}, DType::BF16)), table));
  ParityOptions o;
  o.int_hi = 7;
  EXPECT_EQ(parity_packed(g, o), 1u);
#endif
}

TEST(WebGpuPacked, NewParamValuesAreUploadedPacked) {
  RLX_REQUIRE_WEBGPU();
#ifdef RLX_HAVE_WEBGPU
  const Graph g = linear(1, 9, 5, DType::BF16);
  auto gpu = Session(Device::WebGpu).compile(g);
  auto cpu = Session(Device::Cpu).compile(g);
  ParityOptions o;
  const NamedTensors ins = rlx::testing::random_inputs(g, o);
  for (uint64_t seed : {1u, 2u, 3u}) {
    o.seed = seed;
    const NamedTensors ps = rlx::testing::random_params(g, o);
    for (const auto& [name, t] : ps) gpu.set_param(name, t), cpu.set_param(name, t);
    const std::vector<float> a = gpu.run(ins).at(0).to_f32(), b = cpu.run(ins).at(0).to_f32();
    ASSERT_EQ(a.size(), 5u);
    for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(a[i], b[i], 2e-2) << "seed " << seed << " column " << i;
  }
#endif
}

// The default (knob auto): a weight a GEMV reads is packed, one only a GEMM reads stays in words
// (the GEMM kernels unpack more slowly than they read words); both match the CPU.
TEST(WebGpuPacked, ByDefaultOnlyGemvWeightsArePacked) {
  RLX_REQUIRE_WEBGPU();
#ifdef RLX_HAVE_WEBGPU
  EXPECT_EQ(webgpu::packed_weights(linear(4, 16, 8, DType::BF16), wgsl_plan(), webgpu::PackWeights::Gemv).size(), 1u);
  EXPECT_TRUE(webgpu::packed_weights(linear(5, 16, 8, DType::BF16), wgsl_plan(), webgpu::PackWeights::Gemv).empty());
  for (const auto& [rows, packed] : {std::pair<int64_t, uint64_t>{1, 1}, {24, 0}}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    const uint64_t before = packed_now();
    expect_webgpu_parity(linear(rows, 33, 17, DType::F16));
    EXPECT_EQ(packed_now() - before, packed);
  }
#endif
}

TEST(WebGpuPacked, TheKnobOffKeepsWords) {
  RLX_REQUIRE_WEBGPU();
#ifdef RLX_HAVE_WEBGPU
  const uint64_t before = packed_now();
  rlx::testing::RunConfig cpu, gpu;
  gpu.label = "webgpu";
  gpu.device = Device::WebGpu;
  gpu.options.tuning.webgpu_packed_weights = 0;
  const auto rep = rlx::testing::compare_configs(linear(2, 37, 23, DType::F16), cpu, gpu);
  EXPECT_TRUE(rep.pass) << rep.text;
  EXPECT_EQ(packed_now() - before, 0u);
#endif
}

}  // namespace
