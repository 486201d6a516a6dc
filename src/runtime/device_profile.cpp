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

void StepTable::add(const void* owner, size_t step, const std::string& what, double ms, double macs) {
  std::lock_guard<std::mutex> lock(mu_);
  Row& r = rows_[{owner, step}];
  if (r.count == 0) {
    r.step = step;
    r.what = what;
  }
  r.ms += ms;
  r.macs += macs;
  r.count += 1;
}

std::string StepTable::take(int top) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Row> rows;
  for (auto& [key, r] : rows_) rows.push_back(std::move(r));
  rows_.clear();
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.ms > b.ms; });
  double total = 0;
  for (const Row& r : rows) total += r.ms;
  std::string out;
  char buf[160];
  const size_t shown = std::min(rows.size(), static_cast<size_t>(std::max(top, 0)));
  for (size_t i = 0; i < shown; ++i) {
    const Row& r = rows[i];
    const double per_run = r.ms / static_cast<double>(std::max<uint64_t>(r.count, 1));
    std::snprintf(buf, sizeof buf, "  #%-5zu %10.3f ms %6.1f%%", r.step, per_run, total > 0 ? 100.0 * r.ms / total : 0.0);
    out += buf;
    if (r.macs > 0 && r.ms > 0) {
      std::snprintf(buf, sizeof buf, " %7.1f GMAC/s", r.macs / (r.ms * 1e6));
      out += buf;
    } else {
      out += "               ";
    }
    out += "  " + r.what + "\n";
  }
  if (rows.size() > shown) out += "  ... " + std::to_string(rows.size() - shown) + " more steps (--profile-steps shows more)\n";
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

std::string take_device_step_profile(Device d, int top) {
  const auto it = hooks().find(d);
  return it == hooks().end() || !it->second.take_steps ? std::string() : it->second.take_steps(top);
}

}  // namespace rlx
