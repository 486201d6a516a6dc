// The CUDA backend: claims the ops it has kernels for (see claims.cpp) and prepares variants.
#include "backends/cuda/device.h"
#include "backends/cuda/lower.h"
#include "backends/cuda/variant.h"
#include "runtime/backend.h"

namespace rlx {
namespace {

class CudaBackend final : public Backend {
 public:
  Device device() const override { return Device::Cuda; }
  bool device_tensors() const override { return true; }
  bool claims_kind(std::string_view op) const override { return cuda::cuda_claims_kind(op); }
  bool claims(const Graph& g, const Node& n) const override { return cuda::cuda_claims_node(g, n); }
  std::string unclaimed_reason(const Graph& g, const Node& n) const override {
    std::string why;
    return cuda::cuda_claims_node(g, n, &why) ? std::string() : why;
  }
  std::unique_ptr<Variant> prepare(Graph g, const CompileOptions& options) override {
    return cuda::make_cuda_variant(std::move(g), options);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const CompileOptions& options) {
  (void)options;
  cuda::device();  // throws "no CUDA device: <reason>"
  return std::make_unique<CudaBackend>();
}

std::unique_ptr<Backend> make_cuda_backend_for_check() { return std::make_unique<CudaBackend>(); }

}  // namespace rlx
