#include "backends/cuda/launch.h"

#include <algorithm>

#include "backends/cuda/device.h"
#include "rlx/error.h"

namespace rlx::cuda {

void KernelLaunch::launch(cudaStream_t stream) const {
  const CUresult r = driver().launch_kernel(fn_, grid_[0], grid_[1], grid_[2], block_, 1, 1, smem_,
                                            reinterpret_cast<CUstream>(stream), ptrs_.data(), nullptr);
  if (r != CUDA_SUCCESS) {
    const char* text = nullptr;
    if (driver().get_error_string) driver().get_error_string(r, &text);
    throw Error("CUDA launch of kernel '" + name_ + "' failed: " + (text ? text : std::to_string(r)) + " (grid " +
                std::to_string(grid_[0]) + "x" + std::to_string(grid_[1]) + "x" + std::to_string(grid_[2]) +
                ", block " + std::to_string(block_) + ", " + std::to_string(smem_) + " bytes of shared memory)");
  }
}

unsigned grid_for(int64_t work, unsigned block) {
  const int64_t cap = static_cast<int64_t>(device().sm_count) * 32;
  const int64_t blocks = (work + block - 1) / block;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, cap));
}

}  // namespace rlx::cuda
