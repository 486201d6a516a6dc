#include "backends/webgpu/device_target.h"

#include <algorithm>
#include <type_traits>

namespace rlx::webgpu {
namespace {

// The adapter's description with the WebGPU spec's default limits (each no higher, and each
// alignment no finer, than the adapter's own) and no optional feature.
DeviceInfo make_web_info(const DeviceInfo& adapter) {
  DeviceInfo w = adapter;
  w.name = "the WebGPU default limits (any adapter; validated on " + adapter.name + ")";
  w.shader_f16 = w.subgroups = w.timestamps = false;
  w.subgroup_min = w.subgroup_max = 0;
  abi::Limits& l = w.limits;
  auto at_most = [](auto& v, uint64_t d) { v = static_cast<std::remove_reference_t<decltype(v)>>(std::min<uint64_t>(v, d)); };
  at_most(l.max_bind_groups, 4);
  at_most(l.max_bindings_per_bind_group, 1000);
  at_most(l.max_storage_buffers_per_shader_stage, 8);
  at_most(l.max_uniform_buffers_per_shader_stage, 12);
  at_most(l.max_uniform_buffer_binding_size, 65536);
  at_most(l.max_storage_buffer_binding_size, 134217728);
  at_most(l.max_buffer_size, 268435456);
  at_most(l.max_compute_workgroup_storage_size, 16384);
  at_most(l.max_compute_invocations_per_workgroup, 256);
  at_most(l.max_compute_workgroup_size_x, 256);
  at_most(l.max_compute_workgroup_size_y, 256);
  at_most(l.max_compute_workgroup_size_z, 64);
  at_most(l.max_compute_workgroups_per_dimension, 65535);
  l.min_uniform_buffer_offset_alignment = std::max<uint32_t>(l.min_uniform_buffer_offset_alignment, 256);
  l.min_storage_buffer_offset_alignment = std::max<uint32_t>(l.min_storage_buffer_offset_alignment, 256);
  return w;
}

}  // namespace

bool targets_web(const ResolvedKnobs& knobs) { return knobs.webgpu_limits() == "web"; }

const DeviceInfo& target_info(const ResolvedKnobs& knobs) {
  const DeviceInfo& adapter = context().info;
  if (!targets_web(knobs)) return adapter;
  static const DeviceInfo web = make_web_info(adapter);
  return web;
}

}  // namespace rlx::webgpu
