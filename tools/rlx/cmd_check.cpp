// rlx check: how a graph would run on a device after optimization: per op kind (grouped by kernel
// family), how many nodes the backend runs natively, how many the shared legalize decomposes,
// and which it cannot run.
#include <CLI/CLI.hpp>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include "cli.h"
#include "passes/legalize.h"
#include "passes/pipeline.h"
#include "passes/specialize.h"
#include "plan/step_family.h"
#include "runtime/backend.h"

namespace rlx::cli {
namespace {

struct CheckOptions {
  std::string path;
  std::string device = "cpu";
  std::vector<std::string> dims;
  bool no_optimize = false;
  bool pass_report = false;
};

int run_check(const CheckOptions& o) {
  Device dev;
  try {
    dev = device_from_name(o.device);
  } catch (const Error& e) {
    throw UsageError(std::string("--device: ") + e.what());
  }
  // As `rlx run`: ONNX models take the dims at import (which rejects unknown names); for graph
  // JSON every name must be a symbolic dim of the graph's inputs or params.
  Graph g;
  if (is_onnx_path(o.path)) {
    // The dims are bound at import (before any node is converted). Without them, a node that
    // needs a concrete dim stops the import: the ModelProto's summary says which and how.
    try {
      g = load_graph_file(o.path, parse_dims(o.dims, nullptr));
    } catch (const OnnxDimsError& e) {
      print_onnx_dims_fallback(o.path, e, "check");
      std::cout << "not checked: the ops rlx runs depend on the dims; pass --dim for each symbolic dim\n";
      return 1;
    }
  } else {
    g = load_graph_file(o.path);
    const std::set<std::string> known = symbolic_dims(g);
    const auto binding = parse_dims(o.dims, &known);
    if (!binding.empty()) {
      try {
        g = passes::specialize(g, binding);
      } catch (const Error& e) {
        std::string list;
        for (const auto& [name, v] : binding) list += (list.empty() ? "" : ", ") + shown(name) + "=" + std::to_string(v);
        throw Error("binding --dim " + list + ": " + e.what());
      }
    }
  }
  auto backend = make_backend_for_check(dev);
  CompileOptions co;
  std::vector<passes::PassStat> stats;
  const Graph opt = o.no_optimize ? g : passes::optimize(g, *backend, co, &stats);
  if (o.pass_report && !stats.empty()) std::cout << passes::format_report(stats) << "\n";
  const passes::ClaimFn claims = [&](const Graph& gr, const Node& n) { return backend->claims(gr, n); };
  const auto rows = passes::dispatch_report(opt, claims);
  std::cout << "graph: " << shown(o.path) << "\ndevice: " << device_name(dev) << (o.no_optimize ? " (unoptimized)" : "")
            << "\nops: " << passes::op_count(g) << " in, " << passes::op_count(opt) << " after optimization\n\n";
  // One line per op kind, grouped by kernel family (the families every GPU backend lowers by).
  std::multimap<std::optional<plan::StepFamily>, const passes::DispatchRow*> by_family;
  for (const auto& r : rows) by_family.emplace(plan::step_family(r.op), &r);
  std::cout << std::left << std::setw(13) << "family" << std::setw(28) << "op kind" << std::right << std::setw(8)
            << "native" << std::setw(12) << "decomposed" << std::setw(13) << "unsupported" << "\n";
  size_t native = 0, decomposed = 0, unsupported = 0;
  for (const auto& [family, r] : by_family) {
    std::cout << std::left << std::setw(13) << (family ? plan::family_name(*family) : "?") << std::setw(28) << r->op
              << std::right << std::setw(8) << r->native << std::setw(12) << r->decomposed << std::setw(13)
              << r->unsupported << "\n";
    native += r->native;
    decomposed += r->decomposed;
    unsupported += r->unsupported;
  }
  std::cout << std::left << std::setw(13) << "total" << std::setw(28) << "" << std::right << std::setw(8) << native
            << std::setw(12) << decomposed << std::setw(13) << unsupported << "\n\n";
  if (unsupported == 0) {
    std::cout << "ok: every node runs on " << device_name(dev) << "\n";
    return 0;
  }
  try {  // the full legalize error names each node that cannot run
    const passes::ReasonFn why = [&](const Graph& gr, const Node& n) { return backend->unclaimed_reason(gr, n); };
    passes::legalize(opt, claims, device_name(dev), why);
  } catch (const Error& e) {
    std::cout << "not runnable: " << e.what() << "\n";
  }
  return 1;
}

}  // namespace

Command add_check_command(CLI::App& parent) {
  auto opts = std::make_shared<CheckOptions>();
  CLI::App* app = parent.add_subcommand(
      "check", "Report how each op kind of a graph runs on a device: native, decomposed, unsupported.");
  app->add_option("graph", opts->path, "Graph file (rlx graph JSON or .onnx)")->required();
  app->add_option("--device", opts->device, "Target device: cpu, cuda, vulkan, webgpu")->capture_default_str();
  app->add_option("--dim", opts->dims, "Bind a symbolic dim before checking: NAME=VALUE (repeatable)");
  app->add_flag("--no-optimize", opts->no_optimize, "Check the graph as written, without the optimizer");
  app->add_flag("--pass-report", opts->pass_report, "Print the optimizer's per-pass report too");
  app->footer(
      "Exit code 0 when every node can run on the device, 1 otherwise (also when an ONNX model needs --dim values "
      "to import).");
  return Command{app, [opts] { return run_check(*opts); }};
}

}  // namespace rlx::cli
