#include "support/llama_fixture.h"

#include <random>

namespace rlx::testing {

Tensor randn(std::vector<int64_t> shape, uint64_t seed, float scale, float mean) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(mean, scale);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return Tensor::f32(std::move(shape), v);
}

std::string add_llama_metadata(GgufWriter& w, const GgufLlamaDims& d) {
  const std::string a = d.arch + ".";
  auto u32 = [](int64_t v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  w.add("general.architecture", GgufValue::string(d.arch));
  w.add(a + "block_count", u32(d.layers));
  w.add(a + "context_length", u32(d.context));
  w.add(a + "embedding_length", u32(d.hidden));
  w.add(a + "feed_forward_length", u32(d.ffn));
  w.add(a + "attention.head_count", u32(d.heads));
  w.add(a + "attention.head_count_kv", u32(d.kv_heads));
  w.add(a + "rope.freq_base", GgufValue::f32(d.rope_theta));
  return a;
}

LlamaReference::LlamaReference(const GgufFile& f, const models::GgufLlamaOptions& options)
    : model(models::build_llama_from_gguf(f, options)), cg(Session(Device::Cpu).compile(model.graph)) {
  for (const auto& [n, t] : model.params) cg.set_param(n, t);
}

std::vector<float> LlamaReference::last_logits(const std::vector<int32_t>& seq) {
  const auto s = static_cast<int64_t>(seq.size());
  std::vector<int64_t> tok(seq.begin(), seq.end()), pos(seq.size());
  for (int64_t i = 0; i < s; ++i) pos[static_cast<size_t>(i)] = i;
  const Tensor out = cg.run({{"tokens", Tensor::i64({s}, tok)}, {"positions", Tensor::i64({s}, pos)}})[0];
  const int64_t v = model.config.vocab;
  const float* d = out.data<float>() + (s - 1) * v;
  return std::vector<float>(d, d + v);
}

}  // namespace rlx::testing
