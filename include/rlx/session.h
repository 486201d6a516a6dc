#pragma once
// Runtime API: Session(Device).compile(graph, options) -> CompiledGraph; set_param; run.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rlx/graph.h"
#include "rlx/limits.h"
#include "rlx/tensor.h"
#include "rlx/tuning.h"

namespace rlx {

enum class Device { Cpu, Cuda, Vulkan, WebGpu };
const char* device_name(Device d);
Device device_from_name(const std::string& name);  // "cpu", "cuda", ... (throws on unknown)

// Numeric policy of a device backend (the CPU backend always computes in the graph's dtypes).
//   Fp32: exact FP32 math; Tf32: FP32 storage, TF32 tensor-core matmuls;
//   Fp16 / Bf16: matmul and attention in half precision with f32 accumulation, norms and
//   softmax accumulate in f32.
enum class Precision { Fp32, Tf32, Fp16, Bf16 };
const char* precision_name(Precision p);

struct CompileOptions {
  // CPU threads of this graph's runs, the BLAS's included; 0 = the process default (hardware
  // concurrency). Applied per run, so graphs compiled with other counts do not change it.
  int num_threads = 0;
  bool verify = true;      // verify the graph before compiling
  bool optimize = true;    // run the optimizer's pass pipeline (legalize always runs)
  // Print one line per pass (time, node counts) to stderr; RLX_PASS_REPORT=1 does the same.
  bool pass_report = false;
  // Pass names to skip (e.g. {"fuse_attention_block"}); an unknown name is an rlx::Error.
  // The passes named by RLX_DISABLE_PASSES are skipped too.
  std::vector<std::string> disabled_passes;
  Precision precision = Precision::Fp32;
  // The size policy for this compile and its runs (tensor sizes, While iterations, ...).
  Limits limits;
  // Tuning knobs of the optimizer and the lowering (rlx/tuning.h); unset members fall back to
  // their environment variables, then to the defaults. set_knob() sets them by name.
  Tuning tuning;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// A compiled graph owns its arena: run() on one CompiledGraph must not be called from two
// threads at once (compile one CompiledGraph per thread instead).
class CompiledGraph {
 public:
  struct Impl;
  explicit CompiledGraph(std::unique_ptr<Impl> impl);
  CompiledGraph(CompiledGraph&&) noexcept;
  CompiledGraph& operator=(CompiledGraph&&) noexcept;
  ~CompiledGraph();

  // Sets (copies) the value of a Param node. Unknown name, dtype or shape mismatch -> rlx::Error.
  void set_param(const std::string& name, const Tensor& value);
  // Runs with named inputs; returns every graph output in order.
  std::vector<Tensor> run(const NamedTensors& inputs);
  // Runs and returns only the outputs listed (by index), in the order given.
  std::vector<Tensor> run(const NamedTensors& inputs, const std::vector<size_t>& output_indices);
  // After each run, output `output_index` becomes input `input_name` of the next run without a
  // host round trip. Passing that input explicitly to run() overrides the carried state.
  void bind_state(const std::string& input_name, size_t output_index);
  void reset_state();  // forgets carried values (the next run needs the inputs again)

  const Graph& graph() const;
  Device device() const;
  std::vector<std::string> input_names() const;
  std::vector<std::string> param_names() const;
  size_t arena_bytes() const;  // bytes of the intermediate-value arena of the last run's plan
  // Shape bindings compiled so far (a static graph: 1 at compile; a symbolic one: one per new
  // binding of its dims, and again for a binding evicted from the cache of recent ones).
  size_t compile_count() const;

 private:
  std::vector<Tensor> run_checked(const NamedTensors& inputs, const std::vector<size_t>& output_indices);
  std::unique_ptr<Impl> impl_;
};

class Session {
 public:
  explicit Session(Device device = Device::Cpu) : device_(device) {}
  // Verifies and prepares `graph` for the device. Unsupported device or op -> rlx::Error.
  CompiledGraph compile(const Graph& graph, const CompileOptions& options = {}) const;
  Device device() const { return device_; }

 private:
  CompiledGraph compile_checked(const Graph& graph, const CompileOptions& options) const;
  Device device_;
};

}  // namespace rlx
