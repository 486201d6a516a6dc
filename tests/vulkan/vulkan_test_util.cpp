#include "vulkan/vulkan_test_util.h"

#include <gtest/gtest.h>

#ifdef RLX_HAVE_VULKAN
#include "backends/vulkan/variant.h"
#include "backends/vulkan/vk_context.h"
#endif

namespace rlx::testing {

#ifdef RLX_HAVE_VULKAN
namespace {

// Under RLX_VULKAN_VALIDATION=1 (every ctest entry sets it), a test process whose Vulkan work
// drew a validation error fails at its end, whatever test ran (ctest runs each in its own).
class ValidationCheck final : public ::testing::Environment {
 public:
  void TearDown() override {
    if (vulkan::validation_error_count() == 0) return;
    std::string all;
    for (const auto& m : vulkan::validation_messages()) all += "\n  " + m;
    ADD_FAILURE() << vulkan::validation_error_count() << " Vulkan validation error(s):" << all;
  }
};

[[maybe_unused]] ::testing::Environment* const g_validation_check =
    ::testing::AddGlobalTestEnvironment(new ValidationCheck);

}  // namespace
#endif

uint64_t vulkan_dispatches(const Graph& g, const CompileOptions& options) {
#ifdef RLX_HAVE_VULKAN
  const auto before = vulkan::vulkan_stats();
  Session(Device::Vulkan).compile(g, options);
  return vulkan::vulkan_stats().dispatches - before.dispatches;
#else
  (void)g, (void)options;
  return 0;
#endif
}

std::string vulkan_unavailable_reason() {
  static const std::string reason = [] {
    try {
      Graph g;
      g.add_output(g.relu(g.input("x", Shape::of({4}))));
      Session(Device::Vulkan).compile(g);
      return std::string();
    } catch (const Error& e) {
      return std::string(e.what());
    }
  }();
  return reason;
}

bool vulkan_is_cpu_adapter() {
#ifdef RLX_HAVE_VULKAN
  return vulkan_unavailable_reason().empty() && vulkan::context().info.type == VK_PHYSICAL_DEVICE_TYPE_CPU;
#else
  return false;
#endif
}

ParityReport vulkan_parity(const Graph& g, Precision precision, ParityOptions opts) {
  RunConfig cpu;
  cpu.label = "cpu";
  RunConfig side;
  side.label = std::string("vulkan/") + precision_name(precision);
  side.device = Device::Vulkan;
  side.options.precision = precision;
  return compare_configs(g, cpu, side, opts);
}

void expect_vulkan_parity(const Graph& g, Precision precision, ParityOptions opts) {
  const auto rep = vulkan_parity(g, precision, opts);
  EXPECT_TRUE(rep.pass) << rep.text << "\n" << g.to_text();
}

}  // namespace rlx::testing
