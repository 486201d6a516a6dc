#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <system_error>

#include <CLI/CLI.hpp>

#include "cli.h"
#include "io/file_access.h"
#include "rlx/onnx.h"

namespace rlx::cli {

std::pair<std::string, std::string> split_assignment(const std::string& s, const std::string& what) {
  const auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    throw UsageError(what + " expects NAME=VALUE, got '" + shown(s) + "'");
  return {s.substr(0, eq), s.substr(eq + 1)};
}

void apply_knobs(CompileOptions& options, const std::vector<std::string>& specs) {
  for (const std::string& spec : specs) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UsageError("--knob expects NAME=VALUE, got '" + shown(spec) + "' ('rlx knobs' lists the names)");
    set_knob(options, spec.substr(0, eq), spec.substr(eq + 1));
  }
}

namespace {
bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}
}  // namespace

CLI::Validator unsigned_64_validator() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        // 20 digits at most, and not above 18446744073709551615 (same-length strings compare as numbers)
        if (!all_digits(s) || s.size() > 20 || (s.size() == 20 && s > "18446744073709551615"))
          return "'" + s + "' is not an integer in 0..18446744073709551615";
        return {};
      },
      "UINT64");
}

int64_t parse_count(const std::string& s, const std::string& what) {
  if (!all_digits(s)) throw UsageError(what + " expects a non-negative integer, got '" + shown(s) + "'");
  if (s.size() > 18)
    throw UsageError(what + ": " + shown(s) + " is too large (at most 18 digits; sizes are also capped by "
                     "the size policy, rlx::Limits)");
  return std::stoll(s);
}

bool is_onnx_path(const std::string& p) { return p.size() > 5 && p.compare(p.size() - 5, 5, ".onnx") == 0; }

Graph load_graph_file(const std::string& path, const std::map<std::string, int64_t>& onnx_dims) {
  // Opening it first gives the OS reason (no such file, permission denied) and rejects a
  // directory, FIFO or device by name.
  { const io::RegularFile probe(path, "graph file '" + io::printable(path) + "'"); }
  try {
    if (is_onnx_path(path)) {
      OnnxImportOptions opts;
      opts.dims = onnx_dims;
      return import_onnx(path, opts);
    }
    return load_graph_json(path);
  } catch (const OnnxDimsError& e) {
    throw OnnxDimsError("cannot load graph file '" + io::printable(path) + "': " + e.what(), e.node());
  } catch (const Error& e) {
    throw Error("cannot load graph file '" + io::printable(path) + "': " + e.what());
  }
}

std::unique_ptr<OnnxModel> load_onnx_model(const std::string& path, OnnxModelOptions options) {
  { const io::RegularFile probe(path, "graph file '" + io::printable(path) + "'"); }
  try {
    return std::make_unique<OnnxModel>(path, std::move(options));
  } catch (const Error& e) {
    throw Error("cannot load graph file '" + io::printable(path) + "': " + e.what());
  }
}

std::set<std::string> onnx_input_symbols(const OnnxModelInfo& info) {
  std::set<std::string> out;
  for (const auto& io : info.inputs)
    for (size_t i = 0; i < io.dims.size(); ++i)
      if (io.dims[i].is_symbolic())
        out.insert(io.dims[i].sym == "?" ? io.name + "_d" + std::to_string(i) : io.dims[i].sym);
  return out;
}

void print_onnx_dims_fallback(const std::string& path, const OnnxDimsError& e, const std::string& command) {
  const OnnxModelInfo info = onnx_model_info(path);
  std::ostream& os = std::cout;
  auto io_line = [&](const OnnxModelInfo::Io& io) {
    std::string dims = "[?]";
    if (io.has_shape) {
      dims = "[";
      for (size_t i = 0; i < io.dims.size(); ++i)
        dims += (i ? "," : "") + (io.dims[i].is_symbolic() ? (io.dims[i].sym == "?" ? io.name + "_d" + std::to_string(i)
                                                                                     : io.dims[i].sym)
                                                           : std::to_string(io.dims[i].value));
      dims += "]";
    }
    os << "  " << shown(io.name) << ": " << shown(io.type) << shown(dims) << "\n";
  };
  os << "graph: " << shown(path) << " (not imported: a node needs a concrete value of a symbolic dim)\n";
  os << "inputs (" << info.inputs.size() << "):\n";
  for (const auto& io : info.inputs) io_line(io);
  os << "outputs (" << info.outputs.size() << "):\n";
  for (const auto& io : info.outputs) io_line(io);
  int64_t nodes = 0;
  for (const auto& [op, n] : info.op_histogram) nodes += n;
  os << "onnx ops (" << nodes << " nodes, " << info.op_histogram.size() << " kinds):\n";
  for (const auto& [op, n] : info.op_histogram) os << "  " << shown(op) << "  " << n << "\n";
  std::vector<std::string> syms;
  for (const auto& s : onnx_input_symbols(info)) syms.push_back(s);
  std::string example;
  for (size_t i = 0; i < syms.size() && i < 4; ++i) example += " --dim " + shown(syms[i]) + "=V";
  if (syms.empty()) example = " --dim NAME=V";
  os << "needs a concrete dim: " << io::printable(e.node()) << " needs a static value where the input dims "
     << quoted_list(syms) << " are symbolic; 'rlx " << command << " " << shown(path) << example
     << "' gives them (or 'rlx run' with --input files, which takes the dims from them)\n";
  os << "  (" << io::printable(e.what(), 2000) << ")\n";
}

std::set<std::string> symbolic_dims(const Graph& g) {
  std::set<std::string> out;
  auto add = [&](const Shape& s) {
    for (const Dim& d : s.dims)
      if (d.is_symbolic()) out.insert(d.sym);
  };
  for (NodeId id : g.input_nodes()) add(std::get<ops::Input>(g.node(id).op).shape);
  for (NodeId id : g.param_nodes()) add(std::get<ops::Param>(g.node(id).op).shape);
  return out;
}

std::map<std::string, int64_t> parse_dims(const std::vector<std::string>& specs, const std::set<std::string>* known) {
  std::map<std::string, int64_t> dims;
  for (const auto& s : specs) {
    auto [name, value] = split_assignment(s, "--dim");
    const int64_t v = parse_count(value, "--dim " + shown(name));
    if (known && !known->count(name))
      throw Error("--dim " + shown(name) + ": the graph has no symbolic dim '" + shown(name) + "' (its symbolic dims: " +
                  quoted_list({known->begin(), known->end()}) + ")");
    if (!dims.emplace(name, v).second) throw UsageError("--dim " + shown(name) + " is given twice");
  }
  return dims;
}

std::string shown(const std::string& name) { return io::printable(name, 120); }

std::string quoted_list(const std::vector<std::string>& names, size_t limit) {
  if (names.empty()) return "(none)";
  std::string s;
  const size_t n = std::min(limit, names.size());
  for (size_t i = 0; i < n; ++i) s += (i ? ", '" : "'") + shown(names[i]) + "'";
  if (names.size() > n) s += " and " + std::to_string(names.size() - n) + " more";
  return s;
}

std::string with_commas(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string format_bytes(int64_t bytes, bool exact) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  std::string s = buf;
  if (exact && u > 0) s += " (" + with_commas(bytes) + " bytes)";
  return s;
}

std::vector<std::string> output_labels(const Graph& g) {
  std::vector<std::string> out;
  const auto& names = g.output_names();
  for (size_t i = 0; i < g.outputs().size(); ++i)
    out.push_back(i < names.size() && !names[i].empty() ? names[i] : "output_" + std::to_string(i));
  return out;
}

std::string file_safe(const std::string& name) {
  std::string s = name;
  for (char& c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.';
    if (!ok) c = '_';
  }
  if (s.size() > 120) s.resize(120);  // file names are limited to 255 bytes
  if (s.empty() || s == "." || s == "..") s = "_" + s;
  return s;
}

std::vector<std::string> unique_file_names(const std::vector<std::string>& names, const std::string& ext) {
  auto lower = [](std::string s) {
    for (char& c : s)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return s;
  };
  std::set<std::string> taken;
  // Reserve every plain base first, so a later name's own base is never taken by an earlier
  // name's suffixed one ("a", "a", "a_2": "a.npy", "a_3.npy", "a_2.npy").
  std::vector<std::string> bases;
  std::map<std::string, int> uses;
  for (const auto& n : names) {
    bases.push_back(file_safe(n));
    ++uses[lower(bases.back())];
  }
  std::vector<std::string> out;
  for (const auto& base : bases) {
    std::string key = lower(base);
    std::string file = base;
    if (taken.count(key)) {
      for (int k = 2;; ++k) {
        file = base + "_" + std::to_string(k);
        key = lower(file);
        if (!taken.count(key) && !uses.count(key)) break;
      }
    }
    taken.insert(key);
    out.push_back(file + ext);
  }
  return out;
}

Latency latency_stats(std::vector<double> ms) {
  if (ms.empty()) throw Error("latency_stats: no samples");
  std::sort(ms.begin(), ms.end());
  auto rank = [&](double p) {
    const auto k = static_cast<size_t>(std::ceil(p * static_cast<double>(ms.size())));
    return ms[std::clamp<size_t>(k, 1, ms.size()) - 1];
  };
  Latency l;
  l.p50 = rank(0.5);
  l.p90 = rank(0.9);
  l.min = ms.front();
  l.max = ms.back();
  l.mean = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size());
  return l;
}

}  // namespace rlx::cli
