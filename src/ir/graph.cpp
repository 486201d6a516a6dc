#include "rlx/graph.h"

#include "ir/text.h"

#include <set>
#include <sstream>

namespace rlx {

namespace {
// "node 3 (matmul)"; leaves also name themselves: "node 0 (input 'x')".
std::string op_label(NodeId id, const Op& op) {
  std::string name;
  if (const auto* in = std::get_if<ops::Input>(&op)) name = in->name;
  else if (const auto* pa = std::get_if<ops::Param>(&op)) name = pa->name;
  else return "node " + std::to_string(id) + " (" + op_name(op) + ")";
  return "node " + std::to_string(id) + " (" + op_name(op) + " '" + text::printable(name) + "')";
}

// The ops that run on the storage-only dtypes (rlx/dtype.h): leaves, Cast, and data movement
// (byte copies by element size; Where selects, control flow passes values through).
bool runs_storage_only(const Op& op) {
  return std::visit(
      []<class T>(const T&) {
        return std::is_same_v<T, ops::Input> || std::is_same_v<T, ops::Param> || std::is_same_v<T, ops::Constant> ||
               std::is_same_v<T, ops::Cast> || std::is_same_v<T, ops::Reshape> || std::is_same_v<T, ops::Transpose> ||
               std::is_same_v<T, ops::Narrow> || std::is_same_v<T, ops::Concat> || std::is_same_v<T, ops::Expand> ||
               std::is_same_v<T, ops::Reverse> || std::is_same_v<T, ops::StopGradient> ||
               std::is_same_v<T, ops::Gather> || std::is_same_v<T, ops::Where> || std::is_same_v<T, ops::If> ||
               std::is_same_v<T, ops::While>;
      },
      op);
}

// Shapes named `what` 0, 1, ...: rlx::Error when one is storage-only and `op` does not run on it.
void check_storage_only(const Op& op, const std::vector<Shape>& shapes, const char* what) {
  if (runs_storage_only(op)) return;
  for (size_t i = 0; i < shapes.size(); ++i)
    if (is_storage_only(shapes[i].dtype))
      throw Error(std::string(what) + " " + std::to_string(i) + " is " + shapes[i].str() + ": " +
                  dtype_name(shapes[i].dtype) +
                  " is a storage-only dtype, which rlx only casts and moves (reshape, transpose, narrow, concat, "
                  "expand, reverse, gather, where); cast it to a compute dtype (f32, f16, i32, ...) first");
}
}  // namespace

std::string node_label(const Node& n) { return op_label(n.id, n.op); }

std::string Graph::value_str(Value v) {
  return "%" + std::to_string(v.node) + (v.port ? "." + std::to_string(v.port) : "");
}

const Node& Graph::node(NodeId id) const {
  if (id >= nodes_.size())
    throw Error("graph has no node " + std::to_string(id) + " (it has " + std::to_string(nodes_.size()) + " nodes)");
  return nodes_[id];
}

const Shape& Graph::shape(Value v) const {
  const Node& n = node(v.node);
  if (v.port >= n.outputs.size())
    throw Error(node_label(n) + " has no output " + std::to_string(v.port) + " (it has " +
                std::to_string(n.outputs.size()) + ")");
  return n.outputs[v.port];
}

void Graph::set_outputs(std::vector<Value> outs, std::vector<std::string> names) {
  for (Value v : outs) shape(v);  // validates
  if (!names.empty() && names.size() != outs.size())
    throw Error("set_outputs: " + std::to_string(names.size()) + " names for " + std::to_string(outs.size()) + " outputs");
  outputs_ = std::move(outs);
  output_names_ = std::move(names);
  if (output_names_.empty())
    for (size_t i = 0; i < outputs_.size(); ++i) output_names_.push_back("output" + std::to_string(i));
}

void Graph::add_output(Value v, std::string name) {
  shape(v);
  outputs_.push_back(v);
  output_names_.push_back(name.empty() ? "output" + std::to_string(outputs_.size() - 1) : std::move(name));
}

std::vector<NodeId> Graph::input_nodes() const {
  std::vector<NodeId> out;
  for (const Node& n : nodes_)
    if (std::holds_alternative<ops::Input>(n.op)) out.push_back(n.id);
  return out;
}
std::vector<NodeId> Graph::param_nodes() const {
  std::vector<NodeId> out;
  for (const Node& n : nodes_)
    if (std::holds_alternative<ops::Param>(n.op)) out.push_back(n.id);
  return out;
}

NodeId Graph::add_node(Op op, std::vector<Value> inputs) {
  const NodeId id = static_cast<NodeId>(nodes_.size());
  std::vector<Shape> in_shapes;
  in_shapes.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value v = inputs[i];
    if (v.node >= id)
      throw Error(op_label(id, op) + ": input " + std::to_string(i) +
                  " refers to " + value_str(v) + " which does not exist yet (graphs are built in topological order)");
    in_shapes.push_back(shape(v));
  }
  // Leaf names must be unique per kind.
  if (auto* in = std::get_if<ops::Input>(&op)) {
    if (const auto it = input_ids_.find(in->name); it != input_ids_.end())
      throw Error("node " + std::to_string(id) + " (input): duplicate input name '" + in->name + "' (also node " +
                  std::to_string(it->second) + ")");
  }
  if (auto* pa = std::get_if<ops::Param>(&op)) {
    if (const auto it = param_ids_.find(pa->name); it != param_ids_.end())
      throw Error("node " + std::to_string(id) + " (param): duplicate param name '" + pa->name + "' (also node " +
                  std::to_string(it->second) + ")");
  }
  std::vector<Shape> outs;
  try {
    check_storage_only(op, in_shapes, "input");
    outs = infer_op(op, in_shapes);
    for (size_t i = 0; i < outs.size(); ++i) outs[i].check_size("output " + std::to_string(i));
    check_storage_only(op, outs, "output");
  } catch (const Error& e) {
    std::string shapes;
    for (size_t i = 0; i < in_shapes.size(); ++i) shapes += (i ? ", " : "") + in_shapes[i].str();
    throw Error(op_label(id, op) + " with inputs (" + shapes + "): " + e.what());
  }
  nodes_.push_back(Node{id, std::move(op), std::move(inputs), std::move(outs)});
  index_leaf(nodes_.back());
  return id;
}

void Graph::index_leaf(const Node& n) {
  if (const auto* in = std::get_if<ops::Input>(&n.op)) input_ids_.emplace(in->name, n.id);
  if (const auto* pa = std::get_if<ops::Param>(&n.op)) param_ids_.emplace(pa->name, n.id);
}

NodeId Graph::add_node_with_shapes(Op op, std::vector<Value> inputs, std::vector<Shape> outputs) {
  const NodeId id = static_cast<NodeId>(nodes_.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].node >= id)
      throw Error(op_label(id, op) + ": input " + std::to_string(i) + " refers to " +
                  value_str(inputs[i]) + " which does not exist yet");
  nodes_.push_back(Node{id, std::move(op), std::move(inputs), std::move(outputs)});
  index_leaf(nodes_.back());
  return id;
}

Value Graph::apply(Op op, std::vector<Value> inputs) {
  const NodeId id = add_node(std::move(op), std::move(inputs));
  if (nodes_[id].outputs.size() != 1)
    throw Error(node_label(nodes_[id]) + " has " + std::to_string(nodes_[id].outputs.size()) +
                " outputs; use apply_multi");
  return Value{id, 0};
}

std::vector<Value> Graph::apply_multi(Op op, std::vector<Value> inputs) {
  const NodeId id = add_node(std::move(op), std::move(inputs));
  std::vector<Value> out;
  for (uint32_t p = 0; p < nodes_[id].outputs.size(); ++p) out.push_back(Value{id, p});
  return out;
}

std::vector<std::string> Graph::verify_report() const {
  std::vector<std::string> problems;
  std::set<std::string> inputs, params;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    const std::string label = "node " + std::to_string(i) + " (" + op_name(n.op) + ")";
    if (n.id != i) problems.push_back(label + ": stored id " + std::to_string(n.id) + " does not match its position");
    bool inputs_ok = true;
    std::vector<Shape> in_shapes;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const Value v = n.inputs[k];
      if (v.node >= i) {
        problems.push_back(label + ": input " + std::to_string(k) + " refers to " + value_str(v) +
                           " which is not an earlier node");
        inputs_ok = false;
      } else if (v.port >= nodes_[v.node].outputs.size()) {
        problems.push_back(label + ": input " + std::to_string(k) + " refers to missing output " + value_str(v));
        inputs_ok = false;
      } else {
        in_shapes.push_back(nodes_[v.node].outputs[v.port]);
      }
    }
    if (auto* in = std::get_if<ops::Input>(&n.op))
      if (!inputs.insert(in->name).second) problems.push_back(label + ": duplicate input name '" + in->name + "'");
    if (auto* pa = std::get_if<ops::Param>(&n.op))
      if (!params.insert(pa->name).second) problems.push_back(label + ": duplicate param name '" + pa->name + "'");
    if (!inputs_ok) continue;
    try {
      std::vector<Shape> outs = infer_op(n.op, in_shapes);
      if (outs != n.outputs) {
        std::string got, want;
        for (auto& s : n.outputs) got += s.str() + " ";
        for (auto& s : outs) want += s.str() + " ";
        problems.push_back(label + ": stored output shapes " + got + "differ from inferred " + want);
      }
    } catch (const Error& e) {
      problems.push_back(label + ": " + e.what());
    }
  }
  if (outputs_.empty()) problems.push_back("graph has no outputs (call set_outputs / add_output)");
  for (size_t k = 0; k < outputs_.size(); ++k) {
    const Value v = outputs_[k];
    if (v.node >= nodes_.size() || v.port >= nodes_[v.node].outputs.size())
      problems.push_back("graph output " + std::to_string(k) + " refers to missing value " + value_str(v));
  }
  for (const auto& [name, t] : weights_) {
    if (!params.count(name)) problems.push_back("weight '" + name + "' has no param node of that name");
  }
  return problems;
}

void Graph::verify() const {
  auto problems = verify_report();
  if (problems.empty()) return;
  std::string msg = "invalid graph (" + std::to_string(problems.size()) + " problem" +
                    (problems.size() > 1 ? "s" : "") + "):";
  for (auto& p : problems) msg += "\n  " + p;
  throw Error(msg);
}

std::string Graph::to_text() const {
  std::ostringstream os;
  for (const Node& n : nodes_) {
    os << "%" << n.id << " = " << op_name(n.op) << "(";
    for (size_t k = 0; k < n.inputs.size(); ++k) os << (k ? ", " : "") << value_str(n.inputs[k]);
    os << ")";
    std::string attrs = op_attrs_str(n.op);
    if (!attrs.empty()) os << " {" << attrs << "}";
    os << " -> ";
    for (size_t k = 0; k < n.outputs.size(); ++k) os << (k ? ", " : "") << n.outputs[k].str();
    os << "\n";
  }
  os << "outputs:";
  for (size_t k = 0; k < outputs_.size(); ++k)
    os << " " << (k < output_names_.size() ? output_names_[k] : "?") << "=" << value_str(outputs_[k]);
  os << "\n";
  return os.str();
}

void Graph::set_weight(const std::string& param_name, Tensor t) {
  const auto it = param_ids_.find(param_name);
  if (it == param_ids_.end()) throw Error("set_weight: the graph has no param named '" + param_name + "'");
  const auto& pa = std::get<ops::Param>(nodes_[it->second].op);
  if (!pa.shape.is_static() || pa.shape.dtype != t.dtype() || pa.shape.concrete() != t.shape())
    throw Error("set_weight('" + param_name + "'): tensor " + t.shape_info().str() + " does not match param " +
                pa.shape.str());
  weights_[param_name] = std::move(t);
}

// ---- builder ---------------------------------------------------------------
Value Graph::input(const std::string& name, Shape shape) { return apply(ops::Input{name, std::move(shape)}, {}); }
Value Graph::param(const std::string& name, Shape shape) { return apply(ops::Param{name, std::move(shape)}, {}); }
Value Graph::constant(Tensor t) { return apply(ops::Constant{std::move(t)}, {}); }
Value Graph::scalar(double v, DType dtype) {
  return constant(Tensor::f64({}, std::span<const double>(&v, 1)).cast(dtype));
}
Value Graph::binary(BinaryKind k, Value a, Value b) { return apply(ops::Binary{k}, {a, b}); }
Value Graph::compare(CompareKind k, Value a, Value b) { return apply(ops::Compare{k}, {a, b}); }
Value Graph::where(Value c, Value a, Value b) { return apply(ops::Where{}, {c, a, b}); }
Value Graph::act(ActKind k, Value x) { return apply(ops::Activation{k}, {x}); }
Value Graph::cast(Value x, DType to) { return apply(ops::Cast{to}, {x}); }
Value Graph::reshape(Value x, std::vector<Dim> s) { return apply(ops::Reshape{std::move(s)}, {x}); }
Value Graph::transpose(Value x, std::vector<int64_t> perm) { return apply(ops::Transpose{std::move(perm)}, {x}); }
Value Graph::narrow(Value x, int64_t axis, int64_t start, int64_t len) {
  return apply(ops::Narrow{axis, start, len}, {x});
}
Value Graph::concat(std::vector<Value> xs, int64_t axis) { return apply(ops::Concat{axis}, std::move(xs)); }
Value Graph::expand(Value x, std::vector<Dim> s) { return apply(ops::Expand{std::move(s)}, {x}); }
Value Graph::reverse(Value x, std::vector<int64_t> axes) { return apply(ops::Reverse{std::move(axes)}, {x}); }
Value Graph::stop_gradient(Value x) { return apply(ops::StopGradient{}, {x}); }
Value Graph::gather(Value d, Value i, int64_t axis) { return apply(ops::Gather{axis}, {d, i}); }
Value Graph::scatter_add(Value d, Value i, Value u, int64_t axis) { return apply(ops::ScatterAdd{axis}, {d, i, u}); }
Value Graph::cache_write(Value cache, Value rows, Value positions) { return apply(ops::CacheWrite{}, {cache, rows, positions}); }
Value Graph::argmax(Value x, int64_t axis, bool keep) { return apply(ops::ArgMax{axis, keep, false}, {x}); }
Value Graph::argmin(Value x, int64_t axis, bool keep) { return apply(ops::ArgMin{axis, keep, false}, {x}); }
std::pair<Value, Value> Graph::topk(Value x, int64_t k, int64_t axis, bool largest) {
  auto v = apply_multi(ops::TopK{k, axis, largest}, {x});
  return {v.at(0), v.at(1)};
}
Value Graph::cumsum(Value x, int64_t axis, bool exclusive, bool reverse) {
  return apply(ops::Cumsum{axis, exclusive, reverse}, {x});
}
Value Graph::matmul(Value a, Value b) { return apply(ops::MatMul{}, {a, b}); }
Value Graph::dot_general(Value a, Value b, ops::DotGeneral dims) { return apply(std::move(dims), {a, b}); }
Value Graph::reduce(ReduceKind k, Value x, std::vector<int64_t> axes, bool keep) {
  return apply(ops::Reduce{k, std::move(axes), keep}, {x});
}
Value Graph::softmax(Value x, int64_t axis) { return apply(ops::Softmax{axis}, {x}); }
Value Graph::log_softmax(Value x, int64_t axis) { return apply(ops::LogSoftmax{axis}, {x}); }
Value Graph::layer_norm(Value x, Value gamma, std::optional<Value> beta, double eps, int64_t axis) {
  std::vector<Value> in{x, gamma};
  if (beta) in.push_back(*beta);
  return apply(ops::LayerNorm{axis, eps}, std::move(in));
}
Value Graph::rms_norm(Value x, Value gamma, std::optional<Value> beta, double eps, int64_t axis) {
  std::vector<Value> in{x, gamma};
  if (beta) in.push_back(*beta);
  return apply(ops::RmsNorm{axis, eps}, std::move(in));
}
Value Graph::rope(Value x, Value cos, Value sin, int64_t head_dim, int64_t n_rot, RopeStyle style) {
  return apply(ops::Rope{head_dim, n_rot, style}, {x, cos, sin});
}
Value Graph::attention(Value q, Value k, Value v, std::optional<Value> mask, ops::Attention attrs) {
  std::vector<Value> in{q, k, v};
  if (mask) in.push_back(*mask);
  return apply(std::move(attrs), std::move(in));
}

}  // namespace rlx
