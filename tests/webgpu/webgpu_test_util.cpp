#include "webgpu/webgpu_test_util.h"

#include <gtest/gtest.h>

#include "rlx/error.h"
#ifdef RLX_HAVE_WEBGPU
#include "backends/webgpu/variant.h"
#include "backends/webgpu/wgpu_context.h"
#endif

namespace rlx::testing {

std::string webgpu_unavailable_reason() {
  static const std::string reason = [] {
    try {
      Graph g;
      g.add_output(g.relu(g.input("x", Shape::of({4}))));
      Session(Device::WebGpu).compile(g);
      return std::string();
    } catch (const Error& e) {
      return std::string(e.what());
    }
  }();
  return reason;
}

bool webgpu_is_cpu_adapter() {
#ifdef RLX_HAVE_WEBGPU
  return webgpu_unavailable_reason().empty() && webgpu::context().info.adapter_type == "CPU";
#else
  return false;
#endif
}

uint64_t webgpu_dispatches(const Graph& g, const CompileOptions& options) {
#ifdef RLX_HAVE_WEBGPU
  const uint64_t before = webgpu::webgpu_stats().dispatches;
  Session(Device::WebGpu).compile(g, options);
  return webgpu::webgpu_stats().dispatches - before;
#else
  (void)g, (void)options;
  return 0;
#endif
}

void expect_webgpu_parity(const Graph& g, const ParityOptions& o) {
  RunConfig cpu, gpu;
  cpu.label = "cpu";
  gpu.label = "webgpu";
  gpu.device = Device::WebGpu;
  const auto rep = compare_configs(g, cpu, gpu, o);
  EXPECT_TRUE(rep.pass) << rep.text << "\n" << g.to_text();
}

}  // namespace rlx::testing
