#pragma once
// The process's WebGPU device: one Dawn instance, the chosen adapter and its device and queue,
// created on first use. The adapter is asked for by native API (knob webgpu_backend, Vulkan by
// default); Dawn's Null adapter, which runs nothing, is never accepted. With the Vulkan API and
// the knob webgpu_vk_icd at "auto", the system's drivers are tried first and, when Dawn accepts
// none of them (e.g. Debian 12's lavapipe 22.3, which it rejects), SwiftShader from Debian's
// chromium package.
//
// Errors: calls that can fail (buffers, shaders, pipelines) run inside an error scope (scoped()),
// so a failure is an rlx::Error at the call that caused it; anything else Dawn reports is kept
// and raised by the next check_uncaptured().
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/webgpu/wgpu_api.h"

namespace rlx::webgpu {

struct DeviceInfo {
  std::string name;         // the adapter's description / device string
  std::string backend;      // "Vulkan", "OpenGLES", ...
  std::string adapter_type; // "discrete GPU", "integrated GPU", "CPU", "unknown"
  std::string driver;       // the Vulkan driver manifest used ("" = the system's)
  abi::Limits limits{};     // the device's limits (the adapter's, all requested)
  bool shader_f16 = false;
  bool subgroups = false;
  bool timestamps = false;
  uint32_t subgroup_min = 0, subgroup_max = 0;
};

struct Context {
  abi::Instance instance = nullptr;
  abi::Adapter adapter = nullptr;
  abi::Device device = nullptr;
  abi::Queue queue = nullptr;
  DeviceInfo info;
};

// The device, created on first call; rlx::Error "no WebGPU device: <reason>" when none can be.
Context& context();
// Empty when context() succeeds; else why not (the library, the adapters that were refused).
std::string unavailable_reason();

// Blocks until `f` completes (rlx::Error naming `what` when the wait fails or exceeds 60 s).
void wait_for(abi::Future f, const std::string& what);
// Runs `call` inside a validation + out-of-memory error scope; rlx::Error "WebGPU: <what>: <message>".
void scoped(const std::string& what, const std::function<void()>& call);
// Throws the first error Dawn reported outside any scope since the last call (and forgets them).
void check_uncaptured(const std::string& what);

}  // namespace rlx::webgpu
