#pragma once
// Graph: nodes in topological order, each producing one or more typed values.
// The builder methods infer shapes as nodes are added and throw rlx::Error naming the
// node id and op when operands are invalid.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rlx/ops.h"

namespace rlx {

using NodeId = uint32_t;

// One value: output `port` of node `node`.
struct Value {
  NodeId node = 0;
  uint32_t port = 0;
  bool operator==(const Value&) const = default;
  auto operator<=>(const Value&) const = default;
};

struct Node {
  NodeId id = 0;
  Op op;
  std::vector<Value> inputs;
  std::vector<Shape> outputs;  // one Shape per output port
};

class Graph {
 public:
  // ---- structure ----
  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(NodeId id) const;
  size_t size() const { return nodes_.size(); }
  const Shape& shape(Value v) const;
  const std::vector<Value>& outputs() const { return outputs_; }
  const std::vector<std::string>& output_names() const { return output_names_; }
  void set_outputs(std::vector<Value> outs, std::vector<std::string> names = {});
  void add_output(Value v, std::string name = "");
  // Input / Param nodes in node order.
  std::vector<NodeId> input_nodes() const;
  std::vector<NodeId> param_nodes() const;

  // Appends a node; infers (and returns) its outputs. Throws rlx::Error naming the node.
  NodeId add_node(Op op, std::vector<Value> inputs);
  // Appends a node with given output shapes (verification re-checks them).
  NodeId add_node_with_shapes(Op op, std::vector<Value> inputs, std::vector<Shape> outputs);
  // Single-output convenience: add_node then Value{id, 0}.
  Value apply(Op op, std::vector<Value> inputs);
  std::vector<Value> apply_multi(Op op, std::vector<Value> inputs);

  // Checks every node (operand ids, arity, shapes re-inferred, duplicate input/param names,
  // outputs). Returns every problem, each naming the node id and op; empty = valid.
  std::vector<std::string> verify_report() const;
  void verify() const;  // throws rlx::Error listing every problem

  std::string to_text() const;  // readable printer

  // Weights carried with the graph (e.g. loaded from a JSON side file). A compiled graph
  // uses them for its Param nodes unless set_param overrides them.
  void set_weight(const std::string& param_name, Tensor t);
  const std::map<std::string, Tensor>& weights() const { return weights_; }

  // ---- builder: leaves ----
  Value input(const std::string& name, Shape shape);
  Value param(const std::string& name, Shape shape);
  Value constant(Tensor t);
  Value scalar(double v, DType dtype = DType::F32);

  // ---- builder: elementwise ----
  Value binary(BinaryKind k, Value a, Value b);
  Value add(Value a, Value b) { return binary(BinaryKind::Add, a, b); }
  Value sub(Value a, Value b) { return binary(BinaryKind::Sub, a, b); }
  Value mul(Value a, Value b) { return binary(BinaryKind::Mul, a, b); }
  Value div(Value a, Value b) { return binary(BinaryKind::Div, a, b); }
  Value max(Value a, Value b) { return binary(BinaryKind::Max, a, b); }
  Value min(Value a, Value b) { return binary(BinaryKind::Min, a, b); }
  Value pow(Value a, Value b) { return binary(BinaryKind::Pow, a, b); }
  Value compare(CompareKind k, Value a, Value b);
  Value where(Value cond, Value a, Value b);
  Value act(ActKind k, Value x);
  Value gelu(Value x) { return act(ActKind::Gelu, x); }
  Value silu(Value x) { return act(ActKind::Silu, x); }
  Value relu(Value x) { return act(ActKind::Relu, x); }
  Value sigmoid(Value x) { return act(ActKind::Sigmoid, x); }
  Value tanh(Value x) { return act(ActKind::Tanh, x); }
  Value exp(Value x) { return act(ActKind::Exp, x); }
  Value cast(Value x, DType to);

  // ---- builder: shape ----
  Value reshape(Value x, std::vector<Dim> shape);
  Value transpose(Value x, std::vector<int64_t> perm);
  Value narrow(Value x, int64_t axis, int64_t start, int64_t len);
  Value concat(std::vector<Value> xs, int64_t axis);
  Value expand(Value x, std::vector<Dim> shape);
  Value reverse(Value x, std::vector<int64_t> axes);
  Value stop_gradient(Value x);

  // ---- builder: indexing ----
  Value gather(Value data, Value indices, int64_t axis);
  Value scatter_add(Value data, Value indices, Value updates, int64_t axis);
  // ops::CacheWrite: cache with rows written at row `positions` of axis 1.
  Value cache_write(Value cache, Value rows, Value positions);
  Value argmax(Value x, int64_t axis, bool keep_dims = false);
  Value argmin(Value x, int64_t axis, bool keep_dims = false);
  std::pair<Value, Value> topk(Value x, int64_t k, int64_t axis = -1, bool largest = true);
  Value cumsum(Value x, int64_t axis, bool exclusive = false, bool reverse = false);

  // ---- builder: contraction / reduction ----
  Value matmul(Value a, Value b);
  Value dot_general(Value a, Value b, ops::DotGeneral dims);
  Value reduce(ReduceKind k, Value x, std::vector<int64_t> axes, bool keep_dims = false);
  Value sum(Value x, std::vector<int64_t> axes, bool keep_dims = false) { return reduce(ReduceKind::Sum, x, std::move(axes), keep_dims); }
  Value mean(Value x, std::vector<int64_t> axes, bool keep_dims = false) { return reduce(ReduceKind::Mean, x, std::move(axes), keep_dims); }
  Value softmax(Value x, int64_t axis = -1);
  Value log_softmax(Value x, int64_t axis = -1);

  // ---- builder: norms ----
  Value layer_norm(Value x, Value gamma, std::optional<Value> beta, double eps = 1e-5, int64_t axis = -1);
  Value rms_norm(Value x, Value gamma, std::optional<Value> beta = std::nullopt, double eps = 1e-6, int64_t axis = -1);

  // ---- builder: transformer ----
  Value rope(Value x, Value cos, Value sin, int64_t head_dim, int64_t n_rot, RopeStyle style = RopeStyle::NeoX);
  Value attention(Value q, Value k, Value v, std::optional<Value> mask, ops::Attention attrs);

  // Maps a Value to text "%12" or "%12.1".
  static std::string value_str(Value v);

 private:
  std::vector<Node> nodes_;
  std::vector<Value> outputs_;
  std::vector<std::string> output_names_;
  std::map<std::string, Tensor> weights_;
  // Input / Param node by name (the first of that name), kept as nodes are added, so name checks
  // and set_weight do not scan the nodes (graphs with many thousands of weights).
  std::map<std::string, NodeId> input_ids_, param_ids_;
  void index_leaf(const Node& n);
};

// Text name of a node for error messages: "node 12 (matmul)".
std::string node_label(const Node& n);

}  // namespace rlx
