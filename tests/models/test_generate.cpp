// Generation with the KV cache (rlx/generate.h): a tiny random Llama with a SentencePiece
// tokenizer written here; every step's cached logits against the teacher-forced graph
// (build_llama_from_gguf) recomputed from scratch over the whole sequence, greedy generation
// (API and `rlx generate`) against the reference's argmax loop, compile counts, sampling.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support/llama_fixture.h"
#include "support/tiny_lm.h"
#include "backends/cpu/executor.h"
#include "models/llama_gguf.h"
#include "rlx/generate.h"
#include "rlx/serialize.h"
#include "support/devices.h"
#include "support/test_util.h"
#include "vulkan/vulkan_test_util.h"
#include "webgpu/webgpu_test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using rlx::testing::error_message;
using rlx::testing::randn;

using rlx::testing::TinyLm;
using rlx::testing::write_lm;
using rlx::testing::file_of;
using rlx::testing::argmax;
using rlx::testing::rel_diff;

// Feeds `prompt`, then `steps` greedy tokens, checking each step's cached logits against the
// recompute; returns the worst relative difference.
double check_sequence(Generator& gen, rlx::testing::LlamaReference& ref, std::vector<int32_t> seq, int steps) {
  double worst = 0;
  std::vector<float> got = gen.prefill(seq);
  for (int i = 0; i <= steps; ++i) {
    const std::vector<float> want = ref.last_logits(seq);
    const double r = rel_diff(got, want);
    worst = std::max(worst, r);
    EXPECT_EQ(gen.position(), static_cast<int64_t>(seq.size()));
    if (i == steps) break;
    const int32_t next = argmax(want);
    seq.push_back(next);
    got = gen.step(next);
  }
  return worst;
}

TEST(Generate, CachedDecodeMatchesRecomputeAndCompilesOnce) {
  const std::string bytes = write_lm(TinyLm{});
  const GgufFile f = file_of(bytes);
  rlx::testing::LlamaReference ref(f);
  Generator gen(f, {.max_ctx = 48, .prefill_chunk = 4});
  EXPECT_EQ(gen.max_ctx(), 48);
  EXPECT_EQ(gen.compile_count(), 0u);
  // 7 prompt tokens: chunks of 4, 2 and 1 (three compiled lengths), then decode steps of 1.
  const std::vector<int32_t> prompt = {1, 30, 7, 12, 33, 5, 18};
  EXPECT_LT(check_sequence(gen, ref, prompt, 1), 1e-4);
  const size_t after_one_step = gen.compile_count();
  EXPECT_EQ(after_one_step, 3u);
  EXPECT_LT(check_sequence(gen, ref, prompt, 24), 1e-4);
  EXPECT_EQ(gen.compile_count(), after_one_step) << "decode steps must not compile";
  // A new, shorter sequence on the same generator: rows left from the last one must not leak in.
  EXPECT_LT(check_sequence(gen, ref, {1, 31, 9}, 6), 1e-4);
  EXPECT_EQ(gen.compile_count(), after_one_step);
  // Appending several tokens at once after decode (a chunk of 2 after steps of 1).
  std::vector<int32_t> seq = {1, 4, 5, 6};
  gen.prefill(seq);
  seq.insert(seq.end(), {8, 9});
  EXPECT_LT(rel_diff(gen.append(std::vector<int32_t>{8, 9}), ref.last_logits(seq)), 1e-4);
}

// The caches stay with the compiled graph (bind_state) and each decode step writes its row in
// place: the bytes the CPU copies per step (the logits) do not depend on the cache size.
TEST(Generate, DecodeStepsCopyNoCache) {
  const std::string bytes = write_lm(TinyLm{});
  const GgufFile f = file_of(bytes);
  std::vector<uint64_t> per_step;
  for (int64_t ctx : {16, 128}) {
    Generator gen(f, {.max_ctx = ctx});
    gen.prefill(std::vector<int32_t>{1, 30, 7});  // chunks of 2 and 1
    gen.step(5);
    const uint64_t start = cpu::copied_bytes();
    for (int32_t i = 0; i < 4; ++i) gen.step(6 + i);
    per_step.push_back((cpu::copied_bytes() - start) / 4);
    EXPECT_EQ(per_step.back(), static_cast<uint64_t>(gen.vocab_size()) * 4) << "only the logits row is copied";
  }
  EXPECT_EQ(per_step[0], per_step[1]);
}

TEST(Generate, CachedDecodeMatchesRecomputeQuantized) {
  TinyLm m;
  m.proj = GgmlType::Q8_0;
  const std::string bytes = write_lm(m);
  const GgufFile f = file_of(bytes);
  rlx::testing::LlamaReference ref(f);
  Generator gen(f, {.max_ctx = 32});
  // At most 15 rows: the reference's projections take the same int8 path (M < 16) as decode.
  const double worst = check_sequence(gen, ref, {1, 30, 7, 12, 33}, 10);
  EXPECT_LT(worst, 1e-3);
}

// Block-quantized matrices dequantized at load (GgufLlamaOptions::block_weights = false, what
// the Generator builds for a backend without DequantMatMul kernels): MatMuls on params of the
// activations' dtype holding the blocks' values, no DequantMatMul; dequantized_at_load names
// those matrices and their bytes; the cached decode follows the teacher-forced graph built the
// same way, and the block graph within the 8-bit rounding of x its int8 products add.
// The options that dequantize block-quantized matrices at load.
models::GgufLlamaOptions dequantized_at_load_options() {
  models::GgufLlamaOptions lo;
  lo.block_weights = false;
  return lo;
}

TEST(Generate, BlockWeightsDequantizedAtLoad) {
  const TinyLm m{.proj = GgmlType::Q8_0};
  const GgufFile f = file_of(write_lm(m));
  const models::GgufLlamaOptions lo = dequantized_at_load_options();
  const models::GgufLlama dec = models::build_llama_decoder_from_gguf(f, 32, lo);
  for (const Node& n : dec.graph.nodes()) EXPECT_FALSE(std::holds_alternative<ops::DequantMatMul>(n.op));
  const models::DequantizedAtLoad d = models::dequantized_at_load(f, lo);
  EXPECT_EQ(d.names.size(), static_cast<size_t>(7 * m.layers + 1));  // q k v o gate up down a block, the output
  const int64_t e = m.hidden, kvd = m.kv_heads * (m.hidden / m.heads);
  EXPECT_EQ(d.param_bytes, 4 * (m.layers * (2 * e * e + 2 * kvd * e + 3 * e * m.ffn) + 40 * e));  // f32 params
  EXPECT_LT(d.stored_bytes, d.param_bytes / 3);  // 34 bytes a 32-value block
  EXPECT_TRUE(models::dequantized_at_load(f, {}).names.empty());
  // held_bytes: what the graph holds for a tensor under each option (bench_generate's DRAM bound).
  const GgufTensorInfo& q = f.tensor_info("blk.0.attn_q.weight");
  EXPECT_EQ(models::held_bytes(f, q, {}), static_cast<int64_t>(q.nbytes));
  EXPECT_EQ(models::held_bytes(f, q, lo), q.numel * 4);
  const GgufTensorInfo& norm = f.tensor_info("blk.0.attn_norm.weight");
  EXPECT_EQ(models::held_bytes(f, norm, lo), static_cast<int64_t>(norm.nbytes));
  const GgufFile h = file_of(write_lm(TinyLm{.proj = GgmlType::F16}));
  const GgufTensorInfo& hq = h.tensor_info("blk.0.attn_q.weight");
  models::GgufLlamaOptions widened;
  widened.half_weights = false;
  EXPECT_EQ(models::held_bytes(h, hq, {}), hq.numel * 2);      // F16 blocks of DequantMatMul
  EXPECT_EQ(models::held_bytes(h, hq, widened), hq.numel * 4); // f32 MatMul params
  widened.activations = DType::BF16;
  EXPECT_EQ(models::held_bytes(h, hq, widened), hq.numel * 2); // bf16 MatMul params
  // The CPU keeps the blocks (x rounded to 8 bits for its int8 products): near the dense model.
  rlx::testing::LlamaReference dense(f, lo);
  Generator gen(f, {.max_ctx = 32});
  EXPECT_LT(check_sequence(gen, dense, {1, 30, 7, 12, 33}, 6), 5e-2);
}

// WebGPU has no DequantMatMul kernels: the Generator dequantizes a Q8_0 model's matrices at load
// and decodes like the dense teacher-forced graph (f32 on both sides).
TEST(Generate, WebGpuRunsABlockQuantizedModelDequantized) {
  RLX_REQUIRE_WEBGPU();
  const GgufFile f = file_of(write_lm(TinyLm{.proj = GgmlType::Q8_0}));
  rlx::testing::LlamaReference dense(f, dequantized_at_load_options());
  Generator gen(f, {.device = Device::WebGpu, .max_ctx = 32});
  EXPECT_LT(check_sequence(gen, dense, {1, 30, 7, 12, 33}, 6), 1e-4);
}

// Vulkan decodes a bf16 model as the CPU does: with bf16 activations the q / k / v projection is
// one product whose slices the RoPEs read, and a block's q and k RoPEs and both cache writes run
// as one dispatch (knob vulkan_cache_write_fusion) that the attention reads after; the cached
// logits stay within bf16 rounding of the f32 recompute at every step, as on the CPU.
TEST(Generate, VulkanBf16DecodeFollowsTheF32Model) {
  RLX_REQUIRE_VULKAN();
  const GgufFile f = file_of(write_lm(TinyLm{.proj = GgmlType::BF16}));
  rlx::testing::LlamaReference ref(f);
  Generator gen(f, {.device = Device::Vulkan, .max_ctx = 32, .prefill_chunk = 4, .activations = DType::BF16});
  EXPECT_LT(check_sequence(gen, ref, {1, 30, 7, 12, 33}, 8), 5e-2);
}

// Qwen2 (q / k / v biases), Qwen3 (per-head q / k norms, NeoX rows as stored), Gemma (GeGLU,
// scaled embedding) and Gemma2 (post-norms, attention and final softcaps, a query scale) decode on
// every device this build has (skipped with the reason where there is none) as the CPU's teacher-forced
// recompute of the same file says, step by step.
TEST(Generate, QwenAndGemmaModelsDecodeOnEveryDevice) {
  for (const rlx::testing::TestDevice& d : rlx::testing::test_devices()) {
    if (const std::string why = d.unavailable ? d.unavailable() : ""; !why.empty()) {
      std::printf("[ SKIPPED  ] %s: %s\n", d.name.c_str(), why.c_str());
      continue;
    }
    for (const char* arch : {"qwen2", "qwen3", "gemma", "gemma2"}) {
      SCOPED_TRACE(d.name + " " + arch);
      const GgufFile f = file_of(write_lm(TinyLm{.arch = arch}));
      rlx::testing::LlamaReference ref(f);
      Generator gen(f, {.device = d.device, .max_ctx = 32, .prefill_chunk = 4});
      EXPECT_LT(check_sequence(gen, ref, {1, 30, 7, 12, 33}, 8), 1e-4);
    }
  }
}

// 16-bit activations (GeneratorOptions::activations): the decoder computes in bf16 / f16 with
// caches of that dtype and MatMuls on 16-bit params (no DequantMatMul for 16-bit weights), its
// logits (f32) within the 16-bit rounding of the f32 recompute's at every cached step, for
// F16 weights and for Q8_0 ones (a DequantMatMul of 16-bit x).
TEST(Generate, SixteenBitActivationsFollowTheF32Model) {
  for (GgmlType proj : {GgmlType::F16, GgmlType::Q8_0}) {
    TinyLm m;
    m.proj = proj;
    const std::string bytes = write_lm(m);
    const GgufFile f = file_of(bytes);
    rlx::testing::LlamaReference ref(f);
    for (DType act : {DType::BF16, DType::F16}) {
      SCOPED_TRACE(std::string(ggml_type_name(proj)) + " " + dtype_name(act));
      models::GgufLlamaOptions lo;
      lo.activations = act;
      const models::GgufLlama dec = models::build_llama_decoder_from_gguf(f, 32, lo);
      int dequant = 0, matmul = 0;
      for (const Node& n : dec.graph.nodes()) {
        dequant += std::holds_alternative<ops::DequantMatMul>(n.op);
        matmul += std::holds_alternative<ops::MatMul>(n.op);
        if (const auto* in = std::get_if<ops::Input>(&n.op); in && in->name.rfind("cache_", 0) == 0) {
          EXPECT_EQ(in->shape.dtype, act) << in->name;
        }
      }
      EXPECT_EQ(dequant, proj == GgmlType::Q8_0 ? 7 * m.layers + 1 : 0);
      EXPECT_EQ(matmul, proj == GgmlType::Q8_0 ? 0 : 7 * m.layers + 1);
      EXPECT_EQ(dec.graph.shape(dec.graph.outputs().at(0)).dtype, DType::F32);
      Generator gen(f, {.max_ctx = 32, .prefill_chunk = 4, .activations = act});
      // bf16 keeps 8 significant bits: a few roundings per block leave the logits within 5%
      // (measured 1.7%); f16 within 1% (0.16%). With Q8_0, x rounded to 16 bits moves some of
      // its 8-bit blocks (decode quantizes x) a step from the f32 reference's: 5% (2.3-3.0%).
      const double tol = act == DType::BF16 || proj == GgmlType::Q8_0 ? 5e-2 : 1e-2;
      EXPECT_LT(check_sequence(gen, ref, {1, 30, 7, 12, 33}, 8), tol);
    }
  }
  const std::string bytes = write_lm(TinyLm{});
  models::GgufLlamaOptions lo;
  lo.activations = DType::I32;
  EXPECT_THAT(error_message([&] { models::build_llama_decoder_from_gguf(file_of(bytes), 32, lo); }),
              HasSubstr("activations must be f32, f16 or bf16"));
}

// The reference's greedy loop: argmax of the recomputed logits, stopping after </s>.
std::vector<int32_t> reference_greedy(rlx::testing::LlamaReference& ref, std::vector<int32_t> seq, int n, int32_t eos = 2) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t t = argmax(ref.last_logits(seq));
    out.push_back(t);
    seq.push_back(t);
    if (t == eos) break;
  }
  return out;
}

TEST(Generate, GreedyGenerationMatchesTheReferenceAndCompilesDoNotGrow) {
  const std::string bytes = write_lm(TinyLm{});
  const GgufFile f = file_of(bytes);
  rlx::testing::LlamaReference ref(f);
  Generator gen(f, {.max_ctx = 64});
  const std::vector<int32_t> prompt = gen.tokenizer().encode("abc def");
  // "▁abc▁def": ▁a (score -1) and ▁d merge; the rest are characters.
  EXPECT_EQ(prompt, (std::vector<int32_t>{1, 30, 5, 6, 33, 8, 9}));
  GenerateOptions o;
  o.max_new_tokens = 5;
  o.stop_at_end_of_generation = true;
  GenerateResult short_run = gen.generate(std::span<const int32_t>(prompt), o);
  const size_t compiles = gen.compile_count();
  o.max_new_tokens = 40;
  std::string streamed;
  GenerateResult r = gen.generate(std::span<const int32_t>(prompt), o, [&](int32_t, const std::string& piece) {
    streamed += piece;
    return true;
  });
  EXPECT_EQ(gen.compile_count(), compiles) << "40 tokens compiled more than 5 did";
  const std::vector<int32_t> want = reference_greedy(ref, prompt, 40);
  EXPECT_EQ(r.tokens, want);  // picked on the device (GenerateOptions::pick_on_device)
  o.pick_on_device = false;
  EXPECT_EQ(gen.generate(std::span<const int32_t>(prompt), o).tokens, want) << "picked on the host";
  o.pick_on_device = true;
  EXPECT_EQ(std::vector<int32_t>(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(short_run.tokens.size())),
            short_run.tokens);
  EXPECT_EQ(r.stop_reason, want.back() == 2 ? "end of generation" : "length");
  EXPECT_EQ(r.decode_steps, static_cast<int64_t>(r.tokens.size()) - 1);  // no step after the last token
  std::string pieces;
  for (int32_t t : want) pieces += gen.tokenizer().piece(t);
  EXPECT_EQ(streamed, pieces);
  EXPECT_GT(r.prompt_tokens_per_second(), 0);
}

TEST(Generate, CliStreamsTheGreedyTokens) {
  const std::string bytes = write_lm(TinyLm{});
  const GgufFile f = file_of(bytes);
  rlx::testing::LlamaReference ref(f);
  const Tokenizer tok = Tokenizer::from_gguf(f);
  const std::vector<int32_t> want = reference_greedy(ref, tok.encode("abc def"), 12);
  std::string text;
  for (int32_t t : want) text += tok.piece(t);
  const auto dir = std::filesystem::temp_directory_path() / ("rlx_generate_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string model = (dir / "lm.gguf").string(), out = (dir / "out.txt").string(), err = (dir / "err.txt").string();
  {
    std::ofstream(model, std::ios::binary) << bytes;
  }
  const std::string cmd = std::string("'") + rlx::testing::cli_path() + "' generate '" + model +
                          "' --prompt 'abc def' -n 12 --no-echo --threads 1 >'" + out + "' 2>'" + err + "'";
  const int rc = std::system(cmd.c_str());
  auto slurp = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const std::string got = slurp(out), log = slurp(err);
  EXPECT_EQ(rc, 0) << log;
  EXPECT_EQ(got, text + "\n");
  EXPECT_THAT(log, HasSubstr("prompt: 7 tokens"));
  EXPECT_THAT(log, HasSubstr("tokens/s"));
  // Echo on (the default): the prompt comes first.
  const std::string cmd2 = std::string("'") + rlx::testing::cli_path() + "' generate '" + model + "' -p 'abc def' -n 3 --temp 0.8 --top-k 5 --top-p 0.9 --seed 3 >'" +
                           out + "' 2>'" + err + "'";
  EXPECT_EQ(std::system(cmd2.c_str()), 0) << slurp(err);
  EXPECT_EQ(slurp(out).rfind("abc def", 0), 0u);
  // --stop at the third greedy token: exactly three pieces come out.
  const std::string cmd3 = std::string("'") + rlx::testing::cli_path() + "' generate '" + model + "' -p 'abc def' -n 12 --no-echo --stop " +
                           std::to_string(want.at(2)) + " >'" + out + "' 2>'" + err + "'";
  EXPECT_EQ(std::system(cmd3.c_str()), 0) << slurp(err);
  size_t first_stop = 0;
  while (want[first_stop] != want.at(2)) ++first_stop;
  std::string until_stop;
  for (size_t i = 0; i <= first_stop; ++i) until_stop += tok.piece(want[i]);
  EXPECT_EQ(slurp(out), until_stop + "\n");
  EXPECT_THAT(slurp(err), HasSubstr("stop: stop token"));
  // Two prompts: decoded as a batch, each sequence printed with its stop reason; the first is
  // the greedy text above.
  const std::string two = std::string("'") + rlx::testing::cli_path() + "' generate '" + model +
                          "' -p 'abc def' -p 'ghi' -n 12 --no-echo --threads 1 >'" + out + "' 2>'" + err + "'";
  EXPECT_EQ(std::system(two.c_str()), 0) << slurp(err);
  const std::string reason = want.size() < 12 ? "end of generation" : "length";
  EXPECT_EQ(slurp(out).rfind("--- sequence 0 (" + reason + ") ---\n" + text + "\n--- sequence 1 (", 0), 0u) << slurp(out);
  EXPECT_THAT(slurp(err), HasSubstr("batch of 2"));
  const std::string bad = std::string("'") + rlx::testing::cli_path() + "' generate '" + model + "' -p 'abc' --top-p 1.5 >'" + out + "' 2>'" + err + "'";
  EXPECT_NE(std::system(bad.c_str()), 0);
  EXPECT_THAT(slurp(err), HasSubstr("top_p must be in (0, 1]"));
  EXPECT_EQ(slurp(out), "") << "sampling options are checked before the prompt is echoed";
  // A stop token the model cannot produce is a mistake in the call, not a silent no-op.
  const std::string bad_stop = std::string("'") + rlx::testing::cli_path() + "' generate '" + model +
                               "' -p 'abc' --stop 40 >'" + out + "' 2>'" + err + "'";
  EXPECT_NE(std::system(bad_stop.c_str()), 0);
  EXPECT_THAT(slurp(err), HasSubstr("--stop 40 is not a token id of this model (0..39)"));
  // bf16 activations run (their numbers: SixteenBitActivationsFollowTheF32Model); a dtype the
  // model does not compute in is refused.
  const std::string act = std::string("'") + rlx::testing::cli_path() + "' generate '" + model +
                          "' --prompt 'abc def' -n 12 --no-echo --threads 1 --activations bf16 >'" + out + "' 2>'" + err + "'";
  EXPECT_EQ(std::system(act.c_str()), 0) << slurp(err);
  EXPECT_FALSE(slurp(out).empty());
  EXPECT_THAT(slurp(err), HasSubstr("tokens/s"));
  EXPECT_THAT(slurp(err), HasSubstr("the CPU backend runs slower than f32"));  // said, not hidden
  const std::string bad_act = std::string("'") + rlx::testing::cli_path() + "' generate '" + model +
                              "' -p 'abc' --activations i8 >'" + out + "' 2>'" + err + "'";
  EXPECT_NE(std::system(bad_act.c_str()), 0);
  EXPECT_THAT(slurp(err), HasSubstr("--activations takes f32, f16 or bf16"));
  std::filesystem::remove_all(dir);
}

// The same through a Llama 3 style BPE tokenizer: the prompt split and merged ("abc", " def" ->
// a b c Ġd e f), generated pieces with Ġ mapped back to spaces.
TEST(Generate, BpeTokenizerEndToEnd) {
  TinyLm m;
  m.bpe = true;
  const std::string bytes = write_lm(m);
  const GgufFile f = file_of(bytes);
  rlx::testing::LlamaReference ref(f);
  Generator gen(f, {.max_ctx = 64});
  const Tokenizer& tok = gen.tokenizer();
  EXPECT_EQ(tok.model(), TokenizerModel::Bpe);
  const std::vector<int32_t> prompt = tok.encode("abc def");
  EXPECT_EQ(prompt, (std::vector<int32_t>{0, 4, 5, 6, 33, 8, 9}));
  EXPECT_EQ(tok.decode(prompt), "abc def");
  GenerateOptions o;
  o.max_new_tokens = 16;
  std::string streamed;
  const GenerateResult r = gen.generate("abc def", o, [&](int32_t, const std::string& piece) {
    streamed += piece;
    return true;
  });
  const std::vector<int32_t> want = reference_greedy(ref, prompt, 16, 1);
  EXPECT_EQ(r.tokens, want);
  std::string text;
  for (int32_t t : want) text += tok.piece(t);
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(tok.decode(r.tokens), text);
}

TEST(Generate, ContextLimitAndBadInput) {
  const std::string bytes = write_lm(TinyLm{});
  const GgufFile f = file_of(bytes);
  Generator gen(f, {.max_ctx = 8});
  GenerateOptions o;
  o.max_new_tokens = 10;
  o.stop_at_end_of_generation = false;
  const std::vector<int32_t> prompt = {1, 4, 5, 6, 7};
  const GenerateResult r = gen.generate(std::span<const int32_t>(prompt), o);
  EXPECT_EQ(r.stop_reason, "context full");
  EXPECT_EQ(r.tokens.size(), 4u);  // positions 5, 6, 7 fed back, the 4th token has no room
  EXPECT_THAT(error_message([&] { gen.prefill(std::vector<int32_t>(9, 4)); }), HasSubstr("exceed the cache of 8 rows"));
  EXPECT_THAT(error_message([&] { gen.prefill(std::vector<int32_t>{1, 40}); }), HasSubstr("token id 40 is out of range"));
  EXPECT_THAT(error_message([&] { gen.prefill(std::vector<int32_t>{}); }), HasSubstr("at least one token"));
  Generator fresh(f, {.max_ctx = 8});
  EXPECT_THAT(error_message([&] { fresh.step(3); }), HasSubstr("before prefill"));
  EXPECT_THAT(error_message([&] { Generator(f, {.max_ctx = 500}); }), HasSubstr("exceeds the model's context_length 128"));
  EXPECT_THAT(error_message([&] { Generator(f, {.prefill_chunk = 6}); }), HasSubstr("power of two"));
  TinyLm mismatched;
  mismatched.extra_tokens = 3;
  const std::string mb = write_lm(mismatched);
  EXPECT_THAT(error_message([&] { Generator(file_of(mb)); }), HasSubstr("the tokenizer has 43 tokens but token_embd.weight only 40 rows"));
  // The decoder graph: every op is one the CPU runs; its inputs are the ones documented.
  const models::GgufLlama dec = models::build_llama_decoder_from_gguf(f, 16);
  EXPECT_EQ(dec.graph.outputs().size(), 1u + 2 * 2 + 2);
  EXPECT_EQ(dec.graph.output_names()[3], "cache_k.1");
  EXPECT_EQ(dec.graph.output_names()[5], "greedy_token");
  EXPECT_EQ(dec.graph.output_names()[6], "logits_sum");
  models::GgufLlamaOptions lo;
  lo.sample_candidates = 8;
  const models::GgufLlama head = models::build_llama_decoder_from_gguf(f, 16, lo);
  EXPECT_EQ(head.graph.outputs().size(), 1u + 2 * 2 + 2 + 3);
  EXPECT_EQ(head.graph.output_names()[7], "sample_logits");
  EXPECT_EQ(head.graph.output_names()[9], "sample_mass");
  lo.sample_candidates = -1;
  EXPECT_THAT(error_message([&] { models::build_llama_decoder_from_gguf(f, 16, lo); }), HasSubstr("sample_candidates must be >= 0"));
  lo.sample_candidates = 4;
  lo.sample_history = 0;
  EXPECT_THAT(error_message([&] { models::build_llama_decoder_from_gguf(f, 16, lo); }), HasSubstr("sample_history must be >= 1"));
}

// ---- sampling ----
TEST(Sampler, GreedyTopKTopPAndPenalty) {
  const std::vector<float> l = {0.5f, 2.0f, 2.0f, -1.0f};
  EXPECT_EQ(Sampler({}).sample(l, {}), 1);  // the first of tied maxima
  // Penalty 4 on token 1: 2.0 / 4 = 0.5, so token 2 wins.
  EXPECT_EQ(Sampler({.repetition_penalty = 4.0}).sample(l, std::vector<int32_t>{1}), 2);
  // A negative logit is multiplied: -1 * 4 stays the smallest.
  EXPECT_EQ(Sampler({.repetition_penalty = 4.0}).sample(std::vector<float>{-1.0f, -0.5f}, std::vector<int32_t>{1}), 0);
  // Beyond repeat_last_n the penalty does not apply.
  EXPECT_EQ(Sampler({.repetition_penalty = 4.0, .repeat_last_n = 1}).sample(l, std::vector<int32_t>{1, 3}), 1);
  // top_k 1 and a tiny top_p are greedy at any temperature.
  Sampler k1({.temperature = 5.0, .top_k = 1, .seed = 9});
  Sampler p0({.temperature = 5.0, .top_p = 1e-6, .seed = 9});
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(k1.sample(l, {}), 1);
    EXPECT_EQ(p0.sample(l, {}), 1);
  }
  // top_k 2 never picks tokens 0 or 3.
  Sampler k2({.temperature = 1.0, .top_k = 2, .seed = 1});
  for (int i = 0; i < 200; ++i) {
    const int32_t t = k2.sample(l, {});
    EXPECT_TRUE(t == 1 || t == 2) << t;
  }
}

TEST(Sampler, SeededDistribution) {
  // p(1) = 3 / 4 at temperature 1; at temperature 0.5 the odds square: 9 / 10.
  const std::vector<float> l = {0.0f, static_cast<float>(std::log(3.0))};
  auto freq = [&](double temp, uint64_t seed) {
    Sampler s({.temperature = temp, .seed = seed});
    int ones = 0;
    for (int i = 0; i < 8000; ++i) ones += s.sample(l, {}) == 1;
    return ones / 8000.0;
  };
  EXPECT_NEAR(freq(1.0, 5), 0.75, 0.02);
  EXPECT_NEAR(freq(0.5, 5), 0.9, 0.015);
  // top_p 0.7 keeps only token 1 (0.75 >= 0.7).
  Sampler tp({.temperature = 1.0, .top_p = 0.7, .seed = 2});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(tp.sample(l, {}), 1);
  // Same seed, same draws; another seed, other draws.
  std::vector<int32_t> a, b, c;
  Sampler sa({.temperature = 1.0, .seed = 42}), sb({.temperature = 1.0, .seed = 42}), sc({.temperature = 1.0, .seed = 43});
  const std::vector<float> flat(16, 0.0f);
  for (int i = 0; i < 64; ++i) {
    a.push_back(sa.sample(flat, {}));
    b.push_back(sb.sample(flat, {}));
    c.push_back(sc.sample(flat, {}));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_THAT(error_message([] { Sampler({.top_k = -1}); }), HasSubstr("top_k"));
  EXPECT_THAT(error_message([] { Sampler({.repetition_penalty = 0}); }), HasSubstr("repetition_penalty"));
  EXPECT_THAT(error_message([] { Sampler({.temperature = NAN}); }), HasSubstr("temperature"));
}

}  // namespace
}  // namespace rlx

namespace rlx {
namespace {

// The decoder graph (F32 weights) uses only ops the GPU backends claim: `rlx check` reports every
// node runnable on CUDA, Vulkan and WebGPU (a static check; no GPU needed). With Q8_0 weights the
// DequantMatMul nodes run on CUDA and Vulkan and are reported unsupported on WebGPU.
TEST(Generate, DecoderGraphLegalizesForTheGpuBackends) {
  const auto dir = std::filesystem::temp_directory_path() / ("rlx_generate_check_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto check = [&](GgmlType proj, const std::string& device, bool half_weights = true, bool block_weights = true,
                   int64_t candidates = 0) {
    TinyLm m;
    m.proj = proj;
    const std::string bytes = write_lm(m);
    const GgufFile f = file_of(bytes);
    models::GgufLlamaOptions lo;
    lo.half_weights = half_weights;
    lo.block_weights = block_weights;
    lo.sample_candidates = candidates;
    const models::GgufLlama dec = models::build_llama_decoder_from_gguf(f, 32, lo);
    const std::string path = (dir / "dec.json").string(), out = (dir / "out.txt").string();
    save_graph_json(dec.graph, path);
    const std::string cmd = std::string("'") + rlx::testing::cli_path() + "' check '" + path + "' --device " + device +
                            " --dim seq=1 --dim rows=1 >'" + out + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream in(out);
    std::stringstream ss;
    ss << in.rdbuf();
    return std::make_pair(rc, ss.str());
  };
  for (const std::string device : {"cuda", "vulkan", "webgpu"}) {
    SCOPED_TRACE(device);
    const auto [rc, text] = check(GgmlType::F32, device);
    EXPECT_EQ(rc, 0) << text;
    // With the sampling head (penalty scatter, top 16 candidates, the vocabulary's mass).
    const auto [rc_s, text_s] = check(GgmlType::F32, device, true, true, 16);
    EXPECT_EQ(rc_s, 0) << text_s;
    // Quantized weights: CUDA and Vulkan have DequantMatMul kernels; WebGPU names the op.
    const auto [rc_q, text_q] = check(GgmlType::Q8_0, device);
    if (device != "webgpu") {
      EXPECT_EQ(rc_q, 0) << text_q;
    } else {
      EXPECT_NE(rc_q, 0) << text_q;
      EXPECT_THAT(text_q, HasSubstr("dequant_matmul")) << text_q;
    }
    // As the Generator builds it for the device: dequantized at load where no kernel takes the blocks.
    const Device d = device == "cuda" ? Device::Cuda : device == "vulkan" ? Device::Vulkan : Device::WebGpu;
    EXPECT_EQ(models::block_weights_run_on(d), device != "webgpu");
    const auto [rc_d, text_d] = check(GgmlType::Q8_0, device, true, models::block_weights_run_on(d));
    EXPECT_EQ(rc_d, 0) << text_d;
    // F16 weights as the Generator builds them for the device (2-byte DequantMatMul where the
    // backend runs it, else f32 MatMuls) compile everywhere; the 2-byte form only where claimed.
    const Device dev = device == "cuda" ? Device::Cuda : device == "vulkan" ? Device::Vulkan : Device::WebGpu;
    const auto [rc_h, text_h] = check(GgmlType::F16, device, models::half_weights_run_on(dev));
    EXPECT_EQ(rc_h, 0) << text_h;
    if (!models::half_weights_run_on(dev)) {
      const auto [rc_h2, text_h2] = check(GgmlType::F16, device, true);
      EXPECT_NE(rc_h2, 0) << text_h2;
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rlx
