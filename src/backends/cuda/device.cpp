#include "backends/cuda/device.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <utility>

#include "backends/cuda/cuda_libs.h"
#include "backends/cuda/status.h"
#include "rlx/error.h"
#include "runtime/knobs.h"

namespace rlx::cuda {
namespace {

struct Probe {
  DeviceInfo info;
  DriverApi api;
  std::string failure;  // non-empty: why there is no usable device
  bool library = false;  // the failure is a missing cuBLASLt / NVRTC (the device itself answered)
};

template <class Fn>
bool resolve(const char* symbol, Fn& fn, std::string& failure) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &q);
  if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !p) {
    failure = std::string("the driver does not provide ") + symbol + " (driver too old?)";
    return false;
  }
  fn = reinterpret_cast<Fn>(p);
  return true;
}

Probe probe_device() {
  Probe pr;
  // The runtime loads the driver itself; probing it first gives a precise reason when it is absent.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    pr.failure = std::string("the NVIDIA driver library libcuda.so.1 could not be loaded (") + (why ? why : "?") + ")";
    return pr;
  }
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    pr.failure = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    return pr;
  }
  if (count == 0) {
    pr.failure = "the driver reports no CUDA devices";
    return pr;
  }
  int ordinal = 0;
  try {
    const int64_t v = process_knobs::cuda_device();
    if (v >= count) {
      pr.failure = "RLX_CUDA_DEVICE='" + std::to_string(v) + "' is not a device ordinal in [0, " +
                   std::to_string(count) + ")";
      return pr;
    }
    ordinal = static_cast<int>(v);
  } catch (const Error& e) {
    pr.failure = e.what();
    return pr;
  }
  cudaDeviceProp prop{};
  if ((e = cudaGetDeviceProperties(&prop, ordinal)) != cudaSuccess || (e = cudaSetDevice(ordinal)) != cudaSuccess ||
      (e = cudaFree(nullptr)) != cudaSuccess) {
    pr.failure = std::string("device ") + std::to_string(ordinal) + " could not be opened: " + cudaGetErrorName(e) +
                 " (" + cudaGetErrorString(e) + ")";
    return pr;
  }
  pr.info.ordinal = ordinal;
  pr.info.name = prop.name;
  pr.info.cc_major = prop.major;
  pr.info.cc_minor = prop.minor;
  pr.info.sm_count = prop.multiProcessorCount;
  pr.info.smem_per_block_optin = prop.sharedMemPerBlockOptin;
  pr.info.total_mem = prop.totalGlobalMem;
  pr.info.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  if (prop.major < 7) {
    pr.failure = std::string(prop.name) + " has compute capability " + pr.info.arch() + "; rlx needs sm_70 or newer";
    return pr;
  }
  DriverApi& a = pr.api;
  if (!resolve("cuModuleLoadData", a.module_load_data, pr.failure) ||
      !resolve("cuModuleGetFunction", a.module_get_function, pr.failure) ||
      !resolve("cuLaunchKernel", a.launch_kernel, pr.failure) ||
      !resolve("cuFuncSetAttribute", a.func_set_attribute, pr.failure) ||
      !resolve("cuGetErrorName", a.get_error_name, pr.failure) ||
      !resolve("cuGetErrorString", a.get_error_string, pr.failure))
    return pr;
  std::string optional_failure;
  if (!resolve("cuLaunchKernelEx", a.launch_kernel_ex, optional_failure)) a.launch_kernel_ex = nullptr;
  if (!resolve("cuOccupancyMaxActiveClusters", a.occupancy_max_active_clusters, optional_failure))
    a.occupancy_max_active_clusters = nullptr;
  if (!resolve("cuTensorMapEncodeTiled", a.tensor_map_encode_tiled, optional_failure)) a.tensor_map_encode_tiled = nullptr;
  // cuBLASLt and NVRTC are loaded now, when the CUDA device is created (cuda_libs.h): a process
  // that never uses CUDA never maps them.
  try {
    cublaslt();
    nvrtc();
  } catch (const Error& e) {
    pr.failure = e.what();
    pr.library = true;
  }
  return pr;
}

const Probe& probed() {
  static const Probe p = probe_device();
  return p;
}

}  // namespace

const DeviceInfo& device() {
  const Probe& p = probed();
  if (!p.failure.empty() && p.library)
    throw Error("no CUDA device: " + p.failure + " (" + p.info.name + " is there, but device 'cuda' needs the library)");
  if (!p.failure.empty())
    throw Error("no CUDA device: " + p.failure + " (device 'cuda' is not available on this machine; compile for " +
                "Device::Cpu or run on a machine with an NVIDIA GPU and driver)");
  // cudaSetDevice is per host thread: a compiled graph may run on a thread that never set it.
  RLX_CUDA_CHECK(cudaSetDevice(p.info.ordinal));
  return p.info;
}

const DriverApi& driver() { return probed().api; }

DeviceBuffer::DeviceBuffer(size_t bytes, const std::string& what) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t e = cudaMalloc(&ptr_, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free error state of the runtime
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw Error("CUDA out of memory: " + what + " requested " + std::to_string(bytes) + " bytes (" +
                std::to_string(free_b) + " of " + std::to_string(total_b) +
                " bytes free on the device); use smaller shapes or free other device memory");
  }
  check_cuda(e, ("cudaMalloc for " + what).c_str());
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_) cudaFreeHost(ptr_);
}

void PinnedBuffer::reserve(size_t bytes) {
  if (bytes <= bytes_) return;
  if (ptr_) RLX_CUDA_CHECK(cudaFreeHost(ptr_));
  ptr_ = nullptr;
  bytes_ = 0;
  const cudaError_t e = cudaMallocHost(&ptr_, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error("CUDA pinned host allocation of " + std::to_string(bytes) + " bytes failed: " + cudaGetErrorName(e));
  }
  bytes_ = bytes;
}

Stream::Stream() { RLX_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
Stream::~Stream() {
  if (s_) cudaStreamDestroy(s_);
}
Event::Event(bool timing) {
  RLX_CUDA_CHECK(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}

void Stream::sync() const { RLX_CUDA_CHECK(cudaStreamSynchronize(s_)); }

}  // namespace rlx::cuda
