// The BERT encoder layer and the Llama decoder block of src/models on CUDA vs the CPU oracle,
// in f32 (exact and tf32 policies) and bf16/f16 storage.
#include <vector>

#include "cuda/cuda_test_util.h"
#include "models/transformer.h"

namespace {

using namespace rlx;

Graph bert_graph(DType t, int64_t b, int64_t s) {
  Graph g;
  models::BertLayerConfig cfg;
  cfg.hidden = 256, cfg.num_heads = 4, cfg.ffn = 1024;
  const Value h = g.input("hidden", Shape::of({b, s, cfg.hidden}, t));
  const Value mask = g.input("mask", Shape::of({b, s}, t));
  g.add_output(models::build_bert_layer(g, h, mask, cfg, "bert.0"));
  return g;
}

Graph llama_graph(DType t, int64_t b, int64_t s) {
  Graph g;
  models::LlamaBlockConfig cfg;
  cfg.hidden = 256, cfg.num_heads = 8, cfg.num_kv_heads = 2, cfg.intermediate = 704;
  const Value h = g.input("hidden", Shape::of({b, s, cfg.hidden}, t));
  const Value pos = g.input("positions", Shape::of({s}, DType::I64));
  const auto [cos, sin] = models::build_rope_tables(g, pos, cfg.hidden / cfg.num_heads, 10000.0, t);
  g.add_output(models::build_llama_block(g, h, cos, sin, cfg, "llama.0"));
  return g;
}

rlx::testing::ParityOptions model_options(const Graph& g, int64_t b, int64_t s, DType t, bool has_mask) {
  rlx::testing::ParityOptions o;
  o.fixed_params = models::random_weights(g, 11);
  if (has_mask) {
    std::vector<double> m(static_cast<size_t>(b * s), 1.0);
    for (int64_t j = s - 3; j < s; ++j) m[static_cast<size_t>((b - 1) * s + j)] = 0.0;  // padding in the last row
    o.fixed_inputs.emplace_back("mask", rlx::testing::from_doubles(t, {b, s}, m));
  } else {
    std::vector<int64_t> p(static_cast<size_t>(s));
    for (int64_t i = 0; i < s; ++i) p[static_cast<size_t>(i)] = i;
    o.fixed_inputs.emplace_back("positions", Tensor::i64({s}, p));
  }
  return o;
}

TEST(CudaModels, BertLayerMatchesCpu) {
  RLX_REQUIRE_CUDA();
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(t));
    const Graph g = bert_graph(t, 2, 40);
    const auto rep = rlx::testing::cuda_parity(g, Precision::Fp32, model_options(g, 2, 40, t, true));
    EXPECT_TRUE(rep.pass) << rep.text;
  }
}

TEST(CudaModels, BertLayerTf32WithinPolicyTolerance) {
  RLX_REQUIRE_CUDA();
  const Graph g = bert_graph(DType::F32, 2, 40);
  auto o = model_options(g, 2, 40, DType::F32, true);
  o.tolerance = [](DType) { return rlx::testing::Tolerance{1e-3, 1e-3}; };
  const auto rep = rlx::testing::cuda_parity(g, Precision::Tf32, o);
  EXPECT_TRUE(rep.pass) << rep.text;
}

TEST(CudaModels, LlamaBlockMatchesCpu) {
  RLX_REQUIRE_CUDA();
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(t));
    const Graph g = llama_graph(t, 2, 48);
    const auto rep = rlx::testing::cuda_parity(g, Precision::Fp32, model_options(g, 2, 48, t, false));
    EXPECT_TRUE(rep.pass) << rep.text;
  }
}

TEST(CudaModels, TransformerDemoGraphMatchesCpu) {
  RLX_REQUIRE_CUDA();
  models::TransformerDemoConfig cfg;
  cfg.batch = 2, cfg.seq = 32, cfg.hidden = 128, cfg.num_heads = 4, cfg.num_kv_heads = 2;
  const Graph g = models::build_transformer_block_graph(cfg);
  auto o = model_options(g, 2, 32, DType::F32, true);
  std::vector<int64_t> p(32);
  for (int64_t i = 0; i < 32; ++i) p[static_cast<size_t>(i)] = i;
  o.fixed_inputs.emplace_back("positions", Tensor::i64({32}, p));
  const auto rep = rlx::testing::cuda_parity(g, Precision::Fp32, o);
  EXPECT_TRUE(rep.pass) << rep.text;
}

}  // namespace
