#include "passes/canonical.h"

#include <cmath>
#include <map>
#include <numeric>

#include "backends/cpu/executor.h"
#include "passes/rewriter.h"
#include "passes/uses.h"

namespace rlx::passes {
namespace {

// True when every element of constant `t` equals `v`.
bool constant_all(const Tensor& t, double v) {
  if (t.numel() == 0) return false;
  for (double x : t.to_f64())
    if (x != v) return false;
  return true;
}

// True when adding (sub = false) or subtracting (sub = true) constant `t` leaves every x
// unchanged: an integer 0; for floats only -0.0 as an addend (-0.0 + +0.0 is +0.0, so x + 0 is
// not the identity on x = -0.0) and only +0.0 as a subtrahend.
bool additive_identity(const Tensor& t, bool sub) {
  if (t.numel() == 0) return false;
  const bool fl = is_float(t.dtype());
  for (double x : t.to_f64())
    if (x != 0 || (fl && std::signbit(x) == sub)) return false;
  return true;
}

}  // namespace

Graph dce(const Graph& g, const PassContext&) {
  std::vector<bool> live(g.size(), false);
  std::vector<NodeId> stack;
  auto mark = [&](NodeId id) {
    if (!live[id]) {
      live[id] = true;
      stack.push_back(id);
    }
  };
  for (Value v : g.outputs()) mark(v.node);
  for (const Node& n : g.nodes())
    if (std::holds_alternative<ops::Input>(n.op) || std::holds_alternative<ops::Param>(n.op)) mark(n.id);
  while (!stack.empty()) {
    const NodeId id = stack.back();
    stack.pop_back();
    for (Value v : g.node(id).inputs) mark(v.node);
  }
  Rewriter rw(g);
  for (const Node& n : g.nodes())
    if (live[n.id]) rw.copy(n.id);
  return rw.finish();
}

Graph cse(const Graph& g, const PassContext&) {
  // Bucket by (op name, attribute summary, new operands, output shapes); confirm with op_equal.
  // The summary (op_attrs_str: constants' data abbreviated) keeps nodes that differ only in
  // attributes, such as the thousands of per-step slices of an unrolled RNN, out of one bucket
  // that would otherwise be compared pairwise.
  struct Key {
    std::string name;
    std::string attrs;
    std::vector<Value> inputs;
    std::vector<Shape> outputs;
    bool operator<(const Key& o) const {
      if (name != o.name) return name < o.name;
      if (attrs != o.attrs) return attrs < o.attrs;
      if (inputs != o.inputs) return inputs < o.inputs;
      if (outputs.size() != o.outputs.size()) return outputs.size() < o.outputs.size();
      for (size_t i = 0; i < outputs.size(); ++i) {
        const std::string a = outputs[i].str(), b = o.outputs[i].str();
        if (a != b) return a < b;
      }
      return false;
    }
  };
  std::map<Key, std::vector<NodeId>> seen;  // -> source node ids already kept
  return rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    if (std::holds_alternative<ops::Input>(n.op) || std::holds_alternative<ops::Param>(n.op)) return false;
    Key key{op_name(n.op), op_attrs_str(n.op), rw.map(n.inputs), n.outputs};
    auto& bucket = seen[key];
    for (NodeId prev : bucket)
      if (op_equal(g.node(prev).op, n.op)) {
        std::vector<Value> vals;
        for (uint32_t p = 0; p < n.outputs.size(); ++p) vals.push_back(rw.map(Value{prev, p}));
        rw.replace(n.id, std::move(vals));
        return true;
      }
    bucket.push_back(n.id);
    return false;
  });
}

Graph fold_constants(const Graph& g, const PassContext&) {
  constexpr int64_t kMinBudget = int64_t{1} << 20;
  return rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    if (is_leaf_op(n.op) || n.inputs.empty() || std::holds_alternative<ops::If>(n.op) ||
        std::holds_alternative<ops::While>(n.op))
      return false;
    Graph& out = rw.out();
    std::vector<Value> ins = rw.map(n.inputs);
    int64_t in_bytes = 0, out_bytes = 0;
    for (Value v : ins) {
      const auto* c = op_as<ops::Constant>(out, v);
      if (!c) return false;
      in_bytes += static_cast<int64_t>(c->value.nbytes());
    }
    for (const Shape& s : n.outputs) {
      if (!s.is_static()) return false;
      out_bytes += s.nbytes();
    }
    if (out_bytes > std::max(in_bytes, kMinBudget)) return false;
    Graph tmp;
    std::vector<Value> tins;
    for (Value v : ins) tins.push_back(tmp.constant(op_as<ops::Constant>(out, v)->value));
    const NodeId id = tmp.add_node(n.op, tins);
    std::vector<Value> touts;
    for (uint32_t p = 0; p < n.outputs.size(); ++p) touts.push_back(Value{id, p});
    tmp.set_outputs(touts);
    std::vector<Tensor> vals;
    try {
      cpu::Executor ex(std::move(tmp));
      std::vector<size_t> all(touts.size());
      std::iota(all.begin(), all.end(), size_t{0});
      vals = ex.run({}, all);
    } catch (const Error&) {
      return false;  // keep the node: its error surfaces at run time if it is reached
    }
    std::vector<Value> nv;
    for (auto& t : vals) nv.push_back(out.constant(std::move(t)));
    rw.replace(n.id, std::move(nv));
    return true;
  });
}

Graph remove_trivial_ops(const Graph& g, const PassContext&) {
  return rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    if (n.outputs.size() != 1 || n.inputs.empty()) return false;
    const Shape& out = n.outputs[0];
    const Value x = n.inputs[0];
    const Shape& xs = g.shape(x);
    auto forward = [&](Value v) {
      rw.replace(n.id, {rw.map(v)});
      return true;
    };
    if (std::holds_alternative<ops::StopGradient>(n.op)) return forward(x);
    if (std::holds_alternative<ops::Reshape>(n.op) || std::holds_alternative<ops::Expand>(n.op) ||
        std::holds_alternative<ops::Cast>(n.op)) {
      if (xs == out) return forward(x);
      if (std::holds_alternative<ops::Reshape>(n.op)) {
        if (op_as<ops::Reshape>(g, x)) {  // reshape(reshape(y)) -> reshape(y)
          const Value y = g.node(x.node).inputs[0];
          if (g.shape(y) == out) return forward(y);
          rw.replace(n.id, {rw.emit(n.op, {rw.map(y)})});
          return true;
        }
      }
      return false;
    }
    if (const auto* t = op_as<ops::Transpose>(n)) {
      if (is_identity_perm(t->perm)) return forward(x);
      if (const auto* inner = op_as<ops::Transpose>(g, x)) {  // out[i] = in[p[i]] = y[q[p[i]]]
        ops::Transpose merged;
        const int64_t r = static_cast<int64_t>(t->perm.size());
        for (int64_t i = 0; i < r; ++i) {
          const int64_t pi = t->perm[static_cast<size_t>(i)] < 0 ? t->perm[static_cast<size_t>(i)] + r
                                                                  : t->perm[static_cast<size_t>(i)];
          const int64_t qi = inner->perm[static_cast<size_t>(pi)];
          merged.perm.push_back(qi < 0 ? qi + r : qi);
        }
        const Value y = g.node(x.node).inputs[0];
        if (is_identity_perm(merged.perm)) return forward(y);
        rw.replace(n.id, {rw.emit(merged, {rw.map(y)})});
        return true;
      }
      return false;
    }
    if (op_as<ops::Narrow>(n) || op_as<ops::Concat>(n)) {
      if (n.inputs.size() == 1 && xs == out) return forward(x);
      return false;
    }
    if (const auto* r = op_as<ops::Reverse>(n)) {
      if (r->axes.empty()) return forward(x);
      return false;
    }
    if (const auto* b = op_as<ops::Binary>(n)) {
      // x op c with a constant c that leaves x unchanged and does not broadcast it.
      auto neutral = [&](Value c, double v) {
        const auto* k = op_as<ops::Constant>(g, c);
        return k && constant_all(k->value, v);
      };
      auto additive = [&](Value c, bool sub) {
        const auto* k = op_as<ops::Constant>(g, c);
        return k && additive_identity(k->value, sub);
      };
      const Value a = n.inputs[0], c = n.inputs[1];
      const bool a_keeps = g.shape(a) == out, c_keeps = g.shape(c) == out;
      switch (b->kind) {
        case BinaryKind::Add:
          if (a_keeps && additive(c, false)) return forward(a);
          if (c_keeps && additive(a, false)) return forward(c);
          break;
        case BinaryKind::Sub:
          if (a_keeps && additive(c, true)) return forward(a);
          break;
        case BinaryKind::Mul:
          if (a_keeps && neutral(c, 1)) return forward(a);
          if (c_keeps && neutral(a, 1)) return forward(c);
          break;
        case BinaryKind::Div:
          if (a_keeps && neutral(c, 1)) return forward(a);
          break;
        default: break;
      }
    }
    return false;
  });
}

}  // namespace rlx::passes
