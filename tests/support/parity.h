#pragma once
// The parity harness: runs one graph under two configurations (device, compile options,
// precision) on the same random inputs and params, and compares every output with
// per-dtype tolerances, reporting the worst element. Used for passes and backends.
#include <string>
#include <vector>

#include "support/test_util.h"

namespace rlx::testing {

struct RunConfig {
  std::string label = "cpu";
  Device device = Device::Cpu;
  CompileOptions options;
  // Transforms the graph before compiling (e.g. an optimizer pass); identity when empty.
  std::function<Graph(const Graph&)> transform;
};

struct OutputDiff {
  size_t output = 0;
  double max_abs = 0, max_rel = 0;
  int64_t worst_index = -1;
  double a_value = 0, b_value = 0;
  bool shape_or_dtype_mismatch = false;
  bool pass = true;
};

struct ParityReport {
  std::vector<OutputDiff> outputs;
  bool pass = true;
  std::string text;  // one line per output
};

struct ParityOptions {
  uint64_t seed = 1234;
  double lo = -1.0, hi = 1.0;        // range of random float inputs/params
  int64_t int_hi = 4;                // integer inputs are drawn from [0, int_hi)
  // Extra fixed inputs/params (override the random ones by name).
  NamedTensors fixed_inputs, fixed_params;
  // Per-dtype tolerance override; empty -> parity_tolerance(dtype).
  std::function<Tolerance(DType)> tolerance;
};

// Tolerances for comparing two implementations: f64 1e-9, f32 1e-4 rel / 1e-5 abs,
// f16/bf16 1e-2, ints/bool exact.
Tolerance parity_tolerance(DType t);

// Random inputs for every Input node and every Param node of `g` (symbolic dims are not allowed).
NamedTensors random_inputs(const Graph& g, const ParityOptions& opts);
NamedTensors random_params(const Graph& g, const ParityOptions& opts);

// Compiles `g` under `config`, sets `params` and runs it on `ins`: one side of a comparison,
// for tests that judge the results themselves.
std::vector<Tensor> run_config(const Graph& g, const RunConfig& config, const NamedTensors& ins,
                               const NamedTensors& params);

ParityReport compare_configs(const Graph& g, const RunConfig& a, const RunConfig& b,
                             const ParityOptions& opts = {});

}  // namespace rlx::testing
