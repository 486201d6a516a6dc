#pragma once
// The seam between the runtime (Session/CompiledGraph) and a device backend.
//
// Session::compile optimizes the user's graph for the backend (fusions it claims, the shared
// legalize for the rest), then asks the backend to `prepare` one Variant per concrete shape
// binding. A Variant owns its plan (schedule, arena, device buffers) and runs it.
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rlx/graph.h"
#include "rlx/session.h"
#include "rlx/tensor.h"

namespace rlx::web {
struct WebProgram;
}

namespace rlx {

// Bound state (CompiledGraph::bind_state): input node `input` of a run takes the value of
// output `output` of the same variant's previous run, which stays where it is (device memory).
struct Carry {
  NodeId input = 0;
  size_t output = 0;
};

// Everything a Variant needs for one run.
struct RunArgs {
  // A tensor for every Input and Param node of the variant's graph, by node id (borrowed),
  // except the carried inputs. Params are host tensors; inputs may be device tensors of the
  // variant's device (the session checked the device kind) when the backend takes them.
  const std::unordered_map<NodeId, Tensor>& leaves;
  // Graph outputs to return, by index, in this order.
  const std::vector<size_t>& which;
  // Named params of the compiled graph (for If/While subgraph Param nodes).
  const std::map<std::string, Tensor>* params = nullptr;
  // Increments whenever set_param changes a value: a device backend re-uploads params when it
  // differs from the generation it uploaded last.
  uint64_t params_generation = 0;
  // Inputs carried from outputs of the previous run; each was listed in that run's `keep`.
  std::span<const Carry> carry = {};
  // Outputs that the next run may carry, or kept_outputs return: the variant keeps their values
  // until its next run (a device variant where the run left them; the CPU one as host copies).
  std::span<const size_t> keep = {};
  // Outputs as device tensors (RunOptions::device_outputs), or into `out` (RunOptions::out, one
  // per entry of `which`); only for backends with device_tensors().
  bool device_outputs = false;
  std::span<const Tensor> out = {};
};

// One compiled shape binding of a graph, ready to run on the device.
class Variant {
 public:
  virtual ~Variant() = default;
  // Returns host copies of the requested outputs (device tensors when RunArgs asks). If it throws, the values it was asked to keep
  // by its previous run are lost (the run may have overwritten them).
  virtual std::vector<Tensor> run(const RunArgs& args) = 0;
  // Copies of outputs that the last run kept (RunArgs::keep): carried state that leaves this
  // variant, e.g. because the next run has another shape binding. `on_device`: device tensors
  // where the backend takes them (and the output is stored in its own dtype), so the state moves
  // device to device; otherwise host tensors.
  virtual std::vector<Tensor> kept_outputs(const std::vector<size_t>& which, bool on_device) = 0;
  virtual const Graph& graph() const = 0;  // the static, optimized graph it runs
  virtual size_t arena_bytes() const = 0;  // bytes of its intermediate-value arena
  // The recorded device program, for an ahead-of-time web bundle (io/web_bundle.h). Only WebGPU
  // variants record one; the others throw rlx::Error.
  virtual std::unique_ptr<web::WebProgram> web_program() const;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // Whether its variants take device tensors as inputs and return them as outputs (RunArgs).
  virtual bool device_tensors() const { return false; }
  // True when the backend has a kernel for op kind `op_name` (e.g. "fused_swiglu") at all. The
  // optimizer only creates fused ops whose kind the backend claims.
  virtual bool claims_kind(std::string_view op_name) const = 0;
  // True when the backend executes node `n` of `g` natively, as is (attributes, dtypes and
  // shapes included); the shared legalize decomposes every node it does not claim.
  virtual bool claims(const Graph& g, const Node& n) const { (void)g; return claims_kind(op_name(n.op)); }
  // Why node `n` is not claimed, for error messages ("" when the backend has nothing to add).
  virtual std::string unclaimed_reason(const Graph& g, const Node& n) const {
    (void)g, (void)n;
    return {};
  }
  // Builds a runnable variant of a verified graph whose shapes are all static.
  virtual std::unique_ptr<Variant> prepare(Graph g, const CompileOptions& options) = 0;
};

// The backend for `d`; throws rlx::Error saying why when it is not built or has no device.
std::unique_ptr<Backend> make_backend(Device d, const CompileOptions& options);

// A backend object for claims queries only (`rlx check`): needs no device or driver; its
// prepare() may throw. Devices not in this build -> rlx::Error.
std::unique_ptr<Backend> make_backend_for_check(Device d);

// The CPU thread budget (the worker pool and the BLAS: every CPU thread rlx uses) for the calling
// thread while the returned object lives; n == 0 keeps the budget in force. Defined by the CPU
// backend (backends/cpu/parallel.h), so the session sets it without depending on that backend.
class ThreadBudget {
 public:
  virtual ~ThreadBudget() = default;
};
std::unique_ptr<ThreadBudget> scoped_thread_budget(int n);

// Per-device factories (each defined by its backend).
std::unique_ptr<Backend> make_cpu_backend(const CompileOptions& options);
#ifdef RLX_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(const CompileOptions& options);
std::unique_ptr<Backend> make_cuda_backend_for_check();
#endif
#ifdef RLX_HAVE_VULKAN
std::unique_ptr<Backend> make_vulkan_backend(const CompileOptions& options);
// Claims of the device Vulkan would use, or of one with every optional feature when none.
std::unique_ptr<Backend> make_vulkan_backend_for_check();
#endif
#ifdef RLX_HAVE_WEBGPU
std::unique_ptr<Backend> make_webgpu_backend(const CompileOptions& options);
// Claims of the WebGPU device, or of one with every optional feature when none.
std::unique_ptr<Backend> make_webgpu_backend_for_check();
#endif

}  // namespace rlx
