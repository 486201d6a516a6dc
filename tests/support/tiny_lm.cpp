// The tiny Llama-family model of the generation tests (tiny_lm.h).
#include "support/tiny_lm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "support/llama_fixture.h"
#include "support/test_util.h"

namespace rlx::testing {

// <unk> <s> </s> ▁ a..z ▁a..▁j: 40 tokens.
namespace {

std::vector<std::string> vocab_tokens() {
  std::vector<std::string> t = {"<unk>", "<s>", "</s>", "\xE2\x96\x81"};
  for (char c = 'a'; c <= 'z'; ++c) t.push_back(std::string(1, c));
  for (char c = 'a'; c <= 'j'; ++c) t.push_back("\xE2\x96\x81" + std::string(1, c));
  return t;
}

}  // namespace

std::string write_lm(const TinyLm& m) {
  std::vector<std::string> tokens = vocab_tokens();
  const auto vocab = static_cast<int64_t>(tokens.size());
  for (int64_t i = 0; i < m.extra_tokens; ++i) tokens.push_back("x" + std::to_string(i));
  GgufWriter w;
  const std::string a =
      rlx::testing::add_llama_metadata(w, {m.arch, m.layers, 128, m.hidden, m.ffn, m.heads, m.kv_heads, 1000.0f});
  if (m.arch == "qwen3") w.add(a + "attention.key_length", GgufValue::u32(static_cast<uint32_t>(m.head_dim())));
  if (m.arch == "gemma2") {  // softcaps that bend this model's scores and logits, and a query scale
    w.add(a + "attn_logit_softcapping", GgufValue::f32(3.0f));
    w.add(a + "final_logit_softcapping", GgufValue::f32(4.0f));
    w.add(a + "attention.scale", GgufValue::f32(0.2f));
  }
  if (m.bpe) {
    // <|begin_of_text|> <|eot_id|> ! Ġ a..z Ġa..Ġj (40 tokens), merges "Ġ a" .. "Ġ j".
    const std::string g = "\xC4\xA0";
    std::vector<std::string> bt = {"<|begin_of_text|>", "<|eot_id|>", "!", g};
    std::vector<std::string> merges;
    for (char c = 'a'; c <= 'z'; ++c) bt.push_back(std::string(1, c));
    for (char c = 'a'; c <= 'j'; ++c) {
      bt.push_back(g + std::string(1, c));
      merges.push_back(g + " " + std::string(1, c));
    }
    for (int64_t i = 0; i < m.extra_tokens; ++i) bt.push_back("x" + std::to_string(i));
    std::vector<int64_t> types(bt.size(), 1);
    types[0] = types[1] = 3;
    w.add("tokenizer.ggml.model", GgufValue::string("gpt2"));
    w.add("tokenizer.ggml.pre", GgufValue::string("llama-bpe"));
    w.add("tokenizer.ggml.tokens", GgufValue::strings(bt));
    w.add("tokenizer.ggml.token_type", GgufValue::array_of_i64(GgufValueType::I32, types));
    w.add("tokenizer.ggml.merges", GgufValue::strings(merges));
    w.add("tokenizer.ggml.bos_token_id", GgufValue::u32(0));
    w.add("tokenizer.ggml.eos_token_id", GgufValue::u32(1));
    w.add("tokenizer.ggml.add_bos_token", GgufValue::boolean(true));
  } else {
    w.add("tokenizer.ggml.model", GgufValue::string("llama"));
    w.add("tokenizer.ggml.tokens", GgufValue::strings(tokens));
    std::vector<double> scores;
    std::vector<int64_t> types;
    for (size_t i = 0; i < tokens.size(); ++i) {
      scores.push_back(i >= 30 ? -1.0 : -10.0);
      types.push_back(i == 0 ? 2 : i < 3 ? 3 : 1);
    }
    w.add("tokenizer.ggml.scores", GgufValue::array_of(GgufValueType::F32, scores));
    w.add("tokenizer.ggml.token_type", GgufValue::array_of_i64(GgufValueType::I32, types));
    w.add("tokenizer.ggml.bos_token_id", GgufValue::u32(1));
    w.add("tokenizer.ggml.eos_token_id", GgufValue::u32(2));
    w.add("tokenizer.ggml.unknown_token_id", GgufValue::u32(0));
  }
  const int64_t e = m.hidden, d = m.head_dim();
  const float s = 1.0f / std::sqrt(static_cast<float>(e));
  uint64_t seed = 11;
  auto add = [&](const std::string& name, const Tensor& t, GgmlType type) {
    if (type == GgmlType::F32) w.add_tensor(name, t);
    else w.add_tensor(name, t, type);
  };
  add("token_embd.weight", randn({vocab, e}, seed++, 1.0f), GgmlType::F32);
  for (int64_t i = 0; i < m.layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    add(p + "attn_norm.weight", randn({e}, seed++, 0.1f, 1.0f), GgmlType::F32);
    add(p + "attn_q.weight", randn({m.heads * d, e}, seed++, 2 * s), m.proj);
    add(p + "attn_k.weight", randn({m.kv_heads * d, e}, seed++, 2 * s), m.proj);
    add(p + "attn_v.weight", randn({m.kv_heads * d, e}, seed++, s), m.proj);
    add(p + "attn_output.weight", randn({e, m.heads * d}, seed++, s), m.proj);
    if (m.arch == "qwen2") {
      add(p + "attn_q.bias", randn({m.heads * d}, seed++, 0.5f), GgmlType::F32);
      add(p + "attn_k.bias", randn({m.kv_heads * d}, seed++, 0.5f), GgmlType::F32);
      add(p + "attn_v.bias", randn({m.kv_heads * d}, seed++, 0.5f), GgmlType::F32);
    }
    if (m.arch == "qwen3") {
      add(p + "attn_q_norm.weight", randn({d}, seed++, 0.2f, 1.0f), GgmlType::F32);
      add(p + "attn_k_norm.weight", randn({d}, seed++, 0.2f, 1.0f), GgmlType::F32);
    }
    add(p + "ffn_norm.weight", randn({e}, seed++, 0.1f, 1.0f), GgmlType::F32);
    if (m.arch == "gemma2") {
      add(p + "post_attention_norm.weight", randn({e}, seed++, 0.1f, 1.0f), GgmlType::F32);
      add(p + "post_ffw_norm.weight", randn({e}, seed++, 0.1f, 1.0f), GgmlType::F32);
    }
    add(p + "ffn_gate.weight", randn({m.ffn, e}, seed++, s), m.proj);
    add(p + "ffn_up.weight", randn({m.ffn, e}, seed++, s), m.proj);
    add(p + "ffn_down.weight", randn({e, m.ffn}, seed++, 1.0f / std::sqrt(static_cast<float>(m.ffn))), m.proj);
  }
  add("output_norm.weight", randn({e}, seed++, 0.1f, 1.0f), GgmlType::F32);
  if (m.arch != "gemma" && m.arch != "gemma2") add("output.weight", randn({vocab, e}, seed++, 3 * s), m.proj);
  return w.bytes();
}

GgufFile file_of(const std::string& bytes) { return GgufFile::from_bytes(bytes.data(), bytes.size(), "lm.gguf"); }

int32_t argmax(const std::vector<float>& l) { return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin()); }

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return num / den;
}

}  // namespace rlx::testing
