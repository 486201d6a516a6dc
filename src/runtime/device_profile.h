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

// Per-step times of one backend's profiled runs (thread-safe): each step once, under its index
// and description, with the multiply-adds it does (0 where not counted), for the table of the
// slowest steps.
class StepTable {
 public:
  // `owner` tells apart the steps of different schedules (a weight prologue, the graph).
  void add(const void* owner, size_t step, const std::string& what, double ms, double macs);
  // The `top` slowest steps, slowest first ("  #<step> <what>  <ms per run> ms  <share>%  [<rate>
  // GMAC/s]"), a line saying how many were left out, then cleared; "" when nothing was timed.
  std::string take(int top);

 private:
  struct Row {
    size_t step = 0;
    std::string what;
    double ms = 0, macs = 0;
    uint64_t count = 0;
  };
  std::mutex mu_;
  std::map<std::pair<const void*, size_t>, Row> rows_;
};

// What a backend registers (from its own translation unit, at static initialization) so
// that the runtime reaches its profile without depending on the backend: turning the profile
// on for this process, and taking its table.
struct DeviceProfileHooks {
  std::function<void()> enable;
  std::function<std::string()> take;
  std::function<std::string(int top)> take_steps;  // the slowest steps, where the backend times each one
};
bool register_device_profile(Device d, DeviceProfileHooks hooks);

// Turns the per-step profile of device `d` on for this process (the backend's profile knob,
// RLX_CUDA_PROFILE / RLX_VULKAN_PROFILE); rlx::Error for a device without one.
void enable_device_profile(Device d);
// The table of the runs since the last call, slowest op kind first ("" when nothing was timed).
std::string take_device_profile(Device d);
// The `top` slowest steps of those runs ("" for a device without per-step rows).
std::string take_device_step_profile(Device d, int top);

}  // namespace rlx
