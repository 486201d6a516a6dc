// The WebGPU backend: claims what its WGSL kernels run (claims.cpp) on the process's WebGPU
// device (wgpu_context.h) and prepares variants (variant.cpp).
#include "backends/webgpu/device_target.h"
#include "backends/webgpu/lower.h"
#include "backends/webgpu/variant.h"
#include "backends/webgpu/wgpu_context.h"
#include "runtime/backend.h"

namespace rlx {
namespace {

class WebGpuBackend final : public Backend {
 public:
  explicit WebGpuBackend(const webgpu::DeviceInfo* info) : info_(info) {}
  Device device() const override { return Device::WebGpu; }
  bool claims_kind(std::string_view op) const override { return webgpu::webgpu_claims_kind(op); }
  bool claims(const Graph& g, const Node& n) const override { return webgpu::webgpu_claims_node(g, n, info_); }
  std::string unclaimed_reason(const Graph& g, const Node& n) const override {
    std::string why;
    return webgpu::webgpu_claims_node(g, n, info_, &why) ? std::string() : why;
  }
  std::unique_ptr<Variant> prepare(Graph g, const CompileOptions& options) override {
    return webgpu::make_webgpu_variant(std::move(g), options);
  }

 private:
  const webgpu::DeviceInfo* info_;  // null: claims for a device with every optional feature
};

}  // namespace

std::unique_ptr<Backend> make_webgpu_backend(const CompileOptions& options) {
  // The claims of the target the kernels are made for (knob webgpu_limits); throws "no WebGPU
  // device: <reason>".
  return std::make_unique<WebGpuBackend>(&webgpu::target_info(resolve_knobs(options)));
}

std::unique_ptr<Backend> make_webgpu_backend_for_check() {
  const std::string why = webgpu::unavailable_reason();
  return std::make_unique<WebGpuBackend>(why.empty() ? &webgpu::context().info : nullptr);
}

}  // namespace rlx
