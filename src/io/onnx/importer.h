#pragma once
// The ONNX importer's internals: values during import, the per-node context handed to op
// converters, and the converter registry (one ops_<family>.cpp per family of ONNX ops).
#include <onnx/onnx_pb.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rlx/graph.h"
#include "rlx/onnx.h"

namespace rlx::onnx_io {

// One ONNX value during import. `value` is its node in the graph being built (created on
// demand for constants); `konst` its contents when known at import time; `dims` the entries
// of a 1-d int64 shape value whose entries are known as Dims (possibly symbolic).
struct Val {
  std::optional<Value> value;
  std::optional<Tensor> konst;
  std::optional<std::vector<Dim>> dims;
  Shape shape;
  // A graph input's value given in OnnxImportOptions::known_inputs: used only where a value is
  // required at import time (never folded into other uses).
  std::optional<Tensor> hint;

  static Val of(Value v, Shape s) {
    Val r;
    r.value = v;
    r.shape = std::move(s);
    return r;
  }
  static Val known(Tensor t) {
    Val r;
    r.shape = t.shape_info();
    r.konst = std::move(t);
    return r;
  }
};

class Importer;

// What a converter sees of one node.
class NodeCtx {
 public:
  NodeCtx(Importer& im, const onnx::NodeProto& node, int64_t opset, std::vector<Val*> inputs);

  const onnx::NodeProto& node() const { return node_; }
  int64_t opset() const { return opset_; }
  Importer& importer() const { return im_; }
  Graph& g() const;

  size_t num_inputs() const { return in_.size(); }
  // Input i is given (not omitted). Asking about an input (present, in, value, konst, ...)
  // marks it as used: after conversion, a given input no converter asked about is an error
  // (an extra input is never silently dropped).
  bool present(size_t i) const;
  const Val& in(size_t i) const;                  // required input i
  Value value(size_t i) const;                    // required input i, in the graph
  const Shape& shape(size_t i) const { return in(i).shape; }
  // Input i must be known at import time; `what` names it in the error.
  const Tensor& konst(size_t i, const std::string& what) const;
  std::vector<int64_t> ints_input(size_t i, const std::string& what) const;
  std::vector<Dim> dims_input(size_t i, const std::string& what) const;  // a shape operand
  int64_t scalar_input(size_t i, const std::string& what) const;  // a known one-element integer/bool
  size_t num_outputs() const { return static_cast<size_t>(node_.output_size()); }

  // Attributes.
  bool has(const std::string& name) const { return attr(name) != nullptr; }
  int64_t i(const std::string& name, int64_t def) const;
  double f(const std::string& name, double def) const;
  std::string s(const std::string& name, const std::string& def) const;
  std::vector<int64_t> ints(const std::string& name, std::vector<int64_t> def = {}) const;
  std::vector<float> floats(const std::string& name) const;
  const onnx::AttributeProto* attr(const std::string& name) const;
  Tensor tensor_attr(const std::string& name) const;
  // Rejects attributes not listed (an attribute is never silently ignored). Listed
  // attributes count as consumed; so does every attribute a converter reads.
  void allow_only(std::initializer_list<const char*> names) const;
  // After conversion: rlx::Error naming the first given input or attribute the converter
  // neither read nor declared (allow_only).
  void check_consumed() const;
  // Marks input i / every attribute as consumed (for inputs that do not change an inference
  // result, and converters that validate the NodeProto's attributes themselves).
  void consume_input(size_t i) const;
  void consume_attributes() const;

  // rlx::Error "ONNX node 'name' (Op, opset N): msg".
  [[noreturn]] void fail(const std::string& msg) const;
  std::string where() const;

  // Helpers converters share.
  Val out(Value v) const;                           // wraps a graph value
  Value scalar_like(double v, DType dt) const;      // 0-d constant
  Value cast_to(Value v, DType dt) const;           // no-op when already dt

 private:
  Importer& im_;
  const onnx::NodeProto& node_;
  int64_t opset_;
  std::vector<Val*> in_;
  mutable std::vector<bool> in_used_;    // per input: asked about by the converter
  mutable std::vector<bool> attr_used_;  // per attribute (node order): read or declared
};

using Converter = std::function<std::vector<Val>(const NodeCtx&)>;
// op_type -> converter. Filled by the ops_<family>.cpp files' register_* functions.
using ConverterTable = std::map<std::string, Converter>;
void register_elementwise(ConverterTable& t);
void register_shape(ConverterTable& t);
void register_reduce(ConverterTable& t);
void register_nn(ConverterTable& t);
void register_indexing(ConverterTable& t);
void register_control(ConverterTable& t);
void register_rnn(ConverterTable& t);
void register_resize(ConverterTable& t);
void register_misc(ConverterTable& t);
void register_integer(ConverterTable& t);
const ConverterTable& converters();

// Builds one rlx Graph from one GraphProto (the top-level graph or a subgraph body).
class Importer {
 public:
  // `parent`: the enclosing scope of a subgraph body; `same_graph`: the body is inlined into
  // the parent's graph (else it builds its own Graph and sees only the parent's known values).
  Importer(Graph& g, const OnnxImportOptions& opts, std::map<std::string, int64_t> opsets, std::string base_dir,
           Importer* parent = nullptr, bool same_graph = false);
  // Nesting depth of this body (0 = the model's graph).
  int depth() const { return depth_; }

  // Top level: inputs, initializers, nodes, outputs; compacts the graph at the end.
  void import_main(const onnx::GraphProto& gp);
  // Inlines `body` into this importer's graph: its formal inputs bound to `args` (in order),
  // its outer references resolved through this scope. Returns its outputs.
  std::vector<Val> inline_body(const onnx::GraphProto& body, const std::vector<Val>& args, const std::string& where);
  // Builds `body` as a separate Graph whose Input nodes are the body's formal inputs
  // (`formal` shapes) followed by `captures` (outer values the body uses).
  std::shared_ptr<Graph> build_subgraph(const onnx::GraphProto& body, const std::vector<Shape>& formal,
                                        const std::vector<std::string>& captures, const std::string& where);
  // Outer names a body reads (not defined inside it), in first-use order, nested bodies included.
  static std::vector<std::string> free_names(const onnx::GraphProto& body);

  Graph& graph() { return g_; }
  bool top_level() const { return parent_ == nullptr; }
  // Initializer values read before (by name): used instead of reading the TensorProtos again.
  void use_parsed_initializers(const std::map<std::string, Tensor>* parsed) { parsed_initializers_ = parsed; }
  const OnnxImportOptions& options() const { return opts_; }
  // The model's top-level graph (nullptr before import_main): for messages that name the graph
  // inputs a value is computed from.
  const onnx::GraphProto* root_graph() const { return root_; }
  Val* lookup(const std::string& name);  // nullptr when undefined in every enclosing scope
  Value materialize(Val& v);
  // Defines a name of this scope; rlx::Error when the name is already defined here or
  // names a value of an enclosing scope (ONNX graphs are in static single assignment form).
  Val& define(const std::string& name, Val v);

 private:
  void import_node(const onnx::NodeProto& node);
  void add_initializer(const onnx::TensorProto& t);
  // Inputs, outputs and attributes of a node checked against its op's definition at this
  // opset (counts, attribute names, kinds and opset validity) before conversion.
  void validate_node(const onnx::NodeProto& node, int64_t opset) const;
  // Body-level checks shared by the model's graph and subgraph bodies (initializer names,
  // sparse initializers).
  void check_body(const onnx::GraphProto& gp, const std::string& where) const;
  // Computes `outs` (values of the nodes added since first_new) on the CPU when every operand
  // from before first_new is a constant, a weight or listed in `known`; nullopt otherwise.
  std::optional<std::vector<Tensor>> try_fold(NodeId first_new, const std::vector<Value>& outs,
                                              const std::map<Value, Tensor>& known) const;
  // Sets Val::hint on small integer outputs computed from known input values.
  void propagate_hints(NodeId first_new, const std::vector<Val*>& ins, std::vector<Val>& outs) const;
  Shape input_shape(const onnx::ValueInfoProto& vi);
  void compact();

  Graph& g_;
  const OnnxImportOptions& opts_;
  std::map<std::string, int64_t> opsets_;
  std::string base_dir_;
  Importer* parent_;
  bool same_graph_;
  int depth_ = 0;
  std::map<std::string, Val> vals_;
  std::set<std::string> defined_;  // names defined by this scope (not lookups cached from outer ones)
  std::map<std::string, Tensor> initializers_;  // top level: materialized as Params when large
  const std::map<std::string, Tensor>* parsed_initializers_ = nullptr;
  const onnx::GraphProto* root_ = nullptr;
};

// The ai.onnx opsets of a model (validated with its IR version); `what` names it in errors.
std::map<std::string, int64_t> model_opsets(const onnx::ModelProto& m, const std::string& what);
// Imports a parsed model. `parsed_initializers` (may be null): initializer values read before.
Graph import_model(const onnx::ModelProto& m, const std::string& base_dir, const OnnxImportOptions& options,
                   const std::map<std::string, Tensor>* parsed_initializers = nullptr);
// The symbol of an unnamed input dim.
std::string unnamed_dim_symbol(const std::string& input, int axis);

// The most elements an import-time constant (folded or built) may have.
inline constexpr int64_t kMaxFoldElements = int64_t{1} << 24;

// Helpers shared by converters.
std::vector<int64_t> tensor_ints(const Tensor& t);
std::vector<double> tensor_doubles(const Tensor& t);
Tensor full_tensor(DType dt, const std::vector<int64_t>& shape, double value);
// A 1-d (0-d when `scalar`) int64 shape value from Dims: a known tensor when all are static,
// else a Val carrying the symbolic entries.
Val shape_val(const std::vector<Dim>& dims, bool scalar = false);

}  // namespace rlx::onnx_io
