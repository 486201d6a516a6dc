#include "backends/webgpu/wgpu_pipelines.h"

#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "backends/webgpu/wgpu_context.h"
#include "rlx/error.h"

namespace rlx::webgpu {
namespace {

std::mutex g_mutex;
std::map<std::string, std::unique_ptr<Pipeline>> g_cache;  // key: binding kinds + source
std::atomic<uint64_t> g_created{0};

Pipeline create(const std::string& name, const std::string& source, const std::vector<BindingKind>& bindings) {
  const Api& a = api();
  Context& cx = context();
  Pipeline p;
  p.bindings = bindings;
  p.name = name;
  p.source = source;
  std::vector<abi::BindGroupLayoutEntry> entries(bindings.size());
  for (size_t i = 0; i < bindings.size(); ++i) {
    entries[i].binding = static_cast<uint32_t>(i);
    entries[i].visibility = abi::kStageCompute;
    entries[i].buffer.type = bindings[i] == BindingKind::Uniform  ? abi::BufferBindingType::Uniform
                             : bindings[i] == BindingKind::Read   ? abi::BufferBindingType::ReadOnlyStorage
                                                                  : abi::BufferBindingType::Storage;
  }
  abi::BindGroupLayoutDescriptor ld;
  ld.entry_count = entries.size();
  ld.entries = entries.data();
  abi::ShaderSourceWGSL src;
  src.code = view(source);
  abi::ShaderModuleDescriptor md;
  md.next = &src.chain;
  md.label = view(name);
  abi::ShaderModule module = nullptr;
  abi::PipelineLayout pl = nullptr;
  try {
    scoped("kernel '" + name + "': its bind group layout", [&] { p.layout = a.DeviceCreateBindGroupLayout(cx.device, &ld); });
    abi::PipelineLayoutDescriptor pld;
    pld.bind_group_layout_count = 1;
    pld.bind_group_layouts = &p.layout;
    scoped("kernel '" + name + "': its pipeline layout", [&] { pl = a.DeviceCreatePipelineLayout(cx.device, &pld); });
    scoped("kernel '" + name + "' does not compile as WGSL", [&] { module = a.DeviceCreateShaderModule(cx.device, &md); });
    abi::ComputePipelineDescriptor pd;
    pd.label = view(name);
    pd.layout = pl;
    pd.compute.module = module;
    pd.compute.entry_point = view("main");
    scoped("kernel '" + name + "': its compute pipeline", [&] { p.pipeline = a.DeviceCreateComputePipeline(cx.device, &pd); });
  } catch (...) {
    if (module) a.ShaderModuleRelease(module);
    if (pl) a.PipelineLayoutRelease(pl);
    if (p.pipeline) a.ComputePipelineRelease(p.pipeline);
    if (p.layout) a.BindGroupLayoutRelease(p.layout);
    throw;
  }
  a.ShaderModuleRelease(module);
  a.PipelineLayoutRelease(pl);
  ++g_created;
  return p;
}

}  // namespace

const Pipeline& pipeline_for(const std::string& name, const std::string& source, const std::vector<BindingKind>& bindings) {
  std::string key;
  for (BindingKind b : bindings) key += static_cast<char>('0' + static_cast<int>(b));
  key += '\n';
  key += source;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_cache.find(key);
  if (it != g_cache.end()) return *it->second;
  auto p = std::make_unique<Pipeline>(create(name, source, bindings));
  return *g_cache.emplace(std::move(key), std::move(p)).first->second;
}

uint64_t pipelines_created() { return g_created.load(); }

}  // namespace rlx::webgpu
