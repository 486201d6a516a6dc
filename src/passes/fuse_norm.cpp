// Norm fusions: fuse_residual_ln, fuse_residual_rms_norm, fuse_rms_norm_reshape.
#include "passes/fusion.h"
#include "passes/rewriter.h"
#include "passes/uses.h"

namespace rlx::passes {
namespace {

// Add(x, r) whose only consumer is a last-axis Norm of it (as the normalized operand).
template <class Norm, class Fused>
Graph fuse_residual(const Graph& g) {
  const Uses uses(g);
  return rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    if (!is_binary(n, BinaryKind::Add)) return false;
    const Value sum{n.id, 0};
    if (!uses.single_use(sum) || uses.of(sum).front().input != 0) return false;
    const Node& norm = uses.sole_user(sum);
    const auto* nop = op_as<Norm>(norm);
    if (!nop || !is_last_axis(nop->axis, n.outputs[0].rank())) return false;
    const Value x = n.inputs[0], r = n.inputs[1];
    if (g.shape(x) != n.outputs[0] || g.shape(r) != n.outputs[0]) return false;  // no broadcasting add
    Fused f;
    f.has_bias = norm.inputs.size() > 2;
    f.eps = nop->eps;
    std::vector<Value> operands{x, r, norm.inputs[1]};
    if (f.has_bias) operands.push_back(norm.inputs[2]);
    if (!infer_ok(f, g, operands, &norm.outputs[0])) return false;
    const Value fused = rw.emit(f, rw.map(operands));
    rw.replace(norm.id, {fused});
    rw.absorb(n.id);
    return true;
  });
}

}  // namespace

Graph fuse_residual_ln(const Graph& g, const PassContext&) {
  return fuse_residual<ops::LayerNorm, ops::FusedResidualLN>(g);
}

Graph fuse_residual_rms_norm(const Graph& g, const PassContext&) {
  return fuse_residual<ops::RmsNorm, ops::FusedResidualRmsNorm>(g);
}

Graph fuse_rms_norm_reshape(const Graph& g, const PassContext&) {
  const Uses uses(g);
  return rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    const auto* rn = op_as<ops::RmsNorm>(n);
    if (!rn) return false;
    const Shape& xs = n.outputs[0];
    const Value y{n.id, 0};
    if (xs.rank() < 3 || !xs.is_static() || !is_last_axis(rn->axis, xs.rank()) || !uses.single_use(y)) return false;
    const Node& rs = uses.sole_user(y);
    if (!op_as<ops::Reshape>(rs)) return false;
    const Shape& os = rs.outputs[0];
    const auto dims = xs.concrete();
    const int64_t h = dims.back();
    if (h <= 0) return false;  // a zero-size norm axis: nothing to gain, and no row count to divide by
    if (os.rank() != 2 || !os.is_static() || os[1].value != h || os[0].value != product(dims) / h) return false;
    // reshape first (a view), then the norm over the same last axis.
    ops::Reshape flat{.shape = {Dim(os[0].value), Dim(h)}};
    const Value xf = rw.emit(flat, {rw.map(n.inputs[0])});
    std::vector<Value> ins{xf};
    for (size_t i = 1; i < n.inputs.size(); ++i) ins.push_back(rw.map(n.inputs[i]));
    ops::RmsNorm norm = *rn;
    norm.axis = -1;
    const Value out = rw.emit(norm, ins);
    rw.replace(rs.id, {out});
    rw.absorb(n.id);
    return true;
  });
}

}  // namespace rlx::passes
