#pragma once
// Host-side operations on device tensors (rlx/tensor.h: to_host, ready_on), defined by the
// backend of each device that has device tensors (CUDA: backends/cuda/device_memory.cpp), so
// that the Tensor type itself does not depend on a device library.
#include <cstddef>
#include <cstdint>
#include <optional>

namespace rlx {

#ifdef RLX_HAVE_CUDA
namespace cuda {
// Copies `bytes` of device memory at `src` to host memory at `dst`, after the work enqueued on
// `producer` (when given) has finished. rlx::Error when the device or the copy fails.
void copy_to_host(void* dst, const void* src, size_t bytes, std::optional<uintptr_t> producer);
// Work enqueued later on stream `consumer` waits for the work enqueued on `producer` so far.
void stream_wait(uintptr_t producer, uintptr_t consumer);
}  // namespace cuda
#endif

}  // namespace rlx
