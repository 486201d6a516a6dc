#pragma once
// Helpers of the CUDA tests: whether a CUDA device can run (else the test is skipped with the
// reason printed), and parity of one graph on CUDA against the CPU oracle.
#include <string>

#include "parity/attention_graph.h"
#include "support/parity.h"

namespace rlx::testing {

// Empty when Device::Cuda compiles a trivial graph; else why not (no toolkit in this build,
// no driver, no device).
std::string cuda_unavailable_reason();

// Skips the current test (printing the reason) when there is no CUDA device.
#define RLX_REQUIRE_CUDA()                                                          \
  do {                                                                              \
    const std::string rlx_reason_ = ::rlx::testing::cuda_unavailable_reason();      \
    if (!rlx_reason_.empty()) GTEST_SKIP() << rlx_reason_;                         \
  } while (0)

// Runs `g` on the CPU and on CUDA (with `precision`) on the same random inputs/params; returns
// the report (the per-dtype tolerances of parity_tolerance unless `opts` overrides them).
ParityReport cuda_parity(const Graph& g, Precision precision = Precision::Fp32, ParityOptions opts = {});

// The float dtypes the CUDA kernels are tested in.
inline constexpr DType kCudaFloats[] = {DType::F32, DType::F16, DType::BF16};

// EXPECT that `g` matches on CUDA and the CPU (cuda_parity), printing the report and the graph.
void expect_cuda_parity(const Graph& g, Precision precision = Precision::Fp32, ParityOptions opts = {});

}  // namespace rlx::testing
