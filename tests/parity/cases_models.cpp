// Model parity cases: the BERT encoder layer and the Llama decoder block of src/models in f32 and
// the half types, and the transformer demo graph, with their weights as fixed params.
#include <string>
#include <vector>

#include "models/transformer.h"
#include "parity/parity_cases.h"

namespace rlx::testing {

namespace {

std::string dt(DType t) { return dtype_name(t); }

// Random weights; a padding mask with the last row's final 3 positions off, or positions 0..s-1.
ParityOptions model_options(const Graph& g, int64_t b, int64_t s, DType t, bool has_mask) {
  ParityOptions o;
  o.fixed_params = models::random_weights(g, 11);
  if (has_mask) {
    std::vector<double> m(static_cast<size_t>(b * s), 1.0);
    for (int64_t j = s - 3; j < s; ++j) m[static_cast<size_t>((b - 1) * s + j)] = 0.0;
    o.fixed_inputs.emplace_back("mask", from_doubles(t, {b, s}, m));
  } else {
    std::vector<int64_t> p(static_cast<size_t>(s));
    for (int64_t i = 0; i < s; ++i) p[static_cast<size_t>(i)] = i;
    o.fixed_inputs.emplace_back("positions", Tensor::i64({s}, p));
  }
  return o;
}

CaseGraph llama_block_case(DType t) {
  const int64_t b = 2, s = 48;
  Graph g;
  models::LlamaBlockConfig cfg;
  cfg.hidden = 256, cfg.num_heads = 8, cfg.num_kv_heads = 2, cfg.intermediate = 704;
  const Value h = g.input("hidden", Shape::of({b, s, cfg.hidden}, t));
  const Value pos = g.input("positions", Shape::of({s}, DType::I64));
  const auto [cos, sin] = models::build_rope_tables(g, pos, cfg.hidden / cfg.num_heads, 10000.0, t);
  g.add_output(models::build_llama_block(g, h, cos, sin, cfg, "llama.0"));
  ParityOptions o = model_options(g, b, s, t, false);
  return {"", std::move(g), std::move(o)};
}

CaseGraph transformer_demo_case() {
  models::TransformerDemoConfig cfg;
  cfg.batch = 2, cfg.seq = 32, cfg.hidden = 128, cfg.num_heads = 4, cfg.num_kv_heads = 2;
  Graph g = models::build_transformer_block_graph(cfg);
  ParityOptions o = model_options(g, 2, 32, DType::F32, true);
  std::vector<int64_t> p(32);
  for (int64_t i = 0; i < 32; ++i) p[static_cast<size_t>(i)] = i;
  o.fixed_inputs.emplace_back("positions", Tensor::i64({32}, p));
  return {"", std::move(g), std::move(o)};
}

std::vector<CaseGraph> alone(CaseGraph c) {
  std::vector<CaseGraph> v;
  v.push_back(std::move(c));
  return v;
}

}  // namespace

CaseGraph bert_layer_case(DType t) {
  const int64_t b = 2, s = 40;
  Graph g;
  models::BertLayerConfig cfg;
  cfg.hidden = 256, cfg.num_heads = 4, cfg.ffn = 1024;
  const Value h = g.input("hidden", Shape::of({b, s, cfg.hidden}, t));
  const Value mask = g.input("mask", Shape::of({b, s}, t));
  g.add_output(models::build_bert_layer(g, h, mask, cfg, "bert.0"));
  ParityOptions o = model_options(g, b, s, t, true);
  return {"", std::move(g), std::move(o)};
}

void add_model_cases(CaseList& l) {
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    add_case(l, "model", "bert_layer_" + dt(t), [t] { return alone(bert_layer_case(t)); });
    add_case(l, "model", "llama_block_" + dt(t), [t] { return alone(llama_block_case(t)); });
  }
  add_case(l, "model", "transformer_demo_f32", [] { return alone(transformer_demo_case()); });
}

}  // namespace rlx::testing
