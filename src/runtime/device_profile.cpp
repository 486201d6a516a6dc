#include "runtime/device_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "rlx/error.h"

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

namespace {

std::map<Device, DeviceProfileHooks>& hooks() {
  static std::map<Device, DeviceProfileHooks> h;
  return h;
}

}  // namespace

bool register_device_profile(Device d, DeviceProfileHooks h) {
  hooks()[d] = std::move(h);
  return true;
}

void enable_device_profile(Device d) {
  const auto it = hooks().find(d);
  if (it == hooks().end())
    throw Error(std::string("--profile: device '") + device_name(d) +
                "' has no per-step profile in this build (cpu, cuda and vulkan have one)");
  it->second.enable();
}

std::string take_device_profile(Device d) {
  const auto it = hooks().find(d);
  return it == hooks().end() ? std::string() : it->second.take();
}

}  // namespace rlx
