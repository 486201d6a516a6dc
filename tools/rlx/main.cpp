// rlx: command-line front end of the rlx compiler/runtime.
//   rlx inspect graph.json         structure, params and op histogram of a graph file
//   rlx run graph.json ...         compile for a device, run, print outputs and latency
//   rlx export-demo out.json       write a demo transformer model with weights
//   rlx conformance DIR            run the ONNX backend node cases of DIR and report
//   rlx check graph.json --device  per op kind: native / decomposed / unsupported on a device
//   rlx knobs                      the tuning knobs: name, variable, type, range, default
//   rlx quantize in out.gguf       a .safetensors / .gguf file as GGUF in a ggml block format
//   rlx generate m.gguf -p TEXT    text from a Llama GGUF model (KV-cache decode, sampling)
// Exit codes: 0 success, 1 error (message on stderr), 2 usage error.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <new>

#include "cli.h"

namespace {

int run_command(const std::string& name, const std::function<int()>& action) {
  try {
    return action();
  } catch (const rlx::cli::UsageError& e) {
    std::cerr << "rlx " << name << ": " << e.what() << "\nRun 'rlx " << name << " --help' for usage.\n";
    return 2;
  } catch (const rlx::Error& e) {
    std::cerr << "rlx " << name << ": error: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "rlx " << name << ": error: out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "rlx " << name << ": error: " << e.what() << "\n";
    return 1;
  } catch (...) {
    std::cerr << "rlx " << name << ": error: unexpected failure\n";
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rlx: an ML compiler and runtime. Runs ONNX models and rlx graph JSON files on the CPU, NVIDIA GPUs "
               "(CUDA) and any GPU (Vulkan, WebGPU), and generates text with GGUF or Hugging Face Llama-family "
               "models (Llama, Mistral, Qwen2, Qwen3).",
               "rlx"};
  app.set_version_flag("-V,--version", std::string("rlx ") + rlx::cli::kVersion);
  app.require_subcommand(1);
  app.footer(
      "Examples:\n"
      "  rlx run model.onnx --input x=x.npy --device cuda\n"
      "  rlx generate model.gguf --prompt \"Once upon a time\" -n 64\n"
      "  rlx export-demo demo.json\n"
      "  rlx inspect demo.json\n"
      "  rlx run demo.json --random-inputs --repeat 20\n"
      "Run 'rlx COMMAND --help' for the options of a command.");

  std::vector<rlx::cli::Command> commands;
  try {
    commands.push_back(rlx::cli::add_inspect_command(app));
    commands.push_back(rlx::cli::add_run_command(app));
    commands.push_back(rlx::cli::add_export_demo_command(app));
    commands.push_back(rlx::cli::add_conformance_command(app));
    commands.push_back(rlx::cli::add_check_command(app));
    commands.push_back(rlx::cli::add_knobs_command(app));
    commands.push_back(rlx::cli::add_quantize_command(app));
    commands.push_back(rlx::cli::add_generate_command(app));
    commands.push_back(rlx::cli::add_export_web_command(app));
  } catch (const std::exception& e) {  // a bug in the option setup; never expected
    std::cerr << "rlx: internal error while setting up options: " << e.what() << "\n";
    return 1;
  }

  if (argc > 1 && argv[1][0] != '-') {  // CLI11 would only say that a subcommand is required
    std::string names;
    bool known = false;
    for (const auto& c : commands) {
      known = known || c.app->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + c.app->get_name();
    }
    if (!known) {
      std::cerr << "rlx: unknown command '" << argv[1] << "' (commands: " << names << ")\nRun 'rlx --help' for usage.\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help/version to stdout, errors to stderr
    return code == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    std::cerr << "rlx: error: " << e.what() << "\n";
    return 2;
  }

  for (const auto& c : commands)
    if (c.app->parsed()) return run_command(c.app->get_name(), c.action);
  std::cerr << "rlx: no command given\nRun 'rlx --help' for usage.\n";
  return 2;
}
