// Sampling from the device's candidates (GeneratorOptions::sample_candidates,
// GenerateOptions::pick_on_device): Sampler::sample_top against Sampler::sample over the whole row
// (the same tokens from the same seeds, including the draws the candidates cannot settle), and
// generation picking on each device against the host picking from the logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "models/sampling_head.h"
#include "rlx/generate.h"
#include "rlx/session.h"
#include "support/devices.h"
#include "support/test_util.h"
#include "support/tiny_lm.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using rlx::testing::error_message;
using rlx::testing::file_of;
using rlx::testing::TinyLm;
using rlx::testing::write_lm;

// What the decoder's sampling head computes from one row: the penalized logits' top k (largest
// first, ties by lower id) and the vocabulary's mass at the temperature, summed in id order.
struct Top {
  std::vector<float> values;
  std::vector<int64_t> ids;
  double mass = 0;
};
Top top_of(std::vector<float> l, const std::vector<int32_t>& history, const SamplingOptions& o, size_t k) {
  if (o.repetition_penalty != 1.0 && o.repeat_last_n > 0) {
    const size_t from = history.size() > static_cast<size_t>(o.repeat_last_n) ? history.size() - static_cast<size_t>(o.repeat_last_n) : 0;
    const auto p = static_cast<float>(o.repetition_penalty);
    for (int32_t id : std::set<int32_t>(history.begin() + static_cast<std::ptrdiff_t>(from), history.end()))
      l[static_cast<size_t>(id)] = l[static_cast<size_t>(id)] > 0 ? l[static_cast<size_t>(id)] / p : l[static_cast<size_t>(id)] * p;
  }
  std::vector<int64_t> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return l[static_cast<size_t>(a)] > l[static_cast<size_t>(b)]; });
  Top t;
  for (size_t i = 0; i < order.size() && i < k; ++i) t.values.push_back(l[static_cast<size_t>(order[i])]), t.ids.push_back(order[i]);
  for (float v : l)  // in id order, as the device sums
    if (o.temperature > 0) t.mass += std::exp((static_cast<double>(v) - t.values[0]) / o.temperature);
  return t;
}

TEST(Sampler, TopCandidatesPickAsTheWholeRow) {
  struct Case {
    const char* what;
    SamplingOptions o;
    size_t k;
    enum { Settles, Mixed, FallsBack } expect;  // whether draws need the whole row: none, some, all
  };
  const std::vector<Case> cases = {
      {"top_k within the candidates", {.temperature = 0.9, .top_k = 6, .seed = 1}, 8, Case::Settles},
      {"top_k = candidates", {.temperature = 1.3, .top_k = 8, .top_p = 0.9, .seed = 2}, 8, Case::Settles},
      {"top_k above the candidates", {.temperature = 0.8, .top_k = 20, .seed = 3}, 8, Case::FallsBack},
      {"whole vocabulary, flat", {.temperature = 2.0, .seed = 4}, 8, Case::Mixed},
      {"whole vocabulary, nucleus", {.temperature = 0.7, .top_p = 0.8, .seed = 5}, 16, Case::Mixed},
      {"one candidate", {.temperature = 1.0, .top_p = 0.95, .seed = 6}, 1, Case::Mixed},
      {"greedy with a penalty", {.repetition_penalty = 1.8, .repeat_last_n = 6}, 2, Case::Settles},
      {"penalty and temperature", {.temperature = 0.6, .top_k = 4, .repetition_penalty = 1.5, .repeat_last_n = 10, .seed = 7}, 4, Case::Settles},
      {"penalty below 1", {.temperature = 1.1, .repetition_penalty = 0.5, .seed = 8}, 12, Case::Mixed},
      {"candidates covering the vocabulary", {.temperature = 1.4, .top_p = 0.97, .seed = 9}, 100, Case::Settles},
  };
  std::mt19937 rng(11);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Sampler whole(c.o), top(c.o);
    int fell_back = 0, settled = 0;
    std::vector<int32_t> history = {3, 7, 7, 1};
    for (int draw = 0; draw < 400; ++draw) {
      const int64_t vocab = 50 + draw % 30;
      // Peaked rows (a few large logits) and flat ones, with ties and negative values.
      const double scale = draw % 3 == 0 ? 0.3 : 4.0;
      std::normal_distribution<float> n(0.0f, static_cast<float>(scale));
      std::vector<float> l(static_cast<size_t>(vocab));
      for (float& x : l) x = std::round(n(rng) * 8.0f) / 8.0f;  // coarse values: many ties
      const int32_t want = whole.sample(l, history);
      const Top t = top_of(l, history, c.o, std::min<size_t>(c.k, l.size()));
      int32_t got = top.sample_top(t.values, t.ids, t.mass, vocab);
      if (got < 0) {
        ++fell_back;
        got = top.sample(l, history);
      } else {
        ++settled;
      }
      ASSERT_EQ(got, want) << "draw " << draw;
      history.push_back(want % 50);
    }
    EXPECT_EQ(settled > 0, c.expect != Case::FallsBack) << settled << " draws settled by the candidates";
    EXPECT_EQ(fell_back > 0, c.expect != Case::Settles) << fell_back << " draws needed the whole row";
  }
  EXPECT_THAT(error_message([] { Sampler({.temperature = 1.0}).sample_top({}, {}, 1.0, 4); }), HasSubstr("at least one"));
  EXPECT_THAT(error_message([] {
                const std::vector<float> v = {1.0f, 0.5f};
                const std::vector<int64_t> ids = {0, 4};
                Sampler({.temperature = 1.0}).sample_top(v, ids, 1.0, 4);
              }),
              HasSubstr("candidate id 4 outside the vocabulary of 4 tokens"));
  // Long flat rows: the host ranks its entries in growing prefixes; the device's candidates give
  // the same draws.
  for (const SamplingOptions& o : {SamplingOptions{.temperature = 3.0, .top_p = 0.99, .seed = 1},
                                   SamplingOptions{.temperature = 5.0, .seed = 2}}) {
    Sampler whole(o), top(o);
    std::normal_distribution<float> n(0.0f, 0.2f);
    for (int draw = 0; draw < 40; ++draw) {
      std::vector<float> l(6000);
      for (float& x : l) x = n(rng);
      const Top t = top_of(l, {}, o, 1024);
      int32_t got = top.sample_top(t.values, t.ids, t.mass, 6000);
      if (got < 0) got = top.sample(l, {});
      ASSERT_EQ(got, whole.sample(l, {})) << "draw " << draw;
    }
  }
}

// Generation picking on the device gives the host's tokens on every device: greedy with a
// penalty, top-k, top-p, temperature only, with candidates covering the vocabulary (40 ids) and
// with 3 or 1 candidates (draws falling past them run the step again for its logits).
TEST(GenerateSampling, DevicePicksTheHostsTokensOnEveryDevice) {
  const GgufFile f = file_of(write_lm(TinyLm{}));
  const std::vector<int32_t> prompt = {1, 30, 7, 12, 33, 5};
  const std::vector<SamplingOptions> options = {
      {.repetition_penalty = 1.6, .repeat_last_n = 8},
      {.temperature = 0.9, .top_k = 3, .seed = 1},
      {.temperature = 1.2, .top_p = 0.8, .seed = 2},
      {.temperature = 1.5, .seed = 3},
      {.temperature = 0.8, .top_k = 10, .top_p = 0.9, .repetition_penalty = 1.3, .repeat_last_n = 16, .seed = 4},
  };
  std::vector<std::vector<int32_t>> want;
  Generator host(f, {.max_ctx = 40});
  for (const SamplingOptions& so : options) {
    GenerateOptions o;
    o.max_new_tokens = 20;
    o.stop_at_end_of_generation = false;
    o.sampling = so;
    o.pick_on_device = false;
    const GenerateResult r = host.generate(std::span<const int32_t>(prompt), o);
    EXPECT_EQ(r.host_picks, static_cast<int64_t>(r.tokens.size()));
    want.push_back(r.tokens);
  }
  for (const rlx::testing::TestDevice& d : rlx::testing::test_devices()) {
    if (const std::string why = d.unavailable ? d.unavailable() : ""; !why.empty()) {
      std::printf("[ SKIPPED  ] %s: %s\n", d.name.c_str(), why.c_str());
      continue;
    }
    for (int64_t k : {128, 3, 1}) {
      Generator gen(f, {.device = d.device, .max_ctx = 40, .sample_candidates = k});
      for (size_t i = 0; i < options.size(); ++i) {
        SCOPED_TRACE(d.name + ", " + std::to_string(k) + " candidates, options " + std::to_string(i));
        GenerateOptions o;
        o.max_new_tokens = 20;
        o.stop_at_end_of_generation = false;
        o.sampling = options[i];
        const GenerateResult r = gen.generate(std::span<const int32_t>(prompt), o);
        EXPECT_EQ(r.tokens, want[i]);
        // Candidates covering the vocabulary settle every pick; one candidate leaves some (top-p,
        // temperature only) or all (top_k 3 or 10 above it) to the host.
        const bool beyond = options[i].temperature > 0 && (k == 1 || (k == 3 && options[i].top_k != 3));
        if (!beyond) {
          EXPECT_EQ(r.host_picks, 0);
        }
        if (k == 1 && options[i].top_k > 1) {
          EXPECT_EQ(r.host_picks, static_cast<int64_t>(r.tokens.size()));
        }
      }
    }
    // A batch: each sequence draws with seed + b, as generate() alone.
    Generator pair(f, {.device = d.device, .max_ctx = 40, .batch = 2, .sample_candidates = 3});
    const std::vector<std::vector<int32_t>> prompts = {prompt, {1, 9, 4}};
    GenerateOptions o;
    o.max_new_tokens = 12;
    o.stop_at_end_of_generation = false;
    o.sampling = options[4];
    const std::vector<GenerateResult> got = pair.generate_batch(prompts, o);
    o.pick_on_device = false;
    for (size_t b = 0; b < prompts.size(); ++b) {
      SCOPED_TRACE(d.name + ", batch sequence " + std::to_string(b));
      o.sampling.seed = options[4].seed + b;
      EXPECT_EQ(got.at(b).tokens, host.generate(std::span<const int32_t>(prompts[b]), o).tokens);
    }
  }
}

// A penalty window longer than the head's history input samples on the host (the same tokens).
TEST(GenerateSampling, LongPenaltyWindowSamplesOnTheHost) {
  const GgufFile f = file_of(write_lm(TinyLm{}));
  const std::vector<int32_t> prompt = {1, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  GenerateOptions o;
  o.max_new_tokens = 16;
  o.stop_at_end_of_generation = false;
  o.sampling = {.temperature = 0.9, .top_k = 4, .repetition_penalty = 2.0, .repeat_last_n = 12, .seed = 9};
  Generator small(f, {.max_ctx = 40, .sample_candidates = 8, .sample_history = 4});
  Generator wide(f, {.max_ctx = 40, .sample_candidates = 8, .sample_history = 12});
  const std::vector<int32_t> a = small.generate(std::span<const int32_t>(prompt), o).tokens;
  EXPECT_EQ(a, wide.generate(std::span<const int32_t>(prompt), o).tokens);
  o.pick_on_device = false;
  EXPECT_EQ(a, wide.generate(std::span<const int32_t>(prompt), o).tokens);
}

// The chunked selection of the sampling head equals one TopK (values and indices, ties by lower
// index) on every device: several rounds of chunks, a last chunk padded, rows of ties, -inf
// entries and a row of equal values.
TEST(GenerateSampling, ChunkedTopKEqualsOneTopK) {
  struct Case {
    int64_t rows, n, k, split_above, chunk;
  };
  const std::vector<Case> cases = {{3, 5000, 7, 256, 64}, {2, 1000, 1, 100, 16}, {1, 4096 + 33, 128, 4096, 1024}, {4, 300, 5, 64, 8}};
  std::mt19937 rng(5);
  for (const Case& c : cases) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + ", n " + std::to_string(c.n) + ", k " + std::to_string(c.k));
    std::vector<float> x(static_cast<size_t>(c.rows * c.n));
    std::uniform_int_distribution<int> coarse(-40, 40);
    for (float& v : x) v = static_cast<float>(coarse(rng)) / 4.0f;  // many ties
    for (int64_t j = 0; j < c.n; j += 3) x[static_cast<size_t>(j)] = -std::numeric_limits<float>::infinity();
    if (c.rows > 1)
      std::fill(x.begin() + c.n, x.begin() + 2 * c.n, 1.5f);  // a row of equal values: the first k indices win
    Graph plain, chunked;
    for (Graph* g : {&plain, &chunked}) {
      const Value in = g->input("x", Shape({Dim(c.rows), Dim(c.n)}, DType::F32));
      auto [v, i] = g == &plain ? g->topk(in, c.k, 1) : models::top_k_rows(*g, in, c.rows, c.n, c.k, c.split_above, c.chunk);
      g->add_output(v, "values");
      g->add_output(i, "indices");
    }
    const NamedTensors in = {{"x", Tensor::f32({c.rows, c.n}, x)}};
    const std::vector<Tensor> want = Session(Device::Cpu).compile(plain).run(in);
    EXPECT_GT(chunked.nodes().size(), plain.nodes().size() + 3) << "the rows should be cut into chunks";
    for (const rlx::testing::TestDevice& d : rlx::testing::test_devices()) {
      if (const std::string why = d.unavailable ? d.unavailable() : ""; !why.empty()) continue;
      SCOPED_TRACE(d.name);
      const std::vector<Tensor> got = Session(d.device).compile(chunked).run(in);
      const float* gv = got.at(0).data<float>();
      const int64_t* gi = got.at(1).data<int64_t>();
      for (int64_t j = 0; j < c.rows * c.k; ++j) {
        ASSERT_EQ(gi[j], want.at(1).data<int64_t>()[j]) << "entry " << j;
        ASSERT_EQ(gv[j], want.at(0).data<float>()[j]) << "entry " << j;
      }
    }
  }
}

TEST(GenerateSampling, BadOptions) {
  const GgufFile f = file_of(write_lm(TinyLm{}));
  EXPECT_THAT(error_message([&] { Generator(f, {.max_ctx = 16, .sample_candidates = -1}); }),
              HasSubstr("sample_candidates must be in [0, 1024]"));
  EXPECT_THAT(error_message([&] { Generator(f, {.max_ctx = 16, .sample_candidates = 4096}); }),
              HasSubstr("sample_candidates"));
  EXPECT_THAT(error_message([&] { Generator(f, {.max_ctx = 16, .sample_history = 0}); }), HasSubstr("sample_history"));
  // No sampling head: sampling brings the logits back (the same tokens).
  GenerateOptions o;
  o.max_new_tokens = 8;
  o.sampling = {.temperature = 1.0, .top_p = 0.9, .seed = 3};
  Generator none(f, {.max_ctx = 16, .sample_candidates = 0});
  Generator some(f, {.max_ctx = 16, .sample_candidates = 2});
  const std::vector<int32_t> p = {1, 5};
  EXPECT_EQ(none.generate(std::span<const int32_t>(p), o).tokens, some.generate(std::span<const int32_t>(p), o).tokens);
}

}  // namespace
}  // namespace rlx
