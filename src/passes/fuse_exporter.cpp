// Exporter patterns spelled out op by op: fuse_gelu, fuse_silu, fuse_layer_norm, fuse_rms_norm.
#include <numbers>

#include "passes/canonical.h"
#include "passes/exporter.h"
#include "passes/exporter_util.h"
#include "passes/rewriter.h"
#include "runtime/backend.h"

namespace rlx::passes {
namespace exporter {

bool backend_runs(const PassContext& ctx, const Op& op, const std::vector<Shape>& operands, const Shape* expect) {
  try {
    const auto out = infer_op(op, operands);
    if (expect && (out.size() != 1 || out[0] != *expect)) return false;
  } catch (const Error&) {
    return false;
  }
  if (!ctx.backend) return true;
  if (!ctx.backend->claims_kind(op_name(op))) return false;
  Graph tmp;
  std::vector<Value> ins;
  for (size_t i = 0; i < operands.size(); ++i) ins.push_back(tmp.input("operand" + std::to_string(i), operands[i]));
  try {
    const NodeId id = tmp.add_node(op, ins);
    return ctx.backend->claims(tmp, tmp.node(id));
  } catch (const Error&) {
    return false;
  }
}

Tensor ones(DType dt, int64_t h) {
  const std::vector<double> v(static_cast<size_t>(h), 1.0);
  return Tensor::f64({h}, v).cast(dt);
}

}  // namespace exporter

namespace {

using namespace exporter;

// ---- GELU ------------------------------------------------------------------------------------

// Node of `v` when it is Add(one-element Constant ~= 1, e) (either order); sets `e`.
bool one_plus(const Graph& g, Value v, DType dt, Value& e) {
  const Node& n = g.node(v.node);
  if (!is_binary(n, BinaryKind::Add)) return false;
  for (int s = 0; s < 2; ++s)
    if (scalar_near(g, n.inputs[static_cast<size_t>(s)], 1.0, dt)) {
      e = n.inputs[static_cast<size_t>(1 - s)];
      return true;
    }
  return false;
}

// erf argument: x * (1/sqrt(2)) (or x / sqrt(2)).
bool erf_argument(const Graph& g, Value arg, Value x, DType dt, std::vector<NodeId>& nodes) {
  const Product p = product_of(g, arg);
  if (p.factors.size() != 1 || p.factors[0] != x || !near(p.scale, std::numbers::sqrt2 / 2, dt)) return false;
  nodes.insert(nodes.end(), p.nodes.begin(), p.nodes.end());
  return true;
}

// tanh argument: sqrt(2/pi) * (x + 0.044715 * x^3), or sqrt(2/pi) * x * (1 + 0.044715 * x^2).
bool tanh_argument(const Graph& g, Value arg, Value x, DType dt, std::vector<NodeId>& nodes) {
  const double k = std::sqrt(2.0 / std::numbers::pi), c = 0.044715;
  const Product p = product_of(g, arg);
  if (!near(p.scale, k, dt) || p.nodes.empty()) return false;
  std::vector<NodeId> found = p.nodes;
  // The cubic term c * x^power of the sum `sum` = Add(lead, c * x^power).
  auto cubic = [&](Value sum, auto&& is_lead, int power) {
    const Node& a = g.node(sum.node);
    if (!is_binary(a, BinaryKind::Add)) return false;
    for (int s = 0; s < 2; ++s) {
      if (!is_lead(a.inputs[static_cast<size_t>(s)])) continue;
      const Product q = product_of(g, a.inputs[static_cast<size_t>(1 - s)]);
      std::vector<NodeId> pn;
      const auto pw = power_of(g, q.factors, x, pn);
      if (!near(q.scale, c, dt) || !pw || *pw != power) continue;
      found.push_back(a.id);
      found.insert(found.end(), q.nodes.begin(), q.nodes.end());
      found.insert(found.end(), pn.begin(), pn.end());
      return true;
    }
    return false;
  };
  bool ok = false;
  if (p.factors.size() == 1) {  // k * (x + c x^3)
    ok = cubic(p.factors[0], [&](Value v) { return v == x; }, 3);
  } else if (p.factors.size() == 2) {  // k * x * (1 + c x^2)
    for (int s = 0; s < 2 && !ok; ++s)
      if (p.factors[static_cast<size_t>(s)] == x)
        ok = cubic(p.factors[static_cast<size_t>(1 - s)], [&](Value v) { return scalar_near(g, v, 1.0, dt); }, 2);
  }
  if (ok) nodes.insert(nodes.end(), found.begin(), found.end());
  return ok;
}

}  // namespace

Graph fuse_gelu(const Graph& g, const PassContext& ctx) {
  if (!any_node(g, [](const Node& n) { return is_activation(n, ActKind::Erf) || is_activation(n, ActKind::Tanh); }))
    return g;
  const Uses uses(g);
  bool fired = false;
  Graph out = rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    if (!is_binary(n, BinaryKind::Mul) && !is_binary(n, BinaryKind::Div)) return false;
    const Shape& ys = n.outputs[0];
    if (!is_float(ys.dtype)) return false;
    const Product p = product_of(g, Value{n.id, 0});
    if (p.factors.size() != 2 || !near(p.scale, 0.5, ys.dtype)) return false;
    for (int s = 0; s < 2; ++s) {
      const Value x = p.factors[static_cast<size_t>(s)], t = p.factors[static_cast<size_t>(1 - s)];
      if (g.shape(x) != ys) continue;
      Value e;
      if (!one_plus(g, t, ys.dtype, e)) continue;
      const Node& en = g.node(e.node);
      std::vector<NodeId> interior(p.nodes.begin(), p.nodes.end());
      interior.push_back(t.node);
      interior.push_back(e.node);
      ActKind kind;
      if (is_activation(en, ActKind::Erf) && erf_argument(g, en.inputs[0], x, ys.dtype, interior))
        kind = ActKind::Gelu;
      else if (is_activation(en, ActKind::Tanh) && tanh_argument(g, en.inputs[0], x, ys.dtype, interior))
        kind = ActKind::GeluApprox;
      else
        continue;
      std::erase(interior, n.id);
      if (!closed(g, uses, interior, n.id)) continue;
      const ops::Activation act{kind};
      if (!backend_runs(ctx, act, {g.shape(x)}, &ys)) continue;
      rw.replace(n.id, {rw.emit(act, {rw.map(x)})});
      for (NodeId id : interior) rw.absorb(id);
      fired = true;
      return true;
    }
    return false;
  });
  return fired ? dce(out) : out;
}

Graph fuse_silu(const Graph& g, const PassContext& ctx) {
  if (!any_node(g, [](const Node& n) { return is_activation(n, ActKind::Sigmoid); })) return g;
  const Uses uses(g);
  bool fired = false;
  Graph out = rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    if (!is_binary(n, BinaryKind::Mul) || !is_float(n.outputs[0].dtype)) return false;
    for (int s = 0; s < 2; ++s) {
      const Value x = n.inputs[static_cast<size_t>(s)], sg = n.inputs[static_cast<size_t>(1 - s)];
      const Node& sn = g.node(sg.node);
      if (!is_activation(sn, ActKind::Sigmoid) || sn.inputs[0] != x || g.shape(x) != n.outputs[0]) continue;
      if (!closed(g, uses, {sn.id}, n.id)) continue;
      const ops::Activation act{ActKind::Silu};
      if (!backend_runs(ctx, act, {g.shape(x)}, &n.outputs[0])) continue;
      rw.replace(n.id, {rw.emit(act, {rw.map(x)})});
      rw.absorb(sn.id);
      fired = true;
      return true;
    }
    return false;
  });
  return fired ? dce(out) : out;
}

// ---- norms -----------------------------------------------------------------------------------
namespace {

bool is_last_axis_mean(const Node& n, int64_t rank) {
  const auto* r = op_as<ops::Reduce>(n);
  return r && r->kind == ReduceKind::Mean && r->keep_dims && r->axes.size() == 1 && is_last_axis(r->axes[0], rank);
}

// The value squared by node `sq`: Pow(d, 2) or Mul(d, d).
std::optional<Value> squared(const Graph& g, const Node& sq) {
  if (is_binary(sq, BinaryKind::Mul) && sq.inputs[0] == sq.inputs[1]) return sq.inputs[0];
  if (is_binary(sq, BinaryKind::Pow)) {
    const auto e = scalar_const(g, sq.inputs[1]);
    if (e && *e == 2.0) return sq.inputs[0];
  }
  return std::nullopt;
}

// Binary node `n` of kind `k` with operand `a` (either side for commutative kinds; the left one
// otherwise): returns the other operand.
std::optional<Value> other_of(const Node& n, BinaryKind k, Value a) {
  if (!is_binary(n, k) || n.inputs[0] == n.inputs[1]) return std::nullopt;
  if (n.inputs[0] == a) return n.inputs[1];
  if (n.inputs[1] == a && (k == BinaryKind::Add || k == BinaryKind::Mul)) return n.inputs[0];
  return std::nullopt;
}

struct NormMatch {
  std::vector<NodeId> chain;  // every node of the pattern after the anchor; the last is the root
  double eps = 0;
  std::optional<Value> gamma, beta;
};

// From the variance/mean-square node `ms` = ReduceMean(d^2, last, keep):
//   d / sqrt(ms + eps) | d * rsqrt(ms + eps) | d * reciprocal(sqrt(..)) | d * (1 / sqrt(..)) |
//   d * pow(ms + eps, -0.5), then an optional Cast to `cast_back`, * gamma[H], + beta[H].
bool match_norm_tail(const Graph& g, const Uses& uses, const Node& ms, Value d, std::optional<DType> cast_back,
                     NormMatch& m) {
  const Shape& ds = g.shape(d);
  const DType dt = ds.dtype;
  auto next = [&](Value v) -> const Node* { return uses.single_use(v) ? &uses.sole_user(v) : nullptr; };
  Value cur{ms.id, 0};
  const Node* a = next(cur);
  if (!a || !is_binary(*a, BinaryKind::Add) || a->outputs[0] != g.shape(cur)) return false;
  const Value eps_v = a->inputs[0] == cur ? a->inputs[1] : a->inputs[0];
  const auto eps = scalar_const(g, eps_v);
  if (!eps || !(*eps >= 0) || !std::isfinite(*eps)) return false;
  m.eps = *eps;
  m.chain.push_back(a->id);
  cur = Value{a->id, 0};
  const Node* s = next(cur);
  if (!s) return false;
  m.chain.push_back(s->id);
  std::optional<Value> inv;  // 1 / sqrt(ms + eps)
  const Node* y = nullptr;
  const auto pw = is_binary(*s, BinaryKind::Pow) && s->inputs[0] == cur ? scalar_const(g, s->inputs[1]) : std::nullopt;
  if (is_activation(*s, ActKind::Rsqrt) || (pw && *pw == -0.5)) {
    inv = Value{s->id, 0};
  } else if (is_activation(*s, ActKind::Sqrt)) {
    const Value r{s->id, 0};
    const Node* u = next(r);
    if (!u) return false;
    if (is_binary(*u, BinaryKind::Div) && u->inputs[0] == d && u->inputs[1] == r) {
      y = u;
    } else if (is_activation(*u, ActKind::Reciprocal) ||
               (is_binary(*u, BinaryKind::Div) && u->inputs[1] == r && scalar_near(g, u->inputs[0], 1.0, dt) &&
                u->outputs[0] == g.shape(r))) {
      m.chain.push_back(u->id);
      inv = Value{u->id, 0};
    } else {
      return false;
    }
  } else {
    return false;
  }
  if (inv) {
    y = next(*inv);
    if (!y || !other_of(*y, BinaryKind::Mul, *inv) || *other_of(*y, BinaryKind::Mul, *inv) != d) return false;
  }
  if (y->outputs[0] != ds) return false;
  m.chain.push_back(y->id);
  cur = Value{y->id, 0};
  if (cast_back) {
    const Node* c = next(cur);
    const auto* cast = c ? op_as<ops::Cast>(*c) : nullptr;
    if (!cast || cast->to != *cast_back) return false;
    m.chain.push_back(c->id);
    cur = Value{c->id, 0};
  }
  const Shape& ys = g.shape(cur);
  const std::vector<Dim> last{ys.dims.back()};
  auto per_feature = [&](Value v) { return v != cur && g.shape(v).dims == last && g.shape(v).dtype == ys.dtype; };
  if (const Node* u = next(cur)) {
    const auto w = other_of(*u, BinaryKind::Mul, cur);
    if (w && per_feature(*w) && u->outputs[0] == ys) {
      m.gamma = *w;
      m.chain.push_back(u->id);
      cur = Value{u->id, 0};
    }
  }
  if (const Node* u = next(cur)) {
    const auto b = other_of(*u, BinaryKind::Add, cur);
    if (b && per_feature(*b) && u->outputs[0] == ys) {
      m.beta = *b;
      m.chain.push_back(u->id);
    }
  }
  return true;
}

// Emits Norm(x, gamma or ones, beta?) at the match's root when the pattern is closed and the
// backend runs the node.
template <class Norm>
bool emit_norm(Rewriter& rw, const Graph& g, const Uses& uses, const PassContext& ctx, Value x,
               std::vector<NodeId> interior, const NormMatch& m) {
  const NodeId root = m.chain.back();
  interior.insert(interior.end(), m.chain.begin(), m.chain.end() - 1);
  if (!closed(g, uses, interior, root)) return false;
  const Shape& xs = g.shape(x);
  const Shape& out = g.node(root).outputs[0];
  if (xs.rank() < 1 || (!m.gamma && xs.dims.back().is_symbolic())) return false;
  if (xs.dims.back() == Dim(0)) return false;  // a zero-size norm axis: nothing to gain
  Norm op;
  op.axis = -1;
  op.eps = m.eps;
  std::vector<Shape> shapes{xs, m.gamma ? g.shape(*m.gamma) : Shape({xs.dims.back()}, xs.dtype)};
  if (m.beta) shapes.push_back(g.shape(*m.beta));
  if (!backend_runs(ctx, op, shapes, &out)) return false;
  std::vector<Value> ins{rw.map(x)};
  ins.push_back(m.gamma ? rw.map(*m.gamma) : rw.out().constant(ones(xs.dtype, xs.dims.back().value)));
  if (m.beta) ins.push_back(rw.map(*m.beta));
  rw.replace(root, {rw.emit(op, ins)});
  for (NodeId id : interior) rw.absorb(id);
  return true;
}

// x = Cast(x0 -> f32) with x0 f16/bf16 (exporters computing a norm in f32): x0.
std::optional<Value> widened_half(const Graph& g, Value x) {
  const auto* c = op_as<ops::Cast>(g, x);
  if (!c || c->to != DType::F32) return std::nullopt;
  const Value src = g.node(x.node).inputs[0];
  const DType from = g.shape(src).dtype;
  if (from != DType::F16 && from != DType::BF16) return std::nullopt;
  return src;
}

// The norm tail from `ms`; with x = Cast(x0 -> f32) tries the cast back to x0's dtype first.
// Returns the value the norm runs on (x0 or x).
std::optional<Value> match_tail_maybe_cast(const Graph& g, const Uses& uses, const Node& ms, Value d, Value x,
                                           NormMatch& m) {
  if (const auto x0 = widened_half(g, x)) {
    m = NormMatch{};
    if (match_norm_tail(g, uses, ms, d, g.shape(*x0).dtype, m)) return *x0;
  }
  m = NormMatch{};
  if (match_norm_tail(g, uses, ms, d, std::nullopt, m)) return x;
  return std::nullopt;
}

}  // namespace

Graph fuse_layer_norm(const Graph& g, const PassContext& ctx) {
  if (!any_node(g, [](const Node& n) { return op_as<ops::Reduce>(n) != nullptr; })) return g;
  const Uses uses(g);
  bool fired = false;
  // Anchored at d = Sub(x, mean) with mean = ReduceMean(x, last, keep).
  Graph out = rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    if (!is_binary(n, BinaryKind::Sub) || !is_float(n.outputs[0].dtype)) return false;
    const Value x = n.inputs[0];
    const Node& mean = g.node(n.inputs[1].node);
    const int64_t r = g.shape(x).rank();
    if (mean.inputs.empty() || mean.inputs[0] != x || !is_last_axis_mean(mean, r) || n.outputs[0] != g.shape(x))
      return false;
    const Value d{n.id, 0};
    for (const Use& u : uses.of(d)) {
      const Node& sq = g.node(u.node);
      const auto sqd = squared(g, sq);
      if (!sqd || *sqd != d || !uses.single_use(Value{sq.id, 0})) continue;
      const Node& ms = uses.sole_user(Value{sq.id, 0});
      if (!is_last_axis_mean(ms, r)) continue;
      NormMatch m;
      const auto xn = match_tail_maybe_cast(g, uses, ms, d, x, m);
      if (!xn || !emit_norm<ops::LayerNorm>(rw, g, uses, ctx, *xn, {mean.id, n.id, sq.id, ms.id}, m)) continue;
      fired = true;
      return true;
    }
    return false;
  });
  return fired ? dce(out) : out;
}

Graph fuse_rms_norm(const Graph& g, const PassContext& ctx) {
  if (!any_node(g, [](const Node& n) { return op_as<ops::Reduce>(n) != nullptr; })) return g;
  const Uses uses(g);
  bool fired = false;
  // Anchored at ms = ReduceMean(x^2, last, keep).
  Graph out = rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    if (!op_as<ops::Reduce>(n) || n.inputs.empty()) return false;
    const Node& sq = g.node(n.inputs[0].node);
    const auto d = squared(g, sq);
    if (!d || !is_float(g.shape(*d).dtype) || !is_last_axis_mean(n, g.shape(*d).rank())) return false;
    // Llama: d = Cast(x0 -> f32) and the normalized value cast back to x0's dtype.
    NormMatch m;
    const auto x = match_tail_maybe_cast(g, uses, n, *d, *d, m);
    if (!x || !emit_norm<ops::RmsNorm>(rw, g, uses, ctx, *x, {sq.id, n.id}, m)) return false;
    fired = true;
    return true;
  });
  return fired ? dce(out) : out;
}

}  // namespace rlx::passes
