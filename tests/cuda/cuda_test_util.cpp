#include "cuda/cuda_test_util.h"

#include <gtest/gtest.h>

#include <optional>

namespace rlx::testing {

std::string cuda_unavailable_reason() {
  static const std::string reason = [] {
    try {
      Graph g;
      g.add_output(g.relu(g.input("x", Shape::of({4}))));
      Session(Device::Cuda).compile(g);
      return std::string();
    } catch (const Error& e) {
      return std::string(e.what());
    }
  }();
  return reason;
}

void expect_cuda_parity(const Graph& g, Precision precision, ParityOptions opts) {
  const auto rep = cuda_parity(g, precision, opts);
  EXPECT_TRUE(rep.pass) << rep.text << "\n" << g.to_text();
}

ParityReport cuda_parity(const Graph& g, Precision precision, ParityOptions opts) {
  RunConfig cpu;
  cpu.label = "cpu";
  RunConfig gpu;
  gpu.label = std::string("cuda/") + precision_name(precision);
  gpu.device = Device::Cuda;
  gpu.options.precision = precision;
  return compare_configs(g, cpu, gpu, opts);
}

Graph attention_case_graph(const AttnCase& c, DType t) {
  Graph g;
  const bool bshd = c.layout == AttnLayout::BSHD;
  auto shape = [&](int64_t s, int64_t h) { return bshd ? Shape::of({c.b, s, h, c.d}, t) : Shape::of({c.b, h, s, c.d}, t); };
  std::optional<Value> mask;
  if (c.mask == MaskKind::Custom) mask = g.input("mask", Shape::of({c.b, c.skv}, c.mask_type));
  if (c.mask == MaskKind::Bias)  // per head and row, or broadcast over them (a key-padding bias)
    mask = g.input("bias", c.bias_per_row ? Shape::of({1, c.h, c.sq, c.skv}, t) : Shape::of({c.b, 1, 1, c.skv}, t));
  ops::Attention a;
  a.num_heads = c.h, a.num_kv_heads = c.hkv, a.head_dim = c.d, a.mask_kind = c.mask, a.window = c.window;
  a.score_scale = c.scale, a.softcap = c.softcap, a.layout = c.layout;
  g.add_output(g.attention(g.input("q", shape(c.sq, c.h)), g.input("k", shape(c.skv, c.hkv)),
                           g.input("v", shape(c.skv, c.hkv)), mask, a));
  return g;
}

}  // namespace rlx::testing
