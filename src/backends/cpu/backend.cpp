// The CPU backend: claims every op and runs variants with the reference executor.
#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "backends/cpu/executor.h"
#include "backends/cpu/parallel.h"
#include "runtime/backend.h"
#include "runtime/knobs.h"

namespace rlx {
namespace {

plan::PlanOptions plan_options(const CompileOptions& o) {
  plan::PlanOptions p;
  p.limits = o.limits;
  p.write_inputs = true;  // CacheWrite in place over carried caches (CpuVariant::run donates them)
  return p;
}

class CpuVariant final : public Variant {
 public:
  CpuVariant(Graph g, const CompileOptions& o) : ex_(std::move(g), plan_options(o)), threads_(o.num_threads) {
    ex_.set_pack_quant(resolve_knobs(o).cpu_pack_quant());
  }

  // Bound state stays in host memory: the outputs a run keeps are host tensors that only this
  // variant holds, and carried inputs read them. Those are donated to the executor: a step that
  // writes over its input (CacheWrite, MemoryPlan::written_inputs) updates them in place, and the
  // output comes back as the same tensor, so a decode step copies no cache. Inputs the caller
  // passes are never written (the executor copies them first).
  std::vector<Tensor> run(const RunArgs& a) override {
    cpu::ScopedThreads budget(threads_);  // the pool and the BLAS use this compile's budget
    ex_.set_params_generation(a.params_generation);
    std::map<size_t, Tensor> previous = std::move(kept_);
    kept_.clear();
    if (a.carry.empty() && a.keep.empty()) return ex_.run(a.leaves, a.which, a.params);
    std::unordered_map<NodeId, Tensor> leaves = a.leaves;  // copies share storage
    std::set<NodeId> donated;
    std::map<const void*, int> holders;  // storage -> carried inputs reading it
    for (const Carry& c : a.carry) {
      auto it = previous.find(c.output);
      if (it == previous.end())
        throw Error("CPU run: internal: output " + std::to_string(c.output) + " was not kept by the previous run");
      leaves[c.input] = it->second;
      ++holders[it->second.raw()];
    }
    for (const Carry& c : a.carry)  // one output carried into two inputs: neither may be written
      if (holders[leaves.at(c.input).raw()] == 1) donated.insert(c.input);
    std::vector<size_t> need = a.which;
    for (size_t k : a.keep)
      if (std::find(need.begin(), need.end(), k) == need.end()) need.push_back(k);
    std::vector<Tensor> got = ex_.run(leaves, need, a.params, &donated);
    for (size_t k : a.keep) {
      const size_t pos = static_cast<size_t>(std::find(need.begin(), need.end(), k) - need.begin());
      // A kept value that is also returned gets its own copy: the caller may modify the result.
      kept_[k] = pos < a.which.size() ? got[pos].clone() : got[pos];
    }
    got.resize(a.which.size());
    return got;
  }
  std::vector<Tensor> kept_outputs(const std::vector<size_t>& which, bool on_device) override {
    (void)on_device;  // host memory is the CPU's device memory
    std::vector<Tensor> out;
    for (size_t k : which) {
      auto it = kept_.find(k);
      if (it == kept_.end())
        throw Error("CPU variant: internal: output " + std::to_string(k) + " was not kept by the last run");
      out.push_back(it->second);
    }
    return out;
  }
  const Graph& graph() const override { return ex_.graph(); }
  size_t arena_bytes() const override { return ex_.arena_bytes(); }

 private:
  cpu::Executor ex_;
  int threads_;  // CompileOptions::num_threads (0: the process default)
  std::map<size_t, Tensor> kept_;  // by output index (RunArgs::keep)
};

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::Cpu; }
  bool claims_kind(std::string_view) const override { return true; }  // every op has a kernel
  std::unique_ptr<Variant> prepare(Graph g, const CompileOptions& o) override {
    return std::make_unique<CpuVariant>(std::move(g), o);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const CompileOptions& options) {
  // The budget is installed per run (CpuVariant::run), never process-wide: compiles with other
  // thread counts (the weight prologue, the importer's constant folding) leave it alone.
  if (options.num_threads < 0 || options.num_threads > cpu::kMaxThreads)
    throw Error("CompileOptions.num_threads is " + std::to_string(options.num_threads) + "; use 0 (all cores) or 1.." +
                std::to_string(cpu::kMaxThreads));
  return std::make_unique<CpuBackend>();
}

}  // namespace rlx
