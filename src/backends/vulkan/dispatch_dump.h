#pragma once
// RLX_VULKAN_DUMP=DIR (knob vulkan_dump): every dispatch a variant records is written to DIR as
// NNNN_<kernel>.comp (its GLSL) and NNNN_<kernel>.json (binding window sizes, push-constant
// words, workgroup counts), so bench/vk_kernel_lab can replay one kernel, or edited versions of
// its GLSL, in isolation.
#include <cstdint>
#include <string>
#include <vector>

#include "backends/vulkan/lower.h"

namespace rlx::vulkan {

// Writes one dispatch to `dir` (created when missing); rlx::Error when it cannot be written.
void dump_dispatch(const std::string& dir, const Kernel& k, const std::vector<Operand>& bindings,
                   const std::vector<uint32_t>& push, const uint32_t groups[3]);

}  // namespace rlx::vulkan
