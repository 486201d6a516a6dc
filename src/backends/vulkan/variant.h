#pragma once
// A compiled shape binding on a Vulkan device: the shared device runtime (runtime/
// device_variant.h) over VulkanDevice, with the Schedule lowered to dispatches (lower.h) that
// are recorded once into one command buffer and re-submitted on every run.
#include <cstdint>
#include <memory>
#include <string>

#include "rlx/graph.h"
#include "rlx/session.h"
#include "runtime/backend.h"

namespace rlx::vulkan {

std::unique_ptr<Variant> make_vulkan_variant(Graph g, const CompileOptions& options);

// Process-wide counters (tests take differences).
struct VulkanStats {
  uint64_t recordings = 0;  // schedules recorded into a command buffer (once per variant)
  uint64_t submits = 0;     // runs that re-submitted a recorded command buffer
  uint64_t dispatches = 0;  // dispatches recorded
  uint64_t barriers = 0;    // barriers recorded between commands of a schedule
  uint64_t copy_bytes = 0;  // bytes of the buffer copies recorded
};
VulkanStats vulkan_stats();

// Per-step device times of the runs since the last call (RLX_VULKAN_PROFILE=1), by op kind.
std::string take_vulkan_profile();

}  // namespace rlx::vulkan
