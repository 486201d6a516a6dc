// Generation on the CPU (rlx::Generator): a random-weight Llama written as GGUF here (default
// ~134M parameters: 12 blocks, hidden 768, 12 heads / 4 KV heads, ffn 2048, vocab 32000, every
// matrix Q4_0) with a synthetic SentencePiece tokenizer, then prefill of a prompt and greedy
// decode, at each thread count and cache length asked for. Decode tokens/s counts decode runs
// (one token fed back each); prompt tokens/s the prefill of the whole prompt.
//   bench_generate [--type q4_0] [--layers 12] [--hidden 768] [--ffn 2048] [--vocab 32000]
//                  [--prompt 64] [--n 64] [--ctx 256,1024] [--threads 1,2] [--save model.gguf] [--profile 1]
//                  (--profile: kernel times of one prompt and of the decode steps, apart: the CPU's
//                   step wall times, or the GPU backend's device times per op kind; taken after the
//                   first configuration's measured runs and on from then: measure one configuration
//                   per process when profiling a GPU, whose profile runs without graphs)
//                  [--device cpu|cuda|vulkan|webgpu]  (GeneratorOptions::device; default cpu)
//                  [--peak-gbps G]  (memory bandwidth: the decode step's bytes over it give the
//                                    fraction of the DRAM bound printed per configuration)
//                  [--tokenize-bytes N]  (also times the tokenizer on N bytes of text)
//                  [--write-model model.gguf]  (write the file and stop: no benchmark)
//                  [--model model.gguf]  (benchmark this file instead of writing one)
//                  [--prompt-ids 1,5,9,...]  (the prompt as token ids, used as given: no BOS added)
//                  [--repeat N]  (measured runs per thread count and cache size; the medians are printed;
//                                 0: none, e.g. with --trace only)
//                  [--chunk 64]  (GeneratorOptions::prefill_chunk)
//                  [--activations f32|bf16|f16]  (GeneratorOptions::activations; default f32)
//                  [--host-pick 1]  (GenerateOptions::pick_on_device = false: the logits come back)
//                  [--temp T] [--top-k K] [--top-p P] [--repeat-penalty R]  (sampling instead of greedy;
//                                the device picks from its top candidates unless --host-pick)
//                  [--candidates K]  (GeneratorOptions::sample_candidates; default 128)
//                  [--batch B]  (GeneratorOptions::batch: B prompts decoded together by generate_batch,
//                                each its own rotation of the prompt; tokens/s are summed over the batch)
//                  [--trace out.json]  (greedy ids of the first thread count and cache size, with the
//                                       top-8 logits of each step: {"tokens": [...], "top": [[[id, logit], ...], ...]})
//                  [--follow-ids 7,3,...]  (with --trace: feed these ids back instead of the argmax, teacher
//                                           forcing another runtime's greedy tokens; "tokens" stays the argmax)
// --save keeps the file, so that `rlx generate model.gguf -p "..." -n 64 --ctx 256 -t 1` can run it.
// Each measured configuration also prints a machine-readable line:
//   BENCH_GENERATE threads=T ctx=C prompt_tokens=P prompt_tps=X decode_steps=D decode_tps=Y host_picks=H/N
// (bench/bench_llm_cpu.py reads it).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <algorithm>
#include <vector>

#include "rlx/generate.h"
#include "models/llama_gguf.h"
#include "runtime/device_api.h"
#include "runtime/device_profile.h"

namespace {

rlx::SamplingOptions g_sampling;  // --temp / --top-k / --top-p / --repeat-penalty
int64_t g_candidates = 128;       // --candidates

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> out;
  for (const char* p = s; *p;) {
    char* end = nullptr;
    out.push_back(std::strtoll(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p) break;
  }
  return out;
}

rlx::Tensor randn(std::vector<int64_t> shape, uint64_t seed, float scale, float mean = 0.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(mean, scale);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return rlx::Tensor::f32(std::move(shape), v);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Greedy as rlx::Sampler does it (argmax, lowest id on ties), and the k largest logits.
std::vector<std::pair<int32_t, float>> top_logits(const std::vector<float>& l, size_t k) {
  std::vector<int32_t> ids(l.size());
  for (size_t i = 0; i < l.size(); ++i) ids[i] = static_cast<int32_t>(i);
  k = std::min(k, ids.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), [&](int32_t a, int32_t b) {
    return l[static_cast<size_t>(a)] > l[static_cast<size_t>(b)] || (l[static_cast<size_t>(a)] == l[static_cast<size_t>(b)] && a < b);
  });
  std::vector<std::pair<int32_t, float>> out;
  for (size_t i = 0; i < k; ++i) out.emplace_back(ids[i], l[static_cast<size_t>(ids[i])]);
  return out;
}

// Bytes of weights a decode step reads: every tensor as the Generator's graph for `o` holds it
// (models::held_bytes: blocks, or params of the activations' dtype), but of the token embedding
// one row (unless the output projection is tied to it and reads it whole).
double decode_weight_bytes(const rlx::GgufFile& f, bool tied, const rlx::models::GgufLlamaOptions& o) {
  double bytes = 0;
  for (const rlx::GgufTensorInfo& t : f.tensors()) {
    const bool embedding = t.name == "token_embd.weight";
    const int64_t rows = t.ne.size() > 1 ? t.numel / t.ne[0] : 1;
    const auto held = static_cast<double>(rlx::models::held_bytes(f, t, o));
    bytes += embedding && !tied ? held / static_cast<double>(rows) : held;
  }
  return bytes;
}

// --batch: B rotations of the prompt decoded together; prints the table row with tokens/s summed
// over the batch and a BENCH_GENERATE line with batch=B.
void bench_batch(const rlx::GgufFile& f, const rlx::GeneratorOptions& go, const std::vector<int32_t>& prompt, int64_t n,
                 int64_t repeat, bool profile, bool host_pick) {
  const auto a = std::chrono::steady_clock::now();
  rlx::Generator gen(f, go);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t b = 0; b < go.batch; ++b) {
    std::vector<int32_t> p = prompt;
    std::rotate(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(b) % p.size()), p.end());
    prompts.push_back(p);
  }
  rlx::GenerateOptions o;
  o.max_new_tokens = 4;  // warm-up: compiles the prompt's chunk lengths and the decode step
  o.stop_at_end_of_generation = false;
  o.pick_on_device = !host_pick;
  o.sampling = g_sampling;
  if (repeat > 0) gen.generate_batch(prompts, o);
  o.max_new_tokens = n;
  std::vector<double> prompt_tps, decode_tps;
  int64_t steps = 0, host_picks = 0, picks = 0;
  for (int64_t rep = 0; rep < repeat; ++rep) {
    const std::vector<rlx::GenerateResult> r = gen.generate_batch(prompts, o);
    int64_t fed = 0;
    for (const rlx::GenerateResult& x : r) fed += x.decode_steps, host_picks += x.host_picks, picks += static_cast<int64_t>(x.tokens.size());
    steps = r[0].decode_steps;
    prompt_tps.push_back(static_cast<double>(prompt.size() * prompts.size()) / r[0].prefill_seconds);
    decode_tps.push_back(r[0].decode_seconds > 0 ? static_cast<double>(fed) / r[0].decode_seconds : 0.0);
  }
  if (repeat == 0) return;
  const double ptps = median(prompt_tps), dtps = median(decode_tps);
  std::printf("| %d (batch %lld) | %lld | %.2f | %.1f | %.2f | %.2f a step | %zu |\n", go.num_threads,
              static_cast<long long>(go.batch), static_cast<long long>(go.max_ctx), load_s, ptps, dtps,
              1000.0 * static_cast<double>(go.batch) / dtps, gen.compile_count());
  std::printf("BENCH_GENERATE threads=%d ctx=%lld batch=%lld prompt_tokens=%zu prompt_tps=%.3f decode_steps=%lld "
              "decode_tps=%.3f host_picks=%lld/%lld\n",
              go.num_threads, static_cast<long long>(go.max_ctx), static_cast<long long>(go.batch),
              prompt.size() * prompts.size(), ptps, static_cast<long long>(steps), dtps, static_cast<long long>(host_picks),
              static_cast<long long>(picks));
  if (go.device != rlx::Device::Cpu) {  // a batched step's wall time against its device time, then its profile
    gen.prefill_batch(prompts);
    std::vector<double> wall, dev;
    const std::vector<int32_t> next(prompts.size(), 5);
    for (int64_t step = 1; step < n && gen.position(0) < go.max_ctx; ++step) {
      const auto a0 = std::chrono::steady_clock::now();
      gen.step_batch(next);
      wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a0).count());
      dev.push_back(rlx::device_stats().last_device_ms);
    }
    if (!wall.empty())
      std::printf("batched decode step (median of %zu): %.3f ms wall, %.3f ms on the device\n", wall.size(), median(wall),
                  median(dev));
    if (profile) {
      rlx::enable_device_profile(go.device);
      rlx::take_device_profile(go.device);
      for (int step = 0; step < 8 && gen.position(0) < go.max_ctx; ++step) gen.step_batch(next);
      std::printf("%s steps of 8 batched decode steps:\n%s", rlx::device_name(go.device),
                  rlx::take_device_profile(go.device).c_str());
    }
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string type = "q4_0", save, write_model, model_path, trace;
  bool profile = false, host_pick = false;
  rlx::Device device = rlx::Device::Cpu;
  double peak_gbps = 0;
  int64_t tokenize_bytes = 0, repeat = 1, chunk = 64, batch = 1;
  rlx::DType activations = rlx::DType::F32;
  std::vector<int64_t> prompt_ids, follow_ids;
  int64_t layers = 12, hidden = 768, ffn = 2048, vocab = 32000, heads = 12, kv_heads = 4, prompt_len = 64, n = 64;
  std::vector<int64_t> ctxs = {256, 1024}, threads = {1, 2};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--type") type = v;
    else if (a == "--layers") layers = std::atoll(v);
    else if (a == "--hidden") hidden = std::atoll(v);
    else if (a == "--ffn") ffn = std::atoll(v);
    else if (a == "--vocab") vocab = std::atoll(v);
    else if (a == "--heads") heads = std::atoll(v);
    else if (a == "--kv-heads") kv_heads = std::atoll(v);
    else if (a == "--prompt") prompt_len = std::atoll(v);
    else if (a == "--n") n = std::atoll(v);
    else if (a == "--ctx") ctxs = parse_list(v);
    else if (a == "--threads") threads = parse_list(v);
    else if (a == "--save") save = v;
    else if (a == "--profile") profile = std::atoi(v) != 0;
    else if (a == "--device") device = rlx::device_from_name(v);
    else if (a == "--peak-gbps") peak_gbps = std::atof(v);
    else if (a == "--tokenize-bytes") tokenize_bytes = std::atoll(v);
    else if (a == "--write-model") write_model = v;
    else if (a == "--model") model_path = v;
    else if (a == "--prompt-ids") prompt_ids = parse_list(v);
    else if (a == "--repeat") repeat = std::max<int64_t>(0, std::atoll(v));
    else if (a == "--chunk") chunk = std::atoll(v);
    else if (a == "--activations") activations = rlx::dtype_from_name(v);
    else if (a == "--trace") trace = v;
    else if (a == "--follow-ids") follow_ids = parse_list(v);
    else if (a == "--batch") batch = std::max<int64_t>(1, std::atoll(v));
    else if (a == "--host-pick") host_pick = std::atoi(v) != 0;
    else if (a == "--temp") g_sampling.temperature = std::atof(v);
    else if (a == "--top-k") g_sampling.top_k = std::atoll(v);
    else if (a == "--top-p") g_sampling.top_p = std::atof(v);
    else if (a == "--repeat-penalty") g_sampling.repetition_penalty = std::atof(v);
    else if (a == "--candidates") g_candidates = std::atoll(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  try {
    std::unique_ptr<rlx::GgufFile> file;
    if (!model_path.empty()) {
      file = std::make_unique<rlx::GgufFile>(model_path);
      std::printf("model: %s\n", model_path.c_str());
    } else {
    const rlx::GgmlType qt = rlx::ggml_type_from_name(type);
    const auto t0 = std::chrono::steady_clock::now();
    rlx::GgufWriter w;
    w.add("general.architecture", rlx::GgufValue::string("llama"));
    w.add("llama.block_count", rlx::GgufValue::u32(static_cast<uint32_t>(layers)));
    w.add("llama.context_length", rlx::GgufValue::u32(4096));
    w.add("llama.embedding_length", rlx::GgufValue::u32(static_cast<uint32_t>(hidden)));
    w.add("llama.feed_forward_length", rlx::GgufValue::u32(static_cast<uint32_t>(ffn)));
    w.add("llama.attention.head_count", rlx::GgufValue::u32(static_cast<uint32_t>(heads)));
    w.add("llama.attention.head_count_kv", rlx::GgufValue::u32(static_cast<uint32_t>(kv_heads)));
    // llama.cpp requires the norm epsilon (no default there); rlx defaults it to 1e-5 as written.
    w.add("llama.attention.layer_norm_rms_epsilon", rlx::GgufValue::f32(1e-5f));
    w.add("llama.rope.freq_base", rlx::GgufValue::f32(10000.0f));
    w.add("llama.rope.dimension_count", rlx::GgufValue::u32(static_cast<uint32_t>(hidden / heads)));
    w.add("llama.vocab_size", rlx::GgufValue::u32(static_cast<uint32_t>(vocab)));
    // Tokenizer: <unk> <s> </s>, the 256 byte tokens, ▁, printable ASCII, then "▁w<i>" words.
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<int64_t> types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      tokens.push_back(buf);
      types.push_back(6);
    }
    tokens.push_back("\xE2\x96\x81");
    types.push_back(1);
    for (char c = 33; c < 127; ++c) {
      tokens.push_back(std::string(1, c));
      types.push_back(1);
    }
    for (int64_t i = 0; static_cast<int64_t>(tokens.size()) < vocab; ++i) {
      tokens.push_back("\xE2\x96\x81w" + std::to_string(i));
      types.push_back(1);
    }
    std::vector<double> scores(tokens.size(), -1.0);
    w.add("tokenizer.ggml.model", rlx::GgufValue::string("llama"));
    w.add("tokenizer.ggml.tokens", rlx::GgufValue::strings(tokens));
    w.add("tokenizer.ggml.scores", rlx::GgufValue::array_of(rlx::GgufValueType::F32, scores));
    w.add("tokenizer.ggml.token_type", rlx::GgufValue::array_of_i64(rlx::GgufValueType::I32, types));
    w.add("tokenizer.ggml.bos_token_id", rlx::GgufValue::u32(1));
    w.add("tokenizer.ggml.eos_token_id", rlx::GgufValue::u32(2));
    const int64_t d = hidden / heads;
    const float s = 1.0f / std::sqrt(static_cast<float>(hidden));
    uint64_t seed = 1;
    int64_t params = 0;
    auto add = [&](const std::string& name, const rlx::Tensor& t, bool quantize) {
      params += t.numel();
      if (quantize && qt != rlx::GgmlType::F32) w.add_tensor(name, t, qt);
      else w.add_tensor(name, t);
    };
    add("token_embd.weight", randn({vocab, hidden}, seed++, 1.0f), true);
    for (int64_t i = 0; i < layers; ++i) {
      const std::string p = "blk." + std::to_string(i) + ".";
      add(p + "attn_norm.weight", randn({hidden}, seed++, 0.1f, 1.0f), false);
      add(p + "attn_q.weight", randn({heads * d, hidden}, seed++, s), true);
      add(p + "attn_k.weight", randn({kv_heads * d, hidden}, seed++, s), true);
      add(p + "attn_v.weight", randn({kv_heads * d, hidden}, seed++, s), true);
      add(p + "attn_output.weight", randn({hidden, heads * d}, seed++, s), true);
      add(p + "ffn_norm.weight", randn({hidden}, seed++, 0.1f, 1.0f), false);
      add(p + "ffn_gate.weight", randn({ffn, hidden}, seed++, s), true);
      add(p + "ffn_up.weight", randn({ffn, hidden}, seed++, s), true);
      add(p + "ffn_down.weight", randn({hidden, ffn}, seed++, 1.0f / std::sqrt(static_cast<float>(ffn))), true);
    }
    add("output_norm.weight", randn({hidden}, seed++, 0.1f, 1.0f), false);
    add("output.weight", randn({vocab, hidden}, seed++, s), true);
    if (!write_model.empty()) {
      w.save(write_model);
      std::printf("wrote %s: llama %lld blocks, hidden %lld, heads %lld (kv %lld), ffn %lld, vocab %lld, %s, %.1fM params\n",
                  write_model.c_str(), static_cast<long long>(layers), static_cast<long long>(hidden),
                  static_cast<long long>(heads), static_cast<long long>(kv_heads), static_cast<long long>(ffn),
                  static_cast<long long>(vocab), type.c_str(), static_cast<double>(params) / 1e6);
      return 0;
    }
    const std::string bytes = w.bytes();
    if (!save.empty()) w.save(save);
    file = std::make_unique<rlx::GgufFile>(rlx::GgufFile::from_bytes(bytes.data(), bytes.size(), "bench.gguf"));
    const double write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("model: llama %lld blocks, hidden %lld, heads %lld (kv %lld), ffn %lld, vocab %lld, %s, %.1fM params, "
                "%.1f MiB file (made in %.1f s)\n",
                static_cast<long long>(layers), static_cast<long long>(hidden), static_cast<long long>(heads),
                static_cast<long long>(kv_heads), static_cast<long long>(ffn), static_cast<long long>(vocab), type.c_str(),
                static_cast<double>(params) / 1e6, static_cast<double>(bytes.size()) / (1 << 20), write_s);
    }
    const rlx::GgufFile& f = *file;
    if (tokenize_bytes > 0) {  // the tokenizer alone: encode and decode of an English-like text
      const rlx::Tokenizer tok = rlx::Tokenizer::from_gguf(f);
      const char* words[] = {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog,", "and", "then", "forest."};
      std::string text;
      for (size_t i = 0; static_cast<int64_t>(text.size()) < tokenize_bytes; ++i) text += std::string(words[(i * 7) % 11]) + " ";
      auto a = std::chrono::steady_clock::now();
      const std::vector<int32_t> ids = tok.encode(text);
      const double enc = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
      a = std::chrono::steady_clock::now();
      const std::string back = tok.decode(ids);
      const double dec = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
      std::printf("tokenizer: %zu bytes -> %zu tokens: encode %.3f s (%.2f MB/s), decode %.3f s, round trip %s\n\n",
                  text.size(), ids.size(), enc, static_cast<double>(text.size()) / enc / 1e6, dec,
                  back == text ? "exact" : "DIFFERS");
    }
    std::vector<int32_t> prompt;
    if (!prompt_ids.empty()) {
      for (int64_t id : prompt_ids) prompt.push_back(static_cast<int32_t>(id));
    } else {
      if (const rlx::GgufValue* t = f.find("tokenizer.ggml.tokens")) vocab = static_cast<int64_t>(t->as_strings().size());
      for (int64_t i = 0; i < prompt_len; ++i) prompt.push_back(static_cast<int32_t>(3 + (i * 7919) % (vocab - 3)));
    }
    std::printf("prompt %zu tokens, %lld generated (greedy), %lld measured run(s) each (medians)\n\n", prompt.size(),
                static_cast<long long>(n), static_cast<long long>(repeat));
    std::printf("| threads | ctx | compile + load s | prompt tok/s | decode tok/s | decode ms/token | compiled variants |\n");
    std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
    const rlx::models::GgufLlamaConfig llama = rlx::models::read_gguf_llama_config(f);
    rlx::models::GgufLlamaOptions held;  // as the Generator builds the graph for the device
    held.half_weights = rlx::models::half_weights_run_on(device);
    held.block_weights = rlx::models::block_weights_run_on(device);
    held.activations = activations;
    const double weight_bytes = decode_weight_bytes(f, llama.tied_output, held);
    // The K and V caches of all blocks (of the activations' dtype), bytes per cached position.
    const double kv_row_bytes =
        static_cast<double>(llama.layers * 2 * llama.kv_heads * llama.head_dim * rlx::dtype_size(activations));
    bool traced = false;
    for (int64_t ctx : ctxs)
      for (int64_t th : threads) {
        if (batch > 1) {
          bench_batch(f, {.device = device, .num_threads = static_cast<int>(th), .max_ctx = ctx, .prefill_chunk = chunk,
                          .activations = activations, .batch = batch, .sample_candidates = g_candidates},
                      prompt, n, repeat, profile, host_pick);
          continue;
        }
        const auto a = std::chrono::steady_clock::now();
        rlx::Generator gen(f, {.device = device, .num_threads = static_cast<int>(th), .max_ctx = ctx, .prefill_chunk = chunk,
                           .activations = activations, .sample_candidates = g_candidates});
        const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
        rlx::GenerateOptions o;
        o.max_new_tokens = 4;  // warm-up: compiles the prompt's chunk lengths and the decode step
        o.stop_at_end_of_generation = false;
        o.pick_on_device = !host_pick;
        o.sampling = g_sampling;
        if (repeat > 0) gen.generate(std::span<const int32_t>(prompt), o);
        o.max_new_tokens = n;
        std::vector<double> prompt_tps, decode_tps;
        int64_t steps = 0, host_picks = 0, picks = 0;
        for (int64_t rep = 0; rep < repeat; ++rep) {
          const rlx::GenerateResult r = gen.generate(std::span<const int32_t>(prompt), o);
          prompt_tps.push_back(r.prompt_tokens_per_second());
          decode_tps.push_back(r.decode_tokens_per_second());
          steps = r.decode_steps;
          host_picks += r.host_picks;
          picks += static_cast<int64_t>(r.tokens.size());
        }
        if (repeat > 0 && device != rlx::Device::Cpu) {  // the last decode run of generate() on the device
          std::printf("generate(): %.3f ms a decode step, the last one %.3f ms on the device (picked on the %s)\n",
                      1000.0 / median(decode_tps), rlx::device_stats().last_device_ms, host_pick ? "host" : "device");
          // The time between tokens inside one generate() (each a decode run, but the first).
          std::vector<double> gaps;
          auto t_prev = std::chrono::steady_clock::now();
          gen.generate(std::span<const int32_t>(prompt), o, [&](int32_t, const std::string&) {
            const auto t_now = std::chrono::steady_clock::now();
            gaps.push_back(std::chrono::duration<double, std::milli>(t_now - t_prev).count());
            t_prev = t_now;
            return true;
          });
          if (gaps.size() > 2) {
            std::string firsts;
            for (size_t i = 1; i < std::min<size_t>(gaps.size(), 9); ++i) firsts += " " + std::to_string(gaps[i]).substr(0, 5);
            const std::vector<double> steps_only(gaps.begin() + 1, gaps.end());
            std::printf("generate() token gaps: first decode steps%s ms; median %.3f, max %.3f ms\n", firsts.c_str(),
                        median(steps_only), *std::max_element(steps_only.begin(), steps_only.end()));
          }
        }
        if (repeat > 0 && device != rlx::Device::Cpu) {  // a decode step's wall time against its device time
          std::vector<float> logits = gen.prefill(prompt);
          std::vector<double> wall, dev;
          for (int64_t step = 1; step < n; ++step) {
            const auto a0 = std::chrono::steady_clock::now();
            logits = gen.step(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
            wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a0).count());
            dev.push_back(rlx::device_stats().last_device_ms);
          }
          if (!wall.empty())
            std::printf("decode step (median of %zu): %.3f ms wall, %.3f ms on the device (its recorded work), "
                        "%.3f ms around it (inputs, logits, host)\n",
                        wall.size(), median(wall), median(dev), median(wall) - median(dev));
        }
        if (profile) {  // after the measured runs (a GPU profile times each step alone, without graphs)
          rlx::enable_device_profile(device);
          rlx::take_device_profile(device);
          {  // generate() as measured above (greedy on the device unless --host-pick)
            rlx::GenerateOptions go = o;
            go.max_new_tokens = 16;
            gen.generate(std::span<const int32_t>(prompt), go);
            std::printf("%s steps of generate() (the prompt and 15 decode steps):\n%s", rlx::device_name(device),
                        rlx::take_device_profile(device).c_str());
          }
          auto a0 = std::chrono::steady_clock::now();
          std::vector<float> logits = gen.prefill(prompt);
          const double pre_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - a0).count();
          std::printf("%s steps of the prompt (%zu tokens, %.2f ms wall):\n%s", rlx::device_name(device), prompt.size(), pre_s * 1e3,
                      rlx::take_device_profile(device).c_str());
          a0 = std::chrono::steady_clock::now();
          for (int64_t step = 1; step < n; ++step)
            logits = gen.step(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
          const double dec_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - a0).count();
          std::printf("%s steps of %lld decode steps (%.3f ms wall a step):\n%s", rlx::device_name(device),
                      static_cast<long long>(n - 1),
                      dec_s * 1e3 / static_cast<double>(std::max<int64_t>(1, n - 1)),
                      rlx::take_device_profile(device).c_str());
        }
        const double ptps = median(prompt_tps), dtps = median(decode_tps);
        if (repeat > 0) {
          std::printf("| %lld | %lld | %.2f | %.1f | %.2f | %.1f | %zu |\n", static_cast<long long>(th),
                      static_cast<long long>(ctx), load_s, ptps, dtps, 1000.0 / dtps, gen.compile_count());
          std::printf("BENCH_GENERATE threads=%lld ctx=%lld prompt_tokens=%zu prompt_tps=%.3f decode_steps=%lld decode_tps=%.3f "
                      "host_picks=%lld/%lld\n",
                      static_cast<long long>(th), static_cast<long long>(ctx), prompt.size(), ptps,
                      static_cast<long long>(steps), dtps, static_cast<long long>(host_picks), static_cast<long long>(picks));
        }
        if (repeat > 0 && peak_gbps > 0) {  // the DRAM bound of a decode step at its mean position
          const double mean_pos = static_cast<double>(prompt.size()) + static_cast<double>(steps) / 2;
          const double kv = kv_row_bytes * mean_pos, bound_ms = (weight_bytes + kv) / (peak_gbps * 1e6);
          std::printf("decode bytes a token: weights %.1f MB + KV cache %.1f MB (%s, mean position %.0f); at %.0f GB/s "
                      "%.3f ms = %.1f%% of the DRAM bound\n",
                      weight_bytes / 1e6, kv / 1e6, rlx::dtype_name(activations), mean_pos, peak_gbps, bound_ms, 100.0 * bound_ms * dtps / 1000.0);
        }
        std::fflush(stdout);
        if (!trace.empty() && !traced) {  // greedy ids and the top logits of each step
          traced = true;
          std::vector<float> logits = gen.prefill(prompt);
          std::ofstream out(trace);
          std::string tokens = "[", tops = "[";
          for (int64_t step = 0; step < n; ++step) {
            const auto top = top_logits(logits, 8);
            tokens += (step ? "," : "") + std::to_string(top[0].first);
            tops += step ? ",[" : "[";
            for (size_t k = 0; k < top.size(); ++k) {
              char buf[64];
              std::snprintf(buf, sizeof buf, "%s[%d,%.6g]", k ? "," : "", top[k].first, static_cast<double>(top[k].second));
              tops += buf;
            }
            tops += "]";
            const int32_t next = static_cast<size_t>(step) < follow_ids.size()
                                     ? static_cast<int32_t>(follow_ids[static_cast<size_t>(step)]) : top[0].first;
            if (step + 1 < n) logits = gen.step(next);
          }
          out << "{\"tokens\": " << tokens << "],\n \"top\": " << tops << "]}\n";
          if (!out) throw rlx::Error("cannot write " + trace);
        }
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_generate: %s\n", e.what());
    return 1;
  }
  return 0;
}
