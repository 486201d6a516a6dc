// Shape inference for the control-flow ops: If, While.
//
// A subgraph's Input nodes, in node order, receive the operands; their declared shapes must
// equal the operand shapes exactly (dtype and every dim, symbolic dims by name). Subgraph
// outputs are compared the same way.
#include "rlx/graph.h"
#include "rlx/ops.h"

namespace rlx {
namespace {

bool is_bool_scalar(const Shape& s) {
  return s.dtype == DType::Bool && (s.rank() == 0 || (s.rank() == 1 && s[0].is_static() && s[0].value == 1));
}

std::string shapes_str(std::span<const Shape> shapes) {
  std::string out = "(";
  for (size_t i = 0; i < shapes.size(); ++i) out += (i ? ", " : "") + shapes[i].str();
  return out + ")";
}

std::vector<Shape> output_shapes(const Graph& g) {
  std::vector<Shape> out;
  out.reserve(g.outputs().size());
  for (Value v : g.outputs()) out.push_back(g.shape(v));
  return out;
}

// Checks that `g`'s Input nodes take exactly `operands`.
void check_subgraph_inputs(const std::string& what, const Graph& g, std::span<const Shape> operands) {
  const std::vector<NodeId> ins = g.input_nodes();
  std::vector<Shape> declared;
  for (NodeId id : ins) declared.push_back(std::get<ops::Input>(g.node(id).op).shape);
  if (ins.size() != operands.size())
    throw Error(what + " has " + std::to_string(ins.size()) + " Input nodes " + shapes_str(declared) + " but receives " +
                std::to_string(operands.size()) + " operands " + shapes_str(operands));
  for (size_t i = 0; i < ins.size(); ++i) {
    if (declared[i] != operands[i])
      throw Error(what + " Input " + std::to_string(i) + " ('" + std::get<ops::Input>(g.node(ins[i]).op).name +
                  "', node " + std::to_string(ins[i]) + ") is declared " + declared[i].str() +
                  " but receives " + operands[i].str());
  }
}

}  // namespace

std::vector<Shape> ops::If::infer(std::span<const Shape> in) const {
  check(is_bool_scalar(in[0]), std::string("if: the condition must be a bool scalar (shape [] or [1]), got ") +
                                   in[0].str());
  check(then_branch != nullptr, "if: then_branch is null; both branches must be graphs");
  check(else_branch != nullptr, "if: else_branch is null; both branches must be graphs");
  const std::span<const Shape> operands = in.subspan(1);
  check_subgraph_inputs("if: then_branch", *then_branch, operands);
  check_subgraph_inputs("if: else_branch", *else_branch, operands);
  std::vector<Shape> then_out = output_shapes(*then_branch);
  std::vector<Shape> else_out = output_shapes(*else_branch);
  check(!then_out.empty(), "if: the branches have no outputs; call set_outputs on both branch graphs");
  if (then_out != else_out)
    throw Error("if: the branches' outputs differ: then_branch returns " + shapes_str(then_out) +
                ", else_branch returns " + shapes_str(else_out) + " (count, dtype and shape must agree)");
  return then_out;
}

std::vector<Shape> ops::While::infer(std::span<const Shape> in) const {
  check(cond != nullptr, "while: cond is null; it must be a graph carried -> bool scalar");
  check(body != nullptr, "while: body is null; it must be a graph carried -> carried");
  check(max_iterations >= 0,
        "while: max_iterations must be >= 0 (0 = no limit), got " + std::to_string(max_iterations));
  check_subgraph_inputs("while: cond", *cond, in);
  check_subgraph_inputs("while: body", *body, in);
  std::vector<Shape> cond_out = output_shapes(*cond);
  if (cond_out.size() != 1 || !is_bool_scalar(cond_out[0]))
    throw Error("while: cond must return exactly one bool scalar (shape [] or [1]), got " + shapes_str(cond_out));
  std::vector<Shape> body_out = output_shapes(*body);
  std::vector<Shape> carried(in.begin(), in.end());
  if (body_out != carried)
    throw Error("while: body returns " + shapes_str(body_out) + " but the carried values are " +
                shapes_str(carried) + " (count, dtype and shape must agree)");
  return carried;
}

}  // namespace rlx
