// rlx generate: text from a Llama GGUF model or a Hugging Face Llama checkpoint directory
// (rlx::Generator; a directory is converted in memory by models/llama_hf.h): the prompt is
// tokenized with the file's tokenizer (or given as ids with --prompt-ids), prefilled, then decoded
// token by token with the KV cache; the generated text (or ids, without a tokenizer) streams to
// stdout, the timings go to stderr.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli.h"
#include "io/file_access.h"
#include "models/llama_gguf.h"
#include "models/llama_hf.h"
#include "rlx/generate.h"

namespace rlx::cli {
namespace {

struct GenerateCliOptions {
  std::string model, device = "cpu", activations = "f32";
  std::vector<std::string> prompts;  // one, or several decoded as a batch
  int64_t n = 128, ctx = 0, top_k = 0, repeat_last_n = 64, chunk = 64;
  double temp = 0.0, top_p = 1.0, repeat_penalty = 1.0;
  uint64_t seed = 0;
  int threads = 0;
  std::vector<int64_t> stop, prompt_ids;
  bool no_bos = false, special = false, ignore_eos = false, ids = false, no_prompt = false, warmup = false;
};

// Several prompts: one Generator of that batch, each sequence's text printed once all are done.
int run_batch(const GgufFile& f, const GeneratorOptions& go, const GenerateOptions& opt, const GenerateCliOptions& o,
              const std::vector<std::vector<int32_t>>& prompts) {
  const auto t_load = std::chrono::steady_clock::now();
  Generator gen(f, go);
  if (o.warmup && o.n > 0) {  // compiles the prompts' chunk lengths and the decode step outside the timings
    gen.prefill_batch(prompts);
    std::vector<int32_t> next;
    for (size_t b = 0; b < prompts.size(); ++b) next.push_back(gen.position(b) < gen.max_ctx() ? prompts[b].back() : -1);
    gen.step_batch(next);
  }
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  const std::vector<GenerateResult> r = gen.generate_batch(prompts, opt);
  size_t prompt_tokens = 0, generated = 0;
  int64_t steps = 0, fed = 0;  // batched steps; tokens fed back over all sequences
  double decode_s = 0;
  for (size_t b = 0; b < r.size(); ++b) {
    std::cout << "--- sequence " << b << " (" << r[b].stop_reason << ") ---\n";
    if (o.ids) {
      for (int32_t id : r[b].tokens) std::cout << "[" << id << "]" << gen.tokenizer().piece(id);
    } else {
      if (!o.no_prompt) std::cout << o.prompts[b];
      for (int32_t id : r[b].tokens) std::cout << gen.tokenizer().piece(id);  // as a single prompt streams them
    }
    std::cout << "\n";
    prompt_tokens += r[b].prompt.size();
    generated += r[b].tokens.size();
    steps = std::max(steps, r[b].decode_steps);
    fed += r[b].decode_steps;
    decode_s = std::max(decode_s, r[b].decode_seconds);
  }
  std::cout.flush();
  const double prefill_s = r.at(0).prefill_seconds;
  std::fprintf(stderr,
               "rlx generate: %s, batch of %zu, %d thread(s) requested, cache %lld rows each, graph built and compiled "
               "in %.2f s%s\n"
               "  prompts: %zu tokens in %.3f s (%.1f tokens/s)\n"
               "  decode: %zu tokens generated, %lld batched steps in %.3f s (%.2f tokens/s over the batch)\n"
               "  compiled variants: %zu\n",
               device_name(go.device), r.size(), o.threads, static_cast<long long>(gen.max_ctx()), load_s,
               o.warmup ? " (with the warm-up run)" : " (the prompt time includes compiling each chunk length)",
               prompt_tokens, prefill_s, prefill_s > 0 ? static_cast<double>(prompt_tokens) / prefill_s : 0.0, generated,
               static_cast<long long>(steps), decode_s,
               decode_s > 0 ? static_cast<double>(fed) / decode_s : 0.0, gen.compile_count());
  return 0;
}

int run_generate(const GenerateCliOptions& o) {
  if (o.n < 0) throw UsageError("-n must be >= 0");
  if (!o.prompts.empty() && !o.prompt_ids.empty()) throw UsageError("give the prompt as text (-p) or as ids (--prompt-ids), not both");
  if (o.prompts.size() > 64) throw UsageError("at most 64 prompts (-p) are decoded as one batch");
  // Options are checked before the model loads (which may take seconds).
  GenerateOptions opt;
  opt.max_new_tokens = o.n;
  opt.sampling.temperature = o.temp;
  opt.sampling.top_k = o.top_k;
  opt.sampling.top_p = o.top_p;
  opt.sampling.repetition_penalty = o.repeat_penalty;
  opt.sampling.repeat_last_n = o.repeat_last_n;
  opt.sampling.seed = o.seed;
  { const Sampler check(opt.sampling); }  // rlx::Error naming an out-of-range option
  const bool hf_dir = models::is_hf_checkpoint_dir(o.model);
  if (!hf_dir) { const io::RegularFile probe(o.model, "model file '" + shown(o.model) + "'"); }
  GgufFile f = hf_dir ? models::load_hf_llama(o.model) : GgufFile(o.model);
  const int64_t vocab = models::read_gguf_llama_config(f).vocab;
  GeneratorOptions go;
  go.device = device_from_name(o.device);
  go.num_threads = o.threads;
  go.prefill_chunk = o.chunk;
  go.activations = dtype_from_name(o.activations);
  // The device applies the repetition penalty over a window of this many ids (a longer one samples on the host).
  if (opt.sampling.penalized()) go.sample_history = std::clamp<int64_t>(o.repeat_last_n, 1, 65536);
  // Greedy without a penalty picks the argmax: no sampling head (it would cost every decode run).
  if (opt.sampling.temperature <= 0.0 && !opt.sampling.penalized()) go.sample_candidates = 0;
  if (go.activations != DType::F32 && go.activations != DType::F16 && go.activations != DType::BF16)
    throw UsageError("--activations takes f32, f16 or bf16, not '" + o.activations + "'");
  if (go.device == Device::Cpu && go.activations != DType::F32)
    std::fprintf(stderr, "note: --activations %s computes in 16 bits, which the CPU backend runs slower than f32 "
                         "(it speeds up GPUs); f32 is the CPU's fast path\n", o.activations.c_str());
  {
    models::GgufLlamaOptions lo;
    lo.block_weights = models::block_weights_run_on(go.device);
    lo.activations = go.activations;
    const models::DequantizedAtLoad d = models::dequantized_at_load(f, lo);
    if (!d.names.empty())
      std::fprintf(stderr,
                   "note: %s has no kernels for block-quantized weights: %zu matrices ('%s', ...) are dequantized "
                   "to %s at load, %.1f MB instead of %.1f MB (the CPU, CUDA and Vulkan keep the blocks)\n",
                   o.device.c_str(), d.names.size(), d.names.front().c_str(), dtype_name(go.activations),
                   static_cast<double>(d.param_bytes) / 1e6, static_cast<double>(d.stored_bytes) / 1e6);
  }
  // Without --ctx: room for the prompt and -n tokens (rounded up to 64 rows), within the model's context.
  int64_t ctx = o.ctx;
  opt.stop_at_end_of_generation = !o.ignore_eos;
  if (hf_dir && !o.ignore_eos)  // no tokenizer to say which ids end generation: config.json's eos_token_id
    for (int32_t id : models::read_hf_llama_config(o.model).eos_ids) {
      if (id < vocab) opt.stop_tokens.push_back(id);
      else std::fprintf(stderr, "note: config.json's eos_token_id %d is beyond the vocabulary (%lld tokens): "
                                "it never ends generation\n", id, static_cast<long long>(vocab));
    }
  for (int64_t id : o.stop) {
    if (id < 0 || id >= vocab)
      throw UsageError("--stop " + std::to_string(id) + " is not a token id of this model (0.." + std::to_string(vocab - 1) + ")");
    opt.stop_tokens.push_back(static_cast<int32_t>(id));
  }
  if (o.no_bos) opt.encode.add_bos = false;
  opt.encode.parse_special = o.special;
  const bool has_tokenizer = f.find("tokenizer.ggml.model") != nullptr;
  std::vector<std::vector<int32_t>> prompts(1);
  std::vector<int32_t>& prompt = prompts[0];
  if (!o.prompt_ids.empty()) {
    for (int64_t id : o.prompt_ids) {
      if (id < 0 || id > INT32_MAX) throw UsageError("--prompt-ids: " + std::to_string(id) + " is not a token id");
      prompt.push_back(static_cast<int32_t>(id));
    }
  } else {
    if (!has_tokenizer)
      throw Error(f.what() + ": " + (hf_dir ? std::string("rlx does not read Hugging Face tokenizers") :
                                              std::string("the file has no tokenizer (tokenizer.ggml.* metadata)")) +
                  ", so it cannot encode prompt text; give the prompt as token ids: --prompt-ids 1,450,4996");
    if (o.prompts.empty()) throw UsageError("give the prompt: -p TEXT, or --prompt-ids 1,2,3");
    const Tokenizer tok = Tokenizer::from_gguf(f);
    prompts.clear();
    for (const std::string& p : o.prompts) {
      prompts.push_back(tok.encode(p, opt.encode));
      if (prompts.back().empty()) throw UsageError("the prompt '" + shown(p) + "' encodes to no tokens; give --prompt text");
    }
  }
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  if (ctx == 0) {
    const int64_t want = static_cast<int64_t>(longest) + o.n;
    ctx = (want + 63) / 64 * 64;
    const GgufValue* c = f.find(f.get_string("general.architecture") + ".context_length");
    if (c && c->is_integer() && c->as_i64() > 0) ctx = std::min(ctx, c->as_i64());
  }
  go.max_ctx = ctx;
  go.batch = static_cast<int64_t>(prompts.size());
  if (prompts.size() > 1) return run_batch(f, go, opt, o, prompts);
  const auto t_load = std::chrono::steady_clock::now();
  Generator gen(f, go);
  if (o.warmup && o.n > 0) {  // compiles the prompt's chunk lengths and the decode step outside the timings
    gen.prefill(prompt);
    if (gen.position() < gen.max_ctx()) gen.step(prompt.back());
  }
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  // Without a tokenizer the ids are the output: the prompt's, then each generated one, space-separated.
  const bool text = has_tokenizer;
  if (!o.no_prompt) {
    if (o.prompt_ids.empty()) std::cout << o.prompts[0];
    else if (text) std::cout << gen.tokenizer().decode(prompt);
    else
      for (size_t i = 0; i < prompt.size(); ++i) std::cout << (i ? " " : "") << prompt[i];
    std::cout.flush();
  }
  bool first = o.no_prompt;
  GenerateResult r = gen.generate(std::span<const int32_t>(prompt), opt, [&](int32_t id, const std::string& piece) {
    if (!text) std::cout << (first ? "" : " ") << id;
    else if (o.ids) std::cout << "[" << id << "]";
    first = false;
    std::cout << piece;
    std::cout.flush();
    return true;
  });
  std::cout << "\n";
  std::cout.flush();
  std::fprintf(stderr,
               "rlx generate: %s, %d thread(s) requested, cache %lld rows, graph built and compiled in %.2f s%s\n"
               "  prompt: %zu tokens in %.3f s (%.1f tokens/s)\n"
               "  decode: %zu tokens generated, %lld decode steps in %.3f s (%.2f tokens/s)\n"
               "  stop: %s; compiled variants: %zu\n",
               device_name(go.device), o.threads, static_cast<long long>(gen.max_ctx()), load_s,
               o.warmup ? " (with the warm-up run)" : " (the prompt time includes compiling each chunk length)", r.prompt.size(),
               r.prefill_seconds, r.prompt_tokens_per_second(), r.tokens.size(), static_cast<long long>(r.decode_steps),
               r.decode_seconds, r.decode_tokens_per_second(), r.stop_reason.c_str(), gen.compile_count());
  return 0;
}

}  // namespace

Command add_generate_command(CLI::App& parent) {
  auto o = std::make_shared<GenerateCliOptions>();
  CLI::App* sub = parent.add_subcommand(
      "generate",
      "Generate text with a Llama GGUF model or a Hugging Face Llama checkpoint directory: prefill the prompt, decode "
      "with a KV cache, stream the tokens");
  sub->add_option("model", o->model,
                  "the .gguf model (general.architecture llama, qwen2 or qwen3), or a Hugging Face checkpoint directory (config.json + "
                  "safetensors; it has no tokenizer rlx reads: give --prompt-ids)")
      ->required();
  sub->add_option("-p,--prompt", o->prompts,
                  "the prompt text (encoded with the file's tokenizer); repeated, the prompts are decoded together as "
                  "a batch (one weight read a step for all) and each result is printed when all are done");
  sub->add_option("--prompt-ids", o->prompt_ids,
                  "the prompt as token ids, e.g. 1,450,4996 (used as given: no BOS added); without a tokenizer the "
                  "output is ids too")
      ->delimiter(',');
  sub->add_option("-n,--n-predict", o->n, "tokens to generate at most (default 128)");
  sub->add_option("--device", o->device, "cpu (default), cuda, vulkan or webgpu");
  sub->add_option("--temp", o->temp, "sampling temperature; 0 (default) = greedy");
  sub->add_option("--top-k", o->top_k, "keep the k most likely tokens (0 = off, default)");
  sub->add_option("--top-p", o->top_p, "keep the most likely tokens up to this probability mass (1 = off, default)");
  sub->add_option("--repeat-penalty", o->repeat_penalty, "repetition penalty (1 = off, default)");
  sub->add_option("--repeat-last-n", o->repeat_last_n, "tokens the repetition penalty looks back over (default 64)");
  sub->add_option("--seed", o->seed, "sampling seed (default 0)")->check(unsigned_64_validator());
  sub->add_option("--ctx", o->ctx, "KV cache rows (default: prompt + n rounded up to 64, within the model's context)");
  sub->add_option("--activations", o->activations,
                  "the dtype the model computes in and keeps its KV cache in: f32 (default), bf16 or f16 "
                  "(PyTorch's precision for 16-bit models; faster on GPUs)");
  sub->add_option("--chunk", o->chunk, "largest prompt chunk per prefill run, a power of two (default 64)");
  sub->add_option("-t,--threads", o->threads, "CPU threads (default: all)")->check(CLI::Range(0, kMaxThreads));
  sub->add_flag("--no-bos", o->no_bos, "do not put the BOS token in front of the prompt");
  sub->add_flag("--special", o->special, "control tokens written in the prompt (<|eot_id|>, ...) become their ids");
  sub->add_flag("--ignore-eos", o->ignore_eos,
                "keep generating after an end-of-generation token (the tokenizer's, or a checkpoint's eos_token_id)");
  sub->add_option("--stop", o->stop, "a token id that ends generation (repeatable; kept in the output)");
  sub->add_flag("--ids", o->ids, "print each generated token's id before its text");
  sub->add_flag("--no-echo", o->no_prompt, "do not print the prompt before the generated text");
  sub->add_flag("--warmup", o->warmup,
                "run the prompt and one decode step once before the timed run, so that the timings exclude compiling");
  return {sub, [o] { return run_generate(*o); }};
}

}  // namespace rlx::cli
