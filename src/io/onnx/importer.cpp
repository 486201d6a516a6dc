// The ONNX importer: scopes of named values, node dispatch to the converters, import-time
// folding of nodes whose operands are all known, subgraph bodies, and the final compaction.
#include "io/onnx/importer.h"

#include <filesystem>
#include <iterator>
#include <limits>
#include <set>

#include "io/onnx/proto.h"
#include "rlx/session.h"

namespace rlx::onnx_io {
namespace {

// Ops whose results must not be computed at import time even when every operand is known.
const std::set<std::string> kNeverFold = {"RandomNormal", "RandomUniform", "RandomNormalLike",
                                          "RandomUniformLike", "Multinomial", "Bernoulli"};

bool is_default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

std::string node_where(const onnx::NodeProto& n, int64_t opset) {
  std::string s = "ONNX node '" + (n.name().empty() ? (n.output_size() ? n.output(0) : std::string("?")) : n.name()) +
                  "' (" + (is_default_domain(n.domain()) ? "" : n.domain() + ":") + n.op_type();
  if (opset > 0) s += ", opset " + std::to_string(opset);
  return s + ")";
}

}  // namespace

// ---- NodeCtx ----------------------------------------------------------------

NodeCtx::NodeCtx(Importer& im, const onnx::NodeProto& node, int64_t opset, std::vector<Val*> inputs)
    : im_(im), node_(node), opset_(opset), in_(std::move(inputs)) {}

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
  fail("input " + std::to_string(i) + " ('" + node_.input(static_cast<int>(i)) + "', the " + what +
       ") must be known at import time, but it is computed at run time; rlx needs it to fix the output "
       "shape (pass the value with OnnxImportOptions::known_inputs when it is a graph input)");
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
  for (const auto& a : node_.attribute())
    if (a.name() == name) {
      if (!a.ref_attr_name().empty())
        fail("attribute '" + name + "' refers to a function attribute; only model graphs are supported");
      return &a;
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
  for (const auto& a : node_.attribute()) {
    bool ok = false;
    for (const char* n : names) ok = ok || a.name() == n;
    if (!ok) {
      std::string list;
      for (const char* n : names) list += (list.empty() ? "" : ", ") + std::string(n);
      fail("attribute '" + a.name() + "' is not supported (supported: " + (list.empty() ? "none" : list) + ")");
    }
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
    return t;
  }();
  return table;
}

// ---- Importer ---------------------------------------------------------------

Importer::Importer(Graph& g, const OnnxImportOptions& opts, std::map<std::string, int64_t> opsets, std::string base_dir,
                   Importer* parent, bool same_graph)
    : g_(g), opts_(opts), opsets_(std::move(opsets)), base_dir_(std::move(base_dir)), parent_(parent),
      same_graph_(same_graph) {}

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
  vals_[name] = std::move(v);
  return vals_[name];
}

Value Importer::materialize(Val& v) {
  if (v.value) return *v.value;
  if (v.konst) {
    v.value = g_.constant(*v.konst);
    return *v.value;
  }
  std::string dims = v.dims ? dims_str(*v.dims) : std::string("?");
  throw Error("a shape value " + dims + " with symbolic entries is used as a run-time tensor; rlx computes "
              "symbolic dims only inside shape operands (Reshape, Expand, ConstantOfShape). Fix the dims with "
              "OnnxImportOptions::dims (rlx run --dim NAME=VALUE)");
}

Shape Importer::input_shape(const onnx::ValueInfoProto& vi) {
  const std::string where = "graph input '" + vi.name() + "'";
  if (!vi.type().has_tensor_type())
    throw Error(where + ": only tensor inputs are supported (this one is a sequence, map or optional)");
  const auto& tt = vi.type().tensor_type();
  const DType dt = dtype_from_onnx(tt.elem_type(), where);
  const auto hint = opts_.known_inputs.find(vi.name());
  const Tensor* known = hint == opts_.known_inputs.end() ? nullptr : &hint->second;
  if (!tt.has_shape()) {
    if (known) return Shape::from(known->shape(), dt);
    throw Error(where + " has no declared shape; rlx needs at least its rank (give the value in known_inputs)");
  }
  std::vector<Dim> dims;
  for (int i = 0; i < tt.shape().dim_size(); ++i) {
    const auto& d = tt.shape().dim(i);
    Dim dim;
    if (d.has_dim_value()) {
      if (d.dim_value() < 0) throw Error(where + ": dim " + std::to_string(i) + " is negative");
      dim = Dim(d.dim_value());
    } else {
      dim = Dim::symbol(d.has_dim_param() && !d.dim_param().empty() ? d.dim_param()
                                                                     : vi.name() + "_d" + std::to_string(i));
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
  return Shape(std::move(dims), dt);
}

void Importer::add_initializer(const onnx::TensorProto& t) {
  const std::string where = "initializer '" + t.name() + "'";
  Tensor v = tensor_from_proto(t, base_dir_, where);
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
  if (gp.sparse_initializer_size() > 0) throw Error("sparse initializers are not supported");
  std::set<std::string> init_names;
  for (const auto& t : gp.initializer()) {
    if (t.name().empty()) throw Error("an initializer has no name");
    init_names.insert(t.name());
  }
  // Graph inputs first (node order = ONNX input order), initializers after.
  for (const auto& vi : gp.input()) {
    if (init_names.count(vi.name())) continue;  // an initializer's default: a weight, not a run-time input
    if (vals_.count(vi.name())) throw Error("graph input '" + vi.name() + "' is declared twice");
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
  std::set<std::string> symbols;
  for (const auto& vi : gp.input())
    if (vi.type().has_tensor_type() && vi.type().tensor_type().has_shape())
      for (int i = 0; i < vi.type().tensor_type().shape().dim_size(); ++i) {
        const auto& d = vi.type().tensor_type().shape().dim(i);
        if (!d.has_dim_value()) symbols.insert(d.has_dim_param() && !d.dim_param().empty() ? d.dim_param() : vi.name() + "_d" + std::to_string(i));
      }
  for (const auto& [name, v] : opts_.dims)
    if (!symbols.count(name)) {
      std::string list;
      for (const auto& s : symbols) list += (list.empty() ? "'" : ", '") + s + "'";
      throw Error("dims names '" + name + "', which is not a symbolic dim of any graph input (symbolic dims: " +
                  (list.empty() ? "none" : list) + ")");
    }
  for (const auto& t : gp.initializer()) add_initializer(t);
  for (const auto& n : gp.node()) import_node(n);
  std::vector<Value> outs;
  std::vector<std::string> names;
  for (const auto& vi : gp.output()) {
    if (vi.type().has_sequence_type() || vi.type().has_optional_type() || vi.type().has_map_type())
      throw Error("graph output '" + vi.name() + "': only tensor outputs are supported");
    Val* v = lookup(vi.name());
    if (!v) throw Error("graph output '" + vi.name() + "' is not produced by any node, input or initializer");
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
  for (int i = 0; i < body.input_size(); ++i) child.define(body.input(i).name(), args[static_cast<size_t>(i)]);
  for (const auto& t : body.initializer()) child.add_initializer(t);
  for (const auto& n : body.node()) child.import_node(n);
  std::vector<Val> outs;
  for (const auto& vi : body.output()) {
    Val* v = child.lookup(vi.name());
    if (!v) throw Error(where + ": body output '" + vi.name() + "' is never produced");
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
  for (int i = 0; i < body.input_size(); ++i) {
    const auto& s = formal[static_cast<size_t>(i)];
    child.define(body.input(i).name(), Val::of(sg->input(body.input(i).name(), s), s));
  }
  for (const auto& name : captures) {
    Val* outer = lookup(name);
    if (!outer) throw Error(where + ": the body reads '" + name + "', which is not defined");
    child.define(name, Val::of(sg->input(name, outer->shape), outer->shape));
  }
  for (const auto& t : body.initializer()) child.add_initializer(t);
  for (const auto& n : body.node()) child.import_node(n);
  for (const auto& vi : body.output()) {
    Val* v = child.lookup(vi.name());
    if (!v) throw Error(where + ": body output '" + vi.name() + "' is never produced");
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
    throw Error(node_where(node, it == opsets_.end() ? 0 : it->second) + ": operator domain '" + node.domain() +
                "' is not supported (rlx imports the default ai.onnx domain)");
  }
  const auto os = opsets_.find("");
  const int64_t opset = os == opsets_.end() ? 0 : os->second;
  const auto& table = converters();
  const auto conv = table.find(node.op_type());
  if (conv == table.end())
    throw Error(node_where(node, opset) + ": unsupported ONNX op '" + node.op_type() + "' (opset " +
                std::to_string(opset) + "); see docs/onnx-conformance.md for the supported ops");
  std::vector<Val*> ins;
  bool all_known = true, all_hinted = true;
  for (const auto& name : node.input()) {
    if (name.empty()) {
      ins.push_back(nullptr);
      continue;
    }
    Val* v = lookup(name);
    if (!v) throw Error(node_where(node, opset) + ": input '" + name + "' is not defined before this node");
    all_known = all_known && v->konst.has_value();
    all_hinted = all_hinted && (v->konst || v->hint);
    ins.push_back(v);
  }
  const NodeId first_new = static_cast<NodeId>(g_.size());
  NodeCtx ctx(*this, node, opset, ins);
  std::vector<Val> outs;
  try {
    outs = conv->second(ctx);
    if (outs.size() > static_cast<size_t>(node.output_size()))
      throw Error("converter produced " + std::to_string(outs.size()) + " outputs for " +
                  std::to_string(node.output_size()));
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
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.rfind("ONNX node", 0) == 0) throw;
    throw Error(ctx.where() + ": " + msg);
  }
  for (size_t k = 0; k < outs.size(); ++k) {
    const std::string& name = node.output(static_cast<int>(k));
    if (!name.empty()) define(name, std::move(outs[k]));
  }
  for (size_t k = outs.size(); k < static_cast<size_t>(node.output_size()); ++k)
    if (!node.output(static_cast<int>(k)).empty())
      throw Error(ctx.where() + ": output " + std::to_string(k) + " ('" + node.output(static_cast<int>(k)) +
                  "') is not supported");
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

namespace {

std::map<std::string, int64_t> model_opsets(const onnx::ModelProto& m, const std::string& what) {
  std::map<std::string, int64_t> opsets;
  for (const auto& o : m.opset_import()) opsets[is_default_domain(o.domain()) ? "" : o.domain()] = o.version();
  if (m.ir_version() < 3 && opsets.empty()) opsets[""] = 1;
  if (m.ir_version() > 13)
    throw Error(what + ": IR version " + std::to_string(m.ir_version()) + " is newer than rlx knows (3 to 13)");
  return opsets;
}

}  // namespace

}  // namespace rlx::onnx_io

namespace rlx {

Graph import_onnx_bytes(const void* data, size_t size, const std::string& base_dir, const OnnxImportOptions& options) {
  const std::string what = "ONNX model";
  const onnx::ModelProto m = onnx_io::parse_model(data, size, what);
  if (!m.has_graph()) throw Error(what + ": the model has no graph");
  if (m.functions_size() > 0) throw Error(what + ": model-local functions are not supported");
  Graph g;
  onnx_io::Importer im(g, options, onnx_io::model_opsets(m, what), base_dir);
  im.import_main(m.graph());
  return g;
}

Graph import_onnx(const std::string& path, const OnnxImportOptions& options) {
  const std::string bytes = onnx_io::read_whole_file(path, "ONNX model");
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  try {
    return import_onnx_bytes(bytes.data(), bytes.size(), dir, options);
  } catch (const Error& e) {
    throw Error("ONNX model '" + path + "': " + e.what());
  }
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
  const std::string bytes = onnx_io::read_whole_file(path, "ONNX model");
  const onnx::ModelProto m = onnx_io::parse_model(bytes.data(), bytes.size(), "'" + path + "'");
  OnnxModelInfo info;
  info.ir_version = m.ir_version();
  for (const auto& o : m.opset_import()) info.opsets.emplace_back(o.domain(), o.version());
  info.producer = m.producer_name() + (m.producer_version().empty() ? "" : " " + m.producer_version());
  for (const auto& n : m.graph().node())
    ++info.op_histogram[(n.domain().empty() || n.domain() == "ai.onnx" ? "" : n.domain() + ":") + n.op_type()];
  std::set<std::string> inits;
  for (const auto& t : m.graph().initializer()) {
    inits.insert(t.name());
    int64_t n = 1;
    for (int64_t d : t.dims()) n = d > 0 ? n * d : 0;
    int64_t size = 0;
    try {
      size = static_cast<int64_t>(dtype_size(onnx_io::dtype_from_onnx(t.data_type(), "")));
    } catch (const Error&) {
      size = 0;
    }
    info.initializer_bytes += n * size;
  }
  for (const auto& vi : m.graph().input())
    if (!inits.count(vi.name())) info.inputs.push_back(io_info(vi));
  for (const auto& vi : m.graph().output()) info.outputs.push_back(io_info(vi));
  return info;
}

Tensor load_onnx_tensor(const std::string& path) {
  const std::string bytes = onnx_io::read_whole_file(path, "tensor file");
  onnx::TensorProto t;
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !t.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    throw Error("'" + path + "' is not a valid onnx.TensorProto");
  std::string dir = std::filesystem::path(path).parent_path().string();
  return onnx_io::tensor_from_proto(t, dir.empty() ? "." : dir, "'" + path + "'");
}

}  // namespace rlx
