#pragma once
// The process's Vulkan instance and device: the loader opened, one physical device chosen
// (RLX_VULKAN_DEVICE: an index or a part of the name; default the first discrete GPU, else the
// first integrated one, else the first device), its features enabled (16/8-bit storage and
// arithmetic, 64-bit integers and floats where present), one compute queue, and the validation
// layers when RLX_VULKAN_VALIDATION=1 (their error messages are counted and kept for tests).
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "backends/vulkan/vk_api.h"

namespace rlx::vulkan {

// What the chosen device can do (filled once; kernels and claims read it).
struct DeviceInfo {
  std::string name;
  uint32_t vendor_id = 0, device_id = 0, api_version = 0;
  VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  bool float16 = false, int8 = false, int16 = false, int64 = false, float64 = false;
  bool storage16 = false, storage8 = false;  // 16- / 8-bit storage-buffer access
  bool subgroup_arith = false;               // subgroup arithmetic operations in compute shaders
  bool subgroup_shuffle = false;             // subgroupShuffle / subgroupShuffleXor
  bool subgroup_clustered = false;           // clustered subgroup reductions
  uint32_t subgroup_size = 1;
  bool memory_budget = false;                // VK_EXT_memory_budget enabled
  bool pipeline_stats = false;               // VK_KHR_pipeline_executable_properties enabled (knob vulkan_pipeline_stats)
  // Cooperative matrices: coopmat_nv is VK_NV_cooperative_matrix enabled (the GLSL of Debian's
  // glslang 12 spells only the NV extension); coopmat_khr / coopmat2_nv: the KHR and NV2
  // extensions are listed.
  bool coopmat_khr = false, coopmat_nv = false, coopmat2_nv = false;
  // VK_KHR_cooperative_matrix enabled with 16 x 16 x 16 subgroup products of f16 into f32 listed
  // (coopmat_khr_f16: the f16 kernels as KHR SPIR-V, knob vulkan_coopmat_khr), and with
  // VK_KHR_shader_bfloat16 those of bf16 (coopmat_bf16: the bf16 matmul / attention kernels). The
  // kernels are NV GLSL rewritten to KHR SPIR-V (spirv_coopmat.h).
  bool coopmat_khr_f16 = false, coopmat_bf16 = false;
  // VK_NV_cooperative_matrix2 enabled with workgroup-scope matrices of flexible dimensions: the
  // largest workgroup they allow, the shared memory the driver keeps for them, and the products
  // it lists (dimensions multiples of the granularities, a workgroup of `invocations`).
  struct FlexShape {
    uint32_t m, n, k;             // granularities
    uint32_t a, b, c, result;     // VkComponentTypeKHR
    uint32_t scope, invocations;  // VkScopeKHR
  };
  bool coopmat2_workgroup = false;
  uint32_t coopmat2_max_workgroup = 0, coopmat2_reserved_shared = 0;
  std::vector<FlexShape> coopmat2_shapes;
  uint64_t max_storage_range = 0;            // maxStorageBufferRange
  uint64_t storage_alignment = 16;           // minStorageBufferOffsetAlignment
  uint64_t max_allocation = 0;               // maxMemoryAllocationSize
  uint32_t max_push_bytes = 128;
  uint32_t max_groups[3] = {65535, 65535, 65535};
  uint32_t max_shared_bytes = 16384;
  uint32_t max_invocations = 128;
  double timestamp_ns = 0;                   // ns per tick; 0: no timestamps on the queue
  uint64_t device_local_bytes = 0;           // the largest device-local heap
};

class Context {
 public:
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  uint32_t queue_family = 0;
  DeviceInfo info;
  VkPhysicalDeviceMemoryProperties memory{};
  std::mutex queue_mu;  // vkQueueSubmit needs external synchronization

  // The memory type for `type_bits` with `want` flags (preferring `prefer` too); rlx::Error when none.
  uint32_t memory_type(uint32_t type_bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags prefer = 0) const;
  // Bytes the process may still allocate from the heap of memory type `type` (the budget minus
  // usage with VK_EXT_memory_budget, else the heap size).
  uint64_t heap_available(uint32_t type) const;
};

// The process's context, created at the first call; rlx::Error saying why there is none.
Context& context();
// "" when a Vulkan device can be used here, else why not (no loader, no device, ...).
std::string unavailable_reason();
// The physical devices the loader lists, one line each ("0: llvmpipe (LLVM 15.0.6, 256 bits) [cpu]").
std::vector<std::string> list_devices();

// Validation-layer messages of severity error seen so far (RLX_VULKAN_VALIDATION=1).
uint64_t validation_error_count();
std::vector<std::string> validation_messages();

}  // namespace rlx::vulkan
