// Generation on the CPU (rlx::Generator): a random-weight Llama written as GGUF here (default
// ~134M parameters: 12 blocks, hidden 768, 12 heads / 4 KV heads, ffn 2048, vocab 32000, every
// matrix Q4_0) with a synthetic SentencePiece tokenizer, then prefill of a prompt and greedy
// decode, at each thread count and cache length asked for. Decode tokens/s counts decode runs
// (one token fed back each); prompt tokens/s the prefill of the whole prompt.
//   bench_generate [--type q4_0] [--layers 12] [--hidden 768] [--ffn 2048] [--vocab 32000]
//                  [--prompt 64] [--n 64] [--ctx 256,1024] [--threads 1,2] [--save model.gguf] [--profile 1]
//                  [--tokenize-bytes N]  (also times the tokenizer on N bytes of text)
// --save keeps the file, so that `rlx generate model.gguf -p "..." -n 64 --ctx 256 -t 1` can run it.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "rlx/generate.h"
#include "runtime/device_profile.h"

namespace {

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

}  // namespace

int main(int argc, char** argv) {
  std::string type = "q4_0", save;
  bool profile = false;
  int64_t tokenize_bytes = 0;
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
    else if (a == "--tokenize-bytes") tokenize_bytes = std::atoll(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  try {
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
    const std::string bytes = w.bytes();
    if (!save.empty()) w.save(save);
    const rlx::GgufFile f = rlx::GgufFile::from_bytes(bytes.data(), bytes.size(), "bench.gguf");
    const double write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("model: llama %lld blocks, hidden %lld, heads %lld (kv %lld), ffn %lld, vocab %lld, %s, %.1fM params, "
                "%.1f MiB file (made in %.1f s)\n",
                static_cast<long long>(layers), static_cast<long long>(hidden), static_cast<long long>(heads),
                static_cast<long long>(kv_heads), static_cast<long long>(ffn), static_cast<long long>(vocab), type.c_str(),
                static_cast<double>(params) / 1e6, static_cast<double>(bytes.size()) / (1 << 20), write_s);
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
    std::printf("prompt %lld tokens, %lld generated (greedy)\n\n", static_cast<long long>(prompt_len), static_cast<long long>(n));
    std::printf("| threads | ctx | compile + load s | prompt tok/s | decode tok/s | decode ms/token | compiled variants |\n");
    std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
    for (int64_t i = 0; i < prompt_len; ++i) prompt[static_cast<size_t>(i)] = static_cast<int32_t>(3 + (i * 7919) % (vocab - 3));
    for (int64_t ctx : ctxs)
      for (int64_t th : threads) {
        const auto a = std::chrono::steady_clock::now();
        rlx::Generator gen(f, {.num_threads = static_cast<int>(th), .max_ctx = ctx});
        const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
        rlx::GenerateOptions o;
        o.max_new_tokens = 4;  // warm-up: compiles the prompt's chunk lengths and the decode step
        o.stop_at_end_of_generation = false;
        gen.generate(std::span<const int32_t>(prompt), o);
        o.max_new_tokens = n;
        if (profile) {
          rlx::enable_device_profile(rlx::Device::Cpu);
          rlx::take_device_profile(rlx::Device::Cpu);
        }
        const rlx::GenerateResult r = gen.generate(std::span<const int32_t>(prompt), o);
        if (profile) std::printf("CPU steps of the measured prompt + decode:\n%s", rlx::take_device_profile(rlx::Device::Cpu).c_str());
        std::printf("| %lld | %lld | %.2f | %.1f | %.2f | %.1f | %zu |\n", static_cast<long long>(th),
                    static_cast<long long>(ctx), load_s, r.prompt_tokens_per_second(), r.decode_tokens_per_second(),
                    1000.0 / r.decode_tokens_per_second(), gen.compile_count());
        std::fflush(stdout);
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_generate: %s\n", e.what());
    return 1;
  }
  return 0;
}
