#pragma once
// Transformer building blocks composed from IR primitives (matmul, reshape, attention,
// norms, activations; no fused ops), plus the demo graph used by the `transformer_block`
// example and `rlx export-demo`.
//
// Parameter names (for a block built with prefix P):
//   BERT:  P.attn.qkv.weight (E, 3E)   P.attn.qkv.bias (3E)   P.attn.out.weight (E, E)
//          P.attn.out.bias (E)         P.ln1.weight/.bias (E)
//          P.ffn.fc1.weight (E, F)     P.ffn.fc1.bias (F)     P.ffn.fc2.weight (F, E)
//          P.ffn.fc2.bias (E)          P.ln2.weight/.bias (E)
//   Llama: P.attn_norm.weight (E)      P.attn.q.weight (E, H*D)  P.attn.k.weight (E, Hkv*D)
//          P.attn.v.weight (E, Hkv*D)  P.attn.o.weight (H*D, E)  P.mlp_norm.weight (E)
//          P.mlp.gate.weight (E, I)    P.mlp.up.weight (E, I)    P.mlp.down.weight (I, E)
// Weights are stored (in, out) so that a projection is x @ W.
#include <cstdint>
#include <string>
#include <utility>

#include "rlx/graph.h"
#include "rlx/session.h"

namespace rlx::models {

struct BertLayerConfig {
  int64_t hidden = 256;     // E
  int64_t num_heads = 4;    // H; head_dim = E / H
  int64_t ffn = 1024;       // F
  double eps = 1e-12;       // LayerNorm epsilon
  ActKind activation = ActKind::Gelu;
};

// Post-norm BERT encoder layer. hidden (B, S, E) float, mask (B, S) key padding (nonzero =
// attend). Returns (B, S, E). Params take hidden's dtype.
Value build_bert_layer(Graph& g, Value hidden, Value mask, const BertLayerConfig& cfg, const std::string& prefix);

struct LlamaBlockConfig {
  int64_t hidden = 256;        // E
  int64_t num_heads = 4;       // H
  int64_t num_kv_heads = 2;    // Hkv (grouped-query attention; divides H)
  int64_t head_dim = 0;        // D; 0 = E / H
  int64_t intermediate = 704;  // I (SwiGLU width)
  int64_t n_rot = 0;           // rotated dims per head; 0 = D
  double eps = 1e-6;           // RmsNorm epsilon
};

// Pre-norm Llama decoder block with causal self-attention. hidden (B, S, E); cos and sin
// (S, n_rot/2) or (B, S, n_rot/2) rotary tables (see build_rope_tables). Returns (B, S, E).
Value build_llama_block(Graph& g, Value hidden, Value cos, Value sin, const LlamaBlockConfig& cfg,
                        const std::string& prefix);

// Rotary tables from integer positions (S) or (B, S):
//   angle[.., i] = position * theta^(-2i / n_rot), i < n_rot/2;  returns {cos, sin} in `dtype`.
std::pair<Value, Value> build_rope_tables(Graph& g, Value positions, int64_t n_rot, double theta, DType dtype);

// The demo model: `llama_layers` Llama blocks + final RmsNorm, and `bert_layers` BERT layers,
// both reading the same input hidden states.
//   inputs:  "hidden" (B, S, E) dtype, "positions" (S) i64 (when llama_layers > 0),
//            "mask" (B, S) dtype, 1 = token, 0 = padding (when bert_layers > 0)
//   outputs: "llama_out" (B, S, E), "bert_out" (B, S, E)
// Param prefixes: "llama.<i>", "llama.norm.weight", "bert.<i>".
struct TransformerDemoConfig {
  int64_t batch = 1;
  int64_t seq = 64;
  bool symbolic_seq = false;  // inputs use the symbolic dim "seq" instead of `seq`
  int64_t hidden = 256;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 2;
  int64_t llama_layers = 2;
  int64_t llama_intermediate = 0;  // 0 = 8/3 * hidden rounded up to a multiple of 64
  double rope_theta = 10000.0;
  int64_t bert_layers = 1;
  int64_t bert_ffn = 0;  // 0 = 4 * hidden
  DType dtype = DType::F32;
};

Graph build_transformer_block_graph(const TransformerDemoConfig& cfg);

// Deterministic weights for every Param of `g` (in node order): normal(0, 0.02) for
// projections and biases; norm scales (gamma) = 1 and norm shifts (beta) = 0, recognised
// from the graph's norm nodes. Each param's values depend only on (seed, its name, shape).
NamedTensors random_weights(const Graph& g, uint64_t seed);

}  // namespace rlx::models
