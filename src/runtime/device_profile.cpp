#include "runtime/device_profile.h"

#include <cstdlib>

#include "rlx/error.h"
#ifdef RLX_HAVE_CUDA
#include "backends/cuda/stats.h"
#endif
#ifdef RLX_HAVE_VULKAN
#include "backends/vulkan/variant.h"
#endif

namespace rlx {

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
