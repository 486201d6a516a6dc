// rlx export-web: compiles a model for WebGPU with the limits every browser offers and writes a
// web bundle (model.json, weights.bin, rlx-web.js, index.html) that runs it through navigator.gpu
// with no rlx runtime (docs/web-export.md).
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "cli.h"

namespace rlx::cli {
namespace {

struct ExportWebOptions {
  std::string path, dir;
  std::vector<std::string> dims, knobs;
  std::string weights = "f32";
};

int run_export_web(const ExportWebOptions& o) {
  // ONNX models take the dims at import (a node may need them to import at all); graph JSON
  // binds them at export.
  Graph g;
  WebExportOptions wo;
  wo.f16_weights = o.weights == "f16";
  std::map<std::string, int64_t>& bind = wo.dims;
  if (is_onnx_path(o.path)) {
    try {
      g = load_graph_file(o.path, parse_dims(o.dims, nullptr));
    } catch (const OnnxDimsError& e) {
      throw Error(std::string(e.what()) + "\n(a web bundle runs one input shape: pass --dim NAME=VALUE for each symbolic dim)");
    }
  } else {
    g = load_graph_file(o.path);
    const std::set<std::string> known = symbolic_dims(g);
    bind = parse_dims(o.dims, &known);
  }
  CompileOptions co;
  co.tuning.webgpu_limits = "web";
  co.tuning.webgpu_attn_baked = 1;  // browsers mostly run GPUs: the faster attention kernel
  apply_knobs(co, o.knobs);
  if (co.tuning.webgpu_limits != "web")
    throw UsageError("--knob webgpu_limits: a web bundle is always compiled for the browsers' limits (web)");
  CompiledGraph cg = Session(Device::WebGpu).compile(g, co);
  const WebExportSummary s = cg.export_web(o.dir, wo);
  std::cout << "wrote " << shown(o.dir) << ": ";
  for (size_t i = 0; i < s.files.size(); ++i) std::cout << (i ? ", " : "") << s.files[i];
  std::cout << "\n  " << s.kernels << " WGSL kernels, " << s.dispatches << " dispatches per run\n"
            << "  weights " << format_bytes(static_cast<int64_t>(s.weight_bytes), true) << ", device memory "
            << format_bytes(static_cast<int64_t>(s.buffer_bytes)) << "\n"
            << "  compiled for " << s.target << "\n"
            << "serve the folder over HTTP (e.g. python3 -m http.server -d " << shown(o.dir)
            << ") and open index.html in a browser with WebGPU\n";
  return 0;
}

}  // namespace

Command add_export_web_command(CLI::App& parent) {
  auto opts = std::make_shared<ExportWebOptions>();
  CLI::App* app = parent.add_subcommand(
      "export-web", "Compile a model ahead of time into a web bundle that runs in a browser through WebGPU.");
  app->add_option("graph", opts->path, "Graph file (rlx graph JSON or .onnx)")->required();
  app->add_option("dir", opts->dir, "Folder to write the bundle into (created when missing)")->required();
  app->add_option("--dim", opts->dims, "Value of a symbolic input dim: NAME=VALUE (repeatable; a bundle runs one shape)");
  app->add_option("--knob", opts->knobs, kKnobHelp);
  app->add_option("--weights", opts->weights,
                  "f32: weights as the model has them; f16: f32 weights rounded to f16 in weights.bin (half the "
                  "download; the page widens them; numbers change by the rounding)")
      ->check(CLI::IsMember({"f32", "f16"}))
      ->capture_default_str();
  app->footer(
      "Writes model.json (WGSL kernels, buffers, recorded dispatches), weights.bin, rlx-web.js (the ES module that "
      "runs it: loadModel(url) then model.run({name: array})) and index.html (a demo page). Compiling needs a "
      "WebGPU adapter here (Dawn; SwiftShader without a GPU), which validates every kernel.");
  return Command{app, [opts] { return run_export_web(*opts); }};
}

}  // namespace rlx::cli
