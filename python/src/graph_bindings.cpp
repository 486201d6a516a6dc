// rlx.Graph (the graph builder: ops as methods, dtypes, symbolic dims), rlx.Value (a node
// output, with arithmetic operators), graph files (JSON, ONNX) and value metadata.
#include "bindings.h"
#include "passes/specialize.h"
#include "rlx/onnx.h"

namespace rlx::python {
namespace {

using Axes = std::vector<int64_t>;

// The Value of `v` in graph `g`: rlx::Error when it belongs to another graph.
Value in_graph(const GraphPtr& g, const PyValue& v) {
  if (v.graph.get() != g.get())
    throw Error("a value of another rlx.Graph (" + Graph::value_str(v.value) + ") cannot be used here; "
                "values belong to the graph that made them");
  return v.value;
}

// A Value operand given as an rlx.Value or a Python number (a scalar of `like`'s dtype).
Value operand(const GraphPtr& g, const py::handle& h, DType like) {
  if (py::isinstance<PyValue>(h)) return in_graph(g, h.cast<const PyValue&>());
  if (py::isinstance<py::bool_>(h)) return g->scalar(h.cast<bool>() ? 1.0 : 0.0, like);
  if (py::isinstance<py::int_>(h) || py::isinstance<py::float_>(h)) return g->scalar(h.cast<double>(), like);
  throw Error("expected an rlx.Value or a number, got " + py::repr(h).cast<std::string>());
}

PyValue wrap(const GraphPtr& g, Value v) { return PyValue{g, v}; }

std::map<std::string, int64_t> dims_map(const py::object& dims) {
  std::map<std::string, int64_t> out;
  if (dims.is_none()) return out;
  for (const auto& [k, v] : dims.cast<py::dict>()) out[k.cast<std::string>()] = v.cast<int64_t>();
  return out;
}

OnnxImportOptions onnx_options(const py::object& dims, const py::object& known_inputs) {
  OnnxImportOptions o;
  o.dims = dims_map(dims);
  if (!known_inputs.is_none()) {
    for (const auto& [k, v] : known_inputs.cast<py::dict>()) {
      const std::string name = k.cast<std::string>();
      // Copied: the importer may keep the value in the graph (folded into constants).
      o.known_inputs[name] = tensor_from_py(v, std::nullopt, "known input '" + name + "'").tensor.clone();
    }
  }
  return o;
}

GraphPtr import_onnx_file(const std::string& path, const py::object& dims, const py::object& known_inputs) {
  const OnnxImportOptions o = onnx_options(dims, known_inputs);
  py::gil_scoped_release release;
  return std::make_shared<Graph>(import_onnx(path, o));
}

template <class Kind>
std::string method_name(Kind k) {
  std::string n = enum_name(k);
  if (n == "and" || n == "or" || n == "not") n += "_";  // Python keywords
  return n;
}

void def_value(py::module_& m) {
  py::class_<PyValue> v(m, "Value", "One output of a node of an rlx.Graph. Arithmetic operators add nodes to its graph.");
  v.def_property_readonly("shape", [](const PyValue& x) { return dims_to_py(x.graph->shape(x.value).dims); },
                          "Dims: ints, or strings for symbolic dims.")
      .def_property_readonly("dtype", [](const PyValue& x) { return dtype_name(x.graph->shape(x.value).dtype); })
      .def_property_readonly("node", [](const PyValue& x) { return x.value.node; })
      .def_property_readonly("port", [](const PyValue& x) { return x.value.port; })
      .def("__repr__", [](const PyValue& x) {
        return "rlx.Value(" + Graph::value_str(x.value) + ": " + x.graph->shape(x.value).str() + ")";
      });
  auto bin = [](BinaryKind k, bool reflected) {
    return [k, reflected](const PyValue& a, const py::handle& b) {
      const Value other = operand(a.graph, b, a.graph->shape(a.value).dtype);
      return wrap(a.graph, reflected ? a.graph->binary(k, other, a.value) : a.graph->binary(k, a.value, other));
    };
  };
  v.def("__add__", bin(BinaryKind::Add, false)).def("__radd__", bin(BinaryKind::Add, true))
      .def("__sub__", bin(BinaryKind::Sub, false)).def("__rsub__", bin(BinaryKind::Sub, true))
      .def("__mul__", bin(BinaryKind::Mul, false)).def("__rmul__", bin(BinaryKind::Mul, true))
      .def("__truediv__", bin(BinaryKind::Div, false)).def("__rtruediv__", bin(BinaryKind::Div, true))
      .def("__pow__", bin(BinaryKind::Pow, false)).def("__rpow__", bin(BinaryKind::Pow, true))
      .def("__matmul__", [](const PyValue& a, const PyValue& b) { return wrap(a.graph, a.graph->matmul(a.value, in_graph(a.graph, b))); })
      .def("__neg__", [](const PyValue& a) { return wrap(a.graph, a.graph->act(ActKind::Neg, a.value)); });
}

void def_value_info(py::module_& m) {
  py::class_<ValueInfo>(m, "ValueInfo", "Name, dtype and dims (ints, or strings for symbolic dims) of a graph input, output or param.")
      .def_readonly("name", &ValueInfo::name)
      .def_readonly("dtype", &ValueInfo::dtype)
      .def_readonly("shape", &ValueInfo::shape)
      .def("__repr__", [](const ValueInfo& i) {
        return "ValueInfo(name=" + py::repr(py::str(i.name)).cast<std::string>() + ", dtype='" + i.dtype +
               "', shape=" + py::repr(i.shape).cast<std::string>() + ")";
      });
}

}  // namespace

ValueInfo value_info(const std::string& name, const Shape& s) { return ValueInfo{name, dtype_name(s.dtype), dims_to_py(s.dims)}; }

std::vector<ValueInfo> graph_inputs(const Graph& g) {
  std::vector<ValueInfo> out;
  for (NodeId id : g.input_nodes()) {
    const auto& in = std::get<ops::Input>(g.node(id).op);
    out.push_back(value_info(in.name, in.shape));
  }
  return out;
}

std::vector<ValueInfo> graph_params(const Graph& g) {
  std::vector<ValueInfo> out;
  for (NodeId id : g.param_nodes()) {
    const auto& p = std::get<ops::Param>(g.node(id).op);
    out.push_back(value_info(p.name, p.shape));
  }
  return out;
}

std::vector<std::string> output_names(const Graph& g) {
  std::vector<std::string> names;
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const bool named = i < g.output_names().size() && !g.output_names()[i].empty();
    names.push_back(named ? g.output_names()[i] : "output_" + std::to_string(i));
  }
  return names;
}

std::vector<ValueInfo> graph_outputs(const Graph& g) {
  std::vector<ValueInfo> out;
  const auto names = output_names(g);
  for (size_t i = 0; i < names.size(); ++i) out.push_back(value_info(names[i], g.shape(g.outputs()[i])));
  return out;
}

void register_graph(py::module_& m) {
  def_value(m);
  def_value_info(m);
  py::class_<Graph, GraphPtr> g(m, "Graph", R"doc(
A typed tensor graph, built op by op. Each builder method adds a node, infers its shape and
dtype (raising rlx.Error naming the node when the operands are invalid) and returns an
rlx.Value. Dims are ints, or strings for symbolic dims ("batch", "seq").

    g = rlx.Graph()
    x = g.input("x", ["batch", 4])
    w = g.param("w", [4, 2])
    g.output(g.relu(x @ w), "y")
)doc");
  g.def(py::init<>())
      .def("input", [](const GraphPtr& self, const std::string& name, const py::handle& shape, const py::handle& dtype) {
             return wrap(self, self->input(name, Shape(dims_from_py(shape, "Graph.input"), dtype_from_py(dtype))));
           }, py::arg("name"), py::arg("shape"), py::arg("dtype") = "f32", "A graph input fed at every run.")
      .def("param", [](const GraphPtr& self, const std::string& name, const py::handle& shape, const py::handle& dtype) {
             return wrap(self, self->param(name, Shape(dims_from_py(shape, "Graph.param"), dtype_from_py(dtype))));
           }, py::arg("name"), py::arg("shape"), py::arg("dtype") = "f32",
           "A weight: static shape, set with Graph.set_weight or Model.set_param.")
      .def("constant", [](const GraphPtr& self, const py::handle& data, const py::object& dtype) {
             std::optional<DType> t;
             if (!dtype.is_none()) t = dtype_from_py(dtype);
             HeldTensor h = tensor_from_py(data, t, "Graph.constant");
             Tensor owned = t && h.tensor.dtype() != *t ? h.tensor.cast(*t) : h.tensor.clone();
             return wrap(self, self->constant(std::move(owned)));
           }, py::arg("data"), py::arg("dtype") = py::none(), "A constant tensor (copied into the graph).")
      .def("scalar", [](const GraphPtr& self, double v, const py::handle& dtype) { return wrap(self, self->scalar(v, dtype_from_py(dtype))); },
           py::arg("value"), py::arg("dtype") = "f32")
      .def("set_weight", [](const GraphPtr& self, const std::string& name, const py::handle& data) {
             HeldTensor h = tensor_from_py(data, std::nullopt, "weight '" + name + "'");
             self->set_weight(name, h.tensor.clone());
           }, py::arg("name"), py::arg("value"), "The value a compiled model uses for param `name` (copied).")
      .def("output", [](const GraphPtr& self, const PyValue& v, const std::string& name) { self->add_output(in_graph(self, v), name); },
           py::arg("value"), py::arg("name") = "", "Adds a graph output.")
      .def_property_readonly("outputs", [](const GraphPtr& self) {
        std::vector<PyValue> out;
        for (Value v : self->outputs()) out.push_back(wrap(self, v));
        return out;
      })
      .def_property_readonly("output_names", [](const Graph& self) { return output_names(self); })
      .def_property_readonly("input_info", [](const Graph& self) { return graph_inputs(self); })
      .def_property_readonly("output_info", [](const Graph& self) { return graph_outputs(self); })
      .def_property_readonly("param_info", [](const Graph& self) { return graph_params(self); })
      .def_property_readonly("weight_names", [](const Graph& self) {
        std::vector<std::string> names;
        for (const auto& [n, t] : self.weights()) names.push_back(n);
        return names;
      })
      .def("__len__", &Graph::size)
      .def("__str__", &Graph::to_text)
      .def("__repr__", [](const Graph& self) {
        return "rlx.Graph(" + std::to_string(self.size()) + " nodes, " + std::to_string(self.outputs().size()) + " outputs)";
      })
      .def("verify", &Graph::verify, "Raises rlx.Error listing every problem of the graph.")
      .def("verify_report", &Graph::verify_report, "Every problem of the graph (empty: valid).")
      .def("copy", [](const Graph& self) { return std::make_shared<Graph>(self); })
      .def("specialize", [](const Graph& self, const py::dict& dims) {
             return std::make_shared<Graph>(passes::specialize(self, dims_map(dims)));
           }, py::arg("dims"), "A copy with symbolic dims bound to values, e.g. {'batch': 1}.")
      .def("to_json", [](const Graph& self) { return graph_to_json(self); }, "The graph JSON text (data inline).")
      .def("save_json", [](const Graph& self, const std::string& path, bool inline_data) {
             JsonOptions o;
             o.inline_data = inline_data;
             save_graph_json(self, path, o);
           }, py::arg("path"), py::arg("inline_data") = true,
           "Writes graph JSON; inline_data=False puts tensor data in the side file '<path>.bin'.")
      .def_static("from_json", [](const std::string& text, const std::string& base_dir) {
                    return std::make_shared<Graph>(graph_from_json(text, base_dir));
                  }, py::arg("text"), py::arg("base_dir") = ".")
      .def_static("load_json", [](const std::string& path) {
                    py::gil_scoped_release release;
                    return std::make_shared<Graph>(load_graph_json(path));
                  }, py::arg("path"))
      .def_static("from_onnx", &import_onnx_file, py::arg("path"), py::arg("dims") = py::none(),
                  py::arg("known_inputs") = py::none(),
                  "Imports an ONNX model; `dims` binds symbolic input dims at import ({'batch': 1}); "
                  "`known_inputs` gives input values the importer needs at import time (a Reshape's shape, "
                  "...), which runs must then feed unchanged.")
      .def_static("from_onnx_bytes", [](const py::bytes& data, const py::object& dims, const py::object& known_inputs) {
                    const OnnxImportOptions o = onnx_options(dims, known_inputs);
                    const std::string bytes = data;
                    py::gil_scoped_release release;
                    return std::make_shared<Graph>(import_onnx_bytes(bytes.data(), bytes.size(), "", o));
                  }, py::arg("data"), py::arg("dims") = py::none(), py::arg("known_inputs") = py::none());

  // ---- elementwise: one method per binary / compare / activation kind ----
  for (size_t i = 0; i < EnumNames<BinaryKind>::names.size(); ++i) {
    const auto k = static_cast<BinaryKind>(i);
    g.def(method_name(k).c_str(), [k](const GraphPtr& self, const py::handle& a, const py::handle& b) {
      const DType like = py::isinstance<PyValue>(a) ? self->shape(a.cast<const PyValue&>().value).dtype
                         : py::isinstance<PyValue>(b) ? self->shape(b.cast<const PyValue&>().value).dtype : DType::F32;
      return wrap(self, self->binary(k, operand(self, a, like), operand(self, b, like)));
    }, py::arg("a"), py::arg("b"), ("Elementwise " + std::string(enum_name(k)) + " with NumPy broadcasting (numbers become scalars).").c_str());
  }
  for (size_t i = 0; i < EnumNames<CompareKind>::names.size(); ++i) {
    const auto k = static_cast<CompareKind>(i);
    g.def(method_name(k).c_str(), [k](const GraphPtr& self, const PyValue& a, const py::handle& b) {
      return wrap(self, self->compare(k, in_graph(self, a), operand(self, b, self->shape(a.value).dtype)));
    }, py::arg("a"), py::arg("b"), "Elementwise comparison -> bool.");
  }
  for (size_t i = 0; i < EnumNames<ActKind>::names.size(); ++i) {
    const auto k = static_cast<ActKind>(i);
    g.def(method_name(k).c_str(), [k](const GraphPtr& self, const PyValue& x) { return wrap(self, self->act(k, in_graph(self, x))); },
          py::arg("x"), ("Elementwise " + std::string(enum_name(k)) + ".").c_str());
  }
  g.def("where", [](const GraphPtr& self, const PyValue& c, const PyValue& a, const PyValue& b) {
         return wrap(self, self->where(in_graph(self, c), in_graph(self, a), in_graph(self, b)));
       }, py::arg("cond"), py::arg("a"), py::arg("b"))
      .def("cast", [](const GraphPtr& self, const PyValue& x, const py::handle& to) {
             return wrap(self, self->cast(in_graph(self, x), dtype_from_py(to)));
           }, py::arg("x"), py::arg("dtype"));

  // ---- shape ----
  g.def("reshape", [](const GraphPtr& self, const PyValue& x, const py::handle& shape) {
         return wrap(self, self->reshape(in_graph(self, x), dims_from_py(shape, "Graph.reshape")));
       }, py::arg("x"), py::arg("shape"))
      .def("transpose", [](const GraphPtr& self, const PyValue& x, Axes perm) { return wrap(self, self->transpose(in_graph(self, x), std::move(perm))); },
           py::arg("x"), py::arg("perm"))
      .def("narrow", [](const GraphPtr& self, const PyValue& x, int64_t axis, int64_t start, int64_t len) {
             return wrap(self, self->narrow(in_graph(self, x), axis, start, len));
           }, py::arg("x"), py::arg("axis"), py::arg("start"), py::arg("length"))
      .def("concat", [](const GraphPtr& self, const std::vector<PyValue>& xs, int64_t axis) {
             std::vector<Value> vs;
             for (const auto& x : xs) vs.push_back(in_graph(self, x));
             return wrap(self, self->concat(std::move(vs), axis));
           }, py::arg("values"), py::arg("axis"))
      .def("expand", [](const GraphPtr& self, const PyValue& x, const py::handle& shape) {
             return wrap(self, self->expand(in_graph(self, x), dims_from_py(shape, "Graph.expand")));
           }, py::arg("x"), py::arg("shape"))
      .def("reverse", [](const GraphPtr& self, const PyValue& x, Axes axes) { return wrap(self, self->reverse(in_graph(self, x), std::move(axes))); },
           py::arg("x"), py::arg("axes"))
      .def("stop_gradient", [](const GraphPtr& self, const PyValue& x) { return wrap(self, self->stop_gradient(in_graph(self, x))); }, py::arg("x"));

  // ---- indexing ----
  g.def("gather", [](const GraphPtr& self, const PyValue& d, const PyValue& i, int64_t axis) {
         return wrap(self, self->gather(in_graph(self, d), in_graph(self, i), axis));
       }, py::arg("data"), py::arg("indices"), py::arg("axis") = 0)
      .def("scatter_add", [](const GraphPtr& self, const PyValue& d, const PyValue& i, const PyValue& u, int64_t axis) {
             return wrap(self, self->scatter_add(in_graph(self, d), in_graph(self, i), in_graph(self, u), axis));
           }, py::arg("data"), py::arg("indices"), py::arg("updates"), py::arg("axis") = 0)
      .def("cache_write", [](const GraphPtr& self, const PyValue& c, const PyValue& r, const PyValue& p) {
             return wrap(self, self->cache_write(in_graph(self, c), in_graph(self, r), in_graph(self, p)));
           }, py::arg("cache"), py::arg("rows"), py::arg("positions"))
      .def("argmax", [](const GraphPtr& self, const PyValue& x, int64_t axis, bool keep) { return wrap(self, self->argmax(in_graph(self, x), axis, keep)); },
           py::arg("x"), py::arg("axis"), py::arg("keep_dims") = false)
      .def("argmin", [](const GraphPtr& self, const PyValue& x, int64_t axis, bool keep) { return wrap(self, self->argmin(in_graph(self, x), axis, keep)); },
           py::arg("x"), py::arg("axis"), py::arg("keep_dims") = false)
      .def("topk", [](const GraphPtr& self, const PyValue& x, int64_t k, int64_t axis, bool largest) {
             auto [values, indices] = self->topk(in_graph(self, x), k, axis, largest);
             return py::make_tuple(wrap(self, values), wrap(self, indices));
           }, py::arg("x"), py::arg("k"), py::arg("axis") = -1, py::arg("largest") = true, "(values, i64 indices)")
      .def("cumsum", [](const GraphPtr& self, const PyValue& x, int64_t axis, bool exclusive, bool reverse) {
             return wrap(self, self->cumsum(in_graph(self, x), axis, exclusive, reverse));
           }, py::arg("x"), py::arg("axis"), py::arg("exclusive") = false, py::arg("reverse") = false);

  // ---- contraction / reduction ----
  g.def("matmul", [](const GraphPtr& self, const PyValue& a, const PyValue& b) { return wrap(self, self->matmul(in_graph(self, a), in_graph(self, b))); },
        py::arg("a"), py::arg("b"), "NumPy matmul (batch dims broadcast).")
      .def("reduce", [](const GraphPtr& self, const std::string& kind, const PyValue& x, Axes axes, bool keep) {
             return wrap(self, self->reduce(enum_parse<ReduceKind>(kind), in_graph(self, x), std::move(axes), keep));
           }, py::arg("kind"), py::arg("x"), py::arg("axes") = Axes{}, py::arg("keep_dims") = false,
           "kind: sum, mean, max, min, prod; axes empty = all.")
      .def("sum", [](const GraphPtr& self, const PyValue& x, Axes axes, bool keep) { return wrap(self, self->sum(in_graph(self, x), std::move(axes), keep)); },
           py::arg("x"), py::arg("axes") = Axes{}, py::arg("keep_dims") = false)
      .def("mean", [](const GraphPtr& self, const PyValue& x, Axes axes, bool keep) { return wrap(self, self->mean(in_graph(self, x), std::move(axes), keep)); },
           py::arg("x"), py::arg("axes") = Axes{}, py::arg("keep_dims") = false)
      .def("softmax", [](const GraphPtr& self, const PyValue& x, int64_t axis) { return wrap(self, self->softmax(in_graph(self, x), axis)); },
           py::arg("x"), py::arg("axis") = -1)
      .def("log_softmax", [](const GraphPtr& self, const PyValue& x, int64_t axis) { return wrap(self, self->log_softmax(in_graph(self, x), axis)); },
           py::arg("x"), py::arg("axis") = -1);

  // ---- norms / transformer ----
  auto opt_value = [](const GraphPtr& self, const std::optional<PyValue>& v) -> std::optional<Value> {
    if (!v) return std::nullopt;
    return in_graph(self, *v);
  };
  g.def("layer_norm", [opt_value](const GraphPtr& self, const PyValue& x, const PyValue& gamma, const std::optional<PyValue>& beta, double eps, int64_t axis) {
         return wrap(self, self->layer_norm(in_graph(self, x), in_graph(self, gamma), opt_value(self, beta), eps, axis));
       }, py::arg("x"), py::arg("gamma"), py::arg("beta") = py::none(), py::arg("eps") = 1e-5, py::arg("axis") = -1)
      .def("rms_norm", [opt_value](const GraphPtr& self, const PyValue& x, const PyValue& gamma, const std::optional<PyValue>& beta, double eps, int64_t axis) {
             return wrap(self, self->rms_norm(in_graph(self, x), in_graph(self, gamma), opt_value(self, beta), eps, axis));
           }, py::arg("x"), py::arg("gamma"), py::arg("beta") = py::none(), py::arg("eps") = 1e-6, py::arg("axis") = -1)
      .def("rope", [](const GraphPtr& self, const PyValue& x, const PyValue& cos, const PyValue& sin, int64_t head_dim, int64_t n_rot, const std::string& style) {
             return wrap(self, self->rope(in_graph(self, x), in_graph(self, cos), in_graph(self, sin), head_dim, n_rot, enum_parse<RopeStyle>(style)));
           }, py::arg("x"), py::arg("cos"), py::arg("sin"), py::arg("head_dim"), py::arg("n_rot"), py::arg("style") = "neox")
      .def("attention", [opt_value](const GraphPtr& self, const PyValue& q, const PyValue& k, const PyValue& v, const std::optional<PyValue>& mask,
                                    int64_t num_heads, int64_t head_dim, std::optional<int64_t> num_kv_heads, const std::string& mask_kind,
                                    int64_t window, double score_scale, double softcap, const std::string& layout) {
             ops::Attention a;
             a.num_heads = num_heads;
             a.num_kv_heads = num_kv_heads.value_or(num_heads);
             a.head_dim = head_dim;
             a.mask_kind = enum_parse<MaskKind>(mask_kind);
             a.window = window;
             a.score_scale = score_scale;
             a.softcap = softcap;
             a.layout = enum_parse<AttnLayout>(layout);
             return wrap(self, self->attention(in_graph(self, q), in_graph(self, k), in_graph(self, v), opt_value(self, mask), a));
           }, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("mask") = py::none(), py::kw_only(), py::arg("num_heads"),
           py::arg("head_dim"), py::arg("num_kv_heads") = py::none(), py::arg("mask_kind") = "none", py::arg("window") = 0,
           py::arg("score_scale") = 0.0, py::arg("softcap") = 0.0, py::arg("layout") = "bshd",
           "Scaled dot-product attention. mask_kind: none, causal, sliding_window, custom, bias; layout: bshd, bhsd.");
}

}  // namespace rlx::python
