#pragma once
// Compute pipelines of GLSL kernels, created once per process per (source, bindings, push
// words) on the context's device, through one VkPipelineCache that is kept on disk beside the
// SPIR-V cache (runtime/disk_cache.h, folder "vulkan") and saved by save_pipeline_cache().
#include <cstdint>
#include <string>

#include "backends/vulkan/vk_api.h"

namespace rlx::vulkan {

struct Pipeline {
  VkPipeline pipeline = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  uint32_t bindings = 0;
  uint32_t push_bytes = 0;
};

// The pipeline of `source` with `bindings` storage buffers and `push_words` push-constant words
// (valid for the process's lifetime).
const Pipeline& pipeline_for(const std::string& name, const std::string& source, uint32_t bindings, uint32_t push_words);
// The driver's statistics of the pipeline's executables ("Register Count 128, ...") when the
// device was created with knob vulkan_pipeline_stats and has VK_KHR_pipeline_executable_properties;
// else empty.
std::string pipeline_statistics(const Pipeline& pl);
// Writes the pipeline cache to disk when pipelines were created since the last save.
void save_pipeline_cache();
uint64_t pipelines_created();

}  // namespace rlx::vulkan
