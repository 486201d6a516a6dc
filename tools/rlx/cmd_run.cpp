// rlx run: compile a graph file (rlx graph JSON or .onnx; --dim values are applied at ONNX import), feed inputs (.npy files or random), run it repeatedly,
// print output summaries and latency, optionally save the outputs as .npy.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <set>

#include "cli.h"
#include "rlx/onnx.h"
#include "models/init.h"
#include "models/transformer.h"

namespace rlx::cli {
namespace {

struct RunOptions {
  std::string path;
  std::vector<std::string> inputs;  // name=path.npy
  bool random_inputs = false;
  uint64_t seed = 0;
  std::vector<std::string> dims;  // name=value
  int repeat = 10;
  int warmup = 1;
  std::string save_dir;
  int threads = 0;
  std::string device = "cpu";
};

struct InputInfo {
  std::string name;
  Shape shape;
};

std::vector<InputInfo> graph_inputs(const Graph& g) {
  std::vector<InputInfo> out;
  for (NodeId id : g.input_nodes()) {
    const auto& in = std::get<ops::Input>(g.node(id).op);
    out.push_back({in.name, in.shape});
  }
  return out;
}

// Loads an input file and converts it to the dtype the graph expects when that is a lossless
// kind of change (float <-> float, int <-> int); other mismatches are left to the runtime's
// error. Returns the tensor and a note when it was converted.
Tensor load_input(const std::string& name, const std::string& file, DType want) {
  Tensor t;
  try {
    t = load_npy(file);
  } catch (const Error& e) {
    throw Error("--input " + name + ": " + e.what());
  }
  if (t.dtype() == want) return t;
  const bool both_float = is_float(t.dtype()) && is_float(want);
  const bool both_int = is_int(t.dtype()) && is_int(want);
  if (both_float || both_int) {
    std::cerr << "note: input '" << name << "' (" << file << ") converted from " << dtype_name(t.dtype()) << " to "
              << dtype_name(want) << "\n";
    return t.cast(want);
  }
  return t;
}

bool is_onnx_path(const std::string& p) { return p.size() > 5 && p.compare(p.size() - 5, 5, ".onnx") == 0; }

// ONNX models take --dim values at import, so shape computations over those dims fold.
Graph load_for_run(const RunOptions& o) {
  if (!is_onnx_path(o.path)) return load_graph_file(o.path);
  OnnxImportOptions opts;
  for (const auto& s : o.dims) {
    auto [name, value] = split_assignment(s, "--dim");
    if (!opts.dims.emplace(name, parse_count(value, "--dim " + name)).second)
      throw UsageError("--dim " + name + " is given twice");
  }
  std::cerr << "importing " << o.path << "...\n";
  return import_onnx(o.path, opts);
}

int run_run(const RunOptions& o) {
  const Graph g = load_for_run(o);
  const bool dims_at_import = is_onnx_path(o.path);
  const auto inputs = graph_inputs(g);
  std::map<std::string, const InputInfo*> by_name;
  std::set<std::string> symbols;
  for (const auto& in : inputs) {
    by_name[in.name] = &in;
    for (const Dim& d : in.shape.dims)
      if (d.is_symbolic()) symbols.insert(d.sym);
  }
  std::vector<std::string> input_names;
  for (const auto& in : inputs) input_names.push_back(in.name);

  // --dim name=value
  std::map<std::string, int64_t> dims;
  for (const auto& s : dims_at_import ? std::vector<std::string>{} : o.dims) {
    auto [name, value] = split_assignment(s, "--dim");
    const int64_t v = parse_count(value, "--dim " + name);
    if (!symbols.count(name))
      throw Error("--dim " + name + ": the graph's inputs have no symbolic dim '" + name + "' (symbolic dims: " +
                  quoted_list({symbols.begin(), symbols.end()}) + ")");
    if (!dims.emplace(name, v).second) throw UsageError("--dim " + name + " is given twice");
  }

  // --input name=file.npy; symbolic dims are also bound from these files' shapes.
  NamedTensors feeds;
  std::map<std::string, std::string> source;
  for (const auto& s : o.inputs) {
    auto [name, file] = split_assignment(s, "--input");
    auto it = by_name.find(name);
    if (it == by_name.end())
      throw Error("--input " + name + ": the graph has no input named '" + name + "' (inputs: " +
                  quoted_list(input_names) + ")");
    if (source.count(name)) throw UsageError("--input " + name + " is given twice");
    Tensor t = load_input(name, file, it->second->shape.dtype);
    const Shape& want = it->second->shape;
    if (t.rank() == want.rank()) {
      for (int64_t d = 0; d < t.rank(); ++d) {
        if (!want.dims[d].is_symbolic()) continue;
        auto [pos, inserted] = dims.emplace(want.dims[d].sym, t.dim(d));
        if (!inserted && pos->second != t.dim(d))
          throw Error("--input " + name + ": symbolic dim '" + want.dims[d].sym + "' is " + std::to_string(t.dim(d)) +
                      " in " + file + " (shape " + dims_str(t.shape()) + ") but " + std::to_string(pos->second) +
                      " elsewhere (--dim or another input)");
      }
    }
    source[name] = file;
    feeds.emplace_back(name, std::move(t));
  }

  // Inputs not given: generated with --random-inputs, an error otherwise.
  std::vector<std::string> missing;
  for (const auto& in : inputs)
    if (!source.count(in.name)) missing.push_back(in.name);
  if (!missing.empty() && !o.random_inputs)
    throw Error("missing inputs " + quoted_list(missing) +
                "; pass --input NAME=FILE.npy for each, or --random-inputs to generate them");
  for (const auto& name : missing) {
    const Shape& s = by_name[name]->shape;
    std::vector<int64_t> concrete;
    for (const Dim& d : s.dims) {
      if (d.is_static()) {
        concrete.push_back(d.value);
        continue;
      }
      auto it = dims.find(d.sym);
      if (it == dims.end())
        throw Error("cannot generate input '" + name + "' " + s.str() + ": symbolic dim '" + d.sym +
                    "' has no value; pass --dim " + d.sym + "=N");
      concrete.push_back(it->second);
    }
    feeds.emplace_back(name, models::init_tensor(s.dtype, concrete, models::InitKind::Normal, 1.0,
                                                 models::name_seed(o.seed, "input:" + name)));
    source[name] = "random";
  }

  // Params: weights carried by the graph, random ones only when asked.
  std::vector<std::string> unset;
  for (NodeId id : g.param_nodes()) {
    const auto& p = std::get<ops::Param>(g.node(id).op);
    if (!g.weights().count(p.name)) unset.push_back(p.name);
  }
  if (!unset.empty() && !o.random_inputs)
    throw Error(std::to_string(unset.size()) + " params have no weights in the graph file: " + quoted_list(unset) +
                "; save the graph with its weights, or pass --random-inputs to use random values");

  CompileOptions copts;
  copts.num_threads = o.threads;
  std::cerr << "compiling " << g.size() << " nodes for " << o.device << "...\n";
  const auto t_compile = std::chrono::steady_clock::now();
  CompiledGraph cg = Session(device_from_name(o.device)).compile(g, copts);
  const double compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_compile).count();
  if (!unset.empty()) {
    const std::set<std::string> wanted(unset.begin(), unset.end());
    for (const auto& [name, t] : models::random_weights(g, o.seed))
      if (wanted.count(name)) cg.set_param(name, t);
  }

  char buf[256];
  std::snprintf(buf, sizeof buf, "device: %s, threads: %s, compile %.2f ms\n", device_name(cg.device()),
                o.threads == 0 ? "all cores" : std::to_string(o.threads).c_str(), compile_ms);
  std::cout << "graph: " << o.path << " (" << g.size() << " nodes, " << g.param_nodes().size() << " params)\n" << buf;
  if (!unset.empty()) std::cout << "params: " << unset.size() << " filled with random values (--random-inputs)\n";
  std::cout << "inputs:\n";
  for (const auto& in : inputs)  // in graph order
    for (const auto& [name, t] : feeds)
      if (name == in.name) std::cout << "  " << name << ": " << t.shape_info().str() << " (" << source[name] << ")\n";

  std::vector<Tensor> outs;
  for (int i = 0; i < o.warmup; ++i) outs = cg.run(feeds);
  std::vector<double> ms;
  auto last_note = std::chrono::steady_clock::now();
  for (int i = 0; i < o.repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    outs = cg.run(feeds);
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    if (std::chrono::duration<double>(t1 - last_note).count() >= 2.0 && i + 1 < o.repeat) {  // long runs: progress
      std::cerr << "run " << i + 1 << "/" << o.repeat << "\n";
      last_note = t1;
    }
  }

  const auto labels = output_labels(g);
  std::cout << "outputs:\n";
  for (size_t i = 0; i < outs.size(); ++i) std::cout << "  " << labels[i] << ": " << outs[i].summary() << "\n";
  const Latency l = latency_stats(ms);
  std::snprintf(buf, sizeof buf, "latency over %d runs (%d warm-up): p50 %.3f ms, p90 %.3f ms, min %.3f ms\n",
                o.repeat, o.warmup, l.p50, l.p90, l.min);
  std::cout << buf;

  if (!o.save_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.save_dir, ec);
    if (ec) throw Error("--save-outputs: cannot create directory '" + o.save_dir + "': " + ec.message());
    std::set<std::string> used;
    for (size_t i = 0; i < outs.size(); ++i) {
      std::string base = file_safe(labels[i]);
      if (!used.insert(base).second) base += "_" + std::to_string(i);
      used.insert(base);
      const std::string file = (std::filesystem::path(o.save_dir) / (base + ".npy")).string();
      save_npy(outs[i], file);
      std::cout << "saved " << labels[i] << " -> " << file << "\n";
    }
  }
  return 0;
}

}  // namespace

Command add_run_command(CLI::App& parent) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* sub = parent.add_subcommand("run", "Compile a graph file, run it, print output summaries and latency");
  sub->add_option("graph", o->path, "Graph JSON or .onnx file")->required();
  sub->add_option("--input,-i", o->inputs, "Input tensor NAME=FILE.npy (repeatable)");
  sub->add_flag("--random-inputs", o->random_inputs,
                "Generate every input not given (floats normal(0,1), ints in [0,8), bools 0/1) and random "
                "values for params without weights");
  sub->add_option("--seed", o->seed, "Seed for --random-inputs")->capture_default_str();
  sub->add_option("--dim,-d", o->dims, "Value of a symbolic dim NAME=VALUE (repeatable)");
  sub->add_option("--repeat,-n", o->repeat, "Timed runs")->check(CLI::Range(1, 1000000))->capture_default_str();
  sub->add_option("--warmup", o->warmup, "Untimed runs first")->check(CLI::Range(0, 1000000))->capture_default_str();
  sub->add_option("--save-outputs", o->save_dir, "Write every output as DIR/<name>.npy");
  sub->add_option("--threads,-t", o->threads, "CPU worker threads (0 = all cores)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  sub->add_option("--device", o->device, "Device to compile for")
      ->check(CLI::IsMember({"cpu", "cuda", "vulkan", "webgpu"}))
      ->capture_default_str();
  return {sub, [o] { return run_run(*o); }};
}

}  // namespace rlx::cli
