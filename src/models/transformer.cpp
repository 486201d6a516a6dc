#include "models/transformer.h"

#include <cmath>
#include <map>
#include <variant>
#include <vector>

#include "models/init.h"

namespace rlx::models {
namespace {

std::string i2s(int64_t v) { return std::to_string(v); }

void require_positive(const char* who, const char* what, int64_t v) {
  if (v <= 0) throw Error(std::string(who) + ": " + what + " must be positive, got " + i2s(v));
}

// Checks hidden is a float (B, S, E) tensor with static E == `e`; returns its shape.
const Shape& check_hidden(const char* who, const Graph& g, Value hidden, int64_t e) {
  const Shape& s = g.shape(hidden);
  if (!is_float(s.dtype) || s.rank() != 3 || !s[2].is_static() || s[2].value != e)
    throw Error(std::string(who) + ": hidden must be a float (B, S, E) tensor with E = " + i2s(e) + ", got " +
                s.str());
  return s;
}

// x @ W (+ b), with W declared (in, out) and b (out).
Value linear(Graph& g, Value x, const std::string& name, int64_t in, int64_t out, bool bias, DType dt) {
  Value y = g.matmul(x, g.param(name + ".weight", Shape({in, out}, dt)));
  if (bias) y = g.add(y, g.param(name + ".bias", Shape({out}, dt)));
  return y;
}

}  // namespace

// ---------------------------------------------------------------------------------------
Value build_bert_layer(Graph& g, Value hidden, Value mask, const BertLayerConfig& cfg, const std::string& prefix) {
  const char* who = "build_bert_layer";
  require_positive(who, "hidden", cfg.hidden);
  require_positive(who, "num_heads", cfg.num_heads);
  require_positive(who, "ffn", cfg.ffn);
  if (cfg.hidden % cfg.num_heads != 0)
    throw Error(std::string(who) + ": hidden = " + i2s(cfg.hidden) + " must be divisible by num_heads = " +
                i2s(cfg.num_heads));
  const Shape hs = check_hidden(who, g, hidden, cfg.hidden);
  const DType dt = hs.dtype;
  const int64_t e = cfg.hidden, h = cfg.num_heads, d = e / h;
  const Dim b = hs[0], s = hs[1];

  // Self-attention: one fused QKV projection, split into q, k, v heads.
  Value qkv = linear(g, hidden, prefix + ".attn.qkv", e, 3 * e, true, dt);
  auto head = [&](int64_t i) { return g.reshape(g.narrow(qkv, 2, i * e, e), {b, s, h, d}); };
  ops::Attention attn;
  attn.num_heads = h;
  attn.num_kv_heads = h;
  attn.head_dim = d;
  attn.mask_kind = MaskKind::Custom;
  attn.layout = AttnLayout::BSHD;
  Value ctx = g.attention(head(0), head(1), head(2), mask, attn);
  Value a = linear(g, g.reshape(ctx, {b, s, e}), prefix + ".attn.out", e, e, true, dt);

  // Residual + LayerNorm (post-norm).
  Value h1 = g.layer_norm(g.add(hidden, a), g.param(prefix + ".ln1.weight", Shape({e}, dt)),
                          g.param(prefix + ".ln1.bias", Shape({e}, dt)), cfg.eps);

  // Feed-forward: act(h1 @ W1 + b1) @ W2 + b2.
  Value f = g.act(cfg.activation, linear(g, h1, prefix + ".ffn.fc1", e, cfg.ffn, true, dt));
  f = linear(g, f, prefix + ".ffn.fc2", cfg.ffn, e, true, dt);
  return g.layer_norm(g.add(h1, f), g.param(prefix + ".ln2.weight", Shape({e}, dt)),
                      g.param(prefix + ".ln2.bias", Shape({e}, dt)), cfg.eps);
}

// ---------------------------------------------------------------------------------------
Value build_llama_block(Graph& g, Value hidden, Value cos, Value sin, const LlamaBlockConfig& cfg,
                        const std::string& prefix) {
  const char* who = "build_llama_block";
  require_positive(who, "hidden", cfg.hidden);
  require_positive(who, "num_heads", cfg.num_heads);
  require_positive(who, "num_kv_heads", cfg.num_kv_heads);
  require_positive(who, "intermediate", cfg.intermediate);
  if (cfg.head_dim < 0) throw Error(std::string(who) + ": head_dim must be >= 0 (0 = hidden / num_heads)");
  if (cfg.head_dim == 0 && cfg.hidden % cfg.num_heads != 0)
    throw Error(std::string(who) + ": hidden = " + i2s(cfg.hidden) + " must be divisible by num_heads = " +
                i2s(cfg.num_heads) + " (or set head_dim explicitly)");
  if (cfg.num_heads % cfg.num_kv_heads != 0)
    throw Error(std::string(who) + ": num_heads = " + i2s(cfg.num_heads) + " must be divisible by num_kv_heads = " +
                i2s(cfg.num_kv_heads));
  const int64_t e = cfg.hidden, h = cfg.num_heads, hkv = cfg.num_kv_heads;
  const int64_t d = cfg.head_dim ? cfg.head_dim : e / h;
  const int64_t n_rot = cfg.n_rot ? cfg.n_rot : d;
  const Shape hs = check_hidden(who, g, hidden, e);
  const DType dt = hs.dtype;
  const Dim b = hs[0], s = hs[1];

  // Attention sub-block (pre-norm).
  Value x = g.rms_norm(hidden, g.param(prefix + ".attn_norm.weight", Shape({e}, dt)), std::nullopt, cfg.eps);
  Value q = g.reshape(linear(g, x, prefix + ".attn.q", e, h * d, false, dt), {b, s, h, d});
  Value k = g.reshape(linear(g, x, prefix + ".attn.k", e, hkv * d, false, dt), {b, s, hkv, d});
  Value v = g.reshape(linear(g, x, prefix + ".attn.v", e, hkv * d, false, dt), {b, s, hkv, d});
  q = g.rope(q, cos, sin, d, n_rot, RopeStyle::NeoX);
  k = g.rope(k, cos, sin, d, n_rot, RopeStyle::NeoX);
  ops::Attention attn;
  attn.num_heads = h;
  attn.num_kv_heads = hkv;
  attn.head_dim = d;
  attn.mask_kind = MaskKind::Causal;
  attn.layout = AttnLayout::BSHD;
  Value ctx = g.reshape(g.attention(q, k, v, std::nullopt, attn), {b, s, h * d});
  Value h1 = g.add(hidden, linear(g, ctx, prefix + ".attn.o", h * d, e, false, dt));

  // SwiGLU MLP sub-block (pre-norm): (silu(x @ gate) * (x @ up)) @ down.
  Value y = g.rms_norm(h1, g.param(prefix + ".mlp_norm.weight", Shape({e}, dt)), std::nullopt, cfg.eps);
  Value gate = g.silu(linear(g, y, prefix + ".mlp.gate", e, cfg.intermediate, false, dt));
  Value up = linear(g, y, prefix + ".mlp.up", e, cfg.intermediate, false, dt);
  Value down = linear(g, g.mul(gate, up), prefix + ".mlp.down", cfg.intermediate, e, false, dt);
  return g.add(h1, down);
}

// ---------------------------------------------------------------------------------------
std::pair<Value, Value> build_rope_tables(Graph& g, Value positions, int64_t n_rot, double theta, DType dtype) {
  if (n_rot <= 0 || n_rot % 2 != 0)
    throw Error("build_rope_tables: n_rot must be positive and even, got " + i2s(n_rot));
  if (!(theta > 0) || !std::isfinite(theta))
    throw Error("build_rope_tables: theta must be positive and finite, got " + std::to_string(theta));
  if (!is_float(dtype)) throw Error(std::string("build_rope_tables: dtype must be a float type, got ") + dtype_name(dtype));
  const Shape ps = g.shape(positions);  // a copy: adding nodes may move the graph's storage
  if (ps.rank() < 1 || ps.rank() > 2 || (!is_int(ps.dtype) && !is_float(ps.dtype)))
    throw Error("build_rope_tables: positions must be a numeric (S) or (B, S) tensor, got " + ps.str());
  const int64_t half = n_rot / 2;
  // Angles are computed in f32 (f64 when asked) for accuracy, then cast to `dtype`.
  const DType cdt = dtype == DType::F64 ? DType::F64 : DType::F32;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv[static_cast<size_t>(i)] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
  Value inv_freq = g.constant(Tensor::f64({half}, inv).cast(cdt));
  std::vector<Dim> col = ps.dims;
  col.push_back(Dim(1));
  Value pos = g.reshape(g.cast(positions, cdt), col);  // (..., S, 1)
  Value angle = g.mul(pos, inv_freq);                  // (..., S, half)
  Value c = g.act(ActKind::Cos, angle), s = g.act(ActKind::Sin, angle);
  if (cdt != dtype) {
    c = g.cast(c, dtype);
    s = g.cast(s, dtype);
  }
  return {c, s};
}

// ---------------------------------------------------------------------------------------
Graph build_transformer_block_graph(const TransformerDemoConfig& cfg) {
  const char* who = "build_transformer_block_graph";
  require_positive(who, "batch", cfg.batch);
  if (!cfg.symbolic_seq) require_positive(who, "seq", cfg.seq);
  require_positive(who, "hidden", cfg.hidden);
  require_positive(who, "num_heads", cfg.num_heads);
  if (cfg.llama_intermediate < 0 || cfg.bert_ffn < 0)
    throw Error(std::string(who) + ": llama_intermediate and bert_ffn must be >= 0 (0 = default width), got " +
                i2s(cfg.llama_intermediate) + " and " + i2s(cfg.bert_ffn));
  if (cfg.llama_layers < 0 || cfg.bert_layers < 0 || cfg.llama_layers + cfg.bert_layers == 0)
    throw Error(std::string(who) + ": llama_layers and bert_layers must be >= 0 and not both 0, got " +
                i2s(cfg.llama_layers) + " and " + i2s(cfg.bert_layers));
  if (cfg.hidden % cfg.num_heads != 0 || (cfg.hidden / cfg.num_heads) % 2 != 0)
    throw Error(std::string(who) + ": hidden / num_heads must be an even integer (the head dim), got " +
                i2s(cfg.hidden) + " / " + i2s(cfg.num_heads));
  if (!is_float(cfg.dtype)) throw Error(std::string(who) + ": dtype must be a float type, got " + dtype_name(cfg.dtype));

  Graph g;
  const Dim seq = cfg.symbolic_seq ? Dim::symbol("seq") : Dim(cfg.seq);
  Value hidden = g.input("hidden", Shape({cfg.batch, seq, cfg.hidden}, cfg.dtype));

  if (cfg.llama_layers > 0) {
    LlamaBlockConfig lc;
    lc.hidden = cfg.hidden;
    lc.num_heads = cfg.num_heads;
    lc.num_kv_heads = cfg.num_kv_heads;
    lc.intermediate = cfg.llama_intermediate ? cfg.llama_intermediate : (cfg.hidden * 8 / 3 + 63) / 64 * 64;
    Value positions = g.input("positions", Shape({seq}, DType::I64));
    auto [cos, sin] = build_rope_tables(g, positions, cfg.hidden / cfg.num_heads, cfg.rope_theta, cfg.dtype);
    Value x = hidden;
    for (int64_t i = 0; i < cfg.llama_layers; ++i) x = build_llama_block(g, x, cos, sin, lc, "llama." + i2s(i));
    x = g.rms_norm(x, g.param("llama.norm.weight", Shape({cfg.hidden}, cfg.dtype)), std::nullopt, lc.eps);
    g.add_output(x, "llama_out");
  }
  if (cfg.bert_layers > 0) {
    BertLayerConfig bc;
    bc.hidden = cfg.hidden;
    bc.num_heads = cfg.num_heads;
    bc.ffn = cfg.bert_ffn ? cfg.bert_ffn : 4 * cfg.hidden;
    Value mask = g.input("mask", Shape({cfg.batch, seq}, cfg.dtype));
    Value x = hidden;
    for (int64_t i = 0; i < cfg.bert_layers; ++i) x = build_bert_layer(g, x, mask, bc, "bert." + i2s(i));
    g.add_output(x, "bert_out");
  }
  g.verify();
  return g;
}

// ---------------------------------------------------------------------------------------
NamedTensors random_weights(const Graph& g, uint64_t seed) {
  // Params used as a norm's scale (gamma) or shift (beta), by node id.
  std::map<NodeId, InitKind> role;
  auto mark = [&](const Node& n, size_t gamma_idx) {
    if (n.inputs.size() > gamma_idx) role[n.inputs[gamma_idx].node] = InitKind::Ones;
    if (n.inputs.size() > gamma_idx + 1) role[n.inputs[gamma_idx + 1].node] = InitKind::Zeros;
  };
  for (const Node& n : g.nodes()) {
    if (std::holds_alternative<ops::LayerNorm>(n.op) || std::holds_alternative<ops::RmsNorm>(n.op) ||
        std::holds_alternative<ops::GroupNorm>(n.op) || std::holds_alternative<ops::LayerNorm2d>(n.op)) {
      mark(n, 1);
    } else if (std::holds_alternative<ops::FusedResidualLN>(n.op) ||
               std::holds_alternative<ops::FusedResidualRmsNorm>(n.op)) {
      mark(n, 2);
    } else if (std::holds_alternative<ops::BatchNormInference>(n.op) && n.inputs.size() == 5) {
      // [x, scale, bias, mean, var]: identity statistics.
      mark(n, 1);
      role[n.inputs[3].node] = InitKind::Zeros;
      role[n.inputs[4].node] = InitKind::Ones;
    }
  }
  NamedTensors out;
  for (NodeId id : g.param_nodes()) {
    const auto& p = std::get<ops::Param>(g.node(id).op);
    if (!p.shape.is_static())
      throw Error("random_weights: param '" + p.name + "' has a symbolic shape " + p.shape.str() +
                  "; params must be static");
    auto it = role.find(id);
    const InitKind kind = it == role.end() ? InitKind::Normal : it->second;
    out.emplace_back(p.name, init_tensor(p.shape.dtype, p.shape.concrete(), kind, 0.02, name_seed(seed, p.name)));
  }
  return out;
}

}  // namespace rlx::models
