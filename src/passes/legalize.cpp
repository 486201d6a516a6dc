#include "passes/legalize.h"

#include <map>

#include "passes/canonical.h"

namespace rlx::passes {
namespace {

std::string node_detail(const Graph& g, const Node& n) {
  std::string s = node_label(n) + " inputs (";
  for (size_t i = 0; i < n.inputs.size(); ++i) s += (i ? ", " : "") + g.shape(n.inputs[i]).str();
  s += ") -> (";
  for (size_t i = 0; i < n.outputs.size(); ++i) s += (i ? ", " : "") + n.outputs[i].str();
  s += ")";
  const std::string attrs = op_attrs_str(n.op);
  if (!attrs.empty()) s += " [" + attrs + "]";
  return s;
}

}  // namespace

Graph expand_unclaimed(const Graph& g, const ClaimFn& claims, bool* changed) {
  bool any = false;
  Graph out = rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    if (is_leaf_op(n.op) || claims(g, n)) return false;
    const bool done = expand_node(rw, n);
    any |= done;
    return done;
  });
  if (changed) *changed = any;
  return out;
}

Graph legalize(const Graph& g, const ClaimFn& claims, const std::string& device_label, const ReasonFn& why) {
  Graph cur = g;
  constexpr int kMaxRounds = 6;  // expansions nest at most a few levels (layer -> block -> ...)
  for (int round = 0; round < kMaxRounds; ++round) {
    bool all = true;
    for (const Node& n : cur.nodes())
      if (!is_leaf_op(n.op) && !claims(cur, n)) {
        all = false;
        break;
      }
    if (all) break;
    bool changed = false;
    cur = dce(expand_unclaimed(cur, claims, &changed));
    if (!changed) break;
  }
  std::vector<std::string> bad;
  for (const Node& n : cur.nodes())
    if (!is_leaf_op(n.op) && !claims(cur, n)) {
      const std::string reason = why ? why(cur, n) : std::string();
      bad.push_back(node_detail(cur, n) + (reason.empty() ? "" : ": " + reason));
    }
  if (!bad.empty()) {
    std::string msg = "the " + device_label + " backend cannot run " + std::to_string(bad.size()) +
                      " node(s), and they have no decomposition into ops it runs:";
    for (const auto& b : bad) msg += "\n  " + b;
    msg += "\nRun on Device::Cpu (which runs every op), or rewrite these nodes with supported ops.";
    throw Error(msg);
  }
  cur.verify();
  return cur;
}

std::vector<DispatchRow> dispatch_report(const Graph& g, const ClaimFn& claims) {
  std::map<std::string, DispatchRow> rows;
  for (const Node& n : g.nodes()) {
    if (is_leaf_op(n.op)) continue;
    DispatchRow& r = rows[op_name(n.op)];
    r.op = op_name(n.op);
    if (claims(g, n)) {
      ++r.native;
      continue;
    }
    // Decomposed when its expansion legalizes fully.
    Graph one;
    std::vector<Value> ins;
    for (Value v : n.inputs) ins.push_back(one.input("in" + std::to_string(ins.size()), g.shape(v)));
    const NodeId id = one.add_node(n.op, ins);
    for (uint32_t p = 0; p < n.outputs.size(); ++p) one.add_output(Value{id, p});
    try {
      legalize(one, claims, "target");
      ++r.decomposed;
    } catch (const Error&) {
      ++r.unsupported;
    }
  }
  std::vector<DispatchRow> out;
  for (auto& [k, r] : rows) out.push_back(r);
  return out;
}

}  // namespace rlx::passes
