#include "passes/lower.h"

#include "passes/canonical.h"
#include "passes/legalize.h"
#include "passes/uses.h"
#include "runtime/backend.h"

namespace rlx::passes {

Graph lower_control_flow(const Graph& g, const PassContext& ctx) {
  bool any = false;
  Graph out = rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    const auto* op = op_as<ops::If>(n);
    if (!op) return false;
    const Node& cn = g.node(n.inputs[0].node);
    const auto* c = op_as<ops::Constant>(cn);
    if (!c || c->value.numel() != 1) return false;
    const bool taken = c->value.to_f64()[0] != 0;
    const std::vector<Value> args = rw.map(std::vector<Value>(n.inputs.begin() + 1, n.inputs.end()));
    auto outs = inline_subgraph(rw.out(), taken ? *op->then_branch : *op->else_branch, args);
    if (!outs) return false;
    rw.replace(n.id, *outs);
    any = true;
    return true;
  });
  return any ? dce(out, ctx) : out;
}

Graph lower_dot_general(const Graph& g, const PassContext& ctx) {
  bool any = false;
  Graph out = rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    if (!op_as<ops::DotGeneral>(n)) return false;
    const bool done = expand_node(rw, n);
    any |= done;
    return done;
  });
  return any ? remove_trivial_ops(dce(out, ctx), ctx) : out;
}

Graph lower_recurrent(const Graph& g, const PassContext& ctx) {
  if (!ctx.backend) return g;  // every op kind is claimed
  bool any = false;
  Graph out = rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    const auto* op = op_as<ops::Recurrent>(n);
    if (!op || ctx.backend->claims(g, n)) return false;
    if (g.shape(n.inputs[0])[op->batch_first ? 1 : 0].is_symbolic()) return false;
    const bool done = expand_node(rw, n);
    any |= done;
    return done;
  });
  return any ? dce(out, ctx) : out;
}

}  // namespace rlx::passes
