#include "backends/vulkan/vk_context.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

#include "rlx/error.h"
#include "runtime/knobs.h"

namespace rlx::vulkan {
namespace {

std::mutex g_validation_mu;
std::vector<std::string> g_validation;
std::atomic<uint64_t> g_validation_errors{0};

VKAPI_ATTR VkBool32 VKAPI_CALL on_validation(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                             VkDebugUtilsMessageTypeFlagsEXT, const VkDebugUtilsMessengerCallbackDataEXT* data,
                                             void*) {
  if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
    ++g_validation_errors;
    std::lock_guard<std::mutex> lock(g_validation_mu);
    if (g_validation.size() < 64) g_validation.push_back(data && data->pMessage ? data->pMessage : "(no message)");
  }
  return VK_FALSE;
}

const char* type_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
  }
}

// VK_KHR_cooperative_matrix and VK_KHR_shader_bfloat16, newer than Debian 12's Vulkan headers
// (1.3.239): the structures and enumerants rlx reads, from the Vulkan registry.
constexpr auto kStypeCoopKhrFeatures = static_cast<VkStructureType>(1000506000);
constexpr auto kStypeCoopKhrProperties = static_cast<VkStructureType>(1000506001);
constexpr auto kStypeBf16Features = static_cast<VkStructureType>(1000141000);
constexpr uint32_t kComponentF16 = 0, kComponentF32 = 1, kComponentBf16 = 1000141000, kScopeSubgroup = 3;
struct CoopKhrFeatures {
  VkStructureType sType;
  void* pNext;
  VkBool32 cooperativeMatrix, cooperativeMatrixRobustBufferAccess;
};
struct CoopKhrProperties {
  VkStructureType sType;
  void* pNext;
  uint32_t MSize, NSize, KSize;
  uint32_t AType, BType, CType, ResultType;  // VkComponentTypeKHR
  VkBool32 saturatingAccumulation;
  uint32_t scope;  // VkScopeKHR
};
struct Bf16Features {
  VkStructureType sType;
  void* pNext;
  VkBool32 shaderBFloat16Type, shaderBFloat16DotProduct, shaderBFloat16CooperativeMatrix;
};
// VK_NV_cooperative_matrix2 (registry values; also newer than Debian 12's headers).
constexpr auto kStypeCoop2Features = static_cast<VkStructureType>(1000593000);
constexpr auto kStypeCoopFlexProperties = static_cast<VkStructureType>(1000593001);
constexpr auto kStypeCoop2Properties = static_cast<VkStructureType>(1000593002);
struct Coop2Features {
  VkStructureType sType;
  void* pNext;
  VkBool32 workgroupScope, flexibleDimensions, reductions, conversions, perElementOperations, tensorAddressing,
      blockLoads;
};
struct Coop2Properties {
  VkStructureType sType;
  void* pNext;
  uint32_t workgroupScopeMaxWorkgroupSize, flexibleDimensionsMaxDimension, workgroupScopeReservedSharedMemory;
};
struct CoopFlexProperties {
  VkStructureType sType;
  void* pNext;
  uint32_t MGranularity, NGranularity, KGranularity;
  uint32_t AType, BType, CType, ResultType;  // VkComponentTypeKHR
  VkBool32 saturatingAccumulation;
  uint32_t scope;  // VkScopeKHR
  uint32_t workgroupInvocations;
};

// A physical-device list through the instance-level entry point `name` (count, then fill; each
// element a zeroed T of structure type `stype`), or empty without the entry point or on failure.
template <typename T>
std::vector<T> physical_device_list(VkInstance instance, VkPhysicalDevice pd, const char* name, VkStructureType stype) {
  using Get = VkResult(VKAPI_PTR*)(VkPhysicalDevice, uint32_t*, T*);
  const auto get = reinterpret_cast<Get>(vk().vkGetInstanceProcAddr(instance, name));
  uint32_t n = 0;
  if (!get || get(pd, &n, nullptr) != VK_SUCCESS || n == 0) return {};
  std::vector<T> props(n, vk_struct<T>(stype));
  if (get(pd, &n, props.data()) != VK_SUCCESS) return {};
  props.resize(n);
  return props;
}

// The device's flexible-dimension products of VK_NV_cooperative_matrix2.
std::vector<DeviceInfo::FlexShape> coop_flex_shapes(VkInstance instance, VkPhysicalDevice pd) {
  std::vector<DeviceInfo::FlexShape> shapes;
  for (const CoopFlexProperties& p : physical_device_list<CoopFlexProperties>(
           instance, pd, "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV", kStypeCoopFlexProperties))
    shapes.push_back({p.MGranularity, p.NGranularity, p.KGranularity, p.AType, p.BType, p.CType, p.ResultType,
                      p.scope, p.workgroupInvocations});
  return shapes;
}

// The device's cooperative-matrix configurations.
std::vector<CoopKhrProperties> coop_khr_properties(VkInstance instance, VkPhysicalDevice pd) {
  return physical_device_list<CoopKhrProperties>(instance, pd, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR",
                                                 kStypeCoopKhrProperties);
}

// Whether `props` hold 16 x 16 x 16 subgroup products of A / B of `component` into f32.
bool lists_16x16x16(const std::vector<CoopKhrProperties>& props, uint32_t component) {
  for (const CoopKhrProperties& p : props)
    if (p.MSize == 16 && p.NSize == 16 && p.KSize == 16 && p.AType == component && p.BType == component &&
        p.CType == kComponentF32 && p.ResultType == kComponentF32 && p.scope == kScopeSubgroup)
      return true;
  return false;
}

bool has_extension(const std::vector<VkExtensionProperties>& exts, const char* name) {
  for (const auto& e : exts)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

VkInstance create_instance(bool validation, VkDebugUtilsMessengerEXT* messenger) {
  auto app = vk_struct<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
  app.pApplicationName = "rlx";
  app.pEngineName = "rlx";
  app.apiVersion = VK_API_VERSION_1_3;
  std::vector<const char*> layers, exts;
  if (validation) {
    uint32_t n = 0;
    vk().vkEnumerateInstanceLayerProperties(&n, nullptr);
    std::vector<VkLayerProperties> props(n);
    vk().vkEnumerateInstanceLayerProperties(&n, props.data());
    bool found = false;
    for (const auto& p : props) found = found || std::strcmp(p.layerName, "VK_LAYER_KHRONOS_validation") == 0;
    if (!found)
      throw Error("Vulkan: RLX_VULKAN_VALIDATION=1 but the layer VK_LAYER_KHRONOS_validation is not installed "
                  "(Debian: vulkan-validationlayers)");
    layers.push_back("VK_LAYER_KHRONOS_validation");
    exts.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  }
  auto ci = vk_struct<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  ci.pApplicationInfo = &app;
  ci.enabledLayerCount = static_cast<uint32_t>(layers.size());
  ci.ppEnabledLayerNames = layers.data();
  ci.enabledExtensionCount = static_cast<uint32_t>(exts.size());
  ci.ppEnabledExtensionNames = exts.data();
  VkInstance inst = VK_NULL_HANDLE;
  const VkResult r = vk().vkCreateInstance(&ci, nullptr, &inst);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
    throw Error("the Vulkan loader found no driver (vkCreateInstance: VK_ERROR_INCOMPATIBLE_DRIVER); install one "
                "(e.g. Mesa's lavapipe: mesa-vulkan-drivers) or point VK_DRIVER_FILES at a driver's ICD json file");
  check(r, "vkCreateInstance");
  load_instance_fns(inst);
  if (validation && vk().vkCreateDebugUtilsMessengerEXT) {
    auto mi = vk_struct<VkDebugUtilsMessengerCreateInfoEXT>(VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT);
    mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT;
    mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    mi.pfnUserCallback = on_validation;
    check(vk().vkCreateDebugUtilsMessengerEXT(inst, &mi, nullptr, messenger), "vkCreateDebugUtilsMessengerEXT");
  }
  return inst;
}

std::vector<VkPhysicalDevice> physical_devices(VkInstance inst) {
  uint32_t n = 0;
  check(vk().vkEnumeratePhysicalDevices(inst, &n, nullptr), "vkEnumeratePhysicalDevices");
  std::vector<VkPhysicalDevice> v(n);
  check(vk().vkEnumeratePhysicalDevices(inst, &n, v.data()), "vkEnumeratePhysicalDevices");
  v.resize(n);
  return v;
}

std::string device_line(size_t i, VkPhysicalDevice pd) {
  VkPhysicalDeviceProperties p{};
  vk().vkGetPhysicalDeviceProperties(pd, &p);
  return std::to_string(i) + ": " + p.deviceName + " [" + type_name(p.deviceType) + ", Vulkan " +
         std::to_string(VK_API_VERSION_MAJOR(p.apiVersion)) + "." + std::to_string(VK_API_VERSION_MINOR(p.apiVersion)) +
         "]";
}

std::string device_list(const std::vector<VkPhysicalDevice>& devs) {
  std::string s;
  for (size_t i = 0; i < devs.size(); ++i) s += "\n  " + device_line(i, devs[i]);
  return s;
}

// The device RLX_VULKAN_DEVICE names, else the first discrete, integrated, then any.
size_t pick_device(const std::vector<VkPhysicalDevice>& devs, const std::string& want) {
  if (!want.empty()) {
    const bool numeric = std::all_of(want.begin(), want.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (numeric) {
      const size_t i = std::stoul(want);
      if (i < devs.size()) return i;
    } else {
      std::string w = want;
      std::transform(w.begin(), w.end(), w.begin(), ::tolower);
      for (size_t i = 0; i < devs.size(); ++i) {
        VkPhysicalDeviceProperties p{};
        vk().vkGetPhysicalDeviceProperties(devs[i], &p);
        std::string n = p.deviceName;
        std::transform(n.begin(), n.end(), n.begin(), ::tolower);
        if (n.find(w) != std::string::npos) return i;
      }
    }
    throw Error("Vulkan: RLX_VULKAN_DEVICE='" + want + "' matches no device; the devices are:" + device_list(devs) +
                "\nset it to an index or to a part of a name");
  }
  for (VkPhysicalDeviceType t : {VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU}) {
    for (size_t i = 0; i < devs.size(); ++i) {
      VkPhysicalDeviceProperties p{};
      vk().vkGetPhysicalDeviceProperties(devs[i], &p);
      if (p.deviceType == t) return i;
    }
  }
  return 0;
}

Context* create_context() {
  auto cx = std::make_unique<Context>();
  if (std::string why = load_loader(); !why.empty()) throw Error("no Vulkan device: " + why);
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  cx->instance = create_instance(process_knobs::vulkan_validation(), &messenger);
  const auto devs = physical_devices(cx->instance);
  if (devs.empty())
    throw Error("no Vulkan device: the loader lists no physical device (install a driver, e.g. Mesa's lavapipe: "
                "mesa-vulkan-drivers)");
  const size_t pick = pick_device(devs, process_knobs::vulkan_device());
  cx->physical = devs[pick];
  VkPhysicalDevice pd = cx->physical;
  DeviceInfo& info = cx->info;

  auto props2 = vk_struct<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
  auto sub = vk_struct<VkPhysicalDeviceSubgroupProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES);
  props2.pNext = &sub;
  vk().vkGetPhysicalDeviceProperties2(pd, &props2);
  const VkPhysicalDeviceProperties& p = props2.properties;
  if (VK_API_VERSION_MINOR(p.apiVersion) < 2 && VK_API_VERSION_MAJOR(p.apiVersion) == 1)
    throw Error("no Vulkan device: " + std::string(p.deviceName) + " supports Vulkan " +
                std::to_string(VK_API_VERSION_MAJOR(p.apiVersion)) + "." + std::to_string(VK_API_VERSION_MINOR(p.apiVersion)) +
                "; rlx needs Vulkan 1.2 or later");
  info.name = p.deviceName;
  info.vendor_id = p.vendorID, info.device_id = p.deviceID, info.api_version = p.apiVersion;
  info.type = p.deviceType;
  info.max_storage_range = p.limits.maxStorageBufferRange;
  info.storage_alignment = std::max<uint64_t>(p.limits.minStorageBufferOffsetAlignment, 4);
  info.max_push_bytes = p.limits.maxPushConstantsSize;
  for (int i = 0; i < 3; ++i) info.max_groups[i] = p.limits.maxComputeWorkGroupCount[i];
  info.max_shared_bytes = p.limits.maxComputeSharedMemorySize;
  info.max_invocations = p.limits.maxComputeWorkGroupInvocations;
  info.subgroup_size = std::max<uint32_t>(sub.subgroupSize, 1);
  const bool compute_subgroups = (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
  info.subgroup_arith = compute_subgroups && (sub.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
  info.subgroup_shuffle = compute_subgroups && (sub.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
  info.subgroup_clustered = compute_subgroups && (sub.supportedOperations & VK_SUBGROUP_FEATURE_CLUSTERED_BIT);

  auto f11 = vk_struct<VkPhysicalDeviceVulkan11Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES);
  auto f12 = vk_struct<VkPhysicalDeviceVulkan12Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
  auto f2 = vk_struct<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
  f2.pNext = &f11;
  f11.pNext = &f12;
  vk().vkGetPhysicalDeviceFeatures2(pd, &f2);
  // Enable exactly what rlx uses, where present.
  auto e11 = vk_struct<VkPhysicalDeviceVulkan11Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES);
  auto e12 = vk_struct<VkPhysicalDeviceVulkan12Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
  auto e2 = vk_struct<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
  e2.pNext = &e11;
  e11.pNext = &e12;
  e2.features.shaderInt64 = f2.features.shaderInt64;
  e2.features.shaderInt16 = f2.features.shaderInt16;
  e2.features.shaderFloat64 = f2.features.shaderFloat64;
  e11.storageBuffer16BitAccess = f11.storageBuffer16BitAccess;
  e12.shaderFloat16 = f12.shaderFloat16;
  e12.shaderInt8 = f12.shaderInt8;
  e12.storageBuffer8BitAccess = f12.storageBuffer8BitAccess;
  e12.hostQueryReset = f12.hostQueryReset;
  info.int64 = f2.features.shaderInt64;
  info.int16 = f2.features.shaderInt16;
  info.float64 = f2.features.shaderFloat64;
  info.storage16 = f11.storageBuffer16BitAccess;
  info.float16 = f12.shaderFloat16 && info.storage16;
  info.int8 = f12.shaderInt8;
  info.storage8 = f12.storageBuffer8BitAccess && info.int8;

  uint32_t n_ext = 0;
  vk().vkEnumerateDeviceExtensionProperties(pd, nullptr, &n_ext, nullptr);
  std::vector<VkExtensionProperties> exts(n_ext);
  vk().vkEnumerateDeviceExtensionProperties(pd, nullptr, &n_ext, exts.data());
  std::vector<const char*> enable;
  if (has_extension(exts, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME)) {
    enable.push_back(VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
    info.memory_budget = true;
  }

  info.coopmat_khr = has_extension(exts, "VK_KHR_cooperative_matrix");
  info.coopmat2_nv = has_extension(exts, "VK_NV_cooperative_matrix2");
  auto coop = vk_struct<VkPhysicalDeviceCooperativeMatrixFeaturesNV>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV);
  auto coop_on = vk_struct<VkPhysicalDeviceCooperativeMatrixFeaturesNV>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV);
  if (has_extension(exts, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME)) {
    auto q = vk_struct<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
    q.pNext = &coop;
    vk().vkGetPhysicalDeviceFeatures2(pd, &q);
    if (coop.cooperativeMatrix && info.float16) {
      enable.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
      coop_on.cooperativeMatrix = VK_TRUE;
      e12.pNext = &coop_on;
      e12.vulkanMemoryModel = f12.vulkanMemoryModel;  // coopmat loads/stores use the memory model scopes
      info.coopmat_nv = true;
    }
  }

  // KHR matrices, f16 and bf16 (the NV kernels rewritten to KHR ones, spirv_coopmat.h).
  auto coop_khr = vk_struct<CoopKhrFeatures>(kStypeCoopKhrFeatures);
  auto bf16 = vk_struct<Bf16Features>(kStypeBf16Features);
  auto coop_khr_on = vk_struct<CoopKhrFeatures>(kStypeCoopKhrFeatures);
  auto bf16_on = vk_struct<Bf16Features>(kStypeBf16Features);
  if (info.coopmat_nv && info.coopmat_khr) {
    const bool has_bf16 = has_extension(exts, "VK_KHR_shader_bfloat16");
    auto q = vk_struct<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
    q.pNext = &coop_khr;
    if (has_bf16) coop_khr.pNext = &bf16;
    vk().vkGetPhysicalDeviceFeatures2(pd, &q);
    const std::vector<CoopKhrProperties> props =
        coop_khr.cooperativeMatrix ? coop_khr_properties(cx->instance, pd) : std::vector<CoopKhrProperties>{};
    const bool f16_ok = lists_16x16x16(props, kComponentF16);
    const bool bf16_ok = has_bf16 && bf16.shaderBFloat16Type && bf16.shaderBFloat16CooperativeMatrix &&
                         lists_16x16x16(props, kComponentBf16);
    if (f16_ok || bf16_ok) {
      enable.push_back("VK_KHR_cooperative_matrix");
      coop_khr_on.cooperativeMatrix = VK_TRUE;
      coop_khr_on.pNext = e12.pNext;
      e12.pNext = &coop_khr_on;
      info.coopmat_khr_f16 = f16_ok;
    }
    if (bf16_ok) {
      enable.push_back("VK_KHR_shader_bfloat16");
      bf16_on.shaderBFloat16Type = VK_TRUE;
      bf16_on.shaderBFloat16CooperativeMatrix = VK_TRUE;
      bf16_on.pNext = e12.pNext;
      e12.pNext = &bf16_on;
      info.coopmat_bf16 = true;
    }
  }

  // Workgroup-scope matrices of flexible dimensions (VK_NV_cooperative_matrix2) on top of the KHR
  // ones: what vk_kernel_lab's workgroup-scope GEMMs take (docs/backends/vulkan.md); no rlx kernel yet.
  auto coop2 = vk_struct<Coop2Features>(kStypeCoop2Features);
  auto coop2_on = vk_struct<Coop2Features>(kStypeCoop2Features);
  if (info.coopmat2_nv && (info.coopmat_khr_f16 || info.coopmat_bf16)) {
    auto q = vk_struct<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
    q.pNext = &coop2;
    vk().vkGetPhysicalDeviceFeatures2(pd, &q);
    if (coop2.workgroupScope && coop2.flexibleDimensions) {
      enable.push_back("VK_NV_cooperative_matrix2");
      coop2_on.workgroupScope = coop2_on.flexibleDimensions = VK_TRUE;
      coop2_on.pNext = e12.pNext;
      e12.pNext = &coop2_on;
      auto c2p = vk_struct<Coop2Properties>(kStypeCoop2Properties);
      auto pq = vk_struct<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
      pq.pNext = &c2p;
      vk().vkGetPhysicalDeviceProperties2(pd, &pq);
      info.coopmat2_workgroup = true;
      info.coopmat2_max_workgroup = c2p.workgroupScopeMaxWorkgroupSize;
      info.coopmat2_reserved_shared = c2p.workgroupScopeReservedSharedMemory;
      info.coopmat2_shapes = coop_flex_shapes(cx->instance, pd);
    }
  }

  auto pstats = vk_struct<VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR);
  if (process_knobs::vulkan_pipeline_stats() &&
      has_extension(exts, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME)) {
    enable.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
    pstats.pipelineExecutableInfo = VK_TRUE;
    pstats.pNext = e2.pNext;
    e2.pNext = &pstats;
    info.pipeline_stats = true;
  }

  uint32_t n_fam = 0;
  vk().vkGetPhysicalDeviceQueueFamilyProperties(pd, &n_fam, nullptr);
  std::vector<VkQueueFamilyProperties> fams(n_fam);
  vk().vkGetPhysicalDeviceQueueFamilyProperties(pd, &n_fam, fams.data());
  bool found = false;
  for (uint32_t i = 0; i < n_fam && !found; ++i)
    if (fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) cx->queue_family = i, found = true;
  if (!found) throw Error("no Vulkan device: " + info.name + " has no compute queue");
  if (fams[cx->queue_family].timestampValidBits > 0) info.timestamp_ns = p.limits.timestampPeriod;

  const float priority = 1.0f;
  auto qi = vk_struct<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
  qi.queueFamilyIndex = cx->queue_family;
  qi.queueCount = 1;
  qi.pQueuePriorities = &priority;
  auto di = vk_struct<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
  di.pNext = &e2;
  di.queueCreateInfoCount = 1;
  di.pQueueCreateInfos = &qi;
  di.enabledExtensionCount = static_cast<uint32_t>(enable.size());
  di.ppEnabledExtensionNames = enable.data();
  check(vk().vkCreateDevice(pd, &di, nullptr, &cx->device), "vkCreateDevice");
  load_device_fns(cx->device);
  vk().vkGetDeviceQueue(cx->device, cx->queue_family, 0, &cx->queue);

  vk().vkGetPhysicalDeviceMemoryProperties(pd, &cx->memory);
  for (uint32_t h = 0; h < cx->memory.memoryHeapCount; ++h)
    if (cx->memory.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      info.device_local_bytes = std::max<uint64_t>(info.device_local_bytes, cx->memory.memoryHeaps[h].size);
  auto m3 = vk_struct<VkPhysicalDeviceMaintenance3Properties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES);
  auto props3 = vk_struct<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
  props3.pNext = &m3;
  vk().vkGetPhysicalDeviceProperties2(pd, &props3);
  info.max_allocation = m3.maxMemoryAllocationSize;
  return cx.release();
}

struct Holder {
  std::once_flag once;
  Context* cx = nullptr;
  std::string error;
};

Holder& holder() {
  static Holder h;
  return h;
}

}  // namespace

uint32_t Context::memory_type(uint32_t type_bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags prefer) const {
  for (int pass = 0; pass < 2; ++pass) {
    const VkMemoryPropertyFlags need = pass == 0 ? (want | prefer) : want;
    for (uint32_t i = 0; i < memory.memoryTypeCount; ++i)
      if ((type_bits & (1u << i)) && (memory.memoryTypes[i].propertyFlags & need) == need) return i;
  }
  throw Error("Vulkan: " + info.name + " has no memory type with the needed properties (flags " + std::to_string(want) +
              ")");
}

uint64_t Context::heap_available(uint32_t type) const {
  const uint32_t heap = memory.memoryTypes[type].heapIndex;
  if (!info.memory_budget) return memory.memoryHeaps[heap].size;
  auto budget = vk_struct<VkPhysicalDeviceMemoryBudgetPropertiesEXT>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT);
  auto mp = vk_struct<VkPhysicalDeviceMemoryProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2);
  mp.pNext = &budget;
  vk().vkGetPhysicalDeviceMemoryProperties2(physical, &mp);
  const uint64_t b = budget.heapBudget[heap], u = budget.heapUsage[heap];
  return b > u ? b - u : 0;
}

Context& context() {
  Holder& h = holder();
  std::call_once(h.once, [&] {
    try {
      h.cx = create_context();
    } catch (const Error& e) {
      // Every reason there is no usable device reads the same way ("no Vulkan device: ...").
      std::string what = e.what();
      if (what.rfind("Vulkan: ", 0) == 0) what = what.substr(8);
      h.error = what.rfind("no Vulkan device: ", 0) == 0 ? what : "no Vulkan device: " + what;
    }
  });
  if (!h.cx) throw Error(h.error);
  return *h.cx;
}

std::string unavailable_reason() {
  try {
    context();
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

std::vector<std::string> list_devices() {
  std::vector<std::string> out;
  const Context& cx = context();
  const auto devs = physical_devices(cx.instance);
  for (size_t i = 0; i < devs.size(); ++i) out.push_back(device_line(i, devs[i]) + (devs[i] == cx.physical ? " (used)" : ""));
  return out;
}

uint64_t validation_error_count() { return g_validation_errors.load(); }

std::vector<std::string> validation_messages() {
  std::lock_guard<std::mutex> lock(g_validation_mu);
  return g_validation;
}

}  // namespace rlx::vulkan
