#pragma once
// Compute pipelines of WGSL kernels, created once per process per (source, binding kinds) on the
// context's device, with an explicit bind group layout (group 0, bindings 0.. in order). A WGSL
// compile error is an rlx::Error quoting Dawn's message and the kernel's name.
#include <cstdint>
#include <string>
#include <vector>

#include "backends/webgpu/wgpu_api.h"

namespace rlx::webgpu {

enum class BindingKind : uint8_t { Read, ReadWrite, Uniform };

struct Pipeline {
  abi::ComputePipeline pipeline = nullptr;
  abi::BindGroupLayout layout = nullptr;
  std::vector<BindingKind> bindings;
  std::string name, source;  // the kernel it was made from (for exported programs)
};

const Pipeline& pipeline_for(const std::string& name, const std::string& source, const std::vector<BindingKind>& bindings);
uint64_t pipelines_created();

}  // namespace rlx::webgpu
