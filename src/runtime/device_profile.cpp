#include "runtime/device_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "rlx/error.h"
#ifdef RLX_HAVE_CUDA
#include "backends/cuda/stats.h"
#endif
#ifdef RLX_HAVE_VULKAN
#include "backends/vulkan/variant.h"
#endif

namespace rlx {

void StepProfile::add(const std::string& kind, double ms) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& r = rows_[kind];
  r.first += ms;
  r.second += 1;
}

std::string StepProfile::take(const char* unit) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::string, std::pair<double, uint64_t>>> rows(rows_.begin(), rows_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  double total = 0;
  for (const auto& r : rows) total += r.second.first;
  std::string out;
  char buf[200];
  for (const auto& [name, v] : rows) {
    std::snprintf(buf, sizeof buf, "  %-26s %10.3f ms %6.1f%% %8llu %s\n", name.c_str(), v.first,
                  total > 0 ? 100.0 * v.first / total : 0.0, static_cast<unsigned long long>(v.second), unit);
    out += buf;
  }
  rows_.clear();
  return out;
}

void enable_device_profile(Device d) {
  // The knobs are read from the environment at each use (runtime/knobs.h), so setting the
  // variable before compiling turns the profile on for the variants compiled afterwards.
  switch (d) {
    case Device::Cuda:
#ifdef RLX_HAVE_CUDA
      setenv("RLX_CUDA_PROFILE", "1", 1);
      return;
#else
      break;
#endif
    case Device::Vulkan:
#ifdef RLX_HAVE_VULKAN
      setenv("RLX_VULKAN_PROFILE", "1", 1);
      return;
#else
      break;
#endif
    default: break;
  }
  throw Error(std::string("--profile: device '") + device_name(d) +
              "' has no per-step profile in this build (cuda and vulkan have one)");
}

std::string take_device_profile(Device d) {
#ifdef RLX_HAVE_CUDA
  if (d == Device::Cuda) return cuda::take_profile_report();
#endif
#ifdef RLX_HAVE_VULKAN
  if (d == Device::Vulkan) return vulkan::take_vulkan_profile();
#endif
  (void)d;
  return "";
}

}  // namespace rlx
