#include "passes/uses.h"

namespace rlx::passes {

Uses::Uses(const Graph& g) : g_(g), uses_(g.size()), output_(g.size()) {
  for (const Node& n : g.nodes()) {
    uses_[n.id].resize(n.outputs.size());
    output_[n.id].assign(n.outputs.size(), false);
  }
  for (const Node& n : g.nodes())
    for (size_t i = 0; i < n.inputs.size(); ++i) uses_[n.inputs[i].node][n.inputs[i].port].push_back(Use{n.id, i});
  for (Value v : g.outputs()) output_[v.node][v.port] = true;
}

const std::vector<Use>& Uses::of(Value v) const { return uses_.at(v.node).at(v.port); }
bool Uses::is_output(Value v) const { return output_.at(v.node).at(v.port); }

bool infer_ok(const Op& op, const Graph& g, const std::vector<Value>& operands, const Shape* expect) {
  std::vector<Shape> shapes;
  for (Value v : operands) shapes.push_back(g.shape(v));
  try {
    auto out = infer_op(op, shapes);
    return !expect || (out.size() == 1 && out[0] == *expect);
  } catch (const Error&) {
    return false;
  }
}

}  // namespace rlx::passes
