#pragma once
// Status checking for every CUDA runtime, driver, cuBLASLt and NVRTC call: a failure becomes an
// rlx::Error naming the call, the library's error name and its description.
#include <cublasLt.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <string>

namespace rlx::cuda {

[[noreturn]] void throw_cuda(cudaError_t e, const char* call);
[[noreturn]] void throw_cu(CUresult r, const char* call);
[[noreturn]] void throw_cublas(cublasStatus_t s, const char* call);
[[noreturn]] void throw_nvrtc(nvrtcResult r, const char* call);

inline void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw_cuda(e, call);
}
inline void check_cu(CUresult r, const char* call) {
  if (r != CUDA_SUCCESS) throw_cu(r, call);
}
inline void check_cublas(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS) throw_cublas(s, call);
}
inline void check_nvrtc(nvrtcResult r, const char* call) {
  if (r != NVRTC_SUCCESS) throw_nvrtc(r, call);
}

}  // namespace rlx::cuda

// The call's text is part of the message, so a failure names exactly what failed.
#define RLX_CUDA_CHECK(expr) ::rlx::cuda::check_cuda((expr), #expr)
#define RLX_CU_CHECK(expr) ::rlx::cuda::check_cu((expr), #expr)
#define RLX_CUBLAS_CHECK(expr) ::rlx::cuda::check_cublas((expr), #expr)
#define RLX_NVRTC_CHECK(expr) ::rlx::cuda::check_nvrtc((expr), #expr)
