// RngUniform, RngNormal and Sample: the Philox stream (known-answer vectors), reproducibility,
// statistics, the [low, high) guarantee after rounding, and sampling distributions.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numbers>
#include <numeric>
#include <vector>

#include "backends/cpu/parallel.h"
#include "backends/cpu/philox.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using testing::error_message;
using testing::from_doubles;
using testing::run_cpu1;
using testing::to_doubles;

const DType kFloats[] = {DType::F32, DType::F16, DType::BF16, DType::F64};

Tensor run_uniform(const ops::RngUniform& op, std::optional<int64_t> offset = std::nullopt) {
  Graph g;
  std::vector<Value> in;
  if (offset) in.push_back(g.input("offset", Shape({}, DType::I64)));
  g.add_output(g.apply(op, in));
  NamedTensors feeds;
  if (offset) feeds.push_back({"offset", Tensor::scalar_i64(*offset)});
  return run_cpu1(g, feeds);
}

Tensor run_normal(const ops::RngNormal& op, std::optional<int64_t> offset = std::nullopt) {
  Graph g;
  std::vector<Value> in;
  if (offset) in.push_back(g.input("offset", Shape({}, DType::I64)));
  g.add_output(g.apply(op, in));
  NamedTensors feeds;
  if (offset) feeds.push_back({"offset", Tensor::scalar_i64(*offset)});
  return run_cpu1(g, feeds);
}

Tensor run_sample(const ops::Sample& op, const Tensor& logits, std::optional<int64_t> offset = std::nullopt) {
  Graph g;
  std::vector<Value> in{g.input("logits", logits.shape_info())};
  if (offset) in.push_back(g.input("offset", Shape({}, DType::I64)));
  g.add_output(g.apply(op, in));
  NamedTensors feeds{{"logits", logits}};
  if (offset) feeds.push_back({"offset", Tensor::scalar_i64(*offset)});
  return run_cpu1(g, feeds);
}

struct Stats {
  double mean = 0, var = 0, min = 0, max = 0;
};
Stats stats(const std::vector<double>& v) {
  Stats s;
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.var += (x - s.mean) * (x - s.mean);
  s.var /= static_cast<double>(v.size() - 1);
  return s;
}

// ---- Philox -------------------------------------------------------------------------
TEST(Random, PhiloxKnownAnswers) {
  // Known-answer vectors of Philox-4x32-10 (Random123 kat_vectors).
  EXPECT_EQ(cpu::philox4x32_10({0, 0, 0, 0}, 0, 0),
            (cpu::Philox4x32{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(cpu::philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0xffffffffu, 0xffffffffu),
            (cpu::Philox4x32{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(cpu::philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0xa4093822u, 0x299f31d0u),
            (cpu::Philox4x32{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

// ---- RngUniform ---------------------------------------------------------------------
TEST(Random, UniformMatchesTheDocumentedStream) {
  const uint64_t seed = 0x123456789abcdefull;
  const int64_t offset = 77;
  ops::RngUniform op{.shape = Shape::of({3, 7}), .low = -2.0, .high = 3.0, .seed = seed};
  const std::vector<float> got = run_uniform(op, offset).to_f32();
  for (size_t i = 0; i < got.size(); ++i) {
    const auto block = cpu::philox_block(seed, offset, i / 4);
    const double u = static_cast<double>(block[i % 4]) / 4294967296.0;
    EXPECT_EQ(got[i], static_cast<float>(-2.0 + 5.0 * u)) << "element " << i;
  }
}

TEST(Random, UniformIsReproducibleAndDependsOnSeedOffsetIndexOnly) {
  ops::RngUniform op{.shape = Shape::of({40000}), .seed = 5};
  const auto a = run_uniform(op).to_f32();
  EXPECT_EQ(a, run_uniform(op).to_f32());
  EXPECT_EQ(a, run_uniform(op, 0).to_f32());  // absent offset = offset 0
  // Element i depends only on i: a different shape gives the same prefix.
  op.shape = Shape::of({3, 5});
  const auto prefix = run_uniform(op).to_f32();
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), a.begin()));
  // Independent of the thread count (40000 elements are split across workers).
  op.shape = Shape::of({40000});
  const int saved = cpu::num_threads();
  cpu::set_num_threads(1);
  const auto single = run_uniform(op).to_f32();
  cpu::set_num_threads(4);
  const auto multi = run_uniform(op).to_f32();
  cpu::set_num_threads(saved);
  EXPECT_EQ(single, a);
  EXPECT_EQ(multi, a);
  // Different seeds and offsets give different streams.
  op.shape = Shape::of({1000});
  const auto base = run_uniform(op, 3).to_f32();
  const auto other_offset = run_uniform(op, 4).to_f32();
  op.seed = 6;
  const auto other_seed = run_uniform(op, 3).to_f32();
  int same_offset = 0, same_seed = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    same_offset += base[i] == other_offset[i];
    same_seed += base[i] == other_seed[i];
  }
  EXPECT_LT(same_offset, 5);
  EXPECT_LT(same_seed, 5);
}

TEST(Random, UniformStatisticsEveryFloatDType) {
  const double low = -2.0, high = 3.0;
  for (DType dt : kFloats) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor t = run_uniform({.shape = Shape({100000}, dt), .low = low, .high = high, .seed = 11});
    ASSERT_EQ(t.dtype(), dt);
    const Stats s = stats(to_doubles(t));
    const double n = 100000, var = (high - low) * (high - low) / 12;
    EXPECT_NEAR(s.mean, (low + high) / 2, 5 * std::sqrt(var / n));
    EXPECT_NEAR(s.var, var, 0.02 * var);
    EXPECT_GE(s.min, low);
    EXPECT_LT(s.max, high);
    EXPECT_LT(s.min, low + 0.01);
    EXPECT_GT(s.max, high - 0.05);
  }
}

TEST(Random, UniformNeverReturnsHighAfterRounding) {
  // Rounding low + (high-low)*u to f16/bf16 reaches high for u close to 1; those are clamped
  // to the largest representable value below high.
  for (DType dt : {DType::F16, DType::BF16, DType::F32}) {
    SCOPED_TRACE(dtype_name(dt));
    const auto v = to_doubles(run_uniform({.shape = Shape({100000}, dt), .low = 0.0, .high = 1.0, .seed = 3}));
    const double top = *std::max_element(v.begin(), v.end());
    EXPECT_LT(top, 1.0);
    if (dt == DType::F16) {
      EXPECT_EQ(top, 1.0 - std::ldexp(1.0, -11));
    }
    if (dt == DType::BF16) {
      EXPECT_EQ(top, 1.0 - std::ldexp(1.0, -8));
    }
  }
  // Bounds that are not representable: every value still lies in [low, high).
  const auto v = to_doubles(run_uniform({.shape = Shape({20000}, DType::BF16), .low = 0.1, .high = 0.2, .seed = 9}));
  for (double x : v) {
    ASSERT_GE(x, 0.1);
    ASSERT_LT(x, 0.2);
  }
  // No bf16 value lies in [1.001, 1.002): a clear error instead of out-of-range values.
  EXPECT_THAT(error_message([] {
                run_uniform({.shape = Shape({4}, DType::BF16), .low = 1.001, .high = 1.002});
              }),
              HasSubstr("no value in [low, high)"));
}

TEST(Random, UniformZeroSizeAndSymbolicShapes) {
  const Tensor t = run_uniform({.shape = Shape({0, 3}, DType::F32)});
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{0, 3}));
  Graph g;
  Value v = g.apply(ops::RngUniform{.shape = Shape({Dim::symbol("n"), Dim(2)})}, {});
  EXPECT_EQ(g.shape(v), Shape({Dim::symbol("n"), Dim(2)}));
}

// ---- RngNormal ----------------------------------------------------------------------
TEST(Random, NormalMatchesBoxMullerOnTheStream) {
  const uint64_t seed = 42;
  const Tensor t = run_normal({.shape = Shape({10}, DType::F64), .mean = 1.5, .stddev = 0.5, .seed = seed}, 9);
  const auto got = to_doubles(t);
  for (size_t i = 0; i < got.size(); ++i) {
    const auto block = cpu::philox_block(seed, 9, i / 4);
    const size_t pair = (i % 4) / 2;
    const double u1 = (static_cast<double>(block[2 * pair]) + 1.0) / 4294967296.0;
    const double u2 = static_cast<double>(block[2 * pair + 1]) / 4294967296.0;
    const double r = std::sqrt(-2.0 * std::log(u1)), th = 2.0 * std::numbers::pi * u2;
    EXPECT_NEAR(got[i], 1.5 + 0.5 * (i % 2 == 0 ? r * std::cos(th) : r * std::sin(th)), 1e-12) << "element " << i;
  }
}

TEST(Random, NormalStatisticsEveryFloatDType) {
  for (DType dt : kFloats) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor t = run_normal({.shape = Shape({100000}, dt), .mean = 1.0, .stddev = 2.0, .seed = 17});
    const auto v = to_doubles(t);
    const Stats s = stats(v);
    EXPECT_NEAR(s.mean, 1.0, 5 * 2.0 / std::sqrt(1e5));
    EXPECT_NEAR(s.var, 4.0, 0.04 * 4.0);
    const double within = static_cast<double>(std::count_if(v.begin(), v.end(), [](double x) {
                            return std::abs(x - 1.0) < 2.0;
                          })) / 1e5;
    EXPECT_NEAR(within, 0.682689, 0.01);
    // Third and fourth standardized moments of a normal: 0 and 3.
    double m3 = 0, m4 = 0;
    for (double x : v) {
      const double z = (x - s.mean) / std::sqrt(s.var);
      m3 += z * z * z;
      m4 += z * z * z * z;
    }
    EXPECT_NEAR(m3 / 1e5, 0.0, 0.05);
    EXPECT_NEAR(m4 / 1e5, 3.0, 0.15);
  }
}

TEST(Random, NormalReproducibleOffsetsDifferAndStddevZero) {
  ops::RngNormal op{.shape = Shape::of({257}), .seed = 1};
  const auto a = run_normal(op, 5).to_f32();
  EXPECT_EQ(a, run_normal(op, 5).to_f32());
  const auto b = run_normal(op, 6).to_f32();
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  EXPECT_LT(same, 3);
  for (float x : a) EXPECT_TRUE(std::isfinite(x));
  op.mean = 4.0;
  op.stddev = 0.0;
  for (float x : run_normal(op).to_f32()) EXPECT_EQ(x, 4.0f);
}

TEST(Random, RngInferenceErrors) {
  Graph g;
  const auto add = [&](Op op, std::vector<Value> in = {}) { g.apply(std::move(op), std::move(in)); };
  EXPECT_THAT(error_message([&] { add(ops::RngUniform{.shape = Shape({2}, DType::I32)}); }),
              HasSubstr("must be a float type"));
  EXPECT_THAT(error_message([&] { add(ops::RngUniform{.shape = Shape::of({2}), .low = 1, .high = 1}); }),
              HasSubstr("low < high"));
  EXPECT_THAT(error_message([&] {
                add(ops::RngUniform{.shape = Shape::of({2}), .high = std::numeric_limits<double>::infinity()});
              }),
              HasSubstr("finite"));
  EXPECT_THAT(error_message([&] { add(ops::RngUniform{.shape = Shape::of({-1})}); }), HasSubstr("negative dim"));
  EXPECT_THAT(error_message([&] { add(ops::RngNormal{.shape = Shape::of({2}), .stddev = -1}); }),
              HasSubstr("stddev must be finite and >= 0"));
  EXPECT_THAT(error_message([&] { add(ops::RngNormal{.shape = Shape({2}, DType::Bool)}); }),
              HasSubstr("must be a float type"));
  const Value off32 = g.input("off32", Shape({}, DType::I32));
  const Value off_vec = g.input("off_vec", Shape({2}, DType::I64));
  EXPECT_THAT(error_message([&] { add(ops::RngUniform{.shape = Shape::of({2})}, {off32}); }),
              HasSubstr("offset operand must be an i64 scalar"));
  EXPECT_THAT(error_message([&] { add(ops::RngNormal{.shape = Shape::of({2})}, {off_vec}); }),
              HasSubstr("offset operand must be an i64 scalar"));
  const Value off1 = g.input("off1", Shape({1}, DType::I64));
  EXPECT_NO_THROW(add(ops::RngNormal{.shape = Shape::of({2})}, {off1}));
}

// ---- Sample -------------------------------------------------------------------------
// The filtered distribution of the spec: softmax(l/T), top_k, then top_p, renormalized.
std::vector<double> filtered_distribution(const std::vector<double>& logits, double temperature, int64_t top_k,
                                          double top_p) {
  const size_t V = logits.size();
  const double mx = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(V);
  double z = 0;
  for (size_t j = 0; j < V; ++j) z += p[j] = std::exp((logits[j] - mx) / temperature);
  for (double& x : p) x /= z;
  std::vector<size_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  size_t kept = top_k > 0 ? std::min<size_t>(static_cast<size_t>(top_k), V) : V;
  double mass = 0;
  for (size_t i = 0; i < kept; ++i) mass += p[order[i]];
  double cum = 0;
  for (size_t i = 0; i < kept; ++i) {
    cum += p[order[i]];
    if (cum >= top_p * mass) {
      kept = i + 1;
      break;
    }
  }
  std::vector<double> q(V, 0.0);
  double qm = 0;
  for (size_t i = 0; i < kept; ++i) qm += p[order[i]];
  for (size_t i = 0; i < kept; ++i) q[order[i]] = p[order[i]] / qm;
  return q;
}

// Empirical frequencies of `rows` draws from one logits row (each row of the batch draws
// from its own counter).
std::vector<double> frequencies(const std::vector<double>& logits, const ops::Sample& op, int64_t rows, DType dt,
                                int64_t offset = 0) {
  const int64_t V = static_cast<int64_t>(logits.size());
  std::vector<double> batch;
  for (int64_t r = 0; r < rows; ++r) batch.insert(batch.end(), logits.begin(), logits.end());
  const Tensor ids = run_sample(op, from_doubles(dt, {rows, V}, batch), offset);
  EXPECT_EQ(ids.dtype(), DType::I64);
  EXPECT_EQ(ids.shape(), (std::vector<int64_t>{rows}));
  std::vector<double> f(static_cast<size_t>(V), 0.0);
  for (int64_t id : ids.to_i64()) {
    EXPECT_TRUE(id >= 0 && id < V) << id;
    if (id >= 0 && id < V) f[static_cast<size_t>(id)] += 1.0 / static_cast<double>(rows);
  }
  return f;
}

void expect_frequencies_match(const std::vector<double>& f, const std::vector<double>& q, int64_t rows) {
  for (size_t j = 0; j < q.size(); ++j) {
    if (q[j] == 0) {
      EXPECT_EQ(f[j], 0.0) << "token " << j << " is filtered out but was drawn";
    } else {
      const double sigma = std::sqrt(q[j] * (1 - q[j]) / static_cast<double>(rows));
      EXPECT_NEAR(f[j], q[j], 5 * sigma + 1e-9) << "token " << j;
    }
  }
}

const std::vector<double> kLogits = {1.0, 2.5, 0.3, -1.0, 2.0, 0.0, 1.7, -0.5};

TEST(Random, SampleFrequenciesMatchTheFilteredDistribution) {
  const int64_t rows = 8000;
  struct Case {
    double temperature;
    int64_t top_k;
    double top_p;
  };
  for (const Case c : {Case{1.0, 0, 1.0}, Case{0.7, 3, 1.0}, Case{1.3, 0, 0.8}, Case{0.9, 5, 0.6}, Case{2.0, 100, 1.0}}) {
    SCOPED_TRACE("temperature " + std::to_string(c.temperature) + " top_k " + std::to_string(c.top_k) + " top_p " +
                 std::to_string(c.top_p));
    const ops::Sample op{.top_k = c.top_k, .top_p = c.top_p, .temperature = c.temperature, .seed = 1234};
    const auto q = filtered_distribution(kLogits, c.temperature, c.top_k, c.top_p);
    expect_frequencies_match(frequencies(kLogits, op, rows, DType::F64), q, rows);
  }
}

TEST(Random, SampleEveryFloatDType) {
  const int64_t rows = 4000;
  const ops::Sample op{.top_k = 4, .temperature = 0.8, .seed = 7};
  for (DType dt : kFloats) {
    SCOPED_TRACE(dtype_name(dt));
    // The reference uses the logits as rounded to the dtype.
    const auto rounded = to_doubles(from_doubles(dt, {static_cast<int64_t>(kLogits.size())}, kLogits));
    expect_frequencies_match(frequencies(kLogits, op, rows, dt), filtered_distribution(rounded, 0.8, 4, 1.0), rows);
  }
}

TEST(Random, SampleGreedyTopK1AndTinyTopPEqualArgmax) {
  const Tensor logits = testing::random_tensor(DType::F32, {16, 50}, 99, -3.0, 3.0);
  const auto v = to_doubles(logits);
  std::vector<int64_t> argmax(16);
  for (int64_t r = 0; r < 16; ++r) {
    auto row = v.begin() + r * 50;
    argmax[static_cast<size_t>(r)] = std::max_element(row, row + 50) - row;
  }
  EXPECT_EQ(run_sample({.temperature = 0.0}, logits).to_i64(), argmax);
  EXPECT_EQ(run_sample({.top_k = 1, .temperature = 1.5, .seed = 3}, logits).to_i64(), argmax);
  EXPECT_EQ(run_sample({.top_p = 1e-9, .temperature = 1.0, .seed = 4}, logits, 12).to_i64(), argmax);
  // Greedy ties pick the first index.
  const Tensor tie = Tensor::f32({4}, std::vector<float>{1, 5, 5, 2});
  const Tensor greedy = run_sample({.temperature = 0.0}, tie);
  EXPECT_EQ(greedy.rank(), 0);
  EXPECT_EQ(greedy.to_i64(), (std::vector<int64_t>{1}));
  // top_k = 1 with tied maxima keeps the lower index.
  EXPECT_EQ(run_sample({.top_k = 1, .seed = 8}, tie).to_i64(), (std::vector<int64_t>{1}));
}

TEST(Random, SampleReproducibleAndOffsetsChangeDraws) {
  const Tensor logits = from_doubles(DType::F32, {512, 8}, [] {
    std::vector<double> b;
    for (int r = 0; r < 512; ++r) b.insert(b.end(), kLogits.begin(), kLogits.end());
    return b;
  }());
  const ops::Sample op{.temperature = 1.0, .seed = 21};
  const auto a = run_sample(op, logits, 5).to_i64();
  EXPECT_EQ(a, run_sample(op, logits, 5).to_i64());
  const auto b = run_sample(op, logits, 6).to_i64();
  ops::Sample other = op;
  other.seed = 22;
  const auto c = run_sample(other, logits, 5).to_i64();
  int same_b = 0, same_c = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    same_b += a[i] == b[i];
    same_c += a[i] == c[i];
  }
  // Two independent draws agree with probability sum(p^2) ~ 0.21 here.
  EXPECT_LT(same_b, 200);
  EXPECT_LT(same_c, 200);
  // A row's draw depends on (seed, offset, row) only: a single-row batch equals row 0.
  const Tensor one = from_doubles(DType::F32, {8}, kLogits);
  EXPECT_EQ(run_sample(op, one, 5).to_i64()[0], a[0]);
}

TEST(Random, SampleHandlesInfinitiesAndRejectsBadLogits) {
  const double inf = std::numeric_limits<double>::infinity();
  // -inf logits are never drawn.
  const std::vector<double> masked = {0.0, -inf, 1.0, -inf};
  const auto f = frequencies(masked, {.seed = 2}, 2000, DType::F32);
  EXPECT_EQ(f[1], 0.0);
  EXPECT_EQ(f[3], 0.0);
  EXPECT_NEAR(f[2], std::exp(1.0) / (1 + std::exp(1.0)), 0.05);
  // +inf logits share all of the mass.
  const auto g = frequencies({0.0, inf, 3.0, inf}, {.seed = 2}, 2000, DType::F32);
  EXPECT_EQ(g[0] + g[2], 0.0);
  EXPECT_NEAR(g[1], 0.5, 0.06);
  EXPECT_THAT(error_message([&] { run_sample({}, from_doubles(DType::F32, {2, 2}, {0, 1, -inf, -inf})); }),
              HasSubstr("row 1 is -inf"));
  EXPECT_THAT(error_message([&] {
                run_sample({}, from_doubles(DType::F32, {3}, {0, std::numeric_limits<double>::quiet_NaN(), 1}));
              }),
              HasSubstr("NaN at index 1"));
  // Zero rows: nothing to do.
  EXPECT_EQ(run_sample({}, Tensor::zeros(DType::F32, {0, 5})).numel(), 0);
}

TEST(Random, SampleInferenceErrors) {
  Graph g;
  const Value x = g.input("x", Shape::of({2, 4}));
  const Value xi = g.input("xi", Shape({2, 4}, DType::I32));
  const Value x3 = g.input("x3", Shape::of({2, 2, 4}));
  const Value empty_vocab = g.input("ev", Shape::of({2, 0}));
  const Value off = g.input("off", Shape({}, DType::I64));
  const Value off_f = g.input("off_f", Shape({}, DType::F32));
  const auto add = [&](ops::Sample op, std::vector<Value> in) { g.apply(op, std::move(in)); };
  EXPECT_THAT(error_message([&] { add({.temperature = -0.5}, {x}); }), HasSubstr("temperature must be finite and >= 0"));
  EXPECT_THAT(error_message([&] { add({.top_p = 0.0}, {x}); }), HasSubstr("top_p must be in (0, 1]"));
  EXPECT_THAT(error_message([&] { add({.top_p = 1.5}, {x}); }), HasSubstr("top_p must be in (0, 1]"));
  EXPECT_THAT(error_message([&] { add({.top_p = std::nan("")}, {x}); }), HasSubstr("top_p must be in (0, 1]"));
  EXPECT_THAT(error_message([&] { add({.top_k = -1}, {x}); }), HasSubstr("top_k must be >= 0"));
  EXPECT_THAT(error_message([&] { add({}, {xi}); }), HasSubstr("logits must be a float tensor"));
  EXPECT_THAT(error_message([&] { add({}, {x3}); }), HasSubstr("shape (V) or (B, V)"));
  EXPECT_THAT(error_message([&] { add({}, {empty_vocab}); }), HasSubstr("vocabulary dim must be > 0"));
  EXPECT_THAT(error_message([&] { add({}, {x, off_f}); }), HasSubstr("offset operand must be an i64 scalar"));
  EXPECT_EQ(g.shape(g.apply(ops::Sample{}, {x, off})), Shape({2}, DType::I64));
  const Value sym = g.input("sym", Shape({Dim::symbol("b"), Dim(4)}));
  EXPECT_EQ(g.shape(g.apply(ops::Sample{}, {sym})), Shape({Dim::symbol("b")}, DType::I64));
}

}  // namespace
}  // namespace rlx
