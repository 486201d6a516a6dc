// Llama from GGUF: a tiny random Llama written with GgufWriter (q/k rows permuted the way
// llama.cpp's converter does), built with build_llama_from_gguf, against the same model built
// with the existing NeoX Llama block builder from the dequantized, unpermuted f32 weights.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "support/llama_fixture.h"
#include "models/llama_gguf.h"
#include "rlx/generate.h"
#include "models/transformer.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace rlx::testing;

struct Tiny {
  int64_t layers = 2, hidden = 64, heads = 4, kv_heads = 2, ffn = 128, vocab = 40;
  GgmlType proj = GgmlType::Q8_0;   // attention / ffn projections
  GgmlType embd = GgmlType::F32;    // token_embd
  GgmlType out = GgmlType::Q8_0;    // output.weight (ignored when tied)
  GgmlType attn_out = GgmlType::Q8_0;
  bool tied = false;
  double rope_linear = 0;   // > 0: llama.rope.scaling.type linear with this factor
  bool rope_freqs2 = false; // rope_freqs.weight of 2s (the same angles as linear scaling by 2)
  std::string extra;        // the name of an extra [hidden] tensor of zeros (not part of the model)
  std::string arch = "llama";  // general.architecture and the metadata prefix
  std::string scaling;      // llama.rope.scaling.type other than linear
  DType rounded = DType::F32;  // every tensor's values rounded to this dtype first (whatever type stores them)
  int64_t head_dim() const { return hidden / heads; }
};

// llama.cpp's converter: within each head, row i of the first half goes to 2i, row i of the
// second half to 2i + 1 (HF NeoX layout -> adjacent rotation pairs). `inverse` undoes it.
Tensor permute_rows(const Tensor& w, int64_t heads, bool inverse) {
  const int64_t rows = w.dim(0), cols = w.dim(1), d = rows / heads;
  Tensor out = Tensor::empty(DType::F32, {rows, cols});
  const float* src = w.data<float>();
  float* dst = out.data<float>();
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t half = 0; half < 2; ++half) {
        const int64_t hf = h * d + half * (d / 2) + i, gg = h * d + 2 * i + half;
        const int64_t from = inverse ? gg : hf, to = inverse ? hf : gg;
        std::copy(src + from * cols, src + (from + 1) * cols, dst + to * cols);
      }
  return out;
}

Tensor transpose2(const Tensor& w) {
  const int64_t r = w.dim(0), c = w.dim(1);
  Tensor t = Tensor::empty(DType::F32, {c, r});
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) t.data<float>()[j * r + i] = w.data<float>()[i * c + j];
  return t;
}

void add(GgufWriter& w, const Tiny& m, const std::string& name, const Tensor& t0, GgmlType type) {
  const Tensor t = m.rounded == DType::F32 ? t0 : t0.cast(m.rounded).cast(DType::F32);
  if (type == GgmlType::F32) w.add_tensor(name, t);
  else if (type == GgmlType::F16) w.add_tensor(name, t.cast(DType::F16));
  else w.add_tensor(name, t, type);
}

std::string write_tiny(const Tiny& m) {
  GgufWriter w;
  const std::string a = add_llama_metadata(w, {m.arch, m.layers, 256, m.hidden, m.ffn, m.heads, m.kv_heads, 500.0f});
  w.add(a + "attention.layer_norm_rms_epsilon", GgufValue::f32(1e-5f));
  if (m.rope_linear > 0) {
    w.add(a + "rope.scaling.type", GgufValue::string("linear"));
    w.add(a + "rope.scaling.factor", GgufValue::f32(static_cast<float>(m.rope_linear)));
  }
  if (!m.scaling.empty()) w.add(a + "rope.scaling.type", GgufValue::string(m.scaling));
  const int64_t e = m.hidden, d = m.head_dim();
  uint64_t seed = 1;
  if (m.rope_freqs2) w.add_tensor("rope_freqs.weight", Tensor::f32({d / 2}, std::vector<float>(static_cast<size_t>(d / 2), 2.0f)));
  if (!m.extra.empty()) w.add_tensor(m.extra, Tensor::f32({e}, std::vector<float>(static_cast<size_t>(e), 0.0f)));
  add(w, m, "token_embd.weight", randn({m.vocab, e}, seed++, 1.0f), m.embd);
  for (int64_t i = 0; i < m.layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    const float s = 1.0f / std::sqrt(static_cast<float>(e));
    add(w, m, p + "attn_norm.weight", randn({e}, seed++, 0.1f, 1.0f), GgmlType::F32);
    add(w, m, p + "attn_q.weight", permute_rows(randn({m.heads * d, e}, seed++, s), m.heads, false), m.proj);
    add(w, m, p + "attn_k.weight", permute_rows(randn({m.kv_heads * d, e}, seed++, s), m.kv_heads, false), m.proj);
    add(w, m, p + "attn_v.weight", randn({m.kv_heads * d, e}, seed++, s), m.proj);
    add(w, m, p + "attn_output.weight", randn({e, m.heads * d}, seed++, s), m.attn_out);
    add(w, m, p + "ffn_norm.weight", randn({e}, seed++, 0.1f, 1.0f), GgmlType::F32);
    add(w, m, p + "ffn_gate.weight", randn({m.ffn, e}, seed++, s), m.proj);
    add(w, m, p + "ffn_up.weight", randn({m.ffn, e}, seed++, s), m.proj);
    add(w, m, p + "ffn_down.weight", randn({e, m.ffn}, seed++, 1.0f / std::sqrt(static_cast<float>(m.ffn))), m.proj);
  }
  add(w, m, "output_norm.weight", randn({e}, seed++, 0.1f, 1.0f), GgmlType::F32);
  if (!m.tied) add(w, m, "output.weight", randn({m.vocab, e}, seed++, 1.0f / std::sqrt(static_cast<float>(e))), m.out);
  return w.bytes();
}

// The same model through models::build_llama_block (NeoX rope, weights (in, out)) from the
// file's dequantized weights with the q/k permutation undone; logits (1, S, vocab) in double.
std::vector<double> reference_logits(const GgufFile& f, const Tiny& m, const std::vector<int64_t>& tokens) {
  const int64_t s = static_cast<int64_t>(tokens.size()), e = m.hidden;
  Graph g;
  Value hidden = g.input("hidden", Shape({1, s, e}, DType::F32));
  Value pos = g.input("positions", Shape({s}, DType::F32));
  auto [cos, sin] = models::build_rope_tables(g, pos, m.head_dim(), 500.0, DType::F32);
  models::LlamaBlockConfig lc;
  lc.hidden = e;
  lc.num_heads = m.heads;
  lc.num_kv_heads = m.kv_heads;
  lc.intermediate = m.ffn;
  lc.eps = static_cast<double>(1e-5f);
  NamedTensors params;
  Value x = hidden;
  for (int64_t i = 0; i < m.layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".", q = "L." + std::to_string(i);
    x = models::build_llama_block(g, x, cos, sin, lc, q);
    params.emplace_back(q + ".attn_norm.weight", f.tensor_f32(p + "attn_norm.weight"));
    params.emplace_back(q + ".attn.q.weight", transpose2(permute_rows(f.tensor_f32(p + "attn_q.weight"), m.heads, true)));
    params.emplace_back(q + ".attn.k.weight", transpose2(permute_rows(f.tensor_f32(p + "attn_k.weight"), m.kv_heads, true)));
    params.emplace_back(q + ".attn.v.weight", transpose2(f.tensor_f32(p + "attn_v.weight")));
    params.emplace_back(q + ".attn.o.weight", transpose2(f.tensor_f32(p + "attn_output.weight")));
    params.emplace_back(q + ".mlp_norm.weight", f.tensor_f32(p + "ffn_norm.weight"));
    params.emplace_back(q + ".mlp.gate.weight", transpose2(f.tensor_f32(p + "ffn_gate.weight")));
    params.emplace_back(q + ".mlp.up.weight", transpose2(f.tensor_f32(p + "ffn_up.weight")));
    params.emplace_back(q + ".mlp.down.weight", transpose2(f.tensor_f32(p + "ffn_down.weight")));
  }
  x = g.rms_norm(x, g.param("norm", Shape({e}, DType::F32)), std::nullopt, lc.eps);
  params.emplace_back("norm", f.tensor_f32("output_norm.weight"));
  g.add_output(g.matmul(x, g.param("out", Shape({e, m.vocab}, DType::F32))));
  params.emplace_back("out", transpose2(f.tensor_f32(m.tied ? "token_embd.weight" : "output.weight")));
  const Tensor emb = f.tensor_f32("token_embd.weight");
  Tensor h = Tensor::empty(DType::F32, {1, s, e});
  for (int64_t t = 0; t < s; ++t)
    std::copy(emb.data<float>() + tokens[static_cast<size_t>(t)] * e, emb.data<float>() + (tokens[static_cast<size_t>(t)] + 1) * e,
              h.data<float>() + t * e);
  // Rope scaling divides every angle by the same factor here: positions divided by it.
  const double scale = (m.rope_linear > 0 ? m.rope_linear : 1.0) * (m.rope_freqs2 ? 2.0 : 1.0);
  std::vector<float> positions(static_cast<size_t>(s));
  for (int64_t t = 0; t < s; ++t) positions[static_cast<size_t>(t)] = static_cast<float>(static_cast<double>(t) / scale);
  return to_doubles(run_cpu1(g, {{"hidden", h}, {"positions", Tensor::f32({s}, positions)}}, params));
}

void check_model(const Tiny& m, int64_t seq, double rel_tol) {
  const std::string bytes = write_tiny(m);
  const GgufFile f = GgufFile::from_bytes(bytes.data(), bytes.size(), "tiny.gguf");
  const models::GgufLlama model = models::build_llama_from_gguf(f);
  EXPECT_EQ(model.config.layers, m.layers);
  EXPECT_EQ(model.config.kv_heads, m.kv_heads);
  EXPECT_EQ(model.config.tied_output, m.tied);
  std::vector<int64_t> tokens(static_cast<size_t>(seq)), positions(static_cast<size_t>(seq));
  for (int64_t t = 0; t < seq; ++t) {
    tokens[static_cast<size_t>(t)] = (7 * t + 3) % m.vocab;
    positions[static_cast<size_t>(t)] = t;
  }
  const Tensor logits = run_cpu1(model.graph, {{"tokens", Tensor::i64({seq}, tokens)}, {"positions", Tensor::i64({seq}, positions)}},
                                 model.params);
  const std::vector<double> want = reference_logits(f, m, tokens);
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  EXPECT_TRUE(all_close(logits, {1, seq, m.vocab}, want, Tolerance{0.0, rel_tol * scale})) << "max |logit| " << scale;
}

// Decode-sized sequences (< 16 rows) take the Int8 path: x is quantized to 8 bits at each
// projection, so the logits differ from the f32 reference by a few tenths of a percent.
TEST(LlamaGguf, Q8_0MatchesTheNeoXBuilder) { check_model(Tiny{}, 5, 2e-2); }

// 20 rows with the packed kernels off (RLX_CPU_PACK_QUANT=0): Q8_0 prefill takes the DequantGemm
// path (no quantization of x): only f32 rounding differs. With them on (the default) x is
// quantized as at decode.
TEST(LlamaGguf, Q8_0PrefillMatchesTightly) {
  {
    ScopedEnv no_pack("RLX_CPU_PACK_QUANT", "0");
    check_model(Tiny{}, 20, 1e-4);
  }
  check_model(Tiny{}, 20, 2e-2);
}

TEST(LlamaGguf, KQuantsTiedQuantizedEmbeddingAndF16) {
  Tiny m;
  m.hidden = 256;
  m.ffn = 512;
  m.heads = 4;
  m.kv_heads = 1;
  m.layers = 1;
  m.proj = GgmlType::Q4_K;
  m.attn_out = GgmlType::F16;  // DequantMatMul's f16 format (rows of 256 values)
  m.embd = GgmlType::Q6_K;     // dequantized param; also the tied output's DequantMatMul
  m.tied = true;
  // Both row counts quantize x at the Q4_K projections (the packed kernels).
  check_model(m, 20, 3e-2);
  check_model(m, 3, 3e-2);
}

TEST(LlamaGguf, Q4_0AndQ5_1) {
  Tiny m;
  m.proj = GgmlType::Q4_0;
  m.out = GgmlType::Q5_1;
  check_model(m, 20, 2e-2);  // x quantized for the Q4_0 projections (the packed kernels)
  check_model(m, 3, 2e-2);
}

// 16-bit matrices stay 2 bytes a weight: DequantMatMul f16 / bf16 (rows of whole 32-value pieces),
// an f32 MatMul where a row is not (an ffn of 48 for ffn_down). Greedy decode of the F16 file
// (64 steps through the KV-cache decoder: prompt chunks of 16 and 4 rows, then one row a step)
// gives the tokens of an F32 file holding the same rounded values, with logits within f32
// rounding at every step.
TEST(LlamaGguf, F16FileDecodesLikeItsF32Widening) {
  for (GgmlType half : {GgmlType::F16, GgmlType::BF16}) {
    for (int64_t ffn : {128, 48}) {
      SCOPED_TRACE(std::string(ggml_type_name(half)) + " ffn " + std::to_string(ffn));
      Tiny m;
      m.ffn = ffn;
      m.rounded = half == GgmlType::F16 ? DType::F16 : DType::BF16;
      m.proj = m.out = m.attn_out = m.embd = GgmlType::F32;
      const std::string wide_bytes = write_tiny(m);
      m.proj = m.out = m.attn_out = m.embd = half;
      const std::string half_bytes = write_tiny(m);
      const GgufFile fh = GgufFile::from_bytes(half_bytes.data(), half_bytes.size(), "half.gguf");
      const GgufFile fw = GgufFile::from_bytes(wide_bytes.data(), wide_bytes.size(), "wide.gguf");
      const models::GgufLlama built = models::build_llama_decoder_from_gguf(fh, 64);
      int half_nodes = 0, matmuls = 0;
      for (const Node& n : built.graph.nodes()) {
        if (const auto* op = std::get_if<ops::DequantMatMul>(&n.op))
          half_nodes += op->format == (half == GgmlType::F16 ? QuantFormat::F16 : QuantFormat::BF16);
        matmuls += std::holds_alternative<ops::MatMul>(n.op);
      }
      EXPECT_EQ(half_nodes, ffn % 32 == 0 ? 2 * 7 + 1 : 2 * 6 + 1);
      EXPECT_EQ(matmuls, ffn % 32 == 0 ? 0 : 2);
      Generator gh(fh, {.num_threads = 1, .max_ctx = 96}), gw(fw, {.num_threads = 1, .max_ctx = 96});
      std::vector<int32_t> prompt;
      for (int32_t t = 0; t < 20; ++t) prompt.push_back((7 * t + 3) % static_cast<int32_t>(m.vocab));
      std::vector<float> lh = gh.prefill(prompt), lw = gw.prefill(prompt);
      for (int step = 0; step < 64; ++step) {
        ASSERT_EQ(lh.size(), lw.size());
        float scale = 0, err = 0;
        for (size_t i = 0; i < lw.size(); ++i) {
          scale = std::max(scale, std::fabs(lw[i]));
          err = std::max(err, std::fabs(lh[i] - lw[i]));
        }
        ASSERT_LE(err, 1e-4f * scale) << "step " << step;
        const auto th = static_cast<int32_t>(std::max_element(lh.begin(), lh.end()) - lh.begin());
        const auto tw = static_cast<int32_t>(std::max_element(lw.begin(), lw.end()) - lw.begin());
        ASSERT_EQ(th, tw) << "step " << step;
        lh = gh.step(th);
        lw = gw.step(tw);
      }
    }
  }
}

TEST(LlamaGguf, RopeScaling) {
  ScopedEnv no_pack("RLX_CPU_PACK_QUANT", "0");  // Q8_0 prefill without x quantization: a tight check
  Tiny m;
  m.rope_linear = 4.0;
  check_model(m, 20, 1e-4);
  m.rope_freqs2 = true;  // linear 4 and freqs 2: angles / 8
  check_model(m, 20, 1e-4);
}

TEST(LlamaGguf, WhatTheBuilderDoesNotImplementIsRefused) {
  Tiny m;
  m.extra = "blk.0.ffn_up.bias";  // an MLP bias: another model
  const std::string b1 = write_tiny(m);
  EXPECT_THAT(error_message([&] { models::build_llama_from_gguf(GgufFile::from_bytes(b1.data(), b1.size())); }),
              HasSubstr("'blk.0.ffn_up.bias' are not part of a llama model"));
  m.extra = "blk.1.attn_k_norm.weight";  // a qwen3 head norm in a llama file
  const std::string b3 = write_tiny(m);
  EXPECT_THAT(error_message([&] { models::build_llama_from_gguf(GgufFile::from_bytes(b3.data(), b3.size())); }),
              HasSubstr("'blk.1.attn_k_norm.weight' is a per-head q / k norm, which a llama model does not have"));
  m.extra.clear();
  m.arch = "qwen3";  // without its head norms
  const std::string b4 = write_tiny(m);
  EXPECT_THAT(error_message([&] { models::build_llama_from_gguf(GgufFile::from_bytes(b4.data(), b4.size())); }),
              HasSubstr("'blk.0.attn_q_norm.weight' is missing (a qwen3 model normalizes"));
  m.arch = "llama";
  m.scaling = "yarn";
  const std::string b2 = write_tiny(m);
  EXPECT_THAT(error_message([&] { models::build_llama_from_gguf(GgufFile::from_bytes(b2.data(), b2.size())); }),
              HasSubstr("rope.scaling.type is 'yarn'"));
}

TEST(LlamaGguf, MetadataErrorsNameTheKey) {
  GgufWriter w;
  w.add("general.architecture", GgufValue::string("llama"));
  w.add("llama.block_count", GgufValue::u32(1));
  const std::string bytes = w.bytes();
  const GgufFile f = GgufFile::from_bytes(bytes.data(), bytes.size(), "bad.gguf");
  const std::string msg = error_message([&] { models::build_llama_from_gguf(f); });
  EXPECT_THAT(msg, HasSubstr("bad.gguf"));
  EXPECT_THAT(msg, HasSubstr("llama.embedding_length"));

  // A u64 too large for int64: the message names the key, not only the value.
  GgufWriter w3;
  w3.add("general.architecture", GgufValue::string("llama"));
  w3.add("llama.block_count", GgufValue::u64(UINT64_MAX));
  const std::string b3 = w3.bytes();
  EXPECT_THAT(error_message([&] { models::build_llama_from_gguf(GgufFile::from_bytes(b3.data(), b3.size())); }),
              AllOf(HasSubstr("metadata key 'llama.block_count'"), HasSubstr("18446744073709551615")));

  GgufWriter w2;
  w2.add("general.architecture", GgufValue::string("gpt2"));
  const std::string b2 = w2.bytes();
  EXPECT_THAT(error_message([&] { models::build_llama_from_gguf(GgufFile::from_bytes(b2.data(), b2.size())); }),
              HasSubstr("'gpt2'"));
}

TEST(LlamaGguf, WrongTensorShapeIsAnError) {
  Tiny m;
  m.ffn = 96;
  std::string bytes = write_tiny(m);
  // Claim a wider FFN than the tensors have.
  GgufFile good = GgufFile::from_bytes(bytes.data(), bytes.size(), "t.gguf");
  GgufWriter w;
  for (const auto& [k, v] : good.metadata())
    w.add(k, k == "llama.feed_forward_length" ? GgufValue::u32(128) : v);
  for (const GgufTensorInfo& t : good.tensors()) {
    const auto raw = good.raw(t.name);
    w.add_raw(t.name, t.type, t.ne, raw);
  }
  const std::string b2 = w.bytes();
  const GgufFile f = GgufFile::from_bytes(b2.data(), b2.size(), "t.gguf");
  EXPECT_THAT(error_message([&] { models::build_llama_from_gguf(f); }), HasSubstr("blk.0.ffn_gate.weight"));
  EXPECT_THAT(models::describe_gguf_llama(good), HasSubstr("llama: 2 blocks"));
}

TEST(LlamaGguf, CliInspectPrintsTheModel) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("rlx_llama_gguf_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "tiny.gguf").string();
  { std::ofstream(path, std::ios::binary) << write_tiny(Tiny{}); }
  std::string out;
  if (FILE* p = ::popen((rlx::testing::cli_path() + " inspect " + path + " 2>&1").c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    EXPECT_EQ(::pclose(p), 0) << out;
  }
  EXPECT_THAT(out, HasSubstr("model: llama: 2 blocks, hidden 64, heads 4 (kv 2) x 16, ffn 128, vocab 40"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rlx
