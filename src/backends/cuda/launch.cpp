#include "backends/cuda/launch.h"

#include <algorithm>
#include <string>

#include "backends/cuda/device.h"
#include "backends/cuda/status.h"
#include "rlx/error.h"
#include "runtime/knobs.h"

namespace rlx::cuda {

namespace {

// RLX_CUDA_PDL: 0 off; unset: the launches with work before their wait (KernelLaunch::
// pdl_prefetch); "all": every launch marked pdl(). Only where the device (sm_90+) and driver
// have it.
enum class PdlMode { Off, Prefetch, All };
PdlMode pdl_mode() {
  static const PdlMode mode = [] {
    const std::string v = process_knobs::cuda_pdl();  // "", "0", "1" or "all" (validated)
    if (v == "0" || device().cc_major < 9 || driver().launch_kernel_ex == nullptr) return PdlMode::Off;
    if (v == "all") return PdlMode::All;
    return PdlMode::Prefetch;
  }();
  return mode;
}

// Whether the last work issued on this thread was one of rlx's kernel launches, and how many
// launches it issued (see pdl_chain_break).
thread_local bool t_after_kernel = false;
thread_local uint64_t t_launches = 0;

}  // namespace

void pdl_chain_break() { t_after_kernel = false; }
uint64_t kernel_launches() { return t_launches; }

void KernelLaunch::set_arg_bytes(size_t i, const void* v, size_t size) {
  if (i >= args_.size() || sizes_[i] != size)
    throw Error("CUDA launch of kernel '" + name_ + "': internal: parameter " + std::to_string(i) +
                " does not exist or has another size");
  std::memcpy(args_[i].get(), v, size);
}

void KernelLaunch::launch(cudaStream_t stream) const {
  CUresult r;
  // Only after one of our own kernels: a library kernel (cuBLASLt) may let its dependents start
  // early, and ours would then hold multiprocessors while it runs (measured: BERT-base 20%
  // slower, docs/backends/cuda.md).
  const PdlMode mode = pdl_ ? pdl_mode() : PdlMode::Off;
  const bool programmatic =
      t_after_kernel && (mode == PdlMode::All || (mode == PdlMode::Prefetch && prefetch_));
  t_after_kernel = true;
  ++t_launches;
  if (programmatic || cluster_x_ > 1) {
    if (driver().launch_kernel_ex == nullptr)
      throw Error("CUDA launch of kernel '" + name_ + "': clusters need cuLaunchKernelEx, which this driver lacks");
    CUlaunchAttribute attrs[2]{};
    const CUlaunchConfig cfg = config(reinterpret_cast<CUstream>(stream), programmatic, attrs);
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
                ", block " + std::to_string(block_) + ", " + std::to_string(smem_) + " bytes of shared memory" +
                (cluster_x_ > 1 ? ", clusters of " + std::to_string(cluster_x_) : std::string()) + ")");
  }
}

CUlaunchConfig KernelLaunch::config(CUstream stream, bool programmatic, CUlaunchAttribute (&attrs)[2]) const {
  unsigned n = 0;
  if (programmatic) {
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[n++].value.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_x_ > 1) {
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[n].value.clusterDim.x = cluster_x_, attrs[n].value.clusterDim.y = 1, attrs[n++].value.clusterDim.z = 1;
  }
  CUlaunchConfig cfg{};
  cfg.gridDimX = grid_[0], cfg.gridDimY = grid_[1], cfg.gridDimZ = grid_[2];
  cfg.blockDimX = block_, cfg.blockDimY = 1, cfg.blockDimZ = 1;
  cfg.sharedMemBytes = smem_;
  cfg.hStream = stream;
  cfg.attrs = attrs;
  cfg.numAttrs = n;
  return cfg;
}

int KernelLaunch::max_active_clusters() const {
  if (!driver().occupancy_max_active_clusters) return -1;
  CUlaunchAttribute attrs[2]{};
  const CUlaunchConfig cfg = config(nullptr, false, attrs);
  int n = 0;
  return driver().occupancy_max_active_clusters(&n, fn_, &cfg) == CUDA_SUCCESS ? n : -1;
}

unsigned grid_for(int64_t work, unsigned block) {
  const int64_t cap = static_cast<int64_t>(device().sm_count) * 32;
  const int64_t blocks = (work + block - 1) / block;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, cap));
}

void allow_dynamic_smem(CUfunction fn, size_t dynamic_bytes, size_t static_bytes) {
  if (dynamic_bytes + static_bytes > 48 * 1024)
    RLX_CU_CHECK(driver().func_set_attribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                             static_cast<int>(dynamic_bytes)));
}

}  // namespace rlx::cuda
