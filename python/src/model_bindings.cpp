// rlx.Model: a compiled graph run from Python. compile() (GIL released, interruptible with
// Ctrl-C), model(**inputs) / model.run(...) returning NumPy arrays, metadata, params and state.
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "bindings.h"
#include "rlx/onnx.h"
#include "runtime/device_api.h"

namespace rlx::python {
namespace {

// A model is either one compiled graph (`fixed`) or an ONNX model specialized per input-shape
// signature (`onnx`: imported and compiled at the first call of each signature; `last` is the
// compiled graph of the latest call).
struct Model {
  explicit Model(CompiledGraph c) : fixed(std::move(c)) {
    last = &*fixed;
    const Graph& g = fixed->graph();
    inputs = graph_inputs(g);
    names = output_names(g);
    for (NodeId id : g.input_nodes()) {
      const auto& in = std::get<ops::Input>(g.node(id).op);
      input_dtypes[in.name] = in.shape.dtype;
      input_order.push_back(in.name);
    }
    for (NodeId id : g.param_nodes()) {
      const auto& p = std::get<ops::Param>(g.node(id).op);
      param_dtypes[p.name] = p.shape.dtype;
    }
  }
  explicit Model(std::unique_ptr<OnnxModel> m) : onnx(std::move(m)) {
    for (const auto& in : onnx->inputs()) {
      inputs.push_back(value_info(in.name, in.shape));
      input_dtypes[in.name] = in.shape.dtype;
      input_order.push_back(in.name);
    }
    names = onnx->output_names();
  }
  // The compiled graph of the latest call; rlx::Error before the first call of an ONNX model
  // specialized per signature. `what` names the property asked for.
  CompiledGraph& current(const std::string& what) const {
    if (!last)
      throw Error("Model." + what + ": this ONNX model has symbolic input dims and is imported and compiled at its "
                  "first call for each input-shape signature; call it first (or load it with dims={...} binding "
                  "every symbolic dim)");
    return *last;
  }
  Device device() const { return fixed ? fixed->device() : onnx->options().device; }

  std::optional<CompiledGraph> fixed;
  std::unique_ptr<OnnxModel> onnx;
  CompiledGraph* last = nullptr;
  std::mutex run_mu;  // CompiledGraph::run is not reentrant; Python threads run without the GIL
  std::vector<ValueInfo> inputs;
  std::vector<std::string> names, input_order;
  std::map<std::string, DType> input_dtypes, param_dtypes;
};

Precision precision_from_name(const std::string& s) {
  for (Precision p : {Precision::Fp32, Precision::Tf32, Precision::Fp16, Precision::Bf16})
    if (s == precision_name(p)) return p;
  throw Error("unknown precision '" + s + "'; expected fp32, tf32, fp16 or bf16");
}

size_t output_index(const Model& m, const py::handle& h) {
  if (py::isinstance<py::str>(h)) {
    const std::string name = h.cast<std::string>();
    for (size_t i = 0; i < m.names.size(); ++i)
      if (m.names[i] == name) return i;
    std::string list;
    for (const auto& n : m.names) list += (list.empty() ? "'" : ", '") + n + "'";
    throw Error("unknown output '" + name + "'; the model's outputs are " + list);
  }
  const auto i = h.cast<int64_t>();
  if (i < 0 || static_cast<size_t>(i) >= m.names.size())
    throw Error("output index " + std::to_string(i) + " is out of range: the model has " + std::to_string(m.names.size()) + " outputs");
  return static_cast<size_t>(i);
}

// Compiles on a worker thread while this one waits without the GIL, checking for signals every
// 50 ms: Ctrl-C raises KeyboardInterrupt at once (the abandoned compile finishes in the
// background and is discarded) instead of after the whole compile.
CompiledGraph compile_interruptible(const Graph& graph, Device device, const CompileOptions& options) {
  struct Job {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::optional<CompiledGraph> result;
    std::exception_ptr error;
  };
  auto job = std::make_shared<Job>();
  auto work = std::make_shared<std::pair<Graph, CompileOptions>>(graph, options);
  std::thread([job, work, device] {
    std::optional<CompiledGraph> r;
    std::exception_ptr err;
    try {
      r.emplace(Session(device).compile(work->first, work->second));
    } catch (...) {
      err = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(job->mu);
    job->result = std::move(r);
    job->error = err;
    job->done = true;
    job->cv.notify_all();
  }).detach();
  for (;;) {
    {
      py::gil_scoped_release release;
      std::unique_lock<std::mutex> lock(job->mu);
      if (job->cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return job->done; })) break;
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
  std::lock_guard<std::mutex> lock(job->mu);
  if (job->error) std::rethrow_exception(job->error);
  return std::move(*job->result);
}

CompileOptions compile_options(const std::string& precision, int num_threads, bool optimize, bool verify,
                               bool pass_report, const std::vector<std::string>& disabled_passes,
                               const py::object& knobs) {
  CompileOptions o;
  o.precision = precision_from_name(precision);
  o.num_threads = num_threads;
  o.optimize = optimize;
  o.verify = verify;
  o.pass_report = pass_report;
  o.disabled_passes = disabled_passes;
  if (!knobs.is_none()) {
    for (const auto& [k, v] : knobs.cast<py::dict>()) {
      const std::string value = py::isinstance<py::bool_>(v) ? (v.cast<bool>() ? "1" : "0") : py::str(v).cast<std::string>();
      set_knob(o, k.cast<std::string>(), value);
    }
  }
  return o;
}

std::shared_ptr<Model> compile(const Graph& graph, const std::string& device, const std::string& precision, int num_threads,
                               bool optimize, bool verify, bool pass_report, const std::vector<std::string>& disabled_passes,
                               const py::object& knobs) {
  const CompileOptions o = compile_options(precision, num_threads, optimize, verify, pass_report, disabled_passes, knobs);
  return std::make_shared<Model>(compile_interruptible(graph, device_from_name(device), o));
}

// rlx.load of an ONNX model (a path, or the model's bytes): the model is imported with its
// symbolic dims and compiled once when that import succeeds (as rlx.Graph.from_onnx +
// rlx.compile); when a node needs a concrete dim (OnnxDimsError), the model is specialized per
// input-shape signature instead: each call's dims come from its arrays.
std::shared_ptr<Model> load_onnx(const py::object& source, const std::string& device, const std::string& precision,
                                 int num_threads, bool optimize, bool verify, bool pass_report,
                                 const std::vector<std::string>& disabled_passes, const py::object& knobs,
                                 const py::object& dims, size_t max_signatures) {
  OnnxModelOptions mo;
  mo.device = device_from_name(device);
  mo.compile = compile_options(precision, num_threads, optimize, verify, pass_report, disabled_passes, knobs);
  mo.max_signatures = max_signatures;
  if (!dims.is_none())
    for (const auto& [k, v] : dims.cast<py::dict>()) mo.import.dims[k.cast<std::string>()] = v.cast<int64_t>();
  std::unique_ptr<OnnxModel> m;
  std::optional<Graph> graph;
  {
    std::string bytes;
    std::string path;
    const bool is_bytes = py::isinstance<py::bytes>(source);
    if (is_bytes) bytes = source.cast<std::string>();
    else path = py::str(source).cast<std::string>();
    py::gil_scoped_release release;
    m = is_bytes ? std::make_unique<OnnxModel>(bytes.data(), bytes.size(), "", std::move(mo))
                 : std::make_unique<OnnxModel>(path, std::move(mo));
    try {
      graph = m->import();
    } catch (const OnnxDimsError&) {
      graph.reset();  // specialized per signature
    }
  }
  if (graph) return std::make_shared<Model>(compile_interruptible(*graph, m->options().device, m->options().compile));
  return std::make_shared<Model>(std::move(m));
}

py::list run(Model& m, const std::vector<std::pair<std::string, py::handle>>& feeds, const py::object& outputs, bool as_tensors,
             bool device_outputs = false, const py::object& out = py::none()) {
  NamedTensors named;
  named.reserve(feeds.size());
  std::vector<py::object> keep;
  keep.reserve(feeds.size());
  for (const auto& [name, obj] : feeds) {
    const auto it = m.input_dtypes.find(name);
    const std::optional<DType> expected = it == m.input_dtypes.end() ? std::nullopt : std::optional(it->second);
    HeldTensor h = tensor_from_py(obj, expected, "input '" + name + "'");
    named.emplace_back(name, std::move(h.tensor));
    keep.push_back(std::move(h.keep));
  }
  std::vector<size_t> which;
  if (outputs.is_none()) {
    which.resize(m.names.size());
    for (size_t i = 0; i < which.size(); ++i) which[i] = i;
  } else if (py::isinstance<py::str>(outputs) || py::isinstance<py::int_>(outputs)) {
    which.push_back(output_index(m, outputs));  // one name or index
  } else {
    for (const py::handle h : outputs) which.push_back(output_index(m, h));
  }
  // Caller-provided device buffers (rlx.Tensors or DLPack CUDA tensors), one per output returned.
  RunOptions options;
  options.device_outputs = device_outputs;
  std::vector<py::object> out_objects;
  if (!out.is_none()) {
    if (py::isinstance<py::str>(out) || !py::isinstance<py::sequence>(out))
      throw Error("Model.run: out must be a list of device tensors (one per output returned), got " +
                  py::repr(out).cast<std::string>());
    size_t i = 0;
    for (const py::handle h : out) {
      if (!py::isinstance<PyTensor>(h) && !py::hasattr(h, "__dlpack__"))
        throw Error("Model.run: out[" + std::to_string(i) + "] is " + py::repr(h).cast<std::string>() +
                    "; it must be an rlx.Tensor or a DLPack tensor in device memory");
      HeldTensor held = tensor_from_py(h, std::nullopt, "out[" + std::to_string(i) + "]");
      options.out.push_back(std::move(held.tensor));
      keep.push_back(std::move(held.keep));
      out_objects.push_back(py::reinterpret_borrow<py::object>(h));
      ++i;
    }
  }
  std::vector<Tensor> result;
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(m.run_mu);
    if (m.onnx) m.last = &m.onnx->compiled(named);
    result = m.last->run(named, which, options);
  }
  py::list list(result.size());
  for (size_t i = 0; i < result.size(); ++i) {
    if (!out_objects.empty()) list[i] = out_objects[i];  // the caller's object, now holding output i
    else if (as_tensors || result[i].is_device()) list[i] = py::cast(PyTensor{std::move(result[i]), nullptr});
    else list[i] = tensor_to_numpy(result[i]);
  }
  return list;
}

std::vector<std::pair<std::string, py::handle>> feeds_from_mapping(const py::handle& inputs) {
  std::vector<std::pair<std::string, py::handle>> feeds;
  if (!py::isinstance<py::dict>(inputs))
    throw Error("Model.run: inputs must be a dict of name -> array, got " + py::repr(inputs).cast<std::string>());
  for (const auto& [k, v] : py::reinterpret_borrow<py::dict>(inputs)) {
    if (!py::isinstance<py::str>(k)) throw Error("Model.run: input names are strings, got " + py::repr(k).cast<std::string>());
    feeds.emplace_back(k.cast<std::string>(), v);
  }
  return feeds;
}

}  // namespace

void register_model(py::module_& m) {
  py::class_<Model, std::shared_ptr<Model>>(m, "Model", R"doc(
A graph compiled for a device (rlx.load / rlx.compile). Call it with the inputs by name
(``model(x=array)``, or positionally in input order): it returns the output as a NumPy array,
or a tuple of arrays when the graph has several outputs. ``model.run(inputs, outputs=[...])``
returns a list. Inputs are NumPy arrays (C-contiguous ones are read in place), rlx.Tensors,
objects with __dlpack__ (host memory, or CUDA memory for a model on 'cuda'), or lists/scalars
(converted to the input's dtype).
Outputs are NumPy arrays over rlx's result buffers (no copy); bf16 ones are uint16 bits
(pass as_tensors=True for rlx.Tensors, which carry bf16 through DLPack).
A model runs one call at a time (calls from several threads wait for each other).
)doc")
      .def("__call__", [](Model& self, const py::args& args, const py::kwargs& kwargs) -> py::object {
             std::vector<std::pair<std::string, py::handle>> feeds;
             if (args.size() > self.input_order.size())
               throw Error("Model: got " + std::to_string(args.size()) + " positional inputs, the model has " +
                           std::to_string(self.input_order.size()));
             for (size_t i = 0; i < args.size(); ++i) feeds.emplace_back(self.input_order[i], args[i]);
             for (const auto& [k, v] : kwargs) feeds.emplace_back(k.cast<std::string>(), v);
             py::list out = run(self, feeds, py::none(), false);
             if (out.size() == 1) return out[0];
             return py::tuple(out);
           })
      .def("run", [](Model& self, const py::handle& inputs, const py::object& outputs, bool as_tensors,
                     bool device_outputs, const py::object& out) {
             return run(self, feeds_from_mapping(inputs), outputs, as_tensors, device_outputs, out);
           }, py::arg("inputs"), py::arg("outputs") = py::none(), py::arg("as_tensors") = false, py::kw_only(),
           py::arg("device_outputs") = false, py::arg("out") = py::none(),
           "Runs with a dict of inputs; returns a list of the outputs named or indexed by `outputs` "
           "(a list, or one name or index; default: all, in order), as NumPy arrays or (as_tensors=True) "
           "rlx.Tensors. On CUDA, inputs may be CUDA tensors (DLPack, e.g. torch); device_outputs=True "
           "returns rlx.Tensors in device memory (no host copy), and out=[...] (device tensors, one per "
           "output returned) has the outputs written into the caller's buffers; those objects are returned.")
      .def("set_param", [](Model& self, const std::string& name, const py::handle& value) {
             const auto it = self.param_dtypes.find(name);
             const std::optional<DType> expected = it == self.param_dtypes.end() ? std::nullopt : std::optional(it->second);
             HeldTensor h = tensor_from_py(value, expected, "param '" + name + "'");
             std::lock_guard<std::mutex> lock(self.run_mu);
             if (self.onnx) {  // a new initializer value: every signature is imported again
               self.onnx->set_initializer(name, h.tensor);
               self.last = nullptr;
               return;
             }
             self.fixed->set_param(name, h.tensor);
           }, py::arg("name"), py::arg("value"),
           "Sets (copies) the value of a param; dtype and shape must match. (An ONNX model specialized per "
           "signature takes any initializer by name and imports again at the next call.)")
      .def("bind_state", [](Model& self, const std::string& input, const py::handle& output) {
             if (self.onnx)
               throw Error("Model.bind_state: this ONNX model is specialized per input-shape signature (a node needs "
                           "concrete dims); load it with dims={...} binding every symbolic dim to carry state");
             self.fixed->bind_state(input, output_index(self, output));
           }, py::arg("input"), py::arg("output"),
           "After each run, output `output` (name or index) becomes input `input` of the next run, "
           "without a host round trip; passing that input explicitly overrides it.")
      .def("reset_state", [](Model& self) {
             if (self.fixed) self.fixed->reset_state();
           }, "Forgets carried state (the next run needs those inputs again).")
      .def("export_web", [](Model& self, const std::string& dir, const py::object& dims, bool f16_weights) {
             if (self.onnx)
               throw Error("Model.export_web: this ONNX model is specialized per input-shape signature (a node needs "
                           "concrete dims); load it with dims={...} binding every symbolic dim");
             WebExportOptions o;
             o.f16_weights = f16_weights;
             if (!dims.is_none())
               for (const auto& [k, v] : dims.cast<py::dict>()) o.dims[k.cast<std::string>()] = v.cast<int64_t>();
             WebExportSummary s;
             {
               py::gil_scoped_release release;
               s = self.fixed->export_web(dir, o);
             }
             py::dict d;
             d["files"] = s.files;
             d["target"] = s.target;
             d["kernels"] = s.kernels;
             d["dispatches"] = s.dispatches;
             d["weight_bytes"] = s.weight_bytes;
             d["buffer_bytes"] = s.buffer_bytes;
             return d;
           }, py::arg("dir"), py::arg("dims") = py::none(), py::arg("f16_weights") = false,
           "Writes a web bundle of this model into folder `dir` (docs/web-export.md): its WebGPU program, "
           "weights, the rlx-web.js module that runs it in a browser, a demo page. Compile with "
           "device='webgpu' and knobs={'webgpu_limits': 'web'}; `dims` binds symbolic input dims. Returns "
           "{'files', 'target', 'kernels', 'dispatches', 'weight_bytes', 'buffer_bytes'}.")
      .def_readonly("inputs", &Model::inputs, "ValueInfo of every input: name, dtype, dims (str = symbolic).")
      .def_property_readonly("outputs", [](const Model& self) { return graph_outputs(self.current("outputs").graph()); },
                             "ValueInfo of every output (of the latest call's signature for a specialized ONNX model).")
      .def_property_readonly("params", [](const Model& self) { return graph_params(self.current("params").graph()); },
                             "ValueInfo of every param (weight).")
      .def_readonly("input_names", &Model::input_order)
      .def_readonly("output_names", &Model::names)
      .def_property_readonly("device", [](const Model& self) { return std::string(device_name(self.device())); })
      .def_property_readonly("graph", [](const Model& self) { return std::make_shared<Graph>(self.current("graph").graph()); },
                             "A copy of the graph it was compiled from (the latest call's, for a specialized ONNX model).")
      .def_property_readonly("arena_bytes", [](const Model& self) { return self.current("arena_bytes").arena_bytes(); },
                             "Bytes of the intermediate-value arena of the last run's plan.")
      .def_property_readonly("specialized", [](const Model& self) { return self.onnx != nullptr; },
                             "True for an ONNX model imported and compiled per input-shape signature.")
      .def_property_readonly("cache_stats", [](const Model& self) -> py::object {
             if (!self.onnx) return py::none();
             const OnnxModel::Stats s = self.onnx->stats();
             py::dict d;
             d["runs"] = s.runs;
             d["imports"] = s.imports;
             d["hits"] = s.hits;
             d["evictions"] = s.evictions;
             d["cached"] = s.cached;
             return d;
           }, "For a specialized ONNX model: {'runs', 'imports', 'hits', 'evictions', 'cached'} of its "
              "per-signature cache; None otherwise.")
      .def("__repr__", [](const Model& self) {
        return "rlx.Model(device='" + std::string(device_name(self.device())) + "', inputs=" + std::to_string(self.inputs.size()) +
               ", outputs=" + std::to_string(self.names.size()) + (self.onnx ? ", specialized per input shapes" : "") + ")";
      });
  m.def("device_stats", [] {
    const DeviceStats s = device_stats();
    py::dict d;
    d["uploads"] = s.uploads;
    d["upload_bytes"] = s.upload_bytes;
    d["downloads"] = s.downloads;
    d["download_bytes"] = s.download_bytes;
    d["device_copies"] = s.device_copies;
    d["device_copy_bytes"] = s.device_copy_bytes;
    d["flag_reads"] = s.flag_reads;
    d["param_uploads"] = s.param_uploads;
    return d;
  }, "Process-wide counters of the device runtime (every GPU backend): host -> device copies "
     "(uploads, upload_bytes), device -> host copies of values (downloads, download_bytes; "
     "Tensor.to_host included), device -> device copies (device_copies, device_copy_bytes; device "
     "tensors' inputs and outputs), error-flag reads, param uploads. Take differences.");
  m.def("compile", &compile, py::arg("graph"), py::arg("device") = "cpu", py::arg("precision") = "fp32",
        py::arg("num_threads") = 0, py::arg("optimize") = true, py::arg("verify") = true, py::arg("pass_report") = false,
        py::arg("disabled_passes") = std::vector<std::string>{}, py::arg("knobs") = py::none(),
        "Compiles an rlx.Graph for a device ('cpu', 'cuda', 'vulkan', 'webgpu'). The GIL is released; "
        "Ctrl-C interrupts the wait.");
  m.def("_load_onnx", &load_onnx, py::arg("source"), py::arg("device") = "cpu", py::arg("precision") = "fp32",
        py::arg("num_threads") = 0, py::arg("optimize") = true, py::arg("verify") = true, py::arg("pass_report") = false,
        py::arg("disabled_passes") = std::vector<std::string>{}, py::arg("knobs") = py::none(),
        py::arg("dims") = py::none(), py::arg("max_signatures") = 8,
        "rlx.load of an ONNX model (path or bytes): compiled once when it imports with its symbolic dims, "
        "else specialized per input-shape signature.");
}

}  // namespace rlx::python
