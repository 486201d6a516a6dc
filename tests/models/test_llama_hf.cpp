// Hugging Face Llama checkpoints (models/llama_hf.h): a small random checkpoint directory written
// here (config.json + safetensors, one file or sharded), converted and run by rlx, against a
// reference forward written from Hugging Face's Llama definition on the unpermuted weights:
// rotate_half RoPE (pairs i, i + D/2), RMSNorm, grouped-query attention, SwiGLU, tied or untied head.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "support/llama_fixture.h"
#include "models/llama_gguf.h"
#include "models/llama_hf.h"
#include "rlx/generate.h"
#include "rlx/safetensors.h"
#include "support/test_util.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace rlx::testing;

struct Spec {
  int64_t layers = 2, hidden = 64, heads = 4, kv_heads = 2, head_dim = 16, ffn = 96, vocab = 50;
  bool tied = false;
  DType dtype = DType::F32;  // how every tensor is stored
  double theta = 10000.0, eps = 1e-5;
  // RoPE: "" (none), or a JSON object for rope_scaling.
  std::string rope_scaling;
  double linear = 1.0;  // what the reference divides every frequency by (linear scaling)
  bool llama3 = false;  // the reference applies Llama 3's frequency blend (factor 8, 1, 4, 32)
  // llama, qwen2 (q / k / v biases), qwen3 (per-head q / k norms), gemma (GeGLU, embedding x
  // sqrt(hidden), norms x (1 + w), tied head), gemma2 (also post-norms, softcaps, query scale)
  std::string model_type = "llama";
  bool attention_bias = false;       // llama / qwen3: q / k / v / o biases
  double attn_softcap = 0, final_softcap = 0, query_scalar = 0;  // gemma2 (0: off / head_dim)
  bool gemma() const { return model_type == "gemma" || model_type == "gemma2"; }
  bool qkv_bias() const { return model_type == "qwen2" || attention_bias; }
  bool o_bias() const { return attention_bias; }
  bool qk_norm() const { return model_type == "qwen3"; }
};

const char* architecture(const Spec& s) {
  if (s.model_type == "gemma") return "GemmaForCausalLM";
  if (s.model_type == "gemma2") return "Gemma2ForCausalLM";
  return s.model_type == "qwen2" ? "Qwen2ForCausalLM" : s.model_type == "qwen3" ? "Qwen3ForCausalLM" : "LlamaForCausalLM";
}

// config.json as key -> JSON text, so that tests can change or drop single keys.
std::map<std::string, std::string> config_of(const Spec& s) {
  std::map<std::string, std::string> c = {
      {"architectures", "[\"" + std::string(architecture(s)) + "\"]"},
      {"model_type", "\"" + s.model_type + "\""},
      {"hidden_size", std::to_string(s.hidden)},
      {"intermediate_size", std::to_string(s.ffn)},
      {"num_hidden_layers", std::to_string(s.layers)},
      {"num_attention_heads", std::to_string(s.heads)},
      {"num_key_value_heads", std::to_string(s.kv_heads)},
      {"head_dim", std::to_string(s.head_dim)},
      {"vocab_size", std::to_string(s.vocab)},
      {"max_position_embeddings", "128"},
      {"rms_norm_eps", std::to_string(s.eps)},
      {"rope_theta", std::to_string(s.theta)},
      {"rope_scaling", s.rope_scaling.empty() ? "null" : s.rope_scaling},
      {"tie_word_embeddings", s.tied ? "true" : "false"},
      {"hidden_act", "\"silu\""},
      {"mlp_bias", "false"},
      {"bos_token_id", "1"},
      {"eos_token_id", "[2, 3]"},
      {"torch_dtype", "\"float32\""},
      {"initializer_range", "0.02"},
      {"transformers_version", "\"4.57.0\""},
      {"use_cache", "true"},
  };
  if (s.model_type != "qwen2") c["attention_bias"] = s.attention_bias ? "true" : "false";
  if (s.gemma()) {  // what GemmaConfig / Gemma2Config save
    c["hidden_act"] = c["hidden_activation"] = "\"gelu_pytorch_tanh\"";
    if (s.model_type == "gemma2") {
      c["attn_logit_softcapping"] = s.attn_softcap > 0 ? std::to_string(s.attn_softcap) : "null";
      c["final_logit_softcapping"] = s.final_softcap > 0 ? std::to_string(s.final_softcap) : "null";
      c["query_pre_attn_scalar"] = std::to_string(s.query_scalar > 0 ? s.query_scalar : static_cast<double>(s.head_dim));
      c["sliding_window"] = "4096";
      c["cache_implementation"] = "\"hybrid\"";
      std::string types;
      for (int64_t i = 0; i < s.layers; ++i) types += std::string(i ? ", " : "") + (i % 2 ? "\"full_attention\"" : "\"sliding_attention\"");
      c["layer_types"] = "[" + types + "]";
    }
  } else if (s.model_type != "llama") {  // what Qwen2Config / Qwen3Config save with sliding windows off
    c["use_sliding_window"] = "false";
    c["sliding_window"] = "4096";
    c["max_window_layers"] = "28";
  }
  return c;
}

std::string json_text(const std::map<std::string, std::string>& c) {
  std::string t = "{";
  for (const auto& [k, v] : c) t += (t.size() > 1 ? ",\n  \"" : "\n  \"") + k + "\": " + v;
  return t + "\n}\n";
}

// HF-named weights, f32 values already rounded to the stored dtype (the reference uses these).
using Weights = std::vector<std::pair<std::string, Tensor>>;
Weights make_weights(const Spec& s) {
  Weights w;
  uint64_t seed = 11;
  const int64_t e = s.hidden, d = s.head_dim;
  const float se = 1.0f / std::sqrt(static_cast<float>(e));
  auto add = [&](const std::string& name, const Tensor& t) { w.emplace_back(name, t.cast(s.dtype).cast(DType::F32)); };
  add("model.embed_tokens.weight", randn({s.vocab, e}, seed++, 1.0f));
  for (int64_t i = 0; i < s.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", randn({e}, seed++, 0.1f, s.gemma() ? 0.0f : 1.0f));
    add(p + "self_attn.q_proj.weight", randn({s.heads * d, e}, seed++, se));
    add(p + "self_attn.k_proj.weight", randn({s.kv_heads * d, e}, seed++, se));
    add(p + "self_attn.v_proj.weight", randn({s.kv_heads * d, e}, seed++, se));
    add(p + "self_attn.o_proj.weight", randn({e, s.heads * d}, seed++, 1.0f / std::sqrt(static_cast<float>(s.heads * d))));
    if (s.qkv_bias()) {
      add(p + "self_attn.q_proj.bias", randn({s.heads * d}, seed++, 0.5f));
      add(p + "self_attn.k_proj.bias", randn({s.kv_heads * d}, seed++, 0.5f));
      add(p + "self_attn.v_proj.bias", randn({s.kv_heads * d}, seed++, 0.5f));
    }
    if (s.o_bias()) add(p + "self_attn.o_proj.bias", randn({e}, seed++, 0.5f));
    if (s.qk_norm()) {
      add(p + "self_attn.q_norm.weight", randn({d}, seed++, 0.2f, 1.0f));
      add(p + "self_attn.k_norm.weight", randn({d}, seed++, 0.2f, 1.0f));
    }
    // Gemma's norm weights hold w of (1 + w): around 0.
    add(p + "post_attention_layernorm.weight", randn({e}, seed++, 0.1f, s.gemma() ? 0.0f : 1.0f));
    if (s.model_type == "gemma2") {
      add(p + "pre_feedforward_layernorm.weight", randn({e}, seed++, 0.1f));
      add(p + "post_feedforward_layernorm.weight", randn({e}, seed++, 0.1f));
    }
    add(p + "mlp.gate_proj.weight", randn({s.ffn, e}, seed++, se));
    add(p + "mlp.up_proj.weight", randn({s.ffn, e}, seed++, se));
    add(p + "mlp.down_proj.weight", randn({e, s.ffn}, seed++, 1.0f / std::sqrt(static_cast<float>(s.ffn))));
  }
  add("model.norm.weight", randn({e}, seed++, 0.1f, s.gemma() ? 0.0f : 1.0f));
  if (!s.tied) add("lm_head.weight", randn({s.vocab, e}, seed++, se));
  return w;
}

const Tensor& find(const Weights& w, const std::string& name) {
  for (const auto& [n, t] : w)
    if (n == name) return t;
  throw Error("test: no weight " + name);
}

// ---- the reference: Hugging Face's Llama forward, in double ----

using Mat = std::vector<double>;  // row-major

// x (rows, in) @ w^T (+ bias), w (out, in)
Mat linear(const Mat& x, int64_t rows, const Tensor& w, const Tensor* bias = nullptr) {
  const int64_t out = w.dim(0), in = w.dim(1);
  Mat y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = bias ? bias->data<float>()[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) acc += x[static_cast<size_t>(r * in + i)] * w.data<float>()[o * in + i];
      y[static_cast<size_t>(r * out + o)] = acc;
    }
  return y;
}

// x / rms(x) * w, or * (1 + w) with `plus_one` (Gemma's RMSNorm).
Mat rms_norm(const Mat& x, int64_t rows, const Tensor& w, double eps, bool plus_one = false) {
  const int64_t e = w.dim(0);
  Mat y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < e; ++i) ss += x[static_cast<size_t>(r * e + i)] * x[static_cast<size_t>(r * e + i)];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(e) + eps);
    for (int64_t i = 0; i < e; ++i)
      y[static_cast<size_t>(r * e + i)] = x[static_cast<size_t>(r * e + i)] * inv * (w.data<float>()[i] + (plus_one ? 1.0 : 0.0));
  }
  return y;
}

// Inverse frequencies of HF's rotary embedding (default, linear, llama3 with factor 8,
// low 1, high 4, original context 64).
std::vector<double> inv_freq(const Spec& s) {
  std::vector<double> f;
  for (int64_t i = 0; i < s.head_dim; i += 2) {
    double v = 1.0 / std::pow(s.theta, static_cast<double>(i) / static_cast<double>(s.head_dim)) / s.linear;
    if (s.llama3) {
      const double factor = 8, low = 1, high = 4, orig = 64;
      const double wavelen = 2 * std::numbers::pi / v;
      const double scaled = wavelen > orig / low ? v / factor : v;
      const double smooth = (orig / wavelen - low) / (high - low);
      const bool medium = !(wavelen < orig / high) && !(wavelen > orig / low);
      v = medium ? (1 - smooth) * scaled / factor + smooth * scaled : scaled;
    }
    f.push_back(v);
  }
  return f;
}

// rotate_half: x * cos + [-x2, x1] * sin, cos / sin of the frequencies repeated over both halves.
void rope(Mat& x, int64_t rows, int64_t heads, int64_t d, const std::vector<double>& inv) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h) {
      double* v = x.data() + (r * heads + h) * d;
      for (int64_t i = 0; i < d / 2; ++i) {
        const double a = static_cast<double>(r) * inv[static_cast<size_t>(i)], c = std::cos(a), sn = std::sin(a);
        const double x1 = v[i], x2 = v[i + d / 2];
        v[i] = x1 * c - x2 * sn;
        v[i + d / 2] = x2 * c + x1 * sn;
      }
    }
}

// logits (S, vocab) of tokens at positions 0..S-1.
Mat reference_logits(const Spec& s, const Weights& w, const std::vector<int64_t>& tokens) {
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t e = s.hidden, d = s.head_dim, groups = s.heads / s.kv_heads;
  const Tensor& emb = find(w, "model.embed_tokens.weight");
  Mat h(static_cast<size_t>(n * e));
  const double emb_scale = s.gemma() ? std::sqrt(static_cast<double>(e)) : 1.0;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < e; ++i)
      h[static_cast<size_t>(t * e + i)] = emb.data<float>()[tokens[static_cast<size_t>(t)] * e + i] * emb_scale;
  const std::vector<double> inv = inv_freq(s);
  const bool g1 = s.gemma(), gemma2 = s.model_type == "gemma2";
  auto norm = [&](const Mat& x, int64_t rows, const std::string& name) { return rms_norm(x, rows, find(w, name), s.eps, g1); };
  const double qscale = 1.0 / std::sqrt(s.query_scalar > 0 ? s.query_scalar : static_cast<double>(d));
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const Mat x = norm(h, n, p + "input_layernorm.weight");
    auto bias = [&](const char* proj, bool has) { return has ? &find(w, p + "self_attn." + proj + "_proj.bias") : nullptr; };
    Mat q = linear(x, n, find(w, p + "self_attn.q_proj.weight"), bias("q", s.qkv_bias()));
    Mat k = linear(x, n, find(w, p + "self_attn.k_proj.weight"), bias("k", s.qkv_bias()));
    const Mat v = linear(x, n, find(w, p + "self_attn.v_proj.weight"), bias("v", s.qkv_bias()));
    if (s.qk_norm()) {  // Qwen3: RMSNorm over each head's D values, before RoPE
      q = rms_norm(q, n * s.heads, find(w, p + "self_attn.q_norm.weight"), s.eps);
      k = rms_norm(k, n * s.kv_heads, find(w, p + "self_attn.k_norm.weight"), s.eps);
    }
    rope(q, n, s.heads, d, inv);
    rope(k, n, s.kv_heads, d, inv);
    Mat ctx(static_cast<size_t>(n * s.heads * d), 0.0);
    for (int64_t hq = 0; hq < s.heads; ++hq) {
      const int64_t hk = hq / groups;
      for (int64_t i = 0; i < n; ++i) {
        std::vector<double> sc(static_cast<size_t>(i + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += q[static_cast<size_t>((i * s.heads + hq) * d + c)] * k[static_cast<size_t>((j * s.kv_heads + hk) * d + c)];
          sc[static_cast<size_t>(j)] = dot * qscale;
          if (s.attn_softcap > 0) sc[static_cast<size_t>(j)] = s.attn_softcap * std::tanh(sc[static_cast<size_t>(j)] / s.attn_softcap);
          mx = std::max(mx, sc[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (double& x2 : sc) sum += x2 = std::exp(x2 - mx);
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t c = 0; c < d; ++c)
            ctx[static_cast<size_t>((i * s.heads + hq) * d + c)] +=
                sc[static_cast<size_t>(j)] / sum * v[static_cast<size_t>((j * s.kv_heads + hk) * d + c)];
      }
    }
    Mat o = linear(ctx, n, find(w, p + "self_attn.o_proj.weight"), bias("o", s.o_bias()));
    if (gemma2) o = norm(o, n, p + "post_attention_layernorm.weight");
    for (size_t i = 0; i < h.size(); ++i) h[i] += o[i];
    const Mat y = norm(h, n, p + (gemma2 ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight"));
    const Mat g = linear(y, n, find(w, p + "mlp.gate_proj.weight")), u = linear(y, n, find(w, p + "mlp.up_proj.weight"));
    Mat act(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      const double x3 = g[i] * g[i] * g[i];  // GeGLU: the tanh GELU (gelu_pytorch_tanh); SwiGLU: silu
      const double gate = g1 ? 0.5 * g[i] * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (g[i] + 0.044715 * x3)))
                             : g[i] / (1.0 + std::exp(-g[i]));
      act[i] = gate * u[i];
    }
    Mat down = linear(act, n, find(w, p + "mlp.down_proj.weight"));
    if (gemma2) down = norm(down, n, p + "post_feedforward_layernorm.weight");
    for (size_t i = 0; i < h.size(); ++i) h[i] += down[i];
  }
  const Mat hn = norm(h, n, "model.norm.weight");
  Mat logits = linear(hn, n, find(w, s.tied ? "model.embed_tokens.weight" : "lm_head.weight"));
  if (s.final_softcap > 0)
    for (double& l : logits) l = s.final_softcap * std::tanh(l / s.final_softcap);
  return logits;
}

// ---- checkpoint directories ----

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("rlx_hf_" + std::to_string(::getpid()) + "_" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

Weights stored(const Weights& w, DType dtype) {
  Weights out;
  for (const auto& [n, t] : w) out.emplace_back(n, t.cast(dtype));
  return out;
}

// One model.safetensors, or `shards` files and model.safetensors.index.json.
void write_checkpoint(const fs::path& dir, const std::map<std::string, std::string>& config, const Weights& w,
                      DType dtype, int shards = 1) {
  write_text(dir / "config.json", json_text(config));
  const Weights st = stored(w, dtype);
  if (shards == 1) {
    save_safetensors((dir / "model.safetensors").string(), st);
    return;
  }
  std::string map;
  for (int s = 0; s < shards; ++s) {
    const std::string file = "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(shards) + ".safetensors";
    Weights part;
    for (size_t i = static_cast<size_t>(s); i < st.size(); i += static_cast<size_t>(shards)) {
      part.push_back(st[i]);
      map += std::string(map.empty() ? "" : ",\n") + "    \"" + st[i].first + "\": \"" + file + "\"";
    }
    save_safetensors((dir / file).string(), part);
  }
  write_text(dir / "model.safetensors.index.json", "{\"metadata\": {\"total_size\": 0},\n \"weight_map\": {\n" + map + "}}\n");
}

std::vector<int64_t> test_tokens(const Spec& s, int64_t n) {
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back((7 * i + 3) % s.vocab);
  return t;
}

double max_abs(const Mat& m) {
  double x = 0;
  for (double v : m) x = std::max(x, std::fabs(v));
  return x;
}

// rlx's teacher-forced graph and its KV-cache generator against the reference: the largest
// logit difference within rel_tol of the largest reference logit.
void check_against_reference(const Spec& s, const std::string& dir, double rel_tol, int64_t n = 9) {
  const Weights w = make_weights(s);
  const std::vector<int64_t> tokens = test_tokens(s, n);
  const Mat want = reference_logits(s, w, tokens);
  const double scale = max_abs(want);
  ASSERT_GT(scale, 1.0);
  const GgufFile f = models::load_hf_llama(dir);
  const models::GgufLlama m = models::build_llama_from_gguf(f);
  std::vector<int64_t> positions(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = i;
  const Tensor logits =
      run_cpu1(m.graph, {{"tokens", Tensor::i64({n}, tokens)}, {"positions", Tensor::i64({n}, positions)}}, m.params);
  EXPECT_TRUE(all_close(logits, {1, n, s.vocab}, want, Tolerance{0.0, rel_tol * scale})) << "max |logit| " << scale;
  // The decoder: a prefill of the first 4 tokens, then one step per token.
  Generator gen(f, {.max_ctx = 32});
  std::vector<int32_t> ids(tokens.begin(), tokens.end());
  std::vector<float> row = gen.prefill(std::span<const int32_t>(ids.data(), 4));
  for (int64_t t = 3; t < n; ++t) {
    double worst = 0;
    for (int64_t v = 0; v < s.vocab; ++v)
      worst = std::max(worst, std::fabs(row[static_cast<size_t>(v)] - want[static_cast<size_t>(t * s.vocab + v)]));
    EXPECT_LE(worst, rel_tol * scale) << "generator row " << t;
    if (t + 1 < n) row = gen.step(ids[static_cast<size_t>(t + 1)]);
  }
}

void check_spec(const Spec& s, const std::string& name, double rel_tol = 1e-4, int shards = 1) {
  TempDir dir(name);
  write_checkpoint(dir.path, config_of(s), make_weights(s), s.dtype, shards);
  check_against_reference(s, dir.str(), rel_tol);
}

TEST(LlamaHf, F32MatchesTheHfReference) { check_spec(Spec{}, "f32"); }

TEST(LlamaHf, TiedHeadAndHeadDimOtherThanHiddenOverHeads) {
  Spec s;
  s.tied = true;
  s.hidden = 48;  // heads * head_dim = 64 != hidden
  check_spec(s, "tied");
}

TEST(LlamaHf, Bf16AndF16WeightsStayHalfAndMatch) {
  for (DType t : {DType::BF16, DType::F16}) {
    Spec s;
    s.dtype = t;
    TempDir dir(std::string("half_") + dtype_name(t));
    write_checkpoint(dir.path, config_of(s), make_weights(s), t);
    const GgufFile f = models::load_hf_llama(dir.str());
    EXPECT_EQ(f.tensor_info("blk.0.attn_q.weight").type, t == DType::BF16 ? GgmlType::BF16 : GgmlType::F16);
    EXPECT_EQ(f.tensor_info("blk.1.ffn_down.weight").type, t == DType::BF16 ? GgmlType::BF16 : GgmlType::F16);
    // The reference takes the same rounded weights, so the tolerance is the f32 one.
    check_against_reference(s, dir.str(), 1e-4);
  }
}

TEST(LlamaHf, ShardedCheckpoint) { check_spec(Spec{}, "sharded", 1e-4, 3); }

TEST(LlamaHf, RopeScalingLinearAndLlama3) {
  Spec lin;
  lin.rope_scaling = "{\"rope_type\": \"linear\", \"factor\": 2.0}";
  lin.linear = 2.0;
  check_spec(lin, "linear");
  Spec l3;
  l3.theta = 500000.0;
  l3.rope_scaling = "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                    "\"original_max_position_embeddings\": 64}";
  l3.llama3 = true;
  TempDir dir("llama3");
  write_checkpoint(dir.path, config_of(l3), make_weights(l3), DType::F32);
  // The blend reaches every case at these sizes: divisors 1, 8 and some in between.
  const std::vector<float> div = models::hf_llama3_rope_divisors(models::read_hf_llama_config(dir.str()));
  ASSERT_EQ(div.size(), 8u);
  EXPECT_EQ(div.front(), 1.0f);
  EXPECT_EQ(div.back(), 8.0f);
  EXPECT_TRUE(std::any_of(div.begin(), div.end(), [](float x) { return x > 1.0f && x < 8.0f; }));
  check_against_reference(l3, dir.str(), 1e-4);
}

TEST(LlamaHf, Transformers5RopeParameters) {
  Spec s;
  s.theta = 500000.0;
  s.llama3 = true;
  auto c = config_of(s);
  c.erase("rope_theta");
  c.erase("rope_scaling");
  c["rope_parameters"] = "{\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, \"factor\": 8.0, \"low_freq_factor\": 1.0, "
                         "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}";
  c["dtype"] = "\"float32\"";
  TempDir dir("v5");
  write_checkpoint(dir.path, c, make_weights(s), DType::F32);
  check_against_reference(s, dir.str(), 1e-4);
}

TEST(LlamaHf, ConfigIsReadWithDefaultsAndMistral) {
  Spec s;
  auto c = config_of(s);
  for (const char* k : {"num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "tie_word_embeddings"}) c.erase(k);
  TempDir dir("defaults");
  write_text(dir.path / "config.json", json_text(c));
  models::HfLlamaConfig hc = models::read_hf_llama_config(dir.str());
  EXPECT_EQ(hc.kv_heads, 4);
  EXPECT_EQ(hc.head_dim, 16);
  EXPECT_EQ(hc.rms_eps, 1e-6);
  EXPECT_EQ(hc.rope_theta, 10000.0);
  EXPECT_FALSE(hc.tied);
  EXPECT_EQ(hc.bos_ids, std::vector<int32_t>({1}));
  EXPECT_EQ(hc.eos_ids, std::vector<int32_t>({2, 3}));
  // Mistral: the context is capped at the sliding window (absent: MistralConfig's 4096; null: none).
  c["model_type"] = "\"mistral\"";
  c["architectures"] = "[\"MistralForCausalLM\"]";
  c["max_position_embeddings"] = "32768";
  write_text(dir.path / "config.json", json_text(c));
  EXPECT_EQ(models::read_hf_llama_config(dir.str()).context, 4096);
  c["sliding_window"] = "null";
  write_text(dir.path / "config.json", json_text(c));
  EXPECT_EQ(models::read_hf_llama_config(dir.str()).context, 32768);
  c["sliding_window"] = "1024";
  write_text(dir.path / "config.json", json_text(c));
  EXPECT_EQ(models::read_hf_llama_config(dir.str()).context, 1024);
}

TEST(LlamaHf, SaveAsGgufThenBuild) {
  const Spec s;
  TempDir dir("save");
  write_checkpoint(dir.path, config_of(s), make_weights(s), DType::BF16);
  const std::string out = (dir.path / "out.gguf").string();
  models::save_hf_llama_as_gguf(dir.str(), out);
  const GgufFile f(out);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_u64("llama.attention.head_count_kv"), 2u);
  EXPECT_EQ(f.tensors().size(), 2u + 9u * 2u + 1u);  // embedding, norm, head + 9 a layer
  EXPECT_NO_THROW(models::build_llama_from_gguf(f));
}

// Qwen2: biases on q / k / v, NeoX rows as stored (no permutation), tied head (as Qwen2-0.5B).
TEST(LlamaHf, Qwen2BiasesMatchTheHfReference) {
  Spec s;
  s.model_type = "qwen2";
  s.tied = true;
  check_spec(s, "qwen2");
  s.dtype = DType::BF16;
  check_spec(s, "qwen2_bf16");
}

// Qwen3: RMSNorm of each head's q and k before RoPE; head_dim 32 with hidden 64 and 4 heads.
TEST(LlamaHf, Qwen3HeadNormsMatchTheHfReference) {
  Spec s;
  s.model_type = "qwen3";
  s.head_dim = 32;
  check_spec(s, "qwen3");
  s.attention_bias = true;  // q / k / v / o biases
  check_spec(s, "qwen3_bias");
}

// Gemma: GeGLU, the embedding scaled by sqrt(hidden), norms by (1 + w), the head tied; head_dim
// 32 with 4 heads of hidden 64.
TEST(LlamaHf, GemmaMatchesTheHfReference) {
  Spec s;
  s.model_type = "gemma";
  s.tied = true;
  s.head_dim = 32;
  check_spec(s, "gemma");
}

// Gemma2: also the post-attention / post-MLP norms, attention and final logit softcaps (small
// enough to bend the random model's logits) and a query_pre_attn_scalar other than head_dim
// (written as gemma2.attention.scale); with bf16 weights too. The softcaps off (null) as well.
TEST(LlamaHf, Gemma2MatchesTheHfReference) {
  Spec s;
  s.model_type = "gemma2";
  s.tied = true;
  s.head_dim = 32;
  s.attn_softcap = 2.0;
  s.final_softcap = 3.0;
  s.query_scalar = 20.0;
  check_spec(s, "gemma2");
  s.dtype = DType::BF16;
  check_spec(s, "gemma2_bf16");
  s.attn_softcap = s.final_softcap = 0;
  s.query_scalar = 0;
  s.dtype = DType::F32;
  check_spec(s, "gemma2_no_caps");
}

TEST(LlamaHf, GemmaConfigErrors) {
  Spec s;
  s.model_type = "gemma2";
  s.tied = true;
  s.head_dim = 32;
  TempDir dir("gemma_errors");
  auto config = config_of(s);
  config["hidden_activation"] = "\"gelu\"";
  write_checkpoint(dir.path, config, make_weights(s), DType::F32);
  EXPECT_THAT(error_message([&] { models::load_hf_llama(dir.str()); }), HasSubstr("gelu_pytorch_tanh"));
  config = config_of(s);
  config["attn_logit_softcapping"] = "-1";
  write_text(dir.path / "config.json", json_text(config));
  EXPECT_THAT(error_message([&] { models::load_hf_llama(dir.str()); }), HasSubstr("attn_logit_softcapping"));
  // A gemma2 checkpoint without its post-MLP norms is missing tensors, not silently a Gemma 1.
  Weights w = make_weights(s);
  std::erase_if(w, [](const auto& t) { return t.first.find("post_feedforward_layernorm") != std::string::npos; });
  write_checkpoint(dir.path, config_of(s), w, DType::F32);
  EXPECT_THAT(error_message([&] { models::load_hf_llama(dir.str()); }), HasSubstr("post_feedforward_layernorm"));
}

// Llama with attention_bias: the q / k biases are permuted with their rows.
TEST(LlamaHf, LlamaAttentionBiasMatchesTheHfReference) {
  Spec s;
  s.attention_bias = true;
  check_spec(s, "llama_bias");
}

TEST(LlamaHf, QwenSavesAsQwenGgufInHfRowOrder) {
  Spec s;
  s.model_type = "qwen2";
  TempDir dir("save_qwen");
  const Weights w = make_weights(s);
  write_checkpoint(dir.path, config_of(s), w, DType::F32);
  const std::string out = (dir.path / "out.gguf").string();
  models::save_hf_llama_as_gguf(dir.str(), out);
  const GgufFile f(out);
  EXPECT_EQ(f.get_string("general.architecture"), "qwen2");
  EXPECT_EQ(f.get_u64("qwen2.attention.head_count_kv"), 2u);
  EXPECT_EQ(f.tensors().size(), 2u + 12u * 2u + 1u);  // 9 a layer and 3 biases
  // llama.cpp's layout for qwen2: q as Hugging Face stores it (rotated as NeoX pairs).
  const Tensor q = f.tensor_f32("blk.1.attn_q.weight"), qb = f.tensor_f32("blk.1.attn_q.bias");
  const Tensor& hq = find(w, "model.layers.1.self_attn.q_proj.weight");
  const Tensor& hb = find(w, "model.layers.1.self_attn.q_proj.bias");
  EXPECT_TRUE(std::equal(q.data<float>(), q.data<float>() + q.numel(), hq.data<float>()));
  EXPECT_TRUE(std::equal(qb.data<float>(), qb.data<float>() + qb.numel(), hb.data<float>()));
  const models::GgufLlama m = models::build_llama_from_gguf(f);
  EXPECT_EQ(m.config.rope_style, RopeStyle::NeoX);
  EXPECT_THAT(models::describe_gguf_llama(f), HasSubstr("qwen2: 2 blocks"));
  EXPECT_THAT(models::describe_gguf_llama(f), HasSubstr("attention biases"));
}

// A config value beyond 32 bits goes into the GGUF form whole (as a u64), not cut to its low bits.
TEST(LlamaHf, ContextBeyond32BitsIsKeptWhole) {
  const Spec s;
  auto c = config_of(s);
  c["max_position_embeddings"] = "4294967396";  // 2^32 + 100
  TempDir dir("ctx64");
  write_checkpoint(dir.path, c, make_weights(s), DType::F32);
  EXPECT_EQ(models::read_gguf_llama_config(models::load_hf_llama(dir.str())).context, int64_t{4294967396});
}

TEST(LlamaHf, QwenSlidingWindowCapsTheContext) {
  Spec s;
  s.model_type = "qwen2";
  auto c = config_of(s);
  c["max_position_embeddings"] = "32768";
  TempDir dir("qwen_window");
  auto context = [&] {
    write_text(dir.path / "config.json", json_text(c));
    return models::read_hf_llama_config(dir.str()).context;
  };
  EXPECT_EQ(context(), 32768);  // use_sliding_window false: every layer attends to everything
  c["use_sliding_window"] = "true";
  EXPECT_EQ(context(), 32768);  // max_window_layers 28 >= 2 layers: no layer slides
  c["max_window_layers"] = "1";
  EXPECT_EQ(context(), 4096);
  c["use_sliding_window"] = "false";
  c["layer_types"] = "[\"full_attention\", \"sliding_attention\"]";  // transformers' own list says so
  EXPECT_EQ(context(), 4096);
  c["sliding_window"] = "null";
  write_text(dir.path / "config.json", json_text(c));
  EXPECT_THAT(error_message([&] { models::read_hf_llama_config(dir.str()); }), HasSubstr("sliding_window is not set"));
}

// ---- malformed inputs: each an rlx::Error naming the thing ----

void expect_error(const std::string& dir, const std::string& what) {
  try {
    models::load_hf_llama(dir);
    ADD_FAILURE() << "no error; expected one containing: " << what;
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(what));
  }
}

// A valid checkpoint whose config.json is `edit`ed.
void expect_config_error(const std::function<void(std::map<std::string, std::string>&)>& edit, const std::string& what) {
  const Spec s;
  TempDir dir("bad_config");
  auto c = config_of(s);
  edit(c);
  write_checkpoint(dir.path, c, make_weights(s), DType::F32);
  expect_error(dir.str(), what);
}

TEST(LlamaHf, ConfigErrorsNameTheKey) {
  using C = std::map<std::string, std::string>;
  expect_config_error([](C& c) { c.erase("hidden_size"); }, "key 'hidden_size' is missing");
  expect_config_error([](C& c) { c["num_hidden_layers"] = "\"2\""; }, "key 'num_hidden_layers' must be an integer");
  expect_config_error([](C& c) { c["num_key_value_heads"] = "3"; }, "not a multiple of num_key_value_heads 3");
  expect_config_error([](C& c) { c["model_type"] = "\"qwen2\""; }, "rlx runs [\"Qwen2ForCausalLM\"]");
  expect_config_error([](C& c) { c["model_type"] = "\"phi3\""; }, "model_type is 'phi3'");
  expect_config_error([](C& c) { c["model_type"] = "\"gpt2\""; }, "model_type is 'gpt2'");
  expect_config_error([](C& c) { c["architectures"] = "[\"LlamaForSequenceClassification\"]"; }, "key 'architectures'");
  expect_config_error([](C& c) { c["hidden_act"] = "\"gelu\""; }, "key 'hidden_act'");
  // attention_bias: the biases are then part of the model, and these weights have none.
  expect_config_error([](C& c) { c["attention_bias"] = "true"; }, "tensor 'model.layers.0.self_attn.q_proj.bias' is missing");
  auto as = [](C& c, const char* type, const char* arch) {
    c["model_type"] = std::string("\"") + type + "\"";
    c["architectures"] = std::string("[\"") + arch + "\"]";
  };
  expect_config_error(
      [&](C& c) {
        as(c, "mistral", "MistralForCausalLM");
        c["attention_bias"] = "true";
      },
      "Mistral has no attention biases");
  expect_config_error(
      [&](C& c) {
        as(c, "qwen2", "Qwen2ForCausalLM");
        c["layer_types"] = "[\"full_attention\"]";
      },
      "key 'layer_types' must list one attention type per layer (2)");
  expect_config_error(
      [&](C& c) {
        as(c, "qwen2", "Qwen2ForCausalLM");
        c["layer_types"] = "[\"full_attention\", \"chunked_attention\"]";
      },
      "\"chunked_attention\"");
  expect_config_error([](C& c) { c["rope_scaling"] = "{\"rope_type\": \"yarn\", \"factor\": 4.0}"; },
                      "key 'rope_scaling.rope_type' is 'yarn'");
  expect_config_error([](C& c) { c["rope_scaling"] = "{\"rope_type\": \"linear\"}"; }, "key 'rope_scaling.factor' is missing");
  expect_config_error([](C& c) { c["rope_scaling"] = "{\"rope_type\": \"linear\", \"factor\": 2, \"mscale\": 1}"; },
                      "key 'rope_scaling.mscale'");
  expect_config_error([](C& c) { c["rope_parameters"] = "{\"rope_type\": \"default\", \"rope_theta\": 5.0}"; },
                      "disagree");
  expect_config_error([](C& c) { c["quantization_config"] = "{\"quant_method\": \"gptq\"}"; }, "quantization_config");
  expect_config_error([](C& c) { c["sliding_window"] = "16"; }, "key 'sliding_window' is not one rlx knows");
  expect_config_error([](C& c) { c["rms_norm_eps"] = "-1"; }, "key 'rms_norm_eps' must be a positive number");
}

TEST(LlamaHf, FileErrorsNameTheFile) {
  const Spec s;
  {
    TempDir dir("no_config");
    expect_error(dir.str(), "config.json is missing");
    expect_error((dir.path / "nope").string(), "not a directory");
  }
  {
    TempDir dir("bad_json");
    write_text(dir.path / "config.json", "{\"model_type\": \"llama\",");
    expect_error(dir.str(), "config.json: not valid JSON");
  }
  {
    TempDir dir("no_weights");
    write_text(dir.path / "config.json", json_text(config_of(s)));
    expect_error(dir.str(), "neither model.safetensors nor model.safetensors.index.json");
  }
  {
    TempDir dir("missing_shard");
    write_checkpoint(dir.path, config_of(s), make_weights(s), DType::F32, 2);
    fs::remove(dir.path / "model-00002-of-00002.safetensors");
    expect_error(dir.str(), "shard 'model-00002-of-00002.safetensors' (holding");
    expect_error(dir.str(), "is listed but not in the directory");
  }
  {
    TempDir dir("index_disagrees");
    write_checkpoint(dir.path, config_of(s), make_weights(s), DType::F32, 2);
    write_text(dir.path / "model.safetensors.index.json",
               "{\"weight_map\": {\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\"}}");
    expect_error(dir.str(), "which the index does not list");
  }
  {
    TempDir dir("escaping_shard");
    write_checkpoint(dir.path, config_of(s), make_weights(s), DType::F32, 2);
    write_text(dir.path / "model.safetensors.index.json", "{\"weight_map\": {\"model.norm.weight\": \"../x.safetensors\"}}");
    expect_error(dir.str(), "leaves the folder");
  }
}

// A valid config with the weights `edit`ed.
void expect_weights_error(const std::function<void(Weights&)>& edit, const std::string& what, bool tied = false) {
  Spec s;
  s.tied = tied;
  TempDir dir("bad_weights");
  Weights w = make_weights(s);
  edit(w);
  write_text(dir.path / "config.json", json_text(config_of(s)));
  save_safetensors((dir.path / "model.safetensors").string(), w);
  expect_error(dir.str(), what);
}

TEST(LlamaHf, TensorErrorsNameTheTensor) {
  auto drop = [](const std::string& name) {
    return [name](Weights& w) { std::erase_if(w, [&](const auto& p) { return p.first == name; }); };
  };
  auto replace = [](const std::string& name, Tensor t) {
    return [name, t](Weights& w) {
      for (auto& p : w)
        if (p.first == name) p.second = t;
    };
  };
  expect_weights_error(drop("model.layers.1.mlp.up_proj.weight"), "tensor 'model.layers.1.mlp.up_proj.weight' is missing");
  expect_weights_error(drop("lm_head.weight"), "tensor 'lm_head.weight' is missing");
  expect_weights_error(replace("model.layers.0.self_attn.k_proj.weight", randn({64, 64}, 1, 1.0f)),
                       "tensor 'model.layers.0.self_attn.k_proj.weight' (in model.safetensors) has shape [64,64], "
                       "config.json implies [32,64]");
  expect_weights_error(replace("model.norm.weight", randn({64}, 1, 1.0f).cast(DType::F64)),
                       "tensor 'model.norm.weight' is f64");
  expect_weights_error([](Weights& w) { w.emplace_back("model.layers.0.self_attn.q_proj.bias", randn({64}, 1, 1.0f)); },
                       "'model.layers.0.self_attn.q_proj.bias' are not part of a llama model");
  expect_weights_error([](Weights& w) { w.emplace_back("model.layers.2.mlp.up_proj.weight", randn({96, 64}, 1, 1.0f)); },
                       "'model.layers.2.mlp.up_proj.weight' are not part of");
  // Tied, yet an lm_head.weight that is not the embedding.
  expect_weights_error([](Weights& w) { w.emplace_back("lm_head.weight", randn({50, 64}, 5, 1.0f)); },
                       "'lm_head.weight' differs from 'model.embed_tokens.weight'", true);
}

TEST(LlamaHf, TiedWithTheEmbeddingStoredTwiceIsAccepted) {
  Spec s;
  s.tied = true;
  TempDir dir("tied_twice");
  Weights w = make_weights(s);
  w.emplace_back("lm_head.weight", find(w, "model.embed_tokens.weight"));
  write_text(dir.path / "config.json", json_text(config_of(s)));
  save_safetensors((dir.path / "model.safetensors").string(), w);
  check_against_reference(s, dir.str(), 1e-4);
}

// ---- the command line ----

std::string run_cli(const std::string& args, int* status) {
  std::string out;
  FILE* p = ::popen((rlx::testing::cli_path() + " " + args + " 2>&1").c_str(), "r");
  if (!p) throw Error("popen failed");
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  *status = ::pclose(p);
  return out;
}

TEST(LlamaHf, CliGenerateFromADirectoryPrintsIds) {
  const Spec s;
  TempDir dir("cli");
  write_checkpoint(dir.path, config_of(s), make_weights(s), DType::F32);
  // The greedy ids the library produces, without stop tokens.
  const GgufFile f = models::load_hf_llama(dir.str());
  Generator gen(f, {.max_ctx = 64});
  GenerateOptions o;
  o.max_new_tokens = 6;
  const std::vector<int32_t> prompt = {5, 9, 4};
  const GenerateResult r = gen.generate(std::span<const int32_t>(prompt), o);
  std::string want = "5 9 4";
  for (int32_t id : r.tokens) want += " " + std::to_string(id);
  int status = 0;
  std::string out = run_cli("generate " + dir.str() + " --prompt-ids 5,9,4 -n 6 --ignore-eos -t 1", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_THAT(out, HasSubstr(want + "\n")) << out;
  // config.json's eos ids (2, 3) stop generation unless --ignore-eos.
  const auto first_eos = std::find_if(r.tokens.begin(), r.tokens.end(), [](int32_t t) { return t == 2 || t == 3; });
  out = run_cli("generate " + dir.str() + " --prompt-ids 5,9,4 -n 6 -t 1", &status);
  EXPECT_THAT(out, HasSubstr(first_eos == r.tokens.end() ? "stop: length" : "stop: stop token")) << out;
  // Text needs a tokenizer, which a checkpoint does not have for rlx.
  out = run_cli("generate " + dir.str() + " -p hello -n 2", &status);
  EXPECT_NE(status, 0);
  EXPECT_THAT(out, HasSubstr("--prompt-ids"));
  // rlx quantize converts and quantizes; the file generates.
  const std::string q = (dir.path / "q8.gguf").string();
  out = run_cli("quantize " + dir.str() + " " + q + " --scheme q8_0", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_THAT(out, HasSubstr("blk.1.attn_q.weight"));
  const GgufFile qf(q);
  EXPECT_EQ(qf.tensor_info("blk.1.attn_q.weight").type, GgmlType::Q8_0);
  out = run_cli("generate " + q + " --prompt-ids 5,9,4 -n 3 -t 1", &status);
  EXPECT_EQ(status, 0) << out;
}

}  // namespace
}  // namespace rlx
