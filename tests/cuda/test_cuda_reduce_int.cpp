// Integer and bool reductions on CUDA, which the backend runs natively (64-bit accumulation, as
// the CPU): every integer dtype and kind over contiguous, strided and general axes, wrapping
// sums and products, truncating means of negative values, the 64-bit extremes, bool Max / Min,
// and an empty Max or integer Mean rejected with the node named.
// Exact parity with the CPU oracle; skipped with the reason printed when no CUDA device is present
// (the claims test runs everywhere).
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backends/cuda/lower.h"
#include "cuda/cuda_test_util.h"
#include "support/test_util.h"

namespace {

using namespace rlx;
using rlx::testing::expect_cuda_parity;
using rlx::testing::ParityOptions;

constexpr DType kInts[] = {DType::I8, DType::I16, DType::I32, DType::I64, DType::U8, DType::U32};
constexpr ReduceKind kKinds[] = {ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max, ReduceKind::Min, ReduceKind::Prod};

// Values of x [4, 6, 5, 7] that make sums and products overflow the narrow types, with negative
// ones for the signed types (so a mean truncates toward zero from both sides).
std::vector<double> int_values(DType t, size_t n) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t a = static_cast<int64_t>((i * 37 + 11) % 101);  // 0..100
    v[i] = static_cast<double>(is_signed_int(t) ? a - 50 : a);
  }
  return v;
}

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

TEST(CudaReduceInt, EveryDtypeKindAndAxesMatchTheCpuExactly) {
  RLX_REQUIRE_CUDA();
  // Contiguous rows, a middle axis (columns), general axes, all axes, two strided groups.
  const std::vector<std::vector<int64_t>> axes_list = {{-1}, {1}, {0, 2}, {}, {1, 3}};
  for (DType t : kInts)
    for (ReduceKind k : kKinds)
      for (const auto& axes : axes_list) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + enum_name(k) + " axes " + dims_str(axes));
        Graph g;
        g.add_output(g.reduce(k, g.input("x", Shape::of({4, 6, 5, 7}, t)), axes, axes.size() == 1));
        ParityOptions o;
        o.fixed_inputs = {{"x", rlx::testing::from_doubles(t, {4, 6, 5, 7}, int_values(t, 4 * 6 * 5 * 7))}};
        expect_cuda_parity(g, Precision::Fp32, o);
      }
}

// A row long enough for every warp of a block (4096 elements: 1024 threads) and many rows.
TEST(CudaReduceInt, LongRowsCombineAcrossTheBlock) {
  RLX_REQUIRE_CUDA();
  for (DType t : {DType::I32, DType::I64, DType::U8})
    for (ReduceKind k : {ReduceKind::Sum, ReduceKind::Max, ReduceKind::Min, ReduceKind::Mean}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + enum_name(k));
      Graph g;
      g.add_output(g.reduce(k, g.input("x", Shape::of({3, 5000}, t)), {1}));
      ParityOptions o;
      o.fixed_inputs = {{"x", rlx::testing::from_doubles(t, {3, 5000}, int_values(t, 15000))}};
      expect_cuda_parity(g, Precision::Fp32, o);
    }
}

// i64 values no double holds exactly: the extremes, their sum wrapping, Max / Min picking them.
TEST(CudaReduceInt, I64ExtremesAndWrappingSums) {
  RLX_REQUIRE_CUDA();
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  const std::vector<int64_t> v = {hi, 1, 3, -5, lo, (int64_t{1} << 53) + 1, 7, hi - 2, lo + 3, -1, 2, 9};
  for (ReduceKind k : kKinds)
    for (const std::vector<int64_t>& axes : {std::vector<int64_t>{1}, std::vector<int64_t>{0}}) {
      SCOPED_TRACE(std::string(enum_name(k)) + " axes " + dims_str(axes));
      Graph g;
      g.add_output(g.reduce(k, g.input("x", Shape::of({3, 4}, DType::I64)), axes));
      ParityOptions o;
      o.fixed_inputs = {{"x", Tensor::i64({3, 4}, v)}};
      expect_cuda_parity(g, Precision::Fp32, o);
    }
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
    ParityOptions o;
    o.fixed_inputs = {{"x", rlx::testing::from_doubles(DType::Bool, {3, 4}, v)}};
    expect_cuda_parity(g, Precision::Fp32, o);
    rlx::testing::RunConfig cuda;
    cuda.label = "cuda", cuda.device = Device::Cuda;
    const std::vector<Tensor> out = rlx::testing::run_config(g, cuda, o.fixed_inputs, {});
    const std::vector<double> rows = rlx::testing::to_doubles(out.at(0));
    EXPECT_EQ(rows, (k == ReduceKind::Max ? std::vector<double>{0, 1, 1} : std::vector<double>{0, 0, 1}));
  }
}

// Reducing an empty axis with Max / Min or an integer Mean (the graph refuses a static one; a
// symbolic length bound to 0 reaches the backends) is an error naming the node on CUDA as on the
// CPU; Sum and Prod of nothing are their identities.
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
  for (ReduceKind k : {ReduceKind::Sum, ReduceKind::Prod}) {
    Graph g;
    g.add_output(g.reduce(k, g.input("x", Shape::of({3, 0}, DType::I32)), {1}));
    expect_cuda_parity(g);
  }
}

}  // namespace
