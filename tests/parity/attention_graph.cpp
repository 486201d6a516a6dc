#include "parity/attention_graph.h"

#include <cmath>
#include <optional>

namespace rlx::testing {

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

std::string attention_case_name(const AttnCase& c) {
  std::string n = std::string(enum_name(c.layout)) + "_" + enum_name(c.mask) + "_b" + std::to_string(c.b) + "_q" +
                  std::to_string(c.sq) + "_kv" + std::to_string(c.skv) + "_h" + std::to_string(c.h) + "x" +
                  std::to_string(c.hkv) + "_d" + std::to_string(c.d);
  if (c.scale != 0) n += "_scale" + std::to_string(static_cast<int>(std::lround(c.scale * 100)));
  if (c.softcap != 0) n += "_softcap" + std::to_string(static_cast<int>(std::lround(c.softcap)));
  if (c.window != 0) n += "_win" + std::to_string(c.window);
  if (c.mask == MaskKind::Custom && c.mask_type != DType::Bool) n += std::string("_mask") + dtype_name(c.mask_type);
  if (c.mask == MaskKind::Bias && !c.bias_per_row) n += "_keybias";
  return n;
}

}  // namespace rlx::testing
