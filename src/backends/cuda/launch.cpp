#include "backends/cuda/launch.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backends/cuda/device.h"
#include "rlx/error.h"

namespace rlx::cuda {

namespace {

bool pdl_available() {
  static const bool on = [] {
    // Opt-in: measured on the H100 it did not shorten Llama decode and it slowed BERT-base
    // (many cuBLASLt launches) by about 20% (docs/backends/cuda.md).
    const char* e = std::getenv("RLX_CUDA_PDL");
    if (!(e && std::string(e) == "1")) return false;
    return device().cc_major >= 9 && driver().launch_kernel_ex != nullptr;
  }();
  return on;
}

}  // namespace

void KernelLaunch::launch(cudaStream_t stream) const {
  CUresult r;
  if (pdl_ && pdl_available()) {
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig cfg{};
    cfg.gridDimX = grid_[0], cfg.gridDimY = grid_[1], cfg.gridDimZ = grid_[2];
    cfg.blockDimX = block_, cfg.blockDimY = 1, cfg.blockDimZ = 1;
    cfg.sharedMemBytes = smem_;
    cfg.hStream = reinterpret_cast<CUstream>(stream);
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    r = driver().launch_kernel_ex(&cfg, fn_, ptrs_.data(), nullptr);
  } else {
    r = driver().launch_kernel(fn_, grid_[0], grid_[1], grid_[2], block_, 1, 1, smem_,
                               reinterpret_cast<CUstream>(stream), ptrs_.data(), nullptr);
  }
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
