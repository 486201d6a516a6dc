// vk_kernel_lab: replays one Vulkan dispatch dumped by RLX_VULKAN_DUMP=DIR (NNNN_<kernel>.json +
// .comp) in isolation and times it, optionally with edited versions of its GLSL, side by side:
//
//   vk_kernel_lab DIR/0003_matmul_gemm_coopmat.json [variant.comp[@GX,GY,GZ] ...] [--iters N] [--flops F]
//   vk_kernel_lab DIR [--iters N]       every dispatch of DIR timed alone, summed per kernel name
//
// A variant's @GX,GY,GZ replaces the dumped workgroup counts (for a variant with other tiles).
// Every binding gets a zeroed device buffer of its window's size (zero keeps any index or offset
// table in range); each source is compiled, warmed up, then dispatched N times in one command
// buffer with a barrier between dispatches (as in a schedule). Prints ms per dispatch (timestamp
// queries, median of 5 submissions) and, with --flops, TFLOP/s; the first row is the dumped GLSL.
// With RLX_VULKAN_PIPELINE_STATS=1 the driver's statistics of each source follow the table
// (register count, spills, ... as the driver names them).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "backends/vulkan/pipelines.h"
#include "backends/vulkan/vk_api.h"
#include "backends/vulkan/vk_device.h"
#include "rlx/error.h"

using namespace rlx::vulkan;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw rlx::Error("vk_kernel_lab: cannot read '" + path + "'");
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Job {
  std::string kernel;
  std::vector<uint64_t> ranges;
  std::vector<uint32_t> push;
  uint32_t groups[3] = {1, 1, 1};
};

Job read_job(const std::string& path) {
  const nlohmann::json j = nlohmann::json::parse(read_text(path));
  Job job;
  job.kernel = j.at("kernel").get<std::string>();
  for (const auto& b : j.at("bindings")) job.ranges.push_back(b.at("range").get<uint64_t>());
  job.push = j.at("push").get<std::vector<uint32_t>>();
  for (int i = 0; i < 3; ++i) job.groups[i] = j.at("groups").at(i).get<uint32_t>();
  return job;
}

// One zeroed device buffer per binding (zero keeps index and offset tables in range).
std::vector<rlx::DeviceBuf> zeroed_buffers(VulkanDevice& dev, const Job& job) {
  std::vector<rlx::DeviceBuf> bufs;
  for (size_t i = 0; i < job.ranges.size(); ++i) {
    bufs.push_back(dev.allocate(job.ranges[i], "binding " + std::to_string(i)));
    const std::vector<uint8_t> zeros(job.ranges[i], 0);
    const rlx::HostToDevice c{bufs.back(), 0, zeros.data(), zeros.size()};
    dev.upload({&c, 1});
    dev.wait();
  }
  return bufs;
}

// ms per dispatch of `source`: `iters` dispatches per command buffer, median of 5 submissions.
double time_source(VulkanDevice& dev, Job job, const uint32_t groups[3], const std::vector<rlx::DeviceBuf>& bufs, const std::string& name,
                   const std::string& source, int iters, std::string* stats) {
  Context& cx = dev.cx();
  for (int i = 0; i < 3; ++i) job.groups[i] = groups[i];
  const Pipeline& p = pipeline_for(name, source, static_cast<uint32_t>(bufs.size()), static_cast<uint32_t>(job.push.size()));
  if (stats) *stats = pipeline_statistics(p);
  VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, std::max<uint32_t>(1, static_cast<uint32_t>(bufs.size()))};
  auto pi = vk_struct<VkDescriptorPoolCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO);
  pi.maxSets = 1;
  pi.poolSizeCount = 1;
  pi.pPoolSizes = &size;
  VkDescriptorPool pool = VK_NULL_HANDLE;
  check(vk().vkCreateDescriptorPool(cx.device, &pi, nullptr, &pool), "vkCreateDescriptorPool");
  auto ai = vk_struct<VkDescriptorSetAllocateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO);
  ai.descriptorPool = pool;
  ai.descriptorSetCount = 1;
  ai.pSetLayouts = &p.set_layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  check(vk().vkAllocateDescriptorSets(cx.device, &ai, &set), "vkAllocateDescriptorSets");
  std::vector<VkDescriptorBufferInfo> infos;
  std::vector<VkWriteDescriptorSet> writes;
  infos.reserve(bufs.size());
  for (size_t i = 0; i < bufs.size(); ++i) {
    infos.push_back({dev.buffer(bufs[i]), 0, job.ranges[i]});
    auto w = vk_struct<VkWriteDescriptorSet>(VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET);
    w.dstSet = set;
    w.dstBinding = static_cast<uint32_t>(i);
    w.descriptorCount = 1;
    w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    w.pBufferInfo = &infos.back();
    writes.push_back(w);
  }
  vk().vkUpdateDescriptorSets(cx.device, static_cast<uint32_t>(writes.size()), writes.data(), 0, nullptr);

  auto record = [&](int n) {
    VkCommandBuffer cb = dev.begin_recording();
    dev.record_start_timestamp(cb);
    for (int i = 0; i < n; ++i) {
      vk().vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
      vk().vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &set, 0, nullptr);
      if (!job.push.empty())
        vk().vkCmdPushConstants(cb, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, static_cast<uint32_t>(job.push.size() * 4),
                                job.push.data());
      vk().vkCmdDispatch(cb, job.groups[0], job.groups[1], job.groups[2]);
      work_barrier(cb);
    }
    dev.record_stop_timestamp(cb);
    check(vk().vkEndCommandBuffer(cb), "vkEndCommandBuffer");
    return cb;
  };
  VkCommandBuffer warm = record(2), timed = record(iters);
  dev.enqueue(warm);
  dev.mark_start();
  dev.mark_stop();
  dev.wait();
  std::vector<double> ms;
  for (int r = 0; r < 5; ++r) {
    dev.enqueue(timed);
    dev.mark_start();
    dev.mark_stop();
    dev.wait();
    ms.push_back(dev.elapsed_ms() / iters);
  }
  vk().vkDestroyDescriptorPool(cx.device, pool, nullptr);
  std::sort(ms.begin(), ms.end());
  return ms[2];
}

// The VK_NV_cooperative_matrix shapes and types the device lists.
void print_coopmat_props() {
  Context& cx = context();
  auto fn = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
      vk().vkGetInstanceProcAddr(cx.instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"));
  if (!fn) {
    std::printf("no vkGetPhysicalDeviceCooperativeMatrixPropertiesNV\n");
    return;
  }
  uint32_t n = 0;
  fn(cx.physical, &n, nullptr);
  std::vector<VkCooperativeMatrixPropertiesNV> props(n, vk_struct<VkCooperativeMatrixPropertiesNV>(
                                                             VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV));
  fn(cx.physical, &n, props.data());
  for (const auto& p : props)
    std::printf("coopmat NV: M %u N %u K %u  A %d B %d C %d D %d scope %d\n", p.MSize, p.NSize, p.KSize, p.AType, p.BType,
                p.CType, p.DType, p.scope);
  const DeviceInfo& info = cx.info;
  std::printf("coopmat2 workgroup scope %d: max workgroup %u, reserved shared %u B\n", info.coopmat2_workgroup ? 1 : 0,
              info.coopmat2_max_workgroup, info.coopmat2_reserved_shared);
  for (const DeviceInfo::FlexShape& f : info.coopmat2_shapes)
    std::printf("coopmat2 flexible: M %u N %u K %u granularity  A %u B %u C %u D %u scope %u invocations %u\n", f.m, f.n,
                f.k, f.a, f.b, f.c, f.result, f.scope, f.invocations);
}

// Every dump of `dir` timed on its own (zeroed buffers), summed per kernel name.
int time_folder(const std::string& dir, int iters) {
  std::vector<std::string> jsons;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".json") jsons.push_back(e.path().string());
  std::sort(jsons.begin(), jsons.end());
  VulkanDevice dev;
  struct Sum {
    int n = 0;
    double ms = 0;
  };
  std::map<std::string, Sum> sums;
  double total = 0;
  for (const std::string& j : jsons) {
    const Job job = read_job(j);
    const std::vector<rlx::DeviceBuf> bufs = zeroed_buffers(dev, job);
    const std::string src = read_text(j.substr(0, j.size() - 5) + ".comp");
    const double ms = time_source(dev, job, job.groups, bufs, job.kernel, src, iters, nullptr);
    for (rlx::DeviceBuf b : bufs) dev.release(b);
    sums[job.kernel].n++;
    sums[job.kernel].ms += ms;
    total += ms;
  }
  std::printf("%zu dispatches of %s, each timed alone (%d back to back with barriers):\n", jsons.size(), dir.c_str(), iters);
  std::printf("| kernel | dispatches | ms | us per dispatch |\n|---|---:|---:|---:|\n");
  for (const auto& [k, s] : sums) std::printf("| %s | %d | %.4f | %.2f |\n", k.c_str(), s.n, s.ms, 1e3 * s.ms / s.n);
  std::printf("| total | %zu | %.4f | |\n", jsons.size(), total);
  save_pipeline_cache();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string json;
    std::vector<std::string> variants;
    int iters = 20;
    double flops = 0;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--iters" && i + 1 < argc) iters = std::max(1, std::atoi(argv[++i]));
      else if (a == "--flops" && i + 1 < argc) flops = std::atof(argv[++i]);
      else if (a == "--coopmat-props") {
        print_coopmat_props();
        if (argc == 2) return 0;
      }
      else if (json.empty()) json = a;
      else variants.push_back(a);
    }
    if (json.empty()) {
      std::fprintf(stderr, "usage: vk_kernel_lab DUMP.json [variant.comp ...] [--iters N] [--flops F]\n");
      return 2;
    }
    if (std::filesystem::is_directory(json)) return time_folder(json, iters);
    const Job job = read_job(json);
    const std::string base = json.substr(0, json.size() - (json.ends_with(".json") ? 5 : 0));
    VulkanDevice dev;
    const std::vector<rlx::DeviceBuf> bufs = zeroed_buffers(dev, job);
    std::printf("%s on %s: %u x %u x %u workgroups, %d dispatches per submission\n", job.kernel.c_str(),
                dev.cx().info.name.c_str(), job.groups[0], job.groups[1], job.groups[2], iters);
    std::printf("| source | ms | TFLOP/s |\n|---|---:|---:|\n");
    std::vector<std::string> files{base + ".comp"};
    std::vector<std::string> statistics;  // RLX_VULKAN_PIPELINE_STATS=1: the driver's, per source
    files.insert(files.end(), variants.begin(), variants.end());
    for (size_t v = 0; v < files.size(); ++v) {
      uint32_t groups[3] = {job.groups[0], job.groups[1], job.groups[2]};
      std::string file = files[v];
      if (const size_t at = file.rfind('@'); at != std::string::npos) {
        if (std::sscanf(file.c_str() + at + 1, "%u,%u,%u", &groups[0], &groups[1], &groups[2]) != 3)
          throw rlx::Error("vk_kernel_lab: '" + file + "': write the workgroups as FILE@GX,GY,GZ");
        file.resize(at);
      }
      double ms = 0;
      std::string stats;
      try {
        ms = time_source(dev, job, groups, bufs, job.kernel + "_lab" + std::to_string(v), read_text(file), iters, &stats);
      } catch (const rlx::Error& e) {  // a variant that does not compile: its log, then the next one
        std::printf("| %s | failed: %s |\n", files[v].c_str(), e.what());
        continue;
      }
      std::printf("| %s | %.4f | %.1f |\n", files[v].c_str(), ms, flops > 0 && ms > 0 ? flops / (ms * 1e9) : 0.0);
      if (!stats.empty()) statistics.push_back(files[v] + ": " + stats);
    }
    for (const std::string& s : statistics) std::printf("%s\n", s.c_str());
    for (rlx::DeviceBuf b : bufs) dev.release(b);
    save_pipeline_cache();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vk_kernel_lab: %s\n", e.what());
    return 1;
  }
}
