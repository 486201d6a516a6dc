#pragma once
// The devices rlx compiles for, and where a Tensor's memory lives (rlx/tensor.h).
#include <string>

namespace rlx {

enum class Device { Cpu, Cuda, Vulkan, WebGpu };
const char* device_name(Device d);
Device device_from_name(const std::string& name);  // "cpu", "cuda", ... (throws on unknown)

}  // namespace rlx
