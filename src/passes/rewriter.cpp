#include "passes/rewriter.h"

namespace rlx::passes {

Rewriter::Rewriter(const Graph& src)
    : src_(src), new_values_(src.size()), mapped_(src.size(), false), absorbed_(src.size(), false) {}

Value Rewriter::map(Value old) {
  if (old.node >= src_.size())
    throw Error("rewriter: value " + Graph::value_str(old) + " is not in the source graph");
  if (!mapped_[old.node]) copy(old.node);
  const auto& vals = new_values_[old.node];
  if (old.port >= vals.size())
    throw Error("rewriter: " + node_label(src_.node(old.node)) + " has no output port " + std::to_string(old.port));
  return vals[old.port];
}

std::vector<Value> Rewriter::map(const std::vector<Value>& olds) {
  std::vector<Value> out;
  out.reserve(olds.size());
  for (Value v : olds) out.push_back(map(v));
  return out;
}

void Rewriter::copy(NodeId root) {
  if (mapped_[root]) return;
  // Iterative post-order over unmapped operands: deep chains must not overflow the stack.
  std::vector<std::pair<NodeId, size_t>> stack{{root, 0}};
  while (!stack.empty()) {
    auto& [id, next] = stack.back();
    const Node& n = src_.node(id);
    if (next < n.inputs.size()) {
      const NodeId dep = n.inputs[next++].node;
      if (!mapped_[dep]) stack.emplace_back(dep, 0);
      continue;
    }
    std::vector<Value> ins;
    ins.reserve(n.inputs.size());
    for (Value v : n.inputs) ins.push_back(new_values_[v.node].at(v.port));
    const NodeId nid = out_.add_node_with_shapes(n.op, std::move(ins), n.outputs);
    std::vector<Value> vals;
    for (uint32_t p = 0; p < n.outputs.size(); ++p) vals.push_back(Value{nid, p});
    new_values_[id] = std::move(vals);
    mapped_[id] = true;
    stack.pop_back();
  }
}

void Rewriter::replace(NodeId old, std::vector<Value> values) {
  if (values.size() != src_.node(old).outputs.size())
    throw Error("rewriter: " + node_label(src_.node(old)) + " has " + std::to_string(src_.node(old).outputs.size()) +
                " outputs but " + std::to_string(values.size()) + " replacements were given");
  new_values_[old] = std::move(values);
  mapped_[old] = true;
}

void Rewriter::replace(Value old, Value nv) {
  const Node& n = src_.node(old.node);
  if (!mapped_[old.node]) {
    if (n.outputs.size() != 1)
      throw Error("rewriter: replacing one port of the multi-output " + node_label(n) + " needs all its ports");
    new_values_[old.node] = {nv};
    mapped_[old.node] = true;
    return;
  }
  new_values_[old.node].at(old.port) = nv;
}

Graph Rewriter::finish() {
  for (const Node& n : src_.nodes())
    if (std::holds_alternative<ops::Input>(n.op) || std::holds_alternative<ops::Param>(n.op)) copy(n.id);
  std::vector<Value> outs;
  for (Value v : src_.outputs()) outs.push_back(map(v));
  out_.set_outputs(std::move(outs), src_.output_names());
  for (const auto& [name, t] : src_.weights()) out_.set_weight(name, t);
  return std::move(out_);
}

}  // namespace rlx::passes
