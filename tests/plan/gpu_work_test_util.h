#pragma once
// For the tests of the shared GPU step descriptions and checks (plan/*_work.h, plan/gpu_claims.h).
#include <string>
#include <vector>

#include "rlx/error.h"
#include "rlx/graph.h"

namespace rlx::plantest {

// The message of the rlx::Error that f() throws, "" when it throws none.
template <class F>
std::string thrown(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The refusal of claim check f(&why): "" when it accepts.
template <class F>
std::string refusal(F&& f) {
  std::string why;
  return f(&why) ? "" : why;
}

// Appends a node of `op` over fresh Input nodes of `inputs`, with the given output shapes (not
// inferred, so a claim check can be shown a node that shape inference would refuse).
inline NodeId add_on_inputs(Graph& g, Op op, const std::vector<Shape>& inputs, std::vector<Shape> outputs) {
  std::vector<Value> in;
  for (const Shape& s : inputs) in.push_back(g.input("in" + std::to_string(g.size()), s));
  return g.add_node_with_shapes(std::move(op), std::move(in), std::move(outputs));
}

}  // namespace rlx::plantest
