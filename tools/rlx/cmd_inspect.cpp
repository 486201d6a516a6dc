// rlx inspect: inputs/outputs, params, carried weights and an op histogram of a graph file
// (rlx graph JSON or ONNX, with the ONNX model's opsets); tensors of a safetensors or GGUF file.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "cli.h"
#include "io/file_access.h"
#include "models/llama_gguf.h"
#include "passes/specialize.h"
#include "rlx/gguf.h"
#include "rlx/limits.h"
#include "rlx/onnx.h"
#include "rlx/safetensors.h"

namespace rlx::cli {
namespace {

struct InspectOptions {
  std::string path;
  bool print_graph = false;
  std::vector<std::string> dims;  // NAME=VALUE
};

std::vector<int64_t> static_dims(const Shape& s) {
  std::vector<int64_t> d;
  for (const Dim& x : s.dims) d.push_back(x.value);
  return d;
}

std::string pad(const std::string& s, size_t width) { return s.size() >= width ? s : s + std::string(width - s.size(), ' '); }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A safetensors file: its tensors (in data order), their total size and the metadata.
int inspect_safetensors(const std::string& path) {
  const SafetensorsFile f(path);
  std::ostream& os = std::cout;
  os << "safetensors: " << shown(path) << "\n";
  int64_t elems = 0;
  size_t width = 4;
  for (const auto& e : f.entries()) width = std::max(width, shown(e.name).size());
  std::map<std::string, int64_t> by_dtype;
  os << "tensors (" << f.entries().size() << "):\n";
  for (const auto& e : f.entries()) {
    // Totals with checked arithmetic: the counts come from the file.
    elems = checked_add(elems, checked_numel(e.shape, "tensor '" + shown(e.name) + "'"), "the total element count");
    auto& sum = by_dtype[dtype_name(e.dtype)];
    sum = checked_add(sum, static_cast<int64_t>(e.end - e.begin), "the total byte count");
    os << "  " << pad(shown(e.name), width + 2) << Shape::from(e.shape, e.dtype).str() << "  " << format_bytes(static_cast<int64_t>(e.end - e.begin)) << "\n";
  }
  os << "parameters: " << with_commas(elems) << " elements, " << format_bytes(f.data_bytes(), true) << "\n";
  for (const auto& [dt, bytes] : by_dtype) os << "  " << dt << ": " << format_bytes(bytes) << "\n";
  if (!f.metadata().empty()) {
    os << "metadata:\n";
    for (const auto& [k, v] : f.metadata()) os << "  " << shown(k) << ": " << shown(v) << "\n";
  }
  return 0;
}

// A GGUF file: version, alignment, metadata (arrays abridged), tensors with their ggml types
// and row-major shapes, and the bytes per type.
int inspect_gguf(const std::string& path) {
  const GgufFile f(path);
  std::ostream& os = std::cout;
  os << "gguf: " << shown(path) << " (version " << f.version() << ", alignment " << f.alignment() << ", "
     << format_bytes(static_cast<int64_t>(f.file_size()), true) << ")\n";
  os << "metadata (" << f.metadata().size() << "):\n";
  for (const auto& [k, v] : f.metadata()) os << "  " << shown(k) << ": " << io::printable(v.to_string(), 200) << "\n";
  size_t width = 4;
  for (const auto& t : f.tensors()) width = std::max(width, shown(t.name).size());
  os << "tensors (" << f.tensors().size() << "):\n";
  int64_t elems = 0, bytes = 0;
  std::map<std::string, int64_t> by_type;
  for (const auto& t : f.tensors()) {
    elems = checked_add(elems, t.numel, "the total element count");
    bytes = checked_add(bytes, static_cast<int64_t>(t.nbytes), "the total byte count");
    by_type[ggml_type_name(t.type)] += static_cast<int64_t>(t.nbytes);
    os << "  " << pad(shown(t.name), width + 2) << ggml_type_name(t.type) << dims_str(t.shape()) << "  "
       << format_bytes(static_cast<int64_t>(t.nbytes)) << "\n";
  }
  os << "parameters: " << with_commas(elems) << " elements, " << format_bytes(bytes, true) << "\n";
  for (const auto& [type, n] : by_type) os << "  " << type << ": " << format_bytes(n) << "\n";
  // A Llama-family file: what models::build_llama_from_gguf would build, or why it cannot.
  const GgufValue* arch = f.find("general.architecture");
  if (arch && arch->type() == GgufValueType::String && models::is_gguf_llama_family(arch->as_string())) {
    try {
      os << "model: " << models::describe_gguf_llama(f) << "\n";
    } catch (const Error& e) {
      os << "model: " << arch->as_string() << ", not buildable: " << io::printable(e.what(), 300) << "\n";
    }
  }
  return 0;
}

// Model-level facts of an ONNX file (before the rlx graph summary).
void print_onnx_info(const std::string& path) {
  const OnnxModelInfo info = onnx_model_info(path);
  std::ostream& os = std::cout;
  os << "onnx: IR version " << info.ir_version;
  if (!info.producer.empty()) os << ", producer " << shown(info.producer);
  os << "\nopsets:";
  for (const auto& [domain, version] : info.opsets) os << " " << (domain.empty() ? "ai.onnx" : shown(domain)) << "=" << version;
  os << "\ndeclared inputs:";
  for (const auto& io : info.inputs) os << " " << shown(io.name) << ":" << shown(io.type) << (io.has_shape ? dims_str(io.dims) : "[?]");
  os << "\nonnx ops (" << info.op_histogram.size() << " kinds):";
  for (const auto& [op, n] : info.op_histogram) os << " " << shown(op) << "=" << n;
  os << "\ninitializers: " << format_bytes(info.initializer_bytes, true) << "\n\n";
}

int run_inspect(const InspectOptions& o) {
  // The OS reason for a missing or unreadable file; a directory, FIFO or device is named.
  { const io::RegularFile probe(o.path, "file '" + shown(o.path) + "'"); }
  if (ends_with(o.path, ".safetensors")) return inspect_safetensors(o.path);
  if (ends_with(o.path, ".gguf")) return inspect_gguf(o.path);
  Graph g;
  if (ends_with(o.path, ".onnx")) {
    // --dim binds dims at import; without it the import keeps them symbolic where it can and
    // falls back to the ModelProto's summary where a node needs a concrete dim.
    print_onnx_info(o.path);
    try {
      g = load_graph_file(o.path, parse_dims(o.dims, nullptr));
    } catch (const OnnxDimsError& e) {
      print_onnx_dims_fallback(o.path, e, "inspect");
      return 0;
    }
  } else {
    g = load_graph_file(o.path);
    const std::set<std::string> known = symbolic_dims(g);
    const auto binding = parse_dims(o.dims, &known);
    if (!binding.empty()) g = passes::specialize(g, binding);
  }
  std::ostream& os = std::cout;

  os << "graph: " << shown(o.path) << "\n";
  os << "nodes: " << g.size() << "\n";

  // Inputs and the symbolic dims they introduce.
  std::set<std::string> symbols;
  const auto input_ids = g.input_nodes();
  size_t width = 4;
  for (NodeId id : input_ids) width = std::max(width, shown(std::get<ops::Input>(g.node(id).op).name).size());
  const auto outs = output_labels(g);
  for (const auto& n : outs) width = std::max(width, shown(n).size());
  os << "inputs (" << input_ids.size() << "):\n";
  for (NodeId id : input_ids) {
    const auto& in = std::get<ops::Input>(g.node(id).op);
    os << "  " << pad(shown(in.name), width + 2) << in.shape.str() << "\n";
    for (const Dim& d : in.shape.dims)
      if (d.is_symbolic()) symbols.insert(d.sym);
  }
  os << "outputs (" << outs.size() << "):\n";
  for (size_t i = 0; i < outs.size(); ++i) os << "  " << pad(shown(outs[i]), width + 2) << g.shape(g.outputs()[i]).str() << "\n";
  if (!symbols.empty()) {
    os << "symbolic dims:";
    for (const auto& s : symbols) os << " " << shown(s);
    os << "  (set them with 'rlx run --dim NAME=VALUE' or through the input files)\n";
  }

  // Params from their declared shapes; weights carried in the file.
  int64_t param_elems = 0, param_bytes = 0;
  std::vector<std::string> symbolic_params, missing;
  const auto param_ids = g.param_nodes();
  for (NodeId id : param_ids) {
    const auto& p = std::get<ops::Param>(g.node(id).op);
    if (!p.shape.is_static()) {
      symbolic_params.push_back(p.name);
    } else {
      const std::string what = "param '" + shown(p.name) + "' " + p.shape.str();
      param_elems = checked_add(param_elems, checked_numel(static_dims(p.shape), what), "the total param element count");
      param_bytes = checked_add(param_bytes, checked_nbytes(static_dims(p.shape), p.shape.dtype, what),
                                "the total param byte count");
    }
    if (!g.weights().count(p.name)) missing.push_back(p.name);
  }
  os << "params: " << param_ids.size() << " tensors, " << with_commas(param_elems) << " elements, "
     << format_bytes(param_bytes, true) << "\n";
  if (!symbolic_params.empty())
    os << "  (not counted: params with symbolic shapes " << quoted_list(symbolic_params) << ")\n";
  int64_t weight_bytes = 0;
  for (const auto& [name, t] : g.weights())
    weight_bytes = checked_add(weight_bytes, static_cast<int64_t>(t.nbytes()), "the total weight byte count");
  os << "weights carried: " << g.weights().size() << " of " << param_ids.size() << " params ("
     << format_bytes(weight_bytes) << ")\n";
  if (!missing.empty())
    os << "  params without weights: " << quoted_list(missing, 8)
       << " ('rlx run' needs --random-inputs to fill them)\n";

  // Op histogram: count per op kind, most frequent first.
  std::map<std::string, int64_t> counts;
  for (const Node& n : g.nodes()) ++counts[op_name(n.op)];
  std::vector<std::pair<std::string, int64_t>> hist(counts.begin(), counts.end());
  std::stable_sort(hist.begin(), hist.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  size_t op_width = 0;
  for (const auto& [name, c] : hist) op_width = std::max(op_width, name.size());
  os << "op histogram (" << hist.size() << " kinds):\n";
  for (const auto& [name, c] : hist) os << "  " << pad(name, op_width + 2) << std::setw(6) << c << "\n";

  if (o.print_graph) {  // line by line, control characters in names escaped
    os << "\n";
    std::istringstream text(g.to_text());
    for (std::string line; std::getline(text, line);) os << io::printable(line, size_t{1} << 20) << "\n";
  }

  const auto problems = g.verify_report();
  if (!problems.empty()) {
    std::cerr << "rlx inspect: the graph is invalid (" << problems.size() << " problem"
              << (problems.size() > 1 ? "s" : "") << "):\n";
    for (const auto& p : problems) std::cerr << "  " << io::printable(p, 2000) << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

Command add_inspect_command(CLI::App& parent) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* sub = parent.add_subcommand(
      "inspect",
      "Show a graph's inputs, outputs, params and op histogram (graph JSON or .onnx), or a .safetensors or .gguf file's tensors");
  sub->add_option("graph", o->path, "Graph JSON, .onnx, .safetensors or .gguf file")->required();
  sub->add_flag("--print-graph", o->print_graph, "Also print every node");
  sub->add_option("--dim,-d", o->dims, "Value of a symbolic dim NAME=VALUE (repeatable; bound at ONNX import)");
  return {sub, [o] { return run_inspect(*o); }};
}

}  // namespace rlx::cli
