#include "models/llama_gguf.h"
#include "models/sampling_head.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "io/file_access.h"
#include "quant/ggml_blocks.h"

namespace rlx::models {
namespace {

std::string i2s(int64_t v) { return std::to_string(v); }

[[noreturn]] void fail(const GgufFile& f, const std::string& msg) {
  throw Error(f.what() + ": Llama from GGUF: " + msg);
}

// The integer value of metadata key `key` (any integer type that fits in int64).
int64_t integer_of(const GgufFile& f, const std::string& key, const GgufValue& v) {
  if (!v.is_integer()) fail(f, "metadata key '" + key + "' must be an integer, got " + gguf_value_type_name(v.type()));
  try {
    return v.as_i64();
  } catch (const Error& e) {
    fail(f, "metadata key '" + key + "': " + e.what());
  }
}

int64_t req_int(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (!v) fail(f, "metadata key '" + key + "' is missing (every llama GGUF file has it)");
  const int64_t x = integer_of(f, key, *v);
  if (x <= 0) fail(f, "metadata key '" + key + "' must be positive, got " + i2s(x));
  return x;
}
int64_t opt_int(const GgufFile& f, const std::string& key, int64_t dflt) { return f.find(key) ? req_int(f, key) : dflt; }
// An optional integer that may be 0.
int64_t opt_int0(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (!v) return 0;
  return integer_of(f, key, *v);
}
double opt_num(const GgufFile& f, const std::string& key, double dflt) {
  const GgufValue* v = f.find(key);
  if (!v) return dflt;
  const double x = v->as_f64();
  if (!(x > 0)) fail(f, "metadata key '" + key + "' must be a positive number, got " + std::to_string(x));
  return x;
}

bool is_16bit(GgmlType t) { return t == GgmlType::F16 || t == GgmlType::BF16; }

// Whether the builder keeps matrix `t` (rows of `in` values) as the file stores it, multiplied by
// DequantMatMul: a block format under block_weights; F16 / BF16 (DequantMatMul's 16-bit formats,
// 32-value row pieces) under half_weights with f32 activations. Otherwise it becomes a MatMul
// param of the activations' dtype.
bool kept_as_stored(GgmlType t, int64_t in, bool half_weights, bool block_weights, DType act) {
  const auto fmt = quant::quant_format_of(t);
  if (!fmt) return false;
  return is_16bit(t) ? half_weights && act == DType::F32 && in % quant_block(*fmt).elements == 0 : block_weights;
}

const GgufTensorInfo& tensor_of(const GgufFile& f, const std::string& name, const std::vector<int64_t>& shape,
                                std::set<std::string>* used = nullptr) {
  if (!f.contains(name)) fail(f, "tensor '" + name + "' is missing");
  if (used) used->insert(name);
  const GgufTensorInfo& t = f.tensor_info(name);
  if (t.shape() != shape)
    fail(f, "tensor '" + name + "' has shape " + dims_str(t.shape()) + ", the metadata implies " + dims_str(shape));
  return t;
}

struct Builder {
  const GgufFile& f;
  const GgufLlamaConfig& c;
  Graph& g;
  NamedTensors& params;
  bool half_weights = true;      // GgufLlamaOptions::half_weights
  bool block_weights = true;     // GgufLlamaOptions::block_weights
  DType act = DType::F32;        // GgufLlamaOptions::activations
  std::set<std::string> used;
  Dim batch = Dim(1);            // GgufLlamaOptions::batch

  // Whether GGUF tensor `t` is stored in the activations' (16-bit) dtype: its bytes are the param's.
  bool stored_as_act(const GgufTensorInfo& t) const {
    return (t.type == GgmlType::BF16 && act == DType::BF16) || (t.type == GgmlType::F16 && act == DType::F16);
  }

  // The GGUF tensor `name` (any stored type) as a param of the activations' dtype.
  Value act_param(const std::string& name, const std::vector<int64_t>& shape) {
    const GgufTensorInfo& info = tensor_of(f, name, shape, &used);
    if (stored_as_act(info)) {
      const auto bytes = f.raw(name);
      params.emplace_back(name, Tensor::from_bytes(act, shape, bytes.data(), bytes.size()));
    } else {
      const Tensor t = f.tensor_f32(name);
      params.emplace_back(name, act == DType::F32 ? t : t.cast(act));
    }
    return g.param(name, Shape(std::vector<Dim>(shape.begin(), shape.end()), act));
  }

  // x (..., in) @ W^T with W the GGUF tensor `name` stored [out, in]; `param_name` names the param.
  Value project(Value x, const std::string& name, int64_t out, int64_t in, const std::string& param_name) {
    const GgufTensorInfo& t = tensor_of(f, name, {out, in}, &used);
    // F16 / BF16 matrices stay 2 bytes a weight when kept; a row length that is not a multiple
    // of 32 falls back to a MatMul below.
    const auto fmt = quant::quant_format_of(t.type);
    if (kept_as_stored(t.type, in, half_weights, block_weights, act)) {
      const QuantBlock blk = quant_block(*fmt);
      if (in % blk.elements != 0)
        fail(f, "tensor '" + name + "' has rows of " + i2s(in) + " values, not whole " + ggml_type_name(t.type) + " blocks");
      const int64_t row_bytes = in / blk.elements * blk.bytes;
      const auto bytes = f.raw(name);
      params.emplace_back(param_name, Tensor::from_bytes(DType::U8, {out, row_bytes}, bytes.data(), bytes.size()));
      ops::DequantMatMul op;
      op.format = *fmt;
      op.k = in;
      return g.apply(op, {x, g.param(param_name, Shape({out, row_bytes}, DType::U8))});
    }
    // Block formats not kept as blocks are dequantized here (tensor_f32) like the others.
    if (t.type != GgmlType::F32 && !is_16bit(t.type) && !fmt)
      fail(f, std::string("tensor '") + name + "' is " + ggml_type_name(t.type) +
                  ", which the Llama builder does not run (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K); "
                  "re-quantize it, e.g. with `rlx quantize --scheme q4_k`");
    if (act == DType::F32) {
      params.emplace_back(param_name, f.tensor_f32(name));
      Value w = g.param(param_name, Shape({out, in}, DType::F32));
      return g.matmul(x, g.transpose(w, {1, 0}));
    }
    // 16-bit activations: the weight transposed here, once, to [in, out] in their dtype (the
    // row-major right operand every backend's GEMV streams); 16-bit values of that dtype moved as
    // they are, others through f32.
    if (stored_as_act(t)) {
      const auto bytes = f.raw(name);
      Tensor w = Tensor::empty(act, {in, out});
      transpose_into(reinterpret_cast<const uint16_t*>(bytes.data()), static_cast<uint16_t*>(w.raw()), out, in);
      params.emplace_back(param_name, std::move(w));
    } else {
      const Tensor src = f.tensor_f32(name);
      Tensor w = Tensor::empty(DType::F32, {in, out});
      transpose_into(src.data<float>(), w.data<float>(), out, in);
      params.emplace_back(param_name, w.cast(act));
    }
    return g.matmul(x, g.param(param_name, Shape({in, out}, act)));
  }

  // dst [cols, rows] = src [rows, cols] transposed.
  template <class T>
  static void transpose_into(const T* src, T* dst, int64_t rows, int64_t cols) {
    constexpr int64_t kB = 64;  // blocks that stay in cache on both sides
    for (int64_t r0 = 0; r0 < rows; r0 += kB)
      for (int64_t c0 = 0; c0 < cols; c0 += kB)
        for (int64_t r = r0; r < std::min(rows, r0 + kB); ++r)
          for (int64_t c = c0; c < std::min(cols, c0 + kB); ++c) dst[c * rows + r] = src[r * cols + c];
  }

  // cos / sin (S, n_rot / 2) of angle = position * theta^(-2i / n_rot) / (linear * freqs[i]).
  std::pair<Value, Value> rope_tables(Value positions) {
    const int64_t half = c.n_rot / 2;
    std::vector<float> inv(static_cast<size_t>(half));
    std::vector<float> freqs(static_cast<size_t>(half), 1.0f);
    if (c.rope_freqs) {
      tensor_of(f, "rope_freqs.weight", {half}, &used);
      const Tensor ff = f.tensor_f32("rope_freqs.weight");
      for (int64_t i = 0; i < half; ++i) {
        freqs[static_cast<size_t>(i)] = ff.data<float>()[i];
        if (!(freqs[static_cast<size_t>(i)] > 0) || !std::isfinite(freqs[static_cast<size_t>(i)]))
          fail(f, "rope_freqs.weight[" + i2s(i) + "] = " + std::to_string(freqs[static_cast<size_t>(i)]) +
                      " must be positive and finite");
      }
    }
    for (int64_t i = 0; i < half; ++i)
      inv[static_cast<size_t>(i)] = static_cast<float>(
          std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(c.n_rot)) /
          (c.rope_linear * freqs[static_cast<size_t>(i)]));
    std::vector<Dim> col = g.shape(positions).dims;  // (S, 1) or (B, S, 1): tables per batch entry
    col.emplace_back(1);
    Value pos = g.reshape(g.cast(positions, DType::F32), col);
    Value angle = g.mul(pos, g.constant(Tensor::f32({half}, inv)));
    Value cos = g.act(ActKind::Cos, angle), sin = g.act(ActKind::Sin, angle);  // angles in f32
    if (act != DType::F32) cos = g.cast(cos, act), sin = g.cast(sin, act);
    return {cos, sin};
  }

  // The KV-cache form (build_llama_decoder_from_gguf): the chunk's positions say where its rows
  // go in the caches (CacheWrite) and which cached keys each query row sees (a Positions mask).
  struct Cache {
    int64_t max_ctx = 0;
    Value positions;             // (S) i64, or (B, S) with a batch
    std::vector<Value> outputs;  // the updated caches, k then v per block
  };

  // The cache input `name` (1, max_ctx, Hkv, D) with the chunk's rows `x` (1, S, Hkv, D) written
  // at their positions; the result is also a graph output (the next run's cache). Carried by
  // bind_state, the CPU writes only the S rows in place (docs/generation.md).
  Value cache_update(Cache& kc, const std::string& name, Value x) {
    Value cache = g.input(name, Shape({batch, Dim(kc.max_ctx), Dim(c.kv_heads), Dim(c.head_dim)}, act));
    Value updated = g.cache_write(cache, x, kc.positions);
    kc.outputs.push_back(updated);
    return updated;
  }

  // project() of `stem`.weight plus `stem`.bias [out] where the file has one.
  Value linear(Value x, const std::string& stem, int64_t out, int64_t in) {
    Value y = project(x, stem + ".weight", out, in, stem + ".weight");
    const std::string bias = stem + ".bias";
    return f.contains(bias) ? g.add(y, act_param(bias, {out})) : y;
  }

  // Rows (1, S, heads, D) of a q / k projection: RMS-normalized per head (qwen3), then rotated.
  Value heads_rotated(Value x, const std::string& norm, Value cos, Value sin) {
    if (c.qk_norm) x = g.rms_norm(x, act_param(norm, {c.head_dim}), std::nullopt, c.rms_eps);
    return g.rope(x, cos, sin, c.head_dim, c.n_rot, c.rope_style);
  }

  Value block(Value h, Value cos, Value sin, int64_t i, const Dim& s, Cache* kc = nullptr) {
    const std::string p = "blk." + i2s(i) + ".";
    const int64_t e = c.hidden, hq = c.heads, hkv = c.kv_heads, d = c.head_dim;
    Value x = g.rms_norm(h, act_param(p + "attn_norm.weight", {e}), std::nullopt, c.rms_eps);
    Value q = g.reshape(linear(x, p + "attn_q", hq * d, e), {batch, s, Dim(hq), Dim(d)});
    Value k = g.reshape(linear(x, p + "attn_k", hkv * d, e), {batch, s, Dim(hkv), Dim(d)});
    Value v = g.reshape(linear(x, p + "attn_v", hkv * d, e), {batch, s, Dim(hkv), Dim(d)});
    q = heads_rotated(q, p + "attn_q_norm.weight", cos, sin);
    k = heads_rotated(k, p + "attn_k_norm.weight", cos, sin);
    ops::Attention attn;
    attn.num_heads = hq;
    attn.num_kv_heads = hkv;
    attn.head_dim = d;
    attn.mask_kind = MaskKind::Causal;
    attn.layout = AttnLayout::BSHD;
    attn.softcap = c.attn_softcap;
    attn.score_scale = c.attn_scale;
    std::optional<Value> mask;
    if (kc) {
      k = cache_update(*kc, "cache_k." + i2s(i), k);
      v = cache_update(*kc, "cache_v." + i2s(i), v);
      attn.mask_kind = MaskKind::Positions;  // key j visible to row i when j <= positions[i]
      mask = kc->positions;
    }
    Value ctx = g.reshape(g.attention(q, k, v, mask, attn), {batch, s, Dim(hq * d)});
    Value o = linear(ctx, p + "attn_output", e, hq * d);
    if (c.post_norms) o = g.rms_norm(o, act_param(p + "post_attention_norm.weight", {e}), std::nullopt, c.rms_eps);
    Value h1 = g.add(h, o);
    Value y = g.rms_norm(h1, act_param(p + "ffn_norm.weight", {e}), std::nullopt, c.rms_eps);
    Value gate = g.act(c.ffn_act, project(y, p + "ffn_gate.weight", c.ffn, e, p + "ffn_gate.weight"));
    Value up = project(y, p + "ffn_up.weight", c.ffn, e, p + "ffn_up.weight");
    Value down = project(g.mul(gate, up), p + "ffn_down.weight", e, c.ffn, p + "ffn_down.weight");
    if (c.post_norms) down = g.rms_norm(down, act_param(p + "post_ffw_norm.weight", {e}), std::nullopt, c.rms_eps);
    return g.add(h1, down);
  }
};

}  // namespace

// Gemma's differences from Llama, as llama.cpp writes and runs its files: the embedding scaled by
// sqrt(hidden), GeGLU, norm weights stored with the 1 already added (plain RMSNorms), and for
// gemma2 the post-attention / post-MLP norms, the attention and final logit softcaps, the query
// scale (1 / sqrt(head_dim), or 1 / sqrt(hidden / heads) for the 46-block 27B as llama.cpp
// decides, unless gemma2.attention.scale says) and the sliding window of its local layers, within
// which every layer attends to the whole context (the context is capped at the window).
namespace {
void read_gemma(const GgufFile& f, GgufLlamaConfig& c) {
  const std::string a = c.arch + ".";
  c.ffn_act = ActKind::GeluApprox;
  c.embed_scale = std::sqrt(static_cast<double>(c.hidden));
  if (c.arch != "gemma2") return;
  c.post_norms = true;
  c.attn_softcap = opt_num(f, a + "attn_logit_softcapping", 0.0);
  c.final_softcap = opt_num(f, a + "final_logit_softcapping", 0.0);
  if (c.attn_softcap < 0 || c.final_softcap < 0 || !std::isfinite(c.attn_softcap) || !std::isfinite(c.final_softcap))
    fail(f, a + "attn_logit_softcapping / final_logit_softcapping must be >= 0 (0 = off)");
  c.attn_scale = c.layers == 46 ? 1.0 / std::sqrt(static_cast<double>(c.hidden / c.heads))
                                : 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  c.attn_scale = opt_num(f, a + "attention.scale", c.attn_scale);
  if (!(c.attn_scale > 0) || !std::isfinite(c.attn_scale)) fail(f, a + "attention.scale must be a positive number");
  c.sliding_window = opt_int0(f, a + "attention.sliding_window");
  if (c.sliding_window > 0) c.context = std::min(c.context, c.sliding_window);
}
}  // namespace

GgufLlamaConfig read_gguf_llama_config(const GgufFile& f) {
  const GgufValue* arch_v = f.find("general.architecture");
  if (!arch_v || arch_v->type() != GgufValueType::String)
    fail(f, "metadata key 'general.architecture' is missing or not a string");
  const std::string arch = arch_v->as_string();
  if (!is_gguf_llama_family(arch))
    fail(f, "general.architecture is '" + io::printable(arch) + "'; this builder reads 'llama' files (Llama, Mistral "
            "and other models converted as llama), 'qwen2' (Qwen2, Qwen2.5), 'qwen3' (dense Qwen3), 'gemma' and "
            "'gemma2' files");
  const std::string a = arch + ".";
  GgufLlamaConfig c;
  c.arch = arch;
  c.rope_style = arch == "llama" ? RopeStyle::GptJ : RopeStyle::NeoX;
  c.qk_norm = arch == "qwen3";
  c.gemma = arch == "gemma" || arch == "gemma2";
  c.layers = req_int(f, a + "block_count");
  c.hidden = req_int(f, a + "embedding_length");
  c.ffn = req_int(f, a + "feed_forward_length");
  c.heads = req_int(f, a + "attention.head_count");
  c.context = req_int(f, a + "context_length");
  c.kv_heads = opt_int(f, a + "attention.head_count_kv", c.heads);
  if (c.heads % c.kv_heads != 0)
    fail(f, a + "attention.head_count = " + i2s(c.heads) + " is not a multiple of " + a + "attention.head_count_kv = " +
                i2s(c.kv_heads));
  if (!f.find(a + "attention.key_length") && c.hidden % c.heads != 0)
    fail(f, a + "embedding_length = " + i2s(c.hidden) + " is not a multiple of the head count " + i2s(c.heads) +
                " (and " + a + "attention.key_length is not given)");
  c.head_dim = opt_int(f, a + "attention.key_length", c.hidden / c.heads);
  if (opt_int(f, a + "attention.value_length", c.head_dim) != c.head_dim)
    fail(f, a + "attention.value_length differs from the key length; rlx's attention needs them equal");
  c.n_rot = opt_int(f, a + "rope.dimension_count", c.head_dim);
  if (c.n_rot > c.head_dim || c.n_rot % 2 != 0)
    fail(f, a + "rope.dimension_count = " + i2s(c.n_rot) + " must be even and at most the head dim " + i2s(c.head_dim));
  c.rope_theta = opt_num(f, a + "rope.freq_base", 10000.0);
  c.rms_eps = opt_num(f, a + "attention.layer_norm_rms_epsilon", 1e-5);
  if (const GgufValue* st = f.find(a + "rope.scaling.type")) {
    const std::string type = st->type() == GgufValueType::String ? st->as_string() : "?";
    if (type == "linear") c.rope_linear = opt_num(f, a + "rope.scaling.factor", 0.0);
    else if (type != "none")
      fail(f, a + "rope.scaling.type is '" + type + "'; the builder implements 'none' and 'linear' only");
    if (type == "linear" && !(c.rope_linear > 0)) fail(f, a + "rope.scaling.factor is missing (needed by linear scaling)");
  } else {
    c.rope_linear = opt_num(f, a + "rope.scale_linear", 1.0);
  }
  if (opt_int0(f, a + "expert_count") > 0)
    fail(f, a + "expert_count = " + i2s(opt_int0(f, a + "expert_count")) +
                ": a mixture-of-experts model, which the builder does not build yet");
  c.rope_freqs = f.contains("rope_freqs.weight");
  if (c.gemma) read_gemma(f, c);
  if (!f.contains("token_embd.weight")) fail(f, "tensor 'token_embd.weight' is missing");
  const auto emb = f.tensor_info("token_embd.weight").shape();
  if (emb.size() != 2 || emb[1] != c.hidden)
    fail(f, "tensor 'token_embd.weight' has shape " + dims_str(emb) + ", expected [vocab, " + i2s(c.hidden) + "]");
  c.vocab = emb[0];
  if (f.find(a + "vocab_size") && req_int(f, a + "vocab_size") != c.vocab)
    fail(f, a + "vocab_size = " + i2s(req_int(f, a + "vocab_size")) + " differs from token_embd.weight's " + i2s(c.vocab) +
                " rows");
  c.tied_output = !f.contains("output.weight");
  for (int64_t i = 0; i < c.layers; ++i)
    for (const char* t : {"attn_q_norm.weight", "attn_k_norm.weight"}) {
      const std::string name = "blk." + i2s(i) + "." + t;
      if (c.qk_norm && !f.contains(name))
        fail(f, "tensor '" + name + "' is missing (a " + arch + " model normalizes each head's q and k)");
      if (!c.qk_norm && f.contains(name))
        fail(f, "tensor '" + name + "' is a per-head q / k norm, which a " + arch + " model does not have (a qwen3 "
                "file says general.architecture 'qwen3')");
    }
  return c;
}

bool is_gguf_llama_family(const std::string& arch) {
  return arch == "llama" || arch == "qwen2" || arch == "qwen3" || arch == "gemma" || arch == "gemma2";
}

namespace {

// The teacher-forced graph (max_ctx 0) or the KV-cache decoder (max_ctx > 0).
GgufLlama build_llama(const GgufFile& f, int64_t seq, int64_t max_ctx, const GgufLlamaOptions& o) {
  if (o.activations != DType::F32 && o.activations != DType::F16 && o.activations != DType::BF16)
    fail(f, std::string("options.activations must be f32, f16 or bf16, got ") + dtype_name(o.activations));
  GgufLlama m;
  m.config = read_gguf_llama_config(f);
  const GgufLlamaConfig& c = m.config;
  Graph& g = m.graph;
  if (o.batch < 1) fail(f, "options.batch must be >= 1 (sequences run together), got " + i2s(o.batch));
  Builder b{f, c, g, m.params, o.half_weights, o.block_weights, o.activations, {}, Dim(o.batch)};
  const Dim s = seq ? Dim(seq) : Dim::symbol("seq");
  // One sequence: tokens and positions (S); a batch: (B, S), each sequence at its own positions.
  const Shape rows = o.batch == 1 ? Shape({s}, DType::I64) : Shape({Dim(o.batch), s}, DType::I64);
  Value tokens = g.input("tokens", rows);
  Value positions = g.input("positions", rows);
  std::optional<Value> logit_rows;
  if (max_ctx) logit_rows = g.input("logit_rows", Shape({Dim::symbol("rows")}, DType::I64));
  Value emb = b.act_param("token_embd.weight", {c.vocab, c.hidden});
  Value h = g.reshape(g.gather(emb, tokens, 0), {b.batch, s, Dim(c.hidden)});
  if (c.embed_scale != 1.0) h = g.mul(h, g.scalar(c.embed_scale, b.act));  // gemma: in the activations' dtype
  auto [cos, sin] = b.rope_tables(positions);
  std::optional<Builder::Cache> kc;
  if (max_ctx) kc = Builder::Cache{max_ctx, positions, {}};
  for (int64_t i = 0; i < c.layers; ++i) h = b.block(h, cos, sin, i, s, kc ? &*kc : nullptr);
  if (logit_rows) h = g.gather(h, *logit_rows, 1);  // (B, R, E): only the rows whose logits are wanted
  h = g.rms_norm(h, b.act_param("output_norm.weight", {c.hidden}), std::nullopt, c.rms_eps);
  // Tied output: the embedding's stored form (quantized or not) under the param name output.weight.
  Value logits = b.project(h, c.tied_output ? "token_embd.weight" : "output.weight", c.vocab, c.hidden, "output.weight");
  if (c.final_softcap > 0) {  // gemma2: cap * tanh(logits / cap)
    const Value cap = g.scalar(c.final_softcap, b.act);
    logits = g.mul(g.act(ActKind::Tanh, g.div(logits, cap)), cap);
  }
  const Value logits32 = b.act == DType::F32 ? logits : g.cast(logits, DType::F32);
  g.add_output(logits32, "logits");
  if (kc) {
    for (int64_t i = 0; i < c.layers; ++i) {
      g.add_output(kc->outputs[static_cast<size_t>(2 * i)], "cache_k." + i2s(i));
      g.add_output(kc->outputs[static_cast<size_t>(2 * i + 1)], "cache_v." + i2s(i));
    }
    // Greedy decoding on the device: the argmax of each row (the first of the maxima) and the
    // row's sum, NaN when a logit is (so that the caller can refuse it without the logits).
    g.add_output(g.argmax(logits32, 2), "greedy_token");
    g.add_output(g.reduce(ReduceKind::Sum, logits32, {2}), "logits_sum");
    if (o.sample_candidates > 0) add_sampling_head(g, logits32, c.vocab, o.batch, o.sample_candidates, o.sample_history);
  }
  std::vector<std::string> unused;
  for (const GgufTensorInfo& t : f.tensors())
    if (!b.used.count(t.name)) unused.push_back(t.name);
  if (!unused.empty()) {
    std::string list;
    for (size_t i = 0; i < unused.size() && i < 5; ++i) list += (i ? ", '" : "'") + unused[i] + "'";
    if (unused.size() > 5) list += " and " + std::to_string(unused.size() - 5) + " more";
    fail(f, "tensor(s) " + list + " are not part of a " + c.arch + " model as the builder knows it (MLP biases, extra "
            "norms, ...); it would ignore them and compute another model, so it stops here");
  }
  g.verify();
  return m;
}

}  // namespace

GgufLlama build_llama_from_gguf(const GgufFile& f, const GgufLlamaOptions& options) {
  if (options.seq < 0) fail(f, "options.seq must be >= 0 (0 = symbolic), got " + i2s(options.seq));
  return build_llama(f, options.seq, 0, options);
}

GgufLlama build_llama_decoder_from_gguf(const GgufFile& f, int64_t max_ctx, const GgufLlamaOptions& options) {
  if (max_ctx <= 0) fail(f, "the KV cache length max_ctx must be positive, got " + i2s(max_ctx));
  if (options.seq != 0) fail(f, "the KV-cache decoder's chunk length is symbolic; options.seq must be 0, got " + i2s(options.seq));
  if (options.sample_candidates < 0)
    fail(f, "options.sample_candidates must be >= 0 (0 = no sampling head), got " + i2s(options.sample_candidates));
  if (options.sample_candidates > 0 && options.sample_history < 1)
    fail(f, "options.sample_history must be >= 1 (the ids the repetition penalty looks at), got " + i2s(options.sample_history));
  return build_llama(f, 0, max_ctx, options);
}

bool half_weights_run_on(Device device) { return device == Device::Cpu || device == Device::Cuda; }

bool block_weights_run_on(Device device) {
  return device == Device::Cpu || device == Device::Cuda || device == Device::Vulkan;
}

namespace {
// A matrix the builder multiplies by (project): the blocks' matrices, the output projection, the
// embedding when the output is tied to it (it is dequantized for its gather either way).
bool is_projection(const GgufFile& f, const GgufTensorInfo& t) {
  if (t.ne.size() != 2) return false;
  return t.name.rfind("blk.", 0) == 0 || t.name == "output.weight" ||
         (t.name == "token_embd.weight" && !f.contains("output.weight"));
}
}  // namespace

DequantizedAtLoad dequantized_at_load(const GgufFile& f, const GgufLlamaOptions& options) {
  DequantizedAtLoad d;
  if (options.block_weights) return d;
  for (const GgufTensorInfo& t : f.tensors()) {
    if (!is_projection(f, t) || !quant::quant_format_of(t.type) || is_16bit(t.type)) continue;
    d.names.push_back(t.name);
    d.stored_bytes += static_cast<int64_t>(t.nbytes);
    d.param_bytes += held_bytes(f, t, options);
  }
  return d;
}

int64_t held_bytes(const GgufFile& f, const GgufTensorInfo& t, const GgufLlamaOptions& options) {
  const auto stored = static_cast<int64_t>(t.nbytes);
  if (!is_projection(f, t) ||
      kept_as_stored(t.type, t.ne[0], options.half_weights, options.block_weights, options.activations))
    return stored;
  return t.numel * static_cast<int64_t>(dtype_size(options.activations));
}

std::string describe_gguf_llama(const GgufFile& f) {
  const GgufLlamaConfig c = read_gguf_llama_config(f);
  std::map<std::string, int> types;
  for (const GgufTensorInfo& t : f.tensors())
    if (t.ne.size() == 2 && t.name.rfind("blk.", 0) == 0) ++types[ggml_type_name(t.type)];
  std::string s = c.arch + ": " + i2s(c.layers) + " blocks, hidden " + i2s(c.hidden) + ", heads " + i2s(c.heads) + " (kv " +
                  i2s(c.kv_heads) + ") x " + i2s(c.head_dim) + ", ffn " + i2s(c.ffn) + ", vocab " + i2s(c.vocab) +
                  ", context " + i2s(c.context) + ", rope theta " + std::to_string(c.rope_theta) +
                  (c.rope_linear != 1.0 ? ", rope linear scaling " + std::to_string(c.rope_linear) : "") +
                  (c.rope_freqs ? ", rope_freqs" : "") + (c.tied_output ? ", tied output" : "") +
                  (f.contains("blk.0.attn_q.bias") ? ", attention biases" : "") +
                  (c.qk_norm ? ", per-head q/k norms" : "") + (c.gemma ? ", GeGLU, embedding x sqrt(hidden)" : "") +
                  (c.post_norms ? ", post-attention / post-MLP norms" : "") +
                  (c.attn_softcap > 0 ? ", attention softcap " + std::to_string(c.attn_softcap) : "") +
                  (c.final_softcap > 0 ? ", final softcap " + std::to_string(c.final_softcap) : "") +
                  ", block projections:";
  for (const auto& [name, n] : types) s += " " + name + " x " + std::to_string(n);
  return s;
}

}  // namespace rlx::models
