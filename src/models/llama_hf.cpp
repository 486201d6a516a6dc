// Hugging Face Llama checkpoint directories as GGUF files (models/llama_hf.h).
#include "models/llama_hf.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <numbers>
#include <set>

#include "io/file_access.h"
#include "io/json_detail.h"
#include "rlx/limits.h"
#include "rlx/safetensors.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string i2s(int64_t v) { return std::to_string(v); }
std::string q(const std::string& s) { return "'" + io::printable(s) + "'"; }

// Keys of config.json that do not change the forward pass rlx computes (token ids, bookkeeping,
// training-only settings, generation defaults kept in old configs).
const std::set<std::string>& ignored_keys() {
  static const std::set<std::string> k = {
      "_name_or_path", "name_or_path", "_commit_hash", "_attn_implementation", "_attn_implementation_autoset",
      "architectures", "model_type", "transformers_version", "dtype", "torch_dtype", "use_cache",
      "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
      "initializer_range", "attention_dropout", "pretraining_tp", "output_attentions", "output_hidden_states",
      "return_dict", "chunk_size_feed_forward", "id2label", "label2id", "num_labels", "problem_type",
      "tokenizer_class", "finetuning_task", "prefix", "task_specific_params", "torchscript", "use_bfloat16",
      "tf_legacy_loss", "is_decoder", "max_length", "min_length", "do_sample", "early_stopping", "num_beams",
      "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
      "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
      "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
      "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
      "begin_suppress_tokens"};
  return k;
}

// Keys that are harmless at one value and change (or leave) the model at any other.
struct Neutral {
  const char* key;
  json value;  // the value rlx computes
};
const std::vector<Neutral>& neutral_keys() {
  static const std::vector<Neutral> k = {{"mlp_bias", false},
                                         {"is_encoder_decoder", false}, {"add_cross_attention", false},
                                         {"tie_encoder_decoder", false}, {"pruned_heads", json::object()},
                                         {"partial_rotary_factor", 1.0}, {"use_bidirectional_attention", false}};
  return k;
}

struct ConfigReader {
  const json& j;
  std::string where;  // "DIR/config.json"
  std::set<std::string> used;

  [[noreturn]] void fail(const std::string& msg) const { throw Error(where + ": " + msg); }

  const json* find(const std::string& key) {
    used.insert(key);
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  int64_t pos_int(const std::string& key, const json& v) const {
    if (!v.is_number_integer()) fail("key '" + key + "' must be an integer, got " + io::json_brief(v));
    const int64_t x = v.get<int64_t>();
    if (x <= 0) fail("key '" + key + "' must be positive, got " + i2s(x));
    return x;
  }
  int64_t req_int(const std::string& key) {
    const json* v = find(key);
    if (!v) fail("key '" + key + "' is missing (every Llama config.json has it; was the file saved by transformers?)");
    return pos_int(key, *v);
  }
  int64_t opt_int(const std::string& key, int64_t dflt) {
    const json* v = find(key);
    return v ? pos_int(key, *v) : dflt;
  }
  double num(const std::string& key, const json& v) const {
    if (!v.is_number()) fail("key '" + key + "' must be a number, got " + io::json_brief(v));
    const double x = v.get<double>();
    if (!(x > 0) || !std::isfinite(x)) fail("key '" + key + "' must be a positive number, got " + io::json_brief(v));
    return x;
  }
  double opt_num(const std::string& key, double dflt) {
    const json* v = find(key);
    return v ? num(key, *v) : dflt;
  }
  bool opt_bool(const std::string& key, bool dflt) {
    const json* v = find(key);
    if (!v) return dflt;
    if (!v->is_boolean()) fail("key '" + key + "' must be true or false, got " + io::json_brief(*v));
    return v->get<bool>();
  }
  std::vector<int32_t> ids(const std::string& key) {
    const json* v = find(key);
    std::vector<int32_t> out;
    if (!v) return out;
    const json items = v->is_array() ? *v : json::array({*v});
    for (const json& x : items) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
        fail("key '" + key + "' must be a token id or a list of them, got " + io::json_brief(*v));
      out.push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
    return out;
  }
};

// Gemma's keys: the MLP's activation (GeGLU with the tanh GELU, the only form the GGUF layout
// runs), and gemma2's softcaps, query scale and sliding window.
void read_gemma(ConfigReader& r, HfLlamaConfig& c) {
  // hidden_activation decides when set (Gemma's configs keep an older hidden_act next to it).
  const json* activation = r.find("hidden_activation");
  const json* act = r.find("hidden_act");
  const std::string key = activation ? "hidden_activation" : "hidden_act";
  if (!activation) activation = act;
  if (activation && *activation != json("gelu_pytorch_tanh"))
    r.fail("key '" + key + "' is " + io::json_brief(*activation) + "; Gemma's MLP is GeGLU with the tanh GELU, "
           "\"gelu_pytorch_tanh\" (the only one rlx runs)");
  if (c.model_type != "gemma2") return;
  // An absent softcap takes Gemma2Config's default; null turns it off.
  auto softcap = [&](const std::string& k, double dflt) {
    r.used.insert(k);
    const auto it = r.j.find(k);
    if (it == r.j.end()) return dflt;
    return it->is_null() ? 0.0 : r.num(k, *it);
  };
  c.attn_softcap = softcap("attn_logit_softcapping", 50.0);
  c.final_softcap = softcap("final_logit_softcapping", 30.0);
  c.query_pre_attn_scalar = r.opt_num("query_pre_attn_scalar", 256.0);
  r.used.insert("cache_implementation");  // a generation setting ("hybrid")
  const json* window = r.find("sliding_window");
  c.sliding_window = window ? r.pos_int("sliding_window", *window) : 4096;
  if (const json* types = r.find("layer_types")) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != c.layers)
      r.fail("key 'layer_types' must list one attention type per layer (" + i2s(c.layers) + "), got " + io::json_brief(*types));
    for (const json& t : *types)
      if (t != json("sliding_attention") && t != json("full_attention"))
        r.fail("key 'layer_types' holds " + io::json_brief(t) + "; rlx runs full_attention and sliding_attention layers");
  }
  // Within the window a sliding-window layer is exactly a full-attention one.
  c.context = std::min(c.context, c.sliding_window);
}

// RoPE settings: rope_parameters (transformers 5) or rope_theta + rope_scaling (4.x).
void read_rope(ConfigReader& r, HfLlamaConfig& c) {
  const json* params = r.find("rope_parameters");
  const json* scaling = r.find("rope_scaling");
  const json* theta = r.find("rope_theta");
  if (params && !params->is_object()) r.fail("key 'rope_parameters' must be an object, got " + io::json_brief(*params));
  if (scaling && !scaling->is_object()) r.fail("key 'rope_scaling' must be an object or null, got " + io::json_brief(*scaling));
  c.rope_theta = theta ? r.num("rope_theta", *theta) : 10000.0;
  const json* rope = params ? params : scaling;
  const std::string name = params ? "rope_parameters" : "rope_scaling";
  if (!rope) return;
  static const std::set<std::string> allowed = {"rope_type", "type", "rope_theta", "factor", "low_freq_factor",
                                                "high_freq_factor", "original_max_position_embeddings",
                                                "partial_rotary_factor"};
  for (const auto& [k, v] : rope->items())
    if (!allowed.count(k))
      r.fail("key '" + name + "." + k + "' is not one rlx implements (RoPE types default, linear and llama3 only); the "
             "model would compute differently without it");
  const json* type = rope->contains("rope_type") ? &rope->at("rope_type") : rope->contains("type") ? &rope->at("type") : nullptr;
  if (type && !type->is_string()) r.fail("key '" + name + ".rope_type' must be a string, got " + io::json_brief(*type));
  c.rope_type = type ? type->get<std::string>() : "default";
  auto number = [&](const char* k) -> double {
    if (!rope->contains(k)) r.fail("key '" + name + "." + k + "' is missing (RoPE type '" + c.rope_type + "' needs it)");
    return r.num(name + "." + k, rope->at(k));
  };
  if (rope->contains("rope_theta")) {
    const double t = r.num(name + ".rope_theta", rope->at("rope_theta"));
    if (theta && t != c.rope_theta)
      r.fail("rope_theta " + io::json_brief(*theta) + " and " + name + ".rope_theta " + io::json_brief(rope->at("rope_theta")) +
             " disagree; keep one");
    c.rope_theta = t;
  }
  if (rope->contains("partial_rotary_factor") && r.num(name + ".partial_rotary_factor", rope->at("partial_rotary_factor")) != 1.0)
    r.fail("key '" + name + ".partial_rotary_factor' is not 1: partial rotary embeddings are not part of Llama");
  if (c.rope_type == "default") {
    if (rope->contains("factor") && number("factor") != 1.0)
      r.fail("key '" + name + ".factor' is set with RoPE type 'default', which has no factor; say which type it scales");
  } else if (c.rope_type == "linear") {
    c.rope_factor = number("factor");
  } else if (c.rope_type == "llama3") {
    c.rope_factor = number("factor");
    c.rope_low_freq_factor = number("low_freq_factor");
    c.rope_high_freq_factor = number("high_freq_factor");
    const json& o = rope->contains("original_max_position_embeddings") ? rope->at("original_max_position_embeddings") : json();
    if (o.is_null()) r.fail("key '" + name + ".original_max_position_embeddings' is missing (RoPE type 'llama3' needs it)");
    c.rope_original_context = r.pos_int(name + ".original_max_position_embeddings", o);
    if (!(c.rope_high_freq_factor > c.rope_low_freq_factor))
      r.fail(name + ".high_freq_factor must be larger than low_freq_factor (llama3 RoPE divides by their difference)");
  } else {
    r.fail("key '" + name + ".rope_type' is '" + io::printable(c.rope_type) +
           "'; rlx implements the RoPE types default, linear and llama3 (not dynamic, yarn, longrope, ...)");
  }
  // Both forms present (a config edited by hand): they must say the same.
  if (params && scaling) {
    const std::string st = scaling->contains("rope_type") ? scaling->at("rope_type").dump()
                           : scaling->contains("type")    ? scaling->at("type").dump()
                                                          : "";
    if (st != json(c.rope_type).dump() || (scaling->contains("factor") && scaling->at("factor") != rope->value("factor", json())))
      r.fail("rope_scaling and rope_parameters disagree; keep one");
  }
}

// Qwen2 / Qwen3 sliding windows: the layers from max_window_layers on attend within
// sliding_window tokens when use_sliding_window is true (transformers writes the result as
// layer_types). Within the window such a model is exactly a full-attention one, so the context
// is capped at the window, as for Mistral.
void read_qwen_sliding(ConfigReader& r, HfLlamaConfig& c) {
  const bool use = r.opt_bool("use_sliding_window", false);
  const json* window = r.find("sliding_window");
  const json* layers = r.find("max_window_layers");
  const int64_t max_window_layers = layers ? r.pos_int("max_window_layers", *layers) : 0;
  const int64_t w = window ? r.pos_int("sliding_window", *window) : 0;
  bool slides = use && w > 0 && max_window_layers < c.layers;
  if (const json* types = r.find("layer_types")) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != c.layers)
      r.fail("key 'layer_types' must list one attention type per layer (" + i2s(c.layers) + "), got " + io::json_brief(*types));
    for (const json& t : *types) {
      if (t == json("sliding_attention")) slides = true;
      else if (t != json("full_attention"))
        r.fail("key 'layer_types' holds " + io::json_brief(t) + "; rlx runs full_attention and sliding_attention layers");
    }
  }
  if (!slides) return;
  if (w <= 0) r.fail("layers slide (use_sliding_window / layer_types) but sliding_window is not set");
  c.sliding_window = w;
  c.context = std::min(c.context, w);
}

}  // namespace

bool is_hf_checkpoint_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

HfLlamaConfig read_hf_llama_config(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error("Hugging Face checkpoint '" + io::printable(dir) + "': not a directory (give the folder holding config.json "
                "and the safetensors weights)");
  const std::string path = (fs::path(dir) / "config.json").string();
  if (!fs::exists(path, ec))
    throw Error("Hugging Face checkpoint '" + io::printable(dir) + "': config.json is missing (save the model with "
                "save_pretrained, which writes it next to the weights)");
  const std::string where = io::printable(path);
  const std::string text = io::read_regular_file(path, "config.json '" + where + "'");
  const json j = io::parse_json_checked(text, active_limits().max_nesting_depth, where, where + ": not valid JSON",
                                        [&](const std::string& key, int) {
                                          return where + ": key '" + io::printable(key) + "' appears twice";
                                        });
  if (!j.is_object()) throw Error(where + ": must hold a JSON object, got " + io::json_type(j));
  ConfigReader r{j, where, {}};
  HfLlamaConfig c;
  const json* mt = r.find("model_type");
  if (!mt || !mt->is_string())
    r.fail("key 'model_type' is missing or not a string (rlx reads model_type 'llama', 'mistral', 'qwen2', 'qwen3', "
           "'gemma' and 'gemma2')");
  c.model_type = mt->get<std::string>();
  static const std::map<std::string, std::string> kArchitectures = {{"llama", "LlamaForCausalLM"},
                                                                    {"mistral", "MistralForCausalLM"},
                                                                    {"qwen2", "Qwen2ForCausalLM"},
                                                                    {"qwen3", "Qwen3ForCausalLM"},
                                                                    {"gemma", "GemmaForCausalLM"},
                                                                    {"gemma2", "Gemma2ForCausalLM"}};
  const auto arch = kArchitectures.find(c.model_type);
  if (arch == kArchitectures.end())
    r.fail("model_type is '" + io::printable(c.model_type) + "'; rlx runs 'llama', 'mistral', 'qwen2', 'qwen3', 'gemma' "
           "and 'gemma2' checkpoints");
  const bool mistral = c.model_type == "mistral", qwen = c.model_type == "qwen2" || c.model_type == "qwen3";
  const bool gemma = c.model_type == "gemma" || c.model_type == "gemma2";
  if (const json* a = r.find("architectures")) {
    const std::string& want = arch->second;
    if (!a->is_array() || a->size() != 1 || *a != json::array({want}))
      r.fail("key 'architectures' is " + io::json_brief(*a) + "; rlx runs [\"" + want + "\"] (the causal LM with its head)");
  }
  c.qkv_bias = c.model_type == "qwen2";
  c.qk_norm = c.model_type == "qwen3";
  if (c.model_type == "llama" || c.model_type == "qwen3") c.qkv_bias = c.o_bias = r.opt_bool("attention_bias", false);
  else if (r.opt_bool("attention_bias", false))
    r.fail("key 'attention_bias' is true, which a " + c.model_type + " model does not have (" +
           (qwen ? std::string("Qwen2 always has q / k / v biases, no others")
                 : (mistral ? std::string("Mistral") : "Gemma") + " has no attention biases") +
           ")");
  c.hidden = r.req_int("hidden_size");
  c.ffn = r.req_int("intermediate_size");
  c.layers = r.req_int("num_hidden_layers");
  c.heads = r.req_int("num_attention_heads");
  c.vocab = r.req_int("vocab_size");
  c.kv_heads = r.opt_int("num_key_value_heads", c.heads);
  if (c.heads % c.kv_heads != 0)
    r.fail("num_attention_heads " + i2s(c.heads) + " is not a multiple of num_key_value_heads " + i2s(c.kv_heads));
  const bool has_head_dim = j.contains("head_dim") && !j.at("head_dim").is_null();
  if (!has_head_dim && c.hidden % c.heads != 0)
    r.fail("hidden_size " + i2s(c.hidden) + " is not a multiple of num_attention_heads " + i2s(c.heads) +
           " (and head_dim is not given)");
  // Qwen3Config's and GemmaConfig's defaults
  c.head_dim = r.opt_int("head_dim", c.model_type == "qwen3" ? 128 : gemma ? 256 : c.hidden / c.heads);
  if (c.head_dim % 2 != 0) r.fail("head_dim " + i2s(c.head_dim) + " must be even (RoPE rotates pairs)");
  c.rms_eps = r.opt_num("rms_norm_eps", 1e-6);
  c.context = r.opt_int("max_position_embeddings", mistral ? 131072 : qwen ? 32768 : gemma ? 8192 : 2048);
  c.tied = r.opt_bool("tie_word_embeddings", gemma);
  if (gemma) {
    read_gemma(r, c);
  } else if (const json* act = r.find("hidden_act"); act && *act != json("silu")) {
    r.fail("key 'hidden_act' is " + io::json_brief(*act) + "; Llama's MLP is SwiGLU, \"silu\" (the only one rlx runs)");
  }
  if (mistral) {
    r.used.insert("sliding_window");
    auto it = j.find("sliding_window");
    if (it == j.end()) c.sliding_window = 4096;  // MistralConfig's default
    else if (!it->is_null()) c.sliding_window = r.pos_int("sliding_window", *it);
    // Within the window a sliding-window model is exactly a full-attention one.
    if (c.sliding_window > 0) c.context = std::min(c.context, c.sliding_window);
  }
  if (qwen) read_qwen_sliding(r, c);
  read_rope(r, c);
  c.bos_ids = r.ids("bos_token_id");
  c.eos_ids = r.ids("eos_token_id");
  for (const Neutral& n : neutral_keys()) {
    const json* v = r.find(n.key);
    if (v && *v != n.value && !(v->is_number() && n.value.is_number() && v->get<double>() == n.value.get<double>()))
      r.fail("key '" + std::string(n.key) + "' is " + io::json_brief(*v) + ": not a plain Llama (rlx runs " +
             n.value.dump() + " only)");
  }
  if (j.contains("quantization_config"))
    r.fail("key 'quantization_config': the weights are quantized by another tool (GPTQ, AWQ, bitsandbytes...), which "
           "rlx does not read; use the float checkpoint (and `rlx quantize DIR out.gguf --scheme q4_k`)");
  std::vector<std::string> unknown;
  for (const auto& [k, v] : j.items())
    if (!r.used.count(k) && !ignored_keys().count(k)) unknown.push_back("'" + io::printable(k) + "'");
  if (!unknown.empty()) {
    std::string list;
    for (size_t i = 0; i < unknown.size(); ++i) list += (i ? ", " : "") + unknown[i];
    r.fail(std::string(unknown.size() > 1 ? "keys " : "key ") + list + (unknown.size() > 1 ? " are" : " is") +
           " not one rlx knows for model_type '" + c.model_type +
           "', so it cannot tell whether it changes the model; remove it if it does not");
  }
  return c;
}

std::vector<float> hf_llama3_rope_divisors(const HfLlamaConfig& c) {
  std::vector<float> out;
  if (c.rope_type != "llama3") return out;
  const double two_pi = 2.0 * std::numbers::pi;
  const double orig = static_cast<double>(c.rope_original_context);
  const double low_wavelen = orig / c.rope_low_freq_factor, high_wavelen = orig / c.rope_high_freq_factor;
  for (int64_t i = 0; i < c.head_dim / 2; ++i) {
    const double inv = std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(c.head_dim));
    const double wavelen = two_pi / inv;
    double divisor = 1.0;  // short wavelengths keep their frequency
    if (wavelen > low_wavelen) {
      divisor = c.rope_factor;  // long ones are slowed by the whole factor
    } else if (wavelen >= high_wavelen) {  // in between: a blend of both frequencies
      const double s = (orig / wavelen - c.rope_low_freq_factor) / (c.rope_high_freq_factor - c.rope_low_freq_factor);
      divisor = 1.0 / ((1.0 - s) / c.rope_factor + s);
    }
    out.push_back(static_cast<float>(divisor));
  }
  return out;
}

namespace {

struct Source {
  const SafetensorsFile* file = nullptr;
  std::string file_name;
  const SafetensorsEntry* entry = nullptr;
};

struct Checkpoint {
  std::string dir;
  HfLlamaConfig config;
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, Source> tensors;
};

std::string pretty_dir(const std::string& dir) { return "Hugging Face checkpoint '" + io::printable(dir) + "'"; }

void open_index(Checkpoint& ck, const fs::path& index_path) {
  const std::string where = io::printable(index_path.string());
  const std::string text = io::read_regular_file(index_path.string(), "safetensors index '" + where + "'");
  const json j = io::parse_json_checked(text, active_limits().max_nesting_depth, where, where + ": not valid JSON",
                                        [&](const std::string& key, int) {
                                          return where + ": key '" + io::printable(key) + "' appears twice";
                                        });
  if (!j.is_object() || !j.contains("weight_map") || !j.at("weight_map").is_object())
    throw Error(where + ": must be an object with a \"weight_map\" object {tensor name: shard file}");
  for (const auto& [k, v] : j.items())
    if (k != "weight_map" && k != "metadata")
      throw Error(where + ": key '" + io::printable(k) + "' is not part of a safetensors index (metadata, weight_map)");
  std::map<std::string, std::vector<std::string>> by_shard;
  for (const auto& [name, shard] : j.at("weight_map").items()) {
    if (!shard.is_string())
      throw Error(where + ": weight_map['" + io::printable(name) + "'] must be a file name, got " + io::json_brief(shard));
    by_shard[shard.get<std::string>()].push_back(name);
  }
  if (by_shard.empty()) throw Error(where + ": weight_map is empty");
  for (const auto& [shard, names] : by_shard) {
    const std::string what = where + ": shard '" + io::printable(shard) + "'";
    const fs::path path = io::resolve_inside(ck.dir, shard, what);
    std::error_code ec;
    if (!fs::exists(path, ec))
      throw Error(what + " (holding " + q(names.front()) +
                  (names.size() > 1 ? " and " + i2s(static_cast<int64_t>(names.size()) - 1) + " more" : std::string()) +
                  ") is listed but not in the directory; download it, or rewrite the index");
    ck.files.push_back(std::make_unique<SafetensorsFile>(path.string()));
    const SafetensorsFile& f = *ck.files.back();
    for (const std::string& name : names) {
      if (!f.contains(name))
        throw Error(what + ": the index puts tensor " + q(name) + " there, but the file does not hold it");
      ck.tensors[name] = Source{&f, shard, &f.entry(name)};
    }
    for (const SafetensorsEntry& e : f.entries()) {
      auto it = j.at("weight_map").find(e.name);
      if (it == j.at("weight_map").end() || *it != json(shard))
        throw Error(what + " holds tensor " + q(e.name) + ", which the index " +
                    (it == j.at("weight_map").end() ? std::string("does not list") : "puts in " + it->dump()) +
                    "; the index and the shards do not belong together");
    }
  }
}

Checkpoint open_checkpoint(const std::string& dir) {
  Checkpoint ck;
  ck.dir = dir;
  ck.config = read_hf_llama_config(dir);
  const fs::path single = fs::path(dir) / "model.safetensors", index = fs::path(dir) / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(single, ec)) {
    ck.files.push_back(std::make_unique<SafetensorsFile>(single.string()));
    for (const SafetensorsEntry& e : ck.files.back()->entries())
      ck.tensors[e.name] = Source{ck.files.back().get(), "model.safetensors", &e};
  } else if (fs::exists(index, ec)) {
    open_index(ck, index);
  } else {
    throw Error(pretty_dir(dir) + ": neither model.safetensors nor model.safetensors.index.json is there (rlx reads "
                "safetensors weights only; re-save with save_pretrained(..., safe_serialization=True))");
  }
  return ck;
}

struct Converter {
  const Checkpoint& ck;
  GgufWriter& w;
  std::set<std::string> used;

  [[noreturn]] void fail(const std::string& msg) const { throw Error(pretty_dir(ck.dir) + ": " + msg); }

  const Source& source(const std::string& name, const std::vector<int64_t>& shape) {
    auto it = ck.tensors.find(name);
    if (it == ck.tensors.end()) fail("tensor " + q(name) + " is missing (config.json implies it)");
    used.insert(name);
    const SafetensorsEntry& e = *it->second.entry;
    if (e.shape != shape)
      fail("tensor " + q(name) + " (in " + it->second.file_name + ") has shape " + dims_str(e.shape) +
           ", config.json implies " + dims_str(shape));
    if (e.dtype != DType::F32 && e.dtype != DType::F16 && e.dtype != DType::BF16)
      fail("tensor " + q(name) + " is " + dtype_name(e.dtype) + "; rlx runs F32, F16 and BF16 weights (convert the "
           "checkpoint to one of them, e.g. model.to(torch.bfloat16) before save_pretrained)");
    return it->second;
  }

  static std::vector<int64_t> ne_of(const std::vector<int64_t>& shape) { return {shape.rbegin(), shape.rend()}; }

  void copy(const std::string& hf, const std::string& gguf, const std::vector<int64_t>& shape) {
    const Source& s = source(hf, shape);
    w.add_raw(gguf, *ggml_type_of(s.entry->dtype), ne_of(shape), s.file->raw(hf));
  }

  // q / k [heads * D, E] (or a bias [heads * D]) in the GGUF row order of the architecture: for
  // llama, within each head HF row i goes to 2i and row D/2 + i to 2i + 1; qwen keeps HF's order.
  void copy_rope_rows(const std::string& hf, const std::string& gguf, int64_t heads, bool bias = false) {
    const int64_t d = ck.config.head_dim, e = ck.config.hidden;
    const std::vector<int64_t> shape = bias ? std::vector<int64_t>{heads * d} : std::vector<int64_t>{heads * d, e};
    if (arch() != "llama") return copy(hf, gguf, shape);
    const Source& s = source(hf, shape);
    const auto src = s.file->raw(hf);
    const size_t row = static_cast<size_t>(bias ? 1 : e) * dtype_size(s.entry->dtype);
    std::string out(src.size(), '\0');
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < d / 2; ++i)
        for (int64_t half = 0; half < 2; ++half) {
          const auto from = static_cast<size_t>(h * d + half * (d / 2) + i), to = static_cast<size_t>(h * d + 2 * i + half);
          std::memcpy(out.data() + to * row, src.data() + from * row, row);
        }
    w.add_raw(gguf, *ggml_type_of(s.entry->dtype), ne_of(shape), std::move(out));
  }

  // A norm weight: as stored, or for Gemma (whose RMSNorm multiplies by 1 + w) as the f32 sum
  // 1 + w, the form GGUF files hold (llama.cpp's converter adds the 1 too).
  void copy_norm(const std::string& hf, const std::string& gguf, int64_t n) {
    const std::string& mt = ck.config.model_type;
    if (mt != "gemma" && mt != "gemma2") return copy(hf, gguf, {n});
    const Source& s = source(hf, {n});
    const auto raw = s.file->raw(hf);
    Tensor t = Tensor::from_bytes(s.entry->dtype, {n}, raw.data(), raw.size()).cast(DType::F32);
    for (int64_t i = 0; i < n; ++i) t.data<float>()[i] += 1.0f;
    w.add_tensor(gguf, t);
  }

  // general.architecture of the GGUF form (llama.cpp's names): Mistral converts as llama.
  std::string arch() const { return ck.config.model_type == "mistral" ? "llama" : ck.config.model_type; }

  void run() {
    const HfLlamaConfig& c = ck.config;
    const int64_t e = c.hidden, d = c.head_dim;
    // GGUF integers are u32 as llama.cpp writes them, u64 where a config value needs more.
    auto u32 = [](int64_t v) {
      return v > UINT32_MAX ? GgufValue::u64(static_cast<uint64_t>(v)) : GgufValue::u32(static_cast<uint32_t>(v));
    };
    const std::string a = arch() + ".";
    w.add("general.architecture", GgufValue::string(arch()));
    w.add("general.name", GgufValue::string(fs::path(ck.dir).lexically_normal().filename().string()));
    w.add(a + "block_count", u32(c.layers));
    w.add(a + "context_length", u32(c.context));
    w.add(a + "embedding_length", u32(e));
    w.add(a + "feed_forward_length", u32(c.ffn));
    w.add(a + "attention.head_count", u32(c.heads));
    w.add(a + "attention.head_count_kv", u32(c.kv_heads));
    w.add(a + "attention.key_length", u32(d));
    w.add(a + "attention.value_length", u32(d));
    w.add(a + "attention.layer_norm_rms_epsilon", GgufValue::f32(static_cast<float>(c.rms_eps)));
    w.add(a + "rope.dimension_count", u32(d));
    w.add(a + "rope.freq_base", GgufValue::f32(static_cast<float>(c.rope_theta)));
    w.add(a + "vocab_size", u32(c.vocab));
    if (c.model_type == "gemma2") {
      if (c.attn_softcap > 0) w.add(a + "attn_logit_softcapping", GgufValue::f32(static_cast<float>(c.attn_softcap)));
      if (c.final_softcap > 0) w.add(a + "final_logit_softcapping", GgufValue::f32(static_cast<float>(c.final_softcap)));
      w.add(a + "attention.sliding_window", u32(c.sliding_window));
      // llama.cpp scales the queries by 1 / sqrt(head_dim), or 1 / sqrt(hidden / heads) for the
      // 46-block 27B; another query_pre_attn_scalar is written as attention.scale.
      const double rule = 1.0 / std::sqrt(static_cast<double>(c.layers == 46 ? e / c.heads : d));
      const double scale = 1.0 / std::sqrt(c.query_pre_attn_scalar);
      if (std::fabs(scale - rule) > 1e-7 * rule) w.add(a + "attention.scale", GgufValue::f32(static_cast<float>(scale)));
    }
    if (c.rope_type == "linear") {
      w.add(a + "rope.scaling.type", GgufValue::string("linear"));
      w.add(a + "rope.scaling.factor", GgufValue::f32(static_cast<float>(c.rope_factor)));
    }
    copy("model.embed_tokens.weight", "token_embd.weight", {c.vocab, e});
    for (int64_t i = 0; i < c.layers; ++i) {
      const std::string h = "model.layers." + i2s(i) + ".", g = "blk." + i2s(i) + ".";
      copy_norm(h + "input_layernorm.weight", g + "attn_norm.weight", e);
      copy_rope_rows(h + "self_attn.q_proj.weight", g + "attn_q.weight", c.heads);
      copy_rope_rows(h + "self_attn.k_proj.weight", g + "attn_k.weight", c.kv_heads);
      copy(h + "self_attn.v_proj.weight", g + "attn_v.weight", {c.kv_heads * d, e});
      copy(h + "self_attn.o_proj.weight", g + "attn_output.weight", {e, c.heads * d});
      if (c.qkv_bias) {
        copy_rope_rows(h + "self_attn.q_proj.bias", g + "attn_q.bias", c.heads, true);
        copy_rope_rows(h + "self_attn.k_proj.bias", g + "attn_k.bias", c.kv_heads, true);
        copy(h + "self_attn.v_proj.bias", g + "attn_v.bias", {c.kv_heads * d});
      }
      if (c.o_bias) copy(h + "self_attn.o_proj.bias", g + "attn_output.bias", {e});
      if (c.qk_norm) {
        copy(h + "self_attn.q_norm.weight", g + "attn_q_norm.weight", {d});
        copy(h + "self_attn.k_norm.weight", g + "attn_k_norm.weight", {d});
      }
      if (c.model_type == "gemma2") {  // norms after the attention and the MLP, and one before the MLP
        copy_norm(h + "post_attention_layernorm.weight", g + "post_attention_norm.weight", e);
        copy_norm(h + "pre_feedforward_layernorm.weight", g + "ffn_norm.weight", e);
        copy_norm(h + "post_feedforward_layernorm.weight", g + "post_ffw_norm.weight", e);
      } else {
        copy_norm(h + "post_attention_layernorm.weight", g + "ffn_norm.weight", e);
      }
      copy(h + "mlp.gate_proj.weight", g + "ffn_gate.weight", {c.ffn, e});
      copy(h + "mlp.up_proj.weight", g + "ffn_up.weight", {c.ffn, e});
      copy(h + "mlp.down_proj.weight", g + "ffn_down.weight", {e, c.ffn});
    }
    copy_norm("model.norm.weight", "output_norm.weight", e);
    const bool has_head = ck.tensors.count("lm_head.weight") > 0;
    if (!c.tied) {
      if (!has_head)
        fail("tensor 'lm_head.weight' is missing, and config.json does not tie it to the embedding "
             "(tie_word_embeddings is false or absent); set \"tie_word_embeddings\": true if the model shares them");
      copy("lm_head.weight", "output.weight", {c.vocab, e});
    } else if (has_head) {  // tied, yet stored: it must be the embedding itself
      const Source& head = source("lm_head.weight", {c.vocab, e});
      const Source& emb = ck.tensors.at("model.embed_tokens.weight");
      const auto a = head.file->raw("lm_head.weight"), b = emb.file->raw("model.embed_tokens.weight");
      if (head.entry->dtype != emb.entry->dtype || a.size() != b.size() || std::memcmp(a.data(), b.data(), a.size()) != 0)
        fail("config.json ties the output to the embedding (tie_word_embeddings true) but 'lm_head.weight' differs from "
             "'model.embed_tokens.weight'; set \"tie_word_embeddings\": false to use lm_head.weight");
    }
    if (c.rope_type == "llama3") {
      const std::vector<float> div = hf_llama3_rope_divisors(c);
      w.add_tensor("rope_freqs.weight", Tensor::f32({static_cast<int64_t>(div.size())}, div));
    }
    std::vector<std::string> unknown;
    for (const auto& [name, s] : ck.tensors)
      if (!used.count(name)) unknown.push_back(name);
    if (!unknown.empty()) {
      std::string list;
      for (size_t i = 0; i < unknown.size() && i < 5; ++i) list += (i ? ", " : "") + q(unknown[i]);
      if (unknown.size() > 5) list += " and " + i2s(static_cast<int64_t>(unknown.size()) - 5) + " more";
      fail("tensor(s) " + list + " are not part of a " + c.model_type + " model with this config.json (" + i2s(c.layers) +
           " layers; biases, extra norms, ...); rlx would compute another model without them, so it stops here");
    }
  }
};

}  // namespace

GgufFile load_hf_llama(const std::string& dir) {
  const Checkpoint ck = open_checkpoint(dir);
  std::string bytes;
  {
    GgufWriter w;
    Converter{ck, w, {}}.run();
    bytes = w.bytes();
  }
  return GgufFile::from_bytes(bytes.data(), bytes.size(), io::printable(dir) + " (Hugging Face checkpoint as GGUF)");
}

void save_hf_llama_as_gguf(const std::string& dir, const std::string& out_path) {
  const Checkpoint ck = open_checkpoint(dir);
  GgufWriter w;
  Converter{ck, w, {}}.run();
  w.save(out_path);
}

}  // namespace rlx::models
