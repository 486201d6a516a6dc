#include "backends/vulkan/vk_api.h"

#include <dlfcn.h>

#include "rlx/error.h"

namespace rlx::vulkan {

VkFns& vk() {
  static VkFns fns;
  return fns;
}

std::string load_loader() {
  if (vk().vkGetInstanceProcAddr) return "";
  void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    return std::string("the Vulkan loader libvulkan.so.1 could not be opened (") + (e ? e : "unknown reason") +
           "); install libvulkan1 and a Vulkan driver (scripts/install-deps.sh installs the loader and Mesa's lavapipe)";
  }
  auto gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
  if (!gipa) return "the Vulkan loader exports no vkGetInstanceProcAddr";
  VkFns& f = vk();
#define RLX_VK_LOAD(name)                                                        \
  f.name = reinterpret_cast<PFN_##name>(gipa(VK_NULL_HANDLE, #name));           \
  if (!f.name) return "the Vulkan loader has no " #name;
  RLX_VK_GLOBAL_FNS(RLX_VK_LOAD)
#undef RLX_VK_LOAD
  f.vkGetInstanceProcAddr = gipa;
  return "";
}

void load_instance_fns(VkInstance instance) {
  VkFns& f = vk();
#define RLX_VK_LOAD(name)                                                                  \
  f.name = reinterpret_cast<PFN_##name>(f.vkGetInstanceProcAddr(instance, #name));        \
  if (!f.name) throw Error("Vulkan: the instance has no entry point " #name);
  RLX_VK_INSTANCE_FNS(RLX_VK_LOAD)
#undef RLX_VK_LOAD
  f.vkCreateDebugUtilsMessengerEXT = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
      f.vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT"));
  f.vkDestroyDebugUtilsMessengerEXT = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
      f.vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"));
}

void load_device_fns(VkDevice device) {
  VkFns& f = vk();
#define RLX_VK_LOAD(name)                                                         \
  f.name = reinterpret_cast<PFN_##name>(f.vkGetDeviceProcAddr(device, #name));   \
  if (!f.name) throw Error("Vulkan: the device has no entry point " #name);
  RLX_VK_DEVICE_FNS(RLX_VK_LOAD)
#undef RLX_VK_LOAD
}

const char* result_name(VkResult r) {
  switch (r) {
#define RLX_VK_CASE(x) \
  case x: return #x;
    RLX_VK_CASE(VK_SUCCESS)
    RLX_VK_CASE(VK_NOT_READY)
    RLX_VK_CASE(VK_TIMEOUT)
    RLX_VK_CASE(VK_INCOMPLETE)
    RLX_VK_CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
    RLX_VK_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    RLX_VK_CASE(VK_ERROR_INITIALIZATION_FAILED)
    RLX_VK_CASE(VK_ERROR_DEVICE_LOST)
    RLX_VK_CASE(VK_ERROR_MEMORY_MAP_FAILED)
    RLX_VK_CASE(VK_ERROR_LAYER_NOT_PRESENT)
    RLX_VK_CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
    RLX_VK_CASE(VK_ERROR_FEATURE_NOT_PRESENT)
    RLX_VK_CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
    RLX_VK_CASE(VK_ERROR_TOO_MANY_OBJECTS)
    RLX_VK_CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
    RLX_VK_CASE(VK_ERROR_FRAGMENTED_POOL)
    RLX_VK_CASE(VK_ERROR_OUT_OF_POOL_MEMORY)
    RLX_VK_CASE(VK_ERROR_INVALID_SHADER_NV)
#undef RLX_VK_CASE
    default: return "VkResult (unknown code)";
  }
}

void check(VkResult r, const char* what) {
  if (r == VK_SUCCESS) return;
  std::string msg = std::string("Vulkan: ") + what + " failed: " + result_name(r) + " (" + std::to_string(r) + ")";
  if (r == VK_ERROR_DEVICE_LOST) msg += "; the device was lost (a kernel fault or a driver reset): restart the process";
  throw Error(msg);
}

}  // namespace rlx::vulkan
