#pragma once
// The Vulkan entry points rlx uses, loaded at run time from the Vulkan loader (libvulkan.so.1)
// with dlopen: a binary built with the Vulkan backend starts on machines without a loader, and
// Device::Vulkan then says what is missing instead of the process failing to load.
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <string>

namespace rlx::vulkan {

// Entry points resolved through vkGetInstanceProcAddr (global ones with a null instance).
#define RLX_VK_GLOBAL_FNS(X) \
  X(vkCreateInstance) X(vkEnumerateInstanceExtensionProperties) X(vkEnumerateInstanceLayerProperties)

#define RLX_VK_INSTANCE_FNS(X)                                                                                     \
  X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)                            \
  X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceFeatures2) X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkGetPhysicalDeviceMemoryProperties) X(vkGetPhysicalDeviceMemoryProperties2)                                 \
  X(vkEnumerateDeviceExtensionProperties) X(vkCreateDevice) X(vkGetDeviceProcAddr)

#define RLX_VK_DEVICE_FNS(X)                                                                                    \
  X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer) X(vkGetBufferMemoryRequirements) \
  X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory) X(vkMapMemory) X(vkUnmapMemory)                    \
  X(vkCreateCommandPool) X(vkDestroyCommandPool) X(vkAllocateCommandBuffers) X(vkFreeCommandBuffers)           \
  X(vkBeginCommandBuffer) X(vkEndCommandBuffer) X(vkResetCommandBuffer) X(vkCmdCopyBuffer) X(vkCmdFillBuffer) \
  X(vkCmdPipelineBarrier) X(vkCmdBindPipeline) X(vkCmdBindDescriptorSets) X(vkCmdPushConstants)                \
  X(vkCmdDispatch) X(vkCmdWriteTimestamp) X(vkCmdResetQueryPool) X(vkQueueSubmit) X(vkQueueWaitIdle)           \
  X(vkCreateFence) X(vkDestroyFence) X(vkWaitForFences) X(vkResetFences) X(vkCreateShaderModule)               \
  X(vkDestroyShaderModule) X(vkCreateDescriptorSetLayout) X(vkDestroyDescriptorSetLayout)                      \
  X(vkCreatePipelineLayout) X(vkDestroyPipelineLayout) X(vkCreateComputePipelines) X(vkDestroyPipeline)        \
  X(vkCreatePipelineCache) X(vkDestroyPipelineCache) X(vkGetPipelineCacheData) X(vkCreateDescriptorPool)       \
  X(vkDestroyDescriptorPool) X(vkAllocateDescriptorSets) X(vkUpdateDescriptorSets) X(vkCreateQueryPool)        \
  X(vkDestroyQueryPool) X(vkGetQueryPoolResults) X(vkDeviceWaitIdle)

struct VkFns {
#define RLX_VK_DECLARE(name) PFN_##name name = nullptr;
  RLX_VK_GLOBAL_FNS(RLX_VK_DECLARE)
  RLX_VK_INSTANCE_FNS(RLX_VK_DECLARE)
  RLX_VK_DEVICE_FNS(RLX_VK_DECLARE)
  PFN_vkCreateDebugUtilsMessengerEXT vkCreateDebugUtilsMessengerEXT = nullptr;
  PFN_vkDestroyDebugUtilsMessengerEXT vkDestroyDebugUtilsMessengerEXT = nullptr;
#undef RLX_VK_DECLARE
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
};

// The process's table (filled by load_loader / load_instance_fns / load_device_fns).
VkFns& vk();

// Opens the Vulkan loader and resolves the global entry points; "" on success, else why not.
std::string load_loader();
void load_instance_fns(VkInstance instance);  // rlx::Error naming a missing entry point
void load_device_fns(VkDevice device);

// A zeroed Vulkan info struct of type `t` (sType set).
template <class T>
T vk_struct(VkStructureType t) {
  T v{};
  v.sType = t;
  return v;
}

// "VK_ERROR_OUT_OF_DEVICE_MEMORY" ...
const char* result_name(VkResult r);
// Throws rlx::Error "<what> failed: <result name>" unless r is VK_SUCCESS.
void check(VkResult r, const char* what);

}  // namespace rlx::vulkan
