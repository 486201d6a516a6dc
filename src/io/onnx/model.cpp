// rlx::OnnxModel: an ONNX model run by input shapes. The ModelProto and its initializers are
// read once; each input-shape signature is imported with its symbolic dims bound and compiled
// at its first run, and the compiled graphs of the most recent signatures are kept.
#include <algorithm>
#include <filesystem>
#include <list>
#include <optional>

#include "io/file_access.h"
#include "io/onnx/control_inputs.h"
#include "io/onnx/importer.h"
#include "io/onnx/proto.h"
#include "rlx/onnx.h"

namespace rlx {

namespace {

std::string quoted(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "'" : ", '") + io::printable(n) + "'";
  return s.empty() ? "none" : s;
}

// "x=[2,3], mask=[2,3]"
std::string shapes_text(const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < shapes.size(); ++i)
    s += (i ? ", " : "") + io::printable(names[i]) + "=" + dims_str(shapes[i]);
  return s;
}

// "16000", "[1, 0, 1]": a small input value in a signature.
std::string value_text(const Tensor& t) {
  std::string s;
  if (is_float(t.dtype())) {
    for (double v : t.to_f64()) s += (s.empty() ? "" : ", ") + std::to_string(v);
  } else {
    for (int64_t v : t.to_i64()) s += (s.empty() ? "" : ", ") + std::to_string(v);
  }
  return t.rank() == 0 ? s : "[" + s + "]";
}

}  // namespace

struct OnnxModel::Impl {
  onnx::ModelProto proto;
  std::string base_dir;
  std::string what;  // "ONNX model 'path'" or "ONNX model"
  OnnxModelOptions opts;
  std::vector<Input> inputs;
  std::vector<std::vector<std::string>> declared_syms;  // per input, per axis: the symbol ("" = static)
  std::vector<std::string> outputs;
  std::map<std::string, Tensor> initializers;  // top-level initializers, read once
  // Inputs whose values decide If conditions or the trip counts of Loops that must unroll
  // (onnx_io::value_inputs): a run's values of them are part of its signature and given to the
  // import as known values.
  std::vector<std::string> value_inputs;

  struct Key {
    std::vector<std::vector<int64_t>> shapes;  // the given shapes, in input order
    // Per value input: its bytes, or nullopt when it is too large to specialize on.
    std::vector<std::optional<std::string>> values;
    bool operator==(const Key&) const = default;
  };
  struct Entry {
    Key key;
    CompiledGraph cg;
  };
  std::list<Entry> cache;  // most recently used first
  Stats stats;

  void load() {
    if (opts.max_signatures < 1)
      throw Error(what + ": OnnxModelOptions::max_signatures is 0; at least one compiled graph must be kept");
    opts.import.limits.validate();
    ScopedLimits scoped(opts.import.limits);
    if (!proto.has_graph()) throw Error(what + ": the model has no graph");
    onnx_io::model_opsets(proto, what);
    const onnx::GraphProto& gp = proto.graph();
    std::set<std::string> init_names;
    for (const auto& t : gp.initializer()) init_names.insert(t.name());
    std::set<std::string> symbols;
    for (const auto& vi : gp.input()) {
      if (init_names.count(vi.name())) continue;
      const std::string where = what + ": graph input '" + io::printable(vi.name()) + "'";
      if (!vi.type().has_tensor_type())
        throw Error(where + ": only tensor inputs are supported (this one is a sequence, map or optional)");
      const auto& tt = vi.type().tensor_type();
      Input in;
      in.name = vi.name();
      in.shape.dtype = onnx_io::dtype_from_onnx(tt.elem_type(), where);
      in.has_shape = tt.has_shape();
      std::vector<std::string> syms;
      for (int i = 0; in.has_shape && i < tt.shape().dim_size(); ++i) {
        const auto& d = tt.shape().dim(i);
        if (d.has_dim_value()) {
          if (d.dim_value() < 0) throw Error(where + ": dim " + std::to_string(i) + " is negative");
          in.shape.dims.emplace_back(d.dim_value());
          syms.emplace_back();
          continue;
        }
        const std::string sym = d.has_dim_param() && !d.dim_param().empty() ? d.dim_param()
                                                                            : onnx_io::unnamed_dim_symbol(vi.name(), i);
        symbols.insert(sym);
        syms.push_back(sym);
        const auto fixed = opts.import.dims.find(sym);
        in.shape.dims.push_back(fixed == opts.import.dims.end() ? Dim::symbol(sym) : Dim(fixed->second));
      }
      inputs.push_back(std::move(in));
      declared_syms.push_back(std::move(syms));
    }
    for (const auto& [name, v] : opts.import.dims) {
      if (v < 0)
        throw Error(what + ": dims gives the symbolic dim '" + io::printable(name) + "' the negative size " +
                    std::to_string(v) + "; dims must be >= 0");
      if (!symbols.count(name))
        throw Error(what + ": dims names '" + io::printable(name) +
                    "', which is not a symbolic dim of any graph input (symbolic dims: " +
                    quoted({symbols.begin(), symbols.end()}) + ")");
    }
    for (const auto& vi : gp.output()) outputs.push_back(vi.name());
    // The CPU runs a Loop with a run-time trip count as a While; other devices run none, so
    // their models are specialized on the trip count and the loop is unrolled.
    value_inputs = onnx_io::value_inputs(gp, opts.device != Device::Cpu);
    for (const auto& t : gp.initializer()) {
      if (initializers.count(t.name())) continue;  // reported by the import
      initializers.emplace(t.name(),
                           onnx_io::tensor_from_proto(t, base_dir, what + ": initializer '" + io::printable(t.name()) + "'"));
    }
  }

  const Input* find(const std::string& name, size_t* index) const {
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].name == name) {
        *index = i;
        return &inputs[i];
      }
    return nullptr;
  }

  std::vector<std::string> input_names() const {
    std::vector<std::string> n;
    for (const auto& in : inputs) n.push_back(in.name);
    return n;
  }

  std::map<std::string, int64_t> bind(const NamedTensors& given) const {
    std::map<std::string, int64_t> b = opts.import.dims;
    std::map<std::string, std::pair<std::string, size_t>> origin;  // symbol -> (input, axis) it came from
    std::set<std::string> seen;
    for (const auto& [name, t] : given) {
      size_t idx = 0;
      const Input* in = find(name, &idx);
      if (!in)
        throw Error(what + ": the model has no input named '" + io::printable(name) + "' (inputs: " +
                    quoted(input_names()) + ")");
      if (!seen.insert(name).second) throw Error(what + ": input '" + io::printable(name) + "' is given twice");
      const std::string head = what + ": input '" + io::printable(name) + "': expected " +
                               (in->has_shape ? in->shape.str() : std::string(dtype_name(in->shape.dtype)) + "[any rank]") +
                               ", given " + t.shape_info().str();
      if (t.dtype() != in->shape.dtype)
        throw Error(head + " (the dtype differs; convert the tensor to " + dtype_name(in->shape.dtype) + ")");
      if (!in->has_shape) continue;
      if (t.rank() != in->shape.rank())
        throw Error(head + " (rank " + std::to_string(t.rank()) + ", the model declares rank " +
                    std::to_string(in->shape.rank()) + ")");
      for (int64_t a = 0; a < t.rank(); ++a) {
        const Dim& d = in->shape.dims[static_cast<size_t>(a)];
        const std::string& sym = declared_syms[idx][static_cast<size_t>(a)];
        const int64_t size = t.dim(a);
        if (d.is_static()) {
          if (d.value != size)
            throw Error(head + " (dim " + std::to_string(a) + " is " + std::to_string(size) + ", the model declares " +
                        std::to_string(d.value) +
                        (sym.empty() ? std::string()
                                     : " (symbolic dim '" + io::printable(sym) + "' fixed by dims / --dim " +
                                           io::printable(sym) + "=" + std::to_string(d.value) + ")") +
                        ")");
          continue;
        }
        const auto [pos, inserted] = b.emplace(d.sym, size);
        if (inserted) {
          origin[d.sym] = {name, static_cast<size_t>(a)};
        } else if (pos->second != size) {
          const auto& [other, axis] = origin.at(d.sym);
          throw Error(what + ": symbolic dim '" + io::printable(d.sym) + "' is " + std::to_string(pos->second) +
                      " in input '" + io::printable(other) + "' (axis " + std::to_string(axis) + ") but " +
                      std::to_string(size) + " in input '" + io::printable(name) + "' (axis " + std::to_string(a) +
                      "); inputs that share a symbolic dim must have the same size there");
        }
      }
    }
    return b;
  }

  Graph import(const std::map<std::string, int64_t>& dims, const std::map<std::string, std::vector<int64_t>>& shapes,
               const std::map<std::string, Tensor>& known = {}) const {
    OnnxImportOptions o = opts.import;
    for (const auto& [k, v] : dims) o.dims[k] = v;
    for (const auto& [k, v] : shapes) o.input_shapes[k] = v;
    for (const auto& [k, v] : known) o.known_inputs.emplace(k, v);  // a value the caller gave wins
    o.limits.validate();
    ScopedLimits scoped(o.limits);
    return onnx_io::import_model(proto, base_dir, o, &initializers);
  }
};

OnnxModel::OnnxModel(const std::string& path, OnnxModelOptions options) : impl_(std::make_unique<Impl>()) {
  translate_errors("OnnxModel", [&] {
    impl_->what = "ONNX model '" + io::printable(path) + "'";
    impl_->opts = std::move(options);
    const std::string bytes = onnx_io::read_whole_file(path, "ONNX model");
    std::string dir = std::filesystem::path(path).parent_path().string();
    impl_->base_dir = dir.empty() ? "." : dir;
    impl_->proto = onnx_io::parse_model(bytes.data(), bytes.size(), impl_->what);
    impl_->load();
  });
}

OnnxModel::OnnxModel(const void* data, size_t size, const std::string& base_dir, OnnxModelOptions options)
    : impl_(std::make_unique<Impl>()) {
  translate_errors("OnnxModel", [&] {
    impl_->what = "ONNX model";
    impl_->opts = std::move(options);
    impl_->base_dir = base_dir;
    if (!data && size > 0)
      throw Error("ONNX model: no data (null pointer with a size of " + std::to_string(size) + ")");
    impl_->proto = onnx_io::parse_model(data, size, impl_->what);
    impl_->load();
  });
}

OnnxModel::OnnxModel(OnnxModel&&) noexcept = default;
OnnxModel& OnnxModel::operator=(OnnxModel&&) noexcept = default;
OnnxModel::~OnnxModel() = default;

const std::vector<OnnxModel::Input>& OnnxModel::inputs() const { return impl_->inputs; }
std::vector<std::string> OnnxModel::output_names() const { return impl_->outputs; }
const OnnxModelOptions& OnnxModel::options() const { return impl_->opts; }
const std::vector<std::string>& OnnxModel::value_inputs() const { return impl_->value_inputs; }

std::set<std::string> OnnxModel::symbols() const {
  std::set<std::string> s;
  for (const auto& in : impl_->inputs)
    for (const Dim& d : in.shape.dims)
      if (d.is_symbolic()) s.insert(d.sym);
  return s;
}

std::map<std::string, int64_t> OnnxModel::bind(const NamedTensors& inputs) const {
  return translate_errors("OnnxModel::bind", [&] { return impl_->bind(inputs); });
}

Graph OnnxModel::import(const std::map<std::string, int64_t>& dims) const {
  return translate_errors("OnnxModel::import", [&] {
    try {
      return impl_->import(dims, {});
    } catch (const OnnxDimsError& e) {
      throw OnnxDimsError(impl_->what + ": " + e.what(), e.node());
    } catch (const Error& e) {
      throw Error(impl_->what + ": " + e.what());
    }
  });
}

CompiledGraph& OnnxModel::compiled(const NamedTensors& inputs) {
  return translate_errors("OnnxModel::compiled", [&]() -> CompiledGraph& {
    Impl& m = *impl_;
    ++m.stats.runs;
    const auto dims = m.bind(inputs);
    Impl::Key key;
    std::map<std::string, Tensor> known;  // value inputs' values, given to the import
    std::string values_text;
    std::vector<std::string> missing;
    std::map<std::string, std::vector<int64_t>> undeclared;  // shapes of inputs declared without one
    for (const auto& in : m.inputs) {
      const Tensor* t = nullptr;
      for (const auto& [name, v] : inputs)
        if (name == in.name) t = &v;
      if (!t) {
        missing.push_back(in.name);
        continue;
      }
      key.shapes.push_back(t->shape());
      if (!in.has_shape) undeclared[in.name] = t->shape();
      if (std::find(m.value_inputs.begin(), m.value_inputs.end(), in.name) == m.value_inputs.end()) continue;
      if (t->numel() > onnx_io::kMaxValueInputElements) {
        key.values.emplace_back();  // too large: its If conditions stay run-time values
        continue;
      }
      const Tensor v = t->to_host().clone();  // a device-resident value is read back (a few bytes)
      key.values.emplace_back(std::string(static_cast<const char*>(v.raw()), v.nbytes()));
      known.emplace(in.name, v);
      values_text += ", " + io::printable(in.name) + "=" + value_text(v);
    }
    if (!missing.empty())
      throw Error(m.what + ": missing input" + (missing.size() > 1 ? "s " : " ") + quoted(missing) +
                  "; every input is needed (the model's inputs: " + quoted(m.input_names()) + ")");
    for (auto it = m.cache.begin(); it != m.cache.end(); ++it)
      if (it->key == key) {
        ++m.stats.hits;
        m.cache.splice(m.cache.begin(), m.cache, it);
        return m.cache.front().cg;
      }
    Graph g;
    const std::string sig = "input shapes " + shapes_text(m.input_names(), key.shapes) +
                            (values_text.empty() ? "" : "; values " + values_text.substr(2));
    try {
      g = m.import(dims, undeclared, known);
    } catch (const OnnxDimsError& e) {
      throw OnnxDimsError(m.what + " (" + sig + "): " + e.what(), e.node());
    } catch (const Error& e) {
      throw Error(m.what + " (" + sig + "): " + e.what());
    }
    CompiledGraph cg = Session(m.opts.device).compile(g, m.opts.compile);
    ++m.stats.imports;
    m.cache.push_front(Impl::Entry{std::move(key), std::move(cg)});
    while (m.cache.size() > m.opts.max_signatures) {
      m.cache.pop_back();
      ++m.stats.evictions;
    }
    return m.cache.front().cg;
  });
}

std::vector<Tensor> OnnxModel::run(const NamedTensors& inputs) { return compiled(inputs).run(inputs); }

std::vector<Tensor> OnnxModel::run(const NamedTensors& inputs, const std::vector<size_t>& output_indices) {
  return compiled(inputs).run(inputs, output_indices);
}

void OnnxModel::set_initializer(const std::string& name, const Tensor& value) {
  translate_errors("OnnxModel::set_initializer", [&] {
    auto it = impl_->initializers.find(name);
    if (it == impl_->initializers.end()) {
      std::vector<std::string> names;
      for (const auto& [n, t] : impl_->initializers) names.push_back(n);
      if (names.size() > 12) names.resize(12);
      throw Error(impl_->what + ": no initializer named '" + io::printable(name) + "' (initializers: " + quoted(names) +
                  (impl_->initializers.size() > 12 ? ", ..." : "") + ")");
    }
    if (value.dtype() != it->second.dtype() || value.shape() != it->second.shape())
      throw Error(impl_->what + ": initializer '" + io::printable(name) + "' is " + it->second.shape_info().str() +
                  ", given " + value.shape_info().str() + "; the dtype and shape must match");
    it->second = value.clone();
    impl_->cache.clear();
  });
}

OnnxModel::Stats OnnxModel::stats() const {
  Stats s = impl_->stats;
  s.cached = impl_->cache.size();
  return s;
}

}  // namespace rlx
