#pragma once
// A compiled shape binding on the WebGPU device: the shared device runtime (runtime/
// device_variant.h) over WebGpuDevice, with the Schedule lowered to dispatches (lower.h) whose
// bind groups and parameters are made once; each run encodes them into one command buffer.
#include <cstdint>
#include <memory>

#include "rlx/graph.h"
#include "rlx/session.h"
#include "runtime/backend.h"

namespace rlx::webgpu {

std::unique_ptr<Variant> make_webgpu_variant(Graph g, const CompileOptions& options);

// Process-wide counters (tests take differences).
struct WebGpuStats {
  uint64_t variants = 0;    // variants prepared
  uint64_t submits = 0;     // runs that encoded and submitted their work
  uint64_t dispatches = 0;  // dispatches recorded by the variants prepared (once per variant)
  uint64_t encoded = 0;     // dispatches encoded by runs
  uint64_t packed = 0;      // params held as packed 16-bit values by the variants prepared (packed_weights.h)
  uint64_t copy_bytes = 0;  // bytes of the device copies the variants prepared record (once per variant)
};
WebGpuStats webgpu_stats();

// Per-kernel device times of the runs since the last call (RLX_WEBGPU_PROFILE=1), by
// "op:kernel", slowest first.
std::string take_webgpu_profile();

}  // namespace rlx::webgpu
