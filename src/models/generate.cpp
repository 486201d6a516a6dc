// Generation with a KV cache (rlx/generate.h, docs/generation.md).
#include "rlx/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <set>

#include "models/llama_gguf.h"

namespace rlx {
namespace {

std::string i2s(int64_t v) { return std::to_string(v); }
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

// ---- sampling ----

Sampler::Sampler(const SamplingOptions& options) : o_(options), state_(options.seed) {
  if (!std::isfinite(o_.temperature))
    throw Error("sampling: temperature must be a finite number (<= 0 for greedy), got " + std::to_string(o_.temperature));
  if (o_.top_k < 0) throw Error("sampling: top_k must be >= 0 (0 = off), got " + i2s(o_.top_k));
  if (!(o_.top_p > 0.0 && o_.top_p <= 1.0))
    throw Error("sampling: top_p must be in (0, 1] (1 = off), got " + std::to_string(o_.top_p));
  if (!(o_.repetition_penalty > 0.0) || !std::isfinite(o_.repetition_penalty))
    throw Error("sampling: repetition_penalty must be a positive number (1 = off), got " +
                std::to_string(o_.repetition_penalty));
  if (o_.repeat_last_n < 0) throw Error("sampling: repeat_last_n must be >= 0, got " + i2s(o_.repeat_last_n));
}

double Sampler::uniform() { return static_cast<double>(splitmix64(state_) >> 11) * 0x1.0p-53; }

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  if (logits.empty()) throw Error("sampling: empty logits");
  const auto n = static_cast<int64_t>(logits.size());
  const bool penalty = o_.repetition_penalty != 1.0 && o_.repeat_last_n > 0;
  if (o_.temperature <= 0.0 && !penalty) {  // greedy: one pass over the logits, no copy
    size_t best = 0;
    bool nan = false;
    for (size_t i = 0; i < logits.size(); ++i) {
      nan |= std::isnan(logits[i]);
      if (logits[i] > logits[best]) best = i;
    }
    if (nan) throw Error("sampling: the logits contain NaN (the model's weights or inputs are not finite)");
    return static_cast<int32_t>(best);  // first of the maxima
  }
  std::vector<float> l(logits.begin(), logits.end());
  if (penalty) {
    const size_t from = history.size() > static_cast<size_t>(o_.repeat_last_n) ? history.size() - static_cast<size_t>(o_.repeat_last_n) : 0;
    std::set<int32_t> seen(history.begin() + static_cast<std::ptrdiff_t>(from), history.end());
    const auto p = static_cast<float>(o_.repetition_penalty);
    for (int32_t id : seen)
      if (id >= 0 && id < n) l[static_cast<size_t>(id)] = l[static_cast<size_t>(id)] > 0 ? l[static_cast<size_t>(id)] / p : l[static_cast<size_t>(id)] * p;
  }
  for (float x : l)
    if (std::isnan(x)) throw Error("sampling: the logits contain NaN (the model's weights or inputs are not finite)");
  if (o_.temperature <= 0.0)
    return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());  // first of the maxima
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) {
    return l[static_cast<size_t>(a)] > l[static_cast<size_t>(b)] || (l[static_cast<size_t>(a)] == l[static_cast<size_t>(b)] && a < b);
  };
  const int64_t k = o_.top_k > 0 ? std::min(o_.top_k, n) : n;
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), by_logit);
  idx.resize(static_cast<size_t>(k));
  std::vector<double> p(idx.size());
  const double mx = l[static_cast<size_t>(idx[0])];
  double total = 0;
  for (size_t i = 0; i < idx.size(); ++i) total += p[i] = std::exp((l[static_cast<size_t>(idx[i])] - mx) / o_.temperature);
  size_t keep = idx.size();
  if (o_.top_p < 1.0) {
    double cum = 0;
    for (size_t i = 0; i < idx.size(); ++i) {
      cum += p[i] / total;
      if (cum >= o_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += p[i];
  double u = uniform() * kept;
  for (size_t i = 0; i < keep; ++i) {
    u -= p[i];
    if (u < 0) return idx[i];
  }
  return idx[keep - 1];
}

double GenerateResult::prompt_tokens_per_second() const {
  return prefill_seconds > 0 ? static_cast<double>(prompt.size()) / prefill_seconds : 0.0;
}
double GenerateResult::decode_tokens_per_second() const {
  return decode_seconds > 0 ? static_cast<double>(decode_steps) / decode_seconds : 0.0;
}

// ---- the generator ----

struct Generator::Impl {
  GeneratorOptions options;
  models::GgufLlamaConfig config;
  int64_t max_ctx = 0;
  std::optional<Tokenizer> tokenizer;
  std::optional<CompiledGraph> cg;
  int64_t pos = 0;
  bool carried = false;  // the compiled graph carries the caches (a run succeeded since the last failure)

  std::vector<float> run_chunk(std::span<const int32_t> ids, bool first) {
    const auto s = static_cast<int64_t>(ids.size());
    std::vector<int64_t> tok(ids.begin(), ids.end()), positions(static_cast<size_t>(s));
    for (int64_t i = 0; i < s; ++i) positions[static_cast<size_t>(i)] = pos + i;
    const int64_t last = s - 1;
    NamedTensors in = {{"tokens", Tensor::i64({s}, tok)},
                       {"positions", Tensor::i64({s}, positions)},
                       {"logit_rows", Tensor::i64({1}, std::span<const int64_t>(&last, 1))}};
    // Caches are given once; a new sequence reuses the carried ones as they are (rows past its
    // positions are never read), so starting a sequence copies no cache either.
    if (first && !carried) {
      const Tensor zeros = Tensor::zeros(options.activations, {1, max_ctx, config.kv_heads, config.head_dim});
      for (int64_t b = 0; b < config.layers; ++b) {
        in.emplace_back("cache_k." + i2s(b), zeros);
        in.emplace_back("cache_v." + i2s(b), zeros);
      }
    }
    std::vector<Tensor> out;
    try {
      out = cg->run(in, {0});
    } catch (...) {
      carried = false;  // the run may have dropped or half-written the carried caches
      throw;
    }
    carried = true;
    pos += s;
    const Tensor& t = out.at(0);
    const float* d = t.data<float>();
    return std::vector<float>(d, d + config.vocab);
  }

  std::vector<float> feed(std::span<const int32_t> ids, bool fresh) {
    if (ids.empty()) throw Error("generate: no tokens to feed (a prompt needs at least one token)");
    for (int32_t id : ids)
      if (id < 0 || id >= config.vocab)
        throw Error("generate: token id " + i2s(id) + " is out of range (the model's vocabulary has " + i2s(config.vocab) +
                    " tokens)");
    if (fresh) pos = 0;
    if (pos + static_cast<int64_t>(ids.size()) > max_ctx)
      throw Error("generate: " + i2s(pos) + " cached + " + i2s(static_cast<int64_t>(ids.size())) +
                  " new tokens exceed the cache of " + i2s(max_ctx) + " rows; use a larger max_ctx (--ctx), at most " +
                  "the model's context_length " + i2s(config.context));
    std::vector<float> logits;
    size_t at = 0;
    bool first = fresh;
    while (at < ids.size()) {
      const auto left = static_cast<int64_t>(ids.size() - at);
      int64_t chunk = options.prefill_chunk;
      while (chunk > left) chunk /= 2;
      logits = run_chunk(ids.subspan(at, static_cast<size_t>(chunk)), first);
      first = false;
      at += static_cast<size_t>(chunk);
    }
    return logits;
  }
};

Generator::Generator(const GgufFile& f, const GeneratorOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.options = options;
  if (options.prefill_chunk < 1 || (options.prefill_chunk & (options.prefill_chunk - 1)) != 0)
    throw Error("generate: prefill_chunk must be a power of two, got " + i2s(options.prefill_chunk));
  if (options.max_ctx < 0) throw Error("generate: max_ctx must be >= 0 (0 = the model's), got " + i2s(options.max_ctx));
  m.config = models::read_gguf_llama_config(f);
  m.max_ctx = options.max_ctx ? options.max_ctx : std::min<int64_t>(m.config.context, 4096);
  if (m.max_ctx > m.config.context)
    throw Error("generate: max_ctx " + i2s(m.max_ctx) + " exceeds the model's context_length " + i2s(m.config.context));
  if (f.find("tokenizer.ggml.model")) {
    m.tokenizer = Tokenizer::from_gguf(f);
    if (m.tokenizer->vocab_size() > m.config.vocab)
      throw Error(f.what() + ": the tokenizer has " + i2s(m.tokenizer->vocab_size()) + " tokens but token_embd.weight only " +
                  i2s(m.config.vocab) + " rows; the file's tokenizer and weights do not belong together");
  }
  models::GgufLlamaOptions lo;
  lo.half_weights = models::half_weights_run_on(options.device);  // else f32 weights every backend runs
  lo.block_weights = models::block_weights_run_on(options.device);  // else dequantized at load
  lo.activations = options.activations;
  models::GgufLlama llama = models::build_llama_decoder_from_gguf(f, m.max_ctx, lo);
  CompileOptions co;
  co.num_threads = options.num_threads;
  m.cg = Session(options.device).compile(llama.graph, co);
  for (auto& [name, t] : llama.params) m.cg->set_param(name, std::move(t));  // the weights' bytes, not copies
  for (int64_t b = 0; b < m.config.layers; ++b) {
    m.cg->bind_state("cache_k." + i2s(b), static_cast<size_t>(1 + 2 * b));
    m.cg->bind_state("cache_v." + i2s(b), static_cast<size_t>(2 + 2 * b));
  }
}

Generator::Generator(Generator&&) noexcept = default;
Generator& Generator::operator=(Generator&&) noexcept = default;
Generator::~Generator() = default;

bool Generator::has_tokenizer() const { return impl_->tokenizer.has_value(); }
const Tokenizer& Generator::tokenizer() const {
  if (!impl_->tokenizer)
    throw Error("generate: the GGUF file has no tokenizer (tokenizer.ggml.model is missing); pass token ids instead of text");
  return *impl_->tokenizer;
}
int64_t Generator::max_ctx() const { return impl_->max_ctx; }
int64_t Generator::vocab_size() const { return impl_->config.vocab; }
int64_t Generator::position() const { return impl_->pos; }
size_t Generator::compile_count() const { return impl_->cg->compile_count(); }

std::vector<float> Generator::prefill(std::span<const int32_t> ids) {
  return translate_errors("generate", [&] { return impl_->feed(ids, true); });
}
std::vector<float> Generator::append(std::span<const int32_t> ids) {
  return translate_errors("generate", [&] {
    if (impl_->pos == 0) throw Error("generate: append() before prefill(): start a sequence with prefill()");
    return impl_->feed(ids, false);
  });
}

GenerateResult Generator::generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                                   const TokenCallback& on_token) {
  if (options.max_new_tokens < 0) throw Error("generate: max_new_tokens must be >= 0, got " + i2s(options.max_new_tokens));
  Sampler sampler(options.sampling);
  GenerateResult r;
  r.prompt.assign(prompt.begin(), prompt.end());
  std::vector<int32_t> history = r.prompt;
  auto t0 = Clock::now();
  std::vector<float> logits = prefill(prompt);
  r.prefill_seconds = seconds_since(t0);
  r.stop_reason = "length";
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    const int32_t tok = sampler.sample(logits, history);
    r.tokens.push_back(tok);
    history.push_back(tok);
    const bool eog = options.stop_at_end_of_generation && impl_->tokenizer && impl_->tokenizer->is_end_of_generation(tok);
    const std::string piece = impl_->tokenizer ? impl_->tokenizer->piece(tok) : std::string();
    if (on_token && !on_token(tok, piece)) {
      r.stop_reason = "callback";
      break;
    }
    if (eog) {
      r.stop_reason = "end of generation";
      break;
    }
    if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), tok) != options.stop_tokens.end()) {
      r.stop_reason = "stop token";
      break;
    }
    if (i + 1 == options.max_new_tokens) break;
    if (impl_->pos >= impl_->max_ctx) {
      r.stop_reason = "context full";
      break;
    }
    t0 = Clock::now();
    logits = step(tok);
    r.decode_seconds += seconds_since(t0);
    ++r.decode_steps;
  }
  return r;
}

GenerateResult Generator::generate(std::string_view prompt, const GenerateOptions& options, const TokenCallback& on_token) {
  const std::vector<int32_t> ids = tokenizer().encode(prompt, options.encode);
  if (ids.empty())
    throw Error("generate: the prompt encodes to no tokens (an empty prompt with no BOS token); give some text");
  return generate(std::span<const int32_t>(ids), options, on_token);
}

}  // namespace rlx
