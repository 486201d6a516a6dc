// Transformer fusions: fuse_swiglu, fuse_attention_block, fuse_transformer_layer.
#include <cmath>

#include "passes/canonical.h"
#include "passes/fusion.h"
#include "passes/rewriter.h"
#include "passes/uses.h"

namespace rlx::passes {
namespace {

// A projection: MatMul, or FusedMatMulBiasAct without activation (with or without bias).
struct Projection {
  bool ok = false;
  bool has_bias = false;
  Value x, w, b;
};
Projection projection(const Node& n) {
  Projection p;
  if (op_as<ops::MatMul>(n)) {
    p = {true, false, n.inputs[0], n.inputs[1], {}};
  } else if (const auto* f = op_as<ops::FusedMatMulBiasAct>(n); f && !f->activation && !f->residual) {
    p = {true, n.inputs.size() == 3, n.inputs[0], n.inputs[1], n.inputs.size() == 3 ? n.inputs[2] : Value{}};
  }
  return p;
}

}  // namespace

Graph fuse_swiglu(const Graph& g, const PassContext& ctx) {
  const Uses uses(g);
  return dce(rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    if (!is_binary(n, BinaryKind::Mul)) return false;
    for (int side = 0; side < 2; ++side) {
      const Value plain = n.inputs[static_cast<size_t>(side)], gated = n.inputs[static_cast<size_t>(1 - side)];
      const Node& sn = g.node(gated.node);
      if (!is_activation(sn, ActKind::Silu)) continue;
      const Node& pn = g.node(plain.node);
      const Node& gn = g.node(sn.inputs[0].node);
      const auto* pnar = op_as<ops::Narrow>(pn);
      const auto* gnar = op_as<ops::Narrow>(gn);
      if (!pnar || !gnar || pn.inputs[0] != gn.inputs[0]) continue;
      const Value cat = pn.inputs[0];
      const Shape& cs = g.shape(cat);
      const int64_t r = cs.rank();
      if (r < 1 || !cs[r - 1].is_static() || !is_last_axis(pnar->axis, r) || !is_last_axis(gnar->axis, r)) continue;
      const int64_t two_n = cs[r - 1].value;
      if (two_n % 2 != 0) continue;
      const int64_t half = two_n / 2;
      if (pnar->len != half || gnar->len != half) continue;
      const bool plain_first = pnar->start == 0 && gnar->start == half;
      const bool gate_first = gnar->start == 0 && pnar->start == half;
      if (!plain_first && !gate_first) continue;
      if (!uses.single_use(plain) || !uses.single_use(gated) || !uses.single_use(sn.inputs[0])) continue;
      ops::FusedSwiGLU f{.gate_first = gate_first};
      if (!infer_ok(f, g, {cat}, &n.outputs[0])) continue;
      rw.replace(n.id, {rw.emit(f, {rw.map(cat)})});
      return true;
    }
    return false;
  }), ctx);
}

Graph fuse_attention_block(const Graph& g, const PassContext& ctx) {
  const Uses uses(g);
  return dce(rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    // Walk back from the output projection.
    const Projection out = projection(n);
    if (!out.ok) return false;
    const Node& r2 = g.node(out.x.node);
    if (!op_as<ops::Reshape>(r2) || !uses.single_use(out.x)) return false;
    const Value attn_v = r2.inputs[0];
    const Node& an = g.node(attn_v.node);
    const auto* at = op_as<ops::Attention>(an);
    if (!at || !uses.single_use(attn_v) || an.inputs.size() != 4) return false;
    if (at->mask_kind != MaskKind::Custom || at->layout != AttnLayout::BSHD || at->softcap != 0 ||
        at->num_kv_heads != at->num_heads)
      return false;
    const double d = static_cast<double>(at->head_dim);
    if (at->score_scale != 0 && std::abs(at->score_scale * std::sqrt(d) - 1.0) > 1e-12) return false;
    // q, k, v: reshape(narrow(qkv, last, i*E, E)) with one shared qkv projection.
    Value qkv{};
    int64_t e = at->num_heads * at->head_dim;
    for (int i = 0; i < 3; ++i) {
      const Value rv = an.inputs[static_cast<size_t>(i)];
      const Node& rn = g.node(rv.node);
      if (!op_as<ops::Reshape>(rn) || !uses.single_use(rv)) return false;
      const Value nv = rn.inputs[0];
      const Node& nn = g.node(nv.node);
      const auto* nar = op_as<ops::Narrow>(nn);
      if (!nar || !uses.single_use(nv)) return false;
      if (i == 0) qkv = nn.inputs[0];
      else if (nn.inputs[0] != qkv) return false;
      if (!is_last_axis(nar->axis, g.shape(qkv).rank()) || nar->start != i * e || nar->len != e) return false;
    }
    if (uses.is_output(qkv) || uses.of(qkv).size() != 3) return false;
    const Projection in = projection(g.node(qkv.node));
    if (!in.ok || in.has_bias != out.has_bias) return false;
    const Shape& hs = g.shape(in.x);
    if (hs.rank() != 3 || !hs.is_static() || hs[2].value != e) return false;
    // The reshapes must split/merge heads in place: (B, S, E) <-> (B, S, H, D), not reorder B and S.
    const std::vector<Dim> heads{hs[0], hs[1], Dim(at->num_heads), Dim(at->head_dim)};
    for (int i = 0; i < 3; ++i)
      if (g.shape(an.inputs[static_cast<size_t>(i)]).dims != heads) return false;
    if (r2.outputs[0].dims != hs.dims) return false;
    if (hs[0].value * hs[1].value > ctx.attention_threshold) return false;
    ops::FusedAttentionBlock f{.num_heads = at->num_heads, .head_dim = at->head_dim, .has_bias = out.has_bias,
                               .has_rope = false};
    std::vector<Value> operands{in.x, in.w, out.w, an.inputs[3]};
    if (out.has_bias) {
      operands.push_back(in.b);
      operands.push_back(out.b);
    }
    if (!infer_ok(f, g, operands, &n.outputs[0])) return false;
    rw.replace(n.id, {rw.emit(f, rw.map(operands))});
    return true;
  }), ctx);
}

Graph fuse_transformer_layer(const Graph& g, const PassContext& ctx) {
  const Uses uses(g);
  return dce(rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    const auto* ln2 = op_as<ops::FusedResidualLN>(n);
    if (!ln2 || !ln2->has_bias) return false;
    for (int side = 0; side < 2; ++side) {
      const Value h = n.inputs[static_cast<size_t>(side)], f2v = n.inputs[static_cast<size_t>(1 - side)];
      const Node& f2 = g.node(f2v.node);
      const auto* f2op = op_as<ops::FusedMatMulBiasAct>(f2);
      if (!f2op || f2op->activation || f2op->residual || f2.inputs.size() != 3 || !uses.single_use(f2v)) continue;
      const Value f1v = f2.inputs[0];
      const Node& f1 = g.node(f1v.node);
      const auto* f1op = op_as<ops::FusedMatMulBiasAct>(f1);
      if (!f1op || !f1op->activation || f1op->residual || f1.inputs.size() != 3 || !uses.single_use(f1v)) continue;
      const ActKind act = *f1op->activation;
      if (act != ActKind::Gelu && act != ActKind::GeluApprox && act != ActKind::Relu && act != ActKind::Silu) continue;
      if (f1.inputs[0] != h || uses.is_output(h) || uses.of(h).size() != 2) continue;
      const Node& l1 = g.node(h.node);
      const auto* ln1 = op_as<ops::FusedResidualLN>(l1);
      if (!ln1 || !ln1->has_bias || ln1->eps != ln2->eps) continue;
      for (int s1 = 0; s1 < 2; ++s1) {
        const Value hidden = l1.inputs[static_cast<size_t>(s1)], av = l1.inputs[static_cast<size_t>(1 - s1)];
        const Node& a = g.node(av.node);
        const auto* ab = op_as<ops::FusedAttentionBlock>(a);
        if (!ab || !ab->has_bias || ab->has_rope || a.inputs[0] != hidden || !uses.single_use(av)) continue;
        // [hidden, qkv_w, qkv_b, out_w, out_b, ln1_g, ln1_b, fc1_w, fc1_b, fc2_w, fc2_b, ln2_g, ln2_b, mask]
        const std::vector<Value> operands{hidden,       a.inputs[1],  a.inputs[4], a.inputs[2], a.inputs[5],
                                          l1.inputs[2], l1.inputs[3], f1.inputs[1], f1.inputs[2], f2.inputs[1],
                                          f2.inputs[2], n.inputs[2],  n.inputs[3], a.inputs[3]};
        ops::FusedTransformerLayer f{.num_heads = ab->num_heads, .head_dim = ab->head_dim, .eps = ln1->eps,
                                     .activation = act};
        if (!infer_ok(f, g, operands, &n.outputs[0])) continue;
        rw.replace(n.id, {rw.emit(f, rw.map(operands))});
        return true;
      }
    }
    return false;
  }), ctx);
}

}  // namespace rlx::passes
