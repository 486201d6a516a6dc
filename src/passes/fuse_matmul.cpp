// Matmul fusions: fuse_matmul_bias_act, fuse_matmul_residual, fuse_swiglu_dual_matmul,
// fuse_shared_input_matmul.
#include <map>

#include "passes/canonical.h"
#include "passes/fusion.h"
#include "passes/rewriter.h"
#include "passes/uses.h"

namespace rlx::passes {
namespace {

bool is_weight_leaf(const Graph& g, Value w) {
  const Node& n = g.node(w.node);
  return std::holds_alternative<ops::Param>(n.op) || std::holds_alternative<ops::Constant>(n.op);
}
// The other operand of binary node `n` given one of them.
Value other_operand(const Node& n, Value one) { return n.inputs[0] == one ? n.inputs[1] : n.inputs[0]; }

}  // namespace

Graph fuse_matmul_bias_act(const Graph& g, const PassContext&) {
  const Uses uses(g);
  return rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    if (!op_as<ops::MatMul>(n)) return false;
    const Value m{n.id, 0};
    if (!uses.single_use(m)) return false;
    const Node& add = uses.sole_user(m);
    if (!is_binary(add, BinaryKind::Add) || add.inputs[0] == add.inputs[1]) return false;
    const Value bias = other_operand(add, m);
    const Shape& bs = g.shape(bias);
    if (bs.rank() > 1 || add.outputs[0] != n.outputs[0]) return false;  // bias must not broadcast the product
    ops::FusedMatMulBiasAct f;
    NodeId root = add.id;
    const Value sum{add.id, 0};
    if (uses.single_use(sum)) {
      const Node& act = uses.sole_user(sum);
      if (const auto* a = op_as<ops::Activation>(act)) {
        if (a->kind == ActKind::Gelu || a->kind == ActKind::GeluApprox || a->kind == ActKind::Silu ||
            a->kind == ActKind::Relu) {
          f.activation = a->kind;
          root = act.id;
        }
      }
    }
    const std::vector<Value> operands{n.inputs[0], n.inputs[1], bias};
    if (!infer_ok(f, g, operands, &g.node(root).outputs[0])) return false;
    const Value fused = rw.emit(f, rw.map(operands));
    rw.replace(root, {fused});
    rw.absorb(n.id);
    rw.absorb(add.id);
    return true;
  });
}

Graph fuse_matmul_residual(const Graph& g, const PassContext&) {
  const Uses uses(g);
  // Matched at the Add: the product (MatMul, or FusedMatMulBiasAct without a residual) must be
  // used by this Add alone, and the other operand must have the sum's shape (no broadcast).
  return dce(rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    if (!is_binary(n, BinaryKind::Add) || n.inputs[0] == n.inputs[1]) return false;
    for (const Value prod : n.inputs) {
      const Node& p = g.node(prod.node);
      const auto* fused = op_as<ops::FusedMatMulBiasAct>(p);
      if (!op_as<ops::MatMul>(p) && !(fused && !fused->residual)) continue;
      if (!uses.single_use(prod)) continue;
      const Value res = other_operand(n, prod);
      if (g.shape(res) != n.outputs[0] || p.outputs[0] != n.outputs[0]) continue;
      ops::FusedMatMulBiasAct f;
      if (fused) f = *fused;
      f.residual = true;
      std::vector<Value> operands = p.inputs;
      operands.push_back(res);
      if (!infer_ok(f, g, operands, &n.outputs[0])) continue;
      rw.replace(n.id, {rw.emit(f, rw.map(operands))});
      return true;
    }
    return false;
  }));
}

Graph fuse_swiglu_dual_matmul(const Graph& g, const PassContext& ctx) {
  const Uses uses(g);
  // Matched at the Mul: mul(up, silu(gate)) with up = x @ Wup, gate = x @ Wgate. The fused
  // nodes are emitted at the Mul; the products already copied become dead (removed by dce).
  return dce(rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    if (!is_binary(n, BinaryKind::Mul)) return false;
    for (int side = 0; side < 2; ++side) {
      const Value up = n.inputs[static_cast<size_t>(side)], s = n.inputs[static_cast<size_t>(1 - side)];
      const Node& un = g.node(up.node);
      const Node& sn = g.node(s.node);
      if (!op_as<ops::MatMul>(un) || !is_activation(sn, ActKind::Silu)) continue;
      const Value gate = sn.inputs[0];
      const Node& gn = g.node(gate.node);
      if (!op_as<ops::MatMul>(gn) || gn.id == un.id) continue;
      if (!uses.single_use(up) || !uses.single_use(s) || !uses.single_use(gate)) continue;
      const Value x = un.inputs[0];
      if (gn.inputs[0] != x) continue;
      const Value wu = un.inputs[1], wg = gn.inputs[1];
      const Shape &wus = g.shape(wu), &wgs = g.shape(wg);
      if (wus.rank() != 2 || wus != wgs || !wus.is_static()) continue;
      if (g.shape(up) != n.outputs[0] || g.shape(s) != n.outputs[0]) continue;  // no broadcasting in the mul
      // Check the fused chain's shapes on the source shapes before emitting.
      Shape cat_shape = wus;
      cat_shape.dims[1] = Dim(2 * wus[1].value);
      Shape prod = g.shape(up);
      prod.dims.back() = Dim(2 * wus[1].value);
      std::vector<Shape> ps{g.shape(x), cat_shape};
      try {
        if (infer_op(ops::MatMul{}, ps).at(0) != prod) continue;
        const std::vector<Shape> sw{prod};
        if (infer_op(ops::FusedSwiGLU{}, sw).at(0) != n.outputs[0]) continue;
      } catch (const Error&) {
        continue;
      }
      const Value wcat = rw.emit(ops::Concat{.axis = 1}, {rw.map(wu), rw.map(wg)});
      const Value mm = rw.emit(ops::MatMul{}, {rw.map(x), wcat});
      const Value out = rw.emit(ops::FusedSwiGLU{.gate_first = false}, {mm});
      rw.replace(n.id, {out});
      return true;
    }
    return false;
  }), ctx);
}

Graph fuse_shared_input_matmul(const Graph& g, const PassContext&) {
  // Group MatMuls by their input value and weight K/dtype; weights must be rank-2 leaves.
  struct Member {
    NodeId node;
    Value w;
    int64_t n;
  };
  std::map<std::pair<Value, std::string>, std::vector<Member>> groups;
  for (const Node& n : g.nodes()) {
    if (!op_as<ops::MatMul>(n)) continue;
    const Value x = n.inputs[0], w = n.inputs[1];
    const Shape& ws = g.shape(w);
    const Shape& xs = g.shape(x);
    if (ws.rank() != 2 || !ws.is_static() || xs.rank() < 1 || !is_weight_leaf(g, w)) continue;
    groups[{x, std::to_string(ws[0].value) + ":" + dtype_name(ws.dtype)}].push_back({n.id, w, ws[1].value});
  }
  std::map<NodeId, const std::vector<Member>*> leader;  // first node of each group of >= 2
  for (const auto& [key, members] : groups)
    if (members.size() >= 2) leader[members.front().node] = &members;
  if (leader.empty()) return g;
  return rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    auto it = leader.find(n.id);
    if (it == leader.end()) return false;
    const auto& members = *it->second;
    std::vector<Value> ws;
    for (const auto& m : members) ws.push_back(rw.map(m.w));  // weights declared later are copied now
    const Value wcat = rw.emit(ops::Concat{.axis = 1}, ws);
    const Value prod = rw.emit(ops::MatMul{}, {rw.map(n.inputs[0]), wcat});
    const int64_t last = static_cast<int64_t>(rw.out().shape(prod).rank()) - 1;
    int64_t offset = 0;
    for (const auto& m : members) {
      const Value part = rw.emit(ops::Narrow{.axis = last, .start = offset, .len = m.n}, {prod});
      rw.replace(m.node, {part});
      offset += m.n;
    }
    return true;
  });
}

}  // namespace rlx::passes
