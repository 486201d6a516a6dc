// The ONNX importer: scopes of named values, node dispatch to the converters, import-time
// folding of nodes whose operands are all known, subgraph bodies, and the final compaction.
#include "io/onnx/importer.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <iterator>
#include <limits>
#include <queue>
#include <set>
#include <unordered_map>

#include "io/file_access.h"
#include "io/onnx/proto.h"
#include "rlx/limits.h"
#include "rlx/session.h"

namespace rlx::onnx_io {
namespace {

// Ops whose results must not be computed at import time even when every operand is known.
const std::set<std::string> kNeverFold = {"RandomNormal", "RandomUniform", "RandomNormalLike",
                                          "RandomUniformLike", "Multinomial", "Bernoulli"};

bool is_default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

std::string node_where(const onnx::NodeProto& n, int64_t opset) {
  std::string s = "ONNX node '" +
                  io::printable(n.name().empty() ? (n.output_size() ? n.output(0) : std::string("?")) : n.name()) +
                  "' (" + io::printable((is_default_domain(n.domain()) ? "" : n.domain() + ":") + n.op_type());
  if (opset > 0) s += ", opset " + std::to_string(opset);
  return s + ")";
}

// Attributes whose validity depends on the opset: valid in [since, until) (until 0 = still
// valid). Mostly attributes that later opsets turned into inputs (ReduceSum's axes at 13,
// the other reductions' at 18, Squeeze/Unsqueeze/Split at 13, Reshape's shape at 5, ...):
// one given at an opset where it does not exist would be ignored by the converter, which
// reads the input instead, so it is rejected before conversion.
struct AttrSpan {
  const char* op;
  const char* attr;
  int64_t since;
  int64_t until;
};
constexpr AttrSpan kAttrSpans[] = {
    {"ReduceSum", "axes", 1, 13},
    {"ReduceSum", "noop_with_empty_axes", 13, 0},
    {"ReduceMean", "axes", 1, 18},
    {"ReduceMean", "noop_with_empty_axes", 18, 0},
    {"ReduceMax", "axes", 1, 18},
    {"ReduceMax", "noop_with_empty_axes", 18, 0},
    {"ReduceMin", "axes", 1, 18},
    {"ReduceMin", "noop_with_empty_axes", 18, 0},
    {"ReduceProd", "axes", 1, 18},
    {"ReduceProd", "noop_with_empty_axes", 18, 0},
    {"ReduceL1", "axes", 1, 18},
    {"ReduceL1", "noop_with_empty_axes", 18, 0},
    {"ReduceL2", "axes", 1, 18},
    {"ReduceL2", "noop_with_empty_axes", 18, 0},
    {"ReduceLogSum", "axes", 1, 18},
    {"ReduceLogSum", "noop_with_empty_axes", 18, 0},
    {"ReduceLogSumExp", "axes", 1, 18},
    {"ReduceLogSumExp", "noop_with_empty_axes", 18, 0},
    {"ReduceSumSquare", "axes", 1, 18},
    {"ReduceSumSquare", "noop_with_empty_axes", 18, 0},
    {"Squeeze", "axes", 1, 13},
    {"Unsqueeze", "axes", 1, 13},
    {"Split", "split", 1, 13},
    {"Split", "num_outputs", 18, 0},
    {"Reshape", "shape", 1, 5},
    {"Reshape", "allowzero", 14, 0},
    {"Pad", "pads", 2, 11},
    {"Pad", "paddings", 1, 2},
    {"Pad", "value", 1, 11},
    {"Slice", "starts", 1, 10},
    {"Slice", "ends", 1, 10},
    {"Slice", "axes", 1, 10},
    {"TopK", "k", 1, 10},
    {"TopK", "largest", 11, 0},
    {"TopK", "sorted", 11, 0},
    {"Clip", "min", 1, 11},
    {"Clip", "max", 1, 11},
    {"Dropout", "ratio", 1, 12},
    {"Dropout", "is_test", 1, 7},
    {"Dropout", "seed", 12, 0},
    {"Upsample", "scales", 1, 9},
    {"Resize", "coordinate_transformation_mode", 11, 0},
    {"Resize", "cubic_coeff_a", 11, 0},
    {"Resize", "exclude_outside", 11, 0},
    {"Resize", "extrapolation_value", 11, 0},
    {"Resize", "nearest_mode", 11, 0},
    {"Resize", "antialias", 18, 0},
    {"Resize", "axes", 18, 0},
    {"Resize", "keep_aspect_ratio_policy", 18, 0},
    {"BatchNormalization", "spatial", 1, 9},
    {"BatchNormalization", "is_test", 1, 7},
    {"BatchNormalization", "consumed_inputs", 1, 6},
    {"BatchNormalization", "training_mode", 14, 0},
    {"ArgMax", "select_last_index", 12, 0},
    {"ArgMin", "select_last_index", 12, 0},
    {"MaxPool", "storage_order", 8, 0},
    {"MaxPool", "dilations", 10, 0},
    {"MaxPool", "ceil_mode", 10, 0},
    {"AveragePool", "count_include_pad", 7, 0},
    {"AveragePool", "ceil_mode", 10, 0},
    {"AveragePool", "dilations", 19, 0},
    {"Shape", "start", 15, 0},
    {"Shape", "end", 15, 0},
    {"ScatterElements", "reduction", 16, 0},
    {"ScatterND", "reduction", 16, 0},
    {"GatherND", "batch_dims", 12, 0},
    {"DepthToSpace", "mode", 11, 0},
    {"Constant", "sparse_value", 11, 0},
    {"Constant", "value_float", 12, 0},
    {"Constant", "value_floats", 12, 0},
    {"Constant", "value_int", 12, 0},
    {"Constant", "value_ints", 12, 0},
    {"Constant", "value_string", 12, 0},
    {"Constant", "value_strings", 12, 0},
    {"Cast", "saturate", 19, 0},
    {"CastLike", "saturate", 19, 0},
    {"DFT", "axis", 1, 20},
    {"QuantizeLinear", "axis", 13, 0},
    {"QuantizeLinear", "saturate", 19, 0},
    {"QuantizeLinear", "block_size", 21, 0},
    {"QuantizeLinear", "output_dtype", 21, 0},
    {"DequantizeLinear", "block_size", 21, 0},
    {"DequantizeLinear", "axis", 13, 0},
    {"Gemm", "broadcast", 1, 7},
    {"Add", "broadcast", 1, 7},
    {"Add", "axis", 1, 7},
    {"Sub", "broadcast", 1, 7},
    {"Sub", "axis", 1, 7},
    {"Mul", "broadcast", 1, 7},
    {"Mul", "axis", 1, 7},
    {"Div", "broadcast", 1, 7},
    {"Div", "axis", 1, 7},
    {"Pow", "broadcast", 1, 7},
    {"Pow", "axis", 1, 7},
    {"RoiAlign", "coordinate_transformation_mode", 16, 0},
    {"GroupNormalization", "stash_type", 21, 0},
};

// The opset that introduced each op that is not in opset 1 (ops rlx converts): a node of
// such an op in a model of an older opset is not a valid ONNX node.
const std::map<std::string, int64_t> kOpSince = {
    {"Acos", 7}, {"Asin", 7}, {"Atan", 7}, {"Cos", 7}, {"Sin", 7}, {"Tan", 7},
    {"Acosh", 9}, {"Asinh", 9}, {"Atanh", 9}, {"Cosh", 9}, {"Sinh", 9},
    {"Expand", 8}, {"Scan", 8},
    {"Compress", 9}, {"ConstantOfShape", 9}, {"Erf", 9}, {"EyeLike", 9}, {"IsNaN", 9},
    {"MeanVarianceNormalization", 9}, {"NonZero", 9}, {"OneHot", 9}, {"Shrink", 9}, {"Sign", 9}, {"Where", 9},
    {"DequantizeLinear", 10}, {"QuantizeLinear", 10}, {"IsInf", 10}, {"Mod", 10}, {"Resize", 10},
    {"ThresholdedRelu", 10}, {"ConvInteger", 10}, {"MatMulInteger", 10}, {"QLinearConv", 10}, {"QLinearMatMul", 10},
    {"CumSum", 11}, {"DynamicQuantizeLinear", 11}, {"GatherElements", 11}, {"GatherND", 11}, {"Range", 11},
    {"Round", 11}, {"ScatterElements", 11}, {"ScatterND", 11},
    {"Celu", 12}, {"Einsum", 12}, {"GreaterOrEqual", 12}, {"LessOrEqual", 12}, {"NegativeLogLikelihoodLoss", 12},
    {"SoftmaxCrossEntropyLoss", 12},
    {"HardSwish", 14}, {"Trilu", 14},
    {"CastLike", 15},
    {"BlackmanWindow", 17}, {"DFT", 17}, {"HammingWindow", 17}, {"HannWindow", 17}, {"LayerNormalization", 17},
    {"CenterCropPad", 18}, {"GroupNormalization", 18}, {"Mish", 18},
    {"Gelu", 20},
    {"Attention", 23}, {"RMSNormalization", 23}, {"RotaryEmbedding", 23},
    {"Swish", 24},
};

// Inputs a converter may leave unread because they cannot change an inference result.
struct IgnorableInput {
  const char* op;
  size_t index;
};
constexpr IgnorableInput kIgnorableInputs[] = {
    {"Dropout", 1},  // ratio: only used in training mode, which the converter checks itself
};
// Ops whose converters check the node's attributes themselves (by position, not by name).
const std::set<std::string> kConverterChecksAttributes = {"Constant"};

std::string attr_kind_name(int kind) {
  using A = onnx::AttributeProto;
  switch (kind) {
    case A::FLOAT: return "FLOAT";
    case A::INT: return "INT";
    case A::STRING: return "STRING";
    case A::TENSOR: return "TENSOR";
    case A::GRAPH: return "GRAPH";
    case A::SPARSE_TENSOR: return "SPARSE_TENSOR";
    case A::TYPE_PROTO: return "TYPE_PROTO";
    case A::FLOATS: return "FLOATS";
    case A::INTS: return "INTS";
    case A::STRINGS: return "STRINGS";
    case A::TENSORS: return "TENSORS";
    case A::GRAPHS: return "GRAPHS";
    case A::SPARSE_TENSORS: return "SPARSE_TENSORS";
    case A::TYPE_PROTOS: return "TYPE_PROTOS";
    default: return "UNDEFINED";
  }
}

// The kinds of value an attribute carries (which fields are set), as AttributeType codes.
std::vector<int> attr_payload_kinds(const onnx::AttributeProto& a) {
  using A = onnx::AttributeProto;
  std::vector<int> k;
  if (a.has_f()) k.push_back(A::FLOAT);
  if (a.has_i()) k.push_back(A::INT);
  if (a.has_s()) k.push_back(A::STRING);
  if (a.has_t()) k.push_back(A::TENSOR);
  if (a.has_g()) k.push_back(A::GRAPH);
  if (a.has_sparse_tensor()) k.push_back(A::SPARSE_TENSOR);
  if (a.has_tp()) k.push_back(A::TYPE_PROTO);
  if (a.floats_size()) k.push_back(A::FLOATS);
  if (a.ints_size()) k.push_back(A::INTS);
  if (a.strings_size()) k.push_back(A::STRINGS);
  if (a.tensors_size()) k.push_back(A::TENSORS);
  if (a.graphs_size()) k.push_back(A::GRAPHS);
  if (a.sparse_tensors_size()) k.push_back(A::SPARSE_TENSORS);
  if (a.type_protos_size()) k.push_back(A::TYPE_PROTOS);
  return k;
}


// The nodes of a graph body in an order where each node follows the nodes that produce the
// values it reads (its inputs and the outer names its subgraph bodies read). A sorted body keeps
// its order; an unsorted one (some fp16 converters write them) is sorted, ties in file order.
// Names `defined(name)` says exist before the nodes (graph inputs, initializers, formal inputs)
// are never taken as produced by a node: redefining them is reported at import. A name nothing
// produces is left to the import of its reader, which reports it. A cycle is an rlx::Error that
// names its nodes.
std::vector<const onnx::NodeProto*> topological_nodes(const onnx::GraphProto& gp,
                                                      const std::function<bool(const std::string&)>& defined) {
  const int n = gp.node_size();
  std::vector<const onnx::NodeProto*> order;
  order.reserve(static_cast<size_t>(n));
  std::unordered_map<std::string, int> producer;
  for (int i = 0; i < n; ++i)
    for (const auto& o : gp.node(i).output())
      if (!o.empty() && !defined(o)) producer.emplace(o, i);  // a second producer is reported at import
  // deps[i]: (producer, value name) of each value node i reads from another node.
  std::vector<std::vector<std::pair<int, const std::string*>>> deps(static_cast<size_t>(n));
  bool sorted = true;
  for (int i = 0; i < n; ++i) {
    const onnx::NodeProto& node = gp.node(i);
    auto& d = deps[static_cast<size_t>(i)];
    std::vector<std::string> body_names;
    for (const auto& a : node.attribute()) {
      if (a.has_g())
        for (auto& f : Importer::free_names(a.g())) body_names.push_back(std::move(f));
      for (const auto& sub : a.graphs())
        for (auto& f : Importer::free_names(sub)) body_names.push_back(std::move(f));
    }
    auto read = [&](const std::string& name) {
      const auto it = producer.find(name);
      if (it == producer.end()) return;
      if (it->second == i)
        throw Error(node_where(node, 0) + ": reads its own output '" + io::printable(name) +
                    "'; a node cannot consume the value it produces (rename the output or feed the input from "
                    "another node)");
      for (const auto& [p, nm] : d)
        if (p == it->second) return;
      d.emplace_back(it->second, &it->first);
      sorted = sorted && it->second < i;
    };
    for (const auto& in : node.input())
      if (!in.empty()) read(in);
    for (const auto& name : body_names) read(name);
  }
  if (sorted) {
    for (const auto& node : gp.node()) order.push_back(&node);
    return order;
  }
  std::vector<std::vector<int>> users(static_cast<size_t>(n));
  std::vector<size_t> waiting(static_cast<size_t>(n));
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i) {
    for (const auto& [p, name] : deps[static_cast<size_t>(i)]) users[static_cast<size_t>(p)].push_back(i);
    waiting[static_cast<size_t>(i)] = deps[static_cast<size_t>(i)].size();
    if (waiting[static_cast<size_t>(i)] == 0) ready.push(i);
  }
  std::vector<bool> placed(static_cast<size_t>(n), false);
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    placed[static_cast<size_t>(i)] = true;
    order.push_back(&gp.node(i));
    for (int u : users[static_cast<size_t>(i)])
      if (--waiting[static_cast<size_t>(u)] == 0) ready.push(u);
  }
  if (static_cast<int>(order.size()) == n) return order;
  // A cycle: from the first node left, follow unplaced producers until a node repeats.
  int at = 0;
  while (placed[static_cast<size_t>(at)]) ++at;
  std::vector<int> path;
  std::vector<const std::string*> via;
  std::vector<int> pos(static_cast<size_t>(n), -1);
  while (pos[static_cast<size_t>(at)] < 0) {
    pos[static_cast<size_t>(at)] = static_cast<int>(path.size());
    path.push_back(at);
    for (const auto& [p, name] : deps[static_cast<size_t>(at)])
      if (!placed[static_cast<size_t>(p)]) {
        at = p;
        via.push_back(name);
        break;
      }
  }
  std::string cycle;
  const size_t start = static_cast<size_t>(pos[static_cast<size_t>(at)]);
  for (size_t k = start; k < path.size(); ++k)
    cycle += node_where(gp.node(path[k]), 0) + " reads '" + io::printable(*via[k]) + "' from ";
  cycle += node_where(gp.node(path[start]), 0);
  throw Error(node_where(gp.node(path[start]), 0) + " is part of a cycle: " + cycle +
              "; ONNX graphs must be acyclic (loops are written with Loop / Scan)");
}

}  // namespace

// ---- NodeCtx ----------------------------------------------------------------

NodeCtx::NodeCtx(Importer& im, const onnx::NodeProto& node, int64_t opset, std::vector<Val*> inputs)
    : im_(im), node_(node), opset_(opset), in_(std::move(inputs)), in_used_(in_.size(), false),
      attr_used_(static_cast<size_t>(node.attribute_size()), false) {}

bool NodeCtx::present(size_t i) const {
  if (i >= in_.size()) return false;
  in_used_[i] = true;
  return in_[i] != nullptr;
}

void NodeCtx::consume_input(size_t i) const {
  if (i < in_used_.size()) in_used_[i] = true;
}

void NodeCtx::consume_attributes() const { attr_used_.assign(attr_used_.size(), true); }

void NodeCtx::check_consumed() const {
  for (size_t i = 0; i < in_.size(); ++i)
    if (in_[i] && !in_used_[i])
      fail("input " + std::to_string(i) + " ('" + io::printable(node_.input(static_cast<int>(i))) + "') is not an input " +
           node_.op_type() + " takes at opset " + std::to_string(opset_) + " (or rlx does not support it); the node has " +
           std::to_string(in_.size()) + " inputs. Remove the extra input or check the model's opset");
  for (int k = 0; k < node_.attribute_size(); ++k)
    if (!attr_used_[static_cast<size_t>(k)])
      fail("attribute '" + io::printable(node_.attribute(k).name()) + "' is not an attribute " + node_.op_type() +
           " takes at opset " + std::to_string(opset_) + " (or rlx does not support it); remove it or check the "
           "model's opset");
}

Graph& NodeCtx::g() const { return im_.graph(); }

std::string NodeCtx::where() const { return node_where(node_, opset_); }

void NodeCtx::fail(const std::string& msg) const { throw Error(where() + ": " + msg); }

const Val& NodeCtx::in(size_t i) const {
  if (!present(i)) fail("input " + std::to_string(i) + " is required but missing");
  return *in_[i];
}

Value NodeCtx::value(size_t i) const {
  in(i);
  return im_.materialize(*in_[i]);
}

const Tensor& NodeCtx::konst(size_t i, const std::string& what) const {
  const Val& v = in(i);
  if (v.konst) return *v.konst;
  if (v.hint) return *v.hint;
  if (v.dims) {
    std::vector<std::string> syms;
    for (const Dim& d : *v.dims)
      if (d.is_symbolic() && std::find(syms.begin(), syms.end(), d.sym) == syms.end()) syms.push_back(d.sym);
    std::string list;
    for (const auto& s : syms) list += (list.empty() ? "'" : ", '") + io::printable(s) + "'";
    fail("input " + std::to_string(i) + " ('" + io::printable(node_.input(static_cast<int>(i))) + "', the " + what +
         ") must be known at import time, but it depends on the symbolic input dims " + list +
         "; bind them to import the model (rlx run and OnnxModel take them from the input tensors; or --dim "
         "NAME=VALUE, OnnxImportOptions::dims)");
  }
  fail("input " + std::to_string(i) + " ('" + io::printable(node_.input(static_cast<int>(i))) + "', the " + what +
       ") must be known at import time, but it is computed at run time; rlx needs it to fix the output "
       "shape (when it is computed from the inputs' named dims, bind them: rlx run and OnnxModel take them from "
       "the input tensors, or --dim NAME=VALUE; when it is a graph input, pass its value with "
       "OnnxImportOptions::known_inputs)");
}

std::vector<int64_t> NodeCtx::ints_input(size_t i, const std::string& what) const {
  const Tensor& t = konst(i, what);
  if (!is_int(t.dtype())) fail("the " + what + " must be an integer tensor, got " + t.shape_info().str());
  return tensor_ints(t);
}

int64_t NodeCtx::scalar_input(size_t i, const std::string& what) const {
  const Tensor& t = konst(i, what);
  if (t.numel() != 1 || is_float(t.dtype())) fail("the " + what + " must hold exactly one integer, got " + t.shape_info().str());
  return t.to_i64()[0];
}

std::vector<Dim> NodeCtx::dims_input(size_t i, const std::string& what) const {
  const Val& v = in(i);
  if (!v.konst && !v.hint && v.dims) return *v.dims;
  const auto ints = ints_input(i, what);
  return {ints.begin(), ints.end()};
}

const onnx::AttributeProto* NodeCtx::attr(const std::string& name) const {
  for (int k = 0; k < node_.attribute_size(); ++k) {
    const auto& a = node_.attribute(k);
    if (a.name() == name) {
      if (!a.ref_attr_name().empty())
        fail("attribute '" + name + "' refers to a function attribute; only model graphs are supported");
      attr_used_[static_cast<size_t>(k)] = true;
      return &a;
    }
  }
  return nullptr;
}

int64_t NodeCtx::i(const std::string& name, int64_t def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() != onnx::AttributeProto::INT) fail("attribute '" + name + "' must be an int");
  return a->i();
}

double NodeCtx::f(const std::string& name, double def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() != onnx::AttributeProto::FLOAT) fail("attribute '" + name + "' must be a float");
  return a->f();
}

std::string NodeCtx::s(const std::string& name, const std::string& def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() != onnx::AttributeProto::STRING) fail("attribute '" + name + "' must be a string");
  return a->s();
}

std::vector<int64_t> NodeCtx::ints(const std::string& name, std::vector<int64_t> def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() != onnx::AttributeProto::INTS) fail("attribute '" + name + "' must be a list of ints");
  return {a->ints().begin(), a->ints().end()};
}

std::vector<float> NodeCtx::floats(const std::string& name) const {
  const auto* a = attr(name);
  if (!a) return {};
  if (a->type() != onnx::AttributeProto::FLOATS) fail("attribute '" + name + "' must be a list of floats");
  return {a->floats().begin(), a->floats().end()};
}

Tensor NodeCtx::tensor_attr(const std::string& name) const {
  const auto* a = attr(name);
  if (!a || a->type() != onnx::AttributeProto::TENSOR) fail("attribute '" + name + "' must be a tensor");
  return tensor_from_proto(a->t(), "", where() + " attribute '" + name + "'");
}

void NodeCtx::allow_only(std::initializer_list<const char*> names) const {
  for (int k = 0; k < node_.attribute_size(); ++k) {
    const auto& a = node_.attribute(k);
    bool ok = false;
    for (const char* n : names) ok = ok || a.name() == n;
    if (!ok) {
      std::string list;
      for (const char* n : names) list += (list.empty() ? "" : ", ") + std::string(n);
      fail("attribute '" + io::printable(a.name()) + "' is not supported by " + node_.op_type() + " at opset " +
           std::to_string(opset_) + " (supported: " + (list.empty() ? "none" : list) + ")");
    }
    attr_used_[static_cast<size_t>(k)] = true;
  }
}

Val NodeCtx::out(Value v) const { return Val::of(v, g().shape(v)); }

Value NodeCtx::scalar_like(double v, DType dt) const { return g().constant(full_tensor(dt, {}, v)); }

Value NodeCtx::cast_to(Value v, DType dt) const { return g().shape(v).dtype == dt ? v : g().cast(v, dt); }

// ---- helpers ---------------------------------------------------------------

std::vector<int64_t> tensor_ints(const Tensor& t) { return t.to_i64(); }
std::vector<double> tensor_doubles(const Tensor& t) { return t.to_f64(); }

Tensor full_tensor(DType dt, const std::vector<int64_t>& shape, double value) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw Error("negative dim in " + dims_str(shape));
    if (d != 0 && n > kMaxFoldElements / d)
      throw Error("a constant of shape " + dims_str(shape) + " would exceed " + std::to_string(kMaxFoldElements) + " elements");
    n *= d;
  }
  std::vector<double> v(static_cast<size_t>(n), value);
  return Tensor::f64(shape, v).cast(dt);
}

Val shape_val(const std::vector<Dim>& dims, bool scalar) {
  bool all_static = true;
  for (const Dim& d : dims) all_static = all_static && d.is_static();
  if (all_static) {
    std::vector<int64_t> v;
    for (const Dim& d : dims) v.push_back(d.value);
    std::vector<int64_t> shape;
    if (!scalar) shape.push_back(static_cast<int64_t>(v.size()));
    return Val::known(Tensor::i64(shape, v));
  }
  Val r;
  r.dims = dims;
  r.shape = scalar ? Shape({}, DType::I64) : Shape({static_cast<int64_t>(dims.size())}, DType::I64);
  return r;
}

const ConverterTable& converters() {
  static const ConverterTable table = [] {
    ConverterTable t;
    register_elementwise(t);
    register_shape(t);
    register_reduce(t);
    register_nn(t);
    register_indexing(t);
    register_control(t);
    register_rnn(t);
    register_resize(t);
    register_misc(t);
    register_integer(t);
    return t;
  }();
  return table;
}

// ---- Importer ---------------------------------------------------------------

Importer::Importer(Graph& g, const OnnxImportOptions& opts, std::map<std::string, int64_t> opsets, std::string base_dir,
                   Importer* parent, bool same_graph)
    : g_(g), opts_(opts), opsets_(std::move(opsets)), base_dir_(std::move(base_dir)), parent_(parent),
      same_graph_(same_graph), depth_(parent ? parent->depth_ + 1 : 0), root_(parent ? parent->root_ : nullptr) {
  const int max_depth = active_limits().max_nesting_depth;
  if (depth_ > max_depth)
    throw Error("subgraphs (If / Loop / Scan bodies) are nested more than " + std::to_string(max_depth) +
                " deep; the size policy allows at most " + std::to_string(max_depth) +
                " (raise Limits::max_nesting_depth in OnnxImportOptions::limits for a model that needs more)");
}

Val* Importer::lookup(const std::string& name) {
  if (auto it = vals_.find(name); it != vals_.end()) return &it->second;
  if (!parent_) return nullptr;
  Val* outer = parent_->lookup(name);
  if (!outer || same_graph_) return outer;
  // A body with its own graph sees only the enclosing scope's known values (run-time values
  // are captured as Input nodes before the body is imported).
  if (!outer->konst && !outer->dims) return nullptr;
  Val copy;
  copy.konst = outer->konst;
  copy.dims = outer->dims;
  copy.shape = outer->shape;
  return &vals_.emplace(name, std::move(copy)).first->second;
}

Val& Importer::define(const std::string& name, Val v) {
  if (!defined_.insert(name).second)
    throw Error("the value name '" + io::printable(name) +
                "' is defined twice (by two nodes, a node and a graph input or initializer, or a node and its own "
                "input); ONNX graphs define each name once: rename one of them");
  vals_[name] = std::move(v);
  return vals_[name];
}

void Importer::check_body(const onnx::GraphProto& gp, const std::string& where) const {
  if (gp.sparse_initializer_size() > 0)
    throw Error(where + ": sparse initializers are not supported (store them as dense initializers)");
  std::set<std::string> inits;
  for (const auto& t : gp.initializer()) {
    if (t.name().empty()) throw Error(where + ": an initializer has no name");
    if (!inits.insert(t.name()).second)
      throw Error(where + ": initializer '" + io::printable(t.name()) + "' is defined twice; rename or remove one");
  }
  std::set<std::string> ins;
  for (const auto& vi : gp.input()) {
    if (vi.name().empty()) throw Error(where + ": a graph input has no name");
    if (!ins.insert(vi.name()).second)
      throw Error(where + ": graph input '" + io::printable(vi.name()) + "' is declared twice; rename or remove one");
  }
  std::set<std::string> outs;
  for (const auto& vi : gp.output()) {
    if (vi.name().empty()) throw Error(where + ": a graph output has no name");
    if (!outs.insert(vi.name()).second)
      throw Error(where + ": graph output '" + io::printable(vi.name()) + "' is declared twice; remove one");
  }
}

void Importer::validate_node(const onnx::NodeProto& node, int64_t opset) const {
  const std::string where = node_where(node, opset);
  if (node.op_type().empty()) throw Error(where + ": the node has no op_type");
  if (const auto it = kOpSince.find(node.op_type()); it != kOpSince.end() && opset < it->second)
    throw Error(where + ": " + node.op_type() + " does not exist at opset " + std::to_string(opset) +
                " (it was introduced in opset " + std::to_string(it->second) +
                "); the model's opset_import is wrong or the node belongs to another domain");
  std::set<std::string> names;
  for (const auto& a : node.attribute()) {
    const std::string an = "attribute '" + io::printable(a.name()) + "'";
    if (a.name().empty()) throw Error(where + ": an attribute has no name");
    if (!names.insert(a.name()).second) throw Error(where + ": " + an + " is given twice; keep one");
    if (!a.ref_attr_name().empty())
      throw Error(where + ": " + an + " refers to the function attribute '" + io::printable(a.ref_attr_name()) +
                  "'; references are only valid inside functions, which rlx does not import");
    const auto kinds = attr_payload_kinds(a);
    if (a.type() == onnx::AttributeProto::UNDEFINED)
      throw Error(where + ": " + an + " has no type (AttributeProto.type is UNDEFINED); set its type");
    for (int k : kinds)
      if (k != a.type())
        throw Error(where + ": " + an + " is declared " + attr_kind_name(a.type()) + " but holds a " +
                    attr_kind_name(k) + " value; fix the attribute's type or value");
    for (const AttrSpan& sp : kAttrSpans) {
      if (node.op_type() != sp.op || a.name() != sp.attr) continue;
      if (opset < sp.since || (sp.until > 0 && opset >= sp.until)) {
        std::string valid = sp.until > 0 ? "opsets " + std::to_string(sp.since) + " to " + std::to_string(sp.until - 1)
                                         : "opset " + std::to_string(sp.since) + " and later";
        std::string hint = sp.until > 0 ? "; at opset " + std::to_string(opset) + " it is an input (or was removed)" : "";
        throw Error(where + ": " + an + " is not an attribute of " + node.op_type() + " at opset " +
                    std::to_string(opset) + " (it exists in " + valid + ")" + hint +
                    "; remove it or set the model's opset to match");
      }
    }
  }
  std::set<std::string> outs;
  for (const auto& o : node.output())
    if (!o.empty() && !outs.insert(o).second)
      throw Error(where + ": output '" + io::printable(o) + "' is listed twice; each output needs its own name");
  for (const auto& o : node.output())
    for (const auto& i : node.input())
      if (!o.empty() && o == i)
        throw Error(where + ": output '" + io::printable(o) +
                    "' is also an input of the node; a node cannot overwrite its own input (ONNX values are "
                    "defined once)");
}

Value Importer::materialize(Val& v) {
  if (v.value) return *v.value;
  if (v.konst) {
    v.value = g_.constant(*v.konst);
    return *v.value;
  }
  std::string dims = v.dims ? dims_str(*v.dims) : std::string("?");
  throw Error("a shape value " + dims + " with symbolic entries is used as a run-time tensor; rlx computes "
              "symbolic dims only inside shape operands (Reshape, Expand, ConstantOfShape). Bind the dims: rlx run "
              "and OnnxModel take them from the input tensors (or --dim NAME=VALUE, OnnxImportOptions::dims)");
}

Shape Importer::input_shape(const onnx::ValueInfoProto& vi) {
  const std::string where = "graph input '" + io::printable(vi.name()) + "'";
  if (!vi.type().has_tensor_type())
    throw Error(where + ": only tensor inputs are supported (this one is a sequence, map or optional)");
  const auto& tt = vi.type().tensor_type();
  const DType dt = dtype_from_onnx(tt.elem_type(), where);
  const auto hint = opts_.known_inputs.find(vi.name());
  const Tensor* known = hint == opts_.known_inputs.end() ? nullptr : &hint->second;
  if (!tt.has_shape()) {
    if (known) return Shape::from(known->shape(), dt);
    if (auto it = opts_.input_shapes.find(vi.name()); it != opts_.input_shapes.end()) {
      checked_nbytes(it->second, dt, where);
      return Shape::from(it->second, dt);
    }
    throw Error(where + " has no declared shape; rlx needs at least its rank (give its shape in "
                "OnnxImportOptions::input_shapes, or run it with OnnxModel / rlx run, which take it from the input)");
  }
  std::vector<Dim> dims;
  for (int i = 0; i < tt.shape().dim_size(); ++i) {
    const auto& d = tt.shape().dim(i);
    Dim dim;
    if (d.has_dim_value()) {
      if (d.dim_value() < 0) throw Error(where + ": dim " + std::to_string(i) + " is negative");
      dim = Dim(d.dim_value());
    } else {
      dim = Dim::symbol(d.has_dim_param() && !d.dim_param().empty() ? d.dim_param() : unnamed_dim_symbol(vi.name(), i));
      if (auto it = opts_.dims.find(dim.sym); it != opts_.dims.end()) dim = Dim(it->second);
    }
    dims.push_back(dim);
  }
  if (known) {
    const auto& ks = known->shape();
    bool ok = ks.size() == dims.size();
    for (size_t i = 0; ok && i < dims.size(); ++i) {
      if (dims[i].is_static()) ok = dims[i].value == ks[i];
      else dims[i] = Dim(ks[i]);
    }
    if (!ok) throw Error(where + ": the known value's shape " + dims_str(ks) + " does not match the declared " + dims_str(dims));
  }
  bool all_static = true;
  std::vector<int64_t> sizes;
  for (const Dim& d : dims) {
    all_static = all_static && d.is_static();
    if (d.is_static()) sizes.push_back(d.value);
  }
  if (all_static) checked_nbytes(sizes, dt, where);  // the size policy, before anything is planned
  return Shape(std::move(dims), dt);
}

void Importer::add_initializer(const onnx::TensorProto& t) {
  const std::string where = "initializer '" + io::printable(t.name()) + "'";
  Tensor v;
  if (parsed_initializers_ && parsed_initializers_->count(t.name())) v = parsed_initializers_->at(t.name());
  else v = tensor_from_proto(t, base_dir_, where);
  if (top_level() && static_cast<int64_t>(v.nbytes()) > opts_.max_constant_bytes) {
    // A large weight: a Param with its value carried by the graph.
    Val val = Val::known(v);
    val.value = g_.param(t.name(), v.shape_info());
    g_.set_weight(t.name(), v);
    define(t.name(), std::move(val));
    return;
  }
  define(t.name(), Val::known(std::move(v)));
}

void Importer::import_main(const onnx::GraphProto& gp) {
  root_ = &gp;
  check_body(gp, "the model's graph");
  for (const auto& [name, v] : opts_.dims)
    if (v < 0)
      throw Error("dims gives the symbolic dim '" + io::printable(name) + "' the negative size " + std::to_string(v) +
                  "; dims must be >= 0");
  std::set<std::string> init_names;
  for (const auto& t : gp.initializer()) init_names.insert(t.name());
  // Graph inputs first (node order = ONNX input order), initializers after.
  for (const auto& vi : gp.input()) {
    if (init_names.count(vi.name())) continue;  // an initializer's default: a weight, not a run-time input
    if (vals_.count(vi.name())) throw Error("graph input '" + io::printable(vi.name()) + "' is declared twice");
    const Shape s = input_shape(vi);
    Val v = Val::of(g_.input(vi.name(), s), s);
    if (auto it = opts_.known_inputs.find(vi.name()); it != opts_.known_inputs.end()) {
      if (it->second.dtype() != s.dtype)
        throw Error("known value of input '" + vi.name() + "' is " + it->second.shape_info().str() +
                    " but the input is declared " + s.str());
      v.hint = it->second;
    }
    define(vi.name(), std::move(v));
  }
  for (const auto& [name, t] : opts_.known_inputs)
    if (!vals_.count(name)) throw Error("known_inputs names '" + name + "', which is not a graph input");
  for (const auto& [name, shape] : opts_.input_shapes)
    if (!vals_.count(name)) throw Error("input_shapes names '" + io::printable(name) + "', which is not a graph input");
  std::set<std::string> symbols;
  for (const auto& vi : gp.input())
    if (vi.type().has_tensor_type() && vi.type().tensor_type().has_shape())
      for (int i = 0; i < vi.type().tensor_type().shape().dim_size(); ++i) {
        const auto& d = vi.type().tensor_type().shape().dim(i);
        if (!d.has_dim_value())
          symbols.insert(d.has_dim_param() && !d.dim_param().empty() ? d.dim_param() : unnamed_dim_symbol(vi.name(), i));
      }
  for (const auto& [name, v] : opts_.dims) {
    if (!symbols.count(name)) {
      std::string list;
      for (const auto& s : symbols) list += (list.empty() ? "'" : ", '") + s + "'";
      throw Error("dims names '" + io::printable(name) +
                  "', which is not a symbolic dim of any graph input (symbolic dims: " + (list.empty() ? "none" : list) +
                  ")");
    }
  }
  // A graph input that is also an initializer (its default value) must agree with it.
  std::map<std::string, const onnx::TensorProto*> init_by_name;
  for (const auto& t : gp.initializer()) init_by_name[t.name()] = &t;
  for (const auto& vi : gp.input()) {
    if (!init_names.count(vi.name()) || !vi.type().has_tensor_type()) continue;
    const auto& tt = vi.type().tensor_type();
    {
      const onnx::TensorProto& t = *init_by_name.at(vi.name());
      const std::string where = "graph input '" + io::printable(vi.name()) + "'";
      if (tt.elem_type() != 0 && tt.elem_type() != t.data_type())
        throw Error(where + " is declared " + onnx_type_name(tt.elem_type()) + " but its initializer holds " +
                    onnx_type_name(t.data_type()) + "; fix the declaration or the initializer");
      if (tt.has_shape()) {
        bool ok = tt.shape().dim_size() == t.dims_size();
        for (int i = 0; ok && i < t.dims_size(); ++i)
          if (tt.shape().dim(i).has_dim_value()) ok = tt.shape().dim(i).dim_value() == t.dims(i);
        if (!ok)
          throw Error(where + " is declared with a shape its initializer does not have (initializer dims " +
                      dims_str(std::vector<int64_t>(t.dims().begin(), t.dims().end())) +
                      "); fix the declaration or the initializer");
      }
    }
  }
  for (const auto& t : gp.initializer()) add_initializer(t);
  for (const auto* n : topological_nodes(gp, [this](const std::string& name) { return defined_.count(name) > 0; }))
    import_node(*n);
  std::vector<Value> outs;
  std::vector<std::string> names;
  for (const auto& vi : gp.output()) {
    if (vi.type().has_sequence_type() || vi.type().has_optional_type() || vi.type().has_map_type())
      throw Error("graph output '" + io::printable(vi.name()) + "': only tensor outputs are supported");
    Val* v = lookup(vi.name());
    if (!v)
      throw Error("graph output '" + io::printable(vi.name()) + "' is not produced by any node, input or initializer");
    outs.push_back(materialize(*v));
    names.push_back(vi.name());
  }
  if (outs.empty()) throw Error("the graph has no outputs");
  g_.set_outputs(outs, names);
  compact();
}

std::vector<Val> Importer::inline_body(const onnx::GraphProto& body, const std::vector<Val>& args,
                                       const std::string& where) {
  if (static_cast<size_t>(body.input_size()) != args.size())
    throw Error(where + ": the body declares " + std::to_string(body.input_size()) + " inputs but gets " +
                std::to_string(args.size()));
  Importer child(g_, opts_, opsets_, base_dir_, this, true);
  child.check_body(body, where);
  for (int i = 0; i < body.input_size(); ++i) child.define(body.input(i).name(), args[static_cast<size_t>(i)]);
  for (const auto& t : body.initializer()) child.add_initializer(t);
  for (const auto* n : topological_nodes(body, [&child](const std::string& name) { return child.defined_.count(name) > 0; }))
    child.import_node(*n);
  std::vector<Val> outs;
  for (const auto& vi : body.output()) {
    Val* v = child.lookup(vi.name());
    if (!v) throw Error(where + ": body output '" + io::printable(vi.name()) + "' is never produced");
    outs.push_back(*v);
  }
  return outs;
}

std::shared_ptr<Graph> Importer::build_subgraph(const onnx::GraphProto& body, const std::vector<Shape>& formal,
                                                const std::vector<std::string>& captures, const std::string& where) {
  if (static_cast<size_t>(body.input_size()) != formal.size())
    throw Error(where + ": the body declares " + std::to_string(body.input_size()) + " inputs but gets " +
                std::to_string(formal.size()));
  auto sg = std::make_shared<Graph>();
  Importer child(*sg, opts_, opsets_, base_dir_, this, false);
  child.check_body(body, where);
  for (int i = 0; i < body.input_size(); ++i) {
    const auto& s = formal[static_cast<size_t>(i)];
    child.define(body.input(i).name(), Val::of(sg->input(body.input(i).name(), s), s));
  }
  for (const auto& name : captures) {
    Val* outer = lookup(name);
    if (!outer) throw Error(where + ": the body reads '" + io::printable(name) + "', which is not defined");
    child.define(name, Val::of(sg->input(name, outer->shape), outer->shape));
  }
  for (const auto& t : body.initializer()) child.add_initializer(t);
  for (const auto* n : topological_nodes(body, [&child](const std::string& name) { return child.defined_.count(name) > 0; }))
    child.import_node(*n);
  for (const auto& vi : body.output()) {
    Val* v = child.lookup(vi.name());
    if (!v) throw Error(where + ": body output '" + io::printable(vi.name()) + "' is never produced");
    sg->add_output(child.materialize(*v), vi.name());
  }
  child.compact();
  return sg;
}

std::vector<std::string> Importer::free_names(const onnx::GraphProto& body) {
  std::set<std::string> defined, seen;
  std::vector<std::string> order;
  auto use = [&](const std::string& n) {
    if (!n.empty() && !defined.count(n) && seen.insert(n).second) order.push_back(n);
  };
  for (const auto& vi : body.input()) defined.insert(vi.name());
  for (const auto& t : body.initializer()) defined.insert(t.name());
  for (const auto& n : body.node()) {
    for (const auto& in : n.input()) use(in);
    for (const auto& a : n.attribute()) {
      if (a.has_g())
        for (const auto& f : free_names(a.g())) use(f);
      for (const auto& sub : a.graphs())
        for (const auto& f : free_names(sub)) use(f);
    }
    for (const auto& o : n.output()) defined.insert(o);
  }
  for (const auto& vi : body.output()) use(vi.name());
  return order;
}

void Importer::import_node(const onnx::NodeProto& node) {
  if (!is_default_domain(node.domain())) {
    const auto it = opsets_.find(node.domain());
    if (it == opsets_.end())
      throw Error(node_where(node, 0) + ": operator domain '" + io::printable(node.domain()) +
                  "' is not declared in the model's opset_import (and rlx imports only the default ai.onnx domain)");
    throw Error(node_where(node, it->second) + ": operator domain '" + io::printable(node.domain()) +
                "' is not supported (rlx imports the default ai.onnx domain)");
  }
  const auto os = opsets_.find("");
  if (os == opsets_.end())
    throw Error(node_where(node, 0) + ": the model imports no opset of the default ai.onnx domain");
  const int64_t opset = os->second;
  validate_node(node, opset);
  const auto& table = converters();
  const auto conv = table.find(node.op_type());
  if (conv == table.end())
    throw Error(node_where(node, opset) + ": unsupported ONNX op '" + io::printable(node.op_type()) + "' (opset " +
                std::to_string(opset) + "); see docs/onnx-conformance.md for the supported ops");
  std::vector<Val*> ins;
  bool all_known = true, all_hinted = true;
  for (const auto& name : node.input()) {
    if (name.empty()) {
      ins.push_back(nullptr);
      continue;
    }
    Val* v = lookup(name);
    if (!v)
      throw Error(node_where(node, opset) + ": input '" + io::printable(name) +
                  "' is not produced by any node and is not a graph input, an initializer or a value of an enclosing "
                  "graph; check the exporter's output or give the value");
    all_known = all_known && v->konst.has_value();
    all_hinted = all_hinted && (v->konst || v->hint);
    ins.push_back(v);
  }
  const NodeId first_new = static_cast<NodeId>(g_.size());
  NodeCtx ctx(*this, node, opset, ins);
  for (const IgnorableInput& ig : kIgnorableInputs)
    if (node.op_type() == ig.op) ctx.consume_input(ig.index);
  if (kConverterChecksAttributes.count(node.op_type())) ctx.consume_attributes();
  std::vector<Val> outs;
  try {
    outs = conv->second(ctx);
    ctx.check_consumed();
    if (outs.size() > static_cast<size_t>(node.output_size()))
      throw Error("it gives " + std::to_string(outs.size()) + " outputs, but the node names " +
                  std::to_string(node.output_size()) + " (a malformed node or subgraph: check the exporter's output)");
    if (all_known && !kNeverFold.count(node.op_type())) {
      std::vector<Value> need;
      for (const auto& o : outs)
        if (!o.konst && o.value) need.push_back(*o.value);
      if (!need.empty()) {
        if (auto folded = try_fold(first_new, need, {})) {
          size_t k = 0;
          for (auto& o : outs)
            if (!o.konst && o.value) {
              o.konst = (*folded)[k++];
              o.value.reset();  // re-materialized as a Constant if used at run time
            }
        }
      }
    }
    if (!all_known && all_hinted && !kNeverFold.count(node.op_type())) propagate_hints(first_new, ins, outs);
  } catch (const OnnxDimsError&) {
    throw;
  } catch (const Error& e) {
    const std::string msg = e.what();
    const bool named = msg.rfind("ONNX node", 0) == 0;
    // A node that needs a static value where an input dim is symbolic: binding the dims helps.
    if (msg.find("symbolic") != std::string::npos) {
      std::string hint;
      if (msg.find("rlx run") == std::string::npos)
        hint = " (bind the symbolic input dims: rlx run and OnnxModel take them from the input tensors; or --dim "
               "NAME=VALUE, OnnxImportOptions::dims)";
      throw OnnxDimsError((named ? "" : ctx.where() + ": ") + msg + hint, ctx.where());
    }
    if (named) throw;
    throw Error(ctx.where() + ": " + msg);
  } catch (const std::bad_alloc&) {
    throw Error(ctx.where() + ": out of memory while converting the node; the model or its sizes need more memory "
                "than is available");
  } catch (const std::exception& e) {
    // Not an rlx::Error: a converter missed a check. Name the node so the input can be found.
    throw Error(ctx.where() + ": internal failure (" + io::printable(e.what()) +
                "); please report it with the model that caused it");
  }
  for (size_t k = 0; k < outs.size(); ++k) {
    const std::string& name = node.output(static_cast<int>(k));
    if (name.empty()) continue;
    if (defined_.count(name))
      throw Error(ctx.where() + ": output '" + io::printable(name) +
                  "' is already defined (by another node, a graph input or an initializer); ONNX graphs define "
                  "each name once: rename one of them");
    define(name, std::move(outs[k]));
  }
  for (size_t k = outs.size(); k < static_cast<size_t>(node.output_size()); ++k)
    if (!node.output(static_cast<int>(k)).empty())
      throw Error(ctx.where() + ": output " + std::to_string(k) + " ('" +
                  io::printable(node.output(static_cast<int>(k))) + "') is not an output " + node.op_type() +
                  " has at opset " + std::to_string(opset) + " (or rlx does not support it)");
}

void Importer::propagate_hints(NodeId first_new, const std::vector<Val*>& ins, std::vector<Val>& outs) const {
  // Only small integer/bool results: the shape-like values later nodes may need at import time.
  std::vector<Value> need;
  for (const auto& o : outs) {
    if (o.konst || !o.value) continue;
    const Shape& s = o.shape;
    if (!s.is_static() || s.numel() > (is_float(s.dtype) ? 1 : 4096)) return;
    need.push_back(*o.value);
  }
  if (need.empty()) return;
  std::map<Value, Tensor> known;
  for (const Val* v : ins)
    if (v && v->hint && v->value) known.emplace(*v->value, *v->hint);
  auto folded = try_fold(first_new, need, known);
  if (!folded) return;
  size_t k = 0;
  for (auto& o : outs)
    if (!o.konst && o.value) o.hint = (*folded)[k++];
}

std::optional<std::vector<Tensor>> Importer::try_fold(NodeId first_new, const std::vector<Value>& outs,
                                                      const std::map<Value, Tensor>& known) const {
  Graph m;
  std::map<NodeId, NodeId> remap;
  std::map<Value, Value> leaves;
  for (NodeId id = first_new; id < g_.size(); ++id) {
    const Node& n = g_.node(id);
    if (std::holds_alternative<ops::Input>(n.op) || std::holds_alternative<ops::Param>(n.op)) return std::nullopt;
    std::vector<Value> ins;
    for (const Value& v : n.inputs) {
      if (v.node >= first_new) {
        ins.push_back({remap.at(v.node), v.port});
        continue;
      }
      auto it = leaves.find(v);
      if (it == leaves.end()) {
        const Node& src = g_.node(v.node);
        if (auto k = known.find(v); k != known.end()) {
          it = leaves.emplace(v, m.constant(k->second)).first;
        } else if (const auto* c = std::get_if<ops::Constant>(&src.op)) {
          it = leaves.emplace(v, m.constant(c->value)).first;
        } else if (const auto* p = std::get_if<ops::Param>(&src.op); p && g_.weights().count(p->name)) {
          it = leaves.emplace(v, m.constant(g_.weights().at(p->name))).first;
        } else {
          return std::nullopt;
        }
      }
      ins.push_back(it->second);
    }
    remap[id] = m.add_node_with_shapes(n.op, ins, n.outputs);
  }
  std::vector<Value> mouts;
  for (const Value& v : outs) {
    if (v.node < first_new) return std::nullopt;
    // Large results stay in the graph (computed at run time) instead of becoming constants.
    const Shape& s = g_.shape(v);
    if (!s.is_static() || s.numel() > kMaxFoldElements) return std::nullopt;
    mouts.push_back({remap.at(v.node), v.port});
  }
  m.set_outputs(mouts);
  CompileOptions co;
  co.num_threads = 1;
  CompiledGraph cg = Session(Device::Cpu).compile(m, co);
  return cg.run({});
}

void Importer::compact() {
  const auto& nodes = g_.nodes();
  std::vector<bool> live(nodes.size(), false);
  for (const Value& v : g_.outputs()) live[v.node] = true;
  for (size_t i = nodes.size(); i-- > 0;) {
    if (std::holds_alternative<ops::Input>(nodes[i].op)) live[i] = true;
    if (!live[i]) continue;
    for (const Value& v : nodes[i].inputs) live[v.node] = true;
  }
  Graph out;
  std::vector<NodeId> remap(nodes.size(), 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!live[i]) continue;
    std::vector<Value> ins;
    for (const Value& v : nodes[i].inputs) ins.push_back({remap[v.node], v.port});
    remap[i] = out.add_node_with_shapes(nodes[i].op, ins, nodes[i].outputs);
    if (const auto* p = std::get_if<ops::Param>(&nodes[i].op))
      if (auto it = g_.weights().find(p->name); it != g_.weights().end()) out.set_weight(p->name, it->second);
  }
  std::vector<Value> outs;
  for (const Value& v : g_.outputs()) outs.push_back({remap[v.node], v.port});
  out.set_outputs(outs, g_.output_names());
  g_ = std::move(out);
}

// ---- entry points ---------------------------------------------------------

std::string unnamed_dim_symbol(const std::string& input, int axis) { return input + "_d" + std::to_string(axis); }

namespace {

// The ai.onnx opsets and IR versions rlx imports (the ONNX backend node tests it is checked
// against go up to these).
constexpr int64_t kMaxOpset = 28;
constexpr int64_t kMaxIrVersion = 13;

}  // namespace

std::map<std::string, int64_t> model_opsets(const onnx::ModelProto& m, const std::string& what) {
  const std::string ir_range = "rlx imports IR versions 1 to " + std::to_string(kMaxIrVersion);
  if (m.ir_version() <= 0)
    throw Error(what + ": IR version " + std::to_string(m.ir_version()) + " is not valid (" + ir_range +
                "); the file is damaged or was not written by an ONNX exporter");
  if (m.ir_version() > kMaxIrVersion)
    throw Error(what + ": IR version " + std::to_string(m.ir_version()) + " is newer than rlx knows (" + ir_range + ")");
  std::map<std::string, int64_t> opsets;
  for (const auto& o : m.opset_import()) {
    const std::string domain = is_default_domain(o.domain()) ? "" : o.domain();
    const std::string name = domain.empty() ? "ai.onnx" : io::printable(domain);
    if (o.version() <= 0)
      throw Error(what + ": opset_import of domain '" + name + "' has version " + std::to_string(o.version()) +
                  ", which is not valid (opset versions start at 1; rlx imports ai.onnx opsets 1 to " +
                  std::to_string(kMaxOpset) + ")");
    if (!opsets.emplace(domain, o.version()).second)
      throw Error(what + ": opset_import lists domain '" + name + "' twice; keep one entry per domain");
    if (domain.empty() && o.version() > kMaxOpset)
      throw Error(what + ": ai.onnx opset " + std::to_string(o.version()) + " is newer than rlx knows (rlx imports "
                  "ai.onnx opsets 1 to " + std::to_string(kMaxOpset) + "); convert the model to a supported opset");
  }
  if (m.ir_version() < 3 && opsets.empty()) opsets[""] = 1;  // before IR 3 models had no opset_import
  if (!opsets.count(""))
    throw Error(what + ": the model imports no opset of the default ai.onnx domain (its opset_import has no entry "
                "for '' or 'ai.onnx'); add one (rlx imports opsets 1 to " + std::to_string(kMaxOpset) + ")");
  return opsets;
}

Graph import_model(const onnx::ModelProto& m, const std::string& base_dir, const OnnxImportOptions& options,
                   const std::map<std::string, Tensor>* parsed_initializers) {
  const std::string what = "ONNX model";
  if (!m.has_graph()) throw Error(what + ": the model has no graph");
  if (m.functions_size() > 0) throw Error(what + ": model-local functions are not supported");
  Graph g;
  Importer im(g, options, model_opsets(m, what), base_dir);
  im.use_parsed_initializers(parsed_initializers);
  im.import_main(m.graph());
  return g;
}

}  // namespace rlx::onnx_io

namespace rlx {

Graph import_onnx_bytes(const void* data, size_t size, const std::string& base_dir, const OnnxImportOptions& options) {
  return translate_errors("import_onnx", [&] {
    options.limits.validate();
    ScopedLimits scoped(options.limits);
    const std::string what = "ONNX model";
    if (!data && size > 0) throw Error(what + ": no data (null pointer with a size of " + std::to_string(size) + ")");
    const onnx::ModelProto m = onnx_io::parse_model(data, size, what);
    return onnx_io::import_model(m, base_dir, options);
  });
}

Graph import_onnx(const std::string& path, const OnnxImportOptions& options) {
  return translate_errors("import_onnx", [&] {
    options.limits.validate();
    ScopedLimits scoped(options.limits);
    const std::string bytes = onnx_io::read_whole_file(path, "ONNX model");
    std::string dir = std::filesystem::path(path).parent_path().string();
    if (dir.empty()) dir = ".";
    try {
      return import_onnx_bytes(bytes.data(), bytes.size(), dir, options);
    } catch (const OnnxDimsError& e) {
      throw OnnxDimsError("ONNX model '" + io::printable(path) + "': " + e.what(), e.node());
    } catch (const Error& e) {
      throw Error("ONNX model '" + io::printable(path) + "': " + e.what());
    }
  });
}

std::string onnx_elem_type_name(int32_t code) {
  static const char* names[] = {"undefined", "float32", "uint8", "int8", "uint16", "int16", "int32", "int64",
                                "string", "bool", "float16", "float64", "uint32", "uint64", "complex64",
                                "complex128", "bfloat16", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2",
                                "float8e5m2fnuz", "uint4", "int4", "float4e2m1", "float8e8m0", "uint2", "int2"};
  if (code >= 0 && code < static_cast<int32_t>(std::size(names))) return names[code];
  return "type" + std::to_string(code);
}

namespace {

std::string type_text(const onnx::TypeProto& t) {
  if (t.has_tensor_type()) return onnx_elem_type_name(t.tensor_type().elem_type());
  if (t.has_sequence_type()) return "seq(" + type_text(t.sequence_type().elem_type()) + ")";
  if (t.has_optional_type()) return "opt(" + type_text(t.optional_type().elem_type()) + ")";
  if (t.has_map_type()) return "map";
  if (t.has_sparse_tensor_type()) return "sparse";
  return "?";
}

OnnxModelInfo::Io io_info(const onnx::ValueInfoProto& vi) {
  OnnxModelInfo::Io io;
  io.name = vi.name();
  io.type = type_text(vi.type());
  if (vi.type().has_tensor_type() && vi.type().tensor_type().has_shape()) {
    io.has_shape = true;
    const auto& sh = vi.type().tensor_type().shape();
    for (int i = 0; i < sh.dim_size(); ++i) {
      const auto& d = sh.dim(i);
      if (d.has_dim_value()) io.dims.emplace_back(d.dim_value());
      else io.dims.push_back(Dim::symbol(d.dim_param().empty() ? "?" : d.dim_param()));
    }
  }
  return io;
}

}  // namespace

OnnxModelInfo onnx_model_info(const std::string& path) {
  return translate_errors("onnx_model_info", [&] {
    const std::string bytes = onnx_io::read_whole_file(path, "ONNX model");
    const onnx::ModelProto m = onnx_io::parse_model(bytes.data(), bytes.size(), "'" + io::printable(path) + "'");
    OnnxModelInfo info;
    info.ir_version = m.ir_version();
    for (const auto& o : m.opset_import()) info.opsets.emplace_back(o.domain(), o.version());
    info.producer = m.producer_name() + (m.producer_version().empty() ? "" : " " + m.producer_version());
    for (const auto& n : m.graph().node())
      ++info.op_histogram[(n.domain().empty() || n.domain() == "ai.onnx" ? "" : n.domain() + ":") + n.op_type()];
    std::set<std::string> inits;
    for (const auto& t : m.graph().initializer()) {
      inits.insert(t.name());
      const std::string where = "'" + io::printable(path) + "': initializer '" + io::printable(t.name()) + "'";
      int64_t n = 1;
      for (int64_t d : t.dims()) {
        if (d < 0) throw Error(where + " has a negative dim " + std::to_string(d));
        n = checked_mul(n, d, where + " element count");
      }
      int64_t size = 0;
      try {
        size = static_cast<int64_t>(dtype_size(onnx_io::dtype_from_onnx(t.data_type(), "")));
      } catch (const Error&) {
        size = 0;
      }
      info.initializer_bytes = checked_add(info.initializer_bytes, checked_mul(n, size, where + " byte count"),
                                           "'" + io::printable(path) + "': total initializer bytes");
    }
    for (const auto& vi : m.graph().input())
      if (!inits.count(vi.name())) info.inputs.push_back(io_info(vi));
    for (const auto& vi : m.graph().output()) info.outputs.push_back(io_info(vi));
    return info;
  });
}

Tensor load_onnx_tensor(const std::string& path) {
  return translate_errors("load_onnx_tensor", [&] {
    const std::string bytes = onnx_io::read_whole_file(path, "tensor file");
    onnx::TensorProto t;
    if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
        !t.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
      throw Error("'" + io::printable(path) + "' is not a valid onnx.TensorProto");
    std::string dir = std::filesystem::path(path).parent_path().string();
    return onnx_io::tensor_from_proto(t, dir.empty() ? "." : dir, "'" + io::printable(path) + "'");
  });
}

}  // namespace rlx
