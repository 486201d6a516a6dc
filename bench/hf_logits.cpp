// The logits rlx computes for a Llama model (a Hugging Face checkpoint directory or a GGUF file),
// written as .npy for another runtime to compare against (bench/hf_llama_parity.py does it with
// transformers), and greedy generations.
//   hf_logits --model DIR|model.gguf --prompt-ids 1,5,9 [--follow-ids 7,3,...] [--device cpu|cuda|vulkan|webgpu]
//             [--threads N] [--logits steps.npy] [--seq-logits seq.npy] [--generate N] [--ctx N]
//   --logits      rlx::Generator (the KV-cache decoder): the prompt prefilled, then each follow id
//                 fed as one decode step (teacher forcing); f32 (1 + F, vocab): row 0 the logits
//                 after the prompt's last token, row i those after follow id i.
//   --seq-logits  the teacher-forced graph (models::build_llama_from_gguf) over prompt + follow
//                 ids in one run: f32 (P + F, vocab), row t the logits after token t.
//   --generate N  greedy (argmax, lowest id on ties) from the prompt for N tokens, no stop token;
//                 printed as "HF_LOGITS_GREEDY id,id,...".
//   --ctx         the generator's cache rows (default: enough for the prompt, the follow ids and N).
//   --activations f32 (default) | bf16 | f16: the dtype the model computes in (GeneratorOptions /
//                 GgufLlamaOptions::activations), for both the generator and the whole-sequence graph.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "models/llama_gguf.h"
#include "models/llama_hf.h"
#include "rlx/generate.h"
#include "rlx/serialize.h"

namespace {

std::vector<int32_t> parse_ids(const std::string& opt, const std::string& s) {
  std::vector<int32_t> out;
  size_t at = 0;
  while (at < s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    const std::string item = s.substr(at, comma - at);
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > INT32_MAX)
      throw rlx::Error(opt + ": '" + item + "' is not a token id (give ids separated by commas, e.g. 1,5,9)");
    out.push_back(static_cast<int32_t>(v));
    at = comma + 1;
  }
  return out;
}

int64_t parse_int(const std::string& opt, const std::string& s) {
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < 0) throw rlx::Error(opt + ": '" + s + "' is not a non-negative integer");
  return v;
}

std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string model, device = "cpu", logits_path, seq_path;
    rlx::DType act = rlx::DType::F32;
    std::vector<int32_t> prompt, follow;
    int64_t threads = 0, generate = 0, ctx = 0;
    for (int i = 1; i < argc; i += 2) {
      const std::string a = argv[i];
      if (i + 1 >= argc) throw rlx::Error(a + " needs a value");
      const std::string v = argv[i + 1];
      if (a == "--model") model = v;
      else if (a == "--device") device = v;
      else if (a == "--threads") threads = parse_int(a, v);
      else if (a == "--prompt-ids") prompt = parse_ids(a, v);
      else if (a == "--follow-ids") follow = parse_ids(a, v);
      else if (a == "--logits") logits_path = v;
      else if (a == "--seq-logits") seq_path = v;
      else if (a == "--generate") generate = parse_int(a, v);
      else if (a == "--ctx") ctx = parse_int(a, v);
      else if (a == "--activations") act = rlx::dtype_from_name(v);
      else throw rlx::Error("unknown option " + a + " (see the comment at the top of bench/hf_logits.cpp)");
    }
    if (model.empty()) throw rlx::Error("--model DIR|model.gguf is required");
    if (prompt.empty()) throw rlx::Error("--prompt-ids is required (at least one token id)");
    const rlx::Device dev = rlx::device_from_name(device);
    const rlx::GgufFile f = rlx::models::is_hf_checkpoint_dir(model) ? rlx::models::load_hf_llama(model) : rlx::GgufFile(model);
    const rlx::models::GgufLlamaConfig c = rlx::models::read_gguf_llama_config(f);
    std::printf("HF_LOGITS model=%s device=%s vocab=%lld layers=%lld hidden=%lld\n", model.c_str(), rlx::device_name(dev),
                static_cast<long long>(c.vocab), static_cast<long long>(c.layers), static_cast<long long>(c.hidden));
    const auto vocab = c.vocab;
    if (!logits_path.empty() || generate > 0) {
      rlx::GeneratorOptions go;
      go.device = dev;
      go.num_threads = static_cast<int>(threads);
      go.activations = act;
      const int64_t need = static_cast<int64_t>(prompt.size()) + std::max<int64_t>(static_cast<int64_t>(follow.size()), generate);
      go.max_ctx = ctx ? ctx : std::min<int64_t>((need + 63) / 64 * 64, c.context);
      rlx::Generator gen(f, go);
      if (!logits_path.empty()) {
        std::vector<float> all;
        std::vector<float> row = gen.prefill(prompt);
        all.insert(all.end(), row.begin(), row.end());
        for (int32_t id : follow) {
          row = gen.step(id);
          all.insert(all.end(), row.begin(), row.end());
        }
        const auto rows = static_cast<int64_t>(follow.size()) + 1;
        rlx::save_npy(rlx::Tensor::f32({rows, vocab}, all), logits_path);
        std::printf("HF_LOGITS_STEPS rows=%lld file=%s\n", static_cast<long long>(rows), logits_path.c_str());
      }
      if (generate > 0) {
        rlx::GenerateOptions o;
        o.max_new_tokens = generate;
        o.stop_at_end_of_generation = false;
        const rlx::GenerateResult r = gen.generate(std::span<const int32_t>(prompt), o);
        std::printf("HF_LOGITS_GREEDY %s\n", join(r.tokens).c_str());
        std::printf("HF_LOGITS_SPEED prompt_tps=%.2f decode_tps=%.2f\n", r.prompt_tokens_per_second(),
                    r.decode_tokens_per_second());
      }
    }
    if (!seq_path.empty()) {
      std::vector<int64_t> tokens(prompt.begin(), prompt.end()), positions;
      tokens.insert(tokens.end(), follow.begin(), follow.end());
      const auto n = static_cast<int64_t>(tokens.size());
      for (int64_t i = 0; i < n; ++i) positions.push_back(i);
      for (int64_t t : tokens)
        if (t >= vocab) throw rlx::Error("token id " + std::to_string(t) + " is out of range (vocab " + std::to_string(vocab) + ")");
      rlx::models::GgufLlamaOptions lo;
      lo.half_weights = rlx::models::half_weights_run_on(dev);
      lo.block_weights = rlx::models::block_weights_run_on(dev);
      lo.activations = act;
      const rlx::models::GgufLlama m = rlx::models::build_llama_from_gguf(f, lo);
      rlx::CompileOptions co;
      co.num_threads = static_cast<int>(threads);
      rlx::CompiledGraph cg = rlx::Session(dev).compile(m.graph, co);
      for (const auto& [name, t] : m.params) cg.set_param(name, t);
      const std::vector<rlx::Tensor> out =
          cg.run({{"tokens", rlx::Tensor::i64({n}, tokens)}, {"positions", rlx::Tensor::i64({n}, positions)}});
      rlx::save_npy(out.at(0).to_host().reshaped({n, vocab}), seq_path);
      std::printf("HF_LOGITS_SEQ rows=%lld file=%s\n", static_cast<long long>(n), seq_path.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf_logits: %s\n", e.what());
    return 1;
  }
  return 0;
}
