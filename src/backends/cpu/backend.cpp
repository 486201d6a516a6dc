// The CPU backend: claims every op and runs variants with the reference executor.
#include "backends/cpu/executor.h"
#include "backends/cpu/parallel.h"
#include "runtime/backend.h"

namespace rlx {
namespace {

class CpuVariant final : public Variant {
 public:
  CpuVariant(Graph g, const CompileOptions& o) : ex_(std::move(g), plan::PlanOptions{.limits = o.limits}) {}
  std::vector<Tensor> run(const RunArgs& a) override { return ex_.run(a.leaves, a.which, a.params); }
  const Graph& graph() const override { return ex_.graph(); }
  size_t arena_bytes() const override { return ex_.arena_bytes(); }

 private:
  cpu::Executor ex_;
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
  if (options.num_threads < 0) throw Error("CompileOptions.num_threads must be >= 0");
  cpu::set_num_threads(options.num_threads);
  return std::make_unique<CpuBackend>();
}

}  // namespace rlx
