#include "backends/vulkan/pipelines.h"

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backends/vulkan/glsl_compile.h"
#include "backends/vulkan/vk_context.h"
#include "rlx/error.h"
#include "runtime/disk_cache.h"

namespace rlx::vulkan {
namespace {

struct Pipelines {
  std::mutex mu;
  std::unordered_map<std::string, std::unique_ptr<Pipeline>> by_key;
  VkPipelineCache cache = VK_NULL_HANDLE;
  bool dirty = false;
  uint64_t created = 0;
  std::string file_key;  // the cache file's key (device and driver)
};

Pipelines& pipelines() {
  static Pipelines p;
  return p;
}

const std::string kCacheSource = "rlx VkPipelineCache";

VkPipelineCache pipeline_cache(Pipelines& p, Context& cx) {
  if (p.cache) return p.cache;
  p.file_key = "pipelines-" + hex64(fnv1a64(cx.info.name + ":" + std::to_string(cx.info.vendor_id) + ":" +
                                            std::to_string(cx.info.device_id) + ":" + std::to_string(cx.info.api_version)));
  const std::vector<char> data = disk_cache_load(kernel_cache_dir("vulkan"), p.file_key, ".bin", kCacheSource);
  auto ci = vk_struct<VkPipelineCacheCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO);
  ci.initialDataSize = data.size();
  ci.pInitialData = data.empty() ? nullptr : data.data();
  // The driver validates the header (vendor, device, UUID) and ignores data it does not accept.
  if (vk().vkCreatePipelineCache(cx.device, &ci, nullptr, &p.cache) != VK_SUCCESS) {
    ci.initialDataSize = 0;
    ci.pInitialData = nullptr;
    check(vk().vkCreatePipelineCache(cx.device, &ci, nullptr, &p.cache), "vkCreatePipelineCache");
  }
  return p.cache;
}

}  // namespace

const Pipeline& pipeline_for(const std::string& name, const std::string& source, uint32_t bindings, uint32_t push_words) {
  Context& cx = context();
  const std::string key = hex64(fnv1a64(source)) + ":" + std::to_string(bindings) + ":" + std::to_string(push_words);
  Pipelines& p = pipelines();
  {
    std::lock_guard<std::mutex> lock(p.mu);
    if (auto it = p.by_key.find(key); it != p.by_key.end()) return *it->second;
  }
  if (push_words * 4 > cx.info.max_push_bytes)
    throw Error("Vulkan: internal: kernel '" + name + "' needs " + std::to_string(push_words * 4) +
                " bytes of push constants; " + cx.info.name + " allows " + std::to_string(cx.info.max_push_bytes));
  const std::vector<uint32_t>& spirv = spirv_for(name, source);
  std::lock_guard<std::mutex> lock(p.mu);
  if (auto it = p.by_key.find(key); it != p.by_key.end()) return *it->second;
  auto pl = std::make_unique<Pipeline>();
  pl->bindings = bindings;
  pl->push_bytes = push_words * 4;
  std::vector<VkDescriptorSetLayoutBinding> b(bindings);
  for (uint32_t i = 0; i < bindings; ++i) {
    b[i].binding = i;
    b[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    b[i].descriptorCount = 1;
    b[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  auto li = vk_struct<VkDescriptorSetLayoutCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO);
  li.bindingCount = bindings;
  li.pBindings = b.data();
  check(vk().vkCreateDescriptorSetLayout(cx.device, &li, nullptr, &pl->set_layout), "vkCreateDescriptorSetLayout");
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, pl->push_bytes};
  auto pli = vk_struct<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
  pli.setLayoutCount = 1;
  pli.pSetLayouts = &pl->set_layout;
  pli.pushConstantRangeCount = pl->push_bytes ? 1 : 0;
  pli.pPushConstantRanges = pl->push_bytes ? &range : nullptr;
  check(vk().vkCreatePipelineLayout(cx.device, &pli, nullptr, &pl->layout), "vkCreatePipelineLayout");
  auto mi = vk_struct<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
  mi.codeSize = spirv.size() * 4;
  mi.pCode = spirv.data();
  VkShaderModule module = VK_NULL_HANDLE;
  check(vk().vkCreateShaderModule(cx.device, &mi, nullptr, &module), "vkCreateShaderModule");
  auto ci = vk_struct<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
  ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = module;
  ci.stage.pName = "main";
  ci.layout = pl->layout;
  if (cx.info.pipeline_stats) ci.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  const VkResult r = vk().vkCreateComputePipelines(cx.device, pipeline_cache(p, cx), 1, &ci, nullptr, &pl->pipeline);
  vk().vkDestroyShaderModule(cx.device, module, nullptr);
  if (r != VK_SUCCESS)
    throw Error(std::string("Vulkan: creating the pipeline of kernel '") + name + "' failed: " + result_name(r));
  ++p.created;
  p.dirty = true;
  return *p.by_key.emplace(key, std::move(pl)).first->second;
}

std::string pipeline_statistics(const Pipeline& pl) {
  Context& cx = context();
  if (!cx.info.pipeline_stats) return {};
  static const auto props = reinterpret_cast<PFN_vkGetPipelineExecutablePropertiesKHR>(
      vk().vkGetDeviceProcAddr(cx.device, "vkGetPipelineExecutablePropertiesKHR"));
  static const auto stats = reinterpret_cast<PFN_vkGetPipelineExecutableStatisticsKHR>(
      vk().vkGetDeviceProcAddr(cx.device, "vkGetPipelineExecutableStatisticsKHR"));
  if (!props || !stats) return {};
  auto pi = vk_struct<VkPipelineInfoKHR>(VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR);
  pi.pipeline = pl.pipeline;
  uint32_t n = 0;
  if (props(cx.device, &pi, &n, nullptr) != VK_SUCCESS) return {};
  std::string out;
  for (uint32_t e = 0; e < n; ++e) {
    auto ei = vk_struct<VkPipelineExecutableInfoKHR>(VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR);
    ei.pipeline = pl.pipeline;
    ei.executableIndex = e;
    uint32_t m = 0;
    if (stats(cx.device, &ei, &m, nullptr) != VK_SUCCESS) continue;
    std::vector<VkPipelineExecutableStatisticKHR> s(
        m, vk_struct<VkPipelineExecutableStatisticKHR>(VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR));
    if (stats(cx.device, &ei, &m, s.data()) != VK_SUCCESS) continue;
    for (uint32_t i = 0; i < m; ++i) {
      out += out.empty() ? "" : ", ";
      out += s[i].name;
      out += " ";
      switch (s[i].format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: out += s[i].value.b32 ? "yes" : "no"; break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: out += std::to_string(s[i].value.i64); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: out += std::to_string(s[i].value.u64); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR: out += std::to_string(s[i].value.f64); break;
        default: out += "?"; break;
      }
    }
  }
  return out;
}

void save_pipeline_cache() {
  Pipelines& p = pipelines();
  std::lock_guard<std::mutex> lock(p.mu);
  if (!p.dirty || !p.cache) return;
  const std::string dir = kernel_cache_dir("vulkan");
  if (dir.empty()) return;
  size_t n = 0;
  Context& cx = context();
  if (vk().vkGetPipelineCacheData(cx.device, p.cache, &n, nullptr) != VK_SUCCESS || n == 0) return;
  std::vector<char> data(n);
  if (vk().vkGetPipelineCacheData(cx.device, p.cache, &n, data.data()) != VK_SUCCESS) return;
  data.resize(n);
  disk_cache_store(dir, p.file_key, ".bin", kCacheSource, data);
  p.dirty = false;
}

uint64_t pipelines_created() {
  Pipelines& p = pipelines();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.created;
}

}  // namespace rlx::vulkan
