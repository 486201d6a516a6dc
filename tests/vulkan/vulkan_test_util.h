#pragma once
// Helpers of the Vulkan tests: whether a Vulkan device can run here (else the test is skipped
// with the reason printed), and parity of one graph on Vulkan against the CPU oracle.
#include <cstdint>
#include <string>

#include "support/parity.h"

namespace rlx::testing {

// Empty when Device::Vulkan compiles and runs a trivial graph; else why not (no Vulkan backend
// in this build, no loader, no device).
std::string vulkan_unavailable_reason();

#define RLX_REQUIRE_VULKAN()                                                        \
  do {                                                                              \
    const std::string rlx_reason_ = ::rlx::testing::vulkan_unavailable_reason();    \
    if (!rlx_reason_.empty()) GTEST_SKIP() << rlx_reason_;                         \
  } while (0)

// True when the Vulkan device is a CPU implementation (lavapipe, SwiftShader).
bool vulkan_is_cpu_adapter();

// Dispatches recorded by compiling `g` for Vulkan with `options` (vulkan_stats before and after).
uint64_t vulkan_dispatches(const Graph& g, const CompileOptions& options = {});

ParityReport vulkan_parity(const Graph& g, Precision precision = Precision::Fp32, ParityOptions opts = {});
void expect_vulkan_parity(const Graph& g, Precision precision = Precision::Fp32, ParityOptions opts = {});

}  // namespace rlx::testing
