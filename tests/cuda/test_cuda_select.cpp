// The CUDA select family vs the CPU oracle: ArgMax/ArgMin, TopK, Sample, Cumsum, ScatterAdd,
// RngUniform/RngNormal and GroupedMatMul (every dtype and attribute, odd sizes, 150k-wide rows,
// axes other than the last, error cases). Device tests skip with the reason when there is no
// CUDA device; the claim tests run everywhere the backend is built.
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
using rlx::testing::cuda_parity;
using rlx::testing::ParityOptions;

const DType kFloats[] = {DType::F32, DType::F16, DType::BF16};
const DType kFloatsAndF64[] = {DType::F32, DType::F16, DType::BF16, DType::F64};  // ArgMax / TopK

void expect_parity(const Graph& g, const ParityOptions& o = {}) {
  const auto rep = cuda_parity(g, Precision::Fp32, o);
  EXPECT_TRUE(rep.pass) << rep.text << "\n" << g.to_text();
}

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
  EXPECT_NE(cuda::select_error_message(cuda::kErrScatterIndex).find("scatter_add"), std::string::npos);
  EXPECT_NE(cuda::select_error_message(cuda::kErrExpertIndex).find("grouped_matmul"), std::string::npos);
  EXPECT_NE(cuda::select_error_message(cuda::kErrSampleNaN).find("NaN"), std::string::npos);
  EXPECT_NE(cuda::select_error_message(cuda::kErrSampleAllNegInf).find("-inf"), std::string::npos);
  EXPECT_EQ(cuda::select_error_message(1), "");  // Gather's code is reported by the variant itself
}

// ---- ArgMax / ArgMin --------------------------------------------------------------------

TEST(CudaSelect, ArgMaxArgMinEveryDtypeAxisAndTieRule) {
  RLX_REQUIRE_CUDA();
  struct Case {
    std::vector<int64_t> dims;
    int64_t axis;
  };
  const std::vector<Case> cases = {{{7, 150001}, 1}, {{3, 37}, 1}, {{5, 300, 3}, 1}, {{64, 9}, 0},
                                   {{2, 3, 1500}, -1}, {{1}, 0}};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32, DType::I64, DType::U8, DType::I8})
    for (const Case& c : cases)
      for (bool last : {false, true})
        for (bool keep : {false, true}) {
          SCOPED_TRACE(label(t, dims_str(c.dims) + " axis " + std::to_string(c.axis) + (last ? " last" : "") +
                                    (keep ? " keep" : "")));
          Graph g;
          const Value x = g.input("x", Shape::from(c.dims, t));
          ops::ArgMax amax;
          amax.axis = c.axis, amax.keep_dims = keep, amax.select_last = last;
          ops::ArgMin amin;
          amin.axis = c.axis, amin.keep_dims = keep, amin.select_last = last;
          g.add_output(g.apply(amax, {x}));
          g.add_output(g.apply(amin, {x}));
          ParityOptions o;
          o.int_hi = 3;  // integers: many ties, so the first/last rule decides
          o.lo = -4, o.hi = 4;
          expect_parity(g, o);
        }
}

TEST(CudaSelect, ArgMaxNaNAndSignedZeroRules) {
  RLX_REQUIRE_CUDA();
  const float nan = std::nanf("");
  // Row 0: NaN twice; row 1: +0 / -0 ties with the max; row 2: -inf only.
  const std::vector<float> v = {1, nan, 3, nan, -2, 0.f, -0.f, -1, 0.f, -0.f,
                                -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
  for (DType t : kFloatsAndF64)
    for (bool last : {false, true}) {
      SCOPED_TRACE(label(t, last ? "last" : "first"));
      Graph g;
      const Value x = g.input("x", Shape::of({3, 5}, t));
      ops::ArgMax amax;
      amax.axis = 1, amax.select_last = last;
      ops::ArgMin amin;
      amin.axis = 1, amin.select_last = last;
      g.add_output(g.apply(amax, {x}));
      g.add_output(g.apply(amin, {x}));
      ParityOptions o;
      o.fixed_inputs = {{"x", rlx::testing::from_doubles(t, {3, 5}, std::vector<double>(v.begin(), v.end()))}};
      expect_parity(g, o);
    }
}

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

TEST(CudaSelect, TopKEveryDtypeKAndAxis) {
  RLX_REQUIRE_CUDA();
  struct Case {
    std::vector<int64_t> dims;
    int64_t k, axis;
  };
  const std::vector<Case> cases = {{{3, 150001}, 50, -1}, {{5, 1000}, 1000, 1}, {{4, 777}, 1, 1},
                                   {{2, 3000}, 1024, 1},  {{6, 129, 5}, 17, 1},  {{33, 4}, 33, 0},
                                   {{2, 2049}, 300, -1}};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32, DType::I64, DType::U8})
    for (const Case& c : cases)
      for (bool largest : {true, false}) {
        SCOPED_TRACE(label(t, dims_str(c.dims) + " k " + std::to_string(c.k) + " axis " + std::to_string(c.axis) +
                                  (largest ? " largest" : " smallest")));
        Graph g;
        const auto [vals, idx] = g.topk(g.input("x", Shape::from(c.dims, t)), c.k, c.axis, largest);
        g.add_output(vals);
        g.add_output(idx);
        ParityOptions o;
        o.int_hi = 7;  // integers: heavy ties, ordered by index
        o.lo = -100, o.hi = 100;
        expect_parity(g, o);
      }
}

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

TEST(CudaSelect, SampleMatchesTheOracleForEveryRule) {
  RLX_REQUIRE_CUDA();
  struct Rule {
    double temperature;
    int64_t top_k;
    double top_p;
  };
  const std::vector<Rule> rules = {{0.0, 0, 1.0},  {1.0, 0, 1.0},  {0.7, 40, 1.0}, {1.3, 0, 0.9},
                                   {1.0, 50, 0.5}, {2.0, 1, 1.0},  {0.5, 0, 0.3}, {1.0, 100000, 1.0}};
  const std::vector<std::vector<int64_t>> shapes = {{150001}, {4, 1000}, {3, 7}, {2, 1}};
  for (DType t : kFloats)
    for (const auto& dims : shapes)
      for (const Rule& r : rules)
        for (uint64_t seed : {uint64_t{1}, uint64_t{0x123456789abcdefULL}}) {
          const bool with_offset = seed != 1;
          SCOPED_TRACE(label(t, dims_str(dims) + " T " + std::to_string(r.temperature) + " top_k " +
                                    std::to_string(r.top_k) + " top_p " + std::to_string(r.top_p) + " seed " +
                                    std::to_string(seed)));
          ops::Sample op;
          op.temperature = r.temperature, op.top_k = r.top_k, op.top_p = r.top_p, op.seed = seed;
          ParityOptions o;
          o.lo = -6, o.hi = 6;  // peaked and flat regions both
          o.seed = seed * 7 + static_cast<uint64_t>(r.top_k);
          if (with_offset) o.fixed_inputs = {{"offset", Tensor::scalar_i64(int64_t{5} << 33)}};
          expect_parity(sample_graph(t, dims, op, with_offset), o);
        }
}

// The draws really depend on the seed (a sampler stuck on the argmax would pass the rules above
// only with temperature 0), and +inf / -inf logits follow the oracle.
TEST(CudaSelect, SampleDrawsVaryAndInfinitiesFollowTheOracle) {
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

  std::vector<double> l(2 * 6, -INFINITY);
  l[2] = INFINITY, l[4] = INFINITY, l[5] = 1.0;  // row 0: two +inf share the mass
  l[6 + 3] = 0.5, l[6 + 1] = 0.25;               // row 1: -inf masked vocabulary
  for (DType t : kFloats)
    for (uint64_t seed = 0; seed < 6; ++seed) {
      SCOPED_TRACE(label(t, "seed " + std::to_string(seed)));
      ops::Sample s;
      s.seed = seed, s.top_p = 0.95;
      ParityOptions o;
      o.fixed_inputs = {{"logits", rlx::testing::from_doubles(t, {2, 6}, l)}};
      expect_parity(sample_graph(t, {2, 6}, s, false), o);
    }
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

// ---- Cumsum -------------------------------------------------------------------------------

TEST(CudaSelect, CumsumEveryDtypeAxisExclusiveReverse) {
  RLX_REQUIRE_CUDA();
  struct Case {
    std::vector<int64_t> dims;
    int64_t axis;
  };
  const std::vector<Case> cases = {{{3, 100003}, 1}, {{5, 7, 9}, 0}, {{5, 7, 9}, 1}, {{5, 7, 9}, 2},
                                   {{2, 5000, 3}, 1}, {{2, 20000, 3}, 1}, {{4, 10, 600}, 1}, {{1}, 0}, {{4097}, 0}};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::I8, DType::U8})
    for (const Case& c : cases)
      for (bool excl : {false, true})
        for (bool rev : {false, true}) {
          SCOPED_TRACE(label(t, dims_str(c.dims) + " axis " + std::to_string(c.axis) + (excl ? " exclusive" : "") +
                                    (rev ? " reverse" : "")));
          Graph g;
          g.add_output(g.cumsum(g.input("x", Shape::from(c.dims, t)), c.axis, excl, rev));
          ParityOptions o;
          o.int_hi = 100;  // i8 / u8 wrap around on long rows, like the CPU
          expect_parity(g, o);
        }
}

// ---- ScatterAdd ---------------------------------------------------------------------------

TEST(CudaSelect, ScatterAddEveryDtypeAxisAndIndexType) {
  RLX_REQUIRE_CUDA();
  // data (6, 5, 4); indices / updates (4, 3, 4): smaller than data off the axis, with
  // collisions and negative indices.
  const std::vector<int64_t> data_dims = {6, 5, 4}, idx_dims = {4, 3, 4};
  for (int64_t axis = 0; axis < 3; ++axis)
    for (DType it : {DType::I32, DType::I64, DType::I16})
      for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32, DType::I64, DType::I8, DType::U8,
                      DType::I16, DType::U32}) {
        SCOPED_TRACE(label(t, "axis " + std::to_string(axis) + " indices " + dtype_name(it)));
        const int64_t n = data_dims[static_cast<size_t>(axis)];
        std::vector<double> ix(48);
        for (size_t i = 0; i < ix.size(); ++i) ix[i] = static_cast<double>(static_cast<int64_t>((i * 7) % (2 * n)) - n);
        Graph g;
        const Value data = g.input("data", Shape::from(data_dims, t));
        const Value idx = g.input("idx", Shape::from(idx_dims, it));
        const Value upd = g.input("upd", Shape::from(idx_dims, t));
        g.add_output(g.scatter_add(data, idx, upd, axis));
        ParityOptions o;
        o.int_hi = 60;
        o.fixed_inputs = {{"idx", rlx::testing::from_doubles(it, idx_dims, ix)}};
        expect_parity(g, o);
      }
}

TEST(CudaSelect, ScatterAddLargeWithManyCollisionsAndBadIndex) {
  RLX_REQUIRE_CUDA();
  for (DType t : kFloats) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    const Value data = g.input("data", Shape::of({50, 33}, t));
    const Value idx = g.input("idx", Shape::of({4000, 33}, DType::I64));
    g.add_output(g.scatter_add(data, idx, g.input("upd", Shape::of({4000, 33}, t)), 0));
    ParityOptions o;
    o.int_hi = 50;
    o.lo = -0.01, o.hi = 0.01;  // ~80 additions per element stay within the half types' range
    expect_parity(g, o);
  }
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

TEST(CudaSelect, GroupedMatMulDecodeAndPrefillShapes) {
  RLX_REQUIRE_CUDA();
  struct Case {
    int64_t m, k, n, e;
  };
  // Decode (m of a few rows, k split over blocks), odd n (scalar loads), prefill-sized m.
  const std::vector<Case> cases = {{1, 1024, 4096, 8}, {3, 129, 100, 4}, {2, 64, 513, 1},
                                   {300, 256, 96, 8},  {5, 2048, 64, 3}, {17, 1, 8, 2}};
  for (DType t : kFloats)
    for (DType it : {DType::I32, DType::I64})
      for (const Case& c : cases) {
        SCOPED_TRACE(label(t, "m " + std::to_string(c.m) + " k " + std::to_string(c.k) + " n " + std::to_string(c.n) +
                                  " experts " + std::to_string(c.e) + " idx " + dtype_name(it)));
        Graph g;
        const Value x = g.input("x", Shape::of({c.m, c.k}, t));
        const Value w = g.input("w", Shape::of({c.e, c.k, c.n}, t));
        const Value idx = g.input("idx", Shape::of({c.m}, it));
        g.add_output(g.apply(ops::GroupedMatMul{}, {x, w, idx}));
        std::vector<double> ix(static_cast<size_t>(c.m));
        for (size_t i = 0; i < ix.size(); ++i) ix[i] = static_cast<double>((i * 5 + 3) % static_cast<size_t>(c.e));
        ParityOptions o;
        o.fixed_inputs = {{"idx", rlx::testing::from_doubles(it, {c.m}, ix)}};
        // Sums of k products in f32, in another order than the CPU's BLAS: the absolute error
        // grows like sqrt(k) (a wrong expert or a lost k chunk is off by O(1)).
        o.tolerance = [k = c.k](DType d) {
          rlx::testing::Tolerance tol = rlx::testing::parity_tolerance(d);
          if (d == DType::F32) tol.atol = 4e-6 * std::sqrt(static_cast<double>(k));
          return tol;
        };
        expect_parity(g, o);
      }
}

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
