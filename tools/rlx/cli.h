#pragma once
// Shared pieces of the `rlx` command-line tool: command registration and small helpers.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "rlx/onnx.h"
#include "rlx/rlx.h"

namespace CLI {
class App;
class Validator;
}

namespace rlx::cli {

inline constexpr const char* kVersion = "0.1.0";

// A mistake in how the command was called (bad option syntax): exit code 2.
// Everything else that goes wrong is an rlx::Error (or std::exception): exit code 1.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& what) : std::runtime_error(what) {}
};

// A registered subcommand: `action` runs it once its options are parsed, returns the exit code.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> action;
};

Command add_inspect_command(CLI::App& parent);
Command add_run_command(CLI::App& parent);
Command add_export_demo_command(CLI::App& parent);
Command add_conformance_command(CLI::App& parent);
Command add_check_command(CLI::App& parent);
Command add_knobs_command(CLI::App& parent);
Command add_quantize_command(CLI::App& parent);
Command add_generate_command(CLI::App& parent);
Command add_export_web_command(CLI::App& parent);

// ---- helpers (cli_util.cpp) ----
// Splits "name=value" at the first '='; `what` names the option in the error (UsageError).
std::pair<std::string, std::string> split_assignment(const std::string& s, const std::string& what);
// Applies --knob NAME=VALUE options to `options` in order (rlx::set_knob): bad syntax is a
// UsageError; an unknown knob, a process knob or a bad value an rlx::Error naming it.
void apply_knobs(CompileOptions& options, const std::vector<std::string>& specs);
// The help text of the repeatable --knob option.
inline constexpr const char* kKnobHelp =
    "Tuning knob NAME=VALUE for the compile, instead of its RLX_* variable (repeatable; 'rlx knobs' lists them)";
// The largest --threads value (CompileOptions::num_threads' upper bound, which the CPU backend checks).
inline constexpr int kMaxThreads = 1024;
// Accepts decimal integers in [0, 2^64 - 1] only (CLI11 would wrap "-1" into a uint64_t option).
CLI::Validator unsigned_64_validator();
// Parses a non-negative decimal integer; UsageError naming `what` otherwise.
int64_t parse_count(const std::string& s, const std::string& what);
// Loads a graph file (rlx graph JSON, or ONNX when it ends in .onnx), with a clear error when it
// does not exist, is not a regular file or cannot be read (the OS reason). `onnx_dims` are
// applied at ONNX import (which rejects names that are not symbolic dims of the model).
Graph load_graph_file(const std::string& path, const std::map<std::string, int64_t>& onnx_dims = {});
bool is_onnx_path(const std::string& path);
// Reads an ONNX model for runs by input shapes (rlx::OnnxModel), with load_graph_file's errors.
std::unique_ptr<OnnxModel> load_onnx_model(const std::string& path, OnnxModelOptions options);
// The symbolic dims of an ONNX file's inputs (declared; unnamed ones as "<input>_d<axis>").
std::set<std::string> onnx_input_symbols(const OnnxModelInfo& info);
// inspect / check when the import of an ONNX model stops at a node that needs a concrete dim:
// prints the declared inputs and outputs, the ONNX op list and which node needs a dim, and
// how to give it (--dim NAME=V). `command` is "inspect" or "check".
void print_onnx_dims_fallback(const std::string& path, const OnnxDimsError& e, const std::string& command);
// The symbolic dims of a graph's inputs and params.
std::set<std::string> symbolic_dims(const Graph& g);
// Parses --dim NAME=VALUE options: bad syntax or a name given twice is a UsageError; with
// `known`, a name outside it is an rlx::Error naming it and listing the graph's symbolic dims.
std::map<std::string, int64_t> parse_dims(const std::vector<std::string>& specs, const std::set<std::string>* known);
// `name` for a message or listing: control characters escaped, very long names cut.
std::string shown(const std::string& name);
// "'a', 'b', 'c'" (at most `limit` names, then "and N more"; names shown escaped).
std::string quoted_list(const std::vector<std::string>& names, size_t limit = 12);
// "1,234,567"
std::string with_commas(int64_t v);
// "4.71 MiB (4,938,268 bytes)" style size text; `exact` adds the byte count.
std::string format_bytes(int64_t bytes, bool exact = false);
// Output names of `g`: the graph's names, "output_<i>" where a name is missing or empty.
std::vector<std::string> output_labels(const Graph& g);
// Name usable as a file name: characters outside [A-Za-z0-9_.-] become '_' (so no '/', no
// control characters), "", "." and ".." get a '_' prefix, and long names are cut.
std::string file_safe(const std::string& name);
// One distinct file name "<base>.<ext>" per name, in order, deterministically: file_safe
// bases, and "_2", "_3", ... appended where a base is taken already (compared without case,
// for case-insensitive file systems), so no two names share a file.
std::vector<std::string> unique_file_names(const std::vector<std::string>& names, const std::string& ext);

// Latency statistics over repeated runs (milliseconds).
struct Latency {
  double p50 = 0, p90 = 0, min = 0, max = 0, mean = 0;
};
Latency latency_stats(std::vector<double> ms);  // nearest-rank percentiles; ms must be non-empty

}  // namespace rlx::cli
