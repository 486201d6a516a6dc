// f64 on CUDA (elementwise chains and casts in double, data movement, reduce / softmax and
// cumsum accumulating in double, cuBLASLt f64 products with their epilogue in double) and
// integer Div / Mod / FMod / Pow (zero divisors are a run-time rlx::Error, as on the CPU), against
// the CPU oracle through the shared parity harness (f64 within 1e-9). Skipped with the reason
// printed when no CUDA device is present.
#include <string>
#include <vector>

#include "backends/cuda/lower.h"
#include "cuda/cuda_test_util.h"

namespace {

using namespace rlx;
using rlx::testing::expect_cuda_parity;
using rlx::testing::ParityOptions;

TEST(CudaF64, ElementwiseChainsComputeInDouble) {
  RLX_REQUIRE_CUDA();
  for (int k = 0; k <= static_cast<int>(ActKind::Acos); ++k) {
    const auto kind = static_cast<ActKind>(k);
    if (kind == ActKind::Not) continue;
    SCOPED_TRACE(enum_name(kind));
    Graph g;
    g.add_output(g.act(kind, g.input("x", Shape::of({5, 67}, DType::F64))));
    ParityOptions o;
    if (kind == ActKind::Log || kind == ActKind::Sqrt || kind == ActKind::Rsqrt) o.lo = 0.05, o.hi = 3.0;
    if (kind == ActKind::Reciprocal) o.lo = 0.5, o.hi = 2.0;
    if (kind == ActKind::Round) o.lo = -4, o.hi = 4;
    expect_cuda_parity(g, Precision::Fp32, o);
  }
  for (BinaryKind k : {BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul, BinaryKind::Div, BinaryKind::Max,
                       BinaryKind::Min, BinaryKind::Pow, BinaryKind::Mod, BinaryKind::FMod}) {
    SCOPED_TRACE(enum_name(k));
    Graph g;
    g.add_output(g.binary(k, g.input("a", Shape::of({3, 1, 41}, DType::F64)), g.input("b", Shape::of({6, 1}, DType::F64))));
    ParityOptions o;
    if (k == BinaryKind::Pow) o.lo = 0.1, o.hi = 2.0;
    expect_cuda_parity(g, Precision::Fp32, o);
  }
  // Casts both ways (f32 -> f64 keeps every bit; f64 -> f16 rounds through f32 as the CPU does),
  // a compare and a where, integer casts.
  Graph g;
  const Value x = g.input("x", Shape::of({4, 33}, DType::F32));
  const Value y = g.input("y", Shape::of({33}, DType::F64));
  const Value xd = g.cast(x, DType::F64);
  const Value w = g.where(g.compare(CompareKind::Gt, xd, y), g.mul(xd, y), g.sub(y, xd));
  g.add_output(w);
  g.add_output(g.cast(w, DType::F16));
  g.add_output(g.cast(g.mul(w, g.scalar(100.0, DType::F64)), DType::I32));
  g.add_output(g.cast(g.cast(g.mul(y, g.scalar(10.0, DType::F64)), DType::I64), DType::F64));
  expect_cuda_parity(g);
}

TEST(CudaF64, DataMovement) {
  RLX_REQUIRE_CUDA();
  Graph g;
  const Value x = g.input("x", Shape::of({3, 4, 5}, DType::F64));
  const Value idx = g.input("i", Shape::of({6}, DType::I64));
  g.add_output(g.transpose(x, {2, 0, 1}));
  g.add_output(g.concat({x, g.reverse(x, {1})}, 1));
  g.add_output(g.narrow(x, 2, 1, 3));
  g.add_output(g.expand(g.narrow(x, 0, 0, 1), {Dim(2), Dim(4), Dim(5)}));
  g.add_output(g.gather(x, idx, 1));
  ops::Pad pad;
  pad.pads = {0, 1, 2, 1, 0, 3};
  pad.value = 0.1234567890123;  // an f64 constant a 4-byte fill would round
  g.add_output(g.apply(pad, {x}));
  ParityOptions o;
  o.int_hi = 4;
  expect_cuda_parity(g, Precision::Fp32, o);
}

TEST(CudaF64, ReduceSoftmaxAndCumsumAccumulateInDouble) {
  RLX_REQUIRE_CUDA();
  Graph g;
  const Value x = g.input("x", Shape::of({6, 300}, DType::F64));
  const Value z = g.input("z", Shape::of({4, 9, 5, 3}, DType::F64));
  for (ReduceKind k : {ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max, ReduceKind::Min, ReduceKind::Prod}) {
    g.add_output(g.reduce(k, x, {1}));          // rows
    g.add_output(g.reduce(k, z, {1}));          // columns
    g.add_output(g.reduce(k, z, {0, 2}, true));  // any axes
  }
  g.add_output(g.softmax(x, -1));
  g.add_output(g.log_softmax(x, -1));
  g.add_output(g.softmax(z, 1));
  g.add_output(g.cumsum(x, 1));
  g.add_output(g.cumsum(z, 1, true, true));
  ParityOptions o;
  o.lo = 0.5, o.hi = 1.5;  // products of 300 factors stay finite
  expect_cuda_parity(g, Precision::Fp32, o);
  // A long sum whose f32 accumulation would miss the 1e-9 tolerance.
  Graph s;
  s.add_output(s.sum(s.input("x", Shape::of({2, 100000}, DType::F64)), {1}));
  expect_cuda_parity(s);
}

TEST(CudaF64, MatMulThroughCublasLtWithTheEpilogueInDouble) {
  RLX_REQUIRE_CUDA();
  for (Precision p : {Precision::Fp32, Precision::Tf32, Precision::Bf16}) {  // the policy is for f32 graphs
    SCOPED_TRACE(static_cast<int>(p));
    Graph g;
    const Value a = g.input("a", Shape::of({2, 17, 40}, DType::F64));
    const Value w = g.param("w", Shape::of({40, 24}, DType::F64));
    const Value bias = g.param("b", Shape::of({24}, DType::F64));
    const Value res = g.input("r", Shape::of({2, 17, 24}, DType::F64));
    g.add_output(g.add(g.gelu(g.add(g.matmul(a, w), bias)), res));  // fused: bias, exact GELU, residual
    g.add_output(g.add(g.matmul(a, w), res));                        // residual alone: cuBLASLt's C
    g.add_output(g.matmul(g.input("q", Shape::of({3, 5, 8}, DType::F64)), g.input("k", Shape::of({3, 8, 6}, DType::F64))));
    expect_cuda_parity(g, p);
  }
}

// f64 attention is the op CUDA still declines in f64 (no decomposition either).
Graph f64_attention_graph() {
  Graph g;
  ops::Attention a;
  a.num_heads = 2, a.num_kv_heads = 2, a.head_dim = 8;
  const Shape s = Shape::of({1, 2, 2, 8}, DType::F64);  // heads = seq: either layout
  g.add_output(g.attention(g.input("q", s), g.input("k", s), g.input("v", s), std::nullopt, a));
  return g;
}

TEST(CudaF64Claims, AttentionIsDeclinedWithAReason) {
  const Graph g = f64_attention_graph();
  int declined = 0;
  for (const Node& n : g.nodes()) {
    std::string why;
    if (op_name(n.op) == std::string("attention") && !cuda::cuda_claims_node(g, n, &why)) {
      ++declined;
      EXPECT_NE(why.find("float dtype"), std::string::npos) << why;
    }
  }
  EXPECT_EQ(declined, 1);
}

// f64 ops the CUDA kernels do not take are refused at compile time with the node named.
TEST(CudaF64, UnclaimedOpsAreCompileErrors) {
  RLX_REQUIRE_CUDA();
  const Graph g = f64_attention_graph();
  const std::string msg = rlx::testing::error_message([&] { Session(Device::Cuda).compile(g); });
  EXPECT_NE(msg.find("attention"), std::string::npos) << msg;
  EXPECT_NE(msg.find("float dtype"), std::string::npos) << msg;
}

// Divisors without zeros: -3..3 but 0, broadcast along the first axis.
Tensor nonzero_divisors(DType t, bool allow_negative) {
  std::vector<double> v;
  for (int i = 0; i < 19; ++i) {
    int d = i % 7 - 3;
    if (!allow_negative) d = i % 5 + 1;
    v.push_back(d == 0 ? 5 : d);
  }
  return rlx::testing::from_doubles(t, {19}, v);
}

TEST(CudaIntDivision, DivModFModPowMatchTheCpu) {
  RLX_REQUIRE_CUDA();
  for (DType t : {DType::I8, DType::U8, DType::I16, DType::I32, DType::U32, DType::I64}) {
    const bool is_signed = t != DType::U8 && t != DType::U32;
    for (BinaryKind k : {BinaryKind::Div, BinaryKind::Mod, BinaryKind::FMod, BinaryKind::Pow}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + enum_name(k));
      Graph g;
      const Value a = g.input("a", Shape::of({7, 19}, t));
      const Value b = g.input("b", Shape::of({19}, t));
      g.add_output(g.binary(k, a, b));
      ParityOptions o;
      o.int_hi = 120;  // a in [0, 120): with negative divisors, mixed signs
      o.fixed_inputs.emplace_back("b", nonzero_divisors(t, is_signed));
      expect_cuda_parity(g, Precision::Fp32, o);
    }
  }
  // Negative dividends, INT_MIN / -1 (wraps), negative exponents (1, -1, 0 for |base| > 1).
  Graph g;
  const Value a = g.input("a", Shape::of({6}, DType::I32));
  const Value b = g.input("b", Shape::of({6}, DType::I32));
  g.add_output(g.div(a, b));
  g.add_output(g.binary(BinaryKind::Mod, a, b));
  g.add_output(g.binary(BinaryKind::FMod, a, b));
  g.add_output(g.pow(a, g.sub(g.scalar(0, DType::I32), g.binary(BinaryKind::Mod, b, g.scalar(3, DType::I32)))));
  ParityOptions o;
  o.fixed_inputs.emplace_back("a", rlx::testing::from_doubles(DType::I32, {6}, {-7, 7, -2147483648.0, 1, -1, 5}));
  o.fixed_inputs.emplace_back("b", rlx::testing::from_doubles(DType::I32, {6}, {2, -2, -1, -5, 3, 4}));
  expect_cuda_parity(g, Precision::Fp32, o);
}

TEST(CudaIntDivision, ZeroDivisorIsARunTimeErrorAndTheNextRunIsClean) {
  RLX_REQUIRE_CUDA();
  for (BinaryKind k : {BinaryKind::Div, BinaryKind::Mod, BinaryKind::FMod}) {
    SCOPED_TRACE(enum_name(k));
    Graph g;
    g.add_output(g.binary(k, g.input("a", Shape::of({8}, DType::I64)), g.input("b", Shape::of({8}, DType::I64))));
    CompiledGraph cg = Session(Device::Cuda).compile(g);
    const Tensor a = rlx::testing::from_doubles(DType::I64, {8}, {9, 10, 11, 12, 13, 14, 15, 16});
    const Tensor bad = rlx::testing::from_doubles(DType::I64, {8}, {1, 1, 1, 0, 1, 1, 1, 1});
    const Tensor good = rlx::testing::from_doubles(DType::I64, {8}, {1, 2, 3, 4, 5, 6, 7, 8});
    const std::string msg = rlx::testing::error_message([&] { cg.run({{"a", a}, {"b", bad}}); });
    EXPECT_NE(msg.find("division by zero"), std::string::npos) << msg;
    const std::vector<double> want = k == BinaryKind::Div ? std::vector<double>{9, 5, 3, 3, 2, 2, 2, 2}
                                                          : std::vector<double>{0, 0, 2, 0, 3, 2, 1, 0};
    EXPECT_EQ(rlx::testing::to_doubles(cg.run({{"a", a}, {"b", good}}).at(0)), want) << "after the error, a clean run";
  }
  Graph g;
  g.add_output(g.pow(g.input("a", Shape::of({3}, DType::I32)), g.input("b", Shape::of({3}, DType::I32))));
  CompiledGraph cg = Session(Device::Cuda).compile(g);
  const std::string msg = rlx::testing::error_message([&] {
    cg.run({{"a", rlx::testing::from_doubles(DType::I32, {3}, {2, 0, 3})},
            {"b", rlx::testing::from_doubles(DType::I32, {3}, {1, -1, 2})}});
  });
  EXPECT_NE(msg.find("negative power"), std::string::npos) << msg;
}

}  // namespace
