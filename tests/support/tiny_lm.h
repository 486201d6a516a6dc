#pragma once
// A tiny random Llama-family GGUF model with a 40-token tokenizer (SentencePiece-style, or a
// Llama 3 style byte-level BPE), written in memory for the generation tests, and the helpers
// those tests compare logits with.
#include <cstdint>
#include <string>
#include <vector>

#include "rlx/gguf.h"

namespace rlx::testing {

struct TinyLm {
  int64_t layers = 2, hidden = 64, heads = 4, kv_heads = 2, ffn = 96;
  GgmlType proj = GgmlType::F32;
  int64_t extra_tokens = 0;  // tokenizer entries beyond the embedding's rows (a mismatched file)
  bool bpe = false;          // a Llama 3 style byte-level BPE tokenizer instead of SentencePiece
  // general.architecture: llama, qwen2 (q / k / v biases), qwen3 (per-head q / k norms, head
  // dim 32 with 4 heads of hidden 64: key_length given), gemma (tied head) or gemma2 (also
  // post-norms, attention softcap 3, final softcap 4, attention.scale 0.2)
  std::string arch = "llama";
  int64_t head_dim() const { return arch == "qwen3" ? 32 : hidden / heads; }
};

// The GGUF bytes of `m` (seeded weights: the same bytes every call).
std::string write_lm(const TinyLm& m);
GgufFile file_of(const std::string& bytes);
int32_t argmax(const std::vector<float>& l);  // the first of the maxima
// Largest |a - b| over the largest |b|.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace rlx::testing
