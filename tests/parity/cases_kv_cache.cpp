// KV-cache parity cases: CacheWrite (rows at run-time positions, a repeated position, every
// storage width) and Attention with a Positions mask (out-of-order positions, a row that sees
// no key, per-batch positions, a decode row over a long cache), alone and as one decode block.
// Vulkan runs both natively, WebGPU through their legalized forms (passes/expand_cache.h).
#include <string>
#include <vector>

#include "parity/parity_cases.h"

namespace rlx::testing {

namespace {

std::string dt(DType t) { return dtype_name(t); }

void add_cache_write(CaseList& l) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::U8})
    add_case(l, "shape", "cache_write_" + dt(t), [t] {
      std::vector<CaseGraph> v;
      for (DType it : {DType::I32, DType::I64}) {
        Graph g;
        const Value cache = g.input("cache", Shape::of({2, 16, 3, 4}, t));
        const Value rows = g.input("rows", Shape::of({2, 5, 3, 4}, t));
        const Value pos = g.input("pos", Shape::of({5}, it));
        g.add_output(g.cache_write(cache, rows, pos));
        ParityOptions o;
        o.int_hi = 60;
        o.fixed_inputs = {{"pos", from_doubles(it, {5}, {7, 0, 15, 3, 7})}};  // 7 twice: the later row wins
        v.push_back({"positions " + dt(it), std::move(g), o});
      }
      Graph g;  // (B, S) positions: each batch entry writes its rows at its own positions
      const Value cache = g.input("cache", Shape::of({2, 16, 3, 4}, t));
      const Value rows = g.input("rows", Shape::of({2, 5, 3, 4}, t));
      const Value pos = g.input("pos", Shape::of({2, 5}, DType::I64));
      g.add_output(g.cache_write(cache, rows, pos));
      ParityOptions o;
      o.int_hi = 60;
      o.fixed_inputs = {{"pos", from_doubles(DType::I64, {2, 5}, {7, 0, 15, 3, 7, 2, 3, 2, 9, 1})}};
      v.push_back({"per-batch positions", std::move(g), o});
      return v;
    });
}

// q (B, Sq, H, D) or (B, H, Sq, D) over k, v of skv rows, positions `pos` ((Sq) or (B, Sq)).
Graph positions_attention(AttnLayout layout, int64_t b, int64_t sq, int64_t skv, int64_t h, int64_t hkv, int64_t d,
                          bool per_batch, DType t) {
  Graph g;
  auto dims = [&](int64_t s, int64_t heads) {
    return layout == AttnLayout::BSHD ? std::vector<int64_t>{b, s, heads, d} : std::vector<int64_t>{b, heads, s, d};
  };
  const Value q = g.input("q", Shape::from(dims(sq, h), t));
  const Value k = g.input("k", Shape::from(dims(skv, hkv), t));
  const Value v = g.input("v", Shape::from(dims(skv, hkv), t));
  const Value pos = g.input("pos", per_batch ? Shape::of({b, sq}, DType::I64) : Shape::of({sq}, DType::I64));
  ops::Attention a;
  a.num_heads = h, a.num_kv_heads = hkv, a.head_dim = d, a.layout = layout, a.mask_kind = MaskKind::Positions;
  g.add_output(g.attention(q, k, v, pos, a));
  return g;
}

void add_positions_attention(CaseList& l) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    add_case(l, "attention", "attn_positions_prefill_" + dt(t), [t] {
      std::vector<CaseGraph> v;
      ParityOptions o;  // out of order, a row that sees no key (-1), one past the keys (all visible)
      o.fixed_inputs = {{"pos", from_doubles(DType::I64, {6}, {5, 0, -1, 40, 12, 11})}};
      v.push_back({"bshd", positions_attention(AttnLayout::BSHD, 2, 6, 40, 4, 2, 64, false, t), o});
      v.push_back({"bhsd", positions_attention(AttnLayout::BHSD, 2, 6, 40, 4, 2, 64, false, t), o});
      ParityOptions pb;
      pb.fixed_inputs = {{"pos", from_doubles(DType::I64, {2, 6}, {3, 4, 5, 6, 7, 8, 30, -1, 0, 1, 2, 39})}};
      v.push_back({"per-batch positions", positions_attention(AttnLayout::BSHD, 2, 6, 40, 4, 4, 32, true, t), pb});
      return v;
    });
    add_case(l, "attention", "attn_positions_decode_" + dt(t), [t] {
      ParityOptions o;
      o.fixed_inputs = {{"pos", from_doubles(DType::I64, {1}, {137})}};
      return one(positions_attention(AttnLayout::BSHD, 1, 1, 700, 8, 2, 64, false, t), o);
    });
    // One decode block as the Llama builder makes it: the new K / V rows written into the
    // caches, then attention over the written caches' valid prefix.
    add_case(l, "attention", "kv_cache_block_" + dt(t), [t] {
      Graph g;
      const Value q = g.input("q", Shape::of({1, 3, 4, 16}, t));
      const Value k = g.input("k", Shape::of({1, 3, 2, 16}, t));
      const Value v = g.input("v", Shape::of({1, 3, 2, 16}, t));
      const Value pos = g.input("pos", Shape::of({3}, DType::I64));
      const Value kc = g.cache_write(g.input("cache_k", Shape::of({1, 64, 2, 16}, t)), k, pos);
      const Value vc = g.cache_write(g.input("cache_v", Shape::of({1, 64, 2, 16}, t)), v, pos);
      ops::Attention a;
      a.num_heads = 4, a.num_kv_heads = 2, a.head_dim = 16, a.mask_kind = MaskKind::Positions;
      g.add_output(g.attention(q, kc, vc, pos, a));
      g.add_output(kc);
      g.add_output(vc);
      ParityOptions o;
      o.fixed_inputs = {{"pos", from_doubles(DType::I64, {3}, {20, 21, 22})}};
      return one(std::move(g), o);
    });
    // A batch of two sequences at their own positions ((B, S) positions), the keys rotated by
    // per-sequence RoPE tables before they are written, as the batched Llama decoder does.
    add_case(l, "attention", "kv_cache_batch_block_" + dt(t), [t] {
      Graph g;
      const Value q = g.input("q", Shape::of({2, 3, 4, 16}, t));
      const Value k = g.input("k", Shape::of({2, 3, 2, 16}, t));
      const Value v = g.input("v", Shape::of({2, 3, 2, 16}, t));
      const Value cs = g.input("cos", Shape::of({2, 3, 8}, t));
      const Value sn = g.input("sin", Shape::of({2, 3, 8}, t));
      const Value pos = g.input("pos", Shape::of({2, 3}, DType::I64));
      const Value kr = g.rope(k, cs, sn, 16, 16, RopeStyle::NeoX);
      const Value qr = g.rope(q, cs, sn, 16, 16, RopeStyle::NeoX);
      const Value kc = g.cache_write(g.input("cache_k", Shape::of({2, 64, 2, 16}, t)), kr, pos);
      const Value vc = g.cache_write(g.input("cache_v", Shape::of({2, 64, 2, 16}, t)), v, pos);
      ops::Attention a;
      a.num_heads = 4, a.num_kv_heads = 2, a.head_dim = 16, a.mask_kind = MaskKind::Positions;
      g.add_output(g.attention(qr, kc, vc, pos, a));
      g.add_output(kc);
      g.add_output(vc);
      ParityOptions o;  // the second sequence pads its first row at the position its next row writes
      o.fixed_inputs = {{"pos", from_doubles(DType::I64, {2, 3}, {20, 21, 22, 4, 4, 5})}};
      return one(std::move(g), o);
    });
  }
}

}  // namespace

void add_kv_cache_cases(CaseList& l) {
  add_cache_write(l);
  add_positions_attention(l);
}

}  // namespace rlx::testing
