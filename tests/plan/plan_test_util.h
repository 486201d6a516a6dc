#pragma once
// Helpers for the memory plan / schedule tests: running a graph through cpu::Executor with
// given plan options, and an independent check of the plan's no-overlap invariant.
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cpu/executor.h"
#include "plan/schedule.h"
#include "support/test_util.h"

namespace rlx::plantest {

// Binds Input / Param nodes of `g` by name (every leaf must be named in `values`).
inline std::unordered_map<NodeId, Tensor> bind_leaves(const Graph& g, const std::map<std::string, Tensor>& values) {
  std::unordered_map<NodeId, Tensor> leaves;
  for (const Node& n : g.nodes()) {
    std::string name;
    if (const auto* in = std::get_if<ops::Input>(&n.op)) name = in->name;
    else if (const auto* p = std::get_if<ops::Param>(&n.op)) name = p->name;
    else continue;
    leaves[n.id] = values.at(name);
  }
  return leaves;
}

// Runs every output of `g` through a fresh executor planned with `options`.
inline std::vector<Tensor> run_planned(const Graph& g, const std::map<std::string, Tensor>& values,
                                       const plan::PlanOptions& options) {
  cpu::Executor ex(g, options);
  std::vector<size_t> all(g.outputs().size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return ex.run(bind_leaves(g, values), all);
}

// The plan's options with every reuse feature off: one slot per value, copies for views.
inline plan::PlanOptions no_reuse() {
  plan::PlanOptions o;
  o.reuse = false;
  o.in_place = false;
  o.views = false;
  return o;
}

// Checks, independently of the planner, that no two arena values whose lifetimes overlap
// share bytes (a value is live from its node to the last node reading it or one of its
// views; graph outputs to the end), except an in-place output and the input it replaces.
// Returns the first violation, or "" when the plan is sound.
inline std::string overlap_violation(const Graph& g, const plan::MemoryPlan& mp) {
  const auto n_nodes = static_cast<int64_t>(g.size());
  std::map<Value, int64_t> last;  // per root
  for (const Node& n : g.nodes())
    for (uint32_t p = 0; p < n.outputs.size(); ++p) {
      const plan::Location& l = mp.at(Value{n.id, p});
      if (!l.is_view) last[Value{n.id, p}] = n.id;
    }
  for (const Node& n : g.nodes()) {
    if (!n.outputs.empty() && mp.at(Value{n.id, 0}).is_view) continue;  // a view reads no bytes itself
    for (Value v : n.inputs) {
      const Value r = mp.at(v).root;
      last[r] = std::max(last[r], static_cast<int64_t>(n.id));
    }
  }
  for (Value v : g.outputs()) last[mp.at(v).root] = n_nodes;
  for (const Node& n : g.nodes())
    for (uint32_t p = 0; p < n.outputs.size(); ++p) {
      const plan::Location& l = mp.at(Value{n.id, p});
      if (l.kind == plan::Location::Kind::Arena && l.bytes > 0 && (l.offset < 0 || l.offset + l.bytes > mp.arena_bytes))
        return "value " + Graph::value_str(Value{n.id, p}) + " lies outside the arena";
    }
  struct Live { Value v; int64_t def, end, lo, hi; };
  std::vector<Live> roots;
  for (const auto& [v, end] : last) {
    const plan::Location& l = mp.at(v);
    if (l.kind != plan::Location::Kind::Arena || l.bytes == 0) continue;
    roots.push_back(Live{v, v.node, end, l.offset, l.offset + l.bytes});
  }
  for (size_t i = 0; i < roots.size(); ++i)
    for (size_t j = i + 1; j < roots.size(); ++j) {
      const Live& a = roots[i];
      const Live& b = roots[j];
      const bool time = a.def <= b.end && b.def <= a.end;
      const bool space = a.lo < b.hi && b.lo < a.hi;
      if (!time || !space) continue;
      // Allowed: b written in place over a, which dies exactly where b is made.
      auto in_place_over = [&](const Live& out, const Live& in) {
        const int32_t k = mp.in_place_input[out.v.node];
        return k >= 0 && out.v.port == 0 && in.end == out.def &&
               mp.at(g.node(out.v.node).inputs[static_cast<size_t>(k)]).root == in.v;
      };
      if (in_place_over(b, a) || in_place_over(a, b)) continue;
      return "values " + Graph::value_str(a.v) + " and " + Graph::value_str(b.v) + " overlap in time and bytes";
    }
  return "";
}

}  // namespace rlx::plantest
