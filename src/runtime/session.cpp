#include "rlx/session.h"

#include <algorithm>
#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "io/web_bundle.h"
#include "passes/hoist.h"
#include "passes/pipeline.h"
#include "passes/specialize.h"
#include "runtime/backend.h"
#include "runtime/knobs.h"

namespace rlx {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::Fp32: return "fp32";
    case Precision::Tf32: return "tf32";
    case Precision::Fp16: return "fp16";
    case Precision::Bf16: return "bf16";
  }
  return "?";
}

const char* device_name(Device d) {
  switch (d) {
    case Device::Cpu: return "cpu";
    case Device::Cuda: return "cuda";
    case Device::Vulkan: return "vulkan";
    case Device::WebGpu: return "webgpu";
  }
  return "?";
}

Device device_from_name(const std::string& name) {
  for (Device d : {Device::Cpu, Device::Cuda, Device::Vulkan, Device::WebGpu})
    if (name == device_name(d)) return d;
  throw Error("unknown device '" + name + "' (expected cpu, cuda, vulkan or webgpu)");
}

namespace {
constexpr size_t kMaxVariants = 8;  // compiled shape bindings kept (LRU)

std::string names_list(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + ("'" + names[i] + "'");
  return s.empty() ? "(none)" : s;
}
}  // namespace

// One compiled shape binding: the backend's variant plus the leaf nodes of its (optimized)
// graph by name, since optimization renumbers nodes.
// Weight-only computations (e.g. concatenated weights made by fusions) run in a CPU prologue
// whenever a param changes, and reach the variant as derived params.
struct CompiledVariant {
  std::unique_ptr<Variant> variant;
  std::vector<std::pair<NodeId, std::string>> inputs, params;
  std::unique_ptr<Variant> prologue;  // null when nothing is hoisted
  std::vector<std::pair<NodeId, std::string>> prologue_params;
  std::vector<std::string> derived_names;
  std::map<std::string, Tensor> derived;  // by derived param name
  uint64_t derived_generation = UINT64_MAX;
};

struct CompiledGraph::Impl {
  Device device = Device::Cpu;
  CompileOptions options;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Backend> prologue_backend;  // CPU, for weight-only prologues
  Graph graph;
  bool is_static = true;
  std::map<std::string, NodeId> input_ids, param_ids;
  std::map<std::string, Tensor> params;  // by name
  uint64_t params_generation = 0;
  std::vector<std::pair<std::string, size_t>> state_bindings;
  using Binding = std::map<std::string, int64_t>;
  // A carried value (bind_state). Normally it stays where the run that made it left it (device
  // memory on a GPU): output `output` of the last run, on the variant of `binding`, which kept it
  // (RunArgs::keep) and hands it to its next run (RunArgs::carry) without a host round trip.
  // `host` holds it instead once it left that variant (a run on another shape binding): a host
  // tensor, or on a backend that takes device tensors (CUDA) a device tensor rlx owns, which the
  // next variant copies device to device.
  struct Carried {
    std::optional<Tensor> host;
    Binding binding;
    size_t output = 0;
    DType dtype = DType::F32;
    std::vector<int64_t> dims;
  };
  std::map<std::string, Carried> state;  // by input name
  std::list<std::pair<Binding, CompiledVariant>> variants;  // most recent first
  size_t last_arena = 0;
  size_t compiles = 0;  // variants prepared (compile_count)

  // The shape binding runs on another variant than the one holding carried values: they leave
  // it (device to device where the backend takes device tensors, else one download each) and
  // are given to the next variant as inputs. This happens when the carried
  // state changes shape (e.g. a growing cache with a symbolic length), which also compiles or
  // picks another variant; a run at a fixed shape never comes here.
  void carried_to_host_unless(const Binding& b) {
    std::map<Binding, std::vector<std::pair<std::string, size_t>>> by_binding;
    for (const auto& [name, c] : state)
      if (!c.host && c.binding != b) by_binding[c.binding].emplace_back(name, c.output);
    for (const auto& [from, entries] : by_binding) {
      auto it = std::find_if(variants.begin(), variants.end(), [&](const auto& v) { return v.first == from; });
      if (it == variants.end()) throw Error("internal: the variant holding the carried state is gone");
      std::vector<size_t> which;
      for (const auto& e : entries) which.push_back(e.second);
      std::vector<Tensor> got = it->second.variant->kept_outputs(which, backend->device_tensors());
      for (size_t i = 0; i < entries.size(); ++i) state.at(entries[i].first).host = std::move(got[i]);
    }
  }

  // A failed run may have overwritten what its variant kept: carried values not on the host
  // are forgotten (the next run asks for those inputs).
  void forget_device_state() {
    for (auto it = state.begin(); it != state.end();) it = it->second.host ? std::next(it) : state.erase(it);
  }

  CompiledVariant& variant_for(const Binding& b) {
    for (auto it = variants.begin(); it != variants.end(); ++it) {
      if (it->first == b) {
        variants.splice(variants.begin(), variants, it);
        return variants.front().second;
      }
    }
    Graph g = is_static ? graph : passes::specialize(graph, b);
    g = passes::optimize_for_backend(g, *backend, options);
    CompiledVariant cv;
    if (options.optimize) {
      passes::HoistedGraph h = passes::hoist_param_computations(g);
      if (!h.derived.empty()) {
        g = std::move(h.main);
        for (NodeId id : h.prologue.param_nodes())
          cv.prologue_params.emplace_back(id, std::get<ops::Param>(h.prologue.node(id).op).name);
        if (!prologue_backend) prologue_backend = make_cpu_backend(options);  // the same thread budget
        cv.prologue = prologue_backend->prepare(std::move(h.prologue), options);
        cv.derived_names = std::move(h.derived);
      }
    }
    for (NodeId id : g.input_nodes()) cv.inputs.emplace_back(id, std::get<ops::Input>(g.node(id).op).name);
    for (NodeId id : g.param_nodes()) cv.params.emplace_back(id, std::get<ops::Param>(g.node(id).op).name);
    cv.variant = backend->prepare(std::move(g), options);
    ++compiles;
    variants.emplace_front(b, std::move(cv));
    if (variants.size() > kMaxVariants) variants.pop_back();
    return variants.front().second;
  }

  // Runs the weight prologue of `cv` when the params changed since its last run.
  void derive_params(CompiledVariant& cv) {
    if (!cv.prologue || cv.derived_generation == params_generation) return;
    std::unordered_map<NodeId, Tensor> pl;
    for (const auto& [id, name] : cv.prologue_params) pl[id] = params.at(name);
    std::vector<size_t> all(cv.derived_names.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    std::vector<Tensor> vals = cv.prologue->run(RunArgs{pl, all, &params, params_generation});
    for (size_t i = 0; i < vals.size(); ++i) cv.derived[cv.derived_names[i]] = std::move(vals[i]);
    cv.derived_generation = params_generation;
  }

  // The value variant `cv` gets for its param `name`: the prologue's derived one, else the user's.
  const Tensor& param_value(const CompiledVariant& cv, const std::string& name) const {
    auto d = cv.derived.find(name);
    return d != cv.derived.end() ? d->second : params.at(name);
  }

  // The names of params without values ("" when every param has one).
  std::string missing_params() const {
    std::vector<std::string> missing;
    for (const auto& [name, id] : param_ids)
      if (!params.count(name)) missing.push_back(name);
    return missing.empty() ? std::string() : names_list(missing);
  }

  // The dtype and dims of one input's value for this run (a tensor or a carried value).
  struct FeedShape {
    DType dtype = DType::F32;
    const std::vector<int64_t>* dims = nullptr;
  };

  // Binds symbolic dims from the inputs' shapes; checks every static dim and dtype.
  Binding bind_dims(const std::map<std::string, FeedShape>& feeds) const {
    Binding b;
    for (const auto& [name, id] : input_ids) {
      const auto& in = std::get<ops::Input>(graph.node(id).op);
      const FeedShape& t = feeds.at(name);
      const std::vector<int64_t>& dims = *t.dims;
      const int64_t rank = static_cast<int64_t>(dims.size());
      if (t.dtype != in.shape.dtype)
        throw Error("input '" + name + "': got dtype " + dtype_name(t.dtype) + ", the graph expects " +
                    in.shape.str() + " (cast it before running)");
      if (rank != in.shape.rank())
        throw Error("input '" + name + "': got shape " + dims_str(dims) + " (rank " + std::to_string(rank) +
                    "), the graph expects " + in.shape.str());
      for (int64_t d = 0; d < rank; ++d) {
        const Dim& want = in.shape.dims[d];
        const int64_t got = dims[static_cast<size_t>(d)];
        if (want.is_static()) {
          if (want.value != got)
            throw Error("input '" + name + "': dim " + std::to_string(d) + " is " + std::to_string(got) +
                        ", the graph expects " + in.shape.str() + " (element count or shape mismatch)");
        } else {
          auto [it, inserted] = b.emplace(want.sym, got);
          if (!inserted && it->second != got)
            throw Error("input '" + name + "': symbolic dim '" + want.sym + "' is " + std::to_string(got) +
                        " here but " + std::to_string(it->second) + " in another input");
        }
      }
    }
    return b;
  }
};

CompiledGraph::CompiledGraph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompiledGraph::CompiledGraph(CompiledGraph&&) noexcept = default;
CompiledGraph& CompiledGraph::operator=(CompiledGraph&&) noexcept = default;
CompiledGraph::~CompiledGraph() = default;

const Graph& CompiledGraph::graph() const { return impl_->graph; }
Device CompiledGraph::device() const { return impl_->device; }
size_t CompiledGraph::arena_bytes() const { return impl_->last_arena; }
size_t CompiledGraph::compile_count() const { return impl_->compiles; }

std::vector<std::string> CompiledGraph::input_names() const {
  std::vector<std::string> out;
  for (NodeId id : impl_->graph.input_nodes()) out.push_back(std::get<ops::Input>(impl_->graph.node(id).op).name);
  return out;
}
std::vector<std::string> CompiledGraph::param_names() const {
  std::vector<std::string> out;
  for (NodeId id : impl_->graph.param_nodes()) out.push_back(std::get<ops::Param>(impl_->graph.node(id).op).name);
  return out;
}

void CompiledGraph::set_param(const std::string& name, Tensor&& value) {
  if (!value.owns_alone()) return set_param(name, static_cast<const Tensor&>(value));
  check_param_value(name, value);
  impl_->params[name] = std::move(value);
  ++impl_->params_generation;
}

void CompiledGraph::set_param(const std::string& name, const Tensor& value) {
  check_param_value(name, value);
  impl_->params[name] = translate_errors("set_param", [&] { return value.clone(); });
  ++impl_->params_generation;
}

void CompiledGraph::check_param_value(const std::string& name, const Tensor& value) const {
  auto it = impl_->param_ids.find(name);
  if (it == impl_->param_ids.end())
    throw Error("set_param: the graph has no param named '" + name + "' (params: " + names_list(param_names()) + ")");
  const auto& p = std::get<ops::Param>(impl_->graph.node(it->second).op);
  if (value.is_device())
    throw Error("set_param('" + name + "'): the value is in " + device_name(value.device()) +
                " memory; params are copied from host tensors (pass value.to_host())");
  if (value.dtype() != p.shape.dtype)
    throw Error("set_param('" + name + "'): got dtype " + dtype_name(value.dtype()) + ", the param is " + p.shape.str());
  if (!p.shape.is_static())
    throw Error("set_param('" + name + "'): params must have static shapes, this one is " + p.shape.str());
  if (value.shape() != p.shape.concrete())
    throw Error("set_param('" + name + "'): got shape " + dims_str(value.shape()) + " (" +
                std::to_string(value.numel()) + " elements), the param is " + p.shape.str() + " (" +
                std::to_string(p.shape.numel()) + " elements)");
}

void CompiledGraph::bind_state(const std::string& input_name, size_t output_index) {
  auto it = impl_->input_ids.find(input_name);
  if (it == impl_->input_ids.end())
    throw Error("bind_state: the graph has no input named '" + input_name + "' (inputs: " +
                names_list(input_names()) + ")");
  const auto& outs = impl_->graph.outputs();
  if (output_index >= outs.size())
    throw Error("bind_state('" + input_name + "'): output index " + std::to_string(output_index) +
                " is out of range (the graph has " + std::to_string(outs.size()) + " outputs)");
  const Shape& in_shape = std::get<ops::Input>(impl_->graph.node(it->second).op).shape;
  const Shape& out_shape = impl_->graph.shape(outs[output_index]);
  if (in_shape.dtype != out_shape.dtype || in_shape.rank() != out_shape.rank())
    throw Error("bind_state('" + input_name + "'): output " + std::to_string(output_index) + " is " +
                out_shape.str() + " but the input is " + in_shape.str());
  for (auto& [n, k] : impl_->state_bindings)
    if (n == input_name) {
      k = output_index;
      return;
    }
  impl_->state_bindings.emplace_back(input_name, output_index);
}

void CompiledGraph::reset_state() { impl_->state.clear(); }

std::vector<Tensor> CompiledGraph::run(const NamedTensors& inputs) {
  std::vector<size_t> all(impl_->graph.outputs().size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return run(inputs, all);
}

std::vector<Tensor> CompiledGraph::run(const NamedTensors& inputs, const std::vector<size_t>& output_indices) {
  return run(inputs, output_indices, RunOptions{});
}

std::vector<Tensor> CompiledGraph::run(const NamedTensors& inputs, const std::vector<size_t>& output_indices,
                                       const RunOptions& options) {
  ScopedLimits scoped(impl_->options.limits);
  return translate_errors("run", [&] { return run_checked(inputs, output_indices, options); });
}

namespace {
std::string memory_of(const Tensor& t) {
  return t.is_device() ? std::string(device_name(t.device())) + " memory (device " + std::to_string(t.device_ordinal()) + ")"
                       : std::string("host memory");
}
}  // namespace

std::vector<Tensor> CompiledGraph::run_checked(const NamedTensors& inputs, const std::vector<size_t>& output_indices,
                                               const RunOptions& options) {
  Impl& m = *impl_;
  // Device tensors: only those of the compiled device, and only where the backend takes them.
  const bool takes_device = m.backend->device_tensors();
  const std::string compiled_for = std::string("this graph was compiled for ") + device_name(m.device);
  for (const auto& [name, t] : inputs) {
    if (!t.is_device()) continue;
    if (t.device() != m.device)
      throw Error("run: input '" + name + "' is in " + memory_of(t) + " but " + compiled_for +
                  "; copy it to the host first (Tensor::to_host) or compile the graph for " + device_name(t.device()));
    if (!takes_device)
      throw Error("run: input '" + name + "' is a " + device_name(t.device()) + " device tensor, which the " +
                  device_name(m.device) + " backend does not take; pass a host tensor (Tensor::to_host)");
  }
  if ((options.device_outputs || !options.out.empty()) && !takes_device)
    throw Error(std::string("run: device outputs were asked for, but ") + compiled_for +
                ", whose backend returns host tensors only; run without RunOptions::device_outputs / out");
  if (options.device_outputs && !options.out.empty())
    throw Error("run: RunOptions::device_outputs and RunOptions::out are exclusive (out already says where outputs go)");
  if (!options.out.empty() && options.out.size() != output_indices.size())
    throw Error("run: RunOptions::out has " + std::to_string(options.out.size()) + " tensors for " +
                std::to_string(output_indices.size()) + " requested outputs (give one per output, or none)");
  for (size_t i = 0; i < options.out.size(); ++i) {
    const Tensor& o = options.out[i];
    if (!o.is_device() || o.device() != m.device)
      throw Error("run: RunOptions::out[" + std::to_string(i) + "] is in " + memory_of(o) + "; it must be a " +
                  device_name(m.device) + " device tensor (" + compiled_for + ")");
  }
  // The thread budget of everything a run does on the CPU: compiling a new shape binding
  // (constant folding), the weight prologue, and the CPU backend's steps.
  const auto budget = scoped_thread_budget(m.options.num_threads);
  std::map<std::string, const Tensor*> feeds;
  for (const auto& [name, t] : inputs) {
    if (!m.input_ids.count(name)) {
      if (m.param_ids.count(name))
        throw Error("run: '" + name + "' is a param, not an input; set it with set_param");
      throw Error("run: the graph has no input named '" + name + "' (inputs: " + names_list(input_names()) + ")");
    }
    if (!feeds.emplace(name, &t).second) throw Error("run: input '" + name + "' is given twice");
  }
  std::map<std::string, Impl::FeedShape> shapes;
  std::vector<std::string> missing;
  for (const auto& [name, id] : m.input_ids) {
    if (auto f = feeds.find(name); f != feeds.end()) {
      shapes[name] = {f->second->dtype(), &f->second->shape()};
      continue;
    }
    auto st = m.state.find(name);
    if (st == m.state.end()) missing.push_back(name);
    else if (st->second.host) shapes[name] = {st->second.host->dtype(), &st->second.host->shape()};
    else shapes[name] = {st->second.dtype, &st->second.dims};
  }
  if (!missing.empty()) throw Error("run: missing inputs " + names_list(missing) + "; pass them by name");
  if (const std::string missing_params = m.missing_params(); !missing_params.empty())
    throw Error("run: params without values " + missing_params + "; call set_param for each");
  for (size_t k : output_indices)
    if (k >= m.graph.outputs().size())
      throw Error("run: output index " + std::to_string(k) + " is out of range (the graph has " +
                  std::to_string(m.graph.outputs().size()) + " outputs)");

  auto binding = m.bind_dims(shapes);
  m.carried_to_host_unless(binding);
  CompiledVariant& cv = m.variant_for(binding);
  m.last_arena = cv.variant->arena_bytes();
  m.derive_params(cv);
  // Inputs given now override carried values; the others are carried: from the host when they
  // had to leave their variant, else on the device from this variant's last run.
  std::unordered_map<NodeId, Tensor> leaves;
  std::vector<Carry> carry;
  for (const auto& [id, name] : cv.inputs) {
    if (auto f = feeds.find(name); f != feeds.end()) {
      leaves[id] = *f->second;
      continue;
    }
    const Impl::Carried& c = m.state.at(name);
    if (c.host) leaves[id] = *c.host;
    else carry.push_back({id, c.output});
  }
  for (const auto& [id, name] : cv.params) leaves[id] = m.param_value(cv, name);
  // Outputs carried as state stay with the variant (kept); only the requested ones come back.
  std::vector<size_t> keep;
  for (const auto& [name, k] : m.state_bindings)
    if (std::find(keep.begin(), keep.end(), k) == keep.end()) keep.push_back(k);
  std::vector<Tensor> got;
  try {
    got = cv.variant->run(RunArgs{leaves, output_indices, &m.params, m.params_generation, carry, keep,
                                  options.device_outputs, options.out});
  } catch (...) {
    m.forget_device_state();
    throw;
  }
  const Graph& vg = cv.variant->graph();
  for (const auto& [name, k] : m.state_bindings) {
    const Shape& sh = vg.shape(vg.outputs().at(k));
    m.state[name] = Impl::Carried{std::nullopt, binding, k, sh.dtype, sh.concrete()};
  }
  return got;
}

WebExportSummary CompiledGraph::export_web(const std::string& dir, const WebExportOptions& options) {
  ScopedLimits scoped(impl_->options.limits);
  return translate_errors("export_web", [&] {
    Impl& m = *impl_;
    if (m.device != Device::WebGpu)
      throw Error(std::string("export_web: this graph was compiled for ") + device_name(m.device) +
                  "; web bundles hold WebGPU programs: compile it with Session(Device::WebGpu) and the knob "
                  "webgpu_limits=web");
    if (resolve_knobs(m.options).webgpu_limits() != "web")
      throw Error("export_web: the graph's kernels were made for this machine's WebGPU adapter, whose limits and "
                  "features a browser may not have; compile it with the knob webgpu_limits=web "
                  "(CompileOptions::tuning.webgpu_limits = \"web\" or RLX_WEBGPU_LIMITS=web)");
    const std::map<std::string, int64_t>& dims = options.dims;
    std::set<std::string> symbols;
    for (const auto& [name, id] : m.input_ids)
      for (const Dim& d : std::get<ops::Input>(m.graph.node(id).op).shape.dims)
        if (!d.is_static()) symbols.insert(d.sym);
    std::vector<std::string> missing, unknown;
    for (const std::string& sym : symbols)
      if (!dims.count(sym)) missing.push_back(sym);
    for (const auto& [sym, v] : dims)
      if (!symbols.count(sym)) unknown.push_back(sym);
    if (!unknown.empty())
      throw Error("export_web: " + names_list(unknown) + " is not a symbolic dim of the graph's inputs (they have " +
                  (symbols.empty() ? std::string("none") : names_list({symbols.begin(), symbols.end()})) + ")");
    if (!missing.empty())
      throw Error("export_web: a web bundle runs one shape binding; give a value to the symbolic dims " +
                  names_list(missing) + " (rlx export-web --dim NAME=VALUE)");
    for (const auto& [sym, v] : dims)
      if (v < 0) throw Error("export_web: symbolic dim '" + sym + "' = " + std::to_string(v) + " is negative");
    if (const std::string miss = m.missing_params(); !miss.empty())
      throw Error("export_web: params without values " + miss + "; call set_param for each");
    const auto budget = scoped_thread_budget(m.options.num_threads);
    CompiledVariant& cv = m.variant_for(Impl::Binding(dims.begin(), dims.end()));
    m.derive_params(cv);
    std::map<std::string, Tensor> values;
    for (const auto& [id, name] : cv.params) values[name] = m.param_value(cv, name);
    return web::write_web_bundle(*cv.variant->web_program(), values, dir, options.f16_weights);
  });
}

CompiledGraph Session::compile(const Graph& graph, const CompileOptions& options) const {
  ScopedLimits scoped(options.limits);
  return translate_errors("compile", [&] { return compile_checked(graph, options); });
}

CompiledGraph Session::compile_checked(const Graph& graph, const CompileOptions& options) const {
  // CPU work done while compiling (constant folding) stays within the graph's thread budget too.
  const auto budget = scoped_thread_budget(options.num_threads);
  auto impl = std::make_unique<CompiledGraph::Impl>();
  impl->backend = make_backend(device_, options);
  if (options.verify) graph.verify();
  passes::check_pass_names(options.disabled_passes);
  impl->device = device_;
  impl->options = options;
  impl->graph = graph;
  for (NodeId id : graph.input_nodes()) {
    const auto& in = std::get<ops::Input>(graph.node(id).op);
    impl->input_ids[in.name] = id;
    if (!in.shape.is_static()) impl->is_static = false;
  }
  for (NodeId id : graph.param_nodes()) {
    const auto& p = std::get<ops::Param>(graph.node(id).op);
    if (!p.shape.is_static())
      throw Error("compile: param '" + p.name + "' has a symbolic shape " + p.shape.str() + "; params must be static");
    impl->param_ids[p.name] = id;
  }
  for (const auto& [name, t] : graph.weights()) impl->params[name] = t;
  // Graphs with only static dims are optimized and planned once, now. Symbolic graphs are
  // checked against the backend now (every node it cannot run is reported) and optimized per
  // shape binding at run.
  if (impl->is_static) impl->variant_for({});
  else passes::check_legalizable(graph, *impl->backend);
  return CompiledGraph(std::move(impl));
}

}  // namespace rlx
