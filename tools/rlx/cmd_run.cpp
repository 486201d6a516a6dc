// rlx run: compile a graph file, feed inputs (.npy files or random), run it repeatedly, print
// output summaries and latency, optionally save the outputs as .npy. An .onnx model is imported
// with every symbolic input dim bound from the input files (rlx::OnnxModel; --dim fixes dims);
// a graph JSON is compiled with its symbolic dims.
#include <CLI/CLI.hpp>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "cli.h"
#include "rlx/limits.h"
#include "rlx/onnx.h"
#include "models/init.h"
#include "models/transformer.h"
#include "runtime/device_profile.h"

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
  std::vector<std::string> knobs;  // name=value
  bool profile = false;
  int profile_top = 15;
  int profile_steps = 10;
};

struct InputInfo {
  std::string name;
  Shape shape;
  bool has_shape = true;  // false: an ONNX input declared without a shape
};

std::vector<InputInfo> graph_inputs(const Graph& g) {
  std::vector<InputInfo> out;
  for (NodeId id : g.input_nodes()) {
    const auto& in = std::get<ops::Input>(g.node(id).op);
    out.push_back({in.name, in.shape, true});
  }
  return out;
}

std::string format_value(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Integer range of an integer dtype.
std::pair<int64_t, int64_t> int_range(DType t) {
  switch (t) {
    case DType::I8: return {INT8_MIN, INT8_MAX};
    case DType::I16: return {INT16_MIN, INT16_MAX};
    case DType::I32: return {INT32_MIN, INT32_MAX};
    case DType::U8: return {0, UINT8_MAX};
    case DType::U16: return {0, UINT16_MAX};
    case DType::U32: return {0, UINT32_MAX};
    case DType::U64: return {0, INT64_MAX};  // a u64 file reaches here only for other dtypes
    default: return {INT64_MIN, INT64_MAX};
  }
}

// Loads an input file and converts it to the dtype the graph expects when the kinds agree
// (float <-> float, int <-> int) and every value fits the target exactly enough: integers
// must lie in the target's range and finite floats must stay finite. A value that does not
// fit is an error naming the input and its first such element; other dtype mismatches are
// errors too.
Tensor load_input(const std::string& name, const std::string& file, DType want) {
  const std::string where = "--input " + shown(name) + " (" + shown(file) + ")";
  Tensor t;
  try {
    t = load_npy(file);
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  if (t.dtype() == want) return t;
  const std::string from = dtype_name(t.dtype()), to = dtype_name(want);
  const bool both_float = is_float(t.dtype()) && is_float(want);
  const bool both_int = is_int(t.dtype()) && is_int(want);
  if (!both_float && !both_int)
    throw Error(where + ": the file holds " + from + " values but the input is " + to +
                "; save the array as " + to + " (only float -> float and int -> int conversions are made)");
  if (both_int) {
    const auto [lo, hi] = int_range(want);
    if (t.dtype() == DType::U64) {  // values past int64 would wrap in to_i64
      const auto* u = static_cast<const uint64_t*>(t.raw());
      for (int64_t i = 0; i < t.numel(); ++i)
        if (u[i] > static_cast<uint64_t>(hi))
          throw Error(where + ": element " + std::to_string(i) + " is " + std::to_string(u[i]) + ", outside the range of " +
                      to + " [" + std::to_string(lo) + ", " + std::to_string(hi) + "]; the input is " + to +
                      ", so the value cannot be passed without changing it");
    }
    const auto v = t.to_i64();
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] < lo || v[i] > hi)
        throw Error(where + ": element " + std::to_string(i) + " is " + std::to_string(v[i]) + ", outside the range of " +
                    to + " [" + std::to_string(lo) + ", " + std::to_string(hi) + "]; the input is " + to +
                    ", so the value cannot be passed without changing it");
  }
  Tensor out = t.cast(want);
  if (both_float) {
    const auto a = t.to_f64(), b = out.to_f64();
    for (size_t i = 0; i < a.size(); ++i)
      if (std::isfinite(a[i]) && !std::isfinite(b[i]))
        throw Error(where + ": element " + std::to_string(i) + " is " + format_value(a[i]) + ", which overflows " + to +
                    " (it would become " + format_value(b[i]) + "); the input is " + to);
  }
  std::cerr << "note: input '" << shown(name) << "' (" << shown(file) << ") converted from " << from << " to " << to
            << " (every value fits)\n";
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool is_batch_like(const std::string& sym) {
  const std::string n = lower(sym);
  return n.find("batch") != std::string::npos || n == "n" || n == "b" || n == "bs";
}

// A sequence-like name (seq, len, token, time, frame, step, position), batch names excluded.
bool is_sequence_like(const std::string& sym) {
  if (is_batch_like(sym)) return false;
  const std::string n = lower(sym);
  for (const char* w : {"height", "width"})
    if (n.find(w) != std::string::npos) return false;
  for (const char* w : {"seq", "len", "token", "time", "frame", "step", "position"})
    if (n.find(w) != std::string::npos) return true;
  return false;
}

// The size --random-inputs gives a dynamic dim nothing binds, by its name: batches 1, image
// sides 224, sequence-like dims 128, anything else 1 on the first axis and 16 elsewhere.
int64_t random_dim_size(const std::string& sym, size_t axis) {
  const std::string n = lower(sym);
  if (is_batch_like(sym)) return 1;
  if (n.find("height") != std::string::npos || n.find("width") != std::string::npos || n == "h" || n == "w") return 224;
  if (is_sequence_like(sym)) return 128;
  return axis == 0 ? 1 : 16;
}

int run_run(const RunOptions& o) {
  CompileOptions copts;
  copts.num_threads = o.threads;
  apply_knobs(copts, o.knobs);
  // ONNX: an OnnxModel binds every symbolic input dim from the given tensors (--dim values fix
  // dims for every run) and imports the model with them bound, so shape computations fold.
  // Graph JSON: the graph is compiled with its symbolic dims.
  const bool onnx = is_onnx_path(o.path);
  std::unique_ptr<OnnxModel> model;
  Graph json_graph;
  std::vector<InputInfo> inputs;
  std::map<std::string, int64_t> dims;
  if (onnx) {
    OnnxModelOptions mo;
    mo.device = device_from_name(o.device);
    mo.compile = copts;
    mo.import.dims = parse_dims(o.dims, nullptr);  // OnnxModel checks the names
    std::cerr << "reading " << shown(o.path) << "...\n";
    model = load_onnx_model(o.path, std::move(mo));
    for (const auto& in : model->inputs()) inputs.push_back({in.name, in.shape, in.has_shape});
    dims = model->options().import.dims;
  } else {
    json_graph = load_graph_file(o.path);
    inputs = graph_inputs(json_graph);
    const std::set<std::string> symbols = symbolic_dims(json_graph);
    dims = parse_dims(o.dims, &symbols);
  }
  std::map<std::string, const InputInfo*> by_name;
  for (const auto& in : inputs) by_name[in.name] = &in;
  std::vector<std::string> input_names;
  for (const auto& in : inputs) input_names.push_back(in.name);

  // --input name=file.npy; symbolic dims are also bound from these files' shapes.
  NamedTensors feeds;
  std::map<std::string, std::string> source;
  for (const auto& s : o.inputs) {
    auto [name, file] = split_assignment(s, "--input");
    auto it = by_name.find(name);
    if (it == by_name.end())
      throw Error("--input " + shown(name) + ": the graph has no input named '" + shown(name) + "' (inputs: " +
                  quoted_list(input_names) + ")");
    if (source.count(name)) throw UsageError("--input " + shown(name) + " is given twice");
    Tensor t = load_input(name, file, it->second->shape.dtype);
    const Shape& want = it->second->shape;
    if (!onnx && t.rank() == want.rank()) {
      for (int64_t d = 0; d < t.rank(); ++d) {
        if (!want.dims[d].is_symbolic()) continue;
        auto [pos, inserted] = dims.emplace(want.dims[d].sym, t.dim(d));
        if (!inserted && pos->second != t.dim(d))
          throw Error("--input " + shown(name) + ": symbolic dim '" + shown(want.dims[d].sym) + "' is " +
                      std::to_string(t.dim(d)) + " in " + shown(file) + " (shape " + dims_str(t.shape()) + ") but " + std::to_string(pos->second) +
                      " elsewhere (--dim or another input)");
      }
    }
    source[name] = file;
    feeds.emplace_back(name, std::move(t));
  }
  if (onnx) {
    // Rank, static dims and shared symbols checked against the model (errors name the inputs).
    try {
      dims = model->bind(feeds);
    } catch (const Error& e) {
      throw Error(std::string("--input: ") + e.what());
    }
  }

  // Inputs not given: generated with --random-inputs, an error otherwise.
  std::vector<std::string> missing;
  for (const auto& in : inputs)
    if (!source.count(in.name)) missing.push_back(in.name);
  if (!missing.empty() && !o.random_inputs)
    throw Error("missing inputs " + quoted_list(missing) +
                "; pass --input NAME=FILE.npy for each, or --random-inputs to generate them");
  std::vector<std::string> picked;  // dims --random-inputs chose
  const size_t given_feeds = feeds.size();
  auto generate_missing = [&] {
    feeds.resize(given_feeds);
    for (const auto& name : missing) {
      const Shape& s = by_name[name]->shape;
      if (!by_name[name]->has_shape)
        throw Error("cannot generate input '" + shown(name) + "': the model declares no shape for it; give it with "
                    "--input " + shown(name) + "=FILE.npy");
      std::vector<int64_t> concrete;
      for (const Dim& d : s.dims) {
        if (d.is_static()) {
          concrete.push_back(d.value);
          continue;
        }
        auto it = dims.find(d.sym);
        if (it == dims.end()) {
          // A dim no --dim and no given input binds: a sensible size by its name (said below).
          it = dims.emplace(d.sym, random_dim_size(d.sym, concrete.size())).first;
          picked.push_back(d.sym);
        }
        concrete.push_back(it->second);
      }
      // The size policy first (a --dim of 1e11 must not become an anonymous allocation failure).
      const std::string what = "input '" + shown(name) + "' " + dtype_name(s.dtype) + dims_str(concrete) +
                               " (from " + s.str() + " and --dim)";
      const int64_t bytes = checked_nbytes(concrete, s.dtype, what);
      try {
        // Integer inputs (token ids, type ids, masks, indices) hold 0 and 1: valid for any table of 2+ rows.
        const bool ints = is_int(s.dtype);
        Tensor t = models::init_tensor(ints ? DType::Bool : s.dtype, concrete, models::InitKind::Normal, 1.0,
                                       models::name_seed(o.seed, "input:" + name));
        feeds.emplace_back(name, ints ? t.cast(s.dtype) : std::move(t));
      } catch (const std::bad_alloc&) {
        throw Error("out of memory generating " + what + ": " + format_bytes(bytes, true) + "; use smaller --dim values");
      }
      source[name] = "random";
    }
  };
  generate_missing();
  auto picked_list = [&] {
    std::string list;
    for (const auto& p : picked) list += (list.empty() ? "'" : ", '") + shown(p) + "=" + std::to_string(dims.at(p)) + "'";
    return list;
  };
  if (!picked.empty())
    std::cerr << "rlx run: --random-inputs picked " << picked_list() << " for the dynamic dims (set them with --dim NAME=N)\n";

  // The output folder before the (possibly long) compile and runs, so a bad path fails at once.
  if (!o.save_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.save_dir, ec);
    if (ec) throw Error("--save-outputs: cannot create directory '" + shown(o.save_dir) + "': " + ec.message());
  }

  if (o.profile) enable_device_profile(device_from_name(o.device));
  std::optional<CompiledGraph> json_cg;
  CompiledGraph* cgp = nullptr;
  const auto t_compile = std::chrono::steady_clock::now();
  if (onnx) {
    std::string shapes;
    for (const auto& in : inputs)
      for (const auto& [name, t] : feeds)
        if (name == in.name) shapes += (shapes.empty() ? "" : ", ") + shown(name) + "=" + dims_str(t.shape());
    // Inputs whose values select If branches are part of the signature: say which branch values.
    std::string values;
    for (const auto& name : model->value_inputs())
      for (const auto& [given, t] : feeds)
        if (given == name && t.numel() == 1)
          values += (values.empty() ? "" : ", ") + shown(name) + "=" +
                    (is_float(t.dtype()) ? std::to_string(t.to_f64()[0]) : std::to_string(t.to_i64()[0]));
    std::cerr << "importing for input shapes " << shapes << (values.empty() ? "" : " (If branches chosen by " + values + ")")
              << " and compiling for " << o.device << "...\n";
    // A picked sequence-like length the model cannot take (e.g. past its position table): halved
    // down to 8 before giving up, each retry said.
    for (int attempt = 0;; ++attempt) {
      try {
        cgp = &model->compiled(feeds);
        break;
      } catch (const Error& e) {
        bool shrunk = false;
        const std::string before = picked_list();
        for (const auto& sym : picked)
          if (is_sequence_like(sym) && dims.at(sym) > 8) dims.at(sym) /= 2, shrunk = true;
        if (!shrunk || attempt >= 4) throw;
        const std::string why = shown(e.what());
        std::cerr << "rlx run: the model does not run with the picked " << before << " ("
                  << (why.size() > 200 ? why.substr(0, 200) + "..." : why) << "); trying " << picked_list() << "\n";
        generate_missing();
      }
    }
  } else {
    std::cerr << "compiling " << json_graph.size() << " nodes for " << o.device << "...\n";
    json_cg.emplace(Session(device_from_name(o.device)).compile(json_graph, copts));
    cgp = &*json_cg;
  }
  CompiledGraph& cg = *cgp;
  const Graph& g = cg.graph();
  const double compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_compile).count();

  // Params: weights carried by the graph, random ones only when asked.
  std::vector<std::string> unset;
  for (NodeId id : g.param_nodes()) {
    const auto& p = std::get<ops::Param>(g.node(id).op);
    if (!g.weights().count(p.name)) unset.push_back(p.name);
  }
  if (!unset.empty() && !o.random_inputs)
    throw Error(std::to_string(unset.size()) + " params have no weights in the graph file: " + quoted_list(unset) +
                "; save the graph with its weights, or pass --random-inputs to use random values");
  if (!unset.empty()) {
    const std::set<std::string> wanted(unset.begin(), unset.end());
    for (const auto& [name, t] : models::random_weights(g, o.seed))
      if (wanted.count(name)) cg.set_param(name, t);
  }

  char buf[256];
  std::snprintf(buf, sizeof buf, "device: %s, threads: %s, %s %.2f ms\n", device_name(cg.device()),
                o.threads == 0 ? "all cores" : std::to_string(o.threads).c_str(),
                onnx ? "import + compile" : "compile", compile_ms);
  std::cout << "graph: " << shown(o.path) << " (" << g.size() << " nodes, " << g.param_nodes().size() << " params)\n" << buf;
  if (!unset.empty()) std::cout << "params: " << unset.size() << " filled with random values (--random-inputs)\n";
  std::cout << "inputs:\n";
  for (const auto& in : inputs)  // in graph order
    for (const auto& [name, t] : feeds)
      if (name == in.name)
        std::cout << "  " << shown(name) << ": " << t.shape_info().str() << " (" << shown(source[name]) << ")\n";

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
  for (size_t i = 0; i < outs.size(); ++i) std::cout << "  " << shown(labels[i]) << ": " << outs[i].summary() << "\n";
  const Latency l = latency_stats(ms);
  std::snprintf(buf, sizeof buf, "latency over %d runs (%d warm-up): p50 %.3f ms, p90 %.3f ms, min %.3f ms\n",
                o.repeat, o.warmup, l.p50, l.p90, l.min);
  std::cout << buf;
  if (o.profile) {
    const std::string table = take_device_profile(cg.device());
    if (cg.device() == Device::Cpu)
      std::cout << "CPU time per op kind, all " << o.warmup + o.repeat
                << " runs (wall time of each step; control flow includes its bodies):\n";
    else
      std::cout << "device time per op kind, all " << o.warmup + o.repeat
                << " runs (each step timed on its own, so the sum exceeds a run's time):\n";
    if (table.empty()) std::cout << "  (nothing was timed)\n";
    // The table is sorted, slowest kind first: the top --profile-top lines, then what was left out.
    size_t pos = 0;
    int shown_rows = 0, rest = 0;
    while (pos < table.size()) {
      const size_t end = table.find('\n', pos);
      const size_t next = end == std::string::npos ? table.size() : end + 1;
      if (shown_rows < o.profile_top) {
        std::cout << table.substr(pos, next - pos);
        ++shown_rows;
      } else {
        ++rest;
      }
      pos = next;
    }
    if (rest > 0) std::cout << "  ... " << rest << " more op kinds (--profile-top shows more)\n";
    const std::string steps = take_device_step_profile(cg.device(), o.profile_steps);
    if (!steps.empty())
      std::cout << "slowest steps (ms per run, share of all steps, multiply-adds per second for convs and products):\n"
                << steps;
  }

  if (!o.save_dir.empty()) {
    std::error_code ec;
    // One distinct file per output (never two outputs into one file), chosen deterministically
    // from the names; the mapping is printed.
    const auto files = unique_file_names(labels, ".npy");
    for (size_t i = 0; i < outs.size(); ++i) {
      const std::string file = (std::filesystem::path(o.save_dir) / files[i]).string();
      const bool existed = std::filesystem::exists(file, ec);
      save_npy(outs[i], file);
      std::cout << "saved output " << i << " '" << shown(labels[i]) << "' -> " << shown(file)
                << (existed ? " (replaced the file that was there)" : "") << "\n";
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
                "Generate every input not given (floats normal(0,1), ints and bools 0/1) and random "
                "values for params without weights; dynamic dims nothing binds get a size by their name "
                "(batch 1, height/width 224, sequence-like 128, halved while the model refuses it; printed)");
  sub->add_option("--seed", o->seed, "Seed for --random-inputs")->check(unsigned_64_validator())->capture_default_str();
  sub->add_option("--dim,-d", o->dims,
                  "Value of a symbolic dim NAME=VALUE (repeatable). Not needed for dims the --input files give (an "
                  "ONNX model is imported with every dim bound from them); --random-inputs needs one per symbolic dim "
                  "of a generated input");
  sub->add_option("--repeat,-n", o->repeat, "Timed runs")->check(CLI::Range(1, 1000000))->capture_default_str();
  sub->add_flag("--profile", o->profile, "Time per op kind, slowest first (cpu: wall time of each step; cuda, vulkan: device time)");
  sub->add_option("--profile-top", o->profile_top, "Op kinds the --profile table lists")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  sub->add_option("--profile-steps", o->profile_steps,
                  "Slowest steps --profile lists after the op kinds (cpu; with their shapes and GMAC/s)")
      ->check(CLI::Range(0, 1000000));
  sub->add_option("--warmup", o->warmup, "Untimed runs first")->check(CLI::Range(0, 1000000))->capture_default_str();
  sub->add_option("--save-outputs", o->save_dir, "Write every output as DIR/<name>.npy");
  sub->add_option("--threads,-t", o->threads, "CPU threads of the runs, the BLAS's included (0 = all cores)")
      ->check(CLI::Range(0, kMaxThreads))
      ->capture_default_str();
  sub->add_option("--device", o->device, "Device to compile for")
      ->check(CLI::IsMember({"cpu", "cuda", "vulkan", "webgpu"}))
      ->capture_default_str();
  sub->add_option("--knob", o->knobs, kKnobHelp);
  return {sub, [o] { return run_run(*o); }};
}

}  // namespace rlx::cli
