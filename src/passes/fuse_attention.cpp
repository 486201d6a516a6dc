// fuse_attention: the exported attention core MatMul -> scale -> mask -> Softmax -> MatMul.
#include <limits>

#include "passes/canonical.h"
#include "passes/exporter.h"
#include "passes/exporter_util.h"
#include "passes/rewriter.h"

namespace rlx::passes {
namespace {

using namespace exporter;

struct Scores {
  NodeId matmul = 0;
  Value q, kt;  // the product's operands, before any pre-scaling
  double scale = 1.0;
  std::vector<NodeId> nodes;  // the MatMul and the scale nodes
};

// x * c (either order) or x / c with c a one-element Constant, nonzero and finite: sets x and
// multiplies `scale` by c (or 1/c).
bool scaled_by_constant(const Graph& g, const Node& n, Value& x, double& scale) {
  const bool mul = is_binary(n, BinaryKind::Mul), div = is_binary(n, BinaryKind::Div);
  if (!mul && !div) return false;
  for (int side = 0; side < (mul ? 2 : 1); ++side) {
    const Value a = n.inputs[static_cast<size_t>(side)];
    const auto c = scalar_const(g, n.inputs[static_cast<size_t>(1 - side)]);
    if (!c || !std::isfinite(*c) || *c == 0 || g.shape(a) != n.outputs[0]) continue;
    const double f = mul ? *c : 1.0 / *c;
    if (!std::isfinite(f) || f == 0) return false;
    x = a;
    scale *= f;
    return true;
  }
  return false;
}

// MatMul(q [* c1], kT [* c2]): the pre-scaled spelling of torch's scaled_dot_product_attention
// export (q and k each scaled by sqrt(scale)).
Scores product(const Graph& g, const Uses& uses, const Node& mm) {
  Scores r;
  r.matmul = mm.id;
  r.nodes = {mm.id};
  r.q = mm.inputs[0];
  r.kt = mm.inputs[1];
  for (Value* side : {&r.q, &r.kt}) {
    const Node& n = g.node(side->node);
    if (uses.single_use(*side) && scaled_by_constant(g, n, *side, r.scale)) r.nodes.push_back(n.id);
  }
  return r;
}

// s = MatMul(q, kT) [* c | / c] with c a one-element Constant (nonzero, finite).
std::optional<Scores> scaled_scores(const Graph& g, const Uses& uses, Value s) {
  const Node& n = g.node(s.node);
  if (op_as<ops::MatMul>(n)) return product(g, uses, n);
  Value prod;
  double scale = 1.0;
  if (!scaled_by_constant(g, n, prod, scale) || !op_as<ops::MatMul>(g.node(prod.node))) return std::nullopt;
  Scores r = product(g, uses, g.node(prod.node));
  r.scale *= scale;
  r.nodes.push_back(n.id);
  return r;
}

// Whether key j is visible to query i in a causal (Sq, Skv) layout (query i at Skv - Sq + i).
bool causal_keep(int64_t i, int64_t j, int64_t sq, int64_t skv) { return j <= i + skv - sq; }

// A value low enough that exp(it - max) is 0 for any finite scores: -inf, or at most half the
// lowest finite value of the dtype (torch.finfo(dtype).min is what exporters write).
bool masked_value(double v, DType dt) {
  const double lowest = dt == DType::F16 ? -65504.0
                        : dt == DType::F64 ? -std::numeric_limits<double>::max()
                                           : -static_cast<double>(std::numeric_limits<float>::max());
  return v <= lowest / 2;
}

// The (Sq, Skv) plane of a constant broadcasting to scores of rank r whose leading dims are all 1
// and whose last two dims are exactly (sq, skv); nullopt otherwise.
std::optional<std::vector<double>> plane(const Tensor& t, int64_t r, int64_t sq, int64_t skv) {
  if (t.rank() < 2 || t.rank() > r || t.dim(t.rank() - 2) != sq || t.dim(t.rank() - 1) != skv) return std::nullopt;
  for (int64_t i = 0; i + 2 < t.rank(); ++i)
    if (t.dim(i) != 1) return std::nullopt;
  return t.to_f64();
}

// Additive constant mask: None when all zero, Causal when 0 on and below the diagonal and
// masked above it, nullopt (keep it as a Bias) otherwise.
std::optional<MaskKind> constant_add_mask(const Tensor& t, int64_t r, int64_t sq, int64_t skv) {
  if (t.numel() == 0) return std::nullopt;
  const auto p = plane(t, r, sq, skv);
  if (!p) {
    bool zero = true;
    for (double v : t.to_f64()) zero = zero && v == 0;
    return zero ? std::optional<MaskKind>(MaskKind::None) : std::nullopt;
  }
  bool zero = true, causal = skv >= sq;
  for (int64_t i = 0; i < sq; ++i)
    for (int64_t j = 0; j < skv; ++j) {
      const double v = (*p)[static_cast<size_t>(i * skv + j)];
      zero = zero && v == 0;
      causal = causal && (causal_keep(i, j, sq, skv) ? v == 0 : masked_value(v, t.dtype()));
    }
  if (zero) return MaskKind::None;
  if (causal) return MaskKind::Causal;
  return std::nullopt;
}

struct Core {
  Scores scores;
  MaskKind mask = MaskKind::None;
  std::optional<Value> bias;
  std::vector<NodeId> nodes;  // scores nodes + the mask node
};

// The softmax input: scaled scores, optionally with an additive mask or a causal Where.
std::optional<Core> match_core(const Graph& g, const Uses& uses, Value s) {
  Core c;
  if (auto sc = scaled_scores(g, uses, s)) {
    c.scores = *sc;
    c.nodes = sc->nodes;
    return c;
  }
  const Node& n = g.node(s.node);
  const Shape& ss = n.outputs[0];
  const int64_t r = ss.rank();
  if (!ss.is_static()) return std::nullopt;  // a constant mask's plane is compared with static dims
  const int64_t sq = ss.dims[static_cast<size_t>(r - 2)].value, skv = ss.dims[static_cast<size_t>(r - 1)].value;
  if (is_binary(n, BinaryKind::Add)) {
    for (int side = 0; side < 2; ++side) {
      const Value sv = n.inputs[static_cast<size_t>(side)], mv = n.inputs[static_cast<size_t>(1 - side)];
      auto sc = scaled_scores(g, uses, sv);
      if (!sc || g.shape(sv) != ss || sv == mv) continue;
      c.scores = *sc;
      c.nodes = sc->nodes;
      c.nodes.push_back(n.id);
      const auto* k = op_as<ops::Constant>(g, mv);
      const auto kind = k ? constant_add_mask(k->value, r, sq, skv) : std::nullopt;
      if (kind) {
        c.mask = *kind;
      } else {
        c.mask = MaskKind::Bias;
        c.bias = mv;
      }
      return c;
    }
    return std::nullopt;
  }
  if (std::holds_alternative<ops::Where>(n.op)) {
    const auto* cond = op_as<ops::Constant>(g, n.inputs[0]);
    if (!cond) return std::nullopt;
    for (int side = 1; side <= 2; ++side) {
      const Value sv = n.inputs[static_cast<size_t>(side)], fill = n.inputs[static_cast<size_t>(3 - side)];
      auto sc = scaled_scores(g, uses, sv);
      const auto f = scalar_const(g, fill);
      if (!sc || g.shape(sv) != ss || !f || !masked_value(*f, ss.dtype)) continue;
      const auto p = plane(cond->value, r, sq, skv);
      if (!p || skv < sq) return std::nullopt;
      const bool keep_when = side == 1;  // Where(cond, scores, fill) keeps where cond holds
      for (int64_t i = 0; i < sq; ++i)
        for (int64_t j = 0; j < skv; ++j)
          if (((*p)[static_cast<size_t>(i * skv + j)] != 0) != (keep_when == causal_keep(i, j, sq, skv)))
            return std::nullopt;
      c.scores = *sc;
      c.nodes = sc->nodes;
      c.nodes.push_back(n.id);
      c.mask = MaskKind::Causal;
      return c;
    }
  }
  return std::nullopt;
}

// perm2[i] = perm[swap[i]] with swap exchanging the last two axes: the permutation that takes
// the source of a Transpose(perm) straight to its result with the last two axes exchanged.
std::vector<int64_t> swap_last_two(std::vector<int64_t> perm) {
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return perm;
}

std::vector<int64_t> normalized_perm(const std::vector<int64_t>& perm) {
  std::vector<int64_t> p = perm;
  const auto r = static_cast<int64_t>(p.size());
  for (auto& a : p)
    if (a < 0) a += r;
  return p;
}

const std::vector<int64_t> kToBshd{0, 2, 1, 3};

// GQA's repeat_kv as exported: Reshape(Expand(Reshape(kv (B, Hkv, S, D) -> (B, Hkv, 1, S, D))
// -> (B, Hkv, rep, S, D)) -> (B, Hkv * rep, S, D)). Returns kv and Hkv.
std::optional<std::pair<Value, int64_t>> repeated_kv(const Graph& g, Value x) {
  const Node& r2 = g.node(x.node);
  if (!op_as<ops::Reshape>(r2)) return std::nullopt;
  const Node& e = g.node(r2.inputs[0].node);
  if (!op_as<ops::Expand>(e)) return std::nullopt;
  const Node& r1 = g.node(e.inputs[0].node);
  if (!op_as<ops::Reshape>(r1)) return std::nullopt;
  const Value kv = r1.inputs[0];
  const Shape &ks = g.shape(kv), &s1 = r1.outputs[0], &se = e.outputs[0], &s2 = r2.outputs[0];
  if (ks.rank() != 4 || s1.rank() != 5 || se.rank() != 5 || s2.rank() != 4) return std::nullopt;
  const Dim &b = ks.dims[0], &h = ks.dims[1], &s = ks.dims[2], &d = ks.dims[3];
  const Dim& rep = se.dims[2];
  if (!h.is_static() || !rep.is_static() || rep.value < 1) return std::nullopt;
  if (s1.dims != std::vector<Dim>{b, h, Dim(1), s, d} || se.dims != std::vector<Dim>{b, h, rep, s, d} ||
      s2.dims != std::vector<Dim>{b, Dim(h.value * rep.value), s, d})
    return std::nullopt;
  return std::make_pair(kv, h.value);
}

}  // namespace

Graph fuse_attention(const Graph& g, const PassContext& ctx) {
  if (!any_node(g, [](const Node& n) { return op_as<ops::Softmax>(n) != nullptr; })) return g;
  const Uses uses(g);
  bool fired = false;
  Graph out = rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    const auto* sm = op_as<ops::Softmax>(n);
    if (!sm) return false;
    const Shape& ss = n.outputs[0];
    const int64_t r = ss.rank();
    if ((r != 3 && r != 4) || !is_last_axis(sm->axis, r) || !is_float(ss.dtype)) return false;
    Value p{n.id, 0}, s_in = n.inputs[0];
    if (!uses.single_use(p)) return false;
    std::vector<NodeId> casts;
    // softmax(s16.float(), dtype=f32).to(f16) (Llama's eager attention in f16/bf16): the op runs
    // on the f16 operands (its softmax accumulates in f32).
    if (const auto* c_in = op_as<ops::Cast>(g, s_in); c_in && ss.dtype == DType::F32) {
      const Value s16 = g.node(s_in.node).inputs[0];
      const DType dt = g.shape(s16).dtype;
      const Node& c_out = uses.sole_user(p);
      const auto* co = op_as<ops::Cast>(c_out);
      if ((dt == DType::F16 || dt == DType::BF16) && co && co->to == dt) {
        casts = {s_in.node, c_out.id};
        s_in = s16;
        p = Value{c_out.id, 0};
        if (!uses.single_use(p)) return false;
      }
    }
    const Node& pv = uses.sole_user(p);
    if (!op_as<ops::MatMul>(pv) || pv.inputs[0] != p || pv.inputs[1] == p) return false;
    const auto core = match_core(g, uses, s_in);
    if (!core) return false;
    std::vector<NodeId> interior = core->nodes;
    interior.push_back(n.id);
    interior.insert(interior.end(), casts.begin(), casts.end());
    if (!closed(g, uses, interior, pv.id)) return false;

    const Node& qk = g.node(core->scores.matmul);
    const Value q = core->scores.q, kt = core->scores.kt;
    Value v = pv.inputs[1];
    const Shape &qs = g.shape(q), &kts = g.shape(kt), &vs = g.shape(v);
    if (qs.rank() != r || kts.rank() != r || vs.rank() != r || qk.outputs[0] != g.shape(s_in)) return false;
    const Dim &heads = qs.dims[static_cast<size_t>(r - 3)], &hd = qs.dims[static_cast<size_t>(r - 1)];
    const Dim& kv_heads = kts.dims[static_cast<size_t>(r - 3)];
    if (!heads.is_static() || !hd.is_static() || !kv_heads.is_static() || hd.value <= 0) return false;

    // k in (.., Hkv, Skv, D): kT's source through its Transpose when there is one.
    std::vector<int64_t> swap(static_cast<size_t>(r));
    for (int64_t i = 0; i < r; ++i) swap[static_cast<size_t>(i)] = i;
    swap = swap_last_two(swap);
    Value k_src = kt;
    std::vector<int64_t> k_perm = swap;
    if (const auto* t = op_as<ops::Transpose>(g, kt)) {
      k_src = g.node(kt.node).inputs[0];
      k_perm = swap_last_two(normalized_perm(t->perm));
    }

    ops::Attention at;
    at.num_heads = heads.value;
    at.num_kv_heads = kv_heads.value;
    // GQA: k and v repeated to the query heads by the exporter are read before the repeat.
    if (r == 4 && k_perm == swap_last_two(swap)) {
      const auto kr = repeated_kv(g, k_src), vr = repeated_kv(g, v);
      if (kr && vr && kr->second == vr->second) {
        k_src = kr->first;
        v = vr->first;
        at.num_kv_heads = kr->second;
      }
    }
    at.head_dim = hd.value;
    at.mask_kind = core->mask;
    at.score_scale = core->scores.scale;
    at.layout = AttnLayout::BHSD;

    // BSHD when q, k and v all come from (B, S, H, D) tensors through a (0, 2, 1, 3) transpose.
    auto from_bshd = [&](Value x) -> std::optional<Value> {
      const auto* t = op_as<ops::Transpose>(g, x);
      if (!t || normalized_perm(t->perm) != kToBshd) return std::nullopt;
      return g.node(x.node).inputs[0];
    };
    const auto q0 = r == 4 ? from_bshd(q) : std::nullopt;
    const auto v0 = r == 4 ? from_bshd(v) : std::nullopt;
    const bool bshd = q0 && v0 && k_perm == kToBshd;

    auto shape_of = [&](Value x, const std::vector<int64_t>* perm) {
      Shape s = g.shape(x);
      if (perm)
        for (size_t i = 0; i < perm->size(); ++i) s.dims[i] = g.shape(x).dims[static_cast<size_t>((*perm)[i])];
      if (r == 3) s.dims.insert(s.dims.begin(), Dim(1));
      return s;
    };
    std::vector<Shape> shapes;
    Shape expect = pv.outputs[0];
    if (bshd) {
      at.layout = AttnLayout::BSHD;
      shapes = {g.shape(*q0), g.shape(k_src), g.shape(*v0)};
      expect = g.shape(*q0);
    } else {
      const bool k_identity = k_perm == swap_last_two(swap);
      shapes = {shape_of(q, nullptr), shape_of(k_src, k_identity ? nullptr : &k_perm), shape_of(v, nullptr)};
      if (r == 3) expect.dims.insert(expect.dims.begin(), Dim(1));
    }
    if (core->bias) shapes.push_back(g.shape(*core->bias));
    if (!backend_runs(ctx, at, shapes, &expect)) return false;

    // Emit.
    // q or v (old values) mapped, with a leading 1 for rank 3.
    auto lift = [&](Value x) {
      return r == 3 ? rw.emit(ops::Reshape{shape_of(x, nullptr).dims}, {rw.map(x)}) : rw.map(x);
    };
    std::vector<Value> ins;
    if (bshd) {
      ins = {rw.map(*q0), rw.map(k_src), rw.map(*v0)};
    } else {
      std::vector<int64_t> ident(static_cast<size_t>(r));
      for (int64_t i = 0; i < r; ++i) ident[static_cast<size_t>(i)] = i;
      Value k = rw.map(k_src);
      if (k_perm != ident) k = rw.emit(ops::Transpose{k_perm}, {k});
      ins = {lift(q), r == 3 ? rw.emit(ops::Reshape{shapes[1].dims}, {k}) : k, lift(v)};
    }
    if (core->bias) ins.push_back(rw.map(*core->bias));
    Value o = rw.emit(at, ins);
    NodeId root = pv.id;
    if (bshd) {
      // The exporter's transpose back to (B, S, H, D) is the BSHD result itself.
      const Value pvv{pv.id, 0};
      const Node* back = uses.single_use(pvv) ? &uses.sole_user(pvv) : nullptr;
      const auto* bt = back ? op_as<ops::Transpose>(*back) : nullptr;
      if (bt && normalized_perm(bt->perm) == kToBshd) {
        interior.push_back(pv.id);
        root = back->id;
      } else {
        o = rw.emit(ops::Transpose{kToBshd}, {o});
      }
    } else if (r == 3) {
      o = rw.emit(ops::Reshape{pv.outputs[0].dims}, {o});
    }
    rw.replace(root, {o});
    for (NodeId id : interior) rw.absorb(id);
    fired = true;
    return true;
  });
  return fired ? dce(out) : out;
}

}  // namespace rlx::passes
