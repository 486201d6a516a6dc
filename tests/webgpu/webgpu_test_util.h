#pragma once
// Helpers of the WebGPU tests: whether a WebGPU device can run here (else the test is skipped
// with the reason printed) and what kind of adapter it is.
#include <cstdint>
#include <string>

#include "rlx/graph.h"
#include "rlx/session.h"
#include "support/parity.h"

namespace rlx::testing {

// Empty when Device::WebGpu compiles and runs a trivial graph; else why not (no WebGPU backend in
// this build, no Dawn library, no adapter).
std::string webgpu_unavailable_reason();

#define RLX_REQUIRE_WEBGPU()                                                       \
  do {                                                                             \
    const std::string rlx_reason_ = ::rlx::testing::webgpu_unavailable_reason();   \
    if (!rlx_reason_.empty()) GTEST_SKIP() << rlx_reason_;                        \
  } while (0)

// True when the WebGPU adapter is a CPU implementation (SwiftShader, lavapipe).
bool webgpu_is_cpu_adapter();

// Dispatches recorded by compiling `g` for WebGPU with `options` (webgpu_stats before and after).
uint64_t webgpu_dispatches(const Graph& g, const CompileOptions& options = {});

// EXPECT that `g` gives the CPU oracle's results on WebGPU (compare_configs), printing the report
// and the graph.
void expect_webgpu_parity(const Graph& g, const ParityOptions& o = {});

}  // namespace rlx::testing
