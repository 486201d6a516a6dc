// A batch of sequences in one Generator (GeneratorOptions::batch): prompts of different lengths
// prefilled together, decoded together with sequences skipped or finished on their own, each
// sequence's logits at every step against the CPU's teacher-forced recompute of that sequence
// alone; generate_batch against generate() one prompt at a time; the batch API's bad input.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "rlx/generate.h"
#include "support/devices.h"
#include "support/llama_fixture.h"
#include "support/test_util.h"
#include "support/tiny_lm.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using rlx::testing::argmax;
using rlx::testing::error_message;
using rlx::testing::file_of;
using rlx::testing::rel_diff;
using rlx::testing::TinyLm;
using rlx::testing::write_lm;

// Prefills `prompts` together, then `steps` greedy steps of every sequence (sequence `skip`
// sits out steps 2 and 3), each step's logits of each sequence against the recompute of that
// sequence alone; returns the worst relative difference.
double check_batch(Generator& gen, rlx::testing::LlamaReference& ref, std::vector<std::vector<int32_t>> seqs, int steps,
                   size_t skip) {
  double worst = 0;
  std::vector<std::vector<float>> got = gen.prefill_batch(seqs);
  EXPECT_EQ(got.size(), seqs.size());
  std::vector<bool> fed(seqs.size(), true);
  for (int i = 0; i <= steps; ++i) {
    std::vector<int32_t> next(seqs.size(), -1);
    for (size_t b = 0; b < seqs.size(); ++b) {
      SCOPED_TRACE("step " + std::to_string(i) + ", sequence " + std::to_string(b));
      EXPECT_EQ(gen.position(b), static_cast<int64_t>(seqs[b].size()));
      const std::vector<float> want = ref.last_logits(seqs[b]);
      if (fed[b]) worst = std::max(worst, rel_diff(got.at(b), want));
      else EXPECT_TRUE(got.at(b).empty()) << "a skipped sequence returns no logits";
      if (b == skip && (i == 2 || i == 3)) continue;
      next[b] = argmax(want);
    }
    if (i == steps) break;
    for (size_t b = 0; b < seqs.size(); ++b) {
      fed[b] = next[b] >= 0;
      if (fed[b]) seqs[b].push_back(next[b]);
    }
    got = gen.step_batch(next);
  }
  return worst;
}

TEST(GenerateBatch, EverySequenceMatchesItsOwnRecompute) {
  const GgufFile f = file_of(write_lm(TinyLm{}));
  rlx::testing::LlamaReference ref(f);
  Generator gen(f, {.max_ctx = 40, .prefill_chunk = 4, .batch = 3});
  EXPECT_EQ(gen.batch(), 3);
  // Prompts of 7, 3 and 1 tokens: chunks of 4, 2 and 1 with the shorter prompts padding the front.
  EXPECT_LT(check_batch(gen, ref, {{1, 30, 7, 12, 33, 5, 18}, {1, 31, 9}, {1}}, 12, 1), 1e-4);
  const size_t compiles = gen.compile_count();
  EXPECT_EQ(compiles, 3u) << "chunks of 4, 2 and 1 rows";
  // A new batch on the same generator, fewer prompts than sequences (the third slot idles), the
  // longest prompt second: rows of the last batch must not leak in.
  EXPECT_LT(check_batch(gen, ref, {{1, 4, 5}, {1, 8, 9, 10, 11, 12, 13, 14, 15}}, 6, 0), 1e-4);
  EXPECT_EQ(gen.compile_count(), compiles) << "chunks of 4 and 1 rows again: nothing new to compile";
}

// The same on every device this build has (skipped with the reason where there is none): the
// (B, S) positions reach each backend's cache writes, RoPE tables and attention masks.
TEST(GenerateBatch, EveryDeviceDecodesABatch) {
  for (const rlx::testing::TestDevice& d : rlx::testing::test_devices()) {
    if (const std::string why = d.unavailable ? d.unavailable() : ""; !why.empty()) {
      std::printf("[ SKIPPED  ] %s: %s\n", d.name.c_str(), why.c_str());
      continue;
    }
    for (const char* arch : {"llama", "qwen2"}) {
      SCOPED_TRACE(d.name + " " + arch);
      const GgufFile f = file_of(write_lm(TinyLm{.arch = arch}));
      rlx::testing::LlamaReference ref(f);
      Generator gen(f, {.device = d.device, .max_ctx = 32, .prefill_chunk = 4, .batch = 2});
      EXPECT_LT(check_batch(gen, ref, {{1, 30, 7, 12, 33}, {1, 6}}, 6, 0), 1e-4);
    }
  }
}

// generate_batch decodes each prompt as generate() does alone (greedy: the same tokens and stop
// reasons), sequences finishing at different steps: one at </s> or a stop token, one when its
// cache is full while the others go on.
TEST(GenerateBatch, GenerateBatchEqualsGenerateOneAtATime) {
  const GgufFile f = file_of(write_lm(TinyLm{}));
  const std::vector<std::vector<int32_t>> prompts = {{1, 30, 5, 6, 33, 8, 9}, {1, 31}, {1, 4, 5, 6, 7, 8, 9, 10, 11, 12}};
  GenerateOptions o;
  o.max_new_tokens = 9;
  o.pick_on_device = false;  // the single runs pick on the host, the batch on the device
  Generator one(f, {.max_ctx = 14});
  std::vector<GenerateResult> want;
  for (const auto& p : prompts) want.push_back(one.generate(std::span<const int32_t>(p), o));
  // A token sequence 1 generates (not its first) stops it early in both runs.
  o.stop_tokens = {want[1].tokens.at(3)};
  want.clear();
  for (const auto& p : prompts) want.push_back(one.generate(std::span<const int32_t>(p), o));
  EXPECT_EQ(want[2].stop_reason, "context full");  // 10 prompt tokens + 4 in a cache of 14
  EXPECT_EQ(want[1].stop_reason, "stop token");
  Generator gen(f, {.max_ctx = 14, .batch = 3});
  o.pick_on_device = true;
  std::vector<std::vector<int32_t>> streamed(prompts.size());
  const std::vector<GenerateResult> got = gen.generate_batch(prompts, o, [&](size_t b, int32_t id, const std::string&) {
    streamed.at(b).push_back(id);
    return true;
  });
  ASSERT_EQ(got.size(), prompts.size());
  for (size_t b = 0; b < prompts.size(); ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    EXPECT_EQ(got[b].tokens, want[b].tokens);
    EXPECT_EQ(got[b].stop_reason, want[b].stop_reason);
    EXPECT_EQ(got[b].prompt, prompts[b]);
    EXPECT_EQ(streamed[b], got[b].tokens);
    EXPECT_EQ(got[b].decode_steps, static_cast<int64_t>(got[b].tokens.size()) - 1);
  }
  // The callback stops one sequence; the others finish.
  const std::vector<GenerateResult> cut = gen.generate_batch(prompts, o, [](size_t b, int32_t, const std::string&) {
    return b != 0;
  });
  EXPECT_EQ(cut[0].tokens.size(), 1u);
  EXPECT_EQ(cut[0].stop_reason, "callback");
  EXPECT_EQ(cut[2].tokens, want[2].tokens);
  // Text prompts through the tokenizer, and seeds per sequence: sequence 0 draws as generate().
  GenerateOptions s;
  s.max_new_tokens = 6;
  s.sampling.temperature = 0.9;
  s.sampling.seed = 5;
  Generator single(f, {.max_ctx = 32});
  Generator pair(f, {.max_ctx = 32, .batch = 2});
  const std::vector<std::string> text = {"abc def", "ghi"};
  const std::vector<GenerateResult> sampled = pair.generate_batch(text, s);
  EXPECT_EQ(sampled[0].tokens, single.generate(text[0], s).tokens);
  s.sampling.seed = 6;
  EXPECT_EQ(sampled[1].tokens, single.generate(text[1], s).tokens);
}

// Greedy on the device refuses NaN logits as the host's sampler does (from the rows' sums): a
// model whose weights hold a NaN is an error, not a token.
TEST(GenerateBatch, GreedyOnTheDeviceRefusesNanLogits) {
  std::string bytes = write_lm(TinyLm{});
  GgufFile clean = file_of(bytes);
  const GgufTensorInfo& t = clean.tensor_info("output_norm.weight");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bytes.data() + clean.data_offset() + t.offset, &nan, sizeof nan);
  const GgufFile f = file_of(bytes);
  for (bool device : {true, false}) {
    GenerateOptions o;
    o.max_new_tokens = 3;
    o.pick_on_device = device;
    Generator gen(f, {.max_ctx = 16});
    EXPECT_THAT(error_message([&] { gen.generate(std::vector<int32_t>{1, 5, 6}, o); }), HasSubstr("logits contain NaN"))
        << (device ? "device" : "host");
    Generator pair(f, {.max_ctx = 16, .batch = 2});
    const std::vector<std::vector<int32_t>> two = {{1, 5}, {1}};
    EXPECT_THAT(error_message([&] { pair.generate_batch(two, o); }), HasSubstr("logits contain NaN"));
  }
}

TEST(GenerateBatch, BadInput) {
  const GgufFile f = file_of(write_lm(TinyLm{}));
  EXPECT_THAT(error_message([&] { Generator(f, {.max_ctx = 16, .batch = 0}); }), HasSubstr("batch must be in [1, 1048576]"));
  EXPECT_THAT(error_message([&] { Generator(f, {.max_ctx = 16, .batch = int64_t{1} << 40}); }), HasSubstr("batch must be"));
  Generator gen(f, {.max_ctx = 16, .batch = 2});
  const std::vector<int32_t> one = {1, 5};
  EXPECT_THAT(error_message([&] { gen.prefill(one); }), HasSubstr("batches of 2"));
  EXPECT_THAT(error_message([&] { gen.generate(std::span<const int32_t>(one), GenerateOptions{}); }),
              HasSubstr("generate_batch"));
  EXPECT_THAT(error_message([&] { gen.step_batch(std::vector<int32_t>{3, 4}); }), HasSubstr("before prefill_batch"));
  const std::vector<std::vector<int32_t>> three = {{1}, {1}, {1}};
  EXPECT_THAT(error_message([&] { gen.prefill_batch(three); }), HasSubstr("1 to 2 prompts"));
  const std::vector<std::vector<int32_t>> empty_one = {{1, 2}, {}};
  EXPECT_THAT(error_message([&] { gen.prefill_batch(empty_one); }), HasSubstr("prompt 1 has no tokens"));
  const std::vector<std::vector<int32_t>> bad_id = {{1, 2}, {1, 400}};
  EXPECT_THAT(error_message([&] { gen.prefill_batch(bad_id); }), HasSubstr("sequence 1"));
  const std::vector<std::vector<int32_t>> too_long = {{1}, std::vector<int32_t>(17, 5)};
  EXPECT_THAT(error_message([&] { gen.prefill_batch(too_long); }), HasSubstr("sequence 1: 0 cached + 17 new tokens"));
  const std::vector<std::vector<int32_t>> ok = {{1, 2, 3}, {1}};
  gen.prefill_batch(ok);
  EXPECT_THAT(error_message([&] { gen.step_batch(std::vector<int32_t>{3}); }), HasSubstr("one id per sequence"));
  EXPECT_THAT(error_message([&] { (void)gen.position(2); }), HasSubstr("outside the batch of 2"));
  // Nothing was lost: the sequences still step and return logits of the vocabulary's size.
  const auto next = gen.step_batch(std::vector<int32_t>{4, 5});
  EXPECT_EQ(next.at(0).size(), static_cast<size_t>(gen.vocab_size()));
  EXPECT_EQ(gen.position(0), 4);
  EXPECT_EQ(gen.position(1), 2);
}

}  // namespace
}  // namespace rlx
