#pragma once
// Text generation with a Llama GGUF model: prefill a prompt, then decode token by token with a
// KV cache that stays with the compiled graph (docs/generation.md).
//
//   rlx::GgufFile f("model.gguf");
//   rlx::Generator gen(f, {.device = rlx::Device::Cpu, .max_ctx = 512});
//   rlx::GenerateOptions o;
//   o.max_new_tokens = 64;
//   o.sampling.temperature = 0.8;
//   rlx::GenerateResult r = gen.generate("Once upon a time", o, [](int32_t id, const std::string& piece) {
//     std::cout << piece << std::flush;
//     return true;  // false stops
//   });
//
// Design: one graph (models::build_llama_decoder_from_gguf) whose inputs are a chunk of tokens,
// their positions and the per-block caches (1, max_ctx, Hkv, D), and whose outputs are the
// logits of the chunk's last row and the updated caches. It is compiled once; its symbolic chunk
// length gets one compiled variant per length used: prompts are fed in chunks of
// `prefill_chunk` tokens and the remainder in power-of-two pieces, so prefill and decode use at
// most log2(prefill_chunk) + 1 lengths whatever the prompt, and decode (length 1) never
// compiles again. The caches are carried between runs with CompiledGraph::bind_state. With
// GeneratorOptions::batch = B the graph runs B sequences at their own positions ((B, S) tokens
// and positions, (B, max_ctx, Hkv, D) caches): generate_batch.
// Picking the next token (GenerateOptions::pick_on_device, default on): greedy decoding takes the
// device's argmax; sampling (repetition penalty, temperature, top-k, top-p) takes the device's
// penalized top candidates (GeneratorOptions::sample_candidates) and the vocabulary's probability
// mass, and the host draws among those few with the same seeded stream and arithmetic as over
// the whole row, so the tokens are the ones the host's Sampler picks from the logits (with top_k
// 0 the vocabulary's mass is the device's f32 sum: a draw within about 1e-6 of the boundary
// between two tokens may take the neighbour). Only when the candidates cannot settle a draw
// (top_k above them, or a top_p / draw reaching past them) does the step's logits row come back
// for the Sampler.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/gguf.h"
#include "rlx/session.h"
#include "rlx/tokenizer.h"

namespace rlx {

struct SamplingOptions {
  double temperature = 0.0;        // <= 0: greedy (argmax, lowest id on ties)
  int64_t top_k = 0;               // 0: off
  double top_p = 1.0;              // 1: off; in (0, 1]
  double repetition_penalty = 1.0;  // 1: off; > 0 (logit / p if positive, * p if not)
  int64_t repeat_last_n = 64;      // tokens (prompt included) the penalty looks back over
  uint64_t seed = 0;
  // Whether the repetition penalty changes anything (a penalty other than 1 over a window).
  bool penalized() const { return repetition_penalty != 1.0 && repeat_last_n > 0; }
  // The tokens of `history` the penalty looks at: its last repeat_last_n.
  std::span<const int32_t> penalty_window(std::span<const int32_t> history) const {
    const auto n = static_cast<size_t>(std::max<int64_t>(repeat_last_n, 0));
    return history.size() > n ? history.subspan(history.size() - n) : history;
  }
};

// Picks the next token from one row of logits (the seeded generator state lives in `rng`).
class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);  // rlx::Error for out-of-range options
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  // The same pick from the top of a row whose penalty is already applied: `top` holds its
  // largest logits (largest first, ties by lower id) and `ids` their ids; `mass` is the sum over
  // the vocabulary, in id order, of exp((logit - top[0]) / temperature) (used only when top_k
  // keeps the whole vocabulary of `vocab` ids; sample() sums the same way). Returns -1 when these do not settle the pick (top_k above
  // top.size(), or top_p or the draw reaching past the candidates); the draw already made is kept
  // for the next sample() over the full row, which then picks as if called alone.
  int32_t sample_top(std::span<const float> top, std::span<const int64_t> ids, double mass, int64_t vocab);

 private:
  SamplingOptions o_;
  uint64_t state_;
  double pending_ = -1;  // a draw sample_top made and could not use
  double uniform();      // [0, 1)
  // The pick among `n` candidates in rank order, largest first (value_of(i), id_of(i), valid once
  // ensure(m) ranked the first m > i); `total`: the mass top_k keeps, or < 0 to sum it over the
  // candidates in rank order; `all`: the candidates are every token top_k keeps. -1 when they do
  // not settle it (see sample_top).
  template <class Value, class Id, class Ensure>
  int32_t draw(size_t n, const Value& value_of, const Id& id_of, const Ensure& ensure, double total, bool all);
};

struct GeneratorOptions {
  Device device = Device::Cpu;
  int num_threads = 0;        // CompileOptions::num_threads
  int64_t max_ctx = 0;        // cache rows; 0: the model's context_length, at most 4096
  int64_t prefill_chunk = 64;  // the largest prompt chunk (a power of two)
  // The dtype the model computes in and keeps its KV caches in: f32, or bf16 / f16 (PyTorch's
  // precision for 16-bit models; half the cache bytes, and the GPU backends' 16-bit GEMV and
  // attention kernels). Logits come back as f32 either way. models::GgufLlamaOptions::activations.
  DType activations = DType::F32;
  // Sequences decoded together (generate_batch): the caches hold `batch` sequences of max_ctx
  // rows each, and every run computes all of them (one weight read serves them all). 1: the
  // single-sequence API below. At most 2^20; the caches take batch x max_ctx rows per block.
  int64_t batch = 1;
  // Sampling on the device (GenerateOptions::pick_on_device): the decoder outputs the top
  // `sample_candidates` logits of each sequence after the repetition penalty, applied to the ids
  // among the last `sample_history` tokens (a penalty window longer than that samples on the
  // host). 0: no sampling outputs (sampling brings back every logits row).
  int64_t sample_candidates = 128;
  int64_t sample_history = 64;
};

struct GenerateOptions {
  int64_t max_new_tokens = 128;
  SamplingOptions sampling;
  bool stop_at_end_of_generation = true;  // stop after eos / eot (the tokenizer's list)
  std::vector<int32_t> stop_tokens;       // more ids that stop generation (kept in the output)
  EncodeOptions encode;                   // how the prompt text is tokenized
  // Pick each token from what the device computed (greedy: the row's argmax, lowest id on ties as
  // on the host; sampling: the penalized top candidates, see the top of this file): a run
  // downloads a few bytes per sequence instead of the vocabulary's logits. false: the logits
  // come back and the host's Sampler picks (the same tokens).
  bool pick_on_device = true;
};

struct GenerateResult {
  std::vector<int32_t> prompt, tokens;  // the prompt's ids and the generated ids
  std::string stop_reason;              // "length", "end of generation", "stop token", "context full", "callback"
  // prefill: feeding the prompts; decode: the decode steps, each with the picks of the tokens it feeds
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t decode_steps = 0;  // decode runs (each feeds one generated token back)
  // Tokens picked by the host's Sampler from the whole logits row (GenerateOptions::pick_on_device
  // off, no sampling head, a penalty window beyond it, or candidates that did not settle a draw);
  // the others were picked from what the device computed.
  int64_t host_picks = 0;
  double prompt_tokens_per_second() const;
  double decode_tokens_per_second() const;
};

class Generator {
 public:
  // Builds the decoder graph from the GGUF file (and its tokenizer, when the file has one),
  // compiles it for options.device and sets its weights.
  Generator(const GgufFile& f, const GeneratorOptions& options = {});
  Generator(Generator&&) noexcept;
  Generator& operator=(Generator&&) noexcept;
  ~Generator();

  bool has_tokenizer() const;
  const Tokenizer& tokenizer() const;  // rlx::Error when the file has none
  int64_t max_ctx() const;
  int64_t vocab_size() const;
  int64_t position() const;  // tokens in the cache
  // Variants compiled so far (CompiledGraph::compile_count of the decoder graph).
  size_t compile_count() const;

  // Starts a new sequence with `ids` (at least one) and returns the logits (vocab) of its last token.
  std::vector<float> prefill(std::span<const int32_t> ids);
  // Appends `ids` to the current sequence; the logits of the last one.
  std::vector<float> append(std::span<const int32_t> ids);
  std::vector<float> step(int32_t id) { return append(std::span<const int32_t>(&id, 1)); }

  // Called with each generated token and its text piece; return false to stop.
  using TokenCallback = std::function<bool(int32_t id, const std::string& piece)>;
  GenerateResult generate(std::span<const int32_t> prompt, const GenerateOptions& options, const TokenCallback& on_token = {});
  GenerateResult generate(std::string_view prompt, const GenerateOptions& options, const TokenCallback& on_token = {});

  // ---- a batch of sequences (GeneratorOptions::batch > 1) ----
  // Starts one sequence per prompt (at most `batch`, each at least one token; prompts of any
  // lengths) and returns the logits of each one's last token. The prompts are fed together in
  // chunks aligned at their ends: a shorter prompt pads the front of its chunks, and its padding
  // rows are written at the row its next token overwrites, so no sequence ever sees them.
  std::vector<std::vector<float>> prefill_batch(std::span<const std::vector<int32_t>> prompts);
  // One more token for each sequence prefill_batch started (ids[b] for sequence b) and the logits
  // that follow each; a negative id leaves that sequence as it is (its logits come back empty).
  std::vector<std::vector<float>> step_batch(std::span<const int32_t> ids);
  int64_t position(size_t sequence) const;  // tokens in the cache of one sequence of the batch
  // generate() for each prompt, decoded together: every step feeds one token per unfinished
  // sequence. Sequence b samples with seed options.sampling.seed + b (sequence 0 draws what
  // generate() would); each stops on its own (length, end of generation, stop token, full
  // context, or the callback returning false for it). Times are the batch's: decode_seconds is
  // the time of the steps that sequence took part in.
  using BatchTokenCallback = std::function<bool(size_t sequence, int32_t id, const std::string& piece)>;
  std::vector<GenerateResult> generate_batch(std::span<const std::vector<int32_t>> prompts, const GenerateOptions& options,
                                             const BatchTokenCallback& on_token = {});
  std::vector<GenerateResult> generate_batch(std::span<const std::string> prompts, const GenerateOptions& options,
                                             const BatchTokenCallback& on_token = {});
  int64_t batch() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rlx
