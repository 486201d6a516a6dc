#pragma once
// Runtime API: Session(Device).compile(graph, options) -> CompiledGraph; set_param; run.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rlx/device.h"
#include "rlx/graph.h"
#include "rlx/limits.h"
#include "rlx/tensor.h"
#include "rlx/tuning.h"

namespace rlx {

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

// Device tensors in runs (rlx/tensor.h; CUDA only). An input may be a device tensor on the
// device the graph was compiled for: it is copied device-to-device into the run's buffers (never
// through the host), after the run's stream waited for the tensor's producer stream
// (Tensor::stream()). A device tensor given to a graph compiled for another device (the CPU
// included) is an rlx::Error naming the input and both devices: copy it with Tensor::to_host().
// Outputs are host tensors unless RunOptions asks for device ones. run() returns when the
// device has finished the run (it reads the kernels' error flag), so device outputs are ready on
// every stream and the inputs' memory may be reused at once.
struct RunOptions {
  // Return every output as a device tensor in memory rlx allocates for it (on the compiled
  // graph's device; freed when the last copy of the Tensor goes), copied there device-to-device.
  bool device_outputs = false;
  // Caller-provided destinations: empty, or one device tensor per returned output (same order),
  // on the compiled graph's device, with that output's dtype and shape. The run writes the
  // outputs into them (device-to-device) and returns them. Their producer streams are waited
  // for before the writes.
  std::vector<Tensor> out;
};

// How CompiledGraph::export_web writes a bundle.
struct WebExportOptions {
  std::map<std::string, int64_t> dims;  // a value for each symbolic dim of the inputs
  // Float weights (params, constants) of an f32 graph go into weights.bin as f16, halving it; the
  // page widens them to the f32 words the kernels read, so the model computes with weights
  // rounded to f16 (a weight beyond f16's range is an rlx::Error). f16 and bf16 weights are
  // always written in their own 2-byte form (exact).
  bool f16_weights = false;
};

// What CompiledGraph::export_web wrote.
struct WebExportSummary {
  std::vector<std::string> files;  // relative to the bundle folder
  std::string target;              // the limits the kernels were made for
  size_t kernels = 0;              // distinct WGSL kernels
  size_t dispatches = 0;           // dispatches per run
  uint64_t weight_bytes = 0;       // weights.bin
  uint64_t buffer_bytes = 0;       // device memory the bundle allocates (weights, arena, scratch)
};

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
  // The same, taking the tensor: its bytes become the param's without a copy when it owns them
  // alone (Tensor::owns_alone), else they are copied. For loaders of large weights.
  void set_param(const std::string& name, Tensor&& value);
  // Runs with named inputs; returns every graph output in order.
  std::vector<Tensor> run(const NamedTensors& inputs);
  // Runs and returns only the outputs listed (by index), in the order given.
  std::vector<Tensor> run(const NamedTensors& inputs, const std::vector<size_t>& output_indices);
  // The same, with outputs placed as `options` says (device outputs: see RunOptions). Asking
  // for device outputs from a graph compiled for a device without device tensors -> rlx::Error.
  std::vector<Tensor> run(const NamedTensors& inputs, const std::vector<size_t>& output_indices,
                          const RunOptions& options);
  // After each run, output `output_index` becomes input `input_name` of the next run without a
  // host round trip. Passing that input explicitly to run() overrides the carried state.
  void bind_state(const std::string& input_name, size_t output_index);
  void reset_state();  // forgets carried values (the next run needs the inputs again)

  // Writes an ahead-of-time web bundle of this graph into folder `dir`: its WebGPU program (WGSL
  // kernels, the recorded dispatches, the memory plan), the weights in their device dtypes, an ES
  // module that runs it in a browser through navigator.gpu with no rlx runtime, and a demo page
  // (docs/web-export.md). `options.dims` gives a value to each symbolic dim of the inputs (none
  // for a static graph). The graph must be compiled for Device::WebGpu with the knob
  // webgpu_limits = "web", so that its kernels fit the limits every browser offers; params must
  // have values.
  WebExportSummary export_web(const std::string& dir, const WebExportOptions& options = {});
  const Graph& graph() const;
  Device device() const;
  std::vector<std::string> input_names() const;
  std::vector<std::string> param_names() const;
  size_t arena_bytes() const;  // bytes of the intermediate-value arena of the last run's plan
  // Shape bindings compiled so far (a static graph: 1 at compile; a symbolic one: one per new
  // binding of its dims, and again for a binding evicted from the cache of recent ones).
  size_t compile_count() const;

 private:
  std::vector<Tensor> run_checked(const NamedTensors& inputs, const std::vector<size_t>& output_indices,
                                  const RunOptions& options);
  void check_param_value(const std::string& name, const Tensor& value) const;  // set_param's checks
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
