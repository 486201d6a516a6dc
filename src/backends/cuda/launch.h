#pragma once
// A kernel launch prepared once (function, grid, arguments by value) and issued on any stream,
// also while a CUDA graph is being captured.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace rlx::cuda {

class KernelLaunch {
 public:
  KernelLaunch(std::string name, CUfunction fn, unsigned grid_x, unsigned block_x, unsigned smem = 0,
               unsigned grid_y = 1, unsigned grid_z = 1)
      : name_(std::move(name)), fn_(fn), grid_{grid_x, grid_y, grid_z}, block_(block_x), smem_(smem) {}

  // Appends one kernel parameter (copied; must match the kernel's parameter type exactly).
  template <class T>
  KernelLaunch& arg(const T& v) {
    static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= 16, "kernel parameters are copied bytes");
    return arg_bytes(&v, sizeof(T));
  }
  // Appends one kernel parameter of `size` bytes (for parameters aligned beyond 16 bytes, such as
  // structs holding CUtensorMap; the driver copies them into place by the kernel's layout).
  KernelLaunch& arg_bytes(const void* v, size_t size) {
    auto buf = std::make_unique<uint8_t[]>(size);  // operator new[] aligns to 16 bytes
    std::memcpy(buf.get(), v, size);
    ptrs_.push_back(buf.get());
    args_.push_back(std::move(buf));
    sizes_.push_back(size);
    return *this;
  }
  // Replaces parameter `i` (appended earlier with the same type) before the launch is issued or
  // captured, for a value known only once later steps are lowered.
  template <class T>
  void set_arg(size_t i, const T& v) {
    static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= 16, "kernel parameters are copied bytes");
    set_arg_bytes(i, &v, sizeof(T));
  }
  void set_arg_bytes(size_t i, const void* v, size_t size);
  size_t arg_count() const { return args_.size(); }
  // Marks the launch as a programmatic dependent launch (sm_90+): the kernel may be scheduled
  // while its predecessor in the stream still runs, so its source must call rlx_pdl_begin()
  // (kernels/prelude.h) before it touches memory that earlier work writes. Used when the work
  // issued just before it was one of rlx's kernel launches (see pdl_chain_break), on devices
  // and drivers that have it, with RLX_CUDA_PDL=all (see pdl_prefetch for the default).
  KernelLaunch& pdl() {
    pdl_ = true;
    return *this;
  }
  // pdl(), for a kernel that does useful work before its wait (loads of weights or a KV cache
  // that no kernel writes): by default only these launch early, since an early launch that only
  // waits holds multiprocessors (measured: BERT-base fp32 b1 11% slower with every launch
  // early, docs/backends/cuda.md). RLX_CUDA_PDL=all launches every pdl() kernel early.
  KernelLaunch& pdl_prefetch() {
    pdl_ = prefetch_ = true;
    return *this;
  }
  // Launches the grid in thread-block clusters of `x` blocks along x (sm_90+, through
  // cuLaunchKernelEx; grid_x must be a multiple of x). Sizes above 8 need the function's
  // non-portable cluster size attribute.
  KernelLaunch& cluster(unsigned x) {
    cluster_x_ = x;
    return *this;
  }
  // Issues the launch; a launch error becomes rlx::Error naming the kernel.
  void launch(cudaStream_t stream) const;
  // How many of this launch's clusters the device holds at once (-1: the driver cannot say).
  int max_active_clusters() const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  CUfunction fn_;
  unsigned grid_[3];
  unsigned block_;
  unsigned smem_;
  bool pdl_ = false, prefetch_ = false;
  unsigned cluster_x_ = 1;
  // The cuLaunchKernelEx configuration: grid, block, shared memory, and the attributes (written
  // into `attrs`) for a programmatic launch and for clusters.
  CUlaunchConfig config(CUstream stream, bool programmatic, CUlaunchAttribute (&attrs)[2]) const;
  std::vector<std::unique_ptr<uint8_t[]>> args_;
  std::vector<size_t> sizes_;
  mutable std::vector<void*> ptrs_;
};

// Programmatic dependent launch pairs only rlx kernels: whoever issues other work on the
// stream (a library call, a copy, an event) calls pdl_chain_break() after it, so the next
// launch waits for it the ordinary way. kernel_launches() counts this thread's launches, to
// tell whether an op issued any.
void pdl_chain_break();
uint64_t kernel_launches();

// Lets `fn` launch with `dynamic_bytes` of dynamic shared memory: past the 48 KiB every kernel may
// use, counting up to `static_bytes` of the kernel's own static shared memory, the function opts
// in (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES).
void allow_dynamic_smem(CUfunction fn, size_t dynamic_bytes, size_t static_bytes = 0);

// Grid size for a grid-stride loop over `work` items with `block` threads per block.
unsigned grid_for(int64_t work, unsigned block);

}  // namespace rlx::cuda
