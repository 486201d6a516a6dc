// Integer and bool reductions on CUDA, which the backend runs natively (64-bit accumulation, as
// the CPU): every integer dtype and kind is claimed, bool Max / Min are any / all, and an empty
// Max or integer Mean is rejected with the node named. Exact parity with the CPU oracle (every
// dtype, kind and axes, wrapping sums, the 64-bit extremes, empty Sum / Prod) is the shared case
// list (tests/parity: reduce_*). Skipped with the reason printed when no CUDA device is present
// (the claims test runs everywhere).
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/lower.h"
#include "cuda/cuda_test_util.h"
#include "support/test_util.h"

namespace {

using namespace rlx;

constexpr DType kInts[] = {DType::I8, DType::I16, DType::I32, DType::I64, DType::U8, DType::U32};
constexpr ReduceKind kKinds[] = {ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max, ReduceKind::Min, ReduceKind::Prod};

TEST(CudaReduceClaims, IntegerAndBoolReductionsAreClaimed) {
  auto claimed = [](DType t, ReduceKind k) {
    Graph g;
    g.add_output(g.reduce(k, g.input("x", Shape::of({3, 4}, t)), {1}));
    std::string why;
    const bool ok = cuda::cuda_claims_node(g, g.nodes().back(), &why);
    EXPECT_TRUE(ok) << dtype_name(t) << " " << enum_name(k) << ": " << why;
  };
  for (DType t : kInts)
    for (ReduceKind k : kKinds) claimed(t, k);
  // Bool takes only these two (the graph refuses the others, as the CPU does).
  for (ReduceKind k : {ReduceKind::Max, ReduceKind::Min}) claimed(DType::Bool, k);
}

TEST(CudaReduceInt, BoolMaxIsAnyMinIsAll) {
  RLX_REQUIRE_CUDA();
  // Rows: all false, mixed, all true.
  const std::vector<double> v = {0, 0, 0, 0, 0, 1, 0, 1, 1, 1, 1, 1};
  for (ReduceKind k : {ReduceKind::Max, ReduceKind::Min}) {
    Graph g;
    const Value x = g.input("x", Shape::of({3, 4}, DType::Bool));
    g.add_output(g.reduce(k, x, {1}));
    g.add_output(g.reduce(k, x, {0}));
    rlx::testing::RunConfig cuda;
    cuda.label = "cuda", cuda.device = Device::Cuda;
    const NamedTensors ins = {{"x", rlx::testing::from_doubles(DType::Bool, {3, 4}, v)}};
    const std::vector<Tensor> out = rlx::testing::run_config(g, cuda, ins, {});
    const std::vector<double> rows = rlx::testing::to_doubles(out.at(0));
    EXPECT_EQ(rows, (k == ReduceKind::Max ? std::vector<double>{0, 1, 1} : std::vector<double>{0, 0, 1}));
  }
}

// Reducing an empty axis with Max / Min or an integer Mean (the graph refuses a static one; a
// symbolic length bound to 0 reaches the backends) is an error naming the node on CUDA as on the
// CPU.
TEST(CudaReduceInt, EmptyAxisErrorsAsOnTheCpu) {
  RLX_REQUIRE_CUDA();
  for (auto [t, k] : {std::pair{DType::I64, ReduceKind::Mean}, std::pair{DType::I32, ReduceKind::Max},
                      std::pair{DType::F32, ReduceKind::Min}}) {
    Graph g;
    g.add_output(g.reduce(k, g.input("x", Shape({Dim(3), Dim::symbol("n")}, t)), {1}));
    for (Device d : {Device::Cpu, Device::Cuda}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + enum_name(k) + (d == Device::Cuda ? " cuda" : " cpu"));
      const std::string msg = rlx::testing::error_message([&] {
        auto cg = Session(d).compile(g);
        cg.run({{"x", rlx::testing::from_doubles(t, {3, 0}, {})}});
      });
      EXPECT_NE(msg.find("reduces zero elements"), std::string::npos) << msg;
      EXPECT_NE(msg.find("(reduce)"), std::string::npos) << msg;
    }
  }
}

}  // namespace
