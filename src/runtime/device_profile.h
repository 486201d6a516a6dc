#pragma once
// Per-step device times of the GPU backends (`rlx run --profile`): each recorded step timed on
// its own (CUDA events, Vulkan timestamp queries) and summed per op kind.
#include <string>

#include "rlx/session.h"

namespace rlx {

// Turns the per-step profile of device `d` on for this process (the backend's profile knob,
// RLX_CUDA_PROFILE / RLX_VULKAN_PROFILE); rlx::Error for a device without one.
void enable_device_profile(Device d);
// The table of the runs since the last call, slowest op kind first ("" when nothing was timed).
std::string take_device_profile(Device d);

}  // namespace rlx
