// Every op the CUDA backend claims, on CUDA vs the CPU oracle (shared parity harness), in f32
// and the half types. Skipped with the reason printed when no CUDA device is present.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"

namespace {

using namespace rlx;
using rlx::testing::cuda_parity;

using rlx::testing::kCudaFloats;
using rlx::testing::expect_cuda_parity;

TEST(CudaOps, BinaryBroadcastEveryFloatKind) {
  RLX_REQUIRE_CUDA();
  for (DType t : kCudaFloats)
    for (BinaryKind k : {BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul, BinaryKind::Div, BinaryKind::Max,
                         BinaryKind::Min, BinaryKind::Pow, BinaryKind::Mod, BinaryKind::FMod}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + enum_name(k));
      Graph g;
      const Value a = g.input("a", Shape::of({3, 1, 37}, t));
      const Value b = g.input("b", Shape::of({5, 1}, t));
      g.add_output(g.binary(k, a, b));
      rlx::testing::ParityOptions o;
      if (k == BinaryKind::Pow) o.lo = 0.1, o.hi = 2.0;  // real powers of positive bases
      expect_cuda_parity(g, Precision::Fp32, o);
    }
}

TEST(CudaOps, IntegerAndBoolElementwise) {
  RLX_REQUIRE_CUDA();
  for (DType t : {DType::I32, DType::I64, DType::U8}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    const Value a = g.input("a", Shape::of({4, 33}, t));
    const Value b = g.input("b", Shape::of({33}, t));
    const Value s = g.binary(BinaryKind::Mul, g.binary(BinaryKind::Sub, a, b), a);
    g.add_output(g.max(s, b));
    g.add_output(g.compare(CompareKind::Ge, a, b));
    g.add_output(g.act(ActKind::Neg, a));
    expect_cuda_parity(g);
  }
  Graph g;
  const Value a = g.input("a", Shape::of({64}, DType::Bool));
  const Value b = g.input("b", Shape::of({64}, DType::Bool));
  g.add_output(g.binary(BinaryKind::Xor, a, g.act(ActKind::Not, b)));
  g.add_output(g.binary(BinaryKind::And, a, b));
  expect_cuda_parity(g);
}

TEST(CudaOps, EveryFloatActivation) {
  RLX_REQUIRE_CUDA();
  for (DType t : kCudaFloats)
    for (int k = 0; k <= static_cast<int>(ActKind::Acos); ++k) {
      const auto kind = static_cast<ActKind>(k);
      if (kind == ActKind::Not) continue;
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + enum_name(kind));
      Graph g;
      g.add_output(g.act(kind, g.input("x", Shape::of({7, 129}, t))));
      rlx::testing::ParityOptions o;
      if (kind == ActKind::Log || kind == ActKind::Sqrt || kind == ActKind::Rsqrt) o.lo = 0.05, o.hi = 3.0;
      if (kind == ActKind::Reciprocal) o.lo = 0.5, o.hi = 2.0;
      if (kind == ActKind::Round) o.lo = -4, o.hi = 4;
      expect_cuda_parity(g, Precision::Fp32, o);
    }
}

TEST(CudaOps, CompareWhereCast) {
  RLX_REQUIRE_CUDA();
  for (DType t : kCudaFloats) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    const Value a = g.input("a", Shape::of({2, 3, 40}, t));
    const Value b = g.input("b", Shape::of({3, 1}, t));
    for (CompareKind k : {CompareKind::Eq, CompareKind::Ne, CompareKind::Lt, CompareKind::Le, CompareKind::Gt, CompareKind::Ge})
      g.add_output(g.compare(k, a, b));
    g.add_output(g.where(g.compare(CompareKind::Gt, a, b), a, b));
    g.add_output(g.cast(a, DType::I32));
    g.add_output(g.cast(g.cast(a, DType::F32), DType::BF16));
    g.add_output(g.cast(g.cast(g.input("i", Shape::of({40}, DType::I64)), t), DType::F16));
    rlx::testing::ParityOptions o;
    o.lo = -5, o.hi = 5;
    expect_cuda_parity(g, Precision::Fp32, o);
  }
}

TEST(CudaOps, ElementwiseChainBecomesOneRegion) {
  RLX_REQUIRE_CUDA();
  for (DType t : kCudaFloats) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    const Value x = g.input("x", Shape::of({4, 16, 96}, t));
    const Value b = g.input("b", Shape::of({96}, t));
    const Value y = g.gelu(g.add(g.mul(x, g.scalar(0.5, t)), b));
    g.add_output(g.sub(g.silu(y), g.tanh(x)));
    expect_cuda_parity(g);
  }
}

TEST(CudaOps, MatMulShapesAndBatching) {
  RLX_REQUIRE_CUDA();
  struct Case {
    std::vector<int64_t> a, b;
  };
  const std::vector<Case> cases = {{{33, 65}, {65, 17}},       {{64}, {64, 32}},           {{8, 64}, {64}},
                                   {{3, 24, 40}, {3, 40, 56}}, {{2, 3, 16, 8}, {8, 24}},  {{4, 1, 5, 8}, {3, 8, 6}},
                                   {{1, 128, 768}, {768, 768}},
                                   // skinny (decode) products: the split-K GEMV path
                                   {{3, 2048}, {2048, 512}},   {{2, 1, 1000}, {1000, 96}}, {{1, 1, 5632}, {5632, 64}}};
  for (DType t : kCudaFloats)
    for (const auto& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + dims_str(c.a) + " @ " + dims_str(c.b));
      Graph g;
      const Value a = g.input("a", Shape::from(c.a, t));
      const Value b = g.input("b", Shape::from(c.b, t));
      g.add_output(g.matmul(a, b));
      expect_cuda_parity(g);
    }
}

// Reduced-precision GEMM policies, judged like the tolerances: ||cuda - cpu|| / ||cpu||
// (tf32 1e-3, fp16/bf16 1e-2), and each must really differ from exact FP32 (policy honoured).
TEST(CudaOps, MatMulPrecisionPolicies) {
  RLX_REQUIRE_CUDA();
  Graph g;
  g.add_output(g.matmul(g.input("a", Shape::of({96, 256})), g.input("b", Shape::of({256, 80}))));
  const NamedTensors ins = {{"a", rlx::testing::random_tensor(DType::F32, {96, 256}, 1)},
                            {"b", rlx::testing::random_tensor(DType::F32, {256, 80}, 2)}};
  const auto ref = rlx::testing::to_doubles(Session(Device::Cpu).compile(g).run(ins)[0]);
  auto rel = [&](Precision p) {
    CompileOptions o;
    o.precision = p;
    const auto got = rlx::testing::to_doubles(Session(Device::Cuda).compile(g, o).run(ins)[0]);
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) num += (got[i] - ref[i]) * (got[i] - ref[i]), den += ref[i] * ref[i];
    return std::sqrt(num / den);
  };
  const double fp32 = rel(Precision::Fp32), tf32 = rel(Precision::Tf32);
  const double bf16 = rel(Precision::Bf16), fp16 = rel(Precision::Fp16);
  EXPECT_LT(fp32, 1e-6);
  EXPECT_LT(tf32, 1e-3);
  EXPECT_LT(bf16, 1e-2);
  EXPECT_LT(fp16, 1e-2);
  EXPECT_GT(tf32, 1e-5) << "tf32 policy did not change the GEMM";
  EXPECT_GT(bf16, tf32) << "bf16 policy did not down-convert to bf16";
}

TEST(CudaOps, FusedMatMulBiasActEveryEpilogue) {
  RLX_REQUIRE_CUDA();
  const std::vector<std::optional<ActKind>> acts = {std::nullopt, ActKind::Relu, ActKind::GeluApprox, ActKind::Gelu,
                                                    ActKind::Silu, ActKind::Tanh};
  for (DType t : kCudaFloats)
    for (const auto& act : acts)
      for (int64_t bias_len : {0, 1, 48})
        for (int64_t rows : {40, 3})  // cuBLASLt epilogues and the GEMV path
          for (bool residual : {false, true}) {
            SCOPED_TRACE(std::string(dtype_name(t)) + " act=" + (act ? enum_name(*act) : "none") + " bias=" +
                         std::to_string(bias_len) + " rows=" + std::to_string(rows) + " residual=" +
                         std::to_string(residual));
            Graph g;
            const Value x = g.input("x", Shape::of({1, rows, 64}, t));
            const Value w = g.param("w", Shape::of({64, 48}, t));
            std::vector<Value> ins{x, w};
            if (bias_len) ins.push_back(g.param("bias", Shape::of({bias_len}, t)));
            if (residual) ins.push_back(g.input("res", Shape::of({1, rows, 48}, t)));
            ops::FusedMatMulBiasAct f{act};
            f.residual = residual;
            g.add_output(g.apply(f, ins));
            expect_cuda_parity(g);
          }
}

// The one-launch split-K GEMV: every row count it takes, column tiles cut by N, many K splits
// (the last block of each column tile reduces; its ticket must be reset for the next run, so
// repeated runs, replayed from the CUDA graph, must agree bit for bit).
TEST(CudaOps, SkinnyMatMulSplitKRepeatedRuns) {
  RLX_REQUIRE_CUDA();
  for (DType t : kCudaFloats)
    for (int64_t rows : {1, 2, 3, 4})
      for (const auto& [k, n] : std::vector<std::pair<int64_t, int64_t>>{{4096, 2056}, {5632, 2048}, {96, 8}}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " rows=" + std::to_string(rows) + " k=" + std::to_string(k) +
                     " n=" + std::to_string(n));
        Graph g;
        const Value x = g.input("x", Shape::of({rows, k}, t));
        const Value r = g.input("r", Shape::of({rows, n}, t));
        ops::FusedMatMulBiasAct f{ActKind::Silu};
        f.residual = true;
        g.add_output(g.apply(f, {x, g.param("w", Shape::of({k, n}, t)), g.param("b", Shape::of({n}, t)), r}));
        expect_cuda_parity(g);
        auto cg = Session(Device::Cuda).compile(g);
        cg.set_param("w", rlx::testing::random_tensor(t, {k, n}, 7));
        cg.set_param("b", rlx::testing::random_tensor(t, {n}, 8));
        const NamedTensors ins = {{"x", rlx::testing::random_tensor(t, {rows, k}, 9)},
                                  {"r", rlx::testing::random_tensor(t, {rows, n}, 10)}};
        const Tensor first = cg.run(ins)[0];
        for (int i = 0; i < 3; ++i) {
          const Tensor again = cg.run(ins)[0];
          ASSERT_EQ(0, std::memcmp(first.raw(), again.raw(), first.nbytes())) << "run " << i + 2 << " differs";
        }
      }
}

TEST(CudaOps, SoftmaxAndLogSoftmaxRowsAndColumns) {
  RLX_REQUIRE_CUDA();
  for (DType t : kCudaFloats)
    for (int64_t axis : {-1, 1}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " axis " + std::to_string(axis));
      Graph g;
      const Value x = g.input("x", Shape::of({3, 50, 1000}, t));
      g.add_output(g.softmax(x, axis));
      g.add_output(g.log_softmax(x, axis));
      rlx::testing::ParityOptions o;
      o.lo = -8, o.hi = 8;
      expect_cuda_parity(g, Precision::Fp32, o);
    }
  Graph g;  // a 150k vocabulary row
  g.add_output(g.softmax(g.input("x", Shape::of({2, 151936}))));
  expect_cuda_parity(g);
}

TEST(CudaOps, NormsAndFusedResidualNorms) {
  RLX_REQUIRE_CUDA();
  for (DType t : kCudaFloats) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    const Value x = g.input("x", Shape::of({2, 9, 768}, t));
    const Value r = g.input("r", Shape::of({2, 9, 768}, t));
    const Value gamma = g.param("gamma", Shape::of({768}, t));
    const Value beta = g.param("beta", Shape::of({768}, t));
    g.add_output(g.layer_norm(x, gamma, beta, 1e-12));
    g.add_output(g.layer_norm(x, gamma, std::nullopt, 1e-5));
    g.add_output(g.rms_norm(x, gamma, std::nullopt, 1e-6));
    g.add_output(g.rms_norm(x, gamma, beta, 1e-6));
    g.add_output(g.apply(ops::FusedResidualLN{true, 1e-12}, {x, r, gamma, beta}));
    g.add_output(g.apply(ops::FusedResidualRmsNorm{false, 1e-6}, {x, r, gamma}));
    const Value x2 = g.input("x2", Shape::of({3, 4, 5, 6}, t));  // normalized over the last two dims
    g.add_output(g.layer_norm(x2, g.param("g2", Shape::of({5, 6}, t)), g.param("b2", Shape::of({5, 6}, t)), 1e-5, 2));
    expect_cuda_parity(g);
  }
}

// Row lengths around the block-size steps (blocks sized by the row's 16-byte vectors) and the
// shared-memory row cache's limit (11264), rows in whole 16-byte vectors or not (4098).
TEST(CudaOps, NormsAndSoftmaxAtEveryRowBlockSize) {
  RLX_REQUIRE_CUDA();
  for (DType t : kCudaFloats)
    for (int64_t len : {int64_t{256}, int64_t{1000}, int64_t{2048}, int64_t{4096}, int64_t{4098}, int64_t{8192},
                        int64_t{11264}, int64_t{20000}}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " len " + std::to_string(len));
      Graph g;
      const Value x = g.input("x", Shape::of({5, len}, t));
      const Value gamma = g.param("gamma", Shape::of({len}, t));
      g.add_output(g.layer_norm(x, gamma, g.param("beta", Shape::of({len}, t)), 1e-5));
      g.add_output(g.apply(ops::FusedResidualRmsNorm{false, 1e-6}, {x, g.input("r", Shape::of({5, len}, t)), gamma}));
      g.add_output(g.softmax(x, -1));
      rlx::testing::ParityOptions o;
      o.lo = -4, o.hi = 4;
      expect_cuda_parity(g, Precision::Fp32, o);
    }
}

TEST(CudaOps, ReduceSimpleAndGeneralAxes) {
  RLX_REQUIRE_CUDA();
  const std::vector<std::vector<int64_t>> axes_list = {{-1}, {1}, {0, 2}, {}, {1, 3}};
  for (DType t : kCudaFloats)
    for (ReduceKind k : {ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max, ReduceKind::Min, ReduceKind::Prod})
      for (const auto& axes : axes_list) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + enum_name(k) + " axes " + dims_str(axes));
        Graph g;
        g.add_output(g.reduce(k, g.input("x", Shape::of({4, 6, 5, 7}, t)), axes, axes.size() == 1));
        rlx::testing::ParityOptions o;
        if (k == ReduceKind::Prod) o.lo = 0.9, o.hi = 1.1;
        expect_cuda_parity(g, Precision::Fp32, o);
      }
}

TEST(CudaOps, ShapeOpsMoveEveryDtype) {
  RLX_REQUIRE_CUDA();
  for (DType t : {DType::F32, DType::BF16, DType::I64, DType::U8, DType::I16}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    const Value x = g.input("x", Shape::of({2, 3, 4, 5}, t));
    g.add_output(g.transpose(x, {2, 0, 3, 1}));
    g.add_output(g.narrow(x, 2, 1, 2));
    g.add_output(g.narrow(x, 0, 1, 1));
    g.add_output(g.expand(g.input("y", Shape::of({3, 1, 5}, t)), {2, 3, 4, 5}));
    g.add_output(g.reverse(x, {1, 3}));
    g.add_output(g.concat({x, g.narrow(x, 3, 0, 2), g.input("z", Shape::of({2, 3, 4, 1}, t))}, 3));
    g.add_output(g.concat({x, x}, 0));
    g.add_output(g.reshape(g.transpose(x, {1, 0, 2, 3}), {6, 20}));
    expect_cuda_parity(g);
  }
}

// Pad: every mode, growing and cropping (negative pads) on several axes, several dtypes; a pad
// the input cannot reflect is a compile-time error naming the dim.
TEST(CudaOps, PadEveryModeWithCropsAndDtypes) {
  RLX_REQUIRE_CUDA();
  struct Case {
    PadMode mode;
    std::vector<int64_t> pads;
  };
  const std::vector<Case> cases = {{PadMode::Constant, {1, 0, 2, 3, 0, 1}}, {PadMode::Constant, {-1, 2, 0, 0, -2, 1}},
                                   {PadMode::Reflect, {0, 2, 3, 1, 1, 2}},  {PadMode::Edge, {2, 0, 1, 0, 3, 4}},
                                   {PadMode::Reflect, {-1, 1, 0, 0, 2, -1}}};
  for (DType t : {DType::F32, DType::BF16, DType::I32, DType::Bool, DType::I64})
    for (const auto& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + enum_name(c.mode) + " " + dims_str(c.pads));
      Graph g;
      ops::Pad p;
      p.mode = c.mode, p.pads = c.pads, p.value = 2.5;
      g.add_output(g.apply(p, {g.input("x", Shape::of({3, 5, 6}, t))}));
      expect_cuda_parity(g);
    }
  // A reflect pad as large as its dim is refused when the graph is built.
  const std::string msg = rlx::testing::error_message([] {
    Graph g;
    ops::Pad p;
    p.mode = PadMode::Reflect, p.pads = {0, 5, 0, 0};
    g.add_output(g.apply(p, {g.input("x", Shape::of({3, 5}))}));
  });
  EXPECT_NE(msg.find("reflect pad 5 must be smaller than dim 1"), std::string::npos) << msg;
}

TEST(CudaOps, GatherWithNegativeIndicesAndOutOfRangeError) {
  RLX_REQUIRE_CUDA();
  for (DType it : {DType::I32, DType::I64}) {
    Graph g;
    const Value data = g.input("data", Shape::of({10, 6, 4}));
    const Value idx = g.input("idx", Shape::of({2, 3}, it));
    g.add_output(g.gather(data, idx, 1));
    g.add_output(g.gather(data, idx, 0));
    rlx::testing::ParityOptions o;
    o.fixed_inputs = {{"idx", it == DType::I32 ? Tensor::i32({2, 3}, std::vector<int32_t>{0, 5, -1, 2, -6, 3})
                                               : Tensor::i64({2, 3}, std::vector<int64_t>{0, 5, -1, 2, -6, 3})}};
    expect_cuda_parity(g, Precision::Fp32, o);
  }
  Graph g;
  g.add_output(g.gather(g.input("data", Shape::of({4, 3})), g.input("idx", Shape::of({2}, DType::I64)), 0));
  auto cg = Session(Device::Cuda).compile(g);
  const std::string msg = rlx::testing::error_message([&] {
    cg.run({{"data", rlx::testing::random_tensor(DType::F32, {4, 3}, 1)},
            {"idx", Tensor::i64({2}, std::vector<int64_t>{1, 4})}});
  });
  EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
}

TEST(CudaOps, RopeBothStylesPartialRotation) {
  RLX_REQUIRE_CUDA();
  for (DType t : kCudaFloats)
    for (RopeStyle style : {RopeStyle::NeoX, RopeStyle::GptJ})
      for (bool per_batch : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + enum_name(style) + (per_batch ? " per-batch" : ""));
        Graph g;
        const Value x = g.input("x", Shape::of({2, 7, 3, 16}, t));
        const std::vector<int64_t> cs = per_batch ? std::vector<int64_t>{2, 7, 6} : std::vector<int64_t>{7, 6};
        g.add_output(g.rope(x, g.input("cos", Shape::from(cs, t)), g.input("sin", Shape::from(cs, t)), 16, 12, style));
        expect_cuda_parity(g);
      }
}

TEST(CudaOps, FusedSwiGLU) {
  RLX_REQUIRE_CUDA();
  for (DType t : kCudaFloats)
    for (bool gf : {false, true}) {
      Graph g;
      g.add_output(g.apply(ops::FusedSwiGLU{gf}, {g.input("x", Shape::of({3, 5, 2 * 88}, t))}));
      expect_cuda_parity(g);
    }
}

using rlx::testing::AttnCase;
using rlx::testing::attention_case_graph;
TEST(CudaOps, AttentionEveryMaskLayoutAndGqa) {
  RLX_REQUIRE_CUDA();
  const std::vector<AttnCase> cases = {
      {AttnLayout::BSHD, MaskKind::None, 2, 37, 37, 4, 4, 64},
      {AttnLayout::BSHD, MaskKind::Causal, 2, 70, 70, 8, 2, 64},
      {AttnLayout::BHSD, MaskKind::Causal, 1, 33, 90, 4, 1, 128},  // decode-style: kv longer than q
      {AttnLayout::BSHD, MaskKind::SlidingWindow, 1, 100, 100, 2, 2, 32, 0, 0, 17},
      {AttnLayout::BSHD, MaskKind::Custom, 3, 20, 45, 4, 2, 48},
      {AttnLayout::BHSD, MaskKind::Bias, 2, 19, 19, 2, 2, 64, 0.3, 0},
      {AttnLayout::BSHD, MaskKind::None, 1, 16, 16, 2, 2, 80, 0, 5.0},  // softcap, head_dim 80
      {AttnLayout::BSHD, MaskKind::Causal, 1, 1, 700, 8, 2, 128},       // decode: split-KV path
      {AttnLayout::BSHD, MaskKind::Causal, 2, 5, 3, 2, 2, 16},          // rows with no visible key
      // the CUDA-core kernel's query blocks of 64 / 32 / 16 rows (head_dim <= 64 / 128 / more,
      // when batch x heads fill two waves of the GPU's multiprocessors; else 16)
      {AttnLayout::BSHD, MaskKind::Causal, 8, 70, 70, 34, 17, 64},
      {AttnLayout::BHSD, MaskKind::Causal, 2, 45, 45, 66, 66, 96},
      {AttnLayout::BHSD, MaskKind::Causal, 1, 45, 45, 2, 2, 256},
      {AttnLayout::BSHD, MaskKind::None, 2, 200, 131, 2, 2, 64},
  };
  for (DType t : kCudaFloats)
    for (const auto& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " mask " + enum_name(c.mask) + " layout " + enum_name(c.layout) +
                   " sq " + std::to_string(c.sq) + " skv " + std::to_string(c.skv) + " d " + std::to_string(c.d));
      expect_cuda_parity(attention_case_graph(c, t));
    }
}

// Few query rows per KV head (q_len * group <= 8): the grouped split-KV decode kernel, for every
// mask kind, both layouts, GQA groups 1..8 and head rows of 1..32 sixteen-byte pieces.
TEST(CudaOps, AttentionDecodePathEveryMask) {
  RLX_REQUIRE_CUDA();
  const std::vector<AttnCase> cases = {
      {AttnLayout::BSHD, MaskKind::Causal, 2, 2, 513, 32, 8, 64},
      {AttnLayout::BHSD, MaskKind::None, 1, 1, 300, 4, 4, 64},
      {AttnLayout::BSHD, MaskKind::SlidingWindow, 1, 1, 400, 4, 1, 32, 0, 0, 50},
      {AttnLayout::BSHD, MaskKind::Custom, 3, 1, 200, 4, 2, 64},
      {AttnLayout::BHSD, MaskKind::Bias, 2, 1, 150, 2, 2, 64, 0.3, 0},
      {AttnLayout::BSHD, MaskKind::None, 1, 1, 333, 2, 1, 16, 0, 5.0},  // softcap, 32-byte rows
      {AttnLayout::BSHD, MaskKind::Causal, 1, 1, 2048, 8, 1, 256},       // group 8, 256-wide heads
      {AttnLayout::BSHD, MaskKind::Causal, 1, 1, 7, 4, 2, 64},           // fewer keys than subgroups
  };
  for (DType t : kCudaFloats)
    for (const auto& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " mask " + enum_name(c.mask) + " layout " + enum_name(c.layout) +
                   " sq " + std::to_string(c.sq) + " skv " + std::to_string(c.skv) + " h " + std::to_string(c.h) +
                   "/" + std::to_string(c.hkv) + " d " + std::to_string(c.d));
      expect_cuda_parity(attention_case_graph(c, t));
    }
}

TEST(CudaOps, UnsupportedOpIsReportedAtCompile) {
  RLX_REQUIRE_CUDA();
  Graph g;
  // Sampling from f64 logits: the CUDA sampler takes f32/f16/bf16, and nothing decomposes it.
  g.add_output(g.apply(ops::Sample{.top_k = 2}, {g.input("logits", Shape::of({2, 8}, DType::F64))}));
  const std::string msg = rlx::testing::error_message([&] { Session(Device::Cuda).compile(g); });
  EXPECT_NE(msg.find("CUDA sample needs f32/f16/bf16 logits"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(sample)"), std::string::npos) << msg;
}

}  // namespace
