#pragma once
// The CUDA device, opened lazily: the first use probes the NVIDIA driver (dlopen of
// libcuda.so.1) and the device, so a binary built with CUDA starts on machines without either.
// Also the driver entry points used for NVRTC modules, and RAII device/pinned memory and streams.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace rlx::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  size_t smem_per_block_optin = 0;  // bytes of shared memory a block may opt into
  size_t total_mem = 0;
  size_t l2_bytes = 0;  // the L2 cache
  std::string arch() const { return "sm_" + std::to_string(cc_major) + std::to_string(cc_minor); }
};

// Driver API functions resolved through the runtime (no link-time dependency on libcuda).
struct DriverApi {
  CUresult (*module_load_data)(CUmodule*, const void*) = nullptr;
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            CUstream, void**, void**) = nullptr;
  CUresult (*func_set_attribute)(CUfunction, CUfunction_attribute, int) = nullptr;
  // Optional (null on drivers without it): launches with attributes (programmatic dependent launch).
  CUresult (*launch_kernel_ex)(const CUlaunchConfig*, CUfunction, void**, void**) = nullptr;
  // Optional: how many clusters of a launch configuration fit on the device at once.
  CUresult (*occupancy_max_active_clusters)(int*, CUfunction, const CUlaunchConfig*) = nullptr;
  // Optional: tensor maps for the bulk tensor copy engine (TMA, sm_90).
  CUresult (*tensor_map_encode_tiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                      const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                      CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill) = nullptr;
  CUresult (*get_error_name)(CUresult, const char**) = nullptr;
  CUresult (*get_error_string)(CUresult, const char**) = nullptr;
};

// The device (ordinal 0, or RLX_CUDA_DEVICE); throws rlx::Error "no CUDA device: <reason>" when
// the driver cannot be loaded, no device answers, or cuBLASLt / NVRTC cannot be loaded (the probe
// loads them: cuda_libs.h). Probed once per process.
const DeviceInfo& device();
// Driver entry points; valid after device() succeeded.
const DriverApi& driver();

// Owning device allocation. Out of memory -> rlx::Error naming the bytes requested and `what`.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t bytes, const std::string& what);
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
  uint8_t* data() const { return static_cast<uint8_t*>(ptr_); }
  size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory for staging copies (grows, never shrinks).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();
  void reserve(size_t bytes);
  uint8_t* data() const { return static_cast<uint8_t*>(ptr_); }
  size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A non-blocking stream (does not synchronize with the legacy default stream).
class Stream {
 public:
  Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();
  cudaStream_t get() const { return s_; }
  void sync() const;

 private:
  cudaStream_t s_ = nullptr;
};

// A CUDA event, for timing unless `timing` is false (then only for ordering streams).
class Event {
 public:
  explicit Event(bool timing = true);
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

}  // namespace rlx::cuda
