// CUDA-specific op behaviour: GEMM precision policies, the split-K GEMV's repeated runs, device
// error flags, compile-time refusals. The op-by-op parity with the CPU oracle is the shared case
// list (tests/parity, Parity/Devices.*/cuda_*). Skipped with the reason printed without a device.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"

namespace {

using namespace rlx;
using rlx::testing::kCudaFloats;

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

// The one-launch split-K GEMV: every row count it takes, column tiles cut by N, many K splits
// (the last block of each column tile reduces; its ticket must be reset for the next run, so
// repeated runs, replayed from the CUDA graph, must agree bit for bit). Its parity with the CPU
// is the shared case skinny_matmul_silu_residual_rows*.
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

// An index out of range is a run-time error through the device error flag.
TEST(CudaOps, GatherOutOfRangeIndexIsAnError) {
  RLX_REQUIRE_CUDA();
  Graph g;
  g.add_output(g.gather(g.input("data", Shape::of({4, 3})), g.input("idx", Shape::of({2}, DType::I64)), 0));
  auto cg = Session(Device::Cuda).compile(g);
  const std::string msg = rlx::testing::error_message([&] {
    cg.run({{"data", rlx::testing::random_tensor(DType::F32, {4, 3}, 1)},
            {"idx", Tensor::i64({2}, std::vector<int64_t>{1, 4})}});
  });
  EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
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
