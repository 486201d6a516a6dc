// What the `rlx` CLI reports, as Python values: check (how each op kind runs on a device), the
// optimizer's pass report, device profiles, the knob table, the built devices; and weight and
// tensor files (safetensors, ONNX TensorProto).
#include <algorithm>

#include "bindings.h"
#include "passes/legalize.h"
#include "passes/pipeline.h"
#include "plan/step_family.h"
#include "rlx/onnx.h"
#include "rlx/safetensors.h"
#include "runtime/backend.h"
#include "runtime/device_profile.h"
#ifdef RLX_HAVE_VULKAN
#include "backends/vulkan/vk_context.h"
#endif

namespace rlx::python {
namespace {

py::dict check(const Graph& g, const std::string& device, bool optimize) {
  const Device dev = device_from_name(device);
  auto backend = make_backend_for_check(dev);
  std::vector<passes::DispatchRow> rows;
  size_t ops_in = 0, ops_after = 0;
  std::string reason;
  {
    py::gil_scoped_release release;
    const Graph opt = optimize ? passes::optimize(g, *backend, CompileOptions{}) : g;
    const passes::ClaimFn claims = [&](const Graph& gr, const Node& n) { return backend->claims(gr, n); };
    rows = passes::dispatch_report(opt, claims);
    ops_in = passes::op_count(g);
    ops_after = passes::op_count(opt);
    bool unsupported = false;
    for (const auto& r : rows) unsupported = unsupported || r.unsupported > 0;
    if (unsupported) {
      try {  // the full legalize error names each node that cannot run
        const passes::ReasonFn why = [&](const Graph& gr, const Node& n) { return backend->unclaimed_reason(gr, n); };
        passes::legalize(opt, claims, device_name(dev), why);
      } catch (const Error& e) {
        reason = e.what();
      }
    }
  }
  // In the CLI's order: by kernel family, then as the dispatch report lists them.
  std::stable_sort(rows.begin(), rows.end(), [](const passes::DispatchRow& a, const passes::DispatchRow& b) {
    return plan::step_family(a.op) < plan::step_family(b.op);
  });
  py::list list;
  size_t native = 0, decomposed = 0, unsupported = 0;
  for (const auto& r : rows) {
    const auto family = plan::step_family(r.op);
    py::dict row;
    row["family"] = family ? plan::family_name(*family) : "?";
    row["op"] = r.op;
    row["native"] = r.native;
    row["decomposed"] = r.decomposed;
    row["unsupported"] = r.unsupported;
    list.append(row);
    native += r.native;
    decomposed += r.decomposed;
    unsupported += r.unsupported;
  }
  py::dict out;
  out["device"] = device_name(dev);
  out["ops_in"] = ops_in;
  out["ops_after"] = ops_after;
  out["rows"] = list;
  out["native"] = native;
  out["decomposed"] = decomposed;
  out["unsupported"] = unsupported;
  out["ok"] = unsupported == 0;
  out["reason"] = reason;
  return out;
}

py::tuple pass_report(const Graph& g, const std::string& device, const std::vector<std::string>& disabled) {
  const Device dev = device_from_name(device);
  auto backend = make_backend_for_check(dev);
  CompileOptions o;
  o.disabled_passes = disabled;
  std::vector<passes::PassStat> stats;
  {
    py::gil_scoped_release release;
    passes::check_pass_names(disabled);
    passes::optimize(g, *backend, o, &stats);
  }
  py::list rows;
  for (const auto& s : stats) {
    py::dict row;
    row["name"] = s.name;
    row["ms"] = s.ms;
    row["nodes_before"] = s.nodes_before;
    row["nodes_after"] = s.nodes_after;
    row["skipped"] = s.skipped;
    rows.append(row);
  }
  return py::make_tuple(rows, passes::format_report(stats));
}

py::dict numpy_dict(const std::map<std::string, Tensor>& tensors) {
  py::dict out;
  for (const auto& [name, t] : tensors) out[py::str(name)] = tensor_to_numpy(t);
  return out;
}

}  // namespace

void register_tools(py::module_& m) {
  m.def("_check", &check, py::arg("graph"), py::arg("device"), py::arg("optimize") = true);
  m.def("_pass_report", &pass_report, py::arg("graph"), py::arg("device"), py::arg("disabled_passes") = std::vector<std::string>{});
  m.def("pass_names", &passes::pipeline_pass_names, "Every optimizer pass name, in pipeline order.");
  m.def("devices", [] {
    std::vector<std::string> out;
    for (Device d : {Device::Cpu, Device::Cuda, Device::Vulkan, Device::WebGpu}) {
      try {
        make_backend_for_check(d);
        out.push_back(device_name(d));
      } catch (const Error&) {
      }
    }
    return out;
  }, "The devices this build has a backend for (a GPU may still be absent at run time).");
  m.def("enable_profile", [](const std::string& device) { enable_device_profile(device_from_name(device)); }, py::arg("device"),
        "Turns on per-step device times for a GPU backend ('cuda', 'vulkan', 'webgpu') in this process.");
  m.def("take_profile", [](const std::string& device) { return take_device_profile(device_from_name(device)); },
        py::arg("device"), "The profile table of the runs since the last call ('' when nothing was timed).");
  m.def("knobs", [] {
    py::list out;
    for (const KnobInfo& k : knob_table()) {
      py::dict row;
      row["name"] = k.name;
      row["variable"] = k.env;
      row["default"] = k.default_text;
      row["field"] = k.field;
      row["doc"] = k.doc;
      out.append(row);
    }
    return out;
  }, "The tuning knobs (Model compile options `knobs=`, or their RLX_* variables).");
  // For the tests: validation-layer errors seen so far (RLX_VULKAN_VALIDATION=1), as the C++
  // tests check after each Vulkan run. Empty in builds without Vulkan.
  m.def("_vulkan_validation_messages", [] {
#ifdef RLX_HAVE_VULKAN
    return vulkan::validation_messages();
#else
    return std::vector<std::string>{};
#endif
  });
  m.def("load_safetensors", [](const std::string& path) { return numpy_dict(load_safetensors(path)); }, py::arg("path"),
        "Every tensor of a safetensors file as NumPy arrays (bf16: uint16 bits).");
  m.def("save_safetensors", [](const std::string& path, const py::dict& tensors, const std::map<std::string, std::string>& metadata) {
          std::vector<std::pair<std::string, Tensor>> list;
          std::vector<py::object> keep;
          for (const auto& [k, v] : tensors) {
            const std::string name = k.cast<std::string>();
            HeldTensor h = tensor_from_py(v, std::nullopt, "tensor '" + name + "'");
            list.emplace_back(name, h.tensor);
            keep.push_back(h.keep);
          }
          save_safetensors(path, list, metadata);
        }, py::arg("path"), py::arg("tensors"), py::arg("metadata") = std::map<std::string, std::string>{},
        "Writes a dict of arrays (uint16: bf16) as a safetensors file.");
  m.def("onnx_info", [](const std::string& path) {
    const OnnxModelInfo info = onnx_model_info(path);
    auto ios = [](const std::vector<OnnxModelInfo::Io>& list) {
      py::list out;
      for (const auto& io : list) {
        py::dict d;
        d["name"] = io.name;
        d["type"] = io.type;
        d["shape"] = io.has_shape ? py::object(dims_to_py(io.dims)) : py::object(py::none());
        out.append(d);
      }
      return out;
    };
    py::dict d;
    d["ir_version"] = info.ir_version;
    d["producer"] = info.producer;
    d["inputs"] = ios(info.inputs);
    d["outputs"] = ios(info.outputs);
    d["opsets"] = info.opsets;
    d["op_histogram"] = info.op_histogram;
    d["initializer_bytes"] = info.initializer_bytes;
    return d;
  }, py::arg("path"),
        "Model-level facts of an ONNX file (as `rlx inspect`): ir_version, producer, opsets, inputs and "
        "outputs (name, ONNX type, dims or None), op_histogram, initializer_bytes.");
  m.def("load_onnx_tensor",
        [](const std::string& path, bool as_tensor) -> py::object {
          Tensor t = load_onnx_tensor(path);
          if (as_tensor) return py::cast(PyTensor{std::move(t), nullptr});
          return tensor_to_numpy(t);
        },
        py::arg("path"), py::arg("as_tensor") = false,
        "Reads a serialized onnx.TensorProto file (the ONNX test cases' input_<i>.pb): a NumPy array, or "
        "with as_tensor=True an rlx.Tensor keeping dtypes NumPy has no name for (bf16, u16 vs bf16 bits, "
        "float8, float4, int4, int2).");
}

}  // namespace rlx::python
