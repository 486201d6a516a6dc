#pragma once
// The Select, Scan, Scatter and Random families of the Vulkan backend: lower_select.cpp
// (claims, ArgMax / ArgMin, TopK, Sample), lower_scan.cpp (Cumsum), lower_scatter.cpp
// (ScatterAdd), lower_random.cpp (RngUniform / RngNormal), lower_cache.cpp (CacheWrite). Kernel
// templates: kernels/select.h.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backends/vulkan/lower.h"
#include "plan/select_work.h"

namespace rlx::vulkan {

using plan::kSelectWorkgroup;                            // invocations per workgroup of every kernel here
inline constexpr int64_t kVulkanTopKMax = plan::kTopKMax;  // kept elements sorted in shared memory

void lower_cumsum(LowerContext& cx, const plan::Step& st);
void lower_scatter_add(LowerContext& cx, const plan::Step& st);
void lower_rng(LowerContext& cx, const plan::Step& st);
// CacheWrite (lower_cache.cpp; claimed by plan::select_family_claims_node).
void lower_cache_write(LowerContext& cx, const plan::Step& st);

// `src` with every "{NAME}" replaced.
std::string select_fill(std::string src, const std::vector<std::pair<std::string, std::string>>& subs);
// rlx::Error naming `what` when `n` does not fit the kernels' 32-bit indices.
void require_32bit(const std::string& what, int64_t n, const std::string& of);
// The low and high words of a 64-bit value (push constants).
inline uint32_t lo32(uint64_t v) { return static_cast<uint32_t>(v); }
inline uint32_t hi32(uint64_t v) { return static_cast<uint32_t>(v >> 32); }

}  // namespace rlx::vulkan
