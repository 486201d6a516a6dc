// The Vulkan backend: claims what its kernels run (claims.cpp) on the chosen device and prepares
// variants (variant.cpp).
#include "backends/vulkan/lower.h"
#include "backends/vulkan/variant.h"
#include "backends/vulkan/vk_context.h"
#include "runtime/backend.h"

namespace rlx {
namespace {

class VulkanBackend final : public Backend {
 public:
  explicit VulkanBackend(const vulkan::DeviceInfo* info) : info_(info) {}
  Device device() const override { return Device::Vulkan; }
  bool claims_kind(std::string_view op) const override { return vulkan::vulkan_claims_kind(op); }
  bool claims(const Graph& g, const Node& n) const override { return vulkan::vulkan_claims_node(g, n, info_); }
  std::string unclaimed_reason(const Graph& g, const Node& n) const override {
    std::string why;
    return vulkan::vulkan_claims_node(g, n, info_, &why) ? std::string() : why;
  }
  std::unique_ptr<Variant> prepare(Graph g, const CompileOptions& options) override {
    return vulkan::make_vulkan_variant(std::move(g), options);
  }

 private:
  const vulkan::DeviceInfo* info_;  // null: claims for a device with every optional feature
};

}  // namespace

std::unique_ptr<Backend> make_vulkan_backend(const CompileOptions& options) {
  (void)options;
  return std::make_unique<VulkanBackend>(&vulkan::context().info);  // throws "no Vulkan device: <reason>"
}

std::unique_ptr<Backend> make_vulkan_backend_for_check() {
  const std::string why = vulkan::unavailable_reason();
  return std::make_unique<VulkanBackend>(why.empty() ? &vulkan::context().info : nullptr);
}

}  // namespace rlx
