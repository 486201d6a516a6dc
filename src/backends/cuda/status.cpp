#include "backends/cuda/status.h"

#include "backends/cuda/cuda_libs.h"
#include "backends/cuda/device.h"
#include "rlx/error.h"

namespace rlx::cuda {

void throw_cuda(cudaError_t e, const char* call) {
  throw Error(std::string("CUDA error in ") + call + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

void throw_cu(CUresult r, const char* call) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (driver().get_error_name) driver().get_error_name(r, &name);
  if (driver().get_error_string) driver().get_error_string(r, &text);
  throw Error(std::string("CUDA driver error in ") + call + ": " + (name ? name : "CUresult " + std::to_string(r)) +
              (text ? std::string(" (") + text + ")" : std::string()));
}

void throw_cublas(cublasStatus_t s, const char* call) {
  throw Error(std::string("cuBLASLt error in ") + call + ": " + cublaslt().cublasLtGetStatusName(s) + " (" +
              cublaslt().cublasLtGetStatusString(s) + ")");
}

void throw_nvrtc(nvrtcResult r, const char* call) {
  throw Error(std::string("NVRTC error in ") + call + ": " + nvrtc().nvrtcGetErrorString(r));
}

}  // namespace rlx::cuda
