// Host-side operations on CUDA device tensors (runtime/device_memory.h): Tensor::to_host and
// Tensor::ready_on.
#include "runtime/device_memory.h"

#include <cuda_runtime_api.h>

#include "backends/cuda/device.h"
#include "backends/cuda/status.h"

namespace rlx::cuda {

void copy_to_host(void* dst, const void* src, size_t bytes, std::optional<uintptr_t> producer) {
  device();  // "no CUDA device: ..." on a machine without one
  Stream s;
  if (producer) {
    Event ev(false);
    RLX_CUDA_CHECK(cudaEventRecord(ev.get(), reinterpret_cast<cudaStream_t>(*producer)));
    RLX_CUDA_CHECK(cudaStreamWaitEvent(s.get(), ev.get(), 0));
  }
  RLX_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s.get()));
  s.sync();
}

void stream_wait(uintptr_t producer, uintptr_t consumer) {
  device();
  Event ev(false);
  RLX_CUDA_CHECK(cudaEventRecord(ev.get(), reinterpret_cast<cudaStream_t>(producer)));
  RLX_CUDA_CHECK(cudaStreamWaitEvent(reinterpret_cast<cudaStream_t>(consumer), ev.get(), 0));
}

}  // namespace rlx::cuda
