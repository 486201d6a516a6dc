#pragma once
// What the WebGPU kernels and the memory plan are made for (knob webgpu_limits):
//   "adapter" (default): the process's adapter as it is (its limits, f16, subgroups);
//   "web": the limits every WebGPU implementation guarantees (the spec's defaults) and no optional
//          feature, so the recorded program runs on any browser's adapter (rlx export-web). The
//          pipelines are still created, and so validated, on the process's adapter.
#include "backends/webgpu/wgpu_context.h"
#include "runtime/knobs.h"

namespace rlx::webgpu {

bool targets_web(const ResolvedKnobs& knobs);
// The target of `knobs`; rlx::Error "no WebGPU device: ..." when there is no adapter.
const DeviceInfo& target_info(const ResolvedKnobs& knobs);

}  // namespace rlx::webgpu
