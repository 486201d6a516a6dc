#include "passes/hoist.h"

#include <algorithm>

#include "passes/canonical.h"
#include "passes/rewriter.h"

namespace rlx::passes {

HoistedGraph hoist_param_computations(const Graph& g) {
  // weight_only[id]: the node's values depend on params/constants alone.
  std::vector<bool> weight_only(g.size(), false), leaf(g.size(), false);
  for (const Node& n : g.nodes()) {
    const bool is_param_or_const = std::holds_alternative<ops::Param>(n.op) || std::holds_alternative<ops::Constant>(n.op);
    leaf[n.id] = is_param_or_const || std::holds_alternative<ops::Input>(n.op);
    if (is_param_or_const) {
      weight_only[n.id] = true;
      continue;
    }
    if (leaf[n.id] || n.inputs.empty() || n.outputs.size() != 1) continue;
    bool all = true;
    for (Value v : n.inputs) all &= weight_only[v.node];
    weight_only[n.id] = all;
  }
  // Hoist points: computed weight-only values read by a per-run node.
  std::vector<Value> points;
  for (const Node& n : g.nodes()) {
    if (weight_only[n.id]) continue;
    for (Value v : n.inputs)
      if (weight_only[v.node] && !leaf[v.node] && std::find(points.begin(), points.end(), v) == points.end())
        points.push_back(v);
  }
  HoistedGraph out;
  if (points.empty()) {
    out.main = g;
    return out;
  }
  for (const Node& n : g.nodes())
    if (const auto* p = std::get_if<ops::Param>(&n.op); p && p->name.rfind("__derived.", 0) == 0)
      throw Error("param name '" + p->name + "' is reserved for derived weights (the '__derived.' prefix); rename it");
  // Prologue: the weight-only closure of the hoist points.
  {
    Rewriter rw(g);
    std::vector<Value> outs;
    for (Value v : points) outs.push_back(rw.map(v));
    Graph& pg = rw.out();
    pg.set_outputs(outs);
    for (NodeId id : pg.param_nodes()) {  // only the weights of the params it reads
      const auto& name = std::get<ops::Param>(pg.node(id).op).name;
      auto it = g.weights().find(name);
      if (it != g.weights().end()) pg.set_weight(name, it->second);
    }
    out.prologue = std::move(pg);
  }
  // Main graph: each hoist point becomes a derived Param.
  Rewriter rw(g);
  for (size_t k = 0; k < points.size(); ++k) {
    out.derived.push_back("__derived." + std::to_string(k));
    rw.replace(points[k], rw.out().param(out.derived.back(), g.shape(points[k])));
  }
  for (const Node& n : g.nodes())
    if (!rw.handled(n.id) && !weight_only[n.id]) rw.copy(n.id);
  out.main = dce(rw.finish());
  return out;
}

}  // namespace rlx::passes
