#pragma once
// Matching helpers shared by the exporter-pattern passes (exporter.h).
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <vector>

#include "passes/pass.h"
#include "passes/uses.h"

namespace rlx::passes::exporter {

// The value of a one-element Constant (any rank, any numeric dtype).
inline std::optional<double> scalar_const(const Graph& g, Value v) {
  const auto* c = op_as<ops::Constant>(g, v);
  if (!c || c->value.numel() != 1 || c->value.dtype() == DType::Bool) return std::nullopt;
  return c->value.to_f64()[0];
}

// True when constant `v` equals `want` within the rounding of `dt` (f32/f64: 1e-6 relative).
inline bool near(double v, double want, DType dt) {
  const double tol = dt == DType::F16 ? 1e-3 : dt == DType::BF16 ? 8e-3 : 1e-6;
  return std::isfinite(v) && std::abs(v - want) <= tol * std::abs(want);
}
inline bool scalar_near(const Graph& g, Value v, double want, DType dt) {
  const auto c = scalar_const(g, v);
  return c && near(*c, want, dt);
}

// True when every value of the `interior` nodes is read only by nodes of `interior` or by
// `root`, and none is a graph output: the pattern may absorb them.
inline bool closed(const Graph& g, const Uses& uses, const std::vector<NodeId>& interior, NodeId root) {
  std::set<NodeId> in(interior.begin(), interior.end());
  if (in.count(root)) return false;
  in.insert(root);
  for (NodeId id : interior) {
    const Node& n = g.node(id);
    if (is_leaf_op(n.op)) return false;
    for (uint32_t p = 0; p < n.outputs.size(); ++p) {
      const Value v{id, p};
      if (uses.is_output(v)) return false;
      for (const Use& u : uses.of(v))
        if (!in.count(u.node)) return false;
    }
  }
  return true;
}

// A product tree: Mul nodes (and Div by a one-element Constant) flattened into their factors;
// one-element Constant factors multiply into `scale`. `nodes` lists the Mul/Div nodes walked
// (the top one included). Stops below depth 6.
struct Product {
  std::vector<Value> factors;
  double scale = 1.0;
  std::vector<NodeId> nodes;
};
inline void flatten_product(const Graph& g, Value v, Product& p, int depth = 0) {
  if (const auto c = scalar_const(g, v)) {
    p.scale *= *c;
    return;
  }
  const Node& n = g.node(v.node);
  if (depth < 6 && is_binary(n, BinaryKind::Mul)) {
    p.nodes.push_back(n.id);
    flatten_product(g, n.inputs[0], p, depth + 1);
    flatten_product(g, n.inputs[1], p, depth + 1);
    return;
  }
  if (depth < 6 && is_binary(n, BinaryKind::Div)) {
    const auto c = scalar_const(g, n.inputs[1]);
    if (c && *c != 0) {
      p.nodes.push_back(n.id);
      p.scale /= *c;
      flatten_product(g, n.inputs[0], p, depth + 1);
      return;
    }
  }
  p.factors.push_back(v);
}
inline Product product_of(const Graph& g, Value v) {
  Product p;
  flatten_product(g, v, p);
  return p;
}

// The power of `x` in `factors` when every factor is x or Pow(x, integer constant) (recorded in
// `nodes`); nullopt otherwise.
inline std::optional<int> power_of(const Graph& g, const std::vector<Value>& factors, Value x,
                                   std::vector<NodeId>& nodes) {
  int k = 0;
  for (Value f : factors) {
    if (f == x) {
      ++k;
      continue;
    }
    const Node& n = g.node(f.node);
    if (!is_binary(n, BinaryKind::Pow) || n.inputs[0] != x) return std::nullopt;
    const auto e = scalar_const(g, n.inputs[1]);
    if (!e || *e != std::round(*e) || *e < 1 || *e > 4) return std::nullopt;
    k += static_cast<int>(*e);
    nodes.push_back(n.id);
  }
  return k;
}

// True when some node of `g` satisfies `pred` (passes return `g` unchanged, without a copy,
// when their anchor op is absent).
template <class P>
bool any_node(const Graph& g, P&& pred) {
  for (const Node& n : g.nodes())
    if (pred(n)) return true;
  return false;
}

// True when the backend runs node `op` on operands of these shapes as is (no backend: yes).
bool backend_runs(const PassContext& ctx, const Op& op, const std::vector<Shape>& operands,
                  const Shape* expect = nullptr);

// A Constant of ones of shape [h] and dtype `dt`.
Tensor ones(DType dt, int64_t h);

}  // namespace rlx::passes::exporter
