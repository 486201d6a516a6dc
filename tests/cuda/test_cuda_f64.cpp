// f64 and integer division on CUDA: what CUDA declines in f64 (attention) is refused with a
// reason, and zero divisors / negative integer powers are run-time rlx::Errors through the device
// error flag, as on the CPU. Their parity with the CPU oracle (f64 chains, casts, moves, reduces,
// products; integer Div / Mod / FMod / Pow) is the shared case list (tests/parity: *_f64, int_*).
// Skipped with the reason printed when no CUDA device is present.
#include <string>
#include <vector>

#include "backends/cuda/lower.h"
#include "cuda/cuda_test_util.h"

namespace {

using namespace rlx;

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
