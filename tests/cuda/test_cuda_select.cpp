// The CUDA select family beyond parity: claims and error codes, f64 keys below f32 resolution,
// TopK values bit for bit through NaN / signed zeros, Sample draws that vary with the offset,
// bit-exact RngUniform / RngNormal, and device error flags (NaN logits, bad scatter / expert
// indices). The parity with the CPU oracle (ArgMax/ArgMin, TopK, Sample, Cumsum, ScatterAdd,
// GroupedMatMul over every dtype and attribute) is the shared case list (tests/parity). Device
// tests skip with the reason when there is no CUDA device; the claim tests run everywhere the
// backend is built.
#ifdef RLX_HAVE_CUDA
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/lower.h"
#include "backends/cuda/select_lower.h"
#include "cuda/cuda_test_util.h"

namespace {

using namespace rlx;

const DType kFloats[] = {DType::F32, DType::F16, DType::BF16};
const DType kFloatsAndF64[] = {DType::F32, DType::F16, DType::BF16, DType::F64};  // ArgMax / TopK

std::string label(DType t, const std::string& rest) { return std::string(dtype_name(t)) + " " + rest; }

std::vector<Tensor> run_on(Device d, const Graph& g, const NamedTensors& ins) {
  return Session(d).compile(g).run(ins);
}

// Raw bytes of two tensors are equal (bit-for-bit parity).
::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return ::testing::AssertionFailure() << "dtype/shape differ";
  const auto* pa = static_cast<const uint8_t*>(a.raw());
  const auto* pb = static_cast<const uint8_t*>(b.raw());
  const size_t es = dtype_size(a.dtype());
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(pa + i * es, pb + i * es, es) != 0) {
      if (first < 0) first = i;
      ++bad;
    }
  if (bad == 0) return ::testing::AssertionSuccess();
  const auto da = rlx::testing::to_doubles(a), db = rlx::testing::to_doubles(b);
  return ::testing::AssertionFailure() << bad << " of " << a.numel() << " elements differ; first at " << first << ": "
                                       << da[static_cast<size_t>(first)] << " vs " << db[static_cast<size_t>(first)];
}

// ---- claims (no device needed) ----------------------------------------------------------

TEST(CudaSelectClaims, FamilyOpsAreNativeAndLimitsSayWhy) {
  Graph g;
  const Value x = g.input("x", Shape::of({4, 2000}));
  const Value xi = g.input("xi", Shape::of({4, 2000}, DType::I32));
  const Value i = g.input("i", Shape::of({4, 2000}, DType::I64));
  const Value w = g.input("w", Shape::of({3, 2000, 8}));
  const Value wi = g.input("wi", Shape::of({3, 2000, 8}, DType::I32));
  const Value e = g.input("e", Shape::of({4}, DType::I32));
  g.add_output(g.argmax(x, 1));
  g.add_output(g.topk(x, 5, 1).first);
  g.add_output(g.topk(x, 1025, 1).first);
  g.add_output(g.cumsum(xi, 0));
  g.add_output(g.scatter_add(x, i, x, 1));
  g.add_output(g.apply(ops::Sample{}, {x}));
  ops::RngNormal rn;
  rn.shape = Shape::of({7}, DType::BF16);
  g.add_output(g.apply(rn, {}));
  g.add_output(g.apply(ops::GroupedMatMul{}, {x, w, e}));
  g.add_output(g.apply(ops::GroupedMatMul{}, {xi, wi, e}));
  // f64: compared as double (argmax, topk), hardware double atomics (scatter_add).
  const Value xd = g.input("xd", Shape::of({4, 2000}, DType::F64));
  g.add_output(g.argmax(xd, 1));
  g.add_output(g.topk(xd, 5, 1).first);
  g.add_output(g.scatter_add(xd, i, xd, 1));
  std::map<std::string, std::pair<int, int>> seen;  // op -> (claimed, declined)
  std::string why_topk, why_grouped;
  for (const Node& n : g.nodes()) {
    const std::string name = op_name(n.op);
    if (name == "input") continue;
    std::string why;
    const bool ok = cuda::cuda_claims_node(g, n, &why);
    if (ok) ++seen[name].first;
    else ++seen[name].second;
    if (!ok && name == "topk") why_topk = why;
    if (!ok && name == "grouped_matmul") why_grouped = why;
  }
  EXPECT_EQ(seen["argmax"], std::make_pair(2, 0));
  EXPECT_EQ(seen["topk"], std::make_pair(2, 1));
  EXPECT_NE(why_topk.find("k <= 1024"), std::string::npos) << why_topk;
  EXPECT_EQ(seen["cumsum"], std::make_pair(1, 0));
  EXPECT_EQ(seen["scatter_add"], std::make_pair(2, 0));
  EXPECT_EQ(seen["sample"], std::make_pair(1, 0));
  EXPECT_EQ(seen["rng_normal"], std::make_pair(1, 0));
  EXPECT_EQ(seen["grouped_matmul"], std::make_pair(1, 1));
  EXPECT_NE(why_grouped.find("f32/f16/bf16"), std::string::npos) << why_grouped;
  for (const char* k : {"argmin", "rng_uniform"}) EXPECT_TRUE(cuda::cuda_claims_kind(k)) << k;
}

TEST(CudaSelectClaims, ErrorCodesHaveMessages) {
  using codegen::kernel_error_message;
  EXPECT_NE(kernel_error_message(cuda::kErrScatterIndex, "CUDA").find("scatter_add on CUDA"), std::string::npos);
  EXPECT_NE(kernel_error_message(cuda::kErrExpertIndex, "CUDA").find("grouped_matmul"), std::string::npos);
  EXPECT_NE(kernel_error_message(cuda::kErrSampleNaN, "CUDA").find("NaN"), std::string::npos);
  EXPECT_NE(kernel_error_message(cuda::kErrSampleAllNegInf, "CUDA").find("-inf"), std::string::npos);
  EXPECT_NE(kernel_error_message(codegen::kErrGatherIndex, "CUDA").find("gather"), std::string::npos);
}

// ---- ArgMax / ArgMin --------------------------------------------------------------------

// f64 keys keep every bit: values 2^-40 apart (equal once rounded to f32) still order.
TEST(CudaSelect, F64ArgMaxAndTopKSeeDifferencesBelowF32) {
  RLX_REQUIRE_CUDA();
  const double e = std::ldexp(1.0, -40);
  const std::vector<double> v = {1.0, 1.0 + e, 1.0 - e, 1.0, 1.0 + 2 * e, 1.0 - 2 * e};
  Graph g;
  const Value x = g.input("x", Shape::of({6}, DType::F64));
  g.add_output(g.argmax(x, 0));
  g.add_output(g.apply(ops::ArgMin{}, {x}));
  const auto [vals, idx] = g.topk(x, 3, 0, true);
  g.add_output(idx);
  const NamedTensors ins = {{"x", rlx::testing::from_doubles(DType::F64, {6}, v)}};
  const auto got = run_on(Device::Cuda, g, ins);
  EXPECT_EQ(got[0].to_i64(), std::vector<int64_t>{4});
  EXPECT_EQ(got[1].to_i64(), std::vector<int64_t>{5});
  EXPECT_EQ(got[2].to_i64(), (std::vector<int64_t>{4, 1, 0}));
}

// ---- TopK ---------------------------------------------------------------------------------

TEST(CudaSelect, TopKNaNSignedZeroAndNegativeIntegers) {
  RLX_REQUIRE_CUDA();
  // Values are copies of the input: compared bit for bit (the harness cannot compare infinities).
  auto check = [](DType t, const std::vector<double>& v, int64_t k, bool largest) {
    Graph g;
    const auto n = static_cast<int64_t>(v.size());
    const auto [vals, idx] = g.topk(g.input("x", Shape::of({n}, t)), k, 0, largest);
    g.add_output(vals);
    g.add_output(idx);
    const NamedTensors ins = {{"x", rlx::testing::from_doubles(t, {n}, v)}};
    const auto got = run_on(Device::Cuda, g, ins), want = run_on(Device::Cpu, g, ins);
    EXPECT_TRUE(same_bits(got[0], want[0])) << "values";
    EXPECT_EQ(got[1].to_i64(), want[1].to_i64()) << "indices";
  };
  const double nan = std::nan("");
  const std::vector<double> v = {0.0, -0.0, nan, 5, -INFINITY, INFINITY, nan, -0.0, 2, 2, -3, 0.0};
  for (DType t : kFloatsAndF64)
    for (bool largest : {true, false})
      for (int64_t k : {1, 9, 12}) {
        SCOPED_TRACE(label(t, std::string(largest ? "largest" : "smallest") + " k " + std::to_string(k)));
        check(t, v, k, largest);
      }
  for (DType t : {DType::I32, DType::I64, DType::I8})
    for (bool largest : {true, false}) {
      SCOPED_TRACE(label(t, largest ? "largest" : "smallest"));
      check(t, {-5, 3, -128, 3, 0, -1, 127, -5, 0, 3}, 6, largest);
    }
}

// ---- Sample -------------------------------------------------------------------------------

Graph sample_graph(DType t, std::vector<int64_t> dims, const ops::Sample& op, bool with_offset) {
  Graph g;
  std::vector<Value> ins{g.input("logits", Shape::from(dims, t))};
  if (with_offset) ins.push_back(g.input("offset", Shape::of({}, DType::I64)));
  g.add_output(g.apply(op, ins));
  return g;
}

// The draws really depend on the offset (a sampler stuck on the argmax would pass the shared
// sample_* cases only with temperature 0); infinite logits are the case sample_infinite_logits_*.
TEST(CudaSelect, SampleDrawsVaryWithTheOffset) {
  RLX_REQUIRE_CUDA();
  ops::Sample op;
  op.temperature = 1.0;
  const Graph g = sample_graph(DType::F32, {8, 64}, op, true);
  const NamedTensors base = {{"logits", rlx::testing::random_tensor(DType::F32, {8, 64}, 3, -0.5, 0.5)}};
  auto cuda = Session(Device::Cuda).compile(g);
  auto cpu = Session(Device::Cpu).compile(g);
  std::set<int64_t> tokens;
  for (int64_t step = 0; step < 12; ++step) {
    NamedTensors ins = base;
    ins.emplace_back("offset", Tensor::scalar_i64(step));
    const Tensor got = cuda.run(ins)[0];
    EXPECT_TRUE(same_bits(got, cpu.run(ins)[0])) << "step " << step;
    for (int64_t v : got.to_i64()) tokens.insert(v);
  }
  EXPECT_GT(tokens.size(), 20u);

}

TEST(CudaSelect, SampleReportsNaNAndAllNegInfRows) {
  RLX_REQUIRE_CUDA();
  ops::Sample op;
  const Graph g = sample_graph(DType::F32, {2, 5}, op, false);
  auto cg = Session(Device::Cuda).compile(g);
  const std::string nan_msg = rlx::testing::error_message([&] {
    cg.run({{"logits", Tensor::f32({2, 5}, std::vector<float>{0, 1, 2, 3, 4, 1, std::nanf(""), 0, 0, 0})}});
  });
  EXPECT_NE(nan_msg.find("NaN"), std::string::npos) << nan_msg;
  const std::string inf_msg = rlx::testing::error_message([&] {
    cg.run({{"logits", Tensor::f32({2, 5}, std::vector<float>{0, 1, 2, 3, 4, -INFINITY, -INFINITY, -INFINITY,
                                                             -INFINITY, -INFINITY})}});
  });
  EXPECT_NE(inf_msg.find("-inf"), std::string::npos) << inf_msg;
  // The variant's flag is cleared between runs: a good run afterwards succeeds.
  EXPECT_EQ(cg.run({{"logits", rlx::testing::random_tensor(DType::F32, {2, 5}, 1)}})[0].numel(), 2);
}

// ---- ScatterAdd ---------------------------------------------------------------------------

TEST(CudaSelect, ScatterAddBadIndexIsAnError) {
  RLX_REQUIRE_CUDA();
  Graph g;
  g.add_output(g.scatter_add(g.input("data", Shape::of({4, 3})), g.input("idx", Shape::of({2, 3}, DType::I32)),
                             g.input("upd", Shape::of({2, 3})), 0));
  auto cg = Session(Device::Cuda).compile(g);
  const std::string msg = rlx::testing::error_message([&] {
    cg.run({{"data", rlx::testing::random_tensor(DType::F32, {4, 3}, 1)},
            {"idx", Tensor::i32({2, 3}, std::vector<int32_t>{0, 1, 2, 3, -5, 0})},
            {"upd", rlx::testing::random_tensor(DType::F32, {2, 3}, 2)}});
  });
  EXPECT_NE(msg.find("scatter_add"), std::string::npos) << msg;
  EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
}

// ---- RngUniform / RngNormal -----------------------------------------------------------------

Graph rng_graph(const Op& op, bool with_offset) {
  Graph g;
  std::vector<Value> ins;
  if (with_offset) ins.push_back(g.input("offset", Shape::of({1}, DType::I64)));
  g.add_output(g.apply(op, ins));
  return g;
}

TEST(CudaSelect, RngUniformIsBitExactInEveryFloatDtype) {
  RLX_REQUIRE_CUDA();
  struct Range {
    double low, high;
  };
  // [0, 1) rounds up to 1 in the half types (clamped below high); a range away from zero;
  // a narrow range with few representable values.
  const std::vector<Range> ranges = {{0.0, 1.0}, {-3.5, 7.25}, {1000.0, 1000.5}, {-1e-3, 1e-3}};
  for (DType t : kFloats)
    for (const Range& r : ranges)
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1 << 20} + 3})
        for (bool with_offset : {false, true}) {
          SCOPED_TRACE(label(t, "[" + std::to_string(r.low) + ", " + std::to_string(r.high) + ") n " +
                                    std::to_string(n) + (with_offset ? " offset" : "")));
          ops::RngUniform op;
          op.shape = Shape::of({n}, t), op.low = r.low, op.high = r.high, op.seed = 0xfedcba9876543210ULL;
          const Graph g = rng_graph(op, with_offset);
          NamedTensors ins;
          if (with_offset) ins = {{"offset", Tensor::i64({1}, std::vector<int64_t>{(int64_t{1} << 32) + 17})}};
          const Tensor got = run_on(Device::Cuda, g, ins)[0];
          EXPECT_TRUE(same_bits(got, run_on(Device::Cpu, g, ins)[0]));
          for (double v : rlx::testing::to_doubles(got)) {
            ASSERT_GE(v, r.low);
            ASSERT_LT(v, r.high);
          }
        }
  // No value of the dtype in [low, high): an error naming the dtype (at compile on CUDA).
  ops::RngUniform bad;
  bad.shape = Shape::of({4}, DType::BF16), bad.low = 1.001, bad.high = 1.002;
  const std::string msg = rlx::testing::error_message([&] { run_on(Device::Cuda, rng_graph(bad, false), {}); });
  EXPECT_NE(msg.find("has no value"), std::string::npos) << msg;
}

// Normal draws need log/cos/sin in double, whose last bit may differ between libm and CUDA:
// the f32 results may then differ by one ulp, rarely; almost all must be bit-identical.
TEST(CudaSelect, RngNormalMatchesTheOracleToTheLastUlp) {
  RLX_REQUIRE_CUDA();
  for (DType t : kFloats)
    for (int64_t n : {int64_t{1}, int64_t{6}, int64_t{300001}})
      for (bool with_offset : {false, true}) {
        SCOPED_TRACE(label(t, "n " + std::to_string(n) + (with_offset ? " offset" : "")));
        ops::RngNormal op;
        op.shape = Shape::of({n}, t), op.mean = 0.5, op.stddev = 2.0, op.seed = 42;
        const Graph g = rng_graph(op, with_offset);
        NamedTensors ins;
        if (with_offset) ins = {{"offset", Tensor::i64({1}, std::vector<int64_t>{999})}};
        const auto got = rlx::testing::to_doubles(run_on(Device::Cuda, g, ins)[0]);
        const auto want = rlx::testing::to_doubles(run_on(Device::Cpu, g, ins)[0]);
        const double ulp = t == DType::F32 ? 0x1p-23 : (t == DType::F16 ? 0x1p-10 : 0x1p-7);
        int64_t differ = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          if (got[i] == want[i]) continue;
          ++differ;
          ASSERT_LE(std::fabs(got[i] - want[i]), ulp * std::fabs(want[i]) + 1e-30) << "element " << i;
        }
        EXPECT_LE(differ * 1000, n) << differ << " of " << n << " differ by one ulp";
      }
}

// ---- GroupedMatMul --------------------------------------------------------------------------

TEST(CudaSelect, GroupedMatMulReportsABadExpertIndex) {
  RLX_REQUIRE_CUDA();
  Graph g;
  g.add_output(g.apply(ops::GroupedMatMul{}, {g.input("x", Shape::of({2, 8})), g.input("w", Shape::of({3, 8, 16})),
                                              g.input("idx", Shape::of({2}, DType::I32))}));
  auto cg = Session(Device::Cuda).compile(g);
  for (int32_t bad : {3, -1}) {
    const std::string msg = rlx::testing::error_message([&] {
      cg.run({{"x", rlx::testing::random_tensor(DType::F32, {2, 8}, 1)},
              {"w", rlx::testing::random_tensor(DType::F32, {3, 8, 16}, 2)},
              {"idx", Tensor::i32({2}, std::vector<int32_t>{0, bad})}});
    });
    EXPECT_NE(msg.find("grouped_matmul"), std::string::npos) << msg;
  }
}

}  // namespace
#endif  // RLX_HAVE_CUDA
