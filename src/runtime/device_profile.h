#pragma once
// Per-step times of the backends (`rlx run --profile`), summed per op kind: on the GPUs each
// recorded step timed on its own (CUDA events, Vulkan timestamp queries), on the CPU the wall time
// of each step of a run (backends/cpu/executor.h).
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "rlx/session.h"

namespace rlx {

// Device time per op kind, summed over the profiled runs of a backend (thread-safe).
class StepProfile {
 public:
  void add(const std::string& kind, double ms);
  // One line per kind, slowest first ("  <kind> <ms> ms <share>% <count> <unit>"), then cleared.
  std::string take(const char* unit);

 private:
  std::mutex mu_;
  std::map<std::string, std::pair<double, uint64_t>> rows_;  // kind -> (ms, count)
};

// What a backend registers (from its own translation unit, at static initialization) so
// that the runtime reaches its profile without depending on the backend: turning the profile
// on for this process, and taking its table.
struct DeviceProfileHooks {
  std::function<void()> enable;
  std::function<std::string()> take;
};
bool register_device_profile(Device d, DeviceProfileHooks hooks);

// Turns the per-step profile of device `d` on for this process (the backend's profile knob,
// RLX_CUDA_PROFILE / RLX_VULKAN_PROFILE); rlx::Error for a device without one.
void enable_device_profile(Device d);
// The table of the runs since the last call, slowest op kind first ("" when nothing was timed).
std::string take_device_profile(Device d);

}  // namespace rlx
