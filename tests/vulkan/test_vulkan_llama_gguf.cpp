// A GGUF Llama on Vulkan: a small random Llama (2 blocks, hidden 256, GQA 4 / 2 heads) with its
// projections in Q4_0, Q8_0 or Q4_K, run by rlx::Generator on Vulkan (KV cache) from a 20-token
// prompt (prefill chunks of 16 rows: the tiled kernel, then 4: the GEMV) for 20 greedy steps (one
// row: the GEMV), against the CPU running the teacher-forced graph of the same model with the
// projections dequantized to F32 (the file rewritten) over the whole sequence at every step: the
// same token at every step and logits within 1e-4 of the largest. (The CPU's own DequantMatMul
// quantizes x to 8 bits on its Int8 paths: its logits drift by up to 5% of the largest on this
// random model and flip near-tied tokens, so it is no oracle.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "support/llama_fixture.h"
#include "models/llama_gguf.h"
#include "rlx/generate.h"
#include "rlx/gguf.h"
#include "rlx/rlx.h"
#include "vulkan/vulkan_test_util.h"

namespace {

using namespace rlx;
using rlx::testing::randn;

constexpr int64_t kVocab = 48, kHidden = 256, kHeads = 4, kKvHeads = 2, kFfn = 512, kLayers = 2;

// The model's file bytes; projections (and the output head) of type `proj`, the rest f32. With
// `dequantized`, the projections are that file's, dequantized and stored as F32 (the same model
// with the quantized weights' exact values: its CPU graph multiplies them in f32).
std::string write_llama(GgmlType proj, const GgufFile* dequantized = nullptr) {
  GgufWriter w;
  w.add("general.architecture", GgufValue::string("llama"));
  w.add("llama.block_count", GgufValue::u32(kLayers));
  w.add("llama.context_length", GgufValue::u32(128));
  w.add("llama.embedding_length", GgufValue::u32(kHidden));
  w.add("llama.feed_forward_length", GgufValue::u32(kFfn));
  w.add("llama.attention.head_count", GgufValue::u32(kHeads));
  w.add("llama.attention.head_count_kv", GgufValue::u32(kKvHeads));
  w.add("llama.rope.freq_base", GgufValue::f32(10000.0f));
  const int64_t e = kHidden, d = kHidden / kHeads;
  const float s = 1.0f / std::sqrt(static_cast<float>(e));
  uint64_t seed = 5;
  auto add = [&](const std::string& name, const Tensor& t, GgmlType type) {
    if (dequantized) w.add_tensor(name, dequantized->tensor_f32(name));
    else w.add_tensor(name, t, type);
  };
  w.add_tensor("token_embd.weight", randn({kVocab, e}, seed++, 1.0f));
  for (int64_t i = 0; i < kLayers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    w.add_tensor(p + "attn_norm.weight", randn({e}, seed++, 0.1f, 1.0f));
    add(p + "attn_q.weight", randn({kHeads * d, e}, seed++, 2 * s), proj);
    add(p + "attn_k.weight", randn({kKvHeads * d, e}, seed++, 2 * s), proj);
    add(p + "attn_v.weight", randn({kKvHeads * d, e}, seed++, s), proj);
    add(p + "attn_output.weight", randn({e, kHeads * d}, seed++, s), proj);
    w.add_tensor(p + "ffn_norm.weight", randn({e}, seed++, 0.1f, 1.0f));
    add(p + "ffn_gate.weight", randn({kFfn, e}, seed++, s), proj);
    add(p + "ffn_up.weight", randn({kFfn, e}, seed++, s), proj);
    add(p + "ffn_down.weight", randn({e, kFfn}, seed++, 1.0f / std::sqrt(static_cast<float>(kFfn))), proj);
  }
  w.add_tensor("output_norm.weight", randn({e}, seed++, 0.1f, 1.0f));
  add("output.weight", randn({kVocab, e}, seed++, 3 * s), proj);
  return w.bytes();
}

int32_t argmax(const std::vector<float>& l) {
  return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
}

// Largest |a - b| over the largest |b|.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return num / den;
}

void check_greedy(GgmlType proj) {
  SCOPED_TRACE(ggml_type_info(proj).name);
  const std::string bytes = write_llama(proj);
  const GgufFile f = GgufFile::from_bytes(bytes.data(), bytes.size(), "llama.gguf");
  const std::string twin_bytes = write_llama(proj, &f);
  const GgufFile twin = GgufFile::from_bytes(twin_bytes.data(), twin_bytes.size(), "llama_f32.gguf");
  rlx::testing::LlamaReference ref(twin);  // the CPU on the dequantized twin (f32 products with the same values)
  Generator vk(f, {.device = Device::Vulkan, .max_ctx = 64, .prefill_chunk = 16});
  std::vector<int32_t> seq;
  for (int32_t i = 0; i < 20; ++i) seq.push_back((7 * i + 3) % static_cast<int32_t>(kVocab));
  std::vector<float> lv = vk.prefill(seq);
  std::vector<int32_t> tr, tv;
  double worst = 0;
  for (int step = 0; step < 20; ++step) {
    const std::vector<float> lr = ref.last_logits(seq);
    ASSERT_EQ(lv.size(), lr.size());
    worst = std::max(worst, rel_diff(lv, lr));
    tr.push_back(argmax(lr));
    tv.push_back(argmax(lv));
    seq.push_back(tr.back());  // both continue the CPU's sequence
    lv = vk.step(tr.back());
  }
  EXPECT_EQ(tv, tr);
  EXPECT_LT(worst, 1e-4) << "largest logit difference over the largest logit";
  std::printf("[ %s ] 20 greedy tokens equal; logits within %.2g of the largest\n", ggml_type_info(proj).name, worst);
}

TEST(VulkanLlamaGguf, GreedyTokensMatchTheCpu) {
  RLX_REQUIRE_VULKAN();
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K}) check_greedy(t);
}

}  // namespace
