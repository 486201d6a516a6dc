// Generation with a KV cache (rlx/generate.h, docs/generation.md).
#include "rlx/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <set>
#include <utility>

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

double Sampler::uniform() {
  if (pending_ >= 0) return std::exchange(pending_, -1.0);
  return static_cast<double>(splitmix64(state_) >> 11) * 0x1.0p-53;
}

template <class Value, class Id, class Ensure>
int32_t Sampler::draw(size_t n, const Value& value_of, const Id& id_of, const Ensure& ensure, double total, bool all) {
  // p[i] = exp((value_i - value_0) / T) of the first entries in rank order, grown on demand: a
  // peaked row settles within its first few entries, so the host ranks only those.
  std::vector<double> p;
  double mx = 0;
  const auto prob = [&](size_t i) {
    if (i >= p.size()) {
      const size_t m = std::min(n, std::max({i + 1, 2 * p.size(), size_t{256}}));
      ensure(m);
      if (p.empty()) mx = value_of(0);
      for (size_t j = p.size(); j < m; ++j) p.push_back(std::exp((value_of(j) - mx) / o_.temperature));
    }
    return p[i];
  };
  if (total < 0) {
    total = 0;
    for (size_t i = 0; i < n; ++i) total += prob(i);
  }
  size_t keep = n;
  double kept = total;
  if (o_.top_p < 1.0) {
    double cum = 0;
    size_t i = 0;
    for (; i < n; ++i) {
      cum += prob(i) / total;
      if (cum >= o_.top_p) break;
    }
    if (i == n && !all) return -1;  // the nucleus reaches past the candidates
    keep = std::min(i + 1, n);
    kept = 0;
    for (size_t j = 0; j < keep; ++j) kept += prob(j);
  }
  const double x = uniform();
  double u = x * kept;
  for (size_t i = 0; i < keep; ++i) {
    u -= prob(i);
    if (u < 0) return id_of(i);
  }
  if (all || keep < n) return id_of(keep - 1);  // rounding left the draw at the very end
  pending_ = x;  // the draw falls past the candidates: sample() over the full row reuses it
  return -1;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  if (logits.empty()) throw Error("sampling: empty logits");
  const auto n = static_cast<int64_t>(logits.size());
  const bool penalty = o_.penalized();
  if (o_.temperature <= 0.0 && !penalty) {  // greedy: one pass over the logits, no copy
    size_t best = 0;
    bool nan = false;
    for (size_t i = 0; i < logits.size(); ++i) {
      nan |= std::isnan(logits[i]);
      if (logits[i] > logits[best]) best = i;
    }
    if (nan) throw Error("sampling: the logits contain NaN (the model's weights or inputs are not finite)");
    pending_ = -1;
    return static_cast<int32_t>(best);  // first of the maxima
  }
  std::vector<float> l(logits.begin(), logits.end());
  if (penalty) {
    const std::span<const int32_t> window = o_.penalty_window(history);
    const std::set<int32_t> seen(window.begin(), window.end());
    const auto p = static_cast<float>(o_.repetition_penalty);
    for (int32_t id : seen)
      if (id >= 0 && id < n) l[static_cast<size_t>(id)] = l[static_cast<size_t>(id)] > 0 ? l[static_cast<size_t>(id)] / p : l[static_cast<size_t>(id)] * p;
  }
  for (float x : l)
    if (std::isnan(x)) throw Error("sampling: the logits contain NaN (the model's weights or inputs are not finite)");
  if (o_.temperature <= 0.0) {
    pending_ = -1;
    return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());  // first of the maxima
  }
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) {
    return l[static_cast<size_t>(a)] > l[static_cast<size_t>(b)] || (l[static_cast<size_t>(a)] == l[static_cast<size_t>(b)] && a < b);
  };
  const int64_t k = o_.top_k > 0 ? std::min(o_.top_k, n) : n;
  // The whole vocabulary's mass in index order (no ranking needed); top_k's in rank order.
  double total = -1.0;
  if (k == n) {
    const float mx = *std::max_element(l.begin(), l.end());
    total = 0;
    for (float v : l) total += std::exp((static_cast<double>(v) - mx) / o_.temperature);
  }
  size_t ranked = 0;  // idx[0, ranked) holds the first tokens in rank order
  const auto ensure = [&](size_t m) {
    if (m <= ranked) return;
    if (m > idx.size() / 8) {  // most of the row: one sort beats growing partial sorts
      std::sort(idx.begin(), idx.end(), by_logit);
      ranked = idx.size();
      return;
    }
    std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(m), idx.end(), by_logit);
    ranked = m;
  };
  return draw(
      static_cast<size_t>(k), [&](size_t i) { return static_cast<double>(l[static_cast<size_t>(idx[i])]); },
      [&](size_t i) { return idx[i]; }, ensure, total, true);
}

int32_t Sampler::sample_top(std::span<const float> top, std::span<const int64_t> ids, double mass, int64_t vocab) {
  if (top.empty() || top.size() != ids.size()) throw Error("sampling: sample_top needs as many ids as candidate logits (at least one)");
  for (int64_t id : ids)
    if (id < 0 || id >= vocab)
      throw Error("sampling: sample_top got candidate id " + i2s(id) + " outside the vocabulary of " + i2s(vocab) + " tokens");
  if (o_.temperature <= 0.0) {
    pending_ = -1;
    return static_cast<int32_t>(ids[0]);
  }
  const int64_t k = o_.top_k > 0 ? std::min(o_.top_k, vocab) : vocab;
  const auto value_of = [&](size_t i) { return static_cast<double>(top[i]); };
  const auto id_of = [&](size_t i) { return static_cast<int32_t>(ids[i]); };
  const auto ranked = [](size_t) {};  // the candidates come ranked
  if (k == vocab && static_cast<int64_t>(top.size()) >= vocab) {  // the whole vocabulary: its mass in id order, as sample()
    std::vector<double> by_id(static_cast<size_t>(vocab), 0.0);
    for (size_t i = 0; i < static_cast<size_t>(vocab); ++i)
      by_id.at(static_cast<size_t>(ids[i])) = std::exp((value_of(i) - value_of(0)) / o_.temperature);
    const double total = std::accumulate(by_id.begin(), by_id.end(), 0.0);
    return draw(static_cast<size_t>(k), value_of, id_of, ranked, total, true);
  }
  if (k <= static_cast<int64_t>(top.size())) return draw(static_cast<size_t>(k), value_of, id_of, ranked, -1.0, true);
  if (k < vocab || !(mass > 0) || !std::isfinite(mass)) return -1;  // top_k keeps tokens past the candidates
  return draw(top.size(), value_of, id_of, ranked, mass, false);
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
  int64_t batch = 1;
  std::vector<int64_t> pos;  // tokens in the cache, per sequence of the batch
  size_t started = 0;        // sequences the last prefill started
  bool carried = false;      // the compiled graph carries the caches (a run succeeded since the last failure)
  // What a run brings back (GenerateOptions::pick_on_device): the logits rows; each row's argmax
  // (greedy_ids) and sum (the decoder's outputs 1 + 2L and 2 + 2L); or the sampling head's
  // candidates (outputs 3 + 2L .. 5 + 2L, with the sums; the CPU's runs also return the logits,
  // which cost no transfer there).
  enum class Pick { Logits, Greedy, Candidates };
  Pick pick = Pick::Logits;
  std::vector<int32_t> greedy_ids;
  int64_t candidates = 0;  // K of the sampling head (0: none)
  std::vector<float> top, mass;
  std::vector<int64_t> top_ids;
  // The sampling head's inputs of the next run (B x sample_history ids, B penalties and 1 / T).
  std::vector<int64_t> history_ids;
  std::vector<float> penalty, inv_temp;
  // Runs left that also fetch the logits with the candidates: set after a step whose candidates
  // did not settle every pick, so that a run of such steps (a flat distribution) downloads rows
  // instead of running each step twice. The CPU's runs always return them (no transfer there).
  int64_t logits_too = 0;
  static constexpr int64_t kLogitsTooSteps = 8;
  // The last run's rows, to run it again for its logits (CacheWrite rewrites the same rows).
  std::vector<int64_t> last_tok, last_at;
  int64_t last_s = 0;

  void set_sampling_inputs(std::span<const std::vector<int32_t>> history, const SamplingOptions& so) {
    if (!candidates) return;
    const auto n = static_cast<size_t>(options.sample_history);
    history_ids.assign(static_cast<size_t>(batch) * n, 0);
    penalty.assign(static_cast<size_t>(batch), 1.0f);
    inv_temp.assign(static_cast<size_t>(batch), so.temperature > 0 ? static_cast<float>(1.0 / so.temperature) : 0.0f);
    for (size_t b = 0; b < history.size() && so.penalized(); ++b) {
      const std::span<const int32_t> w = so.penalty_window(history[b]);  // at most n ids: a longer window samples on the host
      if (w.empty()) continue;
      for (size_t i = 0; i < n; ++i) history_ids[b * n + i] = w[i < w.size() ? i : 0];  // padded with its first id
      penalty[b] = static_cast<float>(so.repetition_penalty);
    }
  }

  // How generate_batch picks with `o` (GenerateOptions::pick_on_device).
  Pick pick_for(const GenerateOptions& o) const {
    const SamplingOptions& s = o.sampling;
    const bool penalized = s.penalized();
    if (!o.pick_on_device) return Pick::Logits;
    if (s.temperature <= 0.0 && !penalized) return Pick::Greedy;
    if (candidates > 0 && (!penalized || s.repeat_last_n <= options.sample_history)) return Pick::Candidates;
    return Pick::Logits;  // no sampling head, or a penalty window longer than its history input
  }
  // The pick mode of the runs for as long as it lives.
  struct PickScope {
    Pick& pick;
    PickScope(Pick& p, Pick now) : pick(p) { pick = now; }
    ~PickScope() { pick = Pick::Logits; }
    PickScope(const PickScope&) = delete;
    PickScope& operator=(const PickScope&) = delete;
  };

  // One run over `s` rows of every sequence: `tok` and `at` hold the (B, s) ids and positions
  // row-major. Returns the logits of each sequence's last row (none unless pick is Logits).
  std::vector<std::vector<float>> run(const std::vector<int64_t>& tok, const std::vector<int64_t>& at, int64_t s,
                                      bool first, Pick want) {
    const std::vector<int64_t> dims = batch == 1 ? std::vector<int64_t>{s} : std::vector<int64_t>{batch, s};
    const int64_t last = s - 1;
    NamedTensors in = {{"tokens", Tensor::i64(dims, tok)},
                       {"positions", Tensor::i64(dims, at)},
                       {"logit_rows", Tensor::i64({1}, std::span<const int64_t>(&last, 1))}};
    if (candidates) {
      in.emplace_back("sample_history", Tensor::i64({batch, options.sample_history}, history_ids));
      in.emplace_back("sample_penalty", Tensor::f32({batch}, penalty));
      in.emplace_back("sample_inv_temperature", Tensor::f32({batch}, inv_temp));
    }
    // Caches are given once; a new sequence reuses the carried ones as they are (rows past its
    // positions are never read), so starting a sequence copies no cache either.
    if (first && !carried) {
      const Tensor zeros = Tensor::zeros(options.activations, {batch, max_ctx, config.kv_heads, config.head_dim});
      for (int64_t b = 0; b < config.layers; ++b) {
        in.emplace_back("cache_k." + i2s(b), zeros);
        in.emplace_back("cache_v." + i2s(b), zeros);
      }
    }
    const auto sums = static_cast<size_t>(2 + 2 * config.layers);
    std::vector<size_t> wanted = {0};
    if (want == Pick::Greedy) wanted = {sums - 1, sums};
    if (want == Pick::Candidates) {
      wanted = {sums, sums + 1, sums + 2, sums + 3};
      if (options.device == Device::Cpu || logits_too > 0) wanted.push_back(0);
    }
    std::vector<Tensor> out;
    try {
      out = cg->run(in, wanted);
    } catch (...) {
      carried = false;  // the run may have dropped or half-written the carried caches
      throw;
    }
    carried = true;
    last_tok = tok, last_at = at, last_s = s;
    std::vector<std::vector<float>> rows(static_cast<size_t>(batch));
    if (want != Pick::Logits) {
      const Tensor& sum = want == Pick::Greedy ? out.at(1) : out.at(0);  // (B, 1) row sums: NaN when a logit is
      for (int64_t b = 0; b < batch; ++b)
        if (std::isnan(sum.data<float>()[b]))
          throw Error("sampling: the logits contain NaN (the model's weights or inputs are not finite)");
    }
    if (want == Pick::Greedy) {  // (B, 1) argmax
      greedy_ids.assign(static_cast<size_t>(batch), 0);
      for (int64_t b = 0; b < batch; ++b) greedy_ids[static_cast<size_t>(b)] = static_cast<int32_t>(out.at(0).data<int64_t>()[b]);
      return rows;
    }
    if (want == Pick::Candidates) {  // (B, 1, K) logits and ids, (B, 1) mass
      top.assign(out.at(1).data<float>(), out.at(1).data<float>() + batch * candidates);
      top_ids.assign(out.at(2).data<int64_t>(), out.at(2).data<int64_t>() + batch * candidates);
      mass.assign(out.at(3).data<float>(), out.at(3).data<float>() + batch);
      if (out.size() < 5) return rows;
    }
    const float* d = out.back().data<float>();  // (B, 1, vocab)
    for (int64_t b = 0; b < batch; ++b) rows[static_cast<size_t>(b)].assign(d + b * config.vocab, d + (b + 1) * config.vocab);
    return rows;
  }
  // The last run's logits rows: from the run itself where they came back, else by running it again.
  std::vector<std::vector<float>> last_logits() { return run(last_tok, last_at, last_s, false, Pick::Logits); }

  // Feeds ids[b] to sequence b (none when empty; fewer lists than sequences: the rest get none)
  // in chunks of at most prefill_chunk rows, the lists aligned at their ends: a sequence with
  // fewer ids pads the front of a chunk with token 0 at its next position, which its first real
  // row in the chunk (or a later run) overwrites before any query of it can see that row
  // (CacheWrite keeps the later of two rows at one position). Returns each fed sequence's last
  // logits (empty for the others).
  std::vector<std::vector<float>> feed(std::span<const std::vector<int32_t>> ids, bool fresh) {
    size_t left = 0;
    for (size_t b = 0; b < ids.size(); ++b) {
      for (int32_t id : ids[b])
        if (id < 0 || id >= config.vocab)
          throw Error("generate: token id " + i2s(id) + (batch > 1 ? " (sequence " + i2s(static_cast<int64_t>(b)) + ")" : "") +
                      " is out of range (the model's vocabulary has " + i2s(config.vocab) + " tokens)");
      left = std::max(left, ids[b].size());
    }
    if (left == 0) throw Error("generate: no tokens to feed (a prompt needs at least one token)");
    std::vector<int64_t> at = fresh ? std::vector<int64_t>(static_cast<size_t>(batch), 0) : pos;
    for (size_t b = 0; b < ids.size(); ++b) {
      const auto n = static_cast<int64_t>(ids[b].size());
      if (at[b] + n > max_ctx)
        throw Error("generate: " + (batch > 1 ? "sequence " + i2s(static_cast<int64_t>(b)) + ": " : std::string()) + i2s(at[b]) +
                    " cached + " + i2s(n) + " new tokens exceed the cache of " + i2s(max_ctx) +
                    " rows; use a larger max_ctx (--ctx), at most the model's context_length " + i2s(config.context));
    }
    if (fresh) pos = at;
    std::vector<size_t> rest(static_cast<size_t>(batch), 0);  // ids not fed yet, per sequence
    for (size_t b = 0; b < ids.size(); ++b) rest[b] = ids[b].size();
    std::vector<std::vector<float>> logits;
    bool first = fresh;
    while (left > 0) {
      auto c = static_cast<size_t>(options.prefill_chunk);
      while (c > left) c /= 2;
      std::vector<int64_t> tok(static_cast<size_t>(batch) * c, 0), where(static_cast<size_t>(batch) * c);
      std::vector<size_t> real(static_cast<size_t>(batch), 0);
      for (size_t b = 0; b < static_cast<size_t>(batch); ++b) {
        real[b] = rest[b] + c > left ? rest[b] + c - left : 0;  // this chunk's rows of sequence b (its last ones)
        const size_t pad = c - real[b], from = b < ids.size() ? ids[b].size() - rest[b] : 0;
        for (size_t j = 0; j < c; ++j) {
          const size_t r = b * c + j;
          if (j < pad) {
            where[r] = std::min(pos[b], max_ctx - 1);  // a full sequence pads over its last row (it ends there)
          } else {
            tok[r] = ids[b][from + j - pad];
            where[r] = pos[b] + static_cast<int64_t>(j - pad);
          }
        }
      }
      logits = run(tok, where, static_cast<int64_t>(c), first, pick);
      first = false;
      for (size_t b = 0; b < static_cast<size_t>(batch); ++b) {
        pos[b] += static_cast<int64_t>(real[b]);
        rest[b] -= real[b];
      }
      left -= c;
    }
    for (size_t b = 0; b < logits.size(); ++b)
      if (b >= ids.size() || ids[b].empty()) logits[b].clear();
    return logits;
  }

  void single_sequence(const char* call) const {
    if (batch != 1)
      throw Error(std::string("generate: ") + call + " runs one sequence, but this Generator was built for batches of " +
                  i2s(batch) + " (GeneratorOptions::batch); use prefill_batch / step_batch / generate_batch");
  }
  std::vector<float> feed_one(std::span<const int32_t> ids, bool fresh) {
    const std::vector<int32_t> one(ids.begin(), ids.end());
    return std::move(feed(std::span<const std::vector<int32_t>>(&one, 1), fresh).at(0));
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
  constexpr int64_t kMaxBatch = int64_t{1} << 20;
  if (options.batch < 1 || options.batch > kMaxBatch)
    throw Error("generate: batch must be in [1, " + i2s(kMaxBatch) + "] (sequences decoded together), got " +
                i2s(options.batch));
  m.batch = options.batch;
  m.pos.assign(static_cast<size_t>(m.batch), 0);
  models::GgufLlamaOptions lo;
  lo.batch = options.batch;
  lo.half_weights = models::half_weights_run_on(options.device);  // else f32 weights every backend runs
  lo.block_weights = models::block_weights_run_on(options.device);  // else dequantized at load
  lo.activations = options.activations;
  if (options.sample_candidates < 0 || options.sample_candidates > 1024)
    throw Error("generate: sample_candidates must be in [0, 1024] (0 = sampling brings back the logits; the GPU "
                "kernels sort at most 1024 candidates), got " + i2s(options.sample_candidates));
  if (options.sample_history < 1 || options.sample_history > 65536)
    throw Error("generate: sample_history must be in [1, 65536] (the repetition penalty's window on the device), got " +
                i2s(options.sample_history));
  m.candidates = std::min(options.sample_candidates, m.config.vocab);
  lo.sample_candidates = m.candidates;
  lo.sample_history = options.sample_history;
  m.set_sampling_inputs({}, SamplingOptions{});  // the head's inputs until a generate sets them
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
int64_t Generator::position() const { return impl_->pos.at(0); }
int64_t Generator::position(size_t sequence) const {
  if (sequence >= impl_->pos.size())
    throw Error("generate: sequence " + i2s(static_cast<int64_t>(sequence)) + " is outside the batch of " + i2s(impl_->batch));
  return impl_->pos[sequence];
}
int64_t Generator::batch() const { return impl_->batch; }
size_t Generator::compile_count() const { return impl_->cg->compile_count(); }

std::vector<float> Generator::prefill(std::span<const int32_t> ids) {
  return translate_errors("generate", [&] {
    impl_->single_sequence("prefill()");
    return impl_->feed_one(ids, true);
  });
}
std::vector<float> Generator::append(std::span<const int32_t> ids) {
  return translate_errors("generate", [&] {
    impl_->single_sequence("append()");
    if (impl_->pos[0] == 0) throw Error("generate: append() before prefill(): start a sequence with prefill()");
    return impl_->feed_one(ids, false);
  });
}

// One sequence is a batch of one: the same loop, sampler, stop rules and timings.
GenerateResult Generator::generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                                   const TokenCallback& on_token) {
  impl_->single_sequence("generate()");
  if (prompt.empty()) throw Error("generate: no tokens to feed (a prompt needs at least one token)");
  const std::vector<std::vector<int32_t>> one = {std::vector<int32_t>(prompt.begin(), prompt.end())};
  BatchTokenCallback cb;
  if (on_token) cb = [&](size_t, int32_t id, const std::string& piece) { return on_token(id, piece); };
  return std::move(generate_batch(std::span<const std::vector<int32_t>>(one), options, cb).at(0));
}

GenerateResult Generator::generate(std::string_view prompt, const GenerateOptions& options, const TokenCallback& on_token) {
  const std::vector<int32_t> ids = tokenizer().encode(prompt, options.encode);
  if (ids.empty())
    throw Error("generate: the prompt encodes to no tokens (an empty prompt with no BOS token); give some text");
  return generate(std::span<const int32_t>(ids), options, on_token);
}

std::vector<std::vector<float>> Generator::prefill_batch(std::span<const std::vector<int32_t>> prompts) {
  return translate_errors("generate", [&] {
    Impl& m = *impl_;
    if (prompts.empty() || prompts.size() > static_cast<size_t>(m.batch))
      throw Error("generate: prefill_batch takes 1 to " + i2s(m.batch) + " prompts (GeneratorOptions::batch), got " +
                  i2s(static_cast<int64_t>(prompts.size())));
    for (size_t b = 0; b < prompts.size(); ++b)
      if (prompts[b].empty())
        throw Error("generate: prompt " + i2s(static_cast<int64_t>(b)) + " has no tokens (every sequence needs at least one)");
    m.started = 0;  // a failed prefill leaves no sequence to step
    auto logits = m.feed(prompts, true);
    m.started = prompts.size();
    logits.resize(prompts.size());
    return logits;
  });
}

std::vector<std::vector<float>> Generator::step_batch(std::span<const int32_t> ids) {
  return translate_errors("generate", [&] {
    Impl& m = *impl_;
    if (m.started == 0) throw Error("generate: step_batch() before prefill_batch(): start the sequences first");
    if (ids.size() != m.started)
      throw Error("generate: step_batch takes one id per sequence prefill_batch started (" + i2s(static_cast<int64_t>(m.started)) +
                  "), got " + i2s(static_cast<int64_t>(ids.size())) + " (a negative id skips a sequence)");
    std::vector<std::vector<int32_t>> feed(ids.size());
    for (size_t b = 0; b < ids.size(); ++b)
      if (ids[b] >= 0) feed[b] = {ids[b]};
    auto logits = m.feed(feed, false);
    logits.resize(ids.size());
    return logits;
  });
}

std::vector<GenerateResult> Generator::generate_batch(std::span<const std::vector<int32_t>> prompts,
                                                      const GenerateOptions& options, const BatchTokenCallback& on_token) {
  if (options.max_new_tokens < 0) throw Error("generate: max_new_tokens must be >= 0, got " + i2s(options.max_new_tokens));
  std::vector<Sampler> samplers;
  for (size_t b = 0; b < prompts.size(); ++b) {
    SamplingOptions so = options.sampling;
    so.seed += b;
    samplers.emplace_back(so);
  }
  Impl& m = *impl_;
  const Impl::PickScope scope(m.pick, m.pick_for(options));
  std::vector<GenerateResult> r(prompts.size());
  std::vector<std::vector<int32_t>> history(prompts.size());
  for (size_t b = 0; b < prompts.size(); ++b) {
    r[b].prompt = prompts[b];
    history[b] = prompts[b];
    r[b].stop_reason = "length";
  }
  auto t0 = Clock::now();
  m.set_sampling_inputs(history, options.sampling);
  m.logits_too = 0;
  std::vector<std::vector<float>> logits = prefill_batch(prompts);
  const double prefill = seconds_since(t0);
  for (GenerateResult& x : r) x.prefill_seconds = prefill;
  std::vector<bool> done(prompts.size(), options.max_new_tokens == 0);
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    t0 = Clock::now();  // a decode step's time includes picking the tokens it feeds
    std::vector<int32_t> next(prompts.size(), -1);
    bool unsettled = false;  // a pick of this step needed the whole row
    for (size_t b = 0; b < prompts.size(); ++b) {
      if (done[b]) continue;
      int32_t tok = -1;
      if (m.pick == Impl::Pick::Greedy) tok = m.greedy_ids.at(b);
      if (m.pick == Impl::Pick::Candidates) {
        const auto k = static_cast<size_t>(m.candidates);
        tok = samplers[b].sample_top(std::span<const float>(m.top).subspan(b * k, k),
                                     std::span<const int64_t>(m.top_ids).subspan(b * k, k), m.mass.at(b), m.config.vocab);
        if (tok < 0 && logits.at(b).empty()) logits = m.last_logits();  // the candidates did not settle it
      }
      if (tok < 0) {
        tok = samplers[b].sample(logits.at(b), history[b]);
        ++r[b].host_picks;
        unsettled = m.pick == Impl::Pick::Candidates;
      }
      r[b].tokens.push_back(tok);
      history[b].push_back(tok);
      const bool eog = options.stop_at_end_of_generation && m.tokenizer && m.tokenizer->is_end_of_generation(tok);
      const std::string piece = m.tokenizer ? m.tokenizer->piece(tok) : std::string();
      done[b] = true;
      if (on_token && !on_token(b, tok, piece)) r[b].stop_reason = "callback";
      else if (eog) r[b].stop_reason = "end of generation";
      else if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), tok) != options.stop_tokens.end())
        r[b].stop_reason = "stop token";
      else if (i + 1 == options.max_new_tokens) r[b].stop_reason = "length";
      else if (m.pos[b] >= m.max_ctx) r[b].stop_reason = "context full";
      else done[b] = false, next[b] = tok;
    }
    if (std::all_of(next.begin(), next.end(), [](int32_t t) { return t < 0; })) break;
    m.logits_too = unsettled ? Impl::kLogitsTooSteps : std::max<int64_t>(0, m.logits_too - 1);
    m.set_sampling_inputs(history, options.sampling);
    logits = step_batch(next);
    const double dt = seconds_since(t0);
    for (size_t b = 0; b < prompts.size(); ++b)
      if (next[b] >= 0) r[b].decode_seconds += dt, ++r[b].decode_steps;
  }
  return r;
}

std::vector<GenerateResult> Generator::generate_batch(std::span<const std::string> prompts, const GenerateOptions& options,
                                                      const BatchTokenCallback& on_token) {
  std::vector<std::vector<int32_t>> ids;
  for (size_t b = 0; b < prompts.size(); ++b) {
    ids.push_back(tokenizer().encode(prompts[b], options.encode));
    if (ids.back().empty())
      throw Error("generate: prompt " + i2s(static_cast<int64_t>(b)) +
                  " encodes to no tokens (an empty prompt with no BOS token); give some text");
  }
  return generate_batch(std::span<const std::vector<int32_t>>(ids), options, on_token);
}

}  // namespace rlx
