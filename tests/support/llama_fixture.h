#pragma once
// Pieces the Llama model tests share: Gaussian weight tensors and the teacher-forced reference.
#include <cstdint>
#include <string>
#include <vector>

#include "models/llama_gguf.h"
#include "rlx/rlx.h"

namespace rlx::testing {

// An f32 tensor of `shape` with values drawn from N(mean, scale^2) by a generator seeded `seed`.
Tensor randn(std::vector<int64_t> shape, uint64_t seed, float scale, float mean = 0.0f);

// The sizes of a tiny Llama-family GGUF file's metadata.
struct GgufLlamaDims {
  std::string arch = "llama";  // general.architecture and the keys' prefix
  int64_t layers = 2, context = 256, hidden = 64, ffn = 128, heads = 4, kv_heads = 2;
  float rope_theta = 10000.0f;
};
// general.architecture and the <arch>.* keys the builder requires (block_count, context_length,
// embedding_length, feed_forward_length, head counts, rope.freq_base); returns the prefix "<arch>.".
std::string add_llama_metadata(GgufWriter& w, const GgufLlamaDims& d);

// The no-cache reference on the CPU: the teacher-forced graph (build_llama_from_gguf) run from
// scratch over the whole sequence; the logits of its last row.
struct LlamaReference {
  models::GgufLlama model;
  CompiledGraph cg;
  // The teacher-forced graph of `f` built with `options` (seq symbolic), on the CPU.
  explicit LlamaReference(const GgufFile& f, const models::GgufLlamaOptions& options = {});
  std::vector<float> last_logits(const std::vector<int32_t>& seq);
};

}  // namespace rlx::testing
