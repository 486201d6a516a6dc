#include "plan/device_limits.h"

#include <algorithm>

#include "rlx/error.h"

namespace rlx::plan {

int64_t DeviceLimits::max_value_bytes() const {
  if (max_binding_bytes > 0 && max_buffer_bytes > 0) return std::min(max_binding_bytes, max_buffer_bytes);
  return max_binding_bytes > 0 ? max_binding_bytes : max_buffer_bytes;
}

void DeviceLimits::validate() const {
  auto bad = [&](const std::string& field, int64_t v, const std::string& why) {
    throw Error("device limits of " + device_name() + ": " + field + " = " + std::to_string(v) + " " + why);
  };
  if (alignment <= 0 || (alignment & (alignment - 1)) != 0) bad("alignment", alignment, "is not a positive power of two");
  if (max_binding_bytes < 0) bad("max_binding_bytes", max_binding_bytes, "is negative (0 = no limit)");
  if (max_buffer_bytes < 0) bad("max_buffer_bytes", max_buffer_bytes, "is negative (0 = no limit)");
}

}  // namespace rlx::plan
