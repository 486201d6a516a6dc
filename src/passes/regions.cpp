// Elementwise regions: mark_elementwise_regions, unfuse_elementwise_regions,
// clip_elementwise_regions.
#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "passes/canonical.h"
#include "passes/fusion.h"
#include "passes/legalize.h"
#include "passes/rewriter.h"
#include "passes/uses.h"

namespace rlx::passes {
namespace {

constexpr size_t kMaxSteps = 32;
constexpr size_t kMaxInputs = 16;

bool region_candidate(const Graph& g, const Node& n) {
  if (n.outputs.size() != 1) return false;
  // A Where over storage-only values stays a Where (regions compute; those dtypes only move).
  if (is_storage_only(n.outputs[0].dtype)) return false;
  if (op_as<ops::Binary>(n) || op_as<ops::Compare>(n) || op_as<ops::Where>(n) || op_as<ops::Activation>(n))
    return true;
  if (op_as<ops::Cast>(n)) return is_float(g.shape(n.inputs[0]).dtype) && is_float(n.outputs[0].dtype);
  return false;
}

RegionStep step_of(const Node& n) {
  RegionStep s;
  if (const auto* b = op_as<ops::Binary>(n)) {
    s.kind = RegionStepKind::Binary;
    s.op = static_cast<int32_t>(b->kind);
  } else if (const auto* c = op_as<ops::Compare>(n)) {
    s.kind = RegionStepKind::Compare;
    s.op = static_cast<int32_t>(c->kind);
  } else if (const auto* a = op_as<ops::Activation>(n)) {
    s.kind = RegionStepKind::Activation;
    s.op = static_cast<int32_t>(a->kind);
  } else if (const auto* k = op_as<ops::Cast>(n)) {
    s.kind = RegionStepKind::Cast;
    s.to = k->to;
  } else {
    s.kind = RegionStepKind::Where;
  }
  return s;
}

// Regions found over `g`: root node -> member nodes (root included), ascending ids.
std::map<NodeId, std::vector<NodeId>> find_regions(const Graph& g, const std::function<bool(const Node&)>& eligible,
                                                   size_t max_steps, size_t max_inputs) {
  const Uses uses(g);
  std::vector<bool> taken(g.size(), false);
  std::map<NodeId, std::vector<NodeId>> regions;
  for (auto it = g.nodes().rbegin(); it != g.nodes().rend(); ++it) {
    const Node& root = *it;
    if (taken[root.id] || !eligible(root) || !region_candidate(g, root)) continue;
    std::set<NodeId> members{root.id};
    std::set<Value> externals(root.inputs.begin(), root.inputs.end());
    // Grow backwards: absorb an external value's producer when it is an eligible elementwise node
    // whose value has exactly one consumer and is not an output, within the limits.
    bool grew = true;
    while (grew) {
      grew = false;
      for (Value v : std::vector<Value>(externals.rbegin(), externals.rend())) {
        const Node& p = g.node(v.node);
        if (taken[p.id] || members.count(p.id) || !eligible(p) || !region_candidate(g, p) || !uses.single_use(v))
          continue;
        if (members.size() + 1 > max_steps) break;
        std::set<Value> next = externals;
        next.erase(v);
        next.insert(p.inputs.begin(), p.inputs.end());
        if (next.size() > max_inputs) continue;
        externals = std::move(next);
        members.insert(p.id);
        grew = true;
      }
    }
    if (members.size() < 2) continue;  // a single op stays itself
    for (NodeId m : members) taken[m] = true;
    regions[root.id] = std::vector<NodeId>(members.begin(), members.end());
  }
  return regions;
}

Graph mark_with(const Graph& g, const std::function<bool(const Node&)>& eligible, size_t max_steps,
                size_t max_inputs) {
  const auto regions = find_regions(g, eligible, max_steps, max_inputs);
  if (regions.empty()) return g;
  std::map<NodeId, NodeId> member_of;
  for (const auto& [root, members] : regions)
    for (NodeId m : members) member_of[m] = root;
  return rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    auto it = member_of.find(n.id);
    if (it == member_of.end()) return false;
    if (it->second != n.id) {  // interior: emitted with its root
      rw.absorb(n.id);
      return true;
    }
    const auto& members = regions.at(n.id);
    std::map<NodeId, int32_t> step_index;
    std::vector<Value> inputs;
    ops::ElementwiseRegion r;
    for (NodeId m : members) {
      const Node& mn = g.node(m);
      RegionStep s = step_of(mn);
      for (Value v : mn.inputs) {
        auto si = step_index.find(v.node);
        if (si != step_index.end() && std::binary_search(members.begin(), members.end(), v.node)) {
          s.args.push_back(-si->second - 1);
          continue;
        }
        auto pos = std::find(inputs.begin(), inputs.end(), v);
        if (pos == inputs.end()) {
          inputs.push_back(v);
          pos = inputs.end() - 1;
        }
        s.args.push_back(static_cast<int32_t>(pos - inputs.begin()));
      }
      step_index[m] = static_cast<int32_t>(r.steps.size());
      r.steps.push_back(std::move(s));
    }
    if (!infer_ok(r, g, inputs, &n.outputs[0])) {  // e.g. a broadcast the region cannot express
      for (NodeId m : members)
        if (m != n.id) rw.copy(m);
      return false;
    }
    rw.replace(n.id, {rw.emit(r, rw.map(inputs))});
    return true;
  });
}

}  // namespace

Graph mark_elementwise_regions(const Graph& g, const PassContext&) {
  return mark_with(g, [](const Node&) { return true; }, kMaxSteps, kMaxInputs);
}

Graph unfuse_elementwise_regions(const Graph& g, const PassContext&) {
  return rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    const auto* r = op_as<ops::ElementwiseRegion>(n);
    if (!r) return false;
    rw.replace(n.id, {expand_region(rw.out(), *r, rw.map(n.inputs))});
    return true;
  });
}

Graph clip_elementwise_regions(const Graph& g, size_t max_steps, size_t max_inputs) {
  if (max_steps < 1 || max_inputs < 1)
    throw Error("clip_elementwise_regions: limits must be >= 1 (got max_steps=" + std::to_string(max_steps) +
                ", max_inputs=" + std::to_string(max_inputs) + ")");
  // Unfuse the regions over a limit; remember the nodes that came out of them.
  std::set<NodeId> fresh;
  Graph flat = rewrite_each(g, [&](Rewriter& rw, const Node& n) {
    const auto* r = op_as<ops::ElementwiseRegion>(n);
    if (!r || (r->steps.size() <= max_steps && n.inputs.size() <= max_inputs)) return false;
    const std::vector<Value> ins = rw.map(n.inputs);
    const size_t before = rw.out().size();
    rw.replace(n.id, {expand_region(rw.out(), *r, ins)});
    for (size_t i = before; i < rw.out().size(); ++i) fresh.insert(static_cast<NodeId>(i));
    return true;
  });
  if (fresh.empty()) return flat;
  // Re-mark just those nodes within the limits (ids are kept by a copy without dce).
  return mark_with(flat, [&](const Node& n) { return fresh.count(n.id) > 0; }, max_steps, max_inputs);
}

}  // namespace rlx::passes
